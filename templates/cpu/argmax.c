/* argmax.c — the index of the largest element of each row of X, for greedy
 * sampling next to the LM head (ties go to the lowest index; NaN is never
 * chosen unless the row is all NaN, then index 0). argmax_step also posts
 * the last row's index to box0 or box1 (pos[0] even or odd) and advances
 * the step's position pos[0] by M (the task of row M-1 does both).
 *
 * @template argmax_cpu
 * @op       argmax argmax_step
 * @backend  cpu
 * @dtypes   f32 f16 bf16
 * @kernel   argmax_cpu
 * @param    ROWS 1 2 4 8 default 1 -- rows per task
 * @param    LANES 1 4 8 default 8 -- independent running maxima (breaks the compare chain)
 * @param    THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint THREADS <= NCPU
 * @grid     cdiv(M, ROWS)
 * @block    THREADS
 * @priority 1
 */

/* Row r of X [*, N] → the lowest index of its maximum. Lane l scans
 * elements l, l + LANES, ...; merging keeps the lower index on ties. */
static int32_t row_argmax(const TA *x, int64_t n) {
  float best[LANES];
  int64_t at[LANES];
  for (int l = 0; l < LANES; l++) best[l] = -INFINITY, at[l] = -1;
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; l++) {
      float v = LOAD_A(x, i + l);
      if (v > best[l] || (at[l] < 0 && v == v)) best[l] = v, at[l] = i + l;
    }
  for (; i < n; i++) {
    float v = LOAD_A(x, i);
    if (v > best[0] || (at[0] < 0 && v == v)) best[0] = v, at[0] = i;
  }
  float b = -INFINITY;
  int64_t a = -1;
  for (int l = 0; l < LANES; l++)
    if (at[l] >= 0 && (a < 0 || best[l] > b || (best[l] == b && at[l] < a))) b = best[l], a = at[l];
  return a < 0 ? 0 : (int32_t)a;
}

GC_EXPORT void argmax_cpu(void **args, int64_t task) {
  const TA *X = GC_ARG(args, 0, const TA *); /* [M, N] */
  int32_t *out = GC_ARG(args, 1, int32_t *);   /* [M] */
  const int P = 3 * GC_OP_ARGMAX_STEP;          /* argmax_step: pos[1], box0[1], box1[1] (in and out) next */
  int64_t M = GC_ARG(args, 2 + P, int64_t), N = GC_ARG(args, 3 + P, int64_t);
  for (int64_t r = task * ROWS; r < M && r < (task + 1) * ROWS; r++) {
    out[r] = row_argmax(X + r * N, N);
    if (P && r == M - 1) { /* post it, then move the position on */
      int32_t *pos = GC_ARG(args, 2, int32_t *), p0 = pos[0];
      GC_ARG(args, 3 + p0 % 2, int32_t *)[0] = out[r];
      pos[0] = p0 + (int32_t)M;
    }
  }
}
