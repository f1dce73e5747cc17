/* gemm_q.c — blocked CPU GEMM with B in a block format (the prefill path):
 * C[M,N] = A[M,K] · B[N,K]ᵀ, B's rows blocks of Q8_0, Q4_0, Q4_K, Q5_K or
 * Q6_K (base/quant.h), fp32 accumulation, any M.
 *
 * @template gemm_q_cpu
 * @op gemm gemm_add gemm_swiglu rmsnorm_gemm rmsnorm_gemm_swiglu
 * @backend cpu
 * @dtypes f32:q8_0:f32 f32:q4_0:f32 f32:q4_k:f32 f32:q5_k:f32 f32:q6_k:f32 f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16
 * @kernel gemm_q_cpu
 * @param MR 2 4 6 8 default 6 -- micro-tile rows (A broadcasts per k)
 * @param NR 16 32 48 default 32 -- micro-tile columns, a multiple of VEC
 * @param MC 48 96 192 256 default 96 -- rows of C per task
 * @param NC 64 128 256 512 default 128 -- columns of C per task
 * @param KC 256 512 default 256 -- K chunk dequantized and packed at a time (whole blocks of every format)
 * @param VEC 8 16 default 16 -- fp32 lanes per vector
 * @param THREADS 0 1 2 4 8 16 32 64 default 0 -- worker threads, 0 = all cores
 * @constraint VEC * 4 <= VBYTES -- the target has registers this wide
 * @constraint NR % VEC == 0 -- a micro-tile row is whole vectors
 * @constraint MC % MR == 0 -- a block is whole micro-tiles
 * @constraint NC % NR == 0 -- a block is whole micro-tiles
 * @constraint MR * (NR / VEC) + NR / VEC + 1 <= 16 + 16 * (VBYTES >= 64) -- accumulators, B vectors and a broadcast stay in registers
 * @constraint KC * NR * 4 <= 2 * L1 -- the packed B micro-panel stays near L1
 * @constraint (MC * KC + KC * NR + 2 * MC * NC + KC) * 4 <= 4194304 -- fp32 scratch of a task on the stack (16 MiB per worker), at most 4 MiB
 * @constraint THREADS <= NCPU -- no more workers than cores
 * @grid cdiv(M,MC)*cdiv(N,NC) 1 1
 * @block THREADS 1 1
 * @priority 1
 *
 * gemm_cpu's blocking with the B panels dequantized as they are packed:
 * task t computes the MC×NC block of C at block row t / cdiv(N,NC), block
 * column t % cdiv(N,NC). For each KC-wide chunk of K it packs the block's A
 * rows into fp32 micro-panels (normalised by NORM's 1/rms and norm weight),
 * then for each NR-wide micro-panel of the block's columns dequantizes the
 * KC/QK blocks of each of its rows of B (GC_QDEQUANT: base/quant.h's exact
 * values, the reference's), stores them transposed into an fp32 panel [KC][NR]
 * and runs the MR×NR register micro-kernel against every A micro-panel.
 * With PAIR = 2 (the SwiGLU pair) the block's columns come twice, gate rows
 * then up rows of W, into an fp32 block of 2·NC columns, and the store
 * writes silu(gate)·up. Partial sums live in the fp32 block on the stack
 * and go to C (STORE_GEMM: set, or added for gemm_add) once K is done.
 * Packing zero-pads rows past M and N, so the micro-kernel sees no edge.
 */

#ifndef PAIR
#define PAIR (GC_OP_GEMM_SWIGLU || GC_OP_RMSNORM_GEMM_SWIGLU ? 2 : 1)
#endif
#ifndef NORM
#define NORM (GC_OP_RMSNORM_GEMM || GC_OP_RMSNORM_GEMM_SWIGLU)
#endif
#define NV (NR / VEC)      /* vectors per micro-tile row */
#define TM (MC / MR)       /* micro-tiles per block, down */
#define PNC (PAIR * NC)    /* fp32 columns of the block: gate then up */

/* ap[MR][KC] := fp32 of a[i][0..kc-1] (times w[0..kc-1] and inv[i] with
 * NORM) for rows i < mv, zero rows after. */
static void gq_pack_a(const TA *a, int64_t lda, int64_t mv, int64_t kc, const TN *w,
                      const float *inv, float *ap) {
  for (int64_t i = 0; i < MR; i++) {
    float *d = ap + i * KC;
    if (i >= mv) {
      memset(d, 0, (size_t)kc * sizeof *d);
      continue;
    }
    const TA *s = a + i * lda;
    for (int64_t k = 0; k < kc; k += VEC) { /* kc is whole blocks: whole vectors */
      VF v = VLOAD_A(s + k);
      if (NORM)
        v = VMUL(VMUL(v, VLOAD_N(w + k)), VSET1(inv[i]));
      VSTOREF(d + k, v);
    }
  }
}

/* bp[kc][NR] := the dequantized rows rows[g] (g < nv; zero columns after),
 * elements kb·QK .. of each, transposed. tmp: KC floats. */
static void gq_pack_b(const TB *const rows[NR], int64_t nv, int64_t kb, int64_t kc, float *tmp,
                      float *bp) {
  for (int64_t g = 0; g < NR; g++) {
    if (g >= nv) {
      for (int64_t k = 0; k < kc; k++)
        bp[k * NR + g] = 0.0f;
      continue;
    }
    for (int64_t b = 0; b < kc / GC_QK; b++)
      GC_QDEQUANT(rows[g] + (kb + b) * GC_QBYTES, tmp + b * GC_QK);
    for (int64_t k = 0; k < kc; k++)
      bp[k * NR + g] = tmp[k];
  }
}

/* acc[i][v] += a[i*KC] * b[v*VEC .. v*VEC+VEC-1]: one k of the micro-kernel. */
GC_INLINE void gq_step(VF acc[MR][NV], const float *a, const float *b) {
  VF bv[NV];
  GC_UNROLL(NV)
  for (int v = 0; v < NV; v++)
    bv[v] = VLOADF(b + v * VEC);
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++) {
    VF ai = VSET1(a[i * KC]);
    GC_UNROLL(NV)
    for (int v = 0; v < NV; v++)
      acc[i][v] = VFMA(ai, bv[v], acc[i][v]);
  }
}

/* c[MR][NR] := (accumulate ? c : 0) + ap[MR][0..kc-1] · bp[0..kc-1][NR]. */
static void gq_micro(int64_t kc, const float *restrict ap, const float *restrict bp,
                     float *restrict c, int accumulate) {
  VF acc[MR][NV];
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++)
    GC_UNROLL(NV)
    for (int v = 0; v < NV; v++)
      acc[i][v] = VZERO();
  for (int64_t k = 0; k < kc; k++)
    gq_step(acc, ap + k, bp + k * NR);
  GC_UNROLL(MR)
  for (int i = 0; i < MR; i++)
    GC_UNROLL(NV)
    for (int v = 0; v < NV; v++) {
      float *p = c + i * NR + v * VEC;
      VSTOREF(p, accumulate ? VADD(acc[i][v], VLOADF(p)) : acc[i][v]);
    }
}

/* Element (i, col) of the tile-major fp32 block cacc (micro-tile (jt, it)
 * at cacc[(jt*TM + it)*MR*NR], each row-major [MR][NR]). */
GC_INLINE float gq_at(const float *cacc, int64_t i, int64_t col) {
  return cacc[((col / NR * TM + i / MR) * MR + i % MR) * NR + col % NR];
}

/* args: A[M,K] (TA), B[PAIR·N,K] (blocks), C[M,N] (TC), [norm[K] (A's
 * dtype),] int64 M, N, K[, float eps]. */
GC_EXPORT void gemm_q_cpu(void **args, int64_t task) {
  const TA *A = GC_ARG(args, 0, const TA *);
  const TB *B = GC_ARG(args, 1, const TB *);
  TC *C = GC_ARG(args, 2, TC *);
  const TN *wn = NORM ? GC_ARG(args, 3, const TN *) : 0;
  int64_t M = GC_ARG(args, 3 + NORM, int64_t);
  int64_t N = GC_ARG(args, 4 + NORM, int64_t);
  int64_t K = GC_ARG(args, 5 + NORM, int64_t);
  float eps = NORM ? GC_ARG(args, 7, float) : 0.0f;

  int64_t nbn = gc_cdiv(N, NC);
  int64_t i0 = task / nbn * MC, j0 = task % nbn * NC;
  int64_t mb = gc_min(MC, M - i0), nb = gc_min(NC, N - j0);
  if (mb <= 0 || nb <= 0 || K % GC_QK)
    return;
  const int64_t rb = K / GC_QK * GC_QBYTES; /* bytes per row of B */
  const int64_t ncp = gc_cdiv(nb, NR) * NR; /* block columns rounded to panels: up's start */

  float ap[MC * KC] GC_ALIGN64;    /* [TM][MR][KC]: A block, this K chunk */
  float bp[KC * NR] GC_ALIGN64;    /* [KC][NR]: one B micro-panel, transposed */
  float cacc[MC * PNC] GC_ALIGN64; /* [PNC/NR][TM][MR][NR]: the C block (gate, up), fp32 */
  float tmp[KC] GC_ALIGN64;        /* one row's dequantized chunk */
  float inv[MC];                   /* NORM: 1/rms of the block's rows */
  for (int64_t i = 0; i < mb; i++) {
    inv[i] = 1.0f;
    if (NORM)
      GC_ROW_INV_RMS(A + (i0 + i) * K, K, eps, inv[i]);
  }

  for (int64_t k0 = 0; k0 == 0 || k0 < K; k0 += KC) {
    int64_t kc = gc_min(KC, K - k0);
    for (int64_t i = 0; i < mb; i += MR)
      gq_pack_a(A + (i0 + i) * K + k0, K, gc_min(MR, mb - i), kc, NORM ? wn + k0 : wn, inv + i,
                ap + i * KC);
    for (int half = 0; half < PAIR; half++)
      for (int64_t j = 0; j < nb; j += NR) {
        const TB *rows[NR];
        int64_t nv = gc_min(NR, nb - j);
        for (int64_t g = 0; g < nv; g++)
          rows[g] = B + (half * N + j0 + j + g) * rb;
        gq_pack_b(rows, nv, k0 / GC_QK, kc, tmp, bp);
        int64_t col = half * ncp + j; /* the panel's first column in cacc */
        for (int64_t i = 0; i < mb; i += MR)
          gq_micro(kc, ap + i * KC, bp, cacc + (col / NR * TM + i / MR) * MR * NR, k0 > 0);
      }
  }
  for (int64_t i = 0; i < mb; i++)
    for (int64_t j = 0; j < nb; j++) {
      float v = gq_at(cacc, i, j);
      if (PAIR == 2)
        v = GC_SILU_MUL(v, gq_at(cacc, i, ncp + j));
      STORE_GEMM(C + (i0 + i) * N + j0, j, v);
    }
}
