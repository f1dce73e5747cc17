/* add.cu — GPU elementwise sum, the residual add: Z[M,N] = X[M,N] + Y[M,N],
 * summed in fp32 and rounded once to Z's dtype. Z may be X. Built for
 * bias, Y is one row [N] added to every row of X (a projection's bias):
 * Z[i,j] = X[i,j] + Y[j].
 *
 * @template add_gpu
 * @op add bias
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel add_gpu
 * @param THREADS 64 128 256 512 1024 default 256 -- threads per block
 * @param VEC 1 2 4 8 default 8 -- consecutive elements per thread per access (8 f16 = one 16-byte access)
 * @param UNROLL 1 2 4 default 2 -- accesses per thread, all loads issued before the stores
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @constraint VEC * SA <= 32 && VEC * SC <= 32 -- at most two 16-byte accesses per vector
 * @grid cdiv(M * N, THREADS * VEC * UNROLL) 1 1
 * @block THREADS 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * The arrays are dense, so the kernel sees them as flat vectors of M*N
 * elements. Block b covers elements b*E .. b*E+E-1, E = THREADS*VEC*UNROLL;
 * access u of thread t is the VEC elements from b*E + (u*THREADS + t)*VEC,
 * so each access instruction of a warp is contiguous. A full block uses
 * vector accesses (aligned: the arrays are 64-byte aligned and every
 * offset is a multiple of VEC); the last, partial block goes element by
 * element, so nothing past M*N is touched. Z = X is safe: every element is
 * read and then written by the same thread, and X and Z are not restrict.
 * For bias, element i adds Y[i mod N]: a vector's VEC columns are one
 * aligned vector of Y where N % VEC == 0 (an access never crosses a row
 * end then), else VEC loads, the column wrapping at N; Y is read only
 * inside its N elements.
 */

#define ADD_E (THREADS * VEC * UNROLL) /* elements per block */

/* y[0, VEC) = Y's elements for Z's elements i .. i+VEC-1 (i % VEC == 0):
 * Y[i ..] for add, Y[(i + v) mod N] for bias. */
GC_DEVICE void add_load_y(const TB *Y, int64_t i, int64_t N, float *y) {
#if GC_OP_BIAS
  int64_t c = i % N;
  if (N % VEC == 0) {
    LOADV_B(VEC, Y, c, y);
    return;
  }
  GC_UNROLL(VEC)
  for (int v = 0; v < VEC; v++) {
    y[v] = LOAD_B(Y, c);
    c = c + 1 == N ? 0 : c + 1;
  }
#else
  (void)N;
  LOADV_B(VEC, Y, i, y);
#endif
}

GC_KERNEL_BOUNDS(THREADS)
void add_gpu(const TA *X, const TB *Y, TC *Z, int64_t M, int64_t N) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  int64_t n = M * N, base = gc_bid() * ADD_E;
  int t = gc_tid();
  if (base + ADD_E <= n) {
    float x[UNROLL][VEC], y[UNROLL][VEC];
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++) {
      int64_t i = base + ((int64_t)u * THREADS + t) * VEC;
      LOADV_A(VEC, X, i, x[u]);
      add_load_y(Y, i, N, y[u]);
    }
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++) {
      GC_UNROLL(VEC)
      for (int v = 0; v < VEC; v++)
        x[u][v] += y[u][v];
      STOREV_C(VEC, Z, base + ((int64_t)u * THREADS + t) * VEC, x[u]);
    }
  } else {
    for (int64_t i = base + t; i < n; i += THREADS)
      STORE_C(Z, i, LOAD_A(X, i) + LOAD_B(Y, GC_OP_BIAS ? i % N : i));
  }
}
