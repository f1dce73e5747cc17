/* engine.h — gcore-serve's engine: one thread owns the device and the
 * model and runs the batch loop over KV-cache slots; requests are queued to
 * it, and each request's tokens and text come back through the request's
 * own buffer, which the HTTP side (serve/http.c) reads under the request's
 * lock. See engine.c for the loop and the threading. */
#ifndef GC_SERVE_ENGINE_H
#define GC_SERVE_ENGINE_H

#include <pthread.h>

#include "../models/jsonmode.h"
#include "../models/llama.h"
#include "../models/sampler.h"
#include "../models/tokenizer.h"

#define GC_SRV_MAX_STOP 4   /* stop strings per request (OpenAI's limit) */
#define GC_SRV_STOP_LEN 256 /* bytes per stop string, at most */
#define GC_SRV_MAX_STOP_IDS 64 /* stop token ids per request (vLLM's stop_token_ids) */
#define GC_SRV_MAX_BIAS 300    /* logit_bias entries per request (OpenAI's limit) */

/* What a request asks for, checked by serve/api.c before it is queued. */
typedef struct gc_srv_params {
  int max_tokens;          /* >= 1; prompt + max_tokens <= the context */
  gc_sampler_params_t sp;  /* temperature <= 0: greedy */
  char *stop[GC_SRV_MAX_STOP]; /* stop strings (owned), nstop of them */
  int nstop;
  int32_t stop_ids[GC_SRV_MAX_STOP_IDS]; /* ids that end the completion (ignore_eos or not), nstop_ids of them */
  int nstop_ids;
  int min_tokens;          /* 0 .. max_tokens: no end token or stop string before this many tokens */
  int ignore_eos;          /* keep going past end-of-sequence tokens */
  int32_t chat_end;        /* a chat's end-of-turn id (a stop token), or -1 */
  int logprobs;            /* -1: none; else each token's log-probability and the logprobs
                              (0 .. GC_LOGPROBS_MAX) most likely ids of its position */
  int prompt_logprobs;     /* the prompt's too (echo): a prefill that writes every row's logits */
  int cache_prompt;        /* start from the keys and values a free slot holds of the prompt's
                              beginning (llama.cpp's cache_prompt; 1 unless the request says no) */
  int json;                /* JSON mode (response_format json_object): every token keeps the reply
                              the beginning of one JSON object (models/jsonmode.h), and the reply
                              ends, with an end token, when the object does; with call, the same
                              for the call(s) */
  gc_json_call_t *call;    /* tool_choice "required" or a named function: the calls the reply is
                              (owned, names too), or NULL */
  gc_json_schema_t *schema; /* with json: the JSON Schema the object must satisfy (owned), or NULL */
  gc_json_choice_t choice;  /* with json and choice.n > 0: the reply is one of these strings (owned;
                               vLLM's guided_choice), not JSON */
  gc_json_regex_t *regex;   /* with json: the reply is one whole match of this pattern (a reference;
                               vLLM's guided_regex), not JSON; or NULL */
  int32_t bias_ids[GC_SRV_MAX_BIAS]; /* logit_bias: added to these ids' logits before the draw */
  float bias[GC_SRV_MAX_BIAS];
  int nbias;
  float presence, frequency; /* OpenAI's penalties: each id the reply holds c > 0 times has its
                              logit lowered by presence + c·frequency before the draw (-2 .. 2) */
  int32_t *allowed;        /* vLLM's allowed_token_ids: the only ids drawn (owned), nallowed of
                              them, or NULL: all */
  int nallowed;
} gc_srv_params_t;

/* A latency histogram for /metrics: counts per bucket of upper bounds
 * gc_srv_le[] (seconds) and past the last, and the sum in nanoseconds;
 * updated with atomics from any thread (Prometheus's cumulative counts are
 * made when it is printed). */
#define GC_SRV_NLE 17
extern const double gc_srv_le[GC_SRV_NLE];
typedef struct gc_srv_hist {
  _Atomic unsigned long long n[GC_SRV_NLE + 1];
  _Atomic unsigned long long sum_ns;
} gc_srv_hist_t;
/* One observation of s seconds (negative: 0). */
void gc_srv_hist_add(gc_srv_hist_t *h, double s);

/* One request, shared by the HTTP thread that made it and the engine.
 * Fields above `mu` are set before gc_engine_submit and read-only after;
 * the others are read and written under *mu; those after `engine only`
 * belong to the engine thread. */
typedef struct gc_srv_req {
  int32_t *prompt;         /* [nprompt] ids (owned) */
  int nprompt;
  char *echo;              /* [necho] the prompt's text, sent before the completion's (echo), or NULL */
  size_t necho;
  gc_srv_params_t p;

  pthread_mutex_t *mu;     /* r's own (mu_own), or the leader's of a request of several
                              choices (gc_srv_req_new_in): one lock for them all */
  pthread_cond_t *cv;      /* signalled when text, ids or done change (cv_own, or the leader's) */
  gc_buf_t text;           /* the completion's text (special tokens skipped; cut at a stop string) */
  size_t ready;            /* text[0, ready) may be sent: the rest could begin a stop string */
  int32_t *ids;            /* [nids] generated ids (the stop token included, as gcore-run and vLLM;
                              its text is not in text) */
  int nids, capids;
  /* with p.logprobs >= 0 (else NULL): each id's log-probability in the model's
     distribution (gc_logprobs) and its position's p.logprobs most likely ids */
  float *lps;              /* [capids] */
  gc_logprob_t *tops;      /* [capids, p.logprobs] */
  int *ntops;              /* [capids] entries of each row of tops that are filled */
  /* with p.prompt_logprobs: the same of prompt ids 1 .. nprompt - 1 (0 has no
     position before it), written during the prefill, complete when nids > 0 */
  float *plps;             /* [nprompt] */
  gc_logprob_t *ptops;     /* [nprompt, p.logprobs] */
  int *pntops;             /* [nprompt] */
  int done;                /* finished: finish says why, or status/error say what failed */
  const char *finish;      /* "stop" | "length" */
  int status;              /* 0, or the HTTP status of a failure (500, 503) */
  char error[256];
  int cancelled;           /* the client went away: the engine frees the slot */
  int prefills;            /* prompt passes run (ceil((nprompt - cached) / prefill_chunk) when done) */
  int cached;              /* prompt tokens whose keys and values the slot already held (not run) */
  int refs;                /* holders (the HTTP side, the engine); the last frees it */
  double t_first;          /* when its first token was drawn (gc_now), or 0 */

  pthread_mutex_t mu_own;
  pthread_cond_t cv_own;
  struct gc_srv_req *leader; /* whose mu and cv r shares (r holds a reference), or NULL */
  int index;               /* the choice's index in its answer (0 .. choices - 1) */

  /* engine only */
  gc_sampler_t *smp;
  gc_json_fsm_t jf;        /* p.json: the reply's text so far, as the JSON recognizer has read it */
  float *jrow;             /* p.json: [vocab] the row of logits with the ids JSON mode refuses at -inf */
  float *row;              /* [vocab] the row with logit_bias and the penalties applied (where the
                              request has them), drawn from in place of the engine's */
  int *counts;             /* [vocab] with the penalties: scratch, zero between draws */
  gc_tok_stream_t ts;
  int slot;                /* KV-cache slot while running, else -1 */
  int fed;                 /* prompt tokens in the cache */
  int32_t last;            /* the last sampled id, fed at the next decode step */
  size_t stop_from;        /* a stop string counts only where it ends past this byte of text
                              (the text of the first min_tokens tokens) */
  int64_t seq;             /* admission order */
  double t_prev;           /* when its last token was drawn */
} gc_srv_req_t;

/* A new request with one holder (the caller); NULL on out-of-memory. */
gc_srv_req_t *gc_srv_req_new(gc_err_t *e);
/* A new request that shares leader's lock and condition variable (another
 * choice of the same answer: its reader waits on one of them for all);
 * it holds a reference to leader. NULL on out-of-memory. */
gc_srv_req_t *gc_srv_req_new_in(gc_srv_req_t *leader, gc_err_t *e);
/* Drop one holder's reference; the last frees the request. */
void gc_srv_req_release(gc_srv_req_t *r);

typedef struct gc_engine_opts {
  const char *model;      /* path, for the bundle built without -b */
  const char *bundle;     /* -b, or NULL: built from db into cache */
  const char *db, *cache, *backend, *quantize;
  int device;
  const int *devices;     /* [tp] the ranks' GPU ordinals, or NULL: device, device + 1, .. */
  int tp;                 /* tensor-parallel ranks (1: none; see gc_llama_create_tp) */
  int ctx;                /* positions per slot */
  int parallel;           /* slots: requests decoded at once, 1 .. GC_LLAMA_BATCH_MAX */
  int max_queue;          /* requests waiting for a slot, at most */
  int prefill_chunk;      /* most prompt tokens in one pass between decode steps */
  int fixed_batch;        /* every decode step runs `parallel` rows (copies of a real row pad
                             it), so that a request's tokens never depend on how many run beside it */
  int no_graph;
  int l2_window_mb;       /* the decode step's L2 window in MB (gc_llama_set_l2_window); -1: the default */
  int no_prompt_cache;    /* every prompt runs from position 0 (no request's cache_prompt counts) */
} gc_engine_opts_t;

typedef struct gc_engine gc_engine_t;

/* Start the engine thread: it opens the device and the bundle and puts
 * the model w on the device; returns once it is ready (or with the error
 * that stopped it). tok (may be NULL) is used read-only, for detokenizing. */
int gc_engine_start(const gc_engine_opts_t *o, const gc_llama_weights_t *w, const gc_tok_t *tok,
                    gc_engine_t **out, gc_err_t *e);

enum { GC_SUBMIT_OK = 0, GC_SUBMIT_FULL, GC_SUBMIT_STOPPING };
/* Queue rs[0, n) (their prompts and params set), all or none, in order:
 * the engine takes a reference to each. GC_SUBMIT_FULL when fewer than n
 * places are left of max_queue, GC_SUBMIT_STOPPING once the server is
 * shutting down. */
int gc_engine_submit(gc_engine_t *en, gc_srv_req_t *const *rs, int n);
/* Most requests the queue holds (--max-queue). */
int gc_engine_max_queue(const gc_engine_t *en);
/* The client of r went away: the engine drops it (from the queue at once,
 * or from its slot at its next step). The caller must still hold r. */
void gc_engine_cancel(gc_engine_t *en, gc_srv_req_t *r);
/* Requests running in slots and waiting for one. */
void gc_engine_load(gc_engine_t *en, int *active, int *queued);
/* Fail every waiting and running request (503), stop the thread, free the
 * model and the device. The engine stays valid for the HTTP side's last
 * calls (a submit then gets GC_SUBMIT_STOPPING) until gc_engine_free. */
void gc_engine_stop(gc_engine_t *en);
/* Stop (if not yet) and free the engine: after the HTTP side has stopped. */
void gc_engine_free(gc_engine_t *en);

/* Facts for the HTTP side, fixed after start. */
int gc_engine_ctx(const gc_engine_t *en);
int gc_engine_parallel(const gc_engine_t *en);
/* The gaps between a reply's tokens (each drawn token after the first),
 * of every request since the start: /metrics's inter-token latency. */
const gc_srv_hist_t *gc_engine_itl(const gc_engine_t *en);
const char *gc_engine_device(const gc_engine_t *en); /* "cpu (AMD EPYC ...)" */

#endif
