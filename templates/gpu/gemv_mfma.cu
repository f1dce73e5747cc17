/* gemv_mfma.cu — AMD matrix-core GEMM for a few rows of A (batched decode
 * steps: M = 2 .. 16 rows, one per sequence; MFMA, CDNA: gfx90a, gfx942),
 * f16 or bf16 in and out, fp32 accumulation: C[M,N] = A[M,K] · B[N,K]ᵀ
 * (gemm_add: C += A·Bᵀ), the gate/up pair with the SwiGLU epilogue
 * (gemm_swiglu: W[2N,K], gate rows then up rows), and both with A's rows
 * RMS-normalised on the way (rmsnorm_*). The AMD counterpart of
 * gemv_mma.cu (same ops, arguments, epilogues and priority). Memory bound
 * on B, as gemv_gpu, but the products run on the matrix cores: where
 * gemv_gpu spends M fp32 FMAs per weight (what bounds it on NVIDIA at
 * M = 8, gemv_mma.cu), this kernel spends the same MFMAs for any M up to
 * 16. (Not yet timed on an AMD GPU.)
 *
 * @template gemv_mfma
 * @op gemm gemm_add rmsnorm_gemm gemm_swiglu rmsnorm_gemm_swiglu
 * @backend hip
 * @dtypes f16 bf16
 * @kernel gemv_mfma
 * @param WARPS 2 4 8 16 default 8 -- waves per block
 * @param KS 1 2 4 8 default 4 -- waves that split one row tile's K range (block-level split-K)
 * @param RT 1 2 4 default 1 -- 16-row tiles of B per wave (gemm_swiglu: RT gate and RT up tiles)
 * @param UNR 1 2 4 default 2 -- 32-element K chunks of each row in flight per lane and step
 * @param OCC 1 2 default 2 -- blocks per CU the register budget is planned for (VGPRS / ceil(OCC * WARPS / 4) per lane: OCC * WARPS waves over 4 SIMDs)
 * @constraint MFMA && WARP == 64 -- MFMA targets (CDNA: gfx90a, gfx942), wave64
 * @constraint WARPS % KS == 0 -- waves form whole row groups
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint OCC * WARPS * WARP <= 2048 -- that many blocks can be resident (8 waves a SIMD)
 * @constraint PAIR * RT * UNR <= 8 -- bounded loads of B in flight per lane (one 16-byte load each)
 * @constraint OCC * (KS > 1) * WARPS * (4 * PAIR * RT + 1) * 4 * WARP <= SMEM -- OCC blocks' split-K partial sums fit one CU's LDS
 * @constraint 4 * PAIR * RT * UNR + 4 * PAIR * RT + 4 * UNR * (1 + 3 * NORM) + 12 * NORM + 40 <= min(256, VGPRS / cdiv(OCC * WARPS, 4)) -- estimated VGPRs (B chunks in flight, accumulators, A chunks and their split, the norm's fp32 products, addresses) fit the budget
 * @shmem (KS > 1) * WARPS * (4 * PAIR * RT + 1) * 4 * WARP
 * @applies M > 1 && M <= 16 && K % 8 == 0 -- M = 1 is the GEMVs'; the 16 columns of one MFMA; rows of A and B are whole 16-byte chunks
 * @grid cdiv(N, WARPS / KS * 16 * RT) 1 1
 * @block WARPS * WARP 1 1
 * @priority 4
 * @pdl -- waits for the kernel before it (gc_pdl_wait, a no-op on HIP) before it reads or writes anything
 *
 * Its @priority is above gemm_mfma's and gemm_wmma's 3: for 2 .. 16 rows
 * the untuned default streams B once instead of through padded tiles, as
 * gemv_mma does on NVIDIA, where that was measured (2.7x at 8 rows of the
 * 8B shapes on an H200); on AMD it is unmeasured (no AMD GPU here).
 *
 * Swapped operands: the 16x16x16 MFMA's A operand (16 rows) is a tile of
 * 16 rows of B (weights: they are the many rows) and its B operand (16
 * columns) is the (up to) 16 rows of A (the sequences), so one MFMA
 * computes 16 outputs of each of 16 rows of C. One MFMA's 16 columns
 * serve M <= 16 (there is no NT: a second column tile would double the A
 * loads and accumulators for batches that gemm_mfma serves as well); rows
 * of A past M are zeros, their columns not stored.
 *
 * Block b owns the RB = (WARPS/KS)·16·RT outputs (rows of B)
 * b·RB .. b·RB+RB-1 for all rows of A. Wave w belongs to row group w / KS
 * (RT tiles of 16 consecutive rows of B) and takes K slice w % KS: K is cut
 * into chunks of 32, and step s of slice k covers chunks
 * (s·KS + k)·UNR + u, u < UNR (UNR adjacent chunks: each row's 64·UNR
 * bytes are whole 128-byte lines from UNR = 2).
 *
 * Operand layout (the GC_MFMA_* macros of prelude_hip.h, S = 16, KPL = 4
 * elements a lane per operand): lane l feeds A row GC_MFMA_AB_ROW(16, l) =
 * l % 16 and B column l % 16, at k slots GC_MFMA_AB_K(16, 4, l, v) =
 * 4·(l / 16) + v, v < 4: the lanes of a row are its 4 k groups
 * q = GC_MFMA_AB_K(16, 4, l, 0) / 4 = l / 16. Fragments come straight
 * from global memory, no LDS staging: for chunk c the lane reads 16 bytes
 * (8 elements) at k = 32c + 8q of its row r = l % 16 of each tile of B
 * (row n0 + 16t + r) and the same 16 bytes of row r of A. A dot product
 * does not depend on the order of k, so the MFMA's k slots are mapped to
 * these elements rather than the other way round: MFMA 0 takes elements
 * 0-3 and MFMA 1 elements 4-7 (slot 4q + v ↔ element v, resp. 4 + v), the
 * same map on both operands; the 4 lanes of a row cover the chunk's 32
 * elements once. Each 16-byte load is thus two operand register pairs
 * with no shuffles. D: lane l, accumulator r holds
 * D[GC_MFMA_D_ROW(16, l, r)][GC_MFMA_D_COL(16, l)] = D[4·(l/16) + r][l % 16],
 * the output of B row n0 + 16t + 4·(l/16) + r for row l % 16 of A.
 * Chunks past K (K % 32 ≠ 0) load zeros; rows of B past N are read as row
 * N-1 and not stored; rows of A past M load zeros.
 *
 * rmsnorm_*: the lane squares the A elements it loads (its row's sum of
 * squares over its k group, reduced over the 4 lanes of the row and the
 * KS waves), and the MFMA's operand is x·w (w the norm weight) computed
 * in fp32 and split into GF_SPLIT values of A's dtype whose sum is x·w to
 * about fp32 precision (f16: hi + lo, 22 bits, down to lo's subnormal
 * spacing 2^-24; bf16: hi + mid + lo, 24 bits), each multiplied by the
 * same B fragment into the same accumulators. The owner of an output
 * multiplies it by 1/sqrt(mean + eps): a lane's outputs are all of row
 * D_COL(l) = AB_ROW(l) = l % 16 of A, whose sum it holds itself. (f16: an
 * x·w past 65504, for an activation already near f16's largest value and
 * a norm weight above 1, would overflow; gemv_gpu keeps x·w in fp32.)
 *
 * Reduction and epilogue: with KS > 1 every wave puts its accumulators in
 * LDS (@shmem) and the wave of K slice 0 of each row group sums them; its
 * lanes then store each output once (gemm_add: read it once first;
 * gemm_swiglu: silu(gate)·up in fp32). C is written once, by one thread.
 *
 * Declared @pdl as gemv_gpu is: HIP launches on a stream never overlap, so
 * the wait and launch points are no-ops and, unlike gemv_mma, no block
 * asks L2 for its rows of B first (nothing runs ahead to prefetch for).
 */

#define GF_RG (WARPS / KS)                   /* row groups per block */
#define GF_RB (GF_RG * 16 * RT)              /* outputs (rows of B) per block */
#define GF_MR 16                             /* rows of A served: one MFMA's columns */
#define GF_NACC (4 * PAIR * RT)              /* fp32 accumulators per lane */
#define GF_SPLIT (NORM ? (GC_TA == GC_BF16 ? 3 : 2) : 1) /* operands x·w is split into */

#if !GC_MFMA
#error "gemv_mfma needs an MFMA target (gfx90a, gfx940, gfx941, gfx942)"
#endif

typedef typename gc_mfma<GC_TA, 16>::acc_t gf_acc_t;

/* 16 bytes at p, or zeros when !ok (p is then not read). */
GC_DEVICE gc_raw16 gf_ld16(const void *p, bool ok) {
  return ok ? *reinterpret_cast<const gc_raw16 *>(p) : gc_raw16{{0u, 0u, 0u, 0u}};
}

/* Elements 4h .. 4h+3 of a 16-byte chunk as an MFMA operand (KPL = 4). */
GC_DEVICE gc_short4_t gf_half(const gc_raw16 &x, int h) {
  return __builtin_bit_cast(gc_short4_t, gc_raw8{{x.w[2 * h], x.w[2 * h + 1]}});
}

/* The MFMA operands of A's 8 elements x (one 16-byte chunk): x itself, or
 * under NORM x·w (w: the norm weight's chunk) split into GF_SPLIT parts;
 * ss += Σ x². op[s] is part s as 4 words (2 elements each). */
GC_DEVICE void gf_operand(const gc_raw16 &x, const gc_raw16 &w, float &ss, gc_raw16 op[GF_SPLIT]) {
  if (!NORM) {
    op[0] = x;
    return;
  }
  GC_UNROLL(4)
  for (int i = 0; i < 4; i++) {
    float xv[2], wv[2], p[2];
    gc_unpack2(TA(), x.w[i], xv);
    gc_unpack2(TA(), w.w[i], wv);
    GC_UNROLL(2)
    for (int e = 0; e < 2; e++) {
      ss = gc_fma(xv[e], xv[e], ss);
      p[e] = xv[e] * wv[e];
    }
    GC_UNROLL(GF_SPLIT)
    for (int s = 0; s < GF_SPLIT; s++) {
      op[s].w[i] = gc_pack2(TA(), p[0], p[1]);
      float r[2];
      gc_unpack2(TA(), op[s].w[i], r);
      p[0] -= r[0], p[1] -= r[1]; /* exact: the residual of a rounding */
    }
  }
}

/* args: A, B, C, int64 M, N, K (gemm, gemm_add, gemm_swiglu: B is W);
 * A, B, C, norm[K], int64 M, N, K, float eps (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu). */
GC_KERNEL_OCC(WARPS * WARP, OCC)
void gemv_mfma(const TA *A, const TB *B, TC *C,
#if NORM
               const TB *Wn,
#endif
               int64_t M, int64_t N, int64_t K
#if NORM
               , float eps
#endif
) {
#if !NORM
  const TB *Wn = 0;
  const float eps = 0.0f;
#endif
  gc_pdl_wait();
  gc_pdl_launch();
  if (M <= 1 || M > GF_MR || N <= 0 || K % 8)
    return; /* outside @applies */

  const int w = gc_tid() / GC_WARP, lane = gc_lane();
  const int r = GC_MFMA_AB_ROW(16, lane), q = GC_MFMA_AB_K(16, 4, lane, 0) / 4; /* row, k group */
  const int grp = w / KS, ks = w % KS;
  const int64_t n0 = gc_bid() * GF_RB + (int64_t)grp * 16 * RT; /* the group's first row of B */
  const TB *br[PAIR][RT]; /* row r of each tile (gemm_swiglu: of the gate and the up tiles) */
  GC_UNROLL(PAIR)
  for (int p = 0; p < PAIR; p++)
    GC_UNROLL(RT)
    for (int t = 0; t < RT; t++)
      br[p][t] = B + ((int64_t)p * N + gc_min64(n0 + 16 * t + r, N - 1)) * K + 8 * q;
  const TA *ar = A + (int64_t)r * K + 8 * q; /* row r of A (read only where r < M) */

  gf_acc_t acc[PAIR][RT];
  float ss = 0.0f; /* Σ x² of row r over the lane's k groups */
  GC_UNROLL(PAIR)
  for (int p = 0; p < PAIR; p++)
    GC_UNROLL(RT)
    for (int t = 0; t < RT; t++)
      acc[p][t] = gf_acc_t{};

  const int64_t nch = gc_cdiv(K, 32), K8 = K / 8;
  for (int64_t c0 = (int64_t)ks * UNR; c0 < nch; c0 += (int64_t)KS * UNR) {
    gc_raw16 bv[UNR][PAIR][RT];
    GC_UNROLL(UNR)
    for (int u = 0; u < UNR; u++) {
      const bool in = (c0 + u) * 4 + q < K8; /* the lane's 8-element group lies in K */
      GC_UNROLL(PAIR)
      for (int p = 0; p < PAIR; p++)
        GC_UNROLL(RT)
        for (int t = 0; t < RT; t++)
          bv[u][p][t] = gf_ld16(br[p][t] + (c0 + u) * 32, in);
    }
    GC_UNROLL(UNR)
    for (int u = 0; u < UNR; u++) {
      const bool in = (c0 + u) * 4 + q < K8;
      gc_raw16 wn = {{0u, 0u, 0u, 0u}}; /* the norm weight's chunk */
      if (NORM)
        wn = gf_ld16(Wn + (c0 + u) * 32 + 8 * q, in);
      gc_raw16 op[GF_SPLIT];
      gf_operand(gf_ld16(ar + (c0 + u) * 32, r < M && in), wn, ss, op);
      GC_UNROLL(GF_SPLIT)
      for (int s = 0; s < GF_SPLIT; s++)
        GC_UNROLL(2)
        for (int h = 0; h < 2; h++) /* elements 4h .. 4h+3 of both operands */
          GC_UNROLL(PAIR)
          for (int p = 0; p < PAIR; p++)
            GC_UNROLL(RT)
            for (int t = 0; t < RT; t++)
              acc[p][t] = gc_mfma<GC_TA, 16>::run(gf_half(bv[u][p][t], h), gf_half(op[s], h), acc[p][t]);
    }
  }

  if (NORM) /* row r's sum over the wave's K slice: the lanes of its k groups */
    for (int o = 16; o < GC_WARP; o *= 2)
      ss += gc_shfl_xor(ss, o);
  if (KS > 1) { /* the slices' partial sums, summed by the wave of slice 0 */
    float *mine = reinterpret_cast<float *>(gc_dyn_shared()) + (int64_t)w * (GF_NACC + 1) * GC_WARP + lane;
    GC_UNROLL(PAIR)
    for (int p = 0; p < PAIR; p++)
      GC_UNROLL(RT)
      for (int t = 0; t < RT; t++)
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++)
          mine[((p * RT + t) * 4 + e) * GC_WARP] = acc[p][t][e];
    mine[GF_NACC * GC_WARP] = ss;
    gc_barrier();
    if (ks)
      return;
    for (int k = 1; k < KS; k++) {
      const float *o = mine + (int64_t)k * (GF_NACC + 1) * GC_WARP;
      GC_UNROLL(PAIR)
      for (int p = 0; p < PAIR; p++)
        GC_UNROLL(RT)
        for (int t = 0; t < RT; t++)
          GC_UNROLL(4)
          for (int e = 0; e < 4; e++)
            acc[p][t][e] += o[((p * RT + t) * 4 + e) * GC_WARP];
      ss += o[GF_NACC * GC_WARP];
    }
  }

  /* The lane's outputs: row m = D_COL of A (= r: its own sum) × rows of B. */
  const int64_t m = GC_MFMA_D_COL(16, lane);
  const float sc = NORM ? gc_rsqrt(ss / (float)K + eps) : 1.0f;
  if (m >= M)
    return; /* a column of zeros (rows of A past M) */
  GC_UNROLL(RT)
  for (int t = 0; t < RT; t++)
    GC_UNROLL(4)
    for (int e = 0; e < 4; e++) {
      const int64_t n = n0 + 16 * t + GC_MFMA_D_ROW(16, lane, e);
      if (n < N) {
        const float x = acc[0][t][e] * sc;
#if PAIR == 2
        STORE_C(C, m * N + n, gc_silu_mul(x, acc[PAIR - 1][t][e] * sc));
#else
        STORE_GEMM(C, m * N + n, x);
#endif
      }
    }
}
