/* gemv_q.c — CPU GEMM for a few rows of A with B in a block format (the
 * decode path): C[M,N] = A[M,K] · B[N,K]ᵀ, M <= 16, B's rows blocks of
 * Q8_0, Q4_0, Q4_K, Q5_K or Q6_K (base/quant.h), fp32 accumulation.
 *
 * @template gemv_q_cpu
 * @op gemm gemm_add gemm_swiglu rmsnorm_gemm rmsnorm_gemm_swiglu
 * @backend cpu
 * @dtypes f32:q8_0:f32 f32:q4_0:f32 f32:q4_k:f32 f32:q5_k:f32 f32:q6_k:f32 f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16
 * @kernel gemv_q_cpu
 * @param NB 4 8 16 32 64 128 256 default 16 -- outputs (columns of C) per task
 * @param ROWS 1 2 4 default 2 -- outputs whose rows of B are dequantized and streamed together
 * @param MR 1 2 4 default 4 -- rows of A per register block (more rows run again over the dequantized blocks)
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint NB % ROWS == 0 -- a task is whole groups of outputs
 * @constraint MR * ROWS * 2 + 2 <= 16 + 16 * (VBYTES >= 64) -- accumulators (gate and up), A and B vectors in registers
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @applies M <= 16 -- decode steps and small batches (the GEMM serves larger passes)
 * @grid cdiv(N, NB) 1 1
 * @block THREADS 1 1
 * @priority 2
 *
 * Task t computes the outputs (columns of C) t·NB .. t·NB+NB-1 for every
 * row of A. It walks them ROWS at a time; a group reads PAIR·ROWS rows of B
 * (for the gate/up pair, gate row n and up row N+n per output). Along K it
 * takes one block of each of those rows at a time, dequantizes it into an
 * fp32 scratch in L1 (GC_QDEQUANT, exactly base/quant.h's values: the
 * reference's), and runs MR rows of A against it with MR·PAIR·ROWS vector
 * accumulators; rows of A beyond MR take the next pass over the same blocks
 * (dequantized again: B is streamed once per MR rows of A, which is once
 * at M <= MR). Rows of B past N are clamped to row N-1 and not stored.
 * K is a whole number of blocks (a problem check), so there is no K tail.
 *
 * Epilogues (by the op): C = v, C += v (gemm_add, STORE_GEMM), silu(g)·u
 * (PAIR = 2); with NORM, A's elements are multiplied by the norm weight
 * (A's dtype: LOAD_N) as they are loaded and each output by its row's
 * 1/sqrt(mean(a²) + eps), computed once per task.
 */

#ifndef PAIR
#define PAIR (GC_OP_GEMM_SWIGLU || GC_OP_RMSNORM_GEMM_SWIGLU ? 2 : 1)
#endif
#ifndef NORM
#define NORM (GC_OP_RMSNORM_GEMM || GC_OP_RMSNORM_GEMM_SWIGLU)
#endif
#define GQ_R (PAIR * ROWS) /* rows of B per group */

/* acc[m][r] (m < mr) += the dot of A's row m with the dequantized block
 * y[r] over its QK elements (from element k0 of the row). */
GC_INLINE void gq_block(int mr, const TA *a, int64_t lda, const TN *wn, int64_t k0,
                        float y[GQ_R][GC_QK], VF acc[MR][GQ_R]) {
  for (int64_t k = 0; k < GC_QK; k += VEC) {
    VF av[MR];
    VF w = NORM ? VLOAD_N(wn + k0 + k) : VZERO();
    for (int m = 0; m < mr; m++) {
      av[m] = VLOAD_A(a + m * lda + k0 + k);
      if (NORM)
        av[m] = VMUL(av[m], w);
    }
    GC_UNROLL(GQ_R)
    for (int r = 0; r < GQ_R; r++) {
      VF bv = VLOADF(&y[r][k]);
      for (int m = 0; m < mr; m++)
        acc[m][r] = VFMA(av[m], bv, acc[m][r]);
    }
  }
}

/* Outputs j .. j+ROWS-1 (those < jend are stored) for A's rows m0 ..
 * m0+mr-1. */
GC_INLINE void gq_group(int mr, const TA *A, const TB *B, TC *C, const TN *wn, const float *inv,
                        int64_t m0, int64_t N, int64_t K, int64_t j, int64_t jend) {
  const int64_t rb = K / GC_QK * GC_QBYTES; /* bytes per row of B */
  const TB *b[GQ_R];
  for (int r = 0; r < ROWS; r++) {
    b[r] = B + gc_min(j + r, N - 1) * rb;
    if (PAIR == 2)
      b[ROWS + r] = B + (N + gc_min(j + r, N - 1)) * rb;
  }
  VF acc[MR][GQ_R];
  for (int m = 0; m < mr; m++)
    for (int r = 0; r < GQ_R; r++)
      acc[m][r] = VZERO();
  float y[GQ_R][GC_QK] GC_ALIGN64;
  for (int64_t kb = 0; kb < K / GC_QK; kb++) {
    for (int r = 0; r < GQ_R; r++)
      GC_QDEQUANT(b[r] + kb * GC_QBYTES, y[r]);
    gq_block(mr, A + m0 * K, K, wn, kb * GC_QK, y, acc);
  }
  for (int m = 0; m < mr; m++)
    for (int r = 0; r < ROWS && j + r < jend; r++) {
      float v = VHSUM(acc[m][r]) * inv[m0 + m];
      if (PAIR == 2)
        v = GC_SILU_MUL(v, VHSUM(acc[m][ROWS + r]) * inv[m0 + m]);
      STORE_GEMM(C + (m0 + m) * N, j + r, v);
    }
}

/* args: A[M,K] (TA), B[PAIR·N,K] (blocks), C[M,N] (TC), [norm[K] (A's
 * dtype),] int64 M, N, K[, float eps]; M <= 16. */
GC_EXPORT void gemv_q_cpu(void **args, int64_t task) {
  const TA *A = GC_ARG(args, 0, const TA *);
  const TB *B = GC_ARG(args, 1, const TB *);
  TC *C = GC_ARG(args, 2, TC *);
  const TN *wn = NORM ? GC_ARG(args, 3, const TN *) : 0;
  int64_t M = GC_ARG(args, 3 + NORM, int64_t);
  int64_t N = GC_ARG(args, 4 + NORM, int64_t);
  int64_t K = GC_ARG(args, 5 + NORM, int64_t);
  float eps = NORM ? GC_ARG(args, 7, float) : 0.0f;

  int64_t j0 = task * NB, jend = gc_min(j0 + NB, N);
  if (j0 >= N || M <= 0 || M > 16 || K % GC_QK)
    return; /* nothing to do, or outside @applies and the problem check */
  float inv[16];
  for (int64_t m = 0; m < M; m++) {
    inv[m] = 1.0f;
    if (NORM)
      GC_ROW_INV_RMS(A + m * K, K, eps, inv[m]);
  }
  for (int64_t j = j0; j < jend; j += ROWS)
    for (int64_t m0 = 0; m0 < M; m0 += MR) {
      switch (gc_min(MR, M - m0)) { /* a constant row count per call: the m loops unroll */
      case 1: gq_group(1, A, B, C, wn, inv, m0, N, K, j, jend); break;
      case 2: if (MR >= 2) gq_group(2, A, B, C, wn, inv, m0, N, K, j, jend); break;
      case 3: if (MR >= 4) gq_group(3, A, B, C, wn, inv, m0, N, K, j, jend); break;
      case 4: if (MR >= 4) gq_group(4, A, B, C, wn, inv, m0, N, K, j, jend); break;
      default: break;
      }
    }
}
