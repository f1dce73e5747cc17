/* embed.cu — GPU embedding gather: row tokens[i] of the table T[K,N] becomes
 * row i of Z[M,N], converted to Z's dtype; an id outside [0,K) gives zeros.
 *
 * @template embed_gpu
 * @op embed
 * @backend gpu
 * @dtypes f32 f16 bf16 f32:f16:f32 f32:bf16:f32
 * @kernel embed_gpu
 * @param THREADS 64 128 256 512 1024 default 256 -- threads per block
 * @param VEC 1 2 4 8 default 8 -- consecutive elements per thread per access
 * @param ROWS 1 2 4 8 default 2 -- tokens (rows of Z) per block
 * @constraint THREADS % WARP == 0 && THREADS <= MAXT -- whole warps, a legal block
 * @constraint VEC * SB <= 32 && VEC * SC <= 32 -- at most two 16-byte accesses per vector
 * @grid cdiv(N, THREADS * VEC) * cdiv(M, ROWS) 1 1
 * @block THREADS 1 1
 * @priority 1
 * @pdl -- waits for the kernel before it first thing
 *
 * Block b copies columns c*THREADS*VEC .. +THREADS*VEC-1 (c = b % nc, nc =
 * cdiv(N, THREADS*VEC)) of rows r*ROWS .. r*ROWS+ROWS-1 (r = b / nc), fewer
 * at the ends; thread t owns VEC consecutive columns of each row. Argument
 * A is unused (by convention A = C). When T and Z share a dtype the copy
 * moves bits (exact, NaN payloads too); otherwise each element is widened
 * (f16/bf16 to f32: exact). Vector accesses are used when a row is a whole
 * number of vectors (N % VEC == 0, so every row start stays aligned) and the
 * thread's vector lies inside the row; else element by element.
 */

/* z[0..VEC-1] := t[0..VEC-1] (t may be null: zeros); whole aligned vector. */
GC_DEVICE void embed_vec(const TB *t, TC *z) {
  float f[VEC];
#if GC_TB == GC_TC && VEC * SC >= 4
  { /* move raw bits, 16 bytes (or the vector) at a time */
    const int CH = VEC * SC < 16 ? VEC * SC : 16;
    typedef typename gc_raw_t<CH>::T R;
    R w[VEC * SC / CH];
    GC_UNROLL(VEC * SC / CH)
    for (int i = 0; i < VEC * SC / CH; i++) {
      if (t) {
        w[i] = reinterpret_cast<const R *>(t)[i];
      } else {
        for (int k = 0; k < CH / 4; k++)
          w[i].w[k] = 0u;
      }
    }
    GC_UNROLL(VEC * SC / CH)
    for (int i = 0; i < VEC * SC / CH; i++)
      reinterpret_cast<R *>(z)[i] = w[i];
    return;
  }
#endif
  if (t) {
    gc_ldv<VEC>(t, f);
  } else {
    GC_UNROLL(VEC)
    for (int i = 0; i < VEC; i++)
      f[i] = 0.0f;
  }
  gc_stv<VEC>(z, f);
}

GC_KERNEL_BOUNDS(THREADS)
void embed_gpu(const int32_t *tokens, const TB *T, TC *Z, int64_t M, int64_t N, int64_t K) {
  gc_pdl_wait(); /* @pdl: the kernel before it has completed */
  gc_pdl_launch();
  int64_t nc = gc_cdiv(N, THREADS * VEC);
  if (nc <= 0)
    return;
  int64_t i0 = gc_bid() / nc * ROWS, j = (gc_bid() % nc * THREADS + gc_tid()) * VEC;
  int vec_ok = N % VEC == 0 && j + VEC <= N;
  GC_UNROLL(ROWS)
  for (int r = 0; r < ROWS; r++) {
    int64_t i = i0 + r;
    if (i >= M)
      break;
    int64_t id = tokens[i];
    const TB *t = id >= 0 && id < K ? T + id * N + j : (const TB *)0;
    TC *z = Z + i * N + j;
    if (vec_ok) {
      embed_vec(t, z);
    } else {
      for (int64_t e = 0; e < VEC && j + e < N; e++)
        STORE_C(z, e, t ? LOAD_B(t, e) : 0.0f);
    }
  }
}
