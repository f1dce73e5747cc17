/* gcore.c — the public C API (include/gcore.h): contexts, the operations
 * as problems of the op table (core/ops.h) launched on the caller's
 * buffers and stream, errors per thread, version and counters. Every
 * function here checks its arguments before anything else sees them:
 * this is where untrusted values from a caller enter. */
#include <stdlib.h>
#include <string.h>

#include "../gen/autobundle.h"
#include "../gen/compile.h"
#include "../gen/target.h"
#include "ctx.h"

/* gcore.h's codes and dtypes are the internal ones (compared as ints:
 * they are different enums). */
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(GCORE_EINVAL, GC_EINVAL) && SAME(GCORE_ENOMEM, GC_ENOMEM) &&
                   SAME(GCORE_EIO, GC_EIO) && SAME(GCORE_ECORRUPT, GC_ECORRUPT) &&
                   SAME(GCORE_ENOTFOUND, GC_ENOTFOUND) &&
                   SAME(GCORE_EUNSUPPORTED, GC_EUNSUPPORTED) && SAME(GCORE_EDEVICE, GC_EDEVICE) &&
                   SAME(GCORE_ECOMPILE, GC_ECOMPILE) && SAME(GCORE_ELAUNCH, GC_ELAUNCH) &&
                   SAME(GCORE_EVERIFY, GC_EVERIFY),
               "error codes");
_Static_assert(SAME(GCORE_F32, GC_DT_F32) && SAME(GCORE_F16, GC_DT_F16) &&
                   SAME(GCORE_BF16, GC_DT_BF16),
               "dtypes");

#define ALIGN 64 /* what every template may assume of a buffer (templates/README.md) */

/* ---- errors ------------------------------------------------------------------ */

static _Thread_local gc_err_t last;

/* The calling thread's error, cleared: every public call starts here. */
static gc_err_t *fresh(void) {
  last.code = GC_OK;
  last.msg[0] = 0;
  return &last;
}

const char *gcore_errmsg(void) { return last.msg; }

const char *gcore_errname(int code) {
  static const char *const names[] = {"GCORE_OK",       "GCORE_EINVAL",       "GCORE_ENOMEM",
                                      "GCORE_EIO",      "GCORE_ECORRUPT",     "GCORE_ENOTFOUND",
                                      "GCORE_EUNSUPPORTED", "GCORE_EDEVICE", "GCORE_ECOMPILE",
                                      "GCORE_ELAUNCH",  "GCORE_EVERIFY"};
  return code >= 0 && code < (int)GC_ARRAY_LEN(names) ? names[code] : "GCORE_E?";
}

/* ---- version ------------------------------------------------------------------ */

const char *gcore_version(void) { return GC_VERSION; }
int gcore_version_number(void) { return GCORE_VERSION_NUMBER; }
int gcore_abi_version(void) { return GCORE_ABI_VERSION; }

/* ---- contexts ------------------------------------------------------------------ */

/* A context on backend's device with the mutex and counters ready; the
 * caller sets where its kernels come from. */
static int ctx_new(const char *backend, int device, gcore_ctx **out, gc_err_t *e) {
  *out = NULL;
  if (!backend) return gc_err_set(e, GC_EINVAL, "backend is NULL (\"cpu\", \"cuda\" or \"hip\")");
  gcore_ctx *c = gc_calloc(1, sizeof *c, e);
  if (!c) return GC_ENOMEM;
  if (pthread_mutex_init(&c->mu, NULL)) {
    free(c);
    return gc_err_set(e, GC_ENOMEM, "cannot create a mutex");
  }
  for (int i = 0; i < GCORE_STAT_COUNT; i++) atomic_init(&c->stats[i], 0);
  gc_cache_default(c->cache, sizeof c->cache);
  if (gc_dev_open(backend, device, &c->dev, e)) {
    pthread_mutex_destroy(&c->mu);
    free(c);
    return e->code;
  }
  *out = c;
  return GC_OK;
}

int gcore_open(const char *backend, int device, const char *bundle_path, gcore_ctx **ctx) {
  gc_err_t *e = fresh();
  if (!ctx) return gc_err_set(e, GC_EINVAL, "ctx is NULL");
  *ctx = NULL;
  if (!bundle_path) return gc_err_set(e, GC_EINVAL, "bundle_path is NULL (gcore_open_db opens without one)");
  gcore_ctx *c;
  if (ctx_new(backend, device, &c, e)) return e->code;
  if (gc_rt_open(c->dev, bundle_path, &c->main, e)) {
    gcore_close(c);
    return e->code;
  }
  snprintf(c->target, sizeof c->target, "%s", gc_rt_target(c->main));
  *ctx = c;
  return GC_OK;
}

/* The device's own target, arch-specific where it has one and runs it
 * (sm_90a for an sm_90 device: wgmma exists only there). */
static void own_target(gc_dev_t *dev, char *out, size_t n) {
  gc_target_t tg;
  const char *t = gc_dev_info(dev)->target;
  snprintf(out, n, "%sa", t);
  if (!gc_dev_runs_target(dev, out) || gc_target_parse(out, &tg, NULL)) snprintf(out, n, "%s", t);
}

int gcore_open_db(const char *backend, int device, const char *db_path, const char *target,
                  gcore_ctx **ctx) {
  gc_err_t *e = fresh();
  if (!ctx) return gc_err_set(e, GC_EINVAL, "ctx is NULL");
  *ctx = NULL;
  gcore_ctx *c;
  gc_target_t tg;
  if (ctx_new(backend, device, &c, e)) return e->code;
  if (target) snprintf(c->target, sizeof c->target, "%s", target);
  else own_target(c->dev, c->target, sizeof c->target);
  int rc = gc_target_parse(c->target, &tg, e);
  if (!rc && !gc_dev_runs_target(c->dev, tg.name))
    rc = gc_err_set(e, GC_EINVAL, "target %s does not run on this device (%s, %s)", GC_QUOTED(tg.name),
                    gc_dev_info(c->dev)->target, gc_dev_info(c->dev)->name);
  if (rc) {
    gcore_close(c);
    return rc;
  }
  snprintf(c->target, sizeof c->target, "%s", tg.name);
  if (db_path) snprintf(c->db, sizeof c->db, "%s", db_path);
  else gc_db_default_path(c->db, sizeof c->db);
  *ctx = c;
  return GC_OK;
}

void gcore_close(gcore_ctx *ctx) {
  if (!ctx) return;
  gc_api_ctx_free(ctx);
  pthread_mutex_destroy(&ctx->mu);
  free(ctx);
}

const char *gcore_target(const gcore_ctx *ctx) { return ctx ? ctx->target : ""; }

int gcore_stats(const gcore_ctx *ctx, int64_t *values, int n) {
  if (!ctx || !values) return -1;
  if (n > GCORE_STAT_COUNT) n = GCORE_STAT_COUNT;
  for (int i = 0; i < n; i++) values[i] = atomic_load(&((gcore_ctx *)ctx)->stats[i]);
  return n < 0 ? 0 : n;
}

/* ---- operations ----------------------------------------------------------------- */

/* What the caller passed, checked: dtypes, dimensions (gc_problem_check),
 * every buffer non-NULL and aligned. */
static int check_call(const gcore_ctx *ctx, const gc_problem_t *p, const void *const *bufs,
                      gc_err_t *e) {
  if (!ctx) return gc_err_set(e, GC_EINVAL, "%s: ctx is NULL", p->op);
  gc_dtype_t t[3] = {p->ta, p->tb, p->tc};
  for (int i = 0; i < 3; i++)
    if ((int)t[i] < GCORE_F32 || (int)t[i] > GCORE_BF16)
      return gc_err_set(e, GC_EINVAL, "%s: dtype %d of operand %c is not GCORE_F32, GCORE_F16 "
                        "or GCORE_BF16", p->op, (int)t[i], "ABC"[i]);
  if (gc_problem_check(p, e)) return e->code; /* "gemm: m=0 is out of range ..." */
  const gc_op_t *op = gc_op_find(p->op);
  for (int i = 0; i < op->nbufs; i++) {
    if (!bufs[i]) return gc_err_set(e, GC_EINVAL, "%s: buffer %s is NULL", p->op, op->buf[i].name);
    int align = op->buf[i].dtype == 'i' ? 4 : ALIGN; /* pos: one int32 */
    if ((uintptr_t)bufs[i] % (uintptr_t)align)
      return gc_err_set(e, GC_EINVAL, "%s: buffer %s at %p is not %d-byte aligned", p->op,
                        op->buf[i].name, bufs[i], align);
  }
  return GC_OK;
}

/* Find p's kernel and enqueue it on stream with bufs (in the op's order)
 * and the scalars sc. */
static int launch(gcore_ctx *ctx, const gc_problem_t *p, const gc_op_scalars_t *sc,
                  const void *const *bufs, void *stream, gc_err_t *e) {
  const gc_api_route_t *r;
  gc_dptr_t ptr[GC_OP_MAX_BUFS];
  gc_argpack_t pk;
  int rc = check_call(ctx, p, bufs, e);
  if (rc) goto out;
  for (int i = 0; i < gc_op_find(p->op)->nbufs; i++) ptr[i] = (gc_dptr_t)(uintptr_t)bufs[i];
  gc_op_args(p, sc, ptr, &pk);
  pthread_mutex_lock(&ctx->mu);
  /* the stream is checked first (the device refuses one it cannot use), and
   * the kernel found (or built and verified) on the device's own stream */
  if (!(rc = gc_dev_set_stream(ctx->dev, &stream, e))) {
    gc_dev_set_stream(ctx->dev, NULL, NULL); /* back to its own: can't fail */
    rc = gc_api_route(ctx, p, &r, e);
  }
  if (!rc && !(rc = gc_dev_set_stream(ctx->dev, &stream, e))) {
    rc = gc_rt_launch(r->rt, r->k, p, pk.args, e);
    gc_dev_set_stream(ctx->dev, NULL, NULL);
  }
  pthread_mutex_unlock(&ctx->mu);
  if (!rc) {
    atomic_fetch_add(&ctx->stats[GCORE_STAT_CALLS], 1);
    atomic_fetch_add(&ctx->stats[r->tuned ? GCORE_STAT_TUNED : GCORE_STAT_UNTUNED], 1);
  }
out:
  if (rc && ctx) atomic_fetch_add(&ctx->stats[GCORE_STAT_ERRORS], 1);
  return rc;
}

static gc_problem_t problem(const char *op, int ta, int tb, int tc, int64_t m, int64_t n,
                            int64_t k) {
  gc_problem_t p;
  memset(&p, 0, sizeof p);
  snprintf(p.op, sizeof p.op, "%s", op);
  p.ta = (gc_dtype_t)ta, p.tb = (gc_dtype_t)tb, p.tc = (gc_dtype_t)tc;
  p.m = m, p.n = n, p.k = k;
  return p;
}

int gcore_gemm(gcore_ctx *ctx, int epilogue, int ta, int tb, int tc, int64_t m, int64_t n,
               int64_t k, const void *a, const void *b, void *c, void *stream) {
  gc_err_t *e = fresh();
  static const char *const ops[] = {"gemm", "gemm_add", "gemm_swiglu"};
  if (epilogue < 0 || epilogue > GCORE_EPI_SWIGLU) {
    if (ctx) atomic_fetch_add(&ctx->stats[GCORE_STAT_ERRORS], 1);
    return gc_err_set(e, GC_EINVAL, "gemm: epilogue %d is not GCORE_EPI_NONE, _ADD or _SWIGLU",
                      epilogue);
  }
  gc_problem_t p = problem(ops[epilogue], ta, tb, tc, m, n, k);
  gc_op_scalars_t sc = {0};
  const void *bufs[] = {a, b, c};
  return launch(ctx, &p, &sc, bufs, stream, e);
}

int gcore_rmsnorm_gemm(gcore_ctx *ctx, int epilogue, int ta, int tb, int tc, int64_t m,
                       int64_t n, int64_t k, const void *a, const void *norm, float eps,
                       const void *b, void *c, void *stream) {
  gc_err_t *e = fresh();
  if (epilogue != GCORE_EPI_NONE && epilogue != GCORE_EPI_SWIGLU) {
    if (ctx) atomic_fetch_add(&ctx->stats[GCORE_STAT_ERRORS], 1);
    return gc_err_set(e, GC_EINVAL, "rmsnorm_gemm: epilogue %d is not GCORE_EPI_NONE or "
                      "GCORE_EPI_SWIGLU", epilogue);
  }
  gc_problem_t p = problem(epilogue ? "rmsnorm_gemm_swiglu" : "rmsnorm_gemm", ta, tb, tc, m, n, k);
  gc_op_scalars_t sc = {.eps = eps};
  const void *bufs[] = {a, b, c, norm};
  return launch(ctx, &p, &sc, bufs, stream, e);
}

int gcore_rmsnorm(gcore_ctx *ctx, int ta, int tb, int tc, int64_t m, int64_t n, const void *x,
                  const void *w, float eps, void *y, void *stream) {
  gc_err_t *e = fresh();
  gc_problem_t p = problem("rmsnorm", ta, tb, tc, m, n, 0);
  gc_op_scalars_t sc = {.eps = eps};
  const void *bufs[] = {x, w, y};
  return launch(ctx, &p, &sc, bufs, stream, e);
}

int gcore_attention(gcore_ctx *ctx, int ta, int tb, int tc, int64_t m, int64_t h, int64_t g,
                    int64_t d, const void *q, const void *kc, const void *vc,
                    const int32_t *pos, float scale, void *o, void *stream) {
  gc_err_t *e = fresh();
  gc_problem_t p = problem("attention", ta, tb, tc, m, 0, 0);
  p.h = h, p.g = g, p.d = d;
  if (h > 0 && g > 0 && h % g) {
    if (ctx) atomic_fetch_add(&ctx->stats[GCORE_STAT_ERRORS], 1);
    return gc_err_set(e, GC_EINVAL, "attention: h = %lld query heads is not a multiple of g = "
                      "%lld kv heads", (long long)h, (long long)g);
  }
  gc_op_scalars_t sc = {.scale = scale};
  const void *bufs[] = {q, kc, vc, o, pos};
  return launch(ctx, &p, &sc, bufs, stream, e);
}
