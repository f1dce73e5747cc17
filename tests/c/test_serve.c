/* test_serve.c — units of the server's API layer (serve/api.c) that the
 * HTTP tests cannot reach one byte at a time: where a chat reply's
 * reasoning and answer lie (gc_api_reply_parts), whole and as a stream
 * that grows a byte at a time; and what the parsed requests hold that a
 * reply does not show: one compiled JSON Schema a request, shared by its
 * choices (gc_api_parse, over fuzz/corpus/gguf_vocab's Qwen2.5 vocabulary,
 * read from the repository's root, where tests/test_c_units.py runs it). */
#include "../../serve/api.h"
#include "check.h"

/* The reply text's parts, done, as strings. */
static void whole(const gc_api_t *a, const char *text, char *reason, char *answer, int *has) {
  gc_api_parts_t p;
  gc_api_reply_parts(a, text, strlen(text), 1, &p);
  snprintf(reason, 256, "%.*s", (int)(p.r1 - p.r0), text + p.r0);
  snprintf(answer, 256, "%.*s", (int)(p.end - p.c0), text + p.c0);
  *has = p.has_reasoning;
}

/* A stream of text that grows a byte at a time, sent as serve/http.c
 * sends it (each part from what it sent last or the part's start, to the
 * part's end; the last call done): the concatenated reasoning and answer.
 * Checks that the ends never move back. */
static void streamed(const gc_api_t *a, const char *text, char *reason, char *answer) {
  size_t n = strlen(text), sent_r = 0, sent_c = 0, nr = 0, nc = 0, last_r1 = 0, last_end = 0;
  for (size_t len = 0; len <= n; len++) {
    gc_api_parts_t p;
    gc_api_reply_parts(a, text, len, len == n, &p);
    CHECK(p.r0 <= p.r1 && p.c0 <= p.end && p.end <= len && p.r1 <= len, "parts of %zu bytes of '%s'", len, text);
    CHECK(p.r1 >= last_r1 && p.end >= last_end, "an end moved back at %zu bytes of '%s'", len, text);
    last_r1 = p.r1, last_end = p.end;
    size_t r0 = p.r0 > sent_r ? p.r0 : sent_r, c0 = p.c0 > sent_c ? p.c0 : sent_c;
    if (p.r1 > r0) memcpy(reason + nr, text + r0, p.r1 - r0), nr += p.r1 - r0;
    if (p.end > c0) memcpy(answer + nc, text + c0, p.end - c0), nc += p.end - c0;
    sent_r = p.r1 > r0 ? p.r1 : r0, sent_c = p.end > c0 ? p.end : c0;
  }
  reason[nr] = answer[nc] = 0;
}

typedef struct {
  int think; /* gc_chat_reasoning: 2 the prompt opened <think>, 1 a reply may, 0 none */
  const char *text, *reason, *answer; /* reason NULL: no reasoning block */
} reply_case_t;

static const reply_case_t CASES[] = {
    /* R1, Qwen3-Thinking: the template opened <think>; the reply closes it */
    {2, "so 2+2.\n</think>\n\nFour.", "so 2+2.\n", "Four."},
    {2, "</think>Four", "", "Four"},
    {2, "hmm </think> a </think> b", "hmm ", "a </think> b"},
    {2, "cut short </thi", "cut short </thi", ""}, /* max_tokens before the close */
    {2, "", "", ""},
    {2, "x </think>   \n", "x ", ""},
    {2, "<</</think>>", "<</", ">"},
    /* V3/R1's first release, Qwen3: the reply opens it, or has none */
    {1, "<think>\nplan</think>\n\nDone.", "\nplan", "Done."},
    {1, " \n<think>a</think>b", "a", "b"},
    {1, "Plain answer </think> kept", NULL, "Plain answer </think> kept"},
    {1, "<thin", NULL, "<thin"}, /* ended before it became <think> */
    {1, "<think", NULL, "<think"},
    {1, "<think>", "", ""},
    {1, "<thinking>no", NULL, "<thinking>no"},
    /* templates without a reasoning block */
    {0, "<think>a</think>b", NULL, "<think>a</think>b"},
    {0, "</think>", NULL, "</think>"},
};

static void test_reply_parts(void) {
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
    const reply_case_t *c = &CASES[i];
    gc_api_t a = {.think = c->think, .reasoning = 1};
    char reason[256], answer[256], sr[256], sa[256];
    int has;
    whole(&a, c->text, reason, answer, &has);
    CHECK(has == (c->reason != NULL), "case %zu '%s': a reasoning block %d", i, c->text, has);
    CHECK(!strcmp(reason, c->reason ? c->reason : ""), "case %zu '%s': reasoning '%s'", i, c->text, reason);
    CHECK(!strcmp(answer, c->answer), "case %zu '%s': answer '%s'", i, c->text, answer);
    streamed(&a, c->text, sr, sa);
    CHECK(!strcmp(sr, reason) && !strcmp(sa, answer), "case %zu '%s': streamed '%s' + '%s'", i, c->text, sr, sa);
    a.reasoning = 0; /* --reasoning-format none: all answer */
    whole(&a, c->text, reason, answer, &has);
    CHECK(!has && !reason[0] && !strcmp(answer, c->text), "case %zu without reasoning", i);
  }
}

/* While the stream runs, text that may still become "</think>" (or, for
 * DEEPSEEK, "<think>") is held back rather than sent as reasoning/answer. */
static void test_reply_parts_hold(void) {
  gc_api_t a = {.think = 2, .reasoning = 1};
  gc_api_parts_t p;
  gc_api_reply_parts(&a, "abc</thi", 8, 0, &p);
  CHECK(p.r0 == 0 && p.r1 == 3 && p.c0 == p.end, "held '</thi': r1 %zu", p.r1);
  gc_api_reply_parts(&a, "abc</thx", 8, 0, &p);
  CHECK(p.r1 == 8, "not a marker: r1 %zu", p.r1);
  gc_api_reply_parts(&a, "abc</think>  ", 13, 0, &p);
  CHECK(p.r1 == 3 && p.c0 == 13 && p.end == 13, "the answer's blanks skipped: c0 %zu", p.c0);
  a.think = 1;
  gc_api_reply_parts(&a, " <thi", 5, 0, &p);
  CHECK(!p.has_reasoning && p.end == 0, "held ' <thi': end %zu", p.end);
  gc_api_reply_parts(&a, " <thx", 5, 0, &p);
  CHECK(!p.has_reasoning && p.c0 == 0 && p.end == 5, "no block: end %zu", p.end);
}

/* ---- one schema a request ------------------------------------------------------ */

/* gcore-serve's API over the Qwen2.5 seed vocabulary (its chat template),
 * as fuzz_api sets it up; 0 where it cannot be read (a failed check). */
static int api_open(gc_api_t *a) {
  gc_err_t e = {0};
  memset(a, 0, sizeof *a);
  int ok = !gc_tok_load("fuzz/corpus/gguf_vocab/chatml_qwen2_5", &a->tok, &e) && !gc_chat_detect(a->tok, &a->chat, &e);
  CHECK(ok, "the vocabulary: %s (run from the repository's root)", e.msg);
  if (!ok) return gc_tok_free(a->tok), 0;
  pthread_mutex_init(&a->tok_mu, NULL);
  a->ctx = 4096, a->vocab = gc_tok_vocab_size(a->tok), a->model_id = "m", a->has_chat = 1;
  a->chat_end = gc_chat_end_token(a->tok, a->chat);
  return 1;
}

static void api_close(gc_api_t *a) {
  pthread_mutex_destroy(&a->tok_mu);
  gc_tok_free(a->tok);
}

static void reqs_free(gc_srv_req_t **rs, int nr) {
  for (int i = nr; i-- > 0;) gc_srv_req_release(rs[i]); /* the leader, rs[0], last */
  free(rs);
}

/* body parsed (chat or not) into *rs[*nr] (the caller frees them, none on
 * an error): 1 where there are want requests, each with a schema, one and
 * the same object; 0 (a failed check) otherwise. */
static int parse_shared(gc_api_t *a, int chat, const char *body, int want, gc_srv_req_t ***rs, int *nr) {
  gc_api_req_t q;
  gc_api_err_t err;
  int rc = gc_api_parse(a, chat, body, strlen(body), &q, rs, nr, &err);
  CHECK(!rc, "%s: %d %s", body, rc, err.msg);
  if (rc) return 0;
  CHECK(*nr == want, "%s: %d requests", body, *nr);
  int same = *nr == want && (*rs)[0]->p.schema && (*rs)[0]->p.json;
  for (int i = 1; same && i < *nr; i++) same = (*rs)[i]->p.schema == (*rs)[0]->p.schema && (*rs)[i]->p.json;
  CHECK(same, "%s: the requests' schemas are not one object", body);
  return same;
}

/* Request body s with its single quotes made double ones (JSON's), in a
 * buffer of the caller's of at least strlen(s) + 1 bytes. */
static const char *quoted(const char *s, char *buf) {
  size_t i = 0;
  for (; s[i]; i++) buf[i] = s[i] == '\'' ? '"' : s[i];
  buf[i] = 0;
  return buf;
}

#define SCHEMA "{'type': 'object', 'properties': {'a': {'type': 'integer'}}, 'required': ['a']}"
#define HI "'messages': [{'role': 'user', 'content': 'hi'}]"

/* n choices of a chat, and a /v1/completions batch of prompts times n,
 * each under response_format, guided_json or json_schema: the schema is
 * compiled once a request and every choice holds a reference (released
 * with its request: ASan counts them); a second request compiles its own. */
static void test_schema_shared(void) {
  gc_api_t a;
  if (!api_open(&a)) return;
  static const char *const chats[] = {
      "{" HI ", 'n': 3, 'response_format': {'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': " SCHEMA
      "}}}",
      "{" HI ", 'n': 3, 'guided_json': " SCHEMA "}",
  };
  static const char *const batches[] = {
      "{'prompt': ['hi', 'there'], 'n': 2, 'max_tokens': 4, 'guided_json': " SCHEMA "}",
      "{'prompt': ['hi', 'there'], 'n': 2, 'max_tokens': 4, 'json_schema': " SCHEMA "}",
  };
  gc_srv_req_t **rs, **again;
  int nr, nagain;
  char buf[512];
  for (size_t i = 0; i < 2; i++) {
    int ok = parse_shared(&a, 1, quoted(chats[i], buf), 3, &rs, &nr);
    if (parse_shared(&a, 1, buf, 3, &again, &nagain) && ok)
      CHECK(again[0]->p.schema != rs[0]->p.schema, "two requests share a schema");
    reqs_free(again, nagain);
    reqs_free(rs, nr);
    parse_shared(&a, 0, quoted(batches[i], buf), 4, &rs, &nr);
    reqs_free(rs, nr);
  }
  api_close(&a);
}

/* A schema that does not compile fails the request as it fails one
 * choice: the same status, param and message with n 3 as with n 1, and
 * with a batch of 2 prompts (the first prompt's, as its error says). */
static void test_schema_refused_once(void) {
  gc_api_t a;
  if (!api_open(&a)) return;
  static const char *const bodies[][2] = {
      {"{" HI ", 'n': 1, 'response_format': {'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': "
       "{'type': 'object', 'minProperties': 'no'}}}}",
       "{" HI ", 'n': 3, 'response_format': {'type': 'json_schema', 'json_schema': {'name': 'x', 'schema': "
       "{'type': 'object', 'minProperties': 'no'}}}}"},
      {"{'prompt': ['hi', 'there'], 'n': 1, 'guided_json': '{\\'type\\': \\'string\\'}'}",
       "{'prompt': ['hi', 'there'], 'n': 2, 'guided_json': '{\\'type\\': \\'string\\'}'}"},
  };
  for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
    gc_api_req_t q;
    gc_api_err_t one, many;
    gc_srv_req_t **rs = NULL;
    int nr = -1;
    char buf[512];
    quoted(bodies[i][0], buf);
    int rc1 = gc_api_parse(&a, !i, buf, strlen(buf), &q, &rs, &nr, &one);
    CHECK(rc1 == 400 && !strcmp(one.param, i ? "guided_json" : "response_format") && !rs && !nr,
          "case %zu, n 1: %d %s '%s'", i, rc1, one.param, one.msg);
    reqs_free(rs, nr); /* none but where the check failed */
    quoted(bodies[i][1], buf);
    int rcn = gc_api_parse(&a, !i, buf, strlen(buf), &q, &rs, &nr, &many);
    CHECK(rcn == rc1 && many.status == one.status && !strcmp(many.param, one.param) && !strcmp(many.msg, one.msg) &&
              !rs && !nr,
          "case %zu: n 1: %d %s '%s'; n > 1: %d %s '%s'", i, one.status, one.param, one.msg, many.status, many.param,
          many.msg);
    reqs_free(rs, nr);
  }
  api_close(&a);
}

int main(void) {
  check_case("reply_parts", test_reply_parts);
  check_case("reply_parts_hold", test_reply_parts_hold);
  check_case("schema_shared", test_schema_shared);
  check_case("schema_refused_once", test_schema_refused_once);
  return check_report();
}
