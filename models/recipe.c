/* recipe.c — the Llama forward as a list of problems (see recipe.h and,
 * for the layer they make up, llama.c), the row ranges a bundle must
 * serve, and a model's tuning and bundling workload. */
#include "recipe.h"

#include "../base/quant.h"
#include "../core/ops.h"
#include "../db/tunedb.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


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
      {c->hidden_dim, "FFN rows (intermediate_size)"}};
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
  return c->tp > 1 ? (c->vocab_size + c->tp - 1) / c->tp : c->vocab_size;
}

/* The steps between the QKV projection and rope of a pass of t rows:
 * Qwen2's biases (s->bias), Qwen3's head norms (s->qk_norm), else none. */
static void pre_rope_steps(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t t,
                           gc_llama_steps_t *s) {
  gc_dtype_t a = dt->act, w = dt->weight;
  int64_t H = c->n_heads, G = c->n_kv_heads, hd = c->head_dim;
  s->bias = c->qkv_bias ? prob("bias", a, w, a, t, (H + 2 * G) * hd, 0, 0, 0, 0) : (gc_problem_t){0};
  s->qk_norm = c->qk_norm ? prob("qk_norm", a, w, a, t, 0, 0, H, G, hd) : (gc_problem_t){0};
}

/* rope_kv with the one step before it folded in (bias_rope_kv,
 * qk_norm_rope_kv: the values rotated as that step would have left them),
 * which then drops from the pass: a launch and a trip of QKV through
 * memory fewer. Both steps (no model has them) stay as they are. */
static void fold_pre_rope(gc_llama_steps_t *s) {
  gc_problem_t *pre = s->bias.op[0] ? &s->bias : &s->qk_norm;
  if (!pre->op[0] || (s->bias.op[0] && s->qk_norm.op[0])) return;
  snprintf(s->rope.op, sizeof s->rope.op, "%s_rope_kv", pre->op);
  s->rope.tb = pre->tb; /* the bias's or the norms' dtype */
  memset(pre, 0, sizeof *pre);
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
  pre_rope_steps(c, dt, t, s);
  fold_pre_rope(s);
  s->decode = t == 1 && f;
  s->attn_short = s->attn;
  s->attn_short.k = GC_LLAMA_ATTN_SHORT;
  if (!s->decode) memset(&s->attn_short, 0, sizeof s->attn_short);
  s->argmax_step = prob("argmax_step", a, a, a, 1, c->vocab_size, 0, 0, 0, 0);
  if (!s->decode) memset(&s->argmax_step, 0, sizeof s->argmax_step);
  s->deq = !f && dt->deq_rows > 0 && t >= dt->deq_rows;
  s->qkv_rope = 0;
  gc_llama_layer_steps(dt, 0, s);
}

gc_problem_t gc_llama_qkv_unfused(const gc_problem_t *q) {
  return prob("rmsnorm_gemm", q->ta, q->tb, q->tc, q->m, q->n, q->k, 0, 0, 0);
}

/* qkv of a decode step with dense weights or weights in a device layout
 * (NVIDIA's recipe: gemv_qmma has the epilogue) and a plain rope_kv after
 * it (no step between, nor one folded into rope): rmsnorm_gemm_rope_kv
 * (the heads of rope, the GEMM's dimensions); with dense weights and
 * Qwen2's biases folded into rope (bias_rope_kv), rmsnorm_gemm_bias_rope_kv
 * (the epilogue adds them: the GEMVs of dense weights have it); else as
 * it is. */
static void qkv_rope(gc_llama_steps_t *s) {
  gc_problem_t *q = &s->qkv;
  const int bias = !strcmp(s->rope.op, "bias_rope_kv"), dense = !gc_dtype_is_block(q->tb);
  const int plain = !s->bias.op[0] && !s->qk_norm.op[0] && !strcmp(s->rope.op, "rope_kv");
  s->qkv_rope = s->decode && ((plain && (dense || gc_dtype_is_device_layout(q->tb))) || (bias && dense));
  if (s->qkv_rope)
    *q = prob(bias ? "rmsnorm_gemm_bias_rope_kv" : "rmsnorm_gemm_rope_kv", q->ta, q->tb, q->tc, q->m, q->n, q->k,
              s->rope.h, s->rope.g, s->rope.d);
}

/* Matrix step p of weights in w: with the dense plan and w a block
 * format, its dequantization dq (all rows of the [pair·N, K] matrix: the op
 * table's rows of B per column of C) and the dense B dtype d; else w and
 * no dq. */
static void matrix(const gc_llama_steps_t *s, gc_problem_t *p, gc_problem_t *dq, gc_dtype_t w, gc_dtype_t d) {
  p->tb = w;
  memset(dq, 0, sizeof *dq);
  if (!s->deq || !gc_dtype_is_block(w)) return;
  int64_t rows = gc_op_find(p->op)->pair * p->n;
  *dq = prob("embed", p->ta, w, p->ta, rows, p->k, rows, 0, 0, 0);
  p->tb = d;
}

/* The QKV steps of layer dtypes d (recipe.h: one stacked step, or a split
 * one), made anew from the pass's rows, heads and dim. */
static void qkv_steps(const gc_llama_dtypes_t *dt, const gc_llama_layer_dtypes_t *d, gc_llama_steps_t *s) {
  const gc_problem_t *r = &s->rope; /* the heads: h, g, d */
  const int64_t t = s->qkv.m, K = s->qkv.k, qk = (r->h + r->g) * r->d, v = r->g * r->d;
  const gc_dtype_t a = s->qkv.ta, w = dt->weight;
  const char *op = s->fused ? "rmsnorm_gemm" : "gemm";
  const int split = d->split;
  s->qkv = prob(op, a, w, a, t, split && !s->deq ? qk : qk + v, K, 0, 0, 0);
  memset(&s->qkv_v, 0, sizeof s->qkv_v);
  memset(&s->cat, 0, sizeof s->cat);
  memset(&s->dq[0], 0, sizeof s->dq[0]);
  memset(&s->dq[4], 0, sizeof s->dq[4]);
  s->qkv_rope = 0;
  if (!split) {
    matrix(s, &s->qkv, &s->dq[0], (gc_dtype_t)d->qkv, w);
    qkv_rope(s);
  } else if (s->deq) { /* wq|wk's rows, then wv's, into the scratch: qkv runs dense */
    s->dq[0] = prob("embed", a, (gc_dtype_t)d->qkv, a, qk, K, qk, 0, 0, 0);
    s->dq[4] = prob("embed", a, (gc_dtype_t)d->v, a, v, K, v, 0, 0, 0);
  } else {
    s->qkv.tb = (gc_dtype_t)d->qkv;
    s->qkv_v = prob(op, a, (gc_dtype_t)d->v, a, t, v, K, 0, 0, 0);
    if (!s->decode) s->cat = prob("concat", a, a, a, t, qk + v, qk, 0, 0, 0);
  }
}

void gc_llama_layer_steps(const gc_llama_dtypes_t *dt, int l, gc_llama_steps_t *s) {
  const gc_llama_layer_dtypes_t *d = &dt->layer[l];
  qkv_steps(dt, d, s);
  matrix(s, &s->wo, &s->dq[1], (gc_dtype_t)d->wo, dt->weight);
  matrix(s, &s->swiglu, &s->dq[2], (gc_dtype_t)d->w13, dt->weight);
  matrix(s, &s->w2, &s->dq[3], (gc_dtype_t)d->w2, dt->weight);
}

void gc_llama_batch_steps(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t m,
                          gc_llama_steps_t *s) {
  gc_dtype_t a = dt->act;
  gc_llama_steps(c, dt, m, m, s);
  s->decode = 0; /* rows of their own sequences: rope_kv_batch stays a step */
  memset(&s->attn_short, 0, sizeof s->attn_short); /* attention_batch: rows at their own positions */
  memset(&s->argmax_step, 0, sizeof s->argmax_step); /* rows of their own slots: the host writes positions */
  gc_llama_layer_steps(dt, 0, s);
  s->rope = prob("rope_kv_batch", a, a, a, m, 0, 0, c->n_heads, c->n_kv_heads, c->head_dim);
  pre_rope_steps(c, dt, m, s); /* rope_kv_batch folds neither */
  s->attn = prob("attention_batch", a, a, a, m, 0, 0, c->n_heads, c->n_kv_heads, c->head_dim);
  s->argmax = prob("argmax", a, a, a, m, c->vocab_size, 0, 0, 0, 0);
}

/* The problems s launches, in order; returns their count (at most
 * GC_LLAMA_STEPS_MAX). */
static int steps_list(const gc_llama_steps_t *s, const gc_problem_t *out[GC_LLAMA_STEPS_MAX]) {
  const gc_problem_t *all[] = {&s->embed,  &s->norm,   &s->dq[0],      &s->dq[4], &s->qkv,    &s->qkv_v, &s->cat,
                               &s->bias,   &s->qk_norm, &s->rope,      &s->attn,  &s->attn_short, &s->dq[1],
                               &s->wo,     &s->dq[2],   &s->swiglu,    &s->dq[3], &s->w2,     &s->fnorm, &s->head,
                               &s->argmax, &s->argmax_step};
  int n = 0;
  for (size_t i = 0; i < GC_ARRAY_LEN(all); i++)
    if (!(s->fused && (all[i] == &s->norm || all[i] == &s->fnorm)) && !(s->qkv_rope && all[i] == &s->rope) &&
        all[i]->op[0])
      out[n++] = all[i];
  return n;
}

/* Append to l the problems of steps s for every layer (each distinct
 * layer's dtypes; duplicates drop). */
static int push_layers(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, gc_llama_steps_t *s,
                       gc_problems_t *l, gc_err_t *e) {
  const gc_problem_t *ps[GC_LLAMA_STEPS_MAX];
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
  const gc_problem_t *px[GC_LLAMA_STEPS_MAX], *py[GC_LLAMA_STEPS_MAX];
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

/* Block format q of a tensor with rows of cols elements as the kernels
 * read it: on NVIDIA GPUs Q8_0, Q4_0, Q4_K and Q6_K in their device layouts
 * (Q8_0R, Q4_0R, Q4_KR, Q6_KR: base/quant.h) where rows are whole 256-element blocks, whose
 * aligned parts gemv_qmma loads straight into registers; as stored
 * elsewhere (the AMD and CPU templates read the GGUF layouts). */
static gc_dtype_t on_device(int q, int64_t cols, int cuda) {
  gc_qtype_t r = gc_quant_device_layout((gc_qtype_t)q);
  return gc_dtype_from_qtype(cuda && r != (gc_qtype_t)q && cols % 256 == 0 ? (int)r : q);
}

/* t's dtype where it is a block format (on_device, its rows of
 * t->shape[1] / split columns: a rank's share), else the dense dtype d. */
static gc_dtype_t kept(const gc_weight_t *t, gc_dtype_t d, int cuda, int split) {
  return gc_quant_is_block(t->dtype) ? on_device(t->dtype, t->shape[1] / split, cuda) : d;
}

/* The one block format of n weights (on_device), or the dense dtype d
 * where they differ or any is dense (a stacked step, see recipe.h). */
static gc_dtype_t stacked(const gc_weight_t *const *ts, int n, gc_dtype_t d, int cuda) {
  for (int i = 0; i < n; i++)
    if (!gc_quant_is_block(ts[i]->dtype) || ts[i]->dtype != ts[0]->dtype) return d;
  return on_device(ts[0]->dtype, ts[0]->shape[1], cuda);
}

int gc_llama_dtypes_for(const gc_llama_weights_t *w, const char *backend, int split,
                        gc_llama_dtypes_t *dt, gc_err_t *e) {
  int cpu = !strcmp(backend, "cpu"), cuda = !strcmp(backend, "cuda");
  (void)e;
  if (!gc_weights_quantized(w)) { /* one float dtype: tensors in another (F32 norms) are converted to it */
    dt->weight = (gc_dtype_t)w->cfg.weight_dtype;
    dt->act = cpu ? GC_DT_F32 : dt->weight;
  } else {
    dt->weight = dt->act = cpu ? GC_DT_F32 : GC_DT_F16;
  }
  gc_dtype_t d = dt->weight;
  split = split > 1 ? split : 1;
  dt->embed = kept(&w->tok_embeddings, d, cuda, 1);
  dt->head = kept(&w->classifier, d, cuda, 1);
  for (int l = 0; l < w->cfg.n_layers; l++) {
    const gc_llama_layer_weights_t *L = &w->layers[l];
    const gc_weight_t *qkv[3] = {&L->wq, &L->wk, &L->wv}, *w13[2] = {&L->w1, &L->w3};
    gc_dtype_t q = stacked(qkv, 3, d, cuda), v = q, qk = stacked(qkv, 2, d, cuda);
    const int apart = q == d && qk != d; /* wq|wk in one block format, wv apart (recipe.h) */
    if (apart) q = qk, v = kept(&L->wv, d, cuda, 1);
    dt->layer[l] = (gc_llama_layer_dtypes_t){(uint8_t)q, (uint8_t)kept(&L->wo, d, cuda, split),
                                             (uint8_t)stacked(w13, 2, d, cuda), (uint8_t)kept(&L->w2, d, cuda, split),
                                             (uint8_t)v, (uint8_t)apart};
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
      const size_t per = (size_t)gc_weights_layer_count(&w->cfg);
      const gc_llama_layer_dtypes_t *L = &dt->layer[(i - 1) / per];
      switch ((i - 1) % per) { /* attn_norm wq wk wv wo ffn_norm w1 w2 w3; biases and q/k norms as norms */
        case 1: case 2: t = (gc_dtype_t)L->qkv; break;
        case 3: t = (gc_dtype_t)(L->split ? L->v : L->qkv); break;
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
 * divided by the factor, short ones kept, the band between interpolated;
 * linear scaling divides every frequency by its factor. */
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
    if (c->rope_scaling == GC_ROPE_SCALING_LINEAR) f /= c->rope_factor;
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

/* Does a layer matrix of dt take a block format? */
static int block_layers(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt) {
  for (int l = 0; l < c->n_layers; l++) {
    const gc_llama_layer_dtypes_t *d = &dt->layer[l];
    if (gc_dtype_is_block(d->qkv) || gc_dtype_is_block(d->wo) || gc_dtype_is_block(d->w13) ||
        gc_dtype_is_block(d->w2) || (d->split && gc_dtype_is_block(d->v)))
      return 1;
  }
  return 0;
}

/* *us = the winners' medians in db of the matrix steps of a pass of t
 * tokens that differ between the plans (block-format matrices), summed
 * over the layers: the quantized steps (deq 0) or the dequantization
 * gathers and dense steps (deq 1). *ok = 0 where one has no winner. A
 * layer whose dtypes an earlier one has costs what that one did (the
 * database is asked once per distinct layer: this runs at every start of
 * gcore-run without -b). cost: [n_layers] scratch, each layer's share. */
static int plan_cost(gc_db_t *db, const char *target, const gc_llama_config_t *c, gc_llama_dtypes_t *dt,
                     int64_t t, int deq, double *cost, double *us, int *ok, gc_err_t *e) {
  gc_llama_steps_t s;
  dt->deq_rows = deq;
  gc_llama_steps(c, dt, t, 1, &s);
  *us = 0, *ok = 1;
  for (int l = 0; *ok && l < c->n_layers; l++) {
    const gc_llama_layer_dtypes_t *d = &dt->layer[l];
    int same = 0;
    while (same < l && memcmp(&dt->layer[same], d, sizeof *d)) same++;
    if (same < l) {
      *us += cost[l] = cost[same];
      continue;
    }
    gc_llama_layer_steps(dt, l, &s);
    /* each matrix's steps in this plan: the step, its gathers, and a split
       QKV's V projection and join (those not in this plan or layer are "") */
    const gc_problem_t *steps[4][5] = {{&s.qkv, &s.dq[0], &s.dq[4], &s.qkv_v, &s.cat}, {&s.wo, &s.dq[1]},
                                       {&s.swiglu, &s.dq[2]}, {&s.w2, &s.dq[3]}};
    const uint8_t w[4] = {d->qkv, d->wo, d->w13, d->w2};
    cost[l] = 0;
    for (int i = 0; *ok && i < 4; i++) {
      if (!gc_dtype_is_block(w[i])) continue; /* the same step in both plans */
      for (int j = 0; *ok && j < 5; j++) {
        gc_db_winner_t win;
        if (!steps[i][j] || !steps[i][j]->op[0]) continue;
        if (gc_db_find_winner(db, target, steps[i][j], &win, ok, e)) return e->code;
        cost[l] += win.median_us;
      }
    }
    *us += cost[l];
  }
  dt->deq_rows = 0;
  return GC_OK;
}

int gc_llama_deq_measure(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, const char *db,
                         const char *target, int64_t dflt, int64_t *rows, int *timed, gc_err_t *e) {
  *rows = dflt, *timed = 0;
  if (!db || !target || access(db, R_OK)) return GC_OK;
  gc_db_t *h;
  gc_problems_t tuned = {0};
  gc_llama_dtypes_t *d = gc_malloc(sizeof *d, e);
  double *cost = d ? gc_malloc((size_t)c->n_layers * sizeof *cost, e) : NULL;
  if (!cost) {
    free(d);
    return GC_ENOMEM;
  }
  *d = *dt;
  int rc = gc_db_open(db, 0, &h, e);
  if (rc) {
    free(d), free(cost);
    return rc;
  }
  rc = gc_db_tuned_problems(h, target, &tuned, e);
  /* the pass lengths tuned: the rows of unfused GEMMs with a winner */
  int64_t ts[64];
  int nt = 0;
  for (int i = 0; !rc && i < tuned.n && nt < (int)GC_ARRAY_LEN(ts); i++) {
    int64_t t = tuned.v[i].m;
    int seen = strcmp(tuned.v[i].op, "gemm") || t <= GC_LLAMA_FUSE_MAX || t > c->max_seq;
    for (int j = 0; j < nt && !seen; j++) seen = ts[j] == t;
    if (!seen) ts[nt++] = t;
  }
  /* won[i]: +1 the dense plan was faster at ts[i], -1 slower, 0 untimed */
  int won[64] = {0};
  for (int i = 0; !rc && i < nt; i++) {
    double q, dd;
    int okq, okd;
    rc = plan_cost(h, target, c, d, ts[i], 0, cost, &q, &okq, e);
    if (!rc) rc = plan_cost(h, target, c, d, ts[i], 1, cost, &dd, &okd, e);
    if (!rc && okq && okd) won[i] = dd < q ? 1 : -1, (*timed)++;
  }
  /* the shortest winning length above every losing one (0: none) */
  int64_t lose = 0, win = 0;
  for (int i = 0; i < nt; i++)
    if (won[i] < 0 && ts[i] > lose) lose = ts[i];
  for (int i = 0; i < nt; i++)
    if (won[i] > 0 && ts[i] > lose && (!win || ts[i] < win)) win = ts[i];
  if (!rc && *timed) *rows = win;
  gc_problems_free(&tuned);
  gc_db_close(h);
  free(d), free(cost);
  return rc;
}

/* 1 when name is one of the comma list's entries. */
static int listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *t = list; *t; t += strcspn(t, ",") + (t[strcspn(t, ",")] == ','))
    if (strcspn(t, ",") == n && !strncmp(t, name, n)) return 1;
  return 0;
}

int gc_llama_workload(const char *model_path, const char *quantize, const char *prefill,
                      const char *batch, int tp, const char *backend, gc_problems_t *out,
                      gc_needs_t *needs, gc_llama_plan_t *plan, gc_err_t *e) {
  /* GPUs share a recipe (activations in the weights' dtype) but for the
     block formats' layouts: NVIDIA reads gcore's device layouts */
  static const char *const all[] = {"cpu", "cuda", "hip"};
  int64_t force = plan ? plan->force : -1, measured = 0;
  gc_llama_weights_t *w;
  if (gc_weights_open(model_path, &w, e)) return e->code;
  int rc = quantize ? gc_weights_quantize(w, quantize, e) : GC_OK;
  gc_llama_config_t shard;
  if (!rc) rc = gc_llama_shard(&w->cfg, tp, &shard, e);
  if (!rc) rc = gc_weights_check_split(w, tp, e); /* block formats: each rank's columns whole blocks */
  gc_llama_dtypes_t *dt = rc ? NULL : gc_calloc(1, sizeof *dt, e);
  if (!rc && !dt) rc = GC_ENOMEM;
  if (plan) memset(plan->deq_rows, 0, sizeof plan->deq_rows);
  for (int i = 0; !rc && i < 3; i++) {
    if (backend && !listed(backend, all[i])) continue;
    int gpu = i > 0, timed;
    rc = gc_llama_dtypes_for(w, all[i], tp, dt, e);
    /* the quantized plan (deq_rows 0), then where listed the dense one
       (deq_rows 1: every unfused pass) */
    int plans = block_layers(&shard, dt) && (gpu ? force != 0 : force > 0) ? 2 : 1;
    for (int dense = 0; !rc && dense < plans; dense++) {
      dt->deq_rows = dense;
      rc = add_recipe(&shard, dt, prefill ? prefill : "128,512", prefill != NULL, "--prefill", 0, out, e);
      if (!rc) rc = add_recipe(&shard, dt, batch ? batch : "1", batch != NULL, "--batch", 1, out, e);
      if (!rc && needs) rc = gc_llama_needs(&shard, dt, shard.max_seq, needs, e);
    }
    dt->deq_rows = 0;
    if (rc || !plan || plans == 1 || (gpu && measured)) continue; /* one GPU crossover (plan->target's) */
    if (force >= 0 || !gpu) plan->deq_rows[gpu] = force;
    else rc = gc_llama_deq_measure(&shard, dt, plan->db, plan->target, GC_LLAMA_DEQ_DEFAULT, &plan->deq_rows[gpu],
                                   &timed, e);
    measured |= gpu;
  }
  if (plan) {
    static const char *const keys[2] = {GC_LLAMA_META_DEQ_CPU, GC_LLAMA_META_DEQ_GPU};
    for (int i = 0; i < 2; i++) {
      snprintf(plan->text[i], sizeof plan->text[i], "%lld", (long long)plan->deq_rows[i]);
      plan->meta[2 * i] = keys[i];
      plan->meta[2 * i + 1] = plan->text[i];
    }
    plan->meta[4] = NULL;
  }
  free(dt);
  gc_weights_close(w);
  return rc;
}
