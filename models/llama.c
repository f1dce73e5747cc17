/* llama.c — the Llama forward pass through bundle kernels.
 *
 * One layer, as the recipe lists it (t tokens, D = dim, F = hidden_dim,
 * H/G query/kv heads of hd each):
 *   xn  = rmsnorm(x, attn_norm)            [t, D]
 *   qkv = xn · Wqkvᵀ                        [t, (H+2G)·hd]   (wq|wk|wv concatenated)
 *   q, cache[pos..] = rope_kv(qkv)          [t, H·hd]
 *   a   = attention(q, cache)               [t, H·hd]        (causal, GQA)
 *   x  += a · Woᵀ                           [t, D]           (gemm_add: the residual add in the epilogue)
 *   xn  = rmsnorm(x, ffn_norm)
 *   h   = silu(xn · W1ᵀ) ⊙ (xn · W3ᵀ)        [t, F]           (W1|W3 concatenated)
 *   x  += h · W2ᵀ                           (gemm_add)
 * then the final norm and the LM head on the last row (or every row).
 * Passes of at most GC_LLAMA_FUSE_MAX (8) tokens (decode steps, small batches)
 * fold each RMSNorm into the GEMM that reads it (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu): the GEMVs that serve them normalise A's rows in
 * their own pass, which saves a launch and a round trip of xn through
 * memory; longer passes keep the two steps (the norm costs little there,
 * and the big-GEMM templates need not implement the fused ops). */
#include "llama.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_dev {
  gc_dptr_t attn_norm, wqkv, wo, ffn_norm, w13, w2; /* weights on the device */
  gc_dptr_t kc, vc;                                 /* [ctx, G·hd] each */
} layer_dev_t;

struct gc_llama {
  gc_dev_t *dev;
  gc_rt_t *rt;
  gc_llama_config_t cfg;
  gc_llama_dtypes_t dt;
  int ctx, max_t, npos;       /* npos: tokens in the cache */
  layer_dev_t *layers;          /* [n_layers] */
  gc_dptr_t tok_emb, norm, cls, inv_freq;
  gc_dptr_t x, xn, qkv, q, att, hb, logits; /* activations, [max_t, ...] */
  gc_dptr_t step;               /* int32 [1 + max_t]: the position, then the tokens */
  gc_dptr_t pos, tokens;        /* step, step + 4 */
  int graphs;                   /* capture the decode step and replay it */
  int64_t replays;              /* decode steps run as a graph replay */
  gc_graph_t *decode_graph[2];  /* [0]: logits out, [1]: device argmax */
  gc_prof_t *prof;
  gc_dptr_t *owned;             /* [nowned]: allocations to free (cap: capowned) */
  int nowned, capowned;
  gc_llama_weights_t *conv;     /* tensors converted to the forward's dtypes (F32 norms of
                                   an F16 GGUF, the dense parts of a quantized model), or NULL */
};

/* ---- device memory ------------------------------------------------------- */

static int alloc(gc_llama_t *m, size_t n, gc_dptr_t *out, gc_err_t *e) {
  if (m->nowned == m->capowned) {
    int cap = m->capowned ? 2 * m->capowned : 64;
    gc_dptr_t *v = gc_realloc(m->owned, (size_t)cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    m->owned = v;
    m->capowned = cap;
  }
  if (gc_dev_alloc(m->dev, n, out, e)) return gc_err_prefix(e, "model on %s", gc_dev_info(m->dev)->name);
  m->owned[m->nowned++] = *out;
  return GC_OK;
}

/* A weight on the device: in place where the device reads host memory and
 * the data is 64-byte aligned, else a copy. */
static int place(gc_llama_t *m, const gc_weight_t *w, gc_dptr_t *out, gc_err_t *e) {
  if (gc_dev_info(m->dev)->host_memory && ((uintptr_t)w->data % 64) == 0) {
    *out = (gc_dptr_t)(uintptr_t)w->data;
    return GC_OK;
  }
  if (alloc(m, w->nbytes, out, e)) return e->code;
  return gc_dev_upload(m->dev, *out, w->data, w->nbytes, e);
}

/* Rows of several weights stacked into one matrix (wq|wk|wv, w1|w3). */
static int stack(gc_llama_t *m, const gc_weight_t *const *ws, int n, gc_dptr_t *out,
                 gc_err_t *e) {
  size_t total = 0, off = 0;
  for (int i = 0; i < n; i++) total += ws[i]->nbytes;
  if (alloc(m, total, out, e)) return e->code;
  for (int i = 0; i < n; i++) {
    if (gc_dev_upload(m->dev, *out + off, ws[i]->data, ws[i]->nbytes, e)) return e->code;
    off += ws[i]->nbytes;
  }
  return GC_OK;
}

static int place_layer(gc_llama_t *m, const gc_llama_layer_weights_t *lw, layer_dev_t *ld,
                       gc_err_t *e) {
  const gc_weight_t *qkv[3] = {&lw->wq, &lw->wk, &lw->wv}, *w13[2] = {&lw->w1, &lw->w3};
  size_t cache = (size_t)m->ctx * m->cfg.n_kv_heads * m->cfg.head_dim * gc_dtype_size(m->dt.act);
  if (place(m, &lw->attn_norm, &ld->attn_norm, e) || stack(m, qkv, 3, &ld->wqkv, e) ||
      place(m, &lw->wo, &ld->wo, e) || place(m, &lw->ffn_norm, &ld->ffn_norm, e) ||
      stack(m, w13, 2, &ld->w13, e) || place(m, &lw->w2, &ld->w2, e) ||
      alloc(m, cache, &ld->kc, e) || alloc(m, cache, &ld->vc, e))
    return e->code;
  return GC_OK;
}

static int alloc_activations(gc_llama_t *m, gc_err_t *e) {
  const gc_llama_config_t *c = &m->cfg;
  size_t a = gc_dtype_size(m->dt.act), t = (size_t)m->max_t;
  size_t hd = (size_t)c->head_dim, H = (size_t)c->n_heads, G = (size_t)c->n_kv_heads;
  size_t widest = (size_t)c->dim > (size_t)c->vocab_size ? (size_t)c->dim : (size_t)c->vocab_size;
  if (alloc(m, t * c->dim * a, &m->x, e) || alloc(m, t * c->dim * a, &m->xn, e) ||
      alloc(m, t * (H + 2 * G) * hd * a, &m->qkv, e) || alloc(m, t * H * hd * a, &m->q, e) ||
      alloc(m, t * H * hd * a, &m->att, e) ||
      alloc(m, t * c->hidden_dim * a, &m->hb, e) || alloc(m, t * widest * 4, &m->logits, e) ||
      alloc(m, (t + 1) * 4, &m->step, e))
    return e->code;
  m->pos = m->step;
  m->tokens = m->step + 4;
  return GC_OK;
}

static int upload_freqs(gc_llama_t *m, gc_err_t *e) {
  double f[512];
  if (m->cfg.head_dim / 2 > (int)GC_ARRAY_LEN(f))
    return gc_err_set(e, GC_EUNSUPPORTED, "head_dim %d is over 1024", m->cfg.head_dim);
  gc_llama_inv_freq(&m->cfg, f);
  size_t n = (size_t)m->cfg.head_dim / 2 * sizeof(double);
  if (alloc(m, n, &m->inv_freq, e)) return e->code;
  return gc_dev_upload(m->dev, m->inv_freq, f, n, e);
}

/* Every kernel for decode (t = 1) and for the largest prefill, so that a
 * bundle missing one fails now with its name, not mid-generation. */
static int resolve_kernels(gc_llama_t *m, gc_err_t *e) {
  int64_t ts[2] = {1, m->max_t};
  for (int i = 0; i < 2; i++) {
    gc_problems_t l = {0};
    int rc = gc_llama_recipe(&m->cfg, &m->dt, ts[i], 1, &l, e);
    for (int j = 0; !rc && j < l.n; j++) {
      const gc_rt_kernel_t *k;
      rc = gc_rt_find(m->rt, &l.v[j], &k, e);
    }
    gc_problems_free(&l);
    if (rc) return gc_err_prefix(e, "the bundle cannot run this model");
  }
  return GC_OK;
}

int gc_llama_create(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, int ctx,
                    int max_t, gc_llama_t **out, gc_err_t *e) {
  *out = NULL;
  if (ctx < 1 || max_t < 1 || max_t > ctx)
    return gc_err_set(e, GC_EINVAL, "context %d / prefill %d out of range", ctx, max_t);
  gc_llama_t *m = gc_calloc(1, sizeof *m, e);
  if (!m) return GC_ENOMEM;
  m->dev = dev;
  m->rt = rt;
  m->cfg = w->cfg;
  m->ctx = ctx;
  m->max_t = max_t;
  m->graphs = 1;
  int rc = gc_llama_dtypes_for(w, gc_dev_info(dev)->backend, &m->dt, e);
  if (!rc) rc = resolve_kernels(m, e);
  /* Block formats stay as stored (the kernels dequantize); what a step
     takes in another dtype is converted once (gc_llama_dtypes_for). */
  gc_st_dtype_t *to = rc ? NULL : gc_malloc(gc_weights_count(w) * sizeof *to, e);
  if (!rc && !to) rc = GC_ENOMEM;
  if (!rc) gc_llama_tensor_dtypes(w, &m->dt, to);
  if (!rc) rc = gc_weights_as(w, to, &m->conv, e);
  free(to);
  if (m->conv) w = m->conv;
  if (!rc && !(m->layers = gc_calloc((size_t)m->cfg.n_layers, sizeof *m->layers, e))) rc = GC_ENOMEM;
  for (int l = 0; !rc && l < m->cfg.n_layers; l++) rc = place_layer(m, &w->layers[l], &m->layers[l], e);
  if (!rc) rc = place(m, &w->tok_embeddings, &m->tok_emb, e);
  if (!rc) rc = place(m, &w->norm, &m->norm, e);
  if (!rc) rc = w->classifier.data == w->tok_embeddings.data ? (m->cls = m->tok_emb, GC_OK)
                                                              : place(m, &w->classifier, &m->cls, e);
  if (!rc) rc = upload_freqs(m, e);
  if (!rc) rc = alloc_activations(m, e);
  if (m->conv && !gc_dev_info(dev)->host_memory) { /* uploaded: the host copies can go */
    gc_weights_close(m->conv);
    m->conv = NULL;
  }
  if (rc) {
    gc_llama_free(m);
    return rc;
  }
  *out = m;
  return GC_OK;
}

void gc_llama_free(gc_llama_t *m) {
  if (!m) return;
  for (int i = 0; i < 2; i++) gc_dev_graph_destroy(m->dev, m->decode_graph[i]);
  for (int i = 0; i < m->nowned; i++) gc_dev_free(m->dev, m->owned[i]);
  free(m->owned);
  gc_weights_close(m->conv);
  free(m->layers);
  free(m);
}

const gc_llama_config_t *gc_llama_config(const gc_llama_t *m) { return &m->cfg; }
int gc_llama_pos(const gc_llama_t *m) { return m->npos; }

void gc_llama_set_graphs(gc_llama_t *m, int on) { m->graphs = on; }
void gc_llama_set_profile(gc_llama_t *m, gc_prof_t *p) { m->prof = p; }
gc_prof_t *gc_llama_profile(const gc_llama_t *m) { return m->prof; }
void gc_llama_reset(gc_llama_t *m) { m->npos = 0; }
int64_t gc_llama_graph_replays(const gc_llama_t *m) { return m->replays; }

/* ---- the forward ---------------------------------------------------------- */

static int run(gc_llama_t *m, const gc_problem_t *p, const gc_op_scalars_t *sc,
               const gc_dptr_t *bufs, gc_err_t *e) {
  const gc_rt_kernel_t *k;
  gc_argpack_t pk;
  if (gc_rt_find(m->rt, p, &k, e)) return e->code;
  gc_op_args(p, sc, bufs, &pk);
  if (!m->prof) return gc_rt_launch(m->rt, k, p, pk.args, e);
  double flops, bytes;
  gc_op_work(p, sc, &flops, &bytes);
  if (gc_prof_begin(m->prof, e) || gc_rt_launch(m->rt, k, p, pk.args, e)) return e->code;
  return gc_prof_end(m->prof, k->d.template_name, p, flops, bytes, e);
}

static int layer(gc_llama_t *m, const gc_llama_steps_t *s, const layer_dev_t *L, gc_err_t *e) {
  gc_op_scalars_t sc = {(float)m->cfg.rms_norm_eps, m->npos,
                        m->cfg.rope_layout == GC_ROPE_PAIRS ? 1 : 0,
                        (float)(1.0 / sqrt((double)m->cfg.head_dim))};
  const gc_dptr_t norm1[] = {m->x, L->attn_norm, m->xn}, qkv[] = {m->xn, L->wqkv, m->qkv},
                  fqkv[] = {m->x, L->wqkv, m->qkv, L->attn_norm},
                  rope[] = {m->qkv, m->q, L->kc, L->vc, m->inv_freq, m->pos},
                  attn[] = {m->q, L->kc, L->vc, m->att, m->pos}, wo[] = {m->att, L->wo, m->x},
                  norm2[] = {m->x, L->ffn_norm, m->xn}, ffn[] = {m->xn, L->w13, m->hb},
                  fffn[] = {m->x, L->w13, m->hb, L->ffn_norm}, w2[] = {m->hb, L->w2, m->x};
  if (s->fused ? run(m, &s->qkv, &sc, fqkv, e)
               : run(m, &s->norm, &sc, norm1, e) || run(m, &s->qkv, &sc, qkv, e))
    return e->code;
  if (run(m, &s->rope, &sc, rope, e) || run(m, &s->attn, &sc, attn, e) ||
      run(m, &s->wo, &sc, wo, e))
    return e->code;
  if (s->fused ? run(m, &s->swiglu, &sc, fffn, e)
               : run(m, &s->norm, &sc, norm2, e) || run(m, &s->swiglu, &sc, ffn, e))
    return e->code;
  return run(m, &s->w2, &sc, w2, e);
}

/* Logits in the activation dtype, as fp32 on the host. The fp32 buffer
 * doubles as the staging area: narrow values are expanded from its end. */
static int download_logits(gc_llama_t *m, float *out, size_t n, gc_err_t *e) {
  size_t es = gc_dtype_size(m->dt.act);
  if (m->dt.act == GC_DT_F32) return gc_dev_download(m->dev, out, m->logits, n * 4, e);
  unsigned char *stage = (unsigned char *)out + n * (4 - es);
  if (gc_dev_download(m->dev, stage, m->logits, n * es, e)) return e->code;
  for (size_t i = 0; i < n; i++) out[i] = (float)gc_load_elem(stage, m->dt.act, (int64_t)i);
  return GC_OK;
}

int gc_llama_forward(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                     float *logits, gc_err_t *e) {
  return gc_llama_forward_ex(m, tokens, t, all_rows, logits, NULL, e);
}

/* Launch the whole forward of t tokens (rows of logits; with argmax, the
 * next id lands in tokens[0]). Everything it reads that changes between
 * steps (tokens, position) is in device memory, so a capture replays. */
static int launch_forward(gc_llama_t *m, int t, int rows, int argmax, gc_err_t *e) {
  gc_llama_steps_t s;
  gc_llama_steps(&m->cfg, &m->dt, t, rows, &s);
  gc_op_scalars_t sc = {(float)m->cfg.rms_norm_eps, m->npos, 0, 1.0f};
  size_t a = gc_dtype_size(m->dt.act);
  gc_dptr_t last = m->x + (gc_dptr_t)((size_t)(t - rows) * (size_t)m->cfg.dim * a);
  gc_dptr_t last_logits = m->logits + (gc_dptr_t)((size_t)(rows - 1) * m->cfg.vocab_size * a);
  const gc_dptr_t emb[] = {m->tokens, m->tok_emb, m->x}, fn[] = {last, m->norm, m->xn},
                  head[] = {m->xn, m->cls, m->logits}, fhead[] = {last, m->cls, m->logits, m->norm},
                  am[] = {last_logits, m->tokens};
  if (run(m, &s.embed, &sc, emb, e)) return e->code;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    gc_llama_layer_steps(&m->dt, l, &s); /* the layer's weight dtypes */
    if (layer(m, &s, &m->layers[l], e)) return e->code;
  }
  if (s.fused ? run(m, &s.head, &sc, fhead, e)
              : run(m, &s.fnorm, &sc, fn, e) || run(m, &s.head, &sc, head, e))
    return e->code;
  return argmax ? run(m, &s.argmax, &sc, am, e) : GC_OK;
}

/* A decode step as one graph replay, captured on first use. Returns
 * GC_EUNSUPPORTED (and turns graphs off) where the backend has none. */
static int replay_decode(gc_llama_t *m, int argmax, gc_err_t *e) {
  gc_graph_t **g = &m->decode_graph[argmax];
  if (!*g) {
    gc_err_t probe = {0};
    if (gc_dev_graph_begin(m->dev, &probe)) {
      m->graphs = 0;
      return GC_EUNSUPPORTED;
    }
    int rc = launch_forward(m, 1, 1, argmax, e);
    gc_graph_t *made = NULL;
    int rc2 = gc_dev_graph_end(m->dev, &made, rc ? NULL : e);
    if (rc || rc2) {
      gc_dev_graph_destroy(m->dev, made);
      return rc ? rc : rc2;
    }
    *g = made;
  }
  return gc_dev_graph_launch(m->dev, *g, e);
}

int gc_llama_forward_ex(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                        float *logits, int32_t *next, gc_err_t *e) {
  if (t < 1 || t > m->max_t)
    return gc_err_set(e, GC_EINVAL, "%d tokens in one pass; this model was set up for at most %d",
                      t, m->max_t);
  if (m->npos + t > m->ctx)
    return gc_err_set(e, GC_EINVAL, "context full: %d + %d tokens exceed --ctx %d", m->npos, t,
                      m->ctx);
  int32_t stage[1 + 4096];
  int32_t *step = t < 4096 ? stage : gc_malloc((size_t)(t + 1) * sizeof *step, e);
  if (!step) return GC_ENOMEM;
  int rc = GC_OK;
  step[0] = m->npos;
  for (int i = 0; i < t && !rc; i++) {
    if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
      rc = gc_err_set(e, GC_EINVAL, "token id %d is outside the vocabulary [0, %d)",
                      (int)tokens[i], m->cfg.vocab_size);
    step[1 + i] = tokens[i];
  }
  int rows = all_rows ? t : 1;
  double t0 = gc_now();
  if (m->prof) gc_prof_phase(m->prof, t > 1 ? "prefill" : "decode");
  if (!rc) rc = gc_dev_upload(m->dev, m->step, step, (size_t)(t + 1) * sizeof *step, e);
  if (step != stage) free(step);
  if (rc) return rc;
  rc = GC_EUNSUPPORTED;
  if (t == 1 && rows == 1 && m->graphs && !m->prof) {
    rc = replay_decode(m, next != NULL, e);
    m->replays += rc == GC_OK;
  }
  if (rc == GC_EUNSUPPORTED) rc = launch_forward(m, t, rows, next != NULL, e);
  if (rc) return rc;
  if (next) { /* greedy on the device: one id comes back, not the logits */
    if (gc_dev_sync(m->dev, e) || gc_dev_download(m->dev, next, m->tokens, sizeof *next, e))
      return e->code;
  } else if (gc_dev_sync(m->dev, e) ||
             download_logits(m, logits, (size_t)rows * m->cfg.vocab_size, e)) {
    return e->code;
  }
  if (m->prof && gc_prof_collect(m->prof, gc_now() - t0, e)) return e->code;
  m->npos += t;
  return GC_OK;
}

