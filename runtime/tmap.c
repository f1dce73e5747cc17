/* tmap.c — tensor-map declarations → launch arguments. */
#include "tmap.h"

#include <string.h>

#include "../core/ops.h"

/* Tie spec s to p's buffer of its name: *arg its index, *dt its dtype. */
static int find_buf(const gc_tmap_spec_t *s, const gc_opbuf_t *b, int nb, const char *op,
                    int *arg, gc_dtype_t *dt, gc_err_t *e) {
  char names[128] = "";
  for (int i = 0; i < nb; i++) {
    if (!strcmp(b[i].name, s->buf)) {
      *arg = i;
      *dt = b[i].dtype;
      return GC_OK;
    }
    size_t l = strlen(names);
    snprintf(names + l, sizeof names - l, "%s%s", i ? " " : "", b[i].name);
  }
  return gc_err_set(e, GC_EINVAL, "@tensormap %s: op %s has no buffer '%s' (it has %s)", s->buf,
                    op, s->buf, names);
}

/* What a map of s over buffer b (dtype dt) needs of them. A block
 * format's map counts blocks (its rows are whole blocks): they must be
 * whole 16-byte chunks, unswizzled. */
static int check_fit(const gc_tmap_spec_t *s, const gc_opbuf_t *b, gc_err_t *e) {
  int64_t es = (int64_t)gc_dtype_size(b->dtype), per = gc_dtype_block(b->dtype), cells;
  if (per > 1 && (es % 16 || s->swizzle))
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: %s blocks of %lld bytes%s; a tensor map of "
                      "blocks needs whole 16-byte chunks and no swizzle", s->buf,
                      gc_dtype_name(b->dtype), (long long)es, s->swizzle ? ", swizzled" : "");
  if (__builtin_mul_overflow(s->rows, s->cols, &cells) || __builtin_mul_overflow(cells, per, &cells) ||
      cells > b->count)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: %lldx%lld elements, more than the "
                      "buffer's %lld", s->buf, (long long)s->rows, (long long)s->cols,
                      (long long)b->count);
  if (s->cols * es % 16)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: rows of %lld bytes; a tensor map needs a "
                      "multiple of 16", s->buf, (long long)(s->cols * es));
  if (s->box_cols * es % 16)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: box rows of %lld bytes; must be a "
                      "multiple of 16", s->buf, (long long)(s->box_cols * es));
  if (s->swizzle && s->box_cols * es > s->swizzle)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: box rows of %lld bytes exceed the %lld-byte "
                      "swizzle", s->buf, (long long)(s->box_cols * es), (long long)s->swizzle);
  return GC_OK;
}

int gc_tmaps_plan(const char *text, const gc_env_t *env, const gc_problem_t *p,
                  gc_tmaps_t *t, gc_err_t *e) {
  memset(t, 0, sizeof *t);
  if (gc_tmap_specs_eval(text, env, t->spec, &t->n, e)) return e->code;
  if (!t->n) return GC_OK;
  gc_op_scalars_t sc;
  gc_opbuf_t b[GC_OP_MAX_BUFS];
  gc_dptr_t fake[GC_OP_MAX_BUFS] = {0};
  gc_argpack_t pk;
  int nb;
  gc_op_default_scalars(p, &sc);
  if (gc_op_buffers(p, &sc, b, &nb, e)) return e->code;
  gc_op_args(p, &sc, fake, &pk);
  t->nargs = pk.nargs;
  if (t->nargs + t->n > GC_TMAPS_ARGS)
    return gc_err_set(e, GC_EINVAL, "op %s: too many arguments with %d tensor maps", p->op, t->n);
  for (int i = 0; i < t->n; i++)
    if (find_buf(&t->spec[i], b, nb, p->op, &t->arg[i], &t->dtype[i], e) ||
        check_fit(&t->spec[i], &b[t->arg[i]], e))
      return e->code;
  return GC_OK;
}

int gc_tmaps_args(gc_dev_t *d, gc_tmaps_t *t, void **args, void ***out, gc_err_t *e) {
  *out = args;
  if (!t->n) return GC_OK;
  unsigned char *maps = t->raw + (64 - (uintptr_t)t->raw % 64) % 64;
  for (int i = 0; i < t->nargs; i++) t->args[i] = args[i];
  for (int i = 0; i < t->n; i++) {
    gc_dptr_t ptr = *(const gc_dptr_t *)args[t->arg[i]];
    void *m = maps + (size_t)i * GC_TMAP_BYTES;
    if (ptr % 16)
      return gc_err_set(e, GC_EINVAL, "@tensormap %s: buffer address 0x%llx is not 16-byte "
                        "aligned", t->spec[i].buf, (unsigned long long)ptr);
    if (ptr != t->enc_for[i]) {
      t->enc_for[i] = 0;
      if (gc_dev_tmap_encode(d, &t->spec[i], t->dtype[i], ptr, m, e)) return e->code;
      t->enc_for[i] = ptr;
    }
    t->args[t->nargs + i] = m;
  }
  *out = t->args;
  return GC_OK;
}

int gc_tmaps_nargs(const gc_tmaps_t *t, void **a) {
  if (t->n) return t->nargs + t->n;
  int n = 0;
  while (n < GC_OP_MAX_ARGS && a[n]) n++; /* gc_op_args ends the list with NULL */
  return n;
}

int gc_window_check(gc_dptr_t pf, int64_t n, gc_err_t *e) {
  if (n < 0 || n % 16 || pf % 16 || (!pf && n))
    return gc_err_set(e, GC_EINVAL, "L2 window of %lld bytes at 0x%llx: a multiple of 16 bytes at a "
                      "16-byte aligned address", (long long)n, (unsigned long long)pf);
  return GC_OK;
}

int gc_window_args(void **a, int na, gc_dptr_t pf, int64_t n, gc_window_args_t *w, void ***out,
                   gc_err_t *e) {
  if (gc_window_check(pf, n, e)) return e->code;
  if (na < 0 || na > GC_TMAPS_ARGS) return gc_err_set(e, GC_EINVAL, "%d arguments and an L2 window: too many", na);
  memcpy(w->args, a, (size_t)na * sizeof *a);
  w->pf = pf;
  w->n = n;
  w->args[na] = &w->pf;
  w->args[na + 1] = &w->n;
  w->args[na + 2] = NULL;
  *out = w->args;
  return GC_OK;
}
