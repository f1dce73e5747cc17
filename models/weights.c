/* weights.c — fills gc_llama_weights_t from a Hugging Face directory, a
 * GGUF file or a llama2.c file. HF and GGUF tensors are looked up by name
 * and checked against the config's shapes; llama2.c arrays are sliced per
 * layer. Tensors whose file offset is not aligned to their element size
 * (legal in safetensors) are copied once so that every pointer is aligned.
 * Also: quantizing the matrices on load, and converting tensors to the
 * dtypes a forward pass computes in (gc_weights_as). */
#include "weights.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/quant.h"

/* --------------------------------------------------------------- common */

/* Matrices of a layer (fields of gc_llama_layer_weights_t, in order). */
static const int w_matrices[7] = {1, 2, 3, 4, 6, 7, 8};

/* The layer tensors a model may have, in gc_weights_at's order: the nine
 * every model has (gc_llama_layer_weights_t's first fields), Qwen2's q/k/v
 * biases, Qwen3's q and k norms. A tensor's name in a file is
 * "model.layers.N." + hf + "." + suffix or "blk.N." + gguf + "." + suffix. */
enum { W_ALL, W_BIAS, W_QKNORM };
static const struct w_field {
  const char *hf, *gguf, *suffix;
  int when;
} w_fields[] = {
    {"input_layernorm", "attn_norm", "weight", W_ALL},
    {"self_attn.q_proj", "attn_q", "weight", W_ALL},
    {"self_attn.k_proj", "attn_k", "weight", W_ALL},
    {"self_attn.v_proj", "attn_v", "weight", W_ALL},
    {"self_attn.o_proj", "attn_output", "weight", W_ALL},
    {"post_attention_layernorm", "ffn_norm", "weight", W_ALL},
    {"mlp.gate_proj", "ffn_gate", "weight", W_ALL},
    {"mlp.down_proj", "ffn_down", "weight", W_ALL},
    {"mlp.up_proj", "ffn_up", "weight", W_ALL},
    {"self_attn.q_proj", "attn_q", "bias", W_BIAS},
    {"self_attn.k_proj", "attn_k", "bias", W_BIAS},
    {"self_attn.v_proj", "attn_v", "bias", W_BIAS},
    {"self_attn.q_norm", "attn_q_norm", "weight", W_QKNORM},
    {"self_attn.k_norm", "attn_k_norm", "weight", W_QKNORM},
};
#define W_FIELDS ((int)GC_ARRAY_LEN(w_fields))

static gc_weight_t *w_layer_field(gc_llama_layer_weights_t *l, int f) {
  gc_weight_t *p[W_FIELDS] = {&l->attn_norm, &l->wq, &l->wk, &l->wv, &l->wo, &l->ffn_norm, &l->w1,
                              &l->w2,        &l->w3, &l->bq, &l->bk, &l->bv, &l->q_norm, &l->k_norm};
  return p[f];
}

/* Shape the config implies for layer field f: rows, cols (cols 0 = 1-D). */
static void w_layer_shape(const gc_llama_config_t *c, int f, int64_t *r, int64_t *cols) {
  int64_t D = c->dim, F = c->hidden_dim, HD = c->head_dim, Q = (int64_t)c->n_heads * HD,
          KV = (int64_t)c->n_kv_heads * HD;
  const int64_t s[W_FIELDS][2] = {{D, 0}, {Q, D}, {KV, D}, {KV, D}, {D, Q},   {D, 0},  {F, D},
                                  {D, F}, {F, D}, {Q, 0},  {KV, 0}, {KV, 0}, {HD, 0}, {HD, 0}};
  *r = s[f][0];
  *cols = s[f][1];
}

/* Whether c's model has layer field f. */
static int w_has(const gc_llama_config_t *c, int f) {
  int when = w_fields[f].when;
  return when == W_ALL || (when == W_BIAS && c->qkv_bias) || (when == W_QKNORM && c->qk_norm);
}

/* The field of c's k-th layer tensor (gc_weights_at's order). */
static int w_field(const gc_llama_config_t *c, int k) {
  for (int f = 0; f < W_FIELDS; f++)
    if (w_has(c, f) && k-- == 0) return f;
  return -1;
}

int gc_weights_layer_count(const gc_llama_config_t *c) {
  int n = 0;
  for (int f = 0; f < W_FIELDS; f++) n += w_has(c, f);
  return n;
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

/* n bytes of heap owned by w, 64-byte aligned (so that the CPU device
 * uses them in place); NULL on ENOMEM. */
static void *w_own(gc_llama_weights_t *w, size_t n, gc_err_t *e) {
  void **nc = gc_realloc(w->copies, (w->n_copies + 1) * sizeof *w->copies, e);
  if (!nc) return NULL;
  w->copies = nc;
  void *p = n <= SIZE_MAX - 64 ? gc_malloc(n + 64, e) : NULL;
  if (!p) return NULL;
  w->copies[w->n_copies++] = p;
  return (char *)p + (64 - (uintptr_t)p % 64) % 64;
}

/* Keep an aligned heap copy of n bytes at data; returns NULL on ENOMEM. */
static const void *w_aligned_copy(gc_llama_weights_t *w, const void *data, size_t n, gc_err_t *e) {
  void *p = w_own(w, n, e);
  if (p) memcpy(p, data, n);
  return p;
}

/* The i-th tensor of w in gc_weights_at's order, writable. */
static gc_weight_t *w_at(gc_llama_weights_t *w, size_t i) {
  size_t n = gc_weights_count(w);
  if (i >= n) return NULL;
  if (i == 0) return &w->tok_embeddings;
  if (i == n - 2) return &w->norm;
  if (i == n - 1) return &w->classifier;
  i -= 1;
  size_t per = (size_t)gc_weights_layer_count(&w->cfg);
  return w_layer_field(&w->layers[i / per], w_field(&w->cfg, (int)(i % per)));
}

/* Rows and row length of a tensor (a 1-D tensor is one row). */
static void w_rows(const gc_weight_t *t, int64_t *rows, int64_t *cols) {
  *rows = t->ndim == 2 ? t->shape[0] : 1;
  *cols = t->ndim == 2 ? t->shape[1] : t->shape[0];
}

/* ------------------------------------------------------------------ HF */

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
    dst->data = w_aligned_copy(w, t->data, t->nbytes, e);
    if (!dst->data) return GC_ENOMEM;
  }
  return GC_OK;
}


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
    for (int k = 0; !rc && k < gc_weights_layer_count(c); k++) {
      char name[96];
      int64_t r, cols;
      const int f = w_field(c, k);
      snprintf(name, sizeof name, "model.layers.%d.%s.%s", l, w_fields[f].hf, w_fields[f].suffix);
      w_layer_shape(c, f, &r, &cols);
      rc = w_bind_hf(w, w_layer_field(&w->layers[l], f), name, r, cols, e);
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
      for (int f = 0; !known && f < W_FIELDS; f++) {
        size_t n = strlen(w_fields[f].hf);
        known = w_has(c, f) && !strncmp(rest, w_fields[f].hf, n) && rest[n] == '.' &&
                !strcmp(rest + n + 1, w_fields[f].suffix);
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

/* ---------------------------------------------------------------- GGUF */


static int w_convert(gc_llama_weights_t *w, const gc_weight_t *src, uint32_t foreign, gc_weight_t *dst, gc_err_t *e);

/* dst (name and shape set, bound to GGUF tensor t, whose type gcore has no
 * kernels for: gc_quant_ggml_foreign) becomes t's values dequantized and
 * rounded to F16 once, in memory owned by w (w_convert's threads); the
 * type is counted in w's note. GC_EUNSUPPORTED where a value is beyond
 * F16's range. */
static int w_dense_at_load(gc_llama_weights_t *w, gc_weight_t *dst, const gc_gguf_tensor_t *t, gc_err_t *e) {
  gc_weight_t src = *dst;
  src.dtype = GC_ST_OTHER;
  src.data = t->data;
  src.nbytes = (size_t)t->nbytes;
  dst->dtype = GC_ST_F16;
  int rc = w_convert(w, &src, t->type, dst, e);
  if (rc) return rc;
  w->dense_at_load++;
  if (!strstr(w->dense_types, t->type_name) && strlen(w->dense_types) + strlen(t->type_name) + 3 < sizeof w->dense_types)
    snprintf(w->dense_types + strlen(w->dense_types), sizeof w->dense_types - strlen(w->dense_types), "%s%s",
             w->dense_types[0] ? ", " : "", t->type_name);
  return GC_OK;
}

/* Bind dst to GGUF tensor name, which must hold [r] (c == 0) or [r, c]
 * (GGUF writes dims innermost first: {c, r}) in a type gcore reads: one it
 * computes on, or one made F16 at load (w_dense_at_load). */
static int w_bind_gguf(gc_llama_weights_t *w, gc_weight_t *dst, const char *name, int64_t r, int64_t c,
                       gc_err_t *e) {
  const gc_gguf_tensor_t *t = gc_gguf_tensor(w->gguf, name);
  gc_qtype_t q;
  if (!t) return gc_err_set(e, GC_ENOTFOUND, "%s: tensor missing from %s", name, gc_gguf_path(w->gguf));
  const int foreign = gc_quant_ggml_foreign(t->type);
  if (gc_quant_from_ggml(t->type, &q) && !foreign)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: tensor type %s is not supported (gcore reads F32, F16, BF16, Q8_0, "
                      "Q4_0, Q4_K, Q5_K, Q6_K, and makes Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL and IQ4_XS F16 "
                      "at load)", name, t->type_name);
  int ndim = c ? 2 : 1;
  if (t->ndim != ndim || t->ne[0] != (c ? c : r) || (c && t->ne[1] != r))
    return gc_err_set(e, GC_ECORRUPT, "%s: dims {%lld, %lld}%s in GGUF order (row length first) but the config "
                      "implies {%lld%s%.0lld}", name, (long long)t->ne[0], (long long)t->ne[1],
                      t->ndim > 2 ? ", ..." : "", (long long)(c ? c : r), c ? ", " : "", (long long)(c ? r : 0));
  snprintf(dst->name, sizeof dst->name, "%s", name);
  if (foreign) {
    dst->ndim = ndim;
    dst->shape[0] = r;
    dst->shape[1] = c;
    return w_dense_at_load(w, dst, t, e);
  }
  dst->dtype = (gc_st_dtype_t)q;
  dst->ndim = ndim;
  dst->shape[0] = r;
  dst->shape[1] = c;
  dst->data = t->data;
  dst->nbytes = (size_t)t->nbytes;
  size_t es = gc_st_dtype_size(dst->dtype);
  if (es && (uintptr_t)t->data % es != 0 && !(dst->data = w_aligned_copy(w, t->data, dst->nbytes, e)))
    return GC_ENOMEM;
  return GC_OK;
}

/* 1 if name is a tensor of the model of config c gcore runs (its
 * layers, its biases), spelt as gcore binds it ("blk.3.attn_q.weight",
 * not "blk.03..."). */
static int w_gguf_known(gc_gguf_str_t name, const gc_llama_config_t *c) {
  const int n = c->n_layers;
  static const char *const top[] = {"token_embd.weight", "output_norm.weight", "output.weight", "rope_freqs.weight"};
  const char *p = name.p, *end = name.p + name.n;
  for (size_t i = 0; i < GC_ARRAY_LEN(top); i++)
    if (name.n == strlen(top[i]) && !memcmp(p, top[i], (size_t)name.n)) return 1;
  if (name.n < 5 || memcmp(p, "blk.", 4)) return 0;
  long l = 0;
  const char *d = p + 4;
  for (; d < end && *d >= '0' && *d <= '9' && d - p < 12; d++) l = l * 10 + (*d - '0');
  if (d == p + 4 || (p[4] == '0' && d > p + 5) || d >= end || *d != '.' || l >= n) return 0;
  size_t rest = (size_t)(end - d - 1);
  for (int f = 0; f < W_FIELDS; f++) {
    size_t kn = strlen(w_fields[f].gguf), sn = strlen(w_fields[f].suffix);
    if (w_has(c, f) && rest == kn + 1 + sn && !memcmp(d + 1, w_fields[f].gguf, kn) && d[1 + kn] == '.' &&
        !memcmp(d + 2 + kn, w_fields[f].suffix, sn))
      return 1;
  }
  return 0;
}

static int w_fill_gguf(gc_llama_weights_t *w, gc_err_t *e) {
  const gc_llama_config_t *c = &w->cfg;
  int rc = w_bind_gguf(w, &w->tok_embeddings, "token_embd.weight", c->vocab_size, c->dim, e);
  for (int l = 0; !rc && l < c->n_layers; l++) {
    for (int k = 0; !rc && k < gc_weights_layer_count(c); k++) {
      char name[96];
      int64_t r, cols;
      const int f = w_field(c, k);
      snprintf(name, sizeof name, "blk.%d.%s.%s", l, w_fields[f].gguf, w_fields[f].suffix);
      w_layer_shape(c, f, &r, &cols);
      rc = w_bind_gguf(w, w_layer_field(&w->layers[l], f), name, r, cols, e);
    }
  }
  if (!rc) rc = w_bind_gguf(w, &w->norm, "output_norm.weight", c->dim, 0, e);
  if (!rc && c->tie_word_embeddings) w->classifier = w->tok_embeddings;
  else if (!rc) rc = w_bind_gguf(w, &w->classifier, "output.weight", c->vocab_size, c->dim, e);
  /* a tensor gcore would not read changes the model (a llama's biases, experts, ...) */
  for (uint64_t i = 0; !rc && i < gc_gguf_tensor_count(w->gguf); i++) {
    gc_gguf_str_t n = gc_gguf_tensor_at(w->gguf, i)->name;
    if (!w_gguf_known(n, c))
      rc = gc_err_set(e, GC_EUNSUPPORTED, "%s: tensor %s is not part of a llama model as gcore runs it",
                      gc_gguf_path(w->gguf), gc_quote(n.p, (size_t)n.n, (char[GC_QUOTE_BUF]){0}, GC_QUOTE_BUF));
  }
  return rc;
}

int gc_weights_open_gguf(const char *path, gc_llama_weights_t **out, gc_err_t *e) {
  *out = NULL;
  gc_gguf_t *g;
  gc_llama_config_t cfg;
  gc_llama_weights_t *w;
  int rc = gc_gguf_open(path, &g, e);
  if (rc) return rc;
  if ((rc = gc_llama_config_from_gguf(g, &cfg, e)) || (rc = w_alloc(&cfg, &w, e))) {
    gc_gguf_close(g);
    return rc;
  }
  w->gguf = g;
  if ((rc = w_fill_gguf(w, e))) {
    gc_weights_close(w);
    return rc;
  }
  w_summarize(w);
  *out = w;
  return GC_OK;
}

int gc_weights_is_gguf(const char *path) {
  struct stat sb;
  char magic[4];
  if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int ok = read(fd, magic, 4) == 4 && !memcmp(magic, "GGUF", 4);
  close(fd);
  return ok;
}

/* ------------------------------------------------------- converting rows */

/* Rows [r0, r1) of src converted into dst's type, one float row at a time. */
typedef struct w_job {
  const gc_weight_t *src;
  gc_weight_t *dst;
  uint32_t foreign; /* src's ggml type where gcore has no kernels for it (dst is F16), else 0 */
  int64_t r0, r1, cols;
  float *tmp; /* [cols] */
  int rc;
  float beyond; /* foreign: a value F16 cannot hold (rc GC_EUNSUPPORTED) */
} w_job_t;

/* Bytes of a row of cols elements of src (ggml type foreign where nonzero),
 * 0 where they are not whole blocks. */
static uint64_t w_src_row_bytes(const gc_weight_t *src, uint32_t foreign, int64_t cols) {
  const char *nm;
  int blk, bytes;
  if (!foreign) return gc_quant_row_bytes(src->dtype, cols);
  if (gc_quant_ggml_info(foreign, &nm, &blk, &bytes) || cols <= 0 || cols % blk) return 0;
  return (uint64_t)(cols / blk) * (uint64_t)bytes;
}

/* A foreign row (w_job_t.foreign) dequantized into tmp and rounded to the
 * F16 halves at out; GC_EUNSUPPORTED where a finite value overflows. */
static int w_foreign_row(w_job_t *j, const uint8_t *in, uint16_t *out) {
  gc_quant_ggml_dequantize(j->foreign, in, j->tmp, j->cols);
  gc_quant_quantize(GC_QT_F16, j->tmp, out, j->cols, NULL);
  for (int64_t c = 0; c < j->cols; c++)
    if ((out[c] & 0x7c00) == 0x7c00 && j->tmp[c] == j->tmp[c] && (out[c] & 0x3ff) == 0) {
      j->beyond = j->tmp[c];
      return GC_EUNSUPPORTED;
    }
  return GC_OK;
}

static void *w_convert_rows(void *arg) {
  w_job_t *j = arg;
  size_t sb = (size_t)w_src_row_bytes(j->src, j->foreign, j->cols), db = (size_t)gc_quant_row_bytes(j->dst->dtype, j->cols);
  for (int64_t r = j->r0; r < j->r1 && !j->rc; r++) {
    const uint8_t *in = (const uint8_t *)j->src->data + (size_t)r * sb;
    uint8_t *out = (uint8_t *)j->dst->data + (size_t)r * db;
    if (j->foreign) {
      j->rc = w_foreign_row(j, in, (uint16_t *)out);
    } else if (j->dst->dtype == GC_ST_F32) {
      gc_quant_dequantize((gc_qtype_t)j->src->dtype, in, (float *)out, j->cols);
    } else if ((gc_qtype_t)j->dst->dtype == gc_quant_device_layout((gc_qtype_t)j->src->dtype)) {
      j->rc = gc_quant_repack((gc_qtype_t)j->src->dtype, (gc_qtype_t)j->dst->dtype, in, out, j->cols, NULL);
    } else {
      gc_quant_dequantize((gc_qtype_t)j->src->dtype, in, j->tmp, j->cols);
      j->rc = gc_quant_quantize((gc_qtype_t)j->dst->dtype, j->tmp, out, j->cols, NULL);
    }
  }
  return NULL;
}

/* dst (name, shape set; dtype set to the target) gets a copy of src in
 * dst->dtype, owned by w; rows are converted by up to 16 threads. foreign:
 * src's ggml type where it is one gcore has no kernels for (dst F16; its
 * dtype then unused), else 0. */
static int w_convert(gc_llama_weights_t *w, const gc_weight_t *src, uint32_t foreign, gc_weight_t *dst, gc_err_t *e) {
  int64_t rows, cols;
  w_rows(src, &rows, &cols);
  uint64_t rb = gc_quant_row_bytes(dst->dtype, cols);
  if (!rb || w_src_row_bytes(src, foreign, cols) * (uint64_t)rows != src->nbytes)
    return gc_err_set(e, GC_EINVAL, "%s: rows of %lld elements are not whole %s blocks of %d", src->name,
                      (long long)cols, gc_st_dtype_name(dst->dtype), gc_quant_format(dst->dtype)->block);
  dst->nbytes = (size_t)(rb * (uint64_t)rows);
  void *data = w_own(w, dst->nbytes, e);
  if (!data) return GC_ENOMEM;
  dst->data = data;
  int nt = gc_host_ncpu();
  nt = nt < 1 ? 1 : nt > 16 ? 16 : nt;
  if (rows * cols < (1 << 16) || rows < nt) nt = 1;
  w_job_t jobs[16];
  pthread_t th[16];
  int started = 0, rc = GC_OK;
  float *tmp = gc_malloc((size_t)nt * (size_t)cols * sizeof *tmp, e);
  if (!tmp) return GC_ENOMEM;
  for (int i = 0; i < nt; i++) {
    jobs[i] = (w_job_t){src, dst, foreign, rows * i / nt, rows * (i + 1) / nt, cols, tmp + (size_t)i * (size_t)cols,
                        GC_OK, 0.0f};
    if (i == nt - 1 || pthread_create(&th[i], NULL, w_convert_rows, &jobs[i]) != 0)
      w_convert_rows(&jobs[i]); /* the last share, or any a thread could not take */
    else
      started |= 1 << i;
  }
  for (int i = 0; i < nt; i++) {
    if (started >> i & 1) pthread_join(th[i], NULL);
    if (jobs[i].rc && !rc && foreign)
      rc = gc_err_set(e, jobs[i].rc, "%s: a value (%g) is beyond F16's range, to which gcore makes this tensor's "
                      "format at load", src->name, (double)jobs[i].beyond);
    else if (jobs[i].rc && !rc)
      rc = gc_err_set(e, jobs[i].rc, "%s: conversion to %s failed", src->name, gc_st_dtype_name(dst->dtype));
  }
  free(tmp);
  return rc;
}

void gc_weights_note(const gc_llama_weights_t *w, char *buf, size_t n) {
  if (!n) return;
  buf[0] = 0;
  if (w->dense_at_load)
    snprintf(buf, n, "%d tensor%s in %s (formats gcore has no kernels for) made F16 at load", w->dense_at_load,
             w->dense_at_load == 1 ? "" : "s", w->dense_types);
  size_t k = strlen(buf);
  if (w->cfg.note[0]) snprintf(buf + k, n - k, "%s%s", k ? "; " : "", w->cfg.note);
}

int gc_weights_quantized(const gc_llama_weights_t *w) {
  for (size_t i = 0; i < gc_weights_count(w); i++)
    if (gc_quant_is_block(gc_weights_at(w, i)->dtype)) return 1;
  return 0;
}

int gc_weights_quantize(gc_llama_weights_t *w, const char *type, gc_err_t *e) {
  gc_qtype_t q;
  if (gc_quant_parse(type, &q) || !gc_quant_is_block(q) || !gc_quant_format(q)->can_quantize ||
      gc_quant_format(q)->ggml_type == UINT32_MAX) /* a device layout: never asked for */
    return gc_err_set(e, GC_EINVAL, "--quantize: '%s' is not one of q8_0, q4_0, q4_k", type ? type : "");
  const gc_qformat_t *f = gc_quant_format(q);
  for (int l = 0; l < w->cfg.n_layers; l++)
    for (int k = 0; k < 7; k++) {
      gc_weight_t *t = w_layer_field(&w->layers[l], w_matrices[k]), src = *t;
      if (gc_quant_is_block(t->dtype))
        return gc_err_set(e, GC_EUNSUPPORTED, "--quantize %s: %s is already stored as %s", type, t->name,
                          gc_st_dtype_name(t->dtype));
      if (t->shape[1] % f->block)
        return gc_err_set(e, GC_EINVAL, "--quantize %s: %s has rows of %lld elements, not a multiple of %s's "
                          "block of %d", type, t->name, (long long)t->shape[1], f->name, f->block);
      t->dtype = (gc_st_dtype_t)q;
      int rc = w_convert(w, &src, 0, t, e);
      if (rc) {
        *t = src;
        return rc;
      }
    }
  w_summarize(w);
  return GC_OK;
}

int gc_weights_as(const gc_llama_weights_t *w, const gc_st_dtype_t *to, gc_llama_weights_t **out,
                  gc_err_t *e) {
  *out = NULL;
  size_t n = gc_weights_count(w), todo = 0;
  for (size_t i = 0; i < n; i++) {
    const gc_weight_t *t = gc_weights_at(w, i);
    if (t->dtype == to[i]) continue;
    int repack = gc_quant_is_block(t->dtype) && (gc_qtype_t)to[i] == gc_quant_device_layout((gc_qtype_t)t->dtype);
    if (!repack && (gc_quant_is_block(to[i]) || !gc_quant_format(to[i])))
      return gc_err_set(e, GC_EINVAL, "%s: no conversion from %s to %s (only to F32, F16, BF16 or the "
                        "format's device layout)", t->name, gc_st_dtype_name(t->dtype), gc_st_dtype_name(to[i]));
    todo++;
  }
  if (!todo) return GC_OK;
  gc_llama_weights_t *d;
  int rc = w_alloc(&w->cfg, &d, e);
  int tied = w->classifier.data == w->tok_embeddings.data;
  for (size_t i = 0; !rc && i < n; i++) {
    const gc_weight_t *src = gc_weights_at(w, i);
    gc_weight_t *dst = w_at(d, i);
    *dst = *src;
    if (tied && src == &w->classifier && to[i] == to[0]) *dst = d->tok_embeddings; /* shared, as in w */
    else if (src->dtype != to[i]) dst->dtype = to[i], rc = w_convert(d, src, 0, dst, e);
  }
  if (rc) {
    gc_weights_close(d);
    return rc;
  }
  w_summarize(d);
  *out = d;
  return GC_OK;
}

/* ------------------------------------------------------ tensor parallel */

/* Bytes of a row of src (its dtype's blocks, or elements). */
static size_t w_row_bytes(const gc_weight_t *src) { return (size_t)gc_quant_row_bytes(src->dtype, src->shape[1]); }

/* dst = rows [r0, r0 + n) of src: a view into src's data. */
static void w_row_slice(const gc_weight_t *src, int64_t r0, int64_t n, gc_weight_t *dst) {
  size_t row = w_row_bytes(src);
  *dst = *src;
  dst->shape[0] = n;
  dst->data = (const char *)src->data + (size_t)r0 * row;
  dst->nbytes = (size_t)n * row;
}

/* dst = elements [i0, i0 + n) of the 1-D src: a view into src's data. */
static void w_vec_slice(const gc_weight_t *src, int64_t i0, int64_t n, gc_weight_t *dst) {
  size_t es = gc_st_dtype_size(src->dtype);
  *dst = *src;
  dst->shape[0] = n;
  dst->data = (const char *)src->data + (size_t)i0 * es;
  dst->nbytes = (size_t)n * es;
}

/* dst = rows [r0, r0 + n) of src where all of them exist (a view);
 * else those that do, then zero rows up to n, copied into memory owned
 * by w (the last ranks' LM head where tp does not divide the vocabulary). */
static int w_row_slice_padded(gc_llama_weights_t *w, const gc_weight_t *src, int64_t r0, int64_t n,
                              gc_weight_t *dst, gc_err_t *e) {
  const int64_t left = src->shape[0] - r0, have = left < 0 ? 0 : left < n ? left : n; /* rows that exist */
  if (have == n) {
    w_row_slice(src, r0, n, dst);
    return GC_OK;
  }
  size_t row = w_row_bytes(src);
  char *p = w_own(w, (size_t)n * row, e);
  if (!p) return GC_ENOMEM;
  if (have > 0) memcpy(p, (const char *)src->data + (size_t)r0 * row, (size_t)have * row);
  memset(p + (size_t)have * row, 0, (size_t)(n - have) * row);
  *dst = *src;
  dst->shape[0] = n;
  dst->data = p;
  dst->nbytes = (size_t)n * row;
  return GC_OK;
}

/* dst = columns [c0, c0 + n) of src, copied into memory owned by w; in a
 * block format, c0 and n whole blocks (GC_EUNSUPPORTED otherwise: a rank's
 * columns would split a block's shared scale). */
static int w_col_slice(gc_llama_weights_t *w, const gc_weight_t *src, int64_t c0, int64_t n,
                       gc_weight_t *dst, gc_err_t *e) {
  size_t rows = (size_t)src->shape[0], in = w_row_bytes(src), out = (size_t)gc_quant_row_bytes(src->dtype, n),
         at = (size_t)gc_quant_row_bytes(src->dtype, c0);
  if (!out || (c0 && !at)) {
    const gc_qformat_t *f = gc_quant_format(src->dtype);
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: a rank's %lld columns (from %lld) are not whole %s blocks of %d",
                      src->name, (long long)n, (long long)c0, f ? f->name : "?", f ? f->block : 0);
  }
  char *p = w_own(w, rows * out, e);
  if (!p) return GC_ENOMEM;
  for (size_t r = 0; r < rows; r++) memcpy(p + r * out, (const char *)src->data + r * in + at, out);
  *dst = *src;
  dst->shape[1] = n;
  dst->data = p;
  dst->nbytes = rows * out;
  return GC_OK;
}

int gc_weights_check_split(const gc_llama_weights_t *w, int tp, gc_err_t *e) {
  const gc_llama_config_t *c = &w->cfg;
  if (tp <= 1) return GC_OK;
  const int64_t cols[2] = {(int64_t)c->n_heads * c->head_dim / tp, (int64_t)c->hidden_dim / tp};
  for (int l = 0; l < c->n_layers; l++) {
    const gc_weight_t *m[2] = {&w->layers[l].wo, &w->layers[l].w2};
    for (int i = 0; i < 2; i++) {
      const gc_qformat_t *f = gc_quant_format(m[i]->dtype);
      if (f && cols[i] % f->block)
        return gc_err_set(e, GC_EUNSUPPORTED, "--tp %d: %s splits into %lld columns a rank, not whole %s blocks of %d",
                          tp, m[i]->name, (long long)cols[i], f->name, f->block);
    }
  }
  return GC_OK;
}

/* Layer l of the shard: rank's heads and FFN rows (see weights.h). */
static int w_shard_layer(gc_llama_weights_t *d, const gc_llama_layer_weights_t *s, int rank,
                         gc_llama_layer_weights_t *L, gc_err_t *e) {
  const gc_llama_config_t *c = &d->cfg;
  int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim,
          f = c->hidden_dim;
  *L = *s; /* the norms stay whole */
  w_row_slice(&s->wq, rank * q, q, &L->wq);
  w_row_slice(&s->wk, rank * kv, kv, &L->wk);
  w_row_slice(&s->wv, rank * kv, kv, &L->wv);
  w_row_slice(&s->w1, rank * f, f, &L->w1);
  w_row_slice(&s->w3, rank * f, f, &L->w3);
  if (c->qkv_bias) { /* the biases of its heads' rows */
    w_vec_slice(&s->bq, rank * q, q, &L->bq);
    w_vec_slice(&s->bk, rank * kv, kv, &L->bk);
    w_vec_slice(&s->bv, rank * kv, kv, &L->bv);
  }
  if (w_col_slice(d, &s->wo, rank * q, q, &L->wo, e) || w_col_slice(d, &s->w2, rank * f, f, &L->w2, e))
    return e->code;
  return GC_OK;
}

int gc_weights_shard(const gc_llama_weights_t *w, const gc_llama_config_t *shard, int rank,
                     gc_llama_weights_t **out, gc_err_t *e) {
  *out = NULL;
  int tp = shard->tp > 1 ? shard->tp : 1;
  if (rank < 0 || rank >= tp) return gc_err_set(e, GC_EINVAL, "rank %d of %d ranks", rank, tp);
  if (gc_weights_check_split(w, tp, e)) return e->code;
  if (shard->n_heads * tp != w->cfg.n_heads || shard->n_kv_heads * tp != w->cfg.n_kv_heads ||
      shard->hidden_dim * tp != w->cfg.hidden_dim || shard->n_layers != w->cfg.n_layers)
    return gc_err_set(e, GC_EINVAL, "the shard config is not w's split over %d ranks", tp);
  gc_llama_weights_t *d;
  if (w_alloc(shard, &d, e)) return e->code;
  int64_t v = (w->cfg.vocab_size + tp - 1) / tp; /* recipe.h's gc_llama_head_rows: zero rows past the vocabulary */
  d->tok_embeddings = w->tok_embeddings; /* replicated (recipe.h says why) */
  d->norm = w->norm;
  int rc = w_row_slice_padded(d, &w->classifier, rank * v, v, &d->classifier, e);
  for (int l = 0; !rc && l < w->cfg.n_layers; l++) rc = w_shard_layer(d, &w->layers[l], rank, &d->layers[l], e);
  if (rc) {
    gc_weights_close(d);
    return rc;
  }
  d->mixed_dtypes = w->mixed_dtypes;
  *out = d;
  return GC_OK;
}

/* ----------------------------------------------------------------- API */

int gc_weights_open(const char *path, gc_llama_weights_t **out, gc_err_t *e) {
  *out = NULL;
  struct stat sb;
  if (!path || stat(path, &sb) != 0)
    return gc_err_set(e, GC_ENOTFOUND, "%s: no such model directory, GGUF or llama2.c file", path ? path : "(null)");
  if (S_ISDIR(sb.st_mode)) return gc_weights_open_hf(path, out, e);
  if (gc_weights_is_gguf(path)) return gc_weights_open_gguf(path, out, e);
  int rc = gc_weights_open_llama2c(path, out, e);
  const char *why = rc == GC_ECORRUPT ? strstr(e->msg, "llama2.c header: ") : NULL;
  if (why) { /* a header that makes no sense: likely no model at all, so say what was tried */
    char was[GC_ERR_MSG];
    snprintf(was, sizeof was, "%s", why + strlen("llama2.c header: "));
    gc_err_set(e, rc, "%s: neither a GGUF file (no GGUF magic) nor a llama2.c checkpoint (its header: %s)", path,
               was);
  }
  return rc;
}

void gc_weights_close(gc_llama_weights_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_copies; i++) free(w->copies[i]);
  free(w->copies);
  free(w->layers);
  gc_st_close(w->st);
  gc_llama2c_close(w->l2c);
  gc_gguf_close(w->gguf);
  free(w);
}

size_t gc_weights_count(const gc_llama_weights_t *w) {
  return w ? 3 + (size_t)gc_weights_layer_count(&w->cfg) * (size_t)w->cfg.n_layers : 0;
}

const gc_weight_t *gc_weights_at(const gc_llama_weights_t *w, size_t i) {
  return w_at((gc_llama_weights_t *)w, i); /* the view is not written */
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
