/* regex.c — an ECMA-262 pattern (regex.h's subset) parsed into a tree,
 * built into a Thompson NFA, determinised over classes of code points,
 * crossed with a character count where lengths are bounded, pruned of
 * states that cannot reach acceptance, and minimised (Moore). Every stage
 * counts its work against one budget: a client's pattern costs at most a
 * few tens of milliseconds, or is refused. */
#include "regex.h"

#include <stdlib.h>
#include <string.h>

#define NFA_MAX 4096   /* NFA states (counted repetition is expanded) */
#define DFA_MAX 4096   /* subset-construction states, before counting characters */
#define CLS_MAX 512    /* classes of code points (\D alone makes 125) */
#define REP_MAX 1000   /* a repetition's count */
#define WORK_MAX 40000000L /* word operations, all stages together */
#define CELLS_MAX (1 << 21) /* states times classes of the table (int16: 4 MiB) */

/* ---- sets of code points: sorted, disjoint, non-adjacent ranges -------- */

typedef struct { uint32_t lo, hi; } range_t;
typedef struct { range_t *r; int n, cap; } set_t;

/* The parse: a tree of nodes over sets. */
enum { A_SET, A_EMPTY, A_BOL, A_EOL, A_CAT, A_ALT, A_REP };
typedef struct {
  uint8_t op;
  int a, b;     /* A_SET: a = its set; A_CAT, A_ALT: children a, b; A_REP: child a */
  int min, max; /* A_REP: counts (max -1: no bound) */
} ast_t;

typedef struct {
  const char *s;
  size_t n, i;  /* the pattern, the byte being read */
  ast_t *ast;
  int nast, acap;
  set_t *sets;
  int nsets, scap;
  long work;
  gc_err_t *e;
  int rc;
} re_parse_t;

static int perr(re_parse_t *p, const char *what) {
  if (!p->rc) p->rc = gc_err_set(p->e, GC_EINVAL, "at byte %zu: %s", p->i, what);
  return -1;
}
/* An error of the whole pattern (no byte to name). */
static int gerr(re_parse_t *p, const char *what) {
  if (!p->rc) p->rc = gc_err_set(p->e, GC_EINVAL, "%s", what);
  return -1;
}
static int oom(re_parse_t *p) {
  if (!p->rc) p->rc = gc_err_set(p->e, GC_ENOMEM, "out of memory");
  return -1;
}

/* *v (an array of *cap elements of sz bytes) with room for need; 0: out of memory. */
static int grow(void **v, int *cap, int need, size_t sz) {
  if (need <= *cap) return 1;
  int k = *cap ? *cap * 2 : 16;
  while (k < need) k *= 2;
  void *q = realloc(*v, (size_t)k * sz);
  if (!q) return 0;
  *v = q, *cap = k;
  return 1;
}

static int set_add(set_t *t, uint32_t lo, uint32_t hi) {
  if (!grow((void **)&t->r, &t->cap, t->n + 1, sizeof *t->r)) return 0;
  t->r[t->n++] = (range_t){lo, hi};
  return 1;
}

static int range_cmp(const void *a, const void *b) {
  const range_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* t sorted and merged. */
static void set_norm(set_t *t) {
  if (!t->n) return;
  qsort(t->r, (size_t)t->n, sizeof *t->r, range_cmp);
  int k = 0;
  for (int i = 1; i < t->n; i++)
    if (t->r[i].lo <= t->r[k].hi + 1) {
      if (t->r[i].hi > t->r[k].hi) t->r[k].hi = t->r[i].hi;
    } else {
      t->r[++k] = t->r[i];
    }
  t->n = k + 1;
}

/* t := its complement in [0, GC_RE_MAXCP] (t normalised). 0: out of memory. */
static int set_not(set_t *t) {
  set_t c = {0};
  uint32_t at = 0;
  for (int i = 0; i < t->n; i++) {
    if (t->r[i].lo > at && !set_add(&c, at, t->r[i].lo - 1)) return free(c.r), 0;
    at = t->r[i].hi + 1;
  }
  if (at <= GC_RE_MAXCP && !set_add(&c, at, GC_RE_MAXCP)) return free(c.r), 0;
  free(t->r);
  *t = c;
  return 1;
}

/* The class escapes d, s, w (upper case: their complements) added to t,
 * as every reader of the pattern agrees: a pattern is ECMA-262's, but
 * the validator behind a client may be Python's re or Rust's regex
 * (pydantic's), where \s, \w and \d are Unicode's. So where the class
 * is read as it is (neg 0), \s is the spaces all of them share and \S
 * what none of them calls a space; inside a negated class (neg 1: its
 * complement is what matches) \s is every space any of them knows and \S
 * the complement of those they share. \W is ASCII's non-word characters
 * where read as it is (Python and Rust call most of the others letters),
 * and \w in a negated class every non-ASCII character too. \d is [0-9]
 * where read as it is, and every script's decimal digits (Python's and
 * Rust's \d: ND) in a negated class and under \D. */
/* Unicode's decimal digits (category Nd: what Python's and Rust's \d
 * match), from Python 3.11's unicodedata (Unicode 14.0.0):
 *   [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Nd"] */
static const range_t ND[] = {
    {0x30, 0x39}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9}, {0x966, 0x96F}, {0x9E6, 0x9EF}, {0xA66, 0xA6F},
    {0xAE6, 0xAEF}, {0xB66, 0xB6F}, {0xBE6, 0xBEF}, {0xC66, 0xC6F}, {0xCE6, 0xCEF}, {0xD66, 0xD6F}, {0xDE6, 0xDEF},
    {0xE50, 0xE59}, {0xED0, 0xED9}, {0xF20, 0xF29}, {0x1040, 0x1049}, {0x1090, 0x1099}, {0x17E0, 0x17E9},
    {0x1810, 0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19D9}, {0x1A80, 0x1A89}, {0x1A90, 0x1A99}, {0x1B50, 0x1B59},
    {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49}, {0x1C50, 0x1C59}, {0xA620, 0xA629}, {0xA8D0, 0xA8D9}, {0xA900, 0xA909},
    {0xA9D0, 0xA9D9}, {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x104A0, 0x104A9},
    {0x10D30, 0x10D39}, {0x11066, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9},
    {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9},
    {0x11730, 0x11739}, {0x118E0, 0x118E9}, {0x11950, 0x11959}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59},
    {0x11DA0, 0x11DA9}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x1D7CE, 0x1D7FF},
    {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E950, 0x1E959}, {0x1FBF0, 0x1FBF9},
};

static int add_class_escape(set_t *t, int c, int neg) {
  static const range_t D[] = {{'0', '9'}};
  static const range_t W[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}, {0x80, GC_RE_MAXCP}};
  static const range_t S_ALL[] = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                  {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
  static const range_t S_ANY[] = {{0x09, 0x0D}, {0x1C, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
                                  {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                  {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  const int lower = c >= 'a', wide = lower == neg; /* the larger set: \s in a negated class, \S read as it is */
  const int digits = c == 'd' || c == 'D', nnd = (int)(sizeof ND / sizeof *ND);
  const range_t *r = digits ? (wide ? ND : D) : c == 'w' || c == 'W' ? W : wide ? S_ANY : S_ALL;
  int n = digits ? (wide ? nnd : 1) : c == 'w' || c == 'W' ? (wide ? 5 : 4) : wide ? 11 : 9;
  set_t u = {0};
  for (int i = 0; i < n; i++)
    if (!set_add(&u, r[i].lo, r[i].hi)) return free(u.r), 0;
  if (!lower && !set_not(&u)) return free(u.r), 0;
  for (int i = 0; i < u.n; i++)
    if (!set_add(t, u.r[i].lo, u.r[i].hi)) return free(u.r), 0;
  free(u.r);
  return 1;
}

/* A new set (normalised t, taken over), its index; -1 on error. */
static int new_set(re_parse_t *p, set_t *t) {
  set_norm(t);
  if (!grow((void **)&p->sets, &p->scap, p->nsets + 1, sizeof *p->sets)) return free(t->r), oom(p);
  p->sets[p->nsets] = *t;
  *t = (set_t){0};
  return p->nsets++;
}

static int node(re_parse_t *p, int op, int a, int b) {
  if (p->nast >= 8 * (int)p->n + 16) return perr(p, "the pattern is too large");
  if (!grow((void **)&p->ast, &p->acap, p->nast + 1, sizeof *p->ast)) return oom(p);
  p->ast[p->nast] = (ast_t){.op = (uint8_t)op, .a = a, .b = b};
  return p->nast++;
}

/* ---- the parser -------------------------------------------------------- */

static int peek(const re_parse_t *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

/* The UTF-8 character at p->i (consumed); -1 on an invalid one. */
static int32_t utf8(re_parse_t *p) {
  const unsigned char *s = (const unsigned char *)p->s + p->i;
  size_t left = p->n - p->i;
  uint32_t c = s[0];
  int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
  if (k < 0 || (size_t)k >= left) return perr(p, "the pattern is not UTF-8");
  c = k ? c & (0x3F >> k) : c;
  for (int j = 1; j <= k; j++) {
    if ((s[j] & 0xC0) != 0x80) return perr(p, "the pattern is not UTF-8");
    c = c << 6 | (s[j] & 0x3F);
  }
  if ((k == 1 && c < 0x80) || (k == 2 && c < 0x800) || (k == 3 && (c < 0x10000 || c > GC_RE_MAXCP)) ||
      (c >= 0xD800 && c <= 0xDFFF))
    return perr(p, "the pattern is not UTF-8");
  p->i += (size_t)k + 1;
  return (int32_t)c;
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* After a '\' (p->i at the escaped byte, in a class where cls): the one
 * character it stands for (consumed), or -2 with a class escape's letter
 * in *esc (d D s S w W), or -1 on error. */
static int32_t escape(re_parse_t *p, int cls, int *esc) {
  int c = peek(p);
  if (c < 0) return perr(p, "the pattern ends in a '\\'");
  if (c && strchr("dDsSwW", c)) return p->i++, *esc = c, -2; /* (strchr finds a NUL too) */
  static const char SIMPLE[] = "t\tn\nr\rf\fv\v";
  const char *t = c ? strchr("tnrfv", c) : NULL;
  if (t) return p->i++, SIMPLE[2 * (t - "tnrfv") + 1];
  if (c == 'b' && cls) return p->i++, 8;
  if (c == '0' && !(p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')) return p->i++, 0;
  if (c == 'x' || c == 'u') {
    int nd = c == 'x' ? 2 : 4;
    uint32_t v = 0;
    for (int j = 1; j <= nd; j++) {
      int h = p->i + (size_t)j < p->n ? hexval((unsigned char)p->s[p->i + (size_t)j]) : -1;
      if (h < 0) return perr(p, c == 'x' ? "\\x takes two hex digits" : "\\u takes four hex digits");
      v = v * 16 + (uint32_t)h;
    }
    if (v >= 0xD800 && v <= 0xDFFF) return perr(p, "a \\u escape of a surrogate is not supported");
    p->i += (size_t)nd + 1;
    return (int32_t)v;
  }
  if (c >= '1' && c <= '9') return perr(p, "backreferences are not supported");
  if (c == 'b' || c == 'B') return perr(p, "word boundaries (\\b, \\B) are not supported");
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    char what[64];
    snprintf(what, sizeof what, "the escape \\%c is not supported", c);
    return perr(p, what);
  }
  return utf8(p); /* an escaped character that is not a letter or digit: itself */
}

/* A class [...] (p->i after its '['): its set's node. */
static int parse_class(re_parse_t *p) {
  set_t t = {0};
  int neg = peek(p) == '^';
  p->i += (size_t)neg;
  if (peek(p) == ']') return perr(p, "an empty class [] or [^] is not supported");
  while (peek(p) != ']') {
    if (peek(p) < 0) return free(t.r), perr(p, "a class [ is not closed");
    if (peek(p) == '[') return free(t.r), perr(p, "a '[' inside a class must be escaped (\\[)");
    int32_t lo, hi;
    int esc = 0;
    if (peek(p) == '\\') p->i++, lo = escape(p, 1, &esc);
    else lo = utf8(p);
    if (lo == -1) return free(t.r), -1;
    if (esc) {
      if (!add_class_escape(&t, esc, neg)) return free(t.r), oom(p);
      if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']')
        return free(t.r), perr(p, "a range from a class escape is not supported");
      continue;
    }
    hi = lo;
    if (peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
      p->i++;
      esc = 0;
      if (peek(p) == '\\') p->i++, hi = escape(p, 1, &esc);
      else hi = utf8(p);
      if (hi == -1) return free(t.r), -1;
      if (esc) return free(t.r), perr(p, "a range to a class escape is not supported");
      if (hi < lo) return free(t.r), perr(p, "a range out of order");
    }
    if (!set_add(&t, (uint32_t)lo, (uint32_t)hi)) return free(t.r), oom(p);
  }
  p->i++;
  set_norm(&t);
  if (neg && !set_not(&t)) return free(t.r), oom(p);
  int k = new_set(p, &t);
  return k < 0 ? -1 : node(p, A_SET, k, 0);
}

/* The set of one character c, or of a class escape's. */
static int char_node(re_parse_t *p, int32_t c, int esc) {
  set_t t = {0};
  if (esc ? !add_class_escape(&t, esc, 0) : !set_add(&t, (uint32_t)c, (uint32_t)c)) return free(t.r), oom(p);
  int k = new_set(p, &t);
  return k < 0 ? -1 : node(p, A_SET, k, 0);
}

static int parse_alt(re_parse_t *p, int depth);

/* An atom: a character, a class, '.', a group, '^' or '$'. */
static int parse_atom(re_parse_t *p, int depth) {
  int c = peek(p);
  switch (c) {
    case '(': {
      p->i++;
      if (peek(p) == '?') {
        if (p->i + 1 < p->n && p->s[p->i + 1] == ':') {
          p->i += 2;
        } else {
          const char *what = p->i + 1 < p->n && (p->s[p->i + 1] == '=' || p->s[p->i + 1] == '!')
                                 ? "lookahead is not supported"
                             : p->i + 2 < p->n && p->s[p->i + 1] == '<' && (p->s[p->i + 2] == '=' || p->s[p->i + 2] == '!')
                                 ? "lookbehind is not supported"
                                 : "groups (?...) other than (?:...) are not supported (named groups, flags)";
          p->i--; /* named at the group's '(' */
          return perr(p, what);
        }
      }
      int a = parse_alt(p, depth + 1);
      if (a < 0) return -1;
      if (peek(p) != ')') return perr(p, "a group ( is not closed");
      p->i++;
      return a;
    }
    case '[': p->i++; return parse_class(p);
    case '.': {
      p->i++;
      set_t t = {0};
      if (!set_add(&t, 0x0A, 0x0A) || !set_add(&t, 0x0D, 0x0D) || !set_add(&t, 0x2028, 0x2029))
        return free(t.r), oom(p);
      set_norm(&t);
      if (!set_not(&t)) return free(t.r), oom(p);
      int k = new_set(p, &t);
      return k < 0 ? -1 : node(p, A_SET, k, 0);
    }
    case '^': p->i++; return node(p, A_BOL, 0, 0);
    case '$': p->i++; return node(p, A_EOL, 0, 0);
    case '*': case '+': case '?': return perr(p, "nothing to repeat");
    case '{': return perr(p, "a '{' that is not a quantifier must be escaped (\\{)");
    case '\\': {
      p->i++;
      int esc = 0;
      int32_t ch = escape(p, 0, &esc);
      return ch == -1 ? -1 : char_node(p, ch, esc);
    }
    default: {
      int32_t ch = utf8(p);
      return ch < 0 ? -1 : char_node(p, ch, 0);
    }
  }
}

/* A decimal count at p->i (0 .. REP_MAX), or -1 where there is none, -2
 * above REP_MAX. */
static int count(re_parse_t *p) {
  if (peek(p) < '0' || peek(p) > '9') return -1;
  long v = 0;
  while (peek(p) >= '0' && peek(p) <= '9') {
    v = v * 10 + (peek(p) - '0'), p->i++;
    if (v > REP_MAX) return -2;
  }
  return (int)v;
}

/* An atom and its quantifiers. */
static int parse_quant(re_parse_t *p, int depth) {
  int a = parse_atom(p, depth);
  if (a < 0) return -1;
  int c = peek(p);
  if (c != '*' && c != '+' && c != '?' && c != '{') return a;
  if (p->ast[a].op == A_BOL || p->ast[a].op == A_EOL) return perr(p, "nothing to repeat");
  int min, max;
  const size_t at = p->i; /* errors name the quantifier's first byte */
  p->i++;
  if (c == '{') {
    min = count(p);
    max = min;
    if (min >= 0 && peek(p) == ',') {
      p->i++;
      max = peek(p) == '}' ? -1 : count(p);
      if (max == -1 && peek(p) != '}') min = -1;
    }
    if (min == -2 || max == -2) return p->i = at, perr(p, "a repetition count above 1000");
    if (min < 0 || peek(p) != '}')
      return p->i = at, perr(p, "a '{' that is not a quantifier {n}, {n,} or {n,m} must be escaped (\\{)");
    p->i++;
    if (max >= 0 && max < min) return p->i = at, perr(p, "a quantifier {n,m} with m below n");
  } else {
    min = c == '+', max = c == '?' ? 1 : -1;
  }
  if (peek(p) == '?') p->i++; /* lazy: the same strings */
  c = peek(p);
  if (c == '*' || c == '+' || c == '?' || c == '{') return perr(p, "nothing to repeat");
  int r = node(p, A_REP, a, 0);
  if (r >= 0) p->ast[r].min = min, p->ast[r].max = max;
  return r;
}

/* Atoms in a row, up to '|', ')' or the end. */
static int parse_cat(re_parse_t *p, int depth) {
  int left = -1;
  while (p->i < p->n && peek(p) != '|' && peek(p) != ')') {
    int q = parse_quant(p, depth);
    if (q < 0) return -1;
    left = left < 0 ? q : node(p, A_CAT, left, q);
    if (left < 0) return -1;
  }
  return left < 0 ? node(p, A_EMPTY, 0, 0) : left;
}

static int parse_alt(re_parse_t *p, int depth) {
  if (depth > 64) return perr(p, "groups nest too deeply");
  int left = parse_cat(p, depth);
  while (left >= 0 && peek(p) == '|') {
    p->i++;
    int r = parse_cat(p, depth);
    left = r < 0 ? -1 : node(p, A_ALT, left, r);
  }
  return left;
}

/* ---- the NFA ----------------------------------------------------------- */

enum { N_EPS, N_SET, N_BOL, N_EOL, N_MATCH };
typedef struct {
  uint8_t op;
  int set;        /* N_SET: its set */
  int out1, out2; /* -1: none (N_SET, N_BOL, N_EOL: out1 only) */
} nstate_t;

typedef struct {
  re_parse_t *p;
  nstate_t *st;
  int n, cap;
} nfa_t;

static int nnew(nfa_t *m, int op, int set) {
  if (m->n >= NFA_MAX) return perr(m->p, "the pattern's automaton is too large (repetition counts multiply it)");
  if (!grow((void **)&m->st, &m->cap, m->n + 1, sizeof *m->st)) return oom(m->p);
  m->st[m->n] = (nstate_t){(uint8_t)op, set, -1, -1};
  return m->n++;
}

static int build(nfa_t *m, int t, int *s, int *e);

/* A chain of A_CAT (or A_ALT) nodes from t down its left side (the parser
 * makes them left-deep: one a character in a row, one an alternative) as
 * states from *s to *e, a loop rather than a recursion a node: a long
 * pattern must not exhaust the stack. 0: error. */
static int build_chain(nfa_t *m, int t, int *s, int *e) {
  const int op = m->p->ast[t].op;
  int n = 0, ok = 1;
  for (int k = t; m->p->ast[k].op == op; k = m->p->ast[k].a) n++;
  int *part = malloc((size_t)(n + 1) * sizeof *part); /* the chain's parts, left to right */
  if (!part) return oom(m->p), 0;
  int k = t;
  for (int i = n; i > 0; i--, k = m->p->ast[k].a) part[i] = m->p->ast[k].b;
  part[0] = k;
  int at = -1, split = -1;
  for (int i = 0; ok && i <= n; i++) {
    int ps, pe;
    ok = build(m, part[i], &ps, &pe);
    if (!ok) break;
    if (op == A_CAT) { /* each part's end leads to the next part */
      if (i) m->st[at].out1 = ps;
      else *s = ps;
      at = pe, *e = pe;
      continue;
    }
    if (!i && ((*s = nnew(m, N_EPS, -1)) < 0 || (*e = nnew(m, N_EPS, -1)) < 0)) ok = 0;
    int sp = i < n ? nnew(m, N_EPS, -1) : -2; /* a split into this part or the ones after it */
    if (!ok || sp == -1) {
      ok = 0;
      break;
    }
    if (sp >= 0) m->st[sp].out1 = ps;
    if (split < 0) m->st[*s].out1 = sp >= 0 ? sp : ps;
    else m->st[split].out2 = sp >= 0 ? sp : ps;
    split = sp, m->st[pe].out1 = *e;
  }
  free(part);
  return ok;
}

/* Tree node t as states from *s to *e (an N_EPS whose out1 is unset). 0: error. */
static int build(nfa_t *m, int t, int *s, int *e) {
  const ast_t x = m->p->ast[t];
  int sa, ea;
  switch (x.op) {
    case A_SET: case A_BOL: case A_EOL:
      if ((*s = nnew(m, x.op == A_SET ? N_SET : x.op == A_BOL ? N_BOL : N_EOL, x.a)) < 0 || (*e = nnew(m, N_EPS, -1)) < 0)
        return 0;
      m->st[*s].out1 = *e;
      return 1;
    case A_EMPTY: return (*s = *e = nnew(m, N_EPS, -1)) >= 0;
    case A_CAT: case A_ALT: return build_chain(m, t, s, e);
    default: { /* A_REP: min copies, then a loop or max - min optional copies */
      int at = nnew(m, N_EPS, -1);
      if (at < 0) return 0;
      *s = at;
      for (int k = 0; k < x.min; k++) {
        if (!build(m, x.a, &sa, &ea)) return 0;
        m->st[at].out1 = sa, at = ea;
      }
      if (x.max < 0) {
        if (!build(m, x.a, &sa, &ea) || (*e = nnew(m, N_EPS, -1)) < 0) return 0;
        m->st[at].out1 = sa, m->st[at].out2 = *e, m->st[ea].out1 = at;
        return 1;
      }
      if ((*e = nnew(m, N_EPS, -1)) < 0) return 0;
      for (int k = x.min; k < x.max; k++) {
        if (!build(m, x.a, &sa, &ea)) return 0;
        m->st[at].out1 = sa, m->st[at].out2 = *e, at = ea;
      }
      m->st[at].out1 = *e;
      return 1;
    }
  }
}

/* ---- automata: tables over classes --------------------------------------- */

typedef struct {
  int nst, ncls, cap;
  int32_t *next; /* [cap * ncls] (-1: none) */
  uint8_t *acc;  /* [cap] */
} dfa_t;

static int dfa_room(re_parse_t *p, dfa_t *d, int need) {
  if (need <= d->cap) return 1;
  int k = d->cap ? d->cap * 2 : 64;
  while (k < need) k *= 2;
  int32_t *nx = realloc(d->next, (size_t)k * (size_t)d->ncls * sizeof *nx);
  if (nx) d->next = nx;
  uint8_t *ac = nx ? realloc(d->acc, (size_t)k) : NULL;
  if (!ac) return oom(p), 0;
  d->acc = ac, d->cap = k;
  return 1;
}

static void dfa_free(dfa_t *d) { free(d->next), free(d->acc), memset(d, 0, sizeof *d); }

static int spend(re_parse_t *p, long w) {
  if ((p->work += w) <= WORK_MAX) return 1;
  gerr(p, "the pattern is too complex to compile");
  return 0;
}

static int u32_cmp(const void *a, const void *b) {
  const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The classes: the boundaries of every set's ranges. */
static int classes(re_parse_t *p, uint32_t **lo, int *ncls) {
  int nb = 4;
  for (int k = 0; k < p->nsets; k++) nb += 2 * p->sets[k].n;
  if (!spend(p, 32L * nb)) return 0; /* (the sort) */
  uint32_t *b = malloc((size_t)nb * sizeof *b);
  if (!b) return oom(p), 0;
  int n = 0;
  b[n++] = 0, b[n++] = 0x10000; /* (the BMP's end: count_chars leaves the characters past it out) */
  b[n++] = 0xD800, b[n++] = 0xE000; /* (the surrogates: never a character; subsets leaves them out) */
  for (int k = 0; k < p->nsets; k++)
    for (int i = 0; i < p->sets[k].n; i++) {
      b[n++] = p->sets[k].r[i].lo;
      if (p->sets[k].r[i].hi < GC_RE_MAXCP) b[n++] = p->sets[k].r[i].hi + 1;
    }
  qsort(b, (size_t)n, sizeof *b, u32_cmp);
  int k = 0;
  for (int i = 1; i < n; i++)
    if (b[i] != b[k]) b[++k] = b[i];
  *ncls = k + 1, *lo = b;
  if (*ncls > CLS_MAX) return gerr(p, "the pattern tells apart too many ranges of characters"), 0;
  return 1;
}

static int class_of(const uint32_t *lo, int ncls, uint32_t cp) {
  int a = 0, b = ncls - 1;
  while (a < b) {
    int m = (a + b + 1) / 2;
    if (lo[m] <= cp) a = m;
    else b = m - 1;
  }
  return a;
}

/* The closure of bits (W words) over empty moves (^ where bol, $ where eol);
 * the work it took. */
static long closure(const nfa_t *m, uint64_t *bits, int W, int *stack, int bol, int eol) {
  int top = 0;
  long work = W;
  for (int w = 0; w < W; w++)
    for (uint64_t x = bits[w]; x; x &= x - 1) stack[top++] = w * 64 + __builtin_ctzll(x);
  while (top) {
    const nstate_t *q = &m->st[stack[--top]];
    int o[2] = {-1, -1};
    work++;
    if (q->op == N_EPS) o[0] = q->out1, o[1] = q->out2;
    else if ((q->op == N_BOL && bol) || (q->op == N_EOL && eol)) o[0] = q->out1;
    for (int j = 0; j < 2; j++)
      if (o[j] >= 0 && !(bits[o[j] / 64] >> (o[j] % 64) & 1)) bits[o[j] / 64] |= 1ull << (o[j] % 64), stack[top++] = o[j];
  }
  return work;
}

static uint64_t hash_bits(const uint64_t *b, int W) {
  uint64_t h = 1469598103934665603ull;
  for (int w = 0; w < W; w++) h = (h ^ b[w]) * 1099511628211ull, h ^= h >> 29;
  return h;
}

/* Subset construction from NFA start s0 (its MATCH state fin) over the
 * classes; set k's classes given by crun (its ranges as class runs).
 * The empty set is no state (-1). */
static int subsets(re_parse_t *p, const nfa_t *m, int s0, int fin, const uint32_t *clo, int ncls, dfa_t *d) {
  const int W = (m->n + 63) / 64, HS = 2 * DFA_MAX;
  uint64_t *sets = NULL, *buck = calloc((size_t)ncls * (size_t)W, sizeof *buck), *tmp = calloc((size_t)W, sizeof *tmp);
  int *stack = malloc((size_t)m->n * 2 * sizeof *stack), *hash = malloc((size_t)HS * sizeof *hash);
  int *used = malloc((size_t)ncls * sizeof *used), nsets = 0, scap = 0, ok = 0;
  uint8_t *inb = calloc((size_t)ncls, 1);
  if (!buck || !tmp || !stack || !hash || !used || !inb) goto out;
  for (int i = 0; i < HS; i++) hash[i] = -1;
  d->ncls = ncls, d->nst = 0;
  /* the start: closure with ^ */
  if (!grow((void **)&sets, &scap, W, sizeof *sets)) goto out;
  memset(sets, 0, (size_t)W * sizeof *sets);
  sets[s0 / 64] |= 1ull << (s0 % 64);
  closure(m, sets, W, stack, 1, 0); /* (the one before the loop: NFA_MAX at most) */
  nsets = 1;
  for (int di = 0; di < nsets; di++) {
    if (!dfa_room(p, d, di + 1)) goto fail;
    d->nst = di + 1;
    /* accepting: MATCH within reach over empty moves and $ (and ^ at the start) */
    memcpy(tmp, sets + (size_t)di * W, (size_t)W * sizeof *tmp);
    if (!spend(p, closure(m, tmp, W, stack, di == 0, 1))) goto fail;
    d->acc[di] = (uint8_t)(tmp[fin / 64] >> (fin % 64) & 1);
    int nused = 0;
    for (int w = 0; w < W; w++)
      for (uint64_t x = sets[(size_t)di * W + w]; x; x &= x - 1) {
        const nstate_t *q = &m->st[w * 64 + __builtin_ctzll(x)];
        if (q->op != N_SET) continue;
        const set_t *t = &p->sets[q->set];
        long work = 8;
        for (int r = 0; r < t->n; r++)
          for (int c = class_of(clo, ncls, t->r[r].lo); c < ncls && clo[c] <= t->r[r].hi; c++, work++) {
            if (clo[c] >= 0xD800 && clo[c] < 0xE000) continue; /* a surrogate: no character */
            if (!inb[c]) inb[c] = 1, used[nused++] = c;
            buck[(size_t)c * W + q->out1 / 64] |= 1ull << (q->out1 % 64);
          }
        if (!spend(p, work)) goto fail;
      }
    for (int c = 0; c < ncls; c++) d->next[(size_t)di * ncls + c] = -1;
    for (int u = 0; u < nused; u++) {
      int c = used[u];
      uint64_t *b = buck + (size_t)c * W;
      if (!spend(p, closure(m, b, W, stack, 0, 0) + 2L * W)) goto fail;
      uint64_t h = hash_bits(b, W);
      int slot = (int)(h % (uint64_t)HS), found = -1;
      for (; hash[slot] >= 0; slot = (slot + 1) % HS) /* (the start is not in it: ^ made it) */
        if (!memcmp(sets + (size_t)hash[slot] * W, b, (size_t)W * sizeof *b)) {
          found = hash[slot];
          break;
        }
      if (found < 0) {
        if (nsets >= DFA_MAX) {
          gerr(p, "the pattern's automaton is too large");
          goto fail;
        }
        if (!grow((void **)&sets, &scap, (nsets + 1) * W, sizeof *sets)) goto out;
        memcpy(sets + (size_t)nsets * W, b, (size_t)W * sizeof *b);
        hash[slot] = found = nsets++;
      }
      d->next[(size_t)di * ncls + c] = found;
      memset(b, 0, (size_t)W * sizeof *b);
      inb[c] = 0;
    }
  }
  ok = 1;
out:
  if (!ok) oom(p);
fail:
  free(sets), free(buck), free(tmp), free(stack), free(hash), free(used), free(inb);
  return ok && !p->rc;
}

/* d with only its states that reach an accepting one (others' moves -1),
 * renumbered in order; 0 with an error where the start is not among them. */
static int prune(re_parse_t *p, dfa_t *d, const char *none) {
  const int n = d->nst, C = d->ncls;
  uint8_t *live = calloc((size_t)n, 1);
  int *map = malloc((size_t)n * sizeof *map);
  if (!live || !map) return free(live), free(map), oom(p), 0;
  for (int s = 0; s < n; s++) live[s] = d->acc[s];
  for (int changed = 1; changed;) { /* to a fixed point: few rounds for the patterns people write */
    changed = 0;
    if (!spend(p, (long)n * C)) return free(live), free(map), 0;
    for (int s = n - 1; s >= 0; s--) /* (from the end: states made later lie nearer acceptance) */
      for (int c = 0; !live[s] && c < C; c++) {
        int t = d->next[(size_t)s * C + c];
        if (t >= 0 && live[t]) live[s] = 1, changed = 1;
      }
  }
  if (!live[0]) {
    free(live), free(map);
    return gerr(p, none), 0;
  }
  int k = 0;
  for (int s = 0; s < n; s++) map[s] = live[s] ? k++ : -1;
  for (int s = 0; s < n; s++) {
    if (!live[s]) continue;
    for (int c = 0; c < C; c++) {
      int t = d->next[(size_t)s * C + c];
      d->next[(size_t)map[s] * C + c] = t >= 0 ? map[t] : -1;
    }
    d->acc[map[s]] = d->acc[s];
  }
  d->nst = k;
  free(live), free(map);
  return 1;
}

/* d minimised (Moore's refinement), its states renumbered from the start
 * in breadth-first order. */
static int minimise(re_parse_t *p, dfa_t *d) {
  const int n = d->nst, C = d->ncls, HS = 2 * n + 1;
  int *blk = malloc((size_t)n * sizeof *blk), *nb = malloc((size_t)n * sizeof *nb);
  int *hash = malloc((size_t)HS * sizeof *hash), *rep = malloc((size_t)n * sizeof *rep);
  int *order = malloc((size_t)n * sizeof *order), ok = 0, nblk = 0;
  int32_t *nx = NULL;
  if (!blk || !nb || !hash || !rep || !order) goto out;
  for (int s = 0; s < n; s++) blk[s] = d->acc[s];
  for (int prev = -1;;) {
    if (!spend(p, 2L * n * C)) goto fail;
    for (int i = 0; i < HS; i++) hash[i] = -1;
    nblk = 0;
    for (int s = 0; s < n; s++) {
      uint64_t h = (uint64_t)blk[s] * 0x9E3779B97F4A7C15ull;
      for (int c = 0; c < C; c++) {
        int t = d->next[(size_t)s * C + c];
        h = (h ^ (uint64_t)(t < 0 ? -1 : blk[t])) * 1099511628211ull;
      }
      int slot = (int)(h % (uint64_t)HS);
      for (; hash[slot] >= 0; slot = (slot + 1) % HS) {
        int r = rep[hash[slot]], same = blk[r] == blk[s];
        for (int c = 0; same && c < C; c++) {
          int a = d->next[(size_t)r * C + c], b = d->next[(size_t)s * C + c];
          same = (a < 0 ? -1 : blk[a]) == (b < 0 ? -1 : blk[b]);
        }
        if (same) break;
      }
      if (hash[slot] < 0) hash[slot] = nblk, rep[nblk++] = s;
      nb[s] = hash[slot];
    }
    memcpy(blk, nb, (size_t)n * sizeof *blk);
    if (nblk == prev) break;
    prev = nblk;
  }
  /* breadth-first from the start's block */
  for (int b = 0; b < nblk; b++) nb[b] = -1;
  int head = 0, tail = 0;
  nb[blk[0]] = tail, order[tail++] = blk[0];
  while (head < tail) {
    int r = rep[order[head++]];
    for (int c = 0; c < C; c++) {
      int t = d->next[(size_t)r * C + c];
      if (t >= 0 && nb[blk[t]] < 0) nb[blk[t]] = tail, order[tail++] = blk[t];
    }
  }
  uint8_t *na = NULL;
  if (!(nx = malloc((size_t)tail * C * sizeof *nx)) || !(na = malloc((size_t)tail))) {
    free(nx), nx = NULL;
    goto out;
  }
  for (int i = 0; i < tail; i++) {
    int r = rep[order[i]];
    for (int c = 0; c < C; c++) {
      int t = d->next[(size_t)r * C + c];
      nx[(size_t)i * C + c] = t < 0 ? -1 : nb[blk[t]];
    }
    na[i] = d->acc[r];
  }
  free(d->next), free(d->acc);
  d->next = nx, d->acc = na, d->nst = d->cap = tail;
  ok = 1;
out:
  if (!ok) oom(p);
fail:
  free(blk), free(nb), free(hash), free(rep), free(order);
  return ok && !p->rc;
}

/* d crossed with a count of characters k: state (s, k), k up to maxlen
 * (none after it), or up to minlen where no maximum (then it stays);
 * accepting where s is and k >= minlen. Characters past the BMP are left
 * out: a string with a length bound then has the same length in code
 * points (JSON Schema's) and in UTF-16 units (JavaScript's). */
static int count_chars(re_parse_t *p, dfa_t *d, const uint32_t *cls_lo, uint32_t minlen, uint32_t maxlen) {
  const int C = d->ncls, HS = 4 * GC_RE_STATES + 1, bounded = maxlen != UINT32_MAX;
  const uint32_t K = bounded ? maxlen : minlen;
  typedef struct { int s; uint32_t k; } sk_t;
  sk_t *q = malloc((size_t)GC_RE_STATES * sizeof *q);
  int *hash = malloc((size_t)HS * sizeof *hash), n = 1, ok = 0;
  dfa_t o = {.ncls = C};
  if (!q || !hash) goto out;
  for (int i = 0; i < HS; i++) hash[i] = -1;
  q[0] = (sk_t){0, 0};
  hash[0] = 0; /* (0, 0) hashes to slot 0 */
  for (int i = 0; i < n; i++) {
    if (!dfa_room(p, &o, i + 1) || !spend(p, 2L * C)) goto fail;
    o.nst = i + 1;
    o.acc[i] = (uint8_t)(d->acc[q[i].s] && q[i].k >= minlen);
    for (int c = 0; c < C; c++) {
      int t = d->next[(size_t)q[i].s * C + c];
      o.next[(size_t)i * C + c] = -1;
      if (t < 0 || (bounded && q[i].k == K) || cls_lo[c] >= 0x10000) continue;
      sk_t to = {t, q[i].k < K ? q[i].k + 1 : K};
      int slot = (int)(((uint64_t)to.s * 0x9E3779B97F4A7C15ull ^ to.k * 0xC2B2AE3D27D4EB4Full) % (uint64_t)HS);
      if (!to.s && !to.k) slot = 0;
      while (hash[slot] >= 0 && !(q[hash[slot]].s == to.s && q[hash[slot]].k == to.k)) slot = (slot + 1) % HS;
      if (hash[slot] < 0) {
        if (n >= GC_RE_STATES || (long)(n + 1) * C > CELLS_MAX) {
          gerr(p, "the pattern with these minLength/maxLength needs too many states (lengths multiply them)");
          goto fail;
        }
        q[n] = to, hash[slot] = n++;
      }
      o.next[(size_t)i * C + c] = hash[slot];
    }
  }
  ok = 1;
out:
  if (!ok) oom(p);
fail:
  free(q), free(hash);
  if (!ok || p->rc) return dfa_free(&o), 0;
  dfa_free(d);
  *d = o;
  return 1;
}

static void parse_free(re_parse_t *p) {
  for (int k = 0; k < p->nsets; k++) free(p->sets[k].r);
  free(p->sets), free(p->ast);
}

/* The NFA of the parsed tree root under mode: its start *s0 and MATCH *fin. */
static int nfa_of(re_parse_t *p, nfa_t *m, int root, int mode, int *s0, int *fin) {
  int rs, re;
  if (!build(m, root, &rs, &re) || (*fin = nnew(m, N_MATCH, -1)) < 0) return 0;
  if (mode == GC_RE_FULL) {
    m->st[re].out1 = *fin, *s0 = rs;
    return 1;
  }
  set_t t = {0}; /* search: any characters before and after a match */
  if (!set_add(&t, 0, GC_RE_MAXCP)) return oom(p), 0;
  int any = new_set(p, &t), lead, loop, tail, tl;
  if (any < 0 || (lead = nnew(m, N_EPS, -1)) < 0 || (loop = nnew(m, N_SET, any)) < 0 ||
      (tail = nnew(m, N_EPS, -1)) < 0 || (tl = nnew(m, N_SET, any)) < 0)
    return 0;
  m->st[lead].out1 = rs, m->st[lead].out2 = loop, m->st[loop].out1 = lead;
  m->st[re].out1 = tail, m->st[tail].out1 = *fin, m->st[tail].out2 = tl, m->st[tl].out1 = tail;
  *s0 = lead;
  return 1;
}

int gc_re_compile(const char *pat, size_t n, int mode, uint32_t minlen, uint32_t maxlen, gc_re_t *out, gc_err_t *e) {
  memset(out, 0, sizeof *out);
  re_parse_t p = {.s = pat, .n = n, .e = e};
  nfa_t m = {.p = &p};
  dfa_t d = {0};
  uint32_t *clo = NULL;
  int s0, fin, ncls = 0;
  if (n > GC_RE_MAXLEN) return gc_err_set(e, GC_EINVAL, "the pattern is longer than %d bytes", GC_RE_MAXLEN);
  int root = parse_alt(&p, 0);
  if (root >= 0 && p.i < p.n) perr(&p, "a ')' without its '('");
  if (!p.rc && nfa_of(&p, &m, root, mode, &s0, &fin) && classes(&p, &clo, &ncls) &&
      subsets(&p, &m, s0, fin, clo, ncls, &d) && prune(&p, &d, "no string matches the pattern") && minimise(&p, &d) &&
      ((minlen == 0 && maxlen == UINT32_MAX) ||
       (count_chars(&p, &d, clo, minlen, maxlen) && /* (not minimised again: a chain takes Moore a round a state) */
        prune(&p, &d, "no string of the lengths minLength and maxLength allow matches the pattern")))) {
    static uint64_t made; /* compilations so far */
    out->id = __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
    out->ncls = ncls, out->nst = d.nst;
    for (uint32_t cp = 0; cp < 128; cp++) out->ascii[cp] = (uint8_t)class_of(clo, ncls, cp);
    out->cls_lo = clo, clo = NULL;
    out->next = malloc((size_t)d.nst * ncls * sizeof *out->next);
    out->acc = malloc((size_t)d.nst);
    if (!out->next || !out->acc) {
      oom(&p);
    } else {
      for (size_t i = 0; i < (size_t)d.nst * ncls; i++) out->next[i] = (int16_t)d.next[i];
      memcpy(out->acc, d.acc, (size_t)d.nst);
    }
  }
  if (!p.rc && !out->next) oom(&p);
  free(clo), free(m.st), dfa_free(&d), parse_free(&p);
  if (p.rc) gc_re_free(out);
  return p.rc;
}

void gc_re_free(gc_re_t *r) {
  free(r->cls_lo), free(r->next), free(r->acc);
  memset(r, 0, sizeof *r);
}

int gc_re_class_of(const gc_re_t *r, uint32_t cp) { return class_of(r->cls_lo, r->ncls, cp); }

int gc_re_may(const gc_re_t *r, int s, uint32_t lo, uint32_t hi) {
  const uint32_t part[2][2] = {{lo, hi < 0xD7FF ? hi : 0xD7FF}, {lo > 0xE000 ? lo : 0xE000, hi}};
  for (int j = 0; j < 2; j++)
    for (int c = part[j][0] <= part[j][1] ? gc_re_class(r, part[j][0]) : r->ncls; c < r->ncls && r->cls_lo[c] <= part[j][1]; c++)
      if (r->next[s * r->ncls + c] >= 0) return 1;
  return 0;
}

int gc_re_matches(const gc_re_t *r, const char *s, size_t n) {
  int st = 0;
  for (size_t i = 0; i < n;) {
    const unsigned char *u = (const unsigned char *)s + i;
    int k = u[0] < 0x80 ? 0 : u[0] < 0xE0 ? 1 : u[0] < 0xF0 ? 2 : 3;
    if (i + (size_t)k >= n) return 0; /* a character cut short */
    uint32_t cp = k ? u[0] & (0x3F >> k) : u[0];
    for (int j = 1; j <= k; j++) cp = cp << 6 | (u[j] & 0x3F);
    if (cp > GC_RE_MAXCP || (st = gc_re_step(r, st, cp)) < 0) return 0;
    i += (size_t)k + 1;
  }
  return r->acc[st];
}
