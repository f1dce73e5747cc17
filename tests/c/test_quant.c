/* test_quant.c — the block formats of base/quant.h: literal blocks worked
 * out by hand and their expected floats, quantizer edge cases (roundf's
 * halves away from zero in Q8_0, Q4_0's truncation, an all-zero Q4_K
 * block), round-trip error bounds, half/bfloat16 conversions.
 *
 * With arguments it is a filter for the pytest suite, which pins the
 * formats against an independent numpy implementation (tests/ggufq.py):
 *   test_quant quantize TYPE IN.f32 OUT.bin     float32 in, blocks out
 *   test_quant dequantize TYPE IN.bin N OUT.f32 N elements of blocks in */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../base/quant.h"

#include "check.h"

/* y[i] == want[i] for every i (exact), else report the first difference. */
static int same(const float *y, const float *want, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (y[i] != want[i]) {
      printf("FAIL %s: element %d is %.9g, expected %.9g\n", what, i, y[i], want[i]);
      return 0;
    }
  return 1;
}

static void test_formats(void) {
  const gc_qformat_t *f = gc_quant_format(GC_QT_Q4_K);
  CHECK(f && f->block == 256 && f->bytes == 144 && f->ggml_type == 12 && !strcmp(f->name, "Q4_K"));
  CHECK(gc_quant_format(GC_QT_Q6_K)->bytes == 210 && gc_quant_format(GC_QT_Q5_K)->bytes == 176);
  CHECK(gc_quant_format(GC_QT_Q8_0)->bytes == 34 && gc_quant_format(GC_QT_Q4_0)->bytes == 18);
  CHECK(gc_quant_format(GC_QT_COUNT) == NULL && gc_quant_format(-1) == NULL);
  /* the min column (templates' QMIN) is the GPU prelude's GC_QMIN_n table:
   * Q4_K, Q5_K and Q4_KR, nothing else */
  for (int q = 0; q < GC_QT_COUNT; q++)
    CHECK(gc_quant_format(q)->min == (q == GC_QT_Q4_K || q == GC_QT_Q5_K || q == GC_QT_Q4_KR));
  gc_qtype_t t;
  CHECK(gc_quant_from_ggml(30, &t) == GC_OK && t == GC_QT_BF16);
  CHECK(gc_quant_from_ggml(3, &t) == GC_ENOTFOUND); /* Q4_1: ggml's, no kernels in gcore (made F16 at load) */
  CHECK(gc_quant_ggml_foreign(3) && gc_quant_ggml_foreign(23) && !gc_quant_ggml_foreign(12) && !gc_quant_ggml_foreign(16));
  CHECK(gc_quant_parse("q4_k", &t) == GC_OK && t == GC_QT_Q4_K);
  CHECK(gc_quant_parse("q4_1", &t) == GC_ENOTFOUND);
  const char *name;
  int blk, bytes;
  CHECK(gc_quant_ggml_info(3, &name, &blk, &bytes) == GC_OK && !strcmp(name, "Q4_1") && bytes == 20);
  CHECK(gc_quant_ggml_info(4, &name, &blk, &bytes) == GC_ENOTFOUND); /* retired id */
  CHECK(gc_quant_row_bytes(GC_QT_Q4_K, 512) == 288 && gc_quant_row_bytes(GC_QT_Q4_K, 100) == 0);
  CHECK(gc_quant_row_bytes(GC_QT_F16, 3) == 6 && gc_quant_row_bytes(GC_QT_Q8_0, -32) == 0);
  CHECK(gc_quant_is_block(GC_QT_Q8_0) && !gc_quant_is_block(GC_QT_BF16));
}

static void test_half(void) {
  CHECK(gc_half_to_float(0x3C00) == 1.0f && gc_half_to_float(0xC000) == -2.0f);
  CHECK(gc_half_to_float(0x0001) == 0x1p-24f && gc_half_to_float(0x7BFF) == 65504.0f);
  CHECK(isinf(gc_half_to_float(0x7C00)) && isnan(gc_half_to_float(0x7E00)));
  CHECK(gc_float_to_half(1.0f) == 0x3C00 && gc_float_to_half(-0.0f) == 0x8000);
  CHECK(gc_float_to_half(65519.0f) == 0x7BFF && gc_float_to_half(65520.0f) == 0x7C00);
  CHECK(gc_float_to_half(1.0f + 0x1p-11f) == 0x3C00);            /* tie: to even */
  CHECK(gc_float_to_half(1.0f + 3 * 0x1p-11f) == 0x3C02);        /* tie: to even (up) */
  CHECK(gc_float_to_half(0x1p-25f) == 0 && gc_float_to_half(0x1.8p-25f) == 1); /* subnormals */
  CHECK(gc_float_to_half(0x1.ffcp-15f) == 0x0400);               /* rounds up to the least normal */
  for (uint32_t h = 0; h < 0x7C00; h++) /* every finite half survives the round trip */
    if (gc_float_to_half(gc_half_to_float((uint16_t)h)) != h) {
      CHECK(0);
      break;
    }
  CHECK(gc_float_to_bf16(1.0f) == 0x3F80 && gc_bf16_to_float(0x4049) == 3.140625f);
  CHECK(gc_float_to_bf16(1.0f + 0x1p-8f) == 0x3F80 && gc_float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);
}

/* ---- dequantization of literal blocks ---------------------------------- */

static void test_q8_0_block(void) {
  uint8_t b[34] = {0x00, 0x38}; /* d = 0.5 */
  int8_t qs[32] = {1, -2, 127, -128, 0, 3};
  memcpy(b + 2, qs, 32);
  float y[32], want[32] = {0.5f, -1.0f, 63.5f, -64.0f, 0.0f, 1.5f};
  gc_quant_dequantize(GC_QT_Q8_0, b, y, 32);
  CHECK(same(y, want, 32, "Q8_0"));
}

static void test_q4_0_block(void) {
  uint8_t b[18] = {0x00, 0x40}; /* d = 2 */
  float y[32], want[32];
  for (int j = 0; j < 32; j++) want[j] = 2.0f * (0 - 8); /* nibbles 0: -16 */
  b[2] = 0x9F;                  /* low 15 -> y[0] = 2*7; high 9 -> y[16] = 2*1 */
  b[3] = 0x08;                  /* low 8 -> y[1] = 0; high 0 -> y[17] = -16 */
  want[0] = 14, want[16] = 2, want[1] = 0, want[17] = -16;
  for (int j = 2; j < 16; j++) b[2 + j] = 0x88, want[j] = want[16 + j] = 0; /* 8 - 8 */
  gc_quant_dequantize(GC_QT_Q4_0, b, y, 32);
  CHECK(same(y, want, 32, "Q4_0"));
}

/* The scales of the K-quant blocks below: sub-block 0 (sc 3, m 2),
 * 1 (sc 5, m 1), 4 (sc 37, m 19: six bits split over three bytes), the rest 0. */
static void k_scales(uint8_t *s) {
  memset(s, 0, 12);
  s[0] = 3 | 2 << 6;  /* sc0 = 3; top bits of sc4 (37 >> 4 = 2) */
  s[4] = 2 | 1 << 6;  /* m0 = 2; top bits of m4 (19 >> 4 = 1) */
  s[1] = 5;           /* sc1 */
  s[5] = 1;           /* m1 */
  s[8] = 5 | 3 << 4;  /* low nibbles of sc4 (37 & 15) and m4 (19 & 15) */
}

/* d = 1, dmin = 0.5: y = sc * q - 0.5 * m per sub-block. */
static void k_expect(float *want, int five_bit) {
  for (int i = 0; i < 256; i++) want[i] = 0.0f;
  for (int i = 0; i < 32; i++) want[i] = -1.0f, want[32 + i] = -0.5f, want[128 + i] = -9.5f;
  want[0] = five_bit ? 3 * (10 + 16) - 1.0f : 3 * 10 - 1.0f; /* qs[0] low nibble 10 */
  want[32] = 5 * 7 - 0.5f;                                    /* qs[0] high nibble 7 */
  want[128] = five_bit ? 37 * (1 + 16) - 9.5f : 37 * 1 - 9.5f; /* qs[64] low nibble 1 */
  want[160] = 0.0f;                                           /* sub-block 5: scale 0 */
}

static void test_q4_k_block(void) {
  uint8_t b[144] = {0x00, 0x3C, 0x00, 0x38}; /* d = 1, dmin = 0.5 */
  k_scales(b + 4);
  b[16 + 0] = 0x7A;
  b[16 + 64] = 0x21;
  float y[256], want[256];
  k_expect(want, 0);
  gc_quant_dequantize(GC_QT_Q4_K, b, y, 256);
  CHECK(same(y, want, 256, "Q4_K"));
}

static void test_q5_k_block(void) {
  uint8_t b[176] = {0x00, 0x3C, 0x00, 0x38};
  k_scales(b + 4);
  b[16 + 0] = 0x01 | 0x10; /* qh[0]: fifth bit of element 0 (chunk 0 low) and of element 128 (chunk 2 low) */
  b[48 + 0] = 0x7A;
  b[48 + 64] = 0x21;
  float y[256], want[256];
  k_expect(want, 1);
  gc_quant_dequantize(GC_QT_Q5_K, b, y, 256);
  CHECK(same(y, want, 256, "Q5_K"));
}

static void test_q6_k_block(void) {
  uint8_t b[210] = {0};
  int8_t *sc = (int8_t *)(b + 192);
  b[208] = 0x00, b[209] = 0x34; /* d = 0.25, stored last */
  sc[0] = -3, sc[2] = 4, sc[4] = -1, sc[6] = 2, sc[15] = 127;
  b[0] = 0x5 | 0xA << 4;                     /* ql[0]: q1 and q3 low nibbles */
  b[32] = 0x3 | 0xF << 4;                    /* ql[32]: q2 and q4 low nibbles */
  b[128] = 2 | 1 << 2 | 3 << 4 | 0 << 6;     /* qh[0]: high bits of q1..q4 */
  float y[256], want[256];
  for (int i = 0; i < 256; i++) want[i] = 0.25f * (float)sc[i / 16] * -32.0f; /* every level 0 - 32 */
  want[0] = 0.25f * -3 * (37 - 32);  /* q1 = 5 | 2 << 4 */
  want[32] = 0.25f * 4 * (19 - 32);  /* q2 = 3 | 1 << 4 */
  want[64] = 0.25f * -1 * (58 - 32); /* q3 = 10 | 3 << 4 */
  want[96] = 0.25f * 2 * (15 - 32);  /* q4 = 15 | 0 << 4 */
  CHECK(want[0] == -3.75f && want[32] == -13.0f && want[64] == -6.5f && want[96] == -8.5f);
  CHECK(want[255] == -1016.0f && want[1] == 24.0f);
  gc_quant_dequantize(GC_QT_Q6_K, b, y, 256);
  CHECK(same(y, want, 256, "Q6_K"));
}

/* ---- quantizers ------------------------------------------------------------ */

static void test_q8_0_quantize(void) {
  float x[32] = {0.5f, -0.5f, 1.5f, 2.5f, 127.0f, -127.0f, -2.5f, 0.49999997f};
  uint8_t b[34];
  CHECK(gc_quant_quantize(GC_QT_Q8_0, x, b, 32, NULL) == GC_OK);
  CHECK(b[0] == 0x00 && b[1] == 0x3C); /* d = 127 / 127 = 1 */
  int8_t want[8] = {1, -1, 2, 3, 127, -127, -3, 0}; /* roundf: halves away from zero */
  CHECK(!memcmp(b + 2, want, 8));
}

static void test_q4_0_quantize(void) {
  float x[32] = {0};
  x[3] = -8.0f, x[5] = 8.0f, x[6] = 7.4f, x[7] = 0.5f, x[8] = -0.5f, x[9] = 0.49f;
  uint8_t b[18];
  CHECK(gc_quant_quantize(GC_QT_Q4_0, x, b, 32, NULL) == GC_OK);
  CHECK(b[0] == 0x00 && b[1] == 0x3C); /* d = -8 / -8: the first largest magnitude */
  int lo[10] = {8, 8, 8, 0, 8, 15, 15, 9, 8, 8}; /* min(15, trunc(x + 8.5)); x[16..] = 0 -> 8 */
  int ok = 1;
  for (int j = 0; j < 10; j++) ok &= (b[2 + j] & 15) == lo[j] && (b[2 + j] >> 4) == 8;
  CHECK(ok);
  float z[32] = {0};
  CHECK(gc_quant_quantize(GC_QT_Q4_0, z, b, 32, NULL) == GC_OK && b[0] == 0x00 && b[1] == 0x80); /* 0 / -8 = -0 */
}

static void test_q4_k_zero_block(void) {
  float x[256] = {0};
  uint8_t b[144], zero[144] = {0};
  CHECK(gc_quant_quantize(GC_QT_Q4_K, x, b, 256, NULL) == GC_OK && !memcmp(b, zero, 144));
}

/* Round trips of a smooth and a random row: the error of each element is
 * within half a quantization step (plus the fp16 rounding of the scales). */
static void test_roundtrip_bounds(void) {
  enum { N = 1024 };
  static float x[N], y[N];
  static uint8_t q[N * 2];
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < N; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1) * (i < N / 2 ? 1.0f : 0.01f);
  }
  const gc_qtype_t types[3] = {GC_QT_Q8_0, GC_QT_Q4_0, GC_QT_Q4_K};
  const double rel[3] = {0.5 / 127 + 1e-3, 1.0 / 8 + 2e-3, 1.0 / 15 + 2e-2}; /* of the block's max |x| */
  for (int k = 0; k < 3; k++) {
    int blk = gc_quant_format(types[k])->block, ok = 1;
    CHECK(gc_quant_quantize(types[k], x, q, N, NULL) == GC_OK);
    gc_quant_dequantize(types[k], q, y, N);
    for (int b0 = 0; b0 < N; b0 += blk) {
      double amax = 0;
      for (int i = b0; i < b0 + blk; i++) amax = fmax(amax, fabs(x[i]));
      for (int i = b0; i < b0 + blk; i++) ok &= fabs((double)y[i] - x[i]) <= rel[k] * amax;
    }
    if (!ok) printf("FAIL round trip of %s\n", gc_quant_format(types[k])->name);
    CHECK(ok);
  }
  gc_err_t e = {0};
  CHECK(gc_quant_quantize(GC_QT_Q4_K, x, q, 100, &e) == GC_EINVAL && strstr(e.msg, "Q4_K"));
  CHECK(gc_quant_quantize(GC_QT_Q6_K, x, q, 256, &e) == GC_EUNSUPPORTED && strstr(e.msg, "Q6_K"));
}

/* The device layouts by hand: where one byte of a GGUF block lands, the
 * scales after the levels, values unchanged, and the refusals. */
static void test_device_layouts(void) {
  static uint8_t g[8 * 34], r[272], back[8 * 34];
  static float y0[256], y1[256];
  for (int i = 0; i < 8 * 34; i++) g[i] = (uint8_t)(i * 7 + 3);
  for (int j = 0; j < 8; j++) g[34 * j] = (uint8_t)(0x10 + j), g[34 * j + 1] = 0x3c; /* d near 1 */
  CHECK(gc_quant_repack(GC_QT_Q8_0, GC_QT_Q8_0R, g, r, 256, NULL) == GC_OK);
  CHECK(r[8 * 2 + 4 + 2] == g[34 * 2 + 2 + 18]); /* block 2's qs[18]: part 0, high run, i = 2 */
  CHECK(r[64 * 3 + 8 * 7 + 1] == g[34 * 7 + 2 + 13]); /* block 7's qs[13]: part 3, low run */
  CHECK(r[256 + 2 * 5] == 0x15 && r[257 + 2 * 5] == 0x3c); /* block 5's d */
  gc_quant_dequantize(GC_QT_Q8_0, g, y0, 256);
  gc_quant_dequantize(GC_QT_Q8_0R, r, y1, 256);
  CHECK(!memcmp(y0, y1, sizeof y0));
  for (int j = 0; j < 8; j++) memmove(back + 18 * j, g + 34 * j, 18); /* eight Q4_0 blocks */
  CHECK(gc_quant_repack(GC_QT_Q4_0, GC_QT_Q4_0R, back, r, 256, NULL) == GC_OK);
  CHECK(r[32 * 1 + 4 * 3 + 1] == back[18 * 3 + 2 + 5]); /* block 3's qs[5] */
  CHECK(r[128 + 2 * 6] == 0x16);
  gc_quant_dequantize(GC_QT_Q4_0, back, y0, 256);
  gc_quant_dequantize(GC_QT_Q4_0R, r, y1, 256);
  CHECK(!memcmp(y0, y1, sizeof y0));
  /* a Q4_K block: its qs permuted by part, its 16 leading bytes last */
  uint8_t k[144], kr[144];
  for (int i = 0; i < 144; i++) k[i] = (uint8_t)(i * 5 + 1);
  k[0] = 0x00, k[1] = 0x3c, k[2] = 0x00, k[3] = 0x38; /* d = 1, dmin = 0.5 */
  CHECK(gc_quant_repack(GC_QT_Q4_K, GC_QT_Q4_KR, k, kr, 256, NULL) == GC_OK);
  CHECK(kr[32 * 2 + 8 * 3 + 4 + 1] == k[16 + 32 * 3 + 16 + 4 * 2 + 1]); /* part 2 of sub-block 7, i = 1 */
  CHECK(!memcmp(kr + 128, k, 16));
  gc_quant_dequantize(GC_QT_Q4_K, k, y0, 256);
  gc_quant_dequantize(GC_QT_Q4_KR, kr, y1, 256);
  CHECK(!memcmp(y0, y1, sizeof y0));
  CHECK(gc_quant_device_layout(GC_QT_Q4_0) == GC_QT_Q4_0R && gc_quant_device_layout(GC_QT_Q4_K) == GC_QT_Q4_KR &&
        gc_quant_device_layout(GC_QT_Q6_K) == GC_QT_Q6_KR && gc_quant_device_layout(GC_QT_Q5_K) == GC_QT_Q5_K);
  /* Q6_KR: ql and qh permuted by lane part, scales and d kept, 14 zero bytes */
  uint8_t q6[210], q6r[224];
  for (int i = 0; i < 210; i++) q6[i] = (uint8_t)(i * 7 + 3);
  q6[208] = 0x00, q6[209] = 0x3c; /* d = 1 */
  memset(q6r, 0xAA, sizeof q6r);
  CHECK(gc_quant_repack(GC_QT_Q6_K, GC_QT_Q6_KR, q6, q6r, 256, NULL) == GC_OK);
  CHECK(q6r[32 * 2 + 16 * 1 + 8 * 1 + 4 * 1 + 3] == q6[64 * 1 + 32 * 1 + 16 * 1 + 4 * 2 + 3]); /* ql: t 2, n c h 1, i 3 */
  CHECK(q6r[128 + 16 * 3 + 8 * 1 + 4 * 0 + 2] == q6[128 + 32 * 1 + 16 * 0 + 4 * 3 + 2]); /* qh: t 3, n 1, h 0, i 2 */
  CHECK(!memcmp(q6r + 192, q6 + 192, 18));
  for (int i = 210; i < 224; i++) CHECK(q6r[i] == 0);
  float z0[256], z1[256];
  gc_quant_dequantize(GC_QT_Q6_K, q6, z0, 256);
  gc_quant_dequantize(GC_QT_Q6_KR, q6r, z1, 256);
  CHECK(!memcmp(z0, z1, sizeof z0));
  CHECK(gc_quant_row_bytes(GC_QT_Q6_KR, 4096) == 16 * 224);
  gc_qtype_t t;
  CHECK(gc_quant_from_ggml(UINT32_MAX, &t) == GC_ENOTFOUND); /* no file names a device layout */
  CHECK(gc_quant_row_bytes(GC_QT_Q4_0R, 512) == 288 && gc_quant_row_bytes(GC_QT_Q8_0R, 32) == 0);
  gc_err_t e = {0};
  CHECK(gc_quant_repack(GC_QT_Q4_0, GC_QT_Q4_0R, back, r, 32, &e) == GC_EINVAL && strstr(e.msg, "256"));
  CHECK(gc_quant_repack(GC_QT_Q4_K, GC_QT_Q4_0R, back, r, 256, &e) == GC_EINVAL && strstr(e.msg, "Q4_K"));
  CHECK(gc_quant_repack(GC_QT_Q6_K, GC_QT_Q6_K, back, r, 256, &e) == GC_EINVAL && strstr(e.msg, "Q6_K"));
}

/* ---- the filter for pytest ------------------------------------------------- */

static void *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *p = malloc(sz > 0 ? (size_t)sz : 1);
  *n = p && fread(p, 1, (size_t)sz, f) == (size_t)sz ? (size_t)sz : (size_t)-1;
  fclose(f);
  return p;
}

static int spill(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(p, 1, n, f) == n;
  return (f && fclose(f) == 0 && ok) ? 0 : 1;
}

/* The ggml type id of a format gcore makes F16 at load, by name, or 0. */
static uint32_t foreign_id(const char *name) {
  for (uint32_t id = 1; id < 64; id++) {
    const char *nm;
    int blk, bytes;
    if (gc_quant_ggml_foreign(id) && !gc_quant_ggml_info(id, &nm, &blk, &bytes) && !strcmp(nm, name)) return id;
  }
  return 0;
}

static int filter(int argc, char **argv) {
  gc_qtype_t t = GC_QT_F32;
  gc_err_t e = {0};
  size_t n;
  int quant = argc == 5 && !strcmp(argv[1], "quantize"), deq = argc == 6 && !strcmp(argv[1], "dequantize");
  uint32_t foreign = deq ? foreign_id(argv[2]) : 0;
  if (foreign) { /* dequantize only: N elements of its blocks */
    const char *nm;
    int blk, bytes;
    void *in = slurp(argv[3], &n);
    int64_t count = atoll(argv[4]);
    gc_quant_ggml_info(foreign, &nm, &blk, &bytes);
    if (!in || count <= 0 || count % blk || (uint64_t)(count / blk) * (uint64_t)bytes != n)
      return free(in), fprintf(stderr, "test_quant: %s is not %lld elements of %s\n", argv[3], (long long)count, nm), 1;
    float *out = malloc((size_t)count * 4);
    int rc = !out || gc_quant_ggml_dequantize(foreign, in, out, count) || spill(argv[5], out, (size_t)count * 4);
    free(out);
    free(in);
    return rc;
  }
  if ((!quant && !deq) || gc_quant_parse(argv[2], &t)) {
    fprintf(stderr, "usage: test_quant quantize TYPE IN.f32 OUT | dequantize TYPE IN N OUT.f32\n");
    return 2;
  }
  void *in = slurp(argv[3], &n);
  if (!in || n == (size_t)-1) return fprintf(stderr, "test_quant: cannot read %s\n", argv[3]), 1;
  int rc = 1;
  if (quant) {
    int64_t count = (int64_t)(n / 4);
    uint64_t bytes = gc_quant_row_bytes(t, count);
    void *out = malloc(bytes ? bytes : 1);
    if (out && !gc_quant_quantize(t, in, out, count, &e)) rc = spill(argv[4], out, bytes);
    else fprintf(stderr, "test_quant: %s\n", e.msg);
    free(out);
  } else {
    int64_t count = atoll(argv[4]);
    if (gc_quant_row_bytes(t, count) != n || count <= 0) {
      fprintf(stderr, "test_quant: %zu bytes are not %lld elements of %s\n", n, (long long)count, argv[2]);
    } else {
      float *out = malloc((size_t)count * 4);
      if (out) {
        gc_quant_dequantize(t, in, out, count);
        rc = spill(argv[5], out, (size_t)count * 4);
      }
      free(out);
    }
  }
  free(in);
  return rc;
}

int main(int argc, char **argv) {
  if (argc > 1) return filter(argc, argv);
  test_formats();
  test_half();
  test_q8_0_block();
  test_q4_0_block();
  test_q4_k_block();
  test_q5_k_block();
  test_q6_k_block();
  test_q8_0_quantize();
  test_q4_0_quantize();
  test_q4_k_zero_block();
  test_roundtrip_bounds();
  test_device_layouts();
  return check_report();
}
