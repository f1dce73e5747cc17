/* attention_decode_wmma.cu — AMD matrix-core attention of a decode step
 * with grouped-query heads, split over the sequence (flash-decoding), on
 * RDNA3 (WMMA: gfx1100, wave32): O = softmax(scale · q·Kᵀ) · V over cache
 * rows 0 .. pos0 of kv head h / (H/G), for one query token (attention,
 * M = 1; built for attention_batch, BATCH = 1, each row of Q at its own
 * position and cache slot). attention_decode_mfma.cu's structure (same
 * ops, arguments, split and merge) with attention_wmma.cu's operands: the
 * query heads of a kv head are the 16 columns of the transposed products
 * Sᵀ = K·Qᵀ and Oᵀ += Vᵀ·Pᵀ (v_wmma_f32_16x16x16_{f16,bf16}), so every
 * K/V row is read once. (Not yet timed on an AMD GPU.)
 *
 * @template attention_decode_wmma
 * @op attention attention_batch
 * @backend hip
 * @dtypes f16 bf16
 * @kernel attention_decode_wmma
 * @param WARPS 1 2 4 default 2 -- waves per block, each taking its share of every tile's 16-key blocks
 * @param KB 16 32 64 default 32 -- keys per tile
 * @param STAGES 1 2 default 1 -- LDS stages: 2 double-buffers the K/V tiles, 1 keeps one
 * @param PF 0 1 default 0 -- 1: the next tile's loads are in flight (in registers) during this tile's math, as attention_wmma's; 0: issued after it (at head size 128 the 16 query columns' operands and accumulators leave no registers for them)
 * @param SPLIT 1 2 4 8 16 32 64 default 16 -- blocks per kv head (a batch: per row and kv head), each over a 1/SPLIT slice of the keys
 * @param DMAX 64 128 default 128 -- largest head dimension served (registers are sized for it)
 * @defaults attention_batch SPLIT=4 -- a batch's M rows multiply the blocks: fewer slices (attention_decode_mma's batch default; timed on NVIDIA only)
 * @constraint WMMA && WARP == 32 -- WMMA targets (RDNA3: gfx1100), wave32
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint WARPS * 16 <= KB -- every wave has a 16-key block of each tile
 * @constraint DMAX / 2 + DMAX / 2 + max(KB / 2 + 32 * PF * cdiv(KB * DMAX / 32, WARPS * 32), 32 * cdiv(KB * DMAX / 32, WARPS * 32)) + 64 <= VGPRS -- estimated VGPRs: O's accumulators and q's operands throughout, then the scores (and with PF the next tile's loads) or, between fetch and LDS, the tile's loads, and 64 for the rest: every point inside compiles without spills for gfx1100
 * @constraint max(STAGES * (KB * (DMAX + 8) + DMAX * (KB + 8)) * 2, WARPS * 16 * (DMAX + 2) * 4 + 128 * SPLIT + 80) <= SMEM -- the K and Vᵀ tiles of every stage, later the waves' partials and the merge's scratch, fit in LDS
 * @constraint SPLIT * (DMAX + 2) * (128 + 896 * BATCH) <= 2097152 -- the cross-block workspace (128 heads; a batch's 1024 (row, head) pairs) stays within 8 MiB
 * @shmem max(STAGES * (KB * (DMAX + 8) + DMAX * (KB + 8)) * 2, WARPS * 16 * (DMAX + 2) * 4 + 128 * SPLIT + 80)
 * @applies (BATCH == 1 || M == 1) && G > 0 && H % G == 0 && H / G <= 16 && D % 16 == 0 && D <= DMAX && (SPLIT == 1 || M * H <= 128 + 896 * BATCH) -- one query row (a batch: any); a kv head's query heads fit the WMMA's 16 columns; whole 16-wide k steps of D; the workspace holds 128 heads (a batch: 1024 (row, head) pairs)
 * @grid M * G * SPLIT 1 1
 * @block WARPS * 32 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing (a no-op on AMD)
 *
 * Block b = (t·G + g)·SPLIT + s serves row t (0 but for a batch) and kv
 * head g (query heads h0 .. h0+per-1, h0 = g·per, per = H/G; query row r
 * is head h0 + r, rows past per repeat the last head and are not stored)
 * over key slice s of the row: keys j0 .. j1-1, j0 = s·cdiv(L, SPLIT), L =
 * pos0 + 1 (a batch: pos[t] + 1, in slot pos[M + t]). The block loads the
 * slice's tiles of KB keys into LDS together (the prelude's gc-kv-lds
 * block, rows padded by 8 as attention_wmma's; with PF the next tile's
 * loads in flight during this one's math); wave w takes the tile's 16-key blocks w, w +
 * WARPS, ... and keeps its own online softmax. Lane l owns query row l %
 * 16 (lanes l and l ^ 16 each hold half of a block's scores, keys 2r +
 * l/16, and half of O's columns); the running max is over the lane pair;
 * Pᵀ's B operand is the pair's probabilities swapped and interleaved
 * (gc_wmma_pt), rounded to f16, or for bf16 as two parts, hi + lo, each a
 * WMMA (as attention_decode_mma). Then the waves' partials meet in LDS
 * (the stages' space) and merge, and with SPLIT > 1 the slices merge
 * through a module-scope workspace and a ticket (the prelude's gc-split
 * block; two launches of this code object must not run concurrently: the
 * runtime's one stream serialises them).
 */

#define ADW_T (WARPS * 32)          /* threads */
#define ADW_NB (KB / 16)            /* 16-key blocks of a tile */
#define ADW_ND (DMAX / 16)          /* 16-column blocks of D (k steps of K·Qᵀ, blocks of Oᵀ) */
#define ADW_SK GC_KV_SK(DMAX, 8)    /* LDS row stride of K, elements (gc-kv-lds) */
#define ADW_SV GC_KV_SV(KB, 8)      /* ... of Vᵀ */
#define ADW_SSZ GC_KV_SSZ(KB, DMAX, 8) /* elements per stage */
#define ADW_W (DMAX + 2)            /* workspace floats per partial: m, l, o[DMAX] */
#define ADW_HMAX (BATCH ? 1024 : 128) /* (row, head) pairs the workspace holds */
#define ADW_PP (GC_TB == GC_BF16 ? 2 : 1) /* parts of P in P·V: bf16's as hi + lo (attention_decode_mma's ADM_PP) */

#if !GC_WMMA
#error "attention_decode_wmma needs a WMMA target (gfx1100 .. gfx1103)"
#endif

GC_GLOBAL float adw_ws[SPLIT > 1 ? ADW_HMAX * SPLIT * ADW_W : 1];
GC_GLOBAL unsigned adw_cnt[SPLIT > 1 ? ADW_HMAX : 1]; /* per (row, kv head): G <= H */

/* args: Q[M, H, D] (TA), Kc, Vc [pos0+1.., G, D] (TB; a batch: [slots,
 * S, G, D]), O[M, H, D] (TC), int32 *pos (pos0; a batch: [2, M], positions
 * then slots), int64 M, H, G, D (a batch: and S), float scale. */
GC_KERNEL_BOUNDS(ADW_T)
void attention_decode_wmma(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos, int64_t M,
                           int64_t H, int64_t G, int64_t D,
#if BATCH
                           int64_t S,
#endif
                           float scale) {
  gc_pdl_wait();
  gc_pdl_launch();
  if ((BATCH ? M < 1 : M != 1) || G <= 0 || H % G || H / G > 16 || D <= 0 || D % 16 || D > DMAX ||
      (SPLIT > 1 && M * H > ADW_HMAX))
    return; /* outside @applies */
  /* positions and dimensions as 32-bit ints (pos is int32; so are the
     cache's rows), pointers offset in 64 bits */
#if !BATCH
  const int64_t S = 0; /* a batch's rows a slot */
#endif
  const gc_split_at at = gc_split_block<SPLIT, BATCH>(pos, M, H, G, D, S, Q, Kc, Vc, O); /* row, kv head, keys */
  const int per = (int)(H / G), Dn = (int)D, sp = at.sp, j0 = at.j0, j1 = at.j1;
  const int64_t row = at.row, g = at.g, h0 = g * per, ld = G * D;
  const int tid = gc_tid(), lane = gc_lane(), w = tid / 32;
  const int ntile = (j1 - j0 + KB - 1) / KB;
  TB *smem = reinterpret_cast<TB *>(gc_dyn_shared());
  Kc += g * D, Vc += g * D;

  /* Qᵀ's B operands: k step s, column (query row) GC_WMMA_AB_ROW, 16 d */
  gc_short16_t qf[ADW_ND];
  {
    const int r = GC_WMMA_AB_ROW(lane);
    const TA *q = Q + (h0 + (r < per ? r : per - 1)) * D + GC_WMMA_AB_K(0);
    GC_UNROLL(ADW_ND)
    for (int s = 0; s < ADW_ND; s++) {
      struct { gc_raw16 lo, hi; } v = {gc_raw16{{0, 0, 0, 0}}, gc_raw16{{0, 0, 0, 0}}};
      if (16 * s < Dn)
        v = {reinterpret_cast<const gc_raw16 *>(q + 16 * s)[0], reinterpret_cast<const gc_raw16 *>(q + 16 * s)[1]};
      qf[s] = __builtin_bit_cast(gc_short16_t, v);
    }
  }
  const int rc = GC_WMMA_D_COL(lane); /* the query row of the lane's accumulators */

  gc_float8_t o[ADW_ND];
  GC_UNROLL(ADW_ND)
  for (int n = 0; n < ADW_ND; n++)
    o[n] = gc_float8_t{};
  float m = -GC_INF, l = 0.0f;
  const float sc = scale * 1.4426950408889634f; /* softmax in base 2 */

  gc_raw16 kr[GC_KV_PER(KB, DMAX, ADW_T)][4], vr[GC_KV_PER(KB, DMAX, ADW_T)][4]; /* a tile's units (gc-kv-lds) */
  if (ntile > 0) {
    gc_kv_fetch<KB, DMAX, ADW_T>(kr, vr, Kc, Vc, j0, j1, ld, Dn);
    gc_kv_put<KB, DMAX, ADW_T, 8>(smem, kr, vr, Dn);
  }
  gc_barrier();
  GC_UNROLL(1)
  for (int j = 0; j < ntile; j++) {
    const TB *ks = smem + (STAGES == 2 ? (j & 1) : 0) * ADW_SSZ, *vt = ks + KB * ADW_SK;
    const int jt = j0 + j * KB; /* the tile's first key */
    const bool more = j + 1 < ntile;
    if (PF && more)
      gc_kv_fetch<KB, DMAX, ADW_T>(kr, vr, Kc, Vc, jt + KB, j1, ld, Dn);
    if (16 * w + jt < j1) { /* the wave's first block has a key (so the max below is finite) */
      /* Sᵀ = K·Qᵀ for the wave's 16-key blocks with a key */
      gc_float8_t s[ADW_NB];
      GC_UNROLL(ADW_NB)
      for (int nb = 0; nb < ADW_NB; nb++) {
        s[nb] = gc_float8_t{};
        if (nb % WARPS != w || jt + 16 * nb >= j1)
          continue;
        GC_UNROLL(ADW_ND)
        for (int k = 0; k < ADW_ND; k++)
          if (16 * k < Dn)
            s[nb] = gc_wmma<GC_TB>(gc_kv_frag16(ks, ADW_SK, 16 * nb, 16 * k, lane), qf[k], s[nb]);
      }

      /* mask (the other waves' blocks and keys from j1 on), running max over the lane pair, rescale */
      float mx = m;
      GC_UNROLL(ADW_NB)
      for (int nb = 0; nb < ADW_NB; nb++)
        GC_UNROLL(8)
        for (int r = 0; r < 8; r++) {
          const int key = jt + 16 * nb + GC_WMMA_D_ROW(lane, r);
          s[nb][r] = nb % WARPS == w && key < j1 ? s[nb][r] * sc : -GC_INF;
          mx = gc_max(mx, s[nb][r]);
        }
      mx = gc_max(mx, gc_shfl_xor(mx, 16));
      const float corr = gc_exp2(m - mx); /* 0 at the wave's first tile (m = -inf) */
      m = mx;
      l *= corr;
      GC_UNROLL(ADW_ND)
      for (int n = 0; n < ADW_ND; n++)
        o[n] *= corr;

      /* Oᵀ += Vᵀ·Pᵀ, one 16-key block at a time */
      GC_UNROLL(ADW_NB)
      for (int nb = 0; nb < ADW_NB; nb++) {
        if (nb % WARPS != w || jt + 16 * nb >= j1)
          continue; /* P = 0 there */
        float p[8];
        GC_UNROLL(8)
        for (int r = 0; r < 8; r++) {
          p[r] = gc_exp2(s[nb][r] - m);
          l += p[r];
        }
        gc_short16_t pb[ADW_PP]; /* Pᵀ's B operands: P rounded; ADW_PP 2: then P minus that, rounded */
        GC_UNROLL(ADW_PP)
        for (int q = 0; q < ADW_PP; q++) {
          pb[q] = gc_wmma_pt<TB>(p);
          if (ADW_PP == 2 && q == 0) /* keep what rounding lost for part 1 */
            GC_UNROLL(4)
            for (int i = 0; i < 4; i++) {
              float r[2];
              gc_unpack2(TB(), gc_pack2(TB(), p[2 * i], p[2 * i + 1]), r);
              p[2 * i] -= r[0], p[2 * i + 1] -= r[1];
            }
        }
        GC_UNROLL(ADW_ND)
        for (int n = 0; n < ADW_ND; n++)
          if (16 * n < Dn) {
            const gc_short16_t a = gc_kv_frag16(vt, ADW_SV, 16 * n, 16 * nb, lane);
            GC_UNROLL(ADW_PP)
            for (int q = 0; q < ADW_PP; q++)
              o[n] = gc_wmma<GC_TB>(a, pb[q], o[n]);
          }
      }
    }
    if (!PF && more)
      gc_kv_fetch<KB, DMAX, ADW_T>(kr, vr, Kc, Vc, jt + KB, j1, ld, Dn);
    if (STAGES == 2) {
      if (more)
        gc_kv_put<KB, DMAX, ADW_T, 8>(smem + ((j + 1) & 1) * ADW_SSZ, kr, vr, Dn);
      gc_barrier();
    } else if (more) {
      gc_barrier(); /* the tile is consumed */
      gc_kv_put<KB, DMAX, ADW_T, 8>(smem, kr, vr, Dn);
      gc_barrier();
    }
  }
  gc_barrier(); /* every wave is done with the stages: they become the partials' space */

  /* The wave's partial of each real row into LDS: m at pm[w·16 + r], l at
     pl[...], o at po[(w·16 + r)·DMAX + d] (lanes l and l ^ 16 each their
     half of the row's columns) */
  l += gc_shfl_xor(l, 16);
  float *pm = reinterpret_cast<float *>(gc_dyn_shared()), *pl = pm + WARPS * 16, *po = pl + WARPS * 16;
  if (rc < per) {
    if (lane < 16)
      pm[w * 16 + rc] = m, pl[w * 16 + rc] = l;
    GC_UNROLL(ADW_ND)
    for (int n = 0; n < ADW_ND; n++)
      GC_UNROLL(8)
      for (int r = 0; r < 8; r++) {
        const int d = 16 * n + GC_WMMA_D_ROW(lane, r);
        if (d < Dn)
          po[(w * 16 + rc) * DMAX + d] = o[n][r];
      }
  }
  gc_barrier();

  /* Merge the waves, and with a split the slices (gc-split) */
  gc_split_lds_finish<WARPS, 16, DMAX, SPLIT>(pm, per, Dn, adw_ws + (SPLIT > 1 ? (row * H + h0) * SPLIT * ADW_W : 0),
                                            ADW_W, sp, adw_cnt + (SPLIT > 1 ? row * G + g : 0), ADW_T,
                                            [&](int hh, int d, float v) { STORE_C(O, (h0 + hh) * D + d, v); });
}
