/* tunedb_impl.h — the tuning database's handle, shared by the files of db/
 * that implement tunedb.h (tunedb.c: schema, writes, winners; tunedb_dump.c:
 * reading everything for reports; tunedb_merge.c: merging databases).
 * Internal to db/. */
#ifndef GC_TUNEDB_IMPL_H
#define GC_TUNEDB_IMPL_H

#include "sqlite_util.h"
#include "tunedb.h"

struct gc_db {
  sqlite3 *sq;
  char *path;
  /* this process as the owner of claims: "host/boot id", pid, start time */
  char owner[320];
  int64_t pid, pstart;
};

/* SQL: the id of the step check that is a winner's verdict, the latest
 * recorded (by time, to the millisecond where written so; a merged one
 * keeps its own; an unreadable time is the oldest) of
 * measurement MID on target TARGET (SQL expressions); of two at one time,
 * a refusal. */
#define GC_DB_LATEST_STEP_CHECK(MID, TARGET)                                            \
  "SELECT id FROM step_checks WHERE measurement_id = " MID " AND target = " TARGET \
  " ORDER BY julianday(created) DESC, kept, id DESC LIMIT 1"

#endif
