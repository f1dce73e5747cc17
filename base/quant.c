/* quant.c — the block formats of quant.h: the format table, half and
 * bfloat16 conversions, dequantization of every format, and llama.cpp's
 * reference quantizers for Q8_0, Q4_0 and Q4_K transcribed operation by
 * operation (ggml-quants.c). Products and sums are written as separate
 * statements so that no compiler contracts them into fused multiply-adds:
 * the quantizers must give the same bytes as the numpy ones in the tests. */
#include "quant.h"

#include <math.h>
#include <string.h>
#include <strings.h>

/* Little-endian reads of possibly unaligned fields. */
static uint16_t q_rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void q_wr16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

/* ---- formats ---------------------------------------------------------- */

static const gc_qformat_t q_formats[GC_QT_COUNT] = {
    [GC_QT_F32] = {"F32", 0, 1, 4, 1, 0, 0},
    [GC_QT_F16] = {"F16", 1, 1, 2, 1, 0, 0},
    [GC_QT_BF16] = {"BF16", 30, 1, 2, 1, 0, 0},
    [GC_QT_Q8_0] = {"Q8_0", 8, 32, 34, 1, GC_QT_Q8_0R, 0},
    [GC_QT_Q4_0] = {"Q4_0", 2, 32, 18, 1, GC_QT_Q4_0R, 0},
    [GC_QT_Q4_K] = {"Q4_K", 12, 256, 144, 1, GC_QT_Q4_KR, 1},
    [GC_QT_Q5_K] = {"Q5_K", 13, 256, 176, 0, 0, 1},
    [GC_QT_Q6_K] = {"Q6_K", 14, 256, 210, 0, GC_QT_Q6_KR, 0},
    /* device layouts: no ggml type id (UINT32_MAX is none of ggml's) */
    [GC_QT_Q8_0R] = {"Q8_0R", UINT32_MAX, 256, 272, 1, 0, 0},
    [GC_QT_Q4_0R] = {"Q4_0R", UINT32_MAX, 256, 144, 1, 0, 0},
    [GC_QT_Q4_KR] = {"Q4_KR", UINT32_MAX, 256, 144, 1, 0, 1},
    [GC_QT_Q6_KR] = {"Q6_KR", UINT32_MAX, 256, 224, 0, 0, 0},
};

/* The block decoders of the ggml formats gcore has no kernels for (below:
 * one block at b to its floats at y). */
typedef void q_dq_fn(const uint8_t *b, float *y);
static q_dq_fn dq_q4_1, dq_q5_0, dq_q5_1, dq_q2_k, dq_q3_k, dq_iq4_nl, dq_iq4_xs;

/* Every type id of ggml's enum ggml_type (ids it retired are absent), and
 * for the formats gcore makes F16 at load their decoder. */
static const struct {
  uint32_t id;
  const char *name;
  int block, bytes;
  q_dq_fn *dq;
} q_ggml[] = {
    {0, "F32", 1, 4, 0},           {1, "F16", 1, 2, 0},          {2, "Q4_0", 32, 18, 0},
    {3, "Q4_1", 32, 20, dq_q4_1},  {6, "Q5_0", 32, 22, dq_q5_0}, {7, "Q5_1", 32, 24, dq_q5_1},
    {8, "Q8_0", 32, 34, 0},        {9, "Q8_1", 32, 36, 0},       {10, "Q2_K", 256, 84, dq_q2_k},
    {11, "Q3_K", 256, 110, dq_q3_k}, {12, "Q4_K", 256, 144, 0},  {13, "Q5_K", 256, 176, 0},
    {14, "Q6_K", 256, 210, 0},     {15, "Q8_K", 256, 292, 0},    {16, "IQ2_XXS", 256, 66, 0},
    {17, "IQ2_XS", 256, 74, 0},    {18, "IQ3_XXS", 256, 98, 0},  {19, "IQ1_S", 256, 50, 0},
    {20, "IQ4_NL", 32, 18, dq_iq4_nl}, {21, "IQ3_S", 256, 110, 0}, {22, "IQ2_S", 256, 82, 0},
    {23, "IQ4_XS", 256, 136, dq_iq4_xs}, {24, "I8", 1, 1, 0},     {25, "I16", 1, 2, 0},
    {26, "I32", 1, 4, 0},          {27, "I64", 1, 8, 0},         {28, "F64", 1, 8, 0},
    {29, "IQ1_M", 256, 56, 0},     {30, "BF16", 1, 2, 0},        {34, "TQ1_0", 256, 54, 0},
    {35, "TQ2_0", 256, 66, 0},     {39, "MXFP4", 32, 17, 0},
};

/* q_ggml's row of ggml type id, or -1. */
static int q_ggml_row(uint32_t id) {
  for (size_t i = 0; i < GC_ARRAY_LEN(q_ggml); i++)
    if (q_ggml[i].id == id) return (int)i;
  return -1;
}

const gc_qformat_t *gc_quant_format(int t) {
  return t >= 0 && t < GC_QT_COUNT ? &q_formats[t] : NULL;
}

int gc_quant_is_block(int t) { return t >= GC_QT_Q8_0 && t < GC_QT_COUNT; }

int gc_quant_from_ggml(uint32_t ggml_type, gc_qtype_t *out) {
  for (int t = 0; t < GC_QT_COUNT; t++)
    if (q_formats[t].ggml_type == ggml_type && ggml_type != UINT32_MAX) {
      *out = (gc_qtype_t)t;
      return GC_OK;
    }
  return GC_ENOTFOUND;
}

int gc_quant_parse(const char *name, gc_qtype_t *out) {
  for (int t = 0; name && t < GC_QT_COUNT; t++)
    if (!strcasecmp(name, q_formats[t].name)) {
      *out = (gc_qtype_t)t;
      return GC_OK;
    }
  return GC_ENOTFOUND;
}

int gc_quant_ggml_info(uint32_t ggml_type, const char **name, int *block, int *bytes) {
  int i = q_ggml_row(ggml_type);
  if (i < 0) return GC_ENOTFOUND;
  *name = q_ggml[i].name;
  *block = q_ggml[i].block;
  *bytes = q_ggml[i].bytes;
  return GC_OK;
}

uint64_t gc_quant_row_bytes(int t, int64_t n) {
  const gc_qformat_t *f = gc_quant_format(t);
  if (!f || n < 0 || n % f->block) return 0;
  return (uint64_t)(n / f->block) * (uint64_t)f->bytes;
}

/* ---- half and bfloat16 ------------------------------------------------ */

float gc_half_to_float(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 31, m = h & 1023, bits;
  if (ex == 0) {
    float f = (float)m * 0x1p-24f; /* zero or subnormal: exact */
    return s ? -f : f;
  }
  bits = ex == 31 ? s | 0x7f800000u | m << 13 : s | (ex + 112) << 23 | m << 13;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t gc_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t s = (uint16_t)(x >> 16 & 0x8000);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00 | (a >> 13 & 0x3ff)); /* NaN stays NaN */
  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00);                   /* rounds past 65504 */
  if (a >= 0x38800000u) {                                                 /* normal half */
    uint32_t r = a - 0x38000000u;                                         /* exponent rebiased */
    r += 0xfff + (r >> 13 & 1);
    return (uint16_t)(s | r >> 13);
  }
  float v = fabsf(f) * 0x1p24f; /* subnormal half: units of 2^-24, exact scaling */
  return (uint16_t)(s | (uint16_t)lrintf(v));
}

float gc_bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t gc_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(x >> 16 | 64); /* quiet NaN */
  return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

/* ---- dequantization ----------------------------------------------------- */

/* Sub-block s's 6-bit scale and min of a Q4_K/Q5_K block (get_scale_min_k4). */
static void q_scale_min_k4(int s, const uint8_t *q, int *sc, int *m) {
  if (s < 4) {
    *sc = q[s] & 63;
    *m = q[s + 4] & 63;
  } else {
    *sc = (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4);
    *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

static void dq_q8_0(const uint8_t *b, float *y) {
  float d = gc_half_to_float(q_rd16(b));
  for (int j = 0; j < 32; j++) y[j] = d * (float)(int8_t)b[2 + j];
}

static void dq_q4_0(const uint8_t *b, float *y) {
  float d = gc_half_to_float(q_rd16(b));
  for (int j = 0; j < 16; j++) {
    y[j] = d * (float)((b[2 + j] & 15) - 8);
    y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
  }
}

/* ---- device layouts (quant.h: Q8_0R, Q4_0R) ------------------------------- */

/* The offset in a Q8_0R (q8 = 1) or Q4_0R block's qs of block j's qs[k]
 * (k < 32 for Q8_0, < 16 for Q4_0). */
static int q_roff(int q8, int j, int k) {
  if (!q8) return 32 * (k / 4) + 4 * j + k % 4;
  int hi = k >= 16, kk = k % 16;
  return 64 * (kk / 4) + 8 * j + 4 * hi + kk % 4;
}

/* Eight GGUF blocks at src (Q8_0 or Q4_0) as one device block at dst. */
static void q_repack8(int q8, const uint8_t *src, uint8_t *dst) {
  int nq = q8 ? 32 : 16, bb = 2 + nq;
  for (int j = 0; j < 8; j++) {
    const uint8_t *b = src + j * bb;
    memcpy(dst + 8 * nq + 2 * j, b, 2); /* d */
    for (int k = 0; k < nq; k++) dst[q_roff(q8, j, k)] = b[2 + k];
  }
}

/* One device block at src back to eight GGUF blocks at dst. */
static void q_unpack8(int q8, const uint8_t *src, uint8_t *dst) {
  int nq = q8 ? 32 : 16, bb = 2 + nq;
  for (int j = 0; j < 8; j++) {
    uint8_t *b = dst + j * bb;
    memcpy(b, src + 8 * nq + 2 * j, 2);
    for (int k = 0; k < nq; k++) b[2 + k] = src[q_roff(q8, j, k)];
  }
}

/* A Q4_K block at src as Q4_KR at dst (back: unpack), quant.h's order. */
static void q_repack_k(const uint8_t *src, uint8_t *dst, int unpack) {
  for (int c = 0; c < 4; c++)
    for (int t = 0; t < 4; t++)
      for (int i = 0; i < 4; i++)
        for (int h = 0; h < 2; h++) {
          int r = 32 * t + 8 * c + 4 * h + i, k = 16 + 32 * c + 16 * h + 4 * t + i;
          if (unpack) dst[k] = src[r];
          else dst[r] = src[k];
        }
  if (unpack) memcpy(dst, src + 128, 16);
  else memcpy(dst + 128, src, 16);
}

/* A Q6_K block at src as Q6_KR at dst (back: unpack), quant.h's order. */
static void q_repack_6k(const uint8_t *src, uint8_t *dst, int unpack) {
  for (int n = 0; n < 2; n++)
    for (int h = 0; h < 2; h++)
      for (int t = 0; t < 4; t++)
        for (int i = 0; i < 4; i++) {
          for (int c = 0; c < 2; c++) { /* ql */
            int r = 32 * t + 16 * n + 8 * c + 4 * h + i, k = 64 * n + 32 * c + 16 * h + 4 * t + i;
            if (unpack) dst[k] = src[r];
            else dst[r] = src[k];
          }
          int r = 128 + 16 * t + 8 * n + 4 * h + i, k = 128 + 32 * n + 16 * h + 4 * t + i; /* qh */
          if (unpack) dst[k] = src[r];
          else dst[r] = src[k];
        }
  memcpy(dst + 192, src + 192, 18); /* scales, d */
  if (!unpack) memset(dst + 210, 0, 14);
}

static void dq_rep(int q8, const uint8_t *b, float *y) {
  uint8_t g[8 * 34];
  q_unpack8(q8, b, g);
  for (int j = 0; j < 8; j++) {
    if (q8) dq_q8_0(g + 34 * j, y + 32 * j);
    else dq_q4_0(g + 18 * j, y + 32 * j);
  }
}

gc_qtype_t gc_quant_device_layout(gc_qtype_t t) {
  const gc_qformat_t *f = gc_quant_format((int)t);
  return f && f->layout ? (gc_qtype_t)f->layout : t;
}

int gc_quant_repack(gc_qtype_t from, gc_qtype_t to, const void *src, void *dst, int64_t n, gc_err_t *e) {
  int q8 = from == GC_QT_Q8_0;
  if (gc_quant_device_layout(from) == from || to != gc_quant_device_layout(from)) /* the one table */
    return gc_err_set(e, GC_EINVAL, "no repacking from %s to %s", gc_quant_format(from) ? gc_quant_format(from)->name : "?",
                      gc_quant_format(to) ? gc_quant_format(to)->name : "?");
  if (n < 0 || n % 256)
    return gc_err_set(e, GC_EINVAL, "%lld elements are not a whole number of %s blocks of 256", (long long)n,
                      gc_quant_format(to)->name);
  const uint8_t *s = src;
  uint8_t *d = dst;
  int sb = gc_quant_format(from)->bytes * (256 / gc_quant_format(from)->block), db = gc_quant_format(to)->bytes;
  for (int64_t i = 0; i < n / 256; i++) {
    if (from == GC_QT_Q4_K) q_repack_k(s + i * sb, d + i * db, 0);
    else if (from == GC_QT_Q6_K) q_repack_6k(s + i * sb, d + i * db, 0);
    else q_repack8(q8, s + i * sb, d + i * db);
  }
  return GC_OK;
}

/* Q4_K (qh NULL) and Q5_K (qh: the fifth bits). */
static void dq_k45(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y) {
  float d = gc_half_to_float(q_rd16(b)), dmin = gc_half_to_float(q_rd16(b + 2));
  const uint8_t *scales = b + 4;
  for (int c = 0; c < 4; c++) {
    int sc0, m0, sc1, m1;
    q_scale_min_k4(2 * c, scales, &sc0, &m0);
    q_scale_min_k4(2 * c + 1, scales, &sc1, &m1);
    float d0 = d * (float)sc0, mm0 = dmin * (float)m0, d1 = d * (float)sc1, mm1 = dmin * (float)m1;
    for (int l = 0; l < 32; l++) {
      int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
      if (qh) {
        lo += 16 * (qh[l] >> (2 * c) & 1);
        hi += 16 * (qh[l] >> (2 * c + 1) & 1);
      }
      float p0 = d0 * (float)lo, p1 = d1 * (float)hi;
      y[64 * c + l] = p0 - mm0;
      y[64 * c + 32 + l] = p1 - mm1;
    }
  }
}

static void dq_q6_k(const uint8_t *b, float *y) {
  const uint8_t *ql = b, *qh = b + 128;
  const int8_t *sc = (const int8_t *)(b + 192);
  float d = gc_half_to_float(q_rd16(b + 208));
  for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; l++) {
      int is = l / 16;
      int q1 = ((ql[l] & 15) | ((qh[l] >> 0 & 3) << 4)) - 32;
      int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2 & 3) << 4)) - 32;
      int q3 = ((ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4)) - 32;
      int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)) - 32;
      y[l] = d * (float)sc[is] * (float)q1;
      y[l + 32] = d * (float)sc[is + 2] * (float)q2;
      y[l + 64] = d * (float)sc[is + 4] * (float)q3;
      y[l + 96] = d * (float)sc[is + 6] * (float)q4;
    }
  }
}

void gc_quant_dequantize(gc_qtype_t t, const void *src, float *dst, int64_t n) {
  const uint8_t *p = src;
  const gc_qformat_t *f = gc_quant_format(t);
  int64_t nb = n / f->block;
  for (int64_t i = 0; i < nb; i++, p += f->bytes, dst += f->block) {
    switch (t) {
      case GC_QT_F32: memcpy(dst, p, 4); break;
      case GC_QT_F16: dst[0] = gc_half_to_float(q_rd16(p)); break;
      case GC_QT_BF16: dst[0] = gc_bf16_to_float(q_rd16(p)); break;
      case GC_QT_Q8_0: dq_q8_0(p, dst); break;
      case GC_QT_Q4_0: dq_q4_0(p, dst); break;
      case GC_QT_Q4_K: dq_k45(p, NULL, p + 16, dst); break;
      case GC_QT_Q5_K: dq_k45(p, p + 16, p + 48, dst); break;
      case GC_QT_Q6_K: dq_q6_k(p, dst); break;
      case GC_QT_Q8_0R: dq_rep(1, p, dst); break;
      case GC_QT_Q4_0R: dq_rep(0, p, dst); break;
      case GC_QT_Q4_KR: {
        uint8_t k[144];
        q_repack_k(p, k, 1);
        dq_k45(k, NULL, k + 16, dst);
        break;
      }
      case GC_QT_Q6_KR: {
        uint8_t k[210];
        q_repack_6k(p, k, 1);
        dq_q6_k(k, dst);
        break;
      }
      default: break;
    }
  }
}

/* ---- ggml's formats gcore has no kernels for (made dense at load) -------- */

static const int8_t q_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Q4_1 and Q5_1 (a min m: y = d·q + m) and Q5_0 (m NULL: y = d·(q −
 * 16)): 32 elements at y; q is the low nibble of qs[j] (element j) or its
 * high one (element j + 16), with bit j of the little-endian word qh as
 * its fifth bit where qh is given. */
static void dq_legacy(const uint8_t *qs, const uint8_t *qh, float d, const float *m, float *y) {
  uint32_t h = qh ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
  for (int j = 0; j < 32; j++) {
    int q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | (int)(h >> j & 1) << 4;
    y[j] = m ? d * (float)q + *m : d * (float)(q - 16);
  }
}
static void dq_q4_1(const uint8_t *b, float *y) { /* half d, half m, qs[16] */
  float m = gc_half_to_float(q_rd16(b + 2));
  dq_legacy(b + 4, NULL, gc_half_to_float(q_rd16(b)), &m, y);
}
static void dq_q5_0(const uint8_t *b, float *y) { /* half d, qh[4], qs[16] */
  dq_legacy(b + 6, b + 2, gc_half_to_float(q_rd16(b)), NULL, y);
}
static void dq_q5_1(const uint8_t *b, float *y) { /* half d, half m, qh[4], qs[16] */
  float m = gc_half_to_float(q_rd16(b + 2));
  dq_legacy(b + 8, b + 4, gc_half_to_float(q_rd16(b)), &m, y);
}

/* Q2_K: 256 elements; scales[16] (low nibble scale, high nibble min),
 * qs[64] (2 bits), then half d, half dmin. */
static void dq_q2_k(const uint8_t *p, float *y) {
  float d = gc_half_to_float(q_rd16(p + 80)), dmin = gc_half_to_float(q_rd16(p + 82));
  for (int e = 0; e < 256; e++) {
    int n = e / 128, j = e % 128 / 32, l = e % 32, sc = p[8 * n + 2 * j + l / 16];
    int q = p[16 + 32 * n + l] >> 2 * j & 3;
    y[e] = d * (float)(sc & 15) * (float)q - dmin * (float)(sc >> 4);
  }
}

/* Q3_K's 6-bit scale is (0 .. 15) from its 12 packed bytes. */
static int q3k_scale(const uint8_t *s, int is) {
  int lo = is < 8 ? s[is] & 15 : s[is - 8] >> 4;
  int hi = s[8 + is % 4] >> 2 * (is / 4) & 3;
  return (lo | hi << 4) - 32;
}

/* Q3_K: 256 elements; hmask[32], qs[64] (2 bits), scales[12], half d. */
static void dq_q3_k(const uint8_t *p, float *y) {
  float d = gc_half_to_float(q_rd16(p + 108));
  for (int e = 0; e < 256; e++) {
    int n = e / 128, j = e % 128 / 32, l = e % 32;
    int q = (p[32 + 32 * n + l] >> 2 * j & 3) - (p[l] >> (4 * n + j) & 1 ? 0 : 4);
    y[e] = d * (float)q3k_scale(p + 96, 8 * n + 2 * j + l / 16) * (float)q;
  }
}

/* IQ4_NL (32 elements: half d, qs[16]) and IQ4_XS (256: half d, uint16
 * scales_h, scales_l[4], qs[128]): 4-bit indices into q_iq4nl. */
static void dq_iq4(const uint8_t *qs, float d, float *y) {
  for (int j = 0; j < 16; j++) {
    y[j] = d * (float)q_iq4nl[qs[j] & 15];
    y[j + 16] = d * (float)q_iq4nl[qs[j] >> 4];
  }
}
static void dq_iq4_nl(const uint8_t *b, float *y) { dq_iq4(b + 2, gc_half_to_float(q_rd16(b)), y); }
static void dq_iq4_xs(const uint8_t *p, float *y) {
  float d = gc_half_to_float(q_rd16(p));
  unsigned sh = q_rd16(p + 2);
  for (int b = 0; b < 8; b++) {
    int ls = (p[4 + b / 2] >> 4 * (b % 2) & 15) | (int)(sh >> 2 * b & 3) << 4;
    dq_iq4(p + 8 + 16 * b, d * (float)(ls - 32), y + 32 * b);
  }
}

int gc_quant_ggml_foreign(uint32_t ggml_type) {
  int i = q_ggml_row(ggml_type);
  return i >= 0 && q_ggml[i].dq;
}

int gc_quant_ggml_dequantize(uint32_t ggml_type, const void *src, float *dst, int64_t n) {
  int i = q_ggml_row(ggml_type);
  if (i < 0 || !q_ggml[i].dq) return GC_ENOTFOUND;
  const uint8_t *p = src;
  for (int64_t b = 0; b < n / q_ggml[i].block; b++, p += q_ggml[i].bytes, dst += q_ggml[i].block)
    q_ggml[i].dq(p, dst);
  return GC_OK;
}

/* ---- llama.cpp's reference quantizers ------------------------------------ */

/* Round to nearest, ties to even, as ggml's nearest_int (|v| < 2^22). */
static int q_nearest(float v) {
  float w = v + 12582912.f;
  int32_t i;
  memcpy(&i, &w, 4);
  return (i & 0x007fffff) - 0x00400000;
}

/* quantize_row_q8_0_ref: d = max|x| / 127, q = roundf(x / d). */
static void q_q8_0(const float *x, uint8_t *b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  q_wr16(b, gc_float_to_half(d));
  for (int j = 0; j < 32; j++) {
    float x0 = x[j] * id;
    b[2 + j] = (uint8_t)(int8_t)roundf(x0);
  }
}

/* quantize_row_q4_0_ref: d = (the signed value of largest magnitude) / -8,
 * q = min(15, trunc(x / d + 8.5)). */
static void q_q4_0(const float *x, uint8_t *b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; j++)
    if (amax < fabsf(x[j])) {
      amax = fabsf(x[j]);
      max = x[j];
    }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  q_wr16(b, gc_float_to_half(d));
  for (int j = 0; j < 16; j++) {
    float x0 = x[j] * id, x1 = x[16 + j] * id;
    float s0 = x0 + 8.5f, s1 = x1 + 8.5f;
    int xi0 = (int8_t)s0, xi1 = (int8_t)s1;
    xi0 = xi0 < 15 ? xi0 : 15;
    xi1 = xi1 < 15 ? xi1 : 15;
    b[2 + j] = (uint8_t)(xi0 | xi1 << 4);
  }
}

/* make_qkx2_quants(n = 32, nmax = 15, rmin = -1, rdelta = 0.1, nstep = 20,
 * use_mad = false): levels L[] in [0, 15] and (scale, -min) minimising the
 * weighted squared error of scale * L + min over a small search of scales.
 * Returns the scale; *the_min gets -min (>= 0). */
static float q_qkx2(const float *x, const float *w, uint8_t *L, float *the_min) {
  enum { N = 32, NMAX = 15, NSTEP = 20 };
  const float rmin = -1.0f, rdelta = 0.1f;
  uint8_t Laux[N];
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < N; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    float wx = w[i] * x[i];
    sum_x += wx;
  }
  if (min > 0) min = 0;
  if (max == min) {
    memset(L, 0, N);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = NMAX / (max - min);
  float scale = 1 / iscale;
  float best_mad = 0;
  for (int i = 0; i < N; i++) {
    float xm = x[i] - min;
    float v = iscale * xm;
    int l = q_nearest(v);
    L[i] = (uint8_t)(l < 0 ? 0 : l > NMAX ? NMAX : l);
    float sl = scale * L[i];
    float sm = sl + min;
    float diff = sm - x[i];
    float dd = diff * diff;
    float wd = w[i] * dd;
    best_mad += wd;
  }
  for (int is = 0; is <= NSTEP; is++) {
    float step = rdelta * (float)is;
    float num = rmin + step;
    num = num + NMAX;
    iscale = num / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < N; i++) {
      float xm = x[i] - min;
      float v = iscale * xm;
      int l = q_nearest(v);
      l = l < 0 ? 0 : l > NMAX ? NMAX : l;
      Laux[i] = (uint8_t)l;
      float wl = w[i] * (float)l;
      sum_l += wl;
      float wll = wl * (float)l;
      sum_l2 += wll;
      float wlx = wl * x[i];
      sum_xl += wlx;
    }
    float a = sum_w * sum_l2, b = sum_l * sum_l;
    float D = a - b;
    if (D > 0) {
      float s1 = sum_w * sum_xl, s2 = sum_x * sum_l;
      float this_scale = (s1 - s2) / D;
      float m1 = sum_l2 * sum_x, m2 = sum_l * sum_xl;
      float this_min = (m1 - m2) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0;
      for (int i = 0; i < N; i++) {
        float sl = this_scale * Laux[i];
        float sm = sl + this_min;
        float diff = sm - x[i];
        float dd = diff * diff;
        float wd = w[i] * dd;
        mad += wd;
      }
      if (mad < best_mad) {
        memcpy(L, Laux, N);
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/* quantize_row_q4_K_ref for one block of 256. */
static void q_q4_k(const float *x, uint8_t *b) {
  uint8_t L[256], *scales = b + 4, *q = b + 16;
  float weights[32], mins[8], sc[8], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; j++) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; l++) {
      float sq = x[32 * j + l] * x[32 * j + l];
      sum_x2 += sq;
    }
    float av_x = sqrtf(sum_x2 / 32);
    for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
    sc[j] = q_qkx2(x + 32 * j, weights, L + 32 * j, &mins[j]);
    if (sc[j] > max_scale) max_scale = sc[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  memset(scales, 0, 12);
  for (int j = 0; j < 8; j++) {
    uint8_t ls = (uint8_t)q_nearest(inv_scale * sc[j]), lm = (uint8_t)q_nearest(inv_min * mins[j]);
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      scales[j] = ls;
      scales[j + 4] = lm;
    } else {
      scales[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
      scales[j] |= (uint8_t)((lm >> 4) << 6);
    }
  }
  uint16_t hd = gc_float_to_half(max_scale / 63.f), hm = gc_float_to_half(max_min / 63.f);
  q_wr16(b, hd);
  q_wr16(b + 2, hm);
  for (int j = 0; j < 8; j++) {
    int s, m;
    q_scale_min_k4(j, scales, &s, &m);
    const float d = gc_half_to_float(hd) * (float)s;
    if (d == 0.0f) continue; /* keeps the levels make_qkx2_quants chose */
    const float dm = gc_half_to_float(hm) * (float)m;
    for (int ii = 0; ii < 32; ii++) {
      float v = x[32 * j + ii] + dm;
      int l = q_nearest(v / d);
      L[32 * j + ii] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
    }
  }
  for (int c = 0; c < 4; c++)
    for (int l = 0; l < 32; l++) q[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + l + 32] << 4);
}

int gc_quant_quantize(gc_qtype_t t, const float *src, void *dst, int64_t n, gc_err_t *e) {
  const gc_qformat_t *f = gc_quant_format(t);
  if (!f) return gc_err_set(e, GC_EINVAL, "unknown storage type %d", (int)t);
  if (!f->can_quantize)
    return gc_err_set(e, GC_EUNSUPPORTED, "gcore reads %s but does not write it (it writes Q8_0, Q4_0, Q4_K)",
                      f->name);
  if (n < 0 || n % f->block)
    return gc_err_set(e, GC_EINVAL, "%lld elements are not a whole number of %s blocks of %d", (long long)n,
                      f->name, f->block);
  uint8_t *p = dst;
  for (int64_t i = 0; i < n; i += f->block, p += f->bytes, src += f->block) {
    switch (t) {
      case GC_QT_F32: memcpy(p, src, 4); break;
      case GC_QT_F16: q_wr16(p, gc_float_to_half(src[0])); break;
      case GC_QT_BF16: q_wr16(p, gc_float_to_bf16(src[0])); break;
      case GC_QT_Q8_0: q_q8_0(src, p); break;
      case GC_QT_Q4_0: q_q4_0(src, p); break;
      case GC_QT_Q4_K: q_q4_k(src, p); break;
      case GC_QT_Q8_0R:
      case GC_QT_Q4_0R: { /* the GGUF blocks, repacked */
        uint8_t g[8 * 34];
        int q8 = t == GC_QT_Q8_0R;
        for (int j = 0; j < 8; j++) (q8 ? q_q8_0 : q_q4_0)(src + 32 * j, g + j * (q8 ? 34 : 18));
        q_repack8(q8, g, p);
        break;
      }
      case GC_QT_Q4_KR: {
        uint8_t k[144];
        q_q4_k(src, k);
        q_repack_k(k, p, 0);
        break;
      }
      default: break;
    }
  }
  return GC_OK;
}
