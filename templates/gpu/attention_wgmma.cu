/* attention_wgmma.cu — Hopper (sm_90a) tensor-core causal attention with
 * grouped-query heads over the KV cache, flash style, for prefill passes
 * of M > 1 tokens: O = softmax(scale · Q·Kᵀ) · V, query row i (position
 * pos0 + i) of head h attending to cache rows 0 .. pos0+i of kv head
 * h / (H/G). Both products are warpgroup wgmma.mma_async (f16 or bf16 in,
 * fp32 accumulation): S = Q·Kᵀ with Q and K from shared memory, O += P·V
 * with P from registers (the S accumulators after the softmax, rounded
 * once to the input dtype) and V from shared memory read N-major. What
 * attention_mma does with mma.sync m16n8k16 per warp, 16 rows at a time,
 * here a warpgroup does for 64 rows with one instruction per 16-wide k step.
 *
 * @template attention_wgmma
 * @op attention
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel attention_wgmma
 * @param CW 1 2 default 2 -- consumer warpgroups, 64 query rows (token, head) each
 * @param HPB 1 2 4 8 default 4 -- query heads per block, all of one kv head (they share every K/V tile)
 * @param KB 64 128 default 128 -- keys per tile: the n of Q·Kᵀ's wgmma, the k of P·V's
 * @param NST 2 3 4 default 3 -- K/V tiles in flight (the producer's ring)
 * @param PW 1 4 default 4 -- producer warps, copying the K/V tiles with cp.async
 * @param DMAX 64 128 default 128 -- the head dimension served (the n of P·V's wgmma)
 * @param OVL 0 1 default 0 -- 1: S of the next tile is issued before P·V of this one and its softmax runs while P·V does (FlashAttention-3's overlap within a warpgroup; at D = 128 no faster, at D = 64 4% faster: bench/RESULTS.md, session 17)
 * @param PP 0 1 default 0 -- 1: the two consumer warpgroups take turns at issuing their wgmmas (named barriers), so that one's softmax runs while the other's products do (FlashAttention-3's ping-pong between warpgroups)
 * @defaults attention DMAX=64 NST=4 OVL=1 if D <= 64 -- the 64-wide heads (Llama-3.2-1B) take the 64-column variant, four stages and the overlap (4000 tokens 241.6 us against 250.9 without it; bench/RESULTS.md, session 17)
 * @constraint SM == 90 && ARCH_A == 1 -- wgmma exists only on sm_90a
 * @constraint WARP == 32 && 128 * CW + 32 * PW <= MAXT -- NVIDIA warps, a legal block
 * @constraint 64 * CW % HPB == 0 -- whole tokens per block
 * @constraint PP == 0 || CW == 2 -- turns are taken between two warpgroups
 * @constraint 3 * KB / 4 + DMAX / 2 + 56 <= min(248, PW / 4 * ((65536 - 128 * 40) / (128 * CW) / 8 * 8) + (1 - PW / 4) * (512 / cdiv(4 * CW + PW, 4) / 8 * 8)) -- S, P and O fit a consumer's registers (see Registers below; units of 8; the 56 measured)
 * @constraint 2 * (64 * CW + 2 * NST * KB) * DMAX + 1024 <= SMEM -- Q and every stage's K and V tiles fit in shared memory
 * @shmem 2 * (64 * CW + 2 * NST * KB) * DMAX + 1024
 * @applies M > 1 && G > 0 && H % G == 0 && (H / G) % HPB == 0 && D == DMAX -- prefill passes; whole head groups; heads of 64 or 128 (128-byte column blocks of the swizzle; other sizes: attention_mma)
 * @grid cdiv(M, 64 * CW / HPB) * (H / HPB) 1 1
 * @block 128 * CW + 32 * PW 1 1
 * @priority 3
 *
 * Block b serves QB = 64·CW/HPB query tokens i0 .. i0+QB-1 (fewer at the
 * end) of query heads h0 .. h0+HPB-1 (one kv head g): row r = token·HPB +
 * head, consumer warpgroup c rows 64c .. 64c+63, its warp w rows 16w ..
 * 16w+15 of those. Blocks are numbered last token block first, so the
 * longest causal rows start first. Lane l holds, as the wgmma's
 * accumulators are laid out, rows l/4 and l/4 + 8 of its warp's 16 and
 * columns 8n + 2(l%4), +1 of each 8-wide n-tile n (d[4n..4n+3]: two of
 * the first row, two of the second) — mma.sync's C layout, which makes
 * two n-tiles of S the A fragment of one 16-key k step of P·V.
 *
 * Shared memory (1024-byte aligned), every operand in 128-byte column
 * blocks ("panels") of 64 elements, the 16-byte chunk c of row r of a
 * panel at r·128 + ((c ^ r % 8)·16), the 128-byte swizzle:
 *   - Q: per warpgroup, its 64 rows (rows past M repeat the last token),
 *     DMAX/64 panels of 8 KiB, stored once by the warpgroup itself;
 *   - NST stages, each K's KB rows then V's, DMAX/64 panels of KB·128
 *     bytes each; rows past the block's last visible key are zero.
 * Descriptors: Q and K K-major (a k step's 16 columns: 32 bytes into a
 * panel), V N-major (a k step's 16 keys: 16 rows, 2048 bytes on; its
 * 64-column panels KB·128 bytes apart).
 *
 * Registers: with PW = 4 the producer warpgroup gives its registers up
 * (setmaxnreg.dec to AW_PREG) and the consumer warpgroups take them
 * (setmaxnreg.inc to AW_CREG: the rest of the 65536, 232 at CW = 2, at
 * most 248), which is what lets S, P and O of 128-key tiles live in
 * registers beside each other. Without it (PW = 1) a quarter of the
 * block's warps sit on each of the SM's four register files of 16384, so
 * a block of 9 to 12 warps compiles within 168 a thread.
 *
 * Pipeline: PW producer warps copy tile j into stage j % NST with 16-byte
 * cp.async (zero-filled past the last key), each thread arriving on the
 * stage's full barrier when its copies land (cp.async.mbarrier.arrive.noinc);
 * they wait on the stage's empty barrier (one arrival per consumer warp)
 * before they refill it. Each consumer warpgroup, per tile: waits full;
 * if any of its rows sees a key of the tile: S = Q·Kᵀ (DMAX/16 wgmmas,
 * waited; OVL = 1 issues them before the previous tile's P·V, the loop's
 * last P·V peeled off so that ptxas keeps the wgmmas in flight), masked
 * where the tile reaches past the warpgroup's first row (key j visible to
 * row r iff j <= pos0 + token(r)), the running max m of sc·S per row over
 * a quad's shuffles (sc = |scale|·log2 e: Q is stored negated where the
 * scale is negative, so the raw maximum is scaled once), P = 2^(sc·S − m)
 * (one fma and ex2 an element) packed into
 * A fragments, O and the per-lane row sums l rescaled by 2^(m_old − m),
 * O += P·V (KB/16 wgmmas, waited); then each warp arrives on empty (on
 * the tiles past all of its rows too, unread). O / l is stored in C's
 * dtype, two elements per 32-bit store, for the rows of real tokens.
 * Nothing else is written.
 *
 * Turns (PP = 1, both warpgroups with real rows): warpgroup c issues its
 * wgmmas only in its turn (bar.sync 3 + c, 256 threads) and hands the
 * turn to the other (bar.arrive 3 + (1 - c)) as soon as they are issued;
 * warpgroup 1 hands warpgroup 0 its first turn. A tile takes one turn
 * (OVL = 1: S of the next tile with P·V of this one; plus one for the
 * first S) or two (S, then P·V). Both take the same number of turns: the
 * warpgroup with fewer tiles of visible keys takes empty turns while it
 * releases the tiles past its rows, and warpgroup 0 takes one turn last
 * of all, which meets warpgroup 1's last hand-over (no arrival is left
 * pending at the end).
 */

#define AW_R (64 * CW)                    /* query rows per block */
#define AW_QB (AW_R / HPB)                /* query tokens per block */
#define AW_NP (DMAX / 64)                 /* 128-byte panels of a row of Q, K, V */
#define AW_CH (DMAX / 8)                  /* 16-byte chunks of a row */
#define AW_QBYTES (64 * 128)              /* one panel of a warpgroup's Q */
#define AW_TBYTES (KB * 128)              /* one panel of a K or V tile */
#define AW_SBYTES (2 * AW_NP * AW_TBYTES) /* a stage: K's panels, then V's */
#define AW_PT (32 * PW)                   /* producer threads */
#define AW_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AW_MAX(a, b) ((a) > (b) ? (a) : (b))
/* PW = 4 (a producer warpgroup): registers per thread after setmaxnreg,
 * the producer's and the consumers' (65536 over the block, multiples of 8) */
#define AW_PREG 40
#define AW_CREG AW_MIN(248, (65536 - 128 * AW_PREG) / (128 * CW) / 8 * 8)

/* Byte offset of chunk c (0 .. AW_CH-1) of row r of an operand whose
 * panels hold `rows` rows. */
GC_DEVICE unsigned aw_swz(int r, int c, int rows) {
  return (unsigned)((c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4));
}

/* Producer thread t (0 .. AW_PT-1): tiles 0 .. ntile-1 of keys (those >=
 * kend zero-filled) into the ring at st0. */
GC_DEVICE void aw_producer(const TB *Kc, const TB *Vc, int64_t kend, int64_t ld, int ntile,
                           unsigned st0, unsigned full, unsigned empty, int t) {
  for (int j = 0; j < ntile; j++) {
    const int s = j % NST;
    if (j >= NST)
      gc_mbar_wait(empty + 8 * s, (unsigned)((j / NST - 1) & 1));
    const unsigned sk = st0 + s * AW_SBYTES, sv = sk + AW_NP * AW_TBYTES;
    const int64_t j0 = (int64_t)j * KB;
    for (int c = t; c < KB * AW_CH; c += AW_PT) {
      const int r = c / AW_CH, ch = c % AW_CH;
      const bool ok = j0 + r < kend;
      const int64_t row = ok ? j0 + r : 0; /* a valid address; nothing read when !ok */
      const unsigned off = aw_swz(r, ch, KB);
      gc_cp_async16(sk + off, Kc + row * ld + 8 * ch, ok ? 16 : 0);
      gc_cp_async16(sv + off, Vc + row * ld + 8 * ch, ok ? 16 : 0);
    }
    gc_cp_async_mbar_arrive(full + 8 * s);
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory"); /* no copy outlives the block */
}

/* S = Q·Kᵀ of the stage whose K panels are at sk, issued and committed
 * (not waited): sa is the warpgroup's 64 x KB accumulator. */
GC_DEVICE void aw_scores(float sa[KB / 2], unsigned qs, unsigned sk) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* cp.async wrote the stage */
  GC_UNROLL(KB / 2)
  for (int i = 0; i < KB / 2; i++)
    sa[i] = 0.0f;
  gc_wgmma_fence();
  GC_UNROLL(DMAX / 16)
  for (int k = 0; k < DMAX / 16; k++)
    gc_wgmma_ss<KB, GC_TA == GC_BF16>(sa, gc_wgmma_desc(qs + k / 4 * AW_QBYTES + k % 4 * 32, 16, 128),
                                      gc_wgmma_desc(sk + k / 4 * AW_TBYTES + k % 4 * 32, 16, 128));
  gc_wgmma_commit();
}

/* O += P·V of the stage whose V panels are at sv, issued and committed. */
GC_DEVICE void aw_pv(float o[DMAX / 2], uint32_t pa[KB / 16][4], unsigned sv) {
  gc_wgmma_fence();
  GC_UNROLL(KB / 16)
  for (int t = 0; t < KB / 16; t++)
    gc_wgmma_rs<DMAX, GC_TA == GC_BF16>(o, pa[t], gc_wgmma_desc(sv + t * 2048, AW_TBYTES, 128));
  gc_wgmma_commit();
}

/* Tile j has landed in its stage (the full barrier's phase j / NST). */
GC_DEVICE void aw_full(unsigned full, int j) {
  gc_mbar_wait(full + 8 * (j % NST), (unsigned)((j / NST) & 1));
}

/* The calling warp is done with tile j's stage: one arrival a warp. */
GC_DEVICE void aw_empty(unsigned empty, int j, int lane) {
  __syncwarp();
  if (lane == 0)
    gc_mbar_arrive(empty + 8 * (j % NST));
}

/* PP: warpgroup c's turn at the tensor cores (it waits for the hand-over),
 * and the hand-over to the other warpgroup; no-ops where pp is 0 (always
 * at PP = 0, where pp folds to a constant). */
GC_DEVICE void aw_turn(int pp, int c) {
  if (pp)
    gc_named_sync(3 + c, 256);
}
GC_DEVICE void aw_pass(int pp, int c) {
  if (pp)
    gc_named_arrive(3 + (c ^ 1), 256);
}

/* Keep reads of accumulators after the wgmma wait before them. */
template <int N> GC_DEVICE void aw_touch(float *x) {
  GC_UNROLL(N)
  for (int i = 0; i < N; i++)
    gc_reg_touch(x[i]);
}

/* The softmax step of the tile at key j0, on its raw scores sa (complete),
 * but for the powers: masked (-inf) where the tile reaches past the
 * warpgroup's first row wfirst (key j visible to the lane's row x iff
 * j <= lim[x]), the running max m of the scaled scores (sc > 0, so the
 * raw maximum scaled once) over the quad, l rescaled, corr the factor O
 * must be rescaled by. The scores stay unscaled: aw_exp scales each in
 * the one fma that subtracts m. */
GC_DEVICE void aw_max(float sa[KB / 2], int j0, const int lim[2], int wfirst, float sc, int qc, float m[2],
                      float l[2], float corr[2]) {
  aw_touch<KB / 2>(sa);
  const int rel[2] = {AW_MIN(lim[0] - j0, KB), AW_MIN(lim[1] - j0, KB)}; /* < 0: the row sees none */
  float mx[2] = {-GC_INF, -GC_INF};
  if (j0 + KB - 1 > wfirst) { /* some key of the tile is hidden from some row */
    GC_UNROLL(KB / 2)
    for (int i = 0; i < KB / 2; i++) {
      const int x = i % 4 / 2; /* key j0 + 8(i/4) + 2qc + i%2 of row x */
      if (8 * (i / 4) + 2 * qc + i % 2 > rel[x])
        sa[i] = -GC_INF;
      mx[x] = gc_max(mx[x], sa[i]);
    }
  } else {
    GC_UNROLL(KB / 2)
    for (int i = 0; i < KB / 2; i++)
      mx[i % 4 / 2] = gc_max(mx[i % 4 / 2], sa[i]);
  }
  GC_UNROLL(2)
  for (int x = 0; x < 2; x++) {
    mx[x] = gc_max(m[x], gc_group_max(mx[x], 4) * sc); /* finite: key 0 is in tile 0, seen by every row */
    corr[x] = gc_exp2(m[x] - mx[x]);
    m[x] = mx[x];
    l[x] *= corr[x];
  }
}

/* P = 2^(sc·S − m) of 16-key step t, in place in sa, summed into l. */
GC_DEVICE void aw_exp(float sa[KB / 2], int t, float sc, const float m[2], float l[2]) {
  GC_UNROLL(8)
  for (int i = 8 * t; i < 8 * t + 8; i++) {
    sa[i] = gc_exp2(gc_fma(sa[i], sc, -m[i % 4 / 2]));
    l[i % 4 / 2] += sa[i];
  }
}

/* Step t of P (sa after aw_exp) rounded to the input dtype: its A fragment. */
GC_DEVICE void aw_topa(uint32_t pa[4], const float sa[KB / 2], int t) {
  GC_UNROLL(4)
  for (int x = 0; x < 4; x++)
    pa[x] = gc_pack2(TA(), sa[8 * t + 2 * x], sa[8 * t + 2 * x + 1]);
}

/* P of every step, each packed as soon as it is computed (fewer live
 * registers than all powers first). */
GC_DEVICE void aw_exp_topa(uint32_t pa[KB / 16][4], float sa[KB / 2], float sc, const float m[2], float l[2]) {
  GC_UNROLL(KB / 16)
  for (int t = 0; t < KB / 16; t++) {
    aw_exp(sa, t, sc, m, l);
    aw_topa(pa[t], sa, t);
  }
}

/* O rescaled to the new running max: row x's elements by corr[x]. */
GC_DEVICE void aw_rescale(float o[DMAX / 2], const float corr[2]) {
  GC_UNROLL(DMAX / 2)
  for (int i = 0; i < DMAX / 2; i++)
    o[i] *= corr[i % 4 / 2];
}

/* args: Q[M, H, D] (TA), Kc, Vc [pos0+M.., G, D] (TB), O[M, H, D] (TC),
 * int32 *pos (pos0), int64 M, H, G, D, float scale. */
GC_KERNEL_BOUNDS(128 * CW + AW_PT)
void attention_wgmma(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos, int64_t M,
                     int64_t H, int64_t G, int64_t D, float scale) {
  GC_SHARED uint64_t bars[2 * NST]; /* full[0..NST-1], empty[0..NST-1] */
  if (M <= 1 || G <= 0 || H % G || (H / G) % HPB || D != DMAX)
    return; /* outside @applies */
  const int64_t pos0 = *pos;
  unsigned char *base = reinterpret_cast<unsigned char *>(gc_dyn_shared());
  const unsigned s0 = (gc_smem_addr(base) + 1023u) & ~1023u;
  unsigned char *q_ptr = base + (s0 - gc_smem_addr(base)); /* s0 as a pointer */
  const unsigned st0 = s0 + CW * AW_NP * AW_QBYTES;       /* the ring, after Q */
  const unsigned full = gc_smem_addr(bars), empty = full + 8 * NST;
  const int64_t nhb = H / HPB, nqb = gc_cdiv(M, AW_QB);
  const int64_t hb = gc_bid() % nhb, i0 = (nqb - 1 - gc_bid() / nhb) * AW_QB;
  const int64_t h0 = hb * HPB, g = h0 / (H / G), ld = G * D;
  const int64_t nt = gc_min64(AW_QB, M - i0); /* real tokens of the block */
  const int64_t kend = pos0 + i0 + nt;        /* keys 0 .. kend-1 */
  const int ntile = (int)gc_cdiv(kend, KB);
  const int tid = gc_tid();
  if (tid == 0) {
    for (int s = 0; s < NST; s++) {
      gc_mbar_init(full + 8 * s, AW_PT);
      gc_mbar_init(empty + 8 * s, 4 * CW);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  gc_barrier();
  if (tid >= 128 * CW) {
#if PW == 4 /* a whole producer warpgroup: its registers to the consumers */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(AW_PREG) : "memory");
#endif
    aw_producer(Kc + g * D, Vc + g * D, kend, ld, ntile, st0, full, empty, tid - 128 * CW);
    return;
  }

#if PW == 4
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(AW_CREG) : "memory");
#endif
  const int c = tid / 128, w = tid % 128 / 32, lane = tid % 32, qr = lane / 4, qc = lane % 4;
  /* the warpgroup's Q rows into its panels (rows past M: the last token's),
     negated (exactly: the sign bits) where the scale is: the softmax takes
     the scale's magnitude, which must be positive (aw_max) */
  const unsigned qs = s0 + c * AW_NP * AW_QBYTES, qneg = scale < 0.0f ? 0x80008000u : 0u;
  for (int x = tid % 128; x < 64 * AW_CH; x += 128) {
    const int r = x / AW_CH, ch = x % AW_CH, R = 64 * c + r;
    const int64_t t = gc_min64(R / HPB, nt - 1);
    uint4 v = *reinterpret_cast<const uint4 *>(Q + ((i0 + t) * H + h0 + R % HPB) * D + 8 * ch);
    v.x ^= qneg, v.y ^= qneg, v.z ^= qneg, v.w ^= qneg;
    *reinterpret_cast<uint4 *>(q_ptr + (qs - s0) + aw_swz(r, ch, 64)) = v;
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* visible to wgmma */
  gc_named_sync(1 + c, 128);

  /* this lane's two rows' last visible keys; the warpgroup's first
     row's (int32: a position is below the cache's rows, which the runtime
     sizes from the int32 context length) */
  const int p0 = (int)(pos0 + i0), tl = (int)nt - 1;
  int lim[2];
  GC_UNROLL(2)
  for (int x = 0; x < 2; x++)
    lim[x] = p0 + AW_MIN((64 * c + 16 * w + qr + 8 * x) / HPB, tl);
  const int wfirst = p0 + AW_MIN(64 * c / HPB, tl);
  /* warpgroup x's tiles with a key some row of it sees: 0 .. nact(x)-1
     (uniform over the warpgroup, as wgmma needs; none where every row
     repeats the last token: nothing to store) */
  auto nact_of = [&](int x) {
    return 64 * x / HPB >= nt ? 0 : AW_MIN(ntile, (p0 + AW_MIN((64 * x + 63) / HPB, tl)) / KB + 1);
  };
  const int nact = nact_of(c);
  /* PP: turns where both warpgroups have rows (warpgroup 0 always has),
     over the larger count of tiles */
  const int pp = PP && CW == 2 && nact_of(1) > 0;
  const int nturn = pp ? AW_MAX(nact_of(0), nact_of(1)) : 0;

  float o[DMAX / 2], m[2] = {-GC_INF, -GC_INF}, l[2] = {0.0f, 0.0f}, corr[2];
  GC_UNROLL(DMAX / 2)
  for (int i = 0; i < DMAX / 2; i++)
    o[i] = 0.0f;
  /* softmax in base 2; a scale of 0 as the least normal float (every
     power then rounds to 1, as it should; -inf·0 would not be -inf) */
  const float sc = gc_max(fabsf(scale) * 1.4426950408889634f, 1.17549435e-38f);
  if (pp && c == 1)
    aw_pass(pp, c); /* warpgroup 0 takes the first turn */
  float sa[KB / 2];      /* S of a tile (unscaled), then 2^(sc·S - m) */
  uint32_t pa[KB / 16][4]; /* P's A fragments: 16-key step t is n-tiles 2t, 2t+1 */
#define AW_STAGE(j) (st0 + (j) % NST * AW_SBYTES) /* tile j's K panels; V's follow */

#if OVL == 0
  GC_UNROLL(1)
  for (int j = 0; j < nact; j++) {
    aw_full(full, j);
    aw_turn(pp, c);
    aw_scores(sa, qs, AW_STAGE(j));
    aw_pass(pp, c);
    gc_wgmma_wait<0>();
    aw_max(sa, j * KB, lim, wfirst, sc, qc, m, l, corr);
    aw_rescale(o, corr);
    aw_exp_topa(pa, sa, sc, m, l);
    aw_turn(pp, c);
    aw_pv(o, pa, AW_STAGE(j) + AW_NP * AW_TBYTES);
    aw_pass(pp, c);
    gc_wgmma_wait<0>();
    aw_touch<DMAX / 2>(o);
    aw_empty(empty, j, lane);
  }
#else
  /* S of tile j+1 on the tensor cores while this warpgroup's softmax of
     it waits only for that, and P·V of tile j runs behind it */
  if (nact > 0) {
    aw_full(full, 0);
    aw_turn(pp, c);
    aw_scores(sa, qs, AW_STAGE(0));
    aw_pass(pp, c);
    gc_wgmma_wait<0>();
    aw_max(sa, 0, lim, wfirst, sc, qc, m, l, corr); /* O is 0: nothing to rescale */
    aw_exp_topa(pa, sa, sc, m, l);
  }
  GC_UNROLL(1)
  for (int j = 0; j + 1 < nact; j++) {
    aw_full(full, j + 1);
    aw_turn(pp, c);
    aw_scores(sa, qs, AW_STAGE(j + 1));
    aw_pv(o, pa, AW_STAGE(j) + AW_NP * AW_TBYTES);
    aw_pass(pp, c);
    gc_wgmma_wait<1>(); /* S of tile j+1 (P·V of tile j may still run) */
    aw_max(sa, (j + 1) * KB, lim, wfirst, sc, qc, m, l, corr);
    GC_UNROLL(KB / 16)
    for (int t = 0; t < KB / 16; t++)
      aw_exp(sa, t, sc, m, l);
    gc_wgmma_wait<0>();
    aw_touch<DMAX / 2>(o);
    aw_empty(empty, j, lane);
    aw_rescale(o, corr);
    GC_UNROLL(KB / 16)
    for (int t = 0; t < KB / 16; t++)
      aw_topa(pa[t], sa, t);
  }
  if (nact > 0) { /* the last tile's P·V */
    aw_turn(pp, c);
    aw_pv(o, pa, AW_STAGE(nact - 1) + AW_NP * AW_TBYTES);
    aw_pass(pp, c);
    gc_wgmma_wait<0>();
    aw_touch<DMAX / 2>(o);
    aw_empty(empty, nact - 1, lane);
  }
#endif
  GC_UNROLL(1)
  for (int j = nact; j < ntile; j++) { /* tiles past the warpgroup's rows: release them */
    aw_full(full, j);
    if (j < nturn) /* the turns the other warpgroup takes at this tile */
      GC_UNROLL(2 - OVL)
      for (int t = 0; t < 2 - OVL; t++)
        aw_turn(pp, c), aw_pass(pp, c);
    aw_empty(empty, j, lane);
  }
  if (pp && c == 0)
    aw_turn(pp, c); /* warpgroup 1's last hand-over */

  /* O / l for the lane's real rows */
  GC_UNROLL(2)
  for (int x = 0; x < 2; x++) {
    const int R = 64 * c + 16 * w + qr + 8 * x;
    const float inv = 1.0f / gc_group_sum(l[x], 4);
    if (R / HPB >= nt)
      continue;
    TC *y = O + ((i0 + R / HPB) * H + h0 + R % HPB) * D + 2 * qc;
    GC_UNROLL(DMAX / 8)
    for (int n = 0; n < DMAX / 8; n++)
      *reinterpret_cast<uint32_t *>(y + 8 * n) = gc_pack2(TA(), o[4 * n + 2 * x] * inv, o[4 * n + 2 * x + 1] * inv);
  }
}
