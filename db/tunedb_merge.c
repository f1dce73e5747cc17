/* tunedb_merge.c — tuning shared across machines: the rows of another
 * tune.db copied in by their keys (never their ids, which differ from file
 * to file), duplicates dropped, and the winners of what changed re-picked
 * over the union. Merging the same database twice changes nothing. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tunedb_impl.h"

/* Source row id -> id here, appended in increasing source id order (every
 * SELECT below orders by id), looked up by binary search. */
typedef struct idmap {
  int64_t *src, *dst;
  int64_t n, cap;
} idmap_t;

static int idmap_put(idmap_t *m, int64_t src, int64_t dst, gc_err_t *e) {
  if (m->n == m->cap) {
    int64_t cap = m->cap ? 2 * m->cap : 256;
    int64_t *s = gc_realloc(m->src, (size_t)cap * sizeof *s, e);
    if (!s) return GC_ENOMEM;
    m->src = s;
    int64_t *d = gc_realloc(m->dst, (size_t)cap * sizeof *d, e);
    if (!d) return GC_ENOMEM;
    m->dst = d;
    m->cap = cap;
  }
  m->src[m->n] = src;
  m->dst[m->n++] = dst;
  return GC_OK;
}

/* The id here of source id src, or 0 when the source row was not copied. */
static int64_t idmap_get(const idmap_t *m, int64_t src) {
  int64_t lo = 0, hi = m->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (m->src[mid] < src) lo = mid + 1;
    else hi = mid;
  }
  return lo < m->n && m->src[lo] == src ? m->dst[lo] : 0;
}

static void idmap_free(idmap_t *m) {
  free(m->src);
  free(m->dst);
}

/* A parameter whose source value is an id of another table: bound as the
 * id here. */
typedef struct remap {
  int param;
  const idmap_t *map;
  const char *what; /* for the message when the source row it names is missing */
} remap_t;

/* How one table is copied. sel runs on the source: column 0 is the row's
 * id there, columns 1..n the values for ?1..?n of ins (remapped where
 * listed). key (may be NULL) finds the row's id here with the same
 * parameters; after (may be NULL) runs after each row with them too. */
typedef struct copy_spec {
  const char *table, *sel, *ins, *key, *after;
  const remap_t *remaps;
  int nremaps;
} copy_spec_t;

typedef struct stmts {
  sqlite3_stmt *sel, *ins, *key, *after;
} stmts_t;

static void stmts_free(stmts_t *s) {
  sqlite3_finalize(s->sel);
  sqlite3_finalize(s->ins);
  sqlite3_finalize(s->key);
  sqlite3_finalize(s->after);
}

/* Bind the source row's columns 1..n to st's parameters 1..n, ids
 * remapped. *missing = the name of a table whose row the source row
 * names but the source lacks (a broken file), else NULL. */
static void bind_row(sqlite3_stmt *st, sqlite3_stmt *sel, const copy_spec_t *c, const char **missing) {
  int n = sqlite3_column_count(sel) - 1, np = sqlite3_bind_parameter_count(st);
  for (int i = 1; i <= n && i <= np; i++) {
    const remap_t *r = NULL;
    for (int j = 0; j < c->nremaps; j++)
      if (c->remaps[j].param == i) r = &c->remaps[j];
    if (!r || sqlite3_column_type(sel, i) == SQLITE_NULL) {
      sqlite3_bind_value(st, i, sqlite3_column_value(sel, i));
      continue;
    }
    int64_t id = idmap_get(r->map, sqlite3_column_int64(sel, i));
    if (!id) *missing = r->what;
    sqlite3_bind_int64(st, i, id);
  }
}

/* Run st (bound) to its end; *id = its first column of the first row. */
static int run(sqlite3 *sq, sqlite3_stmt *st, int64_t *id, const char *path, gc_err_t *e) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (id) *id = sqlite3_column_int64(st, 0);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(sq, e, path);
}

/* Copy every row c->sel yields from src into db; map gets each copied
 * row's id (with c->key), rows counts them, added those new here. */
static int copy_table(gc_db_t *db, gc_db_t *src, const copy_spec_t *c, idmap_t *map,
                      int64_t *rows, int64_t *added, gc_err_t *e) {
  stmts_t s = {0};
  int rc = GC_OK, step;
  if (gc_sql_prepare(src->sq, c->sel, &s.sel, e) || gc_sql_prepare(db->sq, c->ins, &s.ins, e) ||
      (c->key && gc_sql_prepare(db->sq, c->key, &s.key, e)) ||
      (c->after && gc_sql_prepare(db->sq, c->after, &s.after, e))) {
    stmts_free(&s);
    return gc_err_prefix(e, "merging %s", c->table);
  }
  while (!rc && (step = sqlite3_step(s.sel)) == SQLITE_ROW) {
    const char *missing = NULL;
    int64_t id = 0;
    bind_row(s.ins, s.sel, c, &missing);
    if (missing) {
      rc = gc_err_set(e, GC_ECORRUPT, "%s: a row of %s names a row of %s that the file lacks",
                      src->path, c->table, missing);
      break;
    }
    rc = run(db->sq, s.ins, NULL, db->path, e);
    if (!rc) *added += sqlite3_changes(db->sq);
    (*rows)++;
    if (!rc && s.key) {
      bind_row(s.key, s.sel, c, &missing);
      if (!(rc = run(db->sq, s.key, &id, db->path, e)) && map)
        rc = idmap_put(map, sqlite3_column_int64(s.sel, 0), id, e);
    }
    if (!rc && s.after) {
      bind_row(s.after, s.sel, c, &missing);
      rc = run(db->sq, s.after, NULL, db->path, e);
    }
  }
  if (!rc && step != SQLITE_DONE) rc = gc_sql_err(src->sq, e, src->path);
  stmts_free(&s);
  return rc;
}

#define DEVICE_COLS "backend, arch, name, compute_units, mem_bytes, driver"
#define VARIANT_COLS \
  "vid, template, template_hash, params, dtypes, target, compiler_id, code_bytes, regs, " \
  "spills, shared_bytes, scratch_bytes, agprs, sgprs, wave, occupancy"
#define MEASUREMENT_COLS \
  "device_id, problem_id, variant_id, status, detail, median_us, min_us, max_us, spread, " \
  "iters, tflops, gbps, max_err, created"

/* One source, table by table, in the order their references need. */
static int merge_tables(gc_db_t *db, gc_db_t *src, gc_db_merge_stats_t *st, gc_err_t *e) {
  idmap_t devs = {0}, comps = {0}, probs = {0}, vars = {0}, meas = {0};
  int64_t n = 0, ignored = 0;
  const remap_t var_remaps[] = {{7, &comps, "compilers"}};
  const remap_t meas_remaps[] = {{1, &devs, "devices"}, {2, &probs, "problems"}, {3, &vars, "variants"}};
  const remap_t win_remaps[] = {{1, &devs, "devices"}, {2, &probs, "problems"},
                                {4, &meas, "measurements"}, {5, &meas, "measurements"}};
  const remap_t check_remaps[] = {{1, &meas, "measurements"}};
  const copy_spec_t specs[] = {
      {"devices", "SELECT id, " DEVICE_COLS ", first_seen FROM devices ORDER BY id",
       "INSERT OR IGNORE INTO devices(" DEVICE_COLS ", first_seen) VALUES(?1,?2,?3,?4,?5,?6,?7)",
       "SELECT id FROM devices WHERE backend=?1 AND arch=?2 AND name=?3 AND compute_units=?4 "
       "AND mem_bytes=?5 AND driver=?6", NULL, NULL, 0},
      {"compilers", "SELECT id, driver, version, flags FROM compilers ORDER BY id",
       "INSERT OR IGNORE INTO compilers(driver, version, flags) VALUES(?1,?2,?3)",
       "SELECT id FROM compilers WHERE driver=?1 AND version=?2 AND flags=?3", NULL, NULL, 0},
      {"problems", "SELECT id, key, op, ta, tb, tc, m, n, k, layout, epilogue, h, g, d "
       "FROM problems ORDER BY id",
       "INSERT OR IGNORE INTO problems(key, op, ta, tb, tc, m, n, k, layout, epilogue, h, g, d) "
       "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
       "SELECT id FROM problems WHERE key=?1", NULL, NULL, 0},
      /* a variant here without the resource figures the source has gets them */
      {"variants", "SELECT id, " VARIANT_COLS " FROM variants ORDER BY id",
       "INSERT OR IGNORE INTO variants(" VARIANT_COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
       "?11,?12,?13,?14,?15,?16)",
       "SELECT id FROM variants WHERE vid=?1",
       "UPDATE variants SET code_bytes=coalesce(code_bytes,?8), regs=coalesce(regs,?9), "
       "spills=coalesce(spills,?10), shared_bytes=coalesce(shared_bytes,?11), "
       "scratch_bytes=coalesce(scratch_bytes,?12), agprs=coalesce(agprs,?13), "
       "sgprs=coalesce(sgprs,?14), wave=coalesce(wave,?15), occupancy=coalesce(occupancy,?16) "
       "WHERE vid=?1 AND (code_bytes IS NULL OR regs IS NULL OR spills IS NULL OR shared_bytes "
       "IS NULL OR scratch_bytes IS NULL OR agprs IS NULL OR sgprs IS NULL OR wave IS NULL OR "
       "occupancy IS NULL)", var_remaps, 1},
      /* the measurement here is kept; the key of each is re-picked */
      {"measurements", "SELECT id, " MEASUREMENT_COLS " FROM measurements ORDER BY id",
       "INSERT INTO measurements(" MEASUREMENT_COLS ") VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
       "?11,?12,?13,?14) ON CONFLICT(device_id, problem_id, variant_id) DO NOTHING",
       "SELECT id FROM measurements WHERE device_id=?1 AND problem_id=?2 AND variant_id=?3",
       "INSERT OR IGNORE INTO temp.merge_keys SELECT ?1, ?2, target FROM variants WHERE id=?3",
       meas_remaps, 3},
      /* a winner where there is none yet: the incumbent of the re-pick */
      {"winners", "SELECT rowid, device_id, problem_id, target, measurement_id, runner_up_id, "
       "margin, chosen FROM winners ORDER BY rowid",
       "INSERT OR IGNORE INTO winners(device_id, problem_id, target, measurement_id, "
       "runner_up_id, margin, chosen) VALUES(?1,?2,?3,?4,?5,?6,?7)", NULL,
       "INSERT OR IGNORE INTO temp.merge_keys VALUES(?1, ?2, ?3)", win_remaps, 4},
      /* every step check of a measurement copied, each once (it has no key
       * but all of its columns; the latest by created is the verdict) */
      {"step_checks", "SELECT id, measurement_id, target, model, default_us, winner_us, kept, "
       "created, rows FROM step_checks ORDER BY id",
       "INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, created, "
       "rows) SELECT ?1,?2,?3,?4,?5,?6,?7,?8 WHERE NOT EXISTS (SELECT 1 FROM step_checks WHERE "
       "measurement_id=?1 AND target=?2 AND model=?3 AND default_us=?4 AND winner_us=?5 AND "
       "kept=?6 AND created=?7 AND rows IS ?8)", NULL, NULL, check_remaps, 1},
  };
  idmap_t *maps[] = {&devs, &comps, &probs, &vars, &meas, NULL, NULL};
  int64_t *added[] = {&st->devices, &st->compilers, &st->problems, &st->variants, &st->added, &ignored,
                      &st->step_checks};
  int rc = GC_OK;
  for (size_t i = 0; !rc && i < GC_ARRAY_LEN(specs); i++)
    rc = copy_table(db, src, &specs[i], maps[i], i == 4 ? &st->measurements : &n, added[i], e);
  idmap_free(&devs);
  idmap_free(&comps);
  idmap_free(&probs);
  idmap_free(&vars);
  idmap_free(&meas);
  return rc;
}

int gc_db_merge_from(gc_db_t *db, const char *src_path, gc_db_merge_stats_t *st, gc_err_t *e) {
  struct stat a, b;
  gc_db_t *src = NULL;
  memset(st, 0, sizeof *st);
  if (stat(src_path, &a) != 0)
    return gc_err_set(e, GC_ENOTFOUND, "%s: no such tuning database", GC_QUOTED(src_path));
  if (stat(db->path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
    return gc_err_set(e, GC_EINVAL, "%s is the database merged into", GC_QUOTED(src_path));
  if (gc_db_open(src_path, 0, &src, e)) return e->code;
  int rc = gc_sql_exec(db->sq, "CREATE TEMP TABLE IF NOT EXISTS merge_keys (device_id INTEGER, "
                       "problem_id INTEGER, target TEXT, PRIMARY KEY (device_id, problem_id, target))", e);
  if (!rc) rc = merge_tables(db, src, st, e);
  gc_db_close(src);
  return rc;
}

/* The winner's measurement id of a key, 0 when none. */
static int winner_of(gc_db_t *db, sqlite3_stmt *q, int64_t dev, int64_t prob, const char *target,
                     int64_t *id, gc_err_t *e) {
  *id = 0;
  sqlite3_bind_int64(q, 1, dev);
  sqlite3_bind_int64(q, 2, prob);
  gc_sql_bind_text(q, 3, target);
  return run(db->sq, q, id, db->path, e);
}

int gc_db_merge_repick(gc_db_t *db, const char *template_hashes, double margin, int64_t *picked,
                       int64_t *changed, gc_err_t *e) {
  sqlite3_stmt *keys = NULL, *q = NULL;
  *picked = *changed = 0;
  int rc = gc_sql_exec(db->sq, "CREATE TEMP TABLE IF NOT EXISTS merge_keys (device_id INTEGER, "
                       "problem_id INTEGER, target TEXT, PRIMARY KEY (device_id, problem_id, target))", e);
  if (!rc) rc = gc_sql_prepare(db->sq, "SELECT device_id, problem_id, target FROM temp.merge_keys "
                               "ORDER BY device_id, problem_id, target", &keys, e);
  if (!rc) rc = gc_sql_prepare(db->sq, "SELECT measurement_id FROM winners WHERE device_id=?1 AND "
                               "problem_id=?2 AND target=?3", &q, e);
  int step = SQLITE_DONE;
  while (!rc && (step = sqlite3_step(keys)) == SQLITE_ROW) {
    int64_t dev = sqlite3_column_int64(keys, 0), prob = sqlite3_column_int64(keys, 1), before, after;
    char target[128];
    const unsigned char *t = sqlite3_column_text(keys, 2);
    snprintf(target, sizeof target, "%s", t ? (const char *)t : "");
    int found;
    rc = winner_of(db, q, dev, prob, target, &before, e);
    if (!rc) rc = gc_db_pick_winner(db, dev, prob, target, template_hashes, margin, &found, e);
    if (!rc) rc = winner_of(db, q, dev, prob, target, &after, e);
    if (!rc && after) (*picked)++;
    if (!rc && before && after != before) (*changed)++;
  }
  if (!rc && step != SQLITE_DONE) rc = gc_sql_err(db->sq, e, db->path);
  sqlite3_finalize(keys);
  sqlite3_finalize(q);
  if (!rc) rc = gc_sql_exec(db->sq, "DELETE FROM temp.merge_keys", e);
  return rc;
}
