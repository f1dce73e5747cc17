/* problem.h — the problem key shared by tune.db, bundles and the runtime:
 * an op, the dtypes of its operands and its dimensions, with one canonical
 * text form ("gemm f16:f16:f16 m=128 n=1024 k=1024") and the workload file
 * format (one problem per line, comma lists expand to their product). */
#ifndef GC_PROBLEM_H
#define GC_PROBLEM_H

#include "../base/base.h"

typedef enum gc_dtype {
  GC_DT_F32 = 0, GC_DT_F16 = 1, GC_DT_BF16 = 2, /* operand dtypes of problems */
  GC_DT_I32 = 3, GC_DT_F64 = 4,                 /* index and table buffers of some ops */
  /* ggml's block formats (base/quant.h), for B (the weights) of the ops whose
     op-table entry says quant: rows are whole blocks, bytes count by block */
  GC_DT_Q8_0 = 5, GC_DT_Q4_0 = 6, GC_DT_Q4_K = 7, GC_DT_Q5_K = 8, GC_DT_Q6_K = 9,
  GC_DT_Q8_0R = 10, GC_DT_Q4_0R = 11, GC_DT_Q4_KR = 12, GC_DT_Q6_KR = 13, /* gcore's device layouts (base/quant.h) */
  GC_DT_COUNT
} gc_dtype_t;

#define GC_OP_NAME 32
typedef struct gc_problem {
  char op[GC_OP_NAME]; /* "gemm", "gemm_swiglu", "rmsnorm" */
  gc_dtype_t ta, tb, tc; /* operand dtypes: A (activations), B (weights), C (output) */
  int64_t m, n, k;     /* rows, columns, reduction length */
  int64_t h, g, d;     /* query heads, key/value heads, head dimension */
} gc_problem_t;       /* dims the op does not use are 0 */

#define GC_NDIMS 6
extern const char gc_dim_letters[GC_NDIMS + 1]; /* "mnkhgd" */
int64_t *gc_problem_dim(gc_problem_t *p, int i);
int64_t gc_problem_get(const gc_problem_t *p, int i);

/* The op table (core/ops.h) holds everything known about each op; keys
 * need only its name and which of m n k h g d it uses. NULL: no such op. */
typedef struct gc_op gc_op_t;
const gc_op_t *gc_op_find(const char *name);
const char *gc_op_dims(const gc_op_t *op); /* subset of "mnkhgd" */
const char *gc_op_opt_dims(const gc_op_t *op); /* those that may also be 0: "" or "k" */
/* The ops' names, ", "-separated, into out (n bytes). */
void gc_op_names(char *out, size_t n);
/* GC_OK when name is an op, else GC_EINVAL: "unknown op 'NAME' (known:
 * gemm, ...)", the one wording every tool uses. */
int gc_op_check_name(const char *name, gc_err_t *e);
/* The ops, one a line ("  gemm   C[M,N] = ..."), for --help. */
void gc_op_help(FILE *out);

const char *gc_dtype_name(gc_dtype_t t);
/* Bytes of one element; of one block for the block formats (34, 18, 144,
 * 176, 210: what templates see as SB). Use gc_dtype_bytes for arrays. */
size_t gc_dtype_size(gc_dtype_t t);
/* Elements per block: 32 (Q8_0, Q4_0), 256 (the K formats, the device layouts),
 * 1 otherwise. */
int64_t gc_dtype_block(gc_dtype_t t);
/* 1 for the block formats Q8_0 .. Q6_KR. */
int gc_dtype_is_block(gc_dtype_t t);
/* 1 for gcore's device layouts (Q8_0R, Q4_0R, Q4_KR, Q6_KR), which no file holds. */
int gc_dtype_is_device_layout(gc_dtype_t t);
/* 1 for block formats whose units have a min besides their scale (Q4_K,
 * Q5_K and their device layouts: base/quant.c's table), else 0. */
int gc_dtype_has_min(gc_dtype_t t);
/* Bytes of n elements of t: n / block · bytes per block, n rounded up to
 * whole blocks (a problem check keeps the rows of block buffers whole). */
size_t gc_dtype_bytes(gc_dtype_t t, int64_t n);
/* The first element of the block (or the element) at byte offset off of an
 * array of t: for messages about a byte that changed. */
int64_t gc_dtype_elem_at(gc_dtype_t t, uint64_t off);
/* The storage type (base/quant.h's gc_qtype_t) of a float or block dtype,
 * -1 for I32 and F64; and back (GC_DT_COUNT for none). */
int gc_dtype_qtype(gc_dtype_t t);
gc_dtype_t gc_dtype_from_qtype(int q);
/* "f16" → all three f16; "f32:f16:f32" → A,B,C; "f16:q4_k:f16": B in a
 * block format (only B may be one). */
int gc_dtypes_parse(const char *s, gc_dtype_t *ta, gc_dtype_t *tb,
                    gc_dtype_t *tc, gc_err_t *e);
/* Writes "A:B:C" into out (at least 16 bytes). */
void gc_dtypes_format(gc_dtype_t ta, gc_dtype_t tb, gc_dtype_t tc, char *out);

/* Canonical key text; out must hold GC_PROBLEM_KEY bytes. */
#define GC_PROBLEM_KEY 128
void gc_problem_key(const gc_problem_t *p, char *out);
/* Checks op exists, dims the op uses are in [1, 2^31), others are 0. */
int gc_problem_check(const gc_problem_t *p, gc_err_t *e);

/* A list of problems (a workload). */
typedef struct gc_problems {
  gc_problem_t *v;
  int n, cap;
} gc_problems_t;
/* 1 when a and b are the same problem, field by field: never compare
 * problems with memcmp, whose padding bytes differ between equal copies. */
int gc_problem_same(const gc_problem_t *a, const gc_problem_t *b);
int gc_problems_push(gc_problems_t *l, const gc_problem_t *p, gc_err_t *e);
void gc_problems_free(gc_problems_t *l);

/* A range of rows a bundle must serve: every m in [lo, p.m] of p's group
 * (p with any m). */
typedef struct gc_need {
  gc_problem_t p;
  int64_t lo;
} gc_need_t;
typedef struct gc_needs {
  gc_need_t *v;
  int n, cap;
} gc_needs_t;
/* Append [lo, p->m] of p's group unless the same range is there. */
int gc_needs_push(gc_needs_t *l, const gc_problem_t *p, int64_t lo, gc_err_t *e);
void gc_needs_free(gc_needs_t *l);

/* Expand one spec into l: op, dtype and comma lists per dim, in the order
 * of gc_dim_letters (NULL for dims not given). Duplicates are dropped. */
int gc_problems_expand(gc_problems_t *l, const char *op, const char *dtypes,
                       const char *const dims[GC_NDIMS], gc_err_t *e);
/* Parse a workload file: lines "OP DTYPES m=LIST n=LIST k=LIST" (and h=,
 * g=, d= for attention ops), '#' comments, blank lines. Errors name the
 * file and line. */
int gc_problems_load(gc_problems_t *l, const char *path, gc_err_t *e);

/* Bind M N K H G D of p in an expression environment (base/expr.h). */
struct gc_env;
int gc_env_set_dims(struct gc_env *env, const gc_problem_t *p, gc_err_t *e);
/* Bind SMS to the device's multiprocessor (SM, CU, core) count at launch,
 * over the target's offline figure; sms <= 0 leaves it. */
int gc_env_set_sms(struct gc_env *env, int64_t sms, gc_err_t *e);

#endif
