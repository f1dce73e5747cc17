/* llama.h — the Llama family on a device: the forward recipe (one
 * description of the layer as a list of ops with shapes, which drives both
 * execution and tuning), weights resident on the device, the KV cache, and
 * prefill / decode steps through bundle kernels. Nothing here names a
 * backend: every kernel comes from the bundle through runtime/dispatch. */
#ifndef GC_LLAMA_H
#define GC_LLAMA_H

#include "../runtime/dispatch.h"
#include "../core/ops.h"
#include "../runtime/profile.h"
#include "recipe.h"
#include "weights.h"

typedef struct gc_llama gc_llama_t;

/* Put the model on rt's device with a KV cache of ctx positions and room
 * for prefills of up to max_t tokens; resolve every kernel the recipe needs
 * for 1 and max_t tokens (a bundle lacking one is refused here, by name).
 * Block-format (quantized) matrices stay so on the device; prefills of at
 * least the bundle's deq_rows tokens run the dense plan (recipe.h) through
 * a scratch of the largest such matrix. */
int gc_llama_create(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, int ctx,
                    int max_t, gc_llama_t **out, gc_err_t *e);
/* As gc_llama_create, with a KV cache of `slots` (1 .. GC_LLAMA_BATCH_MAX)
 * independent sequences of ctx positions each, for batched decode
 * (gc_llama_decode_batch); the kernels of batched steps of 1 .. slots rows
 * are resolved too, and passes hold at least slots rows. */
int gc_llama_create_slots(gc_dev_t *dev, gc_rt_t *rt, const gc_llama_weights_t *w, int ctx,
                          int max_t, int slots, gc_llama_t **out, gc_err_t *e);
/* The model split over tp tensor-parallel ranks (recipe.h, gc_llama_shard):
 * rank r's shard of w on devs[r] with bundle rts[r] (one built for the
 * shard shapes: gcore-gen --tp N), the ranks joined by a communicator
 * (runtime/comm.h). slots 0: one sequence, as gc_llama_create; 1 ..
 * GC_LLAMA_BATCH_MAX: as gc_llama_create_slots. The returned model is rank
 * 0's and leads: every call below runs on all ranks at once (a thread per
 * rank) and returns rank 0's results; gc_llama_config gives the shard
 * config. tp = 1: as gc_llama_create(_slots) on devs[0]. The ranks'
 * collectives: a loopback group on the CPU, NCCL/RCCL over GPUs (devs on
 * tp different ordinals of one backend; the communicators warmed by one
 * barrier here). Decode steps are graph replays with NCCL and run launch
 * by launch with loopback (its collectives cannot be captured). Errors:
 * GC_EINVAL (tp does not divide the model, by name; ranks on one GPU or on
 * mixed backends), GC_EUNSUPPORTED (block-format weights), GC_EDEVICE (the
 * NCCL/RCCL library missing or failing),
 * and those of gc_llama_create prefixed "rank R: ". After a rank fails
 * mid-pass every rank stops and the call returns "rank R: why"; the group
 * is then unusable (every later pass returns the same). */
int gc_llama_create_tp(gc_dev_t *const *devs, gc_rt_t *const *rts, const gc_llama_weights_t *w, int ctx,
                       int max_t, int slots, int tp, gc_llama_t **out, gc_err_t *e);
/* Serve m's passes with the bundle rt from now on, the weights and caches
 * staying where they are (gcore-tune's step check times one model with
 * bundles that differ in a kernel or two, instead of uploading the weights
 * for each). Its kernels are resolved as gc_llama_create resolves them and
 * the captured steps dropped. m must not run with the bundle it had once
 * this returns GC_OK; on an error m keeps that bundle. Errors: GC_EINVAL
 * (a bundle whose dense plan differs from m's), GC_EUNSUPPORTED (a model of
 * several ranks), and gc_llama_create's for a bundle lacking a kernel. */
int gc_llama_set_bundle(gc_llama_t *m, gc_rt_t *rt, gc_err_t *e);
void gc_llama_free(gc_llama_t *m);
const gc_llama_config_t *gc_llama_config(const gc_llama_t *m);
int gc_llama_pos(const gc_llama_t *m); /* tokens in the cache (slot 0) */
int gc_llama_slots(const gc_llama_t *m);
int gc_llama_ctx(const gc_llama_t *m);      /* positions per slot */
int gc_llama_max_pass(const gc_llama_t *m); /* most tokens (rows) in one pass */
int gc_llama_slot_pos(const gc_llama_t *m, int slot); /* tokens in slot's cache */
/* Empty one slot's cache: its next forward starts at position 0. */
void gc_llama_slot_reset(gc_llama_t *m, int slot);
/* Keep the first pos positions of slot's cache (0 <= pos <=
 * gc_llama_slot_pos): its next forward starts at position pos, on the
 * keys and values before it (a prompt that begins as the slot's last one
 * did need not run those again). */
void gc_llama_slot_keep(gc_llama_t *m, int slot, int pos);
/* Slot dst's cache becomes the first pos positions of slot src's, where
 * its first `from` already equal src's (0 <= from <= pos <= both slots'
 * positions but from <= dst's; dst != src): positions from .. pos - 1 of
 * every layer's keys and values, on every rank, copied on the device in
 * stream order. Errors: the device's (dst is then empty). */
int gc_llama_slot_copy(gc_llama_t *m, int dst, int src, int from, int pos, gc_err_t *e);

/* Run tokens[0..t) at the current position of slot 0, append them to its
 * cache, and write logits of the last all_rows ? t : 1 rows (fp32,
 * row-major [rows, vocab]) to logits. Token ids are checked against the
 * vocabulary. */
int gc_llama_forward(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                     float *logits, gc_err_t *e);

/* As gc_llama_forward, but when next is given the device picks the argmax
 * of the last row (ties to the lowest id) and only that id is copied back;
 * logits is then not written. */
int gc_llama_forward_ex(gc_llama_t *m, const int32_t *tokens, int t, int all_rows,
                        float *logits, int32_t *next, gc_err_t *e);

/* Greedy decoding with the host one step behind the device: tok runs at
 * slot 0's position, then each step's argmax (ties to the lowest id) is
 * the next step's token, fed on the device, while the host reads the step
 * before it. emit(u, id, e) gets every argmax in order and returns 0 to go
 * on, 1 to stop at that id, or -1 with e set to fail. At most n steps run
 * (n ids emitted), and none past the context. The cache then holds tok and
 * every emitted id but the last, as a loop of gc_llama_forward_ex calls
 * leaves it, with the same ids; the step the device ran ahead (past the
 * stop) is not counted and its cache row is overwritten by the next pass.
 * Where it cannot run ahead (tensor parallelism, a profile,
 * gc_llama_set_ahead off) it is that loop; a backend that does each copy
 * at once (cpu) runs the same steps without the overlap. */
typedef int (*gc_llama_emit_fn)(void *u, int32_t id, gc_err_t *e);
int gc_llama_greedy(gc_llama_t *m, int32_t tok, int n, gc_llama_emit_fn emit, void *u, gc_err_t *e);
/* An emit that only counts the ids into *(int *)u and never stops (a
 * warm-up, a timed run). */
int gc_llama_count_ids(void *u, int32_t id, gc_err_t *e);

/* tokens[0..t) (t <= gc_llama_max_pass) at slot's position (a prefill, or
 * a chunk of one), appended to its cache: the logits of the last row (of
 * every row with all_rows: [t, vocab]), or with next the last row's argmax
 * picked on the device (as gc_llama_forward_ex).
 * Errors: GC_EINVAL for a bad slot, a full context or a bad token id;
 * the slot's position is then unchanged. */
int gc_llama_slot_forward(gc_llama_t *m, int slot, const int32_t *tokens, int t, int all_rows, float *logits,
                          int32_t *next, gc_err_t *e);

/* One batched decode step of M rows (1 .. gc_llama_slots): row i runs
 * tokens[i] at the current position of slot slots[i] (none full) and
 * appends it there. A row may repeat an earlier row's slot and token: it
 * computes the same and writes the same cache row, and the slot advances
 * once (padding, so that a step can have a fixed M). Writes the logits of every row
 * (fp32 [M, vocab]) to logits or, with next, the device's argmax of each
 * row to next[0..M). Steps of each M are captured as a graph on first use
 * and replayed after (positions and slots live in device memory).
 * Errors: GC_EINVAL for bad rows, positions unchanged. */
int gc_llama_decode_batch(gc_llama_t *m, int M, const int *slots, const int32_t *tokens,
                          float *logits, int32_t *next, gc_err_t *e);

/* Decode steps (one token, one row of logits) are captured as one graph
 * on first use and replayed after, on backends with graphs (default on). */
void gc_llama_set_graphs(gc_llama_t *m, int on);
/* gc_llama_greedy runs the device one step ahead of the host (default
 * on); off, one pass at a time (the loop it replaces), to compare. */
void gc_llama_set_ahead(gc_llama_t *m, int on);
/* The L2 window of the decode step's O projection: its kernel, where it
 * takes one (@prefetch), asks L2 for the first bytes (a multiple of 16
 * of them, at most the matrix) of the FFN's gate/up weights, which the
 * DRAM would otherwise start on only after O. Default (bytes < 0): 3/5
 * of the device's L2 (30 MB on an H100 or H200; none where the device
 * does not say); 0: none. Captured steps are captured again. */
void gc_llama_set_l2_window(gc_llama_t *m, int64_t bytes);
/* Time every launch into p (NULL: off). Profiled steps run without graphs. */
void gc_llama_set_profile(gc_llama_t *m, gc_prof_t *p);
gc_prof_t *gc_llama_profile(const gc_llama_t *m);
/* A developer's profile of the decode step: from now on, every decode
 * step (one token of a sequence, or a batched step) leaves out its
 * launches of op (a name of the op table; NULL or "": none), so that a
 * step timed with and without says what that op costs in it, overlap with
 * its neighbours included, which launches timed one by one (a profile)
 * cannot. The outputs of such steps are wrong (the op's never written):
 * time them, do not read them. Captured steps are dropped when the op
 * changes. GC_EINVAL for
 * an op that is not one (gc_llama_leave_out_check, for a caller that
 * checks its list before it loads a model). */
int gc_llama_leave_out(gc_llama_t *m, const char *op, gc_err_t *e);
int gc_llama_leave_out_check(const char *op, gc_err_t *e);
/* Decode steps run so far as one graph replay (the rest: launch by launch). */
int64_t gc_llama_graph_replays(const gc_llama_t *m);
/* Empty slot 0's KV cache: the next forward starts at position 0. */
void gc_llama_reset(gc_llama_t *m);

#endif
