/* A correct GEMM whose REP=8 variant computes every element eight times:
 * several times slower than REP=1, for the test that clearly slower
 * candidates stop timing early.
 *
 * @template slow_gemm
 * @op       gemm
 * @backend  cpu
 * @dtypes   f32
 * @kernel   slow_gemm
 * @param    REP 1 2 3 8 default 1 -- times each element is computed
 * @grid     M
 * @block    1
 * @priority 0
 */
__attribute__((visibility("default"))) void slow_gemm(void **args, int64_t task) {
  const float *A = *(const float **)args[0], *B = *(const float **)args[1];
  float *C = *(float **)args[2];
  int64_t N = *(int64_t *)args[4], K = *(int64_t *)args[5];
  for (int64_t j = 0; j < N; j++)
    for (int r = 0; r < REP; r++) {
      volatile float s = 0; /* kept: each repetition really runs */
      for (int64_t k = 0; k < K; k++) s = s + A[task * K + k] * B[j * K + k];
      C[task * N + j] = s;
    }
}
