/* tune.c — the sweep. Candidate order: each template's default first (so a
 * capped budget always measures the documented default, and the summary
 * can say what tuning gained over it), then the rest of the space in a
 * shuffled order seeded by the problem, so that a budget samples the whole
 * space rather than one corner of it (--strategy random), or the untried
 * neighbours of the fastest points so far before shuffled ones (--strategy
 * local, the default). */
#include <math.h>
#include "tune.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../db/tunedb.h"
#include "../gen/compile.h"
#include "../gen/resources.h"
#include "../gen/template.h"
#include "worker.h"

#define MAX_SPACE ((int64_t)1 << 24) /* points per template a sweep will walk */
#define CHUNK 16 /* candidates compiled per ninja run */
/* Under a deadline, fewer at a time: a chunk's compiles run past it. */
#define CHUNK_TIMED 4
#define chunk_cap(s) (isfinite((s)->deadline) ? CHUNK_TIMED : CHUNK)
#define FINALISTS 3 /* run again before a pick: the bundle's default and the fastest others */
#define MOVED 1.25  /* a finalist whose time moves by more than this is named */

/* A point of the search: a template and an index into its space (-1 is the
 * template's declared default). 16 bytes, so that spaces of millions of
 * points can be shuffled without materialising variants. */
typedef struct point {
  int tpl;
  int64_t idx;
} point_t;

typedef struct cand {
  point_t pt;
  gc_variant_t v;
  char vid[GC_HASH_HEX];
  int64_t variant_id;
} cand_t;

typedef struct sweep {
  const gc_tune_opts_t *o;
  gc_templates_t tpls;
  gc_compiler_t cc;
  gc_db_t *db;
  gc_worker_t *worker;
  gc_dev_info_t info;
  int64_t device_id, compiler_id;
  double t0, deadline;      /* the current pass's end (INFINITY: none) */
  int iprob, nprobs;         /* for the progress line */
  int defaults_only;         /* the first pass of a time budget: templates' defaults */
  int64_t *first_pass;       /* [nprobs]: what that pass measured of each problem */
  /* per problem */
  const gc_problem_t *p;
  int64_t problem_id;
  char key[GC_PROBLEM_KEY];
  point_t *pts;
  int64_t npts, cap;
  int64_t walked, measured, reused, rejected; /* progress through pts */
  int64_t examined;                           /* points prepared (walked or as neighbours) */
  int64_t space;                              /* distinct points of the serving templates */
  double best_us, default_us, measure_time;
  int64_t ndef;                               /* leading default points in pts */
  /* local search: every point tried, with its median (INFINITY: failed) */
  struct seen { uint64_t key; double us; } *seen;
  int64_t nseen, capseen;
  char default_vid[GC_HASH_HEX]; /* the bundle default's variant, for "x the default" */
  char notes[FINALISTS][800];            /* what running the finalists again found (confirm) */
  int nnotes;
  char *hashes;                  /* ",h1,h2,...,": the swept templates' versions */
  char *hashes_all;              /* the same of every template of the backend */
} sweep_t;

static int push_point(sweep_t *s, int tpl, int64_t idx, gc_err_t *e) {
  if (s->npts == s->cap) {
    int64_t cap = s->cap ? s->cap * 2 : 1024;
    point_t *v = gc_realloc(s->pts, (size_t)cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    s->pts = v;
    s->cap = cap;
  }
  s->pts[s->npts++] = (point_t){tpl, idx};
  return GC_OK;
}

/* ---- points tried (open addressing on (tpl+1)<<40 | idx+1; 0: empty) ---- */

/* Never 0, the empty slot's mark: template 0's default (idx -1) too. */
static uint64_t point_key(point_t p) { return ((uint64_t)(p.tpl + 1) << 40) | (uint64_t)(p.idx + 1); }
static point_t key_point(uint64_t key) {
  return (point_t){(int)(key >> 40) - 1, (int64_t)(key & ((1ull << 40) - 1)) - 1};
}

static struct seen *seen_slot(sweep_t *s, uint64_t key) {
  uint64_t h = key * 0x9e3779b97f4a7c15ull;
  for (int64_t i = (int64_t)(h >> 20) & (s->capseen - 1);; i = (i + 1) & (s->capseen - 1))
    if (!s->seen[i].key || s->seen[i].key == key) return &s->seen[i];
}

/* Mark p tried (us: its median, INFINITY when it failed; NAN: not yet
 * known). Returns 1 when p was new. */
static int seen_put(sweep_t *s, point_t p, double us, gc_err_t *e) {
  if (2 * (s->nseen + 1) > s->capseen) {
    struct seen *old = s->seen;
    int64_t n = s->capseen;
    s->capseen = n ? 2 * n : 1024;
    if (!(s->seen = gc_calloc((size_t)s->capseen, sizeof *s->seen, e))) {
      s->seen = old, s->capseen = n;
      return -1;
    }
    for (int64_t i = 0; i < n; i++)
      if (old[i].key) *seen_slot(s, old[i].key) = old[i];
    free(old);
  }
  struct seen *x = seen_slot(s, point_key(p));
  int fresh = !x->key;
  if (fresh) s->nseen++;
  x->key = point_key(p);
  if (fresh || !isnan(us)) x->us = us;
  return fresh;
}

static uint64_t mix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  return z ^ (z >> 27);
}

static void shuffle(point_t *c, int64_t n, const char *key) {
  uint64_t seed = 0;
  for (const char *p = key; *p; p++) seed = seed * 131 + (unsigned char)*p;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(mix(&seed) % (uint64_t)(i + 1));
    point_t t = c[i];
    c[i] = c[j];
    c[j] = t;
  }
}

/* The index of v in its template's space (digits as gc_tpl_nth reads them). */
static int64_t variant_index(const gc_template_t *t, const gc_variant_t *v) {
  int64_t idx = 0;
  for (int i = 0; i < t->nparams; i++) {
    int j = 0;
    while (j < t->params[i].nvalues - 1 && t->params[i].values[j] != v->values[i]) j++;
    idx = idx * t->params[i].nvalues + j;
  }
  return idx;
}

/* *ok = 1 when tp serves s->p; *start is its starting point: -1 (its
 * declared defaults) or, where those do not apply (a GEMV with MMAX=1 for
 * M = 4 rows), the index of its nearest usable variant, the one gcore-gen
 * would build; *v gets that variant. */
static int serves(sweep_t *s, const gc_template_t *tp, int *ok, int64_t *start, gc_variant_t *v,
                  gc_err_t *e) {
  gc_variant_t def;
  *ok = 0;
  if (!gc_tpl_supports(tp, s->p) || !gc_tpl_serves(tp, s->o->target.backend)) return GC_OK;
  if (s->o->only_template && strcmp(tp->name, s->o->only_template)) return GC_OK;
  if (gc_tpl_nearest(tp, &s->o->target, s->p, v, ok, e)) return e->code;
  gc_tpl_default(tp, &s->o->target, s->p, &def);
  *start = *ok && strcmp(def.params, v->params) ? variant_index(tp, v) : -1;
  if (!*ok) { /* none usable: served where its defaults apply, so that the
                 sweep records why each point fails its constraints */
    *v = def;
    return gc_tpl_applies(&def, &s->o->target, s->p, ok, e);
  }
  return GC_OK;
}

/* pts[1 .. n) in order of their templates' @priority, highest first (then
 * in template order): a budget smaller than the number of templates that
 * serve a problem measures the likeliest ones. */
static void order_defaults(sweep_t *s, point_t *pts, int n) {
  for (int i = 2; i < n; i++)
    for (int j = i; j > 1; j--) {
      const gc_template_t *a = &s->tpls.v[pts[j - 1].tpl], *b = &s->tpls.v[pts[j].tpl];
      if (a->priority > b->priority || (a->priority == b->priority && pts[j - 1].tpl < pts[j].tpl)) break;
      point_t x = pts[j];
      pts[j] = pts[j - 1];
      pts[j - 1] = x;
    }
}

/* The points of every template that serves s->p: the bundle's default
 * first, the other templates' defaults next (by priority), then all the
 * rest shuffled. */
static int enumerate(sweep_t *s, gc_err_t *e) {
  s->npts = s->space = 0;
  int ndef = 0, ok;
  gc_variant_t v;
  int64_t start = -1;
  for (int t = 0; t < s->tpls.n; t++) {
    if (serves(s, &s->tpls.v[t], &ok, &start, &v, e)) return e->code;
    if (!ok) continue;
    if (push_point(s, t, start, e)) return e->code;
    char vid[GC_HASH_HEX];
    gc_tpl_vid(&v, &s->o->target, s->cc.id, vid);
    if (!strcmp(vid, s->default_vid)) { /* the bundle's default goes first */
      point_t x = s->pts[0];
      s->pts[0] = s->pts[ndef];
      s->pts[ndef] = x;
    }
    ndef++;
  }
  order_defaults(s, s->pts, ndef);
  /* the spaces of the templates that serve, in template order; each one's
   * starting point is among pts[0 .. ndef) (serves() is not asked twice:
   * finding a nearest usable variant may walk the space) */
  for (int t = 0; t < s->tpls.n; t++) {
    int d = 0;
    while (d < ndef && s->pts[d].tpl != t) d++;
    ok = d < ndef;
    start = ok ? s->pts[d].idx : -1;
    int64_t n = gc_tpl_space_size(&s->tpls.v[t]);
    if (ok && n > MAX_SPACE)
      return gc_err_set(e, GC_EINVAL, "template %s: %lld points is more than a sweep walks "
                        "(%lld); narrow its values", s->tpls.v[t].name, (long long)n,
                        (long long)MAX_SPACE);
    if (ok) s->space += n;
    for (int64_t i = 0; ok && i < n; i++)
      if (i != start && push_point(s, t, i, e)) return e->code;
  }
  shuffle(s->pts + ndef, s->npts - ndef, s->key);
  s->ndef = ndef;
  return GC_OK;
}

/* The database row of a result: status and detail, and from r (NULL:
 * none) the times when ok and the verification's error where it ran. */
static gc_db_measurement_t result_row(const sweep_t *s, int64_t variant_id, const char *status,
                                      const char *detail, const gc_work_reply_t *r) {
  gc_db_measurement_t m = {.device_id = s->device_id, .problem_id = s->problem_id,
                           .variant_id = variant_id, .status = status,
                           .detail = detail, .max_err = -1};
  if (r && !strcmp(status, "ok")) {
    m.median_us = r->timing.median_us;
    m.min_us = r->timing.min_us;
    m.max_us = r->timing.max_us;
    m.spread = r->timing.spread;
    m.iters = r->timing.iters;
    m.tflops = gc_op_tune_flops(s->p) / (m.median_us * 1e-6) / 1e12;
    m.gbps = gc_op_tune_bytes(s->p) / (m.median_us * 1e-6) / 1e9;
  }
  if (r && (!strcmp(status, "ok") || !strcmp(status, "verify-failed")))
    m.max_err = r->verify.worst;
  return m;
}

static int record(sweep_t *s, cand_t *c, const char *status, const char *detail,
                  const gc_work_reply_t *r, gc_err_t *e) {
  gc_db_measurement_t m = result_row(s, c->variant_id, status, detail, r);
  return gc_db_record(s->db, &m, e);
}

/* Candidates this run will measure for the problem: those measured, and
 * of the points not yet examined the share that examined points had of
 * candidates (neither rejected nor measured before), within the budget. */
static int64_t to_measure(const sweep_t *s) {
  int64_t left = s->npts - s->examined, fresh = s->examined - s->rejected - s->reused;
  if (fresh < 0) fresh = 0;
  if (left < 0) left = 0;
  int64_t more = s->examined ? (int64_t)((double)left * (double)fresh / (double)s->examined) : left;
  if (s->defaults_only) more = s->ndef > s->walked ? s->ndef - s->walked : 0;
  if (s->o->budget_n > 0) {
    int64_t room = s->o->budget_n - s->reused - s->measured;
    if (more > room) more = room;
  }
  return s->measured + (more > 0 ? more : 0);
}

/* One live line: the problem among the run's, candidates done of those
 * that will run, the best so far and the time left (never negative; never
 * past a time budget's end). */
static void progress(sweep_t *s) {
  if (!s->o->progress) return;
  int64_t total = to_measure(s);
  double per = s->measured ? (gc_now() - s->measure_time) / (double)s->measured : 0;
  double eta = per * (double)(total - s->measured);
  if (eta > s->deadline - gc_now()) eta = s->deadline - gc_now();
  long secs = eta > 0 ? (long)eta : 0;
  char best[96] = "none yet";
  if (s->best_us > 0)
    snprintf(best, sizeof best, "%.1f us (%.2f TFLOP/s)", s->best_us,
             gc_op_tune_flops(s->p) / (s->best_us * 1e-6) / 1e12);
  fprintf(stderr, "\r\033[K[%d/%d] %s%s | %lld/%lld | best %s | ETA %ld:%02ld", s->iprob + 1,
          s->nprobs, s->defaults_only ? "defaults of " : "", s->key, (long long)s->measured,
          (long long)total, best, secs / 60, secs % 60);
  fflush(stderr);
}

static int budget_left(sweep_t *s, int64_t pending) {
  if (s->o->budget_n > 0 && s->measured + s->reused + pending >= s->o->budget_n) return 0;
  if (s->defaults_only && s->walked >= s->ndef) return 0;
  if (gc_now() > s->deadline) return 0;
  return 1;
}

/* A verified candidate whose first min_iters launches have a median over
 * ABANDON times the problem's best so far stops timing there: it cannot
 * win, and most of a search's candidates are such (racing, as in irace). */
#define ABANDON 1.25

/* Verify and time candidate c (compiled as j) in the worker: *r is its
 * result. abandon_us as gc_time_opts_t's (0: time it in full). */
static int run(sweep_t *s, const cand_t *c, const gc_compile_job_t *j, double abandon_us,
               gc_work_reply_t *r, gc_err_t *e) {
  gc_work_req_t q;
  memset(&q, 0, sizeof q);
  q.problem = *s->p;
  snprintf(q.obj, sizeof q.obj, "%s", j->obj);
  snprintf(q.symbol, sizeof q.symbol, "%s", c->v.tpl->kernel);
  snprintf(q.grid, sizeof q.grid, "%s", c->v.tpl->grid);
  snprintf(q.block, sizeof q.block, "%s", c->v.tpl->block);
  snprintf(q.shmem, sizeof q.shmem, "%s", c->v.tpl->shmem);
  gc_tpl_tmaps_text(c->v.tpl, q.tmaps, sizeof q.tmaps);
  if (gc_tpl_consts_text(&c->v, &s->o->target, q.consts, sizeof q.consts, e)) return e->code;
  q.timing = s->o->timing;
  q.timing.abandon_us = abandon_us;
  q.pdl = c->v.tpl->pdl;
  q.prefetch = c->v.tpl->prefetch;
  q.seed = 0x5eed;
  return gc_worker_run(s->worker, &q, s->o->timeout_s, r, e);
}

static int measure(sweep_t *s, cand_t *c, gc_compile_job_t *j, gc_err_t *e) {
  if (!j->ok) return record(s, c, "compile-failed", j->log, NULL, e);
  int fits;
  char why[300];
  if (gc_res_check(&c->v, &s->o->target, s->p, &j->res, &fits, why, sizeof why, e) ||
      gc_db_set_resources(s->db, c->variant_id, &j->res, e))
    return e->code;
  if (!fits) {
    s->rejected++;
    return record(s, c, "rejected", why, NULL, e);
  }
  gc_work_reply_t r;
  if (run(s, c, j, s->best_us > 0 ? ABANDON * s->best_us : 0, &r, e)) return e->code;
  if (seen_put(s, c->pt, !strcmp(r.status, "ok") ? r.timing.median_us : INFINITY, e) < 0)
    return e->code;
  if (!strcmp(r.status, "ok")) {
    if (s->best_us <= 0 || r.timing.median_us < s->best_us) s->best_us = r.timing.median_us;
    if (!strcmp(c->vid, s->default_vid)) s->default_us = r.timing.median_us;
  }
  return record(s, c, r.status, r.detail[0] ? r.detail : NULL, &r, e);
}

/* Expand candidates c[0 .. n) (n <= CHUNK) and compile them through the
 * driver into jobs; src gets their sources, which the caller frees. */
static int compile(sweep_t *s, const cand_t *c, int n, gc_compile_job_t *jobs, gc_buf_t *src,
                   gc_err_t *e) {
  memset(jobs, 0, (size_t)n * sizeof *jobs);
  memset(src, 0, (size_t)n * sizeof *src);
  int rc = GC_OK;
  for (int i = 0; !rc && i < n; i++) {
    rc = gc_tpl_expand(&s->tpls, &c[i].v, &s->o->target, s->cc.id, &src[i], jobs[i].vid, e);
    jobs[i].source = src[i].data;
    jobs[i].source_len = src[i].len;
    jobs[i].kernel = c[i].v.tpl->kernel;
  }
  if (!rc) rc = gc_compile_batch(&s->cc, &s->o->target, s->o->cache, jobs, n, s->o->jobs, e);
  return rc;
}

/* Compile a chunk of candidates through the driver, then measure each. */
static int flush(sweep_t *s, cand_t *chunk, int n, gc_err_t *e) {
  gc_compile_job_t jobs[CHUNK];
  gc_buf_t src[CHUNK];
  int rc = compile(s, chunk, n, jobs, src, e);
  for (int i = 0; !rc && i < n; i++) {
    if (gc_now() > s->deadline) break;
    rc = measure(s, &chunk[i], &jobs[i], e);
    s->measured++;
    progress(s);
  }
  for (int i = 0; i < n; i++) gc_buf_free(&src[i]);
  return rc;
}

/* Turn point pt into a candidate: registered in the database. *skip is set
 * when it is measured already (resume), a duplicate of its template's
 * default, or rejected by a constraint (then recorded as such). */
static int prepare(sweep_t *s, const point_t *pt, cand_t *c, int *skip, gc_err_t *e) {
  const gc_template_t *tp = &s->tpls.v[pt->tpl];
  char dt[16];
  int found, ok;
  const char *why = NULL;
  *skip = 1;
  c->pt = *pt;
  if (pt->idx < 0) {
    gc_tpl_default(tp, &s->o->target, s->p, &c->v);
  } else {
    gc_variant_t def;
    gc_tpl_default(tp, &s->o->target, s->p, &def);
    gc_tpl_nth(tp, s->p, pt->idx, &c->v);
    if (!strcmp(def.params, c->v.params)) return GC_OK; /* walked as the default */
  }
  s->examined++;
  gc_tpl_vid(&c->v, &s->o->target, s->cc.id, c->vid);
  gc_dtypes_format(s->p->ta, s->p->tb, s->p->tc, dt);
  gc_db_variant_t dv = {c->vid, tp->name, tp->hash, c->v.params, dt, s->o->target.name,
                        s->compiler_id};
  if (gc_db_variant_id(s->db, &dv, &c->variant_id, e) ||
      gc_db_measured(s->db, s->device_id, s->problem_id, c->variant_id, &found, e))
    return e->code;
  if (found == 2) { /* rejected by a constraint before: not a candidate, as when recorded */
    s->rejected++;
    return GC_OK;
  }
  if (found) { /* measured by an earlier run: its time steers the local search */
    double us = INFINITY;
    int f = 0;
    if (gc_db_variant_median(s->db, s->device_id, s->problem_id, c->vid, &us, &f, e)) return e->code;
    if (seen_put(s, *pt, f ? us : INFINITY, e) < 0) return e->code;
    s->reused++;
    return GC_OK;
  }
  if (gc_tpl_valid(&c->v, &s->o->target, &ok, &why, e)) return e->code;
  if (!ok) {
    char d[300];
    snprintf(d, sizeof d, GC_DB_CONSTRAINT_DETAIL ": %s", why);
    s->rejected++;
    return record(s, c, "rejected", d, NULL, e);
  }
  /* a neighbour may leave the region the template serves (MMAX=1 for four
   * rows, DMAX=64 for heads of 128): not a candidate, as a constraint */
  if (gc_tpl_applies(&c->v, &s->o->target, s->p, &ok, e)) return e->code;
  if (!ok) {
    char d[300];
    snprintf(d, sizeof d, GC_DB_CONSTRAINT_DETAIL ": does not apply to the problem (@applies %s)",
             tp->napplies ? tp->applies[0].expr : "");
    s->rejected++;
    return record(s, c, "rejected", d, NULL, e);
  }
  /* another gcore-tune on this database is measuring it: its result will
   * be there as an earlier run's would */
  if (gc_db_claim(s->db, s->device_id, s->problem_id, c->variant_id, &ok, e)) return e->code;
  if (!ok) {
    s->reused++;
    return GC_OK;
  }
  *skip = 0;
  return GC_OK;
}

#define LOCAL_STARTS 4 /* fastest points whose neighbourhoods a round explores */

/* *ok = 1 when point pt of its template satisfies every @constraint and
 * applies to the problem: what prepare() would not reject. */
static int point_valid(sweep_t *s, point_t pt, int *ok, gc_err_t *e) {
  gc_variant_t v;
  const char *why = NULL;
  gc_tpl_nth(&s->tpls.v[pt.tpl], s->p, pt.idx, &v);
  if (gc_tpl_valid(&v, &s->o->target, ok, &why, e)) return e->code;
  if (*ok && gc_tpl_applies(&v, &s->o->target, s->p, ok, e)) return e->code;
  return GC_OK;
}

/* A move of parameter i to pt that breaks a constraint or leaves the
 * problem (a longer stage past the shared memory at this depth) is
 * repaired: the first other parameter j, in declaration order, with a
 * value that makes the point valid gives its nearest such value (the
 * lower one first) as a neighbour too; one already seen passes the turn to
 * the next j. So a coupled move (KC up, RS or STAGES down) is one step of
 * the search, not two through a point that must itself be among the
 * fastest, and a rejected move costs at most one candidate. w[j]:
 * parameter j's weight in the variant index (neighbours()). */
static int repair(sweep_t *s, point_t pt, int i, const int64_t *w, cand_t *chunk, int *n,
                  gc_err_t *e) {
  const gc_template_t *t = &s->tpls.v[pt.tpl];
  for (int j = 0; j < t->nparams; j++) {
    if (j == i) continue;
    int64_t nv = t->params[j].nvalues, digit = pt.idx / w[j] % nv;
    for (int64_t d = 1; d < nv; d++)
      for (int64_t dir = -1; dir <= 1; dir += 2) {
        int64_t v = digit + dir * d;
        if (v < 0 || v >= nv) continue;
        point_t r = {pt.tpl, pt.idx + (v - digit) * w[j]};
        int ok, fresh;
        if (point_valid(s, r, &ok, e)) return e->code;
        if (!ok) continue;
        if ((fresh = seen_put(s, r, NAN, e)) < 0) return e->code;
        if (!fresh) goto next_param; /* the nearest repair by j is known: try another j */
        int skip;
        if (prepare(s, &r, &chunk[*n], &skip, e)) return e->code;
        if (!skip) (*n)++;
        return GC_OK;
      }
  next_param:;
  }
  return GC_OK;
}

/* Local search: fill chunk[*n..] with untried one-parameter neighbours of
 * the LOCAL_STARTS fastest points measured so far, fastest first; of one
 * point, the nearest values first (one step either way, then two, ...),
 * over the parameters in declaration order (a template lists the ones
 * that matter most first), so that a small budget moves every parameter
 * once before it moves any twice. A neighbour that is not valid (recorded
 * as rejected) is followed by its repair (repair()). */
static int neighbours(sweep_t *s, cand_t *chunk, int *n, gc_err_t *e) {
  struct seen best[LOCAL_STARTS];
  int nb = 0;
  for (int64_t i = 0; i < s->capseen; i++) { /* keep best[] sorted: insert x in place */
    const struct seen *x = &s->seen[i];
    if (!x->key || !isfinite(x->us) || (nb == LOCAL_STARTS && x->us >= best[nb - 1].us)) continue;
    int at = nb < LOCAL_STARTS ? nb++ : nb - 1;
    for (; at > 0 && best[at - 1].us > x->us; at--) best[at] = best[at - 1];
    best[at] = *x;
  }
  for (int b = 0; b < nb && *n < chunk_cap(s) && budget_left(s, *n); b++) {
    point_t at = key_point(best[b].key);
    const gc_template_t *t = &s->tpls.v[at.tpl];
    gc_variant_t def;
    gc_tpl_default(t, &s->o->target, s->p, &def);
    int64_t idx = at.idx < 0 ? variant_index(t, &def) : at.idx, w[GC_TPL_PARAMS], far = 1;
    int64_t wi = 1;
    for (int i = t->nparams - 1; i >= 0; wi *= t->params[i].nvalues, i--) {
      w[i] = wi; /* the variant index is mixed-radix, the last parameter its lowest digit */
      if (t->params[i].nvalues > far) far = t->params[i].nvalues;
    }
    for (int64_t d = 1; d < far && *n < chunk_cap(s) && budget_left(s, *n); d++)
      for (int i = 0; i < t->nparams && *n < chunk_cap(s) && budget_left(s, *n); i++)
        for (int64_t dir = -1; dir <= 1 && *n < chunk_cap(s) && budget_left(s, *n); dir += 2) {
          int64_t nv = t->params[i].nvalues, digit = idx / w[i] % nv, j = digit + dir * d;
          if (j < 0 || j >= nv) continue;
          point_t nb_pt = {at.tpl, idx + (j - digit) * w[i]};
          int skip, ok, fresh = seen_put(s, nb_pt, NAN, e);
          if (fresh < 0) return e->code;
          if (!fresh) continue;
          if (prepare(s, &nb_pt, &chunk[*n], &skip, e) || point_valid(s, nb_pt, &ok, e)) return e->code;
          if (!skip) (*n)++;
          if (!ok && repair(s, nb_pt, i, w, chunk, n, e)) return e->code;
        }
  }
  return GC_OK;
}

/* Walk the points until the budget is spent: a chunk at a time, each
 * compiled in one ninja run and then measured. */
static int sweep_points(sweep_t *s, gc_err_t *e) {
  cand_t *chunk = gc_calloc(CHUNK, sizeof *chunk, e);
  if (!chunk) return GC_ENOMEM;
  int rc = GC_OK, local = s->o->strategy == GC_SEARCH_LOCAL;
  s->walked = s->measured = s->reused = s->rejected = s->examined = 0;
  s->measure_time = gc_now();
  while (!rc && budget_left(s, 0)) {
    int n = 0, skip, nb_round = local && s->walked >= s->ndef;
    rc = gc_db_begin(s->db, e);
    if (!rc && nb_round) rc = neighbours(s, chunk, &n, e);
    /* defaults first (alone, under local search: the next round starts from
     * their neighbours, also when an earlier run measured them all), then
     * shuffled points topping up rounds whose neighbours ran out */
    for (; !rc && n < chunk_cap(s) && s->walked < s->npts && budget_left(s, n); s->walked++) {
      if (local && s->walked == s->ndef && (n || !nb_round)) break;
      int fresh = seen_put(s, s->pts[s->walked], NAN, e);
      if (fresh < 0) rc = e->code;
      else if (fresh && !(rc = prepare(s, &s->pts[s->walked], &chunk[n], &skip, e)) && !skip) n++;
    }
    if (!rc) rc = gc_db_commit(s->db, e);
    else gc_db_rollback(s->db);
    if (!rc && !n && local && !nb_round && s->walked == s->ndef && s->walked < s->npts)
      continue; /* the defaults were all measured before: on to their neighbours */
    if (rc || !n) break;
    rc = flush(s, chunk, n, e);
  }
  free(chunk);
  return rc;
}

static void summary(sweep_t *s, int found, gc_err_t *e) {
  int64_t cnt[6], carried = s->first_pass ? s->first_pass[s->iprob] : 0;
  if (s->o->progress) fprintf(stderr, "\r\033[K");
  gc_db_status_counts(s->db, s->device_id, s->problem_id, cnt, e);
  printf("%s: %lld measured now, %lld reused; %lld ok, %lld rejected, %lld compile-failed, "
         "%lld verify-failed, %lld launch-failed, %lld timed-out\n",
         s->key, (long long)(s->measured + carried), (long long)(s->reused > carried ? s->reused - carried : 0), (long long)cnt[0],
         (long long)cnt[2], (long long)cnt[1],
         (long long)cnt[3], (long long)cnt[4], (long long)cnt[5]);
  for (int i = 0; i < s->nnotes; i++) printf("  %s\n", s->notes[i]);
  gc_db_winner_t w;
  int have = 0;
  if (found) gc_db_find_winner(s->db, s->o->target.name, s->p, &w, &have, e);
  if (!have) {
    printf("  no verified variant: no winner\n");
    return;
  }
  double flops = gc_op_tune_flops(s->p) / (w.median_us * 1e-6);
  printf("  winner %s %s: %.1f us, %.1f GFLOP/s", w.template_name, w.params, w.median_us,
         flops / 1e9);
  if (s->default_us > 0) printf(", %.2fx the default", s->default_us / w.median_us);
  if (w.margin > 0) printf(", %.1f%% ahead of the runner-up", 100 * w.margin);
  printf("\n");
}

/* Candidates of this problem that other gcore-tune processes claimed are
 * counted as reused: wait until they are recorded (or their processes
 * end), so that the winner and the summary include them; but no longer
 * than a chunk of candidates can take, nor past a time budget. */
static int wait_for_others(sweep_t *s, gc_err_t *e) {
  int64_t held = 0;
  double until = gc_now() + CHUNK * (s->o->timeout_s + s->cc.timeout_s) + 60;
  for (;;) {
    if (gc_db_claims_held(s->db, s->device_id, s->problem_id, &held, e)) return e->code;
    if (!held || gc_now() > until || (s->o->budget_s > 0 && gc_now() > s->deadline))
      return GC_OK;
    usleep(100 * 1000);
  }
}

/* The finalists of s->p (gc_db_finalists) as candidates of this build:
 * c[0 .. *n) and their measurements f[0 .. *n). */
static int finalists(sweep_t *s, gc_db_finalist_t *f, cand_t *c, int *n, gc_err_t *e) {
  int nf;
  *n = 0;
  if (gc_db_finalists(s->db, s->device_id, s->problem_id, s->o->target.name, s->compiler_id,
                      s->hashes, s->default_vid[0] ? s->default_vid : NULL, f, FINALISTS, &nf, e))
    return e->code;
  for (int i = 0; i < nf; i++) {
    const gc_template_t *tp = gc_tpl_find(&s->tpls, f[i].template_name);
    cand_t *x = &c[*n];
    if (!tp) continue;
    memset(x, 0, sizeof *x);
    gc_tpl_default(tp, &s->o->target, s->p, &x->v);
    if (gc_tpl_set_params(tp, f[i].params, &x->v, e)) return e->code;
    gc_tpl_vid(&x->v, &s->o->target, s->cc.id, x->vid);
    if (strcmp(x->vid, f[i].vid)) continue; /* not a variant this build makes */
    x->variant_id = f[i].variant_id;
    f[(*n)++] = f[i];
  }
  return GC_OK;
}

/* Run the finalists of s->p again, one after another, each verified again,
 * before the winner is picked. Candidates of a sweep are timed minutes
 * apart: a load on the device meanwhile (another process on the GPU) slows
 * some and not others, and could make a slow kernel win. Timed together,
 * the finalists compete on equal terms; each keeps the lower of its two
 * medians (gc_db_retime), and the bundle's default is always one of them,
 * so a winner is never one that ran slower than the default side by side.
 * A finalist whose results are wrong this time (a race, state kept between
 * runs) is recorded as failed and cannot win. */
static int confirm(sweep_t *s, gc_err_t *e) {
  gc_db_finalist_t f[FINALISTS];
  cand_t c[FINALISTS];
  gc_compile_job_t jobs[FINALISTS];
  gc_buf_t src[FINALISTS];
  int n;
  if (finalists(s, f, c, &n, e)) return e->code;
  if (n < 2) return GC_OK; /* nothing to choose between */
  int rc = compile(s, c, n, jobs, src, e);
  for (int i = 0; !rc && i < n; i++) {
    gc_work_reply_t r;
    char why[sizeof r.detail + 64];
    if (!jobs[i].ok) continue; /* it compiled for the sweep: its measurement stands */
    if ((rc = run(s, &c[i], &jobs[i], 0, &r, e))) break;
    int ok = !strcmp(r.status, "ok");
    snprintf(why, sizeof why, "when run again among the finalists: %s", r.detail);
    gc_db_measurement_t m = result_row(s, c[i].variant_id, r.status, ok ? NULL : why, &r);
    if ((rc = gc_db_retime(s->db, f[i].measurement_id, &m, e))) break;
    char *note = s->notes[s->nnotes];
    if (!ok)
      snprintf(note, sizeof s->notes[0], "finalist %s %s: %s %s", f[i].template_name, f[i].params,
               r.status, why);
    else if (r.timing.median_us > MOVED * f[i].median_us || f[i].median_us > MOVED * r.timing.median_us)
      snprintf(note, sizeof s->notes[0], "finalist %s %s: %.1f us in the sweep, %.1f us when run "
               "again (was the device busy?)", f[i].template_name, f[i].params, f[i].median_us,
               r.timing.median_us);
    else
      continue;
    s->nnotes++;
  }
  for (int i = 0; i < n; i++) gc_buf_free(&src[i]);
  return rc;
}

/* Sweep p within the budget, pick its winner and, unless quiet, print
 * its summary. */
static int tune_problem(sweep_t *s, const gc_problem_t *p, int quiet, gc_err_t *e) {
  s->p = p;
  s->best_us = s->default_us = 0;
  if (s->seen) memset(s->seen, 0, (size_t)s->capseen * sizeof *s->seen); /* points are per problem */
  s->nseen = 0;
  s->default_vid[0] = 0;
  s->nnotes = 0;
  gc_problem_key(p, s->key);
  gc_variant_t def;
  int found = 0;
  if (!gc_tpl_pick_default(&s->tpls, &s->o->target, p, &def, NULL))
    gc_tpl_vid(&def, &s->o->target, s->cc.id, s->default_vid);
  if (gc_db_problem_id(s->db, p, &s->problem_id, e) || enumerate(s, e)) return e->code;
  if (!s->npts)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: no template for %s implements it", s->key,
                      s->o->target.name);
  /* a budget that earlier runs spent already: nothing to walk */
  int64_t prior = 0;
  if (s->o->budget_n > 0 &&
      gc_db_candidates(s->db, s->device_id, s->problem_id, s->o->target.name, s->compiler_id,
                       s->hashes, &prior, e))
    return e->code;
  int rc = GC_OK;
  if (s->o->budget_n > 0 && prior >= s->o->budget_n)
    s->walked = s->measured = s->rejected = s->examined = 0, s->reused = prior;
  else
    rc = sweep_points(s, e);
  if (!rc && s->walked == s->npts && s->measured + s->reused == 0)
    return gc_err_set(e, GC_EINVAL, "%s: none of the %lld variants satisfies the templates' "
                      "constraints on %s", s->key, (long long)s->space, s->o->target.name);
  if (!rc) rc = wait_for_others(s, e);
  if (!rc && s->measured > 0) rc = confirm(s, e);
  /* in a write transaction: another tuner's choice cannot land between
   * this one's reading the candidates and writing the winner */
  if (!rc && !(rc = gc_db_begin(s->db, e))) {
    rc = gc_db_pick_winner(s->db, s->device_id, s->problem_id, s->o->target.name,
                           s->hashes_all, s->o->margin, &found, e);
    if (!rc) rc = gc_db_commit(s->db, e);
    else gc_db_rollback(s->db);
  }
  if (!rc) {
    /* the default's time, also when it was measured by an earlier run or
     * again among the finalists */
    int f = 0;
    if (gc_db_variant_median(s->db, s->device_id, s->problem_id, s->default_vid,
                             &s->default_us, &f, e) || !f)
      s->default_us = 0;
    if (quiet && s->o->progress) fprintf(stderr, "\r\033[K");
    else if (!quiet) summary(s, found, e);
  }
  return rc;
}

/* An AMD target is tuned on an AMD GPU, which the kernel driver exposes as
 * /dev/kfd; without one, say so before starting a worker. */
static int gpu_present(const gc_target_t *tg, gc_err_t *e) {
  if (strcmp(tg->backend, "hip") || access("/dev/kfd", F_OK) == 0) return GC_OK;
  return gc_err_set(e, GC_EDEVICE, "target %s needs an AMD GPU, and this machine has none (no "
                    "/dev/kfd); gcore-gen --target %s builds a bundle without one", tg->name,
                    tg->name);
}

static int open_sweep(sweep_t *s, const gc_tune_opts_t *o, gc_err_t *e) {
  memset(s, 0, sizeof *s);
  s->o = o;
  s->t0 = gc_now();
  s->deadline = INFINITY;
  if (gc_tpl_load_all(o->templates_dir, &s->tpls, e) ||
      gc_compiler_for(&o->target, o->compiler, &s->cc, e) || gpu_present(&o->target, e) ||
      gc_worker_start(o->target.backend, o->ordinal, &s->worker, &s->info, e))
    return e->code;
  if (o->compile_timeout_s > 0) s->cc.timeout_s = o->compile_timeout_s;
  for (int t = 0; o->only_template && t <= s->tpls.n; t++)
    if (t == s->tpls.n)
      return gc_err_set(e, GC_ENOTFOUND, "no template named %s", GC_QUOTED(o->only_template));
    else if (!strcmp(s->tpls.v[t].name, o->only_template))
      break;
  /* the versions of the templates this sweep may walk: earlier runs'
   * measurements of other versions are stale and do not use up a budget */
  if (!(s->hashes = gc_calloc((size_t)s->tpls.n + 1, GC_HASH_HEX + 1, e)) ||
      !(s->hashes_all = gc_calloc((size_t)s->tpls.n + 1, GC_HASH_HEX + 1, e)))
    return GC_ENOMEM;
  strcpy(s->hashes, ",");
  strcpy(s->hashes_all, ",");
  for (int t = 0; t < s->tpls.n; t++) {
    if (!gc_tpl_serves(&s->tpls.v[t], o->target.backend)) continue;
    strcat(strcat(s->hashes_all, s->tpls.v[t].hash), ",");
    if (!o->only_template || !strcmp(s->tpls.v[t].name, o->only_template))
      strcat(strcat(s->hashes, s->tpls.v[t].hash), ",");
  }
  char probe[80];
  snprintf(probe, sizeof probe, "%s", o->target.name);
  /* the device must run code built for the target */
  if (strcmp(s->info.backend, o->target.backend))
    return gc_err_set(e, GC_EINVAL, "target %s needs a %s device; found %s (%s)", probe,
                      o->target.backend, s->info.backend, s->info.name);
  gc_db_device_t dk = {s->info.backend, s->info.arch, s->info.name, s->info.driver,
                       s->info.compute_units, s->info.mem_bytes};
  if (gc_db_open(o->db_path, 1, &s->db, e) || gc_db_device_id(s->db, &dk, &s->device_id, e) ||
      gc_db_compiler_id(s->db, s->cc.driver, s->cc.version, s->cc.flags, &s->compiler_id, e))
    return e->code;
  return GC_OK;
}

/* A time budget is shared: first every problem gets its templates'
 * defaults measured (whatever the clock says), then each problem in turn
 * gets an equal share of the time left, and a problem that finishes early
 * leaves its share to the ones after it. */
static int run_timed(sweep_t *s, const gc_problems_t *probs, gc_err_t *e) {
  double end = s->t0 + s->o->budget_s;
  int rc = GC_OK;
  if (!(s->first_pass = gc_calloc((size_t)probs->n, sizeof *s->first_pass, e))) return GC_ENOMEM;
  s->defaults_only = 1;
  for (int i = 0; !rc && i < probs->n; i++) {
    s->iprob = i;
    rc = tune_problem(s, &probs->v[i], 1, e);
    s->first_pass[i] = s->measured;
  }
  s->defaults_only = 0;
  for (int i = 0; !rc && i < probs->n; i++) {
    double now = gc_now();
    s->iprob = i;
    s->deadline = now + (end > now ? (end - now) / (probs->n - i) : 0);
    rc = tune_problem(s, &probs->v[i], 0, e);
  }
  if (!rc && gc_now() > end)
    printf("time budget of %.0f s reached; rerun to continue where this run stopped\n",
           s->o->budget_s);
  return rc;
}

int gc_tune_shard(const gc_problems_t *probs, int i, int n, gc_problems_t *out, gc_err_t *e) {
  if (n < 1 || i < 1 || i > n)
    return gc_err_set(e, GC_EINVAL, "--shard %d/%d: expected I/N with 1 <= I <= N", i, n);
  for (int j = i - 1; j < probs->n; j += n)
    if (gc_problems_push(out, &probs->v[j], e)) return e->code;
  return GC_OK;
}

int gc_tune_run(const gc_tune_opts_t *o, const gc_problems_t *probs, gc_err_t *e) {
  sweep_t s;
  int rc = open_sweep(&s, o, e);
  s.nprobs = probs->n;
  if (!rc)
    printf("device: %s (%s, %lld cores), compiler: %s, target %s\n", s.info.name,
           s.info.arch, (long long)s.info.compute_units, s.cc.version, o->target.name);
  if (!rc && o->budget_s > 0)
    rc = run_timed(&s, probs, e);
  for (int i = 0; !rc && o->budget_s <= 0 && i < probs->n; i++) {
    s.iprob = i;
    rc = tune_problem(&s, &probs->v[i], 0, e);
  }
  gc_worker_stop(s.worker);
  if (s.db) gc_db_release_claims(s.db, NULL); /* those a cut-short sweep left */
  gc_db_close(s.db);
  gc_tpl_free_all(&s.tpls);
  free(s.pts);
  free(s.seen);
  free(s.hashes);
  free(s.hashes_all);
  free(s.first_pass);
  return rc;
}
