/* stepcheck.c — gcore-tune --model's step check (stepcheck.h). */
#include "stepcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../db/tunedb.h"
#include "../gen/bundle_build.h"
#include "../gen/template.h"
#include "../models/llama.h"
#include "../models/recipe.h"
#include "../models/weights.h"

void gc_step_opts_default(gc_step_opts_t *o) {
  o->prompt = 16;
  o->steps = 64;
  o->reps = 2;
  o->max_loss = 0.005;
}

/* A winner of the decode step that differs from its default. */
typedef struct cand {
  gc_problem_t p;
  gc_db_winner_t w;
  char dflt[600]; /* the default: "template params" */
} cand_t;

/* The bundle's problems: all (winner_u NULL: defaults only) or only one
 * takes its winner. */
static int winner_ok(void *u, const gc_problem_t *p) {
  char a[GC_PROBLEM_KEY], b[GC_PROBLEM_KEY];
  if (!u) return 0;
  gc_problem_key(p, a);
  gc_problem_key((const gc_problem_t *)u, b);
  return !strcmp(a, b);
}

/* The decode step's winners (batch 1, one sequence: the ops only batched
 * steps run are not timed here) that differ from their template defaults,
 * into *out (n of them; free). */
static int candidates(const gc_step_opts_t *o, cand_t **out, int *n, gc_err_t *e) {
  gc_problems_t dp = {0};
  gc_templates_t tpls = {0};
  gc_db_t *db = NULL;
  *out = NULL;
  *n = 0;
  int rc = gc_llama_workload(o->model, o->quantize, "none", "1", 1, o->target->backend, &dp, NULL, NULL, e);
  if (!rc) rc = gc_tpl_load_all(o->templates_dir, &tpls, e);
  if (!rc) rc = gc_db_open(o->db_path, 0, &db, e);
  if (!rc && !(*out = gc_calloc((size_t)dp.n + 1, sizeof **out, e))) rc = GC_ENOMEM;
  for (int i = 0; !rc && i < dp.n; i++) {
    const gc_problem_t *p = &dp.v[i];
    cand_t *c = &(*out)[*n];
    int found = 0;
    gc_variant_t v;
    if (!strcmp(p->op, "rope_kv_batch") || !strcmp(p->op, "attention_batch")) continue;
    if ((rc = gc_db_find_winner(db, o->target->name, p, &c->w, &found, e)) || !found) continue;
    const gc_template_t *t = gc_tpl_find(&tpls, c->w.template_name);
    if (!t || strcmp(t->hash, c->w.template_hash)) continue; /* stale: gcore-gen builds the default */
    if ((rc = gc_tpl_pick_default(&tpls, o->target, p, &v, e))) break;
    if (!strcmp(v.tpl->name, c->w.template_name) && !strcmp(v.params, c->w.params)) continue;
    c->p = *p;
    snprintf(c->dflt, sizeof c->dflt, "%s %s", v.tpl->name, v.params);
    (*n)++;
  }
  gc_db_close(db);
  gc_tpl_free_all(&tpls);
  gc_problems_free(&dp);
  return rc;
}

/* The bundle at path: the workload's problems, p's winner (NULL: none). */
static int build(const gc_step_opts_t *o, const gc_problems_t *probs, const gc_needs_t *needs,
                 const char *const *meta, const gc_problem_t *p, const char *path, gc_err_t *e) {
  gc_gen_opts_t g = {0};
  g.db_path = o->db_path;
  g.out_path = path;
  g.targets = o->target->name;
  g.templates_dir = o->templates_dir;
  g.cache = o->cache;
  g.compiler = o->compiler;
  g.code_object = o->target->code_object;
  g.quiet = 1;
  g.meta = meta;
  g.winner_ok = winner_ok;
  g.winner_u = (void *)p;
  return gc_gen_bundle(&g, probs, needs, e);
}

/* µs a decode step of w on dev with the bundle at path: after a prompt of
 * np tokens (one at a time: the bundle may serve no prefill) and 8 steps,
 * steps greedy steps timed. */
static int time_step(gc_dev_t *dev, const gc_llama_weights_t *w, const char *path, int np, int steps,
                     double *us, gc_err_t *e) {
  gc_rt_t *rt = NULL;
  gc_llama_t *m = NULL;
  int32_t *toks = gc_malloc((size_t)np * sizeof *toks, e);
  float *lg = gc_malloc((size_t)w->cfg.vocab_size * sizeof *lg, e);
  int rc = toks && lg ? GC_OK : GC_ENOMEM, n = 0;
  for (int i = 0; toks && i < np; i++) toks[i] = (int32_t)(1 + (7 * i) % (w->cfg.vocab_size - 1));
  if (!rc) rc = gc_rt_open(dev, path, &rt, e);
  if (!rc) rc = gc_llama_create(dev, rt, w, np + steps + 16, 1, &m, e);
  for (int i = 0; !rc && i < np; i++) rc = gc_llama_forward(m, toks + i, 1, 0, lg, e);
  if (!rc) rc = gc_llama_greedy(m, toks[np - 1], 8, gc_llama_count_ids, &n, e);
  double t0 = gc_now();
  if (!rc) rc = gc_llama_greedy(m, toks[np - 1], steps, gc_llama_count_ids, &n, e);
  *us = (gc_now() - t0) * 1e6 / steps;
  gc_llama_free(m);
  gc_rt_close(rt);
  free(toks);
  free(lg);
  return rc;
}

/* The prompt before c's timed steps: past the short-context bucket for the
 * general decode attention (k = 0: the bucket's kernel is k = GC_LLAMA_ATTN_SHORT),
 * where the model reaches it; else o->prompt. */
static int prompt_for(const gc_step_opts_t *o, const gc_llama_config_t *cfg, const gc_problem_t *p) {
  int longer = GC_LLAMA_ATTN_SHORT + 1;
  if (!strcmp(p->op, "attention") && p->k == 0 && longer + o->steps + 16 <= cfg->max_seq) return longer;
  return o->prompt < cfg->max_seq / 4 ? o->prompt : 1;
}

/* The runs of one prompt length np: o->reps rounds of the defaults
 * (dpath) then each candidate i with prompt[i] == np (its bundle cpath[i]),
 * so that every weight upload serves one timing; each candidate's fastest
 * into c_us[i], the defaults' fastest and slowest into d_us[i], d_max[i]. */
static int time_group(const gc_step_opts_t *o, gc_dev_t *dev, const gc_llama_weights_t *w, int n,
                      const int *prompt, int np, const char *dpath, char (*cpath)[1200], double *d_us,
                      double *c_us, double *d_max, gc_err_t *e) {
  const int room = w->cfg.max_seq - np - 16, steps = o->steps < room ? o->steps : room > 1 ? room : 1;
  double lo = 0, hi = 0;
  for (int r = 0; r < o->reps; r++) {
    double t;
    if (time_step(dev, w, dpath, np, steps, &t, e)) return e->code;
    if (!r || t < lo) lo = t;
    if (t > hi) hi = t;
    for (int i = 0; i < n; i++) {
      if (prompt[i] != np) continue;
      if (time_step(dev, w, cpath[i], np, steps, &t, e)) return e->code;
      if (!r || t < c_us[i]) c_us[i] = t;
    }
  }
  for (int i = 0; i < n; i++)
    if (prompt[i] == np) d_us[i] = lo, d_max[i] = hi;
  return GC_OK;
}

int gc_step_check(const gc_step_opts_t *o, gc_err_t *e) {
  cand_t *cs = NULL;
  gc_llama_weights_t *w = NULL;
  int n = 0, rc = gc_weights_open(o->model, &w, e);
  if (!rc && w->cfg.max_seq < 48) { /* a prompt token, 8 warm-up steps and 16 of slack leave too few to time */
    printf("step check: the model's context of %d positions is too short to time decode steps in; skipped\n",
           w->cfg.max_seq);
    gc_weights_close(w);
    return GC_OK;
  }
  if (!rc) rc = candidates(o, &cs, &n, e);
  if (rc || !n) {
    if (!rc) printf("step check: every winner of the decode step is its template's default\n");
    gc_weights_close(w);
    free(cs);
    return rc;
  }
  const double t0 = gc_now();
  int refused = 0;
  gc_problems_t probs = {0};
  gc_needs_t needs = {0};
  gc_llama_plan_t plan = {.db = o->db_path, .target = strcmp(o->target->backend, "cpu") ? o->target->name : NULL,
                          .force = -1};
  gc_dev_t *dev = NULL;
  gc_db_t *db = NULL;
  char dir[1100], dpath[1200], (*cpath)[1200] = gc_calloc((size_t)n, sizeof *cpath, e);
  int *prompt = gc_calloc((size_t)n, sizeof *prompt, e);
  double *t = gc_calloc((size_t)n * 3, sizeof *t, e), *d_us = t, *c_us = t ? t + n : NULL, *d_max = t ? t + 2 * n : NULL;
  if (!cpath || !prompt || !t) rc = GC_ENOMEM;
  snprintf(dir, sizeof dir, "%s/stepcheck", o->cache);
  snprintf(dpath, sizeof dpath, "%s/%d-defaults.gcb", dir, (int)getpid());
  if (!rc) rc = gc_llama_workload(o->model, o->quantize, o->prefill, o->batch, 1, o->target->backend, &probs,
                                  &needs, &plan, e);
  if (!rc) rc = gc_mkdirs(dir, e);
  if (!rc && o->quantize) rc = gc_weights_quantize(w, o->quantize, e);
  if (!rc) rc = gc_dev_open(o->target->backend, o->ordinal, &dev, e);
  if (!rc) rc = build(o, &probs, &needs, plan.meta, NULL, dpath, e);
  for (int i = 0; !rc && i < n; i++) {
    snprintf(cpath[i], sizeof cpath[i], "%s/%d-winner%d.gcb", dir, (int)getpid(), i);
    prompt[i] = prompt_for(o, &w->cfg, &cs[i].p);
    rc = build(o, &probs, &needs, plan.meta, &cs[i].p, cpath[i], e);
  }
  if (!rc)
    printf("step check: %d winners of the decode step differ from their defaults; each timed in the step "
           "(%d runs of up to %d steps) against the defaults\n", n, o->reps, o->steps);
  for (int i = 0; !rc && i < n; i++) /* each prompt length once, at its first candidate */
    if (!d_us[i]) rc = time_group(o, dev, w, n, prompt, prompt[i], dpath, cpath, d_us, c_us, d_max, e);
  if (!rc) rc = gc_db_open(o->db_path, 1, &db, e);
  for (int i = 0; !rc && i < n; i++) {
    const cand_t *c = &cs[i];
    char key[GC_PROBLEM_KEY];
    gc_problem_key(&c->p, key);
    /* refused: its fastest run slower than every run of the defaults, by more than max_loss */
    int kept = c_us[i] <= d_us[i] * (1 + o->max_loss) || c_us[i] <= d_max[i];
    rc = gc_db_record_step_check(db, c->w.measurement_id, o->target->name, o->model, d_us[i], c_us[i], kept, e);
    printf("  %s: %s %s: %.2f us a step against %.2f with the default (%s): %s\n", key, c->w.template_name,
           c->w.params, c_us[i], d_us[i], c->dflt,
           kept ? "kept" : "slower in the step: gcore-gen builds the default");
    refused += !kept;
  }
  if (!rc) printf("step check: %d of %d winners kept, %d refused (%.0f s)\n", n - refused, n, refused, gc_now() - t0);
  unlink(dpath);
  for (int i = 0; cpath && i < n; i++)
    if (cpath[i][0]) unlink(cpath[i]);
  free(cpath);
  free(prompt);
  free(t);
  gc_db_close(db);
  gc_dev_close(dev);
  gc_weights_close(w);
  gc_problems_free(&probs);
  gc_needs_free(&needs);
  free(cs);
  return rc;
}
