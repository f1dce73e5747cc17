/* comm.c — the collectives' dispatch (see comm.h) and the loopback
 * transport: ranks as threads of one process, a barrier of a mutex and a
 * condition variable that an abort or a timeout breaks, and collectives
 * built from barriers over pointers the ranks publish. */
#include "comm_impl.h"

#include "../core/ops.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the failure record ---------------------------------------------------- */

comm_fail_t *gc_comm_fail_new(int n, gc_err_t *e) {
  comm_fail_t *f = gc_calloc(1, sizeof *f, e);
  if (!f) return NULL;
  pthread_mutex_init(&f->mu, NULL);
  atomic_init(&f->refs, n);
  return f;
}

void gc_comm_fail_drop_all(comm_fail_t *f) {
  pthread_mutex_destroy(&f->mu);
  free(f);
}

int gc_comm_fail_drop(comm_fail_t *f) {
  if (atomic_fetch_sub(&f->refs, 1) != 1) return 0;
  pthread_mutex_destroy(&f->mu);
  free(f);
  return 1;
}

/* Under f->mu. */
static int record_locked(comm_fail_t *f, int rank, const gc_err_t *why) {
  if (f->failed) return 0;
  f->failed = 1;
  f->rank = rank;
  f->why = *why;
  if (!f->why.code) f->why.code = GC_EDEVICE;
  return 1;
}

/* Under f->mu. */
static int failed_locked(const comm_fail_t *f, gc_err_t *e) {
  if (!f->failed) return 0;
  gc_err_set(e, GC_EDEVICE, "aborted: rank %d failed: %s", f->rank, f->why.msg);
  return 1;
}

int gc_comm_record(comm_fail_t *f, int rank, const gc_err_t *why) {
  pthread_mutex_lock(&f->mu);
  int first = record_locked(f, rank, why);
  pthread_mutex_unlock(&f->mu);
  return first;
}

int gc_comm_failed(comm_fail_t *f, gc_err_t *e) {
  pthread_mutex_lock(&f->mu);
  int failed = failed_locked(f, e);
  pthread_mutex_unlock(&f->mu);
  return failed;
}

void gc_comm_abort(gc_comm_t *c, const gc_err_t *why) {
  gc_comm_record(c->fail, c->rank, why);
  c->ops->abort(c);
}

int gc_comm_failure(gc_comm_t *c, gc_err_t *e) {
  comm_fail_t *f = c->fail;
  pthread_mutex_lock(&f->mu);
  int rc = f->failed ? gc_err_set(e, f->why.code, "rank %d: %s", f->rank, f->why.msg) : GC_OK;
  pthread_mutex_unlock(&f->mu);
  return rc;
}

/* ---- the test hook ---------------------------------------------------------- */

int gc_comm_hook_parse(comm_fail_t *f, int n, gc_err_t *e) {
  const char *s = getenv("GC_COMM_FAIL");
  if (!s || !*s) return GC_OK;
  char *end;
  long r = strtol(s, &end, 10);
  long long k = *end == ':' ? strtoll(end + 1, &end, 10) : 0;
  if (*end || r < 0 || r >= n || k < 1)
    return gc_err_set(e, GC_EINVAL, "GC_COMM_FAIL=%s: expected RANK:CALL, a rank below %d", s, n);
  f->force_rank = (int)r;
  f->force_call = k;
  return GC_OK;
}

/* Count a collective of c; fail it (aborting the group) where the hook
 * says so. */
static int hook(gc_comm_t *c, gc_err_t *e) {
  c->calls++;
  if (c->fail->force_call != c->calls || c->fail->force_rank != c->rank) return GC_OK;
  gc_err_set(e, GC_EDEVICE, "forced failure at collective %lld (GC_COMM_FAIL, a test hook)", (long long)c->calls);
  gc_comm_abort(c, e);
  return e->code;
}

/* A loopback group: what every rank shares. The barrier's state is guarded
 * by the failure record's mutex, so that an abort and a wait never race. */
typedef struct loop_group {
  int n;
  double timeout_s;
  comm_fail_t *f;
  pthread_cond_t cv;
  int arrived;                    /* ranks in the barrier now */
  uint64_t generation;            /* barriers completed */
  const void *ptr[GC_COMM_MAX];   /* what each rank published for a collective */
  size_t count[GC_COMM_MAX];
} loop_group_t;

/* A loopback rank's own state. */
typedef struct loop_rank {
  float *scratch; /* all-reduce: this rank's slice of sums */
  size_t cap;
} loop_rank_t;

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
  loop_group_t *g = c->group;
  comm_fail_t *f = g->f;
  struct timespec until = deadline(g->timeout_s);
  pthread_mutex_lock(&f->mu);
  uint64_t gen = g->generation;
  if (!f->failed && ++g->arrived == g->n) {
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  }
  while (!f->failed && g->generation == gen) {
    if (pthread_cond_timedwait(&g->cv, &f->mu, &until) == ETIMEDOUT && g->generation == gen) {
      gc_err_t why = {0};
      gc_err_set(&why, GC_EDEVICE, "no peer reached collective %lld within %g s",
                 (long long)c->calls, g->timeout_s);
      record_locked(f, c->rank, &why);
      pthread_cond_broadcast(&g->cv);
    }
  }
  int rc = g->generation != gen || !failed_locked(f, e) ? GC_OK : GC_EDEVICE;
  pthread_mutex_unlock(&f->mu);
  return rc;
}

/* Entry of every collective: refuse an aborted group. */
static int loop_enter(gc_comm_t *c, gc_err_t *e) {
  return gc_comm_failed(c->fail, e) ? GC_EDEVICE : GC_OK;
}

/* Publish p and count, wait for every rank, and check that they all gave
 * the same count: every rank sees a mismatch, and each aborts the group
 * (the first to do so is recorded) before any reads a peer's buffer. */
static int loop_publish(gc_comm_t *c, const void *p, size_t count, const char *what, gc_err_t *e) {
  loop_group_t *g = c->group;
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

static int grow_scratch(loop_rank_t *lr, size_t n, gc_err_t *e) {
  if (n <= lr->cap) return GC_OK;
  float *p = gc_realloc(lr->scratch, n * sizeof *p, e);
  if (!p) return GC_ENOMEM;
  lr->scratch = p;
  lr->cap = n;
  return GC_OK;
}

/* Rank r sums elements [lo, hi) over the ranks in rank order into its
 * scratch, then (after everyone has read) writes them into every rank's
 * buffer. */
static int loop_all_reduce(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e) {
  loop_group_t *g = c->group;
  loop_rank_t *lr = c->priv;
  if (dt != GC_DT_F32 && dt != GC_DT_F16 && dt != GC_DT_BF16)
    return gc_err_set(e, GC_EINVAL, "all-reduce of %s: f32, f16 or bf16 only", gc_dtype_name(dt));
  size_t lo = count * (size_t)c->rank / (size_t)g->n, hi = count * (size_t)(c->rank + 1) / (size_t)g->n;
  if (grow_scratch(lr, hi - lo, e)) {
    gc_comm_abort(c, e);
    return e->code;
  }
  if (loop_enter(c, e) || loop_publish(c, (const void *)(uintptr_t)buf, count, "all-reduce", e))
    return e->code;
  float *s = lr->scratch - lo; /* s[lo .. hi) */
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
  loop_group_t *g = c->group;
  size_t bytes = count * gc_dtype_size(dt);
  if (loop_enter(c, e) || loop_publish(c, (const void *)(uintptr_t)send, count, "all-gather", e))
    return e->code;
  for (int r = 0; r < g->n; r++)
    memcpy((char *)(uintptr_t)recv + (size_t)r * bytes, g->ptr[r], bytes);
  return loop_wait(c, e); /* nobody reuses send before every rank has copied it */
}

static void loop_abort(gc_comm_t *c) {
  loop_group_t *g = c->group;
  pthread_mutex_lock(&g->f->mu);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->f->mu);
}

static void loop_free(gc_comm_t *c) {
  loop_group_t *g = c->group;
  loop_rank_t *lr = c->priv;
  if (lr) free(lr->scratch);
  free(lr);
  if (gc_comm_fail_drop(g->f)) {
    pthread_cond_destroy(&g->cv);
    free(g);
  }
  free(c);
}

static const comm_ops_t loop_ops = {loop_all_reduce, loop_all_gather, loop_barrier, loop_abort, loop_free, 0};

int gc_comm_loopback(int n, double timeout_s, gc_comm_t **out, gc_err_t *e) {
  if (n < 1 || n > GC_COMM_MAX) return gc_err_set(e, GC_EINVAL, "a group of %d ranks: 1 to %d", n, GC_COMM_MAX);
  if (!(timeout_s > 0)) return gc_err_set(e, GC_EINVAL, "collective timeout %g s: must be positive", timeout_s);
  loop_group_t *g = gc_calloc(1, sizeof *g, e);
  if (!g) return GC_ENOMEM;
  g->n = n;
  g->timeout_s = timeout_s;
  if (!(g->f = gc_comm_fail_new(n, e))) {
    free(g);
    return e->code;
  }
  if (gc_comm_hook_parse(g->f, n, e)) {
    gc_comm_fail_drop_all(g->f);
    free(g);
    return e->code;
  }
  pthread_cond_init(&g->cv, NULL);
  int made = 0;
  for (; made < n; made++) {
    gc_comm_t *c = gc_calloc(1, sizeof *c, e);
    loop_rank_t *lr = c ? gc_calloc(1, sizeof *lr, e) : NULL;
    if (!lr) {
      free(c);
      break;
    }
    *c = (gc_comm_t){&loop_ops, made, n, g->f, g, 0, lr};
    out[made] = c;
  }
  if (made == n) return GC_OK;
  if (!made) { /* nothing references g */
    pthread_cond_destroy(&g->cv);
    gc_comm_fail_drop_all(g->f);
    free(g);
    return GC_ENOMEM;
  }
  for (int r = made; r < n; r++) gc_comm_fail_drop(g->f); /* the endpoints never made */
  for (int r = 0; r < made; r++) gc_comm_free(out[r]);    /* the last frees g */
  return GC_ENOMEM;
}

/* ---- dispatch -------------------------------------------------------------- */

void gc_comm_free(gc_comm_t *c) {
  if (c) c->ops->free(c);
}

int gc_comm_rank(const gc_comm_t *c) { return c->rank; }
int gc_comm_size(const gc_comm_t *c) { return c->size; }
int gc_comm_capturable(const gc_comm_t *c) { return c->ops->capturable; }

int gc_comm_all_reduce(gc_comm_t *c, gc_dptr_t buf, size_t count, gc_dtype_t dt, gc_err_t *e) {
  if (hook(c, e)) return e->code;
  return c->ops->all_reduce(c, buf, count, dt, e);
}

int gc_comm_all_gather(gc_comm_t *c, gc_dptr_t send, gc_dptr_t recv, size_t count, gc_dtype_t dt,
                       gc_err_t *e) {
  if (hook(c, e)) return e->code;
  return c->ops->all_gather(c, send, recv, count, dt, e);
}

int gc_comm_barrier(gc_comm_t *c, gc_err_t *e) {
  if (hook(c, e)) return e->code;
  return c->ops->barrier(c, e);
}
