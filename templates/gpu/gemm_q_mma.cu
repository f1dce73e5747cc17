/* gemm_q_mma.cu — NVIDIA tensor-core GEMM with B in a block format (mma.sync,
 * sm_80+; the prefill path): C[M,N] = A[M,K] · B[N,K]ᵀ, A and C f16, B's
 * rows blocks of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K (base/quant.h), dequantized
 * into shared memory, fp32 accumulation.
 *
 * @template gemm_q_mma
 * @op gemm gemm_add gemm_swiglu
 * @backend cuda
 * @dtypes f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 f16:q8_0r:f16 f16:q4_0r:f16 f16:q4_kr:f16 f16:q6_kr:f16
 * @kernel gemm_q_mma
 * @param BM 32 64 128 256 default 128 -- block tile rows
 * @param BN 32 64 128 256 default 128 -- rows of B per block (the SwiGLU pair: BN/2 gate and BN/2 up rows, BN/2 columns of C)
 * @param BK 32 64 128 default 32 -- K depth of a stage: whole units of 32
 * @param WM 16 32 64 128 default 64 -- warp tile rows (multiple of the mma's 16)
 * @param WN 16 32 64 128 default 32 -- warp tile columns (pairs of the mma's 8)
 * @param STAGES 2 3 4 default 3 -- A's cp.async pipeline depth (B: two buffers of dequantized tiles)
 * @param RASTER 1 4 8 default 8 -- block rows walked together (L2 reuse of B)
 * @constraint BM % WM == 0 && BN % WN == 0 -- whole warp tiles
 * @constraint (BM / WM) * (BN / WN) * 32 >= 64 && (BM / WM) * (BN / WN) * 32 <= min(512, MAXT) -- 2 to 16 warps
 * @constraint WM * WN / 32 <= 128 -- fp32 accumulators per thread
 * @constraint WM * WN / 32 + 12 * WM / 16 + 8 * BN * BK / (8 * (BM / WM) * (BN / WN) * 32) + 64 <= min(255, 65536 / ((BM / WM) * (BN / WN) * 32)) -- accumulators, A's fragments of a unit and its Σa, the next tile's raw words, B's fragments, scales and addresses fit the register budget
 * @constraint BN * BK / 8 >= (BM / WM) * (BN / WN) * 32 -- every thread dequantizes a part of the B tile
 * @constraint STAGES * BM * BK * 2 + 2 * BN * (BK * 2 + BK / 16 * 4 + BK / 32 * 4) <= SMEM -- A's pipeline, two B tiles and their scales fit in shared memory
 * @constraint WARP == 32 -- NVIDIA warps
 * @shmem STAGES * BM * BK * 2 + 2 * BN * (BK * 2 + BK / 16 * 4 + BK / 32 * 4)
 * @applies M > 1 -- M = 1 is the GEMVs'
 * @grid cdiv(M, BM) * cdiv(2 * N, BN) 1 1
 * @block (BM / WM) * (BN / WN) * 32 1 1
 * @priority 2
 *
 * gemm_mma's structure (block tiles walked in groups of RASTER block rows;
 * warp tiles of (WM/16)×(WN/8) m16n8k16 mmas; A's tiles [BM][BK] through a
 * STAGES-deep cp.async pipeline into XOR-swizzled shared rows read with
 * ldmatrix) with B dequantized by the block's threads into the same layout.
 *
 * Exact dequantization on tensor cores. B's elements are y = fl(d·q) − mn
 * (the prelude's gc-quant block: units of 32 elements with scales d0 for
 * the first 16, d1 for the last, and a min mn for Q4_K/Q5_K). The tile in
 * shared memory holds the integer levels q (f16: exact, |q| < 2048) and
 * the scales beside it in fp32; the mmas of one unit go into a fresh
 * accumulator, which is then scaled: acc += d·(A·q), and for the formats
 * with a min acc −= mn·Σa, Σa from an mma of A's fragment with ones. The
 * products a·q are exact and summed in fp32, so the result is A·Bᵀ with
 * B's exact values up to fp32 rounding: what the fp64 reference computed
 * from base/quant.h's values allows (no rounding of d·q to f16 ever).
 *
 * Dequantization: part t of unit u of a row (8 elements, the prelude's
 * parts) is one task; consecutive threads take consecutive parts of a row,
 * so a row's bytes are read together. A thread issues the loads of its
 * tasks for tile kt+2 (GCQ_LOAD: raw words into registers) right after
 * the mmas of tile kt, and decodes them (GCQ_DECODE, byte permutes into
 * f16 levels) into the B buffer of tile kt+1 after the mmas of tile kt+1:
 * the loads have a whole tile's math to land. One barrier per tile.
 *
 * The SwiGLU pair: the block's B rows are BN/2 gate rows and the BN/2 up
 * rows of the same columns, interleaved by mma tiles of 8 (tile 2p: gate
 * columns 8p..8p+7 of the block, tile 2p+1: their up rows), so the thread
 * that holds gate(m, n) also holds up(m, n) and writes silu(gate)·up. The
 * grid is sized for it (cdiv(2N, BN) column blocks); for gemm and gemm_add
 * the blocks past cdiv(N, BN) return at once. Rows past M and N and
 * units past K are zeros; C is written once (set, or added for gemm_add).
 */

#ifndef PAIR
#define PAIR (GC_OP_GEMM_SWIGLU ? 2 : 1)
#endif
#define GQ_WARPS ((BM / WM) * (BN / WN))
#define GQ_T (GQ_WARPS * 32)
#define GQ_RC (BK / 8)                   /* 16-byte chunks per tile row */
#define GQ_ASZ (BM * BK * 2)             /* bytes of an A stage */
#define GQ_BSZ (BN * BK * 2)             /* bytes of a B tile of levels */
#define GQ_DSZ (BN * (BK / 16) * 4)      /* bytes of its d0/d1 */
#define GQ_MSZ (BN * (BK / 32) * 4)      /* bytes of its mins */
#define GQ_BBUF (GQ_BSZ + GQ_DSZ + GQ_MSZ)
#define GQ_MT (WM / 16)
#define GQ_NT (WN / 8)
#define GQ_TASKS (BN * BK / 8)           /* parts of 8 elements in a B tile */
#define GQ_TPT ((GQ_TASKS + GQ_T - 1) / GQ_T) /* tasks per thread */

/* Byte offset of 16-byte chunk c of row r in a tile (gemm_mma's swizzle). */
GC_DEVICE unsigned gq_off(int r, int c) {
  if (GQ_RC >= 8)
    c ^= r & 7;
  else
    c ^= (r / (8 / GQ_RC)) % GQ_RC;
  return (unsigned)(r * BK * 2 + c * 16);
}

GC_DEVICE void gq_ldsm4(unsigned addr, uint32_t r[4]) { gc_ldmatrix_x4(r, addr); }
GC_DEVICE void gq_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  gc_mma16816<0>(c, a[0], a[1], a[2], a[3], b0, b1);
}

/* A's rows r0.. of the tile at shared address s, columns k0 .. k0+BK-1
 * (16-byte chunks; rows past nr and chunks past K zero-filled). */
GC_DEVICE void gq_load_a(unsigned s, const TA *A, int64_t r0, int64_t nr, int64_t k0, int64_t K) {
  const int NCH = BM * GQ_RC;
  GC_UNROLL((NCH + GQ_T - 1) / GQ_T)
  for (int i = 0; i < (NCH + GQ_T - 1) / GQ_T; i++) {
    const int id = gc_tid() + i * GQ_T;
    if (NCH % GQ_T == 0 || id < NCH) {
      const int r = id / GQ_RC, c = id % GQ_RC;
      const int64_t k = k0 + c * 8;
      const bool ok = r0 + r < nr && k < K;
      gc_cp_async16(s + gq_off(r, c), ok ? A + (r0 + r) * K + k : A, ok ? 16 : 0);
    }
  }
}

/* The row of B behind row rr of the block's tile (-1: past N). */
GC_DEVICE int64_t gq_brow(int rr, int64_t bn, int64_t N) {
  if (PAIR == 1) {
    const int64_t n = bn * BN + rr;
    return n < N ? n : -1;
  }
  const int jt = rr / 8, p = jt / 2, half = jt % 2;
  const int64_t n = bn * (BN / 2) + p * 8 + rr % 8;
  return n < N ? half * N + n : -1;
}

/* Loads (raw words) of this thread's tasks of tile kt. */
GC_DEVICE void gq_load_b(const uint8_t *B, int64_t bn, int64_t N, int64_t K, int64_t kt,
                         uint32_t raw[GQ_TPT][GCQ_RAW]) {
  const int64_t rb = K / GC_QK * GC_QBYTES, nu = K / 32;
  GC_UNROLL(GQ_TPT)
  for (int i = 0; i < GQ_TPT; i++) {
    const int id = gc_tid() + i * GQ_T;
    const int rr = id / (BK / 8), p = id % (BK / 8);
    const int64_t row = gq_brow(rr, bn, N), ug = kt * (BK / 32) + p / 4;
    if ((GQ_TASKS % GQ_T == 0 || id < GQ_TASKS) && row >= 0 && ug < nu)
      GCQ_LOAD(B + row * rb + ug / GC_QUNITS * GC_QBYTES, GCQ_UNIT_IN_BLOCK(ug), p % 4, raw[i]);
  }
}

/* Four biased level bytes of w into two f16x2 of the levels, exactly
 * (0x6400 | byte is the half 1024 + byte). */
GC_DEVICE void gq_levels(uint32_t w, uint32_t &h01, uint32_t &h23) {
  const __half2 bias = __float2half2_rn(1024.0f + (float)GC_QBIAS);
  uint32_t x = __byte_perm(w, 0x64u, 0x4140u), y = __byte_perm(w, 0x64u, 0x4342u);
  __half2 a = __hsub2(*reinterpret_cast<__half2 *>(&x), bias);
  __half2 b = __hsub2(*reinterpret_cast<__half2 *>(&y), bias);
  h01 = *reinterpret_cast<uint32_t *>(&a);
  h23 = *reinterpret_cast<uint32_t *>(&b);
}

/* Decode this thread's tasks of tile kt into the B buffer at sb (levels;
 * d0/d1 and mins after them). */
GC_DEVICE void gq_store_b(unsigned char *sb, int64_t bn, int64_t N, int64_t K, int64_t kt,
                          const uint32_t raw[GQ_TPT][GCQ_RAW]) {
  float *sd = (float *)(sb + GQ_BSZ), *sm = (float *)(sb + GQ_BSZ + GQ_DSZ);
  const int64_t nu = K / 32;
  GC_UNROLL(GQ_TPT)
  for (int i = 0; i < GQ_TPT; i++) {
    const int id = gc_tid() + i * GQ_T;
    if (GQ_TASKS % GQ_T != 0 && id >= GQ_TASKS)
      break;
    const int rr = id / (BK / 8), p = id % (BK / 8), uu = p / 4, t = p % 4;
    const int64_t row = gq_brow(rr, bn, N), ug = kt * (BK / 32) + uu;
    uint2 v0 = make_uint2(0u, 0u), v1 = make_uint2(0u, 0u);
    float d0 = 0.0f, d1 = 0.0f, mn = 0.0f;
    if (row >= 0 && ug < nu) {
      uint32_t lo, hi;
      GCQ_DECODE(raw[i], GCQ_UNIT_IN_BLOCK(ug), t, lo, hi, d0, d1, mn);
      gq_levels(lo, v0.x, v0.y);
      gq_levels(hi, v1.x, v1.y);
    }
    *(uint2 *)(sb + gq_off(rr, 4 * uu + (t >> 1)) + 8 * (t & 1)) = v0;
    *(uint2 *)(sb + gq_off(rr, 4 * uu + 2 + (t >> 1)) + 8 * (t & 1)) = v1;
    if (t == 0) {
      sd[rr * (BK / 16) + 2 * uu] = d0;
      sd[rr * (BK / 16) + 2 * uu + 1] = d1;
      if (GC_QMIN)
        sm[rr * (BK / 32) + uu] = mn;
    }
  }
}

/* acc[i][j] += the scaled unit: d·(its mmas) (d per half for Q6_K), minus
 * mn·Σa for the formats with a min. e0, e1: d0/d1 of the lane's columns
 * n, n+1; m0, m1 their mins. */
GC_DEVICE void gq_unit_mma(float o[4], const uint32_t a[2][4], const uint32_t b0[2], const uint32_t b1[2],
                           float2 e0, float2 e1, float m0, float m1, const float sa[4]) {
  float c0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  gq_mma(c0, a[0], b0[0], b0[1]);
  gq_mma(GC_QSPLIT ? c1 : c0, a[1], b1[0], b1[1]);
  o[0] = gc_fma(e0.x, c0[0], o[0]);
  o[1] = gc_fma(e1.x, c0[1], o[1]);
  o[2] = gc_fma(e0.x, c0[2], o[2]);
  o[3] = gc_fma(e1.x, c0[3], o[3]);
  if (GC_QSPLIT) {
    o[0] = gc_fma(e0.y, c1[0], o[0]);
    o[1] = gc_fma(e1.y, c1[1], o[1]);
    o[2] = gc_fma(e0.y, c1[2], o[2]);
    o[3] = gc_fma(e1.y, c1[3], o[3]);
  }
  if (GC_QMIN) {
    o[0] = gc_fma(-m0, sa[0], o[0]);
    o[1] = gc_fma(-m1, sa[1], o[1]);
    o[2] = gc_fma(-m0, sa[2], o[2]);
    o[3] = gc_fma(-m1, sa[3], o[3]);
  }
}

/* acc += the tile's A·Bᵀ for this warp, unit by unit: A's fragments of
 * the unit's two k16 steps, Σa (formats with a min), then the n8 tiles in
 * pairs (one ldmatrix.x4 per k16 step gives two), each scaled. */
GC_DEVICE void gq_tile_math(unsigned sa, unsigned sbl, const unsigned char *sb, int wm, int wn,
                            int lane, float acc[GQ_MT][GQ_NT][4]) {
  const float *sd = (const float *)(sb + GQ_BSZ), *sm = (const float *)(sb + GQ_BSZ + GQ_DSZ);
  const int t = lane & 3;
  GC_UNROLL(1) /* a unit's fragments at a time (unrolled, the next unit's loads stay live: spills) */
  for (int uu = 0; uu < BK / 32; uu++) {
    uint32_t a[GQ_MT][2][4];
    GC_UNROLL(GQ_MT)
    for (int i = 0; i < GQ_MT; i++)
      GC_UNROLL(2)
      for (int h = 0; h < 2; h++)
        gq_ldsm4(sa + gq_off(wm * WM + i * 16 + (lane & 15), (2 * uu + h) * 2 + (lane >> 4)), a[i][h]);
    float sum[GQ_MT][4]; /* Σa of the unit, rows g and g+8 (GC_QMIN) */
    GC_UNROLL(GQ_MT)
    for (int i = 0; i < GQ_MT; i++) {
      sum[i][0] = sum[i][1] = sum[i][2] = sum[i][3] = 0.0f;
      if (GC_QMIN) {
        const uint32_t one = 0x3C003C00u; /* f16x2 (1, 1) */
        gq_mma(sum[i], a[i][0], one, one);
        gq_mma(sum[i], a[i][1], one, one);
      }
    }
    GC_UNROLL(GQ_NT / 2)
    for (int jj = 0; jj < GQ_NT / 2; jj++) {
      uint32_t b[2][2][2]; /* [tile j, j+1][k16 step][register] */
      GC_UNROLL(2)
      for (int h = 0; h < 2; h++) {
        uint32_t r[4];
        gq_ldsm4(sbl + gq_off(wn * WN + jj * 16 + (lane & 7) + ((lane >> 4) << 3),
                              (2 * uu + h) * 2 + ((lane >> 3) & 1)),
                 r);
        b[0][h][0] = r[0], b[0][h][1] = r[1];
        b[1][h][0] = r[2], b[1][h][1] = r[3];
      }
      GC_UNROLL(2)
      for (int q = 0; q < 2; q++) {
        const int j = 2 * jj + q, n = wn * WN + j * 8 + 2 * t; /* the lane's columns n, n+1 */
        const float2 e0 = *(const float2 *)(sd + n * (BK / 16) + 2 * uu);
        const float2 e1 = *(const float2 *)(sd + (n + 1) * (BK / 16) + 2 * uu);
        const float m0 = GC_QMIN ? sm[n * (BK / 32) + uu] : 0.0f;
        const float m1 = GC_QMIN ? sm[(n + 1) * (BK / 32) + uu] : 0.0f;
        GC_UNROLL(GQ_MT)
        for (int i = 0; i < GQ_MT; i++)
          gq_unit_mma(acc[i][j], a[i], b[q][0], b[q][1], e0, e1, m0, m1, sum[i]);
      }
    }
  }
}

GC_DEVICE void gq_store(TC *C, int64_t M, int64_t N, int64_t m, int64_t n, float v) {
  if (m < M && n < N)
    STORE_GEMM(C, m * N + n, v);
}

GC_KERNEL_BOUNDS(GQ_T)
void gemm_q_mma(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  unsigned char *smem = gc_dyn_shared();
  const int64_t nbm = gc_cdiv(M, BM), nbn = gc_cdiv(PAIR * N, BN);
  if (nbm <= 0 || nbn <= 0 || K % GC_QK || gc_bid() >= nbm * nbn)
    return; /* nothing to do, outside the problem check, or a block gemm and gemm_add do not use */
  const int64_t bid = gc_bid(), gsz = (int64_t)RASTER * nbn, first = bid / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  const int64_t bm = first + bid % gsz % rows, bn = bid % gsz / rows, m0 = bm * BM;

  const int lane = gc_lane(), w = gc_tid() / 32;
  const int wm = w / (BN / WN), wn = w % (BN / WN);
  const unsigned s0 = gc_smem_addr(smem);
  unsigned char *sb0 = smem + STAGES * GQ_ASZ; /* two B buffers */
  const uint8_t *Bq = (const uint8_t *)B;

  float acc[GQ_MT][GQ_NT][4];
  GC_UNROLL(GQ_MT)
  for (int i = 0; i < GQ_MT; i++)
    GC_UNROLL(GQ_NT)
    for (int j = 0; j < GQ_NT; j++)
      GC_UNROLL(4)
      for (int e = 0; e < 4; e++)
        acc[i][j][e] = 0.0f;

  const int64_t kt_n = gc_cdiv(K, BK);
  GC_UNROLL(STAGES - 1)
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < kt_n)
      gq_load_a(s0 + s * GQ_ASZ, A, m0, M, (int64_t)s * BK, K);
    gc_cp_async_commit();
  }
  uint32_t raw[GQ_TPT][GCQ_RAW];
  gq_load_b(Bq, bn, N, K, 0, raw);
  gq_store_b(sb0, bn, N, K, 0, raw);
  if (kt_n > 1)
    gq_load_b(Bq, bn, N, K, 1, raw);
  for (int64_t kt = 0; kt < kt_n; kt++) {
    gc_cp_async_wait<STAGES - 2>(); /* A's tile kt has landed (for this thread) */
    gc_barrier();          /* ... for all; B's tile kt is stored; tile kt-1 is consumed */
    const int64_t nx = kt + STAGES - 1;
    if (nx < kt_n)
      gq_load_a(s0 + (unsigned)(nx % STAGES) * GQ_ASZ, A, m0, M, nx * BK, K);
    gc_cp_async_commit();
    unsigned char *sb = sb0 + (kt % 2) * GQ_BBUF;
    gq_tile_math(s0 + (unsigned)(kt % STAGES) * GQ_ASZ, gc_smem_addr(sb), sb, wm, wn, lane, acc);
    if (kt + 1 < kt_n) {
      gq_store_b(sb0 + ((kt + 1) % 2) * GQ_BBUF, bn, N, K, kt + 1, raw);
      if (kt + 2 < kt_n)
        gq_load_b(Bq, bn, N, K, kt + 2, raw);
    }
  }
  gc_cp_async_wait<0>();

  const int g = lane >> 2, t = lane & 3;
  GC_UNROLL(GQ_MT)
  for (int i = 0; i < GQ_MT; i++)
    GC_UNROLL(GQ_NT)
    for (int j = 0; j < GQ_NT; j++) {
      const int64_t m = m0 + wm * WM + i * 16 + g;
      if (PAIR == 1) {
        const int64_t n = bn * BN + wn * WN + j * 8 + 2 * t;
        gq_store(C, M, N, m, n, acc[i][j][0]);
        gq_store(C, M, N, m, n + 1, acc[i][j][1]);
        gq_store(C, M, N, m + 8, n, acc[i][j][2]);
        gq_store(C, M, N, m + 8, n + 1, acc[i][j][3]);
      } else if (j % 2 == 0) { /* gate tile j, up tile j+1: the same columns */
        const int64_t n = bn * (BN / 2) + (wn * WN / 8 + j) / 2 * 8 + 2 * t;
        gq_store(C, M, N, m, n, gc_silu_mul(acc[i][j][0], acc[i][j + 1][0]));
        gq_store(C, M, N, m, n + 1, gc_silu_mul(acc[i][j][1], acc[i][j + 1][1]));
        gq_store(C, M, N, m + 8, n, gc_silu_mul(acc[i][j][2], acc[i][j + 1][2]));
        gq_store(C, M, N, m + 8, n + 1, gc_silu_mul(acc[i][j][3], acc[i][j + 1][3]));
      }
    }
}
