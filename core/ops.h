/* ops.h — what each op means, independent of any kernel: its buffers and
 * argument list (the ABI every template of the op implements, see
 * templates/README.md), input generation, an fp64 reference, and
 * per-element verification with a stated tolerance. The tuner, gcore-run,
 * the model and the tests all build launches through this. */
#ifndef GC_OPS_H
#define GC_OPS_H

#include "problem.h"

typedef uint64_t gc_dptr_t; /* device address; 0 is never a valid buffer */

#define GC_OP_MAX_BUFS 9

enum { GC_BUF_IN = 0, GC_BUF_OUT = 1, GC_BUF_INOUT = 2 };

typedef struct gc_opbuf {
  const char *name;   /* "A", "B", "C" ... */
  gc_dtype_t dtype;
  int64_t count;      /* elements (of a block format: whole blocks per row) */
  int kind;           /* GC_BUF_IN / OUT / INOUT */
  int64_t cols;       /* row length, for messages */
} gc_opbuf_t;

/* Bytes of b: count elements of its dtype, counted by blocks for the
 * block formats (gc_dtype_bytes). */
size_t gc_opbuf_bytes(const gc_opbuf_t *b);

/* Values that are arguments but not part of the problem key. */
typedef struct gc_op_scalars {
  float eps;          /* rmsnorm */
  int64_t pos0;       /* rope_kv, rmsnorm_gemm_rope_kv, attention: position of the first row */
  int64_t layout;     /* the rope ops: 0 = halves (Hugging Face), 1 = adjacent pairs (llama2.c) */
  float scale;        /* attention: usually 1/sqrt(D) */
  int64_t ctx;        /* rope_kv_batch, attention_batch: cache rows per slot (the
                         slot stride, argument S); 0: pos0 + M, the rows of a
                         slot in the test buffers (shape variable S) */
} gc_op_scalars_t;

/* ---- the op table ---------------------------------------------------------
 * One entry per op holds everything the code knows about it: its buffers
 * (the kernel ABI, templates/README.md), its other arguments, how inputs are
 * made, the fp64 reference with its tolerance, and its work. The runtime,
 * problem keys, the CLI (--help, gcore-tune --ops) and the tests read it.
 * Adding an op is an entry here plus its templates. */

/* What a test input of a buffer is. */
enum {
  GC_FILL_UNIT = 0,  /* uniform in [-1, 1); in a block format, such values quantized
                        (Q8_0, Q4_0, Q4_K), or random levels under modest scales (Q5_K,
                        Q6_K, which gcore does not write) */
  GC_FILL_NORM,      /* uniform in [0.5, 1.5): norm weights */
  GC_FILL_TOKENS,    /* token ids in [0, K) */
  GC_FILL_POS,       /* the position pos0 (one int32, read on the device) */
  GC_FILL_INV_FREQ,  /* RoPE inverse frequencies of theta 10000 (float64) */
  GC_FILL_CACHE,     /* a KV cache: rows before pos0 random, the rows the op writes NaN */
  GC_FILL_ROWPOS,    /* int32 [2, M] of a batch of rows: row i's position
                        (pos0 + 97 i) mod (pos0 + i + 1), then its slot M-1-i */
  GC_FILL_SLOT_CACHE /* a cache of M slots of S rows: random, but the row each
                        batch row writes (its slot, its position) NaN */
};

/* A buffer of an op, in argument order. Shapes are expressions (base/expr.h)
 * over M N K H G D and S, the cache rows pos0 + M. */
typedef struct gc_opbuf_spec {
  const char *name;    /* "A", "B", "C", ... */
  char dtype;          /* 'A' 'B' 'C': the problem's operand dtype; 'i' int32; 'd' float64;
                          'N' a norm weight: B's dtype, or A's when B is a block format */
  const char *rows, *cols;
  int kind;            /* GC_BUF_IN / OUT / INOUT */
  int fill;            /* GC_FILL_*, for inputs and in/out buffers */
  const char *touched; /* rows one call moves when fewer than rows (a cache); NULL: rows */
} gc_opbuf_spec_t;

/* The fp64 reference of every output and in/out buffer i into ref[i] and
 * the error each element may have into tol[i] (inputs: NULL). */
typedef int (*gc_op_ref_fn)(const gc_problem_t *p, const gc_op_scalars_t *sc, void **host,
                            double **ref, double **tol, gc_err_t *e);
/* Floating-point operations of one call. */
typedef double (*gc_op_flops_fn)(const gc_problem_t *p, const gc_op_scalars_t *sc);

struct gc_op {
  const char *name;
  const char *dims;   /* the dimensions of its key, a subset of "mnkhgd" */
  const char *doc;    /* one line for --help */
  int pair;           /* rows of B per column of C: 2 for a gate|up pair (SwiGLU), else 1 */
  int norm;           /* 1: the rmsnorm of A is folded in (a "norm" buffer, eps) */
  int nbufs;
  gc_opbuf_spec_t buf[GC_OP_MAX_BUFS];
  const char *ints;   /* the int64 arguments after the buffers, in order: letters of
                         MNKHGD, L for the RoPE layout, S for the cache rows per
                         slot (sc->ctx, else pos0 + M) */
  char flt;           /* the float argument last: 'e' eps, 's' attention scale, 0 none */
  gc_op_ref_fn reference;
  gc_op_flops_fn flops;
  int quant;          /* 1: B (the weights) may be a block format (gemm family, embed);
                         the rows of its B buffers must then be whole blocks */
  const char *opt;    /* dimensions of its key that may be 0 (absent) or set: attention's
                         k, the most keys a decode (m = 1) kernel serves (0: any number;
                         a context bucket: see gc_op_tune_points); NULL: none */
};

/* The dtype of a buffer role ('A' 'B' 'C' 'N' 'i' 'd', above) in p. */
gc_dtype_t gc_op_role_dtype(const gc_problem_t *p, char role);

/* For gc_problem_check: when p's B is a block format, the op takes one
 * (quant) and every B buffer's rows are whole blocks. GC_OK or GC_EINVAL
 * with a message naming the dimension. */
int gc_op_check_blocks(const gc_problem_t *p, gc_err_t *e);

/* Every op, in a fixed order; *n gets the count. */
const gc_op_t *gc_op_table(int *n);
/* The table as JSON (a list of {name, dims, doc, pair, norm, quant, ints,
 * float, buffers: [{name, dtype, rows, cols, kind}]}): gcore-tune
 * --list-ops, which the tests' case table reads. */
void gc_op_table_json(FILE *out);

/* The scalars the tuner and gcore-run --op use for p: eps 1e-5; pos0 1023
 * for single-row attention (a decode step 1024 positions in: one variant
 * serves every length of the context, and at 256 keys a split that is
 * 2.6x slower at 4000 tied with the default), 255 for attention_batch
 * (decode steps at lengths up to 256), 3 otherwise; halves layout; scale
 * 1/sqrt(D); ctx 0 (slots of pos0 + M rows). */
void gc_op_default_scalars(const gc_problem_t *p, gc_op_scalars_t *sc);

/* The buffers of p in argument order (sizes depend on sc->pos0). */
int gc_op_buffers(const gc_problem_t *p, const gc_op_scalars_t *sc,
                  gc_opbuf_t bufs[GC_OP_MAX_BUFS], int *n, gc_err_t *e);

/* Argument values for a launch: buffer addresses then scalars, in the
 * order of templates/README.md. args points into the pack, NULL after the
 * last (at most GC_OP_MAX_BUFS + 8 + 1 of GC_OP_MAX_ARGS). */
#define GC_OP_MAX_ARGS 20
typedef struct gc_argpack {
  gc_dptr_t ptr[GC_OP_MAX_BUFS];
  int64_t i64[8];
  float f32[2];
  void *args[GC_OP_MAX_ARGS];
  int nargs;
} gc_argpack_t;
void gc_op_args(const gc_problem_t *p, const gc_op_scalars_t *sc, const gc_dptr_t *bufs,
                gc_argpack_t *pk);

/* Fill the host copies of the input and in/out buffers with deterministic
 * pseudo-random values from seed (rows of a cache that the op writes are
 * filled with NaN, so that a kernel that skips them fails). */
void gc_op_fill_inputs(const gc_problem_t *p, const gc_op_scalars_t *sc,
                       void *host[GC_OP_MAX_BUFS], uint64_t seed);

/* The fp64 reference of every output and in/out buffer i: ref[i][j] the
 * value and tol[i][j] the error element j may have (see ops.c); NULL
 * entries for inputs. */
int gc_op_reference(const gc_problem_t *p, const gc_op_scalars_t *sc,
                    void *host[GC_OP_MAX_BUFS], double *ref[GC_OP_MAX_BUFS],
                    double *tol[GC_OP_MAX_BUFS], gc_err_t *e);

/* Check every element of out (dtype b->dtype) against ref/tol. Non-finite
 * values fail. *worst is max |err|/tol. On failure, why gets the first
 * bad element. Returns 1 when all pass. */
int gc_op_check(const gc_opbuf_t *b, const void *out, const double *ref, const double *tol,
                double *worst, char *why, size_t why_n);

/* Work per call at the default scalars, for throughput figures. */
double gc_op_flops(const gc_problem_t *p);
double gc_op_bytes(const gc_problem_t *p);

/* The scalar sets a tuner verifies and times p at: [0] the defaults
 * (gc_op_default_scalars), then the others; returns how many (1 ..
 * GC_OP_MAX_POINTS). A decode attention (attention, M = 1) for any length
 * (k = 0) has four, positions 1023, 5 (fewer keys than a split has
 * slices), 2047 and 4095, so that a variant right or fast at one context
 * length only can neither win unseen nor be chosen for it; its time is
 * the sum of the four, which the long ones weigh most: a model's decode
 * step runs it past its short bucket (models/recipe.h). One of a context
 * bucket (k > 0: at most k keys, positions 0 .. k-1) has 1023, 5, 127 and
 * 3071 inside it and its last, k-1, in place of those past it (k = 1024:
 * 1023, 5, 127; k = 2048: 1023, 5, 127, 2047). Every other op has one. */
#define GC_OP_MAX_POINTS 4
int gc_op_tune_points(const gc_problem_t *p, gc_op_scalars_t sc[GC_OP_MAX_POINTS]);
/* What a failure at tune point i (sc: its scalars) is prefixed with:
 * "at position P: ", or "" at point 0, the defaults. */
void gc_op_point_label(const gc_op_scalars_t *sc, int i, char *out, size_t n);
/* gc_op_flops and gc_op_bytes summed over the tune points: the work that
 * a tuner's time (the sum of the points' times) covers. */
double gc_op_tune_flops(const gc_problem_t *p);
double gc_op_tune_bytes(const gc_problem_t *p);
/* The same at the position in sc, counting only the cache rows the op
 * touches (what a profile of a real run reports). */
void gc_op_work(const gc_problem_t *p, const gc_op_scalars_t *sc, double *flops, double *bytes);

/* Scalar conversions (round to nearest even). */
float gc_f16_to_f32(uint16_t h);
uint16_t gc_f32_to_f16(float f);
float gc_bf16_to_f32(uint16_t h);
uint16_t gc_f32_to_bf16(float f);
double gc_load_elem(const void *p, gc_dtype_t t, int64_t i);
void gc_store_elem(void *p, gc_dtype_t t, int64_t i, double v);
/* out[0, n) = the n elements of type t at p, as fp32 (a row of logits:
 * one loop a type, not gc_load_elem's call an element). p's elements may
 * lie in out's own memory at or after out + n·(4 - size of t) bytes (a
 * staged download converted in place, front to back). */
void gc_to_f32(const void *p, gc_dtype_t t, float *out, size_t n);

#endif
