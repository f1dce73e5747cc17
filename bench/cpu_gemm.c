/* cpu_gemm.c — the tuned gcore GEMM from a bundle against OpenBLAS sgemm,
 * same inputs, same machine, same run: C[M,N] = A[M,K] · B[N,K]^T in fp32.
 * Both results are checked against each other; times are medians. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/check.h"
#include "../runtime/dispatch.h"

typedef struct ctx {
  gc_rt_t *rt;
  const gc_rt_kernel_t *k;
  const gc_problem_t *p;
} ctx_t;

static int launch(void *c, void **args, gc_err_t *e) {
  ctx_t *x = c;
  return gc_rt_launch(x->rt, x->k, x->p, args, e);
}

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: cpu_gemm BUNDLE M N K\n");
    return 2;
  }
  gc_problem_t p = {"gemm", GC_DT_F32, GC_DT_F32, GC_DT_F32, atol(argv[2]), atol(argv[3]),
                    atol(argv[4]), 0, 0, 0};
  gc_err_t e = {0};
  gc_dev_t *dev;
  ctx_t c = {0, 0, &p};
  gc_check_t *chk;
  gc_verify_t v;
  gc_timing_t t;
  if (gc_dev_open("cpu", 0, &dev, &e) || gc_rt_open(dev, argv[1], &c.rt, &e) ||
      gc_rt_find(c.rt, &p, &c.k, &e) || gc_check_setup(dev, &p, NULL, 7, &chk, &e) ||
      gc_check_verify(chk, launch, &c, &v, &e) ||
      gc_check_time(chk, launch, &c, &(gc_time_opts_t){.warmup = 3, .min_iters = 20, .max_iters = 2000, .min_time = 2.0}, &t, &e)) {
    fprintf(stderr, "cpu_gemm: %s\n", e.msg);
    return 1;
  }
  if (!v.ok) {
    fprintf(stderr, "cpu_gemm: gcore kernel failed verification: %s\n", v.why);
    return 1;
  }
  float *A = malloc((size_t)(p.m * p.k) * sizeof *A), *B = malloc((size_t)(p.n * p.k) * sizeof *B);
  gc_check_read(chk, 0, A, &e);
  gc_check_read(chk, 1, B, &e);
  float *C = malloc((size_t)(p.m * p.n) * sizeof *C), *G = malloc((size_t)(p.m * p.n) * sizeof *G);
  double s[200];
  int ns = 0;
  double spent = 0;
  for (int i = 0; i < 3; i++)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p.m, (int)p.n, (int)p.k, 1.0f, A,
                (int)p.k, B, (int)p.k, 0.0f, C, (int)p.n);
  while (ns < 200 && (ns < 20 || spent < 2.0)) {
    double t0 = gc_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p.m, (int)p.n, (int)p.k, 1.0f, A,
                (int)p.k, B, (int)p.k, 0.0f, C, (int)p.n);
    s[ns] = gc_now() - t0;
    spent += s[ns++];
  }
  double blas_us = median(s, ns) * 1e6;
  gc_check_read(chk, 2, G, &e);
  double maxdiff = 0;
  for (int64_t i = 0; i < p.m * p.n; i++) maxdiff = fmax(maxdiff, fabs((double)G[i] - C[i]));
  double fl = 2.0 * p.m * p.n * p.k;
  printf("device: %s, %lld cores\n", gc_dev_info(dev)->name, (long long)gc_dev_info(dev)->compute_units);
  printf("gcore   %s %s: median %.1f us, %.1f GFLOP/s (%lld runs)\n", c.k->d.template_name,
         c.k->d.params, t.median_us, fl / t.median_us / 1e3, (long long)t.iters);
  printf("OpenBLAS %s sgemm: median %.1f us, %.1f GFLOP/s (%d runs)\n", openblas_get_config(),
         blas_us, fl / blas_us / 1e3, ns);
  printf("ratio gcore/OpenBLAS: %.2f   (max |gcore - OpenBLAS| = %.3g)\n", blas_us / t.median_us,
         maxdiff);
  free(A);
  free(B);
  free(C);
  free(G);
  gc_check_free(chk);
  gc_rt_close(c.rt);
  gc_dev_close(dev);
  return 0;
}
