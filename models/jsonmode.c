/* jsonmode.c — the JSON-object prefix recognizer and the vocabulary's
 * pieces run through it (jsonmode.h). */
#include "jsonmode.h"

#include "jsonschema_impl.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Where the recognizer is: what the next byte may be. */
enum jstate {
  J_START,        /* before the object: whitespace, '{' */
  J_KEY_OR_END,   /* after '{': a key's '"' or '}' */
  J_KEY,          /* after an object's ',': a key's '"' */
  J_COLON,        /* after a key: ':' */
  J_VALUE,        /* after ':' or an array's ',': a value */
  J_VALUE_OR_END, /* after '[': a value or ']' */
  J_AFTER,        /* after a value in an object or array: ',' or its closer */
  J_STR,          /* in a string */
  J_ESC,          /* after a string's '\' */
  J_HEX,          /* in \uXXXX: aux hex digits left */
  J_UTF8,         /* in a character: aux continuation bytes left, the next in [lo, hi] */
  J_LIT,          /* in true, false or null (lit): aux bytes matched */
  J_NEG,          /* a number's '-' */
  J_ZERO,         /* its integer part "0" */
  J_INT,          /* its integer part, 1-9 and digits */
  J_DOT,          /* its '.' */
  J_FRAC,         /* its fraction's digits */
  J_E,            /* its 'e' or 'E' */
  J_ESIGN,        /* the exponent's sign */
  J_EXP,          /* the exponent's digits */
  J_ELIT,         /* in an enum's value: a prefix of one of its JSON texts (cset's) in sbuf */
  J_DONE,         /* the object is complete: nothing may follow */
};

static const char *const LITS[3] = {"true", "false", "null"};

void gc_json_fsm_init(gc_json_fsm_t *f) {
  memset(f, 0, sizeof *f);
  f->st = J_START;
  f->cset = -1;
  f->smax = UINT32_MAX;
}

void gc_json_fsm_init_schema(gc_json_fsm_t *f, const gc_json_schema_t *s) {
  gc_json_fsm_init(f);
  f->schema = s;
}

/* The parts of a call's shape, in order (C_MORE: after a call, where sep
 * or tail may begin; C_SEP then C_NEXT lead to the next call's C_NAME). */
enum { C_LEAD, C_PRE, C_NAME, C_MID, C_ARGS, C_POST, C_MORE, C_SEP, C_NEXT, C_TAIL, C_DONE };

void gc_json_call_clear(gc_json_call_t *c) {
  for (int i = 0; c->schemas && i < c->nnames; i++) gc_json_schema_free(c->schemas[i]);
  free(c->schemas);
  free(c->names);
  c->schemas = NULL, c->names = NULL;
}

void gc_json_fsm_init_call(gc_json_fsm_t *f, const gc_json_call_t *c) {
  gc_json_fsm_init(f);
  f->call = c;
  f->phase = c->lead >= 0 ? C_LEAD : C_PRE;
}

void gc_json_fsm_init_choice(gc_json_fsm_t *f, const gc_json_choice_t *c) {
  gc_json_fsm_init(f);
  f->choice = c;
  f->cand = c->n >= 64 ? ~0ull : (1ull << c->n) - 1;
}

void gc_json_choice_clear(gc_json_choice_t *c) {
  for (int i = 0; c->s && i < c->n; i++) free(c->s[i]);
  free(c->s), free(c->len);
  c->s = NULL, c->len = NULL, c->n = 0;
}

struct gc_json_regex {
  int refs; /* atomic */
  gc_re_t re;
};

int gc_json_regex_new(const char *pat, size_t n, gc_json_regex_t **out, gc_err_t *e) {
  *out = NULL;
  gc_json_regex_t *r = gc_calloc(1, sizeof *r, e);
  if (!r) return e->code;
  if (gc_re_compile(pat, n, GC_RE_FULL, 0, UINT32_MAX, &r->re, e)) return free(r), e->code;
  r->refs = 1;
  *out = r;
  return GC_OK;
}

gc_json_regex_t *gc_json_regex_ref(gc_json_regex_t *r) {
  if (r) __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
  return r;
}

void gc_json_regex_free(gc_json_regex_t *r) {
  if (!r || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  gc_re_free(&r->re);
  free(r);
}

void gc_json_fsm_init_regex(gc_json_fsm_t *f, const gc_json_regex_t *r) {
  gc_json_fsm_init(f);
  f->rx = r;
}

/* A pattern's whole match: whether no character may follow. */
static int rx_closed(const gc_json_fsm_t *f) {
  const gc_re_t *r = &f->rx->re;
  for (int c = 0; c < r->ncls; c++)
    if (r->next[f->rst * r->ncls + c] >= 0) return 0;
  return 1;
}

/* Choices: whether a candidate is the reply so far whole (is), and
 * whether one goes on past it (more). */
static void choice_ends(const gc_json_fsm_t *f, int *is, int *more) {
  *is = *more = 0;
  for (int i = 0; i < f->choice->n; i++)
    if (f->cand >> i & 1) {
      if (f->choice->len[i] == f->coff) *is = 1;
      else *more = 1;
    }
}

/* Choices: byte c next; 0 where no candidate goes on with it. */
static int choice_step(gc_json_fsm_t *f, int c) {
  uint64_t keep = 0;
  for (int i = 0; i < f->choice->n; i++)
    if ((f->cand >> i & 1) && f->choice->len[i] > f->coff && (unsigned char)f->choice->s[i][f->coff] == c)
      keep |= 1ull << i;
  if (!keep) return 0;
  f->cand = keep, f->coff++;
  return 1;
}

int gc_json_fsm_done(const gc_json_fsm_t *f) {
  if (f->rx) return !f->aux && f->rx->re.acc[f->rst] && rx_closed(f);
  if (f->choice) {
    int is, more;
    choice_ends(f, &is, &more);
    return is && !more;
  }
  return f->call ? f->phase == C_DONE : f->st == J_DONE;
}

int gc_json_fsm_may_end(const gc_json_fsm_t *f) {
  if (f->rx) return !f->aux && f->rx->re.acc[f->rst];
  if (f->choice) {
    int is, more;
    choice_ends(f, &is, &more);
    return is;
  }
  return gc_json_fsm_done(f) || (f->call && f->phase == C_MORE && !*f->call->tail);
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* A value has ended: the next byte is its container's (the outermost
 * object's end: done). */
static void value_end(gc_json_fsm_t *f) { f->st = f->depth ? J_AFTER : J_DONE; }

/* ---- the schema (f->schema): which values, keys and strings may come -- */

static const gc_json_node_t *node(const gc_json_fsm_t *f, int i) { return &f->schema->nodes[i]; }
/* The innermost open container's node. */
static const gc_json_node_t *container(const gc_json_fsm_t *f) { return node(f, f->lv[f->depth - 1].node); }
/* Whether a value of node i fits the levels left inside the open containers. */
static int fits(const gc_json_fsm_t *f, int i) { return node(f, i)->mind <= GC_JSON_DEPTH - f->depth; }
/* Property p of the innermost object may still come: unread, and fits. */
static int prop_free(const gc_json_fsm_t *f, int p) {
  const gc_json_node_t *o = container(f);
  return !(f->lv[f->depth - 1].seen >> p & 1) && fits(f, f->schema->props[o->prop0 + p].node);
}
/* A key may come in the innermost object (after '{' or ','). */
static int key_may_come(const gc_json_fsm_t *f) {
  const gc_json_node_t *o = container(f);
  if (o->open && fits(f, o->addl)) return 1;
  for (int p = 0; p < o->nprops; p++)
    if (prop_free(f, p)) return 1;
  return 0;
}
/* The node of array a's item i (from 0): its prefix's, or its items'. */
static int item_node(const gc_json_fsm_t *f, const gc_json_node_t *a, uint32_t i) {
  return i < (uint32_t)a->npre ? f->schema->props[a->pre0 + i].node : a->items;
}
/* The node of the value that begins now (an item: counted already). */
static int value_node(const gc_json_fsm_t *f) {
  if (!f->depth) return 1; /* the root */
  return f->lv[f->depth - 1].open == '[' ? item_node(f, container(f), f->lv[f->depth - 1].count - 1) : f->vnode;
}
/* The kind a value's first byte c begins (0: none). */
static int kind_of(int c) {
  switch (c) {
    case '{': return JK_OBJ;
    case '[': return JK_ARR;
    case '"': return JK_STR;
    case 't': case 'f': return JK_BOOL;
    case 'n': return JK_NULL;
    default: return c == '-' || (c >= '0' && c <= '9') ? JK_INT : 0;
  }
}
/* The candidates of the constrained key or enum value being read (cset):
 * the i-th's bytes, or NULL past the last; for -2 (an object's names)
 * those of properties still free, others "" never matching (-1: no
 * candidates). */
/* Whether the innermost container is an array whose items are each one
 * of an enum's values at most once (uniqueItems): those written are its
 * level's seen bits. */
static int unique_items(const gc_json_fsm_t *f) {
  return f->depth && f->lv[f->depth - 1].open == '[' && container(f)->unique;
}
static const char *candidate(const gc_json_fsm_t *f, int i, int *len) {
  const gc_json_schema_t *s = f->schema;
  const char *t;
  if (f->cset >= 0) {
    const gc_json_node_t *n = node(f, f->cset);
    if (i >= n->nenum) return NULL;
    if (unique_items(f) && (f->lv[f->depth - 1].seen >> i & 1)) return *len = -1, ""; /* written already */
    t = s->strs[n->enum0 + i];
  } else {
    const gc_json_node_t *o = container(f);
    if (i >= o->nprops) return NULL;
    t = f->cset == -2 && !prop_free(f, i) ? NULL : s->props[o->prop0 + i].name;
    if (!t) return *len = -1, "";
  }
  *len = (int)strlen(t);
  return t;
}
/* The index of the enum text read whole (sbuf, of node cset). */
static int enum_index(const gc_json_fsm_t *f) {
  const gc_json_node_t *t = node(f, f->cset);
  int i = 0;
  while (i + 1 < t->nenum &&
         !(strlen(f->schema->strs[t->enum0 + i]) == f->slen && !memcmp(f->schema->strs[t->enum0 + i], f->sbuf, f->slen)))
    i++;
  return i;
}
/* A tagged union's tag read (the whole text in sbuf, of node cset): its
 * object is now the branch the tag chooses, the tag its property read. */
static void tag_chosen(gc_json_fsm_t *f) {
  const gc_json_schema_t *s = f->schema;
  const gc_json_node_t *u = container(f);
  const int b = s->props[u->u0 + enum_index(f)].node;
  const gc_json_node_t *o = node(f, b);
  int p = 0;
  while (p + 1 < o->nprops && strcmp(s->props[o->prop0 + p].name, s->props[u->prop0].name)) p++;
  f->lv[f->depth - 1].node = (int16_t)b, f->lv[f->depth - 1].seen = 1ull << p;
}
/* Whether the constrained key or value read so far (sbuf) begins a candidate
 * (whole: is one). -3 (a key of an open object, recorded to look it up):
 * always. */
static int cset_ok(const gc_json_fsm_t *f, int whole) {
  if (f->cset == -3) return 1;
  int len;
  const char *t;
  for (int i = 0; (t = candidate(f, i, &len)); i++)
    if (len >= f->slen && (!whole || len == f->slen) && !memcmp(t, f->sbuf, f->slen)) return 1;
  return 0;
}
/* The key just read (cset -2 or -3, its bytes in sbuf; slen 255: longer
 * than any name) chooses the value's node; 0 where it may not end here
 * (a name read already, or a value that cannot fit). */
static int key_end(gc_json_fsm_t *f) {
  const gc_json_node_t *o = container(f);
  for (int p = 0; f->slen <= GC_JSON_NAME && p < o->nprops; p++) {
    const char *name = f->schema->props[o->prop0 + p].name;
    if (strlen(name) == f->slen && !memcmp(name, f->sbuf, f->slen)) {
      if (!prop_free(f, p)) return 0;
      f->lv[f->depth - 1].seen |= 1ull << p;
      f->vnode = f->schema->props[o->prop0 + p].node;
      return 1;
    }
  }
  f->vnode = o->addl;
  return o->open && fits(f, o->addl);
}
/* A byte c of a constrained key (cset < -1) before the recognizer's own
 * reading of it: 0 where it leaves no candidate. */
static int cset_byte(gc_json_fsm_t *f, int c) {
  if (f->st == J_STR && c == '"') return cset_ok(f, 1) && (!f->key || key_end(f));
  if (c == '\\' && f->st == J_STR) return 0; /* candidates are read unescaped */
  if (f->cset == -3 && f->slen >= GC_JSON_NAME) return f->slen = 255, 1; /* names no property */
  if (f->slen >= GC_JSON_NAME) return 0;
  f->sbuf[f->slen++] = (char)c;
  return cset_ok(f, 0);
}

/* Whether some integer whose text begins with the bounded one read so far
 * (ineg, iv of ind digits; none yet after '-') lies within its node's
 * bounds: every digit allowed leaves one that can be finished. */
static int int_ok(const gc_json_fsm_t *f) {
  const gc_json_node_t *n = node(f, f->inode);
  __int128 p = 1;
  for (int j = 0; f->ind + j <= 18; j++, p *= 10) { /* j more digits */
    __int128 a = (__int128)f->iv * p, b = a + p - 1;
    if (!f->ind) a = 0, b = GC_JSON_IMAX;
    __int128 lo = f->ineg ? -b : a, hi = f->ineg ? -a : b;
    if (mult_in(lo > n->imin ? lo : n->imin, hi < n->imax ? hi : n->imax, n->imult)) return 1;
    if (!f->ind || !f->iv) break; /* any magnitude was that one interval; "0" takes no more */
  }
  return 0;
}
/* A bounded integer's next digit d. */
static int int_push(gc_json_fsm_t *f, int d) {
  if (f->ind >= 18) return 0;
  f->iv = f->iv * 10 + d, f->ind++;
  return int_ok(f);
}
/* Whether the bounded integer read is within its node's bounds. */
static int int_in(const gc_json_fsm_t *f) {
  const int64_t v = f->ineg ? -f->iv : f->iv;
  return v >= node(f, f->inode)->imin && v <= node(f, f->inode)->imax && v % node(f, f->inode)->imult == 0;
}

/* Whether some multiple of g in [a, b] lies in [lo, hi]. */
static int grid_hits(__int128 a, __int128 b, __int128 g, __int128 lo, __int128 hi) {
  return mult_in(a > lo ? a : lo, b < hi ? b : hi, g);
}
/* The grid of a number's values: the multiples of g (its digits' last
 * unit) that are multiples of m too (multipleOf): lcm(g, m), or 10^32,
 * past every bound (only 0 in range), where it is larger. */
static __int128 grid(__int128 g, __int128 m) {
  const __int128 q = g / gcd128(g, m), cap = p10(32);
  return q > cap / m ? cap : q * m;
}
/* The bounded number's text so far (sbuf: '-'? digits ('.' digits?)?):
 * its integer digits' value i of ni digits, whether a '.' came, its
 * fraction's value fr of nf digits. 0 past GC_JSON_NDIG digits. */
typedef struct { int neg, ni, dot, nf; __int128 i, fr; } numtext_t;
static int num_text(const gc_json_fsm_t *f, numtext_t *t) {
  *t = (numtext_t){.neg = f->sbuf[0] == '-'};
  for (int k = t->neg; k < f->slen; k++) {
    char c = f->sbuf[k];
    if (c == '.') t->dot = 1;
    else if (t->dot) t->fr = t->fr * 10 + (c - '0'), t->nf++;
    else t->i = t->i * 10 + (c - '0'), t->ni++;
  }
  return t->ni + t->nf <= GC_JSON_NDIG;
}
/* Whether some number whose text begins with the bounded one read so far
 * (at most GC_JSON_NDIG digits, no exponent) lies within its node's bounds
 * (units of 10^-GC_JSON_NDIG). With ni integer digits a number has at most
 * GC_JSON_NDIG - ni fraction digits: its values are the multiples of
 * 10^ni in a range. */
static int num_ok(const gc_json_fsm_t *f) {
  const gc_json_node_t *n = node(f, f->dnode);
  const __int128 S = p10(GC_JSON_NDIG);
  numtext_t t;
  if (!num_text(f, &t)) return 0;
  __int128 lo = t.neg ? -n->nhi : n->nlo, hi = t.neg ? -n->nlo : n->nhi; /* on the magnitude */
  if (!t.ni) { /* only '-': any number of 1 .. GC_JSON_NDIG integer digits */
    for (int ni = 1; ni <= GC_JSON_NDIG; ni++)
      if (grid_hits(ni == 1 ? 0 : p10(ni - 1) * S, p10(ni) * S - p10(ni), grid(p10(ni), n->nmult), lo, hi)) return 1;
    return 0;
  }
  if (t.dot) { /* the integer part is read: t.fr's digits, then more of them (one at least after the '.') */
    if (!t.nf && t.ni >= GC_JSON_NDIG) return 0;
    __int128 x = t.i * S + t.fr * p10(GC_JSON_NDIG - t.nf);
    return grid_hits(x, x + p10(GC_JSON_NDIG - t.nf) - p10(t.ni), grid(p10(t.ni), n->nmult), lo, hi);
  }
  for (int j = 0; t.ni + j <= GC_JSON_NDIG; j++) { /* j more integer digits ("0" takes none) */
    const int ni = t.ni + j;
    if (grid_hits(t.i * p10(j) * S, (t.i + 1) * p10(j) * S - p10(ni), grid(p10(ni), n->nmult), lo, hi)) return 1;
    if (!t.i) break;
  }
  return 0;
}
/* Byte c (a digit, '.') of a bounded number. */
static int num_push(gc_json_fsm_t *f, int c) {
  if (f->slen >= GC_JSON_NDIG + 2) return 0;
  f->sbuf[f->slen++] = (char)c;
  return num_ok(f);
}
/* Whether the bounded number read is within its node's bounds. */
static int num_in(const gc_json_fsm_t *f) {
  numtext_t t;
  num_text(f, &t);
  __int128 x = t.i * p10(GC_JSON_NDIG) + t.fr * p10(GC_JSON_NDIG - t.nf);
  x = t.neg ? -x : x;
  return x >= node(f, f->dnode)->nlo && x <= node(f, f->dnode)->nhi && x % node(f, f->dnode)->nmult == 0;
}

int gc_json_number_fits(const gc_json_schema_t *s, int n) {
  gc_json_fsm_t f;
  gc_json_fsm_init_schema(&f, s);
  const gc_json_node_t *v = &s->nodes[n];
  for (const char *c = "-0123456789"; *c; c++) { /* a first byte value_start would take */
    gc_json_fsm_t g = f;
    if (v->nbound) {
      g.dnode = (int16_t)n;
      if (num_push(&g, *c)) return 1;
    } else if (v->ibound) {
      g.inode = (int16_t)n;
      if (*c == '-' ? (g.ineg = 1, int_ok(&g)) : int_push(&g, *c - '0')) return 1;
    } else {
      return 1;
    }
  }
  return 0;
}

static int push(gc_json_fsm_t *f, uint8_t c, int nd) {
  if (f->depth >= GC_JSON_DEPTH) return 0;
  f->lv[f->depth].node = (int16_t)nd, f->lv[f->depth].seen = 0, f->lv[f->depth].count = 0;
  f->lv[f->depth++].open = c;
  f->st = c == '{' ? J_KEY_OR_END : J_VALUE_OR_END;
  return 1;
}

static int pop(gc_json_fsm_t *f, uint8_t c) {
  if (!f->depth || f->lv[f->depth - 1].open != c) return 0;
  if (f->schema && c == '{' && (f->lv[f->depth - 1].seen & container(f)->required) != container(f)->required)
    return 0; /* a required property is missing */
  if (f->schema && c == '[' && f->lv[f->depth - 1].count < container(f)->minitems) return 0; /* too few items */
  f->depth--;
  value_end(f);
  return 1;
}

/* The first byte of a value (not ']': the caller's). */
static int value_start(gc_json_fsm_t *f, int c) {
  int nd = 0;
  f->cset = -1, f->intg = 0, f->sn = 0, f->smin = 0, f->smax = UINT32_MAX;
  f->inode = 0, f->ineg = 0, f->ind = 0, f->iv = 0, f->dnode = 0, f->re = 0;
  if (f->schema) {
    if (f->depth && f->lv[f->depth - 1].open == '[') { /* an item: within maxItems */
      if (f->lv[f->depth - 1].count >= container(f)->maxitems) return 0;
      f->lv[f->depth - 1].count++;
    }
    nd = value_node(f);
    const gc_json_node_t *v = node(f, nd);
    int k = kind_of(c);
    if (!(v->kinds & k) && !(k == JK_INT && v->kinds & JK_NUM)) return 0;
    if (k == JK_OBJ && v->omind > GC_JSON_DEPTH - f->depth) return 0;
    if (k == JK_ARR && v->amind > GC_JSON_DEPTH - f->depth) return 0; /* its first items would not fit */
    f->intg = !(v->kinds & JK_NUM);
    if (v->nenum && v->ekinds & (k == JK_INT ? JK_INT | JK_NUM : k)) { /* one of the enum's texts */
      f->cset = (int16_t)nd, f->sbuf[0] = (char)c, f->slen = 1, f->st = J_ELIT;
      return cset_ok(f, 0);
    }
    if (k == JK_STR && v->re) f->re = v->re, f->rst = 0; /* its automaton counts the lengths too */
    else if (k == JK_STR) f->smin = v->minlen, f->smax = v->maxlen;
    if (k == JK_INT && v->ibound) f->inode = (int16_t)nd;
    if (k == JK_INT && v->nbound) { /* its text in sbuf */
      f->dnode = (int16_t)nd, f->slen = 0;
      if (!num_push(f, c)) return 0;
    }
  }
  switch (c) {
    case '{': return push(f, '{', nd);
    case '[': return push(f, '[', nd);
    case '"': f->key = 0, f->st = J_STR; return 1;
    case '-': f->st = J_NEG; return !f->inode || (f->ineg = 1, int_ok(f));
    case '0': f->st = J_ZERO; return !f->inode || int_push(f, 0);
    case 't': case 'f': case 'n':
      f->lit = c == 't' ? 0 : c == 'f' ? 1 : 2, f->aux = 1, f->st = J_LIT;
      return 1;
    default:
      if (c >= '1' && c <= '9') return f->st = J_INT, !f->inode || int_push(f, c - '0');
      return 0;
  }
}

/* A key's '"' (after '{' or an object's ','). */
static int key_start(gc_json_fsm_t *f) {
  f->key = 1, f->st = J_STR, f->cset = -1, f->slen = 0, f->sn = 0, f->smin = 0, f->smax = UINT32_MAX, f->re = 0;
  if (!f->schema) return 1;
  const gc_json_node_t *o = container(f);
  if (o->nprops) f->cset = o->open ? -3 : -2; /* -2: one of the names; -3: recorded, looked up at its end */
  if (o->open && o->kre) f->re = o->kre, f->rst = 0; /* propertyNames (the listed names match it) */
  return key_may_come(f);
}

/* A UTF-8 lead byte c: the continuation bytes left (aux) and the range
 * of the next (lo, hi: no overlong forms, no surrogates, nothing past
 * U+10FFFF); 0 where c leads no character. */
static int utf8_lead(gc_json_fsm_t *f, int c) {
  if (c < 0xC2 || c > 0xF4) return 0;
  f->aux = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
  f->lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, f->hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
  return 1;
}

/* A string's byte (not in an escape): the character's first byte, its
 * end, or an escape's start; UTF-8's lead bytes set the range of the
 * next (no overlong forms, no surrogates, nothing past U+10FFFF). A string
 * with a length bound holds only the BMP's characters: its length is then
 * the same in code points, as JSON Schema counts it, and in UTF-16 units,
 * as JavaScript's validators (zod's) count it. */
static int string_byte(gc_json_fsm_t *f, int c) {
  if (c == '"') {
    if (f->sn < f->smin) return 0; /* minLength */
    if (f->key && f->schema && f->cset == -1) f->vnode = container(f)->addl; /* an open object's any key */
    f->re = 0;
    if (f->key) f->st = J_COLON;
    else value_end(f);
    f->cset = -1;
    return 1;
  }
  if (f->sn >= f->smax) return 0; /* maxLength: no further character */
  f->sn++;
  if (c == '\\') return f->st = J_ESC, 1;
  if (c < 0x20) return 0; /* control characters must be escaped */
  if (c < 0x80) return 1;
  if (c >= 0xF0 && (f->smin || f->smax != UINT32_MAX)) return 0; /* BMP only in a bounded string */
  return utf8_lead(f, c) && (f->st = J_UTF8, 1);
}

/* ---- a pattern (f->re): the string's characters in its automaton ------ */

/* A UTF-8 lead byte c: its bits into f->cp, the code points it may begin
 * in [*lo, *hi]; 0 where c leads nothing (a continuation, an overlong or
 * out-of-range lead: the recognizer refuses it). */
static int lead_range(gc_json_fsm_t *f, int c, uint32_t *lo, uint32_t *hi) {
  const int k = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
  static const uint32_t LEAST[4] = {0, 0x80, 0x800, 0x10000};
  if (!k) return 0;
  f->cp = (uint32_t)c & (0x3Fu >> k);
  *lo = f->cp << (6 * k), *hi = *lo | ((1u << (6 * k)) - 1);
  if (*lo < LEAST[k]) *lo = LEAST[k];
  if (*hi > GC_RE_MAXCP) *hi = GC_RE_MAXCP;
  return 1;
}

/* Character cp is the pattern's next. */
static int re_char(gc_json_fsm_t *f, const gc_re_t *r, uint32_t cp) {
  int t = cp >= 0xD800 && cp <= 0xDFFF ? -1 : gc_re_step(r, f->rst, cp);
  return t >= 0 && (f->rst = (int16_t)t, 1);
}

/* Byte c of a string under a pattern, before the recognizer reads it (f->st
 * still the state before c): where c ends a character, that character must
 * lead on in the automaton; where it begins or continues one (a UTF-8 lead,
 * a \u escape's digits), some character it may still become must; the
 * closing '"' only where the automaton accepts. Bytes the grammar refuses
 * pass (the recognizer refuses them). */
static int re_byte(gc_json_fsm_t *f, int c) {
  const gc_re_t *r = &f->schema->res[f->re - 1];
  static const char ESC[] = "\"\"\\\\//b\bf\fn\nr\rt\t";
  switch (f->st) {
    case J_STR:
      if (c == '"') return r->acc[f->rst];
      if (c == '\\') return gc_re_may(r, f->rst, 0, 0xFFFF); /* \u reaches them all */
      if (c < 0x80) return c < 0x20 || re_char(f, r, (uint32_t)c);
      uint32_t lo, hi;
      return !lead_range(f, c, &lo, &hi) || gc_re_may(r, f->rst, lo, hi);
    case J_UTF8: {
      if (c < f->lo || c > f->hi) return 1;
      f->cp = f->cp << 6 | ((uint32_t)c & 0x3F);
      const int left = 6 * (f->aux - 1);
      return left ? gc_re_may(r, f->rst, f->cp << left, f->cp << left | ((1u << left) - 1)) : re_char(f, r, f->cp);
    }
    case J_ESC:
      if (c == 'u') return f->cp = 0, 1; /* (the '\\' asked for [0, 0xFFFF] already) */
      for (int i = 0; ESC[i]; i += 2)
        if (ESC[i] == c) return re_char(f, r, (unsigned char)ESC[i + 1]);
      return 1;
    case J_HEX: {
      if (!is_hex(c)) return 1;
      f->cp = f->cp * 16 + (uint32_t)(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
      const int left = 4 * (f->aux - 1);
      return left ? gc_re_may(r, f->rst, f->cp << left, f->cp << left | ((1u << left) - 1)) : re_char(f, r, f->cp);
    }
    default: return 1;
  }
}

/* One byte c; 0 where it cannot come next. */
static int step(gc_json_fsm_t *f, int c) {
  if (is_ws(c) && f->st <= J_AFTER) { /* between tokens of the grammar */
    return ++f->ws <= GC_JSON_WS;
  }
  if (f->st <= J_AFTER) f->ws = 0;
  if (f->cset < -1 && (f->st == J_STR || f->st == J_UTF8) && !cset_byte(f, c)) return 0;
  if (f->re && !re_byte(f, c)) return 0;
  switch ((enum jstate)f->st) {
    case J_START: return c == '{' && push(f, '{', 1);
    case J_KEY_OR_END:
      if (c == '}') return pop(f, '{');
      /* fall through */
    case J_KEY:
      return c == '"' && key_start(f);
    case J_COLON: return c == ':' && (f->st = J_VALUE, 1);
    case J_VALUE_OR_END:
      if (c == ']') return pop(f, '[');
      /* fall through */
    case J_VALUE: return value_start(f, c);
    case J_AFTER:
      if (c == ',' && f->schema &&
          !(f->lv[f->depth - 1].open == '{'
                ? key_may_come(f)
                : fits(f, item_node(f, container(f), f->lv[f->depth - 1].count)) &&
                      f->lv[f->depth - 1].count < container(f)->maxitems &&
                      !(container(f)->unique && f->lv[f->depth - 1].count >= (uint32_t)node(f, container(f)->items)->nenum)))
        return 0; /* nothing could follow it */
      if (c == ',') return f->st = f->lv[f->depth - 1].open == '{' ? J_KEY : J_VALUE, 1;
      if (c == '}' || c == ']') return pop(f, c == '}' ? '{' : '[');
      return 0;
    case J_STR: return string_byte(f, c);
    case J_ESC:
      if (c == 'u') return f->aux = 4, f->st = J_HEX, 1;
      return strchr("\"\\/bfnrt", c) && c && (f->st = J_STR, 1);
    case J_HEX:
      if (!is_hex(c)) return 0;
      if (f->smin || f->smax != UINT32_MAX) { /* lengths count characters: no surrogate escapes (a pair is one) */
        if (f->aux == 4) f->hs = c == 'd' || c == 'D';
        else if (f->aux == 3 && f->hs && !(c >= '0' && c <= '7')) return 0;
      }
      if (!--f->aux) f->st = J_STR;
      return 1;
    case J_UTF8:
      if (c < f->lo || c > f->hi) return 0;
      f->lo = 0x80, f->hi = 0xBF;
      if (!--f->aux) f->st = J_STR;
      return 1;
    case J_LIT:
      if (c != LITS[f->lit][f->aux]) return 0;
      if (!LITS[f->lit][++f->aux]) value_end(f);
      return 1;
    case J_NEG:
      if (c < '0' || c > '9') return 0;
      f->st = c == '0' ? J_ZERO : J_INT;
      if (f->dnode) return num_push(f, c);
      return !f->inode || int_push(f, c - '0');
    case J_ZERO:
    case J_INT:
    case J_FRAC:
    case J_EXP:
      if (is_digit(c) && f->st != J_ZERO && f->dnode) return num_push(f, c);
      if (is_digit(c) && f->st != J_ZERO) return f->st != J_INT || !f->inode || int_push(f, c - '0');
      if (c == '.' && f->st <= J_INT && !f->intg) return f->st = J_DOT, !f->dnode || num_push(f, c);
      if ((c == 'e' || c == 'E') && f->st != J_EXP && !f->intg && !f->dnode) return f->st = J_E, 1;
      if (f->inode && !int_in(f)) return 0; /* a bounded integer out of its bounds */
      if (f->dnode && !num_in(f)) return 0; /* a bounded number out of its bounds */
      value_end(f); /* the number ended before c (inside a container: J_AFTER) */
      return step(f, c);
    case J_DOT: return is_digit(c) && (f->st = J_FRAC, 1) && (!f->dnode || num_push(f, c));
    case J_E:
      if (c == '+' || c == '-') return f->st = J_ESIGN, 1;
      /* fall through */
    case J_ESIGN: return is_digit(c) && (f->st = J_EXP, 1);
    case J_ELIT: /* a text goes on with c; else one ended before c */
      if (f->slen < GC_JSON_LIT) {
        f->sbuf[f->slen++] = (char)c;
        if (cset_ok(f, 0)) return 1;
        f->slen--;
      }
      if (!cset_ok(f, 1)) return 0;
      if (f->lv[f->depth - 1].open == '{' && container(f)->nu) tag_chosen(f);
      if (unique_items(f)) f->lv[f->depth - 1].seen |= 1ull << enum_index(f);
      f->cset = -1;
      value_end(f);
      return step(f, c);
    case J_DONE: return 0;
  }
  return 0;
}

/* A call's literal part t: byte c is its next; at its end, the next part. */
static int literal(gc_json_fsm_t *f, const char *t, int c) {
  if (!t[f->off]) { /* an empty part */
    f->phase++, f->off = 0;
    return 0;
  }
  if ((unsigned char)t[f->off] != c) return 0;
  if (!t[++f->off]) f->phase++, f->off = 0;
  return 1;
}

/* A call's post is read: the next call or the tail may follow (sep), or
 * only the tail. */
static void after_post(gc_json_fsm_t *f) {
  const gc_json_call_t *k = f->call;
  f->off = 0;
  f->phase = k->sep ? C_MORE : *k->tail ? C_TAIL : C_DONE;
}

/* The next call's name and object begin: the recognizer's JSON fields
 * as before the first. */
static void next_call(gc_json_fsm_t *f) {
  const gc_json_call_t *k = f->call;
  uint8_t phase = f->phase;
  gc_json_fsm_init_call(f, k);
  f->phase = phase;
}

/* Byte c of a call's shape. */
static int call_step(gc_json_fsm_t *f, int c) {
  const gc_json_call_t *k = f->call;
  switch (f->phase) {
    case C_PRE:
      return literal(f, k->pre, c) || (f->phase == C_NAME && call_step(f, c));
    case C_NAME:
      for (int i = 0; i < k->nnames; i++) /* a name that goes on with c */
        if (strlen(k->names[i]) > f->nlen && !memcmp(k->names[i], f->name, f->nlen) &&
            (unsigned char)k->names[i][f->nlen] == c)
          return f->name[f->nlen++] = (char)c, 1;
      for (int i = 0; f->nlen && i < k->nnames; i++) /* one that ended: c is mid's */
        if (strlen(k->names[i]) == f->nlen && !memcmp(k->names[i], f->name, f->nlen)) {
          f->schema = k->schemas ? k->schemas[i] : NULL; /* its arguments' */
          return f->phase = C_MID, f->off = 0, call_step(f, c);
        }
      return 0;
    case C_MID:
      return literal(f, k->mid, c) || (f->phase == C_ARGS && call_step(f, c));
    case C_ARGS:
      if (!step(f, c)) return 0;
      if (f->st == J_DONE) {
        if (*k->post) f->phase = C_POST, f->off = 0;
        else after_post(f);
      }
      return 1;
    case C_POST:
      if (!literal(f, k->post, c)) return 0;
      if (f->phase != C_POST) after_post(f);
      return 1;
    case C_MORE: /* sep or tail: they differ in their first byte */
      if ((unsigned char)k->sep[0] == c) return f->phase = C_SEP, f->off = 0, call_step(f, c);
      if (*k->tail && (unsigned char)k->tail[0] == c) return f->phase = C_TAIL, f->off = 0, call_step(f, c);
      return 0;
    case C_SEP:
      return literal(f, k->sep, c);
    case C_NEXT:
      if (!literal(f, k->next, c)) return 0;
      if (f->phase != C_NEXT) f->phase = C_NAME, next_call(f);
      return 1;
    case C_TAIL:
      return literal(f, k->tail, c);
    default: return 0; /* before the lead token, or after the calls */
  }
}

/* Byte c of a reply that must match a pattern whole (f->rx): UTF-8 (no
 * overlong forms, no surrogates), each character leading on in the
 * automaton, a character's first bytes only where one they may begin does. */
static int rx_step(gc_json_fsm_t *f, int c) {
  const gc_re_t *r = &f->rx->re;
  if (f->aux) { /* a continuation byte */
    if (c < f->lo || c > f->hi) return 0;
    f->lo = 0x80, f->hi = 0xBF;
    f->cp = f->cp << 6 | ((uint32_t)c & 0x3F);
    const int left = 6 * --f->aux;
    return left ? gc_re_may(r, f->rst, f->cp << left, f->cp << left | ((1u << left) - 1)) : re_char(f, r, f->cp);
  }
  if (c < 0x80) return re_char(f, r, (uint32_t)c);
  uint32_t lo, hi;
  return lead_range(f, c, &lo, &hi) && gc_re_may(r, f->rst, lo, hi) && utf8_lead(f, c);
}

int gc_json_fsm_feed(gc_json_fsm_t *f, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const int c = (unsigned char)s[i];
    if (!(f->rx ? rx_step(f, c) : f->choice ? choice_step(f, c) : f->call ? call_step(f, c) : step(f, c))) return 0;
  }
  return 1;
}

/* ---- the vocabulary --------------------------------------------------- */

/* The plain pieces' verdicts in a few automata's states, kept as a mask
 * computes them (pattern_mask): entry e says for automaton e.id in state
 * e.st, for the pieces of each first-byte group g marked in e.done, which
 * go on (e.ok: a bit an id). A reply that stays in one state of a broad
 * pattern (most of an e-mail address) then reads its verdicts, not the
 * pieces. The least recently used entry makes way; a lock guards it all
 * (the vocabulary is otherwise immutable and shared). */
#define PCACHE 32
typedef struct pcache {
  pthread_mutex_t mu;
  uint64_t tick;
  struct {
    uint64_t id, used, done[4];
    int st;
    uint64_t *ok; /* [(n + 63) / 64] */
  } e[PCACHE];
} pcache_t;

struct gc_json_vocab {
  int n;             /* ids */
  size_t *off;       /* [n + 1] id's piece at bytes[off[id], off[id + 1]) */
  char *bytes;
  uint8_t *special;  /* [n] control tokens */
  uint8_t *instr;    /* [n] pieces allowed wherever the recognizer is at J_STR of a string
                        without a length bound (piece_in_string) */
  uint16_t *ichars;  /* [n] the characters an instr piece adds to a string (NO_CHARS: refused in a
                        string with a length bound: a surrogate escape) */
  uint32_t *cps;     /* the code points of the plain pieces: instr pieces of whole characters */
  size_t *cp_at;     /* [n + 1] and no '\\' (id's: cps[cp_at[id], cp_at[id + 1]); others: none, and
                        plain[id] 0), which a pattern's automaton reads directly (pattern_mask) */
  uint8_t *plain;    /* [n] */
  pcache_t *pc;      /* (mutable: its own lock) */
  int32_t *rest;     /* [nrest] the other non-empty, non-control ids (for the J_STR mask) */
  int nrest;
  int32_t *by_first; /* [n] the ids of non-empty pieces, grouped by their first byte */
  int first_at[257]; /* group b: by_first[first_at[b], first_at[b + 1]) */
  int32_t *by_lead;  /* [n] the ids of pieces that begin with whitespace, grouped by their
                        first other byte (256: none) */
  int lead_at[258];  /* group b: by_lead[lead_at[b], lead_at[b + 1]) */
};

/* Whether piece p (n > 0 bytes) may come at J_STR, whatever string that
 * is and wherever in the document: without a '"' (which ends a key and a
 * value differently) what the recognizer makes of it from J_STR depends
 * on nothing else (characters, escapes, the start of a character). */
static int piece_in_string(const char *p, size_t n) {
  if (memchr(p, '"', n)) return 0;
  gc_json_fsm_t f;
  gc_json_fsm_init(&f);
  gc_json_fsm_feed(&f, "{\"", 2);
  return gc_json_fsm_feed(&f, p, n);
}

#define NO_CHARS 0xFFFF
/* The characters instr piece p (n bytes) adds to a string (NO_CHARS where
 * a string with a length bound refuses it: a surrogate escape). */
static uint16_t piece_chars(const char *p, size_t n) {
  gc_json_fsm_t f;
  gc_json_fsm_init(&f);
  gc_json_fsm_feed(&f, "{\"", 2);
  f.smax = UINT32_MAX - 1; /* a bound, never reached */
  return gc_json_fsm_feed(&f, p, n) && f.sn < NO_CHARS ? (uint16_t)f.sn : NO_CHARS;
}

/* The first byte of piece [p, p + n) that is not whitespace (256: none). */
static int first_solid(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!is_ws((unsigned char)p[i])) return (unsigned char)p[i];
  return 256;
}

/* ids into groups by key[id] (< nk <= 257; -1: in none): group k is
 * grp[at[k], at[k + 1]), its ids in increasing order. */
static void group(const int *key, int n, int nk, int32_t *grp, int *at) {
  int fill[258];
  memset(at, 0, (size_t)(nk + 1) * sizeof *at);
  for (int id = 0; id < n; id++)
    if (key[id] >= 0) at[key[id] + 1]++;
  for (int k = 0; k < nk; k++) at[k + 1] += at[k];
  memcpy(fill, at, (size_t)nk * sizeof *fill);
  for (int id = 0; id < n; id++)
    if (key[id] >= 0) grp[fill[key[id]]++] = id;
}

/* The code points of piece p (n bytes, an instr piece) into cps (room for n),
 * their count; -1 where it has a '\\' or ends inside a character. */
static int piece_cps(const unsigned char *p, size_t n, uint32_t *cps) {
  int k = 0;
  for (size_t i = 0; i < n; k++) {
    int more = p[i] < 0x80 ? 0 : p[i] < 0xE0 ? 1 : p[i] < 0xF0 ? 2 : 3;
    if (p[i] == '\\' || i + (size_t)more >= n) return -1;
    uint32_t c = more ? p[i] & (0x3Fu >> more) : p[i];
    for (int j = 1; j <= more; j++) c = c << 6 | (p[i + (size_t)j] & 0x3F);
    cps[k] = c, i += (size_t)more + 1;
  }
  return k;
}

/* v's plain pieces and their code points (v->instr set). Errors: GC_ENOMEM. */
static int plain_pieces(gc_json_vocab_t *v, gc_err_t *e) {
  size_t m = (size_t)(v->n ? v->n : 1);
  v->plain = gc_calloc(m, 1, e);
  v->cp_at = v->plain ? gc_calloc(m + 1, sizeof *v->cp_at, e) : NULL;
  v->cps = v->cp_at ? gc_malloc((v->off[v->n] ? v->off[v->n] : 1) * sizeof *v->cps, e) : NULL;
  v->pc = v->cps ? gc_calloc(1, sizeof *v->pc, e) : NULL;
  if (!v->pc) return e->code;
  pthread_mutex_init(&v->pc->mu, NULL);
  for (int id = 0; id < v->n; id++) {
    int k = v->instr[id] ? piece_cps((const unsigned char *)v->bytes + v->off[id], v->off[id + 1] - v->off[id],
                                     v->cps + v->cp_at[id]) : -1;
    v->plain[id] = k > 0;
    v->cp_at[id + 1] = v->cp_at[id] + (size_t)(k > 0 ? k : 0);
  }
  return GC_OK;
}

/* v's tables from its pieces (v->n, off, bytes, special set). Errors: GC_ENOMEM. */
static int index_pieces(gc_json_vocab_t *v, gc_err_t *e) {
  int n = v->n;
  size_t m = (size_t)(n ? n : 1);
  int *key = gc_malloc(m * sizeof *key, e);
  v->instr = key ? gc_calloc(m, 1, e) : NULL;
  v->ichars = v->instr ? gc_malloc(m * sizeof *v->ichars, e) : NULL;
  v->rest = v->ichars ? gc_malloc(m * sizeof *v->rest, e) : NULL;
  v->by_first = v->rest ? gc_malloc(m * sizeof *v->by_first, e) : NULL;
  v->by_lead = v->by_first ? gc_malloc(m * sizeof *v->by_lead, e) : NULL;
  if (!v->by_lead) return free(key), e->code;
  for (int id = 0; id < n; id++) {
    const char *p = v->bytes + v->off[id];
    size_t len = v->off[id + 1] - v->off[id];
    if (len && !v->special[id]) {
      v->instr[id] = (uint8_t)piece_in_string(p, len);
      if (!v->instr[id]) v->rest[v->nrest++] = id;
      v->ichars[id] = v->instr[id] ? piece_chars(p, len) : NO_CHARS;
    }
  }
  if (plain_pieces(v, e)) return free(key), e->code;
  for (int id = 0; id < n; id++)
    key[id] = v->off[id + 1] > v->off[id] ? (unsigned char)v->bytes[v->off[id]] : -1;
  group(key, n, 256, v->by_first, v->first_at);
  for (int id = 0; id < n; id++)
    key[id] = key[id] >= 0 && is_ws(key[id])
                  ? first_solid(v->bytes + v->off[id], v->off[id + 1] - v->off[id]) : -1;
  group(key, n, 257, v->by_lead, v->lead_at);
  free(key);
  return GC_OK;
}

int gc_json_vocab_new(const gc_tok_t *t, gc_json_vocab_t **out, gc_err_t *e) {
  *out = NULL;
  int n = gc_tok_vocab_size(t);
  gc_json_vocab_t *v = gc_calloc(1, sizeof *v, e);
  if (!v) return e->code;
  gc_buf_t b = {0};
  v->n = n;
  v->off = gc_calloc((size_t)n + 1, sizeof *v->off, e);
  v->special = v->off ? gc_calloc((size_t)n ? (size_t)n : 1, 1, e) : NULL;
  int rc = v->special ? GC_OK : e->code;
  for (int id = 0; !rc && id < n; id++) {
    v->special[id] = (uint8_t)(gc_tok_is_special(t, id) != 0);
    rc = gc_tok_piece(t, id, 0, &b, e);
    v->off[id + 1] = b.len;
  }
  v->bytes = b.data;
  if (!rc) rc = index_pieces(v, e);
  if (rc) return gc_json_vocab_free(v), rc;
  *out = v;
  return GC_OK;
}

int gc_json_vocab_from_pieces(const char *const *pieces, const size_t *lens, const uint8_t *special, int n,
                              gc_json_vocab_t **out, gc_err_t *e) {
  *out = NULL;
  gc_json_vocab_t *v = gc_calloc(1, sizeof *v, e);
  if (!v) return e->code;
  size_t total = 0;
  for (int id = 0; id < n; id++) total += lens[id];
  v->n = n;
  v->off = gc_calloc((size_t)n + 1, sizeof *v->off, e);
  v->special = v->off ? gc_calloc((size_t)n ? (size_t)n : 1, 1, e) : NULL;
  v->bytes = v->special ? gc_malloc(total ? total : 1, e) : NULL;
  if (!v->bytes) return gc_json_vocab_free(v), e->code;
  for (int id = 0; id < n; id++) {
    memcpy(v->bytes + v->off[id], pieces[id], lens[id]);
    v->off[id + 1] = v->off[id] + lens[id];
    v->special[id] = special[id];
  }
  int rc = index_pieces(v, e);
  if (rc) return gc_json_vocab_free(v), rc;
  *out = v;
  return GC_OK;
}

void gc_json_vocab_free(gc_json_vocab_t *v) {
  if (!v) return;
  free(v->off);
  free(v->bytes);
  free(v->special);
  free(v->instr);
  free(v->plain);
  free(v->cp_at);
  free(v->cps);
  if (v->pc) {
    for (int k = 0; k < PCACHE; k++) free(v->pc->e[k].ok);
    pthread_mutex_destroy(&v->pc->mu);
    free(v->pc);
  }
  free(v->ichars);
  free(v->rest);
  free(v->by_first);
  free(v->by_lead);
  free(v);
}

/* *dst := *src for reading on: the levels past the open ones are never
 * read before a push writes them, so only lv[0, depth) is copied (a
 * whole copy costs the mask several times more on a large vocabulary). */
static void fsm_copy(gc_json_fsm_t *dst, const gc_json_fsm_t *src) {
  memcpy(dst, src, offsetof(gc_json_fsm_t, lv) + src->depth * sizeof src->lv[0]);
}

/* Whether f reads JSON's grammar (not a call's fixed text or name). */
static int in_grammar(const gc_json_fsm_t *f) { return !f->call || f->phase == C_ARGS; }
/* Whether f is inside a string value or an unconstrained key (not a
 * schema's key, not choices): 1 without a length bound, where every
 * string piece may come; 2 with one, where they come as their characters
 * fit (piece_fits); 0 elsewhere. */
static int in_string(const gc_json_fsm_t *f) {
  if (f->st != J_STR || !in_grammar(f) || f->cset != -1 || f->choice || f->re || f->rx) return 0;
  return f->smin || f->smax != UINT32_MAX ? 2 : 1;
}
/* Whether string piece id fits the room a bounded string (in_string 2) leaves. */
static int piece_fits(const gc_json_vocab_t *v, const gc_json_fsm_t *f, int32_t id) {
  return v->ichars[id] != NO_CHARS && v->ichars[id] <= f->smax - f->sn;
}

/* Whether every whitespace byte reads alike next (between the grammar's tokens, or
   where none may come), so that pieces may be grouped by their first other byte.
   In an enum's text (J_ELIT) only ' ' may come inside a string (JSON escapes the
   others) and after a whole text all of them end the value: a piece that begins
   with whitespace and d may come only where " d" may, which is all the grouping
   needs (each piece of a group is then asked). */
static int ws_alike(const gc_json_fsm_t *f) { return in_grammar(f) && f->st != J_STR && !f->choice && !f->rx; }

int gc_json_allows(const gc_json_vocab_t *v, const gc_json_fsm_t *f, int32_t id) {
  if (f->call && f->phase == C_LEAD) return id == f->call->lead;
  if (id < 0 || id >= v->n || v->special[id] || v->off[id + 1] == v->off[id]) return 0;
  if (v->instr[id] && in_string(f)) return in_string(f) == 1 || piece_fits(v, f, id); /* text inside a string */
  gc_json_fsm_t g;
  fsm_copy(&g, f);
  return gc_json_fsm_feed(&g, v->bytes + v->off[id], v->off[id + 1] - v->off[id]);
}

static int may_read(const gc_json_fsm_t *f, const char *s, size_t len);

/* Whether f is inside a string value under a pattern, between characters. */
static int in_pattern(const gc_json_fsm_t *f) {
  return f->st == J_STR && f->re && in_grammar(f) && f->cset == -1 && !f->choice && !f->rx;
}
/* The automaton f reads plain pieces with, between characters: a string's
 * pattern's, or the reply's pattern's; NULL where none. */
static const gc_re_t *pattern_at(const gc_json_fsm_t *f) {
  if (f->rx) return f->aux ? NULL : &f->rx->re;
  return in_pattern(f) ? &f->schema->res[f->re - 1] : NULL;
}

/* Whether plain piece id goes on from state st of automaton r. */
static int plain_goes(const gc_json_vocab_t *v, const gc_re_t *r, int st, int32_t id) {
  for (size_t j = v->cp_at[id]; st >= 0 && j < v->cp_at[id + 1]; j++) st = gc_re_step(r, st, v->cps[j]);
  return st >= 0;
}

/* The cache's entry for state st of automaton r (pc->mu held), made (the
 * least recently used one's room, its verdicts forgotten) where none is;
 * NULL when out of memory (the caller then reads the pieces). */
static int pcache_entry(const gc_json_vocab_t *v, const gc_re_t *r, int st) {
  pcache_t *pc = v->pc;
  int k = 0;
  for (int i = 0; i < PCACHE; i++) {
    if (pc->e[i].id == r->id && pc->e[i].st == st) return pc->e[i].used = ++pc->tick, i;
    if (pc->e[i].used < pc->e[k].used) k = i;
  }
  if (!pc->e[k].ok && !(pc->e[k].ok = malloc(((size_t)v->n + 63) / 64 * sizeof *pc->e[k].ok))) return -1;
  pc->e[k].id = r->id, pc->e[k].st = st, pc->e[k].used = ++pc->tick;
  memset(pc->e[k].done, 0, sizeof pc->e[k].done);
  return k;
}

/* The mask where f reads plain pieces through automaton r (pattern_at:
 * in a string under a pattern, or a reply under one), by the pieces'
 * first bytes: a group whose first byte may not come is refused whole
 * (most of them, in a narrow pattern); in the others a plain piece goes
 * on where the automaton reads each of its characters from the string's
 * state (what the recognizer does with it there: no quote, no escape,
 * whole characters; kept in the cache by state and group), and the other
 * pieces are asked. */
static void pattern_mask(const gc_json_vocab_t *v, const gc_json_fsm_t *f, const gc_re_t *r, const float *logits,
                         float *out, int n) {
  for (int id = 0; id < n; id++) out[id] = -INFINITY;
  pthread_mutex_lock(&v->pc->mu);
  const int k = pcache_entry(v, r, f->rst);
  uint64_t *ok = k >= 0 ? v->pc->e[k].ok : NULL, *done = k >= 0 ? v->pc->e[k].done : NULL;
  for (int c = 0; c < 256; c++) {
    const char ch = (char)c;
    if (v->first_at[c] == v->first_at[c + 1] || !may_read(f, &ch, 1)) continue;
    const int known = done && (done[c / 64] >> (c % 64) & 1);
    for (int g = v->first_at[c]; g < v->first_at[c + 1]; g++) {
      const int32_t id = v->by_first[g];
      int goes;
      if (!v->plain[id]) {
        goes = id < n && gc_json_allows(v, f, id);
      } else if (known) {
        goes = ok[id / 64] >> (id % 64) & 1;
      } else {
        goes = plain_goes(v, r, f->rst, id);
        if (ok) ok[id / 64] = (ok[id / 64] & ~(1ull << (id % 64))) | (uint64_t)goes << (id % 64);
      }
      if (goes && id < n) out[id] = logits[id];
    }
    if (done) done[c / 64] |= 1ull << (c % 64);
  }
  pthread_mutex_unlock(&v->pc->mu);
}

/* out[id] := logits[id] for the ids of grp[lo, hi) below n that f allows. */
static void mask_group(const gc_json_vocab_t *v, const gc_json_fsm_t *f, const int32_t *grp, int lo, int hi,
                       const float *logits, float *out, int n) {
  for (int k = lo; k < hi; k++) {
    int32_t id = grp[k];
    if (id < n && gc_json_allows(v, f, id)) out[id] = logits[id];
  }
}

/* Whether f may read bytes s[0, len) next (f itself unmoved). */
static int may_read(const gc_json_fsm_t *f, const char *s, size_t len) {
  gc_json_fsm_t g;
  fsm_copy(&g, f);
  return gc_json_fsm_feed(&g, s, len);
}

void gc_json_mask(const gc_json_vocab_t *v, const gc_json_fsm_t *f, const float *logits, float *out, int n) {
  if (f->call && f->phase == C_LEAD) {
    for (int id = 0; id < n; id++) out[id] = -INFINITY;
    if (f->call->lead >= 0 && f->call->lead < n) out[f->call->lead] = logits[f->call->lead];
    return;
  }
  int m = n < v->n ? n : v->n;
  if (pattern_at(f)) {
    pattern_mask(v, f, pattern_at(f), logits, out, n);
    return;
  }
  if (in_string(f)) { /* inside a string: most pieces are text */
    if (in_string(f) == 1)
      for (int id = 0; id < m; id++) out[id] = v->instr[id] ? logits[id] : -INFINITY;
    else
      for (int id = 0; id < m; id++) out[id] = v->instr[id] && piece_fits(v, f, id) ? logits[id] : -INFINITY;
    for (int id = m; id < n; id++) out[id] = -INFINITY;
    mask_group(v, f, v->rest, 0, v->nrest, logits, out, n);
    return;
  }
  for (int id = 0; id < n; id++) out[id] = -INFINITY;
  for (int c = 0; c < 256; c++) {
    char ch = (char)c;
    if (is_ws(c) && ws_alike(f)) continue; /* below */
    if (v->first_at[c] < v->first_at[c + 1] && may_read(f, &ch, 1)) /* else none may start so */
      mask_group(v, f, v->by_first, v->first_at[c], v->first_at[c + 1], logits, out, n);
  }
  if (!ws_alike(f) || !may_read(f, " ", 1)) return;
  /* Pieces that begin with whitespace, in the grammar outside a string
     (in its escapes and characters no whitespace may come): every
     whitespace byte reads alike there, and a run of them as one, so a
     group of them by its first other byte d is asked once, as " d" (or
     " ": no other byte). */
  for (int d = 0; d <= 256; d++) {
    char two[2] = {' ', (char)d};
    if (v->lead_at[d] < v->lead_at[d + 1] && may_read(f, two, d < 256 ? 2 : 1))
      mask_group(v, f, v->by_lead, v->lead_at[d], v->lead_at[d + 1], logits, out, n);
  }
}

int gc_json_sample(const gc_json_vocab_t *v, gc_json_fsm_t *f, gc_sampler_t *smp, int greedy, const float *logits,
                   float *row, int n, int32_t end, int32_t *tok, gc_err_t *e) {
  if (gc_json_fsm_done(f)) {
    *tok = end;
    return end >= 0 ? GC_OK : gc_err_set(e, GC_EUNSUPPORTED, "JSON mode: the model has no end-of-sequence token");
  }
  const int may_end = end >= 0 && end < n && gc_json_fsm_may_end(f);
  int t = -1;
  if (greedy && !gc_sampler_sample(smp, logits, &t, NULL) && (gc_json_allows(v, f, t) || (may_end && t == end))) {
    *tok = t;
  } else {
    gc_json_mask(v, f, logits, row, n);
    if (may_end) row[end] = logits[end];
    if (gc_sampler_sample(smp, row, &t, NULL))
      return gc_err_set(e, GC_EUNSUPPORTED, "JSON mode: no token of the vocabulary continues the reply's object");
    *tok = t;
  }
  if (!(may_end && *tok == end)) gc_json_take(v, f, *tok);
  return GC_OK;
}

void gc_json_take(const gc_json_vocab_t *v, gc_json_fsm_t *f, int32_t id) {
  if (f->call && f->phase == C_LEAD) f->phase = C_PRE;
  else if (id >= 0 && id < v->n) gc_json_fsm_feed(f, v->bytes + v->off[id], v->off[id + 1] - v->off[id]);
}
