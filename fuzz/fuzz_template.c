/* fuzz_template.c — the input as a kernel template (gen/template.h):
 * parsed as gcore-tune --templates DIR parses each file, then used as the
 * sweep and gcore-gen use a template: for each of its ops and dtypes on a
 * target of its backend, the default variant (constraints, @applies,
 * launch geometry, tensor maps); for the first of them also a walk over
 * the first points of its space, the nearest usable variant and the
 * untuned pick (small spaces only: their search is bounded by the space,
 * not by the input), and the expanded source. */
#include <string.h>

#include "fuzz.h"
#include "../gen/template.h"
#include "../runtime/tmap.h"

static gc_templates_t fz_builtin; /* the preludes expansion needs */
static gc_target_t fz_targets[3]; /* cpu:x86-64-v3, sm_90a, gfx942 */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gc_err_t e;
  static const char *const names[3] = {"cpu:x86-64-v3", "sm_90a", "gfx942"};
  for (int i = 0; i < 3; i++)
    if (gc_target_parse(names[i], &fz_targets[i], &e)) __builtin_trap();
  if (gc_tpl_load_all(NULL, &fz_builtin, &e)) __builtin_trap();
  return 0;
}

static const gc_target_t *fz_target_for(const gc_template_t *t) {
  return !strcmp(t->backend, "cpu") ? &fz_targets[0] : !strcmp(t->backend, "hip") ? &fz_targets[2]
                                                                                   : &fz_targets[1];
}

/* The problem of op with dtypes dt and small, valid dimensions. */
static int fz_problem(const char *op, const gc_dtype_t dt[3], gc_problem_t *p) {
  static const int64_t dims[GC_NDIMS] = {16, 64, 64, 8, 2, 64};
  memset(p, 0, sizeof *p);
  snprintf(p->op, sizeof p->op, "%s", op);
  p->ta = dt[0], p->tb = dt[1], p->tc = dt[2];
  const gc_op_t *d = gc_op_find(op);
  if (!d) return 0;
  for (int i = 0; i < GC_NDIMS; i++)
    if (strchr(d->dims, gc_dim_letters[i])) *gc_problem_dim(p, i) = dims[i];
  return 1;
}

/* One variant through what the sweep asks of it. */
static void fz_variant(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p) {
  gc_err_t e;
  int ok;
  const char *why;
  int64_t grid[3], block[3], shmem;
  char consts[1024];
  gc_env_t env;
  gc_tmaps_t tm;
  if (fz_report("variant", gc_tpl_valid(v, tg, &ok, &why, &e) || gc_tpl_applies(v, tg, p, &ok, &e) ||
      gc_tpl_launch(v, tg, p, grid, block, &e) || gc_tpl_consts_text(v, tg, consts, sizeof consts, &e) ||
      gc_tpl_env(v, tg, p, &env, &e) || gc_expr_eval(v->tpl->shmem, &env, &shmem, &e), &e))
    return;
  char tmaps[GC_TMAPS_MAX * GC_TMAP_LINE];
  gc_tpl_tmaps_text(v->tpl, tmaps, sizeof tmaps);
  fz_report("tensor maps", gc_tmaps_plan(tmaps, &env, p, &tm, &e), &e);
}

/* The expanded source of v, as the compile step writes it. */
static void fz_expand(const gc_template_t *t, const gc_variant_t *v, const gc_target_t *tg) {
  gc_err_t e;
  gc_templates_t set = fz_builtin; /* its preludes, t as the only template */
  set.v = (gc_template_t *)t;
  set.n = 1;
  gc_buf_t src = {0};
  char vid[GC_HASH_HEX];
  fz_report("expand", gc_tpl_expand(&set, v, tg, "cc fuzz", &src, vid, &e), &e);
  gc_buf_free(&src);
  gc_variant_t d;
  int ok;
  gc_problem_t p;
  if (gc_tpl_space_size(t) <= 256 && fz_problem(v->op, (gc_dtype_t[3]){v->ta, v->tb, v->tc}, &p) &&
      gc_tpl_nearest(t, tg, &p, &d, &ok, &e) == GC_OK)
    (void)gc_tpl_pick_default(&set, tg, &p, &d, &e);
}

/* Every op and dtype of t through the default variant; the first that t
 * supports also through expansion, the untuned pick and the first points
 * of the space (the rest would repeat the same code with other numbers). */
static void fz_use(const gc_template_t *t) {
  const gc_target_t *tg = fz_target_for(t);
  int first = 1;
  for (int o = 0; o < t->nops; o++)
    for (int d = 0; d < t->ndtypes; d++) {
      gc_problem_t p;
      gc_variant_t v;
      gc_err_t e;
      if (!fz_problem(t->ops[o], t->dtypes[d], &p) || !gc_tpl_supports(t, &p)) continue;
      gc_tpl_default(t, tg, &p, &v); /* its conditional @defaults evaluated there */
      fz_variant(&v, tg, &p);
      if (!first) continue;
      first = 0;
      if (t->nparams) {
        char text[64];
        snprintf(text, sizeof text, "%s=%lld", t->params[0].name, (long long)t->params[0].values[0]);
        (void)gc_tpl_set_params(t, text, &v, &e);
      }
      fz_expand(t, &v, tg);
      for (int64_t i = 0, n = gc_tpl_space_size(t); i < n && i < 8; i++) {
        gc_tpl_nth(t, &p, i, &v);
        fz_variant(&v, tg, &p);
      }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gc_err_t e;
  gc_template_t t;
  if (fz_report("template", gc_tpl_parse("templates/cpu/fuzz.c", (const char *)data, size, &t, &e), &e) == GC_OK)
    fz_use(&t);
  gc_tpl_free(&t);
  return 0;
}
