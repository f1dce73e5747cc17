/* refdot.h — the fp64 dot products behind the GEMM-family references,
 * on every core of the host. A GEMM of the Llama-3-8B prefill (M = 4096,
 * N = 14336, K = 4096) is 2.4e11 products: minutes on one core through
 * gc_load_elem, seconds here, which is what lets the tuner set up such a
 * problem in seconds. The sums stay fp64 (in a different order than a
 * plain loop: far below the fp32 tolerances they are compared against). */
#ifndef GC_REFDOT_H
#define GC_REFDOT_H

#include "ops.h"

/* A copy of count elements of p (dtype t) as doubles (converted on every
 * core for large counts; a block format dequantized as base/quant.h says,
 * count whole blocks); NULL on ENOMEM
 * (e set). The caller frees. */
double *gc_ref_f64(const void *p, gc_dtype_t t, int64_t count, gc_err_t *e);

/* For every i < m, j < n:
 *   dot[i·n + j] = Σ_k x[i·k + l]·w[j·k + l]      (x [m,k], w [n,k])
 *   abs[i·n + j] = Σ_k |x[i·k + l]·w[j·k + l]|
 * on up to `threads` threads (0: one per online CPU; problems under 4M
 * products use one). */
void gc_ref_dots(const double *x, const double *w, int64_t m, int64_t n, int64_t k,
                 double *dot, double *abs, int threads);

/* Run fn(arg) on up to `threads` threads, this one among them; fn takes
 * work items from a counter of its own until none is left, so fewer
 * threads (none could be started) only take longer. */
void gc_ref_threads(void *(*fn)(void *), void *arg, int threads);
/* The online CPUs of the host, at most 64. */
int gc_ref_host_threads(void);
/* body(arg, i0, i1) for the chunks [i0, i1) of [start, end), chunk long
 * (the last shorter), handed out to up to `threads` threads (this one
 * among them, as gc_ref_threads); each chunk runs once, in no set order. */
void gc_ref_for(int64_t start, int64_t end, int64_t chunk,
                void (*body)(void *arg, int64_t i0, int64_t i1), void *arg, int threads);

#endif
