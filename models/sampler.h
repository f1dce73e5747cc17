/* sampler.h — picks the next token from a row of fp32 logits: greedy,
 * or temperature sampling truncated by top-k, top-p and min-p, with
 * llama.cpp's repetition penalty, from a seeded PCG32 stream that gives the
 * same tokens on every platform for the same logits and seed. */
#ifndef GC_MODELS_SAMPLER_H
#define GC_MODELS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

/* PCG32 (XSH-RR, 64-bit state): small, fast, specified bit for bit. */
typedef struct gc_rng {
  uint64_t state;
  uint64_t inc; /* odd */
} gc_rng_t;

void gc_rng_seed(gc_rng_t *r, uint64_t seed);
uint32_t gc_rng_u32(gc_rng_t *r);
/* Uniform in [0, 1) with 32 random bits. */
double gc_rng_uniform(gc_rng_t *r);

/* Order of operations (llama.cpp's): repetition penalty, then top-k,
 * top-p, min-p, then temperature, then one draw. Greedy (temperature <= 0)
 * applies only the penalty and takes the argmax. */
typedef struct gc_sampler_params {
  float temperature;    /* <= 0: greedy; else logits / temperature */
  int top_k;            /* keep the k highest logits; <= 0: off */
  float top_p;          /* keep the shortest most-likely prefix whose
                           probability reaches top_p; in (0, 1], 1: off */
  float min_p;          /* keep p >= min_p * p_max; in [0, 1], 0: off */
  float repeat_penalty; /* > 0; 1: off. For each distinct token among the
                           last repeat_last_n accepted ones: a logit > 0 is
                           divided by it, a logit <= 0 multiplied */
  int repeat_last_n;    /* window of accepted tokens, 0 .. 1<<20 */
  uint64_t seed;
} gc_sampler_params_t;

/* Greedy, no truncation, no penalty, window 64, seed 0. Can't fail. */
void gc_sampler_params_default(gc_sampler_params_t *p);

typedef struct gc_sampler gc_sampler_t; /* opaque: params, rng, window,
                                           scratch for vocab_size tokens */

/* Create a sampler for logits rows of vocab_size (1 .. 1<<22) entries.
 * Errors: GC_EINVAL naming the bad parameter, GC_ENOMEM. */
int gc_sampler_create(int vocab_size, const gc_sampler_params_t *p,
                      gc_sampler_t **out, gc_err_t *e);
void gc_sampler_free(gc_sampler_t *s); /* NULL is a no-op */

/* Record a token the model has seen (prompt or generated) in the penalty
 * window. Ids outside the vocabulary are ignored. Can't fail. */
void gc_sampler_accept(gc_sampler_t *s, int token);

/* Forget the window and restart the random stream from seed. */
void gc_sampler_reset(gc_sampler_t *s, uint64_t seed);

/* Choose a token from logits[vocab_size] (not modified). NaN logits are
 * never chosen. Does not accept the token: call gc_sampler_accept.
 * Errors: GC_EINVAL when no logit is a number above -inf. */
int gc_sampler_sample(gc_sampler_t *s, const float *logits, int *token,
                      gc_err_t *e);

/* A token and its log-probability. */
typedef struct gc_logprob {
  int32_t id;
  float lp;
} gc_logprob_t;

#define GC_LOGPROBS_MAX 20 /* most alternatives gc_logprobs reports */

/* The model's own distribution over logits[n] (the log-softmax, in double,
 * before any penalty, temperature or truncation: vLLM's default logprobs):
 * id's log-probability into *lp, and the ntop (0 .. GC_LOGPROBS_MAX) most
 * likely ids with theirs into top[0, ntop), most likely first, ties to the
 * lower id. NaN logits count as -inf. Returns how many of top it filled
 * (ntop, or fewer where fewer than ntop logits are above -inf; every
 * logit -inf or NaN: 0 and *lp -inf). Can't fail. */
int gc_logprobs(const float *logits, int n, int id, int ntop, float *lp, gc_logprob_t *top);

/* Index of the largest logit, the lowest index among ties; NaN ignored.
 * -1 when n <= 0 or every entry is NaN. Can't fail. */
int gc_sampler_argmax(const float *logits, int n);

#endif
