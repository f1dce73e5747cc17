/* compile.h — compile drivers. A driver turns variant sources into code
 * objects for a target; builds run through ninja so that they are parallel,
 * and land in a content-addressed cache (<cache>/obj/<variant id>.so), so an
 * unchanged variant is never compiled twice. Drivers: cc (CPU), nvrtc
 * (NVIDIA: in process, through the gcore-compile tool on ninja edges). */
#ifndef GC_COMPILE_H
#define GC_COMPILE_H

#include "target.h"
#include "../db/tunedb.h"

typedef struct gc_compiler {
  char driver[16];   /* "cc" | "nvrtc" */
  char path[1024];   /* the executable ninja runs (cc, or gcore-compile for nvrtc) */
  char target[64];   /* the target it builds for */
  char ext[8];       /* code object file extension: ".so", ".cubin" */
  char version[160]; /* first line of --version */
  char flags[256];
  char id[1400];     /* driver + version + flags: part of every variant id */
} gc_compiler_t;

/* Find the compiler for target (cc: $CC or "cc"). force names a driver or
 * is NULL. Fails with a message naming what is missing. */
int gc_compiler_for(const gc_target_t *tg, const char *force, gc_compiler_t *c,
                    gc_err_t *e);

/* One compilation. Inputs: vid, source. Outputs: obj (path), ok, log. */
typedef struct gc_compile_job {
  char vid[GC_HASH_HEX];
  const char *kernel;  /* entry point (resource figures are per kernel) */
  const char *source;
  size_t source_len;
  char obj[1024];
  int ok;            /* 1 = code object exists */
  int cached;        /* 1 = it existed before this batch */
  char log[512];     /* first lines of the compiler's output on failure */
  gc_db_resources_t res;
} gc_compile_job_t;

/* Default cache: $GCORE_CACHE, else $XDG_CACHE_HOME/gcore, else
 * ~/.cache/gcore. Writes into buf. */
void gc_cache_default(char *buf, size_t n);

/* Compile jobs through ninja (-j parallel, 0 = ninja's default). A job
 * that fails to compile gets ok = 0 and its log; that is not an error of
 * the batch. Errors: ninja missing, cache not writable. */
int gc_compile_batch(const gc_compiler_t *c, const gc_target_t *tg,
                     const char *cache, gc_compile_job_t *jobs, int n,
                     int parallel, gc_err_t *e);

#endif
