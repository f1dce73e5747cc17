/* fuzz_tunedb.c — the input as a tune.db, opened as gcore-gen opens one
 * (read-only, schema version checked; the winner of a problem looked up,
 * with its step check), as gcore-tune --report reads one (every row, into
 * the page), as gcore-tune --merge reads a source (copied into a fresh
 * database by keys, winners re-picked), and then as gcore-tune opens one
 * (read-write: migrations applied, device, compiler and problem rows
 * upserted, the measured candidates counted and the winner picked again).
 * The seeds hold these rows (fuzz/seeds.py). */
#include <string.h>

#include "fuzz.h"
#include "../db/tunedb.h"
#include "../gen/template.h"
#include "../tuner/report.h"

#define FZ_TARGET "cpu:x86-64-v3"

static char fz_hashes[4096] = ","; /* ",h1,h2,...," of the built-in templates */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  gc_err_t e;
  gc_templates_t set;
  if (gc_tpl_load_all(NULL, &set, &e) != GC_OK) return 0;
  for (int i = 0; i < set.n; i++) {
    size_t n = strlen(fz_hashes);
    snprintf(fz_hashes + n, sizeof fz_hashes - n, "%s,", set.v[i].hash);
  }
  gc_tpl_free_all(&set);
  return 0;
}

static void fz_problem(gc_problem_t *p) {
  memset(p, 0, sizeof *p);
  strcpy(p->op, "gemm");
  p->m = 4, p->n = 32, p->k = 32; /* f32 throughout: GC_DT_F32 is 0 */
}

/* gcore-gen: the winner for the problem, read-only. */
static void fz_as_gen(const char *path) {
  gc_err_t e;
  gc_db_t *db;
  gc_problem_t p;
  gc_db_winner_t w;
  int found;
  if (fz_report("open read-only", gc_db_open(path, 0, &db, &e), &e) != GC_OK) return;
  fz_problem(&p);
  if (!fz_report("winner", gc_db_find_winner(db, FZ_TARGET, &p, &w, &found, &e), &e))
    fz_report(found ? "winner found" : "no winner", 0, &e);
  gc_db_close(db);
}

/* gcore-tune --report: the page of every row. */
static void fz_as_report(const char *path) {
  gc_err_t e;
  gc_db_t *db;
  gc_buf_t page = {0};
  gc_report_stats_t st;
  if (gc_db_open(path, 0, &db, &e) != GC_OK) return; /* fz_as_gen reported it */
  fz_report("report", gc_report_html(db, path, NULL, &page, &st, &e), &e);
  gc_buf_free(&page);
  gc_db_close(db);
}

/* gcore-tune --merge: the input as a source, into a fresh database, in a
 * transaction rolled back. */
static void fz_as_merge(const char *path) {
  gc_err_t e;
  gc_db_t *db;
  gc_db_merge_stats_t st;
  char into[FZ_PATH];
  int64_t picked, changed;
  fz_remove("merged.db");
  fz_write("merged.db", "", 0, into);
  fz_remove("merged.db");
  if (fz_report("merge: open", gc_db_open(into, 1, &db, &e), &e) != GC_OK) return;
  if (fz_report("merge: begin", gc_db_begin(db, &e), &e) == GC_OK) {
    if (fz_report("merge", gc_db_merge_from(db, path, &st, &e), &e) == GC_OK)
      fz_report("merge: re-pick", gc_db_merge_repick(db, fz_hashes, 0.02, &picked, &changed, &e), &e);
    gc_db_rollback(db);
  }
  gc_db_close(db);
  fz_remove("merged.db");
}

/* gcore-tune: resume a sweep of the problem. */
static void fz_as_tune(const char *path) {
  static const gc_db_device_t dev = {"cpu", "x86-64-v3", "fuzz cpu", "fuzz", 2, 1 << 30};
  gc_err_t e;
  gc_db_t *db;
  gc_problem_t p;
  int64_t dev_id, cc_id, prob_id, n, counts[6];
  int found;
  if (fz_report("open read-write", gc_db_open(path, 1, &db, &e), &e) != GC_OK) return;
  fz_problem(&p);
  if (gc_db_device_id(db, &dev, &dev_id, &e) == GC_OK &&
      gc_db_compiler_id(db, "cc", "fuzz", "-O3", &cc_id, &e) == GC_OK &&
      gc_db_problem_id(db, &p, &prob_id, &e) == GC_OK &&
      gc_db_candidates(db, dev_id, prob_id, FZ_TARGET, cc_id, fz_hashes, &n, &e) == GC_OK &&
      gc_db_status_counts(db, dev_id, prob_id, counts, &e) == GC_OK)
    fz_report(n ? "candidates measured" : "no candidates",
              gc_db_pick_winner(db, dev_id, prob_id, FZ_TARGET, fz_hashes, 0.02, &found, &e), &e);
  gc_db_close(db);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[FZ_PATH];
  fz_remove("tune.db");
  fz_write("tune.db", data, size, path);
  fz_as_gen(path);
  fz_as_report(path);
  fz_as_merge(path);
  fz_as_tune(path);
  fz_remove("tune.db");
  return 0;
}
