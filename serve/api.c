/* api.c — OpenAI request parsing and response JSON for gcore-serve (see
 * api.h). Every request field gcore-serve knows is in one table, FIELDS:
 * those it implements (OpenAI's model, prompt or messages, max_tokens /
 * max_completion_tokens, temperature, top_p, seed, stop, stream,
 * stream_options, logprobs, top_logprobs, echo, n, best_of = n, a batch
 * of prompts; llama.cpp's and vLLM's
 * top_k, min_p, repeat_penalty / repetition_penalty, repeat_last_n,
 * stop_token_ids, min_tokens, ignore_eos, return_token_ids, cache_prompt), those with no effect on the tokens
 * (user, metadata, ...: ignored), and those that would change the answer
 * and are not implemented: accepted only at the value that turns them off
 * (presence_penalty 0, typical_p 1, ...), else refused by name (400),
 * never ignored. Unknown fields are ignored. */
#include "api.h"

#include "../models/pyjson.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INVALID "invalid_request_error"
#define JSON_DEPTH 32 /* nesting deeper than any request needs is refused */
#define JSON_OUT (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

int gc_api_fail(gc_api_err_t *err, int status, const char *type, const char *code,
                const char *param, const char *fmt, ...) {
  va_list ap;
  err->status = status;
  err->type = type;
  err->code = code;
  snprintf(err->param, sizeof err->param, "%s", param ? param : "");
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return status;
}

/* ---- the body's text ----------------------------------------------------------- */

/* A request: the object json-c parsed, and its text, from which errors quote
 * numbers as the client wrote them (json-c gives an integer beyond 64 bits
 * as the nearest limit, and an overflowing double as inf); and its JSON
 * Schema once compiled, which every choice of every prompt shares. */
typedef struct body {
  json_object *o;
  const char *text; /* [n], valid JSON: json-c has parsed it */
  size_t n;
  gc_json_schema_t *schema; /* NULL until a choice compiles it (schema_of); gc_api_parse drops it before it returns */
  gc_json_regex_t *regex;   /* guided_regex's automaton: the same (regex_of) */
} body_t;

static size_t skip_ws(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) i++;
  return i;
}

/* s[i] opens a string: the index after its closing quote. */
static size_t skip_string(const char *s, size_t n, size_t i) {
  for (i++; i < n && s[i] != '"'; i++)
    if (s[i] == '\\') i++;
  return i + 1;
}

/* s[i] (i < n) begins a value of valid JSON: the index after it. */
static size_t skip_value(const char *s, size_t n, size_t i) {
  int depth = 0;
  do {
    if (s[i] == '"') i = skip_string(s, n, i);
    else if (s[i] == '{' || s[i] == '[') depth++, i++;
    else if (s[i] == '}' || s[i] == ']') depth--, i++;
    else if (depth) i++;
    else while (i < n && !strchr(",}] \t\r\n", s[i])) i++; /* a number or literal */
  } while (depth > 0 && i < n);
  return i < n ? i : n;
}

/* The text [*len] of the value of b's top-level member key (the last when
 * it is repeated, as json-c keeps the last), or NULL when it is absent or
 * its name is written with escapes. */
static const char *raw_member(const body_t *b, const char *key, int *len) {
  const char *s = b->text, *found = NULL;
  size_t n = b->n, klen = strlen(key), i = skip_ws(s, n, 0);
  if (i >= n || s[i] != '{') return NULL;
  for (i = skip_ws(s, n, i + 1); i < n && s[i] == '"';) {
    size_t k = i + 1;
    i = skip_string(s, n, i);
    int match = i - k - 1 == klen && !memcmp(s + k, key, klen);
    i = skip_ws(s, n, skip_ws(s, n, i) + 1); /* past the ':' */
    if (i >= n) break;
    size_t v = i;
    i = skip_value(s, n, i);
    if (match) found = s + v, *len = (int)(i - v);
    i = skip_ws(s, n, i);
    if (i < n && s[i] == ',') i = skip_ws(s, n, i + 1);
  }
  return found;
}

/* ---- field access ---------------------------------------------------------- */

static const char *type_name(json_object *v) {
  switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_double: case json_type_int: return "a number";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    default: return "a string";
  }
}

/* The field key of o, or NULL when it is absent or null. */
static json_object *field(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) return NULL;
  return v;
}

static int is_number(json_object *v) {
  return json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int);
}

static int want(gc_api_err_t *err, const char *key, const char *what, json_object *v) {
  return gc_api_fail(err, 400, INVALID, NULL, key, "'%s' must be %s, not %s", key, what, type_name(v));
}

/* 400: the number v of b's field key is outside the range that fmt says;
 * the message quotes it as written. */
__attribute__((format(printf, 5, 6)))
static int outside(const body_t *b, const char *key, json_object *v, gc_api_err_t *err, const char *fmt, ...) {
  char range[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(range, sizeof range, fmt, ap);
  va_end(ap);
  int len = 0, cut;
  const char *given = raw_member(b, key, &len);
  if (!given) given = json_object_to_json_string_ext(v, JSON_OUT), len = (int)strlen(given);
  for (cut = len < 60 ? len : 60; cut < len && cut > 0 && (given[cut] & 0xC0) == 0x80;) cut--; /* whole UTF-8 */
  return gc_api_fail(err, 400, INVALID, NULL, key, "'%s' is %.*s%s; it must be %s", key, cut, given,
                     cut < len ? "..." : "", range);
}

/* A number field in [lo, hi] into *out (unchanged when absent). */
static int num(const body_t *b, const char *key, double lo, double hi, double *out, gc_api_err_t *err) {
  json_object *v = field(b->o, key);
  if (!v) return 0;
  if (!is_number(v)) return want(err, key, "a number", v);
  double x = json_object_get_double(v);
  if (!(x >= lo && x <= hi)) return outside(b, key, v, err, "from %g to %g", lo, hi);
  *out = x;
  return 0;
}

/* Whether key's integer x was written beyond 64 bits (json-c gave a limit),
 * or may have been: a limit whose text raw_member cannot find (a name
 * written with escapes or quoted with ') counts as beyond. */
static int beyond_int64(const body_t *b, const char *key, int64_t x) {
  if (x != INT64_MAX && x != INT64_MIN) return 0;
  int len = 0;
  const char *t = raw_member(b, key, &len);
  char digits[48];
  if (!t || len >= (int)sizeof digits) return 1; /* strict JSON: no leading zeros */
  memcpy(digits, t, (size_t)len);
  digits[len] = 0;
  errno = 0;
  (void)strtoll(digits, NULL, 10);
  return errno == ERANGE;
}

/* An integer field in [lo, hi] into *out (unchanged when absent). */
static int integer(const body_t *b, const char *key, int64_t lo, int64_t hi, int64_t *out, gc_api_err_t *err) {
  json_object *v = field(b->o, key);
  if (!v) return 0;
  if (!json_object_is_type(v, json_type_int)) return want(err, key, "an integer", v);
  int64_t x = json_object_get_int64(v);
  if (x < lo || x > hi || beyond_int64(b, key, x))
    return outside(b, key, v, err, "from %lld to %lld", (long long)lo, (long long)hi);
  *out = x;
  return 0;
}

static int boolean(json_object *o, const char *key, int *out, gc_api_err_t *err) {
  json_object *v = field(o, key);
  if (!v) return 0;
  if (!json_object_is_type(v, json_type_boolean)) return want(err, key, "a boolean", v);
  *out = json_object_get_boolean(v);
  return 0;
}

/* ---- the fields ------------------------------------------------------------- */

/* What gcore-serve does with a field it knows (an unknown one is ignored, a
 * null one is absent). */
typedef enum {
  F_READ,   /* implemented: read by gc_api_parse and params() */
  F_IGNORE, /* no effect on the answer: accepted, not read */
  F_OFF,    /* not implemented: accepted only at the value that turns it off */
} field_use_t;

/* The value that turns an F_OFF field off. */
typedef enum {
  OFF_NULL,  /* none: any value is refused */
  OFF_NUM,   /* the number `num` */
  OFF_FALSE, /* false */
  OFF_TRUE,  /* true */
  OFF_EMPTY, /* "", [] or {} */
  OFF_NONE,  /* the string "none" */
  OFF_TEXT,  /* {"type": "text"} */
} field_off_t;

#define READ(name) {name, F_READ, OFF_NULL, 0, NULL}
#define IGNORE(name) {name, F_IGNORE, OFF_NULL, 0, NULL}
#define OFF(name, off, num, why) {name, F_OFF, off, num, why}

/* Every request field gcore-serve knows, OpenAI's and the extensions of
 * vLLM and llama.cpp, on either endpoint. */
static const struct field_rule {
  const char *name;
  field_use_t use;
  field_off_t off;  /* F_OFF */
  double num;       /* OFF_NUM */
  const char *why;  /* F_OFF: the message's end, or NULL */
} FIELDS[] = {
    /* implemented: OpenAI's, then vLLM's and llama.cpp's */
    READ("model"), READ("prompt"), READ("messages"), READ("max_tokens"), READ("max_completion_tokens"),
    READ("temperature"), READ("top_p"), READ("seed"), READ("stop"), READ("stream"), READ("stream_options"),
    READ("top_k"), READ("min_p"), READ("repetition_penalty"), READ("repeat_penalty"), READ("repeat_last_n"),
    READ("stop_token_ids"), READ("min_tokens"), READ("ignore_eos"), READ("return_token_ids"),
    READ("logprobs"), READ("top_logprobs"), READ("echo"), READ("n"), READ("best_of"), READ("cache_prompt"),
    READ("chat_template_kwargs"), READ("tools"), READ("tool_choice"), READ("response_format"),
    READ("logit_bias"), READ("presence_penalty"), READ("frequency_penalty"), READ("allowed_token_ids"),
    READ("parallel_tool_calls"), READ("guided_json"), READ("json_schema"), READ("guided_choice"), READ("guided_regex"),
    READ("structured_outputs"),

    /* no effect on the tokens: bookkeeping, caching, scheduling */
    IGNORE("user"), IGNORE("metadata"), IGNORE("store"), IGNORE("service_tier"),
    IGNORE("prompt_cache_key"), IGNORE("safety_identifier"), IGNORE("request_id"), IGNORE("priority"),
    IGNORE("id_slot"),
    /* read only beside a field below that is refused when it is on */
    IGNORE("mirostat_tau"), IGNORE("mirostat_eta"), IGNORE("dry_base"), IGNORE("dry_allowed_length"),
    IGNORE("dry_penalty_last_n"), IGNORE("dry_sequence_breakers"), IGNORE("xtc_threshold"),
    IGNORE("length_penalty"), IGNORE("spaces_between_special_tokens"), IGNORE("guided_decoding_backend"),
    IGNORE("guided_whitespace_pattern"),

    /* more choices, other spellings of log-probabilities */
    OFF("use_beam_search", OFF_FALSE, 0, NULL),
    OFF("prompt_logprobs", OFF_NULL, 0, "give \"echo\": true with \"logprobs\""),
    OFF("n_probs", OFF_NUM, 0, "give \"logprobs\""), OFF("suffix", OFF_EMPTY, 0, NULL),
    /* penalties, biases and samplers that gcore's sampler does not have */
    OFF("bad_words", OFF_EMPTY, 0, NULL), OFF("typical_p", OFF_NUM, 1, NULL), OFF("tfs_z", OFF_NUM, 1, NULL),
    OFF("top_a", OFF_NUM, 0, NULL), OFF("mirostat", OFF_NUM, 0, NULL), OFF("dry_multiplier", OFF_NUM, 0, NULL),
    OFF("xtc_probability", OFF_NUM, 0, NULL), OFF("dynatemp_range", OFF_NUM, 0, NULL),
    OFF("top_n_sigma", OFF_NUM, -1, NULL),
    /* constrained decoding */
    OFF("guided_grammar", OFF_NULL, 0, "no constrained decoding"),
    OFF("grammar", OFF_NULL, 0, "no constrained decoding"),
    /* tools, the chat template, other inputs and outputs */
    OFF("functions", OFF_EMPTY, 0, "give 'tools'"), OFF("function_call", OFF_NONE, 0, "give 'tool_choice'"),
    OFF("add_generation_prompt", OFF_TRUE, 0, NULL), OFF("continue_final_message", OFF_FALSE, 0, NULL),
    OFF("chat_template", OFF_NULL, 0, "the model's own template is used"),
    OFF("include_stop_str_in_output", OFF_FALSE, 0, "stop strings and stop tokens are left out of the text"),
    OFF("skip_special_tokens", OFF_TRUE, 0, "special tokens are left out of the text"),
    OFF("n_predict", OFF_NULL, 0, "give max_tokens"), OFF("truncate_prompt_tokens", OFF_NULL, 0, NULL),
    OFF("reasoning_effort", OFF_NULL, 0, NULL), OFF("audio", OFF_NULL, 0, "text only"),
    OFF("prediction", OFF_NULL, 0, NULL), OFF("web_search_options", OFF_NULL, 0, NULL),
};

/* Whether v is f's value that turns it off. */
static int is_off(const struct field_rule *f, json_object *v) {
  json_object *t;
  switch (f->off) {
    case OFF_NUM: return is_number(v) && json_object_get_double(v) == f->num;
    case OFF_FALSE: return json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v);
    case OFF_TRUE: return json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
    case OFF_EMPTY:
      return (json_object_is_type(v, json_type_string) && !json_object_get_string_len(v)) ||
             (json_object_is_type(v, json_type_array) && !json_object_array_length(v)) ||
             (json_object_is_type(v, json_type_object) && !json_object_object_length(v));
    case OFF_NONE: return json_object_is_type(v, json_type_string) && !strcmp(json_object_get_string(v), "none");
    case OFF_TEXT:
      return json_object_is_type(v, json_type_object) && json_object_object_get_ex(v, "type", &t) &&
             json_object_is_type(t, json_type_string) && !strcmp(json_object_get_string(t), "text");
    default: return 0;
  }
}

/* Refuse (400, naming it) the first F_OFF field of o that is on. */
static int unsupported(json_object *o, gc_api_err_t *err) {
  static const char *const give[] = {[OFF_FALSE] = "false", [OFF_TRUE] = "true", [OFF_EMPTY] = "an empty one",
                                     [OFF_NONE] = "\"none\"", [OFF_TEXT] = "{\"type\": \"text\"}"};
  for (size_t i = 0; i < sizeof FIELDS / sizeof *FIELDS; i++) {
    const struct field_rule *f = &FIELDS[i];
    json_object *v = f->use == F_OFF ? field(o, f->name) : NULL;
    if (!v || is_off(f, v)) continue;
    char off[48] = "";
    if (f->off == OFF_NUM) snprintf(off, sizeof off, " (give %g)", f->num);
    else if (f->off != OFF_NULL) snprintf(off, sizeof off, " (give %s)", give[f->off]);
    return gc_api_fail(err, 400, INVALID, NULL, f->name, "'%s' is not supported%s%s%s", f->name, off,
                       f->why ? ": " : "", f->why ? f->why : "");
  }
  return 0;
}

/* ---- prompts ------------------------------------------------------------------ */

static int push_id(gc_tok_ids_t *ids, int64_t id, const gc_api_t *a, const char *param, gc_api_err_t *err) {
  if (id < 0 || id >= a->vocab)
    return gc_api_fail(err, 400, INVALID, NULL, param, "token id %lld is outside the vocabulary [0, %d)",
                       (long long)id, a->vocab);
  gc_err_t e = {0};
  if (gc_tok_ids_push(ids, (int32_t)id, &e)) return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  return 0;
}

/* The ids of JSON string text with encode flags, under the tokenizer's lock. */
static int encode_string(gc_api_t *a, json_object *text, int flags, gc_tok_ids_t *ids, gc_api_err_t *err) {
  gc_err_t e = {0};
  pthread_mutex_lock(&a->tok_mu);
  int rc = gc_tok_encode(a->tok, json_object_get_string(text), (size_t)json_object_get_string_len(text), flags, ids,
                         &e);
  pthread_mutex_unlock(&a->tok_mu);
  return rc ? gc_api_fail(err, 500, "server_error", NULL, NULL, "tokenizing failed: %s", e.msg) : 0;
}

/* One /v1/completions prompt: a string, or an array of ids. Text is
 * tokenized as gcore-run -p does: BOS first when the tokenizer adds one,
 * special tokens matched. */
static int one_prompt(gc_api_t *a, json_object *p, gc_tok_ids_t *ids, gc_api_err_t *err) {
  if (json_object_is_type(p, json_type_array)) {
    size_t n = json_object_array_length(p);
    if (!n) return gc_api_fail(err, 400, INVALID, NULL, "prompt", "a prompt is empty");
    for (size_t i = 0; i < n; i++) {
      json_object *x = json_object_array_get_idx(p, i);
      if (!json_object_is_type(x, json_type_int))
        return want(err, "prompt", "a string, an array of token ids or an array of those", x);
      if (push_id(ids, json_object_get_int64(x), a, "prompt", err)) return err->status;
    }
    return 0;
  }
  if (!json_object_is_type(p, json_type_string))
    return want(err, "prompt", "a string, an array of token ids or an array of those", p);
  if (!a->tok)
    return gc_api_fail(err, 400, INVALID, NULL, "prompt",
                       "this server has no tokenizer: give the prompt as an array of token ids");
  return encode_string(a, p, gc_tok_prompt_flags(a->tok), ids, err);
}

/* The prompts of /v1/completions, each a string or an array of ids (one),
 * or an array of those (a batch of at most GC_API_MAX_CHOICES): into
 * ps[*np], ids and each prompt's JSON (its text, for echo). */
typedef struct prompt {
  gc_tok_ids_t ids;
  json_object *json; /* a string, or an array of ids (borrowed from the body) */
} prompt_t;
/* err's message begins with which prompt of a batch of n it is about. */
static int of_prompt(gc_api_err_t *err, size_t i, size_t n) {
  char m[sizeof err->msg];
  if (n > 1) {
    snprintf(m, sizeof m, "prompt %zu of %zu: %s", i, n, err->msg);
    memcpy(err->msg, m, sizeof m);
  }
  return err->status;
}

static int completion_prompts(gc_api_t *a, json_object *p, prompt_t *ps, int *np, gc_api_err_t *err) {
  *np = 0;
  if (!p) return gc_api_fail(err, 400, INVALID, NULL, "prompt", "'prompt' is required");
  json_object *x0 = json_object_is_type(p, json_type_array) ? json_object_array_get_idx(p, 0) : NULL;
  int batch = x0 && (json_object_is_type(x0, json_type_string) || json_object_is_type(x0, json_type_array));
  size_t n = batch ? json_object_array_length(p) : 1;
  if (json_object_is_type(p, json_type_array) && !json_object_array_length(p))
    return gc_api_fail(err, 400, INVALID, NULL, "prompt", "'prompt' is empty");
  if (n > GC_API_MAX_CHOICES)
    return gc_api_fail(err, 400, INVALID, NULL, "prompt", "at most %d prompts a request", GC_API_MAX_CHOICES);
  for (size_t i = 0; i < n; i++) {
    ps[i].json = batch ? json_object_array_get_idx(p, i) : p;
    ++*np;
    if (!ps[i].json || (batch && !json_object_is_type(ps[i].json, json_type_string) &&
                        !json_object_is_type(ps[i].json, json_type_array)))
      return want(err, "prompt", "a string, an array of token ids or an array of those", ps[i].json), of_prompt(err, i, n);
    if (one_prompt(a, ps[i].json, &ps[i].ids, err)) return of_prompt(err, i, n);
    if (!ps[i].ids.n) return gc_api_fail(err, 400, INVALID, NULL, "prompt", "the prompt has no tokens"), of_prompt(err, i, n);
  }
  return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text"}
 * parts (joined), into out (NUL-terminated). */
static int content_text(json_object *m, gc_buf_t *out, gc_api_err_t *err) {
  json_object *c = field(m, "content");
  gc_err_t e = {0};
  out->len = 0;
  if (c && json_object_is_type(c, json_type_string)) {
    if (gc_buf_append(out, json_object_get_string(c), (size_t)json_object_get_string_len(c), &e)) goto nomem;
  } else if (c && json_object_is_type(c, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(c); i++) {
      json_object *part = json_object_array_get_idx(c, i), *t, *x;
      if (!json_object_is_type(part, json_type_object) || !json_object_object_get_ex(part, "type", &t) ||
          !json_object_is_type(t, json_type_string) || strcmp(json_object_get_string(t), "text") ||
          !json_object_object_get_ex(part, "text", &x) || !json_object_is_type(x, json_type_string))
        return gc_api_fail(err, 400, INVALID, NULL, "messages",
                           "a content part must be {\"type\": \"text\", \"text\": ...}: only text is supported");
      if (gc_buf_append(out, json_object_get_string(x), (size_t)json_object_get_string_len(x), &e)) goto nomem;
    }
  } else if (c) {
    return want(err, "messages", "a message content of a string or an array of text parts", c);
  }
  if (gc_buf_append(out, "", 1, &e)) goto nomem;
  out->len--;
  if (memchr(out->data, 0, out->len))
    return gc_api_fail(err, 400, INVALID, NULL, "messages", "a message content holds a NUL character");
  return 0;
nomem:
  return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* What a chat's template reads beside its messages. */
typedef struct chat_args {
  int think_off;             /* chat_template_kwargs' enable_thinking false */
  const char *date;          /* ... its date_string (Llama 3.1's), or NULL */
  char **tools;              /* [ntools] the request's tools as the template writes them (tojson) */
  int ntools;
  gc_buf_t tool_text;        /* their text, NUL-separated */
  gc_json_call_t *call;      /* tool_choice "required" or a named function: the calls the reply must be */
} chat_args_t;

static void call_free(gc_json_call_t *c) {
  if (c) gc_json_call_clear(c);
  free(c);
}

static void chat_args_free(chat_args_t *ca) {
  free(ca->tools);
  gc_buf_free(&ca->tool_text);
  call_free(ca->call);
  memset(ca, 0, sizeof *ca);
}

/* chat_template_kwargs of request o (vLLM's: what the template reads
 * beside the messages): enable_thinking, a boolean (Qwen3's hybrid
 * templates), and date_string, a string (Llama 3.1's and 3.2's header);
 * templates that do not read one are unchanged by it, as under Jinja; any
 * other key is refused. ca->date points into o. */
static int template_kwargs(json_object *o, chat_args_t *ca, gc_api_err_t *err) {
  json_object *k = field(o, "chat_template_kwargs");
  ca->think_off = 0, ca->date = NULL;
  if (!k) return 0;
  if (!json_object_is_type(k, json_type_object)) return want(err, "chat_template_kwargs", "an object", k);
  json_object_object_foreach(k, key, v) {
    if (!strcmp(key, "date_string")) {
      if (!json_object_is_type(v, json_type_string) || memchr(json_object_get_string(v), 0,
                                                               (size_t)json_object_get_string_len(v)))
        return want(err, "chat_template_kwargs", "{\"date_string\": a string}", v);
      ca->date = json_object_get_string(v);
      continue;
    }
    if (strcmp(key, "enable_thinking"))
      return gc_api_fail(err, 400, INVALID, NULL, "chat_template_kwargs", "chat_template_kwargs: '%.64s' is not "
                         "read (enable_thinking and date_string are; the model's own template is used)", key);
    if (!json_object_is_type(v, json_type_boolean))
      return want(err, "chat_template_kwargs", "{\"enable_thinking\": true or false}", v);
    ca->think_off = !json_object_get_boolean(v);
  }
  return 0;
}

/* What tool_choice of o lets the model do with the tools: "auto" (or
 * absent) 1, call them or not; "none" 0; "required" 2, call them (one or more); a named
 * function ({"type": "function", "function": {"name": N}}) 3, call N
 * (*named, in o). -1 with err filled. */
static int tool_choice(json_object *o, const char **named, gc_api_err_t *err) {
  json_object *c = field(o, "tool_choice"), *ty, *fn, *name;
  if (!c) return 1;
  const char *s = json_object_is_type(c, json_type_string) ? json_object_get_string(c) : NULL;
  if (s && !strcmp(s, "auto")) return 1;
  if (s && !strcmp(s, "none")) return 0;
  if (s && !strcmp(s, "required")) return 2;
  if (json_object_is_type(c, json_type_object) && json_object_object_get_ex(c, "type", &ty) &&
      json_object_is_type(ty, json_type_string) && !strcmp(json_object_get_string(ty), "function") &&
      json_object_object_get_ex(c, "function", &fn) && json_object_is_type(fn, json_type_object) &&
      json_object_object_get_ex(fn, "name", &name) && json_object_is_type(name, json_type_string)) {
    *named = json_object_get_string(name);
    return 3;
  }
  want(err, "tool_choice", "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": "
       "{\"name\": ...}}", c);
  return -1;
}

/* A name the reply may be made to call: 1 to GC_JSON_NAME bytes that a
 * JSON string holds as they are (OpenAI's names are [A-Za-z0-9_-]). */
static int forcible(const char *n) {
  size_t len = strlen(n);
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)n[i] < 0x20 || n[i] == '"' || n[i] == '\\') return 0;
  return len >= 1 && len <= GC_JSON_NAME;
}

/* A forced call's arguments' schema: function fn's parameters (tools[i]),
 * compiled where they fall in the subset jsonmode.h reads; with OpenAI's
 * "strict": true they must (else 400, naming the path), without it
 * parameters outside the subset leave the arguments any object (*out
 * NULL), as parameters absent do. */
static int call_schema(json_object *fn, size_t i, gc_json_schema_t **out, gc_api_err_t *err) {
  json_object *par = field(fn, "parameters"), *strict = field(fn, "strict");
  int must = strict && json_object_is_type(strict, json_type_boolean) && json_object_get_boolean(strict);
  *out = NULL;
  if (!par) return 0;
  const char *text = json_object_to_json_string_ext(par, JSON_C_TO_STRING_PLAIN);
  gc_err_t e = {0};
  if (!gc_json_schema_new(text, strlen(text), out, &e)) return 0;
  if (e.code == GC_ENOMEM) return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  return must ? gc_api_fail(err, 400, INVALID, NULL, "tools", "tools[%zu].function.parameters (strict): %s", i, e.msg)
              : 0;
}

/* ca->call for tool_choice choice (2: any of the n tools' names, 3: named)
 * in the spelling of the template's calls: "required" one call or more
 * where the template writes several (Qwen's blocks, Mistral's array) and
 * parallel_tool_calls is not false, as vLLM allows; a named function, one
 * call (vLLM's and OpenAI's reading). */
static int forced_call(gc_api_t *a, json_object *ts, size_t n, int choice, const char *named, int parallel,
                       chat_args_t *ca, gc_api_err_t *err) {
  gc_err_t e = {0};
  if (!(ca->call = gc_calloc(1, sizeof *ca->call, &e)) ||
      !(ca->call->names = gc_calloc(n, sizeof *ca->call->names, &e)) ||
      !(ca->call->schemas = gc_calloc(n, sizeof *ca->call->schemas, &e)))
    return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  if (gc_chat_call_shape(a->tok, a->tools, ca->call, &e))
    return gc_api_fail(err, 400, INVALID, NULL, "tool_choice", "tool_choice %s: %s", choice == 2 ? "required" :
                       "naming a function", e.msg);
  if (choice == 3 || !parallel) ca->call->sep = NULL;
  for (size_t i = 0; i < n; i++) {
    json_object *fn, *name;
    json_object_object_get_ex(json_object_array_get_idx(ts, i), "function", &fn); /* checked by tool_args */
    json_object_object_get_ex(fn, "name", &name);
    const char *s = json_object_get_string(name);
    if (choice == 3 && strcmp(s, named)) continue;
    if (!forcible(s))
      return gc_api_fail(err, 400, INVALID, NULL, "tools", "tool name %s cannot be forced: 1 to %d characters, "
                         "none of them '\"', '\\' or a control character", GC_QUOTED(s), GC_JSON_NAME);
    if (call_schema(fn, i, &ca->call->schemas[ca->call->nnames], err)) return err->status;
    snprintf(ca->call->names[ca->call->nnames++], GC_JSON_NAME + 1, "%s", s);
  }
  if (!ca->call->nnames)
    return gc_api_fail(err, 400, INVALID, NULL, "tool_choice", "tool_choice names %s, which is not among the "
                       "tools", GC_QUOTED(named));
  return 0;
}

/* The request's tools into ca (as the template writes each, tojson), where
 * tool_choice lets the model call them: each {"type": "function",
 * "function": {"name": ..., ...}}, written as given. 400 for a malformed
 * list, and for tools the model's template cannot offer. */
static int tool_args(gc_api_t *a, json_object *o, chat_args_t *ca, gc_api_err_t *err) {
  json_object *ts = field(o, "tools"), *par = field(o, "parallel_tool_calls");
  const char *named = NULL;
  int choice = tool_choice(o, &named, err);
  if (choice < 0) return err->status;
  if (par && !json_object_is_type(par, json_type_boolean)) return want(err, "parallel_tool_calls", "a boolean", par);
  size_t n = ts && json_object_is_type(ts, json_type_array) ? json_object_array_length(ts) : 0;
  if (choice >= 2 && !n)
    return gc_api_fail(err, 400, INVALID, NULL, "tool_choice", "tool_choice %s needs tools", choice == 2
                       ? "\"required\"" : "naming a function");
  if (!ts || !choice) return 0;
  if (!json_object_is_type(ts, json_type_array)) return want(err, "tools", "an array", ts);
  if (!n) return 0;
  if (n > 1024) return gc_api_fail(err, 400, INVALID, NULL, "tools", "%zu tools: at most 1024", n);
  if (!a->has_chat || !a->tools)
    return gc_api_fail(err, 400, INVALID, NULL, "tools", "the model's chat template has no tool calls (gcore-serve "
                       "offers tools through Qwen2.5's, Qwen3's, Llama 3.1's and 3.2's, "
                       "and Mistral v0.3's and Nemo's templates)");
  gc_err_t e = {0};
  size_t *at = gc_calloc(n, sizeof *at, &e);
  if (!at || !(ca->tools = gc_calloc(n, sizeof *ca->tools, &e))) {
    free(at);
    return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    json_object *t = json_object_array_get_idx(ts, i), *ty, *fn, *name;
    if (!json_object_is_type(t, json_type_object) || !json_object_object_get_ex(t, "type", &ty) ||
        !json_object_is_type(ty, json_type_string) || strcmp(json_object_get_string(ty), "function") ||
        !json_object_object_get_ex(t, "function", &fn) || !json_object_is_type(fn, json_type_object) ||
        !json_object_object_get_ex(fn, "name", &name) || !json_object_is_type(name, json_type_string) ||
        !json_object_get_string_len(name)) {
      free(at);
      return gc_api_fail(err, 400, INVALID, NULL, "tools", "tools[%zu] must be {\"type\": \"function\", "
                         "\"function\": {\"name\": ..., ...}}", i);
    }
    at[i] = ca->tool_text.len;
    if (gc_chat_tool_text(a->tools, t, &ca->tool_text, &e) || gc_buf_append(&ca->tool_text, "", 1, &e)) {
      free(at);
      return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
  }
  for (size_t i = 0; i < n; i++) ca->tools[i] = ca->tool_text.data + at[i];
  ca->ntools = (int)n;
  free(at);
  return choice >= 2 ? forced_call(a, ts, n, choice, named, !par || json_object_get_boolean(par), ca, err) : 0;
}

/* /v1/completions has no tools: 400 for tools (but []) or a tool_choice
 * (but "none"). */
static int no_tools(json_object *o, gc_api_err_t *err) {
  json_object *ts = field(o, "tools"), *c = field(o, "tool_choice");
  const char *key = ts && !(json_object_is_type(ts, json_type_array) && !json_object_array_length(ts)) ? "tools"
                    : c && !(json_object_is_type(c, json_type_string) && !strcmp(json_object_get_string(c), "none"))
                        ? "tool_choice"
                        : NULL;
  return key ? gc_api_fail(err, 400, INVALID, NULL, key, "'%s' is not supported on /v1/completions: tools are a "
                           "chat's (/v1/chat/completions)", key)
             : 0;
}

/* The calls of assistant message m (its "tool_calls": each {"id",
 * "function": {"name", "arguments"}}, the arguments a JSON text as
 * OpenAI's API gives them, or an object) into calls[*n], their names,
 * arguments as the template writes them (tojson of the parsed arguments,
 * as vLLM renders them) and ids (NULL where a call has none) in text,
 * NUL-separated; *n 0 without any. */
static int message_calls(json_object *m, size_t i, gc_chat_call_t **calls, int *n, gc_buf_t *text,
                         gc_api_err_t *err) {
  json_object *tc = field(m, "tool_calls");
  *n = 0;
  text->len = 0;
  if (!tc) return 0;
  if (!json_object_is_type(tc, json_type_array)) return want(err, "messages", "tool_calls of an array", tc);
  size_t k = json_object_array_length(tc);
  if (k > 1024) return gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu]: over 1024 tool calls", i);
  gc_err_t e = {0};
  size_t *at = k ? gc_calloc(3 * k, sizeof *at, &e) : NULL;
  free(*calls);
  *calls = k ? gc_calloc(k, sizeof **calls, &e) : NULL;
  if (k && (!at || !*calls)) {
    free(at);
    return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  }
  int rc = 0;
  for (size_t j = 0; j < k && !rc; j++) {
    json_object *c = json_object_array_get_idx(tc, j), *fn = NULL, *name = NULL, *args = NULL, *parsed = NULL, *id;
    if (!json_object_is_type(c, json_type_object) || !json_object_object_get_ex(c, "function", &fn) ||
        !json_object_is_type(fn, json_type_object) || !json_object_object_get_ex(fn, "name", &name) ||
        !json_object_is_type(name, json_type_string)) {
      rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu].tool_calls[%zu] must be {\"function\": "
                       "{\"name\": ..., \"arguments\": ...}}", i, j);
      break;
    }
    json_object_object_get_ex(fn, "arguments", &args);
    if (args && json_object_is_type(args, json_type_string)) {
      enum json_tokener_error je;
      parsed = json_tokener_parse_verbose(json_object_get_string(args), &je);
      if (je != json_tokener_success) {
        rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu].tool_calls[%zu]: the arguments are not "
                         "JSON: %s", i, j, json_tokener_error_desc(je));
        break;
      }
      args = parsed;
    }
    id = field(c, "id");
    at[3 * j] = text->len;
    if (gc_buf_append(text, json_object_get_string(name), (size_t)json_object_get_string_len(name) + 1, &e) ||
        (at[3 * j + 1] = text->len, gc_pyjson(args, -1, text, &e)) || gc_buf_append(text, "", 1, &e) ||
        (at[3 * j + 2] = id ? text->len : SIZE_MAX,
         id && gc_buf_append(text, json_object_get_string(id), strlen(json_object_get_string(id)) + 1, &e)))
      rc = gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    json_object_put(parsed);
  }
  for (size_t j = 0; !rc && j < k; j++)
    (*calls)[j] = (gc_chat_call_t){text->data + at[3 * j], text->data + at[3 * j + 1],
                                   at[3 * j + 2] == SIZE_MAX ? NULL : text->data + at[3 * j + 2]};
  if (!rc) *n = (int)k;
  free(at);
  return rc;
}

/* Whether user message m is a query to Qwen3's templates: not a tool's
 * result passed as a user message (<tool_response>...</tool_response>). */
static int is_query(json_object *m) {
  json_object *c = field(m, "content");
  if (!c || !json_object_is_type(c, json_type_string)) return 1;
  const char *s = json_object_get_string(c);
  size_t n = (size_t)json_object_get_string_len(c);
  return !(n >= 15 + 16 && !strncmp(s, "<tool_response>", 15) && !strcmp(s + n - 16, "</tool_response>"));
}

/* The role of message i of msgs (NULL where it has none). */
static const char *role_of(json_object *msgs, size_t i) {
  json_object *m = json_object_array_get_idx(msgs, i), *r;
  return json_object_is_type(m, json_type_object) && json_object_object_get_ex(m, "role", &r) &&
                 json_object_is_type(r, json_type_string)
             ? json_object_get_string(r)
             : NULL;
}

/* A chat_prompt failure of the template (e) as the API's error. */
static int template_fail(const gc_err_t *e, gc_api_err_t *err) {
  return e->code == GC_EINVAL ? gc_api_fail(err, 400, INVALID, NULL, "messages", "%s", e->msg)
                              : gc_api_fail(err, 500, "server_error", NULL, NULL, "the chat template failed: %s", e->msg);
}

/* The chat's ids: system (or developer) first if any, then user and
 * assistant turns (with their tool calls) and tool results, the last a
 * user turn or a tool's result, through the model's template (gc_chat_t;
 * the system message with the first user message, or with the last where
 * the template puts it there; ca's tools in it), then the reply's header
 * (ca->think_off: enable_thinking false). */
static int chat_prompt(gc_api_t *a, json_object *msgs, const chat_args_t *ca, gc_tok_ids_t *ids, gc_api_err_t *err) {
  if (!msgs) return gc_api_fail(err, 400, INVALID, NULL, "messages", "'messages' is required");
  if (!json_object_is_type(msgs, json_type_array)) return want(err, "messages", "an array", msgs);
  size_t n = json_object_array_length(msgs), last_query = 0;
  if (!n) return gc_api_fail(err, 400, INVALID, NULL, "messages", "'messages' is empty");
  if (!a->has_chat) return gc_api_fail(err, 400, INVALID, NULL, "messages", "%s", a->chat_why);
  size_t last_user_msg = 0;
  for (size_t i = 0; i < n; i++) /* Qwen3's last_query_index: the last user message that is a query */
    if (role_of(msgs, i) && !strcmp(role_of(msgs, i), "user")) {
      last_user_msg = i;
      if (is_query(json_object_array_get_idx(msgs, i))) last_query = i;
    }
  gc_buf_t text = {0}, system = {0}, call_text = {0};
  gc_chat_call_t *calls = NULL;
  int rc = 0, have_system = 0, users = 0, last_user = 0, ncalls = 0;
  gc_err_t e = {0};
  gc_chat_t conv;
  pthread_mutex_lock(&a->tok_mu);
  gc_chat_init(&conv, a->tok, a->chat);
  conv.think_off = ca->think_off;
  if (ca->date && gc_chat_date(&conv, ca->date, &e)) rc = gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  conv.tools = (const char *const *)ca->tools;
  int tools_last = gc_chat_system_last(a->chat); /* Mistral's: the tools with the last user message */
  conv.ntools = tools_last ? 0 : ca->ntools;
  for (size_t i = 0; i < n && !rc; i++) {
    json_object *m = json_object_array_get_idx(msgs, i), *reasoning, *call_id;
    if (!json_object_is_type(m, json_type_object)) {
      rc = want(err, "messages", "an array of objects", m);
      break;
    }
    const char *r = role_of(msgs, i);
    if (!r) {
      rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu] has no 'role' string", i);
      break;
    }
    if ((rc = content_text(m, &text, err))) break;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) {
      if (i) rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "a system message must come first");
      else if (gc_buf_append(&system, text.data, text.len + 1, &e))
        rc = gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
      else have_system = 1;
      last_user = 0;
    } else if (!strcmp(r, "user")) {
      int with_system = have_system && (gc_chat_system_last(a->chat) ? i == n - 1 : !users);
      if (tools_last) conv.ntools = i == last_user_msg ? ca->ntools : 0;
      if (gc_chat_user(&conv, with_system ? system.data : NULL, text.data, ids, &e)) rc = template_fail(&e, err);
      users++, last_user = 1;
    } else if (!strcmp(r, "assistant")) {
      if (!users) {
        rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "an assistant message before any user message");
        break;
      }
      reasoning = field(m, "reasoning_content");
      if (reasoning && !json_object_is_type(reasoning, json_type_string))
        rc = want(err, "messages", "a reasoning_content of a string", reasoning);
      if (!rc) rc = message_calls(m, i, &calls, &ncalls, &call_text, err);
      if (!rc && gc_chat_reply(&conv, text.data, reasoning ? json_object_get_string(reasoning) : NULL,
                               i > last_query, calls, ncalls, ids, &e))
        rc = template_fail(&e, err);
      last_user = 0;
    } else if (!strcmp(r, "tool")) {
      if (!users) rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "a tool message before any user message");
      else if ((call_id = field(m, "tool_call_id")) && !json_object_is_type(call_id, json_type_string))
        rc = want(err, "messages", "a tool_call_id of a string", call_id);
      else if (gc_chat_tool_result(&conv, text.data, call_id ? json_object_get_string(call_id) : NULL, ids, &e))
        rc = template_fail(&e, err);
      last_user = 1;
    } else {
      rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu]: role '%.40s' is not one of system, "
                       "developer, user, assistant, tool", i, r);
    }
  }
  if (!rc && last_user && (gc_chat_assistant(&conv, NULL, ids, &e) || gc_chat_flush(&conv, ids, &e)))
    rc = gc_api_fail(err, 500, "server_error", NULL, NULL, "the chat template failed: %s", e.msg);
  gc_chat_free(&conv);
  pthread_mutex_unlock(&a->tok_mu);
  if (!rc && !last_user)
    rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "the last message must be the user's or a tool's");
  gc_buf_free(&text);
  gc_buf_free(&system);
  gc_buf_free(&call_text);
  free(calls);
  return rc;
}

/* stop: a string or an array of up to 4 non-empty strings. */
static int stops(json_object *o, gc_srv_params_t *p, gc_api_err_t *err) {
  json_object *v = field(o, "stop");
  if (!v) return 0;
  int arr = json_object_is_type(v, json_type_array);
  size_t n = arr ? json_object_array_length(v) : 1;
  if (!arr && !json_object_is_type(v, json_type_string)) return want(err, "stop", "a string or an array of strings", v);
  if (n > GC_SRV_MAX_STOP)
    return gc_api_fail(err, 400, INVALID, NULL, "stop", "at most %d stop sequences", GC_SRV_MAX_STOP);
  for (size_t i = 0; i < n; i++) {
    json_object *s = arr ? json_object_array_get_idx(v, i) : v;
    if (!json_object_is_type(s, json_type_string)) return want(err, "stop", "a string or an array of strings", s);
    size_t len = (size_t)json_object_get_string_len(s);
    if (!len || len > GC_SRV_STOP_LEN || memchr(json_object_get_string(s), 0, len))
      return gc_api_fail(err, 400, INVALID, NULL, "stop", "a stop sequence has 1 to %d bytes and no NUL",
                         GC_SRV_STOP_LEN);
    gc_err_t e = {0};
    if (!(p->stop[p->nstop] = gc_strdup(json_object_get_string(s), &e)))
      return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    p->nstop++;
  }
  return 0;
}

static uint64_t random_seed(void) {
  static uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
         (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull);
}

/* stop_token_ids (vLLM's): ids of the vocabulary, at most GC_SRV_MAX_STOP_IDS. */
static int stop_ids(const gc_api_t *a, json_object *o, gc_srv_params_t *p, gc_api_err_t *err) {
  json_object *v = field(o, "stop_token_ids");
  if (!v) return 0;
  if (!json_object_is_type(v, json_type_array)) return want(err, "stop_token_ids", "an array of token ids", v);
  size_t n = json_object_array_length(v);
  if (n > GC_SRV_MAX_STOP_IDS)
    return gc_api_fail(err, 400, INVALID, NULL, "stop_token_ids", "at most %d stop token ids", GC_SRV_MAX_STOP_IDS);
  for (size_t i = 0; i < n; i++) {
    json_object *x = json_object_array_get_idx(v, i);
    if (!json_object_is_type(x, json_type_int)) return want(err, "stop_token_ids", "an array of token ids", x);
    int64_t id = json_object_get_int64(x);
    if (id < 0 || id >= a->vocab)
      return gc_api_fail(err, 400, INVALID, NULL, "stop_token_ids", "token id %lld is outside the vocabulary "
                         "[0, %d)", (long long)id, a->vocab);
    p->stop_ids[p->nstop_ids++] = (int32_t)id;
  }
  return 0;
}

/* The repetition penalty of gcore-run --repeat-penalty (1: off), as vLLM's
 * repetition_penalty or llama.cpp's repeat_penalty (both given: equal), over
 * llama.cpp's repeat_last_n tokens (-1: the context; 0: none). The window
 * defaults to llama.cpp's 64 where repeat_penalty is given, to the whole
 * context (vLLM's: prompt and output) where only repetition_penalty is. */
static int penalty(const gc_api_t *a, const body_t *b, gc_sampler_params_t *sp, gc_api_err_t *err) {
  double vllm = 1.0, cpp = 1.0;
  int has_cpp = field(b->o, "repeat_penalty") != NULL, has_vllm = field(b->o, "repetition_penalty") != NULL;
  int64_t last_n = has_vllm && !has_cpp ? -1 : 64;
  if (num(b, "repetition_penalty", 0.01, 100, &vllm, err) || num(b, "repeat_penalty", 0.01, 100, &cpp, err) ||
      integer(b, "repeat_last_n", -1, 1 << 20, &last_n, err))
    return err->status;
  if (has_cpp && has_vllm && vllm != cpp)
    return gc_api_fail(err, 400, INVALID, NULL, "repeat_penalty", "'repetition_penalty' (%.17g) and "
                       "'repeat_penalty' (%.17g) are both given and different: they are one penalty", vllm, cpp);
  sp->repeat_penalty = (float)(has_cpp ? cpp : vllm);
  sp->repeat_last_n = last_n < 0 ? a->ctx : (int)last_n;
  return 0;
}

/* vLLM's allowed_token_ids (the only ids drawn), OpenAI's logit_bias
 * ({"id": bias, ...}: at most GC_SRV_MAX_BIAS ids of the vocabulary, each
 * bias from -100 to 100, added to its logit before the draw) and its
 * presence and frequency penalties (-2 to 2). */
static int biases(const gc_api_t *a, const body_t *b, gc_srv_params_t *p, gc_api_err_t *err) {
  double pres = 0, freq = 0;
  if (num(b, "presence_penalty", -2, 2, &pres, err) || num(b, "frequency_penalty", -2, 2, &freq, err))
    return err->status;
  p->presence = (float)pres, p->frequency = (float)freq;
  json_object *al = field(b->o, "allowed_token_ids");
  if (al && !json_object_is_type(al, json_type_null)) {
    size_t n = json_object_is_type(al, json_type_array) ? json_object_array_length(al) : 0;
    if (!n) return want(err, "allowed_token_ids", "a non-empty array of token ids", al);
    gc_err_t e = {0};
    if (!(p->allowed = gc_malloc(n * sizeof *p->allowed, &e)))
      return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
      json_object *v = json_object_array_get_idx(al, i);
      int64_t id = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : -1;
      if (id < 0 || id >= a->vocab)
        return gc_api_fail(err, 400, INVALID, NULL, "allowed_token_ids", "allowed_token_ids[%zu] is not a token id "
                           "(0 to %d)", i, a->vocab - 1);
      p->allowed[p->nallowed++] = (int32_t)id;
    }
  }
  json_object *lb = field(b->o, "logit_bias");
  if (!lb) return 0;
  if (!json_object_is_type(lb, json_type_object)) return want(err, "logit_bias", "an object of token ids", lb);
  if (json_object_object_length(lb) > GC_SRV_MAX_BIAS)
    return gc_api_fail(err, 400, INVALID, NULL, "logit_bias", "'logit_bias' has %d ids: at most %d",
                       json_object_object_length(lb), GC_SRV_MAX_BIAS);
  json_object_object_foreach(lb, key, v) {
    char *end;
    errno = 0;
    long id = strtol(key, &end, 10);
    if (!*key || *end || errno || id < 0 || id >= a->vocab)
      return gc_api_fail(err, 400, INVALID, NULL, "logit_bias", "logit_bias key %s is not a token id (0 to %d)",
                         GC_QUOTED(key), a->vocab - 1);
    if (!is_number(v) || !(json_object_get_double(v) >= -100 && json_object_get_double(v) <= 100))
      return gc_api_fail(err, 400, INVALID, NULL, "logit_bias", "logit_bias of %ld must be a number from -100 "
                         "to 100", id);
    p->bias_ids[p->nbias] = (int32_t)id, p->bias[p->nbias++] = (float)json_object_get_double(v);
  }
  return 0;
}

/* Log-probabilities: a chat's "logprobs": true with "top_logprobs" N (0 ..
 * GC_LOGPROBS_MAX), a completion's "logprobs": N (false or null: none),
 * and with it "echo": true the prompt's too. They name tokens by their text: a server without a
 * tokenizer refuses them. */
static int logprobs(const gc_api_t *a, const body_t *b, int chat, gc_srv_params_t *p, gc_api_req_t *q,
                    gc_api_err_t *err) {
  int on = 0;
  int64_t n = chat ? 0 : -1;
  if (chat) {
    if (boolean(b->o, "logprobs", &on, err) || integer(b, "top_logprobs", 0, GC_LOGPROBS_MAX, &n, err))
      return err->status;
    if (field(b->o, "top_logprobs") && !on)
      return gc_api_fail(err, 400, INVALID, NULL, "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
    int echo = 0;
    if (boolean(b->o, "echo", &echo, err)) return err->status;
    if (echo) return gc_api_fail(err, 400, INVALID, NULL, "echo", "'echo' is a field of /v1/completions");
  } else {
    json_object *v = field(b->o, "logprobs");
    int off = v && json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v); /* false: none */
    if ((!off && integer(b, "logprobs", 0, GC_LOGPROBS_MAX, &n, err)) || boolean(b->o, "echo", &q->echo, err))
      return err->status;
    if (field(b->o, "top_logprobs"))
      return gc_api_fail(err, 400, INVALID, NULL, "top_logprobs", "'top_logprobs' is a field of chat completions; "
                         "a completion's 'logprobs' is the number of most likely tokens");
    on = n >= 0;
  }
  if (on && !a->tok)
    return gc_api_fail(err, 400, INVALID, NULL, "logprobs", "this server has no tokenizer: logprobs name tokens "
                       "by their text");
  if (q->echo && !a->tok)
    return gc_api_fail(err, 400, INVALID, NULL, "echo", "this server has no tokenizer to write the prompt's text");
  p->logprobs = on ? (int)n : -1;
  p->prompt_logprobs = on && q->echo;
  return 0;
}

/* The JSON Schema sch (an object, or its JSON text: vLLM's guided_json
 * takes both) given as request field key, as p->schema: a reference to
 * *once, compiled there by the first choice that asks (a request has one
 * schema; a failed compile leaves *once NULL and fails the request). */
static int schema_of(const char *key, json_object *sch, gc_json_schema_t **once, gc_srv_params_t *p,
                     gc_api_err_t *err) {
  if (*once) return p->schema = gc_json_schema_ref(*once), 0;
  const char *text;
  size_t len;
  if (json_object_is_type(sch, json_type_string)) {
    text = json_object_get_string(sch), len = (size_t)json_object_get_string_len(sch);
  } else if (json_object_is_type(sch, json_type_object)) {
    text = json_object_to_json_string_ext(sch, JSON_C_TO_STRING_PLAIN), len = strlen(text);
  } else {
    return want(err, key, "a JSON Schema (an object)", sch);
  }
  gc_err_t e = {0};
  if (gc_json_schema_new(text, len, once, &e))
    return e.code == GC_ENOMEM ? gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory")
                               : gc_api_fail(err, 400, INVALID, NULL, key, "%s", e.msg);
  p->schema = gc_json_schema_ref(*once);
  return 0;
}

/* vLLM's guided_regex: pattern rx (a string; regex.h's subset) that the
 * whole reply matches, given as request field key, compiled once a
 * request (*once) into p->regex. */
static int regex_of(const char *key, json_object *rx, gc_json_regex_t **once, gc_srv_params_t *p, gc_api_err_t *err) {
  if (!*once) {
    if (!json_object_is_type(rx, json_type_string)) return want(err, key, "a string (a pattern)", rx);
    gc_err_t e = {0};
    if (gc_json_regex_new(json_object_get_string(rx), (size_t)json_object_get_string_len(rx), once, &e))
      return e.code == GC_ENOMEM ? gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory")
                                 : gc_api_fail(err, 400, INVALID, NULL, key, "%s: %s", key, e.msg);
  }
  p->regex = gc_json_regex_ref(*once);
  return 0;
}

/* vLLM's guided_choice: ch, an array of 1 .. GC_JSON_CHOICES distinct
 * strings of 1 .. GC_JSON_CHOICE_LEN bytes, into p->choice. */
static int choices_of(json_object *ch, gc_srv_params_t *p, gc_api_err_t *err) {
  size_t n = json_object_is_type(ch, json_type_array) ? json_object_array_length(ch) : 0;
  if (!n || n > GC_JSON_CHOICES)
    return want(err, "guided_choice", "an array of 1 to 64 strings", ch);
  gc_err_t e = {0};
  if (!(p->choice.s = gc_calloc(n, sizeof *p->choice.s, &e)) || !(p->choice.len = gc_calloc(n, sizeof *p->choice.len, &e)))
    return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_object *x = json_object_array_get_idx(ch, i);
    size_t len = json_object_is_type(x, json_type_string) ? (size_t)json_object_get_string_len(x) : 0;
    if (!len || len > GC_JSON_CHOICE_LEN)
      return gc_api_fail(err, 400, INVALID, NULL, "guided_choice", "guided_choice[%zu] is not a string of 1 to %d "
                         "bytes", i, GC_JSON_CHOICE_LEN);
    for (int j = 0; j < p->choice.n; j++)
      if (p->choice.len[j] == len && !memcmp(p->choice.s[j], json_object_get_string(x), len))
        return gc_api_fail(err, 400, INVALID, NULL, "guided_choice", "guided_choice[%zu] repeats [%d]", i, j);
    if (!(p->choice.s[i] = gc_malloc(len, &e))) return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    memcpy(p->choice.s[i], json_object_get_string(x), len);
    p->choice.len[i] = len, p->choice.n++;
  }
  return 0;
}

/* vLLM's structured_outputs (its newer spelling of the guided_* fields):
 * an object with one of json (a schema), regex, choice, json_object
 * (true), the others null or absent; its backend's options (whitespace,
 * fallback) change nothing here; grammar and structural_tag are refused.
 * Into *json, *rx, *choice, *jobj. */
static int structured_outputs(json_object *so, json_object **json, json_object **rx, json_object **choice, int *jobj,
                              gc_api_err_t *err) {
  static const char *const OPTIONS[] = {"disable_fallback", "disable_any_whitespace", "disable_additional_properties",
                                        "whitespace_pattern", "_backend", "_backend_was_auto", NULL};
  if (!json_object_is_type(so, json_type_object)) return want(err, "structured_outputs", "an object", so);
  int n = 0;
  json_object_object_foreach(so, k, v) {
    if (!v) continue;
    int opt = 0;
    for (int i = 0; OPTIONS[i]; i++) opt |= !strcmp(k, OPTIONS[i]);
    if (opt) continue;
    if (!strcmp(k, "json")) *json = v, n++;
    else if (!strcmp(k, "regex")) *rx = v, n++;
    else if (!strcmp(k, "choice")) *choice = v, n++;
    else if (!strcmp(k, "json_object") && json_object_is_type(v, json_type_boolean)) n += *jobj = json_object_get_boolean(v);
    else if (!strcmp(k, "grammar") || !strcmp(k, "structural_tag"))
      return gc_api_fail(err, 400, INVALID, NULL, "structured_outputs", "structured_outputs.%s is not supported: no "
                         "grammar-constrained decoding (give json, regex, choice or json_object)", k);
    else
      return gc_api_fail(err, 400, INVALID, NULL, "structured_outputs", "structured_outputs.%.64s: give json, regex, "
                         "choice or json_object", k);
  }
  if (n != 1) return gc_api_fail(err, 400, INVALID, NULL, "structured_outputs", "structured_outputs: give one of json, "
                                 "regex, choice and json_object");
  return 0;
}

/* response_format: {"type": "text"} (or none) as it is; {"type":
 * "json_object"} JSON mode (p->json), which ends the reply when the object
 * ends, so not with ignore_eos; {"type": "json_schema", "json_schema":
 * {"schema": S, ...}} (OpenAI's structured outputs), vLLM's guided_json: S
 * or llama.cpp's json_schema: S: JSON mode under schema S (p->schema,
 * compiled once a request: b->schema). */
static int response_format(const gc_api_t *a, body_t *b, gc_srv_params_t *p, gc_api_err_t *err) {
  json_object *o = b->o, *f = field(o, "response_format"), *t, *js = NULL, *sch = NULL;
  json_object *guided = field(o, "guided_json"), *lcpp = field(o, "json_schema"), *choice = field(o, "guided_choice");
  json_object *rx = field(o, "guided_regex"), *so = field(o, "structured_outputs");
  const char *key = guided ? "guided_json" : lcpp ? "json_schema" : choice ? "guided_choice" : "guided_regex";
  if (f && (!json_object_is_type(f, json_type_object) || !json_object_object_get_ex(f, "type", &t) ||
            !json_object_is_type(t, json_type_string)))
    return want(err, "response_format", "an object with a string \"type\"", f);
  const char *type = f ? json_object_get_string(t) : "text";
  if (so) { /* vLLM's newer spelling: as the field it names */
    int jobj = 0;
    if (f || guided || lcpp || choice || rx)
      return gc_api_fail(err, 400, INVALID, NULL, "structured_outputs", "give one of response_format, guided_json, "
                         "json_schema, guided_choice, guided_regex and structured_outputs");
    if (structured_outputs(so, &guided, &rx, &choice, &jobj, err)) return err->status;
    key = "structured_outputs", type = jobj ? "json_object" : "text";
  }
  if (!strcmp(type, "text") && !guided && !lcpp && !choice && !rx) return 0;
  if (!!strcmp(type, "text") + !!guided + !!lcpp + !!choice + !!rx > 1)
    return gc_api_fail(err, 400, INVALID, NULL, key, "give one of response_format, guided_json, json_schema, "
                       "guided_choice and guided_regex");
  if (!a->tok)
    return gc_api_fail(err, 400, INVALID, NULL, guided || lcpp || choice || rx ? key : "response_format",
                       "this server has no tokenizer: JSON mode reads each token's text");
  if ((choice || rx) && p->ignore_eos)
    return gc_api_fail(err, 400, INVALID, NULL, "ignore_eos", "%s ends the reply with its %s: ignore_eos cannot be "
                       "on", key, choice ? "choice" : "match");
  if (choice) return choices_of(choice, p, err) ? err->status : (p->json = 1, 0);
  if (rx) return regex_of(key, rx, &b->regex, p, err) ? err->status : (p->json = 1, 0);
  if (strcmp(type, "text") && strcmp(type, "json_object") && strcmp(type, "json_schema"))
    return gc_api_fail(err, 400, INVALID, NULL, "response_format",
                       "response_format type %s: \"text\", \"json_object\" or \"json_schema\"", GC_QUOTED(type));
  if (!strcmp(type, "json_schema")) {
    if (!json_object_object_get_ex(f, "json_schema", &js) || !json_object_is_type(js, json_type_object) ||
        !json_object_object_get_ex(js, "schema", &sch) || !json_object_is_type(sch, json_type_object))
      return gc_api_fail(err, 400, INVALID, NULL, "response_format",
                         "response_format json_schema: {\"json_schema\": {\"name\": ..., \"schema\": {...}}}");
    key = "response_format";
  }
  if (p->ignore_eos)
    return gc_api_fail(err, 400, INVALID, NULL, "ignore_eos",
                       "JSON mode ends the reply when its object ends: ignore_eos cannot be on");
  if ((sch || guided || lcpp) && schema_of(key, sch ? sch : guided ? guided : lcpp, &b->schema, p, err))
    return err->status;
  p->json = 1;
  return 0;
}

/* Sampling and limits of a prompt of nprompt ids. OpenAI's defaults:
 * temperature 1, top_p 1; no top-k (0 or vLLM's -1: off) or min-p unless
 * asked (llama.cpp's top_k, min_p); a random seed unless one is given
 * (-1: llama.cpp's random), and a given seed plus choice for the choice-th
 * choice of the prompt (n). */
static int params(gc_api_t *a, body_t *b, int chat, int nprompt, int choice, gc_srv_params_t *p,
                  gc_api_req_t *q, gc_api_err_t *err) {
  json_object *o = b->o;
  double temp = 1.0, top_p = 1.0, min_p = 0.0;
  int64_t top_k = 0, seed = -1, max = -1, min_tokens = 0;
  gc_sampler_params_default(&p->sp);
  if (unsupported(o, err) || num(b, "temperature", 0, 2, &temp, err) || num(b, "top_p", 0, 1, &top_p, err) ||
      num(b, "min_p", 0, 1, &min_p, err) || integer(b, "top_k", -1, INT32_MAX, &top_k, err) ||
      integer(b, "seed", INT64_MIN, INT64_MAX, &seed, err) || boolean(o, "ignore_eos", &p->ignore_eos, err) ||
      boolean(o, "cache_prompt", &p->cache_prompt, err) ||
      penalty(a, b, &p->sp, err) || stops(o, p, err) || stop_ids(a, o, p, err) ||
      integer(b, "min_tokens", 0, INT32_MAX, &min_tokens, err) || logprobs(a, b, chat, p, q, err) ||
      response_format(a, b, p, err) || biases(a, b, p, err))
    return err->status;
  /* max_completion_tokens wins over max_tokens, as OpenAI's; both are
   * checked; 0 only with echo (the prompt's logprobs alone, as OpenAI's and
   * vLLM's) */
  int64_t legacy = -1, least = q->echo ? 0 : 1;
  const char *mkey = field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (integer(b, "max_tokens", least, INT32_MAX, &legacy, err) ||
      integer(b, "max_completion_tokens", least, INT32_MAX, &max, err))
    return err->status;
  if (max < 0) max = legacy;
  if (top_p <= 0) return gc_api_fail(err, 400, INVALID, NULL, "top_p", "'top_p' must be above 0");
  if (nprompt >= a->ctx)
    return gc_api_fail(err, 400, INVALID, "context_length_exceeded", chat ? "messages" : "prompt",
                       "This model's maximum context length is %d tokens. However, your %s resulted in %d "
                       "tokens.", a->ctx, chat ? "messages" : "prompt", nprompt);
  if (max > 0 && nprompt + max > a->ctx)
    return gc_api_fail(err, 400, INVALID, "context_length_exceeded", mkey,
                       "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                       "(%d in the %s, %lld in the completion).", a->ctx, (long long)(nprompt + max), nprompt,
                       chat ? "messages" : "prompt", (long long)max);
  /* default: OpenAI's 16 for completions, the rest of the context for chats */
  p->max_tokens = max >= 0 ? (int)max : chat || a->ctx - nprompt < 16 ? a->ctx - nprompt : 16;
  if (min_tokens > p->max_tokens)
    return gc_api_fail(err, 400, INVALID, NULL, "min_tokens", "'min_tokens' (%lld) is more than max_tokens (%d)",
                       (long long)min_tokens, p->max_tokens);
  p->min_tokens = (int)min_tokens;
  p->sp.temperature = (float)temp;
  p->sp.top_p = (float)top_p;
  p->sp.min_p = (float)min_p;
  p->sp.top_k = top_k < 0 ? 0 : (int)top_k;
  p->sp.seed = field(o, "seed") && seed != -1 ? (uint64_t)seed + (uint64_t)choice : random_seed();
  return 0;
}

/* The text echo sends before the completion: a string prompt as given, a
 * prompt of ids decoded (control tokens left out,
 * as the completion's text). */
static int echo_text(gc_api_t *a, json_object *p, const gc_tok_ids_t *ids, gc_srv_req_t *r, gc_api_err_t *err) {
  gc_buf_t text = {0};
  gc_err_t e = {0};
  int rc = json_object_is_type(p, json_type_string)
               ? gc_buf_append(&text, json_object_get_string(p), (size_t)json_object_get_string_len(p), &e)
               : gc_tok_decode(a->tok, ids->v, ids->n, GC_TOK_SKIP_SPECIAL, &text, &e);
  if (rc) {
    gc_buf_free(&text);
    return e.code == GC_EINVAL ? gc_api_fail(err, 400, INVALID, NULL, "echo", "the prompt cannot be echoed: %s", e.msg)
                               : gc_api_fail(err, 500, "server_error", NULL, NULL, "the prompt's text: %s", e.msg);
  }
  r->echo = text.data, r->necho = text.len;
  return 0;
}

/* Every user, system or developer message has its content (a missing or
 * null content is an error there; an assistant's may be left out). */
static int contents_given(json_object *msgs, gc_api_err_t *err) {
  if (!msgs || !json_object_is_type(msgs, json_type_array)) return 0; /* chat_prompt says why */
  for (size_t i = 0; i < json_object_array_length(msgs); i++) {
    json_object *m = json_object_array_get_idx(msgs, i), *role;
    if (!json_object_is_type(m, json_type_object) || !json_object_object_get_ex(m, "role", &role) ||
        !json_object_is_type(role, json_type_string))
      continue;
    const char *r = json_object_get_string(role);
    if ((!strcmp(r, "user") || !strcmp(r, "system") || !strcmp(r, "developer")) && !field(m, "content"))
      return gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu] (%s) has no 'content'", i, r);
  }
  return 0;
}

/* The body [n] as JSON into *out (NULL: JSON's null). Returns 0, or
 * err->status (malformed JSON, text after the value). */
static int parse_json(const char *body, size_t n, json_object **out, gc_api_err_t *err) {
  *out = NULL;
  json_tokener *tk = json_tokener_new_ex(JSON_DEPTH);
  if (!tk) return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  json_tokener_set_flags(tk, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
  json_object *o = json_tokener_parse_ex(tk, body, (int)n);
  enum json_tokener_error je = json_tokener_get_error(tk);
  size_t end = json_tokener_get_parse_end(tk);
  int whole = je == json_tokener_success;
  if (je == json_tokener_continue && end == n) { /* a number or literal at the very end: a NUL ends it */
    o = json_tokener_parse_ex(tk, "", 1);
    whole = json_tokener_get_error(tk) == json_tokener_success;
  }
  json_tokener_free(tk);
  while (whole && end < n && strchr(" \t\r\n", body[end]) && body[end]) end++;
  if (!whole || end < n) {
    json_object_put(o);
    if (whole) return gc_api_fail(err, 400, INVALID, NULL, NULL, "the body is not valid JSON: text after the "
                                  "value at byte %zu", end);
    return gc_api_fail(err, 400, INVALID, NULL, NULL, "the body is not valid JSON: %s at byte %zu",
                       je == json_tokener_continue ? "it ends early" : json_tokener_error_desc(je), end);
  }
  *out = o;
  return 0;
}

/* body [n bytes] as a JSON object into *o (the caller puts it), or err:
 * too large, not JSON, not an object (*o NULL then). */
static int object_body(const char *body, size_t n, json_object **o, gc_api_err_t *err) {
  *o = NULL;
  if (n > INT32_MAX) return gc_api_fail(err, 413, INVALID, NULL, NULL, "the request body is too large");
  if (parse_json(body, n, o, err)) return err->status;
  if (json_object_is_type(*o, json_type_object)) return 0;
  gc_api_fail(err, 400, INVALID, NULL, NULL, "the request body must be a JSON object, not %s",
              *o ? type_name(*o) : "null");
  json_object_put(*o);
  *o = NULL;
  return err->status;
}

/* n (choices of each prompt) and best_of (vLLM's: as many sampled as
 * returned, so only n itself), into q->n. */
static int choices(const body_t *b, gc_api_req_t *q, gc_api_err_t *err) {
  int64_t n = 1, best = -1;
  if (integer(b, "n", 1, GC_API_MAX_CHOICES, &n, err) || integer(b, "best_of", 1, GC_API_MAX_CHOICES, &best, err))
    return err->status;
  if (best >= 0 && best != n)
    return gc_api_fail(err, 400, INVALID, NULL, "best_of", "'best_of' (%lld) must equal n (%lld): every choice "
                       "sampled is returned", (long long)best, (long long)n);
  q->n = (int)n;
  return 0;
}

/* The requests of prompt ps (its ids moved into the first) and its q->n
 * choices, at rs[at, at + q->n), each its own params (a given seed plus
 * the choice's number; the request's one schema, b->schema, referenced). */
static int prompt_requests(gc_api_t *a, body_t *b, int chat, prompt_t *ps, const gc_api_req_t *q,
                           const gc_json_call_t *call, gc_srv_req_t **rs, int at, gc_api_err_t *err) {
  gc_err_t e = {0};
  for (int j = 0; j < q->n; j++) {
    gc_srv_req_t *r = rs[at + j] = gc_srv_req_new_in(at + j ? rs[0] : NULL, &e);
    if (!r) return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    r->index = at + j;
    if (params(a, b, chat, (int)ps->ids.n, j, &r->p, (gc_api_req_t *)q, err)) return err->status;
    if (call && (r->p.json || r->p.ignore_eos))
      return gc_api_fail(err, 400, INVALID, NULL, "tool_choice", "tool_choice forces tool calls, which end the "
                         "reply: not with %s", r->p.json ? "response_format, guided_json, json_schema, guided_choice or "
                         "guided_regex" : "ignore_eos");
    if (call) { /* a copy: its names, its schemas' references */
      gc_json_call_t *c = r->p.call = gc_calloc(1, sizeof *call, &e);
      char(*names)[GC_JSON_NAME + 1] = c ? gc_malloc((size_t)call->nnames * sizeof *names, &e) : NULL;
      gc_json_schema_t **schemas = names ? gc_calloc((size_t)call->nnames, sizeof *schemas, &e) : NULL;
      if (!schemas) {
        free(names);
        return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
      }
      *c = *call, c->names = names, c->schemas = schemas;
      memcpy(names, call->names, (size_t)call->nnames * sizeof *names);
      for (int i = 0; call->schemas && i < call->nnames; i++) schemas[i] = gc_json_schema_ref(call->schemas[i]);
      r->p.json = 1;
    }
    if (q->echo && echo_text(a, ps->json, &ps->ids, r, err)) return err->status;
    r->p.chat_end = chat ? a->chat_end : -1;
    r->nprompt = (int)ps->ids.n;
    if (j == q->n - 1) { /* the last takes the ids, the others copies */
      r->prompt = ps->ids.v, ps->ids = (gc_tok_ids_t){0};
    } else if (!(r->prompt = gc_malloc(ps->ids.n * sizeof *r->prompt, &e))) {
      return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    } else {
      memcpy(r->prompt, ps->ids.v, ps->ids.n * sizeof *r->prompt);
    }
  }
  return 0;
}

int gc_api_parse(gc_api_t *a, int chat, const char *body, size_t n, gc_api_req_t *q, gc_srv_req_t ***out, int *nout,
                 gc_api_err_t *err) {
  memset(q, 0, sizeof *q);
  *out = NULL, *nout = 0;
  q->chat = chat;
  json_object *o = NULL;
  int rc = object_body(body, n, &o, err);
  body_t b = {o, body, n, NULL, NULL};
  json_object *model = rc ? NULL : field(o, "model"), *so;
  if (!rc && model && !json_object_is_type(model, json_type_string)) rc = want(err, "model", "a string", model);
  if (!rc && model && strcmp(json_object_get_string(model), a->model_id))
    rc = gc_api_fail(err, 404, INVALID, "model_not_found", "model", "The model '%.100s' does not exist; this "
                     "server serves '%s'", json_object_get_string(model), a->model_id);
  if (!rc) rc = boolean(o, "stream", &q->stream, err) || boolean(o, "return_token_ids", &q->return_ids, err)
                    ? err->status : 0;
  if (!rc && (so = field(o, "stream_options"))) {
    if (!json_object_is_type(so, json_type_object)) rc = want(err, "stream_options", "an object", so);
    else if (!q->stream)
      rc = gc_api_fail(err, 400, INVALID, NULL, "stream_options", "'stream_options' is only allowed with "
                       "\"stream\": true");
    else if (boolean(so, "include_usage", &q->include_usage, err)) rc = err->status;
  }
  prompt_t ps[GC_API_MAX_CHOICES] = {0};
  int np = 0;
  if (!rc && chat) rc = contents_given(field(o, "messages"), err);
  chat_args_t ca = {0};
  if (!rc && chat) rc = template_kwargs(o, &ca, err) || tool_args(a, o, &ca, err) ? err->status : 0;
  if (!rc && chat) np = 1, rc = chat_prompt(a, field(o, "messages"), &ca, &ps[0].ids, err);
  q->tools = ca.ntools > 0;
  gc_json_call_t *call = ca.call; /* kept for the requests */
  ca.call = NULL;
  chat_args_free(&ca);
  if (!rc && !chat) rc = no_tools(o, err);
  if (!rc && !chat) rc = completion_prompts(a, field(o, "prompt"), ps, &np, err);
  if (!rc && !ps[0].ids.n) rc = gc_api_fail(err, 400, INVALID, NULL, chat ? "messages" : "prompt", "the prompt has no tokens");
  if (!rc) rc = choices(&b, q, err);
  if (!rc && np * q->n > GC_API_MAX_CHOICES)
    rc = gc_api_fail(err, 400, INVALID, NULL, "n", "%d prompts of %d choices: at most %d choices a request", np, q->n,
                     GC_API_MAX_CHOICES);
  gc_srv_req_t **rs = NULL;
  gc_err_t e = {0};
  if (!rc && !(rs = gc_calloc((size_t)(np * q->n), sizeof *rs, &e)))
    rc = gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  for (int i = 0; !rc && i < np; i++)
    if ((rc = prompt_requests(a, &b, chat, &ps[i], q, call, rs, i * q->n, err))) of_prompt(err, (size_t)i, (size_t)np);
  call_free(call);
  gc_json_schema_free(b.schema); /* the requests hold their own references */
  gc_json_regex_free(b.regex);
  for (int i = 0; i < np; i++) gc_tok_ids_free(&ps[i].ids);
  if (rc) {
    for (int i = rs ? np * q->n : 0; i-- > 0;) gc_srv_req_release(rs[i]); /* the leader, rs[0], last */
    free(rs);
  } else {
    *out = rs, *nout = np * q->n, q->nprompts = np;
  }
  json_object_put(o);
  return rc;
}

/* ---- /tokenize and /detokenize ------------------------------------------------ */

static char *finish_json(json_object *o);

/* The body's object into *o, or err (no tokenizer, not JSON, not an object). */
static int tok_body(const gc_api_t *a, const char *body, size_t n, json_object **o, gc_api_err_t *err) {
  *o = NULL;
  if (!a->tok) return gc_api_fail(err, 400, INVALID, NULL, NULL, "this server has no tokenizer");
  return object_body(body, n, o, err);
}

/* The ids of a /tokenize body: text, "content" (llama.cpp's: BOS and EOS
 * only with "add_special": true) or "prompt" (vLLM's: with them unless
 * "add_special_tokens": false), special tokens matched; or "messages"
 * through the chat template, as /v1/chat/completions builds its prompt. */
static int tokenize_body(gc_api_t *a, json_object *o, gc_tok_ids_t *ids, gc_api_err_t *err) {
  json_object *content = field(o, "content"), *prompt = field(o, "prompt"), *msgs = field(o, "messages");
  if (!!content + !!prompt + !!msgs != 1)
    return gc_api_fail(err, 400, INVALID, NULL, NULL, "give one of 'content', 'prompt' or 'messages'");
  int gen = 1, with_pieces = 0;
  if (boolean(o, "add_generation_prompt", &gen, err) || boolean(o, "with_pieces", &with_pieces, err))
    return err->status;
  if (with_pieces) return gc_api_fail(err, 400, INVALID, NULL, "with_pieces", "'with_pieces' is not implemented");
  if (msgs) {
    if (!gen)
      return gc_api_fail(err, 400, INVALID, NULL, "add_generation_prompt", "only \"add_generation_prompt\": true "
                         "is implemented");
    chat_args_t ca = {0};
    int rc = contents_given(msgs, err) || template_kwargs(o, &ca, err) || tool_args(a, o, &ca, err) ||
                     chat_prompt(a, msgs, &ca, ids, err)
                 ? err->status
                 : 0;
    chat_args_free(&ca);
    return rc;
  }
  json_object *text = content ? content : prompt;
  const char *key = content ? "content" : "prompt";
  if (!json_object_is_type(text, json_type_string)) return want(err, key, "a string", text);
  int special = !content;
  if (boolean(o, content ? "add_special" : "add_special_tokens", &special, err)) return err->status;
  return encode_string(a, text, gc_tok_prompt_flags(a->tok) & (special ? ~0 : GC_TOK_SPECIAL), ids, err);
}

char *gc_api_tokenize_json(gc_api_t *a, const char *body, size_t n, gc_api_err_t *err) {
  json_object *o, *r = NULL, *arr;
  gc_tok_ids_t ids = {0};
  err->status = 0;
  if (!tok_body(a, body, n, &o, err) && !tokenize_body(a, o, &ids, err) && (r = json_object_new_object()) &&
      (arr = json_object_new_array_ext((int)ids.n))) {
    for (size_t i = 0; i < ids.n; i++) json_object_array_add(arr, json_object_new_int(ids.v[i]));
    json_object_object_add(r, "tokens", arr);
    json_object_object_add(r, "count", json_object_new_int64((int64_t)ids.n));
    json_object_object_add(r, "max_model_len", json_object_new_int(a->ctx));
  } else if (!err->status) {
    gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  }
  json_object_put(o);
  gc_tok_ids_free(&ids);
  return err->status ? (json_object_put(r), NULL) : finish_json(r);
}

char *gc_api_detokenize_json(gc_api_t *a, const char *body, size_t n, gc_api_err_t *err) {
  json_object *o, *t, *r = NULL;
  gc_tok_ids_t ids = {0};
  gc_buf_t text = {0};
  gc_err_t e = {0};
  err->status = 0;
  if (tok_body(a, body, n, &o, err)) return NULL;
  if (!(t = field(o, "tokens")) || !json_object_is_type(t, json_type_array))
    gc_api_fail(err, 400, INVALID, NULL, "tokens", "'tokens' must be an array of token ids");
  else if (json_object_array_length(t) > (size_t)GC_API_MAX_DETOKENIZE)
    gc_api_fail(err, 400, INVALID, NULL, "tokens", "at most %d tokens at a time", GC_API_MAX_DETOKENIZE);
  for (size_t i = 0; !err->status && i < json_object_array_length(t); i++) {
    json_object *x = json_object_array_get_idx(t, i);
    int64_t id = json_object_get_int64(x);
    if (!json_object_is_type(x, json_type_int) || id < 0 || id >= gc_tok_vocab_size(a->tok))
      gc_api_fail(err, 400, INVALID, NULL, "tokens", "tokens[%zu] is not a token id of the vocabulary [0, %d)", i,
                  gc_tok_vocab_size(a->tok));
    else if (gc_tok_ids_push(&ids, (int32_t)id, &e))
      gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  }
  /* every token's text, control tokens' too (llama.cpp's /detokenize) */
  if (!err->status && gc_tok_decode(a->tok, ids.v, ids.n, 0, &text, &e))
    gc_api_fail(err, 500, "server_error", NULL, NULL, "detokenizing failed: %s", e.msg);
  if (!err->status && text.len > INT32_MAX / 2)
    gc_api_fail(err, 400, INVALID, NULL, "tokens", "the text of these tokens is too long");
  if (!err->status && (r = json_object_new_object())) {
    json_object_object_add(r, "content", json_object_new_string_len(text.data ? text.data : "", (int)text.len));
    json_object_object_add(r, "prompt", json_object_new_string_len(text.data ? text.data : "", (int)text.len));
  } else if (!err->status) {
    gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  }
  json_object_put(o);
  gc_tok_ids_free(&ids);
  gc_buf_free(&text);
  return err->status ? NULL : finish_json(r);
}

/* ---- responses -------------------------------------------------------------- */

static char *finish_json(json_object *o) {
  char *s = o ? strdup(json_object_to_json_string_ext(o, JSON_OUT)) : NULL;
  json_object_put(o);
  return s;
}

char *gc_api_error_json(const gc_api_err_t *err) {
  json_object *o = json_object_new_object(), *x = json_object_new_object();
  json_object_object_add(x, "message", json_object_new_string(err->msg));
  json_object_object_add(x, "type", json_object_new_string(err->type ? err->type : "server_error"));
  json_object_object_add(x, "param", err->param[0] ? json_object_new_string(err->param) : NULL);
  json_object_object_add(x, "code", err->code ? json_object_new_string(err->code) : NULL);
  json_object_object_add(o, "error", x);
  return finish_json(o);
}

static json_object *model_obj(const gc_api_t *a) {
  json_object *m = json_object_new_object();
  json_object_object_add(m, "id", json_object_new_string(a->model_id));
  json_object_object_add(m, "object", json_object_new_string("model"));
  json_object_object_add(m, "created", json_object_new_int64(a->created));
  json_object_object_add(m, "owned_by", json_object_new_string("gcore"));
  json_object_object_add(m, "max_model_len", json_object_new_int(a->ctx));
  return m;
}

char *gc_api_models_json(const gc_api_t *a, const char *one) {
  if (one) return finish_json(model_obj(a));
  json_object *o = json_object_new_object(), *d = json_object_new_array();
  json_object_array_add(d, model_obj(a));
  json_object_object_add(o, "object", json_object_new_string("list"));
  json_object_object_add(o, "data", d);
  return finish_json(o);
}

static json_object *ids_array(const int32_t *v, int n) {
  json_object *x = json_object_new_array();
  for (int i = 0; i < n; i++) json_object_array_add(x, json_object_new_int(v[i]));
  return x;
}

static json_object *head(const gc_api_t *a, const char *id, const char *object, int64_t created) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "id", json_object_new_string(id));
  json_object_object_add(o, "object", json_object_new_string(object));
  json_object_object_add(o, "created", json_object_new_int64(created));
  json_object_object_add(o, "model", json_object_new_string(a->model_id));
  return o;
}

/* Tokens of the answer's choices rs[nr]: each prompt's once (choices
 * q->n of each, in order), every choice's completion. */
static json_object *usage(const gc_api_req_t *q, gc_srv_req_t *const *rs, int nr) {
  int64_t prompt = 0, gen = 0, cached = 0;
  for (int i = 0; i < nr; i++)
    prompt += i % q->n ? 0 : rs[i]->nprompt, cached += i % q->n ? 0 : rs[i]->cached, gen += rs[i]->nids;
  json_object *u = json_object_new_object(), *d = json_object_new_object();
  json_object_object_add(u, "prompt_tokens", json_object_new_int64(prompt));
  json_object_object_add(u, "completion_tokens", json_object_new_int64(gen));
  json_object_object_add(u, "total_tokens", json_object_new_int64(prompt + gen));
  json_object_object_add(d, "cached_tokens", json_object_new_int64(cached)); /* OpenAI's and vLLM's */
  json_object_object_add(u, "prompt_tokens_details", d);
  return u;
}

/* ---- log-probabilities ---------------------------------------------------------- */

/* Characters (UTF-8 code points: bytes that do not continue one) in s [n]. */
static size_t chars_of(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
  return k;
}

/* Whether s [n] is whole, valid UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF). */
static int whole_utf8(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i], l = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
    if (!l || i + l > n) return 0;
    for (unsigned k = 1; k < l; k++)
      if ((s[i + k] & 0xC0) != 0x80) return 0;
    if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0) || (c == 0xF0 && s[i + 1] < 0x90) ||
        (c == 0xF4 && s[i + 1] >= 0x90))
      return 0;
    i += l;
  }
  return 1;
}

/* A log-probability as JSON: -inf (an id the model rules out) as vLLM's
 * -9999.0. */
static json_object *lp_json(float lp) { return json_object_new_double(lp >= -9999.0f ? lp : -9999.0); }

/* id's text for logprobs (at_start: as the first token of a text,
 * gc_tok_piece) and its bytes into b: the bytes when they are whole UTF-8,
 * else OpenAI's "bytes:\xNN..." spelling; *chars: the characters it adds
 * to the text (0 for a control token, which the text leaves out). An id of
 * the model's past the tokenizer's vocabulary has no text: "". NULL on
 * out-of-memory. */
/* id's bytes (gc_tok_piece; none past the tokenizer's vocabulary) into b,
 * and the characters they add to the text (a control token none). -1 on
 * out-of-memory. */
static long token_piece(const gc_api_t *a, int32_t id, int at_start, gc_buf_t *b) {
  gc_err_t e = {0};
  b->len = 0;
  if (id >= gc_tok_vocab_size(a->tok)) return 0;
  if (gc_tok_piece(a->tok, id, at_start, b, &e)) return -1;
  return gc_tok_is_special(a->tok, id) ? 0 : (long)chars_of(b->data, b->len);
}

static json_object *token_json(const gc_api_t *a, int32_t id, int at_start, gc_buf_t *b, size_t *chars) {
  long n = token_piece(a, id, at_start, b);
  *chars = n > 0 ? (size_t)n : 0;
  if (n < 0) return NULL;
  if (whole_utf8((const unsigned char *)b->data, b->len)) return json_object_new_string_len(b->data ? b->data : "", (int)b->len);
  char *t = malloc(6 + 4 * b->len + 1);
  if (!t) return NULL;
  size_t k = (size_t)sprintf(t, "bytes:");
  for (size_t i = 0; i < b->len; i++) k += (size_t)sprintf(t + k, "\\x%02x", (unsigned char)b->data[i]);
  json_object *s = json_object_new_string_len(t, (int)k);
  free(t);
  return s;
}

static json_object *bytes_json(const gc_buf_t *b) {
  json_object *x = json_object_new_array_ext((int)b->len);
  for (size_t i = 0; i < b->len; i++) json_object_array_add(x, json_object_new_int((unsigned char)b->data[i]));
  return x;
}

/* One position's logprobs in r: id, its log-probability, and its position's
 * most likely ids top[ntop]; has: a position with a distribution (not the
 * prompt's first id). */
typedef struct lp_at {
  int32_t id;
  float lp;
  const gc_logprob_t *top;
  int ntop, has;
} lp_at_t;

/* Position k of r's sequence: the prompt's ids, then the completion's. */
static lp_at_t lp_at(const gc_srv_req_t *r, int k) {
  int L = r->p.logprobs;
  if (k < r->nprompt)
    return (lp_at_t){r->prompt[k], k ? r->plps[k] : 0, r->ptops + (size_t)k * L, k ? r->pntops[k] : 0, k > 0};
  k -= r->nprompt;
  return (lp_at_t){r->ids[k], r->lps[k], r->tops + (size_t)k * L, r->ntops[k], 1};
}

/* Position k of r's sequence: the prompt's ids, then the completion's. */
static int32_t seq_id(const gc_srv_req_t *r, int k) { return k < r->nprompt ? r->prompt[k] : r->ids[k - r->nprompt]; }

/* The position of r's first token with text, from the prompt's first
 * (the completion continues the prompt's text, echoed or not:
 * gc_tok_stream_after): its first word has no space before it. The
 * sequence's end when there is none yet. */
static int text_start(const gc_api_t *a, const gc_srv_req_t *r) {
  int n = r->nprompt + r->nids, k = 0;
  while (k < n && gc_tok_is_special(a->tok, seq_id(r, k))) k++;
  return k;
}

/* /v1/completions' logprobs of r's positions [from, to) (prompt first, as
 * lp_at), OpenAI's legacy shape: tokens, token_logprobs, top_logprobs (the
 * most likely and the chosen token, by text; null for the prompt's first)
 * and text_offset (from offset on, the characters the tokens before it
 * spell, a control token none: vLLM's running sum of token lengths; the
 * choice's text differs where a token is part of a character). */
static json_object *completion_logprobs(const gc_api_t *a, const gc_srv_req_t *r, int from, int to, size_t offset) {
  json_object *o = json_object_new_object(), *toks = json_object_new_array(), *lps = json_object_new_array();
  json_object *tops = json_object_new_array(), *offs = json_object_new_array();
  gc_buf_t b = {0};
  size_t chars = 0;
  int start = text_start(a, r);
  for (int k = from; k < to; k++) {
    lp_at_t p = lp_at(r, k);
    json_object_array_add(offs, json_object_new_int64((int64_t)offset));
    json_object_array_add(toks, token_json(a, p.id, k <= start, &b, &chars));
    offset += chars;
    json_object_array_add(lps, p.has ? lp_json(p.lp) : NULL);
    json_object *t = NULL;
    for (int i = 0; p.has && i <= p.ntop; i++) { /* the top, then the chosen token if not among them */
      const gc_logprob_t *x = i < p.ntop ? &p.top[i] : &(gc_logprob_t){p.id, p.lp};
      json_object *key = token_json(a, x->id, k <= start, &b, &chars);
      if (!t) t = json_object_new_object();
      if (key && !json_object_object_get_ex(t, json_object_get_string(key), NULL)) /* one text: the likeliest */
        json_object_object_add(t, json_object_get_string(key), lp_json(x->lp));
      json_object_put(key);
    }
    json_object_array_add(tops, t);
  }
  gc_buf_free(&b);
  json_object_object_add(o, "tokens", toks);
  json_object_object_add(o, "token_logprobs", lps);
  json_object_object_add(o, "top_logprobs", tops);
  json_object_object_add(o, "text_offset", offs);
  return o;
}

/* A chat's logprobs of the completion's ids [from, to), OpenAI's shape:
 * {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob,
 * bytes}]}], "refusal": null}. */
static json_object *chat_logprobs(const gc_api_t *a, const gc_srv_req_t *r, int from, int to) {
  json_object *o = json_object_new_object(), *content = json_object_new_array();
  gc_buf_t b = {0};
  size_t chars;
  int start = text_start(a, r);
  for (int k = r->nprompt + from; k < r->nprompt + to; k++) {
    lp_at_t p = lp_at(r, k);
    json_object *x = json_object_new_object(), *tops = json_object_new_array();
    json_object_object_add(x, "token", token_json(a, p.id, k <= start, &b, &chars));
    json_object_object_add(x, "logprob", lp_json(p.lp));
    json_object_object_add(x, "bytes", bytes_json(&b));
    for (int i = 0; i < p.ntop; i++) {
      json_object *y = json_object_new_object();
      json_object_object_add(y, "token", token_json(a, p.top[i].id, k <= start, &b, &chars));
      json_object_object_add(y, "logprob", lp_json(p.top[i].lp));
      json_object_object_add(y, "bytes", bytes_json(&b));
      json_object_array_add(tops, y);
    }
    json_object_object_add(x, "top_logprobs", tops);
    json_object_array_add(content, x);
  }
  gc_buf_free(&b);
  json_object_object_add(o, "content", content);
  json_object_object_add(o, "refusal", NULL);
  return o;
}

size_t gc_api_token_chars(const gc_api_t *a, const gc_srv_req_t *r, int from, int to) {
  gc_buf_t b = {0};
  size_t n = 0;
  int start = a->tok ? text_start(a, r) : 0;
  for (int k = from; a->tok && k < to; k++) {
    long c = token_piece(a, seq_id(r, k), k <= start, &b);
    n += c > 0 ? (size_t)c : 0;
  }
  gc_buf_free(&b);
  return n;
}

/* A choice's logprobs: positions [from, to) of r's completion, the
 * prompt's before them where echo (text_offset from offset), or null when
 * r asked for none. */
static json_object *choice_logprobs(const gc_api_t *a, const gc_api_req_t *q, const gc_srv_req_t *r, int echo,
                                    int from, int to, size_t offset) {
  if (r->p.logprobs < 0 || (!echo && from == to)) return NULL; /* a chunk with no new token: none */
  if (q->chat) return chat_logprobs(a, r, from, to);
  return completion_logprobs(a, r, echo ? 0 : r->nprompt + from, r->nprompt + to, offset);
}

/* ---- results ---------------------------------------------------------------------- */

/* ---- reasoning ------------------------------------------------------------------- */

static int blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The longest suffix of s [n] that is a proper prefix of m [mn]: text that
 * may yet become m. */
static size_t partial_tail(const char *s, size_t n, const char *m, size_t mn) {
  for (size_t k = mn - 1 < n ? mn - 1 : n; k > 0; k--)
    if (!memcmp(s + n - k, m, k)) return k;
  return 0;
}

void gc_api_reply_parts(const gc_api_t *a, const char *text, size_t n, int done, gc_api_parts_t *p) {
  static const char open[] = "<think>", close[] = "</think>";
  *p = (gc_api_parts_t){.end = n};
  if (!a->reasoning || !a->think) return;
  size_t i = 0;
  if (a->think == 1) { /* the model opens the block itself, or not at all */
    while (i < n && blank(text[i])) i++;
    size_t k = n - i < sizeof open - 1 ? n - i : sizeof open - 1;
    if (memcmp(text + i, open, k)) return; /* no block: all answer */
    if (k < sizeof open - 1) {             /* "<thi" so far */
      if (done) return;
      p->end = 0;
      return;
    }
    i += sizeof open - 1;
  }
  p->has_reasoning = 1;
  p->r0 = i;
  const char *c = memmem(text + i, n - i, close, sizeof close - 1);
  if (!c) { /* reasoning to the end (or to what may become "</think>") */
    p->r1 = done ? n : n - partial_tail(text + i, n - i, close, sizeof close - 1);
    p->c0 = p->end = p->r1;
    return;
  }
  p->r1 = (size_t)(c - text);
  p->c0 = p->r1 + sizeof close - 1;
  while (p->c0 < n && blank(text[p->c0])) p->c0++;
}

/* ---- tool calls ------------------------------------------------------------------ */

/* The JSON object o as a message's tool call: {"name": string,
 * "arguments" (or Llama 3.1's "parameters"): any, absent {}}, the
 * arguments written as vLLM's tool parsers write them (json.dumps); NULL
 * where it is not one (or no memory). index: the call's place in the
 * reply. */
static json_object *call_of(json_object *o, int index) {
  json_object *name, *args = NULL, *c = NULL;
  gc_buf_t b = {0};
  gc_err_t e = {0};
  if (json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, "name", &name) &&
      json_object_is_type(name, json_type_string) && json_object_get_string_len(name)) {
    if (!json_object_object_get_ex(o, "arguments", &args)) json_object_object_get_ex(o, "parameters", &args);
    if (args ? !gc_pyjson(args, -1, &b, &e) : !gc_buf_printf(&b, &e, "{}")) {
      char id[40];
      snprintf(id, sizeof id, "call_%016llx", (unsigned long long)random_seed());
      json_object *f = json_object_new_object();
      json_object_object_add(f, "name", json_object_get(name));
      json_object_object_add(f, "arguments", json_object_new_string_len(b.data, (int)b.len));
      c = json_object_new_object();
      json_object_object_add(c, "index", json_object_new_int(index));
      json_object_object_add(c, "id", json_object_new_string(id));
      json_object_object_add(c, "type", json_object_new_string("function"));
      json_object_object_add(c, "function", f);
    }
  }
  gc_buf_free(&b);
  return c;
}

/* The JSON values of s [n] (strict JSON, as Python reads it), each a
 * tool call (call_of) appended to calls after *ncalls: with sep, any
 * number one after another (blanks and ';' between them), else one (and
 * blanks). 0, or -1 (calls unchanged) where one is not, or not JSON. */
static int calls_in(const char *s, size_t n, int sep, json_object *calls, int *ncalls) {
  json_object *got = json_object_new_array();
  int k = *ncalls, ok = 1;
  for (size_t i = 0; ok;) {
    while (i < n && (blank(s[i]) || (sep && s[i] == ';'))) i++;
    if (i == n) break;
    if (!sep && k > *ncalls) { /* a second value in a block */
      ok = 0;
      break;
    }
    /* where the value ends (json-c's strict mode refuses what follows it), then the value strictly */
    json_tokener *tk = json_tokener_new();
    json_object *o = tk ? json_tokener_parse_ex(tk, s + i, (int)(n - i)) : NULL, *c = NULL;
    size_t len = o ? (size_t)json_tokener_get_parse_end(tk) : 0;
    json_object_put(o);
    o = NULL;
    if (len) {
      json_tokener_reset(tk);
      json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
      o = json_tokener_parse_ex(tk, s + i, (int)len);
    }
    ok = o && json_tokener_get_error(tk) == json_tokener_success;
    size_t na = ok && sep && json_object_is_type(o, json_type_array) ? json_object_array_length(o) : 0;
    for (size_t j = 0; ok && j < na; j++) /* Mistral's: an array of calls */
      if ((ok = (c = call_of(json_object_array_get_idx(o, j), k)) != NULL)) json_object_array_add(got, c), k++;
    if (ok && !na && (ok = (c = call_of(o, k)) != NULL)) json_object_array_add(got, c), k++;
    if (ok) i += len;
    json_tokener_free(tk);
    json_object_put(o);
  }
  ok = ok && k > *ncalls;
  for (size_t j = 0; ok && j < json_object_array_length(got); j++)
    json_object_array_add(calls, json_object_get(json_object_array_get_idx(got, j)));
  json_object_put(got);
  if (!ok) return -1;
  *ncalls = k;
  return 0;
}

/* A reply of JSON calls (Llama 3.1's; Mistral's after [TOOL_CALLS]) where
 * its first character that is not a blank is one of open (all of it, once
 * done), text from that character on otherwise (sent as it comes; blanks
 * first wait). */
static size_t json_walk(const char *open, const char *t, size_t start, size_t from, size_t end, int done,
                        gc_buf_t *content, json_object *calls, int *ncalls) {
  gc_err_t e = {0};
  size_t a = from;
  if (from == start) { /* not yet decided */
    while (a < end && blank(t[a])) a++;
    if (a == end && !done) return from;
    if (a < end && strchr(open, t[a])) {
      if (!done) return from;
      if (!calls_in(t + a, end - a, 1, calls, ncalls)) return end;
    }
  }
  return a < end && gc_buf_append(content, t + a, end - a, &e) ? from : end;
}

gc_chat_tools_kind_t gc_api_reply_tools(const gc_api_t *a, const gc_srv_req_t *r) {
  if (a->tools != GC_TOOLS_MISTRAL) return a->tools;
  return r->nids && a->tool_calls_id >= 0 && r->ids[0] == a->tool_calls_id ? GC_TOOLS_MISTRAL : GC_TOOLS_NONE;
}

size_t gc_api_tool_walk(gc_chat_tools_kind_t kind, const char *t, size_t start, size_t from, size_t end, int done,
                        gc_buf_t *content, json_object *calls, int *ncalls) {
  static const char open[] = "<tool_call>", close[] = "</tool_call>";
  gc_err_t e = {0};
  if (kind == GC_TOOLS_NONE) return from < end && gc_buf_append(content, t + from, end - from, &e) ? from : end;
  if (kind == GC_TOOLS_LLAMA3_JSON) return json_walk("{", t, start, from, end, done, content, calls, ncalls);
  if (kind == GC_TOOLS_MISTRAL) return json_walk("[{", t, start, from, end, done, content, calls, ncalls);
  const size_t on = sizeof open - 1, cn = sizeof close - 1;
  while (from < end) {
    const char *o = memmem(t + from, end - from, open, on);
    if (o != t + from) { /* text, up to a block, or to what may become one */
      size_t z = o ? (size_t)(o - t) : done ? end : end - partial_tail(t + from, end - from, open, on), k = z;
      while (k > from && blank(t[k - 1])) k--; /* blanks wait for text after them */
      if (k > from && gc_buf_append(content, t + from, k - from, &e)) return from;
      from = o || done ? z : k;
      if (!o) break;
      continue;
    }
    const char *c = memmem(t + from + on, end - from - on, close, cn);
    if (!c && !done) break;                                 /* the block is not closed yet */
    size_t a = from + on, z = c ? (size_t)(c - t) : end, next = c ? z + cn : end;
    if (calls_in(t + a, z - a, 0, calls, ncalls) && gc_buf_append(content, t + from, next - from, &e))
      return from; /* not a call: the text as it is */
    from = next;
  }
  return from;
}

const char *gc_api_finish_reason(const gc_srv_req_t *r, int ncalls) {
  if (r->finish && !strcmp(r->finish, "length")) return "length";
  return ncalls ? "tool_calls" : r->finish ? r->finish : "stop";
}

/* One choice of a whole answer: r's text (the prompt's first where echo),
 * logprobs, finish, ids. NULL on out-of-memory. */
static json_object *choice_json(const gc_api_t *a, const gc_api_req_t *q, const gc_srv_req_t *r) {
  json_object *c = json_object_new_object(), *text;
  const char *t = r->text.data ? r->text.data : "";
  gc_api_parts_t p = {.end = r->text.len}; /* a chat's reasoning and answer */
  if (q->chat) gc_api_reply_parts(a, t, r->text.len, 1, &p);
  gc_buf_t both = {0};
  gc_err_t e = {0};
  if (q->echo && (gc_buf_append(&both, r->echo ? r->echo : "", r->necho, &e) ||
                  gc_buf_append(&both, t, r->text.len, &e))) {
    json_object_put(c);
    return NULL;
  }
  json_object *calls = NULL;
  int ncalls = 0;
  if (q->echo) {
    text = json_object_new_string_len(both.data ? both.data : "", (int)both.len);
  } else if (q->tools) { /* the answer's text, its tool calls apart */
    calls = json_object_new_array();
    gc_api_tool_walk(gc_api_reply_tools(a, r), t, p.c0, p.c0, p.end, 1, &both, calls, &ncalls);
    text = both.len || !ncalls ? json_object_new_string_len(both.data ? both.data : "", (int)both.len) : NULL;
  } else {
    text = json_object_new_string_len(t + p.c0, (int)(p.end - p.c0));
  }
  gc_buf_free(&both);
  json_object_object_add(c, "index", json_object_new_int(r->index));
  if (q->chat) {
    json_object *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string("assistant"));
    if (p.has_reasoning)
      json_object_object_add(m, "reasoning_content", json_object_new_string_len(t + p.r0, (int)(p.r1 - p.r0)));
    json_object_object_add(m, "content", text);
    if (ncalls) json_object_object_add(m, "tool_calls", json_object_get(calls));
    json_object_object_add(c, "message", m);
  } else {
    json_object_object_add(c, "text", text);
  }
  json_object_put(calls);
  json_object_object_add(c, "logprobs", choice_logprobs(a, q, r, q->echo, 0, r->nids, 0));
  json_object_object_add(c, "finish_reason", json_object_new_string(gc_api_finish_reason(r, ncalls)));
  if (q->return_ids) {
    json_object_object_add(c, "prompt_token_ids", ids_array(r->prompt, r->nprompt));
    json_object_object_add(c, "token_ids", ids_array(r->ids, r->nids));
  }
  return c;
}

char *gc_api_result_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                         gc_srv_req_t *const *rs, int nr) {
  json_object *o = head(a, id, q->chat ? "chat.completion" : "text_completion", created);
  json_object *choices = json_object_new_array();
  json_object_object_add(o, "choices", choices);
  for (int i = 0; i < nr; i++) {
    json_object *c = choice_json(a, q, rs[i]);
    if (!c) {
      json_object_put(o);
      return NULL;
    }
    json_object_array_add(choices, c);
  }
  json_object_object_add(o, "usage", usage(q, rs, nr));
  return finish_json(o);
}

char *gc_api_chunk_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                        const gc_srv_req_t *r, const gc_api_chunk_t *k) {
  const char *text = k->text, *finish = k->finish;
  size_t n = k->n;
  int role = k->role;
  json_object *o = head(a, id, q->chat ? "chat.completion.chunk" : "text_completion", created);
  json_object *choices = json_object_new_array(), *c = json_object_new_object();
  json_object_object_add(c, "index", json_object_new_int(r->index));
  if (q->chat) {
    json_object *d = json_object_new_object();
    if (role) json_object_object_add(d, "role", json_object_new_string("assistant"));
    if (k->nr) json_object_object_add(d, "reasoning_content", json_object_new_string_len(k->reasoning, (int)k->nr));
    if (role || n || (!finish && !k->nr && !k->calls))
      json_object_object_add(d, "content", json_object_new_string_len(text ? text : "", (int)n));
    if (k->calls) json_object_object_add(d, "tool_calls", json_object_get(k->calls));
    json_object_object_add(c, "delta", d);
  } else {
    json_object_object_add(c, "text", json_object_new_string_len(text ? text : "", (int)n));
  }
  json_object_object_add(c, "logprobs", role ? NULL : choice_logprobs(a, q, r, k->echo, k->from, k->to, k->offset));
  json_object_object_add(c, "finish_reason", finish ? json_object_new_string(finish) : NULL);
  if (q->return_ids) /* r->ids is NULL while nothing was decoded */
    json_object_object_add(c, "token_ids", ids_array(k->to > k->from ? r->ids + k->from : NULL, k->to - k->from));
  json_object_array_add(choices, c);
  json_object_object_add(o, "choices", choices);
  if (q->include_usage) json_object_object_add(o, "usage", NULL);
  return finish_json(o);
}

char *gc_api_usage_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                        gc_srv_req_t *const *rs, int nr) {
  json_object *o = head(a, id, q->chat ? "chat.completion.chunk" : "text_completion", created);
  json_object_object_add(o, "choices", json_object_new_array());
  json_object_object_add(o, "usage", usage(q, rs, nr));
  return finish_json(o);
}
