/* gemm.c — gcore from C, as a program outside the tree uses it: a context
 * on the CPU whose kernels come from a tuning database (built on demand,
 * template defaults where nothing was tuned), one GEMM and one
 * RMSNorm-GEMM on the program's own buffers, checked against plain loops,
 * and the counters. On a GPU the same calls take device pointers
 * (cudaMalloc, hipMalloc) and a stream.
 *
 *   cc gemm.c $(pkg-config --cflags --libs gcore) -o gemm && ./gemm [tune.db]
 */
#include <gcore.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { M = 8, N = 96, K = 256 };

static float *buffer(size_t n) {
  void *p = NULL;
  return posix_memalign(&p, 64, n * sizeof(float)) ? NULL : p; /* gcore wants 64-byte alignment */
}

/* max |C - f(A)·Bᵀ| where f is the identity or the RMSNorm with weights w */
static double max_error(const float *a, const float *b, const float *c, const float *w) {
  double worst = 0;
  for (int i = 0; i < M; i++) {
    double ss = 0, inv = 1;
    for (int l = 0; l < K && w; l++) ss += (double)a[i * K + l] * a[i * K + l];
    if (w) inv = 1 / sqrt(ss / K + 1e-5);
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int l = 0; l < K; l++) s += a[i * K + l] * inv * (w ? w[l] : 1) * b[j * K + l];
      worst = fmax(worst, fabs(s - c[i * N + j]));
    }
  }
  return worst;
}

int main(int argc, char **argv) {
  gcore_ctx *ctx;
  if (gcore_open_db("cpu", 0, argc > 1 ? argv[1] : NULL, NULL, &ctx)) {
    fprintf(stderr, "gemm: %s\n", gcore_errmsg());
    return 1;
  }
  float *a = buffer(M * K), *b = buffer(N * K), *c = buffer(M * N), *w = buffer(K);
  if (!a || !b || !c || !w) return 1;
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 37 % 101) - 50) / 50;
  for (int i = 0; i < N * K; i++) b[i] = (float)((i * 53 % 97) - 48) / 48;
  for (int i = 0; i < K; i++) w[i] = 1 + (float)(i % 7) / 10;

  int rc = gcore_gemm(ctx, GCORE_EPI_NONE, GCORE_F32, GCORE_F32, GCORE_F32, M, N, K, a, b, c, NULL);
  if (rc) {
    fprintf(stderr, "gemm: %s: %s\n", gcore_errname(rc), gcore_errmsg());
    return 1;
  }
  double e1 = max_error(a, b, c, NULL);
  rc = gcore_rmsnorm_gemm(ctx, GCORE_EPI_NONE, GCORE_F32, GCORE_F32, GCORE_F32, M, N, K, a, w, 1e-5f,
                          b, c, NULL);
  if (rc) {
    fprintf(stderr, "gemm: %s: %s\n", gcore_errname(rc), gcore_errmsg());
    return 1;
  }
  double e2 = max_error(a, b, c, w);
  int64_t st[GCORE_STAT_COUNT];
  gcore_stats(ctx, st, GCORE_STAT_COUNT);
  printf("gcore %s on %s\n", gcore_version(), gcore_target(ctx));
  printf("C[%dx%d] = A[%dx%d]·Bᵀ: max |error| %.2g\n", M, N, M, K, e1);
  printf("C = rmsnorm(A)·Bᵀ: max |error| %.2g\n", e2);
  printf("%lld calls: %lld tuned, %lld with verified defaults\n", (long long)st[GCORE_STAT_CALLS],
         (long long)st[GCORE_STAT_TUNED], (long long)st[GCORE_STAT_UNTUNED]);
  gcore_close(ctx);
  free(a), free(b), free(c), free(w);
  return e1 < 1e-3 && e2 < 1e-3 ? 0 : 1;
}
