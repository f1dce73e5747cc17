/* gemv_swiglu.cu — GPU gate/up GEMM with the SwiGLU epilogue for a few
 * rows of A (the decode path): C[M,N] = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), W[2N,K] =
 * gate rows 0..N-1 then up rows N..2N-1, M <= MMAX <= 16, fp32
 * accumulation. Memory bound on W: every byte is read once, 16 bytes per
 * lane per access.
 *
 * @template gemv_swiglu_gpu
 * @op gemm_swiglu rmsnorm_gemm_swiglu
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel gemv_swiglu_gpu
 * @param WARPS 2 4 8 16 default 8 -- warps per block
 * @param KS 1 2 4 8 default 2 -- warps that split one row group's K range (block-level split-K)
 * @param ROWS 1 2 4 default 1 -- outputs per warp: ROWS gate and ROWS up rows of W streamed together
 * @param UNR 1 2 4 default 2 -- 16-byte chunks per lane per row in flight per step
 * @param MMAX 1 2 4 8 16 default 1 -- largest M served; bodies for M <= 1, 2, 4, 8, 16 up to it are compiled in
 * @param OCC 1 2 default 2 -- blocks per SM the register budget is planned for (65536 / (OCC * threads) per thread)
 * @constraint WARPS % KS == 0 -- warps form whole row groups
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint 2 * ROWS * UNR <= 16 -- bounded loads in flight per lane (registers)
 * @constraint MMAX * 2 * ROWS <= 32 -- bounded accumulators per lane (registers)
 * @constraint OCC * WARPS * WARP <= 2048 -- that many blocks can be resident
 * @constraint MMAX * (2 * ROWS + 5) + (2 * UNR * ROWS + 2) * (16 / SB) + (MMAX > 4) * MMAX * (16 / SB) + 32 <= min(255, 65536 / (OCC * WARPS * 32)) -- estimated registers (accumulators and row sums, W and A chunks in flight (the compiler hoists A's loads of the larger bodies), addresses) fit the budget, at most 255 per lane
 * @applies M <= MMAX && M <= 16 -- one register block of A rows
 * @grid cdiv(N, WARPS / KS * ROWS) 1 1
 * @block WARPS * WARP 1 1
 * @priority 2
 * @pdl -- waits for the kernel before it (gc_pdl_wait) before it reads or writes anything but its gate and up rows of W
 *
 * gemv_gpu's structure (see there: row groups of warps, block-level
 * split-K over KS warps, 16-byte lane-contiguous chunks with ROWS·UNR
 * loads in flight, per-M bodies, element-wise fallback when K % VEC != 0)
 * with each output n reading two rows of W, gate row n and up row N+n, into
 * two accumulators. After the warp (and split-K) reductions the thread
 * that owns output (m, n) writes g / (1 + e^-g) · u, computed in fp32 and
 * rounded once (e^-g overflowing to inf gives silu = -0).
 * rmsnorm_gemm_swiglu normalises A's rows on the way, as gemv_gpu's
 * rmsnorm_gemm does: both sums are scaled by 1/sqrt(mean(a²) + eps).
 * Launched overlapping the kernel before it (@pdl), a block asks L2 for
 * its gate and up rows first, as gemv_gpu does.
 */

#define GV_VEC (16 / SB)             /* elements of B per 16-byte chunk */
#define GV_RG (WARPS / KS)           /* row groups per block */
#define GV_RB (GV_RG * ROWS)         /* outputs per block */
#define GV_NR (2 * ROWS)             /* rows of W per warp: gate 0..ROWS-1, up ROWS.. */
#if GC_OP_RMSNORM_GEMM_SWIGLU
#define GV_NORM 1                    /* normalise A's rows on the way */
#else
#define GV_NORM 0
#endif

/* Accumulate this lane's share of A·Wᵀ for MR rows of A (M <= MR) and the
 * warp's ROWS gate and ROWS up rows of W, CW elements per chunk (GV_VEC or
 * 1), then reduce and store silu(gate)·up. red: shared scratch,
 * WARPS·MR·2·ROWS floats (KS > 1). */
/* Ask L2 for the n rows of W from row r (contiguous: rows are K long). */
GC_DEVICE void gv_prefetch(const TB *B, int64_t r, int64_t n, int64_t K) {
  const char *p = (const char *)(B + r * K);
  const int64_t bytes = n * K * SB;
  for (int64_t o = (int64_t)gc_tid() * 128; o < bytes; o += (int64_t)WARPS * GC_WARP * 128)
    gc_prefetch_l2(p + o);
}

/* silu(g) · u in fp32. */
GC_DEVICE float gv_swiglu(float g, float u) { return g / (1.0f + gc_exp(-g)) * u; }

template <int MR, int CW>
GC_DEVICE void gemv_body(const TA *A, const TB *B, TC *C, const TB *Wn, int64_t M, int64_t N,
                         int64_t K, float eps, float *red) {
  const int w = gc_tid() / GC_WARP, lane = gc_lane();
  const int g = w / KS, ks = w % KS;
  const int64_t n0 = gc_bid() * GV_RB + (int64_t)g * ROWS;
  const TB *b[GV_NR];
  GC_UNROLL(ROWS)
  for (int r = 0; r < ROWS; r++) {
    b[r] = B + gc_min64(n0 + r, N - 1) * K;
    b[ROWS + r] = B + (N + gc_min64(n0 + r, N - 1)) * K;
  }

  float acc[MR][GV_NR], ss[MR]; /* ss: sums of squares of A's rows (GV_NORM) */
  GC_UNROLL(MR)
  for (int m = 0; m < MR; m++) {
    ss[m] = 0.0f;
    GC_UNROLL(GV_NR)
    for (int r = 0; r < GV_NR; r++)
      acc[m][r] = 0.0f;
  }

  const int64_t nq = K / CW; /* chunks per row */
  const int64_t step = (int64_t)KS * UNR * GC_WARP;
  for (int64_t q0 = (int64_t)ks * UNR * GC_WARP + lane; q0 < nq; q0 += step) {
    float bv[UNR][GV_NR][CW];
    GC_UNROLL(UNR)
    for (int u = 0; u < UNR; u++) {
      int64_t q = q0 + (int64_t)u * GC_WARP;
      GC_UNROLL(GV_NR)
      for (int r = 0; r < GV_NR; r++) {
        if (q < nq) {
          gc_ldv<CW>(b[r] + q * CW, bv[u][r]);
        } else {
          GC_UNROLL(CW)
          for (int e = 0; e < CW; e++)
            bv[u][r][e] = 0.0f;
        }
      }
    }
    GC_UNROLL(UNR)
    for (int u = 0; u < UNR; u++) {
      int64_t q = q0 + (int64_t)u * GC_WARP;
      if (q >= nq)
        break;
      float wv[CW];
      if (GV_NORM)
        gc_ldv<CW>(Wn + q * CW, wv);
      GC_UNROLL(MR)
      for (int m = 0; m < MR; m++) {
        if (m < M) {
          float av[CW];
          gc_ldv<CW>(A + m * K + q * CW, av);
          if (GV_NORM) {
            GC_UNROLL(CW)
            for (int e = 0; e < CW; e++) {
              ss[m] = gc_fma(av[e], av[e], ss[m]);
              av[e] *= wv[e];
            }
          }
          GC_UNROLL(GV_NR)
          for (int r = 0; r < GV_NR; r++)
            GC_UNROLL(CW)
            for (int e = 0; e < CW; e++)
              acc[m][r] = gc_fma(av[e], bv[u][r][e], acc[m][r]);
        }
      }
    }
  }

  /* Reduce over the warp (every lane gets every sum). */
  GC_UNROLL(MR)
  for (int m = 0; m < MR; m++)
    GC_UNROLL(GV_NR)
    for (int r = 0; r < GV_NR; r++)
      acc[m][r] = gc_warp_sum(acc[m][r]);
  if (GV_NORM) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++)
      ss[m] = gc_warp_sum(ss[m]);
  }
  if (KS == 1) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++) {
      const float sc = GV_NORM ? gc_rsqrt(ss[m] / (float)K + eps) : 1.0f;
      GC_UNROLL(ROWS)
      for (int r = 0; r < ROWS; r++)
        if (lane == (m * ROWS + r) % GC_WARP && m < M && n0 + r < N)
          STORE_C(C, m * N + n0 + r, gv_swiglu(acc[m][r] * sc, acc[m][ROWS + r] * sc));
    }
    return;
  }
  float *red_ss = red + WARPS * MR * GV_NR; /* [WARPS][MR] (GV_NORM) */
  if (GV_NORM && lane == 0) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++)
      red_ss[w * MR + m] = ss[m];
  }
  GC_UNROLL(MR)
  for (int m = 0; m < MR; m++)
    GC_UNROLL(GV_NR)
    for (int r = 0; r < GV_NR; r++)
      if (lane == (m * GV_NR + r) % GC_WARP)
        red[(w * MR + m) * GV_NR + r] = acc[m][r];
  gc_barrier();
  for (int o = gc_tid(); o < GV_RG * MR * ROWS; o += WARPS * GC_WARP) {
    int gg = o / (MR * ROWS), m = o / ROWS % MR, r = o % ROWS;
    int64_t n = gc_bid() * GV_RB + (int64_t)gg * ROWS + r;
    float g = 0.0f, u = 0.0f, q = 0.0f;
    for (int k = 0; k < KS; k++) {
      g += red[((gg * KS + k) * MR + m) * GV_NR + r];
      u += red[((gg * KS + k) * MR + m) * GV_NR + ROWS + r];
      if (GV_NORM)
        q += red_ss[(gg * KS + k) * MR + m];
    }
    if (GV_NORM) {
      const float sc = gc_rsqrt(q / (float)K + eps);
      g *= sc, u *= sc;
    }
    if (m < M && n < N)
      STORE_C(C, m * N + n, gv_swiglu(g, u));
  }
}

template <int CW>
GC_DEVICE void gemv_dispatch(const TA *A, const TB *B, TC *C, const TB *Wn, int64_t M, int64_t N,
                             int64_t K, float eps, float *red) {
  if (M <= 1 || MMAX < 2)
    gemv_body<1, CW>(A, B, C, Wn, M, N, K, eps, red);
  else if (M <= 2 || MMAX < 4)
    gemv_body<(MMAX < 2 ? MMAX : 2), CW>(A, B, C, Wn, M, N, K, eps, red);
  else if (M <= 4 || MMAX < 8)
    gemv_body<(MMAX < 4 ? MMAX : 4), CW>(A, B, C, Wn, M, N, K, eps, red);
  else if (M <= 8 || MMAX < 16)
    gemv_body<(MMAX < 8 ? MMAX : 8), CW>(A, B, C, Wn, M, N, K, eps, red);
  else
    gemv_body<MMAX, CW>(A, B, C, Wn, M, N, K, eps, red);
}

/* args: A, W, C, int64 M, N, K (gemm_swiglu); A, W, C, norm[K], int64 M,
 * N, K, float eps (rmsnorm_gemm_swiglu). */
GC_KERNEL_OCC(WARPS * WARP, OCC)
void gemv_swiglu_gpu(const TA *A, const TB *B, TC *C,
#if GV_NORM
                     const TB *Wn,
#endif
                     int64_t M, int64_t N, int64_t K
#if GV_NORM
                     , float eps
#endif
) {
#if !GV_NORM
  const TB *Wn = 0;
  const float eps = 0.0f;
#endif
  GC_SHARED float red[KS > 1 ? WARPS * MMAX * (GV_NR + 1) : 1];
#if !AMD /* only an overlapped launch (CUDA) has anything to prefetch for */
  const int64_t r0 = gc_bid() * GV_RB; /* this block's gate rows, then its up rows */
  if (r0 < N) {
    gv_prefetch(B, r0, gc_min64(GV_RB, N - r0), K);
    gv_prefetch(B, N + r0, gc_min64(GV_RB, N - r0), K);
  }
#endif
  gc_pdl_wait();
  gc_pdl_launch();
  if (M <= 0 || M > MMAX || N <= 0)
    return; /* nothing to do, or outside @applies */
  if (K % GV_VEC == 0)
    gemv_dispatch<GV_VEC>(A, B, C, Wn, M, N, K, eps, red);
  else
    gemv_dispatch<1>(A, B, C, Wn, M, N, K, eps, red);
}
