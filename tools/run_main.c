/* run_main.c — gcore-run: a Llama model from its own files through the
 * kernels of a bundle (prompt text or ids in, text or ids out, timings; an
 * interactive chat that keeps the KV cache between turns), a tokenizer on
 * stdin (--tokenize, --detokenize), or one op from a bundle checked
 * against the fp64 reference (--op). */
#include <getopt.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/cli.h"
#include "../gen/autobundle.h"
#include "../gen/compile.h"
#include "../gen/target.h"
#include "../runtime/check.h"
#include "../runtime/dispatch.h"
#include "../models/chat.h"
#include "../models/jsonmode.h"
#include "../models/llama.h"
#include "../models/llama_bundle.h"
#include "../models/sampler.h"
#include "../models/tokenizer.h"

static const char usage[] =
    "usage: gcore-run -m MODEL [-b BUNDLE] [-p TEXT | --tokens IDS] [-n N] [sampling] [options]\n"
    "       gcore-run -m MODEL [-b BUNDLE] --chat [--system TEXT] [--no-think]   (one user turn per stdin line)\n"
    "       gcore-run --tokenizer PATH --tokenize [--bos] | --detokenize   (stdin to stdout)\n"
    "       gcore-run -b BUNDLE --op OP --m M --n N [--k K] [--dtype T]\n"
    "Runs a Llama model (a Hugging Face directory, a GGUF file or a llama2.c checkpoint) through the\n"
    "kernels of a bundle built by gcore-gen: prefill of the prompt in one pass, then one\n"
    "token at a time; generated text (ids with --tokens) streams to stdout, timings to stderr.\n"
    "\n"
    "model:\n"
    "  -m, --model PATH     Hugging Face directory (config.json + safetensors), GGUF file (F32,\n"
    "                       F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) or llama2.c .bin\n"
    "  --quantize T         store the model's matrices as q8_0, q4_0 or q4_k on load (llama.cpp's\n"
    "                       reference quantizers; embeddings and norms keep their precision)\n"
    "  -b, --bundle PATH    bundle built by gcore-gen for this model (default: built from the\n"
    "                       tuning database for this device into the cache, or reused from it)\n"
    "  --db PATH            without -b: the tuning database (default $GCORE_DB, else\n"
    "                       ~/.local/share/gcore/tune.db; a missing one gives the defaults)\n"
    "  --cache DIR          without -b: compile and bundle cache (default $GCORE_CACHE or\n"
    "                       ~/.cache/gcore)\n"
    "  -p, --prompt TEXT    text prompt, tokenized (BOS first when the tokenizer adds one)\n"
    "  --tokens IDS         prompt as comma-separated token ids (default: the BOS id); output as ids\n"
    "  --tokens-file FILE   many prompts, one line of ids each, each run from an empty cache;\n"
    "                       one output line (or --json object) per prompt\n"
    "  --tokenizer PATH     tokenizer.json, a directory holding one, or a .gguf vocabulary\n"
    "                       (default: MODEL/tokenizer.json, or the GGUF model's own)\n"
    "  --chat               interactive chat (the model's template: Llama 2, Llama 3, Mistral,\n"
    "                       ChatML, Zephyr): each stdin line is a user turn; the KV cache\n"
    "                       is kept between turns\n"
    "  --system TEXT        system prompt of the chat\n"
    "  --no-think           with --chat: the template's enable_thinking false (Qwen3's: each\n"
    "                       reply starts after an empty <think></think> block; others: no effect)\n"
    "  -n, --n-predict N    tokens to generate (default 64)\n"
    "  --ctx N              KV-cache positions (default: the model's maximum, at most 4096)\n"
    "  --ignore-eos         keep generating past end-of-sequence tokens\n"
    "  -j, --json-schema S  each reply is one JSON object that JSON Schema S accepts (llama.cpp's\n"
    "                       -j; '{}': any object): tokens are drawn from those that keep it so,\n"
    "                       and it ends with an end token once complete (the subset gcore-serve's\n"
    "                       structured outputs read; others refused); needs the tokenizer\n"
    "  --json-schema-file F the same, S read from file F\n"
    "  --regex R            each reply is one whole match of pattern R (ECMA-262's syntax, vLLM's\n"
    "                       guided_regex), ended with an end token where nothing more may follow\n"
    "                       (or the model ends it where the match is whole); needs the tokenizer\n"
    "  --token-by-token     feed the prompt one token at a time (decode path) instead of a prefill\n"
    "  --json               print one JSON object at the end (ids, text, timings) instead of\n"
    "                       streaming; with --chat one object per turn\n"
    "  --logits FILE        write the logits of every position as float32 [positions, vocab]\n"
    "                       (a regular file)\n"
    "  --profile            print a per-kernel table for prefill and decode to stderr (count,\n"
    "                       total and mean time, TFLOP/s, GB/s, share of the wall time; no graphs)\n"
    "  --no-graph           launch decode steps kernel by kernel instead of replaying a graph\n"
    "  --no-ahead           greedy decoding: enqueue each step after the host has read the one\n"
    "                       before (by default the device runs one step ahead of the host)\n"
    "  --no-pdl             launch every kernel after the one before it has finished (by default\n"
    "                       kernels that allow it start while it drains: CUDA, sm_90 and newer)\n"
    "  --l2-window MB       the decode step's O projection asks L2 for the first MB of the FFN's\n"
    "                       gate/up weights (default: 3/5 of the GPU's L2; 0: none)\n"
    "  --warmup N           first run the prompt and N decode steps untimed, then start over\n"
    "                       (not with --chat)\n"
    "                       (first launches, caches and graph capture are then not in the timings)\n"
    "sampling:\n"
    "  --temp T             temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K            keep the K most likely tokens (default 40; 0 = all)\n"
    "  --top-p P            nucleus sampling (default 0.95; 1 = off)\n"
    "  --min-p P            drop tokens below P x the top probability (default 0.05; 0 = off)\n"
    "  --repeat-penalty R   penalise the tokens of the last --repeat-last-n (default 1.0 = off)\n"
    "  --repeat-last-n N    the penalty's window (default 64; 0 = none; -1 = the context)\n"
    "  --seed N             sampler seed (default 0)\n"
    "tokenizer (no model, no bundle):\n"
    "  --tokenize           read text on stdin, print its token ids separated by spaces\n"
    "  --bos                with --tokenize: prepend the BOS id\n"
    "  --detokenize         read ids (spaces, commas or newlines between them) on stdin, print\n"
    "                       the text (invalid UTF-8 is written as U+FFFD)\n"
    "  --null               many texts: --tokenize reads NUL-separated texts and prints one line\n"
    "                       of ids per text; --detokenize reads one line of ids per text and\n"
    "                       writes each text followed by a NUL\n"
    "one op (--op):\n"
    "  --op OP              one of the ops listed at the end\n"
    "  --m/--n/--k/--h/--g/--d N   problem size, one value each\n"
    "  --dtype T            f32 | f16 | bf16 | A:B:C (default f32)\n"
    "  --seed N             input seed (default 1 here)\n"
    "  --dump DIR           write the op's buffers as raw little-endian files + meta.txt (a directory)\n"
    "  --min-time S         seconds of timed launches (default 0.2)\n"
    "  --pos P              the position of the first row (default 3; attention of one row: 1023, attention_batch: 255)\n"
    "  --layout L           RoPE pairs: 0 halves (Hugging Face, default), 1 adjacent (llama2.c)\n"
    "device:\n"
    "  --backend NAME       device backend: cpu (default), cuda (NVIDIA) or hip (AMD)\n"
    "  --device N           device ordinal (default 0)\n"
    "  --tp N               tensor parallelism over N ranks (the model's heads, FFN rows and\n"
    "                       vocabulary split N ways; a bundle built with gcore-gen --tp N): on\n"
    "                       the CPU backend the ranks are N threads of this process; on GPUs\n"
    "                       rank r runs on device --device + r, collectives over NCCL/RCCL\n"
    "  --devices LIST       the ranks' GPU ordinals, comma-separated (e.g. 0,1); --tp defaults\n"
    "                       to their number\n"
    "  -h, --help           this text\n"
    "  --version            this tool's version\n";

enum { O_VERSION = 255, O_OP = 256, O_M, O_N, O_K, O_H, O_G, O_D, O_DTYPE, O_BACKEND, O_DEVICE, O_SEED, O_DUMP,
       O_MINTIME, O_POS, O_LAYOUT, O_TOKENS, O_CTX, O_IGNORE_EOS, O_TBT, O_JSON, O_LOGITS, O_TEMP, O_TOPK, O_TOPP,
       O_MINP, O_REPEAT, O_REPEAT_N, O_PROFILE, O_NOGRAPH, O_NOAHEAD, O_NOPDL, O_L2WIN, O_WARMUP, O_TOKENIZER, O_TOKENIZE, O_DETOKENIZE,
       O_BOS, O_CHAT, O_SYSTEM, O_NO_THINK, O_NULL, O_DB, O_CACHE, O_TOKENS_FILE, O_QUANTIZE, O_TP, O_DEVICES,
       O_JSON_SCHEMA_FILE, O_REGEX };

static const struct option longopts[] = {
    {"bundle", 1, 0, 'b'},        {"model", 1, 0, 'm'},        {"prompt", 1, 0, 'p'},
    {"n-predict", 1, 0, 'n'},     {"op", 1, 0, O_OP},          {"m", 1, 0, O_M},
    {"n", 1, 0, O_N},             {"k", 1, 0, O_K},            {"h", 1, 0, O_H},
    {"g", 1, 0, O_G},             {"d", 1, 0, O_D},            {"dtype", 1, 0, O_DTYPE},
    {"backend", 1, 0, O_BACKEND}, {"device", 1, 0, O_DEVICE},  {"seed", 1, 0, O_SEED},
    {"dump", 1, 0, O_DUMP},       {"min-time", 1, 0, O_MINTIME}, {"pos", 1, 0, O_POS}, {"layout", 1, 0, O_LAYOUT}, {"tokens", 1, 0, O_TOKENS},
    {"ctx", 1, 0, O_CTX},         {"ignore-eos", 0, 0, O_IGNORE_EOS},
    {"token-by-token", 0, 0, O_TBT}, {"json", 0, 0, O_JSON},   {"logits", 1, 0, O_LOGITS},
    {"temp", 1, 0, O_TEMP},       {"top-k", 1, 0, O_TOPK},     {"top-p", 1, 0, O_TOPP},
    {"min-p", 1, 0, O_MINP},      {"repeat-penalty", 1, 0, O_REPEAT}, {"repeat-last-n", 1, 0, O_REPEAT_N},
    {"profile", 0, 0, O_PROFILE}, {"no-graph", 0, 0, O_NOGRAPH}, {"no-ahead", 0, 0, O_NOAHEAD}, {"no-pdl", 0, 0, O_NOPDL},
    {"warmup", 1, 0, O_WARMUP}, {"l2-window", 1, 0, O_L2WIN},
    {"tokenizer", 1, 0, O_TOKENIZER}, {"tokenize", 0, 0, O_TOKENIZE}, {"detokenize", 0, 0, O_DETOKENIZE},
    {"bos", 0, 0, O_BOS},         {"chat", 0, 0, O_CHAT},      {"system", 1, 0, O_SYSTEM},
    {"no-think", 0, 0, O_NO_THINK}, {"json-schema", 1, 0, 'j'}, {"json-schema-file", 1, 0, O_JSON_SCHEMA_FILE},
    {"regex", 1, 0, O_REGEX},
    {"null", 0, 0, O_NULL},       {"db", 1, 0, O_DB},          {"cache", 1, 0, O_CACHE},
    {"tokens-file", 1, 0, O_TOKENS_FILE}, {"quantize", 1, 0, O_QUANTIZE},
    {"tp", 1, 0, O_TP},           {"devices", 1, 0, O_DEVICES},
    {"help", 0, 0, 'h'}, {"version", 0, 0, O_VERSION},          {0, 0, 0, 0}};

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
  if (gc_check_output(dir, 'd', e) || gc_mkdirs(dir, e)) return e->code;
  gc_buf_t meta = {0};
  char key[GC_PROBLEM_KEY], path[1200];
  gc_problem_key(p, key);
  const gc_op_scalars_t *sc = gc_check_scalars(c);
  int rc = gc_buf_printf(&meta, e, "problem %s\nscalars eps=%.9g pos0=%lld layout=%lld scale=%.9g\n",
                         key, (double)sc->eps, (long long)sc->pos0, (long long)sc->layout,
                         (double)sc->scale);
  static const char *const kinds[] = {"input", "output", "inout"};
  for (int i = 0; !rc && i < n; i++) {
    size_t bytes = gc_opbuf_bytes(&bufs[i]);
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

/* pos, layout: the scalars' pos0 and RoPE layout, or -1 for the defaults. */
static int run_op(const char *bundle, const char *backend, int ordinal, const gc_problem_t *p,
                  uint64_t seed, const char *dump_dir, double min_time, int64_t pos, int64_t layout,
                  gc_err_t *e) {
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
  gc_op_scalars_t sc;
  gc_op_default_scalars(p, &sc);
  if (pos >= 0) sc.pos0 = pos;
  if (layout >= 0) sc.layout = layout;
  if (!rc) rc = gc_check_setup(dev, p, &sc, seed, &chk, e);
  if (!rc) rc = gc_check_verify(chk, launch, &ctx, &v, e);
  if (!rc && dump_dir) rc = dump(chk, p, dump_dir, e);
  if (!rc && !v.ok) rc = gc_err_set(e, GC_EVERIFY, "%s: kernel %s %s is wrong: %s", key,
                                    ctx.k->d.template_name, ctx.k->d.params, v.why);
  gc_time_opts_t topt = {.warmup = 2, .min_iters = 5, .max_iters = GC_TIME_MAX_ITERS, .min_time = min_time,
                         .flush = dev ? gc_check_default_flush(dev) : 0};
  if (!rc) rc = gc_check_time(chk, launch, &ctx, &topt, &t, e);
  if (!rc) {
    printf("%s on %s (%s): kernel %s %s%s\n", key, gc_rt_target(rt), gc_dev_info(dev)->name,
           ctx.k->d.template_name, ctx.k->d.params, ctx.k->d.is_default ? " [default]" : " [tuned]");
    printf("verified: every element within tolerance (worst %.3f of it)\n", v.worst);
    double flops, bytes; /* at --pos: the cache rows it reads and writes */
    gc_op_work(p, &sc, &flops, &bytes);
    printf("time: median %.2f us (min %.2f, max %.2f, %lld runs), %.2f GFLOP/s, %.2f GB/s\n",
           t.median_us, t.min_us, t.max_us, (long long)t.iters, flops / (t.median_us * 1e-6) / 1e9,
           bytes / (t.median_us * 1e-6) / 1e9);
  }
  gc_check_free(chk);
  gc_rt_close(rt);
  gc_dev_close(dev);
  return rc;
}


/* ---- the model path ------------------------------------------------------- */

typedef struct run_opts {
  const char *model, *bundle, *backend, *tokens, *logits_path, *prompt, *tokenizer, *system;
  const char *quantize;    /* --quantize TYPE, or NULL */
  const char *tokens_file; /* one prompt of ids per line, each from an empty cache */
  const char *db, *cache; /* without -b: where the bundle comes from */
  int ordinal, n_predict, ctx, ignore_eos, token_by_token, json, chat, bos, profile, no_graph, no_ahead, no_pdl, warmup;
  int tp;                  /* --tp N: tensor-parallel ranks (1: none) */
  int l2_window_mb;        /* --l2-window MB; -1: the default */
  int no_think;            /* --no-think: the template's enable_thinking false */
  const char *json_schema, *json_schema_file; /* --json-schema (its text), --json-schema-file, or NULL */
  const char *regex;                          /* --regex, or NULL */
  int ndev, devices[GC_LLAMA_TP_MAX]; /* --devices: the ranks' ordinals (0: --device + r) */
  gc_sampler_params_t sp;
} run_opts_t;

static int parse_tokens(const char *s, const char *what, int32_t **out, int *n, gc_err_t *e) {
  *n = 0;
  size_t cap = strlen(s) / 2 + 2;
  int32_t *v = gc_malloc(cap * sizeof *v, e);
  if (!v) return GC_ENOMEM;
  char *buf = gc_strdup(s, e);
  if (!buf) {
    free(v);
    return GC_ENOMEM;
  }
  int rc = GC_OK, comma = 1; /* comma: the last separator had a comma (or nothing came yet) */
  for (char *c = buf; *c && !rc;) {
    size_t sp = strspn(c, " \t\r\n");
    if (c[sp] == ',') { /* a comma with no id since the last one (or the start) */
      if (comma)
        rc = gc_err_set(e, GC_EINVAL, "%s: an empty id before comma %d", what, *n + 1);
      comma = 1, c += sp + 1;
      continue;
    }
    c += sp;
    if (!*c) break;
    size_t len = strcspn(c, ", \t\r\n");
    char end = c[len];
    c[len] = 0;
    int64_t id;
    if (gc_parse_i64(c, &id) || id < 0 || id > INT32_MAX)
      rc = gc_err_set(e, GC_EINVAL, "%s: %s is not a token id", what, GC_QUOTED(c));
    else
      v[(*n)++] = (int32_t)id;
    c[len] = end, c += len, comma = 0;
  }
  if (!rc && comma && *n) rc = gc_err_set(e, GC_EINVAL, "%s: an empty id after the last comma", what);
  free(buf);
  if (!rc && !*n && !strcmp(what, "--tokens")) rc = gc_err_set(e, GC_EINVAL, "--tokens: no ids given");
  if (rc) {
    free(v);
    return rc;
  }
  *out = v;
  return GC_OK;
}

/* What a model run carries besides the model: the tokenizer (NULL with
 * --tokens and no -p), the stream that prints text, the chat template. */
typedef struct text_io {
  gc_tok_t *tok;
  gc_tok_stream_t ts;
  gc_buf_t text;   /* text of the current reply (for --json) */
  gc_chat_kind_t chat;
  gc_chat_t conv;   /* --chat: the conversation so far, as the template sees it */
  int32_t chat_end; /* id closing a reply, -1 without --chat */
  gc_json_schema_t *js;   /* --json-schema: the schema of every reply, or NULL */
  gc_json_regex_t *rx;    /* --regex: the pattern every reply matches whole, or NULL */
  gc_json_vocab_t *jv;    /* ... each token's piece (while the tokenizer was open) */
  int32_t json_end;       /* ... the id that ends a reply once its object is complete */
} text_io_t;

static int is_stop(const gc_llama_config_t *c, const text_io_t *io, int tok) {
  for (int i = 0; i < c->n_eos; i++)
    if (c->eos_ids[i] == tok) return 1;
  return io->tok && (gc_tok_is_eos(io->tok, tok) || tok == io->chat_end);
}

typedef struct gen_state {
  FILE *logits;
  int32_t *out;       /* generated ids */
  int n_out;
  double t_prefill, t_decode, ttft;
  int64_t replays; /* decode steps of this generation replayed from a graph */
  int positions;   /* KV-cache positions in use after it */
} gen_state_t;

static int write_logits(gen_state_t *g, const float *lg, int rows, int vocab, gc_err_t *e) {
  if (g->logits && fwrite(lg, sizeof(float), (size_t)rows * vocab, g->logits) != (size_t)rows * vocab)
    return gc_err_set(e, GC_EIO, "writing --logits failed");
  return GC_OK;
}

/* Tokens in at the current position: in passes of at most max_t tokens
 * (or one at a time); leaves the logits of the last row in lg[0, vocab). */
static int prefill(gc_llama_t *m, const run_opts_t *o, int max_t, const int32_t *p, int np, float *lg,
                   gen_state_t *g, gc_err_t *e) {
  int vocab = gc_llama_config(m)->vocab_size;
  int step = o->token_by_token ? 1 : max_t, all = g->logits != NULL;
  double t0 = gc_now();
  for (int i = 0; i < np; i += step) {
    int t = np - i < step ? np - i : step;
    if (gc_llama_forward(m, p + i, t, all, lg, e) || write_logits(g, lg, all ? t : 1, vocab, e)) return e->code;
    if (all && t > 1) memmove(lg, lg + (size_t)(t - 1) * vocab, (size_t)vocab * sizeof *lg);
  }
  g->t_prefill = gc_now() - t0;
  return GC_OK;
}

/* Print token tok as it is generated: text through the stream (control
 * tokens, the stop token and ids past the tokenizer's vocabulary, as in a
 * model's padded embedding, print nothing), else its id. */
static int show(const run_opts_t *o, text_io_t *io, int32_t tok, int stop, gc_err_t *e) {
  if (!io->tok) {
    if (!o->json) printf("%d ", tok);
  } else if (!stop && tok < gc_tok_vocab_size(io->tok)) {
    size_t before = io->text.len;
    if (gc_tok_stream_put(&io->ts, tok, &io->text, e)) return e->code;
    if (!o->json && io->text.len > before) /* a token may add no text yet (a partial UTF-8 sequence) */
      fwrite(io->text.data + before, 1, io->text.len - before, stdout);
  }
  fflush(stdout);
  return GC_OK;
}

static int finish_text(const run_opts_t *o, text_io_t *io, gc_err_t *e) {
  if (!io->tok) return GC_OK;
  size_t before = io->text.len;
  if (gc_tok_stream_flush(&io->ts, &io->text, e)) return e->code;
  if (!o->json && io->text.len > before) fwrite(io->text.data + before, 1, io->text.len - before, stdout);
  return GC_OK;
}

/* What each generated token goes through (emit). */
typedef struct emit_ctx {
  const run_opts_t *o;
  const gc_llama_config_t *c;
  gc_sampler_t *smp;
  gen_state_t *g;
  text_io_t *io;
  int stopped; /* a stop token or the n_predict-th ended it */
  gc_json_fsm_t jf; /* --json-schema: the reply so far, as the recognizer read it */
  float *jrow;      /* ... the step's logits, the tokens that would break it at -inf */
} emit_ctx_t;

/* The next token from a step's logits lg: the sampler's draw, or (with
 * --json-schema or --regex) JSON mode's (gc_json_sample), which ends the
 * reply with the end id once the object (the match) is complete. */
static int draw(emit_ctx_t *x, const float *lg, int *t, gc_err_t *e) {
  if (!x->io->js && !x->io->rx) return gc_sampler_sample(x->smp, lg, t, e);
  int32_t id;
  if (gc_json_sample(x->io->jv, &x->jf, x->smp, x->o->sp.temperature <= 0, lg, x->jrow, x->c->vocab_size,
                     x->io->json_end, &id, e))
    return gc_err_prefix(e, x->io->rx ? "--regex" : "--json-schema");
  *t = id;
  return GC_OK;
}

/* Keep and show id: 0 to go on, 1 when generation stops at it (a stop
 * token, or the n_predict-th), -1 with e set when it cannot be shown
 * (gc_llama_emit_fn). */
static int emit(void *u, int32_t id, gc_err_t *e) {
  emit_ctx_t *x = u;
  gc_sampler_accept(x->smp, id);
  x->g->out[x->g->n_out++] = id;
  int stop = !x->o->ignore_eos && is_stop(x->c, x->io, id);
  if (show(x->o, x->io, id, stop, e)) return -1;
  x->stopped = stop || x->g->n_out == x->o->n_predict;
  return x->stopped;
}

/* Decode after the first token tok (emitted): the rest of n_predict, on
 * the device (greedy, one step ahead of the host) or sampled here from
 * each step's logits. */
static int decode(gc_llama_t *m, emit_ctx_t *x, int32_t tok, int on_device, float *lg, gc_err_t *e) {
  const run_opts_t *o = x->o;
  int rc = GC_OK;
  if (on_device) {
    if (gc_llama_pos(m) < o->ctx) rc = gc_llama_greedy(m, tok, o->n_predict - x->g->n_out, emit, x, e);
  } else {
    while (!rc && !x->stopped && gc_llama_pos(m) < o->ctx) {
      int t;
      if ((rc = gc_llama_forward_ex(m, &tok, 1, 0, lg, NULL, e)) ||
          (rc = write_logits(x->g, lg, 1, x->c->vocab_size, e)) || (rc = draw(x, lg, &t, e)))
        break;
      tok = t;
      if (emit(x, tok, e) < 0) rc = e->code;
    }
  }
  if (!rc && !x->stopped && gc_llama_pos(m) >= o->ctx && !o->json)
    fprintf(stderr, "\ngcore-run: context of %d positions is full; stopping\n", o->ctx);
  return rc;
}

/* Prefill p [np], then sample up to n_predict tokens into g->out; the last
 * sampled token is not run (it is in g->out, not in the cache). */
static int generate(gc_llama_t *m, const run_opts_t *o, int max_t, gc_sampler_t *smp, const int32_t *p,
                    int np, gen_state_t *g, text_io_t *io, gc_err_t *e) {
  const gc_llama_config_t *c = gc_llama_config(m);
  int rows = g->logits && !o->token_by_token ? max_t : 1;
  float *lg = gc_malloc((size_t)rows * c->vocab_size * sizeof *lg, e);
  if (!lg) return GC_ENOMEM;
  /* the generated text continues the prompt's (its first word keeps its space) */
  if (io->tok) gc_tok_stream_after(&io->ts, io->tok, GC_TOK_SKIP_SPECIAL, p, (size_t)np);
  double t0 = gc_now();
  int64_t replays0 = gc_llama_graph_replays(m);
  int rc = prefill(m, o, max_t, p, np, lg, g, e);
  for (int i = 0; i < np; i++) gc_sampler_accept(smp, p[i]);
  double td = gc_now();
  /* greedy with no penalty, no logits to write and no schema: the device does argmax */
  int on_device = o->sp.temperature <= 0 && o->sp.repeat_penalty == 1.0f && !g->logits && !io->js && !io->rx;
  emit_ctx_t x = {.o = o, .c = c, .smp = smp, .g = g, .io = io};
  g->n_out = 0;
  int t = 0;
  if (io->js || io->rx) {
    if (io->rx) gc_json_fsm_init_regex(&x.jf, io->rx);
    else gc_json_fsm_init_schema(&x.jf, io->js);
    if (!(x.jrow = gc_malloc((size_t)c->vocab_size * sizeof *x.jrow, e))) rc = GC_ENOMEM;
  }
  if (!rc && o->n_predict > 0 && !(rc = draw(&x, lg, &t, e))) {
    g->ttft = gc_now() - t0;
    if (emit(&x, t, e) < 0) rc = e->code;
    td = gc_now();
    if (!rc && !x.stopped) rc = decode(m, &x, t, on_device, lg, e);
  }
  if (!rc) rc = finish_text(o, io, e);
  g->t_decode = gc_now() - td;
  g->replays = gc_llama_graph_replays(m) - replays0;
  g->positions = gc_llama_pos(m);
  free(x.jrow);
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
  int steps = 0; /* as the timed run: the device one step ahead */
  if (!rc && o->warmup > 0 && gc_llama_pos(m) < o->ctx)
    rc = gc_llama_greedy(m, p[np - 1], o->warmup, gc_llama_count_ids, &steps, e);
  gc_llama_set_profile(m, prof);
  gc_llama_reset(m);
  free(lg);
  return rc;
}

/* s as a JSON string literal. */
static void json_str(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') printf("\\n");
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

static void json_ids(const char *key, const int32_t *v, int n) {
  printf("\"%s\": [", key);
  for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", v[i]);
  printf("]");
}

static void report(const run_opts_t *o, const int32_t *p, int np, const gen_state_t *g, const text_io_t *io) {
  double pre = np / (g->t_prefill > 0 ? g->t_prefill : 1e-9);
  int steps = g->n_out > 1 ? g->n_out - 1 : 0;
  double dec = steps / (g->t_decode > 0 ? g->t_decode : 1e-9);
  if (o->json) {
    printf("{");
    json_ids("tokens", g->out, g->n_out);
    if (o->chat) {
      printf(", ");
      json_ids("prompt_ids", p, np);
    }
    if (io->tok) {
      printf(", \"text\": ");
      json_str(io->text.data ? io->text.data : "", io->text.len);
    }
    printf(", \"prompt_tokens\": %d, \"generated_tokens\": %d, \"prompt_tok_per_s\": %.3f, "
           "\"decode_tok_per_s\": %.3f, \"ttft_ms\": %.3f, \"graph_replays\": %lld, \"cache_positions\": %d}\n",
           np, g->n_out, pre, steps ? dec : 0.0, g->ttft * 1e3, (long long)g->replays, g->positions);
  } else {
    printf("\n");
    fflush(stdout); /* the text's last bytes (a held-back partial character) before the timing line */
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s; decode: %d tokens, %.1f tok/s; "
            "time to first token %.1f ms\n", np, pre, steps, steps ? dec : 0.0, g->ttft * 1e3);
  }
  fflush(stdout);
}

/* The tokenizer for a model run: --tokenizer, else MODEL/tokenizer.json or
 * the vocabulary of a GGUF model.
 * io->tok stays NULL when neither -p nor --chat needs one and none was named. */
static int open_tokenizer(const run_opts_t *o, const gc_llama_config_t *c, text_io_t *io, gc_err_t *e) {
  char path[4096];
  const char *tp = o->tokenizer;
  struct stat st;
  if (!tp && !o->prompt && !o->chat && !o->json_schema && !o->json_schema_file && !o->regex) return GC_OK; /* none needed */
  snprintf(path, sizeof path, "%s/tokenizer.json", o->model);
  if (!tp && stat(o->model, &st) == 0 && S_ISDIR(st.st_mode) && stat(path, &st) == 0) tp = o->model;
  if (!tp && gc_weights_is_gguf(o->model)) tp = o->model;
  if (!tp)
    return gc_err_set(e, GC_EINVAL, "%s has no tokenizer (llama2.c checkpoints carry no vocabulary; a Hugging Face "
                      "directory needs tokenizer.json): pass --tokenizer PATH, or give ids with --tokens",
                      o->model);
  if (gc_tok_load(tp, &io->tok, e)) return e->code;
  if (gc_tok_note(io->tok)) fprintf(stderr, "gcore-run: %s\n", gc_tok_note(io->tok));
  if (gc_tok_vocab_size(io->tok) > c->vocab_size)
    return gc_err_set(e, GC_EINVAL, "%s: the tokenizer has %d tokens but the model only %d", tp,
                      gc_tok_vocab_size(io->tok), c->vocab_size);
  io->chat_end = -1;
  if (o->chat && gc_chat_detect(io->tok, &io->chat, e)) return e->code;
  if (o->chat) io->chat_end = gc_chat_end_token(io->tok, io->chat);
  if (o->chat) gc_chat_init(&io->conv, io->tok, io->chat);
  io->conv.think_off = o->no_think; /* io->ts: each generate() starts it after its prompt */
  return GC_OK;
}

/* The prompt of a plain run: --tokens, else -p through the tokenizer, else BOS. */
static int prompt_ids(const run_opts_t *o, const gc_llama_config_t *c, text_io_t *io, int32_t **p, int *np,
                      gc_err_t *e) {
  if (o->tokens || !o->prompt) {
    char def[16];
    snprintf(def, sizeof def, "%d", c->bos_id >= 0 ? c->bos_id : io->tok && gc_tok_bos(io->tok) >= 0 ? gc_tok_bos(io->tok) : 1);
    return parse_tokens(o->tokens ? o->tokens : def, "--tokens", p, np, e);
  }
  gc_tok_ids_t ids = {0};
  int flags = gc_tok_prompt_flags(io->tok);
  if (gc_tok_encode(io->tok, o->prompt, strlen(o->prompt), flags, &ids, e)) {
    gc_tok_ids_free(&ids);
    return e->code;
  }
  if (!ids.n) {
    gc_tok_ids_free(&ids);
    return gc_err_set(e, GC_EINVAL, "-p: the prompt has no tokens");
  }
  *p = ids.v;
  *np = (int)ids.n;
  return GC_OK;
}

/* One chat turn: what the cache still lacks of the last reply (its last
 * token, and the end-of-turn token if the reply was cut short), then the
 * user's turn; generate the reply. A turn the context cannot hold is left
 * out (*skipped, its one-line reason on stderr; the conversation goes on
 * as before it). */
static int chat_turn(gc_llama_t *m, const run_opts_t *o, int max_t, gc_sampler_t *smp, const char *user,
                     int turn, gen_state_t *g, text_io_t *io, int *skipped, gc_err_t *e) {
  const gc_llama_config_t *c = gc_llama_config(m);
  gc_tok_ids_t ids = {0};
  int rc = GC_OK;
  if (turn > 0 && g->n_out) rc = gc_tok_ids_push(&ids, g->out[g->n_out - 1], e);
  if (!rc && turn > 0 && (!g->n_out || g->out[g->n_out - 1] != io->chat_end) && io->chat_end >= 0 &&
      !(g->n_out && is_stop(c, io, g->out[g->n_out - 1])))
    rc = gc_tok_ids_push(&ids, io->chat_end, e);
  int n_msgs = io->conv.n_msgs;
  char last = io->conv.last;
  if (!rc) rc = gc_chat_user(&io->conv, turn == 0 ? o->system : NULL, user, &ids, e);
  if (!rc) rc = gc_chat_assistant(&io->conv, NULL, &ids, e); /* the reply's header */
  if (!rc) rc = gc_chat_flush(&io->conv, &ids, e);
  if (!rc && gc_llama_pos(m) + (int)ids.n + 1 > o->ctx) {
    fprintf(stderr, "gcore-run: this turn left out: the conversation would need more than --ctx %d positions "
            "(%d in use, %zu more)\n", o->ctx, gc_llama_pos(m), ids.n + 1);
    *skipped = 1;
    io->conv.n_msgs = n_msgs, io->conv.last = last; /* as before the turn */
    gc_tok_ids_free(&ids);
    return GC_OK;
  }
  io->text.len = 0;
  if (!rc) rc = generate(m, o, max_t, smp, ids.v, (int)ids.n, g, io, e);
  if (!rc) report(o, ids.v, (int)ids.n, g, io);
  gc_tok_ids_free(&ids);
  return rc;
}

/* Read user turns from stdin, one per line (-p, if given, is the first). */
static int chat_loop(gc_llama_t *m, const run_opts_t *o, int max_t, gc_sampler_t *smp, gen_state_t *g,
                     text_io_t *io, gc_err_t *e) {
  char *line = NULL;
  size_t cap = 0;
  int rc = GC_OK, turn = 0, left_out = 0;
  int tty = isatty(0);
  for (ssize_t n = 0; !rc; ) {
    const char *user = o->prompt;
    if (!(turn == 0 && left_out == 0 && user)) { /* -p is the first turn; then stdin's lines */
      if ((tty && fputs("> ", stderr) < 0) || (n = getline(&line, &cap, stdin)) < 0) break;
      while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
      if (n == 0) continue;
      user = line;
    }
    int skipped = 0;
    rc = chat_turn(m, o, max_t, smp, user, turn, g, io, &skipped, e);
    turn += !skipped, left_out += skipped;
  }
  free(line);
  if (!rc && left_out) /* a script sees it in the exit status too */
    rc = gc_err_set(e, GC_EINVAL, "%d turn%s left out: the context (--ctx %d) could not hold %s", left_out,
                    left_out > 1 ? "s" : "", o->ctx, left_out > 1 ? "them" : "it");
  return rc;
}

/* --tokens-file: the prompts, one line of ids each (blank lines skipped). */
typedef struct prompts {
  int32_t **v; /* [n][len[i]] */
  int *len, n, longest;
} prompts_t;

/* Free p's prompts and leave it empty (so a second call frees nothing). */
static void prompts_free(prompts_t *p) {
  for (int i = 0; i < p->n; i++) free(p->v[i]);
  free(p->v);
  free(p->len);
  memset(p, 0, sizeof *p);
}

static int read_prompts(const char *path, prompts_t *p, gc_err_t *e) {
  char *text;
  memset(p, 0, sizeof *p);
  if (gc_read_file(path, 64u << 20, &text, NULL, e)) return e->code;
  int rc = GC_OK, lineno = 0;
  for (char *line = text, *next; line && !rc; line = next) { /* line by line, blank ones counted */
    next = strchr(line, '\n');
    if (next) *next++ = 0;
    else if (!*line) break; /* after the last newline */
    lineno++;
    if (strspn(line, " \t\r,") == strlen(line)) continue;
    int32_t **v = gc_realloc(p->v, (size_t)(p->n + 1) * sizeof *v, e);
    int *len = v ? gc_realloc(p->len, (size_t)(p->n + 1) * sizeof *len, e) : NULL;
    if (v) p->v = v;
    if (len) p->len = len;
    if (!v || !len) rc = GC_ENOMEM;
    else if (!(rc = parse_tokens(line, "--tokens-file", &p->v[p->n], &p->len[p->n], e))) {
      if (p->len[p->n] > p->longest) p->longest = p->len[p->n];
      p->n++;
    } else {
      gc_err_prefix(e, "%s:%d", path, lineno);
    }
  }
  free(text);
  if (!rc && !p->n) rc = gc_err_set(e, GC_EINVAL, "%s: no prompts", path);
  if (rc) prompts_free(p);
  return rc;
}

/* -b BUNDLE, or the bundle for this device and model from the tuning
 * database (built into the cache, or reused), said in one line. */
static int open_bundle(const run_opts_t *o, gc_dev_t *dev, gc_rt_t **rt, char *path, size_t n, gc_err_t *e) {
  gc_llama_bundle_opts_t bo = {o->model, o->quantize, o->bundle, o->db, o->cache, o->tp};
  gc_llama_bundle_info_t info;
  char line[4096];
  if (gc_llama_bundle_open(dev, &bo, rt, &info, e)) return e->code;
  snprintf(path, n, "%s", info.path);
  gc_llama_bundle_describe(&info, line, sizeof line);
  if (line[0]) fprintf(stderr, "gcore-run: %s\n", line);
  return GC_OK;
}

/* The device and bundle of each of o->tp ranks: on the CPU the host each
 * time (ranks are threads), on GPUs --devices or --device, --device + 1, ...;
 * rank 0 opens (or builds) the bundle, the others open the same file. */
static int open_ranks(const run_opts_t *o, gc_dev_t **devs, gc_rt_t **rts, gc_err_t *e) {
  char path[GC_AUTO_PATH];
  for (int r = 0; r < o->tp; r++) {
    int ord = o->ndev ? o->devices[r] : strcmp(o->backend, "cpu") ? o->ordinal + r : o->ordinal;
    if (gc_dev_open(o->backend, ord, &devs[r], e)) return o->tp > 1 ? gc_err_prefix(e, "rank %d", r) : e->code;
    if (r == 0 ? open_bundle(o, devs[0], &rts[0], path, sizeof path, e) : gc_rt_open(devs[r], path, &rts[r], e))
      return e->code;
    if (o->no_pdl) gc_rt_set_pdl(rts[r], 0);
  }
  return GC_OK;
}

/* Each prompt of ps from an empty cache, with a sampler of its own: one
 * line (or JSON object) per prompt, in order; the logits of every prompt
 * follow each other in --logits. */
static int run_prompts(gc_llama_t *m, const run_opts_t *o, int max_t, const prompts_t *ps,
                       gen_state_t *g, text_io_t *io, gc_err_t *e) {
  int rc = GC_OK;
  for (int i = 0; !rc && i < ps->n; i++) {
    gc_sampler_t *smp = NULL;
    gc_llama_reset(m);
    rc = gc_sampler_create(gc_llama_config(m)->vocab_size, &o->sp, &smp, e);
    if (!rc && ps->len[i] > o->ctx)
      rc = gc_err_set(e, GC_EINVAL, "prompt %d has %d tokens, more than --ctx %d", i + 1, ps->len[i], o->ctx);
    if (!rc) rc = generate(m, o, max_t, smp, ps->v[i], ps->len[i], g, io, e);
    if (!rc) report(o, ps->v[i], ps->len[i], g, io);
    gc_sampler_free(smp);
  }
  return rc;
}

/* --json-schema (--regex): io->js (io->rx) compiled, io->jv from the
 * tokenizer (open_tokenizer opened it; --tokens frees it later),
 * io->json_end the id a complete reply ends with (--chat: the turn's end,
 * else the model's first end id). */
static int open_schema(const run_opts_t *o, const gc_llama_config_t *c, text_io_t *io, gc_err_t *e) {
  char *text = NULL;
  const char *s = o->json_schema;
  size_t n = s ? strlen(s) : 0;
  int rc = GC_OK;
  if (o->json_schema_file && !(rc = gc_read_file(o->json_schema_file, 1 << 20, &text, &n, e))) s = text;
  if (!rc && o->regex && gc_json_regex_new(o->regex, strlen(o->regex), &io->rx, e)) rc = gc_err_prefix(e, "--regex");
  else if (!rc && !o->regex && gc_json_schema_new(s, n, &io->js, e)) rc = gc_err_prefix(e, "--json-schema");
  free(text);
  if (rc) return rc;
  io->json_end = io->chat_end >= 0 ? io->chat_end : c->n_eos ? c->eos_ids[0] : -1;
  for (int id = 0; io->json_end < 0 && id < gc_tok_vocab_size(io->tok); id++)
    if (gc_tok_is_eos(io->tok, id)) io->json_end = id;
  if (io->json_end < 0)
    return gc_err_set(e, GC_EINVAL, "%s: the model has no end-of-sequence token", o->regex ? "--regex" : "--json-schema");
  return gc_json_vocab_new(io->tok, &io->jv, e);
}

static int run_model(const run_opts_t *o, gc_err_t *e) {
  gc_llama_weights_t *w = NULL;
  gc_dev_t *devs[GC_LLAMA_TP_MAX] = {0};
  gc_rt_t *rts[GC_LLAMA_TP_MAX] = {0};
  gc_llama_t *m = NULL;
  gc_sampler_t *smp = NULL;
  gc_prof_t *prof = NULL;
  int32_t *prompt = NULL;
  int np = 0, max_t = 1;
  gen_state_t g = {0};
  text_io_t io = {.chat_end = -1};
  run_opts_t oo = *o;
  prompts_t many = {0};
  int rc = gc_weights_open(o->model, &w, e);
  char note[512];
  if (!rc && (gc_weights_note(w, note, sizeof note), note[0])) fprintf(stderr, "gcore-run: %s: %s\n", o->model, note);
  if (!rc && o->quantize) rc = gc_weights_quantize(w, o->quantize, e);
  if (!rc) rc = open_tokenizer(o, &w->cfg, &io, e);
  if (!rc && (o->json_schema || o->json_schema_file || o->regex)) rc = open_schema(o, &w->cfg, &io, e);
  if (!rc && o->tokens_file) {
    rc = read_prompts(o->tokens_file, &many, e);
    np = many.longest;
  } else if (!rc && !o->chat) {
    rc = prompt_ids(o, &w->cfg, &io, &prompt, &np, e);
  }
  if (!rc && o->tokens) { /* ids in, ids out */
    gc_tok_free(io.tok);
    io.tok = NULL;
  }
  if (!rc && oo.ctx <= 0) oo.ctx = w->cfg.max_seq < 4096 ? w->cfg.max_seq : 4096;
  if (oo.sp.repeat_last_n < 0) oo.sp.repeat_last_n = oo.ctx;
  if (!rc && np > oo.ctx)
    rc = gc_err_set(e, GC_EINVAL, "the prompt has %d tokens, more than --ctx %d", np, oo.ctx);
  if (!rc && oo.ctx > w->cfg.max_seq)
    rc = gc_err_set(e, GC_EINVAL, "--ctx %d is over the model's %d positions", oo.ctx, w->cfg.max_seq);
  /* prefill passes: the whole prompt; a chat turn in passes of at most 512 */
  if (!rc) max_t = o->token_by_token ? 1 : o->chat ? (oo.ctx < 512 ? oo.ctx : 512) : np;
  if (!rc) rc = open_ranks(o, devs, rts, e);
  if (!rc) rc = gc_llama_create_tp(devs, rts, w, oo.ctx, max_t, 0, o->tp, &m, e);
  if (!rc && o->profile && !(rc = gc_prof_create(devs[0], &prof, e))) gc_llama_set_profile(m, prof);
  if (!rc && o->no_graph) gc_llama_set_graphs(m, 0);
  if (!rc && o->no_ahead) gc_llama_set_ahead(m, 0);
  if (!rc && o->l2_window_mb >= 0) gc_llama_set_l2_window(m, (int64_t)o->l2_window_mb << 20);
  if (!rc) rc = gc_sampler_create(w->cfg.vocab_size, &oo.sp, &smp, e);
  if (!rc && !(g.out = gc_calloc((size_t)o->n_predict + 1, sizeof *g.out, e))) rc = GC_ENOMEM;
  if (!rc && o->logits_path && gc_check_output(o->logits_path, 'f', e)) rc = e->code;
  if (!rc && o->logits_path && !(g.logits = fopen(o->logits_path, "wb")))
    rc = gc_err_set(e, GC_EIO, "%s: cannot write", o->logits_path);
  if (!rc && o->chat)
    rc = chat_loop(m, &oo, max_t, smp, &g, &io, e);
  else if (!rc && o->tokens_file)
    rc = run_prompts(m, &oo, max_t, &many, &g, &io, e);
  else if (!rc) {
    if (o->warmup) rc = warm_up(m, &oo, prompt, np, e);
    if (!rc) rc = generate(m, &oo, max_t, smp, prompt, np, &g, &io, e);
    if (!rc) report(o, prompt, np, &g, &io);
  }
  if (g.logits && fclose(g.logits) != 0 && !rc) rc = gc_err_set(e, GC_EIO, "%s: write failed", o->logits_path);
  if (!rc && prof) gc_prof_print(prof, stderr);
  gc_prof_free(prof);
  free(g.out);
  free(prompt);
  prompts_free(&many);
  gc_buf_free(&io.text);
  gc_chat_free(&io.conv);
  gc_tok_free(io.tok);
  gc_json_schema_free(io.js);
  gc_json_regex_free(io.rx);
  gc_json_vocab_free(io.jv);
  gc_sampler_free(smp);
  gc_llama_free(m);
  for (int r = 0; r < o->tp; r++) {
    gc_rt_close(rts[r]);
    gc_dev_close(devs[r]);
  }
  gc_weights_close(w);
  return rc;
}

/* ---- the tokenizer path ------------------------------------------------------ */

static int read_stdin(gc_buf_t *b, gc_err_t *e) {
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
    if (gc_buf_append(b, chunk, n, e)) return GC_ENOMEM;
  if (ferror(stdin)) return gc_err_set(e, GC_EIO, "reading stdin failed");
  return gc_buf_append(b, "", 1, e) ? GC_ENOMEM : (b->len--, GC_OK); /* NUL after the text */
}

/* One text's ids as a line. */
static int tokenize_one(gc_tok_t *t, const char *s, size_t n, int bos, gc_err_t *e) {
  gc_tok_ids_t ids = {0};
  int rc = gc_tok_encode(t, s, n, GC_TOK_SPECIAL | (bos ? GC_TOK_BOS : 0), &ids, e);
  for (size_t i = 0; !rc && i < ids.n; i++) printf(i ? " %d" : "%d", ids.v[i]);
  if (!rc) printf("\n");
  gc_tok_ids_free(&ids);
  return rc;
}

/* One line of ids [n bytes at s, NUL after] as text, plus end (0 or NUL). */
static int detokenize_one(gc_tok_t *t, char *s, int with_nul, gc_err_t *e) {
  int32_t *v = NULL;
  int n = 0;
  gc_buf_t out = {0};
  int rc = parse_tokens(s, "--detokenize", &v, &n, e);
  if (!rc) rc = gc_tok_decode(t, v, (size_t)n, 0, &out, e);
  if (!rc && with_nul) rc = gc_buf_append(&out, "", 1, e);
  if (!rc && out.len && fwrite(out.data, 1, out.len, stdout) != out.len)
    rc = gc_err_set(e, GC_EIO, "writing stdout failed");
  free(v);
  gc_buf_free(&out);
  return rc;
}

/* --tokenize / --detokenize: stdin to stdout through the tokenizer; with
 * --null many texts (NUL-separated in, one id line each; or one id line
 * each in, NUL-terminated texts out). */
static int run_tokenizer(const run_opts_t *o, int detok, int batch, gc_err_t *e) {
  gc_tok_t *t = NULL;
  gc_buf_t in = {0};
  int rc = gc_tok_load(o->tokenizer, &t, e);
  if (!rc && gc_tok_note(t)) fprintf(stderr, "gcore-run: %s\n", gc_tok_note(t));
  if (!rc) rc = read_stdin(&in, e);
  char *p = in.data, *end = in.len ? in.data + in.len : in.data; /* data is NULL when stdin was empty */
  if (!rc && !batch)
    rc = detok ? detokenize_one(t, p, 0, e) : tokenize_one(t, p, in.len, o->bos, e);
  while (!rc && batch && p < end) {
    char *q = memchr(p, detok ? '\n' : '\0', (size_t)(end - p));
    if (!q) q = end;
    *q = 0;
    rc = detok ? detokenize_one(t, p, 1, e) : tokenize_one(t, p, (size_t)(q - p), o->bos, e);
    p = q + 1;
  }
  gc_buf_free(&in);
  gc_tok_free(t);
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
  o.tp = 1;
  o.l2_window_mb = -1;
  o.n_predict = 64;
  gc_sampler_params_default(&o.sp); /* then llama.cpp's defaults */
  o.sp.temperature = 0.8f;
  o.sp.top_k = 40;
  o.sp.top_p = 0.95f;
  o.sp.min_p = 0.05f;
  o.sp.repeat_penalty = 1.0f;
  int64_t iv, seed = -1;
  int tok_mode = 0, batch = 0; /* tok_mode: 1 --tokenize, 2 --detokenize */
  int tp_given = 0;
  double min_time = 0.2, fv;
  int64_t op_pos = -1, op_layout = -1; /* --op: --pos, --layout (-1: defaults) */
  int c;
  while ((c = gc_cli_getopt(argc, argv, "b:m:p:n:j:h", longopts)) != -1) {
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
      case O_TOKENS_FILE: o.tokens_file = optarg; break;
      case O_LOGITS: o.logits_path = optarg; break;
      case O_IGNORE_EOS: o.ignore_eos = 1; break;
      case O_TBT: o.token_by_token = 1; break;
      case O_JSON: o.json = 1; break;
      case O_TOKENIZER: o.tokenizer = optarg; break;
      case O_DB: o.db = optarg; break;
      case O_CACHE: o.cache = optarg; break;
      case O_TOKENIZE: tok_mode |= 1; break;
      case O_DETOKENIZE: tok_mode |= 2; break;
      case O_BOS: o.bos = 1; break;
      case O_NULL: batch = 1; break;
      case O_CHAT: o.chat = 1; break;
      case O_SYSTEM: o.system = optarg; break;
      case O_NO_THINK: o.no_think = 1; break;
      case 'j': o.json_schema = optarg; break;
      case O_JSON_SCHEMA_FILE: o.json_schema_file = optarg; break;
      case O_REGEX: o.regex = optarg; break;
      case O_QUANTIZE: o.quantize = optarg; break;
      case O_TP:
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > GC_LLAMA_TP_MAX) return bad_flag("--tp", "1..64 ranks");
        o.tp = (int)iv;
        tp_given = 1;
        break;
      case O_DEVICE:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 1024) return bad_flag("--device", "an ordinal");
        o.ordinal = (int)iv;
        break;
      case O_DEVICES:
        if ((o.ndev = gc_cli_devices(optarg, o.devices, GC_LLAMA_TP_MAX)) < 0)
          return bad_flag("--devices", "different ordinals 0..1024, comma-separated");
        break;
      case O_SEED:
        if (gc_parse_i64(optarg, &seed) || seed < 0) return bad_flag("--seed", "an integer >= 0");
        o.sp.seed = (uint64_t)seed;
        break;
      case O_CTX:
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > (1 << 24)) return bad_flag("--ctx", "positions >= 1");
        o.ctx = (int)iv;
        break;
      case O_POS:
        if (gc_parse_i64(optarg, &op_pos) || op_pos < 0 || op_pos >= (1LL << 30)) return bad_flag("--pos", "a position >= 0");
        break;
      case O_LAYOUT:
        if (gc_parse_i64(optarg, &op_layout) || op_layout < 0 || op_layout > 1) return bad_flag("--layout", "0 or 1");
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
        if (parse_f(optarg, 0, 1, &fv) || fv <= 0) return bad_flag("--top-p", "0 < P <= 1");
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
      case O_REPEAT_N: /* -1: the context, set once --ctx is known */
        if (gc_parse_i64(optarg, &iv) || iv < -1 || iv > 1 << 20)
          return bad_flag("--repeat-last-n", "a token count from -1 to 1048576");
        o.sp.repeat_last_n = (int)iv;
        break;
      case O_PROFILE: o.profile = 1; break;
      case O_NOGRAPH: o.no_graph = 1; break;
      case O_NOAHEAD: o.no_ahead = 1; break;
      case O_NOPDL: o.no_pdl = 1; break;
      case O_L2WIN:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 4096) return bad_flag("--l2-window", "0..4096 MB");
        o.l2_window_mb = (int)iv;
        break;
      case O_WARMUP:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 1000000) return bad_flag("--warmup", "a step count >= 0");
        o.warmup = (int)iv;
        break;
      case 'h':
        fputs(usage, stdout);
        printf("ops:\n");
        gc_op_help(stdout);
        return gc_cli_exit("gcore-run", 0);
      case O_VERSION: return gc_cli_version("gcore-run");
      default: return gc_cli_bad_option("gcore-run", c, argv);
    }
  }
  gc_err_t e = {0};
  gc_problems_t probs = {0};
  int rc;
  if (o.ndev && tp_given && o.tp != o.ndev)
    return bad_flag("--devices", "as many ordinals as --tp ranks");
  if (o.ndev && o.ordinal)
    return bad_flag("--devices", "no --device beside it");
  if (o.ndev) o.tp = o.ndev;
  if (optind < argc)
    rc = gc_err_set(&e, GC_EINVAL, "unexpected argument %s", GC_QUOTED(argv[optind]));
  else if (tok_mode == 3)
    rc = gc_err_set(&e, GC_EINVAL, "give either --tokenize or --detokenize, not both");
  else if (tok_mode && !o.tokenizer)
    rc = gc_err_set(&e, GC_EINVAL, "--%s needs --tokenizer PATH", tok_mode == 1 ? "tokenize" : "detokenize");
  else if (tok_mode && (o.model || op))
    rc = gc_err_set(&e, GC_EINVAL, "--%s runs the tokenizer alone: drop -m/--op", tok_mode == 1 ? "tokenize" : "detokenize");
  else if (batch && !tok_mode)
    rc = gc_err_set(&e, GC_EINVAL, "--null goes with --tokenize or --detokenize");
  else if (o.bos && tok_mode != 1)
    rc = gc_err_set(&e, GC_EINVAL, "--bos goes with --tokenize");
  else if (tok_mode)
    rc = run_tokenizer(&o, tok_mode == 2, batch, &e);
  else if (o.system && !o.chat)
    rc = gc_err_set(&e, GC_EINVAL, "--system goes with --chat");
  else if (o.no_think && !o.chat)
    rc = gc_err_set(&e, GC_EINVAL, "--no-think goes with --chat");
  else if (o.json_schema && o.json_schema_file)
    rc = gc_err_set(&e, GC_EINVAL, "give the schema as --json-schema S or --json-schema-file F, not both");
  else if (o.regex && (o.json_schema || o.json_schema_file))
    rc = gc_err_set(&e, GC_EINVAL, "give --regex or --json-schema, not both");
  else if (o.regex && (o.ignore_eos || !o.model))
    rc = gc_err_set(&e, GC_EINVAL, "--regex ends each reply when its match is complete: it goes with -m MODEL and "
                                   "without --ignore-eos");
  else if ((o.json_schema || o.json_schema_file) && (o.ignore_eos || !o.model))
    rc = gc_err_set(&e, GC_EINVAL, "--json-schema ends each reply when its object is complete: it goes with -m MODEL "
                                   "and without --ignore-eos");
  else if (o.chat && o.tokens)
    rc = gc_err_set(&e, GC_EINVAL, "--chat takes text turns on stdin, not --tokens");
  else if (o.chat && o.warmup)
    rc = gc_err_set(&e, GC_EINVAL, "--warmup runs a prompt before the timed run; it does not go with --chat");
  else if (o.tokens_file && (o.prompt || o.tokens || o.chat || o.warmup))
    rc = gc_err_set(&e, GC_EINVAL, "--tokens-file gives the prompts: it goes without -p, --tokens, --chat and --warmup");
  else if (o.prompt && o.tokens)
    rc = gc_err_set(&e, GC_EINVAL, "give the prompt as -p TEXT or as --tokens IDS, not both");
  else if (op && !o.bundle)
    rc = gc_err_set(&e, GC_EINVAL, "--op runs a kernel of a bundle: give -b BUNDLE");
  else if (o.bundle && (o.db || o.cache))
    rc = gc_err_set(&e, GC_EINVAL, "--db and --cache build the bundle when -b is not given; drop them or -b");
  else if (op && o.model)
    rc = gc_err_set(&e, GC_EINVAL, "give either -m MODEL or --op, not both");
  else if (o.quantize && !o.model)
    rc = gc_err_set(&e, GC_EINVAL, "--quantize goes with -m MODEL");
  else if (op) {
    rc = gc_problems_expand(&probs, op, dtype, dims, &e);
    if (!rc && probs.n != 1) rc = gc_err_set(&e, GC_EINVAL, "give one value for each size");
    if (!rc)
      rc = run_op(o.bundle, o.backend, o.ordinal, &probs.v[0], seed < 0 ? 1 : (uint64_t)seed,
                  dump_dir, min_time, op_pos, op_layout, &e);
  } else if (!o.model)
    rc = gc_err_set(&e, GC_EINVAL, "nothing to run: give -m MODEL (or --op OP with sizes)");
  else
    rc = run_model(&o, &e);
  gc_problems_free(&probs);
  if (rc) {
    fflush(stdout);
    fprintf(stderr, "gcore-run: %s\n", e.msg);
    return 1;
  }
  return gc_cli_exit("gcore-run", 0);
}
