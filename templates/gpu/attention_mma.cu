/* attention_mma.cu — NVIDIA tensor-core causal attention with grouped-query
 * heads over the KV cache, flash style (FlashAttention-2's loop: tiles of
 * keys, online softmax, the probabilities never leave registers), for
 * prefill passes of M > 1 tokens: O = softmax(scale · Q·Kᵀ) · V, query row
 * i (position pos0 + i) of head h attending to cache rows 0 .. pos0+i of
 * kv head h / (H/G). Q·Kᵀ and P·V are mma.sync m16n8k16 (f16 or bf16 in,
 * fp32 accumulation); the softmax is fp32; P is rounded once to the input
 * dtype for P·V (the op's rule allows it).
 *
 * @template attention_mma
 * @op attention
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel attention_mma
 * @param WARPS 2 4 8 default 4 -- warps per block, 16·RW query rows (token, head) each
 * @param RW 1 2 default 1 -- 16-row tiles per warp (2: each K/V fragment read feeds twice the mma; Q then from shared memory)
 * @param HPB 1 2 4 8 default 1 -- query heads per block, all of one kv head (they share every K/V tile)
 * @param KB 32 64 128 default 64 -- keys per tile
 * @param NST 1 2 3 default 2 -- K/V tiles in flight (cp.async pipeline)
 * @param DMAX 64 128 default 128 -- largest head dimension served (registers are sized for it)
 * @constraint WARP == 32 && WARPS * WARP <= MAXT -- NVIDIA warps, a legal block
 * @constraint 16 * RW * WARPS % HPB == 0 -- whole tokens per block
 * @constraint (2 - RW) * DMAX / 4 + (RW - 1) * 32 + RW * (KB / 2 + DMAX / 2) + 40 <= 255 -- Q fragments, scores and the output accumulators fit the registers
 * @constraint 4 * NST * KB * (DMAX + 8) + (RW - 1) * 32 * RW * WARPS * (DMAX + 8) <= SMEM -- the K and V tiles of every stage (RW = 2: and Q) fit in shared memory
 * @shmem 4 * NST * KB * (DMAX + 8) + (RW - 1) * 32 * RW * WARPS * (DMAX + 8)
 * @applies M > 1 && G > 0 && H % G == 0 && (H / G) % HPB == 0 && D % 16 == 0 && D <= DMAX -- prefill passes; whole head groups; whole 16-wide k steps of D
 * @grid cdiv(M, 16 * RW * WARPS / HPB) * (H / HPB) 1 1
 * @block WARPS * WARP 1 1
 * @priority 2
 *
 * Block b serves QB = 16·RW·WARPS/HPB query tokens i0 .. i0+QB-1 (fewer
 * at the end) of query heads h0 .. h0+HPB-1 (one kv head g): row r =
 * token·HPB + head, warp w rows 16·RW·w .. in RW tiles of 16. Blocks are
 * numbered last token block first, so the longest causal rows start first.
 * Lane l of a warp holds, as the mma's fragments do, rows a = l/4 and b =
 * l/4 + 8 of each of its tiles and columns 2(l%4), 2(l%4)+1 of each 8-wide
 * n-tile.
 *   - Q: the warp's rows as A fragments for the D/16 k steps (rows past M
 *     repeat the last token; not stored): RW = 1 in registers, loaded once
 *     from global memory; RW = 2 the block's rows copied once into shared
 *     memory and read by ldmatrix at each k step (registers are the
 *     accumulators' then).
 *   - Per tile of KB keys (only keys below pos0 + the block's last token
 *     + 1), the whole block copies K and V rows into shared memory with
 *     16-byte cp.async (NST stages; rows past the last key zero-filled),
 *     rows padded to DMAX+8 elements so that ldmatrix reads are
 *     conflict-free. Each warp whose rows see any key of the tile:
 *       S = Q·Kᵀ (ldmatrix: K's rows are B's columns), scaled by
 *       scale·log2 e, masked (key j visible to row r iff j <= pos0 +
 *       token(r)); the running max m per row from a quad's shuffles; P =
 *       2^(S − m) in registers, becoming P·V's A fragments directly (the
 *       accumulator layout of two 8-key n-tiles is the A layout of one
 *       16-key k step); O and the row sums l (per lane, summed over the
 *       quad at the end) rescaled by 2^(m_old − m); O += P·V (ldmatrix
 *       .trans: V's rows are B's k).
 *   - O / l stored in C's dtype, two elements per 32-bit store.
 */

#define AM_R (16 * RW * WARPS)  /* query rows per block */
#define AM_QB (AM_R / HPB)      /* query tokens per block */
#define AM_S (DMAX + 8)         /* shared row stride of K and V, elements */
#define AM_NK (KB / 8)          /* 8-key n-tiles of a tile's scores */
#define AM_KD (DMAX / 16)       /* 16-wide k steps of Q·Kᵀ */
#define AM_ND (DMAX / 8)        /* 8-wide n-tiles of O */
#define AM_CH (DMAX / 8)        /* 16-byte chunks of a row, at most */

GC_DEVICE void am_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  gc_mma16816<GC_TA == GC_BF16>(c, a[0], a[1], a[2], a[3], b0, b1);
}



/* Issue the copies of tile j0 (keys j0 .. j0+KB-1, those >= kend zero
 * filled) of K and V into stage st: every thread its share of the
 * 16-byte chunks of D. */
GC_DEVICE void am_load(unsigned sk, unsigned sv, const TB *Kc, const TB *Vc, int64_t j0, int64_t kend,
                       int64_t ld, int64_t D) {
  const int ch = (int)(D / 8); /* chunks of a row: D % 16 == 0 */
  for (int c = gc_tid(); c < KB * ch; c += WARPS * WARP) {
    const int r = c / ch, d = c % ch * 8;
    const bool ok = j0 + r < kend;
    const int64_t row = ok ? j0 + r : 0; /* a valid address; nothing read when !ok */
    const unsigned off = (unsigned)((r * AM_S + d) * 2);
    gc_cp_async16(sk + off, Kc + row * ld + d, ok ? 16 : 0);
    gc_cp_async16(sv + off, Vc + row * ld + d, ok ? 16 : 0);
  }
}

/* args: Q[M, H, D] (TA), Kc, Vc [pos0+M.., G, D] (TB), O[M, H, D] (TC),
 * int32 *pos (pos0), int64 M, H, G, D, float scale. */
GC_KERNEL_BOUNDS(WARPS * WARP)
void attention_mma(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos, int64_t M,
                   int64_t H, int64_t G, int64_t D, float scale) {
  if (M <= 1 || G <= 0 || H % G || (H / G) % HPB || D <= 0 || D % 16 || D > DMAX)
    return; /* outside @applies */
  const int64_t pos0 = *pos;
  TB *Ks = reinterpret_cast<TB *>(gc_dyn_shared()), *Vs = Ks + NST * KB * AM_S;
  const unsigned sk0 = gc_smem_addr(Ks), sv0 = gc_smem_addr(Vs);
  const unsigned stage_bytes = KB * AM_S * 2;
  const int64_t nhb = H / HPB, nqb = gc_cdiv(M, AM_QB);
  const int64_t hb = gc_bid() % nhb, i0 = (nqb - 1 - gc_bid() / nhb) * AM_QB;
  const int64_t h0 = hb * HPB, g = h0 / (H / G), ld = G * D;
  const int w = gc_tid() / WARP, lane = gc_tid() % WARP, qr = lane / 4, qc = lane % 4;
  const int64_t nt = gc_min64(AM_QB, M - i0); /* real tokens of the block */
  const int64_t kend = pos0 + i0 + nt;        /* keys 0 .. kend-1 */
  Kc += g * D, Vc += g * D;

  /* this lane's rows: tile u, row a/b (x); token clamped to the block's last */
  int64_t lim[RW][2];
  float m[RW][2], l[RW][2];
  GC_UNROLL(RW)
  for (int u = 0; u < RW; u++)
    GC_UNROLL(2)
    for (int x = 0; x < 2; x++) {
      const int r = 16 * (RW * w + u) + qr + 8 * x;
      lim[u][x] = pos0 + i0 + gc_min64(r / HPB, nt - 1);
      m[u][x] = -GC_INF, l[u][x] = 0.0f;
    }
  const int64_t wlim = pos0 + i0 + gc_min64((16 * RW * (w + 1) - 1) / HPB, nt - 1); /* the warp's last visible key */
  const int kd = (int)(D / 16);

#if RW == 1
  /* Q's A fragments: k step s, a0/a1 rows a/b at d = 16s + 2qc, a2/a3 at +8 */
  uint32_t qf[AM_KD][4];
  GC_UNROLL(AM_KD)
  for (int s = 0; s < AM_KD; s++)
    GC_UNROLL(4)
    for (int x = 0; x < 4; x++) {
      const int r = 16 * w + qr + 8 * (x % 2);
      const int64_t d = 16 * s + 2 * qc + 8 * (x / 2), t = gc_min64(r / HPB, nt - 1);
      qf[s][x] = d < D ? *reinterpret_cast<const uint32_t *>(Q + ((i0 + t) * H + h0 + r % HPB) * D + d) : 0u;
    }
#else
  /* Q's rows into shared memory (after the K/V stages), 16-byte chunks;
     ldmatrix reads the A fragments: lane l gives row 8·((l/8)%2) + l%8 of
     a tile, d 8·(l/16) of a k step */
  TB *Qs = Ks + 2 * NST * KB * AM_S;
  for (int c = gc_tid(); c < AM_R * (int)(D / 8); c += WARPS * WARP) {
    const int r = c / (int)(D / 8), d = c % (int)(D / 8) * 8;
    const int64_t t = gc_min64(r / HPB, nt - 1);
    *reinterpret_cast<uint4 *>(Qs + r * AM_S + d) =
        *reinterpret_cast<const uint4 *>(Q + ((i0 + t) * H + h0 + r % HPB) * D + d);
  }
  const unsigned qofs = gc_smem_addr(Qs) +
                        (unsigned)(((16 * RW * w + 8 * ((lane / 8) % 2) + lane % 8) * AM_S + 8 * (lane / 16)) * 2);
#endif

  float oacc[RW][AM_ND][4];
  GC_UNROLL(RW)
  for (int u = 0; u < RW; u++)
    GC_UNROLL(AM_ND)
    for (int n = 0; n < AM_ND; n++)
      GC_UNROLL(4)
      for (int x = 0; x < 4; x++)
        oacc[u][n][x] = 0.0f;
  const float sc = scale * 1.4426950408889634f; /* softmax in base 2 */
  const int ntile = (int)gc_cdiv(kend, KB);

  /* ldmatrix row addresses of this lane within a stage: K (non-trans):
     key 8·(l/16) + l%8 of an n-tile pair, d 8·((l/8)%2) of a k step; V
     (.trans): key 8·((l/8)%2) + l%8 of a k step, d 8·(l/16) of an n-tile pair */
  const unsigned kofs = (unsigned)(((8 * (lane / 16) + lane % 8) * AM_S + 8 * ((lane / 8) % 2)) * 2);
  const unsigned vofs = (unsigned)(((8 * ((lane / 8) % 2) + lane % 8) * AM_S + 8 * (lane / 16)) * 2);

  GC_UNROLL(1)
  for (int p = 0; p < NST - 1; p++) {
    if (p < ntile)
      am_load(sk0 + p * stage_bytes, sv0 + p * stage_bytes, Kc, Vc, (int64_t)p * KB, kend, ld, D);
    gc_cp_async_commit();
  }
  GC_UNROLL(1)
  for (int j = 0; j < ntile; j++) {
    gc_barrier(); /* the stage refilled below was consumed at j - 1 (and Q is stored) */
    const int jn = j + NST - 1;
    if (jn < ntile)
      am_load(sk0 + jn % NST * stage_bytes, sv0 + jn % NST * stage_bytes, Kc, Vc, (int64_t)jn * KB, kend, ld, D);
    gc_cp_async_commit();
    gc_cp_async_wait<NST - 1>();
    gc_barrier(); /* tile j landed, every thread's part */
    const int64_t j0 = (int64_t)j * KB;
    if (j0 > wlim)
      continue; /* no row of this warp sees a key of the tile */
    const unsigned sk = sk0 + j % NST * stage_bytes + kofs, sv = sv0 + j % NST * stage_bytes + vofs;

    /* S = Q·Kᵀ for the tile's 8-key n-tiles, two at a time */
    float s[RW][AM_NK][4];
    GC_UNROLL(RW)
    for (int u = 0; u < RW; u++)
      GC_UNROLL(AM_NK)
      for (int n = 0; n < AM_NK; n++)
        GC_UNROLL(4)
        for (int x = 0; x < 4; x++)
          s[u][n][x] = 0.0f;
    GC_UNROLL(AM_KD)
    for (int k = 0; k < AM_KD; k++) {
      if (k >= kd)
        break;
#if RW == 1
      const uint32_t *qa[1] = {qf[k]};
#else
      uint32_t qt[RW][4];
      GC_UNROLL(RW)
      for (int u = 0; u < RW; u++)
        gc_ldmatrix_x4(qt[u], qofs + (unsigned)((16 * u * AM_S + 16 * k) * 2));
      const uint32_t *qa[RW] = {qt[0], qt[1]};
#endif
      GC_UNROLL(AM_NK / 2)
      for (int n = 0; n < AM_NK; n += 2) {
        uint32_t b[4];
        gc_ldmatrix_x4(b, sk + (unsigned)((8 * n * AM_S + 16 * k) * 2));
        GC_UNROLL(RW)
        for (int u = 0; u < RW; u++) {
          am_mma(s[u][n], qa[u], b[0], b[1]);
          am_mma(s[u][n + 1], qa[u], b[2], b[3]);
        }
      }
    }

    /* mask, running max, P = 2^(S - m), rescale */
    GC_UNROLL(RW)
    for (int u = 0; u < RW; u++) {
      float mx[2] = {m[u][0], m[u][1]};
      GC_UNROLL(AM_NK)
      for (int n = 0; n < AM_NK; n++)
        GC_UNROLL(4)
        for (int x = 0; x < 4; x++) {
          const int64_t key = j0 + 8 * n + 2 * qc + (x % 2);
          s[u][n][x] = key <= lim[u][x / 2] ? s[u][n][x] * sc : -GC_INF;
          mx[x / 2] = gc_max(mx[x / 2], s[u][n][x]);
        }
      float corr[2];
      GC_UNROLL(2)
      for (int x = 0; x < 2; x++) {
        mx[x] = gc_group_max(mx[x], 4); /* finite: key 0 is in tile 0, seen by every row */
        corr[x] = gc_exp2(m[u][x] - mx[x]);
        m[u][x] = mx[x];
        l[u][x] *= corr[x];
      }
      GC_UNROLL(AM_ND)
      for (int n = 0; n < AM_ND; n++)
        GC_UNROLL(4)
        for (int x = 0; x < 4; x++)
          oacc[u][n][x] *= corr[x / 2];
    }

    /* O += P·V, one 16-key k step (two n-tiles of P) at a time */
    GC_UNROLL(AM_NK / 2)
    for (int k = 0; k < AM_NK / 2; k++) {
      uint32_t a[RW][4];
      GC_UNROLL(RW)
      for (int u = 0; u < RW; u++) {
        float p[2][4];
        GC_UNROLL(2)
        for (int h = 0; h < 2; h++)
          GC_UNROLL(4)
          for (int x = 0; x < 4; x++) {
            p[h][x] = gc_exp2(s[u][2 * k + h][x] - m[u][x / 2]);
            l[u][x / 2] += p[h][x];
          }
        a[u][0] = gc_pack2(TA(), p[0][0], p[0][1]), a[u][1] = gc_pack2(TA(), p[0][2], p[0][3]);
        a[u][2] = gc_pack2(TA(), p[1][0], p[1][1]), a[u][3] = gc_pack2(TA(), p[1][2], p[1][3]);
      }
      GC_UNROLL(AM_ND / 2)
      for (int n = 0; n < AM_ND; n += 2) {
        if (8 * n >= D)
          break;
        uint32_t b[4];
        gc_ldmatrix_x4_trans(b, sv + (unsigned)((16 * k * AM_S + 8 * n) * 2));
        GC_UNROLL(RW)
        for (int u = 0; u < RW; u++) {
          am_mma(oacc[u][n], a[u], b[0], b[1]);
          am_mma(oacc[u][n + 1], a[u], b[2], b[3]);
        }
      }
    }
  }
  gc_cp_async_wait<0>(); /* no copy outlives the block */

  /* O / l for the lane's real rows */
  GC_UNROLL(RW)
  for (int u = 0; u < RW; u++)
    GC_UNROLL(2)
    for (int x = 0; x < 2; x++) {
      const int r = 16 * (RW * w + u) + qr + 8 * x;
      const float inv = 1.0f / gc_group_sum(l[u][x], 4);
      if (r / HPB >= nt)
        continue;
      TC *y = O + ((i0 + r / HPB) * H + h0 + r % HPB) * D + 2 * qc;
      GC_UNROLL(AM_ND)
      for (int n = 0; n < AM_ND; n++)
        if (8 * n < D)
          *reinterpret_cast<uint32_t *>(y + 8 * n) = gc_pack2(TA(), oacc[u][n][2 * x] * inv, oacc[u][n][2 * x + 1] * inv);
    }
}
