/* tune.h — a tuning sweep: for each problem, enumerate every applicable
 * template's space, prune by constraints, compile through the driver,
 * measure each candidate in the worker, record everything in tune.db and
 * pick a winner. Resumable: what the database holds for this device and
 * compiler is not measured again. */
#ifndef GC_TUNE_H
#define GC_TUNE_H

#include "../core/problem.h"
#include "../gen/target.h"
#include "../runtime/check.h"

typedef struct gc_tune_opts {
  const char *db_path;
  const char *templates_dir;  /* NULL = embedded */
  const char *cache;          /* compile cache directory */
  const char *compiler;       /* NULL = default for the target */
  const char *only_template;  /* restrict to one template, or NULL */
  gc_target_t target;
  int ordinal;                /* device ordinal */
  int64_t budget_n;           /* candidates per problem, earlier runs' included; 0 = no cap */
  double budget_s;            /* seconds for the whole run, shared (gc_tune_run); 0 = no cap */
  double timeout_s;           /* per candidate */
  double compile_timeout_s;   /* per compile; 0 = GC_COMPILE_TIMEOUT */
  double margin;              /* winner noise margin (fraction) */
  int jobs;                   /* parallel compiles; 0 = ninja default */
  int progress;               /* 1 = live progress line on stderr */
  int strategy;               /* GC_SEARCH_* */
  gc_time_opts_t timing;
} gc_tune_opts_t;

/* Candidates per problem when no --budget is given: a sweep that ends in
 * minutes on any problem (--budget all walks the whole space). */
#define GC_TUNE_DEFAULT_BUDGET 16

/* Search strategies: the order in which a budget spends its candidates.
 * Both measure the templates' defaults first. random: the rest of the
 * space in a shuffled order. local: then, repeatedly, the untried
 * one-parameter neighbours of the fastest points so far (hill climbing
 * from several starts at once; of a point, the nearest values of every
 * parameter in declaration order before any farther value), topped up
 * with shuffled points when the
 * neighbourhoods run dry; found-fraction figures in bench/RESULTS.md. */
enum { GC_SEARCH_RANDOM = 0, GC_SEARCH_LOCAL = 1 };

/* --shard I/N: the I-th (1-based) of N slices of a workload, so that N
 * machines of one kind tune one model together: problem j goes to slice
 * j % N + 1, as --devices deals problems to devices. The slices are
 * disjoint and cover probs; each problem is swept whole on one machine, so
 * the databases merged (gcore-tune --merge) hold what one machine's sweep
 * of the whole workload would. Appends the slice to out. */
int gc_tune_shard(const gc_problems_t *probs, int i, int n, gc_problems_t *out, gc_err_t *e);

/* Run the sweep. Prints one summary line per problem to stdout. With a
 * time budget, every problem's template defaults are measured first, then
 * the time left is shared out problem by problem. Errors:
 * no device, database unusable, templates malformed, no variant at all
 * satisfying the constraints for a problem. */
int gc_tune_run(const gc_tune_opts_t *o, const gc_problems_t *probs, gc_err_t *e);

#endif
