/* chat.h — the chat templates of Llama 2, Llama 3, Mistral (v0.1, v0.3,
 * Nemo's Tekken), ChatML, Zephyr and DeepSeek (V3, R1 and R1's Llama
 * distills) instruct models, as token ids built piece by piece: control
 * tokens by id, text through the tokenizer with special-token matching
 * off, so a user's text can never smuggle in a control token (a
 * user-defined added token, such as DeepSeek's <think>, is matched in any
 * text, as llama.cpp and Hugging Face match it; where a vocabulary holds a
 * role marker as one, tokenizer.json's "special": false, a user's text can
 * write it). The pieces are cut where llama.cpp cuts the rendered template
 * (at its control tokens), so the ids are those llama.cpp gives the
 * rendered text, less any control token a user wrote (for the templates
 * tests/chat_ref.py holds). Which template applies is read from the
 * chat_template (its markers) or, without one, from the vocabulary. */
#ifndef GC_MODELS_CHAT_H
#define GC_MODELS_CHAT_H

#include "jsonmode.h"
#include "tokenizer.h"

typedef enum gc_chat_kind {
  GC_CHAT_LLAMA2 = 1,  /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] reply </s>, BOS every turn */
  GC_CHAT_LLAMA3 = 2,  /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
  GC_CHAT_MISTRAL = 3, /* <s>[INST] ... [/INST] reply</s>[INST] ...: BOS once, no system role */
  GC_CHAT_CHATML = 4,  /* <|im_start|>role\n...<|im_end|>\n<|im_start|>... */
  GC_CHAT_ZEPHYR = 5,  /* <|role|>\n...</s>\n<|role|>... (TinyLlama-Chat, Zephyr) */
  /* <｜begin▁of▁sentence｜>system<｜User｜>...<｜Assistant｜>reply<｜end▁of▁sentence｜>:
   * DeepSeek V3's; _THINK, R1's (and its distills'), whose reply starts
   * with "<think>\n" written by the template */
  GC_CHAT_DEEPSEEK = 6,
  GC_CHAT_DEEPSEEK_THINK = 7,
  /* Mistral v0.3's (and Large 2407's): <s>[INST] text[/INST] reply</s>, the
   * system message before the last user message's text, "\n\n" between */
  GC_CHAT_MISTRAL_V3 = 8,
  GC_CHAT_MISTRAL_TEKKEN = 9, /* Nemo 2407's: <s>[INST]text[/INST]reply</s>, the system as v3's */
} gc_chat_kind_t;

/* The template for t, from the chat template's markers, in this order:
 * "<|start_header_id|>" -> LLAMA3; "<｜User｜>" and "<｜Assistant｜>" ->
 * DEEPSEEK_THINK where the generation prompt is "<｜Assistant｜><think>\n",
 * else DEEPSEEK; "[INST]" -> LLAMA2 where it puts BOS before every
 * "[INST]" (bos_token + '[INST]'), else MISTRAL_V3 where the system message
 * goes with the last user message ("loop.last and system_message is
 * defined"), MISTRAL_TEKKEN for that with "[INST]" + (no space), else
 * MISTRAL; "<|im_start|>" -> CHATML;
 * "<|user|>" -> ZEPHYR. With no template, from the vocabulary:
 * "<|start_header_id|>" -> LLAMA3, "<｜User｜>" and "<｜Assistant｜>" ->
 * DEEPSEEK, an [INST] control token -> MISTRAL, an <|im_start|> control
 * token -> CHATML, a SentencePiece vocabulary with BOS and EOS -> LLAMA2.
 * GC_EUNSUPPORTED otherwise, naming what was found. */
int gc_chat_detect(const gc_tok_t *t, gc_chat_kind_t *out, gc_err_t *e);

/* A conversation's ids as they are built, message by message, into the
 * caller's list: control tokens by id, the text between two control
 * tokens pending until the next one (or gc_chat_flush) and then tokenized
 * as one piece. Zero it with gc_chat_init; gc_chat_free frees it. */
typedef struct gc_chat {
  gc_tok_t *t;
  gc_chat_kind_t k;
  gc_buf_t text; /* pending text since the last control token */
  int n_msgs;    /* messages written (a system prompt counts) */
  char last;     /* the last message's role: 0 none, 'u' user, 'a' assistant */
  /* read from the template at gc_chat_init (the kind's own without one): */
  int inst_pre, inst_post; /* [INST] templates: a space after "[INST]", before "[/INST]" */
  int reply_pre;           /* [INST] templates: a space before a reply (' ' + message['content']) */
  int cut_think;           /* DeepSeek: an earlier reply cut after its last "</think>" */
  char *dflt_system;       /* ChatML: the system message the template writes when a
                              conversation has none (Qwen2's, Qwen2.5's), or NULL */
  int think_open;          /* the generation prompt opens a <think> block (DeepSeek R1's
                              later revision, Qwen3-Thinking-2507's) */
  int cut_lstrip;          /* ... an earlier reply cut after "</think>" loses its leading
                              newlines too (Qwen3's .lstrip('\n')) */
  int sys_block;           /* Mistral's later templates: the system message as a
                              [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT] block (Large 2411, Small 3) */
  int sys_pre;             /* ... with a space after "[SYSTEM_PROMPT]" (Large 2411's) */
  int inst_lead;           /* Mistral v0.1's and v0.2's later template: a space before "[INST]" */
  int sys_first;           /* ... and the system message before the first user text, "\n\n" after */
  char *sys_head;          /* Llama 3.1's and 3.2's: the text their system message starts with
                              ("Cutting Knowledge Date: ...\nToday Date: ...\n\n"), written where a
                              conversation has no system message too; NULL in Llama 3's */
  int empty_think;         /* the generation prompt writes an empty block "<think>\n\n</think>\n\n"
                              for enable_thinking false (Qwen3's hybrid templates) */
  /* tool calls, read from the template (gc_chat_tools): Qwen's (Hermes') */
  int tools_kind;          /* GC_TOOLS_NONE, GC_TOOLS_HERMES */
  char *tools_pre;         /* HERMES: the system message's text before the tools ("# Tools\n\nYou may
                              call ... <tools>"; Qwen2.5's starts "\n\n" after the system text);
                              LLAMA3_JSON: the first user message's ("Given the following ...") */
  char *tools_post;        /* HERMES: ... after them ("\n</tools>\n\nFor each function call, ...");
                              LLAMA3_JSON: the system message's first line ("Environment: ipython\n") */
  int tools_given;         /* LLAMA3_JSON: the tools are written (in the first user message) */
  int keep_think;          /* a reply after the last user query keeps its reasoning (Qwen3's
                              last_query_index), as <think>\n...\n</think>\n\n before its text */
  int tool_open;           /* a run of tool results is open (its <|im_end|> not yet written) */
  /* set by the caller after gc_chat_init: */
  int think_off;           /* enable_thinking false (Hugging Face's apply_chat_template argument,
                              vLLM's chat_template_kwargs): where empty_think, every generation
                              prompt closes the block before the reply */
  const char *const *tools; /* [ntools] the tools offered (a request's "tools"), each as the template
                              writes it (gc_chat_tool_text), or none */
  int ntools;
} gc_chat_t;

/* How a template offers tools and writes calls: NONE; HERMES, Qwen2.5's
 * and Qwen3's ChatML ones (and their fine-tunes'): the tools in the
 * system message between the template's "# Tools ... <tools>" and
 * "</tools> ... </tool_call>" literals, one tojson a line; a call as
 * <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call> in the
 * reply; results in a user turn of <tool_response>\n...\n</tool_response>
 * blocks;
 * LLAMA3_JSON, Llama 3.1's and 3.2's: "Environment: ipython\n" first in
 * the system message, the tools (tojson with indent 4, each and "\n\n")
 * after the template's "Given the following functions, ..." text in the
 * first user message, one call a reply as {"name": "N", "parameters":
 * ARGS}, a result as the ipython role's message of its text as JSON;
 * MISTRAL, Mistral v0.3's and Nemo's (MISTRAL_V3, MISTRAL_TEKKEN): an
 * [AVAILABLE_TOOLS] [...] [/AVAILABLE_TOOLS] block before the last user
 * message (the caller gives the tools with that message: ntools 0 before
 * it), the calls as [TOOL_CALLS] [{"name", "arguments", "id"}, ...]</s>
 * (ids of 9 characters), a result as [TOOL_RESULTS] {"content": text,
 * "call_id": id}[/TOOL_RESULTS]; each marker by id where it is a control
 * token, with the space after it that the template's [INST] has. */
typedef enum gc_chat_tools_kind {
  GC_TOOLS_NONE = 0,
  GC_TOOLS_HERMES = 1,
  GC_TOOLS_LLAMA3_JSON = 2,
  GC_TOOLS_MISTRAL = 3,
} gc_chat_tools_kind_t;
gc_chat_tools_kind_t gc_chat_tools(const gc_tok_t *t, gc_chat_kind_t k);

/* How a reply of tools kind k spells its calls, as the reply's parser
 * reads them back (tool_choice "required" or a named function): c's lead,
 * pre, mid, post, and sep, next and tail where the kind writes several
 * (c's names are the caller's; a caller that wants one call sets sep to
 * NULL). Hermes': <tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>
 * blocks, one a line; Llama 3.1's: {"name": "N", "parameters": ARGS}, one;
 * Mistral's: the [TOOL_CALLS] control token, then [{"name": "N",
 * "arguments": ARGS}, ...]. GC_EUNSUPPORTED for NONE, and for Mistral's
 * where [TOOL_CALLS] is no control token of the vocabulary. */
int gc_chat_call_shape(const gc_tok_t *t, gc_chat_tools_kind_t k, gc_json_call_t *c, gc_err_t *e);

/* One tool (a request's {"type": "function", "function": {...}}, a json-c
 * object) appended to b as a template of tools kind k writes it: tojson (Hermes'; Llama
 * 3.1's with indent 4), or Mistral's own: {"type": "function",
 * "function": {...}} with the function's string values unescaped and its
 * "return" left out. GC_ENOMEM, else GC_OK. */
struct json_object;
int gc_chat_tool_text(gc_chat_tools_kind_t k, struct json_object *tool, gc_buf_t *b, gc_err_t *e);

/* One tool call of an assistant message: the function's name, its
 * arguments as JSON text as the template writes them (tojson), and the
 * call's id (Mistral's templates write it). */
typedef struct gc_chat_call {
  const char *name, *args, *id;
} gc_chat_call_t;

/* c for template k over t's vocabulary, with what gc_chat_t reads from
 * t's chat template. Can't fail: a default system message that cannot be
 * copied (out of memory) is left out. */
void gc_chat_init(gc_chat_t *c, gc_tok_t *t, gc_chat_kind_t k);
void gc_chat_free(gc_chat_t *c);

/* date_string (a template argument of apply_chat_template and vLLM's
 * chat_template_kwargs) for the templates that read it (Llama 3.1's and
 * 3.2's header: sys_head), in place of today's date or the template's
 * own; before the first message. Others: nothing. GC_ENOMEM. */
int gc_chat_date(gc_chat_t *c, const char *date, gc_err_t *e);

/* Whether template k puts the system message (and the tools: MISTRAL) with the last user message
 * (MISTRAL_V3, MISTRAL_TEKKEN) rather than first: a caller that has the
 * whole conversation passes it with that message (gcore-serve); one that
 * keeps the KV cache between turns, with the first (gcore-run --chat,
 * as llama.cpp's built-in template does). */
int gc_chat_system_last(gc_chat_kind_t k);

/* A user message; system (non-NULL, first message only, or any with
 * gc_chat_system_last) goes before it as the template puts it (DeepSeek:
 * as given, right after BOS). A ChatML template's own system message
 * (dflt_system) goes first where a conversation's first message has none;
 * Llama 3.1's system message starts with sys_head and is written where a
 * conversation has none too. The text is trimmed where the template trims
 * it (Llama 2, Llama 3), kept as given elsewhere; [INST] and [/INST] by id
 * where the vocabulary has them as control tokens (Mistral v3), else as
 * text, with the spaces around the text each [INST] template writes. BOS:
 * where the template writes it (Llama 2 every turn, Llama 3, Mistral and
 * DeepSeek once), or as the tokenizer adds it to a prompt (ChatML, Zephyr:
 * llama.cpp's rule). In MISTRAL with sys_block, the system message is a
 * [SYSTEM_PROMPT] block after BOS (the markers by id where they are
 * control tokens). Errors: GC_EINVAL for a user message after a user
 * message in the [INST] templates (theirs raise), a system prompt in
 * MISTRAL without sys_block or after the first message (but with
 * gc_chat_system_last);
 * GC_ENOTFOUND when a control token of the template is missing from the
 * vocabulary; GC_ENOMEM. */
int gc_chat_user(gc_chat_t *c, const char *system, const char *user, gc_tok_ids_t *out, gc_err_t *e);

/* An assistant message. text NULL: the start of the reply the model is to
 * write (the template's generation prompt: the assistant header of Llama
 * 3, ChatML, Zephyr and DeepSeek, then "<think>\n" where think_open, or
 * "<think>\n\n</think>\n\n" where empty_think and think_off;
 * nothing for [INST]); the caller then flushes and
 * generates, and the reply's tokens, closed by gc_chat_end_token's id,
 * are the model's. text given: a reply written by the client (a
 * conversation's history): header, text (trimmed as for gc_chat_user,
 * and in Mistral v3's; where cut_think (DeepSeek R1's, Qwen3's): what
 * follows its last "</think>", less leading newlines where cut_lstrip,
 * as the template cuts a reply's reasoning) and gc_chat_end_token's id.
 * Errors: GC_EINVAL for an assistant message that does not follow a user
 * message in the [INST] templates; as gc_chat_user. */
int gc_chat_assistant(gc_chat_t *c, const char *text, gc_tok_ids_t *out, gc_err_t *e);

/* An assistant message of the conversation's history with what a reply
 * can carry beside its text (gc_chat_assistant's, text not NULL):
 * reasoning (NULL: none given; a client's reasoning_content) and
 * calls[ncalls] (tool calls, as the template writes them after the text;
 * GC_EINVAL where the template has none). after_query: the message comes
 * after the conversation's last user query, where a keep_think template
 * writes its reasoning (reasoning, else what the text's <think> block
 * holds) before the text, if any; elsewhere the reasoning is not written
 * and the text is cut as gc_chat_assistant cuts it. */
int gc_chat_reply(gc_chat_t *c, const char *text, const char *reasoning, int after_query, const gc_chat_call_t *calls,
                  int ncalls, gc_tok_ids_t *out, gc_err_t *e);

/* A tool's result (role "tool", id its tool_call_id or NULL): in HERMES,
 * a <tool_response> block in a user turn shared by the results in a row;
 * in LLAMA3_JSON, an ipython message of text as a JSON string (the
 * template's tojson of a string); in MISTRAL a [TOOL_RESULTS] block.
 * GC_EINVAL where the template has no tool calls, and as the templates
 * raise: in LLAMA3_JSON a reply has one call at most, in MISTRAL a call's
 * and a result's id is 9 characters. */
int gc_chat_tool_result(gc_chat_t *c, const char *text, const char *id, gc_tok_ids_t *out, gc_err_t *e);

/* How a reply of template k (t's chat template) carries reasoning: 0 it
 * has none; 1 a reply may open a <think> block itself (DeepSeek V3 and
 * R1's first release; a ChatML template that cuts replies at "</think>",
 * Qwen3's); 2 the generation prompt opens it, so a reply starts inside it
 * (DEEPSEEK_THINK; a ChatML template whose generation prompt ends in
 * "<think>\n", Qwen3-Thinking-2507's). */
int gc_chat_reasoning(const gc_tok_t *t, gc_chat_kind_t k);

/* Tokenize the pending text into out (before the model reads out). */
int gc_chat_flush(gc_chat_t *c, gc_tok_ids_t *out, gc_err_t *e);

/* The id that closes an assistant reply (<|eot_id|>, <|im_end|>,
 * <｜end▁of▁sentence｜>, </s>), or -1. */
int32_t gc_chat_end_token(const gc_tok_t *t, gc_chat_kind_t k);

#endif
