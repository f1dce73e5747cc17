/* comm_impl.h — what the transports of comm.h share: the endpoint, the
 * table of ops each transport fills, and the group's record of its first
 * failure. Internal to runtime/ (and its tests). */
#ifndef GC_RUNTIME_COMM_IMPL_H
#define GC_RUNTIME_COMM_IMPL_H

#include "comm.h"

#include <pthread.h>
#include <stdatomic.h>

#define GC_COMM_MAX 64

typedef struct comm_ops {
  int (*all_reduce)(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e);
  int (*all_gather)(gc_comm_t *c, gc_dptr_t send, gc_dptr_t recv, size_t count, gc_dtype_t dt,
                    gc_err_t *e);
  int (*barrier)(gc_comm_t *c, gc_err_t *e);
  void (*abort)(gc_comm_t *c); /* stop every rank's work; the failure is already recorded */
  void (*free)(gc_comm_t *c);  /* this endpoint; the group goes with the last */
  int capturable;              /* 1: collectives are stream work a graph capture records */
} comm_ops_t;

/* The record every group keeps: the first failure, under mu. */
typedef struct comm_fail {
  pthread_mutex_t mu;
  int failed;    /* 1 after the first abort */
  int rank;      /* the first failure: rank, code and message */
  gc_err_t why;
  atomic_int refs; /* endpoints not yet freed */
  int force_rank;  /* GC_COMM_FAIL (comm.h): this rank's ... */
  int64_t force_call; /* ... call-th collective fails (0: none) */
} comm_fail_t;

struct gc_comm {
  const comm_ops_t *ops;
  int rank, size;
  comm_fail_t *fail; /* shared by the group's endpoints */
  void *group;       /* the transport's shared state */
  int64_t calls;     /* collectives this rank has entered */
  void *priv;        /* the transport's per-rank state */
};

/* Record why as the group's failure if it is the first; 1 if it was. */
int gc_comm_record(comm_fail_t *f, int rank, const gc_err_t *why);
/* 1 once the group has failed (then e: "aborted: rank R failed: why",
 * GC_EDEVICE); 0 otherwise. */
int gc_comm_failed(comm_fail_t *f, gc_err_t *e);
/* A new record with one reference per endpoint (n); NULL on ENOMEM. */
comm_fail_t *gc_comm_fail_new(int n, gc_err_t *e);
/* Drop one reference; 1 when it was the last (the record is freed). */
int gc_comm_fail_drop(comm_fail_t *f);
/* Free a record no endpoint references yet. */
void gc_comm_fail_drop_all(comm_fail_t *f);
/* Read GC_COMM_FAIL (the test hook of comm.h) for a group of n into f.
 * Errors: GC_EINVAL for a malformed value. */
int gc_comm_hook_parse(comm_fail_t *f, int n, gc_err_t *e);

/* The NCCL API gcore calls, declared here (no nccl.h needed): NCCL 2.x and
 * RCCL share it. Values are NCCL's: results 0 success; data types 6 f16,
 * 7 f32, 9 bf16; reduction 0 sum. */
typedef struct { char internal[128]; } gc_nccl_id_t;
typedef struct gc_nccl_api {
  int (*CommInitAll)(void **comms, int ndev, const int *devlist);
  int (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op, void *comm,
                   void *stream);
  int (*AllGather)(const void *send, void *recv, size_t count, int dtype, void *comm, void *stream);
  int (*CommAbort)(void *comm);
  int (*CommDestroy)(void *comm);
  int (*CommGetAsyncError)(void *comm, int *result);
  const char *(*GetErrorString)(int result);
} gc_nccl_api_t;

/* dlopen lib and fill api with its calls; *handle to dlclose. Errors:
 * GC_EDEVICE naming the library, or the first symbol it lacks. */
int gc_comm_nccl_load(const char *lib, gc_nccl_api_t *api, void **handle, gc_err_t *e);

/* A group over api (the library's, or a test's): as gc_comm_nccl, with
 * the calls of api in place of a library's. */
int gc_comm_nccl_with(const gc_nccl_api_t *api, const char *lib, gc_dev_t *const *devs, const int *ordinals,
                      int n, gc_comm_t **out, gc_err_t *e);

#endif
