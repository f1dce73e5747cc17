/* bundle_build.c — choosing a kernel per problem and target, and writing
 * the bundle. Dispatch entries per (op, dtypes, n, k) group:
 *   - one exact entry [m, m] per requested m (winner or default);
 *   - a range entry (previous m, m) served by m's kernel where that kernel
 *     applies at both ends of the range;
 *   - a catch-all [1, 2^31-1] with the default for large m, where it applies
 *     everywhere;
 *   - for every need (a range of rows a model's passes reach, from the
 *     recipe), defaults that close each gap the entries above leave, so
 *     that any prompt length finds a kernel; a gap no template serves is
 *     an error, never a bundle with a hole.
 * The runtime takes the narrowest entry containing m. */
#include "bundle_build.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../db/bundle.h"
#include "../db/tunedb.h"
#include "comgr.h"
#include "compile.h"
#include "resources.h"
#include "template.h"

#define M_MAX ((int64_t)(1LL << 31) - 1)

typedef struct pick {
  gc_variant_t v;
  gc_problem_t shape;        /* m unused */
  int64_t m_lo, m_hi;
  int is_default;
  char source[256];
  char vid[GC_HASH_HEX];
  int job;                   /* index into the compile jobs */
} pick_t;

typedef struct gen {
  const gc_gen_opts_t *o;
  gc_templates_t tpls;
  gc_db_t *db;
  gc_target_t tg;
  gc_compiler_t cc;
  pick_t *picks;
  int npicks, cap;
  int ntuned, ndefault, nstale, nstep_lost; /* nstep_lost: defaults where a step check refused the winner */
  int nvidia; /* an NVIDIA target is among the bundle's */
} gen_t;

static int push_pick(gen_t *g, const pick_t *p, gc_err_t *e) {
  if (g->npicks == g->cap) {
    int cap = g->cap ? 2 * g->cap : 64;
    pick_t *v = gc_realloc(g->picks, (size_t)cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    g->picks = v;
    g->cap = cap;
  }
  g->picks[g->npicks] = *p;
  gc_tpl_vid(&p->v, &g->tg, g->cc.id, g->picks[g->npicks].vid);
  g->npicks++;
  return GC_OK;
}

static int applies_at(gen_t *g, const gc_variant_t *v, const gc_problem_t *p, int64_t m,
                      int *ok, gc_err_t *e) {
  gc_problem_t q = *p;
  q.m = m;
  return gc_tpl_applies(v, &g->tg, &q, ok, e);
}

/* v := t's defaults for p (on the target, or the declared ones: tg NULL)
 * with the named params set; *ok: the constraints hold. */
static int forced_point(gen_t *g, const gc_template_t *t, const gc_target_t *tg, const gc_problem_t *p,
                        const char *params, gc_variant_t *v, int *ok, const char **why, gc_err_t *e) {
  gc_tpl_default(t, tg, p, v);
  if (params && gc_tpl_set_params(t, params, v, e)) return e->code;
  return gc_tpl_valid(v, &g->tg, ok, why, e);
}

/* --force TEMPLATE[:params] where it serves p; *used = 1 then. The
 * parameters not named take the op's defaults on the target, or, where
 * those break a constraint beside the named ones (a target's default
 * that does not fit a forced deeper pipeline), the declared defaults. */
static int forced(gen_t *g, const gc_problem_t *p, gc_variant_t *v, int *used, gc_err_t *e) {
  *used = 0;
  if (!g->o->force) return GC_OK;
  char name[64];
  const char *colon = strchr(g->o->force, ':');
  snprintf(name, sizeof name, "%.*s", colon ? (int)(colon - g->o->force) : 63, g->o->force);
  const gc_template_t *t = gc_tpl_find(&g->tpls, name);
  if (!t) return gc_err_set(e, GC_ENOTFOUND, "--force: no template named %s", GC_QUOTED(name));
  if (!gc_tpl_supports(t, p)) return GC_OK;
  int ok;
  const char *why = NULL, *params = colon ? colon + 1 : NULL;
  if (forced_point(g, t, &g->tg, p, params, v, &ok, &why, e)) return e->code;
  if (!ok) {
    gc_variant_t d;
    int dok;
    if (forced_point(g, t, NULL, p, params, &d, &dok, NULL, e)) return e->code;
    if (dok) *v = d, ok = 1;
  }
  if (!ok) /* name every parameter: those not forced took the target's defaults */
    return gc_err_set(e, GC_EINVAL, "--force %s (%s on %s): constraint fails: %s", g->o->force,
                      v->params, g->tg.name, why);
  if (applies_at(g, v, p, p->m, &ok, e)) return e->code;
  *used = ok;
  return GC_OK;
}

/* The winner of p from the database, if its template is unchanged. */
static int tuned(gen_t *g, const gc_problem_t *p, pick_t *pk, int *found, gc_err_t *e) {
  gc_db_winner_t w;
  *found = 0;
  if (!g->db) return GC_OK;
  if (gc_db_find_winner(g->db, g->tg.name, p, &w, found, e)) return e->code;
  if (!*found) return GC_OK;
  *found = 0;
  if (g->o->winner_ok && !g->o->winner_ok(g->o->winner_u, p)) {
    snprintf(pk->source, sizeof pk->source, "default: its winner left out of this bundle (a step check's)");
    return GC_OK;
  }
  if (w.step_lost && !g->o->winner_ok) {
    char step[48];
    snprintf(pk->source, sizeof pk->source, "default: the winner (measurement %lld) made %s "
             "slower, %.2f us against %.2f (gcore-tune's step check)", (long long)w.measurement_id,
             gc_db_step_name(w.step_rows, step, sizeof step), w.step_winner_us, w.step_default_us);
    g->nstep_lost++;
    return GC_OK;
  }
  const gc_template_t *t = gc_tpl_find(&g->tpls, w.template_name);
  char key[GC_PROBLEM_KEY];
  gc_problem_key(p, key);
  if (!t || strcmp(t->hash, w.template_hash)) {
    fprintf(stderr, "gcore-gen: %s on %s: the winner's template %s has changed since it was "
            "tuned; using the default (rerun gcore-tune)\n", key, g->tg.name, w.template_name);
    g->nstale++;
    return GC_OK;
  }
  int ok;
  gc_tpl_default(t, &g->tg, p, &pk->v);
  if (gc_tpl_set_params(t, w.params, &pk->v, e) || gc_tpl_valid(&pk->v, &g->tg, &ok, NULL, e))
    return e->code;
  if (!ok) return GC_OK;
  snprintf(pk->source, sizeof pk->source, "tuned: %s measurement %lld, %.2f us (%s)",
           g->o->db_path, (long long)w.measurement_id, w.median_us, w.compiler);
  *found = 1;
  return GC_OK;
}

static int choose(gen_t *g, const gc_problem_t *p, pick_t *pk, gc_err_t *e) {
  int found;
  memset(pk, 0, sizeof *pk);
  pk->shape = *p;
  pk->shape.m = 0;
  pk->m_lo = pk->m_hi = p->m;
  if (forced(g, p, &pk->v, &found, e)) return e->code;
  if (found) {
    snprintf(pk->source, sizeof pk->source, "forced: --force %s", g->o->force);
    return GC_OK;
  }
  if (tuned(g, p, pk, &found, e)) return e->code;
  if (found) {
    g->ntuned++;
    return GC_OK;
  }
  if (gc_tpl_pick_default(&g->tpls, &g->tg, p, &pk->v, e)) return e->code;
  pk->is_default = 1;
  if (!pk->source[0])
    snprintf(pk->source, sizeof pk->source, "default: no tuned winner%s", g->db ? " in the database" : " (no --db)");
  g->ndefault++;
  return GC_OK;
}

static int same_group(const gc_problem_t *a, const gc_problem_t *b) {
  return !strcmp(a->op, b->op) && a->ta == b->ta && a->tb == b->tb && a->tc == b->tc &&
         a->n == b->n && a->k == b->k && a->h == b->h && a->g == b->g && a->d == b->d;
}

static int cmp_m(const void *a, const void *b) {
  const gc_problem_t *x = a, *y = b;
  int c = strcmp(x->op, y->op);
  if (c) return c;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  if (x->k != y->k) return x->k < y->k ? -1 : 1;
  if (x->ta != y->ta) return (int)x->ta - (int)y->ta;
  if (x->tb != y->tb) return (int)x->tb - (int)y->tb;
  if (x->tc != y->tc) return (int)x->tc - (int)y->tc;
  for (int i = 3; i < GC_NDIMS; i++)
    if (gc_problem_get(x, i) != gc_problem_get(y, i))
      return gc_problem_get(x, i) < gc_problem_get(y, i) ? -1 : 1;
  return (x->m > y->m) - (x->m < y->m);
}

/* The lowest m in [lo, hi] from which v applies up to hi, given that it
 * applies at hi (@applies holds on an interval of m: templates/README.md). */
static int lowest_applying(gen_t *g, const gc_variant_t *v, const gc_problem_t *p, int64_t lo,
                           int64_t hi, int64_t *out, gc_err_t *e) {
  int ok;
  if (applies_at(g, v, p, lo, &ok, e)) return e->code;
  if (ok) {
    *out = lo;
    return GC_OK;
  }
  while (hi - lo > 1) { /* applies at hi, not at lo */
    int64_t mid = lo + (hi - lo) / 2;
    if (applies_at(g, v, p, mid, &ok, e)) return e->code;
    if (ok) hi = mid;
    else lo = mid;
  }
  *out = hi;
  return GC_OK;
}

/* The same, upwards: the highest m in [lo, hi] up to which v applies from lo. */
static int highest_applying(gen_t *g, const gc_variant_t *v, const gc_problem_t *p, int64_t lo,
                            int64_t hi, int64_t *out, gc_err_t *e) {
  int ok;
  if (applies_at(g, v, p, hi, &ok, e)) return e->code;
  if (ok) {
    *out = hi;
    return GC_OK;
  }
  while (hi - lo > 1) { /* applies at lo, not at hi */
    int64_t mid = lo + (hi - lo) / 2;
    if (applies_at(g, v, p, mid, &ok, e)) return e->code;
    if (ok) lo = mid;
    else hi = mid;
  }
  *out = lo;
  return GC_OK;
}

/* Exact entries, and below each the range down to the previous one that
 * its kernel serves. */
static int plan_exact(gen_t *g, const gc_problem_t *ps, int n, gc_err_t *e) {
  int64_t prev = 0;
  for (int i = 0; i < n; i++) {
    pick_t pk;
    int64_t lo = 0;
    if (choose(g, &ps[i], &pk, e) || push_pick(g, &pk, e)) return e->code;
    if (ps[i].m - 1 > prev) {
      if (lowest_applying(g, &pk.v, &ps[i], prev + 1, ps[i].m, &lo, e)) return e->code;
      if (lo < ps[i].m) {
        pk.m_lo = lo;
        pk.m_hi = ps[i].m - 1;
        if (push_pick(g, &pk, e)) return e->code;
      }
    }
    prev = ps[i].m;
  }
  return GC_OK;
}

/* Above the largest listed m (prev; 0 when none is listed): the default
 * for large m (or the --force template where it serves), where it applies
 * from there on (up to 2^31-1, else up to 4096, 256, 16 or 8: fused decode
 * ops exist only for the GEMVs' few rows); and, where it applies down to
 * m = 1, a catch-all as well. Best effort: plan_needs makes sure. */
static int plan_catch_all(gen_t *g, const gc_problem_t *shape, int64_t prev, gc_err_t *e) {
  static const int64_t his[] = {M_MAX, 4096, 256, 16, 8};
  for (size_t h = 0; h < GC_ARRAY_LEN(his) && his[h] > prev; h++) {
    gc_problem_t big = *shape;
    big.m = his[h];
    pick_t pk = {0};
    int lo_ok, hi_ok, one_ok, force_ok;
    gc_err_t invalid = {0};
    if (gc_problem_check(&big, &invalid)) return GC_OK; /* a problem of one row (a decode bucket's attention) */
    if (forced(g, &big, &pk.v, &force_ok, e)) return e->code;
    if (!force_ok) {
      gc_err_t none = {0};
      int rc = gc_tpl_pick_default(&g->tpls, &g->tg, &big, &pk.v, &none);
      if (rc == GC_ENOTFOUND || rc == GC_EINVAL) continue; /* nothing serves m this large */
      if (rc) return gc_err_set(e, rc, "%s", none.msg);
    }
    if (applies_at(g, &pk.v, &big, prev + 1, &lo_ok, e) ||
        applies_at(g, &pk.v, &big, his[h], &hi_ok, e) || applies_at(g, &pk.v, &big, 1, &one_ok, e))
      return e->code;
    if (!hi_ok || !lo_ok) continue;
    pk.shape = big;
    pk.shape.m = 0;
    pk.m_lo = one_ok ? 1 : prev + 1;
    pk.m_hi = his[h];
    pk.is_default = !force_ok;
    snprintf(pk.source, sizeof pk.source, "%s: %s", force_ok ? "forced" : "default",
             one_ok ? "catch-all for m not listed" : "m above the largest listed");
    return push_pick(g, &pk, e);
  }
  return GC_OK;
}

/* The lowest m >= from in no entry of picks[first..] (M_MAX + 1: none). */
static int64_t first_uncovered(const gen_t *g, int first, int64_t from) {
  for (int moved = 1; moved;) {
    moved = 0;
    for (int i = first; i < g->npicks; i++)
      if (g->picks[i].m_lo <= from && from <= g->picks[i].m_hi) {
        if (g->picks[i].m_hi >= M_MAX) return M_MAX + 1;
        from = g->picks[i].m_hi + 1;
        moved = 1;
      }
  }
  return from;
}

/* The end of the gap that starts at m: the lowest m_lo above it, less 1. */
static int64_t gap_end(const gen_t *g, int first, int64_t m, int64_t hi) {
  for (int i = first; i < g->npicks; i++)
    if (g->picks[i].m_lo > m && g->picks[i].m_lo - 1 < hi) hi = g->picks[i].m_lo - 1;
  return hi;
}

/* Every m of need nd served by an entry of this group (picks[first..]):
 * each gap gets the default that applies at its start, for as far as it
 * applies, until the gap is closed. A gap no template serves is a hole,
 * and the bundle is refused with its name. */
static int plan_need(gen_t *g, int first, const gc_need_t *nd, gc_err_t *e) {
  int64_t m = nd->lo;
  while ((m = first_uncovered(g, first, m)) <= nd->p.m) {
    int64_t end = gap_end(g, first, m, nd->p.m), hi = m;
    gc_problem_t at = nd->p;
    pick_t pk = {0};
    gc_err_t why = {0};
    at.m = m;
    int rc = gc_tpl_pick_default(&g->tpls, &g->tg, &at, &pk.v, &why);
    if (rc == GC_ENOTFOUND || rc == GC_EINVAL) {
      char key[GC_PROBLEM_KEY];
      gc_problem_key(&at, key);
      return gc_err_set(e, GC_ENOTFOUND, "no template serves '%s' on %s (a prompt of that "
                        "length would fail): %s", key, g->tg.name, why.msg);
    }
    if (rc) return gc_err_set(e, rc, "%s", why.msg);
    if (highest_applying(g, &pk.v, &at, m, end, &hi, e)) return e->code;
    pk.shape = at;
    pk.shape.m = 0;
    pk.m_lo = m;
    pk.m_hi = hi;
    pk.is_default = 1;
    snprintf(pk.source, sizeof pk.source, "default: rows %lld..%lld, which the model reaches",
             (long long)m, (long long)hi);
    if (push_pick(g, &pk, e)) return e->code;
    m = hi + 1;
  }
  return GC_OK;
}

/* One group of problems (same op, dtypes and dims but m): its exact
 * entries ps[0..n) (sorted by m; n may be 0), the catch-all, and every
 * need of the group. */
static int plan_group(gen_t *g, const gc_problem_t *shape, const gc_problem_t *ps, int n,
                      const gc_needs_t *needs, gc_err_t *e) {
  int first = g->npicks;
  if (plan_exact(g, ps, n, e) || plan_catch_all(g, shape, n ? ps[n - 1].m : 0, e))
    return e->code;
  for (int i = 0; needs && i < needs->n; i++)
    if (same_group(&needs->v[i].p, shape) && plan_need(g, first, &needs->v[i], e)) return e->code;
  return GC_OK;
}

/* Whether target g builds problem p: in a bundle that has an NVIDIA
 * target, the others leave out gcore's device layouts of the block
 * formats, which only NVIDIA's recipe has (models/recipe.h: a bundle for
 * several backends lists every backend's problems). Elsewhere every
 * target builds every problem (or says which it cannot). */
static int builds(const gen_t *g, const gc_problem_t *p) {
  return !g->nvidia || !gc_dtype_is_device_layout(p->tb) || !strcmp(g->tg.backend, "cuda");
}

/* Groups of the problems and needs (those the target builds), in a
 * stable order. */
static int plan_target(gen_t *g, const gc_problems_t *probs, const gc_needs_t *all_needs,
                       gc_err_t *e) {
  int n = 0, nn = 0, na = all_needs ? all_needs->n : 0;
  gc_problem_t *ps = gc_malloc((size_t)(probs->n + 1) * sizeof *ps, e);
  gc_needs_t kept = {gc_malloc((size_t)(na + 1) * sizeof *kept.v, e), 0, na + 1}, *needs = &kept;
  if (!ps || !kept.v) {
    free(ps), free(kept.v);
    return GC_ENOMEM;
  }
  for (int i = 0; i < probs->n; i++)
    if (builds(g, &probs->v[i])) ps[n++] = probs->v[i];
  for (int i = 0; i < na; i++)
    if (builds(g, &all_needs->v[i].p)) kept.v[nn++] = all_needs->v[i];
  kept.n = nn;
  qsort(ps, (size_t)n, sizeof *ps, cmp_m);
  int rc = GC_OK;
  for (int i = 0, j; !rc && i < n; i = j) {
    for (j = i + 1; j < n && same_group(&ps[i], &ps[j]); j++) {
    }
    rc = plan_group(g, &ps[i], ps + i, j - i, needs, e);
  }
  /* groups that only needs name (no listed m: --prefill none leaves the
   * GEMMs of longer prompts unlisted) */
  for (int i = 0; !rc && i < nn; i++) {
    int seen = 0;
    for (int j = 0; j < n && !seen; j++) seen = same_group(&needs->v[i].p, &ps[j]);
    for (int j = 0; j < i && !seen; j++) seen = same_group(&needs->v[i].p, &needs->v[j].p);
    if (!seen) rc = plan_group(g, &needs->v[i].p, NULL, 0, needs, e);
  }
  free(ps);
  free(kept.v);
  return rc;
}

/* Occupancy of a compiled pick, and a warning when it breaks the target's
 * limits (gcore-tune rejects such variants; a default or --force one may
 * still land here, and the AMD CI test fails on it). */
static int check_resources(gen_t *g, const pick_t *pk, gc_compile_job_t *j, gc_err_t *e) {
  gc_problem_t p = pk->shape;
  int ok;
  char why[300];
  p.m = pk->m_lo;
  if (gc_res_check(&pk->v, &g->tg, &p, &j->res, &ok, why, sizeof why, e)) return e->code;
  if (!ok)
    fprintf(stderr, "gcore-gen: warning: %s %s (%s) on %s: %s\n", pk->v.tpl->name,
            pk->v.params, pk->source, g->tg.name, why);
  return GC_OK;
}

/* Compile the distinct variants of this target's picks, then write them. */
static int emit_target(gen_t *g, gc_bundle_t *b, int first, gc_err_t *e) {
  int n = g->npicks - first, nj = 0, rc = GC_OK;
  gc_compile_job_t *jobs = gc_calloc((size_t)n, sizeof *jobs, e);
  gc_buf_t *src = gc_calloc((size_t)n, sizeof *src, e);
  if (!jobs || !src) rc = GC_ENOMEM;
  for (int i = first; !rc && i < g->npicks; i++) {
    pick_t *pk = &g->picks[i];
    pk->job = -1;
    for (int j = 0; j < nj; j++)
      if (!strcmp(jobs[j].vid, pk->vid)) pk->job = j;
    if (pk->job >= 0) continue;
    pk->job = nj;
    rc = gc_tpl_expand(&g->tpls, &pk->v, &g->tg, g->cc.id, &src[nj], jobs[nj].vid, e);
    jobs[nj].source = src[nj].data;
    jobs[nj].source_len = src[nj].len;
    jobs[nj].kernel = pk->v.tpl->kernel;
    nj++;
  }
  if (!rc) rc = gc_compile_batch(&g->cc, &g->tg, g->o->cache, jobs, nj, g->o->jobs, e);
  for (int i = first; !rc && i < g->npicks; i++)
    if (!jobs[g->picks[i].job].ok)
      rc = gc_err_set(e, GC_ECOMPILE, "%s %s (variant %s) for %s failed to compile: %s",
                      g->picks[i].v.tpl->name, g->picks[i].v.params, g->picks[i].vid,
                      g->tg.name, jobs[g->picks[i].job].log);
  int64_t *code_ids = rc ? NULL : gc_calloc((size_t)(nj ? nj : 1), sizeof *code_ids, e);
  if (!rc && !code_ids) rc = GC_ENOMEM;
  for (int j = 0; !rc && j < nj; j++) {
    const pick_t *pk = NULL;
    for (int i = first; i < g->npicks && !pk; i++)
      if (g->picks[i].job == j) pk = &g->picks[i];
    char *blob = NULL, dt[16];
    size_t size;
    gc_dtypes_format(pk->v.ta, pk->v.tb, pk->v.tc, dt);
    rc = gc_read_file(jobs[j].obj, GC_CODE_OBJECT_MAX, &blob, &size, e);
    gc_resources_t *r = &jobs[j].res;
    if (!rc) rc = check_resources(g, pk, &jobs[j], e);
    gc_code_rec_t cr = {g->tg.name, jobs[j].vid, pk->v.tpl->name, pk->v.tpl->hash,
                        pk->v.params, dt, g->cc.id, blob, size, r->regs, r->spills,
                        r->shared_bytes, r->scratch_bytes, r->agprs, r->sgprs, r->wave,
                        r->occupancy};
    if (!rc) rc = gc_bundle_add_code(b, &cr, &code_ids[j], e);
    free(blob);
  }
  for (int i = first; !rc && i < g->npicks; i++) {
    pick_t *pk = &g->picks[i];
    gc_dispatch_t d;
    memset(&d, 0, sizeof d);
    snprintf(d.target, sizeof d.target, "%s", g->tg.name);
    d.shape = pk->shape;
    d.m_lo = pk->m_lo;
    d.m_hi = pk->m_hi;
    d.code_id = code_ids[pk->job];
    snprintf(d.symbol, sizeof d.symbol, "%s", pk->v.tpl->kernel);
    snprintf(d.grid, sizeof d.grid, "%s", pk->v.tpl->grid);
    snprintf(d.block, sizeof d.block, "%s", pk->v.tpl->block);
    snprintf(d.shmem, sizeof d.shmem, "%s", pk->v.tpl->shmem);
    gc_tpl_tmaps_text(pk->v.tpl, d.tmaps, sizeof d.tmaps);
    snprintf(d.template_name, sizeof d.template_name, "%s", pk->v.tpl->name);
    snprintf(d.params, sizeof d.params, "%s", pk->v.params);
    snprintf(d.vid, sizeof d.vid, "%s", pk->vid);
    snprintf(d.source, sizeof d.source, "%s", pk->source);
    d.is_default = pk->is_default;
    d.pdl = pk->v.tpl->pdl;
    d.prefetch = pk->v.tpl->prefetch;
    rc = gc_tpl_consts_text(&pk->v, &g->tg, d.consts, sizeof d.consts, e);
    if (!rc) rc = gc_bundle_add_dispatch(b, &d, e);
  }
  for (int j = 0; src && j < nj; j++) gc_buf_free(&src[j]);
  free(src);
  free(jobs);
  free(code_ids);
  return rc;
}

static int write_provenance(gen_t *g, gc_bundle_t *b, gc_err_t *e) {
  char when[64], buf[128];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  snprintf(buf, sizeof buf, "%d tuned, %d default, %d stale, %d slower in the step", g->ntuned, g->ndefault,
           g->nstale, g->nstep_lost);
  if (gc_bundle_set_meta(b, "tool", "gcore-gen " GC_VERSION, e) ||
      gc_bundle_set_meta(b, "created", when, e) ||
      gc_bundle_set_meta(b, "targets", g->o->targets, e) ||
      gc_bundle_set_meta(b, "tune_db", g->o->db_path ? g->o->db_path : "(none)", e) ||
      gc_bundle_set_meta(b, "entries", buf, e))
    return e->code;
  for (const char *const *m = g->o->meta; m && m[0]; m += 2)
    if (gc_bundle_set_meta(b, m[0], m[1], e)) return e->code;
  return GC_OK;
}

/* --compiler and --code-object must fit at least one listed target, so
 * that a typo is an error rather than silently ignored. */
static int check_target_opts(gen_t *g, gc_err_t *e) {
  char list[512];
  int compiler_used = 0, cov_used = 0;
  snprintf(list, sizeof list, "%s", g->o->targets);
  for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    gc_target_t tg;
    if (gc_target_parse(t, &tg, e)) return e->code;
    compiler_used |= g->o->compiler && gc_compiler_serves(g->o->compiler, tg.backend);
    cov_used |= !strcmp(tg.backend, "hip");
  }
  if (g->o->compiler && !compiler_used)
    return gc_err_set(e, GC_EINVAL, "--compiler %s builds none of the targets %s (cc: cpu, "
                      "nvrtc: sm_XX, comgr or clang: gfx...)", g->o->compiler, g->o->targets);
  if (g->o->code_object && !cov_used)
    return gc_err_set(e, GC_EINVAL, "--code-object applies to AMD targets; none in %s",
                      g->o->targets);
  return GC_OK;
}

/* Parse target t with the options that shape its code. */
static int setup_target(gen_t *g, const char *t, gc_err_t *e) {
  const char *force = g->o->compiler;
  if (gc_target_parse(t, &g->tg, e)) return e->code;
  if (g->o->code_object && !strcmp(g->tg.backend, "hip") &&
      gc_target_set_code_object(&g->tg, g->o->code_object, e))
    return e->code;
  if (force && !gc_compiler_serves(force, g->tg.backend)) force = NULL;
  if (gc_compiler_for(&g->tg, force, &g->cc, e)) return e->code;
  if (g->o->compile_timeout_s > 0) g->cc.timeout_s = g->o->compile_timeout_s;
  if (!strcmp(g->tg.backend, "hip") && !gc_comgr_available(NULL, 0, NULL) && !g->o->quiet)
    fprintf(stderr, "gcore-gen: warning: AMD comgr not found: %s code builds, but its "
            "resources (VGPRs, LDS, spills) are not read or checked (install libamd-comgr2)\n",
            g->tg.name);
  return GC_OK;
}

static int gen_targets(gen_t *g, gc_bundle_t *b, const gc_problems_t *probs,
                       const gc_needs_t *needs, gc_err_t *e) {
  char list[512];
  snprintf(list, sizeof list, "%s", g->o->targets);
  for (const char *t = list; *t; t += strcspn(t, ",") + (t[strcspn(t, ",")] == ','))
    g->nvidia |= !strncmp(t, "sm_", 3);
  int rc = check_target_opts(g, e);
  for (char *save = NULL, *t = strtok_r(list, ",", &save); !rc && t;
       t = strtok_r(NULL, ",", &save)) {
    int first = g->npicks;
    char key[80];
    rc = setup_target(g, t, e);
    if (!rc) rc = plan_target(g, probs, needs, e);
    if (!rc) rc = emit_target(g, b, first, e);
    if (!rc) {
      snprintf(key, sizeof key, "compiler:%s", g->tg.name);
      rc = gc_bundle_set_meta(b, key, g->cc.id, e);
    }
  }
  return rc;
}

int gc_gen_bundle(const gc_gen_opts_t *o, const gc_problems_t *probs, const gc_needs_t *needs,
                  gc_err_t *e) {
  gen_t g;
  memset(&g, 0, sizeof g);
  g.o = o;
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", o->out_path, (int)getpid());
  gc_bundle_t *b = NULL;
  int rc = gc_check_output(o->out_path, 'f', e);
  if (!rc) rc = gc_tpl_load_all(o->templates_dir, &g.tpls, e);
  if (!rc && o->db_path) rc = gc_db_open(o->db_path, 0, &g.db, e);
  if (!rc) rc = gc_bundle_create(tmp, &b, e);
  if (!rc) rc = gen_targets(&g, b, probs, needs, e);
  if (!rc) rc = write_provenance(&g, b, e);
  if (!rc) rc = gc_bundle_finish(b, e);
  gc_bundle_close(b);
  if (!rc) rc = gc_rename_output(tmp, o->out_path, e);
  if (rc) unlink(tmp);
  if (!rc && !o->quiet)
    printf("%s: %d problems for %s: %d tuned, %d defaults%s%s; %d dispatch entries\n",
           o->out_path, probs->n, o->targets, g.ntuned, g.ndefault,
           g.nstale ? " (some winners stale)" : "",
           g.nstep_lost ? " (some winners slowed the decode step: gcore-tune's step check)" : "", g.npicks);
  gc_db_close(g.db);
  gc_tpl_free_all(&g.tpls);
  free(g.picks);
  return rc;
}
