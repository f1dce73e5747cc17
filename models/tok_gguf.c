/* tok_gguf.c — a gc_tok_t from GGUF metadata (tokenizer.ggml.*):
 * model "llama" (SentencePiece: scores, byte fallback <0xXX>; merges are
 * derived from the scores, llama.cpp's order: the best-scoring pair first,
 * leftmost on ties) and "gpt2" (byte-level BPE with merges; the
 * pre-tokenizer regex chosen by tokenizer.ggml.pre). */
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_impl.h"

static int str_is(gc_gguf_str_t s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.p, lit, s.n); }

/* Token i's text into the vocabulary (byte-level: decoded to bytes, or
 * kept as written for control and user tokens that are not byte-level). */
static int put_token(gc_tok_t *t, int32_t i, gc_gguf_str_t s, int type, gc_buf_t *b, gc_err_t *e) {
  if (s.n > 65535) return gc_err_set(e, GC_ECORRUPT, "%s: token %d is %llu bytes long", t->what, i,
                                     (unsigned long long)s.n);
  if (t->kind == TOK_BYTELEVEL) {
    b->len = 0;
    int rc = tok_bytelevel_decode(s.p, (size_t)s.n, b, e);
    if (rc > 0) return rc;
    if (rc == 0) return tok_set(t, i, b->data ? b->data : "", b->len, type, e);
    char q[GC_QUOTE_BUF];
    if (type == TOK_NORMAL)
      return gc_err_set(e, GC_ECORRUPT, "%s: token %d %s is not byte-level text", t->what, i,
                        gc_quote(s.p, s.n, q, sizeof q));
  }
  return tok_set(t, i, s.p, (size_t)s.n, type, e);
}

static int read_tokens(gc_tok_t *t, const gc_gguf_t *g, gc_err_t *e) {
  gc_gguf_str_t *tok = NULL;
  int32_t *type = NULL;
  uint64_t n, nt = 0;
  gc_buf_t b = {0};
  int rc = gc_gguf_get_strs(g, "tokenizer.ggml.tokens", &tok, &n, e);
  if (!rc && (n == 0 || n > (1u << 22)))
    rc = gc_err_set(e, GC_ECORRUPT, "%s: %llu tokens", t->what, (unsigned long long)n);
  if (!rc && gc_gguf_find(g, "tokenizer.ggml.token_type")) {
    rc = gc_gguf_get_i32s(g, "tokenizer.ggml.token_type", &type, &nt, e);
    if (!rc && nt != n)
      rc = gc_err_set(e, GC_ECORRUPT, "%s: %llu token types for %llu tokens", t->what, (unsigned long long)nt,
                      (unsigned long long)n);
  }
  for (uint64_t i = 0; !rc && i < n; i++) {
    int ty = type ? type[i] : TOK_NORMAL;
    if (ty < TOK_NORMAL || ty > TOK_BYTE)
      rc = gc_err_set(e, GC_ECORRUPT, "%s: token %llu has type %d", t->what, (unsigned long long)i, ty);
    if (!rc) rc = put_token(t, (int32_t)i, tok[i], ty, &b, e);
    if (!rc && (ty == TOK_CONTROL || ty == TOK_USER || ty == TOK_UNKNOWN)) rc = tok_mark_added(t, (int32_t)i, 0, e);
  }
  free(tok);
  free(type);
  gc_buf_free(&b);
  return rc;
}

/* gpt2: merges "a b" in byte-level spelling, rank = position. */
static int read_merges(gc_tok_t *t, const gc_gguf_t *g, gc_err_t *e) {
  gc_gguf_str_t *m;
  uint64_t n;
  if (gc_gguf_get_strs(g, "tokenizer.ggml.merges", &m, &n, e)) return e->code;
  gc_buf_t b = {0};
  int rc = GC_OK;
  for (uint64_t i = 0; !rc && i < n; i++) {
    const char *sp = memchr(m[i].p, ' ', (size_t)m[i].n);
    int32_t id[3] = {-1, -1, -1};
    if (!sp || sp == m[i].p || sp + 1 == m[i].p + m[i].n) {
      rc = gc_err_set(e, GC_ECORRUPT, "%s: merge %llu is not two tokens", t->what, (unsigned long long)i);
      break;
    }
    b.len = 0;
    size_t na = (size_t)(sp - m[i].p), nb = (size_t)m[i].n - na - 1;
    int da = tok_bytelevel_decode(m[i].p, na, &b, e);
    size_t mid = b.len;
    int db = da > 0 ? da : tok_bytelevel_decode(sp + 1, nb, &b, e);
    if (da > 0 || db > 0) {
      rc = GC_ENOMEM;
      break;
    }
    if (da == 0 && db == 0) {
      id[0] = tok_lookup(t, b.data, mid);
      id[1] = tok_lookup(t, b.data + mid, b.len - mid);
      id[2] = tok_lookup(t, b.data, b.len);
    }
    char q[GC_QUOTE_BUF];
    if (id[0] < 0 || id[1] < 0 || id[2] < 0)
      rc = gc_err_set(e, GC_ECORRUPT, "%s: merge %llu %s names a token that is not in the vocabulary",
                      t->what, (unsigned long long)i, gc_quote(m[i].p, m[i].n, q, sizeof q));
    if (!rc) rc = tok_add_merge(t, id[0], id[1], (int32_t)i, id[2], e);
  }
  free(m);
  gc_buf_free(&b);
  return rc;
}

static const float *g_scores; /* for the sort below only */
static int by_score_desc(const void *a, const void *b) {
  float x = g_scores[*(const int32_t *)a], y = g_scores[*(const int32_t *)b];
  return x > y ? -1 : x < y ? 1 : *(const int32_t *)a - *(const int32_t *)b;
}

/* llama: every split of a normal token into two tokens is a merge, ranked
 * by the token's score (equal scores, equal ranks). */
static int merges_from_scores(gc_tok_t *t, const gc_gguf_t *g, gc_err_t *e) {
  float *sc;
  uint64_t n;
  if (gc_gguf_get_f32s(g, "tokenizer.ggml.scores", &sc, &n, e)) return e->code;
  if (n != (uint64_t)t->n_vocab) {
    free(sc);
    return gc_err_set(e, GC_ECORRUPT, "%s: %llu scores for %d tokens", t->what, (unsigned long long)n, t->n_vocab);
  }
  int32_t *order = gc_malloc((size_t)n * sizeof *order, e);
  if (!order) {
    free(sc);
    return GC_ENOMEM;
  }
  for (int32_t i = 0; i < t->n_vocab; i++) order[i] = i;
  g_scores = sc;
  qsort(order, (size_t)n, sizeof *order, by_score_desc);
  int rc = GC_OK;
  for (int32_t k = 0, rank = 0; !rc && k < t->n_vocab; k++) {
    int32_t id = order[k];
    if (k && sc[id] != sc[order[k - 1]]) rank = k;
    if (t->type[id] != TOK_NORMAL && t->type[id] != TOK_USER) continue;
    const char *s = t->arena.data + t->off[id];
    for (uint32_t j = 1; !rc && j < t->len[id]; j++) {
      if (((unsigned char)s[j] & 0xc0) == 0x80) continue; /* split between characters only */
      int32_t l = tok_lookup(t, s, j), r = tok_lookup(t, s + j, t->len[id] - j);
      if (l >= 0 && r >= 0) rc = tok_add_merge(t, l, r, rank, id, e);
    }
  }
  free(order);
  free(sc);
  return rc;
}

/* The tokens that end a generation (gc_gguf_eog_ids), eos first: the one
 * a prompt's add_eos appends. */
static void read_eog(gc_tok_t *t, const gc_gguf_t *g) {
  t->n_eos = gc_gguf_eog_ids(g, t->n_vocab, t->eos, (int)GC_ARRAY_LEN(t->eos));
}

static int read_specials(gc_tok_t *t, const gc_gguf_t *g, gc_err_t *e) {
  int64_t v;
  gc_gguf_str_t s;
  gc_err_t ignore = {0};
  if (!gc_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v, &ignore) && v >= 0 && v < t->n_vocab)
    t->bos = (int32_t)v;
  read_eog(t, g);
  if (!gc_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &v, &ignore) && v >= 0 && v < t->n_vocab)
    t->unk_id = (int32_t)v;
  if (!gc_gguf_get_int(g, "tokenizer.ggml.add_bos_token", &v, &ignore)) t->add_bos = v != 0;
  if (!gc_gguf_get_int(g, "tokenizer.ggml.add_eos_token", &v, &ignore)) t->add_eos = v != 0;
  if (!gc_gguf_get_int(g, "tokenizer.ggml.add_space_prefix", &v, &ignore)) t->prepend = v != 0;
  if (!gc_gguf_get_str(g, "tokenizer.chat_template", &s, &ignore)) {
    if (!(t->chat_template = gc_malloc((size_t)s.n + 1, e))) return GC_ENOMEM;
    memcpy(t->chat_template, s.p, (size_t)s.n);
    t->chat_template[s.n] = 0;
  }
  return GC_OK;
}

/* The pre-tokenizer named by tokenizer.ggml.pre, with llama.cpp's
 * defaults for it (the file's add_bos_token, read later, overrides): the
 * Llama 3 family matches a whole word in the vocabulary before any merge
 * (ignore_merges, as its tokenizer.json says) and adds BOS; GPT-2 adds
 * none. */
static int set_pre(gc_tok_t *t, const gc_gguf_t *g, gc_err_t *e) {
  gc_gguf_str_t pre = {"default", 7};
  gc_err_t ignore = {0};
  gc_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &ignore);
  if (str_is(pre, "default") || str_is(pre, "gpt-2")) {
    t->add_bos = 0;
    return tok_set_regex(t, TOK_GPT2_REGEX, e);
  }
  if (str_is(pre, "llama3") || str_is(pre, "llama-bpe") || str_is(pre, "llama-v3")) {
    t->ignore_merges = t->add_bos = 1;
    return tok_set_regex(t, TOK_LLAMA3_REGEX, e);
  }
  char q[GC_QUOTE_BUF];
  return gc_err_set(e, GC_EUNSUPPORTED, "%s: pre-tokenizer %s is not supported (gcore knows gpt-2, llama-bpe)",
                    t->what, gc_quote(pre.p, pre.n, q, sizeof q));
}

static int build(gc_tok_t *t, const gc_gguf_t *g, gc_err_t *e) {
  gc_gguf_str_t model;
  if (gc_gguf_get_str(g, "tokenizer.ggml.model", &model, e)) return e->code;
  if (str_is(model, "llama")) {
    t->kind = TOK_SPM;
    t->prepend = t->replace_space = t->byte_fallback = 1;
  } else if (str_is(model, "gpt2")) {
    t->kind = TOK_BYTELEVEL;
    if (set_pre(t, g, e)) return e->code;
  } else {
    char q[GC_QUOTE_BUF];
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: tokenizer model %s is not supported (gcore implements llama, gpt2)",
                      t->what, gc_quote(model.p, model.n, q, sizeof q));
  }
  if (read_tokens(t, g, e) || tok_index(t, e)) return e->code;
  if (t->kind == TOK_SPM ? merges_from_scores(t, g, e) : read_merges(t, g, e)) return e->code;
  if (read_specials(t, g, e)) return e->code;
  return tok_finish(t, e);
}

int tok_load_gguf(const char *path, gc_tok_t **out, gc_err_t *e) {
  *out = NULL;
  gc_gguf_t *g = NULL;
  gc_tok_t *t = tok_new(path, e);
  int rc = t ? gc_gguf_open(path, &g, e) : GC_ENOMEM;
  if (!rc) rc = build(t, g, e);
  gc_gguf_close(g);
  if (rc) {
    gc_tok_free(t);
    return rc;
  }
  *out = t;
  return GC_OK;
}
