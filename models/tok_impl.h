/* tok_impl.h — the inside of gc_tok_t, shared by the encoder/decoder
 * (tokenizer.c) and the two loaders (tok_json.c, tok_gguf.c). A loader
 * fills the vocabulary with tok_set, marks added tokens, adds merges, sets
 * the pre-tokenizer, then calls tok_finish; nothing else writes here. */
#ifndef GC_MODELS_TOK_IMPL_H
#define GC_MODELS_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

/* Token types, numbered as GGUF's token_type. */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };
enum { TOK_SPM = 0, TOK_BYTELEVEL = 1 };
#define TOK_MAX_RE 8 /* regexes in one pre-tokenizer */
/* Bits of gc_tok_t.added: matched in text; whitespace before it (lstrip)
 * or after it (rstrip) is dropped, as Hugging Face's AddedToken flags. */
enum { TOK_ADDED = 1, TOK_LSTRIP = 2, TOK_RSTRIP = 4 };

/* Open-addressing table of ids; keys live elsewhere (token text, pairs). */
typedef struct tok_tab {
  int32_t *slot; /* [mask + 1], -1 = empty */
  uint32_t mask;
} tok_tab_t;

/* A merge: the pair (left, right) becomes id at priority rank (lower first). */
typedef struct tok_merge {
  int32_t left, right, rank, id;
} tok_merge_t;

/* The pair table: (left, right) as one key, with what the pair becomes;
 * one cache line per probe. key UINT64_MAX: empty. */
typedef struct tok_pair {
  uint64_t key;
  int32_t rank, id;
} tok_pair_t;

/* SPM: one character (its UTF-8 bytes packed little-endian) -> token.
 * key UINT32_MAX: empty. */
typedef struct tok_char {
  uint32_t key;
  int32_t id;
} tok_char_t;

struct tok_cache_ent; /* a cached word, tokenizer.c */

struct gc_tok {
  char what[512]; /* the file, for messages */
  int kind;       /* TOK_SPM | TOK_BYTELEVEL */
  int n_vocab, cap_vocab;
  /* token text, in the form the encoder matches: SPM the vocabulary's own
     spelling (▁ for space), byte-level the raw bytes */
  gc_buf_t arena;
  uint32_t *off, *len; /* [n_vocab] into arena; len 0 for unassigned ids */
  uint8_t *type;       /* [n_vocab] TOK_* (0 = unassigned) */
  uint8_t *added;      /* [n_vocab] TOK_ADDED | TOK_LSTRIP | TOK_RSTRIP, or 0 */
  tok_tab_t vocab_ix;  /* text -> id, tokens of the model's vocabulary */
  tok_tab_t added_ix;  /* text -> id, added tokens */
  uint64_t added_lens[4]; /* bit L set: some added token has L bytes (L < 256) */
  int added_max;          /* longest added token */
  uint8_t added_first[256]; /* 1: some added token starts with this byte */
  tok_merge_t *merges;    /* [n_merges] as the loader added them; freed by tok_finish */
  size_t n_merges, cap_merges;
  tok_pair_t *pairs;      /* [pair_mask + 1] open addressing over the merges */
  uint32_t pair_mask;
  tok_char_t *chars;      /* SPM: [char_mask + 1] the single-character tokens */
  uint32_t char_mask;
  int32_t byte_id[256];   /* byte-level: byte -> token; SPM: <0xXX> -> token; -1 none */
  int byte_fallback, unk_id, fuse_unk, ignore_merges;
  int prepend;            /* SPM: prepend ▁ to each text segment (2: the first only) */
  int replace_space;      /* SPM: ' ' -> ▁ */
  int add_prefix_space;   /* byte-level: prepend ' ' when the text does not start with one */
  int split_words;        /* SPM: no token spans a non-▁ followed by ▁, so words may be split there */
  pcre2_code *re;         /* byte-level pre-tokenizer: its first regex (res[0]), NULL for none */
  pcre2_code *res[TOK_MAX_RE]; /* [n_re] its regexes in order: each splits every word the ones
                                  before it made into its matches and the gaps between them
                                  (llama.cpp's regex_exprs; Hugging Face's Sequence of Splits) */
  int n_re;
  pcre2_match_data *md;   /* the bounds of a match, for every regex */
  char *note;             /* gc_tok_note's text, or NULL */
  int32_t bos, eos[16];
  int n_eos, add_bos;     /* add_bos: -1 unset */
  int add_eos;            /* append the first eos to a prompt (add_eos_token) */
  char *chat_template;
  struct tok_cache_ent *cache; /* [TOK_CACHE] */
};

gc_tok_t *tok_new(const char *what, gc_err_t *e);
/* Give id the text s [n] (match form) and type. Grows the vocabulary;
 * GC_ECORRUPT when id is already taken by other text. */
int tok_set(gc_tok_t *t, int32_t id, const char *s, size_t n, int type, gc_err_t *e);
/* Mark id an added token, matched in text before BPE; strip: TOK_LSTRIP|TOK_RSTRIP. */
int tok_mark_added(gc_tok_t *t, int32_t id, int strip, gc_err_t *e);
int tok_add_merge(gc_tok_t *t, int32_t left, int32_t right, int32_t rank, int32_t id, gc_err_t *e);
/* The id of vocabulary text s [n], or -1 (valid once tok_index ran). */
int32_t tok_lookup(const gc_tok_t *t, const char *s, size_t n);
/* Build the text indexes (after every tok_set and tok_mark_added). */
int tok_index(gc_tok_t *t, gc_err_t *e);
/* Append a regex to the byte-level pre-tokenizer (the first one sets it):
 * each regex splits every word the ones before it made into its matches
 * and the gaps between them, a word being the whole subject (a lookahead
 * sees its end as the end of the text). PCRE2 with UTF and Unicode
 * properties (\p{L}; \s \d \w by Unicode too); $ matches at the very end
 * only (Rust's and ECMAScript's); (?i:'s|'t|'re|'ve|'m|'ll|'d) is matched
 * as the JavaScript reference and llama.cpp spell it out. Errors, naming
 * the file: GC_EUNSUPPORTED (does not compile; more than TOK_MAX_RE),
 * GC_ENOMEM. */
int tok_set_regex(gc_tok_t *t, const char *pattern, gc_err_t *e);
/* Byte tables, merge index, checks; the last step of a loader. */
int tok_finish(gc_tok_t *t, gc_err_t *e);
/* Append to out the UTF-8 of GPT-2's byte-to-unicode map for byte b. */
int tok_bytelevel_char(unsigned b, gc_buf_t *out, gc_err_t *e);
/* Decode byte-level text s [n] into raw bytes (appended to out); -1 when a
 * character is outside the 256 of the map. */
int tok_bytelevel_decode(const char *s, size_t n, gc_buf_t *out, gc_err_t *e);

int tok_load_json(const char *json_path, const char *dir, gc_tok_t **out, gc_err_t *e);
int tok_load_gguf(const char *path, gc_tok_t **out, gc_err_t *e);

/* GPT-2's regex as Hugging Face's ByteLevel pre-tokenizer has it (the GGUF
 * loader has llama.cpp's regexes, tok_gguf.c). */
#define TOK_GPT2_REGEX \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

#endif
