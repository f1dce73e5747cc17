/* ctx.c — how a context finds the kernel for a problem. In order:
 *   1. the bundle it was opened with (gcore_open): its entry for the
 *      problem, tuned or default;
 *   2. a bundle built on demand for the problem's group (op, dtypes, n, k;
 *      h, g, d) and row bucket (m rounded up to a power of two) through
 *      gen/autobundle.h: every winner the tuning database holds for the
 *      group as an exact entry, the default chosen at the bucket's m for
 *      the rows up to it, and the catch-all. gcore-gen's own code, so the
 *      bundle is what gcore-gen would build; it is cached on disk under a
 *      key of everything it depends on, so another process, or a later
 *      run, reuses it.
 * An entry marked default has not been through the tuner's verification:
 * before its first use it is run once on this device on random inputs
 * (runtime/check.h: guards, poisoned outputs, every element against the
 * fp64 reference), and one that fails is never launched for the caller.
 * Each problem's outcome is kept in a hash table of routes, so a call
 * after the first costs one lookup. */
#include "ctx.h"

#include <stdlib.h>
#include <string.h>

#include "../gen/autobundle.h"
#include "../runtime/check.h"

#define VERIFY_ROWS 64          /* rows at most of a verification problem */
#define VERIFY_FLOPS 4e9        /* and fewer while the fp64 reference costs more */
#define VERIFY_SEED 0x6763617069ull

/* ---- the route table ------------------------------------------------------ */

static uint64_t problem_hash(const gc_problem_t *p) {
  uint64_t h = 1469598103934665603ull;
  for (const char *s = p->op; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  int64_t v[] = {p->ta, p->tb, p->tc, p->m, p->n, p->k, p->h, p->g, p->d};
  for (size_t i = 0; i < GC_ARRAY_LEN(v); i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static int same_problem(const gc_problem_t *a, const gc_problem_t *b) {
  if (strcmp(a->op, b->op) || a->ta != b->ta || a->tb != b->tb || a->tc != b->tc) return 0;
  for (int i = 0; i < GC_NDIMS; i++)
    if (gc_problem_get(a, i) != gc_problem_get(b, i)) return 0;
  return 1;
}

static gc_api_route_t *route_find(gcore_ctx *ctx, const gc_problem_t *p) {
  if (!ctx->cap) return NULL;
  for (size_t i = problem_hash(p) & (ctx->cap - 1);; i = (i + 1) & (ctx->cap - 1)) {
    gc_api_route_t *r = ctx->routes[i];
    if (!r) return NULL;
    if (same_problem(&r->p, p)) return r;
  }
}

static void route_place(gc_api_route_t **v, size_t cap, gc_api_route_t *r) {
  size_t i = problem_hash(&r->p) & (cap - 1);
  while (v[i]) i = (i + 1) & (cap - 1);
  v[i] = r;
}

/* Add r (owned by the table from now on, also on failure: freed). */
static int route_add(gcore_ctx *ctx, gc_api_route_t *r, gc_err_t *e) {
  if (2 * (ctx->nroutes + 1) > ctx->cap) {
    size_t cap = ctx->cap ? 2 * ctx->cap : 64;
    gc_api_route_t **v = gc_calloc(cap, sizeof *v, e);
    if (!v) {
      free(r->msg);
      free(r);
      return GC_ENOMEM;
    }
    for (size_t i = 0; i < ctx->cap; i++)
      if (ctx->routes[i]) route_place(v, cap, ctx->routes[i]);
    free(ctx->routes);
    ctx->routes = v;
    ctx->cap = cap;
  }
  route_place(ctx->routes, ctx->cap, r);
  ctx->nroutes++;
  return GC_OK;
}

/* ---- verification of default entries -------------------------------------- */

typedef struct launch_job {
  gc_rt_t *rt;
  const gc_rt_kernel_t *k;
  const gc_problem_t *p;
} launch_job_t;

static int launch_job(void *arg, void **args, gc_err_t *e) {
  launch_job_t *j = arg;
  return gc_rt_launch(j->rt, j->k, j->p, args, e);
}

/* The rows to verify k at for p: p's own up to VERIFY_ROWS, fewer while
 * the reference would cost over VERIFY_FLOPS, never outside k's range. */
static int64_t verify_rows(const gc_rt_kernel_t *k, const gc_problem_t *p) {
  gc_problem_t q = *p;
  q.m = p->m < VERIFY_ROWS ? p->m : VERIFY_ROWS;
  while (q.m > 1 && gc_op_flops(&q) > VERIFY_FLOPS) q.m /= 2;
  return q.m < k->d.m_lo ? k->d.m_lo : q.m;
}

/* Run k once on random inputs of p's shape on the device's own stream
 * at each of the tuner's points (gc_op_tune_points: a decode attention at
 * four context lengths) and check every output element: *ok, and why it
 * failed. Errors are those of the device (a launch that fails is a failed
 * verification). */
static int verify(gcore_ctx *ctx, gc_rt_t *rt, const gc_rt_kernel_t *k, const gc_problem_t *p,
                  int *ok, char *why, size_t why_n, gc_err_t *e) {
  gc_problem_t q = *p;
  q.m = verify_rows(k, p);
  gc_op_scalars_t sc[GC_OP_MAX_POINTS];
  gc_verify_t v = {.ok = 1};
  launch_job_t j = {rt, k, &q};
  char key[GC_PROBLEM_KEY];
  gc_problem_key(&q, key);
  int rc = GC_OK;
  for (int i = 0, n = gc_op_tune_points(&q, sc); !rc && v.ok && i < n; i++) {
    gc_check_t *c = NULL;
    gc_err_t le = {0};
    rc = gc_check_setup(ctx->dev, &q, &sc[i], VERIFY_SEED, &c, e);
    if (!rc) {
      int lrc = gc_check_verify(c, launch_job, &j, &v, &le);
      if (lrc == GC_ELAUNCH || lrc == GC_EUNSUPPORTED) /* the kernel's fault, not the device's */
        v.ok = 0, snprintf(v.why, sizeof v.why, "%s", le.msg);
      else if (lrc)
        rc = gc_err_set(e, lrc, "%s", le.msg);
    }
    if (!rc && !v.ok) { /* where, beyond the default point */
      char at[48], why[sizeof v.why];
      gc_op_point_label(&sc[i], i, at, sizeof at);
      snprintf(why, sizeof why, "%s%s", at, v.why);
      snprintf(v.why, sizeof v.why, "%s", why);
    }
    gc_check_free(c);
  }
  if (rc) return gc_err_prefix(e, "verifying %s for %s", k->d.template_name, key);
  *ok = v.ok;
  snprintf(why, why_n, "%s %s (default) fails verification at %s: %s", k->d.template_name,
           k->d.params, key, v.why);
  atomic_fetch_add(&ctx->stats[GCORE_STAT_VERIFIED], 1);
  if (!v.ok) atomic_fetch_add(&ctx->stats[GCORE_STAT_VERIFY_FAILED], 1);
  return GC_OK;
}

/* The verdict on k of rt (verified now if it has none). */
static int verdict(gcore_ctx *ctx, gc_rt_t *rt, const gc_rt_kernel_t *k, const gc_problem_t *p,
                   const gc_api_verdict_t **out, gc_err_t *e) {
  for (int i = 0; i < ctx->nverdicts; i++)
    if (ctx->verdicts[i].rt == rt && ctx->verdicts[i].entry == k->d.id) {
      *out = &ctx->verdicts[i];
      return GC_OK;
    }
  char why[GC_ERR_MSG];
  int ok = 0;
  if (verify(ctx, rt, k, p, &ok, why, sizeof why, e)) return e->code;
  gc_api_verdict_t *v = gc_realloc(ctx->verdicts, (size_t)(ctx->nverdicts + 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  ctx->verdicts = v;
  v += ctx->nverdicts;
  *v = (gc_api_verdict_t){rt, k->d.id, ok, NULL};
  if (!ok && !(v->why = gc_strdup(why, e))) return GC_ENOMEM;
  ctx->nverdicts++;
  *out = v;
  return GC_OK;
}

/* ---- sources ---------------------------------------------------------------- */

/* p's entry in rt, into r: GC_ENOTFOUND where rt has none, GC_EVERIFY
 * (with the reason) where it is a default that fails verification. */
static int from_bundle(gcore_ctx *ctx, gc_rt_t *rt, const gc_problem_t *p, gc_api_route_t *r,
                       gc_err_t *e) {
  const gc_rt_kernel_t *k;
  const gc_api_verdict_t *v;
  if (gc_rt_find(rt, p, &k, e)) return e->code;
  if (k->d.is_default) {
    if (verdict(ctx, rt, k, p, &v, e)) return e->code;
    if (!v->ok) return gc_err_set(e, GC_EVERIFY, "%s", v->why);
  }
  r->rt = rt;
  r->k = k;
  r->tuned = !k->d.is_default;
  return GC_OK;
}

/* m rounded up to a power of two, within the dimensions' range [1, 2^31). */
static int64_t bucket_of(int64_t m) {
  int64_t b = 1;
  while (b < m) b *= 2;
  return b < ((int64_t)1 << 31) ? b : ((int64_t)1 << 31) - 1;
}

static int same_group(const gc_problem_t *a, const gc_problem_t *b) {
  gc_problem_t x = *a, y = *b;
  x.m = y.m = 0;
  return same_problem(&x, &y);
}

/* Build (or take from the disk cache) the bundle for probs and needs, open
 * it, and add it to the context's sources. */
static int build(gcore_ctx *ctx, const gc_problem_t *group, int64_t bucket,
                 const gc_problems_t *probs, const gc_needs_t *needs, gc_rt_t **out, gc_err_t *e) {
  gc_auto_result_t res;
  gc_api_src_t *v = gc_realloc(ctx->srcs, (size_t)(ctx->nsrcs + 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  ctx->srcs = v;
  if (gc_gen_auto(ctx->db[0] ? ctx->db : NULL, ctx->target, ctx->cache, probs, needs, NULL, &res, e) ||
      gc_rt_open(ctx->dev, res.path, out, e))
    return e->code;
  atomic_fetch_add(&ctx->stats[GCORE_STAT_BUILDS], 1);
  ctx->srcs[ctx->nsrcs++] = (gc_api_src_t){*out, *group, bucket};
  return GC_OK;
}

/* The on-demand bundle of p's group and bucket. Rows up to the bucket
 * first (the bucket's default for the rows its kernel serves, the group's
 * winners, the gaps closed); where some row below has no template, the
 * exact problem alone. GC_ENOTFOUND: no template serves p. */
static int on_demand(gcore_ctx *ctx, const gc_problem_t *p, gc_rt_t **out, gc_err_t *e) {
  gc_problem_t group = *p;
  group.m = 0;
  int64_t b = bucket_of(p->m);
  for (int i = ctx->nsrcs - 1; i >= 0; i--)
    if (ctx->srcs[i].bucket == b && same_group(&ctx->srcs[i].group, &group)) {
      *out = ctx->srcs[i].rt;
      return GC_OK;
    }
  gc_problem_t at = *p;
  at.m = b;
  gc_problems_t probs = {.v = &at, .n = 1, .cap = 1};
  gc_need_t need = {at, 1};
  gc_needs_t needs = {.v = &need, .n = 1, .cap = 1};
  int rc = build(ctx, &group, b, &probs, &needs, out, e);
  if (rc == GC_ENOTFOUND && b != p->m) {
    probs.v = (gc_problem_t *)p;
    rc = build(ctx, &group, p->m, &probs, NULL, out, e);
  }
  return rc;
}

/* Whether a failure of resolution would be the same on the next call. */
static int lasting(int code) {
  return code == GC_ENOTFOUND || code == GC_EUNSUPPORTED || code == GC_EVERIFY ||
         code == GC_ECOMPILE || code == GC_ECORRUPT || code == GC_EINVAL;
}

/* Resolve p into r: the bundle of the context, else on demand. */
static int resolve(gcore_ctx *ctx, const gc_problem_t *p, gc_api_route_t *r, gc_err_t *e) {
  char first[GC_ERR_MSG] = "";
  gc_rt_t *rt;
  if (ctx->main) {
    int rc = from_bundle(ctx, ctx->main, p, r, e);
    if (rc != GC_ENOTFOUND && rc != GC_EVERIFY) return rc;
    snprintf(first, sizeof first, "%s", e->msg);
  }
  int rc = on_demand(ctx, p, &rt, e);
  if (!rc) rc = from_bundle(ctx, rt, p, r, e);
  if (rc == GC_ENOTFOUND) rc = gc_err_prefix(e, "no kernel for this shape on %s", ctx->target);
  if (rc && first[0]) gc_err_prefix(e, "%s; and on demand", first);
  if (rc == GC_ENOTFOUND) e->code = rc = GC_EUNSUPPORTED;
  return rc;
}

int gc_api_route(gcore_ctx *ctx, const gc_problem_t *p, const gc_api_route_t **out,
                 gc_err_t *e) {
  gc_api_route_t *r = route_find(ctx, p);
  if (!r) {
    if (!(r = gc_calloc(1, sizeof *r, e))) return GC_ENOMEM;
    r->p = *p;
    int rc = resolve(ctx, p, r, e);
    if (rc && !lasting(rc)) {
      free(r);
      return rc;
    }
    r->code = rc;
    if (rc && !(r->msg = gc_strdup(e->msg, e))) {
      free(r);
      return GC_ENOMEM;
    }
    if (route_add(ctx, r, e)) return e->code;
  }
  *out = r;
  if (r->code) return gc_err_set(e, r->code, "%s", r->msg);
  return GC_OK;
}

void gc_api_ctx_free(gcore_ctx *ctx) {
  for (size_t i = 0; i < ctx->cap; i++)
    if (ctx->routes[i]) {
      free(ctx->routes[i]->msg);
      free(ctx->routes[i]);
    }
  free(ctx->routes);
  for (int i = 0; i < ctx->nverdicts; i++) free(ctx->verdicts[i].why);
  free(ctx->verdicts);
  for (int i = 0; i < ctx->nsrcs; i++) gc_rt_close(ctx->srcs[i].rt);
  free(ctx->srcs);
  gc_rt_close(ctx->main);
  gc_dev_close(ctx->dev);
}
