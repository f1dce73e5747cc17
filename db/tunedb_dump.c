/* tunedb_dump.c — a whole tuning database read into memory for a report:
 * its devices, problems, every measurement with its variant, and the
 * winners. The file is untrusted: every string is cut to its field (a
 * report escapes them), NULLs read as NAN or 0, and a problem row this
 * gcore cannot parse is kept by its key with parsed = 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tunedb_impl.h"

/* For display: a value cut at its field is only shown shorter. */
static void text_col(sqlite3_stmt *st, int i, char *dst, size_t n) {
  (void)gc_sql_col_text(st, i, dst, n);
}

static double real_col(sqlite3_stmt *st, int i) {
  return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Grow *v (of *cap elements of size sz) to hold n + 1. */
static int grow(void **v, int64_t *cap, int64_t n, size_t sz, gc_err_t *e) {
  if (n < *cap) return GC_OK;
  int64_t c = *cap ? 2 * *cap : 64;
  void *p = gc_realloc(*v, (size_t)c * sz, e);
  if (!p) return GC_ENOMEM;
  *v = p;
  *cap = c;
  return GC_OK;
}

/* Run sql and hand each row to fn; stops at fn's first error. */
static int each_row(gc_db_t *db, const char *sql, int (*fn)(sqlite3_stmt *, gc_db_dump_t *, gc_err_t *),
                    gc_db_dump_t *d, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq, sql, &st, e)) return e->code;
  int rc, err = GC_OK;
  while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) err = fn(st, d, e);
  sqlite3_finalize(st);
  if (err) return err;
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(db->sq, e, db->path);
}

static int dev_row(sqlite3_stmt *st, gc_db_dump_t *d, gc_err_t *e) {
  int64_t cap = d->cap_devs;
  if (grow((void **)&d->devs, &cap, d->ndevs, sizeof *d->devs, e)) return e->code;
  d->cap_devs = cap;
  gc_db_dev_row_t *r = &d->devs[d->ndevs++];
  memset(r, 0, sizeof *r);
  r->id = sqlite3_column_int64(st, 0);
  text_col(st, 1, r->backend, sizeof r->backend);
  text_col(st, 2, r->arch, sizeof r->arch);
  text_col(st, 3, r->name, sizeof r->name);
  r->compute_units = sqlite3_column_int64(st, 4);
  r->mem_bytes = sqlite3_column_int64(st, 5);
  text_col(st, 6, r->driver, sizeof r->driver);
  return GC_OK;
}

static int prob_row(sqlite3_stmt *st, gc_db_dump_t *d, gc_err_t *e) {
  int64_t cap = d->cap_probs;
  if (grow((void **)&d->probs, &cap, d->nprobs, sizeof *d->probs, e)) return e->code;
  d->cap_probs = cap;
  gc_db_prob_row_t *r = &d->probs[d->nprobs++];
  char op[64], ta[16], tb[16], tc[16], dt[64];
  memset(r, 0, sizeof *r);
  r->id = sqlite3_column_int64(st, 0);
  text_col(st, 1, r->key, sizeof r->key);
  text_col(st, 2, op, sizeof op);
  text_col(st, 3, ta, sizeof ta);
  text_col(st, 4, tb, sizeof tb);
  text_col(st, 5, tc, sizeof tc);
  snprintf(dt, sizeof dt, "%s:%s:%s", ta, tb, tc);
  if (strlen(op) >= sizeof r->p.op) return GC_OK; /* not an op of this gcore */
  snprintf(r->p.op, sizeof r->p.op, "%s", op);
  for (int i = 0; i < GC_NDIMS; i++) *gc_problem_dim(&r->p, i) = sqlite3_column_int64(st, 6 + i);
  r->parsed = !gc_dtypes_parse(dt, &r->p.ta, &r->p.tb, &r->p.tc, NULL) && !gc_problem_check(&r->p, NULL);
  return GC_OK;
}

static int meas_row(sqlite3_stmt *st, gc_db_dump_t *d, gc_err_t *e) {
  if (grow((void **)&d->meas, &d->cap_meas, d->nmeas, sizeof *d->meas, e)) return e->code;
  gc_db_meas_row_t *r = &d->meas[d->nmeas++];
  memset(r, 0, sizeof *r);
  r->id = sqlite3_column_int64(st, 0);
  r->device_id = sqlite3_column_int64(st, 1);
  r->problem_id = sqlite3_column_int64(st, 2);
  r->variant_id = sqlite3_column_int64(st, 3);
  text_col(st, 4, r->status, sizeof r->status);
  text_col(st, 5, r->detail, sizeof r->detail);
  r->median_us = real_col(st, 6);
  r->min_us = real_col(st, 7);
  r->max_us = real_col(st, 8);
  r->spread = real_col(st, 9);
  r->iters = sqlite3_column_int64(st, 10);
  r->tflops = real_col(st, 11);
  r->gbps = real_col(st, 12);
  r->max_err = real_col(st, 13);
  text_col(st, 14, r->target, sizeof r->target);
  text_col(st, 15, r->template_name, sizeof r->template_name);
  text_col(st, 16, r->template_hash, sizeof r->template_hash);
  text_col(st, 17, r->params, sizeof r->params);
  text_col(st, 18, r->vid, sizeof r->vid);
  return GC_OK;
}

static int win_row(sqlite3_stmt *st, gc_db_dump_t *d, gc_err_t *e) {
  int64_t cap = d->cap_wins;
  if (grow((void **)&d->wins, &cap, d->nwins, sizeof *d->wins, e)) return e->code;
  d->cap_wins = cap;
  gc_db_win_row_t *r = &d->wins[d->nwins++];
  memset(r, 0, sizeof *r);
  r->device_id = sqlite3_column_int64(st, 0);
  r->problem_id = sqlite3_column_int64(st, 1);
  text_col(st, 2, r->target, sizeof r->target);
  r->measurement_id = sqlite3_column_int64(st, 3);
  r->runner_up_id = sqlite3_column_int64(st, 4); /* NULL reads as 0: none */
  r->margin = real_col(st, 5);
  r->step_checked = sqlite3_column_type(st, 6) != SQLITE_NULL;
  r->step_kept = sqlite3_column_int(st, 6) == 1;
  r->step_default_us = real_col(st, 7);
  r->step_winner_us = real_col(st, 8);
  r->step_rows = sqlite3_column_int(st, 9);
  return GC_OK;
}

int gc_db_dump(gc_db_t *db, gc_db_dump_t *d, gc_err_t *e) {
  memset(d, 0, sizeof *d);
  int rc = each_row(db, "SELECT id, backend, arch, name, compute_units, mem_bytes, driver "
                    "FROM devices ORDER BY id", dev_row, d, e);
  if (!rc)
    rc = each_row(db, "SELECT id, key, op, ta, tb, tc, m, n, k, h, g, d FROM problems "
                  "ORDER BY op, ta, tb, tc, m, n, k, h, g, d, key", prob_row, d, e);
  if (!rc)
    rc = each_row(db, "SELECT m.id, m.device_id, m.problem_id, m.variant_id, m.status, "
                  "substr(m.detail, 1, 400), m.median_us, m.min_us, m.max_us, m.spread, m.iters, "
                  "m.tflops, m.gbps, m.max_err, v.target, v.template, v.template_hash, v.params, "
                  "v.vid FROM measurements m JOIN variants v ON v.id = m.variant_id "
                  "ORDER BY m.device_id, v.target, m.problem_id, m.median_us IS NULL, "
                  "m.median_us, m.id", meas_row, d, e);
  if (!rc)
    rc = each_row(db, "SELECT w.device_id, w.problem_id, w.target, w.measurement_id, w.runner_up_id, "
                  "w.margin, s.kept, s.default_us, s.winner_us, coalesce(s.rows, -1) FROM winners w "
                  "LEFT JOIN step_checks s "
                  "ON s.id = (" GC_DB_LATEST_STEP_CHECK("w.measurement_id", "w.target") ") "
                  "ORDER BY w.device_id, w.target, w.problem_id", win_row, d, e);
  if (rc) gc_db_dump_free(d);
  return rc;
}

void gc_db_dump_free(gc_db_dump_t *d) {
  free(d->devs);
  free(d->probs);
  free(d->meas);
  free(d->wins);
  memset(d, 0, sizeof *d);
}
