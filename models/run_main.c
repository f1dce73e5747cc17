/* run_main.c — gcore-run: a Llama model from its own files through the
 * kernels of a bundle (prompt ids in, ids out, timings), or one op from a
 * bundle checked against the fp64 reference (--op). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/check.h"
#include "../runtime/dispatch.h"
#include "llama.h"
#include "sampler.h"

static const char usage[] =
    "usage: gcore-run -m MODEL -b BUNDLE [--tokens IDS] [-n N] [sampling] [options]\n"
    "       gcore-run -b BUNDLE --op OP --m M --n N [--k K] [--dtype T]\n"
    "Runs a Llama model (a Hugging Face directory or a llama2.c checkpoint) through the\n"
    "kernels of a bundle built by gcore-gen: prefill of the prompt in one pass, then one\n"
    "token at a time; generated ids stream to stdout, timings to stderr.\n"
    "\n"
    "model:\n"
    "  -m, --model PATH     Hugging Face directory (config.json + safetensors) or llama2.c .bin\n"
    "  -b, --bundle PATH    bundle built by gcore-gen for this model\n"
    "  -p, --prompt TEXT    text prompt (needs a tokenizer: not supported yet, use --tokens)\n"
    "  --tokens IDS         prompt as comma-separated token ids (default: the BOS id)\n"
    "  -n, --n-predict N    tokens to generate (default 64)\n"
    "  --ctx N              KV-cache positions (default: the model's maximum, at most 4096)\n"
    "  --ignore-eos         keep generating past end-of-sequence tokens\n"
    "  --token-by-token     feed the prompt one token at a time (decode path) instead of a prefill\n"
    "  --json               print one JSON object at the end (ids, timings) instead of streaming\n"
    "  --logits FILE        write the logits of every position as float32 [positions, vocab]\n"
    "  --profile            print a per-kernel table for prefill and decode to stderr (count,\n"
    "                       total and mean time, TFLOP/s, GB/s, share of the wall time; no graphs)\n"
    "  --no-graph           launch decode steps kernel by kernel instead of replaying a graph\n"
    "  --warmup N           first run the prompt and N decode steps untimed, then start over\n"
    "                       (first launches, caches and graph capture are then not in the timings)\n"
    "sampling:\n"
    "  --temp T             temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K            keep the K most likely tokens (default 40; 0 = all)\n"
    "  --top-p P            nucleus sampling (default 0.95; 1 = off)\n"
    "  --min-p P            drop tokens below P x the top probability (default 0.05; 0 = off)\n"
    "  --repeat-penalty R   penalise the last 64 tokens (default 1.0 = off)\n"
    "  --seed N             sampler seed (default 0)\n"
    "one op (--op):\n"
    "  --op OP              gemm | gemm_add | gemm_swiglu | rmsnorm | add | embed | rope_kv |\n"
    "                       attention | argmax\n"
    "  --m/--n/--k/--h/--g/--d N   problem size, one value each\n"
    "  --dtype T            f32 | f16 | bf16 | A:B:C (default f32)\n"
    "  --seed N             input seed (default 1 here)\n"
    "  --dump DIR           write the op's buffers as raw little-endian files + meta.txt\n"
    "  --min-time S         seconds of timed launches (default 0.2)\n"
    "device:\n"
    "  --backend NAME       device backend (default cpu)\n"
    "  --device N           device ordinal (default 0)\n"
    "  -h, --help           this text\n";

enum { O_OP = 256, O_M, O_N, O_K, O_H, O_G, O_D, O_DTYPE, O_BACKEND, O_DEVICE, O_SEED, O_DUMP,
       O_MINTIME, O_TOKENS, O_CTX, O_IGNORE_EOS, O_TBT, O_JSON, O_LOGITS, O_TEMP, O_TOPK, O_TOPP,
       O_MINP, O_REPEAT, O_PROFILE, O_NOGRAPH, O_WARMUP };

static const struct option longopts[] = {
    {"bundle", 1, 0, 'b'},        {"model", 1, 0, 'm'},        {"prompt", 1, 0, 'p'},
    {"n-predict", 1, 0, 'n'},     {"op", 1, 0, O_OP},          {"m", 1, 0, O_M},
    {"n", 1, 0, O_N},             {"k", 1, 0, O_K},            {"h", 1, 0, O_H},
    {"g", 1, 0, O_G},             {"d", 1, 0, O_D},            {"dtype", 1, 0, O_DTYPE},
    {"backend", 1, 0, O_BACKEND}, {"device", 1, 0, O_DEVICE},  {"seed", 1, 0, O_SEED},
    {"dump", 1, 0, O_DUMP},       {"min-time", 1, 0, O_MINTIME}, {"tokens", 1, 0, O_TOKENS},
    {"ctx", 1, 0, O_CTX},         {"ignore-eos", 0, 0, O_IGNORE_EOS},
    {"token-by-token", 0, 0, O_TBT}, {"json", 0, 0, O_JSON},   {"logits", 1, 0, O_LOGITS},
    {"temp", 1, 0, O_TEMP},       {"top-k", 1, 0, O_TOPK},     {"top-p", 1, 0, O_TOPP},
    {"min-p", 1, 0, O_MINP},      {"repeat-penalty", 1, 0, O_REPEAT},
    {"profile", 0, 0, O_PROFILE}, {"no-graph", 0, 0, O_NOGRAPH},
    {"warmup", 1, 0, O_WARMUP},
    {"help", 0, 0, 'h'},          {0, 0, 0, 0}};

typedef struct run_ctx {
  gc_rt_t *rt;
  const gc_rt_kernel_t *k;
  const gc_problem_t *p;
} run_ctx_t;

static int launch(void *ctx, void **args, gc_err_t *e) {
  run_ctx_t *r = ctx;
  return gc_rt_launch(r->rt, r->k, r->p, args, e);
}

static int dump(gc_check_t *c, const gc_problem_t *p, const char *dir, gc_err_t *e) {
  const gc_opbuf_t *bufs;
  int n;
  gc_check_buffers(c, &bufs, &n);
  if (gc_mkdirs(dir, e)) return e->code;
  gc_buf_t meta = {0};
  char key[GC_PROBLEM_KEY], path[1200];
  gc_problem_key(p, key);
  const gc_op_scalars_t *sc = gc_check_scalars(c);
  int rc = gc_buf_printf(&meta, e, "problem %s\nscalars eps=%.9g pos0=%lld layout=%lld scale=%.9g\n",
                         key, (double)sc->eps, (long long)sc->pos0, (long long)sc->layout,
                         (double)sc->scale);
  static const char *const kinds[] = {"input", "output", "inout"};
  for (int i = 0; !rc && i < n; i++) {
    size_t bytes = (size_t)bufs[i].count * gc_dtype_size(bufs[i].dtype);
    void *host = gc_malloc(bytes, e);
    if (!host) return GC_ENOMEM;
    rc = gc_check_read(c, i, host, e);
    snprintf(path, sizeof path, "%s/%s.bin", dir, bufs[i].name);
    if (!rc) rc = gc_write_file(path, host, bytes, e);
    if (!rc && bufs[i].kind == GC_BUF_INOUT) {
      snprintf(path, sizeof path, "%s/%s.init.bin", dir, bufs[i].name);
      rc = gc_write_file(path, gc_check_initial(c, i), bytes, e);
    }
    if (!rc) rc = gc_buf_printf(&meta, e, "%s %s %lld %s\n", bufs[i].name,
                                gc_dtype_name(bufs[i].dtype), (long long)bufs[i].count,
                                kinds[bufs[i].kind]);
    free(host);
  }
  snprintf(path, sizeof path, "%s/meta.txt", dir);
  if (!rc) rc = gc_write_file(path, meta.data, meta.len, e);
  gc_buf_free(&meta);
  return rc;
}

static int run_op(const char *bundle, const char *backend, int ordinal, const gc_problem_t *p,
                  uint64_t seed, const char *dump_dir, double min_time, gc_err_t *e) {
  gc_dev_t *dev = NULL;
  gc_rt_t *rt = NULL;
  gc_check_t *chk = NULL;
  run_ctx_t ctx = {0};
  gc_verify_t v;
  gc_timing_t t;
  char key[GC_PROBLEM_KEY];
  gc_problem_key(p, key);
  int rc = gc_dev_open(backend, ordinal, &dev, e);
  if (!rc) rc = gc_rt_open(dev, bundle, &rt, e);
  if (!rc) rc = gc_rt_find(rt, p, &ctx.k, e);
  ctx.rt = rt;
  ctx.p = p;
  if (!rc) rc = gc_check_setup(dev, p, NULL, seed, &chk, e);
  if (!rc) rc = gc_check_verify(chk, launch, &ctx, &v, e);
  if (!rc && dump_dir) rc = dump(chk, p, dump_dir, e);
  if (!rc && !v.ok) rc = gc_err_set(e, GC_EVERIFY, "%s: kernel %s %s is wrong: %s", key,
                                    ctx.k->d.template_name, ctx.k->d.params, v.why);
  gc_time_opts_t topt = {2, 5, 2000, min_time, gc_check_default_flush(dev)};
  if (!rc) rc = gc_check_time(chk, launch, &ctx, &topt, &t, e);
  if (!rc) {
    printf("%s on %s (%s): kernel %s %s%s\n", key, gc_rt_target(rt), gc_dev_info(dev)->name,
           ctx.k->d.template_name, ctx.k->d.params, ctx.k->d.is_default ? " [default]" : " [tuned]");
    printf("verified: every element within tolerance (worst %.3f of it)\n", v.worst);
    printf("time: median %.2f us (min %.2f, max %.2f, %lld runs), %.2f GFLOP/s, %.2f GB/s\n",
           t.median_us, t.min_us, t.max_us, (long long)t.iters,
           gc_op_flops(p) / (t.median_us * 1e-6) / 1e9, gc_op_bytes(p) / (t.median_us * 1e-6) / 1e9);
  }
  gc_check_free(chk);
  gc_rt_close(rt);
  gc_dev_close(dev);
  return rc;
}


/* ---- the model path ------------------------------------------------------- */

typedef struct run_opts {
  const char *model, *bundle, *backend, *tokens, *logits_path, *prompt;
  int ordinal, n_predict, ctx, ignore_eos, token_by_token, json, profile, no_graph, warmup;
  gc_sampler_params_t sp;
} run_opts_t;

static int parse_tokens(const char *s, int32_t **out, int *n, gc_err_t *e) {
  *n = 0;
  size_t cap = strlen(s) / 2 + 2;
  int32_t *v = gc_malloc(cap * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  char *buf = gc_strdup(s, e);
  if (!buf) {
    free(v);
    return GC_ENOMEM;
  }
  int rc = GC_OK;
  for (char *save = NULL, *t = strtok_r(buf, ", ", &save); t && !rc; t = strtok_r(NULL, ", ", &save)) {
    int64_t id;
    if (gc_parse_i64(t, &id) || id < 0 || id > INT32_MAX)
      rc = gc_err_set(e, GC_EINVAL, "--tokens: '%s' is not a token id", t);
    else
      v[(*n)++] = (int32_t)id;
  }
  free(buf);
  if (!rc && !*n) rc = gc_err_set(e, GC_EINVAL, "--tokens: no ids given");
  if (rc) {
    free(v);
    return rc;
  }
  *out = v;
  return GC_OK;
}

static int is_eos(const gc_llama_config_t *c, int tok) {
  for (int i = 0; i < c->n_eos; i++)
    if (c->eos_ids[i] == tok) return 1;
  return 0;
}

typedef struct gen_state {
  FILE *logits;
  int32_t *out;       /* generated ids */
  int n_out;
  double t_prefill, t_decode, ttft;
} gen_state_t;

static int write_logits(gen_state_t *g, const float *lg, int rows, int vocab, gc_err_t *e) {
  if (g->logits && fwrite(lg, sizeof(float), (size_t)rows * vocab, g->logits) != (size_t)rows * vocab)
    return gc_err_set(e, GC_EIO, "writing --logits failed");
  return GC_OK;
}

/* Prompt in: one pass (or one token at a time); logits of its last row. */
static int prefill(gc_llama_t *m, const run_opts_t *o, const int32_t *p, int np, float *lg,
                   gen_state_t *g, gc_err_t *e) {
  int vocab = gc_llama_config(m)->vocab_size;
  double t0 = gc_now();
  if (o->token_by_token) {
    for (int i = 0; i < np; i++)
      if (gc_llama_forward(m, p + i, 1, 0, lg, e) || write_logits(g, lg, 1, vocab, e)) return e->code;
  } else {
    int all = g->logits != NULL;
    if (gc_llama_forward(m, p, np, all, lg, e) || write_logits(g, lg, all ? np : 1, vocab, e))
      return e->code;
    if (all) memmove(lg, lg + (size_t)(np - 1) * vocab, (size_t)vocab * sizeof *lg);
  }
  g->t_prefill = gc_now() - t0;
  return GC_OK;
}

static int generate(gc_llama_t *m, const run_opts_t *o, gc_sampler_t *smp, const int32_t *p,
                    int np, gen_state_t *g, gc_err_t *e) {
  const gc_llama_config_t *c = gc_llama_config(m);
  float *lg = gc_malloc((size_t)np * c->vocab_size * sizeof *lg, e);
  if (!lg) return GC_ENOMEM;
  double t0 = gc_now();
  int rc = prefill(m, o, p, np, lg, g, e);
  for (int i = 0; i < np; i++) gc_sampler_accept(smp, p[i]);
  double td = gc_now();
  /* greedy with no penalty and no logits to write: the device does argmax */
  int on_device = o->sp.temperature <= 0 && o->sp.repeat_penalty == 1.0f && !g->logits;
  int32_t next = -1;
  for (int i = 0; !rc && i < o->n_predict; i++) {
    int32_t tok;
    int t;
    if (next >= 0)
      t = next;
    else if ((rc = gc_sampler_sample(smp, lg, &t, e)))
      break;
    tok = t;
    gc_sampler_accept(smp, tok);
    g->out[g->n_out++] = tok;
    if (i == 0) g->ttft = gc_now() - t0;
    if (!o->json) {
      printf("%d ", tok);
      fflush(stdout);
    }
    if ((!o->ignore_eos && is_eos(c, tok)) || i + 1 == o->n_predict) break;
    if (gc_llama_pos(m) >= o->ctx) {
      if (!o->json) fprintf(stderr, "\ngcore-run: context of %d positions is full; stopping\n", o->ctx);
      break;
    }
    if (i == 0) td = gc_now();
    rc = gc_llama_forward_ex(m, &tok, 1, 0, lg, on_device ? &next : NULL, e);
    if (!rc && !on_device) rc = write_logits(g, lg, 1, c->vocab_size, e);
  }
  g->t_decode = gc_now() - td;
  free(lg);
  return rc;
}

/* The prompt, then up to o->warmup greedy decode steps, untimed and not
 * profiled; then the cache is emptied for the timed run. */
static int warm_up(gc_llama_t *m, const run_opts_t *o, const int32_t *p, int np, gc_err_t *e) {
  const gc_llama_config_t *c = gc_llama_config(m);
  float *lg = gc_malloc((size_t)c->vocab_size * sizeof *lg, e);
  if (!lg) return GC_ENOMEM;
  gc_prof_t *prof = gc_llama_profile(m);
  gc_llama_set_profile(m, NULL);
  int rc = GC_OK;
  if (o->token_by_token)
    for (int i = 0; i < np && !rc; i++) rc = gc_llama_forward(m, p + i, 1, 0, lg, e);
  else
    rc = gc_llama_forward(m, p, np, 0, lg, e);
  int32_t tok = p[np - 1], next = 0;
  for (int i = 0; i < o->warmup && !rc && gc_llama_pos(m) < o->ctx; i++, tok = next)
    rc = gc_llama_forward_ex(m, &tok, 1, 0, lg, &next, e);
  gc_llama_set_profile(m, prof);
  gc_llama_reset(m);
  free(lg);
  return rc;
}

static void report(const run_opts_t *o, int np, const gen_state_t *g) {
  double pre = np / (g->t_prefill > 0 ? g->t_prefill : 1e-9);
  int steps = g->n_out > 1 ? g->n_out - 1 : 0;
  double dec = steps / (g->t_decode > 0 ? g->t_decode : 1e-9);
  if (o->json) {
    printf("{\"tokens\": [");
    for (int i = 0; i < g->n_out; i++) printf("%s%d", i ? ", " : "", g->out[i]);
    printf("], \"prompt_tokens\": %d, \"generated_tokens\": %d, \"prompt_tok_per_s\": %.3f, "
           "\"decode_tok_per_s\": %.3f, \"ttft_ms\": %.3f}\n",
           np, g->n_out, pre, steps ? dec : 0.0, g->ttft * 1e3);
  } else {
    printf("\n");
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s; decode: %d tokens, %.1f tok/s; "
            "time to first token %.1f ms\n", np, pre, steps, steps ? dec : 0.0, g->ttft * 1e3);
  }
}

static int run_model(const run_opts_t *o, gc_err_t *e) {
  gc_llama_weights_t *w = NULL;
  gc_dev_t *dev = NULL;
  gc_rt_t *rt = NULL;
  gc_llama_t *m = NULL;
  gc_sampler_t *smp = NULL;
  gc_prof_t *prof = NULL;
  int32_t *prompt = NULL;
  int np = 0;
  gen_state_t g = {0};
  run_opts_t oo = *o;
  int rc = gc_weights_open(o->model, &w, e);
  if (!rc) {
    int bos = w->cfg.bos_id >= 0 ? w->cfg.bos_id : 1;
    char def[16];
    snprintf(def, sizeof def, "%d", bos);
    rc = parse_tokens(o->tokens ? o->tokens : def, &prompt, &np, e);
  }
  if (!rc && oo.ctx <= 0) oo.ctx = w->cfg.max_seq < 4096 ? w->cfg.max_seq : 4096;
  if (!rc && np > oo.ctx)
    rc = gc_err_set(e, GC_EINVAL, "the prompt has %d tokens, more than --ctx %d", np, oo.ctx);
  if (!rc && oo.ctx > w->cfg.max_seq)
    rc = gc_err_set(e, GC_EINVAL, "--ctx %d is over the model's %d positions", oo.ctx, w->cfg.max_seq);
  if (!rc) rc = gc_dev_open(o->backend, o->ordinal, &dev, e);
  if (!rc) rc = gc_rt_open(dev, o->bundle, &rt, e);
  if (!rc) rc = gc_llama_create(dev, rt, w, oo.ctx, o->token_by_token ? 1 : np, &m, e);
  if (!rc && o->profile && !(rc = gc_prof_create(dev, &prof, e))) gc_llama_set_profile(m, prof);
  if (!rc && o->no_graph) gc_llama_set_graphs(m, 0);
  if (!rc) rc = gc_sampler_create(w->cfg.vocab_size, &o->sp, &smp, e);
  if (!rc && !(g.out = gc_calloc((size_t)o->n_predict + 1, sizeof *g.out, e))) rc = GC_ENOMEM;
  if (!rc && o->logits_path && !(g.logits = fopen(o->logits_path, "wb")))
    rc = gc_err_set(e, GC_EIO, "%s: cannot write", o->logits_path);
  if (!rc && o->warmup) rc = warm_up(m, &oo, prompt, np, e);
  if (!rc) rc = generate(m, &oo, smp, prompt, np, &g, e);
  if (g.logits && fclose(g.logits) != 0 && !rc) rc = gc_err_set(e, GC_EIO, "%s: write failed", o->logits_path);
  if (!rc) report(o, np, &g);
  if (!rc && prof) gc_prof_print(prof, stderr);
  gc_prof_free(prof);
  free(g.out);
  free(prompt);
  gc_sampler_free(smp);
  gc_llama_free(m);
  gc_rt_close(rt);
  gc_dev_close(dev);
  gc_weights_close(w);
  return rc;
}

static int parse_f(const char *s, double lo, double hi, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (!*s || *end || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

static int bad_flag(const char *flag, const char *what) {
  fprintf(stderr, "gcore-run: %s: expected %s\n", flag, what);
  return 2;
}

int main(int argc, char **argv) {
  const char *dims[GC_NDIMS] = {0};
  const char *op = NULL, *dtype = NULL, *dump_dir = NULL;
  run_opts_t o = {0};
  o.backend = "cpu";
  o.n_predict = 64;
  gc_sampler_params_default(&o.sp); /* then llama.cpp's defaults */
  o.sp.temperature = 0.8f;
  o.sp.top_k = 40;
  o.sp.top_p = 0.95f;
  o.sp.min_p = 0.05f;
  o.sp.repeat_penalty = 1.0f;
  int64_t iv, seed = -1;
  double min_time = 0.2, fv;
  int c;
  while ((c = getopt_long(argc, argv, "b:m:p:n:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'b': o.bundle = optarg; break;
      case 'm': o.model = optarg; break;
      case 'p': o.prompt = optarg; break;
      case 'n':
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 1000000) return bad_flag("-n", "a token count");
        o.n_predict = (int)iv;
        break;
      case O_OP: op = optarg; break;
      case O_M: case O_N: case O_K: case O_H: case O_G: case O_D: dims[c - O_M] = optarg; break;
      case O_DTYPE: dtype = optarg; break;
      case O_BACKEND: o.backend = optarg; break;
      case O_DUMP: dump_dir = optarg; break;
      case O_TOKENS: o.tokens = optarg; break;
      case O_LOGITS: o.logits_path = optarg; break;
      case O_IGNORE_EOS: o.ignore_eos = 1; break;
      case O_TBT: o.token_by_token = 1; break;
      case O_JSON: o.json = 1; break;
      case O_DEVICE:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 1024) return bad_flag("--device", "an ordinal");
        o.ordinal = (int)iv;
        break;
      case O_SEED:
        if (gc_parse_i64(optarg, &seed) || seed < 0) return bad_flag("--seed", "an integer >= 0");
        o.sp.seed = (uint64_t)seed;
        break;
      case O_CTX:
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > (1 << 24)) return bad_flag("--ctx", "positions >= 1");
        o.ctx = (int)iv;
        break;
      case O_MINTIME:
        if (parse_f(optarg, 1e-6, 3600, &min_time)) return bad_flag("--min-time", "seconds > 0");
        break;
      case O_TEMP:
        if (parse_f(optarg, 0, 100, &fv)) return bad_flag("--temp", "a temperature >= 0");
        o.sp.temperature = (float)fv;
        break;
      case O_TOPK:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > INT32_MAX) return bad_flag("--top-k", "K >= 0");
        o.sp.top_k = (int)iv;
        break;
      case O_TOPP:
        if (parse_f(optarg, 0, 1, &fv)) return bad_flag("--top-p", "0 <= P <= 1");
        o.sp.top_p = (float)fv;
        break;
      case O_MINP:
        if (parse_f(optarg, 0, 1, &fv)) return bad_flag("--min-p", "0 <= P <= 1");
        o.sp.min_p = (float)fv;
        break;
      case O_REPEAT:
        if (parse_f(optarg, 0.01, 100, &fv)) return bad_flag("--repeat-penalty", "a penalty > 0");
        o.sp.repeat_penalty = (float)fv;
        break;
      case O_PROFILE: o.profile = 1; break;
      case O_NOGRAPH: o.no_graph = 1; break;
      case O_WARMUP:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 1000000) return bad_flag("--warmup", "a step count >= 0");
        o.warmup = (int)iv;
        break;
      case 'h': fputs(usage, stdout); return 0;
      default: fputs(usage, stderr); return 2;
    }
  }
  gc_err_t e = {0};
  gc_problems_t probs = {0};
  int rc;
  if (optind < argc)
    rc = gc_err_set(&e, GC_EINVAL, "unexpected argument '%s'", argv[optind]);
  else if (!o.bundle)
    rc = gc_err_set(&e, GC_EINVAL, "no bundle: give -b BUNDLE (built by gcore-gen)");
  else if (op && o.model)
    rc = gc_err_set(&e, GC_EINVAL, "give either -m MODEL or --op, not both");
  else if (op) {
    rc = gc_problems_expand(&probs, op, dtype, dims, &e);
    if (!rc && probs.n != 1) rc = gc_err_set(&e, GC_EINVAL, "give one value for each size");
    if (!rc)
      rc = run_op(o.bundle, o.backend, o.ordinal, &probs.v[0], seed < 0 ? 1 : (uint64_t)seed,
                  dump_dir, min_time, &e);
  } else if (!o.model)
    rc = gc_err_set(&e, GC_EINVAL, "nothing to run: give -m MODEL (or --op OP with sizes)");
  else if (o.prompt)
    rc = gc_err_set(&e, GC_EUNSUPPORTED, "text prompts need a tokenizer, which gcore does not "
                    "have yet; give the prompt as ids with --tokens");
  else
    rc = run_model(&o, &e);
  gc_problems_free(&probs);
  if (rc) {
    fflush(stdout);
    fprintf(stderr, "gcore-run: %s\n", e.msg);
    return 1;
  }
  return 0;
}
