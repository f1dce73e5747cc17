/* concat.c — CPU join of two arrays' rows: Z[M,N] = [X[M,K] | Y[M,N-K]]
 * (the QKV of a layer whose V rows have a block format of their own: the
 * Q|K projection's rows, then V's; models/recipe.h), each element widened
 * to fp32 and rounded once to Z's dtype (a copy where the dtypes agree).
 *
 * @template concat_cpu
 * @op concat
 * @backend cpu
 * @dtypes f32 f16 bf16
 * @kernel concat_cpu
 * @param ROWS 1 2 4 8 16 default 4 -- rows of Z per task
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M, ROWS) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t writes rows t*ROWS .. t*ROWS+ROWS-1 (fewer at the end), each from
 * its row of X and its row of Y, in vectors with partial loads and stores
 * at the ends: nothing past a row's elements is touched.
 */

/* z[0..n-1] = x[0..n-1] in Z's dtype. */
static void copy_span(const TA *x, TC *z, int64_t n) {
  for (int64_t k = 0; k < n; k += VEC) {
    int64_t m = gc_min(VEC, n - k);
    VSTOREN_C(z + k, VLOADN_A(x + k, m), m);
  }
}

/* args: X[M,K] (TA), Y[M,N-K] (TA), Z[M,N] (TC), int64 M, N, K. */
GC_EXPORT void concat_cpu(void **args, int64_t task) {
  const TA *X = GC_ARG(args, 0, const TA *);
  const TA *Y = GC_ARG(args, 1, const TA *);
  TC *Z = GC_ARG(args, 2, TC *);
  int64_t M = GC_ARG(args, 3, int64_t);
  int64_t N = GC_ARG(args, 4, int64_t);
  int64_t K = GC_ARG(args, 5, int64_t);

  int64_t end = gc_min(M, (task + 1) * ROWS);
  for (int64_t i = task * ROWS; i < end; i++) {
    copy_span(X + i * K, Z + i * N, K);
    copy_span(Y + i * (N - K), Z + i * N + K, N - K);
  }
}
