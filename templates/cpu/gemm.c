/* gemm.c — blocked CPU GEMM, C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add: C += A·Bᵀ),
 * or the gate/up pair with the SwiGLU epilogue, C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ)
 * with W[2N,K] = gate rows 0..N-1, up rows N..2N-1 and silu(g) =
 * g / (1 + e^-g) (gemm_swiglu); rmsnorm_*: A's rows RMS-normalised on the
 * way. fp32 accumulation.
 *
 * @template gemm_cpu
 * @op gemm gemm_add rmsnorm_gemm gemm_swiglu rmsnorm_gemm_swiglu
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel gemm_cpu
 * @param MR 2 3 4 6 8 12 14 default 8 -- micro-tile rows (A broadcasts per k)
 * @param NR 8 16 24 32 48 64 default 32 -- micro-tile columns of C, a multiple of VEC (gemm_swiglu: 2*NR accumulator columns, gate and up)
 * @param MC 48 96 168 192 256 336 384 512 default 256 -- rows of C per task
 * @param NC 96 192 256 384 512 768 1024 default 512 -- columns of C per task
 * @param KC 64 128 192 256 384 512 default 192 -- K chunk packed at a time
 * @param UNROLL 1 2 4 8 default 4 -- k-loop unroll of the micro-kernel
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @defaults gemm_swiglu rmsnorm_gemm_swiglu NR=16 -- the gate/up pair holds twice the accumulator columns
 * @constraint PAIR == 1 || NR <= 48 -- the gate/up pair's micro-tiles stay in the space it was tuned in
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint NR % VEC == 0 -- a micro-tile row is whole vectors
 * @constraint MC % MR == 0 -- a block is whole micro-tiles
 * @constraint NC % NR == 0 -- a block is whole micro-tiles
 * @constraint KC % VEC == 0 -- a packed A row is whole vectors (its tail vector stays inside)
 * @constraint MR * (PAIR * NR / VEC) + PAIR * NR / VEC + 1 <= 16 + 16 * (VBYTES >= 64) -- accumulators, B vectors and a broadcast stay in registers
 * @constraint MR * (PAIR * NR / VEC) >= 8 -- enough independent FMA chains to hide latency
 * @constraint KC * PAIR * NR * 4 <= L1 -- the packed B (gate+up) micro-panel stays in L1
 * @constraint MC * KC * 4 <= L2 -- the packed A block stays in L2
 * @constraint (MC * KC + KC * PAIR * NR + PAIR * MC * NC) * 4 <= 2097152 -- fp32 scratch of a task on the stack, at most 2 MiB
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M,MC)*cdiv(N,NC) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t computes the MC×NC block of C at block row t / cdiv(N,NC), block
 * column t % cdiv(N,NC) (edge blocks are smaller). For each KC-wide chunk of
 * K it packs the block's A rows into fp32 micro-panels (in L2), then for
 * each NR-wide micro-panel of B rows packs it transposed into fp32 (in L1)
 * and runs the MR×NR register micro-kernel against every A micro-panel.
 * Partial sums live in an fp32 block on the stack, written to C (converted,
 * edges clipped) once K is done, so C is never read and f16/bf16 C is
 * rounded once. Packing zero-pads rows past M/N, so the micro-kernel never
 * sees an edge.
 *
 * gemm_swiglu (PAIR = 2) computes gate and up together: a packed
 * micro-panel holds, for each k, NR gate values (W rows j..) followed by
 * NR up values (W rows N+j..), so one A broadcast feeds both and the
 * micro-kernel is MR × 2NR; gate and up partial sums stay in fp32 on the
 * stack until K is done, then the epilogue writes silu(g)*u, converted
 * and clipped to the edges.
 */

#define NV (PAIR * NR / VEC) /* vectors per micro-tile row (gemm_swiglu: gate, then up) */
#define PW (PAIR * NR)       /* floats per micro-tile row */
#define TM (MC / MR)         /* micro-tiles per block, down */

/* ap[MR][KC] := fp32 of a[i][0..kc-1] for rows i < mv, zero rows after.
 * a: row-major with leading dimension lda. Columns kc..KC-1 of ap are
 * scratch (0 <= kc <= KC; KC % VEC == 0). */
static void gemm_pack_a(const TA *a, int64_t lda, int64_t mv, int64_t kc,
                        float *ap) {
  for (int64_t i = 0; i < MR; i++) {
    float *d = ap + i * KC;
    if (i >= mv) {
      memset(d, 0, (size_t)kc * sizeof *d);
      continue;
    }
    const TA *s = a + i * lda;
    int64_t k = 0;
    for (; k + VEC <= kc; k += VEC)
      VSTOREF(d + k, VLOAD_A(s + k));
    if (k < kc)
      VSTOREF(d + k, VLOADN_A(s + k, kc - k));
  }
}

/* bp[k][0..NR-1] := fp32 of b[j][k] transposed, for rows j < nv of b, for
 * k < kc; columns j >= nv are zero. b: row-major, leading dimension ldb;
 * bp: row stride PW (gemm_swiglu: gate and up panels interleave per k). */
static void gemm_pack_b(const TB *b, int64_t ldb, int64_t nv, int64_t kc,
                        float *bp) {
  for (int64_t g = 0; g < NR; g += VEC) { /* VEC rows of b at a time */
    for (int64_t k = 0; k < kc; k += VEC) {
      int64_t kn = gc_min(VEC, kc - k);
      VF r[VEC]; /* r[i]: b[g+i][k..k+VEC-1] */
      for (int i = 0; i < VEC; i++) {
        if (g + i >= nv)
          r[i] = VZERO();
        else if (kn == VEC)
          r[i] = VLOAD_B(b + (g + i) * ldb + k);
        else
          r[i] = VLOADN_B(b + (g + i) * ldb + k, kn);
      }
      VTRANSPOSE(r); /* r[t]: b[g..g+VEC-1][k+t] */
      for (int64_t t = 0; t < kn; t++)
        VSTOREF(bp + (k + t) * PW + g, r[t]);
    }
  }
}

/* acc[i][v] += a[i*KC] * b[v*VEC .. v*VEC+VEC-1]: one k of the micro-kernel. */
GC_INLINE void gemm_step(VF acc[MR][NV], const float *a, const float *b) {
  VF bv[NV];
  GC_UNROLL(NV)
  for (int v = 0; v < NV; v++)
    bv[v] = VLOADF(b + v * VEC);
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++) {
    VF ai = VSET1(a[i * KC]);
    GC_UNROLL(NV)
    for (int v = 0; v < NV; v++)
      acc[i][v] = VFMA(ai, bv[v], acc[i][v]);
  }
}

/* c[MR][PW] := (accumulate ? c : 0) + ap[MR][0..kc-1] · bp[0..kc-1][PW].
 * kc >= 0; ap has row stride KC, bp row stride PW; c is 64-byte aligned. */
static void gemm_micro(int64_t kc, const float *restrict ap,
                       const float *restrict bp, float *restrict c,
                       int accumulate) {
  VF acc[MR][NV];
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++)
    GC_UNROLL(NV)
    for (int v = 0; v < NV; v++)
      acc[i][v] = VZERO();
  int64_t k = 0;
  for (; k + UNROLL <= kc; k += UNROLL) {
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++)
      gemm_step(acc, ap + k + u, bp + (k + u) * PW);
  }
  for (; k < kc; k++)
    gemm_step(acc, ap + k, bp + k * PW);
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++)
    GC_UNROLL(NV)
    for (int v = 0; v < NV; v++) {
      float *p = c + i * PW + v * VEC;
      VSTOREF(p, accumulate ? VADD(acc[i][v], VLOADF(p)) : acc[i][v]);
    }
}

#if PAIR == 2
/* silu(g) * u per lane. */
GC_INLINE VF swiglu_act(VF g, VF u) {
  VF one = VSET1(1.0f);
  VF e = VEXP(VMUL(g, VSET1(-1.0f)));
  return VMUL(VDIV(g, VADD(one, e)), u);
}
#endif

/* c[0..mb-1][0..nb-1] := the fp32 block cacc, converted to C's dtype
 * (the epilogue: another is one more #elif here). cacc is tile-major:
 * micro-tile (jt, it) at cacc[(jt*TM + it)*MR*PW], each tile row-major
 * [MR][PW] (gemm_swiglu: gate in columns 0..NR-1, up in NR..PW-1). c has
 * leading dimension ldc. */
static void gemm_store(const float *cacc, TC *c, int64_t ldc, int64_t mb,
                       int64_t nb, const float *inv) {
  for (int64_t i = 0; i < mb; i++) {
    VF sc = VSET1(inv ? inv[i] : 1.0f); /* rmsnorm_*: the row's 1/rms */
    for (int64_t j = 0; j < nb; j += NR) {
      const float *s = cacc + ((j / NR * TM + i / MR) * MR + i % MR) * PW;
      TC *d = c + i * ldc + j;
      int64_t n = gc_min(NR, nb - j);
#if PAIR == 2 /* silu(gate) * up */
      for (int64_t v = 0; v < n; v += VEC) {
        VF y = swiglu_act(VMUL(VLOADF(s + v), sc), VMUL(VLOADF(s + NR + v), sc));
        if (v + VEC <= n)
          VSTORE_C(d + v, y);
        else
          VSTOREN_C(d + v, y, n - v);
      }
#else
      int64_t v = 0;
      for (; v + VEC <= n; v += VEC)
        VSTORE_GEMM(d + v, VMUL(VLOADF(s + v), sc));
      if (v < n)
        VSTOREN_GEMM(d + v, VMUL(VLOADF(s + v), sc), n - v);
#endif
    }
  }
}

/* args: A[M,K] (TA), B[N,K] (TB; gemm_swiglu: W[2N,K]), C[M,N] (TC),
 * [norm[K] (TB),] int64 M, N, K[, float eps]. */
GC_EXPORT void gemm_cpu(void **args, int64_t task) {
  const TA *A = GC_ARG(args, 0, const TA *);
  const TB *B = GC_ARG(args, 1, const TB *);
  TC *C = GC_ARG(args, 2, TC *);
  const TB *wn = NORM ? GC_ARG(args, 3, const TB *) : 0;
  int64_t M = GC_ARG(args, 3 + NORM, int64_t);
  int64_t N = GC_ARG(args, 4 + NORM, int64_t);
  int64_t K = GC_ARG(args, 5 + NORM, int64_t);
  float eps = NORM ? GC_ARG(args, 7, float) : 0.0f;

  int64_t nbn = gc_cdiv(N, NC);
  int64_t i0 = task / nbn * MC, j0 = task % nbn * NC;
  int64_t mb = gc_min(MC, M - i0), nb = gc_min(NC, N - j0);
  if (mb <= 0 || nb <= 0)
    return;

  float ap[MC * KC] GC_ALIGN64;   /* [TM][MR][KC]: A block, this K chunk */
  float bp[KC * PW] GC_ALIGN64;          /* [KC][PW]: one B (gate | up) micro-panel, transposed */
  float cacc[MC * PAIR * NC] GC_ALIGN64; /* [NC/NR][TM][MR][PW]: C block (gate | up), fp32 */
  float inv[MC];                         /* rmsnorm_*: 1/rms of the block's rows */
  if (NORM)
    for (int64_t i = 0; i < mb; i++)
      GC_ROW_INV_RMS(A + (i0 + i) * K, K, eps, inv[i]);

  /* K == 0 still runs one empty chunk, which zeroes cacc. */
  for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += KC) {
    int64_t kc = gc_min(KC, K - k0);
    for (int64_t i = 0; i < mb; i += MR)
      gemm_pack_a(A + (i0 + i) * K + k0, K, gc_min(MR, mb - i), kc,
                  ap + i * KC);
    if (NORM)
      GC_SCALE_PACKED(ap, mb, kc, wn, k0);
    for (int64_t j = 0; j < nb; j += NR) {
      int64_t nv = gc_min(NR, nb - j);
      gemm_pack_b(B + (j0 + j) * K + k0, K, nv, kc, bp);
#if PAIR == 2 /* the up rows, beside the gate rows of each packed row (not an
                 if (PAIR == 2): a second call, even dead, changes gcc's inlining) */
      gemm_pack_b(B + (N + j0 + j) * K + k0, K, nv, kc, bp + NR);
#endif
      for (int64_t i = 0; i < mb; i += MR)
        gemm_micro(kc, ap + i * KC, bp, cacc + (j / NR * TM + i / MR) * MR * PW,
                   k0 > 0);
    }
  }
  gemm_store(cacc, C + i0 * N + j0, N, mb, nb, NORM ? inv : 0);
}
