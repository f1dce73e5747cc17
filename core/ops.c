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
 * This is tight enough to catch a dropped k term (error ~ absref / K).
 * The other ops state their rule next to their reference. */
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "refdot.h"
#include "../base/expr.h"
#include "../base/quant.h"

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

/* Element i of an array of blocks: its block dequantized (base/quant.h). */
static double load_block_elem(const void *p, gc_dtype_t t, int64_t i) {
  float y[256];
  int64_t b = gc_dtype_block(t);
  gc_quant_dequantize((gc_qtype_t)gc_dtype_qtype(t), (const char *)p + (size_t)(i / b) * gc_dtype_size(t), y, b);
  return y[i % b];
}

double gc_load_elem(const void *p, gc_dtype_t t, int64_t i) {
  if (gc_dtype_is_block(t)) return load_block_elem(p, t, i);
  switch (t) {
    case GC_DT_F32: return ((const float *)p)[i];
    case GC_DT_F16: return gc_f16_to_f32(((const uint16_t *)p)[i]);
    case GC_DT_BF16: return gc_bf16_to_f32(((const uint16_t *)p)[i]);
    case GC_DT_I32: return ((const int32_t *)p)[i];
    default: return ((const double *)p)[i];
  }
}

#if defined(__x86_64__)
#include <immintrin.h>
/* fp16 to fp32 eight at a time with F16C (x86-64-v3 and up): a row of
 * 128k logits in tens of microseconds. In place as gc_to_f32: each store
 * of eight floats covers only halves already loaded. */
__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const char *s, float *out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i))));
  for (uint16_t h; i < n; i++) memcpy(&h, s + 2 * i, 2), out[i] = gc_f16_to_f32(h);
}
#endif

void gc_to_f32(const void *p, gc_dtype_t t, float *out, size_t n) {
  const char *s = p; /* read bytewise (memcpy): p may be out's own memory */
  uint16_t h;
#if defined(__x86_64__)
  if (t == GC_DT_F16 && __builtin_cpu_supports("f16c")) {
    f16_to_f32_f16c(s, out, n);
    return;
  }
#endif
  if (t == GC_DT_F16)
    for (size_t i = 0; i < n; i++) memcpy(&h, s + 2 * i, 2), out[i] = gc_f16_to_f32(h);
  else if (t == GC_DT_BF16)
    for (size_t i = 0; i < n; i++) memcpy(&h, s + 2 * i, 2), out[i] = gc_bf16_to_f32(h);
  else if (t == GC_DT_F32)
    memmove(out, p, n * sizeof *out);
  else
    for (size_t i = 0; i < n; i++) out[i] = (float)gc_load_elem(p, t, (int64_t)i);
}

void gc_store_elem(void *p, gc_dtype_t t, int64_t i, double v) {
  if (gc_dtype_is_block(t)) return; /* blocks are written whole (fill_blocks) */
  switch (t) {
    case GC_DT_F32: ((float *)p)[i] = (float)v; break;
    case GC_DT_F16: ((uint16_t *)p)[i] = gc_f32_to_f16((float)v); break;
    case GC_DT_BF16: ((uint16_t *)p)[i] = gc_f32_to_bf16((float)v); break;
    case GC_DT_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    default: ((double *)p)[i] = v; break;
  }
}

/* ---- buffers and arguments ------------------------------------------- */

void gc_op_default_scalars(const gc_problem_t *p, gc_op_scalars_t *sc) {
  sc->eps = 1e-5f;
  sc->pos0 = !strcmp(p->op, "attention") && p->m == 1 ? (p->k > 0 && p->k < 1024 ? p->k - 1 : 1023)
             : !strcmp(p->op, "attention_batch") ? 255 : 3;
  sc->layout = 0;
  sc->scale = p->d > 0 ? (float)(1.0 / sqrt((double)p->d)) : 1.0f;
  sc->ctx = 0;
}

/* The cache rows per slot of the batch ops: sc->ctx, else the test
 * buffers' pos0 + M. */
static int64_t slot_rows(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  return sc->ctx > 0 ? sc->ctx : sc->pos0 + p->m;
}

/* Row i of a test batch (GC_FILL_ROWPOS): row 0 at pos0, the others
 * scattered over [0, pos0 + i], each in its own slot, in reverse order so
 * that a kernel that ignores the slots fails. */
static void test_rowpos(const gc_problem_t *p, const gc_op_scalars_t *sc, int64_t i, int64_t *pos,
                        int64_t *slot) {
  *pos = (sc->pos0 + 97 * i) % (sc->pos0 + i + 1);
  *slot = p->m - 1 - i;
}

gc_dtype_t gc_op_role_dtype(const gc_problem_t *p, char t) {
  if (t == 'N') return gc_dtype_is_block(p->tb) ? p->ta : p->tb;
  return t == 'A' ? p->ta : t == 'B' ? p->tb : t == 'C' ? p->tc : t == 'i' ? GC_DT_I32 : GC_DT_F64;
}

size_t gc_opbuf_bytes(const gc_opbuf_t *b) { return gc_dtype_bytes(b->dtype, b->count); }

/* M N K H G D and S = pos0 + M, for the shape expressions. */
static int shape_env(const gc_problem_t *p, const gc_op_scalars_t *sc, gc_env_t *env, gc_err_t *e) {
  env->n = 0;
  if (gc_env_set_dims(env, p, e) || gc_env_set(env, "S", sc->pos0 + p->m, e)) return e->code;
  return GC_OK;
}

int gc_op_buffers(const gc_problem_t *p, const gc_op_scalars_t *sc,
                  gc_opbuf_t b[GC_OP_MAX_BUFS], int *n, gc_err_t *e) {
  if (gc_problem_check(p, e)) return e->code;
  if (sc->pos0 < 0 || sc->pos0 >= (1LL << 31))
    return gc_err_set(e, GC_EINVAL, "%s: position %lld out of range", p->op, (long long)sc->pos0);
  const gc_op_t *op = gc_op_find(p->op);
  gc_env_t env;
  if (shape_env(p, sc, &env, e)) return e->code;
  for (int i = 0; i < op->nbufs; i++) {
    const gc_opbuf_spec_t *s = &op->buf[i];
    int64_t rows, cols;
    if (gc_expr_eval(s->rows, &env, &rows, e) || gc_expr_eval(s->cols, &env, &cols, e))
      return gc_err_prefix(e, "%s: buffer %s", p->op, s->name);
    b[i] = (gc_opbuf_t){s->name, gc_op_role_dtype(p, s->dtype), rows * cols, s->kind, cols};
  }
  *n = op->nbufs;
  return GC_OK;
}

int gc_op_check_blocks(const gc_problem_t *p, gc_err_t *e) {
  const gc_op_t *op = gc_op_find(p->op);
  if (!op || !gc_dtype_is_block(p->tb)) return GC_OK;
  if (!op->quant)
    return gc_err_set(e, GC_EINVAL, "%s takes no weights in a block format (%s); the GEMM ops and embed do",
                      p->op, gc_dtype_name(p->tb));
  gc_env_t env;
  gc_op_scalars_t sc = {0};
  if (shape_env(p, &sc, &env, e)) return e->code;
  for (int i = 0; i < op->nbufs; i++) {
    int64_t cols, blk = gc_dtype_block(p->tb);
    if (op->buf[i].dtype != 'B') continue;
    if (gc_expr_eval(op->buf[i].cols, &env, &cols, e)) return gc_err_prefix(e, "%s: buffer %s", p->op, op->buf[i].name);
    if (cols % blk)
      return gc_err_set(e, GC_EINVAL, "%s %s: rows of %s are %s = %lld elements, not a whole number of %s "
                        "blocks of %lld", p->op, gc_dtype_name(p->tb), op->buf[i].name, op->buf[i].cols,
                        (long long)cols, gc_dtype_name(p->tb), (long long)blk);
  }
  return GC_OK;
}

void gc_op_args(const gc_problem_t *p, const gc_op_scalars_t *sc, const gc_dptr_t *bufs,
                gc_argpack_t *pk) {
  const gc_op_t *op = gc_op_find(p->op);
  memset(pk, 0, sizeof *pk);
  if (!op) return;
  for (int i = 0; i < op->nbufs; i++) {
    pk->ptr[i] = bufs[i];
    pk->args[pk->nargs++] = &pk->ptr[i];
  }
  for (int i = 0; op->ints[i]; i++) {
    const char *at = strchr("MNKHGD", op->ints[i]);
    pk->i64[i] = at ? gc_problem_get(p, (int)(at - "MNKHGD"))
                    : op->ints[i] == 'S' ? slot_rows(p, sc) : sc->layout;
    pk->args[pk->nargs++] = &pk->i64[i];
  }
  if (op->flt) {
    pk->f32[0] = op->flt == 's' ? sc->scale : sc->eps;
    pk->args[pk->nargs++] = &pk->f32[0];
  }
}

/* ---- inputs ----------------------------------------------------------- */

#define GOLDEN 0x9e3779b97f4a7c15ull

/* splitmix64's output for state z */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t splitmix(uint64_t *s) { return mix(*s += GOLDEN); }

#define FILL_CHUNK (1 << 20)

/* Element i of a fill takes splitmix's (i+1)-th output from state s0, so
 * chunks fill in parallel and give what one pass would. */
typedef struct fill_job {
  void *p;
  gc_dtype_t t;
  double lo, hi;
  uint64_t s0;
} fill_job_t;

static void fill_body(void *arg, int64_t i0, int64_t i1) {
  fill_job_t *f = arg;
  for (int64_t i = i0; i < i1; i++) {
    double u = (double)(mix(f->s0 + (uint64_t)(i + 1) * GOLDEN) >> 11) * 0x1p-53;
    gc_store_elem(f->p, f->t, i, f->lo + (f->hi - f->lo) * u);
  }
}

/* Uniform in [lo, hi), rounded to dtype t; large fills on every core. */
static void fill(void *p, gc_dtype_t t, int64_t n, double lo, double hi, uint64_t *s) {
  fill_job_t f = {p, t, lo, hi, *s};
  gc_ref_for(0, n, FILL_CHUNK, fill_body, &f, n < 4 * FILL_CHUNK ? 1 : gc_ref_host_threads());
  *s += (uint64_t)n * GOLDEN;
}

/* A block-format fill: per row of blocks, uniform [-1, 1) floats (splitmix's
 * stream from s0, as fill_body's) quantized by base/quant's quantizers; Q5_K
 * and Q6_K (no quantizer) get random bytes under scales chosen so the values
 * stay within about [-1, 1]: fp16 d, dmin of 2^-11..2^-10 and 2^-7..2^-6
 * (Q5_K: 63·31·d + 63·dmin), d of 2^-12..2^-11 (Q6_K and its device layout
 * Q6_KR: 128·32·d; d at byte 208 of both; Q6_KR's 14 pad bytes random
 * too: no kernel may read them). */
typedef struct qfill_job {
  unsigned char *p;
  gc_dtype_t t;
  int64_t cols;
  uint64_t s0;
} qfill_job_t;

static double qf_unit(uint64_t s0, int64_t i) {
  return (double)(mix(s0 + (uint64_t)(i + 1) * GOLDEN) >> 11) * 0x1p-53;
}

static void qfill_body(void *arg, int64_t r0, int64_t r1) {
  qfill_job_t *j = arg;
  gc_qtype_t q = (gc_qtype_t)gc_dtype_qtype(j->t);
  size_t rb = gc_dtype_bytes(j->t, j->cols);
  float *x = malloc((size_t)j->cols * sizeof *x);
  for (int64_t r = r0; r < r1 && x; r++) {
    unsigned char *row = j->p + (size_t)r * rb;
    if (gc_quant_format(q)->can_quantize) {
      for (int64_t c = 0; c < j->cols; c++) x[c] = (float)(-1.0 + 2.0 * qf_unit(j->s0, r * j->cols + c));
      gc_quant_quantize(q, x, row, j->cols, NULL);
      continue;
    }
    for (size_t b = 0; b < rb; b++) row[b] = (unsigned char)(mix(j->s0 + (uint64_t)(r * (int64_t)rb + (int64_t)b + 1) * GOLDEN) >> 56);
    const int k6 = q == GC_QT_Q6_K || q == GC_QT_Q6_KR;
    for (size_t off = 0; off < rb; off += gc_dtype_size(j->t)) {
      double u = qf_unit(j->s0 ^ 0x5eed, r * (int64_t)rb + (int64_t)off);
      uint16_t d = gc_float_to_half((float)((1.0 + u) * (k6 ? 0x1p-12 : 0x1p-11)));
      uint16_t dm = gc_float_to_half((float)((1.0 + u) * 0x1p-7));
      unsigned char *h = row + off + (k6 ? 208 : 0); /* Q6_K's d is last */
      h[0] = (unsigned char)d, h[1] = (unsigned char)(d >> 8);
      if (q == GC_QT_Q5_K) h[2] = (unsigned char)dm, h[3] = (unsigned char)(dm >> 8);
    }
  }
  free(x);
}

static void fill_blocks(void *p, gc_dtype_t t, int64_t count, int64_t cols, uint64_t *s) {
  qfill_job_t j = {p, t, cols, *s};
  int64_t rows = count / cols;
  gc_ref_for(0, rows, 16, qfill_body, &j, count < (1 << 20) ? 1 : gc_ref_host_threads());
  *s += (uint64_t)count * GOLDEN;
}

void gc_op_fill_inputs(const gc_problem_t *p, const gc_op_scalars_t *sc,
                       void *host[GC_OP_MAX_BUFS], uint64_t seed) {
  const gc_op_t *op = gc_op_find(p->op);
  gc_opbuf_t b[GC_OP_MAX_BUFS];
  int n;
  if (gc_op_buffers(p, sc, b, &n, NULL)) return;
  uint64_t s = seed;
  for (int i = 0; i < n; i++) {
    if (b[i].kind == GC_BUF_OUT) continue;
    if (gc_dtype_is_block(b[i].dtype)) { /* weights: GC_FILL_UNIT */
      fill_blocks(host[i], b[i].dtype, b[i].count, b[i].cols, &s);
      continue;
    }
    switch (op->buf[i].fill) {
      case GC_FILL_POS: ((int32_t *)host[i])[0] = (int32_t)sc->pos0; break;
      case GC_FILL_TOKENS:
        for (int64_t j = 0; j < b[i].count; j++)
          ((int32_t *)host[i])[j] = (int32_t)(splitmix(&s) % (uint64_t)p->k);
        break;
      case GC_FILL_INV_FREQ:
        for (int64_t j = 0; j < b[i].count; j++)
          ((double *)host[i])[j] = pow(10000.0, -2.0 * (double)j / (double)p->d);
        break;
      case GC_FILL_CACHE: { /* rows before pos0 kept, the rest to be written */
        int64_t keep = sc->pos0 * b[i].cols;
        fill(host[i], b[i].dtype, keep, -1.0, 1.0, &s);
        memset((char *)host[i] + gc_dtype_bytes(b[i].dtype, keep), 0xFF,
               gc_dtype_bytes(b[i].dtype, b[i].count - keep));
        break;
      }
      case GC_FILL_ROWPOS:
        for (int64_t r = 0; r < p->m; r++) {
          int64_t pos, slot;
          test_rowpos(p, sc, r, &pos, &slot);
          ((int32_t *)host[i])[r] = (int32_t)pos;
          ((int32_t *)host[i])[p->m + r] = (int32_t)slot;
        }
        break;
      case GC_FILL_SLOT_CACHE: { /* every row random but those the rows write */
        size_t es = gc_dtype_size(b[i].dtype);
        fill(host[i], b[i].dtype, b[i].count, -1.0, 1.0, &s);
        for (int64_t r = 0; r < p->m; r++) {
          int64_t pos, slot;
          test_rowpos(p, sc, r, &pos, &slot);
          memset((char *)host[i] + (size_t)((slot * slot_rows(p, sc) + pos) * b[i].cols) * es, 0xFF,
                 (size_t)b[i].cols * es);
        }
        break;
      }
      case GC_FILL_NORM: fill(host[i], b[i].dtype, b[i].count, 0.5, 1.5, &s); break;
      default: fill(host[i], b[i].dtype, b[i].count, -1.0, 1.0, &s); break;
    }
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

/* dot[i·n + j] and abs[i·n + j] (Σ x·w and Σ |x·w|, fp64) of the rows of
 * X ([m,k], dtype tx) and of W ([n,k], dtype tw) or of wd (W already in
 * fp64; then tw is unused). */
static int dots(const void *x, gc_dtype_t tx, const double *xd, const void *w, gc_dtype_t tw,
                int64_t m, int64_t n, int64_t k, double *dot, double *abs, gc_err_t *e) {
  double *xc = xd ? NULL : gc_ref_f64(x, tx, m * k, e);
  double *wc = xc || xd ? gc_ref_f64(w, tw, n * k, e) : NULL;
  if (wc) gc_ref_dots(xd ? xd : xc, wc, m, n, k, dot, abs, 0);
  free(xc);
  free(wc);
  return wc ? GC_OK : e->code;
}

/* The GEMM rule of every element, given the dot in ref and Σ|a·b| in tol:
 * u·|r| + gamma·abs + sub (plus c0's rounding in the sum, gemm_add). */
static int ref_gemm(const gc_problem_t *p, void **h, int add, double *ref, double *tol,
                    gc_err_t *e) {
  double gamma = (double)p->k * 0x1p-24, u = ulp_rel(p->tc);
  if (dots(h[0], p->ta, NULL, h[1], p->tb, p->m, p->n, p->k, ref, tol, e)) return e->code;
  for (int64_t i = 0; i < p->m * p->n; i++) {
    double c0 = add ? gc_load_elem(h[2], p->tc, i) : 0; /* gemm_add: C0 + A·Bᵀ */
    ref[i] += c0;
    tol[i] = u * fabs(ref[i]) + gamma * tol[i] + 0x1p-23 * fabs(c0) + ulp_abs(p->tc);
  }
  return GC_OK;
}

/* silu(g) * up from the dots of the stacked [2N, K] weights (d, a: [M, 2N]).
 * Errors in g and u (each gamma * abs) propagate through
 * |d/dg silu(g)| <= 1.1 and |silu(g)| <= |g|; exp adds a few ulps of fp32
 * (0x1p-21 on gamma). */
static void swiglu_rule(const gc_problem_t *p, double gamma, const double *d, const double *a,
                        double *ref, double *tol) {
  double uc = ulp_rel(p->tc);
  for (int64_t i = 0; i < p->m; i++)
    for (int64_t j = 0; j < p->n; j++) {
      const double g = d[i * 2 * p->n + j], up = d[i * 2 * p->n + p->n + j];
      const double ag = a[i * 2 * p->n + j], au = a[i * 2 * p->n + p->n + j];
      double sg = g / (1.0 + exp(-g));
      double r = sg * up;
      ref[i * p->n + j] = r;
      tol[i * p->n + j] = uc * fabs(r) + 1.1 * fabs(up) * (gamma + 0x1p-21) * (ag + fabs(g)) +
                          fabs(sg) * (gamma + 0x1p-21) * au + ulp_abs(p->tc);
    }
}

/* The dots of X (or xd, fp64) with the stacked weights, then the rule. */
static int ref_swiglu(const gc_problem_t *p, void **h, const double *xd, double gamma,
                      double *ref, double *tol, gc_err_t *e) {
  size_t cnt = (size_t)(p->m * 2 * p->n > 0 ? p->m * 2 * p->n : 1);
  double *d = gc_malloc(cnt * sizeof *d, e), *a = d ? gc_malloc(cnt * sizeof *a, e) : NULL;
  int rc = a ? dots(h[0], p->ta, xd, h[1], p->tb, p->m, 2 * p->n, p->k, d, a, e) : e->code;
  if (!rc) swiglu_rule(p, gamma, d, a, ref, tol);
  free(d);
  free(a);
  return rc;
}

/* y = x * w / sqrt(mean(x^2) + eps); the fp32 sum of squares has relative
 * error N * 2^-24, the rsqrt and products a few more ulps. */
static void ref_rmsnorm(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h,
                        double *ref, double *tol) {
  double rel = ((double)p->n + 8) * 0x1p-24, uc = ulp_rel(p->tc);
  for (int64_t i = 0; i < p->m; i++) {
    double ss = 0;
    for (int64_t j = 0; j < p->n; j++) {
      double x = gc_load_elem(h[0], p->ta, i * p->n + j);
      ss += x * x;
    }
    double inv = 1.0 / sqrt(ss / (double)p->n + (double)sc->eps);
    for (int64_t j = 0; j < p->n; j++) {
      double r = gc_load_elem(h[0], p->ta, i * p->n + j) * inv * gc_load_elem(h[1], p->tb, j);
      ref[i * p->n + j] = r;
      tol[i * p->n + j] = (uc + rel) * fabs(r) + ulp_abs(p->tc);
    }
  }
}

/* rmsnorm_gemm and rmsnorm_gemm_swiglu: the GEMM rules applied to the
 * normalised rows x·w/sqrt(mean(x²)+eps) computed in fp64; the kernel's
 * fp32 sum of squares and rsqrt add a relative (K + 8)·2^-24 to every
 * product. B (or W) is h[1], the norm weight h[3]. */
static int ref_norm_gemm(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h,
                         double *ref, double *tol, gc_err_t *e) {
  int64_t M = p->m, N = p->n, K = p->k;
  int swiglu = gc_op_find(p->op)->pair == 2;
  gc_dtype_t tn = gc_op_role_dtype(p, 'N'); /* the norm weight's */
  double *xn = gc_malloc((size_t)(M * K > 0 ? M * K : 1) * sizeof *xn, e);
  if (!xn) return GC_ENOMEM;
  for (int64_t i = 0; i < M; i++) {
    double ss = 0;
    for (int64_t k = 0; k < K; k++) {
      double x = gc_load_elem(h[0], p->ta, i * K + k);
      ss += x * x;
    }
    double inv = 1.0 / sqrt(ss / (double)K + (double)sc->eps);
    for (int64_t k = 0; k < K; k++)
      xn[i * K + k] = gc_load_elem(h[0], p->ta, i * K + k) * inv * gc_load_elem(h[3], tn, k);
  }
  double gamma = (double)K * 0x1p-24 + (double)(K + 8) * 0x1p-24, uc = ulp_rel(p->tc);
  int rc = swiglu ? ref_swiglu(p, h, xn, gamma, ref, tol, e)
                  : dots(NULL, p->ta, xn, h[1], p->tb, M, N, K, ref, tol, e);
  for (int64_t i = 0; !rc && !swiglu && i < M * N; i++)
    tol[i] = uc * fabs(ref[i]) + gamma * tol[i] + ulp_abs(p->tc);
  free(xn);
  return rc;
}

/* x + y: one rounding of the sum (two for a narrow output dtype). With
 * bias, y is row-broadcast: element (i, j) adds Y[j] (Y is [1, N]). */
static void ref_add(const gc_problem_t *p, void **h, double *ref, double *tol, int bias) {
  for (int64_t i = 0; i < p->m * p->n; i++) {
    double x = gc_load_elem(h[0], p->ta, i), y = gc_load_elem(h[1], p->tb, bias ? i % p->n : i);
    ref[i] = x + y;
    tol[i] = ulp_rel(p->tc) * fabs(x + y) + 0x1p-24 * (fabs(x) + fabs(y)) + ulp_abs(p->tc);
  }
}

/* concat: row i of Z is row i of X (K values) then row i of Y (N - K):
 * exact up to the rounding into Z's dtype. */
static void ref_concat(const gc_problem_t *p, void **h, double *ref, double *tol) {
  for (int64_t i = 0; i < p->m; i++)
    for (int64_t j = 0; j < p->n; j++) {
      const double v = j < p->k ? gc_load_elem(h[0], p->ta, i * p->k + j)
                                : gc_load_elem(h[1], p->ta, i * (p->n - p->k) + j - p->k);
      ref[i * p->n + j] = v;
      tol[i * p->n + j] = 0.5 * ulp_rel(p->tc) * fabs(v) + ulp_abs(p->tc);
    }
}

/* A row copy: exact up to the rounding into the output dtype (a row of a
 * block table is dequantized exactly, base/quant.h). */
static int ref_embed(const gc_problem_t *p, void **h, double *ref, double *tol, gc_err_t *e) {
  const int32_t *tok = h[0];
  float *row = gc_dtype_is_block(p->tb) ? gc_malloc((size_t)p->n * sizeof *row, e) : NULL;
  if (gc_dtype_is_block(p->tb) && !row) return GC_ENOMEM;
  for (int64_t i = 0; i < p->m; i++) {
    int ok = tok[i] >= 0 && tok[i] < p->k;
    if (ok && row)
      gc_quant_dequantize((gc_qtype_t)gc_dtype_qtype(p->tb),
                          (const char *)h[1] + gc_dtype_bytes(p->tb, (int64_t)tok[i] * p->n), row, p->n);
    for (int64_t j = 0; j < p->n; j++) {
      double r = !ok ? 0.0 : row ? row[j] : gc_load_elem(h[1], p->tb, (int64_t)tok[i] * p->n + j);
      ref[i * p->n + j] = r;
      tol[i * p->n + j] = 0.5 * ulp_rel(p->tc) * fabs(r) + ulp_abs(p->tc);
    }
  }
  free(row);
  return GC_OK;
}

/* Rotate the pairs of one head, x[0..D-1] in fp64, by theta = pos *
 * inv_freq[j] (double) into ref and tol at dst. The rule: rounding into
 * the output dtype plus fp32 arithmetic on the pair, and where the inputs
 * carry errors (xt: each one's bound; NULL: exact) those errors through
 * the rotation, |cos|·err(a) + |sin|·err(b). */
static void rotate(const gc_problem_t *p, const gc_op_scalars_t *sc, const double *x, const double *xt,
                   double *ref, double *tol, int64_t dst, const double *inv, int64_t pos) {
  int64_t half = p->d / 2;
  for (int64_t j = 0; j < half; j++) {
    int64_t ia = sc->layout ? 2 * j : j, ib = sc->layout ? 2 * j + 1 : j + half;
    double a = x[ia], b = x[ib];
    double th = (double)pos * inv[j], c = cos(th), s = sin(th);
    double ra = a * c - b * s, rb = a * s + b * c, slack = 4 * 0x1p-24 * (fabs(a) + fabs(b));
    double ea = xt ? fabs(c) * xt[ia] + fabs(s) * xt[ib] : 0, eb = xt ? fabs(s) * xt[ia] + fabs(c) * xt[ib] : 0;
    ref[dst + ia] = ra;
    ref[dst + ib] = rb;
    tol[dst + ia] = ulp_rel(p->tc) * fabs(ra) + slack + ea + ulp_abs(p->tc);
    tol[dst + ib] = ulp_rel(p->tc) * fabs(rb) + slack + eb + ulp_abs(p->tc);
  }
}

/* Row t of a rope_kv pass: its position and the cache row it writes
 * (rope_kv: pos0 + t in the one cache; rope_kv_batch: its own position in
 * its slot, from the rowpos buffer as the kernel reads it). */
static void rope_row(const gc_problem_t *p, const gc_op_scalars_t *sc, const int32_t *rowpos,
                     int64_t t, int64_t *pos, int64_t *crow) {
  if (!rowpos) {
    *pos = *crow = sc->pos0 + t;
    return;
  }
  *pos = rowpos[t];
  *crow = rowpos[p->m + t] * slot_rows(p, sc) + *pos;
}

/* A cache the op writes: rows rows of init (C's dtype) as they were,
 * tolerance 0; the rows the op writes are overwritten after. */
static void keep_cache(const gc_problem_t *p, int64_t rows, const void *init, double *ref, double *tol) {
  for (int64_t i = 0; i < rows * p->g * p->d; i++) {
    ref[i] = gc_load_elem(init, p->tc, i);
    tol[i] = 0;
  }
}

/* The outputs of a rope pass: Qout, Kc, Vc. */
typedef struct rope_out {
  double *ref[3], *tol[3];
} rope_out_t;

/* The rows of a rope pass over qkv [M, (H+2G)·D] in fp64 (qt: each
 * value's error bound, NULL when exact): query heads rotated into Qout,
 * key heads rotated and value heads copied into the cache row each token
 * writes (rowpos: rope_kv_batch's [2, M], else NULL). */
static void rope_rows(const gc_problem_t *p, const gc_op_scalars_t *sc, const double *qkv,
                      const double *qt, const double *inv, const int32_t *rowpos, const rope_out_t *o) {
  int64_t H = p->h, G = p->g, D = p->d, row = (H + 2 * G) * D;
  for (int64_t t = 0; t < p->m; t++) {
    int64_t pos, c;
    rope_row(p, sc, rowpos, t, &pos, &c);
    for (int64_t hh = 0; hh < H; hh++) {
      int64_t at = t * row + hh * D;
      rotate(p, sc, qkv + at, qt ? qt + at : NULL, o->ref[0], o->tol[0], (t * H + hh) * D, inv, pos);
    }
    for (int64_t g = 0; g < G; g++) {
      int64_t at = t * row + (H + g) * D, v = at + G * D, dst = (c * G + g) * D;
      rotate(p, sc, qkv + at, qt ? qt + at : NULL, o->ref[1], o->tol[1], dst, inv, pos);
      for (int64_t j = 0; j < D; j++) {
        o->ref[2][dst + j] = qkv[v + j];
        o->tol[2][dst + j] = qt ? qt[v + j] : 0.5 * ulp_rel(p->tc) * fabs(qkv[v + j]) + ulp_abs(p->tc);
      }
    }
  }
}

/* rope_kv and rope_kv_batch (rowpos: h[5], int32 [2, M]). Cache rows the
 * op does not write stay as they were (tolerance 0). */
static int ref_rope_kv(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                       double **tol, const int32_t *rowpos, gc_err_t *e) {
  int64_t rows = rowpos ? p->m * slot_rows(p, sc) : sc->pos0 + p->m;
  double *x = gc_ref_f64(h[0], p->ta, p->m * (p->h + 2 * p->g) * p->d, e);
  if (!x) return e->code;
  keep_cache(p, rows, h[2], ref[2], tol[2]);
  keep_cache(p, rows, h[3], ref[3], tol[3]);
  rope_rows(p, sc, x, NULL, h[4], rowpos, &(rope_out_t){{ref[1], ref[2], ref[3]}, {tol[1], tol[2], tol[3]}});
  free(x);
  return GC_OK;
}

/* rmsnorm_gemm_rope_kv (buffers A B Qout norm Kc Vc inv_freq pos): the
 * rope pass of rmsnorm_gemm's C [M, N], each value carrying the GEMM
 * rule's error, which includes its rounding into C's dtype (what the
 * kernel rotates). rmsnorm_gemm_bias_rope_kv (then b[N]): b added to
 * every row of C first, in fp32 (its rounding, and one more of C's dtype
 * on b's share, added to the error). */
static int ref_norm_gemm_rope(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                              double **tol, gc_err_t *e) {
  size_t cnt = (size_t)(p->m * p->n > 0 ? p->m * p->n : 1);
  double *x = gc_malloc(cnt * sizeof *x, e), *xt = x ? gc_malloc(cnt * sizeof *xt, e) : NULL;
  int rc = xt ? ref_norm_gemm(p, sc, h, x, xt, e) : GC_ENOMEM;
  const int bias = !strcmp(p->op, "rmsnorm_gemm_bias_rope_kv"); /* b is h[8] */
  for (int64_t i = 0; !rc && bias && i < p->m * p->n; i++) {
    const double b = gc_load_elem(h[8], p->tb, i % p->n);
    xt[i] += ulp_rel(p->tc) * fabs(b) + 0x1p-24 * (fabs(x[i]) + fabs(b));
    x[i] += b;
  }
  if (!rc) {
    keep_cache(p, sc->pos0 + p->m, h[4], ref[4], tol[4]);
    keep_cache(p, sc->pos0 + p->m, h[5], ref[5], tol[5]);
    rope_rows(p, sc, x, xt, h[6], NULL, &(rope_out_t){{ref[2], ref[4], ref[5]}, {tol[2], tol[4], tol[5]}});
  }
  free(x);
  free(xt);
  return rc;
}

typedef struct att_job {
  const gc_problem_t *p;
  const gc_op_scalars_t *sc;
  const double *q, *k, *v; /* [M, H, D], [pos0 + M, G, D] twice, in fp64 (attention_batch:
                              [M·S, G, D], M slots of S rows) */
  const int32_t *rowpos;   /* attention_batch: [2, M] positions, then slots; else NULL */
  double *ref, *tol;       /* [M, H, D] */
  atomic_llong next;       /* next (token, head) item: t * H + head */
  atomic_int nomem;
} att_job_t;

/* Query items t·H + hh until none is left; w, o, ao are this thread's. */
static void *att_worker(void *arg) {
  att_job_t *j = arg;
  const gc_problem_t *p = j->p;
  int64_t H = p->h, G = p->g, D = p->d, per = H / G;
  int64_t most = j->rowpos ? slot_rows(p, j->sc) : j->sc->pos0 + p->m; /* keys of a row, at most */
  double *w = malloc((size_t)most * sizeof *w), *o = malloc((size_t)D * 2 * sizeof *o);
  if (!w || !o) {
    atomic_store(&j->nomem, 1);
    free(w), free(o);
    return NULL;
  }
  double *ao = o + D;
  for (;;) {
    int64_t it = (int64_t)atomic_fetch_add(&j->next, 1);
    if (it >= p->m * H) break;
    int64_t t = it / H, hh = it % H, L = j->sc->pos0 + t + 1, kv = hh / per, base = 0;
    if (j->rowpos) { /* its own length, in its own slot */
      L = j->rowpos[t] + 1;
      base = j->rowpos[p->m + t] * slot_rows(p, j->sc);
    }
    const double *q = j->q + it * D;
    double mx = -INFINITY, sum = 0;
    for (int64_t l = 0; l < L; l++) {
      const double *k = j->k + ((base + l) * G + kv) * D;
      double d = 0;
      for (int64_t c = 0; c < D; c++) d += q[c] * k[c];
      w[l] = j->sc->scale * d;
      if (w[l] > mx) mx = w[l];
    }
    for (int64_t l = 0; l < L; l++) sum += (w[l] = exp(w[l] - mx));
    for (int64_t c = 0; c < D; c++) o[c] = ao[c] = 0;
    for (int64_t l = 0; l < L; l++) {
      const double *v = j->v + ((base + l) * G + kv) * D, pl = w[l] / sum;
      for (int64_t c = 0; c < D; c++) o[c] += pl * v[c], ao[c] += pl * fabs(v[c]);
    }
    for (int64_t c = 0; c < D; c++) {
      j->ref[it * D + c] = o[c];
      j->tol[it * D + c] = ulp_rel(p->tc) * fabs(o[c]) + (4.0 * (double)(L + D) * 0x1p-24 + ulp_rel(p->tb)) * ao[c] +
                           ulp_abs(p->tc);
    }
  }
  free(w), free(o);
  return NULL;
}

/* softmax(scale q.k) v over keys 0..pos, on every core. Rule: output
 * rounding, plus 4 (L + D) 2^-24 sum_j p_j |v_j| for fp32 scores,
 * exponentials and sums over L keys of length D, plus one rounding of
 * each p_j to the cache's dtype (ulp_rel(tb) sum_j p_j |v_j|: tensor-core
 * kernels multiply P by V in that dtype, as FlashAttention does). */
static int ref_attention(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h,
                         const int32_t *rowpos, double *ref, double *tol, gc_err_t *e) {
  int64_t rows = (rowpos ? p->m * slot_rows(p, sc) : sc->pos0 + p->m) * p->g * p->d;
  att_job_t j = {p, sc, gc_ref_f64(h[0], p->ta, p->m * p->h * p->d, e), NULL, NULL, rowpos, ref, tol, 0, 0};
  if (j.q) j.k = gc_ref_f64(h[1], p->tb, rows, e);
  if (j.k) j.v = gc_ref_f64(h[2], p->tb, rows, e);
  if (j.v) {
    gc_ref_threads(att_worker, &j, p->m * p->h * (sc->pos0 + p->m) > (1 << 16) ? gc_ref_host_threads() : 1);
    if (atomic_load(&j.nomem)) gc_err_set(e, GC_ENOMEM, "out of memory in the attention reference");
  }
  int rc = j.v && !atomic_load(&j.nomem) ? GC_OK : e->code;
  free((void *)j.q), free((void *)j.k), free((void *)j.v);
  return rc;
}

/* argmax (and argmax_step's idx): row i's lowest index of its maximum;
 * NaN never wins unless the row is all NaN (then 0). Exact, tolerance 0. */
static void ref_argmax(const gc_problem_t *p, void **h, double *ref, double *tol) {
  for (int64_t i = 0; i < p->m; i++) {
    int64_t at = -1;
    double best = 0;
    for (int64_t j = 0; j < p->n; j++) {
      double v = gc_load_elem(h[0], p->ta, i * p->n + j);
      if (v == v && (at < 0 || v > best)) best = v, at = j;
    }
    ref[i] = at < 0 ? 0 : (double)at;
    tol[i] = 0;
  }
}

/* The table's reference entries: each op's rule applied to its buffers. */
static int r_gemm(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                  double **tol, gc_err_t *e) {
  (void)sc;
  return ref_gemm(p, h, 0, ref[2], tol[2], e);
}
static int r_gemm_add(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                      double **tol, gc_err_t *e) {
  (void)sc;
  return ref_gemm(p, h, 1, ref[2], tol[2], e);
}
static int r_swiglu(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                    double **tol, gc_err_t *e) {
  (void)sc;
  return ref_swiglu(p, h, NULL, (double)p->k * 0x1p-24, ref[2], tol[2], e);
}
static int r_norm_gemm(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                       double **tol, gc_err_t *e) {
  return ref_norm_gemm(p, sc, h, ref[2], tol[2], e);
}
static int r_rmsnorm(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                     double **tol, gc_err_t *e) {
  (void)e;
  ref_rmsnorm(p, sc, h, ref[2], tol[2]);
  return GC_OK;
}
/* Qwen3's head norms of qkv [M, (H+2G)·D] (dtype t) into ref, tol: each of
 * a row's H query heads and G key heads normalised over its D values
 * (rmsnorm's rules: the fp32 sum of squares and rsqrt, (D + 8)·2^-24
 * relative, then the rounding into C's dtype) and scaled by qn (queries)
 * or kn (keys); the G value heads stay as they are, exactly. */
static void qk_norm_heads(const gc_problem_t *p, const gc_op_scalars_t *sc, const void *qkv, gc_dtype_t t,
                          const void *qn, const void *kn, double *ref, double *tol) {
  const int64_t D = p->d, heads = p->h + 2 * p->g, normed = p->h + p->g;
  const gc_dtype_t tn = gc_op_role_dtype(p, 'N');
  const double rel = ((double)D + 8) * 0x1p-24, u = ulp_rel(p->tc);
  for (int64_t i = 0; i < p->m * heads; i++) { /* head i % heads of row i / heads */
    const int64_t o = i * D, hd = i % heads;
    double ss = 0, inv = 1;
    for (int64_t j = 0; hd < normed && j < D; j++) {
      const double x = gc_load_elem(qkv, t, o + j);
      ss += x * x;
    }
    if (hd < normed) inv = 1.0 / sqrt(ss / (double)D + (double)sc->eps);
    for (int64_t j = 0; j < D; j++) {
      const double x = gc_load_elem(qkv, t, o + j);
      const double r = hd < normed ? x * inv * gc_load_elem(hd < p->h ? qn : kn, tn, j) : x;
      ref[o + j] = r;
      tol[o + j] = hd < normed ? (u + rel) * fabs(r) + ulp_abs(p->tc) : 0;
    }
  }
}

/* qk_norm, in place on QKV[M, (H+2G)·D] (C's dtype): qk_norm_heads. */
static int r_qk_norm(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                     double **tol, gc_err_t *e) {
  (void)e;
  qk_norm_heads(p, sc, h[0], p->tc, h[1], h[2], ref[0], tol[0]);
  return GC_OK;
}

/* The rope pass of a QKV that a step before rope changes on the way (the
 * fused ops: bias_rope_kv, qk_norm_rope_kv, buffers QKV Qout Kc Vc inv_freq
 * pos, then b or qn kn): the changed rows x, each value with its error xt
 * (which includes its rounding into C's dtype, what the kernel rotates),
 * rotated as rmsnorm_gemm_rope_kv's are; cache rows the op does not write
 * stay as they were. */
static int ref_pre_rope(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                        double **tol, gc_err_t *e) {
  const int64_t W = (p->h + 2 * p->g) * p->d, cnt = p->m * W > 0 ? p->m * W : 1;
  double *x = gc_malloc((size_t)cnt * sizeof *x, e), *xt = x ? gc_malloc((size_t)cnt * sizeof *xt, e) : NULL;
  if (!xt) {
    free(x);
    return GC_ENOMEM;
  }
  if (!strcmp(p->op, "bias_rope_kv")) { /* bias's rule over the rows of W values */
    gc_problem_t rows = *p;
    rows.n = W;
    ref_add(&rows, (void *[]){h[0], h[6]}, x, xt, 1);
  } else {
    qk_norm_heads(p, sc, h[0], p->ta, h[6], h[7], x, xt);
  }
  keep_cache(p, sc->pos0 + p->m, h[2], ref[2], tol[2]);
  keep_cache(p, sc->pos0 + p->m, h[3], ref[3], tol[3]);
  rope_rows(p, sc, x, xt, h[4], NULL, &(rope_out_t){{ref[1], ref[2], ref[3]}, {tol[1], tol[2], tol[3]}});
  free(x);
  free(xt);
  return GC_OK;
}
static int r_add(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                 double **tol, gc_err_t *e) {
  (void)sc, (void)e;
  ref_add(p, h, ref[2], tol[2], 0);
  return GC_OK;
}
static int r_bias(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                  double **tol, gc_err_t *e) {
  (void)sc, (void)e;
  ref_add(p, h, ref[2], tol[2], 1);
  return GC_OK;
}
static int r_concat(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                    double **tol, gc_err_t *e) {
  (void)sc, (void)e;
  ref_concat(p, h, ref[2], tol[2]);
  return GC_OK;
}
static int r_embed(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                   double **tol, gc_err_t *e) {
  (void)sc;
  return ref_embed(p, h, ref[2], tol[2], e);
}
static int r_argmax(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                    double **tol, gc_err_t *e) {
  (void)sc, (void)e;
  ref_argmax(p, h, ref[1], tol[1]);
  return GC_OK;
}
/* argmax_step: argmax's idx; the last row's also in box (p0 % 2), the
 * other box as it was; the position p0 advanced by the rows. Exact. */
static int r_argmax_step(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                         double **tol, gc_err_t *e) {
  (void)sc, (void)e;
  ref_argmax(p, h, ref[1], tol[1]);
  const int32_t p0 = ((const int32_t *)h[2])[0];
  ref[2][0] = (double)p0 + (double)p->m, tol[2][0] = 0;
  for (int b = 0; b < 2; b++)
    ref[3 + b][0] = b == p0 % 2 ? ref[1][p->m - 1] : (double)((const int32_t *)h[3 + b])[0], tol[3 + b][0] = 0;
  return GC_OK;
}
static int r_rope_kv(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                     double **tol, gc_err_t *e) {
  return ref_rope_kv(p, sc, h, ref, tol, NULL, e);
}
static int r_attention(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h, double **ref,
                       double **tol, gc_err_t *e) {
  return ref_attention(p, sc, h, NULL, ref[3], tol[3], e);
}
static int r_rope_kv_batch(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h,
                           double **ref, double **tol, gc_err_t *e) {
  return ref_rope_kv(p, sc, h, ref, tol, h[5], e);
}
static int r_attention_batch(const gc_problem_t *p, const gc_op_scalars_t *sc, void **h,
                             double **ref, double **tol, gc_err_t *e) {
  return ref_attention(p, sc, h, h[4], ref[3], tol[3], e);
}

int gc_op_reference(const gc_problem_t *p, const gc_op_scalars_t *sc,
                    void *host[GC_OP_MAX_BUFS], double *ref[GC_OP_MAX_BUFS],
                    double *tol[GC_OP_MAX_BUFS], gc_err_t *e) {
  if (gc_problem_check(p, e)) return e->code;
  return gc_op_find(p->op)->reference(p, sc, host, ref, tol, e);
}

#define CHECK_CHUNK (1 << 20)
#define CHECK_TABLE 64 /* chunks per round: results of one round fit on the stack */

/* A check split in chunks of CHECK_CHUNK elements over the host's cores,
 * CHECK_TABLE chunks a round: each chunk's worst ratio and first failing
 * element; the first failure overall is the one reported, as one pass
 * would. */
typedef struct check_job {
  const gc_opbuf_t *b;
  const void *out;
  const double *ref, *tol;
  int64_t start;               /* this round's first element */
  double worst[CHECK_TABLE];  /* per chunk of the round */
  int64_t first[CHECK_TABLE]; /* per chunk: first failing index, or -1 */
} check_job_t;

static void check_body(void *arg, int64_t i0, int64_t i1) {
  check_job_t *c = arg;
  int64_t bad = -1;
  double w = 0;
  for (int64_t i = i0; i < i1; i++) {
    double g = gc_load_elem(c->out, c->b->dtype, i), err = fabs(g - c->ref[i]);
    double ratio = !isfinite(g) ? INFINITY : err == 0 ? 0 : c->tol[i] > 0 ? err / c->tol[i] : INFINITY;
    if (ratio > w) w = ratio;
    if (bad < 0 && !(ratio <= 1.0)) bad = i;
  }
  c->worst[(i0 - c->start) / CHECK_CHUNK] = w;
  c->first[(i0 - c->start) / CHECK_CHUNK] = bad;
}

int gc_op_check(const gc_opbuf_t *b, const void *out, const double *ref, const double *tol,
                double *worst, char *why, size_t why_n) {
  static const int64_t round = (int64_t)CHECK_CHUNK * CHECK_TABLE;
  check_job_t c = {.b = b, .out = out, .ref = ref, .tol = tol};
  int64_t bad = -1;
  *worst = 0;
  for (c.start = 0; c.start < b->count; c.start += round) {
    int64_t end = c.start + round < b->count ? c.start + round : b->count;
    int64_t chunks = (end - c.start + CHECK_CHUNK - 1) / CHECK_CHUNK;
    gc_ref_for(c.start, end, CHECK_CHUNK, check_body, &c, chunks > 4 ? gc_ref_host_threads() : 1);
    for (int64_t k = 0; k < chunks; k++) {
      if (c.worst[k] > *worst) *worst = c.worst[k];
      if (bad < 0) bad = c.first[k];
    }
  }
  if (bad >= 0 && why) {
    int64_t cols = b->cols > 0 ? b->cols : 1;
    snprintf(why, why_n, "%s element %lld (row %lld, col %lld): got %.9g, want %.9g "
             "(tolerance %.3g)", b->name, (long long)bad, (long long)(bad / cols),
             (long long)(bad % cols), gc_load_elem(out, b->dtype, bad), ref[bad], tol[bad]);
  }
  return bad < 0;
}

/* The table's work entries (FLOPs of one call). */
static double f_gemm(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  (void)sc;
  return 2.0 * p->m * p->n * p->k;
}
static double f_gemm_add(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  return f_gemm(p, sc) + (double)p->m * p->n;
}
static double f_swiglu(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  (void)sc;
  return 4.0 * p->m * p->n * p->k;
}
static double f_norm_gemm(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  return f_gemm(p, sc) + 3.0 * p->m * p->k;
}
static double f_norm_swiglu(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  return f_swiglu(p, sc) + 3.0 * p->m * p->k;
}
static double f_rows(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  (void)sc;
  return 3.0 * p->m * p->n;
}
static double f_qk_norm(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  (void)sc;
  return 3.0 * p->m * (p->h + p->g) * p->d;
}
static double f_rope_kv(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  (void)sc;
  return 6.0 * p->m * (p->h + p->g) * p->d;
}
static double f_pre_rope(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  const double pre = !strcmp(p->op, "qk_norm_rope_kv") ? f_qk_norm(p, sc) : (double)p->m * (p->h + 2 * p->g) * p->d;
  return f_rope_kv(p, sc) + pre; /* the rotation and the folded step (a norm, or one add a value) */
}
static double f_norm_gemm_rope(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  return f_norm_gemm(p, sc) + f_rope_kv(p, sc);
}
static double f_attention(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  return 4.0 * p->m * p->h * p->d * (double)(sc->pos0 + (p->m + 1) / 2);
}
/* Each row over its own keys; pos0 stands for the rows' mean position. */
static double f_attention_batch(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  return 4.0 * p->m * p->h * p->d * (double)(sc->pos0 + 1);
}

void gc_op_work(const gc_problem_t *p, const gc_op_scalars_t *sc, double *flops, double *bytes) {
  gc_opbuf_t b[GC_OP_MAX_BUFS];
  gc_env_t env;
  int n;
  *flops = *bytes = 0;
  const gc_op_t *op = gc_op_find(p->op);
  if (!op || gc_op_buffers(p, sc, b, &n, NULL) || shape_env(p, sc, &env, NULL)) return;
  *flops = op->flops(p, sc);
  for (int i = 0; i < n; i++) {
    int64_t rows = b[i].cols > 0 ? b[i].count / b[i].cols : 0;
    /* a cache moves only the rows the op reads or writes */
    if (op->buf[i].touched && gc_expr_eval(op->buf[i].touched, &env, &rows, NULL)) rows = 0;
    *bytes += (double)gc_dtype_bytes(b[i].dtype, rows * b[i].cols);
  }
}

static double flops_at(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  double f, b;
  gc_op_work(p, sc, &f, &b);
  return f;
}

/* Every buffer's bytes, whole (unlike gc_op_work's touched cache rows). */
static double bytes_at(const gc_problem_t *p, const gc_op_scalars_t *sc) {
  gc_opbuf_t b[GC_OP_MAX_BUFS];
  int n;
  double s = 0;
  if (gc_op_buffers(p, sc, b, &n, NULL)) return 0;
  for (int i = 0; i < n; i++) s += (double)gc_opbuf_bytes(&b[i]);
  return s;
}

double gc_op_flops(const gc_problem_t *p) {
  gc_op_scalars_t sc;
  gc_op_default_scalars(p, &sc);
  return flops_at(p, &sc);
}

double gc_op_bytes(const gc_problem_t *p) {
  gc_op_scalars_t sc;
  gc_op_default_scalars(p, &sc);
  return bytes_at(p, &sc);
}

int gc_op_tune_points(const gc_problem_t *p, gc_op_scalars_t sc[GC_OP_MAX_POINTS]) {
  /* after [0], the default's (1023): [0] any length's, which a model's
     decode step runs past its bucket; [1] a bucket's (k > 0) */
  static const int64_t points[2][3] = {{5, 2047, 4095}, {5, 127, 3071}};
  const int64_t *decode_pos = points[p->k > 0];
  gc_op_default_scalars(p, &sc[0]);
  if (strcmp(p->op, "attention") || p->m != 1) return 1;
  int n = 1;
  for (size_t i = 0; i < GC_ARRAY_LEN(points[0]); i++) {
    int64_t pos = p->k > 0 && decode_pos[i] >= p->k ? p->k - 1 : decode_pos[i]; /* a bucket's last */
    int seen = 0;
    for (int j = 0; j < n; j++) seen |= sc[j].pos0 == pos;
    if (seen) continue;
    sc[n] = sc[0];
    sc[n++].pos0 = pos;
  }
  return n;
}

void gc_op_point_label(const gc_op_scalars_t *sc, int i, char *out, size_t n) {
  out[0] = 0;
  if (i > 0) snprintf(out, n, "at position %lld: ", (long long)sc->pos0);
}

double gc_op_tune_flops(const gc_problem_t *p) {
  gc_op_scalars_t sc[GC_OP_MAX_POINTS];
  double s = 0;
  for (int i = 0, n = gc_op_tune_points(p, sc); i < n; i++) s += flops_at(p, &sc[i]);
  return s;
}

double gc_op_tune_bytes(const gc_problem_t *p) {
  gc_op_scalars_t sc[GC_OP_MAX_POINTS];
  double s = 0;
  for (int i = 0, n = gc_op_tune_points(p, sc); i < n; i++) s += bytes_at(p, &sc[i]);
  return s;
}

/* ---- the table ------------------------------------------------------------- */

#define IN GC_BUF_IN
#define OUT GC_BUF_OUT
#define INOUT GC_BUF_INOUT
#define BUF(n, t, r, c, k, f) {n, t, r, c, k, f, NULL}

static const gc_op_t ops[] = {
    {"gemm", "mnk", "C[M,N] = A[M,K] * B[N,K]^T, fp32 accumulation", 1, 0, 3,
     {BUF("A", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("B", 'B', "N", "K", IN, GC_FILL_UNIT),
      BUF("C", 'C', "M", "N", OUT, 0)},
     "MNK", 0, r_gemm, f_gemm, 1, NULL},
    {"gemm_add", "mnk", "C[M,N] += A[M,K] * B[N,K]^T (the residual stream updated in place)", 1, 0, 3,
     {BUF("A", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("B", 'B', "N", "K", IN, GC_FILL_UNIT),
      BUF("C", 'C', "M", "N", INOUT, GC_FILL_UNIT)},
     "MNK", 0, r_gemm_add, f_gemm_add, 1, NULL},
    {"gemm_swiglu", "mnk",
     "C[M,N] = silu(A W[0:N]^T) * (A W[N:2N]^T), W is [2N,K] (gate then up)", 2, 0, 3,
     {BUF("A", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("W", 'B', "2*N", "K", IN, GC_FILL_UNIT),
      BUF("C", 'C', "M", "N", OUT, 0)},
     "MNK", 0, r_swiglu, f_swiglu, 1, NULL},
    {"rmsnorm_gemm", "mnk",
     "C[M,N] = rmsnorm(A; norm[K], eps) * B[N,K]^T: the norm in the GEMM's pass over A", 1, 1, 4,
     {BUF("A", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("B", 'B', "N", "K", IN, GC_FILL_UNIT),
      BUF("C", 'C', "M", "N", OUT, 0), BUF("norm", 'N', "1", "K", IN, GC_FILL_NORM)},
     "MNK", 'e', r_norm_gemm, f_norm_gemm, 1, NULL},
    {"rmsnorm_gemm_swiglu", "mnk", "gemm_swiglu of rmsnorm(A; norm[K], eps)", 2, 1, 4,
     {BUF("A", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("W", 'B', "2*N", "K", IN, GC_FILL_UNIT),
      BUF("C", 'C', "M", "N", OUT, 0), BUF("norm", 'N', "1", "K", IN, GC_FILL_NORM)},
     "MNK", 'e', r_norm_gemm, f_norm_swiglu, 1, NULL},
    {"rmsnorm", "mn", "Y[M,N] = X / sqrt(mean(X^2) + eps) * W[N], eps 1e-5", 1, 0, 3,
     {BUF("X", 'A', "M", "N", IN, GC_FILL_UNIT), BUF("W", 'B', "1", "N", IN, GC_FILL_NORM),
      BUF("Y", 'C', "M", "N", OUT, 0)},
     "MN", 'e', r_rmsnorm, f_rows, 0, NULL},
    {"add", "mn", "Z[M,N] = X + Y", 1, 0, 3,
     {BUF("X", 'A', "M", "N", IN, GC_FILL_UNIT), BUF("Y", 'B', "M", "N", IN, GC_FILL_UNIT),
      BUF("Z", 'C', "M", "N", OUT, 0)},
     "MN", 0, r_add, f_rows, 0, NULL},
    {"bias", "mn", "Z[M,N] = X + b[N] on every row (a projection's bias: Qwen2's q, k, v)", 1, 0, 3,
     {BUF("X", 'A', "M", "N", IN, GC_FILL_UNIT), BUF("b", 'B', "1", "N", IN, GC_FILL_UNIT),
      BUF("Z", 'C', "M", "N", OUT, 0)},
     "MN", 0, r_bias, f_rows, 0, NULL},
    {"qk_norm", "mhgd",
     "rmsnorm of each query head (by qn[D]) and key head (by kn[D]) of QKV[M,(H+2G)D], in place (Qwen3)", 1, 0, 3,
     {BUF("QKV", 'C', "M", "(H+2*G)*D", INOUT, GC_FILL_UNIT), BUF("qn", 'N', "1", "D", IN, GC_FILL_NORM),
      BUF("kn", 'N', "1", "D", IN, GC_FILL_NORM)},
     "MHGD", 'e', r_qk_norm, f_qk_norm, 0, NULL},
    {"concat", "mnk", "Z[M,N] = [X[M,K] | Y[M,N-K]], rows joined (a split QKV's parts)", 1, 0, 3,
     {BUF("X", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("Y", 'A', "M", "N-K", IN, GC_FILL_UNIT),
      BUF("Z", 'C', "M", "N", OUT, 0)},
     "MNK", 0, r_concat, f_rows, 0, NULL},
    {"embed", "mnk", "Z[M,N] = table[K,N][tokens[M]]", 1, 0, 3,
     {BUF("tokens", 'i', "1", "M", IN, GC_FILL_TOKENS), BUF("table", 'B', "K", "N", IN, GC_FILL_UNIT),
      BUF("Z", 'C', "M", "N", OUT, 0)},
     "MNK", 0, r_embed, f_rows, 1, NULL},
    {"rope_kv", "mhgd", "rotate q,k of QKV[M,(H+2G)D]; write k,v to the cache at pos0..", 1, 0, 6,
     {BUF("QKV", 'A', "M", "(H+2*G)*D", IN, GC_FILL_UNIT), BUF("Qout", 'C', "M", "H*D", OUT, 0),
      {"Kc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"}, {"Vc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"},
      BUF("inv_freq", 'd', "1", "D/2", IN, GC_FILL_INV_FREQ), BUF("pos", 'i', "1", "1", IN, GC_FILL_POS)},
     "MHGDL", 0, r_rope_kv, f_rope_kv, 0, NULL},
    {"bias_rope_kv", "mhgd", "rope_kv of QKV[M,(H+2G)D] + b[(H+2G)D] on every row (Qwen2's biases before RoPE)",
     1, 0, 7,
     {BUF("QKV", 'A', "M", "(H+2*G)*D", IN, GC_FILL_UNIT), BUF("Qout", 'C', "M", "H*D", OUT, 0),
      {"Kc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"}, {"Vc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"},
      BUF("inv_freq", 'd', "1", "D/2", IN, GC_FILL_INV_FREQ), BUF("pos", 'i', "1", "1", IN, GC_FILL_POS),
      BUF("b", 'B', "1", "(H+2*G)*D", IN, GC_FILL_UNIT)},
     "MHGDL", 0, ref_pre_rope, f_pre_rope, 0, NULL},
    {"qk_norm_rope_kv", "mhgd", "rope_kv of QKV[M,(H+2G)D] after qk_norm of its q and k heads (Qwen3)", 1, 0, 8,
     {BUF("QKV", 'A', "M", "(H+2*G)*D", IN, GC_FILL_UNIT), BUF("Qout", 'C', "M", "H*D", OUT, 0),
      {"Kc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"}, {"Vc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"},
      BUF("inv_freq", 'd', "1", "D/2", IN, GC_FILL_INV_FREQ), BUF("pos", 'i', "1", "1", IN, GC_FILL_POS),
      BUF("qn", 'N', "1", "D", IN, GC_FILL_NORM), BUF("kn", 'N', "1", "D", IN, GC_FILL_NORM)},
     "MHGDL", 'e', ref_pre_rope, f_pre_rope, 0, NULL},
    {"attention", "mhgd", "causal GQA attention of Q[M,H*D] over the cache", 1, 0, 5,
     {BUF("Q", 'A', "M", "H*D", IN, GC_FILL_UNIT), BUF("Kc", 'B', "S", "G*D", IN, GC_FILL_UNIT),
      BUF("Vc", 'B', "S", "G*D", IN, GC_FILL_UNIT), BUF("O", 'C', "M", "H*D", OUT, 0),
      BUF("pos", 'i', "1", "1", IN, GC_FILL_POS)},
     "MHGD", 's', r_attention, f_attention, 0, "k"},
    {"rope_kv_batch", "mhgd",
     "rope_kv of M rows, row i at position pos[0][i] of cache slot pos[1][i] (batched decode)", 1, 0, 6,
     {BUF("QKV", 'A', "M", "(H+2*G)*D", IN, GC_FILL_UNIT), BUF("Qout", 'C', "M", "H*D", OUT, 0),
      {"Kc", 'C', "M*S", "G*D", INOUT, GC_FILL_SLOT_CACHE, "M"},
      {"Vc", 'C', "M*S", "G*D", INOUT, GC_FILL_SLOT_CACHE, "M"},
      BUF("inv_freq", 'd', "1", "D/2", IN, GC_FILL_INV_FREQ), BUF("pos", 'i', "2", "M", IN, GC_FILL_ROWPOS)},
     "MHGDSL", 0, r_rope_kv_batch, f_rope_kv, 0, NULL},
    {"attention_batch", "mhgd",
     "attention of M rows, row i over rows 0..pos[0][i] of cache slot pos[1][i] (batched decode)", 1, 0, 5,
     {BUF("Q", 'A', "M", "H*D", IN, GC_FILL_UNIT), {"Kc", 'B', "M*S", "G*D", IN, GC_FILL_UNIT, "M*(S-M+1)"},
      {"Vc", 'B', "M*S", "G*D", IN, GC_FILL_UNIT, "M*(S-M+1)"}, BUF("O", 'C', "M", "H*D", OUT, 0),
      BUF("pos", 'i', "2", "M", IN, GC_FILL_ROWPOS)},
     "MHGDS", 's', r_attention_batch, f_attention_batch, 0, NULL},
    {"rmsnorm_gemm_rope_kv", "mnkhgd",
     "rope_kv of rmsnorm_gemm's QKV[M,N], N = (H+2G)*D, in the GEMV's epilogue (decode)", 1, 1, 8,
     {BUF("A", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("B", 'B', "N", "K", IN, GC_FILL_UNIT),
      BUF("Qout", 'C', "M", "H*D", OUT, 0), BUF("norm", 'N', "1", "K", IN, GC_FILL_NORM),
      {"Kc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"}, {"Vc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"},
      BUF("inv_freq", 'd', "1", "D/2", IN, GC_FILL_INV_FREQ), BUF("pos", 'i', "1", "1", IN, GC_FILL_POS)},
     "MNKHGDL", 'e', ref_norm_gemm_rope, f_norm_gemm_rope, 1, NULL},
    {"rmsnorm_gemm_bias_rope_kv", "mnkhgd",
     "rmsnorm_gemm_rope_kv with b[N] added to QKV's row before RoPE (Qwen2's decode; dense weights)", 1, 1, 9,
     {BUF("A", 'A', "M", "K", IN, GC_FILL_UNIT), BUF("B", 'B', "N", "K", IN, GC_FILL_UNIT),
      BUF("Qout", 'C', "M", "H*D", OUT, 0), BUF("norm", 'N', "1", "K", IN, GC_FILL_NORM),
      {"Kc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"}, {"Vc", 'C', "S", "G*D", INOUT, GC_FILL_CACHE, "M"},
      BUF("inv_freq", 'd', "1", "D/2", IN, GC_FILL_INV_FREQ), BUF("pos", 'i', "1", "1", IN, GC_FILL_POS),
      BUF("b", 'B', "1", "N", IN, GC_FILL_UNIT)},
     "MNKHGDL", 'e', ref_norm_gemm_rope, f_norm_gemm_rope, 0, NULL},
    {"argmax", "mn", "idx[M] = the lowest index of the maximum of each row of X[M,N]", 1, 0, 2,
     {BUF("X", 'A', "M", "N", IN, GC_FILL_UNIT), BUF("idx", 'i', "1", "M", OUT, 0)},
     "MN", 0, r_argmax, f_rows, 0, NULL},
    {"argmax_step", "mn",
     "argmax's idx[M]; idx[M-1] also in box0 or box1 (pos[0] even or odd); then pos[0] += M: a greedy "
     "decode step's id posted and its position moved on by the device", 1, 0, 5,
     {BUF("X", 'A', "M", "N", IN, GC_FILL_UNIT), BUF("idx", 'i', "1", "M", OUT, 0),
      BUF("pos", 'i', "1", "1", INOUT, GC_FILL_POS), BUF("box0", 'i', "1", "1", INOUT, GC_FILL_POS),
      BUF("box1", 'i', "1", "1", INOUT, GC_FILL_POS)},
     "MN", 0, r_argmax_step, f_rows, 0, NULL},
};

const gc_op_t *gc_op_table(int *n) {
  *n = (int)GC_ARRAY_LEN(ops);
  return ops;
}

const gc_op_t *gc_op_find(const char *name) {
  for (size_t i = 0; i < GC_ARRAY_LEN(ops); i++)
    if (!strcmp(ops[i].name, name)) return &ops[i];
  return NULL;
}

const char *gc_op_dims(const gc_op_t *op) { return op->dims; }
const char *gc_op_opt_dims(const gc_op_t *op) { return op->opt ? op->opt : ""; }

void gc_op_names(char *out, size_t n) {
  out[0] = 0;
  for (size_t i = 0; i < GC_ARRAY_LEN(ops); i++)
    snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? ", " : "", ops[i].name);
}

int gc_op_check_name(const char *name, gc_err_t *e) {
  if (gc_op_find(name)) return GC_OK;
  char names[1024], q[GC_QUOTE_BUF];
  gc_op_names(names, sizeof names);
  return gc_err_set(e, GC_EINVAL, "unknown op %s (known: %s)", gc_quote(name, GC_QSTR, q, sizeof q), names);
}

/* s as a JSON string (table text is plain ASCII: no escapes needed but
 * for quotes and backslashes). */
static void json_str(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) fprintf(out, *s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
  fputc('"', out);
}

void gc_op_table_json(FILE *out) {
  static const char *const kinds[] = {"in", "out", "inout"};
  fprintf(out, "[\n");
  for (size_t i = 0; i < GC_ARRAY_LEN(ops); i++) {
    const gc_op_t *o = &ops[i];
    fprintf(out, "  {\"name\": \"%s\", \"dims\": \"%s\", \"optional\": \"%s\", \"doc\": ", o->name,
            o->dims, gc_op_opt_dims(o));
    json_str(out, o->doc);
    fprintf(out, ", \"pair\": %d, \"norm\": %d, \"quant\": %d, \"ints\": \"%s\", \"float\": \"%s\", "
            "\"buffers\": [", o->pair, o->norm, o->quant, o->ints,
            o->flt == 'e' ? "eps" : o->flt == 's' ? "scale" : "");
    for (int b = 0; b < o->nbufs; b++) {
      const gc_opbuf_spec_t *s = &o->buf[b];
      fprintf(out, "%s{\"name\": \"%s\", \"dtype\": \"%c\", \"rows\": \"%s\", \"cols\": \"%s\", "
              "\"kind\": \"%s\"}", b ? ", " : "", s->name, s->dtype, s->rows, s->cols, kinds[s->kind]);
    }
    fprintf(out, "]}%s\n", i + 1 < GC_ARRAY_LEN(ops) ? "," : "");
  }
  fprintf(out, "]\n");
}

void gc_op_help(FILE *out) {
  for (size_t i = 0; i < GC_ARRAY_LEN(ops); i++)
    fprintf(out, "  %-20s %s\n", ops[i].name, ops[i].doc);
}
