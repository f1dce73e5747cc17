/* check.c — verification and timing of one kernel on one problem.
 *
 * Buffers. Every buffer lives inside its own larger allocation, between a
 * guard of G >= GUARD bytes before it and one after it, all of it filled
 * with GUARD_BYTE when the check is set up:
 *
 *   alloc  lo            lo+G     S          E       P            P+G
 *     |....|[ guard: G    ]|slack|[ buffer   ]|slack|[ guard: G   ]|....
 *
 * S (the address kernels get) is `align`-aligned (ALIGN, or HOST_ALIGN on
 * the CPU, whose kernels need 64 bytes: a smaller slack after the buffer);
 * its end E lies less than `align` bytes before P, where the guard after
 * it starts; lo, P
 * and G are whole pages where the device protects memory (the slack
 * before S is then less than a page), else S = lo + G.
 * Inputs are uploaded once; outputs are poisoned before each verification
 * launch and in/out buffers (a KV cache) restored to their initial
 * contents, whose to-be-written rows are NaN; before the second launch,
 * the checked one, finite noise far from any reference value takes the
 * place of the NaN (noise_elem). After each verification
 * launch every guard must still hold its pattern and every input its
 * initial bytes (a write that lands there is reported and undone), then
 * every output element is checked.
 *
 * Where the device can protect memory (the CPU), the guards are whole
 * pages: those around an output are inaccessible, and an input with its
 * guards is read-only, for as long as the check lives. A stray write then
 * faults at once (the tuner's worker reports where, gc_check_locate); only
 * the slack between a buffer and the protected pages is compared. Where
 * it cannot (GPUs), whole guards are compared after each launch. */
#include "check.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define GUARD (((size_t)1 << 20) + ((size_t)64 << 10)) /* a write 1 MiB away still lands inside */
#define GUARD_BYTE 0xA5
#define POISON_BYTE 0xFF /* all-ones is NaN in f32, f16 and bf16 */
#define ALIGN 256        /* what gc_dev_alloc promises, kept for each buffer */
#define HOST_ALIGN 64    /* what CPU kernels are promised (templates/README.md) */
#define STAGE ((size_t)4 << 20) /* bytes compared at a time off a device */

struct gc_check {
  gc_dev_t *dev;
  gc_problem_t p;
  gc_op_scalars_t sc;
  gc_opbuf_t bufs[GC_OP_MAX_BUFS];
  int nbufs;
  void *host[GC_OP_MAX_BUFS];       /* initial contents (inputs, in/out) */
  gc_dptr_t dev_buf[GC_OP_MAX_BUFS]; /* S: the buffer inside its allocation */
  size_t bytes[GC_OP_MAX_BUFS];
  gc_dptr_t alloc[GC_OP_MAX_BUFS];  /* the allocation, alloc_bytes[i] long */
  size_t alloc_bytes[GC_OP_MAX_BUFS];
  gc_dptr_t lo[GC_OP_MAX_BUFS];     /* start of the guard before the buffer */
  gc_dptr_t hi[GC_OP_MAX_BUFS];     /* P: start of the guard after it */
  size_t gbytes;                    /* G: bytes of each guard (whole pages) */
  size_t page;                      /* protection granule; 0: none */
  size_t align;                     /* of each buffer: ALIGN or HOST_ALIGN */
  int protected;                    /* the guards and inputs are protected */
  double *ref[GC_OP_MAX_BUFS], *tol[GC_OP_MAX_BUFS]; /* outputs and in/out only */
  unsigned char *readback;          /* largest output */
  unsigned char *stage, *pattern;   /* STAGE bytes each: a downloaded piece, GUARD_BYTEs */
  gc_argpack_t args;
  /* made by the first timing that needs them, kept for the next ones */
  gc_dptr_t flush;                  /* cold-cache reads (gc_time_opts_t.flush) */
  size_t flush_bytes;
  int rot_buf, ncopies;             /* chain timing: copies of input rot_buf */
  gc_dptr_t copy[16];
  int copies_used;                  /* a timing launched on the copies since the last verification */
  uint64_t noise_state;             /* the checked launches' noise (noise_elem) */
};

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static int checked(const gc_opbuf_t *b) { return b->kind != GC_BUF_IN; }

/* Protection of buffer i and its guards: on (inputs read-only, the guards
 * of outputs inaccessible) or off (all read-write). */
static int protect_buf(gc_check_t *c, int i, int on, gc_err_t *e) {
  size_t g = c->gbytes, span = (size_t)(c->hi[i] - c->lo[i]) + g;
  if (!checked(&c->bufs[i]))
    return gc_dev_protect(c->dev, c->lo[i], span, on ? GC_PROT_READ : GC_PROT_RW, e);
  int prot = on ? GC_PROT_NONE : GC_PROT_RW;
  if (gc_dev_protect(c->dev, c->lo[i], g, prot, e) ||
      gc_dev_protect(c->dev, c->hi[i], g, prot, e))
    return e->code;
  return GC_OK;
}

void gc_check_free(gc_check_t *c) {
  if (!c) return;
  for (int i = 0; i < c->nbufs; i++) {
    free(c->host[i]);
    free(c->ref[i]);
    free(c->tol[i]);
    if (c->protected && c->alloc[i]) protect_buf(c, i, 0, NULL);
    gc_dev_free(c->dev, c->alloc[i]);
  }
  for (int i = 0; i < c->ncopies; i++) gc_dev_free(c->dev, c->copy[i]);
  gc_dev_free(c->dev, c->flush);
  free(c->readback);
  free(c->stage);
  free(c->pattern);
  free(c);
}

const gc_problem_t *gc_check_problem(const gc_check_t *c) { return &c->p; }

void gc_check_buffers(gc_check_t *c, const gc_opbuf_t **b, int *n) {
  *b = c->bufs;
  *n = c->nbufs;
}

/* Buffer i inside an allocation with its guards (layout: top of file),
 * every byte of it GUARD_BYTE. */
static int alloc_guarded(gc_check_t *c, int i, gc_err_t *e) {
  size_t gran = c->page > ALIGN ? c->page : ALIGN;
  size_t body = round_up(c->bytes[i], gran);
  c->alloc_bytes[i] = gran + 2 * c->gbytes + body;
  if (gc_dev_alloc(c->dev, c->alloc_bytes[i], &c->alloc[i], e) ||
      gc_dev_memset(c->dev, c->alloc[i], GUARD_BYTE, c->alloc_bytes[i], e))
    return e->code;
  c->lo[i] = (gc_dptr_t)round_up((size_t)c->alloc[i], gran);
  c->hi[i] = c->lo[i] + c->gbytes + body;
  c->dev_buf[i] = c->hi[i] - round_up(c->bytes[i], c->align);
  return GC_OK;
}

static int alloc_buffers(gc_check_t *c, gc_err_t *e) {
  size_t most = 0;
  c->page = gc_dev_page_size(c->dev);
  c->align = gc_dev_info(c->dev)->host_memory ? HOST_ALIGN : ALIGN;
  c->gbytes = round_up(GUARD, c->page > ALIGN ? c->page : ALIGN);
  for (int i = 0; i < c->nbufs; i++) {
    const gc_opbuf_t *b = &c->bufs[i];
    c->bytes[i] = gc_opbuf_bytes(b);
    if (!(c->host[i] = gc_calloc(1, c->bytes[i] ? c->bytes[i] : 1, e)) || alloc_guarded(c, i, e))
      return e->code;
    if (checked(b)) {
      if (!(c->ref[i] = gc_calloc((size_t)b->count, sizeof(double), e)) ||
          !(c->tol[i] = gc_calloc((size_t)b->count, sizeof(double), e)))
        return e->code;
      if (c->bytes[i] > most) most = c->bytes[i];
    }
  }
  if (!(c->readback = gc_malloc(most ? most : 1, e)) || !(c->stage = gc_malloc(STAGE, e)) ||
      !(c->pattern = gc_malloc(STAGE, e)))
    return e->code;
  memset(c->pattern, GUARD_BYTE, STAGE);
  return GC_OK;
}

/* Inputs and guards read-only or inaccessible where the device can. */
static int protect_all(gc_check_t *c, gc_err_t *e) {
  if (!c->page) return GC_OK;
  c->protected = 1;
  for (int i = 0; i < c->nbufs; i++)
    if (protect_buf(c, i, 1, e)) return e->code;
  return GC_OK;
}

int gc_check_setup(gc_dev_t *dev, const gc_problem_t *p, const gc_op_scalars_t *sc,
                   uint64_t seed, gc_check_t **out, gc_err_t *e) {
  *out = NULL;
  gc_check_t *c = gc_calloc(1, sizeof *c, e);
  if (!c) return GC_ENOMEM;
  c->dev = dev;
  c->p = *p;
  c->noise_state = (seed ^ 0x6E6F697365ull) * 0x9E3779B97F4A7C15ull | 1; /* never 0 */
  if (sc)
    c->sc = *sc;
  else
    gc_op_default_scalars(p, &c->sc);
  int rc = gc_op_buffers(p, &c->sc, c->bufs, &c->nbufs, e);
  if (!rc) rc = alloc_buffers(c, e);
  if (!rc) {
    gc_op_fill_inputs(p, &c->sc, c->host, seed);
    rc = gc_op_reference(p, &c->sc, c->host, c->ref, c->tol, e);
  }
  for (int i = 0; !rc && i < c->nbufs; i++)
    if (c->bufs[i].kind == GC_BUF_IN)
      rc = gc_dev_upload(dev, c->dev_buf[i], c->host[i], c->bytes[i], e);
  if (!rc) rc = gc_dev_sync(dev, e);
  if (!rc) rc = protect_all(c, e);
  if (rc) {
    gc_check_free(c);
    return rc;
  }
  gc_op_args(p, &c->sc, c->dev_buf, &c->args);
  *out = c;
  return GC_OK;
}

/* ---- comparing device memory with what it should hold ------------------ */

/* Whether the n bytes at p equal want (or, want NULL, are all GUARD_BYTE):
 * *same, and where not, *first the offset of the first byte that differs.
 * Read in place where the device's memory is the host's, else a
 * STAGE-byte piece at a time. */
static int compare(gc_check_t *c, gc_dptr_t p, const unsigned char *want, size_t n, int *same,
                   size_t *first, gc_err_t *e) {
  const unsigned char *in_place = gc_dev_host_ptr(c->dev, p);
  *same = 1;
  for (size_t off = 0; off < n; off += STAGE) {
    size_t len = n - off < STAGE ? n - off : STAGE;
    const unsigned char *got = in_place ? in_place + off : c->stage;
    const unsigned char *w = want ? want + off : c->pattern;
    if (!in_place && gc_dev_download(c->dev, c->stage, p + off, len, e)) return e->code;
    if (!memcmp(got, w, len)) continue;
    size_t k = 0;
    while (got[k] == w[k]) k++;
    *first = off + k;
    *same = 0;
    return GC_OK;
  }
  return GC_OK;
}

/* The part of buffer i's guards that a stray write may have changed
 * unnoticed: all of them where nothing is protected, else the slack
 * between the buffer and the protected pages. */
static void guard_ranges(const gc_check_t *c, int i, gc_dptr_t *lo, size_t *lo_n, gc_dptr_t *hi,
                         size_t *hi_n) {
  gc_dptr_t s = c->dev_buf[i], end = s + c->bytes[i];
  *lo = c->lo[i] + (c->protected ? c->gbytes : 0);
  *lo_n = (size_t)(s - *lo);
  *hi = end;
  *hi_n = (size_t)(c->hi[i] - end) + (c->protected ? 0 : c->gbytes);
}

static void fail(gc_verify_t *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(gc_verify_t *v, const char *fmt, ...) {
  if (!v->ok) return; /* the first failure is the one reported */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->why, sizeof v->why, fmt, ap);
  va_end(ap);
  v->ok = 0;
}

/* Buffer i's guards still hold their pattern; a changed one is reported
 * in v and refilled. */
static int check_guards(gc_check_t *c, int i, gc_verify_t *v, gc_err_t *e) {
  gc_dptr_t lo, hi;
  size_t lo_n, hi_n, first;
  int same;
  const char *name = c->bufs[i].name;
  const char *what = checked(&c->bufs[i]) ? "" : "input ";
  guard_ranges(c, i, &lo, &lo_n, &hi, &hi_n);
  if (compare(c, lo, NULL, lo_n, &same, &first, e)) return e->code;
  if (!same) {
    fail(v, "wrote before the start of %s%s (changed byte at start - %zu)", what, name,
         lo_n - first);
    if (gc_dev_memset(c->dev, lo, GUARD_BYTE, lo_n, e)) return e->code;
  }
  if (compare(c, hi, NULL, hi_n, &same, &first, e)) return e->code;
  if (!same) {
    fail(v, "wrote past the end of %s%s (changed byte at end + %zu)", what, name, first);
    if (gc_dev_memset(c->dev, hi, GUARD_BYTE, hi_n, e)) return e->code;
  }
  return GC_OK;
}

/* Input i still holds its initial bytes; a changed one is reported in v
 * and uploaded again. */
static int check_input(gc_check_t *c, int i, gc_verify_t *v, gc_err_t *e) {
  size_t first;
  int64_t cols = c->bufs[i].cols > 0 ? c->bufs[i].cols : 1;
  int same;
  if (compare(c, c->dev_buf[i], c->host[i], c->bytes[i], &same, &first, e)) return e->code;
  if (same) return GC_OK;
  int64_t el = gc_dtype_elem_at(c->bufs[i].dtype, first);
  fail(v, "wrote into input %s (element %lld: row %lld, col %lld)", c->bufs[i].name,
       (long long)el, (long long)(el / cols), (long long)(el % cols));
  if ((c->protected && protect_buf(c, i, 0, e)) ||
      gc_dev_upload(c->dev, c->dev_buf[i], c->host[i], c->bytes[i], e) ||
      gc_dev_sync(c->dev, e) || (c->protected && protect_buf(c, i, 1, e)))
    return e->code;
  return GC_OK;
}

/* The timing copies of an input still hold its bytes (they are used only
 * by timings; a copy that changed is uploaded again). */
static int check_copies(gc_check_t *c, gc_verify_t *v, gc_err_t *e) {
  size_t first;
  int same;
  for (int k = 0; k < c->ncopies; k++) {
    int r = c->rot_buf;
    if (compare(c, c->copy[k], c->host[r], c->bytes[r], &same, &first, e)) return e->code;
    if (same) continue;
    fail(v, "wrote into input %s (a copy of it for chained timing, byte %zu)", c->bufs[r].name,
         first);
    if (gc_dev_upload(c->dev, c->copy[k], c->host[r], c->bytes[r], e)) return e->code;
  }
  c->copies_used = 0;
  return GC_OK;
}

/* Element i of dst (dtype t) set to noise from *state (xorshift64): random
 * sign and mantissa in the top binades of t (f16 32768 .. 65504, f32 and
 * bf16 from 2^97, f64 from 2^200, i32 below -2^30), never NaN or
 * infinite. The op references' values are never near these, so an
 * element left unwritten still fails its check; and a kernel that reads
 * what it is to write before writing it (skips the work where it finds no
 * NaN, adds to what it finds) fails too, where a NaN poison might have let
 * it pass and a real run then read stale data. */
static void noise_elem(unsigned char *dst, gc_dtype_t t, int64_t i, uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  *state = x;
  if (t == GC_DT_F16) {
    uint16_t v = (uint16_t)(0x7800 | (x & 0x3FF) | ((x >> 20) & 1) << 15); /* exponent 30 */
    memcpy(dst + 2 * i, &v, 2);
  } else if (t == GC_DT_BF16) {
    uint16_t v = (uint16_t)((0xE0 + (x >> 8) % 31) << 7 | (x & 0x7F) | ((x >> 20) & 1) << 15);
    memcpy(dst + 2 * i, &v, 2);
  } else if (t == GC_DT_F32) {
    uint32_t v = (uint32_t)((0xE0 + (x >> 32) % 31) << 23 | (x & 0x7FFFFF) | ((x >> 24) & 1) << 31);
    memcpy(dst + 4 * i, &v, 4);
  } else if (t == GC_DT_I32) {
    uint32_t v = 0x80000000u | (uint32_t)(x & 0x3FFFFFFF);
    memcpy(dst + 4 * i, &v, 4);
  } else if (t == GC_DT_F64) {
    uint64_t v = (uint64_t)(1023 + 200 + (x >> 52) % 500) << 52 | (x & 0xFFFFFFFFFFFFFull);
    memcpy(dst + 8 * i, &v, 8);
  }
}

/* Buffer i as the checked launch of a verification finds it: an output
 * all noise; an in/out buffer its initial contents with noise where they
 * hold NaN (the rows the op writes: a KV cache's row at the position). */
static int upload_noise(gc_check_t *c, int i, gc_err_t *e) {
  const gc_opbuf_t *b = &c->bufs[i];
  if (b->kind != GC_BUF_OUT) memcpy(c->readback, c->host[i], c->bytes[i]);
  for (int64_t k = 0; k < b->count; k++)
    if (b->kind == GC_BUF_OUT || isnan(gc_load_elem(c->host[i], b->dtype, k)))
      noise_elem(c->readback, b->dtype, k, &c->noise_state);
  return gc_dev_upload(c->dev, c->dev_buf[i], c->readback, c->bytes[i], e);
}

/* Outputs poisoned and in/out buffers restored for one launch of a
 * verification: NaN where the op writes before the first launch, noise
 * before the second, the checked one (upload_noise). */
static int prepare(gc_check_t *c, int checked_launch, gc_err_t *e) {
  for (int i = 0; i < c->nbufs; i++) {
    const gc_opbuf_t *b = &c->bufs[i];
    int rc = GC_OK;
    if (!checked(b)) continue;
    if (checked_launch && !gc_dtype_is_block(b->dtype))
      rc = upload_noise(c, i, e);
    else if (b->kind != GC_BUF_OUT)
      rc = gc_dev_upload(c->dev, c->dev_buf[i], c->host[i], c->bytes[i], e);
    else
      rc = gc_dev_memset(c->dev, c->dev_buf[i], POISON_BYTE, c->bytes[i], e);
    if (rc) return rc;
  }
  return GC_OK;
}

int gc_check_verify(gc_check_t *c, gc_launch_fn fn, void *ctx, gc_verify_t *v,
                    gc_err_t *e) {
  memset(v, 0, sizeof *v);
  v->ok = 1;
  for (int k = 0; k < 2; k++) /* the second launch is the one checked */
    if (prepare(c, k, e) || fn(ctx, c->args.args, e) || gc_dev_sync(c->dev, e)) return e->code;
  /* writes where there should be none first: they also explain a wrong output */
  for (int i = 0; i < c->nbufs; i++)
    if (check_guards(c, i, v, e) || (!checked(&c->bufs[i]) && check_input(c, i, v, e)))
      return e->code;
  if (c->copies_used && check_copies(c, v, e)) return e->code;
  for (int i = 0; i < c->nbufs && v->ok; i++) {
    const gc_opbuf_t *b = &c->bufs[i];
    double worst;
    if (!checked(b)) continue;
    if (gc_dev_download(c->dev, c->readback, c->dev_buf[i], c->bytes[i], e)) return e->code;
    v->ok = gc_op_check(b, c->readback, c->ref[i], c->tol[i], &worst, v->why, sizeof v->why);
    if (worst > v->worst) v->worst = worst;
  }
  return GC_OK;
}

/* ---- locating a fault (async-signal-safe) ------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, at;
} sbuf_t;

static void put_s(sbuf_t *b, const char *s) {
  while (*s && b->at + 1 < b->n) b->p[b->at++] = *s++;
  b->p[b->at < b->n ? b->at : b->n - 1] = 0;
}

static void put_u(sbuf_t *b, uint64_t v) {
  char t[24];
  int k = 0;
  do t[k++] = (char)('0' + v % 10); while ((v /= 10) && k < 23);
  char r[24];
  for (int j = 0; j < k; j++) r[j] = t[k - 1 - j];
  r[k] = 0;
  put_s(b, r);
}

int gc_check_locate(const gc_check_t *c, uint64_t addr, char *out, size_t n) {
  sbuf_t b = {out, n, 0};
  if (!c || !n) return 0;
  out[0] = 0;
  for (int i = 0; i < c->nbufs; i++) {
    gc_dptr_t s = c->dev_buf[i], end = s + c->bytes[i];
    const char *what = checked(&c->bufs[i]) ? "" : "input ";
    if (addr < c->alloc[i] || addr >= c->alloc[i] + c->alloc_bytes[i]) continue;
    if (addr < s) {
      put_s(&b, "before the start of ");
      put_s(&b, what);
      put_s(&b, c->bufs[i].name);
      put_s(&b, " (at start - ");
      put_u(&b, s - addr);
    } else if (addr >= end) {
      put_s(&b, "past the end of ");
      put_s(&b, what);
      put_s(&b, c->bufs[i].name);
      put_s(&b, " (at end + ");
      put_u(&b, addr - end);
    } else {
      uint64_t el = (uint64_t)gc_dtype_elem_at(c->bufs[i].dtype, addr - s);
      uint64_t cols = c->bufs[i].cols > 0 ? (uint64_t)c->bufs[i].cols : 1;
      put_s(&b, checked(&c->bufs[i]) ? "into output " : "into input ");
      put_s(&b, c->bufs[i].name);
      put_s(&b, " (element ");
      put_u(&b, el);
      put_s(&b, ": row ");
      put_u(&b, el / cols);
      put_s(&b, ", col ");
      put_u(&b, el % cols);
    }
    put_s(&b, ")");
    return 1;
  }
  return 0;
}

/* ---- timing ------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(const double *s, int64_t n, double q) {
  double pos = q * (double)(n - 1);
  int64_t i = (int64_t)pos;
  double f = pos - (double)i;
  return i + 1 < n ? s[i] * (1 - f) + s[i + 1] * f : s[i];
}

/* The median of the n samples in s (n <= 64), s left as it was. */
static double median_of(const double *s, int64_t n) {
  double c[64];
  if (n > 64) n = 64;
  memcpy(c, s, (size_t)n * sizeof *c);
  qsort(c, (size_t)n, sizeof *c, cmp_double);
  return quantile(c, n, 0.5);
}

size_t gc_check_default_flush(gc_dev_t *dev) {
  return gc_dev_info(dev)->host_memory ? 0 : (size_t)256 << 20;
}

/* The flush buffer of n bytes (defined contents to read), made once. */
static int flush_buffer(gc_check_t *c, size_t n, gc_err_t *e) {
  if (c->flush_bytes == n) return GC_OK;
  gc_dev_free(c->dev, c->flush);
  c->flush = 0;
  c->flush_bytes = 0;
  if (gc_dev_alloc(c->dev, n, &c->flush, e) || gc_dev_memset(c->dev, c->flush, 0, n, e))
    return e->code;
  c->flush_bytes = n;
  return GC_OK;
}

/* Chain timing's copies of c's largest input, made once: as many as make
 * `bytes` together (2 to 16), each uploaded from the initial contents.
 * None where there is no input to rotate. */
static int chain_copies(gc_check_t *c, size_t bytes, gc_err_t *e) {
  if (c->ncopies) return GC_OK;
  c->rot_buf = -1;
  for (int i = 0; i < c->nbufs; i++)
    if (c->bufs[i].kind == GC_BUF_IN && (c->rot_buf < 0 || c->bytes[i] > c->bytes[c->rot_buf]))
      c->rot_buf = i;
  if (c->rot_buf < 0 || !c->bytes[c->rot_buf]) return GC_OK;
  size_t sz = c->bytes[c->rot_buf], want = (bytes + sz - 1) / sz;
  int k = want < 2 ? 2 : want > 16 ? 16 : (int)want;
  for (; c->ncopies < k; c->ncopies++)
    if (gc_dev_alloc(c->dev, sz, &c->copy[c->ncopies], e) ||
        gc_dev_upload(c->dev, c->copy[c->ncopies], c->host[c->rot_buf], sz, e))
      return e->code;
  return GC_OK;
}

/* A sample's launches: one, or n over the copies in turn (*turn goes on
 * across samples). */
static int sample_launches(gc_check_t *c, gc_launch_fn fn, void *ctx, int n, int *turn,
                           gc_err_t *e) {
  if (n <= 1 || !c->ncopies) {
    for (int r = 0; r < (n > 1 ? n : 1); r++)
      if (fn(ctx, c->args.args, e)) return e->code;
    return GC_OK;
  }
  void *args[GC_OP_MAX_ARGS]; /* the pack's, NULL-terminated */
  memcpy(args, c->args.args, sizeof args);
  c->copies_used = 1;
  for (int r = 0; r < n; r++) {
    gc_dptr_t p = c->copy[(*turn)++ % c->ncopies]; /* the launch copies its arguments */
    args[c->rot_buf] = &p;
    if (fn(ctx, args, e)) return e->code;
  }
  return GC_OK;
}

static int timed_launch(gc_check_t *c, gc_launch_fn fn, void *ctx, int chain, int *turn,
                        gc_event_t *a, gc_event_t *b, size_t flush_n, double *ms, gc_err_t *e) {
  if ((flush_n && gc_dev_flush(c->dev, c->flush, flush_n, e)) ||
      gc_dev_event_record(c->dev, a, e) || sample_launches(c, fn, ctx, chain, turn, e) ||
      gc_dev_event_record(c->dev, b, e) || gc_dev_sync(c->dev, e) ||
      gc_dev_event_elapsed(c->dev, a, b, ms, e))
    return e->code;
  if (chain > 1) *ms /= chain;
  return GC_OK;
}

int gc_check_time(gc_check_t *c, gc_launch_fn fn, void *ctx, const gc_time_opts_t *o,
                  gc_timing_t *t, gc_err_t *e) {
  gc_time_opts_t d = {.warmup = 2, .min_iters = 5, .max_iters = GC_TIME_MAX_ITERS, .min_time = 0.2};
  if (o) d = *o;
  memset(t, 0, sizeof *t);
  double *s = gc_malloc((size_t)d.max_iters * sizeof *s, e);
  gc_event_t *a = NULL, *b = NULL;
  const int chain = d.chain > 1 ? d.chain : 1;
  int turn = 0;
  int rc = s ? GC_OK : GC_ENOMEM;
  if (!rc && chain > 1) rc = chain_copies(c, d.flush, e);
  if (!rc && d.flush) rc = flush_buffer(c, d.flush, e);
  if (!rc) rc = gc_dev_event_create(c->dev, &a, e);
  if (!rc) rc = gc_dev_event_create(c->dev, &b, e);
  for (int i = 0; !rc && i < d.warmup; i++) rc = fn(ctx, c->args.args, e);
  if (!rc) rc = gc_dev_sync(c->dev, e);
  double total = 0;
  int64_t n = 0;
  while (!rc && n < d.max_iters && (n < d.min_iters || total < d.min_time * 1e3)) {
    double ms;
    rc = timed_launch(c, fn, ctx, chain, &turn, a, b, d.flush, &ms, e);
    if (!rc) {
      s[n++] = ms;
      total += ms * chain; /* device time spent: chains count whole */
    }
    if (!rc && n == d.min_iters && d.abandon_us > 0 && median_of(s, n) * 1e3 > d.abandon_us)
      break;
  }
  if (!rc) {
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    t->iters = n;
    t->min_us = s[0] * 1e3;
    t->max_us = s[n - 1] * 1e3;
    t->median_us = quantile(s, n, 0.5) * 1e3;
    t->spread = t->median_us > 0
                    ? (quantile(s, n, 0.75) - quantile(s, n, 0.25)) * 1e3 / t->median_us
                    : 0;
  }
  gc_dev_event_destroy(c->dev, a);
  gc_dev_event_destroy(c->dev, b);
  free(s);
  return rc;
}

int gc_check_read(gc_check_t *c, int i, void *host, gc_err_t *e) {
  if (i < 0 || i >= c->nbufs) return gc_err_set(e, GC_EINVAL, "no buffer %d", i);
  if (!checked(&c->bufs[i])) {
    memcpy(host, c->host[i], c->bytes[i]);
    return GC_OK;
  }
  return gc_dev_download(c->dev, host, c->dev_buf[i], c->bytes[i], e);
}

const void *gc_check_initial(gc_check_t *c, int i) {
  return i >= 0 && i < c->nbufs && c->bufs[i].kind != GC_BUF_OUT ? c->host[i] : NULL;
}

const gc_op_scalars_t *gc_check_scalars(gc_check_t *c) { return &c->sc; }
