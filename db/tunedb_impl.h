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

#endif
