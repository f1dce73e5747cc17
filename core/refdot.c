/* refdot.c — fp64 dot products of row blocks, on every core.
 *
 * Work: blocks of RB rows of x times NB rows of w, handed out by an atomic
 * counter. A thread walks its w rows in blocks of CB rows (CB rows
 * of w at K = 4096 are 256 KB: they stay in the core's L2 while every row
 * pair of the x block passes over them). The micro kernel computes a 2×2
 * tile of dot products with four fp64 lanes along k (a GCC vector type:
 * AVX where the host has it, two SSE2 halves elsewhere). */
#include "refdot.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "../base/quant.h"

#define RB 16 /* rows of x per work item */
#define CB 8  /* rows of w per cache block */
#define NB 512 /* rows of w per work item */

typedef double v4d __attribute__((vector_size(32)));

void gc_ref_threads(void *(*fn)(void *), void *arg, int threads) {
  pthread_t *t = threads > 1 ? calloc((size_t)threads, sizeof *t) : NULL;
  int started = 0;
  for (; t && started < threads - 1; started++)
    if (pthread_create(&t[started], NULL, fn, arg)) break;
  fn(arg); /* this thread works too, and finishes alone if none started */
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  free(t);
}

int gc_ref_host_threads(void) {
  int c = gc_host_ncpu();
  return c < 64 ? c : 64;
}

typedef struct range_job {
  void (*body)(void *arg, int64_t i0, int64_t i1);
  void *arg;
  int64_t end, chunk;
  atomic_llong next; /* the next chunk's start */
} range_job_t;

static void *range_worker(void *arg) {
  range_job_t *r = arg;
  for (;;) {
    int64_t i0 = (int64_t)atomic_fetch_add(&r->next, r->chunk);
    if (i0 >= r->end) return NULL;
    r->body(r->arg, i0, i0 + r->chunk < r->end ? i0 + r->chunk : r->end);
  }
}

void gc_ref_for(int64_t start, int64_t end, int64_t chunk,
                void (*body)(void *arg, int64_t i0, int64_t i1), void *arg, int threads) {
  range_job_t r = {body, arg, end, chunk > 0 ? chunk : 1, start};
  gc_ref_threads(range_worker, &r, threads);
}

#define CONV_CHUNK (1 << 20) /* elements per work item of a conversion */

typedef struct conv {
  const void *p;
  gc_dtype_t t;
  double *d;
} conv_t;

static void conv_body(void *arg, int64_t i0, int64_t i1) {
  conv_t *c = arg;
  if (gc_dtype_is_block(c->t)) { /* whole blocks (CONV_CHUNK is a multiple of 256) */
    float y[256];
    int64_t b = gc_dtype_block(c->t);
    for (int64_t i = i0; i < i1; i += b) {
      gc_quant_dequantize((gc_qtype_t)gc_dtype_qtype(c->t),
                          (const char *)c->p + (size_t)(i / b) * gc_dtype_size(c->t), y, b);
      for (int64_t j = 0; j < b && i + j < i1; j++) c->d[i + j] = y[j];
    }
    return;
  }
  for (int64_t i = i0; i < i1; i++) c->d[i] = gc_load_elem(c->p, c->t, i);
}

double *gc_ref_f64(const void *p, gc_dtype_t t, int64_t count, gc_err_t *e) {
  conv_t c = {p, t, gc_malloc((size_t)(count > 0 ? count : 1) * sizeof(double), e)};
  if (!c.d) return NULL;
  gc_ref_for(0, count, CONV_CHUNK, conv_body, &c,
             count < 4 * CONV_CHUNK ? 1 : gc_ref_host_threads());
  return c.d;
}

typedef long long v4l __attribute__((vector_size(32)));

/* macros, not functions: a function returning v4d would change its ABI
 * with the target the clone is built for */
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(v4d))
#define VABS(v) ((v4d)((v4l)(v) & (v4l){~0ull >> 1, ~0ull >> 1, ~0ull >> 1, ~0ull >> 1}))
#define HSUM(v) (((v)[0] + (v)[1]) + ((v)[2] + (v)[3]))

/* The 2×2 tile of rows x0, x1 (x1 may equal x0) and w0, w1: d[a][b] and
 * s[a][b] get the dot and the absolute sum of x_a and w_b. */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
static void tile2x2(const double *x0, const double *x1, const double *w0, const double *w1,
                    int64_t k, double d[2][2], double s[2][2]) {
  v4d d00 = {0}, d01 = {0}, d10 = {0}, d11 = {0};
  v4d s00 = {0}, s01 = {0}, s10 = {0}, s11 = {0};
  int64_t l = 0;
  for (; l + 4 <= k; l += 4) {
    v4d a0, a1, b0, b1;
    VLOAD(a0, x0 + l), VLOAD(a1, x1 + l), VLOAD(b0, w0 + l), VLOAD(b1, w1 + l);
    v4d p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    d00 += p00, d01 += p01, d10 += p10, d11 += p11;
    s00 += VABS(p00), s01 += VABS(p01), s10 += VABS(p10), s11 += VABS(p11);
  }
  d[0][0] = HSUM(d00), d[0][1] = HSUM(d01), d[1][0] = HSUM(d10), d[1][1] = HSUM(d11);
  s[0][0] = HSUM(s00), s[0][1] = HSUM(s01), s[1][0] = HSUM(s10), s[1][1] = HSUM(s11);
  for (; l < k; l++) {
    const double p[2][2] = {{x0[l] * w0[l], x0[l] * w1[l]}, {x1[l] * w0[l], x1[l] * w1[l]}};
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 2; b++) d[a][b] += p[a][b], s[a][b] += p[a][b] < 0 ? -p[a][b] : p[a][b];
  }
}

typedef struct job {
  const double *x, *w;
  int64_t m, n, k;
  double *dot, *abs;
  int64_t nbn;       /* work items along w: cdiv(n, NB) */
  atomic_llong next; /* next work item: (x block, w block) = (t / nbn, t % nbn) */
} job_t;

/* Rows [i0, i1) of x against rows [n0, n1) of w. */
static void do_block(const job_t *j, int64_t i0, int64_t i1, int64_t n0, int64_t n1) {
  for (int64_t c0 = n0; c0 < n1; c0 += CB) {
    int64_t c1 = c0 + CB < n1 ? c0 + CB : n1;
    for (int64_t i = i0; i < i1; i += 2) {
      int64_t ib = i + 1 < i1 ? i + 1 : i;
      for (int64_t c = c0; c < c1; c += 2) {
        int64_t cb = c + 1 < c1 ? c + 1 : c;
        double d[2][2], s[2][2];
        tile2x2(j->x + i * j->k, j->x + ib * j->k, j->w + c * j->k, j->w + cb * j->k, j->k, d, s);
        for (int a = 0; a <= (ib > i); a++)
          for (int b = 0; b <= (cb > c); b++) {
            j->dot[(i + a) * j->n + c + b] = d[a][b];
            j->abs[(i + a) * j->n + c + b] = s[a][b];
          }
      }
    }
  }
}

static void *worker(void *arg) {
  job_t *j = arg;
  for (;;) {
    int64_t t = (int64_t)atomic_fetch_add(&j->next, 1);
    int64_t i0 = t / j->nbn * RB, n0 = t % j->nbn * NB;
    if (i0 >= j->m) return NULL;
    do_block(j, i0, i0 + RB < j->m ? i0 + RB : j->m, n0, n0 + NB < j->n ? n0 + NB : j->n);
  }
}

void gc_ref_dots(const double *x, const double *w, int64_t m, int64_t n, int64_t k,
                 double *dot, double *abs, int threads) {
  job_t j = {x, w, m, n, k, dot, abs, (n + NB - 1) / NB, 0};
  if (threads <= 0) threads = gc_ref_host_threads();
  int64_t items = (m + RB - 1) / RB * j.nbn;
  if (threads > items) threads = (int)(items > 0 ? items : 1);
  if (m * n * k < (1 << 22)) threads = 1; /* small problems: no thread */
  gc_ref_threads(worker, &j, threads);
}
