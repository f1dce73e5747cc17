/* A plain, correct GEMM with a four-point space, for tests that need an
 * exhaustive sweep to finish in seconds.
 *
 * @template tiny_gemm
 * @op       gemm
 * @backend  cpu
 * @dtypes   f32
 * @kernel   tiny_gemm
 * @param    ROWS 1 2 default 1 -- rows of C per task
 * @param    UNR  1 4 default 1 -- k-loop unroll
 * @grid     cdiv(M, ROWS)
 * @block    1
 * @priority 0
 */
__attribute__((visibility("default"))) void tiny_gemm(void **args, int64_t task) {
  const float *A = *(const float **)args[0], *B = *(const float **)args[1];
  float *C = *(float **)args[2];
  int64_t M = *(int64_t *)args[3], N = *(int64_t *)args[4], K = *(int64_t *)args[5];
  for (int64_t i = task * ROWS; i < M && i < (task + 1) * ROWS; i++)
    for (int64_t j = 0; j < N; j++) {
      float s[UNR] = {0};
      int64_t k = 0;
      for (; k + UNR <= K; k += UNR)
        for (int u = 0; u < UNR; u++) s[u] += A[i * K + k + u] * B[j * K + k + u];
      for (; k < K; k++) s[0] += A[i * K + k] * B[j * K + k];
      float t = 0;
      for (int u = 0; u < UNR; u++) t += s[u];
      C[i * N + j] = t;
    }
}
