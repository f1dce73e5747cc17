/* gemm_mfma.cu — AMD matrix-core GEMM (MFMA, CDNA: gfx90a, gfx942), f16,
 * bf16 or f32 in and out, fp32 accumulation: C[M,N] = A[M,K] · B[N,K]ᵀ
 * (gemm_add: C += A·Bᵀ), or the gate/up pair with the SwiGLU epilogue,
 * C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ) with W[2N,K] = gate rows 0..N-1, up rows
 * N..2N-1 (gemm_swiglu). The counterpart of gemm_mma.cu (same ops,
 * arguments and applicability).
 *
 * @template gemm_mfma
 * @op gemm gemm_add gemm_swiglu
 * @backend hip
 * @dtypes f16 bf16 f32
 * @kernel gemm_mfma
 * @param MI 32 16 default 32 -- MFMA family: 32x32 (v_mfma_f32_32x32x{8f16,8bf16_1k,2f32}) or 16x16 (16x16x{16f16,16bf16_1k,4f32})
 * @param BM 32 64 128 256 default 128 -- block tile rows
 * @param BN 32 64 128 256 default 128 -- block tile columns of C (rows of B; gemm_swiglu: as many gate and as many up rows of W)
 * @param BK 16 32 64 default 16 -- K depth of an LDS stage (16 keeps the f32 defaults inside 64 KiB of LDS)
 * @param WM 16 32 64 128 default 64 -- wave tile rows (multiple of MI)
 * @param WN 16 32 64 128 default 64 -- wave tile columns (multiple of MI; gemm_swiglu: gate and up each)
 * @param STAGES 1 2 default 2 -- LDS stages: 2 double-buffers (next tile's global loads in flight during this tile's math)
 * @param RASTER 1 4 8 default 8 -- block rows walked together (L2 reuse of B columns)
 * @defaults gemm_swiglu BN=64 WN=32 -- the gate/up pair holds twice the B rows and accumulators
 * @constraint PAIR == 1 || (BN <= 128 && WN <= 64) -- the gate/up pair's tiles (twice the B rows) stay in the space it was tuned in
 * @constraint BM % WM == 0 && BN % WN == 0 && WM % MI == 0 && WN % MI == 0 -- whole wave tiles of whole MFMA blocks
 * @constraint (BM / WM) * (BN / WN) * 64 <= min(1024, MAXT) -- at most 16 waves
 * @constraint PAIR * WM * WN / 64 <= 128 -- fp32 accumulators (gate and up) per lane (AGPRs on gfx90a/gfx942)
 * @constraint 2 * (WM + PAIR * WN) / MI + 4 * cdiv((BM + PAIR * BN) * BK * SA / 16, (BM / WM) * (BN / WN) * 64) + 64 <= 256 -- operands, staged chunks and addresses fit the 256 arch VGPRs
 * @constraint STAGES * (BM + PAIR * BN) * (BK + 8 / SA) * SA <= SMEM -- the stages fit in LDS
 * @constraint MFMA && WARP == 64 -- MFMA targets (CDNA: gfx90a, gfx942), wave64
 * @shmem STAGES * (BM + PAIR * BN) * (BK + 8 / SA) * SA
 * @applies K * SA % 16 == 0 && M > 1 -- rows of A and B are whole 16-byte chunks (K % 8 for 16-bit, K % 4 for f32); M = 1 is the GEMV's
 * @grid cdiv(M, BM) * cdiv(N, BN) 1 1
 * @block (BM / WM) * (BN / WN) * 64 1 1
 * @priority 3
 *
 * Block b computes the BM×BN tile of C at (m0, n0), walked in groups of
 * RASTER block rows (as gemm_mma). Wave w owns the WM×WN sub-tile at
 * (w / (BN/WN), w % (BN/WN)): (WM/MI)×(WN/MI) MFMA blocks, each an fp32
 * accumulator vector of MI·MI/64 registers per lane.
 *
 * Operand layouts (the GC_MFMA_* macros of prelude_hip.h, checked on the
 * host by tests/test_amd_emulator.py): for an S×S block (S = MI) a lane l
 * feeds A row l % S and B column l % S — B is [N,K], so that is B row
 * n0 + l % S — with KPL consecutive k from (l / S)·KPL (KPL = 4 for
 * 16-bit, a 64-bit LDS read; 1 for f32), and gets back accumulator r =
 * D[GC_MFMA_D_ROW(S, l, r)][l % S]. A and B tiles are therefore both
 * stored K-contiguous, row-major, in LDS.
 *
 * Pipeline: each thread moves 16-byte chunks global → registers → LDS,
 * zero-filled past M/N and K. LDS rows are padded by 8 bytes (stride
 * BK·SA + 8) so that the S lanes reading one k column hit distinct banks;
 * chunks are written as two 8-byte halves (the padding leaves odd rows
 * 8-byte, not 16-byte, aligned). STAGES = 2: tile kt+1 is loaded into
 * registers before tile kt's math and written to the other stage after
 * it, one barrier per tile. STAGES = 1: load, barrier, math, barrier.
 * The epilogue stores each accumulator to C (guarded against M and N),
 * rounded once to C's dtype (gemm_add: added to C's element first, each
 * element read once by the lane that writes it).
 *
 * gemm_swiglu (PAIR = 2): each stage holds two B tiles, gate rows
 * n0 .. n0+BN-1 and up rows N+n0 .. N+n0+BN-1 of W; each wave reads its A
 * operands once per k step and multiplies them into a gate and an up
 * accumulator set; the epilogue writes g / (1 + e^-g) · u computed in
 * fp32 and rounded once (e^-g overflowing to inf gives silu = -0).
 */

#define GM_T ((BM / WM) * (BN / WN) * 64) /* threads */
#define GM_KPL (SA == 4 ? 1 : 4)           /* k per lane per operand */
#define GM_KI GC_MFMA_K(MI, GM_KPL)        /* k per MFMA */
#define GM_CH (16 / SA)                    /* elements per 16-byte chunk */
#define GM_LDK (BK + 8 / SA)               /* elements per padded LDS row */
#define GM_ASZ (BM * GM_LDK)               /* elements per A stage */
#define GM_BSZ (BN * GM_LDK)               /* elements per B (gate, up) stage */
#define GM_SSZ (GM_ASZ + PAIR * GM_BSZ)     /* elements per stage */
#define GM_MT (WM / MI)                    /* MFMA blocks down a wave tile */
#define GM_NT (WN / MI)                    /* ... and across */
#define GM_NACC GC_MFMA_NACC(MI)

#if !GC_MFMA
#error "gemm_mfma needs an MFMA target (gfx90a, gfx940, gfx941, gfx942)"
#endif

typedef typename gc_mfma<GC_TA, MI>::acc_t gm_acc_t;
#if SA == 4
typedef float gm_op_t;
#else
typedef gc_short4_t gm_op_t;
#endif

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
 * s[r·GM_LDK + k]), as two 8-byte halves. */
template <int R> GC_DEVICE void gm_put(TA *s, const gc_raw16 *v) {
  GC_UNROLL(gm_tile<R>::PER)
  for (int i = 0; i < gm_tile<R>::PER; i++) {
    int id = gc_tid() + i * GM_T;
    if (gm_tile<R>::NCH % GM_T == 0 || id < gm_tile<R>::NCH) {
      int r = id / (BK / GM_CH), c = id % (BK / GM_CH);
      gc_raw8 *d = reinterpret_cast<gc_raw8 *>(s + r * GM_LDK + c * GM_CH);
      d[0] = gc_raw8{{v[i].w[0], v[i].w[1]}};
      d[1] = gc_raw8{{v[i].w[2], v[i].w[3]}};
    }
  }
}

/* A lane's operand for the MFMA block at tile row row0, k step ks: row
 * row0 + GC_MFMA_AB_ROW, GM_KPL elements from k = ks·GM_KI + GC_MFMA_AB_K. */
GC_DEVICE gm_op_t gm_frag(const TA *s, int row0, int ks, int lane) {
  int r = row0 + GC_MFMA_AB_ROW(MI, lane), k = ks * GM_KI + GC_MFMA_AB_K(MI, GM_KPL, lane, 0);
  return *reinterpret_cast<const gm_op_t *>(s + r * GM_LDK + k);
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
      a[i] = gm_frag(sa, wm * WM + i * MI, ks, lane);
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++)
      b[j] = gm_frag(sb, wn * WN + j * MI, ks, lane);
    GC_UNROLL(GM_MT)
    for (int i = 0; i < GM_MT; i++)
      GC_UNROLL(GM_NT)
      for (int j = 0; j < GM_NT; j++)
        acc[i][j] = gc_mfma<GC_TA, MI>::run(a[i], b[j], acc[i][j]);
    if (PAIR == 2) {
      GC_UNROLL(GM_NT)
      for (int j = 0; j < GM_NT; j++)
        b[j] = gm_frag(sb + GM_BSZ, wn * WN + j * MI, ks, lane);
      GC_UNROLL(GM_MT)
      for (int i = 0; i < GM_MT; i++)
        GC_UNROLL(GM_NT)
        for (int j = 0; j < GM_NT; j++)
          acc_up[i][j] = gc_mfma<GC_TA, MI>::run(a[i], b[j], acc_up[i][j]);
    }
  }
}

/* Tile kt of A and B (gemm_swiglu: of the gate and the up rows) into the
 * chunk registers. */
GC_DEVICE void gm_fetch_all(gc_raw16 *va, gc_raw16 *vb, gc_raw16 *vb_up, const TA *A, const TB *B,
                            int64_t m0, int64_t n0, int64_t M, int64_t N, int64_t K, int64_t kt) {
  gm_fetch<BM>(va, A, m0, M, kt * BK, K);
  gm_fetch<BN>(vb, B, n0, N, kt * BK, K);
  if (PAIR == 2)
    gm_fetch<BN>(vb_up, B + N * K, n0, N, kt * BK, K);
}

/* The chunk registers into the stage at s. */
GC_DEVICE void gm_put_all(TA *s, const gc_raw16 *va, const gc_raw16 *vb, const gc_raw16 *vb_up) {
  gm_put<BM>(s, va);
  gm_put<BN>(s + GM_ASZ, vb);
  if (PAIR == 2)
    gm_put<BN>(s + GM_ASZ + GM_BSZ, vb_up);
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
void gemm_mfma(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  TA *smem = reinterpret_cast<TA *>(gc_dyn_shared());
  const int64_t nbm = gc_cdiv(M, BM), nbn = gc_cdiv(N, BN);
  if (nbm <= 0 || nbn <= 0)
    return;
  /* grouped raster: RASTER block rows at a time, column by column */
  const int64_t bid = gc_bid(), gsz = (int64_t)RASTER * nbn, first = bid / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  const int64_t m0 = (first + bid % gsz % rows) * BM, n0 = bid % gsz / rows * BN;

  const int lane = gc_lane(), w = gc_tid() / 64;
  const int wm = w / (BN / WN), wn = w % (BN / WN);

  gm_acc_t acc[GM_MT][GM_NT], acc_up[GM_MT][GM_NT]; /* of B (or the gate rows), of the up rows */
  GC_UNROLL(GM_MT)
  for (int i = 0; i < GM_MT; i++)
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++)
      acc[i][j] = gm_acc_t{}, acc_up[i][j] = gm_acc_t{};

  gc_raw16 va[gm_tile<BM>::PER], vb[gm_tile<BN>::PER], vb_up[gm_tile<BN>::PER];
  const int64_t kt_n = gc_cdiv(K, BK);
  if (STAGES == 2) {
    gm_fetch_all(va, vb, vb_up, A, B, m0, n0, M, N, K, 0);
    gm_put_all(smem, va, vb, vb_up);
    gc_barrier();
  }
  for (int64_t kt = 0; kt < kt_n; kt++) {
    TA *cur = smem + (STAGES == 2 ? (kt & 1) : 0) * GM_SSZ;
    if (STAGES == 1) {
      gm_fetch_all(va, vb, vb_up, A, B, m0, n0, M, N, K, kt);
      gc_barrier(); /* the previous tile's math is done */
      gm_put_all(cur, va, vb, vb_up);
      gc_barrier();
      gm_stage_math(cur, cur + GM_ASZ, wm, wn, lane, acc, acc_up);
    } else {
      TA *nxt = smem + ((kt + 1) & 1) * GM_SSZ;
      bool more = kt + 1 < kt_n;
      if (more)
        gm_fetch_all(va, vb, vb_up, A, B, m0, n0, M, N, K, kt + 1);
      gm_stage_math(cur, cur + GM_ASZ, wm, wn, lane, acc, acc_up);
      if (more)
        gm_put_all(nxt, va, vb, vb_up);
      gc_barrier();
    }
  }

  GC_UNROLL(GM_MT)
  for (int i = 0; i < GM_MT; i++)
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++) {
      const int64_t n = n0 + wn * WN + j * MI + GC_MFMA_D_COL(MI, lane);
      GC_UNROLL(GM_NACC)
      for (int r = 0; r < GM_NACC; r++) {
        const int64_t m = m0 + wm * WM + i * MI + GC_MFMA_D_ROW(MI, lane, r);
        if (m < M && n < N)
          STORE_GEMM(C, m * N + n, GM_OUT(i, j, r)); /* gemm_add: C += A·Bᵀ */
      }
    }
}
