/* compile_main.c — gcore-compile: one variant source to one code object,
 * with an in-process compiler (NVRTC). gcore-tune and gcore-gen write it
 * into build.ninja edges so that every driver, subprocess or in-process,
 * runs in parallel through ninja with the same content-addressed cache. It
 * writes OUT and OUT.res ("code_bytes regs spills shared_bytes scratch_bytes",
 * -1 where unknown). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "nvrtc.h"

static const char usage[] =
    "usage: gcore-compile --target sm_XY[a] [--kernel NAME] -o OUT SOURCE\n"
    "Compiles one generated variant with NVRTC (the driver gcore-tune and gcore-gen\n"
    "run through ninja for NVIDIA targets); writes OUT and OUT.res (resource usage).\n"
    "  --target T     sm_80, sm_86, sm_89, sm_90, sm_90a ...\n"
    "  --kernel NAME  the kernel whose registers/spills/shared memory to report\n"
    "  -o OUT         the cubin to write\n"
    "  -h, --help     this text\n";

int main(int argc, char **argv) {
  static const struct option opts[] = {{"target", 1, 0, 't'}, {"kernel", 1, 0, 'k'},
                                       {"output", 1, 0, 'o'}, {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *target = NULL, *kernel = NULL, *out = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "t:k:o:h", opts, NULL)) != -1) {
    if (c == 't') target = optarg;
    else if (c == 'k') kernel = optarg;
    else if (c == 'o') out = optarg;
    else if (c == 'h') {
      fputs(usage, stdout);
      return 0;
    } else {
      fputs(usage, stderr);
      return 2;
    }
  }
  gc_err_t e = {0};
  char *src = NULL, log[8192] = "", res_path[1200];
  void *cubin = NULL;
  size_t size = 0, n;
  gc_db_resources_t res = {-1, -1, -1, -1, -1};
  int rc = (!target || !out || optind + 1 != argc)
               ? gc_err_set(&e, GC_EINVAL, "give --target, -o OUT and one SOURCE (see --help)")
               : gc_read_file(argv[optind], 64u << 20, &src, &n, &e);
  if (!rc)
    rc = gc_nvrtc_compile(src, kernel, target, NULL, 0, &cubin, &size, &res, log, sizeof log, &e);
  if (!rc) rc = gc_write_file(out, cubin, size, &e);
  if (!rc) {
    char line[160];
    int len = snprintf(line, sizeof line, "%lld %lld %lld %lld %lld\n", (long long)res.code_bytes,
                       (long long)res.regs, (long long)res.spills, (long long)res.shared_bytes,
                       (long long)res.scratch_bytes);
    snprintf(res_path, sizeof res_path, "%s.res", out);
    rc = gc_write_file(res_path, line, (size_t)len, &e);
  }
  if (rc) {
    if (log[0]) fprintf(stderr, "%s\n", log);
    fprintf(stderr, "gcore-compile: %s\n", e.msg);
  }
  free(src);
  free(cubin);
  return rc ? 1 : 0;
}
