/* test_gpu.c — the GPU backend skeleton (runtime/gpu.c), the code the
 * cuda and hip backends share, run on a mock GPU: a vendor table whose
 * calls work on host memory, count what is live, refuse any call on a
 * thread the device was not made current on, and fail on request with
 * the vendor's kind of code. It runs twice: set up as CUDA is (shared
 * memory opt-in, programmatic dependent launch, uploads that do not wait)
 * and as HIP is (none of those), so the paths both vendors take run
 * without a GPU. Then a failure is injected at every vendor call in turn
 * under one workload: each is reported under its name, and nothing
 * leaks. Also the cubin and AMDGPU code-object checks' messages. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/gpu_impl.h"

#include "check.h"

/* ---- the mock GPU ---------------------------------------------------- */

enum {
  MOCK_INVALID_VALUE = 1,
  MOCK_OOM = 2,
  MOCK_INVALID_CONTEXT = 201,
  MOCK_NO_BINARY = 209,
  MOCK_NOT_FOUND = 500,
  MOCK_ILLEGAL_ADDRESS = 700,
  MOCK_CAPTURE_UNSUPPORTED = 900,
  MOCK_CAPTURE_INVALIDATED = 901,
  MOCK_EM = 0x6d6b, /* e_machine of a mock code object */
  MOCK_ARCH = 7,    /* its e_flags: the arch it is for */
  MOCK_MEM = 64 << 20,
};

static const struct { int code; const char *name, *meaning; } mock_errors[] = {
    {MOCK_INVALID_VALUE, "mockErrorInvalidValue", "invalid argument"},
    {MOCK_OOM, "mockErrorOutOfMemory", "out of memory"},
    {MOCK_INVALID_CONTEXT, "mockErrorInvalidContext", "no device is current"},
    {MOCK_NO_BINARY, "mockErrorNoBinaryForGpu", "no kernel image for this device"},
    {MOCK_NOT_FOUND, "mockErrorNotFound", "named symbol not found"},
    {MOCK_ILLEGAL_ADDRESS, "mockErrorIllegalAddress", "illegal memory access"},
    {MOCK_CAPTURE_UNSUPPORTED, "mockErrorStreamCaptureUnsupported", "not allowed in capture"},
    {MOCK_CAPTURE_INVALIDATED, "mockErrorStreamCaptureInvalidated", "capture invalidated"},
};

static void mock_describe(gc_gpu_res_t r, char *buf, size_t n) {
  for (size_t i = 0; i < GC_ARRAY_LEN(mock_errors); i++)
    if (mock_errors[i].code == r) {
      snprintf(buf, n, "%s (%s)", mock_errors[i].name, mock_errors[i].meaning);
      return;
    }
  snprintf(buf, n, "unknown mock error (%d)", r);
}

static int mock_classify(gc_gpu_res_t r) {
  switch (r) {
  case MOCK_OOM: return GC_GPU_R_OOM;
  case MOCK_NOT_FOUND: return GC_GPU_R_NOT_FOUND;
  case MOCK_NO_BINARY: return GC_GPU_R_WRONG_ISA;
  case MOCK_ILLEGAL_ADDRESS: return GC_GPU_R_FAULT;
  default: return GC_GPU_R_OTHER;
  }
}

static int mock_check_code(const void *code, size_t n, gc_err_t *e) {
  static const gc_gpu_elf_t kind = {MOCK_EM, "MOCK", "a mock code object", "mock code object"};
  return gc_gpu_check_elf(code, n, &kind, e);
}

typedef struct mock_kernel mock_kernel_t;
typedef struct mock_event {
  double t;
  int recorded, untimed; /* untimed: waited on only, as CU_EVENT_DISABLE_TIMING */
} mock_event_t;

/* A launch, memset, copy or event record, run at once or captured. */
typedef struct mock_op {
  enum { OP_LAUNCH, OP_MEMSET, OP_COPY, OP_RECORD } kind;
  mock_kernel_t *k;
  unsigned threads, shmem;
  unsigned char argv[4][8]; /* argument values, copied as a capture does */
  gc_gpu_ptr_t dst, src;
  unsigned char byte;
  size_t n;
  mock_event_t *ev;
} mock_op_t;

typedef struct mock_graph {
  mock_op_t ops[64];
  int n;
} mock_graph_t;

typedef struct mock_stream {
  int capturing, invalidated;
  mock_graph_t *graph;
} mock_stream_t;

struct mock_kernel {
  const char *name;
  int nargs;
  size_t argsz[4];
  /* runs all threads; returns a sticky fault or 0 */
  int (*run)(unsigned char argv[4][8], unsigned threads, unsigned shmem);
  unsigned granted; /* dynamic shared memory it may use (func_set_shmem) */
};

/* What is live, what was called, and what to fail. */
static struct mock {
  const void *dev;     /* the open device: calls need it current */
  int allocs, modules, events, graphs, execs, streams;
  size_t used;
  int sticky;          /* a kernel faulted: every call fails so */
  double clock;        /* ms; each kernel run takes 0.25 */
  int syncs, shmem_sets, pdl_launches, launches, unbound;
  int hosts, write32s; /* page-locked blocks live; values written in stream order */
  int untimed;         /* of the live events, those made untimed */
  const char *fail;    /* the call that fails next, by name */
  int fail_code;
} mock;
static _Thread_local const void *mock_current; /* what this thread bound */

/* Every call but the releases: made current, not failing on request. */
static gc_gpu_res_t mock_enter(const char *name) {
  if (!mock.dev || mock_current != mock.dev) {
    mock.unbound++;
    return MOCK_INVALID_CONTEXT;
  }
  if (mock.fail && !strcmp(mock.fail, name)) {
    mock.fail = NULL;
    return mock.fail_code;
  }
  return mock.sticky;
}
/* The releases: they work anyway, but count a call on an unbound thread. */
static void mock_release_call(void) {
  if (!mock.dev || mock_current != mock.dev) mock.unbound++;
}
#define ENTER(name)                                                      \
  do {                                                                   \
    gc_gpu_res_t r_ = mock_enter(name);                                  \
    if (r_) return r_;                                                   \
  } while (0)

static void mock_fail(const char *name, int code) {
  mock.fail = name;
  mock.fail_code = code;
}

static gc_gpu_res_t mock_run(mock_op_t *op) {
  switch (op->kind) {
  case OP_LAUNCH:
    mock.clock += 0.25;
    mock.launches++;
    if (op->k->run(op->argv, op->threads, op->shmem)) mock.sticky = MOCK_ILLEGAL_ADDRESS;
    return 0;
  case OP_MEMSET: memset((void *)(uintptr_t)op->dst, op->byte, op->n); return 0;
  case OP_COPY: memcpy((void *)(uintptr_t)op->dst, (const void *)(uintptr_t)op->src, op->n); return 0;
  case OP_RECORD: op->ev->t = mock.clock, op->ev->recorded = 1; return 0;
  }
  return MOCK_INVALID_VALUE;
}

/* Run op, or record it where s is capturing. */
static gc_gpu_res_t mock_issue(mock_stream_t *s, mock_op_t op) {
  if (!s->capturing) return mock_run(&op);
  if (s->graph->n == GC_ARRAY_LEN(s->graph->ops)) return MOCK_INVALID_VALUE;
  s->graph->ops[s->graph->n++] = op;
  return 0;
}

/* A call a capture cannot record invalidates it. */
static gc_gpu_res_t mock_uncapturable(mock_stream_t *s) {
  if (!s->capturing) return 0;
  s->invalidated = 1;
  return MOCK_CAPTURE_UNSUPPORTED;
}

static gc_gpu_res_t mock_bind(gc_gpu_dev_t *d) {
  if (mock.fail && !strcmp(mock.fail, "mockSetDevice")) {
    mock.fail = NULL;
    return mock.fail_code;
  }
  mock_current = d;
  return 0;
}

static gc_gpu_res_t mock_stream_create(void **s) {
  ENTER("mockStreamCreate");
  *s = calloc(1, sizeof(mock_stream_t));
  mock.streams++;
  return 0;
}
static gc_gpu_res_t mock_stream_destroy(void *s) {
  mock_release_call();
  free(s);
  mock.streams--;
  return 0;
}
static gc_gpu_res_t mock_stream_sync(void *s) {
  ENTER("mockStreamSynchronize");
  mock.syncs++;
  return mock_uncapturable(s);
}

static gc_gpu_res_t mock_mem_alloc(gc_gpu_ptr_t *p, size_t n) {
  ENTER("mockMalloc");
  if (n > MOCK_MEM - mock.used) return MOCK_OOM;
  unsigned char *q = aligned_alloc(256, 256 + (n + 255) / 256 * 256); /* size, then data */
  if (!q) return MOCK_OOM;
  memcpy(q, &n, sizeof n);
  mock.allocs++;
  mock.used += n;
  *p = (gc_gpu_ptr_t)(uintptr_t)(q + 256);
  return 0;
}
static gc_gpu_res_t mock_mem_free(gc_gpu_ptr_t p) {
  mock_release_call();
  unsigned char *q = (unsigned char *)(uintptr_t)p - 256;
  size_t n;
  memcpy(&n, q, sizeof n);
  mock.used -= n;
  mock.allocs--;
  free(q);
  return 0;
}
static gc_gpu_res_t mock_mem_info(size_t *fr, size_t *tot) {
  ENTER("mockMemGetInfo");
  *fr = MOCK_MEM - mock.used, *tot = MOCK_MEM;
  return 0;
}
static gc_gpu_res_t mock_copy_htod(gc_gpu_ptr_t dst, const void *src, size_t n, void *s) {
  ENTER("mockMemcpyHtoDAsync");
  gc_gpu_res_t r = mock_uncapturable(s);
  if (!r) memcpy((void *)(uintptr_t)dst, src, n);
  return r;
}
static gc_gpu_res_t mock_copy_dtoh(void *dst, gc_gpu_ptr_t src, size_t n, void *s) {
  ENTER("mockMemcpyDtoHAsync");
  gc_gpu_res_t r = mock_uncapturable(s);
  if (!r) memcpy(dst, (void *)(uintptr_t)src, n);
  return r;
}
static gc_gpu_res_t mock_write32(void *s, gc_gpu_ptr_t dst, unsigned v) {
  ENTER("mockStreamWriteValue32");
  gc_gpu_res_t r = mock_uncapturable(s);
  if (!r) memcpy((void *)(uintptr_t)dst, &v, sizeof v), mock.write32s++;
  return r;
}
static gc_gpu_res_t mock_host_alloc(void **p, size_t n) {
  ENTER("mockHostAlloc");
  if (!(*p = malloc(n))) return MOCK_OOM;
  mock.hosts++;
  return 0;
}
static gc_gpu_res_t mock_host_dptr(gc_gpu_ptr_t *out, void *p) {
  ENTER("mockHostGetDevicePointer");
  *out = (gc_gpu_ptr_t)(uintptr_t)p; /* one address space, as CUDA's unified addressing */
  return 0;
}
static gc_gpu_res_t mock_host_free(void *p) {
  mock_release_call();
  free(p);
  mock.hosts--;
  return 0;
}
static gc_gpu_res_t mock_memset8(gc_gpu_ptr_t dst, unsigned char byte, size_t n, void *s) {
  ENTER("mockMemsetD8Async");
  return mock_issue(s, (mock_op_t){.kind = OP_MEMSET, .dst = dst, .byte = byte, .n = n});
}
static gc_gpu_res_t mock_copy_dtod(gc_gpu_ptr_t dst, gc_gpu_ptr_t src, size_t n, void *s) {
  ENTER("mockMemcpyDtoDAsync");
  return mock_issue(s, (mock_op_t){.kind = OP_COPY, .dst = dst, .src = src, .n = n});
}

/* ---- mock kernels: every thread of the launch, one after another ------- */

static void *ptr_arg(unsigned char v[8]) {
  uint64_t p;
  memcpy(&p, v, 8);
  return (void *)(uintptr_t)p;
}
static int int_arg(unsigned char v[8]) {
  int i;
  memcpy(&i, v, 4);
  return i;
}

static int run_vadd(unsigned char argv[4][8], unsigned threads, unsigned shmem) {
  const float *a = ptr_arg(argv[0]), *b = ptr_arg(argv[1]);
  float *c = ptr_arg(argv[2]);
  int n = int_arg(argv[3]);
  (void)shmem;
  for (unsigned i = 0; i < threads && (int)i < n; i++) c[i] = a[i] + b[i];
  return 0;
}
static int run_vacc(unsigned char argv[4][8], unsigned threads, unsigned shmem) {
  const float *a = ptr_arg(argv[0]);
  float *c = ptr_arg(argv[1]);
  int n = int_arg(argv[2]);
  (void)shmem;
  for (unsigned i = 0; i < threads && (int)i < n; i++) c[i] += a[i];
  return 0;
}
/* out[i] = n-1-i through n floats of dynamic shared memory */
static int run_reverse(unsigned char argv[4][8], unsigned threads, unsigned shmem) {
  float *out = ptr_arg(argv[0]);
  int n = int_arg(argv[1]);
  (void)threads;
  if ((size_t)n * 4 > shmem) return 1;
  float *buf = malloc(shmem);
  for (int i = 0; i < n; i++) buf[i] = (float)i;
  for (int i = 0; i < n; i++) out[i] = buf[n - 1 - i];
  free(buf);
  return 0;
}
static int run_fault(unsigned char argv[4][8], unsigned threads, unsigned shmem) {
  (void)argv, (void)threads, (void)shmem;
  return 1;
}

static mock_kernel_t mock_kernels[] = {
    {"vadd", 4, {8, 8, 8, 4}, run_vadd, 0},
    {"vacc", 3, {8, 8, 4}, run_vacc, 0},
    {"reverse", 2, {8, 4}, run_reverse, 0},
    {"fault", 1, {8}, run_fault, 0},
};

/* ---- mock modules, launches, events, graphs ---------------------------- */

/* A mock code object: an ELF header for MOCK_EM whose e_flags name the arch. */
static void mock_image(unsigned char out[64], unsigned arch) {
  memset(out, 0, 64);
  memcpy(out, "\177ELF", 4);
  out[4] = 2, out[5] = 1;
  out[18] = MOCK_EM & 0xff, out[19] = MOCK_EM >> 8;
  out[0x30] = (unsigned char)arch;
}

static gc_gpu_res_t mock_module_load(void **mod, const void *image) {
  ENTER("mockModuleLoadData");
  if (((const unsigned char *)image)[0x30] != MOCK_ARCH) return MOCK_NO_BINARY;
  for (size_t i = 0; i < GC_ARRAY_LEN(mock_kernels); i++) mock_kernels[i].granted = 48 << 10;
  *mod = malloc(1);
  mock.modules++;
  return 0;
}
static gc_gpu_res_t mock_module_unload(void *mod) {
  mock_release_call();
  free(mod);
  mock.modules--;
  return 0;
}
static gc_gpu_res_t mock_module_function(void **fn, void *mod, const char *name) {
  ENTER("mockModuleGetFunction");
  (void)mod;
  for (size_t i = 0; i < GC_ARRAY_LEN(mock_kernels); i++)
    if (!strcmp(mock_kernels[i].name, name)) {
      *fn = &mock_kernels[i];
      return 0;
    }
  return MOCK_NOT_FOUND;
}
static gc_gpu_res_t mock_func_shmem(int *bytes, void *fn) {
  ENTER("mockFuncGetAttribute");
  *bytes = (int)((mock_kernel_t *)fn)->granted;
  return 0;
}
static gc_gpu_res_t mock_func_set_shmem(void *fn, int bytes) {
  ENTER("mockFuncSetAttribute");
  if (bytes > 232448) return MOCK_INVALID_VALUE;
  ((mock_kernel_t *)fn)->granted = (unsigned)bytes;
  mock.shmem_sets++;
  return 0;
}

static unsigned mock_shmem_limit; /* without an opt-in: what a block may have */

static gc_gpu_res_t mock_launch(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                unsigned by, unsigned bz, unsigned shmem, void *stream,
                                void **args, void **extra) {
  ENTER("mockLaunchKernel");
  mock_kernel_t *k = fn;
  mock_stream_t *s = stream;
  unsigned limit = mock_shmem_limit ? mock_shmem_limit : k->granted;
  if ((uint64_t)bx * by * bz > 1024 || shmem > limit || extra) {
    if (s->capturing) s->invalidated = 1;
    return MOCK_INVALID_VALUE;
  }
  mock_op_t op = {.kind = OP_LAUNCH, .k = k, .shmem = shmem};
  uint64_t threads = (uint64_t)gx * gy * gz * bx * by * bz;
  op.threads = threads > UINT32_MAX ? UINT32_MAX : (unsigned)threads;
  for (int i = 0; i < k->nargs; i++) memcpy(op.argv[i], args[i], k->argsz[i]);
  return mock_issue(s, op);
}
static gc_gpu_res_t mock_launch_pdl(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                    unsigned by, unsigned bz, unsigned shmem, void *stream,
                                    void **args, void **extra) {
  ENTER("mockLaunchKernelEx");
  mock.pdl_launches++;
  return mock_launch(fn, gx, gy, gz, bx, by, bz, shmem, stream, args, extra);
}

static gc_gpu_res_t mock_event_create(void **ev) {
  ENTER("mockEventCreate");
  *ev = calloc(1, sizeof(mock_event_t));
  mock.events++;
  return 0;
}
static gc_gpu_res_t mock_event_create_untimed(void **ev) {
  ENTER("mockEventCreateUntimed");
  mock_event_t *x = calloc(1, sizeof *x);
  x->untimed = 1;
  *ev = x;
  mock.events++, mock.untimed++;
  return 0;
}
static gc_gpu_res_t mock_event_destroy(void *ev) {
  mock_release_call();
  mock.untimed -= ((mock_event_t *)ev)->untimed;
  free(ev);
  mock.events--;
  return 0;
}
static gc_gpu_res_t mock_event_record(void *ev, void *stream) {
  ENTER("mockEventRecord");
  return mock_issue(stream, (mock_op_t){.kind = OP_RECORD, .ev = ev});
}
static gc_gpu_res_t mock_event_sync(void *ev) {
  ENTER("mockEventSynchronize");
  return ((mock_event_t *)ev)->recorded ? 0 : MOCK_INVALID_VALUE;
}
static gc_gpu_res_t mock_event_elapsed(float *ms, void *a, void *b) {
  ENTER("mockEventElapsedTime");
  if (((mock_event_t *)a)->untimed || ((mock_event_t *)b)->untimed) return MOCK_INVALID_VALUE;
  *ms = (float)(((mock_event_t *)b)->t - ((mock_event_t *)a)->t);
  return 0;
}

static gc_gpu_res_t mock_capture_begin(void *stream) {
  ENTER("mockStreamBeginCapture");
  mock_stream_t *s = stream;
  if (s->capturing) return MOCK_INVALID_VALUE;
  s->graph = calloc(1, sizeof *s->graph);
  mock.graphs++;
  s->capturing = 1, s->invalidated = 0;
  return 0;
}
/* Ends the capture whatever happens, as the vendors' do. */
static gc_gpu_res_t mock_capture_end(void *stream, void **graph) {
  mock_stream_t *s = stream;
  *graph = NULL;
  gc_gpu_res_t r = mock_enter("mockStreamEndCapture");
  if (!s->capturing) return r ? r : MOCK_INVALID_VALUE;
  s->capturing = 0;
  if (!r && s->invalidated) r = MOCK_CAPTURE_INVALIDATED;
  if (r) {
    free(s->graph);
    mock.graphs--;
  } else {
    *graph = s->graph;
  }
  s->graph = NULL;
  return r;
}
static gc_gpu_res_t mock_graph_instantiate(void **exec, void *graph) {
  ENTER("mockGraphInstantiate");
  mock_graph_t *x = malloc(sizeof *x);
  memcpy(x, graph, sizeof *x);
  mock.execs++;
  *exec = x;
  return 0;
}
static gc_gpu_res_t mock_graph_destroy(void *graph) {
  mock_release_call();
  free(graph);
  mock.graphs--;
  return 0;
}
static gc_gpu_res_t mock_graph_launch(void *exec, void *stream) {
  ENTER("mockGraphLaunch");
  mock_graph_t *x = exec;
  gc_gpu_res_t r = mock_uncapturable(stream);
  for (int i = 0; i < x->n && !r; i++) r = mock_run(&x->ops[i]);
  return r;
}
static gc_gpu_res_t mock_graph_exec_destroy(void *exec) {
  mock_release_call();
  free(exec);
  mock.execs--;
  return 0;
}

static int mock_released;
static void mock_release(gc_gpu_dev_t *d, int bound) {
  (void)d;
  mock_released = 1 + bound;
}

/* ---- the two set-ups ------------------------------------------------- */

#define MOCK_CALLS                                                              \
  .describe = mock_describe, .classify = mock_classify, .check_code = mock_check_code, \
  .bind = {mock_bind, "mockSetDevice"},                                         \
  .stream_create = {mock_stream_create, "mockStreamCreate"},                    \
  .stream_destroy = {mock_stream_destroy, "mockStreamDestroy"},                 \
  .stream_sync = {mock_stream_sync, "mockStreamSynchronize"},                   \
  .mem_alloc = {mock_mem_alloc, "mockMalloc"},                                  \
  .mem_free = {mock_mem_free, "mockFree"},                                      \
  .mem_info = {mock_mem_info, "mockMemGetInfo"},                                \
  .copy_htod = {mock_copy_htod, "mockMemcpyHtoDAsync"},                         \
  .copy_dtoh = {mock_copy_dtoh, "mockMemcpyDtoHAsync"},                         \
  .memset8 = {mock_memset8, "mockMemsetD8Async"},                               \
  .copy_dtod = {mock_copy_dtod, "mockMemcpyDtoDAsync"},                         \
  .module_load = {mock_module_load, "mockModuleLoadData"},                      \
  .module_unload = {mock_module_unload, "mockModuleUnload"},                    \
  .module_function = {mock_module_function, "mockModuleGetFunction"},           \
  .launch = {mock_launch, "mockLaunchKernel"},                                  \
  .event_create = {mock_event_create, "mockEventCreate"},                       \
  .event_destroy = {mock_event_destroy, "mockEventDestroy"},                    \
  .event_record = {mock_event_record, "mockEventRecord"},                       \
  .event_sync = {mock_event_sync, "mockEventSynchronize"},                      \
  .event_elapsed = {mock_event_elapsed, "mockEventElapsedTime"},                \
  .capture_begin = {mock_capture_begin, "mockStreamBeginCapture"},              \
  .capture_end = {mock_capture_end, "mockStreamEndCapture"},                    \
  .graph_instantiate = {mock_graph_instantiate, "mockGraphInstantiate"},        \
  .graph_destroy = {mock_graph_destroy, "mockGraphDestroy"},                    \
  .graph_launch = {mock_graph_launch, "mockGraphLaunch"},                       \
  .graph_exec_destroy = {mock_graph_exec_destroy, "mockGraphExecDestroy"},      \
  .release = mock_release

/* As CUDA: 48 KiB of dynamic shared memory unasked, more by opt-in up to
 * 227 KiB; programmatic dependent launch; uploads that do not wait; values
 * written in stream order and page-locked boxes (running ahead). */
static const gc_gpu_api_t mock_cuda = {
    .vendor = "MOCKCUDA",
    .shmem_what = "dynamic shared memory",
    .wrong_isa = "code object was built for another GPU than this",
    .upload_waits = 0,
    .func_shmem = {mock_func_shmem, "mockFuncGetAttribute"},
    .func_set_shmem = {mock_func_set_shmem, "mockFuncSetAttribute"},
    .launch_pdl = {mock_launch_pdl, "mockLaunchKernelEx"},
    .write32 = {mock_write32, "mockStreamWriteValue32"},
    .host_alloc = {mock_host_alloc, "mockHostAlloc"},
    .host_free = {mock_host_free, "mockFreeHost"},
    .host_dptr = {mock_host_dptr, "mockHostGetDevicePointer"},
    .event_create_untimed = {mock_event_create_untimed, "mockEventCreateUntimed"},
    MOCK_CALLS,
};

/* As HIP: 64 KiB of LDS a block, no opt-in, no pdl, uploads that wait;
 * without write32 and host_alloc (a runtime that lacks them), so running
 * ahead takes the fallback: an upload, a download that waits. */
static const gc_gpu_api_t mock_hip = {
    .vendor = "MOCKHIP",
    .shmem_what = "dynamic shared memory (LDS)",
    .wrong_isa = "code object was not built for this",
    .upload_waits = 1,
    MOCK_CALLS,
};

static int mock_runs_target(const gc_dev_t *d, const char *target) {
  return !strcmp(d->info.arch, target);
}
static int mock_kernel_pdl(gc_dev_t *d, gc_kernel_t *k, int on) {
  (void)d;
  return k->pdl = on;
}

static const gc_dev_ops_t mock_cuda_ops = {
    .name = "mockcuda", .runs_target = mock_runs_target, .kernel_pdl = mock_kernel_pdl,
    GC_GPU_OPS,
};
static const gc_dev_ops_t mock_hip_ops = {
    .name = "mockhip", .runs_target = mock_runs_target, GC_GPU_OPS,
};

typedef struct setup {
  const char *name;
  const gc_gpu_api_t *api;
  const gc_dev_ops_t *ops;
  int max_shmem;
  unsigned shmem_limit; /* mock_launch's own limit without an opt-in */
} setup_t;

static const setup_t setups[] = {
    {"as CUDA", &mock_cuda, &mock_cuda_ops, 232448, 0},
    {"as HIP", &mock_hip, &mock_hip_ops, 65536, 65536},
};

/* A vendor's open: its device struct starts with gc_gpu_dev_t. */
static int mock_open(const setup_t *s, gc_dev_t **out, gc_err_t *e) {
  *out = NULL;
  gc_gpu_dev_t *d = gc_calloc(1, sizeof *d, e);
  if (!d) return GC_ENOMEM;
  d->base.ops = s->ops;
  d->api = s->api;
  d->max_shmem = s->max_shmem;
  snprintf(d->base.info.backend, sizeof d->base.info.backend, "%s", s->ops->name);
  snprintf(d->base.info.arch, sizeof d->base.info.arch, "mock_%d", MOCK_ARCH);
  mock.dev = d;
  mock_current = NULL;
  mock_shmem_limit = s->shmem_limit;
  int rc = gc_gpu_start(d, e);
  if (rc) {
    free(d);
    mock.dev = NULL;
    return rc;
  }
  *out = &d->base;
  return GC_OK;
}

static void mock_close(gc_dev_t *d) {
  mock_released = 0;
  gc_dev_close(d);
  CHECK(mock_released == 2);
  mock.dev = NULL;
}

/* ---- tests ----------------------------------------------------------- */

enum { N = 1000, CN = 60000 }; /* floats in a and b, in c (reverse writes up to 50000) */

typedef struct gpu {
  const setup_t *s;
  gc_dev_t *d;
  gc_dptr_t a, b, c;
  gc_module_t *mod;
  gc_kernel_t *vadd, *vacc, *reverse, *fault;
  float ha[N], hb[N], want[N], got[CN];
} gpu_t;

static int launch1d(gpu_t *g, gc_kernel_t *k, int64_t n, int64_t bs, size_t shmem, void **args,
                    gc_err_t *e) {
  int64_t grid[3] = {(n + bs - 1) / bs, 1, 1}, block[3] = {bs, 1, 1};
  return gc_dev_launch(g->d, k, grid, block, shmem, args, e);
}

static int live_total(void) {
  return mock.allocs + mock.modules + mock.events + mock.graphs + mock.execs;
}

static void test_open(const setup_t *s) {
  gc_err_t e = {0};
  gc_dev_t *d = NULL;
  mock_fail("mockSetDevice", MOCK_INVALID_VALUE);
  CHECK(mock_open(s, &d, &e) == GC_EDEVICE && !d);
  CHECK_MSG(e, "mockSetDevice: mockErrorInvalidValue (invalid argument)");
  mock_fail("mockStreamCreate", MOCK_OOM);
  CHECK(mock_open(s, &d, &e) == GC_EDEVICE && !d && mock.streams == 0);
  CHECK_MSG(e, "mockStreamCreate: mockErrorOutOfMemory (out of memory)");
  gc_fault_alloc_after(0);
  CHECK(mock_open(s, &d, &e) == GC_ENOMEM && !d);
  gc_fault_alloc_after(-1);
  /* a table with a call missing is refused before any call */
  gc_gpu_api_t partial = *s->api;
  partial.graph_launch.fn = NULL;
  setup_t broken = *s;
  broken.api = &partial;
  CHECK(mock_open(&broken, &d, &e) == GC_EINVAL && !d && mock.streams == 0);
  CHECK(strstr(e.msg, "table of GPU calls is incomplete") != NULL);
}

static void test_memory(gpu_t *g) {
  gc_err_t e = {0};
  char want[256];
  for (int i = 0; i < N; i++) {
    g->ha[i] = (float)(i % 100) * 0.5f;
    g->hb[i] = (float)(i % 7) - 3.0f;
    g->want[i] = g->ha[i] + g->hb[i];
  }
  CHECK(!gc_dev_alloc(g->d, N * 4, &g->a, &e) && !gc_dev_alloc(g->d, N * 4, &g->b, &e) &&
        !gc_dev_alloc(g->d, CN * 4, &g->c, &e) && mock.allocs == 3);
  CHECK(g->a % 256 == 0 && g->b % 256 == 0 && g->c % 256 == 0);
  int syncs = mock.syncs;
  CHECK(!gc_dev_upload(g->d, g->a, g->ha, N * 4, &e) && !gc_dev_upload(g->d, g->b, g->hb, N * 4, &e));
  CHECK(mock.syncs - syncs == (g->s->api->upload_waits ? 2 : 0));
  CHECK(!gc_dev_download(g->d, g->got, g->a, N * 4, &e) && !memcmp(g->got, g->ha, N * 4));
  CHECK(!gc_dev_memset(g->d, g->c, 0xff, N * 4, &e));
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e));
  unsigned char ff[4] = {0xff, 0xff, 0xff, 0xff};
  CHECK(!memcmp(&g->got[0], ff, 4) && !memcmp(&g->got[N - 1], ff, 4));
  /* a device copy: b's elements 3 .. N - 2 over c's at 1, nothing else moved */
  CHECK(!gc_dev_copy(g->d, g->c + 4, g->b + 12, (N - 4) * 4, &e));
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e));
  CHECK(!memcmp(&g->got[0], ff, 4) && !memcmp(&g->got[N - 1], ff, 4) &&
        !memcmp(&g->got[1], &g->hb[3], (N - 4) * 4) && !memcmp(&g->got[N - 3], ff, 4));
  /* nothing to copy: no call at all */
  mock_fail("mockMemcpyHtoDAsync", MOCK_INVALID_VALUE);
  CHECK(!gc_dev_upload(g->d, g->a, g->ha, 0, &e) && mock.fail);
  mock.fail = NULL;
  gc_dptr_t z = 0;
  CHECK(!gc_dev_alloc(g->d, 0, &z, &e) && z);
  gc_dev_free(g->d, z);
  CHECK(mock.allocs == 3);

  gc_dptr_t huge = 0;
  CHECK(gc_dev_alloc(g->d, (size_t)1 << 40, &huge, &e) == GC_ENOMEM && !huge);
  snprintf(want, sizeof want,
           "out of GPU memory allocating %zu bytes (%.1f MiB free of 64.0 MiB)", (size_t)1 << 40,
           (double)(MOCK_MEM - mock.used) / (1 << 20));
  CHECK_MSG(e, want);
  printf("  %s\n", e.msg);
  mock_fail("mockMemGetInfo", MOCK_INVALID_VALUE);
  CHECK(gc_dev_alloc(g->d, (size_t)1 << 40, &huge, &e) == GC_ENOMEM);
  CHECK_MSG(e, "out of GPU memory allocating 1099511627776 bytes (? free of ?)");
  mock_fail("mockMalloc", MOCK_INVALID_VALUE);
  CHECK(gc_dev_alloc(g->d, 16, &huge, &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockMalloc: mockErrorInvalidValue (invalid argument)");
  mock_fail("mockMemcpyDtoHAsync", MOCK_INVALID_VALUE);
  CHECK(gc_dev_download(g->d, g->got, g->a, 4, &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockMemcpyDtoHAsync: mockErrorInvalidValue (invalid argument)");
  mock_fail("mockMemsetD8Async", MOCK_INVALID_VALUE);
  CHECK(gc_dev_memset(g->d, g->c, 0, 4, &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockMemsetD8Async: mockErrorInvalidValue (invalid argument)");
  mock_fail("mockMemcpyDtoDAsync", MOCK_INVALID_VALUE);
  CHECK(gc_dev_copy(g->d, g->c, g->a, 4, &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockMemcpyDtoDAsync: mockErrorInvalidValue (invalid argument)");
  CHECK(gc_dev_host_ptr(g->d, g->a) == NULL && gc_dev_page_size(g->d) == 0);
}

static void test_load(gpu_t *g) {
  gc_err_t e = {0};
  char want[256];
  unsigned char co[64], other[64];
  mock_image(co, MOCK_ARCH);
  mock_image(other, MOCK_ARCH + 1);
  gc_module_t *m = NULL;
  static const char text[80] = "not a code object, just text";
  CHECK(gc_dev_module_load(g->d, text, sizeof text, &m, &e) == GC_ECORRUPT && !m);
  CHECK_MSG(e, "code object is not a mock code object: not an ELF file (80 bytes)");
  CHECK(gc_dev_module_load(g->d, co, 63, &m, &e) == GC_ECORRUPT && !m);
  CHECK(gc_dev_module_load(g->d, other, sizeof other, &m, &e) == GC_EDEVICE && !m);
  snprintf(want, sizeof want,
           "%s mock_7: mockModuleLoadData: mockErrorNoBinaryForGpu (no kernel image for this "
           "device)",
           g->s->api->wrong_isa);
  CHECK_MSG(e, want);
  printf("  another arch: %s\n", e.msg);
  mock_fail("mockModuleLoadData", MOCK_INVALID_VALUE);
  CHECK(gc_dev_module_load(g->d, co, sizeof co, &m, &e) == GC_EDEVICE && !m);
  CHECK_MSG(e, "mockModuleLoadData: mockErrorInvalidValue (invalid argument)");
  gc_fault_alloc_after(0); /* the handle: the loaded module is unloaded again */
  CHECK(gc_dev_module_load(g->d, co, sizeof co, &m, &e) == GC_ENOMEM && !m && !mock.modules);
  gc_fault_alloc_after(-1);
  CHECK(!gc_dev_module_load(g->d, co, sizeof co, &g->mod, &e) && g->mod && mock.modules == 1);

  CHECK(!gc_dev_kernel(g->d, g->mod, "vadd", &g->vadd, &e));
  CHECK(!gc_dev_kernel(g->d, g->mod, "vacc", &g->vacc, &e));
  CHECK(!gc_dev_kernel(g->d, g->mod, "reverse", &g->reverse, &e));
  CHECK(!gc_dev_kernel(g->d, g->mod, "fault", &g->fault, &e));
  CHECK(g->vadd && !g->vadd->pdl);
  CHECK(g->vadd->shmem_granted == (g->s->api->func_shmem.fn ? 48u << 10 : 0));
  gc_kernel_t *k = NULL;
  CHECK(gc_dev_kernel(g->d, g->mod, "nope", &k, &e) == GC_ENOTFOUND && !k);
  CHECK_MSG(e, "code object has no kernel 'nope'");
  mock_fail("mockModuleGetFunction", MOCK_INVALID_VALUE);
  CHECK(gc_dev_kernel(g->d, g->mod, "vadd", &k, &e) == GC_EDEVICE && !k);
  CHECK_MSG(e, "mockModuleGetFunction: mockErrorInvalidValue (invalid argument)");
  gc_fault_alloc_after(0);
  CHECK(gc_dev_kernel(g->d, g->mod, "vadd", &k, &e) == GC_ENOMEM && !k);
  gc_fault_alloc_after(-1);
}

static void test_launch(gpu_t *g) {
  gc_err_t e = {0};
  char want[256];
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e) && !gc_dev_sync(g->d, &e));
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e) && !memcmp(g->got, g->want, N * 4));

  /* geometry: the skeleton's bounds, then the vendor's own limits */
  int64_t grid[3] = {1, 1, 1}, block[3] = {0, 1, 1};
  CHECK(gc_dev_launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH);
  CHECK_MSG(e, "block dimension 0 is 0: must be 1 .. 4294967295");
  block[0] = 256, grid[2] = (int64_t)1 << 33;
  CHECK(gc_dev_launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH);
  CHECK_MSG(e, "grid dimension 2 is 8589934592: must be 1 .. 4294967295");
  grid[2] = 1, block[0] = 2048;
  CHECK(gc_dev_launch(g->d, g->vadd, grid, block, 0, args, &e) == GC_ELAUNCH);
  CHECK_MSG(e, "mockLaunchKernel: mockErrorInvalidValue (invalid argument)");

  /* dynamic shared memory: granted first where the vendor asks for it */
  int m = 16000; /* 64000 bytes: within both set-ups' limits */
  void *rargs[] = {&g->c, &m};
  int64_t one[3] = {1, 1, 1}, blk[3] = {256, 1, 1};
  int sets = mock.shmem_sets;
  CHECK(!gc_dev_launch(g->d, g->reverse, one, blk, (size_t)m * 4, rargs, &e));
  CHECK(!gc_dev_launch(g->d, g->reverse, one, blk, (size_t)m * 4, rargs, &e));
  CHECK(mock.shmem_sets - sets == (g->s->api->func_set_shmem.fn ? 1 : 0));
  CHECK(!gc_dev_download(g->d, g->got, g->c, (size_t)m * 4, &e));
  int rev_ok = 1;
  for (int i = 0; i < m; i++) rev_ok &= g->got[i] == (float)(m - 1 - i);
  CHECK(rev_ok);
  if (g->s->api->func_set_shmem.fn) {
    m = 50000; /* 200000 bytes: past 48 KiB and 64 KiB, within the opt-in */
    mock_fail("mockFuncSetAttribute", MOCK_INVALID_VALUE);
    CHECK(gc_dev_launch(g->d, g->reverse, one, blk, (size_t)m * 4, rargs, &e) == GC_ELAUNCH);
    CHECK_MSG(e, "mockFuncSetAttribute: mockErrorInvalidValue (invalid argument)");
    CHECK(!gc_dev_launch(g->d, g->reverse, one, blk, (size_t)m * 4, rargs, &e));
    CHECK(!gc_dev_sync(g->d, &e));
  }
  size_t over = (size_t)g->s->max_shmem + 1;
  CHECK(gc_dev_launch(g->d, g->reverse, one, blk, over, rargs, &e) == GC_ELAUNCH);
  snprintf(want, sizeof want, "launch asks for %zu bytes of %s; this mock_7 allows at most %d a block",
           over, g->s->api->shmem_what, g->s->max_shmem);
  CHECK_MSG(e, want);
  printf("  %s\n", e.msg);

  /* programmatic dependent launch where the vendor has it */
  int pdl = gc_dev_kernel_pdl(g->d, g->vadd, 1), before = mock.pdl_launches;
  CHECK(pdl == (g->s->api->launch_pdl.fn != NULL));
  CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e));
  CHECK(mock.pdl_launches - before == pdl);
  if (pdl) {
    mock_fail("mockLaunchKernelEx", MOCK_INVALID_VALUE);
    CHECK(launch1d(g, g->vadd, N, 256, 0, args, &e) == GC_ELAUNCH);
    CHECK_MSG(e, "mockLaunchKernelEx: mockErrorInvalidValue (invalid argument)");
  }
  CHECK(gc_dev_kernel_pdl(g->d, g->vadd, 0) == 0);
  before = mock.pdl_launches;
  CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e) && mock.pdl_launches == before);
}

/* gc_dev_set_stream: launches go to a caller's stream (seen here as a
 * capture of that stream recording them instead of running them), and
 * back to the device's own with NULL; not while the device captures.
 * gc_dev_stream says which stream is in use. */
static void test_caller_stream(gpu_t *g) {
  gc_err_t e = {0};
  char want[256];
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  void *theirs = NULL;
  CHECK(!mock_stream_create(&theirs) && mock.streams == 2);
  mock_stream_t *ts = theirs;
  mock_graph_t graph = {0};
  ts->capturing = 1, ts->graph = &graph;
  int ran = mock.launches;
  void *own = NULL, *now = NULL;
  CHECK(!gc_dev_stream(g->d, &own, &e) && own && own != theirs); /* gc_dev_stream: what NCCL enqueues on */
  CHECK(!gc_dev_set_stream(g->d, &theirs, &e));
  CHECK(!gc_dev_stream(g->d, &now, &e) && now == theirs);
  CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e));
  CHECK(mock.launches == ran && graph.n == 1); /* on their stream, not the device's */
  CHECK(!gc_dev_set_stream(g->d, NULL, &e));
  CHECK(!gc_dev_stream(g->d, &now, &e) && now == own);
  CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e) && !gc_dev_sync(g->d, &e));
  CHECK(mock.launches == ran + 1 && graph.n == 1);
  CHECK(!gc_dev_graph_begin(g->d, &e));
  CHECK(gc_dev_set_stream(g->d, &theirs, &e) == GC_EINVAL);
  snprintf(want, sizeof want, "set_stream is not allowed while a %s graph is being captured",
           g->s->api->vendor);
  CHECK_MSG(e, want);
  gc_graph_t *x = NULL;
  CHECK(!gc_dev_graph_end(g->d, &x, &e));
  gc_dev_graph_destroy(g->d, x);
  ts->capturing = 0, ts->graph = NULL;
  mock_stream_destroy(theirs);
  CHECK(mock.streams == 1);
}

static void test_events(gpu_t *g) {
  gc_err_t e = {0};
  int n = N;
  void *args[] = {&g->a, &g->b, &g->c, &n};
  gc_event_t *t0 = NULL, *t1 = NULL, *t2 = NULL;
  CHECK(!gc_dev_event_create(g->d, &t0, &e) && !gc_dev_event_create(g->d, &t1, &e));
  CHECK(mock.events == 2);
  CHECK(!gc_dev_event_record(g->d, t0, &e));
  for (int i = 0; i < 4; i++) CHECK(!launch1d(g, g->vadd, N, 256, 0, args, &e));
  CHECK(!gc_dev_event_record(g->d, t1, &e));
  double ms = -1;
  CHECK(!gc_dev_event_elapsed(g->d, t0, t1, &ms, &e) && ms == 1.0);
  mock_fail("mockEventCreate", MOCK_INVALID_VALUE);
  CHECK(gc_dev_event_create(g->d, &t2, &e) == GC_EDEVICE && !t2 && mock.events == 2);
  CHECK_MSG(e, "mockEventCreate: mockErrorInvalidValue (invalid argument)");
  gc_fault_alloc_after(0);
  CHECK(gc_dev_event_create(g->d, &t2, &e) == GC_ENOMEM && !t2 && mock.events == 2);
  gc_fault_alloc_after(-1);
  mock_fail("mockEventRecord", MOCK_INVALID_VALUE);
  CHECK(gc_dev_event_record(g->d, t0, &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockEventRecord: mockErrorInvalidValue (invalid argument)");
  mock_fail("mockEventSynchronize", MOCK_INVALID_VALUE);
  CHECK(gc_dev_event_elapsed(g->d, t0, t1, &ms, &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockEventSynchronize: mockErrorInvalidValue (invalid argument)");
  mock_fail("mockEventElapsedTime", MOCK_INVALID_VALUE);
  CHECK(gc_dev_event_elapsed(g->d, t0, t1, &ms, &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockEventElapsedTime: mockErrorInvalidValue (invalid argument)");
  gc_dev_event_destroy(g->d, t0);
  gc_dev_event_destroy(g->d, t1);
  CHECK(mock.events == 0);
}

static void test_graph(gpu_t *g) {
  gc_err_t e = {0};
  char want[256];
  const char *v = g->s->api->vendor;
  int n = N;
  void *args[] = {&g->a, &g->c, &n};
  gc_graph_t *exec = NULL;
  CHECK(gc_dev_graph_end(g->d, &exec, &e) == GC_EINVAL && !exec);
  snprintf(want, sizeof want, "no %s graph capture is open", v);
  CHECK_MSG(e, want);
  CHECK(gc_dev_graph_launch(g->d, NULL, &e) == GC_EINVAL);
  snprintf(want, sizeof want, "no %s graph to launch", v);
  CHECK_MSG(e, want);
  CHECK(!gc_dev_memset(g->d, g->c, 0, N * 4, &e));
  gc_event_t *ev = NULL;
  CHECK(!gc_dev_event_create(g->d, &ev, &e));

  CHECK(!gc_dev_graph_begin(g->d, &e) && mock.graphs == 1);
  CHECK(gc_dev_graph_begin(g->d, &e) == GC_EINVAL);
  snprintf(want, sizeof want, "a %s graph capture is already open", v);
  CHECK_MSG(e, want);
  int launches = mock.launches;
  CHECK(!gc_dev_memset(g->d, g->c, 0, N * 4, &e)); /* recorded */
  for (int i = 0; i < 3; i++) CHECK(!launch1d(g, g->vacc, N, 128, 0, args, &e));
  CHECK(!gc_dev_event_record(g->d, ev, &e)); /* recorded */
  CHECK(mock.launches == launches);
  /* what a capture cannot hold is refused before it reaches the vendor */
  gc_dptr_t p = 0;
  double ms;
  CHECK(gc_dev_alloc(g->d, 16, &p, &e) == GC_EINVAL && !p && mock.allocs == 3);
  snprintf(want, sizeof want, "alloc is not allowed while a %s graph is being captured", v);
  CHECK_MSG(e, want);
  printf("  %s\n", e.msg);
  CHECK(gc_dev_upload(g->d, g->a, g->ha, 4, &e) == GC_EINVAL && strstr(e.msg, "upload is "));
  CHECK(gc_dev_download(g->d, g->got, g->c, 4, &e) == GC_EINVAL &&
        strstr(e.msg, "download is "));
  CHECK(gc_dev_sync(g->d, &e) == GC_EINVAL && strstr(e.msg, "sync is "));
  CHECK(gc_dev_event_elapsed(g->d, ev, ev, &ms, &e) == GC_EINVAL &&
        strstr(e.msg, "event timing is "));
  CHECK(gc_dev_graph_launch(g->d, (gc_graph_t *)g, &e) == GC_EINVAL &&
        strstr(e.msg, "graph launch is "));
  int rc = gc_dev_graph_end(g->d, &exec, &e);
  CHECK(rc == GC_OK && exec && mock.graphs == 0 && mock.execs == 1);
  CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e)); /* captured, not run */
  int zero = 1;
  for (int i = 0; i < N; i++) zero &= g->got[i] == 0.0f;
  CHECK(zero);
  /* each replay zeroes c first (the captured memset), then adds a 3 times */
  for (int rep = 1; rep <= 2; rep++) {
    CHECK(!gc_dev_graph_launch(g->d, exec, &e));
    CHECK(!gc_dev_download(g->d, g->got, g->c, N * 4, &e));
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= g->got[i] == 3.0f * g->ha[i];
    CHECK(ok);
  }
  double t = -1;
  CHECK(!gc_dev_event_elapsed(g->d, ev, ev, &t, &e) && t == 0.0); /* the replay recorded it */
  mock_fail("mockGraphLaunch", MOCK_INVALID_VALUE);
  CHECK(gc_dev_graph_launch(g->d, exec, &e) == GC_ELAUNCH);
  CHECK_MSG(e, "mockGraphLaunch: mockErrorInvalidValue (invalid argument)");
  gc_dev_graph_destroy(g->d, exec);
  CHECK(mock.execs == 0);

  /* failures: each leaves no capture open and nothing behind */
  mock_fail("mockStreamBeginCapture", MOCK_INVALID_VALUE);
  CHECK(gc_dev_graph_begin(g->d, &e) == GC_EDEVICE && !gc_dev_sync(g->d, &e));
  CHECK(!gc_dev_graph_begin(g->d, &e));
  mock_fail("mockStreamEndCapture", MOCK_INVALID_VALUE);
  CHECK(gc_dev_graph_end(g->d, &exec, &e) == GC_EDEVICE && !exec && !gc_dev_sync(g->d, &e));
  CHECK_MSG(e, "mockStreamEndCapture: mockErrorInvalidValue (invalid argument)");
  CHECK(!gc_dev_graph_begin(g->d, &e));
  mock_fail("mockGraphInstantiate", MOCK_INVALID_VALUE);
  CHECK(gc_dev_graph_end(g->d, &exec, &e) == GC_EDEVICE && !exec && !gc_dev_sync(g->d, &e));
  CHECK_MSG(e, "mockGraphInstantiate: mockErrorInvalidValue (invalid argument)");
  /* a launch that fails inside the capture invalidates it: end says so */
  CHECK(!gc_dev_graph_begin(g->d, &e));
  int64_t grid[3] = {1, 1, 1}, block[3] = {2048, 1, 1};
  CHECK(gc_dev_launch(g->d, g->vacc, grid, block, 0, args, &e) == GC_ELAUNCH);
  CHECK(gc_dev_graph_end(g->d, &exec, &e) == GC_EDEVICE && !exec);
  CHECK_MSG(e, "mockStreamEndCapture: mockErrorStreamCaptureInvalidated (capture invalidated)");
  CHECK(mock.graphs == 0 && mock.execs == 0 && !gc_dev_sync(g->d, &e));
  gc_dev_event_destroy(g->d, ev);
}

/* The device is made current per thread: every operation works on a
 * thread that did not open the device and has not used it before (the
 * mock refuses, or counts, a call on a thread it was not bound on). */
typedef struct step {
  gpu_t *g;
  int i;
  gc_dptr_t p;
  gc_module_t *m;
  gc_kernel_t *k;
  gc_event_t *ev;
  gc_graph_t *x;
  gc_err_t e;
} step_t;

static void *one_step(void *arg) {
  step_t *s = arg;
  gc_dev_t *d = s->g->d;
  unsigned char co[64];
  mock_image(co, MOCK_ARCH);
  int n = N;
  double ms;
  void *args[] = {&s->g->a, &s->g->b, &s->p, &n};
  int64_t grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};
  float *buf = s->g->got;
  switch (s->i) {
  case 0: return (void *)(intptr_t)gc_dev_alloc(d, N * 4, &s->p, &s->e);
  case 1: return (void *)(intptr_t)gc_dev_upload(d, s->p, s->g->ha, N * 4, &s->e);
  case 2: return (void *)(intptr_t)gc_dev_memset(d, s->p, 0, N * 4, &s->e);
  case 3: return (void *)(intptr_t)gc_dev_module_load(d, co, sizeof co, &s->m, &s->e);
  case 4: return (void *)(intptr_t)gc_dev_kernel(d, s->m, "vadd", &s->k, &s->e);
  case 5: return (void *)(intptr_t)gc_dev_launch(d, s->k, grid, block, 0, args, &s->e);
  case 6: return (void *)(intptr_t)gc_dev_sync(d, &s->e);
  case 7: return (void *)(intptr_t)gc_dev_download(d, buf, s->p, N * 4, &s->e);
  case 8: return (void *)(intptr_t)gc_dev_event_create(d, &s->ev, &s->e);
  case 9: return (void *)(intptr_t)gc_dev_event_record(d, s->ev, &s->e);
  case 10: return (void *)(intptr_t)gc_dev_event_elapsed(d, s->ev, s->ev, &ms, &s->e);
  case 11: return (void *)(intptr_t)gc_dev_graph_begin(d, &s->e);
  case 12: return (void *)(intptr_t)gc_dev_launch(d, s->k, grid, block, 0, args, &s->e);
  case 13: return (void *)(intptr_t)gc_dev_graph_end(d, &s->x, &s->e);
  case 14: return (void *)(intptr_t)gc_dev_graph_launch(d, s->x, &s->e);
  case 15: gc_dev_graph_destroy(d, s->x); return NULL;
  case 16: gc_dev_event_destroy(d, s->ev); return NULL;
  case 17: gc_dev_module_unload(d, s->m); free(s->k); return NULL;
  case 18: gc_dev_free(d, s->p); return NULL;
  }
  return (void *)-1;
}

static void test_threads(gpu_t *g) {
  step_t s = {.g = g};
  int bad = 0, unbound = mock.unbound, live = live_total();
  for (s.i = 0; s.i <= 18; s.i++) {
    pthread_t t;
    void *r = (void *)-1;
    if (pthread_create(&t, NULL, one_step, &s) || pthread_join(t, &r) || r) {
      printf("FAIL: step %d on a new thread: %s\n", s.i, s.e.msg);
      bad++;
    }
    if (s.i == 7) CHECK(!memcmp(g->got, g->want, N * 4));
  }
  CHECK(bad == 0 && mock.unbound == unbound && live_total() == live);
}

/* A faulting kernel: the fault surfaces at the next call as a launch
 * error naming the vendor's error, whatever the call. */
static void test_fault(gpu_t *g) {
  gc_err_t e = {0};
  gc_dptr_t null = 0;
  void *args[] = {&null};
  CHECK(!launch1d(g, g->fault, 32, 32, 0, args, &e));
  CHECK(gc_dev_sync(g->d, &e) == GC_ELAUNCH);
  CHECK_MSG(e, "mockStreamSynchronize: mockErrorIllegalAddress (illegal memory access)");
  CHECK(gc_dev_memset(g->d, g->c, 0, 4, &e) == GC_ELAUNCH);
  CHECK_MSG(e, "mockMemsetD8Async: mockErrorIllegalAddress (illegal memory access)");
  mock.sticky = 0;
}

static void test_setup(const setup_t *s) {
  printf("mock GPU %s\n", s->name);
  test_open(s);
  gpu_t *g = calloc(1, sizeof *g);
  gc_err_t e = {0};
  g->s = s;
  int rc = mock_open(s, &g->d, &e);
  CHECK(rc == GC_OK && mock.streams == 1);
  if (rc) {
    printf("  open: %s\n", e.msg);
    free(g);
    return;
  }
  test_memory(g);
  test_load(g);
  if (g->mod && g->vadd && g->vacc && g->reverse && g->fault) {
    test_launch(g);
    test_caller_stream(g);
    test_events(g);
    test_graph(g);
    test_threads(g);
    test_fault(g);
  }
  free(g->vadd), free(g->vacc), free(g->reverse), free(g->fault);
  gc_dev_module_unload(g->d, g->mod);
  gc_dev_free(g->d, g->a), gc_dev_free(g->d, g->b), gc_dev_free(g->d, g->c);
  CHECK(live_total() == 0);
  /* close ends a capture left open and destroys what it recorded */
  CHECK(!gc_dev_graph_begin(g->d, &e) && mock.graphs == 1);
  mock_close(g->d);
  CHECK(mock.graphs == 0 && mock.streams == 0);
  CHECK(mock.unbound == 0);
  free(g);
}

/* ---- running ahead: put32, post, take ------------------------------------ */

/* A kernel's own post: the box's device address, its store there (here the
 * host's, as a kernel's would be), a mark, a take; where the boxes are not
 * visible to the device (no page-locked memory), GC_EUNSUPPORTED. */
static void test_kernel_post(gc_dev_t *d, int boxes) {
  gc_err_t e = {0};
  gc_dptr_t at[2] = {0, 0};
  uint32_t v = 0, w = 4242;
  if (!boxes) {
    CHECK(gc_dev_box_addr(d, 0, &at[0], &e) == GC_EUNSUPPORTED);
    CHECK(strstr(e.msg, "boxes are not visible to the device"), "%s", e.msg);
    return;
  }
  CHECK(!gc_dev_box_addr(d, 0, &at[0], &e) && !gc_dev_box_addr(d, 1, &at[1], &e));
  CHECK(at[0] && at[0] % 4 == 0 && at[1] == at[0] + GC_DEV_BOX_BYTES);
  memcpy((void *)(uintptr_t)at[1], &w, sizeof w);
  CHECK(!gc_dev_mark(d, 1, &e) && !gc_dev_take(d, 1, &v, 4, &e) && v == 4242);
  CHECK(gc_dev_take(d, 1, &v, 4, &e) == GC_EINVAL); /* taken */
  CHECK(gc_dev_box_addr(d, GC_DEV_BOXES, &at[0], &e) == GC_EINVAL);
  CHECK_MSG(e, "box_addr: box 4 is not one of 0 .. 3");
  CHECK(gc_dev_mark(d, -1, &e) == GC_EINVAL);
  CHECK_MSG(e, "mark: box -1 is not one of 0 .. 3");
  mock_fail("mockEventRecord", MOCK_INVALID_VALUE);
  CHECK(gc_dev_mark(d, 0, &e) == GC_EDEVICE && gc_dev_take(d, 0, &v, 4, NULL) == GC_EINVAL);
  mock_fail("mockHostGetDevicePointer", MOCK_INVALID_VALUE);
  CHECK(gc_dev_box_addr(d, 2, &at[0], &e) == GC_EDEVICE);
  CHECK_MSG(e, "mockHostGetDevicePointer: mockErrorInvalidValue (invalid argument)");
  CHECK(!gc_dev_graph_begin(d, &e));
  CHECK(gc_dev_mark(d, 0, &e) == GC_EINVAL && strstr(e.msg, "is not allowed while a MOCK"));
  gc_graph_t *x = NULL;
  CHECK(!gc_dev_graph_end(d, &x, &e));
  gc_dev_graph_destroy(d, x);
}

/* On a device of its own: the boxes live until close. */
static void test_ahead(const setup_t *s) {
  gc_err_t e = {0};
  gc_dev_t *d = NULL;
  gc_dptr_t buf = 0;
  int fast = s->api->write32.fn != NULL, boxes = s->api->host_alloc.fn != NULL;
  int untimed = s->api->event_create_untimed.fn != NULL;
  if (mock_open(s, &d, &e) || gc_dev_alloc(d, 64, &buf, &e)) {
    CHECK(!"open");
    return;
  }
  uint32_t got[2] = {0, 0}, v = 0;
  int w0 = mock.write32s, syncs = mock.syncs;
  CHECK(!gc_dev_put32(d, buf + 4, 0xdeadbeefu, &e) && mock.write32s - w0 == fast);
  CHECK(!gc_dev_download(d, got, buf + 4, 4, &e) && got[0] == 0xdeadbeefu);
  CHECK(gc_dev_put32(d, buf + 2, 1, &e) == GC_EINVAL && strstr(e.msg, "is not 4-byte aligned"));
  /* two posts in flight, taken in order; the first makes the boxes */
  syncs = mock.syncs;
  CHECK(!gc_dev_put32(d, buf, 7, &e) && !gc_dev_post(d, 0, buf, 4, &e) && mock.hosts == boxes);
  /* the boxes' events, untimed where the vendor can make them so */
  CHECK(mock.events == boxes * GC_DEV_BOXES && mock.untimed == boxes * untimed * GC_DEV_BOXES);
  CHECK(!gc_dev_put32(d, buf, 8, &e) && !gc_dev_post(d, 1, buf, 8, &e));
  CHECK(mock.syncs - syncs == (boxes ? 0 : 2 + 2 * !fast)); /* the fallback waits for each */
  CHECK(!gc_dev_take(d, 0, &v, 4, &e) && v == 7);
  CHECK(!gc_dev_take(d, 1, got, 8, &e) && got[0] == 8 && got[1] == 0xdeadbeefu);
  CHECK(gc_dev_take(d, 0, &v, 4, &e) == GC_EINVAL);
  CHECK_MSG(e, "take: box 0 is empty");
  CHECK(!gc_dev_post(d, 2, buf, 8, &e) && gc_dev_take(d, 2, &v, 4, &e) == GC_EINVAL);
  CHECK_MSG(e, "take: box 2 holds 8 bytes, not 4");
  CHECK(!gc_dev_post(d, 2, buf, 4, &e) && !gc_dev_take(d, 2, &v, 4, &e) && v == 8); /* replaced */
  CHECK(gc_dev_post(d, GC_DEV_BOXES, buf, 4, &e) == GC_EINVAL);
  CHECK_MSG(e, "post: box 4 is not one of 0 .. 3");
  CHECK(gc_dev_take(d, -1, &v, 4, &e) == GC_EINVAL);
  CHECK_MSG(e, "take: box -1 is not one of 0 .. 3");
  CHECK(gc_dev_post(d, 0, buf, 0, &e) == GC_EINVAL);
  CHECK_MSG(e, "post: 0 bytes; a box holds 1 .. 64");
  CHECK(gc_dev_post(d, 0, buf, 65, &e) == GC_EINVAL);
  /* not in a capture */
  CHECK(!gc_dev_graph_begin(d, &e));
  CHECK(gc_dev_put32(d, buf, 1, &e) == GC_EINVAL && strstr(e.msg, "is not allowed while a MOCK"));
  CHECK(gc_dev_post(d, 0, buf, 4, &e) == GC_EINVAL && strstr(e.msg, "is not allowed while a MOCK"));
  gc_graph_t *x = NULL;
  CHECK(!gc_dev_graph_end(d, &x, &e));
  gc_dev_graph_destroy(d, x);
  /* the vendor's failures, named */
  if (fast) {
    mock_fail("mockStreamWriteValue32", MOCK_INVALID_VALUE);
    CHECK(gc_dev_put32(d, buf, 1, &e) == GC_EDEVICE);
    CHECK_MSG(e, "mockStreamWriteValue32: mockErrorInvalidValue (invalid argument)");
  }
  mock_fail(boxes ? "mockEventRecord" : "mockMemcpyDtoHAsync", MOCK_INVALID_VALUE);
  CHECK(gc_dev_post(d, 3, buf, 4, &e) == GC_EDEVICE && gc_dev_take(d, 3, &v, 4, NULL) == GC_EINVAL);
  if (boxes) {
    CHECK(!gc_dev_post(d, 3, buf, 4, &e));
    mock_fail("mockEventSynchronize", MOCK_INVALID_VALUE);
    CHECK(gc_dev_take(d, 3, &v, 4, &e) == GC_EDEVICE);
    CHECK_MSG(e, "mockEventSynchronize: mockErrorInvalidValue (invalid argument)");
  }
  test_kernel_post(d, boxes);
  gc_dev_free(d, buf);
  mock_close(d);
  CHECK(mock.hosts == 0 && mock.events == 0 && mock.streams == 0);
  if (!boxes) return;
  /* the boxes' own failures leave nothing behind, and the next post makes them */
  const char *fails[] = {"mockHostAlloc", untimed ? "mockEventCreateUntimed" : "mockEventCreate"};
  for (int i = 0; i < 2; i++) {
    if (mock_open(s, &d, &e) || gc_dev_alloc(d, 64, &buf, &e)) {
      CHECK(!"open");
      return;
    }
    mock_fail(fails[i], MOCK_OOM);
    CHECK(gc_dev_post(d, 0, buf, 4, &e) == GC_EDEVICE && !mock.hosts && !mock.events);
    CHECK(!strncmp(e.msg, fails[i], strlen(fails[i])), "%s", e.msg);
    CHECK(!gc_dev_post(d, 0, buf, 4, &e) && !gc_dev_take(d, 0, &v, 4, &e) && mock.hosts == 1);
    gc_dev_free(d, buf);
    mock_close(d);
    CHECK(mock.hosts == 0 && mock.events == 0);
  }
}

/* ---- a failure at every vendor call ------------------------------------ */

/* Everything a timed, captured step does. Returns the first error. */
static int workload(gc_dev_t *d, gc_err_t *e) {
  unsigned char co[64];
  mock_image(co, MOCK_ARCH);
  float h[64] = {1.0f}, back[64];
  gc_dptr_t a = 0, c = 0;
  gc_module_t *m = NULL;
  gc_kernel_t *k = NULL, *r = NULL;
  gc_event_t *t0 = NULL, *t1 = NULL;
  gc_graph_t *x = NULL;
  int n = 64, big = 14000, rc; /* 56000 bytes: an opt-in on CUDA, within HIP's 64 KiB */
  void *args[] = {&a, &c, &n}, *rargs[] = {&c, &big};
  int64_t grid[3] = {1, 1, 1}, block[3] = {64, 1, 1};
  double ms;
  (void)((rc = gc_dev_alloc(d, sizeof h, &a, e)) || (rc = gc_dev_alloc(d, 56000, &c, e)) ||
      (rc = gc_dev_upload(d, a, h, sizeof h, e)) || (rc = gc_dev_memset(d, c, 0, 56000, e)) ||
      (rc = gc_dev_module_load(d, co, sizeof co, &m, e)) ||
      (rc = gc_dev_kernel(d, m, "vacc", &k, e)) || (rc = gc_dev_kernel(d, m, "reverse", &r, e)) ||
      (rc = gc_dev_event_create(d, &t0, e)) || (rc = gc_dev_event_create(d, &t1, e)) ||
      (rc = gc_dev_event_record(d, t0, e)) ||
      (rc = gc_dev_launch(d, r, grid, block, (size_t)big * 4, rargs, e)) ||
      (rc = gc_dev_graph_begin(d, e)) || (rc = gc_dev_launch(d, k, grid, block, 0, args, e)) ||
      (rc = gc_dev_graph_end(d, &x, e)) || (rc = gc_dev_graph_launch(d, x, e)) ||
      (rc = gc_dev_event_record(d, t1, e)) || (rc = gc_dev_event_elapsed(d, t0, t1, &ms, e)) ||
      (rc = gc_dev_download(d, back, c, sizeof back, e)) || (rc = gc_dev_sync(d, e)));
  if (x) gc_dev_graph_destroy(d, x);
  if (d && ((gc_gpu_dev_t *)d)->capturing) gc_dev_graph_end(d, &x, NULL);
  gc_dev_event_destroy(d, t0), gc_dev_event_destroy(d, t1);
  free(k), free(r);
  gc_dev_module_unload(d, m);
  gc_dev_free(d, a), gc_dev_free(d, c);
  return rc;
}

static void test_every_call(const setup_t *s) {
  static const char *const calls[] = {
      "mockSetDevice",       "mockMalloc",           "mockMemcpyHtoDAsync",
      "mockMemsetD8Async",   "mockModuleLoadData",   "mockModuleGetFunction",
      "mockEventCreate",     "mockEventRecord",      "mockFuncSetAttribute",
      "mockLaunchKernel",    "mockStreamBeginCapture", "mockStreamEndCapture",
      "mockGraphInstantiate", "mockGraphLaunch",     "mockEventSynchronize",
      "mockEventElapsedTime", "mockMemcpyDtoHAsync", "mockStreamSynchronize",
  };
  gc_err_t e = {0};
  gc_dev_t *d = NULL;
  if (mock_open(s, &d, &e)) {
    CHECK(!"open");
    return;
  }
  CHECK(!workload(d, &e));
  int named = 0, tried = 0;
  for (size_t i = 0; i < GC_ARRAY_LEN(calls); i++) {
    if (!strcmp(calls[i], "mockFuncSetAttribute") && !s->api->func_set_shmem.fn) continue;
    tried++;
    mock_fail(calls[i], MOCK_INVALID_VALUE);
    e = (gc_err_t){0};
    int rc = workload(d, &e);
    size_t len = strlen(calls[i]);
    int ok = rc != GC_OK && !mock.fail && !strncmp(e.msg, calls[i], len) && e.msg[len] == ':' &&
             live_total() == 0 && !((gc_gpu_dev_t *)d)->capturing;
    if (!ok)
      printf("FAIL: %s failing: %s %s (%d live)\n", calls[i], gc_err_name(rc), e.msg, live_total());
    named += ok;
    mock.fail = NULL;
  }
  CHECK(named == tried);
  printf("  a failure at each of %d calls: each named, nothing left behind\n", tried);
  mock_close(d);
  CHECK(mock.streams == 0 && mock.unbound == 0);
}

/* ---- the vendors' code-object checks ----------------------------------- */

/* An ELF64 for machine with nsec section headers after its header, the
 * last section's data at its end. */
static unsigned char *elf(unsigned machine, int nsec, size_t *n) {
  size_t shoff = 64, data = shoff + 64 * (size_t)nsec;
  *n = data + 16;
  unsigned char *p = calloc(1, *n);
  memcpy(p, "\177ELF", 4);
  p[4] = 2, p[5] = 1, p[18] = machine & 0xff, p[19] = machine >> 8;
  p[0x28] = (unsigned char)shoff;
  p[0x3a] = 64, p[0x3c] = (unsigned char)nsec;
  for (int i = 0; i < nsec; i++) {
    unsigned char *h = p + shoff + 64 * i;
    h[4] = 1;                                  /* PROGBITS */
    h[24] = (unsigned char)data, h[25] = (unsigned char)(data >> 8); /* offset */
    h[32] = 16;                                /* size */
  }
  return p;
}

static void test_code_checks(void) {
  printf("code-object checks\n");
  gc_err_t e = {0};
  size_t n;
  unsigned char *cubin = elf(190, 3, &n), *amd = elf(224, 3, &n);
  CHECK(gc_cuda_check_cubin(cubin, n, &e) == GC_OK && gc_hip_check_code_object(amd, n, &e) == GC_OK);
  CHECK(gc_cuda_check_cubin(amd, n, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "code object is not a cubin: ELF for machine 224, not NVIDIA CUDA (190)");
  CHECK(gc_hip_check_code_object(cubin, n, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "code object is not an AMDGPU code object: ELF for machine 190, not AMDGPU (224)");
  static const char text[80] = "just text";
  CHECK(gc_cuda_check_cubin(text, sizeof text, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "code object is not a cubin: not an ELF file (80 bytes)");
  CHECK(gc_hip_check_code_object(NULL, 0, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "code object is not an AMDGPU code object: not an ELF file (0 bytes)");
  CHECK(gc_cuda_check_cubin(cubin, 64 + 64 * 3 - 1, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "cubin is truncated or corrupt (headers past its end)");
  CHECK(gc_hip_check_code_object(amd, 64 + 64 * 3 - 1, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "AMDGPU code object is truncated or corrupt (headers past its end)");
  CHECK(gc_cuda_check_cubin(cubin, n - 1, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "cubin is truncated or corrupt (section 0 past its end)");
  amd[64 + 64 + 32] = 17; /* section 1 one byte longer than the file */
  CHECK(gc_hip_check_code_object(amd, n, &e) == GC_ECORRUPT);
  CHECK_MSG(e, "AMDGPU code object is truncated or corrupt (section 1 past its end)");
  amd[64 + 64 + 4] = 8; /* NOBITS: takes no room in the file */
  CHECK(gc_hip_check_code_object(amd, n, &e) == GC_OK);
  free(cubin), free(amd);
}

int main(void) {
  for (size_t i = 0; i < GC_ARRAY_LEN(setups); i++) {
    test_setup(&setups[i]);
    test_every_call(&setups[i]);
    test_ahead(&setups[i]);
    /* a vendor without untimed events: the boxes fall back to timed ones */
    gc_gpu_api_t timed = *setups[i].api;
    setup_t s = setups[i];
    timed.event_create_untimed.fn = NULL, s.api = &timed;
    if (setups[i].api->event_create_untimed.fn) test_ahead(&s);
  }
  test_code_checks();
  return check_report();
}
