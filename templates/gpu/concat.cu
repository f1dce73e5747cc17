/* concat.cu — GPU join of two arrays' rows: Z[M,N] = [X[M,K] | Y[M,N-K]]
 * (the QKV of a layer whose V rows have a block format of their own: the
 * Q|K projection's rows, then V's; models/recipe.h), each element widened
 * to fp32 and rounded once to Z's dtype (a copy where the dtypes agree).
 *
 * @template concat_gpu
 * @op concat
 * @backend gpu
 * @dtypes f32 f16 bf16
 * @kernel concat_gpu
 * @param THREADS 64 128 256 512 1024 default 256 -- threads per block
 * @param EPT 1 2 4 8 default 4 -- elements of Z per thread
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @grid cdiv(M * N, THREADS * EPT) 1 1
 * @block THREADS 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * Z seen flat: block b covers elements b*E .. b*E+E-1, E = THREADS*EPT;
 * access u of thread t is element b*E + u*THREADS + t (each access of a
 * warp contiguous in Z), read from X or Y by its column. Elements past
 * M*N are not touched. A few rows of a decode or short prefill pass:
 * bound by the launch, not the bytes.
 */

/* args: X[M,K] (TA), Y[M,N-K] (TA), Z[M,N] (TC), int64 M, N, K. */
GC_KERNEL_BOUNDS(THREADS)
void concat_gpu(const TA *X, const TA *Y, TC *Z, int64_t M, int64_t N, int64_t K) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  const int64_t base = gc_bid() * (int64_t)(THREADS * EPT), n = M * N;
  GC_UNROLL(EPT)
  for (int u = 0; u < EPT; u++) {
    const int64_t i = base + (int64_t)u * THREADS + gc_tid();
    if (i < n) {
      const int64_t r = i / N, c = i % N;
      STORE_C(Z, i, c < K ? LOAD_A(X, r * K + c) : LOAD_A(Y, r * (N - K) + c - K));
    }
  }
}
