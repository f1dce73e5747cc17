/* profile.h — where the time of a run goes, per kernel: an event on the
 * device's own clock before and after each launch, resolved in batches
 * after a sync, aggregated by (phase, kernel, problem). The table gives
 * count, total and mean time, achieved TFLOP/s and GB/s, and each row's
 * share of the phase's wall time (so gaps between kernels show as the
 * share no row accounts for). Launches inside a graph cannot be timed one
 * by one: callers profile without graphs. */
#ifndef GC_PROFILE_H
#define GC_PROFILE_H

#include <stdio.h>

#include "../core/problem.h"
#include "dev.h"

typedef struct gc_prof gc_prof_t;

int gc_prof_create(gc_dev_t *d, gc_prof_t **out, gc_err_t *e);
void gc_prof_free(gc_prof_t *p);

/* Launches from now on belong to phase ("prefill", "decode"). */
void gc_prof_phase(gc_prof_t *p, const char *phase);

/* Around one launch: begin records the start event; end records the stop
 * event and files the launch under (phase, kernel, pr) with the work it
 * does (flops, bytes moved). */
int gc_prof_begin(gc_prof_t *p, gc_err_t *e);
int gc_prof_end(gc_prof_t *p, const char *kernel, const gc_problem_t *pr, double flops,
                double bytes, gc_err_t *e);

/* After the device is synchronised: resolve the pending events into the
 * totals, and add wall_s seconds of host-measured wall time (one step:
 * the launches and the sync) to the current phase. */
int gc_prof_collect(gc_prof_t *p, double wall_s, gc_err_t *e);

/* Launches of pr filed under phase so far, whatever their kernels. */
int64_t gc_prof_count(const gc_prof_t *p, const char *phase, const gc_problem_t *pr);

/* The table, rows by phase then by total time, to f. */
void gc_prof_print(const gc_prof_t *p, FILE *f);

#endif
