/* gemm_swiglu.c — blocked CPU GEMM with a SwiGLU epilogue:
 * C[M,N] = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), Wg = W[0..N-1], Wu = W[N..2N-1],
 * silu(g) = g / (1 + e^-g), fp32 accumulation.
 *
 * @template gemm_swiglu_cpu
 * @op gemm_swiglu rmsnorm_gemm_swiglu
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel gemm_swiglu_cpu
 * @param MR 2 3 4 6 8 12 14 default 8 -- micro-tile rows (A broadcasts per k)
 * @param NR 8 16 24 32 48 default 16 -- output columns per micro-tile (2*NR accumulator columns: gate and up)
 * @param MC 48 96 168 192 256 336 384 512 default 256 -- rows of C per task
 * @param NC 96 192 256 384 512 768 1024 default 512 -- columns of C per task
 * @param KC 64 128 192 256 384 512 default 192 -- K chunk packed at a time
 * @param UNROLL 1 2 4 8 default 4 -- k-loop unroll of the micro-kernel
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint NR % VEC == 0 -- a micro-tile row is whole vectors
 * @constraint MC % MR == 0 -- a block is whole micro-tiles
 * @constraint NC % NR == 0 -- a block is whole micro-tiles
 * @constraint KC % VEC == 0 -- a packed A row is whole vectors (its tail vector stays inside)
 * @constraint MR * (2 * NR / VEC) + 2 * NR / VEC + 1 <= 16 + 16 * (VBYTES >= 64) -- accumulators, W vectors and a broadcast stay in registers
 * @constraint MR * (2 * NR / VEC) >= 8 -- enough independent FMA chains to hide latency
 * @constraint KC * 2 * NR * 4 <= L1 -- the packed gate+up micro-panel stays in L1
 * @constraint MC * KC * 4 <= L2 -- the packed A block stays in L2
 * @constraint (MC * KC + KC * 2 * NR + 2 * MC * NC) * 4 <= 2097152 -- fp32 scratch of a task on the stack, at most 2 MiB
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M,MC)*cdiv(N,NC) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * The structure of gemm.c, with gate and up computed together: a packed
 * micro-panel holds, for each k, NR gate values (W rows j..) followed by
 * NR up values (W rows N+j..), so one A broadcast feeds both and the
 * micro-kernel is MR × 2NR. Task t computes the MC×NC block of C at block
 * row t / cdiv(N,NC), block column t % cdiv(N,NC); gate and up partial sums
 * stay in fp32 on the stack until K is done, then the epilogue writes
 * silu(g)*u, converted and clipped to the edges.
 */

#define NW (2 * NR / VEC) /* vectors per micro-tile row: gate, then up */
#define PW (2 * NR)       /* floats per micro-tile row */
#define TM (MC / MR)      /* micro-tiles per block, down */

/* ap[MR][KC] := fp32 of a[i][0..kc-1] for rows i < mv, zero rows after.
 * a: row-major with leading dimension lda. Columns kc..KC-1 of ap are
 * scratch (0 <= kc <= KC; KC % VEC == 0). */
static void swiglu_pack_a(const TA *a, int64_t lda, int64_t mv, int64_t kc,
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

/* bp[k][0..NR-1] := fp32 of w[j][k] transposed, for rows j < nv of w,
 * for k < kc; columns j >= nv are zero. w: row-major, leading dimension
 * ldw; bp: row stride PW (gate and up panels interleave per k). */
static void swiglu_pack_w(const TB *w, int64_t ldw, int64_t nv, int64_t kc,
                          float *bp) {
  for (int64_t g = 0; g < NR; g += VEC) { /* VEC rows of w at a time */
    for (int64_t k = 0; k < kc; k += VEC) {
      int64_t kn = gc_min(VEC, kc - k);
      VF r[VEC]; /* r[i]: w[g+i][k..k+VEC-1] */
      for (int i = 0; i < VEC; i++) {
        if (g + i >= nv)
          r[i] = VZERO();
        else if (kn == VEC)
          r[i] = VLOAD_B(w + (g + i) * ldw + k);
        else
          r[i] = VLOADN_B(w + (g + i) * ldw + k, kn);
      }
      VTRANSPOSE(r); /* r[t]: w[g..g+VEC-1][k+t] */
      for (int64_t t = 0; t < kn; t++)
        VSTOREF(bp + (k + t) * PW + g, r[t]);
    }
  }
}

/* acc[i][v] += a[i*KC] * b[v*VEC .. v*VEC+VEC-1]: one k of the micro-kernel. */
GC_INLINE void swiglu_step(VF acc[MR][NW], const float *a, const float *b) {
  VF bv[NW];
  GC_UNROLL(NW)
  for (int v = 0; v < NW; v++)
    bv[v] = VLOADF(b + v * VEC);
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++) {
    VF ai = VSET1(a[i * KC]);
    GC_UNROLL(NW)
    for (int v = 0; v < NW; v++)
      acc[i][v] = VFMA(ai, bv[v], acc[i][v]);
  }
}

/* c[MR][PW] := (accumulate ? c : 0) + ap[MR][0..kc-1] · bp[0..kc-1][PW].
 * kc >= 0; ap has row stride KC, bp row stride PW; c is 64-byte aligned. */
static void swiglu_micro(int64_t kc, const float *restrict ap,
                         const float *restrict bp, float *restrict c,
                         int accumulate) {
  VF acc[MR][NW];
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++)
    GC_UNROLL(NW)
    for (int v = 0; v < NW; v++)
      acc[i][v] = VZERO();
  int64_t k = 0;
  for (; k + UNROLL <= kc; k += UNROLL) {
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++)
      swiglu_step(acc, ap + k + u, bp + (k + u) * PW);
  }
  for (; k < kc; k++)
    swiglu_step(acc, ap + k, bp + k * PW);
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++)
    GC_UNROLL(NW)
    for (int v = 0; v < NW; v++) {
      float *p = c + i * PW + v * VEC;
      VSTOREF(p, accumulate ? VADD(acc[i][v], VLOADF(p)) : acc[i][v]);
    }
}

/* silu(g) * u per lane. */
GC_INLINE VF swiglu_act(VF g, VF u) {
  VF one = VSET1(1.0f);
  VF e = VEXP(VMUL(g, VSET1(-1.0f)));
  return VMUL(VDIV(g, VADD(one, e)), u);
}

/* c[0..mb-1][0..nb-1] := silu(gate) * up from the fp32 block cacc.
 * cacc is tile-major: micro-tile (jt, it) at cacc[(jt*TM + it)*MR*PW],
 * each tile row-major [MR][PW] with gate in columns 0..NR-1, up in
 * NR..PW-1. c has leading dimension ldc. */
static void swiglu_store(const float *cacc, TC *c, int64_t ldc, int64_t mb,
                         int64_t nb, const float *inv) {
  for (int64_t i = 0; i < mb; i++) {
    VF sc = VSET1(inv ? inv[i] : 1.0f); /* rmsnorm_gemm_swiglu: the row's 1/rms */
    for (int64_t j = 0; j < nb; j += NR) {
      const float *s = cacc + ((j / NR * TM + i / MR) * MR + i % MR) * PW;
      TC *d = c + i * ldc + j;
      int64_t n = gc_min(NR, nb - j);
      for (int64_t v = 0; v < n; v += VEC) {
        VF y = swiglu_act(VMUL(VLOADF(s + v), sc), VMUL(VLOADF(s + NR + v), sc));
        if (v + VEC <= n)
          VSTORE_C(d + v, y);
        else
          VSTOREN_C(d + v, y, n - v);
      }
    }
  }
}

#if GC_OP_RMSNORM_GEMM_SWIGLU
#define GS_NORM 1 /* rmsnorm_gemm_swiglu: A's rows normalised on the way */
#else
#define GS_NORM 0
#endif

/* args: A[M,K] (TA), W[2N,K] (TB), C[M,N] (TC), [norm[K] (TB),] int64 M, N,
 * K[, float eps]. */
GC_EXPORT void gemm_swiglu_cpu(void **args, int64_t task) {
  const TA *A = GC_ARG(args, 0, const TA *);
  const TB *W = GC_ARG(args, 1, const TB *);
  TC *C = GC_ARG(args, 2, TC *);
  const TB *wn = GS_NORM ? GC_ARG(args, 3, const TB *) : 0;
  int64_t M = GC_ARG(args, 3 + GS_NORM, int64_t);
  int64_t N = GC_ARG(args, 4 + GS_NORM, int64_t);
  int64_t K = GC_ARG(args, 5 + GS_NORM, int64_t);
  float eps = GS_NORM ? GC_ARG(args, 7, float) : 0.0f;

  int64_t nbn = gc_cdiv(N, NC);
  int64_t i0 = task / nbn * MC, j0 = task % nbn * NC;
  int64_t mb = gc_min(MC, M - i0), nb = gc_min(NC, N - j0);
  if (mb <= 0 || nb <= 0)
    return;

  float ap[MC * KC] GC_ALIGN64;       /* [TM][MR][KC]: A block, this K chunk */
  float bp[KC * PW] GC_ALIGN64;       /* [KC][gate NR | up NR]: W micro-panel */
  float cacc[MC * 2 * NC] GC_ALIGN64; /* [NC/NR][TM][MR][PW]: gate|up, fp32 */
  float inv[MC];                      /* rmsnorm_gemm_swiglu: 1/rms of the block's rows */
  if (GS_NORM)
    for (int64_t i = 0; i < mb; i++)
      GC_ROW_INV_RMS(A + (i0 + i) * K, K, eps, inv[i]);

  /* K == 0 still runs one empty chunk, which zeroes cacc. */
  for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += KC) {
    int64_t kc = gc_min(KC, K - k0);
    for (int64_t i = 0; i < mb; i += MR)
      swiglu_pack_a(A + (i0 + i) * K + k0, K, gc_min(MR, mb - i), kc,
                    ap + i * KC);
    if (GS_NORM)
      GC_SCALE_PACKED(ap, mb, kc, wn, k0);
    for (int64_t j = 0; j < nb; j += NR) {
      int64_t nv = gc_min(NR, nb - j);
      swiglu_pack_w(W + (j0 + j) * K + k0, K, nv, kc, bp);
      swiglu_pack_w(W + (N + j0 + j) * K + k0, K, nv, kc, bp + NR);
      for (int64_t i = 0; i < mb; i += MR)
        swiglu_micro(kc, ap + i * KC, bp,
                     cacc + (j / NR * TM + i / MR) * MR * PW, k0 > 0);
    }
  }
  swiglu_store(cacc, C + i0 * N + j0, N, mb, nb, GS_NORM ? inv : 0);
}
