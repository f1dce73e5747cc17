/* dispatch.c — bundle → kernels on a device. Code objects are loaded once
 * per bundle and shared by every entry that names them. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

/* A problem found before, and its kernel. */
typedef struct found {
  gc_problem_t p;
  gc_rt_kernel_t *k;
} found_t;

typedef struct loaded_code {
  int64_t code_id;
  gc_module_t *mod;
} loaded_code_t;

struct gc_rt {
  gc_dev_t *dev;
  gc_bundle_t *b;
  char target[64];
  loaded_code_t *codes;
  int ncodes;
  gc_rt_kernel_t **kernels; /* loaded entries, by pointer so they stay put */
  int nkernels;
  found_t *found;           /* every problem found, so that the bundle is asked once */
  int nfound;
  int pdl; /* @pdl kernels overlap their predecessors (gc_rt_set_pdl) */
};

/* Of the bundle's targets, the one dev runs best: the device's own target
 * if present, else the last (highest) one it can run. */
static int pick_target(gc_rt_t *rt, const char *path, gc_err_t *e) {
  char *list = gc_bundle_targets(rt->b, e);
  if (!list) return e->code;
  const gc_dev_info_t *in = gc_dev_info(rt->dev);
  rt->target[0] = 0;
  char *save = NULL;
  for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!gc_dev_runs_target(rt->dev, t)) continue;
    snprintf(rt->target, sizeof rt->target, "%s", t);
    if (!strcmp(t, in->target)) break;
  }
  int rc = GC_OK;
  if (!rt->target[0]) {
    char *again = gc_bundle_targets(rt->b, NULL);
    rc = gc_err_set(e, GC_EUNSUPPORTED,
                    "%s has no code for this device (%s, %s); it has: %s. Build one with: "
                    "gcore-gen --target %s ...",
                    path, in->target, in->name, again && *again ? again : "nothing",
                    in->target);
    free(again);
  }
  free(list);
  return rc;
}

int gc_rt_open(gc_dev_t *dev, const char *bundle_path, gc_rt_t **out, gc_err_t *e) {
  *out = NULL;
  gc_rt_t *rt = gc_calloc(1, sizeof *rt, e);
  if (!rt) return GC_ENOMEM;
  rt->dev = dev;
  rt->pdl = 1;
  if (gc_bundle_open(bundle_path, &rt->b, e) || pick_target(rt, bundle_path, e)) {
    gc_rt_close(rt);
    return e->code;
  }
  *out = rt;
  return GC_OK;
}

void gc_rt_set_pdl(gc_rt_t *rt, int on) {
  rt->pdl = on;
  for (int i = 0; i < rt->nkernels; i++)
    if (rt->kernels[i]->d.pdl) gc_dev_kernel_pdl(rt->dev, rt->kernels[i]->k, on);
}

void gc_rt_close(gc_rt_t *rt) {
  if (!rt) return;
  for (int i = 0; i < rt->nkernels; i++) {
    free(rt->kernels[i]->k);
    free(rt->kernels[i]);
  }
  free(rt->kernels);
  free(rt->found);
  for (int i = 0; i < rt->ncodes; i++) gc_dev_module_unload(rt->dev, rt->codes[i].mod);
  free(rt->codes);
  gc_bundle_close(rt->b);
  free(rt);
}

const char *gc_rt_target(const gc_rt_t *rt) { return rt->target; }
gc_bundle_t *gc_rt_bundle(gc_rt_t *rt) { return rt->b; }

static int module_for(gc_rt_t *rt, int64_t code_id, gc_module_t **mod, gc_err_t *e) {
  for (int i = 0; i < rt->ncodes; i++)
    if (rt->codes[i].code_id == code_id) {
      *mod = rt->codes[i].mod;
      return GC_OK;
    }
  void *blob;
  size_t n;
  if (gc_bundle_code(rt->b, code_id, &blob, &n, e)) return e->code;
  loaded_code_t *v = gc_realloc(rt->codes, (size_t)(rt->ncodes + 1) * sizeof *v, e);
  int rc = v ? gc_dev_module_load(rt->dev, blob, n, mod, e) : GC_ENOMEM;
  free(blob);
  if (!v) return rc;
  rt->codes = v;
  if (rc) return gc_err_prefix(e, "%s", gc_bundle_path(rt->b));
  rt->codes[rt->ncodes++] = (loaded_code_t){code_id, *mod};
  return GC_OK;
}

static int same_problem(const gc_problem_t *a, const gc_problem_t *b) {
  if (strcmp(a->op, b->op) || a->ta != b->ta || a->tb != b->tb || a->tc != b->tc) return 0;
  for (int i = 0; i < GC_NDIMS; i++)
    if (gc_problem_get(a, i) != gc_problem_get(b, i)) return 0;
  return 1;
}

/* The loaded kernel of entry d, loading it on first use. */
static int load_entry(gc_rt_t *rt, const gc_dispatch_t *d, gc_rt_kernel_t **out, gc_err_t *e) {
  for (int i = 0; i < rt->nkernels; i++)
    if (rt->kernels[i]->d.id == d->id) {
      *out = rt->kernels[i];
      return GC_OK;
    }
  gc_rt_kernel_t *k = gc_calloc(1, sizeof *k, e);
  if (!k) return GC_ENOMEM;
  gc_module_t *mod;
  gc_rt_kernel_t **v = NULL;
  k->d = *d;
  if (gc_env_parse(&k->consts, k->d.consts, e) || module_for(rt, k->d.code_id, &mod, e) ||
      gc_dev_kernel(rt->dev, mod, k->d.symbol, &k->k, e) ||
      !(v = gc_realloc(rt->kernels, (size_t)(rt->nkernels + 1) * sizeof *v, e))) {
    free(k->k);
    free(k);
    return e->code;
  }
  if (k->d.pdl && rt->pdl) gc_dev_kernel_pdl(rt->dev, k->k, 1);
  rt->kernels = v;
  rt->kernels[rt->nkernels++] = k;
  *out = k;
  return GC_OK;
}

/* A problem seen before gets the kernel found then; a new one asks the
 * bundle, which picks the narrowest entry containing its m (a loaded
 * catch-all must not shadow a narrower tuned entry not loaded yet). */
int gc_rt_find(gc_rt_t *rt, const gc_problem_t *p, const gc_rt_kernel_t **out,
               gc_err_t *e) {
  for (int i = rt->nfound - 1; i >= 0; i--)
    if (same_problem(&rt->found[i].p, p)) {
      *out = rt->found[i].k;
      return GC_OK;
    }
  gc_dispatch_t d;
  gc_rt_kernel_t *k = NULL;
  if (gc_bundle_lookup(rt->b, rt->target, p, &d, e) || load_entry(rt, &d, &k, e)) return e->code;
  found_t *v = gc_realloc(rt->found, (size_t)(rt->nfound + 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  rt->found = v;
  rt->found[rt->nfound++] = (found_t){*p, k};
  *out = k;
  return GC_OK;
}

static int same_dims(const gc_problem_t *a, const gc_problem_t *b) {
  for (int i = 0; i < GC_NDIMS; i++)
    if (gc_problem_get(a, i) != gc_problem_get(b, i)) return 0;
  return 1;
}

/* Evaluate k's grid, block and shared memory for p into k. (The entry fixes
 * op and dtypes; only the dimensions can change between launches.) */
static int geometry(gc_rt_t *rt, gc_rt_kernel_t *k, const gc_problem_t *p, gc_err_t *e) {
  gc_env_t env = k->consts;
  k->geom_valid = 0;
  k->shmem = 0;
  if (gc_env_set_dims(&env, p, e) ||
      gc_env_set_sms(&env, gc_dev_info(rt->dev)->compute_units, e) ||
      gc_expr_eval3(k->d.grid, &env, k->grid, e) ||
      gc_expr_eval3(k->d.block, &env, k->block, e) || gc_expr_eval(k->d.shmem, &env, &k->shmem, e) ||
      gc_tmaps_plan(k->d.tmaps, &env, p, &k->tmaps, e))
    return gc_err_prefix(e, "%s: dispatch entry %lld", gc_bundle_path(rt->b),
                         (long long)k->d.id);
  if (k->shmem < 0 || k->shmem > (1 << 24))
    return gc_err_set(e, GC_ECORRUPT, "%s: dispatch entry %lld asks for %lld bytes of shared memory",
                      gc_bundle_path(rt->b), (long long)k->d.id, (long long)k->shmem);
  k->geom_for = *p;
  k->geom_valid = 1;
  return GC_OK;
}

int gc_rt_launch_window(gc_rt_t *rt, const gc_rt_kernel_t *kc, const gc_problem_t *p,
                        void **args, gc_dptr_t pf, int64_t n, gc_err_t *e) {
  gc_rt_kernel_t *k = (gc_rt_kernel_t *)kc; /* the geometry cache is ours to update */
  void **a;
  if (gc_window_check(pf, n, e) || (!(k->geom_valid && same_dims(&k->geom_for, p)) && geometry(rt, k, p, e)) ||
      gc_tmaps_args(rt->dev, &k->tmaps, args, &a, e))
    return e->code;
  gc_window_args_t w;
  if (k->d.prefetch && gc_window_args(a, gc_tmaps_nargs(&k->tmaps, a), pf, n, &w, &a, e)) return e->code;
  return gc_dev_launch(rt->dev, k->k, k->grid, k->block, (size_t)k->shmem, a, e);
}

int gc_rt_launch(gc_rt_t *rt, const gc_rt_kernel_t *k, const gc_problem_t *p,
                 void **args, gc_err_t *e) {
  return gc_rt_launch_window(rt, k, p, args, 0, 0, e);
}
