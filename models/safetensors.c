/* safetensors.c — maps safetensors files read-only and validates their
 * headers: 8-byte little-endian header length, a JSON object of
 * name -> {dtype, shape, data_offsets}, then the data region. Offsets are
 * relative to the data region; each tensor must lie inside it, match its
 * shape exactly and not overlap another. Sharded models are merged through
 * model.safetensors.index.json. */
#include "safetensors.h"

#include "../base/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes are handed out as they lie in the file (little-endian). */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gcore reads little-endian weight files in place");

/* The reference implementation refuses headers over 100 MB. */
#define ST_MAX_HEADER (100u * 1024u * 1024u)
#define ST_MAX_INDEX (64u * 1024u * 1024u)

typedef struct st_file {
  char *path;
  void *map;          /* [size] read-only mapping */
  size_t size;
  const uint8_t *data; /* start of the data region, inside map */
  size_t data_size;
} st_file_t;

struct gc_st {
  char *path;
  st_file_t *files;        /* [n_files] */
  size_t n_files;
  gc_st_tensor_t *tensors; /* [n_tensors], sorted by name */
  size_t n_tensors, cap_tensors;
};

/* ---------------------------------------------------------------- dtypes */

typedef struct {
  const char *name;
  size_t size;
  gc_st_dtype_t dtype;
} st_dtype_info_t;

/* Every dtype of the safetensors format with a whole-byte element size.
 * Sub-byte formats (F4, F6_*) are refused by name as unsupported. */
static const st_dtype_info_t st_dtypes[] = {
    {"F32", 4, GC_ST_F32},      {"F16", 2, GC_ST_F16},
    {"BF16", 2, GC_ST_BF16},    {"F64", 8, GC_ST_OTHER},
    {"I64", 8, GC_ST_OTHER},    {"U64", 8, GC_ST_OTHER},
    {"I32", 4, GC_ST_OTHER},    {"U32", 4, GC_ST_OTHER},
    {"I16", 2, GC_ST_OTHER},    {"U16", 2, GC_ST_OTHER},
    {"I8", 1, GC_ST_OTHER},     {"U8", 1, GC_ST_OTHER},
    {"BOOL", 1, GC_ST_OTHER},   {"F8_E4M3", 1, GC_ST_OTHER},
    {"F8_E5M2", 1, GC_ST_OTHER}, {"F8_E8M0", 1, GC_ST_OTHER},
};

size_t gc_st_dtype_size(gc_st_dtype_t t) {
  switch (t) {
  case GC_ST_F32: return 4;
  case GC_ST_F16: return 2;
  case GC_ST_BF16: return 2;
  default: return 0;
  }
}

_Static_assert((int)GC_ST_Q8_0 == GC_QT_Q8_0 && (int)GC_ST_Q6_K == GC_QT_Q6_K && (int)GC_ST_BF16 == GC_QT_BF16,
               "gc_st_dtype_t numbers the block formats as gc_qtype_t does");

const char *gc_st_dtype_name(gc_st_dtype_t t) {
  const gc_qformat_t *f = gc_quant_format((int)t);
  return f ? f->name : "?";
}

static const st_dtype_info_t *st_dtype_lookup(const char *s) {
  for (size_t i = 0; i < GC_ARRAY_LEN(st_dtypes); i++)
    if (strcmp(st_dtypes[i].name, s) == 0) return &st_dtypes[i];
  return NULL;
}

/* ----------------------------------------------------------- file layer */

static void st_file_unmap(st_file_t *f) {
  if (f->map) munmap(f->map, f->size);
  free(f->path);
  memset(f, 0, sizeof *f);
}

/* Map path read-only into f. The file must be a regular file of at least
 * 8 bytes (the header length). */
static int st_file_map(const char *path, st_file_t *f, gc_err_t *e) {
  memset(f, 0, sizeof *f);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return gc_err_set(e, errno == ENOENT ? GC_ENOTFOUND : GC_EIO,
                      "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    return gc_err_set(e, GC_EIO, "%s: cannot stat: %s", path, strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return gc_err_set(e, GC_EIO, "%s: not a regular file", path);
  }
  if (sb.st_size < 8) {
    close(fd);
    return gc_err_set(e, GC_ECORRUPT,
                      "%s: file is %lld bytes, too short for a safetensors "
                      "header (at least 8)",
                      path, (long long)sb.st_size);
  }
  if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
    close(fd);
    return gc_err_set(e, GC_EIO, "%s: too large to map", path);
  }
  void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (m == MAP_FAILED)
    return gc_err_set(e, GC_EIO, "%s: mmap failed: %s", path, strerror(err));
  f->map = m;
  f->size = (size_t)sb.st_size;
  f->path = gc_strdup(path, e);
  if (!f->path) {
    munmap(m, f->size);
    f->map = NULL;
    return GC_ENOMEM;
  }
  return GC_OK;
}

/* --------------------------------------------------------- tensor table */

static int st_push(gc_st_t *st, const gc_st_tensor_t *t, gc_err_t *e) {
  if (st->n_tensors == st->cap_tensors) {
    size_t cap = st->cap_tensors ? st->cap_tensors * 2 : 64;
    void *p = gc_realloc(st->tensors, cap * sizeof *st->tensors, e);
    if (!p) return GC_ENOMEM;
    st->tensors = p;
    st->cap_tensors = cap;
  }
  st->tensors[st->n_tensors++] = *t;
  return GC_OK;
}

static int st_cmp_name(const void *a, const void *b) {
  return strcmp(((const gc_st_tensor_t *)a)->name,
                ((const gc_st_tensor_t *)b)->name);
}

/* Read a non-negative JSON integer. json-c saturates values beyond int64
 * to INT64_MAX, which the bounds checks then refuse. */
static int st_json_u64(struct json_object *v, uint64_t *out) {
  if (!v || !json_object_is_type(v, json_type_int)) return 0;
  int64_t x = json_object_get_int64(v);
  if (x < 0) return 0;
  *out = (uint64_t)x;
  return 1;
}

/* "[a,b,c]" into buf[n], cut short if it does not fit. */
static void st_shape_str(const gc_st_tensor_t *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < t->ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)t->shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* shape: at most GC_ST_MAX_DIMS non-negative integers whose product
 * fits in int64; fills t->ndim, t->shape and *numel. name is quoted. */
static int st_parse_shape(const char *p, const char *name, struct json_object *js, gc_st_tensor_t *t,
                          uint64_t *numel_out, gc_err_t *e) {
  size_t nd = json_object_array_length(js);
  if (nd > GC_ST_MAX_DIMS)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: tensor %s has %zu dimensions (at most %d)",
                      p, name, nd, GC_ST_MAX_DIMS);
  t->ndim = (int)nd;
  uint64_t numel = 1;
  for (size_t i = 0; i < nd; i++) {
    uint64_t d;
    if (!st_json_u64(json_object_array_get_idx(js, i), &d) || d > (uint64_t)INT64_MAX)
      return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: shape[%zu] is not a non-negative integer", p, name, i);
    t->shape[i] = (int64_t)d;
    if (__builtin_mul_overflow(numel, d, &numel) || numel > (uint64_t)INT64_MAX)
      return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: shape overflows", p, name);
  }
  *numel_out = numel;
  return GC_OK;
}

/* Parse one header entry into t (name not yet set). */
static int st_parse_entry(const st_file_t *f, const char *name,
                          struct json_object *v, gc_st_tensor_t *t,
                          uint64_t *begin, uint64_t *end, gc_err_t *e) {
  const char *p = f->path;
  struct json_object *jd, *js, *jo;
  char qn[GC_QUOTE_BUF], qd[40];
  name = gc_quote(name, GC_QSTR, qn, sizeof qn); /* from the file: used here in messages only */
  if (!json_object_is_type(v, json_type_object))
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: entry is not a JSON object", p, name);
  if (!json_object_object_get_ex(v, "dtype", &jd) || !json_object_is_type(jd, json_type_string))
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: missing string 'dtype'", p, name);
  if (!json_object_object_get_ex(v, "shape", &js) || !json_object_is_type(js, json_type_array))
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: missing array 'shape'", p, name);
  if (!json_object_object_get_ex(v, "data_offsets", &jo) ||
      !json_object_is_type(jo, json_type_array) || json_object_array_length(jo) != 2)
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: 'data_offsets' is not an array [begin, end]", p, name);

  const char *ds = json_object_get_string(jd);
  const st_dtype_info_t *di = st_dtype_lookup(ds);
  if (!di)
    return gc_err_set(e, GC_EUNSUPPORTED,
                      "%s: tensor %s has dtype %s, which gcore does not "
                      "know (it computes with F32, F16, BF16)", p, name, gc_quote(ds, GC_QSTR, qd, sizeof qd));
  t->dtype = di->dtype;
  snprintf(t->dtype_name, sizeof t->dtype_name, "%s", di->name);

  uint64_t numel = 0;
  int rc = st_parse_shape(p, name, js, t, &numel, e);
  if (rc) return rc;
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, (uint64_t)di->size, &nbytes))
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: byte size overflows", p, name);
  t->numel = (int64_t)numel;

  if (!st_json_u64(json_object_array_get_idx(jo, 0), begin) ||
      !st_json_u64(json_object_array_get_idx(jo, 1), end))
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: data_offsets are not non-negative integers", p, name);
  if (*begin > *end)
    return gc_err_set(e, GC_ECORRUPT, "%s: tensor %s: data_offsets [%llu, %llu] begin after end",
                      p, name, (unsigned long long)*begin, (unsigned long long)*end);
  if (*end > f->data_size)
    return gc_err_set(e, GC_ECORRUPT,
                      "%s: tensor %s: data_offsets [%llu, %llu] run past the data region (%zu bytes; file truncated?)",
                      p, name, (unsigned long long)*begin, (unsigned long long)*end, f->data_size);
  if (*end - *begin != nbytes) {
    char sh[160];
    st_shape_str(t, sh, sizeof sh);
    return gc_err_set(e, GC_ECORRUPT,
                      "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes but %s %s needs %llu",
                      p, name, (unsigned long long)*begin, (unsigned long long)*end,
                      (unsigned long long)(*end - *begin), di->name, sh, (unsigned long long)nbytes);
  }
  t->data = f->data + *begin;
  t->nbytes = (size_t)nbytes;
  t->file = f->path;
  return GC_OK;
}

typedef struct {
  uint64_t begin, end;
  size_t idx;
} st_span_t;

static int st_cmp_span(const void *a, const void *b) {
  const st_span_t *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* Refuse two non-empty tensors sharing bytes. spans[n] is sorted here. */
static int st_check_overlap(const gc_st_t *st, const st_file_t *f,
                            st_span_t *spans, size_t n, gc_err_t *e) {
  qsort(spans, n, sizeof *spans, st_cmp_span);
  uint64_t reach = 0;
  size_t reach_idx = 0;
  for (size_t i = 0; i < n; i++) {
    if (spans[i].begin == spans[i].end) continue;
    char q1[GC_QUOTE_BUF], q2[GC_QUOTE_BUF];
    if (spans[i].begin < reach)
      return gc_err_set(e, GC_ECORRUPT, "%s: tensors %s and %s overlap in the data region", f->path,
                        gc_quote(st->tensors[reach_idx].name, GC_QSTR, q1, sizeof q1),
                        gc_quote(st->tensors[spans[i].idx].name, GC_QSTR, q2, sizeof q2));
    reach = spans[i].end;
    reach_idx = spans[i].idx;
  }
  return GC_OK;
}

/* Parse the JSON header text [n] of f: must be exactly one object,
 * optionally followed by whitespace padding. */
static int st_parse_json(const st_file_t *f, const char *text, size_t n,
                         struct json_object **out, gc_err_t *e) {
  *out = NULL;
  if (memchr(text, '\0', n))
    return gc_err_set(e, GC_ECORRUPT, "%s: header contains a NUL byte; not a safetensors file", f->path);
  struct json_tokener *tok = json_tokener_new_ex(32);
  if (!tok) return gc_err_set(e, GC_ENOMEM, "out of memory (JSON tokenizer)");
  struct json_object *obj = json_tokener_parse_ex(tok, text, (int)n);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t used = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  if (!obj || jerr != json_tokener_success) {
    if (obj) json_object_put(obj);
    return gc_err_set(e, GC_ECORRUPT, "%s: header is not valid JSON (%s); not a safetensors file?",
                      f->path, jerr == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(jerr));
  }
  for (size_t i = used; i < n; i++) {
    if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r') {
      json_object_put(obj);
      return gc_err_set(e, GC_ECORRUPT, "%s: trailing bytes after the JSON header", f->path);
    }
  }
  if (!json_object_is_type(obj, json_type_object)) {
    json_object_put(obj);
    return gc_err_set(e, GC_ECORRUPT, "%s: header is not a JSON object", f->path);
  }
  *out = obj;
  return GC_OK;
}

/* Validate the mapped file f (already stored in st->files) and append its
 * tensors to st. */
static int st_load_file(gc_st_t *st, st_file_t *f, gc_err_t *e) {
  const uint8_t *b = f->map;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
  if (hlen > f->size - 8)
    return gc_err_set(e, GC_ECORRUPT,
                      "%s: header length %llu runs past the end of the file (%zu bytes); truncated or not safetensors",
                      f->path, (unsigned long long)hlen, f->size);
  if (hlen > ST_MAX_HEADER)
    return gc_err_set(e, GC_ECORRUPT, "%s: header length %llu exceeds the %u-byte limit",
                      f->path, (unsigned long long)hlen, ST_MAX_HEADER);
  if (hlen < 2)
    return gc_err_set(e, GC_ECORRUPT, "%s: header length %llu is too short for a JSON object",
                      f->path, (unsigned long long)hlen);
  f->data = b + 8 + hlen;
  f->data_size = f->size - 8 - (size_t)hlen;

  struct json_object *root;
  int rc = st_parse_json(f, (const char *)b + 8, (size_t)hlen, &root, e);
  if (rc) return rc;

  size_t n_entries = (size_t)json_object_object_length(root);
  st_span_t *spans = gc_calloc(n_entries ? n_entries : 1, sizeof *spans, e);
  if (!spans) {
    json_object_put(root);
    return GC_ENOMEM;
  }
  size_t n_spans = 0;
  struct json_object_iterator it = json_object_iter_begin(root);
  struct json_object_iterator end = json_object_iter_end(root);
  for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
    const char *name = json_object_iter_peek_name(&it);
    struct json_object *v = json_object_iter_peek_value(&it);
    if (strcmp(name, "__metadata__") == 0) continue;
    if (name[0] == '\0') {
      rc = gc_err_set(e, GC_ECORRUPT, "%s: tensor with an empty name", f->path);
      break;
    }
    gc_st_tensor_t t;
    memset(&t, 0, sizeof t);
    uint64_t tb = 0, te = 0;
    rc = st_parse_entry(f, name, v, &t, &tb, &te, e);
    if (rc) break;
    char *nm = gc_strdup(name, e);
    if (!nm) {
      rc = GC_ENOMEM;
      break;
    }
    t.name = nm;
    rc = st_push(st, &t, e);
    if (rc) {
      free(nm);
      break;
    }
    spans[n_spans].begin = tb;
    spans[n_spans].end = te;
    spans[n_spans].idx = st->n_tensors - 1;
    n_spans++;
  }
  json_object_put(root);
  if (!rc) rc = st_check_overlap(st, f, spans, n_spans, e);
  free(spans);
  return rc;
}

/* Map path, append it to st->files and load its tensors. */
static int st_add_file(gc_st_t *st, const char *path, gc_err_t *e) {
  void *p = gc_realloc(st->files, (st->n_files + 1) * sizeof *st->files, e);
  if (!p) return GC_ENOMEM;
  st->files = p;
  st_file_t *f = &st->files[st->n_files];
  int rc = st_file_map(path, f, e);
  if (rc) return rc;
  st->n_files++;
  return st_load_file(st, f, e);
}

/* Sort by name and refuse duplicates (possible across shards). */
static int st_finish(gc_st_t *st, gc_err_t *e) {
  if (st->n_tensors) qsort(st->tensors, st->n_tensors, sizeof *st->tensors, st_cmp_name);
  char q[GC_QUOTE_BUF];
  for (size_t i = 1; i < st->n_tensors; i++)
    if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
      return gc_err_set(e, GC_ECORRUPT, "tensor %s appears twice (in %s and %s)",
                        gc_quote(st->tensors[i].name, GC_QSTR, q, sizeof q), st->tensors[i - 1].file,
                        st->tensors[i].file);
  return GC_OK;
}

/* --------------------------------------------------------------- index */

static int st_shard_name_ok(const char *s) {
  return s[0] != '\0' && s[0] != '.' && strchr(s, '/') == NULL && strlen(s) < 4096;
}

static char *st_join(const char *dir, const char *name, gc_err_t *e) {
  size_t n = strlen(dir);
  int slash = n > 0 && dir[n - 1] == '/';
  return gc_aprintf(e, "%s%s%s", dir, slash ? "" : "/", name);
}

/* Read and parse the index at ipath; on success *root owns the JSON and
 * *wm points at its weight_map object. */
static int st_index_parse(const char *ipath, struct json_object **root, struct json_object **wm, gc_err_t *e) {
  char *text = NULL;
  size_t n = 0;
  *root = NULL;
  int rc = gc_read_file(ipath, ST_MAX_INDEX, &text, &n, e);
  if (rc) return rc;
  struct json_tokener *tok = json_tokener_new_ex(32);
  if (!tok) {
    free(text);
    return gc_err_set(e, GC_ENOMEM, "out of memory (JSON tokenizer)");
  }
  struct json_object *r = NULL;
  if (!memchr(text, '\0', n)) r = json_tokener_parse_ex(tok, text, (int)n);
  int ok = r && json_tokener_get_error(tok) == json_tokener_success;
  json_tokener_free(tok);
  free(text);
  if (!ok || !json_object_is_type(r, json_type_object) || !json_object_object_get_ex(r, "weight_map", wm) ||
      !json_object_is_type(*wm, json_type_object)) {
    if (r) json_object_put(r);
    return gc_err_set(e, GC_ECORRUPT, "%s: not a JSON object with a 'weight_map' object", ipath);
  }
  *root = r;
  return GC_OK;
}

/* Open every shard the weight_map names, each once, in order of first
 * mention. Names must be plain file names inside dir. */
static int st_index_open_shards(gc_st_t *st, const char *dir, const char *ipath, struct json_object *wm,
                                gc_err_t *e) {
  struct json_object_iterator it = json_object_iter_begin(wm), end = json_object_iter_end(wm);
  for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
    const char *tname = json_object_iter_peek_name(&it);
    struct json_object *v = json_object_iter_peek_value(&it);
    char qt[GC_QUOTE_BUF], qs[GC_QUOTE_BUF];
    if (!json_object_is_type(v, json_type_string))
      return gc_err_set(e, GC_ECORRUPT, "%s: weight_map[%s] is not a file name", ipath,
                        gc_quote(tname, GC_QSTR, qt, sizeof qt));
    const char *shard = json_object_get_string(v);
    if (!st_shard_name_ok(shard))
      return gc_err_set(e, GC_ECORRUPT, "%s: weight_map[%s] names %s, not a plain file name in %s", ipath,
                        gc_quote(tname, GC_QSTR, qt, sizeof qt), gc_quote(shard, GC_QSTR, qs, sizeof qs), dir);
    char *sp = st_join(dir, shard, e);
    if (!sp) return GC_ENOMEM;
    int seen = 0, rc = GC_OK;
    for (size_t i = 0; i < st->n_files && !seen; i++) seen = strcmp(st->files[i].path, sp) == 0;
    if (!seen) rc = st_add_file(st, sp, e);
    free(sp);
    if (rc == GC_ENOTFOUND)
      return gc_err_set(e, GC_ENOTFOUND, "%s names shard %s, which does not exist in %s", ipath,
                        gc_quote(shard, GC_QSTR, qs, sizeof qs), dir);
    if (rc) return rc;
  }
  if (st->n_files == 0) return gc_err_set(e, GC_ECORRUPT, "%s: weight_map is empty", ipath);
  return GC_OK;
}

/* Every tensor the weight_map names is in the shard it names. */
static int st_index_check(const gc_st_t *st, const char *ipath, struct json_object *wm, gc_err_t *e) {
  struct json_object_iterator it = json_object_iter_begin(wm), end = json_object_iter_end(wm);
  for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
    const char *tname = json_object_iter_peek_name(&it);
    const char *shard = json_object_get_string(json_object_iter_peek_value(&it));
    const gc_st_tensor_t *t = gc_st_find(st, tname);
    const char *base = t ? strrchr(t->file, '/') : NULL;
    base = base ? base + 1 : (t ? t->file : NULL);
    char qt[GC_QUOTE_BUF], qs[GC_QUOTE_BUF];
    if (!t || strcmp(base, shard) != 0)
      return gc_err_set(e, GC_ECORRUPT, "%s maps tensor %s to %s, but that shard has no such tensor", ipath,
                        gc_quote(tname, GC_QSTR, qt, sizeof qt), gc_quote(shard, GC_QSTR, qs, sizeof qs));
  }
  return GC_OK;
}

/* A sharded model: the shards' tensors, merged and checked against the
 * index. Tensors in a shard but absent from the index are kept. */
static int st_load_index(gc_st_t *st, const char *dir, const char *ipath, gc_err_t *e) {
  struct json_object *root, *wm;
  int rc = st_index_parse(ipath, &root, &wm, e);
  if (rc) return rc;
  rc = st_index_open_shards(st, dir, ipath, wm, e);
  if (!rc) rc = st_finish(st, e);
  if (!rc) rc = st_index_check(st, ipath, wm, e);
  json_object_put(root);
  return rc;
}

/* ----------------------------------------------------------------- API */

static int st_is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int st_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static int st_open_dir(gc_st_t *st, const char *dir, gc_err_t *e) {
  char *ipath = st_join(dir, "model.safetensors.index.json", e);
  if (!ipath) return GC_ENOMEM;
  int rc;
  if (st_exists(ipath)) {
    rc = st_load_index(st, dir, ipath, e);
  } else {
    char *fpath = st_join(dir, "model.safetensors", e);
    if (!fpath) {
      free(ipath);
      return GC_ENOMEM;
    }
    if (st_exists(fpath)) {
      rc = st_add_file(st, fpath, e);
      if (!rc) rc = st_finish(st, e);
    } else {
      rc = gc_err_set(e, GC_ENOTFOUND, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    free(fpath);
  }
  free(ipath);
  return rc;
}

int gc_st_open(const char *path, gc_st_t **out, gc_err_t *e) {
  *out = NULL;
  if (!path || !*path) return gc_err_set(e, GC_EINVAL, "gc_st_open: empty path");
  gc_st_t *st = gc_calloc(1, sizeof *st, e);
  if (!st) return GC_ENOMEM;
  st->path = gc_strdup(path, e);
  if (!st->path) {
    free(st);
    return GC_ENOMEM;
  }
  int rc;
  if (st_is_dir(path)) {
    rc = st_open_dir(st, path, e);
  } else {
    rc = st_add_file(st, path, e);
    if (!rc) rc = st_finish(st, e);
  }
  if (rc) {
    gc_st_close(st);
    return rc;
  }
  *out = st;
  return GC_OK;
}

void gc_st_close(gc_st_t *st) {
  if (!st) return;
  for (size_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
  free(st->tensors);
  for (size_t i = 0; i < st->n_files; i++) st_file_unmap(&st->files[i]);
  free(st->files);
  free(st->path);
  free(st);
}

const gc_st_tensor_t *gc_st_find(const gc_st_t *st, const char *name) {
  if (!st || !name || st->n_tensors == 0) return NULL;
  gc_st_tensor_t key;
  key.name = name;
  return bsearch(&key, st->tensors, st->n_tensors, sizeof key, st_cmp_name);
}

int gc_st_get(const gc_st_t *st, const char *name, const gc_st_tensor_t **out, gc_err_t *e) {
  *out = NULL;
  const gc_st_tensor_t *t = gc_st_find(st, name);
  char q[GC_QUOTE_BUF];
  if (!t)
    return gc_err_set(e, GC_ENOTFOUND, "tensor %s not found in %s", gc_quote(name, GC_QSTR, q, sizeof q),
                      st ? st->path : "(null)");
  if (t->dtype == GC_ST_OTHER)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: tensor %s has dtype %s; gcore computes with F32, F16, BF16",
                      t->file, gc_quote(name, GC_QSTR, q, sizeof q), t->dtype_name);
  *out = t;
  return GC_OK;
}

size_t gc_st_count(const gc_st_t *st) { return st ? st->n_tensors : 0; }

const gc_st_tensor_t *gc_st_at(const gc_st_t *st, size_t i) {
  return st && i < st->n_tensors ? &st->tensors[i] : NULL;
}

const char *gc_st_path(const gc_st_t *st) { return st ? st->path : NULL; }
