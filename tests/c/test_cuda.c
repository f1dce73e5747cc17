/* test_cuda.c — the NVIDIA path: NVRTC compiles (cubins, ptxas resource
 * figures, compile errors, refused targets, allocation faults), the cubin
 * register reader and the cubin check under fuzzing, and, where a GPU is
 * present, the cuda
 * backend end to end (memory, loading, launches, events, graphs, bad
 * geometry, threads, a faulting kernel). Without NVRTC or a GPU those parts
 * print why and skip. GCORE_TEST_NO_FAULT=1 leaves out the faulting kernel
 * (for runs under compute-sanitizer, which reports it). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../gen/nvrtc.h"
#include "../../runtime/comm.h"
#include "../../runtime/dev_impl.h"
#include "../../core/ops.h"

#include "check.h"

static const char *const SRC =
    "#include <cuda_fp16.h>\n"
    "extern \"C\" __global__ void vadd(const __half *a, const __half *b, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = __half2float(a[i]) + __half2float(b[i]);\n"
    "}\n"
    "extern \"C\" __global__ void vacc(const __half *a, float *c, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] += __half2float(a[i]);\n"
    "}\n"
    "extern \"C\" __global__ void tile(float *out) {\n" /* 384 bytes of static smem */
    "  __shared__ float s[96];\n"
    "  s[threadIdx.x] = threadIdx.x;\n"
    "  __syncthreads();\n"
    "  out[threadIdx.x] = s[95 - threadIdx.x];\n"
    "}\n"
    "extern \"C\" __global__ void reverse(float *out, int n) {\n" /* dynamic smem */
    "  extern __shared__ float buf[];\n"
    "  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)i;\n"
    "  __syncthreads();\n"
    "  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];\n"
    "}\n"
    "extern \"C\" __global__ void fault(float *p) { p[threadIdx.x] = 1.0f; }\n";

static int is_cuda_elf(const void *p, size_t n) {
  const unsigned char *b = p;
  return n >= 64 && !memcmp(b, "\177ELF", 4) && b[4] == 2 && (b[18] | b[19] << 8) == 190;
}

/* ---- NVRTC ----------------------------------------------------------- */

static void test_compile_arch(const char *arch) {
  void *cubin = NULL;
  size_t n = 0;
  gc_resources_t res;
  char log[8192];
  gc_err_t e = {0};
  int rc = gc_nvrtc_compile(SRC, "vadd", arch, NULL, 0, &cubin, &n, &res, log, sizeof log, &e);
  if (rc) printf("  compile for %s: %s\n", arch, e.msg);
  CHECK(rc == GC_OK && cubin && is_cuda_elf(cubin, n));
  CHECK(res.code_bytes == (int64_t)n);
  CHECK(res.regs > 0 && res.regs < 256);
  CHECK(res.spills == 0 && res.shared_bytes == 0 && res.scratch_bytes == 0);
  CHECK(strstr(log, "ptxas") != NULL);
  /* again: no compile cache may swallow ptxas's report */
  void *again = NULL;
  size_t n2 = 0;
  gc_resources_t res2;
  CHECK(!gc_nvrtc_compile(SRC, "vadd", arch, NULL, 0, &again, &n2, &res2, log, sizeof log, &e) &&
        strstr(log, "ptxas") && res2.regs == res.regs && res2.shared_bytes == 0);
  free(again);
  int regs = -1;
  CHECK(gc_cubin_regcount(cubin, n, "vadd", &regs) == GC_OK && regs == res.regs);
  printf("  %s: %zu-byte cubin, vadd uses %lld registers (ptxas), %d (cubin)\n", arch, n,
         (long long)res.regs, regs);
  /* each kernel's own figures: tile has 384 bytes of static shared memory */
  free(cubin);
  rc = gc_nvrtc_compile(SRC, "tile", arch, NULL, 0, &cubin, &n, &res, NULL, 0, &e);
  CHECK(rc == GC_OK && res.shared_bytes == 384);
  CHECK(gc_cubin_regcount(cubin, n, "tile", &regs) == GC_OK && regs == res.regs);
  CHECK(gc_cubin_regcount(cubin, n, "no_such_kernel", &regs) == GC_ENOTFOUND);
  free(cubin);
}

static void test_compile_errors(void) {
  void *cubin = (void *)1;
  size_t n = 1;
  gc_resources_t res;
  char log[4096];
  gc_err_t e = {0};
  const char *bad = "extern \"C\" __global__ void k(float *x) { x[0] = 1.0f }\n";
  int rc = gc_nvrtc_compile(bad, "k", "sm_90", NULL, 0, &cubin, &n, &res, log, sizeof log, &e);
  CHECK(rc == GC_ECOMPILE && e.code == GC_ECOMPILE);
  CHECK(cubin == NULL && n == 0);
  CHECK(strstr(e.msg, "error") && strstr(e.msg, "expected a \";\""));
  CHECK(strstr(log, "expected a \";\"") != NULL);
  CHECK(!strchr(e.msg, '\n'));
  printf("  syntax error: %s\n", e.msg);

  rc = gc_nvrtc_compile(SRC, "vadd", "compute_90", NULL, 0, &cubin, &n, &res, NULL, 0, &e);
  CHECK(rc == GC_EINVAL && cubin == NULL && strstr(e.msg, "sm_90"));
  printf("  compute_90: %s\n", e.msg);
  static const char *const bad_arch[] = {"sm_9", "gfx942", "sm_90x", "sm_", "sm_1000", ""};
  for (size_t i = 0; i < GC_ARRAY_LEN(bad_arch); i++)
    CHECK(gc_nvrtc_compile(SRC, "vadd", bad_arch[i], NULL, 0, &cubin, &n, &res, NULL, 0, &e) ==
          GC_EINVAL);
  CHECK(gc_nvrtc_compile(SRC, "vadd", NULL, NULL, 0, &cubin, &n, &res, NULL, 0, &e) == GC_EINVAL);

  /* options reach the compiler */
  const char *need = "#ifndef SCALE\n#error SCALE is not defined\n#endif\n"
                     "extern \"C\" __global__ void k(float *x) { x[0] = SCALE; }\n";
  const char *opts[] = {"-DSCALE=2"};
  rc = gc_nvrtc_compile(need, "k", "sm_80", opts, 1, &cubin, &n, &res, NULL, 0, &e);
  CHECK(rc == GC_OK);
  free(cubin);
  rc = gc_nvrtc_compile(need, "k", "sm_80", NULL, 0, &cubin, &n, &res, NULL, 0, &e);
  CHECK(rc == GC_ECOMPILE && strstr(e.msg, "SCALE is not defined"));
  const char *badopt[] = {"--no-such-option"};
  rc = gc_nvrtc_compile(need, "k", "sm_80", badopt, 1, &cubin, &n, &res, NULL, 0, &e);
  CHECK(rc == GC_EINVAL && cubin == NULL);

  /* a log buffer shorter than the log is filled, not overrun */
  char tiny[8];
  memset(tiny, 'x', sizeof tiny);
  rc = gc_nvrtc_compile(bad, "k", "sm_90", NULL, 0, &cubin, &n, &res, tiny, sizeof tiny, &e);
  CHECK(rc == GC_ECOMPILE && strlen(tiny) == sizeof tiny - 1);
}

/* Each allocation in turn fails: the compile reports GC_ENOMEM (and ASan
 * sees no leak), until the faults run out and it succeeds. */
static void test_compile_faults(void) {
  int nomem = 0, ok = 0;
  for (long k = 0; k < 10 && !ok; k++) {
    void *cubin = NULL;
    size_t n = 0;
    gc_resources_t res;
    gc_err_t e = {0};
    gc_fault_alloc_after(k);
    int rc = gc_nvrtc_compile(SRC, "vadd", "sm_80", NULL, 0, &cubin, &n, &res, NULL, 0, &e);
    gc_fault_alloc_after(-1);
    if (rc == GC_ENOMEM) nomem++;
    else if (rc == GC_OK) ok = 1;
    else CHECK(0, "fault at allocation %ld gave %s: %s", k, gc_err_name(rc), e.msg);
    free(cubin);
  }
  CHECK(nomem > 0 && ok);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Truncations and bit flips, aimed at the ELF header, the section
 * headers and anywhere, must give an answer or a clean error. */
static void test_regcount_fuzz(void) {
  void *cubin = NULL;
  size_t n = 0;
  gc_err_t e = {0};
  int regs = -1, want = -1;
  if (gc_nvrtc_compile(SRC, "vadd", "sm_90", NULL, 0, &cubin, &n, NULL, NULL, 0, &e)) {
    CHECK(!"compile for fuzzing");
    return;
  }
  CHECK(gc_cubin_regcount(cubin, n, "vadd", &want) == GC_OK);
  CHECK(gc_cubin_regcount(NULL, 0, "vadd", &regs) == GC_ECORRUPT);
  CHECK(gc_cubin_regcount("garbage garbage garbage", 24, "vadd", &regs) == GC_ECORRUPT);
  CHECK(gc_cubin_regcount(cubin, 63, "vadd", &regs) == GC_ECORRUPT);
  const unsigned char *b = cubin;
  size_t shoff = 0, shnum = b[0x3c] | b[0x3d] << 8;
  for (int i = 7; i >= 0; i--) shoff = shoff << 8 | b[0x28 + i];
  /* cut inside the last section header */
  CHECK(gc_cubin_regcount(cubin, shoff + 64 * shnum - 1, "vadd", &regs) == GC_ECORRUPT);
  int bad = 0, ok = 0, errs = 0;
  for (int it = 0; it < 2000; it++) {
    size_t len = n;
    unsigned char *m = malloc(n);
    memcpy(m, cubin, n);
    if (it % 4 == 0) {
      len = next_rand() % n;
    } else {
      int flips = 1 + (int)(next_rand() % 8);
      for (int f = 0; f < flips; f++) {
        size_t pos;
        switch (next_rand() % 3) {
        case 0: pos = next_rand() % 64; break;
        case 1: pos = shoff < n ? shoff + next_rand() % (n - shoff) : next_rand() % n; break;
        default: pos = next_rand() % n;
        }
        m[pos] ^= (unsigned char)(1u << (next_rand() % 8));
      }
    }
    /* a copy of exactly len bytes, so ASan sees any read past it */
    unsigned char *t = malloc(len ? len : 1);
    memcpy(t, m, len);
    free(m);
    int r = -1;
    int rc = gc_cubin_regcount(t, len, "vadd", &r);
    if (rc == GC_OK) ok++, bad += r < 0 || r > 65535;
    else if (rc == GC_ECORRUPT || rc == GC_ENOTFOUND) errs++;
    else bad++;
    free(t);
  }
  CHECK(bad == 0);
  printf("  fuzz: 2000 mutated cubins, %d read, %d refused cleanly\n", ok, errs);
  free(cubin);
}

/* The check that guards cuModuleLoadData (which takes no size): a real
 * cubin passes; truncations and bit flips give a clean GC_ECORRUPT or
 * pass, never a read past the end (ASan). */
static void test_cubin_check(void) {
  void *cubin = NULL;
  size_t n = 0;
  gc_err_t e = {0};
  if (gc_nvrtc_compile(SRC, "vadd", "sm_80", NULL, 0, &cubin, &n, NULL, NULL, 0, &e)) {
    CHECK(!"compile for the cubin check");
    return;
  }
  CHECK(gc_cuda_check_cubin(cubin, n, &e) == GC_OK);
  CHECK(gc_cuda_check_cubin(cubin, 63, &e) == GC_ECORRUPT && strstr(e.msg, "not a cubin"));
  const unsigned char *b = cubin;
  size_t shoff = 0;
  for (int i = 7; i >= 0; i--) shoff = shoff << 8 | b[0x28 + i];
  CHECK(shoff < n && gc_cuda_check_cubin(cubin, shoff + 1, &e) == GC_ECORRUPT &&
        !strcmp(e.msg, "cubin is truncated or corrupt (headers past its end)"));
  int bad = 0, ok = 0, errs = 0;
  for (int it = 0; it < 2000; it++) {
    size_t len = it % 4 == 0 ? next_rand() % n : n;
    unsigned char *t = malloc(len ? len : 1);
    memcpy(t, cubin, len);
    if (it % 4)
      for (int f = 1 + (int)(next_rand() % 8); f > 0; f--) {
        size_t pos = next_rand() % 2 ? next_rand() % 64 : shoff + next_rand() % (n - shoff);
        t[pos] ^= (unsigned char)(1u << (next_rand() % 8));
      }
    int rc = gc_cuda_check_cubin(t, len, &e);
    if (rc == GC_OK) ok++;
    else if (rc == GC_ECORRUPT) errs++;
    else bad++;
    free(t);
  }
  CHECK(bad == 0 && errs > 0);
  printf("  cubin check: 2000 mutated cubins, %d pass, %d refused cleanly\n", ok, errs);
  free(cubin);
}

static int test_nvrtc(void) {
  char ver[64];
  gc_err_t e = {0};
  if (!gc_nvrtc_available(ver, sizeof ver, &e)) {
    printf("skip: NVRTC not found (%s)\n", e.msg);
    return 0;
  }
  printf("%s\n", ver);
  CHECK(!strncmp(ver, "nvrtc ", 6));
  test_compile_arch("sm_80");
  test_compile_arch("sm_90");
  test_compile_errors();
  test_compile_faults();
  test_regcount_fuzz();
  test_cubin_check();
  return 1;
}

/* ---- the device ------------------------------------------------------ */

enum { N = 100003 };

typedef struct gpu {
  const gc_dev_ops_t *ops;
  gc_dev_t *d;
  gc_dptr_t a, b, c;
  gc_module_t *mod;
  gc_kernel_t *vadd, *vacc, *reverse, *fault;
  float *want, *got;
} gpu_t;

static int launch1d(gpu_t *g, gc_kernel_t *k, int64_t n, int64_t bs, size_t shmem, void **args,
                    gc_err_t *e) {
  int64_t grid[3] = {(n + bs - 1) / bs, 1, 1}, block[3] = {bs, 1, 1};
  return g->ops->launch(g->d, k, grid, block, shmem, args, e);
}

static int same(const float *x, const float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (x[i] != y[i]) return 0;
  return 1;
}

static void test_info(gpu_t *g) {
  const gc_dev_info_t *in = &g->d->info;
  printf("  %s: %s %s, %lld SMs, %lld MiB, %s\n", in->backend, in->name, in->arch,
         (long long)in->compute_units, (long long)(in->mem_bytes >> 20), in->driver);
  CHECK(!strcmp(in->backend, "cuda") && !strncmp(in->arch, "sm_", 3));
  CHECK(!strcmp(in->target, in->arch));
  CHECK(in->compute_units > 0 && in->mem_bytes > 0 && in->name[0] && !in->host_memory);
  CHECK(in->l2_bytes > 0); /* the L2 window's default (models/llama.c) is a share of it */
  CHECK(!strncmp(in->driver, "cuda driver ", 12));
  CHECK(g->ops->runs_target(g->d, in->arch));
  int v = atoi(in->arch + 3), major = v / 10, minor = v % 10;
  char t[32];
  snprintf(t, sizeof t, "sm_%d0", major);
  CHECK(g->ops->runs_target(g->d, t));
  snprintf(t, sizeof t, "sm_%da", v);
  CHECK(g->ops->runs_target(g->d, t));
  snprintf(t, sizeof t, "sm_%d%d", major, minor + 1);
  CHECK(!g->ops->runs_target(g->d, t));
  snprintf(t, sizeof t, "sm_%d%d", major + 1, 0);
  CHECK(!g->ops->runs_target(g->d, t));
  snprintf(t, sizeof t, "sm_%d%d", major - 1, 0);
  CHECK(!g->ops->runs_target(g->d, t));
  if (minor > 0) {
    snprintf(t, sizeof t, "sm_%d0a", major);
    CHECK(!g->ops->runs_target(g->d, t));
  }
  CHECK(!g->ops->runs_target(g->d, "compute_90") && !g->ops->runs_target(g->d, "gfx942") &&
        !g->ops->runs_target(g->d, "cpu:x86-64-v3") && !g->ops->runs_target(g->d, "sm_"));
  CHECK(g->ops->host_ptr(g->d, 0) == NULL);
}

static void test_memory(gpu_t *g) {
  gc_err_t e = {0};
  uint16_t *ha = malloc(N * 2), *hb = malloc(N * 2), *back = malloc(N * 2);
  for (int i = 0; i < N; i++) {
    ha[i] = gc_f32_to_f16((float)(i % 1000) * 0.5f);
    hb[i] = gc_f32_to_f16((float)(i % 77) - 30.0f);
    g->want[i] = (float)(i % 1000) * 0.5f + (float)(i % 77) - 30.0f;
  }
  CHECK(!g->ops->alloc(g->d, N * 2, &g->a, &e) && !g->ops->alloc(g->d, N * 2, &g->b, &e) &&
        !g->ops->alloc(g->d, N * 4, &g->c, &e));
  CHECK(g->a % 256 == 0 && g->b % 256 == 0 && g->c % 256 == 0);
  CHECK(!g->ops->upload(g->d, g->a, ha, N * 2, &e) && !g->ops->upload(g->d, g->b, hb, N * 2, &e));
  CHECK(!g->ops->download(g->d, back, g->a, N * 2, &e) && !memcmp(back, ha, N * 2));
  CHECK(!g->ops->memset(g->d, g->c, 0xff, N * 4, &e));
  CHECK(!g->ops->download(g->d, g->got, g->c, N * 4, &e));
  CHECK(((uint32_t *)g->got)[N - 1] == 0xffffffffu && ((uint32_t *)g->got)[0] == 0xffffffffu);
  gc_dptr_t huge = 0;
  int rc = g->ops->alloc(g->d, (size_t)1 << 50, &huge, &e);
  CHECK(rc == GC_ENOMEM && strstr(e.msg, "out of GPU memory allocating"));
  printf("  %s\n", e.msg);
  gc_dptr_t z = 0;
  CHECK(!g->ops->alloc(g->d, 0, &z, &e) && z);
  g->ops->free(g->d, z);
  free(ha), free(hb), free(back);
}

static void test_load(gpu_t *g, const void *cubin, size_t n) {
  gc_err_t e = {0};
  gc_module_t *m = NULL;
  /* a cubin of another major arch does not load here */
  const char *other = g->d->info.arch[3] == '8' ? "sm_90" : "sm_80";
  void *foreign = NULL;
  size_t fn = 0;
  CHECK(!g->ops->runs_target(g->d, other));
  CHECK(!gc_nvrtc_compile(SRC, "vadd", other, NULL, 0, &foreign, &fn, NULL, NULL, 0, &e));
  CHECK(g->ops->module_load(g->d, foreign, fn, &m, &e) == GC_EDEVICE && !m &&
        strstr(e.msg, "CUDA_ERROR_NO_BINARY_FOR_GPU"));
  printf("  %s cubin: %s\n", other, e.msg);
  free(foreign);
  static const char text[80] = "not a cubin at all, just text";
  CHECK(g->ops->module_load(g->d, text, sizeof text, &m, &e) == GC_ECORRUPT && !m);
  printf("  text: %s\n", e.msg);
  CHECK(g->ops->module_load(g->d, cubin, 200, &m, &e) == GC_ECORRUPT && !m);
  printf("  truncated: %s\n", e.msg);
  int rc = g->ops->module_load(g->d, cubin, n, &g->mod, &e);
  if (rc) printf("  load: %s\n", e.msg);
  CHECK(rc == GC_OK);
  if (rc) return;
  CHECK(!g->ops->kernel(g->d, g->mod, "vadd", &g->vadd, &e));
  CHECK(!g->ops->kernel(g->d, g->mod, "vacc", &g->vacc, &e));
  CHECK(!g->ops->kernel(g->d, g->mod, "reverse", &g->reverse, &e));
  CHECK(!g->ops->kernel(g->d, g->mod, "fault", &g->fault, &e));
  gc_kernel_t *k = NULL;
  CHECK(g->ops->kernel(g->d, g->mod, "nope", &k, &e) == GC_ENOTFOUND && !k);
}

static void test_launch(gpu_t *g) {
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e) && !g->ops->sync(g->d, &e));
  CHECK(!g->ops->download(g->d, g->got, g->c, N * 4, &e) && same(g->got, g->want, N));

  gc_event_t *t0 = NULL, *t1 = NULL;
  CHECK(!g->ops->event_create(g->d, &t0, &e) && !g->ops->event_create(g->d, &t1, &e));
  CHECK(!g->ops->event_record(g->d, t0, &e));
  for (int i = 0; i < 20; i++) launch1d(g, g->vadd, N, 256, 0, args, &e);
  CHECK(!g->ops->event_record(g->d, t1, &e));
  double ms = -1;
  CHECK(!g->ops->event_elapsed(g->d, t0, t1, &ms, &e) && ms > 0 && ms < 1000);
  printf("  20 launches of vadd over %d elements: %.3f ms\n", N, ms);
  g->ops->event_destroy(g->d, t0);
  g->ops->event_destroy(g->d, t1);

  /* more than 48 KiB of dynamic shared memory needs the function's
   * attribute raised first */
  int m = 20000; /* 80000 bytes */
  void *rargs[] = {&g->c, &m};
  int64_t one[3] = {1, 1, 1}, blk[3] = {256, 1, 1};
  int rc = g->ops->launch(g->d, g->reverse, one, blk, (size_t)m * 4, rargs, &e);
  if (rc) printf("  big shared memory: %s\n", e.msg);
  CHECK(rc == GC_OK && !g->ops->download(g->d, g->got, g->c, (size_t)m * 4, &e));
  int rev_ok = 1;
  for (int i = 0; i < m; i++) rev_ok &= g->got[i] == (float)(m - 1 - i);
  CHECK(rev_ok);
  rc = g->ops->launch(g->d, g->reverse, one, blk, (size_t)16 << 20, rargs, &e);
  CHECK(rc == GC_ELAUNCH && strstr(e.msg, "shared memory"));
  printf("  16 MiB shared memory: %s\n", e.msg);
}

static void test_graph(gpu_t *g) {
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->c, &n};
  gc_graph_t *exec = NULL;
  CHECK(gc_dev_graph_end(g->d, &exec, &e) == GC_EINVAL && !exec);
  CHECK(!g->ops->memset(g->d, g->c, 0, N * 4, &e));
  CHECK(!gc_dev_graph_begin(g->d, &e));
  CHECK(gc_dev_graph_begin(g->d, &e) == GC_EINVAL &&
        !strcmp(e.msg, "a CUDA graph capture is already open"));
  for (int i = 0; i < 3; i++) CHECK(!launch1d(g, g->vacc, N, 128, 0, args, &e));
  CHECK(g->ops->download(g->d, g->got, g->c, 4, &e) == GC_EINVAL &&
        !strcmp(e.msg, "download is not allowed while a CUDA graph is being captured"));
  CHECK(g->ops->sync(g->d, &e) == GC_EINVAL);
  int rc = gc_dev_graph_end(g->d, &exec, &e);
  if (rc) printf("  graph end: %s\n", e.msg);
  CHECK(rc == GC_OK && exec);
  if (rc) return;
  /* captured, not run */
  CHECK(!g->ops->download(g->d, g->got, g->c, N * 4, &e));
  int zero = 1;
  for (int i = 0; i < N; i++) zero &= g->got[i] == 0.0f;
  CHECK(zero);
  for (int rep = 1; rep <= 2; rep++) {
    CHECK(!gc_dev_graph_launch(g->d, exec, &e));
    CHECK(!g->ops->download(g->d, g->got, g->c, N * 4, &e));
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= g->got[i] == (float)(3 * rep) * ((float)(i % 1000) * 0.5f);
    CHECK(ok);
  }
  gc_dev_graph_destroy(g->d, exec);
}

static void test_bad_geometry(gpu_t *g) {
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  int64_t grid[3] = {1, 1, 1}, block[3] = {256, 1, 1};
  grid[0] = 0;
  CHECK(g->ops->launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH);
  printf("  grid 0: %s\n", e.msg);
  grid[0] = (int64_t)1 << 33;
  CHECK(g->ops->launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH);
  grid[0] = 1;
  block[1] = -1;
  CHECK(g->ops->launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH);
  block[1] = 1;
  block[0] = 2048; /* fits uint32, over the driver's 1024 threads a block */
  CHECK(g->ops->launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH &&
        strstr(e.msg, "cuLaunchKernel: CUDA_ERROR_"));
  printf("  block 2048: %s\n", e.msg);
  /* none of that hurt the device */
  CHECK(!g->ops->memset(g->d, g->c, 0, N * 4, &e));
  CHECK(!launch1d(g, g->vadd, N, 512, 0, args, &e) && !g->ops->sync(g->d, &e));
  CHECK(!g->ops->download(g->d, g->got, g->c, N * 4, &e) && same(g->got, g->want, N));
}

/* The context is per thread: a thread that did not open the device can
 * still use it. */
static void *other_thread(void *arg) {
  gpu_t *g = arg;
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  float *got = malloc(N * 4);
  int ok = !g->ops->memset(g->d, g->c, 0, N * 4, &e) &&
           !launch1d(g, g->vadd, N, 256, 0, args, &e) &&
           !g->ops->download(g->d, got, g->c, N * 4, &e) && same(got, g->want, N);
  if (!ok) printf("  other thread: %s\n", e.msg);
  free(got);
  return ok ? arg : NULL;
}

static void test_thread(gpu_t *g) {
  pthread_t t;
  void *r = NULL;
  CHECK(!pthread_create(&t, NULL, other_thread, g) && !pthread_join(t, &r) && r == g);
}

/* Last, since a faulting kernel loses the context for good: the fault
 * surfaces as a launch error naming the CUDA error, and closing after it
 * is clean. */
static void test_fault(gpu_t *g) {
  gc_err_t e = {0};
  gc_dptr_t null = 0;
  void *args[] = {&null};
  int rc = launch1d(g, g->fault, 32, 32, 0, args, &e);
  if (!rc) rc = g->ops->sync(g->d, &e);
  CHECK(rc == GC_ELAUNCH && strstr(e.msg, "CUDA_ERROR_ILLEGAL_ADDRESS"));
  printf("  fault: %s\n", e.msg);
}

/* The NCCL transport (runtime/comm.h) with one rank on GPU 0, where the
 * library is installed: the sum over one rank is the identity, a gather
 * copies, a barrier drains the stream, and the group frees cleanly. */
static void test_nccl_one_rank(void) {
  gc_dev_t *d = NULL;
  gc_err_t e = {0};
  if (gc_dev_open("cuda", 0, &d, &e)) {
    printf("  nccl: no device: %s\n", e.msg);
    return;
  }
  gc_comm_t *c = NULL;
  int ord = 0, rc = gc_comm_nccl(&d, &ord, 1, &c, &e);
  if (rc == GC_EDEVICE && strstr(e.msg, "cannot load it")) {
    printf("  nccl: %s\n", e.msg);
    gc_dev_close(d);
    return;
  }
  CHECK(rc == GC_OK, "gc_comm_nccl: %s", e.msg);
  float h[N], back[N];
  for (int i = 0; i < N; i++) h[i] = (float)i * 0.5f - 7;
  gc_dptr_t a = 0, b = 0;
  rc = rc ? rc : gc_dev_alloc(d, sizeof h, &a, &e);
  rc = rc ? rc : gc_dev_alloc(d, sizeof h, &b, &e);
  rc = rc ? rc : gc_dev_upload(d, a, h, sizeof h, &e);
  rc = rc ? rc : gc_comm_all_reduce(c, a, N, GC_DT_F32, &e);
  rc = rc ? rc : gc_comm_all_gather(c, a, b, N, GC_DT_F32, &e);
  rc = rc ? rc : gc_comm_barrier(c, &e);
  rc = rc ? rc : gc_dev_download(d, back, b, sizeof back, &e);
  CHECK(rc == GC_OK, "nccl one rank: %s", e.msg);
  CHECK(rc || !memcmp(h, back, sizeof h), "one rank's all-reduce and all-gather changed the data");
  if (!rc) printf("  nccl: one rank on %s: all-reduce, all-gather, barrier\n", gc_dev_info(d)->name);
  gc_comm_free(c);
  gc_dev_free(d, a), gc_dev_free(d, b);
  gc_dev_close(d);
}

static void test_device(int have_nvrtc) {
  gpu_t g = {.ops = &gc_cuda_ops};
  gc_err_t e = {0};
  CHECK(!strcmp(gc_cuda_ops.name, "cuda"));
  int rc = gc_cuda_ops.open(0, &g.d, &e);
  if (rc) {
    CHECK(rc == GC_EDEVICE && e.code == GC_EDEVICE && e.msg[0] && !g.d);
    printf("skip: device tests: %s\n", e.msg);
    return;
  }
  gc_dev_t *other = NULL;
  CHECK(gc_cuda_ops.open(99, &other, &e) == GC_EDEVICE && !other &&
        strstr(e.msg, "no NVIDIA GPU with ordinal 99 (found "));
  printf("  %s\n", e.msg);
  test_info(&g);
  if (!have_nvrtc) {
    printf("skip: device launches need NVRTC\n");
    gc_cuda_ops.close(g.d);
    return;
  }
  void *cubin = NULL;
  size_t n = 0;
  rc = gc_nvrtc_compile(SRC, "vadd", g.d->info.target, NULL, 0, &cubin, &n, NULL, NULL, 0, &e);
  if (rc) printf("  compile for %s: %s\n", g.d->info.target, e.msg);
  CHECK(rc == GC_OK);
  g.want = malloc(N * 4);
  g.got = malloc(N * 4);
  if (!rc) {
    test_memory(&g);
    test_load(&g, cubin, n);
    if (g.mod && g.vadd && g.vacc && g.reverse && g.fault) {
      test_launch(&g);
      test_graph(&g);
      test_bad_geometry(&g);
      test_thread(&g);
      if (!getenv("GCORE_TEST_NO_FAULT")) test_fault(&g);
    }
  }
  free(g.vadd), free(g.vacc), free(g.reverse), free(g.fault); /* plain handles */
  if (g.mod) gc_cuda_ops.module_unload(g.d, g.mod);
  g.ops->free(g.d, g.a), g.ops->free(g.d, g.b), g.ops->free(g.d, g.c);
  gc_cuda_ops.close(g.d);
  free(cubin), free(g.want), free(g.got);
}

int main(void) {
  int have_nvrtc = test_nvrtc();
  test_nccl_one_rank(); /* before test_device, whose last case loses the context */
  test_device(have_nvrtc);
  return check_report();
}
