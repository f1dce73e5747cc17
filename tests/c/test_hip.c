/* test_hip.c — the AMD device path: target-id matching (which code object
 * runs on which gfx arch and features), the code-object check under
 * fuzzing, the open errors without a GPU, and, where an AMD GPU is
 * present, the hip backend end to end (memory, loading, launches with
 * dynamic LDS, events, graphs through gc_dev_graph_*, bad geometry,
 * threads). Kernels are compiled with clang (GCORE_HIP_CLANG, else
 * clang-19, /opt/rocm/llvm/bin/clang); without one, or without a GPU,
 * those parts print why and skip. No faulting kernel: a GPU page fault
 * makes the ROCm runtime abort the process. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/dev_impl.h"
#include "../../core/ops.h"

#include "check.h"

/* Header-free, like the templates: clang builtins only. */
static const char *const SRC =
    "#define __global__ __attribute__((global))\n"
    "#define __shared__ __attribute__((shared))\n"
    "#define TID __builtin_amdgcn_workitem_id_x()\n"
    "#define BS __builtin_amdgcn_workgroup_size_x()\n"
    "#define BAR() (__builtin_amdgcn_fence(__ATOMIC_RELEASE, \"workgroup\"), "
    "__builtin_amdgcn_s_barrier(), __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, \"workgroup\"))\n"
    "extern \"C\" __global__ void vadd(const _Float16 *a, const _Float16 *b, float *c, int n) {\n"
    "  int i = __builtin_amdgcn_workgroup_id_x() * BS + TID;\n"
    "  if (i < n) c[i] = (float)a[i] + (float)b[i];\n"
    "}\n"
    "extern \"C\" __global__ void vacc(const _Float16 *a, float *c, int n) {\n"
    "  int i = __builtin_amdgcn_workgroup_id_x() * BS + TID;\n"
    "  if (i < n) c[i] += (float)a[i];\n"
    "}\n"
    "extern \"C\" __global__ void reverse(float *out, int n) {\n" /* dynamic LDS */
    "  extern __shared__ float buf[];\n"
    "  for (int i = TID; i < n; i += BS) buf[i] = (float)i;\n"
    "  BAR();\n"
    "  for (int i = TID; i < n; i += BS) out[i] = buf[n - 1 - i];\n"
    "}\n";

/* ---- clang ----------------------------------------------------------- */

static const char *find_clang(void) {
  static const char *const names[] = {"clang-19", "/opt/rocm/llvm/bin/clang", "clang"};
  const char *env = getenv("GCORE_HIP_CLANG");
  if (env && *env) return env;
  for (size_t i = 0; i < GC_ARRAY_LEN(names); i++) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "%s --version >/dev/null 2>&1", names[i]);
    if (system(cmd) == 0) return names[i];
  }
  return NULL;
}

/* SRC compiled for target by clang into *out (malloc'd); 0 on success. */
static int compile(const char *clang, const char *target, void **out, size_t *n) {
  char dir[] = "/tmp/gc_test_hip_XXXXXX", src[128], obj[128], cmd[1024];
  *out = NULL, *n = 0;
  if (!mkdtemp(dir)) return -1;
  snprintf(src, sizeof src, "%s/k.hip", dir);
  snprintf(obj, sizeof obj, "%s/k.o", dir);
  FILE *f = fopen(src, "w");
  if (!f) return -1;
  fputs(SRC, f);
  fclose(f);
  snprintf(cmd, sizeof cmd,
           "%s -x hip --offload-arch=%s --offload-device-only --no-gpu-bundle-output -nogpuinc "
           "-nogpulib -O3 -o %s %s",
           clang, target, obj, src);
  int rc = system(cmd);
  if (rc == 0 && (f = fopen(obj, "rb"))) {
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc(len > 0 ? (size_t)len : 1);
    if (len > 0 && fread(*out, 1, (size_t)len, f) == (size_t)len) *n = (size_t)len;
    fclose(f);
  }
  remove(obj), remove(src), rmdir(dir);
  if (!*n) free(*out), *out = NULL;
  return *n ? 0 : -1;
}

/* ---- without a device ------------------------------------------------ */

static void test_target_match(void) {
  const char *mi300 = "gfx942:sramecc+:xnack-";
  static const struct { const char *dev, *target; int runs; } cases[] = {
      {"gfx942:sramecc+:xnack-", "gfx942", 1},
      {"gfx942:sramecc+:xnack-", "gfx942:xnack-", 1},
      {"gfx942:sramecc+:xnack-", "gfx942:sramecc+", 1},
      {"gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", 1},
      {"gfx942:sramecc+:xnack-", "gfx942:xnack-:sramecc+", 1},
      {"gfx942:sramecc+:xnack-", "gfx942:xnack+", 0},
      {"gfx942:sramecc+:xnack-", "gfx942:sramecc-", 0},
      {"gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack+", 0},
      {"gfx942:sramecc+:xnack-", "gfx90a", 0},
      {"gfx942:sramecc+:xnack-", "gfx940", 0},
      {"gfx942:sramecc+:xnack-", "gfx94", 0},
      {"gfx942:sramecc+:xnack-", "gfx9420", 0},
      {"gfx942:sramecc+:xnack-", "gfx942:", 0},
      {"gfx942:sramecc+:xnack-", "gfx942:xnack", 0},
      {"gfx942:sramecc+:xnack-", "gfx942:xnack+:", 0},
      {"gfx942:sramecc+:xnack-", "gfx942:foo+", 0},
      {"gfx942:sramecc+:xnack-", "sm_90", 0},
      {"gfx942:sramecc+:xnack-", "cpu", 0},
      {"gfx942:sramecc+:xnack-", "", 0},
      {"gfx942:sramecc+:xnack-", "gfx", 0},
      {"gfx90a:sramecc-:xnack+", "gfx90a:xnack+", 1},
      {"gfx90a:sramecc-:xnack+", "gfx90a:xnack-", 0},
      {"gfx90a:sramecc-:xnack+", "gfx90a", 1},
      {"gfx1100", "gfx1100", 1},
      {"gfx1100", "gfx1100:xnack-", 0}, /* a feature the device does not have */
      {"gfx1100", "gfx110", 0},
      {"gfx1100", "gfx1101", 0},
  };
  int bad = 0;
  for (size_t i = 0; i < GC_ARRAY_LEN(cases); i++)
    if (gc_hip_target_runs(cases[i].dev, cases[i].target) != cases[i].runs) {
      printf("FAIL: %s on %s: expected %d\n", cases[i].target, cases[i].dev, cases[i].runs);
      bad++;
    }
  CHECK(bad == 0);
  CHECK(!gc_hip_target_runs(NULL, "gfx942") && !gc_hip_target_runs(mi300, NULL));
  printf("  target ids: %zu cases\n", GC_ARRAY_LEN(cases));
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* The check that guards hipModuleLoadData (which takes no size): real
 * code objects pass; text, truncations, another machine's ELF and bit
 * flips in the headers give a clean GC_ECORRUPT or pass, never a read
 * past the end (ASan). */
static void test_code_object_check(const void *co, size_t n) {
  gc_err_t e = {0};
  CHECK(gc_hip_check_code_object(co, n, &e) == GC_OK);
  static const char text[80] = "not a code object, just text";
  CHECK(gc_hip_check_code_object(text, sizeof text, &e) == GC_ECORRUPT);
  printf("  text: %s\n", e.msg);
  CHECK(gc_hip_check_code_object(NULL, 0, &e) == GC_ECORRUPT);
  CHECK(gc_hip_check_code_object(co, 63, &e) == GC_ECORRUPT);
  unsigned char *m = malloc(n);
  memcpy(m, co, n);
  m[18] = 190, m[19] = 0; /* EM_CUDA */
  CHECK(gc_hip_check_code_object(m, n, &e) == GC_ECORRUPT && strstr(e.msg, "not AMDGPU"));
  printf("  cubin-like: %s\n", e.msg);
  free(m);
  const unsigned char *b = co;
  size_t shoff = 0;
  for (int i = 7; i >= 0; i--) shoff = shoff << 8 | b[0x28 + i];
  CHECK(shoff < n && gc_hip_check_code_object(co, shoff + 1, &e) == GC_ECORRUPT);
  printf("  truncated: %s\n", e.msg);
  int bad = 0, ok = 0, errs = 0;
  for (int it = 0; it < 2000; it++) {
    size_t len = it % 4 == 0 ? next_rand() % n : n;
    unsigned char *t = malloc(len ? len : 1);
    memcpy(t, co, len);
    if (it % 4) {
      int flips = 1 + (int)(next_rand() % 8);
      for (int f = 0; f < flips; f++) {
        size_t pos = next_rand() % 2 ? next_rand() % 64
                                     : (shoff < n ? shoff + next_rand() % (n - shoff) : 0);
        t[pos] ^= (unsigned char)(1u << (next_rand() % 8));
      }
    }
    int rc = gc_hip_check_code_object(t, len, &e);
    if (rc == GC_OK) ok++;
    else if (rc == GC_ECORRUPT) errs++;
    else bad++;
    free(t);
  }
  CHECK(bad == 0 && errs > 0);
  printf("  fuzz: 2000 mutated code objects, %d pass the check, %d refused cleanly\n", ok, errs);
}

/* ---- the device ------------------------------------------------------ */

enum { N = 100003 };

typedef struct gpu {
  gc_dev_t *d;
  gc_dptr_t a, b, c;
  gc_module_t *mod;
  gc_kernel_t *vadd, *vacc, *reverse;
  float *want, *got;
} gpu_t;

static int launch1d(gpu_t *g, gc_kernel_t *k, int64_t n, int64_t bs, size_t shmem, void **args,
                    gc_err_t *e) {
  int64_t grid[3] = {(n + bs - 1) / bs, 1, 1}, block[3] = {bs, 1, 1};
  return gc_dev_launch(g->d, k, grid, block, shmem, args, e);
}

static int same(const float *x, const float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (x[i] != y[i]) return 0;
  return 1;
}

static void test_info(gpu_t *g) {
  const gc_dev_info_t *in = gc_dev_info(g->d);
  printf("  %s: %s %s, %lld CUs, %lld MiB, %s\n", in->backend, in->name, in->arch,
         (long long)in->compute_units, (long long)(in->mem_bytes >> 20), in->driver);
  CHECK(!strcmp(in->backend, "hip") && !strncmp(in->arch, "gfx", 3));
  CHECK(!strncmp(in->arch, in->target, strlen(in->target)) && !strchr(in->target, ':'));
  CHECK(in->compute_units > 0 && in->mem_bytes > 0 && in->name[0] && !in->host_memory);
  CHECK(!strncmp(in->driver, "hip runtime ", 12));
  CHECK(gc_dev_runs_target(g->d, in->arch) && gc_dev_runs_target(g->d, in->target));
  CHECK(!gc_dev_runs_target(g->d, "sm_90") && !gc_dev_runs_target(g->d, "cpu"));
  CHECK(gc_dev_host_ptr(g->d, 0) == NULL);
}

static void test_memory(gpu_t *g) {
  gc_err_t e = {0};
  uint16_t *ha = malloc(N * 2), *hb = malloc(N * 2), *back = malloc(N * 2);
  for (int i = 0; i < N; i++) {
    ha[i] = gc_f32_to_f16((float)(i % 1000) * 0.5f);
    hb[i] = gc_f32_to_f16((float)(i % 77) - 30.0f);
    g->want[i] = (float)(i % 1000) * 0.5f + (float)(i % 77) - 30.0f;
  }
  CHECK(!gc_dev_alloc(g->d, N * 2, &g->a, &e) && !gc_dev_alloc(g->d, N * 2, &g->b, &e) &&
        !gc_dev_alloc(g->d, N * 4, &g->c, &e));
  CHECK(g->a % 256 == 0 && g->b % 256 == 0 && g->c % 256 == 0);
  CHECK(!gc_dev_upload(g->d, g->a, ha, N * 2, &e) && !gc_dev_upload(g->d, g->b, hb, N * 2, &e));
  CHECK(!gc_dev_download(g->d, back, g->a, N * 2, &e) && !memcmp(back, ha, N * 2));
  CHECK(!gc_dev_memset(g->d, g->c, 0xff, N * 4, &e));
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e));
  CHECK(((uint32_t *)g->got)[N - 1] == 0xffffffffu && ((uint32_t *)g->got)[0] == 0xffffffffu);
  gc_dptr_t huge = 0;
  int rc = gc_dev_alloc(g->d, (size_t)1 << 50, &huge, &e);
  CHECK(rc == GC_ENOMEM && strstr(e.msg, "out of GPU memory allocating"));
  printf("  %s\n", e.msg);
  free(ha), free(hb), free(back);
}

static void test_load(gpu_t *g, const char *clang, const void *co, size_t n) {
  gc_err_t e = {0};
  gc_module_t *m = NULL;
  /* a code object for another processor does not load here */
  const char *other = strncmp(g->d->info.target, "gfx90a", 6) ? "gfx90a" : "gfx942";
  void *foreign = NULL;
  size_t fn = 0;
  CHECK(!gc_dev_runs_target(g->d, other));
  if (!compile(clang, other, &foreign, &fn)) {
    CHECK(gc_dev_module_load(g->d, foreign, fn, &m, &e) == GC_EDEVICE && !m);
    printf("  %s code object: %s\n", other, e.msg);
  }
  free(foreign);
  CHECK(gc_dev_module_load(g->d, co, 200, &m, &e) == GC_ECORRUPT && !m);
  int rc = gc_dev_module_load(g->d, co, n, &g->mod, &e);
  if (rc) printf("  load: %s\n", e.msg);
  CHECK(rc == GC_OK);
  if (rc) return;
  CHECK(!gc_dev_kernel(g->d, g->mod, "vadd", &g->vadd, &e));
  CHECK(!gc_dev_kernel(g->d, g->mod, "vacc", &g->vacc, &e));
  CHECK(!gc_dev_kernel(g->d, g->mod, "reverse", &g->reverse, &e));
  gc_kernel_t *k = NULL;
  CHECK(gc_dev_kernel(g->d, g->mod, "nope", &k, &e) == GC_ENOTFOUND && !k);
}

static void test_launch(gpu_t *g) {
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e) && !gc_dev_sync(g->d, &e));
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e) && same(g->got, g->want, N));

  gc_event_t *t0 = NULL, *t1 = NULL;
  CHECK(!gc_dev_event_create(g->d, &t0, &e) && !gc_dev_event_create(g->d, &t1, &e));
  CHECK(!gc_dev_event_record(g->d, t0, &e));
  for (int i = 0; i < 20; i++) launch1d(g, g->vadd, N, 256, 0, args, &e);
  CHECK(!gc_dev_event_record(g->d, t1, &e));
  double ms = -1;
  CHECK(!gc_dev_event_elapsed(g->d, t0, t1, &ms, &e) && ms > 0 && ms < 1000);
  printf("  20 launches of vadd over %d elements: %.3f ms\n", N, ms);
  gc_dev_event_destroy(g->d, t0);
  gc_dev_event_destroy(g->d, t1);

  int m = 16000; /* 64000 bytes of dynamic LDS: all a block may have */
  void *rargs[] = {&g->c, &m};
  int64_t one[3] = {1, 1, 1}, blk[3] = {256, 1, 1};
  int rc = gc_dev_launch(g->d, g->reverse, one, blk, (size_t)m * 4, rargs, &e);
  if (rc) printf("  64000 bytes of LDS: %s\n", e.msg);
  CHECK(rc == GC_OK && !gc_dev_download(g->d, g->got, g->c, (size_t)m * 4, &e));
  int rev_ok = 1;
  for (int i = 0; i < m; i++) rev_ok &= g->got[i] == (float)(m - 1 - i);
  CHECK(rev_ok);
  rc = gc_dev_launch(g->d, g->reverse, one, blk, (size_t)16 << 20, rargs, &e);
  CHECK(rc == GC_ELAUNCH && strstr(e.msg, "bytes of dynamic shared memory (LDS); this gfx"));
  printf("  16 MiB LDS: %s\n", e.msg);
}

static void test_graph(gpu_t *g) {
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->c, &n};
  gc_graph_t *exec = NULL;
  CHECK(gc_dev_graph_end(g->d, &exec, &e) == GC_EINVAL && !exec);
  CHECK(!gc_dev_memset(g->d, g->c, 0, N * 4, &e));
  CHECK(!gc_dev_graph_begin(g->d, &e));
  CHECK(gc_dev_graph_begin(g->d, &e) == GC_EINVAL &&
        !strcmp(e.msg, "a HIP graph capture is already open"));
  for (int i = 0; i < 3; i++) CHECK(!launch1d(g, g->vacc, N, 128, 0, args, &e));
  CHECK(gc_dev_download(g->d, g->got, g->c, 4, &e) == GC_EINVAL &&
        !strcmp(e.msg, "download is not allowed while a HIP graph is being captured"));
  CHECK(gc_dev_sync(g->d, &e) == GC_EINVAL);
  int rc = gc_dev_graph_end(g->d, &exec, &e);
  if (rc) printf("  graph end: %s\n", e.msg);
  CHECK(rc == GC_OK && exec);
  if (rc) return;
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e)); /* captured, not run */
  int zero = 1;
  for (int i = 0; i < N; i++) zero &= g->got[i] == 0.0f;
  CHECK(zero);
  for (int rep = 1; rep <= 2; rep++) {
    CHECK(!gc_dev_graph_launch(g->d, exec, &e));
    CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e));
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
  grid[0] = (int64_t)1 << 33;
  CHECK(gc_dev_launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH);
  printf("  grid 2^33: %s\n", e.msg);
  grid[0] = 1;
  block[0] = 2048; /* over the 1024 work-items a block */
  CHECK(gc_dev_launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH &&
        strstr(e.msg, "hipModuleLaunchKernel: hipError"));
  printf("  block 2048: %s\n", e.msg);
  /* none of that hurt the device */
  CHECK(!gc_dev_memset(g->d, g->c, 0, N * 4, &e));
  CHECK(!launch1d(g, g->vadd, N, 512, 0, args, &e) && !gc_dev_sync(g->d, &e));
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e) && same(g->got, g->want, N));
}

/* The current device is per thread: a thread that did not open the
 * device can still use it. */
static void *other_thread(void *arg) {
  gpu_t *g = arg;
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  float *got = malloc(N * 4);
  int ok = !gc_dev_memset(g->d, g->c, 0, N * 4, &e) &&
           !launch1d(g, g->vadd, N, 256, 0, args, &e) &&
           !gc_dev_download(g->d, got, g->c, N * 4, &e) && same(got, g->want, N);
  if (!ok) printf("  other thread: %s\n", e.msg);
  free(got);
  return ok ? arg : NULL;
}

static void test_thread(gpu_t *g) {
  pthread_t t;
  void *r = NULL;
  CHECK(!pthread_create(&t, NULL, other_thread, g) && !pthread_join(t, &r) && r == g);
}

/* Without a GPU: one GC_EDEVICE line naming what is missing. */
static int open_or_skip(gc_dev_t **d) {
  gc_err_t e = {0};
  int rc = gc_dev_open("hip", 0, d, &e);
  if (!rc) return 1;
  CHECK(rc == GC_EDEVICE && e.code == GC_EDEVICE && !*d && !strchr(e.msg, '\n'));
  CHECK(strstr(e.msg, "libamdhip64") || strstr(e.msg, "no AMD GPU"));
  if (strstr(e.msg, "no AMD GPU:")) /* the library is there: the HIP error is named */
    CHECK(strstr(e.msg, "hipError") != NULL);
  if (access("/dev/kfd", F_OK) && strstr(e.msg, "no AMD GPU:"))
    CHECK(strstr(e.msg, "/dev/kfd does not exist") != NULL);
  printf("skip: device tests: %s\n", e.msg);
  return 0;
}

static void test_device(const char *clang) {
  gpu_t g = {0};
  gc_err_t e = {0};
  CHECK(!strcmp(gc_hip_ops.name, "hip"));
  if (!open_or_skip(&g.d)) return;
  gc_dev_t *other = NULL;
  CHECK(gc_dev_open("hip", 99, &other, &e) == GC_EDEVICE && !other &&
        strstr(e.msg, "no AMD GPU with ordinal 99 (found "));
  test_info(&g);
  void *co = NULL;
  size_t n = 0;
  if (!clang || compile(clang, g.d->info.target, &co, &n)) {
    printf("skip: device launches need clang with the AMDGPU target (set GCORE_HIP_CLANG)\n");
    gc_dev_close(g.d);
    return;
  }
  g.want = malloc(N * 4);
  g.got = malloc(N * 4);
  test_memory(&g);
  test_load(&g, clang, co, n);
  if (g.mod && g.vadd && g.vacc && g.reverse) {
    test_launch(&g);
    test_graph(&g);
    test_bad_geometry(&g);
    test_thread(&g);
  }
  free(g.vadd), free(g.vacc), free(g.reverse); /* plain handles */
  gc_dev_module_unload(g.d, g.mod);
  gc_dev_free(g.d, g.a), gc_dev_free(g.d, g.b), gc_dev_free(g.d, g.c);
  gc_dev_close(g.d);
  free(co), free(g.want), free(g.got);
}

int main(void) {
  test_target_match();
  const char *clang = find_clang();
  void *co = NULL;
  size_t n = 0;
  if (clang && !compile(clang, "gfx942", &co, &n)) {
    printf("  %s: gfx942 code object of %zu bytes\n", clang, n);
    test_code_object_check(co, n);
  } else {
    printf("skip: code-object checks need clang with the AMDGPU target (%s)\n",
           clang ? clang : "none found");
  }
  free(co);
  test_device(clang);
  return check_report();
}
