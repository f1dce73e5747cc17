/* sqlite_util.h — the few SQLite helpers tune.db and bundles share: opening
 * an untrusted file with its identity checked, and statements with errors
 * carried as gc_err_t values. Internal to db/. */
#ifndef GC_SQLITE_UTIL_H
#define GC_SQLITE_UTIL_H

#include <sqlite3.h>

#include "../base/base.h"

#define GC_APPID_TUNEDB 0x67636462 /* "gcdb" */
#define GC_APPID_BUNDLE 0x67636231 /* "gcb1" */

/* Open path. mode: 'r' read-only existing, 'w' read-write existing or new
 * (create; the caller checks identity with gc_sql_check_identity inside
 * its own write transaction, so that concurrent creators cannot see each
 * other half done), 'n' new file replacing any old one. Anything at path
 * that is not a regular file (device, FIFO, socket, directory) is refused.
 * 'r' opens with SQLITE_OPEN_READONLY wherever the file lies: where SQLite
 * cannot create the -shm of a WAL database (a read-only directory), it
 * reads the file as immutable, unless a -wal file holds changes not yet
 * checkpointed (then an error says so). For 'r': checks that SQLite can
 * read it (quick_check) and that its application id is appid (or 0 with
 * no tables, a fresh file). what names the kind of file in messages
 * ("tuning database", "bundle"). A writer waits up to GC_SQL_BUSY_MS for
 * another's lock instead of failing. */
int gc_sql_open(const char *path, char mode, int appid, const char *what,
                sqlite3 **out, gc_err_t *e);
#define GC_SQL_BUSY_MS 120000

/* The identity check gc_sql_open makes for 'r' (see there). */
int gc_sql_check_identity(sqlite3 *db, const char *path, int appid, const char *what,
                          gc_err_t *e);

/* Run SQL with no result rows. */
int gc_sql_exec(sqlite3 *db, const char *sql, gc_err_t *e);
/* Prepare; on failure fill e with SQLite's message. */
int gc_sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, gc_err_t *e);
/* Error from the last call on db, with context. */
int gc_sql_err(sqlite3 *db, gc_err_t *e, const char *context);
/* Bind a text or NULL. */
void gc_sql_bind_text(sqlite3_stmt *st, int i, const char *s);
/* Column i's text (NULL: "") into dst, n bytes; non-zero where it does
 * not fit (dst then holds its first n - 1 bytes). A reader refuses or
 * skips such a row: a cut expression may still parse, as another value,
 * and a cut parameter list names another variant. */
int gc_sql_col_text(sqlite3_stmt *st, int i, char *dst, size_t n);

#endif
