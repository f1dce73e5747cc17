/* attention_batch.cu — GPU attention of a batched decode step: row r of
 * Q[M,H·D] is one sequence's query at its own position pos[r], over rows
 * 0 .. pos[r] of its own cache slot pos[M + r] (S rows per slot) with
 * grouped-query heads, split over the sequence: O = softmax(scale ·
 * q·Kᵀ) · V. The kernel is attention_decode.cu's with a row index: each
 * block serves one row, and the split workspace and tickets are per row.
 * (It is its own template, not a second op of attention_decode, because
 * the per-row workspace bounds SPLIT more tightly than decode's.)
 *
 * @template attention_batch
 * @op attention_batch
 * @backend gpu
 * @dtypes f32 f16 bf16
 * @kernel attention_batch
 * @param WARPS 2 4 8 16 default 4 -- warps per block
 * @param KL 4 8 16 32 default 16 -- lanes that share one key (each holds D/KL of its elements)
 * @param HPB 1 2 4 8 default 2 -- query heads per block (at most; all of one kv head, they share every K/V load)
 * @param SPLIT 1 2 4 8 16 default 8 -- blocks per (row, head block), each over a 1/SPLIT slice of the row's keys
 * @param U 1 2 4 default 2 -- keys per lane group per step (one rescale per step; the next step's loads are in flight meanwhile)
 * @param DMAX 64 128 256 default 128 -- largest head dimension served (registers are sized for it)
 * @constraint WARPS * WARP <= MAXT && KL <= WARP -- a legal block; a key's lanes lie in one warp
 * @constraint DMAX % (KL * 16 / SB) == 0 -- a key row is whole 16-byte chunks per lane
 * @constraint (2 * HPB + 2 * U) * (DMAX / KL) + 16 * U * DMAX / KL / (16 / SB) + 40 <= min(255, 65536 / (WARPS * WARP)) -- q, output, widened K/V and two raw steps fit the budget
 * @constraint WARPS * HPB * (DMAX + 2) * 4 <= 40960 -- per-warp partial results fit in shared memory
 * @constraint SPLIT * (DMAX + 2) <= 2048 -- the cross-block workspace (1024 row-heads) stays within 8 MiB
 * @applies G > 0 && H % G == 0 && D <= DMAX && (SPLIT == 1 || M * H <= 1024) -- whole head groups; the workspace holds 1024 (row, head) pairs
 * @grid M * G * cdiv(H / G, HPB) * SPLIT 1 1
 * @block WARPS * WARP 1 1
 * @priority 2
 * @pdl -- waits for the kernel before it first thing
 *
 * Block b = (r·G·nb + hb)·SPLIT + s serves row r and head block hb: kv
 * head g = hb / nb and its query heads h0 .. h0+nh-1, h0 = g·(H/G) +
 * (hb % nb)·HPB, nb = cdiv(H/G, HPB), nh = min(HPB, H/G - (hb % nb)·HPB),
 * over key slice s of the row: keys j0 .. j1-1, j0 = s·cdiv(L, SPLIT),
 * L = pos[r] + 1, in slot pos[M + r]. The rest is attention_decode's (see
 * there): lane groups of KL lanes take U keys per step with the next
 * step's loads in flight, an online softmax per group in fp32, base 2,
 * merged across groups by shuffles and across warps in shared memory; with
 * SPLIT > 1 the partials (m, l, o) of each (row, head) go to a
 * module-scope workspace and the block that takes the last ticket of its
 * (row, head block) merges them, writes O and resets the counter. Two
 * launches of this code object must not run concurrently (the runtime's
 * one stream serialises them).
 */

#define AB_VEC (16 / SB)                 /* elements per 16-byte chunk */
#define AB_T (WARPS * WARP)              /* threads */
#define AB_NG (AB_T / KL)                /* lane groups */
#define AB_NC (DMAX / (KL * AB_VEC))     /* chunks per lane */
#define AB_HMAX 1024                     /* (row, head) pairs the workspace holds */
#define AB_W (DMAX + 2)                  /* workspace floats per partial: m, l, o[DMAX] */
#define AB_NEG_INF (-GC_INF)

GC_GLOBAL float ab_ws[SPLIT > 1 ? AB_HMAX * SPLIT * AB_W : 1];
GC_GLOBAL unsigned ab_cnt[SPLIT > 1 ? AB_HMAX : 1];

/* out := row[d0 .. d0+VEC-1] widened, zeros past D. vec_ok: D % VEC == 0
 * (then every chunk is aligned and wholly inside or outside the row). */
template <class T>
GC_DEVICE void ab_load(const T *row, int64_t d0, int64_t D, int vec_ok, float *out) {
  if (vec_ok && d0 < D) {
    gc_ldv<AB_VEC>(row + d0, out);
  } else {
    GC_UNROLL(AB_VEC)
    for (int e = 0; e < AB_VEC; e++)
      out[e] = !vec_ok && d0 + e < D ? gc_ld(row, d0 + e) : 0.0f;
  }
}

/* The raw 16 bytes of elements d0 .. d0+VEC-1 of a row (zero bits, +0.0,
 * past D); vec_ok as for ab_load. Widening waits until the data is used,
 * so a step in flight costs 4 registers per chunk, not VEC. */
GC_DEVICE void ab_fetch(const TB *row, int64_t d0, int64_t D, int vec_ok, gc_raw16 &r) {
  if (vec_ok && d0 < D) {
    r = *reinterpret_cast<const gc_raw16 *>(row + d0);
  } else {
    GC_UNROLL(4)
    for (int w = 0; w < 4; w++)
      r.w[w] = 0u;
    if (!vec_ok)
      for (int e = 0; e < AB_VEC && d0 + e < D; e++) {
        if (SB == 2)
          r.w[e / 2] |= (uint32_t)reinterpret_cast<const uint16_t *>(row)[d0 + e] << (16 * (e % 2));
        else
          r.w[e] = reinterpret_cast<const uint32_t *>(row)[d0 + e];
      }
  }
}

/* K and V chunks of keys jb .. jb+U-1 (zeros from j1 on) for lane kl. */
GC_DEVICE void ab_step_load(const TB *kb, const TB *vb, int64_t ld, int64_t jb, int64_t j1, int kl,
                            int64_t D, int vec_ok, gc_raw16 kr[U][AB_NC], gc_raw16 vr[U][AB_NC]) {
  GC_UNROLL(U)
  for (int u = 0; u < U; u++)
    GC_UNROLL(AB_NC)
    for (int c = 0; c < AB_NC; c++) {
      int64_t d0 = (int64_t)(c * KL + kl) * AB_VEC;
      if (jb + u < j1) {
        ab_fetch(kb + (jb + u) * ld, d0, D, vec_ok, kr[u][c]);
        ab_fetch(vb + (jb + u) * ld, d0, D, vec_ok, vr[u][c]);
      } else {
        GC_UNROLL(4)
        for (int w = 0; w < 4; w++)
          kr[u][c].w[w] = 0u, vr[u][c].w[w] = 0u;
      }
    }
}

/* The weight 2^(m - mx) of a partial with max m in a merge with max mx;
 * 0 for an empty partial (m = -inf), whatever mx is. */
GC_DEVICE float ab_weight(float m, float mx) {
  return m == AB_NEG_INF ? 0.0f : gc_exp2(m - mx);
}

GC_KERNEL_BOUNDS(AB_T)
void attention_batch(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos,
                     int64_t M, int64_t H, int64_t G, int64_t D, int64_t S, float scale) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  GC_SHARED float sm_m[WARPS][HPB], sm_l[WARPS][HPB], sm_o[WARPS][HPB][DMAX];
  GC_SHARED int s_last;
  if (M < 1 || G <= 0 || H % G || D <= 0 || D > DMAX || (SPLIT > 1 && M * H > AB_HMAX))
    return; /* outside @applies */
  const int64_t per = H / G, nb = gc_cdiv(per, HPB); /* heads per kv head, blocks per kv head */
  const int64_t row = gc_bid() / SPLIT / (G * nb);     /* the batch row */
  const int64_t hb = gc_bid() / SPLIT % (G * nb), g = hb / nb;
  const int64_t rhb = row * G * nb + hb;                /* its ticket counter */
  const int64_t h0 = g * per + hb % nb * HPB, nh = gc_min64(HPB, per - hb % nb * HPB);
  const int sp = (int)(gc_bid() % SPLIT);
  const int tid = gc_tid(), lane = gc_lane(), w = tid / GC_WARP;
  const int kl = tid % KL, grp = tid / KL;
  const int vec_ok = D % AB_VEC == 0;
  /* on the device: a captured step replays at any lengths and slots */
  const int64_t L = (int64_t)pos[row] + 1, cs = gc_cdiv(L, SPLIT);
  Q += row * H * D, O += row * H * D;
  Kc += (int64_t)pos[M + row] * S * G * D, Vc += (int64_t)pos[M + row] * S * G * D;
  const int64_t j0 = gc_min64(L, sp * cs), j1 = gc_min64(L, j0 + cs);

  /* q, pre-scaled into the base-2 domain */
  const float qs = scale * 1.4426950408889634f;
  float q[HPB][AB_NC][AB_VEC];
  GC_UNROLL(HPB)
  for (int hh = 0; hh < HPB; hh++)
    GC_UNROLL(AB_NC)
    for (int c = 0; c < AB_NC; c++) {
      ab_load(Q + (h0 + gc_min64(hh, nh - 1)) * D, (int64_t)(c * KL + kl) * AB_VEC, D, vec_ok,
              q[hh][c]); /* heads past nh repeat the last one and are not stored */
      GC_UNROLL(AB_VEC)
      for (int e = 0; e < AB_VEC; e++)
        q[hh][c][e] *= qs;
    }

  float m[HPB], l[HPB], o[HPB][AB_NC][AB_VEC];
  GC_UNROLL(HPB)
  for (int hh = 0; hh < HPB; hh++) {
    m[hh] = AB_NEG_INF, l[hh] = 0.0f;
    GC_UNROLL(AB_NC)
    for (int c = 0; c < AB_NC; c++)
      GC_UNROLL(AB_VEC)
      for (int e = 0; e < AB_VEC; e++)
        o[hh][c][e] = 0.0f;
  }

  const int64_t ld = G * D;
  const TB *kb = Kc + g * D, *vb = Vc + g * D;
  /* The loop bound is the warp's first group, so all lanes of a warp run
   * the same steps (the shuffles need them); later groups mask keys. */
  const int grp0 = w * (GC_WARP / KL);
  gc_raw16 kr[U][AB_NC], vr[U][AB_NC]; /* this step's keys and values, raw */
  ab_step_load(kb, vb, ld, j0 + (int64_t)grp * U, j1, kl, D, vec_ok, kr, vr);
  for (int64_t jbase = j0; jbase + (int64_t)grp0 * U < j1; jbase += (int64_t)AB_NG * U) {
    const int64_t jb = jbase + (int64_t)grp * U;
    gc_raw16 kn[U][AB_NC], vn[U][AB_NC]; /* the next step's, in flight */
    ab_step_load(kb, vb, ld, jb + (int64_t)AB_NG * U, j1, kl, D, vec_ok, kn, vn);
    float kf[U][AB_NC][AB_VEC], vf[U][AB_NC][AB_VEC];
    GC_UNROLL(U)
    for (int u = 0; u < U; u++)
      GC_UNROLL(AB_NC)
      for (int c = 0; c < AB_NC; c++) {
        gc_ldv<AB_VEC>(reinterpret_cast<const TB *>(&kr[u][c]), kf[u][c]);
        gc_ldv<AB_VEC>(reinterpret_cast<const TB *>(&vr[u][c]), vf[u][c]);
      }
    GC_UNROLL(HPB)
    for (int hh = 0; hh < HPB; hh++) {
      float s[U], mx = m[hh];
      GC_UNROLL(U)
      for (int u = 0; u < U; u++) {
        float d = 0.0f;
        GC_UNROLL(AB_NC)
        for (int c = 0; c < AB_NC; c++)
          GC_UNROLL(AB_VEC)
          for (int e = 0; e < AB_VEC; e++)
            d = gc_fma(q[hh][c][e], kf[u][c][e], d);
        d = gc_group_sum(d, KL);
        s[u] = jb + u < j1 ? d : AB_NEG_INF;
        mx = gc_max(mx, s[u]);
      }
      if (mx == AB_NEG_INF)
        continue; /* no keys yet for this group */
      float corr = ab_weight(m[hh], mx), ls = 0.0f;
      GC_UNROLL(AB_NC)
      for (int c = 0; c < AB_NC; c++)
        GC_UNROLL(AB_VEC)
        for (int e = 0; e < AB_VEC; e++)
          o[hh][c][e] *= corr;
      GC_UNROLL(U)
      for (int u = 0; u < U; u++) {
        float p = gc_exp2(s[u] - mx); /* 0 for masked keys */
        ls += p;
        GC_UNROLL(AB_NC)
        for (int c = 0; c < AB_NC; c++)
          GC_UNROLL(AB_VEC)
          for (int e = 0; e < AB_VEC; e++)
            o[hh][c][e] = gc_fma(p, vf[u][c][e], o[hh][c][e]);
      }
      l[hh] = l[hh] * corr + ls;
      m[hh] = mx;
    }
    GC_UNROLL(U)
    for (int u = 0; u < U; u++)
      GC_UNROLL(AB_NC)
      for (int c = 0; c < AB_NC; c++)
        kr[u][c] = kn[u][c], vr[u][c] = vn[u][c];
  }

  /* Merge the lane groups of each warp (butterfly over group bits). */
  for (int mask = KL; mask < GC_WARP; mask <<= 1) {
    GC_UNROLL(HPB)
    for (int hh = 0; hh < HPB; hh++) {
      float mo = gc_shfl_xor(m[hh], mask), lo = gc_shfl_xor(l[hh], mask);
      float mn = gc_max(m[hh], mo), a = ab_weight(m[hh], mn), b = ab_weight(mo, mn);
      l[hh] = l[hh] * a + lo * b;
      GC_UNROLL(AB_NC)
      for (int c = 0; c < AB_NC; c++)
        GC_UNROLL(AB_VEC)
        for (int e = 0; e < AB_VEC; e++) {
          float oo = gc_shfl_xor(o[hh][c][e], mask);
          o[hh][c][e] = o[hh][c][e] * a + oo * b;
        }
      m[hh] = mn;
    }
  }
  if (lane < KL) { /* group 0 of the warp now holds the warp's result */
    GC_UNROLL(HPB)
    for (int hh = 0; hh < HPB; hh++) {
      if (lane == 0)
        sm_m[w][hh] = m[hh], sm_l[w][hh] = l[hh];
      GC_UNROLL(AB_NC)
      for (int c = 0; c < AB_NC; c++)
        GC_UNROLL(AB_VEC)
        for (int e = 0; e < AB_VEC; e++)
          sm_o[w][hh][(c * KL + kl) * AB_VEC + e] = o[hh][c][e];
    }
  }
  gc_barrier();

  /* Merge the warps: thread t takes (head, element) pairs. */
  for (int64_t i = tid; i < nh * D; i += AB_T) {
    int hh = (int)(i / D), d = (int)(i % D);
    float mx = AB_NEG_INF, os = 0.0f, ls = 0.0f;
    for (int k = 0; k < WARPS; k++)
      mx = gc_max(mx, sm_m[k][hh]);
    for (int k = 0; k < WARPS; k++) {
      float wt = ab_weight(sm_m[k][hh], mx);
      os += wt * sm_o[k][hh][d];
      ls += wt * sm_l[k][hh];
    }
    if (SPLIT == 1) {
      STORE_C(O, (h0 + hh) * D + d, os / ls);
    } else {
      float *p = ab_ws + ((row * H + h0 + hh) * SPLIT + sp) * AB_W;
      if (d == 0)
        gc_st_cg(p, mx), gc_st_cg(p + 1, ls);
      gc_st_cg(p + 2 + d, os);
    }
  }
  if (SPLIT == 1)
    return;

  /* Hand off: the last block of this head block merges the slices. */
  gc_fence_device();
  gc_barrier();
  if (tid == 0)
    s_last = gc_atomic_add(&ab_cnt[rhb], 1u) == SPLIT - 1;
  gc_barrier();
  if (!s_last)
    return;
  gc_fence_device();
  for (int64_t i = tid; i < nh * D; i += AB_T) {
    int hh = (int)(i / D), d = (int)(i % D);
    const float *p = ab_ws + (row * H + h0 + hh) * SPLIT * AB_W;
    float mx = AB_NEG_INF, os = 0.0f, ls = 0.0f;
    GC_UNROLL(8) /* 8 loads of a pass in flight together */
    for (int k = 0; k < SPLIT; k++)
      mx = gc_max(mx, gc_ld_cg(p + k * AB_W));
    GC_UNROLL(8)
    for (int k = 0; k < SPLIT; k++) {
      float wt = ab_weight(gc_ld_cg(p + k * AB_W), mx);
      os += wt * gc_ld_cg(p + k * AB_W + 2 + d);
      ls += wt * gc_ld_cg(p + k * AB_W + 1);
    }
    STORE_C(O, (h0 + hh) * D + d, os / ls);
  }
  if (tid == 0)
    ab_cnt[rhb] = 0u; /* ready for the next launch (stream order) */
}
