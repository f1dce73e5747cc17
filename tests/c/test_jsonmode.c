/* test_jsonmode.c — the JSON-object prefix recognizer (models/jsonmode.c)
 * on a table of cases, and the token mask over a byte-level vocabulary.
 * With the argument `check` it reads documents from stdin instead (each
 * "<length>\n<bytes>") and prints "<bytes accepted> <bytes when done, or
 * -1>" for each: tests/test_jsonmode.py's differential test against
 * Python's json module. */
#include "check.h"

#include "../../models/jsonmode.h"

/* Bytes of s[0, n) the recognizer accepts, and where it was first done. */
static size_t run(const char *s, size_t n, long *done_at) {
  gc_json_fsm_t f;
  gc_json_fsm_init(&f);
  *done_at = -1;
  for (size_t i = 0; i < n; i++) {
    if (!gc_json_fsm_feed(&f, s + i, 1)) return i;
    if (*done_at < 0 && gc_json_fsm_done(&f)) *done_at = (long)i + 1;
  }
  return n;
}

/* s is accepted whole, done exactly at its end (done) or never (!done). */
static int whole(const char *s, int done) {
  long at;
  size_t n = strlen(s);
  return run(s, n, &at) == n && at == (done ? (long)n : -1);
}

/* s is refused at byte `at` (all before it accepted). */
static int refused_at(const char *s, size_t at) {
  long d;
  return run(s, strlen(s), &d) == at;
}

static void objects_and_prefixes(void) {
  CHECK(whole("{}", 1));
  CHECK(whole("  \n{ }", 1));
  CHECK(whole("{\"a\":1}", 1));
  CHECK(whole("{\"a\" : [1, -2.5e+3, 0, -0.0, 1E9, true, false, null, \"x\", {}, []]}", 1));
  CHECK(whole("{\"k\": {\"n\": [[], [{}], {\"m\": \"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\"}]}}", 1));
  CHECK(whole("{\"a\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}", 1));
  CHECK(whole("{\"a\": 1", 0));   /* a prefix: not done */
  CHECK(whole("{\"a\": 12", 0));  /* a number that may go on */
  CHECK(whole("{\"a\": tr", 0));
  CHECK(whole("{\"a\": \"\xe2\x82", 0)); /* in a character */
  CHECK(whole("", 0));
}

static void refusals(void) {
  CHECK(refused_at("[]", 0));             /* the top level is an object */
  CHECK(refused_at("\"s\"", 0));
  CHECK(refused_at("{}x", 2));            /* nothing after the object */
  CHECK(refused_at("{} ", 2));
  CHECK(refused_at("{,}", 1));
  CHECK(refused_at("{\"a\" 1}", 5));
  CHECK(refused_at("{\"a\":}", 5));
  CHECK(refused_at("{\"a\":1,}", 7));     /* no trailing comma */
  CHECK(refused_at("{\"a\":[1,]}", 8));
  CHECK(refused_at("{\"a\":[1}", 7));     /* closers match */
  CHECK(refused_at("{\"a\":01}", 6));     /* no leading zeros */
  CHECK(refused_at("{\"a\":1.}", 7));
  CHECK(refused_at("{\"a\":.5}", 5));
  CHECK(refused_at("{\"a\":-}", 6));
  CHECK(refused_at("{\"a\":1e}", 7));
  CHECK(refused_at("{\"a\":+1}", 5));
  CHECK(refused_at("{\"a\":tru}", 8));
  CHECK(refused_at("{\"a\":NaN}", 5));
  CHECK(refused_at("{\"a\":\"\x01\"}", 6)); /* control characters are escaped */
  CHECK(refused_at("{\"a\":\"\\x\"}", 7));
  CHECK(refused_at("{\"a\":\"\\u12g4\"}", 10));
  CHECK(refused_at("{\"a\":\"\xc0\x80\"}", 6));        /* overlong */
  CHECK(refused_at("{\"a\":\"\xe0\x80\x80\"}", 7));
  CHECK(refused_at("{\"a\":\"\xed\xa0\x80\"}", 7));    /* a surrogate */
  CHECK(refused_at("{\"a\":\"\xf4\x90\x80\x80\"}", 7)); /* past U+10FFFF */
  CHECK(refused_at("{\"a\":\"\x80\"}", 6));            /* a lone continuation */
  CHECK(refused_at("{\"a\":\"\xc3\"}", 7));            /* a character cut short */
  CHECK(refused_at("{1:2}", 1));                       /* keys are strings */
}

static void limits(void) {
  char s[256];
  size_t n = 0;
  s[n++] = '{', s[n++] = '"', s[n++] = 'a', s[n++] = '"', s[n++] = ':';
  for (int i = 0; i < GC_JSON_DEPTH - 1; i++) s[n++] = '[';
  s[n] = 0;
  CHECK(whole(s, 0));              /* GC_JSON_DEPTH levels with the object */
  s[n++] = '[', s[n] = 0;
  CHECK(refused_at(s, n - 1));     /* and no more */
  n = 0;
  s[n++] = '{';
  for (int i = 0; i < GC_JSON_WS; i++) s[n++] = i % 2 ? ' ' : '\n';
  s[n++] = '}', s[n] = 0;
  CHECK(whole(s, 1));              /* GC_JSON_WS whitespace bytes in a row */
  memmove(s + 2, s + 1, n), s[1] = ' ';
  CHECK(refused_at(s, GC_JSON_WS + 1));
  /* inside strings whitespace is text, not counted */
  char t[128] = "{\"a\": \"";
  for (int i = 0; i < 60; i++) strcat(t, " ");
  strcat(t, "\"}");
  CHECK(whole(t, 1));
}

/* A byte-level vocabulary (the tests' tokenizer: 256 byte ids, merges,
 * then <s> and </s>) is not at hand in C; the mask is checked through
 * gcore-serve in tests/test_serve.py. Here: a copy of the state tests a
 * piece without moving the original. */
static void copies_are_independent(void) {
  gc_json_fsm_t f, g;
  gc_json_fsm_init(&f);
  CHECK(gc_json_fsm_feed(&f, "{\"a\":", 5));
  g = f;
  CHECK(!gc_json_fsm_feed(&g, "}", 1));
  CHECK(gc_json_fsm_feed(&f, "[1]}", 4) && gc_json_fsm_done(&f));
}

/* A call's shape (tool_choice "required"): the texts as they are, one of
 * the names (one a prefix of another), an object, the end. */
static int call_feed(const char *s, int *done) {
  static char names[3][GC_JSON_NAME + 1] = {"get", "get_weather", "now"};
  gc_json_call_t c = {-1, "{\"name\": \"", "\", \"parameters\": ", "}", names, 3};
  gc_json_fsm_t f;
  gc_json_fsm_init_call(&f, &c);
  int ok = gc_json_fsm_feed(&f, s, strlen(s));
  *done = gc_json_fsm_done(&f);
  return ok;
}

static void call_shapes(void) {
  int done;
  CHECK(call_feed("{\"name\": \"get\", \"parameters\": {}}", &done) && done);
  CHECK(call_feed("{\"name\": \"get_weather\", \"parameters\": {\"city\": [1, {}]}}", &done) && done);
  CHECK(call_feed("{\"name\": \"get_w", &done) && !done);
  CHECK(call_feed("{\"name\": \"now\", \"parameters\": {\"a\": 1}", &done) && !done); /* post to come */
  CHECK(!call_feed("{\"name\": \"nope", &done));        /* not a name */
  CHECK(!call_feed("{\"name\": \"ge\"", &done));        /* a name cut short */
  CHECK(!call_feed("{\"name\": \"get_weather_x", &done)); /* past every name */
  CHECK(!call_feed("{ \"name\"", &done));                /* the text exactly */
  CHECK(!call_feed("{\"name\": \"now\", \"parameters\": [1]", &done)); /* arguments are an object */
  CHECK(!call_feed("{\"name\": \"now\", \"parameters\": {}} ", &done)); /* nothing after the call */
}

/* `check`: "<length>\n<bytes>" documents from stdin. */
static int check_stdin(void) {
  size_t n;
  while (scanf("%zu", &n) == 1) {
    if (getchar() != '\n' || n > (1u << 20)) return 2;
    char *s = malloc(n ? n : 1);
    if (!s || fread(s, 1, n, stdin) != n) return free(s), 2;
    long at;
    size_t ok = run(s, n, &at);
    printf("%zu %ld\n", ok, at);
    free(s);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "check")) return check_stdin();
  check_case("objects and their prefixes", objects_and_prefixes);
  check_case("refusals", refusals);
  check_case("limits", limits);
  check_case("copies", copies_are_independent);
  check_case("call shapes", call_shapes);
  return check_report();
}
