/* embed_q.c — CPU embedding gather from a table in a block format: row
 * tokens[i] of T[K,N] (rows of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K blocks,
 * base/quant.h) dequantized into row i of Z[M,N]; an id outside [0,K)
 * gives zeros.
 *
 * @template embed_q_cpu
 * @op embed
 * @backend cpu
 * @dtypes f32:q8_0:f32 f32:q4_0:f32 f32:q4_k:f32 f32:q5_k:f32 f32:q6_k:f32 f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16
 * @kernel embed_q_cpu
 * @param ROWS 1 2 4 8 16 default 4 -- tokens (rows of Z) per task
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M, ROWS) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t writes rows t·ROWS .. t·ROWS+ROWS-1 (fewer at the end): each of
 * the row's N / QK blocks is dequantized (GC_QDEQUANT, exactly base/quant.h)
 * and stored in Z's dtype (one rounding for f16/bf16). N is a whole number
 * of blocks (a problem check).
 */

/* args: int32 tokens[M], T[K,N] (blocks), Z[M,N] (TC), int64 M, N, K. */
GC_EXPORT void embed_q_cpu(void **args, int64_t task) {
  const int32_t *tokens = GC_ARG(args, 0, const int32_t *);
  const TB *T = GC_ARG(args, 1, const TB *);
  TC *Z = GC_ARG(args, 2, TC *);
  int64_t M = GC_ARG(args, 3, int64_t);
  int64_t N = GC_ARG(args, 4, int64_t);
  int64_t K = GC_ARG(args, 5, int64_t);
  if (N % GC_QK)
    return; /* outside the problem check */
  float y[GC_QK];
  for (int64_t i = task * ROWS; i < gc_min(M, task * ROWS + ROWS); i++) {
    int64_t id = tokens[i];
    for (int64_t b = 0; b < N / GC_QK; b++) {
      if (id >= 0 && id < K)
        GC_QDEQUANT(T + (id * (N / GC_QK) + b) * GC_QBYTES, y);
      for (int j = 0; j < GC_QK; j++)
        STORE_C(Z + i * N + b * GC_QK, j, id >= 0 && id < K ? y[j] : 0.0f);
    }
  }
}
