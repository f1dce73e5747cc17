/* json_mask_bench.c — what JSON mode's token mask (models/jsonmode.c)
 * costs a sampled step on one tokenizer's vocabulary: for each of a few
 * replies cut at a typical point (bare JSON mode, and under a JSON Schema
 * of pydantic's shape), the best of REPS calls of gc_json_mask (and the first
 * alone: a pattern's state fills the mask's cache there)
 * against one gc_json_allows per id (what the mask must equal: checked,
 * id by id, in the same run). Host time, one thread. Prints one JSON line
 * a state and one for the vocabulary's build.
 *   json_mask_bench TOKENIZER [REPS] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/jsonmode.h"

/* name, reply so far, 1: under SCHEMA (a pydantic-like object) */
static const char *const STATES[][3] = {
    {"before the object", "", ""},
    {"after {", "{", ""},
    {"in a key", "{\"na", ""},
    {"after a key's colon", "{\"name\": ", ""},
    {"in a string value", "{\"name\": \"The quick brown ", ""},
    {"in an array", "{\"n\": [1, 2, ", ""},
    {"in a number", "{\"n\": 12", ""},
    {"after a value", "{\"n\": true", ""},
    {"in an escape", "{\"s\": \"a\\u00", ""},
    {"schema: after {", "{", "1"},
    {"schema: in a key", "{\"na", "1"},
    {"schema: after a key's colon", "{\"name\": ", "1"},
    {"schema: in a string value", "{\"name\": \"The quick brown ", "1"},
    {"schema: in an enum", "{\"unit\": \"cel", "1"},
    {"schema: in an integer", "{\"days\": 12", "1"},
    {"schema: after a value", "{\"days\": 12, \"unit\": \"celsius\"", "1"},
    {"schema: in a string of at most 40 characters", "{\"code\": \"The quick brown ", "1"},
    {"schema: in an integer of 1 .. 400", "{\"days\": 1", "1"},
    {"schema: in a number of -90 .. 60", "{\"temp\": -12.", "1"},
    {"schema: in an enum of numbers", "{\"level\": 1", "1"},
    {"schema: in a tagged union's tag", "{\"where\": {\"kind\": \"ci", "1"},
    {"schema: after a tagged union's tag", "{\"where\": {\"kind\": \"city\"", "1"},
    {"schema: in a date's pattern", "{\"date\": \"2024-1", "1"},
    {"schema: in a slug's pattern, at most 40 characters", "{\"slug\": \"the-quick-brown", "1"},
    {"schema: in an e-mail's pattern", "{\"email\": \"jane.doe@exam", "1"},
};
static const char SCHEMA[] =
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"unit\": {\"enum\": "
    "[\"celsius\", \"fahrenheit\"]}, \"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 400}, \"tags\": {\"type\": \"array\", "
    "\"items\": {\"type\": \"string\"}}, \"note\": {\"anyOf\": [{\"type\": \"string\"}, {\"type\": "
    "\"null\"}]}, \"code\": {\"type\": \"string\", \"maxLength\": 40}, \"temp\": {\"type\": \"number\", "
    "\"minimum\": -90, \"maximum\": 60}, \"level\": {\"enum\": [1, 2, 10, null]}, \"where\": {\"oneOf\": "
    "[{\"type\": \"object\", \"properties\": {\"kind\": {\"const\": \"city\"}, \"name\": {\"type\": \"string\"}}, "
    "\"required\": [\"kind\", \"name\"]}, {\"type\": \"object\", \"properties\": {\"kind\": {\"const\": "
    "\"point\"}, \"lat\": {\"type\": \"number\"}}, \"required\": [\"kind\"]}]}, \"date\": {\"type\": "
    "\"string\", \"pattern\": \"^\\\\d{4}-\\\\d{2}-\\\\d{2}$\"}, \"slug\": {\"type\": \"string\", \"pattern\": "
    "\"^[a-z0-9-]+$\", \"maxLength\": 40}, \"email\": {\"type\": \"string\", \"pattern\": "
    "\"^[^@\\\\s]+@[^@\\\\s]+\\\\.[a-z]{2,}$\"}}, \"required\": [\"name\", "
    "\"unit\", \"days\"], \"additionalProperties\": false}";

int main(int argc, char **argv) {
  gc_err_t e = {0};
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  gc_tok_t *t;
  gc_json_vocab_t *v;
  if (argc < 2 || reps < 1) return fprintf(stderr, "usage: json_mask_bench TOKENIZER [REPS]\n"), 2;
  if (gc_tok_load(argv[1], &t, &e)) return fprintf(stderr, "json_mask_bench: %s\n", e.msg), 1;
  double t0 = gc_now();
  if (gc_json_vocab_new(t, &v, &e)) return fprintf(stderr, "json_mask_bench: %s\n", e.msg), 1;
  int n = gc_tok_vocab_size(t);
  printf("{\"vocab\": %d, \"build_ms\": %.3f}\n", n, (gc_now() - t0) * 1e3);
  float *lg = malloc((size_t)n * sizeof *lg), *out = malloc((size_t)n * sizeof *out);
  if (!lg || !out) return fprintf(stderr, "json_mask_bench: out of memory\n"), 1;
  for (int id = 0; id < n; id++) lg[id] = (float)(id % 1009) * 0.01f;
  gc_json_schema_t *sch;
  if (gc_json_schema_new(SCHEMA, sizeof SCHEMA - 1, &sch, &e)) return fprintf(stderr, "json_mask_bench: %s\n", e.msg), 1;
  for (size_t s = 0; s < sizeof STATES / sizeof *STATES; s++) {
    gc_json_fsm_t f;
    if (*STATES[s][2]) gc_json_fsm_init_schema(&f, sch);
    else gc_json_fsm_init(&f);
    if (!gc_json_fsm_feed(&f, STATES[s][1], strlen(STATES[s][1])))
      return fprintf(stderr, "json_mask_bench: state %zu refused\n", s), 1;
    double mask = 1e30, each = 1e30, first = 0;
    int allowed = 0, same = 1;
    for (int r = 0; r < reps; r++) {
      double a = gc_now();
      gc_json_mask(v, &f, lg, out, n);
      double b = gc_now();
      allowed = 0;
      for (int id = 0; id < n; id++) {
        int ok = gc_json_allows(v, &f, id);
        allowed += ok;
        same &= ok ? out[id] == lg[id] : out[id] == -INFINITY;
      }
      double c = gc_now();
      if (!r) first = b - a; /* (a pattern's state: its cache filled) */
      if (b - a < mask) mask = b - a;
      if (c - b < each) each = c - b;
    }
    printf("{\"state\": \"%s\", \"allowed\": %d, \"mask_ms\": %.3f, \"first_ms\": %.3f, \"per_id_ms\": %.3f, "
           "\"same\": %s}\n", STATES[s][0], allowed, mask * 1e3, first * 1e3, each * 1e3, same ? "true" : "false");
    if (!same) return 1;
  }
  gc_json_vocab_free(v);
  gc_json_schema_free(sch);
  gc_tok_free(t);
  free(lg), free(out);
  return 0;
}
