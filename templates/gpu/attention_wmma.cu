/* attention_wmma.cu — AMD matrix-core causal attention with grouped-query
 * heads over the KV cache for RDNA3 (WMMA, gfx1100, wave32), flash style,
 * for prefill passes of M > 1 tokens: O = softmax(scale · Q·Kᵀ) · V, query
 * row i (position pos0 + i) of head h attending to cache rows 0 .. pos0+i
 * of kv head h / (H/G). attention_mfma.cu's structure (same op, arguments,
 * applicability and priority) with v_wmma_f32_16x16x16_{f16,bf16}: f16 or
 * bf16 in, fp32 accumulation; the softmax is fp32; P is rounded once to
 * the input dtype for P·V (the op's rule allows it). (Not yet timed on an
 * AMD GPU.)
 *
 * @template attention_wmma
 * @op attention
 * @backend hip
 * @dtypes f16 bf16
 * @kernel attention_wmma
 * @param WARPS 2 4 8 default 4 -- waves per block, 16 query rows (token, head) each
 * @param HPB 1 2 4 8 default 1 -- query heads per block, all of one kv head (they share every K/V tile)
 * @param KB 16 32 64 default 32 -- keys per tile
 * @param STAGES 1 2 default 2 -- LDS stages: 2 double-buffers the K/V tiles, 1 keeps one (the next tile waits in registers during this tile's math either way)
 * @param DMAX 64 128 default 128 -- largest head dimension served (registers are sized for it)
 * @constraint WMMA && WARP == 32 -- WMMA targets (RDNA3: gfx1100), wave32
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint 16 * WARPS % HPB == 0 -- whole tokens per block
 * @constraint DMAX / 2 + KB / 2 + DMAX / 2 + 32 * cdiv(KB * DMAX / 32, WARPS * 32) + 56 <= VGPRS -- estimated VGPRs (O and S accumulators, Q fragments, the next tile's K/V chunks, operands, addresses): every point inside compiles without spills for gfx1100
 * @constraint STAGES * (KB * (DMAX + 8) + DMAX * (KB + 8)) * 2 <= SMEM -- the K and Vᵀ tiles of every stage fit in LDS
 * @shmem STAGES * (KB * (DMAX + 8) + DMAX * (KB + 8)) * 2
 * @applies M > 1 && G > 0 && H % G == 0 && (H / G) % HPB == 0 && D % 16 == 0 && D <= DMAX -- prefill passes; whole head groups; whole 16-wide k steps of D
 * @grid cdiv(M, 16 * WARPS / HPB) * (H / HPB) 1 1
 * @block WARPS * 32 1 1
 * @priority 2
 *
 * Blocks, rows and tiles as attention_mfma: block b serves QB =
 * 16·WARPS/HPB query tokens of HPB heads of one kv head (row r = token·HPB
 * + head, wave w rows 16w .. 16w+15), last token block first; K and V
 * tiles of KB keys as units of 4 keys × 8 columns (16-byte loads, zeros
 * past the last key, columns from D on neither loaded nor read), K into
 * LDS as rows of stride DMAX+8, V transposed (Vᵀ rows of KB+8: 16
 * consecutive keys of one column, an A operand, are two aligned 16-byte
 * reads); STAGES as there.
 *
 * Transposed products, so that a lane owns one query row: Sᵀ = K·Qᵀ and
 * Oᵀ += Vᵀ·Pᵀ. Operand layouts are the GC_WMMA_* macros of prelude_hip.h
 * (checked on the host by tests/test_amd_emulator.py): lane l feeds A row
 * and B column l % 16 with all 16 k (lanes 16-31 the same as lanes 0-15:
 * the replication WMMA requires), and gets back register r =
 * D[GC_WMMA_D_ROW(l, r)][GC_WMMA_D_COL(l)] = D[2r + l/16][l % 16]: every
 * accumulator of a lane belongs to query row l % 16, which lanes l and
 * l ^ 16 share, each with half of a 16-key block's scores (keys 2r + l/16).
 * Pᵀ's B operand needs all 16 keys of the row in both lanes: each lane
 * rounds its 8 probabilities to the input dtype, swaps them with lane
 * l ^ 16 (4 shuffles of packed pairs) and interleaves the two halves as
 * GC_WMMA_D_ROW says (key 2r + e is its own register r where D_ROW(l, r) =
 * 2r + e, else the other lane's), so both lanes hold the same operand
 * (gc_wmma_pt, the prelude's gc-kv-lds block).
 * Per tile, each wave whose rows see a key of it (and each 16-key block
 * whose first key some row of the wave sees): Sᵀ = K·Qᵀ, scaled by
 * scale·log2 e, masked (key j visible to row r iff j <= pos0 + token(r)),
 * the running max per row (over the lane pair), P = 2^(S − m), O and the
 * row sum l rescaled by 2^(m_old − m), Oᵀ += Vᵀ·Pᵀ. The 16-column blocks
 * of D from D on are skipped in both products (one uniform condition per
 * block). O / l is stored in C's dtype, one element per store (the lane's
 * accumulators are every other column of its row).
 */

#define AW_T (WARPS * 32)          /* threads */
#define AW_R (16 * WARPS)          /* query rows per block */
#define AW_QB (AW_R / HPB)         /* query tokens per block */
#define AW_NB (KB / 16)            /* 16-key blocks of a tile */
#define AW_ND (DMAX / 16)          /* 16-column blocks of D */
#define AW_SK GC_KV_SK(DMAX, 8)    /* LDS row stride of K, elements (the prelude's gc-kv-lds) */
#define AW_SV GC_KV_SV(KB, 8)      /* LDS row stride of Vᵀ, elements */
#define AW_SSZ GC_KV_SSZ(KB, DMAX, 8) /* elements per stage */

#if !GC_WMMA
#error "attention_wmma needs a WMMA target (gfx1100 .. gfx1103)"
#endif

GC_DEVICE int aw_imin(int a, int b) { return a < b ? a : b; }

/* args: Q[M, H, D] (TA), Kc, Vc [pos0+M.., G, D] (TB), O[M, H, D] (TC),
 * int32 *pos (pos0), int64 M, H, G, D, float scale. */
GC_KERNEL_BOUNDS(AW_T)
void attention_wmma(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos, int64_t M,
                    int64_t H, int64_t G, int64_t D, float scale) {
  if (M <= 1 || G <= 0 || H % G || (H / G) % HPB || D <= 0 || D % 16 || D > DMAX)
    return; /* outside @applies */
  /* positions and dimensions as 32-bit ints (pos is int32; so are the
     cache's rows), pointers offset in 64 bits */
  const int pos0 = *pos, Dn = (int)D;
  TB *smem = reinterpret_cast<TB *>(gc_dyn_shared());
  const int64_t nhb = H / HPB, nqb = gc_cdiv(M, AW_QB);
  const int64_t hb = gc_bid() % nhb, h0 = hb * HPB, g = h0 / (H / G), ld = G * D;
  const int i0 = (int)((nqb - 1 - gc_bid() / nhb) * AW_QB);
  const int lane = gc_lane(), w = gc_tid() / 32;
  const int nt = (int)gc_min64(AW_QB, M - i0); /* real tokens of the block */
  const int kend = pos0 + i0 + nt;             /* keys 0 .. kend-1 */
  Kc += g * D, Vc += g * D;

  /* the wave's last visible key; -1 when none of its rows is a real token */
  const int wlim = 16 * w / HPB < nt ? pos0 + i0 + aw_imin((16 * w + 15) / HPB, nt - 1) : -1;

  /* Qᵀ's B operands: k step s, column (query row) GC_WMMA_AB_ROW, 16 d */
  gc_short16_t qf[AW_ND];
  {
    const int r = 16 * w + GC_WMMA_AB_ROW(lane);
    const TA *q = Q + ((i0 + aw_imin(r / HPB, nt - 1)) * H + h0 + r % HPB) * D + GC_WMMA_AB_K(0);
    GC_UNROLL(AW_ND)
    for (int s = 0; s < AW_ND; s++) {
      struct { gc_raw16 lo, hi; } v = {gc_raw16{{0, 0, 0, 0}}, gc_raw16{{0, 0, 0, 0}}};
      if (16 * s < Dn)
        v = {reinterpret_cast<const gc_raw16 *>(q + 16 * s)[0], reinterpret_cast<const gc_raw16 *>(q + 16 * s)[1]};
      qf[s] = __builtin_bit_cast(gc_short16_t, v);
    }
  }
  /* the lane's accumulators' row (their column GC_WMMA_D_COL): its last visible key */
  const int rc = 16 * w + GC_WMMA_D_COL(lane);
  const int lim = pos0 + i0 + aw_imin(rc / HPB, nt - 1);

  gc_float8_t o[AW_ND];
  GC_UNROLL(AW_ND)
  for (int n = 0; n < AW_ND; n++)
    o[n] = gc_float8_t{};
  float m = -GC_INF, l = 0.0f;
  const float sc = scale * 1.4426950408889634f; /* softmax in base 2 */
  const int ntile = (int)gc_cdiv(kend, KB);

  gc_raw16 kr[GC_KV_PER(KB, DMAX, AW_T)][4], vr[GC_KV_PER(KB, DMAX, AW_T)][4]; /* a tile's units (gc-kv-lds) */
  gc_kv_fetch<KB, DMAX, AW_T>(kr, vr, Kc, Vc, 0, kend, ld, Dn);
  gc_kv_put<KB, DMAX, AW_T, 8>(smem, kr, vr, Dn);
  gc_barrier();
  GC_UNROLL(1)
  for (int j = 0; j < ntile; j++) {
    const TB *ks = smem + (STAGES == 2 ? (j & 1) : 0) * AW_SSZ, *vt = ks + KB * AW_SK;
    const int j0 = j * KB;
    const bool more = j + 1 < ntile;
    if (more)
      gc_kv_fetch<KB, DMAX, AW_T>(kr, vr, Kc, Vc, j0 + KB, kend, ld, Dn);
    if (j0 <= wlim) { /* some row of the wave sees a key of the tile */
      /* Sᵀ = K·Qᵀ for the tile's 16-key blocks that the wave sees */
      gc_float8_t s[AW_NB];
      GC_UNROLL(AW_NB)
      for (int nb = 0; nb < AW_NB; nb++) {
        s[nb] = gc_float8_t{};
        if (j0 + 16 * nb > wlim)
          continue;
        GC_UNROLL(AW_ND)
        for (int k = 0; k < AW_ND; k++)
          if (16 * k < Dn)
            s[nb] = gc_wmma<GC_TB>(gc_kv_frag16(ks, AW_SK, 16 * nb, 16 * k, lane), qf[k], s[nb]);
      }

      /* mask, running max (over the lane pair), rescale */
      float mx = m;
      GC_UNROLL(AW_NB)
      for (int nb = 0; nb < AW_NB; nb++)
        GC_UNROLL(8)
        for (int r = 0; r < 8; r++) {
          const int key = j0 + 16 * nb + GC_WMMA_D_ROW(lane, r);
          s[nb][r] = key <= lim ? s[nb][r] * sc : -GC_INF;
          mx = gc_max(mx, s[nb][r]);
        }
      mx = gc_max(mx, gc_shfl_xor(mx, 16));
      const float corr = gc_exp2(m - mx); /* finite mx: key 0 is in tile 0, seen by every row */
      m = mx;
      l *= corr;
      GC_UNROLL(AW_ND)
      for (int n = 0; n < AW_ND; n++)
        o[n] *= corr;

      /* Oᵀ += Vᵀ·Pᵀ, one 16-key block at a time */
      GC_UNROLL(AW_NB)
      for (int nb = 0; nb < AW_NB; nb++) {
        if (j0 + 16 * nb > wlim)
          continue; /* P = 0 there */
        float p[8];
        GC_UNROLL(4)
        for (int i = 0; i < 4; i++) {
          p[2 * i] = gc_exp2(s[nb][2 * i] - m), p[2 * i + 1] = gc_exp2(s[nb][2 * i + 1] - m);
          l += p[2 * i] + p[2 * i + 1];
        }
        const gc_short16_t pb = gc_wmma_pt<TB>(p); /* Pᵀ's B operand (gc-kv-lds) */
        GC_UNROLL(AW_ND)
        for (int n = 0; n < AW_ND; n++)
          if (16 * n < Dn)
            o[n] = gc_wmma<GC_TB>(gc_kv_frag16(vt, AW_SV, 16 * n, 16 * nb, lane), pb, o[n]);
      }
    }
    if (STAGES == 2) {
      if (more)
        gc_kv_put<KB, DMAX, AW_T, 8>(smem + ((j + 1) & 1) * AW_SSZ, kr, vr, Dn);
      gc_barrier();
    } else if (more) {
      gc_barrier(); /* the tile is consumed */
      gc_kv_put<KB, DMAX, AW_T, 8>(smem, kr, vr, Dn);
      gc_barrier();
    }
  }

  /* O / l for the lane's row, if it is a real token */
  l += gc_shfl_xor(l, 16);
  if (rc / HPB >= nt)
    return;
  const float inv = 1.0f / l;
  TC *y = O + ((i0 + rc / HPB) * H + h0 + rc % HPB) * D;
  GC_UNROLL(AW_ND)
  for (int n = 0; n < AW_ND; n++)
    GC_UNROLL(8)
    for (int r = 0; r < 8; r++) {
      const int d = 16 * n + GC_WMMA_D_ROW(lane, r);
      if (d < Dn)
        gc_st(y, d, o[n][r] * inv);
    }
}
