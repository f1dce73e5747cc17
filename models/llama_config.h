/* llama_config.h — the Llama family's hyperparameters, from a Hugging Face
 * config.json or a llama2.c header, checked for consistency. What gcore
 * cannot run (other RoPE scalings, biases, other activations, ...) is refused
 * here, by name, before any weight is touched. */
#ifndef GC_MODELS_LLAMA_CONFIG_H
#define GC_MODELS_LLAMA_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "gguf.h"
#include "safetensors.h"

/* How RoPE pairs the elements of one head of q and k.
 * HALVES: (x[i], x[i + head_dim/2]) — Hugging Face checkpoints.
 * PAIRS:  (x[2i], x[2i + 1])       — llama2.c / Meta's original checkpoints.
 * Both rotate pair i by angle pos * inv_freq[i]. */
typedef enum gc_rope_layout {
  GC_ROPE_HALVES = 0,
  GC_ROPE_PAIRS = 1,
} gc_rope_layout_t;

typedef enum gc_rope_scaling {
  GC_ROPE_SCALING_NONE = 0,
  GC_ROPE_SCALING_LLAMA3 = 1,  /* Llama 3.1 frequency-dependent rescaling */
  GC_ROPE_SCALING_FACTORS = 2, /* per-frequency divisors, as GGUF files store
                                  llama3 scaling (tensor rope_freqs.weight) */
  GC_ROPE_SCALING_LINEAR = 3,  /* every frequency divided by rope_factor (positions
                                  interpolated: Hugging Face's "linear", llama.cpp's
                                  rope.scaling.type linear) */
} gc_rope_scaling_t;

#define GC_LLAMA_MAX_EOS 16

/* Upper bounds that keep every size product inside int64 and refuse
 * nonsense; the largest Llama (405B) is well inside them. */
#define GC_LLAMA_MAX_DIM (1 << 16)
#define GC_LLAMA_MAX_HIDDEN (1 << 18)
#define GC_LLAMA_MAX_LAYERS 1024
#define GC_LLAMA_MAX_HEADS 1024
#define GC_LLAMA_MAX_HEAD_DIM 1024
#define GC_LLAMA_MAX_VOCAB (1 << 22)
#define GC_LLAMA_MAX_SEQ (1 << 24)

typedef struct gc_llama_config {
  int dim;        /* hidden_size: width of the residual stream */
  int hidden_dim; /* intermediate_size: FFN width */
  int n_layers;
  int n_heads;    /* query heads */
  int n_kv_heads; /* key/value heads; n_heads % n_kv_heads == 0 (GQA) */
  int head_dim;   /* HF head_dim if given, else dim / n_heads; even */
  int vocab_size;
  int max_seq;    /* max_position_embeddings (llama2.c: seq_len) */
  double rms_norm_eps;
  double rope_theta;
  gc_rope_scaling_t rope_scaling;
  double rope_factor;           /* LLAMA3 and LINEAR: factor */
  double rope_low_freq_factor;  /* LLAMA3 only */
  double rope_high_freq_factor; /* LLAMA3 only; > low_freq_factor */
  int rope_original_max_seq;    /* LLAMA3 only: original_max_position_embeddings */
  int n_rope_factors;           /* FACTORS only: head_dim / 2 */
  float rope_factors[GC_LLAMA_MAX_HEAD_DIM / 2]; /* FACTORS only: inv_freq[i] is
                                   divided by rope_factors[i] (llama.cpp's freq_factors) */
  gc_rope_layout_t rope_layout;
  int tie_word_embeddings;      /* 1: the classifier is the embedding */
  int qkv_bias;                 /* 1: q, k and v projections add a bias (Qwen2: HF
                                   model_type qwen2, GGUF architecture qwen2) */
  int qk_norm;                  /* 1: each query and key head is RMS-normalised (weights
                                   q_norm, k_norm [head_dim]) before RoPE (Qwen3) */
  int bos_id;                   /* -1 when the config names none */
  int n_eos;                    /* 0 .. GC_LLAMA_MAX_EOS */
  int eos_ids[GC_LLAMA_MAX_EOS];
  gc_st_dtype_t dtype;          /* declared torch_dtype/dtype (F32 if absent) */
  gc_st_dtype_t weight_dtype;   /* dtype of the loaded projection matrices
                                   (set by the weight loader; llama2.c: F32) */
  char note[400];               /* GGUF: a line for the user about what loading replaced (a
                                   special token id outside the vocabulary: llama.cpp's
                                   default instead), or "" */
  int tp;                       /* 0 or 1: the whole model. N > 1: the config of
                                   one of N tensor-parallel ranks (gc_llama_shard in
                                   recipe.h): n_heads, n_kv_heads and hidden_dim are
                                   the rank's; vocab_size stays the model's, and the
                                   rank's LM head has ceil(vocab_size / N) rows */
} gc_llama_config_t;

/* Parse config.json text [n bytes, need not be NUL-terminated] of
 * model_type llama, qwen2 (qkv_bias 1) or qwen3 (qk_norm 1); `what`
 * names the source in messages (e.g. the file path). Fills *c and checks it
 * with gc_llama_config_check. Errors: GC_ECORRUPT (not JSON, wrong field
 * types, missing required fields, values that fail the consistency check),
 * GC_EUNSUPPORTED (a declared feature gcore does not implement, named:
 * "unsupported config: rope_scaling.rope_type 'yarn' (gcore supports
 * llama3)"), GC_ENOMEM. */
int gc_llama_config_parse_hf(const char *text, size_t n, const char *what,
                             gc_llama_config_t *c, gc_err_t *e);

/* Read and parse <dir>/config.json (at most 4 MiB). */
int gc_llama_config_load_hf(const char *dir, gc_llama_config_t *c,
                            gc_err_t *e);

/* The 7 little-endian int32 of a legacy llama2.c checkpoint header:
 * dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
 * A negative vocab_size means an untied classifier follows the weights.
 * Fills *c (PAIRS rope, theta 1e4, eps 1e-5, BOS 1, EOS 2, F32) and checks
 * it. Errors: GC_ECORRUPT naming the bad field. c->dim must equal
 * n_heads * head_dim in this format (head_dim = dim / n_heads). */
int gc_llama_config_from_llama2c(const int32_t hdr[7], gc_llama_config_t *c,
                                 gc_err_t *e);

/* The configuration of a GGUF file of architecture "llama", "qwen2" or
 * "qwen3" (llama.cpp's keys under the architecture's name: llama.context_length,
 * .embedding_length, .feed_forward_length,
 * .block_count, .attention.head_count[_kv], .attention.key_length (else
 * embedding_length / head_count), .attention.layer_norm_rms_epsilon,
 * .rope.freq_base; tokenizer.ggml.bos/eos_token_id), with what the tensor
 * table says: vocab_size from token_embd.weight, tied when output.weight
 * is absent, llama3 scaling as per-frequency factors from rope_freqs.weight.
 * RoPE layout PAIRS for llama (llama.cpp's converter interleaves Q and K),
 * HALVES for qwen2 and qwen3 (not permuted; NEOX rotation); qwen2's
 * qkv_bias is 1, qwen3's qk_norm.
 * Refused by name: other architectures (GC_EUNSUPPORTED
 * "general.architecture 'phi3'"), rope.scaling.type other than none and
 * linear, partial rotary dims, experts. Missing or ill-typed keys:
 * GC_ECORRUPT naming the file. */
int gc_llama_config_from_gguf(const gc_gguf_t *g, gc_llama_config_t *c, gc_err_t *e);

/* Consistency: positive dims within the GC_LLAMA_MAX_* bounds, n_heads %
 * n_kv_heads == 0, even head_dim, eps in (0, 1), finite theta > 0, sane
 * llama3 parameters, ids inside the vocabulary (or -1 for BOS).
 * GC_OK or GC_EINVAL with the offending field named. */
int gc_llama_config_check(const gc_llama_config_t *c, gc_err_t *e);

/* One-line human summary into buf[n] (always NUL-terminated). */
void gc_llama_config_describe(const gc_llama_config_t *c, char *buf, size_t n);

#endif
