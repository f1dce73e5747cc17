/* weights.h — one view of a Llama model's weights, whatever file they came
 * from (a Hugging Face directory, a GGUF file or a llama2.c checkpoint):
 * per layer the nine named tensors, plus embedding, final norm and
 * classifier, each with its storage type (a float dtype or one of ggml's
 * block formats, base/quant.h), shape and a read-only host pointer. Every
 * tensor is checked against the shape the config implies before the view
 * is handed out. Matrices can be quantized on load (--quantize). */
#ifndef GC_MODELS_WEIGHTS_H
#define GC_MODELS_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "gguf.h"
#include "llama2c.h"
#include "llama_config.h"
#include "safetensors.h"

/* One weight tensor, row-major, y = W x for matrices. In a block format
 * each row is cols / block blocks (base/quant.h), rows one after another. */
typedef struct gc_weight {
  char name[96];       /* HF name ("model.layers.3.mlp.up_proj.weight"), GGUF's
                          ("blk.3.ffn_up.weight") or, for llama2.c, Meta's
                          ("layers.3.feed_forward.w3.weight") */
  gc_st_dtype_t dtype; /* F32, F16, BF16, or a block format (Q8_0 .. Q6_K) */
  int ndim;            /* 1 (norm weights) or 2 (matrices) */
  int64_t shape[2];    /* [n] or [rows = out_features, cols = in_features] */
  const void *data;    /* [nbytes] host memory, read-only, aligned to the
                          element size (block formats: unaligned bytes);
                          valid until gc_weights_close */
  size_t nbytes;
} gc_weight_t;

typedef struct gc_llama_layer_weights {
  gc_weight_t attn_norm; /* [dim]                        input_layernorm */
  gc_weight_t wq;        /* [n_heads * head_dim, dim]    q_proj */
  gc_weight_t wk;        /* [n_kv_heads * head_dim, dim] k_proj */
  gc_weight_t wv;        /* [n_kv_heads * head_dim, dim] v_proj */
  gc_weight_t wo;        /* [dim, n_heads * head_dim]    o_proj */
  gc_weight_t ffn_norm;  /* [dim]                        post_attention_layernorm */
  gc_weight_t w1;        /* [hidden_dim, dim]            gate_proj */
  gc_weight_t w2;        /* [dim, hidden_dim]            down_proj */
  gc_weight_t w3;        /* [hidden_dim, dim]            up_proj */
  /* cfg.qkv_bias only (Qwen2), 1-D; else zero */
  gc_weight_t bq;        /* [n_heads * head_dim]         q_proj.bias */
  gc_weight_t bk;        /* [n_kv_heads * head_dim]      k_proj.bias */
  gc_weight_t bv;        /* [n_kv_heads * head_dim]      v_proj.bias */
  /* cfg.qk_norm only (Qwen3), 1-D; else zero */
  gc_weight_t q_norm;    /* [head_dim]                   self_attn.q_norm, each query head's */
  gc_weight_t k_norm;    /* [head_dim]                   self_attn.k_norm, each key head's */
} gc_llama_layer_weights_t;

#define GC_LLAMA_LAYER_TENSORS 9 /* the fields of gc_llama_layer_weights_t every model has */

typedef struct gc_llama_weights {
  gc_llama_config_t cfg; /* rope_layout: PAIRS for llama2.c and GGUF, HALVES
                            for HF; weight_dtype: dtype of layer 0's wq */
  gc_weight_t tok_embeddings;       /* [vocab, dim] */
  gc_llama_layer_weights_t *layers; /* [n_layers] */
  gc_weight_t norm;                 /* [dim] final RMSNorm */
  gc_weight_t classifier;           /* [vocab, dim]; when tied, the same
                                       data as tok_embeddings */
  int mixed_dtypes;                 /* 1 if not all tensors share weight_dtype */
  int dense_at_load;                /* GGUF tensors in formats gcore has no kernels
                                       for, made F16 at load (base/quant.h) */
  char dense_types[64];             /* their types: "Q5_0, Q3_K" */
  /* private: what the pointers point into */
  gc_st_t *st;
  gc_llama2c_t *l2c;
  gc_gguf_t *gguf;
  void **copies; /* [n_copies] heap copies: unaligned tensors, quantized or
                    dense versions */
  size_t n_copies;
} gc_llama_weights_t;

/* Open a model: a directory is read as Hugging Face (config.json +
 * safetensors), a regular file starting with "GGUF" as GGUF (architecture
 * llama; tensors memory-mapped, F32/F16/BF16/Q8_0/Q4_0/Q4_K/Q5_K/Q6_K; Q4_1,
 * Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL and IQ4_XS dequantized to F16 copies;
 * architectures qwen2 and qwen3 too, with their q/k/v biases and norms),
 * any other file as a llama2.c checkpoint. On success *out is a view to
 * release with gc_weights_close. Errors carry the tensor's or file's name:
 * GC_ENOTFOUND (missing file or tensor), GC_ECORRUPT (bad file, wrong
 * shape: "model.layers.3.mlp.up_proj.weight: shape [64,172] but the config
 * implies [172,64]"), GC_EUNSUPPORTED (config feature, dtype or tensor
 * type, architecture), GC_EIO, GC_ENOMEM. */
int gc_weights_open(const char *path, gc_llama_weights_t **out, gc_err_t *e);
int gc_weights_open_hf(const char *dir, gc_llama_weights_t **out, gc_err_t *e);
int gc_weights_open_llama2c(const char *path, gc_llama_weights_t **out, gc_err_t *e);
int gc_weights_open_gguf(const char *path, gc_llama_weights_t **out, gc_err_t *e);

/* The line a tool prints after opening w where tensors were made F16 at
 * load ("12 tensors in Q5_0, Q3_K (formats gcore has no kernels for) made
 * F16 at load"), or "" where none were. */
void gc_weights_note(const gc_llama_weights_t *w, char *buf, size_t n);

/* 1 when path is a regular file that starts with the GGUF magic. */
int gc_weights_is_gguf(const char *path);

/* --quantize TYPE: store the seven matrices of every layer (wq wk wv wo w1
 * w2 w3) in TYPE ("q8_0", "q4_0" or "q4_k", any case) with llama.cpp's
 * reference quantizers; the embedding, the classifier and the norms keep
 * their precision. The quantized copies belong to w. Errors: GC_EINVAL (an
 * unknown TYPE; a matrix whose rows are not whole blocks, named),
 * GC_EUNSUPPORTED (a matrix already in a block format), GC_ENOMEM. */
int gc_weights_quantize(gc_llama_weights_t *w, const char *type, gc_err_t *e);

/* 1 when some tensor of w is in a block format. Can't fail. */
int gc_weights_quantized(const gc_llama_weights_t *w);

/* A view of w whose tensor i (gc_weights_at's order) is in dtype to[i]:
 * tensors already in it are shared with w (which must outlive *out), the
 * others converted into copies owned by *out: a block format dequantized
 * exactly (base/quant.h), repacked into its device layout (Q8_0 → Q8_0R,
 * Q4_0 → Q4_0R, Q4_K → Q4_KR, Q6_K → Q6_KR: the same bytes permuted) or a float type converted (F32
 * norms of a GGUF file beside F16 matrices), rounding to nearest even. A
 * tied classifier stays shared when it and the embedding get one dtype.
 * *out is NULL when every tensor is already in its dtype. Release with
 * gc_weights_close. Errors: GC_EINVAL (a target that is unknown or a block
 * format other than the source's device layout: the tensor named),
 * GC_ENOMEM. */
int gc_weights_as(const gc_llama_weights_t *w, const gc_st_dtype_t *to, gc_llama_weights_t **out,
                  gc_err_t *e);

/* A view of rank's shard of w for tensor parallelism: shard is w's config
 * split over shard->tp ranks (gc_llama_shard in recipe.h). Rank r holds
 * rows [r·n, (r+1)·n) of wq, wk, wv (its heads), w1, w3 (its FFN rows)
 * and the classifier (its gc_llama_head_rows vocabulary rows), views into
 * w; the same columns of wo and w2, and a classifier share that ends past
 * the vocabulary (its rows there zero), copies owned by *out. The embedding and the norms
 * are w's. w must outlive *out; release with gc_weights_close.
 * Errors: GC_EUNSUPPORTED (block-format wo or w2 whose rank's columns
 * would split blocks: gc_weights_check_split), GC_EINVAL (a rank out of range, a shard that is not w's
 * config split), GC_ENOMEM. */
int gc_weights_shard(const gc_llama_weights_t *w, const gc_llama_config_t *shard, int rank,
                     gc_llama_weights_t **out, gc_err_t *e);

/* Whether w's row-parallel matrices (wo, w2) split over tp ranks into
 * whole blocks of their formats (each rank's n_heads·head_dim / tp and
 * hidden_dim / tp columns); GC_EUNSUPPORTED with one line naming the
 * tensor otherwise. Float weights always split. */
int gc_weights_check_split(const gc_llama_weights_t *w, int tp, gc_err_t *e);

/* Release the view and every mapping under it; NULL is a no-op. */
void gc_weights_close(gc_llama_weights_t *w);

/* Every tensor of the view in a fixed order: tok_embeddings, then per layer
 * attn_norm wq wk wv wo ffn_norm w1 w2 w3 (then with cfg.qkv_bias bq bk
 * bv, with cfg.qk_norm q_norm k_norm), then norm, then classifier. count
 * = 3 + per_layer * n_layers, per_layer = gc_weights_layer_count (9, and 3
 * more with biases, 2 more with q/k norms); at(i) is
 * NULL when i >= count. A tied classifier repeats tok_embeddings' data
 * pointer: uploaders should share it rather than copy it twice. Can't
 * fail. */
size_t gc_weights_count(const gc_llama_weights_t *w);
int gc_weights_layer_count(const gc_llama_config_t *c);
const gc_weight_t *gc_weights_at(const gc_llama_weights_t *w, size_t i);

/* Host bytes of all distinct tensors (a tied classifier counted once). */
uint64_t gc_weights_bytes(const gc_llama_weights_t *w);

#endif
