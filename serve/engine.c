/* engine.c — the engine thread of gcore-serve: the device, the bundle and
 * the model belong to it alone, and it runs the continuous-batching loop.
 *
 * Threads. libmicrohttpd runs one thread per connection (serve/http.c);
 * each turns a request into a gc_srv_req_t and queues it here
 * (gc_engine_submit, under the engine's lock `mu`, which guards the queue
 * and the counters). This thread admits queued requests into free KV-cache
 * slots and then repeats a step: prefill chunks of admitted requests, oldest
 * first (each chunk at most prefill_chunk prompt tokens of one request, and
 * as many chunks as fit in prefill_chunk tokens in all, at least one, so a
 * long prompt never stalls the others for long and short ones start
 * together), then one batched decode step of every request that is
 * generating (M rows, M = 1 .. --parallel, one pass through the model:
 * gc_llama_decode_batch; with --fixed-batch always --parallel rows, the
 * missing ones copies of a real row). Each sampled token is appended to its request's
 * ids and text under the request's own lock `mu`, and its condition
 * variable wakes the connection thread that streams it. A request that
 * finishes (a stop token or string, max_tokens, a full context) or whose
 * client went away (gc_engine_cancel: its `cancelled` flag, checked at
 * every step) frees its slot at once. Lock order: engine before request;
 * no device call is made under either lock. */
#include "engine.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../gen/autobundle.h"
#include "../gen/compile.h"
#include "../gen/target.h"

#define BMAX GC_LLAMA_BATCH_MAX

struct gc_engine {
  gc_engine_opts_t o;
  const gc_llama_weights_t *w;
  const gc_tok_t *tok;
  pthread_t thread;
  pthread_mutex_t mu;          /* guards everything below up to `engine only` */
  pthread_cond_t cv;           /* work arrived, or stop */
  pthread_cond_t ready_cv;     /* the thread finished starting */
  int started, start_rc;
  gc_err_t start_err;
  int stopping;
  int joined;                  /* gc_engine_stop ran: the thread is gone, the device closed */
  gc_srv_req_t **queue;        /* [max_queue] FIFO ring */
  int qhead, qlen;
  int active;                  /* requests in slots */
  int64_t seq;
  int64_t steps;               /* batched decode steps run */
  int64_t step_rows;           /* their rows, in all */
  double step_s, prefill_s;    /* seconds in decode steps, in prefill chunks */
  double t_open;               /* when the model was ready (gc_now) */
  /* engine only */
  gc_dev_t *devs[GC_LLAMA_TP_MAX]; /* [tp]: each rank's device and bundle */
  gc_rt_t *rts[GC_LLAMA_TP_MAX];
  gc_llama_t *m;
  gc_srv_req_t *slot[BMAX];    /* the request in each slot, or NULL */
  float *logits;               /* [parallel, vocab] */
  float *plogits;              /* [prows, vocab] a prefill's every row (prompt logprobs), made at first use */
  int prows;
  char devname[200];
  int32_t *ends;               /* [nends] the model's end-of-sequence ids (config and tokenizer) */
  gc_json_vocab_t *jv;         /* the tokenizer's pieces for JSON mode: made by the engine thread for the
                                  first request that needs them (about 10 ms and a few MB at 128k tokens),
                                  then kept; NULL before */
  gc_srv_hist_t itl;           /* the gaps between a reply's tokens (gc_engine_itl) */
  int nends;
  struct masked { int32_t id; float was; } *masked; /* [BMAX, nmask] sample()'s, a row's each */
  int nmask;                   /* nends + GC_SRV_MAX_STOP_IDS + 1 */
  long step_delay_ms;          /* $GCORE_SERVE_STEP_DELAY_MS: a pause after each step (tests) */
  /* what each free slot's cache holds: the ids at positions 0 .. nkept - 1
     (the last request's prompt and the tokens it fed back), for the next
     prompt that begins the same way (gc_llama_slot_keep) */
  int32_t *kept[BMAX];
  int nkept[BMAX], capkept[BMAX];
  int64_t used[BMAX];          /* when each slot's request ended (en->seq then): least recently used */
  int cores;                   /* threads for the prompt's logprobs: the host's cores, 1 .. BMAX */
};

/* ---- requests ---------------------------------------------------------- */

gc_srv_req_t *gc_srv_req_new_in(gc_srv_req_t *leader, gc_err_t *e) {
  gc_srv_req_t *r = gc_calloc(1, sizeof *r, e);
  if (!r) return NULL;
  if (leader) {
    pthread_mutex_lock(leader->mu);
    leader->refs++;
    pthread_mutex_unlock(leader->mu);
    r->leader = leader, r->mu = leader->mu, r->cv = leader->cv;
  } else {
    pthread_mutex_init(&r->mu_own, NULL);
    pthread_cond_init(&r->cv_own, NULL);
    r->mu = &r->mu_own, r->cv = &r->cv_own;
  }
  r->refs = 1;
  r->slot = -1;
  r->p.chat_end = -1;
  r->p.logprobs = -1;
  r->p.cache_prompt = 1;
  return r;
}

void gc_srv_req_release(gc_srv_req_t *r) {
  if (!r) return;
  pthread_mutex_lock(r->mu);
  int last = --r->refs == 0;
  pthread_mutex_unlock(r->mu);
  if (!last) return;
  for (int i = 0; i < r->p.nstop; i++) free(r->p.stop[i]);
  gc_sampler_free(r->smp);
  free(r->jrow);
  free(r->row);
  free(r->counts);
  free(r->p.allowed);
  if (r->p.call) gc_json_call_clear(r->p.call);
  free(r->p.call);
  gc_json_schema_free(r->p.schema);
  gc_json_choice_clear(&r->p.choice);
  gc_json_regex_free(r->p.regex);
  free(r->prompt);
  free(r->echo);
  free(r->ids);
  free(r->lps), free(r->tops), free(r->ntops);
  free(r->plps), free(r->ptops), free(r->pntops);
  gc_buf_free(&r->text);
  gc_srv_req_t *leader = r->leader;
  if (!leader) {
    pthread_cond_destroy(&r->cv_own);
    pthread_mutex_destroy(&r->mu_own);
  }
  free(r);
  gc_srv_req_release(leader);
}

gc_srv_req_t *gc_srv_req_new(gc_err_t *e) { return gc_srv_req_new_in(NULL, e); }

/* What r leaves in its slot's cache (ok: its keys and values are whole:
 * it finished or its client left), for the next request's prompt: the ids
 * at the slot's positions, r's prompt and then the ids it fed back. Out of
 * memory, or not ok, leaves the slot empty. */
static void keep_cache(gc_engine_t *en, const gc_srv_req_t *r, int ok) {
  int s = r->slot, n = ok ? gc_llama_slot_pos(en->m, s) : 0, np = n < r->fed ? n : r->fed;
  if (n - np > r->nids) n = np + r->nids; /* never: the ids fed back were emitted */
  gc_err_t e = {0};
  if (n > en->capkept[s]) {
    int32_t *v = gc_realloc(en->kept[s], (size_t)n * sizeof *v, &e);
    if (!v) n = np = 0;
    else en->kept[s] = v, en->capkept[s] = n;
  }
  if (np) memcpy(en->kept[s], r->prompt, (size_t)np * sizeof *r->prompt);
  if (n > np) memcpy(en->kept[s] + np, r->ids, (size_t)(n - np) * sizeof *r->ids);
  en->nkept[s] = n;
  en->used[s] = en->seq;
  gc_llama_slot_keep(en->m, s, n);
}

/* Whether r may start from keys and values another request left (pick_slot, share_prefix). */
static int may_reuse(const gc_engine_t *en, const gc_srv_req_t *r) {
  return r->p.cache_prompt && !en->o.no_prompt_cache && !r->p.prompt_logprobs && !en->o.fixed_batch;
}

/* How many of r's first prompt ids (at most nprompt - 1) the ids v [n] begin with. */
static int common_prefix(const gc_srv_req_t *r, const int32_t *v, int n) {
  int k = 0, most = n < r->nprompt - 1 ? n : r->nprompt - 1;
  while (k < most && v[k] == r->prompt[k]) k++;
  return k;
}

/* The free slot for r, and in *keep how many of its cached positions r
 * starts from (the ids its cache and r's prompt begin with alike, at most
 * nprompt - 1: the last prompt token runs, for the first token's logits).
 * The slot where r keeps more than it overwrites (2 keep - nkept > 0),
 * the most so; else an empty slot, else the least recently used: a chat's
 * next turn finds its last turn's slot, and a prompt that shares only a
 * BOS (or a system prompt, which share_prefix copies) with the caches
 * takes an empty slot or the stalest one rather than overwrite a live
 * conversation. -1 when none is free. */
static int pick_slot(const gc_engine_t *en, const gc_srv_req_t *r, int *keep) {
  int best = -1, best_score = 0, spare = -1;
  *keep = 0;
  int reuse = may_reuse(en, r);
  for (int s = 0; s < en->o.parallel; s++) {
    if (en->slot[s]) continue;
    int n = reuse ? common_prefix(r, en->kept[s], en->nkept[s]) : 0, score = 2 * n - en->nkept[s];
    if (score > best_score) best = s, best_score = score, *keep = n;
    if (spare < 0 || (en->nkept[s] ? en->nkept[spare] && en->used[s] < en->used[spare] : en->nkept[spare] > 0))
      spare = s; /* empty first, then the least recently used */
  }
  if (best < 0 && spare >= 0) /* no slot worth keeping from: r keeps what its spare slot has of it */
    best = spare, *keep = reuse ? common_prefix(r, en->kept[spare], en->nkept[spare]) : 0;
  return best;
}

/* Mark r done (finish, or a failure with status and msg) and wake its
 * reader. Call with *r->mu held. */
static void req_done(gc_srv_req_t *r, const char *finish, int status, const char *msg) {
  r->done = 1;
  r->finish = finish;
  r->status = status;
  if (msg) snprintf(r->error, sizeof r->error, "%s", msg);
  r->ready = r->text.len;
  pthread_cond_broadcast(r->cv);
}

/* ---- start-up (on the engine thread) ------------------------------------- */

/* -b BUNDLE, or the one gcore-run would build for this device and model
 * (the shard shapes of --tp N) from the tuning database (the same cache
 * entry), into path[n]. */
static int bundle_path(gc_engine_t *en, char *path, size_t n, gc_err_t *e) {
  const gc_engine_opts_t *o = &en->o;
  gc_dev_t *dev = en->devs[0];
  if (o->bundle) {
    snprintf(path, n, "%s", o->bundle);
    return GC_OK;
  }
  const gc_dev_info_t *in = gc_dev_info(dev);
  gc_problems_t probs = {0};
  gc_needs_t needs = {0};
  gc_auto_result_t r;
  char db[1024], cache[1024], target[80];
  gc_target_t tg;
  if (o->db) snprintf(db, sizeof db, "%s", o->db);
  else gc_db_default_path(db, sizeof db);
  if (o->cache) snprintf(cache, sizeof cache, "%s", o->cache);
  else gc_cache_default(cache, sizeof cache);
  /* arch-specific where the device has it (sm_90a on sm_90), as gcore-run */
  snprintf(target, sizeof target, "%sa", in->target);
  if (!gc_dev_runs_target(dev, target) || gc_target_parse(target, &tg, NULL))
    snprintf(target, sizeof target, "%s", in->target);
  gc_llama_plan_t plan = {.db = db, .target = target, .force = -1};
  int rc = gc_llama_workload(o->model, o->quantize, NULL, NULL, o->tp, in->backend, &probs, &needs, &plan, e);
  if (!rc) rc = gc_gen_auto(db, target, cache, &probs, &needs, plan.meta, &r, e);
  gc_problems_free(&probs);
  gc_needs_free(&needs);
  if (rc) return gc_err_prefix(e, "no -b given, and the bundle for %s could not be built", target);
  struct stat st;
  const int have_db = stat(db, &st) == 0;
  fprintf(stderr, "gcore-serve: %s bundle %s for %s: %d of %d problems tuned%s%s%s\n",
          r.built ? "built" : "reusing", r.path, target, r.ntuned, r.nproblems,
          have_db ? " in " : " (no tuning database at ", db, have_db ? "" : ")");
  snprintf(path, n, "%s", r.path);
  return GC_OK;
}

/* Each of o->tp ranks' device (the CPU: the host each time; GPUs: the
 * ordinals of --devices, or from --device on) and bundle (rank 0's path, opened by all). */
static int open_ranks(gc_engine_t *en, gc_err_t *e) {
  const gc_engine_opts_t *o = &en->o;
  char path[GC_AUTO_PATH];
  for (int r = 0; r < o->tp; r++) {
    int ord = o->devices ? o->devices[r] : strcmp(o->backend, "cpu") ? o->device + r : o->device;
    if (gc_dev_open(o->backend, ord, &en->devs[r], e)) return o->tp > 1 ? gc_err_prefix(e, "rank %d", r) : e->code;
    if (r == 0 && bundle_path(en, path, sizeof path, e)) return e->code;
    if (gc_rt_open(en->devs[r], path, &en->rts[r], e)) return e->code;
  }
  return GC_OK;
}

static int engine_open(gc_engine_t *en, gc_err_t *e) {
  const gc_engine_opts_t *o = &en->o;
  int rc = open_ranks(en, e);
  if (!rc) rc = gc_llama_create_tp(en->devs, en->rts, en->w, o->ctx, o->prefill_chunk, o->parallel, o->tp, &en->m, e);
  if (!rc && o->no_graph) gc_llama_set_graphs(en->m, 0);
  if (!rc && o->l2_window_mb >= 0) gc_llama_set_l2_window(en->m, (int64_t)o->l2_window_mb << 20);
  if (!rc && !(en->logits = gc_malloc((size_t)o->parallel * en->w->cfg.vocab_size * sizeof(float), e)))
    rc = GC_ENOMEM;
  en->t_open = gc_now();
  if (!rc) {
    const gc_dev_info_t *in = gc_dev_info(en->devs[0]);
    snprintf(en->devname, sizeof en->devname, "%s (%s)", in->backend, in->name);
  }
  return rc;
}

/* ---- tokens out ------------------------------------------------------- */

/* Whether tok ends r's reply: one of its stop_token_ids, an end of the
 * model's (EOS) or, for a chat, the template's end of turn; ignore_eos
 * ignores the last two, as vLLM's does (Llama 3's <|eot_id|> is one of its
 * EOS ids) and gcore-run --ignore-eos, but not stop_token_ids (vLLM's). */
static int is_stop_token(const gc_engine_t *en, const gc_srv_req_t *r, int32_t tok) {
  for (int i = 0; i < r->p.nstop_ids; i++)
    if (r->p.stop_ids[i] == tok) return 1;
  if (r->p.ignore_eos) return 0;
  if (tok == r->p.chat_end) return 1;
  for (int i = 0; i < en->nends; i++)
    if (en->ends[i] == tok) return 1;
  return 0;
}

/* The earliest stop string in text from byte `from` on that ends past
 * r->stop_from: its offset, or -1. */
static long find_stop(const gc_srv_req_t *r, size_t from) {
  long best = -1;
  for (int i = 0; i < r->p.nstop; i++) {
    const char *s = r->p.stop[i];
    size_t n = strlen(s);
    if (r->text.len < n) continue;
    size_t k0 = r->stop_from >= n && r->stop_from - n + 1 > from ? r->stop_from - n + 1 : from;
    for (size_t k = k0; k + n <= r->text.len; k++)
      if (!memcmp(r->text.data + k, s, n)) {
        if (best < 0 || (long)k < best) best = (long)k;
        break;
      }
  }
  return best;
}

/* Bytes at the end of text that begin some stop string (held back). */
static size_t stop_holdback(const gc_srv_req_t *r) {
  size_t hold = 0;
  for (int i = 0; i < r->p.nstop; i++) {
    size_t n = strlen(r->p.stop[i]);
    for (size_t k = n - 1 < r->text.len ? n - 1 : r->text.len; k > hold; k--)
      if (!memcmp(r->text.data + r->text.len - k, r->p.stop[i], k)) {
        hold = k;
        break;
      }
  }
  return hold;
}

/* r's slot freed, and with it the engine's count of active requests;
 * then r done (finish, or a failure with status and msg), its reader
 * woken, and the engine's reference dropped: in that order, so that a
 * client that has its whole answer finds its slot free (GET /health).
 * Call without *r->mu. */
static void end_req(gc_engine_t *en, gc_srv_req_t *r, const char *finish, int status, const char *msg) {
  if (r->slot >= 0) {
    keep_cache(en, r, status == 0 || status == 499);
    en->slot[r->slot] = NULL;
    r->slot = -1;
    pthread_mutex_lock(&en->mu);
    en->active--;
    pthread_mutex_unlock(&en->mu);
  }
  pthread_mutex_lock(r->mu);
  req_done(r, finish, status, msg);
  pthread_mutex_unlock(r->mu);
  gc_srv_req_release(r);
}

/* Room for cap ids in r (and their logprobs where r asks for them); r->mu
 * held. Errors: GC_ENOMEM (what was there is kept). */
static int grow_ids(gc_srv_req_t *r, int cap, gc_err_t *e) {
  int32_t *v = gc_realloc(r->ids, (size_t)cap * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  r->ids = v;
  if (r->p.logprobs >= 0) {
    float *lps = gc_realloc(r->lps, (size_t)cap * sizeof *lps, e);
    if (lps) r->lps = lps;
    int *nt = lps ? gc_realloc(r->ntops, (size_t)cap * sizeof *nt, e) : NULL;
    if (nt) r->ntops = nt;
    gc_logprob_t *t = nt ? gc_realloc(r->tops, ((size_t)cap * r->p.logprobs + 1) * sizeof *t, e) : NULL;
    if (!t) return GC_ENOMEM;
    r->tops = t;
  }
  r->capids = cap;
  return GC_OK;
}

/* A drawn token's log-probabilities (gc_logprobs), found before emit. */
typedef struct token_lp {
  float lp;
  int ntop;
  gc_logprob_t top[GC_LOGPROBS_MAX];
} token_lp_t;

/* Token tok was drawn for r (its logprobs in lp; NULL where the device
 * picked it, r wanting none): append it, its logprobs, and its text;
 * decide whether r is finished. Returns 1 when it is (its slot is then
 * free). */
static int emit(gc_engine_t *en, gc_srv_req_t *r, int32_t tok, const token_lp_t *lp) {
  gc_err_t e = {0};
  const char *finish = NULL;
  pthread_mutex_lock(r->mu);
  if (r->nids == r->capids && grow_ids(r, r->capids ? 2 * r->capids : 64, &e)) {
    pthread_mutex_unlock(r->mu);
    end_req(en, r, NULL, 500, "out of memory");
    return 1;
  }
  if (r->p.logprobs >= 0 && lp) {
    int k = r->nids;
    r->lps[k] = lp->lp, r->ntops[k] = lp->ntop;
    memcpy(r->tops + (size_t)k * r->p.logprobs, lp->top, (size_t)lp->ntop * sizeof *lp->top);
  }
  double now = gc_now();
  if (!r->nids) r->t_first = now;
  else gc_srv_hist_add(&en->itl, now - r->t_prev);
  r->t_prev = now;
  r->ids[r->nids++] = tok;
  gc_sampler_accept(r->smp, tok);
  size_t before = r->text.len;
  int cut = 0;
  if (is_stop_token(en, r, tok)) {
    finish = "stop";
  } else if (en->tok && tok < gc_tok_vocab_size(en->tok)) {
    if (gc_tok_stream_put(&r->ts, tok, &r->text, &e)) {
      pthread_mutex_unlock(r->mu);
      end_req(en, r, NULL, 500, e.msg);
      return 1;
    }
    size_t longest = 0;
    for (int i = 0; i < r->p.nstop; i++)
      if (strlen(r->p.stop[i]) > longest) longest = strlen(r->p.stop[i]);
    if (r->nids == r->p.min_tokens) r->stop_from = r->text.len; /* vLLM's: stop strings after min_tokens */
    long at = r->p.nstop && r->nids > r->p.min_tokens ? find_stop(r, before > longest ? before - longest : 0) : -1;
    if (at >= 0) {
      r->text.len = (size_t)at;
      finish = "stop", cut = 1;
    }
  }
  int pos = r->nprompt + r->nids; /* the prompt and the completion so far */
  if (!finish && (r->nids >= r->p.max_tokens || pos >= en->o.ctx)) finish = "length";
  if (finish) {
    if (!cut && en->tok) gc_tok_stream_flush(&r->ts, &r->text, &e); /* a partial character: U+FFFD */
  } else {
    r->ready = r->text.len - stop_holdback(r);
    pthread_cond_broadcast(r->cv);
  }
  pthread_mutex_unlock(r->mu);
  if (finish) {
    end_req(en, r, finish, 0, NULL);
    return 1;
  }
  r->last = tok;
  return 0;
}

/* A failed step: every request in it fails with msg (500). */
static void fail_rows(gc_engine_t *en, gc_srv_req_t **rows, int n, const char *msg) {
  fprintf(stderr, "gcore-serve: %s\n", msg);
  for (int i = 0; i < n; i++) end_req(en, rows[i], NULL, 500, msg);
}

/* Whether r changes its logits before the draw (allowed_token_ids,
 * logit_bias, presence or frequency penalty): then it draws from its own
 * row, r->row. */
static int adjusted(const gc_srv_req_t *r) {
  return r->p.allowed || r->p.nbias || r->p.presence != 0 || r->p.frequency != 0;
}

/* r->row := logits[vocab] with only r's allowed ids (allowed_token_ids;
 * the others -inf), r's logit_bias added, then OpenAI's penalties: each id
 * the reply holds c > 0 times lowered by presence + c·frequency (counted
 * in r->counts, zero before and after). */
static void adjust(gc_srv_req_t *r, const float *logits, int vocab) {
  int *counts = r->counts;
  if (r->p.allowed) {
    for (int id = 0; id < vocab; id++) r->row[id] = -INFINITY;
    for (int i = 0; i < r->p.nallowed; i++) r->row[r->p.allowed[i]] = logits[r->p.allowed[i]];
  } else {
    memcpy(r->row, logits, (size_t)vocab * sizeof *r->row);
  }
  for (int i = 0; i < r->p.nbias; i++) r->row[r->p.bias_ids[i]] += r->p.bias[i];
  if (r->p.presence == 0 && r->p.frequency == 0) return;
  for (int i = 0; i < r->nids; i++)
    if (r->ids[i] >= 0 && r->ids[i] < vocab) counts[r->ids[i]]++;
  for (int i = 0; i < r->nids; i++) {
    int32_t id = r->ids[i];
    if (id < 0 || id >= vocab || !counts[id]) continue;
    r->row[id] -= r->p.presence + (float)counts[id] * r->p.frequency;
    counts[id] = 0; /* once an id */
  }
}

/* Whether the device's argmax picks r's next token: greedy, no penalty, no
 * end token to keep out (min_tokens), no logprobs wanted, no JSON mode. */
static int greedy(const gc_srv_req_t *r) {
  return r->p.sp.temperature <= 0 && r->p.sp.repeat_penalty == 1.0f && r->nids >= r->p.min_tokens &&
         r->p.logprobs < 0 && !r->p.json && !adjusted(r);
}

/* Take logits[id] out (-inf), keeping what it was in saved[*n]. */
static void mask(struct masked *saved, float *logits, int32_t id, int *n) {
  saved[(*n)++] = (struct masked){id, logits[id]};
  logits[id] = -INFINITY;
}

/* JSON mode's draw for r from logits[vocab] (gc_json_sample, r->jrow its
 * scratch row): the reply's end is the chat's end of turn, else the
 * model's first end id. */
static int sample_json(const gc_engine_t *en, gc_srv_req_t *r, const float *logits, int32_t *tok, gc_err_t *e) {
  const int32_t end = r->p.chat_end >= 0 ? r->p.chat_end : en->nends ? en->ends[0] : -1;
  return gc_json_sample(en->jv, &r->jf, r->smp, r->p.sp.temperature <= 0, logits, r->jrow, en->w->cfg.vocab_size,
                        end, tok, e);
}

/* Draw r's next token from its row of logits[vocab] (the engine's buffer:
 * changed while drawing, as it was after; saved: en->nmask entries of
 * scratch, the row's own) and, where r asks, its logprobs into *lp. Before
 * min_tokens tokens every id that would end the reply is taken out of the
 * draw (-inf), ignore_eos or not, as vLLM's min_tokens does; the logprobs
 * are the model's. Touches only r's sampler and the row: rows of a step
 * run at once (decode_step). Errors: the sampler's. */
static int sample(const gc_engine_t *en, gc_srv_req_t *r, float *logits, struct masked *saved, int32_t *tok,
                  token_lp_t *lp, gc_err_t *e) {
  int n = 0;
  if (r->nids < r->p.min_tokens) {
    for (int i = 0; i < en->nends; i++) mask(saved, logits, en->ends[i], &n);
    for (int i = 0; i < r->p.nstop_ids; i++) mask(saved, logits, r->p.stop_ids[i], &n);
    if (r->p.chat_end >= 0) mask(saved, logits, r->p.chat_end, &n);
  }
  const float *row = logits;
  if (adjusted(r)) adjust(r, logits, en->w->cfg.vocab_size), row = r->row;
  int t = -1, rc = r->p.json ? sample_json(en, r, row, &t, e) : gc_sampler_sample(r->smp, row, &t, e);
  while (n--) logits[saved[n].id] = saved[n].was; /* in reverse: an id masked twice gets its first value */
  *tok = t;
  if (!rc && r->p.logprobs >= 0)
    lp->ntop = gc_logprobs(logits, en->w->cfg.vocab_size, t, r->p.logprobs, &lp->lp, lp->top);
  return rc;
}

/* fn on each of the n items at items (size bytes apart) at once: a thread
 * each but the first, which runs on the caller's, as does any whose
 * thread did not start; returns when all are done. n <= BMAX. */
static void on_threads(void *(*fn)(void *), void *items, size_t size, int n) {
  pthread_t th[BMAX];
  int started[BMAX] = {0};
  for (int i = 1; i < n; i++) started[i] = !pthread_create(&th[i], NULL, fn, (char *)items + (size_t)i * size);
  for (int i = 0; i < n; i++)
    if (!started[i]) fn((char *)items + (size_t)i * size);
  for (int i = 1; i < n; i++)
    if (started[i]) pthread_join(th[i], NULL);
}

/* One row of a step drawn on its own thread (decode_step). */
typedef struct row_draw {
  const gc_engine_t *en;
  gc_srv_req_t *r;
  float *logits;
  struct masked *saved;
  int32_t tok;
  token_lp_t lp;
  int rc;
  gc_err_t e;
} row_draw_t;

static void *draw_row(void *arg) {
  row_draw_t *d = arg;
  d->rc = sample(d->en, d->r, d->logits, d->saved, &d->tok, &d->lp, &d->e);
  return NULL;
}

/* ---- the step ---------------------------------------------------------- */

/* Drop the requests whose clients left. */
static void reap(gc_engine_t *en) {
  for (int s = 0; s < en->o.parallel; s++) {
    gc_srv_req_t *r = en->slot[s];
    if (!r) continue;
    pthread_mutex_lock(r->mu);
    int gone = r->cancelled;
    pthread_mutex_unlock(r->mu);
    if (gone) end_req(en, r, NULL, 499, "cancelled");
  }
}

/* The request admitted first among those still prefilling, or NULL. */
static gc_srv_req_t *oldest_prefilling(gc_engine_t *en) {
  gc_srv_req_t *r = NULL;
  for (int s = 0; s < en->o.parallel; s++) {
    gc_srv_req_t *x = en->slot[s];
    if (x && x->fed < x->nprompt && (!r || x->seq < r->seq)) r = x;
  }
  return r;
}

/* Rows of logits a prefill chunk of r may write at once: every row's
 * (GC_SRV_PLOGITS_BYTES of them) where r wants the prompt's logprobs. */
#define GC_SRV_PLOGITS_BYTES (64 << 20)
static int chunk_rows(const gc_engine_t *en, const gc_srv_req_t *r) {
  if (!r->p.prompt_logprobs) return en->o.prefill_chunk;
  int rows = (int)(GC_SRV_PLOGITS_BYTES / ((size_t)en->w->cfg.vocab_size * sizeof(float)));
  return rows < 1 ? 1 : rows < en->o.prefill_chunk ? rows : en->o.prefill_chunk;
}

/* Rows [j0, j1) of a prefill chunk's prompt logprobs (prompt_logprobs). */
typedef struct prompt_rows {
  const gc_engine_t *en;
  gc_srv_req_t *r;
  const float *lg;
  int j0, j1;
} prompt_rows_t;

static void *prompt_rows(void *arg) {
  prompt_rows_t *x = arg;
  gc_srv_req_t *r = x->r;
  int vocab = x->en->w->cfg.vocab_size, L = r->p.logprobs;
  for (int j = x->j0; j < x->j1; j++) {
    int k = r->fed + j + 1;
    r->pntops[k] = gc_logprobs(x->lg + (size_t)j * vocab, vocab, r->prompt[k], L, &r->plps[k], r->ptops + (size_t)k * L);
  }
  return NULL;
}

/* The logprobs of r's prompt ids at fed + 1 .. fed + rows from the chunk's
 * rows of logits lg[rows, vocab] (row j is the distribution of id fed + j + 1),
 * the rows shared among en->cores threads (a vocabulary-long pass or three
 * a row: about 1 ms for 128k ids). Without r's lock: its readers wait for
 * the first token or the end, which come under the lock after the last
 * chunk. */
static void prompt_logprobs(gc_engine_t *en, gc_srv_req_t *r, const float *lg, int rows) {
  int nt = en->cores < rows ? en->cores : rows < 1 ? 1 : rows;
  prompt_rows_t x[BMAX];
  for (int i = 0; i < nt; i++)
    x[i] = (prompt_rows_t){.en = en, .r = r, .lg = lg, .j0 = (int)((int64_t)rows * i / nt),
                           .j1 = (int)((int64_t)rows * (i + 1) / nt)};
  on_threads(prompt_rows, x, sizeof *x, nt);
}

/* The next t tokens of r's prompt (every row's logits where r wants the
 * prompt's logprobs); at its end, the first token. A failure ends r (its
 * slot is free after). */
static void prefill_chunk(gc_engine_t *en, gc_srv_req_t *r, int t) {
  int left = r->nprompt - r->fed, all = r->p.prompt_logprobs;
  int last = t == left, on_device = !all && (!last || greedy(r));
  int32_t next = -1;
  gc_err_t e = {0};
  float *lg = all ? en->plogits : en->logits;
  double t0 = gc_now();
  int rc = gc_llama_slot_forward(en->m, r->slot, r->prompt + r->fed, t, all, lg, on_device ? &next : NULL, &e);
  en->prefill_s += gc_now() - t0;
  if (rc) {
    fail_rows(en, &r, 1, e.msg);
    return;
  }
  if (all) prompt_logprobs(en, r, lg, last ? t - 1 : t);
  r->fed += t;
  pthread_mutex_lock(r->mu);
  r->prefills++;
  pthread_mutex_unlock(r->mu);
  if (!last) return;
  if (!r->p.max_tokens) { /* echo's prompt alone */
    end_req(en, r, "length", 0, NULL);
    return;
  }
  int32_t tok = next;
  float *row = all ? lg + (size_t)(t - 1) * en->w->cfg.vocab_size : lg;
  token_lp_t lp;
  if (!on_device && sample(en, r, row, en->masked, &tok, &lp, &e)) {
    fail_rows(en, &r, 1, e.msg);
    return;
  }
  emit(en, r, tok, on_device ? NULL : &lp);
}

/* Before r's first prefill chunk: where another slot's cache begins with
 * more of r's prompt than r's own (a running request's prompt, as far as
 * it is in the cache, or what a free slot kept), those keys and values are
 * copied into r's slot on the device and r starts after them: the other
 * choices of a prompt (n) start from the first's, and requests that share
 * a system prompt from each other's. Older requests have finished their
 * prefill by then (oldest first). Returns a device error (r is failed). */
static int share_prefix(gc_engine_t *en, gc_srv_req_t *r) {
  if (!may_reuse(en, r)) return GC_OK;
  int best = -1, most = r->fed;
  for (int s = 0; s < en->o.parallel; s++) {
    const gc_srv_req_t *x = en->slot[s];
    if (s == r->slot) continue;
    int n = x ? common_prefix(r, x->prompt, x->fed) : common_prefix(r, en->kept[s], en->nkept[s]);
    if (n > most) best = s, most = n;
  }
  if (best < 0) return GC_OK;
  gc_err_t e = {0};
  if (gc_llama_slot_copy(en->m, r->slot, best, r->fed, most, &e)) {
    fail_rows(en, &r, 1, e.msg);
    return e.code;
  }
  r->fed = most;
  pthread_mutex_lock(r->mu);
  r->cached = most;
  pthread_mutex_unlock(r->mu);
  return GC_OK;
}

/* Prefill chunks of the requests still prefilling, oldest first, each at
 * most prefill_chunk tokens, while their sum stays within prefill_chunk
 * (at least one chunk); a request's first starts where share_prefix finds
 * the most of its prompt. */
static void prefill_step(gc_engine_t *en) {
  int used = 0;
  for (gc_srv_req_t *r; (r = oldest_prefilling(en));) {
    if (!r->prefills && r->fed == r->cached && share_prefix(en, r)) continue;
    int left = r->nprompt - r->fed, most = chunk_rows(en, r), t = left < most ? left : most;
    if (used && used + t > en->o.prefill_chunk) break;
    prefill_chunk(en, r, t);
    used += t;
  }
}

/* One batched decode step of every request that is generating. */
static void decode_step(gc_engine_t *en) {
  gc_srv_req_t *rows[BMAX];
  int slots[BMAX], M = 0, all_greedy = 1;
  int32_t toks[BMAX], next[BMAX];
  for (int s = 0; s < en->o.parallel; s++) {
    gc_srv_req_t *r = en->slot[s];
    if (!r || r->fed < r->nprompt) continue;
    rows[M] = r, slots[M] = s, toks[M] = r->last;
    all_greedy &= greedy(r);
    M++;
  }
  if (!M) return;
  int run = M;
  for (; en->o.fixed_batch && run < en->o.parallel; run++) /* padding: copies of row 0, results dropped */
    slots[run] = slots[0], toks[run] = toks[0];
  gc_err_t e = {0};
  double t0 = gc_now();
  int rc = gc_llama_decode_batch(en->m, run, slots, toks, en->logits, all_greedy ? next : NULL, &e);
  en->step_s += gc_now() - t0;
  if (rc) {
    fail_rows(en, rows, M, e.msg);
    return;
  }
  en->steps++;
  en->step_rows += run;
  /* the rows drawn on the host at once, a thread each but the first (a
   * vocabulary-long pass or three each: 0.5 ms and more for 128k ids),
   * then emitted in order */
  int vocab = en->w->cfg.vocab_size;
  row_draw_t d[BMAX];
  for (int i = 0; !all_greedy && i < M; i++)
    d[i] = (row_draw_t){.en = en, .r = rows[i], .logits = en->logits + (size_t)i * vocab,
                        .saved = en->masked + (size_t)i * en->nmask};
  if (!all_greedy) on_threads(draw_row, d, sizeof *d, M);
  for (int i = 0; i < M; i++) {
    if (!all_greedy && d[i].rc) {
      fail_rows(en, &rows[i], 1, d[i].e.msg);
      continue;
    }
    emit(en, rows[i], all_greedy ? next[i] : d[i].tok, all_greedy ? NULL : &d[i].lp);
  }
}

/* r's own row (and counts) where it adjusts its logits. Errors: GC_ENOMEM. */
static int adjust_room(gc_engine_t *en, gc_srv_req_t *r, gc_err_t *e) {
  size_t n = (size_t)en->w->cfg.vocab_size;
  if (!adjusted(r)) return GC_OK;
  if (!(r->row = gc_malloc(n * sizeof *r->row, e))) return e->code;
  if ((r->p.presence != 0 || r->p.frequency != 0) && !(r->counts = gc_calloc(n, sizeof *r->counts, e))) return e->code;
  return GC_OK;
}

/* JSON mode's state for r: the recognizer at the reply's start, its row.
 * Errors: GC_ENOMEM; GC_EUNSUPPORTED without a tokenizer (no pieces). */
static int json_room(gc_engine_t *en, gc_srv_req_t *r, gc_err_t *e) {
  if (!en->tok) return gc_err_set(e, GC_EUNSUPPORTED, "JSON mode needs the model's tokenizer");
  if (!en->jv && gc_json_vocab_new(en->tok, &en->jv, e)) /* the first such request's (the engine thread's) */
    return e->code;
  if (r->p.call) gc_json_fsm_init_call(&r->jf, r->p.call);
  else if (r->p.schema) gc_json_fsm_init_schema(&r->jf, r->p.schema);
  else if (r->p.choice.n) gc_json_fsm_init_choice(&r->jf, &r->p.choice);
  else if (r->p.regex) gc_json_fsm_init_regex(&r->jf, r->p.regex);
  else gc_json_fsm_init(&r->jf);
  r->jrow = gc_malloc((size_t)en->w->cfg.vocab_size * sizeof *r->jrow, e);
  return r->jrow ? GC_OK : e->code;
}

/* Room for r's prompt logprobs, and the engine's rows of prefill logits.
 * Errors: GC_ENOMEM. */
static int prompt_room(gc_engine_t *en, gc_srv_req_t *r, gc_err_t *e) {
  size_t n = (size_t)r->nprompt, L = (size_t)r->p.logprobs;
  if (!en->plogits) {
    en->prows = chunk_rows(en, r);
    if (!(en->plogits = gc_malloc((size_t)en->prows * en->w->cfg.vocab_size * sizeof(float), e))) return GC_ENOMEM;
  }
  if (!(r->plps = gc_malloc(n * sizeof *r->plps, e)) || !(r->pntops = gc_calloc(n, sizeof *r->pntops, e)) ||
      !(r->ptops = gc_malloc((n * L + 1) * sizeof *r->ptops, e)))
    return GC_ENOMEM;
  r->plps[0] = NAN;
  return GC_OK;
}

/* Put queued requests into free slots (under en->mu); those whose client
 * left are dropped. */
static void admit(gc_engine_t *en) {
  while (en->qlen) {
    gc_srv_req_t *r = en->queue[en->qhead];
    int keep, s = pick_slot(en, r, &keep);
    pthread_mutex_lock(r->mu);
    int gone = r->cancelled;
    pthread_mutex_unlock(r->mu);
    if (!gone && s < 0) return;
    en->qhead = (en->qhead + 1) % en->o.max_queue;
    en->qlen--;
    if (gone) {
      gc_srv_req_release(r);
      continue;
    }
    gc_err_t e = {0};
    if (gc_sampler_create(en->w->cfg.vocab_size, &r->p.sp, &r->smp, &e) ||
        (r->p.prompt_logprobs && prompt_room(en, r, &e)) || (r->p.json && json_room(en, r, &e)) ||
        adjust_room(en, r, &e)) {
      pthread_mutex_lock(r->mu);
      req_done(r, NULL, 500, e.msg);
      pthread_mutex_unlock(r->mu);
      gc_srv_req_release(r);
      continue;
    }
    for (int i = 0; i < r->nprompt; i++) gc_sampler_accept(r->smp, r->prompt[i]);
    /* the completion continues the prompt's text, echoed or not */
    if (en->tok) gc_tok_stream_after(&r->ts, en->tok, GC_TOK_SKIP_SPECIAL, r->prompt, (size_t)r->nprompt);
    gc_llama_slot_keep(en->m, s, keep);
    en->nkept[s] = 0; /* r overwrites what follows; what it leaves is kept at its end */
    r->fed = keep;
    pthread_mutex_lock(r->mu);
    r->cached = keep;
    pthread_mutex_unlock(r->mu);
    r->slot = s;
    r->seq = en->seq++;
    en->slot[s] = r;
    en->active++;
  }
}

/* Fail everything waiting or running: the server is stopping. */
static void drain(gc_engine_t *en) {
  for (int s = 0; s < en->o.parallel; s++) {
    gc_srv_req_t *r = en->slot[s];
    if (!r) continue;
    end_req(en, r, NULL, 503, "the server is shutting down");
  }
  pthread_mutex_lock(&en->mu);
  while (en->qlen) {
    gc_srv_req_t *r = en->queue[en->qhead];
    en->qhead = (en->qhead + 1) % en->o.max_queue;
    en->qlen--;
    pthread_mutex_lock(r->mu);
    req_done(r, NULL, 503, "the server is shutting down");
    pthread_mutex_unlock(r->mu);
    gc_srv_req_release(r);
  }
  pthread_mutex_unlock(&en->mu);
}

static void *engine_main(void *arg) {
  gc_engine_t *en = arg;
  int rc = engine_open(en, &en->start_err);
  pthread_mutex_lock(&en->mu);
  en->started = 1;
  en->start_rc = rc;
  pthread_cond_broadcast(&en->ready_cv);
  pthread_mutex_unlock(&en->mu);
  if (rc) return NULL;
  for (;;) {
    pthread_mutex_lock(&en->mu);
    for (;;) {
      if (en->stopping) break;
      admit(en);
      if (en->active) break;
      pthread_cond_wait(&en->cv, &en->mu);
    }
    int stop = en->stopping;
    pthread_mutex_unlock(&en->mu);
    if (stop) break;
    reap(en);
    prefill_step(en);
    decode_step(en);
    if (en->step_delay_ms > 0) /* tests: requests stay in their slots long enough to queue behind */
      nanosleep(&(struct timespec){en->step_delay_ms / 1000, en->step_delay_ms % 1000 * 1000000L}, NULL);
  }
  drain(en);
  double wall = gc_now() - en->t_open;
  if (en->steps || en->prefill_s > 0) /* a server that never ran a request has nothing to report */
    fprintf(stderr, "gcore-serve: %lld decode steps, %.2f rows and %.3f ms a step; %lld graph replays (decode "
            "steps and one-row prefill passes); %.1f s in steps, %.1f s in prefills, of %.1f s served\n",
            (long long)en->steps, en->steps ? (double)en->step_rows / en->steps : 0.0,
            en->steps ? 1e3 * en->step_s / en->steps : 0.0, (long long)gc_llama_graph_replays(en->m), en->step_s,
            en->prefill_s, wall);
  return NULL;
}

/* ---- the interface -------------------------------------------------------- */

/* en->ends: the ids of the logits row (vocab_size) that are an end of
 * sequence, the model config's and the tokenizer's. Errors: GC_ENOMEM. */
static int collect_ends(gc_engine_t *en, gc_err_t *e) {
  const gc_llama_config_t *c = &en->w->cfg;
  int vocab = c->vocab_size, tv = en->tok ? gc_tok_vocab_size(en->tok) : 0, n = c->n_eos;
  for (int id = 0; id < tv && id < vocab; id++) n += gc_tok_is_eos(en->tok, id);
  if (!(en->ends = gc_malloc((size_t)(n ? n : 1) * sizeof *en->ends, e)) ||
      !(en->masked = gc_malloc((size_t)BMAX * (size_t)(en->nmask = n + GC_SRV_MAX_STOP_IDS + 1) * sizeof *en->masked, e)))
    return GC_ENOMEM;
  for (int i = 0; i < c->n_eos; i++)
    if (c->eos_ids[i] >= 0 && c->eos_ids[i] < vocab) en->ends[en->nends++] = c->eos_ids[i];
  for (int id = 0; id < tv && id < vocab; id++)
    if (gc_tok_is_eos(en->tok, id)) en->ends[en->nends++] = id;
  return GC_OK;
}

int gc_engine_start(const gc_engine_opts_t *o, const gc_llama_weights_t *w, const gc_tok_t *tok,
                    gc_engine_t **out, gc_err_t *e) {
  *out = NULL;
  if (o->parallel < 1 || o->parallel > BMAX)
    return gc_err_set(e, GC_EINVAL, "--parallel %d: from 1 to %d requests at once", o->parallel, BMAX);
  gc_engine_t *en = gc_calloc(1, sizeof *en, e);
  if (!en) return GC_ENOMEM;
  en->o = *o;
  en->w = w;
  en->tok = tok;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  en->cores = cores < 1 ? 1 : cores < BMAX ? (int)cores : BMAX;
  const char *delay = getenv("GCORE_SERVE_STEP_DELAY_MS");
  int64_t ms;
  if (delay && !gc_parse_i64(delay, &ms) && ms > 0 && ms <= 10000) en->step_delay_ms = (long)ms;
  if (!(en->queue = gc_calloc((size_t)o->max_queue, sizeof *en->queue, e)) || collect_ends(en, e)) {
    free(en->queue);
    free(en->ends);
    free(en->masked);
    free(en);
    return e->code;
  }
  pthread_mutex_init(&en->mu, NULL);
  pthread_cond_init(&en->cv, NULL);
  pthread_cond_init(&en->ready_cv, NULL);
  if (pthread_create(&en->thread, NULL, engine_main, en)) {
    free(en->ends);
    free(en->masked);
    free(en->queue);
    free(en);
    return gc_err_set(e, GC_ENOMEM, "cannot start the engine thread");
  }
  pthread_mutex_lock(&en->mu);
  while (!en->started) pthread_cond_wait(&en->ready_cv, &en->mu);
  int rc = en->start_rc;
  pthread_mutex_unlock(&en->mu);
  if (rc) {
    *e = en->start_err;
    gc_engine_free(en);
    return rc;
  }
  *out = en;
  return GC_OK;
}

int gc_engine_submit(gc_engine_t *en, gc_srv_req_t *const *rs, int n) {
  pthread_mutex_lock(&en->mu);
  int rc = en->stopping ? GC_SUBMIT_STOPPING : en->qlen + n > en->o.max_queue ? GC_SUBMIT_FULL : GC_SUBMIT_OK;
  for (int i = 0; !rc && i < n; i++) {
    gc_srv_req_t *r = rs[i];
    pthread_mutex_lock(r->mu);
    r->refs++;
    pthread_mutex_unlock(r->mu);
    en->queue[(en->qhead + en->qlen) % en->o.max_queue] = r;
    en->qlen++;
  }
  if (!rc) pthread_cond_signal(&en->cv);
  pthread_mutex_unlock(&en->mu);
  return rc;
}

void gc_engine_cancel(gc_engine_t *en, gc_srv_req_t *r) {
  pthread_mutex_lock(&en->mu);
  pthread_mutex_lock(r->mu);
  r->cancelled = 1;
  pthread_mutex_unlock(r->mu);
  /* still queued: out of the queue at once (its place is free for the next
   * request), the engine's reference dropped; in a slot: reap() frees it */
  for (int i = 0; i < en->qlen; i++) {
    int at = (en->qhead + i) % en->o.max_queue;
    if (en->queue[at] != r) continue;
    for (int j = i; j + 1 < en->qlen; j++)
      en->queue[(en->qhead + j) % en->o.max_queue] = en->queue[(en->qhead + j + 1) % en->o.max_queue];
    en->qlen--;
    gc_srv_req_release(r); /* not the last: the caller holds one */
    break;
  }
  pthread_cond_signal(&en->cv);
  pthread_mutex_unlock(&en->mu);
}

void gc_engine_load(gc_engine_t *en, int *active, int *queued) {
  pthread_mutex_lock(&en->mu);
  *active = en->active;
  *queued = en->qlen;
  pthread_mutex_unlock(&en->mu);
}

void gc_engine_stop(gc_engine_t *en) {
  if (!en) return;
  pthread_mutex_lock(&en->mu);
  int joined = en->joined;
  en->stopping = 1;
  en->joined = 1;
  pthread_cond_signal(&en->cv);
  pthread_mutex_unlock(&en->mu);
  if (joined) return;
  pthread_join(en->thread, NULL);
  gc_llama_free(en->m);
  en->m = NULL;
  for (int r = 0; r < GC_LLAMA_TP_MAX; r++) {
    gc_rt_close(en->rts[r]);
    gc_dev_close(en->devs[r]);
    en->rts[r] = NULL, en->devs[r] = NULL;
  }
}

void gc_engine_free(gc_engine_t *en) {
  if (!en) return;
  gc_engine_stop(en);
  free(en->logits);
  free(en->plogits);
  free(en->ends);
  free(en->masked);
  gc_json_vocab_free(en->jv);
  free(en->queue);
  for (int s = 0; s < BMAX; s++) free(en->kept[s]);
  pthread_cond_destroy(&en->ready_cv);
  pthread_cond_destroy(&en->cv);
  pthread_mutex_destroy(&en->mu);
  free(en);
}

int gc_engine_ctx(const gc_engine_t *en) { return en->o.ctx; }
int gc_engine_parallel(const gc_engine_t *en) { return en->o.parallel; }
int gc_engine_max_queue(const gc_engine_t *en) { return en->o.max_queue; }
const char *gc_engine_device(const gc_engine_t *en) { return en->devname; }

const gc_srv_hist_t *gc_engine_itl(const gc_engine_t *en) { return &en->itl; }

/* Buckets from half a millisecond (a decode step of a small model) to two
 * minutes (a long prompt on a loaded server). */
const double gc_srv_le[GC_SRV_NLE] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                      0.5,    1,     2.5,    5,     10,   30,    60,   120};

void gc_srv_hist_add(gc_srv_hist_t *h, double s) {
  if (!(s > 0)) s = 0;
  int b = 0;
  while (b < GC_SRV_NLE && s > gc_srv_le[b]) b++;
  atomic_fetch_add(&h->n[b], 1ull);
  atomic_fetch_add(&h->sum_ns, (unsigned long long)(s * 1e9 + 0.5));
}
