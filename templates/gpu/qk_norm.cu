/* qk_norm.cu — GPU RMS normalisation of the query and key heads of a QKV
 * projection's rows, in place (Qwen3's q_norm and k_norm): in QKV[M,
 * (H+2G)·D], head h of row i (its D values) becomes
 * x / sqrt(mean(x²) + eps) * qn (h < H) or * kn (H <= h < H+G); the G
 * value heads are not touched.
 *
 * @template qk_norm_gpu
 * @op qk_norm
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel qk_norm_gpu
 * @param THREADS 64 128 256 512 default 128 -- threads per block
 * @param TPH 4 8 16 32 default 32 -- threads per head, lanes of one warp
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @constraint TPH <= WARP -- a head's threads reduce with shuffles inside a warp
 * @grid cdiv(M * (H + G), THREADS / TPH) 1 1
 * @block THREADS 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * Head q = b*HPB + t/TPH of block b (HPB = THREADS/TPH heads a block; head
 * q is head q % (H+G) of row q / (H+G)) belongs to the TPH aligned lanes
 * t/TPH*TPH .. +TPH-1 of a warp; lane l of them owns elements l, l+TPH,
 * ... Pass 1 sums x² in fp32 and reduces over the head's lanes with
 * shuffles (every lane of the warp takes part, those past the last head
 * with 0); pass 2 writes x * (1/sqrt(ss/D + eps)) * w back, each lane
 * rewriting only the elements it read. The buffer is C's dtype (A and C
 * are one dtype in every @dtypes entry).
 */

#define QKN_HPB (THREADS / TPH) /* heads per block */

GC_KERNEL_BOUNDS(THREADS)
void qk_norm_gpu(TC *QKV, const TB *qn, const TB *kn, int64_t M, int64_t H, int64_t G, int64_t D, float eps) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  int l = gc_tid() % TPH;
  int64_t q = (int64_t)gc_bid() * QKN_HPB + gc_tid() / TPH;
  int live = q < M * (H + G);
  int64_t row = live ? q / (H + G) : 0, h = live ? q % (H + G) : 0;
  TC *x = QKV + (row * (H + 2 * G) + h) * D;
  float ss = 0.0f;
  for (int64_t j = l; live && j < D; j += TPH) {
    float v = LOAD_C(x, j);
    ss += v * v;
  }
  ss = gc_group_sum(ss, TPH);
  if (!live)
    return;
  float s = 1.0f / gc_sqrt(ss / (float)D + eps);
  const TB *w = h < H ? qn : kn;
  for (int64_t j = l; j < D; j += TPH)
    STORE_C(x, j, LOAD_C(x, j) * s * LOAD_B(w, j));
}
