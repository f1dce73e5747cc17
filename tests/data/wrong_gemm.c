/* A deliberately broken GEMM for the tuner tests. BUG=1 drops the last k
 * term (fast and wrong), BUG=2 dereferences NULL, BUG=3 never returns.
 *
 * @template wrong_gemm
 * @op       gemm
 * @backend  cpu
 * @dtypes   f32
 * @kernel   wrong_gemm
 * @param    BUG 1 2 3 default 1 -- which way to be wrong
 * @grid     M
 * @block    1
 * @priority 9
 */
__attribute__((visibility("default"))) void wrong_gemm(void **args, int64_t task) {
  const float *A = *(const float **)args[0], *B = *(const float **)args[1];
  float *C = *(float **)args[2];
  int64_t N = *(int64_t *)args[4], K = *(int64_t *)args[5], i = task;
  if (BUG == 2) C = (float *)0;
  for (volatile int spin = 0; BUG == 3; spin++) {
  }
  for (int64_t j = 0; j < N; j++) {
    float s = 0;
    for (int64_t k = 0; k + 1 < K; k++) s += A[i * K + k] * B[j * K + k];
    C[i * N + j] = s;
  }
}
