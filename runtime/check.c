/* check.c — verification and timing of one kernel on one problem.
 * Buffers: inputs are uploaded once; outputs are poisoned before each
 * verification launch; in/out buffers (a KV cache) are restored to their
 * initial contents, whose to-be-written rows are NaN. Every output and
 * in/out buffer has guard bytes after it that must survive the launch. */
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 256        /* bytes after an output that must stay untouched */
#define GUARD_BYTE 0xA5
#define POISON_BYTE 0xFF /* all-ones is NaN in f32, f16 and bf16 */

struct gc_check {
  gc_dev_t *dev;
  gc_problem_t p;
  gc_op_scalars_t sc;
  gc_opbuf_t bufs[GC_OP_MAX_BUFS];
  int nbufs;
  void *host[GC_OP_MAX_BUFS];       /* initial contents (inputs, in/out) */
  gc_dptr_t dev_buf[GC_OP_MAX_BUFS];
  size_t bytes[GC_OP_MAX_BUFS];
  double *ref[GC_OP_MAX_BUFS], *tol[GC_OP_MAX_BUFS]; /* outputs and in/out only */
  unsigned char *readback;          /* largest output + guard */
  gc_argpack_t args;
  /* made by the first timing that needs them, kept for the next ones */
  gc_dptr_t flush;                  /* cold-cache reads (gc_time_opts_t.flush) */
  size_t flush_bytes;
  int rot_buf, ncopies;             /* chain timing: copies of input rot_buf */
  gc_dptr_t copy[16];
};

void gc_check_free(gc_check_t *c) {
  if (!c) return;
  for (int i = 0; i < c->nbufs; i++) {
    free(c->host[i]);
    free(c->ref[i]);
    free(c->tol[i]);
    gc_dev_free(c->dev, c->dev_buf[i]);
  }
  for (int i = 0; i < c->ncopies; i++) gc_dev_free(c->dev, c->copy[i]);
  gc_dev_free(c->dev, c->flush);
  free(c->readback);
  free(c);
}

const gc_problem_t *gc_check_problem(const gc_check_t *c) { return &c->p; }

void gc_check_buffers(gc_check_t *c, const gc_opbuf_t **b, int *n) {
  *b = c->bufs;
  *n = c->nbufs;
}

static int checked(const gc_opbuf_t *b) { return b->kind != GC_BUF_IN; }

static int alloc_buffers(gc_check_t *c, gc_err_t *e) {
  size_t most = 0;
  for (int i = 0; i < c->nbufs; i++) {
    const gc_opbuf_t *b = &c->bufs[i];
    c->bytes[i] = (size_t)b->count * gc_dtype_size(b->dtype);
    size_t extra = checked(b) ? GUARD : 0;
    if (!(c->host[i] = gc_calloc(1, c->bytes[i] + extra, e)) ||
        gc_dev_alloc(c->dev, c->bytes[i] + extra, &c->dev_buf[i], e))
      return e->code;
    if (checked(b)) {
      if (!(c->ref[i] = gc_calloc((size_t)b->count, sizeof(double), e)) ||
          !(c->tol[i] = gc_calloc((size_t)b->count, sizeof(double), e)))
        return e->code;
      if (c->bytes[i] > most) most = c->bytes[i];
    }
  }
  return (c->readback = gc_malloc(most + GUARD, e)) ? GC_OK : GC_ENOMEM;
}

int gc_check_setup(gc_dev_t *dev, const gc_problem_t *p, const gc_op_scalars_t *sc,
                   uint64_t seed, gc_check_t **out, gc_err_t *e) {
  *out = NULL;
  gc_check_t *c = gc_calloc(1, sizeof *c, e);
  if (!c) return GC_ENOMEM;
  c->dev = dev;
  c->p = *p;
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
  if (rc) {
    gc_check_free(c);
    return rc;
  }
  gc_op_args(p, &c->sc, c->dev_buf, &c->args);
  *out = c;
  return GC_OK;
}

static int guard_intact(const unsigned char *g) {
  for (int i = 0; i < GUARD; i++)
    if (g[i] != GUARD_BYTE) return 0;
  return 1;
}

/* Poison outputs, restore in/out buffers, set guards. */
static int prepare(gc_check_t *c, gc_err_t *e) {
  for (int i = 0; i < c->nbufs; i++) {
    const gc_opbuf_t *b = &c->bufs[i];
    if (!checked(b)) continue;
    int rc = b->kind == GC_BUF_OUT
                 ? gc_dev_memset(c->dev, c->dev_buf[i], POISON_BYTE, c->bytes[i], e)
                 : gc_dev_upload(c->dev, c->dev_buf[i], c->host[i], c->bytes[i], e);
    if (rc || gc_dev_memset(c->dev, c->dev_buf[i] + c->bytes[i], GUARD_BYTE, GUARD, e))
      return e->code;
  }
  return GC_OK;
}

int gc_check_verify(gc_check_t *c, gc_launch_fn fn, void *ctx, gc_verify_t *v,
                    gc_err_t *e) {
  memset(v, 0, sizeof *v);
  v->ok = 1;
  if (prepare(c, e) || fn(ctx, c->args.args, e) || gc_dev_sync(c->dev, e)) return e->code;
  for (int i = 0; i < c->nbufs && v->ok; i++) {
    const gc_opbuf_t *b = &c->bufs[i];
    double worst;
    if (!checked(b)) continue;
    if (gc_dev_download(c->dev, c->readback, c->dev_buf[i], c->bytes[i] + GUARD, e))
      return e->code;
    v->ok = gc_op_check(b, c->readback, c->ref[i], c->tol[i], &worst, v->why, sizeof v->why);
    if (worst > v->worst) v->worst = worst;
    if (v->ok && !guard_intact(c->readback + c->bytes[i])) {
      v->ok = 0;
      snprintf(v->why, sizeof v->why, "kernel wrote past the end of %s", b->name);
    }
  }
  return GC_OK;
}

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
  void *args[16];
  memcpy(args, c->args.args, sizeof args);
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
  gc_time_opts_t d = {.warmup = 2, .min_iters = 5, .max_iters = 2000, .min_time = 0.2};
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
