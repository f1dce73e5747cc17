/* gemv.c — CPU GEMM for at most 4 rows of A (the decode path):
 * C[M,N] = A[M,K] · B[N,K]ᵀ, M <= 4, fp32 accumulation.
 *
 * @template gemv_cpu
 * @op gemm gemm_add
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel gemv_cpu
 * @param NB 4 8 16 32 64 128 256 512 default 32 -- output columns (rows of B) per task
 * @param ROWS 1 2 4 8 default 4 -- rows of B streamed together
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param UNROLL 1 2 4 default 1 -- independent accumulators per dot product (k split)
 * @param PF 0 512 1024 2048 default 1024 -- software prefetch distance along each B row, bytes (0 = none)
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint NB % ROWS == 0 -- a task is whole groups of rows
 * @constraint ROWS * UNROLL + ROWS + 1 <= 16 + 16 * (VBYTES >= 64) -- for M = 1 accumulators, B and A vectors stay in registers (larger M may spill; tuning decides)
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @applies M <= 4 -- one register block of A rows
 * @grid cdiv(N,NB) 1 1
 * @block THREADS 1 1
 * @priority 2
 *
 * Task t computes C[0..M-1][t*NB .. t*NB+NB-1]. It walks its NB rows of B
 * ROWS at a time; for each group it streams the ROWS rows and the M rows
 * of A along K once, VEC elements per step, keeping M×ROWS×UNROLL fp32
 * vector accumulators, then reduces each to a scalar. The K tail is read
 * with partial (zero-filled) loads, so nothing past a row is touched. B
 * rows past N within a group are clamped to row N-1 and not stored.
 */

/* c[m][r] = sum_k a[m][k] * b[r][k] for m < MROWS, r < ROWS.
 * a: MROWS rows with stride lda; b: ROWS row pointers. */
GC_INLINE void gemv_group(int MROWS, const TA *a, int64_t lda,
                          const TB *b[ROWS], int64_t K,
                          float c[4][ROWS]) {
  VF acc[4][ROWS][UNROLL]; /* acc[m][r][u] */
  for (int m = 0; m < MROWS; m++)
    GC_UNROLL(ROWS)
    for (int r = 0; r < ROWS; r++)
      GC_UNROLL(UNROLL)
      for (int u = 0; u < UNROLL; u++)
        acc[m][r][u] = VZERO();
  int64_t k = 0;
  for (; k + VEC * UNROLL <= K; k += VEC * UNROLL) {
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++) {
      VF av[4];
      for (int m = 0; m < MROWS; m++)
        av[m] = VLOAD_A(a + m * lda + k + u * VEC);
      GC_UNROLL(ROWS)
      for (int r = 0; r < ROWS; r++) {
        if (PF > 0)
          _mm_prefetch((const char *)(b[r] + k + u * VEC) + PF, _MM_HINT_T0);
        VF bv = VLOAD_B(b[r] + k + u * VEC);
        for (int m = 0; m < MROWS; m++)
          acc[m][r][u] = VFMA(av[m], bv, acc[m][r][u]);
      }
    }
  }
  for (; k < K; k += VEC) { /* at most UNROLL steps, the last partial */
    int64_t n = gc_min(VEC, K - k);
    VF av[4];
    for (int m = 0; m < MROWS; m++)
      av[m] = n == VEC ? VLOAD_A(a + m * lda + k) : VLOADN_A(a + m * lda + k, n);
    GC_UNROLL(ROWS)
    for (int r = 0; r < ROWS; r++) {
      VF bv = n == VEC ? VLOAD_B(b[r] + k) : VLOADN_B(b[r] + k, n);
      for (int m = 0; m < MROWS; m++)
        acc[m][r][0] = VFMA(av[m], bv, acc[m][r][0]);
    }
  }
  for (int m = 0; m < MROWS; m++)
    GC_UNROLL(ROWS)
    for (int r = 0; r < ROWS; r++) {
      VF s = acc[m][r][0];
      GC_UNROLL(UNROLL)
      for (int u = 1; u < UNROLL; u++)
        s = VADD(s, acc[m][r][u]);
      c[m][r] = VHSUM(s);
    }
}

/* C[0..MROWS-1][j0 .. j0+nb-1] for one task; MROWS is a constant at
 * each call site so the M loops unroll. */
GC_INLINE void gemv_task(int MROWS, const TA *A, const TB *B, TC *C,
                         int64_t N, int64_t K, int64_t j0, int64_t nb) {
  for (int64_t j = j0; j < j0 + nb; j += ROWS) {
    const TB *b[ROWS];
    for (int r = 0; r < ROWS; r++)
      b[r] = B + gc_min(j + r, N - 1) * K;
    float c[4][ROWS];
    gemv_group(MROWS, A, K, b, K, c);
    for (int m = 0; m < MROWS; m++)
      for (int r = 0; r < ROWS && j + r < j0 + nb; r++)
        STORE_GEMM(C + m * N, j + r, c[m][r]);
  }
}

/* args: A[M,K] (TA), B[N,K] (TB), C[M,N] (TC), int64 M, N, K; M <= 4. */
GC_EXPORT void gemv_cpu(void **args, int64_t task) {
  const TA *A = GC_ARG(args, 0, const TA *);
  const TB *B = GC_ARG(args, 1, const TB *);
  TC *C = GC_ARG(args, 2, TC *);
  int64_t M = GC_ARG(args, 3, int64_t);
  int64_t N = GC_ARG(args, 4, int64_t);
  int64_t K = GC_ARG(args, 5, int64_t);

  int64_t j0 = task * NB;
  int64_t nb = gc_min(NB, N - j0);
  if (nb <= 0)
    return;
  switch (M) {
  case 1: gemv_task(1, A, B, C, N, K, j0, nb); break;
  case 2: gemv_task(2, A, B, C, N, K, j0, nb); break;
  case 3: gemv_task(3, A, B, C, N, K, j0, nb); break;
  case 4: gemv_task(4, A, B, C, N, K, j0, nb); break;
  default: break; /* M == 0, or outside @applies */
  }
}
