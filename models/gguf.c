/* gguf.c — GGUF reader. The file is untrusted: open walks every key/value
 * and every tensor info once with a cursor that refuses to step past the
 * mapping, then checks each tensor's type, size and place in the data
 * section, so that later getters can read without further checks. */
#include "gguf.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/quant.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_MAX_KV (1u << 20)
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_MAX_NAME 255
#define GGUF_MAX_ALIGN (1u << 16)
#define GGUF_DEFAULT_ALIGN 32
#define GGUF_MAX_DEPTH 3 /* arrays of arrays of ... */

struct gc_gguf {
  const uint8_t *map;
  size_t size;
  uint32_t version;
  gc_gguf_kv_t *kv; /* [n_kv] */
  uint64_t n_kv;
  gc_gguf_tensor_t *t; /* [n_t] in file order */
  uint64_t n_t;
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

/* ---- tensors ------------------------------------------------------------- */

/* A tensor's name for a message (it comes from the file). */
#define TNAME(t) gc_quote((t)->name.p, (size_t)(t)->name.n, (char[GC_QUOTE_BUF]){0}, GC_QUOTE_BUF)

/* general.alignment: a power of two (default 32). */
static int read_alignment(const gc_gguf_t *g, uint64_t *align, gc_err_t *e) {
  int64_t a;
  *align = GGUF_DEFAULT_ALIGN;
  if (!gc_gguf_find(g, "general.alignment")) return GC_OK;
  if (gc_gguf_get_int(g, "general.alignment", &a, e)) return e->code;
  if (a <= 0 || a > GGUF_MAX_ALIGN || (a & (a - 1)))
    return gc_err_set(e, GC_ECORRUPT, "%s: general.alignment %lld is not a power of two up to %u", g->path,
                      (long long)a, GGUF_MAX_ALIGN);
  *align = (uint64_t)a;
  return GC_OK;
}

/* One tensor info at the cursor: name, dims, type, offset; sizes checked. */
static int read_tensor_info(gc_gguf_t *g, cur_t *c, uint64_t i, uint64_t align, gc_gguf_tensor_t *t,
                            gc_err_t *e) {
  uint32_t nd;
  int block, bytes;
  if (take_str(c, &t->name) || take_u32(c, &nd))
    return gc_err_set(e, GC_ECORRUPT, "%s: truncated in tensor info %llu of %llu", g->path,
                      (unsigned long long)i, (unsigned long long)g->n_t);
  if (t->name.n == 0 || t->name.n > GGUF_MAX_NAME || memchr(t->name.p, 0, (size_t)t->name.n))
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %llu has a name of %llu bytes (1 to %d, no NUL)", g->path,
                      (unsigned long long)i, (unsigned long long)t->name.n, GGUF_MAX_NAME);
  if (nd < 1 || nd > GC_GGUF_MAX_DIMS)
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s has %u dimensions (1 to %d)", g->path, TNAME(t), nd,
                      GC_GGUF_MAX_DIMS);
  t->ndim = (int)nd;
  uint64_t n = 1;
  for (int d = 0; d < GC_GGUF_MAX_DIMS; d++) {
    uint64_t v = 1;
    if (d < t->ndim && take_u64(c, &v))
      return gc_err_set(e, GC_ECORRUPT, "%s: truncated in the info of tensor %s", g->path, TNAME(t));
    if (v > (uint64_t)INT64_MAX || (v && n > (uint64_t)INT64_MAX / v))
      return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s has dimensions whose product overflows", g->path,
                        TNAME(t));
    t->ne[d] = (int64_t)v;
    n *= v;
  }
  t->nelem = (int64_t)n;
  if (take_u32(c, &t->type) || take_u64(c, &t->offset))
    return gc_err_set(e, GC_ECORRUPT, "%s: truncated in the info of tensor %s", g->path, TNAME(t));
  if (gc_quant_ggml_info(t->type, &t->type_name, &block, &bytes))
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: tensor %s has ggml type %u, unknown to gcore", g->path,
                      TNAME(t), t->type);
  if (t->ne[0] % block)
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: rows of %lld elements are not whole %s blocks of %d",
                      g->path, TNAME(t), (long long)t->ne[0], t->type_name, block);
  if (n / (uint64_t)block > UINT64_MAX / (uint64_t)bytes)
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s is too large", g->path, TNAME(t));
  t->nbytes = n / (uint64_t)block * (uint64_t)bytes;
  if (t->offset % align)
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s is at offset %llu, not a multiple of the alignment %llu",
                      g->path, TNAME(t), (unsigned long long)t->offset, (unsigned long long)align);
  return GC_OK;
}

/* Two of the file's strings in byte order, a prefix first. */
static int str_cmp(gc_gguf_str_t x, gc_gguf_str_t y) {
  int r = memcmp(x.p, y.p, x.n < y.n ? (size_t)x.n : (size_t)y.n);
  return r ? r : (x.n > y.n) - (x.n < y.n);
}

static int cmp_name(const void *a, const void *b) {
  return str_cmp((*(const gc_gguf_tensor_t *const *)a)->name, (*(const gc_gguf_tensor_t *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
  const gc_gguf_tensor_t *x = *(const gc_gguf_tensor_t *const *)a, *y = *(const gc_gguf_tensor_t *const *)b;
  return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Names unique; tensors of non-zero size disjoint. */
static int check_layout(gc_gguf_t *g, gc_err_t *e) {
  gc_gguf_tensor_t **v = gc_malloc((g->n_t ? g->n_t : 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  int rc = GC_OK;
  for (uint64_t i = 0; i < g->n_t; i++) v[i] = &g->t[i];
  qsort(v, (size_t)g->n_t, sizeof *v, cmp_name);
  for (uint64_t i = 1; !rc && i < g->n_t; i++)
    if (!cmp_name(&v[i - 1], &v[i]))
      rc = gc_err_set(e, GC_ECORRUPT, "%s: tensor %s appears twice", g->path, TNAME(v[i]));
  qsort(v, (size_t)g->n_t, sizeof *v, cmp_offset);
  const gc_gguf_tensor_t *prev = NULL;
  for (uint64_t i = 0; !rc && i < g->n_t; i++) {
    if (!v[i]->nbytes) continue;
    if (prev && prev->offset + prev->nbytes > v[i]->offset)
      rc = gc_err_set(e, GC_ECORRUPT, "%s: tensors %s and %s overlap in the data section", g->path,
                      TNAME(prev), TNAME(v[i]));
    prev = v[i];
  }
  free(v);
  return rc;
}

/* The tensor infos after the metadata, then the data section. */
static int read_tensors(gc_gguf_t *g, cur_t *c, uint64_t n, gc_err_t *e) {
  uint64_t align;
  if (read_alignment(g, &align, e)) return e->code;
  /* a tensor info takes at least 32 bytes: refuse counts the file cannot hold */
  if (n > GGUF_MAX_TENSORS || n > (uint64_t)(c->end - c->p) / 32)
    return gc_err_set(e, GC_ECORRUPT, "%s: %llu tensors do not fit in the file", g->path, (unsigned long long)n);
  g->n_t = n;
  if (!(g->t = gc_calloc(n ? n : 1, sizeof *g->t, e))) return GC_ENOMEM;
  for (uint64_t i = 0; i < n; i++)
    if (read_tensor_info(g, c, i, align, &g->t[i], e)) return e->code;
  uint64_t start = (uint64_t)(c->p - g->map);
  start += (align - start % align) % align;
  uint64_t data = start <= g->size ? g->size - start : 0;
  for (uint64_t i = 0; i < n; i++) {
    gc_gguf_tensor_t *t = &g->t[i];
    if (t->offset > data || t->nbytes > data - t->offset)
      return gc_err_set(e, GC_ECORRUPT,
                        "%s: tensor %s (%s, %llu bytes at offset %llu) ends past the end of the file "
                        "(data section of %llu bytes)", g->path, TNAME(t), t->type_name,
                        (unsigned long long)t->nbytes, (unsigned long long)t->offset, (unsigned long long)data);
    t->data = g->map + start + t->offset;
  }
  return check_layout(g, e);
}

static int cmp_key(const void *a, const void *b) {
  return str_cmp((*(const gc_gguf_kv_t *const *)a)->key, (*(const gc_gguf_kv_t *const *)b)->key);
}

/* Keys unique: a file that says one thing twice is refused, as llama.cpp
 * refuses it ("duplicate key"), rather than read by its first word. */
static int check_keys(gc_gguf_t *g, gc_err_t *e) {
  gc_gguf_kv_t **v = gc_malloc((g->n_kv ? g->n_kv : 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  int rc = GC_OK;
  for (uint64_t i = 0; i < g->n_kv; i++) v[i] = &g->kv[i];
  qsort(v, (size_t)g->n_kv, sizeof *v, cmp_key);
  char q[GC_QUOTE_BUF];
  for (uint64_t i = 1; !rc && i < g->n_kv; i++)
    if (!cmp_key(&v[i - 1], &v[i]))
      rc = gc_err_set(e, GC_ECORRUPT, "%s: metadata key %s appears twice", g->path,
                      gc_quote(v[i]->key.p, v[i]->key.n, q, sizeof q));
  free(v);
  return rc;
}

static int parse(gc_gguf_t *g, gc_err_t *e) {
  cur_t c = {g->map, g->map + g->size};
  uint32_t magic, version;
  uint64_t n_tensors;
  if (take_u32(&c, &magic) || magic != GGUF_MAGIC)
    return gc_err_set(e, GC_ECORRUPT, "%s: not a GGUF file (bad magic)", g->path);
  if (take_u32(&c, &version) || take_u64(&c, &n_tensors) || take_u64(&c, &g->n_kv))
    return gc_err_set(e, GC_ECORRUPT, "%s: truncated GGUF header", g->path);
  if (version == 0x02000000u || version == 0x03000000u) /* 2 or 3 written big-endian */
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: a big-endian GGUF file (gcore reads little-endian ones)",
                      g->path);
  if (version < 2 || version > 3)
    return gc_err_set(e, version == 1 ? GC_EUNSUPPORTED : GC_ECORRUPT,
                      "%s: GGUF version %u (gcore reads versions 2 and 3)", g->path, version);
  g->version = version;
  /* a key/value takes at least 12 bytes: refuse counts the file cannot hold */
  if (g->n_kv > GGUF_MAX_KV || g->n_kv > (uint64_t)(c.end - c.p) / 12)
    return gc_err_set(e, GC_ECORRUPT, "%s: %llu metadata keys do not fit in the file", g->path,
                      (unsigned long long)g->n_kv);
  if (!(g->kv = gc_calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv, e))) return GC_ENOMEM;
  if (read_kvs(g, &c, e) || check_keys(g, e)) return e->code;
  return read_tensors(g, &c, n_tensors, e);
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
  free(g->t);
  free(g);
}

const char *gc_gguf_path(const gc_gguf_t *g) { return g->path; }
uint32_t gc_gguf_version(const gc_gguf_t *g) { return g->version; }
uint64_t gc_gguf_tensor_count(const gc_gguf_t *g) { return g->n_t; }

const gc_gguf_tensor_t *gc_gguf_tensor_at(const gc_gguf_t *g, uint64_t i) {
  return i < g->n_t ? &g->t[i] : NULL;
}

const gc_gguf_tensor_t *gc_gguf_tensor(const gc_gguf_t *g, const char *name) {
  size_t n = strlen(name);
  for (uint64_t i = 0; i < g->n_t; i++)
    if (g->t[i].name.n == n && !memcmp(g->t[i].name.p, name, n)) return &g->t[i];
  return NULL;
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

int gc_gguf_get_num(const gc_gguf_t *g, const char *key, double *out, gc_err_t *e) {
  const gc_gguf_kv_t *kv = gc_gguf_find(g, key);
  int64_t v;
  if (!kv) return gc_err_set(e, GC_ENOTFOUND, "%s: no '%s'", g->path, key);
  if (kv->type == GC_GGUF_F32) {
    float f;
    memcpy(&f, kv->data, 4);
    *out = f;
  } else if (kv->type == GC_GGUF_F64) {
    memcpy(out, kv->data, 8);
  } else if (kv->type != GC_GGUF_ARRAY && kv->type != GC_GGUF_BOOL && !int_at(kv->data, kv->type, &v)) {
    *out = (double)v;
  } else {
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' is %s, expected a number", g->path, key, type_name(kv->type));
  }
  return GC_OK;
}

/* ids[0..n) plus id where it is a new one below n_vocab and max allows. */
static int eog_add(int32_t *ids, int n, int max, int64_t id, int64_t n_vocab) {
  if (id < 0 || id >= n_vocab || n >= max) return n;
  for (int i = 0; i < n; i++)
    if (ids[i] == id) return n;
  ids[n] = (int32_t)id;
  return n + 1;
}

int64_t gc_gguf_default_special(const gc_gguf_t *g, const char *which) {
  gc_gguf_str_t m = {"", 0};
  gc_err_t ignore = {0};
  if (gc_gguf_get_str(g, "tokenizer.ggml.model", &m, &ignore)) return -1;
  int spm = m.n == 5 && !memcmp(m.p, "llama", 5), bpe = m.n == 4 && !memcmp(m.p, "gpt2", 4);
  if (!strcmp(which, "bos")) return spm ? 1 : bpe ? 11 : -1;
  if (!strcmp(which, "eos")) return spm ? 2 : bpe ? 11 : -1;
  return spm ? 0 : -1; /* unk */
}

int gc_gguf_eog_ids(const gc_gguf_t *g, int64_t n_vocab, int32_t *ids, int max) {
  static const char *const keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                     "tokenizer.ggml.eom_token_id"};
  static const char *const names[] = {"<|eot_id|>", "<|eom_id|>",     "<|end_of_text|>", "<|im_end|>",
                                      "<|end|>",    "<end_of_turn>", "<|endoftext|>",   "<EOT>"};
  gc_err_t ignore = {0};
  int n = 0;
  int64_t v;
  for (size_t i = 0; i < GC_ARRAY_LEN(keys); i++) {
    int got = !gc_gguf_get_int(g, keys[i], &v, &ignore);
    if (got && v >= 0 && v < n_vocab) n = eog_add(ids, n, max, v, n_vocab);
    else if (i == 0 && (got || !gc_gguf_find(g, keys[0]))) /* EOS outside the vocabulary or absent: the default */
      n = eog_add(ids, n, max, gc_gguf_default_special(g, "eos"), n_vocab);
  }
  gc_gguf_str_t *tok;
  uint64_t nt;
  if (gc_gguf_get_strs(g, "tokenizer.ggml.tokens", &tok, &nt, &ignore)) return n;
  for (uint64_t i = 0; i < nt && (int64_t)i < n_vocab; i++)
    for (size_t k = 0; tok[i].n < 16 && k < GC_ARRAY_LEN(names); k++)
      if (tok[i].n == strlen(names[k]) && !memcmp(tok[i].p, names[k], (size_t)tok[i].n))
        n = eog_add(ids, n, max, (int64_t)i, n_vocab);
  free(tok);
  return n;
}
