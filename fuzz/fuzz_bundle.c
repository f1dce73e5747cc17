/* fuzz_bundle.c — the input as a bundle file, read as the runtime reads
 * one (runtime/dispatch.c): open (identity, format version, integrity),
 * list targets and entries, look each entry's shape up, load its code
 * object through the hash check, and evaluate its launch geometry and
 * tensor maps. Code objects are never loaded into the process: a fuzzer
 * that learns the hash could otherwise run what it wrote. */
#include <stdlib.h>

#include "fuzz.h"
#include "../db/bundle.h"
#include "../runtime/tmap.h"

/* What gc_rt_find and the launch geometry do with entry d. */
static void fz_entry(gc_bundle_t *b, const gc_dispatch_t *d) {
  gc_err_t e;
  gc_problem_t p = d->shape;
  p.m = d->m_lo;
  gc_dispatch_t got;
  if (fz_report("lookup", gc_bundle_lookup(b, d->target, &p, &got, &e), &e) != GC_OK) return;
  void *blob;
  size_t n;
  if (gc_bundle_code(b, got.code_id, &blob, &n, &e) == GC_OK) {
    fz_touch(blob, n);
    free(blob);
  }
  gc_env_t env = {0};
  int64_t grid[3], block[3], shmem;
  gc_tmaps_t tm;
  if (fz_report("geometry", gc_env_parse(&env, got.consts, &e) || gc_env_set_dims(&env, &p, &e) ||
      gc_expr_eval3(got.grid, &env, grid, &e) || gc_expr_eval3(got.block, &env, block, &e) ||
      gc_expr_eval(got.shmem, &env, &shmem, &e), &e))
    return;
  fz_report("tensor maps", gc_tmaps_plan(got.tmaps, &env, &p, &tm, &e), &e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[FZ_PATH];
  fz_remove("model.gcb");
  fz_write("model.gcb", data, size, path);
  gc_err_t e;
  gc_bundle_t *b;
  if (fz_report("bundle", gc_bundle_open(path, &b, &e), &e) != GC_OK) return 0;
  free(gc_bundle_meta(b, "tool", &e));
  free(gc_bundle_targets(b, &e));
  gc_dispatch_t *d;
  int n;
  if (gc_bundle_entries(b, &d, &n, &e) == GC_OK) {
    for (int i = 0; i < n && i < 64; i++) fz_entry(b, &d[i]);
    free(d);
  }
  gc_bundle_close(b);
  return 0;
}
