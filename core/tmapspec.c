/* tmapspec.c — parsing and evaluating tensor-map declarations. */
#include "tmapspec.h"

#include <ctype.h>
#include <string.h>

/* Split "BUF rest" into buf and the expressions; GC_EINVAL when BUF is no
 * identifier of at most GC_TMAP_BUF - 1 characters. */
static int split_buf(const char *line, char buf[GC_TMAP_BUF], const char **rest, gc_err_t *e) {
  const char *p = line + strspn(line, " \t");
  size_t n = 0;
  while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
  if (!n || isdigit((unsigned char)p[0]) || (p[n] && !isspace((unsigned char)p[n])))
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: expected a buffer name first", GC_QUOTED(line));
  if (n >= GC_TMAP_BUF)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: buffer name too long", GC_QUOTED(line));
  memcpy(buf, p, n);
  buf[n] = 0;
  *rest = p + n;
  return GC_OK;
}

/* The five values of line into s (no range checks); *on = 0 when its
 * "if COND" is false (s is then not filled). */
static int eval_line(const char *line, const gc_env_t *env, gc_tmap_spec_t *s, int *on,
                     gc_err_t *e) {
  const char *rest = line;
  char body[GC_TMAP_LINE];
  int64_t v[5], cond = 1;
  int n = 0;
  memset(s, 0, sizeof *s);
  *on = 1;
  if (split_buf(line, s->buf, &rest, e)) return e->code;
  snprintf(body, sizeof body, "%s", rest);
  char *kw = strstr(body, " if ");
  if (kw) {
    *kw = 0;
    if (gc_expr_eval(kw + 4, env, &cond, e)) return gc_err_prefix(e, "@tensormap");
  }
  if (gc_expr_evaln(body, env, v, 5, &n, e)) return gc_err_prefix(e, "@tensormap");
  if (n != 5)
    return gc_err_set(e, GC_EINVAL,
                      "@tensormap %s: expected BUF ROWS COLS BOX_ROWS BOX_COLS SWIZZLE "
                      "(five expressions after the buffer, got %d)", GC_QUOTED(line), n);
  s->rows = v[0], s->cols = v[1], s->box_rows = v[2], s->box_cols = v[3], s->swizzle = v[4];
  *on = cond != 0;
  return GC_OK;
}

int gc_tmap_spec_check(const char *line, const gc_env_t *env, gc_err_t *e) {
  gc_tmap_spec_t s;
  gc_err_t tmp = {0};
  int on;
  if (!eval_line(line, env, &s, &on, &tmp)) return GC_OK;
  if (strstr(tmp.msg, "division by zero") || strstr(tmp.msg, "overflow")) return GC_OK;
  return gc_err_set(e, tmp.code, "%s", tmp.msg);
}

static int check_range(const char *line, const gc_tmap_spec_t *s, gc_err_t *e) {
  if (s->rows < 1 || s->cols < 1)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: matrix %lldx%lld is empty", GC_QUOTED(line),
                      (long long)s->rows, (long long)s->cols);
  if (s->box_rows < 1 || s->box_rows > 256 || s->box_cols < 1 || s->box_cols > 256)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: box %lldx%lld: each side must be 1..256",
                      GC_QUOTED(line), (long long)s->box_rows, (long long)s->box_cols);
  if (s->swizzle != 0 && s->swizzle != 32 && s->swizzle != 64 && s->swizzle != 128)
    return gc_err_set(e, GC_EINVAL, "@tensormap %s: swizzle %lld: must be 0, 32, 64 or 128",
                      GC_QUOTED(line), (long long)s->swizzle);
  return GC_OK;
}

int gc_tmap_specs_eval(const char *text, const gc_env_t *env, gc_tmap_spec_t *out, int *n,
                       gc_err_t *e) {
  *n = 0;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    char line[GC_TMAP_LINE];
    if (len >= sizeof line) return gc_err_set(e, GC_EINVAL, "@tensormap line too long");
    memcpy(line, p, len);
    line[len] = 0;
    p += len + (nl != NULL);
    if (!line[strspn(line, " \t")]) continue;
    if (*n == GC_TMAPS_MAX)
      return gc_err_set(e, GC_EINVAL, "more than %d @tensormap declarations", GC_TMAPS_MAX);
    int on;
    if (eval_line(line, env, &out[*n], &on, e)) return e->code;
    if (!on) continue;
    if (check_range(line, &out[*n], e)) return e->code;
    (*n)++;
  }
  return GC_OK;
}
