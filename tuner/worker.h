/* worker.h — candidates run in a worker process that owns the device, so a
 * kernel that faults, hangs or corrupts the device cannot end a sweep: the
 * parent sees the worker die or time out, records that, and starts a new
 * worker for the next candidate. Requests and replies are fixed-size
 * structs over pipes (both ends are the same binary). */
#ifndef GC_WORKER_H
#define GC_WORKER_H

#include "../base/expr.h"
#include "../core/problem.h"
#include "../core/tmapspec.h"
#include "../runtime/check.h"

typedef struct gc_worker gc_worker_t;

typedef struct gc_work_req {
  gc_problem_t problem;
  char obj[1024];       /* code object file */
  char symbol[64];
  char grid[GC_EXPR_TEXT], block[GC_EXPR_TEXT], shmem[GC_EXPR_TEXT], consts[1024];
  char tmaps[GC_TMAPS_MAX * GC_TMAP_LINE]; /* @tensormap lines, "" if none */
  gc_time_opts_t timing;
  int pdl;              /* the template is @pdl: where the device overlaps such
                           launches, time chains of them (gc_time_opts_t.chain) */
  int prefetch;         /* the template is @prefetch: launches pass it an L2 window
                           of the worker's own (1 MB of 0xFF bytes, checked
                           unchanged after the verification and the timing) */
  uint64_t seed;
} gc_work_req_t;

typedef struct gc_work_reply {
  char status[16];      /* ok | verify-failed | launch-failed | timed-out */
  char detail[512];
  gc_verify_t verify;
  gc_timing_t timing;
  int ended;            /* the worker replied from its fault handler and
                           exited: the next candidate gets a fresh one */
} gc_work_reply_t;

/* Start a worker on device ordinal of backend; fills info from it. */
int gc_worker_start(const char *backend, int ordinal, gc_worker_t **out,
                    gc_dev_info_t *info, gc_err_t *e);
void gc_worker_stop(gc_worker_t *w);

/* Run one candidate: a verification (gc_check_verify: two launches, the
 * second checked), the timed launches, and a second verification after
 * them (a kernel right only the first
 * time, or that writes where it should not only later, fails there). A
 * worker crash or a timeout is not an error: the reply says launch-failed
 * / timed-out and the worker restarts. On the CPU a fault inside a guard
 * or a read-only input (gc_check_verify) is caught in the worker and
 * replied as verify-failed, saying where ("wrote past the end of C (at end
 * + 65536), fault at 0x..., in the verification launch"); a fault
 * elsewhere is launch-failed with its address. Errors are failures to
 * (re)start the worker or set up the problem. */
int gc_worker_run(gc_worker_t *w, const gc_work_req_t *req, double timeout_s,
                  gc_work_reply_t *rep, gc_err_t *e);

#endif
