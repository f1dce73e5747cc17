/* attention_mfma.cu — AMD matrix-core causal attention with grouped-query
 * heads over the KV cache, flash style (tiles of keys, online softmax, the
 * probabilities never leave registers), for prefill passes of M > 1
 * tokens on CDNA (MFMA: gfx90a, gfx942): O = softmax(scale · Q·Kᵀ) · V,
 * query row i (position pos0 + i) of head h attending to cache rows
 * 0 .. pos0+i of kv head h / (H/G). The AMD counterpart of
 * attention_mma.cu (same op, arguments, applicability and priority). Both
 * products are v_mfma_f32_32x32x8 or 16x16x16 (f16, or bf16 as the _1k
 * forms; fp32 accumulation); the softmax is fp32; P is rounded once to the
 * input dtype for P·V (the op's rule allows it). (Not yet timed on an AMD
 * GPU.)
 *
 * @template attention_mfma
 * @op attention
 * @backend hip
 * @dtypes f16 bf16
 * @kernel attention_mfma
 * @param MI 32 16 default 32 -- MFMA family: 32x32x8 (32 query rows a wave) or 16x16x16 (16)
 * @param WARPS 1 2 4 8 default 4 -- waves per block, MI query rows (token, head) each
 * @param HPB 1 2 4 8 default 1 -- query heads per block, all of one kv head (they share every K/V tile)
 * @param KB 16 32 64 128 default 32 -- keys per tile (a multiple of MI)
 * @param STAGES 1 2 default 2 -- LDS stages: 2 double-buffers the K/V tiles, 1 keeps one (the next tile waits in registers during this tile's math either way)
 * @param DMAX 64 128 default 128 -- largest head dimension served (registers are sized for it)
 * @constraint MFMA && WARP == 64 -- MFMA targets (CDNA: gfx90a, gfx942), wave64
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint KB % MI == 0 && DMAX % MI == 0 -- whole MFMA blocks of keys and of O's columns
 * @constraint MI * WARPS % HPB == 0 -- whole tokens per block
 * @constraint DMAX * MI / 64 + KB * MI / 64 + DMAX * MI / 128 + KB * MI / 128 + 32 * cdiv(KB * DMAX / 32, WARPS * 64) + 40 <= VGPRS / 2 + 64 -- estimated VGPRs and AGPRs (O and S accumulators, Q fragments, P, the next tile's K/V chunks, addresses): every point inside compiles without spills for gfx90a and gfx942
 * @constraint 32 * cdiv(KB * DMAX / 32, WARPS * 64) <= 64 -- the next tile's K/V chunks a thread holds
 * @constraint STAGES * (KB * (DMAX + 4) + DMAX * (KB + 4)) * 2 <= SMEM -- the K and Vᵀ tiles of every stage fit in LDS
 * @shmem STAGES * (KB * (DMAX + 4) + DMAX * (KB + 4)) * 2
 * @applies M > 1 && G > 0 && H % G == 0 && (H / G) % HPB == 0 && D % 16 == 0 && D <= DMAX -- prefill passes; whole head groups; whole 16-wide k steps of D
 * @grid cdiv(M, MI * WARPS / HPB) * (H / HPB) 1 1
 * @block WARPS * 64 1 1
 * @priority 2
 *
 * Block b serves QB = MI·WARPS/HPB query tokens i0 .. i0+QB-1 (fewer at
 * the end) of query heads h0 .. h0+HPB-1 (one kv head g): row r = token·HPB
 * + head, wave w rows MI·w .. MI·w+MI-1. Blocks are numbered last token
 * block first, so the longest causal rows start first.
 *
 * Transposed products, so that a lane owns one query row: Sᵀ = K·Qᵀ
 * (MFMA A = K rows, B = Qᵀ: the query rows are the MFMA's columns) and
 * Oᵀ += Vᵀ·Pᵀ (A = Vᵀ, B = Pᵀ). Operand layouts are the GC_MFMA_* macros
 * of prelude_hip.h (S = MI, KPL = 4; checked on the host by
 * tests/test_amd_emulator.py): lane l feeds A row l % MI and B column
 * l % MI with the 4 k from GC_MFMA_AB_K(MI, 4, l, 0), and gets back
 * accumulator r = D[GC_MFMA_D_ROW(MI, l, r)][GC_MFMA_D_COL(MI, l)]: every
 * accumulator of a lane belongs to query row l % MI, and the lanes of a
 * row are l, l ^ MI, ... (two for 32x32, four for 16x16). An Sᵀ block's
 * accumulators are already Pᵀ's B operand for the next MFMA: registers
 * 4t .. 4t+3 hold keys 8t + 4·(l/32) + 0..3 (32x32: k step t of 8 keys)
 * or 4·(l/16) + 0..3 (16x16: one k step of 16), exactly the keys
 * GC_MFMA_AB_K gives lane l, so P goes from the softmax into the P·V MFMA
 * with no shuffle.
 *   - Q: the wave's rows as B fragments for the D/KI k steps, loaded once
 *     from global memory (rows past M repeat the last token; not stored).
 *   - Per tile of KB keys (only keys below pos0 + the block's last token
 *     + 1), the whole block loads K and V as units of 4 keys × 8 columns
 *     (16-byte loads; zeros past the last key and in columns D .. DR-1,
 *     DR = D rounded up to MI; later columns are neither loaded nor read:
 *     K·Qᵀ and Vᵀ·Pᵀ skip the MI-column blocks from DR on, one uniform
 *     condition per block shared by both products), K into LDS as rows
 *     (stride DMAX+4: the MI lanes reading one k column hit distinct
 *     banks, as gemm_mfma's padding), V transposed (Vᵀ rows of KB+4: 4
 *     consecutive keys of one column, an A fragment, are one 8-byte read;
 *     the unit's 4×8 block is transposed in registers and written as 8
 *     such 8-byte pieces). STAGES = 2: tile
 *     j+1 is loaded into registers before tile j's math and written to the
 *     other stage after it, one barrier a tile; STAGES = 1: the same
 *     prefetch, written after a barrier, a second barrier before the math.
 *     Each wave whose rows see any key of the tile (and each MI-key block
 *     of it whose first key some row of the wave sees):
 *       Sᵀ = K·Qᵀ, scaled by scale·log2 e, masked (key j visible to row r
 *       iff j <= pos0 + token(r)); the running max m per row (its lanes'
 *       maxima exchanged with shuffles); P = 2^(S − m), rounded to the
 *       input dtype as Pᵀ's B fragments; O and the row sum l (per lane,
 *       summed over the row's lanes at the end) rescaled by 2^(m_old − m);
 *       Oᵀ += Vᵀ·Pᵀ.
 *   - O / l stored in C's dtype: accumulators 4q .. 4q+3 of a block are 4
 *     consecutive columns of the lane's row, one 8-byte store.
 */

#define AF_T (WARPS * 64)          /* threads */
#define AF_R (MI * WARPS)          /* query rows per block */
#define AF_QB (AF_R / HPB)         /* query tokens per block */
#define AF_KI GC_MFMA_K(MI, 4)     /* k per MFMA: 8 (32x32x8) or 16 (16x16x16) */
#define AF_NACC GC_MFMA_NACC(MI)   /* accumulators a lane per block */
#define AF_NQ (AF_NACC / 4)        /* groups of 4 consecutive accumulator rows */
#define AF_NL (64 / MI)            /* lanes of a query row */
#define AF_KPB (MI / AF_KI)        /* P·V k steps per MI-key block (4 or 1) */
#define AF_NB (KB / MI)            /* MI-key blocks of a tile */
#define AF_QK (DMAX / AF_KI)       /* k steps of K·Qᵀ */
#define AF_ND (DMAX / MI)          /* MI-column blocks of Oᵀ */
#define AF_KT (KB / AF_KI)         /* k steps of Vᵀ·Pᵀ per tile */
#define AF_SK GC_KV_SK(DMAX, 4)    /* LDS row stride of K, elements (the prelude's gc-kv-lds) */
#define AF_SV GC_KV_SV(KB, 4)      /* LDS row stride of Vᵀ, elements */
#define AF_SSZ GC_KV_SSZ(KB, DMAX, 4) /* elements per stage */

#if !GC_MFMA
#error "attention_mfma needs an MFMA target (gfx90a, gfx940, gfx941, gfx942)"
#endif

typedef typename gc_mfma<GC_TB, MI>::acc_t af_acc_t;

GC_DEVICE int af_imin(int a, int b) { return a < b ? a : b; }

/* args: Q[M, H, D] (TA), Kc, Vc [pos0+M.., G, D] (TB), O[M, H, D] (TC),
 * int32 *pos (pos0), int64 M, H, G, D, float scale. */
GC_KERNEL_BOUNDS(AF_T)
void attention_mfma(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos, int64_t M,
                    int64_t H, int64_t G, int64_t D, float scale) {
  if (M <= 1 || G <= 0 || H % G || (H / G) % HPB || D <= 0 || D % 16 || D > DMAX)
    return; /* outside @applies */
  /* positions and dimensions as 32-bit ints (pos is int32; so are the
     cache's rows), pointers offset in 64 bits */
  const int pos0 = *pos, Dn = (int)D, DR = (Dn + MI - 1) / MI * MI; /* D rounded up to MI */
  TB *smem = reinterpret_cast<TB *>(gc_dyn_shared());
  const int64_t nhb = H / HPB, nqb = gc_cdiv(M, AF_QB);
  const int64_t hb = gc_bid() % nhb, h0 = hb * HPB, g = h0 / (H / G), ld = G * D;
  const int i0 = (int)((nqb - 1 - gc_bid() / nhb) * AF_QB);
  const int lane = gc_lane(), w = gc_tid() / 64;
  const int nt = (int)gc_min64(AF_QB, M - i0); /* real tokens of the block */
  const int kend = pos0 + i0 + nt;             /* keys 0 .. kend-1 */
  Kc += g * D, Vc += g * D;

  /* the wave's last visible key; -1 when none of its rows is a real token */
  const int wlim = MI * w / HPB < nt ? pos0 + i0 + af_imin((MI * w + MI - 1) / HPB, nt - 1) : -1;

  /* Qᵀ's B fragments: k step s, column (query row) GC_MFMA_AB_ROW */
  gc_short4_t qf[AF_QK];
  {
    const int r = MI * w + GC_MFMA_AB_ROW(MI, lane);
    const TA *q = Q + ((i0 + af_imin(r / HPB, nt - 1)) * H + h0 + r % HPB) * D;
    GC_UNROLL(AF_QK)
    for (int s = 0; s < AF_QK; s++) {
      const int d = s * AF_KI + GC_MFMA_AB_K(MI, 4, lane, 0);
      qf[s] = d < Dn ? *reinterpret_cast<const gc_short4_t *>(q + d) : gc_short4_t{0, 0, 0, 0};
    }
  }
  /* the lane's accumulators' row (their column GC_MFMA_D_COL): its last visible key */
  const int rc = MI * w + GC_MFMA_D_COL(MI, lane);
  const int lim = pos0 + i0 + af_imin(rc / HPB, nt - 1);

  af_acc_t o[AF_ND];
  GC_UNROLL(AF_ND)
  for (int n = 0; n < AF_ND; n++)
    o[n] = af_acc_t{};
  float m = -GC_INF, l = 0.0f;
  const float sc = scale * 1.4426950408889634f; /* softmax in base 2 */
  const int ntile = (int)gc_cdiv(kend, KB);

  gc_raw16 kr[GC_KV_PER(KB, DMAX, AF_T)][4], vr[GC_KV_PER(KB, DMAX, AF_T)][4]; /* a tile's units (gc-kv-lds) */
  gc_kv_fetch<KB, DMAX, AF_T>(kr, vr, Kc, Vc, 0, kend, ld, Dn);
  gc_kv_put<KB, DMAX, AF_T, 4>(smem, kr, vr, DR);
  gc_barrier();
  GC_UNROLL(1)
  for (int j = 0; j < ntile; j++) {
    const TB *ks = smem + (STAGES == 2 ? (j & 1) : 0) * AF_SSZ, *vt = ks + KB * AF_SK;
    const int j0 = j * KB;
    const bool more = j + 1 < ntile;
    if (more)
      gc_kv_fetch<KB, DMAX, AF_T>(kr, vr, Kc, Vc, j0 + KB, kend, ld, Dn);
    if (j0 <= wlim) { /* some row of the wave sees a key of the tile */
      /* Sᵀ = K·Qᵀ for the tile's MI-key blocks that the wave sees */
      af_acc_t s[AF_NB];
      GC_UNROLL(AF_NB)
      for (int nb = 0; nb < AF_NB; nb++) {
        s[nb] = af_acc_t{};
        if (j0 + nb * MI > wlim)
          continue;
        GC_UNROLL(AF_QK)
        for (int k = 0; k < AF_QK; k++)
          if (k / AF_KPB * MI < Dn) /* per MI columns, as P·V (K is 0 from column D to DR) */
            s[nb] = gc_mfma<GC_TB, MI>::run(gc_kv_frag<MI>(ks, AF_SK, nb * MI, k * AF_KI, lane), qf[k], s[nb]);
      }

      /* mask, running max, rescale */
      float mx = m;
      GC_UNROLL(AF_NB)
      for (int nb = 0; nb < AF_NB; nb++)
        GC_UNROLL(AF_NACC)
        for (int r = 0; r < AF_NACC; r++) {
          const int key = j0 + nb * MI + GC_MFMA_D_ROW(MI, lane, r);
          s[nb][r] = key <= lim ? s[nb][r] * sc : -GC_INF;
          mx = gc_max(mx, s[nb][r]);
        }
      GC_UNROLL(AF_NL)
      for (int x = MI; x < 64; x *= 2) /* the row's other lanes */
        mx = gc_max(mx, gc_shfl_xor(mx, x));
      const float corr = gc_exp2(m - mx); /* finite mx: key 0 is in tile 0, seen by every row */
      m = mx;
      l *= corr;
      GC_UNROLL(AF_ND)
      for (int n = 0; n < AF_ND; n++)
        o[n] *= corr;

      /* Oᵀ += Vᵀ·Pᵀ, k step t: keys t·KI .. of the tile, registers 4(t % KPB) .. of block t / KPB */
      GC_UNROLL(AF_KT)
      for (int t = 0; t < AF_KT; t++) {
        const int nb = t / AF_KPB, r0 = 4 * (t % AF_KPB);
        if (j0 + nb * MI > wlim)
          continue; /* P = 0 there */
        float p[4];
        GC_UNROLL(4)
        for (int v = 0; v < 4; v++) {
          p[v] = gc_exp2(s[nb][r0 + v] - m);
          l += p[v];
        }
        const gc_short4_t b =
            __builtin_bit_cast(gc_short4_t, gc_raw8{{gc_pack2(TB(), p[0], p[1]), gc_pack2(TB(), p[2], p[3])}});
        GC_UNROLL(AF_ND)
        for (int n = 0; n < AF_ND; n++)
          if (n * MI < Dn)
            o[n] = gc_mfma<GC_TB, MI>::run(gc_kv_frag<MI>(vt, AF_SV, n * MI, t * AF_KI, lane), b, o[n]);
      }
    }
    if (STAGES == 2) {
      if (more)
        gc_kv_put<KB, DMAX, AF_T, 4>(smem + ((j + 1) & 1) * AF_SSZ, kr, vr, DR);
      gc_barrier();
    } else if (more) {
      gc_barrier(); /* the tile is consumed */
      gc_kv_put<KB, DMAX, AF_T, 4>(smem, kr, vr, DR);
      gc_barrier();
    }
  }

  /* O / l for the lane's row, if it is a real token */
  GC_UNROLL(AF_NL)
  for (int x = MI; x < 64; x *= 2)
    l += gc_shfl_xor(l, x);
  if (rc / HPB >= nt)
    return;
  const float inv = 1.0f / l;
  TC *y = O + ((i0 + rc / HPB) * H + h0 + rc % HPB) * D;
  GC_UNROLL(AF_ND)
  for (int n = 0; n < AF_ND; n++)
    GC_UNROLL(AF_NQ)
    for (int q = 0; q < AF_NQ; q++) {
      const int d = n * MI + GC_MFMA_D_ROW(MI, lane, 4 * q);
      if (d < Dn)
        *reinterpret_cast<gc_raw8 *>(y + d) =
            gc_raw8{{gc_pack2(TC(), o[n][4 * q] * inv, o[n][4 * q + 1] * inv),
                     gc_pack2(TC(), o[n][4 * q + 2] * inv, o[n][4 * q + 3] * inv)}};
    }
}
