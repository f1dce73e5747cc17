/* test_jsonmode.c — the JSON-object prefix recognizer (models/jsonmode.c)
 * on a table of cases, and the token mask over a byte-level vocabulary.
 * With the argument `check` it reads documents from stdin instead (each
 * "<length>\n<bytes>") and prints "<bytes accepted> <bytes when done, or
 * -1>" for each: tests/test_jsonmode.py's differential test against
 * Python's json module; with `vocab TOKENIZER` it checks the mask on that
 * tokenizer's vocabulary (check_vocab). */
#include "check.h"

#include "../../models/jsonmode.h"
#include "../../models/regex.h"

#include <math.h>

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

/* A copy of the state tests a piece without moving the original. */
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
  gc_json_call_t c = {.lead = -1, .pre = "{\"name\": \"", .mid = "\", \"parameters\": ", .post = "}", .tail = "",
                      .names = names, .nnames = 3};
  gc_json_fsm_t f;
  gc_json_fsm_init_call(&f, &c);
  int ok = gc_json_fsm_feed(&f, s, strlen(s));
  *done = gc_json_fsm_done(&f);
  return ok;
}

/* Several calls (sep, next, tail): Hermes' blocks (the reply may end
 * after any) and an array (it ends at its ']'); with sep NULL, one. */
static int calls_feed(const char *sep, const char *tail, const char *s, int *done, int *may_end) {
  static char names[2][GC_JSON_NAME + 1] = {"a", "bc"};
  gc_json_call_t c = {.lead = -1, .pre = *tail ? "[{\"n\": \"" : "<c>{\"n\": \"", .mid = "\", \"p\": ",
                      .post = *tail ? "}" : "}</c>", .sep = sep, .next = *tail ? "{\"n\": \"" : "<c>{\"n\": \"",
                      .tail = tail, .names = names, .nnames = 2};
  gc_json_fsm_t f;
  gc_json_fsm_init_call(&f, &c);
  int ok = gc_json_fsm_feed(&f, s, strlen(s));
  *done = gc_json_fsm_done(&f), *may_end = gc_json_fsm_may_end(&f);
  return ok;
}

static void several_calls(void) {
  int done, may;
  CHECK(calls_feed("\n", "", "<c>{\"n\": \"a\", \"p\": {}}</c>", &done, &may) && !done && may);
  CHECK(calls_feed("\n", "", "<c>{\"n\": \"a\", \"p\": {}}</c>\n<c>{\"n\": \"bc\", \"p\": {\"x\": [1]}}</c>", &done,
                   &may) && !done && may);
  CHECK(calls_feed("\n", "", "<c>{\"n\": \"a\", \"p\": {}}</c>\n<c>{\"n\": \"bc\", \"p\": {", &done, &may) &&
        !done && !may);
  CHECK(!calls_feed("\n", "", "<c>{\"n\": \"a\", \"p\": {}}</c><c>", &done, &may)); /* sep first */
  CHECK(!calls_feed("\n", "", "<c>{\"n\": \"a\", \"p\": {}}</c>\n<c>{\"n\": \"x", &done, &may)); /* a name */
  CHECK(!calls_feed(NULL, "", "<c>{\"n\": \"a\", \"p\": {}}</c>\n", &done, &may)); /* one call only */
  CHECK(calls_feed(NULL, "", "<c>{\"n\": \"a\", \"p\": {}}</c>", &done, &may) && done && may);
  CHECK(calls_feed(", ", "]", "[{\"n\": \"a\", \"p\": {}}", &done, &may) && !done && !may);
  CHECK(calls_feed(", ", "]", "[{\"n\": \"a\", \"p\": {}}, {\"n\": \"bc\", \"p\": {\"q\": null}}]", &done, &may) &&
        done && may);
  CHECK(!calls_feed(", ", "]", "[{\"n\": \"a\", \"p\": {}}]]", &done, &may)); /* nothing after the tail */
  CHECK(!calls_feed(NULL, "]", "[{\"n\": \"a\", \"p\": {}}, ", &done, &may));
  CHECK(calls_feed(NULL, "]", "[{\"n\": \"a\", \"p\": {}}]", &done, &may) && done);
  /* the second call's object starts afresh: depth and blanks */
  CHECK(calls_feed("\n", "", "<c>{\"n\": \"a\", \"p\": {\"d\": [[[1]]]}}</c>\n<c>{\"n\": \"a\", \"p\": {}}</c>", &done,
                   &may) && may);
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

/* ---- the token mask against the recognizer, piece by piece ------------ */

/* Pieces a byte-level vocabulary has (the tests' own: every byte, then
 * fragments of JSON, text, whitespace runs, whole and cut UTF-8, invalid
 * UTF-8, escapes, a call's texts, then joins of two or three fragments). */
static const char *const FRAGS[] = {
    " ", "  ", "\n", "\t", " \n ", "\r\n", "\n\n", "\"", "\":", "\": \"", "\",", "\"}", "\"]", "\\",
    "\\n", "\\u00", "\\u00e9", "\\ud83d\\ude00", "\\\"", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xe4",
    "\xb8\xad", "\xe4\xb8", "\xf0\x9f", "0", "12", "-", "-0", ".5", "e+", "E-1", "true", "tru", "e",
    "false", "null", "nul", "l}", "{", "}", "[", "]", ",", ":", "{\"", "[1,", "the", " the", " {",
    " [", " \"", " }", "\n}", " 1", " -", " t", " n", " f", "abc", "a\"b", "\x01", "\x7f",
    "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "<tool_call>", "<tool", "_call>\n",
    "</tool_call>", "name", "get_weather", "get", "arguments", "\t\"", " \":", "  \"x\""};
#define NFRAG (int)(sizeof FRAGS / sizeof *FRAGS)
#define NPIECE 2600 /* 256 bytes, NFRAG fragments, joins, 3 control tokens, 1 empty piece */

typedef struct vocab {
  char *p[NPIECE];
  size_t len[NPIECE];
  uint8_t special[NPIECE];
  int n;
} vocab_t;

static void vocab_add(vocab_t *v, const char *s, size_t len, int special) {
  v->p[v->n] = malloc(len + 1);
  memcpy(v->p[v->n], s, len);
  v->len[v->n] = len, v->special[v->n] = (uint8_t)special;
  v->n++;
}

static void vocab_make(vocab_t *v) {
  v->n = 0;
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    vocab_add(v, &c, 1, 0);
  }
  for (int i = 0; i < NFRAG; i++) vocab_add(v, FRAGS[i], strlen(FRAGS[i]), 0);
  uint32_t r = 12345;
  while (v->n < NPIECE - 4) {
    char buf[64];
    size_t len = 0;
    int k = 2 + (int)((r = r * 1103515245u + 12345u) >> 16) % 2;
    for (int j = 0; j < k; j++) {
      const char *f = FRAGS[((r = r * 1103515245u + 12345u) >> 16) % NFRAG];
      memcpy(buf + len, f, strlen(f)), len += strlen(f);
    }
    vocab_add(v, buf, len, 0);
  }
  vocab_add(v, "<|eot|>", 7, 1);
  vocab_add(v, "<|call|>", 8, 1);
  vocab_add(v, "{", 1, 1); /* a control token whose text would fit */
  vocab_add(v, "", 0, 0);
}

/* The recognizer's own answer for id after f, piece by piece. */
static int ref_allows(const vocab_t *v, const gc_json_fsm_t *f, int id) {
  if (f->call && f->phase == 0 /* C_LEAD */ && f->call->lead >= 0) return id == f->call->lead;
  if (v->special[id] || !v->len[id]) return 0;
  gc_json_fsm_t g = *f;
  return gc_json_fsm_feed(&g, v->p[id], v->len[id]);
}

/* The mask (over n ids: fewer than the vocabulary, all, and past it) and
 * gc_json_allows agree with the recognizer at f for every id. */
static int mask_agrees(const gc_json_vocab_t *jv, const vocab_t *v, const gc_json_fsm_t *f, float *lg, float *out) {
  int ns[3] = {v->n / 2, v->n, v->n + 5};
  for (int t = 0; t < 3; t++) {
    gc_json_mask(jv, f, lg, out, ns[t]);
    for (int id = 0; id < ns[t]; id++) {
      int want = id < v->n && ref_allows(v, f, id);
      if (want ? out[id] != lg[id] : out[id] != -INFINITY) return 0;
      if (t == 1 && gc_json_allows(jv, f, id) != want) return 0;
    }
  }
  return 1;
}

/* The tests' vocabulary, its JSON tables and rows of logits for it
 * (rig_close frees them). */
typedef struct mask_rig {
  vocab_t v;
  gc_json_vocab_t *jv;
  float *lg, *out; /* [v.n + 5] */
} mask_rig_t;

static int rig_open(mask_rig_t *r) {
  gc_err_t e = {0};
  vocab_make(&r->v);
  if (gc_json_vocab_from_pieces((const char *const *)r->v.p, r->v.len, r->v.special, r->v.n, &r->jv, &e)) return 0;
  r->lg = malloc((r->v.n + 5) * sizeof *r->lg), r->out = malloc((r->v.n + 5) * sizeof *r->out);
  for (int id = 0; r->lg && id < r->v.n + 5; id++) r->lg[id] = (float)(id % 97) - 40.0f;
  return r->lg && r->out;
}

static void rig_close(mask_rig_t *r) {
  free(r->lg), free(r->out);
  gc_json_vocab_free(r->jv);
  for (int id = 0; id < r->v.n; id++) free(r->v.p[id]);
}

/* The mask agrees at f before each byte of text and after the last (f
 * fed them, left past text); *states counts the states checked. 0 at the
 * first that disagrees, or a byte f refuses. */
static int rig_walk(mask_rig_t *r, gc_json_fsm_t *f, const char *text, int *states) {
  for (size_t i = 0; i <= strlen(text); i++, ++*states) {
    if (!mask_agrees(r->jv, &r->v, f, r->lg, r->out)) return fprintf(stderr, "  mask differs at byte %zu\n", i), 0;
    if (i < strlen(text) && !gc_json_fsm_feed(f, text + i, 1)) return fprintf(stderr, "  byte %zu refused\n", i), 0;
  }
  return 1;
}

/* Under schema sc, the mask agrees at every byte of each of docs[n], each
 * a complete document; more than least states checked in all. */
static void rig_docs(const gc_json_schema_t *sc, const char *const *docs, int n, int least) {
  static mask_rig_t r;
  CHECK(rig_open(&r));
  int states = 0;
  for (int d = 0; d < n; d++) {
    gc_json_fsm_t f;
    gc_json_fsm_init_schema(&f, sc);
    CHECK(rig_walk(&r, &f, docs[d], &states) && gc_json_fsm_done(&f));
  }
  CHECK(states > least);
  rig_close(&r);
}

/* At every byte of each document (and each call), the mask agrees. */
static void mask_matches_the_recognizer(void) {
  static const char *const DOCS[] = {
      ("  {\"a\": \"x\\n\\u00e9y\\\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 z\", \"b\": [1, -0.5e+10, true, "
       "false, null, {}, [], \"\"], \"c\": {\"d\": -12.25E-3}}"), /* one document, two lines */
      "{\n\t\"k\"\r\n:\n[ 0 , 1e5 ,\"\\/\\b\\f\\r\\t\\\\\"]}",
      "{\"a\":                       1}", /* whitespace up to the limit */
      "{\"\xe4\xb8\xad\":\"\xf0\x9f\x98\x80\"}"};
  static char names[2][GC_JSON_NAME + 1] = {"get", "get_weather"};
  gc_json_call_t calls[2] = {{.lead = -1, .pre = "<tool_call>\n{\"name\": \"", .mid = "\", \"arguments\": ",
                              .post = "}\n</tool_call>", .sep = "\n", .next = "<tool_call>\n{\"name\": \"", .tail = "",
                              .names = names, .nnames = 2},
                             {.lead = NPIECE - 3, .pre = "[{\"name\": \"", .mid = "\", \"arguments\": ", .post = "}",
                              .sep = ", ", .next = "{\"name\": \"", .tail = "]", .names = names, .nnames = 2}};
  static const char *const CALLARGS = "{\"city\": \"Paris \xc3\xa9\", \"n\": [1, 2]}";
  static mask_rig_t r;
  CHECK(rig_open(&r));
  int states = 0;
  for (int d = 0; d < (int)(sizeof DOCS / sizeof *DOCS); d++) {
    gc_json_fsm_t f;
    gc_json_fsm_init(&f);
    CHECK(rig_walk(&r, &f, DOCS[d], &states));
  }
  for (int c = 0; c < 2; c++) { /* two calls */
    char text[512];
    snprintf(text, sizeof text, "%s%s%s%s%s%s%s%s%s{}%s%s", calls[c].pre, names[1], calls[c].mid, CALLARGS,
             calls[c].post, calls[c].sep, calls[c].next, names[0], calls[c].mid, calls[c].post, calls[c].tail);
    gc_json_fsm_t f;
    gc_json_fsm_init_call(&f, &calls[c]);
    CHECK(mask_agrees(r.jv, &r.v, &f, r.lg, r.out));
    states++;
    if (calls[c].lead >= 0) gc_json_take(r.jv, &f, calls[c].lead);
    CHECK(rig_walk(&r, &f, text, &states) && gc_json_fsm_may_end(&f) &&
          gc_json_fsm_done(&f) == (*calls[c].tail != 0));
  }
  CHECK(states > 300);
  rig_close(&r);
}

/* ---- schemas ----------------------------------------------------------- */

/* A pydantic-like schema: $defs and $ref, Optional (anyOf with null),
 * enums, an integer, a number, a list of objects, a dict of integers, an
 * open object with listed properties, a recursive tree. */
static const char *const PERSON =
    "{\"$defs\": {\"Pet\": {\"type\": \"object\", \"properties\": {\"kind\": {\"enum\": [\"cat\", \"dog\", "
    "\"caf\xc3\xa9\"]}, \"age\": {\"type\": \"integer\"}}, \"required\": [\"kind\"], \"additionalProperties\": "
    "false, \"title\": \"Pet\"}, \"Node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"number\"}, "
    "\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/Node\"}}}, \"required\": [\"v\"]}}, "
    "\"title\": \"Person\", \"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", "
    "\"description\": \"d\"}, \"nick\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"null\"}], "
    "\"default\": null}, \"age\": {\"type\": \"integer\"}, \"height\": {\"type\": \"number\"}, \"ok\": "
    "{\"type\": \"boolean\"}, \"pets\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/Pet\"}}, "
    "\"best\": {\"anyOf\": [{\"$ref\": \"#/$defs/Pet\"}, {\"type\": \"null\"}]}, \"scores\": {\"type\": "
    "\"object\", \"additionalProperties\": {\"type\": \"integer\"}}, \"extra\": {\"type\": \"object\", "
    "\"properties\": {\"x\": {\"const\": \"X\"}}, \"additionalProperties\": true}, \"tree\": {\"$ref\": "
    "\"#/$defs/Node\"}, \"any\": {}}, \"required\": [\"name\", \"age\"], \"additionalProperties\": false}";

static gc_json_schema_t *schema_of(const char *text) {
  gc_json_schema_t *s = NULL;
  gc_err_t e = {0};
  if (gc_json_schema_new(text, strlen(text), &s, &e)) fprintf(stderr, "schema: %s\n", e.msg);
  return s;
}

/* Bytes of s the recognizer under schema sc accepts; *done whether it is complete at its end. */
static size_t srun(const gc_json_schema_t *sc, const char *s, int *done) {
  gc_json_fsm_t f;
  gc_json_fsm_init_schema(&f, sc);
  size_t n = strlen(s), i = 0;
  while (i < n && gc_json_fsm_feed(&f, s + i, 1)) i++;
  *done = i == n && gc_json_fsm_done(&f);
  return i;
}
static int sok(const gc_json_schema_t *sc, const char *s) {
  int done;
  return srun(sc, s, &done) == strlen(s) && done;
}
static int srefused(const gc_json_schema_t *sc, const char *s, size_t at) {
  int done;
  return srun(sc, s, &done) == at;
}

static void schemas(void) {
  gc_json_schema_t *s = schema_of(PERSON);
  CHECK(s != NULL);
  if (!s) return;
  CHECK(sok(s, "{\"name\": \"Ann\", \"age\": 31}"));
  CHECK(sok(s, "{\"age\": -0, \"name\": \"\\u00e9\"}")); /* any order; a free string's escapes */
  CHECK(sok(s, "{\"name\": \"A\", \"age\": 3, \"nick\": null, \"height\": 1.5e3, \"ok\": false, \"pets\": "
               "[{\"kind\": \"caf\xc3\xa9\", \"age\": 2}, {\"kind\": \"dog\"}], \"best\": null, \"scores\": "
               "{\"m\": 1, \"\\n\": -2}, \"extra\": {\"y\": [1], \"x\": \"X\"}, \"tree\": {\"v\": 1, \"kids\": "
               "[{\"v\": -2.5, \"kids\": []}]}, \"any\": [{\"q\": null}]}"));
  CHECK(srefused(s, "{\"name\": \"A\"}", 12));              /* age is required */
  CHECK(srefused(s, "{\"nam\": 1}", 5));                    /* no such key */
  CHECK(srefused(s, "{\"zzz\": 1}", 2));
  CHECK(srefused(s, "{\"age\": 1.5}", 9));                  /* an integer */
  CHECK(srefused(s, "{\"age\": 1e3}", 9));
  CHECK(srefused(s, "{\"age\": \"1\"}", 8));                /* the kind */
  CHECK(srefused(s, "{\"age\": 1, \"age\": 2}", 13));       /* a key read already (\"any\" begins so) */
  CHECK(srefused(s, "{\"name\\u0020\": 1}", 6));            /* names unescaped */
  CHECK(srefused(s, "{\"pets\": [{\"kind\": \"cow\"}]}", 21)); /* the enum */
  CHECK(srefused(s, "{\"pets\": [{\"kind\": \"ca\"}]}", 22));
  CHECK(srefused(s, "{\"pets\": [{\"age\": 1}]}", 19));     /* the pet's kind is required */
  CHECK(srefused(s, "{\"nick\": 1}", 9));                   /* string or null */
  CHECK(srefused(s, "{\"best\": []}", 9));                  /* a pet or null */
  CHECK(srefused(s, "{\"scores\": {\"a\": true}}", 17));    /* a dict of integers */
  CHECK(srefused(s, "{\"extra\": {\"x\": \"Y\"}}", 17));    /* a listed key's const */
  CHECK(srefused(s, "{\"tree\": {\"kids\": []}}", 20));     /* v is required */
  int done;
  CHECK(srun(s, "{\"name\": \"A\", \"age\": 3", &done) == 22 && !done); /* a prefix */
  gc_json_schema_free(s);
  /* every property read: no ',' may follow (nothing could come after it) */
  s = schema_of("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"null\"}}}");
  CHECK(s && srefused(s, "{\"a\": null,", 10) && sok(s, "{}") && sok(s, "{\"a\":null}"));
  gc_json_schema_free(s);
  s = schema_of("{\"type\": \"object\", \"properties\": {}, \"additionalProperties\": false}");
  CHECK(s && sok(s, "{ }") && srefused(s, "{\"", 1));
  gc_json_schema_free(s);
  s = schema_of("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"minItems\": 2, "
                "\"maxItems\": 3, \"items\": {\"type\": \"integer\"}}, \"b\": {\"type\": \"array\", \"maxItems\": 0}}}");
  CHECK(s && sok(s, "{\"a\": [1, 2]}") && sok(s, "{\"a\": [1, 2, 3], \"b\": []}"));
  CHECK(s && srefused(s, "{\"a\": [1]}", 8) && srefused(s, "{\"a\": []}", 7));  /* too few: the ']' */
  CHECK(s && srefused(s, "{\"a\": [1, 2, 3, 4]}", 14) && srefused(s, "{\"b\": [1]}", 7)); /* too many: the ',' */
  gc_json_schema_free(s);
  s = schema_of("{\"type\": \"object\"}"); /* any object */
  CHECK(s && sok(s, "{\"a\": [1, {\"b\": \"\\\"\"}]}"));
  gc_json_schema_free(s);
  /* a required property nested as deep as the levels allow: 32 objects, not 33 */
  char deep[2048], text[4096];
  strcpy(deep, "{\"type\": \"object\", \"properties\": {\"z\": {\"type\": \"null\"}}, \"required\": [\"z\"]}");
  for (int i = 0; i < 31; i++) {
    snprintf(text, sizeof text, "{\"type\": \"object\", \"properties\": {\"a\": %s}, \"required\": [\"a\"]}", deep);
    strcpy(deep, text);
  }
  s = schema_of(deep);
  CHECK(s != NULL);
  gc_json_schema_free(s);
  snprintf(text, sizeof text, "{\"type\": \"object\", \"properties\": {\"a\": %s}, \"required\": [\"a\"]}", deep);
  gc_err_t e = {0};
  CHECK(gc_json_schema_new(text, strlen(text), &s, &e) == GC_EINVAL && strstr(e.msg, "levels"));
}

/* enum and const of any scalar, as their JSON texts; strings' lengths;
 * integers' and numbers' bounds. */
static void enums_and_lengths(void) {
  gc_json_schema_t *s = schema_of(
      "{\"type\": \"object\", \"properties\": {\"n\": {\"enum\": [1, 10, -2.50, 1e3]}, \"m\": {\"enum\": "
      "[\"a\\\"b\", \"x/y\", true, null, 7]}, \"i\": {\"type\": \"integer\", \"enum\": [1.5, 2, \"q\"]}, "
      "\"o\": {\"anyOf\": [{\"const\": 3}, {\"type\": \"null\"}, {\"type\": \"string\", \"maxLength\": 2}]}, "
      "\"s\": {\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}, \"f\": {\"const\": false}}}");
  CHECK(s != NULL);
  if (!s) return;
  CHECK(sok(s, "{\"n\": 1}") && sok(s, "{\"n\": 10}") && sok(s, "{\"n\": -2.50}") && sok(s, "{\"n\":1e3 }"));
  CHECK(srefused(s, "{\"n\": 100}", 8) && srefused(s, "{\"n\": 2}", 6) && srefused(s, "{\"n\": -2.5}", 10));
  CHECK(srefused(s, "{\"n\": 1.0}", 7) && srefused(s, "{\"n\": \"1\"}", 6)); /* the text, not the number */
  CHECK(sok(s, "{\"m\": \"a\\\"b\"}") && sok(s, "{\"m\": \"x/y\"}") && sok(s, "{\"m\": null, \"n\": 1}"));
  CHECK(sok(s, "{\"m\": true}") && sok(s, "{\"m\": 7}") && srefused(s, "{\"m\": \"x\\/y\"}", 8));
  CHECK(srefused(s, "{\"m\": false}", 6) && srefused(s, "{\"m\": 70}", 7));
  CHECK(sok(s, "{\"i\": 2}") && srefused(s, "{\"i\": \"q\"}", 6) && srefused(s, "{\"i\": 1.5}", 6)); /* the type's */
  CHECK(sok(s, "{\"o\": 3}") && sok(s, "{\"o\": null}") && sok(s, "{\"o\": \"ab\"}") && srefused(s, "{\"o\": 4}", 6));
  CHECK(srefused(s, "{\"o\": \"abc\"}", 9));
  CHECK(sok(s, "{\"s\": \"ab\"}") && sok(s, "{\"s\": \"\xc3\xa9\\n\xe4\xb8\xad\"}")); /* characters */
  CHECK(srefused(s, "{\"s\": \"\xc3\xa9\\n\xf0\x9f\x98\x80\"}", 11)); /* the BMP's only: UTF-16 counts alike */
  CHECK(srefused(s, "{\"s\": \"a\"}", 8) && srefused(s, "{\"s\": \"abcd\"}", 10));
  CHECK(sok(s, "{\"s\": \"\\u00e9ab\"}") && srefused(s, "{\"s\": \"\\ud83d\\ude00a\"}", 10)); /* no surrogates */
  CHECK(sok(s, "{\"f\": false}") && srefused(s, "{\"f\": true}", 6));
  gc_json_fsm_t f;
  gc_json_fsm_init_schema(&f, s);
  CHECK(gc_json_fsm_feed(&f, "{\"n\": 1", 7) && !gc_json_fsm_done(&f) && gc_json_fsm_feed(&f, "0}", 2) &&
        gc_json_fsm_done(&f));
  gc_json_schema_free(s);
  /* integers between bounds: each digit leaves one that can be finished */
  s = schema_of("{\"type\": \"object\", \"properties\": {\"r\": {\"type\": \"integer\", \"minimum\": 1, "
                "\"maximum\": 5}, \"p\": {\"type\": [\"integer\", \"null\"], \"exclusiveMinimum\": 0}, "
                "\"q\": {\"type\": \"integer\", \"minimum\": -2.5, \"exclusiveMaximum\": 120.0}, "
                "\"z\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 0}, \"k\": {\"type\": \"integer\", "
                "\"maximum\": -10}}}");
  CHECK(s != NULL);
  if (!s) return;
  CHECK(sok(s, "{\"r\": 1}") && sok(s, "{\"r\": 5}") && srefused(s, "{\"r\": 6}", 6) && srefused(s, "{\"r\": 0}", 6));
  CHECK(srefused(s, "{\"r\": -1}", 6) && srefused(s, "{\"r\": 10}", 7) && srefused(s, "{\"r\": 1.0}", 7));
  CHECK(sok(s, "{\"p\": 1}") && sok(s, "{\"p\": 999999999999999999}") && sok(s, "{\"p\": null}"));
  CHECK(srefused(s, "{\"p\": 0}", 6) && srefused(s, "{\"p\": -1}", 6) && srefused(s, "{\"p\": 1000000000000000000}", 24));
  CHECK(sok(s, "{\"q\": -2}") && sok(s, "{\"q\": -0}") && sok(s, "{\"q\": 119}") && srefused(s, "{\"q\": -3}", 7));
  CHECK(srefused(s, "{\"q\": 120}", 8) && srefused(s, "{\"q\": 1200}", 8) && sok(s, "{\"q\": 12}"));
  CHECK(sok(s, "{\"q\": 13 }"));
  CHECK(sok(s, "{\"z\": 0}") && sok(s, "{\"z\": -0}") && srefused(s, "{\"z\": 1}", 6) && srefused(s, "{\"z\": 00}", 7));
  CHECK(sok(s, "{\"k\": -10}") && sok(s, "{\"k\": -123}") && srefused(s, "{\"k\": 1}", 6) && srefused(s, "{\"k\": -9}", 8));
  CHECK(srefused(s, "{\"k\": -0}", 7) && srefused(s, "{\"k\": -1}", 8)); /* "-1" may become -10; it may not end */
  gc_json_schema_free(s);
  /* numbers between bounds: at most 15 digits, no exponent, compared exactly */
  s = schema_of("{\"type\": \"object\", \"properties\": {\"c\": {\"type\": \"number\", \"minimum\": 0, "
                "\"maximum\": 1}, \"t\": {\"exclusiveMinimum\": -2.5, \"exclusiveMaximum\": 1e3}, \"u\": {\"type\": "
                "[\"number\", \"null\"], \"maximum\": -0.001}, \"v\": {\"type\": \"number\", \"minimum\": 0.1, "
                "\"maximum\": 0.1}, \"w\": {\"type\": \"number\", \"minimum\": 1e-20}}}");
  CHECK(s != NULL);
  if (!s) return;
  CHECK(sok(s, "{\"c\": 0}") && sok(s, "{\"c\": 1}") && sok(s, "{\"c\": 0.25}") && sok(s, "{\"c\": 1.000}"));
  CHECK(sok(s, "{\"c\": -0.0}") && srefused(s, "{\"c\": 1.01}", 9) && srefused(s, "{\"c\": 2}", 6));
  CHECK(srefused(s, "{\"c\": -0.1}", 9) && srefused(s, "{\"c\": 1e0}", 7) && srefused(s, "{\"c\": 10}", 7));
  CHECK(sok(s, "{\"c\": 0.12345678901234}") && srefused(s, "{\"c\": 0.123456789012345}", 22)); /* 15 digits */
  CHECK(sok(s, "{\"t\": -2.4}") && sok(s, "{\"t\": 999.99}") && srefused(s, "{\"t\": -2.5}", 9));
  CHECK(srefused(s, "{\"t\": 1000}", 9) && srefused(s, "{\"t\": -3}", 7) && sok(s, "{\"t\": \"x\"}"));
  CHECK(sok(s, "{\"u\": -0.001}") && sok(s, "{\"u\": -5}") && srefused(s, "{\"u\": -0.0001}", 11));
  CHECK(srefused(s, "{\"u\": 0}", 6) && sok(s, "{\"u\": null}") && srefused(s, "{\"u\": -0}", 8));
  CHECK(sok(s, "{\"v\": 0.1}") && sok(s, "{\"v\": 0.10}") && srefused(s, "{\"v\": 0.11}", 9));
  CHECK(srefused(s, "{\"v\": 1}", 6) && srefused(s, "{\"v\": 0}", 7));
  CHECK(sok(s, "{\"w\": 0.00000000000001}") && srefused(s, "{\"w\": 0}", 7) && srefused(s, "{\"w\": -1}", 6));
  CHECK(srefused(s, "{\"w\": 123456789012345.", 21) && sok(s, "{\"w\": 12345678901234.5}")); /* no digit after 15 */
  gc_json_schema_free(s);
  /* tuples: each item its prefix's schema, then items' (false: none) */
  s = schema_of("{\"type\": \"object\", \"properties\": {\"t\": {\"type\": \"array\", \"prefixItems\": [{\"type\": "
                "\"integer\"}, {\"type\": \"string\"}], \"items\": false, \"minItems\": 1}, \"u\": {\"prefixItems\": "
                "[{\"const\": true}], \"items\": {\"type\": \"null\"}}}}");
  CHECK(s != NULL);
  if (!s) return;
  CHECK(sok(s, "{\"t\": [1]}") && sok(s, "{\"t\": [1, \"a\"]}") && srefused(s, "{\"t\": []}", 7));
  CHECK(srefused(s, "{\"t\": [\"a\"]}", 7) && srefused(s, "{\"t\": [1, 2]}", 10) && srefused(s, "{\"t\": [1, \"a\",", 13));
  CHECK(sok(s, "{\"u\": []}") && sok(s, "{\"u\": [true, null, null]}") && srefused(s, "{\"u\": [null]}", 7));
  CHECK(srefused(s, "{\"u\": [true, true]}", 13));
  gc_json_schema_free(s);
  /* a tagged union: the tag first, then the object it chooses */
  s = schema_of("{\"$defs\": {\"A\": {\"type\": \"object\", \"properties\": {\"k\": {\"const\": \"a\"}, \"x\": "
                "{\"type\": \"integer\"}}, \"required\": [\"x\", \"k\"], \"additionalProperties\": false}, \"B\": {\"type\": "
                "\"object\", \"properties\": {\"y\": {\"type\": \"null\"}, \"k\": {\"enum\": [\"b\", \"ab\"]}}, \"required\": "
                "[\"k\"]}}, \"type\": \"object\", \"properties\": {\"u\": {\"anyOf\": [{\"$ref\": \"#/$defs/A\"}, {\"$ref\": "
                "\"#/$defs/B\"}, {\"type\": \"null\"}], \"discriminator\": {\"propertyName\": \"k\"}}}}");
  CHECK(s != NULL);
  if (!s) return;
  CHECK(sok(s, "{\"u\": {\"k\": \"a\", \"x\": 1}}") && sok(s, "{\"u\": {\"k\": \"ab\", \"y\": null}}"));
  CHECK(sok(s, "{\"u\": {\"k\": \"b\"}}") && sok(s, "{\"u\": null}"));
  CHECK(srefused(s, "{\"u\": {\"x\": 1, \"k\": \"a\"}}", 8));   /* the tag first */
  CHECK(srefused(s, "{\"u\": {\"k\": \"a\"}}", 15));              /* A requires x */
  CHECK(srefused(s, "{\"u\": {\"k\": \"a\", \"y\": null}}", 18)); /* A's keys, not B's */
  CHECK(srefused(s, "{\"u\": {\"k\": \"b\", \"x\": 1}}", 18) && srefused(s, "{\"u\": {\"k\": \"c\"}}", 13));
  CHECK(srefused(s, "{\"u\": {\"k\": \"a\", \"k\": \"a\"}}", 18)); /* the tag once */
  gc_json_schema_free(s);
  /* near the levels' end: no ',' before a prefix item that would not fit (items would) */
  s = schema_of("{\"type\": \"object\", \"properties\": {\"r\": {\"$ref\": \"#\"}, \"a\": {\"type\": \"array\", "
                "\"prefixItems\": [{\"type\": \"null\"}, {\"$ref\": \"#/$defs/D\"}], \"items\": {\"type\": \"null\"}}}, "
                "\"$defs\": {\"D\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"object\", \"properties\": "
                "{\"y\": {\"type\": \"null\"}}, \"required\": [\"y\"]}}, \"required\": [\"x\"]}}}");
  CHECK(s != NULL);
  if (!s) return;
  for (int k = 28; k <= 29; k++) { /* the array at depth k + 2; D needs 2 more levels */
    char doc[512] = "";
    for (int i = 0; i < k; i++) strcat(doc, "{\"r\":");
    strcat(doc, "{\"a\": [null,");
    int done;
    CHECK(srun(s, doc, &done) == strlen(doc) - (k == 29));
  }
  gc_json_schema_free(s);
  /* the mask under it, piece by piece (bounded strings ask each piece near their end) */
  static const char *const DOCS[] = {"{\"n\": 10, \"m\": \"a\\\"b\", \"s\": \"\xc3\xa9\\t\", \"o\": 3}",
                                     "{\"m\": null , \"s\":\"abc\",\"n\":1e3 , \"o\": \"\"}",
                                     "{\"m\": \"a the\", \"r\": 250, \"n\": 1}", "{\"r\":-5 , \"x\": 0.25, \"n\": 1}", "{\"x\":-1.5}",
                                     "{\"w\": \"ab\\u00e9 \", \"n\": 1}"}; /* a minLength alone: bounded too */
  s = schema_of("{\"type\": \"object\", \"properties\": {\"n\": {\"enum\": [1, 10, 1e3]}, \"m\": {\"enum\": "
                "[\"a\\\"b\", null, \"a the\"]}, \"s\": {\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}, "
                "\"o\": {\"anyOf\": [{\"const\": 3}, {\"type\": \"string\", \"maxLength\": 2}]}, \"r\": {\"type\": "
                "\"integer\", \"minimum\": -5, \"maximum\": 300}, \"x\": {\"type\": \"number\", \"minimum\": -1.5, "
                "\"exclusiveMaximum\": 0.3}, \"w\": {\"type\": \"string\", \"minLength\": 1}}}");
  CHECK(s != NULL);
  if (!s) return;
  rig_docs(s, DOCS, 6, 60);
  gc_json_schema_free(s);
}

/* Strings under patterns: each character must lead on in the pattern's
 * automaton, a character's first bytes (UTF-8, \u digits) only where some
 * character they begin may, the closing quote only where it accepts; and
 * the mask agrees with the recognizer piece by piece. */
static void patterns(void) {
  gc_json_schema_t *s = schema_of("{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", \"pattern\": "
                "\"^\\\\d{2}-[a-c]$\"}, \"e\": {\"type\": \"string\", \"pattern\": \"^[\\u00e9\\u4e2d\\n\\\"\xf0\x9f\x98\x80]+$\"}, "
                "\"h\": {\"pattern\": \"x\", \"maxLength\": 2}, \"u\": {\"anyOf\": [{\"type\": \"string\", "
                "\"pattern\": \"^a\"}, {\"type\": \"null\"}]}, \"m\": {\"pattern\": \"^\xf0\x9f\x98\x80\"}}}");
  CHECK(s != NULL);
  if (!s) return;
  CHECK(sok(s, "{\"d\": \"12-b\"}") && sok(s, "{\"d\": \"\\u00312-c\"}") && srefused(s, "{\"d\": \"1-\"}", 8));
  CHECK(srefused(s, "{\"d\": \"12-d\"}", 10) && srefused(s, "{\"d\": \"12-\"}", 10));
  CHECK(srefused(s, "{\"d\": \"a", 7) && srefused(s, "{\"d\": \"\\u0041", 11) && srefused(s, "{\"d\": \"\\u01", 10));
  CHECK(srefused(s, "{\"d\": \"\\n", 8) && srefused(s, "{\"d\": \"\xc3", 7)); /* no digit begins so */
  CHECK(sok(s, "{\"e\": \"\xc3\xa9\xe4\xb8\xad\\n\\\"\xf0\x9f\x98\x80\\u00e9\\u4E2D\"}")); /* characters, as written or escaped */
  CHECK(srefused(s, "{\"e\": \"\"", 7) && srefused(s, "{\"e\": \"\xc3\xa8", 8) && srefused(s, "{\"e\": \"\xc4", 7));
  CHECK(srefused(s, "{\"e\": \"\xe4\xb8\xae", 9) && srefused(s, "{\"e\": \"\xe5", 7) && srefused(s, "{\"e\": \"\xf0\x9f\x98\x81", 10));
  CHECK(srefused(s, "{\"e\": \"\\u00e8", 12) && srefused(s, "{\"e\": \"\\u00f", 11) && srefused(s, "{\"e\": \"\\u1", 9));
  CHECK(srefused(s, "{\"e\": \"\\ud83d", 9) && srefused(s, "{\"e\": \"\\t", 8) && srefused(s, "{\"e\": \"a", 7));
  CHECK(sok(s, "{\"h\": \"x\"}") && sok(s, "{\"h\": \"ax\"}") && sok(s, "{\"h\": 5}") && srefused(s, "{\"h\": \"ab\"}", 8));
  CHECK(srefused(s, "{\"h\": \"abx\"}", 8) && srefused(s, "{\"h\": \"\"}", 7)); /* maxLength in the automaton */
  CHECK(sok(s, "{\"u\": \"ab\", \"h\": \"xx\"}") && sok(s, "{\"u\": null}") && srefused(s, "{\"u\": \"b\"}", 7));
  CHECK(sok(s, "{\"u\": \"a\", \"d\": \"00-a\"}")); /* a key after a pattern: no pattern */
  CHECK(sok(s, "{\"m\": \"\xf0\x9f\x98\x80\\\\\"}") && srefused(s, "{\"m\": \"\\", 7)); /* no escape reaches U+1F600 */
  /* the mask under it, piece by piece */
  static const char *const DOCS[] = {"{\"d\": \"12-a\", \"e\": \"\xc3\xa9\\n\\u4e2d\\\"\", \"u\": \"a the\"}",
                                     "{\"h\":\"xx\",\"u\" : \"a\\u00e9\\/\"}", "{\"e\": \"\xf0\x9f\x98\x80\\\"\xc3\xa9\"}"};
  rig_docs(s, DOCS, 3, 80);
  gc_json_schema_free(s);
  /* 41 states of one pattern, twice: the mask's cache of 32 states evicts and refills */
  s = schema_of("{\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"string\", \"pattern\": "
                "\"^[a-z]{40}$\"}}}");
  CHECK(s != NULL);
  if (!s) return;
  static const char *const LONG[] = {"{\"k\": \"abcdefghijklmnopqrstuvwxyzabcdefghijklmn\"}",
                                     "{\"k\": \"zyxwvutsrqponmlkjihgfedcbazyxwvutsrqponm\"}"};
  rig_docs(s, LONG, 2, 90);
  gc_json_schema_free(s);
}

/* A forced call's arguments under its name's schema (one name without). */
static void call_arguments_under_schemas(void) {
  static char names[2][GC_JSON_NAME + 1] = {"get", "get_weather"};
  gc_json_schema_t *sch[2] = {NULL, schema_of("{\"type\": \"object\", \"properties\": {\"city\": {\"enum\": "
                                              "[\"Paris\", \"Z\xc3\xbcrich\"]}, \"days\": {\"type\": \"integer\"}}, "
                                              "\"required\": [\"days\"], \"additionalProperties\": false}")};
  CHECK(sch[1] != NULL);
  gc_json_call_t c = {.lead = -1, .pre = "<c>{\"name\": \"", .mid = "\", \"arguments\": ", .post = "}</c>",
                      .sep = "\n", .next = "<c>{\"name\": \"", .tail = "", .names = names, .schemas = sch, .nnames = 2};
  static const struct {
    const char *text;
    size_t accepted; /* bytes; strlen: all */
  } CASES[] = {
      {"<c>{\"name\": \"get_weather\", \"arguments\": {\"days\": 2, \"city\": \"Z\xc3\xbcrich\"}}</c>", 0},
      {"<c>{\"name\": \"get\", \"arguments\": {\"x\": [1.5]}}</c>\n<c>{\"name\": \"get_weather\", \"arguments\": "
       "{\"days\": -1}}</c>", 0},
      {"<c>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", 56},  /* days is required: its closing brace */
      {"<c>{\"name\": \"get_weather\", \"arguments\": {\"days\": 1.5}}", 50},        /* an integer: its point */
      {"<c>{\"name\": \"get_weather\", \"arguments\": {\"x\": 1}}", 42},             /* no such key: its first byte */
      {"<c>{\"name\": \"get\", \"arguments\": {\"x\": 1}}</c>\n<c>{\"name\": \"get_weather\", \"arguments\": "
       "{\"x\"", 88}, /* the second call's schema, not the first's */
  };
  for (size_t i = 0; sch[1] && i < sizeof CASES / sizeof *CASES; i++) {
    gc_json_fsm_t f;
    gc_json_fsm_init_call(&f, &c);
    size_t n = strlen(CASES[i].text), at = 0;
    while (at < n && gc_json_fsm_feed(&f, CASES[i].text + at, 1)) at++;
    CHECK(at == (CASES[i].accepted ? CASES[i].accepted : n));
    if (at != (CASES[i].accepted ? CASES[i].accepted : n)) fprintf(stderr, "  case %zu: %zu bytes\n", i, at);
    if (!CASES[i].accepted) CHECK(gc_json_fsm_may_end(&f));
  }
  /* the mask agrees at every byte of the two-call reply */
  static mask_rig_t r;
  CHECK(rig_open(&r));
  gc_json_fsm_t f;
  gc_json_fsm_init_call(&f, &c);
  int states = 0;
  CHECK(rig_walk(&r, &f, CASES[1].text, &states));
  rig_close(&r);
  gc_json_schema_free(sch[1]);
}

typedef struct reply_case { /* a reply's text; bytes the recognizer accepts of it, then may it end, is it done */
  const char *text;
  size_t accepted;
  int may_end, done;
} reply_case_t;

/* Whether f, fed c's text a byte at a time until it refuses one, agrees with c. */
static int reply_case(gc_json_fsm_t *f, const reply_case_t *c) {
  size_t n = strlen(c->text), at = 0;
  while (at < n && gc_json_fsm_feed(f, c->text + at, 1)) at++;
  return at == c->accepted && gc_json_fsm_may_end(f) == c->may_end && gc_json_fsm_done(f) == c->done;
}

/* guided_choice: the reply is one of the strings, whole; it may end where
 * it is one and a longer one goes on; the mask agrees at every byte. */
static void choices(void) {
  static char *s[4] = {"yes", "no", "yes!", "\"q\" \\ {\xc3\xa9}"};
  static size_t len[4] = {3, 2, 4, 10};
  gc_json_choice_t c = {.s = s, .len = len, .n = 4};
  static const reply_case_t CASES[] = {
      {"yes", 3, 1, 0}, {"yes!", 4, 1, 1}, {"no", 2, 1, 1}, {"n", 1, 0, 0}, {"", 0, 0, 0},
      {"yes!!", 4, 1, 1}, {"x", 0, 0, 0}, {"nope", 2, 1, 1}, {" yes", 0, 0, 0},
      {"\"q\" \\ {\xc3\xa9}", 10, 1, 1}, {"\"q\" \\ {\xc3", 8, 0, 0},
  };
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
    gc_json_fsm_t f;
    gc_json_fsm_init_choice(&f, &c);
    CHECK(reply_case(&f, &CASES[i]));
  }
  static mask_rig_t r;
  CHECK(rig_open(&r));
  for (int k = 0; k < 4; k++) {
    gc_json_fsm_t f;
    int states = 0;
    gc_json_fsm_init_choice(&f, &c);
    CHECK(rig_walk(&r, &f, s[k], &states) && gc_json_fsm_may_end(&f));
  }
  rig_close(&r);
}

/* A reply that must match a pattern whole (vLLM's guided_regex): raw
 * UTF-8, each character leading on, a lead byte only where some character
 * it begins may come; it may end where the match is whole, and is done
 * where nothing may follow. */
static void regexes(void) {
  gc_json_regex_t *rx = NULL;
  gc_err_t e = {0};
  static const char PAT[] = "(yes|no)!?|\\d{2,}|[\xc3\xa9\xe4\xb8\xad]+\n\"";
  CHECK(gc_json_regex_new(PAT, sizeof PAT - 1, &rx, &e) == GC_OK);
  if (!rx) return;
  static const reply_case_t CASES[] = {
      {"yes", 3, 1, 0}, {"yes!", 4, 1, 1}, {"no!x", 3, 1, 1}, {"n", 1, 0, 0}, {"", 0, 0, 0}, {"x", 0, 0, 0},
      {"1", 1, 0, 0}, {"12", 2, 1, 0}, {"1234567", 7, 1, 0}, {"12a", 2, 1, 0}, {" yes", 0, 0, 0},
      {"\xc3\xa9\xe4\xb8\xad\n\"", 7, 1, 1}, {"\xc3\xa9\n", 3, 0, 0}, {"\xc3\xa8", 1, 0, 0}, {"\xc4", 0, 0, 0},
      {"\xe4\xb8\xae", 2, 0, 0}, {"\xe5", 0, 0, 0}, {"\xed\xa0\x80", 0, 0, 0}, {"\xc3\xa9\xc3", 3, 0, 0},
  };
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
    gc_json_fsm_t f;
    gc_json_fsm_init_regex(&f, rx);
    CHECK(reply_case(&f, &CASES[i]));
  }
  static mask_rig_t r;
  CHECK(rig_open(&r));
  static const char *const TEXTS[] = {"yes!", "no", "2024", "\xc3\xa9\xe4\xb8\xad\xc3\xa9\n\""};
  for (int k = 0; k < 4; k++) {
    gc_json_fsm_t f;
    int states = 0;
    gc_json_fsm_init_regex(&f, rx);
    CHECK(rig_walk(&r, &f, TEXTS[k], &states) && gc_json_fsm_may_end(&f));
  }
  rig_close(&r);
  gc_json_regex_t *two = gc_json_regex_ref(rx);
  gc_json_regex_free(rx);
  gc_json_regex_free(two);
  CHECK(gc_json_regex_new("a(?=b)", 6, &rx, &e) == GC_EINVAL && strstr(e.msg, "at byte 1: lookahead") && !rx);
  CHECK(gc_json_regex_new("a$b", 3, &rx, &e) == GC_EINVAL && strstr(e.msg, "no string matches") && !rx);
}

/* Each refused schema's message names its path and what is wrong. */
static void schema_errors(void) {
  static const char *const CASES[][2] = {
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"uniqueItems\": true}}}",
       "schema.properties.a: uniqueItems is supported where the items are one of an enum"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\", \"minimum\": 0.30000000000000004}}}",
       "15 significant digits"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"minimum\": 0.5, \"exclusiveMaximum\": 0.5}}}", "no number"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"number\", \"minimum\": 1e15}}}", "no number"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"minimum\": 0.5, \"maximum\": 0.9}}}",
       "no integer"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"exclusiveMinimum\": 1, "
       "\"exclusiveMaximum\": 2}}}", "no integer"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"minimum\": 1e19}}}", "no integer"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"exclusiveMinimum\": true}}}",
       "are numbers"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"enum\": [1], \"maximum\": 3}}}",
       "beside enum"},
      {"{\"type\": \"array\"}", "the root must allow an object"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "required name"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": [1, {}]}}}", "objects or arrays"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"enum\": [1]}}}", "has the schema's type"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": [\"a\"], \"maxLength\": 3}}}", "beside enum"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": [\"a\"], \"const\": \"a\"}}}", "together"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": [{\"enum\": [1]}, {\"const\": \"a\"}]}}}",
       "in two branches"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"minLength\": 3, \"maxLength\": 2}}}", "minLength is above"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"maxLength\": 1.5}}}", "minLength and maxLength are integers"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"prefixItems\": {}}}}", "prefixItems is a list"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"prefixItems\": [{}], \"items\": false, \"minItems\": 2}}}",
       "minItems is above the prefixItems"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"}, "
       "{\"$ref\": \"#\"}], \"minItems\": 2}}, \"required\": [\"a\"]}", "levels"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"const\": \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}}", "at most 80 bytes"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": "
       "\"number\"}]}}}", "must differ in type"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": [{\"type\": \"object\", \"properties\": {\"k\": "
       "{\"const\": \"x\"}}, \"required\": [\"k\"]}, {\"type\": \"object\", \"properties\": {\"k\": {\"enum\": "
       "[\"y\", \"x\"]}}, \"required\": [\"k\"]}]}}}", "needs a tag"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": [{\"type\": \"object\", \"properties\": {\"k\": "
       "{\"const\": \"x\"}}}, {\"type\": \"object\", \"properties\": {\"k\": {\"const\": \"y\"}}, \"required\": "
       "[\"k\"]}]}}}", "needs a tag"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": [{\"type\": [\"object\", \"null\"]}, {\"type\": "
       "\"object\", \"properties\": {\"k\": {\"const\": \"y\"}}, \"required\": [\"k\"]}]}}}", "must differ in type"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#/$defs/X\"}}}", "names no definition"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"http://x/y\"}}}", "a $ref is"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#\"}}, \"required\": [\"a\"]}", "levels"},
      {"{\"type\": \"object\", \"properties\": {\"a\\\"b\": {}}}", "property name"},
      {"{\"type\": \"object\", \"properties\": {\"a\": false}}", "allows no value"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"strin\"}}}", "type is one of"},
      {"{\"type\": \"object\", \"patternProperties\": {}}", "schema: patternProperties is not supported"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"$ref\": \"#\"}}}", "alone"},
      {"{\"type\": \"object\"} x", "not one JSON value"},
      {"[", "not one JSON value"},
      {"{\"$ref\": \"#\"}", "refers to itself"},
      {"{\"type\": \"object\", \"properties\": true}", "properties is an object"}, /* json-c asserted (fuzz_jsonschema) */
      {"{\"type\": \"object\", \"properties\": {\"a\": {}}, \"required\": \"a\"}", "required is a list"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"anyOf\": {}}}}", "non-empty lists"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"enum\": \"x\"}}}", "non-empty list"},
      {"{\"type\": [\"object\", 3]}", "type is one of"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"minItems\": 3, \"maxItems\": 2}}}", "minItems is above"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"maxItems\": -1}}}", "integers from 0"},
      {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\", \"items\": {\"$ref\": \"#\"}, "
       "\"minItems\": 1}}, \"required\": [\"a\"]}", "levels"},
  };
  for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
    gc_json_schema_t *s = NULL;
    gc_err_t e = {0};
    int rc = gc_json_schema_new(CASES[i][0], strlen(CASES[i][0]), &s, &e);
    CHECK(rc == GC_EINVAL && s == NULL && strstr(e.msg, CASES[i][1]));
    if (rc != GC_EINVAL || !strstr(e.msg, CASES[i][1])) fprintf(stderr, "  case %zu: %s\n", i, e.msg);
    gc_json_schema_free(s);
  }
}

/* Under a schema, at every byte of documents that use each part of it,
 * the mask agrees with the recognizer piece by piece (the shortcuts are
 * for free strings only: keys and enums are asked piece by piece). */
static void schema_mask_matches_the_recognizer(void) {
  static const char *const DOCS[] = {
      "{\"name\": \"x\\n\\u00e9 \xc3\xa9\", \"age\": 3, \"nick\": null, \"height\": -1.5e3, \"ok\": true, "
      "\"pets\": [{\"kind\": \"caf\xc3\xa9\", \"age\": 2}, {\"kind\": \"dog\"}], \"best\": {\"kind\": \"cat\"}, "
      "\"scores\": {\"m\": 1, \"\\n\": -2}, \"extra\": {\"y\": [1], \"x\": \"X\"}, \"tree\": {\"v\": 1, \"kids\": "
      "[{\"v\": -2.5, \"kids\": []}]}, \"any\": [{\"q\": null}]}",
      "  {\n\t\"age\"\r\n:\n0 , \"name\":\"\"}"};
  gc_json_schema_t *sc = schema_of(PERSON);
  CHECK(sc != NULL);
  if (!sc) return;
  rig_docs(sc, DOCS, 2, 300);
  gc_json_schema_free(sc);
}

/* A "<length>\n<bytes>" record from stdin into a new buffer (NULL: none). */
static char *read_record(size_t *n) {
  if (scanf("%zu", n) != 1 || getchar() != '\n' || *n > (1u << 20)) return NULL;
  char *s = malloc(*n + 1);
  if (!s || fread(s, 1, *n, stdin) != *n) return free(s), NULL;
  s[*n] = 0;
  return s;
}

/* `schema`: a schema record, then documents, from stdin: prints "ok" or
 * "error <message>", then "<bytes accepted> <1: complete at the end>" for
 * each document (tests/test_jsonschema.py). */
static int check_schema(void) {
  size_t n;
  char *text = read_record(&n);
  if (!text) return 2;
  gc_json_schema_t *sc = NULL;
  gc_err_t e = {0};
  if (gc_json_schema_new(text, n, &sc, &e)) printf("error %s\n", e.msg);
  else printf("ok\n");
  free(text);
  char *d;
  while (sc && (d = read_record(&n))) {
    gc_json_fsm_t f;
    gc_json_fsm_init_schema(&f, sc);
    size_t i = 0;
    while (i < n && gc_json_fsm_feed(&f, d + i, 1)) i++;
    printf("%zu %d\n", i, i == n && gc_json_fsm_done(&f));
    free(d);
  }
  gc_json_schema_free(sc);
  return 0;
}

/* `regex MODE MIN MAX`: a pattern record (MODE 0: search, 1: full; MIN,
 * MAX characters, -1: none), then strings, from stdin: prints "ok
 * <states>" or "error <message>", then "1" or "0" for each string
 * (whether it is in the pattern's language; tests/test_regex.py). */
static int check_regex(int mode, long min, long max) {
  size_t n;
  char *text = read_record(&n);
  if (!text) return 2;
  gc_re_t re;
  gc_err_t e = {0};
  int rc = gc_re_compile(text, n, mode, min < 0 ? 0 : (uint32_t)min, max < 0 ? UINT32_MAX : (uint32_t)max, &re, &e);
  if (rc) printf("error %s\n", e.msg);
  else printf("ok %d\n", re.nst);
  free(text);
  char *d;
  while (!rc && (d = read_record(&n))) {
    printf("%d\n", gc_re_matches(&re, d, n));
    free(d);
  }
  gc_re_free(&re);
  return 0;
}

/* `walk SEED N`: a schema record from stdin, then N random documents it
 * allows, each written a byte at a time from the bytes the recognizer
 * allows next (biased to close what is open as the document grows), as
 * "<length>\n<bytes>\n". Exit 1, naming the document so far, where no
 * byte may come and the document is not complete: a dead end. */
static int walk(unsigned seed, int count) {
  size_t n;
  char *text = read_record(&n);
  gc_json_schema_t *sc = NULL;
  gc_err_t e = {0};
  if (!text || gc_json_schema_new(text, n, &sc, &e)) return fprintf(stderr, "schema: %s\n", e.msg), free(text), 2;
  free(text);
  static char doc[1 << 16];
  uint32_t r = seed * 2654435761u + 1;
  for (int k = 0; k < count; k++) {
    gc_json_fsm_t f;
    gc_json_fsm_init_schema(&f, sc);
    size_t len = 0;
    while (!gc_json_fsm_done(&f)) {
      double w[256], total = 0;
      for (int c = 0; c < 256; c++) {
        gc_json_fsm_t g = f;
        char ch = (char)c;
        w[c] = 0;
        if (!gc_json_fsm_feed(&g, &ch, 1)) continue;
        int closes = c == '}' || c == ']' || c == '"';
        w[c] = c >= 0x80 ? 0.3 : c == ' ' || c == '\n' ? 0.5 : c == '\\' ? 0.5 : c == ',' ? (len > 300 ? 0.1 : 3) : 1;
        if (closes) w[c] = len > 200 ? 50 + (double)len : 3;
        total += w[c];
      }
      if (total == 0 || len + 1 >= sizeof doc) {
        fprintf(stderr, "dead end after %zu bytes: %.*s\n", len, (int)len, doc);
        return gc_json_schema_free(sc), 1;
      }
      double x = (double)((r = r * 1103515245u + 12345u) >> 8) / (double)(1u << 24) * total;
      int c = 0;
      while (c < 255 && (x -= w[c]) >= 0) c++;
      while (w[c] == 0) c--; /* rounding past the last weight */
      char ch = (char)c;
      gc_json_fsm_feed(&f, &ch, 1);
      doc[len++] = ch;
    }
    printf("%zu\n", len);
    fwrite(doc, 1, len, stdout);
    printf("\n");
  }
  gc_json_schema_free(sc);
  return 0;
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

/* `vocab TOKENIZER`: on a real vocabulary (gc_json_vocab_new), at every
 * byte of a document and of a call, the mask equals gc_json_allows id by
 * id, which equals the recognizer fed each piece. Prints the states
 * checked; exit 1 at the first difference. */
static int check_vocab(const char *path) {
  gc_err_t e = {0};
  gc_tok_t *t;
  gc_json_vocab_t *jv;
  if (gc_tok_load(path, &t, &e) || gc_json_vocab_new(t, &jv, &e)) return fprintf(stderr, "%s\n", e.msg), 2;
  int n = gc_tok_vocab_size(t), states = 0;
  float *lg = malloc((size_t)n * sizeof *lg), *out = malloc((size_t)n * sizeof *out);
  gc_buf_t b = {0};
  for (int id = 0; id < n; id++) lg[id] = (float)(id % 101);
  static char names[1][GC_JSON_NAME + 1] = {"get_weather"};
  gc_json_call_t call = {.lead = -1, .pre = "<tool_call>\n{\"name\": \"", .mid = "\", \"arguments\": ",
                        .post = "}\n</tool_call>", .sep = "\n", .next = "<tool_call>\n{\"name\": \"", .tail = "",
                        .names = names, .nnames = 1};
  const char *docs[2] = {" {\"a\": \"x\\u00e9 \xc3\xa9\xe4\xb8\xad\", \"b\": [1, -2.5e+3, true, null, {}]}",
                         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"c\": \"P\"}}\n</tool_call>"};
  for (int d = 0; d < 2; d++) {
    gc_json_fsm_t f;
    if (d) gc_json_fsm_init_call(&f, &call);
    else gc_json_fsm_init(&f);
    for (size_t i = 0; i <= strlen(docs[d]); i++, states++) {
      gc_json_mask(jv, &f, lg, out, n);
      for (int id = 0; id < n; id++) {
        int ok = gc_json_allows(jv, &f, id), want = 0;
        if (!gc_tok_is_special(t, id) && !gc_tok_piece(t, id, 0, (b.len = 0, &b), &e) && b.len) {
          gc_json_fsm_t g = f;
          want = gc_json_fsm_feed(&g, b.data, b.len);
        }
        if (ok != want || out[id] != (want ? lg[id] : -INFINITY)) {
          fprintf(stderr, "document %d byte %zu: id %d allowed %d, mask %g, recognizer %d\n", d, i, id, ok,
                  out[id], want);
          return 1;
        }
      }
      if (i < strlen(docs[d]) && !gc_json_fsm_feed(&f, docs[d] + i, 1)) return fprintf(stderr, "refused\n"), 1;
    }
  }
  printf("%d states, %d ids\n", states, n);
  gc_buf_free(&b);
  free(lg), free(out);
  gc_json_vocab_free(jv);
  gc_tok_free(t);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "check")) return check_stdin();
  if (argc > 2 && !strcmp(argv[1], "vocab")) return check_vocab(argv[2]);
  if (argc > 1 && !strcmp(argv[1], "schema")) return check_schema();
  if (argc > 4 && !strcmp(argv[1], "regex")) return check_regex(atoi(argv[2]), atol(argv[3]), atol(argv[4]));
  if (argc > 3 && !strcmp(argv[1], "walk")) return walk((unsigned)atoi(argv[2]), atoi(argv[3]));
  check_case("objects and their prefixes", objects_and_prefixes);
  check_case("refusals", refusals);
  check_case("limits", limits);
  check_case("copies", copies_are_independent);
  check_case("call shapes", call_shapes);
  check_case("several calls", several_calls);
  check_case("the mask against the recognizer", mask_matches_the_recognizer);
  check_case("schemas", schemas);
  check_case("schemas refused", schema_errors);
  check_case("enums, string lengths, number bounds", enums_and_lengths);
  check_case("the mask under a schema", schema_mask_matches_the_recognizer);
  check_case("patterns", patterns);
  check_case("a call's arguments under its schema", call_arguments_under_schemas);
  check_case("choices", choices);
  check_case("a reply under a pattern", regexes);
  return check_report();
}
