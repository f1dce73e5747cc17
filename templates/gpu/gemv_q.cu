/* gemv_q.cu — GPU GEMM with B in a block format for a few rows of A (the
 * decode path; any M, in passes of MMAX rows): C[M,N] = A[M,K] · B[N,K]ᵀ,
 * B's rows blocks of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K (base/quant.h),
 * dequantized in registers, fp32 accumulation. One source for NVIDIA and
 * AMD (SIMT: no matrix instructions).
 *
 * @template gemv_q_gpu
 * @op gemm gemm_add gemm_swiglu rmsnorm_gemm rmsnorm_gemm_swiglu
 * @backend gpu
 * @dtypes f32:q8_0:f32 f32:q4_0:f32 f32:q4_k:f32 f32:q5_k:f32 f32:q6_k:f32 f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16 f16:q8_0r:f16 f16:q4_0r:f16 bf16:q8_0r:bf16 bf16:q4_0r:bf16 f16:q4_kr:f16 bf16:q4_kr:bf16 f16:q6_kr:f16 bf16:q6_kr:bf16
 * @kernel gemv_q_gpu
 * @param WARPS 2 4 8 16 default 8 -- warps per block
 * @param KS 1 2 4 8 default 2 -- warps that split one row group's K range (block-level split-K)
 * @param ROWS 1 2 4 default 1 -- outputs per warp: their rows of B (gate and up rows for the SwiGLU pair) streamed together
 * @param UNR 1 2 4 8 default 4 -- units of 32 elements per lane per row in flight per step
 * @param MMAX 1 2 4 8 16 default 1 -- rows of A per pass; bodies for 1, 2, 4, 8, 16 up to it are compiled in
 * @param OCC 1 2 4 default 1 -- blocks per SM the register budget is planned for (1: no cap below 255)
 * @param STAGE 0 1 default 1 -- 0: lanes load their parts of B's units directly (16/32-bit loads); 1: each warp copies its step's bytes of each row of B with 16-byte loads into shared memory (the next step's loads in flight while this one is decoded), lanes decode from there
 * @constraint WARPS % KS == 0 -- warps form whole row groups
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint ROWS * UNR <= 16 -- bounded loads in flight per lane (registers; twice that for the SwiGLU pair)
 * @constraint MMAX * ROWS <= 16 -- bounded accumulators per lane (registers)
 * @constraint OCC * WARPS * WARP <= 2048 -- that many blocks can be resident
 * @constraint STAGE == 0 || WARPS * PAIR * ROWS * (cdiv(UNR * WARP / 4 / (1 + 7 * (SB > 100)) * SB, 16) + 1) * 16 + (KS > 1) * WARPS * MMAX * (PAIR * ROWS + 1) * 4 <= 49152 -- static shared memory (the staged rows, KS's scratch) within 48 KiB; SB > 100: 256-element blocks of 8 units
 * @constraint STAGE == 0 || ROWS * PAIR * cdiv(cdiv(UNR * WARP / 4 / (1 + 7 * (SB > 100)) * SB, 16) + 1, WARP) <= 16 -- bounded 16-byte loads in flight per lane (registers)
 * @grid cdiv(N, WARPS / KS * ROWS) 1 1
 * @block WARPS * WARP 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it (gc_pdl_wait) before it reads or writes anything but its rows of B
 *
 * Block b owns the RB = (WARPS/KS)·ROWS outputs b·RB .. b·RB+RB-1, for
 * all M rows of A. Warp w belongs to row group w / KS (ROWS outputs: PAIR·
 * ROWS rows of B, gate row n and up row N+n for the SwiGLU pair) and takes
 * K slice w % KS. A row of B is K/32 units of 32 elements (the prelude's
 * gc-quant block); a lane is (s, t) = (lane / 4, lane % 4): it takes part
 * t of unit s of each step's WARP/4 consecutive units, so the four lanes
 * of a unit read its bytes together and a warp reads WARP/4 consecutive
 * units of a row per access. Step i of slice k covers units (i·KS + k)·UNR
 * ·WARP/4 + v·WARP/4 + s, v < UNR: a lane issues the loads of all
 * PAIR·ROWS·UNR units of a step (GCQ_LOAD) before it decodes any, so
 * that many are in flight (the bytes a 4-bit format gives a lane per unit
 * are few: UNR is what hides the memory's latency). Per unit a lane takes
 * its 8 levels and the unit's scales (GCQ_DECODE), reads the matching 8 elements of each row of A and
 * accumulates in fp32: d·Σ a·q for the formats without a min (exact
 * products of small integers and a's), Σ a·y with y = fl(d·q) − mn (the
 * reference's own values) for Q4_K and Q5_K. At the end the lanes' sums
 * are reduced across the warp with shuffles and, when KS > 1, across the
 * KS warps of a group in shared memory; one thread writes each output
 * (set, added for gemm_add, silu(gate)·up for the SwiGLU pair).
 *
 * STAGE 1: those loads are narrow (16/32-bit; Q4_0's 18-byte blocks are
 * only 2-byte aligned) and each lane reloads its unit's scales, so STAGE
 * 0 is bound by load instructions, not by memory. With STAGE 1 a step's
 * units of one row, u0 .. u0 + UNR·WARP/4 − 1, are whole blocks and so
 * one contiguous byte range: the warp reads the 16-byte aligned chunks
 * that cover it (one 16-byte load per lane per chunk, all rows' loads
 * issued before any is stored) into its own region of shared memory, at
 * the range's offset mod 16 (every field keeps its alignment), and its
 * lanes then GCQ_LOAD their parts from there; the next step's chunks are
 * loaded into registers while this step is decoded. The units, lanes and
 * arithmetic are STAGE 0's, so the results are the same bits.
 *
 * NORM (rmsnorm_gemm*): each lane squares the A elements it loads and
 * scales them by the norm weight (A's dtype) before the products; the sums
 * of squares are reduced with the products (every row group reads all of
 * A's row), and the owner of an output multiplies by 1/sqrt(mean + eps).
 *
 * M is a run-time value: each pass takes MR = the smallest of 1, 2, 4, 8,
 * 16 (up to MMAX) that holds the rows left, so a variant with MMAX = 16
 * serves a batch of 16 in one pass and M = 1 with its 1-row body; larger
 * M take several passes over B (the GEMMs serve prefill; this keeps any M
 * correct where no GEMM applies, e.g. f32 activations). Rows of B past N
 * are clamped to row N-1 and not stored. K is a whole number of blocks (a
 * problem check); A's rows are read 4 elements (16 or 8 bytes) at a time.
 *
 * Launched overlapping the kernel before it (@pdl, CUDA sm_90+), a block
 * first asks L2 for its rows of B, then waits for that kernel.
 */

#ifndef PAIR
#define PAIR (GC_OP_GEMM_SWIGLU || GC_OP_RMSNORM_GEMM_SWIGLU ? 2 : 1)
#endif
#ifndef NORM
#define NORM (GC_OP_RMSNORM_GEMM || GC_OP_RMSNORM_GEMM_SWIGLU)
#endif
#define GQ_RG (WARPS / KS)     /* row groups per block */
#define GQ_RB (GQ_RG * ROWS)   /* outputs per block */
#define GQ_NR (PAIR * ROWS)    /* rows of B per warp: outputs' (gate) rows, then up rows */
#define GQ_US (GC_WARP / 4)    /* units per warp access */
#define GQ_SU (UNR * GQ_US)    /* units of a row per step (a multiple of GC_QUNITS) */
#define GQ_SR (GQ_SU / GC_QUNITS * GC_QBYTES) /* their bytes: a contiguous range of whole blocks */
#define GQ_SC ((GQ_SR + 15) / 16 + 1)           /* 16-byte chunks covering it at any even address */
#define GQ_CPL ((GQ_SC + GC_WARP - 1) / GC_WARP) /* of those, per lane (STAGE 1) */

/* acc[m][r] += lane part t of unit ug of each row of B (raw[r]: its words,
 * GCQ_LOAD's) against A's rows m < M (<= MR); ss[m] += the squares (NORM). */
template <int MR>
GC_DEVICE void gq_unit(const uint32_t raw[GQ_NR][GCQ_RAW], const TA *A, const TN *Wn, int64_t M,
                       int64_t K, int64_t ug, int t, float acc[MR][GQ_NR], float ss[MR]) {
  const int u = GCQ_UNIT_IN_BLOCK(ug);
  const int64_t k0 = ug * 32 + 4 * t, k1 = k0 + 16; /* the part's two runs of 4 */
  uint32_t lo[GQ_NR], hi[GQ_NR];
  float d0[GQ_NR], d1[GQ_NR], mn[GQ_NR];
  GC_UNROLL(GQ_NR)
  for (int r = 0; r < GQ_NR; r++)
    GCQ_DECODE(raw[r], u, t, lo[r], hi[r], d0[r], d1[r], mn[r]);
  float w[8];
  if (NORM) {
    LOADV_N(4, Wn, k0, w);
    LOADV_N(4, Wn, k1, w + 4);
  }
  GC_UNROLL(MR)
  for (int m = 0; m < MR; m++) {
    if (m >= M)
      break;
    float a[8];
    LOADV_A(4, A, m * K + k0, a);
    LOADV_A(4, A, m * K + k1, a + 4);
    if (NORM) {
      GC_UNROLL(8)
      for (int e = 0; e < 8; e++) {
        ss[m] = gc_fma(a[e], a[e], ss[m]);
        a[e] *= w[e];
      }
    }
    GC_UNROLL(GQ_NR)
    for (int r = 0; r < GQ_NR; r++) {
      if (GC_QMIN) { /* y = fl(d·q) − mn, the reference's values */
        float s = 0.0f;
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++) {
          s = gc_fma(a[e], gc_fma(d0[r], GCQ_LEVEL(lo[r], e), -mn[r]), s);
          s = gc_fma(a[4 + e], gc_fma(d1[r], GCQ_LEVEL(hi[r], e), -mn[r]), s);
        }
        acc[m][r] += s;
      } else { /* d·Σ a·q: the products a·q are exact */
        float s0 = 0.0f, s1 = 0.0f;
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++) {
          s0 = gc_fma(a[e], GCQ_LEVEL(lo[r], e), s0);
          s1 = gc_fma(a[4 + e], GCQ_LEVEL(hi[r], e), s1);
        }
        acc[m][r] = gc_fma(d0[r], s0, gc_fma(d1[r], s1, acc[m][r]));
      }
    }
  }
}

/* STAGE 1: issue the 16-byte loads of step u0 of each row b[r] (its units
 * u0 .. u0+GQ_SU-1 below nu: the bytes lo .. hi of the row) into ch:
 * chunk c is the 16 aligned bytes at 16·c past the row's byte lo rounded
 * down to 16, and lane takes c = lane + j·WARP. Chunks wholly past the
 * row's last unit are not read (ch keeps what it held: never decoded). */
GC_DEVICE void gq_fetch(const uint8_t *const b[GQ_NR], int64_t u0, int64_t nu, int lane,
                        gc_raw16 ch[GQ_NR][GQ_CPL]) {
  const int64_t lo = u0 / GC_QUNITS * GC_QBYTES, hi = gc_min64(u0 + GQ_SU, nu) / GC_QUNITS * GC_QBYTES;
  GC_UNROLL(GQ_NR)
  for (int r = 0; r < GQ_NR; r++) {
    const int off = (int)((uint64_t)(b[r] + lo) & 15);
    const gc_raw16 *a = (const gc_raw16 *)(b[r] + lo - off);
    const int64_t nc = (off + hi - lo + 15) / 16; /* chunks holding the units' bytes */
    GC_UNROLL(GQ_CPL)
    for (int j = 0; j < GQ_CPL; j++) {
      const int c = lane + j * GC_WARP;
      if (c < nc)
        ch[r][j] = a[c];
    }
  }
}

/* STAGE 1: the warp's chunks into its rows' shared copies st[r·GQ_SC ..]. */
GC_DEVICE void gq_stash(gc_raw16 *st, const gc_raw16 ch[GQ_NR][GQ_CPL], int lane) {
  GC_UNROLL(GQ_NR)
  for (int r = 0; r < GQ_NR; r++)
    GC_UNROLL(GQ_CPL)
    for (int j = 0; j < GQ_CPL; j++)
      if (lane + j * GC_WARP < GQ_SC)
        st[r * GQ_SC + lane + j * GC_WARP] = ch[r][j];
}

/* One pass: rows m0 .. m0+M-1 of A (M <= MR) against the warp's rows of
 * B; reduce and store. red: shared scratch (KS > 1); stage: shared copies
 * of the steps' rows, GQ_NR·GQ_SC chunks per warp (STAGE 1). */
template <int MR>
GC_DEVICE void gq_body(const TA *A, const TB *B, TC *C, const TN *Wn, int64_t M, int64_t N, int64_t K,
                       float eps, float *red, gc_raw16 *stage) {
  const int w = gc_tid() / GC_WARP, lane = gc_lane(), s = lane / 4, t = lane % 4;
  const int g = w / KS, ks = w % KS;
  const int64_t n0 = gc_bid() * GQ_RB + (int64_t)g * ROWS;
  const int64_t rb = K / GC_QK * GC_QBYTES; /* bytes per row of B */
  const uint8_t *b[GQ_NR];
  GC_UNROLL(ROWS)
  for (int r = 0; r < ROWS; r++) {
    b[r] = (const uint8_t *)B + gc_min64(n0 + r, N - 1) * rb;
    if (PAIR == 2)
      b[ROWS + r] = (const uint8_t *)B + (N + gc_min64(n0 + r, N - 1)) * rb;
  }
  float acc[MR][GQ_NR], ss[MR];
  GC_UNROLL(MR)
  for (int m = 0; m < MR; m++) {
    ss[m] = 0.0f;
    GC_UNROLL(GQ_NR)
    for (int r = 0; r < GQ_NR; r++)
      acc[m][r] = 0.0f;
  }
  const int64_t nu = K / 32, step = (int64_t)KS * UNR * GQ_US;
  if (STAGE) { /* the same units, lanes and order as below; the bytes from shared memory */
    gc_raw16 ch[GQ_NR][GQ_CPL];
    GC_UNROLL(GQ_NR)
    for (int r = 0; r < GQ_NR; r++)
      GC_UNROLL(GQ_CPL)
      for (int j = 0; j < GQ_CPL; j++)
        ch[r][j].w[0] = ch[r][j].w[1] = ch[r][j].w[2] = ch[r][j].w[3] = 0u;
    gc_raw16 *st = stage + w * GQ_NR * GQ_SC;
    int64_t u0 = (int64_t)ks * GQ_SU;
    if (u0 < nu)
      gq_fetch(b, u0, nu, lane, ch);
    for (; u0 < nu; u0 += step) {
      gc_syncwarp(); /* the lanes' reads of the last step are done */
      gq_stash(st, ch, lane);
      gc_syncwarp();
      if (u0 + step < nu)
        gq_fetch(b, u0 + step, nu, lane, ch); /* in flight while this step is decoded */
      const int64_t lo = u0 / GC_QUNITS * GC_QBYTES;
      GC_UNROLL(UNR)
      for (int v = 0; v < UNR; v++) {
        const int64_t ug = u0 + (int64_t)v * GQ_US + s;
        if (ug >= nu)
          break;
        uint32_t raw[GQ_NR][GCQ_RAW];
        GC_UNROLL(GQ_NR)
        for (int r = 0; r < GQ_NR; r++) {
          const uint8_t *sb = (const uint8_t *)(st + r * GQ_SC) + ((uint64_t)(b[r] + lo) & 15) +
                              (ug - u0) / GC_QUNITS * GC_QBYTES;
          GCQ_LOAD(sb, GCQ_UNIT_IN_BLOCK(ug), t, raw[r]);
        }
        gq_unit<MR>(raw, A, Wn, M, K, ug, t, acc, ss);
      }
    }
  } else {
    for (int64_t q0 = (int64_t)ks * UNR * GQ_US + s; q0 < nu; q0 += step) {
      uint32_t raw[UNR][GQ_NR][GCQ_RAW]; /* every load of the step first: UNR·PAIR·ROWS units in flight */
      GC_UNROLL(UNR)
      for (int v = 0; v < UNR; v++) {
        const int64_t ug = gc_min64(q0 + (int64_t)v * GQ_US, nu - 1); /* past the row: re-read, unused */
        GC_UNROLL(GQ_NR)
        for (int r = 0; r < GQ_NR; r++)
          GCQ_LOAD(b[r] + ug / GC_QUNITS * GC_QBYTES, GCQ_UNIT_IN_BLOCK(ug), t, raw[v][r]);
      }
      GC_UNROLL(UNR)
      for (int v = 0; v < UNR; v++) {
        const int64_t ug = q0 + (int64_t)v * GQ_US;
        if (ug < nu)
          gq_unit<MR>(raw[v], A, Wn, M, K, ug, t, acc, ss);
      }
    }
  }

  /* Reduce over the warp; lane (m·GQ_NR + r) % WARP keeps (m, r). */
  GC_UNROLL(MR)
  for (int m = 0; m < MR; m++) {
    GC_UNROLL(GQ_NR)
    for (int r = 0; r < GQ_NR; r++)
      acc[m][r] = gc_warp_sum(acc[m][r]);
    if (NORM)
      ss[m] = gc_warp_sum(ss[m]);
  }
  if (KS == 1) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++) {
      const float sc = NORM ? gc_rsqrt(ss[m] / (float)K + eps) : 1.0f;
      GC_UNROLL(ROWS)
      for (int r = 0; r < ROWS; r++)
        if (lane == (m * ROWS + r) % GC_WARP && m < M && n0 + r < N) {
          float v = acc[m][r] * sc;
          if (PAIR == 2)
            v = gc_silu_mul(v, acc[m][ROWS + r] * sc);
          STORE_GEMM(C, m * N + n0 + r, v);
        }
    }
    return;
  }
  float *red_ss = red + WARPS * MR * GQ_NR; /* [WARPS][MR] (NORM) */
  if (NORM && lane == 0) {
    GC_UNROLL(MR)
    for (int m = 0; m < MR; m++)
      red_ss[w * MR + m] = ss[m];
  }
  GC_UNROLL(MR)
  for (int m = 0; m < MR; m++)
    GC_UNROLL(GQ_NR)
    for (int r = 0; r < GQ_NR; r++)
      if (lane == (m * GQ_NR + r) % GC_WARP)
        red[(w * MR + m) * GQ_NR + r] = acc[m][r];
  gc_barrier();
  for (int o = gc_tid(); o < GQ_RG * MR * ROWS; o += WARPS * GC_WARP) {
    const int gg = o / (MR * ROWS), m = o / ROWS % MR, r = o % ROWS;
    const int64_t n = gc_bid() * GQ_RB + (int64_t)gg * ROWS + r;
    float v = 0.0f, vu = 0.0f, q = 0.0f;
    for (int k = 0; k < KS; k++) {
      v += red[((gg * KS + k) * MR + m) * GQ_NR + r];
      if (PAIR == 2)
        vu += red[((gg * KS + k) * MR + m) * GQ_NR + ROWS + r];
      if (NORM)
        q += red_ss[(gg * KS + k) * MR + m];
    }
    const float sc = NORM ? gc_rsqrt(q / (float)K + eps) : 1.0f;
    if (m < M && n < N)
      STORE_GEMM(C, m * N + n, PAIR == 2 ? gc_silu_mul(v * sc, vu * sc) : v * sc);
  }
  gc_barrier(); /* red is reused by the next pass */
}

/* Ask L2 for the n rows of B from row r (contiguous). */
GC_DEVICE void gq_prefetch(const TB *B, int64_t r, int64_t n, int64_t rb) {
  gc_prefetch_l2_range((const char *)B + r * rb, n * rb, WARPS * GC_WARP);
}

/* args: A, B, C, [norm,] int64 M, N, K[, float eps]. */
GC_KERNEL_OCC(WARPS * WARP, OCC)
void gemv_q_gpu(const TA *A, const TB *B, TC *C,
#if NORM
                const TN *Wn,
#endif
                int64_t M, int64_t N, int64_t K
#if NORM
                , float eps
#endif
) {
#if !NORM
  const TN *Wn = A; /* never read (NORM is 0): a pointer to offset, unlike null */
  const float eps = 0.0f;
#endif
  GC_SHARED float red[KS > 1 ? WARPS * MMAX * (GQ_NR + 1) : 1];
  GC_SHARED gc_raw16 stage[STAGE ? WARPS * GQ_NR * GQ_SC : 1];
#if !AMD
  const int64_t r0 = gc_bid() * GQ_RB, rb = K / GC_QK * GC_QBYTES;
  if (r0 < N && K % GC_QK == 0) {
    gq_prefetch(B, r0, gc_min64(GQ_RB, N - r0), rb);
    if (PAIR == 2)
      gq_prefetch(B, N + r0, gc_min64(GQ_RB, N - r0), rb);
  }
  if (NORM) /* the norm weight: read first thing after the wait */
    GC_PREFETCH_L2_ONCE(Wn, K * (int64_t)sizeof(TN), WARPS * GC_WARP);
#endif
  gc_pdl_wait();
  gc_pdl_launch();
  if (M <= 0 || N <= 0 || K % GC_QK)
    return; /* nothing to do, or outside the problem check */
  for (int64_t m0 = 0; m0 < M; m0 += MMAX) {
    const int64_t mr = gc_min64(MMAX, M - m0);
    const TA *a = A + m0 * K;
    TC *c = C + m0 * N;
    if (mr <= 1 || MMAX < 2)
      gq_body<1>(a, B, c, Wn, mr, N, K, eps, red, stage);
    else if (mr <= 2 || MMAX < 4)
      gq_body<(MMAX < 2 ? MMAX : 2)>(a, B, c, Wn, mr, N, K, eps, red, stage);
    else if (mr <= 4 || MMAX < 8)
      gq_body<(MMAX < 4 ? MMAX : 4)>(a, B, c, Wn, mr, N, K, eps, red, stage);
    else if (mr <= 8 || MMAX < 16)
      gq_body<(MMAX < 8 ? MMAX : 8)>(a, B, c, Wn, mr, N, K, eps, red, stage);
    else
      gq_body<MMAX>(a, B, c, Wn, mr, N, K, eps, red, stage);
  }
}
