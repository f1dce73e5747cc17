/* llama.h — the Llama family on a device: the forward recipe (one
 * description of the layer as a list of ops with shapes, which drives both
 * execution and tuning), weights resident on the device, the KV cache, and
 * prefill / decode steps through bundle kernels. Nothing here names a
 * backend: every kernel comes from the bundle through runtime/dispatch. */
#ifndef GC_LLAMA_H
#define GC_LLAMA_H

#include "../runtime/dispatch.h"
#include "../runtime/ops.h"
#include "../runtime/profile.h"
#include "weights.h"

/* Passes of at most this many tokens fold each RMSNorm into the GEMM
 * after it (rmsnorm_gemm, rmsnorm_gemm_swiglu); see llama.c. */
#define GC_LLAMA_FUSE_MAX 8

/* The dtypes the forward uses on a device: activations and KV cache in
 * act, weights as stored. */
typedef struct gc_llama_dtypes {
  gc_dtype_t act, weight;
} gc_llama_dtypes_t;

/* Append to l every problem a forward of t tokens needs (t = 1: a decode
 * step). logits_rows: rows of the LM head (1, or t for all positions). */
int gc_llama_recipe(const gc_llama_config_t *c, gc_llama_dtypes_t dt, int64_t t,
                    int64_t logits_rows, gc_problems_t *l, gc_err_t *e);
/* The dtypes for weights w on a backend: the CPU keeps activations in
 * fp32; GPUs keep them in the weights' dtype. Quantized weights count as
 * fp32 on the CPU and fp16 on GPUs (dense copies, until quantized kernels
 * exist). */
int gc_llama_dtypes_for(const gc_llama_weights_t *w, const char *backend,
                        gc_llama_dtypes_t *dt, gc_err_t *e);

typedef struct gc_llama gc_llama_t;

/* Put the model on rt's device with a KV cache of ctx positions and room
 * for prefills of up to max_t tokens; resolve every kernel the recipe needs
 * for 1 and max_t tokens (a bundle lacking one is refused here, by name).
 * Quantized weights are dequantized on the host first (for now). */
int gc_llama_create(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, int ctx,
                    int max_t, gc_llama_t **out, gc_err_t *e);
void gc_llama_free(gc_llama_t *m);
const gc_llama_config_t *gc_llama_config(const gc_llama_t *m);
int gc_llama_pos(const gc_llama_t *m); /* tokens in the cache */

/* Run tokens[0..t) at the current position, append them to the cache, and
 * write logits of the last all_rows ? t : 1 rows (fp32, row-major
 * [rows, vocab]) to logits. Token ids are checked against the vocabulary. */
int gc_llama_forward(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                     float *logits, gc_err_t *e);

/* As gc_llama_forward, but when next is given the device picks the argmax
 * of the last row (ties to the lowest id) and only that id is copied back;
 * logits is then not written. */
int gc_llama_forward_ex(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                        float *logits, int32_t *next, gc_err_t *e);

/* Decode steps (one token, one row of logits) are captured as one graph
 * on first use and replayed after, on backends with graphs (default on). */
void gc_llama_set_graphs(gc_llama_t *m, int on);
/* Time every launch into p (NULL: off). Profiled steps run without graphs. */
void gc_llama_set_profile(gc_llama_t *m, gc_prof_t *p);
gc_prof_t *gc_llama_profile(const gc_llama_t *m);
/* Empty the KV cache: the next forward starts at position 0. */
void gc_llama_reset(gc_llama_t *m);

/* RoPE inverse frequencies [head_dim/2] (theta, llama3 scaling or GGUF's
 * per-frequency factors), double. */
void gc_llama_inv_freq(const gc_llama_config_t *c, double *out);


/* The problems of a model for tuning or bundling: the recipe for a prefill
 * of each t in prefill (comma list) and a decode step of batch rows, in the
 * dtypes of backend ("cpu", "cuda"), or of every backend when NULL; with
 * quantize (NULL: none) the model's matrices as --quantize stores them. */
int gc_llama_workload(const char *model_path, const char *quantize, const char *prefill,
                      const char *batch, const char *backend, gc_problems_t *out, gc_err_t *e);
#endif
