/* gen_main.c — gcore-gen: the command line over gen/bundle_build.c. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "bundle_build.h"
#include "compile.h"

static const char usage[] =
    "usage: gcore-gen [options] -o BUNDLE (--workload FILE | --op OP --m LIST --n LIST --k LIST)\n"
    "Builds, offline and without a device, one bundle with code for every problem on\n"
    "every target: the tuned winner from --db, or the template's default where none.\n"
    "\n"
    "  -o, --output PATH   bundle to write (replaced atomically)\n"
    "  --target LIST       comma-separated targets (default cpu): cpu, cpu:x86-64-v3, cpu:x86-64-v4\n"
    "  --db PATH           tuning database with the winners (omit: defaults only)\n"
    "  --op OP, --m/--n/--k LIST, --dtype T, --workload FILE   problems, as gcore-tune\n"
    "  --force T[:P=V,..]  use template T (with these params) wherever it serves a problem\n"
    "  --templates DIR     read templates from DIR/<backend>/ instead of the built-in ones\n"
    "  --compiler NAME     compile driver (cpu: cc)\n"
    "  --cache DIR         compile cache (default $GCORE_CACHE or ~/.cache/gcore)\n"
    "  --jobs N            parallel compiles (default: ninja's)\n"
    "  -q, --quiet         no summary line\n"
    "  -h, --help          this text\n";

enum { O_OP = 256, O_M, O_N, O_K, O_DTYPE, O_WORKLOAD, O_TARGET, O_DB, O_FORCE,
       O_TEMPLATES, O_COMPILER, O_CACHE, O_JOBS };

static const struct option longopts[] = {
    {"output", 1, 0, 'o'},        {"op", 1, 0, O_OP},
    {"m", 1, 0, O_M},             {"n", 1, 0, O_N},
    {"k", 1, 0, O_K},             {"dtype", 1, 0, O_DTYPE},
    {"workload", 1, 0, O_WORKLOAD}, {"target", 1, 0, O_TARGET},
    {"db", 1, 0, O_DB},           {"force", 1, 0, O_FORCE},
    {"templates", 1, 0, O_TEMPLATES}, {"compiler", 1, 0, O_COMPILER},
    {"cache", 1, 0, O_CACHE},     {"jobs", 1, 0, O_JOBS},
    {"quiet", 0, 0, 'q'},         {"help", 0, 0, 'h'},
    {0, 0, 0, 0}};

int main(int argc, char **argv) {
  gc_gen_opts_t o;
  memset(&o, 0, sizeof o);
  o.targets = "cpu";
  const char *op = NULL, *m = NULL, *n = NULL, *k = NULL, *dtype = NULL, *workload = NULL;
  char cache[1024];
  gc_cache_default(cache, sizeof cache);
  o.cache = cache;
  int c;
  int64_t iv;
  while ((c = getopt_long(argc, argv, "o:qh", longopts, NULL)) != -1) {
    switch (c) {
      case 'o': o.out_path = optarg; break;
      case O_OP: op = optarg; break;
      case O_M: m = optarg; break;
      case O_N: n = optarg; break;
      case O_K: k = optarg; break;
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
      case 'q': o.quiet = 1; break;
      case 'h': fputs(usage, stdout); return 0;
      default: fputs(usage, stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "gcore-gen: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  gc_err_t e = {0};
  gc_problems_t probs = {0};
  int rc;
  if (!o.out_path)
    rc = gc_err_set(&e, GC_EINVAL, "no output: give -o BUNDLE");
  else if (workload && (op || m || n || k || dtype))
    rc = gc_err_set(&e, GC_EINVAL, "give either --workload or --op/--m/--n/--k/--dtype");
  else if (workload)
    rc = gc_problems_load(&probs, workload, &e);
  else if (!op)
    rc = gc_err_set(&e, GC_EINVAL, "no problems: give --workload FILE or --op OP with sizes (see --help)");
  else
    rc = gc_problems_expand(&probs, op, dtype, m, n, k, &e);
  if (!rc) rc = gc_gen_bundle(&o, &probs, &e);
  gc_problems_free(&probs);
  if (rc) {
    fprintf(stderr, "gcore-gen: %s\n", e.msg);
    return 1;
  }
  return 0;
}
