/* fuzz_jsonschema.c — a client's JSON Schema (models/jsonschema.c, an
 * untrusted reader) and the recognizer walking it. The input's first part
 * is the schema's text, the second a reply, the others (FZ_SEP) the
 * pieces of a vocabulary (every fifth a control token). Where the schema
 * compiles, at each byte of the reply the recognizer accepts (up to
 * REPLY_MAX): it must not be at a dead end (complete, or some byte may
 * come next: the sampler would otherwise have no token to draw), and the
 * mask and gc_json_allows must say, for every id, what feeding that piece
 * to a copy of the recognizer says. Either failing aborts (a finding). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../models/jsonmode.h"

#define PIECES_MAX 64
#define REPLY_MAX 512

static int want(const gc_json_fsm_t *f, const char *p, size_t n, int special) {
  if (special || !n) return 0;
  gc_json_fsm_t g = *f;
  return gc_json_fsm_feed(&g, p, n);
}

/* Complete, or some byte may come next. */
static int alive(const gc_json_fsm_t *f) {
  if (gc_json_fsm_done(f)) return 1;
  for (int c = 0; c < 256; c++) {
    gc_json_fsm_t g = *f;
    char ch = (char)c;
    if (gc_json_fsm_feed(&g, &ch, 1)) return 1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *part[PIECES_MAX + 2];
  size_t len[PIECES_MAX + 2];
  int nparts = fz_split(data, size, part, len, PIECES_MAX + 2), np = nparts > 2 ? nparts - 2 : 0;
  gc_json_schema_t *s;
  gc_err_t e;
  if (gc_json_schema_new((const char *)part[0], len[0], &s, &e)) return 0;
  const char *pieces[PIECES_MAX];
  size_t plen[PIECES_MAX];
  uint8_t special[PIECES_MAX];
  for (int i = 0; i < np; i++)
    pieces[i] = (const char *)part[i + 2], plen[i] = len[i + 2], special[i] = (uint8_t)(i % 5 == 4);
  gc_json_vocab_t *v;
  if (gc_json_vocab_from_pieces(pieces, plen, special, np, &v, &e)) abort(); /* only out of memory */
  const char *reply = nparts > 1 ? (const char *)part[1] : "";
  size_t rn = nparts > 1 ? len[1] : 0;
  gc_json_fsm_t f;
  gc_json_fsm_init_schema(&f, s);
  float lg[PIECES_MAX + 2], out[PIECES_MAX + 2];
  for (int id = 0; id < np + 2; id++) lg[id] = (float)id;
  for (size_t i = 0; i <= rn && i <= REPLY_MAX; i++) {
    if (!alive(&f)) abort();
    gc_json_mask(v, &f, lg, out, np + 2);
    for (int id = 0; id < np + 2; id++) {
      int w = id < np && want(&f, pieces[id], plen[id], special[id]);
      if (gc_json_allows(v, &f, id) != w || out[id] != (w ? lg[id] : -INFINITY)) abort();
    }
    if (i == rn || !gc_json_fsm_feed(&f, reply + i, 1)) break;
  }
  gc_json_vocab_free(v);
  gc_json_schema_free(s);
  return 0;
}
