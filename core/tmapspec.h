/* tmapspec.h — the text of a tensor-map declaration, as a template writes
 * it (@tensormap, templates/README.md) and a bundle stores it: one map a
 * line, "BUF ROWS COLS BOX_ROWS BOX_COLS SWIZZLE [if COND]", BUF an op
 * buffer name and the rest expressions over the launch constants and
 * M N K; a map whose COND is 0 is not passed (a parameter value that does
 * not use the copy engine takes no maps). gen checks
 * the syntax when it loads a template; the runtime evaluates it per shape
 * and builds the maps (runtime/tmap.h). */
#ifndef GC_TMAPSPEC_H
#define GC_TMAPSPEC_H

#include "../base/expr.h"

#define GC_TMAPS_MAX 4     /* maps a kernel may ask for */
#define GC_TMAP_LINE 256   /* one declaration's text */
#define GC_TMAP_BUF 16     /* buffer name */

/* One map over a row-major matrix [rows][cols] (cols contiguous). */
typedef struct gc_tmap_spec {
  char buf[GC_TMAP_BUF];       /* op buffer ("A", "B", "W"; core/ops.h names them) */
  int64_t rows, cols;          /* the matrix, in elements */
  int64_t box_rows, box_cols;  /* the tile one copy moves, in elements */
  int64_t swizzle;             /* shared-memory swizzle span: 0, 32, 64 or 128 bytes */
} gc_tmap_spec_t;

/* Check one declaration's syntax (a buffer name, then exactly five
 * expressions and an optional "if COND", with every name bound in env). Division by zero and
 * overflow are not errors here (env may be placeholders). The message is
 * one line quoting the text. */
int gc_tmap_spec_check(const char *line, const gc_env_t *env, gc_err_t *e);

/* Evaluate text (declarations, one a line; "" for none) under env into
 * out[0..*n-1], leaving out those whose COND is 0. Errors: syntax, unbound names, more than GC_TMAPS_MAX
 * maps, a value out of range (rows, cols < 1; boxes not 1..256; swizzle
 * not 0/32/64/128). */
int gc_tmap_specs_eval(const char *text, const gc_env_t *env, gc_tmap_spec_t *out, int *n,
                       gc_err_t *e);

#endif
