/* tune_main.c — gcore-tune: the command line over tuner/tune.c. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/cli.h"
#include "../gen/autobundle.h"
#include "../gen/compile.h"
#include "../models/recipe.h"
#include "../gen/template.h"
#include "../tuner/report.h"
#include "../tuner/stepcheck.h"
#include "../tuner/tune.h"
#include "../core/ops.h"
#include "../db/tunedb.h"

static const char usage[] =
    "usage: gcore-tune [options] (--model PATH | --workload FILE | --op OP --m LIST ...)\n"
    "       gcore-tune --merge A.db B.db ... [--db OUT.db]\n"
    "       gcore-tune --report FILE.html [--db PATH]\n"
    "Sweeps kernel variants on this machine's device, verifies each against an fp64\n"
    "reference, times it, records every result and the winners in an SQLite database.\n"
    "\n"
    "problems:\n"
    "  --op OP           one of the ops listed at the end\n"
    "  --m/--n/--k LIST  comma-separated sizes (rmsnorm uses m rows of n)\n"
    "  --dtype T         f32 | f16 | bf16 | A:B:C such as f32:f16:f32 (default f32)\n"
    "  --workload FILE   one problem per line: 'OP DTYPE m=LIST n=LIST k=LIST'\n"
    "  --model PATH      every problem a Llama model's forward needs (HF dir, .gguf or llama2.c\n"
    "                    .bin)\n"
    "  --prefill LIST    with --model: prompt lengths to tune for (default 128,512; none: decode only)\n"
    "  --batch N         with --model: rows of a decode step (default 1)\n"
    "  --quantize T      with --model: its matrices stored as q8_0, q4_0 or q4_k, as gcore-run\n"
    "                    --quantize runs them\n"
    "  --tp N            with --model: the shard shapes of one of N tensor-parallel ranks\n"
    "                    (heads, FFN rows and LM-head rows divided by N)\n"
    "  --step-check      with --model (the default on GPU targets): after the sweeps, each\n"
    "                    winner of the decode step that differs from its default is timed in\n"
    "                    the model's decode step itself (its kernels overlapped, as gcore-run\n"
    "                    runs them) against the defaults; one that makes the step slower is\n"
    "                    recorded so, and gcore-gen builds the default in its place\n"
    "  --no-step-check   with --model: skip it\n"
    "  --h/--g/--d LIST  query heads, kv heads, head dim (rope_kv, attention)\n"
    "sweep:\n"
    "  --target T        the code to tune (default cpu: the host's x86-64 level); targets\n"
    "                    are listed at the end\n"
    "  --db PATH         tuning database, a regular file (default $GCORE_DB, else\n"
    "                    ~/.local/share/gcore/tune.db, which gcore-run reads when given no -b;\n"
    "                    created and migrated; several gcore-tune processes may share one)\n"
    "  --budget N|Ns|all at most N candidates per problem, counting those an earlier run\n"
    "                    measured (default 16; rerun with a larger N to go on); or N seconds\n"
    "                    in all, shared: every problem's template defaults first, then an\n"
    "                    equal share of the time left each; all: every point of the spaces\n"
    "  --strategy S      local (default): the defaults, then the untried one-parameter\n"
    "                    neighbours of the fastest points so far (one that breaks a\n"
    "                    constraint repaired by another parameter's nearest valid value);\n"
    "                    random: the defaults, then the space in a shuffled order\n"
    "  --template NAME   sweep only this template\n"
    "  --templates DIR   read templates from DIR/<backend>/ instead of the built-in ones\n"
    "  --compiler NAME   compile driver (cpu: cc; NVIDIA: nvrtc; AMD: comgr or clang, default\n"
    "                    comgr where it lists the ISA, else clang)\n"
    "  --code-object N   AMD code object version: 5 (default) or 4\n"
    "  --cache DIR       compile cache, a directory (default $GCORE_CACHE or ~/.cache/gcore)\n"
    "  --jobs N          parallel compiles (default: ninja's)\n"
    "  --device N        device ordinal (default 0)\n"
    "  --devices LIST    tune on several devices of this host in parallel (e.g. 0,1,2,3):\n"
    "                    one worker per device, problems dealt out in turn, one database\n"
    "  --timeout S       seconds a candidate may take before it is killed (default 60)\n"
    "  --compile-timeout S  seconds one compile may run before it is killed and recorded\n"
    "                    compile-failed, \"timed out after S s\" (default 300)\n"
    "  --min-time S      seconds of timed launches per candidate (default 0.2; at most 500\n"
    "                    launches, each after a cache flush on GPUs)\n"
    "  --margin F        noise margin for keeping an incumbent winner (default 0.02)\n"
    "  --progress/--no-progress  live progress line (default: when stderr is a terminal)\n"
    "  --shard I/N       tune only the I-th of N slices of the problems (problem j goes to\n"
    "                    slice j % N + 1): N machines of one kind tune one workload together,\n"
    "                    then --merge their databases\n"
    "  --list-ops        print the op table (dimensions, buffers and their shapes, arguments)\n"
    "                    as JSON, and exit\n"
    "databases:\n"
    "  --merge A.db ...  copy every measurement of the databases named after the options into\n"
    "                    --db (rows keyed by device, compiler, problem and variant; one already\n"
    "                    there is kept), then re-pick the winners of what they touched\n"
    "  --report FILE     write one self-contained HTML page on --db (after tuning or merging,\n"
    "                    if asked): every candidate's time per problem with the winner and the\n"
    "                    template default marked, failures by status, time against each\n"
    "                    template parameter, and a table of the winners\n"
    "  -h, --help        this text\n"
    "  --version         this tool's version\n";

enum { O_VERSION = 255, O_OP = 256, O_MODEL, O_PREFILL, O_BATCH, O_M, O_N, O_K, O_H, O_G, O_D, O_DTYPE, O_WORKLOAD, O_TARGET, O_DB, O_BUDGET,
       O_TEMPLATE, O_TEMPLATES, O_COMPILER, O_CACHE, O_JOBS, O_DEVICE, O_TIMEOUT,
       O_MINTIME, O_MARGIN, O_PROGRESS, O_NOPROGRESS, O_LISTOPS, O_DEVICES, O_STRATEGY, O_COV, O_CTIMEOUT,
       O_QUANTIZE, O_MERGE, O_REPORT, O_SHARD, O_TP, O_NOSTEP, O_STEP };

static const struct option longopts[] = {
    {"op", 1, 0, O_OP}, {"model", 1, 0, O_MODEL}, {"prefill", 1, 0, O_PREFILL}, {"batch", 1, 0, O_BATCH},           {"m", 1, 0, O_M},
    {"n", 1, 0, O_N},             {"k", 1, 0, O_K}, {"h", 1, 0, O_H}, {"g", 1, 0, O_G}, {"d", 1, 0, O_D},
    {"dtype", 1, 0, O_DTYPE},     {"workload", 1, 0, O_WORKLOAD},
    {"target", 1, 0, O_TARGET},   {"db", 1, 0, O_DB},
    {"budget", 1, 0, O_BUDGET},   {"template", 1, 0, O_TEMPLATE},
    {"templates", 1, 0, O_TEMPLATES}, {"compiler", 1, 0, O_COMPILER},
    {"cache", 1, 0, O_CACHE},     {"jobs", 1, 0, O_JOBS},
    {"device", 1, 0, O_DEVICE},   {"timeout", 1, 0, O_TIMEOUT},
    {"min-time", 1, 0, O_MINTIME}, {"margin", 1, 0, O_MARGIN},
    {"progress", 0, 0, O_PROGRESS}, {"no-progress", 0, 0, O_NOPROGRESS},
    {"devices", 1, 0, O_DEVICES}, {"strategy", 1, 0, O_STRATEGY},
    {"code-object", 1, 0, O_COV}, {"compile-timeout", 1, 0, O_CTIMEOUT},
    {"list-ops", 0, 0, O_LISTOPS}, {"quantize", 1, 0, O_QUANTIZE},
    {"merge", 0, 0, O_MERGE}, {"report", 1, 0, O_REPORT}, {"shard", 1, 0, O_SHARD}, {"tp", 1, 0, O_TP},
    {"no-step-check", 0, 0, O_NOSTEP}, {"step-check", 0, 0, O_STEP},
    {"help", 0, 0, 'h'}, {"version", 0, 0, O_VERSION},          {0, 0, 0, 0}};

static int help(void) {
  fputs(usage, stdout);
  printf("ops:\n");
  gc_op_help(stdout);
  printf("targets: %s\n", gc_target_names());
  return gc_cli_exit("gcore-tune", 0);
}

static int die(const char *msg) {
  fprintf(stderr, "gcore-tune: %s\n", msg);
  return 1;
}

/* N candidates, Ns seconds, or all (the whole space). */
static int parse_budget(const char *s, gc_tune_opts_t *o) {
  char num[32];
  size_t n = strlen(s);
  int secs = n > 1 && s[n - 1] == 's';
  o->budget_n = 0;
  o->budget_s = 0;
  if (!strcmp(s, "all")) return 0;
  if (n == 0 || n >= sizeof num) return -1;
  snprintf(num, sizeof num, "%.*s", (int)(n - (size_t)secs), s);
  int64_t v;
  if (gc_parse_i64(num, &v) || v < 1) return -1;
  if (secs)
    o->budget_s = (double)v;
  else
    o->budget_n = v;
  return 0;
}

/* Tune on each device of ords in a child process of its own; child i takes
 * problems i, i + n, i + 2n, ... Returns the number of children that failed. */
static int tune_devices(gc_tune_opts_t *o, const gc_problems_t *probs, const int *ords, int n) {
  pid_t pids[64];
  fflush(NULL);
  for (int i = 0; i < n; i++) {
    if ((pids[i] = fork()) == 0) {
      gc_problems_t mine = {0};
      gc_err_t e = {0};
      int rc = GC_OK;
      for (int j = i; !rc && j < probs->n; j += n) rc = gc_problems_push(&mine, &probs->v[j], &e);
      o->ordinal = ords[i];
      o->progress = 0; /* several live lines would garble each other */
      if (!rc && mine.n) rc = gc_tune_run(o, &mine, &e);
      if (rc) fprintf(stderr, "gcore-tune: device %d: %s\n", ords[i], e.msg);
      fflush(NULL);
      _exit(rc ? 1 : 0);
    }
  }
  int failed = 0;
  for (int i = 0; i < n; i++) {
    int st = 0;
    if (pids[i] < 0 || waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed++;
  }
  return failed;
}

/* The folder the database goes in (the default one may not exist yet). */
static int make_parent(const char *path, gc_err_t *e) {
  char dir[1024];
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return GC_OK;
  snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  return gc_mkdirs(dir, e);
}

/* "I/N" with 1 <= I <= N <= 4096. */
static int parse_shard(const char *s, int *i, int *n) {
  char a[24], b[24];
  const char *slash = strchr(s, '/');
  int64_t x, y;
  if (!slash || slash - s >= (long)sizeof a || strlen(slash + 1) >= sizeof b) return -1;
  snprintf(a, sizeof a, "%.*s", (int)(slash - s), s);
  snprintf(b, sizeof b, "%s", slash + 1);
  if (gc_parse_i64(a, &x) || gc_parse_i64(b, &y) || y < 1 || y > 4096 || x < 1 || x > y) return -1;
  *i = (int)x;
  *n = (int)y;
  return 0;
}

/* ",h1,h2,...,": the versions of every template (embedded, or under dir),
 * the ones whose variants may win, as when tuning. */
static int template_hashes(const char *dir, char **out, gc_err_t *e) {
  gc_templates_t tpls = {0};
  if (gc_tpl_load_all(dir, &tpls, e)) return e->code;
  char *h = gc_calloc((size_t)tpls.n + 1, GC_HASH_HEX + 1, e);
  if (h) {
    strcpy(h, ",");
    for (int t = 0; t < tpls.n; t++) strcat(strcat(h, tpls.v[t].hash), ",");
  }
  gc_tpl_free_all(&tpls);
  *out = h;
  return h ? GC_OK : GC_ENOMEM;
}

/* --merge: every source into db_path in one transaction (all or nothing),
 * then the winners of the keys they touched re-picked; a line per source
 * and one for the winners. */
static int merge(const char *db_path, char **srcs, int n, const char *templates_dir, double margin,
                 gc_err_t *e) {
  gc_db_t *db = NULL;
  char *hashes = NULL;
  int64_t picked = 0, changed = 0, added = 0;
  int rc = template_hashes(templates_dir, &hashes, e);
  if (!rc) rc = gc_db_open(db_path, 1, &db, e);
  if (!rc) rc = gc_db_begin(db, e);
  for (int i = 0; !rc && i < n; i++) {
    gc_db_merge_stats_t st;
    rc = gc_db_merge_from(db, srcs[i], &st, e);
    if (!rc)
      printf("%s: %lld measurements, %lld new here (%lld already here); new: %lld devices, "
             "%lld compilers, %lld problems, %lld variants, %lld step checks\n", srcs[i],
             (long long)st.measurements, (long long)st.added, (long long)(st.measurements - st.added),
             (long long)st.devices, (long long)st.compilers, (long long)st.problems,
             (long long)st.variants, (long long)st.step_checks);
    added += st.added;
  }
  if (!rc) rc = gc_db_merge_repick(db, hashes, margin, &picked, &changed, e);
  if (!rc) rc = gc_db_commit(db, e);
  else if (db) gc_db_rollback(db);
  if (!rc)
    printf("merged into %s: %lld new measurements; %lld winners re-picked over the union, %lld "
           "changed\n", db_path, (long long)added, (long long)picked, (long long)changed);
  gc_db_close(db);
  free(hashes);
  return rc;
}

/* --report FILE on the database at db_path, said in one line. */
static int write_report(const char *db_path, const char *templates_dir, const char *out, gc_err_t *e) {
  gc_report_stats_t st;
  if (gc_report_write(db_path, templates_dir, out, &st, e)) return e->code;
  printf("report: %s (%lld problems, %lld measurements, %lld devices, %lld plots)\n", out,
         (long long)st.problems, (long long)st.measurements, (long long)st.devices,
         (long long)st.plots);
  return GC_OK;
}

static int parse_pos(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (*end || !(v > 0)) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  gc_tune_opts_t o;
  memset(&o, 0, sizeof o);
  char dbdef[1024];
  gc_db_default_path(dbdef, sizeof dbdef);
  o.db_path = dbdef;
  o.timeout_s = 60;
  o.margin = 0.02;
  /* flush: the worker sets it per device, and chain for @pdl kernels */
  o.timing = (gc_time_opts_t){.warmup = 2, .min_iters = 5, .max_iters = GC_TIME_MAX_ITERS, .min_time = 0.2};
  o.progress = isatty(2);
  o.strategy = GC_SEARCH_LOCAL;
  o.budget_n = GC_TUNE_DEFAULT_BUDGET;
  const char *dims[GC_NDIMS] = {0};
  const char *model = NULL, *prefill = NULL, *batch = NULL, *quantize = NULL;
  const char *op = NULL, *dtype = NULL, *workload = NULL,
             *target = "cpu";
  char cache[1024];
  gc_cache_default(cache, sizeof cache);
  o.cache = cache;
  int c, ndev = 0, ords[64], cov = 0, merging = 0, shard_i = 0, shard_n = 0, tp = 0, step = -1; /* --step-check 1, --no-step-check 0, -1: on GPUs */
  const char *report = NULL;
  int64_t iv;
  while ((c = gc_cli_getopt(argc, argv, "h", longopts)) != -1) {
    switch (c) {
      case O_OP: op = optarg; break;
      case O_MODEL: model = optarg; break;
      case O_PREFILL: prefill = optarg; break;
      case O_BATCH: batch = optarg; break;
      case O_QUANTIZE: quantize = optarg; break;
      case O_TP:
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > GC_LLAMA_TP_MAX) return die("--tp: expected 1..64 ranks");
        tp = (int)iv;
        break;
      case O_M: case O_N: case O_K: case O_H: case O_G: case O_D:
        dims[c - O_M] = optarg;
        break;
      case O_DTYPE: dtype = optarg; break;
      case O_WORKLOAD: workload = optarg; break;
      case O_TARGET: target = optarg; break;
      case O_DB: o.db_path = optarg; break;
      case O_BUDGET:
        if (parse_budget(optarg, &o)) return die("--budget: expected N (candidates), Ns (seconds) or all");
        break;
      case O_TEMPLATE: o.only_template = optarg; break;
      case O_TEMPLATES: o.templates_dir = optarg; break;
      case O_COMPILER: o.compiler = optarg; break;
      case O_CACHE: o.cache = optarg; break;
      case O_JOBS:
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > 1024) return die("--jobs: expected 1..1024");
        o.jobs = (int)iv;
        break;
      case O_DEVICE:
        if (gc_parse_i64(optarg, &iv) || iv < 0 || iv > 1024) return die("--device: expected an ordinal");
        o.ordinal = (int)iv;
        break;
      case O_TIMEOUT:
        if (parse_pos(optarg, &o.timeout_s)) return die("--timeout: expected seconds > 0");
        break;
      case O_CTIMEOUT:
        if (parse_pos(optarg, &o.compile_timeout_s) || o.compile_timeout_s > 86400)
          return die("--compile-timeout: expected seconds, 0 < S <= 86400");
        break;
      case O_MINTIME:
        if (parse_pos(optarg, &o.timing.min_time)) return die("--min-time: expected seconds > 0");
        break;
      case O_MARGIN:
        if (parse_pos(optarg, &o.margin) || o.margin >= 1) return die("--margin: expected 0 < F < 1");
        break;
      case O_DEVICES: {
        char buf[512], *save = NULL;
        snprintf(buf, sizeof buf, "%s", optarg);
        ndev = 0;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
          if (ndev == 64 || gc_parse_i64(t, &iv) || iv < 0 || iv > 1024)
            return die("--devices: expected a comma list of up to 64 ordinals");
          ords[ndev++] = (int)iv;
        }
        if (!ndev) return die("--devices: expected a comma list of ordinals");
        break;
      }
      case O_STRATEGY:
        if (!strcmp(optarg, "local")) o.strategy = GC_SEARCH_LOCAL;
        else if (!strcmp(optarg, "random")) o.strategy = GC_SEARCH_RANDOM;
        else return die("--strategy: expected local or random");
        break;
      case O_COV:
        if (gc_parse_i64(optarg, &iv) || (iv != 4 && iv != 5)) return die("--code-object: expected 4 or 5");
        cov = (int)iv;
        break;
      case O_MERGE: merging = 1; break;
      case O_NOSTEP: step = 0; break;
      case O_STEP: step = 1; break;
      case O_REPORT: report = optarg; break;
      case O_SHARD:
        if (parse_shard(optarg, &shard_i, &shard_n))
          return die("--shard: expected I/N, the I-th of N slices (1 <= I <= N)");
        break;
      case O_PROGRESS: o.progress = 1; break;
      case O_NOPROGRESS: o.progress = 0; break;
      case 'h': return help();
      case O_LISTOPS: gc_op_table_json(stdout); return gc_cli_exit("gcore-tune", 0);
      case O_VERSION: return gc_cli_version("gcore-tune");
      default: return gc_cli_bad_option("gcore-tune", c, argv);
    }
  }
  if (optind < argc && !merging) {
    fprintf(stderr, "gcore-tune: unexpected argument %s\n", GC_QUOTED(argv[optind]));
    return 2;
  }
  gc_err_t e = {0};
  gc_problems_t probs = {0};
  int given = (workload != NULL) + (model != NULL) +
              (op || dtype || dims[0] || dims[1] || dims[2] || dims[3] || dims[4] || dims[5]);
  if (merging && optind == argc) return die("--merge: name the databases to merge (--merge A.db B.db ...)");
  if (merging && (given || shard_n)) return die("--merge takes databases, not problems or --shard: merge, then tune");
  if (report && gc_check_output(report, 'f', &e)) return die(e.msg);
  int rc = make_parent(o.db_path, &e);
  if (rc) return die(e.msg);
  if (merging || (report && !given)) {
    if (merging) rc = merge(o.db_path, argv + optind, argc - optind, o.templates_dir, o.margin, &e);
    if (!rc && report) rc = write_report(o.db_path, o.templates_dir, report, &e);
    if (rc) return die(e.msg);
    return gc_cli_exit("gcore-tune", 0);
  }
  if (given > 1)
    rc = gc_err_set(&e, GC_EINVAL, "give one of --workload, --model, or --op with sizes");
  else if ((prefill || batch || quantize || tp || step >= 0) && !model)
    rc = gc_err_set(&e, GC_EINVAL, "--prefill, --batch, --quantize, --tp and --(no-)step-check go with --model");
  else if (step == 1 && (tp > 1 || shard_n || ndev > 1))
    rc = gc_err_set(&e, GC_EINVAL, "--step-check times one whole model on one device: not with --tp, --shard or "
                    "several --devices (check the merged database with gcore-tune --model on one device)");
  else if (workload)
    rc = gc_problems_load(&probs, workload, &e);
  else if (model && !(rc = gc_target_parse(target, &o.target, &e)))
    rc = gc_llama_workload(model, quantize, prefill, batch, tp ? tp : 1, o.target.backend, &probs, NULL, NULL, &e);
  else if (!op)
    rc = gc_err_set(&e, GC_EINVAL, "no problems: give --model PATH, --workload FILE or --op OP with sizes (see --help)");
  else
    rc = gc_problems_expand(&probs, op, dtype, dims, &e);
  if (!rc) rc = gc_target_parse(target, &o.target, &e);
  if (!rc && cov) rc = gc_target_set_code_object(&o.target, cov, &e);
  if (!rc && shard_n) {
    gc_problems_t mine = {0};
    rc = gc_tune_shard(&probs, shard_i, shard_n, &mine, &e);
    if (!rc) printf("shard %d/%d: %d of the %d problems\n", shard_i, shard_n, mine.n, probs.n);
    gc_problems_free(&probs);
    probs = mine;
  }
  if (!rc && ndev > 1) {
    /* create and migrate the database once, before the workers race to it */
    gc_db_t *db;
    if (!(rc = gc_db_open(o.db_path, 1, &db, &e))) gc_db_close(db);
    int failed = rc ? 0 : tune_devices(&o, &probs, ords, ndev);
    if (!rc && failed) rc = gc_err_set(&e, GC_EDEVICE, "%d of %d device workers failed", failed, ndev);
  } else if (!rc) {
    if (ndev == 1) o.ordinal = ords[0];
    rc = gc_tune_run(&o, &probs, &e);
  }
  gc_problems_free(&probs);
  /* one device, the whole model (not a shard, nor a slice of the problems);
   * by default on GPUs (on the CPU a tiny step's kernels differ by less
   * than its noise: --step-check asks) */
  if (step < 0) step = strcmp(o.target.backend, "cpu") != 0;
  if (!rc && model && step && (tp ? tp : 1) == 1 && !shard_n && ndev <= 1) {
    gc_step_opts_t so = {.model = model, .quantize = quantize, .prefill = prefill, .batch = batch,
                         .db_path = o.db_path, .cache = o.cache, .templates_dir = o.templates_dir,
                         .compiler = o.compiler, .target = &o.target, .ordinal = o.ordinal, .jobs = o.jobs,
                         .compile_timeout_s = o.compile_timeout_s};
    gc_step_opts_default(&so);
    rc = gc_step_check(&so, &e);
  }
  if (!rc && report) rc = write_report(o.db_path, o.templates_dir, report, &e);
  if (rc) return die(e.msg);
  return gc_cli_exit("gcore-tune", 0);
}
