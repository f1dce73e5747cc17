/* embed_q.cu — GPU embedding gather from a table in a block format: row
 * tokens[i] of T[K,N] (rows of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K blocks,
 * base/quant.h) dequantized into row i of Z[M,N]; an id outside [0,K)
 * gives zeros.
 *
 * @template embed_q_gpu
 * @op embed
 * @backend gpu
 * @dtypes f32:q8_0:f32 f32:q4_0:f32 f32:q4_k:f32 f32:q5_k:f32 f32:q6_k:f32 f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16 f16:q8_0r:f16 f16:q4_0r:f16 bf16:q8_0r:bf16 bf16:q4_0r:bf16 f16:q4_kr:f16 bf16:q4_kr:bf16 f16:q6_kr:f16 bf16:q6_kr:bf16
 * @kernel embed_q_gpu
 * @param THREADS 64 128 256 512 default 256 -- threads per block
 * @param ROWS 1 2 4 8 default 1 -- tokens (rows of Z) per block
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @grid cdiv(N, THREADS * 8) * cdiv(M, ROWS) 1 1
 * @block THREADS 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * The prelude's units (gc-quant block): thread i of block b writes part
 * t = i % 4 of unit c·THREADS/4 + i/4 of each of rows r·ROWS .. (c = b % nc,
 * nc = cdiv(N, THREADS·8), r = b / nc): its eight elements 4t..4t+3 and
 * 16+4t..16+4t+3 of the unit, y = fl(d·q) − mn (exactly base/quant.h's
 * values), rounded once into Z's dtype, in two stores of four. Consecutive
 * threads write consecutive runs; N is a whole number of blocks (a problem
 * check), so every unit lies inside the row.
 */

/* args: int32 tokens[M], T[K,N] (blocks), Z[M,N] (TC), int64 M, N, K. */
GC_KERNEL_BOUNDS(THREADS)
void embed_q_gpu(const int32_t *tokens, const TB *T, TC *Z, int64_t M, int64_t N, int64_t K) {
  gc_pdl_wait();
  gc_pdl_launch();
  const int64_t nc = gc_cdiv(N, (int64_t)THREADS * 8);
  if (nc <= 0 || N % GC_QK)
    return;
  const int64_t c = gc_bid() % nc, r0 = gc_bid() / nc * ROWS;
  const int t = gc_tid() % 4;
  const int64_t ug = c * (THREADS / 4) + gc_tid() / 4; /* unit of the row */
  if (ug >= N / 32)
    return;
  const int64_t kb = ug / GC_QUNITS, rb = N / GC_QK * GC_QBYTES;
  const int u = GCQ_UNIT_IN_BLOCK(ug);
  for (int64_t i = r0; i < gc_min64(M, r0 + ROWS); i++) {
    const int64_t id = tokens[i];
    float y[8];
    if (id >= 0 && id < K) {
      const uint8_t *blk = (const uint8_t *)T + id * rb + kb * GC_QBYTES;
      uint32_t lo, hi;
      float d0, d1, mn;
      GCQ_UNIT(blk, u, t, lo, hi, d0, d1, mn);
      GC_UNROLL(4)
      for (int e = 0; e < 4; e++) {
        y[e] = gc_fma(d0, GCQ_LEVEL(lo, e), -mn);
        y[4 + e] = gc_fma(d1, GCQ_LEVEL(hi, e), -mn);
      }
    } else {
      GC_UNROLL(8)
      for (int e = 0; e < 8; e++)
        y[e] = 0.0f;
    }
    STOREV_C(4, Z, i * N + ug * 32 + 4 * t, y);
    STOREV_C(4, Z, i * N + ug * 32 + 16 + 4 * t, y + 4);
  }
}
