/* quant.h — the storage formats of weights, described once: plain floats
 * (F32, F16, BF16) and ggml's quantized block formats (Q8_0, Q4_0, Q4_K,
 * Q5_K, Q6_K) as GGUF files hold them. For each: elements and bytes per
 * block, the exact dequantization to float, and for Q8_0, Q4_0 and Q4_K
 * llama.cpp's reference quantizers. Model loaders, references and kernel
 * templates all read the layouts written out below.
 *
 * A row of n elements is n / block consecutive blocks (n must be a whole
 * number of blocks); a matrix is its rows one after the other. All
 * multi-byte fields are little-endian and may be unaligned (blocks of 18,
 * 34, 144, 176 or 210 bytes follow each other with no padding). "half" is
 * IEEE binary16; h(x) is its exact value as a float. Dequantization is
 * exact in float32 except where a rounding is named: products of a half by
 * the small integers below are exact, so a kernel may compute them in any
 * order and with or without FMA and get the same floats.
 *
 * Q8_0   32 elements, 34 bytes: half d; int8 qs[32].
 *        y[j] = h(d) * qs[j].
 * Q4_0   32 elements, 18 bytes: half d; uint8 qs[16].
 *        y[j]      = h(d) * ((qs[j] & 15) - 8)   j < 16
 *        y[j + 16] = h(d) * ((qs[j] >> 4) - 8)
 * Q4_K   256 elements, 144 bytes: half d; half dmin; uint8 scales[12];
 *        uint8 qs[128]. Eight sub-blocks of 32, each with a 6-bit scale
 *        sc[s] and a 6-bit min m[s] packed in scales[] (see below):
 *        for chunk c = 0..3 (64 elements, 32 bytes qs[32c .. 32c+32)):
 *          y[64c + l]      = fl(h(d)*sc[2c]   * (qs[32c+l] & 15)) - fl(h(dmin)*m[2c])
 *          y[64c + 32 + l] = fl(h(d)*sc[2c+1] * (qs[32c+l] >> 4)) - fl(h(dmin)*m[2c+1])
 *        (l < 32; both products exact; the subtraction is one float32
 *        rounding, to nearest even).
 *        Scales and mins, s = 0..7 (ggml's get_scale_min_k4):
 *          s < 4:  sc[s] = scales[s] & 63;      m[s] = scales[s+4] & 63
 *          s >= 4: sc[s] = (scales[s+4] & 15) | ((scales[s-4] >> 6) << 4)
 *                  m[s]  = (scales[s+4] >> 4) | ((scales[s]   >> 6) << 4)
 * Q5_K   256 elements, 176 bytes: half d; half dmin; uint8 scales[12];
 *        uint8 qh[32]; uint8 qs[128]. As Q4_K with a fifth bit per
 *        element from qh: for chunk c, l < 32,
 *          q_lo = (qs[32c+l] & 15) + 16 * ((qh[l] >> (2c))   & 1)
 *          q_hi = (qs[32c+l] >> 4) + 16 * ((qh[l] >> (2c+1)) & 1)
 *          y[64c + l] = fl(h(d)*sc[2c]*q_lo) - fl(h(dmin)*m[2c]), and
 *          y[64c + 32 + l] likewise with sc[2c+1], m[2c+1], q_hi.
 * Q6_K   256 elements, 210 bytes: uint8 ql[128]; uint8 qh[64];
 *        int8 scales[16]; half d (d is last). Two halves of 128
 *        elements, n = 0, 1 (ql + 64n, qh + 32n, scales + 8n), l < 32,
 *        is = l / 16:
 *          q1 = ((ql[64n+l]    & 15) | (((qh[32n+l] >> 0) & 3) << 4)) - 32
 *          q2 = ((ql[64n+l+32] & 15) | (((qh[32n+l] >> 2) & 3) << 4)) - 32
 *          q3 = ((ql[64n+l]    >> 4) | (((qh[32n+l] >> 4) & 3) << 4)) - 32
 *          q4 = ((ql[64n+l+32] >> 4) | (((qh[32n+l] >> 6) & 3) << 4)) - 32
 *          y[128n + l]      = h(d) * scales[8n + is]     * q1
 *          y[128n + l + 32] = h(d) * scales[8n + is + 2] * q2
 *          y[128n + l + 64] = h(d) * scales[8n + is + 4] * q3
 *          y[128n + l + 96] = h(d) * scales[8n + is + 6] * q4
 *        (the products are exact in float32).
 * F32, F16, BF16: blocks of one element of 4, 2, 2 bytes; BF16 is the
 *        upper half of a float32's bits.
 *
 * ggml formats gcore reads but has no kernels for: the loader dequantizes
 * them (gc_quant_ggml_dequantize) and rounds the floats to F16 once
 * (models/weights.c). They are what llama.cpp's K-quant mixes fall back to
 * for rows that are not whole 256-element blocks (Q5_0, Q5_1, Q8_0), its
 * Q2_K/Q3_K mixes, and its legacy and importance-matrix 4-bit types. ggml
 * type ids in brackets; j < 16 unless said; y exact in float32 but where
 * a rounding is named.
 * Q4_1 [3]   32 elements, 20 bytes: half d; half m; uint8 qs[16].
 *        y[j] = fl(h(d) * (qs[j] & 15) + h(m)), y[j + 16] likewise with
 *        qs[j] >> 4.
 * Q5_0 [6]   32 elements, 22 bytes: half d; uint8 qh[4]; uint8 qs[16].
 *        With H the little-endian word qh: q_j = (qs[j] & 15) | bit j of
 *        H << 4, q_{j+16} = (qs[j] >> 4) | bit j+16 of H << 4;
 *        y[i] = h(d) * (q_i - 16), i < 32.
 * Q5_1 [7]   32 elements, 24 bytes: half d; half m; uint8 qh[4];
 *        uint8 qs[16]. q_i as Q5_0's; y[i] = fl(h(d) * q_i + h(m)).
 * Q2_K [10]  256 elements, 84 bytes: uint8 scales[16]; uint8 qs[64];
 *        half d; half dmin. Element e = 128n + 32k + l (n < 2, k < 4,
 *        l < 32): s = scales[8n + 2k + l/16], q = (qs[32n + l] >> 2k) & 3,
 *        y[e] = fl(h(d) * (s & 15) * q - h(dmin) * (s >> 4)).
 * Q3_K [11]  256 elements, 110 bytes: uint8 hmask[32]; uint8 qs[64];
 *        uint8 scales[12]; half d. Element e = 128n + 32k + l as Q2_K:
 *        q = ((qs[32n + l] >> 2k) & 3) - (bit 4n + k of hmask[l] ? 0 : 4),
 *        y[e] = h(d) * sc[8n + 2k + l/16] * q, with the 6-bit scales
 *        (i < 16) sc[i] = (lo | hi << 4) - 32, lo = scales[i] & 15 for
 *        i < 8, scales[i - 8] >> 4 after; hi = (scales[8 + i % 4] >>
 *        2(i / 4)) & 3.
 * IQ4_NL [20] 32 elements, 18 bytes: half d; uint8 qs[16]. With K =
 *        {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53,
 *        69, 89, 113}: y[j] = h(d) * K[qs[j] & 15], y[j + 16] = h(d) *
 *        K[qs[j] >> 4].
 * IQ4_XS [23] 256 elements, 136 bytes: half d; uint16 scales_h; uint8
 *        scales_l[4]; uint8 qs[128]. Sub-block b < 8 (32 elements, qs[16b
 *        .. 16b+16)) is an IQ4_NL block with scale h(d) * (ls - 32),
 *        ls = ((scales_l[b/2] >> 4(b%2)) & 15) | ((scales_h >> 2b) & 3) << 4
 *        (the products exact: 11 + 6 + 7 bits).
 *
 * gcore's device layouts (never in files): eight Q8_0 or Q4_0 blocks (256
 * elements, blocks j = 0..7) with their bytes permuted so that a GPU lane
 * reads its part t (t = 0..3: elements 4t..4t+3 and 16+4t..16+4t+3 of
 * each block, the k's of an mma fragment's lane t) of all eight blocks as
 * one aligned run, and the scales apart. Same values, same bytes per
 * element; gc_quant_repack makes them from the GGUF blocks.
 * Q8_0R  256 elements, 272 bytes: int8 qs[256]; half d[8].
 *        qs[64t + 8j + i] = block j's qs[4t + i], qs[64t + 8j + 4 + i] =
 *        block j's qs[16 + 4t + i] (i < 4); d[j] = block j's d.
 * Q4_0R  256 elements, 144 bytes: uint8 qs[128]; half d[8].
 *        qs[32t + 4j + i] = block j's qs[4t + i] (i < 4): its low nibble
 *        element 32j + 4t + i, its high nibble 32j + 16 + 4t + i.
 * Q4_KR  one Q4_K block (256 elements, 144 bytes), its qs first and
 *        permuted, then its 16 leading bytes: uint8 qs[128]; half d;
 *        half dmin; uint8 scales[12]. qs[32t + 8c + i] = Q4_K qs[32c +
 *        4t + i], qs[32t + 8c + 4 + i] = Q4_K qs[32c + 16 + 4t + i]
 *        (c, t < 4, i < 4): part t of sub-blocks 2c (low nibbles) and
 *        2c + 1 (high nibbles).
 * Q6_KR  one Q6_K block (256 elements) in 224 bytes: its ql and qh
 *        permuted, its scales and d as they were, then 14 zero bytes (so
 *        that blocks are whole 16-byte chunks, as a tensor map of them
 *        needs): uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d;
 *        uint8 pad[14]. ql[32t + 16n + 8c + 4h + i] = Q6_K ql[64n + 32c
 *        + 16h + 4t + i], qh[16t + 8n + 4h + i] = Q6_K qh[32n + 16h + 4t
 *        + i] (n, c, h < 2; t, i < 4): lane t's word (n, c, h) of ql
 *        holds the low nibbles of units 4n + c (low 4 bits of each byte)
 *        and 4n + 2 + c (high), its elements 16h + 4t .. + 3; its word
 *        (n, h) of qh the 2-bit fields of units 4n .. 4n + 3 (bits 2u). */
#ifndef GC_BASE_QUANT_H
#define GC_BASE_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"

/* The storage types gcore reads. F32, F16 and BF16 keep the numbering of
 * the problems' dtypes (core/problem.h) and of safetensors dtypes. */
typedef enum gc_qtype {
  GC_QT_F32 = 0,
  GC_QT_F16 = 1,
  GC_QT_BF16 = 2,
  GC_QT_Q8_0 = 3,
  GC_QT_Q4_0 = 4,
  GC_QT_Q4_K = 5,
  GC_QT_Q5_K = 6,
  GC_QT_Q6_K = 7,
  GC_QT_Q8_0R = 8, /* gcore's device layouts (above): not GGUF types */
  GC_QT_Q4_0R = 9,
  GC_QT_Q4_KR = 10,
  GC_QT_Q6_KR = 11,
  GC_QT_COUNT
} gc_qtype_t;

typedef struct gc_qformat {
  const char *name;   /* ggml's spelling: "F32", "Q4_K" */
  uint32_t ggml_type; /* the type id in GGUF tensor infos */
  int block;          /* elements per block (1 for F32, F16, BF16) */
  int bytes;          /* bytes per block */
  int can_quantize;   /* gc_quant_quantize writes this format */
  int layout;         /* its device layout (a gc_qtype_t, GC_QT_*R), 0 for none */
  int min;            /* 1 where a unit of its blocks has a min besides its scale (Q4_K, Q5_K, Q4_KR) */
} gc_qformat_t;

/* The format of t, or NULL when t is not a gc_qtype_t. Can't fail. */
const gc_qformat_t *gc_quant_format(int t);

/* 1 when t is one of the block formats (Q8_0 .. Q4_0R), 0 for F32, F16,
 * BF16 and anything else. */
int gc_quant_is_block(int t);

/* The gcore type of a ggml type id: GC_OK, or GC_ENOTFOUND when gcore does
 * not read that type (no message: callers name the tensor). */
int gc_quant_from_ggml(uint32_t ggml_type, gc_qtype_t *out);

/* "q8_0", "Q4_K", "f16" (any case) to a type: GC_OK or GC_ENOTFOUND. */
int gc_quant_parse(const char *name, gc_qtype_t *out);

/* Any ggml type id a GGUF file may carry, read by gcore or not: its name,
 * elements and bytes per block, so that every tensor's size can be checked.
 * Returns GC_OK, or GC_ENOTFOUND for an id ggml does not define. */
int gc_quant_ggml_info(uint32_t ggml_type, const char **name, int *block, int *bytes);

/* 1 when ggml type id ggml_type is one of the formats gcore reads but
 * has no kernels for (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS:
 * above), 0 otherwise. */
int gc_quant_ggml_foreign(uint32_t ggml_type);

/* Dequantize n elements (a whole number of blocks, the caller checks) of
 * such a type from src to dst as the formulas above give them: GC_OK, or
 * GC_ENOTFOUND (dst untouched) for any other type. */
int gc_quant_ggml_dequantize(uint32_t ggml_type, const void *src, float *dst, int64_t n);

/* Bytes of n elements of t, or 0 when n is negative, not a whole number
 * of blocks, or t is unknown. */
uint64_t gc_quant_row_bytes(int t, int64_t n);

/* Dequantize n elements (a whole number of blocks, the caller checks with
 * gc_quant_row_bytes) of type t from src to dst, exactly as the layouts
 * above say. Can't fail. */
void gc_quant_dequantize(gc_qtype_t t, const void *src, float *dst, int64_t n);

/* Quantize n floats into t's blocks at dst (gc_quant_row_bytes(t, n)
 * bytes), bit for bit as llama.cpp's quantize_row_q8_0_ref, _q4_0_ref and
 * _q4_K_ref compute them, with every float operation rounded on its own
 * (no fused multiply-add: binaries of llama.cpp built with contraction may
 * pick another rounding in rare near-ties). F32/F16/BF16 are conversions
 * (round to nearest even). GC_EINVAL when n is not a whole number of
 * blocks, GC_EUNSUPPORTED for Q5_K, Q6_K and Q6_KR (read, never written).
 * Q8_0R, Q4_0R and Q4_KR: Q8_0's, Q4_0's and Q4_K's blocks, repacked. */
int gc_quant_quantize(gc_qtype_t t, const float *src, void *dst, int64_t n, gc_err_t *e);

/* The device layout of block format t (Q8_0 → Q8_0R, Q4_0 → Q4_0R, Q4_K →
 * Q4_KR, Q6_K → Q6_KR), or t itself where it has none. */
gc_qtype_t gc_quant_device_layout(gc_qtype_t t);

/* n elements (a whole number of 256) of from's blocks at src rewritten as
 * to's at dst: Q8_0 → Q8_0R, Q4_0 → Q4_0R, Q4_K → Q4_KR or Q6_K → Q6_KR, a permutation
 * of the bytes (exact; Q6_KR adds 14 zero bytes a block). GC_EINVAL for another pair or n not a multiple of 256. */
int gc_quant_repack(gc_qtype_t from, gc_qtype_t to, const void *src, void *dst, int64_t n, gc_err_t *e);

/* IEEE half and bfloat16 conversions; float to them rounds to nearest
 * even (overflow to infinity, NaN stays NaN). */
float gc_half_to_float(uint16_t h);
uint16_t gc_float_to_half(float f);
float gc_bf16_to_float(uint16_t b);
uint16_t gc_float_to_bf16(float f);

#endif
