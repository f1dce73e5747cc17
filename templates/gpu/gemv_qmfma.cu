/* gemv_qmfma.cu — AMD matrix-core GEMV with B in a block format (the
 * quantized decode path: M = 1 .. 16 rows of A; MFMA, CDNA: gfx90a,
 * gfx942), A and C f16 or bf16, B's rows blocks of Q8_0, Q4_0, Q4_K, Q5_K
 * or Q6_K (base/quant.h), dequantized exactly into MFMA operands, fp32
 * accumulation: C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add: C += A·Bᵀ), the
 * gate/up pair with the SwiGLU epilogue (gemm_swiglu: W[2N,K]) and both
 * with A's rows RMS-normalised on the way (rmsnorm_*). The AMD counterpart
 * of gemv_qmma.cu (same ops, arguments, epilogues, applicability and
 * exactness). (Not yet timed on an AMD GPU.)
 *
 * @template gemv_qmfma
 * @op gemm gemm_add rmsnorm_gemm gemm_swiglu rmsnorm_gemm_swiglu
 * @backend hip
 * @dtypes f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16
 * @kernel gemv_qmfma
 * @param WARPS 2 4 8 16 default 8 -- waves per block
 * @param KS 1 2 4 8 default 4 -- waves that split one row tile's K range (block-level split-K)
 * @param RT 1 2 default 1 -- 16-row tiles of B per wave (gemm_swiglu: RT gate and RT up tiles)
 * @param UNR 2 4 8 16 default 8 -- units (32 elements) of each row a step stages (256-element blocks: UNR 8 or 16, whole blocks)
 * @param OCC 1 2 default 1 -- blocks per CU the register budget is planned for (VGPRS / ceil(OCC * WARPS / 4) per lane: OCC * WARPS waves over 4 SIMDs)
 * @defaults gemm_swiglu rmsnorm_gemm_swiglu WARPS=4 -- the pair stages twice the rows (Q8_0: 72 KiB of LDS at 8 waves)
 * @constraint MFMA && WARP == 64 -- MFMA targets (CDNA: gfx90a, gfx942), wave64
 * @constraint WARPS % KS == 0 -- waves form whole row groups
 * @constraint WARPS * WARP <= MAXT -- a legal block
 * @constraint OCC * WARPS * WARP <= 2048 -- that many blocks can be resident (8 waves a SIMD)
 * @constraint SB < 100 || UNR % 8 == 0 -- a step of a 256-element format is whole blocks (its scales lead the block)
 * @constraint cdiv(PAIR * RT * 16 * (cdiv(UNR * SB / (1 + 7 * (SB > 100)), 16) + 1), WARP) <= 16 -- bounded 16-byte loads of B in flight per lane (the staging registers)
 * @constraint OCC * WARPS * max(PAIR * RT * 16 * ((cdiv(UNR * SB / (1 + 7 * (SB > 100)), 16) + 1) * 16 + (SB > 100) * UNR * 8), (KS > 1) * (4 * PAIR * RT + 1) * 4 * WARP) <= SMEM -- OCC blocks' staged steps (and split-K partial sums) fit one CU's LDS
 * @constraint 8 * cdiv(PAIR * RT * 16 * (cdiv(UNR * SB / (1 + 7 * (SB > 100)), 16) + 1), WARP) + 16 * PAIR * RT + 24 * NORM + 56 <= min(256, VGPRS / cdiv(OCC * WARPS, 4)) -- estimated VGPRs (a staged chunk's 4 and its address, a tile's accumulators and two units' words and fresh accumulators, the norm's split, A's operands and addresses; fitted to clang-19's counts) fit the budget
 * @shmem WARPS * max(PAIR * RT * 16 * ((cdiv(UNR * SB / (1 + 7 * (SB > 100)), 16) + 1) * 16 + (SB > 100) * UNR * 8), (KS > 1) * (4 * PAIR * RT + 1) * 4 * WARP)
 * @applies M >= 1 && M <= 16 -- decode steps of up to 16 rows: one MFMA's 16 rows
 * @grid cdiv(N, WARPS / KS * 16 * RT) 1 1
 * @block WARPS * WARP 1 1
 * @priority 3
 * @pdl -- waits for the kernel before it (gc_pdl_wait, a no-op on HIP) before it reads or writes anything
 *
 * Its @priority 3 makes it the untuned default for B in a block format at
 * M = 1 .. 16 on MFMA targets, over gemm_q_mfma's 2 (M > 1: a prefill GEMM
 * that pads the rows to its BM tile and dequantizes each B tile into LDS
 * for them) and gemv_q_gpu's 1 (SIMT, any M). The ranking is gemv_qmma's
 * on NVIDIA (3 over gemm_q_mma's 2 and gemv_q_gpu's 1), measured there on
 * an H200 (faster than gemv_q_gpu on most decode shapes); on AMD it is
 * unmeasured and rests on the work per weight, both kernels staging B
 * through LDS with 16-byte loads: gemv_q_gpu spends VALU operations on
 * every weight for each row of A (a conversion and an fp32 FMA; Q4_K/Q5_K
 * y = d·q − mn first), this kernel about one for its level (v_perm and
 * v_pk_add_f16 per two, f16) and MFMAs whose count does not grow with M
 * up to 16, plus a few scale FMAs per unit and lane. gemv_mfma's 4 is for
 * f16/bf16 B: the two never serve the same problem.
 *
 * Operands: the 16x16x16 MFMA's A operand (its 16 rows) is up to 16 rows
 * of A (the sequences; rows past M are zeros, not stored) and its B
 * operand (its 16 columns) is a tile of 16 rows of B (the weights). The
 * accumulator registers of lane l all hold column GC_MFMA_D_COL(16, l) =
 * l % 16, the row of B whose operand the lane supplies itself
 * (GC_MFMA_AB_ROW(16, l) = l % 16), so a lane applies the scales of one row
 * of B, as gemm_q_mfma does. (gemv_mfma puts B in the A operand; there a
 * lane's four registers are four rows of B, whose scales would take
 * shuffles every unit.) Register e of lane l is row GC_MFMA_D_ROW(16, l,
 * e) = 4·(l / 16) + e of A.
 *
 * Units and lanes: K is cut into units of 32 elements (the prelude's
 * gc-quant units); step s of K slice k covers units (s·KS + k)·UNR + u, u
 * < UNR. Lane l is row r = GC_MFMA_AB_ROW(16, l) of each tile and k group
 * q = GC_MFMA_AB_K(16, 4, l, 0) / 4 = l / 16 (operand slots 4q .. 4q+3). It
 * takes part q of every unit (GCQ_LOAD/GCQ_DECODE: elements 4q..4q+3 and
 * 16+4q..16+4q+3); MFMA 0 of a unit gets the first four at slots 4q + v,
 * MFMA 1 the last four, on both operands (A's row r at the same elements),
 * so MFMA 0 is the unit's first 16 elements, MFMA 1 its last 16, and every
 * operand is the lane's own words, with no shuffles.
 *
 * Loads: LDS staging. A lane's part of a unit is a few bytes at 2-byte
 * alignment (Q4_0, Q8_0 and Q6_K blocks are 18, 34 and 210 bytes), so
 * loading the parts from global memory takes 3-10 16-bit loads per unit,
 * and a wave's load instruction costs the same issue and address slots
 * whether it moves 2 or 16 bytes a lane: the loads, not memory, would
 * bound the kernel (as measured for such loads on an H200: gemv_qmma.cu).
 * CDNA2/3 have no 16-byte global-to-LDS copy, so each wave loads its
 * rows' bytes of a step (UNR units: whole blocks, one contiguous range a
 * row) as the 16-byte aligned chunks covering them into registers
 * (global_load_dwordx4; the next step's in flight while a step is
 * decoded), stores them into its own LDS slot at the range's offset mod 16
 * (every field keeps its alignment), and its lanes read their parts from
 * there (GCQ_LOAD on an LDS address). Chunks past a row's range are not
 * loaded; a chunk that would run past the end of B is read by 16-bit words
 * up to it, so no byte outside B is read. A's 8-byte runs come straight
 * from global memory (small and cached; every row group reads them).
 *
 * The 256-element formats' scale fields (6-bit scales and mins packed in
 * 12 bytes, Q6_K's int8 scales) are decoded once per row and unit of a
 * step, each lane taking two or more of them, into a table after the
 * staged chunks (d, mn for Q4_K/Q5_K; d0, d1 for Q6_K), not by each of a
 * row's 4 lanes at every unit. The units of a step then run as a loop
 * (its index a run-time value, wave-uniform: the wave index is read from
 * the first lane, so the steps and units are counted on the scalar unit)
 * two at a time, both units' loads issued before their math: unrolled
 * further, the units' operands stay live together (spills on the norm and
 * pair ops), and a scheduling barrier that lets only loads cross, which
 * would bound that, makes comgr's LLVM 15 run past gcore-gen's compile
 * timeout.
 *
 * Exactness (gemm_q_mfma's and gemv_qmma's scheme): the B operand holds
 * the integer levels q, exact in f16 and in bf16 (|q| <= 128 has at most 8
 * significant bits; gfx90a has the bf16 _1k MFMAs, so every format is
 * served in bf16 on both targets); a unit's MFMAs go into a fresh
 * accumulator, then scaled into the output's: acc += d·(a·q), and for the
 * formats with a min (Q4_K, Q5_K) acc −= mn·Σa, Σa from MFMAs of the same A
 * operands against ones (register e of every lane: Σa of row D_ROW(l, e)).
 * The products a·q are exact and summed in fp32, so the result is A·Bᵀ
 * with B's exact values up to fp32 rounding (d·q is never rounded to 16
 * bits). Q6_K's halves have their own scales (d0, d1): MFMA 0's
 * accumulator is scaled by d0 before MFMA 1's fresh one by d1.
 *
 * Levels to 16 bits: f16: two biased level bytes b (< 256) become the f16
 * pair (1024 + b0, 1024 + b1) by one byte permute (0x6400 | b), then
 * 1024 + bias is subtracted as f16x2 (exact: integers below 2048). bf16
 * (no packed bf16 arithmetic on CDNA2/3): the level in fp32 (the prelude's
 * GCQ_LEVEL), whose upper half is its bf16 (an integer of at most 8
 * significant bits: the lower half is zero).
 *
 * rmsnorm_*: as gemv_mfma (x·w computed in fp32 and split into parts of
 * A's dtype, each multiplied by the same levels into the unit's
 * accumulator; Σa of every part for the min; bf16's three parts are the
 * truncated upper halves, so they hold all 24 bits of x·w; f16's two are
 * rounded, and an x·w past 65504 would overflow, as in gemv_mfma), the
 * lane's sums of squares reduced over its row's 4 k groups and the KS
 * waves, the scale of row D_ROW(l, e) taken from lane D_ROW(l, e) (k
 * group 0 of that row). Reduction and epilogue are gemv_mfma's: with KS > 1 each wave puts
 * its partial sums in its own LDS slot (its staging done) and the wave of
 * slice 0 sums them; C is written once, by one thread (gemm_add reads it
 * once first; the pair stores silu(gate)·up in fp32, rounded once). Rows
 * of B past N are read as row N-1 and not stored. K is a whole number of
 * blocks (a problem check; the kernel returns otherwise).
 *
 * Declared @pdl as gemv_mfma is: HIP launches on a stream never overlap,
 * so the wait and launch points are no-ops.
 */

#define QF_RG (WARPS / KS)                                     /* row groups per block */
#define QF_RB (QF_RG * 16 * RT)                                /* outputs (rows of B) per block */
#define QF_NACC (4 * PAIR * RT)                                /* fp32 accumulators per lane */
#define QF_SPLIT (NORM ? (GC_TA == GC_BF16 ? 3 : 2) : 1)       /* operands x·w is split into */
#define QF_NR (PAIR * RT * 16)                                 /* rows of B per wave */
#define QF_SC ((UNR / GC_QUNITS * GC_QBYTES + 15) / 16 + 1)    /* 16-byte chunks of a row's step at any even address */
#define QF_CPL ((QF_NR * QF_SC + GC_WARP - 1) / GC_WARP)       /* chunks per lane and step */
#define QF_TAB ((GC_QUNITS > 1) * QF_NR * UNR * 8)             /* bytes of its scale table */
#define QF_SLOT (QF_NR * QF_SC * 16 + QF_TAB)                  /* bytes of a wave's staged step */
#define QF_RED ((KS > 1) * (QF_NACC + 1) * 4 * GC_WARP)        /* bytes of its partial sums */
#define QF_WAVE (QF_SLOT > QF_RED ? QF_SLOT : QF_RED)          /* bytes of LDS per wave */

#if !GC_MFMA
#error "gemv_qmfma needs an MFMA target (gfx90a, gfx940, gfx941, gfx942)"
#endif
#if SA != 2
#error "gemv_qmfma takes 16-bit activations (f16, bf16)"
#endif

typedef typename gc_mfma<GC_TA, 16>::acc_t qf_acc_t;
typedef _Float16 qf_half2_t __attribute__((ext_vector_type(2)));
typedef float qf_f2_t __attribute__((ext_vector_type(2)));

/* The four biased level bytes of w (GCQ_DECODE's lo or hi) as four levels
 * in A's dtype: an MFMA operand, exactly (see the opening comment). f16:
 * v_perm_b32 puts bytes 0, 1 (2, 3) of w under the exponent byte 0x64
 * (selector 4: byte 0 of the first operand; 0-3 pick the second's). */
GC_DEVICE gc_short4_t qf_levels(uint32_t w) {
#if GC_TA == GC_BF16
  return __builtin_bit_cast(gc_short4_t,
                            gc_raw8{{gc_f2u(GCQ_LEVEL(w, 0)) >> 16 | (gc_f2u(GCQ_LEVEL(w, 1)) & 0xffff0000u),
                                     gc_f2u(GCQ_LEVEL(w, 2)) >> 16 | (gc_f2u(GCQ_LEVEL(w, 3)) & 0xffff0000u)}});
#else
  const qf_half2_t bias = {(_Float16)(1024 + GC_QBIAS), (_Float16)(1024 + GC_QBIAS)};
  const qf_half2_t l01 = __builtin_bit_cast(qf_half2_t, __builtin_amdgcn_perm(0x64u, w, 0x04010400u)) - bias;
  const qf_half2_t l23 = __builtin_bit_cast(qf_half2_t, __builtin_amdgcn_perm(0x64u, w, 0x04030402u)) - bias;
  return __builtin_bit_cast(gc_short4_t,
                            gc_raw8{{__builtin_bit_cast(uint32_t, l01), __builtin_bit_cast(uint32_t, l23)}});
#endif
}

/* The leading part of p (two floats) as a word of A's dtype; p -= it
 * (exact: the residual). bf16: the upper halves, truncated, so three parts
 * hold all 24 bits of p (bf16 has fp32's exponents); f16: rounded (two
 * parts: 22 bits, down to the lower part's subnormal spacing 2^-24). */
GC_DEVICE uint32_t qf_part(float p[2]) {
#if GC_TA == GC_BF16
  const uint32_t h0 = gc_f2u(p[0]) & 0xffff0000u, h1 = gc_f2u(p[1]) & 0xffff0000u;
  p[0] -= gc_u2f(h0), p[1] -= gc_u2f(h1);
  return h0 >> 16 | h1;
#else
  const uint32_t o = gc_pack2(TA(), p[0], p[1]);
  float r[2];
  gc_unpack2(TA(), o, r);
  p[0] -= r[0], p[1] -= r[1];
  return o;
#endif
}

/* The MFMA operands of A's 4 elements x: x itself, or under NORM x·w (w:
 * the norm weight's 4 elements) in fp32 split into QF_SPLIT parts (as
 * gemv_mfma); ss += Σ x². */
GC_DEVICE void qf_operand(gc_raw8 x, gc_raw8 w, float &ss, gc_short4_t op[QF_SPLIT]) {
  gc_raw8 o[QF_SPLIT];
  o[0] = x;
  if (NORM)
    GC_UNROLL(2)
    for (int i = 0; i < 2; i++) {
      float xv[2], wv[2], p[2];
      gc_unpack2(TA(), x.w[i], xv);
      gc_unpack2(TA(), w.w[i], wv);
      GC_UNROLL(2)
      for (int e = 0; e < 2; e++) {
        ss = gc_fma(xv[e], xv[e], ss);
        p[e] = xv[e] * wv[e];
      }
      GC_UNROLL(QF_SPLIT)
      for (int s = 0; s < QF_SPLIT; s++)
        o[s].w[i] = qf_part(p);
    }
  GC_UNROLL(QF_SPLIT)
  for (int s = 0; s < QF_SPLIT; s++)
    op[s] = __builtin_bit_cast(gc_short4_t, o[s]);
}

/* The nb (even, < 16) bytes at the 16-byte aligned p as a chunk, read as
 * 16-bit words: the last chunk before the end of B. */
GC_DEVICE gc_raw16 qf_tail(const uint8_t *p, int nb) {
  gc_raw16 v = {{0u, 0u, 0u, 0u}};
  GC_UNROLL(8)
  for (int i = 0; i < 8; i++)
    if (2 * i < nb)
      v.w[i / 2] |= gcq_ld16(p + 2 * i) << (16 * (i & 1));
  return v;
}

/* Load the step of units u0 .. u0+UNR-1 (those below nu) of the wave's
 * QF_NR rows of B (tile rows n0 ..: gate rows, then up rows) into ch:
 * chunk c = lane + j·WARP is chunk c % QF_SC of row c / QF_SC, the 16
 * aligned bytes at 16·(c % QF_SC) past the row's first byte of the step
 * rounded down to 16. Chunks wholly past the step's bytes are not read
 * (zeros: never decoded). */
GC_DEVICE void qf_fetch(gc_raw16 ch[QF_CPL], const uint8_t *B, const uint8_t *bend, int64_t N, int64_t n0,
                        int64_t rb, int64_t u0, int64_t nu, int lane) {
  const int64_t lo = u0 / GC_QUNITS * GC_QBYTES, hi = gc_min64(u0 + UNR, nu) / GC_QUNITS * GC_QBYTES;
  GC_UNROLL(QF_CPL)
  for (int j = 0; j < QF_CPL; j++) {
    const int c = lane + j * GC_WARP, i = c / QF_SC, k = c % QF_SC;
    if (QF_NR * QF_SC % GC_WARP == 0 || c < QF_NR * QF_SC) {
      const int p = i / (16 * RT), rr = i % (16 * RT);
      const uint8_t *row = B + ((int64_t)p * N + gc_min64(n0 + rr, N - 1)) * rb;
      const uint8_t *src = row + lo - ((uint64_t)(row + lo) & 15) + 16 * k;
      const int64_t nb = (row + hi) - src; /* bytes of the range from this chunk on */
      ch[j] = nb <= 0 ? gc_raw16{{0u, 0u, 0u, 0u}}
              : src + 16 <= bend ? *reinterpret_cast<const gc_raw16 *>(src) : qf_tail(src, (int)nb);
    }
  }
}

/* The chunks into the wave's LDS slot st (row i's chunks at 16·QF_SC·i). */
GC_DEVICE void qf_stash(unsigned char *st, const gc_raw16 ch[QF_CPL], int lane) {
  GC_UNROLL(QF_CPL)
  for (int j = 0; j < QF_CPL; j++)
    if (QF_NR * QF_SC % GC_WARP == 0 || lane + j * GC_WARP < QF_NR * QF_SC)
      reinterpret_cast<gc_raw16 *>(st)[lane + j * GC_WARP] = ch[j];
}

/* The scales of the step's units of the wave's rows (256-element formats:
 * a unit's scale fields are decoded once per row, not by each of its 4
 * lanes every time): tab[i·UNR + u] = (d0, d1) of unit u of row i for
 * Q6_K, (d, mn) for Q4_K/Q5_K. A lane takes entries lane, lane + WARP, ...;
 * row i's range starts at byte off(i) of its first chunk in the slot. */
GC_DEVICE void qf_scales(qf_f2_t *tab, const unsigned char *st, const uint8_t *B, int64_t N, int64_t n0, int64_t rb,
                         int64_t lo, int nun, int lane) {
  GC_UNROLL((QF_NR * UNR + GC_WARP - 1) / GC_WARP)
  for (int e = lane; e < QF_NR * UNR; e += GC_WARP) {
    const int i = e / UNR, u = e % UNR, p = i / (16 * RT);
    const int64_t row = (int64_t)p * N + gc_min64(n0 + i % (16 * RT), N - 1);
    const int off = (int)((uint64_t)(B + row * rb + lo) & 15);
    if (u < nun) {
      uint32_t raw[GCQ_RAW], l0, l1;
      float d0, d1, mn;
      GCQ_LOAD(st + i * QF_SC * 16 + off + u / GC_QUNITS * GC_QBYTES, u % GC_QUNITS, 0, raw);
      GCQ_DECODE(raw, u % GC_QUNITS, 0, l0, l1, d0, d1, mn);
      tab[e] = qf_f2_t{d0, GC_QSPLIT ? d1 : mn};
    }
  }
}

/* A unit's inputs (loaded with the other unit of its pair, before their
 * math): A's 8 elements of row r (4q..4q+3 and 16+4q..16+4q+3 of the unit)
 * and the norm weight's (NORM); per row of B the raw words of the lane's
 * part and, for the 256-element formats, the unit's scales from the table. */
struct qf_in {
  gc_raw8 x[2], w[2];
  uint32_t raw[PAIR][RT][GCQ_RAW];
  qf_f2_t sc[PAIR][RT];
};

/* Issue the loads of unit u of the step (unit ug of the row) into in: A
 * from global memory (row M-1 in place of rows past M: qf_math zeroes it),
 * B's words from the wave's slot st (each row's range from byte off[p][t]
 * of its first chunk), the scales from tab. */
GC_DEVICE void qf_load(qf_in &in, const unsigned char *st, const qf_f2_t *tab, const int off[PAIR][RT],
                       const TA *A, const TN *Wn, int64_t M, int64_t K, int64_t ug, int u, int r, int q) {
  const int64_t k0 = ug * 32 + 4 * q;
  const TA *ar = A + gc_min64(r, M - 1) * K + k0;
  GC_UNROLL(2)
  for (int h = 0; h < 2; h++) {
    in.x[h] = *reinterpret_cast<const gc_raw8 *>(ar + 16 * h);
    in.w[h] = NORM ? *reinterpret_cast<const gc_raw8 *>(Wn + k0 + 16 * h) : gc_raw8{{0u, 0u}};
  }
  GC_UNROLL(PAIR)
  for (int p = 0; p < PAIR; p++)
    GC_UNROLL(RT)
    for (int t = 0; t < RT; t++) {
      const int i = (p * RT + t) * 16 + r; /* the row's place in the slot */
      GCQ_LOAD(st + i * QF_SC * 16 + off[p][t] + u / GC_QUNITS * GC_QBYTES, u % GC_QUNITS, q, in.raw[p][t]);
      in.sc[p][t] = GC_QUNITS > 1 ? tab[i * UNR + u] : qf_f2_t{0.0f, 0.0f};
    }
}

/* acc += unit u of the step (its inputs in) of the lane's rows of B
 * against A's rows, A's taken as zeros unless live (rows past M); ss +=
 * the squares of A's elements (NORM). */
GC_DEVICE void qf_math(const qf_in &in, int u, bool live, int q, qf_acc_t acc[PAIR][RT], float &ss) {
  gc_short4_t a[2][QF_SPLIT]; /* A's operands: [MFMA][part] */
  GC_UNROLL(2)
  for (int h = 0; h < 2; h++)
    qf_operand(gc_raw8{{live ? in.x[h].w[0] : 0u, live ? in.x[h].w[1] : 0u}}, in.w[h], ss, a[h]);
  qf_acc_t sa = qf_acc_t{}; /* Σa of the unit for rows D_ROW (formats with a min) */
  if (GC_QMIN) {
    const short one = GC_TA == GC_BF16 ? (short)0x3F80 : (short)0x3C00;
    const gc_short4_t ones = {one, one, one, one};
    GC_UNROLL(QF_SPLIT)
    for (int s = 0; s < QF_SPLIT; s++) {
      sa = gc_mfma<GC_TA, 16>::run(a[0][s], ones, sa);
      sa = gc_mfma<GC_TA, 16>::run(a[1][s], ones, sa);
    }
  }
  GC_UNROLL(PAIR)
  for (int p = 0; p < PAIR; p++)
    GC_UNROLL(RT)
    for (int t = 0; t < RT; t++) {
      uint32_t lo, hi;
      float d0, d1, mn;
      GCQ_DECODE(in.raw[p][t], u % GC_QUNITS, q, lo, hi, d0, d1, mn);
      if (GC_QUNITS > 1) /* the table's (the scale fields above were not loaded) */
        d0 = in.sc[p][t][0], d1 = GC_QSPLIT ? in.sc[p][t][1] : d0, mn = GC_QSPLIT ? 0.0f : in.sc[p][t][1];
      const gc_short4_t l0 = qf_levels(lo), l1 = qf_levels(hi);
      qf_acc_t c = qf_acc_t{};
      GC_UNROLL(QF_SPLIT)
      for (int s = 0; s < QF_SPLIT; s++)
        c = gc_mfma<GC_TA, 16>::run(a[0][s], l0, c);
      if (GC_QSPLIT) {
        acc[p][t] += d0 * c;
        c = qf_acc_t{};
      }
      GC_UNROLL(QF_SPLIT)
      for (int s = 0; s < QF_SPLIT; s++)
        c = gc_mfma<GC_TA, 16>::run(a[1][s], l1, c);
      acc[p][t] += (GC_QSPLIT ? d1 : d0) * c;
      if (GC_QMIN)
        acc[p][t] -= mn * sa;
    }
}

/* args: A, B, C, int64 M, N, K (gemm, gemm_add, gemm_swiglu: B is W);
 * A, B, C, norm[K], int64 M, N, K, float eps (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu). */
GC_KERNEL_OCC(WARPS * WARP, OCC)
void gemv_qmfma(const TA *A, const TB *B, TC *C,
#if NORM
                const TN *Wn,
#endif
                int64_t M, int64_t N, int64_t K
#if NORM
                , float eps
#endif
) {
#if !NORM
  const TN *Wn = 0;
  const float eps = 0.0f;
#endif
  gc_pdl_wait();
  gc_pdl_launch();
  if (M < 1 || M > 16 || N <= 0 || K % GC_QK)
    return; /* outside @applies or the problem check */

  const int w = __builtin_amdgcn_readfirstlane(gc_tid() / GC_WARP), lane = gc_lane(); /* w: wave-uniform */
  const int r = GC_MFMA_AB_ROW(16, lane), q = GC_MFMA_AB_K(16, 4, lane, 0) / 4; /* row, k group */
  const int grp = w / KS, ks = w % KS;
  const int64_t n0 = gc_bid() * QF_RB + (int64_t)grp * 16 * RT; /* the group's first row of B */
  const int64_t rb = K / GC_QK * GC_QBYTES, nu = K / 32;       /* bytes per row of B, units */
  const uint8_t *Bq = reinterpret_cast<const uint8_t *>(B), *bend = Bq + PAIR * N * rb;
  unsigned char *st = gc_dyn_shared() + (int64_t)w * QF_WAVE; /* the wave's LDS slot */
  qf_f2_t *tab = reinterpret_cast<qf_f2_t *>(st + QF_NR * QF_SC * 16); /* its scale table (QF_TAB bytes) */
  int rlo[PAIR][RT]; /* where the lane's rows start, mod 16 */
  qf_acc_t acc[PAIR][RT];
  GC_UNROLL(PAIR)
  for (int p = 0; p < PAIR; p++)
    GC_UNROLL(RT)
    for (int t = 0; t < RT; t++) {
      rlo[p][t] = (int)((uint64_t)(Bq + ((int64_t)p * N + gc_min64(n0 + 16 * t + r, N - 1)) * rb) & 15);
      acc[p][t] = qf_acc_t{};
    }
  float ss = 0.0f; /* Σ x² of row r over the lane's k group */

  gc_raw16 ch[QF_CPL];
  GC_UNROLL(QF_CPL)
  for (int j = 0; j < QF_CPL; j++)
    ch[j] = gc_raw16{{0u, 0u, 0u, 0u}};
  const int64_t stride = (int64_t)KS * UNR;
  int64_t u0 = (int64_t)ks * UNR;
  if (u0 < nu)
    qf_fetch(ch, Bq, bend, N, n0, rb, u0, nu, lane);
  for (; u0 < nu; u0 += stride) {
    gc_syncwarp(); /* the lanes' reads of the step before are done */
    qf_stash(st, ch, lane);
    gc_syncwarp();
    if (u0 + stride < nu)
      qf_fetch(ch, Bq, bend, N, n0, rb, u0 + stride, nu, lane); /* in flight while this step is decoded */
    const int lo = (int)(u0 / GC_QUNITS * GC_QBYTES & 15);
    int off[PAIR][RT];
    GC_UNROLL(PAIR)
    for (int p = 0; p < PAIR; p++)
      GC_UNROLL(RT)
      for (int t = 0; t < RT; t++)
        off[p][t] = (rlo[p][t] + lo) & 15;
    const int nun = (int)(gc_min64(u0 + UNR, nu) - u0); /* units of this step */
    if (GC_QUNITS > 1) {
      qf_scales(tab, st, Bq, N, n0, rb, u0 / GC_QUNITS * GC_QBYTES, nun, lane);
      gc_syncwarp();
    }
    for (int u = 0; u < nun; u += 2) { /* two units at a time: both units' loads, then their math */
      const int u1 = u + 1 < nun ? u + 1 : u; /* an odd step's last unit again */
      qf_in in0, in1;
      qf_load(in0, st, tab, off, A, Wn, M, K, u0 + u, u, r, q);
      qf_load(in1, st, tab, off, A, Wn, M, K, u0 + u1, u1, r, q);
      qf_math(in0, u, r < M, q, acc, ss);
      qf_math(in1, u1, r < M && u1 > u, q, acc, ss); /* the repeated unit's A zeroed: it adds nothing */
    }
  }

  if (NORM) /* row r's sum over the wave's K slice: the lanes of its k groups */
    for (int o = 16; o < GC_WARP; o *= 2)
      ss += gc_shfl_xor(ss, o);
  if (KS > 1) { /* the slices' partial sums, in each wave's own slot, summed by the wave of slice 0 */
    gc_syncwarp(); /* the wave's reads of its slot are done */
    float *mine = reinterpret_cast<float *>(st) + lane;
    GC_UNROLL(PAIR)
    for (int p = 0; p < PAIR; p++)
      GC_UNROLL(RT)
      for (int t = 0; t < RT; t++)
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++)
          mine[((p * RT + t) * 4 + e) * GC_WARP] = acc[p][t][e];
    mine[QF_NACC * GC_WARP] = ss;
    gc_barrier();
    if (ks)
      return;
    for (int k = 1; k < KS; k++) {
      const float *o = mine + (int64_t)k * (QF_WAVE / 4);
      GC_UNROLL(PAIR)
      for (int p = 0; p < PAIR; p++)
        GC_UNROLL(RT)
        for (int t = 0; t < RT; t++)
          GC_UNROLL(4)
          for (int e = 0; e < 4; e++)
            acc[p][t][e] += o[((p * RT + t) * 4 + e) * GC_WARP];
      ss += o[QF_NACC * GC_WARP];
    }
  }

  /* The lane's outputs: rows D_ROW(lane, e) of A × row n of B. Row m's sum
   * of squares is on lane m (AB_ROW(m) = m, k group 0). */
  float sc[4];
  GC_UNROLL(4)
  for (int e = 0; e < 4; e++)
    sc[e] = NORM ? gc_rsqrt(gc_shfl(ss, GC_MFMA_D_ROW(16, lane, e)) / (float)K + eps) : 1.0f;
  const int64_t n = n0 + GC_MFMA_D_COL(16, lane);
  GC_UNROLL(RT)
  for (int t = 0; t < RT; t++)
    GC_UNROLL(4)
    for (int e = 0; e < 4; e++) {
      const int64_t m = GC_MFMA_D_ROW(16, lane, e);
      if (m < M && n + 16 * t < N) {
        const float x = acc[0][t][e] * sc[e];
#if PAIR == 2
        STORE_C(C, m * N + n + 16 * t, gc_silu_mul(x, acc[PAIR - 1][t][e] * sc[e]));
#else
        STORE_GEMM(C, m * N + n + 16 * t, x);
#endif
      }
    }
}
