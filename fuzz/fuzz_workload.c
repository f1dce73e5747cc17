/* fuzz_workload.c — the input as a workload file (gcore-tune and gcore-gen
 * --workload): parsed with gc_problems_load, each problem's key made. */
#include "fuzz.h"
#include "../core/problem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[FZ_PATH];
  fz_write("problems.txt", data, size, path);
  gc_err_t e;
  gc_problems_t l = {0};
  if (fz_report("workload", gc_problems_load(&l, path, &e), &e) == GC_OK)
    for (int i = 0; i < l.n; i++) {
      char key[GC_PROBLEM_KEY];
      gc_problem_key(&l.v[i], key);
      if (gc_problem_check(&l.v[i], &e) != GC_OK) __builtin_trap(); /* loaded means checked */
    }
  gc_problems_free(&l);
  return 0;
}
