/* check.h — running one kernel on one problem the careful way: inputs
 * made once (host and device) with their fp64 reference; each verification
 * run poisons the output (NaN bytes) and the guard bytes after it, launches,
 * and checks every element and that the guard is intact; timing runs warm
 * up, then time each launch with device events until enough time passed. */
#ifndef GC_CHECK_H
#define GC_CHECK_H

#include "ops.h"

typedef struct gc_check gc_check_t;

/* How a caller launches its kernel: called with the argument array. */
typedef int (*gc_launch_fn)(void *ctx, void **args, gc_err_t *e);

typedef struct gc_verify {
  int ok;
  double worst;     /* max |err| / tolerance */
  char why[400];    /* first failure */
} gc_verify_t;

typedef struct gc_time_opts {
  int warmup;       /* launches before timing (default 2) */
  int min_iters;    /* default 5 */
  int max_iters;    /* default 2000 */
  double min_time;  /* seconds of timed launches to aim for (default 0.2) */
} gc_time_opts_t;

typedef struct gc_timing {
  double median_us, min_us, max_us, spread; /* spread = IQR / median */
  int64_t iters;
} gc_timing_t;

/* Allocate and fill inputs for p on dev, compute the reference. */
int gc_check_setup(gc_dev_t *dev, const gc_problem_t *p, uint64_t seed,
                   gc_check_t **out, gc_err_t *e);
void gc_check_free(gc_check_t *c);
const gc_problem_t *gc_check_problem(const gc_check_t *c);

int gc_check_verify(gc_check_t *c, gc_launch_fn fn, void *ctx, gc_verify_t *v,
                    gc_err_t *e);
int gc_check_time(gc_check_t *c, gc_launch_fn fn, void *ctx, const gc_time_opts_t *o,
                  gc_timing_t *t, gc_err_t *e);
/* Copy the output buffer to host memory (count elements of the output
 * dtype) and the inputs' host copies, for --dump. */
int gc_check_output(gc_check_t *c, void *host, gc_err_t *e);
void *gc_check_host_input(gc_check_t *c, int i, int64_t *count);

#endif
