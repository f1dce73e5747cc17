/* bundle.c — reading and writing bundle files. The schema is created in
 * one go (bundles are written once and never migrated: a bundle of another
 * format version is refused and must be rebuilt with gcore-gen). */
#include "bundle.h"

#include <stdlib.h>
#include <string.h>

#include "sqlite_util.h"

struct gc_bundle {
  sqlite3 *sq;
  char *path;
  int writing;
  int version; /* format version read (1 has no dispatch.tmaps, 1-2 no dispatch.pdl,
                  1-3 no dispatch.prefetch) */
};

static const char *schema =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE code_objects("
    "  id INTEGER PRIMARY KEY, target TEXT NOT NULL, vid TEXT NOT NULL,"
    "  template TEXT NOT NULL, template_hash TEXT NOT NULL, params TEXT NOT NULL,"
    "  dtypes TEXT NOT NULL, compiler TEXT NOT NULL, blob BLOB NOT NULL,"
    "  blob_hash TEXT NOT NULL, regs INTEGER, spills INTEGER,"
    "  shared_bytes INTEGER, scratch_bytes INTEGER, agprs INTEGER, sgprs INTEGER,"
    "  wave INTEGER, occupancy INTEGER, UNIQUE(target, vid));"
    "CREATE TABLE dispatch("
    "  id INTEGER PRIMARY KEY, target TEXT NOT NULL, op TEXT NOT NULL,"
    "  ta TEXT NOT NULL, tb TEXT NOT NULL, tc TEXT NOT NULL,"
    "  n INTEGER NOT NULL, k INTEGER NOT NULL, h INTEGER NOT NULL,"
    "  g INTEGER NOT NULL, d INTEGER NOT NULL, m_lo INTEGER NOT NULL,"
    "  m_hi INTEGER NOT NULL, code_id INTEGER NOT NULL REFERENCES code_objects(id),"
    "  symbol TEXT NOT NULL, grid TEXT NOT NULL, block TEXT NOT NULL,"
    "  consts TEXT NOT NULL, template TEXT NOT NULL, params TEXT NOT NULL,"
    "  vid TEXT NOT NULL, is_default INTEGER NOT NULL, source TEXT NOT NULL,"
    "  shmem TEXT NOT NULL, tmaps TEXT NOT NULL DEFAULT '',"
    "  pdl INTEGER NOT NULL DEFAULT 0, prefetch INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX dispatch_by_shape ON dispatch(target, op, n, k, m_lo);";

int gc_bundle_create(const char *path, gc_bundle_t **out, gc_err_t *e) {
  *out = NULL;
  gc_bundle_t *b = gc_calloc(1, sizeof *b, e);
  if (!b) return GC_ENOMEM;
  b->writing = 1;
  char pragma[64];
  snprintf(pragma, sizeof pragma, "PRAGMA application_id = %d", GC_APPID_BUNDLE);
  if (!(b->path = gc_strdup(path, e)) ||
      gc_sql_open(path, 'n', GC_APPID_BUNDLE, "bundle", &b->sq, e) ||
      gc_sql_exec(b->sq, pragma, e) || gc_sql_exec(b->sq, "BEGIN", e) ||
      gc_sql_exec(b->sq, schema, e)) {
    gc_err_prefix(e, "%s", path);
    gc_bundle_close(b);
    return e->code;
  }
  char v[16];
  snprintf(v, sizeof v, "%d", GC_BUNDLE_FORMAT_VERSION);
  if (gc_bundle_set_meta(b, "format", "gcore-bundle", e) ||
      gc_bundle_set_meta(b, "format_version", v, e)) {
    gc_bundle_close(b);
    return e->code;
  }
  *out = b;
  return GC_OK;
}

int gc_bundle_set_meta(gc_bundle_t *b, const char *key, const char *value,
                       gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(b->sq, "INSERT OR REPLACE INTO meta VALUES(?1, ?2)", &st, e))
    return e->code;
  gc_sql_bind_text(st, 1, key);
  gc_sql_bind_text(st, 2, value ? value : "");
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(b->sq, e, b->path);
}

static void bind_opt(sqlite3_stmt *st, int i, int64_t v) {
  if (v < 0)
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_int64(st, i, v);
}

int gc_bundle_add_code(gc_bundle_t *b, const gc_code_rec_t *c, int64_t *code_id,
                       gc_err_t *e) {
  sqlite3_stmt *st;
  char hash[GC_HASH_HEX];
  gc_hash_hex(c->blob, c->blob_size, hash);
  if (gc_sql_prepare(b->sq,
                     "INSERT OR IGNORE INTO code_objects(target,vid,template,"
                     "template_hash,params,dtypes,compiler,blob,blob_hash,regs,"
                     "spills,shared_bytes,scratch_bytes,agprs,sgprs,wave,occupancy) "
                     "VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)",
                     &st, e))
    return e->code;
  const char *txt[7] = {c->target, c->vid, c->template_name, c->template_hash,
                        c->params, c->dtypes, c->compiler};
  for (int i = 0; i < 7; i++) gc_sql_bind_text(st, i + 1, txt[i]);
  sqlite3_bind_blob64(st, 8, c->blob, c->blob_size, SQLITE_STATIC);
  gc_sql_bind_text(st, 9, hash);
  bind_opt(st, 10, c->regs);
  bind_opt(st, 11, c->spills);
  bind_opt(st, 12, c->shared_bytes);
  bind_opt(st, 13, c->scratch_bytes);
  bind_opt(st, 14, c->agprs);
  bind_opt(st, 15, c->sgprs);
  bind_opt(st, 16, c->wave);
  bind_opt(st, 17, c->occupancy);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return gc_sql_err(b->sq, e, b->path);
  if (gc_sql_prepare(b->sq, "SELECT id FROM code_objects WHERE target=?1 AND vid=?2",
                     &st, e))
    return e->code;
  gc_sql_bind_text(st, 1, c->target);
  gc_sql_bind_text(st, 2, c->vid);
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) *code_id = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return rc == SQLITE_ROW ? GC_OK : gc_sql_err(b->sq, e, b->path);
}

int gc_bundle_add_dispatch(gc_bundle_t *b, const gc_dispatch_t *d, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(b->sq,
                     "INSERT INTO dispatch(target,op,ta,tb,tc,n,k,m_lo,m_hi,code_id,"
                     "symbol,grid,block,consts,template,params,vid,is_default,source,"
                     "h,g,d,shmem,tmaps,pdl,prefetch) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,"
                     "?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26)",
                     &st, e))
    return e->code;
  gc_sql_bind_text(st, 1, d->target);
  gc_sql_bind_text(st, 2, d->shape.op);
  gc_sql_bind_text(st, 3, gc_dtype_name(d->shape.ta));
  gc_sql_bind_text(st, 4, gc_dtype_name(d->shape.tb));
  gc_sql_bind_text(st, 5, gc_dtype_name(d->shape.tc));
  sqlite3_bind_int64(st, 6, d->shape.n);
  sqlite3_bind_int64(st, 7, d->shape.k);
  sqlite3_bind_int64(st, 8, d->m_lo);
  sqlite3_bind_int64(st, 9, d->m_hi);
  sqlite3_bind_int64(st, 10, d->code_id);
  const char *txt[6] = {d->symbol, d->grid, d->block, d->consts, d->template_name,
                        d->params};
  for (int i = 0; i < 6; i++) gc_sql_bind_text(st, 11 + i, txt[i]);
  gc_sql_bind_text(st, 17, d->vid);
  sqlite3_bind_int(st, 18, d->is_default);
  gc_sql_bind_text(st, 19, d->source);
  sqlite3_bind_int64(st, 20, d->shape.h);
  sqlite3_bind_int64(st, 21, d->shape.g);
  sqlite3_bind_int64(st, 22, d->shape.d);
  gc_sql_bind_text(st, 23, d->shmem[0] ? d->shmem : "0");
  gc_sql_bind_text(st, 24, d->tmaps);
  sqlite3_bind_int(st, 25, d->pdl != 0);
  sqlite3_bind_int(st, 26, d->prefetch != 0);
  int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc == SQLITE_DONE ? GC_OK : gc_sql_err(b->sq, e, b->path);
}

int gc_bundle_finish(gc_bundle_t *b, gc_err_t *e) {
  if (gc_sql_exec(b->sq, "COMMIT", e)) return gc_err_prefix(e, "%s", b->path);
  b->writing = 0;
  return GC_OK;
}

void gc_bundle_close(gc_bundle_t *b) {
  if (!b) return;
  if (b->sq) sqlite3_close(b->sq);
  free(b->path);
  free(b);
}

const char *gc_bundle_path(const gc_bundle_t *b) { return b->path; }

char *gc_bundle_meta(gc_bundle_t *b, const char *key, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(b->sq, "SELECT value FROM meta WHERE key=?1", &st, e)) return NULL;
  gc_sql_bind_text(st, 1, key);
  char *v = NULL;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
    v = gc_strdup((const char *)sqlite3_column_text(st, 0), e);
  sqlite3_finalize(st);
  return v;
}

int gc_bundle_open(const char *path, gc_bundle_t **out, gc_err_t *e) {
  *out = NULL;
  gc_bundle_t *b = gc_calloc(1, sizeof *b, e);
  if (!b) return GC_ENOMEM;
  if (!(b->path = gc_strdup(path, e)) ||
      gc_sql_open(path, 'r', GC_APPID_BUNDLE, "bundle", &b->sq, e)) {
    gc_bundle_close(b);
    return e->code;
  }
  char *fmt = gc_bundle_meta(b, "format", NULL);
  char *ver = gc_bundle_meta(b, "format_version", NULL);
  int ok = fmt && ver && !strcmp(fmt, "gcore-bundle");
  int v = ver ? atoi(ver) : 0;
  free(fmt);
  free(ver);
  if (!ok) {
    gc_bundle_close(b);
    return gc_err_set(e, GC_ECORRUPT, "%s: not a gcore bundle (no format record)", path);
  }
  if (v < 1 || v > GC_BUNDLE_FORMAT_VERSION) {
    gc_bundle_close(b);
    return gc_err_set(e, GC_EUNSUPPORTED,
                      "%s: bundle format %d, this gcore reads %d; rebuild it with "
                      "gcore-gen",
                      path, v, GC_BUNDLE_FORMAT_VERSION);
  }
  b->version = v;
  *out = b;
  return GC_OK;
}

char *gc_bundle_targets(gc_bundle_t *b, gc_err_t *e) {
  sqlite3_stmt *st;
  if (gc_sql_prepare(b->sq, "SELECT DISTINCT target FROM code_objects ORDER BY target",
                     &st, e))
    return NULL;
  gc_buf_t buf = {0};
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(st, 0);
    if (gc_buf_printf(&buf, e, "%s%s", buf.len ? "," : "", t ? t : "")) break;
  }
  sqlite3_finalize(st);
  if (!buf.data) return gc_strdup("", e);
  return buf.data;
}

#define DISPATCH_COLS                                                          \
  "id,target,op,ta,tb,tc,n,k,m_lo,m_hi,code_id,symbol,grid,block,consts,"     \
  "template,params,vid,is_default,source,h,g,d,shmem"

/* The columns to select: format 1 has no tmaps (read as ''), formats 1
 * and 2 no pdl (read as 0: their kernels do not wait for a predecessor),
 * formats 1 to 3 no prefetch (read as 0: their kernels take no window). */
static const char *dispatch_cols(const gc_bundle_t *b) {
  return b->version == 1   ? DISPATCH_COLS ",'',0,0"
         : b->version == 2 ? DISPATCH_COLS ",tmaps,0,0"
         : b->version == 3 ? DISPATCH_COLS ",tmaps,pdl,0"
                           : DISPATCH_COLS ",tmaps,pdl,prefetch";
}

/* Fill d from a row of DISPATCH_COLS, validating what the runtime relies on. */
static int read_dispatch(gc_bundle_t *b, sqlite3_stmt *st, gc_dispatch_t *d,
                         gc_err_t *e) {
  memset(d, 0, sizeof *d);
  d->id = sqlite3_column_int64(st, 0);
  char dt[3][8];
  struct { int col; char *dst; size_t n; } text[] = { /* the text columns and their fields */
      {1, d->target, sizeof d->target}, {2, d->shape.op, sizeof d->shape.op}, {3, dt[0], sizeof dt[0]},
      {4, dt[1], sizeof dt[1]}, {5, dt[2], sizeof dt[2]}, {11, d->symbol, sizeof d->symbol},
      {12, d->grid, sizeof d->grid}, {13, d->block, sizeof d->block}, {14, d->consts, sizeof d->consts},
      {15, d->template_name, sizeof d->template_name}, {16, d->params, sizeof d->params},
      {17, d->vid, sizeof d->vid}, {19, d->source, sizeof d->source}, {23, d->shmem, sizeof d->shmem},
      {24, d->tmaps, sizeof d->tmaps}};
  for (size_t i = 0; i < GC_ARRAY_LEN(text); i++)
    if (gc_sql_col_text(st, text[i].col, text[i].dst, text[i].n))
      return gc_err_set(e, GC_ECORRUPT, "%s: dispatch entry %lld: its %s is longer than %zu bytes",
                        b->path, (long long)d->id, sqlite3_column_name(st, text[i].col), text[i].n - 1);
  char dts[32];
  snprintf(dts, sizeof dts, "%s:%s:%s", dt[0], dt[1], dt[2]);
  if (gc_dtypes_parse(dts, &d->shape.ta, &d->shape.tb, &d->shape.tc, e))
    return gc_err_prefix(e, "%s: dispatch entry %lld", b->path, (long long)d->id);
  d->shape.n = sqlite3_column_int64(st, 6);
  d->shape.k = sqlite3_column_int64(st, 7);
  d->m_lo = sqlite3_column_int64(st, 8);
  d->m_hi = sqlite3_column_int64(st, 9);
  d->code_id = sqlite3_column_int64(st, 10);
  d->is_default = sqlite3_column_int(st, 18);
  d->shape.h = sqlite3_column_int64(st, 20);
  d->shape.g = sqlite3_column_int64(st, 21);
  d->shape.d = sqlite3_column_int64(st, 22);
  d->pdl = sqlite3_column_int(st, 25) != 0;
  d->prefetch = sqlite3_column_int(st, 26) != 0;
  if (d->m_lo < 0 || d->m_hi < d->m_lo || !d->symbol[0] || !gc_op_find(d->shape.op))
    return gc_err_set(e, GC_ECORRUPT, "%s: dispatch entry %lld is malformed",
                      b->path, (long long)d->id);
  return GC_OK;
}

int gc_bundle_lookup(gc_bundle_t *b, const char *target, const gc_problem_t *p,
                     gc_dispatch_t *d, gc_err_t *e) {
  sqlite3_stmt *st;
  char sql[512];
  snprintf(sql, sizeof sql,
           "SELECT %s FROM dispatch WHERE target=?1 AND "
           "op=?2 AND ta=?3 AND tb=?4 AND tc=?5 AND n=?6 AND k=?7 AND "
           "h=?9 AND g=?10 AND d=?11 AND m_lo<=?8 AND m_hi>=?8 "
           "ORDER BY m_hi - m_lo LIMIT 1", dispatch_cols(b));
  if (gc_sql_prepare(b->sq, sql, &st, e))
    return gc_err_prefix(e, "%s", b->path);
  gc_sql_bind_text(st, 1, target);
  gc_sql_bind_text(st, 2, p->op);
  gc_sql_bind_text(st, 3, gc_dtype_name(p->ta));
  gc_sql_bind_text(st, 4, gc_dtype_name(p->tb));
  gc_sql_bind_text(st, 5, gc_dtype_name(p->tc));
  sqlite3_bind_int64(st, 6, p->n);
  sqlite3_bind_int64(st, 7, p->k);
  sqlite3_bind_int64(st, 8, p->m);
  sqlite3_bind_int64(st, 9, p->h);
  sqlite3_bind_int64(st, 10, p->g);
  sqlite3_bind_int64(st, 11, p->d);
  int rc = sqlite3_step(st);
  int r;
  if (rc == SQLITE_ROW) {
    r = read_dispatch(b, st, d, e);
  } else if (rc == SQLITE_DONE) {
    char key[GC_PROBLEM_KEY];
    gc_problem_key(p, key);
    r = gc_err_set(e, GC_ENOTFOUND,
                   "%s has no kernel for '%s' on %s; rebuild it with gcore-gen "
                   "including this problem",
                   b->path, key, target);
  } else {
    r = gc_sql_err(b->sq, e, b->path);
  }
  sqlite3_finalize(st);
  return r;
}

int gc_bundle_code(gc_bundle_t *b, int64_t code_id, void **blob, size_t *n,
                   gc_err_t *e) {
  sqlite3_stmt *st;
  *blob = NULL;
  if (gc_sql_prepare(b->sq, "SELECT blob, blob_hash FROM code_objects WHERE id=?1",
                     &st, e))
    return e->code;
  sqlite3_bind_int64(st, 1, code_id);
  int rc = sqlite3_step(st), r = GC_OK;
  if (rc != SQLITE_ROW) {
    r = rc == SQLITE_DONE
            ? gc_err_set(e, GC_ECORRUPT, "%s: dispatch names code object %lld, "
                         "which is missing", b->path, (long long)code_id)
            : gc_sql_err(b->sq, e, b->path);
  } else {
    const void *p = sqlite3_column_blob(st, 0);
    size_t size = (size_t)sqlite3_column_bytes(st, 0);
    const char *want = (const char *)sqlite3_column_text(st, 1);
    char got[GC_HASH_HEX];
    gc_hash_hex(p, size, got);
    if (!p || !want || strcmp(got, want))
      r = gc_err_set(e, GC_ECORRUPT, "%s: code object %lld fails its hash check",
                     b->path, (long long)code_id);
    else if ((*blob = gc_malloc(size, e))) {
      memcpy(*blob, p, size);
      *n = size;
    } else {
      r = GC_ENOMEM;
    }
  }
  sqlite3_finalize(st);
  return r;
}

int gc_bundle_entries(gc_bundle_t *b, gc_dispatch_t **out, int *n, gc_err_t *e) {
  sqlite3_stmt *st;
  *out = NULL;
  *n = 0;
  char sql[512];
  snprintf(sql, sizeof sql, "SELECT %s FROM dispatch ORDER BY target, op, ta, tb, tc, n, k, m_lo",
           dispatch_cols(b));
  if (gc_sql_prepare(b->sq, sql, &st, e))
    return e->code;
  int cap = 0, r = GC_OK;
  while (!r && sqlite3_step(st) == SQLITE_ROW) {
    if (*n == cap) {
      cap = cap ? cap * 2 : 16;
      gc_dispatch_t *v = gc_realloc(*out, (size_t)cap * sizeof *v, e);
      if (!v) {
        r = GC_ENOMEM;
        break;
      }
      *out = v;
    }
    r = read_dispatch(b, st, &(*out)[*n], e);
    if (!r) (*n)++;
  }
  sqlite3_finalize(st);
  if (r) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return r;
}
