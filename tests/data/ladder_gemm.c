/* A correct GEMM whose time is a ladder: REP=r computes every element r
 * times, so each step of REP makes it four times slower, far beyond the
 * timing noise of a shared CPU (steps of two were flipped once, on a
 * 2-core CI machine running two test workers). The sweep's winner is then the same on every run, which
 * the shard test compares across runs.
 *
 * @template ladder_gemm
 * @op       gemm
 * @backend  cpu
 * @dtypes   f32
 * @kernel   ladder_gemm
 * @param    REP 1 4 16 64 default 16 -- times each element is computed
 * @grid     M
 * @block    1
 * @priority 0
 */
__attribute__((visibility("default"))) void ladder_gemm(void **args, int64_t task) {
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
