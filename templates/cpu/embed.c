/* embed.c — CPU embedding gather: row tokens[i] of the table T[K,N] becomes
 * row i of Z[M,N], converted to Z's dtype; an id outside [0,K) gives zeros.
 *
 * @template embed_cpu
 * @op embed
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel embed_cpu
 * @param ROWS 1 2 4 8 16 32 64 default 4 -- tokens (rows of Z) per task
 * @param COLS 256 512 1024 2048 4096 8192 default 4096 -- columns of Z per task
 * @param VEC 8 16 default 16 -- fp32 lanes per vector (converting copies)
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint COLS % VEC == 0 -- a task's row piece is whole vectors (but the last)
 * @constraint ROWS * COLS * (SB + SC) <= L2 -- a task's rows in and out fit in L2
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M, ROWS) * cdiv(N, COLS) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * Task t copies columns c*COLS .. c*COLS+COLS-1 (fewer at the end) of rows
 * r*ROWS .. r*ROWS+ROWS-1 (fewer at the end), where r = t / cdiv(N,COLS)
 * and c = t % cdiv(N,COLS). Argument A is unused (by convention A = C).
 * When T and Z have one dtype the copy is a memcpy, bit for bit; otherwise
 * (f16 or bf16 to f32) each element is widened, which is exact. The column
 * tail uses partial loads/stores, so nothing past a row is touched.
 */

/* z[j] = (TC) t[j] for j < n. */
static void embed_span(const TB *t, TC *z, int64_t n) {
#if GC_TB == GC_TC
  memcpy(z, t, (size_t)n * sizeof *z);
#else
  int64_t j = 0;
  for (; j + VEC <= n; j += VEC)
    VSTORE_C(z + j, VLOAD_B(t + j));
  if (j < n)
    VSTOREN_C(z + j, VLOADN_B(t + j, n - j), n - j);
#endif
}

/* args: int32 tokens[M], T[K,N] (TB), Z[M,N] (TC), int64 M, N, K. */
GC_EXPORT void embed_cpu(void **args, int64_t task) {
  const int32_t *tokens = GC_ARG(args, 0, const int32_t *);
  const TB *T = GC_ARG(args, 1, const TB *);
  TC *Z = GC_ARG(args, 2, TC *);
  int64_t M = GC_ARG(args, 3, int64_t);
  int64_t N = GC_ARG(args, 4, int64_t);
  int64_t K = GC_ARG(args, 5, int64_t);

  int64_t ncb = gc_cdiv(N, COLS); /* column blocks */
  if (ncb <= 0)
    return;
  int64_t i0 = task / ncb * ROWS, j0 = task % ncb * COLS;
  int64_t i1 = gc_min(M, i0 + ROWS), n = gc_min(COLS, N - j0);
  for (int64_t i = i0; i < i1; i++) {
    int64_t id = tokens[i];
    TC *z = Z + i * N + j0;
    if (id >= 0 && id < K)
      embed_span(T + id * N + j0, z, n);
    else
      memset(z, 0, (size_t)n * sizeof *z); /* +0.0 in every dtype */
  }
}
