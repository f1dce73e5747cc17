/* add.c — CPU elementwise sum of two same-shaped arrays, the residual add:
 * Z[M,N] = X[M,N] + Y[M,N], summed in fp32 and rounded once to Z's dtype.
 * Built for bias, Y is one row [N] added to every row of X (a projection's
 * bias): Z[i,j] = X[i,j] + Y[j].
 *
 * @template add_cpu
 * @op add bias
 * @backend cpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel add_cpu
 * @param CHUNK 1024 2048 4096 8192 16384 32768 65536 default 8192 -- elements of Z per task
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param UNROLL 1 2 4 default 2 -- vectors per loop step
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint CHUNK % (VEC * UNROLL) == 0 -- a task is whole loop steps
 * @constraint CHUNK * (SA + SB + SC) <= L2 -- a task's slices of X, Y and Z fit in L2
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M * N, CHUNK) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * The arrays are dense, so the kernel sees them as flat vectors of M*N
 * elements; task t sums elements t*CHUNK .. t*CHUNK+CHUNK-1 (fewer at the
 * end). Z may be X (the residual add): every element is read before it is
 * written and no element is read after another task could write it, so
 * nothing here is declared restrict. The tail uses partial loads/stores, so
 * nothing past element M*N-1 is touched. For bias a task's elements are
 * cut where rows end: each piece adds the columns of Y it spans, so Y is
 * read only inside its N elements.
 */

/* z[k] = x[k] + y[k] for k < n; z may equal x. */
static void add_span(const TA *x, const TB *y, TC *z, int64_t n) {
  int64_t k = 0;
  for (; k + VEC * UNROLL <= n; k += VEC * UNROLL) {
    VF s[UNROLL]; /* all loads of a step before its stores */
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++)
      s[u] = VADD(VLOAD_A(x + k + u * VEC), VLOAD_B(y + k + u * VEC));
    GC_UNROLL(UNROLL)
    for (int u = 0; u < UNROLL; u++)
      VSTORE_C(z + k + u * VEC, s[u]);
  }
  for (; k < n; k += VEC) { /* fewer than UNROLL vectors, the last partial */
    int64_t m = gc_min(VEC, n - k);
    VSTOREN_C(z + k, VADD(VLOADN_A(x + k, m), VLOADN_B(y + k, m)), m);
  }
}

/* bias: z[k] = x[k] + y[(c0 + k) % N] for k < n, where x starts at
 * column c0 of its row; pieces of at most one row each go to add_span. */
static void bias_span(const TA *x, const TB *y, TC *z, int64_t c0, int64_t N, int64_t n) {
  for (int64_t k = 0; k < n;) {
    int64_t c = (c0 + k) % N, len = gc_min(N - c, n - k);
    add_span(x + k, y + c, z + k, len);
    k += len;
  }
}

/* args: X[M,N] (TA), Y[M,N] (TB; bias: [N]), Z[M,N] (TC), int64 M, N. */
GC_EXPORT void add_cpu(void **args, int64_t task) {
  const TA *X = GC_ARG(args, 0, const TA *);
  const TB *Y = GC_ARG(args, 1, const TB *);
  TC *Z = GC_ARG(args, 2, TC *);
  int64_t M = GC_ARG(args, 3, int64_t);
  int64_t N = GC_ARG(args, 4, int64_t);

  int64_t k0 = task * CHUNK;
  int64_t n = gc_min(CHUNK, M * N - k0);
  if (n <= 0) return;
#if GC_OP_BIAS
  bias_span(X + k0, Y, Z + k0, k0 % N, N, n);
#else
  add_span(X + k0, Y + k0, Z + k0, n);
#endif
}
