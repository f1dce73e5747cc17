/* test_comm.c — the loopback communicator (runtime/comm.h): sums in rank
 * order with the same bits on every rank, gathers, and clean failure: an
 * abort, a timeout, mismatched counts and the GC_COMM_FAIL test hook stop
 * every rank with one line naming the rank that failed, and nothing waits
 * forever. Ranks are threads, as in gcore-run --tp N on the CPU. The NCCL
 * transport runs over a mock of NCCL's calls (host memory, CPU devices):
 * what it passes NCCL, and how a failing call, an asynchronous error and
 * an abort stop the group. */
#include "check.h"

#include "../../core/ops.h"
#include "../../runtime/comm_impl.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>

#define N 4
#define COUNT 1001 /* not a multiple of N: the ranks' slices differ in size */

typedef struct rank_job {
  gc_comm_t *c;
  int rank;
  void (*fn)(struct rank_job *);
  float buf[COUNT], gathered[N * COUNT];
  uint16_t half[COUNT];
  int rc, frc;
  gc_err_t e, f; /* the call's error; gc_comm_failure's after it */
} rank_job_t;

static void *rank_main(void *p) {
  rank_job_t *j = p;
  j->fn(j);
  return NULL;
}

/* Run fn on n ranks of a fresh loopback group (timeout_s), one thread each. */
static void run_ranks(rank_job_t *jobs, int n, double timeout_s, void (*fn)(rank_job_t *)) {
  gc_comm_t *cs[N];
  gc_err_t e = {0};
  CHECK(gc_comm_loopback(n, timeout_s, cs, &e) == GC_OK, "%s", e.msg);
  pthread_t t[N];
  for (int r = 0; r < n; r++) {
    jobs[r].c = cs[r], jobs[r].rank = r, jobs[r].fn = fn, jobs[r].rc = 0;
    memset(&jobs[r].e, 0, sizeof jobs[r].e);
    pthread_create(&t[r], NULL, rank_main, &jobs[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < n; r++) gc_comm_free(cs[r]);
}

static float value(int rank, int i) { return (float)sin(0.37 * i + rank) * (float)(1 + rank) * 1e3f; }

static void reduce_f32(rank_job_t *j) {
  for (int i = 0; i < COUNT; i++) j->buf[i] = value(j->rank, i);
  j->rc = gc_comm_all_reduce(j->c, (gc_dptr_t)(uintptr_t)j->buf, COUNT, GC_DT_F32, &j->e);
}

static rank_job_t jobs[N];

static void test_all_reduce_rank_order(void) {
  run_ranks(jobs, N, 10, reduce_f32);
  int bad = 0, differ = 0;
  for (int i = 0; i < COUNT; i++) {
    float want = 0;
    for (int r = 0; r < N; r++) want += value(r, i); /* rank order, in fp32 */
    for (int r = 0; r < N; r++) {
      bad += memcmp(&jobs[r].buf[i], &want, sizeof want) != 0;
      differ += memcmp(&jobs[r].buf[i], &jobs[0].buf[i], sizeof want) != 0;
    }
  }
  for (int r = 0; r < N; r++) CHECK(jobs[r].rc == GC_OK, "rank %d: %s", r, jobs[r].e.msg);
  CHECK(bad == 0 && differ == 0, "%d sums not in rank order, %d differ between ranks", bad, differ);
}

static void reduce_f16(rank_job_t *j) {
  for (int i = 0; i < COUNT; i++) j->half[i] = gc_f32_to_f16((float)(i % 7) * 0.25f + (float)j->rank);
  j->rc = gc_comm_all_reduce(j->c, (gc_dptr_t)(uintptr_t)j->half, COUNT, GC_DT_F16, &j->e);
}

static void test_all_reduce_f16(void) {
  run_ranks(jobs, 3, 10, reduce_f16);
  int bad = 0;
  for (int r = 0; r < 3; r++) {
    CHECK(jobs[r].rc == GC_OK, "rank %d: %s", r, jobs[r].e.msg);
    for (int i = 0; i < COUNT; i++) bad += gc_f16_to_f32(jobs[r].half[i]) != (float)(i % 7) * 0.75f + 3;
  }
  CHECK(bad == 0, "%d f16 sums wrong", bad);
}

static void gather(rank_job_t *j) {
  for (int i = 0; i < COUNT; i++) j->buf[i] = (float)(j->rank * COUNT + i);
  j->rc = gc_comm_all_gather(j->c, (gc_dptr_t)(uintptr_t)j->buf, (gc_dptr_t)(uintptr_t)j->gathered, COUNT,
                             GC_DT_F32, &j->e);
}

static void test_all_gather(void) {
  run_ranks(jobs, N, 10, gather);
  int bad = 0;
  for (int r = 0; r < N; r++) {
    CHECK(jobs[r].rc == GC_OK, "rank %d: %s", r, jobs[r].e.msg);
    for (int i = 0; i < N * COUNT; i++) bad += jobs[r].gathered[i] != (float)i;
  }
  CHECK(bad == 0, "%d gathered elements wrong", bad);
}

/* Rank 2 fails before its second collective; the others wait in it. */
static void abort_one(rank_job_t *j) {
  if (gc_comm_barrier(j->c, &j->e)) {
    j->rc = j->e.code;
    return;
  }
  if (j->rank == 2) {
    gc_err_set(&j->e, GC_ENOMEM, "out of memory (pretend)");
    gc_comm_abort(j->c, &j->e);
    j->rc = j->e.code;
    return;
  }
  j->rc = gc_comm_all_reduce(j->c, (gc_dptr_t)(uintptr_t)j->buf, COUNT, GC_DT_F32, &j->e);
  j->frc = gc_comm_failure(j->c, &j->f); /* checked by the main thread: check.h counts unlocked */
}

static void test_abort_stops_every_rank(void) {
  run_ranks(jobs, N, 30, abort_one); /* a hang would take the 30 s timeout */
  for (int r = 0; r < N; r++) {
    if (r == 2) continue;
    CHECK(jobs[r].rc == GC_EDEVICE, "rank %d: rc %d", r, jobs[r].rc);
    CHECK_MSG(jobs[r].e, "aborted: rank 2 failed: out of memory (pretend)");
    CHECK(jobs[r].frc == GC_ENOMEM);
    CHECK_MSG(jobs[r].f, "rank 2: out of memory (pretend)");
  }
}

/* Rank 1 never arrives: rank 0 gives up after the timeout. */
static void absent_peer(rank_job_t *j) {
  if (j->rank == 0) j->rc = gc_comm_barrier(j->c, &j->e);
}

static void test_timeout_names_the_waiting_rank(void) {
  double t0 = gc_now();
  run_ranks(jobs, 2, 0.2, absent_peer);
  double dt = gc_now() - t0;
  CHECK(jobs[0].rc == GC_EDEVICE && dt >= 0.15 && dt < 5, "rc %d after %.2f s", jobs[0].rc, dt);
  CHECK_MSG(jobs[0].e, "aborted: rank 0 failed: no peer reached collective 1 within 0.2 s");
}

static void mismatched(rank_job_t *j) {
  j->rc = gc_comm_all_reduce(j->c, (gc_dptr_t)(uintptr_t)j->buf, j->rank == 1 ? 10 : 20, GC_DT_F32, &j->e);
}

static void test_mismatched_counts(void) {
  run_ranks(jobs, 3, 10, mismatched);
  for (int r = 0; r < 3; r++) CHECK(jobs[r].rc != GC_OK, "rank %d went on", r);
  CHECK_MSG_HAS(jobs[1].e, "all-reduce of 10 elements where rank 0 has 20");
}

static void forced(rank_job_t *j) {
  for (int k = 0; k < 3 && !j->rc; k++) j->rc = gc_comm_barrier(j->c, &j->e);
}

static void test_forced_failure_hook(void) {
  setenv("GC_COMM_FAIL", "1:2", 1);
  run_ranks(jobs, 3, 30, forced);
  CHECK(jobs[1].rc == GC_EDEVICE);
  CHECK_MSG(jobs[1].e, "forced failure at collective 2 (GC_COMM_FAIL, a test hook)");
  CHECK_MSG(jobs[0].e, "aborted: rank 1 failed: forced failure at collective 2 (GC_COMM_FAIL, a test hook)");
  gc_comm_t *cs[2];
  gc_err_t e = {0};
  setenv("GC_COMM_FAIL", "5:1", 1);
  CHECK(gc_comm_loopback(2, 1, cs, &e) == GC_EINVAL);
  CHECK_MSG(e, "GC_COMM_FAIL=5:1: expected RANK:CALL, a rank below 2");
  unsetenv("GC_COMM_FAIL");
  CHECK(gc_comm_loopback(0, 1, cs, &e) == GC_EINVAL);
  CHECK_MSG(e, "a group of 0 ranks: 1 to 64");
}

/* ---- the NCCL transport over a mock NCCL ------------------------------------ */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n, arrived, aborted, abort_calls, destroyed, fail_rank, async_rank, devlist[N];
  uint64_t gen;
  const void *send[N];
  int ranks[N];
} mock;

static void mock_reset(int n) {
  static int made;
  if (!made++) pthread_mutex_init(&mock.mu, NULL), pthread_cond_init(&mock.cv, NULL);
  mock.n = n, mock.arrived = mock.aborted = mock.abort_calls = mock.destroyed = 0;
  mock.fail_rank = mock.async_rank = -1;
}

/* A barrier of the mock's ranks that an abort breaks: 1 when broken. */
static int mock_wait(void) {
  pthread_mutex_lock(&mock.mu);
  uint64_t gen = mock.gen;
  if (++mock.arrived == mock.n) mock.arrived = 0, mock.gen++, pthread_cond_broadcast(&mock.cv);
  while (mock.gen == gen && !mock.aborted) pthread_cond_wait(&mock.cv, &mock.mu);
  int broken = mock.gen == gen;
  pthread_mutex_unlock(&mock.mu);
  return broken;
}

static int mock_init_all(void **comms, int n, const int *devlist) {
  for (int r = 0; r < n; r++) mock.ranks[r] = r, comms[r] = &mock.ranks[r], mock.devlist[r] = devlist[r];
  return 0;
}

static int mock_all_reduce(const void *send, void *recv, size_t count, int dtype, int op, void *comm, void *stream) {
  int r = *(int *)comm;
  if (dtype != 7 || op != 0 || stream || send != recv) return 4; /* f32, sum, the CPU's stream, in place */
  if (r == mock.fail_rank) return 3;
  mock.send[r] = send;
  if (mock_wait()) return 3;
  float *sum = calloc(count, sizeof *sum);
  for (int i = 0; i < mock.n; i++)
    for (size_t j = 0; j < count; j++) sum[j] += ((const float *)mock.send[i])[j];
  int broken = mock_wait();
  if (!broken) memcpy(recv, sum, count * sizeof *sum);
  free(sum);
  return broken || mock_wait() ? 3 : 0;
}

static int mock_all_gather(const void *send, void *recv, size_t count, int dtype, void *comm, void *stream) {
  int r = *(int *)comm;
  if (dtype != 7 || stream) return 4;
  mock.send[r] = send;
  if (mock_wait()) return 3;
  for (int i = 0; i < mock.n; i++) memcpy((float *)recv + (size_t)i * count, mock.send[i], count * sizeof(float));
  return mock_wait() ? 3 : 0;
}

static int mock_abort(void *comm) {
  (void)comm;
  pthread_mutex_lock(&mock.mu);
  mock.aborted = 1, mock.abort_calls++;
  pthread_cond_broadcast(&mock.cv);
  pthread_mutex_unlock(&mock.mu);
  return 0;
}

static int mock_destroy(void *comm) {
  (void)comm;
  mock.destroyed++;
  return 0;
}

static int mock_async(void *comm, int *res) {
  *res = *(int *)comm == mock.async_rank ? 5 : 0;
  return 0;
}

static const char *mock_error(int res) { return res == 3 ? "internal error (mock)" : "remote error (mock)"; }

static const gc_nccl_api_t mock_api = {mock_init_all, mock_all_reduce, mock_all_gather, mock_abort,
                                       mock_destroy, mock_async, mock_error};

static gc_dev_t *cpus[N];

/* An NCCL group of n ranks over the mock, on CPU devices. */
static void run_nccl(rank_job_t *jobs_, int n, void (*fn)(rank_job_t *)) {
  gc_comm_t *cs[N];
  gc_err_t e = {0};
  int ords[N] = {0, 1, 2, 3};
  CHECK(gc_comm_nccl_with(&mock_api, "mock", cpus, ords, n, cs, &e) == GC_OK, "%s", e.msg);
  CHECK(mock.devlist[n - 1] == n - 1, "ordinals passed to ncclCommInitAll");
  pthread_t t[N];
  for (int r = 0; r < n; r++) {
    jobs_[r].c = cs[r], jobs_[r].rank = r, jobs_[r].fn = fn, jobs_[r].rc = 0;
    memset(&jobs_[r].e, 0, sizeof jobs_[r].e);
    pthread_create(&t[r], NULL, rank_main, &jobs_[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
  for (int r = 0; r < n; r++) gc_comm_free(cs[r]);
}

static void nccl_all(rank_job_t *j) {
  reduce_f32(j);
  if (!j->rc) j->rc = gc_comm_barrier(j->c, &j->e);
  float keep[COUNT];
  memcpy(keep, j->buf, sizeof keep);
  if (!j->rc) gather(j);
  memcpy(j->buf, keep, sizeof keep);
}

static void test_nccl_collectives(void) {
  mock_reset(3);
  run_nccl(jobs, 3, nccl_all);
  int bad = 0;
  for (int r = 0; r < 3; r++) {
    CHECK(jobs[r].rc == GC_OK, "rank %d: %s", r, jobs[r].e.msg);
    for (int i = 0; i < COUNT; i++) {
      float want = 0;
      for (int k = 0; k < 3; k++) want += value(k, i);
      bad += fabsf(jobs[r].buf[i] - want) > 1e-3f * fabsf(want) + 1e-3f;
    }
    for (int i = 0; i < 3 * COUNT; i++) bad += jobs[r].gathered[i] != (float)i;
  }
  CHECK(bad == 0, "%d elements wrong", bad);
  CHECK(mock.destroyed == 3 && mock.abort_calls == 0, "destroyed %d, aborted %d", mock.destroyed, mock.abort_calls);
}

static void test_nccl_failing_call_aborts_all(void) {
  mock_reset(3);
  mock.fail_rank = 1;
  run_nccl(jobs, 3, reduce_f32);
  CHECK(jobs[1].rc == GC_EDEVICE);
  CHECK_MSG(jobs[1].e, "ncclAllReduce: internal error (mock) (mock)");
  for (int r = 0; r < 3; r += 2)
    CHECK_MSG(jobs[r].e, "aborted: rank 1 failed: ncclAllReduce: internal error (mock) (mock)");
  CHECK(mock.abort_calls == 3 && mock.destroyed == 0, "aborted %d, destroyed %d", mock.abort_calls, mock.destroyed);
}

/* Rank 2 never arrives and reports an asynchronous error: the watchdog
 * aborts the group, releasing the ranks that wait for it. */
static void all_but_two(rank_job_t *j) {
  if (j->rank != 2) reduce_f32(j);
}

static void test_nccl_async_error_releases_waiters(void) {
  mock_reset(3);
  mock.async_rank = 2;
  run_nccl(jobs, 3, all_but_two);
  for (int r = 0; r < 2; r++) {
    CHECK(jobs[r].rc == GC_EDEVICE, "rank %d: rc %d", r, jobs[r].rc);
    CHECK_MSG(jobs[r].e, "aborted: rank 2 failed: asynchronous error: remote error (mock) (mock)");
  }
}

/* The real library, where this host has one: every call gcore declares is
 * there under its name (no device is touched). */
static void test_nccl_library_symbols(void) {
  gc_nccl_api_t api;
  void *h = NULL;
  gc_err_t e = {0};
  if (gc_comm_nccl_load("libnccl.so.2", &api, &h, &e)) {
    CHECK_MSG(e, "libnccl.so.2: cannot load it (tensor parallelism on GPUs needs it)");
    printf("note: libnccl.so.2 is absent here; its symbols were not checked\n");
    return;
  }
  CHECK(api.GetErrorString(0) && *api.GetErrorString(0), "ncclGetErrorString(ncclSuccess)");
  dlclose(h);
}

static void test_nccl_refused(void) {
  gc_comm_t *cs[2];
  gc_err_t e = {0};
  CHECK(gc_comm_nccl(cpus, (int[]){0, 0}, 2, cs, &e) == GC_EUNSUPPORTED);
  CHECK_MSG(e, "NCCL collectives need cuda or hip devices, not cpu");
  mock_reset(2);
  setenv("GC_COMM_FAIL", "0:1", 1); /* the hook serves every transport */
  run_nccl(jobs, 2, reduce_f32);
  unsetenv("GC_COMM_FAIL");
  CHECK_MSG(jobs[0].e, "forced failure at collective 1 (GC_COMM_FAIL, a test hook)");
  CHECK_MSG(jobs[1].e, "aborted: rank 0 failed: forced failure at collective 1 (GC_COMM_FAIL, a test hook)");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsetenv("GC_COMM_FAIL");
  check_case("all_reduce_rank_order", test_all_reduce_rank_order);
  check_case("all_reduce_f16", test_all_reduce_f16);
  check_case("all_gather", test_all_gather);
  check_case("abort_stops_every_rank", test_abort_stops_every_rank);
  check_case("timeout_names_the_waiting_rank", test_timeout_names_the_waiting_rank);
  check_case("mismatched_counts", test_mismatched_counts);
  check_case("forced_failure_hook", test_forced_failure_hook);
  gc_err_t e = {0};
  for (int r = 0; r < N; r++) CHECK(gc_dev_open("cpu", 0, &cpus[r], &e) == GC_OK, "%s", e.msg);
  check_case("nccl_collectives", test_nccl_collectives);
  check_case("nccl_failing_call_aborts_all", test_nccl_failing_call_aborts_all);
  check_case("nccl_async_error_releases_waiters", test_nccl_async_error_releases_waiters);
  check_case("nccl_refused", test_nccl_refused);
  check_case("nccl_library_symbols", test_nccl_library_symbols);
  for (int r = 0; r < N; r++) gc_dev_close(cpus[r]);
  return check_report();
}
