/* comm_nccl.c — the NCCL transport of comm.h (RCCL on AMD: the same API),
 * dlopen'd like the other vendor libraries, its calls declared in
 * comm_impl.h (no nccl.h). One process drives the group's GPUs: one
 * ncclCommInitAll over their ordinals, one endpoint per rank, each used by
 * its rank's thread. A collective is enqueued on its rank's device stream
 * after the device's own work (gc_dev_stream) and completes in stream
 * order; a barrier also waits for it. A failure — a call that returns an
 * error, gc_comm_abort, or an asynchronous error that a watchdog thread
 * polls for (ncclCommGetAsyncError) — aborts every communicator of the
 * group (ncclCommAbort), so that ranks whose kernels wait in a collective
 * for a dead peer are released with an error instead of hanging. */
#include "comm_impl.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WATCH_MS 50 /* the watchdog's polling period */

typedef struct nccl_group {
  gc_nccl_api_t api;
  void *lib;                    /* dlopen handle, or NULL for a test's api */
  char lib_name[32];
  int n;
  void *comms[GC_COMM_MAX];     /* [n] */
  gc_dev_t *devs[GC_COMM_MAX];  /* [n] */
  gc_dptr_t flag[GC_COMM_MAX];  /* [n] a float per rank: the barrier's all-reduce */
  comm_fail_t *f;
  int aborted;                  /* the communicators are aborted (under f->mu) */
  pthread_t watchdog;
  int watching;
  atomic_int stop;
  atomic_int endpoints;         /* not yet freed; the last frees the group */
} nccl_group_t;

static int nccl_dtype(gc_dtype_t dt) {
  switch (dt) {
    case GC_DT_F16: return 6;
    case GC_DT_F32: return 7;
    case GC_DT_BF16: return 9;
    default: return -1;
  }
}

/* Abort every communicator once; later calls find g->aborted. */
static void abort_all(nccl_group_t *g) {
  pthread_mutex_lock(&g->f->mu);
  int first = !g->aborted;
  g->aborted = 1;
  pthread_mutex_unlock(&g->f->mu);
  for (int r = 0; first && r < g->n; r++) g->api.CommAbort(g->comms[r]);
}

/* A result of call what on rank c: GC_OK, or the group aborted with the
 * library's reason. */
static int check(gc_comm_t *c, int res, const char *what, gc_err_t *e) {
  nccl_group_t *g = c->group;
  if (!res) return GC_OK;
  if (gc_comm_failed(c->fail, e)) return GC_EDEVICE; /* released by an abort: say whose */
  gc_err_set(e, GC_EDEVICE, "%s: %s (%s)", what, g->api.GetErrorString(res), g->lib_name);
  gc_comm_abort(c, e);
  return e->code;
}

/* The entry of a collective: the group still runs, the dtype is one NCCL
 * sums, and *stream is the rank's device stream (the device current). */
static int enter(gc_comm_t *c, gc_dtype_t dt, int *ndt, void **stream, gc_err_t *e) {
  nccl_group_t *g = c->group;
  if (gc_comm_failed(c->fail, e)) return GC_EDEVICE;
  if ((*ndt = nccl_dtype(dt)) < 0)
    return gc_err_set(e, GC_EINVAL, "a collective in %s: f32, f16 or bf16 only", gc_dtype_name(dt));
  if (gc_dev_stream(g->devs[c->rank], stream, e)) {
    gc_comm_abort(c, e);
    return e->code;
  }
  return GC_OK;
}

static int nccl_all_reduce(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e) {
  nccl_group_t *g = c->group;
  int ndt;
  void *stream, *p = (void *)(uintptr_t)buf;
  if (enter(c, dt, &ndt, &stream, e)) return e->code;
  return check(c, g->api.AllReduce(p, p, count, ndt, 0, g->comms[c->rank], stream), "ncclAllReduce", e);
}

static int nccl_all_gather(gc_comm_t *c, gc_dptr_t send, gc_dptr_t recv, size_t count, gc_dtype_t dt,
                           gc_err_t *e) {
  nccl_group_t *g = c->group;
  int ndt;
  void *stream;
  if (enter(c, dt, &ndt, &stream, e)) return e->code;
  int res = g->api.AllGather((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, ndt,
                             g->comms[c->rank], stream);
  return check(c, res, "ncclAllGather", e);
}

/* An all-reduce of one float, then the rank's device drained. */
static int nccl_barrier(gc_comm_t *c, gc_err_t *e) {
  nccl_group_t *g = c->group;
  if (nccl_all_reduce(c, g->flag[c->rank], 1, GC_DT_F32, e)) return e->code;
  int rc = gc_dev_sync(g->devs[c->rank], e);
  if (gc_comm_failed(c->fail, e)) return GC_EDEVICE; /* released by an abort: say whose */
  if (rc) gc_comm_abort(c, e);
  return rc;
}

static void nccl_abort(gc_comm_t *c) { abort_all(c->group); }

/* Poll every communicator's asynchronous error until stopped; the first
 * error aborts the group, named by its rank. */
static void *watch(void *p) {
  nccl_group_t *g = p;
  struct timespec nap = {0, WATCH_MS * 1000000L};
  while (!atomic_load(&g->stop)) {
    for (int r = 0; r < g->n; r++) {
      int res = 0, gone;
      pthread_mutex_lock(&g->f->mu); /* abort_all waits: no communicator is aborted under the call */
      if (!(gone = g->aborted) && g->api.CommGetAsyncError(g->comms[r], &res)) res = 0;
      pthread_mutex_unlock(&g->f->mu);
      if (gone) return NULL;
      if (!res || res == 7) continue; /* 7: in progress */
      gc_err_t why = {0};
      gc_err_set(&why, GC_EDEVICE, "asynchronous error: %s (%s)", g->api.GetErrorString(res), g->lib_name);
      gc_comm_record(g->f, r, &why);
      abort_all(g);
      return NULL;
    }
    nanosleep(&nap, NULL);
  }
  return NULL;
}

static void group_free(nccl_group_t *g) {
  if (g->watching) {
    atomic_store(&g->stop, 1);
    pthread_join(g->watchdog, NULL);
  }
  for (int r = 0; r < g->n; r++) {
    if (g->comms[r] && !g->aborted) g->api.CommDestroy(g->comms[r]);
    if (g->flag[r]) gc_dev_free(g->devs[r], g->flag[r]);
  }
  if (g->lib) dlclose(g->lib);
  free(g);
}

static void nccl_free(gc_comm_t *c) {
  nccl_group_t *g = c->group;
  comm_fail_t *f = c->fail;
  free(c);
  if (atomic_fetch_sub(&g->endpoints, 1) == 1) group_free(g); /* before f goes: the watchdog uses it */
  gc_comm_fail_drop(f);
}

static const comm_ops_t nccl_ops = {nccl_all_reduce, nccl_all_gather, nccl_barrier, nccl_abort, nccl_free, 1};

/* Per rank: a float of device memory for the barrier. */
static int alloc_flags(nccl_group_t *g, gc_err_t *e) {
  for (int r = 0; r < g->n; r++)
    if (gc_dev_alloc(g->devs[r], sizeof(float), &g->flag[r], e)) return gc_err_prefix(e, "rank %d", r);
  return GC_OK;
}

/* The communicators, the watchdog and the endpoints of g. */
static int start(nccl_group_t *g, const int *ordinals, gc_comm_t **out, gc_err_t *e) {
  int res = g->api.CommInitAll(g->comms, g->n, ordinals);
  if (res) {
    memset(g->comms, 0, sizeof g->comms);
    return gc_err_set(e, GC_EDEVICE, "ncclCommInitAll over %d devices: %s (%s)", g->n, g->api.GetErrorString(res),
                      g->lib_name);
  }
  if (alloc_flags(g, e)) return e->code;
  if (pthread_create(&g->watchdog, NULL, watch, g))
    return gc_err_set(e, GC_EDEVICE, "%s: could not start the watchdog thread", g->lib_name);
  g->watching = 1;
  for (int r = 0; r < g->n; r++) {
    if (!(out[r] = gc_calloc(1, sizeof *out[r], e))) {
      for (int i = 0; i < r; i++) free(out[i]);
      return GC_ENOMEM;
    }
    *out[r] = (gc_comm_t){&nccl_ops, r, g->n, g->f, g, 0, NULL};
  }
  return GC_OK;
}

int gc_comm_nccl_with(const gc_nccl_api_t *api, const char *lib, gc_dev_t *const *devs, const int *ordinals,
                      int n, gc_comm_t **out, gc_err_t *e) {
  if (n < 1 || n > GC_COMM_MAX) return gc_err_set(e, GC_EINVAL, "a group of %d ranks: 1 to %d", n, GC_COMM_MAX);
  nccl_group_t *g = gc_calloc(1, sizeof *g, e);
  if (!g) return GC_ENOMEM;
  g->api = *api;
  snprintf(g->lib_name, sizeof g->lib_name, "%s", lib);
  g->n = n;
  memcpy(g->devs, devs, (size_t)n * sizeof *devs);
  atomic_init(&g->stop, 0);
  atomic_init(&g->endpoints, n);
  int rc = (g->f = gc_comm_fail_new(n, e)) ? gc_comm_hook_parse(g->f, n, e) : GC_ENOMEM;
  if (!rc) rc = start(g, ordinals, out, e);
  if (rc) {
    if (g->f) gc_comm_fail_drop_all(g->f);
    group_free(g);
  }
  return rc;
}

int gc_comm_nccl_load(const char *lib, gc_nccl_api_t *api, void **handle, gc_err_t *e) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) return gc_err_set(e, GC_EDEVICE, "%s: cannot load it (tensor parallelism on GPUs needs it)", lib);
  struct { void **slot; const char *name; } syms[] = {
      {(void **)&api->CommInitAll, "ncclCommInitAll"}, {(void **)&api->AllReduce, "ncclAllReduce"},
      {(void **)&api->AllGather, "ncclAllGather"},     {(void **)&api->CommAbort, "ncclCommAbort"},
      {(void **)&api->CommDestroy, "ncclCommDestroy"}, {(void **)&api->CommGetAsyncError, "ncclCommGetAsyncError"},
      {(void **)&api->GetErrorString, "ncclGetErrorString"}};
  for (size_t i = 0; i < GC_ARRAY_LEN(syms); i++)
    if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
      dlclose(h);
      return gc_err_set(e, GC_EDEVICE, "%s: no symbol %s", lib, syms[i].name);
    }
  *handle = h;
  return GC_OK;
}

int gc_comm_nccl(gc_dev_t *const *devs, const int *ordinals, int n, gc_comm_t **out, gc_err_t *e) {
  const char *backend = gc_dev_info(devs[0])->backend;
  const char *lib = !strcmp(backend, "cuda") ? "libnccl.so.2" : !strcmp(backend, "hip") ? "librccl.so.1" : NULL;
  if (!lib) return gc_err_set(e, GC_EUNSUPPORTED, "NCCL collectives need cuda or hip devices, not %s", backend);
  gc_nccl_api_t api;
  void *h = NULL;
  if (gc_comm_nccl_load(lib, &api, &h, e)) return e->code;
  if (gc_comm_nccl_with(&api, lib, devs, ordinals, n, out, e)) {
    dlclose(h);
    return e->code;
  }
  ((nccl_group_t *)out[0]->group)->lib = h; /* closed with the group */
  return GC_OK;
}
