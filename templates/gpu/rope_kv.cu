/* rope_kv.cu — GPU rotary position embedding fused with the KV-cache write:
 * token i (position p = pos0 + i) of QKV[M,(H+2G)·D] has its H query heads
 * rotated into Qout[i], its G key heads rotated into Kc[p] and its G value
 * heads copied into Vc[p]. No other cache row is touched.
 * Built for rope_kv_batch (batched decode), row i has its own position
 * p = pos[i] and cache slot s = pos[M + i]: its key and value heads go to
 * row s·S + p of Kc and Vc (S rows per slot); nothing else changes.
 *
 * @template rope_kv_gpu
 * @op rope_kv rope_kv_batch
 * @backend gpu
 * @dtypes f32 f16 bf16
 * @kernel rope_kv_gpu
 * @param THREADS 64 128 256 512 default 128 -- threads per block
 * @param TOK 1 2 4 8 default 1 -- tokens per block (they share nothing but the launch)
 * @param HEADS 1 2 4 8 16 default 4 -- head slots per block; the block's tokens share one cos/sin table
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @constraint TOK * 256 * 16 <= 32768 -- the cos/sin table (D <= 512) fits in 32 KiB of shared memory
 * @applies D % 2 == 0 && D <= 512 -- heads are whole pairs; the table is sized for D <= 512
 * @grid cdiv(M, TOK) * cdiv(H + G, HEADS) 1 1
 * @block THREADS 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * Block b handles tokens t*TOK .. t*TOK+TOK-1 (t = b / ns, ns =
 * cdiv(H+G, HEADS)) and head slots s*HEADS .. s*HEADS+HEADS-1 (s = b % ns),
 * fewer at the ends. Slot s < H is query head s; slot H+g is key head g
 * together with value head g. The block first computes cos θ and sin θ in
 * double for its tokens' D/2 pairs into shared memory, θ = p·inv_freq[j]
 * (the op's definition), then each thread takes (token, slot, pair) items,
 * consecutive threads consecutive pairs: pair j is (x[j], x[j+D/2]) when
 * layout = 0 and (x[2j], x[2j+1]) when layout = 1. The rotation
 * (a cosθ − b sinθ, a sinθ + b cosθ) is done in double and rounded once to
 * C's dtype: directly for f32; for f16/bf16 the double is first rounded to
 * fp32 "to odd" (truncate, set the last bit if inexact), which makes the
 * following round-to-nearest-even into 16 bits equal the correctly rounded
 * result. The thread that rotates pair j of key head g also copies the two
 * elements at the same places of value head g (bit for bit: A = C).
 */

#define ROPE_DMAX 512

/* Row i's position (rope_kv: pos0 + i; rope_kv_batch: its own) and its
 * row of the cache (rope_kv_batch: in its slot, S rows each). */
#if GC_OP_ROPE_KV_BATCH
#define ROPE_POS(i) ((int64_t)pos[i])
#define ROPE_ROW(i) ((int64_t)pos[M + (i)] * S + (int64_t)pos[i])
#else
#define ROPE_POS(i) (pos0 + (i))
#define ROPE_ROW(i) (pos0 + (i))
#endif

GC_KERNEL_BOUNDS(THREADS)
void rope_kv_gpu(const TA *QKV, TC *Qout, TC *Kc, TC *Vc, const double *inv_freq,
                 const int32_t *pos, int64_t M, int64_t H, int64_t G, int64_t D,
#if GC_OP_ROPE_KV_BATCH
                 int64_t S,
#endif
                 int64_t layout) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  /* positions are on the device, so a captured decode step replays at any position */
#if !GC_OP_ROPE_KV_BATCH
  const int64_t pos0 = *pos;
#endif
  GC_SHARED double tc[TOK][ROPE_DMAX / 2], ts[TOK][ROPE_DMAX / 2];
  int64_t ns = gc_cdiv(H + G, HEADS);
  if (ns <= 0 || D <= 0 || D % 2 || D > ROPE_DMAX)
    return; /* outside @applies */
  int64_t i0 = gc_bid() / ns * TOK, s0 = gc_bid() % ns * HEADS;
  int nt = (int)gc_min64(TOK, M - i0), nh = (int)gc_min64(HEADS, H + G - s0);
  int half = (int)(D / 2);
  for (int k = gc_tid(); k < nt * half; k += THREADS) {
    int t = k / half, j = k % half;
    double s, c;
    gc_sincos_f64((double)ROPE_POS(i0 + t) * inv_freq[j], &s, &c);
    tc[t][j] = c, ts[t][j] = s;
  }
  gc_barrier();

  int64_t W = (H + 2 * G) * D; /* QKV row length */
  for (int k = gc_tid(); k < nt * nh * half; k += THREADS) {
    int j = k % half, sh = k / half % nh, t = k / half / nh;
    int64_t i = i0 + t, p = ROPE_ROW(i), s = s0 + sh;
    int64_t ia = layout ? 2 * j : j, ib = layout ? 2 * j + 1 : j + half;
    const TA *x = QKV + i * W + s * D; /* query head s, or key head s - H */
    double a = LOAD_A(x, ia), b = LOAD_A(x, ib);
    double c = tc[t][j], sn = ts[t][j];
    TC *y = s < H ? Qout + (i * H + s) * D : Kc + (p * G + (s - H)) * D;
    STORE_C(y, ia, gc_rope_round(a * c - b * sn, GC_TC != GC_F32));
    STORE_C(y, ib, gc_rope_round(a * sn + b * c, GC_TC != GC_F32));
    if (s >= H) { /* value head s - H: same element places, copied */
      const TA *v = x + G * D;
      TC *z = Vc + (p * G + (s - H)) * D;
      z[ia] = v[ia];
      z[ib] = v[ib];
    }
  }
}
