/* regex.h — regular expressions as JSON Schema's "pattern" and vLLM's
 * guided_regex write them (ECMA-262's syntax), compiled into a DFA over
 * code points that a recognizer steps one character at a time, so that a
 * token mask can ask "may this character come next?" in O(1).
 *
 * The subset: literals; escapes \d \D \w \W \s \S (the sets ECMA's,
 * Python's and Rust's readings agree on: \d is [0-9], \D no script's
 * digit, \w [A-Za-z0-9_], \s the spaces they share; regex.c:
 * add_class_escape),
 * \t \n \r \f \v \0 \xHH \uHHHH, and any escaped character that is not a
 * letter or a digit; '.' (any character but \n, \r, U+2028, U+2029);
 * classes [...] and [^...] with ranges and the escapes above; groups (...)
 * and (?:...); alternation |; the quantifiers * + ? {n} {n,} {n,m} (each
 * also lazy: the same language); ^ and $ (the string's start and end).
 * Refused with a one-line reason: backreferences, lookaround, \b \B,
 * named groups, \p{...}, \cX, flags, a '{' that is not a quantifier, a
 * range out of order, and expressions whose automaton would be too large
 * or too costly to build (a client's pattern must not stall the server).
 *
 * Two readings: GC_RE_SEARCH (JSON Schema's: the string contains a match
 * anywhere, as ECMA's RegExp.test does) and GC_RE_FULL (vLLM's
 * guided_regex: the whole reply is one match). The automaton also counts
 * characters where minlen/maxlen bound the string (JSON Schema's
 * minLength/maxLength beside a pattern), and then allows only the BMP's
 * (so that code points and UTF-16 units count alike). Every state kept can still reach
 * an accepting one within those bounds: a recognizer that only steps to
 * states the table names never reaches a dead end. */
#ifndef GC_MODELS_REGEX_H
#define GC_MODELS_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define GC_RE_MAXCP 0x10FFFF
#define GC_RE_MAXLEN 65536 /* bytes of a pattern */
#define GC_RE_STATES 16384 /* states an automaton may have (counting characters: states times lengths) */

enum { GC_RE_SEARCH = 0, GC_RE_FULL = 1 };

typedef struct gc_re {
  uint64_t id;       /* this compilation's number (never 0; distinct within the process): a cache's key */
  int ncls;          /* classes of code points the pattern tells apart */
  uint32_t *cls_lo;  /* [ncls] class c is [cls_lo[c], cls_lo[c + 1]) (the last: to GC_RE_MAXCP), cls_lo[0] = 0 */
  int nst;           /* states; 0 is the start */
  int16_t *next;     /* [nst * ncls] the state after a character of class c in state s (next[s * ncls + c]),
                        -1: none (no match can go on with it) */
  uint8_t *acc;      /* [nst] the string may end in state s */
  uint8_t ascii[128]; /* the class of each ASCII code point (ncls <= 256) */
} gc_re_t;

/* pat [n bytes of UTF-8] compiled under reading mode (GC_RE_SEARCH or
 * GC_RE_FULL), its strings also of minlen .. maxlen characters (0,
 * UINT32_MAX: unbounded), into *out (the caller's; gc_re_free releases
 * it). Errors: GC_EINVAL, a message saying what is wrong or not supported
 * and where ("at byte 4: lookahead (?= is not supported"), also where no
 * string matches; GC_ENOMEM. Bounded work on any input. */
int gc_re_compile(const char *pat, size_t n, int mode, uint32_t minlen, uint32_t maxlen, gc_re_t *out, gc_err_t *e);
void gc_re_free(gc_re_t *r); /* its arrays (r itself: the caller's); a zeroed r is a no-op */

/* The class of code point cp (<= GC_RE_MAXCP). */
int gc_re_class_of(const gc_re_t *r, uint32_t cp);
static inline int gc_re_class(const gc_re_t *r, uint32_t cp) { return cp < 128 ? r->ascii[cp] : gc_re_class_of(r, cp); }
/* The state after character cp in state s, or -1. */
static inline int gc_re_step(const gc_re_t *r, int s, uint32_t cp) { return r->next[s * r->ncls + gc_re_class(r, cp)]; }
/* Whether some character in [lo, hi], not a surrogate (U+D800..U+DFFF),
 * leads on from state s: the bytes of a character read so far (a UTF-8
 * lead, a \u escape's first digits) narrow it to such a range. */
int gc_re_may(const gc_re_t *r, int s, uint32_t lo, uint32_t hi);
/* Whether string [s, s + n) (UTF-8; no surrogates) is in the language:
 * tests and tools. */
int gc_re_matches(const gc_re_t *r, const char *s, size_t n);

#endif
