/* hip.c — the hip backend: AMD GPUs through the HIP runtime API, with
 * libamdhip64 dlopen'd at run time (.so, .so.6, .so.5) so one binary runs
 * with or without ROCm. Each device is set current on whichever thread
 * calls and gets one non-blocking stream.
 *
 * What is HIP's own is here: loading the runtime and filling the GPU
 * skeleton's table of calls (hip_fill_gpu, with wrappers where HIP's
 * signatures differ), the errors' names, meanings and kinds, device
 * discovery and info (gcnArchName through either hipDeviceProp_t layout),
 * target-id matching with features, and the AMDGPU code-object check.
 * Memory, modules, kernels, launches, sync, events and graph capture are
 * the skeleton's (gpu.c), the code the cuda backend runs on NVIDIA GPUs
 * and tests/c/test_gpu.c runs on a mock GPU.
 *
 * Without an AMD GPU open fails with one line saying which piece is
 * missing: the library, /dev/kfd (the amdgpu kernel driver), or a device
 * (the HIP error's name and meaning). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_impl.h"

/* ---- the runtime API, as its ABI is documented (hip_runtime_api.h) ---- */

typedef int hipError_t;
typedef int hipDevice_t;
typedef void *hipModule_t, *hipFunction_t, *hipStream_t, *hipEvent_t, *hipGraph_t,
    *hipGraphExec_t, *hipGraphNode_t;

enum {
  hipSuccess = 0,
  hipErrorOutOfMemory = 2,
  hipErrorInsufficientDriver = 35,
  hipErrorNoDevice = 100,
  hipErrorInvalidDevice = 101,
  hipErrorInvalidImage = 200,
  hipErrorNoBinaryForGpu = 209,
  hipErrorInvalidKernelFile = 218,
  hipErrorNotFound = 500,
  /* hipDeviceAttribute_t: the same values in ROCm 5.x and 6.x headers
   * (checked against 5.2's hip_runtime_api.h and 6.x's). */
  hipDeviceAttributeMaxThreadsPerBlock = 56,
  hipDeviceAttributeMultiprocessorCount = 63,
  hipDeviceAttributeMaxSharedMemoryPerBlock = 74,
  hipDeviceAttributeWarpSize = 87,
  hipStreamNonBlocking = 1,
  hipStreamCaptureModeThreadLocal = 1,
  hipEventDisableTiming = 2,
  EM_AMDGPU = 224,
};

/* hipDeviceProp_t changed layout in ROCm 6. The library exports the ROCm
 * 6 layout as hipGetDevicePropertiesR0600 and keeps hipGetDeviceProperties
 * with the old (R0000) layout; a ROCm 5 library has only the latter. The
 * one field needed from it is gcnArchName (the arch with its features,
 * "gfx942:sramecc+:xnack-"), char[256] at byte 1160 of R0600 and 396 of
 * R0000 (offsetof in the 6.x and 5.2 headers). The struct is filled into
 * a buffer larger than either layout (1472 and 792 bytes). */
enum { PROP_BYTES = 8192, ARCH_OFF_R0600 = 1160, ARCH_OFF_R0000 = 396 };

typedef struct hip_api {
  void *lib;
  const char *(*GetErrorName)(hipError_t);
  const char *(*GetErrorString)(hipError_t);
  hipError_t (*Init)(unsigned);
  hipError_t (*RuntimeGetVersion)(int *);
  hipError_t (*GetDeviceCount)(int *);
  hipError_t (*DeviceGet)(hipDevice_t *, int);
  hipError_t (*DeviceGetName)(char *, int, hipDevice_t);
  hipError_t (*DeviceGetAttribute)(int *, int, int);
  hipError_t (*DeviceTotalMem)(size_t *, hipDevice_t);
  hipError_t (*GetDeviceProperties)(void *, int);
  hipError_t (*SetDevice)(int);
  hipError_t (*StreamCreateWithFlags)(hipStream_t *, unsigned);
  hipError_t (*StreamDestroy)(hipStream_t);
  hipError_t (*StreamSynchronize)(hipStream_t);
  hipError_t (*Malloc)(void **, size_t);
  hipError_t (*Free)(void *);
  hipError_t (*MemGetInfo)(size_t *, size_t *);
  hipError_t (*MemcpyHtoDAsync)(void *, void *, size_t, hipStream_t);
  hipError_t (*MemcpyDtoHAsync)(void *, void *, size_t, hipStream_t);
  hipError_t (*MemsetD8Async)(void *, unsigned char, size_t, hipStream_t);
  hipError_t (*MemcpyDtoDAsync)(void *, void *, size_t, hipStream_t);
  hipError_t (*ModuleLoadData)(hipModule_t *, const void *);
  hipError_t (*ModuleUnload)(hipModule_t);
  hipError_t (*ModuleGetFunction)(hipFunction_t *, hipModule_t, const char *);
  hipError_t (*ModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, unsigned, hipStream_t, void **,
                                   void **);
  hipError_t (*EventCreate)(hipEvent_t *);
  hipError_t (*EventCreateWithFlags)(hipEvent_t *, unsigned);
  hipError_t (*EventDestroy)(hipEvent_t);
  hipError_t (*EventRecord)(hipEvent_t, hipStream_t);
  hipError_t (*EventSynchronize)(hipEvent_t);
  hipError_t (*EventElapsedTime)(float *, hipEvent_t, hipEvent_t);
  hipError_t (*StreamBeginCapture)(hipStream_t, int);
  hipError_t (*StreamEndCapture)(hipStream_t, hipGraph_t *);
  hipError_t (*GraphInstantiate)(hipGraphExec_t *, hipGraph_t, hipGraphNode_t *, char *,
                                 size_t);
  hipError_t (*GraphLaunch)(hipGraphExec_t, hipStream_t);
  hipError_t (*GraphExecDestroy)(hipGraphExec_t);
  hipError_t (*GraphDestroy)(hipGraph_t);
  /* optional: page-locked host memory */
  hipError_t (*HostMalloc)(void **, size_t, unsigned);
  hipError_t (*HostFree)(void *);
  int arch_off; /* where gcnArchName lies in what GetDeviceProperties fills */
} hip_api_t;

/* Loaded once and kept: unloading the runtime under live streams is unsafe. */
static pthread_mutex_t hip_mu = PTHREAD_MUTEX_INITIALIZER;
static hip_api_t hip;
static gc_gpu_api_t hip_gpu; /* the skeleton's table, filled from hip */
static void hip_fill_gpu(gc_gpu_api_t *g);

static const struct hip_sym {
  const char *name;
  size_t off;
} hip_syms[] = {
#define S(field) {"hip" #field, offsetof(hip_api_t, field)}
    S(GetErrorName),       S(GetErrorString),     S(Init),
    S(RuntimeGetVersion),  S(GetDeviceCount),     S(DeviceGet),
    S(DeviceGetName),      S(DeviceGetAttribute), S(DeviceTotalMem),
    S(SetDevice),          S(StreamCreateWithFlags), S(StreamDestroy),
    S(StreamSynchronize),  S(Malloc),             S(Free),
    S(MemGetInfo),         S(MemcpyHtoDAsync),    S(MemcpyDtoHAsync),
    S(MemsetD8Async),      S(MemcpyDtoDAsync),    S(ModuleLoadData),     S(ModuleUnload),
    S(ModuleGetFunction),  S(ModuleLaunchKernel), S(EventCreate), S(EventCreateWithFlags),
    S(EventDestroy),       S(EventRecord),        S(EventSynchronize),
    S(EventElapsedTime),   S(StreamBeginCapture), S(StreamEndCapture),
    S(GraphInstantiate),   S(GraphLaunch),        S(GraphExecDestroy),
    S(GraphDestroy),
#undef S
};

/* The first of the library names that opens; NULL and *why set if none. */
static void *hip_dlopen(char *why, size_t n) {
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
  for (size_t i = 0; i < GC_ARRAY_LEN(names); i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    if (i == 0) snprintf(why, n, "%s", dlerror());
  }
  return NULL;
}

/* Every entry point, and the device-properties call by its layout. */
static int hip_bind_syms(void *h, hip_api_t *api, gc_err_t *e) {
  for (size_t i = 0; i < GC_ARRAY_LEN(hip_syms); i++) {
    void *f = dlsym(h, hip_syms[i].name);
    if (!f)
      return gc_err_set(e, GC_EDEVICE, "AMD GPU runtime too old: libamdhip64 has no %s",
                        hip_syms[i].name);
    memcpy((char *)api + hip_syms[i].off, &f, sizeof f);
  }
  void *f = dlsym(h, "hipGetDevicePropertiesR0600");
  api->arch_off = ARCH_OFF_R0600;
  if (!f) {
    f = dlsym(h, "hipGetDeviceProperties");
    api->arch_off = ARCH_OFF_R0000;
  }
  if (!f)
    return gc_err_set(e, GC_EDEVICE, "AMD GPU runtime unusable: libamdhip64 has no "
                      "hipGetDeviceProperties");
  memcpy(&api->GetDeviceProperties, &f, sizeof f);
  void *ha = dlsym(h, "hipHostMalloc"), *hf = dlsym(h, "hipHostFree");
  if (ha && hf) { /* optional, both or neither */
    memcpy(&api->HostMalloc, &ha, sizeof ha);
    memcpy(&api->HostFree, &hf, sizeof hf);
  }
  return GC_OK;
}

static int hip_load(gc_err_t *e) {
  pthread_mutex_lock(&hip_mu);
  int rc = GC_OK;
  if (!hip.lib) {
    char why[512] = "";
    void *h = hip_dlopen(why, sizeof why);
    if (!h) {
      rc = gc_err_set(e, GC_EDEVICE, "no AMD GPU runtime: libamdhip64.so not found (dlopen: %s)",
                      why);
    } else {
      hip_api_t api = {.lib = h};
      rc = hip_bind_syms(h, &api, e);
      if (rc) {
        dlclose(h);
      } else {
        hip = api;
        hip_fill_gpu(&hip_gpu);
      }
    }
  }
  pthread_mutex_unlock(&hip_mu);
  return rc;
}

/* What an error means where the runtime's own string only repeats its
 * name (ROCm 5 does that for most). */
static const char *hip_meaning(hipError_t r) {
  switch (r) {
  case hipErrorNoDevice: return "no ROCm-capable device is detected";
  case hipErrorInvalidDevice: return "the runtime found no usable GPU agent";
  case hipErrorInsufficientDriver: return "the amdgpu kernel driver is older than the runtime";
  case hipErrorNoBinaryForGpu: return "the code object is not for this GPU's ISA";
  case hipErrorInvalidImage:
  case hipErrorInvalidKernelFile: return "the code object is not a valid one for this runtime";
  default: return NULL;
  }
}

/* "hipErrorX (meaning)" for r, into buf. */
static void hip_describe(hipError_t r, char *buf, size_t n) {
  const char *name = hip.GetErrorName(r), *str = hip.GetErrorString(r);
  if (!name) name = "unknown HIP error";
  if (!str || !strcmp(str, name) || !str[0]) str = hip_meaning(r);
  if (str) snprintf(buf, n, "%s (%s)", name, str);
  else snprintf(buf, n, "%s (%d)", name, r);
}

/* Faults are the errors a faulting kernel leaves behind (the device is
 * then unusable). */
static int hip_classify(hipError_t r) {
  switch (r) {
  case 700: case 701: case 702: case 710: case 719: return GC_GPU_R_FAULT;
  case hipErrorOutOfMemory: return GC_GPU_R_OOM;
  case hipErrorNotFound: return GC_GPU_R_NOT_FOUND;
  case hipErrorNoBinaryForGpu: case hipErrorInvalidImage: case hipErrorInvalidKernelFile:
    return GC_GPU_R_WRONG_ISA;
  default: return GC_GPU_R_OTHER;
  }
}

/* Call hip.fn(...) and return the failure, named "hip<fn>", from the caller. */
#define HIP_TRY(e, code, fn, ...)                                                  \
  do {                                                                             \
    hipError_t r_ = hip.fn(__VA_ARGS__);                                           \
    if (r_ != hipSuccess) return gc_gpu_fail(&hip_gpu, e, code, r_, "hip" #fn);    \
  } while (0)

/* ---- device ---------------------------------------------------------- */

typedef struct hip_dev {
  gc_gpu_dev_t gpu; /* max_shmem: LDS bytes a block may use (64 KiB on gfx9/gfx11) */
  int ordinal;
  int warp;         /* wavefront size: 64 on CDNA, 32 on RDNA */
} hip_dev_t;

/* "no AMD GPU: <call> returned hipErrorX (n): meaning", adding what
 * /dev/kfd says, since a missing kfd is the usual cause. */
static int hip_no_device(gc_err_t *e, const char *call, hipError_t r) {
  char what[256];
  const char *kfd = access("/dev/kfd", R_OK | W_OK) == 0 ? ""
                    : access("/dev/kfd", F_OK) == 0
                        ? "; /dev/kfd is not readable and writable by this user (add it to the "
                          "'render' group)"
                        : "; /dev/kfd does not exist (the amdgpu kernel driver is not loaded, or "
                          "the container was started without --device=/dev/kfd)";
  hip_describe(r, what, sizeof what);
  return gc_err_set(e, GC_EDEVICE, "no AMD GPU: %s returned %s, code %d%s", call, what, r, kfd);
}

static int hip_find_device(int ordinal, gc_err_t *e) {
  hipError_t r = hip.Init(0);
  if (r != hipSuccess) return hip_no_device(e, "hipInit", r);
  int count = 0;
  r = hip.GetDeviceCount(&count);
  if (r != hipSuccess) return hip_no_device(e, "hipGetDeviceCount", r);
  if (ordinal < 0 || ordinal >= count)
    return gc_err_set(e, GC_EDEVICE, "no AMD GPU with ordinal %d (found %d)", ordinal, count);
  return GC_OK;
}

/* info.arch from gcnArchName ("gfx942:sramecc+:xnack-"); info.target is
 * its processor, the gcore-gen target whose code runs on any features. */
static int hip_fill_arch(hip_dev_t *d, gc_err_t *e) {
  gc_dev_info_t *in = &d->gpu.base.info;
  char *prop = gc_calloc(1, PROP_BYTES, e);
  if (!prop) return GC_ENOMEM;
  hipError_t r = hip.GetDeviceProperties(prop, d->ordinal);
  const char *arch = prop + hip.arch_off;
  int ok = r == hipSuccess && !strncmp(arch, "gfx", 3) && memchr(arch, 0, 256);
  if (ok) snprintf(in->arch, sizeof in->arch, "%s", arch);
  free(prop);
  if (r != hipSuccess) return gc_gpu_fail(&hip_gpu, e, GC_EDEVICE, r, "hipGetDeviceProperties");
  if (!ok)
    return gc_err_set(e, GC_EDEVICE, "AMD GPU runtime: hipGetDeviceProperties gave no gfx "
                      "architecture name (unknown hipDeviceProp_t layout)");
  snprintf(in->target, sizeof in->target, "%.*s", (int)strcspn(in->arch, ":"), in->arch);
  return GC_OK;
}

static int hip_fill_info(hip_dev_t *d, gc_err_t *e) {
  gc_dev_info_t *in = &d->gpu.base.info;
  int cus = 0, ver = 0;
  size_t mem = 0;
  hipDevice_t dev = 0;
  const struct { int attr, *out; } attrs[] = {
      {hipDeviceAttributeMultiprocessorCount, &cus},
      {hipDeviceAttributeMaxSharedMemoryPerBlock, &d->gpu.max_shmem},
      {hipDeviceAttributeWarpSize, &d->warp},
  };
  for (size_t i = 0; i < GC_ARRAY_LEN(attrs); i++)
    HIP_TRY(e, GC_EDEVICE, DeviceGetAttribute, attrs[i].out, attrs[i].attr, d->ordinal);
  HIP_TRY(e, GC_EDEVICE, DeviceGet, &dev, d->ordinal);
  HIP_TRY(e, GC_EDEVICE, DeviceTotalMem, &mem, dev);
  HIP_TRY(e, GC_EDEVICE, RuntimeGetVersion, &ver);
  HIP_TRY(e, GC_EDEVICE, DeviceGetName, in->name, (int)sizeof in->name, dev);
  in->name[sizeof in->name - 1] = 0;
  strcpy(in->backend, "hip");
  in->compute_units = cus;
  in->mem_bytes = (int64_t)mem;
  /* HIP_VERSION = major·10^7 + minor·10^5 + patch */
  snprintf(in->driver, sizeof in->driver, "hip runtime %d.%d.%d", ver / 10000000,
           ver / 100000 % 100, ver % 100000);
  in->host_memory = 0;
  return hip_fill_arch(d, e);
}

static int hip_open(int ordinal, gc_dev_t **out, gc_err_t *e) {
  *out = NULL;
  int rc = hip_load(e);
  if (!rc) rc = hip_find_device(ordinal, e);
  if (rc) return rc;
  hip_dev_t *d = gc_calloc(1, sizeof *d, e);
  if (!d) return GC_ENOMEM;
  d->gpu.base.ops = &gc_hip_ops;
  d->gpu.api = &hip_gpu;
  d->ordinal = ordinal;
  if ((rc = gc_gpu_bind(&d->gpu, e)) || (rc = hip_fill_info(d, e)) ||
      (rc = gc_gpu_start(&d->gpu, e))) {
    free(d);
    return rc;
  }
  *out = &d->gpu.base;
  return GC_OK;
}

/* The state ('+', '-', or 0 when unstated) of feature f ("xnack") in a
 * target id "gfxNNN[:feat±]...". */
static char feature_state(const char *id, const char *f) {
  size_t n = strlen(f);
  for (const char *p = strchr(id, ':'); p; p = strchr(p + 1, ':'))
    if (!strncmp(p + 1, f, n) && (p[1 + n] == '+' || p[1 + n] == '-')) return p[1 + n];
  return 0;
}

/* Each ":feat±" of target must be a well-formed feature the device
 * states the same way. */
static int features_match(const char *dev_arch, const char *target) {
  for (const char *p = strchr(target, ':'); p; p = strchr(p + 1, ':')) {
    size_t n = strcspn(p + 1, ":");
    char f[32];
    if (n < 2 || n >= sizeof f) return 0;
    memcpy(f, p + 1, n - 1);
    f[n - 1] = 0;
    char want = p[n];
    if ((want != '+' && want != '-') || feature_state(dev_arch, f) != want) return 0;
  }
  return 1;
}

int gc_hip_target_runs(const char *dev_arch, const char *target) {
  if (!dev_arch || !target || strncmp(target, "gfx", 3)) return 0;
  size_t pn = strcspn(target, ":"), dn = strcspn(dev_arch, ":");
  if (pn <= 3 || pn != dn || strncmp(target, dev_arch, pn)) return 0;
  return features_match(dev_arch, target);
}

static int hip_runs_target(const gc_dev_t *dev, const char *target) {
  return gc_hip_target_runs(dev->info.arch, target);
}

/* ---- code ------------------------------------------------------------ */

/* clang and comgr emit ELF64 for EM_AMDGPU. */
int gc_hip_check_code_object(const void *code, size_t n, gc_err_t *e) {
  static const gc_gpu_elf_t co = {EM_AMDGPU, "AMDGPU", "an AMDGPU code object",
                                  "AMDGPU code object"};
  return gc_gpu_check_elf(code, n, &co, e);
}

/* ---- the skeleton's table -------------------------------------------- */

/* Wrappers where HIP's signature is not the skeleton's: the current
 * device instead of a context, void * device addresses, the capture mode
 * and instantiate's error-node arguments. */
static hipError_t hip_bind(gc_gpu_dev_t *d) { return hip.SetDevice(((hip_dev_t *)d)->ordinal); }
static hipError_t hip_stream_create(void **s) {
  return hip.StreamCreateWithFlags(s, hipStreamNonBlocking);
}
static hipError_t hip_mem_alloc(gc_gpu_ptr_t *p, size_t n) {
  void *q = NULL;
  hipError_t r = hip.Malloc(&q, n);
  *p = (gc_gpu_ptr_t)(uintptr_t)q;
  return r;
}
static hipError_t hip_mem_free(gc_gpu_ptr_t p) { return hip.Free((void *)(uintptr_t)p); }
static hipError_t hip_copy_htod(gc_gpu_ptr_t dst, const void *src, size_t n, void *s) {
  return hip.MemcpyHtoDAsync((void *)(uintptr_t)dst, (void *)src, n, s);
}
static hipError_t hip_copy_dtoh(void *dst, gc_gpu_ptr_t src, size_t n, void *s) {
  return hip.MemcpyDtoHAsync(dst, (void *)(uintptr_t)src, n, s);
}
static hipError_t hip_memset8(gc_gpu_ptr_t dst, unsigned char byte, size_t n, void *s) {
  return hip.MemsetD8Async((void *)(uintptr_t)dst, byte, n, s);
}
static hipError_t hip_copy_dtod(gc_gpu_ptr_t dst, gc_gpu_ptr_t src, size_t n, void *s) {
  return hip.MemcpyDtoDAsync((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n, s);
}
static hipError_t hip_host_alloc(void **p, size_t n) { return hip.HostMalloc(p, n, 0); }
/* the boxes' events, waited on and never timed */
static hipError_t hip_event_create_untimed(void **ev) { return hip.EventCreateWithFlags(ev, hipEventDisableTiming); }
static hipError_t hip_capture_begin(void *s) {
  return hip.StreamBeginCapture(s, hipStreamCaptureModeThreadLocal);
}
static hipError_t hip_graph_instantiate(void **x, void *g) {
  return hip.GraphInstantiate(x, g, NULL, NULL, 0);
}

static void hip_fill_gpu(gc_gpu_api_t *g) {
  *g = (gc_gpu_api_t){
      .vendor = "HIP",
      .shmem_what = "dynamic shared memory (LDS)",
      .wrong_isa = "code object was not built for this",
      .upload_waits = 1, /* an async copy from pageable src may not have read it yet */
      .describe = hip_describe,
      .classify = hip_classify,
      .check_code = gc_hip_check_code_object,
      .bind = {hip_bind, "hipSetDevice"},
      .stream_create = {hip_stream_create, "hipStreamCreateWithFlags"},
      .stream_destroy = {hip.StreamDestroy, "hipStreamDestroy"},
      .stream_sync = {hip.StreamSynchronize, "hipStreamSynchronize"},
      .mem_alloc = {hip_mem_alloc, "hipMalloc"},
      .mem_free = {hip_mem_free, "hipFree"},
      .mem_info = {hip.MemGetInfo, "hipMemGetInfo"},
      .copy_htod = {hip_copy_htod, "hipMemcpyHtoDAsync"},
      .copy_dtoh = {hip_copy_dtoh, "hipMemcpyDtoHAsync"},
      .memset8 = {hip_memset8, "hipMemsetD8Async"},
      .copy_dtod = {hip_copy_dtod, "hipMemcpyDtoDAsync"},
      .module_load = {hip.ModuleLoadData, "hipModuleLoadData"},
      .module_unload = {hip.ModuleUnload, "hipModuleUnload"},
      .module_function = {hip.ModuleGetFunction, "hipModuleGetFunction"},
      /* no opt-in for more LDS: func_shmem, func_set_shmem stay NULL */
      .launch = {hip.ModuleLaunchKernel, "hipModuleLaunchKernel"},
      /* no programmatic dependent launch: launch_pdl stays NULL */
      .event_create = {hip.EventCreate, "hipEventCreate"},
      .event_create_untimed = {hip_event_create_untimed, "hipEventCreateWithFlags"},
      .event_destroy = {hip.EventDestroy, "hipEventDestroy"},
      .event_record = {hip.EventRecord, "hipEventRecord"},
      .event_sync = {hip.EventSynchronize, "hipEventSynchronize"},
      .event_elapsed = {hip.EventElapsedTime, "hipEventElapsedTime"},
      .capture_begin = {hip_capture_begin, "hipStreamBeginCapture"},
      .capture_end = {hip.StreamEndCapture, "hipStreamEndCapture"},
      .graph_instantiate = {hip_graph_instantiate, "hipGraphInstantiate"},
      .graph_destroy = {hip.GraphDestroy, "hipGraphDestroy"},
      .graph_launch = {hip.GraphLaunch, "hipGraphLaunch"},
      .graph_exec_destroy = {hip.GraphExecDestroy, "hipGraphExecDestroy"},
      /* no write32: hipStreamWriteValue32 is beta in ROCm 5 and 6 and has
       * not run here (no AMD GPU), so put32 is the upload that waits: the
       * host then does not run ahead of the device, and nothing else changes */
      .host_alloc = {hip.HostMalloc ? hip_host_alloc : NULL, "hipHostMalloc"},
      .host_free = {hip.HostFree, "hipHostFree"},
      /* no host_dptr: a kernel's own post (gc_dev_box_addr) has not run on
       * an AMD GPU here, so greedy decoding posts its id with a copy */
      .release = NULL, /* memory and modules not freed by the caller stay with the process */
  };
}

const gc_dev_ops_t gc_hip_ops = {
    .name = "hip",
    .open = hip_open,
    .runs_target = hip_runs_target,
    .page_size = NULL, /* no page protection: runtime/check.c's guard patterns */
    .protect = NULL,
    .kernel_pdl = NULL,  /* HIP has no programmatic dependent launch */
    .tmap_encode = NULL, /* AMD has no tensor-map copy engine */
    .flush = NULL,       /* a memset (no hand-written read kernel for AMD yet) */
    GC_GPU_OPS,          /* memory, code, launches, sync, events, graphs: gpu.c */
};
