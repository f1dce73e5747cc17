/* tokenizer.h — text to token ids and back for the Llama family: BPE over a
 * SentencePiece-style vocabulary (▁ for spaces, byte fallback: Llama 2) and
 * byte-level BPE after a pre-tokenizer of regexes applied in turn (Llama 3,
 * GPT-2, and the others llama.cpp has for GGUF files), loaded from a
 * Hugging Face tokenizer.json or from the metadata of a GGUF file; and a
 * streaming decoder that only ever emits whole, valid UTF-8.
 *
 * Invalid UTF-8 in the input is encoded, never refused: each byte of a
 * maximal invalid subpart is its own symbol, so with byte fallback it
 * becomes a <0xXX> token and in byte-level BPE the byte's token (merges
 * within the invalid run still apply); decoding gives the same bytes back.
 * The decoder writes each maximal invalid subpart of the decoded bytes as
 * U+FFFD (what Hugging Face's from_utf8_lossy does). */
#ifndef GC_MODELS_TOKENIZER_H
#define GC_MODELS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

typedef struct gc_tok gc_tok_t;

/* A growable list of token ids. */
typedef struct gc_tok_ids {
  int32_t *v;
  size_t n, cap;
} gc_tok_ids_t;
int gc_tok_ids_push(gc_tok_ids_t *ids, int32_t id, gc_err_t *e);
void gc_tok_ids_free(gc_tok_ids_t *ids);

/* Load a tokenizer from path: a directory (its tokenizer.json, with
 * tokenizer_config.json and generation_config.json beside it when present),
 * a tokenizer.json file (configs beside it likewise), or a .gguf file
 * (tokenizer.ggml.* metadata). Errors, one line naming the file:
 * GC_ENOTFOUND (no tokenizer there), GC_ECORRUPT (truncated JSON or GGUF,
 * merges naming tokens not in the vocabulary, ids out of range),
 * GC_EUNSUPPORTED (model type, normalizer or pre-tokenizer gcore does not
 * implement, named; a GGUF file's add_sep_token true), GC_EIO, GC_ENOMEM. */
int gc_tok_load(const char *path, gc_tok_t **out, gc_err_t *e);
void gc_tok_free(gc_tok_t *t); /* NULL is a no-op */

enum {
  GC_TOK_BOS = 1,     /* encode: prepend the BOS id */
  GC_TOK_SPECIAL = 2, /* encode: text equal to a special (control) token becomes that token; a
                       * user-defined added token (<think>) always does, as in llama.cpp */
  GC_TOK_EOS = 4,     /* encode: append the EOS id (the first end-of-sequence id) */
};

/* Append the ids of text [n bytes, any bytes] to out. flags: GC_TOK_*.
 * Not thread-safe: t keeps a cache of encoded words. Errors: GC_ENOMEM;
 * GC_EINVAL for GC_TOK_BOS when the tokenizer has no BOS. */
int gc_tok_encode(gc_tok_t *t, const char *text, size_t n, int flags, gc_tok_ids_t *out, gc_err_t *e);

/* The flags a prompt is encoded with: GC_TOK_SPECIAL, plus GC_TOK_BOS and
 * GC_TOK_EOS as the tokenizer's add_bos_token and add_eos_token say (what
 * llama.cpp's tokenizing with its special tokens does). */
int gc_tok_prompt_flags(const gc_tok_t *t);

/* Facts. Ids run 0 .. gc_tok_vocab_size - 1. bos is -1 when there is none;
 * add_bos: whether a prompt should start with it (add_bos_token, else 1
 * when there is a BOS). Can't fail. */
int gc_tok_vocab_size(const gc_tok_t *t);
int32_t gc_tok_bos(const gc_tok_t *t);
int gc_tok_add_bos(const gc_tok_t *t);
int gc_tok_is_eos(const gc_tok_t *t, int32_t id);
int gc_tok_is_special(const gc_tok_t *t, int32_t id); /* control tokens (<s>, <|eot_id|>, ...) */
/* The id of the token whose text is exactly s [n] (added tokens first,
 * then the vocabulary in its own spelling), or -1. Can't fail. */
int32_t gc_tok_find(const gc_tok_t *t, const char *s, size_t n);
/* The chat template text from tokenizer_config.json or GGUF, or NULL. */
const char *gc_tok_chat_template(const gc_tok_t *t);
/* "spm" or "byte-level": the kind of vocabulary. */
const char *gc_tok_kind(const gc_tok_t *t);
/* A note for the user on how t encodes, one line without a newline that
 * names the file, or NULL when there is nothing to say. Today: a GGUF
 * vocabulary with no tokenizer.ggml.pre (or "default"), which encodes
 * with llama.cpp's default pre-tokenizer as llama.cpp does, a split that
 * llama.cpp itself warns degrades the model's output. The text lives as
 * long as t. Can't fail. */
const char *gc_tok_note(const gc_tok_t *t);

/* Streaming decoder: feed ids one at a time, get text that is always whole
 * UTF-8 (a code point split across tokens is held back until complete);
 * flush at the end writes what is held as U+FFFD. With
 * GC_TOK_SKIP_SPECIAL, control tokens print nothing. The leading space a
 * SentencePiece-style vocabulary adds to the first word is removed, as
 * the Hugging Face decoder does. */
enum { GC_TOK_SKIP_SPECIAL = 1 };
typedef struct gc_tok_stream {
  const gc_tok_t *t;
  int flags;
  int at_start;          /* no text emitted yet */
  unsigned char pend[4]; /* a valid but incomplete UTF-8 prefix */
  int npend;
} gc_tok_stream_t;
void gc_tok_stream_init(gc_tok_stream_t *s, const gc_tok_t *t, int flags);
/* Append to out the text that id completes. GC_EINVAL for an id outside
 * the vocabulary; GC_ENOMEM. */
int gc_tok_stream_put(gc_tok_stream_t *s, int32_t id, gc_buf_t *out, gc_err_t *e);
int gc_tok_stream_flush(gc_tok_stream_t *s, gc_buf_t *out, gc_err_t *e);
/* The bytes of id alone (appended to out), as it reads inside a text, or
 * with at_start as the first token of one (gc_tok_decode's: the space a
 * SentencePiece vocabulary adds to the first word left out): a
 * SentencePiece piece with its spaces, a byte token as its byte, a
 * control token as its text. They need not be whole UTF-8 (a byte token,
 * a byte-level piece of a character). GC_EINVAL for an id outside the
 * vocabulary; GC_ENOMEM. */
int gc_tok_piece(const gc_tok_t *t, int32_t id, int at_start, gc_buf_t *out, gc_err_t *e);
/* gc_tok_stream_init, for the text generated after prompt[n]: it
 * continues the prompt's text (the first word keeps its space, as
 * llama.cpp, vLLM and transformers' text-generation pipeline give it:
 * prompt + completion reads as one text), unless every prompt id is a
 * control token (a text of its own, as gc_tok_stream_init). */
void gc_tok_stream_after(gc_tok_stream_t *s, const gc_tok_t *t, int flags, const int32_t *prompt, size_t n);
/* Whole-sequence decode: the stream over ids, flushed. */
int gc_tok_decode(const gc_tok_t *t, const int32_t *ids, size_t n, int flags, gc_buf_t *out, gc_err_t *e);

#endif
