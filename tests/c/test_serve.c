/* test_serve.c — units of the server's API layer (serve/api.c) that the
 * HTTP tests cannot reach one byte at a time: where a chat reply's
 * reasoning and answer lie (gc_api_reply_parts), whole and as a stream
 * that grows a byte at a time. */
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

int main(void) {
  check_case("reply_parts", test_reply_parts);
  check_case("reply_parts_hold", test_reply_parts_hold);
  return check_report();
}
