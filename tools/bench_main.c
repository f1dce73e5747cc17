/* bench_main.c — gcore-bench: a Llama model's prompt processing (pp: one
 * prefill of N tokens) and text generation (tg: N decode steps) tokens/s,
 * repeated and reported as mean ± sd in the shape of llama.cpp's
 * llama-bench (markdown, CSV or JSON), through the same bundle gcore-run
 * would use (models/llama_bundle.h). tg tests run for each --parallel
 * count B: B sequences decoded at once, as gcore-serve batches them
 * (llama-batched-bench's -npl). */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../base/cli.h"
#include "../models/llama.h"
#include "../models/llama_bundle.h"

static const char usage[] =
    "usage: gcore-bench -m MODEL [-b BUNDLE] [-p LIST] [-n LIST] [--parallel LIST] [-r N] [-o md|csv|json]\n"
    "Times a Llama model as llama-bench does: pp N is one prefill of N tokens from an empty\n"
    "cache, tg N is N decode steps of one token from an empty cache; each test is repeated\n"
    "and reported as tokens/s mean ± sample standard deviation.\n"
    "\n"
    "  -m, --model PATH       Hugging Face directory, GGUF file or llama2.c checkpoint\n"
    "  --quantize T           store the model's matrices as q8_0, q4_0 or q4_k on load\n"
    "  -b, --bundle PATH      bundle built by gcore-gen for this model (default: built from the\n"
    "                         tuning database for this device into the cache, as gcore-run does)\n"
    "  --db PATH              without -b: the tuning database (default $GCORE_DB, else\n"
    "                         ~/.local/share/gcore/tune.db)\n"
    "  --cache DIR            without -b: compile and bundle cache (default $GCORE_CACHE or\n"
    "                         ~/.cache/gcore)\n"
    "  -p, --n-prompt LIST    prompt lengths, comma-separated: a pp test each (default 512;\n"
    "                         0: none)\n"
    "  -n, --n-gen LIST       generation lengths, comma-separated: a tg test each (default 128;\n"
    "                         0: none)\n"
    "  --parallel LIST        sequences decoded at once in tg tests, comma-separated: each B\n"
    "                         runs tg N as N batched steps of B rows (B KV-cache slots, as\n"
    "                         gcore-serve --parallel B); t/s counts all B*N tokens (default 1)\n"
    "  -r, --repetitions N    timed runs of each test (default 5)\n"
    "  -o, --output FMT       md (default: a markdown table), csv or json\n"
    "  --no-warmup            no untimed run of each test first\n"
    "  --no-ahead             tg tests: enqueue each step after the host has read the one before\n"
    "                         (by default the device runs one step ahead, as gcore-run)\n"
    "  --profile              after each test, a per-kernel table of its timed runs to stderr\n"
    "                         (as gcore-run --profile: launches timed one by one, no graphs)\n"
    "  --leave-out LIST       op names, comma-separated: after the tests, each tg test again per\n"
    "                         op with the decode steps' launches of that op left out (test\n"
    "                         \"tg128 -attention\"): the op's cost in the step is the difference.\n"
    "                         A developer's profile: those runs' tokens are not the model's\n"
    "  --backend NAME         device backend: cpu (default), cuda (NVIDIA) or hip (AMD)\n"
    "  --device N             device ordinal (default 0)\n"
    "  -h, --help             this text\n"
    "  --version              this tool's version\n";

enum { O_VERSION = 256, O_DB, O_CACHE, O_QUANTIZE, O_NOWARMUP, O_BACKEND, O_DEVICE, O_PARALLEL, O_PROFILE, O_LEAVE_OUT, O_NOAHEAD };

static const struct option longopts[] = {
    {"model", 1, 0, 'm'},       {"bundle", 1, 0, 'b'},        {"n-prompt", 1, 0, 'p'},
    {"n-gen", 1, 0, 'n'},       {"repetitions", 1, 0, 'r'},   {"output", 1, 0, 'o'},
    {"db", 1, 0, O_DB},         {"cache", 1, 0, O_CACHE},     {"quantize", 1, 0, O_QUANTIZE},
    {"no-warmup", 0, 0, O_NOWARMUP}, {"backend", 1, 0, O_BACKEND}, {"device", 1, 0, O_DEVICE},
    {"parallel", 1, 0, O_PARALLEL}, {"profile", 0, 0, O_PROFILE},
    {"leave-out", 1, 0, O_LEAVE_OUT}, {"no-ahead", 0, 0, O_NOAHEAD},
    {"help", 0, 0, 'h'},        {"version", 0, 0, O_VERSION}, {0, 0, 0, 0}};

#define MAX_TESTS 64
#define MAX_LEAVE 16

typedef char op_name_t[GC_OP_NAME];

typedef struct bench_opts {
  gc_llama_bundle_opts_t b;
  const char *backend, *format;
  int ordinal, reps, warmup, profile, no_ahead;
  int pp[MAX_TESTS], npp, tg[MAX_TESTS], ntg, par[MAX_TESTS], npar;
  op_name_t leave[MAX_LEAVE]; /* --leave-out */
  int nleave;
} bench_opts_t;

/* What a row says about the model and the device. */
typedef struct model_info {
  char type[96], size[32], params[32], target[80], device[128];
  uint64_t bytes, n_params;
} model_info_t;

/* The timings of one test. */
typedef struct test_result {
  int n_prompt, n_gen, n_parallel, reps;
  const char *left_out;    /* --leave-out: the op whose decode launches were left out, or NULL */
  double ns[256], ts[256]; /* per repetition: nanoseconds, tokens/s */
  double avg_ns, sd_ns, avg_ts, sd_ts;
  char when[32];           /* ISO 8601, UTC */
} test_result_t;

/* ---- the model's description ------------------------------------------------ */

/* Elements of the distinct tensors (a tied classifier counted once). */
static uint64_t count_params(const gc_llama_weights_t *w) {
  uint64_t n = 0;
  const void *embed = w->tok_embeddings.data;
  for (size_t i = 0; i < gc_weights_count(w); i++) {
    const gc_weight_t *t = gc_weights_at(w, i);
    if (i > 0 && t->data == embed) continue;
    n += (uint64_t)t->shape[0] * (uint64_t)(t->ndim == 2 ? t->shape[1] : 1);
  }
  return n;
}

/* "8B", "1.2B", "260K", "5M": a size label as model names carry it. */
static void size_label(uint64_t n, char *out, size_t len) {
  double v = (double)n;
  const char *u = v >= 1e9 ? "B" : v >= 1e6 ? "M" : v >= 1e3 ? "K" : "";
  double s = v >= 1e9 ? v / 1e9 : v >= 1e6 ? v / 1e6 : v >= 1e3 ? v / 1e3 : v;
  snprintf(out, len, s < 10 && s != floor(s) ? "%.1f%s" : "%.0f%s", s, u);
}

static void describe_model(const gc_llama_weights_t *w, model_info_t *mi) {
  char label[32];
  mi->bytes = gc_weights_bytes(w);
  mi->n_params = count_params(w);
  size_label(mi->n_params, label, sizeof label);
  snprintf(mi->type, sizeof mi->type, "llama %s %s", label,
           w->cfg.n_layers > 0 ? gc_st_dtype_name(w->layers[0].wq.dtype) : "?");
  double b = (double)mi->bytes;
  if (b >= 1024.0 * 1024 * 1024) snprintf(mi->size, sizeof mi->size, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else snprintf(mi->size, sizeof mi->size, "%.2f MiB", b / (1024.0 * 1024));
  double p = (double)mi->n_params;
  if (p >= 1e9) snprintf(mi->params, sizeof mi->params, "%.2f B", p / 1e9);
  else if (p >= 1e6) snprintf(mi->params, sizeof mi->params, "%.2f M", p / 1e6);
  else snprintf(mi->params, sizeof mi->params, "%.2f K", p / 1e3);
}

/* ---- the tests -------------------------------------------------------------- */

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* pp n: one prefill of n random tokens from an empty cache. */
static int run_pp(gc_llama_t *m, int n, float *lg, double *secs, gc_err_t *e) {
  const gc_llama_config_t *c = gc_llama_config(m);
  int32_t *toks = gc_malloc((size_t)n * sizeof *toks, e);
  if (!toks) return GC_ENOMEM;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; i++) toks[i] = (int32_t)(next_rand(&s) % (uint64_t)c->vocab_size);
  gc_llama_reset(m);
  double t0 = gc_now();
  int rc = gc_llama_forward(m, toks, n, 0, lg, e);
  *secs = gc_now() - t0;
  free(toks);
  return rc;
}

static int32_t first_token(const gc_llama_config_t *c) {
  return c->bos_id >= 0 && c->bos_id < c->vocab_size ? c->bos_id : 1 % c->vocab_size;
}

/* tg n: n decode steps of one token from an empty cache, each feeding the
 * device's argmax of the step before (greedy generation, as gcore-run
 * --temp 0 runs it: gc_llama_greedy, the host one step behind). */
static int run_tg(gc_llama_t *m, int n, double *secs, gc_err_t *e) {
  int got = 0;
  gc_llama_reset(m);
  double t0 = gc_now();
  int rc = gc_llama_greedy(m, first_token(gc_llama_config(m)), n, gc_llama_count_ids, &got, e);
  *secs = gc_now() - t0;
  if (!rc && got != n) rc = gc_err_set(e, GC_EINVAL, "tg %d: the context holds only %d steps", n, got);
  return rc;
}

/* tg n of b sequences (2 <= b <= gc_llama_slots(m)): slots 0 .. b-1
 * emptied, then n batched decode steps of b rows (gc_llama_decode_batch,
 * as gcore-serve runs them), row i on slot i, each row feeding its own
 * argmax; row i starts from the first token plus i, so the rows are
 * different sequences. */
static int run_tg_batch(gc_llama_t *m, int b, int n, double *secs, gc_err_t *e) {
  const gc_llama_config_t *c = gc_llama_config(m);
  int slots[GC_LLAMA_BATCH_MAX];
  int32_t tok[GC_LLAMA_BATCH_MAX], next[GC_LLAMA_BATCH_MAX];
  for (int i = 0; i < b; i++) {
    slots[i] = i;
    tok[i] = (int32_t)((first_token(c) + i) % c->vocab_size);
    gc_llama_slot_reset(m, i);
  }
  int rc = GC_OK;
  double t0 = gc_now();
  for (int s = 0; !rc && s < n; s++) {
    rc = gc_llama_decode_batch(m, b, slots, tok, NULL, next, e);
    memcpy(tok, next, (size_t)b * sizeof *tok);
  }
  *secs = gc_now() - t0;
  return rc;
}

/* One run of test (pp, tg, b): its seconds into *secs. */
static int run_once(gc_llama_t *m, int pp, int tg, int b, float *lg, double *secs, gc_err_t *e) {
  if (pp) return run_pp(m, pp, lg, secs, e);
  return b > 1 ? run_tg_batch(m, b, tg, secs, e) : run_tg(m, tg, secs, e);
}

static void stats(test_result_t *r) {
  double s_ns = 0, s_ts = 0, q_ns = 0, q_ts = 0;
  for (int i = 0; i < r->reps; i++) s_ns += r->ns[i], s_ts += r->ts[i];
  r->avg_ns = s_ns / r->reps;
  r->avg_ts = s_ts / r->reps;
  for (int i = 0; i < r->reps; i++) {
    q_ns += (r->ns[i] - r->avg_ns) * (r->ns[i] - r->avg_ns);
    q_ts += (r->ts[i] - r->avg_ts) * (r->ts[i] - r->avg_ts);
  }
  r->sd_ns = r->reps > 1 ? sqrt(q_ns / (r->reps - 1)) : 0;
  r->sd_ts = r->reps > 1 ? sqrt(q_ts / (r->reps - 1)) : 0;
}

/* One test: an untimed run first unless --no-warmup (first launches,
 * caches and the decode graph's capture stay out of the timings), then
 * o->reps timed ones. */
static int run_test(gc_llama_t *m, const bench_opts_t *o, int pp, int tg, int b, const char *left_out,
                    float *lg, gc_prof_t *prof, test_result_t *r, gc_err_t *e) {
  double secs;
  time_t now = time(NULL);
  memset(r, 0, sizeof *r);
  r->left_out = left_out;
  if (left_out && gc_llama_leave_out(m, left_out, e)) return e->code;
  r->n_prompt = pp;
  r->n_gen = tg;
  r->n_parallel = pp ? 1 : b;
  r->reps = o->reps;
  strftime(r->when, sizeof r->when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  if (o->warmup && run_once(m, pp, tg < 2 ? tg : 2, b, lg, &secs, e)) return e->code;
  if (prof) gc_llama_set_profile(m, prof);
  for (int i = 0; i < o->reps; i++) {
    if (run_once(m, pp, tg, b, lg, &secs, e)) break;
    if (secs <= 0) secs = 1e-9;
    r->ns[i] = secs * 1e9;
    r->ts[i] = (double)(pp ? pp : tg * r->n_parallel) / secs;
  }
  gc_llama_set_profile(m, NULL);
  if (!e->code && left_out) gc_llama_leave_out(m, NULL, e);
  if (e->code) return e->code;
  stats(r);
  return GC_OK;
}

/* ---- output ----------------------------------------------------------------- */

/* s as a JSON string: quotes, backslashes and control characters escaped,
 * bytes that are not UTF-8 as U+FFFD (a path may hold any bytes). */
static void json_str(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    int len = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
    int ok = len > 0 && !(len == 2 && *p < 0xc2) && !(len == 4 && *p > 0xf4);
    for (int i = 1; ok && i < len; i++) ok = (p[i] & 0xc0) == 0x80;
    if (ok && len == 3) {
      unsigned cp = (p[0] & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu);
      ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
    }
    if (ok && len == 4) {
      unsigned cp = (p[0] & 0x07u) << 18 | (p[1] & 0x3fu) << 12;
      ok = cp >= 0x10000 && cp <= 0x10ffff;
    }
    if (!ok) {
      fputs("\\ufffd", stdout);
    } else if (len > 1) {
      fwrite(p, 1, (size_t)len, stdout);
      p += len - 1;
    } else if (*p == '"' || *p == '\\') {
      printf("\\%c", *p);
    } else if (*p < 0x20 || *p == 0x7f) {
      printf("\\u%04x", *p);
    } else {
      putchar(*p);
    }
  }
  putchar('"');
}

/* s as a CSV field: quoted, quotes doubled. */
static void csv_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"') putchar('"');
    putchar(*s == '\n' || *s == '\r' ? ' ' : *s);
  }
  putchar('"');
}

/* "pp512", "tg128", and for B sequences at once "tg128 x8"; with an op
 * left out "tg128 -attention". */
static void test_name(const test_result_t *r, char *out, size_t n) {
  if (r->n_prompt) snprintf(out, n, "pp%d", r->n_prompt);
  else if (r->n_parallel > 1) snprintf(out, n, "tg%d x%d", r->n_gen, r->n_parallel);
  else snprintf(out, n, "tg%d", r->n_gen);
  if (r->left_out) snprintf(out + strlen(out), n - strlen(out), " -%s", r->left_out);
}

static const char md_head[] =
    "| model                          |       size |     params | backend    |          test |"
    "                  t/s |\n"
    "| ------------------------------ | ---------: | ---------: | ---------- | ------------: |"
    " -------------------: |\n";

static const char csv_head[] =
    "build_version,model_filename,model_type,model_size,model_n_params,backend,target,device,"
    "n_prompt,n_gen,n_parallel,test_time,repetitions,avg_ns,stddev_ns,avg_ts,stddev_ts,left_out\n";

static void print_row(const bench_opts_t *o, const model_info_t *mi, const test_result_t *r, int first) {
  char test[64], ts[64];
  test_name(r, test, sizeof test);
  if (!strcmp(o->format, "md")) {
    snprintf(ts, sizeof ts, "%.2f ± %.2f", r->avg_ts, r->sd_ts);
    /* the model type is made here, not read: no '|' can break the table;
     * '±' is two bytes in one column */
    printf("| %-30s | %10s | %10s | %-10s | %13s | %21s |\n", mi->type, mi->size, mi->params,
           o->backend, test, ts);
  } else if (!strcmp(o->format, "csv")) {
    printf("\"%s\",", GC_VERSION);
    csv_str(o->b.model);
    printf(",\"%s\",%llu,%llu,\"%s\",", mi->type, (unsigned long long)mi->bytes,
           (unsigned long long)mi->n_params, o->backend);
    csv_str(mi->target);
    putchar(',');
    csv_str(mi->device);
    printf(",%d,%d,%d,\"%s\",%d,%.0f,%.0f,%.6f,%.6f,\"%s\"\n", r->n_prompt, r->n_gen, r->n_parallel, r->when,
           r->reps, r->avg_ns, r->sd_ns, r->avg_ts, r->sd_ts, r->left_out ? r->left_out : "");
  } else {
    printf("%s  {\n    \"build_version\": \"%s\",\n    \"model_filename\": ", first ? "" : ",\n",
           GC_VERSION);
    json_str(o->b.model);
    printf(",\n    \"model_type\": \"%s\",\n    \"model_size\": %llu,\n    \"model_n_params\": %llu,\n"
           "    \"backend\": \"%s\",\n    \"target\": ", mi->type, (unsigned long long)mi->bytes,
           (unsigned long long)mi->n_params, o->backend);
    json_str(mi->target);
    printf(",\n    \"device\": ");
    json_str(mi->device);
    printf(",\n    \"n_prompt\": %d,\n    \"n_gen\": %d,\n    \"n_parallel\": %d,\n    \"test_time\": \"%s\",\n"
           "    \"repetitions\": %d,\n    \"avg_ns\": %.0f,\n    \"stddev_ns\": %.0f,\n"
           "    \"avg_ts\": %.6f,\n    \"stddev_ts\": %.6f,\n    \"samples_ns\": [",
           r->n_prompt, r->n_gen, r->n_parallel, r->when, r->reps, r->avg_ns, r->sd_ns, r->avg_ts, r->sd_ts);
    for (int i = 0; i < r->reps; i++) printf("%s%.0f", i ? ", " : "", r->ns[i]);
    printf("],\n    \"samples_ts\": [");
    for (int i = 0; i < r->reps; i++) printf("%s%.6f", i ? ", " : "", r->ts[i]);
    printf("]");
    if (r->left_out) printf(",\n    \"left_out\": \"%s\"", r->left_out); /* an op name: no escapes */
    printf("\n  }");
  }
  fflush(stdout);
}

/* ---- the run ---------------------------------------------------------------- */

static int max_of(const int *v, int n) {
  int m = 0;
  for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static int bench(const bench_opts_t *o, gc_err_t *e) {
  gc_llama_weights_t *w = NULL;
  gc_dev_t *dev = NULL;
  gc_rt_t *rt = NULL;
  gc_llama_t *m = NULL;
  float *lg = NULL;
  model_info_t mi = {0};
  gc_llama_bundle_info_t info;
  char line[4096];
  gc_prof_t *prof = NULL;
  int max_p = max_of(o->pp, o->npp), max_n = max_of(o->tg, o->ntg), max_b = max_of(o->par, o->npar);
  int ctx = max_p > max_n ? max_p : max_n, rc = gc_weights_open(o->b.model, &w, e);
  if (!rc && (gc_weights_note(w, line, sizeof line), line[0])) fprintf(stderr, "gcore-bench: %s: %s\n", o->b.model, line);
  if (!rc && o->b.quantize) rc = gc_weights_quantize(w, o->b.quantize, e);
  if (!rc && ctx > w->cfg.max_seq)
    rc = gc_err_set(e, GC_EINVAL, "a test of %d tokens needs %d positions; the model has %d", ctx,
                    ctx, w->cfg.max_seq);
  if (!rc) describe_model(w, &mi);
  if (!rc) rc = gc_dev_open(o->backend, o->ordinal, &dev, e);
  if (!rc) rc = gc_llama_bundle_open(dev, &o->b, &rt, &info, e);
  if (!rc) {
    gc_llama_bundle_describe(&info, line, sizeof line);
    if (line[0]) fprintf(stderr, "gcore-bench: %s\n", line);
    snprintf(mi.target, sizeof mi.target, "%s", gc_rt_target(rt));
    snprintf(mi.device, sizeof mi.device, "%s", gc_dev_info(dev)->name);
    rc = max_b > 1 && o->ntg ? gc_llama_create_slots(dev, rt, w, ctx, max_p > 0 ? max_p : 1, max_b, &m, e)
                             : gc_llama_create(dev, rt, w, ctx, max_p > 0 ? max_p : 1, &m, e);
  }
  if (!rc && o->no_ahead) gc_llama_set_ahead(m, 0);
  if (!rc && o->profile) rc = gc_prof_create(dev, &prof, e);
  if (!rc && !(lg = gc_malloc((size_t)w->cfg.vocab_size * sizeof *lg, e))) rc = GC_ENOMEM;
  if (!rc && !strcmp(o->format, "md")) fputs(md_head, stdout);
  if (!rc && !strcmp(o->format, "csv")) fputs(csv_head, stdout);
  if (!rc && !strcmp(o->format, "json")) printf("[\n");
  /* the pp tests, then each tg length for each --parallel count, then
   * those again for each op of --leave-out */
  int rows = 0, ntg = o->ntg * o->npar, ntests = o->npp + ntg * (1 + o->nleave);
  for (int i = 0; !rc && i < ntests; i++) {
    test_result_t r;
    int j = i - o->npp, pp = j < 0 ? o->pp[i] : 0, tg = j < 0 ? 0 : o->tg[j % ntg / o->npar];
    int b = j < 0 ? 1 : o->par[j % ntg % o->npar];
    const char *left_out = j < ntg ? NULL : o->leave[j / ntg - 1];
    if (!(rc = run_test(m, o, pp, tg, b, left_out, lg, prof, &r, e))) print_row(o, &mi, &r, rows++ == 0);
    if (!rc && prof) {
      char name[64];
      test_name(&r, name, sizeof name);
      fflush(stdout);
      fprintf(stderr, "gcore-bench: profile of %s (%d timed runs):\n", name, r.reps);
      gc_prof_print(prof, stderr);
      gc_prof_free(prof);
      prof = NULL;
      if (i + 1 < ntests) rc = gc_prof_create(dev, &prof, e);
    }
  }
  if (!rc && !strcmp(o->format, "json")) printf("\n]\n");
  free(lg);
  gc_prof_free(prof);
  gc_llama_free(m);
  gc_rt_close(rt);
  gc_dev_close(dev);
  gc_weights_close(w);
  return rc;
}

/* A comma list of counts into v, at most MAX_TESTS of them, each in
 * [0, hi]; a 0 means none and is dropped. */
static int parse_list(const char *s, int64_t hi, int *v, int *n) {
  char buf[1024], *save = NULL;
  if (strlen(s) >= sizeof buf) return -1;
  snprintf(buf, sizeof buf, "%s", s);
  *n = 0;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int64_t x;
    if (gc_parse_i64(t, &x) || x < 0 || x > hi || *n == MAX_TESTS) return -1;
    if (x > 0) v[(*n)++] = (int)x;
  }
  return s[0] && s[strlen(s) - 1] != ',' ? 0 : -1;
}

/* A comma list of names into v, at most MAX_LEAVE of them (main checks
 * that each is an op). */
static int parse_ops(const char *s, op_name_t *v, int *n) {
  char buf[1024], *save = NULL;
  if (strlen(s) >= sizeof buf || !s[0] || s[strlen(s) - 1] == ',') return -1;
  snprintf(buf, sizeof buf, "%s", s);
  *n = 0;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (*n == MAX_LEAVE || strlen(t) >= sizeof *v) return -1;
    snprintf(v[(*n)++], sizeof *v, "%s", t);
  }
  return *n ? 0 : -1;
}

static int bad_flag(const char *flag, const char *what) {
  fprintf(stderr, "gcore-bench: %s: expected %s\n", flag, what);
  return 2;
}

int main(int argc, char **argv) {
  bench_opts_t o = {.backend = "cpu", .format = "md", .reps = 5, .warmup = 1};
  o.pp[o.npp++] = 512;
  o.tg[o.ntg++] = 128;
  o.par[o.npar++] = 1;
  int c;
  int64_t iv;
  while ((c = gc_cli_getopt(argc, argv, "m:b:p:n:r:o:h", longopts)) != -1) {
    switch (c) {
      case 'm': o.b.model = optarg; break;
      case 'b': o.b.bundle = optarg; break;
      case O_DB: o.b.db = optarg; break;
      case O_CACHE: o.b.cache = optarg; break;
      case O_QUANTIZE: o.b.quantize = optarg; break;
      case 'p':
        if (parse_list(optarg, 1 << 20, o.pp, &o.npp)) return bad_flag("-p", "a comma list of prompt lengths (0: none)");
        break;
      case 'n':
        if (parse_list(optarg, 1 << 20, o.tg, &o.ntg)) return bad_flag("-n", "a comma list of generation lengths (0: none)");
        break;
      case 'r':
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > 256) return bad_flag("-r", "repetitions, 1 to 256");
        o.reps = (int)iv;
        break;
      case 'o':
        if (strcmp(optarg, "md") && strcmp(optarg, "csv") && strcmp(optarg, "json"))
          return bad_flag("-o", "md, csv or json");
        o.format = optarg;
        break;
      case O_PARALLEL:
        if (parse_list(optarg, GC_LLAMA_BATCH_MAX, o.par, &o.npar) || !o.npar)
          return bad_flag("--parallel", "a comma list of sequence counts, 1 to 16");
        break;
      case O_PROFILE: o.profile = 1; break;
      case O_NOAHEAD: o.no_ahead = 1; break;
      case O_LEAVE_OUT:
        if (parse_ops(optarg, o.leave, &o.nleave))
          return bad_flag("--leave-out", "a comma list of op names (at most 16; see gcore-tune --help)");
        break;
      case O_NOWARMUP: o.warmup = 0; break;
      case O_BACKEND: o.backend = optarg; break;
      case O_DEVICE:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 1024) return bad_flag("--device", "an ordinal");
        o.ordinal = (int)iv;
        break;
      case 'h': fputs(usage, stdout); return gc_cli_exit("gcore-bench", 0);
      case O_VERSION: return gc_cli_version("gcore-bench");
      default: return gc_cli_bad_option("gcore-bench", c, argv);
    }
  }
  gc_err_t e = {0};
  int rc = GC_OK;
  if (optind < argc)
    rc = gc_err_set(&e, GC_EINVAL, "unexpected argument %s", GC_QUOTED(argv[optind]));
  else if (!o.b.model)
    rc = gc_err_set(&e, GC_EINVAL, "give the model: -m MODEL (see --help)");
  else if (o.b.bundle && (o.b.db || o.b.cache))
    rc = gc_err_set(&e, GC_EINVAL, "--db and --cache build the bundle when -b is not given; drop them or -b");
  else if (!o.npp && !o.ntg)
    rc = gc_err_set(&e, GC_EINVAL, "nothing to run: -p and -n are both 0");
  else if (o.nleave && !o.ntg)
    rc = gc_err_set(&e, GC_EINVAL, "--leave-out leaves ops out of tg tests: give -n");
  for (int i = 0; !rc && i < o.nleave; i++) /* before any test runs */
    if ((rc = gc_llama_leave_out_check(o.leave[i], &e))) gc_err_prefix(&e, "--leave-out");
  if (!rc) rc = bench(&o, &e);
  if (rc) {
    fflush(stdout);
    fprintf(stderr, "gcore-bench: %s\n", e.msg);
    return 1;
  }
  return gc_cli_exit("gcore-bench", 0);
}
