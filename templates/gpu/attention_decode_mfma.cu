/* attention_decode_mfma.cu — AMD matrix-core attention of a decode step
 * with grouped-query heads, split over the sequence (flash-decoding), on
 * CDNA (MFMA: gfx90a, gfx942): O = softmax(scale · q·Kᵀ) · V over cache
 * rows 0 .. pos0 of kv head h / (H/G), for one query token (attention,
 * M = 1; built for attention_batch, BATCH = 1, each row of Q at its own
 * position and cache slot, as attention_decode_mma). The AMD counterpart
 * of attention_decode_mma.cu (same ops, arguments, split and merge): the query heads of a kv head are the MI
 * query rows of attention_mfma.cu's transposed products Sᵀ = K·Qᵀ and
 * Oᵀ += Vᵀ·Pᵀ (its comment gives the operand layouts), so every K/V row is
 * read once. (Not yet timed on an AMD GPU.)
 *
 * @template attention_decode_mfma
 * @op attention attention_batch
 * @backend hip
 * @dtypes f16 bf16
 * @kernel attention_decode_mfma
 * @param MI 16 32 default 16 -- MFMA family: 16x16x16 (up to 16 query heads a kv head) or 32x32x8 (32)
 * @param WARPS 1 2 4 8 default 4 -- waves per block, each taking its share of every tile's MI-key blocks
 * @param KB 32 64 128 default 64 -- keys per tile (a multiple of MI)
 * @param STAGES 1 2 default 1 -- LDS stages: 2 double-buffers the K/V tiles, 1 keeps one (the next tile waits in registers during this tile's math either way)
 * @param SPLIT 1 2 4 8 16 32 64 default 16 -- blocks per kv head, each over a 1/SPLIT slice of the keys
 * @param DMAX 64 128 default 128 -- largest head dimension served (registers are sized for it)
 * @defaults attention_batch SPLIT=4 -- a batch's M rows multiply the blocks: fewer slices (attention_decode_mma's batch default; timed on NVIDIA only)
 * @constraint MFMA && WARP == 64 -- MFMA targets (CDNA: gfx90a, gfx942), wave64
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint KB % MI == 0 && DMAX % MI == 0 -- whole MFMA blocks of keys and of O's columns
 * @constraint WARPS * MI <= KB -- every wave has a block of each tile
 * @constraint DMAX * MI / 64 + KB * MI / 64 + DMAX * MI / 128 + KB * MI / 128 + 32 * cdiv(KB * DMAX / 32, WARPS * 64) + 40 <= VGPRS / 2 + 64 -- attention_mfma's estimate of VGPRs and AGPRs
 * @constraint 32 * cdiv(KB * DMAX / 32, WARPS * 64) <= 64 -- the next tile's K/V chunks a thread holds
 * @constraint max(STAGES * (KB * (DMAX + 4) + DMAX * (KB + 4)) * 2, WARPS * MI * (DMAX + 2) * 4 + 8 * MI * SPLIT + 4 * MI + 16) <= SMEM -- the K and Vᵀ tiles of every stage, later the waves' partials and the merge's scratch, fit in LDS
 * @constraint SPLIT * (DMAX + 2) * (128 + 896 * BATCH) <= 2097152 -- the cross-block workspace (128 heads; a batch's 1024 (row, head) pairs) stays within 8 MiB
 * @shmem max(STAGES * (KB * (DMAX + 4) + DMAX * (KB + 4)) * 2, WARPS * MI * (DMAX + 2) * 4 + 8 * MI * SPLIT + 4 * MI + 16)
 * @applies (BATCH == 1 || M == 1) && G > 0 && H % G == 0 && H / G <= MI && D % 16 == 0 && D <= DMAX && (SPLIT == 1 || M * H <= 128 + 896 * BATCH) -- one query row (a batch: any); a kv head's query heads fit the MFMA's columns; whole 16-wide k steps of D; the workspace holds 128 heads (a batch: 1024 (row, head) pairs)
 * @grid M * G * SPLIT 1 1
 * @block WARPS * 64 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing (a no-op on AMD)
 *
 * Block b = (t·G + g)·SPLIT + s serves row t (0 but for a batch) and kv
 * head g (query heads h0 .. h0+per-1, h0 = g·per, per = H/G; query row r
 * is head h0 + r, rows past per repeat the last head and are not stored)
 * over key slice s of the row: keys j0 .. j1-1, j0 = s·cdiv(L, SPLIT), L =
 * pos0 + 1 (a batch: pos[t] + 1, in slot pos[M + t]). The block loads the slice's tiles
 * of KB keys into LDS together (the prelude's gc-kv-lds block: K as rows,
 * V transposed; the next tile in registers during this one's math, one or
 * two LDS stages as attention_mfma); wave w takes the tile's MI-key blocks
 * w, w + WARPS, ... and keeps its own online softmax (m, l and Oᵀ per
 * query row, a lane's accumulators all of its row), skipping a tile where
 * it has no block with a key. Then the waves' partials meet in LDS (the
 * stages' space) and merge (P·V takes P rounded to f16, or for bf16 as
 * two parts, hi + lo, as attention_decode_mma), and with SPLIT > 1 the slices merge through a
 * module-scope workspace and a ticket (the prelude's gc-split block, as
 * attention_decode_mma; two launches of this code object must not run
 * concurrently: the runtime's one stream serialises them).
 */

#define ADF_T (WARPS * 64)         /* threads */
#define ADF_KI GC_MFMA_K(MI, 4)    /* k per MFMA: 8 (32x32x8) or 16 (16x16x16) */
#define ADF_NACC GC_MFMA_NACC(MI)  /* accumulators a lane per block */
#define ADF_NQ (ADF_NACC / 4)      /* groups of 4 consecutive accumulator rows */
#define ADF_KPB (MI / ADF_KI)      /* P·V k steps per MI-key block (4 or 1) */
#define ADF_NB (KB / MI)           /* MI-key blocks of a tile */
#define ADF_QK (DMAX / ADF_KI)     /* k steps of K·Qᵀ */
#define ADF_ND (DMAX / MI)         /* MI-column blocks of Oᵀ */
#define ADF_KT (KB / ADF_KI)       /* k steps of Vᵀ·Pᵀ per tile */
#define ADF_SK GC_KV_SK(DMAX, 4)   /* LDS row stride of K, elements (gc-kv-lds) */
#define ADF_SV GC_KV_SV(KB, 4)     /* ... of Vᵀ */
#define ADF_SSZ GC_KV_SSZ(KB, DMAX, 4) /* elements per stage */
#define ADF_W (DMAX + 2)           /* workspace floats per partial: m, l, o[DMAX] */
#define ADF_PP (GC_TB == GC_BF16 ? 2 : 1) /* parts of P in P·V: bf16's as hi + lo (attention_decode_mma's ADM_PP) */

#if !GC_MFMA
#error "attention_decode_mfma needs an MFMA target (gfx90a, gfx940, gfx941, gfx942)"
#endif

typedef typename gc_mfma<GC_TB, MI>::acc_t adf_acc_t;

#define ADF_HMAX (BATCH ? 1024 : 128) /* (row, head) pairs the workspace holds */

GC_GLOBAL float adf_ws[SPLIT > 1 ? ADF_HMAX * SPLIT * ADF_W : 1];
GC_GLOBAL unsigned adf_cnt[SPLIT > 1 ? ADF_HMAX : 1]; /* per (row, kv head): G <= H */

/* args: Q[M, H, D] (TA), Kc, Vc [pos0+1.., G, D] (TB; a batch: [slots,
 * S, G, D]), O[M, H, D] (TC), int32 *pos (pos0; a batch: [2, M], positions
 * then slots), int64 M, H, G, D (a batch: and S), float scale. */
GC_KERNEL_BOUNDS(ADF_T)
void attention_decode_mfma(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos, int64_t M,
                           int64_t H, int64_t G, int64_t D,
#if BATCH
                           int64_t S,
#endif
                           float scale) {
  gc_pdl_wait();
  gc_pdl_launch();
  if ((BATCH ? M < 1 : M != 1) || G <= 0 || H % G || H / G > MI || D <= 0 || D % 16 || D > DMAX ||
      (SPLIT > 1 && M * H > ADF_HMAX))
    return; /* outside @applies */
  /* positions and dimensions as 32-bit ints (pos is int32; so are the
     cache's rows), pointers offset in 64 bits */
#if !BATCH
  const int64_t S = 0; /* a batch's rows a slot */
#endif
  const gc_split_at at = gc_split_block<SPLIT, BATCH>(pos, M, H, G, D, S, Q, Kc, Vc, O); /* row, kv head, keys */
  const int per = (int)(H / G), Dn = (int)D, DR = (Dn + MI - 1) / MI * MI; /* D rounded up to MI */
  const int sp = at.sp, j0 = at.j0, j1 = at.j1;
  const int64_t row = at.row, g = at.g, h0 = g * per, ld = G * D;
  const int tid = gc_tid(), lane = gc_lane(), w = tid / 64;
  const int ntile = (j1 - j0 + KB - 1) / KB;
  TB *smem = reinterpret_cast<TB *>(gc_dyn_shared());
  Kc += g * D, Vc += g * D;

  /* Qᵀ's B fragments: k step s, column (query row) GC_MFMA_AB_ROW */
  gc_short4_t qf[ADF_QK];
  {
    const int r = GC_MFMA_AB_ROW(MI, lane);
    const TA *q = Q + (h0 + (r < per ? r : per - 1)) * D;
    GC_UNROLL(ADF_QK)
    for (int s = 0; s < ADF_QK; s++) {
      const int d = s * ADF_KI + GC_MFMA_AB_K(MI, 4, lane, 0);
      qf[s] = d < Dn ? *reinterpret_cast<const gc_short4_t *>(q + d) : gc_short4_t{0, 0, 0, 0};
    }
  }
  const int rc = GC_MFMA_D_COL(MI, lane); /* the query row of the lane's accumulators */

  adf_acc_t o[ADF_ND];
  GC_UNROLL(ADF_ND)
  for (int n = 0; n < ADF_ND; n++)
    o[n] = adf_acc_t{};
  float m = -GC_INF, l = 0.0f;
  const float sc = scale * 1.4426950408889634f; /* softmax in base 2 */

  gc_raw16 kr[GC_KV_PER(KB, DMAX, ADF_T)][4], vr[GC_KV_PER(KB, DMAX, ADF_T)][4]; /* a tile's units (gc-kv-lds) */
  if (ntile > 0) {
    gc_kv_fetch<KB, DMAX, ADF_T>(kr, vr, Kc, Vc, j0, j1, ld, Dn);
    gc_kv_put<KB, DMAX, ADF_T, 4>(smem, kr, vr, DR);
  }
  gc_barrier();
  GC_UNROLL(1)
  for (int j = 0; j < ntile; j++) {
    const TB *ks = smem + (STAGES == 2 ? (j & 1) : 0) * ADF_SSZ, *vt = ks + KB * ADF_SK;
    const int jt = j0 + j * KB; /* the tile's first key */
    const bool more = j + 1 < ntile;
    if (more)
      gc_kv_fetch<KB, DMAX, ADF_T>(kr, vr, Kc, Vc, jt + KB, j1, ld, Dn);
    if (w * MI + jt < j1) { /* the wave's first block has a key (so the max below is finite) */
      /* Sᵀ = K·Qᵀ for the wave's MI-key blocks with a key */
      adf_acc_t s[ADF_NB];
      GC_UNROLL(ADF_NB)
      for (int nb = 0; nb < ADF_NB; nb++) {
        s[nb] = adf_acc_t{};
        if (nb % WARPS != w || jt + nb * MI >= j1)
          continue;
        GC_UNROLL(ADF_QK)
        for (int k = 0; k < ADF_QK; k++)
          if (k / ADF_KPB * MI < Dn) /* per MI columns, as P·V (K is 0 from column D to DR) */
            s[nb] = gc_mfma<GC_TB, MI>::run(gc_kv_frag<MI>(ks, ADF_SK, nb * MI, k * ADF_KI, lane), qf[k], s[nb]);
      }

      /* mask (the other waves' blocks and keys from j1 on), running max, rescale */
      float mx = m;
      GC_UNROLL(ADF_NB)
      for (int nb = 0; nb < ADF_NB; nb++)
        GC_UNROLL(ADF_NACC)
        for (int r = 0; r < ADF_NACC; r++) {
          const int key = jt + nb * MI + GC_MFMA_D_ROW(MI, lane, r);
          s[nb][r] = nb % WARPS == w && key < j1 ? s[nb][r] * sc : -GC_INF;
          mx = gc_max(mx, s[nb][r]);
        }
      GC_UNROLL(64 / MI)
      for (int x = MI; x < 64; x *= 2) /* the row's other lanes */
        mx = gc_max(mx, gc_shfl_xor(mx, x));
      const float corr = gc_exp2(m - mx); /* 0 at the wave's first tile (m = -inf) */
      m = mx;
      l *= corr;
      GC_UNROLL(ADF_ND)
      for (int n = 0; n < ADF_ND; n++)
        o[n] *= corr;

      /* Oᵀ += Vᵀ·Pᵀ, k step t: keys t·KI .. of the tile, registers 4(t % KPB) .. of block t / KPB */
      GC_UNROLL(ADF_KT)
      for (int t = 0; t < ADF_KT; t++) {
        const int nb = t / ADF_KPB, r0 = 4 * (t % ADF_KPB);
        if (nb % WARPS != w || jt + nb * MI >= j1)
          continue; /* P = 0 there */
        float p[4];
        GC_UNROLL(4)
        for (int v = 0; v < 4; v++) {
          p[v] = gc_exp2(s[nb][r0 + v] - m);
          l += p[v];
        }
        gc_short4_t b[ADF_PP]; /* Pᵀ's B fragments: P rounded; ADF_PP 2: then P minus that, rounded */
        GC_UNROLL(ADF_PP)
        for (int q = 0; q < ADF_PP; q++) {
          const gc_raw8 pb{{gc_pack2(TB(), p[0], p[1]), gc_pack2(TB(), p[2], p[3])}};
          b[q] = __builtin_bit_cast(gc_short4_t, pb);
          if (ADF_PP == 2 && q == 0) { /* keep what rounding lost for part 1 */
            float r[4];
            gc_unpack2(TB(), pb.w[0], r), gc_unpack2(TB(), pb.w[1], r + 2);
            GC_UNROLL(4)
            for (int v = 0; v < 4; v++)
              p[v] -= r[v];
          }
        }
        GC_UNROLL(ADF_ND)
        for (int n = 0; n < ADF_ND; n++)
          if (n * MI < Dn) {
            const gc_short4_t a = gc_kv_frag<MI>(vt, ADF_SV, n * MI, t * ADF_KI, lane);
            GC_UNROLL(ADF_PP)
            for (int q = 0; q < ADF_PP; q++)
              o[n] = gc_mfma<GC_TB, MI>::run(a, b[q], o[n]);
          }
      }
    }
    if (STAGES == 2) {
      if (more)
        gc_kv_put<KB, DMAX, ADF_T, 4>(smem + ((j + 1) & 1) * ADF_SSZ, kr, vr, DR);
      gc_barrier();
    } else if (more) {
      gc_barrier(); /* the tile is consumed */
      gc_kv_put<KB, DMAX, ADF_T, 4>(smem, kr, vr, DR);
      gc_barrier();
    }
  }
  gc_barrier(); /* every wave is done with the stages: they become the partials' space */

  /* The wave's partial of each real row into LDS: m at pm[w·MI + r], l at
     pl[...], o at po[(w·MI + r)·DMAX + d] */
  GC_UNROLL(64 / MI)
  for (int x = MI; x < 64; x *= 2)
    l += gc_shfl_xor(l, x);
  float *pm = reinterpret_cast<float *>(gc_dyn_shared()), *pl = pm + WARPS * MI, *po = pl + WARPS * MI;
  if (rc < per) {
    if (lane < MI)
      pm[w * MI + rc] = m, pl[w * MI + rc] = l;
    GC_UNROLL(ADF_ND)
    for (int n = 0; n < ADF_ND; n++)
      GC_UNROLL(ADF_NACC)
      for (int r = 0; r < ADF_NACC; r++) {
        const int d = n * MI + GC_MFMA_D_ROW(MI, lane, r);
        if (d < Dn)
          po[(w * MI + rc) * DMAX + d] = o[n][r];
      }
  }
  gc_barrier();

  /* Merge the waves, and with a split the slices (gc-split) */
  gc_split_lds_finish<WARPS, MI, DMAX, SPLIT>(pm, per, Dn, adf_ws + (SPLIT > 1 ? (row * H + h0) * SPLIT * ADF_W : 0),
                                            ADF_W, sp, adf_cnt + (SPLIT > 1 ? row * G + g : 0), ADF_T,
                                            [&](int hh, int d, float v) { STORE_C(O, (h0 + hh) * D + d, v); });
}
