/* template.c — parsing template declarations, walking the parameter
 * space, and expanding a variant into source. The declaration block is the
 * template's first block comment; lines there starting with '@' declare. */
#include "template.h"

#include "defaults.h"

#include <ctype.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "../base/embed.h"

/* ---- parsing -------------------------------------------------------- */

typedef struct line_ctx {
  const char *path;
  int lineno;
  gc_err_t *e;
} line_ctx_t;

static int perr(line_ctx_t *c, const char *fmt, const char *arg) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, arg);
  return gc_err_set(c->e, GC_EINVAL, "%s:%d: %s", c->path, c->lineno, msg);
}

/* perr with arg, text of the template, quoted (gc_quote). */
static int perrq(line_ctx_t *c, const char *fmt, const char *arg) {
  char q[GC_QUOTE_BUF];
  return perr(c, fmt, gc_quote(arg, GC_QSTR, q, sizeof q));
}

/* Split "body -- doc" in place; returns doc (possibly ""). */
static char *split_doc(char *s) {
  char *d = strstr(s, " -- ");
  if (!d) return s + strlen(s);
  *d = 0;
  return d + 4;
}

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
  size_t i = strspn(s, " \t");
  if (i) memmove(s, s + i, strlen(s + i) + 1);
}

static int copy_word(line_ctx_t *c, char *dst, size_t n, const char *src,
                     const char *what) {
  if (!*src || strchr(src, ' ')) return perr(c, "%s takes one word", what);
  if (strlen(src) >= n) return perr(c, "%s is too long", what);
  strcpy(dst, src);
  return GC_OK;
}

/* @op gemm [gemm_add ...]: ops that share one source (and argument list
 * but for what the op adds), told apart by GC_OP_<NAME>. */
static int parse_ops(line_ctx_t *c, gc_template_t *t, char *rest) {
  for (char *save = NULL, *w = strtok_r(rest, " \t", &save); w;
       w = strtok_r(NULL, " \t", &save)) {
    if (t->nops == GC_TPL_OPS) return perr(c, "@op lists too many ops%s", "");
    if (!gc_op_find(w)) return perrq(c, "unknown op %s", w);
    if (copy_word(c, t->ops[t->nops], sizeof t->ops[0], w, "@op")) return c->e->code;
    t->nops++;
  }
  if (!t->nops) return perr(c, "@op names no op%s", "");
  strcpy(t->op, t->ops[0]);
  return GC_OK;
}

static int parse_dtypes(line_ctx_t *c, gc_template_t *t, char *rest) {
  for (char *save = NULL, *w = strtok_r(rest, " \t", &save); w;
       w = strtok_r(NULL, " \t", &save)) {
    if (t->ndtypes == GC_TPL_DTYPES) return perr(c, "too many dtypes%s", "");
    gc_dtype_t *d = t->dtypes[t->ndtypes];
    if (gc_dtypes_parse(w, &d[0], &d[1], &d[2], c->e))
      return gc_err_prefix(c->e, "%s:%d", c->path, c->lineno);
    t->ndtypes++;
  }
  return t->ndtypes ? GC_OK : perr(c, "@dtypes lists no dtype%s", "");
}

/* Names gen defines itself: problem dims, dtype sizes, target constants
 * (gen/target.c), the names derived from the op (op_values below), then
 * the dtype macros; expressions may use all but the last three. A
 * parameter by one of these names would silently redefine it. */
static const char *const gen_names[] = {"M", "N", "K", "H", "G", "D", "SA", "SB", "SC", "QR", "QMIN", "ABF",
                                        "VBYTES", "L1", "L2", "NCPU", "WARP", "SMEM", "SMS",
                                        "MAXT", "SM", "ARCH_A", "AMD", "GFX", "NCU", "VGPRS",
                                        "MFMA", "WMMA", "PAIR", "NORM", "ROPE", "BATCH", "TA", "TB", "TC"};
#define GEN_EXPR_NAMES (GC_ARRAY_LEN(gen_names) - 3)
#define GEN_OP_NAMES 4 /* the last expression names: PAIR, NORM, ROPE, BATCH */
#define GEN_OP_NAME(i) gen_names[GEN_EXPR_NAMES - GEN_OP_NAMES + (i)]

/* The op-derived names' values, so that one template serves several ops
 * with its epilogue chosen by them (templates/README.md): PAIR, rows of B
 * per column of C (2: the gate/up pair of W[2N,K]); NORM, 1 where A's rows
 * are RMS-normalised on the way; ROPE, 1 where C's columns are heads that
 * the epilogue rotates and writes to the KV cache (rope_kv's rule); BATCH,
 * 1 for a batched decode step (row i at its own position pos[i] in its own
 * cache slot pos[M+i]). Ops not listed have the first row's. */
static const struct op_values {
  const char *op;
  int64_t v[GEN_OP_NAMES]; /* PAIR, NORM, ROPE, BATCH */
} op_values[] = {
    {"", {1, 0, 0, 0}},
    {"gemm_swiglu", {2, 0, 0, 0}},
    {"rmsnorm_gemm", {1, 1, 0, 0}},
    {"rmsnorm_gemm_swiglu", {2, 1, 0, 0}},
    {"rmsnorm_gemm_rope_kv", {1, 1, 1, 0}},
    {"rmsnorm_gemm_bias_rope_kv", {1, 1, 1, 0}},
    {"rope_kv_batch", {1, 0, 0, 1}},
    {"attention_batch", {1, 0, 0, 1}},
};

static const int64_t *op_derived(const char *op) {
  for (size_t i = 1; i < GC_ARRAY_LEN(op_values); i++)
    if (!strcmp(op, op_values[i].op)) return op_values[i].v;
  return op_values[0].v;
}

static int reserved(const char *w) {
  for (size_t i = 0; i < GC_ARRAY_LEN(gen_names); i++)
    if (!strcmp(w, gen_names[i])) return 1;
  return !strncmp(w, "GC_", 3) || !strncmp(w, "LOAD_", 5) || !strncmp(w, "STORE_", 6);
}

static int parse_param(line_ctx_t *c, gc_template_t *t, char *rest) {
  if (t->nparams == GC_TPL_PARAMS) return perr(c, "too many @param lines%s", "");
  gc_tparam_t *p = &t->params[t->nparams];
  memset(p, 0, sizeof *p);
  snprintf(p->doc, sizeof p->doc, "%s", split_doc(rest));
  int have_def = 0, expect_def = 0;
  for (char *save = NULL, *w = strtok_r(rest, " \t", &save); w;
       w = strtok_r(NULL, " \t", &save)) {
    if (!p->name[0]) {
      if (!isalpha((unsigned char)w[0]) || strlen(w) >= GC_NAME_MAX)
        return perrq(c, "bad parameter name %s", w);
      if (reserved(w)) return perrq(c, "parameter name %s is reserved (gen defines it)", w);
      for (int i = 0; i < t->nparams; i++)
        if (!strcmp(t->params[i].name, w)) return perr(c, "parameter %s declared twice", w);
      strcpy(p->name, w);
    } else if (!strcmp(w, "default")) {
      expect_def = 1;
    } else {
      int64_t v;
      if (gc_parse_i64(w, &v)) return perrq(c, "%s is not an integer", w);
      if (expect_def) {
        p->def = v;
        have_def = 1;
        expect_def = 0;
      } else {
        if (p->nvalues == GC_TPL_VALUES) return perr(c, "too many values%s", "");
        for (int i = 0; i < p->nvalues; i++)
          if (p->values[i] == v) return perrq(c, "value %s listed twice", w);
        p->values[p->nvalues++] = v;
      }
    }
  }
  if (!p->name[0] || !p->nvalues) return perr(c, "@param needs a name and values%s", "");
  if (!have_def) return perr(c, "@param %s has no 'default D'", p->name);
  int found = 0;
  for (int i = 0; i < p->nvalues; i++) found |= p->values[i] == p->def;
  if (!found) return perr(c, "default of %s is not among its values", p->name);
  t->nparams++;
  return GC_OK;
}

/* @priority N [if EXPR]: the template's rank among those serving a
 * problem (the highest is the default); with `if EXPR`, N where EXPR holds
 * (the first such line that holds; gc_tpl_priority), else the plain one. */
static int parse_priority(line_ctx_t *c, gc_template_t *t, char *rest) {
  split_doc(rest);
  trim(rest);
  size_t len = strlen(rest);
  char *cond = strstr(rest, " if ");
  if (!cond && len >= 3 && !strcmp(rest + len - 3, " if")) cond = rest + len - 3;
  if (cond) *cond = 0, cond += cond[3] ? 4 : 3, cond += strspn(cond, " \t");
  trim(rest);
  int64_t v;
  if (gc_parse_i64(rest, &v) || v < 0 || v > 1000) return perrq(c, "bad @priority %s", rest);
  if (!cond) {
    t->priority = (int)v;
    return GC_OK;
  }
  trim(cond);
  if (!*cond) return perr(c, "@priority: nothing after 'if'%s", "");
  if (t->ncprio == (int)GC_ARRAY_LEN(t->cprio)) return perr(c, "more than %s conditional @priority lines", "4");
  if (strlen(cond) >= sizeof t->cprio[0].expr) return perr(c, "@priority: condition too long%s", "");
  snprintf(t->cprio[t->ncprio].expr, sizeof t->cprio[0].expr, "%s", cond);
  t->cprio_value[t->ncprio++] = (int)v;
  return GC_OK;
}

/* @defaults OP [OP ...] P=V [P=V ...] [if EXPR]: for these ops of @op,
 * parameter P defaults to V instead of its @param default (e.g. a smaller
 * tile for the gate/up pair). The ops and params must be declared before
 * it, V must be among P's values, and no op may get a parameter's default
 * twice from unconditional lines. With `if EXPR` the line applies only on
 * targets where EXPR holds (gc_tpl_default), after the unconditional ones. */
static int parse_defaults(line_ctx_t *c, gc_template_t *t, char *rest) {
  split_doc(rest);
  size_t len = strlen(rest);
  char *cond = strstr(rest, " if ");
  if (!cond && len >= 3 && !strcmp(rest + len - 3, " if")) cond = rest + len - 3;
  gc_tcdef_t cd = {0};
  if (cond) {
    *cond = 0;
    cond += cond[3] ? 4 : 3;
    cond += strspn(cond, " \t");
    if (!*cond) return perr(c, "@defaults: nothing after 'if'%s", "");
    if (t->ncdefs == GC_TPL_CDEFS) {
      char most[16];
      snprintf(most, sizeof most, "%d", GC_TPL_CDEFS);
      return perr(c, "@defaults: more than %s conditional lines", most);
    }
    if (strlen(cond) >= sizeof cd.cond) return perr(c, "@defaults: condition too long%s", "");
    snprintf(cd.cond, sizeof cd.cond, "%s", cond);
  }
  unsigned ops = 0;
  int nset = 0;
  for (char *save = NULL, *w = strtok_r(rest, " \t", &save); w;
       w = strtok_r(NULL, " \t", &save)) {
    char *eq = strchr(w, '=');
    if (!eq) {
      if (nset) return perr(c, "@defaults: op '%s' after an assignment (ops come first)", w);
      int i = 0;
      while (i < t->nops && strcmp(t->ops[i], w)) i++;
      if (i == t->nops) return perr(c, "@defaults: '%s' is not an op of this template's @op", w);
      if (ops & 1u << i) return perr(c, "@defaults: op %s listed twice", w);
      ops |= 1u << i;
      continue;
    }
    *eq = 0;
    if (!ops) return perr(c, "@defaults: name the ops before '%s='", w);
    int j = 0;
    while (j < t->nparams && strcmp(t->params[j].name, w)) j++;
    if (j == t->nparams) return perr(c, "@defaults: no @param %s above this line", w);
    gc_tparam_t *p = &t->params[j];
    int64_t v;
    int found = 0;
    if (gc_parse_i64(eq + 1, &v)) return perr(c, "@defaults: '%s' is not an integer", eq + 1);
    for (int k = 0; k < p->nvalues; k++) found |= p->values[k] == v;
    if (!found) return perr(c, "@defaults: the value of %s is not among its values", w);
    if (cond) {
      for (int k = 0; k < cd.n; k++)
        if (cd.param[k] == j) return perr(c, "@defaults: %s is given twice in one line", w);
      cd.param[cd.n] = j;
      cd.value[cd.n++] = v;
      nset++;
      continue;
    }
    if (p->opdef_set & ops) return perr(c, "@defaults: %s is given twice for one op", w);
    for (int i = 0; i < t->nops; i++)
      if (ops & 1u << i) p->opdef[i] = v;
    p->opdef_set |= ops;
    nset++;
  }
  if (!ops || !nset) return perr(c, "@defaults needs ops and P=V assignments%s", "");
  if (cond) {
    cd.ops = ops;
    t->cdefs[t->ncdefs++] = cd;
  }
  return GC_OK;
}

static int parse_expr_line(line_ctx_t *c, gc_texpr_t *list, int *n, int max,
                           char *rest, const char *what) {
  if (*n == max) return perr(c, "too many %s lines", what);
  gc_texpr_t *x = &list[*n];
  snprintf(x->doc, sizeof x->doc, "%s", split_doc(rest));
  trim(rest);
  if (!*rest) return perr(c, "%s without an expression", what);
  if (strlen(rest) >= sizeof x->expr) return perr(c, "%s expression too long", what);
  strcpy(x->expr, rest);
  (*n)++;
  return GC_OK;
}

static int parse_decl(line_ctx_t *c, gc_template_t *t, char *line) {
  char *kw = line + 1, *rest = kw;
  while (*rest && !isspace((unsigned char)*rest)) rest++;
  if (*rest) *rest++ = 0;
  trim(rest);
  if (!strcmp(kw, "template")) return copy_word(c, t->name, sizeof t->name, rest, "@template");
  if (!strcmp(kw, "op")) return parse_ops(c, t, rest);
  if (!strcmp(kw, "backend")) {
    if (copy_word(c, t->backend, sizeof t->backend, rest, "@backend")) return c->e->code;
    return (!strcmp(t->backend, "cpu") || !strcmp(t->backend, "gpu") ||
            !strcmp(t->backend, "cuda") || !strcmp(t->backend, "hip"))
               ? GC_OK
               : perrq(c, "unknown backend %s (cpu, gpu, cuda or hip)", t->backend);
  }
  if (!strcmp(kw, "kernel")) return copy_word(c, t->kernel, sizeof t->kernel, rest, "@kernel");
  if (!strcmp(kw, "dtypes")) return parse_dtypes(c, t, rest);
  if (!strcmp(kw, "param")) return parse_param(c, t, rest);
  if (!strcmp(kw, "defaults")) return parse_defaults(c, t, rest);
  if (!strcmp(kw, "constraint"))
    return parse_expr_line(c, t->constraints, &t->nconstraints, GC_TPL_EXPRS, rest,
                           "@constraint");
  if (!strcmp(kw, "applies"))
    return parse_expr_line(c, t->applies, &t->napplies, 8, rest, "@applies");
  if (!strcmp(kw, "grid") || !strcmp(kw, "block") || !strcmp(kw, "shmem")) {
    char *dst = kw[0] == 'g' ? t->grid : kw[0] == 'b' ? t->block : t->shmem;
    split_doc(rest);
    trim(rest);
    if (!*rest || strlen(rest) >= sizeof t->grid) return perr(c, "bad @%s", kw);
    strcpy(dst, rest);
    return GC_OK;
  }
  if (!strcmp(kw, "tensormap")) {
    if (t->ntmaps == GC_TMAPS_MAX) return perr(c, "more than %s @tensormap lines", "4");
    split_doc(rest);
    trim(rest);
    if (!*rest || strlen(rest) >= sizeof t->tmaps[0]) return perr(c, "bad @%s", kw);
    strcpy(t->tmaps[t->ntmaps++], rest);
    return GC_OK;
  }
  int *flag = !strcmp(kw, "pdl") ? &t->pdl : !strcmp(kw, "prefetch") ? &t->prefetch : NULL;
  if (flag) { /* no value; the doc after -- is optional */
    if (!strncmp(rest, "--", 2) && (!rest[2] || rest[2] == ' ')) *rest = 0;
    split_doc(rest);
    trim(rest);
    if (*rest)
      return perrq(c, flag == &t->pdl ? "@pdl takes no value (got %s)" : "@prefetch takes no value (got %s)", rest);
    *flag = 1;
    return GC_OK;
  }
  if (!strcmp(kw, "priority")) return parse_priority(c, t, rest);
  char at[GC_QUOTE_BUF];
  snprintf(at, sizeof at, "@%s", kw);
  return perrq(c, "unknown declaration %s", at);
}

/* Evaluate every declared expression once with all names bound to 1 so
 * that misspelt names and syntax errors are caught when the template is
 * loaded (arithmetic errors may be artefacts of the 1s and are not). */
static int check_names(gc_template_t *t, gc_err_t *e) {
  gc_env_t env = {0};
  for (size_t i = 0; i < GEN_EXPR_NAMES; i++) gc_env_set(&env, gen_names[i], 1, NULL);
  for (int i = 0; i < t->nparams; i++) gc_env_set(&env, t->params[i].name, 1, NULL);
  int64_t v[3];
  for (int i = 0; i < t->nconstraints + t->napplies + 3; i++) {
    int k = i - t->nconstraints - t->napplies;
    const char *x = i < t->nconstraints ? t->constraints[i].expr
                    : k < 0 ? t->applies[i - t->nconstraints].expr
                    : k == 0 ? t->grid
                    : k == 1 ? t->block
                             : t->shmem;
    gc_err_t tmp;
    if (gc_expr_eval3(x, &env, v, &tmp) && !strstr(tmp.msg, "division by zero") &&
        !strstr(tmp.msg, "overflow"))
      return gc_err_set(e, GC_EINVAL, "%s: %s", t->path, tmp.msg);
  }
  for (int i = 0; i < t->ncdefs; i++) {
    gc_err_t tmp;
    if (gc_expr_eval(t->cdefs[i].cond, &env, v, &tmp) && !strstr(tmp.msg, "division by zero") &&
        !strstr(tmp.msg, "overflow"))
      return gc_err_set(e, GC_EINVAL, "%s: @defaults ... if: %s", t->path, tmp.msg);
  }
  for (int i = 0; i < t->ncprio; i++) {
    gc_err_t tmp;
    if (gc_expr_eval(t->cprio[i].expr, &env, v, &tmp) && !strstr(tmp.msg, "division by zero") &&
        !strstr(tmp.msg, "overflow"))
      return gc_err_set(e, GC_EINVAL, "%s: @priority ... if: %s", t->path, tmp.msg);
  }
  for (int i = 0; i < t->ntmaps; i++) {
    gc_err_t tmp;
    if (gc_tmap_spec_check(t->tmaps[i], &env, &tmp))
      return gc_err_set(e, GC_EINVAL, "%s: %s", t->path, tmp.msg);
  }
  return GC_OK;
}

static int require(gc_template_t *t, const char *v, const char *what, gc_err_t *e) {
  return *v ? GC_OK : gc_err_set(e, GC_EINVAL, "%s: missing %s declaration", t->path, what);
}

int gc_tpl_parse(const char *path, const char *src, size_t n, gc_template_t *t,
                 gc_err_t *e) {
  memset(t, 0, sizeof *t);
  snprintf(t->path, sizeof t->path, "%s", path);
  if (memchr(src, 0, n)) return gc_err_set(e, GC_EINVAL, "%s: contains a NUL byte", path);
  if (!(t->source = gc_malloc(n + 1, e))) return GC_ENOMEM;
  memcpy(t->source, src, n);
  t->source[n] = 0;
  gc_hash_hex(src, n, t->hash);
  const char *open = strstr(t->source, "/*");
  const char *close = open ? strstr(open + 2, "*/") : NULL;
  if (!close) return gc_err_set(e, GC_EINVAL, "%s: no declaration comment (/* ... */)", path);
  line_ctx_t c = {path, 1, e};
  for (const char *p = t->source; p < open; p++) c.lineno += *p == '\n';
  for (const char *p = open + 2; p < close; c.lineno++) {
    const char *nl = memchr(p, '\n', (size_t)(close - p));
    const char *end = nl ? nl : close;
    char line[512];
    if ((size_t)(end - p) >= sizeof line) return perr(&c, "line too long%s", "");
    memcpy(line, p, (size_t)(end - p));
    line[end - p] = 0;
    char *s = line + strspn(line, " \t*");
    trim(s);
    if (*s == '@' && parse_decl(&c, t, s)) return e->code;
    p = nl ? nl + 1 : close;
  }
  if (require(t, t->name, "@template", e) || require(t, t->op, "@op", e) ||
      require(t, t->backend, "@backend", e) || require(t, t->kernel, "@kernel", e) ||
      require(t, t->grid, "@grid", e))
    return e->code;
  if (!t->ndtypes) return gc_err_set(e, GC_EINVAL, "%s: missing @dtypes declaration", path);
  for (int i = 0; i < t->nparams; i++) /* the ops no @defaults line names: the declared default */
    for (int k = 0; k < t->nops; k++)
      if (!(t->params[i].opdef_set & 1u << k)) t->params[i].opdef[k] = t->params[i].def;
  if (!t->block[0]) strcpy(t->block, "1");
  if (!t->shmem[0]) strcpy(t->shmem, "0");
  if (t->ntmaps && strcmp(t->backend, "cuda"))
    return gc_err_set(e, GC_EINVAL, "%s: @tensormap needs @backend cuda (the maps are CUDA "
                      "driver objects), not %s", path, t->backend);
  return check_names(t, e);
}

void gc_tpl_free(gc_template_t *t) {
  free(t->source);
  t->source = NULL;
}

/* ---- loading sets --------------------------------------------------- */

/* Template folders: cpu/ holds C (*.c, prelude.h); gpu/ holds the sources
 * shared by NVIDIA and AMD and the matrix-core ones (*.cu, prelude_cuda.h,
 * prelude_hip.h, and prelude_common.h, the text those two share). */
static const char *const dirs[] = {"cpu", "gpu"};
static const char *const exts[] = {".c", ".cu"};
static const char *const prelude_files[4] = {"cpu/prelude.h", "gpu/prelude_cuda.h",
                                             "gpu/prelude_hip.h", "gpu/prelude_common.h"};
#define PRELUDE_COMMON 3
/* The line of a GPU prelude that gen replaces by prelude_common.h's text
 * (NVRTC and comgr compile one string, with no include path). */
static const char common_include[] = "#include \"prelude_common.h\"\n";

int gc_tpl_serves(const gc_template_t *t, const char *backend) {
  if (!strcmp(t->backend, backend)) return 1;
  return !strcmp(t->backend, "gpu") && (!strcmp(backend, "cuda") || !strcmp(backend, "hip"));
}

static int add_template(gc_templates_t *set, const char *path, const char *src,
                        size_t n, gc_err_t *e) {
  gc_template_t *v = gc_realloc(set->v, (size_t)(set->n + 1) * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  set->v = v;
  if (gc_tpl_parse(path, src, n, &v[set->n], e)) {
    gc_tpl_free(&v[set->n]);
    return e->code;
  }
  int cpu_dir = strstr(path, "/gpu/") == NULL && strncmp(path, "gpu/", 4) != 0;
  if (cpu_dir != !strcmp(v[set->n].backend, "cpu")) {
    gc_err_set(e, GC_EINVAL, "%s: @backend %s does not belong in this folder", path,
               v[set->n].backend);
    gc_tpl_free(&v[set->n]);
    return e->code;
  }
  for (int i = 0; i < set->n; i++)
    if (!strcmp(v[i].name, v[set->n].name)) {
      gc_err_set(e, GC_EINVAL, "%s: template name '%s' is also used by %s", path,
                 v[i].name, v[i].path);
      gc_tpl_free(&v[set->n]);
      return e->code;
    }
  set->n++;
  return GC_OK;
}

static int has_ext(const char *name, const char *ext) {
  size_t n = strlen(name), m = strlen(ext);
  return n > m && !strcmp(name + n - m, ext);
}

/* The prelude index of a file relative to the templates root, or -1. */
static int prelude_index(const char *rel) {
  for (int i = 0; i < (int)GC_ARRAY_LEN(prelude_files); i++)
    if (!strcmp(rel, prelude_files[i])) return i;
  return -1;
}

static int load_file(gc_templates_t *set, const char *rel, const char *path,
                     const char *src, size_t n, int d, gc_err_t *e) {
  int pi = prelude_index(rel);
  if (pi >= 0) {
    if (!(set->prelude[pi] = gc_malloc(n + 1, e))) return GC_ENOMEM;
    memcpy(set->prelude[pi], src, n);
    set->prelude[pi][n] = 0;
    return GC_OK;
  }
  const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
  if (!has_ext(base, exts[d])) return GC_OK;
  return add_template(set, path, src, n, e);
}

static int load_dir(const char *dir, int d, gc_templates_t *set, gc_err_t *e) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, dirs[d]);
  struct dirent **ents;
  int n = scandir(path, &ents, NULL, alphasort), rc = GC_OK;
  if (n < 0) return GC_OK; /* no templates for this folder */
  for (int i = 0; i < n; i++) {
    char file[1300], rel[300];
    snprintf(file, sizeof file, "%s/%s", path, ents[i]->d_name);
    snprintf(rel, sizeof rel, "%s/%s", dirs[d], ents[i]->d_name);
    char *src = NULL;
    size_t len;
    if (!rc && ents[i]->d_name[0] != '.' &&
        (prelude_index(rel) >= 0 || has_ext(ents[i]->d_name, exts[d])) &&
        !(rc = gc_read_file(file, 1 << 20, &src, &len, e)))
      rc = load_file(set, rel, file, src, len, d, e);
    free(src);
    free(ents[i]);
  }
  free(ents);
  return rc;
}

static int load_embedded(int d, gc_templates_t *set, gc_err_t *e) {
  char pre[64];
  snprintf(pre, sizeof pre, "templates/%s/", dirs[d]);
  for (int i = 0; i < gc_embedded_count; i++) {
    const gc_embed_t *f = &gc_embedded[i];
    if (strncmp(f->path, pre, strlen(pre)) || strchr(f->path + strlen(pre), '/')) continue;
    if (load_file(set, f->path + strlen("templates/"), f->path, (const char *)f->data,
                  f->size, d, e))
      return e->code;
  }
  return GC_OK;
}

/* Hash of the preludes a template's code is generated with (part of every
 * variant id, so that a prelude change recompiles and retunes). */
static void prelude_hash(const gc_templates_t *set, gc_template_t *t) {
  gc_buf_t b = {0};
  for (int i = 0; i < 3; i++) {
    int used = i == 0 ? gc_tpl_serves(t, "cpu") : gc_tpl_serves(t, i == 1 ? "cuda" : "hip");
    if (used && set->prelude[i]) gc_buf_append(&b, set->prelude[i], strlen(set->prelude[i]), NULL);
  }
  gc_hash_hex(b.data ? b.data : "", b.len, t->prelude_hash);
  gc_buf_free(&b);
}

/* Replace the common_include line of the CUDA and HIP preludes by
 * prelude_common.h's text, so that each is one string as if the text
 * stood there. Fails (GC_EINVAL) where a prelude includes it and it is
 * missing. */
static int splice_common(gc_templates_t *set, const char *where, gc_err_t *e) {
  const size_t nl = sizeof common_include - 1;
  for (int i = 1; i <= 2; i++) {
    char *p = set->prelude[i], *at = p ? strstr(p, common_include) : NULL;
    if (!at) continue;
    const char *part = set->prelude[PRELUDE_COMMON];
    if (!part)
      return gc_err_set(e, GC_EINVAL, "%s: %s includes %s, which is missing", where,
                        prelude_files[i], prelude_files[PRELUDE_COMMON]);
    size_t head = (size_t)(at - p), np = strlen(part), tail = strlen(at + nl);
    char *s = gc_malloc(head + np + tail + 1, e);
    if (!s) return GC_ENOMEM;
    memcpy(s, p, head);
    memcpy(s + head, part, np);
    memcpy(s + head + np, at + nl, tail + 1);
    free(p);
    set->prelude[i] = s;
  }
  return GC_OK;
}

int gc_tpl_load_all(const char *dir, gc_templates_t *set, gc_err_t *e) {
  memset(set, 0, sizeof *set);
  for (int d = 0; d < (int)GC_ARRAY_LEN(dirs); d++) {
    int rc = dir ? load_dir(dir, d, set, e) : load_embedded(d, set, e);
    if (rc) {
      gc_tpl_free_all(set);
      return rc;
    }
  }
  if (splice_common(set, dir ? dir : "embedded templates", e)) {
    gc_tpl_free_all(set);
    return e->code;
  }
  for (int i = 0; i < set->n; i++) {
    const char *need = !strcmp(set->v[i].backend, "cpu") ? prelude_files[0]
                       : !strcmp(set->v[i].backend, "hip") ? prelude_files[2]
                                                           : prelude_files[1];
    if (!set->prelude[prelude_index(need)]) {
      gc_err_set(e, GC_EINVAL, "%s: no %s for template %s", dir ? dir : "embedded templates",
                 need, set->v[i].name);
      gc_tpl_free_all(set);
      return e->code;
    }
    prelude_hash(set, &set->v[i]);
  }
  if (!set->n) {
    gc_tpl_free_all(set);
    return gc_err_set(e, GC_ENOTFOUND, "%s: no templates found (expected <dir>/cpu/NAME.c or "
                      "<dir>/gpu/NAME.cu)", dir ? dir : "embedded templates");
  }
  return GC_OK;
}

void gc_tpl_free_all(gc_templates_t *set) {
  for (int i = 0; i < set->n; i++) gc_tpl_free(&set->v[i]);
  free(set->v);
  for (int b = 0; b < (int)GC_ARRAY_LEN(set->prelude); b++) free(set->prelude[b]);
  memset(set, 0, sizeof *set);
}

const gc_template_t *gc_tpl_find(const gc_templates_t *set, const char *name) {
  for (int i = 0; i < set->n; i++)
    if (!strcmp(set->v[i].name, name)) return &set->v[i];
  return NULL;
}

/* ---- the space ------------------------------------------------------ */

int gc_tpl_supports(const gc_template_t *t, const gc_problem_t *p) {
  int op = 0;
  for (int i = 0; i < t->nops; i++) op |= !strcmp(t->ops[i], p->op);
  if (!op) return 0;
  for (int i = 0; i < t->ndtypes; i++)
    if (t->dtypes[i][0] == p->ta && t->dtypes[i][1] == p->tb && t->dtypes[i][2] == p->tc)
      return 1;
  return 0;
}

void gc_tpl_refresh(gc_variant_t *v) {
  size_t n = 0;
  v->params[0] = 0;
  for (int i = 0; i < v->tpl->nparams && n < sizeof v->params; i++)
    n += (size_t)snprintf(v->params + n, sizeof v->params - n, "%s%s=%lld", i ? "," : "",
                          v->tpl->params[i].name, (long long)v->values[i]);
}

static void init_variant(const gc_template_t *t, const gc_problem_t *p, gc_variant_t *v) {
  memset(v, 0, sizeof *v);
  v->tpl = t;
  snprintf(v->op, sizeof v->op, "%s", p->op);
  v->ta = p->ta;
  v->tb = p->tb;
  v->tc = p->tc;
}

void gc_tpl_default(const gc_template_t *t, const gc_target_t *tg, const gc_problem_t *p,
                    gc_variant_t *v) {
  int k = 0;
  while (k < t->nops && strcmp(t->ops[k], p->op)) k++;
  init_variant(t, p, v);
  for (int i = 0; i < t->nparams; i++)
    v->values[i] = k < t->nops ? t->params[i].opdef[k] : t->params[i].def;
  for (int i = 0; tg && k < t->nops && i < t->ncdefs; i++) {
    const gc_tcdef_t *cd = &t->cdefs[i];
    gc_env_t env;
    gc_err_t tmp;
    int64_t holds = 0;
    if (!(cd->ops & 1u << k)) continue;
    if (gc_tpl_env(v, tg, p, &env, &tmp) || gc_expr_eval(cd->cond, &env, &holds, &tmp) || !holds)
      continue;
    for (int j = 0; j < cd->n; j++) v->values[cd->param[j]] = cd->value[j];
  }
  gc_tpl_refresh(v);
}

int gc_tpl_set_params(const gc_template_t *t, const char *text, gc_variant_t *v,
                      gc_err_t *e) {
  gc_env_t env = {0};
  if (gc_env_parse(&env, text, e)) return e->code;
  for (int j = 0; j < env.n; j++) {
    int i = 0;
    while (i < t->nparams && strcmp(t->params[i].name, env.name[j])) i++;
    if (i == t->nparams)
      return gc_err_set(e, GC_EINVAL, "template %s has no parameter '%s'", t->name,
                        env.name[j]);
    int ok = 0;
    for (int k = 0; k < t->params[i].nvalues; k++) ok |= t->params[i].values[k] == env.value[j];
    if (!ok)
      return gc_err_set(e, GC_EINVAL, "template %s: %s=%lld is not an allowed value",
                        t->name, env.name[j], (long long)env.value[j]);
    v->values[i] = env.value[j];
  }
  gc_tpl_refresh(v);
  return GC_OK;
}

int64_t gc_tpl_space_size(const gc_template_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->nparams; i++)
    if (__builtin_mul_overflow(n, (int64_t)t->params[i].nvalues, &n)) return INT64_MAX;
  return n;
}

void gc_tpl_nth(const gc_template_t *t, const gc_problem_t *p, int64_t idx,
                gc_variant_t *v) {
  init_variant(t, p, v);
  for (int i = t->nparams - 1; i >= 0; i--) {
    int64_t nv = t->params[i].nvalues;
    v->values[i] = t->params[i].values[idx % nv];
    idx /= nv;
  }
  gc_tpl_refresh(v);
}

int gc_tpl_env(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p,
               gc_env_t *env, gc_err_t *e) {
  *env = tg->consts;
  if (gc_env_set(env, "SA", (int64_t)gc_dtype_size(v->ta), e) ||
      gc_env_set(env, "SB", (int64_t)gc_dtype_size(v->tb), e) ||
      gc_env_set(env, "SC", (int64_t)gc_dtype_size(v->tc), e) ||
      gc_env_set(env, "QR", gc_dtype_is_device_layout(v->tb), e) ||
      gc_env_set(env, "QMIN", gc_dtype_has_min(v->tb), e) ||
      gc_env_set(env, "ABF", v->ta == GC_DT_BF16, e))
    return e->code;
  const int64_t *od = op_derived(v->op);
  for (int i = 0; i < GEN_OP_NAMES; i++)
    if (gc_env_set(env, GEN_OP_NAME(i), od[i], e)) return e->code;
  for (int i = 0; i < v->tpl->nparams; i++)
    if (gc_env_set(env, v->tpl->params[i].name, v->values[i], e)) return e->code;
  if (p && gc_env_set_dims(env, p, e)) return e->code;
  return GC_OK;
}

static int all_hold(const gc_variant_t *v, const gc_env_t *env, const gc_texpr_t *x,
                    int n, int *ok, const char **why, gc_err_t *e) {
  *ok = 1;
  for (int i = 0; i < n; i++) {
    int64_t r;
    if (gc_expr_eval(x[i].expr, env, &r, e))
      return gc_err_prefix(e, "template %s", v->tpl->name);
    if (!r) {
      *ok = 0;
      if (why) *why = x[i].expr;
      return GC_OK;
    }
  }
  return GC_OK;
}

int gc_tpl_valid(const gc_variant_t *v, const gc_target_t *tg, int *ok,
                 const char **why, gc_err_t *e) {
  gc_env_t env;
  if (gc_tpl_env(v, tg, NULL, &env, e)) return e->code;
  return all_hold(v, &env, v->tpl->constraints, v->tpl->nconstraints, ok, why, e);
}

int gc_tpl_applies(const gc_variant_t *v, const gc_target_t *tg,
                   const gc_problem_t *p, int *ok, gc_err_t *e) {
  gc_env_t env;
  if (gc_tpl_env(v, tg, p, &env, e)) return e->code;
  return all_hold(v, &env, v->tpl->applies, v->tpl->napplies, ok, NULL, e);
}

int gc_tpl_launch(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p,
                  int64_t grid[3], int64_t block[3], gc_err_t *e) {
  gc_env_t env;
  if (gc_tpl_env(v, tg, p, &env, e) || gc_expr_eval3(v->tpl->grid, &env, grid, e) ||
      gc_expr_eval3(v->tpl->block, &env, block, e))
    return gc_err_prefix(e, "template %s", v->tpl->name);
  return GC_OK;
}

int gc_tpl_consts_text(const gc_variant_t *v, const gc_target_t *tg, char *out,
                       size_t n, gc_err_t *e) {
  gc_env_t env;
  if (gc_tpl_env(v, tg, NULL, &env, e)) return e->code;
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < env.n; i++) {
    int w = snprintf(out + len, n - len, "%s%s=%lld", i ? "," : "", env.name[i],
                     (long long)env.value[i]);
    if (w < 0 || (size_t)w >= n - len)
      return gc_err_set(e, GC_EINVAL, "template %s: constants too long", v->tpl->name);
    len += (size_t)w;
  }
  return GC_OK;
}

/* ---- expansion ------------------------------------------------------ */

void gc_tpl_tmaps_text(const gc_template_t *t, char *out, size_t n) {
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < t->ntmaps && len < n; i++)
    len += (size_t)snprintf(out + len, n - len, "%s%s", i ? "\n" : "", t->tmaps[i]);
}

void gc_tpl_vid(const gc_variant_t *v, const gc_target_t *tg, const char *compiler_id,
                char vid[GC_HASH_HEX]) {
  char key[2048], dt[16];
  gc_dtypes_format(v->ta, v->tb, v->tc, dt);
  int n = snprintf(key, sizeof key, "%s|%s|%s|%s|%s|%s|%s|%s", v->tpl->hash,
                   v->tpl->prelude_hash, v->tpl->name, v->op, v->params, dt, tg->name,
                   compiler_id);
  gc_hash_hex(key, (size_t)n < sizeof key ? (size_t)n : sizeof key - 1, vid);
}

int gc_tpl_expand(const gc_templates_t *set, const gc_variant_t *v,
                  const gc_target_t *tg, const char *compiler_id, gc_buf_t *src,
                  char vid[GC_HASH_HEX], gc_err_t *e) {
  const gc_template_t *t = v->tpl;
  int pi = !strcmp(tg->backend, "cpu") ? 0 : !strcmp(tg->backend, "cuda") ? 1 : 2;
  const char *prelude = set->prelude[pi];
  if (!prelude || !gc_tpl_serves(t, tg->backend))
    return gc_err_set(e, GC_EINVAL, "template %s has no code for %s targets", t->name, tg->backend);
  gc_tpl_vid(v, tg, compiler_id, vid);
  char dt[16];
  gc_dtypes_format(v->ta, v->tb, v->tc, dt);
  gc_env_t env;
  if (gc_tpl_env(v, tg, NULL, &env, e)) return e->code;
  if (gc_buf_printf(src, e,
                    "/* generated by gcore: template %s (%s), %s, target %s, "
                    "variant %s */\n",
                    t->name, t->hash, dt, tg->name, vid) ||
      gc_buf_printf(src, e, "%s\n", prelude))
    return e->code;
  const char *tn[3] = {"GC_TA", "GC_TB", "GC_TC"};
  const gc_dtype_t td[3] = {v->ta, v->tb, v->tc};
  for (int i = 0; i < 3; i++)
    if (gc_buf_printf(src, e, "#define %s %d\n", tn[i], (int)td[i])) return e->code;
  for (int i = 0; i < env.n; i++)
    if (gc_buf_printf(src, e, "#define %s %lld\n", env.name[i], (long long)env.value[i]))
      return e->code;
  for (int i = 0; i < t->nops; i++) { /* GC_OP_<op>: 1 for the op built, 0 for the others */
    char opm[GC_OP_NAME];
    for (size_t j = 0; j < sizeof opm; j++) opm[j] = (char)toupper((unsigned char)t->ops[i][j]);
    if (gc_buf_printf(src, e, "#define GC_OP_%s %d\n", opm, !strcmp(t->ops[i], v->op)))
      return e->code;
  }
  if (gc_buf_printf(src, e, "#line 1 \"%s\"\n%s", t->path, t->source)) return e->code;
  return GC_OK;
}

/* v applies to p and satisfies its constraints on tg. */
static int usable(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p, int *ok,
                  gc_err_t *e) {
  int valid = 0;
  if (gc_tpl_applies(v, tg, p, ok, e)) return e->code;
  if (*ok && gc_tpl_valid(v, tg, &valid, NULL, e)) return e->code;
  *ok = *ok && valid;
  return GC_OK;
}

/* (VEC=16 is invalid on a 32-byte-vector target, VEC=8 alone fixes it;
 * SPLIT=1 serves rows a split workspace does not hold; M = 16 rows may
 * need both MMAX=16 and a register plan for fewer resident blocks.) */
int gc_tpl_nearest(const gc_template_t *t, const gc_target_t *tg, const gc_problem_t *p,
                   gc_variant_t *v, int *ok, gc_err_t *e) {
  int applies;
  gc_variant_t d; /* the default on tg, the point the moves start from */
  gc_tpl_default(t, tg, p, &d);
  *v = d;
  if (gc_tpl_applies(v, tg, p, &applies, e) || usable(v, tg, p, ok, e)) return e->code;
  for (int i = 0; !*ok && i < t->nparams; i++)
    for (int j = 0; !*ok && j < t->params[i].nvalues; j++) {
      *v = d;
      v->values[i] = t->params[i].values[j];
      gc_tpl_refresh(v);
      if (usable(v, tg, p, ok, e)) return e->code;
    }
  /* two changed (M = 16 rows may need both MMAX=16 and a register plan
   * for fewer resident blocks) */
  for (int i = 0; !*ok && i < t->nparams; i++)
    for (int i2 = i + 1; !*ok && i2 < t->nparams; i2++)
      for (int j = 0; !*ok && j < t->params[i].nvalues; j++)
        for (int j2 = 0; !*ok && j2 < t->params[i2].nvalues; j2++) {
          *v = d;
          v->values[i] = t->params[i].values[j];
          v->values[i2] = t->params[i2].values[j2];
          gc_tpl_refresh(v);
          if (usable(v, tg, p, ok, e)) return e->code;
        }
  for (int64_t i = 0, n = gc_tpl_space_size(t); applies && !*ok && i < n && i < (1 << 20); i++) {
    gc_tpl_nth(t, p, i, v);
    if (usable(v, tg, p, ok, e)) return e->code;
  }
  return GC_OK;
}

int gc_tpl_priority(const gc_template_t *t, const gc_target_t *tg, const gc_problem_t *p,
                    const gc_variant_t *v) {
  for (int i = 0; i < t->ncprio; i++) {
    gc_env_t env;
    gc_err_t tmp;
    int64_t holds = 0;
    if (!gc_tpl_env(v, tg, p, &env, &tmp) && !gc_expr_eval(t->cprio[i].expr, &env, &holds, &tmp) && holds)
      return t->cprio_value[i];
  }
  return t->priority;
}

int gc_tpl_pick_default(const gc_templates_t *set, const gc_target_t *tg,
                        const gc_problem_t *p, gc_variant_t *v, gc_err_t *e) {
  const gc_template_t *best = NULL, *unusable = NULL;
  int best_prio = 0;
  char key[GC_PROBLEM_KEY];
  gc_problem_key(p, key);
  for (int i = 0; i < set->n; i++) {
    const gc_template_t *t = &set->v[i];
    int ok;
    if (!gc_tpl_serves(t, tg->backend) || !gc_tpl_supports(t, p)) continue;
    if (best && t->priority <= best_prio && !t->ncprio) continue;
    gc_variant_t cand;
    if (gc_tpl_nearest(t, tg, p, &cand, &ok, e)) return e->code;
    int prio = ok ? gc_tpl_priority(t, tg, p, &cand) : t->priority;
    if (ok && (!best || prio > best_prio)) {
      best = t;
      best_prio = prio;
      *v = cand;
    } else if (!ok && !unusable) {
      unusable = t;
    }
  }
  if (!best && unusable)
    return gc_err_set(e, GC_EINVAL, "template %s: no variant satisfies its constraints on %s "
                      "and applies to '%s'", unusable->name, tg->name, key);
  if (!best) return gc_err_set(e, GC_ENOTFOUND, "no %s template implements '%s'", tg->backend, key);
  return gc_default_fit(tg, p, v, e);
}
