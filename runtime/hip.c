/* hip.c — the hip backend: AMD GPUs through the HIP runtime API, with
 * libamdhip64 dlopen'd at run time (.so, .so.6, .so.5) so one binary runs
 * with or without ROCm. Each device gets one non-blocking stream; every
 * operation is ordered on it, and downloads wait for it. Code objects
 * (AMDGPU ELF, as clang/comgr emit them) load with hipModuleLoadData;
 * graphs are stream capture + hipGraphInstantiate/Launch. Mirrors cuda.c.
 *
 * Without an AMD GPU open fails with one line saying which piece is
 * missing: the library, /dev/kfd (the amdgpu kernel driver), or a device
 * (the HIP error's name and meaning). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dev_impl.h"

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
  hipError_t (*ModuleLoadData)(hipModule_t *, const void *);
  hipError_t (*ModuleUnload)(hipModule_t);
  hipError_t (*ModuleGetFunction)(hipFunction_t *, hipModule_t, const char *);
  hipError_t (*ModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, unsigned, hipStream_t, void **,
                                   void **);
  hipError_t (*EventCreate)(hipEvent_t *);
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
  int arch_off; /* where gcnArchName lies in what GetDeviceProperties fills */
} hip_api_t;

/* Loaded once and kept: unloading the runtime under live streams is unsafe. */
static pthread_mutex_t hip_mu = PTHREAD_MUTEX_INITIALIZER;
static hip_api_t hip;

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
    S(MemsetD8Async),      S(ModuleLoadData),     S(ModuleUnload),
    S(ModuleGetFunction),  S(ModuleLaunchKernel), S(EventCreate),
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
      if (rc) dlclose(h);
      else hip = api;
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
static const char *hip_describe(hipError_t r, char *buf, size_t n) {
  const char *name = hip.GetErrorName(r), *str = hip.GetErrorString(r);
  if (!name) name = "unknown HIP error";
  if (!str || !strcmp(str, name) || !str[0]) str = hip_meaning(r);
  if (str) snprintf(buf, n, "%s (%s)", name, str);
  else snprintf(buf, n, "%s (%d)", name, r);
  return buf;
}

/* Errors a faulting kernel leaves behind (the device is then unusable). */
static int hip_kernel_fault(hipError_t r) {
  return r == 700 || r == 701 || r == 702 || r == 710 || r == 719;
}

/* Set e for a failed runtime call: "call: hipErrorX (meaning)". Kernel
 * faults surfacing here are launch errors whatever the call. */
static int hip_fail(gc_err_t *e, int code, hipError_t r, const char *call) {
  char what[256];
  if (hip_kernel_fault(r)) code = GC_ELAUNCH;
  return gc_err_set(e, code, "%s: %s", call, hip_describe(r, what, sizeof what));
}

/* Call hip.fn(...) and return the failure, named "hip<fn>", from the caller. */
#define HIP_TRY(e, code, fn, ...)                                       \
  do {                                                                  \
    hipError_t r_ = hip.fn(__VA_ARGS__);                                \
    if (r_ != hipSuccess) return hip_fail(e, code, r_, "hip" #fn);      \
  } while (0)

/* ---- device ---------------------------------------------------------- */

typedef struct hip_dev {
  struct gc_dev base;
  int ordinal;
  hipStream_t stream;
  hipStream_t own; /* the stream hip_open made; stream is it or a caller's (set_stream) */
  int max_shmem;  /* LDS bytes a block may use (64 KiB on gfx9/gfx11) */
  int warp;       /* wavefront size: 64 on CDNA, 32 on RDNA */
  int capturing;  /* a graph capture is open on stream */
} hip_dev_t;

struct gc_module {
  hipModule_t mod;
};
struct gc_kernel {
  hipFunction_t fn;
};
struct gc_event {
  hipEvent_t ev;
};

/* The current device is per thread; set it on whichever thread calls. */
static int bind(hip_dev_t *d, gc_err_t *e) {
  HIP_TRY(e, GC_EDEVICE, SetDevice, d->ordinal);
  return GC_OK;
}

static int no_capture(hip_dev_t *d, const char *what, gc_err_t *e) {
  if (!d->capturing) return GC_OK;
  return gc_err_set(e, GC_EINVAL, "%s is not allowed while a HIP graph is being captured", what);
}

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
  gc_dev_info_t *in = &d->base.info;
  char *prop = gc_calloc(1, PROP_BYTES, e);
  if (!prop) return GC_ENOMEM;
  hipError_t r = hip.GetDeviceProperties(prop, d->ordinal);
  const char *arch = prop + hip.arch_off;
  int ok = r == hipSuccess && !strncmp(arch, "gfx", 3) && memchr(arch, 0, 256);
  if (ok) snprintf(in->arch, sizeof in->arch, "%s", arch);
  free(prop);
  if (r != hipSuccess) return hip_fail(e, GC_EDEVICE, r, "hipGetDeviceProperties");
  if (!ok)
    return gc_err_set(e, GC_EDEVICE, "AMD GPU runtime: hipGetDeviceProperties gave no gfx "
                      "architecture name (unknown hipDeviceProp_t layout)");
  snprintf(in->target, sizeof in->target, "%.*s", (int)strcspn(in->arch, ":"), in->arch);
  return GC_OK;
}

static int hip_fill_info(hip_dev_t *d, gc_err_t *e) {
  gc_dev_info_t *in = &d->base.info;
  int cus = 0, ver = 0;
  size_t mem = 0;
  hipDevice_t dev = 0;
  const struct { int attr, *out; } attrs[] = {
      {hipDeviceAttributeMultiprocessorCount, &cus},
      {hipDeviceAttributeMaxSharedMemoryPerBlock, &d->max_shmem},
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
  d->base.ops = &gc_hip_ops;
  d->ordinal = ordinal;
  if ((rc = bind(d, e)) || (rc = hip_fill_info(d, e))) {
    free(d);
    return rc;
  }
  hipError_t r = hip.StreamCreateWithFlags(&d->stream, hipStreamNonBlocking);
  if (r != hipSuccess) {
    free(d);
    return hip_fail(e, GC_EDEVICE, r, "hipStreamCreateWithFlags");
  }
  d->own = d->stream;
  *out = &d->base;
  return GC_OK;
}

/* Work still queued finishes first; memory and modules not freed by the
 * caller stay with the process. */
static void hip_close(gc_dev_t *dev) {
  hip_dev_t *d = (hip_dev_t *)dev;
  if (!d) return;
  if (!bind(d, NULL)) {
    if (d->capturing) {
      hipGraph_t g = NULL;
      if (hip.StreamEndCapture(d->stream, &g) == hipSuccess && g) hip.GraphDestroy(g);
    }
    hip.StreamSynchronize(d->own);
    hip.StreamDestroy(d->own);
  }
  free(d);
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

/* ---- memory ---------------------------------------------------------- */

static void fmt_bytes(size_t n, char *buf, size_t len) {
  if (n >= (1ull << 30)) snprintf(buf, len, "%.1f GiB", (double)n / (1ull << 30));
  else if (n >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", (double)n / (1ull << 20));
  else snprintf(buf, len, "%zu bytes", n);
}

static int hip_alloc(gc_dev_t *dev, size_t n, gc_dptr_t *out, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = no_capture(d, "alloc", e);
  if (rc || (rc = bind(d, e))) return rc;
  void *p = NULL;
  hipError_t r = hip.Malloc(&p, n ? n : 1);
  if (r == hipErrorOutOfMemory) {
    size_t fr = 0, tot = 0;
    char fs[32] = "?", ts[32] = "?";
    if (hip.MemGetInfo(&fr, &tot) == hipSuccess) {
      fmt_bytes(fr, fs, sizeof fs);
      fmt_bytes(tot, ts, sizeof ts);
    }
    return gc_err_set(e, GC_ENOMEM, "out of GPU memory allocating %zu bytes (%s free of %s)", n,
                      fs, ts);
  }
  if (r != hipSuccess) return hip_fail(e, GC_EDEVICE, r, "hipMalloc");
  *out = (gc_dptr_t)(uintptr_t)p;
  return GC_OK;
}

static void hip_free(gc_dev_t *dev, gc_dptr_t p) {
  hip_dev_t *d = (hip_dev_t *)dev;
  if (p && !bind(d, NULL)) hip.Free((void *)(uintptr_t)p);
}

/* HIP does not promise that an async copy from pageable memory has read
 * src when it returns, so the upload waits: the caller may reuse src at
 * once, as the interface says. Uploads are rare (weights, inputs). */
static int hip_upload(gc_dev_t *dev, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = no_capture(d, "upload", e);
  if (rc || !n || (rc = bind(d, e))) return rc;
  HIP_TRY(e, GC_EDEVICE, MemcpyHtoDAsync, (void *)(uintptr_t)dst, (void *)src, n, d->stream);
  HIP_TRY(e, GC_EDEVICE, StreamSynchronize, d->stream);
  return GC_OK;
}

static int hip_download(gc_dev_t *dev, void *dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = no_capture(d, "download", e);
  if (rc || !n || (rc = bind(d, e))) return rc;
  HIP_TRY(e, GC_EDEVICE, MemcpyDtoHAsync, dst, (void *)(uintptr_t)src, n, d->stream);
  HIP_TRY(e, GC_EDEVICE, StreamSynchronize, d->stream);
  return GC_OK;
}

static int hip_memset(gc_dev_t *dev, gc_dptr_t dst, int byte, size_t n, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = bind(d, e);
  if (rc || !n) return rc;
  HIP_TRY(e, GC_EDEVICE, MemsetD8Async, (void *)(uintptr_t)dst, (unsigned char)byte, n,
          d->stream);
  return GC_OK;
}

static void *hip_host_ptr(gc_dev_t *d, gc_dptr_t p) {
  (void)d, (void)p;
  return NULL;
}

/* ---- code ------------------------------------------------------------ */

static uint64_t le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* hipModuleLoadData takes no size and trusts the image, so check that it
 * is an ELF64 for AMDGPU whose headers and sections lie inside n bytes. */
static int check_code_object(const uint8_t *p, size_t n, gc_err_t *e) {
  if (!p || n < 64 || memcmp(p, "\177ELF", 4))
    return gc_err_set(e, GC_ECORRUPT,
                      "code object is not an AMDGPU code object: not an ELF file (%zu bytes)", n);
  if (p[4] != 2 || p[5] != 1 || le(p + 18, 2) != EM_AMDGPU)
    return gc_err_set(e, GC_ECORRUPT,
                      "code object is not an AMDGPU code object: ELF for machine %u, not AMDGPU "
                      "(%d)",
                      (unsigned)le(p + 18, 2), EM_AMDGPU);
  uint64_t shoff = le(p + 0x28, 8), shsz = le(p + 0x3a, 2), shnum = le(p + 0x3c, 2);
  uint64_t phoff = le(p + 0x20, 8), phsz = le(p + 0x36, 2), phnum = le(p + 0x38, 2);
  if ((shnum && (shsz < 64 || shoff > n || shnum * shsz > n - shoff)) ||
      (phnum && (phsz < 56 || phoff > n || phnum * phsz > n - phoff)))
    return gc_err_set(e, GC_ECORRUPT,
                      "AMDGPU code object is truncated or corrupt (headers past its end)");
  for (uint64_t i = 0; i < shnum; i++) {
    const uint8_t *h = p + shoff + i * shsz;
    uint64_t off = le(h + 24, 8), size = le(h + 32, 8);
    if (le(h + 4, 4) != 8 /* NOBITS */ && (off > n || size > n - off))
      return gc_err_set(e, GC_ECORRUPT,
                        "AMDGPU code object is truncated or corrupt (section %u past its end)",
                        (unsigned)i);
  }
  return GC_OK;
}

int gc_hip_check_code_object(const void *code, size_t n, gc_err_t *e) {
  return check_code_object(code, n, e);
}

static int hip_module_load(gc_dev_t *dev, const void *code, size_t n, gc_module_t **out,
                           gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  *out = NULL;
  int rc = check_code_object(code, n, e);
  if (rc || (rc = bind(d, e))) return rc;
  hipModule_t mod = NULL;
  hipError_t r = hip.ModuleLoadData(&mod, code);
  if (r == hipErrorNoBinaryForGpu || r == hipErrorInvalidImage ||
      r == hipErrorInvalidKernelFile) {
    hip_fail(e, GC_EDEVICE, r, "hipModuleLoadData");
    return gc_err_prefix(e, "code object was not built for this %s", d->base.info.arch);
  }
  if (r != hipSuccess) return hip_fail(e, GC_EDEVICE, r, "hipModuleLoadData");
  gc_module_t *m = gc_malloc(sizeof *m, e);
  if (!m) {
    hip.ModuleUnload(mod);
    return GC_ENOMEM;
  }
  m->mod = mod;
  *out = m;
  return GC_OK;
}

static void hip_module_unload(gc_dev_t *dev, gc_module_t *m) {
  if (!m) return;
  if (!bind((hip_dev_t *)dev, NULL)) hip.ModuleUnload(m->mod);
  free(m);
}

/* The kernel handle lives as long as its module. */
static int hip_kernel(gc_dev_t *dev, gc_module_t *m, const char *name, gc_kernel_t **out,
                      gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  *out = NULL;
  int rc = bind(d, e);
  if (rc) return rc;
  hipFunction_t fn = NULL;
  hipError_t r = hip.ModuleGetFunction(&fn, m->mod, name);
  if (r == hipErrorNotFound || (r == hipSuccess && !fn))
    return gc_err_set(e, GC_ENOTFOUND, "code object has no kernel %s",
                      GC_QUOTED(name));
  if (r != hipSuccess) return hip_fail(e, GC_EDEVICE, r, "hipModuleGetFunction");
  gc_kernel_t *k = gc_malloc(sizeof *k, e);
  if (!k) return GC_ENOMEM;
  k->fn = fn;
  *out = k;
  return GC_OK;
}

/* Each dimension must be 1 .. 2^32-1; the runtime checks its own limits
 * (1024 work-items a block). */
static int check_dims(const int64_t v[3], const char *what, unsigned out[3], gc_err_t *e) {
  for (int i = 0; i < 3; i++) {
    if (v[i] < 1 || v[i] > (int64_t)UINT32_MAX)
      return gc_err_set(e, GC_ELAUNCH, "%s dimension %d is %lld: must be 1 .. %u", what, i,
                        (long long)v[i], UINT32_MAX);
    out[i] = (unsigned)v[i];
  }
  return GC_OK;
}

/* AMD has no opt-in for more LDS: a block gets at most max_shmem bytes,
 * static and dynamic together. */
static int hip_launch(gc_dev_t *dev, gc_kernel_t *k, const int64_t grid[3],
                      const int64_t block[3], size_t shmem, void **args, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  unsigned g[3], b[3];
  int rc;
  if ((rc = check_dims(grid, "grid", g, e)) || (rc = check_dims(block, "block", b, e)) ||
      (rc = bind(d, e)))
    return rc;
  if (shmem > (size_t)d->max_shmem)
    return gc_err_set(e, GC_ELAUNCH,
                      "launch asks for %zu bytes of dynamic shared memory (LDS); this %s allows "
                      "at most %d a block",
                      shmem, d->base.info.arch, d->max_shmem);
  HIP_TRY(e, GC_ELAUNCH, ModuleLaunchKernel, k->fn, g[0], g[1], g[2], b[0], b[1], b[2],
          (unsigned)shmem, d->stream, args, NULL);
  return GC_OK;
}

static int hip_sync(gc_dev_t *dev, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = no_capture(d, "sync", e);
  if (rc || (rc = bind(d, e))) return rc;
  HIP_TRY(e, GC_EDEVICE, StreamSynchronize, d->stream);
  return GC_OK;
}

static int hip_set_stream(gc_dev_t *dev, void *const *stream, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = no_capture(d, "set_stream", e);
  if (!rc) d->stream = stream ? (hipStream_t)*stream : d->own;
  return rc;
}

/* ---- events ---------------------------------------------------------- */

static int hip_event_create(gc_dev_t *dev, gc_event_t **out, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  *out = NULL;
  int rc = bind(d, e);
  if (rc) return rc;
  gc_event_t *ev = gc_malloc(sizeof *ev, e);
  if (!ev) return GC_ENOMEM;
  hipError_t r = hip.EventCreate(&ev->ev);
  if (r != hipSuccess) {
    free(ev);
    return hip_fail(e, GC_EDEVICE, r, "hipEventCreate");
  }
  *out = ev;
  return GC_OK;
}

static void hip_event_destroy(gc_dev_t *dev, gc_event_t *ev) {
  if (!ev) return;
  if (!bind((hip_dev_t *)dev, NULL)) hip.EventDestroy(ev->ev);
  free(ev);
}

static int hip_event_record(gc_dev_t *dev, gc_event_t *ev, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = bind(d, e);
  if (rc) return rc;
  HIP_TRY(e, GC_EDEVICE, EventRecord, ev->ev, d->stream);
  return GC_OK;
}

/* Waits for both events, so a caller need not sync first. */
static int hip_event_elapsed(gc_dev_t *dev, gc_event_t *a, gc_event_t *b, double *ms,
                             gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = no_capture(d, "event timing", e);
  if (rc || (rc = bind(d, e))) return rc;
  float f = 0;
  HIP_TRY(e, GC_EDEVICE, EventSynchronize, a->ev);
  HIP_TRY(e, GC_EDEVICE, EventSynchronize, b->ev);
  HIP_TRY(e, GC_EDEVICE, EventElapsedTime, &f, a->ev, b->ev);
  *ms = f;
  return GC_OK;
}

/* ---- graphs ---------------------------------------------------------- */

/* Launches and memsets issued between begin and end are recorded, not
 * run (uploads, downloads and syncs in between fail). Thread-local mode:
 * other threads may go on allocating while this one captures. */
static int hip_graph_begin(gc_dev_t *dev, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = bind(d, e);
  if (rc) return rc;
  if (d->capturing) return gc_err_set(e, GC_EINVAL, "a HIP graph capture is already open");
  HIP_TRY(e, GC_EDEVICE, StreamBeginCapture, d->stream, hipStreamCaptureModeThreadLocal);
  d->capturing = 1;
  return GC_OK;
}

/* Always ends the capture, also when a call inside it failed. */
static int hip_graph_end(gc_dev_t *dev, void **exec, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  *exec = NULL;
  int rc = bind(d, e);
  if (rc) return rc;
  if (!d->capturing) return gc_err_set(e, GC_EINVAL, "no HIP graph capture is open");
  d->capturing = 0;
  hipGraph_t g = NULL;
  HIP_TRY(e, GC_EDEVICE, StreamEndCapture, d->stream, &g);
  hipGraphExec_t x = NULL;
  hipError_t r = hip.GraphInstantiate(&x, g, NULL, NULL, 0);
  hip.GraphDestroy(g); /* the executable graph does not need it */
  if (r != hipSuccess) return hip_fail(e, GC_EDEVICE, r, "hipGraphInstantiate");
  *exec = x;
  return GC_OK;
}

static int hip_graph_launch(gc_dev_t *dev, void *exec, gc_err_t *e) {
  hip_dev_t *d = (hip_dev_t *)dev;
  int rc = no_capture(d, "graph launch", e);
  if (rc || (rc = bind(d, e))) return rc;
  if (!exec) return gc_err_set(e, GC_EINVAL, "no HIP graph to launch");
  HIP_TRY(e, GC_ELAUNCH, GraphLaunch, (hipGraphExec_t)exec, d->stream);
  return GC_OK;
}

static void hip_graph_destroy(gc_dev_t *dev, void *exec) {
  if (exec && !bind((hip_dev_t *)dev, NULL)) hip.GraphExecDestroy((hipGraphExec_t)exec);
}

const gc_dev_ops_t gc_hip_ops = {
    .name = "hip",
    .open = hip_open,
    .close = hip_close,
    .runs_target = hip_runs_target,
    .alloc = hip_alloc,
    .free = hip_free,
    .upload = hip_upload,
    .download = hip_download,
    .memset = hip_memset,
    .host_ptr = hip_host_ptr,
    .page_size = NULL, /* no page protection: runtime/check.c's guard patterns */
    .protect = NULL,
    .module_load = hip_module_load,
    .module_unload = hip_module_unload,
    .kernel = hip_kernel,
    .launch = hip_launch,
    .kernel_pdl = NULL, /* HIP has no programmatic dependent launch */
    .sync = hip_sync,
    .set_stream = hip_set_stream,
    .event_create = hip_event_create,
    .event_destroy = hip_event_destroy,
    .event_record = hip_event_record,
    .event_elapsed = hip_event_elapsed,
    .graph_begin = hip_graph_begin,
    .graph_end = hip_graph_end,
    .graph_launch = hip_graph_launch,
    .graph_destroy = hip_graph_destroy,
    .tmap_encode = NULL, /* AMD has no tensor-map copy engine */
    .flush = NULL,       /* a memset (no hand-written read kernel for AMD yet) */
};
