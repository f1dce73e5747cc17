/* gemv_mma.cu — NVIDIA tensor-core GEMM for a few rows of A (batched
 * decode steps: M = 2 .. 8·NT rows, one per sequence), f16 or bf16 in and
 * out, fp32 accumulation: C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add: C += A·Bᵀ),
 * the gate/up pair with the SwiGLU epilogue (gemm_swiglu: W[2N,K], gate
 * rows then up rows), and both with A's rows RMS-normalised on the way
 * (rmsnorm_*). Memory bound on B, as gemv_gpu, but the products run on
 * tensor cores: at M = 8 gemv_gpu's fp32 FMAs (8 per weight) bound it
 * near a third of the bandwidth, this kernel streams B at the same rate
 * for any M up to 8·NT.
 *
 * @template gemv_mma
 * @op gemm gemm_add rmsnorm_gemm gemm_swiglu rmsnorm_gemm_swiglu
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel gemv_mma
 * @param WARPS 4 8 16 default 8 -- warps per block
 * @param KS 1 2 4 8 default 4 -- warps that split one row tile's K range (block-level split-K)
 * @param RT 1 2 default 1 -- 16-row tiles of B per warp (gemm_swiglu: RT gate and RT up tiles)
 * @param UNR 1 2 4 default 2 -- 32-element K chunks of each row in flight per lane and step
 * @param NT 1 2 default 1 -- 8-row tiles of A: rows up to 8·NT are served
 * @param OCC 1 2 default 2 -- blocks per SM the register budget is planned for (65536 / (OCC * threads) per thread)
 * @constraint WARPS % KS == 0 -- warps form whole row groups
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint WARP == 32 -- NVIDIA warps
 * @constraint OCC * WARPS * WARP <= 2048 -- that many blocks can be resident
 * @constraint PAIR * RT * UNR <= 8 -- bounded loads of B in flight per lane (two 16-byte loads each)
 * @constraint KS == 1 || WARPS * (4 * PAIR * RT * NT + NT) * 128 <= 49152 -- the split-K partial sums fit in static shared memory
 * @constraint 8 * PAIR * RT * UNR + 4 * PAIR * RT * NT + 4 * NT * UNR * (1 + 2 * NORM) + 40 <= min(255, 65536 / (OCC * WARPS * 32)) -- estimated registers (B chunks in flight, accumulators, A chunks and their split, addresses) fit the budget
 * @applies M > 1 && M <= 8 * NT && K % 8 == 0 -- M = 1 is the GEMVs'; rows of A and B are whole 16-byte chunks
 * @grid cdiv(N, WARPS / KS * 16 * RT) 1 1
 * @block WARPS * WARP 1 1
 * @priority 6
 * @pdl -- waits for the kernel before it (gc_pdl_wait) before it reads or writes anything but its rows of B (gemm_swiglu: its gate and up rows of W)
 *
 * Its @priority is above gemm_wgmma's: for 2 .. 16 rows of A the
 * untuned default streams B once instead of through 64-row tiles (at 8
 * rows of the 8B shapes on an H200, 2.7x faster), so batched decode and
 * small GEMMs are fast before any tuning.
 *
 * Swapped operands: the mma's 16-row A operand is a tile of 16 rows of B
 * (weights: they are the many rows) and its 8-column B operand is 8 rows
 * of A (the few sequences), so an m16n8k16 computes 16 outputs of each of
 * 8 rows of C at once, and no tile is padded past 8 rows of A.
 *
 * Block b owns the RB = (WARPS/KS)·16·RT outputs (rows of B)
 * b·RB .. b·RB+RB-1 for all rows of A. Warp w belongs to row group w / KS
 * (RT tiles of 16 consecutive rows of B) and takes K slice w % KS: K is cut
 * into chunks of 32, and step s of slice k covers chunks
 * (s·KS + k)·UNR + u, u < UNR (UNR adjacent chunks: each row's 64·UNR
 * bytes are whole 128-byte lines from UNR = 2).
 *
 * Fragments straight from global memory, no shared staging: with g =
 * lane / 4 and q = lane % 4, lane reads 16 bytes (8 elements) of chunk c
 * at k = 32c + 8q from rows g and g + 8 of each tile, and 16 bytes of A's
 * row 8j + g (row tile j) at the same k. A dot product does not depend on
 * the order of k, so the mma's k slots are mapped to these elements
 * rather than the other way round: for halves h of the lane's 8 elements,
 * mma 0 takes h 0-3 and mma 1 h 4-7, slot 2q + i ↔ element i and slot
 * 2q + 8 + i ↔ element 2 + i of that half (i = 0, 1), the same map on
 * both operands (the A fragment's rows g and g+8 and the B fragment's
 * column g are the lane's own rows). Each 16-byte load is thus one
 * operand register quadruple (4 + 4 registers of B's two rows, 4 of A)
 * with no shuffles. Chunks past K (K % 32 ≠ 0) load zeros; rows of B past
 * N are read as row N-1 and not stored; rows of A past M load zeros.
 *
 * rmsnorm_*: the lane squares the A elements it loads (its row's sum of
 * squares, reduced over the 4 lanes of the row and the KS warps), and the
 * mma's operand is x·w (w the norm weight) computed in fp32 and split into
 * SPLIT values of A's dtype whose sum is x·w to about fp32 precision
 * (f16: hi + lo, 22 bits, down to lo's subnormal spacing 2^-24; bf16: hi +
 * mid + lo, 24 bits), each multiplied by the same B fragment into the
 * same accumulators. The owner of an output multiplies it by
 * 1/sqrt(mean + eps). (f16: an x·w past 65504, for an activation already
 * near f16's largest value and a norm weight above 1, would overflow;
 * gemv_gpu keeps x·w in fp32.)
 *
 * Reduction and epilogue: with KS > 1 every warp puts its accumulators in
 * shared memory and the warp of K slice 0 of each row group sums them
 * (gc_splitk_put, gc_splitk_add: prelude_common.h); its
 * lane then holds outputs (rows g, g+8 of each tile) × (rows 8j + 2q,
 * 8j + 2q + 1 of A) and stores each once (gemm_add: reads it once first;
 * gemm_swiglu: silu(gate)·up in fp32). C is written once, by one thread.
 *
 * Launched overlapping the kernel before it (@pdl, CUDA sm_90+), a block
 * first asks L2 for its rows of B (weights: no kernel writes them), then
 * waits for that kernel, so its first loads hit L2 while the previous
 * kernel drains.
 */

#define GW_RG (WARPS / KS)                   /* row groups per block */
#define GW_RB (GW_RG * 16 * RT)              /* outputs (rows of B) per block */
#define GW_NACC (4 * PAIR * RT * NT)         /* fp32 accumulators per lane */
#define GW_SPLIT (NORM ? (GC_TA == GC_BF16 ? 3 : 2) : 1) /* operands x·w is split into */


/* 16 bytes at p, or zeros when !ok (p is then not read). */
GC_DEVICE uint4 gw_ld16(const void *p, bool ok) {
  uint4 z = {0u, 0u, 0u, 0u};
  return ok ? *(const uint4 *)p : z;
}

/* The mma operands of A's 8 elements x (one 16-byte chunk): x itself, or
 * under NORM x·w (w: the norm weight's chunk) split into GW_SPLIT parts;
 * ss += Σ x². op[s] holds part s as 4 registers (2 elements each). */
GC_DEVICE void gw_operand(uint4 x, uint4 w, float &ss, uint32_t op[GW_SPLIT][4]) {
  if (!NORM) {
    op[0][0] = x.x, op[0][1] = x.y, op[0][2] = x.z, op[0][3] = x.w;
    return;
  }
  const uint32_t xr[4] = {x.x, x.y, x.z, x.w}, wr[4] = {w.x, w.y, w.z, w.w};
  GC_UNROLL(4)
  for (int i = 0; i < 4; i++) {
    float xv[2], wv[2], p[2];
    gc_unpack2(TA(), xr[i], xv);
    gc_unpack2(TA(), wr[i], wv);
    GC_UNROLL(2)
    for (int e = 0; e < 2; e++) {
      ss = gc_fma(xv[e], xv[e], ss);
      p[e] = xv[e] * wv[e];
    }
    GC_UNROLL(GW_SPLIT)
    for (int s = 0; s < GW_SPLIT; s++) {
      op[s][i] = gc_pack2(TA(), p[0], p[1]);
      float r[2];
      gc_unpack2(TA(), op[s][i], r);
      p[0] -= r[0], p[1] -= r[1]; /* exact: the residual of a rounding */
    }
  }
}

/* Ask L2 for the n rows of B from row r (contiguous: rows are K long). */
GC_DEVICE void gw_prefetch(const TB *B, int64_t r, int64_t n, int64_t K) {
  gc_prefetch_l2_range(B + r * K, n * K * SB, WARPS * GC_WARP);
}

/* args: A, B, C, int64 M, N, K (gemm, gemm_add, gemm_swiglu: B is W);
 * A, B, C, norm[K], int64 M, N, K, float eps (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu). */
GC_KERNEL_OCC(WARPS * WARP, OCC)
void gemv_mma(const TA *A, const TB *B, TC *C,
#if NORM
              const TB *Wn,
#endif
              int64_t M, int64_t N, int64_t K
#if NORM
              , float eps
#endif
) {
#if !NORM
  const TB *Wn = B; /* never read (NORM is 0): a pointer to offset, unlike null */
  const float eps = 0.0f;
#endif
  GC_SHARED float red[KS > 1 ? WARPS * (GW_NACC + NT) * GC_WARP : 1];
  const int64_t r0 = gc_bid() * GW_RB; /* this block's rows of B (gate rows, then up rows) */
  if (r0 < N) {
    gw_prefetch(B, r0, gc_min64(GW_RB, N - r0), K);
    if (PAIR == 2)
      gw_prefetch(B, N + r0, gc_min64(GW_RB, N - r0), K);
  }
  if (NORM) /* the norm weight: read first thing after the wait */
    GC_PREFETCH_L2_ONCE(Wn, K * SB, WARPS * GC_WARP);
  gc_pdl_wait();
  gc_pdl_launch();
  if (M <= 1 || M > 8 * NT || N <= 0 || K % 8)
    return; /* outside @applies */

  const int w = gc_tid() / GC_WARP, lane = gc_lane(), g = lane >> 2, q = lane & 3;
  const int grp = w / KS, ks = w % KS;
  const int64_t n0 = r0 + (int64_t)grp * 16 * RT;
  const TB *br[PAIR][RT][2]; /* rows g and g + 8 of each tile */
  GC_UNROLL(PAIR)
  for (int p = 0; p < PAIR; p++)
    GC_UNROLL(RT)
    for (int t = 0; t < RT; t++)
      GC_UNROLL(2)
      for (int h = 0; h < 2; h++)
        br[p][t][h] = B + ((int64_t)p * N + gc_min64(n0 + 16 * t + g + 8 * h, N - 1)) * K + 8 * q;

  float acc[PAIR][RT][NT][4], ss[NT];
  GC_UNROLL(NT)
  for (int j = 0; j < NT; j++) {
    ss[j] = 0.0f;
    GC_UNROLL(PAIR)
    for (int p = 0; p < PAIR; p++)
      GC_UNROLL(RT)
      for (int t = 0; t < RT; t++)
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++)
          acc[p][t][j][e] = 0.0f;
  }

  const int64_t nch = gc_cdiv(K, 32), K8 = K / 8;
  for (int64_t c0 = (int64_t)ks * UNR; c0 < nch; c0 += (int64_t)KS * UNR) {
    uint4 bv[UNR][PAIR][RT][2];
    GC_UNROLL(UNR)
    for (int u = 0; u < UNR; u++) {
      const int64_t gi = (c0 + u) * 4 + q; /* the lane's 8-element group */
      GC_UNROLL(PAIR)
      for (int p = 0; p < PAIR; p++)
        GC_UNROLL(RT)
        for (int t = 0; t < RT; t++)
          GC_UNROLL(2)
          for (int h = 0; h < 2; h++)
            bv[u][p][t][h] = gw_ld16(br[p][t][h] + (c0 + u) * 32, gi < K8);
    }
    GC_UNROLL(UNR)
    for (int u = 0; u < UNR; u++) {
      const int64_t gi = (c0 + u) * 4 + q;
      const uint4 wn = gw_ld16(Wn + gi * 8, NORM && gi < K8);
      GC_UNROLL(NT)
      for (int j = 0; j < NT; j++) {
        const int64_t row = 8 * j + g;
        uint32_t op[GW_SPLIT][4];
        gw_operand(gw_ld16(A + row * K + gi * 8, row < M && gi < K8), wn, ss[j], op);
        GC_UNROLL(GW_SPLIT)
        for (int s = 0; s < GW_SPLIT; s++)
          GC_UNROLL(PAIR)
          for (int p = 0; p < PAIR; p++)
            GC_UNROLL(RT)
            for (int t = 0; t < RT; t++) {
              const uint4 &lo = bv[u][p][t][0], &hi = bv[u][p][t][1]; /* rows g, g + 8 */
              gc_mma16816<GC_TA == GC_BF16>(acc[p][t][j], lo.x, hi.x, lo.y, hi.y, op[s][0], op[s][1]);
              gc_mma16816<GC_TA == GC_BF16>(acc[p][t][j], lo.z, hi.z, lo.w, hi.w, op[s][2], op[s][3]);
            }
      }
    }
  }

  if (NORM) /* the row's sum over the warp's K slice: its 4 lanes */
    GC_UNROLL(NT)
    for (int j = 0; j < NT; j++) {
      ss[j] += gc_shfl_xor(ss[j], 1);
      ss[j] += gc_shfl_xor(ss[j], 2);
    }
  if (KS > 1) { /* the slices' partial sums, summed by the warp of slice 0 */
    gc_splitk_put<GW_NACC, NT>(red, w, lane, &acc[0][0][0][0], ss);
    gc_barrier();
    if (ks)
      return;
    gc_splitk_add<GW_NACC, NT>(red, w, lane, KS, &acc[0][0][0][0], ss);
  }

  GC_UNROLL(NT)
  for (int j = 0; j < NT; j++) {
    float sc[2] = {1.0f, 1.0f}; /* of rows 8j + 2q and 8j + 2q + 1 of A */
    if (NORM) {
      GC_UNROLL(2)
      for (int i = 0; i < 2; i++) /* row 8j + r's sum is on lanes 4r .. 4r+3 */
        sc[i] = gc_rsqrt(gc_shfl(ss[j], 4 * (2 * q + i)) / (float)K + eps);
    }
    GC_UNROLL(RT)
    for (int t = 0; t < RT; t++)
      GC_UNROLL(4)
      for (int e = 0; e < 4; e++) {
        const int64_t m = 8 * j + 2 * q + (e & 1), n = n0 + 16 * t + g + 8 * (e >> 1);
        if (m < M && n < N) {
          const float x = acc[0][t][j][e] * sc[e & 1];
#if PAIR == 2
          STORE_C(C, m * N + n, gc_silu_mul(x, acc[PAIR - 1][t][j][e] * sc[e & 1]));
#else
          STORE_GEMM(C, m * N + n, x);
#endif
        }
      }
  }
}
