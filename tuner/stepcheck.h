/* stepcheck.h — gcore-tune --model's step check. A winner is timed alone
 * (tuner/worker.c), but a decode step runs its kernels overlapped (PDL)
 * and side by side on the SMs, so a kernel faster alone can make the step
 * slower: a larger ring its neighbour no longer fits beside, a split that
 * keeps SMs from the next kernel. The check times the model's decode steps
 * with the template defaults, and with each winner of a step that differs
 * from its default in its place (the others at their defaults),
 * alternated: the single sequence's step (gc_llama_greedy, as gcore-run
 * decodes) and the batched steps of the workload's --batch rows
 * (gc_llama_decode_batch, as gcore-serve decodes). A winner of M > 1 rows
 * that its bundle also runs for the rows below M (gcore-gen's range entry
 * under M), where the defaults run another kernel, is timed in the batched
 * step of the fewest rows of that entry too. Where a step is slower with
 * the winner by more than the noise it records so, and which step
 * (tune.db's step_checks, its rows), and gcore-gen builds the default for
 * that problem. A winner no step launches here (a prefill's problem; a
 * kernel the step replaces, as argmax_step replaces argmax; the general
 * decode attention in a context too short for it), or whose bundle does
 * not serve it with that winner, is named and not timed. */
#ifndef GC_STEPCHECK_H
#define GC_STEPCHECK_H

#include "../gen/target.h"

typedef struct gc_step_opts {
  const char *model, *quantize;  /* as gcore-tune --model, --quantize */
  const char *prefill, *batch;   /* the workload's (the bundles serve its problems and needs) */
  const char *db_path, *cache, *templates_dir, *compiler;
  const gc_target_t *target;
  int ordinal;                   /* the device */
  int jobs;                      /* the bundles' parallel compiles (0: ninja's default) */
  double compile_timeout_s;      /* per compile (0: GC_COMPILE_TIMEOUT) */
  int prompt;                    /* prompt tokens before the timed steps */
  int steps;                     /* decode steps timed per run */
  int reps;                      /* runs of each bundle, alternated; the fastest counts */
  double max_loss;               /* a winner is refused where its fastest step takes more
                                    than (1 + max_loss) times the defaults' fastest, and
                                    more than their slowest */
} gc_step_opts_t;

/* gcore-tune's defaults: 16 prompt tokens, 64 steps, 2 runs, 0.5%. */
void gc_step_opts_default(gc_step_opts_t *o);

/* Check o->model's decode-step winners in o->db_path on the device (one
 * line each on stdout, and a row each timed in step_checks, all in one
 * transaction). Winners equal to their defaults are not timed. Errors: the
 * model's, the defaults' bundle's, the device's, the database's. */
int gc_step_check(const gc_step_opts_t *o, gc_err_t *e);

#endif
