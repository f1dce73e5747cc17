/* defaults.c — the untuned-default heuristic for AMD targets (the rules
 * are in defaults.h). */
#include "defaults.h"

#include <string.h>

typedef struct fit {
  int wave_ok;  /* block threads a multiple of WARP */
  double fill;  /* min(workgroups, NCU) / NCU */
  int dist;     /* parameters changed from the defaults */
} fit_t;

typedef struct arch {
  int64_t ncu, warp, smem;
} arch_t;

/* *usable = 1 and f filled when v is a point the heuristic may choose.
 * Expressions that fail to evaluate at an odd point make it unusable. */
static void rate(const arch_t *a, const gc_target_t *tg, const gc_problem_t *p,
                 const gc_variant_t *v, int *usable, fit_t *f) {
  gc_err_t e = {0};
  gc_env_t env;
  int64_t grid[3], block[3], shmem = 0;
  int valid = 0, applies = 0;
  *usable = 0;
  if (gc_tpl_valid(v, tg, &valid, NULL, &e) || !valid ||
      gc_tpl_applies(v, tg, p, &applies, &e) || !applies ||
      gc_tpl_launch(v, tg, p, grid, block, &e) || gc_tpl_env(v, tg, p, &env, &e) ||
      gc_expr_eval(v->tpl->shmem[0] ? v->tpl->shmem : "0", &env, &shmem, &e))
    return;
  int64_t threads = block[0] * block[1] * block[2], wgs = grid[0] * grid[1] * grid[2];
  if (threads <= 0 || wgs <= 0 || shmem > a->smem) return;
  f->wave_ok = threads % a->warp == 0;
  f->fill = (double)(wgs < a->ncu ? wgs : a->ncu) / (double)a->ncu;
  *usable = 1;
}

static int better(const fit_t *x, const fit_t *y) {
  if (x->wave_ok != y->wave_ok) return x->wave_ok > y->wave_ok;
  if (x->fill != y->fill) return x->fill > y->fill;
  return x->dist < y->dist;
}

/* Rate candidate c (dist changes from the defaults); keep it in best. */
static void consider(const arch_t *a, const gc_target_t *tg, const gc_problem_t *p,
                     gc_variant_t *c, int dist, gc_variant_t *best, fit_t *bf, int *have) {
  fit_t f;
  int usable;
  gc_tpl_refresh(c);
  rate(a, tg, p, c, &usable, &f);
  f.dist = dist;
  if (usable && (!*have || better(&f, bf))) {
    *best = *c;
    *bf = f;
    *have = 1;
  }
}

int gc_default_fit(const gc_target_t *tg, const gc_problem_t *p, gc_variant_t *v,
                   gc_err_t *e) {
  (void)e;
  arch_t a = {0, 32, 0};
  if (!gc_env_get(&tg->consts, "NCU", &a.ncu) || a.ncu <= 0) return GC_OK;
  gc_env_get(&tg->consts, "WARP", &a.warp);
  gc_env_get(&tg->consts, "SMEM", &a.smem);
  const gc_template_t *t = v->tpl;
  gc_variant_t best = *v, c;
  fit_t bf;
  int have = 0;
  c = *v;
  consider(&a, tg, p, &c, 0, &best, &bf, &have);
  for (int i = 0; i < t->nparams; i++)
    for (int vi = 0; vi < t->params[i].nvalues; vi++) {
      if (t->params[i].values[vi] == v->values[i]) continue;
      c = *v;
      c.values[i] = t->params[i].values[vi];
      consider(&a, tg, p, &c, 1, &best, &bf, &have);
      for (int j = i + 1; j < t->nparams; j++)
        for (int vj = 0; vj < t->params[j].nvalues; vj++) {
          if (t->params[j].values[vj] == v->values[j]) continue;
          gc_variant_t d = c;
          d.values[j] = t->params[j].values[vj];
          consider(&a, tg, p, &d, 2, &best, &bf, &have);
        }
    }
  if (have) *v = best;
  return GC_OK;
}
