/* gemm_simt.cu — GPU tiled GEMM on the plain fp32 units, the portable
 * fallback: C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add: C += A·Bᵀ), or the
 * gate/up pair with the SwiGLU epilogue, C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ) with
 * W[2N,K] = gate rows 0..N-1, up rows N..2N-1 (gemm_swiglu); fp32
 * accumulation, any M, N, K.
 *
 * @template gemm_simt
 * @op gemm gemm_add gemm_swiglu
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel gemm_simt
 * @param BM 32 64 128 default 64 -- block tile rows (of A and C)
 * @param BN 32 64 128 default 64 -- block tile columns of C (rows of B; gemm_swiglu: as many gate and as many up rows of W)
 * @param BK 8 16 32 default 16 -- K depth of a shared-memory tile
 * @param TM 4 8 default 4 -- thread tile rows
 * @param TN 4 8 default 4 -- thread tile columns (gemm_swiglu: each with a gate and an up accumulator)
 * @defaults gemm_swiglu BN=32 -- the gate/up pair stages twice the B rows
 * @constraint (BM / TM) * (BN / TN) % WARP == 0 && (BM / TM) * (BN / TN) <= MAXT -- whole warps, a legal block
 * @constraint (BM / TM) * (BN / TN) >= 64 -- at least two warps to overlap loads and math
 * @constraint BK * SA >= 16 && BK * SB >= 16 -- a tile row is whole 16-byte chunks
 * @constraint (BM + PAIR * BN) * BK / ((BM / TM) * (BN / TN)) <= 32 -- at most 32 staged tile elements per thread (registers)
 * @constraint PAIR * TM * TN + 2 * (TM + PAIR * TN) + 32 + 48 <= min(255, 65536 / ((BM / TM) * (BN / TN))) -- accumulators, operands and staged loads fit the register budget
 * @constraint 2 * BK * (BM + PAIR * BN + 4 + 4 * PAIR) * 4 <= SMEM -- two stages of fp32 tiles fit in shared memory
 * @shmem 2 * BK * (BM + PAIR * BN + 4 + 4 * PAIR) * 4
 * @grid cdiv(M, BM) * cdiv(N, BN) 1 1
 * @block (BM / TM) * (BN / TN) 1 1
 * @priority 1
 *
 * Block b computes the BM×BN tile of C at block row b / cdiv(N,BN), block
 * column b % cdiv(N,BN). Per BK-deep step the tiles of A and B are staged
 * in shared memory as fp32, transposed (As[k][m], Bs[k][n]; rows padded by
 * 4 floats), double-buffered: the next step's global loads are issued into
 * registers before the current step's math and stored after it, so one
 * barrier per step suffices. Loads move 16-byte chunks along K; a warp's
 * lanes take consecutive rows, so the transposing shared stores are
 * conflict-free. Thread (ty, tx) owns a TM×TN tile of C made of 4×4
 * pieces TM/4 and TN/4 apart by BM/(TM/4) and BN/(TN/4), so its shared
 * reads are 16-byte vectors that consecutive lanes take consecutively
 * (no bank conflicts; A reads are broadcasts). Edges: rows past M/N and
 * columns past K are zero-filled in the tiles; stores are guarded. When
 * K % (16/size) != 0 the chunks are loaded element by element.
 * gemm_swiglu (PAIR = 2) stages two B tiles per step, gate rows
 * n0 .. n0+BN-1 and up rows N+n0 .. N+n0+BN-1 of W, and each thread keeps
 * a gate and an up accumulator per output; the epilogue writes
 * g / (1 + e^-g) · u in fp32, rounded once to C's dtype (e^-g overflowing
 * to inf gives silu = -0, as it should).
 * The fp32 tiles make f16/bf16 inputs cost twice the shared memory of a
 * 16-bit tile; the matrix-core templates are the fast path for those.
 */

#define GS_T ((BM / TM) * (BN / TN)) /* threads */
#define GS_NTX (BN / TN)             /* threads across a tile row */
#define GS_LA (16 / SA)              /* A elements per 16-byte chunk */
#define GS_LB (16 / SB)
#define GS_CA (BM * BK / GS_LA)      /* chunks per A tile */
#define GS_CB (BN * BK / GS_LB)
#define GS_RA ((GS_CA + GS_T - 1) / GS_T) /* chunks per thread */
#define GS_RB ((GS_CB + GS_T - 1) / GS_T)
#define GS_SA (BM + 4)               /* shared row stride of As */
#define GS_SB (BN + 4)
#define GS_STAGE (BK * (GS_SA + PAIR * GS_SB)) /* floats per stage: A, then B (gate, up) */
/* One operand's tile (R rows of X, row stride K, from row r0 and column
 * k0) into registers: chunk c = tid + i·T is row c % R, K-chunk c / R.
 * Rows >= nr and columns >= K read as 0. */
template <class T, int R, int L, int NCH, int PER>
GC_DEVICE void gs_load(const T *X, int64_t r0, int64_t nr, int64_t k0, int64_t K, int vec_ok,
                       float reg[PER][L]) {
  GC_UNROLL(PER)
  for (int i = 0; i < PER; i++) {
    int c = gc_tid() + i * GS_T;
    int r = c % R, kc = c / R;
    int64_t k = k0 + (int64_t)kc * L;
    const T *p = X + (r0 + r) * K + k;
    if (c < NCH && r0 + r < nr && vec_ok && k < K) {
      gc_ldv<L>(p, reg[i]);
    } else {
      GC_UNROLL(L)
      for (int e = 0; e < L; e++)
        reg[i][e] = c < NCH && r0 + r < nr && !vec_ok && k + e < K ? gc_ld(p, e) : 0.0f;
    }
  }
}

/* Registers of gs_load into the transposed shared tile S[k][r] (stride SS). */
template <int R, int L, int NCH, int PER, int SS>
GC_DEVICE void gs_store(float *S, const float reg[PER][L]) {
  GC_UNROLL(PER)
  for (int i = 0; i < PER; i++) {
    int c = gc_tid() + i * GS_T;
    if (c < NCH) {
      int r = c % R, kc = c / R;
      GC_UNROLL(L)
      for (int e = 0; e < L; e++)
        S[(kc * L + e) * SS + r] = reg[i][e];
    }
  }
}

/* acc += the stage's As·Bsᵀ for this thread's tile (Bs: B, or gate or up). */
GC_DEVICE void gs_math(const float *As, const float *Bs, int ty, int tx, float acc[TM][TN]) {
  GC_UNROLL(4) /* not BK: a full unroll lets clang hoist every shared read (AMD VGPRs) */
  for (int k = 0; k < BK; k++) {
    float a[TM], b[TN];
    GC_UNROLL(TM / 4)
    for (int i = 0; i < TM / 4; i++)
      *reinterpret_cast<gc_raw16 *>(a + 4 * i) =
          *reinterpret_cast<const gc_raw16 *>(As + k * GS_SA + i * (BM / (TM / 4)) + ty * 4);
    GC_UNROLL(TN / 4)
    for (int j = 0; j < TN / 4; j++)
      *reinterpret_cast<gc_raw16 *>(b + 4 * j) =
          *reinterpret_cast<const gc_raw16 *>(Bs + k * GS_SB + j * (BN / (TN / 4)) + tx * 4);
    GC_UNROLL(TM)
    for (int i = 0; i < TM; i++)
      GC_UNROLL(TN)
      for (int j = 0; j < TN; j++)
        acc[i][j] = gc_fma(a[i], b[j], acc[i][j]);
  }
}

/* ---- the epilogue (another is one more #elif here): the four outputs
 * at (i, 4j) of the thread's tile from its PAIR accumulators, as v[4]:
 * GS_PRE(i, j) before C's address is formed, GS_VEC(i, j) where the
 * vector store needs them, GS_OUT(i, j, e) output e alone. (Where v is
 * formed matters to the register allocation: these keep each op's code as
 * it was when gemm_swiglu_simt was a template of its own.) ---- */
#if PAIR == 2
#define GS_PRE(i, j)                                                         \
  float v[4];                                                                \
  GC_UNROLL(4)                                                               \
  for (int e = 0; e < 4; e++)                                                \
    v[e] = gc_silu_mul(acc[i][4 * (j) + e], acc_up[i][4 * (j) + e]);
#define GS_VEC(i, j)
#define GS_OUT(i, j, e) v[e]
#else
#define GS_PRE(i, j)
#define GS_VEC(i, j)                                                         \
  float v[4];                                                                \
  GC_UNROLL(4)                                                               \
  for (int e = 0; e < 4; e++)                                                \
    v[e] = acc[i][4 * (j) + e];
#define GS_OUT(i, j, e) acc[i][4 * (j) + (e)]
#endif

/* B: [N,K]; gemm_swiglu: W [2N,K], gate rows then up rows. */
GC_KERNEL_BOUNDS(GS_T)
void gemm_simt(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  float *smem = reinterpret_cast<float *>(gc_dyn_shared());
  int64_t nbn = gc_cdiv(N, BN);
  if (nbn <= 0 || M <= 0)
    return;
  int64_t m0 = gc_bid() / nbn * BM, n0 = gc_bid() % nbn * BN;
  int ty = gc_tid() / GS_NTX, tx = gc_tid() % GS_NTX;
  int vec_a = K % GS_LA == 0, vec_b = K % GS_LB == 0;

  float acc[TM][TN], acc_up[TM][TN]; /* of B (or the gate rows), of the up rows */
  GC_UNROLL(TM)
  for (int i = 0; i < TM; i++)
    GC_UNROLL(TN)
    for (int j = 0; j < TN; j++)
      acc[i][j] = 0.0f, acc_up[i][j] = 0.0f;

  float ra[GS_RA][GS_LA], rb[GS_RB][GS_LB], rb_up[GS_RB][GS_LB];
  int64_t nk = gc_cdiv(K, BK);
  gs_load<TA, BM, GS_LA, GS_CA, GS_RA>(A, m0, M, 0, K, vec_a, ra);
  gs_load<TB, BN, GS_LB, GS_CB, GS_RB>(B, n0, N, 0, K, vec_b, rb);
  if (PAIR == 2)
    gs_load<TB, BN, GS_LB, GS_CB, GS_RB>(B + N * K, n0, N, 0, K, vec_b, rb_up);
  gs_store<BM, GS_LA, GS_CA, GS_RA, GS_SA>(smem, ra);
  gs_store<BN, GS_LB, GS_CB, GS_RB, GS_SB>(smem + BK * GS_SA, rb);
  if (PAIR == 2)
    gs_store<BN, GS_LB, GS_CB, GS_RB, GS_SB>(smem + BK * (GS_SA + GS_SB), rb_up);
  gc_barrier();
  for (int64_t kt = 0; kt < nk; kt++) {
    float *cur = smem + (kt & 1) * GS_STAGE, *nxt = smem + ((kt + 1) & 1) * GS_STAGE;
    if (kt + 1 < nk) {
      gs_load<TA, BM, GS_LA, GS_CA, GS_RA>(A, m0, M, (kt + 1) * BK, K, vec_a, ra);
      gs_load<TB, BN, GS_LB, GS_CB, GS_RB>(B, n0, N, (kt + 1) * BK, K, vec_b, rb);
      if (PAIR == 2)
        gs_load<TB, BN, GS_LB, GS_CB, GS_RB>(B + N * K, n0, N, (kt + 1) * BK, K, vec_b, rb_up);
    }
    gs_math(cur, cur + BK * GS_SA, ty, tx, acc);
    if (PAIR == 2)
      gs_math(cur, cur + BK * (GS_SA + GS_SB), ty, tx, acc_up);
    if (kt + 1 < nk) {
      gs_store<BM, GS_LA, GS_CA, GS_RA, GS_SA>(nxt, ra);
      gs_store<BN, GS_LB, GS_CB, GS_RB, GS_SB>(nxt + BK * GS_SA, rb);
      if (PAIR == 2)
        gs_store<BN, GS_LB, GS_CB, GS_RB, GS_SB>(nxt + BK * (GS_SA + GS_SB), rb_up);
    }
    gc_barrier();
  }

  GC_UNROLL(TM)
  for (int i = 0; i < TM; i++) {
    int64_t m = m0 + (i / 4) * (BM / (TM / 4)) + ty * 4 + i % 4;
    if (m >= M)
      continue;
    GC_UNROLL(TN / 4)
    for (int j = 0; j < TN / 4; j++) {
      int64_t n = n0 + j * (BN / (TN / 4)) + tx * 4;
      GS_PRE(i, j)
      TC *c = C + m * N + n;
      if (N % 4 == 0 && n + 4 <= N) {
        GS_VEC(i, j)
        if (GC_OP_GEMM_ADD) {
          float c0[4];
          gc_ldv<4>(c, c0);
          GC_UNROLL(4)
          for (int e = 0; e < 4; e++)
            v[e] += c0[e];
        }
        gc_stv<4>(c, v);
      } else {
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++)
          if (n + e < N)
            STORE_GEMM(c, e, GS_OUT(i, j, e));
      }
    }
  }
}
