/* ops.c — op semantics, the fp64 reference and the verification rule.
 *
 * Tolerance. Inputs are exact in their dtypes, so the reference sees the
 * same values the kernel does. A kernel accumulating K products in fp32
 * has error at most gamma_K * sum|a||b| with gamma_K = K * 2^-24 (the
 * standard bound for recursive summation; blocked sums do better), and
 * then rounds to the output dtype (half an ulp: 2^-24, 2^-11, 2^-8
 * relative; we allow one ulp). Each element must satisfy
 *   |got - ref| <= ulp_c * |ref| + gamma_K * absref + sub_c
 * where sub_c is the spacing of the output dtype's subnormals.
 * This is tight enough to catch a dropped k term (error ~ absref / K). */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- half-precision conversions -------------------------------------- */

float gc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man) { /* subnormal: normalise */
    int shift = 0;
    while (!(man & 0x400)) man <<= 1, shift++;
    bits = sign | ((uint32_t)(113 - shift) << 23) | ((man & 0x3ff) << 13);
  } else {
    bits = sign;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t gc_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
  if (ax < 0x38800000u) {                                   /* subnormal or zero */
    if (ax < 0x33000000u) return (uint16_t)sign;
    uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((ax >> 13) - (112u << 10)), rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

float gc_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t gc_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

double gc_load_elem(const void *p, gc_dtype_t t, int64_t i) {
  switch (t) {
    case GC_DT_F32: return ((const float *)p)[i];
    case GC_DT_F16: return gc_f16_to_f32(((const uint16_t *)p)[i]);
    default: return gc_bf16_to_f32(((const uint16_t *)p)[i]);
  }
}

void gc_store_elem(void *p, gc_dtype_t t, int64_t i, double v) {
  switch (t) {
    case GC_DT_F32: ((float *)p)[i] = (float)v; break;
    case GC_DT_F16: ((uint16_t *)p)[i] = gc_f32_to_f16((float)v); break;
    default: ((uint16_t *)p)[i] = gc_f32_to_bf16((float)v); break;
  }
}

/* ---- buffers and arguments ------------------------------------------- */

int gc_op_buffers(const gc_problem_t *p, gc_opbuf_t b[GC_OP_MAX_BUFS], int *n,
                  gc_err_t *e) {
  if (gc_problem_check(p, e)) return e->code;
  if (!strcmp(p->op, "gemm")) {
    b[0] = (gc_opbuf_t){"A", p->ta, p->m * p->k, 0};
    b[1] = (gc_opbuf_t){"B", p->tb, p->n * p->k, 0};
    b[2] = (gc_opbuf_t){"C", p->tc, p->m * p->n, 1};
    *n = 3;
  } else if (!strcmp(p->op, "gemm_swiglu")) {
    b[0] = (gc_opbuf_t){"A", p->ta, p->m * p->k, 0};
    b[1] = (gc_opbuf_t){"W", p->tb, 2 * p->n * p->k, 0};
    b[2] = (gc_opbuf_t){"C", p->tc, p->m * p->n, 1};
    *n = 3;
  } else { /* rmsnorm */
    b[0] = (gc_opbuf_t){"X", p->ta, p->m * p->n, 0};
    b[1] = (gc_opbuf_t){"W", p->tb, p->n, 0};
    b[2] = (gc_opbuf_t){"Y", p->tc, p->m * p->n, 1};
    *n = 3;
  }
  return GC_OK;
}

void gc_op_args(const gc_problem_t *p, const gc_dptr_t *bufs, gc_argpack_t *pk) {
  memset(pk, 0, sizeof *pk);
  for (int i = 0; i < 3; i++) {
    pk->ptr[i] = bufs[i];
    pk->args[i] = &pk->ptr[i];
  }
  pk->i64[0] = p->m;
  pk->i64[1] = p->n;
  pk->args[3] = &pk->i64[0];
  pk->args[4] = &pk->i64[1];
  if (!strcmp(p->op, "rmsnorm")) {
    pk->f32[0] = GC_RMSNORM_EPS;
    pk->args[5] = &pk->f32[0];
  } else {
    pk->i64[2] = p->k;
    pk->args[5] = &pk->i64[2];
  }
  pk->nargs = 6;
}

/* ---- inputs ----------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi), rounded to dtype t. */
static void fill(void *p, gc_dtype_t t, int64_t n, double lo, double hi, uint64_t *s) {
  for (int64_t i = 0; i < n; i++) {
    double u = (double)(splitmix(s) >> 11) * 0x1p-53;
    gc_store_elem(p, t, i, lo + (hi - lo) * u);
  }
}

void gc_op_fill_inputs(const gc_problem_t *p, void *host[GC_OP_MAX_BUFS], uint64_t seed) {
  gc_opbuf_t b[GC_OP_MAX_BUFS];
  int n;
  if (gc_op_buffers(p, b, &n, NULL)) return;
  uint64_t s = seed;
  for (int i = 0; i < n; i++) {
    if (b[i].output) continue;
    int is_norm_weight = !strcmp(p->op, "rmsnorm") && i == 1;
    fill(host[i], b[i].dtype, b[i].count, is_norm_weight ? 0.5 : -1.0,
         is_norm_weight ? 1.5 : 1.0, &s);
  }
}

/* ---- reference -------------------------------------------------------- */

static double ulp_rel(gc_dtype_t t) {
  return t == GC_DT_F32 ? 0x1p-23 : t == GC_DT_F16 ? 0x1p-10 : 0x1p-7;
}

/* The spacing of the output dtype's subnormals: below its smallest normal
 * number, rounding error is absolute, not relative. */
static double ulp_abs(gc_dtype_t t) {
  return t == GC_DT_F32 ? 0x1p-149 : t == GC_DT_F16 ? 0x1p-24 : 0x1p-133;
}

/* Dot product of row i of X ([*,K], dtype tx) with row j of W (dtype tw),
 * in fp64; *abs gets sum |x||w|. */
static double dot(const void *x, gc_dtype_t tx, int64_t i, const void *w, gc_dtype_t tw,
                  int64_t j, int64_t k, double *abs) {
  double s = 0, a = 0;
  for (int64_t l = 0; l < k; l++) {
    double u = gc_load_elem(x, tx, i * k + l), v = gc_load_elem(w, tw, j * k + l);
    s += u * v;
    a += fabs(u * v);
  }
  *abs = a;
  return s;
}

static void ref_gemm(const gc_problem_t *p, void **h, double *ref, double *tol) {
  double gamma = (double)p->k * 0x1p-24, u = ulp_rel(p->tc);
  for (int64_t i = 0; i < p->m; i++)
    for (int64_t j = 0; j < p->n; j++) {
      double a, r = dot(h[0], p->ta, i, h[1], p->tb, j, p->k, &a);
      ref[i * p->n + j] = r;
      tol[i * p->n + j] = u * fabs(r) + gamma * a + ulp_abs(p->tc);
    }
}

/* silu(g) * up. Errors in g and u (each gamma * abs) propagate through
 * |d/dg silu(g)| <= 1.1 and |silu(g)| <= |g|; exp adds a few ulps of fp32. */
static void ref_swiglu(const gc_problem_t *p, void **h, double *ref, double *tol) {
  double gamma = (double)p->k * 0x1p-24 + 0x1p-21, uc = ulp_rel(p->tc);
  for (int64_t i = 0; i < p->m; i++)
    for (int64_t j = 0; j < p->n; j++) {
      double ag, au;
      double g = dot(h[0], p->ta, i, h[1], p->tb, j, p->k, &ag);
      double up = dot(h[0], p->ta, i, h[1], p->tb, p->n + j, p->k, &au);
      double sg = g / (1.0 + exp(-g));
      double r = sg * up;
      ref[i * p->n + j] = r;
      tol[i * p->n + j] = uc * fabs(r) + 1.1 * fabs(up) * gamma * (ag + fabs(g)) +
                          fabs(sg) * gamma * au + ulp_abs(p->tc);
    }
}

/* y = x * w / sqrt(mean(x^2) + eps); the fp32 sum of squares has relative
 * error N * 2^-24, the rsqrt and products a few more ulps. */
static void ref_rmsnorm(const gc_problem_t *p, void **h, double *ref, double *tol) {
  double rel = ((double)p->n + 8) * 0x1p-24, uc = ulp_rel(p->tc);
  for (int64_t i = 0; i < p->m; i++) {
    double ss = 0;
    for (int64_t j = 0; j < p->n; j++) {
      double x = gc_load_elem(h[0], p->ta, i * p->n + j);
      ss += x * x;
    }
    double inv = 1.0 / sqrt(ss / (double)p->n + (double)GC_RMSNORM_EPS);
    for (int64_t j = 0; j < p->n; j++) {
      double r = gc_load_elem(h[0], p->ta, i * p->n + j) * inv * gc_load_elem(h[1], p->tb, j);
      ref[i * p->n + j] = r;
      tol[i * p->n + j] = (uc + rel) * fabs(r) + ulp_abs(p->tc);
    }
  }
}

int gc_op_reference(const gc_problem_t *p, void *host[GC_OP_MAX_BUFS], double *ref,
                    double *tol, gc_err_t *e) {
  if (gc_problem_check(p, e)) return e->code;
  if (!strcmp(p->op, "gemm"))
    ref_gemm(p, host, ref, tol);
  else if (!strcmp(p->op, "gemm_swiglu"))
    ref_swiglu(p, host, ref, tol);
  else
    ref_rmsnorm(p, host, ref, tol);
  return GC_OK;
}

int gc_op_check(const gc_problem_t *p, const void *out, const double *ref,
                const double *tol, int64_t count, double *worst, char *why,
                size_t why_n) {
  int ok = 1;
  *worst = 0;
  for (int64_t i = 0; i < count; i++) {
    double g = gc_load_elem(out, p->tc, i), err = fabs(g - ref[i]);
    double ratio = isfinite(g) ? err / tol[i] : INFINITY;
    if (ratio > *worst) *worst = ratio;
    if (ok && !(ratio <= 1.0)) {
      ok = 0;
      if (why)
        snprintf(why, why_n, "element %lld (row %lld, col %lld): got %.9g, want %.9g "
                 "(tolerance %.3g)", (long long)i, (long long)(i / (p->n ? p->n : 1)),
                 (long long)(i % (p->n ? p->n : 1)), g, ref[i], tol[i]);
    }
  }
  return ok;
}

double gc_op_flops(const gc_problem_t *p) {
  if (!strcmp(p->op, "gemm")) return 2.0 * p->m * p->n * p->k;
  if (!strcmp(p->op, "gemm_swiglu")) return 4.0 * p->m * p->n * p->k;
  return 3.0 * p->m * p->n;
}

double gc_op_bytes(const gc_problem_t *p) {
  gc_opbuf_t b[GC_OP_MAX_BUFS];
  int n;
  double s = 0;
  if (gc_op_buffers(p, b, &n, NULL)) return 0;
  for (int i = 0; i < n; i++) s += (double)b[i].count * (double)gc_dtype_size(b[i].dtype);
  return s;
}
