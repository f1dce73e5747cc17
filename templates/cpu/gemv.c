/* gemv.c — CPU GEMM for at most 4 rows of A (the decode path):
 * C[M,N] = A[M,K] · B[N,K]ᵀ, M <= 4, fp32 accumulation; or, as
 * rmsnorm_gemm_rope_kv, the QKV projection with rope_kv in its epilogue.
 *
 * @template gemv_cpu
 * @op gemm gemm_add rmsnorm_gemm rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel gemv_cpu
 * @param NB 4 8 16 32 64 128 256 512 default 32 -- output columns (rows of B) per task
 * @param ROWS 1 2 4 8 default 4 -- rows of B streamed together
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param UNROLL 1 2 4 default 1 -- independent accumulators per dot product (k split)
 * @param PF 0 512 1024 2048 default 1024 -- software prefetch distance along each B row, bytes (0 = none)
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint NB % ROWS == 0 -- a task is whole groups of rows
 * @constraint ROPE == 0 || ROWS % 2 == 0 -- the two rows of a RoPE pair are in one group (one task)
 * @constraint ROWS * UNROLL + ROWS + 1 <= 16 + 16 * (VBYTES >= 64) -- for M = 1 accumulators, B and A vectors stay in registers (larger M may spill; tuning decides)
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @applies M <= 4 -- one register block of A rows
 * @grid cdiv(N,NB) 1 1
 * @block THREADS 1 1
 * @priority 2
 *
 * Task t computes C[0..M-1][t*NB .. t*NB+NB-1]. It walks its NB rows of B
 * ROWS at a time; for each group it streams the ROWS rows and the M rows
 * of A along K once, VEC elements per step, keeping M×ROWS×UNROLL fp32
 * vector accumulators, then reduces each to a scalar. The K tail is read
 * with partial (zero-filled) loads, so nothing past a row is touched. B
 * rows past N within a group are clamped to row N-1 and not stored.
 * rmsnorm_gemm multiplies each A vector by the norm weight's as it is
 * loaded and each output by its row's 1/rms (computed once per task).
 *
 * rmsnorm_gemm_rope_kv (ROPE = 1): C's N = (H+2G)·D columns are the query,
 * key and value heads of token m at position p = pos0 + m, and the
 * epilogue does what rope_kv does with them (templates/README.md): query
 * heads rotated into Qout row m, key heads rotated into Kc row p, value
 * heads copied into Vc row p. The rows of B are taken in RoPE pairs: the
 * B rows of group slots s, s+1 (s even) are the two elements of pair s/2
 * (of head s/2 / (D/2), pair j = s/2 % (D/2): rows (j, j + D/2) of the
 * head in layout 0, (2j, 2j + 1) in layout 1), so a pair's two sums meet
 * in one task. Each sum is rounded to C's dtype as rmsnorm_gemm stores it,
 * then rotated as rope_kv_cpu does (θ = p·inv_freq[j], sin and cos in
 * double by gv_sincos, the rotation in double, one rounding): the result
 * is rmsnorm_gemm followed by rope_kv, bit for bit.
 * rmsnorm_gemm_bias_rope_kv: each sum has its column's b added (fp32)
 * before that rounding (Qwen2's q/k/v biases).
 */

#define GV_NORM NORM

/* ---- the RoPE/KV epilogue (ROPE) ---- */

/* Its arguments (rmsnorm_gemm_rope_kv); unused by the other ops. */
typedef struct gv_rope {
  TC *Qout, *Kc, *Vc;     /* [M, H·D], [S, G·D], [S, G·D] */
  const double *inv_freq; /* [D/2] */
  int64_t pos0, H, G, D, layout;
  const TB *bias;         /* rmsnorm_gemm_bias_rope_kv: b[N]; else NULL */
} gv_rope_t;

/* The row of B of group slot s: s itself, or under ROPE element s % 2 of
 * RoPE pair s / 2 (see the header). */
GC_INLINE int64_t gv_row(const gv_rope_t *ro, int64_t s) {
  if (!ROPE)
    return s;
  int64_t half = ro->D / 2, u = s / 2, j = u % half;
  int64_t e = ro->layout ? 2 * j + s % 2 : j + s % 2 * half;
  return u / half * ro->D + e;
}

#if ROPE
/* sin x and cos x in double: rope_kv.c's rope_sincos (see there), so that
 * this epilogue and rope_kv_cpu rotate by the same values. */
static void gv_sincos(double x, double *s, double *c) {
  const double P1 = 0x1.921fb544p+0, P2 = 0x1.0b4611a6p-34, P3 = 0x1.3198a2e037073p-69;
  double kf = x * 0x1.45f306dc9c883p-1; /* x·2/π */
  int64_t k = (int64_t)(kf + (kf >= 0 ? 0.5 : -0.5));
  double r = ((x - (double)k * P1) - (double)k * P2) - (double)k * P3;
  double r2 = r * r, ts = 1, tc = 1;
  for (int n = 17; n >= 3; n -= 2)
    ts = 1 - r2 * (1.0 / (double)(n * (n - 1))) * ts;
  for (int n = 18; n >= 2; n -= 2)
    tc = 1 - r2 * (1.0 / (double)(n * (n - 1))) * tc;
  double sr = r * ts, cr = tc;
  int q = (int)(k & 3);
  *s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
  *c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}

/* fp32 of y that narrows to C's dtype with one rounding: nearest even for
 * f32, else "to odd" (rope_kv.c's rope_to_f32, one lane). */
static float gv_to_f32(double y) {
  float f = (float)y;
#if GC_TC != GC_F32
  double b = (double)f;
  if (b != y) {
    uint32_t u = gc_f32_bits(f);
    if ((b > y && y > 0) || (b < y && y < 0))
      u -= 1; /* rounded away from zero: step back toward it */
    f = gc_bits_f32(u | 1u);
  }
#endif
  return f;
}

/* C's dtype applied to x (what rmsnorm_gemm would store), back in fp32. */
static float gv_round_c(float x) {
  TC t[1];
  STORE_C(t, 0, x);
  return LOAD_C(t, 0);
}

/* The sums x, y of group slots s, s+1 (s even: RoPE pair s/2) of row m of
 * C, written where rope_kv would put them. */
static void gv_rope_pair(const gv_rope_t *ro, int64_t m, int64_t s, float x, float y) {
  int64_t half = ro->D / 2, u = s / 2, hd = u / half, j = u % half, p = ro->pos0 + m;
  int64_t ia = ro->layout ? 2 * j : j, ib = ro->layout ? 2 * j + 1 : j + half;
  int64_t H = ro->H, G = ro->G, D = ro->D;
  if (ro->bias) /* the columns of the pair's two rows of B */
    x += LOAD_B(ro->bias, gv_row(ro, s)), y += LOAD_B(ro->bias, gv_row(ro, s + 1));
  float a = gv_round_c(x), b = gv_round_c(y);
  if (hd >= H + G) { /* value head: copied */
    TC *v = ro->Vc + (p * G + hd - H - G) * D;
    STORE_C(v, ia, a);
    STORE_C(v, ib, b);
    return;
  }
  TC *dst = hd < H ? ro->Qout + (m * H + hd) * D : ro->Kc + (p * G + hd - H) * D;
  double sn, c;
  gv_sincos((double)p * ro->inv_freq[j], &sn, &c);
  double ya = (double)a * c + (double)b * -sn, yb = (double)b * c + (double)a * sn;
  STORE_C(dst, ia, gv_to_f32(ya));
  STORE_C(dst, ib, gv_to_f32(yb));
}
#endif

/* c[m][r] = sum_k a[m][k] * b[r][k] for m < MROWS, r < ROWS.
 * a: MROWS rows with stride lda; b: ROWS row pointers. */
GC_INLINE void gemv_group(int MROWS, const TA *a, int64_t lda,
                          const TB *b[ROWS], const TB *wn, int64_t K,
                          float c[4][ROWS]) {
  VF acc[4][ROWS][UNROLL]; /* acc[m][r][u] */
  for (int m = 0; m < MROWS; m++)
    GC_UNROLL(ROWS)
    for (int r = 0; r < ROWS; r++)
      GC_UNROLL(UNROLL)
      for (int u = 0; u < UNROLL; u++)
        acc[m][r][u] = VZERO();
  int64_t k = 0;
  for (; k + VEC * UNROLL <= K; k += VEC * UNROLL) {
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++) {
      VF av[4];
      for (int m = 0; m < MROWS; m++)
        av[m] = VLOAD_A(a + m * lda + k + u * VEC);
      if (GV_NORM) {
        VF wv = VLOAD_B(wn + k + u * VEC);
        for (int m = 0; m < MROWS; m++)
          av[m] = VMUL(av[m], wv);
      }
      GC_UNROLL(ROWS)
      for (int r = 0; r < ROWS; r++) {
        if (PF > 0)
          _mm_prefetch((const char *)(b[r] + k + u * VEC) + PF, _MM_HINT_T0);
        VF bv = VLOAD_B(b[r] + k + u * VEC);
        for (int m = 0; m < MROWS; m++)
          acc[m][r][u] = VFMA(av[m], bv, acc[m][r][u]);
      }
    }
  }
  for (; k < K; k += VEC) { /* at most UNROLL steps, the last partial */
    int64_t n = gc_min(VEC, K - k);
    VF av[4];
    for (int m = 0; m < MROWS; m++)
      av[m] = n == VEC ? VLOAD_A(a + m * lda + k) : VLOADN_A(a + m * lda + k, n);
    if (GV_NORM) {
      VF wv = n == VEC ? VLOAD_B(wn + k) : VLOADN_B(wn + k, n);
      for (int m = 0; m < MROWS; m++)
        av[m] = VMUL(av[m], wv);
    }
    GC_UNROLL(ROWS)
    for (int r = 0; r < ROWS; r++) {
      VF bv = n == VEC ? VLOAD_B(b[r] + k) : VLOADN_B(b[r] + k, n);
      for (int m = 0; m < MROWS; m++)
        acc[m][r][0] = VFMA(av[m], bv, acc[m][r][0]);
    }
  }
  for (int m = 0; m < MROWS; m++)
    GC_UNROLL(ROWS)
    for (int r = 0; r < ROWS; r++) {
      VF s = acc[m][r][0];
      GC_UNROLL(UNROLL)
      for (int u = 1; u < UNROLL; u++)
        s = VADD(s, acc[m][r][u]);
      c[m][r] = VHSUM(s);
    }
}

/* C[0..MROWS-1][j0 .. j0+nb-1] for one task; MROWS is a constant at
 * each call site so the M loops unroll. */
GC_INLINE void gemv_task(int MROWS, const TA *A, const TB *B, TC *C, const TB *wn,
                         const gv_rope_t *ro, float eps, int64_t N, int64_t K, int64_t j0,
                         int64_t nb) {
  float inv[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  if (GV_NORM)
    for (int m = 0; m < MROWS; m++)
      GC_ROW_INV_RMS(A + m * K, K, eps, inv[m]);
  for (int64_t j = j0; j < j0 + nb; j += ROWS) {
    const TB *b[ROWS];
    for (int r = 0; r < ROWS; r++)
      b[r] = B + gv_row(ro, gc_min(j + r, N - 1)) * K;
    float c[4][ROWS];
    gemv_group(MROWS, A, K, b, wn, K, c);
#if ROPE /* pairs of slots (ROWS and nb are even) */
    for (int m = 0; m < MROWS; m++)
      for (int r = 0; r < ROWS && j + r < j0 + nb; r += 2)
        gv_rope_pair(ro, m, j + r, c[m][r] * inv[m], c[m][r + 1] * inv[m]);
#else
    (void)ro;
    for (int m = 0; m < MROWS; m++)
      for (int r = 0; r < ROWS && j + r < j0 + nb; r++)
        STORE_GEMM(C + m * N, j + r, c[m][r] * inv[m]);
#endif
  }
}

/* args: A[M,K] (TA), B[N,K] (TB), C[M,N] (TC), [norm[K] (TB),] int64 M, N,
 * K[, float eps]; M <= 4. rmsnorm_gemm_rope_kv: A, B, Qout[M,H·D] (C's
 * place), norm, Kc[S,G·D], Vc[S,G·D], double inv_freq[D/2], int32 pos[1],
 * int64 M, N, K, H, G, D, layout, float eps; rmsnorm_gemm_bias_rope_kv:
 * b[N] (TB) after pos. */
#define GV_BIAS GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV
#define GV_I (3 + GV_NORM + 4 * ROPE + GV_BIAS) /* the first int64 argument */
GC_EXPORT void gemv_cpu(void **args, int64_t task) {
  const TA *A = GC_ARG(args, 0, const TA *);
  const TB *B = GC_ARG(args, 1, const TB *);
  TC *C = GC_ARG(args, 2, TC *);
  const TB *wn = GV_NORM ? GC_ARG(args, 3, const TB *) : 0;
  int64_t M = GC_ARG(args, GV_I, int64_t);
  int64_t N = GC_ARG(args, GV_I + 1, int64_t);
  int64_t K = GC_ARG(args, GV_I + 2, int64_t);
  float eps = GV_NORM ? GC_ARG(args, GV_I + 3 + 4 * ROPE, float) : 0.0f;
  gv_rope_t rope = {0}, *ro = 0;
#if ROPE
  rope = (gv_rope_t){C, GC_ARG(args, 4, TC *), GC_ARG(args, 5, TC *), GC_ARG(args, 6, const double *),
                     *GC_ARG(args, 7, const int32_t *), GC_ARG(args, GV_I + 3, int64_t),
                     GC_ARG(args, GV_I + 4, int64_t), GC_ARG(args, GV_I + 5, int64_t),
                     GC_ARG(args, GV_I + 6, int64_t), GV_BIAS ? GC_ARG(args, 8, const TB *) : NULL};
  ro = &rope;
  if (rope.D <= 0 || rope.D % 2 || N != (rope.H + 2 * rope.G) * rope.D)
    return; /* not a problem of the op (core/problem.c refuses it) */
#endif
  (void)rope;

  int64_t j0 = task * NB;
  int64_t nb = gc_min(NB, N - j0);
  if (nb <= 0)
    return;
  switch (M) {
  case 1: gemv_task(1, A, B, C, wn, ro, eps, N, K, j0, nb); break;
  case 2: gemv_task(2, A, B, C, wn, ro, eps, N, K, j0, nb); break;
  case 3: gemv_task(3, A, B, C, wn, ro, eps, N, K, j0, nb); break;
  case 4: gemv_task(4, A, B, C, wn, ro, eps, N, K, j0, nb); break;
  default: break; /* M == 0, or outside @applies */
  }
}
