/* gen_main.c — gcore-gen: the command line over gen/bundle_build.c. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cli.h"
#include "../gen/bundle_build.h"
#include "../gen/compile.h"
#include "../gen/target.h"
#include "../models/recipe.h"

static const char usage[] =
    "usage: gcore-gen [options] -o BUNDLE (--model PATH | --workload FILE | --op OP --m LIST ...)\n"
    "Builds, offline and without a device, one bundle with code for every problem on\n"
    "every target: the tuned winner from --db, or the template's default where none.\n"
    "\n"
    "  -o, --output PATH   bundle to write (a regular file, replaced atomically)\n"
    "  --target LIST       comma-separated targets (default cpu), listed at the end\n"
    "  --db PATH           tuning database with the winners, read only (omit: defaults only)\n"
    "  --op OP, --m/--n/--k/--h/--g/--d LIST, --dtype T, --workload FILE   problems, as gcore-tune\n"
    "                      (the ops are listed at the end)\n"
    "  --model PATH        every op a Llama model needs (HF dir, .gguf or llama2.c .bin)\n"
    "  --prefill LIST      with --model: prompt lengths with exact entries (default 128,512;\n"
    "                      none: decode steps only)\n"
    "  --batch N           with --model: rows of a decode step (default 1)\n"
    "  --quantize T        with --model: its matrices stored as q8_0, q4_0 or q4_k, as gcore-run\n"
    "                      --quantize runs them\n"
    "  --tp N              with --model: the shard shapes of one of N tensor-parallel ranks, as\n"
    "                      gcore-run --tp N runs them\n"
    "  --dequant-rows N    with --model of block-format (quantized) matrices: prompts of at\n"
    "                      least N tokens dequantize each matrix into a dense scratch and run\n"
    "                      the dense GEMM (0: never; default on GPUs: where --db's timings say\n"
    "                      it is faster, else from 128 tokens; on the CPU: never)\n"
    "  --force T[:P=V,..]  use template T (with these params) wherever it serves a problem\n"
    "  --templates DIR     read templates from DIR/<backend>/ instead of the built-in ones\n"
    "  --compiler NAME     compile driver for the targets it serves (cpu: cc; NVIDIA: nvrtc;\n"
    "                      AMD: comgr or clang; default: comgr where it lists the ISA, else clang)\n"
    "  --code-object N     AMD code object version: 5 (default) or 4\n"
    "  --cache DIR         compile cache, a directory (default $GCORE_CACHE or ~/.cache/gcore)\n"
    "  --jobs N            parallel compiles (default: ninja's)\n"
    "  --compile-timeout S seconds one compile may run before it is killed (default 300);\n"
    "                      a variant the bundle needs that does not compile is an error\n"
    "  -q, --quiet         no summary line\n"
    "  -h, --help          this text\n"
    "  --version           this tool's version\n";

enum { O_VERSION = 255, O_OP = 256, O_MODEL, O_PREFILL, O_BATCH, O_M, O_N, O_K, O_H, O_G, O_D, O_DTYPE, O_WORKLOAD, O_TARGET, O_DB, O_FORCE,
       O_TEMPLATES, O_COMPILER, O_CACHE, O_JOBS, O_COV, O_CTIMEOUT, O_QUANTIZE, O_TP, O_DEQ };

static const struct option longopts[] = {
    {"output", 1, 0, 'o'},        {"op", 1, 0, O_OP}, {"model", 1, 0, O_MODEL}, {"prefill", 1, 0, O_PREFILL}, {"batch", 1, 0, O_BATCH},
    {"m", 1, 0, O_M},             {"n", 1, 0, O_N},
    {"k", 1, 0, O_K}, {"h", 1, 0, O_H}, {"g", 1, 0, O_G}, {"d", 1, 0, O_D},             {"dtype", 1, 0, O_DTYPE},
    {"workload", 1, 0, O_WORKLOAD}, {"target", 1, 0, O_TARGET},
    {"db", 1, 0, O_DB},           {"force", 1, 0, O_FORCE},
    {"templates", 1, 0, O_TEMPLATES}, {"compiler", 1, 0, O_COMPILER},
    {"cache", 1, 0, O_CACHE},     {"jobs", 1, 0, O_JOBS}, {"code-object", 1, 0, O_COV},
    {"compile-timeout", 1, 0, O_CTIMEOUT},
    {"quantize", 1, 0, O_QUANTIZE}, {"tp", 1, 0, O_TP}, {"dequant-rows", 1, 0, O_DEQ},
    {"quiet", 0, 0, 'q'},         {"help", 0, 0, 'h'}, {"version", 0, 0, O_VERSION},
    {0, 0, 0, 0}};

/* The first GPU target of the comma list targets, into buf (NULL: none);
 * *backend = their backends ("cpu", "cuda" for sm_*, "hip" for gfx*) as a
 * comma list, whose recipes the bundle takes. */
static const char *gpu_target(const char *targets, char buf[64], const char **backend) {
  static const char *const lists[8] = {"", "cpu", "cuda", "cpu,cuda", "hip", "cpu,hip", "cuda,hip", "cpu,cuda,hip"};
  const char *gpu = NULL;
  int seen = 0; /* bit 0 cpu, 1 cuda, 2 hip */
  for (const char *t = targets; *t;) {
    size_t n = strcspn(t, ",");
    seen |= n == 3 && !strncmp(t, "cpu", 3) ? 1 : !strncmp(t, "sm_", 3) ? 2 : 4;
    if ((n != 3 || strncmp(t, "cpu", 3)) && n < 64 && !gpu) {
      memcpy(buf, t, n);
      buf[n] = 0;
      gpu = buf;
    }
    t += n + (t[n] == ',');
  }
  *backend = lists[seen];
  return gpu;
}

int main(int argc, char **argv) {
  gc_gen_opts_t o;
  memset(&o, 0, sizeof o);
  o.targets = "cpu";
  const char *dims[GC_NDIMS] = {0};
  const char *model = NULL, *prefill = NULL, *batch = NULL, *quantize = NULL;
  const char *op = NULL, *dtype = NULL, *workload = NULL;
  char cache[1024];
  gc_cache_default(cache, sizeof cache);
  o.cache = cache;
  int c, tp = 0;
  int64_t iv, deq = -1;
  while ((c = gc_cli_getopt(argc, argv, "o:qh", longopts)) != -1) {
    switch (c) {
      case 'o': o.out_path = optarg; break;
      case O_OP: op = optarg; break;
      case O_MODEL: model = optarg; break;
      case O_PREFILL: prefill = optarg; break;
      case O_BATCH: batch = optarg; break;
      case O_QUANTIZE: quantize = optarg; break;
      case O_TP:
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > GC_LLAMA_TP_MAX) {
          fprintf(stderr, "gcore-gen: --tp: expected 1..64 ranks\n");
          return 2;
        }
        tp = (int)iv;
        break;
      case O_DEQ:
        if (gc_parse_i64(optarg, &deq) || deq < 0 || deq > INT32_MAX) {
          fprintf(stderr, "gcore-gen: --dequant-rows: expected a token count, 0 for never\n");
          return 2;
        }
        break;
      case O_M: case O_N: case O_K: case O_H: case O_G: case O_D:
        dims[c - O_M] = optarg;
        break;
      case O_DTYPE: dtype = optarg; break;
      case O_WORKLOAD: workload = optarg; break;
      case O_TARGET: o.targets = optarg; break;
      case O_DB: o.db_path = optarg; break;
      case O_FORCE: o.force = optarg; break;
      case O_TEMPLATES: o.templates_dir = optarg; break;
      case O_COMPILER: o.compiler = optarg; break;
      case O_CACHE: o.cache = optarg; break;
      case O_JOBS:
        if (gc_parse_i64(optarg, &iv) || iv < 1 || iv > 1024) {
          fprintf(stderr, "gcore-gen: --jobs: expected 1..1024\n");
          return 2;
        }
        o.jobs = (int)iv;
        break;
      case O_COV:
        if (gc_parse_i64(optarg, &iv) || (iv != 4 && iv != 5)) {
          fprintf(stderr, "gcore-gen: --code-object: expected 4 or 5\n");
          return 2;
        }
        o.code_object = (int)iv;
        break;
      case O_CTIMEOUT: {
        char *end;
        o.compile_timeout_s = strtod(optarg, &end);
        if (*end || !(o.compile_timeout_s > 0 && o.compile_timeout_s <= 86400)) {
          fprintf(stderr, "gcore-gen: --compile-timeout: expected seconds, 0 < S <= 86400\n");
          return 2;
        }
        break;
      }
      case 'q': o.quiet = 1; break;
      case 'h':
        fputs(usage, stdout);
        printf("ops:\n");
        gc_op_help(stdout);
        printf("targets: %s\n", gc_target_names());
        return gc_cli_exit("gcore-gen", 0);
      case O_VERSION: return gc_cli_version("gcore-gen");
      default: return gc_cli_bad_option("gcore-gen", c, argv);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "gcore-gen: unexpected argument %s\n", GC_QUOTED(argv[optind]));
    return 2;
  }
  gc_err_t e = {0};
  gc_problems_t probs = {0};
  gc_needs_t needs = {0};
  gc_llama_plan_t plan;
  char gpu[64];
  int rc;
  if (!o.out_path)
    rc = gc_err_set(&e, GC_EINVAL, "no output: give -o BUNDLE");
  else if ((workload != NULL) + (model != NULL) + (op || dtype || dims[0] || dims[1] || dims[2] || dims[3] || dims[4] || dims[5]) > 1)
    rc = gc_err_set(&e, GC_EINVAL, "give one of --workload, --model, or --op with sizes");
  else if ((prefill || batch || quantize || tp || deq >= 0) && !model)
    rc = gc_err_set(&e, GC_EINVAL, "--prefill, --batch, --quantize, --tp and --dequant-rows go with --model");
  else if (workload)
    rc = gc_problems_load(&probs, workload, &e);
  else if (model) {
    const char *backend; /* the recipes of the targets' backends */
    plan = (gc_llama_plan_t){.db = o.db_path, .target = gpu_target(o.targets, gpu, &backend), .force = deq};
    rc = gc_llama_workload(model, quantize, prefill, batch, tp ? tp : 1, backend, &probs, &needs, &plan, &e);
    o.meta = plan.meta; /* the prefill plan, for the forward */
  }
  else if (!op)
    rc = gc_err_set(&e, GC_EINVAL, "no problems: give --model PATH, --workload FILE or --op OP with sizes (see --help)");
  else
    rc = gc_problems_expand(&probs, op, dtype, dims, &e);
  if (!rc) rc = gc_gen_bundle(&o, &probs, &needs, &e);
  gc_problems_free(&probs);
  gc_needs_free(&needs);
  if (rc) {
    fprintf(stderr, "gcore-gen: %s\n", e.msg);
    return 1;
  }
  return gc_cli_exit("gcore-gen", 0);
}
