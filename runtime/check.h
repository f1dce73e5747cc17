/* check.h — running one kernel on one problem the careful way: inputs
 * made once (host and device) with their fp64 reference, every buffer
 * between guards; each verification run poisons the outputs (NaN bytes),
 * launches, and checks that nothing was written where it should not be
 * (guards, inputs) and every output element; timing runs warm up, then
 * time each launch with device events until enough time passed. */
#ifndef GC_CHECK_H
#define GC_CHECK_H

#include "../core/ops.h"
#include "dev.h"

typedef struct gc_check gc_check_t;

/* How a caller launches its kernel: called with the argument array. */
typedef int (*gc_launch_fn)(void *ctx, void **args, gc_err_t *e);

typedef struct gc_verify {
  int ok;
  double worst;     /* max |err| / tolerance */
  char why[400];    /* first failure */
} gc_verify_t;

/* The most timed launches of one measurement, when the options do not say. */
#define GC_TIME_MAX_ITERS 500

typedef struct gc_time_opts {
  int warmup;       /* launches before timing (default 2) */
  int min_iters;    /* default 5 */
  int max_iters;    /* default GC_TIME_MAX_ITERS */
  double min_time;  /* seconds of timed launches to aim for (default 0.2) */
  size_t flush;     /* bytes passed through the cache before each timed
                       launch to evict it (cold-cache timing, gc_dev_flush:
                       read where the backend can); 0 = none */
  double abandon_us; /* > 0: stop after min_iters launches when their median
                        is above this (a candidate clearly slower than the
                        tuner's incumbent: its figure then rests on
                        min_iters launches); 0 = never */
  int chain;        /* > 1: a sample is the time of `chain` launches issued
                       back to back (after the flush), over copies of the
                       largest input buffer (together at least the flush
                       bytes, so each launch reads its copy from memory, not
                       from the cache), divided by chain: how a decode step
                       runs a kernel that overlaps the one before it
                       (gc_dev_kernel_pdl); min_time counts all of a chain's
                       launches; 0 or 1: one launch a sample */
} gc_time_opts_t;

/* The flush gcore uses on a device: 256 MiB on GPUs (over the L2 of any
 * current GPU), none on the CPU, whose tuned kernels are compute bound or
 * meant to run with warm caches. */
size_t gc_check_default_flush(gc_dev_t *dev);

typedef struct gc_timing {
  double median_us, min_us, max_us, spread; /* spread = IQR / median */
  int64_t iters;
} gc_timing_t;

/* Allocate (each buffer inside a guarded allocation: gc_check_verify)
 * and fill inputs for p on dev, compute the reference. sc gives the op's
 * scalars (NULL: gc_op_default_scalars). Buffers are 256-byte aligned (64
 * on the CPU) and keep their addresses until gc_check_free; on the CPU the
 * inputs stay read-only all that time. */
int gc_check_setup(gc_dev_t *dev, const gc_problem_t *p, const gc_op_scalars_t *sc,
                   uint64_t seed, gc_check_t **out, gc_err_t *e);
void gc_check_free(gc_check_t *c);
const gc_problem_t *gc_check_problem(const gc_check_t *c);

/* One verification of fn: two launches, each on freshly poisoned outputs
 * and restored in/out buffers, the second checked, so a kernel that keeps
 * state of its own between launches (the split tickets and workspaces of
 * attention_decode and gemm_wgmma) must leave it ready for the next
 * launch. Each buffer lies between guards of more
 * than 1 MiB before and after it, filled with a pattern; where the device
 * can protect memory (the CPU), the guards of outputs are inaccessible
 * pages (the buffer's end within 64 bytes of them) and inputs with their
 * guards are read-only, from setup until gc_check_free, so a stray write
 * faults in the launch (gc_check_locate says where). After the launches, in
 * this order: every guard byte a write could have changed unnoticed still
 * holds the pattern; every input equals its initial bytes; where a timing
 * since the last verification launched on copies of an input, those copies
 * too; then every output element passes gc_op_check. The first violation
 * is v->why ("wrote past the end of C (changed byte at end + 4)", "wrote
 * into input A (element 7: row 0, col 7)", "C element 3 ...: got ...");
 * whatever was changed is put back, so the next launch starts clean.
 * Outputs are poisoned (the checked launch's with finite noise, so that a
 * kernel that reads its output before writing it fails) and in/out
 * buffers restored before the launch, so
 * a call after gc_check_time verifies a fresh launch, and sees what the
 * timed launches wrote into guards and inputs. Returns an error only
 * where the launch or the device failed; v->ok says whether it verified. */
int gc_check_verify(gc_check_t *c, gc_launch_fn fn, void *ctx, gc_verify_t *v,
                    gc_err_t *e);
/* For a fault handler: where addr lies relative to c's buffers and guards,
 * written to out as "past the end of C (at end + 65536)", "before the
 * start of input B (at start - 8)" or "into input A (element 0: row 0, col
 * 0)"; returns 1, or 0 (out "") when addr is in no buffer's allocation.
 * Async-signal-safe: no allocation, no stdio, no locks. */
int gc_check_locate(const gc_check_t *c, uint64_t addr, char *out, size_t n);
/* Time fn's launches as o says (NULL: the defaults). The flush buffer and
 * chain timing's copies are made by the first call that needs them and
 * kept for the next ones (a tuner times many candidates on one check). */
int gc_check_time(gc_check_t *c, gc_launch_fn fn, void *ctx, const gc_time_opts_t *o,
                  gc_timing_t *t, gc_err_t *e);
/* The buffers (for --dump): *n of them, described in b. */
void gc_check_buffers(gc_check_t *c, const gc_opbuf_t **b, int *n);
/* Buffer i as the last verification left it (outputs, in/out buffers) or
 * as it was filled (inputs), copied to host (b[i].count elements). */
int gc_check_read(gc_check_t *c, int i, void *host, gc_err_t *e);
/* The initial contents of buffer i (inputs and in/out buffers). */
const void *gc_check_initial(gc_check_t *c, int i);
const gc_op_scalars_t *gc_check_scalars(gc_check_t *c);

#endif
