/* problem.c — ops, dtypes and the canonical problem key; workload files. */
#include "problem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const gc_op_desc_t ops[] = {
    {"gemm", "mnk", "C[M,N] = A[M,K] * B[N,K]^T, fp32 accumulation"},
    {"gemm_swiglu", "mnk",
     "C[M,N] = silu(A W[0:N]^T) * (A W[N:2N]^T), W is [2N,K] (gate then up)"},
    {"rmsnorm", "mn", "Y[M,N] = X / sqrt(mean(X^2) + eps) * W[N], eps 1e-5"},
};

const gc_op_desc_t *gc_op_find(const char *name) {
  for (size_t i = 0; i < GC_ARRAY_LEN(ops); i++)
    if (!strcmp(ops[i].name, name)) return &ops[i];
  return NULL;
}

const gc_op_desc_t *gc_op_list(int *n) {
  *n = (int)GC_ARRAY_LEN(ops);
  return ops;
}

static const char *const dt_names[] = {"f32", "f16", "bf16"};

const char *gc_dtype_name(gc_dtype_t t) {
  return (unsigned)t < 3 ? dt_names[t] : "?";
}

size_t gc_dtype_size(gc_dtype_t t) { return t == GC_DT_F32 ? 4 : 2; }

static int dtype_one(const char *s, size_t n, gc_dtype_t *t) {
  for (int i = 0; i < 3; i++)
    if (strlen(dt_names[i]) == n && !strncmp(s, dt_names[i], n)) {
      *t = (gc_dtype_t)i;
      return 1;
    }
  return 0;
}

int gc_dtypes_parse(const char *s, gc_dtype_t *ta, gc_dtype_t *tb,
                    gc_dtype_t *tc, gc_err_t *e) {
  gc_dtype_t t[3];
  const char *p = s;
  int n = 0;
  for (;;) {
    const char *c = strchr(p, ':');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (n == 3 || !dtype_one(p, len, &t[n]))
      return gc_err_set(e, GC_EINVAL,
                        "unknown dtype '%s' (expected f32, f16, bf16 or A:B:C "
                        "such as f32:f16:f32)",
                        s);
    n++;
    if (!c) break;
    p = c + 1;
  }
  if (n == 2)
    return gc_err_set(e, GC_EINVAL, "dtype '%s': give one dtype or three (A:B:C)", s);
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
  const gc_op_desc_t *d = gc_op_find(p->op);
  const char *dims = d ? d->dims : "mnk";
  const int64_t v[3] = {p->m, p->n, p->k};
  for (int i = 0; i < 3; i++)
    if (strchr(dims, "mnk"[i]) && n < GC_PROBLEM_KEY)
      n += snprintf(out + n, (size_t)(GC_PROBLEM_KEY - n), " %c=%lld", "mnk"[i],
                    (long long)v[i]);
}

int gc_problem_check(const gc_problem_t *p, gc_err_t *e) {
  const gc_op_desc_t *d = gc_op_find(p->op);
  if (!d) {
    int n;
    const gc_op_desc_t *l = gc_op_list(&n);
    char names[128] = "";
    for (int i = 0; i < n; i++)
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
               i ? ", " : "", l[i].name);
    return gc_err_set(e, GC_EINVAL, "unknown op '%s' (known: %s)", p->op, names);
  }
  const int64_t v[3] = {p->m, p->n, p->k};
  for (int i = 0; i < 3; i++) {
    int used = strchr(d->dims, "mnk"[i]) != NULL;
    if (used && (v[i] < 1 || v[i] >= (1LL << 31)))
      return gc_err_set(e, GC_EINVAL, "%s: %c=%lld is out of range [1, 2^31)",
                        p->op, "mnk"[i], (long long)v[i]);
    if (!used && v[i] != 0)
      return gc_err_set(e, GC_EINVAL, "%s has no %c dimension", p->op, "mnk"[i]);
  }
  return GC_OK;
}

int gc_problems_push(gc_problems_t *l, const gc_problem_t *p, gc_err_t *e) {
  for (int i = 0; i < l->n; i++)
    if (!memcmp(&l->v[i], p, sizeof *p)) return GC_OK;
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
    if (gc_parse_i64(t, &v[*n]))
      return gc_err_set(e, GC_EINVAL, "--%c: '%s' is not an integer", dim, t);
    (*n)++;
  }
  if (!*n) return gc_err_set(e, GC_EINVAL, "--%c: empty list", dim);
  return GC_OK;
}

int gc_problems_expand(gc_problems_t *l, const char *op, const char *dtypes,
                       const char *ms, const char *ns, const char *ks,
                       gc_err_t *e) {
  gc_problem_t p = {0};
  if (!op) return gc_err_set(e, GC_EINVAL, "missing --op");
  if (strlen(op) >= GC_OP_NAME || !gc_op_find(op)) {
    snprintf(p.op, sizeof p.op, "%.*s", GC_OP_NAME - 1, op);
    return gc_problem_check(&p, e);
  }
  strcpy(p.op, op);
  if (gc_dtypes_parse(dtypes ? dtypes : "f32", &p.ta, &p.tb, &p.tc, e))
    return e->code;
  const char *dims = gc_op_find(op)->dims;
  const char *src[3] = {ms, ns, ks};
  int64_t v[3][64];
  int cnt[3];
  for (int i = 0; i < 3; i++) {
    cnt[i] = 1;
    v[i][0] = 0;
    if (strchr(dims, "mnk"[i])) {
      if (parse_list(src[i], "mnk"[i], v[i], &cnt[i], e)) return e->code;
    } else if (src[i]) {
      return gc_err_set(e, GC_EINVAL, "%s has no %c dimension", op, "mnk"[i]);
    }
  }
  for (int a = 0; a < cnt[0]; a++)
    for (int b = 0; b < cnt[1]; b++)
      for (int c = 0; c < cnt[2]; c++) {
        p.m = v[0][a];
        p.n = v[1][b];
        p.k = v[2][c];
        if (gc_problem_check(&p, e) || gc_problems_push(l, &p, e)) return e->code;
      }
  return GC_OK;
}

static int load_line(gc_problems_t *l, char *line, gc_err_t *e) {
  char *tok[8];
  int nt = 0;
  for (char *save = NULL, *t = strtok_r(line, " \t\r", &save); t;
       t = strtok_r(NULL, " \t\r", &save)) {
    if (nt == 8) return gc_err_set(e, GC_EINVAL, "too many fields");
    tok[nt++] = t;
  }
  if (nt < 2) return gc_err_set(e, GC_EINVAL, "expected 'OP DTYPES m=.. n=.. k=..'");
  const char *dim[3] = {NULL, NULL, NULL};
  for (int i = 2; i < nt; i++) {
    const char *c = strchr("mnk", tok[i][0]);
    if (!c || !tok[i][0] || tok[i][1] != '=')
      return gc_err_set(e, GC_EINVAL, "'%s': expected m=, n= or k=", tok[i]);
    dim[c - "mnk"] = tok[i] + 2;
  }
  return gc_problems_expand(l, tok[0], tok[1], dim[0], dim[1], dim[2], e);
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
