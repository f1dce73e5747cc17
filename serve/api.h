/* api.h — the OpenAI API as gcore-serve speaks it: a request body is
 * parsed (json-c) and checked into a gc_srv_req_t (prompt ids through the
 * tokenizer and the chat template, sampling, limits) or into an error in
 * OpenAI's shape with its HTTP status; responses, stream chunks and
 * errors are written as JSON. No HTTP and no threads here but the
 * tokenizer's lock. */
#ifndef GC_SERVE_API_H
#define GC_SERVE_API_H

#include <json-c/json.h>
#include <pthread.h>

#include "../models/chat.h"
#include "engine.h"

/* What requests are checked against; fixed after start but for tok's cache. */
typedef struct gc_api {
  gc_tok_t *tok;             /* NULL: prompts as token ids only */
  pthread_mutex_t tok_mu;    /* gc_tok_encode is not thread-safe */
  int has_chat;              /* the tokenizer has a Llama 2/3 chat template */
  gc_chat_kind_t chat;
  int32_t chat_end;          /* the id that closes a reply */
  int reasoning;             /* a reply's <think> block as reasoning_content (gc_api_reply_parts) */
  gc_chat_tools_kind_t tools; /* how the template offers tools (gc_chat_tools) */
  int32_t tool_calls_id;     /* MISTRAL: the [TOOL_CALLS] control token that starts a reply of calls, or -1 */
  int think;                 /* how the template's replies carry it: gc_chat_reasoning */
  char chat_why[300];        /* without a chat template: why */
  int ctx, vocab;
  const char *model_id;      /* the name /v1/models lists */
  int64_t created;           /* the server's start, as /v1/models' "created" */
} gc_api_t;

/* An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}. */
typedef struct gc_api_err {
  int status;                /* 400, 404, 405, 413, 500, 503 */
  const char *type;          /* "invalid_request_error", "server_error", ... */
  const char *code;          /* NULL, or e.g. "context_length_exceeded" */
  char param[64];            /* the offending field, or "" */
  char msg[512];
} gc_api_err_t;

/* Fill err (returns err->status). */
int gc_api_fail(gc_api_err_t *err, int status, const char *type, const char *code,
                const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* How the response is to be written. */
typedef struct gc_api_req {
  int chat;                  /* /v1/chat/completions (else /v1/completions) */
  int stream;                /* server-sent events */
  int include_usage;         /* stream_options.include_usage */
  int return_ids;            /* return_token_ids: prompt and completion ids in the choice */
  int echo;                  /* /v1/completions' echo: the prompt's text (and ids' logprobs) first */
  int n;                     /* choices of each prompt (n) */
  int nprompts;              /* prompts (a batch of /v1/completions; 1 for a chat) */
  int tools;                 /* a chat offered tools: its replies' calls are read (gc_api_tool_walk) */
} gc_api_req_t;

#define GC_API_MAX_CHOICES 128 /* prompts times n, at most, in one request */

/* Parse body [n bytes] of a completion (chat = 0) or chat completion
 * request into q and its requests (*rs)[*nr] (prompt, params: each
 * prompt's q->n choices in order, the choice's index in its r->index;
 * the first leads, gc_srv_req_new_in, and the caller releases each and
 * frees the array). Returns 0, or err->status with err filled (malformed
 * JSON, a body that is not an object, a wrong type or value, a field that
 * is not implemented, an unknown model, a prompt over the context), and
 * then no requests. Errors: no crash on any bytes. */
int gc_api_parse(gc_api_t *a, int chat, const char *body, size_t n, gc_api_req_t *q, gc_srv_req_t ***rs, int *nr,
                 gc_api_err_t *err);

/* POST /tokenize and /detokenize, llama.cpp's and vLLM's: the answer's
 * JSON (malloc'd), or NULL with err filled (its status: 400 for a bad
 * body or a server without a tokenizer, 500). /tokenize takes "content"
 * (llama.cpp: BOS/EOS with "add_special": true), "prompt" (vLLM: unless
 * "add_special_tokens": false) or "messages" (the chat completion's
 * prompt) and answers {"tokens", "count", "max_model_len"}; /detokenize
 * takes {"tokens"} and answers {"content", "prompt"} (the same text). */
#define GC_API_MAX_DETOKENIZE (1 << 20) /* ids one /detokenize takes */
char *gc_api_tokenize_json(gc_api_t *a, const char *body, size_t n, gc_api_err_t *err);
char *gc_api_detokenize_json(gc_api_t *a, const char *body, size_t n, gc_api_err_t *err);

/* The JSON texts (malloc'd, NUL-terminated; NULL on out-of-memory). The
 * request functions read requests under their lock (one for all the
 * choices of an answer), held by the caller. */
char *gc_api_error_json(const gc_api_err_t *err);
char *gc_api_models_json(const gc_api_t *a, const char *one); /* one: /v1/models/{one}, or NULL */
/* The whole answer of choices rs[nr] (all done, none failed). */
char *gc_api_result_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                         gc_srv_req_t *const *rs, int nr);
/* Where a chat reply's text [n] (all of it, done, or what has come so far)
 * puts its reasoning and its answer, as llama.cpp's and vLLM's DeepSeek
 * reasoning parsers cut them: with a->reasoning and a template whose
 * replies carry reasoning (a->think: DeepSeek's, Qwen3's), the reasoning
 * is what lies between "<think>" (written by the template's generation
 * prompt, think 2, or first in the reply, after any whitespace, think 1)
 * and the first "</think>", all the rest when none comes; the
 * answer follows "</think>" and its whitespace. Otherwise there is no
 * reasoning and the answer is the whole text. While not done, what could
 * still become a marker is held back: the answer is [c0, end), the
 * reasoning [r0, r1), and text past both comes later. Can't fail. */
typedef struct gc_api_parts {
  size_t r0, r1;             /* the reasoning (r0 == r1: none so far) */
  size_t c0, end;            /* the answer */
  int has_reasoning;         /* the reply opened a <think> block */
} gc_api_parts_t;
void gc_api_reply_parts(const gc_api_t *a, const char *text, size_t n, int done, gc_api_parts_t *p);

/* A chat answer's text t [from, end) with tools offered (start: where
 * the answer starts; done: all of it has come), read as the template has
 * the model write calls (kind), as vLLM's tool parsers read them. HERMES
 * (its hermes parser): a <tool_call> ... </tool_call> block holding
 * {"name", "arguments"} is a call; the text outside the blocks, and a
 * block that is no call, is content, less runs of blanks that end the
 * text before a block or the answer; what may still become a block, or a
 * run of blanks, waits. LLAMA3_JSON (its llama3_json parser): an answer
 * whose first character that is not a blank is "{" waits until done and
 * is then its calls, JSON objects {"name", "parameters" or "arguments"}
 * one after another (";" between them allowed), or, where it is not,
 * content; any other answer is content from that character on. MISTRAL
 * (a reply that began with [TOOL_CALLS], gc_api_reply_tools): the same,
 * "[" opening an array of calls too. NONE: all of it content. A call is
 * appended to calls (its index *ncalls, then counted; an id, "type":
 * "function", the arguments as JSON text), content to content. Returns
 * where the next walk starts. */
size_t gc_api_tool_walk(gc_chat_tools_kind_t kind, const char *t, size_t start, size_t from, size_t end, int done,
                        gc_buf_t *content, json_object *calls, int *ncalls);

/* Choice r's finish_reason, ncalls calls read from its reply: "length"
 * where max_tokens or the context cut it (a call may be unfinished; as
 * vLLM), else "tool_calls" where it made any, else r's own ("stop" when
 * it has none). */
const char *gc_api_finish_reason(const gc_srv_req_t *r, int ncalls);

/* How choice r's reply is read for calls (gc_api_tool_walk's kind): the
 * template's way (a->tools), Mistral's only where r's first id is
 * [TOOL_CALLS] (NONE otherwise). */
gc_chat_tools_kind_t gc_api_reply_tools(const gc_api_t *a, const gc_srv_req_t *r);

/* What one stream chunk of choice r (its r->index) carries. */
typedef struct gc_api_chunk {
  const char *text;          /* [n] text new since the last chunk (a chat's answer) */
  size_t n;
  const char *reasoning;     /* [nr] a chat's reasoning new since the last chunk */
  size_t nr;
  int from, to;              /* r's ids [from, to): new since the last chunk (token_ids, logprobs) */
  int echo;                  /* the echo chunk: text is the prompt's, logprobs the prompt ids' */
  size_t offset;             /* logprobs' text_offset of the first token: gc_api_token_chars of those sent */
  const char *finish;        /* NULL until the last */
  int role;                  /* the first chat chunk (delta.role) */
  json_object *calls;        /* a chat's tool calls complete since the last chunk (delta.tool_calls), or NULL */
} gc_api_chunk_t;
char *gc_api_chunk_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                        const gc_srv_req_t *r, const gc_api_chunk_t *k);
/* The characters r's positions [from, to) spell (the prompt's ids, then
 * the completion's; a control token none): how far text_offset moves. */
size_t gc_api_token_chars(const gc_api_t *a, const gc_srv_req_t *r, int from, int to);
/* The usage chunk after the last (stream_options.include_usage). */
char *gc_api_usage_json(const gc_api_t *a, const gc_api_req_t *q, const char *id, int64_t created,
                        gc_srv_req_t *const *rs, int nr);

#endif
