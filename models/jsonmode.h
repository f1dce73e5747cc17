/* jsonmode.h — JSON mode (OpenAI's response_format {"type":
 * "json_object"}): which tokens keep a reply the beginning of one JSON
 * object (RFC 8259), so that a sampler restricted to them writes one.
 *
 * Two parts: a byte-level pushdown recognizer of "a prefix of one JSON
 * object, and nothing after it", and the vocabulary's pieces (each token's
 * bytes, gc_tok_piece) run through a copy of it. The recognizer knows the
 * grammar only (no schema); it bounds what a model could otherwise spin
 * forever on: GC_JSON_WS whitespace bytes in a row outside strings,
 * GC_JSON_DEPTH levels of nesting. Strings must be UTF-8 (no overlong
 * forms, no surrogates, nothing past U+10FFFF); escapes are JSON's. */
#ifndef GC_MODELS_JSONMODE_H
#define GC_MODELS_JSONMODE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "sampler.h"
#include "tokenizer.h"

#define GC_JSON_DEPTH 32 /* objects and arrays inside one another */
#define GC_JSON_WS 24    /* whitespace bytes in a row outside strings */

/* Tool calls as a chat template spells them (tool_choice "required" or
 * a named function): the control token lead (-1: none), the text pre, one
 * of the names (each 1 .. 64 bytes that need no escape in a JSON string),
 * the text mid, a JSON object (the arguments), the text post; then, where
 * sep is not NULL, any number of further calls, each sep, next (the later
 * calls' pre), a name, mid, an object, post; then the text tail. sep and
 * next are not empty; sep and tail differ in their first byte (tail may be empty: the reply may then
 * end after any call's post). */
#define GC_JSON_NAME 64
#define GC_JSON_LIT 80 /* bytes of an enum or const value's JSON text */
typedef struct gc_json_schema gc_json_schema_t; /* below */
typedef struct gc_json_call {
  int32_t lead;
  const char *pre, *mid, *post; /* static text */
  const char *sep, *next, *tail; /* several calls (sep: NULL for one call); tail: "" for none */
  char (*names)[GC_JSON_NAME + 1]; /* [nnames] (owned) */
  gc_json_schema_t **schemas; /* [nnames] each name's arguments' schema (owned references; an entry
                                 or the array NULL: any object) */
  int nnames;
} gc_json_call_t;

/* Frees c's names and drops its schemas' references (c itself: the caller's). */
void gc_json_call_clear(gc_json_call_t *c);

/* A JSON Schema compiled for the recognizer (immutable once made:
 * recognizers and threads share it). The subset (what OpenAI's strict
 * structured outputs and pydantic's models write):
 * - type (a name or a list of them): object, array, string, integer,
 *   number, boolean, null; no type: any value; nullable true (OpenAPI 3.0's,
 *   as OpenAI's zod helper writes .nullable()): null too;
 * - object: properties (names of 1 .. GC_JSON_NAME bytes, no '"', '\' or
 *   control bytes; at most 64), required (names among them);
 *   additionalProperties false or absent: no other keys (as OpenAI's strict
 *   mode writes every schema); propertyNames with pattern, minLength and
 *   maxLength (a dict's constrained keys; every listed name must match);
 * - array: prefixItems (the first items' schemas; at most 64), items (the
 *   others'; absent: any values; false: none), minItems, maxItems;
 *   uniqueItems where the items are one of an enum of strings, true, false
 *   and null (pydantic's sets of a Literal or an Enum: each value at most
 *   once) or at most one item may come;
 * - number: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers of
 *   at most 15 significant digits), multipleOf (one above 0, exact in units
 *   of 10^-15): an integer they bound is written with at most 18 digits, a
 *   number with at most 15 and no exponent (so that its decimal value
 *   compares as its double does), and a multiple is exact on the decimal;
 * - string: minLength, maxLength (characters: code points; a string they
 *   bound has no \uD800-\uDFFF escapes, since a pair is one character);
 *   pattern (ECMA-262, regex.h's subset; the string contains a match, as
 *   JSON Schema reads it; characters are code points), its automaton
 *   counting minLength and maxLength too, at most 32 distinct patterns;
 *   not beside enum or const; format date, time, date-time, uuid, ipv4 or
 *   email, as OpenAI's structured outputs enforce them, read as the
 *   pattern of its strings (jsonschema.c: FORMATS; not beside a pattern);
 * - enum or const: strings, numbers, true, false, null (not objects or
 *   arrays), each written as its JSON text (json-c's: a number as the
 *   schema spells it), at most GC_JSON_LIT bytes; values not of the
 *   schema's type are left out (none left: refused); not beside
 *   minLength, maxLength or the integer bounds;
 * - anyOf / oneOf whose branches begin with different bytes (their types
 *   differ; integer within number), except that two or more branches that
 *   are objects may be told apart by a tag (pydantic's discriminated
 *   union): a property each requires with string enums or consts, no
 *   string in two of them; the tag is then written first and chooses the
 *   object; allOf of one schema;
 * - $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion
 *   allowed: depth is GC_JSON_DEPTH's);
 * - annotations ignored: title, description, default, examples, other
 *   formats (an annotation in JSON Schema 2020-12), $schema, $id, $comment,
 *   deprecated, readOnly, writeOnly, strict, $defs, definitions,
 *   discriminator (OpenAPI's; the tag is found without it).
 * Anything else (if/then/else, patternProperties, minProperties, ...) is refused
 * with its path, never ignored; the root must be an object schema.
 * Reference-counted (gc_json_schema_ref), so that requests share one. */

/* vLLM's guided_choice: the reply is exactly one of n strings (any bytes,
 * 1 .. GC_JSON_CHOICE_LEN each; at most GC_JSON_CHOICES of them). */
#define GC_JSON_CHOICES 64
#define GC_JSON_CHOICE_LEN 1024
typedef struct gc_json_choice {
  char **s;    /* [n] (owned) */
  size_t *len; /* [n] (owned) */
  int n;
} gc_json_choice_t;

/* vLLM's guided_regex: the reply is one whole match of a pattern (regex.h,
 * read GC_RE_FULL), as its UTF-8 characters (not JSON). Immutable once
 * made, reference-counted like a schema. */
typedef struct gc_json_regex gc_json_regex_t;

typedef struct gc_json_fsm {
  uint8_t st;    /* where in the grammar (jsonmode.c: enum jstate) */
  uint8_t aux;   /* literal: bytes matched; \u: hex digits left; UTF-8: bytes left */
  uint8_t lo, hi; /* UTF-8: the range of the next continuation byte */
  uint8_t key;   /* the string being read is an object's key */
  uint8_t lit;   /* the literal being read: 0 true, 1 false, 2 null */
  uint8_t ws;    /* whitespace bytes in a row */
  uint8_t depth; /* open objects and arrays */
  /* a schema (gc_json_fsm_init_schema), or NULL: any object */
  const gc_json_schema_t *schema;
  int16_t vnode;  /* the node of the value after the key just read */
  int16_t cset;   /* the key being read must be one of: -1 any, -2 its object's unread
                     property names, -3 any (looked up at its end); else the value being
                     read (J_ELIT) is one of node cset's enum texts */
  uint8_t intg;   /* the number being read is an integer */
  uint8_t ineg, ind; /* ... bounded (inode > 0): its '-', its digits so far */
  int16_t inode;  /* the bounded integer's node (0: no bounds) */
  int16_t dnode;  /* the bounded number's node (0: none): its text so far in sbuf */
  int64_t iv;     /* ... the value of its digits so far */
  uint8_t slen;   /* bytes of the constrained key or enum text read, in sbuf */
  uint8_t hs;     /* a \u escape's first digit was d or D */
  uint32_t sn, smin, smax; /* the string being read: characters so far; at least, at most */
  int16_t re;     /* ... its pattern's automaton, schema->res[re - 1] (0: none): in state rst, */
  int16_t rst;
  uint32_t cp;    /* ... the bits of the character being read (UTF-8 or a \u escape) */
  char sbuf[GC_JSON_LIT];
  /* a pattern the whole reply matches (gc_json_fsm_init_regex), or NULL:
     its automaton in state rst, a character's bytes in aux, lo, hi, cp */
  const gc_json_regex_t *rx;
  /* choices (gc_json_fsm_init_choice), or NULL */
  const gc_json_choice_t *choice;
  uint64_t cand; /* the choices the reply so far begins (bit i: choice i) */
  uint32_t coff; /* bytes of the reply so far */
  /* a call's shape (gc_json_fsm_init_call), or NULL: the fields above read its object */
  const gc_json_call_t *call;
  uint8_t phase;  /* which part of it */
  uint8_t off;    /* bytes of the part's text read */
  uint8_t nlen;   /* bytes of the name read */
  char name[GC_JSON_NAME];
  /* each open object or array, outermost first; last, so that a copy of
     the recognizer need take only lv[0, depth) (jsonmode.c: fsm_copy) */
  struct {
    uint64_t seen; /* an object's properties read (bit i: its i-th) */
    uint32_t count; /* an array's items begun (saturating) */
    int16_t node;  /* its schema node */
    uint8_t open;  /* '{' or '[' */
  } lv[GC_JSON_DEPTH];
} gc_json_fsm_t;

/* Before the reply's first byte: whitespace, then '{'. Can't fail. */
void gc_json_fsm_init(gc_json_fsm_t *f);
/* Before a reply that must be the call(s) of c (which outlives f). Can't fail. */
void gc_json_fsm_init_call(gc_json_fsm_t *f, const gc_json_call_t *c);
/* Before a reply that must be one of c's strings (c outlives f, 1 <= c->n <=
 * GC_JSON_CHOICES). Can't fail. */
void gc_json_fsm_init_choice(gc_json_fsm_t *f, const gc_json_choice_t *c);
/* c's strings freed (c itself: the caller's). */
void gc_json_choice_clear(gc_json_choice_t *c);
/* Before a reply that must be one whole match of r (which outlives f). Can't fail. */
void gc_json_fsm_init_regex(gc_json_fsm_t *f, const gc_json_regex_t *r);
/* r compiled from the pattern [pat, pat + n) (untrusted: a client's).
 * Errors: GC_EINVAL, what is wrong or not supported and where (regex.h);
 * GC_ENOMEM. */
int gc_json_regex_new(const char *pat, size_t n, gc_json_regex_t **out, gc_err_t *e);
/* r with one more reference (r may be NULL); gc_json_regex_free drops one,
 * the last frees it (thread-safe). */
gc_json_regex_t *gc_json_regex_ref(gc_json_regex_t *r);
void gc_json_regex_free(gc_json_regex_t *r); /* NULL is a no-op */

/* Before a reply that must be one JSON object valid under schema s (which
 * outlives f). Can't fail. */
void gc_json_fsm_init_schema(gc_json_fsm_t *f, const gc_json_schema_t *s);
/* s compiled from the JSON text [text, text + n) (untrusted: a client's).
 * Errors: GC_EINVAL, the message naming the path and what is wrong or
 * not supported ("schema.properties.age: minimum is not supported");
 * GC_ENOMEM. */
int gc_json_schema_new(const char *text, size_t n, gc_json_schema_t **out, gc_err_t *e);
/* s with one more reference (s may be NULL); gc_json_schema_free drops one,
 * the last frees it (thread-safe). */
gc_json_schema_t *gc_json_schema_ref(gc_json_schema_t *s);
void gc_json_schema_free(gc_json_schema_t *s); /* NULL is a no-op */

/* Read n bytes: 1 while everything read is the beginning of one JSON
 * object with nothing after it; 0 at the first byte that makes it not
 * (f is then left at that byte's state and must not be fed again). */
int gc_json_fsm_feed(gc_json_fsm_t *f, const char *s, size_t n);
/* Whether the object (or the calls, the choice, the pattern's match) is
 * complete and no byte may follow. */
int gc_json_fsm_done(const gc_json_fsm_t *f);
/* Whether the reply may end here: done, after a call's post where
 * another call may follow and the tail is empty, (choices) where the
 * reply is one choice and a longer one begins with it, or (a pattern)
 * where the reply so far matches it whole. */
int gc_json_fsm_may_end(const gc_json_fsm_t *f);

/* Every token's piece, once per vocabulary (immutable: threads share it). */
typedef struct gc_json_vocab gc_json_vocab_t;
/* Errors: GC_ENOMEM. */
int gc_json_vocab_new(const gc_tok_t *t, gc_json_vocab_t **out, gc_err_t *e);
/* The same from n pieces given as bytes (pieces[id], lens[id] bytes;
 * special[id]: a control token): tests and tools without a tokenizer.
 * Errors: GC_ENOMEM. */
int gc_json_vocab_from_pieces(const char *const *pieces, const size_t *lens, const uint8_t *special, int n,
                              gc_json_vocab_t **out, gc_err_t *e);
void gc_json_vocab_free(gc_json_vocab_t *v); /* NULL is a no-op */
/* Whether token id may come next after what f has read: not a control
 * token (but a call's lead, first), a piece of one byte or more, and f
 * still a prefix after it. An
 * id outside the vocabulary: 0. (After the object is complete no token
 * is allowed here: the caller ends the reply with an end token.) */
int gc_json_allows(const gc_json_vocab_t *v, const gc_json_fsm_t *f, int32_t id);
/* out[0, n) := logits[id] where gc_json_allows(v, f, id), else -inf (ids
 * past the vocabulary: -inf). The same as asking for each id, faster:
 * inside a string the pieces known to stay text there pass without a
 * look (most of them), and only the others are asked; outside strings the
 * pieces are grouped by their first byte (those that begin with
 * whitespace by their first other byte), and a group that cannot begin
 * so is refused whole (most of them). */
void gc_json_mask(const gc_json_vocab_t *v, const gc_json_fsm_t *f, const float *logits, float *out, int n);
/* The next token of a reply that f has read so far, from logits[n]: once
 * f is done, end; else smp's draw among the ids f allows (row[n]: scratch,
 * the others at -inf, as llama.cpp applies a grammar before its samplers),
 * the end id too, with its own logit, where f may end; a greedy draw tries
 * the row's own argmax first (the restricted row's where it is allowed).
 * f reads the token (not end). gcore-serve's and gcore-run's JSON modes.
 * Errors: GC_EUNSUPPORTED where no token may come next, or end < 0 is
 * needed. */
int gc_json_sample(const gc_json_vocab_t *v, gc_json_fsm_t *f, gc_sampler_t *smp, int greedy, const float *logits,
                   float *row, int n, int32_t end, int32_t *tok, gc_err_t *e);
/* f advanced past token id (which gc_json_allows). */
void gc_json_take(const gc_json_vocab_t *v, gc_json_fsm_t *f, int32_t id);

#endif
