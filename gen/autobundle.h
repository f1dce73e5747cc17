/* autobundle.h — the bundle a run uses when it is given none: built from
 * the tuning database for one target into the compile cache, keyed by
 * everything that makes it valid, and reused while that key holds. */
#ifndef GC_AUTOBUNDLE_H
#define GC_AUTOBUNDLE_H

#include "../core/problem.h"

#define GC_AUTO_PATH 1200

typedef struct gc_auto_result {
  char path[GC_AUTO_PATH]; /* the bundle */
  int built;               /* 1: built now; 0: reused from the cache */
  int ntuned, nproblems;   /* problems with a winner in the database, of all */
} gc_auto_result_t;

/* The default tuning database: $GCORE_DB, else $XDG_DATA_HOME/gcore/tune.db,
 * else ~/.local/share/gcore/tune.db. Can't fail (out has n bytes). */
void gc_db_default_path(char *out, size_t n);

/* A bundle for target serving probs (exact entries; every problem of their
 * groups that db_path holds a winner for is added) and every range of
 * needs, from the winners in db_path (a missing file: defaults only), with
 * the meta entries of meta (key, value, ..., NULL; or NULL: none).
 * Lives in <cache>/bundles/<key>.gcb, where key hashes the gcore version,
 * the target, its compiler, every template's source, the problems, the
 * needs and each problem's winner: a rerun with nothing changed reuses it,
 * a new winner or an edited template builds another. */
int gc_gen_auto(const char *db_path, const char *target, const char *cache,
                const gc_problems_t *probs, const gc_needs_t *needs, const char *const *meta,
                gc_auto_result_t *r, gc_err_t *e);

#endif
