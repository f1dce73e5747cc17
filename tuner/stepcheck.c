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
#include "../runtime/dispatch.h"
#include "../runtime/profile.h"

void gc_step_opts_default(gc_step_opts_t *o) {
  o->prompt = 16;
  o->steps = 64;
  o->reps = 2;
  o->max_loss = 0.005;
}

/* The slots of a batched step's rows: row i is slot i. */
static const int slot_of_row[GC_LLAMA_BATCH_MAX] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
_Static_assert(GC_LLAMA_BATCH_MAX == 16, "slot_of_row names every row of a batch");

/* Positions of a step's context past its prompt and timed steps: 8
 * warm-up steps and 16 spare. */
#define SLACK 24

/* A winner that differs from its default, and the decode step it is timed
 * in: rows 0, gcore-run's single-sequence step (gc_llama_greedy); rows M,
 * gcore-serve's batched step of M rows (gc_llama_decode_batch). A winner
 * of M > 1 rows also serves the rows below M down to the previous listed
 * row count (gcore-gen's range entry under its exact one): a second
 * candidate, its `below`, times it in the batched step of the fewest rows
 * that entry serves (of = the winner's index; -1 for a winner's own). */
typedef struct cand {
  gc_problem_t p;       /* the problem at the step's rows (a below's: m = its rows) */
  gc_db_winner_t w;
  char dflt[600];       /* the default: "template params" */
  int rows, prompt;     /* the step; tokens in each sequence before its timed steps */
  int of, below;        /* the winner this times below M (-1: none); its below (-1: none) */
  char path[1200];      /* its bundle ("" before it is built; a below's is its winner's) */
  char skip[400];       /* why it is not timed, "": timed */
  double us, d_us, d_max; /* its fastest step; the defaults' fastest and slowest beside it */
} cand_t;

typedef struct check {
  const gc_step_opts_t *o;
  const gc_llama_weights_t *w;
  gc_dev_t *dev;
  gc_problems_t probs;  /* the bundles' problems and needs: the workload's */
  gc_needs_t needs;
  gc_llama_plan_t plan;
  char dpath[1200];     /* the defaults' bundle */
  cand_t *c;
  int n;
  struct { /* the launches of each step profiled (launched) */
    int rows, np;
    gc_prof_t *prof;
  } seen[2 * (GC_LLAMA_BATCH_MAX + 2)];
  int nseen;
  struct { /* the model every run of one step uses (step_model), one at a time */
    gc_rt_t *drt;        /* the defaults' bundle, which it serves with between runs */
    gc_llama_t *m;       /* NULL: none yet */
    int rows, np, steps; /* its step, and the steps timed in it */
  } on;
} check_t;

/* The bundle's problems: all (winner_u NULL: defaults only) or only one
 * takes its winner. */
static int winner_ok(void *u, const gc_problem_t *p) {
  char a[GC_PROBLEM_KEY], b[GC_PROBLEM_KEY];
  if (!u) return 0;
  gc_problem_key(p, a);
  gc_problem_key((const gc_problem_t *)u, b);
  return !strcmp(a, b);
}

/* The step a problem of m rows can run in: m = 1 the single sequence's
 * (or, where that does not launch it, the batched step of one row), m = 2
 * .. GC_LLAMA_BATCH_MAX the batched step of m rows; -1: none. */
static int rows_for(const gc_problem_t *p) {
  return p->m == 1 ? 0 : p->m <= GC_LLAMA_BATCH_MAX ? (int)p->m : -1;
}

/* The prompt before a step's timed runs: o->prompt, or one token in a
 * short context. */
static int short_prompt(const gc_step_opts_t *o, const gc_llama_config_t *cfg) {
  return o->prompt < cfg->max_seq / 4 ? o->prompt : 1;
}

/* The prompt before p's timed steps: past the short-context bucket for the
 * general decode attention (k = 0: the bucket's kernel is k =
 * GC_LLAMA_ATTN_SHORT; m = 1: a prefill's runs in no decode step), where
 * the model reaches it (else no step here
 * launches it: place() says so); else short_prompt. */
static int prompt_for(const gc_step_opts_t *o, const gc_llama_config_t *cfg, const gc_problem_t *p) {
  int longer = GC_LLAMA_ATTN_SHORT + 1;
  if (!strcmp(p->op, "attention") && p->m == 1 && p->k == 0 && longer + o->steps + SLACK <= cfg->max_seq) return longer;
  return short_prompt(o, cfg);
}

/* The winners of the workload's decode problems (--batch's: the steps of
 * one sequence and of its batches) that differ from their template
 * defaults, into c->c (c->n of them). */
static int candidates(check_t *c, gc_err_t *e) {
  const gc_step_opts_t *o = c->o;
  gc_problems_t dp = {0};
  gc_templates_t tpls = {0};
  gc_db_t *db = NULL;
  int rc = gc_llama_workload(o->model, o->quantize, "none", o->batch ? o->batch : "1", 1, o->target->backend, &dp,
                             NULL, NULL, e);
  if (!rc) rc = gc_tpl_load_all(o->templates_dir, &tpls, e);
  if (!rc) rc = gc_db_open(o->db_path, 0, &db, e);
  if (!rc && !(c->c = gc_calloc(2 * (size_t)dp.n + 1, sizeof *c->c, e))) rc = GC_ENOMEM; /* winners and belows */
  for (int i = 0; !rc && i < dp.n; i++) {
    const gc_problem_t *p = &dp.v[i];
    cand_t *k = &c->c[c->n];
    int found = 0;
    gc_variant_t v;
    if ((rc = gc_db_find_winner(db, o->target->name, p, &k->w, &found, e)) || !found) continue;
    const gc_template_t *t = gc_tpl_find(&tpls, k->w.template_name);
    if (!t || strcmp(t->hash, k->w.template_hash)) continue; /* stale: gcore-gen builds the default */
    if ((rc = gc_tpl_pick_default(&tpls, o->target, p, &v, e))) break;
    if (!strcmp(v.tpl->name, k->w.template_name) && !strcmp(v.params, k->w.params)) continue;
    k->p = *p;
    k->of = k->below = -1;
    k->rows = rows_for(p);
    k->prompt = prompt_for(o, &c->w->cfg, p);
    snprintf(k->dflt, sizeof k->dflt, "%s %s", v.tpl->name, v.params);
    c->n++;
  }
  gc_db_close(db);
  gc_tpl_free_all(&tpls);
  gc_problems_free(&dp);
  return rc;
}

/* The bundle at path: the workload's problems, p's winner (NULL: none). */
static int build(const check_t *c, const gc_problem_t *p, const char *path, gc_err_t *e) {
  const gc_step_opts_t *o = c->o;
  gc_gen_opts_t g = {0};
  g.db_path = o->db_path;
  g.out_path = path;
  g.targets = o->target->name;
  g.templates_dir = o->templates_dir;
  g.cache = o->cache;
  g.compiler = o->compiler;
  g.code_object = o->target->code_object;
  g.jobs = o->jobs;
  g.compile_timeout_s = o->compile_timeout_s;
  g.quiet = 1;
  g.meta = c->plan.meta;
  g.winner_ok = winner_ok;
  g.winner_u = (void *)p;
  return gc_gen_bundle(&g, &c->probs, &c->needs, e);
}

/* The steps timed in the step after np prompt tokens: o->steps, or what
 * the context leaves past np and SLACK (at least 1). */
static int steps_for(const check_t *c, int np) {
  const int room = c->w->cfg.max_seq - np - SLACK;
  return c->o->steps < room ? c->o->steps : room > 1 ? room : 1;
}

static void step_model_free(check_t *c) {
  gc_llama_free(c->on.m);
  gc_rt_close(c->on.drt);
  c->on.m = NULL, c->on.drt = NULL;
}

/* The model of the step of `rows` (as in cand_t) after np prompt tokens,
 * serving with the defaults' bundle: one sequence a slot, rows of them (0:
 * the single-sequence model, one), with room for np + steps + SLACK
 * positions. Made once for a run of that step's timings and kept until
 * another step is asked for (the weights on the device once, not once a
 * timing; one model at a time, so that a GPU holds one copy of them). */
static int step_model(check_t *c, int rows, int np, gc_err_t *e) {
  if (c->on.m && c->on.rows == rows && c->on.np == np) return GC_OK;
  step_model_free(c);
  const int steps = steps_for(c, np), ctx = np + steps + SLACK;
  int rc = gc_rt_open(c->dev, c->dpath, &c->on.drt, e);
  if (!rc) rc = rows ? gc_llama_create_slots(c->dev, c->on.drt, c->w, ctx, 1, rows, &c->on.m, e)
                     : gc_llama_create(c->dev, c->on.drt, c->w, ctx, 1, &c->on.m, e);
  if (rc) {
    step_model_free(c);
    return gc_err_prefix(e, "step check, the defaults' bundle");
  }
  c->on.rows = rows, c->on.np = np, c->on.steps = steps;
  return GC_OK;
}

/* Each slot of m emptied and fed np prompt tokens one at a time (the
 * bundle may serve no prefill), then 8 decode steps. *last: each row's
 * last token. */
static int start(gc_llama_t *m, int rows, int np, int32_t *last, gc_err_t *e) {
  const int vocab = gc_llama_config(m)->vocab_size, slots = rows ? rows : 1;
  int32_t *toks = gc_malloc((size_t)np * sizeof *toks, e);
  float *lg = gc_malloc((size_t)vocab * sizeof *lg, e);
  int rc = toks && lg ? GC_OK : GC_ENOMEM, n = 0;
  for (int i = 0; toks && i < np; i++) toks[i] = vocab > 1 ? (int32_t)(1 + (7 * i) % (vocab - 1)) : 0;
  for (int s = 0; !rc && s < slots; s++) {
    gc_llama_slot_reset(m, s);
    for (int i = 0; !rc && i < np; i++) rc = gc_llama_slot_forward(m, s, toks + i, 1, 0, lg, NULL, e);
    last[s] = toks[np - 1];
  }
  if (!rc && !rows) rc = gc_llama_greedy(m, last[0], 8, gc_llama_count_ids, &n, e);
  for (int i = 0; !rc && rows && i < 8; i++) rc = gc_llama_decode_batch(m, rows, slot_of_row, last, NULL, last, e);
  free(toks);
  free(lg);
  return rc;
}

/* The timed steps of m (the step of `rows` after np prompt tokens) with
 * the bundle it serves with now: µs a step. With prof: one step, its
 * launches filed there, instead. */
static int run_steps(const check_t *c, gc_prof_t *prof, double *us, gc_err_t *e) {
  gc_llama_t *m = c->on.m;
  const int rows = c->on.rows, steps = prof ? 1 : c->on.steps;
  int32_t last[GC_LLAMA_BATCH_MAX];
  int n = 0, rc = start(m, rows, c->on.np, last, e);
  gc_llama_set_profile(m, prof);
  double t0 = gc_now();
  if (!rc && !rows) rc = gc_llama_greedy(m, last[0], steps, gc_llama_count_ids, &n, e);
  for (int i = 0; !rc && rows && i < steps; i++) rc = gc_llama_decode_batch(m, rows, slot_of_row, last, NULL, last, e);
  *us = (gc_now() - t0) * 1e6 / steps;
  gc_llama_set_profile(m, NULL);
  return rc;
}

/* µs a decode step (the step of `rows` after np prompt tokens, as in
 * cand_t) with the bundle at path (c->dpath: the defaults'), on the step's
 * model (step_model), which serves with the defaults' bundle again after.
 * With prof: one step, its launches filed there, instead. */
static int time_step(check_t *c, const char *path, int rows, int np, gc_prof_t *prof, double *us, gc_err_t *e) {
  gc_rt_t *rt = NULL;
  if (step_model(c, rows, np, e)) return e->code;
  if (!strcmp(path, c->dpath)) return run_steps(c, prof, us, e);
  int rc = gc_rt_open(c->dev, path, &rt, e);
  if (!rc && !(rc = gc_llama_set_bundle(c->on.m, rt, e))) {
    gc_err_t back = {0};
    rc = run_steps(c, prof, us, e);
    if (gc_llama_set_bundle(c->on.m, c->on.drt, &back)) step_model_free(c); /* it cannot keep rt: made again */
  }
  gc_rt_close(rt);
  return rc;
}

/* Launches of p in one step of `rows` after np prompt tokens, with the
 * defaults' bundle (its kernels are the problems the step runs, whatever
 * the winners); each (rows, np) profiled once, into c->seen. */
static int launched(check_t *c, int rows, int np, const gc_problem_t *p, int64_t *count, gc_err_t *e) {
  int i = 0;
  while (i < c->nseen && (c->seen[i].rows != rows || c->seen[i].np != np)) i++;
  if (i == c->nseen) {
    double us;
    if (i == (int)GC_ARRAY_LEN(c->seen)) return gc_err_set(e, GC_EINVAL, "step check: too many kinds of step");
    if (gc_prof_create(c->dev, &c->seen[i].prof, e)) return e->code;
    c->seen[i].rows = rows, c->seen[i].np = np, c->nseen++;
    if (time_step(c, c->dpath, rows, np, c->seen[i].prof, &us, e))
      return gc_err_prefix(e, "step check, the defaults' bundle");
  }
  *count = gc_prof_count(c->seen[i].prof, "decode", p);
  return GC_OK;
}

/* Whether the bundle at path serves k's problem with k's winner (not when
 * the database's winner changed since it was read, or the winner is not
 * valid for the bundle: gcore-gen then builds the default). */
static int runs_winner(const check_t *c, const cand_t *k, int *yes, gc_err_t *e) {
  gc_rt_t *rt = NULL;
  const gc_rt_kernel_t *kr;
  int rc = gc_rt_open(c->dev, k->path, &rt, e);
  if (!rc) rc = gc_rt_find(rt, &k->p, &kr, e);
  *yes = !rc && !strcmp(kr->d.vid, k->w.vid) && kr->d.m_lo == k->p.m && kr->d.m_hi == k->p.m;
  gc_rt_close(rt);
  return rc;
}

/* Where k runs: its step (a problem of one row that the single sequence's
 * step does not launch: the batched step of one row, which gcore-serve
 * runs for one client), or k->skip says it runs in none here. */
static int place(check_t *c, cand_t *k, gc_err_t *e) {
  int64_t n = 0;
  if (k->rows >= 0 && launched(c, k->rows, k->prompt, &k->p, &n, e)) return e->code;
  if (!n && k->rows == 0) {
    k->rows = 1;
    k->prompt = short_prompt(c->o, &c->w->cfg);
    if (launched(c, 1, k->prompt, &k->p, &n, e)) return e->code;
  }
  if (!n) snprintf(k->skip, sizeof k->skip, "no decode step here launches it (a prefill's problem, or the step "
                   "runs another kernel in its place)");
  return GC_OK;
}

/* k's bundle, built and serving k's winner, or k->skip says why not. */
static int prepare(check_t *c, cand_t *k, const char *dir, int i, gc_err_t *e) {
  gc_err_t be = {0};
  int yes = 0;
  if (snprintf(k->path, sizeof k->path, "%s/%d-winner%d.gcb", dir, (int)getpid(), i) >= (int)sizeof k->path)
    return gc_err_set(e, GC_EINVAL, "step check: the cache directory's path is too long");
  if (build(c, &k->p, k->path, &be) || runs_winner(c, k, &yes, &be))
    snprintf(k->skip, sizeof k->skip, "its bundle failed: %s", be.msg);
  else if (!yes)
    snprintf(k->skip, sizeof k->skip, "its bundle serves it with another kernel (the database's winner changed "
             "since, it was tuned with another compiler, or it is not valid in a bundle)");
  return GC_OK;
}

/* The entry of the bundle at path that serves q: its kernel's vid and
 * its rows (*found 0: none serves q). */
static int entry_of(const check_t *c, const char *path, const gc_problem_t *q, char *vid, size_t n, int64_t *lo,
                    int64_t *hi, int *found, gc_err_t *e) {
  gc_rt_t *rt = NULL;
  const gc_rt_kernel_t *kr;
  gc_err_t none = {0};
  int rc = gc_rt_open(c->dev, path, &rt, e);
  *found = 0;
  if (!rc && !gc_rt_find(rt, q, &kr, &none)) {
    snprintf(vid, n, "%s", kr->d.vid);
    *lo = kr->d.m_lo, *hi = kr->d.m_hi, *found = 1;
  }
  gc_rt_close(rt);
  return rc;
}

/* k's below (cand_t), where k's bundle serves the rows just under k's M
 * with k's winner from an entry that ends there (gcore-gen's range under
 * M) and the defaults' bundle serves them with another kernel: the fewest
 * rows of that entry, placed like any candidate. */
static int add_below(check_t *c, int i, gc_err_t *e) {
  cand_t *k = &c->c[i], *b = &c->c[c->n];
  gc_problem_t q = k->p;
  char vid[GC_ARRAY_LEN(k->w.vid)], dvid[GC_ARRAY_LEN(k->w.vid)];
  int64_t lo, hi, dlo, dhi;
  int found, dfound;
  gc_err_t be = {0};
  if (k->skip[0] || k->rows < 2) return GC_OK;
  q.m = k->p.m - 1;
  if (entry_of(c, k->path, &q, vid, sizeof vid, &lo, &hi, &found, &be) ||
      entry_of(c, c->dpath, &q, dvid, sizeof dvid, &dlo, &dhi, &dfound, &be))
    return GC_OK; /* the bundles opened for its timing: not here (it is timed at M, or said failed there) */
  if (!found || strcmp(vid, k->w.vid) || hi != q.m || (dfound && !strcmp(dvid, vid))) return GC_OK;
  *b = *k;
  b->p.m = lo;
  b->rows = (int)lo;
  b->of = i;
  k->below = c->n++;
  return place(c, b, e);
}

/* The runs of the step of `rows` after np prompt tokens: o->reps rounds
 * of the defaults, then each candidate timed in it (so that every weight
 * upload serves one timing); each candidate's fastest into its us, the
 * defaults' fastest and slowest into its d_us, d_max. */
static int time_group(check_t *c, int rows, int np, gc_err_t *e) {
  double lo = 0, hi = 0, t;
  for (int r = 0; r < c->o->reps; r++) {
    if (time_step(c, c->dpath, rows, np, NULL, &t, e)) return gc_err_prefix(e, "step check, the defaults' bundle");
    if (!r || t < lo) lo = t;
    if (t > hi) hi = t;
    for (int i = 0; i < c->n; i++) {
      cand_t *k = &c->c[i];
      gc_err_t ke = {0};
      if (k->skip[0] || k->rows != rows || k->prompt != np) continue;
      if (time_step(c, k->path, rows, np, NULL, &t, &ke)) /* that winner's alone: the others go on */
        snprintf(k->skip, sizeof k->skip, "its step failed: %s", ke.msg);
      else if (!r || t < k->us)
        k->us = t;
    }
  }
  for (int i = 0; i < c->n; i++)
    if (!c->c[i].skip[0] && c->c[i].rows == rows && c->c[i].prompt == np) c->c[i].d_us = lo, c->c[i].d_max = hi;
  return GC_OK;
}

/* Refused: its fastest run slower than every run of the defaults, by more
 * than max_loss. */
static int kept(const gc_step_opts_t *o, const cand_t *k) {
  return k->us <= k->d_us * (1 + o->max_loss) || k->us <= k->d_max;
}

/* A winner's verdict, and the step it rests on: refused where it slows
 * its own step or (timed) its below's, the step that refused it; else
 * kept, its own step. */
static const cand_t *verdict(const check_t *c, const cand_t *k, int *keep) {
  const cand_t *b = k->below >= 0 && !c->c[k->below].skip[0] ? &c->c[k->below] : NULL;
  *keep = kept(c->o, k) && (!b || kept(c->o, b));
  return !kept(c->o, k) || !b || kept(c->o, b) ? k : b;
}

/* The verdicts into the database, all or none. */
static int record(const check_t *c, gc_err_t *e) {
  gc_db_t *db = NULL;
  int rc = gc_db_open(c->o->db_path, 1, &db, e);
  if (!rc) rc = gc_db_begin(db, e);
  for (int i = 0; !rc && i < c->n; i++) {
    const cand_t *k = &c->c[i], *v;
    int keep;
    if (k->skip[0] || k->of >= 0) continue;
    v = verdict(c, k, &keep);
    rc = gc_db_record_step_check(db, k->w.measurement_id, c->o->target->name, c->o->model, v->rows, v->d_us,
                                 v->us, keep, e);
  }
  if (!rc) rc = gc_db_commit(db, e);
  else if (db) gc_db_rollback(db);
  gc_db_close(db);
  return rc;
}

/* What a winner's below adds to its line: "" (none), its step's times,
 * or why it was not timed. */
static void below_text(const check_t *c, const cand_t *k, char *out, size_t n) {
  const cand_t *b = k->below >= 0 ? &c->c[k->below] : NULL;
  if (!b) out[0] = 0;
  else if (b->skip[0])
    snprintf(out, n, "; in a batch of %d (the fewest rows it serves): not timed: %s", b->rows, b->skip);
  else
    snprintf(out, n, "; in a batch of %d (the fewest rows it serves): %.2f us a step against %.2f", b->rows, b->us,
             b->d_us);
}

/* A line per winner, then the count. */
static void say(const check_t *c, double t0) {
  int nk = 0, nt = 0, nw = 0;
  for (int i = 0; i < c->n; i++) {
    const cand_t *k = &c->c[i];
    char key[GC_PROBLEM_KEY], step[48], below[600];
    int keep;
    if (k->of >= 0) continue;
    nw++;
    gc_problem_key(&k->p, key);
    if (k->rows > 0) snprintf(step, sizeof step, "in a batch of %d", k->rows);
    else snprintf(step, sizeof step, "one sequence");
    if (k->skip[0]) {
      printf("  %s: %s %s: not timed: %s\n", key, k->w.template_name, k->w.params, k->skip);
      continue;
    }
    nt++;
    verdict(c, k, &keep);
    nk += keep;
    below_text(c, k, below, sizeof below);
    printf("  %s, %s: %s %s: %.2f us a step against %.2f with the default (%s)%s: %s\n", key, step,
           k->w.template_name, k->w.params, k->us, k->d_us, k->dflt, below,
           keep ? "kept" : "slower in the step: gcore-gen builds the default");
  }
  printf("step check: %d of %d winners timed kept, %d refused, %d not timed (%.0f s)\n", nk, nt, nt - nk,
         nw - nt, gc_now() - t0);
}

/* Build, place, time and record c's candidates. */
static int check(check_t *c, gc_err_t *e) {
  const gc_step_opts_t *o = c->o;
  const double t0 = gc_now();
  char dir[1100];
  const int nw = c->n; /* the winners; their belows follow them in c->c */
  int rc = GC_OK, nt = 0, nb = 0;
  c->plan = (gc_llama_plan_t){.db = o->db_path, .target = strcmp(o->target->backend, "cpu") ? o->target->name : NULL,
                              .force = -1};
  if (snprintf(dir, sizeof dir, "%s/stepcheck", o->cache) >= (int)sizeof dir ||
      snprintf(c->dpath, sizeof c->dpath, "%s/%d-defaults.gcb", dir, (int)getpid()) >= (int)sizeof c->dpath)
    return gc_err_set(e, GC_EINVAL, "step check: the cache directory's path is too long");
  rc = gc_llama_workload(o->model, o->quantize, o->prefill, o->batch, 1, o->target->backend, &c->probs, &c->needs,
                         &c->plan, e);
  if (!rc) rc = gc_mkdirs(dir, e);
  if (!rc) rc = gc_dev_open(o->target->backend, o->ordinal, &c->dev, e);
  if (!rc && build(c, NULL, c->dpath, e)) rc = gc_err_prefix(e, "step check, the defaults' bundle");
  for (int i = 0; !rc && i < c->n; i++) rc = place(c, &c->c[i], e);
  for (int i = 0; !rc && i < nw; i++)
    if (!c->c[i].skip[0]) rc = prepare(c, &c->c[i], dir, i, e);
  for (int i = 0; !rc && i < nw; i++) rc = add_below(c, i, e);
  for (int i = 0; i < nw; i++) nt += !c->c[i].skip[0];
  for (int i = nw; i < c->n; i++) nb += !c->c[i].skip[0];
  if (!rc)
    printf("step check: %d winners of the decode steps differ from their defaults; %d of them timed in their "
           "step (%d runs of up to %d steps) against the defaults, %d also in the batch of the fewest rows "
           "they serve\n", nw, nt, o->reps, o->steps, nb);
  for (int i = 0; !rc && i < c->n; i++) { /* each step once, at its first candidate */
    const cand_t *k = &c->c[i];
    int first = !k->skip[0];
    for (int j = 0; first && j < i; j++)
      first = c->c[j].skip[0] || c->c[j].rows != k->rows || c->c[j].prompt != k->prompt;
    if (first) rc = time_group(c, k->rows, k->prompt, e);
  }
  if (!rc) rc = record(c, e);
  if (!rc) say(c, t0);
  return rc;
}

int gc_step_check(const gc_step_opts_t *o, gc_err_t *e) {
  check_t c = {.o = o};
  gc_llama_weights_t *w = NULL;
  int rc = gc_weights_open(o->model, &w, e);
  c.w = w;
  if (!rc && w->cfg.max_seq < 48) { /* a prompt token and SLACK leave too few steps to time */
    printf("step check: the model's context of %d positions is too short to time decode steps in; skipped\n",
           w->cfg.max_seq);
  } else if (!rc) {
    rc = candidates(&c, e);
    if (!rc && !c.n) printf("step check: every winner of the decode steps is its template's default\n");
    if (!rc && c.n && o->quantize) rc = gc_weights_quantize(w, o->quantize, e);
    if (!rc && c.n) rc = check(&c, e);
  }
  if (c.dpath[0]) unlink(c.dpath);
  for (int i = 0; i < c.n; i++)
    if (c.c[i].path[0] && c.c[i].of < 0) unlink(c.c[i].path);
  for (int i = 0; i < c.nseen; i++) gc_prof_free(c.seen[i].prof);
  step_model_free(&c);
  free(c.c);
  gc_dev_close(c.dev);
  gc_weights_close(w);
  gc_problems_free(&c.probs);
  gc_needs_free(&c.needs);
  return rc;
}
