/* A correct GEMM that serves only M <= RMAX rows (and does nothing past
 * them, as GPU GEMVs with MMAX do): the tuner must never measure a point
 * outside @applies, such as RMAX=4 for 8 rows.
 *
 * @template capped_gemm
 * @op       gemm
 * @backend  cpu
 * @dtypes   f32
 * @kernel   capped_gemm
 * @param    RMAX 4 64 default 64 -- largest M served
 * @param    UNR  1 2 default 1 -- unused: a second parameter to walk
 * @applies  M <= RMAX -- rows beyond RMAX are not computed
 * @grid     M
 * @block    1
 * @priority 0
 */
__attribute__((visibility("default"))) void capped_gemm(void **args, int64_t task) {
  const float *A = *(const float **)args[0], *B = *(const float **)args[1];
  float *C = *(float **)args[2];
  int64_t M = *(int64_t *)args[3], N = *(int64_t *)args[4], K = *(int64_t *)args[5];
  if (M > RMAX) return; /* outside @applies */
  for (int64_t j = 0; j < N; j++) {
    float s = 0;
    for (int64_t k = 0; k < K; k++) s += A[task * K + k] * B[j * K + k];
    C[task * N + j] = s;
  }
}
