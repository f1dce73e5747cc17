/* recipe.h — the Llama forward as data: the list of problems (op, dtypes,
 * shape) a pass of t tokens launches, and the ranges of rows every pass
 * a model can run reaches. No device: gcore-gen and gcore-tune use this to
 * know what to build and tune; models/llama.c runs the same steps. */
#ifndef GC_RECIPE_H
#define GC_RECIPE_H

#include "../core/problem.h"
#include "weights.h"

/* Passes of at most this many tokens fold each RMSNorm into the GEMM
 * after it (rmsnorm_gemm, rmsnorm_gemm_swiglu); see llama.c. */
#define GC_LLAMA_FUSE_MAX 8

/* Keys of the decode attention's short-context bucket: a decode step at
 * positions 0 .. GC_LLAMA_ATTN_SHORT-1 runs attn_short (attention with k
 * = this, tuned at the positions inside it), a later one attn (k = 0, any
 * length); see gc_llama_steps_t. */
#define GC_LLAMA_ATTN_SHORT 1024

/* A batched decode step runs at most this many rows (sequences) in one
 * pass: the decode passes of 1 to 16 rows the tuner covers. */
#define GC_LLAMA_BATCH_MAX 16

/* The B dtypes of one layer's four matrix steps. With split 1 the QKV
 * projection is split (a Q4_K_M file's Q6_K attn_v beside Q4_K attn_q and
 * attn_k; see gc_llama_dtypes_for): qkv is wq|wk's format and v wv's;
 * with split 0, v is qkv's and unused. */
typedef struct gc_llama_layer_dtypes {
  uint8_t qkv, wo, w13, w2; /* gc_dtype_t values */
  uint8_t v, split;
} gc_llama_layer_dtypes_t;

/* The dtypes the forward uses on a device: activations and KV cache in
 * act; norm weights and dense matrices in weight; the token table, the LM
 * head and every layer's matrices in their own (a block format where the
 * model stores them so: quantized weights stay quantized on the device). */
typedef struct gc_llama_dtypes {
  gc_dtype_t act, weight;
  gc_dtype_t embed, head;
  int64_t deq_rows; /* the prefill plan (below): 0 = quantized only */
  gc_llama_layer_dtypes_t layer[GC_LLAMA_MAX_LAYERS]; /* [n_layers] */
} gc_llama_dtypes_t;

/* Two plans for an unfused pass (t > GC_LLAMA_FUSE_MAX tokens) over a
 * layer matrix in a block format. Quantized: the step reads the blocks
 * (the gemm_q templates dequantize tiles on the fly). Dense: the matrix
 * [N, K] is first dequantized whole into a scratch of the dense dtype
 * (dt->weight) by the embedding gather of all its rows (op embed, ids
 * 0..N-1: the same kernels and reference as the token table), and the step
 * runs the dense GEMM on the scratch: about 4x the weight bytes, but the
 * dense templates' tensor-core speed, so it wins for long passes (llama.cpp
 * switches from its quantized GEMM to dequantize + cuBLAS above a batch
 * size in the same way). A pass takes the dense plan when dt->deq_rows > 0
 * and t >= dt->deq_rows; the bundle records deq_rows for the CPU and for
 * GPUs (the meta keys below), chosen by gc_llama_workload from tuned
 * timings; a bundle without them runs the quantized plan. */
#define GC_LLAMA_META_DEQ_CPU "llama.deq_rows.cpu"
#define GC_LLAMA_META_DEQ_GPU "llama.deq_rows.gpu"
/* deq_rows on GPUs when the tuning database times neither plan: passes of
 * at least this many tokens take the dense plan. */
#define GC_LLAMA_DEQ_DEFAULT 128

/* Tensor parallelism over tp ranks (Megatron's split). Each rank holds
 * n_heads/tp query heads and n_kv_heads/tp KV heads (column-parallel
 * wq|wk|wv: its heads' rows; row-parallel wo: the same heads' columns),
 * hidden_dim/tp of the FFN (column-parallel w1|w3 rows, row-parallel w2
 * columns) and ceil(vocab_size/tp) rows of the LM head (the last ranks'
 * shares padded with zero rows past the vocabulary: a vocabulary of 32001
 * splits as a vocabulary of 32002 would, whose row 32001 no one reads;
 * vLLM pads its vocabulary the same way). After each row-parallel
 * projection the ranks' partial sums are all-reduced into the residual
 * stream, and the ranks' logits are all-gathered before argmax and
 * download. The token embedding and the norms are replicated: the embedding
 * is a gather of one row per token (no FLOPs to split), and splitting it
 * would cost one more collective per pass to save vocab·dim elements of
 * memory per rank. Heads, KV heads and the FFN width must be divisible by
 * tp (their sums over ranks have no padding to hide in).
 *
 * *out = c as rank's shard (every rank's shapes are the same), with
 * out->tp = tp. tp = 1: a copy of c. Errors: GC_EINVAL, one line naming
 * the dimension that tp does not divide ("--tp 3: 8 attention heads are
 * not divisible by 3"), or tp out of [1, GC_LLAMA_TP_MAX]. */
#define GC_LLAMA_TP_MAX 64
int gc_llama_shard(const gc_llama_config_t *c, int tp, gc_llama_config_t *out, gc_err_t *e);

/* Rows of the LM head one rank computes: ceil(vocab_size / tp), of which
 * rank r's past vocab_size - r·rows are zero rows (gc_weights_shard). */
int64_t gc_llama_head_rows(const gc_llama_config_t *c);

/* The problems of one pass of t tokens with rows rows of logits. When
 * fused, norm and fnorm are not launched (qkv, swiglu and head fold them).
 * A decode step (t = 1, one sequence) also folds rope into qkv where the
 * model has no q/k/v biases or norms and the layer's QKV weights are dense or in a device layout (NVIDIA:
 * gemv_qmma's epilogue; the GGUF layouts' templates have none):
 * qkv_rope, and qkv is rmsnorm_gemm_rope_kv (the RoPE/KV write in the
 * GEMV's epilogue); rope is then not launched.
 *
 * A split layer (gc_llama_layer_dtypes_t) projects Q|K (qkv: N =
 * (H+G)·hd rows of wq|wk, in their format) and V (qkv_v: G·hd rows of wv,
 * in its own) in two steps over the same input, so that both stay in
 * their block formats; cat joins the two outputs' rows into the [t,
 * (H+2G)·hd] rope reads (concat), except in a decode step (one token of
 * one sequence): its one row is whole when qkv_v writes just past qkv's,
 * and cat is "". With
 * the dense plan the layer is not split: dq[0] and dq[4] dequantize
 * wq|wk and wv into the scratch one after the other, and qkv runs dense
 * on all the rows. qkv_v and cat are "" in a layer that is not split. */
typedef struct gc_llama_steps {
  int fused;
  int deq;      /* the dense plan (above) for this pass's block-format matrices */
  int decode;   /* t = 1 of one sequence: qkv_rope where the layer allows */
  int qkv_rope; /* this layer's qkv is rmsnorm_gemm_rope_kv */
  gc_problem_t embed, norm, qkv, qkv_v, cat, rope, attn, wo, swiglu, w2, fnorm, head, argmax;
  /* a model with q/k/v biases (cfg.qkv_bias, Qwen2): the biases added to
   * the QKV projection's rows [t, (H+2G)·hd] in place (op bias, dtypes
   * act:weight:act), after the projection (and cat) and before rope; the
   * decode step then keeps rope a step (qkv_rope 0). op "" without. */
  gc_problem_t bias;
  /* a model with per-head q/k norms (cfg.qk_norm, Qwen3): each query and
   * key head of the QKV rows RMS-normalised in place (op qk_norm, after
   * bias, before rope; the decode step then keeps rope a step too). op ""
   * without. */
  gc_problem_t qk_norm;
  /* a decode step's attention while the cache holds at most
   * GC_LLAMA_ATTN_SHORT keys: attn with k set, so that a bundle may hold a
   * kernel for short contexts beside attn's for any (the fixed cost of a
   * split and its merge weighs most there); optional: where the bundle has
   * none, attn serves. op "" but in a decode step. */
  gc_problem_t attn_short;
  /* a decode step's argmax that also moves the position on (argmax_step:
   * one sequence's greedy steps replay with no host write between them);
   * optional: where the bundle has none, argmax serves and the host writes
   * the position. op "" but in a decode step. */
  gc_problem_t argmax_step;
  /* the dense plan's dequantization of the layer's matrices, in the order
   * qkv, wo, swiglu, w2, and a split layer's V: embed of N rows (ids
   * 0..N-1) of the K-column block matrix into the scratch, where this
   * layer's step takes the plan; op "" where not (then the step reads its
   * blocks, or is dense anyway) */
  gc_problem_t dq[5];
} gc_llama_steps_t;

/* The most problems one layer's pass launches (gc_llama_recipe's order;
 * attn_short is one of attn and it, argmax_step one of argmax and it). */
#define GC_LLAMA_STEPS_MAX 22

/* The unfused steps of a qkv_rope step q: the QKV projection alone
 * (rmsnorm_gemm, its dimensions), what a bundle built before the fused op
 * has; rope is s->rope. */
gc_problem_t gc_llama_qkv_unfused(const gc_problem_t *q);

void gc_llama_steps(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t t, int64_t rows,
                    gc_llama_steps_t *s);
/* Set the layer steps of s (qkv, wo, swiglu, w2) to layer l's dtypes (and
 * qkv's op: rmsnorm_gemm_rope_kv or not, see above; with s->deq, each
 * block-format matrix's dq[] and the step's dense B dtype). */
void gc_llama_layer_steps(const gc_llama_dtypes_t *dt, int l, gc_llama_steps_t *s);

/* The problems of a batched decode step of m rows, each row one token of
 * its own sequence (gcore-serve): the single-sequence steps of m tokens
 * with logits of every row, but rope_kv_batch and attention_batch (each
 * row at its own position in its own KV-cache slot) and argmax of m rows. */
void gc_llama_batch_steps(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t m,
                          gc_llama_steps_t *s);

/* Append to l every problem a batched decode step of m rows needs. */
int gc_llama_batch_recipe(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t m,
                          gc_problems_t *l, gc_err_t *e);

/* Append to l every problem a forward of t tokens needs (t = 1: a decode
 * step). logits_rows: rows of the LM head (1, or t for all positions). */
int gc_llama_recipe(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t t,
                    int64_t logits_rows, gc_problems_t *l, gc_err_t *e);

/* Append to out, for every problem group of the forward, the range of
 * rows that passes of 1 to ctx tokens reach (logits of the last row or of
 * every row) and that batched decode steps of 1 to GC_LLAMA_BATCH_MAX
 * rows reach: what a bundle must serve so that any prompt runs, in
 * gcore-run and in gcore-serve. */
int gc_llama_needs(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, int64_t ctx,
                   gc_needs_t *out, gc_err_t *e);

/* The dtypes for weights w on a backend. A model in one float dtype: the
 * CPU keeps activations in fp32, GPUs in the weights' dtype, and every
 * weight is in that dtype. A model with block formats: activations (and
 * norm weights and whatever else is dense) in fp32 on the CPU and fp16 on
 * GPUs; each matrix step takes its weights' block format, the embedding
 * gather and the LM head theirs where they are stored in one (on NVIDIA
 * GPUs Q8_0, Q4_0, Q4_K and Q6_K in their device layouts Q8_0R, Q4_0R, Q4_KR, Q6_KR, repacked at
 * load, where rows are whole 256-element blocks). A stacked
 * step whose parts differ has no single format: where wq and wk share a
 * block format and wv differs (a Q4_K_M file's Q6_K attn_v beside Q4_K
 * attn_q and attn_k) the QKV step is split (gc_llama_steps_t) and every
 * part keeps its format; otherwise (w1|w3, or wq and wk apart) that
 * layer's step runs dense, its parts dequantized at load
 * (gc_llama_tensor_dtypes). split: the ranks over which the row-parallel
 * wo and w2 will be split by columns (gc_weights_shard), whose share's
 * columns decide their layout; 1 where w is already a rank's share or
 * whole. */
int gc_llama_dtypes_for(const gc_llama_weights_t *w, const char *backend, int split,
                        gc_llama_dtypes_t *dt, gc_err_t *e);

/* The dtype each tensor of w (gc_weights_at's order) must have for the
 * forward in dt (what gc_weights_as converts to): count entries of to. */
void gc_llama_tensor_dtypes(const gc_llama_weights_t *w, const gc_llama_dtypes_t *dt, gc_st_dtype_t *to);

/* RoPE inverse frequencies [head_dim/2] (theta, llama3 scaling or GGUF's
 * per-frequency factors), double. */
void gc_llama_inv_freq(const gc_llama_config_t *c, double *out);

/* The problems of a model for tuning or bundling: the recipe for a prefill
 * of each t in prefill (comma list; NULL: 128,512 capped to the context;
 * "none": no prefill) and, for each batch row count b (NULL: 1), a decode
 * step of b tokens of one sequence and (b <= GC_LLAMA_BATCH_MAX) a batched
 * decode step of b rows,
 * in the dtypes of backend ("cpu", "cuda", "hip", or a comma list of them:
 * the union of their problems; NULL: every backend; the GPUs' recipes
 * differ in the block formats' layouts, see gc_llama_dtypes_for). needs (may be NULL) gets the rows every prompt length reaches.
 * quantize (NULL: none): the model's matrices as --quantize stores them.
 * tp: tensor-parallel ranks (1: none): the shapes of one rank's shard
 * (gc_llama_shard); block-format weights are refused with tp > 1.
 * plan (may be NULL: as {NULL, NULL, -1}) chooses the prefill plan of a
 * model with block-format layer matrices: both plans' problems are listed
 * (and needed) for GPU backends, and for the CPU only with plan->force > 0;
 * plan->deq_rows is set for the bundle, per backend listed: force where
 * force >= 0 (0: the quantized plan only), else on GPUs measured (see
 * gc_llama_deq_measure) and on the CPU 0; and plan->meta holds them as the
 * bundle's meta entries. */
typedef struct gc_llama_plan {
  const char *db;      /* tuning database whose winners' timings choose (NULL: none) */
  const char *target;  /* the GPU target whose timings count (NULL: none) */
  int64_t force;       /* >= 0: deq_rows is this (gcore-gen --dequant-rows); -1: choose */
  int64_t deq_rows[2]; /* out: [0] the CPU's, [1] GPUs' */
  char text[2][24];
  const char *meta[5]; /* out: key, value, key, value, NULL (gc_gen_opts_t.meta) */
} gc_llama_plan_t;
int gc_llama_workload(const char *model_path, const char *quantize, const char *prefill,
                      const char *batch, int tp, const char *backend, gc_problems_t *out, gc_needs_t *needs,
                      gc_llama_plan_t *plan, gc_err_t *e);

/* The smallest pass length from which the dense plan is faster, from the
 * winners' medians in db for target: passes of t = 16, 32, ... up to the
 * context where the database times every matrix step of both plans (the
 * sums over the layers of the quantized steps against the dequantization
 * gathers plus the dense steps); the smallest such t from which the dense
 * plan wins at every longer timed t, 0 where it loses at the longest; no
 * timed t (or db NULL): dflt. *timed = the number of t compared. */
int gc_llama_deq_measure(const gc_llama_config_t *c, const gc_llama_dtypes_t *dt, const char *db,
                         const char *target, int64_t dflt, int64_t *rows, int *timed, gc_err_t *e);

#endif
