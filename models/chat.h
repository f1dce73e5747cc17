/* chat.h — the chat templates of Llama 2, Llama 3, Mistral, ChatML and
 * Zephyr instruct models, as token ids built piece by piece: control
 * tokens by id, text through the tokenizer with special-token matching
 * off, so a user's text can never smuggle in a control token. The pieces
 * are cut where llama.cpp cuts the rendered template (at its control
 * tokens), so the ids are those llama.cpp gives the rendered text, less
 * any control token a user wrote. Which template applies is read from
 * the chat_template (its markers) or, without one, from the vocabulary. */
#ifndef GC_MODELS_CHAT_H
#define GC_MODELS_CHAT_H

#include "tokenizer.h"

typedef enum gc_chat_kind {
  GC_CHAT_LLAMA2 = 1,  /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] reply </s>, BOS every turn */
  GC_CHAT_LLAMA3 = 2,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
  GC_CHAT_MISTRAL = 3, /* <s>[INST] ... [/INST] reply</s>[INST] ...: BOS once, no system role */
  GC_CHAT_CHATML = 4,  /* <|im_start|>role\n...<|im_end|>\n<|im_start|>... */
  GC_CHAT_ZEPHYR = 5,  /* <|role|>\n...</s>\n<|role|>... (TinyLlama-Chat, Zephyr) */
} gc_chat_kind_t;

/* The template for t, from the chat template's markers, in this order:
 * "<|start_header_id|>" -> LLAMA3; "[INST]" -> LLAMA2 where it puts BOS
 * before every "[INST]" (bos_token + '[INST]'), else MISTRAL;
 * "<|im_start|>" -> CHATML; "<|user|>" -> ZEPHYR. With no template, from
 * the vocabulary: "<|start_header_id|>" -> LLAMA3, an [INST] control token
 * -> MISTRAL, an <|im_start|> control token -> CHATML, a SentencePiece
 * vocabulary with BOS and EOS -> LLAMA2. GC_EUNSUPPORTED otherwise,
 * naming what was found. */
int gc_chat_detect(const gc_tok_t *t, gc_chat_kind_t *out, gc_err_t *e);

/* Append to out the ids of one user message. first: the conversation's
 * first message (BOS, and the system prompt when system is non-NULL);
 * reply: an assistant message comes next (the model's or a client's); the
 * [INST] templates take user and assistant turns in turn, so reply = 0 is
 * an error there. The text is trimmed where the template trims it (Llama
 * 2, Llama 3), kept as given elsewhere. [INST] and [/INST] go in by id
 * where the vocabulary has them as control tokens (Mistral v3), else as
 * text. BOS: where the template writes it (Llama 2, Llama 3, Mistral), or
 * as the tokenizer adds it to a prompt (ChatML, Zephyr, as llama.cpp).
 * Errors: GC_EINVAL for a user message after a user message or a system
 * prompt in MISTRAL, GC_ENOTFOUND when a control token of the template is
 * missing from the vocabulary; GC_ENOMEM. */
int gc_chat_turn(gc_tok_t *t, gc_chat_kind_t k, int first, int reply, const char *system, const char *user,
                 gc_tok_ids_t *out, gc_err_t *e);

/* Append to out the ids of an assistant message after a user message (or,
 * after_reply, after an assistant message). text NULL: the start of the
 * reply the model is to write (the templates' generation prompt: the
 * assistant header of Llama 3, ChatML and Zephyr; nothing for [INST]).
 * text given: a reply written by the client (a conversation's history):
 * the header, the text (trimmed as for gc_chat_turn, special tokens not
 * matched) and gc_chat_end_token's id. The [INST] templates take user and
 * assistant turns in turn: after_reply is GC_EINVAL there. GC_ENOTFOUND,
 * GC_ENOMEM as gc_chat_turn. */
int gc_chat_reply(gc_tok_t *t, gc_chat_kind_t k, int after_reply, const char *text, gc_tok_ids_t *out,
                  gc_err_t *e);

/* The id that closes an assistant reply (<|eot_id|>, <|im_end|>, </s>), or -1. */
int32_t gc_chat_end_token(const gc_tok_t *t, gc_chat_kind_t k);

#endif
