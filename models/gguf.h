/* gguf.h — a GGUF file (llama.cpp's format), memory-mapped: the key/value
 * metadata and the tensor table, both bounds-checked once at open, so every
 * getter below reads inside the file. Tensors are described (name, dims,
 * ggml type, bytes) and located in the data section; what they mean is the
 * model loader's business (weights.c). GGUF versions 2 and 3 (64-bit
 * counts), little-endian. */
#ifndef GC_MODELS_GGUF_H
#define GC_MODELS_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

/* Value types as numbered in the GGUF specification. */
typedef enum gc_gguf_type {
  GC_GGUF_U8 = 0, GC_GGUF_I8, GC_GGUF_U16, GC_GGUF_I16, GC_GGUF_U32, GC_GGUF_I32,
  GC_GGUF_F32, GC_GGUF_BOOL, GC_GGUF_STRING, GC_GGUF_ARRAY, GC_GGUF_U64, GC_GGUF_I64,
  GC_GGUF_F64, GC_GGUF_NTYPES
} gc_gguf_type_t;

/* A string inside the mapping: not NUL-terminated. */
typedef struct gc_gguf_str {
  const char *p;
  uint64_t n;
} gc_gguf_str_t;

/* One key/value pair. For arrays, type is GC_GGUF_ARRAY, elem the element
 * type and count the element count; data points at the first element (or,
 * for scalars, at the value) inside the mapping, possibly unaligned. */
typedef struct gc_gguf_kv {
  gc_gguf_str_t key;
  gc_gguf_type_t type, elem;
  uint64_t count;
  const uint8_t *data;
} gc_gguf_kv_t;

/* One tensor of the file. ne is innermost first (ne[0] is the length of a
 * row: in_features for a matrix); dims past ndim are 1. */
#define GC_GGUF_MAX_DIMS 4
typedef struct gc_gguf_tensor {
  gc_gguf_str_t name;
  int ndim;                       /* 1 .. GC_GGUF_MAX_DIMS */
  int64_t ne[GC_GGUF_MAX_DIMS];   /* each >= 0, product <= INT64_MAX */
  uint32_t type;                  /* ggml type id (base/quant.h) */
  const char *type_name;          /* "Q4_K" */
  int64_t nelem;
  uint64_t offset;                /* from the start of the data section */
  uint64_t nbytes;                /* nelem / block * bytes of the type */
  const uint8_t *data;            /* [nbytes] inside the mapping, aligned to
                                     general.alignment from the map's start */
} gc_gguf_tensor_t;

typedef struct gc_gguf gc_gguf_t;

/* Map path and check it whole: magic, version, counts against the file
 * size, every string length and array extent, and every tensor (name
 * unique, dims, a ggml type id, rows that are whole blocks, size with
 * overflow checks, offset aligned to general.alignment (default 32) and
 * inside the data section, no two tensors overlapping). Errors: GC_EIO
 * (cannot open/map), GC_ECORRUPT ("x.gguf: truncated in the value of
 * 'tokenizer.ggml.tokens'", "x.gguf: tensor 'blk.0.attn_q.weight' ends at
 * byte N, past the end of the file"), GC_EUNSUPPORTED (version 1,
 * big-endian files), GC_ENOMEM. */
int gc_gguf_open(const char *path, gc_gguf_t **out, gc_err_t *e);
void gc_gguf_close(gc_gguf_t *g); /* NULL is a no-op */

/* The pair named key, or NULL. Can't fail. */
const gc_gguf_kv_t *gc_gguf_find(const gc_gguf_t *g, const char *key);

/* Typed getters. Each returns GC_ENOTFOUND when the key is absent and
 * GC_ECORRUPT when it has another type, with the key in the message. */
int gc_gguf_get_str(const gc_gguf_t *g, const char *key, gc_gguf_str_t *out, gc_err_t *e);
/* Any integer type or bool, range-checked into int64. */
int gc_gguf_get_int(const gc_gguf_t *g, const char *key, int64_t *out, gc_err_t *e);
/* An array of strings: *out (free it) holds count pointers into the map. */
int gc_gguf_get_strs(const gc_gguf_t *g, const char *key, gc_gguf_str_t **out, uint64_t *count,
                     gc_err_t *e);
/* An array of f32 (as float) or of any integer type (as int32, range
 * checked): a fresh copy in *out (free it). */
int gc_gguf_get_f32s(const gc_gguf_t *g, const char *key, float **out, uint64_t *count, gc_err_t *e);
int gc_gguf_get_i32s(const gc_gguf_t *g, const char *key, int32_t **out, uint64_t *count, gc_err_t *e);
/* A number of any integer or float type, as double. */
int gc_gguf_get_num(const gc_gguf_t *g, const char *key, double *out, gc_err_t *e);

/* The token id llama.cpp takes for a special token whose key is absent:
 * which is "bos", "eos" or "unk"; by tokenizer.ggml.model, "llama"
 * (SentencePiece): 1, 2 and 0; "gpt2": 11 for BOS and EOS (its loader's
 * defaults); -1 otherwise. Can't fail. */
int64_t gc_gguf_default_special(const gc_gguf_t *g, const char *which);

/* The ids (below n_vocab, each once, at most max) that end a generation
 * in g, llama.cpp's end-of-generation set: tokenizer.ggml.eos_token_id
 * (absent or outside the vocabulary: gc_gguf_default_special's, as
 * llama.cpp replaces a bad special id), eot_token_id and eom_token_id, then the tokens of tokenizer.ggml.tokens
 * named <|eot_id|>, <|eom_id|>, <|end_of_text|>, <|im_end|>, <|end|>,
 * <end_of_turn>, <|endoftext|> or <EOT> (files converted without the
 * keys; Llama 3.1's <|eom_id|> and <|end_of_text|> beside an eos of
 * <|eot_id|>, which Hugging Face's generation_config lists too). Keys of
 * the wrong type count as absent. Returns the count. Can't fail. */
int gc_gguf_eog_ids(const gc_gguf_t *g, int64_t n_vocab, int32_t *ids, int max);

/* The file's path and GGUF version. */
const char *gc_gguf_path(const gc_gguf_t *g);
uint32_t gc_gguf_version(const gc_gguf_t *g);

/* Tensors in file order: count, the i-th (NULL when out of range), and by
 * exact name (NULL when absent). Can't fail. */
uint64_t gc_gguf_tensor_count(const gc_gguf_t *g);
const gc_gguf_tensor_t *gc_gguf_tensor_at(const gc_gguf_t *g, uint64_t i);
const gc_gguf_tensor_t *gc_gguf_tensor(const gc_gguf_t *g, const char *name);

#endif
