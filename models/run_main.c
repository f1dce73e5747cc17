/* run_main.c — gcore-run. This stage runs one op from a bundle on the
 * device: random inputs, the dispatched kernel, verification against the
 * fp64 reference, and its time. (The Llama path joins here.) */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/check.h"
#include "../runtime/dispatch.h"

static const char usage[] =
    "usage: gcore-run --bundle BUNDLE --op OP --m M --n N [--k K] [--dtype T] [options]\n"
    "Runs the bundle's kernel for one problem on this machine's device with random\n"
    "inputs, checks every element against an fp64 reference, and prints its time.\n"
    "\n"
    "  -b, --bundle PATH  bundle built by gcore-gen\n"
    "  --op OP            gemm | gemm_swiglu | rmsnorm\n"
    "  --m/--n/--k N      problem size (one value each)\n"
    "  --dtype T          f32 | f16 | bf16 | A:B:C (default f32)\n"
    "  --backend NAME     device backend (default cpu)\n"
    "  --device N         device ordinal (default 0)\n"
    "  --seed N           input seed (default 1)\n"
    "  --dump DIR         write inputs and output as raw little-endian files + meta.txt\n"
    "  --min-time S       seconds of timed launches (default 0.2)\n"
    "  -h, --help         this text\n";

enum { O_OP = 256, O_M, O_N, O_K, O_DTYPE, O_BACKEND, O_DEVICE, O_SEED, O_DUMP, O_MINTIME };

static const struct option longopts[] = {
    {"bundle", 1, 0, 'b'}, {"op", 1, 0, O_OP},       {"m", 1, 0, O_M},
    {"n", 1, 0, O_N},      {"k", 1, 0, O_K},         {"dtype", 1, 0, O_DTYPE},
    {"backend", 1, 0, O_BACKEND}, {"device", 1, 0, O_DEVICE}, {"seed", 1, 0, O_SEED},
    {"dump", 1, 0, O_DUMP}, {"min-time", 1, 0, O_MINTIME}, {"help", 0, 0, 'h'},
    {0, 0, 0, 0}};

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
  gc_opbuf_t bufs[GC_OP_MAX_BUFS];
  int n;
  if (gc_mkdirs(dir, e) || gc_op_buffers(p, bufs, &n, e)) return e->code;
  gc_buf_t meta = {0};
  char key[GC_PROBLEM_KEY], path[1200];
  gc_problem_key(p, key);
  int rc = gc_buf_printf(&meta, e, "problem %s\n", key);
  for (int i = 0; !rc && i < n; i++) {
    size_t bytes = (size_t)bufs[i].count * gc_dtype_size(bufs[i].dtype);
    void *host = NULL;
    int64_t cnt;
    if (bufs[i].output) {
      if (!(host = gc_malloc(bytes, e))) return GC_ENOMEM;
      rc = gc_check_output(c, host, e);
    } else {
      host = gc_check_host_input(c, i, &cnt);
    }
    snprintf(path, sizeof path, "%s/%s.bin", dir, bufs[i].name);
    if (!rc) rc = gc_write_file(path, host, bytes, e);
    if (!rc) rc = gc_buf_printf(&meta, e, "%s %s %lld %s\n", bufs[i].name,
                                gc_dtype_name(bufs[i].dtype), (long long)bufs[i].count,
                                bufs[i].output ? "output" : "input");
    if (bufs[i].output) free(host);
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
  if (!rc) rc = gc_check_setup(dev, p, seed, &chk, e);
  if (!rc) rc = gc_check_verify(chk, launch, &ctx, &v, e);
  if (!rc && dump_dir) rc = dump(chk, p, dump_dir, e);
  if (!rc && !v.ok) rc = gc_err_set(e, GC_EVERIFY, "%s: kernel %s %s is wrong: %s", key,
                                    ctx.k->d.template_name, ctx.k->d.params, v.why);
  gc_time_opts_t topt = {2, 5, 2000, min_time};
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

int main(int argc, char **argv) {
  const char *bundle = NULL, *op = NULL, *m = NULL, *n = NULL, *k = NULL, *dtype = NULL,
             *backend = "cpu", *dump_dir = NULL;
  int64_t ordinal = 0, seed = 1;
  double min_time = 0.2;
  char *end;
  int c;
  while ((c = getopt_long(argc, argv, "b:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'b': bundle = optarg; break;
      case O_OP: op = optarg; break;
      case O_M: m = optarg; break;
      case O_N: n = optarg; break;
      case O_K: k = optarg; break;
      case O_DTYPE: dtype = optarg; break;
      case O_BACKEND: backend = optarg; break;
      case O_DUMP: dump_dir = optarg; break;
      case O_MINTIME:
        min_time = strtod(optarg, &end);
        if (*end || !(min_time > 0) || min_time > 3600) {
          fprintf(stderr, "gcore-run: --min-time: expected seconds > 0\n");
          return 2;
        }
        break;
      case O_DEVICE:
        if (gc_parse_i64(optarg, &ordinal) || ordinal < 0) {
          fprintf(stderr, "gcore-run: --device: expected an ordinal\n");
          return 2;
        }
        break;
      case O_SEED:
        if (gc_parse_i64(optarg, &seed)) {
          fprintf(stderr, "gcore-run: --seed: expected an integer\n");
          return 2;
        }
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
  else if (!bundle)
    rc = gc_err_set(&e, GC_EINVAL, "no bundle: give -b BUNDLE (built by gcore-gen)");
  else if (!op)
    rc = gc_err_set(&e, GC_EINVAL, "nothing to run: give --op OP and its sizes");
  else
    rc = gc_problems_expand(&probs, op, dtype, m, n, k, &e);
  if (!rc && probs.n != 1)
    rc = gc_err_set(&e, GC_EINVAL, "give one value for each of --m, --n, --k");
  if (!rc) rc = run_op(bundle, backend, (int)ordinal, &probs.v[0], (uint64_t)seed, dump_dir, min_time, &e);
  gc_problems_free(&probs);
  if (rc) {
    fprintf(stderr, "gcore-run: %s\n", e.msg);
    return 1;
  }
  return 0;
}
