/* rmsnorm.c — CPU RMS normalisation of the rows of X, scaled by W:
 * Y[i,j] = X[i,j] / sqrt(mean_j(X[i,j]²) + eps) * W[j].
 *
 * @template rmsnorm_cpu
 * @op rmsnorm
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel rmsnorm_cpu
 * @param ROWS 1 2 4 8 16 32 64 default 4 -- rows of X per task
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param UNROLL 1 2 4 8 default 4 -- independent sum-of-squares accumulators
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M,ROWS) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t normalises rows t*ROWS .. t*ROWS+ROWS-1 (fewer at the end). Each
 * row is read twice: once for the sum of squares (fp32, UNROLL vector
 * accumulators, summed pairwise at the end), once to write Y. The row tail
 * uses partial loads/stores, so nothing past a row is touched.
 */

/* sum_j x[j]² over j < n, in fp32. */
static float rms_sumsq(const TA *x, int64_t n) {
  VF acc[UNROLL];
  GC_UNROLL(UNROLL)
  for (int u = 0; u < UNROLL; u++)
    acc[u] = VZERO();
  int64_t j = 0;
  for (; j + VEC * UNROLL <= n; j += VEC * UNROLL) {
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++) {
      VF v = VLOAD_A(x + j + u * VEC);
      acc[u] = VFMA(v, v, acc[u]);
    }
  }
  for (; j < n; j += VEC) { /* at most UNROLL steps, the last partial */
    VF v = j + VEC <= n ? VLOAD_A(x + j) : VLOADN_A(x + j, n - j);
    acc[0] = VFMA(v, v, acc[0]);
  }
  for (int w = 1; w < UNROLL; w *= 2) /* pairwise */
    for (int u = 0; u + w < UNROLL; u += 2 * w)
      acc[u] = VADD(acc[u], acc[u + w]);
  return VHSUM(acc[0]);
}

/* y[j] = x[j] * s * w[j] for j < n. */
static void rms_scale(const TA *x, const TB *w, TC *y, float s, int64_t n) {
  VF vs = VSET1(s);
  int64_t j = 0;
  for (; j + VEC <= n; j += VEC)
    VSTORE_C(y + j, VMUL(VMUL(VLOAD_A(x + j), vs), VLOAD_B(w + j)));
  if (j < n)
    VSTOREN_C(y + j,
              VMUL(VMUL(VLOADN_A(x + j, n - j), vs), VLOADN_B(w + j, n - j)),
              n - j);
}

/* args: X[M,N] (TA), W[N] (TB), Y[M,N] (TC), int64 M, N, float eps. */
GC_EXPORT void rmsnorm_cpu(void **args, int64_t task) {
  const TA *X = GC_ARG(args, 0, const TA *);
  const TB *W = GC_ARG(args, 1, const TB *);
  TC *Y = GC_ARG(args, 2, TC *);
  int64_t M = GC_ARG(args, 3, int64_t);
  int64_t N = GC_ARG(args, 4, int64_t);
  float eps = GC_ARG(args, 5, float);

  int64_t i1 = gc_min(M, (task + 1) * ROWS);
  for (int64_t i = task * ROWS; i < i1; i++) {
    float ms = N > 0 ? rms_sumsq(X + i * N, N) / (float)N : 0.0f;
    rms_scale(X + i * N, W, Y + i * N, 1.0f / sqrtf(ms + eps), N);
  }
}
