/* test_comm.c — the loopback communicator (runtime/comm.h): sums in rank
 * order with the same bits on every rank, gathers, and clean failure: an
 * abort, a timeout, mismatched counts and the GC_COMM_FAIL test hook stop
 * every rank with one line naming the rank that failed, and nothing waits
 * forever. Ranks are threads, as in gcore-run --tp N on the CPU. */
#include "check.h"

#include "../../core/ops.h"
#include "../../runtime/comm.h"

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
  int rc;
  gc_err_t e;
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
  gc_err_t f = {0};
  CHECK(gc_comm_failure(j->c, &f) == GC_ENOMEM);
  CHECK_MSG(f, "rank 2: out of memory (pretend)");
}

static void test_abort_stops_every_rank(void) {
  run_ranks(jobs, N, 30, abort_one); /* a hang would take the 30 s timeout */
  for (int r = 0; r < N; r++) {
    if (r == 2) continue;
    CHECK(jobs[r].rc == GC_EDEVICE, "rank %d: rc %d", r, jobs[r].rc);
    CHECK_MSG(jobs[r].e, "aborted: rank 2 failed: out of memory (pretend)");
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
  return check_report();
}
