/* prelude_common.h — the part of the GPU preludes that is the same for
 * NVIDIA and AMD: the GEMM families' epilogue math (the gc-epilogue
 * block) and ggml's block formats (the gc-quant block). prelude_cuda.h
 * and prelude_hip.h include it after each vendor's gc_exp, gc_h2f_bits,
 * gc_ubyte_f and gc_ubyte_less_f, which it uses; gen/ splices it into them where they
 * say #include "prelude_common.h" (NVRTC and comgr compile one string
 * with no include path), so the generated source is as if the text
 * stood there. It has no include guard of its own: the prelude's covers
 * it. */

/* >>> gc-epilogue: the GEMM and GEMV families' shared epilogue math.
 * The epilogue is chosen by the op (gen defines GC_OP_<op>; PAIR and NORM
 * where gen derives them from the op table): PAIR rows of B per column of
 * C (2: silu(gate)·up), NORM where A's rows are normalised. The SwiGLU of
 * a pair, silu(g)·u in fp32, is this one for every family, dense and
 * quantized, NVIDIA and AMD (the AMD emulator splices this block in
 * too). */
GC_DEVICE float gc_silu_mul(float g, float u) { return g / (1.0f + gc_exp(-g)) * u; }
/* <<< gc-epilogue */

/* ================================================================== */
/* >>> gc-quant: ggml's block formats, for B (the weights)             */
/* ================================================================== */
/* Built on each vendor's gc_h2f_bits, gc_ubyte_f and gc_ubyte_less_f (the prelude's,
 * before its #include of this file). base/quant.h describes each format
 * once (bytes, order of elements, dequantization); the functions below
 * follow it, and the op case table pins them (tests/test_ops.py, against
 * tests/ggufq.py).
 *
 * Kernels see a block of QK elements (32 or 256, GC_QK) as QK/32 units of
 * 32 consecutive elements, and a unit as four parts t = 0..3 of 8
 * elements: 4t..4t+3 and 16+4t..16+4t+3 (the k's an mma fragment's lane
 * t holds; a SIMT lane may take any part). For part t of unit u,
 * GCQ_UNIT(b, u, t, lo, hi, d0, d1, mn) (or GCQ_LOAD, then GCQ_DECODE)
 * gives the elements' levels plus GC_QBIAS as bytes (lo: the first four,
 * hi: the last four) and the unit's scales: element l of the unit is
 *     y = fl(d · q) − mn   with d = d0 for l < 16, d1 for l >= 16,
 * q = byte − GC_QBIAS a small integer; d·q is exact in fp32 (a half times
 * integers of at most 13 bits in all) and mn is 0 but for Q4_K/Q5_K
 * (GC_QMIN), so y is the value base/quant.h gives. Reads are 16-bit (or
 * 32-bit where the format keeps fields 4-byte aligned: Q4_K, Q5_K and the
 * device layouts Q8_0R, Q4_0R, Q4_KR, Q6_KR, whose blocks must then sit at
 * a multiple of 4; the others at any even address), global or shared. */
#define GC_Q8_0 5
#define GC_Q4_0 6
#define GC_Q4_K 7
#define GC_Q5_K 8
#define GC_Q6_K 9
#define GC_Q8_0R 10 /* gcore's device layouts of Q8_0 and Q4_0 */
#define GC_Q4_0R 11
#define GC_Q4_KR 12
#define GC_Q6_KR 13
#define GC_DTNAME_5 q8_0
#define GC_DTNAME_6 q4_0
#define GC_DTNAME_7 q4_k
#define GC_DTNAME_8 q5_k
#define GC_DTNAME_9 q6_k
#define GC_DTNAME_10 q8_0r
#define GC_DTNAME_11 q4_0r
#define GC_DTNAME_12 q4_kr
#define GC_DTNAME_13 q6_kr
typedef uint8_t gc_q8_0_t; /* a block format's storage: bytes */
typedef uint8_t gc_q4_0_t;
typedef uint8_t gc_q4_k_t;
typedef uint8_t gc_q5_k_t;
typedef uint8_t gc_q6_k_t;
typedef uint8_t gc_q8_0r_t;
typedef uint8_t gc_q4_0r_t;
typedef uint8_t gc_q4_kr_t;
typedef uint8_t gc_q6_kr_t;
#define GC_QK_5 32
#define GC_QK_6 32
#define GC_QK_7 256
#define GC_QK_8 256
#define GC_QK_9 256
#define GC_QK_10 256
#define GC_QK_11 256
#define GC_QK_12 256
#define GC_QK_13 256
#define GC_QBYTES_5 34
#define GC_QBYTES_6 18
#define GC_QBYTES_7 144
#define GC_QBYTES_8 176
#define GC_QBYTES_9 210
#define GC_QBYTES_10 272
#define GC_QBYTES_11 144
#define GC_QBYTES_12 144
#define GC_QBYTES_13 224
#define GC_QBIAS_5 128
#define GC_QBIAS_6 8
#define GC_QBIAS_7 0
#define GC_QBIAS_8 0
#define GC_QBIAS_9 32
#define GC_QBIAS_10 128
#define GC_QBIAS_11 8
#define GC_QBIAS_12 0
#define GC_QBIAS_13 32
#define GC_QMIN_5 0
#define GC_QMIN_6 0
#define GC_QMIN_7 1
#define GC_QMIN_8 1
#define GC_QMIN_9 0
#define GC_QMIN_10 0
#define GC_QMIN_11 0
#define GC_QMIN_12 1
#define GC_QMIN_13 0
#define GC_QSPLIT_5 0
#define GC_QSPLIT_6 0
#define GC_QSPLIT_7 0
#define GC_QSPLIT_8 0
#define GC_QSPLIT_9 1
#define GC_QSPLIT_10 0
#define GC_QSPLIT_11 0
#define GC_QSPLIT_12 0
#define GC_QSPLIT_13 1
#define GC_QK GC_CAT(GC_QK_, GC_TB)         /* elements per block of B */
#define GC_QBYTES GC_CAT(GC_QBYTES_, GC_TB) /* bytes per block of B */
#define GC_QBIAS GC_CAT(GC_QBIAS_, GC_TB)   /* level + GC_QBIAS = a byte of lo, hi */
#define GC_QMIN GC_CAT(GC_QMIN_, GC_TB)     /* 1: units have a min (mn) */
#define GC_QSPLIT GC_CAT(GC_QSPLIT_, GC_TB) /* 1: a unit's halves have their own scale (d0, d1) */
#define GC_QUNITS (GC_QK / 32)              /* units of 32 elements per block */
/* The norm weight of rmsnorm_gemm*: B's dtype, or A's when B is a block
 * format (core/ops.h, role 'N'). */
#define GC_QNORM_DT GC_CAT(GC_QNORMOF_, GC_TB)
#define GC_QNORMOF_0 0
#define GC_QNORMOF_1 1
#define GC_QNORMOF_2 2
#define GC_QNORMOF_5 GC_TA
#define GC_QNORMOF_6 GC_TA
#define GC_QNORMOF_7 GC_TA
#define GC_QNORMOF_8 GC_TA
#define GC_QNORMOF_9 GC_TA
#define GC_QNORMOF_10 GC_TA
#define GC_QNORMOF_11 GC_TA
#define GC_QNORMOF_12 GC_TA
#define GC_QNORMOF_13 GC_TA
#define TN GC_STORAGE(GC_QNORM_DT)
#define LOAD_N(p, i) gc_ld((const TN *)(p), (i))
#define LOADV_N(n, p, i, o) gc_ldv<n>((const TN *)(p) + (i), (o))

/* Global unit ug's place in its block, 0 .. GC_QUNITS - 1 (ug >= 0; a
 * macro: the dtype macros follow the prelude).
 * Unsigned: for ug = blocks·GC_QUNITS + u with u a constant of an
 * unrolled loop the compiler then sees u itself, and the decoders' choices
 * by unit (Q4_K's scale bytes, Q6_K's shifts) fold away; a signed
 * remainder of a value it cannot prove non-negative stays a run-time
 * computation with a branch per unit. */
#define GCQ_UNIT_IN_BLOCK(ug) ((int)((uint64_t)(ug) % GC_QUNITS))

GC_DEVICE uint32_t gcq_ld16(const uint8_t *p) { return *(const uint16_t *)p; }
/* 4 bytes at an even address / at a multiple of 4 */
GC_DEVICE uint32_t gcq_ld32u(const uint8_t *p) { return gcq_ld16(p) | gcq_ld16(p + 2) << 16; }
GC_DEVICE uint32_t gcq_ld32(const uint8_t *p) { return *(const uint32_t *)p; }
/* byte i (0..11, a run-time value) of the 12 bytes in q0, q1, q2 (by
 * value: selects of registers, never an indexed array in scratch) */
GC_DEVICE uint32_t gcq_byte12(uint32_t q0, uint32_t q1, uint32_t q2, int i) {
  const uint32_t w = i < 4 ? q0 : i < 8 ? q1 : q2;
  return (w >> (8 * (i & 3))) & 255u;
}

/* Each format: gcq_load_F(b, u, t, r) reads the words part t of unit u of
 * block b needs into r[0..GCQ_RAW-1] (loads only, so a kernel can issue
 * them long before it needs the values); gcq_decode_F(r, u, t, lo, hi,
 * d0, d1, mn) turns them into the biased level bytes and the scales
 * (arithmetic only). */
#define GCQ_RAW 8

/* Q8_0: half d; int8 qs[32]. Bytes: qs + 128. */
GC_DEVICE void gcq_load_q8_0(const uint8_t *b, int u, int t, uint32_t *r) {
  (void)u;
  r[0] = gcq_ld16(b);
  r[1] = gcq_ld32u(b + 2 + 4 * t);
  r[2] = gcq_ld32u(b + 18 + 4 * t);
}
GC_DEVICE void gcq_decode_q8_0(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)u, (void)t;
  lo = r[1] ^ 0x80808080u;
  hi = r[2] ^ 0x80808080u;
  d0 = d1 = gc_h2f_bits(r[0]);
  mn = 0.0f;
}
/* Q4_0: half d; uint8 qs[16]: element j < 16 the low nibble of qs[j],
 * j + 16 its high nibble. Bytes: the nibbles (level + 8). */
GC_DEVICE void gcq_load_q4_0(const uint8_t *b, int u, int t, uint32_t *r) {
  (void)u;
  r[0] = gcq_ld16(b);
  r[1] = gcq_ld32u(b + 2 + 4 * t);
}
GC_DEVICE void gcq_decode_q4_0(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)u, (void)t;
  lo = r[1] & 0x0F0F0F0Fu;
  hi = (r[1] >> 4) & 0x0F0F0F0Fu;
  d0 = d1 = gc_h2f_bits(r[0]);
  mn = 0.0f;
}
/* Q4_K: half d, dmin; scales[12]; qs[128]: unit u (sub-block u) is the
 * low (u even) or high nibbles of qs[32·(u/2) ..]; its 6-bit scale and
 * min packed in scales[] (ggml's get_scale_min_k4). */
GC_DEVICE void gcq_scale_min_k4(uint32_t q0, uint32_t q1, uint32_t q2, int s, int &sc, int &m) {
  if (s < 4) {
    sc = (int)(gcq_byte12(q0, q1, q2, s) & 63);
    m = (int)(gcq_byte12(q0, q1, q2, s + 4) & 63);
  } else {
    sc = (int)((gcq_byte12(q0, q1, q2, s + 4) & 0xF) | ((gcq_byte12(q0, q1, q2, s - 4) >> 6) << 4));
    m = (int)((gcq_byte12(q0, q1, q2, s + 4) >> 4) | ((gcq_byte12(q0, q1, q2, s) >> 6) << 4));
  }
}
/* The same sixteen fields by whole words: unit s's scale and min are byte
 * s & 3 of sc and m, which hold the four units of its half of the block
 * (s < 4 or not), made by six operations on the three words, so that a
 * kernel unrolling a block's units makes them once a block (the same
 * expressions of the same words: gemv_qmma's KQ). */
GC_DEVICE void gcq_scales_k4(uint32_t q0, uint32_t q1, uint32_t q2, int s, uint32_t &sc, uint32_t &m) {
  sc = s < 4 ? q0 & 0x3F3F3F3Fu : (q2 & 0x0F0F0F0Fu) | ((q0 >> 2) & 0x30303030u);
  m = s < 4 ? q1 & 0x3F3F3F3Fu : ((q2 >> 4) & 0x0F0F0F0Fu) | ((q1 >> 2) & 0x30303030u);
}
GC_DEVICE void gcq_load_q4_k(const uint8_t *b, int u, int t, uint32_t *r) {
  const uint8_t *qs = b + 16 + 32 * (u >> 1);
  r[0] = gcq_ld32(b); /* d, dmin */
  r[1] = gcq_ld32(b + 4), r[2] = gcq_ld32(b + 8), r[3] = gcq_ld32(b + 12); /* scales */
  r[4] = gcq_ld32(qs + 4 * t);
  r[5] = gcq_ld32(qs + 16 + 4 * t);
}
GC_DEVICE void gcq_decode_q4_k(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)t;
  const int sh = 4 * (u & 1);
  int sc, m;
  lo = (r[4] >> sh) & 0x0F0F0F0Fu;
  hi = (r[5] >> sh) & 0x0F0F0F0Fu;
  gcq_scale_min_k4(r[1], r[2], r[3], u, sc, m);
  d0 = d1 = gc_h2f_bits(r[0] & 0xffffu) * (float)sc;
  mn = gc_h2f_bits(r[0] >> 16) * (float)m;
}
/* Q5_K: as Q4_K (qs at 48) with a fifth bit, bit u of qh[l] (qh at 16). */
GC_DEVICE void gcq_load_q5_k(const uint8_t *b, int u, int t, uint32_t *r) {
  const uint8_t *qs = b + 48 + 32 * (u >> 1), *qh = b + 16;
  r[0] = gcq_ld32(b);
  r[1] = gcq_ld32(b + 4), r[2] = gcq_ld32(b + 8), r[3] = gcq_ld32(b + 12);
  r[4] = gcq_ld32(qs + 4 * t);
  r[5] = gcq_ld32(qs + 16 + 4 * t);
  r[6] = gcq_ld32(qh + 4 * t);
  r[7] = gcq_ld32(qh + 16 + 4 * t);
}
GC_DEVICE void gcq_decode_q5_k(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  gcq_decode_q4_k(r, u, t, lo, hi, d0, d1, mn);
  lo |= ((r[6] >> u) & 0x01010101u) << 4;
  hi |= ((r[7] >> u) & 0x01010101u) << 4;
}
/* Q6_K: ql[128]; qh[64]; int8 scales[16]; half d. Unit u: half n = u/4,
 * j = u%4: the low (j < 2) or high nibble of ql[64n + 32·(j%2) + l], bits
 * 2j, 2j+1 of qh[32n + l] above it, minus 32; scales 8n + 2j (l < 16) and
 * 8n + 2j + 1. */
GC_DEVICE void gcq_load_q6_k(const uint8_t *b, int u, int t, uint32_t *r) {
  const int n = u >> 2, j = u & 3;
  const uint8_t *ql = b + 64 * n + 32 * (j & 1), *qh = b + 128 + 32 * n;
  r[0] = gcq_ld32u(ql + 4 * t);
  r[1] = gcq_ld32u(ql + 16 + 4 * t);
  r[2] = gcq_ld32u(qh + 4 * t);
  r[3] = gcq_ld32u(qh + 16 + 4 * t);
  r[4] = gcq_ld16(b + 192 + 8 * n + 2 * j); /* the two int8 scales */
  r[5] = gcq_ld16(b + 208);                 /* d */
}
GC_DEVICE void gcq_decode_q6_k(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)t;
  const int j = u & 3, sh = 4 * (j >> 1);
  lo = ((r[0] >> sh) & 0x0F0F0F0Fu) | (((r[2] >> (2 * j)) & 0x03030303u) << 4);
  hi = ((r[1] >> sh) & 0x0F0F0F0Fu) | (((r[3] >> (2 * j)) & 0x03030303u) << 4);
  const float d = gc_h2f_bits(r[5]);
  d0 = d * (float)(int)(int8_t)(r[4] & 255u);
  d1 = d * (float)(int)(int8_t)(r[4] >> 8);
  mn = 0.0f;
}
/* Q8_0R, Q4_0R (base/quant.h): eight Q8_0 / Q4_0 blocks as units 0..7,
 * part t of unit u at qs + 64t + 8u (two words) / qs + 32t + 4u (one),
 * the eight halves d after qs. Q4_KR: a Q4_K block, part t of units 2c
 * and 2c + 1 at qs + 32t + 8c (two words: the low and high nibbles),
 * Q4_K's d, dmin and scales after qs. Blocks (272 / 144 bytes) keep every
 * field 4-byte aligned, and a lane's part of all eight units is one
 * 16-byte aligned run (32 bytes; Q8_0R: 64) where the block is. */
GC_DEVICE void gcq_load_q8_0r(const uint8_t *b, int u, int t, uint32_t *r) {
  r[0] = gcq_ld16(b + 256 + 2 * u);
  r[1] = gcq_ld32(b + 64 * t + 8 * u);
  r[2] = gcq_ld32(b + 64 * t + 8 * u + 4);
}
#define gcq_decode_q8_0r gcq_decode_q8_0
GC_DEVICE void gcq_load_q4_0r(const uint8_t *b, int u, int t, uint32_t *r) {
  r[0] = gcq_ld16(b + 128 + 2 * u);
  r[1] = gcq_ld32(b + 32 * t + 4 * u);
}
#define gcq_decode_q4_0r gcq_decode_q4_0
GC_DEVICE void gcq_load_q4_kr(const uint8_t *b, int u, int t, uint32_t *r) {
  r[0] = gcq_ld32(b + 128); /* d, dmin */
  r[1] = gcq_ld32(b + 132), r[2] = gcq_ld32(b + 136), r[3] = gcq_ld32(b + 140); /* scales */
  r[4] = gcq_ld32(b + 32 * t + 8 * (u >> 1));
  r[5] = gcq_ld32(b + 32 * t + 8 * (u >> 1) + 4);
}
#define gcq_decode_q4_kr gcq_decode_q4_k
/* Q6_KR (base/quant.h): a Q6_K block with lane t's ql words (n, c, h) at
 * 32t + 16n + 8c + 4h and qh words (n, h) at 128 + 16t + 8n + 4h, then
 * Q6_K's scales and d: the same words as gcq_load_q6_k reads, aligned. */
GC_DEVICE void gcq_load_q6_kr(const uint8_t *b, int u, int t, uint32_t *r) {
  const int n = u >> 2, j = u & 3;
  const uint8_t *ql = b + 32 * t + 16 * n + 8 * (j & 1), *qh = b + 128 + 16 * t + 8 * n;
  r[0] = gcq_ld32(ql);
  r[1] = gcq_ld32(ql + 4);
  r[2] = gcq_ld32(qh);
  r[3] = gcq_ld32(qh + 4);
  r[4] = gcq_ld16(b + 192 + 8 * n + 2 * j); /* the two int8 scales */
  r[5] = gcq_ld16(b + 208);                 /* d */
}
#define gcq_decode_q6_kr gcq_decode_q6_k
#define GCQ_LOAD(b, u, t, r) GC_CAT(gcq_load_, GC_DTNAME(GC_TB))(b, u, t, r)
#define GCQ_DECODE(r, u, t, lo, hi, d0, d1, mn) \
  GC_CAT(gcq_decode_, GC_DTNAME(GC_TB))(r, u, t, lo, hi, d0, d1, mn)
/* Both at once: the part's level bytes and the unit's scales. */
#define GCQ_UNIT(b, u, t, lo, hi, d0, d1, mn)  \
  do {                                         \
    uint32_t r_[GCQ_RAW];                      \
    GCQ_LOAD(b, u, t, r_);                     \
    GCQ_DECODE(r_, u, t, lo, hi, d0, d1, mn);  \
  } while (0)
/* The level of byte i of w (GCQ_DECODE's lo or hi), as a float. */
#define GCQ_LEVEL(w, i) gc_ubyte_less_f(w, i, (float)GC_QBIAS)
/* <<< gc-quant */

/* >>> gc-gemv: the GEMVs' shared pieces (outside the gc-quant block: the
 * AMD emulator's matrix-core templates use none of them; the NVIDIA
 * emulator splices this block in for its GEMVs, the AMD one for gemv.cu,
 * tests/amd_emu/gemv_simt.h) */

/* Ask L2 for the n bytes at p, one 128-byte line a thread, the block's
 * first nt threads striding (a hint, no value; a no-op on AMD). A @pdl
 * kernel calls it before its wait only for what no kernel of the stream
 * writes (weights, norm weights): their DRAM latency then overlaps the
 * kernel before instead of following the wait. */
GC_DEVICE void gc_prefetch_l2_range(const void *p, int64_t n, int nt) {
  for (int64_t o = (int64_t)gc_tid() * 128; o < n; o += (int64_t)nt * 128)
    gc_prefetch_l2((const char *)p + o);
}
/* A @prefetch kernel's L2 window [pf, pf + n) (n and pf multiples of
 * 16, as the runtime's are): block b of the grid's nb asks for its share,
 * a multiple of 16 bytes cut at the window's end (the shares cover the
 * window, one of fewer bytes than blocks too), in prefetches of 16 KB
 * (one thread of the block calls it; a no-op on AMD, which declares no
 * window). */
GC_DEVICE void gc_prefetch_window(const char *pf, int64_t n, int64_t nb) {
  const int64_t chunk = ((n + nb - 1) / nb + 15) & ~(int64_t)15; /* nb shares cover n */
  const int64_t lo = chunk * (int64_t)gc_bid(), hi = gc_min64(n, lo + chunk);
  for (int64_t o = lo; o < hi; o += 16384)
    gc_bulk_prefetch_l2(pf + o, (unsigned)gc_min64(16384, hi - o));
}
/* The same by the grid's block 0 only: for what every block reads after
 * the wait (a fused norm's weight), which one request brings into L2
 * (rather than thousands of blocks asking for the same lines). A macro:
 * the byte count is computed in block 0 only. */
#define GC_PREFETCH_L2_ONCE(p, n, nt)                                                              \
  do {                                                                                             \
    if (gc_bid() == 0)                                                                             \
      gc_prefetch_l2_range(p, n, nt);                                                              \
  } while (0)

/* rope_kv's rounding of a rotated value y (rope_kv.cu and the GEMVs'
 * RoPE epilogues): the fp32 that narrows to C's dtype with one rounding:
 * nearest even (to16 = 0: C is f32), else rounded to odd first, so that
 * the store's rounding to 16 bits is y's one rounding. (The prelude
 * precedes gen's dtype macros: the caller says whether C is 16-bit,
 * GC_TC != GC_F32 in a template, sizeof(T) == 2 in gc_rope_pair.) */
GC_DEVICE float gc_rope_round(double y, bool to16) {
  float f = (float)y;
  double b = (double)f;
  if (to16 && b != y) {
    uint32_t u = gc_f2u(f);
    if ((b > y && y > 0) || (b < y && y < 0))
      u -= 1; /* rounded away from zero: step back toward it */
    f = gc_u2f(u | 1u);
  }
  return f;
}
/* RoPE (rope_kv's rule, templates/README.md): element e (0, 1) of pair
 * j of a head of D is its element layout ? 2j + e : j + e·D/2. */
GC_DEVICE int64_t gc_rope_elem(int64_t j, int e, int64_t D, int64_t layout) {
  return layout ? 2 * j + e : j + e * (D / 2);
}
/* The RoPE/KV epilogue of a GEMV of the QKV projection
 * (rmsnorm_gemm_rope_kv: gemv.cu, gemv_qmma.cu), C's dtype T. */
template <typename T> struct gc_rope_t {
  T *Kc, *Vc;             /* [S, G·D] each */
  const double *inv_freq; /* [D/2] */
  int64_t pos0, H, G, D, layout;
  const void *bias;       /* rmsnorm_gemm_bias_rope_kv: b[N] in B's dtype, added to the sums; else null */
};
/* The inverse frequency of pair u's angle (inv_freq[j], j = u % (D/2)),
 * or 0 for a value head, which is not rotated. gemv.cu reads it before
 * its loop, so that the load's latency hides behind the stream. */
template <typename T> GC_DEVICE double gc_rope_freq(const gc_rope_t<T> &ro, int64_t u) {
  return u / (ro.D / 2) < ro.H + ro.G ? ro.inv_freq[u % (ro.D / 2)] : 0.0;
}
/* The row pair u (head hd = u / (D/2)) of token m goes to: Q row m
 * (query heads), Kc or Vc row pos0 + m; *ia, *ib its two elements. */
template <typename T>
GC_DEVICE T *gc_rope_row(T *Q, const gc_rope_t<T> &ro, int64_t m, int64_t u, int64_t *ia, int64_t *ib) {
  const int64_t D = ro.D, H = ro.H, G = ro.G, hd = u / (D / 2), j = u % (D / 2), p = ro.pos0 + m;
  *ia = gc_rope_elem(j, 0, D, ro.layout), *ib = gc_rope_elem(j, 1, D, ro.layout);
  return hd < H ? Q + (m * H + hd) * D : (hd < H + G ? ro.Kc + (p * G + hd - H) * D : ro.Vc + (p * G + hd - H - G) * D);
}
/* (a, b) rotated by θ as rope_kv_gpu does (sin, cos and the rotation in
 * double, one rounding) into row[ia], row[ib]. */
template <typename T>
GC_DEVICE void gc_rope_rotate(T *row, int64_t ia, int64_t ib, double a, double b, double theta) {
  double c, sn;
  gc_sincos_f64(theta, &sn, &c);
  gc_st(row, ia, gc_rope_round(a * c - b * sn, sizeof(T) == 2));
  gc_st(row, ib, gc_rope_round(a * sn + b * c, sizeof(T) == 2));
}
/* Pair u (head u / (D/2), pair j = u % (D/2) of it) of token m at
 * position p = pos0 + m from its two sums x, y: both rounded to T as the
 * GEMM stores C; a query or key head's pair rotated by θ = p·f (f =
 * gc_rope_freq(ro, u)) into Q row m or Kc row p, a value head's stored
 * into Vc row p as it is. The rounded sums stay in registers (gemv.cu). */
template <typename T>
GC_DEVICE void gc_rope_put(T *Q, const gc_rope_t<T> &ro, int64_t m, int64_t u, float x, float y,
                           double f) {
  int64_t ia, ib;
  T *row = gc_rope_row(Q, ro, m, u, &ia, &ib), tx, ty;
  if (u / (ro.D / 2) >= ro.H + ro.G) { /* a value head: as rmsnorm_gemm stores C */
    gc_st(row, ia, x);
    gc_st(row, ib, y);
    return;
  }
  gc_st(&tx, 0, x);
  gc_st(&ty, 0, y);
  gc_rope_rotate(row, ia, ib, gc_ld(&tx, 0), gc_ld(&ty, 0), (double)(ro.pos0 + m) * f);
}
/* The same, the rounded sums stored first and read back, and the
 * frequency read here: fewer registers live across the epilogue, for
 * gemv_qmma.cu, whose RoPE variants are at the register limit. */
template <typename T>
GC_DEVICE void gc_rope_pair(T *Q, const gc_rope_t<T> &ro, int64_t m, int64_t u, float x, float y) {
  int64_t ia, ib;
  T *row = gc_rope_row(Q, ro, m, u, &ia, &ib);
  gc_st(row, ia, x);
  gc_st(row, ib, y);
  if (u / (ro.D / 2) >= ro.H + ro.G)
    return;
  gc_rope_rotate(row, ia, ib, gc_ld(row, ia), gc_ld(row, ib), (double)(ro.pos0 + m) * ro.inv_freq[u % (ro.D / 2)]);
}
/* Split-K within a block (KS > 1: KS neighbouring warps share a row
 * group's K range). gc_splitk_put: the warp puts its NA partial sums acc
 * (its accumulators, flattened) and NS sums ss (a fused norm's sums of
 * squares) in red, [warp][NA + NS] floats, each WARP apart (lane-strided:
 * no bank conflicts). Then, once the block has met (the caller's
 * barrier), gc_splitk_add: the warp of slice 0 (w) adds those of warps
 * w + 1 .. w + KS - 1 to its own. */
template <int NA, int NS>
GC_DEVICE void gc_splitk_put(float *red, int w, int lane, const float *acc, const float *ss) {
  float *mine = red + (int64_t)w * (NA + NS) * GC_WARP + lane;
  for (int i = 0; i < NA; i++)
    mine[i * GC_WARP] = acc[i];
  for (int j = 0; j < NS; j++)
    mine[(NA + j) * GC_WARP] = ss[j];
}
template <int NA, int NS>
GC_DEVICE void gc_splitk_add(const float *red, int w, int lane, int ks, float *acc, float *ss) {
  for (int k = 1; k < ks; k++) {
    const float *o = red + (int64_t)(w + k) * (NA + NS) * GC_WARP + lane;
    for (int i = 0; i < NA; i++)
      acc[i] += o[i * GC_WARP];
    for (int j = 0; j < NS; j++)
      ss[j] += o[(NA + j) * GC_WARP];
  }
}

/* <<< gc-gemv */

/* >>> gc-split: the decode attentions' merge of partial softmaxes
 * (attention_decode, attention_decode_mma, attention_decode_mfma,
 * attention_decode_wmma; both emulators splice this block in). A partial of one head over some keys is (m, l, o[D]):
 * the keys' largest score m (base 2), l = Σ 2^(s − m) and o = Σ 2^(s − m)·v;
 * one with no keys has m = -inf, l = 0, o = 0. Partials merge weighted by
 * 2^(m_i − max). Across blocks (SPLIT slices of the keys) a block writes
 * its partial of each head to a workspace of (m, l, o[]) records, takes a
 * ticket, and the block with the last ticket merges them. */

/* The work of block gc_bid() of a decode attention whose grid is M·G·SPLIT
 * blocks, block (row·G + g)·SPLIT + sp (the matrix-core ones): row `row`
 * of Q (0 but for a batch, BATCH_ 1), kv head g, and the row's keys j0 ..
 * j1-1, slice sp of L = pos[0] + 1 (a batch: pos[row] + 1) cut in ns
 * slices: SPLIT, or with kmin > 0 as many as give each slice kmin keys at
 * least (1 .. SPLIT), so that a short row takes fewer, fuller blocks;
 * blocks sp >= ns have no keys (j0 = j1 = L) and take no part.
 * Positions are int32 on the device (a captured step replays at any).
 * For a batch it also moves Q and O to the row and Kc, Vc to its cache
 * slot pos[M + row] of S rows. */
struct gc_split_at {
  int64_t row, g;
  int sp, ns, L, j0, j1;
};
template <int SPLIT, int BATCH_, class TP, class TQ, class TK, class TO>
GC_DEVICE gc_split_at gc_split_block(const TP *pos, int64_t M, int64_t H, int64_t G, int64_t D, int64_t S,
                                     const TQ *&Q, const TK *&Kc, const TK *&Vc, TO *&O, int kmin = 0) {
  gc_split_at a;
  a.row = BATCH_ ? gc_bid() / SPLIT / G : 0;
  a.g = BATCH_ ? gc_bid() / SPLIT % G : gc_bid() / SPLIT;
  a.sp = (int)(gc_bid() % SPLIT);
  if (BATCH_) {
    a.L = pos[a.row] + 1;
    Q += a.row * H * D, O += a.row * H * D;
    Kc += (int64_t)pos[M + a.row] * S * G * D, Vc += (int64_t)pos[M + a.row] * S * G * D;
  } else {
    a.L = pos[0] + 1;
  }
  const int want = kmin > 0 ? (a.L + kmin - 1) / kmin : SPLIT;
  a.ns = want < 1 ? 1 : want < SPLIT ? want : SPLIT;
  const int cs = (a.L + a.ns - 1) / a.ns;
  a.j0 = a.sp < a.ns && a.sp * cs < a.L ? a.sp * cs : a.L;
  a.j1 = a.j0 + cs < a.L ? a.j0 + cs : a.L;
  return a;
}

/* L2PF: a decode attention's rows j0 .. j1-1 of keys and values (one kv
 * head's: row r at K + r·ld and V + r·ld, D elements) asked of L2 by the
 * block's nt threads, a 128-byte line each, before its wait for the
 * kernel before (@pdl), so that they stream in while that kernel drains.
 * A hint: it cannot change a result. It pays where the rows are older
 * than the kernel before, which in a decode step (rope_kv, the QKV's
 * RoPE epilogue) writes only the newest row of each sequence: callers
 * stop at the row before it, and read the positions through a volatile
 * pointer (a load of L2, not of an L1 line the later reads could hit). */
template <class TK>
GC_DEVICE void gc_split_prefetch(const TK *K, const TK *V, int64_t ld, int64_t D, int64_t j0, int64_t j1, int nt) {
  const int64_t lines = (D * (int64_t)sizeof(TK) + 127) / 128, n = (j1 - j0) * lines;
  for (int64_t i = gc_tid(); i < n; i += nt) {
    const int64_t r = j0 + i / lines, o = i % lines * 128;
    gc_prefetch_l2((const char *)(K + r * ld) + o);
    gc_prefetch_l2((const char *)(V + r * ld) + o);
  }
}

/* The weight 2^(m − mx) of a partial with max m in a merge with max mx;
 * 0 for an empty partial (m = -inf), whatever mx is. */
GC_DEVICE float gc_split_weight(float m, float mx) { return m == -GC_INF ? 0.0f : gc_exp2(m - mx); }

/* The NW partials of one head and element in shared memory, partial k's m
 * at pm[k·hs], l at pl[k·hs] and element at po[k·os], merged: the max mx,
 * the sum ls and the element's sum os. */
template <int NW>
GC_DEVICE void gc_split_warps(const float *pm, const float *pl, const float *po, int hs, int os_, float &mx,
                              float &ls, float &os) {
  mx = -GC_INF, ls = 0.0f, os = 0.0f;
  for (int k = 0; k < NW; k++)
    mx = gc_max(mx, pm[k * hs]);
  for (int k = 0; k < NW; k++) {
    const float wt = gc_split_weight(pm[k * hs], mx);
    os += wt * po[k * os_];
    ls += wt * pl[k * hs];
  }
}

/* Element d of a block's partial into its workspace record p (m, l, o[]);
 * the thread with d = 0 writes m and l. L2 only (read by another block). */
GC_DEVICE void gc_split_put(float *p, int d, float mx, float ls, float os) {
  if (d == 0)
    gc_st_cg(p, mx), gc_st_cg(p + 1, ls);
  gc_st_cg(p + 2 + d, os);
}

/* After every thread's gc_split_put: takes the block's ticket of counter
 * cnt (shared out through *s_last, a shared int) and is true in every
 * thread of the block that took the last of the split tickets, which
 * resets the counter for the next launch (stream order) and may then read
 * all split records. Every thread of the block calls it. */
GC_DEVICE bool gc_split_last(unsigned *cnt, int split, int *s_last) {
  gc_fence_device();
  gc_barrier();
  if (gc_tid() == 0)
    *s_last = gc_atomic_add(cnt, 1u) == (unsigned)split - 1u;
  gc_barrier();
  if (!*s_last)
    return false;
  if (gc_tid() == 0)
    *cnt = 0u; /* every slice has arrived */
  gc_fence_device();
  return true;
}

/* The last block's merge of nh heads' SPLIT records, head hh's slice k at
 * p0 + (hh·SPLIT + k)·W, of which the first ns (<= SPLIT) were written by
 * this launch; wt and lk ([nh][SPLIT]) and ls ([nh]) shared scratch; nt
 * threads; store(hh, d, value) writes an output element. Each (head,
 * slice)'s m and l are read once (the weights and each head's sum), then
 * each element from its ns records with all loads in flight. */
template <int SPLIT, class Store>
GC_DEVICE void gc_split_merge(const float *p0, int W, int nh, int64_t D, float (*wt)[SPLIT], float (*lk)[SPLIT],
                              float *ls, int nt, Store store, int ns = SPLIT) {
  const int tid = gc_tid();
  for (int i = tid; i < nh * SPLIT; i += nt) {
    const bool in = i % SPLIT < ns; /* records past ns: an earlier launch's, weight 0 */
    wt[i / SPLIT][i % SPLIT] = in ? gc_ld_cg(p0 + (int64_t)i * W) : -GC_INF;
    lk[i / SPLIT][i % SPLIT] = in ? gc_ld_cg(p0 + (int64_t)i * W + 1) : 0.0f;
  }
  gc_barrier();
  if (tid < nh) {
    float mx = -GC_INF, s = 0.0f;
    for (int k = 0; k < SPLIT; k++)
      mx = gc_max(mx, wt[tid][k]);
    for (int k = 0; k < SPLIT; k++) {
      const float w = gc_split_weight(wt[tid][k], mx);
      wt[tid][k] = w;
      s += w * lk[tid][k];
    }
    ls[tid] = s;
  }
  gc_barrier();
  for (int64_t i = tid; i < nh * D; i += nt) {
    const int hh = (int)(i / D), d = (int)(i % D);
    const float *p = p0 + (int64_t)hh * SPLIT * W + 2 + d;
    float os = 0.0f;
    GC_UNROLL(SPLIT)
    for (int k = 0; k < SPLIT; k++)
      if (k < ns)
        os += wt[hh][k] * gc_ld_cg(p + (int64_t)k * W);
    store(hh, d, os / ls[hh]);
  }
}
/* The end of a decode attention block whose waves' partials lie in its
 * @shmem buffer (all of its shared memory: attention_decode_mfma,
 * attention_decode_wmma), NW waves of R rows each: m at pm[w·R + r], l at
 * pm[NW·R + w·R + r], o at pm[2·NW·R + (w·R + r)·DMAX + d]. Merges the
 * waves for each of the nh heads; without a split stores each element
 * (store(hh, d, v)); with one puts the block's records at p0 + (hh·SPLIT
 * + sp)·W (p0: the workspace's records of the block's first head, W floats
 * each), takes a ticket of counter cnt, and the last block merges the
 * slices. The ticket's flag and that merge's scratch lie over the
 * partials, which nobody reads after gc_split_last's first barrier. nt:
 * the block's threads. */
template <int NW, int R, int DMAX, int SPLIT, class Store>
GC_DEVICE void gc_split_lds_finish(float *pm, int nh, int D, float *p0, int W, int sp, unsigned *cnt, int nt,
                                   Store store) {
  const float *pl = pm + NW * R, *po = pl + NW * R;
  for (int i = gc_tid(); i < nh * D; i += nt) {
    const int hh = i / D, d = i % D;
    float mx, ls, os;
    gc_split_warps<NW>(pm + hh, pl + hh, po + hh * DMAX + d, R, R * DMAX, mx, ls, os);
    if (SPLIT == 1)
      store(hh, d, os / ls);
    else
      gc_split_put(p0 + (hh * SPLIT + sp) * W, d, mx, ls, os);
  }
  int *s_last = reinterpret_cast<int *>(pm);
  float(*wt)[SPLIT] = reinterpret_cast<float(*)[SPLIT]>(pm + 4), (*lk)[SPLIT] = wt + R, *ls = pm + 4 + 2 * R * SPLIT;
  if (SPLIT == 1 || !gc_split_last(cnt, SPLIT, s_last))
    return;
  gc_split_merge<SPLIT>(p0, W, nh, D, wt, lk, ls, nt, store);
}
/* <<< gc-split */
