/* llama.c — the Llama forward pass through bundle kernels.
 *
 * One layer, as the recipe lists it (t tokens, D = dim, F = hidden_dim,
 * H/G query/kv heads of hd each):
 *   xn  = rmsnorm(x, attn_norm)            [t, D]
 *   qkv = xn · Wqkvᵀ                        [t, (H+2G)·hd]   (wq|wk|wv concatenated)
 *   qkv += bq|bk|bv                         (on every row; Qwen2's biases, cfg.qkv_bias)
 *   qkv = qk_norm(qkv)                      (each q and k head; Qwen3's norms, cfg.qk_norm)
 *   q, cache[pos..] = rope_kv(qkv)          [t, H·hd]        (a decode step: in the GEMV's epilogue)
 *   (a single sequence's passes fold the bias or the norms into rope: bias_rope_kv,
 *   qk_norm_rope_kv; batched decode steps run them as steps of their own)
 *   a   = attention(q, cache)               [t, H·hd]        (causal, GQA)
 *   x  += a · Woᵀ                           [t, D]           (gemm_add: the residual add in the epilogue)
 *   xn  = rmsnorm(x, ffn_norm)
 *   h   = silu(xn · W1ᵀ) ⊙ (xn · W3ᵀ)        [t, F]           (W1|W3 concatenated)
 *   x  += h · W2ᵀ                           (gemm_add)
 * then the final norm and the LM head on the last row (or every row).
 * A matrix in a block format is read as blocks by its step, except in
 * passes that take the dense plan (recipe.h: t >= dt.deq_rows, from the
 * bundle): there it is first dequantized whole into one scratch (an embed
 * gather of all its rows) and the dense GEMM reads that.
 * Passes of at most GC_LLAMA_FUSE_MAX (8) tokens (decode steps, small batches)
 * fold each RMSNorm into the GEMM that reads it (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu): the GEMVs that serve them normalise A's rows in
 * their own pass, which saves a launch and a round trip of xn through
 * memory; longer passes keep the two steps (the norm costs little there,
 * and the big-GEMM templates need not implement the fused ops). A decode
 * step (one token of one sequence) with dense QKV weights also folds
 * rope_kv into the QKV GEMV (rmsnorm_gemm_rope_kv: q, k and v never go
 * through memory as qkv); batched decode steps keep rope_kv_batch. A
 * layer whose wv has another block format than wq|wk (a Q4_K_M file)
 * projects Q|K and V in two steps, each on its own blocks, and joins
 * their rows (concat) where the pass has more than one (recipe.h).
 *
 * Slots (gcore-serve). The KV cache holds `slots` independent sequences:
 * per layer Kc and Vc are [slots, ctx, G·hd], slot s at rows s·ctx ..
 * s·ctx+ctx-1. A forward of t tokens runs in one slot (a prefill, or
 * gcore-run's sequence in slot 0) with rope_kv/attention over that slot's
 * rows. A batched decode step runs M rows, row i the next token of the
 * sequence in slot[i] at its own position pos[i]: every GEMM is the
 * M-row problem (as a prefill of M tokens), rope_kv_batch and
 * attention_batch read pos[] and slot[] from device memory ([2, M] after
 * the M token ids), so one captured graph per M replays any mix of slots
 * and positions.
 *
 * Tensor parallelism (recipe.h's split over tp ranks). Each rank is a
 * gc_llama_t of the shard config on its own device, holding its slices of
 * the weights (gc_weights_shard) and its heads' KV cache; rank 0's model
 * leads: every pass runs on all ranks at once, one thread each, and rank 0
 * returns the results. In a layer, after each row-parallel projection
 * (wo, w2: gemm_add), the ranks' x are all-reduced: rank 0's gemm_add adds
 * its partial product to the residual, the other ranks' add theirs to a
 * zeroed x, so the sum is the residual plus every partial product. After
 * the LM head each row of logits is all-gathered from the ranks' vocabulary
 * rows before argmax and download. A rank that fails aborts the group
 * (runtime/comm.h): every rank stops, and the error names the rank. */
#include "llama.h"

#include "../runtime/comm.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_dev {
  gc_dptr_t attn_norm, wqkv, wo, ffn_norm, w13, w2; /* weights on the device */
  gc_dptr_t wv;                                     /* a split QKV's V (recipe.h; wqkv: wq|wk), else 0 */
  gc_dptr_t bqkv;                                   /* bq|bk|bv [(H+2G)·hd] (cfg.qkv_bias), else 0 */
  gc_dptr_t qn, kn;                                 /* q_norm, k_norm [hd] (cfg.qk_norm), else 0 */
  gc_dptr_t kc, vc;                                 /* [slots, ctx, G·hd] each */
} layer_dev_t;

#define BMAX GC_LLAMA_BATCH_MAX

struct gc_llama {
  gc_dev_t *dev;
  gc_rt_t *rt;
  gc_llama_config_t cfg;
  gc_llama_dtypes_t dt;
  int ctx, max_t, slots;        /* positions per slot, rows per pass, slots */
  int *npos;                    /* [slots]: tokens in each slot's cache */
  size_t slot_bytes;            /* one slot of one layer's Kc: ctx·G·hd elements */
  layer_dev_t *layers;          /* [n_layers] */
  gc_dptr_t tok_emb, norm, cls, inv_freq;
  gc_dptr_t deq, ids;           /* the dense plan (recipe.h): the scratch of the largest block
                                   matrix [N, K] in dt.weight, and int32 ids 0..N-1 */
  gc_dptr_t x, xn, qkv, q, att, hb, logits; /* activations, [max_t, ...] */
  gc_dptr_t qkv2;               /* a split QKV's two outputs before their join, [max_t, (H+2G)·hd], or 0 */
  gc_dptr_t step;               /* int32 [1 + max_t]: the position, then the tokens */
  gc_dptr_t pos, tokens;        /* step, step + 4 */
  gc_dptr_t bstep, brows;       /* batched step, int32: tokens [BMAX], then [2, M]: pos, slot */
  int graphs;                   /* capture the decode step and replay it */
  int no_ahead;                 /* gc_llama_set_ahead(m, 0) */
  int64_t l2_window;            /* gc_llama_set_l2_window: bytes of gate/up the O projection asks L2 for */
  int no_qkv_rope;              /* the bundle has no rmsnorm_gemm_rope_kv: decode runs its two steps */
  int no_attn_short;            /* the bundle has no short-context decode attention: attn serves */
  int batched;                  /* made for batched steps: their kernels are resolved */
  int step_pos;                 /* decode steps run argmax_step, which moves m->pos on (0: the
                                   bundle has none, argmax serves and the host writes it) */
  gc_dptr_t box[2];             /* where argmax_step posts a step's id, by its position's parity:
                                   the device's boxes 0 and 1 (box_mark), else two scratch words */
  int box_mark;                 /* greedy steps mark their box (argmax_step stored the id) */
  int64_t replays;              /* decode steps run as a graph replay */
  gc_graph_t *decode_graph[2][2]; /* slot 0, one token: [short context][0: logits out, 1: device argmax] */
  gc_graph_t *batch_graph[BMAX + 1][2]; /* batched steps of M rows, the same */
  gc_prof_t *prof;
  char leave_out[GC_OP_NAME];   /* gc_llama_leave_out: the op whose decode launches are left out, "" none */
  int decoding;                 /* the launches under way are a decode step's */
  gc_dptr_t *owned;             /* [nowned]: allocations to free (cap: capowned) */
  int nowned, capowned;
  gc_llama_weights_t *conv;     /* tensors converted to the forward's dtypes (F32 norms of
                                   an F16 GGUF, the dense parts of a quantized model), or NULL */
  int rank;                     /* tensor parallelism (cfg.tp > 1): this rank, ... */
  gc_comm_t *comm;              /* ... its endpoint, ... */
  gc_llama_weights_t *shard;    /* ... its slices of the weights, ... */
  gc_dptr_t hlogits;            /* ... its LM head's rows [max_t, ceil(vocab / tp)] */
  gc_llama_t **ranks;           /* rank 0 of a group: every rank's model, [tp] (ranks[0] = m) */
};

#define TP_TIMEOUT_S 600 /* a rank that waits longer than this for its peers aborts */

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

/* Layer l's weights and KV cache on the device (a split QKV: wq|wk
 * stacked, wv on its own). */
static int place_layer(gc_llama_t *m, int l, const gc_llama_layer_weights_t *lw, layer_dev_t *ld,
                       gc_err_t *e) {
  const gc_weight_t *qkv[3] = {&lw->wq, &lw->wk, &lw->wv}, *w13[2] = {&lw->w1, &lw->w3},
                    *bqkv[3] = {&lw->bq, &lw->bk, &lw->bv};
  const int split = m->dt.layer[l].split;
  size_t cache = m->slot_bytes * (size_t)m->slots;
  if (split && place(m, &lw->wv, &ld->wv, e)) return e->code;
  if (m->cfg.qkv_bias && stack(m, bqkv, 3, &ld->bqkv, e)) return e->code;
  if (m->cfg.qk_norm && (place(m, &lw->q_norm, &ld->qn, e) || place(m, &lw->k_norm, &ld->kn, e))) return e->code;
  if (place(m, &lw->attn_norm, &ld->attn_norm, e) || stack(m, qkv, 3 - split, &ld->wqkv, e) ||
      place(m, &lw->wo, &ld->wo, e) || place(m, &lw->ffn_norm, &ld->ffn_norm, e) ||
      stack(m, w13, 2, &ld->w13, e) || place(m, &lw->w2, &ld->w2, e) ||
      alloc(m, cache, &ld->kc, e) || alloc(m, cache, &ld->vc, e))
    return e->code;
  return GC_OK;
}

/* Where argmax_step posts a step's id: the device's boxes 0 and 1 where
 * a kernel may store into them (greedy steps then mark the box, no copy
 * back: about 8 us a step of the 1B on an H100, bench/RESULTS.md session
 * 51), else two words of scratch (the steps then post a copy of the id). */
static int post_boxes(gc_llama_t *m, gc_err_t *e) {
  gc_err_t no = {0};
  m->box_mark = !gc_dev_box_addr(m->dev, 0, &m->box[0], &no) && !gc_dev_box_addr(m->dev, 1, &m->box[1], &no);
  if (m->box_mark) return GC_OK;
  if (no.code != GC_EUNSUPPORTED) return gc_err_set(e, no.code, "%s", no.msg);
  if (alloc(m, 8, &m->box[0], e)) return e->code;
  m->box[1] = m->box[0] + 4;
  return GC_OK;
}

static int alloc_activations(gc_llama_t *m, gc_err_t *e) {
  const gc_llama_config_t *c = &m->cfg;
  size_t a = gc_dtype_size(m->dt.act), t = (size_t)m->max_t;
  size_t hd = (size_t)c->head_dim, H = (size_t)c->n_heads, G = (size_t)c->n_kv_heads;
  size_t widest = (size_t)c->dim > (size_t)c->vocab_size ? (size_t)c->dim : (size_t)c->vocab_size;
  /* tp_gather's slack: the last row's values past the vocabulary */
  size_t slack = c->tp > 1 ? (size_t)(c->tp * gc_llama_head_rows(c) - c->vocab_size) * a : 0;
  if (alloc(m, t * c->dim * a, &m->x, e) || alloc(m, t * c->dim * a, &m->xn, e) ||
      alloc(m, t * (H + 2 * G) * hd * a, &m->qkv, e) || alloc(m, t * H * hd * a, &m->q, e) ||
      alloc(m, t * H * hd * a, &m->att, e) ||
      alloc(m, t * c->hidden_dim * a, &m->hb, e) || alloc(m, t * widest * 4 + slack, &m->logits, e) ||
      alloc(m, (t + 1) * 4, &m->step, e) || alloc(m, 3 * BMAX * 4, &m->bstep, e))
    return e->code;
  if (c->tp > 1 && alloc(m, t * (size_t)gc_llama_head_rows(c) * a, &m->hlogits, e)) return e->code;
  int split = 0;
  for (int l = 0; l < c->n_layers; l++) split |= m->dt.layer[l].split;
  if (split && alloc(m, t * (H + 2 * G) * hd * a, &m->qkv2, e)) return e->code;
  m->pos = m->step;
  m->tokens = m->step + 4;
  m->brows = m->bstep + BMAX * 4;
  return post_boxes(m, e);
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

/* The prefill plan the bundle records for this backend (recipe.h): none
 * recorded, the quantized plan. */
static int read_plan(gc_llama_t *m, gc_err_t *e) {
  int cpu = !strcmp(gc_dev_info(m->dev)->backend, "cpu");
  gc_err_t me = {0};
  char *v = gc_bundle_meta(gc_rt_bundle(m->rt), cpu ? GC_LLAMA_META_DEQ_CPU : GC_LLAMA_META_DEQ_GPU, &me);
  if (!v) return me.code ? gc_err_set(e, me.code, "%s", me.msg) : GC_OK; /* absent: the quantized plan */
  int64_t rows;
  int rc = gc_parse_i64(v, &rows) || rows < 0
               ? gc_err_set(e, GC_ECORRUPT, "bundle meta %s: '%.32s' is not a row count",
                            cpu ? GC_LLAMA_META_DEQ_CPU : GC_LLAMA_META_DEQ_GPU, v)
               : GC_OK;
  free(v);
  if (!rc) m->dt.deq_rows = rows;
  return rc;
}

/* The dense plan's scratch and ids, where a pass this model runs takes it:
 * the largest block-format layer matrix (in dt.weight) and ids 0..N-1 for
 * its most rows. */
static int alloc_deq(gc_llama_t *m, gc_err_t *e) {
  const gc_llama_config_t *c = &m->cfg;
  if (!m->dt.deq_rows || m->max_t < m->dt.deq_rows || m->max_t <= GC_LLAMA_FUSE_MAX) return GC_OK;
  gc_llama_steps_t s;
  gc_llama_steps(c, &m->dt, m->max_t, 1, &s);
  int64_t elems = 0, rows = 0;
  for (int l = 0; l < c->n_layers; l++) {
    gc_llama_layer_steps(&m->dt, l, &s);
    for (int i = 0; i < 5; i++) { /* a gather not taken is all 0; a split QKV's V rows (dq[4]) follow wq|wk's */
      int64_t n = s.dq[i].m * s.dq[i].n + (i == 0 ? s.dq[4].m * s.dq[4].n : 0);
      if (i < 4 && n > elems) elems = n;
      if (s.dq[i].m > rows) rows = s.dq[i].m;
    }
  }
  if (!rows) return GC_OK;
  int32_t *ids = gc_malloc((size_t)rows * sizeof *ids, e);
  if (!ids) return GC_ENOMEM;
  for (int64_t i = 0; i < rows; i++) ids[i] = (int32_t)i;
  int rc = alloc(m, (size_t)elems * gc_dtype_size(m->dt.weight), &m->deq, e);
  if (!rc) rc = alloc(m, (size_t)rows * sizeof *ids, &m->ids, e);
  if (!rc) rc = gc_dev_upload(m->dev, m->ids, ids, (size_t)rows * sizeof *ids, e);
  free(ids);
  return rc;
}

/* Whether p is a decode step's short-context attention (attn_short). */
static int is_attn_short(const gc_problem_t *p) { return !strcmp(p->op, "attention") && p->k > 0; }

/* Every kernel for decode (t = 1), for the largest prefill and, where
 * batched, for batched steps of 1 .. slots rows, so that a bundle missing
 * one fails now with its name, not mid-generation. */
static int resolve_kernels(gc_llama_t *m, gc_err_t *e) {
  int64_t ts[2] = {1, m->max_t};
  for (int i = 0; i < 2 + (m->batched ? m->slots : 0); i++) {
    gc_problems_t l = {0};
    int rc = i < 2 ? gc_llama_recipe(&m->cfg, &m->dt, ts[i], 1, &l, e)
                   : gc_llama_batch_recipe(&m->cfg, &m->dt, i - 1, &l, e);
    for (int j = 0; !rc && j < l.n; j++) {
      const gc_rt_kernel_t *k;
      gc_err_t miss = {0};
      if (!strcmp(l.v[j].op, "argmax_step")) /* optional (a bundle built before it): argmax serves */
        m->step_pos = gc_rt_find(m->rt, &l.v[j], &k, &miss) == GC_OK;
      else if (!is_attn_short(&l.v[j])) rc = gc_rt_find(m->rt, &l.v[j], &k, e);
      else if (gc_rt_find(m->rt, &l.v[j], &k, &miss) != GC_OK)
        m->no_attn_short = 1; /* optional (a bundle built before the buckets): attn serves every length */
    }
    gc_problems_free(&l);
    if (rc) return gc_err_prefix(e, "the bundle cannot run this model");
  }
  return GC_OK;
}

/* The O projection's L2 window by default: 3/5 of the device's L2 (30 MB
 * of an H100's or H200's 50; H100, the 1B's decode: 1007.8 tok/s with
 * none, 1036.0 at 20 MB, 1039.3 at 32, 1036.2 at 40, 1033.4 at 48;
 * bench/RESULTS.md, session 52) on sm_90 and newer, where it was measured
 * and the GEMVs ask for it in 16 KB bulk prefetches; 0 below (an A100's
 * one 128-byte prefetch.global.L2 a line, unmeasured) and where the device
 * does not say (gcore-run --l2-window sets it anywhere). */
static int64_t default_l2_window(gc_dev_t *dev) {
  const gc_dev_info_t *in = gc_dev_info(dev);
  if (strncmp(in->arch, "sm_", 3) || atoi(in->arch + 3) < 90) return 0;
  return (in->l2_bytes * 3 / 5) & ~(int64_t)15;
}

static int create(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, int ctx, int max_t,
                  int slots, int batched, gc_llama_t **out, gc_err_t *e) {
  *out = NULL;
  if (ctx < 1 || max_t < 1 || max_t > ctx)
    return gc_err_set(e, GC_EINVAL, "context %d / prefill %d out of range", ctx, max_t);
  if (slots < 1 || slots > BMAX)
    return gc_err_set(e, GC_EINVAL, "%d sequences at once: from 1 to %d", slots, BMAX);
  gc_llama_t *m = gc_calloc(1, sizeof *m, e);
  if (!m) return GC_ENOMEM;
  m->dev = dev;
  m->rt = rt;
  m->cfg = w->cfg;
  m->ctx = ctx;
  m->max_t = batched && max_t < slots ? slots : max_t; /* a batched step has up to slots rows */
  m->slots = slots;
  m->batched = batched;
  m->graphs = m->cfg.tp <= 1; /* see gc_llama_set_graphs */
  m->l2_window = default_l2_window(dev); /* gc_llama_set_l2_window */
  int rc = gc_llama_dtypes_for(w, gc_dev_info(dev)->backend, 1, &m->dt, e); /* w: a rank's share, or whole */
  if (!rc) rc = read_plan(m, e);
  m->slot_bytes = (size_t)ctx * m->cfg.n_kv_heads * m->cfg.head_dim * gc_dtype_size(m->dt.act);
  if (!rc && !(m->npos = gc_calloc((size_t)slots, sizeof *m->npos, e))) rc = GC_ENOMEM;
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
  for (int l = 0; !rc && l < m->cfg.n_layers; l++) rc = place_layer(m, l, &w->layers[l], &m->layers[l], e);
  if (!rc) rc = place(m, &w->tok_embeddings, &m->tok_emb, e);
  if (!rc) rc = place(m, &w->norm, &m->norm, e);
  if (!rc) rc = w->classifier.data == w->tok_embeddings.data ? (m->cls = m->tok_emb, GC_OK)
                                                              : place(m, &w->classifier, &m->cls, e);
  if (!rc) rc = upload_freqs(m, e);
  if (!rc) rc = alloc_activations(m, e);
  if (!rc) rc = alloc_deq(m, e);
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

int gc_llama_create(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, int ctx,
                    int max_t, gc_llama_t **out, gc_err_t *e) {
  return create(dev, rt, w, ctx, max_t, 1, 0, out, e);
}

int gc_llama_create_slots(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, int ctx,
                          int max_t, int slots, gc_llama_t **out, gc_err_t *e) {
  return create(dev, rt, w, ctx, max_t, slots, 1, out, e);
}

static void free_one(gc_llama_t *m);
typedef int (*rank_fn)(gc_llama_t *m, const void *arg, gc_err_t *e);
static int every_rank(gc_llama_t *m, rank_fn fn, const void *arg, gc_err_t *e);

static int rank_barrier(gc_llama_t *m, const void *arg, gc_err_t *e) {
  (void)arg;
  return gc_comm_barrier(m->comm, e);
}

/* The group's endpoints comms[0..tp): on the CPU a loopback group (ranks
 * as threads over host memory), on GPUs NCCL/RCCL over the ranks' devices,
 * which must be tp different devices of one backend. */
static int make_comms(gc_dev_t *const *devs, int tp, gc_comm_t **comms, gc_err_t *e) {
  const gc_dev_info_t *d0 = gc_dev_info(devs[0]);
  int ordinals[GC_LLAMA_TP_MAX];
  for (int r = 0; r < tp; r++) {
    const gc_dev_info_t *d = gc_dev_info(devs[r]);
    if (strcmp(d->backend, d0->backend))
      return gc_err_set(e, GC_EINVAL, "--tp %d: rank %d is on %s, rank 0 on %s", tp, r, d->backend, d0->backend);
    ordinals[r] = d->ordinal;
    for (int q = 0; !d->host_memory && q < r; q++)
      if (ordinals[q] == ordinals[r])
        return gc_err_set(e, GC_EINVAL, "--tp %d: ranks %d and %d are both on %s device %d (one device a rank)", tp,
                          q, r, d->backend, d->ordinal);
  }
  if (d0->host_memory) return gc_comm_loopback(tp, TP_TIMEOUT_S, comms, e);
  return gc_comm_nccl(devs, ordinals, tp, comms, e);
}

/* Rank r of a group: its shard of w on its device, with its endpoint. */
static int create_rank(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, const gc_llama_config_t *shard,
                       int r, gc_comm_t *comm, int ctx, int max_t, int slots, gc_llama_t **out, gc_err_t *e) {
  gc_llama_weights_t *ws;
  if (gc_weights_shard(w, shard, r, &ws, e)) return e->code;
  if (create(dev, rt, ws, ctx, max_t, slots ? slots : 1, slots > 0, out, e)) {
    gc_weights_close(ws);
    return e->code;
  }
  (*out)->shard = ws;
  (*out)->rank = r;
  (*out)->comm = comm;
  (*out)->graphs = gc_comm_capturable(comm); /* see gc_llama_set_graphs */
  return GC_OK;
}

int gc_llama_create_tp(gc_dev_t *const *devs, gc_rt_t *const *rts, const gc_llama_weights_t *w, int ctx,
                       int max_t, int slots, int tp, gc_llama_t **out, gc_err_t *e) {
  *out = NULL;
  gc_llama_config_t shard;
  if (gc_llama_shard(&w->cfg, tp, &shard, e)) return e->code;
  if (tp == 1) return create(devs[0], rts[0], w, ctx, max_t, slots ? slots : 1, slots > 0, out, e);
  if (gc_weights_check_split(w, tp, e)) return e->code; /* before any communicator is made */
  gc_comm_t *comms[GC_LLAMA_TP_MAX];
  if (make_comms(devs, tp, comms, e)) return e->code;
  gc_llama_t **ranks = gc_calloc((size_t)tp, sizeof *ranks, e);
  int rc = ranks ? GC_OK : GC_ENOMEM, made = 0;
  for (; !rc && made < tp; made++)
    if ((rc = create_rank(devs[made], rts[made], w, &shard, made, comms[made], ctx, max_t, slots, &ranks[made], e)))
      gc_err_prefix(e, "rank %d", made);
  if (rc) { /* ranks made own their endpoints */
    for (int r = 0; r < tp; r++) {
      if (ranks && ranks[r]) free_one(ranks[r]);
      else gc_comm_free(comms[r]);
    }
    free(ranks);
    return rc;
  }
  ranks[0]->ranks = ranks;
  /* one collective on every rank before any graph capture: NCCL sets up
   * its connections on a communicator's first collective, which a stream
   * capture must not record */
  if ((rc = every_rank(ranks[0], rank_barrier, NULL, e))) {
    gc_llama_free(ranks[0]);
    return rc;
  }
  *out = ranks[0];
  return GC_OK;
}

void gc_llama_free(gc_llama_t *m) {
  if (!m) return;
  for (int r = 1; m->ranks && r < m->cfg.tp; r++) free_one(m->ranks[r]);
  free(m->ranks);
  free_one(m);
}

/* Destroys one rank's captured steps (the next ones capture again). */
static void drop_graphs(gc_llama_t *m) {
  for (int i = 0; i < 4; i++)
    gc_dev_graph_destroy(m->dev, m->decode_graph[i / 2][i % 2]), m->decode_graph[i / 2][i % 2] = NULL;
  for (int r = 0; r <= BMAX; r++)
    for (int i = 0; i < 2; i++) gc_dev_graph_destroy(m->dev, m->batch_graph[r][i]), m->batch_graph[r][i] = NULL;
}

int gc_llama_set_bundle(gc_llama_t *m, gc_rt_t *rt, gc_err_t *e) {
  if (m->cfg.tp > 1) return gc_err_set(e, GC_EUNSUPPORTED, "a model of %d ranks keeps its bundles", m->cfg.tp);
  /* what the bundle decides, restored on an error */
  gc_rt_t *rt0 = m->rt;
  const int64_t rows0 = m->dt.deq_rows;
  const int step_pos0 = m->step_pos, no_short0 = m->no_attn_short, no_rope0 = m->no_qkv_rope;
  m->rt = rt;
  m->dt.deq_rows = 0, m->step_pos = 0, m->no_attn_short = 0, m->no_qkv_rope = 0;
  int rc = read_plan(m, e);
  if (!rc && m->dt.deq_rows != rows0)
    rc = gc_err_set(e, GC_EINVAL, "the bundle's dense plan starts at %lld rows, the model's at %lld",
                    (long long)m->dt.deq_rows, (long long)rows0);
  if (!rc) rc = resolve_kernels(m, e);
  if (rc) {
    m->rt = rt0, m->dt.deq_rows = rows0;
    m->step_pos = step_pos0, m->no_attn_short = no_short0, m->no_qkv_rope = no_rope0;
    return rc;
  }
  drop_graphs(m); /* captured with the old bundle's kernels */
  return GC_OK;
}

/* Free one rank's model (or the model without tensor parallelism). */
static void free_one(gc_llama_t *m) {
  if (!m) return;
  drop_graphs(m);
  for (int i = 0; i < m->nowned; i++) gc_dev_free(m->dev, m->owned[i]);
  free(m->owned);
  gc_weights_close(m->conv);
  gc_weights_close(m->shard);
  gc_comm_free(m->comm);
  free(m->layers);
  free(m->npos);
  free(m);
}

const gc_llama_config_t *gc_llama_config(const gc_llama_t *m) { return &m->cfg; }
int gc_llama_pos(const gc_llama_t *m) { return m->npos[0]; }
int gc_llama_slots(const gc_llama_t *m) { return m->slots; }
int gc_llama_ctx(const gc_llama_t *m) { return m->ctx; }
int gc_llama_max_pass(const gc_llama_t *m) { return m->max_t; }

int gc_llama_slot_pos(const gc_llama_t *m, int slot) {
  assert(slot >= 0 && slot < m->slots);
  return m->npos[slot];
}

void gc_llama_slot_keep(gc_llama_t *m, int slot, int pos) {
  assert(slot >= 0 && slot < m->slots && pos >= 0 && pos <= m->npos[slot]);
  for (int r = 0; r < (m->ranks ? m->cfg.tp : 1); r++) (m->ranks ? m->ranks[r] : m)->npos[slot] = pos;
}

void gc_llama_slot_reset(gc_llama_t *m, int slot) { gc_llama_slot_keep(m, slot, 0); }

int gc_llama_slot_copy(gc_llama_t *m, int dst, int src, int from, int pos, gc_err_t *e) {
  assert(dst >= 0 && dst < m->slots && src >= 0 && src < m->slots && dst != src && from >= 0 && from <= pos &&
         from <= m->npos[dst] && pos <= m->npos[src]);
  for (int r = 0; r < (m->ranks ? m->cfg.tp : 1); r++) (m->ranks ? m->ranks[r] : m)->npos[dst] = 0;
  for (int r = 0; r < (m->ranks ? m->cfg.tp : 1); r++) {
    gc_llama_t *k = m->ranks ? m->ranks[r] : m;
    size_t row = k->slot_bytes / (size_t)k->ctx, n = row * (size_t)(pos - from); /* row: a position's keys */
    gc_dptr_t to = (gc_dptr_t)(k->slot_bytes * (size_t)dst + row * (size_t)from),
              at = (gc_dptr_t)(k->slot_bytes * (size_t)src + row * (size_t)from);
    for (int l = 0; l < k->cfg.n_layers; l++)
      if (gc_dev_copy(k->dev, k->layers[l].kc + to, k->layers[l].kc + at, n, e) ||
          gc_dev_copy(k->dev, k->layers[l].vc + to, k->layers[l].vc + at, n, e))
        return e->code;
  }
  for (int r = 0; r < (m->ranks ? m->cfg.tp : 1); r++) (m->ranks ? m->ranks[r] : m)->npos[dst] = pos;
  return GC_OK;
}

/* A loopback collective runs when called: it cannot be captured (NCCL's
 * are stream work, captured with the step). */
void gc_llama_set_graphs(gc_llama_t *m, int on) {
  for (int r = 0; r < (m->ranks ? m->cfg.tp : 1); r++) {
    gc_llama_t *k = m->ranks ? m->ranks[r] : m;
    k->graphs = on && (k->cfg.tp <= 1 || gc_comm_capturable(k->comm));
  }
}
void gc_llama_set_ahead(gc_llama_t *m, int on) { m->no_ahead = !on; }

void gc_llama_set_l2_window(gc_llama_t *m, int64_t bytes) {
  for (int r = 0; r < (m->ranks ? m->cfg.tp : 1); r++) {
    gc_llama_t *k = m->ranks ? m->ranks[r] : m;
    int64_t v = bytes < 0 ? default_l2_window(k->dev) : bytes;
    v &= ~(int64_t)15;
    if (v == k->l2_window) continue;
    k->l2_window = v;
    drop_graphs(k); /* captured with the windows the step had */
  }
}
void gc_llama_set_profile(gc_llama_t *m, gc_prof_t *p) { m->prof = p; }
gc_prof_t *gc_llama_profile(const gc_llama_t *m) { return m->prof; }

int gc_llama_leave_out_check(const char *op, gc_err_t *e) {
  return !op || !*op ? GC_OK : gc_op_check_name(op, e);
}

int gc_llama_leave_out(gc_llama_t *m, const char *op, gc_err_t *e) {
  if (gc_llama_leave_out_check(op, e)) return e->code;
  for (int r = 0; r < (m->ranks ? m->cfg.tp : 1); r++) {
    gc_llama_t *k = m->ranks ? m->ranks[r] : m;
    if (!strcmp(k->leave_out, op ? op : "")) continue; /* as it is: the captured steps stay */
    snprintf(k->leave_out, sizeof k->leave_out, "%s", op ? op : "");
    drop_graphs(k); /* captured with the launches the step had */
  }
  return GC_OK;
}
void gc_llama_reset(gc_llama_t *m) { gc_llama_slot_reset(m, 0); }
int64_t gc_llama_graph_replays(const gc_llama_t *m) { return m->replays; }

/* ---- the forward ---------------------------------------------------------- */

/* Launch p's kernel on bufs, with the L2 window [pf, pf + n) where the
 * kernel takes one (gc_rt_launch_window). */
static int run_window(gc_llama_t *m, const gc_problem_t *p, const gc_op_scalars_t *sc,
                      const gc_dptr_t *bufs, gc_dptr_t pf, int64_t n, gc_err_t *e) {
  const gc_rt_kernel_t *k;
  gc_argpack_t pk;
  if (m->decoding && m->leave_out[0] && !strcmp(p->op, m->leave_out)) return GC_OK; /* gc_llama_leave_out */
  if (gc_rt_find(m->rt, p, &k, e)) return e->code;
  gc_op_args(p, sc, bufs, &pk);
  if (!m->prof) return gc_rt_launch_window(m->rt, k, p, pk.args, pf, n, e);
  double flops, bytes;
  gc_op_work(p, sc, &flops, &bytes);
  if (gc_prof_begin(m->prof, e) || gc_rt_launch_window(m->rt, k, p, pk.args, pf, n, e)) return e->code;
  return gc_prof_end(m->prof, k->d.template_name, p, flops, bytes, e);
}

static int run(gc_llama_t *m, const gc_problem_t *p, const gc_op_scalars_t *sc,
               const gc_dptr_t *bufs, gc_err_t *e) {
  return run_window(m, p, sc, bufs, 0, 0, e);
}

/* Tensor parallelism around a row-parallel gemm_add of rows rows into x:
 * before it, ranks but 0 zero their x (the residual is added once, by
 * rank 0); after it, x is summed over the ranks. No-ops without. */
static int tp_zero(gc_llama_t *m, int64_t rows, gc_err_t *e) {
  if (m->cfg.tp <= 1 || m->rank == 0) return GC_OK;
  return gc_dev_memset(m->dev, m->x, 0, (size_t)rows * (size_t)m->cfg.dim * gc_dtype_size(m->dt.act), e);
}

/* File a collective that moved rows × n elements under the profile, as a
 * row of its own ("all_reduce", "all_gather" over m n; kernel
 * "collective"): the time a rank spends in it, waiting for its peers
 * included. */
static int prof_collective(gc_llama_t *m, const char *op, int64_t rows, int64_t n, gc_err_t *e) {
  gc_problem_t p = {"", m->dt.act, m->dt.act, m->dt.act, rows, n, 0, 0, 0, 0};
  snprintf(p.op, sizeof p.op, "%s", op);
  double bytes = (double)rows * (double)n * (double)gc_dtype_size(m->dt.act);
  return gc_prof_end(m->prof, "collective", &p, 0, bytes, e);
}

static int tp_reduce(gc_llama_t *m, int64_t rows, gc_err_t *e) {
  if (m->cfg.tp <= 1) return GC_OK;
  if (m->prof && gc_prof_begin(m->prof, e)) return e->code;
  if (gc_comm_all_reduce(m->comm, m->x, (size_t)rows * (size_t)m->cfg.dim, m->dt.act, e)) return e->code;
  return m->prof ? prof_collective(m, "all_reduce", rows, m->cfg.dim, e) : GC_OK;
}

/* Every rank's rows of the LM head (hlogits [rows, hv], hv = ceil(vocab /
 * tp)) into logits [rows, vocab], row by row in ascending order: row i's
 * gather writes tp·hv values from i·vocab on, those past the vocabulary
 * (the zero rows of the last ranks' shares) into the start of row i + 1,
 * which its own gather then overwrites, or (the last row) into the
 * buffer's slack (alloc_activations). */
static int tp_gather(gc_llama_t *m, int rows, gc_err_t *e) {
  size_t a = gc_dtype_size(m->dt.act), hv = (size_t)gc_llama_head_rows(&m->cfg), v = (size_t)m->cfg.vocab_size;
  if (m->prof && gc_prof_begin(m->prof, e)) return e->code;
  for (int i = 0; i < rows; i++)
    if (gc_comm_all_gather(m->comm, m->hlogits + (gc_dptr_t)(i * hv * a), m->logits + (gc_dptr_t)(i * v * a), hv,
                           m->dt.act, e))
      return e->code;
  return m->prof ? prof_collective(m, "all_gather", rows, (int64_t)v, e) : GC_OK;
}

/* Layer matrix i (qkv, wo, w13, w2) of blocks at W as its step reads it,
 * into *out: with the dense plan (s->dq[i] set), W dequantized whole into
 * the scratch; else W itself. The scratch holds one matrix at a time. */
static int dequant(gc_llama_t *m, const gc_llama_steps_t *s, int i, gc_dptr_t W, gc_dptr_t *out,
                   const gc_op_scalars_t *sc, gc_err_t *e) {
  *out = W;
  if (!s->dq[i].op[0]) return GC_OK;
  const gc_dptr_t gather[] = {m->ids, W, m->deq};
  *out = m->deq;
  return run(m, &s->dq[i], sc, gather, e);
}

/* The QKV matrix of layer L as its step reads it (dequant's), a split
 * layer's with the dense plan: wq|wk's rows, then wv's, in the scratch. */
static int dequant_qkv(gc_llama_t *m, const gc_llama_steps_t *s, const layer_dev_t *L, gc_dptr_t *out,
                       const gc_op_scalars_t *sc, gc_err_t *e) {
  int rc = dequant(m, s, 0, L->wqkv, out, sc, e);
  if (rc || !s->dq[4].op[0]) return rc;
  size_t at = (size_t)(s->dq[0].m * s->dq[0].n) * gc_dtype_size(m->dt.weight);
  const gc_dptr_t gather[] = {m->ids, L->wv, m->deq + (gc_dptr_t)at};
  return run(m, &s->dq[4], sc, gather, e);
}

/* A split layer's projections (recipe.h): Q|K (weights wqk) and V (wv)
 * from the same input, into qkv's rows side by side (one row: V's just
 * past Q|K's; more: each into qkv2, then their join). */
static int qkv_split(gc_llama_t *m, const gc_llama_steps_t *s, const layer_dev_t *L, gc_dptr_t wqk,
                     const gc_op_scalars_t *sc, gc_err_t *e) {
  const size_t a = gc_dtype_size(m->dt.act);
  const int join = s->cat.op[0] != 0;
  const gc_dptr_t qk = join ? m->qkv2 : m->qkv,
                  v = join ? m->qkv2 + (gc_dptr_t)(s->qkv.m * s->qkv.n * a) : m->qkv + (gc_dptr_t)(s->qkv.n * a);
  if (s->fused) {
    const gc_dptr_t p1[] = {m->x, wqk, qk, L->attn_norm}, p2[] = {m->x, L->wv, v, L->attn_norm};
    if (run(m, &s->qkv, sc, p1, e) || run(m, &s->qkv_v, sc, p2, e)) return e->code;
  } else {
    const gc_dptr_t norm1[] = {m->x, L->attn_norm, m->xn}, p1[] = {m->xn, wqk, qk}, p2[] = {m->xn, L->wv, v};
    if (run(m, &s->norm, sc, norm1, e) || run(m, &s->qkv, sc, p1, e) || run(m, &s->qkv_v, sc, p2, e))
      return e->code;
  }
  const gc_dptr_t cat[] = {qk, v, m->qkv};
  return join ? run(m, &s->cat, sc, cat, e) : GC_OK;
}

/* The QKV projection (weights wqkv) and the RoPE/KV write of a layer: one launch of
 * rmsnorm_gemm_rope_kv (with Qwen2's biases: rmsnorm_gemm_bias_rope_kv, b
 * its last buffer) where the steps fold them (s->qkv_rope) and the
 * bundle has a kernel for it; else the projection (rmsnorm_gemm, or
 * rmsnorm then gemm), the biases added in place (s->bias, a batched step
 * of a model with them), the q and k heads normalised in place
 * (s->qk_norm, likewise) and rope (a single sequence's folds either step:
 * bias_rope_kv, qk_norm_rope_kv, whose last buffers are b or qn, kn). A
 * bundle built before the fused op has none: the first miss turns it off
 * for the model. */
static int qkv_rope(gc_llama_t *m, const gc_llama_steps_t *s, const layer_dev_t *L, gc_dptr_t wqkv,
                    gc_dptr_t kc, gc_dptr_t vc, gc_dptr_t where, const gc_op_scalars_t *sc, gc_err_t *e) {
  const gc_dptr_t norm1[] = {m->x, L->attn_norm, m->xn}, qkv[] = {m->xn, wqkv, m->qkv},
                  fqkv[] = {m->x, wqkv, m->qkv, L->attn_norm},
                  rope[] = {m->qkv, m->q, kc, vc, m->inv_freq, where, L->bqkv ? L->bqkv : L->qn, L->kn},
                  bias[] = {m->qkv, L->bqkv, m->qkv},
                  qkn[] = {m->qkv, L->qn, L->kn},
                  both[] = {m->x, wqkv, m->q, L->attn_norm, kc, vc, m->inv_freq, where, L->bqkv};
  if (s->qkv_rope && !m->no_qkv_rope) {
    const gc_rt_kernel_t *k;
    gc_err_t miss = {0};
    int rc = gc_rt_find(m->rt, &s->qkv, &k, &miss);
    if (rc == GC_OK) return run(m, &s->qkv, sc, both, e);
    if (rc != GC_ENOTFOUND) return gc_err_set(e, rc, "%s", miss.msg);
    m->no_qkv_rope = 1;
  }
  gc_problem_t q = s->qkv_rope ? gc_llama_qkv_unfused(&s->qkv) : s->qkv;
  if (s->qkv_v.op[0] ? qkv_split(m, s, L, wqkv, sc, e)
      : s->fused     ? run(m, &q, sc, fqkv, e)
                     : run(m, &s->norm, sc, norm1, e) || run(m, &q, sc, qkv, e))
    return e->code;
  if ((s->bias.op[0] && run(m, &s->bias, sc, bias, e)) || (s->qk_norm.op[0] && run(m, &s->qk_norm, sc, qkn, e)))
    return e->code;
  return run(m, &s->rope, sc, rope, e);
}

/* Whether a decode step at position pos is in the short-context bucket
 * (GC_LLAMA_ATTN_SHORT keys at most) and the bundle has its kernel. */
static int short_bucket(const gc_llama_t *m, int64_t pos) {
  return pos + 1 <= GC_LLAMA_ATTN_SHORT && !m->no_attn_short;
}

/* Whether a step of s at position pos runs its short-context attention
 * (attn_short: a decode step in the bucket). */
static int short_attention(const gc_llama_t *m, const gc_llama_steps_t *s, int64_t pos) {
  return s->attn_short.op[0] && short_bucket(m, pos);
}

/* The attention step of s at sc's position (see short_attention). */
static const gc_problem_t *attention(const gc_llama_t *m, const gc_llama_steps_t *s, const gc_op_scalars_t *sc) {
  return short_attention(m, s, sc->pos0) ? &s->attn_short : &s->attn;
}

/* One layer of a pass (steps s). Single-sequence passes read and write
 * the cache of one slot (kc, vc: its first row) at the position in m->pos;
 * batched steps (s->rope is rope_kv_batch) the whole cache at the rows'
 * own positions and slots (m->brows). sc carries the scalars. */
static int layer(gc_llama_t *m, const gc_llama_steps_t *s, const layer_dev_t *L, gc_dptr_t kc,
                 gc_dptr_t vc, gc_dptr_t where, const gc_op_scalars_t *sc, gc_err_t *e) {
  gc_dptr_t w; /* each matrix as its step reads it: its blocks, or the scratch */
  if (dequant_qkv(m, s, L, &w, sc, e) || qkv_rope(m, s, L, w, kc, vc, where, sc, e)) return e->code;
  const gc_dptr_t attn[] = {m->q, kc, vc, m->att, where};
  if (run(m, attention(m, s, sc), sc, attn, e) || dequant(m, s, 1, L->wo, &w, sc, e)) return e->code;
  const gc_dptr_t wo[] = {m->att, w, m->x};
  /* O's L2 window: the first of gate/up's bytes as stored (W[2N,K] in the
   * layer's dtype: a dequantizing pass's swiglu.tb is the scratch's) */
  const gc_dtype_t w13t = (gc_dtype_t)m->dt.layer[L - m->layers].w13;
  int64_t w13_bytes = (int64_t)gc_dtype_bytes(w13t, 2 * s->swiglu.n * s->swiglu.k) & ~(int64_t)15;
  int64_t pf_n = m->l2_window < w13_bytes ? m->l2_window : w13_bytes;
  if (tp_zero(m, s->wo.m, e) || run_window(m, &s->wo, sc, wo, pf_n ? L->w13 : 0, pf_n, e) ||
      tp_reduce(m, s->wo.m, e) ||
      dequant(m, s, 2, L->w13, &w, sc, e))
    return e->code;
  const gc_dptr_t norm2[] = {m->x, L->ffn_norm, m->xn}, ffn[] = {m->xn, w, m->hb},
                  fffn[] = {m->x, w, m->hb, L->ffn_norm};
  if (s->fused ? run(m, &s->swiglu, sc, fffn, e)
               : run(m, &s->norm, sc, norm2, e) || run(m, &s->swiglu, sc, ffn, e))
    return e->code;
  if (dequant(m, s, 3, L->w2, &w, sc, e)) return e->code;
  const gc_dptr_t w2[] = {m->hb, w, m->x};
  if (tp_zero(m, s->w2.m, e) || run(m, &s->w2, sc, w2, e)) return e->code;
  return tp_reduce(m, s->w2.m, e);
}

/* Logits in the activation dtype, as fp32 on the host. The fp32 buffer
 * doubles as the staging area: narrow values are expanded from its end. */
static int download_logits(gc_llama_t *m, float *out, size_t n, gc_err_t *e) {
  size_t es = gc_dtype_size(m->dt.act);
  if (m->dt.act == GC_DT_F32) return gc_dev_download(m->dev, out, m->logits, n * 4, e);
  unsigned char *stage = (unsigned char *)out + n * (4 - es);
  if (gc_dev_download(m->dev, stage, m->logits, n * es, e)) return e->code;
  gc_to_f32(stage, m->dt.act, out, n);
  return GC_OK;
}

int gc_llama_forward(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                     float *logits, gc_err_t *e) {
  return gc_llama_forward_ex(m, tokens, t, all_rows, logits, NULL, e);
}

/* The final norm, the LM head over rows rows ending at row t - 1 of x,
 * and (argmax) the device argmax of each of them into ids: a decode step's
 * with argmax_step where the bundle has it, which also moves m->pos on. */
static int launch_head(gc_llama_t *m, const gc_llama_steps_t *s, int t, int rows, int argmax,
                       gc_dptr_t ids, const gc_op_scalars_t *sc, gc_err_t *e) {
  size_t a = gc_dtype_size(m->dt.act);
  gc_dptr_t last = m->x + (gc_dptr_t)((size_t)(t - rows) * (size_t)m->cfg.dim * a);
  /* one row of argmax (single sequence): the last row of logits; a batch: all */
  gc_dptr_t amx = s->argmax.m == 1 ? m->logits + (gc_dptr_t)((size_t)(rows - 1) * m->cfg.vocab_size * a)
                                   : m->logits;
  gc_dptr_t out = m->cfg.tp > 1 ? m->hlogits : m->logits; /* this rank's vocabulary rows */
  const gc_dptr_t fn[] = {last, m->norm, m->xn}, head[] = {m->xn, m->cls, out},
                  fhead[] = {last, m->cls, out, m->norm}, am[] = {amx, ids, m->pos, m->box[0], m->box[1]};
  if (s->fused ? run(m, &s->head, sc, fhead, e)
               : run(m, &s->fnorm, sc, fn, e) || run(m, &s->head, sc, head, e))
    return e->code;
  if (m->cfg.tp > 1 && tp_gather(m, rows, e)) return e->code;
  if (!argmax) return GC_OK;
  return run(m, s->argmax_step.op[0] && m->step_pos ? &s->argmax_step : &s->argmax, sc, am, e);
}

/* Launch the whole forward of t tokens in slot (rows of logits; with
 * argmax, the next id lands in tokens[0]). Everything it reads that
 * changes between steps (tokens, position) is in device memory, so a
 * capture replays. */
static int launch_forward(gc_llama_t *m, int slot, int t, int rows, int argmax, gc_err_t *e) {
  gc_llama_steps_t s;
  gc_llama_steps(&m->cfg, &m->dt, t, rows, &s);
  gc_op_scalars_t sc = {(float)m->cfg.rms_norm_eps, m->npos[slot],
                        m->cfg.rope_layout == GC_ROPE_PAIRS ? 1 : 0,
                        (float)(1.0 / sqrt((double)m->cfg.head_dim)), m->ctx};
  const gc_dptr_t emb[] = {m->tokens, m->tok_emb, m->x};
  gc_dptr_t off = (gc_dptr_t)(m->slot_bytes * (size_t)slot);
  if (run(m, &s.embed, &sc, emb, e)) return e->code;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    const layer_dev_t *L = &m->layers[l];
    gc_llama_layer_steps(&m->dt, l, &s); /* the layer's weight dtypes */
    if (layer(m, &s, L, L->kc + off, L->vc + off, m->pos, &sc, e)) return e->code;
  }
  return launch_head(m, &s, t, rows, argmax, m->tokens, &sc, e);
}

/* Launch a batched decode step of M rows (tokens, positions and slots in
 * m->bstep); logits of every row, or (argmax) their ids in bstep[0..M). */
static int launch_batch(gc_llama_t *m, int M, int argmax, int64_t pos_mean, gc_err_t *e) {
  gc_llama_steps_t s;
  gc_llama_batch_steps(&m->cfg, &m->dt, M, &s);
  gc_op_scalars_t sc = {(float)m->cfg.rms_norm_eps, pos_mean, /* pos0: for profiles only */
                        m->cfg.rope_layout == GC_ROPE_PAIRS ? 1 : 0,
                        (float)(1.0 / sqrt((double)m->cfg.head_dim)), m->ctx};
  const gc_dptr_t emb[] = {m->bstep, m->tok_emb, m->x};
  if (run(m, &s.embed, &sc, emb, e)) return e->code;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    const layer_dev_t *L = &m->layers[l];
    gc_llama_layer_steps(&m->dt, l, &s); /* the layer's weight dtypes */
    if (layer(m, &s, L, L->kc, L->vc, m->brows, &sc, e)) return e->code;
  }
  return launch_head(m, &s, M, M, argmax, m->bstep, &sc, e);
}

/* Run launch (a decode step) as one graph replay, captured into *g on
 * first use. Returns GC_EUNSUPPORTED (and turns graphs off) where the
 * backend has none. */
typedef int (*launch_fn)(gc_llama_t *m, int a, int b, gc_err_t *e);

static int replay(gc_llama_t *m, gc_graph_t **g, launch_fn launch, int a, int b, gc_err_t *e) {
  if (!*g) {
    gc_err_t probe = {0};
    if (gc_dev_graph_begin(m->dev, &probe)) {
      m->graphs = 0;
      return GC_EUNSUPPORTED;
    }
    int rc = launch(m, a, b, e);
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

static int decode_one(gc_llama_t *m, int argmax, int unused, gc_err_t *e) {
  (void)unused;
  return launch_forward(m, 0, 1, 1, argmax, e);
}

static int decode_rows(gc_llama_t *m, int M, int argmax, gc_err_t *e) {
  return launch_batch(m, M, argmax, 0, e);
}

/* The results of a pass of rows rows: the ids the device picked (next)
 * or the logits. */
static int results(gc_llama_t *m, gc_dptr_t ids, int rows, float *logits, int32_t *next,
                   gc_err_t *e) {
  if (gc_dev_sync(m->dev, e)) return e->code;
  if (m->rank > 0) return GC_OK; /* rank 0 returns the group's results */
  if (next) return gc_dev_download(m->dev, next, ids, (size_t)rows * sizeof *next, e);
  return download_logits(m, logits, (size_t)rows * m->cfg.vocab_size, e);
}

static int check_tokens(const gc_llama_t *m, const int32_t *tokens, int t, gc_err_t *e) {
  for (int i = 0; i < t; i++)
    if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
      return gc_err_set(e, GC_EINVAL, "token id %d is outside the vocabulary [0, %d)",
                        (int)tokens[i], m->cfg.vocab_size);
  return GC_OK;
}

/* ---- every rank ------------------------------------------------------------ */

/* A pass on one rank: fn(m, arg, e) where m is the rank's model (rank_fn). */

typedef struct rank_run {
  gc_llama_t *m;
  rank_fn fn;
  const void *arg;
  int rc;
  gc_err_t e;
} rank_run_t;

/* Run one rank's part; a failure stops the group (its peers' collectives
 * return at once). */
static void *rank_main(void *p) {
  rank_run_t *r = p;
  r->rc = r->fn(r->m, r->arg, &r->e);
  if (r->rc) gc_comm_abort(r->m->comm, &r->e);
  return NULL;
}

/* fn on every rank of m's group at once, rank 0 on this thread, the others
 * on threads of their own; without tensor parallelism, fn(m). Returns when
 * every rank has; on failure the group's first ("rank R: why"). */
static int every_rank(gc_llama_t *m, rank_fn fn, const void *arg, gc_err_t *e) {
  int tp = m->cfg.tp;
  if (tp <= 1) return fn(m, arg, e);
  rank_run_t *runs = gc_calloc((size_t)tp, sizeof *runs, e);
  pthread_t *th = runs ? gc_calloc((size_t)tp, sizeof *th, e) : NULL;
  if (!th) {
    free(runs);
    return GC_ENOMEM;
  }
  int started = 1, failed = 0;
  for (int r = 0; r < tp; r++) runs[r] = (rank_run_t){m->ranks[r], fn, arg, 0, {0}};
  for (; started < tp; started++)
    if (pthread_create(&th[started], NULL, rank_main, &runs[started])) {
      gc_err_set(&runs[started].e, GC_EDEVICE, "could not start its thread");
      gc_comm_abort(m->ranks[started]->comm, &runs[started].e);
      break;
    }
  rank_main(&runs[0]);
  for (int r = 1; r < started; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < tp; r++) failed |= runs[r].rc != GC_OK;
  int rc = failed || started < tp ? gc_comm_failure(m->comm, e) : GC_OK;
  free(th);
  free(runs);
  return rc;
}

/* ---- passes ----------------------------------------------------------------- */

/* A pass of t tokens in slot: GC_EINVAL (positions unchanged) unless it
 * fits the model's passes and the slot's context and every id is in the
 * vocabulary. */
static int check_pass(const gc_llama_t *m, int slot, const int32_t *tokens, int t, gc_err_t *e) {
  if (t < 1 || t > m->max_t)
    return gc_err_set(e, GC_EINVAL, "%d tokens in one pass; this model was set up for at most %d",
                      t, m->max_t);
  if (m->npos[slot] + t > m->ctx)
    return gc_err_set(e, GC_EINVAL, "context full: %d + %d tokens exceed --ctx %d", m->npos[slot], t,
                      m->ctx);
  return check_tokens(m, tokens, t, e);
}

typedef struct slot_pass {
  int slot, t, all_rows;
  const int32_t *tokens;
  float *logits;
  int32_t *next;
} slot_pass_t;

/* One rank's part of a checked pass (slot_pass_t), as gc_llama_forward_ex. */
static int run_slot(gc_llama_t *m, const void *arg, gc_err_t *e) {
  const slot_pass_t *p = arg;
  int slot = p->slot, t = p->t;
  int32_t stage[1 + 4096];
  int32_t *step = t < 4096 ? stage : gc_malloc((size_t)(t + 1) * sizeof *step, e);
  if (!step) return GC_ENOMEM;
  step[0] = m->npos[slot];
  memcpy(step + 1, p->tokens, (size_t)t * sizeof *p->tokens);
  int rows = p->all_rows ? t : 1;
  double t0 = gc_now();
  if (m->prof) gc_prof_phase(m->prof, t > 1 ? "prefill" : "decode");
  m->decoding = t == 1;
  int rc = gc_dev_upload(m->dev, m->step, step, (size_t)(t + 1) * sizeof *step, e);
  if (step != stage) free(step);
  if (rc) return rc;
  rc = GC_EUNSUPPORTED;
  if (slot == 0 && t == 1 && rows == 1 && m->graphs && !m->prof) { /* the graph is slot 0's */
    rc = replay(m, &m->decode_graph[short_bucket(m, m->npos[0])][p->next != NULL], decode_one,
                p->next != NULL, 0, e); /* the graph of the step's context bucket */
    m->replays += rc == GC_OK;
  }
  if (rc == GC_EUNSUPPORTED) rc = launch_forward(m, slot, t, rows, p->next != NULL, e);
  if (!rc) rc = results(m, m->tokens, p->next ? 1 : rows, p->logits, p->next, e);
  if (rc) return rc;
  if (m->prof && gc_prof_collect(m->prof, gc_now() - t0, e)) return e->code;
  m->npos[slot] += t;
  return GC_OK;
}

/* tokens[0..t) at slot's position, as gc_llama_forward_ex. */
static int forward_slot(gc_llama_t *m, int slot, const int32_t *tokens, int t, int all_rows,
                        float *logits, int32_t *next, gc_err_t *e) {
  if (check_pass(m, slot, tokens, t, e)) return e->code;
  slot_pass_t p = {slot, t, all_rows, tokens, logits, next};
  return every_rank(m, run_slot, &p, e);
}
int gc_llama_forward_ex(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                        float *logits, int32_t *next, gc_err_t *e) {
  return forward_slot(m, 0, tokens, t, all_rows, logits, next, e);
}

int gc_llama_slot_forward(gc_llama_t *m, int slot, const int32_t *tokens, int t, int all_rows, float *logits,
                          int32_t *next, gc_err_t *e) {
  if (slot < 0 || slot >= m->slots)
    return gc_err_set(e, GC_EINVAL, "slot %d: this model has slots 0 .. %d", slot, m->slots - 1);
  return forward_slot(m, slot, tokens, t, all_rows && !next, logits, next, e);
}

/* ---- greedy decoding, the device one step ahead ------------------------- */

/* Step k of gc_llama_greedy, enqueued: slot 0's token at position pos (put
 * there, or step k - 1's argmax where that wrote it: m->tokens), its argmax
 * posted to box (pos % 2: where argmax_step stores it); *replayed: whether
 * it is a graph replay (counted in m->replays). Only the launches see pos
 * as the host's position. The device's position is written for the first
 * step, and for every step where the bundle has no argmax_step (with it,
 * step k - 1 moved it on); with argmax_step and boxes the device can store
 * into, the id is not copied back but its box marked, so that nothing but
 * the mark's event lies between two replays (bench/RESULTS.md, session 51). */
static int greedy_enqueue(gc_llama_t *m, int pos, int first, int *replayed, gc_err_t *e) {
  const int box = pos % 2;
  if ((first || !m->step_pos) && gc_dev_put32(m->dev, m->pos, (uint32_t)pos, e)) return e->code;
  int held = m->npos[0], rc = GC_EUNSUPPORTED;
  m->npos[0] = pos; /* sc.pos0 and the attention's bucket (launch_forward) */
  if (m->graphs) {
    rc = replay(m, &m->decode_graph[short_bucket(m, pos)][1], decode_one, 1, 0, e);
    m->replays += *replayed = rc == GC_OK;
  }
  if (rc == GC_EUNSUPPORTED) rc = launch_forward(m, 0, 1, 1, 1, e);
  m->npos[0] = held;
  if (rc) return rc;
  return m->step_pos && m->box_mark ? gc_dev_mark(m->dev, box, e) /* argmax_step stored it there */
                                    : gc_dev_post(m->dev, box, m->tokens, sizeof(int32_t), e);
}

int gc_llama_count_ids(void *u, int32_t id, gc_err_t *e) {
  (void)id, (void)e;
  ++*(int *)u;
  return 0;
}

/* gc_llama_greedy one pass at a time. */
static int greedy_loop(gc_llama_t *m, int32_t tok, int n, gc_llama_emit_fn emit, void *u, gc_err_t *e) {
  for (int i = 0; i < n && m->npos[0] < m->ctx; i++) {
    int32_t next;
    if (gc_llama_forward_ex(m, &tok, 1, 0, NULL, &next, e)) return e->code;
    int r = emit(u, next, e);
    if (r) return r < 0 ? e->code : GC_OK;
    tok = next;
  }
  return GC_OK;
}

int gc_llama_greedy(gc_llama_t *m, int32_t tok, int n, gc_llama_emit_fn emit, void *u, gc_err_t *e) {
  if (n < 1) return GC_OK;
  if (check_pass(m, 0, &tok, 1, e)) return e->code;
  if (m->cfg.tp > 1 || m->prof || m->no_ahead) return greedy_loop(m, tok, n, emit, u, e);
  int pos0 = m->npos[0], steps = n < m->ctx - pos0 ? n : m->ctx - pos0;
  m->decoding = 1;
  int rc = gc_dev_put32(m->dev, m->tokens, (uint32_t)tok, e), queued = 0, stop = 0;
  int replayed[2] = {0, 0}; /* by box: step k's is its position's parity, (pos0 + k) % 2 */
  for (; !rc && queued < steps && queued < 2; queued++)
    rc = greedy_enqueue(m, pos0 + queued, queued == 0, &replayed[(pos0 + queued) % 2], e);
  for (int k = 0; !rc && k < queued; k++) {
    int32_t id;
    if ((rc = gc_dev_take(m->dev, (pos0 + k) % 2, &id, sizeof id, e))) break;
    if (stop) { /* the step run ahead past a stop: not one of the pass's */
      m->replays -= replayed[(pos0 + k) % 2];
      continue;
    }
    if (id < 0 || id >= m->cfg.vocab_size) {
      rc = gc_err_set(e, GC_EDEVICE, "the device's argmax %d is outside the vocabulary", (int)id);
      break;
    }
    m->npos[0] = pos0 + k + 1; /* tok and ids 0 .. k - 1 are in the cache */
    int r = emit(u, id, e);
    if (r < 0) rc = e->code;
    stop = r != 0;
    if (!rc && !stop && queued < steps &&
        !(rc = greedy_enqueue(m, pos0 + queued, 0, &replayed[(pos0 + queued) % 2], e)))
      queued++;
  }
  if (rc) gc_dev_sync(m->dev, NULL); /* nothing of this call still runs when it returns */
  return rc;
}

typedef struct batch_pass {
  int M, used;              /* rows; a bit per slot that advances */
  int64_t pos_mean;         /* for profiles */
  const int32_t *stage;     /* tokens [BMAX], then pos [M], slot [M] */
  float *logits;
  int32_t *next;
} batch_pass_t;

/* One rank's part of a checked batched step (batch_pass_t). */
static int run_batch(gc_llama_t *m, const void *arg, gc_err_t *e) {
  const batch_pass_t *p = arg;
  int M = p->M;
  double t0 = gc_now();
  if (m->prof) gc_prof_phase(m->prof, "decode");
  m->decoding = 1;
  if (gc_dev_upload(m->dev, m->bstep, p->stage, (size_t)(BMAX + 2 * M) * sizeof *p->stage, e)) return e->code;
  int rc = GC_EUNSUPPORTED, argmax = p->next != NULL;
  if (m->graphs && !m->prof) {
    rc = replay(m, &m->batch_graph[M][argmax], decode_rows, M, argmax, e);
    m->replays += rc == GC_OK;
  }
  if (rc == GC_EUNSUPPORTED) rc = launch_batch(m, M, argmax, p->pos_mean, e);
  if (!rc) rc = results(m, m->bstep, M, p->logits, p->next, e);
  if (rc) return rc;
  if (m->prof && gc_prof_collect(m->prof, gc_now() - t0, e)) return e->code;
  for (int s = 0; s < m->slots; s++) m->npos[s] += p->used >> s & 1;
  return GC_OK;
}

int gc_llama_decode_batch(gc_llama_t *m, int M, const int *slots, const int32_t *tokens,
                          float *logits, int32_t *next, gc_err_t *e) {
  if (M < 1 || M > m->slots)
    return gc_err_set(e, GC_EINVAL, "a batched step of %d rows; this model has %d slots", M, m->slots);
  int32_t stage[3 * BMAX];
  int used = 0, first[BMAX]; /* bit per slot; the first row of each slot */
  int64_t sum = 0;
  for (int i = 0; i < M; i++) {
    int s = slots[i];
    if (s < 0 || s >= m->slots)
      return gc_err_set(e, GC_EINVAL, "batch row %d: slot %d is not one of 0 .. %d", i, s, m->slots - 1);
    if (used >> s & 1 && tokens[i] != tokens[first[s]]) /* a repeat must be a copy: it writes the same row */
      return gc_err_set(e, GC_EINVAL, "batch row %d: slot %d is in row %d with another token", i, s, first[s]);
    if (m->npos[s] >= m->ctx)
      return gc_err_set(e, GC_EINVAL, "slot %d: context full (%d positions)", s, m->ctx);
    if (!(used >> s & 1)) first[s] = i;
    used |= 1 << s;
    stage[BMAX + i] = m->npos[s];
    stage[BMAX + M + i] = s;
    sum += m->npos[s];
  }
  if (check_tokens(m, tokens, M, e)) return e->code;
  memcpy(stage, tokens, (size_t)M * sizeof *tokens);
  batch_pass_t p = {M, used, sum / M, stage, logits, next};
  return every_rank(m, run_batch, &p, e);
}
