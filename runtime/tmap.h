/* tmap.h — tensor maps for kernels that declare them (@tensormap): the
 * declarations evaluated for a shape and tied to the op's buffers, and the
 * argument list a launch then passes: the op's arguments (core/ops.h),
 * then one 128-byte map per declaration, by value, in declaration order
 * (the kernel's trailing `const __grid_constant__ gc_tmap_t` params). The
 * device encodes each map (gc_dev_tmap_encode) from the buffer address a
 * launch passes, again only when that address changes. */
#ifndef GC_TMAP_H
#define GC_TMAP_H

#include "../base/expr.h"
#include "../core/tmapspec.h"
#include "dev.h"

#define GC_TMAP_BYTES 128
#define GC_TMAPS_ARGS 24 /* op arguments (at most 16) and maps */

typedef struct gc_tmaps {
  int n;                               /* maps; 0: the kernel takes none */
  int nargs;                           /* the op's arguments, before the maps */
  gc_tmap_spec_t spec[GC_TMAPS_MAX];
  int arg[GC_TMAPS_MAX];               /* the op argument (a buffer) each maps */
  gc_dtype_t dtype[GC_TMAPS_MAX];
  gc_dptr_t enc_for[GC_TMAPS_MAX];     /* address map i was encoded for; 0: none */
  unsigned char raw[(GC_TMAPS_MAX + 1) * GC_TMAP_BYTES]; /* maps, 64-byte aligned inside */
  void *args[GC_TMAPS_ARGS];
} gc_tmaps_t;

/* Evaluate text (a dispatch entry's or template's @tensormap lines, "" for
 * none) under env (launch constants and p's dimensions) and tie each map
 * to p's op buffer of that name. Checks what the maps need of the buffer
 * (rows·cols inside it; rows of a whole number of 16 bytes; a box row of
 * a multiple of 16 bytes and, when swizzled, at most the swizzle span).
 * Errors are one line naming the declaration. */
int gc_tmaps_plan(const char *text, const gc_env_t *env, const gc_problem_t *p,
                  gc_tmaps_t *t, gc_err_t *e);

/* The arguments to launch with: args itself when t has no maps, else
 * t->args (args' t->nargs entries, then the maps, encoded on d for the
 * addresses args holds). Valid until the next call with t. The addresses
 * must be 16-byte aligned. */
int gc_tmaps_args(gc_dev_t *d, gc_tmaps_t *t, void **args, void ***out, gc_err_t *e);
/* The entries of a (what gc_tmaps_args gave for t): the op's and the maps'. */
int gc_tmaps_nargs(const gc_tmaps_t *t, void **a);

/* An L2 window (@prefetch: bytes a launch's later kernels read, which the
 * kernel may ask L2 for), its two kernel arguments after all others:
 * `const char *pf, int64_t pf_n`. */
typedef struct gc_window_args {
  gc_dptr_t pf;
  int64_t n;
  void *args[GC_TMAPS_ARGS + 3];
} gc_window_args_t;
/* GC_OK where n is a multiple of 16 and pf 16-byte aligned (0, 0: none);
 * else GC_EINVAL, one line. */
int gc_window_check(gc_dptr_t pf, int64_t n, gc_err_t *e);
/* *out = w->args: a's na entries, &pf, &n, NULL (the window checked). */
int gc_window_args(void **a, int na, gc_dptr_t pf, int64_t n, gc_window_args_t *w, void ***out,
                   gc_err_t *e);

#endif
