/* tok_bench.c — encode throughput of one tokenizer on one text file:
 * the load is not timed, the encode of the whole file is (best of REPS runs,
 * a fresh tokenizer each run so the word cache starts cold). Prints one
 * JSON line: bytes, seconds (wall), cpu_seconds (this process's CPU time
 * in the same run: on a shared machine the fairer figure), tokens, and an
 * FNV-1a hash of the ids so the bench can check that gcore and the
 * reference produced the same ids.
 *   tok_bench TOKENIZER FILE [REPS] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../models/tokenizer.h"

static uint32_t fnv_ids(const int32_t *v, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)v[i]) * 16777619u;
  return h;
}

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  gc_err_t e = {0};
  char *text;
  size_t n;
  int reps = argc > 3 ? atoi(argv[3]) : 3;
  if (argc < 3 || reps < 1) {
    fprintf(stderr, "usage: tok_bench TOKENIZER FILE [REPS]\n");
    return 2;
  }
  if (gc_read_file(argv[2], (size_t)1 << 31, &text, &n, &e)) {
    fprintf(stderr, "tok_bench: %s\n", e.msg);
    return 1;
  }
  double best = 1e30, best_cpu = 1e30;
  gc_tok_ids_t ids = {0};
  for (int r = 0; r < reps; r++) {
    gc_tok_t *t;
    if (gc_tok_load(argv[1], &t, &e)) {
      fprintf(stderr, "tok_bench: %s\n", e.msg);
      return 1;
    }
    ids.n = 0;
    double t0 = gc_now(), c0 = cpu_now();
    int rc = gc_tok_encode(t, text, n, GC_TOK_SPECIAL, &ids, &e);
    double dt = gc_now() - t0, dc = cpu_now() - c0;
    gc_tok_free(t);
    if (rc) {
      fprintf(stderr, "tok_bench: %s\n", e.msg);
      return 1;
    }
    if (dt < best) best = dt;
    if (dc < best_cpu) best_cpu = dc;
  }
  printf("{\"bytes\": %zu, \"seconds\": %.6f, \"cpu_seconds\": %.6f, \"tokens\": %zu, \"hash\": %u}\n", n, best,
         best_cpu, ids.n, fnv_ids(ids.v, ids.n));
  gc_tok_ids_free(&ids);
  free(text);
  return 0;
}
