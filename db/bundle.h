/* bundle.h — the bundle file (one SQLite database): code objects per
 * target, the dispatch table (op, dtypes, n, k, an m range → kernel, launch
 * geometry, constants) and provenance. Written by gcore-gen, read by the
 * runtime. Everything read back is validated: a bundle is untrusted input. */
#ifndef GC_BUNDLE_H
#define GC_BUNDLE_H

#include "../base/expr.h"
#include "../core/problem.h"
#include "../core/tmapspec.h"

/* 2 added dispatch.tmaps, 3 dispatch.pdl, 4 dispatch.prefetch; bundles of
 * versions 1 (no tensor maps), 2 (no programmatic launch) and 3 (no L2
 * windows) still read */
#define GC_BUNDLE_FORMAT_VERSION 4

typedef struct gc_bundle gc_bundle_t;

typedef struct gc_code_rec {
  const char *target;        /* "cpu:x86-64-v4", "sm_90", "gfx942" */
  const char *vid;           /* variant id */
  const char *template_name, *template_hash, *params, *dtypes, *compiler;
  const void *blob;          /* the code object */
  size_t blob_size;
  int64_t regs, spills, shared_bytes, scratch_bytes; /* -1 = unknown */
  int64_t agprs, sgprs, wave, occupancy;             /* AMD; -1 = unknown */
} gc_code_rec_t;

/* One dispatch entry. Strings point into the bundle's storage when read. */
typedef struct gc_dispatch {
  int64_t id, code_id;
  char target[64];
  gc_problem_t shape;        /* op, dtypes, n, k; m is unused here */
  int64_t m_lo, m_hi;        /* inclusive range of M served */
  char symbol[64];
  char grid[GC_EXPR_TEXT], block[GC_EXPR_TEXT]; /* expressions over consts and M N K */
  char shmem[GC_EXPR_TEXT];  /* dynamic shared memory bytes, an expression */
  char consts[1024];         /* "MR=6,NR=32,...,VBYTES=64,SA=4" bound for the expressions */
  char tmaps[GC_TMAPS_MAX * GC_TMAP_LINE]; /* @tensormap lines (core/tmapspec.h), "" if none */
  char template_name[64], params[512], vid[64];
  int is_default;            /* 1 = no tuned winner, the template default */
  int pdl;                   /* 1 = the kernel may overlap its predecessor (@pdl) */
  int prefetch;              /* 1 = the kernel takes an L2 window last (@prefetch) */
  char source[256];          /* provenance of this entry */
} gc_dispatch_t;

/* Writing: create (replacing path), add rows, finish (commit). */
int gc_bundle_create(const char *path, gc_bundle_t **out, gc_err_t *e);
int gc_bundle_set_meta(gc_bundle_t *b, const char *key, const char *value, gc_err_t *e);
/* Adds a code object (deduplicated by target+vid); fills *code_id. */
int gc_bundle_add_code(gc_bundle_t *b, const gc_code_rec_t *c, int64_t *code_id,
                       gc_err_t *e);
int gc_bundle_add_dispatch(gc_bundle_t *b, const gc_dispatch_t *d, gc_err_t *e);
int gc_bundle_finish(gc_bundle_t *b, gc_err_t *e);

/* Reading: validates identity, format version and integrity. */
int gc_bundle_open(const char *path, gc_bundle_t **out, gc_err_t *e);
void gc_bundle_close(gc_bundle_t *b);
const char *gc_bundle_path(const gc_bundle_t *b);

/* Meta value or NULL (string owned by the caller: free()). */
char *gc_bundle_meta(gc_bundle_t *b, const char *key, gc_err_t *e);
/* The targets the bundle has code for, comma separated (caller frees). */
char *gc_bundle_targets(gc_bundle_t *b, gc_err_t *e);

/* The entry for problem p on target: same op, dtypes, n, k and m within
 * [m_lo, m_hi]. GC_ENOTFOUND with a message naming what is there. */
int gc_bundle_lookup(gc_bundle_t *b, const char *target, const gc_problem_t *p,
                     gc_dispatch_t *d, gc_err_t *e);
/* Load code object code_id into a fresh buffer (caller frees). Checks its
 * stored hash. */
int gc_bundle_code(gc_bundle_t *b, int64_t code_id, void **blob, size_t *n,
                   gc_err_t *e);

/* Iterate all dispatch entries (for listing). Returns count via *n; the
 * array is malloc'd. */
int gc_bundle_entries(gc_bundle_t *b, gc_dispatch_t **out, int *n, gc_err_t *e);

#endif
