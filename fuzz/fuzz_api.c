/* fuzz_api.c — gcore-serve's request bodies and a reply's tool calls, the
 * network's untrusted bytes. The input's first byte picks a vocabulary
 * and chat template (the gguf_vocab seeds, each with tool calls but
 * DeepSeek R1's: Qwen2.5's, Qwen3's, Llama 3.2's, Mistral v3's) and the
 * endpoint; the
 * rest is the body, parsed as gcore-serve parses it (the chat template,
 * tools and tool calls through models/pyjson.c included) and given to
 * /tokenize. Then the body read as a model's reply: its tool calls walked
 * whole and as a stream cut at every few bytes must give the same text
 * and calls (a finding otherwise: a stream must never say what the whole
 * answer does not). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../serve/api.h"

static const char *const fz_vocabs[] = {"chatml_qwen2_5", "qwen3_thinking", "llama3_2", "mistral_v3", "deepseek_r1"};
#define FZ_NV (sizeof fz_vocabs / sizeof *fz_vocabs)
static gc_api_t fz_api[FZ_NV];

/* The API of gcore-serve's setup_api over each seed vocabulary (read from
 * the repository: fuzz/run.sh runs from its root). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  for (size_t i = 0; i < FZ_NV; i++) {
    char path[FZ_PATH];
    snprintf(path, sizeof path, "fuzz/corpus/gguf_vocab/%s", fz_vocabs[i]);
    gc_api_t *a = &fz_api[i];
    gc_err_t e = {0};
    if (gc_tok_load(path, &a->tok, &e)) {
      fprintf(stderr, "fuzz_api: %s: %s (run from the repository's root)\n", path, e.msg);
      abort();
    }
    pthread_mutex_init(&a->tok_mu, NULL);
    a->ctx = 4096, a->vocab = gc_tok_vocab_size(a->tok), a->model_id = "m", a->reasoning = 1;
    if (gc_chat_detect(a->tok, &a->chat, &e) || (a->chat_end = gc_chat_end_token(a->tok, a->chat)) < 0) abort();
    a->has_chat = 1, a->think = gc_chat_reasoning(a->tok, a->chat), a->tools = gc_chat_tools(a->tok, a->chat);
  }
  return 0;
}

/* The name and arguments of each call of calls, one after the other. */
static void fz_call_text(json_object *calls, gc_buf_t *b) {
  gc_err_t e;
  for (size_t i = 0; i < json_object_array_length(calls); i++) {
    json_object *f = json_object_object_get(json_object_array_get_idx(calls, i), "function");
    if (gc_buf_printf(b, &e, "%s(%s);", json_object_get_string(json_object_object_get(f, "name")),
                      json_object_get_string(json_object_object_get(f, "arguments"))))
      abort();
  }
}

/* The body as a reply: whole, then streamed in pieces of step bytes. */
static void fz_walk(gc_chat_tools_kind_t kind, const char *t, size_t n, size_t step) {
  gc_buf_t whole = {0}, streamed = {0}, wc = {0}, sc = {0};
  json_object *wcalls = json_object_new_array(), *scalls = json_object_new_array();
  int nw = 0, ns = 0;
  if (gc_api_tool_walk(kind, t, 0, 0, n, 1, &whole, wcalls, &nw) != n) abort(); /* done: all of it is read */
  size_t from = 0;
  for (size_t end = step < n ? step : n;; end = end + step < n ? end + step : n) {
    from = gc_api_tool_walk(kind, t, 0, from, end, end == n, &streamed, scalls, &ns);
    if (from > end) abort();
    if (end == n) break;
  }
  fz_call_text(wcalls, &wc);
  fz_call_text(scalls, &sc);
  if (from != n || nw != ns || whole.len != streamed.len || (whole.len && memcmp(whole.data, streamed.data, whole.len)) ||
      wc.len != sc.len || (wc.len && memcmp(wc.data, sc.data, wc.len))) {
    fprintf(stderr, "fuzz_api: the stream (%zu-byte pieces) differs from the whole answer\n", step);
    abort();
  }
  gc_buf_free(&whole), gc_buf_free(&streamed), gc_buf_free(&wc), gc_buf_free(&sc);
  json_object_put(wcalls), json_object_put(scalls);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return -1;
  gc_api_t *a = &fz_api[data[0] % FZ_NV];
  int chat = !(data[0] & 0x80);
  const char *body = (const char *)data + 1;
  size_t n = size - 1;
  gc_api_req_t q;
  gc_srv_req_t **rs = NULL;
  int nr = 0;
  gc_api_err_t err;
  if (!gc_api_parse(a, chat, body, n, &q, &rs, &nr, &err)) {
    for (int i = nr; i-- > 0;) gc_srv_req_release(rs[i]); /* the leader, rs[0], last */
    free(rs);
  } else if (err.status < 400 || err.status > 599) {
    abort();
  }
  free(gc_api_tokenize_json(a, body, n, &err));
  for (size_t step = 1; step <= 7; step += 3) {
    fz_walk(GC_TOOLS_HERMES, body, n, step);
    fz_walk(GC_TOOLS_LLAMA3_JSON, body, n, step);
    fz_walk(GC_TOOLS_MISTRAL, body, n, step);
  }
  return 0;
}
