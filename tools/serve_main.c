/* serve_main.c — gcore-serve: a Llama model behind the OpenAI HTTP API
 * (/v1/completions, /v1/chat/completions, /v1/models, /health), with up
 * to --parallel requests decoded at once as one batched pass. The layers
 * it puts together are in serve/ (engine.c: the batch loop; http.c:
 * libmicrohttpd; api.c: the requests and responses). */
#include <errno.h>
#include <getopt.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../base/cli.h"
#include "../serve/http.h"

static const char usage[] =
    "usage: gcore-serve -m MODEL [-b BUNDLE] [--tokenizer PATH] [--host ADDR] [--port N] [--parallel N]\n"
    "Serves a Llama model (a Hugging Face directory, a GGUF file or a llama2.c checkpoint) over HTTP\n"
    "with OpenAI's API: POST /v1/completions and /v1/chat/completions (stream: true as server-sent\n"
    "events), POST /tokenize and /detokenize, GET /v1/models and /health. Up to --parallel\n"
    "requests are decoded at once, their decode steps run as one pass of that many rows; more\n"
    "wait in a queue. Stops on SIGINT/SIGTERM.\n"
    "\n"
    "model:\n"
    "  -m, --model PATH     Hugging Face directory, GGUF file or llama2.c .bin\n"
    "  --quantize T         store the model's matrices as q8_0, q4_0 or q4_k on load\n"
    "  -b, --bundle PATH    bundle built by gcore-gen for this model (default: built from the\n"
    "                       tuning database for this device into the cache, or reused from it)\n"
    "  --db PATH            without -b: the tuning database (default $GCORE_DB, else\n"
    "                       ~/.local/share/gcore/tune.db)\n"
    "  --cache DIR          without -b: compile and bundle cache (default $GCORE_CACHE or\n"
    "                       ~/.cache/gcore)\n"
    "  --tokenizer PATH     tokenizer.json, a directory holding one, or a .gguf vocabulary\n"
    "                       (default: MODEL/tokenizer.json, or the GGUF model's own; without one,\n"
    "                       prompts must be token ids and there is no chat endpoint)\n"
    "  --model-name NAME    the model's id in the API (default: the last part of MODEL's path)\n"
    "  --ctx N              positions per request: prompt and completion (default: the model's\n"
    "                       maximum, at most 4096)\n"
    "server:\n"
    "  --host ADDR          address to listen on (default 127.0.0.1)\n"
    "  --port N             port (default 8080; 0: any free port, printed at start)\n"
    "  --parallel N         requests decoded at once, each with its own KV cache (1 to 16;\n"
    "                       default 4)\n"
    "  --max-queue N        requests waiting for a slot, at most; more get 503 (default 64)\n"
    "  --max-body BYTES     largest request body; larger get 413 (default 1048576)\n"
    "  --prefill-chunk N    most prompt tokens prefilled between two decode steps (default 512): a\n"
    "                       long prompt is taken in parts, so that the others' tokens keep flowing;\n"
    "                       short prompts that fit together run one after another\n"
    "  --fixed-batch        run every decode step with --parallel rows (padded), so that a request's\n"
    "                       tokens do not depend on how many others run beside it (slower alone)\n"
    "  --no-graph           launch decode steps kernel by kernel instead of replaying a graph\n"
    "  --l2-window MB       the decode step's O projection asks L2 for the first MB of the FFN's\n"
    "                       gate/up weights (a hint; no value changes), as gcore-run's (default\n"
    "                       3/5 of the GPU's L2; 0: none)\n"
    "  --no-prompt-cache    run every prompt from its first token (default: a prompt that begins\n"
    "                       as a free slot's last request did starts after that part)\n"
    "  --reasoning-format F deepseek (default): a DeepSeek R1 reply's <think> block goes to the\n"
    "                       message's reasoning_content, the rest to content; none: all in content\n"
    "  --api-key KEY        clients must send \"Authorization: Bearer KEY\" (or \"X-Api-Key: KEY\");\n"
    "                       others get 401 (GET /health stays open)\n"
    "  --api-key-file FILE  the same, the key read from FILE's first line (not on the command\n"
    "                       line, where other users of the machine can see it)\n"
    "  -v, --verbose        one line per request on stderr\n"
    "device:\n"
    "  --backend NAME       device backend: cpu (default), cuda (NVIDIA) or hip (AMD)\n"
    "  --device N           device ordinal (default 0)\n"
    "  --tp N               tensor parallelism over N ranks, as gcore-run --tp N (on the CPU\n"
    "                       backend: N threads; on GPUs devices --device + r, NCCL/RCCL)\n"
    "  --devices LIST       the ranks' GPU ordinals, as gcore-run --devices\n"
    "  -h, --help           this text\n"
    "  --version            this tool's version\n";

enum { O_VERSION = 256, O_TOKENIZER, O_HOST, O_PORT, O_PARALLEL, O_CTX, O_MAX_QUEUE, O_MAX_BODY,
       O_MODEL_NAME, O_QUANTIZE, O_DB, O_CACHE, O_BACKEND, O_DEVICE, O_NOGRAPH, O_FIXED, O_CHUNK, O_TP, O_DEVICES, O_API_KEY,
       O_API_KEY_FILE, O_REASONING, O_NO_PROMPT_CACHE, O_L2WIN };

static const struct option longopts[] = {
    {"model", 1, 0, 'm'},          {"bundle", 1, 0, 'b'},         {"tokenizer", 1, 0, O_TOKENIZER},
    {"host", 1, 0, O_HOST},        {"port", 1, 0, O_PORT},        {"parallel", 1, 0, O_PARALLEL},
    {"ctx", 1, 0, O_CTX},          {"max-queue", 1, 0, O_MAX_QUEUE}, {"max-body", 1, 0, O_MAX_BODY},
    {"model-name", 1, 0, O_MODEL_NAME}, {"quantize", 1, 0, O_QUANTIZE}, {"db", 1, 0, O_DB},
    {"cache", 1, 0, O_CACHE},      {"backend", 1, 0, O_BACKEND},  {"device", 1, 0, O_DEVICE},
    {"no-graph", 0, 0, O_NOGRAPH}, {"fixed-batch", 0, 0, O_FIXED}, {"l2-window", 1, 0, O_L2WIN}, {"verbose", 0, 0, 'v'},
    {"prefill-chunk", 1, 0, O_CHUNK}, {"tp", 1, 0, O_TP}, {"devices", 1, 0, O_DEVICES},
    {"api-key", 1, 0, O_API_KEY},  {"api-key-file", 1, 0, O_API_KEY_FILE},
    {"reasoning-format", 1, 0, O_REASONING}, {"no-prompt-cache", 0, 0, O_NO_PROMPT_CACHE}, {"help", 0, 0, 'h'},
    {"version", 0, 0, O_VERSION},  {0, 0, 0, 0}};

typedef struct serve_opts {
  gc_engine_opts_t en;
  gc_http_opts_t http;
  const char *tokenizer, *model_name;
  int reasoning; /* --reasoning-format deepseek */
  int tp_given, ndev, devices[GC_LLAMA_TP_MAX]; /* --tp was given; --devices */
} serve_opts_t;

#define GC_API_KEY_MAX 512 /* bytes of an API key */

/* --api-key-file: the key, FILE's first line (without its line end), into
 * key[GC_API_KEY_MAX + 2]. Errors: GC_EIO, GC_EINVAL (too long). */
static int read_key(const char *path, char *key, gc_err_t *e) {
  FILE *f = fopen(path, "r");
  if (!f) return gc_err_set(e, GC_EIO, "--api-key-file %s: %s", GC_QUOTED(path), strerror(errno));
  if (!fgets(key, GC_API_KEY_MAX + 2, f)) key[0] = 0;
  fclose(f);
  key[strcspn(key, "\r\n")] = 0;
  if (strlen(key) > GC_API_KEY_MAX)
    return gc_err_set(e, GC_EINVAL, "--api-key-file %s: a key of at most %d bytes", GC_QUOTED(path), GC_API_KEY_MAX);
  return GC_OK;
}

/* An API key: 1 to GC_API_KEY_MAX printable ASCII characters, no space
 * (an HTTP header carries it as is). Errors: GC_EINVAL. */
static int check_key(const char *key, gc_err_t *e) {
  size_t n = strlen(key);
  if (!n || n > GC_API_KEY_MAX)
    return gc_err_set(e, GC_EINVAL, "an API key has 1 to %d characters", GC_API_KEY_MAX);
  for (size_t i = 0; i < n; i++)
    if (key[i] <= ' ' || key[i] > '~')
      return gc_err_set(e, GC_EINVAL, "an API key has printable ASCII characters and no space");
  return GC_OK;
}

/* The tokenizer: --tokenizer, else MODEL/tokenizer.json or a GGUF
 * model's vocabulary, else none (prompts as ids). */
static int open_tokenizer(const serve_opts_t *o, const gc_llama_config_t *c, gc_tok_t **tok, gc_err_t *e) {
  char path[4096];
  struct stat st;
  const char *tp = o->tokenizer, *model = o->en.model;
  snprintf(path, sizeof path, "%s/tokenizer.json", model);
  if (!tp && stat(model, &st) == 0 && S_ISDIR(st.st_mode) && stat(path, &st) == 0) tp = model;
  if (!tp && gc_weights_is_gguf(model)) tp = model;
  if (!tp) return GC_OK;
  if (gc_tok_load(tp, tok, e)) return e->code;
  if (gc_tok_note(*tok)) fprintf(stderr, "gcore-serve: %s\n", gc_tok_note(*tok));
  if (gc_tok_vocab_size(*tok) > c->vocab_size)
    return gc_err_set(e, GC_EINVAL, "%s: the tokenizer has %d tokens but the model only %d", tp,
                      gc_tok_vocab_size(*tok), c->vocab_size);
  return GC_OK;
}

/* The API's facts: the tokenizer and its chat template (a model without
 * one still serves /v1/completions), the context, the model's id. */
static int setup_api(const serve_opts_t *o, const gc_llama_weights_t *w, gc_tok_t *tok, gc_api_t *a,
                     char *id, size_t idn, gc_err_t *e) {
  a->tok = tok;
  a->ctx = o->en.ctx;
  a->vocab = w->cfg.vocab_size;
  a->created = (int64_t)time(NULL);
  a->chat_end = -1;
  a->reasoning = o->reasoning;
  gc_err_t why = {0};
  if (!tok) snprintf(a->chat_why, sizeof a->chat_why, "this server has no tokenizer, so no chat template");
  else if (gc_chat_detect(tok, &a->chat, &why))
    snprintf(a->chat_why, sizeof a->chat_why, "this model has no chat template: %s", why.msg);
  else if ((a->chat_end = gc_chat_end_token(tok, a->chat)) < 0)
    snprintf(a->chat_why, sizeof a->chat_why, "this model's chat template has no end-of-turn token");
  else
    a->has_chat = 1, a->think = gc_chat_reasoning(tok, a->chat), a->tools = gc_chat_tools(tok, a->chat);
  a->tool_calls_id = tok ? gc_tok_find(tok, "[TOOL_CALLS]", 12) : -1;
  if (o->model_name) {
    snprintf(id, idn, "%s", o->model_name);
  } else { /* the last part of the path */
    size_t n = strlen(o->en.model);
    while (n > 1 && o->en.model[n - 1] == '/') n--;
    size_t b = n;
    while (b && o->en.model[b - 1] != '/') b--;
    snprintf(id, idn, "%.*s", (int)(n - b), o->en.model + b);
  }
  if (!id[0]) return gc_err_set(e, GC_EINVAL, "--model-name: an empty name");
  a->model_id = id;
  return GC_OK;
}

/* SIGINT/SIGTERM: every thread blocks them and this one takes them with
 * sigwait. Before the server listens (loading the model, building the
 * bundle) a signal ends the process at once; after, it wakes serve(),
 * which stops the engine and the connections in order (up to 10 s for
 * the connections); a second signal ends the process at once, as a
 * second Ctrl-C does uvicorn's. */
static sem_t g_stop;
static atomic_int g_listening;
static int g_sig;

static void *signals(void *arg) {
  int sig;
  if (sigwait((sigset_t *)arg, &sig)) return NULL;
  g_sig = sig;
  if (!atomic_load(&g_listening)) {
    fprintf(stderr, "gcore-serve: %s while starting: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    _exit(1);
  }
  sem_post(&g_stop);
  if (sigwait((sigset_t *)arg, &sig)) return NULL;
  fprintf(stderr, "gcore-serve: a second %s while stopping: exiting now\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  _exit(1);
}

static int serve(serve_opts_t *o, gc_err_t *e) {
  gc_llama_weights_t *w = NULL;
  gc_tok_t *tok = NULL;
  gc_engine_t *en = NULL;
  gc_http_t *h = NULL;
  gc_api_t api = {0};
  char id[256];
  pthread_mutex_init(&api.tok_mu, NULL);
  int rc = gc_weights_open(o->en.model, &w, e);
  char note[512];
  if (!rc && (gc_weights_note(w, note, sizeof note), note[0])) fprintf(stderr, "gcore-serve: %s: %s\n", o->en.model, note);
  if (!rc && o->en.quantize) rc = gc_weights_quantize(w, o->en.quantize, e);
  if (!rc) rc = open_tokenizer(o, &w->cfg, &tok, e);
  if (!rc && o->en.ctx <= 0) o->en.ctx = w->cfg.max_seq < 4096 ? w->cfg.max_seq : 4096;
  if (!rc && o->en.ctx > w->cfg.max_seq)
    rc = gc_err_set(e, GC_EINVAL, "--ctx %d is over the model's %d positions", o->en.ctx, w->cfg.max_seq);
  if (!rc && !o->en.prefill_chunk) o->en.prefill_chunk = 512;
  if (!rc && o->en.prefill_chunk > o->en.ctx) o->en.prefill_chunk = o->en.ctx;
  if (!rc) rc = setup_api(o, w, tok, &api, id, sizeof id, e);
  if (!rc) rc = gc_engine_start(&o->en, w, tok, &en, e);
  if (!rc) rc = gc_http_start(&o->http, &api, en, &h, e);
  if (!rc) {
    int v6 = strchr(o->http.host, ':') != NULL;
    atomic_store(&g_listening, 1); /* before the line: a signal once a client can see it stops gracefully */
    fprintf(stderr, "gcore-serve: listening on http://%s%s%s:%d (model '%s', %d slots of %d positions, %s)\n",
            v6 ? "[" : "", o->http.host, v6 ? "]" : "", gc_http_port(h), id, o->en.parallel, o->en.ctx,
            gc_engine_device(en));
    while (sem_wait(&g_stop) != 0) {} /* EINTR: wait on */
    fprintf(stderr, "gcore-serve: %s: stopping\n", g_sig == SIGINT ? "SIGINT" : "SIGTERM");
  }
  gc_engine_stop(en); /* fails what is waiting, so no connection waits for a token */
  gc_http_stop(h);    /* its connection threads may still call the engine until here */
  gc_engine_free(en);
  pthread_mutex_destroy(&api.tok_mu);
  gc_tok_free(tok);
  gc_weights_close(w);
  return rc;
}

static int bad_flag(const char *flag, const char *what) {
  fprintf(stderr, "gcore-serve: %s: expected %s\n", flag, what);
  return 2;
}

int main(int argc, char **argv) {
  serve_opts_t o = {.en = {.backend = "cpu", .parallel = 4, .max_queue = 64, .tp = 1, .l2_window_mb = -1}, .reasoning = 1,
                    .http = {.host = "127.0.0.1", .port = 8080, .max_body = 1 << 20}};
  int64_t v;
  int c;
  const char *key_file = NULL;
  static char key[GC_API_KEY_MAX + 2];
  while ((c = gc_cli_getopt(argc, argv, "m:b:vh", longopts)) != -1) {
    switch (c) {
      case 'm': o.en.model = optarg; break;
      case 'b': o.en.bundle = optarg; break;
      case O_TOKENIZER: o.tokenizer = optarg; break;
      case O_HOST: o.http.host = optarg; break;
      case O_MODEL_NAME: o.model_name = optarg; break;
      case O_QUANTIZE: o.en.quantize = optarg; break;
      case O_DB: o.en.db = optarg; break;
      case O_CACHE: o.en.cache = optarg; break;
      case O_BACKEND: o.en.backend = optarg; break;
      case O_NOGRAPH: o.en.no_graph = 1; break;
      case O_FIXED: o.en.fixed_batch = 1; break;
      case O_NO_PROMPT_CACHE: o.en.no_prompt_cache = 1; break;
      case 'v': o.http.verbose = 1; break;
      case O_API_KEY: o.http.api_key = optarg; break;
      case O_API_KEY_FILE: key_file = optarg; break;
      case O_REASONING:
        if (strcmp(optarg, "deepseek") && strcmp(optarg, "none")) return bad_flag("--reasoning-format", "deepseek or none");
        o.reasoning = !strcmp(optarg, "deepseek");
        break;
      case O_PORT:
        if (gc_parse_i64(optarg, &v) || v < 0 || v > 65535) return bad_flag("--port", "a port from 0 to 65535");
        o.http.port = (int)v;
        break;
      case O_PARALLEL:
        if (gc_parse_i64(optarg, &v) || v < 1 || v > GC_LLAMA_BATCH_MAX)
          return bad_flag("--parallel", "1 to 16 requests");
        o.en.parallel = (int)v;
        break;
      case O_CTX:
        if (gc_parse_i64(optarg, &v) || v < 2 || v > (1 << 24)) return bad_flag("--ctx", "positions >= 2");
        o.en.ctx = (int)v;
        break;
      case O_CHUNK:
        if (gc_parse_i64(optarg, &v) || v < 1 || v > (1 << 20)) return bad_flag("--prefill-chunk", "tokens >= 1");
        o.en.prefill_chunk = (int)v;
        break;
      case O_L2WIN:
        if (gc_parse_i64(optarg, &v) || v < 0 || v > 4096) return bad_flag("--l2-window", "0..4096 MB");
        o.en.l2_window_mb = (int)v;
        break;
      case O_MAX_QUEUE:
        if (gc_parse_i64(optarg, &v) || v < 1 || v > 100000) return bad_flag("--max-queue", "1 to 100000 requests");
        o.en.max_queue = (int)v;
        break;
      case O_MAX_BODY:
        if (gc_parse_i64(optarg, &v) || v < 1024 || v > (1LL << 30))
          return bad_flag("--max-body", "bytes from 1024 to 1073741824");
        o.http.max_body = (size_t)v;
        break;
      case O_DEVICE:
        if (gc_parse_i64(optarg, &v) || v < 0 || v > 1024) return bad_flag("--device", "an ordinal");
        o.en.device = (int)v;
        break;
      case O_TP:
        if (gc_parse_i64(optarg, &v) || v < 1 || v > GC_LLAMA_TP_MAX) return bad_flag("--tp", "1..64 ranks");
        o.en.tp = (int)v;
        o.tp_given = 1;
        break;
      case O_DEVICES:
        if ((o.ndev = gc_cli_devices(optarg, o.devices, GC_LLAMA_TP_MAX)) < 0)
          return bad_flag("--devices", "different ordinals 0..1024, comma-separated");
        break;
      case 'h': fputs(usage, stdout); return gc_cli_exit("gcore-serve", 0);
      case O_VERSION: return gc_cli_version("gcore-serve");
      default: return gc_cli_bad_option("gcore-serve", c, argv);
    }
  }
  /* connections: every slot and queue place, and room for /health and refusals */
  o.http.max_connections = o.en.parallel + o.en.max_queue + 64;
  if (o.ndev && o.tp_given && o.en.tp != o.ndev) return bad_flag("--devices", "as many ordinals as --tp ranks");
  if (o.ndev && o.en.device) return bad_flag("--devices", "no --device beside it");
  if (o.ndev) o.en.tp = o.ndev, o.en.devices = o.devices;
  gc_err_t e = {0};
  int rc;
  if (optind < argc)
    rc = gc_err_set(&e, GC_EINVAL, "unexpected argument %s", GC_QUOTED(argv[optind]));
  else if (key_file && o.http.api_key)
    rc = gc_err_set(&e, GC_EINVAL, "--api-key and --api-key-file both given: give one");
  else if ((key_file && read_key(key_file, key, &e)) || ((key_file || o.http.api_key) &&
                                                         check_key(key_file ? key : o.http.api_key, &e)))
    rc = e.code;
  else if (!o.en.model)
    rc = gc_err_set(&e, GC_EINVAL, "nothing to serve: give -m MODEL");
  else if (o.en.bundle && (o.en.db || o.en.cache))
    rc = gc_err_set(&e, GC_EINVAL, "--db and --cache build the bundle when -b is not given; drop them or -b");
  else {
    if (key_file) o.http.api_key = key;
    /* signals: SIGINT/SIGTERM go to the signals thread's sigwait, so every
       thread started after this blocks them; a closed client socket is an
       error on the write, not a signal */
    static sigset_t set;
    pthread_t th;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    sem_init(&g_stop, 0, 0);
    if (pthread_create(&th, NULL, signals, &set) != 0)
      rc = gc_err_set(&e, GC_ENOMEM, "cannot start the signal thread");
    else
      pthread_detach(th), rc = serve(&o, &e);
  }
  if (rc) {
    fprintf(stderr, "gcore-serve: %s\n", e.msg);
    return 1;
  }
  return gc_cli_exit("gcore-serve", 0);
}
