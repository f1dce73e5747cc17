/* gguf.c — GGUF metadata reader. The file is untrusted: open walks every
 * key/value once with a cursor that refuses to step past the mapping, so
 * that later getters can read without further checks. */
#include "gguf.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_KV (1u << 20)
#define GGUF_MAX_DEPTH 3 /* arrays of arrays of ... */

struct gc_gguf {
  const uint8_t *map;
  size_t size;
  gc_gguf_kv_t *kv; /* [n_kv] */
  uint64_t n_kv;
  char path[512];
};

/* Size in bytes of one scalar of type t, 0 for string/array/unknown. */
static size_t type_size(uint32_t t) {
  static const size_t sz[GC_GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return t < GC_GGUF_NTYPES ? sz[t] : 0;
}

static const char *type_name(uint32_t t) {
  static const char *const names[GC_GGUF_NTYPES] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                    "bool", "string", "array", "u64", "i64", "f64"};
  return t < GC_GGUF_NTYPES ? names[t] : "unknown";
}

/* A read cursor over [p, end). */
typedef struct cur {
  const uint8_t *p, *end;
} cur_t;

static int take(cur_t *c, size_t n, const uint8_t **out) {
  if ((size_t)(c->end - c->p) < n) return -1;
  *out = c->p;
  c->p += n;
  return 0;
}

static uint64_t rd_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static uint32_t rd_u32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

static int take_u64(cur_t *c, uint64_t *v) {
  const uint8_t *p;
  if (take(c, 8, &p)) return -1;
  *v = rd_u64(p);
  return 0;
}

static int take_u32(cur_t *c, uint32_t *v) {
  const uint8_t *p;
  if (take(c, 4, &p)) return -1;
  *v = rd_u32(p);
  return 0;
}

static int take_str(cur_t *c, gc_gguf_str_t *s) {
  const uint8_t *p;
  if (take_u64(c, &s->n) || s->n > (uint64_t)(c->end - c->p) || take(c, (size_t)s->n, &p)) return -1;
  s->p = (const char *)p;
  return 0;
}

/* Step over one value of type t (arrays recursively, up to a depth).
 * Returns -1 when it runs past the end, -2 on an unknown type. */
static int skip_value(cur_t *c, uint32_t t, int depth) {
  const uint8_t *p;
  gc_gguf_str_t s;
  if (t == GC_GGUF_STRING) return take_str(c, &s);
  if (t != GC_GGUF_ARRAY) return type_size(t) ? take(c, type_size(t), &p) : -2;
  uint32_t et;
  uint64_t n;
  if (depth >= GGUF_MAX_DEPTH) return -2;
  if (take_u32(c, &et) || take_u64(c, &n)) return -1;
  if (type_size(et)) {
    if (n > (uint64_t)(c->end - c->p) / type_size(et)) return -1;
    return take(c, (size_t)n * type_size(et), &p);
  }
  if (et != GC_GGUF_STRING && et != GC_GGUF_ARRAY) return -2;
  if (n > (uint64_t)(c->end - c->p) / 8) return -1; /* each element has at least 8 bytes */
  for (uint64_t i = 0; i < n; i++) {
    int rc = skip_value(c, et, depth + 1);
    if (rc) return rc;
  }
  return 0;
}

/* Parse the key/value section into g->kv. */
static int read_kvs(gc_gguf_t *g, cur_t *c, gc_err_t *e) {
  for (uint64_t i = 0; i < g->n_kv; i++) {
    gc_gguf_kv_t *kv = &g->kv[i];
    uint32_t t;
    char q[GC_QUOTE_BUF]; /* keys come from the file */
    if (take_str(c, &kv->key) || take_u32(c, &t))
      return gc_err_set(e, GC_ECORRUPT, "%s: truncated in key %llu of %llu", g->path,
                        (unsigned long long)i, (unsigned long long)g->n_kv);
    kv->type = kv->elem = (gc_gguf_type_t)t;
    kv->count = 1;
    cur_t v = *c;
    if (t == GC_GGUF_ARRAY) {
      uint32_t et;
      if (take_u32(&v, &et) || take_u64(&v, &kv->count))
        return gc_err_set(e, GC_ECORRUPT, "%s: truncated in the value of %s", g->path,
                          gc_quote(kv->key.p, kv->key.n, q, sizeof q));
      kv->elem = (gc_gguf_type_t)et;
    }
    kv->data = v.p;
    int rc = skip_value(c, t, 0);
    if (rc == -2)
      return gc_err_set(e, GC_ECORRUPT, "%s: %s has an unknown value type %u", g->path,
                        gc_quote(kv->key.p, kv->key.n, q, sizeof q), t);
    if (rc)
      return gc_err_set(e, GC_ECORRUPT, "%s: truncated in the value of %s", g->path,
                        gc_quote(kv->key.p, kv->key.n, q, sizeof q));
  }
  return GC_OK;
}

static int parse(gc_gguf_t *g, gc_err_t *e) {
  cur_t c = {g->map, g->map + g->size};
  uint32_t magic, version;
  uint64_t n_tensors;
  if (take_u32(&c, &magic) || magic != GGUF_MAGIC)
    return gc_err_set(e, GC_ECORRUPT, "%s: not a GGUF file (bad magic)", g->path);
  if (take_u32(&c, &version) || take_u64(&c, &n_tensors) || take_u64(&c, &g->n_kv))
    return gc_err_set(e, GC_ECORRUPT, "%s: truncated GGUF header", g->path);
  if (version < 2 || version > 3)
    return gc_err_set(e, version == 1 ? GC_EUNSUPPORTED : GC_ECORRUPT,
                      "%s: GGUF version %u (gcore reads versions 2 and 3)", g->path, version);
  /* a key/value takes at least 12 bytes: refuse counts the file cannot hold */
  if (g->n_kv > GGUF_MAX_KV || g->n_kv > (uint64_t)(c.end - c.p) / 12)
    return gc_err_set(e, GC_ECORRUPT, "%s: %llu metadata keys do not fit in the file", g->path,
                      (unsigned long long)g->n_kv);
  if (!(g->kv = gc_calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv, e))) return GC_ENOMEM;
  return read_kvs(g, &c, e);
}

int gc_gguf_open(const char *path, gc_gguf_t **out, gc_err_t *e) {
  *out = NULL;
  gc_gguf_t *g = gc_calloc(1, sizeof *g, e);
  if (!g) return GC_ENOMEM;
  snprintf(g->path, sizeof g->path, "%s", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  int rc = GC_OK;
  if (fd < 0 || fstat(fd, &st) != 0)
    rc = gc_err_set(e, GC_EIO, "%s: cannot open", path);
  else if (!S_ISREG(st.st_mode) || st.st_size < 24)
    rc = gc_err_set(e, GC_ECORRUPT, "%s: not a GGUF file (%s)", path,
                    S_ISREG(st.st_mode) ? "too short" : "not a regular file");
  if (!rc) {
    g->size = (size_t)st.st_size;
    void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
      rc = gc_err_set(e, GC_EIO, "%s: cannot map", path);
    else
      g->map = m;
  }
  if (fd >= 0) close(fd);
  if (!rc) rc = parse(g, e);
  if (rc) {
    gc_gguf_close(g);
    return rc;
  }
  *out = g;
  return GC_OK;
}

void gc_gguf_close(gc_gguf_t *g) {
  if (!g) return;
  if (g->map) munmap((void *)g->map, g->size);
  free(g->kv);
  free(g);
}

const gc_gguf_kv_t *gc_gguf_find(const gc_gguf_t *g, const char *key) {
  size_t n = strlen(key);
  for (uint64_t i = 0; i < g->n_kv; i++)
    if (g->kv[i].key.n == n && !memcmp(g->kv[i].key.p, key, n)) return &g->kv[i];
  return NULL;
}

/* The pair named key with the given type (and element type for arrays). */
static int find_typed(const gc_gguf_t *g, const char *key, uint32_t type, uint32_t elem,
                      const gc_gguf_kv_t **kv, gc_err_t *e) {
  *kv = gc_gguf_find(g, key);
  if (!*kv) return gc_err_set(e, GC_ENOTFOUND, "%s: no '%s'", g->path, key);
  if ((*kv)->type != type || (type == GC_GGUF_ARRAY && elem != GC_GGUF_NTYPES && (*kv)->elem != elem))
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' is %s%s%s, expected %s%s%s", g->path, key,
                      type_name((*kv)->type), (*kv)->type == GC_GGUF_ARRAY ? " of " : "",
                      (*kv)->type == GC_GGUF_ARRAY ? type_name((*kv)->elem) : "", type_name(type),
                      type == GC_GGUF_ARRAY ? " of " : "",
                      type == GC_GGUF_ARRAY ? (elem == GC_GGUF_NTYPES ? "numbers" : type_name(elem)) : "");
  return GC_OK;
}

int gc_gguf_get_str(const gc_gguf_t *g, const char *key, gc_gguf_str_t *out, gc_err_t *e) {
  const gc_gguf_kv_t *kv;
  if (find_typed(g, key, GC_GGUF_STRING, 0, &kv, e)) return e->code;
  out->n = rd_u64(kv->data);
  out->p = (const char *)kv->data + 8;
  return GC_OK;
}

/* An integer scalar of type t at p as int64; -1 if it does not fit. */
static int int_at(const uint8_t *p, uint32_t t, int64_t *v) {
  switch (t) {
    case GC_GGUF_U8: case GC_GGUF_BOOL: *v = p[0]; return 0;
    case GC_GGUF_I8: *v = (int8_t)p[0]; return 0;
    case GC_GGUF_U16: { uint16_t x; memcpy(&x, p, 2); *v = x; return 0; }
    case GC_GGUF_I16: { int16_t x; memcpy(&x, p, 2); *v = x; return 0; }
    case GC_GGUF_U32: *v = rd_u32(p); return 0;
    case GC_GGUF_I32: *v = (int32_t)rd_u32(p); return 0;
    case GC_GGUF_I64: *v = (int64_t)rd_u64(p); return 0;
    case GC_GGUF_U64: { uint64_t x = rd_u64(p); if (x > INT64_MAX) return -1; *v = (int64_t)x; return 0; }
    default: return -1;
  }
}

int gc_gguf_get_int(const gc_gguf_t *g, const char *key, int64_t *out, gc_err_t *e) {
  const gc_gguf_kv_t *kv = gc_gguf_find(g, key);
  if (!kv) return gc_err_set(e, GC_ENOTFOUND, "%s: no '%s'", g->path, key);
  if (kv->type == GC_GGUF_ARRAY || int_at(kv->data, kv->type, out))
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' is %s, expected an integer", g->path, key,
                      type_name(kv->type));
  return GC_OK;
}

int gc_gguf_get_strs(const gc_gguf_t *g, const char *key, gc_gguf_str_t **out, uint64_t *count,
                     gc_err_t *e) {
  const gc_gguf_kv_t *kv;
  if (find_typed(g, key, GC_GGUF_ARRAY, GC_GGUF_STRING, &kv, e)) return e->code;
  gc_gguf_str_t *v = gc_malloc((kv->count ? kv->count : 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  const uint8_t *p = kv->data; /* extents checked at open */
  for (uint64_t i = 0; i < kv->count; i++) {
    v[i].n = rd_u64(p);
    v[i].p = (const char *)p + 8;
    p += 8 + v[i].n;
  }
  *out = v;
  *count = kv->count;
  return GC_OK;
}

int gc_gguf_get_f32s(const gc_gguf_t *g, const char *key, float **out, uint64_t *count, gc_err_t *e) {
  const gc_gguf_kv_t *kv;
  if (find_typed(g, key, GC_GGUF_ARRAY, GC_GGUF_F32, &kv, e)) return e->code;
  float *v = gc_malloc((kv->count ? kv->count : 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  memcpy(v, kv->data, (size_t)kv->count * sizeof *v);
  *out = v;
  *count = kv->count;
  return GC_OK;
}

int gc_gguf_get_i32s(const gc_gguf_t *g, const char *key, int32_t **out, uint64_t *count, gc_err_t *e) {
  const gc_gguf_kv_t *kv;
  if (find_typed(g, key, GC_GGUF_ARRAY, GC_GGUF_NTYPES, &kv, e)) return e->code;
  size_t es = type_size(kv->elem);
  int64_t x;
  if (!es || kv->elem == GC_GGUF_F32 || kv->elem == GC_GGUF_F64)
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' is an array of %s, expected integers", g->path, key,
                      type_name(kv->elem));
  int32_t *v = gc_malloc((kv->count ? kv->count : 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  for (uint64_t i = 0; i < kv->count; i++) {
    if (int_at(kv->data + i * es, kv->elem, &x) || x < INT32_MIN || x > INT32_MAX) {
      free(v);
      return gc_err_set(e, GC_ECORRUPT, "%s: '%s'[%llu] is out of range", g->path, key,
                        (unsigned long long)i);
    }
    v[i] = (int32_t)x;
  }
  *out = v;
  *count = kv->count;
  return GC_OK;
}
