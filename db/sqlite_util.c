/* sqlite_util.c — opening untrusted SQLite files safely, and statement
 * helpers shared by tunedb.c and bundle.c. */
#include "sqlite_util.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int gc_sql_err(sqlite3 *db, gc_err_t *e, const char *context) {
  int rc = sqlite3_errcode(db);
  int code = (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT) ? GC_ECORRUPT
             : rc == SQLITE_NOMEM                          ? GC_ENOMEM
                                                           : GC_EIO;
  return gc_err_set(e, code, "%s: %s", context, sqlite3_errmsg(db));
}

int gc_sql_exec(sqlite3 *db, const char *sql, gc_err_t *e) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    int rc = sqlite3_errcode(db);
    gc_err_set(e, rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT ? GC_ECORRUPT : GC_EIO,
               "%s", msg ? msg : sqlite3_errmsg(db));
    sqlite3_free(msg);
    return e ? e->code : GC_EIO;
  }
  return GC_OK;
}

int gc_sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, gc_err_t *e) {
  if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
    return gc_sql_err(db, e, "preparing SQL");
  return GC_OK;
}

void gc_sql_bind_text(sqlite3_stmt *st, int i, const char *s) {
  if (s)
    sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(st, i);
}

int gc_sql_col_text(sqlite3_stmt *st, int i, char *dst, size_t n) {
  const unsigned char *s = sqlite3_column_text(st, i);
  int len = snprintf(dst, n, "%s", s ? (const char *)s : "");
  return len < 0 || (size_t)len >= n;
}

static int query_int(sqlite3 *db, const char *sql, int64_t *v, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(db, sql, &st, e)) return e->code;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? GC_OK : gc_sql_err(db, e, sql);
}

/* An existing file must be readable by SQLite, intact, and ours. */
int gc_sql_check_identity(sqlite3 *db, const char *path, int appid, const char *what,
                          gc_err_t *e) {
  int64_t id, tables;
  if (query_int(db, "PRAGMA application_id", &id, e) ||
      query_int(db, "SELECT count(*) FROM sqlite_master", &tables, e))
    return gc_err_prefix(e, "%s: cannot read %s", path, what);
  sqlite3_stmt *st;
  if (gc_sql_prepare(db, "PRAGMA quick_check", &st, e))
    return gc_err_prefix(e, "%s: cannot read %s", path, what);
  int rc = sqlite3_step(st);
  const char *res = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
  int ok = res && !strcmp(res, "ok");
  char first[200] = "";
  if (res) snprintf(first, sizeof first, "%s", res);
  sqlite3_finalize(st);
  if (!ok)
    return gc_err_set(e, GC_ECORRUPT, "%s: %s is corrupt or truncated (%s)",
                      path, what, rc == SQLITE_ROW ? first : sqlite3_errmsg(db));
  if (id != appid && !(id == 0 && tables == 0))
    return gc_err_set(e, GC_ECORRUPT, "%s: not a gcore %s (SQLite application id 0x%llx)",
                      path, what, (unsigned long long)id);
  return GC_OK;
}

/* "file:PATH?QUERY" with the path percent-encoded, so that '?', '#' and
 * '%' in a file name are not read as URI syntax. */
static int uri_for(const char *path, const char *query, char *out, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = (size_t)snprintf(out, n, "file:");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if (o + 4 >= n) return -1;
    if (isalnum(*p) || strchr("/-._~", *p)) {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  return snprintf(out + o, n - o, "?%s", query) >= (int)(n - o) ? -1 : 0;
}

static int open_ro(const char *path, const char *query, sqlite3 **db, gc_err_t *e) {
  char uri[3 * PATH_MAX + 64];
  *db = NULL;
  if (uri_for(path, query, uri, sizeof uri))
    return gc_err_set(e, GC_EINVAL, "%s: path too long", path);
  if (sqlite3_open_v2(uri, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
    gc_err_set(e, GC_EIO, "%s: %s", path, *db ? sqlite3_errmsg(*db) : "cannot open");
    sqlite3_close(*db);
    *db = NULL;
    return GC_EIO;
  }
  sqlite3_busy_timeout(*db, GC_SQL_BUSY_MS);
  return GC_OK;
}

/* Read-only, wherever the file lies. A WAL database needs its -shm, which
 * SQLite cannot create in a directory this process may not write; then
 * the file alone is the whole database (a cleanly closed database has no
 * -wal or hot -journal left: where one has, the file is refused rather
 * than read without it), and it is read as immutable. */
static int open_read(const char *path, int appid, const char *what, sqlite3 **out,
                     gc_err_t *e) {
  sqlite3 *db;
  if (open_ro(path, "mode=ro", &db, e)) return e->code;
  if (!gc_sql_check_identity(db, path, appid, what, e)) {
    *out = db;
    return GC_OK;
  }
  int rc = sqlite3_extended_errcode(db), prim = rc & 0xff;
  sqlite3_close(db);
  if (prim != SQLITE_CANTOPEN && prim != SQLITE_READONLY) return e->code;
  static const char *const sidecars[] = {"-wal", "-journal"};
  for (size_t i = 0; i < GC_ARRAY_LEN(sidecars); i++) {
    char side[PATH_MAX + 16];
    struct stat st;
    snprintf(side, sizeof side, "%s%s", path, sidecars[i]);
    if (stat(side, &st) == 0 && st.st_size > 0)
      return gc_err_set(e, GC_EIO, "%s: cannot read the %s: %s holds changes not yet written "
                        "into it, and SQLite cannot use it here (open it once where it is "
                        "writable)", path, what, side);
  }
  if (open_ro(path, "immutable=1", &db, e)) return e->code;
  if (gc_sql_check_identity(db, path, appid, what, e)) {
    sqlite3_close(db);
    return e->code;
  }
  *out = db;
  return GC_OK;
}

int gc_sql_open(const char *path, char mode, int appid, const char *what,
                sqlite3 **out, gc_err_t *e) {
  *out = NULL;
  struct stat st;
  int exists = stat(path, &st) == 0;
  if (mode == 'r' && !exists)
    return gc_err_set(e, GC_EIO, "%s: %s", path, strerror(errno));
  if (exists && gc_check_output(path, 'f', e)) return e->code;
  if (mode == 'r') return open_read(path, appid, what, out, e);
  if (mode == 'n' && exists && unlink(path) != 0)
    return gc_err_set(e, GC_EIO, "%s: cannot replace: %s", path, strerror(errno));
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
      SQLITE_OK) {
    gc_err_set(e, GC_EIO, "%s: %s", path, db ? sqlite3_errmsg(db) : "cannot open");
    sqlite3_close(db);
    return GC_EIO;
  }
  sqlite3_busy_timeout(db, GC_SQL_BUSY_MS);
  *out = db;
  return GC_OK;
}
