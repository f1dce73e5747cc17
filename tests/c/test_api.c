/* test_api.c — the public C API (include/gcore.h) on the CPU backend:
 * every operation against the fp64 reference of the op table (core/ops.h:
 * inputs, reference and tolerance, gc_op_check), at shapes no bundle
 * names (built on demand), in each dtype for the GEMM; bad arguments
 * (one-line messages, counted, nothing launched); one context used from
 * several threads at once; the version and the counters. Kernels are
 * built into $GCORE_CACHE, else a fresh directory. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../base/quant.h"
#include "../../core/ops.h"
#include "../../include/gcore.h"

#define CHECK_CONTEXT gcore_errmsg() /* the API's last message, on each failure */
#include "check.h"

static int64_t counter(gcore_ctx *c, int which) {
  int64_t v[GCORE_STAT_COUNT];
  return gcore_stats(c, v, GCORE_STAT_COUNT) == GCORE_STAT_COUNT ? v[which] : -1;
}

/* ---- one operation against the reference ------------------------------------ */

typedef struct bufs {
  gc_opbuf_t b[GC_OP_MAX_BUFS];
  int n;
  void *host[GC_OP_MAX_BUFS];
  double *ref[GC_OP_MAX_BUFS], *tol[GC_OP_MAX_BUFS];
} bufs_t;

static void bufs_free(bufs_t *x) {
  for (int i = 0; i < x->n; i++) free(x->host[i]), free(x->ref[i]), free(x->tol[i]);
  memset(x, 0, sizeof *x);
}

/* p's buffers, 64-byte aligned, filled as the tuner fills them, and the
 * reference computed before the call (gemm_add's C is read and written). */
static int bufs_make(const gc_problem_t *p, const gc_op_scalars_t *sc, uint64_t seed, bufs_t *x) {
  gc_err_t e;
  memset(x, 0, sizeof *x);
  if (gc_op_buffers(p, sc, x->b, &x->n, &e)) return printf("buffers: %s\n", e.msg), -1;
  for (int i = 0; i < x->n; i++) {
    size_t bytes = (size_t)x->b[i].count * gc_dtype_size(x->b[i].dtype);
    if (posix_memalign(&x->host[i], 64, bytes + 64)) return -1;
    memset(x->host[i], 0xff, bytes); /* NaN until written */
    if (x->b[i].kind != GC_BUF_IN &&
        (!(x->ref[i] = calloc((size_t)x->b[i].count, sizeof(double))) ||
         !(x->tol[i] = calloc((size_t)x->b[i].count, sizeof(double)))))
      return -1;
  }
  gc_op_fill_inputs(p, sc, x->host, seed);
  if (gc_op_reference(p, sc, x->host, x->ref, x->tol, &e)) return printf("ref: %s\n", e.msg), -1;
  return 0;
}

/* 1 when every output element of x passes its tolerance. */
static int bufs_check(const bufs_t *x, const char *what) {
  int ok = 1;
  for (int i = 0; i < x->n; i++) {
    if (x->b[i].kind == GC_BUF_IN) continue;
    double worst;
    char why[400];
    if (!gc_op_check(&x->b[i], x->host[i], x->ref[i], x->tol[i], &worst, why, sizeof why)) {
      printf("  %s: %s\n", what, why);
      ok = 0;
    }
  }
  return ok;
}

/* The API call for p on x's buffers (in the op table's order). */
static int call(gcore_ctx *c, const gc_problem_t *p, const gc_op_scalars_t *sc, void **h) {
  int ta = p->ta, tb = p->tb, tc = p->tc;
  if (!strcmp(p->op, "gemm") || !strcmp(p->op, "gemm_add") || !strcmp(p->op, "gemm_swiglu")) {
    int epi = !strcmp(p->op, "gemm") ? GCORE_EPI_NONE
              : !strcmp(p->op, "gemm_add") ? GCORE_EPI_ADD : GCORE_EPI_SWIGLU;
    return gcore_gemm(c, epi, ta, tb, tc, p->m, p->n, p->k, h[0], h[1], h[2], NULL);
  }
  if (!strncmp(p->op, "rmsnorm_gemm", 12))
    return gcore_rmsnorm_gemm(c, strstr(p->op, "swiglu") ? GCORE_EPI_SWIGLU : GCORE_EPI_NONE,
                              ta, tb, tc, p->m, p->n, p->k, h[0], h[3], sc->eps, h[1], h[2], NULL);
  if (!strcmp(p->op, "rmsnorm"))
    return gcore_rmsnorm(c, ta, tb, tc, p->m, p->n, h[0], h[1], sc->eps, h[2], NULL);
  return gcore_attention(c, ta, tb, tc, p->m, p->h, p->g, p->d, h[0], h[1], h[2], h[4], sc->scale,
                         h[3], NULL);
}

static gc_problem_t prob(const char *op, gc_dtype_t t, int64_t m, int64_t n, int64_t k) {
  gc_problem_t p;
  memset(&p, 0, sizeof p);
  snprintf(p.op, sizeof p.op, "%s", op);
  p.ta = p.tb = p.tc = t;
  p.m = m, p.n = n, p.k = k;
  return p;
}

/* p through the API on c: 1 when it ran and every element verified. */
static int run_case(gcore_ctx *c, const gc_problem_t *p, int64_t pos0, uint64_t seed) {
  gc_op_scalars_t sc;
  bufs_t x;
  char key[GC_PROBLEM_KEY];
  gc_problem_key(p, key);
  gc_op_default_scalars(p, &sc);
  sc.eps = 1e-6f;
  if (pos0 >= 0) sc.pos0 = pos0;
  if (bufs_make(p, &sc, seed, &x)) return 0;
  int rc = call(c, p, &sc, x.host);
  if (rc) printf("  %s: %s: %s\n", key, gcore_errname(rc), gcore_errmsg());
  int ok = !rc && bufs_check(&x, key);
  bufs_free(&x);
  return ok;
}

static void test_every_op(gcore_ctx *c) {
  static const gc_dtype_t dts[] = {GC_DT_F32, GC_DT_F16, GC_DT_BF16};
  for (int i = 0; i < 3; i++) { /* the GEMM in each dtype, at a GEMV's and a GEMM's rows */
    gc_problem_t p = prob("gemm", dts[i], 3, 40, 72);
    CHECK(run_case(c, &p, -1, 1));
    p.m = 19;
    CHECK(run_case(c, &p, -1, 2));
  }
  const char *ops[] = {"gemm_add", "gemm_swiglu", "rmsnorm_gemm", "rmsnorm_gemm_swiglu"};
  for (size_t i = 0; i < GC_ARRAY_LEN(ops); i++) {
    gc_problem_t p = prob(ops[i], GC_DT_F32, 2, 24, 64);
    CHECK(run_case(c, &p, -1, 3 + i));
    p.m = 9;
    CHECK(run_case(c, &p, -1, 13 + i));
  }
  gc_problem_t p = prob("rmsnorm", GC_DT_F32, 5, 96, 0);
  CHECK(run_case(c, &p, -1, 20));
  p = prob("attention", GC_DT_F32, 1, 0, 0); /* a decode step: 8 query heads over 2 kv heads */
  p.h = 8, p.g = 2, p.d = 32;
  CHECK(run_case(c, &p, 37, 21));
  p.m = 6; /* a prefill of 6 rows after 4 cached */
  CHECK(run_case(c, &p, 4, 22));
  CHECK(counter(c, GCORE_STAT_ERRORS) == 0);
  CHECK(counter(c, GCORE_STAT_CALLS) == 17);
  CHECK(counter(c, GCORE_STAT_UNTUNED) == 17 && counter(c, GCORE_STAT_TUNED) == 0);
  CHECK(counter(c, GCORE_STAT_VERIFIED) >= 1 && counter(c, GCORE_STAT_VERIFY_FAILED) == 0);
  CHECK(counter(c, GCORE_STAT_BUILDS) >= 1);
  CHECK(!strcmp(gcore_errmsg(), ""));
}

/* The verifier's fill of every block format (GGUF and device layouts):
 * finite, within about [-1, 1] (Q5_K, Q6_K, Q6_KR: random levels under
 * small scales, |y| < 2; core/ops.c) and not all zero. A device layout
 * whose scales landed where its base format keeps them (Q6_KR's d is at
 * 208, as Q6_K's) would give values of any size, inf or NaN. */
static void test_block_fill(void) {
  for (int t = GC_DT_Q8_0; t <= GC_DT_Q6_KR; t++) {
    gc_problem_t p = prob("embed", GC_DT_F16, 2, 512, 8); /* T[8, 512] */
    p.tb = (gc_dtype_t)t;
    gc_op_scalars_t sc;
    gc_opbuf_t b[GC_OP_MAX_BUFS];
    void *host[GC_OP_MAX_BUFS] = {0};
    int n = 0, ti = -1;
    gc_op_default_scalars(&p, &sc);
    CHECK(gc_op_buffers(&p, &sc, b, &n, NULL) == GC_OK);
    for (int i = 0; i < n; i++) {
      host[i] = calloc((size_t)gc_dtype_bytes(b[i].dtype, b[i].count), 1);
      if (b[i].dtype == (gc_dtype_t)t) ti = i;
    }
    CHECK(ti >= 0);
    if (ti < 0) continue;
    gc_op_fill_inputs(&p, &sc, host, 7);
    float *y = malloc((size_t)b[ti].count * sizeof *y);
    int ok = y != NULL;
    if (ok) gc_quant_dequantize((gc_qtype_t)gc_dtype_qtype((gc_dtype_t)t), host[ti], y, b[ti].count);
    double big = 0;
    for (int64_t j = 0; ok && j < b[ti].count; j++) {
      if (!isfinite(y[j])) ok = 0;
      big = fmax(big, fabs(y[j]));
    }
    if (!ok || big > 2.0 || big == 0) printf("  fill of %s: max |y| %g%s\n", gc_dtype_name((gc_dtype_t)t), big, ok ? "" : ", not finite");
    CHECK(ok && big <= 2.0 && big > 0);
    free(y);
    for (int i = 0; i < n; i++) free(host[i]);
  }
}

/* ---- bad arguments ---------------------------------------------------------------- */

/* rc is code and the message is one non-empty line holding needle. */
static int refused(int rc, int code, const char *needle) {
  const char *m = gcore_errmsg();
  int ok = rc == code && m[0] && !strchr(m, '\n') && strstr(m, needle);
  if (!ok) printf("  got %s '%s', want %s '%s'\n", gcore_errname(rc), m, gcore_errname(code), needle);
  return ok;
}

static void test_bad_arguments(gcore_ctx *c) {
  void *a = NULL, *b = NULL, *o = NULL;
  CHECK(!posix_memalign(&a, 64, 1 << 16) && !posix_memalign(&b, 64, 1 << 16) &&
        !posix_memalign(&o, 64, 1 << 16));
  int64_t errors = counter(c, GCORE_STAT_ERRORS), calls = counter(c, GCORE_STAT_CALLS);
  CHECK(refused(gcore_gemm(NULL, 0, 0, 0, 0, 1, 8, 8, a, b, o, NULL), GCORE_EINVAL, "ctx is NULL"));
  CHECK(refused(gcore_gemm(c, 0, 0, 0, 0, 1, 8, 8, NULL, b, o, NULL), GCORE_EINVAL, "buffer A is NULL"));
  CHECK(refused(gcore_gemm(c, 0, 0, 0, 0, 1, 8, 8, a, b, (char *)o + 4, NULL), GCORE_EINVAL,
                "buffer C at"));
  CHECK(refused(gcore_gemm(c, 0, 0, 0, 0, 0, 8, 8, a, b, o, NULL), GCORE_EINVAL, "m"));
  CHECK(refused(gcore_gemm(c, 0, 0, 0, 0, -3, 8, 8, a, b, o, NULL), GCORE_EINVAL, "m"));
  CHECK(refused(gcore_gemm(c, 0, 0, 0, 0, 1, (int64_t)1 << 31, 8, a, b, o, NULL), GCORE_EINVAL, "n"));
  CHECK(refused(gcore_gemm(c, 0, 7, 0, 0, 1, 8, 8, a, b, o, NULL), GCORE_EINVAL, "dtype 7"));
  CHECK(refused(gcore_gemm(c, 3, 0, 0, 0, 1, 8, 8, a, b, o, NULL), GCORE_EINVAL, "epilogue 3"));
  CHECK(refused(gcore_gemm(c, -1, 0, 0, 0, 1, 8, 8, a, b, o, NULL), GCORE_EINVAL, "epilogue -1"));
  CHECK(refused(gcore_rmsnorm_gemm(c, GCORE_EPI_ADD, 0, 0, 0, 1, 8, 8, a, b, 1e-5f, b, o, NULL),
                GCORE_EINVAL, "epilogue 1"));
  CHECK(refused(gcore_rmsnorm_gemm(c, 0, 0, 0, 0, 1, 8, 8, a, NULL, 1e-5f, b, o, NULL),
                GCORE_EINVAL, "buffer norm is NULL"));
  CHECK(refused(gcore_attention(c, 0, 0, 0, 1, 6, 4, 32, a, b, b, (const int32_t *)a, 0.2f, o, NULL),
                GCORE_EINVAL, "not a multiple"));
  CHECK(refused(gcore_attention(c, 0, 0, 0, 1, 8, 4, 32, a, b, b, NULL, 0.2f, o, NULL),
                GCORE_EINVAL, "buffer pos is NULL"));
  /* the CPU runs the kernel before returning: there is no stream to give */
  CHECK(refused(gcore_gemm(c, 0, 0, 0, 0, 1, 8, 8, a, b, o, (void *)0x1000), GCORE_EINVAL,
                "no streams"));
  CHECK(counter(c, GCORE_STAT_ERRORS) == errors + 13); /* all but the NULL ctx */
  CHECK(counter(c, GCORE_STAT_CALLS) == calls);
  /* a success clears the thread's message */
  memset(a, 0, 1 << 16);
  CHECK(gcore_gemm(c, 0, 0, 0, 0, 1, 8, 8, a, b, o, NULL) == GCORE_OK && !strcmp(gcore_errmsg(), ""));
  free(a), free(b), free(o);

  gcore_ctx *x = (gcore_ctx *)0x1;
  CHECK(refused(gcore_open(NULL, 0, "b.gcb", &x), GCORE_EINVAL, "backend is NULL") && !x);
  CHECK(refused(gcore_open("tpu", 0, "b.gcb", &x), GCORE_EINVAL, "unknown backend 'tpu'") && !x);
  CHECK(refused(gcore_open("cpu", 1, "b.gcb", &x), GCORE_EDEVICE, "one device") && !x);
  CHECK(gcore_open("cpu", 0, "/nonexistent/b.gcb", &x) != GCORE_OK && !x && gcore_errmsg()[0]);
  CHECK(refused(gcore_open("cpu", 0, NULL, &x), GCORE_EINVAL, "bundle_path is NULL") && !x);
  CHECK(refused(gcore_open_db("cpu", 0, NULL, "sm_90", &x), GCORE_EINVAL, "does not run") && !x);
  CHECK(gcore_open_db("cpu", 0, NULL, "gfx9999", &x) && strstr(gcore_errmsg(), "'gfx9999'") && !x);
  CHECK(refused(gcore_open_db("cpu", 0, NULL, NULL, NULL), GCORE_EINVAL, "ctx is NULL"));
  CHECK(gcore_open_db("cuda", 99, NULL, NULL, &x) == GCORE_EDEVICE && !x);
  gcore_close(NULL);
  CHECK(!strcmp(gcore_target(NULL), ""));
  int64_t v[GCORE_STAT_COUNT + 4];
  CHECK(gcore_stats(NULL, v, 4) == -1 && gcore_stats(c, NULL, 4) == -1);
  CHECK(gcore_stats(c, v, GCORE_STAT_COUNT + 4) == GCORE_STAT_COUNT && gcore_stats(c, v, 2) == 2);
  CHECK(!strcmp(gcore_errname(GCORE_EVERIFY), "GCORE_EVERIFY") && !strcmp(gcore_errname(99), "GCORE_E?"));
}

/* ---- threads ----------------------------------------------------------------------- */

#define THREADS 4
#define ROUNDS 12

typedef struct worker {
  gcore_ctx *c;
  int id, ok;
  char err[256]; /* the message each thread sees is its own */
} worker_t;

static void *worker(void *arg) {
  worker_t *w = arg;
  w->ok = 1;
  for (int r = 0; r < ROUNDS; r++) {
    /* threads share some shapes (and so kernels being resolved) and not others */
    gc_problem_t p = prob(r % 3 == 2 ? "gemm_swiglu" : "gemm", GC_DT_F32, 1 + (w->id + r) % 6, 32, 48);
    if (!run_case(w->c, &p, -1, 100 * w->id + r)) w->ok = 0;
    if (r == ROUNDS / 2) {
      int rc = gcore_gemm(w->c, 0, 0, 0, 0, 0, 8, 8, NULL, NULL, NULL, NULL);
      snprintf(w->err, sizeof w->err, "%d %s", rc, gcore_errmsg());
    }
  }
  return NULL;
}

static void test_threads(gcore_ctx *c) {
  pthread_t t[THREADS];
  worker_t w[THREADS];
  int64_t calls = counter(c, GCORE_STAT_CALLS), errors = counter(c, GCORE_STAT_ERRORS);
  char mine[GC_ERR_MSG];
  gcore_open(NULL, 0, NULL, NULL);
  snprintf(mine, sizeof mine, "%s", gcore_errmsg());
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker_t){c, i, 0, ""};
    CHECK(!pthread_create(&t[i], NULL, worker, &w[i]));
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    CHECK(w[i].ok);
    CHECK(!strncmp(w[i].err, "1 gemm: m", 9) || !printf("  worker %d: %s\n", i, w[i].err));
  }
  CHECK(counter(c, GCORE_STAT_CALLS) == calls + THREADS * ROUNDS);
  CHECK(counter(c, GCORE_STAT_ERRORS) == errors + THREADS);
  CHECK(!strcmp(gcore_errmsg(), mine)); /* the workers' errors are theirs */
}

int main(void) {
  char dir[] = "/tmp/gcore-test-api-XXXXXX";
  const char *cache = getenv("GCORE_CACHE");
  if (!cache || !*cache) {
    if (!mkdtemp(dir)) return printf("mkdtemp failed\n"), 1;
    setenv("GCORE_CACHE", dir, 1);
  }
  char db[64];
  snprintf(db, sizeof db, "%s/none.db", dir); /* no database: defaults only */
  CHECK(!strcmp(gcore_version(), GCORE_VERSION));
  CHECK(gcore_version_number() == GCORE_VERSION_NUMBER && gcore_abi_version() == GCORE_ABI_VERSION);
  gcore_ctx *c = NULL;
  CHECK(gcore_open_db("cpu", 0, db, NULL, &c) == GCORE_OK && c);
  if (c) {
    CHECK(!strncmp(gcore_target(c), "cpu:x86-64", 10));
    test_every_op(c);
    test_block_fill();
    test_bad_arguments(c);
    test_threads(c);
    gcore_close(c);
  }
  return check_report();
}
