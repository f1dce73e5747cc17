/* chat.c — Llama 2, Llama 3, Mistral, ChatML and Zephyr chat turns as
 * token ids (see chat.h); the text of each turn is trimmed where the
 * model's Jinja template trims it (Llama 2, Llama 3), kept as given where
 * it does not. */
#include "chat.h"

#include <stdio.h>
#include <string.h>

#include "tok_impl.h"

/* Whether the template puts BOS before every [INST] (Llama 2's), not once. */
static int bos_every_turn(const char *tpl) {
  static const char *const joins[] = {" + ", "+", " ~ ", "~"}, *const quotes[] = {"'", "\""};
  char want[32];
  for (size_t j = 0; j < sizeof joins / sizeof *joins; j++)
    for (size_t q = 0; q < 2; q++) {
      snprintf(want, sizeof want, "bos_token%s%s[INST]", joins[j], quotes[q]);
      if (strstr(tpl, want)) return 1;
    }
  return 0;
}

/* The id of control token name in t's vocabulary, or -1. */
static int32_t control(const gc_tok_t *t, const char *name) {
  int32_t id = gc_tok_find(t, name, strlen(name));
  return id >= 0 && gc_tok_is_special(t, id) ? id : -1;
}

int gc_chat_detect(const gc_tok_t *t, gc_chat_kind_t *out, gc_err_t *e) {
  const char *tpl = gc_tok_chat_template(t);
  if (tpl && strstr(tpl, "<|start_header_id|>")) *out = GC_CHAT_LLAMA3;
  else if (tpl && strstr(tpl, "[INST]")) *out = bos_every_turn(tpl) ? GC_CHAT_LLAMA2 : GC_CHAT_MISTRAL;
  else if (tpl && strstr(tpl, "<|im_start|>")) *out = GC_CHAT_CHATML;
  else if (tpl && strstr(tpl, "<|user|>")) *out = GC_CHAT_ZEPHYR;
  else if (tpl)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: chat_template is none of Llama 2 or Mistral ([INST]), Llama 3 "
                      "(<|start_header_id|>), ChatML (<|im_start|>) or Zephyr (<|user|>)", t->what);
  else if (gc_tok_find(t, "<|start_header_id|>", 19) >= 0) *out = GC_CHAT_LLAMA3;
  else if (control(t, "[INST]") >= 0) *out = GC_CHAT_MISTRAL;
  else if (control(t, "<|im_start|>") >= 0) *out = GC_CHAT_CHATML;
  else if (t->kind == TOK_SPM && t->bos >= 0 && t->n_eos) *out = GC_CHAT_LLAMA2;
  else
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: no chat template and no Llama, Mistral or ChatML chat tokens in the "
                      "vocabulary", t->what);
  return GC_OK;
}

static int need(const gc_tok_t *t, const char *name, int32_t *id, gc_err_t *e) {
  *id = gc_tok_find(t, name, strlen(name));
  if (*id < 0) return gc_err_set(e, GC_ENOTFOUND, "%s: the chat template needs %s, which is not in the vocabulary",
                                 t->what, name);
  return GC_OK;
}

/* Text s as [*p, *p + *n): without leading and trailing whitespace where
 * template k trims it (Llama 2's and Llama 3's). */
static void trim(gc_chat_kind_t k, const char *s, const char **p, size_t *n) {
  int cut = k == GC_CHAT_LLAMA2 || k == GC_CHAT_LLAMA3;
  size_t a = 0, b = strlen(s);
  while (cut && a < b && strchr(" \t\r\n\v\f", s[a])) a++;
  while (cut && b > a && strchr(" \t\r\n\v\f", s[b - 1])) b--;
  *p = s + a;
  *n = b - a;
}

/* One message of the templates that give every message a header, text
 * NULL for the header alone (the reply the model is to write):
 *   LLAMA3  <|start_header_id|>role<|end_header_id|> "\n\n" text <|eot_id|>
 *   CHATML  ("\n" unless first) <|im_start|> "role\n" text <|im_end|>
 *   ZEPHYR  ("\n" unless first) "<|role|>\n" text </s>
 * first: nothing of the conversation before it but BOS. */
static int header_msg(gc_tok_t *t, gc_chat_kind_t k, int first, const char *role, const char *text,
                      gc_tok_ids_t *out, gc_err_t *e) {
  int32_t open, close, end = gc_chat_end_token(t, k);
  gc_buf_t b = {0};
  const char *p = "";
  size_t n = 0;
  int rc = GC_OK;
  if (text) trim(k, text, &p, &n);
  if (k == GC_CHAT_LLAMA3) {
    if (need(t, "<|start_header_id|>", &open, e) || need(t, "<|end_header_id|>", &close, e) ||
        need(t, "<|eot_id|>", &end, e))
      return e->code;
    rc = gc_tok_ids_push(out, open, e) || gc_tok_encode(t, role, strlen(role), 0, out, e) ||
         gc_tok_ids_push(out, close, e) || gc_buf_printf(&b, e, "\n\n%.*s", (int)n, p);
  } else if (k == GC_CHAT_CHATML) {
    if (need(t, "<|im_start|>", &open, e) || need(t, "<|im_end|>", &end, e)) return e->code;
    rc = (!first && gc_tok_encode(t, "\n", 1, 0, out, e)) || gc_tok_ids_push(out, open, e) ||
         gc_buf_printf(&b, e, "%s\n%.*s", role, (int)n, p);
  } else {
    if (end < 0 && text) return gc_err_set(e, GC_ENOTFOUND, "%s: the chat template needs an end-of-sequence token, "
                                           "which the vocabulary lacks", t->what);
    rc = gc_buf_printf(&b, e, "%s<|%s|>\n%.*s", first ? "" : "\n", role, (int)n, p);
  }
  if (!rc) rc = gc_tok_encode(t, b.data, b.len, 0, out, e) || (text && gc_tok_ids_push(out, end, e));
  gc_buf_free(&b);
  return rc ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

/* An [INST] turn: [INST] content [/INST], the markers by id where they
 * are control tokens (Mistral v3: "[INST]" id, the content, "[/INST]" id),
 * else as text; Llama 2 (bos) with BOS. The content is the user's text,
 * in Llama 2's first turn after the system prompt in <<SYS>>, trimmed as
 * a whole there (content.strip()), as given in Mistral's. */
static int inst_turn(gc_tok_t *t, gc_chat_kind_t k, int bos, int first, const char *system, const char *user,
                     gc_tok_ids_t *out, gc_err_t *e) {
  int32_t open = control(t, "[INST]"), close = control(t, "[/INST]");
  gc_buf_t c = {0}, b = {0};
  const char *p;
  size_t n;
  int rc = GC_OK;
  if (bos && t->bos >= 0) rc = gc_tok_ids_push(out, t->bos, e);
  if (!rc && first && system) rc = gc_buf_printf(&c, e, "<<SYS>>\n%s\n<</SYS>>\n\n", system);
  if (!rc) rc = gc_buf_printf(&c, e, "%s", user);
  if (!rc) trim(k, c.data, &p, &n);
  if (!rc && open >= 0) rc = gc_tok_ids_push(out, open, e);
  if (!rc) rc = gc_buf_printf(&b, e, "%s%.*s%s", open >= 0 ? "" : "[INST] ", (int)n, p, close >= 0 ? "" : " [/INST]");
  if (!rc && b.len) rc = gc_tok_encode(t, b.data, b.len, 0, out, e);
  if (!rc && close >= 0) rc = gc_tok_ids_push(out, close, e);
  gc_buf_free(&c);
  gc_buf_free(&b);
  return rc;
}

static int is_inst(gc_chat_kind_t k) { return k == GC_CHAT_LLAMA2 || k == GC_CHAT_MISTRAL; }

int gc_chat_turn(gc_tok_t *t, gc_chat_kind_t k, int first, int reply, const char *system, const char *user,
                 gc_tok_ids_t *out, gc_err_t *e) {
  if (is_inst(k) && !reply)
    return gc_err_set(e, GC_EINVAL, "the %s chat template takes user and assistant messages in turn (two user "
                      "messages in a row)", k == GC_CHAT_MISTRAL ? "Mistral" : "Llama 2");
  if (k == GC_CHAT_MISTRAL && first && system)
    return gc_err_set(e, GC_EINVAL, "the Mistral chat template has no system role");
  if (is_inst(k)) return inst_turn(t, k, k == GC_CHAT_LLAMA2 || first, first, system, user, out, e);
  int bos = t->bos >= 0 && (k == GC_CHAT_LLAMA3 || gc_tok_add_bos(t)); /* Llama 3's template writes it */
  if (first && bos && gc_tok_ids_push(out, t->bos, e)) return GC_ENOMEM;
  if (first && system && header_msg(t, k, 1, "system", system, out, e)) return e->code;
  return header_msg(t, k, first && !system, "user", user, out, e);
}

int gc_chat_reply(gc_tok_t *t, gc_chat_kind_t k, int after_reply, const char *text, gc_tok_ids_t *out,
                  gc_err_t *e) {
  if (!is_inst(k)) return header_msg(t, k, 0, "assistant", text, out, e);
  if (after_reply)
    return gc_err_set(e, GC_EINVAL, "the %s chat template takes user and assistant messages in turn (two "
                      "assistant messages in a row)", k == GC_CHAT_MISTRAL ? "Mistral" : "Llama 2");
  if (!text) return GC_OK;
  int32_t end = gc_chat_end_token(t, k);
  const char *p;
  size_t n;
  trim(k, text, &p, &n);
  if (end < 0) return gc_err_set(e, GC_ENOTFOUND, "%s: the chat template needs an end-of-sequence token, which "
                                 "the vocabulary lacks", t->what);
  if (gc_tok_encode(t, p, n, 0, out, e) || gc_tok_ids_push(out, end, e)) return e->code ? e->code : GC_ENOMEM;
  return GC_OK;
}

int32_t gc_chat_end_token(const gc_tok_t *t, gc_chat_kind_t k) {
  if (k == GC_CHAT_LLAMA3) return gc_tok_find(t, "<|eot_id|>", 10);
  if (k == GC_CHAT_CHATML) return gc_tok_find(t, "<|im_end|>", 10);
  return t->n_eos ? t->eos[0] : -1;
}
