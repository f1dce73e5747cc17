/* gemv_bulk.cu — Hopper (sm_90) GEMV for one row of A (the decode step):
 * C[1,N] = A[1,K] · B[N,K]ᵀ (gemm; gemm_add: C += A·Bᵀ), the gate/up pair
 * with the SwiGLU epilogue (gemm_swiglu: C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), W[2N,K]
 * gate rows then up rows), the QKV projection with rope_kv in its epilogue
 * (rmsnorm_gemm_rope_kv), and rmsnorm_*: A's row RMS-normalised on the way;
 * f16 or bf16, fp32 accumulation. B streams through a shared-memory ring
 * filled by the bulk copy engine, so the bytes in flight cost no registers.
 *
 * @template gemv_bulk
 * @op gemm gemm_add rmsnorm_gemm gemm_swiglu rmsnorm_gemm_swiglu rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel gemv_bulk
 * @param RS 2 4 8 16 default 8 -- consumer warps, one output unit each per group (an output; the gate/up pair's output; a RoPE pair's two outputs)
 * @param KC 256 512 1024 2048 4096 default 1024 -- columns per stage (a segment of each of the stage's rows; one bulk copy each)
 * @param STAGES 2 3 4 6 8 default 8 -- stages in the ring
 * @param BPS 1 2 default 1 -- blocks per SM the grid is sized for (SMS: the device's count at launch)
 * @param EARLY 0 1 default 1 -- 1: the consumers let the next kernel launch (gc_pdl_launch) before their wait for the kernel before, not after it, so that the next kernel's blocks take their places (and its producer fills its ring where shared memory allows) while this one still waits (H200, EARLY=1 against 0 in every decode GEMV: 8B 244.9 / 233.9 against 244.7 / 233.5 tok/s after 128 / 3830 tokens, 1B 1145.6 / 1104.6 against 1125.9 / 1090.8; bench/RESULTS.md, session 32)
 * @defaults gemm gemm_add rmsnorm_gemm KC=4096 STAGES=2 if K >= 4096 -- rows of 4096 or more: one 8 KB copy a row and stage (H200, f16: 8B QKV 16.8 -> 15.2 us, O 10.7 -> 10.3, LM head 284 -> 237, 1B down 11.1 -> 10.1; bench/RESULTS.md, session 29)
 * @defaults gemm gemm_add rmsnorm_gemm KC=2048 STAGES=3 if K >= 2048 && K < 4096 -- rows of 2048 to 4095: a 4 KB copy (1B QKV 6.7 -> 6.4 us, O 4.2 -> 4.0; session 29)
 * @defaults gemm_add STAGES=2 if K >= 2048 && K < 4096 -- the output projection of heads of 2048 to 4095 columns in a 64 KB ring, which shares an SM with the decode attention before it (H200, 1B with DMAX=64 attention: 1121.9 -> 1131.7 / 1079.3 -> 1089.3 tok/s after 128 / 3830 tokens; the 8B's 4096 columns lose with it: session 31)
 * @defaults gemm_swiglu rmsnorm_gemm_swiglu rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv STAGES=4 -- two rows a warp: the default's bytes in flight (128 KB at f16) in half the stages (H200, f16 gate/up 14336x4096: 54.6 us, gemv_gpu's best of 10 62.4)
 * @defaults rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv RS=4 KC=2048 -- the QKV's RoPE pairs in 4 KB copies (H200, f16 8B 6144x4096: 16.6 us, RS=8,KC=1024 26.4, gemv_gpu's best of 12 20.2; 1B 3072x2048: 7.1, 8.8, 7.1)
 * @constraint SM >= 90 -- cp.async.bulk and transaction-counting mbarriers (sm_90)
 * @constraint WARP == 32 && (RS + 1) * WARP <= MAXT -- RS consumer warps and a producer warp
 * @constraint BPS * (STAGES * RS * (PAIR + ROPE) * KC * SB + 1024) <= SMEM -- the ring fits (BPS of them per SM)
 * @shmem STAGES * RS * (PAIR + ROPE) * KC * SB + 128
 * @applies M == 1 && K % 8 == 0 -- one row of A; rows of B are whole 16-byte chunks (bulk copies)
 * @grid min(cdiv(N, RS * (1 + ROPE)), SMS * BPS) 1 1
 * @block (RS + 1) * WARP 1 1
 * @pdl -- the producer reads only B; the consumers wait (gc_pdl_wait) before they read A, C, the norm or the position
 * @prefetch -- the producers ask L2 for the window (the weights the decode step reads next: the O projection's is the FFN's gate/up) once their first stages are issued
 * @priority 3
 *
 * The output units (outputs; RoPE: pairs of outputs, N/2 of them) form
 * groups of RS; block b takes groups b, b + grid, ... A unit has NR rows of
 * B (gb_row): one, the gate and up rows of its output (PAIR), or the two
 * rows of its RoPE pair (gemv.cu's pair order, gc_rope_elem). Each group
 * streams in stages of RS·NR rows × KC columns (the last stage of a row as
 * many columns as are left): warp RS's lane 0 is the producer, one
 * cp.async.bulk per row segment onto the stage's full barrier, armed with
 * the stage's bytes; consumer warp w takes unit w's rows of every stage,
 * each lane 8 columns (16 bytes) at a time from shared memory (consecutive
 * lanes, consecutive chunks: conflict-free) against the same 8 of A's row
 * (read through L1, 2·K bytes shared by every warp), and releases the
 * stage (empty barrier, one arrival per consumer warp). At the end of a
 * group each warp sums its lanes and lane 0 stores its unit through the
 * epilogue (gb_store; RoPE pairs: gb_rope_flush). Units past the last are
 * neither loaded nor stored. What the epilogue reads besides the sums
 * (gemm_add's old C, a RoPE pair's frequency) is asked for as the group
 * begins, so that no load stands between a block's last sums and its end
 * (H100, the 1B's decode after 128 / 700 tokens: +0.8-1.0% / +1.5%;
 * bench/RESULTS.md, session 57).
 *
 * The producer never reads what another kernel writes, so launched to
 * overlap the kernel before it (@pdl) it fills the first STAGES stages
 * while that kernel drains; the consumers wait for it (gc_pdl_wait) before
 * they read A. With STAGES·RS·NR·KC·SB bytes in flight per block (96 to
 * 128 KB at the defaults, up to 17 MB over 132 SMs), the stream is limited
 * by DRAM, not by the loads a warp keeps in registers, as gemv_gpu's are.
 * Measured (H100, 2026-11-22, graph-timed chains with the overlap): 0.88 of
 * copy bandwidth on the 8B output projection (4096x4096) and 0.97 on down
 * (4096x14336), against 0.86 and 0.90 for gemv_gpu's best; gemv_gpu stayed
 * ahead on QKV and the LM head by 2-7%. On the H200 (session 29), whose
 * faster memory wants more bytes in flight, with copies of 4 to 8 KB it is
 * ahead on every 8B decode GEMV (gate/up 1.03 of copy against 0.84); the
 * tuner picks per shape.
 *
 * Every bulk copy carries an L2 evict_first policy: a decode step reads
 * each weight once, and what L2 should keep is everything else (the
 * activations, the cache rows, the norm weights, and the window below).
 * The window (@prefetch: pf, pf_n after the op's arguments; NULL, 0:
 * none) is the next bytes the step streams, which the runtime passes
 * where the DRAM would otherwise idle: the O projection's is the first
 * megabytes of the FFN's gate/up weights, asked for while the attention
 * before it and O itself leave DRAM time over. Block b asks for its share
 * in 16 KB prefetches (cp.async.bulk.prefetch.L2) once its first STAGES
 * stages are issued; the window is never read otherwise or written.
 * Measured (H100, bench/l2_window.sh EVF=0, decode tok/s after 128
 * tokens, session 52): 1B 979.7 without either, 1005.2 with evict_first,
 * 1037.3 with a 32 MB window too; 8B 190.2, 194.8, 196.6.
 *
 * rmsnorm_*: each consumer warp multiplies every A element by the norm
 * weight on the way and scales its sums by 1/sqrt(mean(a²) + eps), as
 * gemv_gpu does; it sums the squares while it streams its first group,
 * whose stages give it all of A's row.
 *
 * The epilogues are gemv_gpu's: gc_silu_mul of the two sums (PAIR), one
 * rounding; gc_rope_put (ROPE): both sums rounded to C's dtype, a query or
 * key pair rotated at position pos0 (read on the device after the wait, so
 * a captured step replays at any position) into Qout (C) or Kc row pos0, a
 * value pair copied into Vc row pos0; no other cache row is touched;
 * rmsnorm_gemm_bias_rope_kv adds each sum's column of b[N] first (fp32;
 * Qwen2's q/k/v biases).
 */

#define GB_NR (PAIR + ROPE)         /* rows of B a unit (the gate/up pair; a RoPE pair): 1 or 2 */
#define GB_SBYTES (RS * GB_NR * KC * SB) /* bytes per stage: [RS][GB_NR][KC] */

/* The RoPE/KV epilogue's arguments (rmsnorm_gemm_rope_kv; zeros and
 * unused for the other ops). */
typedef gc_rope_t<TC> gb_rope_t;

/* Units of N outputs: outputs, or (ROPE) pairs of them. */
GC_DEVICE int64_t gb_units(int64_t N) { return ROPE ? N / 2 : N; }

/* Row r (< GB_NR) of B that unit u reads: u; its gate (0) or up (1) row;
 * element r of RoPE pair u (head u / (D/2), pair u % (D/2)). */
GC_DEVICE int64_t gb_row(const gb_rope_t &ro, int64_t N, int64_t u, int r) {
  if (ROPE) {
    const int64_t half = ro.D / 2;
    return u / half * ro.D + gc_rope_elem(u % half, r, ro.D, ro.layout);
  }
  return PAIR == 2 ? r * N + u : u;
}

/* rmsnorm_gemm_bias_rope_kv: b of row r of unit u (its column of C);
 * else 0. */
GC_DEVICE float gb_bias(const gb_rope_t &ro, int64_t N, int64_t u, int r) {
  return GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV ? LOAD_B((const TB *)ro.bias, gb_row(ro, N, u, r)) : 0.0f;
}

/* Whether the launch is a problem of the op the kernel serves (producer
 * and consumers decide alike, so neither waits for the other in vain). */
GC_DEVICE bool gb_valid(const gb_rope_t &ro, int64_t M, int64_t N, int64_t K) {
  if (M != 1 || N <= 0 || K <= 0)
    return false; /* outside @applies */
  return !ROPE || (ro.D > 0 && ro.D % 2 == 0 && N == (ro.H + 2 * ro.G) * ro.D); /* core/problem.c's check */
}

/* The producer (one thread): every stage of every group of the block,
 * then (after the first STAGES) the block's share of the window. */
GC_DEVICE void gb_produce(const TB *B, const gb_rope_t &ro, int64_t N, int64_t K, unsigned ring,
                          unsigned full, unsigned empty, const char *pf, int64_t pf_n) {
  const int64_t nu = gb_units(N), ng = gc_cdiv(nu, RS), nk = gc_cdiv(K, KC);
  const uint64_t once = gc_l2_evict_first(); /* every weight byte is read once a step */
  int64_t it = 0;
  for (int64_t g = gc_bid(); g < ng; g += gridDim.x)
    for (int64_t kc = 0; kc < nk; kc++, it++) {
      const int s = (int)(it % STAGES);
      if (it >= STAGES) /* every consumer warp is done with the stage's last use */
        gc_mbar_wait(empty + 8 * s, (unsigned)((it / STAGES - 1) & 1));
      const int units = (int)gc_min64(RS, nu - g * RS);
      const unsigned cb = (unsigned)(gc_min64(KC, K - kc * KC) * SB); /* bytes per row segment */
      gc_mbar_expect_tx(full + 8 * s, (unsigned)(units * GB_NR) * cb);
      for (int w = 0; w < units; w++)
        GC_UNROLL(GB_NR)
        for (int r = 0; r < GB_NR; r++)
          gc_bulk_load_hint(ring + (unsigned)(s * GB_SBYTES + (w * GB_NR + r) * KC * SB),
                            B + gb_row(ro, N, g * RS + w, r) * K + kc * KC, cb, full + 8 * s, once);
      if (it + 1 == STAGES && pf_n > 0)
        gc_prefetch_window(pf, pf_n, gridDim.x);
    }
  if (it < STAGES && pf_n > 0)
    gc_prefetch_window(pf, pf_n, gridDim.x);
}

/* Unit u's output from its sums x (and x2: the up row's), already scaled
 * by the norm: the op's epilogue (not ROPE: gb_rope_flush); cold: C[u]
 * as read before the sums (gemm_add's residual; else unused). */
GC_DEVICE void gb_store(TC *C, int64_t u, float x, float x2, float cold) {
  if (PAIR == 2)
    STORE_C(C, u, gc_silu_mul(x, x2));
  else
    STORE_C(C, u, GC_OP_GEMM_ADD ? x + cold : x);
}

/* ROPE: a warp's finished pairs wait in its lanes, lane i the pair of the
 * warp's group i % 32 (its sums; its frequency, asked for as the group
 * began), and are stored 32 at a time, every lane its own in parallel:
 * one latency of the double rotation per 32 groups, not one per group on
 * lane 0 between the stages. */
struct gb_held_t {
  int64_t u; /* the pair, -1: none */
  float x, y;
  double f;
};
GC_DEVICE void gb_rope_flush(TC *C, const gb_rope_t &ro, gb_held_t &h) {
  if (h.u >= 0)
    gc_rope_put(C, ro, 0, h.u, h.x, h.y, h.f);
  h.u = -1;
}

/* Consumer warp w: unit w of every group's stages; lane 0 stores it
 * (ROPE: the lanes, 32 groups at a time). */
GC_DEVICE void gb_consume(const TA *A, TC *C, const TB *Wn, const gb_rope_t &ro, int64_t N, int64_t K,
                          float eps, const unsigned char *ring, unsigned full, unsigned empty, int w,
                          int lane) {
  float scale = 1.0f, ss = 0.0f; /* rmsnorm: 1/sqrt(mean(a²) + eps), from the first group */
  const int64_t nu = gb_units(N), ng = gc_cdiv(nu, RS), nk = gc_cdiv(K, KC);
  gb_held_t held = {-1, 0.0f, 0.0f, 0.0};
  int64_t it = 0;
  for (int64_t g = gc_bid(), gi = 0; g < ng; g += gridDim.x, gi++) {
    const bool first = g == gc_bid(); /* the warp reads all of A's row in it */
    const int64_t u = g * RS + w;
    /* gemm_add: C's old value, asked for as the group starts (after the
       wait) so that its latency passes under the stream, not after it */
    const float cold = GC_OP_GEMM_ADD && lane == 0 && u < nu ? LOAD_C(C, u) : 0.0f;
    /* ROPE: the pair's frequency, asked for here for the same reason (the
       last group's flush follows its sums at once) */
    const double freq = ROPE && u < nu ? gc_rope_freq(ro, u) : 0.0;
    float acc[GB_NR];
    GC_UNROLL(GB_NR)
    for (int r = 0; r < GB_NR; r++)
      acc[r] = 0.0f;
    for (int64_t kc = 0; kc < nk; kc++, it++) {
      const int s = (int)(it % STAGES);
      gc_mbar_wait(full + 8 * s, (unsigned)((it / STAGES) & 1));
      const int cols = (int)gc_min64(KC, K - kc * KC);
      const TB *rows = (const TB *)(ring + s * GB_SBYTES + w * GB_NR * KC * SB); /* [GB_NR][KC] */
      if (u < nu) {
        GC_UNROLL(KC / 256 > 0 ? KC / 256 : 1)
        for (int c = lane * 8; c < cols; c += 256) {
          float a[8];
          gc_ldv<8>(A + kc * KC + c, a);
          if (NORM) {
            float wn[8];
            gc_ldv<8>(Wn + kc * KC + c, wn);
            GC_UNROLL(8)
            for (int e = 0; e < 8; e++) {
              if (first)
                ss = gc_fma(a[e], a[e], ss);
              a[e] *= wn[e];
            }
          }
          GC_UNROLL(GB_NR)
          for (int r = 0; r < GB_NR; r++) {
            float b[8];
            gc_ldv<8>(rows + r * KC + c, b);
            GC_UNROLL(8)
            for (int e = 0; e < 8; e++)
              acc[r] = gc_fma(a[e], b[e], acc[r]);
          }
        }
      }
      __syncwarp(); /* the warp has read the stage */
      if (lane == 0)
        gc_mbar_arrive(empty + 8 * s);
    }
    GC_UNROLL(GB_NR)
    for (int r = 0; r < GB_NR; r++)
      acc[r] = gc_warp_sum(acc[r]);
    if (NORM && first)
      scale = gc_rsqrt(gc_warp_sum(ss) / (float)K + eps);
    if (ROPE) {
      if (lane == gi % 32 && u < nu)
        held = {u, acc[0] * scale + gb_bias(ro, N, u, 0), acc[GB_NR - 1] * scale + gb_bias(ro, N, u, GB_NR - 1),
                freq};
      if (gi % 32 == 31)
        gb_rope_flush(C, ro, held);
    } else if (lane == 0 && u < nu) {
      gb_store(C, u, acc[0] * scale, acc[GB_NR - 1] * scale, cold);
    }
  }
  if (ROPE)
    gb_rope_flush(C, ro, held);
}

/* args: A, B, C, int64 M, N, K (gemm, gemm_add, gemm_swiglu: B is W);
 * A, B, C, norm[K], int64 M, N, K, float eps (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu); A, B, Qout (C), norm, Kc, Vc, double inv_freq,
 * int32 pos[1], int64 M, N, K, H, G, D, layout, float eps
 * (rmsnorm_gemm_rope_kv; rmsnorm_gemm_bias_rope_kv: b[N] after pos):
 * gemv_gpu's; then the window pf[pf_n] (@prefetch). */
GC_KERNEL_BOUNDS((RS + 1) * 32)
void gemv_bulk(const TA *A, const TB *B, TC *C,
#if NORM
               const TB *Wn,
#endif
#if ROPE
               TC *Kc, TC *Vc, const double *inv_freq, const int32_t *pos,
#endif
#if GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV
               const TB *bias,
#endif
               int64_t M, int64_t N, int64_t K
#if ROPE
               , int64_t H, int64_t G, int64_t D, int64_t layout
#endif
#if NORM
               , float eps
#endif
               , const char *pf, int64_t pf_n) {
#if !NORM
  const TB *Wn = B; /* never read (NORM is 0): a pointer to offset, unlike null */
  const float eps = 0.0f;
#endif
#if ROPE
#if GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV
  gb_rope_t ro = {Kc, Vc, inv_freq, 0, H, G, D, layout, bias};
#else
  gb_rope_t ro = {Kc, Vc, inv_freq, 0, H, G, D, layout, 0};
#endif
#else
  const gb_rope_t ro = {0, 0, 0, 0, 0, 0, 0, 0, 0};
#endif
  GC_SHARED uint64_t bars[2 * STAGES]; /* full[0..S-1], empty[0..S-1] */
  const int tid = gc_tid(), w = tid / 32, lane = tid % 32;
  unsigned char *ring = gc_smem_align128(gc_dyn_shared());
  const unsigned full = gc_smem_addr(bars), empty = full + 8 * STAGES;
  const bool valid = gb_valid(ro, M, N, K);
  gc_ring_init(full, empty, STAGES, RS);
  if (w == RS) { /* the producer reads only B: no need to wait for the kernel before */
    if (lane == 0 && valid)
      gb_produce(B, ro, N, K, gc_smem_addr(ring), full, empty, pf, pf_n);
    return;
  }
  if (NORM) /* the norm weight: read first thing after the wait */
    GC_PREFETCH_L2_ONCE(Wn, K * SB, RS * 32);
  if (EARLY)
    gc_pdl_launch();
  gc_pdl_wait(); /* A, C, the norm and the position may be the previous kernel's output */
  if (!EARLY)
    gc_pdl_launch();
  if (!valid)
    return; /* outside @applies (the producer loaded nothing either) */
#if ROPE
  ro.pos0 = *pos; /* on the device: a captured decode step replays at any position */
#endif
  gb_consume(A, C, Wn, ro, N, K, eps, ring, full, empty, w, lane);
}
