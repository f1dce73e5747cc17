/* dev.h — the device interface every backend implements: memory, copies,
 * code-object loading, kernel lookup, launch, synchronisation and timing.
 * Nothing above this interface names a vendor. Backends: cpu, cuda
 * (NVIDIA, driver API) and hip (AMD, HIP runtime), behind the same calls. */
#ifndef GC_DEV_H
#define GC_DEV_H

#include "../base/base.h"
#include "../core/ops.h"
#include "../core/problem.h"
#include "../core/tmapspec.h"

typedef struct gc_dev gc_dev_t;
typedef struct gc_module gc_module_t;
typedef struct gc_kernel gc_kernel_t;
typedef struct gc_event gc_event_t;

typedef struct gc_dev_info {
  char backend[8];     /* "cpu" */
  char arch[64];       /* "x86-64-v4", "sm_90", "gfx942:sramecc+:xnack-" */
  char target[64];     /* the gcore-gen target that builds code for it */
  char name[128];      /* marketing name */
  int64_t compute_units; /* cores, SMs or CUs */
  int64_t mem_bytes;
  int64_t l2_bytes;    /* the GPU's L2 (CUDA); 0 where not asked (HIP, the CPU) */
  char driver[64];     /* driver / runtime version */
  int host_memory;     /* 1: device addresses are host addresses (cpu), so
                          host data can be used in place without a copy */
  int ordinal;         /* the ordinal it was opened with (gc_dev_open) */
} gc_dev_info_t;

/* Open device ordinal of backend ("cpu"). Errors say what was missing. */
int gc_dev_open(const char *backend, int ordinal, gc_dev_t **out, gc_err_t *e);
void gc_dev_close(gc_dev_t *d);
const gc_dev_info_t *gc_dev_info(const gc_dev_t *d);

/* 1 when code built for target (a bundle's target string) runs here. */
int gc_dev_runs_target(const gc_dev_t *d, const char *target);

/* Memory. Allocations are at least 256-byte aligned. */
int gc_dev_alloc(gc_dev_t *d, size_t n, gc_dptr_t *out, gc_err_t *e);
void gc_dev_free(gc_dev_t *d, gc_dptr_t p);
int gc_dev_upload(gc_dev_t *d, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e);
int gc_dev_download(gc_dev_t *d, void *dst, gc_dptr_t src, size_t n, gc_err_t *e);
int gc_dev_memset(gc_dev_t *d, gc_dptr_t dst, int byte, size_t n, gc_err_t *e);
/* n bytes from src to dst, both on d, not overlapping; in stream order,
 * as a launch (and so captured into a graph as one). */
int gc_dev_copy(gc_dev_t *d, gc_dptr_t dst, gc_dptr_t src, size_t n, gc_err_t *e);
/* Evict the device's caches before a cold-cache timing by passing n bytes
 * at buf through them. Where the backend can, the bytes are read: a write
 * (the fallback, a memset) leaves the cache full of dirty lines that the
 * timed kernel then pays to write back, which inflates a 10 µs kernel by
 * several µs. buf's contents are left as they are, or overwritten. */
int gc_dev_flush(gc_dev_t *d, gc_dptr_t buf, size_t n, gc_err_t *e);
/* Host-visible address of device memory, or NULL where there is none. */
void *gc_dev_host_ptr(gc_dev_t *d, gc_dptr_t p);

/* Page protection, where the backend has it (cpu: mprotect), so that a
 * kernel that writes where it may not faults at once instead of leaving
 * damage to be found later. gc_dev_page_size is the granule (the host's
 * page size), or 0 where device memory cannot be protected (cuda, hip).
 * gc_dev_protect sets [p, p+n) of an allocation to prot; p and n are
 * multiples of the granule. While a range is not GC_PROT_RW the device's
 * own copies into it (upload, memset) fault too: set it back first, and
 * before gc_dev_free. GC_EUNSUPPORTED where the granule is 0. */
enum { GC_PROT_NONE = 0, GC_PROT_READ = 1, GC_PROT_RW = 3 };
size_t gc_dev_page_size(gc_dev_t *d);
int gc_dev_protect(gc_dev_t *d, gc_dptr_t p, size_t n, int prot, gc_err_t *e);

/* Running ahead of the device. A host loop that enqueues step k + 1
 * before it has read step k's result (greedy decoding: the device feeds
 * each step's argmax to the next) needs copies that return at once and a
 * result it collects later:
 * - gc_dev_put32 stores v at dst (4-byte aligned) in the device's order
 *   (after the operations before it, before those after); v is taken now.
 * - gc_dev_post copies n (1 .. GC_DEV_BOX_BYTES) bytes at src into box
 *   (0 .. GC_DEV_BOXES - 1) in the device's order and returns at once.
 * - gc_dev_take waits for box's post, gives its n bytes (n as posted) at
 *   dst and empties the box; a box holds one post: the next replaces it.
 * Refused while a graph capture is open. A backend that cannot run ahead
 * (cpu) does each at once: the same results, no overlap. */
#define GC_DEV_BOXES 4
#define GC_DEV_BOX_BYTES 64
int gc_dev_put32(gc_dev_t *d, gc_dptr_t dst, uint32_t v, gc_err_t *e);
int gc_dev_post(gc_dev_t *d, int box, gc_dptr_t src, size_t n, gc_err_t *e);
int gc_dev_take(gc_dev_t *d, int box, void *dst, size_t n, gc_err_t *e);
/* A kernel's own post (greedy decoding's id, stored by the step's last
 * kernel: no copy between two steps):
 * - gc_dev_box_addr gives the device address of box's first 4 bytes, 4-byte
 *   aligned, where a kernel may store (the box's memory is visible to the
 *   device, e.g. page-locked and mapped);
 * - gc_dev_mark posts those 4 bytes as they will be after the operations
 *   before it (the kernel's store among them), in the device's order, and
 *   returns at once; gc_dev_take(d, box, dst, 4) then waits for them.
 * GC_EUNSUPPORTED where the boxes are not visible to the device (the
 * caller posts a copy instead). A GPU refuses a mark, as a post, while a
 * graph capture is open. */
int gc_dev_box_addr(gc_dev_t *d, int box, gc_dptr_t *out, gc_err_t *e);
int gc_dev_mark(gc_dev_t *d, int box, gc_err_t *e);

/* Code objects and kernels. */
int gc_dev_module_load(gc_dev_t *d, const void *code, size_t n, gc_module_t **out,
                       gc_err_t *e);
void gc_dev_module_unload(gc_dev_t *d, gc_module_t *m);
int gc_dev_kernel(gc_dev_t *d, gc_module_t *m, const char *name, gc_kernel_t **out,
                  gc_err_t *e);
/* Let k's later launches overlap the kernel before them in the stream
 * (programmatic dependent launch, CUDA on sm_90 and newer): k may start
 * once its predecessor allows it (gc_pdl_launch in its code) and must
 * itself wait (gc_pdl_wait) before it touches what that kernel writes,
 * which a template declares with @pdl. Returns 1 when the backend and
 * device do it, 0 where launches stay serialised (cpu, hip, older
 * NVIDIA GPUs and drivers); on = 0 turns it off again. */
int gc_dev_kernel_pdl(gc_dev_t *d, gc_kernel_t *k, int on);

/* Launch k over grid × block with dynamic shared memory shmem. args[i]
 * points at the value of argument i (as cuLaunchKernel). On the CPU, the
 * grid's product is the task count and block[0] the thread count (0 =
 * all). Launches are ordered; completion is observed by gc_dev_sync. */
int gc_dev_launch(gc_dev_t *d, gc_kernel_t *k, const int64_t grid[3],
                  const int64_t block[3], size_t shmem, void **args, gc_err_t *e);
int gc_dev_sync(gc_dev_t *d, gc_err_t *e);

/* Order the device's later operations (copies, launches, events, sync,
 * capture) on a caller's stream instead of its own: *stream is a CUstream
 * (cuda) or hipStream_t (hip) of the device's primary context, its value
 * 0 that context's default stream; stream NULL goes back to the device's
 * own stream. The caller keeps its stream alive while it is set, and
 * callers that share a device serialise around the switch. Backends
 * without streams (cpu) take only NULL or a NULL handle. Refused while a
 * graph capture is open. */
int gc_dev_set_stream(gc_dev_t *d, void *const *stream, gc_err_t *e);

/* Make d current on this thread and give in *stream the stream its
 * operations are ordered on (own or set; a CUstream or hipStream_t), NULL
 * on a backend without streams: for a vendor library that enqueues work of
 * its own after d's (NCCL, RCCL). Errors: those of making d current. */
int gc_dev_stream(gc_dev_t *d, void **stream, gc_err_t *e);

/* Encode into out (128 bytes, 64-byte aligned) the tensor map of s over
 * the row-major matrix of dtype at device address ptr: a 2-D tiled map,
 * out-of-bounds elements read as zero, the box and swizzle of s (see
 * runtime/tmap.h, which checks what the map needs of its buffer first).
 * A host-only call. GC_EUNSUPPORTED on backends without tensor maps
 * (cpu, hip) and on CUDA drivers older than 12.0. */
int gc_dev_tmap_encode(gc_dev_t *d, const gc_tmap_spec_t *s, gc_dtype_t dtype, gc_dptr_t ptr,
                       void *out, gc_err_t *e);

/* Graphs: launches between begin and end are recorded, not run; the
 * result replays them all with one call. GC_EUNSUPPORTED on backends
 * without graphs (cpu), where callers launch directly instead. */
typedef struct gc_graph gc_graph_t;
int gc_dev_graph_begin(gc_dev_t *d, gc_err_t *e);
int gc_dev_graph_end(gc_dev_t *d, gc_graph_t **out, gc_err_t *e);
int gc_dev_graph_launch(gc_dev_t *d, gc_graph_t *g, gc_err_t *e);
void gc_dev_graph_destroy(gc_dev_t *d, gc_graph_t *g);

/* Events for timing on the device's own clock. */
int gc_dev_event_create(gc_dev_t *d, gc_event_t **out, gc_err_t *e);
void gc_dev_event_destroy(gc_dev_t *d, gc_event_t *ev);
int gc_dev_event_record(gc_dev_t *d, gc_event_t *ev, gc_err_t *e);
/* Milliseconds between two recorded, completed events. */
int gc_dev_event_elapsed(gc_dev_t *d, gc_event_t *a, gc_event_t *b, double *ms,
                         gc_err_t *e);

#endif
