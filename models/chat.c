/* chat.c — Llama 2, Llama 3 and Mistral chat turns as token ids (see chat.h); the
 * text of each turn is trimmed where the model's Jinja template trims it
 * (Llama 2, Llama 3), kept as given where it does not (Mistral). */
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
  else if (tpl)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: chat_template is neither Llama 2 or Mistral ([INST]) nor Llama 3 "
                      "(<|start_header_id|>)", t->what);
  else if (gc_tok_find(t, "<|start_header_id|>", 19) >= 0) *out = GC_CHAT_LLAMA3;
  else if (control(t, "[INST]") >= 0) *out = GC_CHAT_MISTRAL;
  else if (t->kind == TOK_SPM && t->bos >= 0 && t->n_eos) *out = GC_CHAT_LLAMA2;
  else
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: no chat template and no Llama chat tokens in the vocabulary",
                      t->what);
  return GC_OK;
}

static int need(const gc_tok_t *t, const char *name, int32_t *id, gc_err_t *e) {
  *id = gc_tok_find(t, name, strlen(name));
  if (*id < 0) return gc_err_set(e, GC_ENOTFOUND, "%s: the chat template needs %s, which is not in the vocabulary",
                                 t->what, name);
  return GC_OK;
}

/* Text s as [*p, *p + *n): without leading and trailing whitespace where
 * template k trims it (all but Mistral's). */
static void trim(gc_chat_kind_t k, const char *s, const char **p, size_t *n) {
  size_t a = 0, b = strlen(s);
  while (k != GC_CHAT_MISTRAL && a < b && strchr(" \t\r\n\v\f", s[a])) a++;
  while (k != GC_CHAT_MISTRAL && b > a && strchr(" \t\r\n\v\f", s[b - 1])) b--;
  *p = s + a;
  *n = b - a;
}

/* <|start_header_id|>role<|end_header_id|>, then "\n\n" + text (trimmed)
 * + <|eot_id|> when text is given. */
static int llama3_msg(gc_tok_t *t, const char *role, const char *text, gc_tok_ids_t *out, gc_err_t *e) {
  int32_t sh, eh, eot;
  if (need(t, "<|start_header_id|>", &sh, e) || need(t, "<|end_header_id|>", &eh, e) || need(t, "<|eot_id|>", &eot, e))
    return e->code;
  gc_buf_t b = {0};
  const char *p = "";
  size_t n = 0;
  if (text) trim(GC_CHAT_LLAMA3, text, &p, &n);
  int rc = gc_tok_ids_push(out, sh, e) || gc_tok_encode(t, role, strlen(role), 0, out, e) ||
           gc_tok_ids_push(out, eh, e) || gc_buf_append(&b, "\n\n", 2, e) || gc_buf_append(&b, p, n, e) ||
           gc_tok_encode(t, b.data, b.len, 0, out, e) || (text && gc_tok_ids_push(out, eot, e));
  gc_buf_free(&b);
  return rc ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

/* An [INST] turn: [INST] user [/INST], the markers by id where they are
 * control tokens (Mistral v3: "[INST]" id, the text, "[/INST]" id), else as
 * text; Llama 2 (bos) with BOS and, first, the system prompt in <<SYS>>. */
static int inst_turn(gc_tok_t *t, gc_chat_kind_t k, int bos, int first, const char *system, const char *user,
                     gc_tok_ids_t *out, gc_err_t *e) {
  int32_t open = control(t, "[INST]"), close = control(t, "[/INST]");
  gc_buf_t b = {0};
  const char *p;
  size_t n;
  int rc = GC_OK;
  if (bos && t->bos >= 0) rc = gc_tok_ids_push(out, t->bos, e);
  if (!rc) rc = open >= 0 ? gc_tok_ids_push(out, open, e) : gc_buf_printf(&b, e, "[INST] ");
  if (!rc && first && system) {
    trim(k, system, &p, &n);
    rc = gc_buf_printf(&b, e, "<<SYS>>\n%.*s\n<</SYS>>\n\n", (int)n, p);
  }
  trim(k, user, &p, &n);
  if (!rc) rc = gc_buf_printf(&b, e, close >= 0 ? "%.*s" : "%.*s [/INST]", (int)n, p);
  if (!rc && b.len) rc = gc_tok_encode(t, b.data, b.len, 0, out, e);
  if (!rc && close >= 0) rc = gc_tok_ids_push(out, close, e);
  gc_buf_free(&b);
  return rc;
}

int gc_chat_turn(gc_tok_t *t, gc_chat_kind_t k, int first, int reply, const char *system, const char *user,
                 gc_tok_ids_t *out, gc_err_t *e) {
  if (k != GC_CHAT_LLAMA3 && !reply)
    return gc_err_set(e, GC_EINVAL, "the %s chat template takes user and assistant messages in turn (two user "
                      "messages in a row)", k == GC_CHAT_MISTRAL ? "Mistral" : "Llama 2");
  if (k == GC_CHAT_MISTRAL && first && system)
    return gc_err_set(e, GC_EINVAL, "the Mistral chat template has no system role");
  if (k != GC_CHAT_LLAMA3) return inst_turn(t, k, k == GC_CHAT_LLAMA2 || first, first, system, user, out, e);
  if (first && t->bos >= 0 && gc_tok_ids_push(out, t->bos, e)) return GC_ENOMEM;
  if (first && system && llama3_msg(t, "system", system, out, e)) return e->code;
  if (llama3_msg(t, "user", user, out, e)) return e->code;
  return reply ? llama3_msg(t, "assistant", NULL, out, e) : GC_OK;
}

int32_t gc_chat_end_token(const gc_tok_t *t, gc_chat_kind_t k) {
  if (k == GC_CHAT_LLAMA3) return gc_tok_find(t, "<|eot_id|>", 10);
  return t->n_eos ? t->eos[0] : -1;
}

int gc_chat_reply(gc_tok_t *t, gc_chat_kind_t k, int after_reply, const char *text, int32_t end, gc_tok_ids_t *out,
                  gc_err_t *e) {
  if (k != GC_CHAT_LLAMA3 && after_reply)
    return gc_err_set(e, GC_EINVAL, "the %s chat template takes user and assistant messages in turn (two "
                      "assistant messages in a row)", k == GC_CHAT_MISTRAL ? "Mistral" : "Llama 2");
  if (k == GC_CHAT_LLAMA3 && after_reply && llama3_msg(t, "assistant", NULL, out, e)) return e->code;
  const char *p;
  size_t n;
  trim(k, text, &p, &n);
  if (gc_tok_encode(t, p, n, 0, out, e) || gc_tok_ids_push(out, end, e)) return e->code ? e->code : GC_ENOMEM;
  return GC_OK;
}
