/* qk_norm.cu — GPU RMS normalisation of the query and key heads of a QKV
 * projection's rows, in place (Qwen3's q_norm and k_norm): in QKV[M,
 * (H+2G)·D], head h of row i (its D values) becomes
 * x / sqrt(mean(x²) + eps) * qn (h < H) or * kn (H <= h < H+G); the G
 * value heads are not touched.
 * Built for qk_norm_rope_kv, the normalised heads are not written back:
 * each normalised value is rounded to C's dtype (the in-place step's
 * store) and rope_kv's rotation follows at position p = pos0 + i (query
 * heads into Qout[i], key heads into Kc[p]); the thread that does pair j
 * of key head g copies the same two elements of value head g into Vc[p],
 * bit for bit. QKV is not written.
 *
 * @template qk_norm_gpu
 * @op qk_norm qk_norm_rope_kv
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
 * are one dtype in every @dtypes entry). qk_norm_rope_kv: lane l owns the
 * RoPE pairs l, l+TPH, ... of its head (rope_kv.cu's pairs by layout), the
 * sum of squares over them; pass 2 rotates each normalised pair in double
 * as rope_kv.cu does (cos and sin of p·inv_freq[j], gc_rope_round).
 */

#define QKN_HPB (THREADS / TPH) /* heads per block */

#if GC_OP_QK_NORM_ROPE_KV
/* Value v of head h normalised by s and its weight w[i], rounded to C's
 * dtype as qk_norm's store would. */
GC_DEVICE double qkn_normed(float v, float s, const TB *w, int64_t i) {
  TC t[1];
  STORE_C(t, 0, v * s * LOAD_B(w, i));
  return LOAD_C(t, 0);
}

/* args: QKV[M,(H+2G)·D] (TA), Qout[M,H·D], Kc[S,G·D], Vc[S,G·D] (TC),
 * double inv_freq[D/2], int32 pos[1] (pos0), qn[D], kn[D] (TB), int64 M,
 * H, G, D, layout, float eps. */
GC_KERNEL_BOUNDS(THREADS)
void qk_norm_gpu(const TA *QKV, TC *Qout, TC *Kc, TC *Vc, const double *inv_freq, const int32_t *pos,
                 const TB *qn, const TB *kn, int64_t M, int64_t H, int64_t G, int64_t D, int64_t layout,
                 float eps) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  const int64_t pos0 = *pos, half = D / 2; /* on the device: a captured step replays at any position */
  int l = gc_tid() % TPH;
  int64_t q = (int64_t)gc_bid() * QKN_HPB + gc_tid() / TPH;
  int live = q < M * (H + G) && D > 0 && D % 2 == 0;
  int64_t row = live ? q / (H + G) : 0, h = live ? q % (H + G) : 0, p = pos0 + row;
  const TA *x = QKV + (row * (H + 2 * G) + h) * D;
  float ss = 0.0f;
  for (int64_t j = l; live && j < half; j += TPH) {
    const float a = LOAD_A(x, layout ? 2 * j : j), b = LOAD_A(x, layout ? 2 * j + 1 : j + half);
    ss += a * a + b * b;
  }
  ss = gc_group_sum(ss, TPH);
  if (!live)
    return;
  const float s = 1.0f / gc_sqrt(ss / (float)D + eps);
  const TB *w = h < H ? qn : kn;
  TC *y = h < H ? Qout + (row * H + h) * D : Kc + (p * G + h - H) * D;
  for (int64_t j = l; j < half; j += TPH) {
    const int64_t ia = layout ? 2 * j : j, ib = layout ? 2 * j + 1 : j + half;
    const double a = qkn_normed(LOAD_A(x, ia), s, w, ia), b = qkn_normed(LOAD_A(x, ib), s, w, ib);
    double c, sn;
    gc_sincos_f64((double)p * inv_freq[j], &sn, &c);
    STORE_C(y, ia, gc_rope_round(a * c - b * sn, GC_TC != GC_F32));
    STORE_C(y, ib, gc_rope_round(a * sn + b * c, GC_TC != GC_F32));
    if (h >= H) { /* key head h - H: its value head's pair, copied */
      TC *z = Vc + (p * G + h - H) * D;
      z[ia] = x[G * D + ia];
      z[ib] = x[G * D + ib];
    }
  }
}
#else
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
#endif
