/* comm.h — collectives between the ranks of a tensor-parallel group: what
 * the forward needs (an all-reduce sum, an all-gather, a barrier) and a
 * clean stop (abort), as a small table of ops that each transport fills.
 *
 * One endpoint per rank. Every rank of a group calls the same collectives
 * in the same order with the same counts and dtypes; a rank that fails
 * calls gc_comm_abort, after which every collective of every rank of the
 * group returns at once with GC_EDEVICE (never waits), and
 * gc_comm_failure names the rank that failed first and why.
 *
 * Transports:
 *   nccl      NCCL or RCCL over the GPUs of one process (gc_comm_nccl).
 *   loopback  ranks are threads of one process, buffers host memory (the
 *             CPU backend, where device addresses are host addresses and
 *             launches are synchronous). A collective runs when it is
 *             called, so it cannot be captured in a graph. Sums are taken
 *             in rank order 0, 1, .., n-1 (in fp32 for f16 and bf16), so
 *             a group of n ranks gives the same bits on every rank and on
 *             every run. A rank that waits longer than the group's timeout
 *             for its peers aborts the group (no hang).
 *
 * Test hook (tests only, not a user setting): GC_COMM_FAIL=RANK:CALL in
 * the environment when a group is made (any transport) makes rank RANK's CALL-th
 * collective (1-based; all-reduce, all-gather and barrier count) fail with
 * "forced failure at collective CALL (GC_COMM_FAIL, a test hook)", as a
 * rank that runs out of memory would. */
#ifndef GC_RUNTIME_COMM_H
#define GC_RUNTIME_COMM_H

#include "../core/problem.h"
#include "dev.h"

typedef struct gc_comm gc_comm_t;

/* Make a loopback group of n ranks (1 .. 64): out[r] is rank r's endpoint,
 * to be used by one thread at a time. timeout_s (> 0): how long a rank
 * waits in a collective for its peers before it aborts the group. Release
 * every endpoint with gc_comm_free (the group goes with the last).
 * Errors: GC_EINVAL (n, timeout or a malformed GC_COMM_FAIL), GC_ENOMEM. */
int gc_comm_loopback(int n, double timeout_s, gc_comm_t **out, gc_err_t *e);
void gc_comm_free(gc_comm_t *c); /* NULL: no-op */

/* Make an NCCL group (RCCL on hip devices: the same API) of n ranks over
 * devs[0..n) of this process, CUDA/HIP ordinals ordinals[0..n): the
 * library is dlopen'd (libnccl.so.2, librccl.so.1), the communicators made
 * by one ncclCommInitAll. Collectives are enqueued on each device's stream
 * and finish in stream order (sums in NCCL's order, not rank order); a
 * barrier also drains the device. A watchdog thread polls the
 * communicators' asynchronous errors; any failure aborts them all. Free
 * the endpoints before the devices. The forward's transport on GPUs
 * (gc_llama_create_tp). Errors: GC_EUNSUPPORTED
 * (not cuda or hip), GC_EDEVICE (the library missing or failing, named). */
int gc_comm_nccl(gc_dev_t *const *devs, const int *ordinals, int n, gc_comm_t **out, gc_err_t *e);

int gc_comm_rank(const gc_comm_t *c);
int gc_comm_size(const gc_comm_t *c);
/* 1 where the collectives are work on the rank's device stream, which a
 * graph capture of that stream records (nccl); 0 where they run when
 * called (loopback). */
int gc_comm_capturable(const gc_comm_t *c);

/* buf[0..count) of dtype dt (f32, f16 or bf16) on every rank becomes the
 * sum over the ranks, in place. */
int gc_comm_all_reduce(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e);

/* recv [size, count] on every rank gets rank r's send[0..count) at row r.
 * send and recv may not overlap. */
int gc_comm_all_gather(gc_comm_t *c, gc_dptr_t send, gc_dptr_t recv, size_t count, gc_dtype_t dt,
                       gc_err_t *e);

/* Returns when every rank has called it. */
int gc_comm_barrier(gc_comm_t *c, gc_err_t *e);

/* Stop the group: why (its code and message) is kept if it is the first
 * abort, and every rank's collectives return GC_EDEVICE from now on.
 * Can't fail; safe from any rank's thread at any time. */
void gc_comm_abort(gc_comm_t *c, const gc_err_t *why);

/* GC_OK while the group runs; after an abort, the first failure's code,
 * with e's message "rank R: <its message>". */
int gc_comm_failure(gc_comm_t *c, gc_err_t *e);

#endif
