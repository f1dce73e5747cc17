/* api.c — OpenAI request parsing and response JSON for gcore-serve (see
 * api.h). What is accepted: the fields of /v1/completions and
 * /v1/chat/completions that gcore implements (model, prompt or messages,
 * max_tokens / max_completion_tokens, temperature, top_p, seed, stop,
 * stream, stream_options.include_usage, n = 1, user), llama.cpp's and
 * vLLM's extensions top_k, min_p, ignore_eos and return_token_ids, and the
 * fields whose neutral value changes nothing (presence_penalty 0,
 * logprobs false, echo false, ...). Anything else that would change the
 * result is refused by name (400), never ignored; unknown fields are
 * ignored, as OpenAI's servers do. */
#include "api.h"

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

static int want(gc_api_err_t *err, const char *key, const char *what, json_object *v) {
  return gc_api_fail(err, 400, INVALID, NULL, key, "'%s' must be %s, not %s", key, what, type_name(v));
}

/* A number field in [lo, hi] into *out (unchanged when absent). */
static int num(json_object *o, const char *key, double lo, double hi, double *out, gc_api_err_t *err) {
  json_object *v = field(o, key);
  if (!v) return 0;
  if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
    return want(err, key, "a number", v);
  double x = json_object_get_double(v);
  if (!(x >= lo && x <= hi))
    return gc_api_fail(err, 400, INVALID, NULL, key, "'%s' is %g; it must be from %g to %g", key, x, lo, hi);
  *out = x;
  return 0;
}

/* An integer field in [lo, hi] into *out (unchanged when absent). */
static int integer(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   gc_api_err_t *err) {
  json_object *v = field(o, key);
  if (!v) return 0;
  if (!json_object_is_type(v, json_type_int)) return want(err, key, "an integer", v);
  int64_t x = json_object_get_int64(v);
  if (x < lo || x > hi)
    return gc_api_fail(err, 400, INVALID, NULL, key, "'%s' is %lld; it must be from %lld to %lld", key,
                       (long long)x, (long long)lo, (long long)hi);
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

/* Fields that are accepted only at the value that changes nothing. */
static int neutral(json_object *o, gc_api_err_t *err) {
  static const char *const zero[] = {"presence_penalty", "frequency_penalty"};
  static const char *const falsy[] = {"logprobs", "echo", "top_logprobs"};
  static const char *const absent[] = {"tools", "functions", "tool_choice", "function_call", "suffix"};
  for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
    double x = 0;
    if (num(o, zero[i], -2, 2, &x, err)) return err->status;
    if (x != 0) return gc_api_fail(err, 400, INVALID, NULL, zero[i], "'%s' is not supported (give 0)", zero[i]);
  }
  for (size_t i = 0; i < sizeof falsy / sizeof *falsy; i++) {
    json_object *v = field(o, falsy[i]);
    if (v && !(json_object_is_type(v, json_type_boolean) || json_object_is_type(v, json_type_int)))
      return want(err, falsy[i], "a boolean or an integer", v);
    if (v && json_object_get_int64(v) != 0)
      return gc_api_fail(err, 400, INVALID, NULL, falsy[i], "'%s' is not supported", falsy[i]);
  }
  for (size_t i = 0; i < sizeof absent / sizeof *absent; i++) {
    json_object *v = field(o, absent[i]);
    if (v && !(json_object_is_type(v, json_type_string) && !json_object_get_string_len(v)) &&
        !(json_object_is_type(v, json_type_array) && !json_object_array_length(v)))
      return gc_api_fail(err, 400, INVALID, NULL, absent[i], "'%s' is not supported", absent[i]);
  }
  int64_t one = 1;
  if (integer(o, "n", 1, 1, &one, err) || integer(o, "best_of", 1, 1, &one, err)) {
    snprintf(err->msg, sizeof err->msg, "only one choice per request ('%s' must be 1)", err->param);
    return err->status;
  }
  json_object *lb = field(o, "logit_bias");
  if (lb && !(json_object_is_type(lb, json_type_object) && !json_object_object_length(lb)))
    return gc_api_fail(err, 400, INVALID, NULL, "logit_bias", "'logit_bias' is not supported");
  json_object *rf = field(o, "response_format"), *t;
  if (rf && !(json_object_is_type(rf, json_type_object) && json_object_object_get_ex(rf, "type", &t) &&
              json_object_is_type(t, json_type_string) && !strcmp(json_object_get_string(t), "text")))
    return gc_api_fail(err, 400, INVALID, NULL, "response_format", "only 'response_format' {\"type\": \"text\"} is supported");
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

/* A /v1/completions prompt: a string, one string in an array, an array of
 * ids, or one array of ids in an array. Text is tokenized as gcore-run -p
 * does: BOS first when the tokenizer adds one, special tokens matched. */
static int completion_prompt(gc_api_t *a, json_object *p, gc_tok_ids_t *ids, gc_api_err_t *err) {
  if (!p) return gc_api_fail(err, 400, INVALID, NULL, "prompt", "'prompt' is required");
  if (json_object_is_type(p, json_type_array) && json_object_array_length(p) == 1) {
    json_object *x = json_object_array_get_idx(p, 0);
    if (json_object_is_type(x, json_type_string) || json_object_is_type(x, json_type_array)) p = x;
  }
  if (json_object_is_type(p, json_type_array)) {
    size_t n = json_object_array_length(p);
    if (!n) return gc_api_fail(err, 400, INVALID, NULL, "prompt", "'prompt' is empty");
    json_object *x0 = json_object_array_get_idx(p, 0);
    if (json_object_is_type(x0, json_type_string) || json_object_is_type(x0, json_type_array))
      return gc_api_fail(err, 400, INVALID, NULL, "prompt", "one prompt per request");
    for (size_t i = 0; i < n; i++) {
      json_object *x = json_object_array_get_idx(p, i);
      if (!json_object_is_type(x, json_type_int))
        return want(err, "prompt", "a string or an array of token ids", x);
      if (push_id(ids, json_object_get_int64(x), a, "prompt", err)) return err->status;
    }
    return 0;
  }
  if (!json_object_is_type(p, json_type_string)) return want(err, "prompt", "a string or an array of token ids", p);
  if (!a->tok)
    return gc_api_fail(err, 400, INVALID, NULL, "prompt",
                       "this server has no tokenizer: give the prompt as an array of token ids");
  gc_err_t e = {0};
  pthread_mutex_lock(&a->tok_mu);
  int rc = gc_tok_encode(a->tok, json_object_get_string(p), (size_t)json_object_get_string_len(p),
                         GC_TOK_SPECIAL | (gc_tok_add_bos(a->tok) ? GC_TOK_BOS : 0), ids, &e);
  pthread_mutex_unlock(&a->tok_mu);
  if (rc) return gc_api_fail(err, 500, "server_error", NULL, NULL, "tokenizing the prompt failed: %s", e.msg);
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

/* The chat's ids: system (or developer) first if any, then user and
 * assistant turns, the last a user turn, through the model's template as
 * gcore-run --chat builds a conversation: an assistant turn is its text
 * (trimmed, special tokens not matched) and the end-of-turn id. */
/* Whether message i + 1 of msgs is a user message (so that the one at i
 * gets no reply of its own). */
static int next_is_user(json_object *msgs, size_t i) {
  json_object *m = json_object_array_get_idx(msgs, i + 1), *role;
  return m && json_object_object_get_ex(m, "role", &role) && json_object_is_type(role, json_type_string) &&
         !strcmp(json_object_get_string(role), "user");
}

static int chat_prompt(gc_api_t *a, json_object *msgs, gc_tok_ids_t *ids, gc_api_err_t *err) {
  if (!msgs) return gc_api_fail(err, 400, INVALID, NULL, "messages", "'messages' is required");
  if (!json_object_is_type(msgs, json_type_array)) return want(err, "messages", "an array", msgs);
  size_t n = json_object_array_length(msgs);
  if (!n) return gc_api_fail(err, 400, INVALID, NULL, "messages", "'messages' is empty");
  if (!a->has_chat) return gc_api_fail(err, 400, INVALID, NULL, "messages", "%s", a->chat_why);
  gc_buf_t text = {0}, system = {0};
  int rc = 0, have_system = 0, users = 0, last_user = 0;
  gc_err_t e = {0};
  pthread_mutex_lock(&a->tok_mu);
  for (size_t i = 0; i < n && !rc; i++) {
    json_object *m = json_object_array_get_idx(msgs, i), *role;
    if (!json_object_is_type(m, json_type_object)) {
      rc = want(err, "messages", "an array of objects", m);
      break;
    }
    if (!json_object_object_get_ex(m, "role", &role) || !json_object_is_type(role, json_type_string)) {
      rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu] has no 'role' string", i);
      break;
    }
    const char *r = json_object_get_string(role);
    if ((rc = content_text(m, &text, err))) break;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) {
      if (i) rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "a system message must come first");
      else if (gc_buf_append(&system, text.data, text.len + 1, &e))
        rc = gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
      else have_system = 1;
      last_user = 0;
    } else if (!strcmp(r, "user")) {
      if (gc_chat_turn(a->tok, a->chat, users == 0, !next_is_user(msgs, i), have_system ? system.data : NULL,
                       text.data, ids, &e))
        rc = e.code == GC_EINVAL ? gc_api_fail(err, 400, INVALID, NULL, "messages", "%s", e.msg)
                                 : gc_api_fail(err, 500, "server_error", NULL, NULL, "the chat template failed: %s", e.msg);
      users++, last_user = 1;
    } else if (!strcmp(r, "assistant")) {
      if (!users) {
        rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "an assistant message before any user message");
        break;
      }
      size_t b = 0, t = text.len; /* trimmed, as the templates do */
      while (b < t && strchr(" \t\r\n\v\f", text.data[b])) b++;
      while (t > b && strchr(" \t\r\n\v\f", text.data[t - 1])) t--;
      if (gc_tok_encode(a->tok, text.data + b, t - b, 0, ids, &e) || gc_tok_ids_push(ids, a->chat_end, &e))
        rc = gc_api_fail(err, 500, "server_error", NULL, NULL, "tokenizing a message failed: %s", e.msg);
      last_user = 0;
    } else {
      rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "messages[%zu]: role '%.40s' is not one of system, "
                       "developer, user, assistant", i, r);
    }
  }
  pthread_mutex_unlock(&a->tok_mu);
  if (!rc && !last_user)
    rc = gc_api_fail(err, 400, INVALID, NULL, "messages", "the last message must be the user's");
  gc_buf_free(&text);
  gc_buf_free(&system);
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

/* Sampling and limits. OpenAI's defaults: temperature 1, top_p 1; no
 * top-k or min-p unless asked (llama.cpp's top_k, min_p). */
static int params(gc_api_t *a, json_object *o, int chat, int nprompt, gc_srv_params_t *p, gc_api_err_t *err) {
  double temp = 1.0, top_p = 1.0, min_p = 0.0;
  int64_t top_k = 0, seed = -1, max = -1;
  if (num(o, "temperature", 0, 2, &temp, err) || num(o, "top_p", 0, 1, &top_p, err) ||
      num(o, "min_p", 0, 1, &min_p, err) || integer(o, "top_k", 0, INT32_MAX, &top_k, err) ||
      integer(o, "seed", INT64_MIN, INT64_MAX, &seed, err) || boolean(o, "ignore_eos", &p->ignore_eos, err) ||
      stops(o, p, err) || neutral(o, err))
    return err->status;
  const char *mkey = chat && field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (integer(o, mkey, 1, INT32_MAX, &max, err)) return err->status;
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
  p->max_tokens = max > 0 ? (int)max : chat || a->ctx - nprompt < 16 ? a->ctx - nprompt : 16;
  gc_sampler_params_default(&p->sp);
  p->sp.temperature = (float)temp;
  p->sp.top_p = (float)top_p;
  p->sp.min_p = (float)min_p;
  p->sp.top_k = (int)top_k;
  p->sp.seed = seed >= 0 || field(o, "seed") ? (uint64_t)seed : random_seed();
  return 0;
}

int gc_api_parse(gc_api_t *a, int chat, const char *body, size_t n, gc_srv_req_t *r, gc_api_req_t *q,
                 gc_api_err_t *err) {
  memset(q, 0, sizeof *q);
  q->chat = chat;
  if (n > INT32_MAX) return gc_api_fail(err, 413, INVALID, NULL, NULL, "the request body is too large");
  json_tokener *tk = json_tokener_new_ex(JSON_DEPTH);
  if (!tk) return gc_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
  json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
  json_object *o = json_tokener_parse_ex(tk, body, (int)n);
  enum json_tokener_error je = json_tokener_get_error(tk);
  size_t end = json_tokener_get_parse_end(tk);
  json_tokener_free(tk);
  while (o && end < n && strchr(" \t\r\n", body[end])) end++;
  int rc = 0;
  if (!o || je != json_tokener_success)
    rc = gc_api_fail(err, 400, INVALID, NULL, NULL, "the body is not valid JSON: %s at byte %zu",
                     je == json_tokener_continue ? "it ends early" : json_tokener_error_desc(je), end);
  else if (end < n)
    rc = gc_api_fail(err, 400, INVALID, NULL, NULL, "the body is not valid JSON: text after the value at byte %zu", end);
  else if (!json_object_is_type(o, json_type_object))
    rc = gc_api_fail(err, 400, INVALID, NULL, NULL, "the body must be a JSON object, not %s", type_name(o));
  json_object *model = rc ? NULL : field(o, "model"), *so;
  if (!rc && model && !json_object_is_type(model, json_type_string)) rc = want(err, "model", "a string", model);
  if (!rc && model && strcmp(json_object_get_string(model), a->model_id))
    rc = gc_api_fail(err, 404, INVALID, "model_not_found", "model", "The model '%.100s' does not exist; this "
                     "server serves '%s'", json_object_get_string(model), a->model_id);
  if (!rc) rc = boolean(o, "stream", &q->stream, err) || boolean(o, "return_token_ids", &q->return_ids, err)
                    ? err->status : 0;
  if (!rc && (so = field(o, "stream_options"))) {
    if (!json_object_is_type(so, json_type_object)) rc = want(err, "stream_options", "an object", so);
    else if (boolean(so, "include_usage", &q->include_usage, err)) rc = err->status;
  }
  gc_tok_ids_t ids = {0};
  if (!rc) rc = chat ? chat_prompt(a, field(o, "messages"), &ids, err)
                     : completion_prompt(a, field(o, "prompt"), &ids, err);
  if (!rc && !ids.n) rc = gc_api_fail(err, 400, INVALID, NULL, chat ? "messages" : "prompt", "the prompt has no tokens");
  if (!rc) rc = params(a, o, chat, (int)ids.n, &r->p, err);
  if (!rc) {
    r->prompt = ids.v, r->nprompt = (int)ids.n;
    r->p.chat_end = chat ? a->chat_end : -1;
  } else {
    gc_tok_ids_free(&ids);
  }
  json_object_put(o);
  return rc;
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

static json_object *usage(const gc_srv_req_t *r) {
  json_object *u = json_object_new_object();
  json_object_object_add(u, "prompt_tokens", json_object_new_int(r->nprompt));
  json_object_object_add(u, "completion_tokens", json_object_new_int(r->nids));
  json_object_object_add(u, "total_tokens", json_object_new_int(r->nprompt + r->nids));
  return u;
}

char *gc_api_result_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                         const gc_srv_req_t *r) {
  json_object *o = head(a, id, q->chat ? "chat.completion" : "text_completion", created);
  json_object *choices = json_object_new_array(), *c = json_object_new_object();
  json_object *text = json_object_new_string_len(r->text.data ? r->text.data : "", (int)r->text.len);
  json_object_object_add(c, "index", json_object_new_int(0));
  if (q->chat) {
    json_object *m = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string("assistant"));
    json_object_object_add(m, "content", text);
    json_object_object_add(c, "message", m);
  } else {
    json_object_object_add(c, "text", text);
  }
  json_object_object_add(c, "logprobs", NULL);
  json_object_object_add(c, "finish_reason", json_object_new_string(r->finish ? r->finish : "stop"));
  if (q->return_ids) {
    json_object_object_add(c, "prompt_token_ids", ids_array(r->prompt, r->nprompt));
    json_object_object_add(c, "token_ids", ids_array(r->ids, r->nids));
  }
  json_object_array_add(choices, c);
  json_object_object_add(o, "choices", choices);
  json_object_object_add(o, "usage", usage(r));
  return finish_json(o);
}

char *gc_api_chunk_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                        const char *text, size_t n, const int32_t *ids, int nids, const char *finish,
                        int role) {
  json_object *o = head(a, id, q->chat ? "chat.completion.chunk" : "text_completion", created);
  json_object *choices = json_object_new_array(), *c = json_object_new_object();
  json_object_object_add(c, "index", json_object_new_int(0));
  if (q->chat) {
    json_object *d = json_object_new_object();
    if (role) json_object_object_add(d, "role", json_object_new_string("assistant"));
    if (role || n || !finish) json_object_object_add(d, "content", json_object_new_string_len(text ? text : "", (int)n));
    json_object_object_add(c, "delta", d);
  } else {
    json_object_object_add(c, "text", json_object_new_string_len(text ? text : "", (int)n));
  }
  json_object_object_add(c, "logprobs", NULL);
  json_object_object_add(c, "finish_reason", finish ? json_object_new_string(finish) : NULL);
  if (q->return_ids) json_object_object_add(c, "token_ids", ids_array(ids, nids));
  json_object_array_add(choices, c);
  json_object_object_add(o, "choices", choices);
  if (q->include_usage) json_object_object_add(o, "usage", NULL);
  return finish_json(o);
}

char *gc_api_usage_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                        const gc_srv_req_t *r) {
  json_object *o = head(a, id, q->chat ? "chat.completion.chunk" : "text_completion", created);
  json_object_object_add(o, "choices", json_object_new_array());
  json_object_object_add(o, "usage", usage(r));
  return finish_json(o);
}
