/* rope_kv.cu — GPU rotary position embedding fused with the KV-cache write:
 * token i (position p = pos0 + i) of QKV[M,(H+2G)·D] has its H query heads
 * rotated into Qout[i], its G key heads rotated into Kc[p] and its G value
 * heads copied into Vc[p]. No other cache row is touched.
 * Built for rope_kv_batch (batched decode), row i has its own position
 * p = pos[i] and cache slot s = pos[M + i]: its key and value heads go to
 * row s·S + p of Kc and Vc (S rows per slot); nothing else changes.
 * Built for bias_rope_kv (Qwen2's biases), every value read of QKV has its
 * column's bias b added first and is rounded to C's dtype, as the bias
 * step's store would leave it (value heads too); QKV is not written.
 *
 * @template rope_kv_gpu
 * @op rope_kv rope_kv_batch bias_rope_kv
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel rope_kv_gpu
 * @param THREADS 64 128 256 512 default 128 -- threads per block
 * @param TOK 1 2 4 8 default 1 -- tokens per block (they share nothing but the launch)
 * @param HEADS 1 2 4 8 16 32 64 default 4 -- head slots per block; the block's tokens share one cos/sin table (SPAN = 1: head slots per thread, their loads issued together)
 * @param SPAN 0 1 default 0 -- 1: a thread takes one pair of one token through HEADS head slots, its cos/sin in registers (no table, no barrier; consecutive threads consecutive pairs)
 * @constraint SPAN == 0 || (TOK == 1 && HEADS <= 16) -- a thread of SPAN = 1 serves one token, its slots' pairs in registers
 * @defaults rope_kv_batch SPAN=1 HEADS=1 if !AMD -- a batched decode step's few rows: a thread a pair, no table (1..8 rows of the 8B shape: 4.6-4.9 us against 7.0-7.2; bench/RESULTS.md, session 17)
 * @defaults rope_kv bias_rope_kv SPAN=1 HEADS=1 if M <= 8 && !AMD -- decode (a split QKV's own rope_kv) and prompts of up to 8 tokens, as rope_kv_batch (8B shape, M = 1: 2.29 us against 4.82, gcore-tune on the H200; bench/RESULTS.md, session 22)
 * @defaults rope_kv bias_rope_kv HEADS=64 THREADS=256 if M >= 128 && !AMD -- prefill: one block a token, so one cos/sin table a token (8B shape, 4000 tokens: 93.9 us against 111.8, 512: 16.7 against 19.8; fewer tokens lose)
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @constraint TOK * 256 * 16 <= 32768 -- the cos/sin table (D <= 512) fits in 32 KiB of shared memory
 * @applies D % 2 == 0 && D <= 512 -- heads are whole pairs; the table is sized for D <= 512
 * @grid (1 - SPAN) * cdiv(M, TOK) * cdiv(H + G, HEADS) + SPAN * cdiv(M * cdiv(H + G, HEADS) * (D / 2), THREADS) 1 1
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
 *
 * SPAN = 1: thread k of the grid takes item k = ((token·ns) + slot group)·D/2
 * + pair j (ns = cdiv(H+G, HEADS) groups of HEADS slots): it computes its
 * pair's cos θ and sin θ itself, loads the pair of each of its slots (and
 * of the value heads beside its key heads) before it rotates and stores
 * any, so a thread waits on memory once; the same arithmetic, so the same
 * bits. The table's block-wide step is what bounds SPAN = 0 in prefill
 * (every block of a token recomputes it, then all threads meet).
 */

#define ROPE_DMAX 512

/* Value v of QKV column c as the rotation reads it: bias_rope_kv adds b[c]
 * and rounds to C's dtype (the bias step's store); else v. */
GC_DEVICE float rope_in(float v, const TB *b, int64_t c) {
#if GC_OP_BIAS_ROPE_KV
  TC t[1];
  STORE_C(t, 0, v + LOAD_B(b, c));
  return LOAD_C(t, 0);
#else
  (void)b, (void)c;
  return v;
#endif
}

/* Element i of a value head (QKV column c) as the cache gets it: bit for
 * bit (A = C), or bias_rope_kv's sum rounded once. */
GC_DEVICE TC rope_value(const TA *v, int64_t i, const TB *b, int64_t c) {
#if GC_OP_BIAS_ROPE_KV
  TC t[1];
  STORE_C(t, 0, LOAD_A(v, i) + LOAD_B(b, c));
  return t[0];
#else
  (void)b, (void)c;
  return v[i];
#endif
}

/* Row i's position (rope_kv: pos0 + i; rope_kv_batch: its own) and its
 * row of the cache (rope_kv_batch: in its slot, S rows each). */
#if GC_OP_ROPE_KV_BATCH
#define ROPE_POS(i) ((int64_t)pos[i])
#define ROPE_ROW(i) ((int64_t)pos[M + (i)] * S + (int64_t)pos[i])
#else
#define ROPE_POS(i) (pos0 + (i))
#define ROPE_ROW(i) (pos0 + (i))
#endif

/* SPAN = 1: the item of this thread (see above). */
GC_DEVICE void rope_span(const TA *QKV, TC *Qout, TC *Kc, TC *Vc, const double *inv_freq, const int32_t *pos,
                         const TB *bias, int64_t M, int64_t H, int64_t G, int64_t D, int64_t W, int64_t layout, int64_t ns,
#if GC_OP_ROPE_KV_BATCH
                         int64_t S
#else
                         int64_t pos0
#endif
) {
  const int64_t half = D / 2, k = (int64_t)gc_bid() * THREADS + gc_tid();
  if (k >= M * ns * half)
    return;
  const int64_t j = k % half, s0 = k / half % ns * HEADS, i = k / half / ns, p = ROPE_ROW(i);
  const int64_t ia = layout ? 2 * j : j, ib = layout ? 2 * j + 1 : j + half;
  const int nh = (int)gc_min64(HEADS, H + G - s0);
  const TA *x = QKV + i * W + s0 * D;
  float a[HEADS], b[HEADS]; /* exact: A's dtype widened (bias_rope_kv: rope_in's) */
  TC va[HEADS], vb[HEADS];  /* value pairs, copied bit for bit (A = C; bias_rope_kv: rope_value's) */
  GC_UNROLL(HEADS)
  for (int u = 0; u < HEADS; u++)
    if (u < nh) {
      const int64_t c = (s0 + u) * D; /* the head's first column of QKV */
      a[u] = rope_in(LOAD_A(x + u * D, ia), bias, c + ia), b[u] = rope_in(LOAD_A(x + u * D, ib), bias, c + ib);
      if (s0 + u >= H) /* a key head: its value head's pair too */
        va[u] = rope_value(x + G * D + u * D, ia, bias, c + G * D + ia),
        vb[u] = rope_value(x + G * D + u * D, ib, bias, c + G * D + ib);
    }
  double c, sn;
  gc_sincos_f64((double)ROPE_POS(i) * inv_freq[j], &sn, &c);
  GC_UNROLL(HEADS)
  for (int u = 0; u < HEADS; u++) {
    if (u >= nh)
      break;
    const int64_t sl = s0 + u;
    TC *y = sl < H ? Qout + (i * H + sl) * D : Kc + (p * G + (sl - H)) * D;
    const double da = a[u], db = b[u];
    STORE_C(y, ia, gc_rope_round(da * c - db * sn, GC_TC != GC_F32));
    STORE_C(y, ib, gc_rope_round(da * sn + db * c, GC_TC != GC_F32));
    if (sl >= H) {
      TC *z = Vc + (p * G + (sl - H)) * D;
      z[ia] = va[u];
      z[ib] = vb[u];
    }
  }
}

GC_KERNEL_BOUNDS(THREADS)
void rope_kv_gpu(const TA *QKV, TC *Qout, TC *Kc, TC *Vc, const double *inv_freq,
                 const int32_t *pos,
#if GC_OP_BIAS_ROPE_KV
                 const TB *bias,
#endif
                 int64_t M, int64_t H, int64_t G, int64_t D,
#if GC_OP_ROPE_KV_BATCH
                 int64_t S,
#endif
                 int64_t layout) {
#if !GC_OP_BIAS_ROPE_KV
  const TB *bias = (const TB *)QKV; /* never read: a pointer to offset, unlike null */
#endif
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  /* positions are on the device, so a captured decode step replays at any position */
#if !GC_OP_ROPE_KV_BATCH
  const int64_t pos0 = *pos;
#endif
  int64_t ns = gc_cdiv(H + G, HEADS);
  if (ns <= 0 || D <= 0 || D % 2 || D > ROPE_DMAX)
    return; /* outside @applies */
  int64_t W = (H + 2 * G) * D; /* QKV row length */
#if SPAN
  rope_span(QKV, Qout, Kc, Vc, inv_freq, pos, bias, M, H, G, D, W, layout, ns
#if GC_OP_ROPE_KV_BATCH
            , S
#else
            , pos0
#endif
  );
#else
  GC_SHARED double tc[TOK][ROPE_DMAX / 2], ts[TOK][ROPE_DMAX / 2];
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

  for (int k = gc_tid(); k < nt * nh * half; k += THREADS) {
    int j = k % half, sh = k / half % nh, t = k / half / nh;
    int64_t i = i0 + t, p = ROPE_ROW(i), s = s0 + sh;
    int64_t ia = layout ? 2 * j : j, ib = layout ? 2 * j + 1 : j + half;
    const TA *x = QKV + i * W + s * D; /* query head s, or key head s - H */
    double a = rope_in(LOAD_A(x, ia), bias, s * D + ia), b = rope_in(LOAD_A(x, ib), bias, s * D + ib);
    double c = tc[t][j], sn = ts[t][j];
    TC *y = s < H ? Qout + (i * H + s) * D : Kc + (p * G + (s - H)) * D;
    STORE_C(y, ia, gc_rope_round(a * c - b * sn, GC_TC != GC_F32));
    STORE_C(y, ib, gc_rope_round(a * sn + b * c, GC_TC != GC_F32));
    if (s >= H) { /* value head s - H: same element places, copied */
      const TA *v = x + G * D;
      TC *z = Vc + (p * G + (s - H)) * D;
      z[ia] = rope_value(v, ia, bias, (s + G) * D + ia);
      z[ib] = rope_value(v, ib, bias, (s + G) * D + ib);
    }
  }
#endif
}
