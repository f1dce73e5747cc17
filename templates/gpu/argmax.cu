/* argmax.cu — the index of the largest element of each row of X on the
 * GPU, so that a greedy decode step copies one id back instead of the
 * logits (ties go to the lowest index; NaN is never chosen unless the row
 * is all NaN, then index 0). argmax_step also posts the last row's index
 * to the host, into box0 or box1 as pos[0] is even or odd (page-locked
 * memory the host reads after the step: no copy back), and advances the
 * step's position pos[0] by M (the block that writes row M-1's index does
 * all three), so that the next step's captured graph replays with nothing
 * between them.
 *
 * @template argmax_gpu
 * @op       argmax argmax_step
 * @backend  gpu
 * @dtypes   f32 f16 bf16
 * @kernel   argmax_gpu
 * @param    THREADS 64 128 256 512 1024 default 256 -- threads per block
 * @param    UNROLL 1 2 4 8 default 4 -- loads in flight per thread
 * @param    SPLIT 1 4 16 32 64 default 32 -- blocks per row, each over a 1/SPLIT slice
 * @param    VEC 1 8 default 8 -- elements per load (8: one 16-byte load of f16/bf16, two of f32) where N % 8 == 0 and X is 16-byte aligned; else one at a time (H100, f16 argmax_step of the 1B's 128256 logits alone, after a cache flush: 5.9 us against 8.8 with 1; in the decode step 1058.8 against 1057.4 tok/s after 700 tokens; bench/RESULTS.md, session 63)
 * @defaults argmax argmax_step SPLIT=64 if !AMD -- H200, the 1B's 128256-entry row: 1161.4 / 1160.5 / 1160.5 tok/s with SPLIT=64 (THREADS 512 / 1024 / 256) against 1154.6 / 1151.6 / 1155.7 at SPLIT=32, alternated in one call (bench/RESULTS.md, session 33)
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT
 * @applies  SPLIT == 1 || (M <= 16 && N <= 16777216) -- the workspace holds 16 rows; indices are exact in fp32
 * @grid     M * SPLIT
 * @block    THREADS
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * One row on one block leaves all but one SM idle (a 128256-entry row took
 * about 110 us on an H100); with SPLIT > 1 each block reduces a slice and
 * writes its (value, index) to a module-scope workspace, and the block that
 * takes the last ticket of its row reduces the SPLIT partials (as in
 * attention_decode: launches of one code object must not run concurrently).
 */

#define AM_RMAX 16
GC_GLOBAL float am_ws[SPLIT > 1 ? AM_RMAX * SPLIT * 2 : 1];
GC_GLOBAL unsigned am_cnt[SPLIT > 1 ? AM_RMAX : 1];

/* (v, i) beats (w, j): larger value, or equal value and lower index; an
 * index < 0 is "nothing yet". */
GC_DEVICE bool am_better(float v, int i, float w, int j) {
  if (i < 0) return false;
  if (j < 0) return true;
  return v > w || (v == w && i < j);
}

/* The block's threads over x[i0, i1) in chunks of W elements, one load
 * each (W > 1: x + i0 aligned to the chunk's bytes, at most 16; i0 and
 * i1 - i0 multiples of W), every load of an UNROLL round first, then its
 * compares: each thread's best (value, index) so far in *best, *at. */
template <int W> GC_DEVICE void am_scan(const TA *x, int64_t i0, int64_t i1, float *best, int *at) {
  for (int64_t base = i0 + W * (int64_t)gc_tid(); base < i1; base += (int64_t)W * THREADS * UNROLL) {
    float v[UNROLL][W];
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++)
      if (base + (int64_t)W * u * THREADS < i1)
        LOADV_A(W, x, base + (int64_t)W * u * THREADS, v[u]);
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++) {
      const int64_t i = base + (int64_t)W * u * THREADS;
      if (i >= i1) break;
      GC_UNROLL(W)
      for (int e = 0; e < W; e++)
        if (v[u][e] == v[u][e] && am_better(v[u][e], (int)(i + e), *best, *at)) *best = v[u][e], *at = (int)(i + e);
    }
  }
}

/* Reduce (best, at) over the block; thread 0 gets the result. */
GC_DEVICE void am_block_reduce(float *best, int *at, float *sv, int *si) {
  for (int m = GC_WARP / 2; m > 0; m /= 2) {
    float w = gc_shfl_xor(*best, m);
    int j = gc_shfl_xor(*at, m);
    if (am_better(w, j, *best, *at)) *best = w, *at = j;
  }
  int warp = gc_tid() / GC_WARP;
  if (gc_lane() == 0) sv[warp] = *best, si[warp] = *at;
  gc_barrier();
  if (gc_tid() == 0)
    for (int k = 1; k < THREADS / GC_WARP; k++)
      if (am_better(sv[k], si[k], *best, *at)) *best = sv[k], *at = si[k];
}

/* Row row's index at out[row]; for argmax_step, row M-1's writer also
 * posts it to box[pos % 2] and moves the position on by the M rows (one
 * writer: no atomic). No system-scope fence: the host reads a box only
 * after waiting for the event recorded behind the step (gc_dev_take),
 * which makes the kernel's stores to page-locked memory visible, and
 * nothing on the device reads the box (H100, the 1B's decode: without
 * the fence 1056.7 / 1060.8 tok/s after 128 / 700 tokens against 1054.8 /
 * 1058.8 with it, alternated; bench/RESULTS.md, session 63). */
GC_DEVICE void am_put(int32_t *out, int32_t *pos, int32_t *const box[2], int64_t row, int at, int64_t M) {
  const int32_t id = at < 0 ? 0 : at;
  out[row] = id;
  if (GC_OP_ARGMAX_STEP && row == M - 1) {
    const int32_t p0 = pos[0];
    box[p0 % 2][0] = id;
    pos[0] = p0 + (int32_t)M;
  }
}

/* args: X[M, N] (TA), out[M] (int32), argmax_step: pos[1], box0[1],
 * box1[1] (int32, in and out), int64 M, N. */
GC_KERNEL void argmax_gpu(const TA *X, int32_t *out,
#if GC_OP_ARGMAX_STEP
                          int32_t *pos, int32_t *box0, int32_t *box1,
#endif
                          int64_t M, int64_t N) {
#if GC_OP_ARGMAX_STEP
  int32_t *const box[2] = {box0, box1};
#else
  int32_t *pos = nullptr, *const box[2] = {nullptr, nullptr};
#endif
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  GC_SHARED float sv[THREADS / GC_WARP];
  GC_SHARED int si[THREADS / GC_WARP];
  GC_SHARED int s_last;
  if (SPLIT > 1 && (M > AM_RMAX || N > 16777216))
    return; /* outside @applies */
  const int64_t row = gc_bid() / SPLIT, sp = gc_bid() % SPLIT;
  /* VEC > 1: whole 8-element chunks (slices of whole chunks) where every
     row starts 16-byte aligned; else, or VEC 1, one element a load */
  const bool vec = VEC > 1 && N % 8 == 0 && (uint64_t)X % 16 == 0;
  const int64_t step = vec ? 8 : 1, cs = gc_cdiv(gc_cdiv(N, SPLIT), step) * step;
  const int64_t i0 = gc_min64(N, sp * cs), i1 = gc_min64(N, i0 + cs);
  const TA *x = X + row * N; /* row [N] */
  float best = -GC_INF;
  int at = -1;
  if (vec)
    am_scan<8>(x, i0, i1, &best, &at);
  else
    am_scan<1>(x, i0, i1, &best, &at);
  am_block_reduce(&best, &at, sv, si);
  if (SPLIT == 1) {
    if (gc_tid() == 0)
      am_put(out, pos, box, row, at, M);
    return;
  }
  float *ws = am_ws + row * SPLIT * 2;
  if (gc_tid() == 0) {
    gc_st_cg(ws + 2 * sp, best);
    gc_st_cg(ws + 2 * sp + 1, (float)at); /* exact: at < 2^24 */
    gc_fence_device();
    s_last = gc_atomic_add(&am_cnt[row], 1u) == SPLIT - 1;
  }
  gc_barrier();
  if (!s_last)
    return;
  gc_fence_device();
  best = -GC_INF, at = -1;
  for (int k = gc_tid(); k < SPLIT; k += THREADS) {
    float v = gc_ld_cg(ws + 2 * k);
    int j = (int)gc_ld_cg(ws + 2 * k + 1);
    if (am_better(v, j, best, at)) best = v, at = j;
  }
  am_block_reduce(&best, &at, sv, si);
  if (gc_tid() == 0) {
    am_put(out, pos, box, row, at, M);
    am_cnt[row] = 0u; /* ready for the next launch (stream order) */
  }
}
