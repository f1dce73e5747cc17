/* compile_main.c — gcore-compile: one variant source to one code object.
 * gcore-tune and gcore-gen write it into build.ninja edges so that every
 * driver, subprocess or in-process, runs in parallel through ninja with
 * the same content-addressed cache. Drivers: nvrtc (in process), comgr (in
 * process), clang (a subprocess: clang -x hip ... --offload-device-only).
 * It writes OUT and OUT.res ("code_bytes regs spills shared_bytes
 * scratch_bytes agprs sgprs wave", -1 where unknown); for AMD code objects
 * the figures come from the code object's metadata, read through comgr.
 * `gcore-compile --describe OBJ` prints an AMD code object's kernels as
 * JSON (the tests compare drivers with it). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../base/cli.h"
#include "../gen/comgr.h"
#include "../gen/nvrtc.h"

static const char usage[] =
    "usage: gcore-compile [--driver nvrtc|comgr|clang] --target T [--kernel NAME] -o OUT SOURCE\n"
    "       gcore-compile --describe CODE_OBJECT\n"
    "Compiles one generated variant (the step gcore-tune and gcore-gen run through\n"
    "ninja for GPU targets); writes OUT and OUT.res (resource usage).\n"
    "  --driver D       nvrtc (default; NVIDIA), comgr or clang (AMD)\n"
    "  --target T       sm_80, sm_90, sm_90a ...; gfx90a, gfx942[:sramecc+][:xnack-], gfx1100\n"
    "  --code-object N  AMD code object version, 5 (default) or 4\n"
    "  --clang PATH     the clang for --driver clang (default: clang-19)\n"
    "  --kernel NAME    the kernel whose registers/spills/shared memory to report\n"
    "  -o, --output OUT the code object to write\n"
    "  --describe OBJ   print the kernels of an AMD code object (metadata) as JSON\n"
    "  --list-isas      print the AMD ISAs the installed comgr builds, one a line\n"
    "  -h, --help       this text\n"
    "  --version        this tool's version\n";

typedef struct args {
  const char *driver, *target, *kernel, *out, *clang, *describe, *source;
  int cov;
} args_t;

/* Run clang on src into out; its diagnostics go to our stderr. */
static int run_clang(const args_t *a, gc_err_t *e) {
  char arch[96], cov[40];
  snprintf(arch, sizeof arch, "--offload-arch=%s", a->target);
  snprintf(cov, sizeof cov, "-mcode-object-version=%d", a->cov);
  const char *clang = a->clang ? a->clang : "clang-19";
  char *argv[] = {(char *)clang, "-x", "hip", arch, "--offload-device-only",
                  "--no-gpu-bundle-output", "-nogpuinc", "-nogpulib", "-O3", "-std=c++17", cov,
                  "-o", (char *)a->out, (char *)a->source, NULL};
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return gc_err_set(e, GC_EIO, "cannot start %s", clang);
  if (pid == 0) {
    execvp(clang, argv);
    fprintf(stderr, "gcore-compile: cannot run %s (install clang-19: make deps)\n", clang);
    _exit(127);
  }
  int st;
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return gc_err_set(e, GC_ECOMPILE, "clang: compiling %s for %s failed", a->source, a->target);
  return GC_OK;
}

/* AMD resource figures of the kernel from the code object's metadata. */
static int amd_resources(const void *obj, size_t n, const char *kernel, gc_resources_t *r,
                         gc_err_t *e) {
  gc_amd_kernel_t k;
  if (gc_comgr_kernel_meta(obj, n, kernel, &k, e)) return e->code;
  r->regs = k.vgprs;
  r->agprs = k.agprs;
  r->sgprs = k.sgprs;
  r->shared_bytes = k.lds;
  r->scratch_bytes = k.scratch;
  r->spills = k.vgpr_spills >= 0 || k.sgpr_spills >= 0
                  ? (k.vgpr_spills > 0 ? k.vgpr_spills : 0) + (k.sgpr_spills > 0 ? k.sgpr_spills : 0)
                  : -1;
  r->wave = k.wave;
  return GC_OK;
}

/* Compile with the chosen driver into *obj (gc_malloc'd) and res. */
static int compile(const args_t *a, const char *src, void **obj, size_t *size,
                   gc_resources_t *res, char *log, size_t log_n, gc_err_t *e) {
  if (!strcmp(a->driver, "nvrtc"))
    return gc_nvrtc_compile(src, a->kernel, a->target, NULL, 0, obj, size, res, log, log_n, e);
  int rc;
  if (!strcmp(a->driver, "comgr"))
    rc = gc_comgr_compile(src, a->target, a->cov, obj, size, log, log_n, e);
  else if (!strcmp(a->driver, "clang"))
    rc = run_clang(a, e) || gc_read_file(a->out, GC_CODE_OBJECT_MAX, (char **)obj, size, e);
  else
    return gc_err_set(e, GC_EINVAL, "unknown driver '%s' (nvrtc, comgr or clang)", a->driver);
  if (rc) return e->code ? e->code : rc;
  res->code_bytes = (int64_t)*size;
  gc_err_t why = {0};
  if (amd_resources(*obj, *size, a->kernel, res, &why))
    fprintf(stderr, "gcore-compile: warning: no resource figures for %s: %s\n", a->out, why.msg);
  return GC_OK;
}

static int write_res(const char *out, const gc_resources_t *r, gc_err_t *e) {
  char line[256], path[1200];
  int len = snprintf(line, sizeof line, "%lld %lld %lld %lld %lld %lld %lld %lld\n",
                     (long long)r->code_bytes, (long long)r->regs, (long long)r->spills,
                     (long long)r->shared_bytes, (long long)r->scratch_bytes,
                     (long long)r->agprs, (long long)r->sgprs, (long long)r->wave);
  snprintf(path, sizeof path, "%s.res", out);
  return gc_write_file(path, line, (size_t)len, e);
}

/* --describe: every kernel of an AMD code object, as one JSON object. */
static int describe(const char *path, gc_err_t *e) {
  char *obj = NULL;
  size_t n;
  enum { MAXK = 16 };
  gc_amd_kernel_t *ks = NULL;
  int count = 0, rc = gc_read_file(path, GC_CODE_OBJECT_MAX, &obj, &n, e);
  if (!rc && !(ks = gc_calloc(MAXK, sizeof *ks, e))) rc = GC_ENOMEM;
  if (!rc) rc = gc_comgr_kernels(obj, n, ks, MAXK, &count, e);
  for (int i = 0; !rc && i < count; i++) {
    const gc_amd_kernel_t *k = &ks[i];
    printf("%s{\"name\": \"%s\", \"symbol\": \"%s\", \"vgpr_count\": %lld, \"agpr_count\": %lld, "
           "\"sgpr_count\": %lld, \"lds\": %lld, \"scratch\": %lld, \"vgpr_spill_count\": %lld, "
           "\"sgpr_spill_count\": %lld, \"wavefront_size\": %lld, \"kernarg_size\": %lld, "
           "\"args\": [", i ? ", " : "{\"kernels\": [", k->name, k->symbol, (long long)k->vgprs,
           (long long)k->agprs, (long long)k->sgprs, (long long)k->lds, (long long)k->scratch,
           (long long)k->vgpr_spills, (long long)k->sgpr_spills, (long long)k->wave,
           (long long)k->kernarg_size);
    for (int j = 0; j < k->nargs; j++)
      printf("%s{\"offset\": %lld, \"size\": %lld, \"value_kind\": \"%s\"}", j ? ", " : "",
             (long long)k->args[j].offset, (long long)k->args[j].size, k->args[j].kind);
    printf("]}");
  }
  if (!rc) printf("%s]}\n", count ? "" : "{\"kernels\": [");
  free(obj);
  free(ks);
  return rc;
}

/* --list-isas: comgr's ISAs without the amdgcn-amd-amdhsa-- prefix. */
static int list_isas(void) {
  gc_err_t e = {0};
  char isas[4096];
  if (!gc_comgr_available(NULL, 0, &e)) {
    fprintf(stderr, "gcore-compile: %s\n", e.msg);
    return 1;
  }
  gc_comgr_isa_list(isas, sizeof isas);
  for (char *p = isas; *p; p++)
    if (*p == ',') *p = '\n';
  printf("%s\n", isas);
  return 0;
}

static int parse_args(int argc, char **argv, args_t *a) {
  static const struct option opts[] = {
      {"driver", 1, 0, 'd'}, {"target", 1, 0, 't'}, {"kernel", 1, 0, 'k'},
      {"output", 1, 0, 'o'}, {"clang", 1, 0, 'c'}, {"code-object", 1, 0, 'v'},
      {"describe", 1, 0, 'D'}, {"list-isas", 0, 0, 'L'}, {"help", 0, 0, 'h'}, {"version", 0, 0, 'V'},
      {0, 0, 0, 0}};
  int c;
  while ((c = gc_cli_getopt(argc, argv, "o:h", opts)) != -1) {
    if (c == 'd') a->driver = optarg;
    else if (c == 't') a->target = optarg;
    else if (c == 'k') a->kernel = optarg;
    else if (c == 'o') a->out = optarg;
    else if (c == 'c') a->clang = optarg;
    else if (c == 'D') a->describe = optarg;
    else if (c == 'v') a->cov = atoi(optarg);
    else if (c == 'h') return fputs(usage, stdout), gc_cli_exit("gcore-compile", 0);
    else if (c == 'V') return gc_cli_version("gcore-compile");
    else if (c == 'L') return list_isas();
    else return gc_cli_bad_option("gcore-compile", c, argv);
  }
  if (a->kernel && !strcmp(a->kernel, "none")) a->kernel = NULL;
  a->source = optind + 1 == argc ? argv[optind] : NULL;
  return -1;
}

int main(int argc, char **argv) {
  args_t a = {.driver = "nvrtc", .cov = 5};
  int done = parse_args(argc, argv, &a);
  if (done >= 0) return done;
  gc_err_t e = {0};
  char *src = NULL, log[8192] = "";
  void *obj = NULL;
  size_t size = 0, n;
  gc_resources_t res = GC_RESOURCES_UNKNOWN;
  int rc;
  if (a.describe) rc = describe(a.describe, &e);
  else if (!a.target || !a.out || !a.source)
    rc = gc_err_set(&e, GC_EINVAL, "give --target, -o OUT and one SOURCE (see --help)");
  else if (a.cov != 4 && a.cov != 5)
    rc = gc_err_set(&e, GC_EINVAL, "--code-object: expected 4 or 5");
  else rc = gc_read_file(a.source, 64u << 20, &src, &n, &e);
  if (!rc && !a.describe) rc = compile(&a, src, &obj, &size, &res, log, sizeof log, &e);
  if (!rc && !a.describe && strcmp(a.driver, "clang")) rc = gc_write_file(a.out, obj, size, &e);
  if (!rc && !a.describe) rc = write_res(a.out, &res, &e);
  if (rc && !a.describe && a.out) unlink(a.out); /* never leave a half-made object */
  if (rc) {
    if (log[0]) fprintf(stderr, "%s\n", log);
    fprintf(stderr, "gcore-compile: %s\n", e.msg);
  }
  free(src);
  free(obj);
  return gc_cli_exit("gcore-compile", rc ? 1 : 0);
}
