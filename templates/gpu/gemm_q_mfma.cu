/* gemm_q_mfma.cu — AMD matrix-core GEMM with B in a block format (MFMA,
 * CDNA: gfx90a, gfx942; the prefill path): C[M,N] = A[M,K] · B[N,K]ᵀ, A and
 * C f16 or bf16, B's rows blocks of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K
 * (base/quant.h), dequantized into LDS, fp32 accumulation (gemm_add:
 * C += A·Bᵀ; gemm_swiglu: C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), W[2N,K] = gate rows
 * 0..N-1, up rows N..2N-1). The AMD counterpart of gemm_q_mma.cu (same ops,
 * arguments and applicability).
 *
 * @template gemm_q_mfma
 * @op gemm gemm_add gemm_swiglu
 * @backend hip
 * @dtypes f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16
 * @kernel gemm_q_mfma
 * @param MI 32 16 default 32 -- MFMA family: 32x32 (v_mfma_f32_32x32x8{f16,bf16_1k}) or 16x16 (16x16x16)
 * @param BM 32 64 128 256 default 128 -- block tile rows
 * @param BN 32 64 128 256 default 64 -- block tile columns of C (rows of B; gemm_swiglu: as many gate and as many up rows of W)
 * @param BK 32 64 128 default 32 -- K depth of an LDS stage: whole units of 32
 * @param WM 16 32 64 128 default 64 -- wave tile rows (multiple of MI)
 * @param WN 16 32 64 128 default 32 -- wave tile columns (multiple of MI; gemm_swiglu: gate and up each)
 * @param STAGES 1 2 default 2 -- LDS stages: 2 double-buffers (next tile's A chunks and B words in flight during this tile's math)
 * @param RASTER 1 4 8 default 8 -- block rows walked together (L2 reuse of B)
 * @defaults gemm_swiglu BM=64 WM=32 -- the gate/up pair holds twice the B rows and accumulators
 * @constraint PAIR == 1 || (BN <= 128 && WN <= 64) -- the gate/up pair's tiles (twice the B rows)
 * @constraint BM % WM == 0 && BN % WN == 0 && WM % MI == 0 && WN % MI == 0 -- whole wave tiles of whole MFMA blocks
 * @constraint (BM / WM) * (BN / WN) <= 4 -- at most 4 waves (one a SIMD: a wave may hold all 512 VGPRs and AGPRs; 8 waves leave 256, 16 leave 128)
 * @constraint PAIR * WM * WN / 64 <= 32 -- fp32 accumulators (gate and up) per lane: the fresh ones of a unit, its Σa and the operands hoisted around them come on top (measured: 64 spill for the K-quants)
 * @constraint WM / 4 + MI / 4 + 3 * WM * MI / 64 + 4 * cdiv(BM * BK / 8, (BM / WM) * (BN / WN) * 64) + 8 * cdiv(PAIR * BN * BK / 8, (BM / WM) * (BN / WN) * 64) + 64 <= 256 -- a unit's A operands, B operands, the unit's fresh accumulators (two halves) and Σa, staged A chunks, B's raw words and addresses fit the 256 arch VGPRs
 * @constraint PAIR * BN * BK / 8 <= 4 * (BM / WM) * (BN / WN) * 64 && BM * BK / 8 <= 4 * (BM / WM) * (BN / WN) * 64 -- at most 4 dequantization tasks and 4 A chunks a thread (16 a thread spill SGPRs: their addresses)
 * @constraint STAGES * (2 * (BK + 4) * (BM + PAIR * BN) + PAIR * BN * (BK / 4 + BK / 8)) <= SMEM -- the stages fit in LDS
 * @constraint MFMA && WARP == 64 -- MFMA targets (CDNA: gfx90a, gfx942), wave64
 * @shmem STAGES * (2 * (BK + 4) * (BM + PAIR * BN) + PAIR * BN * (BK / 4 + BK / 8))
 * @applies M > 1 -- M = 1 is the GEMVs'
 * @grid cdiv(M, BM) * cdiv(N, BN) 1 1
 * @block (BM / WM) * (BN / WN) * 64 1 1
 * @priority 2
 *
 * gemm_mfma's structure (block tiles walked in groups of RASTER block
 * rows; wave w owns the WM×WN sub-tile at (w / (BN/WN), w % (BN/WN)) as
 * (WM/MI)×(WN/MI) MFMA blocks; A's tiles moved global → registers → LDS in
 * 16-byte chunks, K-contiguous rows padded by 8 bytes; one or two LDS
 * stages) with B's tile dequantized by the block's threads into the same
 * layout. Operand and accumulator layouts are the prelude's GC_MFMA_*
 * macros (checked on the host by tests/test_amd_emulator.py).
 *
 * Exact dequantization on matrix cores (as gemm_q_mma): B's elements are
 * y = fl(d·q) − mn (the prelude's gc-quant block: units of 32 elements,
 * scale d0 for the first 16, d1 for the last, a min mn for Q4_K/Q5_K).
 * The LDS tile holds the integer levels q in A's dtype (exact: |q| <= 128
 * in f16 and bf16) and beside it each row's d0/d1 and mn per unit in fp32.
 * The MFMAs of one unit (of one half for Q6_K, whose halves have their own
 * scale) go into a fresh accumulator that is then scaled into the block's:
 * acc += d·(A·q); for the formats with a min acc −= mn·Σa, Σa from MFMAs
 * of A's operands with ones. An accumulator register of lane l holds
 * column GC_MFMA_D_COL(MI, l) of C whatever the register, so d and mn are
 * one value per lane and unit. The products a·q are exact and summed in
 * fp32: the result is A·Bᵀ with B's exact values up to fp32 rounding (no
 * rounding of d·q to 16 bits ever).
 *
 * Dequantization: part t of unit u of a row (8 elements: 4t..4t+3 and
 * 16+4t..16+4t+3, the prelude's parts) is one task; consecutive threads
 * take consecutive parts of a row. A thread issues the loads of its tasks
 * of the next tile (GCQ_LOAD: raw words into registers) with A's chunk
 * loads, before this tile's math, and decodes them (GCQ_DECODE) into the
 * other stage after it. Rows past M and N and units past K are zeros (d
 * and mn 0 too); C is written once (set, or added for gemm_add).
 *
 * gemm_swiglu (PAIR = 2): each stage holds 2·BN rows of B, gate rows
 * n0 .. n0+BN-1 then up rows N+n0 .. N+n0+BN-1; each wave reads its A
 * operands (and Σa) once per unit and multiplies them into a gate and an
 * up accumulator set; the epilogue writes silu(g)·u computed in fp32 and
 * rounded once.
 */

#define GQ_T ((BM / WM) * (BN / WN) * 64) /* threads */
#define GQ_KI GC_MFMA_K(MI, 4)             /* k per MFMA (16-bit: 4 a lane) */
#define GQ_SPU (32 / GQ_KI)                /* MFMAs per unit of 32 */
#define GQ_LDK (BK + 4)                    /* elements per padded LDS row */
#define GQ_BR (PAIR * BN)                  /* rows of B in a stage */
#define GQ_ASZ (BM * GQ_LDK)               /* elements of an A stage */
#define GQ_BSZ (GQ_BR * GQ_LDK)            /* elements of B's levels */
#define GQ_SSZ (2 * GQ_LDK * (BM + GQ_BR) + GQ_BR * (BK / 4 + BK / 8)) /* bytes of a stage */
#define GQ_MT (WM / MI)                    /* MFMA blocks down a wave tile */
#define GQ_NT (WN / MI)                    /* ... and across */
#define GQ_NACC GC_MFMA_NACC(MI)
#define GQ_TASKS (GQ_BR * BK / 8)          /* parts of 8 elements in a B tile */
#define GQ_TPT ((GQ_TASKS + GQ_T - 1) / GQ_T)

#if !GC_MFMA
#error "gemm_q_mfma needs an MFMA target (gfx90a, gfx940, gfx941, gfx942)"
#endif
#if SA != 2
#error "gemm_q_mfma takes 16-bit activations (f16, bf16)"
#endif

typedef typename gc_mfma<GC_TA, MI>::acc_t gq_acc_t;
typedef gc_short4_t gq_op_t;

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

/* The chunk registers into the A tile at s, as two 8-byte halves (the
 * padding leaves odd rows 8-byte aligned). */
GC_DEVICE void gq_put_a(TA *s, const gc_raw16 *v) {
  GC_UNROLL(GQ_APER)
  for (int i = 0; i < GQ_APER; i++) {
    const int id = gc_tid() + i * GQ_T;
    if (GQ_ACH % GQ_T == 0 || id < GQ_ACH) {
      const int r = id / (BK / 8), c = id % (BK / 8);
      gc_raw8 *d = reinterpret_cast<gc_raw8 *>(s + r * GQ_LDK + c * 8);
      d[0] = gc_raw8{{v[i].w[0], v[i].w[1]}};
      d[1] = gc_raw8{{v[i].w[2], v[i].w[3]}};
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

/* A lane's operand for the MFMA block at tile row row0, k step ks: row
 * row0 + GC_MFMA_AB_ROW, 4 elements from k = ks·GQ_KI + GC_MFMA_AB_K. */
GC_DEVICE gq_op_t gq_frag(const TA *s, int row0, int ks, int lane) {
  const int r = row0 + GC_MFMA_AB_ROW(MI, lane), k = ks * GQ_KI + GC_MFMA_AB_K(MI, 4, lane, 0);
  return *reinterpret_cast<const gq_op_t *>(s + r * GQ_LDK + k);
}

/* acc[i][j] += unit uu of the B rows r0 .. r0+MI-1 of the stage (block
 * column j of this wave) against A's operands a: per block, the unit's
 * MFMAs into a fresh accumulator (per half for Q6_K), scaled by the
 * lane's column's d; minus mn·Σa (sum) for the formats with a min. */
GC_DEVICE void gq_unit(gq_acc_t acc[GQ_MT][GQ_NT], int j, const gq_op_t a[GQ_MT][GQ_SPU],
                       const gq_acc_t sum[GQ_MT], const TA *sb, int r0, int uu, int lane) {
  const float *sd = reinterpret_cast<const float *>(sb + GQ_BSZ), *sm = sd + GQ_BR * (BK / 16);
  const int n = r0 + GC_MFMA_D_COL(MI, lane); /* the lane's column of C (row of the B tile) */
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
      c = gc_mfma<GC_TA, MI>::run(a[i][s], b[s], c);
    if (GC_QSPLIT) {
      acc[i][j] += d0 * c;
      c = gq_acc_t{};
    }
    GC_UNROLL(GQ_SPU / 2)
    for (int s = GQ_SPU / 2; s < GQ_SPU; s++)
      c = gc_mfma<GC_TA, MI>::run(a[i][s], b[s], c);
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
        a[i][s] = gq_frag(sa, wm * WM + i * MI, uu * GQ_SPU + s, lane);
    gq_acc_t sum[GQ_MT]; /* Σa of the unit, in the accumulators' layout (GC_QMIN) */
    GC_UNROLL(GQ_MT)
    for (int i = 0; i < GQ_MT; i++) {
      sum[i] = gq_acc_t{};
      if (GC_QMIN) {
        const short one = GC_TA == GC_BF16 ? (short)0x3F80 : (short)0x3C00;
        const gq_op_t ones = {one, one, one, one};
        GC_UNROLL(GQ_SPU)
        for (int s = 0; s < GQ_SPU; s++)
          sum[i] = gc_mfma<GC_TA, MI>::run(a[i][s], ones, sum[i]);
      }
    }
    GC_UNROLL(GQ_NT)
    for (int j = 0; j < GQ_NT; j++)
      gq_unit(acc, j, a, sum, sb, wn * WN + j * MI, uu, lane);
    if (PAIR == 2) {
      GC_UNROLL(GQ_NT)
      for (int j = 0; j < GQ_NT; j++)
        gq_unit(acc_up, j, a, sum, sb, BN + wn * WN + j * MI, uu, lane);
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
void gemm_q_mfma(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  unsigned char *smem = gc_dyn_shared();
  const int64_t nbm = gc_cdiv(M, BM), nbn = gc_cdiv(N, BN);
  if (nbm <= 0 || nbn <= 0 || K % GC_QK)
    return; /* nothing to do, or outside the problem check */
  /* grouped raster: RASTER block rows at a time, column by column */
  const int64_t bid = gc_bid(), gsz = (int64_t)RASTER * nbn, first = bid / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  const int64_t m0 = (first + bid % gsz % rows) * BM, n0 = bid % gsz / rows * BN;

  const int lane = gc_lane(), w = gc_tid() / 64;
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
      const int64_t n = n0 + wn * WN + j * MI + GC_MFMA_D_COL(MI, lane);
      GC_UNROLL(GQ_NACC)
      for (int r = 0; r < GQ_NACC; r++) {
        const int64_t m = m0 + wm * WM + i * MI + GC_MFMA_D_ROW(MI, lane, r);
        if (m < M && n < N)
          STORE_GEMM(C, m * N + n, GQ_OUT(i, j, r)); /* gemm_add: C += A·Bᵀ */
      }
    }
}
