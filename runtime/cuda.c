/* cuda.c — the cuda backend: NVIDIA GPUs through the CUDA driver API, with
 * libcuda.so.1 dlopen'd at run time so one binary runs with or without a
 * driver. Each device uses its primary context and one stream; every
 * operation is ordered on that stream, and downloads wait for it. Cubins
 * load with cuModuleLoadData. Graph capture/replay of the stream is here
 * too (gc_cuda_graph_*), in the ops table behind gc_dev_graph_*. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dev_impl.h"

/* Graphs: launches and memsets issued between begin and end are recorded,
 * not run (uploads, downloads and syncs in between fail). end instantiates
 * the capture into *exec; launch replays it on the stream. */

/* ---- the driver API, as its ABI is documented (cuda.h) ----------------- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent, *CUgraph,
    *CUgraphExec;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_NOT_FOUND = 500,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_STREAM_NON_BLOCKING = 1,
  CU_EVENT_DEFAULT = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  EM_CUDA = 190,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
};

/* cuLaunchKernelEx's configuration and one attribute (CUDA 12.0+). */
typedef struct cu_launch_attr {
  int id;
  char pad[4];
  union {
    char pad[64];
    int programmatic_serialization_allowed;
  } value;
} cu_launch_attr_t;
typedef struct cu_launch_config {
  unsigned grid[3], block[3], shmem;
  CUstream stream;
  cu_launch_attr_t *attrs;
  unsigned nattrs;
} cu_launch_config_t;

typedef struct cu_api {
  void *lib;
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int *);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetName)(char *, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*DeviceTotalMem)(size_t *, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*StreamCreate)(CUstream *, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemGetInfo)(size_t *, size_t *);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*FuncGetAttribute)(int *, int, CUfunction);
  CUresult (*FuncSetAttribute)(CUfunction, int, int);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, unsigned, CUstream, void **, void **);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*StreamBeginCapture)(CUstream, int);
  CUresult (*StreamEndCapture)(CUstream, CUgraph *);
  CUresult (*GraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*GraphDestroy)(CUgraph);
  /* optional (CUDA 12.0+; NULL before): launches with attributes
   * (programmatic dependent launch), tensor maps for the copy engine */
  CUresult (*LaunchKernelEx)(const cu_launch_config_t *, CUfunction, void **, void **);
  CUresult (*TensorMapEncodeTiled)(void *, int, unsigned, void *, const unsigned long long *,
                                   const unsigned long long *, const unsigned *, const unsigned *,
                                   int, int, int, int);
} cu_api_t;

/* Loaded once and kept: unloading a driver under live contexts is unsafe. */
static pthread_mutex_t cu_mu = PTHREAD_MUTEX_INITIALIZER;
static cu_api_t cu;

/* The entry points by the names cuda.h maps its API to (the _v2 ones),
 * each with an older name to fall back on where a driver may lack it. */
static const struct cu_sym {
  const char *name, *fallback;
  size_t off;
} cu_syms[] = {
#define S(field, name, fb) {name, fb, offsetof(cu_api_t, field)}
    S(GetErrorName, "cuGetErrorName", NULL),
    S(GetErrorString, "cuGetErrorString", NULL),
    S(Init, "cuInit", NULL),
    S(DriverGetVersion, "cuDriverGetVersion", NULL),
    S(DeviceGetCount, "cuDeviceGetCount", NULL),
    S(DeviceGet, "cuDeviceGet", NULL),
    S(DeviceGetName, "cuDeviceGetName", NULL),
    S(DeviceGetAttribute, "cuDeviceGetAttribute", NULL),
    S(DeviceTotalMem, "cuDeviceTotalMem_v2", NULL),
    S(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
    S(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
    S(CtxSetCurrent, "cuCtxSetCurrent", NULL),
    S(StreamCreate, "cuStreamCreate", NULL),
    S(StreamDestroy, "cuStreamDestroy_v2", NULL),
    S(StreamSynchronize, "cuStreamSynchronize", NULL),
    S(MemAlloc, "cuMemAlloc_v2", NULL),
    S(MemFree, "cuMemFree_v2", NULL),
    S(MemGetInfo, "cuMemGetInfo_v2", NULL),
    S(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL),
    S(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL),
    S(MemsetD8Async, "cuMemsetD8Async", NULL),
    S(ModuleLoadData, "cuModuleLoadData", NULL),
    S(ModuleUnload, "cuModuleUnload", NULL),
    S(ModuleGetFunction, "cuModuleGetFunction", NULL),
    S(FuncGetAttribute, "cuFuncGetAttribute", NULL),
    S(FuncSetAttribute, "cuFuncSetAttribute", NULL),
    S(LaunchKernel, "cuLaunchKernel", NULL),
    S(EventCreate, "cuEventCreate", NULL),
    S(EventDestroy, "cuEventDestroy_v2", NULL),
    S(EventRecord, "cuEventRecord", NULL),
    S(EventSynchronize, "cuEventSynchronize", NULL),
    S(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
    S(StreamBeginCapture, "cuStreamBeginCapture_v2", NULL),
    S(StreamEndCapture, "cuStreamEndCapture", NULL),
    S(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", NULL),
    S(GraphLaunch, "cuGraphLaunch", NULL),
    S(GraphExecDestroy, "cuGraphExecDestroy", NULL),
    S(GraphDestroy, "cuGraphDestroy", NULL),
#undef S
};

/* Load libcuda.so.1 (only that name: the toolkit's libcuda.so under
 * lib64/stubs is a link-time stub, not a driver). */
static int cu_load(gc_err_t *e) {
  pthread_mutex_lock(&cu_mu);
  int rc = GC_OK;
  if (!cu.lib) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      rc = gc_err_set(e, GC_EDEVICE, "no NVIDIA driver: libcuda.so.1 not found (dlopen: %s)",
                      dlerror());
      goto out;
    }
    cu_api_t api = {.lib = h};
    for (size_t i = 0; i < GC_ARRAY_LEN(cu_syms) && !rc; i++) {
      void *f = dlsym(h, cu_syms[i].name);
      if (!f && cu_syms[i].fallback) f = dlsym(h, cu_syms[i].fallback);
      if (!f)
        rc = gc_err_set(e, GC_EDEVICE, "NVIDIA driver too old: libcuda.so.1 has no %s",
                        cu_syms[i].name);
      memcpy((char *)&api + cu_syms[i].off, &f, sizeof f);
    }
    void *tm = dlsym(h, "cuTensorMapEncodeTiled"); /* optional */
    memcpy(&api.TensorMapEncodeTiled, &tm, sizeof tm);
    void *lx = dlsym(h, "cuLaunchKernelEx"); /* optional */
    memcpy(&api.LaunchKernelEx, &lx, sizeof lx);
    if (rc) dlclose(h);
    else cu = api;
  }
out:
  pthread_mutex_unlock(&cu_mu);
  return rc;
}

/* "CUDA_ERROR_X (string)" for r, into buf. */
static const char *cu_describe(CUresult r, char *buf, size_t n) {
  const char *name = NULL, *str = NULL;
  if (cu.GetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown CUDA error";
  if (cu.GetErrorString(r, &str) != CUDA_SUCCESS || !str) str = "?";
  snprintf(buf, n, "%s (%s)", name, str);
  return buf;
}

/* Errors a faulting kernel leaves behind (sticky: the context is lost). */
static int cu_kernel_fault(CUresult r) {
  return r == 700 || r == 701 || r == 702 || r == 710 || (r >= 714 && r <= 719);
}

/* Set e for a failed driver call: "call: CUDA_ERROR_X (string)". Kernel
 * faults surfacing here are launch errors whatever the call. */
static int cu_fail(gc_err_t *e, int code, CUresult r, const char *call) {
  char what[256];
  if (cu_kernel_fault(r)) code = GC_ELAUNCH;
  return gc_err_set(e, code, "%s: %s", call, cu_describe(r, what, sizeof what));
}

/* Call cu.fn(...) and return the failure, named "cu<fn>", from the caller. */
#define CU_TRY(e, code, fn, ...)                                        \
  do {                                                                  \
    CUresult r_ = cu.fn(__VA_ARGS__);                                   \
    if (r_ != CUDA_SUCCESS) return cu_fail(e, code, r_, "cu" #fn);      \
  } while (0)

/* ---- device ---------------------------------------------------------- */

typedef struct cuda_dev {
  struct gc_dev base;
  CUdevice dev;
  CUcontext ctx;
  CUstream stream;
  CUstream own;    /* the stream cuda_start made; stream is it or a caller's (set_stream) */
  int cc_major, cc_minor;
  int max_shmem;   /* opt-in dynamic + static shared memory per block */
  int capturing;   /* a graph capture is open on stream */
  CUmodule flush_mod; /* the read kernel of cuda_flush, loaded on first use */
  CUfunction flush_fn;
} cuda_dev_t;

struct gc_module {
  CUmodule mod;
};
struct gc_kernel {
  CUfunction fn;
  unsigned shmem_granted; /* dynamic shared memory the function may use now */
  int pdl;                /* launched with programmatic stream serialisation */
};
struct gc_event {
  CUevent ev;
};

/* The context is current per thread; make it current on whichever thread
 * calls (cheap: a thread-local store in the driver). */
static int bind(cuda_dev_t *d, gc_err_t *e) {
  CU_TRY(e, GC_EDEVICE, CtxSetCurrent, d->ctx);
  return GC_OK;
}

static int no_capture(cuda_dev_t *d, const char *what, gc_err_t *e) {
  if (!d->capturing) return GC_OK;
  return gc_err_set(e, GC_EINVAL, "%s is not allowed while a CUDA graph is being captured",
                    what);
}

static int cuda_find_device(int ordinal, CUdevice *dev, gc_err_t *e) {
  CUresult r = cu.Init(0);
  if (r != CUDA_SUCCESS) {
    const char *name = NULL;
    if (cu.GetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown CUDA error";
    if (r == CUDA_ERROR_NO_DEVICE)
      return gc_err_set(e, GC_EDEVICE, "no NVIDIA GPU: cuInit returned %s (%d)", name, r);
    const char *str = NULL;
    if (cu.GetErrorString(r, &str) != CUDA_SUCCESS || !str) str = "?";
    return gc_err_set(e, GC_EDEVICE, "NVIDIA driver unusable: cuInit returned %s (%d): %s",
                      name, r, str);
  }
  int count = 0;
  CU_TRY(e, GC_EDEVICE, DeviceGetCount, &count);
  if (ordinal < 0 || ordinal >= count)
    return gc_err_set(e, GC_EDEVICE, "no NVIDIA GPU with ordinal %d (found %d)", ordinal, count);
  CU_TRY(e, GC_EDEVICE, DeviceGet, dev, ordinal);
  return GC_OK;
}

static int cuda_fill_info(cuda_dev_t *d, gc_err_t *e) {
  gc_dev_info_t *in = &d->base.info;
  int sms = 0, ver = 0;
  size_t mem = 0;
  const struct { int attr, *out; } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &d->cc_major},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &d->cc_minor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &sms},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &d->max_shmem},
  };
  for (size_t i = 0; i < GC_ARRAY_LEN(attrs); i++)
    CU_TRY(e, GC_EDEVICE, DeviceGetAttribute, attrs[i].out, attrs[i].attr, d->dev);
  CU_TRY(e, GC_EDEVICE, DeviceTotalMem, &mem, d->dev);
  CU_TRY(e, GC_EDEVICE, DriverGetVersion, &ver);
  CU_TRY(e, GC_EDEVICE, DeviceGetName, in->name, (int)sizeof in->name, d->dev);
  in->name[sizeof in->name - 1] = 0;
  strcpy(in->backend, "cuda");
  snprintf(in->arch, sizeof in->arch, "sm_%d%d", d->cc_major, d->cc_minor);
  snprintf(in->target, sizeof in->target, "%s", in->arch);
  in->compute_units = sms;
  in->mem_bytes = (int64_t)mem;
  snprintf(in->driver, sizeof in->driver, "cuda driver %d", ver);
  in->host_memory = 0;
  return GC_OK;
}

/* Retain the primary context and make the stream; undone by cuda_close. */
static int cuda_start(cuda_dev_t *d, gc_err_t *e) {
  CU_TRY(e, GC_EDEVICE, DevicePrimaryCtxRetain, &d->ctx, d->dev);
  int rc = bind(d, e);
  if (!rc) {
    CUresult r = cu.StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) rc = cu_fail(e, GC_EDEVICE, r, "cuStreamCreate");
    d->own = d->stream;
  }
  if (rc) {
    cu.DevicePrimaryCtxRelease(d->dev);
    d->ctx = NULL;
  }
  return rc;
}

static int cuda_open(int ordinal, gc_dev_t **out, gc_err_t *e) {
  *out = NULL;
  int rc = cu_load(e);
  CUdevice dev = 0;
  if (!rc) rc = cuda_find_device(ordinal, &dev, e);
  if (rc) return rc;
  cuda_dev_t *d = gc_calloc(1, sizeof *d, e);
  if (!d) return GC_ENOMEM;
  d->base.ops = &gc_cuda_ops;
  d->dev = dev;
  if ((rc = cuda_fill_info(d, e)) || (rc = cuda_start(d, e))) {
    free(d);
    return rc;
  }
  *out = &d->base;
  return GC_OK;
}

/* Work still queued finishes first; memory and modules not freed by the
 * caller go with the context when its last user releases it. */
static void cuda_close(gc_dev_t *dev) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  if (!d) return;
  if (!bind(d, NULL)) {
    if (d->capturing) {
      CUgraph g = NULL;
      if (cu.StreamEndCapture(d->stream, &g) == CUDA_SUCCESS && g) cu.GraphDestroy(g);
    }
    cu.StreamSynchronize(d->own);
    cu.StreamDestroy(d->own);
    if (d->flush_mod) cu.ModuleUnload(d->flush_mod);
  }
  cu.DevicePrimaryCtxRelease(d->dev);
  free(d);
}

/* Parse "sm_<major><minor>[a|f]" (major one or two digits). */
static int parse_sm(const char *t, int *major, int *minor, char *suffix) {
  if (strncmp(t, "sm_", 3)) return 0;
  int v = 0, digits = 0;
  for (t += 3; *t >= '0' && *t <= '9' && digits < 4; t++, digits++) v = v * 10 + (*t - '0');
  if (digits < 2 || digits > 3) return 0;
  *suffix = 0;
  if (*t == 'a' || *t == 'f') *suffix = *t++;
  if (*t) return 0;
  *major = v / 10;
  *minor = v % 10;
  return 1;
}

/* A cubin for sm_XY runs on major X with minor >= Y; an arch-specific
 * one (sm_90a) only on exactly that arch. */
static int cuda_runs_target(const gc_dev_t *dev, const char *target) {
  const cuda_dev_t *d = (const cuda_dev_t *)dev;
  int major, minor;
  char suffix;
  if (!target || !parse_sm(target, &major, &minor, &suffix)) return 0;
  if (major != d->cc_major) return 0;
  return suffix == 'a' ? minor == d->cc_minor : minor <= d->cc_minor;
}

/* ---- memory ---------------------------------------------------------- */

static void fmt_bytes(size_t n, char *buf, size_t len) {
  if (n >= (1ull << 30)) snprintf(buf, len, "%.1f GiB", (double)n / (1ull << 30));
  else if (n >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", (double)n / (1ull << 20));
  else snprintf(buf, len, "%zu bytes", n);
}

static int cuda_alloc(gc_dev_t *dev, size_t n, gc_dptr_t *out, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = no_capture(d, "alloc", e);
  if (rc || (rc = bind(d, e))) return rc;
  CUdeviceptr p = 0;
  CUresult r = cu.MemAlloc(&p, n ? n : 1);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t fr = 0, tot = 0;
    char fs[32] = "?", ts[32] = "?";
    if (cu.MemGetInfo(&fr, &tot) == CUDA_SUCCESS) {
      fmt_bytes(fr, fs, sizeof fs);
      fmt_bytes(tot, ts, sizeof ts);
    }
    return gc_err_set(e, GC_ENOMEM, "out of GPU memory allocating %zu bytes (%s free of %s)", n,
                      fs, ts);
  }
  if (r != CUDA_SUCCESS) return cu_fail(e, GC_EDEVICE, r, "cuMemAlloc");
  *out = (gc_dptr_t)p;
  return GC_OK;
}

static void cuda_free(gc_dev_t *dev, gc_dptr_t p) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  if (p && !bind(d, NULL)) cu.MemFree((CUdeviceptr)p);
}

/* From pageable host memory the driver stages src before returning, so
 * the caller may reuse it at once; the copy itself is ordered on the
 * stream. */
static int cuda_upload(gc_dev_t *dev, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = no_capture(d, "upload", e);
  if (rc || !n || (rc = bind(d, e))) return rc;
  CU_TRY(e, GC_EDEVICE, MemcpyHtoDAsync, (CUdeviceptr)dst, src, n, d->stream);
  return GC_OK;
}

static int cuda_download(gc_dev_t *dev, void *dst, gc_dptr_t src, size_t n, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = no_capture(d, "download", e);
  if (rc || !n || (rc = bind(d, e))) return rc;
  CU_TRY(e, GC_EDEVICE, MemcpyDtoHAsync, dst, (CUdeviceptr)src, n, d->stream);
  CU_TRY(e, GC_EDEVICE, StreamSynchronize, d->stream);
  return GC_OK;
}

static int cuda_memset(gc_dev_t *dev, gc_dptr_t dst, int byte, size_t n, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = bind(d, e);
  if (rc || !n) return rc;
  CU_TRY(e, GC_EDEVICE, MemsetD8Async, (CUdeviceptr)dst, (unsigned char)byte, n, d->stream);
  return GC_OK;
}

static void *cuda_host_ptr(gc_dev_t *d, gc_dptr_t p) {
  (void)d, (void)p;
  return NULL;
}

/* ---- code ------------------------------------------------------------ */

static uint64_t le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* cuModuleLoadData takes no size and trusts the image, so check that it
 * is an ELF64 for CUDA whose headers and sections lie inside n bytes. */
static int check_cubin(const uint8_t *p, size_t n, gc_err_t *e) {
  if (!p || n < 64 || memcmp(p, "\177ELF", 4))
    return gc_err_set(e, GC_ECORRUPT, "code object is not a cubin: not an ELF file (%zu bytes)",
                      n);
  if (p[4] != 2 || p[5] != 1 || le(p + 18, 2) != EM_CUDA)
    return gc_err_set(e, GC_ECORRUPT,
                      "code object is not a cubin: ELF for machine %u, not NVIDIA CUDA (%d)",
                      (unsigned)le(p + 18, 2), EM_CUDA);
  uint64_t shoff = le(p + 0x28, 8), shsz = le(p + 0x3a, 2), shnum = le(p + 0x3c, 2);
  uint64_t phoff = le(p + 0x20, 8), phsz = le(p + 0x36, 2), phnum = le(p + 0x38, 2);
  if ((shnum && (shsz < 64 || shoff > n || shnum * shsz > n - shoff)) ||
      (phnum && (phsz < 56 || phoff > n || phnum * phsz > n - phoff)))
    return gc_err_set(e, GC_ECORRUPT, "cubin is truncated or corrupt (headers past its end)");
  for (uint64_t i = 0; i < shnum; i++) {
    const uint8_t *h = p + shoff + i * shsz;
    uint64_t off = le(h + 24, 8), size = le(h + 32, 8);
    if (le(h + 4, 4) != 8 /* NOBITS */ && (off > n || size > n - off))
      return gc_err_set(e, GC_ECORRUPT, "cubin is truncated or corrupt (section %u past its end)",
                        (unsigned)i);
  }
  return GC_OK;
}

static int cuda_module_load(gc_dev_t *dev, const void *code, size_t n, gc_module_t **out,
                            gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  *out = NULL;
  int rc = check_cubin(code, n, e);
  if (rc || (rc = bind(d, e))) return rc;
  CUmodule mod = NULL;
  CUresult r = cu.ModuleLoadData(&mod, code);
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU) {
    cu_fail(e, GC_EDEVICE, r, "cuModuleLoadData");
    return gc_err_prefix(e, "code object was built for another GPU than this %s",
                         d->base.info.arch);
  }
  if (r != CUDA_SUCCESS) return cu_fail(e, GC_EDEVICE, r, "cuModuleLoadData");
  gc_module_t *m = gc_malloc(sizeof *m, e);
  if (!m) {
    cu.ModuleUnload(mod);
    return GC_ENOMEM;
  }
  m->mod = mod;
  *out = m;
  return GC_OK;
}

static void cuda_module_unload(gc_dev_t *dev, gc_module_t *m) {
  if (!m) return;
  if (!bind((cuda_dev_t *)dev, NULL)) cu.ModuleUnload(m->mod);
  free(m);
}

/* The kernel handle lives as long as its module. */
static int cuda_kernel(gc_dev_t *dev, gc_module_t *m, const char *name, gc_kernel_t **out,
                       gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  *out = NULL;
  int rc = bind(d, e);
  if (rc) return rc;
  CUfunction fn = NULL;
  CUresult r = cu.ModuleGetFunction(&fn, m->mod, name);
  if (r == CUDA_ERROR_NOT_FOUND)
    return gc_err_set(e, GC_ENOTFOUND, "code object has no kernel %s",
                      GC_QUOTED(name));
  if (r != CUDA_SUCCESS) return cu_fail(e, GC_EDEVICE, r, "cuModuleGetFunction");
  gc_kernel_t *k = gc_malloc(sizeof *k, e);
  if (!k) return GC_ENOMEM;
  k->fn = fn;
  int lim = 0; /* unasked, 48 KiB less the kernel's static shared memory */
  if (cu.FuncGetAttribute(&lim, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn))
    lim = 0;
  k->shmem_granted = lim > 0 ? (unsigned)lim : 0;
  *out = k;
  return GC_OK;
}

/* The cache flush of timed runs: every thread reads 16-byte words of the
 * buffer, grid-stride, and folds them into a value it stores only if it
 * equals a constant no flush buffer (zeroed by its owner) produces, so
 * the loads cannot be dropped and nothing is written. PTX, which the
 * driver compiles for whatever GPU it runs on. */
static const char flush_ptx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry gc_flush_read(.param .u64 buf, .param .u64 n16)\n{\n"
    " .reg .pred %p<3>;\n .reg .b32 %r<5>;\n .reg .b64 %rd<16>;\n"
    " ld.param.u64 %rd1, [buf];\n ld.param.u64 %rd2, [n16];\n"
    " mov.u32 %r1, %ctaid.x;\n mov.u32 %r2, %ntid.x;\n mov.u32 %r3, %tid.x;\n"
    " mov.u32 %r4, %nctaid.x;\n mul.wide.u32 %rd3, %r1, %r2;\n cvt.u64.u32 %rd4, %r3;\n"
    " add.s64 %rd5, %rd3, %rd4;\n mul.wide.u32 %rd6, %r4, %r2;\n"
    " mov.u64 %rd7, 0;\n mov.u64 %rd8, 0;\n"
    "LOOP:\n setp.ge.u64 %p1, %rd5, %rd2;\n @%p1 bra DONE;\n"
    " shl.b64 %rd9, %rd5, 4;\n add.s64 %rd10, %rd1, %rd9;\n"
    " ld.global.v2.u64 {%rd11, %rd12}, [%rd10];\n"
    " xor.b64 %rd7, %rd7, %rd11;\n xor.b64 %rd8, %rd8, %rd12;\n"
    " add.s64 %rd5, %rd5, %rd6;\n bra.uni LOOP;\n"
    "DONE:\n xor.b64 %rd7, %rd7, %rd8;\n"
    " setp.ne.u64 %p2, %rd7, 0x5A5A0F0F12345678;\n @%p2 bra END;\n"
    " st.global.u64 [%rd1], %rd7;\n"
    "END:\n ret;\n}\n";

static int cuda_flush(gc_dev_t *dev, gc_dptr_t buf, size_t n, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = bind(d, e);
  if (rc) return rc;
  if (!d->flush_fn) {
    CU_TRY(e, GC_EDEVICE, ModuleLoadData, &d->flush_mod, flush_ptx);
    CU_TRY(e, GC_EDEVICE, ModuleGetFunction, &d->flush_fn, d->flush_mod, "gc_flush_read");
  }
  uint64_t p = (uint64_t)buf, n16 = n / 16;
  void *args[] = {&p, &n16};
  CU_TRY(e, GC_ELAUNCH, LaunchKernel, d->flush_fn, 1024, 1, 1, 256, 1, 1, 0, d->stream, args, NULL);
  return GC_OK;
}

/* Each dimension must be 1 .. 2^32-1 (the driver's own limits, e.g. 1024
 * threads a block, are checked by the driver). */
static int check_dims(const int64_t v[3], const char *what, unsigned out[3], gc_err_t *e) {
  for (int i = 0; i < 3; i++) {
    if (v[i] < 1 || v[i] > (int64_t)UINT32_MAX)
      return gc_err_set(e, GC_ELAUNCH, "%s dimension %d is %lld: must be 1 .. %u", what, i,
                        (long long)v[i], UINT32_MAX);
    out[i] = (unsigned)v[i];
  }
  return GC_OK;
}

/* Beyond what it gets unasked (48 KiB in all with its static shared
 * memory) a function must be allowed more dynamic shared memory first
 * (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES). */
static int grant_shmem(cuda_dev_t *d, gc_kernel_t *k, size_t shmem, gc_err_t *e) {
  if (shmem <= k->shmem_granted) return GC_OK;
  if (shmem > (size_t)d->max_shmem)
    return gc_err_set(e, GC_ELAUNCH,
                      "launch asks for %zu bytes of dynamic shared memory; this %s allows at "
                      "most %d a block",
                      shmem, d->base.info.arch, d->max_shmem);
  CU_TRY(e, GC_ELAUNCH,
         FuncSetAttribute, k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shmem);
  k->shmem_granted = (unsigned)shmem;
  return GC_OK;
}

static int cuda_launch(gc_dev_t *dev, gc_kernel_t *k, const int64_t grid[3],
                       const int64_t block[3], size_t shmem, void **args, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  unsigned g[3], b[3];
  int rc;
  if ((rc = check_dims(grid, "grid", g, e)) || (rc = check_dims(block, "block", b, e)) ||
      (rc = bind(d, e)) || (rc = grant_shmem(d, k, shmem, e)))
    return rc;
  if (k->pdl) { /* may start while the kernel before it drains (it waits itself) */
    cu_launch_attr_t at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
    at.value.programmatic_serialization_allowed = 1;
    cu_launch_config_t c = {{g[0], g[1], g[2]}, {b[0], b[1], b[2]}, (unsigned)shmem, d->stream,
                            &at, 1};
    CU_TRY(e, GC_ELAUNCH, LaunchKernelEx, &c, k->fn, args, NULL);
    return GC_OK;
  }
  CU_TRY(e, GC_ELAUNCH,
         LaunchKernel, k->fn, g[0], g[1], g[2], b[0], b[1], b[2], (unsigned)shmem, d->stream,
                      args, NULL);
  return GC_OK;
}

/* Programmatic dependent launch needs sm_90 and cuLaunchKernelEx. */
static int cuda_kernel_pdl(gc_dev_t *dev, gc_kernel_t *k, int on) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  k->pdl = on && d->cc_major >= 9 && cu.LaunchKernelEx;
  return k->pdl;
}

static int cuda_sync(gc_dev_t *dev, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = no_capture(d, "sync", e);
  if (rc || (rc = bind(d, e))) return rc;
  CU_TRY(e, GC_EDEVICE, StreamSynchronize, d->stream);
  return GC_OK;
}

static int cuda_set_stream(gc_dev_t *dev, void *const *stream, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = no_capture(d, "set_stream", e);
  if (!rc) d->stream = stream ? (CUstream)*stream : d->own;
  return rc;
}

/* ---- events ---------------------------------------------------------- */

static int cuda_event_create(gc_dev_t *dev, gc_event_t **out, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  *out = NULL;
  int rc = bind(d, e);
  if (rc) return rc;
  gc_event_t *ev = gc_malloc(sizeof *ev, e);
  if (!ev) return GC_ENOMEM;
  CUresult r = cu.EventCreate(&ev->ev, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) {
    free(ev);
    return cu_fail(e, GC_EDEVICE, r, "cuEventCreate");
  }
  *out = ev;
  return GC_OK;
}

static void cuda_event_destroy(gc_dev_t *dev, gc_event_t *ev) {
  if (!ev) return;
  if (!bind((cuda_dev_t *)dev, NULL)) cu.EventDestroy(ev->ev);
  free(ev);
}

static int cuda_event_record(gc_dev_t *dev, gc_event_t *ev, gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = bind(d, e);
  if (rc) return rc;
  CU_TRY(e, GC_EDEVICE, EventRecord, ev->ev, d->stream);
  return GC_OK;
}

/* Waits for both events, so a caller need not sync first. */
static int cuda_event_elapsed(gc_dev_t *dev, gc_event_t *a, gc_event_t *b, double *ms,
                              gc_err_t *e) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  int rc = no_capture(d, "event timing", e);
  if (rc || (rc = bind(d, e))) return rc;
  float f = 0;
  CU_TRY(e, GC_EDEVICE, EventSynchronize, a->ev);
  CU_TRY(e, GC_EDEVICE, EventSynchronize, b->ev);
  CU_TRY(e, GC_EDEVICE, EventElapsedTime, &f, a->ev, b->ev);
  *ms = f;
  return GC_OK;
}

/* ---- tensor maps ----------------------------------------------------- */

/* CUtensorMapDataType, CUtensorMapSwizzle and the other enums of cuda.h
 * (CUDA 12.0+) as numbers. */
enum {
  CU_TMAP_F16 = 6, CU_TMAP_F32 = 7, CU_TMAP_F64 = 8, CU_TMAP_BF16 = 9, CU_TMAP_I32 = 3,
  CU_TMAP_INTERLEAVE_NONE = 0, CU_TMAP_L2_PROMOTION_256B = 3, CU_TMAP_OOB_FILL_ZERO = 0,
};

static int cu_tmap_dtype(gc_dtype_t t) {
  switch (t) {
  case GC_DT_F16: return CU_TMAP_F16;
  case GC_DT_BF16: return CU_TMAP_BF16;
  case GC_DT_F32: return CU_TMAP_F32;
  case GC_DT_F64: return CU_TMAP_F64;
  default: return CU_TMAP_I32;
  }
}

/* A 2-D map: dimension 0 the columns (contiguous), 1 the rows; element
 * strides 1; zero fill past the matrix; L2 promotion of 256 bytes (what
 * CUTLASS uses for GEMM operands). */
static int cuda_tmap_encode(gc_dev_t *dev, const gc_tmap_spec_t *s, gc_dtype_t dtype,
                            gc_dptr_t ptr, void *out, gc_err_t *e) {
  int rc = bind((cuda_dev_t *)dev, e);
  if (rc) return rc;
  if (!cu.TensorMapEncodeTiled)
    return gc_err_set(e, GC_EUNSUPPORTED, "NVIDIA driver too old for tensor maps: libcuda.so.1 "
                      "has no cuTensorMapEncodeTiled (CUDA 12.0+)");
  const unsigned long long dims[2] = {(unsigned long long)s->cols, (unsigned long long)s->rows};
  const unsigned long long strides[1] = {(unsigned long long)s->cols * gc_dtype_size(dtype)};
  const unsigned box[2] = {(unsigned)s->box_cols, (unsigned)s->box_rows}, es[2] = {1, 1};
  const int swz = s->swizzle == 128 ? 3 : s->swizzle == 64 ? 2 : s->swizzle == 32 ? 1 : 0;
  CU_TRY(e, GC_ELAUNCH, TensorMapEncodeTiled, out, cu_tmap_dtype(dtype), 2u, (void *)ptr, dims,
         strides, box, es, CU_TMAP_INTERLEAVE_NONE, swz, CU_TMAP_L2_PROMOTION_256B,
         CU_TMAP_OOB_FILL_ZERO);
  return GC_OK;
}

/* ---- graphs ---------------------------------------------------------- */

static int is_cuda(gc_dev_t *dev, gc_err_t *e) {
  if (dev && dev->ops == &gc_cuda_ops) return GC_OK;
  return gc_err_set(e, GC_EUNSUPPORTED, "CUDA graphs need a cuda device, not %s",
                    dev ? dev->info.backend : "none");
}

/* Thread-local mode: other threads of the process (a tuner's workers)
 * may go on allocating while this one captures. */
int gc_cuda_graph_begin(gc_dev_t *dev, gc_err_t *e) {
  int rc = is_cuda(dev, e);
  cuda_dev_t *d = (cuda_dev_t *)dev;
  if (rc || (rc = bind(d, e))) return rc;
  if (d->capturing) return gc_err_set(e, GC_EINVAL, "a CUDA graph capture is already open");
  CU_TRY(e, GC_EDEVICE, StreamBeginCapture, d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  d->capturing = 1;
  return GC_OK;
}

/* Always ends the capture, also when a call inside it failed (the capture
 * is then invalidated and reported here). */
int gc_cuda_graph_end(gc_dev_t *dev, void **exec, gc_err_t *e) {
  int rc = is_cuda(dev, e);
  cuda_dev_t *d = (cuda_dev_t *)dev;
  *exec = NULL;
  if (rc || (rc = bind(d, e))) return rc;
  if (!d->capturing) return gc_err_set(e, GC_EINVAL, "no CUDA graph capture is open");
  d->capturing = 0;
  CUgraph g = NULL;
  CU_TRY(e, GC_EDEVICE, StreamEndCapture, d->stream, &g);
  CUgraphExec x = NULL;
  CUresult r = cu.GraphInstantiateWithFlags(&x, g, 0);
  cu.GraphDestroy(g); /* the executable graph does not need it */
  if (r != CUDA_SUCCESS) return cu_fail(e, GC_EDEVICE, r, "cuGraphInstantiateWithFlags");
  *exec = x;
  return GC_OK;
}

int gc_cuda_graph_launch(gc_dev_t *dev, void *exec, gc_err_t *e) {
  int rc = is_cuda(dev, e);
  cuda_dev_t *d = (cuda_dev_t *)dev;
  if (rc || (rc = no_capture(d, "graph launch", e)) || (rc = bind(d, e))) return rc;
  if (!exec) return gc_err_set(e, GC_EINVAL, "no CUDA graph to launch");
  CU_TRY(e, GC_ELAUNCH, GraphLaunch, (CUgraphExec)exec, d->stream);
  return GC_OK;
}

void gc_cuda_graph_destroy(gc_dev_t *dev, void *exec) {
  if (!exec || is_cuda(dev, NULL) || bind((cuda_dev_t *)dev, NULL)) return;
  cu.GraphExecDestroy((CUgraphExec)exec);
}

const gc_dev_ops_t gc_cuda_ops = {
    .name = "cuda",
    .open = cuda_open,
    .close = cuda_close,
    .runs_target = cuda_runs_target,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .memset = cuda_memset,
    .host_ptr = cuda_host_ptr,
    .page_size = NULL, /* no page protection: runtime/check.c's guard patterns */
    .protect = NULL,
    .module_load = cuda_module_load,
    .module_unload = cuda_module_unload,
    .kernel = cuda_kernel,
    .launch = cuda_launch,
    .kernel_pdl = cuda_kernel_pdl,
    .sync = cuda_sync,
    .set_stream = cuda_set_stream,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_elapsed = cuda_event_elapsed,
    .graph_begin = gc_cuda_graph_begin,
    .graph_end = gc_cuda_graph_end,
    .graph_launch = gc_cuda_graph_launch,
    .graph_destroy = gc_cuda_graph_destroy,
    .tmap_encode = cuda_tmap_encode,
    .flush = cuda_flush,
};
