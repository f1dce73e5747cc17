/* problem.c — ops, dtypes and the canonical problem key; workload files. */
#include "problem.h"

#include "../base/expr.h"
#include "../base/quant.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char gc_dim_letters[GC_NDIMS + 1] = "mnkhgd";

int64_t *gc_problem_dim(gc_problem_t *p, int i) {
  int64_t *v[GC_NDIMS] = {&p->m, &p->n, &p->k, &p->h, &p->g, &p->d};
  return v[i];
}

int64_t gc_problem_get(const gc_problem_t *p, int i) {
  const int64_t v[GC_NDIMS] = {p->m, p->n, p->k, p->h, p->g, p->d};
  return v[i];
}

static const char *const dt_names[GC_DT_COUNT] = {"f32", "f16",  "bf16", "i32",  "f64",
                                                   "q8_0", "q4_0", "q4_k", "q5_k", "q6_k",
                                                   "q8_0r", "q4_0r", "q4_kr", "q6_kr"};

const char *gc_dtype_name(gc_dtype_t t) {
  return (unsigned)t < GC_DT_COUNT ? dt_names[t] : "?";
}

int gc_dtype_is_block(gc_dtype_t t) { return t >= GC_DT_Q8_0 && t < GC_DT_COUNT; }

int gc_dtype_is_device_layout(gc_dtype_t t) { return t >= GC_DT_Q8_0R && t < GC_DT_COUNT; }

int gc_dtype_has_min(gc_dtype_t t) { return gc_dtype_is_block(t) && gc_quant_format(gc_dtype_qtype(t))->min; }

/* The block dtypes follow base/quant.h's numbering, two further on. */
int gc_dtype_qtype(gc_dtype_t t) {
  if (gc_dtype_is_block(t)) return (int)t - GC_DT_Q8_0 + GC_QT_Q8_0;
  return t <= GC_DT_BF16 ? (int)t : -1;
}

gc_dtype_t gc_dtype_from_qtype(int q) {
  if (q >= GC_QT_Q8_0 && q < GC_QT_COUNT) return (gc_dtype_t)(q - GC_QT_Q8_0 + GC_DT_Q8_0);
  return q >= 0 && q <= GC_QT_BF16 ? (gc_dtype_t)q : GC_DT_COUNT;
}

size_t gc_dtype_size(gc_dtype_t t) {
  if (gc_dtype_is_block(t)) return (size_t)gc_quant_format(gc_dtype_qtype(t))->bytes;
  return t == GC_DT_F64 ? 8 : (t == GC_DT_F32 || t == GC_DT_I32) ? 4 : 2;
}

int64_t gc_dtype_block(gc_dtype_t t) {
  return gc_dtype_is_block(t) ? gc_quant_format(gc_dtype_qtype(t))->block : 1;
}

size_t gc_dtype_bytes(gc_dtype_t t, int64_t n) {
  int64_t b = gc_dtype_block(t);
  return n <= 0 ? 0 : (size_t)((n + b - 1) / b) * gc_dtype_size(t);
}

int64_t gc_dtype_elem_at(gc_dtype_t t, uint64_t off) {
  return (int64_t)(off / gc_dtype_size(t)) * gc_dtype_block(t);
}

/* Position 1 (B) may name a block format; 0 and 2 only f32, f16, bf16. */
static int dtype_one(const char *s, size_t n, int pos, gc_dtype_t *t) {
  for (int i = 0; i < GC_DT_COUNT; i++)
    if ((i <= GC_DT_BF16 || (pos == 1 && gc_dtype_is_block((gc_dtype_t)i))) &&
        strlen(dt_names[i]) == n && !strncmp(s, dt_names[i], n)) {
      *t = (gc_dtype_t)i;
      return 1;
    }
  return 0;
}

int gc_dtypes_parse(const char *s, gc_dtype_t *ta, gc_dtype_t *tb,
                    gc_dtype_t *tc, gc_err_t *e) {
  gc_dtype_t t[3];
  const char *p = s;
  char q[GC_QUOTE_BUF];
  int n = 0;
  for (;;) {
    const char *c = strchr(p, ':');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (n == 3 || !dtype_one(p, len, c || n ? n : -1, &t[n]))
      return gc_err_set(e, GC_EINVAL,
                        "unknown dtype %s (expected f32, f16, bf16 or A:B:C "
                        "such as f32:f16:f32; B, the weights, may be a block "
                        "format: f16:q4_k:f16 with q8_0, q4_0, q4_k, q5_k, q6_k, q8_0r, q4_0r, q4_kr, q6_kr)",
                        gc_quote(s, GC_QSTR, q, sizeof q));
    n++;
    if (!c) break;
    p = c + 1;
  }
  if (n == 2)
    return gc_err_set(e, GC_EINVAL, "dtype %s: give one dtype or three (A:B:C)",
                      gc_quote(s, GC_QSTR, q, sizeof q));
  *ta = t[0];
  *tb = n == 3 ? t[1] : t[0];
  *tc = n == 3 ? t[2] : t[0];
  return GC_OK;
}

void gc_dtypes_format(gc_dtype_t ta, gc_dtype_t tb, gc_dtype_t tc, char *out) {
  snprintf(out, 16, "%s:%s:%s", gc_dtype_name(ta), gc_dtype_name(tb),
           gc_dtype_name(tc));
}

void gc_problem_key(const gc_problem_t *p, char *out) {
  char dt[16];
  gc_dtypes_format(p->ta, p->tb, p->tc, dt);
  int n = snprintf(out, GC_PROBLEM_KEY, "%s %s", p->op, dt);
  const gc_op_t *d = gc_op_find(p->op);
  const char *dims = d ? gc_op_dims(d) : "mnk", *opt = d ? gc_op_opt_dims(d) : "";
  for (int i = 0; i < GC_NDIMS; i++)
    if ((strchr(dims, gc_dim_letters[i]) || (strchr(opt, gc_dim_letters[i]) && gc_problem_get(p, i))) &&
        n < GC_PROBLEM_KEY)
      n += snprintf(out + n, (size_t)(GC_PROBLEM_KEY - n), " %c=%lld", gc_dim_letters[i],
                    (long long)gc_problem_get(p, i));
}

int gc_problem_check(const gc_problem_t *p, gc_err_t *e) {
  const gc_op_t *d = gc_op_find(p->op);
  if (!d) return gc_op_check_name(p->op, e);
  for (int i = 0; i < GC_NDIMS; i++) {
    int64_t v = gc_problem_get(p, i);
    char c = gc_dim_letters[i];
    int used = strchr(gc_op_dims(d), c) != NULL || (strchr(gc_op_opt_dims(d), c) && v != 0);
    if (used && (v < 1 || v >= (1LL << 31)))
      return gc_err_set(e, GC_EINVAL, "%s: %c=%lld is out of range [1, 2^31)", p->op, c,
                        (long long)v);
    if (!used && v != 0) return gc_err_set(e, GC_EINVAL, "%s has no %c dimension", p->op, c);
  }
  if (gc_dtype_is_block(p->ta) || gc_dtype_is_block(p->tc))
    return gc_err_set(e, GC_EINVAL, "%s: only B (the weights) may be in a block format", p->op);
  if (gc_dtype_is_block(p->tb) && gc_op_check_blocks(p, e)) return e->code;
  if (p->h && p->g && p->h % p->g)
    return gc_err_set(e, GC_EINVAL, "%s: h=%lld is not a multiple of g=%lld", p->op,
                      (long long)p->h, (long long)p->g);
  if (!strcmp(p->op, "concat") && p->k >= p->n)
    return gc_err_set(e, GC_EINVAL, "concat: k=%lld leaves no columns of Y in n=%lld", (long long)p->k,
                      (long long)p->n);
  if (!strcmp(p->op, "attention") && p->k && p->m != 1)
    return gc_err_set(e, GC_EINVAL, "attention: k=%lld (at most k keys) is for a decode, m=1, not m=%lld",
                      (long long)p->k, (long long)p->m);
  if (strstr(p->op, "rope_kv") && p->d % 2) /* rope_kv and the ops that fold a step into it */
    return gc_err_set(e, GC_EINVAL, "%s: d=%lld is odd", p->op, (long long)p->d);
  if (p->n && p->h) { /* a GEMM whose columns are heads (rmsnorm_gemm_rope_kv) */
    if (p->d % 2) return gc_err_set(e, GC_EINVAL, "%s: d=%lld is odd", p->op, (long long)p->d);
    if (p->n != (p->h + 2 * p->g) * p->d)
      return gc_err_set(e, GC_EINVAL, "%s: n=%lld is not (h + 2g)·d = %lld", p->op, (long long)p->n,
                        (long long)((p->h + 2 * p->g) * p->d));
  }
  return GC_OK;
}

int gc_problem_same(const gc_problem_t *a, const gc_problem_t *b) {
  return !strncmp(a->op, b->op, sizeof a->op) && a->ta == b->ta && a->tb == b->tb && a->tc == b->tc &&
         a->m == b->m && a->n == b->n && a->k == b->k && a->h == b->h && a->g == b->g && a->d == b->d;
}

int gc_problems_push(gc_problems_t *l, const gc_problem_t *p, gc_err_t *e) {
  for (int i = 0; i < l->n; i++)
    if (gc_problem_same(&l->v[i], p)) return GC_OK;
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 16;
    gc_problem_t *v = gc_realloc(l->v, (size_t)cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *p;
  return GC_OK;
}

void gc_problems_free(gc_problems_t *l) {
  free(l->v);
  memset(l, 0, sizeof *l);
}

int gc_needs_push(gc_needs_t *l, const gc_problem_t *p, int64_t lo, gc_err_t *e) {
  for (int i = 0; i < l->n; i++)
    if (l->v[i].lo == lo && gc_problem_same(&l->v[i].p, p)) return GC_OK;
  if (l->n == l->cap) {
    int cap = l->cap ? l->cap * 2 : 16;
    gc_need_t *v = gc_realloc(l->v, (size_t)cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (gc_need_t){*p, lo};
  return GC_OK;
}

void gc_needs_free(gc_needs_t *l) {
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* Parse "1,16,128" into at most 64 values. */
static int parse_list(const char *s, char dim, int64_t *v, int *n, gc_err_t *e) {
  *n = 0;
  if (!s) return gc_err_set(e, GC_EINVAL, "missing --%c", dim);
  char buf[512];
  if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf)
    return gc_err_set(e, GC_EINVAL, "--%c list too long", dim);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t;
       t = strtok_r(NULL, ",", &save)) {
    if (*n == 64) return gc_err_set(e, GC_EINVAL, "--%c: more than 64 values", dim);
    char q[GC_QUOTE_BUF];
    if (gc_parse_i64(t, &v[*n]))
      return gc_err_set(e, GC_EINVAL, "--%c: %s is not an integer", dim,
                        gc_quote(t, GC_QSTR, q, sizeof q));
    (*n)++;
  }
  if (!*n) return gc_err_set(e, GC_EINVAL, "--%c: empty list", dim);
  return GC_OK;
}

/* Every combination of the lists, innermost dim last. */
static int expand_rec(gc_problems_t *l, gc_problem_t *p, int64_t v[GC_NDIMS][64],
                      const int cnt[GC_NDIMS], int i, gc_err_t *e) {
  if (i == GC_NDIMS) return gc_problem_check(p, e) || gc_problems_push(l, p, e) ? e->code : GC_OK;
  for (int j = 0; j < cnt[i]; j++) {
    *gc_problem_dim(p, i) = v[i][j];
    if (expand_rec(l, p, v, cnt, i + 1, e)) return e->code;
  }
  return GC_OK;
}

int gc_problems_expand(gc_problems_t *l, const char *op, const char *dtypes,
                       const char *const dims[GC_NDIMS], gc_err_t *e) {
  gc_problem_t p = {0};
  if (!op) return gc_err_set(e, GC_EINVAL, "missing --op");
  if (strlen(op) >= GC_OP_NAME || !gc_op_find(op)) {
    snprintf(p.op, sizeof p.op, "%.*s", GC_OP_NAME - 1, op);
    return gc_problem_check(&p, e);
  }
  strcpy(p.op, op);
  if (gc_dtypes_parse(dtypes ? dtypes : "f32", &p.ta, &p.tb, &p.tc, e)) return e->code;
  const char *used = gc_op_dims(gc_op_find(op)), *opt = gc_op_opt_dims(gc_op_find(op));
  int64_t v[GC_NDIMS][64];
  int cnt[GC_NDIMS];
  for (int i = 0; i < GC_NDIMS; i++) {
    char c = gc_dim_letters[i];
    cnt[i] = 1;
    v[i][0] = 0;
    if (strchr(used, c) || (strchr(opt, c) && dims[i])) {
      if (parse_list(dims[i], c, v[i], &cnt[i], e)) return e->code;
    } else if (dims[i]) {
      return gc_err_set(e, GC_EINVAL, "%s has no %c dimension", op, c);
    }
  }
  return expand_rec(l, &p, v, cnt, 0, e);
}

static int load_line(gc_problems_t *l, char *line, gc_err_t *e) {
  char *tok[10];
  int nt = 0;
  for (char *save = NULL, *t = strtok_r(line, " \t\r", &save); t;
       t = strtok_r(NULL, " \t\r", &save)) {
    if (nt == 10) return gc_err_set(e, GC_EINVAL, "too many fields");
    tok[nt++] = t;
  }
  if (nt < 2) return gc_err_set(e, GC_EINVAL, "expected 'OP DTYPES m=.. n=.. k=..'");
  const char *dim[GC_NDIMS] = {0};
  for (int i = 2; i < nt; i++) {
    const char *c = tok[i][0] ? strchr(gc_dim_letters, tok[i][0]) : NULL;
    char q[GC_QUOTE_BUF];
    if (!c || tok[i][1] != '=')
      return gc_err_set(e, GC_EINVAL, "%s: expected m=, n=, k=, h=, g= or d=",
                        gc_quote(tok[i], GC_QSTR, q, sizeof q));
    dim[c - gc_dim_letters] = tok[i] + 2;
  }
  return gc_problems_expand(l, tok[0], tok[1], dim, e);
}

int gc_problems_load(gc_problems_t *l, const char *path, gc_err_t *e) {
  char *text;
  if (gc_read_file(path, 1 << 20, &text, NULL, e)) return e->code;
  int lineno = 0, rc = GC_OK;
  for (char *line = text; line && !rc;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    if (strspn(line, " \t\r") != strlen(line) && (rc = load_line(l, line, e)))
      gc_err_prefix(e, "%s:%d", path, lineno);
    line = nl ? nl + 1 : NULL;
  }
  free(text);
  if (!rc && l->n == 0) rc = gc_err_set(e, GC_EINVAL, "%s: no problems in workload", path);
  return rc;
}

int gc_env_set_sms(gc_env_t *env, int64_t sms, gc_err_t *e) {
  return sms > 0 ? gc_env_set(env, "SMS", sms, e) : GC_OK;
}

int gc_env_set_dims(gc_env_t *env, const gc_problem_t *p, gc_err_t *e) {
  static const char *const names[GC_NDIMS] = {"M", "N", "K", "H", "G", "D"};
  for (int i = 0; i < GC_NDIMS; i++)
    if (gc_env_set(env, names[i], gc_problem_get(p, i), e)) return e->code;
  return GC_OK;
}
