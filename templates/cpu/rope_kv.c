/* rope_kv.c — CPU rotary position embedding fused with the KV-cache write:
 * token i (position p = pos0 + i) of QKV[M,(H+2G)·D] has its H query heads
 * rotated into Qout[i], its G key heads rotated into Kc[p] and its G value
 * heads copied into Vc[p]. No other cache row is touched.
 * Built for rope_kv_batch (batched decode), row i has its own position
 * p = pos[i] and cache slot s = pos[M + i]: its key and value heads go to
 * row s·S + p of Kc and Vc (S rows per slot); nothing else changes.
 * Built for bias_rope_kv (Qwen2) or qk_norm_rope_kv (Qwen3), each head is
 * first changed as the step that the op folds in would leave it in C's
 * dtype: + its slice of the bias b (value heads too), or RMS-normalised
 * and scaled by qn or kn (query and key heads; qk_norm.c's arithmetic, in
 * its order, so the same bits); QKV itself is not written.
 *
 * @template rope_kv_cpu
 * @op rope_kv rope_kv_batch bias_rope_kv qk_norm_rope_kv
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel rope_kv_cpu
 * @param TOK 1 2 4 8 16 32 default 4 -- tokens per task
 * @param HEADS 1 2 4 8 16 32 64 default 8 -- head slots per task (a slot: one query head, or one key head with its value head)
 * @param VEC 8 16 default 16 -- fp32 lanes per vector (VEC/2 doubles)
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint TOK * HEADS * 128 * (SA + 2 * SC) <= L2 -- a task's slices of QKV, Qout/Kc and Vc fit in L2 (D = 128)
 * @constraint TOK * HEADS >= 4 -- a task amortises its launch over at least 4 heads
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @applies D % 2 == 0 && D <= 1024 -- heads are whole pairs; per-head scratch lives on the stack
 * @grid cdiv(M, TOK) * cdiv(H + G, HEADS) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t handles tokens b*TOK .. b*TOK+TOK-1 and head slots
 * s*HEADS .. s*HEADS+HEADS-1 (fewer at the ends), b = t / cdiv(H+G,HEADS),
 * s = t % cdiv(H+G,HEADS). Slot s < H is query head s; slot H+g is key
 * head g together with value head g.
 *
 * Numerics follow the op's definition exactly: θ = p·inv_freq[j], cos θ
 * and sin θ are computed in double (by rope_sincos below, which needs no
 * libm), the rotation a·cosθ ∓ b·sinθ is done in double, and the result is
 * rounded once to the output dtype. For f16/bf16 outputs the double is
 * first rounded to fp32 "to odd" (truncate, then set the last bit if
 * inexact), which makes the following fp32 -> f16/bf16 round-to-nearest-
 * even give the correctly rounded double -> f16/bf16 result.
 *
 * Per token the task builds tables over the D elements of a head, in both
 * layouts alike: out[e] = x[e]·ce[e] + x[partner(e)]·se[e], where ce holds
 * cos θ of e's pair and se holds -sin θ for the pair's first element and
 * +sin θ for its second. The head math is then elementwise, in vectors of
 * VEC/2 doubles.
 */

#define DV (VEC / 2) /* doubles per vector */
typedef double rope_vd __attribute__((vector_size(DV * 8)));
typedef float rope_vf __attribute__((vector_size(DV * 4)));
typedef int64_t rope_vl __attribute__((vector_size(DV * 8)));
typedef int32_t rope_vi __attribute__((vector_size(DV * 4)));

/* sin x and cos x in double, for |x| < 2^20·π/2 to about 1 ulp (larger x
 * lose accuracy gradually). x is reduced to r in [-π/4, π/4] by a multiple
 * k of π/2 split into three parts (the first two have 32 significant bits,
 * so k·part is exact), then Taylor series to r^17 / r^18 are summed; the
 * first dropped term is below 2^-60. */
static void rope_sincos(double x, double *s, double *c) {
  const double P1 = 0x1.921fb544p+0, P2 = 0x1.0b4611a6p-34, P3 = 0x1.3198a2e037073p-69;
  double kf = x * 0x1.45f306dc9c883p-1; /* x·2/π */
  int64_t k = (int64_t)(kf + (kf >= 0 ? 0.5 : -0.5));
  double r = ((x - (double)k * P1) - (double)k * P2) - (double)k * P3;
  double r2 = r * r, ts = 1, tc = 1;
  /* sin r = r·(1 - r²/(2·3)·(1 - r²/(4·5)·(...))), cos r = 1 - r²/(1·2)·(...) */
  for (int n = 17; n >= 3; n -= 2)
    ts = 1 - r2 * (1.0 / (double)(n * (n - 1))) * ts;
  for (int n = 18; n >= 2; n -= 2)
    tc = 1 - r2 * (1.0 / (double)(n * (n - 1))) * tc;
  double sr = r * ts, cr = tc;
  switch (k & 3) {
  case 0: *s = sr, *c = cr; break;
  case 1: *s = cr, *c = -sr; break;
  case 2: *s = -sr, *c = -cr; break;
  default: *s = -cr, *c = sr; break;
  }
}

/* ce[e], se[e] for e < D at position p (see the header); entries D..dp-1
 * are 0. layout 0: pair j is (j, j+D/2); layout 1: pair j is (2j, 2j+1). */
static void rope_tables(const double *inv_freq, int64_t D, int64_t dp, double p,
                        int64_t layout, double *ce, double *se) {
  int64_t h = D / 2;
  for (int64_t j = 0; j < h; j++) {
    double s, c;
    rope_sincos(p * inv_freq[j], &s, &c);
    int64_t e0 = layout ? 2 * j : j, e1 = layout ? 2 * j + 1 : j + h;
    ce[e0] = c, se[e0] = -s;
    ce[e1] = c, se[e1] = s;
  }
  for (int64_t e = D; e < dp; e++)
    ce[e] = 0, se[e] = 0;
}

/* xs[0..dp-1] := fp32 of src[0..D-1], then zeros (exact widening). */
static void rope_widen(const TA *src, int64_t D, int64_t dp, float *xs) {
  for (int64_t e = 0; e < dp; e += VEC)
    VSTOREF(xs + e, e + VEC <= D ? VLOAD_A(src + e) : VLOADN_A(src + e, gc_max(0, D - e)));
}

/* xp[e] := xs[partner(e)] for e < D; zeros after. */
static void rope_partner(const float *xs, int64_t D, int64_t dp, int64_t layout,
                         float *xp) {
  int64_t h = D / 2;
  if (layout == 0) {
    memcpy(xp, xs + h, (size_t)h * sizeof *xp);
    memcpy(xp + h, xs, (size_t)h * sizeof *xp);
  } else {
    for (int64_t e = 0; e < D; e += 2)
      xp[e] = xs[e + 1], xp[e + 1] = xs[e];
  }
  memset(xp + D, 0, (size_t)(dp - D) * sizeof *xp);
}

/* fp32 of a double vector: round to nearest even when C is f32, else round
 * to odd (so that narrowing to f16/bf16 afterwards rounds only once). */
static inline rope_vf rope_to_f32(rope_vd y) {
  rope_vf f = __builtin_convertvector(y, rope_vf);
#if GC_TC != GC_F32
  rope_vd b = __builtin_convertvector(f, rope_vd);
  rope_vl inexact = b != y;
  rope_vl away = ((b > y) & (y > 0)) | ((b < y) & (y < 0));
  rope_vi u = (rope_vi)f;
  u += __builtin_convertvector(away, rope_vi); /* -1: one step toward 0 */
  u |= __builtin_convertvector(inexact, rope_vi) & 1;
  f = (rope_vf)u;
#endif
  return f;
}

#define ROPE_PRE (GC_OP_BIAS_ROPE_KV || GC_OP_QK_NORM_ROPE_KV) /* a step folded in before the rotation */

/* What the folded step does to a head before it is rotated or copied:
 * w its bias slice (bias_rope_kv) or norm weight (qk_norm_rope_kv), NULL
 * for none; eps the norm's. */
typedef struct rope_pre {
  const TB *w;
  float eps;
} rope_pre_t;

/* xs[0..D-1] (widened, zeros after to dp) := the folded step's result in
 * C's dtype, widened again: xs + w, or xs / sqrt(mean(xs²) + eps) · w
 * (qk_norm.c's sum in VEC lanes, then its scale). */
static void rope_pre(float *xs, int64_t D, int64_t dp, const rope_pre_t *pre) {
  if (!ROPE_PRE || !pre->w)
    return;
  VF s = VSET1(1.0f);
  if (GC_OP_QK_NORM_ROPE_KV) {
    VF acc = VZERO();
    for (int64_t e = 0; e < dp; e += VEC) {
      VF v = VLOADF(xs + e);
      acc = VFMA(v, v, acc);
    }
    s = VSET1(1.0f / sqrtf(VHSUM(acc) / (float)D + pre->eps));
  }
  TC t[VEC]; /* the rounding into C's dtype that the unfused step's store does */
  for (int64_t e = 0; e < D; e += VEC) {
    int64_t n = gc_min(VEC, D - e);
    VF w = VLOADN_B(pre->w + e, n), v = VLOADF(xs + e);
    VSTOREN_C(t, GC_OP_QK_NORM_ROPE_KV ? VMUL(VMUL(v, s), w) : VADD(v, w), n);
    VSTOREF(xs + e, VLOADN_C(t, n));
  }
}

/* dst[0..D-1] := src changed by pre, rotated with the tables ce, se (dp
 * entries each). xs, xp, ys: fp32 scratch of dp elements. */
static void rope_head(const TA *src, TC *dst, const double *ce, const double *se,
                      int64_t D, int64_t dp, int64_t layout, const rope_pre_t *pre, float *xs, float *xp,
                      float *ys) {
  rope_widen(src, D, dp, xs);
  rope_pre(xs, D, dp, pre);
  rope_partner(xs, D, dp, layout, xp);
  for (int64_t e = 0; e < dp; e += DV) {
    rope_vf a, b;
    rope_vd c, s;
    memcpy(&a, xs + e, sizeof a), memcpy(&b, xp + e, sizeof b);
    memcpy(&c, ce + e, sizeof c), memcpy(&s, se + e, sizeof s);
    rope_vd y = __builtin_convertvector(a, rope_vd) * c + __builtin_convertvector(b, rope_vd) * s;
    rope_vf f = rope_to_f32(y);
    memcpy(ys + e, &f, sizeof f);
  }
  int64_t e = 0;
  for (; e + VEC <= D; e += VEC)
    VSTORE_C(dst + e, VLOADF(ys + e));
  if (e < D)
    VSTOREN_C(dst + e, VLOADF(ys + e), D - e);
}

/* dst[0..D-1] := src[0..D-1] in C's dtype (the value heads; bias_rope_kv:
 * + b, rounded once). */
static void rope_copy(const TA *src, TC *dst, int64_t D, const TB *b) {
#if GC_OP_BIAS_ROPE_KV
  for (int64_t e = 0; e < D; e += VEC) {
    int64_t n = gc_min(VEC, D - e);
    VSTOREN_C(dst + e, VADD(VLOADN_A(src + e, n), VLOADN_B(b + e, n)), n);
  }
#elif GC_TA == GC_TC
  (void)b;
  memcpy(dst, src, (size_t)D * sizeof *dst);
#else
  int64_t e = 0;
  for (; e + VEC <= D; e += VEC)
    VSTORE_C(dst + e, VLOAD_A(src + e));
  if (e < D)
    VSTOREN_C(dst + e, VLOADN_A(src + e, D - e), D - e);
  (void)b;
#endif
}

/* args: QKV[M,(H+2G)·D] (TA), Qout[M,H·D], Kc[S,G·D], Vc[S,G·D] (TC),
 * double inv_freq[D/2], int32 pos[1] (pos0), int64 M, H, G, D, layout;
 * rope_kv_batch: Kc, Vc [slots·S, G·D], int32 pos[2·M] (positions, then
 * slots), int64 M, H, G, D, S, layout; bias_rope_kv: b[(H+2G)·D] (TB)
 * after pos; qk_norm_rope_kv: qn[D], kn[D] (TB) after pos and float eps
 * last. */
GC_EXPORT void rope_kv_cpu(void **args, int64_t task) {
  const TA *QKV = GC_ARG(args, 0, const TA *);
  TC *Qout = GC_ARG(args, 1, TC *);
  TC *Kc = GC_ARG(args, 2, TC *);
  TC *Vc = GC_ARG(args, 3, TC *);
  const double *inv_freq = GC_ARG(args, 4, const double *);
  const int32_t *pos = GC_ARG(args, 5, const int32_t *);
  const int nw = GC_OP_BIAS_ROPE_KV + 2 * GC_OP_QK_NORM_ROPE_KV; /* buffers after pos: b, or qn kn */
  const TB *w0 = nw ? GC_ARG(args, 6, const TB *) : NULL, *w1 = nw == 2 ? GC_ARG(args, 7, const TB *) : NULL;
  int64_t M = GC_ARG(args, 6 + nw, int64_t), H = GC_ARG(args, 7 + nw, int64_t);
  int64_t G = GC_ARG(args, 8 + nw, int64_t), D = GC_ARG(args, 9 + nw, int64_t);
#if GC_OP_ROPE_KV_BATCH
  int64_t S = GC_ARG(args, 10, int64_t), layout = GC_ARG(args, 11, int64_t);
#else
  int64_t pos0 = pos[0], layout = GC_ARG(args, 10 + nw, int64_t);
#endif
  const float eps = GC_OP_QK_NORM_ROPE_KV ? GC_ARG(args, 11 + nw, float) : 0.0f;

  int64_t nsb = gc_cdiv(H + G, HEADS); /* slot blocks */
  if (nsb <= 0 || D <= 0 || D % 2 || D > 1024)
    return;
  int64_t i0 = task / nsb * TOK, i1 = gc_min(M, i0 + TOK);
  int64_t s0 = task % nsb * HEADS, s1 = gc_min(H + G, s0 + HEADS);
  int64_t dp = gc_cdiv(D, VEC) * VEC, W = (H + 2 * G) * D;
  double ce[dp], se[dp];          /* rotation tables of one token */
  float xs[dp], xp[dp], ys[dp];   /* one head: input, partners, result */
  for (int64_t i = i0; i < i1; i++) {
#if GC_OP_ROPE_KV_BATCH
    int64_t p = pos[i], c = pos[M + i] * S + p; /* its position; its row of the cache */
#else
    int64_t p = pos0 + i, c = p;
#endif
    const TA *x = QKV + i * W;
    rope_tables(inv_freq, D, dp, (double)p, layout, ce, se);
    for (int64_t s = s0; s < s1; s++) {
      /* the folded step's weights for head s (and its value head) */
      rope_pre_t pre = {nw == 1 ? w0 + s * D : nw == 2 ? (s < H ? w0 : w1) : NULL, eps};
      if (s < H) {
        rope_head(x + s * D, Qout + (i * H + s) * D, ce, se, D, dp, layout, &pre, xs, xp, ys);
      } else {
        int64_t g = s - H;
        rope_head(x + (H + g) * D, Kc + (c * G + g) * D, ce, se, D, dp, layout, &pre, xs, xp, ys);
        rope_copy(x + (H + G + g) * D, Vc + (c * G + g) * D, D, nw == 1 ? w0 + (H + G + g) * D : NULL);
      }
    }
  }
}
