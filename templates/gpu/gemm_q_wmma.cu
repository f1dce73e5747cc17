/* gemm_q_wmma.cu — AMD matrix-core GEMM with B in a block format for RDNA3
 * (WMMA, gfx1100, wave32; the prefill path): C[M,N] = A[M,K] · B[N,K]ᵀ, A
 * and C f16 or bf16, B's rows blocks of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K
 * (base/quant.h), dequantized into LDS, fp32 accumulation (gemm_add:
 * C += A·Bᵀ; gemm_swiglu: C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), W[2N,K] = gate rows
 * 0..N-1, up rows N..2N-1). The counterpart of gemm_q_mfma.cu (same ops,
 * arguments and applicability) as gemm_wmma.cu is of gemm_mfma.cu.
 *
 * @template gemm_q_wmma
 * @op gemm gemm_add gemm_swiglu
 * @backend hip
 * @dtypes f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16
 * @kernel gemm_q_wmma
 * @param BM 32 64 128 256 default 128 -- block tile rows
 * @param BN 32 64 128 256 default 128 -- block tile columns of C (rows of B; gemm_swiglu: as many gate and as many up rows of W)
 * @param BK 32 64 128 default 32 -- K depth of an LDS stage: whole units of 32
 * @param WM 16 32 64 default 32 -- wave tile rows (multiple of 16)
 * @param WN 16 32 64 default 32 -- wave tile columns (multiple of 16; gemm_swiglu: gate and up each)
 * @param STAGES 1 2 default 2 -- LDS stages: 2 double-buffers (next tile's A chunks and B words in flight during this tile's math)
 * @param RASTER 1 4 8 default 8 -- block rows walked together (L2 reuse of B)
 * @defaults gemm_swiglu BN=64 WN=16 -- the gate/up pair holds twice the B rows and accumulators
 * @constraint PAIR == 1 || BN <= 128 -- the gate/up pair's tiles (twice the B rows)
 * @constraint BM % WM == 0 && BN % WN == 0 -- whole wave tiles
 * @constraint (BM / WM) * (BN / WN) * 32 >= 64 && (BM / WM) * (BN / WN) * 32 <= min(512, MAXT) -- 2 to 16 waves (32 waves of a workgroup leave a wave 192 VGPRs)
 * @constraint PAIR * WM * WN / 32 <= 128 -- fp32 accumulators (gate and up) per lane
 * @constraint PAIR * WM * WN <= 1024 -- at most four 16x16 accumulator blocks (gate and up) per wave: past that the operands hoisted around them spill
 * @constraint 5 * PAIR * WM * WN / 64 + 8 * cdiv(BM * BK / 8, (BM / WM) * (BN / WN) * 32) + 16 * cdiv(PAIR * BN * BK / 8, (BM / WM) * (BN / WN) * 32) + 96 <= VGPRS -- accumulators with a unit's operands, fresh accumulators and Σa (measured: about 5/64 VGPR per element of the wave tile), staged A chunks, B's raw words and addresses fit the VGPRs
 * @constraint PAIR * BN * BK / 8 <= 4 * (BM / WM) * (BN / WN) * 32 && BM * BK / 8 <= 4 * (BM / WM) * (BN / WN) * 32 -- at most 4 dequantization tasks and 4 A chunks a thread (16 a thread spill SGPRs: their addresses)
 * @constraint STAGES * (2 * (BK + 8) * (BM + PAIR * BN) + PAIR * BN * (BK / 4 + BK / 8)) <= SMEM -- the stages fit in LDS
 * @constraint WMMA && WARP == 32 -- WMMA targets (RDNA3: gfx1100), wave32
 * @shmem STAGES * (2 * (BK + 8) * (BM + PAIR * BN) + PAIR * BN * (BK / 4 + BK / 8))
 * @applies M > 1 -- M = 1 is the GEMVs'
 * @grid cdiv(M, BM) * cdiv(N, BN) 1 1
 * @block (BM / WM) * (BN / WN) * 32 1 1
 * @priority 2
 *
 * gemm_q_mfma's structure and exact dequantization (levels of B in A's
 * dtype in LDS, each row's d0/d1 and mn per unit beside them; per unit, or
 * per half for Q6_K, a fresh accumulator scaled by the lane's column's d;
 * mn·Σa subtracted for Q4_K/Q5_K, Σa from WMMAs with ones), with gemm_wmma's
 * 16×16×16 WMMA blocks: lane l feeds A row l % 16 and B column l % 16
 * (B tile row l % 16) with all 16 k of a step (two 16-byte LDS reads; LDS
 * rows padded by 16 bytes), lanes 16-31 the same rows as lanes 0-15 (the
 * replication WMMA requires). Accumulator register r of lane l is
 * D[2r + l/16][l % 16]: column l % 16 for every register, so again d and
 * mn are one value per lane and unit. A unit is two WMMAs, one per half.
 */

#define GQ_T ((BM / WM) * (BN / WN) * 32) /* threads */
#define GQ_KI 16                           /* k per WMMA */
#define GQ_SPU 2                           /* WMMAs per unit of 32 */
#define GQ_LDK (BK + 8)                    /* elements per padded LDS row */
#define GQ_BR (PAIR * BN)                  /* rows of B in a stage */
#define GQ_ASZ (BM * GQ_LDK)               /* elements of an A stage */
#define GQ_BSZ (GQ_BR * GQ_LDK)            /* elements of B's levels */
#define GQ_SSZ (2 * GQ_LDK * (BM + GQ_BR) + GQ_BR * (BK / 4 + BK / 8)) /* bytes of a stage */
#define GQ_MT (WM / 16)                    /* WMMA blocks down a wave tile */
#define GQ_NT (WN / 16)                    /* ... and across */
#define GQ_NACC 8                          /* accumulators a lane per block */
#define GQ_TASKS (GQ_BR * BK / 8)          /* parts of 8 elements in a B tile */
#define GQ_TPT ((GQ_TASKS + GQ_T - 1) / GQ_T)

#if !GC_WMMA || SA != 2
#error "gemm_q_wmma needs a WMMA target (gfx1100 .. gfx1103) and 16-bit activations"
#endif

typedef gc_float8_t gq_acc_t;
typedef gc_short16_t gq_op_t;

/* A's chunks: per thread. */
#define GQ_ACH (BM * (BK / 8))
#define GQ_APER ((GQ_ACH + GQ_T - 1) / GQ_T)

/* A's rows m0.. (of M), columns k0 .. k0+BK-1 into this thread's chunk
 * registers (zeros outside A). */
GC_DEVICE void gq_fetch_a(gc_raw16 *v, const TA *A, int64_t m0, int64_t M, int64_t k0, int64_t K) {
  GC_UNROLL(GQ_APER)
  for (int i = 0; i < GQ_APER; i++) {
    const int id = gc_tid() + i * GQ_T;
    const int r = id / (BK / 8), c = id % (BK / 8);
    const int64_t k = k0 + c * 8;
    v[i] = gc_raw16{{0, 0, 0, 0}};
    if ((GQ_ACH % GQ_T == 0 || id < GQ_ACH) && m0 + r < M && k < K)
      v[i] = *reinterpret_cast<const gc_raw16 *>(A + (m0 + r) * K + k);
  }
}

/* The chunk registers into the A tile at s. */
GC_DEVICE void gq_put_a(TA *s, const gc_raw16 *v) {
  GC_UNROLL(GQ_APER)
  for (int i = 0; i < GQ_APER; i++) {
    const int id = gc_tid() + i * GQ_T;
    if (GQ_ACH % GQ_T == 0 || id < GQ_ACH) {
      const int r = id / (BK / 8), c = id % (BK / 8);
      *reinterpret_cast<gc_raw16 *>(s + r * GQ_LDK + c * 8) = v[i];
    }
  }
}

/* The row of B behind row rr of the stage's B tile (-1: past N). */
GC_DEVICE int64_t gq_brow(int rr, int64_t n0, int64_t N) {
  const int64_t n = n0 + rr % BN;
  return n < N ? (rr >= BN ? N : 0) + n : -1;
}

/* Loads (raw words) of this thread's tasks of tile kt. */
GC_DEVICE void gq_load_b(const uint8_t *B, int64_t n0, int64_t N, int64_t K, int64_t kt,
                         uint32_t raw[GQ_TPT][GCQ_RAW]) {
  const int64_t rb = K / GC_QK * GC_QBYTES, nu = K / 32;
  GC_UNROLL(GQ_TPT)
  for (int i = 0; i < GQ_TPT; i++) {
    const int id = gc_tid() + i * GQ_T;
    const int rr = id / (BK / 8), p = id % (BK / 8);
    const int64_t row = gq_brow(rr, n0, N), ug = kt * (BK / 32) + p / 4;
    if ((GQ_TASKS % GQ_T == 0 || id < GQ_TASKS) && row >= 0 && ug < nu)
      GCQ_LOAD(B + row * rb + ug / GC_QUNITS * GC_QBYTES, GCQ_UNIT_IN_BLOCK(ug), p % 4, raw[i]);
  }
}

/* Four biased level bytes of w as four levels in A's dtype (exact). */
GC_DEVICE gc_raw8 gq_levels(uint32_t w) {
  return gc_raw8{{gc_pack2(TA(), GCQ_LEVEL(w, 0), GCQ_LEVEL(w, 1)),
                  gc_pack2(TA(), GCQ_LEVEL(w, 2), GCQ_LEVEL(w, 3))}};
}

/* Decode this thread's tasks of tile kt into the stage's B tile at sb
 * (levels; d0/d1, then mins, after them). */
GC_DEVICE void gq_store_b(TA *sb, int64_t n0, int64_t N, int64_t K, int64_t kt,
                          const uint32_t raw[GQ_TPT][GCQ_RAW]) {
  float *sd = reinterpret_cast<float *>(sb + GQ_BSZ), *sm = sd + GQ_BR * (BK / 16);
  const int64_t nu = K / 32;
  GC_UNROLL(GQ_TPT)
  for (int i = 0; i < GQ_TPT; i++) {
    const int id = gc_tid() + i * GQ_T;
    if (GQ_TASKS % GQ_T != 0 && id >= GQ_TASKS)
      break;
    const int rr = id / (BK / 8), p = id % (BK / 8), uu = p / 4, t = p % 4;
    const int64_t row = gq_brow(rr, n0, N), ug = kt * (BK / 32) + uu;
    gc_raw8 v0 = gc_raw8{{0, 0}}, v1 = gc_raw8{{0, 0}};
    float d0 = 0.0f, d1 = 0.0f, mn = 0.0f;
    if (row >= 0 && ug < nu) {
      uint32_t lo, hi;
      GCQ_DECODE(raw[i], GCQ_UNIT_IN_BLOCK(ug), t, lo, hi, d0, d1, mn);
      v0 = gq_levels(lo);
      v1 = gq_levels(hi);
    }
    *reinterpret_cast<gc_raw8 *>(sb + rr * GQ_LDK + 32 * uu + 4 * t) = v0;
    *reinterpret_cast<gc_raw8 *>(sb + rr * GQ_LDK + 32 * uu + 16 + 4 * t) = v1;
    if (t == 0) {
      sd[rr * (BK / 16) + 2 * uu] = d0;
      sd[rr * (BK / 16) + 2 * uu + 1] = d1;
      if (GC_QMIN)
        sm[rr * (BK / 32) + uu] = mn;
    }
  }
}

/* A lane's operand for the WMMA block at tile row row0, k step ks: row
 * row0 + GC_WMMA_AB_ROW, the 16 elements from k = ks·16 + GC_WMMA_AB_K(0). */
GC_DEVICE gq_op_t gq_frag(const TA *s, int row0, int ks, int lane) {
  const int r = row0 + GC_WMMA_AB_ROW(lane), k = ks * GQ_KI + GC_WMMA_AB_K(0);
  const gc_raw16 *p = reinterpret_cast<const gc_raw16 *>(s + r * GQ_LDK + k);
  struct { gc_raw16 lo, hi; } v = {p[0], p[1]};
  return __builtin_bit_cast(gq_op_t, v);
}

/* acc[i][j] += unit uu of the B rows r0 .. r0+15 of the stage (block
 * column j of this wave) against A's operands a: per block, the unit's
 * WMMAs into a fresh accumulator (per half for Q6_K), scaled by the
 * lane's column's d; minus mn·Σa (sum) for the formats with a min. */
GC_DEVICE void gq_unit(gq_acc_t acc[GQ_MT][GQ_NT], int j, const gq_op_t a[GQ_MT][GQ_SPU],
                       const gq_acc_t sum[GQ_MT], const TA *sb, int r0, int uu, int lane) {
  const float *sd = reinterpret_cast<const float *>(sb + GQ_BSZ), *sm = sd + GQ_BR * (BK / 16);
  const int n = r0 + GC_WMMA_D_COL(lane); /* the lane's column of C (row of the B tile) */
  const float d0 = sd[n * (BK / 16) + 2 * uu], d1 = sd[n * (BK / 16) + 2 * uu + 1];
  const float mn = GC_QMIN ? sm[n * (BK / 32) + uu] : 0.0f;
  gq_op_t b[GQ_SPU];
  GC_UNROLL(GQ_SPU)
  for (int s = 0; s < GQ_SPU; s++)
    b[s] = gq_frag(sb, r0, uu * GQ_SPU + s, lane);
  GC_UNROLL(GQ_MT)
  for (int i = 0; i < GQ_MT; i++) {
    gq_acc_t c = gq_acc_t{};
    GC_UNROLL(GQ_SPU / 2)
    for (int s = 0; s < GQ_SPU / 2; s++)
      c = gc_wmma<GC_TA>(a[i][s], b[s], c);
    if (GC_QSPLIT) {
      acc[i][j] += d0 * c;
      c = gq_acc_t{};
    }
    GC_UNROLL(GQ_SPU / 2)
    for (int s = GQ_SPU / 2; s < GQ_SPU; s++)
      c = gc_wmma<GC_TA>(a[i][s], b[s], c);
    acc[i][j] += (GC_QSPLIT ? d1 : d0) * c;
    if (GC_QMIN)
      acc[i][j] -= mn * sum[i];
  }
}

/* acc += the stage's A·Bᵀ for this wave's tile, unit by unit (gemm_swiglu:
 * acc of the gate rows, acc_up of the up rows after them). */
GC_DEVICE void gq_stage_math(const TA *sa, const TA *sb, int wm, int wn, int lane,
                             gq_acc_t acc[GQ_MT][GQ_NT], gq_acc_t acc_up[GQ_MT][GQ_NT]) {
  GC_UNROLL(1) /* a unit at a time (unrolled, the next unit's operands stay live: spills) */
  for (int uu = 0; uu < BK / 32; uu++) {
    gq_op_t a[GQ_MT][GQ_SPU];
    GC_UNROLL(GQ_MT)
    for (int i = 0; i < GQ_MT; i++)
      GC_UNROLL(GQ_SPU)
      for (int s = 0; s < GQ_SPU; s++)
        a[i][s] = gq_frag(sa, wm * WM + i * 16, uu * GQ_SPU + s, lane);
    gq_acc_t sum[GQ_MT]; /* Σa of the unit, in the accumulators' layout (GC_QMIN) */
    GC_UNROLL(GQ_MT)
    for (int i = 0; i < GQ_MT; i++) {
      sum[i] = gq_acc_t{};
      if (GC_QMIN) {
        const short one = GC_TA == GC_BF16 ? (short)0x3F80 : (short)0x3C00;
        const gq_op_t ones = {one, one, one, one, one, one, one, one, one, one, one, one, one, one, one, one};
        GC_UNROLL(GQ_SPU)
        for (int s = 0; s < GQ_SPU; s++)
          sum[i] = gc_wmma<GC_TA>(a[i][s], ones, sum[i]);
      }
    }
    GC_UNROLL(GQ_NT)
    for (int j = 0; j < GQ_NT; j++)
      gq_unit(acc, j, a, sum, sb, wn * WN + j * 16, uu, lane);
    if (PAIR == 2) {
      GC_UNROLL(GQ_NT)
      for (int j = 0; j < GQ_NT; j++)
        gq_unit(acc_up, j, a, sum, sb, BN + wn * WN + j * 16, uu, lane);
    }
  }
}

/* ---- the epilogue: accumulator r of block (i, j) (another epilogue is
 * one more #elif here) ---- */
#if PAIR == 2
#define GQ_OUT(i, j, r) gc_silu_mul(acc[i][j][r], acc_up[i][j][r])
#else
#define GQ_OUT(i, j, r) acc[i][j][r]
#endif

/* B: [N,K] in blocks; gemm_swiglu: W [2N,K], gate rows then up rows. */
GC_KERNEL_BOUNDS(GQ_T)
void gemm_q_wmma(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  unsigned char *smem = gc_dyn_shared();
  const int64_t nbm = gc_cdiv(M, BM), nbn = gc_cdiv(N, BN);
  if (nbm <= 0 || nbn <= 0 || K % GC_QK)
    return; /* nothing to do, or outside the problem check */
  /* grouped raster: RASTER block rows at a time, column by column */
  const int64_t bid = gc_bid(), gsz = (int64_t)RASTER * nbn, first = bid / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  const int64_t m0 = (first + bid % gsz % rows) * BM, n0 = bid % gsz / rows * BN;

  const int lane = gc_lane(), w = gc_tid() / 32;
  const int wm = w / (BN / WN), wn = w % (BN / WN);
  const uint8_t *Bq = reinterpret_cast<const uint8_t *>(B);

  gq_acc_t acc[GQ_MT][GQ_NT], acc_up[GQ_MT][GQ_NT]; /* of B (or the gate rows), of the up rows */
  GC_UNROLL(GQ_MT)
  for (int i = 0; i < GQ_MT; i++)
    GC_UNROLL(GQ_NT)
    for (int j = 0; j < GQ_NT; j++)
      acc[i][j] = gq_acc_t{}, acc_up[i][j] = gq_acc_t{};

  gc_raw16 va[GQ_APER];
  uint32_t raw[GQ_TPT][GCQ_RAW];
  const int64_t kt_n = gc_cdiv(K, BK);
#define GQ_STAGE(s) reinterpret_cast<TA *>(smem + (s) * GQ_SSZ)
  if (STAGES == 2) {
    gq_fetch_a(va, A, m0, M, 0, K);
    gq_load_b(Bq, n0, N, K, 0, raw);
    gq_put_a(GQ_STAGE(0), va);
    gq_store_b(GQ_STAGE(0) + GQ_ASZ, n0, N, K, 0, raw);
    gc_barrier();
  }
  for (int64_t kt = 0; kt < kt_n; kt++) {
    TA *cur = GQ_STAGE(STAGES == 2 ? (kt & 1) : 0);
    if (STAGES == 1) {
      gq_fetch_a(va, A, m0, M, kt * BK, K);
      gq_load_b(Bq, n0, N, K, kt, raw);
      gc_barrier(); /* the previous tile's math is done */
      gq_put_a(cur, va);
      gq_store_b(cur + GQ_ASZ, n0, N, K, kt, raw);
      gc_barrier();
      gq_stage_math(cur, cur + GQ_ASZ, wm, wn, lane, acc, acc_up);
    } else {
      TA *nxt = GQ_STAGE((kt + 1) & 1);
      const bool more = kt + 1 < kt_n;
      if (more) {
        gq_fetch_a(va, A, m0, M, (kt + 1) * BK, K);
        gq_load_b(Bq, n0, N, K, kt + 1, raw);
      }
      gq_stage_math(cur, cur + GQ_ASZ, wm, wn, lane, acc, acc_up);
      if (more) {
        gq_put_a(nxt, va);
        gq_store_b(nxt + GQ_ASZ, n0, N, K, kt + 1, raw);
      }
      gc_barrier();
    }
  }
#undef GQ_STAGE

  GC_UNROLL(GQ_MT)
  for (int i = 0; i < GQ_MT; i++)
    GC_UNROLL(GQ_NT)
    for (int j = 0; j < GQ_NT; j++) {
      const int64_t n = n0 + wn * WN + j * 16 + GC_WMMA_D_COL(lane);
      GC_UNROLL(GQ_NACC)
      for (int r = 0; r < GQ_NACC; r++) {
        const int64_t m = m0 + wm * WM + i * 16 + GC_WMMA_D_ROW(lane, r);
        if (m < M && n < N)
          STORE_GEMM(C, m * N + n, GQ_OUT(i, j, r)); /* gemm_add: C += A·Bᵀ */
      }
    }
}
