/* attention_decode.cu — GPU causal attention of decode steps with
 * grouped-query heads, split over the sequence: O = softmax(scale ·
 * q·Kᵀ) · V over cache rows 0 .. pos0 of kv head h / (H/G), for one query
 * token (attention, M = 1). Built for attention_batch (BATCH = 1: a batched
 * decode step), row r of Q[M,H·D] is one sequence's query at its own
 * position pos[r], over rows 0 .. pos[r] of its own cache slot pos[M + r]
 * (S rows per slot): each block serves one row, and the split workspace
 * and tickets are per row, so the workspace's 1024 (row, head) pairs bound
 * SPLIT more tightly than one row's 128 heads.
 *
 * @template attention_decode
 * @op attention attention_batch
 * @backend gpu
 * @dtypes f32 f16 bf16
 * @kernel attention_decode
 * @param WARPS 2 4 8 16 default 4 -- warps per block
 * @param KL 4 8 16 32 default 16 -- lanes that share one key (each holds D/KL of its elements)
 * @param HPB 1 2 4 8 default 2 -- query heads per block (at most; all of one kv head, they share every K/V load)
 * @param SPLIT 1 2 4 8 16 32 64 default 32 -- blocks per (row, head block), each over a 1/SPLIT slice of the row's keys
 * @param U 1 2 4 default 2 -- keys per lane group per step (one rescale per step; the next step's loads are in flight meanwhile)
 * @param DMAX 64 128 256 default 128 -- largest head dimension served (registers are sized for it)
 * @param L2PF 0 1 default 0 -- 1: before its wait for the kernel before, the block asks L2 for its slice's keys and values but the newest row (gc_split_prefetch), so they stream in while that kernel drains
 * @param PRE 0 1 default 0 -- 1: the positions are read before the wait for the kernel before (they are the host's, never a kernel's: @pdl), and with them the first step's keys and values but the newest row's, so that after the wait only q and that row are read before the first scores (not yet timed on a GPU: bench/RESULTS.md, session 32)
 * @defaults attention attention_batch L2PF=1 if !AMD -- NVIDIA: the wait is griddepcontrol's (sm_90), so the prefetch overlaps the kernel before
 * @defaults attention_batch SPLIT=8 -- a batch's workspace bounds SPLIT more tightly, and its M rows multiply the blocks
 * @constraint WARPS * WARP <= MAXT && KL <= WARP -- a legal block; a key's lanes lie in one warp
 * @constraint DMAX % (KL * 16 / SB) == 0 -- a key row is whole 16-byte chunks per lane
 * @constraint (2 * HPB + 2 * U) * (DMAX / KL) + 16 * U * DMAX / KL / (16 / SB) + 40 <= min(255, 65536 / (WARPS * WARP)) -- q, output, widened K/V and two raw steps fit the budget
 * @constraint WARPS * HPB * (DMAX + 2) * 4 <= 40960 -- per-warp partial results fit in shared memory
 * @constraint SPLIT * (DMAX + 2) * (128 + 896 * BATCH) <= 2097152 -- the cross-block workspace (128 heads; a batch's 1024 (row, head) pairs) stays within 8 MiB
 * @applies (BATCH == 1 || M == 1) && G > 0 && H % G == 0 && D <= DMAX && (SPLIT == 1 || M * H <= 128 + 896 * BATCH) -- one query row (a batch: any); whole head groups; the workspace holds 128 heads (a batch: 1024 (row, head) pairs)
 * @grid M * G * cdiv(H / G, HPB) * SPLIT 1 1
 * @block WARPS * WARP 1 1
 * @priority 2
 * @priority 4 if K > 0 && D > 64 && !AMD && SM < 90 -- a decode's short-context bucket (at most K keys) with heads over 64, on NVIDIA before sm_90: a lower fixed cost than attention_decode_mma's split with tickets (H200, the 8B after 128 tokens: 245.4 against 239.4 tok/s; session 32); on sm_90 the mma kernel's cluster merge (CL=1) wins it (246.7 / 244.5 against 246.6 / 242.5 after 128 / 850; session 46)
 * @pdl -- reads nothing before its wait for the kernel before but the positions (L2PF: for an L2 prefetch of older cache rows; PRE: for its slice, whose older rows it then loads) and older cache rows: only the host writes the positions, and a decode step's kernel before writes only the newest cache row
 *
 * Block b = (r·G·nb + hb)·SPLIT + s serves row r (0 but for a batch) and
 * head block hb: kv head g = hb / nb and its query heads h0 .. h0+nh-1,
 * h0 = g·(H/G) + (hb % nb)·HPB, nb = cdiv(H/G, HPB), nh = min(HPB, H/G -
 * (hb % nb)·HPB) (so one block reads each K/V row for all its heads, and
 * H/G need not be a multiple of HPB), over key slice s of the row: keys
 * j0 .. j1-1, j0 = s·cdiv(L, SPLIT), L = pos0 + 1 (a batch: pos[r] + 1, in
 * slot pos[M + r]).
 * Inside the block, lane groups of KL lanes each take U consecutive keys
 * per step (group i: keys j0 + i·U + t·NG·U, NG groups); lane k of a group
 * holds elements (c·KL + k)·VEC .. +VEC-1 of q, of the keys and of its
 * output, VEC = 16/SB, so a key row is read with one 16-byte load per lane
 * and chunk. The K and V loads of step t+1 are issued before step t is
 * computed (two register sets), so each lane keeps 2·U·NC 16-byte loads
 * in flight while it works. Scores are reduced over the group with
 * shuffles; each group keeps its own online softmax in fp32, base 2 (q is
 * pre-scaled by scale·log2 e):
 * running max m, sum l, and output o. At the end groups merge within the
 * warp by shuffles, warps within the block through shared memory (each
 * partial weighted by 2^(m_i - max)).
 *
 * With SPLIT > 1 the block writes its (m, l, o) per (row, head) to a
 * module-scope workspace, fences, and takes a ticket from a per-(row, head
 * block) counter; the block that takes the last ticket merges the SPLIT
 * partials, writes O and resets the counter to 0 for the next launch. So
 * one launch does it all, but two launches of this code object must not
 * run concurrently (on two streams); they are serialised in the runtime's
 * one stream. Slices with no keys (SPLIT > L) contribute m = -inf, l = 0.
 * D < DMAX and D not a multiple of VEC are served (element loads, zeros
 * past D).
 */

#define AD_VEC (16 / SB)                 /* elements per 16-byte chunk */
#define AD_T (WARPS * WARP)              /* threads */
#define AD_NG (AD_T / KL)                /* lane groups */
#define AD_NC (DMAX / (KL * AD_VEC))     /* chunks per lane */
#define AD_HMAX (BATCH ? 1024 : 128)     /* (row, head) pairs the workspace holds */
#define AD_W (DMAX + 2)                  /* workspace floats per partial: m, l, o[DMAX] */
#define AD_NEG_INF (-GC_INF)

GC_GLOBAL float ad_ws[SPLIT > 1 ? AD_HMAX * SPLIT * AD_W : 1];
GC_GLOBAL unsigned ad_cnt[SPLIT > 1 ? AD_HMAX : 1];

/* out := row[d0 .. d0+VEC-1] widened, zeros past D. vec_ok: D % VEC == 0
 * (then every chunk is aligned and wholly inside or outside the row). */
template <class T>
GC_DEVICE void ad_load(const T *row, int64_t d0, int64_t D, int vec_ok, float *out) {
  if (vec_ok && d0 < D) {
    gc_ldv<AD_VEC>(row + d0, out);
  } else {
    GC_UNROLL(AD_VEC)
    for (int e = 0; e < AD_VEC; e++)
      out[e] = !vec_ok && d0 + e < D ? gc_ld(row, d0 + e) : 0.0f;
  }
}

/* The raw 16 bytes of elements d0 .. d0+VEC-1 of a row (zero bits, +0.0,
 * past D); vec_ok as for ad_load. Widening waits until the data is used,
 * so a step in flight costs 4 registers per chunk, not VEC. */
GC_DEVICE void ad_fetch(const TB *row, int64_t d0, int64_t D, int vec_ok, gc_raw16 &r) {
  if (vec_ok && d0 < D) {
    r = *reinterpret_cast<const gc_raw16 *>(row + d0);
  } else {
    GC_UNROLL(4)
    for (int w = 0; w < 4; w++)
      r.w[w] = 0u;
    if (!vec_ok)
      for (int e = 0; e < AD_VEC && d0 + e < D; e++) {
        if (SB == 2)
          r.w[e / 2] |= (uint32_t)reinterpret_cast<const uint16_t *>(row)[d0 + e] << (16 * (e % 2));
        else
          r.w[e] = reinterpret_cast<const uint32_t *>(row)[d0 + e];
      }
  }
}

/* K and V chunks of keys jb .. jb+U-1 (zeros from j1 on) for lane kl. */
GC_DEVICE void ad_step_load(const TB *kb, const TB *vb, int64_t ld, int64_t jb, int64_t j1, int kl,
                            int64_t D, int vec_ok, gc_raw16 kr[U][AD_NC], gc_raw16 vr[U][AD_NC]) {
  GC_UNROLL(U)
  for (int u = 0; u < U; u++)
    GC_UNROLL(AD_NC)
    for (int c = 0; c < AD_NC; c++) {
      int64_t d0 = (int64_t)(c * KL + kl) * AD_VEC;
      if (jb + u < j1) {
        ad_fetch(kb + (jb + u) * ld, d0, D, vec_ok, kr[u][c]);
        ad_fetch(vb + (jb + u) * ld, d0, D, vec_ok, vr[u][c]);
      } else {
        GC_UNROLL(4)
        for (int w = 0; w < 4; w++)
          kr[u][c].w[w] = 0u, vr[u][c].w[w] = 0u;
      }
    }
}

/* Row row's L = pos[row] + 1 keys (one row: pos0 + 1) cut in SPLIT
 * slices of cdiv(L, SPLIT): slice sp's keys j0 .. j1-1, and the offset of
 * the row's cache slot (a batch: pos[M + row]·S rows of G·D; else 0).
 * pos: the device's positions, or before the wait a volatile view of
 * them (loads of L2, not of L1 lines the later reads could hit). */
struct ad_slice_t {
  int64_t L, j0, j1, slot;
};
template <class TP>
GC_DEVICE ad_slice_t ad_slice(TP *pos, int64_t M, int64_t row, int sp, int64_t S, int64_t G, int64_t D) {
  ad_slice_t a;
  a.L = (int64_t)pos[row] + 1;
  const int64_t cs = gc_cdiv(a.L, SPLIT);
  a.j0 = gc_min64(a.L, sp * cs);
  a.j1 = gc_min64(a.L, a.j0 + cs);
  a.slot = BATCH ? (int64_t)pos[M + row] * S * G * D : 0;
  return a;
}

GC_KERNEL_BOUNDS(AD_T)
void attention_decode(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos,
                      int64_t M, int64_t H, int64_t G, int64_t D,
#if BATCH
                      int64_t S,
#endif
                      float scale) {
  GC_SHARED float sm_m[WARPS][HPB], sm_l[WARPS][HPB], sm_o[WARPS][HPB][DMAX];
  GC_SHARED int s_last;
  /* SPLIT > 1, the last block's merge: per (head, slice) its weight and l, per head the sum */
  GC_SHARED float sm_wt[SPLIT > 1 ? HPB : 1][SPLIT], sm_lk[SPLIT > 1 ? HPB : 1][SPLIT], sm_ls[HPB];
#if BATCH
  if (M < 1 || G <= 0 || H % G || D <= 0 || D > DMAX || (SPLIT > 1 && M * H > AD_HMAX))
#else
  if (M != 1 || G <= 0 || H % G || D <= 0 || D > DMAX || (SPLIT > 1 && H > AD_HMAX))
#endif
    return; /* outside @applies */
#if !BATCH
  const int64_t S = 0; /* one row: no slots */
#endif
  const int64_t per = H / G, nb = gc_cdiv(per, HPB); /* heads per kv head, blocks per kv head */
#if BATCH
  const int64_t row = gc_bid() / SPLIT / (G * nb);     /* the batch row */
  const int64_t hb = gc_bid() / SPLIT % (G * nb), g = hb / nb;
  const int64_t rhb = row * G * nb + hb;                /* its ticket counter */
#else
  const int64_t row = 0, hb = gc_bid() / SPLIT, g = hb / nb, rhb = hb;
#endif
  const int64_t h0 = g * per + hb % nb * HPB, nh = gc_min64(HPB, per - hb % nb * HPB);
  const int sp = (int)(gc_bid() % SPLIT);
  const int tid = gc_tid(), lane = gc_lane(), w = tid / GC_WARP;
  const int kl = tid % KL, grp = tid / KL;
  const int vec_ok = D % AD_VEC == 0;
  ad_slice_t at = {0, 0, 0, 0};
  if (L2PF || PRE) /* the slice, from positions read past L1 */
    at = ad_slice((const volatile int32_t *)pos, M, row, sp, S, G, D);
  if (L2PF) /* its older rows (but the newest) */
    gc_split_prefetch(Kc + at.slot + g * D, Vc + at.slot + g * D, G * D, D, at.j0, gc_min64(at.j1, at.L - 1), AD_T);
  const int64_t ld = G * D;
  gc_raw16 kr[U][AD_NC], vr[U][AD_NC]; /* this step's keys and values, raw */
  if (PRE) /* the first step's, but the newest row (zeros: it comes after the wait) */
    ad_step_load(Kc + at.slot + g * D, Vc + at.slot + g * D, ld, at.j0 + (int64_t)grp * U,
                 gc_min64(at.j1, at.L - 1), kl, D, vec_ok, kr, vr);
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  if (!PRE) /* on the device: a captured step replays at any lengths and slots */
    at = ad_slice(pos, M, row, sp, S, G, D);
  const int64_t j0 = at.j0, j1 = at.j1;
  Q += row * H * D, O += row * H * D; /* row 0 but for a batch */
  Kc += at.slot, Vc += at.slot;
  const TB *kb = Kc + g * D, *vb = Vc + g * D;
  if (!PRE) {
    ad_step_load(kb, vb, ld, j0 + (int64_t)grp * U, j1, kl, D, vec_ok, kr, vr);
  } else {
    GC_UNROLL(U)
    for (int u = 0; u < U; u++) /* the newest row, where it is in this group's first step */
      if (j0 + (int64_t)grp * U + u == at.L - 1 && at.L - 1 < j1)
        GC_UNROLL(AD_NC)
        for (int c = 0; c < AD_NC; c++) {
          const int64_t d0 = (int64_t)(c * KL + kl) * AD_VEC;
          ad_fetch(kb + (at.L - 1) * ld, d0, D, vec_ok, kr[u][c]);
          ad_fetch(vb + (at.L - 1) * ld, d0, D, vec_ok, vr[u][c]);
        }
  }

  /* q, pre-scaled into the base-2 domain */
  const float qs = scale * 1.4426950408889634f;
  float q[HPB][AD_NC][AD_VEC];
  GC_UNROLL(HPB)
  for (int hh = 0; hh < HPB; hh++)
    GC_UNROLL(AD_NC)
    for (int c = 0; c < AD_NC; c++) {
      ad_load(Q + (h0 + gc_min64(hh, nh - 1)) * D, (int64_t)(c * KL + kl) * AD_VEC, D, vec_ok,
              q[hh][c]); /* heads past nh repeat the last one and are not stored */
      GC_UNROLL(AD_VEC)
      for (int e = 0; e < AD_VEC; e++)
        q[hh][c][e] *= qs;
    }

  float m[HPB], l[HPB], o[HPB][AD_NC][AD_VEC];
  GC_UNROLL(HPB)
  for (int hh = 0; hh < HPB; hh++) {
    m[hh] = AD_NEG_INF, l[hh] = 0.0f;
    GC_UNROLL(AD_NC)
    for (int c = 0; c < AD_NC; c++)
      GC_UNROLL(AD_VEC)
      for (int e = 0; e < AD_VEC; e++)
        o[hh][c][e] = 0.0f;
  }

  /* The loop bound is the warp's first group, so all lanes of a warp run
   * the same steps (the shuffles need them); later groups mask keys. */
  const int grp0 = w * (GC_WARP / KL);
  for (int64_t jbase = j0; jbase + (int64_t)grp0 * U < j1; jbase += (int64_t)AD_NG * U) {
    const int64_t jb = jbase + (int64_t)grp * U;
    gc_raw16 kn[U][AD_NC], vn[U][AD_NC]; /* the next step's, in flight */
    ad_step_load(kb, vb, ld, jb + (int64_t)AD_NG * U, j1, kl, D, vec_ok, kn, vn);
    float kf[U][AD_NC][AD_VEC], vf[U][AD_NC][AD_VEC];
    GC_UNROLL(U)
    for (int u = 0; u < U; u++)
      GC_UNROLL(AD_NC)
      for (int c = 0; c < AD_NC; c++) {
        gc_ldv<AD_VEC>(reinterpret_cast<const TB *>(&kr[u][c]), kf[u][c]);
        gc_ldv<AD_VEC>(reinterpret_cast<const TB *>(&vr[u][c]), vf[u][c]);
      }
    GC_UNROLL(HPB)
    for (int hh = 0; hh < HPB; hh++) {
      float s[U], mx = m[hh];
      GC_UNROLL(U)
      for (int u = 0; u < U; u++) {
        float d = 0.0f;
        GC_UNROLL(AD_NC)
        for (int c = 0; c < AD_NC; c++)
          GC_UNROLL(AD_VEC)
          for (int e = 0; e < AD_VEC; e++)
            d = gc_fma(q[hh][c][e], kf[u][c][e], d);
        d = gc_group_sum(d, KL);
        s[u] = jb + u < j1 ? d : AD_NEG_INF;
        mx = gc_max(mx, s[u]);
      }
      if (mx == AD_NEG_INF)
        continue; /* no keys yet for this group */
      float corr = gc_split_weight(m[hh], mx), ls = 0.0f;
      GC_UNROLL(AD_NC)
      for (int c = 0; c < AD_NC; c++)
        GC_UNROLL(AD_VEC)
        for (int e = 0; e < AD_VEC; e++)
          o[hh][c][e] *= corr;
      GC_UNROLL(U)
      for (int u = 0; u < U; u++) {
        float p = gc_exp2(s[u] - mx); /* 0 for masked keys */
        ls += p;
        GC_UNROLL(AD_NC)
        for (int c = 0; c < AD_NC; c++)
          GC_UNROLL(AD_VEC)
          for (int e = 0; e < AD_VEC; e++)
            o[hh][c][e] = gc_fma(p, vf[u][c][e], o[hh][c][e]);
      }
      l[hh] = l[hh] * corr + ls;
      m[hh] = mx;
    }
    GC_UNROLL(U)
    for (int u = 0; u < U; u++)
      GC_UNROLL(AD_NC)
      for (int c = 0; c < AD_NC; c++)
        kr[u][c] = kn[u][c], vr[u][c] = vn[u][c];
  }

  /* Merge the lane groups of each warp (butterfly over group bits). */
  for (int mask = KL; mask < GC_WARP; mask <<= 1) {
    GC_UNROLL(HPB)
    for (int hh = 0; hh < HPB; hh++) {
      float mo = gc_shfl_xor(m[hh], mask), lo = gc_shfl_xor(l[hh], mask);
      float mn = gc_max(m[hh], mo), a = gc_split_weight(m[hh], mn), b = gc_split_weight(mo, mn);
      l[hh] = l[hh] * a + lo * b;
      GC_UNROLL(AD_NC)
      for (int c = 0; c < AD_NC; c++)
        GC_UNROLL(AD_VEC)
        for (int e = 0; e < AD_VEC; e++) {
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
      GC_UNROLL(AD_NC)
      for (int c = 0; c < AD_NC; c++)
        GC_UNROLL(AD_VEC)
        for (int e = 0; e < AD_VEC; e++)
          sm_o[w][hh][(c * KL + kl) * AD_VEC + e] = o[hh][c][e];
    }
  }
  gc_barrier();

  /* Merge the warps: thread t takes (head, element) pairs. */
  for (int64_t i = tid; i < nh * D; i += AD_T) {
    const int hh = (int)(i / D), d = (int)(i % D);
    float mx, ls, os;
    gc_split_warps<WARPS>(&sm_m[0][hh], &sm_l[0][hh], &sm_o[0][hh][d], HPB, HPB * DMAX, mx, ls, os);
    if (SPLIT == 1)
      STORE_C(O, (h0 + hh) * D + d, os / ls);
    else
      gc_split_put(ad_ws + ((row * H + h0 + hh) * SPLIT + sp) * AD_W, d, mx, ls, os);
  }
  /* Hand off: the last block of this head block merges the slices (the
   * gc-split block: the loads of an element's SPLIT partials all in flight;
   * the merge is latency-bound) */
  if (SPLIT == 1 || !gc_split_last(&ad_cnt[rhb], SPLIT, &s_last))
    return;
  gc_split_merge<SPLIT>(ad_ws + (row * H + h0) * SPLIT * AD_W, AD_W, (int)nh, D, sm_wt, sm_lk, sm_ls, AD_T,
                        [&](int hh, int d, float v) { STORE_C(O, (h0 + hh) * D + d, v); });
}
