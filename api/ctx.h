/* ctx.h — inside a gcore context (include/gcore.h): the device, where its
 * kernels come from (the bundle it was opened with, bundles built on
 * demand from a tuning database or the templates' defaults), the route
 * each problem takes to its kernel, the verification of default kernels,
 * and the counters. Internal to api/. */
#ifndef GC_API_CTX_H
#define GC_API_CTX_H

#include <pthread.h>
#include <stdatomic.h>

#include "../include/gcore.h"
#include "../runtime/dispatch.h"

/* Where one exact problem (m included) runs: a kernel of an open bundle,
 * or, once resolution failed for a reason that will not change while the
 * context is open, that failure (code and message), so that a shape no
 * kernel serves costs one lookup, not a build, on every call. */
typedef struct gc_api_route {
  gc_problem_t p;
  gc_rt_t *rt;                /* NULL: failed (code, msg) */
  const gc_rt_kernel_t *k;
  int tuned;                  /* 1: a tuned winner; 0: a verified default */
  int code;
  char *msg;
} gc_api_route_t;

/* A bundle opened on the context's device, and the group (problem with
 * m = 0) and row bucket it was built on demand for (main: none). */
typedef struct gc_api_src {
  gc_rt_t *rt;
  gc_problem_t group;
  int64_t bucket;
} gc_api_src_t;

/* The verdict on one default entry of one bundle. */
typedef struct gc_api_verdict {
  gc_rt_t *rt;
  int64_t entry;
  int ok;
  char *why;                  /* the first failure (ok = 0) */
} gc_api_verdict_t;

struct gcore_ctx {
  pthread_mutex_t mu;         /* held by every call while it resolves and enqueues */
  gc_dev_t *dev;
  char target[80];            /* what on-demand bundles are built for */
  char db[1024];              /* the tuning database; "" for none (defaults only) */
  char cache[1024];           /* compile and bundle cache */
  gc_rt_t *main;              /* the bundle of gcore_open; NULL for gcore_open_db */
  gc_api_src_t *srcs;         /* bundles built on demand */
  int nsrcs;
  gc_api_route_t **routes;    /* open addressing on the problem; NULL = empty slot */
  size_t nroutes, cap;
  gc_api_verdict_t *verdicts;
  int nverdicts;
  atomic_llong stats[GCORE_STAT_COUNT];
};

/* The route of p (dims checked by the caller): found, or resolved now
 * (which may build a bundle and verify a kernel). Called with ctx->mu
 * held. A failed route returns its code and message again and again;
 * failures that may pass (out of memory, a device error) are not kept.
 * The route stays valid until gc_api_ctx_free. */
int gc_api_route(gcore_ctx *ctx, const gc_problem_t *p, const gc_api_route_t **out,
                 gc_err_t *e);

/* Everything the context holds but its mutex and the context itself
 * (closes the bundles and the device). Can't fail. */
void gc_api_ctx_free(gcore_ctx *ctx);

#endif
