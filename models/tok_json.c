/* tok_json.c — a gc_tok_t from a Hugging Face tokenizer.json (model BPE;
 * SentencePiece-style normalizer or Metaspace, or a byte-level
 * pre-tokenizer with an optional Split regex), with BOS/EOS, add_bos_token
 * and the chat template from tokenizer_config.json and
 * generation_config.json beside it. What it does not implement is refused
 * by name rather than tokenized differently. */
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"

#define JSON_MAX_BYTES (512u << 20)
#define SPACE_MARK "\xe2\x96\x81"

static json_object *get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v)) return NULL;
  return v;
}

static const char *get_str(json_object *o, const char *key) {
  json_object *v = get(o, key);
  return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* A boolean field: 1, 0, or dflt when absent or not a boolean. */
static int get_bool(json_object *o, const char *key, int dflt) {
  json_object *v = get(o, key);
  return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

/* Parse the JSON file at path; *out NULL (and GC_OK) when it does not
 * exist and optional is set. */
static int read_json(const char *path, int optional, json_object **out, gc_err_t *e) {
  *out = NULL;
  char *text;
  size_t n;
  FILE *f = fopen(path, "rb");
  if (!f) return optional ? GC_OK : gc_err_set(e, GC_ENOTFOUND, "%s: cannot open", path);
  fclose(f);
  if (gc_read_file(path, JSON_MAX_BYTES, &text, &n, e)) return e->code;
  struct json_tokener *tk = json_tokener_new_ex(64);
  if (!tk) {
    free(text);
    return gc_err_set(e, GC_ENOMEM, "out of memory (JSON tokenizer)");
  }
  json_object *o = n > INT32_MAX || memchr(text, 0, n) ? NULL : json_tokener_parse_ex(tk, text, (int)n);
  enum json_tokener_error jerr = json_tokener_get_error(tk);
  json_tokener_free(tk);
  free(text);
  if (!o || jerr != json_tokener_success || !json_object_is_type(o, json_type_object)) {
    if (o) json_object_put(o);
    return gc_err_set(e, GC_ECORRUPT, "%s: not a JSON object: %s", path,
                      !o && jerr == json_tokener_success ? "NUL byte or too large"
                      : jerr == json_tokener_continue     ? "unexpected end (truncated?)"
                      : jerr != json_tokener_success      ? json_tokener_error_desc(jerr)
                                                          : "another JSON type");
  }
  *out = o;
  return GC_OK;
}

/* ---- normalizer and pre-tokenizer ------------------------------------------ */

static int normalizer_step(gc_tok_t *t, json_object *n, gc_err_t *e) {
  const char *type = get_str(n, "type");
  if (type && !strcmp(type, "Prepend") && get_str(n, "prepend") && !strcmp(get_str(n, "prepend"), SPACE_MARK)) {
    t->prepend = 1;
    return GC_OK;
  }
  if (type && !strcmp(type, "Replace")) {
    const char *from = get_str(get(n, "pattern"), "String"), *to = get_str(n, "content");
    if (from && to && !strcmp(from, " ") && !strcmp(to, SPACE_MARK)) {
      t->replace_space = 1;
      return GC_OK;
    }
  }
  char q[GC_QUOTE_BUF];
  return gc_err_set(e, GC_EUNSUPPORTED, "%s: normalizer %s is not supported (gcore implements "
                    "Prepend('▁') and Replace(' ', '▁'))", t->what,
                    type ? gc_quote(type, GC_QSTR, q, sizeof q) : "'?'");
}

static int read_normalizer(gc_tok_t *t, json_object *n, gc_err_t *e) {
  if (!n || json_object_is_type(n, json_type_null)) return GC_OK;
  const char *type = get_str(n, "type");
  json_object *list = get(n, "normalizers");
  if (!type || strcmp(type, "Sequence")) return normalizer_step(t, n, e);
  if (!list || !json_object_is_type(list, json_type_array))
    return gc_err_set(e, GC_ECORRUPT, "%s: normalizer Sequence without a list", t->what);
  for (size_t i = 0; i < json_object_array_length(list); i++)
    if (normalizer_step(t, json_object_array_get_idx(list, i), e)) return e->code;
  return GC_OK;
}

static int pre_step(gc_tok_t *t, json_object *p, int in_sequence, gc_err_t *e) {
  const char *type = get_str(p, "type");
  if (type && !strcmp(type, "ByteLevel")) {
    t->kind = TOK_BYTELEVEL;
    t->add_prefix_space = get_bool(p, "add_prefix_space", 0);
    if (get_bool(p, "use_regex", 1)) {
      if (t->re)
        return gc_err_set(e, GC_EUNSUPPORTED, "%s: a Split regex followed by ByteLevel's own regex "
                          "is not supported", t->what);
      return tok_set_regex(t, TOK_GPT2_REGEX, e);
    }
    return GC_OK;
  }
  if (type && !strcmp(type, "Split") && in_sequence) {
    const char *re = get_str(get(p, "pattern"), "Regex"), *beh = get_str(p, "behavior");
    if (t->kind == TOK_BYTELEVEL) /* Hugging Face splits ByteLevel's output there: bytes spelled as Ġ... */
      return gc_err_set(e, GC_EUNSUPPORTED, "%s: a Split after the ByteLevel pre-tokenizer is not supported",
                        t->what);
    if (!re || !beh || strcasecmp(beh, "Isolated") || get_bool(p, "invert", 0))
      return gc_err_set(e, GC_EUNSUPPORTED, "%s: Split pre-tokenizer: gcore supports a Regex pattern "
                        "with behavior Isolated, not inverted", t->what);
    return tok_set_regex(t, re, e);
  }
  if (type && !strcmp(type, "Metaspace")) {
    const char *rep = get_str(p, "replacement"), *scheme = get_str(p, "prepend_scheme");
    if (!rep || strcmp(rep, SPACE_MARK) || get_bool(p, "split", 0))
      return gc_err_set(e, GC_EUNSUPPORTED, "%s: Metaspace pre-tokenizer: gcore supports replacement '▁' "
                        "without split", t->what);
    t->replace_space = 1;
    t->prepend = scheme ? (!strcmp(scheme, "always") ? 1 : !strcmp(scheme, "first") ? 2 : 0)
                        : get_bool(p, "add_prefix_space", 1);
    return GC_OK;
  }
  char q[GC_QUOTE_BUF];
  return gc_err_set(e, GC_EUNSUPPORTED, "%s: pre-tokenizer %s is not supported (gcore implements "
                    "ByteLevel, Split with a regex, Metaspace)", t->what,
                    type ? gc_quote(type, GC_QSTR, q, sizeof q) : "'?'");
}

static int read_pre(gc_tok_t *t, json_object *p, gc_err_t *e) {
  if (!p || json_object_is_type(p, json_type_null)) return GC_OK;
  const char *type = get_str(p, "type");
  json_object *list = get(p, "pretokenizers");
  if (!type || strcmp(type, "Sequence")) return pre_step(t, p, 0, e);
  if (!list || !json_object_is_type(list, json_type_array))
    return gc_err_set(e, GC_ECORRUPT, "%s: pre_tokenizer Sequence without a list", t->what);
  for (size_t i = 0; i < json_object_array_length(list); i++)
    if (pre_step(t, json_object_array_get_idx(list, i), 1, e)) return e->code;
  if (t->re && t->kind != TOK_BYTELEVEL)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: a Split pre-tokenizer without ByteLevel is not supported",
                      t->what);
  return GC_OK;
}

/* ---- vocabulary, added tokens, merges ----------------------------------------- */

static int is_byte_token(const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  return n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && strchr(hex, s[3]) && strchr(hex, s[4]) && s[3] && s[4];
}

/* Vocabulary text s [n] in match form into b (byte-level: raw bytes). */
static int match_form(gc_tok_t *t, const char *s, size_t n, gc_buf_t *b, gc_err_t *e) {
  b->len = 0;
  if (t->kind != TOK_BYTELEVEL) return gc_buf_append(b, s, n, e);
  int rc = tok_bytelevel_decode(s, n, b, e);
  char q[GC_QUOTE_BUF];
  if (rc < 0)
    return gc_err_set(e, GC_ECORRUPT, "%s: vocabulary entry %s is not byte-level text", t->what,
                      gc_quote(s, n, q, sizeof q));
  return rc;
}

static int read_vocab(gc_tok_t *t, json_object *vocab, gc_err_t *e) {
  if (!vocab || !json_object_is_type(vocab, json_type_object))
    return gc_err_set(e, GC_ECORRUPT, "%s: model.vocab is missing or not an object", t->what);
  gc_buf_t b = {0};
  int rc = GC_OK;
  json_object_object_foreach(vocab, key, val) {
    if (!json_object_is_type(val, json_type_int)) {
      char q[GC_QUOTE_BUF];
      rc = gc_err_set(e, GC_ECORRUPT, "%s: model.vocab[%s] is not an integer id", t->what,
                      gc_quote(key, GC_QSTR, q, sizeof q));
      break;
    }
    int64_t id = json_object_get_int64(val);
    size_t n = strlen(key);
    int type = t->byte_fallback && is_byte_token(key, n) ? TOK_BYTE : TOK_NORMAL;
    char q[GC_QUOTE_BUF];
    if (id < 0 || id > INT32_MAX)
      rc = gc_err_set(e, GC_ECORRUPT, "%s: model.vocab[%s] = %lld is out of range", t->what,
                      gc_quote(key, n, q, sizeof q), (long long)id);
    if (!rc) rc = match_form(t, key, n, &b, e);
    if (!rc) rc = tok_set(t, (int32_t)id, b.data ? b.data : "", b.len, type, e);
    if (rc) break;
  }
  gc_buf_free(&b);
  return rc;
}

static int read_added(gc_tok_t *t, json_object *list, gc_err_t *e) {
  if (!list || json_object_is_type(list, json_type_null)) return GC_OK;
  if (!json_object_is_type(list, json_type_array))
    return gc_err_set(e, GC_ECORRUPT, "%s: added_tokens is not a list", t->what);
  for (size_t i = 0; i < json_object_array_length(list); i++) {
    json_object *a = json_object_array_get_idx(list, i), *idv = get(a, "id"), *cv = get(a, "content");
    if (!idv || !json_object_is_type(idv, json_type_int) || !cv || !json_object_is_type(cv, json_type_string))
      return gc_err_set(e, GC_ECORRUPT, "%s: added_tokens[%zu] needs an integer id and a string content",
                        t->what, i);
    int64_t id = json_object_get_int64(idv);
    if (id < 0 || id > INT32_MAX)
      return gc_err_set(e, GC_ECORRUPT, "%s: added_tokens[%zu] id %lld is out of range", t->what, i, (long long)id);
    int special = get_bool(a, "special", 0);
    if (get_bool(a, "single_word", 0) || (!special && get_bool(a, "normalized", 0) && (t->prepend || t->replace_space)))
      return gc_err_set(e, GC_EUNSUPPORTED, "%s: added_tokens[%zu]: single_word, or matching after the normalizer, "
                        "is not supported", t->what, i);
    int strip = (get_bool(a, "lstrip", 0) ? TOK_LSTRIP : 0) | (get_bool(a, "rstrip", 0) ? TOK_RSTRIP : 0);
    if (tok_set(t, (int32_t)id, json_object_get_string(cv), (size_t)json_object_get_string_len(cv),
                special ? TOK_CONTROL : TOK_USER, e) ||
        tok_mark_added(t, (int32_t)id, strip, e))
      return e->code;
    t->type[id] = special ? TOK_CONTROL : TOK_USER;
  }
  return GC_OK;
}

/* The two halves of merges[i]: "a b" or ["a", "b"]. */
static int merge_halves(gc_tok_t *t, json_object *m, size_t i, const char **a, size_t *na, const char **b,
                        size_t *nb, gc_err_t *e) {
  if (json_object_is_type(m, json_type_string)) {
    const char *s = json_object_get_string(m), *sp = strchr(s, ' ');
    if (sp && sp != s && sp[1]) {
      *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
      return GC_OK;
    }
  } else if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
    json_object *x = json_object_array_get_idx(m, 0), *y = json_object_array_get_idx(m, 1);
    if (json_object_is_type(x, json_type_string) && json_object_is_type(y, json_type_string)) {
      *a = json_object_get_string(x), *na = (size_t)json_object_get_string_len(x);
      *b = json_object_get_string(y), *nb = (size_t)json_object_get_string_len(y);
      return GC_OK;
    }
  }
  return gc_err_set(e, GC_ECORRUPT, "%s: model.merges[%zu] is not a pair of tokens", t->what, i);
}

static int32_t need_token(gc_tok_t *t, const char *s, size_t n, size_t i, gc_buf_t *b, gc_err_t *e) {
  if (match_form(t, s, n, b, e)) return -1;
  int32_t id = tok_lookup(t, b->data ? b->data : "", b->len);
  char q[GC_QUOTE_BUF];
  if (id < 0)
    gc_err_set(e, GC_ECORRUPT, "%s: model.merges[%zu] names %s, which is not in the vocabulary", t->what, i,
               gc_quote(s, n, q, sizeof q));
  return id;
}

static int read_merges(gc_tok_t *t, json_object *merges, gc_err_t *e) {
  if (!merges || !json_object_is_type(merges, json_type_array))
    return gc_err_set(e, GC_ECORRUPT, "%s: model.merges is missing or not a list", t->what);
  gc_buf_t b = {0}, ab = {0};
  int rc = GC_OK;
  for (size_t i = 0; !rc && i < json_object_array_length(merges); i++) {
    const char *a = NULL, *c = NULL;
    size_t na = 0, nc = 0;
    if ((rc = merge_halves(t, json_object_array_get_idx(merges, i), i, &a, &na, &c, &nc, e))) break;
    int32_t l = need_token(t, a, na, i, &b, e), r = l < 0 ? -1 : need_token(t, c, nc, i, &b, e);
    ab.len = 0;
    if (l < 0 || r < 0 || gc_buf_append(&ab, a, na, e) || gc_buf_append(&ab, c, nc, e)) {
      rc = e->code ? e->code : GC_ENOMEM;
      break;
    }
    int32_t m = need_token(t, ab.data, ab.len, i, &b, e);
    rc = m < 0 ? e->code : tok_add_merge(t, l, r, (int32_t)i, m, e);
  }
  gc_buf_free(&b);
  gc_buf_free(&ab);
  return rc;
}

static int read_model(gc_tok_t *t, json_object *model, gc_err_t *e) {
  const char *type = get_str(model, "type");
  char q[GC_QUOTE_BUF];
  if (!model || !json_object_is_type(model, json_type_object))
    return gc_err_set(e, GC_ECORRUPT, "%s: no model object", t->what);
  if (type ? strcmp(type, "BPE") != 0 : !get(model, "merges"))
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: model type %s is not supported (gcore implements BPE)",
                      t->what, type ? gc_quote(type, GC_QSTR, q, sizeof q) : "'?'");
  if (get_str(model, "continuing_subword_prefix") || get_str(model, "end_of_word_suffix"))
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: BPE with subword prefixes or suffixes is not supported", t->what);
  t->byte_fallback = get_bool(model, "byte_fallback", 0);
  t->fuse_unk = get_bool(model, "fuse_unk", 0);
  t->ignore_merges = get_bool(model, "ignore_merges", 0);
  return read_vocab(t, get(model, "vocab"), e);
}

/* ---- special ids from the configs ------------------------------------------------- */

/* A token named by a config field: "text" or {"content": "text"}. */
static int32_t config_token(gc_tok_t *t, json_object *cfg, const char *key) {
  json_object *v = get(cfg, key);
  const char *s = v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : get_str(v, "content");
  return s ? gc_tok_find(t, s, strlen(s)) : -1;
}

static void add_eos(gc_tok_t *t, int64_t id) {
  if (id < 0 || id >= t->n_vocab || gc_tok_is_eos(t, (int32_t)id) || t->n_eos >= 16) return;
  t->eos[t->n_eos++] = (int32_t)id;
}

static int read_specials(gc_tok_t *t, json_object *root, json_object *cfg, json_object *gen, gc_err_t *e) {
  static const char *const bos_names[] = {"<|begin_of_text|>", "<s>"};
  static const char *const eos_names[] = {"<|end_of_text|>", "<|eot_id|>", "</s>"};
  t->bos = config_token(t, cfg, "bos_token");
  add_eos(t, config_token(t, cfg, "eos_token"));
  json_object *v = get(gen, "bos_token_id");
  if (v && json_object_is_type(v, json_type_int)) t->bos = (int32_t)json_object_get_int64(v);
  v = get(gen, "eos_token_id");
  if (v && json_object_is_type(v, json_type_int)) add_eos(t, json_object_get_int64(v));
  for (size_t i = 0; v && json_object_is_type(v, json_type_array) && i < json_object_array_length(v); i++)
    add_eos(t, json_object_get_int64(json_object_array_get_idx(v, i)));
  for (size_t i = 0; t->bos < 0 && !cfg && i < GC_ARRAY_LEN(bos_names); i++)
    t->bos = gc_tok_find(t, bos_names[i], strlen(bos_names[i]));
  for (size_t i = 0; !t->n_eos && i < GC_ARRAY_LEN(eos_names); i++)
    add_eos(t, gc_tok_find(t, eos_names[i], strlen(eos_names[i])));
  const char *unk = get_str(get(root, "model"), "unk_token");
  if (unk && (t->unk_id = gc_tok_find(t, unk, strlen(unk))) >= 0 && !t->added[t->unk_id]) t->type[t->unk_id] = TOK_UNKNOWN;
  /* add_bos_token, else what the post-processor template does */
  json_object *pp = get(root, "post_processor"), *single = get(pp, "single");
  t->add_bos = get_bool(cfg, "add_bos_token", -1);
  t->add_eos = get_bool(cfg, "add_eos_token", 0) > 0;
  if (t->add_bos < 0 && pp && json_object_is_type(pp, json_type_object)) {
    json_object *first = single && json_object_is_type(single, json_type_array) && json_object_array_length(single)
                             ? json_object_array_get_idx(single, 0) : NULL;
    t->add_bos = get(first, "SpecialToken") != NULL;
  }
  const char *tpl = get_str(cfg, "chat_template");
  json_object *tl = get(cfg, "chat_template");
  for (size_t i = 0; !tpl && tl && json_object_is_type(tl, json_type_array) && i < json_object_array_length(tl); i++) {
    json_object *x = json_object_array_get_idx(tl, i);
    if (get_str(x, "name") && !strcmp(get_str(x, "name"), "default")) tpl = get_str(x, "template");
  }
  if (tpl && !(t->chat_template = gc_strdup(tpl, e))) return GC_ENOMEM;
  return GC_OK;
}

/* ---- the loader -------------------------------------------------------------------- */

static int build(gc_tok_t *t, json_object *root, json_object *cfg, json_object *gen, gc_err_t *e) {
  json_object *model = get(root, "model");
  if (read_pre(t, get(root, "pre_tokenizer"), e) || read_normalizer(t, get(root, "normalizer"), e)) return e->code;
  if (t->kind == TOK_BYTELEVEL && (t->prepend || t->replace_space))
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: a ▁ normalizer with a byte-level pre-tokenizer is not supported",
                      t->what);
  if (t->kind == TOK_BYTELEVEL && !t->re && !t->add_prefix_space && get_bool(get(root, "pre_tokenizer"), "use_regex", 1))
    return gc_err_set(e, GC_ECORRUPT, "%s: byte-level pre-tokenizer without a regex", t->what);
  if (read_model(t, model, e) || read_added(t, get(root, "added_tokens"), e) || tok_index(t, e) ||
      read_merges(t, get(model, "merges"), e) || read_specials(t, root, cfg, gen, e))
    return e->code;
  return tok_finish(t, e);
}

int tok_load_json(const char *json_path, const char *dir, gc_tok_t **out, gc_err_t *e) {
  *out = NULL;
  json_object *root = NULL, *cfg = NULL, *gen = NULL;
  char p1[4096], p2[4096];
  snprintf(p1, sizeof p1, "%s/tokenizer_config.json", dir);
  snprintf(p2, sizeof p2, "%s/generation_config.json", dir);
  gc_tok_t *t = tok_new(json_path, e);
  int rc = t ? GC_OK : GC_ENOMEM;
  if (!rc) rc = read_json(json_path, 0, &root, e);
  if (!rc) rc = read_json(p1, 1, &cfg, e);
  if (!rc) rc = read_json(p2, 1, &gen, e);
  if (!rc) rc = build(t, root, cfg, gen, e);
  if (root) json_object_put(root);
  if (cfg) json_object_put(cfg);
  if (gen) json_object_put(gen);
  if (rc) {
    gc_tok_free(t);
    return rc;
  }
  *out = t;
  return GC_OK;
}
