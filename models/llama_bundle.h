/* llama_bundle.h — the bundle a Llama model runs with on a device: the one
 * named (-b), or the one for this device's target and this model built
 * from the tuning database into the cache, or reused from there
 * (gen/autobundle.h). What gcore-run and gcore-bench share, so that both
 * run a model with the same kernels. */
#ifndef GC_LLAMA_BUNDLE_H
#define GC_LLAMA_BUNDLE_H

#include "../gen/autobundle.h"
#include "../runtime/dispatch.h"

typedef struct gc_llama_bundle_opts {
  const char *model;    /* the model path, as gc_weights_open reads it */
  const char *quantize; /* --quantize TYPE the model runs with, or NULL */
  const char *bundle;   /* -b PATH, or NULL: built from the database */
  const char *db;       /* without -b: the tuning database (NULL: gc_db_default_path) */
  const char *cache;    /* without -b: the compile cache (NULL: gc_cache_default) */
  int tp;               /* without -b: tensor-parallel ranks (0 or 1: none); the
                           bundle serves one rank's shard shapes (gc_llama_shard) */
} gc_llama_bundle_opts_t;

/* What was opened, for the line a tool prints. */
typedef struct gc_llama_bundle_info {
  int automatic;        /* 1: built or reused from the database (no -b) */
  int built;            /* automatic: 1 built now, 0 reused from the cache */
  int db_exists;        /* automatic: 0 when there is no database (defaults only) */
  int ntuned, nproblems; /* automatic: the model's problems, and those with a winner */
  char path[GC_AUTO_PATH], target[80], db[1024];
} gc_llama_bundle_info_t;

/* Open the bundle for o's model on dev into *rt: o->bundle as given, else
 * the one for the device's own target (arch-specific where it has one:
 * sm_90a on an sm_90 device, where wgmma exists) built from o->db. Errors
 * say which (a bundle without code for the device; a database that cannot
 * be read; a model whose problems no template serves). */
int gc_llama_bundle_open(gc_dev_t *dev, const gc_llama_bundle_opts_t *o, gc_rt_t **rt,
                         gc_llama_bundle_info_t *info, gc_err_t *e);

/* One line on what was opened, as gcore-run and gcore-bench print it
 * (without the tool's name and without a newline); "" for -b. */
void gc_llama_bundle_describe(const gc_llama_bundle_info_t *info, char *out, size_t n);

#endif
