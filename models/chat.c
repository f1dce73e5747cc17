/* chat.c — Llama 2, Llama 3, Mistral (v0.1, v0.3, Tekken), ChatML, Zephyr
 * and DeepSeek chat turns as token ids (see chat.h); the text of each turn
 * is trimmed where the model's Jinja template trims it (Llama 2, Llama 3;
 * Mistral v0.3's replies), kept as given where it does not. */
#include "chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyjson.h"
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

/* Which of Mistral's [INST] templates tpl is: v3's and Tekken's put the
 * system message before the last user message (loop.last and
 * system_message), Tekken's with no space after "[INST]"; the later ones
 * with a [SYSTEM_PROMPT] block are v0.1's turns with that block for the
 * system message (gc_chat_t.sys_block). */
static gc_chat_kind_t mistral_kind(const char *tpl) {
  if (!strstr(tpl, "loop.last and system_message is defined") || strstr(tpl, "[SYSTEM_PROMPT]"))
    return GC_CHAT_MISTRAL;
  return strstr(tpl, "\"[INST]\" +") || strstr(tpl, "'[INST]' +") ? GC_CHAT_MISTRAL_TEKKEN : GC_CHAT_MISTRAL_V3;
}

/* DeepSeek's role markers and end of a reply (fullwidth bars, U+2581) */
#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_END "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

static int is_deepseek(gc_chat_kind_t k) { return k == GC_CHAT_DEEPSEEK || k == GC_CHAT_DEEPSEEK_THINK; }

int gc_chat_detect(const gc_tok_t *t, gc_chat_kind_t *out, gc_err_t *e) {
  const char *tpl = gc_tok_chat_template(t);
  if (tpl && strstr(tpl, "<|start_header_id|>")) *out = GC_CHAT_LLAMA3;
  else if (tpl && strstr(tpl, DS_USER) && strstr(tpl, DS_ASSISTANT))
    *out = strstr(tpl, "'" DS_ASSISTANT "<think>\\n'") ? GC_CHAT_DEEPSEEK_THINK : GC_CHAT_DEEPSEEK;
  else if (tpl && strstr(tpl, "[INST]")) *out = bos_every_turn(tpl) ? GC_CHAT_LLAMA2 : mistral_kind(tpl);
  else if (tpl && strstr(tpl, "<|im_start|>")) *out = GC_CHAT_CHATML;
  else if (tpl && strstr(tpl, "<|user|>")) *out = GC_CHAT_ZEPHYR;
  else if (tpl)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: chat_template is none of Llama 2 or Mistral ([INST]), Llama 3 "
                      "(<|start_header_id|>), ChatML (<|im_start|>), Zephyr (<|user|>) or DeepSeek (" DS_USER ")",
                      t->what);
  else if (gc_tok_find(t, "<|start_header_id|>", 19) >= 0) *out = GC_CHAT_LLAMA3;
  else if (gc_tok_find(t, DS_USER, strlen(DS_USER)) >= 0 && gc_tok_find(t, DS_ASSISTANT, strlen(DS_ASSISTANT)) >= 0)
    *out = GC_CHAT_DEEPSEEK;
  else if (control(t, "[INST]") >= 0) *out = GC_CHAT_MISTRAL;
  else if (control(t, "<|im_start|>") >= 0) *out = GC_CHAT_CHATML;
  else if (t->kind == TOK_SPM && t->bos >= 0 && t->n_eos) *out = GC_CHAT_LLAMA2;
  else
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: no chat template and no Llama, Mistral, ChatML or DeepSeek chat "
                      "tokens in the vocabulary", t->what);
  return GC_OK;
}

static int need(const gc_tok_t *t, const char *name, int32_t *id, gc_err_t *e) {
  *id = gc_tok_find(t, name, strlen(name));
  if (*id < 0) return gc_err_set(e, GC_ENOTFOUND, "%s: the chat template needs %s, which is not in the vocabulary",
                                 t->what, name);
  return GC_OK;
}

/* Whether code point c is whitespace to Python's str.strip(), which
 * Jinja's trim and the templates' .strip() use. */
static int py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The code point of the well-formed UTF-8 sequence of len bytes at s
 * (1..3 bytes suffice for every py_space), or 0 (not whitespace). */
static uint32_t cp_of(const unsigned char *s, size_t len) {
  if (len == 1) return s[0] < 0x80 ? s[0] : 0;
  if (len == 2 && (s[0] & 0xe0) == 0xc0 && (s[1] & 0xc0) == 0x80) return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
  if (len == 3 && (s[0] & 0xf0) == 0xe0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80)
    return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
  return 0;
}

/* Whether template k trims a message's text (Llama 2's and Llama 3's). */
static int trims(gc_chat_kind_t k) { return k == GC_CHAT_LLAMA2 || k == GC_CHAT_LLAMA3; }

/* Text s as [*p, *p + *n): without leading and trailing whitespace (as
 * Python's str.strip() sees it) where cut (the template trims it). */
static void trim(int cut, const char *s, const char **p, size_t *n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t a = 0, b = strlen(s), len;
  for (int more = cut; more;) { /* from the front: a whitespace character of 1 to 3 bytes */
    more = 0;
    for (len = 1; len <= 3 && a + len <= b && !more; len++)
      if (py_space(cp_of(u + a, len))) a += len, more = 1;
  }
  for (int more = cut; more;) { /* from the back */
    more = 0;
    for (len = 1; len <= 3 && b >= a + len && !more; len++)
      if (py_space(cp_of(u + b - len, len))) b -= len, more = 1;
  }
  *p = s + a;
  *n = b - a;
}

/* Whether tpl writes marker m next to a quote on side q: m + "'" or m +
 * '"' (q > 0: a string that ends with "[INST]", no space after it), or
 * the quote before it (q < 0: a string that starts with " [/INST]"). */
static int quoted(const char *tpl, const char *m, int q) {
  char a[32], b[32];
  snprintf(a, sizeof a, q > 0 ? "%s'" : "'%s", m);
  snprintf(b, sizeof b, q > 0 ? "%s\"" : "\"%s", m);
  return strstr(tpl, a) || strstr(tpl, b);
}

/* The Jinja string literal [a, z) unescaped (\n, \t, \r; \\, \' and \" the
 * character), NUL-terminated; NULL without memory. */
static char *unescape(const char *a, const char *z) {
  char *out = malloc((size_t)(z - a) + 1), *o = out;
  if (!out) return NULL;
  for (const char *s = a; s < z; s++) {
    if (*s != '\\' || s + 1 >= z) {
      *o++ = *s;
      continue;
    }
    s++;
    *o++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s == 'r' ? '\r' : *s;
  }
  *o = 0;
  return out;
}

/* The end of the Jinja string literal whose text starts at a and whose
 * quote is q (past escaped characters): the closing quote, or the NUL. */
static const char *literal_end(const char *a, char q) {
  while (*a && *a != q) a += *a == '\\' && a[1] ? 2 : 1;
  return a;
}

/* The system message a ChatML template writes when the conversation has
 * none: the text of the first string literal of tpl that reads
 * '<|im_start|>system\nTEXT<|im_end|>...' with TEXT not empty (Qwen2.5's
 * '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. ...'; the
 * literal that joins messages[0]['content'] ends after "system\n"),
 * unescaped as Jinja reads string literals; NULL where there is none (or
 * no memory). */
static char *chatml_default_system(const char *tpl) {
  static const char open[] = "<|im_start|>system\\n", end[] = "<|im_end|>";
  for (const char *p = tpl; (p = strstr(p, open)); p++) {
    char q = p > tpl ? p[-1] : 0;
    if (q != '\'' && q != '"') continue;
    const char *a = p + strlen(open), *z = a;
    while (*z && *z != q && strncmp(z, end, strlen(end))) z += *z == '\\' && z[1] ? 2 : 1;
    if (z == a || strncmp(z, end, strlen(end))) continue; /* empty, or the literal ends first */
    return unescape(a, z);
  }
  return NULL;
}

/* The text of the string literal of tpl that follows marker m (its quote
 * the character before m, or the first after m), unescaped; NULL where m
 * is absent or no memory. from_quote: m ends just before the literal's
 * opening quote (strftime_now("), rather than inside the literal. */
static char *literal_after(const char *tpl, const char *m, int from_quote) {
  const char *p = strstr(tpl, m);
  if (!p) return NULL;
  char q = from_quote ? p[strlen(m)] : p > tpl ? p[-1] : 0;
  if (q != '\'' && q != '"') return NULL;
  const char *a = p + strlen(m) + (from_quote ? 1 : 0), *z = literal_end(a, q);
  return *z ? unescape(a, z) : NULL;
}

/* Llama 3.1's and 3.2's system header, which their templates write before
 * any system message (and where there is none): "Cutting Knowledge Date: "
 * + the template's month + "\nToday Date: " + date_string + "\n\n", where
 * date_string is strftime_now(FORMAT) of the local time where the template
 * calls it (3.2's; Hugging Face's and llama.cpp's renderers define it),
 * else the template's literal (3.1's "26 Jul 2024"); given (not NULL):
 * the caller's date_string. NULL for a template without that header
 * (Llama 3's), or no memory. */
static char *llama3_sys_head(const char *tpl, const char *given) {
  static const char know[] = "Cutting Knowledge Date: ";
  if (!strstr(tpl, "\"Today Date: \" + date_string")) return NULL;
  char *k = literal_after(tpl, know, 0), *fmt = literal_after(tpl, "strftime_now(", 1), *date = NULL, *out = NULL;
  if (given) {
    date = strdup(given);
  } else if (fmt) {
    char buf[128];
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm) && strftime(buf, sizeof buf, fmt, &tm)) date = strdup(buf);
  } else {
    date = literal_after(tpl, "set date_string = ", 1);
  }
  size_t kn = k ? strcspn(k, "\n") : 0; /* the literal reads "...: December 2023\n" */
  gc_buf_t b = {0};
  gc_err_t e = {0};
  if (k && date && !gc_buf_printf(&b, &e, "%s%.*s\nToday Date: %s\n\n", know, (int)kn, k, date)) out = (char *)b.data;
  else gc_buf_free(&b);
  free(k);
  free(fmt);
  free(date);
  return out;
}

/* The text of the string literal of tpl that holds marker m (its quote:
 * the first unescaped ' or " before m), unescaped; NULL where m is absent,
 * the literal unclosed, or no memory. */
static char *literal_with(const char *tpl, const char *m) {
  const char *p = strstr(tpl, m), *a = p;
  if (!p) return NULL;
  while (a > tpl && !((a[-1] == '"' || a[-1] == '\'') && (a - 1 == tpl || a[-2] != '\\'))) a--;
  if (a == tpl) return NULL;
  const char *z = literal_end(a, a[-1]);
  return *z ? unescape(a, z) : NULL;
}

#define HERMES_CALL "<tool_call>\\n{\"name\": \"" /* as the template's literal spells it */

/* Llama 3.1's text before the tools in the first user message: its four
 * literals, in order. */
static const char *const LLAMA3_TOOLS_TEXT[] = {"Given the following functions", "with its proper arguments",
                                                "Respond in the format {", "Do not use variables"};

int gc_chat_call_shape(const gc_tok_t *t, gc_chat_tools_kind_t k, gc_json_call_t *c, gc_err_t *e) {
  c->lead = -1, c->mid = "\", \"arguments\": ", c->sep = NULL, c->tail = "";
  switch (k) {
    case GC_TOOLS_HERMES: /* blocks one after another, as Qwen writes several */
      c->pre = c->next = "<tool_call>\n{\"name\": \"", c->post = "}\n</tool_call>", c->sep = "\n";
      return GC_OK;
    case GC_TOOLS_LLAMA3_JSON: /* one call a message (Llama 3.1's JSON calls) */
      c->pre = "{\"name\": \"", c->mid = "\", \"parameters\": ", c->post = "}";
      return GC_OK;
    case GC_TOOLS_MISTRAL: /* the calls are one array */
      c->lead = gc_tok_find(t, "[TOOL_CALLS]", 12);
      if (c->lead < 0 || !gc_tok_is_special(t, c->lead))
        return gc_err_set(e, GC_EUNSUPPORTED, "the vocabulary has no [TOOL_CALLS] control token");
      c->pre = " [{\"name\": \"", c->post = "}", c->sep = ", ", c->next = "{\"name\": \"", c->tail = "]";
      return GC_OK;
    default: return gc_err_set(e, GC_EUNSUPPORTED, "the chat template has no tool calls");
  }
}

gc_chat_tools_kind_t gc_chat_tools(const gc_tok_t *t, gc_chat_kind_t k) {
  const char *tpl = gc_tok_chat_template(t);
  if (k == GC_CHAT_CHATML && tpl && strstr(tpl, "<tools></tools>") && strstr(tpl, HERMES_CALL) &&
      strstr(tpl, "You may call one or more functions") && strstr(tpl, "For each function call"))
    return GC_TOOLS_HERMES;
  int all = k == GC_CHAT_LLAMA3 && tpl && strstr(tpl, "tools_in_user_message") &&
            strstr(tpl, "'\"parameters\": '") && strstr(tpl, "Environment: ipython") &&
            strstr(tpl, "\"Today Date: \" + date_string");
  for (size_t i = 0; all && i < sizeof LLAMA3_TOOLS_TEXT / sizeof *LLAMA3_TOOLS_TEXT; i++)
    all = strstr(tpl, LLAMA3_TOOLS_TEXT[i]) != NULL;
  if (all) return GC_TOOLS_LLAMA3_JSON;
  if ((k == GC_CHAT_MISTRAL_V3 || k == GC_CHAT_MISTRAL_TEKKEN) && tpl && strstr(tpl, "[AVAILABLE_TOOLS]") &&
      strstr(tpl, "[TOOL_CALLS]") && strstr(tpl, "[TOOL_RESULTS]") && strstr(tpl, "if key != \"return\""))
    return GC_TOOLS_MISTRAL;
  return GC_TOOLS_NONE;
}

/* Mistral's tool: {"type": "function", "function": {"K": "V", "K": JSON}},
 * the function's string values unescaped, its "return" left out. */
static int mistral_tool(json_object *tool, gc_buf_t *b, gc_err_t *e) {
  json_object *fn = NULL;
  int i = 0, rc = gc_buf_printf(b, e, "{\"type\": \"function\", \"function\": {");
  if (json_object_object_get_ex(tool, "function", &fn) && json_object_is_type(fn, json_type_object)) {
    json_object_object_foreach(fn, key, val) {
      if (rc || !strcmp(key, "return")) continue;
      rc = (i++ && gc_buf_printf(b, e, ", ")) || gc_buf_printf(b, e, "\"%s\": ", key);
      if (!rc && json_object_is_type(val, json_type_string))
        rc = gc_buf_printf(b, e, "\"") || gc_buf_append(b, json_object_get_string(val),
                                                      (size_t)json_object_get_string_len(val), e) ||
             gc_buf_printf(b, e, "\"");
      else if (!rc)
        rc = gc_pyjson(val, -1, b, e);
    }
  }
  return rc || gc_buf_printf(b, e, "}}") ? GC_ENOMEM : GC_OK;
}

int gc_chat_tool_text(gc_chat_tools_kind_t k, struct json_object *tool, gc_buf_t *b, gc_err_t *e) {
  if (k == GC_TOOLS_MISTRAL) return mistral_tool(tool, b, e);
  return gc_pyjson(tool, k == GC_TOOLS_LLAMA3_JSON ? 4 : -1, b, e);
}

/* Llama 3.1's tools literals: the first user message's text before the
 * tools (its four literals joined) and the system message's first line.
 * 0, or -1 where one is missing (or no memory). */
static int llama3_literals(gc_chat_t *c, const char *tpl) {
  gc_buf_t b = {0};
  gc_err_t e = {0};
  int rc = 0;
  for (size_t i = 0; !rc && i < sizeof LLAMA3_TOOLS_TEXT / sizeof *LLAMA3_TOOLS_TEXT; i++) {
    char *l = literal_with(tpl, LLAMA3_TOOLS_TEXT[i]);
    rc = !l || gc_buf_printf(&b, &e, "%s", l);
    free(l);
  }
  c->tools_pre = rc ? NULL : b.data;
  if (rc) gc_buf_free(&b);
  c->tools_post = literal_with(tpl, "Environment: ipython");
  return c->tools_pre && c->tools_post ? 0 : -1;
}

/* Hermes' tools literals: the one before the tools, and the one after
 * them less the "<|im_end|>\n" that closes the system message (written
 * by id). 0, or -1 where the template's literals are not as expected. */
static int hermes_literals(gc_chat_t *c, const char *tpl) {
  static const char end[] = "<|im_end|>\n";
  c->tools_pre = literal_with(tpl, "You may call one or more functions");
  c->tools_post = literal_with(tpl, "For each function call");
  size_t n = c->tools_post ? strlen(c->tools_post) : 0;
  if (!c->tools_pre || n < strlen(end) || strcmp(c->tools_post + n - strlen(end), end)) return -1;
  c->tools_post[n - strlen(end)] = 0;
  return 0;
}

void gc_chat_init(gc_chat_t *c, gc_tok_t *t, gc_chat_kind_t k) {
  memset(c, 0, sizeof *c);
  c->t = t;
  c->k = k;
  const char *tpl = gc_tok_chat_template(t);
  /* the spaces around an [INST] turn's text: as the template's strings
   * write them ('[INST] ' + text + ' [/INST]', '[INST]' + text +
   * '[/INST]', ...), else the kind's own */
  c->inst_pre = tpl && strstr(tpl, "[INST]") ? !quoted(tpl, "[INST]", 1) : k != GC_CHAT_MISTRAL_TEKKEN;
  /* Mistral v0.1's and v0.2's template since 2024 (llama.cpp's mistral-v1):
   * ' [INST] ' (a space before the marker too), and the system message
   * before the first user message's text, "\n\n" between */
  c->inst_lead = k == GC_CHAT_MISTRAL && tpl && quoted(tpl, " [INST]", -1);
  c->sys_first = k == GC_CHAT_MISTRAL && tpl && strstr(tpl, "' [INST] ' + system_message");
  c->inst_post = tpl && strstr(tpl, "[/INST]") ? quoted(tpl, " [/INST]", -1)
                                                : k == GC_CHAT_LLAMA2 || k == GC_CHAT_MISTRAL;
  c->reply_pre = k == GC_CHAT_LLAMA2 || k == GC_CHAT_MISTRAL_V3 ||
                 (tpl && (strstr(tpl, "' ' + message['content']") || strstr(tpl, "\" \" + message[\"content\"]")));
  c->cut_think = k == GC_CHAT_DEEPSEEK_THINK || (tpl && strstr(tpl, "split('</think>')"));
  c->cut_lstrip = tpl && strstr(tpl, "split('</think>')[-1].lstrip('\\n')");
  c->think_open = gc_chat_reasoning(t, k) == 2;
  c->dflt_system = k == GC_CHAT_CHATML && tpl ? chatml_default_system(tpl) : NULL;
  c->sys_head = k == GC_CHAT_LLAMA3 && tpl ? llama3_sys_head(tpl, NULL) : NULL;
  c->sys_block = k == GC_CHAT_MISTRAL && tpl && strstr(tpl, "[SYSTEM_PROMPT]");
  c->sys_pre = c->sys_block && quoted(tpl, "[SYSTEM_PROMPT] ", 1);
  c->empty_think = k == GC_CHAT_CHATML && tpl && strstr(tpl, "enable_thinking") &&
                   strstr(tpl, "'<think>\\n\\n</think>\\n\\n'");
  c->keep_think = k == GC_CHAT_CHATML && c->cut_think && tpl && strstr(tpl, "last_query_index");
  c->tools_kind = gc_chat_tools(t, k);
  if ((c->tools_kind == GC_TOOLS_HERMES && hermes_literals(c, tpl)) ||
      (c->tools_kind == GC_TOOLS_LLAMA3_JSON && llama3_literals(c, tpl)))
    c->tools_kind = GC_TOOLS_NONE;
}

int gc_chat_date(gc_chat_t *c, const char *date, gc_err_t *e) {
  const char *tpl = gc_tok_chat_template(c->t);
  if (!c->sys_head) return GC_OK; /* the template does not read date_string */
  char *head = llama3_sys_head(tpl, date);
  if (!head) return gc_err_set(e, GC_ENOMEM, "out of memory");
  free(c->sys_head);
  c->sys_head = head;
  return GC_OK;
}

void gc_chat_free(gc_chat_t *c) {
  gc_buf_free(&c->text);
  free(c->dflt_system);
  free(c->sys_head);
  free(c->tools_pre);
  free(c->tools_post);
  c->dflt_system = c->sys_head = c->tools_pre = c->tools_post = NULL;
}

int gc_chat_flush(gc_chat_t *c, gc_tok_ids_t *out, gc_err_t *e) {
  int rc = c->text.len ? gc_tok_encode(c->t, c->text.data, c->text.len, 0, out, e) : GC_OK;
  c->text.len = 0;
  return rc;
}

/* Control token id after the pending text. */
static int put_id(gc_chat_t *c, int32_t id, gc_tok_ids_t *out, gc_err_t *e) {
  return gc_chat_flush(c, out, e) || gc_tok_ids_push(out, id, e) ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

/* Text s [n] (n < 0: strlen) to the pending text. */
static int put_text(gc_chat_t *c, const char *s, int n, gc_err_t *e) {
  return gc_buf_append(&c->text, s, n < 0 ? strlen(s) : (size_t)n, e);
}

/* The id of control token name, or GC_ENOTFOUND. */
static int put_control(gc_chat_t *c, const char *name, gc_tok_ids_t *out, gc_err_t *e) {
  int32_t id;
  return need(c->t, name, &id, e) || put_id(c, id, out, e) ? e->code : GC_OK;
}

static int put_end(gc_chat_t *c, gc_tok_ids_t *out, gc_err_t *e) {
  int32_t end = gc_chat_end_token(c->t, c->k);
  if (end < 0) return gc_err_set(e, GC_ENOTFOUND, "%s: the chat template needs an end-of-turn token, which the "
                                 "vocabulary lacks", c->t->what);
  return put_id(c, end, out, e);
}

/* One message of the templates that give every message a header, text
 * NULL for the header alone (the reply the model is to write):
 *   LLAMA3  <|start_header_id|>role<|end_header_id|> "\n\n" text <|eot_id|>
 *   CHATML  ("\n" after a message) <|im_start|> "role\n" text <|im_end|>
 *   ZEPHYR  ("\n" after a message) "<|role|>\n" text </s>
 * the text trimmed where cut. */
static int header_msg_as(gc_chat_t *c, const char *role, const char *text, int cut, gc_tok_ids_t *out, gc_err_t *e) {
  const char *p = "";
  size_t n = 0;
  int after = c->n_msgs > 0, rc;
  gc_buf_t head = {0}; /* Llama 3.1's system message: sys_head, then the text trimmed */
  if (text) trim(cut, text, &p, &n);
  if (text && c->sys_head && !after && !strcmp(role, "system")) {
    int env = c->ntools && c->tools_kind == GC_TOOLS_LLAMA3_JSON; /* "Environment: ipython\n" first */
    if (gc_buf_printf(&head, e, "%s%s%.*s", env ? c->tools_post : "", c->sys_head, (int)n, p)) return e->code;
    p = head.data, n = head.len;
  } else if (text && c->ntools && c->tools_kind == GC_TOOLS_LLAMA3_JSON && !c->tools_given && !strcmp(role, "user")) {
    /* Llama 3.1's first user message: the tools, each tojson'd and "\n\n", after the template's text */
    int rc = gc_buf_printf(&head, e, "%s", c->tools_pre);
    for (int i = 0; !rc && i < c->ntools; i++) rc = gc_buf_printf(&head, e, "%s\n\n", c->tools[i]);
    if (rc || gc_buf_printf(&head, e, "%.*s", (int)n, p)) return e->code;
    p = head.data, n = head.len, c->tools_given = 1;
  }
  if (c->k == GC_CHAT_LLAMA3)
    rc = put_control(c, "<|start_header_id|>", out, e) || put_text(c, role, -1, e) ||
         put_control(c, "<|end_header_id|>", out, e) || put_text(c, "\n\n", 2, e);
  else if (c->k == GC_CHAT_CHATML)
    rc = (after && put_text(c, "\n", 1, e)) || put_control(c, "<|im_start|>", out, e) || put_text(c, role, -1, e) ||
         put_text(c, "\n", 1, e);
  else
    rc = (after && put_text(c, "\n", 1, e)) || put_text(c, "<|", 2, e) || put_text(c, role, -1, e) ||
         put_text(c, "|>\n", 3, e);
  if (!rc) rc = put_text(c, p, (int)n, e) || (text && put_end(c, out, e));
  gc_buf_free(&head);
  return rc ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

/* header_msg_as, the text trimmed where the template trims it (Llama 2, Llama 3). */
static int header_msg(gc_chat_t *c, const char *role, const char *text, gc_tok_ids_t *out, gc_err_t *e) {
  return header_msg_as(c, role, text, trims(c->k), out, e);
}

static int is_inst(gc_chat_kind_t k) {
  return k == GC_CHAT_LLAMA2 || k == GC_CHAT_MISTRAL || k == GC_CHAT_MISTRAL_V3 || k == GC_CHAT_MISTRAL_TEKKEN;
}

static const char *inst_name(gc_chat_kind_t k) { return k == GC_CHAT_LLAMA2 ? "Llama 2" : "Mistral"; }

int gc_chat_reasoning(const gc_tok_t *t, gc_chat_kind_t k) {
  const char *tpl = gc_tok_chat_template(t);
  if (k == GC_CHAT_DEEPSEEK_THINK) return 2;
  if (k == GC_CHAT_DEEPSEEK) return 1;
  if (k != GC_CHAT_CHATML || !tpl) return 0;
  if (strstr(tpl, "'<|im_start|>assistant\\n<think>\\n'")) return 2;
  return strstr(tpl, "split('</think>')") ? 1 : 0;
}

/* An earlier reply's text as the template keeps it (cut_think: what
 * follows its last "</think>", without leading newlines where cut_lstrip). */
static const char *kept_reply(const gc_chat_t *c, const char *text) {
  for (const char *q; c->cut_think && (q = strstr(text, "</think>"));) text = q + 8;
  while (c->cut_lstrip && *text == '\n') text++;
  return text;
}

/* "<think>" (by id where it is a control token) and a newline: the block a
 * generation prompt opens (think_open). */
static int open_think(gc_chat_t *c, gc_tok_ids_t *out, gc_err_t *e) {
  int32_t think = control(c->t, "<think>");
  int rc = think >= 0 ? put_id(c, think, out, e) || put_text(c, "\n", 1, e) : put_text(c, "<think>\n", -1, e);
  return rc ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

int gc_chat_system_last(gc_chat_kind_t k) { return k == GC_CHAT_MISTRAL_V3 || k == GC_CHAT_MISTRAL_TEKKEN; }

/* Marker m ("[INST]", "[SYSTEM_PROMPT]", ...): by id where the vocabulary
 * has it as a control token, else as text. */
static int put_marker(gc_chat_t *c, const char *m, gc_tok_ids_t *out, gc_err_t *e) {
  int32_t id = control(c->t, m);
  return id >= 0 ? put_id(c, id, out, e) : put_text(c, m, -1, e) ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

/* "<think>\n\n</think>\n\n" (each marker by id where it is a control
 * token): the closed, empty block of a generation prompt with thinking off
 * (empty_think, think_off). */
static int closed_think(gc_chat_t *c, gc_tok_ids_t *out, gc_err_t *e) {
  return put_marker(c, "<think>", out, e) || put_text(c, "\n\n", 2, e) || put_marker(c, "</think>", out, e) ||
                 put_text(c, "\n\n", 2, e)
             ? (e->code ? e->code : GC_ENOMEM)
             : GC_OK;
}

/* Mistral's later system message: "[SYSTEM_PROMPT]" + (a space where the
 * template writes one) + text + "[/SYSTEM_PROMPT]", as given. */
static int system_block(gc_chat_t *c, const char *system, gc_tok_ids_t *out, gc_err_t *e) {
  return put_marker(c, "[SYSTEM_PROMPT]", out, e) || put_text(c, c->sys_pre ? " " : "", -1, e) ||
                 put_text(c, system, -1, e) || put_marker(c, "[/SYSTEM_PROMPT]", out, e)
             ? (e->code ? e->code : GC_ENOMEM)
             : GC_OK;
}

/* An [INST] turn: (a space where inst_lead) + "[INST]" + pre + content +
 * post + "[/INST]", the markers
 * by id where they are control tokens (Mistral v3's vocabulary), else as
 * text; pre and post a space where the template writes one (gc_chat_init:
 * Llama 2's and Mistral v0.1's both, v3's pre, Tekken's and Small 3's
 * none).
 * The content is the user's text after the system prompt: in <<SYS>> and
 * trimmed as a whole (content.strip()) in Llama 2's, as system + "\n\n"
 * in Mistral v3's and Tekken's, as given there and in Mistral's. */
static int inst_turn(gc_chat_t *c, const char *system, const char *user, gc_tok_ids_t *out, gc_err_t *e) {
  const char *pre = c->inst_pre ? " " : "", *post = c->inst_post ? " " : "";
  gc_buf_t b = {0};
  const char *p;
  size_t n;
  int rc = !system || c->sys_block ? GC_OK
           : c->k == GC_CHAT_LLAMA2   ? gc_buf_printf(&b, e, "<<SYS>>\n%s\n<</SYS>>\n\n", system)
                                      : gc_buf_printf(&b, e, "%s\n\n", system);
  if (!rc && system && c->sys_block) rc = system_block(c, system, out, e);
  if (!rc && c->ntools && c->tools_kind == GC_TOOLS_MISTRAL) { /* [AVAILABLE_TOOLS] [tool, tool][/AVAILABLE_TOOLS] */
    rc = put_marker(c, "[AVAILABLE_TOOLS]", out, e) || put_text(c, pre, -1, e) || put_text(c, "[", 1, e);
    for (int i = 0; !rc && i < c->ntools; i++)
      rc = put_text(c, c->tools[i], -1, e) || put_text(c, i + 1 < c->ntools ? ", " : "]", -1, e);
    rc = rc || put_marker(c, "[/AVAILABLE_TOOLS]", out, e);
  }
  if (!rc) rc = gc_buf_printf(&b, e, "%s", user);
  if (!rc) trim(trims(c->k), b.data, &p, &n);
  if (!rc) rc = (c->inst_lead && put_text(c, " ", 1, e)) || put_marker(c, "[INST]", out, e) ||
                put_text(c, pre, -1, e) || put_text(c, p, (int)n, e) || put_text(c, post, -1, e) ||
                put_marker(c, "[/INST]", out, e);
  gc_buf_free(&b);
  return rc ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

/* The text of the conversation's first system message into b, from the
 * caller's system (or NULL): the template's own where there is none
 * (dflt_system; Llama 3.1's header alone), and where tools are offered
 * (HERMES) the text, "\n\n" where the tools literal does not start a line
 * itself, then the tools between the template's literals, one a line.
 * *out: the text, or NULL for no system message. */
static int first_system(gc_chat_t *c, const char *system, gc_buf_t *b, const char **out, gc_err_t *e) {
  const char *base = system ? system : c->sys_head ? "" : c->dflt_system;
  *out = base;
  if (!c->ntools || c->tools_kind != GC_TOOLS_HERMES) return GC_OK;
  int rc = base && gc_buf_printf(b, e, "%s%s", base, c->tools_pre[0] == '\n' ? "" : "\n\n");
  rc = rc || gc_buf_printf(b, e, "%s", c->tools_pre);
  for (int i = 0; !rc && i < c->ntools; i++) rc = gc_buf_printf(b, e, "\n%s", c->tools[i]);
  rc = rc || gc_buf_printf(b, e, "%s", c->tools_post);
  *out = b->data;
  return rc ? e->code : GC_OK;
}

/* The end of an open run of tool results (HERMES: its user turn's <|im_end|>). */
static int close_tools(gc_chat_t *c, gc_tok_ids_t *out, gc_err_t *e) {
  if (!c->tool_open) return GC_OK;
  c->tool_open = 0;
  return put_end(c, out, e);
}

int gc_chat_user(gc_chat_t *c, const char *system, const char *user, gc_tok_ids_t *out, gc_err_t *e) {
  gc_tok_t *t = c->t;
  if (system && c->n_msgs && !gc_chat_system_last(c->k))
    return gc_err_set(e, GC_EINVAL, "a system prompt comes before the first message");
  if (c->k == GC_CHAT_MISTRAL && system && !c->sys_block && !c->sys_first)
    return gc_err_set(e, GC_EINVAL, "the Mistral chat template has no system role");
  if (is_inst(c->k) && c->last == 'u')
    return gc_err_set(e, GC_EINVAL, "the %s chat template takes user and assistant messages in turn (two user "
                      "messages in a row)", inst_name(c->k));
  int first = c->n_msgs == 0, rc = close_tools(c, out, e);
  gc_buf_t sys = {0};
  if (!rc && first) rc = first_system(c, system, &sys, &system, e);
  int bos = t->bos >= 0 && (c->k == GC_CHAT_LLAMA2 || (first && (c->k == GC_CHAT_LLAMA3 || is_inst(c->k) ||
                                                                  is_deepseek(c->k) || gc_tok_add_bos(t))));
  if (!rc && bos) rc = put_id(c, t->bos, out, e);
  if (!rc && is_deepseek(c->k)) /* the system prompt bare after BOS */
    rc = (system && put_text(c, system, -1, e)) || put_control(c, DS_USER, out, e) || put_text(c, user, -1, e)
             ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
  else if (!rc && is_inst(c->k)) rc = inst_turn(c, system, user, out, e);
  else if (!rc && system && !(rc = header_msg(c, "system", system, out, e))) c->n_msgs++;
  if (!rc && !is_inst(c->k) && !is_deepseek(c->k)) rc = header_msg(c, "user", user, out, e);
  if (!rc) c->n_msgs++, c->last = 'u';
  gc_buf_free(&sys);
  return rc;
}

/* DeepSeek's assistant message: <｜Assistant｜>, then text NULL: "<think>\n"
 * for DEEPSEEK_THINK (<think> by id where it is a control token; a
 * user-defined one the encoder matches in the text); text: the text, or
 * where the template cuts it (R1's content.split('</think>')[-1]; V3's
 * does not) what follows its last "</think>", then <｜end▁of▁sentence｜>. */
static int deepseek_reply(gc_chat_t *c, const char *text, gc_tok_ids_t *out, gc_err_t *e) {
  int rc = put_control(c, DS_ASSISTANT, out, e);
  if (!rc && !text && c->think_open) rc = open_think(c, out, e);
  if (!rc && text) rc = put_text(c, kept_reply(c, text), -1, e) || put_end(c, out, e);
  return rc ? (e->code ? e->code : GC_ENOMEM) : GC_OK;
}

/* Before an assistant message of the templates that give every message a
 * header: the end of an open run of tool results, and where the
 * conversation starts with it, the system message the template writes. */
static int first_header(gc_chat_t *c, gc_tok_ids_t *out, gc_err_t *e) {
  gc_buf_t b = {0};
  const char *sys;
  int rc = close_tools(c, out, e);
  if (!rc && !c->n_msgs && !(rc = first_system(c, NULL, &b, &sys, e)) && sys &&
      !(rc = header_msg(c, "system", sys, out, e)))
    c->n_msgs++;
  gc_buf_free(&b);
  return rc;
}

int gc_chat_assistant(gc_chat_t *c, const char *text, gc_tok_ids_t *out, gc_err_t *e) {
  int rc;
  if (is_inst(c->k) && c->last != 'u')
    return gc_err_set(e, GC_EINVAL, "the %s chat template takes user and assistant messages in turn (%s)",
                      inst_name(c->k), c->last ? "two assistant messages in a row" : "an assistant message first");
  if (is_deepseek(c->k)) {
    rc = deepseek_reply(c, text, out, e);
  } else if (!is_inst(c->k)) {
    rc = first_header(c, out, e);
    if (!rc) rc = header_msg(c, "assistant", text ? kept_reply(c, text) : NULL, out, e);
    if (!rc && !text && c->think_open) rc = open_think(c, out, e);
    if (!rc && !text && c->empty_think && c->think_off) rc = closed_think(c, out, e);
  } else if (!text) {
    rc = GC_OK;
  } else { /* Llama 2: ' ' + text.strip() + ' ' + eos; Mistral v3: ' ' + text.strip() + eos; Mistral, Tekken:
            * text + eos; Large 2411's: ' ' + text + eos (reply_pre) */
    const char *p;
    size_t n;
    int l2 = c->k == GC_CHAT_LLAMA2, v3 = c->k == GC_CHAT_MISTRAL_V3;
    trim(l2 || v3, text, &p, &n);
    rc = (c->reply_pre && put_text(c, " ", 1, e)) || put_text(c, p, (int)n, e) || (l2 && put_text(c, " ", 1, e)) ||
         put_end(c, out, e);
    if (rc) rc = e->code ? e->code : GC_ENOMEM;
  }
  if (!rc) c->n_msgs++, c->last = 'a';
  return rc;
}

/* s [*n] less the newlines at its front (front) or back. */
static void strip_nl(const char **s, size_t *n, int front, int back) {
  while (front && *n && **s == '\n') (*s)++, (*n)--;
  while (back && *n && (*s)[*n - 1] == '\n') (*n)--;
}

/* A reply's text and reasoning as a keep_think template (Qwen3's) reads
 * them: the reasoning given (the text as it is), else where the text has
 * "</think>": what lies before the first, after the last "<think>" in
 * it, less newlines around it, and the text after the last "</think>",
 * less its leading newlines. */
static void split_think(const char *text, const char *reasoning, const char **t, size_t *tn, const char **r,
                        size_t *rn) {
  *t = text, *tn = strlen(text), *r = reasoning ? reasoning : "", *rn = strlen(*r);
  const char *close = strstr(text, "</think>");
  if (reasoning || !close) return;
  *r = text, *rn = (size_t)(close - text);
  strip_nl(r, rn, 0, 1);
  for (const char *q; (q = memmem(*r, *rn, "<think>", 7));) *rn -= (size_t)(q + 7 - *r), *r = q + 7;
  strip_nl(r, rn, 1, 0);
  *t = kept_reply(&(gc_chat_t){.cut_think = 1, .cut_lstrip = 1}, text), *tn = strlen(*t);
}

/* Llama 3.1's reply of one call: {"name": "N", "parameters": ARGS}, its text left out (as the template does). */
static int llama3_call(gc_chat_t *c, const gc_chat_call_t *call, gc_tok_ids_t *out, gc_err_t *e) {
  int rc = first_header(c, out, e) || header_msg(c, "assistant", NULL, out, e) ||
           put_text(c, "{\"name\": \"", -1, e) || put_text(c, call->name, -1, e) ||
           put_text(c, "\", \"parameters\": ", -1, e) || put_text(c, call->args, -1, e) || put_text(c, "}", 1, e) ||
           put_end(c, out, e);
  if (rc) return e->code ? e->code : GC_ENOMEM;
  c->n_msgs++, c->last = 'a';
  return GC_OK;
}

/* Mistral's template's check of a call's id. */
static int mistral_id(const char *id, gc_err_t *e) {
  return id && strlen(id) == 9 ? GC_OK
                               : gc_err_set(e, GC_EINVAL, "Tool call IDs should be alphanumeric strings with length 9!");
}

/* Mistral's calls: [TOOL_CALLS] + (space) + [{"name": N, "arguments": ARGS, "id": "ID"}, ...] + </s>
 * (tojson of the function, its "}" replaced by the id); the reply is
 * left out of the turns' alternation, as the template's check leaves it. */
static int mistral_calls(gc_chat_t *c, const gc_chat_call_t *calls, int ncalls, gc_tok_ids_t *out, gc_err_t *e) {
  for (int i = 0; i < ncalls; i++)
    if (mistral_id(calls[i].id, e)) return e->code;
  gc_buf_t b = {0};
  int rc = gc_buf_printf(&b, e, "%s[", c->inst_pre ? " " : "");
  for (int i = 0; !rc && i < ncalls; i++)
    rc = gc_buf_printf(&b, e, "{\"name\": ") || gc_pyjson_str(calls[i].name, strlen(calls[i].name), &b, e) ||
         gc_buf_printf(&b, e, ", \"arguments\": %s, \"id\": \"%s\"}%s", calls[i].args, calls[i].id,
                       i + 1 < ncalls ? ", " : "]");
  rc = rc || put_marker(c, "[TOOL_CALLS]", out, e) || put_text(c, b.data, (int)b.len, e) || put_end(c, out, e);
  gc_buf_free(&b);
  if (rc) return e->code ? e->code : GC_ENOMEM;
  c->n_msgs++;
  return GC_OK;
}

int gc_chat_reply(gc_chat_t *c, const char *text, const char *reasoning, int after_query, const gc_chat_call_t *calls,
                  int ncalls, gc_tok_ids_t *out, gc_err_t *e) {
  if (ncalls && !c->tools_kind) return gc_err_set(e, GC_EINVAL, "the chat template has no tool calls");
  if (ncalls && c->tools_kind == GC_TOOLS_LLAMA3_JSON) {
    if (ncalls > 1) return gc_err_set(e, GC_EINVAL, "This model only supports single tool-calls at once!");
    return llama3_call(c, calls, out, e);
  }
  if (ncalls && c->tools_kind == GC_TOOLS_MISTRAL) return mistral_calls(c, calls, ncalls, out, e);
  if (!ncalls && !c->keep_think) return gc_chat_assistant(c, text, out, e);
  const char *t, *r;
  size_t tn, rn;
  if (c->keep_think) split_think(text, reasoning, &t, &tn, &r, &rn);
  else t = text, tn = strlen(text), r = "", rn = 0;
  int has_text = tn > 0, rc = first_header(c, out, e) || header_msg(c, "assistant", NULL, out, e);
  if (!rc && c->keep_think && after_query && rn) { /* <think>\n + reasoning.strip('\n') + \n</think>\n\n */
    strip_nl(&r, &rn, 1, 1);
    strip_nl(&t, &tn, 1, 0);
    rc = put_text(c, "<think>\n", -1, e) || put_text(c, r, (int)rn, e) || put_text(c, "\n</think>\n\n", -1, e);
  }
  rc = rc || put_text(c, t, (int)tn, e);
  for (int i = 0; !rc && i < ncalls; i++) /* as Qwen's templates write a call */
    rc = put_text(c, i || has_text ? "\n<tool_call>\n{\"name\": \"" : "<tool_call>\n{\"name\": \"", -1, e) ||
         put_text(c, calls[i].name, -1, e) || put_text(c, "\", \"arguments\": ", -1, e) ||
         put_text(c, calls[i].args, -1, e) || put_text(c, "}\n</tool_call>", -1, e);
  rc = rc || put_end(c, out, e);
  if (rc) return e->code ? e->code : GC_ENOMEM;
  c->n_msgs++, c->last = 'a';
  return GC_OK;
}

int gc_chat_tool_result(gc_chat_t *c, const char *text, const char *id, gc_tok_ids_t *out, gc_err_t *e) {
  if (!c->tools_kind) return gc_err_set(e, GC_EINVAL, "the chat template has no tool calls");
  int rc = GC_OK;
  if (c->tools_kind == GC_TOOLS_MISTRAL) { /* [TOOL_RESULTS] (space) {"content": TEXT, "call_id": "ID"}[/TOOL_RESULTS] */
    if (mistral_id(id, e)) return e->code;
    rc = put_marker(c, "[TOOL_RESULTS]", out, e) || put_text(c, c->inst_pre ? " " : "", -1, e) ||
         put_text(c, "{\"content\": ", -1, e) || put_text(c, text, -1, e) || put_text(c, ", \"call_id\": \"", -1, e) ||
         put_text(c, id, -1, e) || put_text(c, "\"}", -1, e) || put_marker(c, "[/TOOL_RESULTS]", out, e);
    if (rc) return e->code ? e->code : GC_ENOMEM;
    c->n_msgs++;
    return GC_OK;
  }
  if (c->tools_kind == GC_TOOLS_LLAMA3_JSON) { /* the ipython role; the text as a JSON string (tojson) */
    gc_buf_t q = {0};
    rc = gc_pyjson_str(text, strlen(text), &q, e) || gc_buf_append(&q, "", 1, e) ||
         header_msg_as(c, "ipython", q.data, 0, out, e);
    gc_buf_free(&q);
    if (rc) return e->code ? e->code : GC_ENOMEM;
    c->n_msgs++, c->last = 't';
    return GC_OK;
  }
  if (!c->tool_open) /* the run's user turn: "\n" after a message, <|im_start|>user (no newline) */
    rc = (c->n_msgs && put_text(c, "\n", 1, e)) || put_control(c, "<|im_start|>", out, e) || put_text(c, "user", 4, e);
  rc = rc || put_text(c, "\n<tool_response>\n", -1, e) || put_text(c, text, -1, e) ||
       put_text(c, "\n</tool_response>", -1, e);
  if (rc) return e->code ? e->code : GC_ENOMEM;
  c->tool_open = 1, c->n_msgs++, c->last = 't';
  return GC_OK;
}

int32_t gc_chat_end_token(const gc_tok_t *t, gc_chat_kind_t k) {
  if (k == GC_CHAT_LLAMA3) return gc_tok_find(t, "<|eot_id|>", 10);
  if (k == GC_CHAT_CHATML) return gc_tok_find(t, "<|im_end|>", 10);
  if (is_deepseek(k)) return gc_tok_find(t, DS_END, strlen(DS_END));
  return t->n_eos ? t->eos[0] : -1;
}
