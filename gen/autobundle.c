/* autobundle.c — the cached bundle of a run without -b (see autobundle.h):
 * the key is computed from the same inputs gcore-gen would read, so a
 * cached bundle is exactly what gcore-gen would build now. */
#include "autobundle.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../db/tunedb.h"
#include "bundle_build.h"
#include "compile.h"
#include "template.h"

void gc_db_default_path(char *out, size_t n) {
  const char *g = getenv("GCORE_DB"), *x = getenv("XDG_DATA_HOME"), *h = getenv("HOME");
  if (g && *g)
    snprintf(out, n, "%s", g);
  else if (x && *x)
    snprintf(out, n, "%s/gcore/tune.db", x);
  else
    snprintf(out, n, "%s/.local/share/gcore/tune.db", h && *h ? h : "/tmp");
}

static int is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int same_group(const gc_problem_t *a, const gc_problem_t *b) {
  gc_problem_t x = *a, y = *b;
  x.m = y.m = 0;
  return gc_problem_same(&x, &y);
}

/* The problems the bundle lists exactly: probs, and every tuned problem of
 * a group that probs or needs name (a prompt length someone tuned for). */
static int exact_problems(gc_db_t *db, const char *target, const gc_problems_t *probs,
                          const gc_needs_t *needs, gc_problems_t *out, gc_err_t *e) {
  gc_problems_t tuned = {0};
  int rc = GC_OK;
  for (int i = 0; !rc && i < probs->n; i++) rc = gc_problems_push(out, &probs->v[i], e);
  if (!rc && db) rc = gc_db_tuned_problems(db, target, &tuned, e);
  for (int i = 0; !rc && i < tuned.n; i++) {
    int mine = 0;
    for (int j = 0; j < probs->n && !mine; j++) mine = same_group(&tuned.v[i], &probs->v[j]);
    for (int j = 0; needs && j < needs->n && !mine; j++) mine = same_group(&tuned.v[i], &needs->v[j].p);
    if (mine) rc = gc_problems_push(out, &tuned.v[i], e);
  }
  gc_problems_free(&tuned);
  return rc;
}

/* Everything gcore-gen's output depends on, as text. */
static int key_text(gc_db_t *db, const gc_target_t *tg, const gc_compiler_t *cc,
                    const gc_templates_t *tpls, const gc_problems_t *ps, const gc_needs_t *needs,
                    gc_buf_t *k, int *ntuned, gc_err_t *e) {
  char key[GC_PROBLEM_KEY];
  *ntuned = 0;
  int rc = gc_buf_printf(k, e, "gcore %s\n%s\n%s\n", GC_VERSION, tg->name, cc->id);
  for (int i = 0; !rc && i < tpls->n; i++)
    rc = gc_buf_printf(k, e, "template %s %s\n", tpls->v[i].name, tpls->v[i].hash);
  for (int i = 0; !rc && i < ps->n; i++) {
    gc_db_winner_t w;
    int found = 0;
    gc_problem_key(&ps->v[i], key);
    if (db) rc = gc_db_find_winner(db, tg->name, &ps->v[i], &w, &found, e);
    *ntuned += found;
    if (!rc) rc = gc_buf_printf(k, e, "problem %s winner %s %lld%s\n", key, found ? w.vid : "-",
                                found ? (long long)w.measurement_id : -1LL,
                                found && w.step_lost ? " slower in the step" : "");
  }
  for (int i = 0; !rc && needs && i < needs->n; i++) {
    gc_problem_key(&needs->v[i].p, key);
    rc = gc_buf_printf(k, e, "need %s from %lld\n", key, (long long)needs->v[i].lo);
  }
  return rc;
}

int gc_gen_auto(const char *db_path, const char *target, const char *cache,
                const gc_problems_t *probs, const gc_needs_t *needs, const char *const *meta,
                gc_auto_result_t *r, gc_err_t *e) {
  gc_target_t tg;
  gc_compiler_t cc;
  gc_templates_t tpls = {0};
  gc_db_t *db = NULL;
  gc_problems_t ps = {0};
  gc_buf_t k = {0};
  char hash[GC_HASH_HEX], dir[GC_AUTO_PATH];
  int have_db = db_path && is_file(db_path);
  memset(r, 0, sizeof *r);
  int rc = db_path ? gc_check_output(db_path, 'f', e) : GC_OK; /* a FIFO or a device is no database */
  if (!rc) rc = gc_target_parse(target, &tg, e);
  if (!rc) rc = gc_compiler_for(&tg, NULL, &cc, e);
  if (!rc) rc = gc_tpl_load_all(NULL, &tpls, e);
  if (!rc && have_db) rc = gc_db_open(db_path, 0, &db, e);
  if (!rc) rc = exact_problems(db, tg.name, probs, needs, &ps, e);
  if (!rc) rc = key_text(db, &tg, &cc, &tpls, &ps, needs, &k, &r->ntuned, e);
  for (const char *const *m = meta; !rc && m && m[0]; m += 2) rc = gc_buf_printf(&k, e, "meta %s %s\n", m[0], m[1]);
  gc_db_close(db);
  r->nproblems = ps.n;
  if (!rc) {
    gc_hash_hex(k.data, k.len, hash);
    snprintf(dir, sizeof dir, "%s/bundles", cache);
    snprintf(r->path, sizeof r->path, "%s/%s.gcb", dir, hash);
    rc = gc_mkdirs(dir, e);
  }
  if (!rc && !is_file(r->path)) {
    gc_gen_opts_t o = {.db_path = have_db ? db_path : NULL, .out_path = r->path,
                       .targets = tg.name, .cache = cache, .quiet = 1,
                       .meta = meta};
    r->built = 1;
    rc = gc_gen_bundle(&o, &ps, needs, e);
  }
  gc_buf_free(&k);
  gc_problems_free(&ps);
  gc_tpl_free_all(&tpls);
  return rc;
}
