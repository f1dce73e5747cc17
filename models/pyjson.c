/* pyjson.c — JSON as Python's json.dumps writes it (see pyjson.h). */
#include "pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s [n] as a JSON string: '"', '\\' and the control characters escaped
 * (\n \r \t \b \f by name, the rest \u00XX), everything else as it is. */
static int put_string(const char *s, size_t n, gc_buf_t *b, gc_err_t *e) {
  if (gc_buf_append(b, "\"", 1, e)) return e->code;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                    : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
    int rc = esc ? gc_buf_append(b, esc, 2, e) : c < 0x20 ? gc_buf_printf(b, e, "\\u%04x", c) : gc_buf_append(b, s + i, 1, e);
    if (rc) return e->code;
  }
  return gc_buf_append(b, "\"", 1, e) ? e->code : GC_OK;
}

/* x as Python's repr(float): the fewest significant digits that read back
 * as x; positional where its decimal exponent is in [-4, 16) (with ".0"
 * where it has no fraction), else d.ddde[+-]XX. */
static int put_float(double x, gc_buf_t *b, gc_err_t *e) {
  if (isnan(x)) return gc_buf_printf(b, e, "NaN") ? e->code : GC_OK;
  if (isinf(x)) return gc_buf_printf(b, e, "%sInfinity", x < 0 ? "-" : "") ? e->code : GC_OK;
  char sci[40];
  for (int p = 1; p <= 17; p++) { /* "%.*e" with p significant digits, the shortest that round-trips */
    snprintf(sci, sizeof sci, "%.*e", p - 1, x);
    if (strtod(sci, NULL) == x) break;
  }
  char digits[24], *m = sci, *ep = strchr(sci, 'e');
  int nd = 0, neg = *m == '-', exp10 = atoi(ep + 1);
  for (m += neg; m < ep; m++)
    if (*m != '.') digits[nd++] = *m;
  while (nd > 1 && digits[nd - 1] == '0') nd--; /* %.*e pads the shortest form with none, but be sure */
  digits[nd] = 0;
  char out[64];
  size_t o = 0;
  if (neg) out[o++] = '-';
  if (exp10 < -4 || exp10 >= 16) { /* d.ddde-XX */
    out[o++] = digits[0];
    if (nd > 1) out[o++] = '.';
    for (int i = 1; i < nd; i++) out[o++] = digits[i];
    o += (size_t)snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
  } else if (exp10 < 0) { /* 0.000ddd */
    out[o++] = '0', out[o++] = '.';
    for (int i = 0; i < -exp10 - 1; i++) out[o++] = '0';
    for (int i = 0; i < nd; i++) out[o++] = digits[i];
  } else { /* ddd.ddd, or ddd000.0 */
    for (int i = 0; i <= exp10 || i < nd; i++) {
      if (i == exp10 + 1) out[o++] = '.';
      out[o++] = i < nd ? digits[i] : '0';
    }
    if (nd <= exp10 + 1) out[o++] = '.', out[o++] = '0';
  }
  return gc_buf_append(b, out, o, e) ? e->code : GC_OK;
}

/* A newline and level * indent spaces (indent >= 0), or sep (one line). */
static int put_break(int indent, int level, const char *sep, gc_buf_t *b, gc_err_t *e) {
  if (indent < 0) return gc_buf_append(b, sep, strlen(sep), e) ? e->code : GC_OK;
  return gc_buf_printf(b, e, "\n%*s", indent * level, "") ? e->code : GC_OK;
}

static int put_value(json_object *v, int indent, int level, gc_buf_t *b, gc_err_t *e) {
  switch (json_object_get_type(v)) {
    case json_type_null: return gc_buf_append(b, "null", 4, e) ? e->code : GC_OK;
    case json_type_boolean:
      return gc_buf_printf(b, e, "%s", json_object_get_boolean(v) ? "true" : "false") ? e->code : GC_OK;
    case json_type_int: return gc_buf_printf(b, e, "%lld", (long long)json_object_get_int64(v)) ? e->code : GC_OK;
    case json_type_double: return put_float(json_object_get_double(v), b, e);
    case json_type_string:
      return put_string(json_object_get_string(v), (size_t)json_object_get_string_len(v), b, e);
    case json_type_array: {
      size_t n = json_object_array_length(v);
      if (gc_buf_append(b, "[", 1, e)) return e->code;
      for (size_t i = 0; i < n; i++)
        if ((i && gc_buf_append(b, ",", 1, e)) || put_break(indent, level + 1, i ? " " : "", b, e) ||
            put_value(json_object_array_get_idx(v, i), indent, level + 1, b, e))
          return e->code;
      if (n && indent >= 0 && put_break(indent, level, "", b, e)) return e->code;
      return gc_buf_append(b, "]", 1, e) ? e->code : GC_OK;
    }
    case json_type_object: {
      int i = 0;
      if (gc_buf_append(b, "{", 1, e)) return e->code;
      json_object_object_foreach(v, key, val) {
        if ((i && gc_buf_append(b, ",", 1, e)) || put_break(indent, level + 1, i ? " " : "", b, e) ||
            put_string(key, strlen(key), b, e) || gc_buf_append(b, ": ", 2, e) ||
            put_value(val, indent, level + 1, b, e))
          return e->code ? e->code : GC_ENOMEM;
        i++;
      }
      if (i && indent >= 0 && put_break(indent, level, "", b, e)) return e->code;
      return gc_buf_append(b, "}", 1, e) ? e->code : GC_OK;
    }
  }
  return GC_OK;
}

int gc_pyjson(json_object *v, int indent, gc_buf_t *b, gc_err_t *e) { return put_value(v, indent, 0, b, e); }

int gc_pyjson_str(const char *s, size_t n, gc_buf_t *b, gc_err_t *e) { return put_string(s, n, b, e); }
