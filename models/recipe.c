/* recipe.c — the Llama forward as a list of problems (see recipe.h and,
 * for the layer they make up, llama.c), the row ranges a bundle must
 * serve, and a model's tuning and bundling workload. */
#include "recipe.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>


static gc_problem_t prob(const char *op, gc_dtype_t a, gc_dtype_t b, gc_dtype_t c, int64_t m,
                         int64_t n, int64_t k, int64_t h, int64_t g, int64_t d) {
  gc_problem_t p = {"", a, b, c, m, n, k, h, g, d};
  snprintf(p.op, sizeof p.op, "%s", op);
  return p;
}

void gc_llama_steps(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t t, int64_t rows,
                    gc_llama_steps_t *s) {
  gc_dtype_t a = dt.act, w = dt.weight;
  int64_t D = c->dim, F = c->hidden_dim, H = c->n_heads, G = c->n_kv_heads, hd = c->head_dim;
  int f = s->fused = t <= GC_LLAMA_FUSE_MAX;
  s->embed = prob("embed", a, w, a, t, D, c->vocab_size, 0, 0, 0);
  s->norm = prob("rmsnorm", a, w, a, t, D, 0, 0, 0, 0);
  s->qkv = prob(f ? "rmsnorm_gemm" : "gemm", a, w, a, t, (H + 2 * G) * hd, D, 0, 0, 0);
  s->rope = prob("rope_kv", a, a, a, t, 0, 0, H, G, hd);
  s->attn = prob("attention", a, a, a, t, 0, 0, H, G, hd);
  s->wo = prob("gemm_add", a, w, a, t, D, H * hd, 0, 0, 0);
  s->swiglu = prob(f ? "rmsnorm_gemm_swiglu" : "gemm_swiglu", a, w, a, t, F, D, 0, 0, 0);
  s->w2 = prob("gemm_add", a, w, a, t, D, F, 0, 0, 0);
  s->fnorm = prob("rmsnorm", a, w, a, rows, D, 0, 0, 0, 0);
  s->head = prob(f ? "rmsnorm_gemm" : "gemm", a, w, a, rows, c->vocab_size, D, 0, 0, 0);
  s->argmax = prob("argmax", a, a, a, 1, c->vocab_size, 0, 0, 0, 0);
}

void gc_llama_batch_steps(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t m,
                          gc_llama_steps_t *s) {
  gc_dtype_t a = dt.act;
  gc_llama_steps(c, dt, m, m, s);
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
    if (!(s->fused && (all[i] == &s->norm || all[i] == &s->fnorm))) out[n++] = all[i];
  return n;
}

int gc_llama_recipe(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t t,
                    int64_t logits_rows, gc_problems_t *l, gc_err_t *e) {
  gc_llama_steps_t s;
  const gc_problem_t *ps[11];
  gc_llama_steps(c, dt, t, logits_rows, &s);
  int n = steps_list(&s, ps);
  for (int i = 0; i < n; i++)
    if (gc_problems_push(l, ps[i], e)) return e->code;
  return GC_OK;
}

int gc_llama_batch_recipe(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t m,
                          gc_problems_t *l, gc_err_t *e) {
  gc_llama_steps_t s;
  const gc_problem_t *ps[11];
  gc_llama_batch_steps(c, dt, m, &s);
  int n = steps_list(&s, ps);
  for (int i = 0; i < n; i++)
    if (gc_problems_push(l, ps[i], e)) return e->code;
  return GC_OK;
}

/* The passes needs_between spans: logits of the last row, of every row,
 * or batched decode steps. */
enum { PASS_LAST, PASS_ALL, PASS_BATCH };

static void pass_steps(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t t, int kind,
                       gc_llama_steps_t *s) {
  if (kind == PASS_BATCH) gc_llama_batch_steps(c, dt, t, s);
  else gc_llama_steps(c, dt, t, kind == PASS_ALL ? t : 1, s);
}

/* Passes of a to b tokens (one side of GC_LLAMA_FUSE_MAX, so the same
 * steps): a step whose rows grow with the pass needs every m between its
 * rows at a and at b; one whose rows are fixed (the LM head of the last
 * row, argmax) needs that m. */
static int needs_between(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t a, int64_t b,
                         int kind, gc_needs_t *out, gc_err_t *e) {
  gc_llama_steps_t x, y;
  const gc_problem_t *px[11], *py[11];
  pass_steps(c, dt, a, kind, &x);
  pass_steps(c, dt, b, kind, &y);
  int n = steps_list(&x, px);
  assert(n == steps_list(&y, py));
  for (int i = 0; i < n; i++)
    if (gc_needs_push(out, py[i], px[i]->m, e)) return e->code;
  return GC_OK;
}

int gc_llama_needs(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t ctx,
                   gc_needs_t *out, gc_err_t *e) {
  int64_t fuse = ctx < GC_LLAMA_FUSE_MAX ? ctx : GC_LLAMA_FUSE_MAX;
  for (int kind = PASS_LAST; kind <= PASS_ALL; kind++) {
    if (needs_between(c, dt, 1, fuse, kind, out, e)) return e->code;
    if (ctx > fuse && needs_between(c, dt, fuse + 1, ctx, kind, out, e)) return e->code;
  }
  /* batched decode steps: rows are sequences, not positions, so their
     count does not depend on the context */
  if (needs_between(c, dt, 1, GC_LLAMA_FUSE_MAX, PASS_BATCH, out, e)) return e->code;
  return needs_between(c, dt, GC_LLAMA_FUSE_MAX + 1, GC_LLAMA_BATCH_MAX, PASS_BATCH, out, e);
}

int gc_llama_dtypes_for(const gc_llama_weights_t *w, const char *backend,
                        gc_llama_dtypes_t *dt, gc_err_t *e) {
  int cpu = !strcmp(backend, "cpu");
  gc_st_dtype_t wt = w->cfg.weight_dtype;
  (void)e;
  /* No kernel reads block formats yet: quantized models run on dense
     copies (gc_weights_dequantize in gc_llama_create), fp32 on the CPU and
     fp16 on GPUs. Tensors in another float type than the matrices (a GGUF
     file's F32 norms) are converted to theirs the same way. */
  if (gc_weights_quantized(w)) wt = cpu ? GC_ST_F32 : GC_ST_F16;
  dt->weight = (gc_dtype_t)wt;
  dt->act = cpu ? GC_DT_F32 : dt->weight;
  return GC_OK;
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
static int add_recipe(const gc_llama_weights_t *w, gc_llama_dtypes_t dt, const char *list,
                      int given, const char *flag, int batched, gc_problems_t *out, gc_err_t *e) {
  char buf[512];
  if (!strcmp(list, "none")) return GC_OK; /* e.g. decode steps only */
  if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
    return gc_err_set(e, GC_EINVAL, "%s: list too long", flag);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int64_t v;
    if (!given && gc_parse_i64(t, &v) == GC_OK && v > w->cfg.max_seq) v = w->cfg.max_seq;
    else if (gc_parse_i64(t, &v) || v < 1 || v > w->cfg.max_seq)
      return gc_err_set(e, GC_EINVAL, "%s: '%s' is not a token count in [1, %d]", flag, t,
                        w->cfg.max_seq);
    if (gc_llama_recipe(&w->cfg, dt, v, 1, out, e)) return e->code;
    /* gcore-serve's batched steps (at most GC_LLAMA_BATCH_MAX rows) */
    if (batched && v <= GC_LLAMA_BATCH_MAX && gc_llama_batch_recipe(&w->cfg, dt, v, out, e))
      return e->code;
  }
  return GC_OK;
}

int gc_llama_workload(const char *model_path, const char *quantize, const char *prefill,
                      const char *batch, const char *backend, gc_problems_t *out, gc_needs_t *needs,
                      gc_err_t *e) {
  static const char *const all[] = {"cpu", "cuda"};
  /* GPU backends share one recipe: activations in the weights' dtype */
  if (backend && !strcmp(backend, "hip")) backend = "cuda";
  gc_llama_weights_t *w;
  if (gc_weights_open(model_path, &w, e)) return e->code;
  int rc = quantize ? gc_weights_quantize(w, quantize, e) : GC_OK;
  for (int i = 0; !rc && i < 2; i++) {
    gc_llama_dtypes_t dt;
    if (backend && strcmp(backend, all[i])) continue;
    rc = gc_llama_dtypes_for(w, all[i], &dt, e);
    if (!rc) rc = add_recipe(w, dt, prefill ? prefill : "128,512", prefill != NULL, "--prefill", 0, out, e);
    if (!rc) rc = add_recipe(w, dt, batch ? batch : "1", batch != NULL, "--batch", 1, out, e);
    if (!rc && needs) rc = gc_llama_needs(&w->cfg, dt, w->cfg.max_seq, needs, e);
  }
  gc_weights_close(w);
  return rc;
}
