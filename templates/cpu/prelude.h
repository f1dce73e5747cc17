/* prelude.h — the text gen/ puts first in every generated CPU kernel source.
 *
 * It owns what every CPU template shares: the system headers, the dtype
 * codes, the storage type and scalar load/store of each dtype, fp32 vector
 * helpers of 8 or 16 lanes (load/store with conversion from/to f32, f16,
 * bf16; FMA; horizontal sum; exp; in-register transpose), and the launch
 * ABI glue (GC_EXPORT, GC_ARG).
 *
 * Order of the generated source: this prelude, then the #defines of the
 * target constants (VBYTES L1 L2 NCPU), dtype sizes (SA SB SC), dtype codes
 * (GC_TA GC_TB GC_TC) and parameters, then the template. So nothing here may
 * use those names at prelude time: macros that depend on them (TA, LOAD_A,
 * VF, VLOAD_A, ...) only name them in their bodies and expand at their use
 * in the template. The vector helpers are selected by the compiler's target
 * (__AVX512F__), not by VBYTES: 16-lane helpers exist only when compiling
 * for x86-64-v4, 8-lane helpers always (x86-64-v3: AVX2 + FMA + F16C).
 *
 * Conventions a template follows to use the short names:
 *   - dtype codes GC_TA GC_TB GC_TC (GC_F32, GC_F16, GC_BF16) are defined;
 *   - a parameter VEC (8 or 16) gives the lane count of VF and V* macros.
 *
 * Conversions: f16 and bf16 are widened exactly; narrowing rounds to
 * nearest, ties to even; a NaN stays a NaN (quiet), infinities stay
 * infinities, and finite values too large for the narrow type become inf.
 * Everything is header-only and static inline. */
#ifndef GC_CPU_PRELUDE_H
#define GC_CPU_PRELUDE_H

#include <stdint.h>
#include <math.h>
#include <string.h>
#include <immintrin.h>

/* ------------------------------------------------------------------ */
/* Dtype codes and token plumbing                                      */
/* ------------------------------------------------------------------ */

#define GC_F32 0
#define GC_F16 1
#define GC_BF16 2

#define GC_EXPORT __attribute__((visibility("default")))
#define GC_INLINE static inline __attribute__((always_inline, unused))
#define GC_ALIGN64 __attribute__((aligned(64)))

/* The i-th launch argument, of type T: a buffer is GC_ARG(args, 0, float *). */
#define GC_ARG(args, i, T) (*(T *)(args)[i])

#define GC_CAT_(a, b) a##b
#define GC_CAT(a, b) GC_CAT_(a, b)
#define GC_STR_(x) #x
#define GC_STR(x) GC_STR_(x)
/* Unroll the next loop n times; n may be a macro (a parameter). */
#define GC_UNROLL(n) _Pragma(GC_STR(GCC unroll n))

GC_INLINE int64_t gc_min(int64_t a, int64_t b) { return a < b ? a : b; }
GC_INLINE int64_t gc_max(int64_t a, int64_t b) { return a > b ? a : b; }
/* ceil(a / b) for a >= 0, b > 0 */
GC_INLINE int64_t gc_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Dtype code -> name used as a suffix of the helpers below. */
#define GC_DTNAME_0 f32
#define GC_DTNAME_1 f16
#define GC_DTNAME_2 bf16
#define GC_DTNAME(code) GC_CAT(GC_DTNAME_, code)

/* Storage type of a dtype code. */
typedef float gc_f32_t;
typedef uint16_t gc_f16_t;  /* IEEE binary16 bits */
typedef uint16_t gc_bf16_t; /* upper half of a binary32 */
#define GC_STORAGE(code) GC_CAT(GC_CAT(gc_, GC_DTNAME(code)), _t)

#define TA GC_STORAGE(GC_TA)
#define TB GC_STORAGE(GC_TB)
#define TC GC_STORAGE(GC_TC)

/* ------------------------------------------------------------------ */
/* Scalar conversion                                                   */
/* ------------------------------------------------------------------ */

GC_INLINE float gc_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

GC_INLINE uint32_t gc_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* fp32 -> bf16 bits, round to nearest even; NaN -> quiet NaN. */
GC_INLINE uint16_t gc_f32_to_bf16(float f) {
  uint32_t u = gc_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

GC_INLINE float gc_ld_f32(const gc_f32_t *p, int64_t i) { return p[i]; }
GC_INLINE float gc_ld_f16(const gc_f16_t *p, int64_t i) {
  return _cvtsh_ss(p[i]);
}
GC_INLINE float gc_ld_bf16(const gc_bf16_t *p, int64_t i) {
  return gc_bits_f32((uint32_t)p[i] << 16);
}

GC_INLINE void gc_st_f32(gc_f32_t *p, int64_t i, float v) { p[i] = v; }
GC_INLINE void gc_st_f16(gc_f16_t *p, int64_t i, float v) {
  p[i] = (uint16_t)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
}
GC_INLINE void gc_st_bf16(gc_bf16_t *p, int64_t i, float v) {
  p[i] = gc_f32_to_bf16(v);
}

/* float x = LOAD_A(p, i): element i of an A/B/C array, widened to fp32.
 * STORE_C(p, i, x): narrow x to C's dtype and store it as element i. */
#define GC_LOAD(code, p, i) GC_CAT(gc_ld_, GC_DTNAME(code))(p, i)
#define GC_STORE(code, p, i, v) GC_CAT(gc_st_, GC_DTNAME(code))(p, i, v)
#define LOAD_A(p, i) GC_LOAD(GC_TA, p, i)
#define LOAD_B(p, i) GC_LOAD(GC_TB, p, i)
#define LOAD_C(p, i) GC_LOAD(GC_TC, p, i)
#define STORE_C(p, i, v) GC_STORE(GC_TC, p, i, v)

/* ------------------------------------------------------------------ */
/* 8-lane fp32 vectors (AVX2 + FMA + F16C, or AVX-512VL)               */
/* ------------------------------------------------------------------ */

typedef __m256 gc_v8;

GC_INLINE gc_v8 gc_v8_zero(void) { return _mm256_setzero_ps(); }
GC_INLINE gc_v8 gc_v8_set1(float x) { return _mm256_set1_ps(x); }
GC_INLINE gc_v8 gc_v8_add(gc_v8 a, gc_v8 b) { return _mm256_add_ps(a, b); }
GC_INLINE gc_v8 gc_v8_mul(gc_v8 a, gc_v8 b) { return _mm256_mul_ps(a, b); }
GC_INLINE gc_v8 gc_v8_div(gc_v8 a, gc_v8 b) { return _mm256_div_ps(a, b); }
/* a*b + c, one rounding. */
GC_INLINE gc_v8 gc_v8_fma(gc_v8 a, gc_v8 b, gc_v8 c) {
  return _mm256_fmadd_ps(a, b, c);
}

GC_INLINE float gc_v8_hsum(gc_v8 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/* Full loads of 8 consecutive elements, widened to fp32. */
GC_INLINE gc_v8 gc_v8_ld_f32(const gc_f32_t *p) { return _mm256_loadu_ps(p); }
GC_INLINE gc_v8 gc_v8_ld_f16(const gc_f16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
GC_INLINE gc_v8 gc_v8_ld_bf16(const gc_bf16_t *p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* 8 fp32 lanes -> 8 bf16 (RNE, NaN kept quiet). */
GC_INLINE __m128i gc_v8_to_bf16(gc_v8 v) {
  __m256i u = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  r = _mm256_srli_epi32(r, 16);
  __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  r = _mm256_blendv_epi8(r, q, _mm256_castps_si256(nan));
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

/* Full stores of 8 consecutive elements, narrowed from fp32. */
GC_INLINE void gc_v8_st_f32(gc_f32_t *p, gc_v8 v) { _mm256_storeu_ps(p, v); }
GC_INLINE void gc_v8_st_f16(gc_f16_t *p, gc_v8 v) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
GC_INLINE void gc_v8_st_bf16(gc_bf16_t *p, gc_v8 v) {
  _mm_storeu_si128((__m128i *)p, gc_v8_to_bf16(v));
}

/* Partial loads: elements 0..n-1 (0 <= n <= 8) from p, lanes n.. are 0.
 * Never reads past p[n-1]. */
GC_INLINE gc_v8 gc_v8_ldn_f32(const gc_f32_t *p, int64_t n) {
  gc_f32_t t[8] = {0};
  memcpy(t, p, (size_t)n * sizeof *t);
  return gc_v8_ld_f32(t);
}
GC_INLINE gc_v8 gc_v8_ldn_f16(const gc_f16_t *p, int64_t n) {
  gc_f16_t t[8] = {0};
  memcpy(t, p, (size_t)n * sizeof *t);
  return gc_v8_ld_f16(t);
}
GC_INLINE gc_v8 gc_v8_ldn_bf16(const gc_bf16_t *p, int64_t n) {
  gc_bf16_t t[8] = {0};
  memcpy(t, p, (size_t)n * sizeof *t);
  return gc_v8_ld_bf16(t);
}

/* Partial stores: lanes 0..n-1 (0 <= n <= 8) to p[0..n-1], nothing else. */
GC_INLINE void gc_v8_stn_f32(gc_f32_t *p, gc_v8 v, int64_t n) {
  gc_f32_t t[8];
  gc_v8_st_f32(t, v);
  memcpy(p, t, (size_t)n * sizeof *t);
}
GC_INLINE void gc_v8_stn_f16(gc_f16_t *p, gc_v8 v, int64_t n) {
  gc_f16_t t[8];
  gc_v8_st_f16(t, v);
  memcpy(p, t, (size_t)n * sizeof *t);
}
GC_INLINE void gc_v8_stn_bf16(gc_bf16_t *p, gc_v8 v, int64_t n) {
  gc_bf16_t t[8];
  gc_v8_st_bf16(t, v);
  memcpy(p, t, (size_t)n * sizeof *t);
}

/* r[0..7] (rows) := its transpose: lane j of r[i] becomes lane i of r[j]. */
GC_INLINE void gc_v8_transpose(gc_v8 r[8]) {
  __m256d u[8];
  for (int i = 0; i < 8; i += 4) { /* rows i..i+3 */
    gc_v8 t0 = _mm256_unpacklo_ps(r[i], r[i + 1]);
    gc_v8 t1 = _mm256_unpackhi_ps(r[i], r[i + 1]);
    gc_v8 t2 = _mm256_unpacklo_ps(r[i + 2], r[i + 3]);
    gc_v8 t3 = _mm256_unpackhi_ps(r[i + 2], r[i + 3]);
    /* u[i+c]: lane l holds column 4l+c of rows i..i+3 */
    u[i + 0] = _mm256_unpacklo_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2));
    u[i + 1] = _mm256_unpackhi_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2));
    u[i + 2] = _mm256_unpacklo_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3));
    u[i + 3] = _mm256_unpackhi_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3));
  }
  for (int c = 0; c < 4; c++) {
    r[c] = _mm256_castpd_ps(_mm256_permute2f128_pd(u[c], u[4 + c], 0x20));
    r[4 + c] = _mm256_castpd_ps(_mm256_permute2f128_pd(u[c], u[4 + c], 0x31));
  }
}

/* e^x per lane, relative error a few ulp. x is clamped to
 * [-87.33, 88.37] (results stay finite and normal); NaN stays NaN. */
GC_INLINE gc_v8 gc_v8_exp(gc_v8 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f),
                    _mm256_max_ps(_mm256_set1_ps(-87.336544750553f), x));
  gc_v8 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  gc_v8 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  gc_v8 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* ------------------------------------------------------------------ */
/* 16-lane fp32 vectors (AVX-512F/BW/DQ/VL), only on x86-64-v4         */
/* ------------------------------------------------------------------ */

#ifdef __AVX512F__
typedef __m512 gc_v16;

GC_INLINE gc_v16 gc_v16_zero(void) { return _mm512_setzero_ps(); }
GC_INLINE gc_v16 gc_v16_set1(float x) { return _mm512_set1_ps(x); }
GC_INLINE gc_v16 gc_v16_add(gc_v16 a, gc_v16 b) { return _mm512_add_ps(a, b); }
GC_INLINE gc_v16 gc_v16_mul(gc_v16 a, gc_v16 b) { return _mm512_mul_ps(a, b); }
GC_INLINE gc_v16 gc_v16_div(gc_v16 a, gc_v16 b) { return _mm512_div_ps(a, b); }
/* a*b + c, one rounding. */
GC_INLINE gc_v16 gc_v16_fma(gc_v16 a, gc_v16 b, gc_v16 c) {
  return _mm512_fmadd_ps(a, b, c);
}

GC_INLINE float gc_v16_hsum(gc_v16 v) {
  return gc_v8_hsum(_mm256_add_ps(_mm512_castps512_ps256(v),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(
                                      _mm512_castps_pd(v), 1))));
}

/* Full loads of 16 consecutive elements, widened to fp32. */
GC_INLINE gc_v16 gc_v16_ld_f32(const gc_f32_t *p) { return _mm512_loadu_ps(p); }
GC_INLINE gc_v16 gc_v16_ld_f16(const gc_f16_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
GC_INLINE gc_v16 gc_v16_ld_bf16(const gc_bf16_t *p) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* 16 fp32 lanes -> 16 bf16 (RNE, NaN kept quiet). */
GC_INLINE __m256i gc_v16_to_bf16(gc_v16 v) {
  __m512i u = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  r = _mm512_srli_epi32(r, 16);
  __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, q);
  return _mm512_cvtepi32_epi16(r);
}

/* Full stores of 16 consecutive elements, narrowed from fp32. */
GC_INLINE void gc_v16_st_f32(gc_f32_t *p, gc_v16 v) { _mm512_storeu_ps(p, v); }
GC_INLINE void gc_v16_st_f16(gc_f16_t *p, gc_v16 v) {
  _mm256_storeu_si256((__m256i *)p,
                      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
GC_INLINE void gc_v16_st_bf16(gc_bf16_t *p, gc_v16 v) {
  _mm256_storeu_si256((__m256i *)p, gc_v16_to_bf16(v));
}

/* Partial loads/stores of lanes 0..n-1 (0 <= n <= 16); masked, so they
 * never touch memory past p[n-1]; loaded lanes n.. are 0. */
GC_INLINE __mmask16 gc_v16_mask(int64_t n) {
  return (__mmask16)((1u << n) - 1u);
}
GC_INLINE gc_v16 gc_v16_ldn_f32(const gc_f32_t *p, int64_t n) {
  return _mm512_maskz_loadu_ps(gc_v16_mask(n), p);
}
GC_INLINE gc_v16 gc_v16_ldn_f16(const gc_f16_t *p, int64_t n) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(gc_v16_mask(n), p));
}
GC_INLINE gc_v16 gc_v16_ldn_bf16(const gc_bf16_t *p, int64_t n) {
  __m256i h = _mm256_maskz_loadu_epi16(gc_v16_mask(n), p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
GC_INLINE void gc_v16_stn_f32(gc_f32_t *p, gc_v16 v, int64_t n) {
  _mm512_mask_storeu_ps(p, gc_v16_mask(n), v);
}
GC_INLINE void gc_v16_stn_f16(gc_f16_t *p, gc_v16 v, int64_t n) {
  _mm256_mask_storeu_epi16(
      p, gc_v16_mask(n),
      _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
GC_INLINE void gc_v16_stn_bf16(gc_bf16_t *p, gc_v16 v, int64_t n) {
  _mm256_mask_storeu_epi16(p, gc_v16_mask(n), gc_v16_to_bf16(v));
}

/* r[0..15] (rows) := its transpose: lane j of r[i] becomes lane i of r[j]. */
GC_INLINE void gc_v16_transpose(gc_v16 r[16]) {
  __m512 u[16];
  for (int i = 0; i < 16; i += 4) { /* rows i..i+3 */
    __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(r[i], r[i + 1]));
    __m512d t1 = _mm512_castps_pd(_mm512_unpackhi_ps(r[i], r[i + 1]));
    __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(r[i + 2], r[i + 3]));
    __m512d t3 = _mm512_castps_pd(_mm512_unpackhi_ps(r[i + 2], r[i + 3]));
    /* u[4c + i/4]: 128-bit lane l holds column 4l+c of rows i..i+3 */
    u[0 + i / 4] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 + i / 4] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[8 + i / 4] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[12 + i / 4] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int c = 0; c < 4; c++) { /* 4x4 transpose of 128-bit lanes */
    __m512 *g = &u[4 * c];
    __m512 a = _mm512_shuffle_f32x4(g[0], g[1], 0x44);
    __m512 b = _mm512_shuffle_f32x4(g[0], g[1], 0xEE);
    __m512 d = _mm512_shuffle_f32x4(g[2], g[3], 0x44);
    __m512 e = _mm512_shuffle_f32x4(g[2], g[3], 0xEE);
    r[0 + c] = _mm512_shuffle_f32x4(a, d, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(a, d, 0xDD);
    r[8 + c] = _mm512_shuffle_f32x4(b, e, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(b, e, 0xDD);
  }
}

/* e^x per lane; same contract as gc_v8_exp. */
GC_INLINE gc_v16 gc_v16_exp(gc_v16 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f),
                    _mm512_max_ps(_mm512_set1_ps(-87.336544750553f), x));
  gc_v16 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  gc_v16 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  gc_v16 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  __m512i e = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}
#endif /* __AVX512F__ */

/* ------------------------------------------------------------------ */
/* VEC-lane names for templates (VEC is a template parameter: 8 or 16) */
/* ------------------------------------------------------------------ */

#define GC_VFN(name) GC_CAT(GC_CAT(gc_v, VEC), _##name)
#define GC_VDT(name, code) GC_CAT(GC_CAT(GC_CAT(gc_v, VEC), _##name##_), GC_DTNAME(code))

#define VF GC_CAT(gc_v, VEC)          /* VEC fp32 lanes */
#define VZERO() GC_VFN(zero)()
#define VSET1(x) GC_VFN(set1)(x)
#define VADD(a, b) GC_VFN(add)(a, b)
#define VMUL(a, b) GC_VFN(mul)(a, b)
#define VDIV(a, b) GC_VFN(div)(a, b)
#define VFMA(a, b, c) GC_VFN(fma)(a, b, c) /* a*b + c */
#define VHSUM(v) GC_VFN(hsum)(v)
#define VEXP(v) GC_VFN(exp)(v)
#define VTRANSPOSE(r) GC_VFN(transpose)(r) /* r: VF[VEC] */

/* fp32 scratch */
#define VLOADF(p) GC_VDT(ld, GC_F32)(p)
#define VSTOREF(p, v) GC_VDT(st, GC_F32)(p, v)
/* typed arrays: VEC elements (or the first n) widened to / narrowed from fp32 */
#define VLOAD_A(p) GC_VDT(ld, GC_TA)(p)
#define VLOAD_B(p) GC_VDT(ld, GC_TB)(p)
#define VLOADN_A(p, n) GC_VDT(ldn, GC_TA)(p, n)
#define VLOADN_B(p, n) GC_VDT(ldn, GC_TB)(p, n)
#define VSTORE_C(p, v) GC_VDT(st, GC_TC)(p, v)
#define VSTOREN_C(p, v, n) GC_VDT(stn, GC_TC)(p, v, n)
#define VLOAD_C(p) GC_VDT(ld, GC_TC)(p)
#define VLOADN_C(p, n) GC_VDT(ldn, GC_TC)(p, n)
/* The GEMM family's stores: C = v, or C += v when the variant is built for
 * gemm_add (gen defines GC_OP_<op> 1 for the op it builds and 0 for the
 * template's other ops; these expand in the template, after them). */
#define STORE_GEMM(p, i, v) STORE_C(p, i, GC_OP_GEMM_ADD ? (v) + LOAD_C(p, i) : (v))
#define VSTORE_GEMM(p, v) VSTORE_C(p, GC_OP_GEMM_ADD ? VADD(v, VLOAD_C(p)) : (v))
/* rmsnorm_gemm*: out := 1/sqrt(mean(a[0..K-1]²) + eps) of one row a of A
 * (fp32 sums), and ap[r][0..kc-1] *= norm[k0..k0+kc-1] for rows r < mb of
 * a packed block (row stride KC). Macros: they expand in the template. */
#define GC_ROW_INV_RMS(a, K, eps, out)                                       \
  do {                                                                       \
    float s_ = 0.0f;                                                         \
    for (int64_t k_ = 0; k_ < (K); k_++) {                                   \
      float v_ = LOAD_A(a, k_);                                              \
      s_ += v_ * v_;                                                         \
    }                                                                        \
    (out) = 1.0f / sqrtf(s_ / (float)(K) + (eps));                           \
  } while (0)
#define GC_SCALE_PACKED(ap, mb, kc, norm, k0)                                \
  do {                                                                       \
    for (int64_t r_ = 0; r_ < (mb); r_++)                                    \
      for (int64_t k_ = 0; k_ < (kc); k_++)                                  \
        (ap)[r_ * KC + k_] *= LOAD_B(norm, (k0) + k_);                       \
  } while (0)
#define VSTOREN_GEMM(p, v, n) VSTOREN_C(p, GC_OP_GEMM_ADD ? VADD(v, VLOADN_C(p, n)) : (v), n)


/* ================================================================== */
/* >>> gc-quant: ggml's block formats, for B (the weights)             */
/* ================================================================== */
/* base/quant.h describes each format once (bytes, order of elements,
 * dequantization); the code below follows it line by line, and the tests
 * pin it (tests/test_ops.py's quantized cases, against tests/ggufq.py).
 * A row of B is K / QK blocks of QBYTES bytes; every product below is exact
 * in fp32 (a half scale times small integers), so y is the value the fp64
 * reference sees. Templates of the quantized families use TB (bytes),
 * GC_QK and GC_QDEQUANT(blk, y); the norm weight of rmsnorm_gemm* then has
 * A's dtype (LOAD_N). */
#define GC_Q8_0 5
#define GC_Q4_0 6
#define GC_Q4_K 7
#define GC_Q5_K 8
#define GC_Q6_K 9
#define GC_DTNAME_5 q8_0
#define GC_DTNAME_6 q4_0
#define GC_DTNAME_7 q4_k
#define GC_DTNAME_8 q5_k
#define GC_DTNAME_9 q6_k
typedef uint8_t gc_q8_0_t; /* a block format's storage: bytes */
typedef uint8_t gc_q4_0_t;
typedef uint8_t gc_q4_k_t;
typedef uint8_t gc_q5_k_t;
typedef uint8_t gc_q6_k_t;
/* elements and bytes per block of a format code */
#define GC_QK_5 32
#define GC_QK_6 32
#define GC_QK_7 256
#define GC_QK_8 256
#define GC_QK_9 256
#define GC_QBYTES_5 34
#define GC_QBYTES_6 18
#define GC_QBYTES_7 144
#define GC_QBYTES_8 176
#define GC_QBYTES_9 210
#define GC_QK GC_CAT(GC_QK_, GC_TB)         /* elements per block of B */
#define GC_QBYTES GC_CAT(GC_QBYTES_, GC_TB) /* bytes per block of B */
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
#define TN GC_STORAGE(GC_QNORM_DT)
#define LOAD_N(p, i) GC_LOAD(GC_QNORM_DT, p, i)
#define VLOAD_N(p) GC_VDT(ld, GC_QNORM_DT)(p)

/* The little-endian half at p (unaligned), exactly as a float. */
GC_INLINE float gc_q_half(const uint8_t *p) {
  return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}

/* Sub-block s's 6-bit scale and min of a Q4_K/Q5_K block's 12 bytes. */
GC_INLINE void gc_q_scale_min_k4(int s, const uint8_t *q, int *sc, int *m) {
  if (s < 4) {
    *sc = q[s] & 63;
    *m = q[s + 4] & 63;
  } else {
    *sc = (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4);
    *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

/* y[0..QK-1] := the block at b, dequantized. */
GC_INLINE void gc_q_dequant_q8_0(const uint8_t *b, float *y) {
  const float d = gc_q_half(b);
  for (int j = 0; j < 32; j++)
    y[j] = d * (float)(int8_t)b[2 + j];
}
GC_INLINE void gc_q_dequant_q4_0(const uint8_t *b, float *y) {
  const float d = gc_q_half(b);
  for (int j = 0; j < 16; j++) {
    y[j] = d * (float)((b[2 + j] & 15) - 8);
    y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
  }
}
/* Q4_K (qh NULL) and Q5_K: y = fl(d·sc·q) − fl(dmin·m), one rounding. */
GC_INLINE void gc_q_dequant_k45(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y) {
  const float d = gc_q_half(b), dmin = gc_q_half(b + 2);
  for (int c = 0; c < 4; c++) {
    int sc0, m0, sc1, m1;
    gc_q_scale_min_k4(2 * c, b + 4, &sc0, &m0);
    gc_q_scale_min_k4(2 * c + 1, b + 4, &sc1, &m1);
    const float d0 = d * (float)sc0, mm0 = dmin * (float)m0;
    const float d1 = d * (float)sc1, mm1 = dmin * (float)m1;
    for (int l = 0; l < 32; l++) {
      int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
      if (qh) {
        lo += 16 * (qh[l] >> (2 * c) & 1);
        hi += 16 * (qh[l] >> (2 * c + 1) & 1);
      }
      y[64 * c + l] = d0 * (float)lo - mm0;
      y[64 * c + 32 + l] = d1 * (float)hi - mm1;
    }
  }
}
GC_INLINE void gc_q_dequant_q4_k(const uint8_t *b, float *y) { gc_q_dequant_k45(b, 0, b + 16, y); }
GC_INLINE void gc_q_dequant_q5_k(const uint8_t *b, float *y) { gc_q_dequant_k45(b, b + 16, b + 48, y); }
GC_INLINE void gc_q_dequant_q6_k(const uint8_t *b, float *y) {
  const uint8_t *ql = b, *qh = b + 128;
  const int8_t *sc = (const int8_t *)(b + 192);
  const float d = gc_q_half(b + 208);
  for (int n = 0; n < 2; n++, ql += 64, qh += 32, sc += 8, y += 128)
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
/* GC_QDEQUANT(b, y): block b of B's format into y[0..GC_QK-1]. */
#define GC_QDEQUANT(b, y) GC_CAT(gc_q_dequant_, GC_DTNAME(GC_TB))(b, y)

/* The GEMM family's epilogues, chosen by the op (gen defines GC_OP_<op>;
 * PAIR and NORM where gen derives them from the op table): PAIR rows of B
 * per column of C (2: silu(gate)·up), NORM where A's rows are normalised. */
#define GC_SILU_MUL(g, u) ((g) / (1.0f + expf(-(g))) * (u))

#endif /* GC_CPU_PRELUDE_H */
