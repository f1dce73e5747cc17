/* llama2c.h — the legacy llama2.c checkpoint (Karpathy's run.c format):
 * a 7-int32 header and fp32 arrays, memory-mapped read-only. The file size
 * must equal exactly what the header implies, so a truncated or padded
 * file is refused before any pointer is handed out. */
#ifndef GC_MODELS_LLAMA2C_H
#define GC_MODELS_LLAMA2C_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "llama_config.h"

#define GC_LLAMA2C_HEADER_BYTES 28 /* 7 little-endian int32 */

/* Matrices are (layer, out_features, in_features), row-major, y = W x.
 * With head_dim = dim / n_heads, n_heads * head_dim == dim here. */
typedef struct gc_llama2c {
  gc_llama_config_t cfg; /* from the header; rope PAIRS, tied unless
                            the header's vocab_size was negative */
  const float *token_embedding; /* (vocab, dim) */
  const float *rms_att;         /* (layer, dim) */
  const float *wq;              /* (layer, n_heads * head_dim, dim) */
  const float *wk;              /* (layer, n_kv_heads * head_dim, dim) */
  const float *wv;              /* (layer, n_kv_heads * head_dim, dim) */
  const float *wo;              /* (layer, dim, n_heads * head_dim) */
  const float *rms_ffn;         /* (layer, dim) */
  const float *w1;              /* (layer, hidden_dim, dim)  gate */
  const float *w2;              /* (layer, dim, hidden_dim)  down */
  const float *w3;              /* (layer, hidden_dim, dim)  up */
  const float *rms_final;       /* (dim) */
  const float *wcls;            /* (vocab, dim); == token_embedding if tied */
  char *path;                   /* owned copy of the file path */
  void *map;                    /* [map_size] read-only mapping */
  size_t map_size;
} gc_llama2c_t;

/* Bytes a legacy llama2.c file with this config must have (header, all
 * arrays, the unused freq_cis tables, wcls when untied), or 0 if the
 * config is not one a llama2.c header could describe. Can't fail. */
uint64_t gc_llama2c_expected_size(const gc_llama_config_t *c);

/* Map path and point every array into the mapping. On success *out is a
 * handle to release with gc_llama2c_close. Errors (message names the
 * file): GC_ENOTFOUND/GC_EIO (cannot open or map), GC_ECORRUPT (header
 * values, or size differs from the header's: "expected N bytes, file has
 * M"), GC_EUNSUPPORTED (a newer llama2.c export with the 'ak42' magic). */
int gc_llama2c_open(const char *path, gc_llama2c_t **out, gc_err_t *e);

/* Unmap and free; NULL is a no-op. Pointers into the file die with it. */
void gc_llama2c_close(gc_llama2c_t *m);

#endif
