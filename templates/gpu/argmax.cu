/* argmax.cu — the index of the largest element of each row of X on the
 * GPU, so that a greedy decode step copies one id back instead of the
 * logits (ties go to the lowest index; NaN is never chosen unless the row
 * is all NaN, then index 0).
 *
 * @template argmax_gpu
 * @op       argmax
 * @backend  gpu
 * @dtypes   f32 f16 bf16
 * @kernel   argmax_gpu
 * @param    THREADS 64 128 256 512 1024 default 512 -- threads per block (one block per row)
 * @param    UNROLL 1 2 4 8 default 4 -- loads in flight per thread
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT
 * @grid     M
 * @block    THREADS
 * @priority 1
 */

/* (v, i) beats (w, j): larger value, or equal value and lower index; an
 * index < 0 is "nothing yet". */
GC_DEVICE bool am_better(float v, int i, float w, int j) {
  if (i < 0) return false;
  if (j < 0) return true;
  return v > w || (v == w && i < j);
}

GC_KERNEL void argmax_gpu(const TA *X, int32_t *out, int64_t M, int64_t N) {
  GC_SHARED float sv[THREADS / GC_WARP];
  GC_SHARED int si[THREADS / GC_WARP];
  const TA *x = X + gc_bid() * N; /* row [N] */
  float best = -GC_INF;
  int at = -1;
  for (int64_t base = gc_tid(); base < N; base += (int64_t)THREADS * UNROLL) {
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++) {
      int64_t i = base + (int64_t)u * THREADS;
      if (i >= N) break;
      float v = LOAD_A(x, i);
      if (v == v && am_better(v, (int)i, best, at)) best = v, at = (int)i;
    }
  }
  for (int m = GC_WARP / 2; m > 0; m /= 2) {
    float w = gc_shfl_xor(best, m);
    int j = gc_shfl_xor(at, m);
    if (am_better(w, j, best, at)) best = w, at = j;
  }
  int warp = gc_tid() / GC_WARP;
  if (gc_lane() == 0) sv[warp] = best, si[warp] = at;
  gc_barrier();
  if (gc_tid() == 0) {
    for (int k = 1; k < THREADS / GC_WARP; k++)
      if (am_better(sv[k], si[k], best, at)) best = sv[k], at = si[k];
    out[gc_bid()] = at < 0 ? 0 : at;
  }
  (void)M;
}
