/* check.c — verification and timing of one kernel on one problem. */
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 256        /* bytes after the output that must stay untouched */
#define GUARD_BYTE 0xA5
#define POISON_BYTE 0xFF /* all-ones is NaN in f32, f16 and bf16 */

struct gc_check {
  gc_dev_t *dev;
  gc_problem_t p;
  gc_opbuf_t bufs[GC_OP_MAX_BUFS];
  int nbufs, out;                   /* index of the output buffer */
  void *host[GC_OP_MAX_BUFS];       /* inputs (and output scratch) on the host */
  gc_dptr_t dev_buf[GC_OP_MAX_BUFS];
  size_t bytes[GC_OP_MAX_BUFS];
  double *ref, *tol;                /* [output count] */
  unsigned char *readback;          /* output + guard */
  gc_argpack_t args;
};

void gc_check_free(gc_check_t *c) {
  if (!c) return;
  for (int i = 0; i < c->nbufs; i++) {
    free(c->host[i]);
    gc_dev_free(c->dev, c->dev_buf[i]);
  }
  free(c->ref);
  free(c->tol);
  free(c->readback);
  free(c);
}

const gc_problem_t *gc_check_problem(const gc_check_t *c) { return &c->p; }

static int alloc_buffers(gc_check_t *c, gc_err_t *e) {
  for (int i = 0; i < c->nbufs; i++) {
    c->bytes[i] = (size_t)c->bufs[i].count * gc_dtype_size(c->bufs[i].dtype);
    size_t extra = c->bufs[i].output ? GUARD : 0;
    if (!(c->host[i] = gc_malloc(c->bytes[i] + extra, e)) ||
        gc_dev_alloc(c->dev, c->bytes[i] + extra, &c->dev_buf[i], e))
      return e->code;
    if (c->bufs[i].output) c->out = i;
  }
  int64_t n = c->bufs[c->out].count;
  if (!(c->ref = gc_calloc((size_t)n, sizeof *c->ref, e)) ||
      !(c->tol = gc_calloc((size_t)n, sizeof *c->tol, e)) ||
      !(c->readback = gc_malloc(c->bytes[c->out] + GUARD, e)))
    return e->code;
  return GC_OK;
}

int gc_check_setup(gc_dev_t *dev, const gc_problem_t *p, uint64_t seed,
                   gc_check_t **out, gc_err_t *e) {
  *out = NULL;
  gc_check_t *c = gc_calloc(1, sizeof *c, e);
  if (!c) return GC_ENOMEM;
  c->dev = dev;
  c->p = *p;
  int rc = gc_op_buffers(p, c->bufs, &c->nbufs, e);
  if (!rc) rc = alloc_buffers(c, e);
  if (!rc) {
    gc_op_fill_inputs(p, c->host, seed);
    rc = gc_op_reference(p, c->host, c->ref, c->tol, e);
  }
  for (int i = 0; !rc && i < c->nbufs; i++)
    if (!c->bufs[i].output) rc = gc_dev_upload(dev, c->dev_buf[i], c->host[i], c->bytes[i], e);
  if (rc) {
    gc_check_free(c);
    return rc;
  }
  gc_op_args(p, c->dev_buf, &c->args);
  *out = c;
  return GC_OK;
}

static int guard_intact(const unsigned char *g) {
  for (int i = 0; i < GUARD; i++)
    if (g[i] != GUARD_BYTE) return 0;
  return 1;
}

int gc_check_verify(gc_check_t *c, gc_launch_fn fn, void *ctx, gc_verify_t *v,
                    gc_err_t *e) {
  memset(v, 0, sizeof *v);
  gc_dptr_t o = c->dev_buf[c->out];
  size_t n = c->bytes[c->out];
  if (gc_dev_memset(c->dev, o, POISON_BYTE, n, e) ||
      gc_dev_memset(c->dev, o + n, GUARD_BYTE, GUARD, e) || fn(ctx, c->args.args, e) ||
      gc_dev_sync(c->dev, e) || gc_dev_download(c->dev, c->readback, o, n + GUARD, e))
    return e->code;
  v->ok = gc_op_check(&c->p, c->readback, c->ref, c->tol, c->bufs[c->out].count,
                      &v->worst, v->why, sizeof v->why);
  if (v->ok && !guard_intact(c->readback + n)) {
    v->ok = 0;
    snprintf(v->why, sizeof v->why, "kernel wrote past the end of its output %s",
             c->bufs[c->out].name);
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

static int timed_launch(gc_check_t *c, gc_launch_fn fn, void *ctx, gc_event_t *a,
                        gc_event_t *b, double *ms, gc_err_t *e) {
  if (gc_dev_event_record(c->dev, a, e) || fn(ctx, c->args.args, e) ||
      gc_dev_event_record(c->dev, b, e) || gc_dev_sync(c->dev, e) ||
      gc_dev_event_elapsed(c->dev, a, b, ms, e))
    return e->code;
  return GC_OK;
}

int gc_check_time(gc_check_t *c, gc_launch_fn fn, void *ctx, const gc_time_opts_t *o,
                  gc_timing_t *t, gc_err_t *e) {
  gc_time_opts_t d = {2, 5, 2000, 0.2};
  if (o) d = *o;
  memset(t, 0, sizeof *t);
  double *s = gc_malloc((size_t)d.max_iters * sizeof *s, e);
  gc_event_t *a = NULL, *b = NULL;
  int rc = s ? GC_OK : GC_ENOMEM;
  if (!rc) rc = gc_dev_event_create(c->dev, &a, e);
  if (!rc) rc = gc_dev_event_create(c->dev, &b, e);
  for (int i = 0; !rc && i < d.warmup; i++) rc = fn(ctx, c->args.args, e);
  if (!rc) rc = gc_dev_sync(c->dev, e);
  double total = 0;
  int64_t n = 0;
  while (!rc && n < d.max_iters && (n < d.min_iters || total < d.min_time * 1e3)) {
    double ms;
    rc = timed_launch(c, fn, ctx, a, b, &ms, e);
    if (!rc) {
      s[n++] = ms;
      total += ms;
    }
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

int gc_check_output(gc_check_t *c, void *host, gc_err_t *e) {
  return gc_dev_download(c->dev, host, c->dev_buf[c->out], c->bytes[c->out], e);
}

void *gc_check_host_input(gc_check_t *c, int i, int64_t *count) {
  if (i < 0 || i >= c->nbufs || c->bufs[i].output) return NULL;
  *count = c->bufs[i].count;
  return c->host[i];
}
