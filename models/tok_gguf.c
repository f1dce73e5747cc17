/* tok_gguf.c — a gc_tok_t from GGUF metadata (tokenizer.ggml.*):
 * model "llama" (SentencePiece: scores, byte fallback <0xXX>; merges are
 * derived from the scores, llama.cpp's order: the best-scoring pair first,
 * leftmost on ties) and "gpt2" (byte-level BPE with merges; the
 * pre-tokenizer, llama.cpp's regexes for the type it maps
 * tokenizer.ggml.pre to, its default where the key is missing). */
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
  /* an absent key, or an id outside the vocabulary: llama.cpp's default id
   * for the tokenizer model (as the model's config takes it: gg_special) */
  if (gc_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &v, &ignore) || v < 0 || v >= t->n_vocab)
    v = gc_gguf_default_special(g, "bos");
  if (v >= 0 && v < t->n_vocab) t->bos = (int32_t)v;
  read_eog(t, g);
  if (gc_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &v, &ignore) || v < 0 || v >= t->n_vocab)
    v = gc_gguf_default_special(g, "unk");
  if (v >= 0 && v < t->n_vocab) t->unk_id = (int32_t)v;
  if (!gc_gguf_get_int(g, "tokenizer.ggml.add_bos_token", &v, &ignore)) t->add_bos = v != 0;
  if (!gc_gguf_get_int(g, "tokenizer.ggml.add_eos_token", &v, &ignore)) t->add_eos = v != 0;
  if (!gc_gguf_get_int(g, "tokenizer.ggml.add_sep_token", &v, &ignore) && v)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: tokenizer.ggml.add_sep_token is true: gcore does not append a "
                      "separator token to a text", t->what);
  if (!gc_gguf_get_int(g, "tokenizer.ggml.add_space_prefix", &v, &ignore)) t->prepend = v != 0;
  if (!gc_gguf_get_str(g, "tokenizer.chat_template", &s, &ignore)) {
    if (!(t->chat_template = gc_malloc((size_t)s.n + 1, e))) return GC_ENOMEM;
    memcpy(t->chat_template, s.p, (size_t)s.n);
    t->chat_template[s.n] = 0;
  }
  return GC_OK;
}

/* ---- pre-tokenizers: llama.cpp's, by tokenizer.ggml.pre ------------------ */

/* The regexes of llama.cpp's BPE pre-tokenizer types, as its source spells
 * them (src/llama-vocab.cpp at commit 00ad355e, llm_tokenizer_bpe's
 * constructor; data, copied exactly). llama.cpp runs each with std::regex
 * (ECMAScript) on the text's code points, a \p{...} class by the code
 * point's Unicode category, or through a hand-written matcher of the same
 * regex (GPT-2's, Llama 3's); PCRE2 with Unicode properties matches them
 * the same way, but where the two Unicode tables disagree, for U+180E
 * (PCRE2's \s takes it) and for invalid UTF-8 (llama.cpp makes it U+FFFD,
 * gcore keeps the bytes: tokenizer.h). One spelling differs, DEEPSEEK_LLM's:
 * llama.cpp replaces every non-ASCII whitespace character with U+000B
 * before a regex without \p{...}, so U+3000, which its punctuation class
 * lists, is matched there only as \s; gcore's class starts at U+3001. Six
 * letters of its letter class are written as \u escapes: they are
 * canonical singletons that text tools normalize into other letters. */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                               \
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" \
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                            \
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" \
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_PORO " ?[^(\\s|.,!?…。，、।۔،)]+"
#define RE_CJK "[一-龥ࠀ-一가-퟿]+"

/* A pre-tokenizer type of llama.cpp (LLAMA_VOCAB_PRE_TYPE_*): the regexes
 * its words go through in turn, and what llama.cpp's loader sets for it
 * that changes the ids of a text (the file's add_bos_token, read later,
 * overrides add_bos). */
typedef struct pre_type {
  const char *re[TOK_MAX_RE]; /* NULL-terminated */
  int ignore_merges;          /* a word that is a token is that token, before any merge */
  int add_bos;
} pre_type_t;

static const pre_type_t
    PRE_DEFAULT = {{"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0, 0},
    PRE_LLAMA3 = {{RE_LLAMA3}, 1, 1},
    PRE_DBRX = {{RE_LLAMA3}, 0, 0}, /* DBRX, SMAUG, CHATGLM4: Llama 3's regex alone */
    PRE_JAIS2 = {{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                  "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|"
                  "\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|"
                  "\\s{1,2}(?!\\S)|\\s{1}"},
                 0, 0},
    PRE_DEEPSEEK_LLM = {{"[\r\n]",
                         "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚ"
                         "Ḁ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼ"
                         "ℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗ"
                         "Ａ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
                         "\\s?[!-/:-~！-／：-～‘-‟、-。]+", "\\s+$", RE_CJK, "\\p{N}+"},
                        0, 0},
    PRE_DEEPSEEK_CODER = {{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}"}, 0, 0},
    PRE_FALCON = {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, 0, 0},
    /* and REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA, MELLUM2: */
    PRE_STARCODER = {{"\\p{N}", RE_GPT2}, 0, 0},
    PRE_GPT2 = {{RE_GPT2}, 0, 0},                /* and MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING */
    PRE_QWEN2 = {{RE_QWEN2}, 0, 0},              /* and STABLELM2, HUNYUAN, SOLAR_OPEN, GROK_2 */
    PRE_QWEN35 = {{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|"
                   "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                  0, 0},
    PRE_PORO = {{RE_PORO}, 0, 0}, /* and BLOOM, GPT3_FINNISH */
    PRE_VIKING = {{RE_PORO, "\\p{N}"}, 0, 0},
    PRE_TEKKEN = {{"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?"
                   "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
                   "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                  1, 1},
    PRE_CHAMELEON = {{"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
                      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2},
                     0, 1},
    PRE_GPT4O = {{"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
                  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?"
                  "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|"
                  "'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                 0, 0}, /* and MINIMAX_M2 */
    PRE_GRANITE_EMB_MULTI = {{"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+"
                              "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?"
                              "((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|"
                              "'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
                              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                             1, 0},
    PRE_BAILINGMOE = {{"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
                      0, 0},
    PRE_SEED_CODER = {{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                       "\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                      0, 0},
    PRE_UFAKZEKA = {{"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                     "\\s+(?!\\S)|\\s+"},
                    0, 0},
    PRE_LAGUNA = {{"[^\\n]+|[\\n]+", RE_QWEN2}, 0, 0},
    PRE_EXAONE_MOE = {{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
                       "(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|"
                       "\\s+(?!\\S)|\\s+"},
                      0, 0},
    PRE_MINICPM5 = {{"\\p{N}{1,3}", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
                                    "\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                    1, 0};

/* tokenizer.ggml.pre -> type, as llama_vocab::impl::load maps the names.
 * Left out, and refused: the names whose split is more than regexes
 * (kimi-k2, afmoe), whose regex means something else in PCRE2 (tiny_aya,
 * cohere2moe: ASCII \d and \b; superbpe: splits at empty matches;
 * deepseek-v3, hunyuan-dense, hy_v4, joyai-llm, spark2_5: llama.cpp's \p{S}
 * leaves out '~'; youtu: its \p{Lu} is any letter), that encode without
 * GPT-2's byte map (gemma4, granite-embed-multi-311m, sarvam-moe,
 * whitespace), or that append a separator (jina-v1-en, jina-v2-code,
 * roberta-bpe). */
static const struct {
  const char *name;
  const pre_type_t *type;
} PRE_NAMES[] = {
    {"default", &PRE_DEFAULT},
    {"llama3", &PRE_LLAMA3}, {"llama-v3", &PRE_LLAMA3}, {"llama-bpe", &PRE_LLAMA3}, {"falcon3", &PRE_LLAMA3},
    {"falcon-h1", &PRE_LLAMA3}, {"pixtral", &PRE_LLAMA3}, {"midm-2.0", &PRE_LLAMA3}, {"lfm2", &PRE_LLAMA3},
    {"jina-v5-nano", &PRE_LLAMA3},
    {"minicpm5", &PRE_MINICPM5},
    {"deepseek-llm", &PRE_DEEPSEEK_LLM},
    {"deepseek-coder", &PRE_DEEPSEEK_CODER},
    {"falcon", &PRE_FALCON},
    {"mpt", &PRE_GPT2},
    {"starcoder", &PRE_STARCODER},
    {"gpt-2", &PRE_GPT2}, {"phi-2", &PRE_GPT2}, {"jina-es", &PRE_GPT2}, {"jina-de", &PRE_GPT2},
    {"gigachat", &PRE_GPT2}, {"jina-v2-es", &PRE_GPT2}, {"jina-v2-de", &PRE_GPT2}, {"a.x-4.0", &PRE_GPT2},
    {"mellum", &PRE_GPT2}, {"modern-bert", &PRE_GPT2},
    {"jais-2", &PRE_JAIS2},
    {"refact", &PRE_STARCODER},
    {"command-r", &PRE_STARCODER},
    {"qwen2", &PRE_QWEN2}, {"deepseek-r1-qwen", &PRE_QWEN2}, {"kormo", &PRE_QWEN2}, {"f2llmv2", &PRE_QWEN2},
    {"qwen35", &PRE_QWEN35},
    {"stablelm2", &PRE_QWEN2},
    {"olmo", &PRE_GPT2},
    {"dbrx", &PRE_DBRX},
    {"smaug-bpe", &PRE_DBRX},
    {"poro-chat", &PRE_PORO},
    {"glm4", &PRE_DBRX}, {"chatglm-bpe", &PRE_DBRX},
    {"viking", &PRE_VIKING},
    {"jais", &PRE_GPT2},
    {"tekken", &PRE_TEKKEN},
    {"smollm", &PRE_STARCODER},
    {"codeshell", &PRE_STARCODER},
    {"bloom", &PRE_PORO},
    {"gpt3-finnish", &PRE_PORO},
    {"exaone", &PRE_STARCODER},
    {"exaone4", &PRE_GPT2},
    {"exaone-moe", &PRE_EXAONE_MOE},
    {"chameleon", &PRE_CHAMELEON},
    {"minerva-7b", &PRE_STARCODER},
    {"megrez", &PRE_QWEN2},
    {"gpt-4o", &PRE_GPT4O}, {"llama4", &PRE_GPT4O}, {"kanana2", &PRE_GPT4O}, {"talkie", &PRE_GPT4O},
    {"granite-embed-multi-97m", &PRE_GRANITE_EMB_MULTI},
    {"trillion", &PRE_GPT2},
    {"granite-docling", &PRE_GPT2},
    {"bailingmoe", &PRE_BAILINGMOE}, {"bailingmoe2", &PRE_BAILINGMOE}, {"llada-moe", &PRE_BAILINGMOE},
    {"seed-coder", &PRE_SEED_CODER},
    {"hunyuan", &PRE_QWEN2},
    {"ufakzeka", &PRE_UFAKZEKA},
    {"grok-2", &PRE_QWEN2},
    {"laguna", &PRE_LAGUNA},
    {"minimax-m2", &PRE_GPT4O},
    {"solar-open", &PRE_QWEN2},
    {"mellum2", &PRE_STARCODER},
};

/* The pre-tokenizer tokenizer.ggml.pre names, with llama.cpp's settings
 * for it; a missing key is llama.cpp's default, noted (gc_tok_note). */
static int set_pre(gc_tok_t *t, const gc_gguf_t *g, gc_err_t *e) {
  gc_gguf_str_t pre = {"default", 7};
  int missing = !gc_gguf_find(g, "tokenizer.ggml.pre");
  if (!missing && gc_gguf_get_str(g, "tokenizer.ggml.pre", &pre, e)) return e->code;
  const pre_type_t *type = NULL;
  for (size_t i = 0; !type && i < GC_ARRAY_LEN(PRE_NAMES); i++)
    if (str_is(pre, PRE_NAMES[i].name)) type = PRE_NAMES[i].type;
  if (!type) {
    gc_buf_t known = {0};
    for (size_t i = 0; i < GC_ARRAY_LEN(PRE_NAMES); i++)
      if (gc_buf_printf(&known, e, "%s%s", i ? " " : "", PRE_NAMES[i].name)) {
        gc_buf_free(&known);
        return GC_ENOMEM;
      }
    char q[GC_QUOTE_BUF];
    int rc = gc_err_set(e, GC_EUNSUPPORTED, "%s: pre-tokenizer %s is not supported (gcore knows %s)", t->what,
                        gc_quote(pre.p, pre.n, q, sizeof q), known.data);
    gc_buf_free(&known);
    return rc;
  }
  if (type == &PRE_DEFAULT) {
    gc_buf_t b = {0};
    if (gc_buf_printf(&b, e, "%s: %s: llama.cpp's default pre-tokenizer, which llama.cpp warns degrades generation "
                      "quality", t->what, missing ? "no tokenizer.ggml.pre" : "tokenizer.ggml.pre is 'default'"))
      return GC_ENOMEM;
    t->note = b.data;
  }
  for (int i = 0; i < TOK_MAX_RE && type->re[i]; i++)
    if (tok_set_regex(t, type->re[i], e)) return e->code;
  t->ignore_merges = type->ignore_merges;
  t->add_bos = type->add_bos;
  return GC_OK;
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
