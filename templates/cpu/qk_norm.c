/* qk_norm.c — CPU RMS normalisation of the query and key heads of a QKV
 * projection's rows, in place (Qwen3's q_norm and k_norm): in QKV[M,
 * (H+2G)·D], head h of row i (its D values) becomes
 * x / sqrt(mean(x²) + eps) * qn (h < H) or * kn (H <= h < H+G); the G
 * value heads are not touched.
 *
 * @template qk_norm_cpu
 * @op qk_norm
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel qk_norm_cpu
 * @param TOK 1 4 16 default 4 -- rows of QKV per task
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param THREADS 0 1 4 16 default 0 -- worker threads, 0 = all cores (a small op: few choices)
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M, TOK) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t normalises the H+G heads of rows t*TOK .. t*TOK+TOK-1 (fewer at
 * the end). Each head is read twice: once for the fp32 sum of squares,
 * once to scale and write it back; the head's tail uses partial
 * loads/stores, so nothing past its D values is touched. The buffer is
 * C's dtype (A and C are one dtype in every @dtypes entry).
 */

/* sum_j x[j]² over j < n, in fp32. */
static float qkn_sumsq(const TC *x, int64_t n) {
  VF acc = VZERO();
  int64_t j = 0;
  for (; j + VEC <= n; j += VEC) {
    VF v = VLOAD_C(x + j);
    acc = VFMA(v, v, acc);
  }
  if (j < n) {
    VF v = VLOADN_C(x + j, n - j);
    acc = VFMA(v, v, acc);
  }
  return VHSUM(acc);
}

/* x[j] = x[j] * s * w[j] for j < n, in place. */
static void qkn_scale(TC *x, const TB *w, float s, int64_t n) {
  VF vs = VSET1(s);
  int64_t j = 0;
  for (; j + VEC <= n; j += VEC)
    VSTORE_C(x + j, VMUL(VMUL(VLOAD_C(x + j), vs), VLOAD_B(w + j)));
  if (j < n)
    VSTOREN_C(x + j, VMUL(VMUL(VLOADN_C(x + j, n - j), vs), VLOADN_B(w + j, n - j)), n - j);
}

/* args: QKV[M,(H+2G)·D] (TC), qn[D] (TB), kn[D] (TB), int64 M, H, G, D,
 * float eps. */
GC_EXPORT void qk_norm_cpu(void **args, int64_t task) {
  TC *QKV = GC_ARG(args, 0, TC *);
  const TB *qn = GC_ARG(args, 1, const TB *);
  const TB *kn = GC_ARG(args, 2, const TB *);
  int64_t M = GC_ARG(args, 3, int64_t);
  int64_t H = GC_ARG(args, 4, int64_t);
  int64_t G = GC_ARG(args, 5, int64_t);
  int64_t D = GC_ARG(args, 6, int64_t);
  float eps = GC_ARG(args, 7, float);

  int64_t i1 = gc_min(M, (task + 1) * TOK);
  for (int64_t i = task * TOK; i < i1; i++)
    for (int64_t h = 0; h < H + G; h++) {
      TC *x = QKV + (i * (H + 2 * G) + h) * D;
      float ms = qkn_sumsq(x, D) / (float)D;
      qkn_scale(x, h < H ? qn : kn, 1.0f / sqrtf(ms + eps), D);
    }
}
