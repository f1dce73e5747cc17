/* dev_impl.h — what a backend provides: a table of operations behind the
 * gc_dev_* calls. Internal to runtime/. The two GPU backends fill most of
 * theirs from one skeleton (gpu_impl.h, gpu.c). */
#ifndef GC_DEV_IMPL_H
#define GC_DEV_IMPL_H

#include "dev.h"

typedef struct gc_dev_ops {
  const char *name;
  int (*open)(int ordinal, gc_dev_t **out, gc_err_t *e);
  void (*close)(gc_dev_t *d);
  int (*runs_target)(const gc_dev_t *d, const char *target);
  int (*alloc)(gc_dev_t *d, size_t n, gc_dptr_t *out, gc_err_t *e);
  void (*free)(gc_dev_t *d, gc_dptr_t p);
  int (*upload)(gc_dev_t *d, gc_dptr_t dst, const void *src, size_t n, gc_err_t *e);
  int (*download)(gc_dev_t *d, void *dst, gc_dptr_t src, size_t n, gc_err_t *e);
  int (*memset)(gc_dev_t *d, gc_dptr_t dst, int byte, size_t n, gc_err_t *e);
  int (*copy)(gc_dev_t *d, gc_dptr_t dst, gc_dptr_t src, size_t n, gc_err_t *e);
  void *(*host_ptr)(gc_dev_t *d, gc_dptr_t p);
  /* gc_dev_put32, gc_dev_post, gc_dev_take (checked by dev.c); NULL: an
   * upload, and a download into the header's box, done at once. */
  int (*put32)(gc_dev_t *d, gc_dptr_t dst, uint32_t v, gc_err_t *e);
  int (*post)(gc_dev_t *d, int box, gc_dptr_t src, size_t n, gc_err_t *e);
  int (*take)(gc_dev_t *d, int box, void *dst, size_t n, gc_err_t *e);
  /* gc_dev_box_addr, gc_dev_mark (checked by dev.c); box_addr NULL: the
   * header's box (a backend whose device addresses are the host's, which
   * runs each operation at once), mark NULL: nothing to wait for. */
  int (*box_addr)(gc_dev_t *d, int box, gc_dptr_t *out, gc_err_t *e);
  int (*mark)(gc_dev_t *d, int box, gc_err_t *e);
  /* Page protection (gc_dev_page_size, gc_dev_protect); NULL where there
   * is none. */
  size_t (*page_size)(gc_dev_t *d);
  int (*protect)(gc_dev_t *d, gc_dptr_t p, size_t n, int prot, gc_err_t *e);
  int (*module_load)(gc_dev_t *d, const void *code, size_t n, gc_module_t **out,
                     gc_err_t *e);
  void (*module_unload)(gc_dev_t *d, gc_module_t *m);
  int (*kernel)(gc_dev_t *d, gc_module_t *m, const char *name, gc_kernel_t **out,
                gc_err_t *e);
  int (*launch)(gc_dev_t *d, gc_kernel_t *k, const int64_t grid[3],
                const int64_t block[3], size_t shmem, void **args, gc_err_t *e);
  /* gc_dev_kernel_pdl; NULL where launches are always serialised. */
  int (*kernel_pdl)(gc_dev_t *d, gc_kernel_t *k, int on);
  int (*sync)(gc_dev_t *d, gc_err_t *e);
  /* gc_dev_set_stream; NULL on a backend without streams. */
  int (*set_stream)(gc_dev_t *d, void *const *stream, gc_err_t *e);
  /* gc_dev_stream; NULL on a backend without streams. */
  int (*get_stream)(gc_dev_t *d, void **stream, gc_err_t *e);
  int (*event_create)(gc_dev_t *d, gc_event_t **out, gc_err_t *e);
  void (*event_destroy)(gc_dev_t *d, gc_event_t *ev);
  int (*event_record)(gc_dev_t *d, gc_event_t *ev, gc_err_t *e);
  int (*event_elapsed)(gc_dev_t *d, gc_event_t *a, gc_event_t *b, double *ms,
                       gc_err_t *e);
  /* Graphs (capture of the device's stream, then replay). NULL on a
   * backend without them; gc_dev_graph_* then answers GC_EUNSUPPORTED.
   * graph_end always closes the capture and sets *exec (NULL on failure);
   * the executable graph is the backend's own handle. */
  int (*graph_begin)(gc_dev_t *d, gc_err_t *e);
  int (*graph_end)(gc_dev_t *d, void **exec, gc_err_t *e);
  int (*graph_launch)(gc_dev_t *d, void *exec, gc_err_t *e);
  void (*graph_destroy)(gc_dev_t *d, void *exec);
  /* Tensor maps (gc_dev_tmap_encode); NULL where there are none. */
  int (*tmap_encode)(gc_dev_t *d, const gc_tmap_spec_t *s, gc_dtype_t dtype, gc_dptr_t ptr,
                     void *out, gc_err_t *e);
  /* Cache eviction by reading (gc_dev_flush); NULL: a memset does it. */
  int (*flush)(gc_dev_t *d, gc_dptr_t buf, size_t n, gc_err_t *e);
} gc_dev_ops_t;

/* Every device struct starts with this header. */
struct gc_dev {
  const gc_dev_ops_t *ops;
  gc_dev_info_t info;
  size_t box_n[GC_DEV_BOXES];                        /* bytes posted to each box, 0: empty */
  unsigned char box[GC_DEV_BOXES][GC_DEV_BOX_BYTES]; /* the boxes where post is NULL */
};

extern const gc_dev_ops_t gc_cpu_ops;
extern const gc_dev_ops_t gc_cuda_ops;
extern const gc_dev_ops_t gc_hip_ops;

/* GC_OK when code (n bytes) is an ELF64 cubin whose headers and sections
 * lie inside it, else GC_ECORRUPT saying what is wrong (cuda.c). */
int gc_cuda_check_cubin(const void *code, size_t n, gc_err_t *e);

/* 1 when an AMD code object for target ("gfx942", "gfx90a:xnack+", ...)
 * runs on a device whose arch is dev_arch ("gfx942:sramecc+:xnack-"):
 * the same processor, and every feature the target states (+ or -) set
 * the same way on the device. A feature the target leaves out means
 * "either". Pure string logic (hip.c), so tests need no GPU. */
int gc_hip_target_runs(const char *dev_arch, const char *target);
/* GC_OK when code (n bytes) is an ELF64 AMDGPU code object whose headers
 * and sections lie inside it, else GC_ECORRUPT saying what is wrong. */
int gc_hip_check_code_object(const void *code, size_t n, gc_err_t *e);

#endif
