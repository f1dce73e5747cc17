/* gemv.cu — GPU GEMM for a few rows of A (the decode path):
 * C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add: C += A·Bᵀ), or the gate/up pair
 * with the SwiGLU epilogue, C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ) with W[2N,K] = gate
 * rows 0..N-1, up rows N..2N-1 (gemm_swiglu); rmsnorm_*: A's rows
 * RMS-normalised on the way; rmsnorm_gemm_rope_kv: the QKV projection
 * with rope_kv in its epilogue. M <= MMAX <= 16, fp32 accumulation. Memory
 * bound on B: every byte of B is read once, 16 bytes per lane per access.
 *
 * @template gemv_gpu
 * @op gemm gemm_add rmsnorm_gemm gemm_swiglu rmsnorm_gemm_swiglu rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel gemv_gpu
 * @param WARPS 2 4 8 16 default 8 -- warps per block
 * @param KS 1 2 4 8 default 2 -- warps that split one row group's K range (block-level split-K)
 * @param ROWS 1 2 4 8 default 2 -- outputs per warp: ROWS rows of B (gemm_swiglu: ROWS gate and ROWS up rows of W) streamed together
 * @param UNR 1 2 4 default 2 -- 16-byte chunks per lane per row in flight per step
 * @param MMAX 1 2 4 8 16 default 1 -- largest M served; bodies for M <= 1, 2, 4, 8, 16 up to it are compiled in
 * @param OCC 1 2 default 2 -- blocks per SM the register budget is planned for (65536 / (OCC * threads) per thread)
 * @constraint WARPS % KS == 0 -- warps form whole row groups
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @defaults gemm_swiglu rmsnorm_gemm_swiglu ROWS=1 -- the gate/up pair streams twice the rows per output
 * @constraint PAIR == 1 || ROWS <= 4 -- the gate/up pair's rows stay in the space it was tuned in
 * @constraint ROPE == 0 || ROWS % 2 == 0 -- the two rows of a RoPE pair are one warp's
 * @constraint ROPE == 0 || MMAX <= 4 -- the RoPE epilogue's double arithmetic beside 8 or more rows of sums spills on gfx942 (f32 at MMAX 16, f16 at MMAX 8); the recipe runs it at M = 1
 * @constraint PAIR * ROWS * UNR <= 16 -- bounded loads in flight per lane (registers)
 * @constraint MMAX * PAIR * ROWS <= 32 -- bounded accumulators per lane (registers)
 * @constraint OCC * WARPS * WARP <= 2048 -- that many blocks can be resident
 * @constraint MMAX * (PAIR * ROWS + 5) + (PAIR * UNR * ROWS + 2) * (16 / SB) + (MMAX > 4) * MMAX * (16 / SB) + 32 <= min(255, 65536 / (OCC * WARPS * 32)) -- estimated registers (accumulators and row sums, B and A chunks in flight (the compiler hoists A's loads of the larger bodies), addresses) fit the budget, at most 255 per lane
 * @applies M <= MMAX && M <= 16 -- one register block of A rows
 * @grid cdiv(N, WARPS / KS * ROWS) 1 1
 * @block WARPS * WARP 1 1
 * @priority 2
 * @pdl -- waits for the kernel before it (gc_pdl_wait) before it reads or writes anything but its rows of B (gemm_swiglu: its gate and up rows of W)
 *
 * Block b owns the RB = (WARPS/KS)·ROWS outputs columns b·RB .. b·RB+RB-1
 * (rows of B), for all M rows of A. Warp w belongs to row group w / KS
 * (ROWS consecutive rows of B) and takes K slice w % KS: with 16-byte
 * chunks of B (VEC = 16/SB elements), step s of slice k covers chunks
 * (s·KS + k)·UNR·WARP + u·WARP + lane, u < UNR, so every access
 * instruction of a warp reads WARP·16 contiguous bytes of one row and each
 * lane has ROWS·UNR independent 16-byte loads in flight. The matching
 * chunks of A (tiny, cached in L1/L2) are read per row of A. Each lane
 * keeps M×ROWS fp32 accumulators; at the end they are summed across the
 * warp with shuffles and, when KS > 1, across the KS warps of a row group
 * in shared memory; one thread writes each output, so C is written once,
 * by one block (gemm_add: that thread reads C's old value as the body
 * starts, so the read is off the kernel's tail).
 *
 * M is a run-time value: the kernel dispatches to a body compiled for the
 * smallest of 1, 2, 4, 8, 16 that is >= M (rows past M are not loaded).
 * The kernel's register count is that of its largest body, so a variant
 * with a large MMAX runs M = 1 at a lower occupancy: MMAX is tuned per
 * problem, and the default (1) is the decode case.
 *
 * rmsnorm_gemm (C = rmsnorm(A; norm, eps) · Bᵀ) is the same pass: each
 * lane squares the A elements it loads anyway and scales them by the
 * norm weight before the products; the sums of squares are reduced with
 * the products, and the owner of an output multiplies it by
 * 1/sqrt(mean + eps). Each row group reads all of A's row, so it has the
 * whole sum. One launch instead of two, and the normalised row never goes
 * through memory.
 * When K % VEC != 0 the rows are not 16-byte aligned and the same bodies
 * run with one element per chunk (slow, but any K). Rows of B past N are
 * clamped to row N-1 and not stored.
 *
 * gemm_swiglu (PAIR = 2): each output n reads two rows of W, gate row n
 * and up row N+n, into two accumulators (a warp streams ROWS gate and
 * ROWS up rows). After the warp (and split-K) reductions the thread that
 * owns output (m, n) writes g / (1 + e^-g) · u, computed in fp32 and
 * rounded once (e^-g overflowing to inf gives silu = -0);
 * rmsnorm_gemm_swiglu scales both sums by 1/sqrt(mean(a²) + eps).
 *
 * rmsnorm_gemm_bias_rope_kv: the same with each sum's column of b[N]
 * added first (fp32; Qwen2's q/k/v biases).
 * rmsnorm_gemm_rope_kv (ROPE = 1): C's N = (H+2G)·D columns are the
 * query, key and value heads of token m at position p = pos0 + m (pos0
 * read from the device after gc_pdl_wait, so a captured decode step
 * replays at any position), and the epilogue does what rope_kv does with
 * them (templates/README.md): query heads rotated into Qout (C's place)
 * row m, key heads rotated into Kc row p, value heads copied into Vc row p;
 * no other cache row is touched. The rows of B are taken in RoPE pairs: a
 * warp's rows r, r+1 (r even) of "slot" s = n0 + r are the two elements of
 * pair s/2 (head s/2 / (D/2), pair j = s/2 % (D/2): rows (j, j + D/2) of
 * the head in layout 0, (2j, 2j + 1) in layout 1), so the lane that owns
 * a pair has both sums after the reductions. Each sum is rounded to C's
 * dtype as rmsnorm_gemm stores it, then rotated as rope_kv_gpu does (sin
 * and cos of θ = p·inv_freq[j] in double, the rotation in double, one
 * rounding): rmsnorm_gemm followed by rope_kv, in one launch, with QKV
 * never in memory.
 *
 * Launched overlapping the kernel before it (@pdl, CUDA sm_90+), a block
 * first asks L2 for its rows of B (weights: no kernel writes them; gate
 * rows, then up rows), then
 * waits for that kernel, so its first loads hit L2 while the previous
 * kernel drains, and lets the next kernel start launching.
 */

#define GV_VEC (16 / SB)             /* elements of B per 16-byte chunk */
#define GV_RG (WARPS / KS)           /* row groups per block */
#define GV_RB (GV_RG * ROWS)         /* outputs (rows of B) per block */
#define GV_NR (PAIR * ROWS)          /* rows of B per warp (gemm_swiglu: gate 0..ROWS-1, up ROWS..) */

/* The RoPE/KV epilogue's arguments (rmsnorm_gemm_rope_kv; zeros and
 * unused for the other ops). */
typedef gc_rope_t<TC> gv_rope_t;

/* The row of B of slot s: s itself, or under ROPE element s % 2 of RoPE
 * pair s / 2 (see above). */
GC_DEVICE int64_t gv_row(const gv_rope_t &ro, int64_t s) {
  if (!ROPE)
    return s;
  const int64_t half = ro.D / 2, u = s / 2;
  return u / half * ro.D + gc_rope_elem(u % half, (int)(s % 2), ro.D, ro.layout);
}

/* ---- the epilogue: output (m, n) of C from the sums x of its row of B
 * (of its gate row; of the first row of its RoPE pair) and x2 of its up
 * row (of the pair's second row) ---- */
/* rmsnorm_gemm_bias_rope_kv: b of slot s's column (its row of B); else 0 */
GC_DEVICE float gv_bias(const gv_rope_t &ro, int64_t s) {
  return GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV ? LOAD_B((const TB *)ro.bias, gv_row(ro, s)) : 0.0f;
}
#if ROPE /* pair n/2 (n even) of row m (the prelude's gc_rope_put; rf: gemv_body's) */
#define GV_STORE(C, m, n, x, x2) gc_rope_put(C, ro, m, (n) / 2, (x) + gv_bias(ro, n), (x2) + gv_bias(ro, (n) + 1), rf)
#elif PAIR == 2
#define GV_STORE(C, m, n, x, x_up) STORE_C(C, (m) * N + (n), gc_silu_mul(x, x_up))
#else /* gemm_add: cold, C's old value, read as the body starts (gv_mine) */
#define GV_STORE(C, m, n, x, x_up) STORE_C(C, (m) * N + (n), GC_OP_GEMM_ADD ? (x) + cold : (x))
#endif
/* The row of a warp's sums that is x2 for row r: the up row, or the
 * pair's second row. */
#define GV_X2(r) (ROPE ? (r) + 1 : ROWS + (r))

/* The output (sm, sn) of C that this thread stores (sm = -1: none), as
 * gemv_body's stores pick it: KS = 1, lane (m·ROWS + r) % WARP of row
 * group n0's warp; KS > 1, thread o < RG·MR·ROWS of the block; under
 * ROPE only a pair's first row. sm may be >= M and sn >= N (not stored). */
template <int MR>
GC_DEVICE void gv_mine(int lane, int64_t n0, int64_t &sm, int64_t &sn) {
  static_assert(MMAX * PAIR * ROWS <= GC_WARP, "one output per thread");
  if (KS == 1) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++)
      GC_UNROLL(ROWS)
      for (int r = 0; r < ROWS; r += 1 + ROPE)
        if (lane == (m * ROWS + r) % GC_WARP)
          sm = m, sn = n0 + r;
  } else if (gc_tid() < GV_RG * MR * ROWS && (!ROPE || gc_tid() % ROWS % 2 == 0)) {
    const int o = gc_tid();
    sm = o / ROWS % MR, sn = gc_bid() * GV_RB + (int64_t)(o / (MR * ROWS)) * ROWS + o % ROWS;
  }
}

/* Accumulate this lane's share of A·Bᵀ for MR rows of A (M <= MR) and the
 * warp's GV_NR rows of B, CW elements per chunk (GV_VEC or 1), then reduce
 * and store. red: shared scratch, WARPS·MR·(GV_NR + 1) floats (KS > 1). */
template <int MR, int CW>
GC_DEVICE void gemv_body(const TA *A, const TB *B, TC *C, const TB *Wn, const gv_rope_t &ro,
                         int64_t M, int64_t N, int64_t K, float eps, float *red) {
  const int w = gc_tid() / GC_WARP, lane = gc_lane();
  const int g = w / KS, ks = w % KS;
  const int64_t n0 = gc_bid() * GV_RB + (int64_t)g * ROWS;
  const TB *b[GV_NR];
  GC_UNROLL(ROWS)
  for (int r = 0; r < ROWS; r++) {
    b[r] = B + gv_row(ro, gc_min64(n0 + r, N - 1)) * K;
    if (PAIR == 2) /* the up row of the same output */
      b[ROWS + r] = B + (N + gc_min64(n0 + r, N - 1)) * K;
  }

  /* What the one output this thread stores needs besides its sums (the
   * stores below give a thread at most one: MMAX·PAIR·ROWS <= 32), read
   * before the loop so that its latency hides behind the stream rather
   * than adding to the tail: ROPE, the pair's frequency; gemm_add, C's
   * old value (after gc_pdl_wait, as the whole body is). */
  int64_t sm = -1, sn = 0;
  gv_mine<MR>(lane, n0, sm, sn);
  const bool mine = sm >= 0 && sm < M && sn < N;
  const double rf = ROPE && mine ? gc_rope_freq(ro, sn / 2) : 0.0;
  const float cold = GC_OP_GEMM_ADD && mine ? LOAD_C(C, sm * N + sn) : 0.0f;
  (void)rf, (void)cold;

  float acc[MR][GV_NR], ss[MR]; /* ss: sums of squares of A's rows (NORM) */
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
      if (NORM)
        gc_ldv<CW>(Wn + q * CW, wv);
      GC_UNROLL(MR)
      for (int m = 0; m < MR; m++) {
        if (m < M) {
          float av[CW];
          gc_ldv<CW>(A + m * K + q * CW, av);
          if (NORM) {
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
  if (NORM) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++)
      ss[m] = gc_warp_sum(ss[m]);
  }
  if (KS == 1) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++) {
      const float sc = NORM ? gc_rsqrt(ss[m] / (float)K + eps) : 1.0f;
      GC_UNROLL(ROWS)
      for (int r = 0; r < ROWS; r++)
        if ((!ROPE || r % 2 == 0) && lane == (m * ROWS + r) % GC_WARP && m < M && n0 + r < N)
          GV_STORE(C, m, n0 + r, acc[m][r] * sc, acc[m][GV_X2(r)] * sc);
    }
    return;
  }
  float *red_ss = red + WARPS * MR * GV_NR; /* [WARPS][MR] (NORM) */
  if (NORM && lane == 0) {
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
    if (ROPE && r % 2)
      continue; /* the second row of a RoPE pair: its first row's thread stores both */
    float s = 0.0f, s_up = 0.0f, q = 0.0f;
    for (int k = 0; k < KS; k++) {
      s += red[((gg * KS + k) * MR + m) * GV_NR + r];
      if (PAIR == 2 || ROPE)
        s_up += red[((gg * KS + k) * MR + m) * GV_NR + GV_X2(r)];
      if (NORM)
        q += red_ss[(gg * KS + k) * MR + m];
    }
    if (NORM) {
      const float sc = gc_rsqrt(q / (float)K + eps);
      s *= sc, s_up *= sc;
    }
    if (m < M && n < N)
      GV_STORE(C, m, n, s, s_up);
  }
}

template <int CW>
GC_DEVICE void gemv_dispatch(const TA *A, const TB *B, TC *C, const TB *Wn, const gv_rope_t &ro,
                             int64_t M, int64_t N, int64_t K, float eps, float *red) {
  if (M <= 1 || MMAX < 2)
    gemv_body<1, CW>(A, B, C, Wn, ro, M, N, K, eps, red);
  else if (M <= 2 || MMAX < 4)
    gemv_body<(MMAX < 2 ? MMAX : 2), CW>(A, B, C, Wn, ro, M, N, K, eps, red);
  else if (M <= 4 || MMAX < 8)
    gemv_body<(MMAX < 4 ? MMAX : 4), CW>(A, B, C, Wn, ro, M, N, K, eps, red);
  else if (M <= 8 || MMAX < 16)
    gemv_body<(MMAX < 8 ? MMAX : 8), CW>(A, B, C, Wn, ro, M, N, K, eps, red);
  else
    gemv_body<MMAX, CW>(A, B, C, Wn, ro, M, N, K, eps, red);
}

/* Ask L2 for the n rows of B from row r (contiguous: rows are K long). */
GC_DEVICE void gv_prefetch(const TB *B, int64_t r, int64_t n, int64_t K) {
  gc_prefetch_l2_range(B + r * K, n * K * SB, WARPS * GC_WARP);
}

/* args: A, B, C, int64 M, N, K (gemm, gemm_add, gemm_swiglu: B is W);
 * A, B, C, norm[K], int64 M, N, K, float eps (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu); A, B, Qout (C), norm, Kc, Vc, double inv_freq,
 * int32 pos[1], int64 M, N, K, H, G, D, layout, float eps
 * (rmsnorm_gemm_rope_kv; rmsnorm_gemm_bias_rope_kv: b[N] after pos). */
GC_KERNEL_OCC(WARPS * WARP, OCC)
void gemv_gpu(const TA *A, const TB *B, TC *C,
#if NORM
              const TB *Wn,
#endif
#if ROPE
              TC *Kc, TC *Vc, const double *inv_freq, const int32_t *pos,
#endif
#if GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV
              const TB *bias,
#endif
              int64_t M, int64_t N, int64_t K
#if ROPE
              , int64_t H, int64_t G, int64_t D, int64_t layout
#endif
#if NORM
              , float eps
#endif
) {
#if !NORM
  const TB *Wn = B; /* never read (NORM is 0): a pointer to offset, unlike null */
  const float eps = 0.0f;
#endif
#if ROPE
#if GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV
  gv_rope_t ro = {Kc, Vc, inv_freq, 0, H, G, D, layout, bias};
#else
  gv_rope_t ro = {Kc, Vc, inv_freq, 0, H, G, D, layout, 0};
#endif
#else
  const gv_rope_t ro = {0, 0, 0, 0, 0, 0, 0, 0, 0};
#endif
  GC_SHARED float red[KS > 1 ? WARPS * MMAX * (GV_NR + 1) : 1];
#if !AMD /* only an overlapped launch (CUDA) has anything to prefetch for */
  const int64_t r0 = gc_bid() * GV_RB; /* this block's rows of B (gate rows, then up rows) */
  if (r0 < N) {
    if (ROPE) { /* its RoPE pairs' rows, row by row */
      if (ro.D > 0 && ro.D % 2 == 0)
        for (int64_t i = 0; i < gc_min64(GV_RB, N - r0); i++)
          gv_prefetch(B, gv_row(ro, r0 + i), 1, K);
    } else {
      gv_prefetch(B, r0, gc_min64(GV_RB, N - r0), K);
    }
    if (PAIR == 2)
      gv_prefetch(B, N + r0, gc_min64(GV_RB, N - r0), K);
  }
  if (NORM) /* the norm weight: read first thing after the wait */
    GC_PREFETCH_L2_ONCE(Wn, K * SB, WARPS * GC_WARP);
#endif
  gc_pdl_wait();
  gc_pdl_launch();
  if (M <= 0 || M > MMAX || N <= 0)
    return; /* nothing to do, or outside @applies */
#if ROPE
  if (D <= 0 || D % 2 || N != (H + 2 * G) * D)
    return; /* not a problem of the op (core/problem.c refuses it) */
  ro.pos0 = *pos; /* on the device: a captured decode step replays at any position */
#endif
  if (K % GV_VEC == 0)
    gemv_dispatch<GV_VEC>(A, B, C, Wn, ro, M, N, K, eps, red);
  else
    gemv_dispatch<1>(A, B, C, Wn, ro, M, N, K, eps, red);
}
