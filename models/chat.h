/* chat.h — the chat templates of Llama 2, Llama 3 and Mistral instruct models, as
 * token ids built piece by piece: control tokens by id, text through the
 * tokenizer with special-token matching off, so a user's text can never
 * smuggle in a control token. Which template applies is read from the
 * chat_template (its markers) or, without one, from the vocabulary. */
#ifndef GC_MODELS_CHAT_H
#define GC_MODELS_CHAT_H

#include "tokenizer.h"

typedef enum gc_chat_kind {
  GC_CHAT_LLAMA2 = 1,  /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] reply </s>, BOS every turn */
  GC_CHAT_LLAMA3 = 2,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
  GC_CHAT_MISTRAL = 3, /* <s>[INST] ... [/INST] reply</s>[INST] ...: BOS once, no system role */
} gc_chat_kind_t;

/* The template for t: "<|start_header_id|>" in the chat template or, with
 * no template, in the vocabulary -> LLAMA3; "[INST]" in the template ->
 * LLAMA2 where it puts BOS before every "[INST]" (bos_token + '[INST]'),
 * else MISTRAL; with no template, an [INST] control token in the
 * vocabulary -> MISTRAL, a SentencePiece vocabulary with BOS and EOS ->
 * LLAMA2. GC_EUNSUPPORTED otherwise, naming what was found. */
int gc_chat_detect(const gc_tok_t *t, gc_chat_kind_t *out, gc_err_t *e);

/* Append to out the ids of one user message. first: the conversation's
 * first message (BOS, and the system prompt when system is non-NULL);
 * reply: the assistant's reply comes next (the Llama 3 template's
 * assistant header; the [INST] templates take user and assistant turns
 * in turn, so reply = 0 is an error there). The user's text is trimmed
 * as the Llama 2 and Llama 3 templates do, not in Mistral's, whose
 * template keeps it as given. [INST] and [/INST] go in by id
 * where the vocabulary has them as control tokens (Mistral v3), else as
 * text. Errors: GC_EINVAL for a user message after a user message or a
 * system prompt in MISTRAL, GC_ENOTFOUND when a control token of the
 * template is missing from the vocabulary; GC_ENOMEM. */
int gc_chat_turn(gc_tok_t *t, gc_chat_kind_t k, int first, int reply, const char *system, const char *user,
                 gc_tok_ids_t *out, gc_err_t *e);

/* The id that closes an assistant reply (<|eot_id|>, </s>), or -1. */
int32_t gc_chat_end_token(const gc_tok_t *t, gc_chat_kind_t k);

/* Append to out the ids of an assistant message written by the client
 * (a conversation's history): its text, special tokens not matched, and
 * end (gc_chat_end_token's id). after_reply: the message before it was an
 * assistant message too, so no user turn opened this reply: the Llama 3
 * template gets its own assistant header; the [INST] templates take user
 * and assistant turns in turn, so after_reply is GC_EINVAL there. Text is
 * trimmed as the Llama 2 and Llama 3 templates do, Mistral's is kept as
 * given. GC_ENOTFOUND, GC_ENOMEM as gc_chat_turn. */
int gc_chat_reply(gc_tok_t *t, gc_chat_kind_t k, int after_reply, const char *text, int32_t end, gc_tok_ids_t *out,
                  gc_err_t *e);

#endif
