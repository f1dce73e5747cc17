/* gemm_swiglu_wgmma_coop.cu — Hopper (sm_90a) gate/up GEMM with the SwiGLU
 * epilogue, cooperative: C[M,N] = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), W[2N,K] = gate rows
 * 0..N-1, up rows N..2N-1; f16 or bf16 in and out, fp32 accumulation.
 *
 * @template gemm_swiglu_wgmma_coop
 * @op gemm_swiglu
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel gemm_swiglu_wgmma_coop
 * @param BM 128 192 default 192 -- block tile rows: BM/64 warpgroups of 64 rows
 * @param BN 128 256 default 256 -- rows of W per tile, the wgmma's n: BN/2 gate and BN/2 up rows, BN/2 columns of C
 * @param STAGES 2 3 4 default 4 -- shared-memory pipeline stages of 64 K-columns each
 * @param RASTER 1 4 8 16 default 8 -- block rows walked together (L2 reuse of W tiles)
 * @param PERSIST 0 1 default 1 -- 1: at most one block per SM (132, or the device's count if smaller), each walking tiles
 * @constraint SM == 90 && ARCH_A == 1 -- wgmma exists only on sm_90a
 * @constraint WARP == 32 && MAXT >= 384 -- up to three warpgroups
 * @constraint STAGES * (BM + BN) * 128 + 1024 <= SMEM -- the pipeline fits in shared memory
 * @shmem STAGES * (BM + BN) * 128 + 1024
 * @applies K % 8 == 0 && M > 1 -- rows of A and W are whole 16-byte chunks (cp.async); M = 1 is the GEMV's
 * @grid min(cdiv(M, BM) * cdiv(N, BN / 2), PERSIST * 132 + (1 - PERSIST) * cdiv(M, BM) * cdiv(N, BN / 2)) 1 1
 * @block BM * 2 1 1
 * @priority 6
 *
 * gemm_wgmma_coop's kernel (see there) with gemm_swiglu_wgmma's B tile:
 * gate rows n0 .. n0+BN/2-1 of W, then up rows N+n0 .. N+n0+BN/2-1; the
 * thread holding gate column j of the accumulator also holds up column j,
 * and the epilogue writes g / (1 + e^-g) · u computed in fp32, rounded once.
 */

#define WG_CW (BM / 64)                /* warpgroups, one m64 row block each */
#define WG_T (128 * WG_CW)
#define WG_ACC (BN / 2)                /* floats per thread */
#define WG_RP (WG_T / 8)               /* rows per copy pass */
#define WG_ABYTES (BM * 128)
#define WG_SBYTES ((BM + BN) * 128)    /* bytes per stage */
#define WG_RB 128
#define BK 64

#if GC_TA == GC_BF16
#define WG_MMA(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.bf16.bf16"
#else
#define WG_MMA(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.f16.f16"
#endif

GC_DEVICE unsigned wg_saddr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* Shared-memory matrix descriptor: K-major, 128-byte (64-byte) swizzle,
 * 8-row groups 1024 (512) bytes apart (leading offset unused for these
 * layouts: 1). */
GC_DEVICE uint64_t wg_desc(unsigned s) {
  return (uint64_t)((s & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
         ((uint64_t)(8 * WG_RB >> 4) << 32) | ((uint64_t)1 << 62);
}

GC_DEVICE void wg_bar_init(unsigned b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(count) : "memory");
}
GC_DEVICE void wg_bar_arrive(unsigned b) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(b)
               : "memory");
}
/* Block until the phase of parity `par` of barrier b has completed. */
GC_DEVICE void wg_bar_wait(unsigned b, unsigned par) {
  unsigned ok;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(b), "r"(par)
                 : "memory");
  } while (!ok);
}
/* Arrive on b once every cp.async this thread issued so far has landed. */
GC_DEVICE void wg_cp_arrive(unsigned b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(b) : "memory");
}
GC_DEVICE void wg_cp16(unsigned s, const void *g, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(n)
               : "memory");
}

GC_DEVICE void wg_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
GC_DEVICE void wg_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> GC_DEVICE void wg_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulator accesses across wgmma
 * fences and waits (no instruction). */
GC_DEVICE void wg_touch(float &x) { asm volatile("" : "+f"(x)::"memory"); }

/* d[0..31] += A(64x16, descriptor a) · B(64x16, descriptor b)ᵀ */
GC_DEVICE void wg_mma_n64(float *d, uint64_t a, uint64_t b) {
  asm volatile("{\n"
               WG_MMA(64) " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "l"(a), "l"(b));
}

/* d[0..63] += A(64x16, descriptor a) · B(128x16, descriptor b)ᵀ */
GC_DEVICE void wg_mma_n128(float *d, uint64_t a, uint64_t b) {
  asm volatile("{\n"
               WG_MMA(128) " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, 1, 1, 1, 0, 0;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(a), "l"(b));
}

/* d[0..127] += A(64x16, descriptor a) · B(256x16, descriptor b)ᵀ */
GC_DEVICE void wg_mma_n256(float *d, uint64_t a, uint64_t b) {
  asm volatile("{\n"
               WG_MMA(256) " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, 1, 1, 1, 0, 0;\n"
               "}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "l"(a), "l"(b));
}

template <int NN> GC_DEVICE void wg_mma(float *d, uint64_t a, uint64_t b);
template <> GC_DEVICE void wg_mma<64>(float *d, uint64_t a, uint64_t b) { wg_mma_n64(d, a, b); }
template <> GC_DEVICE void wg_mma<128>(float *d, uint64_t a, uint64_t b) { wg_mma_n128(d, a, b); }
template <> GC_DEVICE void wg_mma<256>(float *d, uint64_t a, uint64_t b) { wg_mma_n256(d, a, b); }

/* Rows of an R-row tile at row r0 (of nr) that copy row rr, rr + RP, ...
 * finds inside the matrix. */
GC_DEVICE int wg_rows_rp(int64_t r0, int64_t nr, int rr, int R) {
  return (int)gc_max64(0, gc_min64((R - rr + WG_RP - 1) / WG_RP, gc_cdiv(nr - r0 - rr, WG_RP)));
}

/* C[m][n], C[m][n+1] := x, y (each only inside the matrix). */
GC_DEVICE void wg_store2(TC *C, int64_t M, int64_t N, int64_t m, int64_t n, float x, float y) {
  if (m >= M || n >= N)
    return;
  TC *p = C + m * N + n;
  if (N % 2 == 0) { /* n is even: an aligned pair */
    float v[2] = {x, y};
    gc_stv<2>(p, v);
  } else {
    gc_st(p, 0, x);
    if (n + 1 < N)
      gc_st(p, 1, y);
  }
}

/* Tile t of the grouped raster: RASTER block rows at a time, column by
 * column (consecutive tiles share B tiles in L2). */
GC_DEVICE void wg_tile(int64_t t, int64_t nbm, int64_t nbn, int64_t *m0, int64_t *n0) {
  const int64_t gsz = (int64_t)RASTER * nbn, first = t / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  *m0 = (first + t % gsz % rows) * BM;
  *n0 = t % gsz / rows * (BN / 2);
}


/* Copies of one stage into shared address sa by thread p: A rows p/8 +
 * RP·i (i < BM/RP, exact) from pa on; tile rows r = p/8 + RP·j of W: gate
 * row n0 + r (r < BN/2), else up row N + n0 + r - BN/2, from column k. */
GC_DEVICE void wc_load(unsigned sa, const TA *pa, int na, const TA *W, int64_t n0, int64_t N,
                       int64_t k, int64_t K, const TA *A, unsigned off, int rr) {
  const bool kok = k < K;
  GC_UNROLL(1) /* rolled: registers are short here (accumulators) */
  for (int i = 0; i < BM / WG_RP; i++) {
    bool ok = kok && i < na;
    wg_cp16(sa + off + i * WG_RP * 128, ok ? pa : A, ok ? 16 : 0);
    pa += WG_RP * K;
  }
  GC_UNROLL(1)
  for (int j = 0; j < (BN + WG_RP - 1) / WG_RP; j++) {
    const int r = rr + j * WG_RP;
    if (r < BN) {
      const int up = r >= BN / 2, rn = r - up * (BN / 2);
      bool ok = kok && n0 + rn < N;
      wg_cp16(sa + WG_ABYTES + off + j * WG_RP * 128, ok ? W + (up * N + n0 + rn) * K + k : A,
              ok ? 16 : 0);
    }
  }
}

/* silu(g) · u in fp32. */
GC_DEVICE float wc_swiglu(float g, float u) { return g / (1.0f + gc_exp(-g)) * u; }

/* Fragment pairs of one thread to C: p is its first element (row r,
 * column c), rows r and r+8 exist when rm > 0 and rm > 8, columns c + 8j
 * (and c + 8j + 1) when cm > 8j (cm > 8j + 1). One base pointer and
 * immediate offsets: registers are short here. */
GC_DEVICE void wc_store_rows(TC *p, int64_t N, int64_t rm, int64_t cm, const float *acc) {
  GC_UNROLL(2)
  for (int h = 0; h < 2; h++) {
    if (rm > 8 * h) {
      TC *q = p + 8 * h * N;
      GC_UNROLL(BN / 16)
      for (int j = 0; j < BN / 16; j++) {
        if (cm > 8 * j) {
          const int g = 4 * j + 2 * h, u = g + 4 * (BN / 16); /* gate, up fragments */
          float x = wc_swiglu(acc[g], acc[u]), y = wc_swiglu(acc[g + 1], acc[u + 1]);
          if (N % 2 == 0) /* c is even: the pair is aligned and inside */
            *(uint32_t *)(q + 8 * j) = gc_pack2(TC(), x, y);
          else {
            gc_st(q, 8 * j, x);
            if (cm > 8 * j + 1)
              gc_st(q, 8 * j + 1, y);
          }
        }
      }
    }
  }
}

/* wg_tile in 32-bit arithmetic (fewer registers next to the accumulators). */
GC_DEVICE void wc_tile(int t, int nbm, int nbn, int *m0, int *n0) {
  const int gsz = RASTER * nbn, first = t / gsz * RASTER, rows = min(nbm - first, RASTER);
  *m0 = (first + t % gsz % rows) * BM;
  *n0 = t % gsz / rows * (BN / 2);
}

GC_KERNEL_BOUNDS(WG_T)
void gemm_swiglu_wgmma_coop(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {
  GC_SHARED uint64_t bars[2 * STAGES]; /* full[0..S-1], empty[0..S-1] */
  const int nbm = (int)gc_cdiv(M, BM), nbn = (int)gc_cdiv(N, BN / 2), tiles = nbm * nbn;
  if (tiles <= 0)
    return;
  int t0 = (int)gc_bid(), tstep = (int)gridDim.x;
  if (PERSIST) {
    unsigned nsm;
    asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
    tstep = min(tstep, (int)nsm);
    if (t0 >= tstep)
      return;
  }
  const int tid = gc_tid();
  const unsigned s0 = (wg_saddr(gc_dyn_shared()) + 1023u) & ~1023u;
  const unsigned full = wg_saddr(bars), empty = full + 8 * STAGES;
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) {
      wg_bar_init(full + 8 * s, WG_T);
      wg_bar_init(empty + 8 * s, WG_T);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  gc_barrier();

  const int kt_n = (int)gc_cdiv(K, BK);
  /* stage L of this block: k-block L % kt_n of its (L / kt_n)-th tile; all
   * of its copy addresses are recomputed per stage, so that nothing but
   * the accumulators stays live across the loop */
  const int total = (tiles - t0 + tstep - 1) / tstep * kt_n;
  const int rr = tid >> 3;
  const unsigned off = (unsigned)(rr * 128 + (((tid & 7) ^ (rr & 7)) << 4));
  auto issue = [&](int L) {
    const int lk = L % kt_n, c8 = (tid & 7) * 8;
    int m0, n0;
    wc_tile(t0 + L / kt_n * tstep, nbm, nbn, &m0, &n0);
    const int64_t k = (int64_t)lk * BK + c8;
    const int sl = L % STAGES;
    wc_load(s0 + sl * WG_SBYTES, A + (m0 + rr) * K + k, wg_rows_rp(m0, M, rr, BM),
            (const TA *)B, n0, N, k, K, A, off, rr);
    wg_cp_arrive(full + 8 * sl);
  };
  for (int L = 0; L < STAGES && L < total; L++) /* every slot starts free */
    issue(L);

  float acc[WG_ACC];
  int it = 0;
  for (int tile = t0; tile < tiles; tile += tstep) {
    GC_UNROLL(WG_ACC)
    for (int j = 0; j < WG_ACC; j++)
      acc[j] = 0.0f;
    for (int kt = 0; kt < kt_n; kt++, it++) {
      const int s = it % STAGES;
      wg_bar_wait(full + 8 * s, (unsigned)((it / STAGES) & 1));
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      const unsigned sa = s0 + s * WG_SBYTES;
      const uint64_t da = wg_desc(sa + (tid >> 7) * 64 * 128), db = wg_desc(sa + WG_ABYTES);
      GC_UNROLL(WG_ACC)
      for (int j = 0; j < WG_ACC; j++)
        wg_touch(acc[j]);
      wg_fence();
      GC_UNROLL(4)
      for (int kk = 0; kk < 4; kk++)
        wg_mma<BN>(acc, da + 2 * kk, db + 2 * kk);
      wg_commit();
      GC_UNROLL(WG_ACC)
      for (int j = 0; j < WG_ACC; j++)
        wg_touch(acc[j]);
      wg_wait<1>();
      if (it > 0) { /* stage it-1 is done here; once everywhere, refill it */
        const int sp = (it - 1) % STAGES;
        wg_bar_arrive(empty + 8 * sp);
        if (it - 1 + STAGES < total) {
          wg_bar_wait(empty + 8 * sp, (unsigned)(((it - 1) / STAGES) & 1));
          issue(it - 1 + STAGES);
        }
      }
    }
    wg_wait<0>();
    GC_UNROLL(WG_ACC)
    for (int j = 0; j < WG_ACC; j++)
      wg_touch(acc[j]);
    int m0, n0;
    wc_tile(tile, nbm, nbn, &m0, &n0);
    const int lane = tid & 31;
    const int64_t mr = m0 + (tid >> 7) * 64 + ((tid >> 5) & 3) * 16 + (lane >> 2);
    const int64_t cn = n0 + 2 * (lane & 3); /* this thread's first column */
    wc_store_rows(C + mr * N + cn, N, M - mr, N - cn, acc);
  }
}
