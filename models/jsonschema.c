/* jsonschema.c — a client's JSON Schema compiled into the table the JSON
 * recognizer walks (jsonmode.h says which subset; jsonschema_impl.h the
 * table). Everything outside the subset is refused with its path: a
 * keyword ignored would let through documents the schema forbids. */
#include "jsonschema_impl.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REFS 64    /* distinct $ref targets a schema may name */
#define PATTERNS 32 /* distinct patterns (with their lengths) a schema may hold: each costs up to tens of ms */

typedef struct {
  gc_json_schema_t *s;
  json_object *doc; /* the whole schema ($ref's "#") */
  struct {
    char *ref;
    int16_t node;
  } memo[REFS];
  int nmemo;
  int depth; /* nesting of the schema being compiled (json-c's own limit bounds it too) */
  uint8_t busy[GC_JSON_NODES]; /* nodes being compiled (a $ref to one: recursion) */
  int ncap, pcap, scap;        /* room in the table's nodes, props and strs (they grow as needed) */
  struct {
    const char *text;          /* a pattern compiled (its text: the schema's or FORMATS'), for its lengths: res[k] */
    size_t len;
    uint32_t minlen, maxlen;
  } rememo[PATTERNS];
  gc_err_t *e;
} cc_t;

/* Keywords that change nothing a document may be (JSON Schema's
 * annotations, format's by default in 2020-12, and where definitions
 * live: read through $ref only). */
static const char *const IGNORED[] = {"title", "description", "default", "examples", "format", "$schema",
                                      "$id", "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                      "definitions", "discriminator", NULL};
/* Keywords this compiler reads. */
static const char *const READ[] = {"type", "properties", "required", "additionalProperties", "items", "enum",
                                   "const", "anyOf", "oneOf", "allOf", "$ref", "minItems", "maxItems",
                                   "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
                                   "exclusiveMaximum", "prefixItems", "pattern", "multipleOf", "nullable",
                                   "uniqueItems", "propertyNames", NULL};

static int listed(const char *const *l, const char *k) {
  for (; *l; l++)
    if (!strcmp(*l, k)) return 1;
  return 0;
}

static int fail(cc_t *c, const char *path, const char *what) {
  return gc_err_set(c->e, GC_EINVAL, "%s: %s", path, what);
}

/* *p, an array of *cap elements of elt bytes, with room for need of them
 * (doubled as it grows: a schema costs what it holds, not the limits).
 * 0 with e set when out of memory. Pointers into *p do not survive it. */
static int room(cc_t *c, void **p, int *cap, int need, size_t elt) {
  if (need <= *cap) return 1;
  int k = *cap ? *cap : 8;
  while (k < need) k *= 2;
  void *q = realloc(*p, (size_t)k * elt);
  if (!q) return gc_err_set(c->e, GC_ENOMEM, "out of memory"), 0;
  *p = q, *cap = k;
  return 1;
}

/* A new node (any value) appended to the table; -1 when it is full. */
static int new_node(cc_t *c, const char *path) {
  gc_json_schema_t *s = c->s;
  if (s->nnodes >= GC_JSON_NODES) return fail(c, path, "the schema has too many parts"), -1;
  if (!room(c, (void **)&s->nodes, &c->ncap, s->nnodes + 1, sizeof *s->nodes)) return -1;
  s->nodes[s->nnodes] =
      (gc_json_node_t){.kinds = JK_ALL, .open = 1, .items = GC_JSON_ANY, .addl = GC_JSON_ANY, .maxitems = UINT32_MAX,
                       .maxlen = UINT32_MAX, .imult = 1, .nmult = 1};
  return s->nnodes++;
}

/* Whether s (n bytes) may be a property name: 1 .. GC_JSON_NAME bytes,
 * no '"', '\', control bytes, valid UTF-8 (the recognizer reads names
 * unescaped). */
static int plain_name(const char *s, size_t n) {
  if (!n || n > GC_JSON_NAME) return 0;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '"' || s[i] == '\\' || (unsigned char)s[i] < 0x20) return 0;
  gc_json_fsm_t f;
  gc_json_fsm_init(&f);
  return gc_json_fsm_feed(&f, "{\"", 2) && gc_json_fsm_feed(&f, s, n) && gc_json_fsm_feed(&f, "\":0}", 4) &&
         gc_json_fsm_done(&f);
}

/* The kind of enum or const value v (0: an object or an array). */
static uint8_t value_kind(json_object *v) {
  switch (json_object_get_type(v)) {
    case json_type_null: return JK_NULL;
    case json_type_boolean: return JK_BOOL;
    case json_type_int: return JK_INT;
    case json_type_double: return JK_NUM;
    case json_type_string: return JK_STR;
    default: return 0;
  }
}

/* Value v's JSON text (json-c's, '/' unescaped) appended to strs. */
static int add_lit(cc_t *c, const char *path, json_object *v) {
  gc_json_schema_t *s = c->s;
  size_t n;
  const char *t = json_object_to_json_string_length(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  if (!t || n > GC_JSON_LIT) return fail(c, path, "an enum or const value's JSON text must be at most 80 bytes");
  if (s->nstrs >= GC_JSON_NODES * 4) return fail(c, path, "the schema has too many enum values");
  if (!room(c, (void **)&s->strs, &c->scap, s->nstrs + 1, sizeof *s->strs)) return c->e->code;
  memcpy(s->strs[s->nstrs], t, n);
  s->strs[s->nstrs][n] = 0;
  s->nstrs++;
  return GC_OK;
}

/* enum (has_en: a non-empty list) or const (has_cn; json-c's null is
 * NULL) into node n: the values of the kinds *kinds allows (the schema's
 * type; an integer within number), as JSON texts; *kinds becomes theirs. */
static int enum_part(cc_t *c, const char *path, int has_en, json_object *en, int has_cn, json_object *cn, int n,
                     uint8_t *kinds) {
  gc_json_schema_t *s = c->s;
  if (has_en && has_cn) return fail(c, path, "enum and const together are not supported");
  if (has_en && (!json_object_is_type(en, json_type_array) || !json_object_array_length(en)))
    return fail(c, path, "enum is a non-empty list");
  size_t m = has_en ? json_object_array_length(en) : 1;
  int e0 = s->nstrs;
  uint8_t have = 0;
  for (size_t i = 0; i < m; i++) {
    json_object *v = has_en ? json_object_array_get_idx(en, i) : cn;
    uint8_t k = value_kind(v);
    if (!k) return fail(c, path, "enum and const values that are objects or arrays are not supported");
    if (!(k & *kinds) && !(k == JK_INT && *kinds & JK_NUM)) continue; /* not of the schema's type */
    if (add_lit(c, path, v)) return c->e->code;
    have |= k;
  }
  if (s->nstrs == e0) return fail(c, path, "no enum or const value has the schema's type");
  s->nodes[n].enum0 = e0, s->nodes[n].nenum = s->nstrs - e0, s->nodes[n].ekinds = have;
  *kinds = have;
  return GC_OK;
}

static int compile_into(cc_t *c, json_object *sch, int n, char *path, size_t plen);

/* path + suffix in path's buffer (GC's 256 bytes), for a child. */
static size_t extend(char *path, size_t plen, const char *fmt, const char *arg) {
  int k = snprintf(path + plen, 256 - plen, fmt, arg);
  return k < 0 ? plen : plen + (size_t)k < 255 ? plen + (size_t)k : 255;
}

/* The node of schema sch (a new one, or ref's). -1 on error. */
static int compile(cc_t *c, json_object *sch, char *path, size_t plen) {
  int n = new_node(c, path);
  if (n < 0 || compile_into(c, sch, n, path, plen)) return -1;
  return n;
}

/* The node a $ref names: "#", "#/$defs/X" or "#/definitions/X". */
static int resolve(cc_t *c, const char *ref, char *path) {
  for (int i = 0; i < c->nmemo; i++)
    if (!strcmp(c->memo[i].ref, ref)) return c->memo[i].node;
  json_object *target = NULL, *defs = NULL;
  if (!strcmp(ref, "#")) {
    target = c->doc;
  } else {
    const char *name = !strncmp(ref, "#/$defs/", 8) ? ref + 8 : !strncmp(ref, "#/definitions/", 14) ? ref + 14 : NULL;
    const char *where = name == ref + 8 ? "$defs" : "definitions";
    if (!name || strchr(name, '/') || strchr(name, '~'))
      return fail(c, path, "a $ref is \"#\", \"#/$defs/NAME\" or \"#/definitions/NAME\""), -1;
    if (!json_object_object_get_ex(c->doc, where, &defs) || !json_object_object_get_ex(defs, name, &target))
      return fail(c, path, "the $ref names no definition"), -1;
  }
  if (c->nmemo >= REFS) return fail(c, path, "the schema has too many $ref targets"), -1;
  int n = new_node(c, path);
  if (n < 0) return -1;
  char *dup = strdup(ref);
  if (!dup) return gc_err_set(c->e, GC_ENOMEM, "out of memory"), -1;
  c->memo[c->nmemo].ref = dup, c->memo[c->nmemo].node = (int16_t)n, c->nmemo++;
  char sub[256];
  size_t sl = extend(sub, 0, "%s", ref);
  return compile_into(c, target, n, sub, sl) ? -1 : n;
}

/* type: a name or a list of them, as kind bits. */
static int kinds_of(cc_t *c, json_object *t, const char *path, uint8_t *out) {
  static const struct {
    const char *name;
    uint8_t k;
  } T[] = {{"object", JK_OBJ}, {"array", JK_ARR}, {"string", JK_STR}, {"integer", JK_INT},
           {"number", JK_NUM | JK_INT}, {"boolean", JK_BOOL}, {"null", JK_NULL}};
  int list = json_object_is_type(t, json_type_array);
  size_t n = list ? json_object_array_length(t) : 1;
  *out = 0;
  for (size_t i = 0; i < n; i++) {
    json_object *x = list ? json_object_array_get_idx(t, i) : t;
    size_t j = 0;
    while (j < sizeof T / sizeof *T && !(json_object_is_type(x, json_type_string) && !strcmp(json_object_get_string(x), T[j].name)))
      j++;
    if (j == sizeof T / sizeof *T)
      return fail(c, path, "type is one of object, array, string, integer, number, boolean, null, or a list of them");
    *out |= T[j].k;
  }
  return GC_OK;
}

/* An object's properties, required and additionalProperties into node n. */
static int object_part(cc_t *c, json_object *sch, int n, char *path, size_t plen) {
  gc_json_schema_t *s = c->s;
  json_object *props = NULL, *req = NULL, *addl = NULL;
  json_object_object_get_ex(sch, "properties", &props);
  json_object_object_get_ex(sch, "required", &req);
  json_object_object_get_ex(sch, "additionalProperties", &addl);
  if (props && !json_object_is_type(props, json_type_object)) return fail(c, path, "properties is an object");
  int np = props ? json_object_object_length(props) : 0;
  if (np > GC_JSON_PROPS) return fail(c, path, "an object may list at most 64 properties");
  if (s->nprops + np > GC_JSON_NODES * 4) return fail(c, path, "the schema has too many properties");
  if (!room(c, (void **)&s->props, &c->pcap, s->nprops + np, sizeof *s->props)) return c->e->code;
  int p0 = s->nprops, i = 0;
  s->nprops += np; /* reserved: the properties' schemas add their own after them */
  c->s->nodes[n].prop0 = p0, c->s->nodes[n].nprops = np;
  if (props) {
    json_object_object_foreach(props, name, sub) {
      size_t len = strlen(name), pl = extend(path, plen, ".properties.%s", name);
      if (!plain_name(name, len))
        return fail(c, path, "a property name must be 1 to 64 bytes of UTF-8 without '\"', '\\' or control "
                             "characters");
      memcpy(s->props[p0 + i].name, name, len + 1);
      int k = compile(c, sub, path, pl);
      path[plen] = 0;
      if (k < 0) return c->e->code;
      s->props[p0 + i++].node = (int16_t)k;
    }
  }
  gc_json_node_t *nd = &s->nodes[n];
  if (req) {
    if (!json_object_is_type(req, json_type_array)) return fail(c, path, "required is a list of names");
    for (size_t j = 0; j < json_object_array_length(req); j++) {
      json_object *r = json_object_array_get_idx(req, j);
      int k = 0;
      while (k < np && !(json_object_is_type(r, json_type_string) && !strcmp(json_object_get_string(r), s->props[p0 + k].name)))
        k++;
      if (k == np) return fail(c, path, "every required name is one of the properties");
      nd->required |= 1ull << k;
    }
  }
  /* additionalProperties: false, or absent where properties are listed: no other keys;
     absent with none listed (any object), true or a schema: other keys, their values its */
  if (addl && json_object_is_type(addl, json_type_boolean)) {
    nd->open = (uint8_t)json_object_get_boolean(addl);
  } else if (addl) {
    size_t pl = extend(path, plen, "%s", ".additionalProperties");
    int k = compile(c, addl, path, pl);
    path[plen] = 0;
    if (k < 0) return c->e->code;
    s->nodes[n].open = 1, s->nodes[n].addl = (int16_t)k;
  } else {
    nd->open = np == 0;
  }
  return GC_OK;
}

/* Keywords lo and hi of sch (integers from 0; lo <= hi), where present,
 * into *min and *max. */
static int bounds(cc_t *c, json_object *sch, const char *lo, const char *hi, uint32_t *min, uint32_t *max,
                  const char *path) {
  const char *key[2] = {lo, hi};
  char what[96];
  for (int i = 0; i < 2; i++) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(sch, key[i], &v)) continue;
    int64_t x = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
    if (x < 0 || x >= (int64_t)UINT32_MAX) {
      snprintf(what, sizeof what, "%s and %s are integers from 0", lo, hi);
      return fail(c, path, what);
    }
    *(i ? max : min) = (uint32_t)x;
  }
  if (*min <= *max) return GC_OK;
  snprintf(what, sizeof what, "%s is above %s", lo, hi);
  return fail(c, path, what);
}

/* Bound i of int_bounds (minimum, exclusiveMinimum, maximum,
 * exclusiveMaximum) of number v as the integer it allows at least (i < 2)
 * or at most, within +-(GC_JSON_IMAX + 1). */
static int64_t int_bound(json_object *v, int i) {
  const int64_t big = GC_JSON_IMAX + 1;
  int64_t b;
  if (json_object_is_type(v, json_type_int)) {
    b = json_object_get_int64(v);
  } else { /* minimum: ceil; exclusiveMinimum: floor + 1; maximum: floor; exclusiveMaximum: ceil - 1 */
    double x = json_object_get_double(v);
    x = x > 2e18 ? 2e18 : x < -2e18 ? -2e18 : x;
    b = (int64_t)(i == 0 || i == 3 ? ceil(x) : floor(x));
  }
  b = b > big ? big : b < -big ? -big : b;
  return i == 1 ? b + 1 : i == 3 ? b - 1 : b;
}

/* Bound i (as int_bound) of number v in units of 10^-GC_JSON_NDIG: the
 * least (i < 2) or greatest such unit it allows, within +-(10^30 + 1);
 * 0 where v has more than 15 significant digits (then its decimal and its
 * double would not order alike). */
static int num_bound(json_object *v, int i, __int128 *out) {
  const __int128 big = p10(2 * GC_JSON_NDIG) + 1;
  char t[40];
  double x = json_object_get_double(v);
  snprintf(t, sizeof t, "%.15g", x);
  if (strtod(t, NULL) != x) return 0;
  __int128 m = 0; /* t = m * 10^e exactly */
  int e = 0, neg = t[0] == '-', frac = 0;
  const char *p = t + neg;
  for (; *p && *p != 'e'; p++) {
    if (*p == '.') frac = 1;
    else m = m * 10 + (*p - '0'), e -= frac;
  }
  if (*p == 'e') e += atoi(p + 1);
  e += GC_JSON_NDIG;
  int up = i == 0 || i == 3; /* ceil for minimum and exclusiveMaximum, floor for the others */
  __int128 b;
  if (e >= 0) {
    b = e > 2 * GC_JSON_NDIG + 1 || m > big / p10(e) ? (m ? big : 0) : m * p10(e);
    b = neg ? -b : b;
  } else { /* a fraction of the unit: rounded toward the side the bound keeps */
    __int128 d = e < -(2 * GC_JSON_NDIG + 2) ? 0 : m / p10(-e), r = e < -(2 * GC_JSON_NDIG + 2) ? m : m % p10(-e);
    b = neg ? -d : d;
    if (r && up && !neg) b++;
    if (r && !up && neg) b--;
  }
  b = b > big ? big : b < -big ? -big : b;
  *out = i == 1 ? b + 1 : i == 3 ? b - 1 : b;
  return 1;
}

/* prefixItems (a non-empty list of at most GC_JSON_PROPS schemas: the
 * first items' nodes) into node n. */
static int prefix_part(cc_t *c, json_object *sch, int n, char *path, size_t plen) {
  gc_json_schema_t *s = c->s;
  json_object *pre = NULL;
  if (!json_object_object_get_ex(sch, "prefixItems", &pre)) return GC_OK;
  size_t np = json_object_is_type(pre, json_type_array) ? json_object_array_length(pre) : 0;
  if (!np || np > GC_JSON_PROPS) return fail(c, path, "prefixItems is a list of 1 to 64 schemas");
  if (s->nprops + (int)np > GC_JSON_NODES * 4) return fail(c, path, "the schema has too many properties");
  if (!room(c, (void **)&s->props, &c->pcap, s->nprops + (int)np, sizeof *s->props)) return c->e->code;
  int p0 = s->nprops;
  s->nprops += (int)np; /* reserved: the items' schemas add their own after them */
  s->nodes[n].pre0 = p0, s->nodes[n].npre = (int16_t)np;
  for (size_t i = 0; i < np; i++) {
    char idx[24];
    snprintf(idx, sizeof idx, ".prefixItems[%zu]", i);
    size_t pl = extend(path, plen, "%s", idx);
    int k = compile(c, json_object_array_get_idx(pre, i), path, pl);
    path[plen] = 0;
    if (k < 0) return c->e->code;
    s->props[p0 + i].name[0] = 0, s->props[p0 + i].node = (int16_t)k;
  }
  return GC_OK;
}

/* multipleOf (a number above 0 of at most 15 significant digits, exact in
 * units of 10^-15) into node n: a number node's values are multiples of
 * it (nmult, in those units); an integer node's, multiples of the least
 * integer that is one (imult; beyond 10^18: only 0). */
static int multiple_part(cc_t *c, json_object *sch, int n, const char *path, int *any) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(sch, "multipleOf", &v)) return GC_OK;
  __int128 up, down;
  if ((!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double)) ||
      json_object_get_double(v) <= 0)
    return fail(c, path, "multipleOf is a number above 0");
  if (!num_bound(v, 0, &up) || !num_bound(v, 2, &down) || up != down || up <= 0 || up > p10(2 * GC_JSON_NDIG))
    return fail(c, path, "multipleOf has at most 15 significant digits, none below 10^-15, and is below 10^15");
  gc_json_node_t *nd = &c->s->nodes[n];
  const __int128 im = up / gcd128(up, p10(GC_JSON_NDIG)); /* the least integer that is a multiple */
  nd->nmult = up, nd->imult = im > GC_JSON_IMAX ? GC_JSON_IMAX + 1 : (int64_t)im;
  *any = 1;
  return GC_OK;
}

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum (JSON Schema
 * 2020-12's: numbers) and multipleOf into node n's bounds: an integer
 * node's in imin .. imax, a number node's in nlo .. nhi. */
static int int_bounds(cc_t *c, json_object *sch, int n, const char *path) {
  static const char *const KEY[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
  gc_json_node_t *nd = &c->s->nodes[n];
  int64_t lo = -GC_JSON_IMAX, hi = GC_JSON_IMAX;
  __int128 nhi = p10(2 * GC_JSON_NDIG) - p10(GC_JSON_NDIG), nlo = -nhi; /* 15 digits: |x| <= 10^15 - 1 */
  int any = 0;
  for (int i = 0; i < 4; i++) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(sch, KEY[i], &v)) continue;
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
      return fail(c, path, "minimum, maximum, exclusiveMinimum and exclusiveMaximum are numbers");
    if (nd->kinds & JK_NUM) {
      __int128 b;
      if (!num_bound(v, i, &b)) return fail(c, path, "a bound on numbers has at most 15 significant digits");
      if (i < 2) nlo = b > nlo ? b : nlo;
      else nhi = b < nhi ? b : nhi;
    } else {
      int64_t b = int_bound(v, i);
      if (i < 2) lo = b > lo ? b : lo;
      else hi = b < hi ? b : hi;
    }
    any = 1;
  }
  if (multiple_part(c, sch, n, path, &any)) return c->e->code;
  if (!any) return GC_OK;
  if (nd->nenum) return fail(c, path, "minimum, maximum and multipleOf beside enum or const are not supported");
  if (nd->kinds & JK_NUM) nd->nbound = 1, nd->nlo = nlo, nd->nhi = nhi;
  else nd->ibound = 1, nd->imin = lo, nd->imax = hi;
  if (nlo > nhi || lo > hi || !gc_json_number_fits(c->s, n))
    return fail(c, path, nd->kinds & JK_NUM ? "no number of at most 15 digits lies between the minimum and the "
                                              "maximum (and is a multiple of multipleOf)"
                                            : "no integer of at most 18 digits lies between the minimum and the "
                                              "maximum (and is a multiple of multipleOf)");
  return GC_OK;
}

/* The formats whose strings gcore writes as OpenAI's structured outputs
 * do (an annotation to JSON Schema 2020-12, so any other name changes
 * nothing), each as the pattern of its strings: RFC 3339's full-date (the
 * month's days, 29 February in leap years), full-time (upper-case Z,
 * seconds 00-59, at most 9 fraction digits) and date-time (with 'T'),
 * RFC 9562's UUID (hyphenated, a version 1-8 and the variant 10xx, so
 * that strict validators such as zod's accept it too), dotted-decimal
 * IPv4 (no leading zeros), and an e-mail address's common form (what
 * HTML's and zod's checks both accept: dot-atoms of letters, digits and
 * _+- before the '@', labels that neither begin nor end with '-' after it,
 * a top-level label of 2 or more letters). */
#define YEAR "([1-9]\\d{3}|0[1-9]\\d{2}|00[1-9]\\d|000[1-9])"
#define LEAP "(\\d{2}(0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26]|0[48])00)"
#define DATE                                                                                                    \
  "(" YEAR "-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|" YEAR "-(0[469]|11)-(0[1-9]|[12]\\d|30)|" YEAR           \
  "-02-(0[1-9]|1\\d|2[0-8])|" LEAP "-02-29)"
#define TIME "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,9})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
static const struct { const char *name, *pattern; } FORMATS[] = {
    {"date", "^" DATE "$"},
    {"time", "^" TIME "$"},
    {"date-time", "^" DATE "T" TIME "$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"},
    {"ipv4", "^(" OCTET "\\.){3}" OCTET "$"},
    {"email", "^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z]{2,}$"},
};

/* The pattern of sch's format where FORMATS has it (NULL: none). */
static const char *format_of(json_object *sch) {
  json_object *fmt = NULL;
  if (!json_object_object_get_ex(sch, "format", &fmt) || !json_object_is_type(fmt, json_type_string)) return NULL;
  for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
    if (!strcmp(json_object_get_string(fmt), FORMATS[i].name)) return FORMATS[i].pattern;
  return NULL;
}

/* pattern (ECMA-262, regex.h's subset; a string contains a match), or a
 * format of FORMATS, into string node n, with n's minLength and maxLength
 * counted in its automaton; a pattern met before with the same lengths
 * shares its automaton. */
static int pattern_part(cc_t *c, json_object *sch, int n, const char *path) {
  gc_json_schema_t *s = c->s;
  json_object *pat = NULL;
  if (json_object_object_get_ex(sch, "pattern", &pat) && !json_object_is_type(pat, json_type_string))
    return fail(c, path, "pattern is a string");
  const char *fmt = format_of(sch), *text = pat ? json_object_get_string(pat) : fmt;
  size_t plen = pat ? (size_t)json_object_get_string_len(pat) : fmt ? strlen(fmt) : 0;
  if (!text || (!pat && s->nodes[n].nenum)) return GC_OK; /* (a format beside an enum: the enum decides) */
  if (s->nodes[n].nenum) return fail(c, path, "pattern beside enum or const is not supported");
  if (pat && fmt) return fail(c, path, "pattern beside a format gcore writes (date, time, date-time, uuid, ipv4, "
                                       "email) is not supported");
  const uint32_t lo = s->nodes[n].minlen, hi = s->nodes[n].maxlen;
  for (int k = 0; k < s->nres; k++)
    if (c->rememo[k].minlen == lo && c->rememo[k].maxlen == hi && c->rememo[k].len == plen &&
        !memcmp(c->rememo[k].text, text, plen))
      return s->nodes[n].re = (int16_t)(k + 1), GC_OK;
  if (s->nres >= PATTERNS) return fail(c, path, "the schema has more than 32 distinct patterns");
  gc_re_t *res = realloc(s->res, (size_t)(s->nres + 1) * sizeof *res);
  if (!res) return gc_err_set(c->e, GC_ENOMEM, "out of memory");
  s->res = res;
  gc_err_t e = {0};
  if (gc_re_compile(text, plen, GC_RE_SEARCH, lo, hi, &s->res[s->nres], &e)) {
    if (e.code == GC_ENOMEM) return gc_err_set(c->e, GC_ENOMEM, "out of memory");
    char what[GC_ERR_MSG];
    snprintf(what, sizeof what, "%s: %s", pat ? "pattern" : "format", e.msg);
    return fail(c, path, what);
  }
  c->rememo[s->nres].text = text, c->rememo[s->nres].len = plen;
  c->rememo[s->nres].minlen = lo, c->rememo[s->nres].maxlen = hi;
  s->nodes[n].re = (int16_t)++s->nres;
  return GC_OK;
}

/* uniqueItems into array node n (its items compiled): true where at most
 * one item may come, or where every item is one value of an enum of
 * strings, true, false and null (pydantic's set of a Literal or an Enum),
 * each then written once (at most 64 values, no prefixItems); else
 * refused. Distinct texts of such values are distinct values. */
static int unique_part(cc_t *c, json_object *sch, int n, const char *path) {
  gc_json_schema_t *s = c->s;
  json_object *u = NULL;
  if (!json_object_object_get_ex(sch, "uniqueItems", &u)) return GC_OK;
  if (!json_object_is_type(u, json_type_boolean)) return fail(c, path, "uniqueItems is true or false");
  if (!json_object_get_boolean(u) || s->nodes[n].maxitems <= 1) return GC_OK;
  int b = s->nodes[n].items;
  for (int hops = 0; !s->nodes[b].kinds && s->nodes[b].prop0 < 0 && hops <= s->nnodes; hops++)
    b = -1 - s->nodes[b].prop0; /* a $ref's target */
  const gc_json_node_t *it = &s->nodes[b];
  if (c->busy[b] || s->nodes[n].npre || !it->nenum || it->nenum > 64 || (it->ekinds & (JK_INT | JK_NUM)) ||
      it->kinds != it->ekinds)
    return fail(c, path, "uniqueItems is supported where the items are one of an enum of strings, true, false or "
                         "null (at most 64; no prefixItems), or at most one item may come");
  if (s->nodes[n].minitems > (uint32_t)it->nenum)
    return fail(c, path, "minItems is above the enum's values, each of which uniqueItems allows once");
  s->nodes[n].unique = 1;
  return GC_OK;
}

/* propertyNames of object node n (its properties read): a schema of the
 * keys' strings with pattern, minLength and maxLength (and type string,
 * annotations), compiled as a string's pattern is (pattern_part: "" where
 * none, which every key matches); every listed property name must match
 * it. The recognizer then reads an open object's keys through it. */
static int names_part(cc_t *c, json_object *sch, int n, char *path, size_t plen) {
  gc_json_schema_t *s = c->s;
  json_object *pn = NULL, *t = NULL;
  if (!json_object_object_get_ex(sch, "propertyNames", &pn)) return GC_OK;
  (void)extend(path, plen, "%s", ".propertyNames"); /* (messages name it; path[plen] = 0 undoes it) */
  int rc = GC_OK;
  if (!json_object_is_type(pn, json_type_object)) rc = fail(c, path, "propertyNames is a schema of the keys (an object)");
  json_object_object_foreach(pn, key, val) {
    (void)val;
    if (!rc && strcmp(key, "pattern") && strcmp(key, "minLength") && strcmp(key, "maxLength") && strcmp(key, "type") &&
        !listed(IGNORED, key))
      rc = fail(c, path, "propertyNames is supported with pattern, minLength and maxLength");
  }
  if (!rc && json_object_object_get_ex(pn, "type", &t) &&
      !(json_object_is_type(t, json_type_string) && !strcmp(json_object_get_string(t), "string")))
    rc = fail(c, path, "a key is a string: propertyNames's type is \"string\"");
  int k = rc ? -1 : new_node(c, path); /* the keys' string node, its automaton in re */
  if (k < 0) return path[plen] = 0, c->e->code;
  s->nodes[k].kinds = JK_STR;
  json_object *pat = NULL;
  if (!(rc = bounds(c, pn, "minLength", "maxLength", &s->nodes[k].minlen, &s->nodes[k].maxlen, path)) &&
      !json_object_object_get_ex(pn, "pattern", &pat)) {
    json_object_object_add(pn, "pattern", json_object_new_string("")); /* (the document is ours: a copy) */
  }
  if (!rc) rc = pattern_part(c, pn, k, path);
  const gc_json_node_t *o = &s->nodes[n];
  for (int p = 0; !rc && p < o->nprops; p++) {
    const char *name = s->props[o->prop0 + p].name;
    if (!gc_re_matches(&s->res[s->nodes[k].re - 1], name, strlen(name))) {
      char what[160];
      snprintf(what, sizeof what, "the property %.64s does not match propertyNames", name);
      rc = fail(c, path, what);
    }
  }
  path[plen] = 0;
  if (!rc) s->nodes[n].kre = s->nodes[k].re;
  return rc;
}

/* Whether property name of object node o is required and allows only
 * strings of an enum or const: *node its value's node. */
static int tag_of(const gc_json_schema_t *s, const gc_json_node_t *o, const char *name, int *node) {
  for (int p = 0; p < o->nprops; p++)
    if (!strcmp(s->props[o->prop0 + p].name, name)) {
      const gc_json_node_t *v = &s->nodes[*node = s->props[o->prop0 + p].node];
      return (o->required >> p & 1) && v->nenum && v->ekinds == JK_STR && v->kinds == JK_STR;
    }
  return 0;
}

/* The branches br[0, nbr) that are objects only (kinds JK_OBJ, two or
 * more) into node n's object part as a tagged union (pydantic's
 * discriminated union): a property P that each of them requires with
 * strings of an enum or const, no string in two of them. n's object then
 * lists P alone, its value one of every branch's strings (a new node),
 * and the string read chooses the branch (jsonmode.c: tag_chosen): P is
 * written first. */
static int tagged(cc_t *c, const int *br, int nbr, int n, const char *path) {
  gc_json_schema_t *s = c->s;
  int first = 0;
  while (s->nodes[br[first]].kinds != JK_OBJ) first++;
  for (int p = 0; p < s->nodes[br[first]].nprops; p++) {
    const char *name = s->props[s->nodes[br[first]].prop0 + p].name;
    int ok = 1, ntags = 0, tn = 0;
    for (int i = 0; ok && i < nbr; i++)
      if (s->nodes[br[i]].kinds == JK_OBJ && (ok = tag_of(s, &s->nodes[br[i]], name, &tn))) ntags += s->nodes[tn].nenum;
    for (int i = 0; ok && i < nbr; i++) /* no string in two branches */
      for (int j = i + 1; ok && j < nbr && s->nodes[br[i]].kinds == JK_OBJ; j++) {
        int ti, tj;
        if (s->nodes[br[j]].kinds != JK_OBJ || br[i] == br[j]) continue;
        tag_of(s, &s->nodes[br[i]], name, &ti), tag_of(s, &s->nodes[br[j]], name, &tj);
        for (int a = 0; ok && a < s->nodes[ti].nenum; a++)
          for (int b = 0; ok && b < s->nodes[tj].nenum; b++)
            ok = strcmp(s->strs[s->nodes[ti].enum0 + a], s->strs[s->nodes[tj].enum0 + b]) != 0;
      }
    if (!ok) continue;
    char pname[GC_JSON_NAME + 1];
    memcpy(pname, name, sizeof pname);
    int t = new_node(c, path); /* (pointers into the table are stale from here) */
    if (t < 0) return c->e->code;
    if (s->nstrs + ntags > GC_JSON_NODES * 4 || s->nprops + 1 + ntags > GC_JSON_NODES * 4)
      return fail(c, path, "the schema has too many enum values");
    if (!room(c, (void **)&s->strs, &c->scap, s->nstrs + ntags, sizeof *s->strs) ||
        !room(c, (void **)&s->props, &c->pcap, s->nprops + 1 + ntags, sizeof *s->props))
      return c->e->code;
    int p0 = s->nprops, e0 = s->nstrs, k = 0;
    s->nprops += 1 + ntags;
    memcpy(s->props[p0].name, pname, sizeof pname);
    s->props[p0].node = (int16_t)t;
    for (int i = 0; i < nbr; i++) {
      if (s->nodes[br[i]].kinds != JK_OBJ) continue;
      tag_of(s, &s->nodes[br[i]], pname, &tn);
      for (int a = 0; a < s->nodes[tn].nenum; a++, k++) {
        memcpy(s->strs[e0 + k], s->strs[s->nodes[tn].enum0 + a], sizeof *s->strs);
        s->props[p0 + 1 + k].name[0] = 0, s->props[p0 + 1 + k].node = (int16_t)br[i];
      }
    }
    s->nstrs += ntags;
    gc_json_node_t *tg = &s->nodes[t], *nd = &s->nodes[n];
    tg->kinds = tg->ekinds = JK_STR, tg->enum0 = e0, tg->nenum = ntags;
    nd->prop0 = p0, nd->nprops = 1, nd->required = 1, nd->open = 0, nd->u0 = p0 + 1, nd->nu = (int16_t)ntags;
    return GC_OK;
  }
  return fail(c, path, "anyOf/oneOf of two or more objects needs a tag: a property each of them requires, of "
                       "string enums or consts no two of them share (pydantic's discriminator)");
}

#define BRANCHES 64 /* branches an anyOf or oneOf may have */

/* anyOf / oneOf into n: branches that begin with different bytes merged,
 * objects (two or more) told apart by a tag (tagged). */
static int branches(cc_t *c, json_object *list, const char *key, int n, char *path, size_t plen) {
  gc_json_schema_t *s = c->s;
  if (!json_object_is_type(list, json_type_array) || !json_object_array_length(list))
    return fail(c, path, "anyOf and oneOf are non-empty lists of schemas");
  int nbr = (int)json_object_array_length(list), br[BRANCHES], nobj = 0;
  if (nbr > BRANCHES) return fail(c, path, "anyOf and oneOf have at most 64 branches");
  for (int i = 0; i < nbr; i++) {
    char idx[24];
    snprintf(idx, sizeof idx, "[%d]", i);
    size_t pl = extend(path, plen, ".%s", key);
    pl = extend(path, pl, "%s", idx);
    int b = compile(c, json_object_array_get_idx(list, i), path, pl);
    path[plen] = 0;
    if (b < 0) return c->e->code;
    for (int hops = 0; !s->nodes[b].kinds && s->nodes[b].prop0 < 0 && hops <= s->nnodes; hops++)
      b = -1 - s->nodes[b].prop0; /* a $ref's target */
    if (c->busy[b] || !s->nodes[b].kinds)
      return fail(c, path, "a branch of anyOf/oneOf that refers back to a schema around it is not supported");
    br[i] = b, nobj += s->nodes[b].kinds == JK_OBJ;
  }
  uint8_t have = 0;
  for (int i = 0; i < nbr; i++) {
    int b = br[i];
    if (nobj >= 2 && s->nodes[b].kinds == JK_OBJ) continue; /* the tagged union's, below */
    gc_json_node_t *nb = &s->nodes[b], *nd = &s->nodes[n];
    uint8_t k = nb->kinds, cls = (uint8_t)(k & JK_INT ? k | JK_NUM : k), hcls = (uint8_t)(have & JK_INT ? have | JK_NUM : have);
    if (cls & hcls)
      return fail(c, path, "anyOf/oneOf branches must differ in type (integer and number alike), so that a value's "
                           "first byte chooses one");
    have |= k;
    if (k & JK_OBJ)
      nd->open = nb->open, nd->addl = nb->addl, nd->prop0 = nb->prop0, nd->nprops = nb->nprops, nd->required = nb->required,
      nd->kre = nb->kre;
    if (k & JK_ARR)
      nd->items = nb->items, nd->minitems = nb->minitems, nd->maxitems = nb->maxitems, nd->pre0 = nb->pre0,
      nd->npre = nb->npre;
    if (k & JK_STR) nd->minlen = nb->minlen, nd->maxlen = nb->maxlen, nd->re = nb->re;
    if (k & JK_INT) nd->ibound = nb->ibound, nd->imin = nb->imin, nd->imax = nb->imax, nd->imult = nb->imult;
    if (k & JK_NUM) nd->nbound = nb->nbound, nd->nlo = nb->nlo, nd->nhi = nb->nhi, nd->nmult = nb->nmult;
    if (nb->nenum && nd->nenum) return fail(c, path, "anyOf/oneOf with an enum or const in two branches is not supported");
    if (nb->nenum) nd->enum0 = nb->enum0, nd->nenum = nb->nenum, nd->ekinds = nb->ekinds;
  }
  if (nobj >= 2) {
    if (have & JK_OBJ)
      return fail(c, path, "anyOf/oneOf branches must differ in type (integer and number alike), so that a value's "
                           "first byte chooses one");
    int rc = tagged(c, br, nbr, n, path);
    if (rc) return rc;
    have |= JK_OBJ;
  }
  s->nodes[n].kinds = have;
  return GC_OK;
}

/* Schema sch into node n (made any by new_node). */
static int compile_into(cc_t *c, json_object *sch, int n, char *path, size_t plen) {
  if (json_object_is_type(sch, json_type_boolean)) {
    if (json_object_get_boolean(sch)) return GC_OK; /* true: any value */
    return fail(c, path, "the schema false allows no value");
  }
  if (!json_object_is_type(sch, json_type_object)) return fail(c, path, "a schema is an object");
  if (c->depth >= 64) return fail(c, path, "the schema nests too deeply");
  c->depth++, c->busy[n] = 1;
  int rc = GC_OK, nread = 0;
  json_object_object_foreach(sch, key, val) {
    (void)val;
    if (listed(READ, key)) nread++;
    else if (!listed(IGNORED, key)) {
      char what[160];
      snprintf(what, sizeof what, "%.64s is not supported (gcore's schemas: jsonmode.h)", key);
      rc = fail(c, path, what);
      break;
    }
  }
  json_object *ref = NULL, *any = NULL, *one = NULL, *all = NULL, *t = NULL, *en = NULL, *cn = NULL, *items = NULL;
  json_object_object_get_ex(sch, "$ref", &ref);
  json_object_object_get_ex(sch, "anyOf", &any);
  json_object_object_get_ex(sch, "oneOf", &one);
  json_object_object_get_ex(sch, "allOf", &all);
  gc_json_schema_t *s = c->s;
  if (!rc && (ref || any || one || all) && nread > 1)
    rc = fail(c, path, "$ref, anyOf, oneOf and allOf are supported alone (beside annotations)");
  if (!rc && (ref || any || one || all) && format_of(sch))
    rc = fail(c, path, "a format gcore writes (date, time, date-time, uuid, ipv4, email) beside $ref, anyOf, oneOf "
                       "or allOf is not supported");
  if (!rc && ref) {
    int k = json_object_is_type(ref, json_type_string) ? resolve(c, json_object_get_string(ref), path)
                                                       : (fail(c, path, "a $ref is a string"), -1);
    if (k < 0) rc = c->e->code;
    else s->nodes[n].kinds = 0, s->nodes[n].prop0 = -1 - k; /* an alias (k may still be filling): link_aliases */
  } else if (!rc && (any || one)) {
    rc = branches(c, any ? any : one, any ? "anyOf" : "oneOf", n, path, plen);
  } else if (!rc && all) {
    if (!json_object_is_type(all, json_type_array) || json_object_array_length(all) != 1)
      rc = fail(c, path, "allOf is supported with one schema");
    else rc = compile_into(c, json_object_array_get_idx(all, 0), n, path, plen);
  } else if (!rc) {
    json_object_object_get_ex(sch, "type", &t);
    int has_en = json_object_object_get_ex(sch, "enum", &en), has_cn = json_object_object_get_ex(sch, "const", &cn);
    json_object_object_get_ex(sch, "items", &items);
    uint8_t kinds = JK_ALL;
    json_object *nullable = NULL;
    json_object_object_get_ex(sch, "nullable", &nullable);
    if (t) rc = kinds_of(c, t, path, &kinds);
    if (!rc && nullable && !json_object_is_type(nullable, json_type_boolean))
      rc = fail(c, path, "nullable is true or false");
    if (!rc && nullable && json_object_get_boolean(nullable)) { /* OpenAPI 3.0's (zod's .nullable() as OpenAI's helper writes it) */
      if (has_en || has_cn) rc = fail(c, path, "nullable beside enum or const is not supported (list null in the enum)");
      kinds |= JK_NULL;
    }
    if (!rc && (has_en || has_cn) && (json_object_object_get_ex(sch, "minLength", NULL) ||
                              json_object_object_get_ex(sch, "maxLength", NULL)))
      rc = fail(c, path, "minLength and maxLength beside enum or const are not supported");
    if (!rc && (has_en || has_cn)) rc = enum_part(c, path, has_en, en, has_cn, cn, n, &kinds);
    s->nodes[n].kinds = kinds;
    if (!rc && (kinds & JK_OBJ)) rc = object_part(c, sch, n, path, plen);
    if (!rc && (kinds & JK_OBJ)) rc = names_part(c, sch, n, path, plen);
    if (!rc && (kinds & JK_ARR))
      rc = bounds(c, sch, "minItems", "maxItems", &s->nodes[n].minitems, &s->nodes[n].maxitems, path);
    if (!rc && (kinds & JK_STR))
      rc = bounds(c, sch, "minLength", "maxLength", &s->nodes[n].minlen, &s->nodes[n].maxlen, path);
    if (!rc && (kinds & JK_STR)) rc = pattern_part(c, sch, n, path);
    if (!rc && (kinds & JK_INT)) rc = int_bounds(c, sch, n, path); /* (minimum on strings: nothing to do) */
    if (!rc && (kinds & JK_ARR)) rc = prefix_part(c, sch, n, path, plen);
    if (!rc && items && (kinds & JK_ARR) && json_object_is_type(items, json_type_boolean) &&
        !json_object_get_boolean(items)) { /* no items past the prefix */
      if (s->nodes[n].maxitems > (uint32_t)s->nodes[n].npre) s->nodes[n].maxitems = (uint32_t)s->nodes[n].npre;
      if (s->nodes[n].minitems > s->nodes[n].maxitems) rc = fail(c, path, "minItems is above the prefixItems");
    } else if (!rc && items && (kinds & JK_ARR)) {
      size_t pl = extend(path, plen, "%s", ".items");
      int k = compile(c, items, path, pl);
      path[plen] = 0;
      if (k < 0) rc = c->e->code;
      else s->nodes[n].items = (int16_t)k;
    }
    if (!rc && (kinds & JK_ARR)) rc = unique_part(c, sch, n, path);
  }
  c->depth--, c->busy[n] = 0;
  return rc;
}

/* Aliases ($ref nodes: kinds 0, prop0 = -1 - target) replaced by copies
 * of their targets, now complete; a chain of them followed. */
static int link_aliases(cc_t *c) {
  gc_json_schema_t *s = c->s;
  for (int i = 0; i < s->nnodes; i++) {
    int k = i, hops = 0;
    while (!s->nodes[k].kinds && s->nodes[k].prop0 < 0 && hops++ <= s->nnodes) k = -1 - s->nodes[k].prop0;
    if (hops > s->nnodes || !s->nodes[k].kinds)
      return gc_err_set(c->e, GC_EINVAL, "schema: a $ref refers to itself and nothing else");
    if (k != i) s->nodes[i] = s->nodes[k];
  }
  return GC_OK;
}

/* mind and omind of every node: the fewest levels of containers a value
 * needs, to a fixed point (recursion through required properties can
 * leave a node with none that fits: 255). */
static void depths(gc_json_schema_t *s) {
  for (int i = 0; i < s->nnodes; i++) s->nodes[i].mind = s->nodes[i].omind = s->nodes[i].amind = 255;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < s->nnodes; i++) {
      gc_json_node_t *nd = &s->nodes[i];
      int om = 1;
      for (int p = 0; p < nd->nprops; p++)
        if (nd->required >> p & 1) {
          int m = s->nodes[s->props[nd->prop0 + p].node].mind;
          om = m == 255 ? 255 : m + 1 > om ? m + 1 : om;
        }
      for (int u = 0; u < nd->nu; u++) { /* a tagged union: whichever object the tag chooses must fit */
        int m = s->nodes[s->props[nd->u0 + u].node].omind;
        om = m > om ? m : om;
      }
      int am = 1; /* an array's: its first minitems items */
      for (uint32_t k = 0; k < nd->minitems && am < 255 && k <= (uint32_t)nd->npre; k++) {
        int im = s->nodes[k < (uint32_t)nd->npre ? s->props[nd->pre0 + k].node : nd->items].mind;
        am = im == 255 ? 255 : im + 1 > am ? im + 1 : am;
      }
      int m = nd->kinds & ~(JK_OBJ | JK_ARR) ? 0 : nd->kinds & JK_ARR ? am : 255;
      if (nd->kinds & JK_OBJ && om < m) m = om;
      if (om > 255) om = 255;
      if (om != nd->omind || m != nd->mind || am != nd->amind)
        nd->omind = (uint8_t)om, nd->mind = (uint8_t)m, nd->amind = (uint8_t)am, changed = 1;
    }
  }
}

gc_json_schema_t *gc_json_schema_ref(gc_json_schema_t *s) {
  if (s) __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
  return s;
}

void gc_json_schema_free(gc_json_schema_t *s) {
  if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  free(s->nodes);
  free(s->props);
  free(s->strs);
  for (int k = 0; k < s->nres; k++) gc_re_free(&s->res[k]);
  free(s->res);
  free(s);
}

int gc_json_schema_new(const char *text, size_t n, gc_json_schema_t **out, gc_err_t *e) {
  *out = NULL;
  json_tokener *tk = json_tokener_new_ex(256); /* levels of JSON: a schema of 32 levels takes about 70 */
  if (!tk) return gc_err_set(e, GC_ENOMEM, "out of memory");
  json_object *doc = n <= (size_t)INT32_MAX ? json_tokener_parse_ex(tk, text, (int)n) : NULL;
  size_t end = doc && json_tokener_get_error(tk) == json_tokener_success ? json_tokener_get_parse_end(tk) : 0;
  while (end < n && (text[end] == ' ' || text[end] == '\t' || text[end] == '\n' || text[end] == '\r')) end++;
  int parsed = doc && end == n;
  json_tokener_free(tk);
  if (!parsed) return json_object_put(doc), gc_err_set(e, GC_EINVAL, "schema: not one JSON value");
  cc_t c = {.doc = doc, .e = e};
  gc_json_schema_t *s = c.s = gc_calloc(1, sizeof *s, e);
  if (s) s->refs = 1;
  char path[256] = "schema";
  int rc = s ? GC_OK : e->code;
  if (!rc && (new_node(&c, path) != GC_JSON_ANY || new_node(&c, path) != 1)) rc = e->code;
  if (!rc) {
    c.memo[0].ref = strdup("#"), c.memo[0].node = 1, c.nmemo = 1;
    if (!c.memo[0].ref) rc = gc_err_set(e, GC_ENOMEM, "out of memory");
  }
  if (!rc) rc = compile_into(&c, doc, 1, path, strlen(path));
  if (!rc) rc = link_aliases(&c);
  if (!rc) {
    depths(s);
    if (!(s->nodes[1].kinds & JK_OBJ)) rc = gc_err_set(e, GC_EINVAL, "schema: the root must allow an object");
    else if (s->nodes[1].omind > GC_JSON_DEPTH)
      rc = gc_err_set(e, GC_EINVAL, "schema: no object it allows fits %d levels of nesting (a required property "
                                    "recurses)", GC_JSON_DEPTH);
  }
  for (int i = 0; i < c.nmemo; i++) free(c.memo[i].ref);
  json_object_put(doc);
  if (rc) return gc_json_schema_free(s), rc;
  *out = s;
  return GC_OK;
}
