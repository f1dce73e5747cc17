/* rmsnorm.cu — GPU RMS normalisation of the rows of X, scaled by W:
 * Y[i,j] = X[i,j] / sqrt(mean_j(X[i,j]²) + eps) * W[j].
 *
 * @template rmsnorm_gpu
 * @op rmsnorm
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel rmsnorm_gpu
 * @param THREADS 32 64 128 256 512 1024 default 256 -- threads per block
 * @param ROWS 1 2 4 8 16 default 1 -- rows per block; THREADS/ROWS threads share a row
 * @param VEC 1 2 4 8 default 8 -- consecutive elements per thread per access
 * @param CACHE 0 1 2 4 8 default 4 -- vectors of X per thread kept in registers between the two passes
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @constraint THREADS % ROWS == 0 && THREADS / ROWS >= 4 -- at least 4 threads per row
 * @constraint VEC * SA <= 32 && VEC * SB <= 32 && VEC * SC <= 32 -- at most two 16-byte accesses per vector
 * @constraint CACHE * VEC <= 32 -- the register cache stays small (<= 32 floats)
 * @grid cdiv(M, ROWS) 1 1
 * @block THREADS 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * Row i = b*ROWS + r of block b is handled by the TPR = THREADS/ROWS
 * threads r*TPR .. r*TPR+TPR-1 (a warp's aligned lanes, or whole warps).
 * Local thread l of a row owns the vectors c = l + k*TPR (k = 0, 1, ...),
 * elements c*VEC .. c*VEC+VEC-1, so each access instruction is contiguous
 * across the row's threads. Pass 1 sums x² in fp32 (the first CACHE
 * vectors are kept in registers), reduces over the row's threads with
 * shuffles (and shared memory when a row spans warps); pass 2 writes
 * x * (1/sqrt(ss/N + eps)) * w, re-reading X beyond the cache (an L1/L2
 * hit). The rsqrt is 1/sqrt, correctly rounded, since it multiplies every
 * element. When N % VEC != 0 rows are not vector-aligned and the kernel
 * runs element by element.
 */

#define RMS_TPR (THREADS / ROWS) /* threads per row */
#define RMS_NW (THREADS / GC_WARP) /* warps per block */

/* Sum of v over the TPR threads of each row; every thread of the row gets
 * it. red: shared scratch of RMS_NW floats. All threads must call it. */
GC_DEVICE float rms_row_sum(float v, float *red) {
  if (RMS_TPR <= GC_WARP)
    return gc_group_sum(v, RMS_TPR);
  v = gc_warp_sum(v);
  int w = gc_tid() / GC_WARP;
  if (gc_lane() == 0)
    red[w] = v;
  gc_barrier();
  int per = RMS_TPR / GC_WARP, w0 = w / per * per; /* the row's warps */
  float s = 0.0f;
  for (int k = 0; k < per; k++)
    s += red[w0 + k];
  return s;
}

/* y[j0 .. j0+VEC-1] := t * s * W[j0 ..] (t is overwritten). */
GC_DEVICE void rms_out(float *t, const TB *W, TC *y, int64_t j0, float s) {
  float w[VEC];
  LOADV_B(VEC, W, j0, w);
  GC_UNROLL(VEC)
  for (int e = 0; e < VEC; e++)
    t[e] = t[e] * s * w[e];
  STOREV_C(VEC, y, j0, t);
}

GC_KERNEL_BOUNDS(THREADS)
void rmsnorm_gpu(const TA *X, const TB *W, TC *Y, int64_t M, int64_t N, float eps) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  GC_SHARED float red[THREADS / 32 + 1];
  int l = gc_tid() % RMS_TPR;
  int64_t i = gc_bid() * ROWS + gc_tid() / RMS_TPR;
  int live = i < M;
  const TA *x = X + (live ? i : 0) * N;
  TC *y = Y + i * N;
  float ss = 0.0f;

  if (N % VEC == 0) {
    int64_t nv = live ? N / VEC : 0; /* vectors in the row */
    float xc[CACHE > 0 ? CACHE : 1][VEC];
    GC_UNROLL(CACHE)
    for (int k = 0; k < CACHE; k++) {
      int64_t c = l + (int64_t)k * RMS_TPR;
      if (c < nv) {
        LOADV_A(VEC, x, c * VEC, xc[k]);
        GC_UNROLL(VEC)
        for (int e = 0; e < VEC; e++)
          ss = gc_fma(xc[k][e], xc[k][e], ss);
      }
    }
    for (int64_t c = l + (int64_t)CACHE * RMS_TPR; c < nv; c += RMS_TPR) {
      float t[VEC];
      LOADV_A(VEC, x, c * VEC, t);
      GC_UNROLL(VEC)
      for (int e = 0; e < VEC; e++)
        ss = gc_fma(t[e], t[e], ss);
    }
    ss = rms_row_sum(ss, red);
    float s = 1.0f / gc_sqrt(ss / (float)N + eps);
    GC_UNROLL(CACHE)
    for (int k = 0; k < CACHE; k++) {
      int64_t c = l + (int64_t)k * RMS_TPR;
      if (c < nv)
        rms_out(xc[k], W, y, c * VEC, s);
    }
    for (int64_t c = l + (int64_t)CACHE * RMS_TPR; c < nv; c += RMS_TPR) {
      float t[VEC];
      LOADV_A(VEC, x, c * VEC, t);
      rms_out(t, W, y, c * VEC, s);
    }
  } else {
    int64_t n = live ? N : 0;
    for (int64_t j = l; j < n; j += RMS_TPR) {
      float t = LOAD_A(x, j);
      ss = gc_fma(t, t, ss);
    }
    ss = rms_row_sum(ss, red);
    float s = 1.0f / gc_sqrt(ss / (float)N + eps);
    for (int64_t j = l; j < n; j += RMS_TPR)
      STORE_C(y, j, LOAD_A(x, j) * s * LOAD_B(W, j));
  }
}
