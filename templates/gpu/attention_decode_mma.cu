/* attention_decode_mma.cu — NVIDIA tensor-core attention of a decode step
 * with grouped-query heads, split over the sequence (flash-decoding):
 * O = softmax(scale · q·Kᵀ) · V over cache rows 0 .. pos0 of kv head
 * h / (H/G), for one query token (attention, M = 1). Built for
 * attention_batch (BATCH = 1: a batched decode step), row r of Q[M,H·D] is
 * one sequence's query at its own position pos[r], over rows 0 .. pos[r]
 * of its own cache slot pos[M + r] (S rows per slot), as for
 * attention_decode: a block serves one (row, kv head), and the workspace
 * and tickets are per row. The H/G query heads of
 * a kv head are the rows of one 16-row mma.sync m16n8k16 tile, so every
 * K/V row is read once, by one warp, and a key costs a few tensor-core
 * instructions where attention_decode's SIMT loop spends about a hundred
 * (its fp32 dot product, the shuffles of its sum, the rescale of its
 * output per key).
 *
 * @template attention_decode_mma
 * @op attention attention_batch
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel attention_decode_mma
 * @param WARPS 1 2 4 8 default 8 -- warps per block, each streaming its own chunks of the block's keys
 * @param KW 16 32 64 default 16 -- keys per chunk (a warp's step)
 * @param NST 2 3 4 default 2 -- chunks in flight per warp (its cp.async pipeline)
 * @param SPLIT 1 2 4 8 16 32 64 default 16 -- blocks per kv head, each over a 1/SPLIT slice of the keys
 * @param DMAX 64 128 default 128 -- largest head dimension served (registers are sized for it)
 * @param KMIN 0 32 64 128 256 default 0 -- keys a block takes at least: a row of L keys is cut in min(SPLIT, cdiv(L, KMIN)) slices (0: SPLIT), the blocks past them exit at once, so that a short context takes fewer, fuller blocks and merges fewer partials
 * @param L2PF 0 1 2 default 1 -- 1: before its wait for the kernel before, the block asks L2 for its slice's keys and values but the newest row (gc_split_prefetch), so they stream in while that kernel drains; 2: each warp copies its first NST-1 chunks but the newest row into its stages before the wait, and after it reads only q, the positions and that row (copying again where the positions moved)
 * @param CL 0 1 2 default 0 -- 1: the SPLIT blocks of a (row, kv head) are one thread-block cluster (sm_90): each keeps its partial in shared memory and, after a cluster barrier, merges a share of the heads' elements from all of them (distributed shared memory): no workspace, no ticket, no last block's second pass through L2; 2: each block stores its partial's elements into the block that merges them: one barrier before the merge, none after
 * @defaults attention attention_batch DMAX=64 if D <= 64 -- heads of 64 or fewer: registers and stages sized for them (H200, the 1B shape, decode after 128 / 3830 tokens: 1092.4 -> 1121.9 / 1060.3 -> 1079.3 tok/s; bench/RESULTS.md, session 31)
 * @defaults attention CL=2 SPLIT=8 L2PF=2 if K > 0 && SM >= 90 -- a decode's short-context bucket (at most K keys) on sm_90: the slices of a kv head merged in a cluster (H200, 1B after 128 / 850: 1206.5 / 1177.4 tok/s, SPLIT=16 with tickets 1161.4 / 1152.3; session 46), their partials pushed and older rows copied before the wait (H100, 1B after 128 / 700: 1056.0-1057.5 / 1060.0-1062.3 against 1049.0-1049.9 / 1056.7-1057.3 with CL=1 L2PF=1; session 57); the long bucket keeps SPLIT=16 and tickets
 * @defaults attention_batch WARPS=4 SPLIT=4 -- a batch's M rows multiply the blocks: fewer slices, and half the warps' stages, so that three blocks share an SM (8 warps' stages at DMAX 128: 139 KB, one); on an H200 (bench/RESULTS.md, session 27), 32 heads over 8 of 128 (64), 4 and 16 rows 255 and 2000 positions in: 11.3-34.7 us (10.5-28.5) against attention_decode's 13.1-58.9 (12.6-59.1), where SPLIT=8 took 18.1-60.9
 * @constraint WARP == 32 && WARPS * WARP <= MAXT -- NVIDIA warps, a legal block
 * @constraint DMAX / 2 + DMAX / 4 + KW / 2 + 48 <= 255 -- O's accumulators, q's fragments and a chunk's scores fit the registers
 * @constraint WARPS * NST * KW * (DMAX + 8) * 4 + CL / 2 * 12 * (16 * DMAX + SPLIT) <= SMEM -- every warp's K and V stages fit in shared memory (CL 2: and the partials pushed to the block)
 * @constraint SPLIT * (DMAX + 2) * (128 + 896 * BATCH) <= 2097152 -- the cross-block workspace (128 heads; a batch's 1024 (row, head) pairs) stays within 8 MiB
 * @constraint CL == 0 || (SM >= 90 && SPLIT > 1 && SPLIT <= 8 && KMIN == 0) -- clusters from sm_90, of at most 8 blocks (the portable size; clusters of 16, bench/cluster16.patch, lost 2-4% in the decode step: bench/RESULTS.md, session 47); every block of one takes part in its barriers
 * @shmem WARPS * NST * KW * (DMAX + 8) * 4
 * @applies (BATCH == 1 || M == 1) && G > 0 && H % G == 0 && H / G <= 16 && D % 16 == 0 && D <= DMAX && (SPLIT == 1 || CL == 1 || M * H <= 128 + 896 * BATCH) -- one query row (a batch: any); a kv head's query heads fit one 16-row tile; whole 16-wide k steps of D; the workspace holds 128 heads (a batch: 1024 (row, head) pairs)
 * @grid M * G * SPLIT 1 1
 * @block WARPS * WARP 1 1
 * @priority 3
 * @pdl -- reads nothing before its wait for the kernel before (L2PF: but the positions, for an L2 prefetch of older cache rows or, L2PF 2, their copy, checked against the positions read after the wait)
 *
 * Block b = (r·G + g)·SPLIT + s serves row r (0 but for a batch) and kv
 * head g (query heads h0 .. h0+per-1, h0 = g·per, per = H/G) over key slice
 * s of the row: keys j0 .. j1-1, j0 = s·cdiv(L, ns), L = pos0 + 1 (a
 * batch: pos[r] + 1, in slot pos[M + r]), ns = min(SPLIT, cdiv(L, KMIN))
 * slices (KMIN 0, the default: SPLIT; blocks s >= ns return at once: the
 * flash-decoding split only where the keys fill it; a point of the
 * tuner's space, not yet timed on a GPU: bench/RESULTS.md, session 30).
 * The slice is cut into chunks of KW keys;
 * warp w takes chunks w, w + WARPS, ..., each warp its own: it copies a
 * chunk's K and V rows into its own NST shared-memory stages with 16-byte
 * cp.async (rows past j1 zero-filled; rows padded to DMAX+8 elements, so
 * that ldmatrix reads are conflict-free), so NST-1 chunks are in flight
 * while it computes one, with no block-wide barrier. Lane l holds, as the
 * mma's fragments do, rows a = l/4 and b = l/4 + 8 (query head h0 + row;
 * rows past per repeat the last head and are not stored) and columns
 * 2(l%4), 2(l%4)+1 of each 8-wide n-tile. Per chunk, as attention_mma's
 * loop: S = q·Kᵀ (q's A fragments in registers; ldmatrix: K's rows are B's
 * columns), scaled by scale·log2 e, keys past j1 masked; the row's running
 * max from a quad's shuffles; P = 2^(S − m) in registers, becoming P·V's
 * A fragments (for bf16 as two parts, hi + lo, each an mma: ADM_PP); O
 * and the row sums rescaled; O += P·V (ldmatrix .trans).
 * Then the warps' partials (m, l, o) meet in shared memory (the stages'
 * space) and merge (the prelude's gc-split block); with ns > 1 the
 * block writes its partial per (row, head) to a module-scope workspace and
 * the block that takes the last ticket of its (row, kv head) merges the ns
 * partials and writes O (so, as for attention_decode, two launches of this
 * code object must not run concurrently; the runtime's one stream
 * serialises them). CL = 1 makes the ns = SPLIT blocks of a (row, kv head)
 * one cluster (the grid's consecutive blocks; rank = slice): each block
 * puts its partial per head (m, l, o[D]) in its own shared memory, a
 * cluster barrier (release, acquire) makes them visible, each block merges
 * elements rank, rank + SPLIT, ... of its heads' per·D from every block's
 * partial (ld.shared::cluster) and writes them, and a second barrier keeps
 * every block alive until no one reads its partial. CL = 2 turns the
 * merge around: each block stores each element's partial into the block
 * that merges it (adm_cl_push), one barrier (release, acquire) follows,
 * and each block merges from its own shared memory and leaves; an
 * arrival at the kernel's start, waited for before the first remote
 * store, makes sure every block of the cluster runs. (tests/nv_emu runs a
 * block at a time, so CL >= 1 is verified on the GPU only: by the tuner
 * before it may win, tests/test_ops.py and the model tests on sm_90.)
 * L2PF = 2 issues the warp's first NST-1 chunks (adm_prologue) before the
 * wait from positions read then, all but the newest row, which the kernel
 * before writes; after the wait it reads that row into its place
 * (adm_newest) while q loads. A row past the slice is zero-filled like
 * every other (its probability 0 still meets it in P·V). If the positions
 * read after the wait differ, the early copies are waited for and the
 * chunks copied again, as with L2PF < 2.
 */

#define ADM_S (DMAX + 8)       /* shared row stride of K and V, elements */
#define ADM_NK (KW / 8)        /* 8-key n-tiles of a chunk's scores */
#define ADM_KD (DMAX / 16)     /* 16-wide k steps of q·Kᵀ */
#define ADM_ND (DMAX / 8)      /* 8-wide n-tiles of O */
#define ADM_ST (2 * KW * ADM_S) /* elements of a stage: K's rows, then V's */
#define ADM_W (DMAX + 2)       /* workspace floats per partial: m, l, o[DMAX] */
/* Parts of P in P·V: bf16 keeps 8 bits of a probability, which moved a
 * model's greedy token against transformers on the GPU (tests/gpu/
 * test_gpu_prompts.py, 5 heads of 96); as hi + lo it keeps 16. f16's 11
 * bits are one part. */
#define ADM_PP (GC_TA == GC_BF16 ? 2 : 1)

#define ADM_HMAX (BATCH ? 1024 : 128) /* (row, head) pairs the workspace holds */

GC_GLOBAL float adm_ws[SPLIT > 1 && !CL ? ADM_HMAX * SPLIT * ADM_W : 1];
GC_GLOBAL unsigned adm_cnt[SPLIT > 1 && !CL ? ADM_HMAX : 1]; /* per (row, kv head): G <= H */

#if CL == 2
#define ADM_SLOTS ((16 * DMAX + SPLIT - 1) / SPLIT) /* elements a block merges, at most */
#endif
#if CL
#define ADM_CLUSTER_DIMS __cluster_dims__(SPLIT, 1, 1)
#else
#define ADM_CLUSTER_DIMS
#endif

GC_DEVICE void adm_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  gc_mma16816<GC_TA == GC_BF16>(c, a[0], a[1], a[2], a[3], b0, b1);
}

/* Issue the calling warp's copies of keys k0 .. k0+KW-1 (those >= j1 zero
 * filled; key jskip, where it is below j1, left as it is) of K and V into
 * the stage at shared address st: each lane its share of the 16-byte
 * chunks of D. (Rows past j1 are masked out of the scores, but their
 * values still meet a probability of 0 in P·V: they must be numbers.) */
GC_DEVICE void adm_load(unsigned st, const TB *Kc, const TB *Vc, int64_t k0, int64_t j1, int64_t ld,
                        int64_t D, int lane, int64_t jskip = -1) {
  const int ch = (int)(D / 8); /* chunks of a row: D % 16 == 0 */
  for (int c = lane; c < KW * ch; c += WARP) {
    const int r = c / ch, d = c % ch * 8;
    if (k0 + r == jskip && jskip < j1)
      continue;
    const bool ok = k0 + r < j1;
    const int64_t row = ok ? k0 + r : 0; /* a valid address; nothing read when !ok */
    const unsigned off = (unsigned)((r * ADM_S + d) * 2);
    gc_cp_async16(st + off, Kc + row * ld + d, ok ? 16 : 0);
    gc_cp_async16(st + (unsigned)(KW * ADM_S * 2) + off, Vc + row * ld + d, ok ? 16 : 0);
  }
}

/* The warp's first NST-1 chunks (w, w + WARPS, ...) of keys j0 .. j1-1
 * into stages 0 .. NST-2 (st0, stb bytes apart), a commit group each; key
 * jskip (-1: none) left out. */
GC_DEVICE void adm_prologue(unsigned st0, unsigned stb, const TB *Kc, const TB *Vc, int64_t j0, int64_t j1,
                            int64_t ld, int64_t D, int w, int lane, int64_t jskip) {
  const int64_t nck = gc_cdiv(j1 - j0, KW);
  GC_UNROLL(1)
  for (int p = 0; p < NST - 1; p++) {
    const int64_t c = w + (int64_t)p * WARPS;
    if (c < nck)
      adm_load(st0 + p * stb, Kc, Vc, j0 + c * KW, j1, ld, D, lane, jskip);
    gc_cp_async_commit();
  }
}

/* L2PF 2: key jn (the newest, which the kernel before wrote) of K and V,
 * read after the wait into its place in the stages where it falls in one
 * of the warp's first NST-1 chunks of keys j0 .. (adm_prologue's, which
 * left it out); the loop's __syncwarp makes it visible. */
GC_DEVICE void adm_newest(TB *stages, const TB *Kc, const TB *Vc, int64_t j0, int64_t j1, int64_t jn,
                          int64_t ld, int64_t D, int w, int lane) {
  if (jn < j0 || jn >= j1)
    return;
  const int64_t cn = (jn - j0) / KW; /* its chunk */
  if (cn % WARPS != w || cn / WARPS >= NST - 1)
    return; /* another warp's, or one the loop copies after the wait */
  TB *k = stages + cn / WARPS * ADM_ST + (jn - j0 - cn * KW) * ADM_S;
  for (int c = lane; c < D / 8; c += WARP) {
    *reinterpret_cast<gc_raw16 *>(k + 8 * c) = *reinterpret_cast<const gc_raw16 *>(Kc + jn * ld + 8 * c);
    *reinterpret_cast<gc_raw16 *>(k + KW * ADM_S + 8 * c) = *reinterpret_cast<const gc_raw16 *>(Vc + jn * ld + 8 * c);
  }
}

#if CL == 2
/* CL = 2: partial k's (m, l, o) of the elements this block merges, at
 * ((k·ADM_SLOTS + slot)·3: element rank + slot·SPLIT of the heads' per·D,
 * stored there by block k. */
GC_SHARED float adm_cl_in[SPLIT * ADM_SLOTS * 3];

/* Element i (head i / D, d = i % D) of block sp's partial, (m, l, o), into
 * the block that merges it (rank i % SPLIT). */
GC_DEVICE void adm_cl_push(int64_t i, int sp, float mx, float ls, float os) {
  float *in = &adm_cl_in[(sp * ADM_SLOTS + i / SPLIT) * 3];
  const unsigned dst = (unsigned)(i % SPLIT);
  gc_st_cluster(in, dst, mx), gc_st_cluster(in + 1, dst, ls), gc_st_cluster(in + 2, dst, os);
}

/* After every block's pushes (the barrier's release and acquire):
 * elements rank, rank + SPLIT, ... of the nh heads' nh·D merged from the
 * SPLIT partials in this block's memory, into O (the first head's output).
 * Nothing remote is read: a block leaves when its merge is done. */
GC_DEVICE void adm_cl_merge_in(TC *O, int nh, int64_t D, int rank) {
  gc_cluster_arrive();
  gc_cluster_wait();
  for (int64_t t = gc_tid(), i = rank + t * SPLIT; i < nh * D; t += WARPS * WARP, i = rank + t * SPLIT) {
    float mx = -GC_INF, ls = 0.0f, os = 0.0f;
    GC_UNROLL(SPLIT)
    for (int k = 0; k < SPLIT; k++)
      mx = gc_max(mx, adm_cl_in[(k * ADM_SLOTS + t) * 3]);
    GC_UNROLL(SPLIT)
    for (int k = 0; k < SPLIT; k++) {
      const float *p = &adm_cl_in[(k * ADM_SLOTS + t) * 3];
      const float w = gc_split_weight(p[0], mx);
      ls += w * p[1];
      os += w * p[2];
    }
    STORE_C(O, i, os / ls);
  }
}
#elif CL
/* CL = 1: the block's partial of each of its heads, (m, l, o[DMAX]) a
 * head, read by every block of the cluster. */
GC_SHARED float adm_cl_part[16 * ADM_W];

GC_DEVICE void adm_cl_put(int hh, int d, float mx, float ls, float os) {
  if (d == 0)
    adm_cl_part[hh * ADM_W] = mx, adm_cl_part[hh * ADM_W + 1] = ls;
  adm_cl_part[hh * ADM_W + 2 + d] = os;
}

/* Every block of the cluster (rank = its slice) has put its partials:
 * elements rank, rank + SPLIT, ... of the nh heads' nh·D, merged from the
 * SPLIT partials, into O (the first head's output; head hh at hh·D). */
GC_DEVICE void adm_cl_merge(TC *O, int nh, int64_t D, int rank) {
  gc_cluster_sync(); /* every partial is in place and visible */
  for (int64_t i = rank + (int64_t)gc_tid() * SPLIT; i < nh * D; i += (int64_t)WARPS * WARP * SPLIT) {
    const int hh = (int)(i / D), d = (int)(i % D);
    float m[SPLIT], mx = -GC_INF, ls = 0.0f, os = 0.0f;
    GC_UNROLL(SPLIT)
    for (int k = 0; k < SPLIT; k++)
      mx = gc_max(mx, m[k] = gc_ld_cluster(&adm_cl_part[hh * ADM_W], (unsigned)k));
    GC_UNROLL(SPLIT)
    for (int k = 0; k < SPLIT; k++) {
      const float w = gc_split_weight(m[k], mx);
      ls += w * gc_ld_cluster(&adm_cl_part[hh * ADM_W + 1], (unsigned)k);
      os += w * gc_ld_cluster(&adm_cl_part[hh * ADM_W + 2 + d], (unsigned)k);
    }
    STORE_C(O, hh * D + d, os / ls);
  }
  gc_cluster_sync(); /* no block leaves while another may read its partial */
}
#endif

/* args: Q[M, H, D] (TA), Kc, Vc [pos0+1.., G, D] (TB; a batch: [slots,
 * S, G, D]), O[M, H, D] (TC), int32 *pos (pos0; a batch: [2, M], positions
 * then slots), int64 M, H, G, D (a batch: and S), float scale. */
GC_KERNEL_BOUNDS(WARPS * WARP) ADM_CLUSTER_DIMS
void attention_decode_mma(const TA *Q, const TB *Kc, const TB *Vc, TC *O, const int32_t *pos, int64_t M,
                          int64_t H, int64_t G, int64_t D,
#if BATCH
                          int64_t S,
#endif
                          float scale) {
  GC_SHARED int s_last;
  /* SPLIT > 1, the last block's merge: per (head, slice) its weight and l, per head the sum */
  GC_SHARED float sm_wt[SPLIT > 1 ? 16 : 1][SPLIT], sm_lk[SPLIT > 1 ? 16 : 1][SPLIT], sm_ls[16];
  if ((BATCH ? M < 1 : M != 1) || G <= 0 || H % G || H / G > 16 || D <= 0 || D % 16 || D > DMAX ||
      (SPLIT > 1 && !CL && M * H > ADM_HMAX))
    return; /* outside @applies */
#if CL == 2
  gc_cluster_arrive_relaxed(); /* every block of the cluster has started before any stores into another (the wait below) */
#endif
#if !BATCH
  const int64_t S = 0; /* a batch's rows a slot */
#endif
  const int tid = gc_tid(), w = tid / WARP, lane = tid % WARP, qr = lane / 4, qc = lane % 4;
  /* the warp's stages; ldmatrix row addresses of this lane within one: K
     (non-trans) key 8·(l/16) + l%8 of an n-tile pair, d 8·((l/8)%2) of a
     k step; V (.trans) key 8·((l/8)%2) + l%8 of a k step, d 8·(l/16) of
     an n-tile pair */
  TB *stages = reinterpret_cast<TB *>(gc_dyn_shared()) + (int64_t)w * NST * ADM_ST;
  const unsigned st0 = gc_smem_addr(stages), stb = ADM_ST * 2;
  int lpre = -1; /* L2PF 2: the row length whose older rows the stages hold (-1: none) */
  const TB *kpre = Kc;
  if (L2PF) { /* the slice's older rows, from positions read past L1 */
    const TA *q = Q;
    const TB *k = Kc, *v = Vc;
    TC *o = O;
    const gc_split_at a = gc_split_block<SPLIT, BATCH>((const volatile int32_t *)pos, M, H, G, D, S, q, k, v, o, KMIN);
    if (L2PF == 1) {
      gc_split_prefetch(k + a.g * D, v + a.g * D, G * D, D, a.j0, gc_min64(a.j1, a.L - 1), WARPS * WARP);
    } else if (a.sp < a.ns) {
      adm_prologue(st0, stb, k + a.g * D, v + a.g * D, a.j0, a.j1, G * D, D, w, lane, a.L - 1);
      lpre = a.L, kpre = k;
    }
  }
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  const gc_split_at at = gc_split_block<SPLIT, BATCH>(pos, M, H, G, D, S, Q, Kc, Vc, O, KMIN); /* row, kv head, keys */
  /* L2PF 2: the early copies hold this block's rows (the positions did not move) */
  const bool early = L2PF == 2 && lpre == at.L && kpre == Kc;
  if (L2PF == 2 && lpre >= 0 && !early)
    gc_cp_async_wait<0>(); /* copies of other rows land before their stages are written again */
  if (at.sp >= at.ns)
    return; /* a slice past this row's split (KMIN) */
  const int64_t row = at.row, g = at.g, per = H / G, h0 = g * per, ld = G * D;
  const int sp = at.sp, ns = at.ns;
  const int64_t j0 = at.j0, j1 = at.j1, nck = gc_cdiv(j1 - j0, KW);
  const int kd = (int)(D / 16);
  Kc += g * D, Vc += g * D;
  if (early)
    adm_newest(stages, Kc, Vc, j0, j1, at.L - 1, ld, D, w, lane);
  else
    adm_prologue(st0, stb, Kc, Vc, j0, j1, ld, D, w, lane, -1);

  /* q's A fragments: k step s, a0/a1 rows a/b at d = 16s + 2qc, a2/a3 at +8 */
  uint32_t qf[ADM_KD][4];
  GC_UNROLL(ADM_KD)
  for (int s = 0; s < ADM_KD; s++)
    GC_UNROLL(4)
    for (int x = 0; x < 4; x++) {
      const int64_t r = gc_min64(qr + 8 * (x % 2), per - 1), d = 16 * s + 2 * qc + 8 * (x / 2);
      qf[s][x] = d < D ? *reinterpret_cast<const uint32_t *>(Q + (h0 + r) * D + d) : 0u;
    }

  float m[2] = {-GC_INF, -GC_INF}, l[2] = {0.0f, 0.0f}, oacc[ADM_ND][4];
  GC_UNROLL(ADM_ND)
  for (int n = 0; n < ADM_ND; n++)
    GC_UNROLL(4)
    for (int x = 0; x < 4; x++)
      oacc[n][x] = 0.0f;
  const float sc = scale * 1.4426950408889634f; /* softmax in base 2 */

  const unsigned kofs = (unsigned)(((8 * (lane / 16) + lane % 8) * ADM_S + 8 * ((lane / 8) % 2)) * 2);
  const unsigned vofs = (unsigned)(KW * ADM_S * 2) +
                        (unsigned)(((8 * ((lane / 8) % 2) + lane % 8) * ADM_S + 8 * (lane / 16)) * 2);

  int it = 0;
  GC_UNROLL(1)
  for (int64_t c = w; c < nck; c += WARPS, it++) {
    gc_syncwarp(); /* every lane is done with the stage refilled below (chunk it - 1's) */
    const int64_t cn = c + (int64_t)(NST - 1) * WARPS;
    if (cn < nck)
      adm_load(st0 + (it + NST - 1) % NST * stb, Kc, Vc, j0 + cn * KW, j1, ld, D, lane);
    gc_cp_async_commit();
    gc_cp_async_wait<NST - 1>();
    gc_syncwarp(); /* chunk c landed, every lane's part */
    const int64_t k0 = j0 + c * KW;
    const unsigned sk = st0 + it % NST * stb + kofs, sv = st0 + it % NST * stb + vofs;

    /* S = q·Kᵀ for the chunk's 8-key n-tiles, two at a time */
    float s[ADM_NK][4];
    GC_UNROLL(ADM_NK)
    for (int n = 0; n < ADM_NK; n++)
      GC_UNROLL(4)
      for (int x = 0; x < 4; x++)
        s[n][x] = 0.0f;
    GC_UNROLL(ADM_KD)
    for (int k = 0; k < ADM_KD; k++) {
      if (k >= kd)
        break;
      GC_UNROLL(ADM_NK / 2)
      for (int n = 0; n < ADM_NK; n += 2) {
        uint32_t b[4];
        gc_ldmatrix_x4(b, sk + (unsigned)((8 * n * ADM_S + 16 * k) * 2));
        adm_mma(s[n], qf[k], b[0], b[1]);
        adm_mma(s[n + 1], qf[k], b[2], b[3]);
      }
    }

    /* mask, running max, rescale (a chunk has a key below j1: the max is finite) */
    float mx[2] = {m[0], m[1]}, corr[2];
    GC_UNROLL(ADM_NK)
    for (int n = 0; n < ADM_NK; n++)
      GC_UNROLL(4)
      for (int x = 0; x < 4; x++) {
        s[n][x] = k0 + 8 * n + 2 * qc + (x % 2) < j1 ? s[n][x] * sc : -GC_INF;
        mx[x / 2] = gc_max(mx[x / 2], s[n][x]);
      }
    GC_UNROLL(2)
    for (int x = 0; x < 2; x++) {
      mx[x] = gc_group_max(mx[x], 4);
      corr[x] = gc_exp2(m[x] - mx[x]); /* 0 at the first chunk (m = -inf) */
      m[x] = mx[x];
      l[x] *= corr[x];
    }
    GC_UNROLL(ADM_ND)
    for (int n = 0; n < ADM_ND; n++)
      GC_UNROLL(4)
      for (int x = 0; x < 4; x++)
        oacc[n][x] *= corr[x / 2];

    /* O += P·V, one 16-key k step (two n-tiles of P) at a time */
    GC_UNROLL(ADM_NK / 2)
    for (int k = 0; k < ADM_NK / 2; k++) {
      float p[2][4];
      GC_UNROLL(2)
      for (int h = 0; h < 2; h++)
        GC_UNROLL(4)
        for (int x = 0; x < 4; x++) {
          p[h][x] = gc_exp2(s[2 * k + h][x] - m[x / 2]);
          l[x / 2] += p[h][x];
        }
      uint32_t a[ADM_PP][4]; /* P's A fragments: P rounded; ADM_PP 2: then P minus that, rounded */
      GC_UNROLL(ADM_PP)
      for (int q = 0; q < ADM_PP; q++)
        GC_UNROLL(4)
        for (int i = 0; i < 4; i++) {
          float *pi = &p[i / 2][2 * (i % 2)];
          a[q][i] = gc_pack2(TA(), pi[0], pi[1]);
          if (ADM_PP == 2 && q == 0) { /* keep what rounding lost for part 1 */
            float r[2];
            gc_unpack2(TA(), a[q][i], r);
            pi[0] -= r[0], pi[1] -= r[1];
          }
        }
      GC_UNROLL(ADM_ND / 2)
      for (int n = 0; n < ADM_ND; n += 2) {
        if (8 * n >= D)
          break;
        uint32_t b[4];
        gc_ldmatrix_x4_trans(b, sv + (unsigned)((16 * k * ADM_S + 8 * n) * 2));
        GC_UNROLL(ADM_PP)
        for (int q = 0; q < ADM_PP; q++) {
          adm_mma(oacc[n], a[q], b[0], b[1]);
          adm_mma(oacc[n + 1], a[q], b[2], b[3]);
        }
      }
    }
  }
  gc_cp_async_wait<0>(); /* no copy outlives the loop: the stages become the partials' space */
  gc_barrier();

  /* The warp's partial of each real row into shared memory: m at pm[w·16 +
     r], l at pl[...], o at po[(w·16 + r)·DMAX + d] */
  float *pm = reinterpret_cast<float *>(gc_dyn_shared()), *pl = pm + WARPS * 16, *po = pl + WARPS * 16;
  GC_UNROLL(2)
  for (int x = 0; x < 2; x++) {
    const int r = qr + 8 * x;
    const float ls = gc_group_sum(l[x], 4);
    if (r >= per)
      continue;
    if (qc == 0)
      pm[w * 16 + r] = m[x], pl[w * 16 + r] = ls;
    GC_UNROLL(ADM_ND)
    for (int n = 0; n < ADM_ND; n++)
      if (8 * n < D)
        po[(w * 16 + r) * DMAX + 8 * n + 2 * qc] = oacc[n][2 * x],
                                             po[(w * 16 + r) * DMAX + 8 * n + 2 * qc + 1] = oacc[n][2 * x + 1];
  }
  gc_barrier();
#if CL == 2
  gc_cluster_wait(); /* the arrival at the start: every block of the cluster runs */
#endif

  /* Merge the warps: thread t takes (head, element) pairs. */
  for (int64_t i = tid; i < per * D; i += WARPS * WARP) {
    const int hh = (int)(i / D), d = (int)(i % D);
    float mx, ls, os;
    gc_split_warps<WARPS>(pm + hh, pl + hh, po + hh * DMAX + d, 16, 16 * DMAX, mx, ls, os);
    if (ns == 1)
      STORE_C(O, (h0 + hh) * D + d, os / ls);
    else
#if CL == 2
      adm_cl_push(i, sp, mx, ls, os);
#elif CL
      adm_cl_put(hh, d, mx, ls, os);
#else
      gc_split_put(adm_ws + ((row * H + h0 + hh) * SPLIT + sp) * ADM_W, d, mx, ls, os);
#endif
  }
#if CL == 2
  adm_cl_merge_in(O + h0 * D, (int)per, D, sp);
  return;
#elif CL
  adm_cl_merge(O + h0 * D, (int)per, D, sp);
  return;
#endif
  if (ns == 1 || !gc_split_last(&adm_cnt[row * G + g], ns, &s_last))
    return;
  /* the last block of (row, kv head g): its heads' ns partials */
  gc_split_merge<SPLIT>(adm_ws + (row * H + h0) * SPLIT * ADM_W, ADM_W, (int)per, D, sm_wt, sm_lk, sm_ls, WARPS * WARP,
                        [&](int hh, int d, float v) { STORE_C(O, (h0 + hh) * D + d, v); }, ns);
}
