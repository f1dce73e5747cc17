/* fuzz_regex.c — a client's pattern (models/regex.c: JSON Schema's
 * pattern, vLLM's guided_regex; an untrusted reader). The input's first
 * byte picks the reading (bit 0: full, else search) and the character
 * bounds (bits 1-3: minLength, bits 4-7: maxLength, 0 or 15: none); then
 * the pattern; then (FZ_SEP) strings. Where the pattern compiles, the
 * automaton must be well formed (every move in range, the start state 0)
 * and every state must still reach an accepting one within the bounds
 * (no dead end for a recognizer); along each string, whether a character
 * leads on must be what gc_re_may says of it alone, and the string's
 * verdict what walking it says. Any failure aborts (a finding). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../models/regex.h"

#define STRINGS_MAX 16

/* Whether every state reaches an accepting one: a breadth-first walk
 * back from the accepting states over the reversed moves. */
static int all_live(const gc_re_t *r) {
  const long E = (long)r->nst * r->ncls;
  int *head = malloc((size_t)r->nst * sizeof *head), *link = malloc((size_t)E * sizeof *link);
  int *q = malloc((size_t)r->nst * sizeof *q), n = 0;
  uint8_t *live = calloc((size_t)r->nst, 1);
  if (!head || !link || !q || !live) abort();
  for (int s = 0; s < r->nst; s++) head[s] = -1;
  for (long i = 0; i < E; i++) { /* move i (from state i / ncls) listed under its target */
    int t = r->next[i];
    if (t >= 0) link[i] = head[t], head[t] = (int)i;
  }
  for (int s = 0; s < r->nst; s++)
    if (r->acc[s]) live[s] = 1, q[n++] = s;
  for (int k = 0; k < n; k++)
    for (int i = head[q[k]]; i >= 0; i = link[i])
      if (!live[i / r->ncls]) live[i / r->ncls] = 1, q[n++] = i / r->ncls;
  free(head), free(link), free(q), free(live);
  return n == r->nst;
}

/* The next code point of UTF-8 s[*i, n) (*i past it), or -1 (invalid: skipped a byte). */
static int32_t next_cp(const uint8_t *s, size_t n, size_t *i) {
  uint32_t c = s[*i];
  int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
  if (k < 0 || *i + (size_t)k >= n) return ++*i, -1;
  uint32_t cp = k ? c & (0x3Fu >> k) : c;
  for (int j = 1; j <= k; j++) {
    if ((s[*i + (size_t)j] & 0xC0) != 0x80) return ++*i, -1;
    cp = cp << 6 | (s[*i + (size_t)j] & 0x3F);
  }
  *i += (size_t)k + 1;
  if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > GC_RE_MAXCP)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return -1;
  return (int32_t)cp;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  const uint8_t *part[STRINGS_MAX + 1];
  size_t len[STRINGS_MAX + 1];
  int nparts = fz_split(data + 1, size - 1, part, len, STRINGS_MAX + 1);
  const int mode = data[0] & 1, lo = (data[0] >> 1) & 7, hi = data[0] >> 4;
  gc_re_t r;
  gc_err_t e;
  if (gc_re_compile((const char *)part[0], len[0], mode ? GC_RE_FULL : GC_RE_SEARCH, lo, hi == 15 ? UINT32_MAX : (uint32_t)hi,
                    &r, &e))
    return 0;
  if (r.nst < 1 || r.ncls < 1 || r.cls_lo[0] != 0) abort();
  for (int c = 1; c < r.ncls; c++)
    if (r.cls_lo[c] <= r.cls_lo[c - 1] || r.cls_lo[c] > GC_RE_MAXCP) abort();
  for (long i = 0; i < (long)r.nst * r.ncls; i++)
    if (r.next[i] < -1 || r.next[i] >= r.nst) abort();
  if (!all_live(&r)) abort(); /* a dead end */
  for (int k = 1; k < nparts; k++) {
    int st = 0, ok = 1, valid = 1;
    for (size_t i = 0; i < len[k];) {
      int32_t cp = next_cp(part[k], len[k], &i);
      if (cp < 0) {
        valid = 0;
        continue;
      }
      int t = ok ? gc_re_step(&r, st, (uint32_t)cp) : -1;
      if (ok && (t >= 0) != gc_re_may(&r, st, (uint32_t)cp, (uint32_t)cp)) abort();
      if (t < 0) ok = 0;
      else st = t;
    }
    if (valid && gc_re_matches(&r, (const char *)part[k], len[k]) != (ok && r.acc[st])) abort();
  }
  gc_re_free(&r);
  return 0;
}
