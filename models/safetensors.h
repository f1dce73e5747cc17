/* safetensors.h — read-only, memory-mapped access to a Hugging Face model's
 * weights: one model.safetensors, or shards listed by
 * model.safetensors.index.json. Every byte of the files is untrusted: the
 * header, each tensor's dtype, shape and data_offsets are checked before any
 * pointer into the mapping is handed out. Nothing is copied. */
#ifndef GC_MODELS_SAFETENSORS_H
#define GC_MODELS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

/* Element types gcore computes with. The values match the templates'
 * GC_F32 / GC_F16 / GC_BF16 numbering. GC_ST_OTHER marks a tensor whose dtype
 * is a valid safetensors dtype that gcore does not compute with (I8, F64, ...):
 * such a tensor is listed and bounds-checked but gc_st_get refuses it. */
typedef enum gc_st_dtype {
  GC_ST_OTHER = -1,
  GC_ST_F32 = 0,
  GC_ST_F16 = 1,
  GC_ST_BF16 = 2,
  /* ggml's block formats (base/quant.h, same numbering as gc_qtype_t):
     weights from GGUF files or --quantize, never in a safetensors file */
  GC_ST_Q8_0 = 3,
  GC_ST_Q4_0 = 4,
  GC_ST_Q4_K = 5,
  GC_ST_Q5_K = 6,
  GC_ST_Q6_K = 7,
  GC_ST_Q8_0R = 8, /* gcore's device layouts: weights repacked for a GPU */
  GC_ST_Q4_0R = 9,
  GC_ST_Q4_KR = 10,
  GC_ST_Q6_KR = 11,
} gc_st_dtype_t;

/* Bytes per element of F32/F16/BF16; 0 for GC_ST_OTHER and block formats. */
size_t gc_st_dtype_size(gc_st_dtype_t t);
/* "F32", "F16", "BF16" (safetensors spelling), "Q4_K" (ggml's); "?" otherwise. */
const char *gc_st_dtype_name(gc_st_dtype_t t);

#define GC_ST_MAX_DIMS 8

typedef struct gc_st_tensor {
  const char *name;              /* NUL-terminated, owned by the handle */
  const char *file;              /* path of the file holding it (owned) */
  gc_st_dtype_t dtype;           /* GC_ST_OTHER: see dtype_name */
  char dtype_name[12];           /* as written in the header, e.g. "BF16" */
  int ndim;                      /* 0 .. GC_ST_MAX_DIMS */
  int64_t shape[GC_ST_MAX_DIMS]; /* [ndim], each >= 0 */
  int64_t numel;                 /* product of shape (1 when ndim == 0) */
  const void *data;              /* [nbytes] inside the read-only mapping;
                                    aligned only as well as the file is */
  size_t nbytes;                 /* numel * element size, checked */
} gc_st_tensor_t;

typedef struct gc_st gc_st_t; /* opaque handle: mappings + tensor table */

/* Open the weights at path, which is either a model directory or one
 * .safetensors file. In a directory, model.safetensors.index.json wins
 * over model.safetensors when both exist. Every file is mapped read-only and
 * validated as a whole; the index must name only files in the directory
 * (no '/' or leading '.') and every tensor it maps must be in its shard.
 * On success *out is a handle to release with gc_st_close. On failure *out
 * is NULL and e names the file and what is wrong: GC_ENOTFOUND (no weights
 * file), GC_EIO, GC_ECORRUPT (malformed), GC_EUNSUPPORTED (dtype unknown to
 * gcore's table), GC_ENOMEM. */
int gc_st_open(const char *path, gc_st_t **out, gc_err_t *e);

/* Unmap and free everything; pointers from the handle die with it.
 * NULL is a no-op. */
void gc_st_close(gc_st_t *st);

/* Tensor by exact name, or NULL. Does not judge its dtype. Can't fail. */
const gc_st_tensor_t *gc_st_find(const gc_st_t *st, const char *name);

/* Tensor by name, refusing what gcore cannot compute with: GC_ENOTFOUND
 * ("tensor 'x' not found in DIR") or GC_EUNSUPPORTED (dtype other than
 * F32/F16/BF16, named in the message). On success *out is set. */
int gc_st_get(const gc_st_t *st, const char *name, const gc_st_tensor_t **out,
              gc_err_t *e);

/* Number of tensors, and the i-th (0 <= i < count) in strcmp order of name:
 * the way to list the names. */
size_t gc_st_count(const gc_st_t *st);
const gc_st_tensor_t *gc_st_at(const gc_st_t *st, size_t i);

/* The path the handle was opened from (directory or file). */
const char *gc_st_path(const gc_st_t *st);

#endif
