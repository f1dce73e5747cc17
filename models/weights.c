/* weights.c — fills gc_llama_weights_t from a Hugging Face directory or a
 * llama2.c file. HF tensors are looked up by their transformers names and
 * checked against the config's shapes; llama2.c arrays are sliced per
 * layer. Tensors whose file offset is not aligned to their element size
 * (legal in safetensors) are copied once so that every pointer is aligned. */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --------------------------------------------------------------- common */

static gc_weight_t *w_layer_field(gc_llama_layer_weights_t *l, int k) {
  gc_weight_t *f[GC_LLAMA_LAYER_TENSORS] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo,
                                            &l->ffn_norm,  &l->w1, &l->w2, &l->w3};
  return f[k];
}

/* Shape the config implies for layer tensor k: rows, cols (cols 0 = 1-D). */
static void w_layer_shape(const gc_llama_config_t *c, int k, int64_t *r, int64_t *cols) {
  int64_t D = c->dim, F = c->hidden_dim, Q = (int64_t)c->n_heads * c->head_dim,
          KV = (int64_t)c->n_kv_heads * c->head_dim;
  const int64_t s[GC_LLAMA_LAYER_TENSORS][2] = {{D, 0}, {Q, D}, {KV, D}, {KV, D}, {D, Q},
                                                {D, 0}, {F, D}, {D, F}, {F, D}};
  *r = s[k][0];
  *cols = s[k][1];
}

static int w_alloc(const gc_llama_config_t *c, gc_llama_weights_t **out, gc_err_t *e) {
  gc_llama_weights_t *w = gc_calloc(1, sizeof *w, e);
  if (!w) return GC_ENOMEM;
  w->cfg = *c;
  w->layers = gc_calloc((size_t)c->n_layers, sizeof *w->layers, e);
  if (!w->layers) {
    free(w);
    return GC_ENOMEM;
  }
  *out = w;
  return GC_OK;
}

static void w_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Record the dtype summary once every tensor is bound. */
static void w_summarize(gc_llama_weights_t *w) {
  if (w->cfg.n_layers > 0) w->cfg.weight_dtype = w->layers[0].wq.dtype;
  w->mixed_dtypes = 0;
  for (size_t i = 0; i < gc_weights_count(w); i++)
    if (gc_weights_at(w, i)->dtype != w->cfg.weight_dtype) w->mixed_dtypes = 1;
}

/* ------------------------------------------------------------------ HF */

/* Keep an aligned heap copy of t's bytes; returns NULL on ENOMEM. */
static const void *w_aligned_copy(gc_llama_weights_t *w, const gc_st_tensor_t *t, gc_err_t *e) {
  void **nc = gc_realloc(w->copies, (w->n_copies + 1) * sizeof *w->copies, e);
  if (!nc) return NULL;
  w->copies = nc;
  void *p = gc_malloc(t->nbytes, e);
  if (!p) return NULL;
  memcpy(p, t->data, t->nbytes);
  w->copies[w->n_copies++] = p;
  return p;
}

/* Bind dst to tensor `name` of w->st, which must have shape [r] (c == 0)
 * or [r, c] and a dtype gcore computes with. */
static int w_bind_hf(gc_llama_weights_t *w, gc_weight_t *dst, const char *name, int64_t r, int64_t c,
                     gc_err_t *e) {
  const gc_st_tensor_t *t;
  int rc = gc_st_get(w->st, name, &t, e);
  if (rc == GC_ENOTFOUND)
    return gc_err_set(e, GC_ENOTFOUND, "%s: tensor missing from %s", name, gc_st_path(w->st));
  if (rc) return rc;
  int ndim = c ? 2 : 1;
  int64_t want[2] = {r, c};
  if (t->ndim != ndim || t->shape[0] != r || (ndim == 2 && t->shape[1] != c)) {
    char got[160], exp[64];
    w_shape_str(t->ndim, t->shape, got, sizeof got);
    w_shape_str(ndim, want, exp, sizeof exp);
    return gc_err_set(e, GC_ECORRUPT, "%s: shape %s but the config implies %s", name, got, exp);
  }
  snprintf(dst->name, sizeof dst->name, "%s", name);
  dst->dtype = t->dtype;
  dst->ndim = ndim;
  dst->shape[0] = r;
  dst->shape[1] = ndim == 2 ? c : 0;
  dst->nbytes = t->nbytes;
  dst->data = t->data;
  if ((uintptr_t)t->data % gc_st_dtype_size(t->dtype) != 0) {
    dst->data = w_aligned_copy(w, t, e);
    if (!dst->data) return GC_ENOMEM;
  }
  return GC_OK;
}

static const char *const w_hf_layer_names[GC_LLAMA_LAYER_TENSORS] = {
    "input_layernorm",      "self_attn.q_proj", "self_attn.k_proj",
    "self_attn.v_proj",     "self_attn.o_proj", "post_attention_layernorm",
    "mlp.gate_proj",        "mlp.down_proj",    "mlp.up_proj",
};

/* Whether any tensor of layer l ("model.layers.L.") is in st. */
static int w_hf_has_layer(const gc_st_t *st, int l) {
  char pre[48];
  int n = snprintf(pre, sizeof pre, "model.layers.%d.", l);
  for (size_t i = 0; i < gc_st_count(st); i++)
    if (!strncmp(gc_st_at(st, i)->name, pre, (size_t)n)) return 1;
  return 0;
}

static int w_fill_hf(gc_llama_weights_t *w, gc_err_t *e) {
  const gc_llama_config_t *c = &w->cfg;
  int rc = w_bind_hf(w, &w->tok_embeddings, "model.embed_tokens.weight", c->vocab_size, c->dim, e);
  for (int l = 0; !rc && l < c->n_layers; l++) {
    for (int k = 0; !rc && k < GC_LLAMA_LAYER_TENSORS; k++) {
      char name[96];
      int64_t r, cols;
      snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, w_hf_layer_names[k]);
      w_layer_shape(c, k, &r, &cols);
      rc = w_bind_hf(w, w_layer_field(&w->layers[l], k), name, r, cols, e);
      if (rc == GC_ENOTFOUND && !w_hf_has_layer(w->st, l)) /* more layers than the weights */
        gc_err_set(e, GC_ENOTFOUND, "%s: config.json has num_hidden_layers %d, but the weights "
                   "have no layer %d (first missing tensor '%s')", gc_st_path(w->st), c->n_layers,
                   l, name);
    }
  }
  if (!rc) rc = w_bind_hf(w, &w->norm, "model.norm.weight", c->dim, 0, e);
  if (rc) return rc;
  if (c->tie_word_embeddings) {
    w->classifier = w->tok_embeddings;
    return GC_OK;
  }
  rc = w_bind_hf(w, &w->classifier, "lm_head.weight", c->vocab_size, c->dim, e);
  if (rc == GC_ENOTFOUND && e)
    gc_err_set(e, GC_ENOTFOUND, "lm_head.weight: tensor missing from %s (config.json has tie_word_embeddings false)",
               gc_st_path(w->st));
  return rc;
}

/* Tensors of a checkpoint that hold no weight gcore would need: the
 * rotary inverse frequencies some exports keep, per layer ("REST" of
 * model.layers.N.REST) or once for the model (gcore computes them from
 * rope_theta and rope_scaling). */
static int w_hf_ignorable(const char *rest) { return !strcmp(rest, "self_attn.rotary_emb.inv_freq"); }
static int w_hf_ignorable_top(const char *name) { return !strcmp(name, "model.rotary_emb.inv_freq"); }

/* Layer number and the rest of a "model.layers.N.REST" name, or -1. */
static long w_hf_layer_of(const char *name, const char **rest) {
  const char *pre = "model.layers.";
  if (strncmp(name, pre, strlen(pre))) return -1;
  char *end;
  const char *p = name + strlen(pre);
  if (*p < '0' || *p > '9') return -1;
  long l = strtol(p, &end, 10);
  if (*end != '.' || l < 0) return -1;
  *rest = end + 1;
  return l;
}

/* A tied config: an lm_head.weight in the file must be a copy of the
 * embedding (some exports save both), or the two disagree. */
static int w_hf_check_tied(gc_llama_weights_t *w, const gc_st_tensor_t *t, gc_err_t *e) {
  const gc_weight_t *emb = &w->tok_embeddings;
  if (t->dtype == emb->dtype && t->nbytes == emb->nbytes && t->ndim == 2 &&
      t->shape[0] == emb->shape[0] && t->shape[1] == emb->shape[1] &&
      !memcmp(t->data, emb->data, t->nbytes))
    return GC_OK;
  return gc_err_set(e, GC_ECORRUPT, "%s: config.json has tie_word_embeddings true, but the weights "
                    "hold an lm_head.weight that is not a copy of model.embed_tokens.weight "
                    "(set tie_word_embeddings false to use it)", gc_st_path(w->st));
}

/* Every tensor of the checkpoint is one the config accounts for: a layer
 * past num_hidden_layers, or any tensor gcore would silently ignore (a
 * bias, a weight of another architecture), means config.json describes
 * another model than its weights. The first such tensor (in name order,
 * lowest layer first) is named. */
static int w_hf_check_unused(gc_llama_weights_t *w, gc_err_t *e) {
  const gc_llama_config_t *c = &w->cfg;
  const gc_st_tensor_t *first_layer = NULL, *first_other = NULL;
  long low = -1;
  for (size_t i = 0; i < gc_st_count(w->st); i++) {
    const gc_st_tensor_t *t = gc_st_at(w->st, i);
    const char *rest = NULL;
    long l = w_hf_layer_of(t->name, &rest);
    if (l >= c->n_layers) {
      if (!first_layer || l < low) first_layer = t, low = l;
      continue;
    }
    if (l >= 0) {
      int known = w_hf_ignorable(rest);
      for (int k = 0; !known && k < GC_LLAMA_LAYER_TENSORS; k++) {
        size_t n = strlen(w_hf_layer_names[k]);
        known = !strncmp(rest, w_hf_layer_names[k], n) && !strcmp(rest + n, ".weight");
      }
      if (!known && !first_other) first_other = t;
      continue;
    }
    if (!strcmp(t->name, "model.embed_tokens.weight") || !strcmp(t->name, "model.norm.weight") ||
        w_hf_ignorable_top(t->name))
      continue;
    if (!strcmp(t->name, "lm_head.weight")) {
      if (c->tie_word_embeddings && w_hf_check_tied(w, t, e)) return e->code;
      continue;
    }
    if (!first_other) first_other = t;
  }
  if (first_layer)
    return gc_err_set(e, GC_ECORRUPT, "%s: config.json has num_hidden_layers %d, but the weights "
                      "have layer %ld (first unexpected tensor %s)", gc_st_path(w->st),
                      c->n_layers, low, GC_QUOTED(first_layer->name));
  if (first_other)
    return gc_err_set(e, GC_ECORRUPT, "%s: unexpected tensor %s: config.json describes no weight "
                      "of that name (a feature gcore does not implement, or another model's "
                      "config)", gc_st_path(w->st), GC_QUOTED(first_other->name));
  return GC_OK;
}

int gc_weights_open_hf(const char *dir, gc_llama_weights_t **out, gc_err_t *e) {
  *out = NULL;
  gc_llama_config_t cfg;
  int rc = gc_llama_config_load_hf(dir, &cfg, e);
  if (rc) return rc;
  gc_llama_weights_t *w;
  if ((rc = w_alloc(&cfg, &w, e))) return rc;
  rc = gc_st_open(dir, &w->st, e);
  if (!rc) rc = w_fill_hf(w, e);
  if (!rc) rc = w_hf_check_unused(w, e);
  if (rc) {
    gc_weights_close(w);
    return rc;
  }
  w_summarize(w);
  *out = w;
  return GC_OK;
}

/* ------------------------------------------------------------ llama2.c */

static const char *const w_meta_layer_names[GC_LLAMA_LAYER_TENSORS] = {
    "attention_norm", "attention.wq",    "attention.wk",    "attention.wv",   "attention.wo",
    "ffn_norm",       "feed_forward.w1", "feed_forward.w2", "feed_forward.w3",
};

static void w_bind_f32(gc_weight_t *dst, const char *name, const float *p, int64_t r, int64_t c) {
  snprintf(dst->name, sizeof dst->name, "%s", name);
  dst->dtype = GC_ST_F32;
  dst->ndim = c ? 2 : 1;
  dst->shape[0] = r;
  dst->shape[1] = c;
  dst->data = p;
  dst->nbytes = (size_t)(r * (c ? c : 1)) * sizeof(float);
}

static void w_fill_llama2c(gc_llama_weights_t *w) {
  const gc_llama2c_t *m = w->l2c;
  const gc_llama_config_t *c = &w->cfg;
  const float *base[GC_LLAMA_LAYER_TENSORS] = {m->rms_att, m->wq, m->wk, m->wv, m->wo,
                                               m->rms_ffn, m->w1, m->w2, m->w3};
  w_bind_f32(&w->tok_embeddings, "tok_embeddings.weight", m->token_embedding, c->vocab_size, c->dim);
  for (int k = 0; k < GC_LLAMA_LAYER_TENSORS; k++) {
    int64_t r, cols;
    w_layer_shape(c, k, &r, &cols);
    int64_t per_layer = r * (cols ? cols : 1);
    for (int l = 0; l < c->n_layers; l++) {
      char name[96];
      snprintf(name, sizeof name, "layers.%d.%s.weight", l, w_meta_layer_names[k]);
      w_bind_f32(w_layer_field(&w->layers[l], k), name, base[k] + (int64_t)l * per_layer, r, cols);
    }
  }
  w_bind_f32(&w->norm, "norm.weight", m->rms_final, c->dim, 0);
  if (c->tie_word_embeddings)
    w->classifier = w->tok_embeddings;
  else
    w_bind_f32(&w->classifier, "output.weight", m->wcls, c->vocab_size, c->dim);
}

int gc_weights_open_llama2c(const char *path, gc_llama_weights_t **out, gc_err_t *e) {
  *out = NULL;
  gc_llama2c_t *m;
  int rc = gc_llama2c_open(path, &m, e);
  if (rc) return rc;
  gc_llama_weights_t *w;
  if ((rc = w_alloc(&m->cfg, &w, e))) {
    gc_llama2c_close(m);
    return rc;
  }
  w->l2c = m;
  w_fill_llama2c(w);
  w_summarize(w);
  *out = w;
  return GC_OK;
}

/* ----------------------------------------------------------------- API */

int gc_weights_open(const char *path, gc_llama_weights_t **out, gc_err_t *e) {
  *out = NULL;
  struct stat sb;
  if (!path || stat(path, &sb) != 0)
    return gc_err_set(e, GC_ENOTFOUND, "%s: no such model directory or llama2.c file", path ? path : "(null)");
  if (S_ISDIR(sb.st_mode)) return gc_weights_open_hf(path, out, e);
  return gc_weights_open_llama2c(path, out, e);
}

void gc_weights_close(gc_llama_weights_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_copies; i++) free(w->copies[i]);
  free(w->copies);
  free(w->layers);
  gc_st_close(w->st);
  gc_llama2c_close(w->l2c);
  free(w);
}

size_t gc_weights_count(const gc_llama_weights_t *w) {
  return w ? 3 + (size_t)GC_LLAMA_LAYER_TENSORS * (size_t)w->cfg.n_layers : 0;
}

const gc_weight_t *gc_weights_at(const gc_llama_weights_t *w, size_t i) {
  size_t n = gc_weights_count(w);
  if (i >= n) return NULL;
  if (i == 0) return &w->tok_embeddings;
  if (i == n - 2) return &w->norm;
  if (i == n - 1) return &w->classifier;
  i -= 1;
  return w_layer_field(&w->layers[i / GC_LLAMA_LAYER_TENSORS], (int)(i % GC_LLAMA_LAYER_TENSORS));
}

uint64_t gc_weights_bytes(const gc_llama_weights_t *w) {
  uint64_t n = 0;
  size_t cnt = gc_weights_count(w);
  for (size_t i = 0; i < cnt; i++) {
    const gc_weight_t *t = gc_weights_at(w, i);
    if (t == &w->classifier && t->data == w->tok_embeddings.data) continue;
    n += t->nbytes;
  }
  return n;
}
