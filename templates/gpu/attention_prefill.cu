/* attention_prefill.cu — GPU causal attention with grouped-query heads over
 * the KV cache, flash style (tiles of keys, online softmax), any M:
 * O = softmax(scale · Q·Kᵀ) · V, query row i (position pos0 + i) of head h
 * attending to cache rows 0 .. pos0+i of kv head h / (H/G).
 *
 * @template attention_prefill
 * @op attention
 * @backend gpu
 * @dtypes f32 f16 bf16
 * @kernel attention_prefill
 * @param QB 1 2 4 8 16 32 64 default 32 -- query tokens per block
 * @param HPB 1 2 4 8 default 1 -- query heads per block, all of one kv head (share every K/V tile)
 * @param RT 1 2 4 8 default 2 -- query rows (token, head) per thread
 * @param LR 4 8 16 32 default 16 -- lanes sharing a query row (split the keys of a tile, then D)
 * @param JT 1 2 4 8 default 2 -- keys per thread per tile (a tile has KB = JT·LR keys)
 * @param DMAX 64 128 256 default 128 -- largest head dimension served (shared rows and registers are sized for it)
 * @constraint QB * HPB % RT == 0 -- whole thread rows
 * @constraint QB * HPB / RT * LR % WARP == 0 && QB * HPB / RT * LR <= MAXT -- whole warps, a legal block
 * @constraint QB * HPB / RT * LR >= 64 -- at least two warps
 * @constraint LR <= WARP && DMAX % (4 * LR) == 0 && JT * LR % 4 == 0 -- a row's threads lie in one warp; whole 4-float chunks
 * @constraint RT * (DMAX / LR + JT + 8) + 4 * JT + 64 <= min(255, 65536 / (QB * HPB / RT * LR)) -- accumulators, scores and operands fit the register budget
 * @constraint 4 * ((QB * HPB + 2 * JT * LR) * (DMAX + 4) + QB * HPB * (JT * LR + 4)) <= SMEM -- Q, K, V and P tiles fit in shared memory
 * @shmem 4 * ((QB * HPB + 2 * JT * LR) * (DMAX + 4) + QB * HPB * (JT * LR + 4))
 * @applies G > 0 && H % G == 0 && (H / G) % HPB == 0 && D <= DMAX -- whole head groups; D fits the tiles
 * @grid cdiv(M, QB) * (H / HPB) 1 1
 * @block QB * HPB / RT * LR 1 1
 * @priority 1
 *
 * Block b serves query tokens i0 .. i0+QB-1 (fewer at the end) of query
 * heads h0 .. h0+HPB-1 (one kv head g): R = QB·HPB query rows, row
 * r = token·HPB + head. Blocks are numbered last token block first, so the
 * longest causal rows start first. Q (pre-scaled by scale·log2 e, so the
 * softmax runs in base 2), a tile of KB keys, the same KB values and the
 * probabilities P live in shared memory as fp32, rows padded by 4 floats.
 * Thread (tr, tc), tr < R/RT, tc < LR, owns rows tr + k·(R/RT), k < RT.
 * Per tile (keys j0 .. j0+KB-1, only those below pos0 + the block's last
 * token + 1 are visited):
 *   1. all threads load K and V rows (16-byte loads, zeros past D and
 *      past the last key), barrier;
 *   2. scores for keys tc + m·LR, m < JT, as 16-byte shared reads along
 *      d (conflict-free: consecutive lanes read rows DMAX+4 apart);
 *      causal mask (key j visible to row r iff j <= pos0 + i(r));
 *      row max and row sum with shuffles over the row's LR lanes; online
 *      update of the running max m and sum l, rescale of O by 2^(m_old-m);
 *      P to shared (read back only by the row's own warp: a warp sync);
 *   3. O += P·V for output columns 4·(tc + c·LR) .. +3, c < DMAX/(4·LR).
 * Rows past M compute with the last real token's mask and are not stored.
 * O / l is written in C's dtype. Everything after the loads is fp32.
 */

#define AP_R (QB * HPB)            /* query rows per block */
#define AP_TR (AP_R / RT)          /* thread rows */
#define AP_T (AP_TR * LR)          /* threads */
#define AP_KB (JT * LR)            /* keys per tile */
#define AP_S (DMAX + 4)            /* shared row stride of Q, K, V */
#define AP_SP (AP_KB + 4)          /* shared row stride of P */
#define AP_DC (DMAX / (4 * LR))    /* 4-float output chunks per thread */
#define AP_VEC (16 / SB)           /* K/V elements per 16-byte load */
#define AP_NEG_INF (-GC_INF)

/* Rows 0..n-1 (n <= R rows of stride ld elements from src) into the fp32
 * shared rows S[r][0..DMAX-1], scaled by sc; zeros past D and for rows
 * >= nv. All threads take part. */
template <class T>
GC_DEVICE void ap_fill(float *S, int n, int nv, const T *src, int64_t ld, int64_t D, float sc) {
  const int per = DMAX / AP_VEC; /* chunks per row */
  const int vec_ok = D % AP_VEC == 0;
  for (int c = gc_tid(); c < n * per; c += AP_T) {
    int r = c / per, d0 = c % per * AP_VEC;
    float v[AP_VEC];
    const T *p = src + r * ld + d0;
    if (r < nv && vec_ok && d0 < D) {
      gc_ldv<AP_VEC>(p, v);
    } else {
      GC_UNROLL(AP_VEC)
      for (int e = 0; e < AP_VEC; e++)
        v[e] = r < nv && !vec_ok && d0 + e < D ? gc_ld(p, e) : 0.0f;
    }
    GC_UNROLL(AP_VEC)
    for (int e = 0; e < AP_VEC; e++)
      S[r * AP_S + d0 + e] = v[e] * sc;
  }
}

GC_KERNEL_BOUNDS(AP_T)
void attention_prefill(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos,
                       int64_t M, int64_t H, int64_t G, int64_t D, float scale) {
  const int64_t pos0 = *pos;
  float *Qs = reinterpret_cast<float *>(gc_dyn_shared());
  float *Ks = Qs + AP_R * AP_S, *Vs = Ks + AP_KB * AP_S, *Ps = Vs + AP_KB * AP_S;
  if (M <= 0 || G <= 0 || H % G || (H / G) % HPB || D <= 0 || D > DMAX)
    return; /* outside @applies */
  const int64_t nhb = H / HPB, nqb = gc_cdiv(M, QB);
  const int64_t hb = gc_bid() % nhb, i0 = (nqb - 1 - gc_bid() / nhb) * QB;
  const int64_t h0 = hb * HPB, g = h0 / (H / G);
  const int tr = gc_tid() / LR, tc = gc_tid() % LR;
  const int nt = (int)gc_min64(QB, M - i0); /* real tokens in the block */

  /* Q rows: token t, head hh -> row t·HPB + hh, pre-scaled. */
  for (int hh = 0; hh < HPB; hh++) {
    /* one head at a time: rows hh, hh+HPB, ... are tokens 0.. of head h0+hh */
    const int per = DMAX / AP_VEC, vec_ok = D % AP_VEC == 0;
    const float sc = scale * 1.4426950408889634f;
    for (int c = gc_tid(); c < QB * per; c += AP_T) {
      int t = c / per, d0 = c % per * AP_VEC;
      float v[AP_VEC];
      const TA *p = Q + ((i0 + t) * H + h0 + hh) * D + d0;
      if (t < nt && vec_ok && d0 < D) {
        gc_ldv<AP_VEC>(p, v);
      } else {
        GC_UNROLL(AP_VEC)
        for (int e = 0; e < AP_VEC; e++)
          v[e] = t < nt && !vec_ok && d0 + e < D ? gc_ld(p, e) : 0.0f;
      }
      GC_UNROLL(AP_VEC)
      for (int e = 0; e < AP_VEC; e++)
        Qs[(t * HPB + hh) * AP_S + d0 + e] = v[e] * sc;
    }
  }

  /* Per owned row: the last visible key, and the online-softmax state. */
  int64_t lim[RT];
  float m[RT], l[RT], o[RT][AP_DC][4];
  GC_UNROLL(RT)
  for (int k = 0; k < RT; k++) {
    int r = tr + k * AP_TR;
    lim[k] = pos0 + i0 + gc_min64(r / HPB, nt - 1);
    m[k] = AP_NEG_INF, l[k] = 0.0f;
    GC_UNROLL(AP_DC)
    for (int c = 0; c < AP_DC; c++)
      GC_UNROLL(4)
      for (int e = 0; e < 4; e++)
        o[k][c][e] = 0.0f;
  }
  const int64_t kend = pos0 + i0 + nt; /* keys 0 .. kend-1 */
  const int64_t ld = G * D;
  const int dp = (int)((D + 3) / 4 * 4); /* d range of the score loop */

  for (int64_t j0 = 0; j0 < kend; j0 += AP_KB) {
    const int nk = (int)gc_min64(AP_KB, kend - j0);
    gc_barrier(); /* the previous tile is consumed (and Q is stored) */
    ap_fill(Ks, AP_KB, nk, Kc + j0 * ld + g * D, ld, D, 1.0f);
    ap_fill(Vs, AP_KB, nk, Vc + j0 * ld + g * D, ld, D, 1.0f);
    gc_barrier();

    /* 2. scores, mask, online softmax, P */
    float s[RT][JT];
    GC_UNROLL(RT)
    for (int k = 0; k < RT; k++)
      GC_UNROLL(JT)
      for (int q = 0; q < JT; q++)
        s[k][q] = 0.0f;
    for (int d = 0; d < dp; d += 4) {
      float qv[RT][4], kv[JT][4];
      GC_UNROLL(RT)
      for (int k = 0; k < RT; k++)
        *reinterpret_cast<gc_raw16 *>(qv[k]) =
            *reinterpret_cast<const gc_raw16 *>(Qs + (tr + k * AP_TR) * AP_S + d);
      GC_UNROLL(JT)
      for (int q = 0; q < JT; q++)
        *reinterpret_cast<gc_raw16 *>(kv[q]) =
            *reinterpret_cast<const gc_raw16 *>(Ks + (tc + q * LR) * AP_S + d);
      GC_UNROLL(RT)
      for (int k = 0; k < RT; k++)
        GC_UNROLL(JT)
        for (int q = 0; q < JT; q++)
          GC_UNROLL(4)
          for (int e = 0; e < 4; e++)
            s[k][q] = gc_fma(qv[k][e], kv[q][e], s[k][q]);
    }
    GC_UNROLL(RT)
    for (int k = 0; k < RT; k++) {
      float mx = AP_NEG_INF;
      GC_UNROLL(JT)
      for (int q = 0; q < JT; q++) {
        if (j0 + tc + q * LR > lim[k])
          s[k][q] = AP_NEG_INF;
        mx = gc_max(mx, s[k][q]);
      }
      mx = gc_max(gc_group_max(mx, LR), m[k]); /* finite: key 0 is in tile 0 */
      float corr = gc_exp2(m[k] - mx), ls = 0.0f; /* m = -inf: 0 */
      float *pr = Ps + (tr + k * AP_TR) * AP_SP;
      GC_UNROLL(JT)
      for (int q = 0; q < JT; q++) {
        float p = gc_exp2(s[k][q] - mx);
        ls += p;
        pr[tc + q * LR] = p;
      }
      l[k] = l[k] * corr + gc_group_sum(ls, LR);
      m[k] = mx;
      GC_UNROLL(AP_DC)
      for (int c = 0; c < AP_DC; c++)
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++)
          o[k][c][e] *= corr;
    }
    gc_syncwarp(); /* P rows are written and read by their own warp */

    /* 3. O += P·V over the tile's real keys (rounded up to 4; P is 0 there) */
    const int nk4 = (nk + 3) / 4 * 4;
    for (int j = 0; j < nk4; j += 4) {
      float pv[RT][4];
      GC_UNROLL(RT)
      for (int k = 0; k < RT; k++)
        *reinterpret_cast<gc_raw16 *>(pv[k]) =
            *reinterpret_cast<const gc_raw16 *>(Ps + (tr + k * AP_TR) * AP_SP + j);
      GC_UNROLL(4)
      for (int t = 0; t < 4; t++) {
        GC_UNROLL(AP_DC)
        for (int c = 0; c < AP_DC; c++) {
          float v[4];
          *reinterpret_cast<gc_raw16 *>(v) =
              *reinterpret_cast<const gc_raw16 *>(Vs + (j + t) * AP_S + 4 * (tc + c * LR));
          GC_UNROLL(RT)
          for (int k = 0; k < RT; k++)
            GC_UNROLL(4)
            for (int e = 0; e < 4; e++)
              o[k][c][e] = gc_fma(pv[k][t], v[e], o[k][c][e]);
        }
      }
    }
  }

  GC_UNROLL(RT)
  for (int k = 0; k < RT; k++) {
    int r = tr + k * AP_TR, t = r / HPB, hh = r % HPB;
    if (t >= nt)
      continue;
    float inv = 1.0f / l[k];
    TC *y = O + ((i0 + t) * H + h0 + hh) * D;
    GC_UNROLL(AP_DC)
    for (int c = 0; c < AP_DC; c++) {
      int64_t d = 4 * (tc + c * LR);
      float x[4];
      GC_UNROLL(4)
      for (int e = 0; e < 4; e++)
        x[e] = o[k][c][e] * inv;
      if (D % 4 == 0 && d < D) {
        gc_stv<4>(y + d, x);
      } else {
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++)
          if (d + e < D)
            gc_st(y, d + e, x[e]);
      }
    }
  }
}
