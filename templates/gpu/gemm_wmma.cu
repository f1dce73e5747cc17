/* gemm_wmma.cu — AMD matrix-core GEMM for RDNA3 (WMMA, gfx1100, wave32),
 * f16 or bf16 in and out, fp32 accumulation: C[M,N] = A[M,K] · B[N,K]ᵀ
 * (gemm_add: C += A·Bᵀ), or the gate/up pair with the SwiGLU epilogue,
 * C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ) with W[2N,K] = gate rows 0..N-1, up rows
 * N..2N-1 (gemm_swiglu). The counterpart of gemm_mma.cu / gemm_mfma.cu
 * (same ops and arguments).
 *
 * @template gemm_wmma
 * @op gemm gemm_add gemm_swiglu
 * @backend hip
 * @dtypes f16 bf16
 * @kernel gemm_wmma
 * @param BM 32 64 128 256 default 128 -- block tile rows
 * @param BN 32 64 128 256 default 128 -- block tile columns of C (rows of B; gemm_swiglu: as many gate and as many up rows of W)
 * @param BK 16 32 64 default 32 -- K depth of an LDS stage
 * @param WM 16 32 64 default 32 -- wave tile rows (multiple of 16)
 * @param WN 16 32 64 default 64 -- wave tile columns (multiple of 16; gemm_swiglu: gate and up each)
 * @param STAGES 1 2 default 2 -- LDS stages: 2 double-buffers
 * @param RASTER 1 4 8 default 8 -- block rows walked together (L2 reuse of B columns)
 * @defaults gemm_swiglu BN=64 WN=32 -- the gate/up pair holds twice the B rows and accumulators
 * @constraint PAIR == 1 || BN <= 128 -- the gate/up pair's tiles (twice the B rows) stay in the space it was tuned in
 * @constraint BM % WM == 0 && BN % WN == 0 -- whole wave tiles
 * @constraint (BM / WM) * (BN / WN) * 32 >= 64 && (BM / WM) * (BN / WN) * 32 <= min(1024, MAXT) -- 2 to 32 waves
 * @constraint PAIR * WM * WN / 32 <= 128 -- fp32 accumulators (gate and up) per lane
 * @constraint PAIR * WM * WN / 32 + 8 * (WM + WN) / 16 + 4 * cdiv((BM + PAIR * BN) * BK / 8, (BM / WM) * (BN / WN) * 32) + 64 <= VGPRS -- accumulators, operands, staged chunks and addresses fit the VGPRs
 * @constraint STAGES * (BM + PAIR * BN) * (BK + 8) * 2 <= SMEM -- the stages fit in LDS
 * @constraint WMMA && WARP == 32 -- WMMA targets (RDNA3: gfx1100), wave32
 * @shmem STAGES * (BM + PAIR * BN) * (BK + 8) * 2
 * @applies K * SA % 16 == 0 && M > 1 -- rows of A and B are whole 16-byte chunks (K % 8 for 16-bit, K % 4 for f32); M = 1 is the GEMV's
 * @grid cdiv(M, BM) * cdiv(N, BN) 1 1
 * @block (BM / WM) * (BN / WN) * 32 1 1
 * @priority 3
 *
 * gemm_mfma's structure (raster, K-contiguous LDS tiles filled through
 * registers, one or two LDS stages), with 16×16×16 WMMA blocks. Operand
 * layouts (the prelude's GC_WMMA_* macros, checked on the host by
 * tests/test_amd_emulator.py): lane l feeds A row l % 16 and B column
 * l % 16 (B row n0 + l % 16) with all 16 k of the step, 32 contiguous
 * bytes; lanes 16-31 load the same rows as lanes 0-15, which is the
 * replication WMMA requires. Accumulator register r of lane l is
 * D[2r + l/16][l % 16]. LDS rows are padded by 16 bytes, keeping the
 * 16-byte reads and writes aligned. gemm_swiglu: gemm_mfma's two B tiles
 * per stage (gate and up rows), two accumulator sets and SwiGLU epilogue.
 */

#define GM_T ((BM / WM) * (BN / WN) * 32) /* threads */
#define GM_KI 16                           /* k per WMMA */
#define GM_CH (16 / SA)                    /* elements per 16-byte chunk */
#define GM_LDK (BK + 8)                    /* elements per padded LDS row */
#define GM_ASZ (BM * GM_LDK)               /* elements per A stage */
#define GM_BSZ (BN * GM_LDK)               /* elements per B (gate, up) stage */
#define GM_SSZ (GM_ASZ + PAIR * GM_BSZ)     /* elements per stage */
#define GM_MT (WM / 16)                    /* WMMA blocks down a wave tile */
#define GM_NT (WN / 16)                    /* ... and across */
#define GM_NACC 8                          /* accumulators a lane per block */

#if !GC_WMMA || SA != 2
#error "gemm_wmma needs a WMMA target (gfx1100 .. gfx1103) and 16-bit inputs"
#endif

typedef gc_float8_t gm_acc_t;
typedef gc_short16_t gm_op_t;

/* Chunks of an R-row tile, and per thread. */
template <int R> struct gm_tile {
  static constexpr int NCH = R * (BK / GM_CH);
  static constexpr int PER = (NCH + GM_T - 1) / GM_T;
};

/* Rows r0 .. r0+R-1 (of nr), columns k0 .. k0+BK-1 (of K) of X into
 * this thread's chunk registers v (zeros outside X). */
template <int R>
GC_DEVICE void gm_fetch(gc_raw16 *v, const TA *X, int64_t r0, int64_t nr, int64_t k0, int64_t K) {
  GC_UNROLL(gm_tile<R>::PER)
  for (int i = 0; i < gm_tile<R>::PER; i++) {
    int id = gc_tid() + i * GM_T;
    int r = id / (BK / GM_CH), c = id % (BK / GM_CH);
    int64_t k = k0 + c * GM_CH;
    v[i] = gc_raw16{{0, 0, 0, 0}};
    if ((gm_tile<R>::NCH % GM_T == 0 || id < gm_tile<R>::NCH) && r0 + r < nr && k < K)
      v[i] = *reinterpret_cast<const gc_raw16 *>(X + (r0 + r) * K + k);
  }
}

/* The chunk registers v into the tile at LDS s (element (r, k) at
 * s[r·GM_LDK + k]). */
template <int R> GC_DEVICE void gm_put(TA *s, const gc_raw16 *v) {
  GC_UNROLL(gm_tile<R>::PER)
  for (int i = 0; i < gm_tile<R>::PER; i++) {
    int id = gc_tid() + i * GM_T;
    if (gm_tile<R>::NCH % GM_T == 0 || id < gm_tile<R>::NCH) {
      int r = id / (BK / GM_CH), c = id % (BK / GM_CH);
      *reinterpret_cast<gc_raw16 *>(s + r * GM_LDK + c * GM_CH) = v[i];
    }
  }
}

/* A lane's operand for the WMMA block at tile row row0, k step ks: row
 * row0 + GC_WMMA_AB_ROW, the 16 elements from k = ks·16 + GC_WMMA_AB_K(0). */
GC_DEVICE gm_op_t gm_frag(const TA *s, int row0, int ks, int lane) {
  int r = row0 + GC_WMMA_AB_ROW(lane), k = ks * GM_KI + GC_WMMA_AB_K(0);
  const gc_raw16 *p = reinterpret_cast<const gc_raw16 *>(s + r * GM_LDK + k);
  struct { gc_raw16 lo, hi; } v = {p[0], p[1]};
  return __builtin_bit_cast(gm_op_t, v);
}

/* acc += the stage's A·Bᵀ for this wave's tile (gemm_swiglu: acc of the
 * gate tile at sb, acc_up of the up tile after it). */
GC_DEVICE void gm_stage_math(const TA *sa, const TA *sb, int wm, int wn, int lane,
                             gm_acc_t acc[GM_MT][GM_NT], gm_acc_t acc_up[GM_MT][GM_NT]) {
  GC_UNROLL(BK / GM_KI)
  for (int ks = 0; ks < BK / GM_KI; ks++) {
    gm_op_t a[GM_MT], b[GM_NT];
    GC_UNROLL(GM_MT)
    for (int i = 0; i < GM_MT; i++)
      a[i] = gm_frag(sa, wm * WM + i * 16, ks, lane);
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++)
      b[j] = gm_frag(sb, wn * WN + j * 16, ks, lane);
    GC_UNROLL(GM_MT)
    for (int i = 0; i < GM_MT; i++)
      GC_UNROLL(GM_NT)
      for (int j = 0; j < GM_NT; j++)
        acc[i][j] = gc_wmma<GC_TA>(a[i], b[j], acc[i][j]);
    if (PAIR == 2) {
      GC_UNROLL(GM_NT)
      for (int j = 0; j < GM_NT; j++)
        b[j] = gm_frag(sb + GM_BSZ, wn * WN + j * 16, ks, lane);
      GC_UNROLL(GM_MT)
      for (int i = 0; i < GM_MT; i++)
        GC_UNROLL(GM_NT)
        for (int j = 0; j < GM_NT; j++)
          acc_up[i][j] = gc_wmma<GC_TA>(a[i], b[j], acc_up[i][j]);
    }
  }
}

/* ---- the epilogue: accumulator r of block (i, j) (another epilogue is
 * one more #elif here) ---- */
#if PAIR == 2
#define GM_OUT(i, j, r) gc_silu_mul(acc[i][j][r], acc_up[i][j][r])
#else
#define GM_OUT(i, j, r) acc[i][j][r]
#endif

/* B: [N,K]; gemm_swiglu: W [2N,K], gate rows then up rows. */
GC_KERNEL_BOUNDS(GM_T)
void gemm_wmma(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  TA *smem = reinterpret_cast<TA *>(gc_dyn_shared());
  const int64_t nbm = gc_cdiv(M, BM), nbn = gc_cdiv(N, BN);
  if (nbm <= 0 || nbn <= 0)
    return;
  /* grouped raster: RASTER block rows at a time, column by column */
  const int64_t bid = gc_bid(), gsz = (int64_t)RASTER * nbn, first = bid / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  const int64_t m0 = (first + bid % gsz % rows) * BM, n0 = bid % gsz / rows * BN;

  const int lane = gc_lane(), w = gc_tid() / 32;
  const int wm = w / (BN / WN), wn = w % (BN / WN);

  gm_acc_t acc[GM_MT][GM_NT], acc_up[GM_MT][GM_NT]; /* of B (or the gate rows), of the up rows */
  GC_UNROLL(GM_MT)
  for (int i = 0; i < GM_MT; i++)
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++)
      acc[i][j] = gm_acc_t{}, acc_up[i][j] = gm_acc_t{};

  gc_raw16 va[gm_tile<BM>::PER], vb[gm_tile<BN>::PER], vb_up[gm_tile<BN>::PER];
  const TB *Bu = B + N * K; /* gemm_swiglu: the up rows */
  const int64_t kt_n = gc_cdiv(K, BK);
  if (STAGES == 2) {
    gm_fetch<BM>(va, A, m0, M, 0, K);
    gm_fetch<BN>(vb, B, n0, N, 0, K);
    if (PAIR == 2)
      gm_fetch<BN>(vb_up, Bu, n0, N, 0, K);
    gm_put<BM>(smem, va);
    gm_put<BN>(smem + GM_ASZ, vb);
    if (PAIR == 2)
      gm_put<BN>(smem + GM_ASZ + GM_BSZ, vb_up);
    gc_barrier();
  }
  for (int64_t kt = 0; kt < kt_n; kt++) {
    TA *cur = smem + (STAGES == 2 ? (kt & 1) : 0) * GM_SSZ;
    if (STAGES == 1) {
      gm_fetch<BM>(va, A, m0, M, kt * BK, K);
      gm_fetch<BN>(vb, B, n0, N, kt * BK, K);
      if (PAIR == 2)
        gm_fetch<BN>(vb_up, Bu, n0, N, kt * BK, K);
      gc_barrier(); /* the previous tile's math is done */
      gm_put<BM>(cur, va);
      gm_put<BN>(cur + GM_ASZ, vb);
      if (PAIR == 2)
        gm_put<BN>(cur + GM_ASZ + GM_BSZ, vb_up);
      gc_barrier();
      gm_stage_math(cur, cur + GM_ASZ, wm, wn, lane, acc, acc_up);
    } else {
      TA *nxt = smem + ((kt + 1) & 1) * GM_SSZ;
      bool more = kt + 1 < kt_n;
      if (more) {
        gm_fetch<BM>(va, A, m0, M, (kt + 1) * BK, K);
        gm_fetch<BN>(vb, B, n0, N, (kt + 1) * BK, K);
        if (PAIR == 2)
          gm_fetch<BN>(vb_up, Bu, n0, N, (kt + 1) * BK, K);
      }
      gm_stage_math(cur, cur + GM_ASZ, wm, wn, lane, acc, acc_up);
      if (more) {
        gm_put<BM>(nxt, va);
        gm_put<BN>(nxt + GM_ASZ, vb);
        if (PAIR == 2)
          gm_put<BN>(nxt + GM_ASZ + GM_BSZ, vb_up);
      }
      gc_barrier();
    }
  }

  GC_UNROLL(GM_MT)
  for (int i = 0; i < GM_MT; i++)
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++) {
      const int64_t n = n0 + wn * WN + j * 16 + GC_WMMA_D_COL(lane);
      GC_UNROLL(GM_NACC)
      for (int r = 0; r < GM_NACC; r++) {
        const int64_t m = m0 + wm * WM + i * 16 + GC_WMMA_D_ROW(lane, r);
        if (m < M && n < N)
          STORE_GEMM(C, m * N + n, GM_OUT(i, j, r)); /* gemm_add: C += A·Bᵀ */
      }
    }
}
