/* dev_impl.h — what a backend provides: a table of operations behind the
 * gc_dev_* calls. Internal to runtime/. */
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
  void *(*host_ptr)(gc_dev_t *d, gc_dptr_t p);
  int (*module_load)(gc_dev_t *d, const void *code, size_t n, gc_module_t **out,
                     gc_err_t *e);
  void (*module_unload)(gc_dev_t *d, gc_module_t *m);
  int (*kernel)(gc_dev_t *d, gc_module_t *m, const char *name, gc_kernel_t **out,
                gc_err_t *e);
  int (*launch)(gc_dev_t *d, gc_kernel_t *k, const int64_t grid[3],
                const int64_t block[3], size_t shmem, void **args, gc_err_t *e);
  int (*sync)(gc_dev_t *d, gc_err_t *e);
  int (*event_create)(gc_dev_t *d, gc_event_t **out, gc_err_t *e);
  void (*event_destroy)(gc_dev_t *d, gc_event_t *ev);
  int (*event_record)(gc_dev_t *d, gc_event_t *ev, gc_err_t *e);
  int (*event_elapsed)(gc_dev_t *d, gc_event_t *a, gc_event_t *b, double *ms,
                       gc_err_t *e);
} gc_dev_ops_t;

/* Every device struct starts with this header. */
struct gc_dev {
  const gc_dev_ops_t *ops;
  gc_dev_info_t info;
};

extern const gc_dev_ops_t gc_cpu_ops;
extern const gc_dev_ops_t gc_cuda_ops;

/* Backend-specific graph entry points (NULL-able in the table would be
 * neater; only cuda has them so far). */
int gc_cuda_graph_begin(gc_dev_t *d, gc_err_t *e);
int gc_cuda_graph_end(gc_dev_t *d, void **exec, gc_err_t *e);
int gc_cuda_graph_launch(gc_dev_t *d, void *exec, gc_err_t *e);
void gc_cuda_graph_destroy(gc_dev_t *d, void *exec);

#endif
