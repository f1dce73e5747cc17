/* bundle_build.h — gcore-gen's work: for every problem × target, take the
 * tuned winner from tune.db (or the template default where none exists or
 * the winner's template changed), compile what is needed through the
 * compile driver, and write one bundle with the dispatch table and
 * provenance. Needs no device. */
#ifndef GC_BUNDLE_BUILD_H
#define GC_BUNDLE_BUILD_H

#include "../core/problem.h"

typedef struct gc_gen_opts {
  const char *db_path;        /* NULL: defaults only */
  const char *out_path;
  const char *targets;        /* comma-separated */
  const char *templates_dir;  /* NULL = embedded */
  const char *cache;
  const char *compiler;       /* NULL = each target's default driver; else the
                                 driver for the targets it serves (see
                                 gc_compiler_serves), the default for others */
  int code_object;            /* AMD code object version (0 = default, 5) */
  const char *force;          /* "TEMPLATE[:P=V,...]": use this variant where it applies */
  int jobs;
  double compile_timeout_s;   /* per compile; 0 = GC_COMPILE_TIMEOUT */
  int quiet;
  const char *const *meta;    /* more meta entries for the bundle's reader (a model's
                                 plan, models/recipe.h): key, value, ..., NULL; or NULL */
  /* NULL: every problem's winner, unless gcore-tune's step check found the
   * decode step slower with it (then the default). Else (the step check's
   * own bundles) winner_ok(winner_u, p) says whether p takes its winner,
   * whatever a step check said of it; where it says 0, the default. */
  int (*winner_ok)(void *winner_u, const gc_problem_t *p);
  void *winner_u;
} gc_gen_opts_t;

/* Build the bundle o->out_path for probs (exact entries) on every target,
 * so that every row range of needs (may be NULL) is served; a range no
 * template serves is GC_ENOTFOUND naming it, and nothing is written. */
int gc_gen_bundle(const gc_gen_opts_t *o, const gc_problems_t *probs, const gc_needs_t *needs,
                  gc_err_t *e);

#endif
