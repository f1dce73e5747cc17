/* sampler.c — token selection. Candidates are (logit, id) pairs ordered by
 * logit descending, id ascending, so every tie is broken the same way on
 * every platform. Top-k uses a k-element heap; top-p/min-p first drop the
 * tokens that cannot survive, then sort only what is left. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SMP_MAX_VOCAB (1 << 22)
#define SMP_MAX_WINDOW (1 << 20)

typedef struct {
  float logit;
  int32_t id;
} smp_cand_t;

struct gc_sampler {
  gc_sampler_params_t p;
  int vocab;
  gc_rng_t rng;
  float *work;       /* [vocab] logits after the penalty */
  smp_cand_t *cand;  /* [vocab] surviving candidates */
  uint32_t *stamp;   /* [vocab] last penalty pass that touched the id */
  uint32_t pass;
  int32_t *window;   /* [repeat_last_n] ring of accepted tokens */
  int n_window, head;
};

/* ------------------------------------------------------------------ rng */

static const uint64_t PCG_MULT = 6364136223846793005ull;

uint32_t gc_rng_u32(gc_rng_t *r) {
  uint64_t old = r->state;
  r->state = old * PCG_MULT + r->inc;
  uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
  uint32_t rot = (uint32_t)(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

void gc_rng_seed(gc_rng_t *r, uint64_t seed) {
  r->state = 0;
  r->inc = (0x9e3779b97f4a7c15ull << 1) | 1u; /* fixed stream */
  gc_rng_u32(r);
  r->state += seed;
  gc_rng_u32(r);
}

double gc_rng_uniform(gc_rng_t *r) { return gc_rng_u32(r) * (1.0 / 4294967296.0); }

/* ------------------------------------------------------------ lifecycle */

void gc_sampler_params_default(gc_sampler_params_t *p) {
  memset(p, 0, sizeof *p);
  p->temperature = 0.0f;
  p->top_k = 0;
  p->top_p = 1.0f;
  p->min_p = 0.0f;
  p->repeat_penalty = 1.0f;
  p->repeat_last_n = 64;
  p->seed = 0;
}

static int smp_check(int vocab, const gc_sampler_params_t *p, gc_err_t *e) {
  if (vocab <= 0 || vocab > SMP_MAX_VOCAB)
    return gc_err_set(e, GC_EINVAL, "sampler: vocab_size %d is outside 1..%d", vocab, SMP_MAX_VOCAB);
  if (!isfinite(p->temperature) || p->temperature < 0)
    return gc_err_set(e, GC_EINVAL, "sampler: temperature %g must be >= 0", (double)p->temperature);
  if (!(p->top_p > 0 && p->top_p <= 1))
    return gc_err_set(e, GC_EINVAL, "sampler: top_p %g must be in (0, 1]", (double)p->top_p);
  if (!(p->min_p >= 0 && p->min_p <= 1))
    return gc_err_set(e, GC_EINVAL, "sampler: min_p %g must be in [0, 1]", (double)p->min_p);
  if (!(p->repeat_penalty > 0) || !isfinite(p->repeat_penalty))
    return gc_err_set(e, GC_EINVAL, "sampler: repeat_penalty %g must be > 0", (double)p->repeat_penalty);
  if (p->repeat_last_n < 0 || p->repeat_last_n > SMP_MAX_WINDOW)
    return gc_err_set(e, GC_EINVAL, "sampler: repeat_last_n %d is outside 0..%d", p->repeat_last_n, SMP_MAX_WINDOW);
  return GC_OK;
}

int gc_sampler_create(int vocab_size, const gc_sampler_params_t *p, gc_sampler_t **out, gc_err_t *e) {
  *out = NULL;
  int rc = smp_check(vocab_size, p, e);
  if (rc) return rc;
  gc_sampler_t *s = gc_calloc(1, sizeof *s, e);
  if (!s) return GC_ENOMEM;
  s->p = *p;
  s->vocab = vocab_size;
  s->work = gc_malloc((size_t)vocab_size * sizeof *s->work, e);
  s->cand = s->work ? gc_malloc((size_t)vocab_size * sizeof *s->cand, e) : NULL;
  s->stamp = s->cand ? gc_calloc((size_t)vocab_size, sizeof *s->stamp, e) : NULL;
  s->window = s->stamp ? gc_malloc((size_t)(p->repeat_last_n ? p->repeat_last_n : 1) * sizeof *s->window, e) : NULL;
  if (!s->window) {
    gc_sampler_free(s);
    return GC_ENOMEM;
  }
  gc_sampler_reset(s, p->seed);
  *out = s;
  return GC_OK;
}

void gc_sampler_free(gc_sampler_t *s) {
  if (!s) return;
  free(s->work);
  free(s->cand);
  free(s->stamp);
  free(s->window);
  free(s);
}

void gc_sampler_reset(gc_sampler_t *s, uint64_t seed) {
  gc_rng_seed(&s->rng, seed);
  s->n_window = 0;
  s->head = 0;
}

void gc_sampler_accept(gc_sampler_t *s, int token) {
  if (!s || token < 0 || token >= s->vocab || s->p.repeat_last_n == 0) return;
  s->window[s->head] = token;
  s->head = (s->head + 1) % s->p.repeat_last_n;
  if (s->n_window < s->p.repeat_last_n) s->n_window++;
}

/* ------------------------------------------------------------- ordering */

/* a before b: higher logit first, then lower id. */
static int smp_before(const smp_cand_t *a, const smp_cand_t *b) {
  return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int smp_cmp(const void *x, const void *y) {
  const smp_cand_t *a = x, *b = y;
  return smp_before(a, b) ? -1 : smp_before(b, a) ? 1 : 0;
}

int gc_sampler_argmax(const float *logits, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
  return best;
}

int gc_logprobs(const float *logits, int n, int id, int ntop, float *lp, gc_logprob_t *top) {
  float m = -INFINITY;
  int got = 0;
  if (ntop > GC_LOGPROBS_MAX) ntop = GC_LOGPROBS_MAX;
  for (int i = 0; i < n; i++) {
    float x = logits[i];
    if (isnan(x) || x == -INFINITY) continue;
    if (x > m) m = x;
    /* top[0, got) sorted by logit, descending; an equal logit keeps its
     * place behind the lower id already there */
    if (got < ntop || (got && x > top[got - 1].lp)) {
      int k = got < ntop ? got++ : got - 1;
      for (; k > 0 && top[k - 1].lp < x; k--) top[k] = top[k - 1];
      top[k] = (gc_logprob_t){i, x};
    }
  }
  if (m == -INFINITY) {
    *lp = -INFINITY;
    return 0;
  }
  double z = 0, lse;
  if (m == INFINITY) { /* +inf dominates: those share the whole probability */
    for (int i = 0; i < n; i++) z += logits[i] == INFINITY;
    lse = INFINITY;
  } else {
    for (int i = 0; i < n; i++) /* expf: within an ulp, faster than exp's double by half; a sum in double */
      if (!isnan(logits[i])) z += expf(logits[i] - m);
    lse = m + log(z);
  }
  for (int k = 0; k < got; k++)
    top[k].lp = m == INFINITY ? (top[k].lp == INFINITY ? (float)-log(z) : -INFINITY) : (float)(top[k].lp - lse);
  float x = id >= 0 && id < n && !isnan(logits[id]) ? logits[id] : -INFINITY;
  *lp = m == INFINITY ? (x == INFINITY ? (float)-log(z) : -INFINITY) : x == -INFINITY ? -INFINITY : (float)(x - lse);
  return got;
}

/* Min-heap on smp_before (the worst kept candidate at the root). */
static void smp_sift_down(smp_cand_t *h, int n, int i) {
  for (;;) {
    int l = 2 * i + 1, r = l + 1, w = i;
    if (l < n && smp_before(&h[w], &h[l])) w = l;
    if (r < n && smp_before(&h[w], &h[r])) w = r;
    if (w == i) return;
    smp_cand_t t = h[i];
    h[i] = h[w];
    h[w] = t;
    i = w;
  }
}

/* Keep the k best of cand[n] in cand[0..k), sorted. Returns k. */
static int smp_top_k(smp_cand_t *cand, int n, int k) {
  for (int i = k / 2 - 1; i >= 0; i--) smp_sift_down(cand, k, i);
  for (int i = k; i < n; i++) {
    if (smp_before(&cand[i], &cand[0])) {
      cand[0] = cand[i];
      smp_sift_down(cand, k, 0);
    }
  }
  qsort(cand, (size_t)k, sizeof *cand, smp_cmp);
  return k;
}

/* ------------------------------------------------------------- sampling */

static void smp_penalize(gc_sampler_t *s) {
  float pen = s->p.repeat_penalty;
  if (pen == 1.0f || s->n_window == 0) return;
  if (++s->pass == 0) { /* wrapped: clear stale stamps */
    memset(s->stamp, 0, (size_t)s->vocab * sizeof *s->stamp);
    s->pass = 1;
  }
  for (int i = 0; i < s->n_window; i++) {
    int t = s->window[i];
    if (s->stamp[t] == s->pass) continue; /* each distinct token once */
    s->stamp[t] = s->pass;
    s->work[t] = s->work[t] <= 0 ? s->work[t] * pen : s->work[t] / pen;
  }
}

/* Sorted survivors of top-k, then top-p, then min-p, in cand[0..n); the
 * count is returned. On entry cand[0..n) holds every candidate above -inf
 * and m is the largest logit. Without truncation nothing is sorted. */
static int smp_truncate(gc_sampler_t *s, int n, float m) {
  smp_cand_t *c = s->cand;
  int k = s->p.top_k;
  int use_k = k > 0 && k < n, use_p = s->p.top_p < 1.0f, use_min = s->p.min_p > 0.0f;
  if (!use_k && !use_p && !use_min) return n;
  double zp = 0; /* normaliser of the set top-p sees */
  if (use_k) {
    n = smp_top_k(c, n, k);
    for (int i = 0; i < n; i++) zp += exp((double)c[i].logit - m);
  } else {
    for (int i = 0; i < n; i++) zp += exp((double)c[i].logit - m);
    /* A token of the nucleus other than the first has p > (1-top_p)/(n-1);
     * min-p keeps logits >= m + log(min_p). Drop the rest before sorting
     * (with a margin: the exact passes below decide). */
    double cut = -INFINITY;
    if (use_p && n > 1) cut = m + log((1.0 - s->p.top_p) / (n - 1) * zp);
    if (use_min) cut = fmax(cut, m + log((double)s->p.min_p));
    cut -= 1e-6;
    int w = 0;
    for (int i = 0; i < n; i++)
      if (c[i].logit == m || (double)c[i].logit >= cut) c[w++] = c[i];
    n = w;
    qsort(c, (size_t)n, sizeof *c, smp_cmp);
  }
  if (use_p) {
    double cum = 0;
    for (int i = 0; i < n; i++) {
      cum += exp((double)c[i].logit - m) / zp;
      if (cum >= (double)s->p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (use_min) {
    double cut = m + log((double)s->p.min_p);
    int w = 1; /* the best always stays */
    while (w < n && (double)c[w].logit >= cut) w++;
    n = w;
  }
  return n;
}

int gc_sampler_sample(gc_sampler_t *s, const float *logits, int *token, gc_err_t *e) {
  *token = -1;
  for (int i = 0; i < s->vocab; i++) s->work[i] = isnan(logits[i]) ? -INFINITY : logits[i];
  smp_penalize(s);
  int best = gc_sampler_argmax(s->work, s->vocab);
  if (best < 0 || s->work[best] == -INFINITY)
    return gc_err_set(e, GC_EINVAL, "sampler: no logit is a number above -inf");
  float m = s->work[best];
  if (s->p.temperature <= 0 || m == INFINITY) {
    *token = best; /* +inf dominates: every other probability is 0 */
    return GC_OK;
  }
  int n = 0;
  for (int i = 0; i < s->vocab; i++)
    if (s->work[i] > -INFINITY) s->cand[n++] = (smp_cand_t){s->work[i], i};
  n = smp_truncate(s, n, m);
  double inv_t = 1.0 / s->p.temperature, z = 0;
  for (int i = 0; i < n; i++) z += exp(((double)s->cand[i].logit - m) * inv_t);
  double target = gc_rng_uniform(&s->rng) * z, cum = 0;
  for (int i = 0; i < n; i++) {
    cum += exp(((double)s->cand[i].logit - m) * inv_t);
    if (cum > target) {
      *token = s->cand[i].id;
      return GC_OK;
    }
  }
  *token = s->cand[n - 1].id; /* rounding left target at the very top */
  return GC_OK;
}
