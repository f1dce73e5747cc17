/* gpu_impl.h — the GPU backend skeleton: what the cuda and hip backends
 * share (memory, code objects, kernels, launches, sync, events, graph
 * capture and replay, the capture guards) is written once in gpu.c over a
 * table of vendor calls, gc_gpu_api_t, that cuda.c and hip.c fill from
 * their dlopen'd libraries. Internal to runtime/ and its tests:
 * tests/c/test_gpu.c fills the table with a mock GPU in host memory, so
 * the code both vendors run is tested on a machine with neither. */
#ifndef GC_GPU_IMPL_H
#define GC_GPU_IMPL_H

#include "dev_impl.h"

typedef int gc_gpu_res_t;                /* CUresult, hipError_t: 0 is success */
typedef unsigned long long gc_gpu_ptr_t; /* a device address as the calls take
                                            it (CUDA's CUdeviceptr; hip.c's
                                            wrappers convert its void *) */
typedef struct gc_gpu_dev gc_gpu_dev_t;

/* What a vendor's failure means to the skeleton (gc_gpu_api_t.classify). */
enum {
  GC_GPU_R_OTHER,     /* any other failure */
  GC_GPU_R_OOM,       /* out of device memory */
  GC_GPU_R_NOT_FOUND, /* the module has no function of that name */
  GC_GPU_R_WRONG_ISA, /* the code object is not for this GPU */
  GC_GPU_R_FAULT,     /* a kernel faulted: the context is lost, and every
                         call that reports it is a launch error */
};

/* One vendor call: a function with the shared signature (the library's
 * own entry point where it has that signature, else a small wrapper in
 * the vendor's file), and the name a failure is reported under
 * ("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (...)"). fn NULL: optional and
 * absent. */
#define GC_GPU_CALL(field, params)   \
  struct {                           \
    gc_gpu_res_t(*fn) params;        \
    const char *name;                \
  } field

typedef struct gc_gpu_api {
  /* ---- words and checks ---------------------------------------------- */
  const char *vendor;     /* "CUDA": "a CUDA graph capture is already open" */
  const char *shmem_what; /* "dynamic shared memory (LDS)": "launch asks for N bytes of ..." */
  const char *wrong_isa;  /* what a code object for another GPU is called, before
                             the device's arch: "code object was not built for this" */
  int upload_waits;       /* 1: an upload waits for its copy before it returns
                             (HIP does not promise that an async copy from pageable
                             memory has read src when it returns) */
  /* "NAME (meaning)" for r into buf, e.g. "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" */
  void (*describe)(gc_gpu_res_t r, char *buf, size_t n);
  int (*classify)(gc_gpu_res_t r); /* GC_GPU_R_* of a failure */
  /* GC_OK when code (n bytes) is a code object the vendor's loader may be
   * given (which takes no size and trusts it), else GC_ECORRUPT. */
  int (*check_code)(const void *code, size_t n, gc_err_t *e);

  /* ---- calls ----------------------------------------------------------- */
  GC_GPU_CALL(bind, (gc_gpu_dev_t *d)); /* make d current on the calling
                                           thread: its context (CUDA) or device (HIP) */
  GC_GPU_CALL(stream_create, (void **stream)); /* a non-blocking stream */
  GC_GPU_CALL(stream_destroy, (void *stream));
  GC_GPU_CALL(stream_sync, (void *stream));
  GC_GPU_CALL(mem_alloc, (gc_gpu_ptr_t *p, size_t n));
  GC_GPU_CALL(mem_free, (gc_gpu_ptr_t p));
  GC_GPU_CALL(mem_info, (size_t *free, size_t *total));
  GC_GPU_CALL(copy_htod, (gc_gpu_ptr_t dst, const void *src, size_t n, void *stream));
  GC_GPU_CALL(copy_dtoh, (void *dst, gc_gpu_ptr_t src, size_t n, void *stream));
  GC_GPU_CALL(memset8, (gc_gpu_ptr_t dst, unsigned char byte, size_t n, void *stream));
  GC_GPU_CALL(copy_dtod, (gc_gpu_ptr_t dst, gc_gpu_ptr_t src, size_t n, void *stream));
  GC_GPU_CALL(module_load, (void **mod, const void *image));
  GC_GPU_CALL(module_unload, (void *mod));
  GC_GPU_CALL(module_function, (void **fn, void *mod, const char *name));
  /* Dynamic shared memory beyond what a function gets unasked must be
   * granted first (CUDA: over 48 KiB). func_shmem reads what it may use
   * now, func_set_shmem raises it; both NULL where the vendor has no
   * opt-in (HIP: a block gets at most max_shmem, static and dynamic). */
  GC_GPU_CALL(func_shmem, (int *bytes, void *fn));
  GC_GPU_CALL(func_set_shmem, (void *fn, int bytes));
  /* cuLaunchKernel's arguments: fn, grid x y z, block x y z, dynamic
   * shared memory, stream, kernel arguments, extra (NULL). */
  GC_GPU_CALL(launch, (void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shmem, void *stream, void **args,
                       void **extra));
  /* The same for a kernel with pdl set (gc_dev_kernel_pdl): it may start
   * while the kernel before it drains. NULL where there is no such launch. */
  GC_GPU_CALL(launch_pdl, (void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shmem, void *stream, void **args,
                           void **extra));
  GC_GPU_CALL(event_create, (void **ev));
  /* An event that is waited on but never timed (the boxes': a greedy
   * step records one a step, and one that keeps timing costs about 1.8
   * us of the step on an H100, bench/graph_gap.cu). NULL: event_create
   * serves. */
  GC_GPU_CALL(event_create_untimed, (void **ev));
  GC_GPU_CALL(event_destroy, (void *ev));
  GC_GPU_CALL(event_record, (void *ev, void *stream));
  GC_GPU_CALL(event_sync, (void *ev));
  GC_GPU_CALL(event_elapsed, (float *ms, void *start, void *end));
  /* Capture in thread-local mode: other threads of the process (a
   * tuner's workers) may go on allocating while this one captures. */
  GC_GPU_CALL(capture_begin, (void *stream));
  GC_GPU_CALL(capture_end, (void *stream, void **graph));
  GC_GPU_CALL(graph_instantiate, (void **exec, void *graph));
  GC_GPU_CALL(graph_destroy, (void *graph));
  GC_GPU_CALL(graph_launch, (void *exec, void *stream));
  GC_GPU_CALL(graph_exec_destroy, (void *exec));

  /* Running ahead (gc_dev_put32, gc_dev_post), each optional (fn NULL:
   * an upload; a download that waits): write32 stores a 32-bit value in
   * the stream's order, taken at the call (cuStreamWriteValue32);
   * host_alloc gives page-locked host memory, mapped into the device's
   * addresses, that an async copy fills without waiting (cuMemHostAlloc),
   * host_free returns it; host_dptr gives the device address of such
   * memory (cuMemHostGetDevicePointer: gc_dev_box_addr, for a kernel's
   * own store). */
  GC_GPU_CALL(write32, (void *stream, gc_gpu_ptr_t dst, unsigned v));
  GC_GPU_CALL(host_alloc, (void **p, size_t n));
  GC_GPU_CALL(host_free, (void *p));
  GC_GPU_CALL(host_dptr, (gc_gpu_ptr_t *out, void *p));

  /* What the vendor releases on close, after the stream is gone (bound:
   * the device could still be made current); NULL: nothing. */
  void (*release)(gc_gpu_dev_t *d, int bound);
} gc_gpu_api_t;

/* A GPU device: a vendor's device struct starts with this. */
struct gc_gpu_dev {
  struct gc_dev base;
  const gc_gpu_api_t *api;
  void *stream;  /* every operation is ordered on it: own, or a caller's (set_stream) */
  void *own;     /* the stream gc_gpu_start made */
  int max_shmem; /* shared memory (LDS) a block may have, where granted */
  int capturing; /* a graph capture is open on stream */
  unsigned char *boxes;       /* [GC_DEV_BOXES][GC_DEV_BOX_BYTES] page-locked (host_alloc), at the first post */
  void *box_ev[GC_DEV_BOXES]; /* recorded after each box's copy (or mark) */
};

/* The handles gc_dev_* hands out on a GPU. */
struct gc_module {
  void *mod;
};
struct gc_kernel {
  void *fn;
  unsigned shmem_granted; /* dynamic shared memory the function may use now */
  int pdl;                /* launched by launch_pdl */
};
struct gc_event {
  void *ev;
};

/* Set e for a failed vendor call: "call: NAME (meaning)". Kernel faults
 * surfacing here are launch errors whatever the call. Returns the code. */
int gc_gpu_fail(const gc_gpu_api_t *api, gc_err_t *e, int code, gc_gpu_res_t r,
                const char *call);
/* Make d current on this thread. */
int gc_gpu_bind(gc_gpu_dev_t *d, gc_err_t *e);
/* Bind d and create its stream: the last step of a vendor's open, once
 * d->base, d->api and d->max_shmem are set. On failure d has no stream. */
int gc_gpu_start(gc_gpu_dev_t *d, gc_err_t *e);

/* The ELF a vendor's loader takes, as its messages name it. */
typedef struct gc_gpu_elf {
  unsigned machine;         /* e_machine: EM_CUDA (190), EM_AMDGPU (224) */
  const char *machine_name; /* "NVIDIA CUDA", "AMDGPU" */
  const char *a_kind;       /* "a cubin", "an AMDGPU code object" */
  const char *kind;         /* "cubin", "AMDGPU code object" */
} gc_gpu_elf_t;
/* The loaders (cuModuleLoadData, hipModuleLoadData) take no size and
 * trust the image, so check that code is an ELF64 for k's machine whose
 * headers and sections lie inside its n bytes: GC_OK, or GC_ECORRUPT
 * saying what is wrong. Reads nothing past code + n. */
int gc_gpu_check_elf(const void *code, size_t n, const gc_gpu_elf_t *k, gc_err_t *e);

/* The shared operations (gpu.c); a vendor's gc_dev_ops_t lists them with
 * GC_GPU_OPS and adds its own name, open, runs_target and extras. */
void gc_gpu_close(gc_dev_t *d);
int gc_gpu_alloc(gc_dev_t *d, size_t n, gc_dptr_t *out, gc_err_t *e);
void gc_gpu_free(gc_dev_t *d, gc_dptr_t p);
int gc_gpu_upload(gc_dev_t *d, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e);
int gc_gpu_download(gc_dev_t *d, void *dst, gc_dptr_t src, size_t n, gc_err_t *e);
int gc_gpu_memset(gc_dev_t *d, gc_dptr_t dst, int byte, size_t n, gc_err_t *e);
int gc_gpu_copy(gc_dev_t *d, gc_dptr_t dst, gc_dptr_t src, size_t n, gc_err_t *e);
int gc_gpu_put32(gc_dev_t *d, gc_dptr_t dst, uint32_t v, gc_err_t *e);
int gc_gpu_post(gc_dev_t *d, int box, gc_dptr_t src, size_t n, gc_err_t *e);
int gc_gpu_take(gc_dev_t *d, int box, void *dst, size_t n, gc_err_t *e);
int gc_gpu_box_addr(gc_dev_t *d, int box, gc_dptr_t *out, gc_err_t *e);
int gc_gpu_mark(gc_dev_t *d, int box, gc_err_t *e);
void *gc_gpu_host_ptr(gc_dev_t *d, gc_dptr_t p);
int gc_gpu_module_load(gc_dev_t *d, const void *code, size_t n, gc_module_t **out,
                       gc_err_t *e);
void gc_gpu_module_unload(gc_dev_t *d, gc_module_t *m);
int gc_gpu_kernel(gc_dev_t *d, gc_module_t *m, const char *name, gc_kernel_t **out,
                  gc_err_t *e);
int gc_gpu_launch(gc_dev_t *d, gc_kernel_t *k, const int64_t grid[3], const int64_t block[3],
                  size_t shmem, void **args, gc_err_t *e);
int gc_gpu_sync(gc_dev_t *d, gc_err_t *e);
int gc_gpu_set_stream(gc_dev_t *d, void *const *stream, gc_err_t *e);
int gc_gpu_get_stream(gc_dev_t *d, void **stream, gc_err_t *e);
int gc_gpu_event_create(gc_dev_t *d, gc_event_t **out, gc_err_t *e);
void gc_gpu_event_destroy(gc_dev_t *d, gc_event_t *ev);
int gc_gpu_event_record(gc_dev_t *d, gc_event_t *ev, gc_err_t *e);
int gc_gpu_event_elapsed(gc_dev_t *d, gc_event_t *a, gc_event_t *b, double *ms, gc_err_t *e);
int gc_gpu_graph_begin(gc_dev_t *d, gc_err_t *e);
int gc_gpu_graph_end(gc_dev_t *d, void **exec, gc_err_t *e);
int gc_gpu_graph_launch(gc_dev_t *d, void *exec, gc_err_t *e);
void gc_gpu_graph_destroy(gc_dev_t *d, void *exec);

#define GC_GPU_OPS                                                                        \
  .close = gc_gpu_close, .alloc = gc_gpu_alloc, .free = gc_gpu_free,                      \
  .upload = gc_gpu_upload, .download = gc_gpu_download, .memset = gc_gpu_memset,          \
  .copy = gc_gpu_copy,                                                                    \
  .put32 = gc_gpu_put32, .post = gc_gpu_post, .take = gc_gpu_take,                        \
  .box_addr = gc_gpu_box_addr, .mark = gc_gpu_mark,                                       \
  .host_ptr = gc_gpu_host_ptr, .module_load = gc_gpu_module_load,                         \
  .module_unload = gc_gpu_module_unload, .kernel = gc_gpu_kernel, .launch = gc_gpu_launch, \
  .sync = gc_gpu_sync, .set_stream = gc_gpu_set_stream, .get_stream = gc_gpu_get_stream,  \
  .event_create = gc_gpu_event_create,                                                    \
  .event_destroy = gc_gpu_event_destroy, .event_record = gc_gpu_event_record,             \
  .event_elapsed = gc_gpu_event_elapsed, .graph_begin = gc_gpu_graph_begin,               \
  .graph_end = gc_gpu_graph_end, .graph_launch = gc_gpu_graph_launch,                     \
  .graph_destroy = gc_gpu_graph_destroy

#endif
