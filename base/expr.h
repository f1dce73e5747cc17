/* expr.h — the integer expression language of template declarations
 * (@constraint, @applies, @grid, @block) and of launch geometry stored in
 * bundles. C-like over int64: + - * / % < <= > >= == != && || ! unary -,
 * parentheses, cdiv(a,b) min(a,b) max(a,b), decimal literals, names. */
#ifndef GC_EXPR_H
#define GC_EXPR_H

#include "base.h"

#define GC_ENV_MAX 64
#define GC_NAME_MAX 32
/* Bytes that hold one declaration's text (a template's @grid, @block,
 * @shmem, @constraint; a bundle's and the tuner's copies of them): the
 * template reader refuses longer text and the bundle reader too, so no
 * copy between them is cut short. */
#define GC_EXPR_TEXT 256

/* A set of named int64 values. Later sets shadow earlier ones. */
typedef struct gc_env {
  int n;
  char name[GC_ENV_MAX][GC_NAME_MAX];
  int64_t value[GC_ENV_MAX];
} gc_env_t;

/* Bind name to v (replacing an existing binding). Fails when full. */
int gc_env_set(gc_env_t *env, const char *name, int64_t v, gc_err_t *e);
/* Lookup; returns 1 and fills *v when bound, else 0. */
int gc_env_get(const gc_env_t *env, const char *name, int64_t *v);

/* Evaluate src under env. Errors (GC_EINVAL): syntax, an unbound name,
 * division by zero, overflow. The message quotes the expression. */
int gc_expr_eval(const char *src, const gc_env_t *env, int64_t *out,
                 gc_err_t *e);

/* Evaluate up to three expressions (missing ones are 1), separated by ';'
 * or by whitespace between two operands at the top level: "cdiv(M, MC) 1".
 * Used for launch grids and blocks. */
int gc_expr_eval3(const char *text, const gc_env_t *env, int64_t out[3],
                  gc_err_t *e);

/* The same for up to max (<= GC_EXPR_PARTS) expressions, into
 * out[0..*count-1] (the rest of out untouched). */
#define GC_EXPR_PARTS 8
int gc_expr_evaln(const char *text, const gc_env_t *env, int64_t *out, int max, int *count,
                  gc_err_t *e);

/* Parse "A=1,B=2" into env (appending). */
int gc_env_parse(gc_env_t *env, const char *text, gc_err_t *e);

#endif
