/* expr.c — recursive-descent evaluator for the expression language of
 * expr.h. Expressions are tiny (one declaration line), so they are parsed
 * and evaluated in one pass, with no tree. Overflow is an error, not UB. */
#include "expr.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

int gc_env_set(gc_env_t *env, const char *name, int64_t v, gc_err_t *e) {
  for (int i = 0; i < env->n; i++)
    if (!strcmp(env->name[i], name)) {
      env->value[i] = v;
      return GC_OK;
    }
  if (env->n >= GC_ENV_MAX)
    return gc_err_set(e, GC_EINVAL, "too many names (max %d)", GC_ENV_MAX);
  char q[GC_QUOTE_BUF];
  if (strlen(name) >= GC_NAME_MAX)
    return gc_err_set(e, GC_EINVAL, "name %s is too long", gc_quote(name, GC_QSTR, q, sizeof q));
  strcpy(env->name[env->n], name);
  env->value[env->n++] = v;
  return GC_OK;
}

int gc_env_get(const gc_env_t *env, const char *name, int64_t *v) {
  for (int i = env->n - 1; i >= 0; i--)
    if (!strcmp(env->name[i], name)) {
      *v = env->value[i];
      return 1;
    }
  return 0;
}

typedef struct parser {
  const char *src, *p;
  const gc_env_t *env;
  gc_err_t *e;
  int failed;
  int depth;
} parser_t;

static int64_t fail(parser_t *ps, const char *what) {
  char q[GC_QUOTE_BUF];
  if (!ps->failed)
    gc_err_set(ps->e, GC_EINVAL, "expression %s: %s at offset %d",
               gc_quote(ps->src, GC_QSTR, q, sizeof q), what, (int)(ps->p - ps->src));
  ps->failed = 1;
  return 0;
}

static void skip_ws(parser_t *ps) {
  while (isspace((unsigned char)*ps->p)) ps->p++;
}

static int accept(parser_t *ps, const char *tok) {
  skip_ws(ps);
  size_t n = strlen(tok);
  if (strncmp(ps->p, tok, n)) return 0;
  /* '<' must not match the start of '<=', '!' not '!=', '&' not '&&' */
  if (n == 1 && (tok[0] == '<' || tok[0] == '>' || tok[0] == '!' ||
                 tok[0] == '=') && ps->p[1] == '=')
    return 0;
  ps->p += n;
  return 1;
}

static int64_t parse_or(parser_t *ps);

static int64_t checked(parser_t *ps, int ovf, int64_t r) {
  return ovf ? fail(ps, "integer overflow") : r;
}

static int64_t apply_fn(parser_t *ps, const char *fn, int64_t a, int64_t b) {
  if (!strcmp(fn, "min")) return a < b ? a : b;
  if (!strcmp(fn, "max")) return a > b ? a : b;
  if (b == 0) return fail(ps, "division by zero in cdiv");
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q; /* cdiv */
}

static int64_t parse_call(parser_t *ps, const char *fn) {
  if (!accept(ps, "(")) return fail(ps, "expected '(' after function name");
  int64_t a = parse_or(ps);
  if (!accept(ps, ",")) return fail(ps, "expected ','");
  int64_t b = parse_or(ps);
  if (!accept(ps, ")")) return fail(ps, "expected ')'");
  return ps->failed ? 0 : apply_fn(ps, fn, a, b);
}

static int64_t parse_primary(parser_t *ps) {
  skip_ws(ps);
  if (++ps->depth > 64) return fail(ps, "nested too deeply");
  int64_t r = 0;
  const char *s = ps->p;
  if (accept(ps, "(")) {
    r = parse_or(ps);
    if (!accept(ps, ")")) r = fail(ps, "expected ')'");
  } else if (isdigit((unsigned char)*s)) {
    while (isdigit((unsigned char)*ps->p)) {
      int d = *ps->p++ - '0';
      if (__builtin_mul_overflow(r, 10, &r) || __builtin_add_overflow(r, d, &r))
        return fail(ps, "literal too large");
    }
  } else if (isalpha((unsigned char)*s) || *s == '_') {
    char name[GC_NAME_MAX];
    size_t n = 0;
    while (isalnum((unsigned char)*ps->p) || *ps->p == '_') {
      if (n + 1 >= sizeof name) return fail(ps, "name too long");
      name[n++] = *ps->p++;
    }
    name[n] = 0;
    if (!strcmp(name, "cdiv") || !strcmp(name, "min") || !strcmp(name, "max"))
      r = parse_call(ps, name);
    else if (!gc_env_get(ps->env, name, &r)) {
      ps->p = s;
      char msg[GC_QUOTE_BUF + 16], q[GC_QUOTE_BUF];
      snprintf(msg, sizeof msg, "unknown name %s", gc_quote(name, GC_QSTR, q, sizeof q));
      r = fail(ps, msg);
    }
  } else {
    r = fail(ps, *s ? "unexpected character" : "unexpected end");
  }
  ps->depth--;
  return r;
}

static int64_t parse_unary(parser_t *ps) {
  if (accept(ps, "-")) {
    int64_t v = parse_unary(ps);
    return checked(ps, v == INT64_MIN, -v);
  }
  if (accept(ps, "!")) return !parse_unary(ps);
  if (accept(ps, "+")) return parse_unary(ps);
  return parse_primary(ps);
}

static int64_t parse_mul(parser_t *ps) {
  int64_t a = parse_unary(ps), r;
  for (;;) {
    if (accept(ps, "*")) {
      int64_t b = parse_unary(ps);
      int ovf = __builtin_mul_overflow(a, b, &r);
      a = checked(ps, ovf, r);
    } else if (accept(ps, "/") || accept(ps, "%")) {
      char op = ps->p[-1];
      int64_t b = parse_unary(ps);
      if (ps->failed) return 0;
      if (b == 0) return fail(ps, "division by zero");
      if (a == INT64_MIN && b == -1) return fail(ps, "integer overflow");
      a = op == '/' ? a / b : a % b;
    } else {
      return a;
    }
  }
}

static int64_t parse_add(parser_t *ps) {
  int64_t a = parse_mul(ps), r;
  for (;;) {
    if (accept(ps, "+")) {
      int64_t b = parse_mul(ps);
      int ovf = __builtin_add_overflow(a, b, &r);
      a = checked(ps, ovf, r);
    } else if (accept(ps, "-")) {
      int64_t b = parse_mul(ps);
      int ovf = __builtin_sub_overflow(a, b, &r);
      a = checked(ps, ovf, r);
    } else {
      return a;
    }
  }
}

static int64_t parse_cmp(parser_t *ps) {
  int64_t a = parse_add(ps);
  for (;;) {
    if (accept(ps, "<=")) a = a <= parse_add(ps);
    else if (accept(ps, ">=")) a = a >= parse_add(ps);
    else if (accept(ps, "<")) a = a < parse_add(ps);
    else if (accept(ps, ">")) a = a > parse_add(ps);
    else if (accept(ps, "==")) a = a == parse_add(ps);
    else if (accept(ps, "!=")) a = a != parse_add(ps);
    else return a;
  }
}

static int64_t parse_and(parser_t *ps) {
  int64_t a = parse_cmp(ps);
  while (accept(ps, "&&")) {
    int64_t b = parse_cmp(ps);
    a = a && b;
  }
  return a;
}

static int64_t parse_or(parser_t *ps) {
  int64_t a = parse_and(ps);
  while (accept(ps, "||")) {
    int64_t b = parse_and(ps);
    a = a || b;
  }
  return a;
}

int gc_expr_eval(const char *src, const gc_env_t *env, int64_t *out,
                 gc_err_t *e) {
  parser_t ps = {.src = src, .p = src, .env = env, .e = e};
  int64_t v = parse_or(&ps);
  skip_ws(&ps);
  if (!ps.failed && *ps.p) fail(&ps, "unexpected text");
  if (ps.failed) return GC_EINVAL;
  *out = v;
  return GC_OK;
}

/* "'TEXT': " + what (whose one %s is arg): TEXT is quoted, as it may come
 * from a template or a bundle. */
static int text_err(gc_err_t *e, const char *text, const char *what, const char *arg) {
  char q[GC_QUOTE_BUF], msg[256];
  snprintf(msg, sizeof msg, what, arg);
  return gc_err_set(e, GC_EINVAL, "%s: %s", gc_quote(text, GC_QSTR, q, sizeof q), msg);
}

static int operand_end(char c) { return isalnum((unsigned char)c) || c == '_' || c == ')'; }

int gc_expr_evaln(const char *text, const gc_env_t *env, int64_t *out, int max, int *count,
                  gc_err_t *e) {
  char part[GC_EXPR_PARTS][GC_EXPR_TEXT];
  int np = 0, depth = 0;
  size_t len = 0;
  char prev = 0; /* last non-space character of the current part */
  static const char *const nums[] = {"none", "one", "two", "three", "four", "five", "six", "seven", "eight"};
  if (max < 1 || max > GC_EXPR_PARTS) return text_err(e, text, "bad expression count", "");
  *count = 0;
  memset(part, 0, sizeof part);
  for (const char *p = text;; p++) {
    int end = !*p || (*p == ';' && depth == 0);
    if (!end && isspace((unsigned char)*p) && depth == 0 && operand_end(prev)) {
      const char *q = p;
      while (isspace((unsigned char)*q)) q++;
      if (isalnum((unsigned char)*q) || *q == '_' || (*q == '(' && prev == ')'))
        end = 1;
    }
    if (end) {
      if (len) {
        if (np == max)
          return text_err(e, text, "more than %s expressions", nums[max]);
        part[np][len] = 0;
        np++;
      }
      len = 0;
      prev = 0;
      if (!*p) break;
      continue;
    }
    if (*p == '(') depth++;
    if (*p == ')') depth--;
    if (np == max && !isspace((unsigned char)*p))
      return text_err(e, text, "more than %s expressions", nums[max]);
    if (np == max) continue;
    if (len + 1 >= sizeof part[0])
      return text_err(e, text, "expression too long", "");
    if (len || !isspace((unsigned char)*p)) part[np][len++] = *p;
    if (!isspace((unsigned char)*p)) prev = *p;
  }
  for (int i = 0; i < np; i++)
    if (gc_expr_eval(part[i], env, &out[i], e)) return e->code;
  *count = np;
  return GC_OK;
}

int gc_expr_eval3(const char *text, const gc_env_t *env, int64_t out[3],
                  gc_err_t *e) {
  int n;
  out[0] = out[1] = out[2] = 1;
  return gc_expr_evaln(text, env, out, 3, &n, e);
}

int gc_env_parse(gc_env_t *env, const char *text, gc_err_t *e) {
  const char *p = text;
  while (*p) {
    const char *eq = strchr(p, '='), *comma = strchr(p, ',');
    if (!comma) comma = p + strlen(p);
    if (!eq || eq > comma || eq == p || eq - p >= GC_NAME_MAX)
      return text_err(e, text, "expected NAME=VALUE pairs", "");
    char name[GC_NAME_MAX], num[32];
    snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
    if (comma - eq - 1 <= 0 || comma - eq - 1 >= (long)sizeof num)
      return text_err(e, text, "bad value for %s", name);
    snprintf(num, sizeof num, "%.*s", (int)(comma - eq - 1), eq + 1);
    int64_t v;
    if (gc_parse_i64(num, &v))
      return text_err(e, text, "%s is not an integer", name);
    if (gc_env_set(env, name, v, e)) return e->code;
    p = *comma ? comma + 1 : comma;
  }
  return GC_OK;
}
