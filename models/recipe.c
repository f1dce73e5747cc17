/* recipe.c — the Llama forward as a list of problems (see recipe.h and,
 * for the layer they make up, llama.c), the row ranges a bundle must
 * serve, and a model's tuning and bundling workload. */
#include "recipe.h"

#include "../base/quant.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static gc_problem_t prob(const char *op, gc_dtype_t a, gc_dtype_t b, gc_dtype_t c, int64_t m,
                         int64_t n, int64_t k, int64_t h, int64_t g, int64_t d) {
  gc_problem_t p = {"", a, b, c, m, n, k, h, g, d};
  snprintf(p.op, sizeof p.op, "%s", op);
  return p;
}

int gc_llama_shard(const gc_llama_config_t *c, int tp, gc_llama_config_t *out, gc_err_t *e) {
  if (tp < 1 || tp > GC_LLAMA_TP_MAX)
    return gc_err_set(e, GC_EINVAL, "--tp %d: expected 1 to %d ranks", tp, GC_LLAMA_TP_MAX);
  if (c->tp > 1) return gc_err_set(e, GC_EINVAL, "--tp %d: the config is already a shard of %d", tp, c->tp);
  const struct { int v; const char *what; } dims[] = {
      {c->n_heads, "attention heads"}, {c->n_kv_heads, "KV heads"},
      {c->hidden_dim, "FFN rows (intermediate_size)"}, {c->vocab_size, "vocabulary rows"}};
  for (size_t i = 0; i < GC_ARRAY_LEN(dims); i++)
    if (dims[i].v % tp)
      return gc_err_set(e, GC_EINVAL, "--tp %d: %d %s are not divisible by %d", tp, dims[i].v,
                        dims[i].what, tp);
  *out = *c;
  out->n_heads /= tp;
  out->n_kv_heads /= tp;
  out->hidden_dim /= tp;
  out->tp = tp;
  return GC_OK;
}

int64_t gc_llama_head_rows(const gc_llama_config_t *c) {
  return c->tp > 1 ? c->vocab_size / c->tp : c->vocab_size;
}

void gc_llama_steps(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t t, int64_t rows,
                    gc_llama_steps_t *s) {
  gc_dtype_t a = dt->act, w = dt->weight;
  int64_t D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, hd = c->head_dim;
  int f = s->fused = t <= GC_LLAMA_FUSE_MAX;
  s->embed = prob("embed", a, dt->embed, a, t, D, c->vocab_size, 0, 0, 0);
  s->norm = prob("rmsnorm", a, w, a, t, D, 0, 0, 0, 0);
  s->qkv = prob(f ? "rmsnorm_gemm" : "gemm", a, w, a, t, (H + 2 * G) * hd, D, 0, 0, 0);
  s->rope = prob("rope_kv", a, a, a, t, 0, 0, H, G, hd);
  s->attn = prob("attention", a, a, a, t, 0, 0, H, G, hd);
  s->wo = prob("gemm_add", a, w, a, t, D, H * hd, 0, 0, 0);
  s->swiglu = prob(f ? "rmsnorm_gemm_swiglu" : "gemm_swiglu", a, w, a, t, F, D, 0, 0, 0);
  s->w2 = prob("gemm_add", a, w, a, t, D, F, 0, 0, 0);
  s->fnorm = prob("rmsnorm", a, w, a, rows, D, 0, 0, 0, 0);
  s->head = prob(f ? "rmsnorm_gemm" : "gemm", a, dt->head, a, rows, gc_llama_head_rows(c), D, 0, 0, 0);
  s->argmax = prob("argmax", a, a, a, 1, c->vocab_size, 0, 0, 0, 0);
  s->decode = t == 1 && f;
  s->qkv_rope = 0;
  gc_llama_layer_steps(dt, 0, s);
}

gc_problem_t gc_llama_qkv_unfused(const gc_problem_t *q) {
  return prob("rmsnorm_gemm", q->ta, q->tb, q->tc, q->m, q->n, q->k, 0, 0, 0);
}

/* qkv of a decode step with dense weights: rmsnorm_gemm_rope_kv (the
 * heads of rope, the GEMM's dimensions); else as gc_llama_steps set it. */
static void qkv_rope(gc_llama_steps_t *s) {
  gc_problem_t *q = &s->qkv;
  int was = s->qkv_rope;
  s->qkv_rope = s->decode && !gc_dtype_is_block(q->tb);
  if (s->qkv_rope)
    *q = prob("rmsnorm_gemm_rope_kv", q->ta, q->tb, q->tc, q->m, q->n, q->k, s->rope.h, s->rope.g, s->rope.d);
  else if (was)
    *q = gc_llama_qkv_unfused(q);
}

void gc_llama_layer_steps(const gc_llama_dtypes_t *dt, int l, gc_llama_steps_t *s) {
  const gc_llama_layer_dtypes_t *d = &dt->layer[l];
  s->qkv.tb = (gc_dtype_t)d->qkv;
  s->wo.tb = (gc_dtype_t)d->wo;
  s->swiglu.tb = (gc_dtype_t)d->w13;
  s->w2.tb = (gc_dtype_t)d->w2;
  qkv_rope(s);
}

void gc_llama_batch_steps(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t m,
                          gc_llama_steps_t *s) {
  gc_dtype_t a = dt->act;
  gc_llama_steps(c, dt, m, m, s);
  s->decode = 0; /* rows of their own sequences: rope_kv_batch stays a step */
  qkv_rope(s);
  s->rope = prob("rope_kv_batch", a, a, a, m, 0, 0, c->n_heads, c->n_kv_heads, c->head_dim);
  s->attn = prob("attention_batch", a, a, a, m, 0, 0, c->n_heads, c->n_kv_heads, c->head_dim);
  s->argmax = prob("argmax", a, a, a, m, c->vocab_size, 0, 0, 0, 0);
}

/* The problems s launches, in order; returns their count (at most 11). */
static int steps_list(const gc_llama_steps_t *s, const gc_problem_t *out[11]) {
  const gc_problem_t *all[] = {&s->embed, &s->norm, &s->qkv, &s->rope, &s->attn, &s->wo,
                               &s->swiglu, &s->w2, &s->fnorm, &s->head, &s->argmax};
  int n = 0;
  for (size_t i = 0; i < GC_ARRAY_LEN(all); i++)
    if (!(s->fused && (all[i] == &s->norm || all[i] == &s->fnorm)) && !(s->qkv_rope && all[i] == &s->rope))
      out[n++] = all[i];
  return n;
}

/* Append to l the problems of steps s for every layer (each distinct
 * layer's dtypes; duplicates drop). */
static int push_layers(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, gc_llama_steps_t *s,
                       gc_problems_t *l, gc_err_t *e) {
  const gc_problem_t *ps[11];
  for (int layer = 0; layer < c->n_layers; layer++) {
    gc_llama_layer_steps(dt, layer, s);
    int n = steps_list(s, ps);
    for (int i = 0; i < n; i++)
      if (gc_problems_push(l, ps[i], e)) return e->code;
  }
  return GC_OK;
}

int gc_llama_recipe(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t t,
                    int64_t logits_rows, gc_problems_t *l, gc_err_t *e) {
  gc_llama_steps_t s;
  gc_llama_steps(c, dt, t, logits_rows, &s);
  return push_layers(c, dt, &s, l, e);
}

int gc_llama_batch_recipe(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t m,
                          gc_problems_t *l, gc_err_t *e) {
  gc_llama_steps_t s;
  gc_llama_batch_steps(c, dt, m, &s);
  return push_layers(c, dt, &s, l, e);
}

/* The passes needs_between spans: logits of the last row, of every row,
 * or batched decode steps. */
enum { PASS_LAST, PASS_ALL, PASS_BATCH };

static void pass_steps(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t t, int kind,
                       gc_llama_steps_t *s) {
  if (kind == PASS_BATCH) gc_llama_batch_steps(c, dt, t, s);
  else gc_llama_steps(c, dt, t, kind == PASS_ALL ? t : 1, s);
}

/* Passes of a to b tokens (one side of GC_LLAMA_FUSE_MAX and of 1, so the
 * same steps): a step whose rows grow with the pass needs every m between its
 * rows at a and at b; one whose rows are fixed (the LM head of the last
 * row, argmax) needs that m. */
static int needs_between(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t a, int64_t b,
                         int kind, gc_needs_t *out, gc_err_t *e) {
  gc_llama_steps_t x, y;
  const gc_problem_t *px[11], *py[11];
  pass_steps(c, dt, a, kind, &x);
  pass_steps(c, dt, b, kind, &y);
  for (int l = 0; l < c->n_layers; l++) {
    gc_llama_layer_steps(dt, l, &x);
    gc_llama_layer_steps(dt, l, &y);
    int n = steps_list(&x, px);
    assert(n == steps_list(&y, py));
    for (int i = 0; i < n; i++)
      if (gc_needs_push(out, py[i], px[i]->m, e)) return e->code;
  }
  return GC_OK;
}

int gc_llama_needs(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t ctx,
                   gc_needs_t *out, gc_err_t *e) {
  int64_t fuse = ctx < GC_LLAMA_FUSE_MAX ? ctx : GC_LLAMA_FUSE_MAX;
  for (int kind = PASS_LAST; kind <= PASS_ALL; kind++) {
    /* the decode step (qkv_rope), the other fused passes, the rest */
    if (needs_between(c, dt, 1, 1, kind, out, e)) return e->code;
    if (fuse > 1 && needs_between(c, dt, 2, fuse, kind, out, e)) return e->code;
    if (ctx > fuse && needs_between(c, dt, fuse + 1, ctx, kind, out, e)) return e->code;
  }
  /* batched decode steps: rows are sequences, not positions, so their
     count does not depend on the context */
  if (needs_between(c, dt, 1, GC_LLAMA_FUSE_MAX, PASS_BATCH, out, e)) return e->code;
  return needs_between(c, dt, GC_LLAMA_FUSE_MAX + 1, GC_LLAMA_BATCH_MAX, PASS_BATCH, out, e);
}

/* t's dtype where it is a block format, else the dense dtype d. */
static gc_dtype_t kept(const gc_weight_t *t, gc_dtype_t d) {
  return gc_quant_is_block(t->dtype) ? gc_dtype_from_qtype(t->dtype) : d;
}

/* The one block format of n weights, or the dense dtype d where they
 * differ or any is dense (a stacked step, see recipe.h). */
static gc_dtype_t stacked(const gc_weight_t *const *ts, int n, gc_dtype_t d) {
  for (int i = 0; i < n; i++)
    if (!gc_quant_is_block(ts[i]->dtype) || ts[i]->dtype != ts[0]->dtype) return d;
  return gc_dtype_from_qtype(ts[0]->dtype);
}

int gc_llama_dtypes_for(const gc_llama_weights_t *w, const char *backend,
                        gc_llama_dtypes_t *dt, gc_err_t *e) {
  int cpu = !strcmp(backend, "cpu");
  (void)e;
  if (!gc_weights_quantized(w)) { /* one float dtype: tensors in another (F32 norms) are converted to it */
    dt->weight = (gc_dtype_t)w->cfg.weight_dtype;
    dt->act = cpu ? GC_DT_F32 : dt->weight;
  } else {
    dt->weight = dt->act = cpu ? GC_DT_F32 : GC_DT_F16;
  }
  gc_dtype_t d = dt->weight;
  dt->embed = kept(&w->tok_embeddings, d);
  dt->head = kept(&w->classifier, d);
  for (int l = 0; l < w->cfg.n_layers; l++) {
    const gc_llama_layer_weights_t *L = &w->layers[l];
    const gc_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv}, *w13[2] = {&L->w1, &L->w3};
    dt->layer[l] = (gc_llama_layer_dtypes_t){(uint8_t)stacked(qkv, 3, d), (uint8_t)kept(&L->wo, d),
                                             (uint8_t)stacked(w13, 2, d), (uint8_t)kept(&L->w2, d)};
  }
  return GC_OK;
}

void gc_llama_tensor_dtypes(const gc_llama_weights_t *w, const gc_llama_dtypes_t *dt, gc_st_dtype_t *to) {
  size_t n = gc_weights_count(w);
  for (size_t i = 0; i < n; i++) {
    gc_dtype_t t = dt->weight; /* norms */
    if (i == 0) t = dt->embed;
    else if (i == n - 1) t = dt->head;
    else if (i < n - 2) {
      const gc_llama_layer_dtypes_t *L = &dt->layer[(i - 1) / GC_LLAMA_LAYER_TENSORS];
      switch ((i - 1) % GC_LLAMA_LAYER_TENSORS) { /* attn_norm wq wk wv wo ffn_norm w1 w2 w3 */
        case 1: case 2: case 3: t = (gc_dtype_t)L->qkv; break;
        case 4: t = (gc_dtype_t)L->wo; break;
        case 6: case 8: t = (gc_dtype_t)L->w13; break;
        case 7: t = (gc_dtype_t)L->w2; break;
        default: break;
      }
    }
    to[i] = (gc_st_dtype_t)gc_dtype_qtype(t);
  }
}

/* ---- RoPE frequencies ---------------------------------------------------- */

/* Llama 3.1 scaling as Hugging Face computes it: long wavelengths are
 * divided by the factor, short ones kept, the band between interpolated. */
void gc_llama_inv_freq(const gc_llama_config_t *c, double *out) {
  int hd = c->head_dim;
  for (int j = 0; j < hd / 2; j++) {
    double f = pow(c->rope_theta, -(double)(2 * j) / hd);
    if (c->rope_scaling == GC_ROPE_SCALING_LLAMA3) {
      double old = c->rope_original_max_seq, lo = c->rope_low_freq_factor,
             hi = c->rope_high_freq_factor, factor = c->rope_factor;
      double wavelen = 2 * M_PI / f, lo_wl = old / lo, hi_wl = old / hi;
      double scaled = wavelen > lo_wl ? f / factor : f;
      if (!(wavelen < hi_wl) && !(wavelen > lo_wl)) {
        double smooth = (old / wavelen - lo) / (hi - lo);
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
    if (c->rope_scaling == GC_ROPE_SCALING_FACTORS) f /= c->rope_factors[j];
    out[j] = f;
  }
}


/* Problems for each token count in list. Counts over the model's context
 * are an error when the user gave them, and are capped to it in the
 * default list (so that small models work without flags). */
static int add_recipe(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, const char *list,
                      int given, const char *flag, int batched, gc_problems_t *out, gc_err_t *e) {
  char buf[512];
  if (!strcmp(list, "none")) return GC_OK; /* e.g. decode steps only */
  if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
    return gc_err_set(e, GC_EINVAL, "%s: list too long", flag);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int64_t v;
    if (!given && gc_parse_i64(t, &v) == GC_OK && v > c->max_seq) v = c->max_seq;
    else if (gc_parse_i64(t, &v) || v < 1 || v > c->max_seq)
      return gc_err_set(e, GC_EINVAL, "%s: '%s' is not a token count in [1, %d]", flag, t,
                        c->max_seq);
    if (gc_llama_recipe(c, dt, v, 1, out, e)) return e->code;
    /* gcore-serve's batched steps (at most GC_LLAMA_BATCH_MAX rows) */
    if (batched && v <= GC_LLAMA_BATCH_MAX && gc_llama_batch_recipe(c, dt, v, out, e))
      return e->code;
  }
  return GC_OK;
}

int gc_llama_workload(const char *model_path, const char *quantize, const char *prefill,
                      const char *batch, int tp, const char *backend, gc_problems_t *out,
                      gc_needs_t *needs, gc_err_t *e) {
  static const char *const all[] = {"cpu", "cuda"};
  /* GPU backends share one recipe: activations in the weights' dtype */
  if (backend && !strcmp(backend, "hip")) backend = "cuda";
  gc_llama_weights_t *w;
  if (gc_weights_open(model_path, &w, e)) return e->code;
  int rc = quantize ? gc_weights_quantize(w, quantize, e) : GC_OK;
  if (!rc && tp > 1 && gc_weights_quantized(w))
    rc = gc_err_set(e, GC_EUNSUPPORTED, "--tp %d: block-format (quantized) weights are not split yet", tp);
  gc_llama_config_t shard;
  if (!rc) rc = gc_llama_shard(&w->cfg, tp, &shard, e);
  gc_llama_dtypes_t *dt = rc ? NULL : gc_malloc(sizeof *dt, e);
  if (!rc && !dt) rc = GC_ENOMEM;
  for (int i = 0; !rc && i < 2; i++) {
    if (backend && strcmp(backend, all[i])) continue;
    rc = gc_llama_dtypes_for(w, all[i], dt, e);
    if (!rc) rc = add_recipe(&shard, dt, prefill ? prefill : "128,512", prefill != NULL, "--prefill", 0, out, e);
    if (!rc) rc = add_recipe(&shard, dt, batch ? batch : "1", batch != NULL, "--batch", 1, out, e);
    if (!rc && needs) rc = gc_llama_needs(&shard, dt, shard.max_seq, needs, e);
  }
  free(dt);
  gc_weights_close(w);
  return rc;
}
