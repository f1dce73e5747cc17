/* gemm_mma.cu — NVIDIA tensor-core GEMM (mma.sync, sm_80+), f16 or bf16
 * in and out, fp32 accumulation: C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add:
 * C += A·Bᵀ), or the gate/up pair with the SwiGLU epilogue,
 * C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ) with W[2N,K] = gate rows 0..N-1, up rows
 * N..2N-1 (gemm_swiglu).
 *
 * @template gemm_mma
 * @op gemm gemm_add gemm_swiglu
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel gemm_mma
 * @param BM 32 64 128 256 default 128 -- block tile rows
 * @param BN 32 64 128 256 default 128 -- block tile columns of C (rows of B; gemm_swiglu: as many gate and as many up rows of W)
 * @param BK 16 32 64 default 32 -- K depth of a pipeline stage
 * @param WM 16 32 64 128 default 64 -- warp tile rows (multiple of the mma's 16)
 * @param WN 16 32 64 128 default 32 -- warp tile columns (pairs of the mma's 8; gemm_swiglu: gate and up each)
 * @param STAGES 2 3 4 5 default 4 -- cp.async pipeline depth (shared-memory stages)
 * @param SWZ 0 1 default 1 -- shared layout: 0 pads rows by 16 bytes, 1 XOR-swizzles 16-byte chunks
 * @param RASTER 1 4 8 default 8 -- block rows walked together (L2 reuse of B columns)
 * @defaults gemm_swiglu BN=64 WM=32 -- the gate/up pair holds twice the B rows and accumulators
 * @constraint PAIR == 1 || (BN <= 128 && WN <= 64) -- the gate/up pair's tiles (twice the B rows) stay in the space it was tuned in
 * @constraint BM % WM == 0 && BN % WN == 0 -- whole warp tiles
 * @constraint (BM / WM) * (BN / WN) * 32 >= 64 && (BM / WM) * (BN / WN) * 32 <= min(512, MAXT) -- 2 to 16 warps
 * @constraint PAIR * WM * WN / 32 <= 128 -- fp32 accumulators (gate and up) per thread
 * @constraint PAIR * WM * WN / 32 + 4 * PAIR * WM / 16 + 2 * PAIR * PAIR * WN / 8 + 64 <= min(255, 65536 / ((BM / WM) * (BN / WN) * 32)) -- accumulators and fragments fit the register budget
 * @constraint STAGES * (BM + PAIR * BN) * (BK + 8 * (1 - SWZ)) * 2 <= SMEM -- the pipeline fits in shared memory
 * @constraint WARP == 32 -- NVIDIA warps
 * @shmem STAGES * (BM + PAIR * BN) * (BK + 8 * (1 - SWZ)) * 2
 * @applies K % 8 == 0 && M > 1 -- rows of A and B are whole 16-byte chunks (cp.async); M = 1 is the GEMV's
 * @grid cdiv(M, BM) * cdiv(N, BN) 1 1
 * @block (BM / WM) * (BN / WN) * 32 1 1
 * @priority 3
 *
 * Block b computes the BM×BN tile of C at (bm, bn), b walked in groups of
 * RASTER block rows so that consecutive blocks share B tiles in L2. Warp
 * w owns the WM×WN sub-tile at (w / (BN/WN), w % (BN/WN)), made of
 * (WM/16)×(WN/8) m16n8k16 tiles with fp32 accumulators in registers.
 *
 * Pipeline: STAGES shared-memory stages of an A tile [BM][BK] and a B tile
 * [BN][BK] (B is [N,K] row-major, so both are K-contiguous, which is the
 * mma's row.col form and lets ldmatrix read both without transposes).
 * Global → shared copies are cp.async.cg of 16-byte chunks, src-size 0
 * zero-filling rows past M/N and chunks past K; tile kt+STAGES-1 is issued
 * while tile kt is multiplied; one barrier per tile.
 *
 * Shared layout: a row of BK halves is BK/8 chunks of 16 bytes. ldmatrix
 * reads one chunk column of 8 consecutive rows per 8x8 matrix; to keep
 * those 8 rows in 8 different bank groups either the rows are padded by
 * one chunk (SWZ = 0: stride BK/8+1 chunks, odd) or chunk c of row r is
 * stored at c ^ f(r) (SWZ = 1), f(r) = r mod 8 when a row spans a 128-byte
 * line, else (r / rows-per-line) mod (BK/8). cp.async writes stay
 * conflict-free either way (8 consecutive chunks of a phase land in
 * distinct groups).
 *
 * Per 16-wide k step a warp loads its A fragments with ldmatrix.x4 (one
 * 16x16 tile each), its B fragments with ldmatrix.x4 (two n8 tiles each)
 * and issues (WM/16)·(WN/8) mma.sync. The epilogue writes the fragments
 * directly (pairs of columns as one 32-bit store when N is even), guarded
 * against M and N. C is written once, never read (gemm_add: each element
 * is read once, by the thread that writes it).
 *
 * gemm_swiglu (PAIR = 2): each stage holds two B tiles, gate rows
 * n0 .. n0+BN-1 and up rows N+n0 .. N+n0+BN-1 of W; each warp loads its A
 * fragments once per k step and multiplies them into a gate and an up
 * accumulator set; the epilogue writes g / (1 + e^-g) · u computed in
 * fp32 and rounded once (e^-g overflowing to inf gives silu = -0).
 */

#define GM_WARPS ((BM / WM) * (BN / WN))
#define GM_T (GM_WARPS * 32)
#define GM_RC (BK / 8)                    /* 16-byte chunks per tile row */
#define GM_LDK (BK + 8 * (1 - SWZ))       /* halves per shared row */
#define GM_ASZ (BM * GM_LDK)              /* halves per A stage */
#define GM_BSZ (BN * GM_LDK)              /* halves per B (gate, up) stage */
#define GM_MT (WM / 16)                   /* mma tiles down a warp tile */
#define GM_NT (WN / 8)                    /* mma tiles across */

/* Byte offset of 16-byte chunk c of row r in a tile (see the header). */
GC_DEVICE unsigned gm_off(int r, int c) {
  if (SWZ) {
    if (GM_RC >= 8)
      c ^= r & 7;
    else
      c ^= (r / (8 / GM_RC)) % GM_RC;
  }
  return (unsigned)(r * GM_LDK * 2 + c * 16);
}

/* 16 bytes from global g to shared address s; n = 16 copies, n = 0
 * writes zeros (g is then not read). */

GC_DEVICE void gm_ldsm4(unsigned addr, uint32_t r[4]) { gc_ldmatrix_x4(r, addr); }

GC_DEVICE void gm_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  gc_mma16816<GC_TA == GC_BF16>(c, a[0], a[1], a[2], a[3], b0, b1);
}

/* Issue the copies of rows r0 .. r0+R-1 (of nr), columns k0 .. k0+BK-1
 * (of K) of X into the tile at shared address s. */
template <int R>
GC_DEVICE void gm_load_tile(unsigned s, const TA *X, int64_t r0, int64_t nr, int64_t k0,
                            int64_t K) {
  const int NCH = R * GM_RC;
  GC_UNROLL((NCH + GM_T - 1) / GM_T)
  for (int i = 0; i < (NCH + GM_T - 1) / GM_T; i++) {
    int id = gc_tid() + i * GM_T;
    if (NCH % GM_T == 0 || id < NCH) {
      int r = id / GM_RC, c = id % GM_RC;
      int64_t k = k0 + c * 8;
      bool ok = r0 + r < nr && k < K;
      const TA *g = ok ? X + (r0 + r) * K + k : X;
      gc_cp_async16(s + gm_off(r, c), g, ok ? 16 : 0);
    }
  }
}

/* B fragments of the warp's WN columns at k step kk of the tile at sb. */
GC_DEVICE void gm_bfrag(unsigned sb, int wn, int lane, int kk, uint32_t b[GM_NT][2]) {
  GC_UNROLL(GM_NT / 2)
  for (int j = 0; j < GM_NT / 2; j++) { /* matrices (n0-7,k0) (n0-7,k1) (n8-15,k0) (n8-15,k1) */
    uint32_t r[4];
    gm_ldsm4(sb + gm_off(wn * WN + j * 16 + (lane & 7) + ((lane >> 4) << 3),
                         kk * 2 + ((lane >> 3) & 1)),
             r);
    b[2 * j][0] = r[0], b[2 * j][1] = r[1];
    b[2 * j + 1][0] = r[2], b[2 * j + 1][1] = r[3];
  }
}

/* acc += the stage's A·Bᵀ for this warp's tile (gemm_swiglu: acc of the
 * gate tile at sb, acc_up of the up tile after it). */
GC_DEVICE void gm_stage_math(unsigned sa, unsigned sb, int wm, int wn, int lane,
                             float acc[GM_MT][GM_NT][4], float acc_up[GM_MT][GM_NT][4]) {
  GC_UNROLL(BK / 16)
  for (int kk = 0; kk < BK / 16; kk++) {
    uint32_t a[GM_MT][4], b[GM_NT][2];
    GC_UNROLL(GM_MT)
    for (int i = 0; i < GM_MT; i++) /* lanes 0-15: rows, k chunk 0; 16-31: chunk 1 */
      gm_ldsm4(sa + gm_off(wm * WM + i * 16 + (lane & 15), kk * 2 + (lane >> 4)), a[i]);
    gm_bfrag(sb, wn, lane, kk, b);
    GC_UNROLL(GM_MT)
    for (int i = 0; i < GM_MT; i++)
      GC_UNROLL(GM_NT)
      for (int j = 0; j < GM_NT; j++)
        gm_mma(acc[i][j], a[i], b[j][0], b[j][1]);
    if (PAIR == 2) {
      gm_bfrag(sb + GM_BSZ * 2, wn, lane, kk, b);
      GC_UNROLL(GM_MT)
      for (int i = 0; i < GM_MT; i++)
        GC_UNROLL(GM_NT)
        for (int j = 0; j < GM_NT; j++)
          gm_mma(acc_up[i][j], a[i], b[j][0], b[j][1]);
    }
  }
}

/* C[m][n], C[m][n+1] := x, y (each only inside the matrix). */
GC_DEVICE void gm_store2(TC *C, int64_t M, int64_t N, int64_t m, int64_t n, float x, float y) {
  if (m >= M || n >= N)
    return;
  TC *p = C + m * N + n;
  if (N % 2 == 0) { /* n is even: an aligned pair */
    float v[2] = {x, y};
    if (GC_OP_GEMM_ADD) { /* C += A·Bᵀ: each element read once, by the thread that writes it */
      float c0[2];
      gc_ldv<2>(p, c0);
      v[0] += c0[0], v[1] += c0[1];
    }
    gc_stv<2>(p, v);
  } else {
    STORE_GEMM(p, 0, x);
    if (n + 1 < N)
      STORE_GEMM(p, 1, y);
  }
}

/* ---- the epilogue: element e of fragment (i, j) from the accumulators
 * (another epilogue is one more #elif here) ---- */
#if PAIR == 2
#define GM_OUT(i, j, e) gc_silu_mul(acc[i][j][e], acc_up[i][j][e])
#else
#define GM_OUT(i, j, e) acc[i][j][e]
#endif

/* B: [N,K]; gemm_swiglu: W [2N,K], gate rows then up rows. */
GC_KERNEL_BOUNDS(GM_T)
void gemm_mma(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  unsigned char *smem = gc_dyn_shared();
  const int64_t nbm = gc_cdiv(M, BM), nbn = gc_cdiv(N, BN);
  if (nbm <= 0 || nbn <= 0)
    return;
  /* grouped raster: RASTER block rows at a time, column by column */
  const int64_t bid = gc_bid(), gsz = (int64_t)RASTER * nbn, first = bid / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  const int64_t m0 = (first + bid % gsz % rows) * BM, n0 = bid % gsz / rows * BN;

  const int lane = gc_lane(), w = gc_tid() / 32;
  const int wm = w / (BN / WN), wn = w % (BN / WN);
  const unsigned s0 = gc_smem_addr(smem);
  const unsigned stage_bytes = (GM_ASZ + PAIR * GM_BSZ) * 2;
  const TB *Bu = B + N * K; /* gemm_swiglu: the up rows */

  float acc[GM_MT][GM_NT][4], acc_up[GM_MT][GM_NT][4]; /* of B (or the gate rows), of the up rows */
  GC_UNROLL(GM_MT)
  for (int i = 0; i < GM_MT; i++)
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++)
      GC_UNROLL(4)
      for (int e = 0; e < 4; e++)
        acc[i][j][e] = 0.0f, acc_up[i][j][e] = 0.0f;

  const int64_t kt_n = gc_cdiv(K, BK);
  GC_UNROLL(STAGES - 1)
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < kt_n) {
      unsigned sa = s0 + s * stage_bytes;
      gm_load_tile<BM>(sa, A, m0, M, (int64_t)s * BK, K);
      gm_load_tile<BN>(sa + GM_ASZ * 2, B, n0, N, (int64_t)s * BK, K);
      if (PAIR == 2)
        gm_load_tile<BN>(sa + (GM_ASZ + GM_BSZ) * 2, Bu, n0, N, (int64_t)s * BK, K);
    }
    gc_cp_async_commit();
  }
  for (int64_t kt = 0; kt < kt_n; kt++) {
    gc_cp_async_wait<STAGES - 2>(); /* tile kt has landed (for this thread) */
    gc_barrier();          /* ... for all threads; tile kt-1 is consumed */
    int64_t nx = kt + STAGES - 1;
    if (nx < kt_n) {
      unsigned sa = s0 + (unsigned)(nx % STAGES) * stage_bytes;
      gm_load_tile<BM>(sa, A, m0, M, nx * BK, K);
      gm_load_tile<BN>(sa + GM_ASZ * 2, B, n0, N, nx * BK, K);
      if (PAIR == 2)
        gm_load_tile<BN>(sa + (GM_ASZ + GM_BSZ) * 2, Bu, n0, N, nx * BK, K);
    }
    gc_cp_async_commit();
    unsigned sa = s0 + (unsigned)(kt % STAGES) * stage_bytes;
    gm_stage_math(sa, sa + GM_ASZ * 2, wm, wn, lane, acc, acc_up);
  }
  gc_cp_async_wait<0>();

  const int g = lane >> 2, t = lane & 3;
  GC_UNROLL(GM_MT)
  for (int i = 0; i < GM_MT; i++)
    GC_UNROLL(GM_NT)
    for (int j = 0; j < GM_NT; j++) {
      int64_t m = m0 + wm * WM + i * 16 + g, n = n0 + wn * WN + j * 8 + 2 * t;
      gm_store2(C, M, N, m, n, GM_OUT(i, j, 0), GM_OUT(i, j, 1));
      gm_store2(C, M, N, m + 8, n, GM_OUT(i, j, 2), GM_OUT(i, j, 3));
    }
}
