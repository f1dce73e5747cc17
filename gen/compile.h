/* compile.h — compile drivers. A driver turns variant sources into code
 * objects for a target; builds run through ninja so that they are parallel,
 * and land in a content-addressed cache (<cache>/obj/<variant id>.so), so an
 * unchanged variant is never compiled twice (cc with GCC: the CPU
 * prelude's system headers precompiled once into <cache>/pch/). Drivers: cc (CPU), nvrtc
 * (NVIDIA: in process, through the gcore-compile tool on ninja edges),
 * comgr (AMD: in process through gcore-compile, for the ISAs the installed
 * libamd_comgr lists) and clang (AMD: gcore-compile runs clang -x hip as a
 * subprocess, for every other ISA). Both AMD drivers leave the code
 * object's metadata, read through comgr, in a .res sidecar. */
#ifndef GC_COMPILE_H
#define GC_COMPILE_H

#include "target.h"
#include "../core/resources.h"

typedef struct gc_compiler {
  char driver[16];   /* "cc" | "nvrtc" | "comgr" | "clang" */
  char path[1024];   /* the executable ninja runs (cc, or gcore-compile) */
  char tool_args[1200]; /* gcore-compile's options before --kernel (not cc) */
  char target[64];   /* the target it builds for */
  char ext[8];       /* code object file extension: ".so", ".cubin", ".hsaco" */
  char version[160]; /* first line of --version */
  char flags[256];
  char id[1400];     /* driver + version + flags: part of every variant id */
  double timeout_s;  /* seconds one compile may run before it is killed and
                        fails ("timed out after S s"); gc_compiler_for sets
                        GC_COMPILE_TIMEOUT, callers may change it */
} gc_compiler_t;

/* The documented default of --compile-timeout. */
#define GC_COMPILE_TIMEOUT 300.0

/* Find the compiler for target (cc: $CC or "cc"; AMD: comgr where it lists
 * the ISA, else clang). force names a driver or is NULL. Fails with a
 * message naming what is missing, or why the forced driver cannot build
 * the target. */
int gc_compiler_for(const gc_target_t *tg, const char *force, gc_compiler_t *c,
                    gc_err_t *e);

/* 1 when driver (cc, nvrtc, comgr, clang) builds code for backend (cpu,
 * cuda, hip); 0 for an unknown driver. */
int gc_compiler_serves(const char *driver, const char *backend);

/* The clang that builds AMD code: $GCORE_CLANG, else clang-19 on the PATH,
 * else ROCm's /opt/rocm/llvm/bin/clang. Fills path and version (first line
 * of --version). Errors: GC_ECOMPILE naming where it looked. */
int gc_clang_find(char *path, size_t path_n, char *version, size_t version_n, gc_err_t *e);

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
  gc_resources_t res;
} gc_compile_job_t;

/* Default cache: $GCORE_CACHE, else $XDG_CACHE_HOME/gcore, else
 * ~/.cache/gcore. Writes into buf. */
void gc_cache_default(char *buf, size_t n);

/* Compile jobs through ninja (-j parallel, 0 = ninja's default). A job
 * that fails to compile gets ok = 0 and its log; that is not an error of
 * the batch. Each compile runs under timeout(1) for c->timeout_s seconds
 * (its whole process group: cc1, clang, the in-process NVRTC or comgr of
 * gcore-compile): one that stalls fails with the log "timed out after S s".
 * Errors: ninja missing, cache not writable or not a directory. */
int gc_compile_batch(const gc_compiler_t *c, const gc_target_t *tg,
                     const char *cache, gc_compile_job_t *jobs, int n,
                     int parallel, gc_err_t *e);

#endif
