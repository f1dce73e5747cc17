/* comm.c — the collectives' dispatch (see comm.h) and the loopback
 * transport: ranks as threads of one process, a barrier of a mutex and a
 * condition variable that an abort or a timeout breaks, and collectives
 * built from barriers over pointers the ranks publish. */
#include "comm.h"

#include "../core/ops.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The ops a transport fills; every endpoint points at its transport's. */
typedef struct comm_ops {
  int (*all_reduce)(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e);
  int (*all_gather)(gc_comm_t *c, gc_dptr_t send, gc_dptr_t recv, size_t count, gc_dtype_t dt,
                    gc_err_t *e);
  int (*barrier)(gc_comm_t *c, gc_err_t *e);
  void (*abort)(gc_comm_t *c); /* wake every rank; the failure is already recorded */
  void (*free)(gc_comm_t *c);
} comm_ops_t;

#define COMM_MAX 64

/* A loopback group: the state every rank shares. */
typedef struct loop_group {
  int n;
  double timeout_s;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;                /* ranks in the barrier now */
  uint64_t generation;        /* barriers completed */
  int failed;                 /* 1 after the first abort (under mu) */
  int fail_rank;              /* the first failure: rank, code and message */
  gc_err_t fail;
  int force_rank;             /* GC_COMM_FAIL: this rank's ... */
  int64_t force_call;         /* ... call fails (0: none) */
  const void *ptr[COMM_MAX];  /* what each rank published for a collective */
  size_t count[COMM_MAX];
  atomic_int refs;            /* endpoints not yet freed */
} loop_group_t;

struct gc_comm {
  const comm_ops_t *ops;
  int rank, size;
  loop_group_t *g;            /* loopback */
  int64_t calls;              /* collectives this rank has entered */
  float *scratch;             /* loopback all-reduce: this rank's slice of sums */
  size_t cap;
};

/* ---- failure ------------------------------------------------------------- */

/* Record why (first caller only) under g->mu. */
static void record_failure(loop_group_t *g, int rank, const gc_err_t *why) {
  if (g->failed) return;
  g->failed = 1;
  g->fail_rank = rank;
  g->fail = *why;
  if (!g->fail.code) g->fail.code = GC_EDEVICE;
}

/* The error a collective returns after an abort. */
static int aborted(const loop_group_t *g, gc_err_t *e) {
  return gc_err_set(e, GC_EDEVICE, "aborted: rank %d failed: %s", g->fail_rank, g->fail.msg);
}

void gc_comm_abort(gc_comm_t *c, const gc_err_t *why) {
  pthread_mutex_lock(&c->g->mu);
  record_failure(c->g, c->rank, why);
  pthread_mutex_unlock(&c->g->mu);
  c->ops->abort(c);
}

int gc_comm_failure(gc_comm_t *c, gc_err_t *e) {
  loop_group_t *g = c->g;
  pthread_mutex_lock(&g->mu);
  int rc = g->failed ? gc_err_set(e, g->fail.code, "rank %d: %s", g->fail_rank, g->fail.msg) : GC_OK;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* ---- the loopback barrier -------------------------------------------------- */

static struct timespec deadline(double s) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  double ns = (double)t.tv_nsec + s * 1e9;
  t.tv_sec += (time_t)(ns / 1e9);
  t.tv_nsec = (long)(ns - (double)(time_t)(ns / 1e9) * 1e9);
  return t;
}

/* Wait until every rank has arrived. Fails (GC_EDEVICE) once the group is
 * aborted, and aborts it itself after the timeout, naming this rank. */
static int loop_wait(gc_comm_t *c, gc_err_t *e) {
  loop_group_t *g = c->g;
  struct timespec until = deadline(g->timeout_s);
  pthread_mutex_lock(&g->mu);
  uint64_t gen = g->generation;
  if (!g->failed && ++g->arrived == g->n) {
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  }
  while (!g->failed && g->generation == gen) {
    if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT && g->generation == gen) {
      gc_err_t why = {0};
      gc_err_set(&why, GC_EDEVICE, "no peer reached collective %lld within %g s",
                 (long long)c->calls, g->timeout_s);
      record_failure(g, c->rank, &why);
      pthread_cond_broadcast(&g->cv);
    }
  }
  int rc = g->generation != gen ? GC_OK : aborted(g, e);
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* Entry of every collective: count it, apply the test hook, refuse an
 * aborted group. */
static int loop_enter(gc_comm_t *c, gc_err_t *e) {
  loop_group_t *g = c->g;
  c->calls++;
  if (g->force_call == c->calls && g->force_rank == c->rank) {
    gc_err_set(e, GC_EDEVICE, "forced failure at collective %lld (GC_COMM_FAIL, a test hook)",
               (long long)c->calls);
    gc_comm_abort(c, e);
    return e->code;
  }
  pthread_mutex_lock(&g->mu);
  int rc = g->failed ? aborted(g, e) : GC_OK;
  pthread_mutex_unlock(&g->mu);
  return rc;
}

/* Publish p and count, wait for every rank, and check that they all gave
 * the same count: every rank sees a mismatch, and each aborts the group
 * (the first to do so is recorded) before any reads a peer's buffer. */
static int loop_publish(gc_comm_t *c, const void *p, size_t count, const char *what, gc_err_t *e) {
  loop_group_t *g = c->g;
  g->ptr[c->rank] = p;
  g->count[c->rank] = count;
  if (loop_wait(c, e)) return e->code;
  for (int r = 0; r < g->n; r++)
    if (g->count[r] != count) {
      gc_err_set(e, GC_EINVAL, "%s of %zu elements where rank %d has %zu", what, count, r, g->count[r]);
      gc_comm_abort(c, e);
      return e->code;
    }
  return GC_OK;
}

static int loop_barrier(gc_comm_t *c, gc_err_t *e) {
  if (loop_enter(c, e)) return e->code;
  return loop_wait(c, e);
}

/* ---- loopback collectives -------------------------------------------------- */

static int grow_scratch(gc_comm_t *c, size_t n, gc_err_t *e) {
  if (n <= c->cap) return GC_OK;
  float *p = gc_realloc(c->scratch, n * sizeof *p, e);
  if (!p) return GC_ENOMEM;
  c->scratch = p;
  c->cap = n;
  return GC_OK;
}

/* Rank r sums elements [lo, hi) over the ranks in rank order into its
 * scratch, then (after everyone has read) writes them into every rank's
 * buffer. */
static int loop_all_reduce(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e) {
  loop_group_t *g = c->g;
  if (dt != GC_DT_F32 && dt != GC_DT_F16 && dt != GC_DT_BF16)
    return gc_err_set(e, GC_EINVAL, "all-reduce of %s: f32, f16 or bf16 only", gc_dtype_name(dt));
  size_t lo = count * (size_t)c->rank / (size_t)g->n, hi = count * (size_t)(c->rank + 1) / (size_t)g->n;
  if (grow_scratch(c, hi - lo, e)) {
    gc_comm_abort(c, e);
    return e->code;
  }
  if (loop_enter(c, e) || loop_publish(c, (const void *)(uintptr_t)buf, count, "all-reduce", e))
    return e->code;
  float *s = c->scratch - lo; /* s[lo .. hi) */
  if (dt == GC_DT_F32) {
    memcpy(s + lo, (const float *)g->ptr[0] + lo, (hi - lo) * sizeof *s);
    for (int r = 1; r < g->n; r++)
      for (size_t i = lo; i < hi; i++) s[i] += ((const float *)g->ptr[r])[i];
  } else {
    for (size_t i = lo; i < hi; i++) {
      s[i] = 0;
      for (int r = 0; r < g->n; r++) s[i] += (float)gc_load_elem(g->ptr[r], dt, (int64_t)i);
    }
  }
  if (loop_wait(c, e)) return e->code;
  for (int r = 0; r < g->n; r++) {
    if (dt == GC_DT_F32) memcpy((float *)g->ptr[r] + lo, s + lo, (hi - lo) * sizeof *s);
    else for (size_t i = lo; i < hi; i++) gc_store_elem((void *)g->ptr[r], dt, (int64_t)i, s[i]);
  }
  return loop_wait(c, e);
}

static int loop_all_gather(gc_comm_t *c, gc_dptr_t send, gc_dptr_t recv, size_t count, gc_dtype_t dt,
                           gc_err_t *e) {
  loop_group_t *g = c->g;
  size_t bytes = count * gc_dtype_size(dt);
  if (loop_enter(c, e) || loop_publish(c, (const void *)(uintptr_t)send, count, "all-gather", e))
    return e->code;
  for (int r = 0; r < g->n; r++)
    memcpy((char *)(uintptr_t)recv + (size_t)r * bytes, g->ptr[r], bytes);
  return loop_wait(c, e); /* nobody reuses send before every rank has copied it */
}

static void loop_abort(gc_comm_t *c) {
  pthread_mutex_lock(&c->g->mu);
  pthread_cond_broadcast(&c->g->cv);
  pthread_mutex_unlock(&c->g->mu);
}

static void loop_free(gc_comm_t *c) {
  loop_group_t *g = c->g;
  free(c->scratch);
  if (atomic_fetch_sub(&g->refs, 1) == 1) {
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
  }
  free(c);
}

static const comm_ops_t loop_ops = {loop_all_reduce, loop_all_gather, loop_barrier, loop_abort, loop_free};

/* GC_COMM_FAIL=RANK:CALL (a test hook, comm.h) into g. */
static int parse_force(loop_group_t *g, gc_err_t *e) {
  const char *s = getenv("GC_COMM_FAIL");
  if (!s || !*s) return GC_OK;
  char *end;
  long r = strtol(s, &end, 10);
  long long k = *end == ':' ? strtoll(end + 1, &end, 10) : 0;
  if (*end || r < 0 || r >= g->n || k < 1)
    return gc_err_set(e, GC_EINVAL, "GC_COMM_FAIL=%s: expected RANK:CALL, a rank below %d", s, g->n);
  g->force_rank = (int)r;
  g->force_call = k;
  return GC_OK;
}

int gc_comm_loopback(int n, double timeout_s, gc_comm_t **out, gc_err_t *e) {
  if (n < 1 || n > COMM_MAX) return gc_err_set(e, GC_EINVAL, "a group of %d ranks: 1 to %d", n, COMM_MAX);
  if (!(timeout_s > 0)) return gc_err_set(e, GC_EINVAL, "collective timeout %g s: must be positive", timeout_s);
  loop_group_t *g = gc_calloc(1, sizeof *g, e);
  if (!g) return GC_ENOMEM;
  g->n = n;
  g->timeout_s = timeout_s;
  if (parse_force(g, e)) {
    free(g);
    return e->code;
  }
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  atomic_init(&g->refs, 0);
  for (int r = 0; r < n; r++) {
    gc_comm_t *c = gc_calloc(1, sizeof *c, e);
    if (!c) {
      for (int i = 0; i < r; i++) gc_comm_free(out[i]);
      if (r == 0) free(g);
      return GC_ENOMEM;
    }
    *c = (gc_comm_t){&loop_ops, r, n, g, 0, NULL, 0};
    atomic_fetch_add(&g->refs, 1);
    out[r] = c;
  }
  return GC_OK;
}

/* ---- dispatch -------------------------------------------------------------- */

void gc_comm_free(gc_comm_t *c) {
  if (c) c->ops->free(c);
}

int gc_comm_rank(const gc_comm_t *c) { return c->rank; }
int gc_comm_size(const gc_comm_t *c) { return c->size; }

int gc_comm_all_reduce(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e) {
  return c->ops->all_reduce(c, buf, count, dt, e);
}

int gc_comm_all_gather(gc_comm_t *c, gc_dptr_t send, gc_dptr_t recv, size_t count, gc_dtype_t dt,
                       gc_err_t *e) {
  return c->ops->all_gather(c, send, recv, count, dt, e);
}

int gc_comm_barrier(gc_comm_t *c, gc_err_t *e) { return c->ops->barrier(c, e); }
