/* tunedb.c — tune.db: schema migrations (embedded db/migrations/NNN_*.sql,
 * applied in order, each in a transaction that also bumps user_version),
 * upserts of the key rows, measurements, and winner selection. */
#include "tunedb.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/embed.h"
#include "tunedb_impl.h"

static void whoami(gc_db_t *db);

const char *const gc_db_statuses[6] = {"ok", "compile-failed", "rejected",
                                       "verify-failed", "launch-failed",
                                       "timed-out"};

/* Migration number of an embedded path "db/migrations/NNN_name.sql", or 0. */
static int migration_number(const char *path) {
  const char *pre = "db/migrations/";
  if (strncmp(path, pre, strlen(pre))) return 0;
  return atoi(path + strlen(pre));
}

int gc_db_latest_version(void) {
  int v = 0;
  for (int i = 0; i < gc_embedded_count; i++) {
    int n = migration_number(gc_embedded[i].path);
    if (n > v) v = n;
  }
  return v;
}

static const gc_embed_t *migration(int number) {
  for (int i = 0; i < gc_embedded_count; i++)
    if (migration_number(gc_embedded[i].path) == number) return &gc_embedded[i];
  return NULL;
}

int gc_db_schema_version(gc_db_t *db) {
  sqlite3_stmt *st;
  int v = -1;
  if (sqlite3_prepare_v2(db->sq, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK) {
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
  }
  return v;
}

/* Run the SQL of migration m (inside the caller's transaction). */
static int apply_migration(gc_db_t *db, const gc_embed_t *m, gc_err_t *e) {
  char *sql = gc_malloc(m->size + 1, e);
  if (!sql) return GC_ENOMEM;
  memcpy(sql, m->data, m->size);
  sql[m->size] = 0;
  int rc = gc_sql_exec(db->sq, sql, e);
  if (rc) gc_err_prefix(e, "%s: migration %s failed", db->path, m->path);
  free(sql);
  return rc;
}

/* Bring the schema to the latest version. The caller holds the write lock
 * (BEGIN IMMEDIATE): the version read here is the one the migrations
 * apply to, whoever else opened the file at the same time. */
static int migrate(gc_db_t *db, gc_err_t *e) {
  int have = gc_db_schema_version(db), latest = gc_db_latest_version();
  if (have < 0) return gc_sql_err(db->sq, e, db->path);
  if (have > latest)
    return gc_err_set(e, GC_EUNSUPPORTED,
                      "%s: schema version %d is newer than this gcore knows (%d); "
                      "use a newer gcore",
                      db->path, have, latest);
  for (int v = have + 1; v <= latest; v++) {
    const gc_embed_t *m = migration(v);
    if (!m) return gc_err_set(e, GC_EINVAL, "migration %d is missing from the build", v);
    if (apply_migration(db, m, e)) return e->code;
  }
  if (have == latest) return GC_OK;
  char tail[96];
  snprintf(tail, sizeof tail, "PRAGMA user_version = %d; PRAGMA application_id = %d;", latest,
           GC_APPID_TUNEDB);
  return gc_sql_exec(db->sq, tail, e);
}

/* Create or migrate in one write transaction: the identity check, the
 * version read and every migration see one state of the file, and a
 * second process opening it meanwhile waits for the lock (busy timeout),
 * then finds the schema complete. */
static int open_for_writing(gc_db_t *db, gc_err_t *e) {
  if (gc_sql_exec(db->sq, "BEGIN IMMEDIATE", e))
    return gc_err_prefix(e, "%s: cannot read tuning database", db->path);
  int rc = gc_sql_check_identity(db->sq, db->path, GC_APPID_TUNEDB, "tuning database", e);
  if (!rc) rc = migrate(db, e);
  if (!rc) rc = gc_sql_exec(db->sq, "COMMIT", e);
  if (rc) {
    gc_sql_exec(db->sq, "ROLLBACK", NULL);
    return rc;
  }
  /* WAL lets gcore-gen read while tuners write. Switching needs a moment
   * alone with the file; where another process holds it open the mode
   * stays as it is (rollback journal: correct, only less concurrent) and
   * a later open switches it. */
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq, "PRAGMA journal_mode = WAL", &st, e)) return e->code;
  sqlite3_step(st);
  sqlite3_finalize(st);
  return gc_sql_exec(db->sq, "PRAGMA synchronous = NORMAL", e);
}

int gc_db_open(const char *path, int create, gc_db_t **out, gc_err_t *e) {
  *out = NULL;
  gc_db_t *db = gc_calloc(1, sizeof *db, e);
  if (!db) return GC_ENOMEM;
  whoami(db);
  if (!(db->path = gc_strdup(path, e)) ||
      gc_sql_open(path, create ? 'w' : 'r', GC_APPID_TUNEDB, "tuning database",
                  &db->sq, e) ||
      gc_sql_exec(db->sq, "PRAGMA foreign_keys = ON", e) ||
      (create && open_for_writing(db, e))) {
    gc_db_close(db);
    return e->code;
  }
  if (!create && gc_db_schema_version(db) != gc_db_latest_version()) {
    int v = gc_db_schema_version(db), latest = gc_db_latest_version();
    gc_db_close(db);
    if (v == 0) /* an empty file (SQLite's empty database): nothing was ever tuned into it */
      return gc_err_set(e, GC_EINVAL, "%s: an empty file, not a tuning database (gcore-tune --db "
                        "writes one)", path);
    return gc_err_set(e, GC_EUNSUPPORTED,
                      v > latest ? "%s: schema version %d is newer than this gcore knows (%d); "
                                   "use a newer gcore"
                                 : "%s: schema version %d, this gcore reads %d (open it with "
                                   "gcore-tune once to migrate)",
                      path, v, latest);
  }
  *out = db;
  return GC_OK;
}

void gc_db_close(gc_db_t *db) {
  if (!db) return;
  sqlite3_close(db->sq);
  free(db->path);
  free(db);
}

int gc_db_begin(gc_db_t *db, gc_err_t *e) { return gc_sql_exec(db->sq, "BEGIN IMMEDIATE", e); }
int gc_db_rollback(gc_db_t *db) { return gc_sql_exec(db->sq, "ROLLBACK", NULL); }
int gc_db_commit(gc_db_t *db, gc_err_t *e) { return gc_sql_exec(db->sq, "COMMIT", e); }

/* Run an INSERT OR IGNORE then a SELECT id with the same bound values. */
typedef void (*binder_t)(sqlite3_stmt *st, const void *arg);

static int upsert(gc_db_t *db, const char *ins, const char *sel, binder_t bind,
                  const void *arg, int64_t *id, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq, ins, &st, e)) return e->code;
  bind(st, arg);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  if (gc_sql_prepare(db->sq, sel, &st, e)) return e->code;
  bind(st, arg);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *id = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? GC_OK : gc_sql_err(db->sq, e, db->path);
}

static void bind_device(sqlite3_stmt *st, const void *arg) {
  const gc_db_device_t *d = arg;
  gc_sql_bind_text(st, 1, d->backend);
  gc_sql_bind_text(st, 2, d->arch);
  gc_sql_bind_text(st, 3, d->name);
  sqlite3_bind_int64(st, 4, d->compute_units);
  sqlite3_bind_int64(st, 5, d->mem_bytes);
  gc_sql_bind_text(st, 6, d->driver);
}

int gc_db_device_id(gc_db_t *db, const gc_db_device_t *d, int64_t *id, gc_err_t *e) {
  return upsert(db,
                "INSERT OR IGNORE INTO devices(backend,arch,name,compute_units,"
                "mem_bytes,driver) VALUES(?1,?2,?3,?4,?5,?6)",
                "SELECT id FROM devices WHERE backend=?1 AND arch=?2 AND name=?3 "
                "AND compute_units=?4 AND mem_bytes=?5 AND driver=?6",
                bind_device, d, id, e);
}

static void bind_compiler(sqlite3_stmt *st, const void *arg) {
  const char *const *s = arg;
  for (int i = 0; i < 3; i++) gc_sql_bind_text(st, i + 1, s[i]);
}

int gc_db_compiler_id(gc_db_t *db, const char *driver, const char *version,
                      const char *flags, int64_t *id, gc_err_t *e) {
  const char *s[3] = {driver, version, flags};
  return upsert(db,
                "INSERT OR IGNORE INTO compilers(driver,version,flags) VALUES(?1,?2,?3)",
                "SELECT id FROM compilers WHERE driver=?1 AND version=?2 AND flags=?3",
                bind_compiler, s, id, e);
}

static void bind_problem(sqlite3_stmt *st, const void *arg) {
  const gc_problem_t *p = arg;
  char key[GC_PROBLEM_KEY];
  gc_problem_key(p, key);
  gc_sql_bind_text(st, 1, key);
  gc_sql_bind_text(st, 2, p->op);
  gc_sql_bind_text(st, 3, gc_dtype_name(p->ta));
  gc_sql_bind_text(st, 4, gc_dtype_name(p->tb));
  gc_sql_bind_text(st, 5, gc_dtype_name(p->tc));
  sqlite3_bind_int64(st, 6, p->m);
  sqlite3_bind_int64(st, 7, p->n);
  sqlite3_bind_int64(st, 8, p->k);
  sqlite3_bind_int64(st, 9, p->h);
  sqlite3_bind_int64(st, 10, p->g);
  sqlite3_bind_int64(st, 11, p->d);
}

int gc_db_problem_id(gc_db_t *db, const gc_problem_t *p, int64_t *id, gc_err_t *e) {
  return upsert(db,
                "INSERT OR IGNORE INTO problems(key,op,ta,tb,tc,m,n,k,h,g,d) "
                "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
                "SELECT id FROM problems WHERE key=?1", bind_problem, p, id, e);
}

static void bind_variant(sqlite3_stmt *st, const void *arg) {
  const gc_db_variant_t *v = arg;
  gc_sql_bind_text(st, 1, v->vid);
  gc_sql_bind_text(st, 2, v->template_name);
  gc_sql_bind_text(st, 3, v->template_hash);
  gc_sql_bind_text(st, 4, v->params);
  gc_sql_bind_text(st, 5, v->dtypes);
  gc_sql_bind_text(st, 6, v->target);
  sqlite3_bind_int64(st, 7, v->compiler_id);
}

int gc_db_variant_id(gc_db_t *db, const gc_db_variant_t *v, int64_t *id, gc_err_t *e) {
  return upsert(db,
                "INSERT OR IGNORE INTO variants(vid,template,template_hash,params,"
                "dtypes,target,compiler_id) VALUES(?1,?2,?3,?4,?5,?6,?7)",
                "SELECT id FROM variants WHERE vid=?1", bind_variant, v, id, e);
}

static void bind_opt_int(sqlite3_stmt *st, int i, int64_t v) {
  if (v < 0)
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_int64(st, i, v);
}

int gc_db_set_resources(gc_db_t *db, int64_t variant_id,
                        const gc_resources_t *r, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq,
                     "UPDATE variants SET code_bytes=?2, regs=?3, spills=?4, "
                     "shared_bytes=?5, scratch_bytes=?6, agprs=?7, sgprs=?8, wave=?9, "
                     "occupancy=?10 WHERE id=?1",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, variant_id);
  bind_opt_int(st, 2, r->code_bytes);
  bind_opt_int(st, 3, r->regs);
  bind_opt_int(st, 4, r->spills);
  bind_opt_int(st, 5, r->shared_bytes);
  bind_opt_int(st, 6, r->scratch_bytes);
  bind_opt_int(st, 7, r->agprs);
  bind_opt_int(st, 8, r->sgprs);
  bind_opt_int(st, 9, r->wave);
  bind_opt_int(st, 10, r->occupancy);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(db->sq, e, db->path);
}

/* SQL: the measurement (columns prefixed t) is a constraint rejection. */
#define CONSTRAINT_REJECTION(t) \
  "(" t "status = 'rejected' AND " t "detail LIKE '" GC_DB_CONSTRAINT_DETAIL "%')"

int gc_db_measured(gc_db_t *db, int64_t device_id, int64_t problem_id,
                   int64_t variant_id, int *found, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq,
                     "SELECT 1 + " CONSTRAINT_REJECTION("") " "
                     "FROM measurements WHERE device_id=?1 AND problem_id=?2 AND variant_id=?3",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  sqlite3_bind_int64(st, 3, variant_id);
  int rc = sqlite3_step(st);
  *found = rc == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  return GC_OK;
}

/* ---- claims ------------------------------------------------------------ */

/* Start time of process pid in clock ticks after boot (field 22 of
 * /proc/PID/stat), or -1 when there is no such process or it has ended
 * and waits to be reaped (a zombie measures nothing). */
static int64_t proc_start(int64_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
  if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X') return -1;
  p++;
  for (int field = 2; field < 21 && p; field++) p = strchr(p + 1, ' ');
  return p ? strtoll(p + 1, NULL, 10) : -1;
}

/* "hostname/boot id": pids name processes only on one host, one boot. */
static void owner_name(char *out, size_t n) {
  char host[256] = "?", boot[64] = "?";
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = 0;
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(boot, sizeof boot, f)) snprintf(boot, sizeof boot, "?");
    boot[strcspn(boot, "\n")] = 0;
    fclose(f);
  }
  snprintf(out, n, "%s/%s", host, boot);
}

static void whoami(gc_db_t *db) {
  owner_name(db->owner, sizeof db->owner);
  db->pid = (int64_t)getpid();
  db->pstart = proc_start(db->pid);
}

/* Run a statement over (device, problem, variant) with no result rows. */
static int claim_stmt(gc_db_t *db, const char *sql, int64_t dev, int64_t prob, int64_t var,
                      gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq, sql, &st, e)) return e->code;
  sqlite3_bind_int64(st, 1, dev);
  sqlite3_bind_int64(st, 2, prob);
  sqlite3_bind_int64(st, 3, var);
  gc_sql_bind_text(st, 4, db->owner);
  sqlite3_bind_int64(st, 5, db->pid);
  sqlite3_bind_int64(st, 6, db->pstart);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(db->sq, e, db->path);
}

/* Whether the claim's owner may still be measuring: on this host, whether
 * the process lives (same pid and start time); elsewhere, for
 * GC_DB_CLAIM_MAX_AGE seconds. */
static int claim_live(gc_db_t *db, const char *owner, int64_t pid, int64_t pstart,
                      double age_s) {
  if (strcmp(owner, db->owner)) return age_s < GC_DB_CLAIM_MAX_AGE;
  return pstart >= 0 && proc_start(pid) == pstart;
}

int gc_db_claim(gc_db_t *db, int64_t device_id, int64_t problem_id, int64_t variant_id,
                int *got, gc_err_t *e) {
  sqlite3_stmt *st;
  *got = 0;
  if (gc_sql_prepare(db->sq,
                     "SELECT owner, pid, pstart, (julianday('now') - julianday(claimed)) * "
                     "86400 FROM claims WHERE device_id=?1 AND problem_id=?2 AND variant_id=?3",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  sqlite3_bind_int64(st, 3, variant_id);
  int rc = sqlite3_step(st), held = 0;
  if (rc == SQLITE_ROW) {
    const char *owner = (const char *)sqlite3_column_text(st, 0);
    int64_t pid = sqlite3_column_int64(st, 1), pstart = sqlite3_column_int64(st, 2);
    int mine = owner && !strcmp(owner, db->owner) && pid == db->pid && pstart == db->pstart;
    held = !mine && claim_live(db, owner ? owner : "", pid, pstart, sqlite3_column_double(st, 3));
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  if (held) return GC_OK;
  if (claim_stmt(db, "INSERT OR REPLACE INTO claims(device_id,problem_id,variant_id,owner,pid,"
                 "pstart) VALUES(?1,?2,?3,?4,?5,?6)", device_id, problem_id, variant_id, e))
    return e->code;
  *got = 1;
  return GC_OK;
}

int gc_db_claims_held(gc_db_t *db, int64_t device_id, int64_t problem_id, int64_t *n,
                      gc_err_t *e) {
  sqlite3_stmt *st;
  *n = 0;
  if (gc_sql_prepare(db->sq,
                     "SELECT owner, pid, pstart, (julianday('now') - julianday(claimed)) * "
                     "86400 FROM claims WHERE device_id=?1 AND problem_id=?2",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *owner = (const char *)sqlite3_column_text(st, 0);
    int64_t pid = sqlite3_column_int64(st, 1), pstart = sqlite3_column_int64(st, 2);
    int mine = owner && !strcmp(owner, db->owner) && pid == db->pid && pstart == db->pstart;
    if (!mine && claim_live(db, owner ? owner : "", pid, pstart, sqlite3_column_double(st, 3)))
      (*n)++;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(db->sq, e, db->path);
}

int gc_db_release_claims(gc_db_t *db, gc_err_t *e) {
  return claim_stmt(db, "DELETE FROM claims WHERE owner=?4 AND pid=?5 AND pstart=?6", 0, 0, 0, e);
}

static void bind_opt_real(sqlite3_stmt *st, int i, double v, int ok) {
  if (ok)
    sqlite3_bind_double(st, i, v);
  else
    sqlite3_bind_null(st, i);
}

int gc_db_record(gc_db_t *db, const gc_db_measurement_t *m, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq,
                     "INSERT INTO measurements(device_id,problem_id,"
                     "variant_id,status,detail,median_us,min_us,max_us,spread,iters,"
                     "tflops,gbps,max_err) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,"
                     "?11,?12,?13) ON CONFLICT(device_id,problem_id,variant_id) DO NOTHING",
                     &st, e))
    return e->code;
  int timed = !strcmp(m->status, "ok");
  sqlite3_bind_int64(st, 1, m->device_id);
  sqlite3_bind_int64(st, 2, m->problem_id);
  sqlite3_bind_int64(st, 3, m->variant_id);
  gc_sql_bind_text(st, 4, m->status);
  gc_sql_bind_text(st, 5, m->detail);
  bind_opt_real(st, 6, m->median_us, timed);
  bind_opt_real(st, 7, m->min_us, timed);
  bind_opt_real(st, 8, m->max_us, timed);
  bind_opt_real(st, 9, m->spread, timed);
  if (timed)
    sqlite3_bind_int64(st, 10, m->iters);
  else
    sqlite3_bind_null(st, 10);
  bind_opt_real(st, 11, m->tflops, timed);
  bind_opt_real(st, 12, m->gbps, timed);
  bind_opt_real(st, 13, m->max_err, m->max_err >= 0);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  return claim_stmt(db, "DELETE FROM claims WHERE device_id=?1 AND problem_id=?2 AND "
                    "variant_id=?3", m->device_id, m->problem_id, m->variant_id, e);
}

typedef struct cand {
  int64_t id;
  double median, spread;
} cand_t;

/* The two fastest verified measurements and the incumbent winner. */
static int load_candidates(gc_db_t *db, int64_t dev, int64_t prob, const char *target,
                           const char *hashes, cand_t c[2], int *nc, cand_t *inc,
                           int *has_inc, gc_err_t *e) {
  sqlite3_stmt *st;
  *nc = *has_inc = 0;
  if (gc_sql_prepare(db->sq,
                     "SELECT m.id, m.median_us, m.spread FROM measurements m "
                     "JOIN variants v ON v.id = m.variant_id WHERE m.device_id=?1 "
                     "AND m.problem_id=?2 AND v.target=?3 AND m.status='ok' AND "
                     "(?4 IS NULL OR instr(?4, ',' || v.template_hash || ',') > 0) "
                     "ORDER BY m.median_us, m.min_us, m.id LIMIT 2",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, dev);
  sqlite3_bind_int64(st, 2, prob);
  gc_sql_bind_text(st, 3, target);
  gc_sql_bind_text(st, 4, hashes);
  while (sqlite3_step(st) == SQLITE_ROW && *nc < 2)
    c[(*nc)++] = (cand_t){sqlite3_column_int64(st, 0), sqlite3_column_double(st, 1),
                          sqlite3_column_double(st, 2)};
  sqlite3_finalize(st);
  if (gc_sql_prepare(db->sq,
                     "SELECT m.id, m.median_us, m.spread FROM winners w JOIN "
                     "measurements m ON m.id = w.measurement_id JOIN variants v ON "
                     "v.id = m.variant_id WHERE w.device_id=?1 AND w.problem_id=?2 AND "
                     "w.target=?3 AND m.status='ok' AND "
                     "(?4 IS NULL OR instr(?4, ',' || v.template_hash || ',') > 0)",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, dev);
  sqlite3_bind_int64(st, 2, prob);
  gc_sql_bind_text(st, 3, target);
  gc_sql_bind_text(st, 4, hashes);
  if (sqlite3_step(st) == SQLITE_ROW) {
    *inc = (cand_t){sqlite3_column_int64(st, 0), sqlite3_column_double(st, 1),
                    sqlite3_column_double(st, 2)};
    *has_inc = 1;
  }
  sqlite3_finalize(st);
  return GC_OK;
}

/* *same = 1 when the winners row of the key holds this winner, runner-up
 * (0: none) and margin already. */
static int same_winner(gc_db_t *db, int64_t dev, int64_t prob, const char *target, int64_t win,
                       int64_t runner, double margin, int *same, gc_err_t *e) {
  sqlite3_stmt *st;
  *same = 0;
  if (gc_sql_prepare(db->sq,
                     "SELECT measurement_id, coalesce(runner_up_id, 0), margin FROM winners "
                     "WHERE device_id=?1 AND problem_id=?2 AND target=?3",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, dev);
  sqlite3_bind_int64(st, 2, prob);
  gc_sql_bind_text(st, 3, target);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *same = sqlite3_column_int64(st, 0) == win && sqlite3_column_int64(st, 1) == runner &&
            (runner ? sqlite3_column_type(st, 2) != SQLITE_NULL && sqlite3_column_double(st, 2) == margin
                    : sqlite3_column_type(st, 2) == SQLITE_NULL);
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  return GC_OK;
}

int gc_db_pick_winner(gc_db_t *db, int64_t device_id, int64_t problem_id,
                      const char *target, const char *template_hashes, double margin,
                      int *found, gc_err_t *e) {
  cand_t c[2], inc;
  int nc, has_inc;
  *found = 0;
  if (load_candidates(db, device_id, problem_id, target, template_hashes, c, &nc, &inc,
                      &has_inc, e))
    return e->code;
  if (!nc) return GC_OK;
  cand_t win = c[0];
  if (has_inc && inc.id != c[0].id) {
    double noise = margin;
    if (inc.spread > noise) noise = inc.spread;
    if (c[0].spread > noise) noise = c[0].spread;
    if (inc.median <= c[0].median * (1.0 + noise)) win = inc; /* within noise */
  }
  const cand_t *runner = NULL;
  for (int i = 0; i < nc; i++)
    if (c[i].id != win.id) {
      runner = &c[i];
      break;
    }
  *found = 1;
  int same = 0;
  if (same_winner(db, device_id, problem_id, target, win.id, runner ? runner->id : 0,
                  runner ? (runner->median - win.median) / win.median : 0, &same, e))
    return e->code;
  if (same) return GC_OK; /* a rerun (or a second merge) changes nothing, not even the time */
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq,
                     "INSERT OR REPLACE INTO winners(device_id,problem_id,target,"
                     "measurement_id,runner_up_id,margin) VALUES(?1,?2,?6,?3,?4,?5)",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  sqlite3_bind_int64(st, 3, win.id);
  if (runner) {
    sqlite3_bind_int64(st, 4, runner->id);
    sqlite3_bind_double(st, 5, (runner->median - win.median) / win.median);
  }
  gc_sql_bind_text(st, 6, target);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  *found = 1;
  return GC_OK;
}

int gc_db_find_winner(gc_db_t *db, const char *target, const gc_problem_t *p,
                      gc_db_winner_t *w, int *found, gc_err_t *e) {
  sqlite3_stmt *st;
  char key[GC_PROBLEM_KEY];
  gc_problem_key(p, key);
  *found = 0;
  memset(w, 0, sizeof *w);
  if (gc_sql_prepare(db->sq,
                     "SELECT m.id, v.vid, v.template, v.template_hash, v.params, "
                     "c.driver || ' ' || c.version || ' ' || c.flags, m.median_us, "
                     "coalesce(w.margin, 0), coalesce(1 - s.kept, 0), s.default_us, s.winner_us, "
                     "coalesce(s.rows, -1) FROM winners w "
                     "JOIN measurements m ON m.id = w.measurement_id "
                     /* the latest step check of this winner on target, if any */
                     "LEFT JOIN step_checks s ON s.id = (" GC_DB_LATEST_STEP_CHECK("m.id", "?1") ") "
                     "JOIN variants v ON v.id = m.variant_id "
                     "JOIN compilers c ON c.id = v.compiler_id "
                     "JOIN problems p ON p.id = w.problem_id "
                     "WHERE w.target=?1 AND v.target=?1 AND p.key=?2 AND m.status='ok' "
                     "ORDER BY w.chosen DESC, m.median_us LIMIT 1",
                     &st, e))
    return e->code;
  gc_sql_bind_text(st, 1, target);
  gc_sql_bind_text(st, 2, key);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    w->measurement_id = sqlite3_column_int64(st, 0);
    int over = gc_sql_col_text(st, 1, w->vid, sizeof w->vid) |
               gc_sql_col_text(st, 2, w->template_name, sizeof w->template_name) |
               gc_sql_col_text(st, 3, w->template_hash, sizeof w->template_hash) |
               gc_sql_col_text(st, 4, w->params, sizeof w->params) |
               gc_sql_col_text(st, 5, w->compiler, sizeof w->compiler);
    w->median_us = sqlite3_column_double(st, 6);
    w->margin = sqlite3_column_double(st, 7);
    w->step_lost = sqlite3_column_int(st, 8);
    w->step_default_us = sqlite3_column_double(st, 9);
    w->step_winner_us = sqlite3_column_double(st, 10);
    w->step_rows = sqlite3_column_int(st, 11);
    if (over) {
      sqlite3_finalize(st);
      return gc_err_set(e, GC_ECORRUPT, "%s: the winner for '%s' on %s has a field longer than gcore reads",
                        db->path, key, target);
    }
    *found = 1;
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  return GC_OK;
}

int gc_db_record_step_check(gc_db_t *db, int64_t measurement_id, const char *target, const char *model,
                            int rows, double default_us, double winner_us, int kept, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq,
                     "INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, rows, "
                     "created) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, strftime('%Y-%m-%d %H:%M:%f', 'now'))",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, measurement_id);
  gc_sql_bind_text(st, 2, target);
  gc_sql_bind_text(st, 3, model);
  sqlite3_bind_double(st, 4, default_us);
  sqlite3_bind_double(st, 5, winner_us);
  sqlite3_bind_int(st, 6, kept ? 1 : 0);
  sqlite3_bind_int(st, 7, rows);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  return GC_OK;
}

const char *gc_db_step_name(int rows, char *out, size_t n) {
  if (rows > 0) snprintf(out, n, "the step of a batch of %d", rows);
  else snprintf(out, n, "%s", rows == 0 ? "the single sequence's step" : "the decode step");
  return out;
}

int gc_db_tuned_problems(gc_db_t *db, const char *target, gc_problems_t *out, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq,
                     "SELECT DISTINCT p.op, p.ta, p.tb, p.tc, p.m, p.n, p.k, p.h, p.g, p.d "
                     "FROM winners w JOIN problems p ON p.id = w.problem_id WHERE w.target = ?1 "
                     "ORDER BY p.key",
                     &st, e))
    return e->code;
  gc_sql_bind_text(st, 1, target);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    gc_problem_t p;
    char dt[48];
    memset(&p, 0, sizeof p);
    char ta[16], tb[16], tc[16];
    int over = gc_sql_col_text(st, 0, p.op, sizeof p.op) | gc_sql_col_text(st, 1, ta, sizeof ta) |
               gc_sql_col_text(st, 2, tb, sizeof tb) | gc_sql_col_text(st, 3, tc, sizeof tc);
    snprintf(dt, sizeof dt, "%s:%s:%s", ta, tb, tc);
    for (int i = 0; i < GC_NDIMS; i++) *gc_problem_dim(&p, i) = sqlite3_column_int64(st, 4 + i);
    /* rows another gcore wrote that this one cannot read are not its problems */
    if (over || gc_dtypes_parse(dt, &p.ta, &p.tb, &p.tc, NULL) || gc_problem_check(&p, NULL)) continue;
    if (gc_problems_push(out, &p, e)) {
      sqlite3_finalize(st);
      return e->code;
    }
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  return GC_OK;
}

int gc_db_variant_median(gc_db_t *db, int64_t device_id, int64_t problem_id,
                         const char *vid, double *median_us, int *found,
                         gc_err_t *e) {
  sqlite3_stmt *st;
  *found = 0;
  if (gc_sql_prepare(db->sq,
                     "SELECT m.median_us FROM measurements m JOIN variants v ON "
                     "v.id = m.variant_id WHERE m.device_id=?1 AND m.problem_id=?2 "
                     "AND v.vid=?3 AND m.status='ok'",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  gc_sql_bind_text(st, 3, vid);
  if (sqlite3_step(st) == SQLITE_ROW) {
    *median_us = sqlite3_column_double(st, 0);
    *found = 1;
  }
  sqlite3_finalize(st);
  return GC_OK;
}

int gc_db_candidates(gc_db_t *db, int64_t device_id, int64_t problem_id, const char *target,
                     int64_t compiler_id, const char *template_hashes, int64_t *n, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db->sq,
                     "SELECT count(*) FROM measurements m JOIN variants v ON v.id = m.variant_id "
                     "WHERE m.device_id=?1 AND m.problem_id=?2 AND v.target=?3 AND "
                     "v.compiler_id=?4 AND instr(?5, ',' || v.template_hash || ',') > 0 AND NOT "
                     CONSTRAINT_REJECTION("m."),
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  sqlite3_bind_text(st, 3, target, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 4, compiler_id);
  sqlite3_bind_text(st, 5, template_hashes, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  *n = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW) return gc_sql_err(db->sq, e, db->path);
  return GC_OK;
}

int gc_db_finalists(gc_db_t *db, int64_t device_id, int64_t problem_id, const char *target,
                    int64_t compiler_id, const char *template_hashes, const char *vid,
                    gc_db_finalist_t *out, int n, int *got, gc_err_t *e) {
  sqlite3_stmt *st;
  *got = 0;
  if (gc_sql_prepare(db->sq,
                     "SELECT m.id, v.id, v.vid, v.template, v.params, m.median_us "
                     "FROM measurements m JOIN variants v ON v.id = m.variant_id "
                     "WHERE m.device_id=?1 AND m.problem_id=?2 AND v.target=?3 AND "
                     "v.compiler_id=?4 AND instr(?5, ',' || v.template_hash || ',') > 0 AND "
                     "m.status='ok' ORDER BY coalesce(v.vid = ?6, 0) DESC, m.median_us, m.id "
                     "LIMIT ?7",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  gc_sql_bind_text(st, 3, target);
  sqlite3_bind_int64(st, 4, compiler_id);
  gc_sql_bind_text(st, 5, template_hashes);
  gc_sql_bind_text(st, 6, vid);
  sqlite3_bind_int(st, 7, n);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW && *got < n) {
    gc_db_finalist_t *f = &out[*got];
    f->measurement_id = sqlite3_column_int64(st, 0);
    f->variant_id = sqlite3_column_int64(st, 1);
    f->median_us = sqlite3_column_double(st, 5);
    if (!(gc_sql_col_text(st, 2, f->vid, sizeof f->vid) |
          gc_sql_col_text(st, 3, f->template_name, sizeof f->template_name) |
          gc_sql_col_text(st, 4, f->params, sizeof f->params)))
      (*got)++; /* else not a variant this gcore made: not a finalist */
  }
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return gc_sql_err(db->sq, e, db->path);
  return GC_OK;
}

/* (In an UPDATE every right-hand side reads the row as it was.) */
#define RETIME_IF_LOWER(col, param) col "=CASE WHEN median_us > ?2 THEN " param " ELSE " col " END"

int gc_db_retime(gc_db_t *db, int64_t measurement_id, const gc_db_measurement_t *m, gc_err_t *e) {
  sqlite3_stmt *st;
  int ok = !strcmp(m->status, "ok");
  if (gc_sql_prepare(db->sq, ok ?
                     "UPDATE measurements SET max_err=max(coalesce(max_err, 0), coalesce(?9, 0)), "
                     RETIME_IF_LOWER("min_us", "?3") ", " RETIME_IF_LOWER("max_us", "?4") ", "
                     RETIME_IF_LOWER("spread", "?5") ", " RETIME_IF_LOWER("iters", "?6") ", "
                     RETIME_IF_LOWER("tflops", "?7") ", " RETIME_IF_LOWER("gbps", "?8") ", "
                     "median_us=min(median_us, ?2) WHERE id=?1 AND status='ok'"
                     : "UPDATE measurements SET status=?10, detail=?11, median_us=NULL, "
                     "min_us=NULL, max_us=NULL, spread=NULL, iters=NULL, tflops=NULL, gbps=NULL, "
                     "max_err=?9 WHERE id=?1",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, measurement_id);
  if (ok) {
    sqlite3_bind_double(st, 2, m->median_us);
    sqlite3_bind_double(st, 3, m->min_us);
    sqlite3_bind_double(st, 4, m->max_us);
    sqlite3_bind_double(st, 5, m->spread);
    sqlite3_bind_int64(st, 6, m->iters);
    sqlite3_bind_double(st, 7, m->tflops);
    sqlite3_bind_double(st, 8, m->gbps);
  } else {
    gc_sql_bind_text(st, 10, m->status);
    gc_sql_bind_text(st, 11, m->detail);
  }
  bind_opt_real(st, 9, m->max_err, m->max_err >= 0);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(db->sq, e, db->path);
}

int gc_db_status_counts(gc_db_t *db, int64_t device_id, int64_t problem_id,
                        int64_t counts[6], gc_err_t *e) {
  sqlite3_stmt *st;
  memset(counts, 0, 6 * sizeof counts[0]);
  if (gc_sql_prepare(db->sq,
                     "SELECT status, count(*) FROM measurements WHERE device_id=?1 "
                     "AND problem_id=?2 GROUP BY status",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, device_id);
  sqlite3_bind_int64(st, 2, problem_id);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *s = (const char *)sqlite3_column_text(st, 0);
    for (int i = 0; i < 6; i++)
      if (s && !strcmp(s, gc_db_statuses[i])) counts[i] = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  return GC_OK;
}
