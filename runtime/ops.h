/* ops.h — what each op means, independent of any kernel: its buffers and
 * argument list (the ABI every template of the op implements), input
 * generation, an fp64 reference, and per-element verification with a
 * stated tolerance. The tuner, gcore-run and the tests all use this. */
#ifndef GC_OPS_H
#define GC_OPS_H

#include "../db/problem.h"
#include "dev.h"

#define GC_OP_MAX_BUFS 4

typedef struct gc_opbuf {
  const char *name;   /* "A", "B", "C" ... */
  gc_dtype_t dtype;
  int64_t count;      /* elements */
  int output;         /* 1 = written by the kernel */
} gc_opbuf_t;

/* The buffers of problem p in argument order. */
int gc_op_buffers(const gc_problem_t *p, gc_opbuf_t bufs[GC_OP_MAX_BUFS], int *n,
                  gc_err_t *e);

/* Argument values for a launch: buffer addresses then scalars. */
typedef struct gc_argpack {
  gc_dptr_t ptr[GC_OP_MAX_BUFS];
  int64_t i64[4];
  float f32[2];
  void *args[12];
  int nargs;
} gc_argpack_t;
void gc_op_args(const gc_problem_t *p, const gc_dptr_t *bufs, gc_argpack_t *pk);

/* Fill the input buffers (host memory, in the buffers' dtypes) with
 * deterministic pseudo-random values from seed. */
void gc_op_fill_inputs(const gc_problem_t *p, void *host[GC_OP_MAX_BUFS], uint64_t seed);

/* The fp64 reference of the (single) output from the host inputs:
 * ref[i] the value and tol[i] the error each element may have (derived
 * from the dtypes and the reduction length; see ops.c). */
int gc_op_reference(const gc_problem_t *p, void *host[GC_OP_MAX_BUFS], double *ref,
                    double *tol, gc_err_t *e);

/* Check every element of out (in the output dtype) against ref/tol.
 * Non-finite values fail. *worst is max |err|/tol. On failure, *why gets
 * the first bad element. Returns 1 when all pass. */
int gc_op_check(const gc_problem_t *p, const void *out, const double *ref,
                const double *tol, int64_t count, double *worst, char *why,
                size_t why_n);

/* Work per call, for throughput figures. */
double gc_op_flops(const gc_problem_t *p);
double gc_op_bytes(const gc_problem_t *p);

/* Scalar conversions (round to nearest even). */
float gc_f16_to_f32(uint16_t h);
uint16_t gc_f32_to_f16(float f);
float gc_bf16_to_f32(uint16_t h);
uint16_t gc_f32_to_bf16(float f);
double gc_load_elem(const void *p, gc_dtype_t t, int64_t i);
void gc_store_elem(void *p, gc_dtype_t t, int64_t i, double v);

#define GC_RMSNORM_EPS 1e-5f

#endif
