/* cuda.c — the cuda backend: NVIDIA GPUs through the CUDA driver API, with
 * libcuda.so.1 dlopen'd at run time so one binary runs with or without a
 * driver. Each device uses its primary context, made current on whichever
 * thread calls, and one stream.
 *
 * What is CUDA's own is here: loading the driver and filling the GPU
 * skeleton's table of calls (cu_fill_gpu), the errors' names and kinds,
 * device discovery and info, which sm_XX targets run, the cubin check,
 * tensor maps, programmatic dependent launch (cuLaunchKernelEx) and the
 * cache flush's PTX read kernel. Memory, modules, kernels, launches,
 * sync, events and graph capture are the skeleton's (gpu.c), shared with
 * hip.c. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_impl.h"

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
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_STREAM_NON_BLOCKING = 1,
  CU_EVENT_DEFAULT = 0,
  CU_EVENT_DISABLE_TIMING = 2,
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
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
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
  /* optional: a value written in stream order; page-locked host memory */
  CUresult (*StreamWriteValue32)(CUstream, CUdeviceptr, unsigned, unsigned);
  CUresult (*MemHostAlloc)(void **, size_t, unsigned);
  CUresult (*MemFreeHost)(void *);
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
  CUresult (*TensorMapEncodeTiled)(void *, int, unsigned, void *, const unsigned long long *,
                                   const unsigned long long *, const unsigned *, const unsigned *,
                                   int, int, int, int);
} cu_api_t;

/* Loaded once and kept: unloading a driver under live contexts is unsafe. */
static pthread_mutex_t cu_mu = PTHREAD_MUTEX_INITIALIZER;
static cu_api_t cu;
static gc_gpu_api_t cu_gpu; /* the skeleton's table, filled from cu */
static void cu_fill_gpu(gc_gpu_api_t *g);

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
    S(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL),
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
    void *wv = dlsym(h, "cuStreamWriteValue32_v2"); /* optional: CUDA 11.7+ */
    memcpy(&api.StreamWriteValue32, &wv, sizeof wv);
    void *ha = dlsym(h, "cuMemHostAlloc"), *hf = dlsym(h, "cuMemFreeHost");
    if (ha && hf) { /* optional, both or neither */
      memcpy(&api.MemHostAlloc, &ha, sizeof ha);
      memcpy(&api.MemFreeHost, &hf, sizeof hf);
      void *hd = dlsym(h, "cuMemHostGetDevicePointer_v2"); /* optional */
      memcpy(&api.MemHostGetDevicePointer, &hd, sizeof hd);
    }
    if (rc) {
      dlclose(h);
    } else {
      cu = api;
      cu_fill_gpu(&cu_gpu);
    }
  }
out:
  pthread_mutex_unlock(&cu_mu);
  return rc;
}

/* "CUDA_ERROR_X (string)" for r, into buf. */
static void cu_describe(CUresult r, char *buf, size_t n) {
  const char *name = NULL, *str = NULL;
  if (cu.GetErrorName(r, &name) != CUDA_SUCCESS || !name) name = "unknown CUDA error";
  if (cu.GetErrorString(r, &str) != CUDA_SUCCESS || !str) str = "?";
  snprintf(buf, n, "%s (%s)", name, str);
}

/* Faults are the errors a faulting kernel leaves behind (sticky: the
 * context is lost). */
static int cu_classify(CUresult r) {
  if (r == 700 || r == 701 || r == 702 || r == 710 || (r >= 714 && r <= 719))
    return GC_GPU_R_FAULT;
  switch (r) {
  case CUDA_ERROR_OUT_OF_MEMORY: return GC_GPU_R_OOM;
  case CUDA_ERROR_NOT_FOUND: return GC_GPU_R_NOT_FOUND;
  case CUDA_ERROR_NO_BINARY_FOR_GPU: return GC_GPU_R_WRONG_ISA;
  default: return GC_GPU_R_OTHER;
  }
}

/* Call cu.fn(...) and return the failure, named "cu<fn>", from the caller. */
#define CU_TRY(e, code, fn, ...)                                                  \
  do {                                                                            \
    CUresult r_ = cu.fn(__VA_ARGS__);                                             \
    if (r_ != CUDA_SUCCESS) return gc_gpu_fail(&cu_gpu, e, code, r_, "cu" #fn);   \
  } while (0)

/* ---- device ---------------------------------------------------------- */

typedef struct cuda_dev {
  gc_gpu_dev_t gpu;   /* max_shmem: opt-in dynamic + static shared memory per block */
  CUdevice dev;
  CUcontext ctx;
  int cc_major, cc_minor;
  CUmodule flush_mod; /* the read kernel of cuda_flush, loaded on first use */
  CUfunction flush_fn;
} cuda_dev_t;

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
  gc_dev_info_t *in = &d->gpu.base.info;
  int sms = 0, ver = 0, l2 = 0;
  size_t mem = 0;
  const struct { int attr, *out; } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &l2},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &d->cc_major},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &d->cc_minor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &sms},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &d->gpu.max_shmem},
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
  in->l2_bytes = l2;
  snprintf(in->driver, sizeof in->driver, "cuda driver %d", ver);
  in->host_memory = 0;
  return GC_OK;
}

/* Retain the primary context, then the skeleton binds it and makes the
 * stream; undone by gc_gpu_close and cuda_release. */
static int cuda_start(cuda_dev_t *d, gc_err_t *e) {
  CU_TRY(e, GC_EDEVICE, DevicePrimaryCtxRetain, &d->ctx, d->dev);
  int rc = gc_gpu_start(&d->gpu, e);
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
  d->gpu.base.ops = &gc_cuda_ops;
  d->gpu.api = &cu_gpu;
  d->dev = dev;
  if ((rc = cuda_fill_info(d, e)) || (rc = cuda_start(d, e))) {
    free(d);
    return rc;
  }
  *out = &d->gpu.base;
  return GC_OK;
}

/* On close, after the skeleton has destroyed the stream: memory and
 * modules not freed by the caller go with the context when its last user
 * releases it. */
static void cuda_release(gc_gpu_dev_t *g, int bound) {
  cuda_dev_t *d = (cuda_dev_t *)g;
  if (bound && d->flush_mod) cu.ModuleUnload(d->flush_mod);
  cu.DevicePrimaryCtxRelease(d->dev);
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

/* ---- code ------------------------------------------------------------ */

int gc_cuda_check_cubin(const void *code, size_t n, gc_err_t *e) {
  static const gc_gpu_elf_t cubin = {EM_CUDA, "NVIDIA CUDA", "a cubin", "cubin"};
  return gc_gpu_check_elf(code, n, &cubin, e);
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
  int rc = gc_gpu_bind(&d->gpu, e);
  if (rc) return rc;
  if (!d->flush_fn) {
    CU_TRY(e, GC_EDEVICE, ModuleLoadData, &d->flush_mod, flush_ptx);
    CU_TRY(e, GC_EDEVICE, ModuleGetFunction, &d->flush_fn, d->flush_mod, "gc_flush_read");
  }
  uint64_t p = (uint64_t)buf, n16 = n / 16;
  void *args[] = {&p, &n16};
  CU_TRY(e, GC_ELAUNCH, LaunchKernel, d->flush_fn, 1024, 1, 1, 256, 1, 1, 0, d->gpu.stream, args,
         NULL);
  return GC_OK;
}

/* Programmatic dependent launch needs sm_90 and cuLaunchKernelEx. */
static int cuda_kernel_pdl(gc_dev_t *dev, gc_kernel_t *k, int on) {
  cuda_dev_t *d = (cuda_dev_t *)dev;
  k->pdl = on && d->cc_major >= 9 && cu.LaunchKernelEx;
  return k->pdl;
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
 * CUTLASS uses for GEMM operands). A block format's map (its elements are
 * blocks of es bytes, a multiple of 16: gc_tmaps_plan checks) is 3-D over
 * 32-bit words: [rows][cols][es / 4], boxes of whole blocks. */
static int cuda_tmap_encode(gc_dev_t *dev, const gc_tmap_spec_t *s, gc_dtype_t dtype,
                            gc_dptr_t ptr, void *out, gc_err_t *e) {
  int rc = gc_gpu_bind((gc_gpu_dev_t *)dev, e);
  if (rc) return rc;
  if (!cu.TensorMapEncodeTiled)
    return gc_err_set(e, GC_EUNSUPPORTED, "NVIDIA driver too old for tensor maps: libcuda.so.1 "
                      "has no cuTensorMapEncodeTiled (CUDA 12.0+)");
  const unsigned long long bs = gc_dtype_size(dtype);
  const int blk = gc_dtype_is_block(dtype), r = blk ? 3 : 2, o = blk; /* o: the words' dimension first */
  unsigned long long dims[3] = {bs / 4, (unsigned long long)s->cols, (unsigned long long)s->rows};
  unsigned long long strides[2] = {bs, (unsigned long long)s->cols * bs};
  unsigned box[3] = {(unsigned)(bs / 4), (unsigned)s->box_cols, (unsigned)s->box_rows}, es[3] = {1, 1, 1};
  const int swz = s->swizzle == 128 ? 3 : s->swizzle == 64 ? 2 : s->swizzle == 32 ? 1 : 0;
  CU_TRY(e, GC_ELAUNCH, TensorMapEncodeTiled, out, blk ? CU_TMAP_I32 : cu_tmap_dtype(dtype), (unsigned)r,
         (void *)ptr, dims + 1 - o, strides + 1 - o, box + 1 - o, es, CU_TMAP_INTERLEAVE_NONE, swz,
         CU_TMAP_L2_PROMOTION_256B, CU_TMAP_OOB_FILL_ZERO);
  return GC_OK;
}

/* ---- the skeleton's table -------------------------------------------- */

/* Wrappers where the driver's signature is not the skeleton's. */
static CUresult cu_bind(gc_gpu_dev_t *d) {
  /* the context is current per thread (cheap: a thread-local store) */
  return cu.CtxSetCurrent(((cuda_dev_t *)d)->ctx);
}
static CUresult cu_stream_create(void **s) { return cu.StreamCreate(s, CU_STREAM_NON_BLOCKING); }
static CUresult cu_event_create(void **ev) { return cu.EventCreate(ev, CU_EVENT_DEFAULT); }
static CUresult cu_event_create_untimed(void **ev) { return cu.EventCreate(ev, CU_EVENT_DISABLE_TIMING); }
static CUresult cu_func_shmem(int *bytes, void *fn) {
  return cu.FuncGetAttribute(bytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn);
}
static CUresult cu_func_set_shmem(void *fn, int bytes) {
  return cu.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}
static CUresult cu_capture_begin(void *s) {
  return cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}
static CUresult cu_graph_instantiate(void **x, void *g) {
  return cu.GraphInstantiateWithFlags(x, g, 0);
}
static CUresult cu_write32(void *s, gc_gpu_ptr_t dst, unsigned v) {
  return cu.StreamWriteValue32(s, dst, v, 0); /* CU_STREAM_WRITE_VALUE_DEFAULT */
}
static CUresult cu_host_alloc(void **p, size_t n) {
  return cu.MemHostAlloc(p, n, 0x02); /* CU_MEMHOSTALLOC_DEVICEMAP: a kernel may store there */
}
static CUresult cu_host_dptr(gc_gpu_ptr_t *out, void *p) {
  CUdeviceptr d = 0;
  CUresult r = cu.MemHostGetDevicePointer(&d, p, 0);
  *out = (gc_gpu_ptr_t)d;
  return r;
}
/* May start while the kernel before it drains (it waits itself). */
static CUresult cu_launch_pdl(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shmem, void *stream,
                              void **args, void **extra) {
  cu_launch_attr_t at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
  at.value.programmatic_serialization_allowed = 1;
  cu_launch_config_t c = {{gx, gy, gz}, {bx, by, bz}, shmem, stream, &at, 1};
  return cu.LaunchKernelEx(&c, fn, args, extra);
}

static void cu_fill_gpu(gc_gpu_api_t *g) {
  *g = (gc_gpu_api_t){
      .vendor = "CUDA",
      .shmem_what = "dynamic shared memory",
      .wrong_isa = "code object was built for another GPU than this",
      .upload_waits = 0, /* the driver stages pageable src before it returns */
      .describe = cu_describe,
      .classify = cu_classify,
      .check_code = gc_cuda_check_cubin,
      .bind = {cu_bind, "cuCtxSetCurrent"},
      .stream_create = {cu_stream_create, "cuStreamCreate"},
      .stream_destroy = {cu.StreamDestroy, "cuStreamDestroy"},
      .stream_sync = {cu.StreamSynchronize, "cuStreamSynchronize"},
      .mem_alloc = {cu.MemAlloc, "cuMemAlloc"},
      .mem_free = {cu.MemFree, "cuMemFree"},
      .mem_info = {cu.MemGetInfo, "cuMemGetInfo"},
      .copy_htod = {cu.MemcpyHtoDAsync, "cuMemcpyHtoDAsync"},
      .copy_dtoh = {cu.MemcpyDtoHAsync, "cuMemcpyDtoHAsync"},
      .memset8 = {cu.MemsetD8Async, "cuMemsetD8Async"},
      .copy_dtod = {cu.MemcpyDtoDAsync, "cuMemcpyDtoDAsync"},
      .module_load = {cu.ModuleLoadData, "cuModuleLoadData"},
      .module_unload = {cu.ModuleUnload, "cuModuleUnload"},
      .module_function = {cu.ModuleGetFunction, "cuModuleGetFunction"},
      .func_shmem = {cu_func_shmem, "cuFuncGetAttribute"},
      .func_set_shmem = {cu_func_set_shmem, "cuFuncSetAttribute"},
      .launch = {cu.LaunchKernel, "cuLaunchKernel"},
      .launch_pdl = {cu.LaunchKernelEx ? cu_launch_pdl : NULL, "cuLaunchKernelEx"},
      .event_create = {cu_event_create, "cuEventCreate"},
      .event_create_untimed = {cu_event_create_untimed, "cuEventCreate"},
      .event_destroy = {cu.EventDestroy, "cuEventDestroy"},
      .event_record = {cu.EventRecord, "cuEventRecord"},
      .event_sync = {cu.EventSynchronize, "cuEventSynchronize"},
      .event_elapsed = {cu.EventElapsedTime, "cuEventElapsedTime"},
      .capture_begin = {cu_capture_begin, "cuStreamBeginCapture"},
      .capture_end = {cu.StreamEndCapture, "cuStreamEndCapture"},
      .graph_instantiate = {cu_graph_instantiate, "cuGraphInstantiateWithFlags"},
      .graph_destroy = {cu.GraphDestroy, "cuGraphDestroy"},
      .graph_launch = {cu.GraphLaunch, "cuGraphLaunch"},
      .graph_exec_destroy = {cu.GraphExecDestroy, "cuGraphExecDestroy"},
      .write32 = {cu.StreamWriteValue32 ? cu_write32 : NULL, "cuStreamWriteValue32"},
      .host_alloc = {cu.MemHostAlloc ? cu_host_alloc : NULL, "cuMemHostAlloc"},
      .host_free = {cu.MemFreeHost, "cuMemFreeHost"},
      .host_dptr = {cu.MemHostGetDevicePointer ? cu_host_dptr : NULL, "cuMemHostGetDevicePointer"},
      .release = cuda_release,
  };
}

const gc_dev_ops_t gc_cuda_ops = {
    .name = "cuda",
    .open = cuda_open,
    .runs_target = cuda_runs_target,
    .page_size = NULL, /* no page protection: runtime/check.c's guard patterns */
    .protect = NULL,
    .kernel_pdl = cuda_kernel_pdl,
    .tmap_encode = cuda_tmap_encode,
    .flush = cuda_flush,
    GC_GPU_OPS, /* memory, code, launches, sync, events, graphs: gpu.c */
};
