/* tokenizer.c — the encoder (added tokens, normalizer, pre-tokenizer,
 * BPE) and the streaming decoder over a vocabulary a loader built
 * (tok_json.c, tok_gguf.c). BPE is rank-ordered with a binary heap over a
 * linked list of symbols (lowest rank first, leftmost on ties: Hugging
 * Face's and llama.cpp's order); pairs and texts are found through
 * open-addressing hash tables, and encoded words are cached. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "tok_impl.h"

#define SPACE_MARK "\xe2\x96\x81" /* ▁ U+2581 */
#define TOK_CACHE (1u << 15)
#define CACHE_KEY 48
#define CACHE_IDS 20

typedef struct tok_cache_ent {
  uint64_t h;
  uint32_t klen, nid; /* klen 0: empty */
  char key[CACHE_KEY];
  int32_t ids[CACHE_IDS];
} tok_cache_ent_t;

/* ---- ids ------------------------------------------------------------------ */

int gc_tok_ids_push(gc_tok_ids_t *ids, int32_t id, gc_err_t *e) {
  if (ids->n == ids->cap) {
    size_t cap = ids->cap ? ids->cap * 2 : 64;
    int32_t *v = gc_realloc(ids->v, cap * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    ids->v = v;
    ids->cap = cap;
  }
  ids->v[ids->n++] = id;
  return GC_OK;
}

void gc_tok_ids_free(gc_tok_ids_t *ids) {
  free(ids->v);
  *ids = (gc_tok_ids_t){0};
}

/* ---- hash tables ------------------------------------------------------------ */

static int tab_init(tok_tab_t *tb, size_t count, gc_err_t *e) {
  size_t n = 16;
  while (n < count * 2) n *= 2;
  free(tb->slot);
  if (!(tb->slot = gc_malloc(n * sizeof *tb->slot, e))) return GC_ENOMEM;
  memset(tb->slot, 0xff, n * sizeof *tb->slot);
  tb->mask = (uint32_t)(n - 1);
  return GC_OK;
}

static uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t)(uint32_t)l << 32 | (uint32_t)r; }
static uint32_t pair_hash(uint64_t k) { return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32); }

static int text_eq(const gc_tok_t *t, int32_t id, const char *s, size_t n) {
  return t->len[id] == n && !memcmp(t->arena.data + t->off[id], s, n);
}

/* The id in tb whose text is s [n], or -1. */
static int32_t tab_find_text(const gc_tok_t *t, const tok_tab_t *tb, const char *s, size_t n) {
  if (!tb->slot) return -1;
  for (uint32_t i = (uint32_t)XXH3_64bits(s, n) & tb->mask;; i = (i + 1) & tb->mask) {
    int32_t id = tb->slot[i];
    if (id < 0 || text_eq(t, id, s, n)) return id;
  }
}

/* Insert id under its text unless the text is there already (first wins). */
static void tab_put_text(gc_tok_t *t, tok_tab_t *tb, int32_t id) {
  const char *s = t->arena.data + t->off[id];
  uint32_t i = (uint32_t)XXH3_64bits(s, t->len[id]) & tb->mask;
  for (; tb->slot[i] >= 0; i = (i + 1) & tb->mask)
    if (text_eq(t, tb->slot[i], s, t->len[id])) return;
  tb->slot[i] = id;
}

/* The slot of pair (l, r) in t->pairs: its merge, or the empty slot
 * where it would go. */
static tok_pair_t *pair_slot(const gc_tok_t *t, int32_t l, int32_t r) {
  uint64_t k = pair_key(l, r);
  for (uint32_t i = pair_hash(k) & t->pair_mask;; i = (i + 1) & t->pair_mask)
    if (t->pairs[i].key == k || t->pairs[i].key == UINT64_MAX) return &t->pairs[i];
}

static uint32_t char_key(const char *s, size_t n) {
  uint32_t k = 0;
  memcpy(&k, s, n < 4 ? n : 4);
  return k;
}

/* The slot of character key k in t->chars. */
static tok_char_t *char_slot(const gc_tok_t *t, uint32_t k) {
  for (uint32_t i = (k * 0x9E3779B1u) >> 7 & t->char_mask;; i = (i + 1) & t->char_mask)
    if (t->chars[i].key == k || t->chars[i].key == UINT32_MAX) return &t->chars[i];
}

/* ---- building (used by the loaders) ------------------------------------------ */

gc_tok_t *tok_new(const char *what, gc_err_t *e) {
  gc_tok_t *t = gc_calloc(1, sizeof *t, e);
  if (!t) return NULL;
  snprintf(t->what, sizeof t->what, "%s", what);
  t->bos = t->unk_id = -1;
  t->add_bos = -1;
  for (int i = 0; i < 256; i++) t->byte_id[i] = -1;
  return t;
}

/* Make ids 0 .. n-1 valid (new ones unassigned); capacity doubles. */
static int grow_vocab(gc_tok_t *t, int32_t n, gc_err_t *e) {
  if (n <= t->n_vocab) return GC_OK;
  if (n > t->cap_vocab) {
    size_t cap = (size_t)(t->cap_vocab ? t->cap_vocab : 256);
    while (cap < (size_t)n) cap *= 2;
    uint32_t *off = gc_realloc(t->off, cap * sizeof *off, e);
    if (!off) return GC_ENOMEM;
    t->off = off;
    uint32_t *len = gc_realloc(t->len, cap * sizeof *len, e);
    if (!len) return GC_ENOMEM;
    t->len = len;
    uint8_t *type = gc_realloc(t->type, cap, e);
    if (!type) return GC_ENOMEM;
    t->type = type;
    uint8_t *added = gc_realloc(t->added, cap, e);
    if (!added) return GC_ENOMEM;
    t->added = added;
    t->cap_vocab = (int32_t)cap;
  }
  for (int32_t i = t->n_vocab; i < n; i++) t->off[i] = t->len[i] = t->type[i] = t->added[i] = 0;
  t->n_vocab = n;
  return GC_OK;
}

int tok_set(gc_tok_t *t, int32_t id, const char *s, size_t n, int type, gc_err_t *e) {
  if (id < 0 || id >= (1 << 22))
    return gc_err_set(e, GC_ECORRUPT, "%s: token id %d is out of range", t->what, id);
  if (n > 65535)
    return gc_err_set(e, GC_ECORRUPT, "%s: token %d is %zu bytes long", t->what, id, n);
  if (grow_vocab(t, id + 1, e)) return GC_ENOMEM;
  if (t->type[id]) {
    if (text_eq(t, id, s, n)) return GC_OK;
    char q1[GC_QUOTE_BUF], q2[GC_QUOTE_BUF];
    return gc_err_set(e, GC_ECORRUPT, "%s: token id %d is given to two different texts (%s and %s)",
                      t->what, id, gc_quote(t->arena.data + t->off[id], t->len[id], q1, sizeof q1),
                      gc_quote(s, n, q2, sizeof q2));
  }
  if (t->arena.len + n > UINT32_MAX)
    return gc_err_set(e, GC_ECORRUPT, "%s: the vocabulary is larger than 4 GiB", t->what);
  t->off[id] = (uint32_t)t->arena.len;
  t->len[id] = (uint32_t)n;
  t->type[id] = (uint8_t)type;
  return gc_buf_append(&t->arena, s, n, e);
}

int tok_mark_added(gc_tok_t *t, int32_t id, int strip, gc_err_t *e) {
  if (id < 0 || id >= t->n_vocab || !t->type[id])
    return gc_err_set(e, GC_ECORRUPT, "%s: added token id %d has no text", t->what, id);
  if (t->len[id] == 0) return GC_OK; /* an empty added token can never match */
  t->added[id] = (uint8_t)(TOK_ADDED | (strip & (TOK_LSTRIP | TOK_RSTRIP)));
  return GC_OK;
}

int tok_add_merge(gc_tok_t *t, int32_t left, int32_t right, int32_t rank, int32_t id, gc_err_t *e) {
  if (t->n_merges == t->cap_merges) {
    size_t cap = t->cap_merges ? t->cap_merges * 2 : 1024;
    tok_merge_t *m = gc_realloc(t->merges, cap * sizeof *m, e);
    if (!m) return GC_ENOMEM;
    t->merges = m;
    t->cap_merges = cap;
  }
  t->merges[t->n_merges++] = (tok_merge_t){left, right, rank, id};
  return GC_OK;
}

int32_t tok_lookup(const gc_tok_t *t, const char *s, size_t n) {
  return tab_find_text(t, &t->vocab_ix, s, n);
}

int tok_index(gc_tok_t *t, gc_err_t *e) {
  if (tab_init(&t->vocab_ix, (size_t)t->n_vocab, e)) return GC_ENOMEM;
  size_t n_added = 0;
  for (int32_t i = 0; i < t->n_vocab; i++) n_added += t->added[i] != 0;
  if (tab_init(&t->added_ix, n_added, e)) return GC_ENOMEM;
  memset(t->added_lens, 0, sizeof t->added_lens);
  memset(t->added_first, 0, sizeof t->added_first);
  t->added_max = 0;
  for (int32_t i = 0; i < t->n_vocab; i++) {
    if (!t->type[i]) continue;
    if (!t->added[i]) {
      if (t->type[i] != TOK_CONTROL) tab_put_text(t, &t->vocab_ix, i);
      continue;
    }
    if (t->len[i] >= 256) continue; /* longer added tokens are not matched in text */
    tab_put_text(t, &t->added_ix, i);
    t->added_lens[t->len[i] / 64] |= 1ull << (t->len[i] % 64);
    t->added_first[(unsigned char)t->arena.data[t->off[i]]] = 1;
    if ((int)t->len[i] > t->added_max) t->added_max = (int)t->len[i];
  }
  return GC_OK;
}

int tok_set_regex(gc_tok_t *t, const char *pattern, gc_err_t *e) {
  /* JavaScript has no (?i:...); the reference spells the contractions out,
     which also keeps caseless matching from taking ſ for s or K for k */
  static const char ci[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  static const char cs[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  if (t->n_re == TOK_MAX_RE)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: a pre-tokenizer of more than %d regexes", t->what, TOK_MAX_RE);
  gc_buf_t p = {0};
  const char *at = strstr(pattern, ci);
  int rc = at ? gc_buf_append(&p, pattern, (size_t)(at - pattern), e) || gc_buf_append(&p, cs, strlen(cs), e) ||
                    gc_buf_printf(&p, e, "%s", at + strlen(ci))
              : gc_buf_printf(&p, e, "%s", pattern);
  if (rc) return GC_ENOMEM;
  int err;
  PCRE2_SIZE where;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)p.data, p.len,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY, &err,
                                 &where, NULL);
  gc_buf_free(&p);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: pre-tokenizer regex does not compile at offset %zu: %s",
                      t->what, (size_t)where, (char *)msg);
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT it still matches, slower */
  t->res[t->n_re++] = re;
  t->re = t->res[0];
  /* the match's bounds are all a split reads (pcre2_match returns 0 when
     a regex's captures do not fit, and sets them all the same) */
  if (!t->md && !(t->md = pcre2_match_data_create(1, NULL)))
    return gc_err_set(e, GC_ENOMEM, "out of memory (regex match data)");
  return GC_OK;
}

/* SPM: the byte tokens <0xXX>. */
static void find_byte_tokens(gc_tok_t *t) {
  static const char hex[] = "0123456789ABCDEF";
  char s[7] = "<0x00>";
  for (int b = 0; b < 256; b++) {
    s[3] = hex[b >> 4];
    s[4] = hex[b & 15];
    t->byte_id[b] = tok_lookup(t, s, 6);
  }
}

static size_t utf8_len(const unsigned char *s, size_t n);

/* SPM: the table of single-character tokens (the initial symbols). */
static int index_chars(gc_tok_t *t, gc_err_t *e) {
  size_t count = 0, n = 16;
  for (int32_t i = 0; i < t->n_vocab; i++)
    count += t->len[i] && t->len[i] <= 4 && !t->added[i];
  while (n < count * 2) n *= 2;
  if (!(t->chars = gc_malloc(n * sizeof *t->chars, e))) return GC_ENOMEM;
  memset(t->chars, 0xff, n * sizeof *t->chars);
  t->char_mask = (uint32_t)(n - 1);
  for (int32_t i = 0; i < t->n_vocab; i++) {
    const char *p = t->arena.data + t->off[i];
    if (!t->len[i] || t->len[i] > 4 || utf8_len((const unsigned char *)p, t->len[i]) != t->len[i]) continue;
    if (tok_lookup(t, p, t->len[i]) != i) continue; /* not the vocabulary's (first) token for it */
    tok_char_t *c = char_slot(t, char_key(p, t->len[i]));
    *c = (tok_char_t){char_key(p, t->len[i]), i};
  }
  return GC_OK;
}

/* SPM: whether some token has a non-▁ character followed by ▁ (then words
 * may not be split before ▁). */
static int spans_space_mark(const gc_tok_t *t) {
  for (int32_t i = 0; i < t->n_vocab; i++) {
    if (t->type[i] != TOK_NORMAL && t->type[i] != TOK_USER) continue;
    const char *s = t->arena.data + t->off[i], *end = s + t->len[i];
    for (const char *p = s + 1; p + 3 <= end; p++)
      if (!memcmp(p, SPACE_MARK, 3) && (p - s < 3 || memcmp(p - 3, SPACE_MARK, 3))) return 1;
  }
  return 0;
}

int tok_finish(gc_tok_t *t, gc_err_t *e) {
  if (t->n_vocab == 0) return gc_err_set(e, GC_ECORRUPT, "%s: the vocabulary is empty", t->what);
  if (!t->vocab_ix.slot && tok_index(t, e)) return e->code;
  if (t->kind == TOK_SPM) {
    find_byte_tokens(t);
    t->split_words = !spans_space_mark(t);
    if (index_chars(t, e)) return GC_ENOMEM;
  } else {
    for (int b = 0; b < 256; b++)
      if ((t->byte_id[b] = tok_lookup(t, (const char *)&(unsigned char){(unsigned char)b}, 1)) < 0)
        return gc_err_set(e, GC_ECORRUPT, "%s: byte-level vocabulary has no token for byte 0x%02X",
                          t->what, b);
  }
  size_t np = 16;
  while (np < t->n_merges * 2) np *= 2;
  if (!(t->pairs = gc_malloc(np * sizeof *t->pairs, e))) return GC_ENOMEM;
  memset(t->pairs, 0xff, np * sizeof *t->pairs);
  t->pair_mask = (uint32_t)(np - 1);
  for (size_t m = 0; m < t->n_merges; m++) {
    const tok_merge_t *g = &t->merges[m];
    tok_pair_t *p = pair_slot(t, g->left, g->right);
    if (p->key == UINT64_MAX) *p = (tok_pair_t){pair_key(g->left, g->right), g->rank, g->id}; /* the first stays */
  }
  free(t->merges);
  t->merges = NULL;
  t->n_merges = t->cap_merges = 0;
  if (t->bos >= t->n_vocab) t->bos = -1;
  int k = 0;
  for (int i = 0; i < t->n_eos; i++)
    if (t->eos[i] >= 0 && t->eos[i] < t->n_vocab) t->eos[k++] = t->eos[i];
  t->n_eos = k;
  if (t->add_bos < 0) t->add_bos = t->bos >= 0;
  if (!(t->cache = gc_calloc(TOK_CACHE, sizeof *t->cache, e))) return GC_ENOMEM;
  return GC_OK;
}

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for U+0100 onward, in byte order. */
static unsigned bytelevel_cp(unsigned b) {
  if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return b;
  unsigned n = 0;
  for (unsigned c = 0; c < b; c++)
    if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff))) n++;
  return 0x100 + n;
}

int tok_bytelevel_char(unsigned b, gc_buf_t *out, gc_err_t *e) {
  unsigned cp = bytelevel_cp(b);
  char u[2] = {(char)(0xc0 | cp >> 6), (char)(0x80 | (cp & 0x3f))};
  return cp < 0x80 ? gc_buf_append(out, &(char){(char)cp}, 1, e) : gc_buf_append(out, u, 2, e);
}

int tok_bytelevel_decode(const char *s, size_t n, gc_buf_t *out, gc_err_t *e) {
  static int16_t inv[0x144]; /* code point -> byte, built once */
  static int ready;
  if (!ready) {
    for (unsigned c = 0; c < GC_ARRAY_LEN(inv); c++) inv[c] = -1;
    for (unsigned b = 0; b < 256; b++) inv[bytelevel_cp(b)] = (int16_t)b;
    ready = 1;
  }
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    unsigned cp;
    if (c < 0x80) {
      cp = c;
      i++;
    } else if ((c & 0xe0) == 0xc0 && i + 1 < n && ((unsigned char)s[i + 1] & 0xc0) == 0x80) {
      cp = (unsigned)(c & 0x1f) << 6 | ((unsigned char)s[i + 1] & 0x3f);
      i += 2;
    } else {
      return -1;
    }
    if (cp >= GC_ARRAY_LEN(inv) || inv[cp] < 0) return -1;
    if (gc_buf_append(out, &(char){(char)inv[cp]}, 1, e)) return GC_ENOMEM;
  }
  return GC_OK;
}

void gc_tok_free(gc_tok_t *t) {
  if (!t) return;
  gc_buf_free(&t->arena);
  free(t->off);
  free(t->len);
  free(t->type);
  free(t->added);
  free(t->vocab_ix.slot);
  free(t->added_ix.slot);
  free(t->pairs);
  free(t->chars);
  free(t->merges);
  if (t->md) pcre2_match_data_free(t->md);
  for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->res[i]);
  free(t->note);
  free(t->chat_template);
  free(t->cache);
  free(t);
}

/* ---- facts ------------------------------------------------------------------ */

int gc_tok_vocab_size(const gc_tok_t *t) { return t->n_vocab; }
int32_t gc_tok_bos(const gc_tok_t *t) { return t->bos; }
int gc_tok_add_bos(const gc_tok_t *t) { return t->add_bos > 0 && t->bos >= 0; }
int gc_tok_prompt_flags(const gc_tok_t *t) {
  return GC_TOK_SPECIAL | (gc_tok_add_bos(t) ? GC_TOK_BOS : 0) | (t->add_eos > 0 && t->n_eos ? GC_TOK_EOS : 0);
}
const char *gc_tok_chat_template(const gc_tok_t *t) { return t->chat_template; }
const char *gc_tok_kind(const gc_tok_t *t) { return t->kind == TOK_SPM ? "spm" : "byte-level"; }
const char *gc_tok_note(const gc_tok_t *t) { return t->note; }

int gc_tok_is_eos(const gc_tok_t *t, int32_t id) {
  for (int i = 0; i < t->n_eos; i++)
    if (t->eos[i] == id) return 1;
  return 0;
}

int gc_tok_is_special(const gc_tok_t *t, int32_t id) {
  return id >= 0 && id < t->n_vocab && (t->type[id] == TOK_CONTROL || t->type[id] == TOK_UNKNOWN);
}

int32_t gc_tok_find(const gc_tok_t *t, const char *s, size_t n) {
  int32_t id = tab_find_text(t, &t->added_ix, s, n);
  return id >= 0 ? id : tok_lookup(t, s, n);
}

/* ---- encoding ----------------------------------------------------------------- */

/* Length of the UTF-8 sequence at s [n]: 1..4 for a valid one, 1 for a
 * byte that does not start one (each such byte is a symbol of its own). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t k;
  unsigned lo = 0x80, hi = 0xbf;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) k = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    k = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    k = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else
    return 1;
  if (n < k || s[1] < lo || s[1] > hi) return 1;
  for (size_t i = 2; i < k; i++)
    if ((s[i] & 0xc0) != 0x80) return 1;
  return k;
}

typedef struct sym {
  int32_t id; /* -1: not in the vocabulary (byte fallback at the end) */
  uint32_t start, len; /* len 0: merged into its left neighbour */
  int32_t prev, next;
} sym_t;

typedef struct heap_ent {
  int32_t rank, pos, left, right, id; /* pair (left, right) at symbol pos becomes id */
} heap_ent_t;

/* Scratch space of one encode call. */
typedef struct work {
  sym_t *sym;
  heap_ent_t *heap;
  size_t cap_sym, cap_heap, n_heap;
  gc_buf_t norm;
} work_t;

static int ent_less(const heap_ent_t *a, const heap_ent_t *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(work_t *w, heap_ent_t x, gc_err_t *e) {
  if (w->n_heap == w->cap_heap) {
    size_t cap = w->cap_heap ? w->cap_heap * 2 : 256;
    heap_ent_t *h = gc_realloc(w->heap, cap * sizeof *h, e);
    if (!h) return GC_ENOMEM;
    w->heap = h;
    w->cap_heap = cap;
  }
  size_t i = w->n_heap++;
  while (i > 0 && ent_less(&x, &w->heap[(i - 1) / 2])) {
    w->heap[i] = w->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  w->heap[i] = x;
  return GC_OK;
}

static heap_ent_t heap_pop(work_t *w) {
  heap_ent_t top = w->heap[0], x = w->heap[--w->n_heap];
  size_t i = 0, n = w->n_heap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && ent_less(&w->heap[c + 1], &w->heap[c])) c++;
    if (!ent_less(&w->heap[c], &x)) break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  if (n) w->heap[i] = x;
  return top;
}

/* Queue the pair starting at symbol i, if it merges. */
static int queue_pair(const gc_tok_t *t, work_t *w, int32_t i, gc_err_t *e) {
  if (i < 0) return GC_OK;
  int32_t j = w->sym[i].next;
  if (j < 0 || w->sym[i].id < 0 || w->sym[j].id < 0) return GC_OK;
  const tok_pair_t *p = pair_slot(t, w->sym[i].id, w->sym[j].id);
  return p->key != UINT64_MAX ? heap_push(w, (heap_ent_t){p->rank, i, w->sym[i].id, w->sym[j].id, p->id}, e) : GC_OK;
}

/* Split word s [n] into initial symbols: bytes (byte-level) or characters
 * looked up in the vocabulary (SPM). */
static int init_symbols(const gc_tok_t *t, work_t *w, const char *s, size_t n, size_t *count, gc_err_t *e) {
  if (n > w->cap_sym) {
    sym_t *v = gc_realloc(w->sym, n * sizeof *v, e);
    if (!v) return GC_ENOMEM;
    w->sym = v;
    w->cap_sym = n;
  }
  size_t k = 0;
  for (size_t i = 0; i < n; k++) {
    size_t l = t->kind == TOK_BYTELEVEL ? 1 : utf8_len((const unsigned char *)s + i, n - i);
    int32_t id = t->kind == TOK_BYTELEVEL ? t->byte_id[(unsigned char)s[i]] : char_slot(t, char_key(s + i, l))->id;
    w->sym[k] = (sym_t){id, (uint32_t)i, (uint32_t)l, (int32_t)k - 1, (int32_t)k + 1};
    i += l;
  }
  w->sym[k - 1].next = -1;
  *count = k;
  return GC_OK;
}

/* Append the ids of symbol x: its token, else its bytes' tokens (byte
 * fallback), else the unknown token. */
static int emit_symbol(const gc_tok_t *t, const sym_t *x, const char *s, gc_tok_ids_t *out, gc_err_t *e) {
  if (x->id >= 0) return gc_tok_ids_push(out, x->id, e);
  int all = t->byte_fallback;
  for (uint32_t i = 0; all && i < x->len; i++) all = t->byte_id[(unsigned char)s[x->start + i]] >= 0;
  if (all) {
    for (uint32_t i = 0; i < x->len; i++)
      if (gc_tok_ids_push(out, t->byte_id[(unsigned char)s[x->start + i]], e)) return GC_ENOMEM;
    return GC_OK;
  }
  if (t->unk_id < 0)
    return gc_err_set(e, GC_EINVAL, "%s: text has a character the vocabulary cannot represent "
                      "(no byte fallback and no unknown token)", t->what);
  if (t->fuse_unk && out->n && out->v[out->n - 1] == t->unk_id) return GC_OK;
  return gc_tok_ids_push(out, t->unk_id, e);
}

/* BPE over one word s [n] > 0 bytes; ids appended to out. */
static int bpe_word(const gc_tok_t *t, work_t *w, const char *s, size_t n, gc_tok_ids_t *out, gc_err_t *e) {
  size_t count;
  if (init_symbols(t, w, s, n, &count, e)) return GC_ENOMEM;
  w->n_heap = 0;
  for (size_t i = 0; i + 1 < count; i++)
    if (queue_pair(t, w, (int32_t)i, e)) return GC_ENOMEM;
  while (w->n_heap) {
    heap_ent_t h = heap_pop(w);
    sym_t *a = &w->sym[h.pos];
    if (!a->len || a->id != h.left || a->next < 0 || w->sym[a->next].id != h.right) continue;
    sym_t *b = &w->sym[a->next];
    a->id = h.id;
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (a->next >= 0) w->sym[a->next].prev = h.pos;
    if (queue_pair(t, w, a->prev, e) || queue_pair(t, w, h.pos, e)) return GC_ENOMEM;
  }
  for (int32_t i = 0; i >= 0; i = w->sym[i].next)
    if (emit_symbol(t, &w->sym[i], s, out, e)) return e->code;
  return GC_OK;
}

/* One pre-tokenized word: whole-word vocabulary hit (ignore_merges), the
 * cache, or BPE (whose result is then cached). */
static int encode_word(gc_tok_t *t, work_t *w, const char *s, size_t n, gc_tok_ids_t *out, gc_err_t *e) {
  if (!n) return GC_OK;
  if (t->ignore_merges) {
    int32_t id = tok_lookup(t, s, n);
    if (id >= 0) return gc_tok_ids_push(out, id, e);
  }
  uint64_t h = 0;
  tok_cache_ent_t *c = NULL;
  if (n <= CACHE_KEY) {
    h = XXH3_64bits(s, n);
    c = &t->cache[h & (TOK_CACHE - 1)];
    if (c->klen == n && c->h == h && !memcmp(c->key, s, n)) {
      for (uint32_t i = 0; i < c->nid; i++)
        if (gc_tok_ids_push(out, c->ids[i], e)) return GC_ENOMEM;
      return GC_OK;
    }
  }
  size_t first = out->n;
  if (bpe_word(t, w, s, n, out, e)) return e->code;
  if (c && out->n - first <= CACHE_IDS) {
    c->h = h;
    c->klen = (uint32_t)n;
    c->nid = (uint32_t)(out->n - first);
    memcpy(c->key, s, n);
    memcpy(c->ids, out->v + first, c->nid * sizeof *c->ids);
  }
  return GC_OK;
}

/* SPM: normalize the segment (prepend ▁, spaces to ▁) into w->norm, then
 * BPE word by word (a word starts at a ▁ after something else). */
static int encode_spm(gc_tok_t *t, work_t *w, const char *s, size_t n, int seg, gc_tok_ids_t *out,
                      gc_err_t *e) {
  gc_buf_t *b = &w->norm;
  b->len = 0;
  if (t->prepend == 1 || (t->prepend == 2 && seg == 0))
    if (gc_buf_append(b, SPACE_MARK, 3, e)) return GC_ENOMEM;
  for (size_t i = 0, j; i < n; i = j + 1) {
    for (j = i; j < n && !(t->replace_space && s[j] == ' '); j++) {}
    if (gc_buf_append(b, s + i, j - i, e) || (j < n && gc_buf_append(b, SPACE_MARK, 3, e))) return GC_ENOMEM;
  }
  if (!t->split_words) return encode_word(t, w, b->data, b->len, out, e);
  size_t start = 0;
  for (size_t i = 3; i + 3 <= b->len; i++) {
    if (memcmp(b->data + i, SPACE_MARK, 3) || !memcmp(b->data + i - 3, SPACE_MARK, 3)) continue;
    if (encode_word(t, w, b->data + start, i - start, out, e)) return e->code;
    start = i;
    i += 2;
  }
  return encode_word(t, w, b->data + start, b->len - start, out, e);
}

/* Byte-level: the words of s [n] (the whole subject: a lookahead sees its
 * end as the end of the text) under the pre-tokenizer's regexes from
 * level on: regex level's matches and the gaps between them, each split
 * by the regexes after it; a word no regex is left to split is encoded. */
static int pretokenize(gc_tok_t *t, work_t *w, int level, const char *s, size_t n, gc_tok_ids_t *out, gc_err_t *e) {
  if (!n) return GC_OK;
  if (level == t->n_re) return encode_word(t, w, s, n, out, e);
  size_t gap = 0, at = 0;
  while (at < n) {
    int rc = pcre2_match(t->res[level], (PCRE2_SPTR)s, n, at, 0, t->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* a long word: the interpreter keeps its frames on the heap */
      rc = pcre2_match(t->res[level], (PCRE2_SPTR)s, n, at, PCRE2_NO_JIT, t->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return gc_err_set(e, GC_EINVAL, "%s: pre-tokenizer regex failed: %s", t->what, (char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    size_t m0 = ov[0], m1 = ov[1]; /* the words below match again into t->md */
    if (m1 == m0) { /* empty match: step over one character */
      if (m0 >= n) break;
      at = m0 + utf8_len((const unsigned char *)s + m0, n - m0);
      continue;
    }
    if (pretokenize(t, w, level + 1, s + gap, m0 - gap, out, e) ||
        pretokenize(t, w, level + 1, s + m0, m1 - m0, out, e))
      return e->code;
    gap = at = m1;
  }
  return pretokenize(t, w, level + 1, s + gap, n - gap, out, e);
}

static int encode_bytelevel(gc_tok_t *t, work_t *w, const char *s, size_t n, gc_tok_ids_t *out, gc_err_t *e) {
  if (t->add_prefix_space && n && s[0] != ' ') {
    w->norm.len = 0;
    if (gc_buf_append(&w->norm, " ", 1, e) || gc_buf_append(&w->norm, s, n, e)) return GC_ENOMEM;
    s = w->norm.data;
    n = w->norm.len;
  }
  return pretokenize(t, w, 0, s, n, out, e);
}

static int encode_text(gc_tok_t *t, work_t *w, const char *s, size_t n, int seg, gc_tok_ids_t *out,
                       gc_err_t *e) {
  if (!n) return GC_OK;
  return t->kind == TOK_SPM ? encode_spm(t, w, s, n, seg, out, e) : encode_bytelevel(t, w, s, n, out, e);
}

static int is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* The added token at s [n] (longest first), or -1; user: user-defined
 * ones only (TOK_USER: added tokens that are not special). */
static int32_t match_added(const gc_tok_t *t, const char *s, size_t n, int user) {
  if (!t->added_first[(unsigned char)s[0]]) return -1;
  for (int l = t->added_max < (int)n ? t->added_max : (int)n; l > 0; l--)
    if (t->added_lens[l / 64] >> (l % 64) & 1) {
      int32_t id = tab_find_text(t, &t->added_ix, s, (size_t)l);
      if (id >= 0 && (!user || t->type[id] == TOK_USER)) return id;
    }
  return -1;
}

int gc_tok_encode(gc_tok_t *t, const char *text, size_t n, int flags, gc_tok_ids_t *out, gc_err_t *e) {
  if ((flags & GC_TOK_BOS) && t->bos < 0)
    return gc_err_set(e, GC_EINVAL, "%s: the tokenizer has no BOS token", t->what);
  if ((flags & GC_TOK_BOS) && gc_tok_ids_push(out, t->bos, e)) return GC_ENOMEM;
  work_t w = {0};
  int rc = GC_OK, seg = 0;
  size_t start = 0;
  /* added tokens are cut out first: every one with GC_TOK_SPECIAL, the
   * user-defined ones always (as Hugging Face's tokenizers and llama.cpp
   * match them whether or not special tokens are parsed) */
  for (size_t i = 0; !rc && i < n;) {
    int32_t id = match_added(t, text + i, n - i, !(flags & GC_TOK_SPECIAL));
    if (id < 0) {
      i++;
      continue;
    }
    size_t end = i;
    if (t->added[id] & TOK_LSTRIP)
      while (end > start && is_space(text[end - 1])) end--;
    rc = encode_text(t, &w, text + start, end - start, seg++, out, e);
    if (!rc) rc = gc_tok_ids_push(out, id, e);
    i += t->len[id];
    if (t->added[id] & TOK_RSTRIP)
      while (i < n && is_space(text[i])) i++;
    start = i;
  }
  if (!rc) rc = encode_text(t, &w, text + start, n - start, seg, out, e);
  if (!rc && (flags & GC_TOK_EOS) && t->n_eos) rc = gc_tok_ids_push(out, t->eos[0], e);
  free(w.sym);
  free(w.heap);
  gc_buf_free(&w.norm);
  return rc;
}

/* ---- decoding ------------------------------------------------------------------- */

void gc_tok_stream_init(gc_tok_stream_t *s, const gc_tok_t *t, int flags) {
  *s = (gc_tok_stream_t){.t = t, .flags = flags, .at_start = 1};
}

void gc_tok_stream_after(gc_tok_stream_t *s, const gc_tok_t *t, int flags, const int32_t *prompt, size_t n) {
  int text = 0;
  for (size_t i = 0; i < n && !text; i++) text = !gc_tok_is_special(t, prompt[i]);
  *s = (gc_tok_stream_t){.t = t, .flags = flags, .at_start = !text};
}

static const char REPLACEMENT[] = "\xef\xbf\xbd"; /* U+FFFD */

/* Feed bytes p [n] through the UTF-8 check: whole sequences go to out,
 * each maximal invalid subpart becomes U+FFFD, a valid incomplete tail is
 * held in s->pend. */
static int utf8_feed(gc_tok_stream_t *s, const unsigned char *p, size_t n, gc_buf_t *out, gc_err_t *e) {
  unsigned char buf[8];
  while (n || s->npend) {
    /* work on pend + the next few bytes so a sequence can span the two */
    size_t k = (size_t)s->npend, take = n < 4 ? n : 4;
    memcpy(buf, s->pend, k);
    memcpy(buf + k, p, take);
    size_t avail = k + take, l;
    if (!k && n > 4) { /* fast path: copy the ASCII run */
      size_t r = 0;
      while (r < n && p[r] < 0x80) r++;
      if (r) {
        if (gc_buf_append(out, p, r, e)) return GC_ENOMEM;
        p += r;
        n -= r;
        continue;
      }
    }
    l = utf8_len(buf, avail);
    if (l > 1 || buf[0] < 0x80) { /* a whole valid sequence */
      if (gc_buf_append(out, buf, l, e)) return GC_ENOMEM;
    } else {
      /* invalid, or a valid prefix cut short by the end of the input */
      size_t v = 1;
      unsigned c = buf[0];
      size_t need = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 1;
      while (v < need && v < avail) {
        unsigned lo = 0x80, hi = 0xbf;
        if (v == 1 && c == 0xe0) lo = 0xa0;
        if (v == 1 && c == 0xed) hi = 0x9f;
        if (v == 1 && c == 0xf0) lo = 0x90;
        if (v == 1 && c == 0xf4) hi = 0x8f;
        if (buf[v] < lo || buf[v] > hi) break;
        v++;
      }
      if (need > 1 && v == avail && v < need) { /* incomplete: hold it */
        memcpy(s->pend, buf, v);
        s->npend = (int)v;
        return GC_OK;
      }
      if (gc_buf_append(out, REPLACEMENT, 3, e)) return GC_ENOMEM;
      l = v;
    }
    /* consume l bytes: first from pend, then from p */
    if (l <= k) {
      memmove(s->pend, s->pend + l, k - l);
      s->npend = (int)(k - l);
    } else {
      s->npend = 0;
      p += l - k;
      n -= l - k;
    }
  }
  return GC_OK;
}

int gc_tok_stream_put(gc_tok_stream_t *s, int32_t id, gc_buf_t *out, gc_err_t *e) {
  const gc_tok_t *t = s->t;
  if (id < 0 || id >= t->n_vocab)
    return gc_err_set(e, GC_EINVAL, "token id %d is outside the vocabulary (0..%d)", id, t->n_vocab - 1);
  if ((s->flags & GC_TOK_SKIP_SPECIAL) && gc_tok_is_special(t, id)) return GC_OK;
  const char *p = t->arena.data + t->off[id];
  size_t n = t->len[id];
  if (t->kind == TOK_BYTELEVEL || t->added[id]) {
    if (n) s->at_start = 0;
    return utf8_feed(s, (const unsigned char *)p, n, out, e);
  }
  if (t->type[id] == TOK_BYTE && n == 6) { /* <0xXX> */
    unsigned b = (unsigned)strtoul((char[3]){p[3], p[4], 0}, NULL, 16);
    s->at_start = 0;
    return utf8_feed(s, &(unsigned char){(unsigned char)b}, 1, out, e);
  }
  for (size_t i = 0, j; i < n; i = j) { /* ▁ -> ' ' */
    int mark = i + 3 <= n && !memcmp(p + i, SPACE_MARK, 3);
    for (j = i; j < n && !(j + 3 <= n && !memcmp(p + j, SPACE_MARK, 3)); j++) {}
    if (mark) {
      j = i + 3;
      int strip = s->at_start && t->prepend;
      s->at_start = 0;
      if (!strip && utf8_feed(s, (const unsigned char *)" ", 1, out, e)) return GC_ENOMEM;
    } else {
      s->at_start = 0;
      if (utf8_feed(s, (const unsigned char *)p + i, j - i, out, e)) return GC_ENOMEM;
    }
  }
  return GC_OK;
}

int gc_tok_piece(const gc_tok_t *t, int32_t id, int at_start, gc_buf_t *out, gc_err_t *e) {
  if (id < 0 || id >= t->n_vocab)
    return gc_err_set(e, GC_EINVAL, "token id %d is outside the vocabulary (0..%d)", id, t->n_vocab - 1);
  const char *p = t->arena.data + t->off[id];
  size_t n = t->len[id];
  if (t->kind == TOK_BYTELEVEL || t->added[id]) return gc_buf_append(out, p, n, e);
  if (t->type[id] == TOK_BYTE && n == 6) { /* <0xXX> */
    char b = (char)strtoul((char[3]){p[3], p[4], 0}, NULL, 16);
    return gc_buf_append(out, &b, 1, e);
  }
  for (size_t i = 0; i < n;) { /* ▁ -> ' ', but the first word's at the start */
    int mark = i + 3 <= n && !memcmp(p + i, SPACE_MARK, 3);
    if (!(mark && !i && at_start && t->prepend) && gc_buf_append(out, mark ? " " : p + i, 1, e)) return GC_ENOMEM;
    i += mark ? 3 : 1;
  }
  return GC_OK;
}

int gc_tok_stream_flush(gc_tok_stream_t *s, gc_buf_t *out, gc_err_t *e) {
  if (!s->npend) return GC_OK;
  s->npend = 0;
  return gc_buf_append(out, REPLACEMENT, 3, e);
}

int gc_tok_decode(const gc_tok_t *t, const int32_t *ids, size_t n, int flags, gc_buf_t *out, gc_err_t *e) {
  gc_tok_stream_t s;
  gc_tok_stream_init(&s, t, flags);
  for (size_t i = 0; i < n; i++)
    if (gc_tok_stream_put(&s, ids[i], out, e)) return e->code;
  return gc_tok_stream_flush(&s, out, e);
}

/* ---- loading --------------------------------------------------------------------- */

#include <sys/stat.h>

int gc_tok_load(const char *path, gc_tok_t **out, gc_err_t *e) {
  struct stat st;
  char buf[4096];
  *out = NULL;
  if (stat(path, &st) != 0) return gc_err_set(e, GC_ENOTFOUND, "%s: no such tokenizer file or directory", path);
  if (S_ISDIR(st.st_mode)) {
    snprintf(buf, sizeof buf, "%s/tokenizer.json", path);
    if (stat(buf, &st) != 0)
      return gc_err_set(e, GC_ENOTFOUND, "%s: no tokenizer.json in this directory", path);
    return tok_load_json(buf, path, out, e);
  }
  FILE *f = fopen(path, "rb");
  char magic[4] = {0};
  if (!f) return gc_err_set(e, GC_EIO, "%s: cannot open", path);
  size_t got = fread(magic, 1, 4, f);
  fclose(f);
  if (got == 4 && !memcmp(magic, "GGUF", 4)) return tok_load_gguf(path, out, e);
  snprintf(buf, sizeof buf, "%s", path);
  char *slash = strrchr(buf, '/');
  if (slash) *slash = 0;
  return tok_load_json(path, slash ? buf : ".", out, e);
}
