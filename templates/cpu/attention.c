/* attention.c — CPU causal attention with grouped-query heads over the KV
 * cache, flash style: O = softmax(scale · Q·Kᵀ) · V, each query row i (at
 * position pos0 + i) of head h attending to cache rows 0 .. pos0+i of kv
 * head h / (H/G). One kernel serves prefill (M > 1) and decode (M = 1).
 * Built for attention_batch (batched decode: row i at its own position
 * pos[i] in its own cache slot pos[M + i], S rows each), a task runs its
 * rows one at a time, each as a decode step over its slot.
 *
 * @template attention_cpu
 * @op attention attention_batch
 * @backend cpu
 * @dtypes f32 f16 bf16
 * @kernel attention_cpu
 * @param QB 1 4 16 64 default 16 -- query rows (tokens) per task
 * @param HPT 1 2 4 8 default 4 -- query heads per task, all of one kv head
 * @param KB 64 128 256 default 128 -- keys per block (one online-softmax step)
 * @param TN 16 32 64 default 32 -- register tile width: keys in Q·Kᵀ, output columns in P·V
 * @param RB 1 2 4 8 default 4 -- register tile height: query rows (row, head pairs)
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 == VBYTES -- full-width vectors: the register tiles are planned for the target's registers
 * @constraint TN % VEC == 0 && KB % TN == 0 -- tiles are whole vectors, blocks whole tiles
 * @constraint RB * (TN / VEC) + TN / VEC + 1 <= 16 + 16 * (VBYTES >= 64) -- accumulators, a row of the other operand and a broadcast stay in registers
 * @constraint RB * (TN / VEC) >= 4 -- enough independent FMA chains to hide latency
 * @constraint RB <= QB * HPT -- a register tile is no taller than a task's rows
 * @constraint QB * HPT <= 64 -- bounded per-task scratch
 * @constraint (QB * HPT * (2 * 128 + KB) + 2 * KB * 128) * 4 <= L2 -- a task's fp32 scratch fits in L2 (D = 128)
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @applies G > 0 && H % G == 0 && D <= 256 -- whole head groups; fp32 scratch lives on the stack
 * @grid cdiv(M, QB) * G * cdiv(H / G, HPT) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t serves query rows i0 .. i0+QB-1 (fewer at the end) of query heads
 * h0 .. h0+HPT-1 (clipped to the group) of kv head g. t splits, fastest-
 * varying first, into the head chunk, g and the row block; row blocks are
 * numbered last-first, so the longest (causal) tasks start first. A task
 * is self-contained: it reads the keys 0 .. pos0+i0+QB-1 once for all its
 * R = rows × heads query vectors (r = row·heads + head) and keeps fp32
 * scratch on the stack. For each block of KB keys it
 *   1. packs the keys transposed (Kt[d][j]) and, when more than one
 *      register tile of rows will use them, the values (Vs[j][d]) to
 *      fp32, zero-padded, so the register tiles never see an edge (with
 *      one row tile, as in decode, the values are read once in place);
 *   2. computes scores S = Q·Kᵀ in RB × TN register tiles (a broadcast
 *      query element times TN keys of Kt per step over d);
 *   3. does the online-softmax step per row in fp32: scale, causal mask
 *      (a row sees keys j <= its position), running max m, rescale factor
 *      exp(m_old - m), P = exp(S - m), running sum l;
 *   4. accumulates O += P·V in RB × TN register tiles (a broadcast
 *      probability times TN output columns per key).
 * At the end O / l is written in C's dtype. Scores, softmax and O are fp32.
 * Rows past R in the last register tile are zero padding, never stored.
 */

#define TV (TN / VEC) /* vectors per register-tile row */
#define AT_DMAX 256   /* largest head dimension (see @applies) */

/* ---- vector helpers the prelude lacks ------------------------------ */

#if VEC == 16
GC_INLINE VF att_vmax(VF a, VF b) { return _mm512_max_ps(a, b); }
GC_INLINE float att_hmax(VF v) { return _mm512_reduce_max_ps(v); }
#else
GC_INLINE VF att_vmax(VF a, VF b) { return _mm256_max_ps(a, b); }
GC_INLINE float att_hmax(VF v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
#endif

/* e^x for one float, with the prelude's vector exp (no libm). */
GC_INLINE float att_expf(float x) {
  float t[VEC];
  VSTOREF(t, VEXP(VSET1(x)));
  return t[0];
}

/* ---- task geometry and scratch ------------------------------------- */

typedef struct att_task {
  int64_t i0, nq; /* query rows i0 .. i0+nq-1 */
  int64_t h0, nh; /* query heads h0 .. h0+nh-1 */
  int64_t g;      /* their kv head */
} att_task_t;

/* The rows, heads and kv head of task t (see the header). */
static att_task_t att_split(int64_t t, int64_t M, int64_t H, int64_t G) {
  int64_t hpg = H / G, nhb = gc_cdiv(hpg, HPT), nib = gc_cdiv(M, QB);
  att_task_t a;
  int64_t ib = nib - 1 - t / (G * nhb), hb = t % nhb;
  a.g = t / nhb % G;
  a.i0 = ib * QB, a.nq = gc_min(QB, M - a.i0);
  a.h0 = a.g * hpg + hb * HPT, a.nh = gc_min(HPT, hpg - hb * HPT);
  return a;
}

typedef struct att_scratch { /* rp = R rounded up to RB */
  float *qs;           /* [rp][dq] query vectors, fp32 (rows past R: 0) */
  float *os;           /* [rp][dp] output accumulators */
  float *kt;           /* [D][KB] key block, transposed */
  float *vs;           /* [KB][dp] value block (packed if rp > RB) */
  float *s;            /* [rp][KB] scores, then probabilities */
  float *mx, *ls;      /* [rp] running max of the scores, sum of exp */
  int64_t *pos, *nv;   /* [rp] row position (-1: padding), keys it sees in the block */
  int64_t rp, D, dq, dp; /* dq = D up to VEC, dp = D up to TN */
} att_scratch_t;

/* ---- packing -------------------------------------------------------- */

/* The first min(n, VEC) elements of a typed row at p, widened; the other
 * lanes are 0 (n may be <= 0 or > VEC). */
GC_INLINE VF att_load_b(const TB *p, int64_t n) {
  return n >= VEC ? VLOAD_B(p) : VLOADN_B(p, gc_max(n, 0));
}

/* qs[r][0..dq-1] := fp32 of query vector r (row i0 + r/nh, head h0 + r%nh),
 * zeros past D and in padding rows; also the rows' positions. */
static void att_pack_q(const TA *Q, int64_t H, int64_t pos0, att_task_t a,
                       att_scratch_t *w) {
  for (int64_t r = 0; r < w->rp; r++) {
    float *q = w->qs + r * w->dq;
    if (r >= a.nq * a.nh) { /* padding */
      w->pos[r] = -1;
      memset(q, 0, (size_t)w->dq * sizeof *q);
      continue;
    }
    const TA *src = Q + ((a.i0 + r / a.nh) * H + a.h0 + r % a.nh) * w->D;
    w->pos[r] = pos0 + a.i0 + r / a.nh;
    for (int64_t d = 0; d < w->dq; d += VEC) {
      int64_t n = w->D - d;
      VSTOREF(q + d, n >= VEC ? VLOAD_A(src + d) : VLOADN_A(src + d, n));
    }
  }
}

/* kt[d][j] := fp32 of key j (row k + j·ld) element d, for d < D and
 * j < ncols; keys nk .. ncols-1 are 0. Transposes VEC × VEC tiles. */
static void att_pack_k(const TB *k, int64_t ld, int64_t nk, int64_t ncols,
                       int64_t D, float *kt) {
  for (int64_t j = 0; j < ncols; j += VEC)
    for (int64_t d = 0; d < D; d += VEC) {
      VF r[VEC]; /* r[i]: key j+i, elements d .. d+VEC-1 */
      for (int i = 0; i < VEC; i++)
        r[i] = j + i < nk ? att_load_b(k + (j + i) * ld + d, D - d) : VZERO();
      VTRANSPOSE(r); /* r[e]: element d+e of keys j .. j+VEC-1 */
      for (int64_t e = 0; e < VEC && d + e < D; e++)
        VSTOREF(kt + (d + e) * KB + j, r[e]);
    }
}

/* vs[j][0..dp-1] := fp32 of value j (row v + j·ld), zeros past D, j < nk. */
static void att_pack_v(const TB *v, int64_t ld, int64_t nk, int64_t D, int64_t dp,
                       float *vs) {
  for (int64_t j = 0; j < nk; j++)
    for (int64_t d = 0; d < dp; d += VEC)
      VSTOREF(vs + j * dp + d, att_load_b(v + j * ld + d, D - d));
}

/* ---- register tiles ------------------------------------------------- */

/* s[r][0..TN-1] := sum_d q[r][d] · kt[d][0..TN-1] for r < RB. */
GC_INLINE void att_qk_tile(const float *q, int64_t ldq, const float *kt, int64_t D,
                           float *s) {
  VF acc[RB][TV];
  GC_UNROLL(RB)
  for (int r = 0; r < RB; r++)
    GC_UNROLL(TV)
    for (int t = 0; t < TV; t++)
      acc[r][t] = VZERO();
  for (int64_t d = 0; d < D; d++) {
    VF kv[TV];
    GC_UNROLL(TV)
    for (int t = 0; t < TV; t++)
      kv[t] = VLOADF(kt + d * KB + t * VEC);
    GC_UNROLL(RB)
    for (int r = 0; r < RB; r++) {
      VF qb = VSET1(q[r * ldq + d]);
      GC_UNROLL(TV)
      for (int t = 0; t < TV; t++)
        acc[r][t] = VFMA(qb, kv[t], acc[r][t]);
    }
  }
  GC_UNROLL(RB)
  for (int r = 0; r < RB; r++)
    GC_UNROLL(TV)
    for (int t = 0; t < TV; t++)
      VSTOREF(s + r * KB + t * VEC, acc[r][t]);
}

/* Where att_pv_tile reads the values: packed fp32 rows, or the cache rows
 * themselves (typed), whole tiles or the first nc columns. */
enum { AT_V_PACKED, AT_V_FULL, AT_V_PART };

/* TN values of row j at v (rows ldv apart), read as mode says. */
GC_INLINE void att_v_row(int mode, const void *v, int64_t ldv, int64_t j, int64_t nc,
                         VF vv[TV]) {
  GC_UNROLL(TV)
  for (int t = 0; t < TV; t++)
    vv[t] = mode == AT_V_PACKED ? VLOADF((const float *)v + j * ldv + t * VEC)
            : mode == AT_V_FULL ? VLOAD_B((const TB *)v + j * ldv + t * VEC)
                                : att_load_b((const TB *)v + j * ldv + t * VEC, nc - t * VEC);
}

/* o[r][0..TN-1] += sum_{j<n} p[r][j] · v[j][0..TN-1] for r < RB; mode is a
 * constant at each call site (see att_v_row). */
GC_INLINE void att_pv_tile(int mode, const float *p, const void *v, int64_t ldv,
                           int64_t nc, int64_t n, float *o, int64_t ldo) {
  VF acc[RB][TV];
  GC_UNROLL(RB)
  for (int r = 0; r < RB; r++)
    GC_UNROLL(TV)
    for (int t = 0; t < TV; t++)
      acc[r][t] = VLOADF(o + r * ldo + t * VEC);
  for (int64_t j = 0; j < n; j++) {
    VF vv[TV];
    att_v_row(mode, v, ldv, j, nc, vv);
    GC_UNROLL(RB)
    for (int r = 0; r < RB; r++) {
      VF pb = VSET1(p[r * KB + j]);
      GC_UNROLL(TV)
      for (int t = 0; t < TV; t++)
        acc[r][t] = VFMA(pb, vv[t], acc[r][t]);
    }
  }
  GC_UNROLL(RB)
  for (int r = 0; r < RB; r++)
    GC_UNROLL(TV)
    for (int t = 0; t < TV; t++)
      VSTOREF(o + r * ldo + t * VEC, acc[r][t]);
}

/* ---- online softmax ------------------------------------------------- */

/* s[0..n-1] *= scale; returns their maximum (n >= 1). */
static float att_scale_max(float *s, int64_t n, float scale) {
  VF vs = VSET1(scale), vm = VSET1(-INFINITY);
  int64_t j = 0;
  for (; j + VEC <= n; j += VEC) {
    VF x = VMUL(VLOADF(s + j), vs);
    VSTOREF(s + j, x);
    vm = att_vmax(vm, x);
  }
  float m = att_hmax(vm);
  for (; j < n; j++) {
    s[j] *= scale;
    m = s[j] > m ? s[j] : m;
  }
  return m;
}

/* s[j] := exp(s[j] - m) for j < n, 0 for n <= j < nk; returns the sum. */
static float att_exp_sum(float *s, int64_t n, int64_t nk, float m) {
  VF vneg = VSET1(-m), acc = VZERO();
  int64_t j = 0;
  for (; j + VEC <= n; j += VEC) {
    VF e = VEXP(VADD(VLOADF(s + j), vneg));
    VSTOREF(s + j, e);
    acc = VADD(acc, e);
  }
  float sum = VHSUM(acc);
  if (j < n) { /* the partial vector: keep lanes < n - j */
    float t[VEC];
    VSTOREF(t, VEXP(VADD(VLOADF(s + j), vneg)));
    for (int64_t l = 0; j + l < n; l++)
      s[j + l] = t[l], sum += t[l];
  }
  memset(s + n, 0, (size_t)(nk - n) * sizeof *s);
  return sum;
}

/* One online-softmax step for query vector r over the block's scores
 * (nk keys, the first nv[r] visible): updates mx, ls and rescales os. */
static void att_softmax_row(att_scratch_t *w, int64_t r, int64_t nk, float scale) {
  float *s = w->s + r * KB;
  int64_t n = w->nv[r];
  if (n == 0) { /* nothing visible: P row 0, state unchanged */
    memset(s, 0, (size_t)nk * sizeof *s);
    return;
  }
  float mb = att_scale_max(s, n, scale);
  float m = w->mx[r] > mb ? w->mx[r] : mb;
  float alpha = w->mx[r] == -INFINITY ? 0.0f : att_expf(w->mx[r] - m);
  w->ls[r] = w->ls[r] * alpha + att_exp_sum(s, n, nk, m);
  w->mx[r] = m;
  if (alpha != 1.0f) {
    float *o = w->os + r * w->dp;
    for (int64_t d = 0; d < w->dp; d += VEC)
      VSTOREF(o + d, VMUL(VLOADF(o + d), VSET1(alpha)));
  }
}

/* ---- one key block -------------------------------------------------- */

/* The most keys any of rows r0 .. r0+RB-1 sees in the current block. */
static int64_t att_tile_keys(const att_scratch_t *w, int64_t r0) {
  int64_t n = 0;
  for (int64_t r = r0; r < r0 + RB; r++)
    n = gc_max(n, w->nv[r]);
  return n;
}

/* O[r0 .. r0+RB-1] += P·V over the block's first n keys, one TN-wide
 * column tile at a time. Values are packed when several row tiles share
 * them (pack != 0), else read once in place from the cache rows v. */
static void att_pv(const att_scratch_t *w, int64_t r0, int64_t n, int pack,
                   const TB *v, int64_t ld) {
  const float *p = w->s + r0 * KB;
  float *o = w->os + r0 * w->dp;
  for (int64_t c = 0; c < w->dp; c += TN) {
    if (pack)
      att_pv_tile(AT_V_PACKED, p, w->vs + c, w->dp, TN, n, o + c, w->dp);
    else if (c + TN <= w->D)
      att_pv_tile(AT_V_FULL, p, v + c, ld, TN, n, o + c, w->dp);
    else
      att_pv_tile(AT_V_PART, p, v + c, ld, w->D - c, n, o + c, w->dp);
  }
}

/* Keys j0 .. j0+nk-1 of one kv head (rows ld apart): pack, scores,
 * softmax step, O += P·V. */
static void att_block(const TB *Kc, const TB *Vc, int64_t ld, int64_t j0, int64_t nk,
                      float scale, att_scratch_t *w) {
  int64_t D = w->D;
  int pack = w->rp > RB; /* several row tiles reuse the values */
  att_pack_k(Kc + j0 * ld, ld, nk, gc_cdiv(nk, TN) * TN, D, w->kt);
  if (pack)
    att_pack_v(Vc + j0 * ld, ld, nk, D, w->dp, w->vs);
  for (int64_t r = 0; r < w->rp; r++)
    w->nv[r] = gc_max(0, gc_min(nk, w->pos[r] + 1 - j0));
  for (int64_t r0 = 0; r0 < w->rp; r0 += RB) {
    int64_t n = att_tile_keys(w, r0);
    for (int64_t c = 0; c < n; c += TN)
      att_qk_tile(w->qs + r0 * w->dq, w->dq, w->kt + c, D, w->s + r0 * KB + c);
  }
  for (int64_t r = 0; r < w->rp; r++)
    att_softmax_row(w, r, nk, scale);
  for (int64_t r0 = 0; r0 < w->rp; r0 += RB) {
    int64_t n = att_tile_keys(w, r0);
    if (n > 0)
      att_pv(w, r0, n, pack, Vc + j0 * ld, ld);
  }
}

/* O row of query vector r := os[r] / ls[r] in C's dtype, for r < R. */
static void att_store(TC *O, int64_t H, att_task_t a, const att_scratch_t *w) {
  for (int64_t r = 0; r < a.nq * a.nh; r++) {
    TC *o = O + ((a.i0 + r / a.nh) * H + a.h0 + r % a.nh) * w->D;
    const float *x = w->os + r * w->dp;
    VF inv = VSET1(1.0f / w->ls[r]);
    int64_t d = 0;
    for (; d + VEC <= w->D; d += VEC)
      VSTORE_C(o + d, VMUL(VLOADF(x + d), inv));
    if (d < w->D)
      VSTOREN_C(o + d, VMUL(VLOADF(x + d), inv), w->D - d);
  }
}

/* Task a over keys 0 .. pos0 + a.i0 + a.nq - 1 of Kc, Vc (rows G·D apart). */
static void att_run(const TA *Q, const TB *Kc, const TB *Vc, TC *O, int64_t H, int64_t G,
                    int64_t D, int64_t pos0, att_task_t a, float scale) {
  int64_t rp = gc_cdiv(a.nq * a.nh, RB) * RB, dq = gc_cdiv(D, VEC) * VEC;
  int64_t dp = gc_cdiv(D, TN) * TN;
  float qs[rp * dq], os[rp * dp], kt[D * KB], vs[KB * dp], s[rp * KB];
  float mx[rp], ls[rp];
  int64_t pos[rp], nv[rp];
  att_scratch_t w = {qs, os, kt, vs, s, mx, ls, pos, nv, rp, D, dq, dp};
  att_pack_q(Q, H, pos0, a, &w);
  memset(os, 0, sizeof os);
  for (int64_t r = 0; r < rp; r++)
    mx[r] = -INFINITY, ls[r] = 0;
  int64_t ld = G * D, kend = pos0 + a.i0 + a.nq; /* keys 0 .. kend-1 */
  for (int64_t j0 = 0; j0 < kend; j0 += KB)
    att_block(Kc + a.g * D, Vc + a.g * D, ld, j0, gc_min(KB, kend - j0), scale, &w);
  att_store(O, H, a, &w);
}

/* args: Q[M,H·D] (TA), Kc[S,G·D], Vc[S,G·D] (TB), O[M,H·D] (TC),
 * int32 pos[1] (pos0), int64 M, H, G, D, float scale; attention_batch:
 * Kc, Vc [slots·S, G·D], int32 pos[2·M] (positions, then slots), int64 M,
 * H, G, D, S, float scale. */
GC_EXPORT void attention_cpu(void **args, int64_t task) {
  const TA *Q = GC_ARG(args, 0, const TA *);
  const TB *Kc = GC_ARG(args, 1, const TB *);
  const TB *Vc = GC_ARG(args, 2, const TB *);
  TC *O = GC_ARG(args, 3, TC *);
  const int32_t *pos = GC_ARG(args, 4, const int32_t *);
  int64_t M = GC_ARG(args, 5, int64_t), H = GC_ARG(args, 6, int64_t);
  int64_t G = GC_ARG(args, 7, int64_t), D = GC_ARG(args, 8, int64_t);
#if GC_OP_ATTENTION_BATCH
  int64_t S = GC_ARG(args, 9, int64_t);
  float scale = GC_ARG(args, 10, float);
#else
  float scale = GC_ARG(args, 9, float);
#endif

  if (M <= 0 || G <= 0 || H % G || D <= 0 || D > AT_DMAX)
    return; /* outside @applies */
  att_task_t a = att_split(task, M, H, G);
#if GC_OP_ATTENTION_BATCH
  for (int64_t i = a.i0; i < a.i0 + a.nq; i++) { /* row i alone, at pos[i] of its slot */
    att_task_t b = a;
    b.i0 = i, b.nq = 1;
    int64_t base = (int64_t)pos[M + i] * S * G * D;
    att_run(Q, Kc + base, Vc + base, O, H, G, D, pos[i] - i, b, scale);
  }
#else
  att_run(Q, Kc, Vc, O, H, G, D, pos[0], a, scale);
#endif
}
