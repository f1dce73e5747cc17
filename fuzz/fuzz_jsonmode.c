/* fuzz_jsonmode.c — JSON mode's token mask (models/jsonmode.h) against
 * its own recognizer, piece by piece: a differential target. The input's
 * first part is a reply (a leading 'C': tool calls in Hermes' blocks, 'M':
 * in Mistral's array after its control token, each of two names, 'S': in
 * Hermes' blocks with one name's arguments under a JSON Schema, 'K': one
 * of guided_choice's strings, 'R': one whole match of a pattern
 * (guided_regex), 'P': an object whose strings are under patterns; else a
 * bare object), the other parts (FZ_SEP)
 * the pieces of a vocabulary (every fifth a control token), as a
 * tokenizer file would hand them out. At each byte of the reply the
 * recognizer accepts (up to REPLY_MAX) the mask and gc_json_allows must
 * say, for every id, what feeding that piece to a copy of the recognizer
 * says; a difference aborts (a finding). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../models/jsonmode.h"

#define PIECES_MAX 64
#define REPLY_MAX 256

/* The recognizer's own answer for piece id after f. */
static int want(const gc_json_fsm_t *f, const char *p, size_t n, int special, int id) {
  if (f->call && f->phase == 0) return id == f->call->lead; /* before a call's lead token */
  if (special || !n) return 0;
  gc_json_fsm_t g = *f;
  return gc_json_fsm_feed(&g, p, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *part[PIECES_MAX + 1];
  size_t len[PIECES_MAX + 1];
  int np = fz_split(data, size, part, len, PIECES_MAX + 1) - 1;
  const char *pieces[PIECES_MAX];
  size_t plen[PIECES_MAX];
  uint8_t special[PIECES_MAX];
  for (int i = 0; i < np; i++)
    pieces[i] = (const char *)part[i + 1], plen[i] = len[i + 1], special[i] = (uint8_t)(i % 5 == 4);
  gc_err_t e;
  gc_json_vocab_t *v;
  if (gc_json_vocab_from_pieces(pieces, plen, special, np, &v, &e)) abort(); /* only out of memory */
  static char names[2][GC_JSON_NAME + 1] = {"get", "get_weather"};
  gc_json_call_t hermes = {.lead = -1, .pre = "<tool_call>\n{\"name\": \"", .mid = "\", \"arguments\": ",
                          .post = "}\n</tool_call>", .sep = "\n", .next = "<tool_call>\n{\"name\": \"", .tail = "",
                          .names = names, .nnames = 2};
  gc_json_call_t array = {.lead = np > 4 ? 4 : -1, .pre = " [{\"name\": \"", .mid = "\", \"arguments\": ", .post = "}",
                         .sep = ", ", .next = "{\"name\": \"", .tail = "]", .names = names, .nnames = 2};
  /* 'S': Hermes' blocks, get_weather's arguments under a schema */
  static const char SCHEMA[] = "{\"type\": \"object\", \"properties\": {\"city\": {\"enum\": [\"Paris\", "
                               "\"Z\\u00fcrich\"]}, \"days\": {\"type\": \"integer\"}, \"n\": {\"anyOf\": [{\"type\": "
                               "\"number\"}, {\"type\": \"null\"}]}}, \"required\": [\"days\"]}";
  gc_json_schema_t *sch[2] = {NULL, NULL};
  if (gc_json_schema_new(SCHEMA, sizeof SCHEMA - 1, &sch[1], &e)) abort();
  gc_json_call_t typed = hermes;
  typed.schemas = sch;
  const char *reply = (const char *)part[0];
  size_t rn = len[0];
  gc_json_fsm_t f;
  const gc_json_call_t *call = rn && reply[0] == 'C'   ? &hermes
                               : rn && reply[0] == 'M' ? &array
                               : rn && reply[0] == 'S' ? &typed
                                                       : NULL;
  /* 'K': guided_choice's strings */
  static char *cs[4] = {"yes", "no", "yes!", "\"q\" \xc3\xa9"};
  static size_t clen[4] = {3, 2, 4, 6};
  gc_json_choice_t choice = {.s = cs, .len = clen, .n = 4};
  /* 'R': a pattern the whole reply matches; 'P': patterns in a schema */
  static const char PAT[] = "(yes|no)!?|\\d{2,4}|[\"\\\\a-c\xc3\xa9\xe4\xb8\xad\n]+x?|\\u00e8.";
  static const char PSCHEMA[] = "{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", \"pattern\": "
                                "\"^\\\\d{4}-\\\\d{2}$\"}, \"e\": {\"pattern\": \"[a\\u00e9\\\"\\\\\\\\]\", \"maxLength\": 3}}}";
  gc_json_regex_t *rx = NULL;
  gc_json_schema_t *psch = NULL;
  if (gc_json_regex_new(PAT, sizeof PAT - 1, &rx, &e) || gc_json_schema_new(PSCHEMA, sizeof PSCHEMA - 1, &psch, &e))
    abort();
  if (call) {
    gc_json_fsm_init_call(&f, call);
    reply++, rn--;
  } else if (rn && reply[0] == 'K') {
    gc_json_fsm_init_choice(&f, &choice);
    reply++, rn--;
  } else if (rn && reply[0] == 'R') {
    gc_json_fsm_init_regex(&f, rx);
    reply++, rn--;
  } else if (rn && reply[0] == 'P') {
    gc_json_fsm_init_schema(&f, psch);
    reply++, rn--;
  } else
    gc_json_fsm_init(&f);
  float lg[PIECES_MAX + 2], out[PIECES_MAX + 2];
  for (int id = 0; id < np + 2; id++) lg[id] = (float)id;
  for (size_t i = 0; i <= rn && i <= REPLY_MAX; i++) {
    gc_json_mask(v, &f, lg, out, np + 2);
    for (int id = 0; id < np + 2; id++) {
      int w = id < np && want(&f, pieces[id], plen[id], special[id], id);
      if (gc_json_allows(v, &f, id) != w || out[id] != (w ? lg[id] : -INFINITY)) abort();
    }
    if (f.call && f.phase == 0) /* a call's lead token, then the reply's bytes */
      gc_json_take(v, &f, call->lead), i--;
    else if (i == rn || !gc_json_fsm_feed(&f, reply + i, 1))
      break;
  }
  gc_json_vocab_free(v);
  gc_json_schema_free(sch[1]);
  gc_json_schema_free(psch);
  gc_json_regex_free(rx);
  return 0;
}
