/* dispatch.h — a bundle opened on a device: picks the bundle target this
 * device runs, finds the kernel for a problem through the dispatch table,
 * loads its code object once, and launches it with the geometry the
 * bundle's expressions give for the problem's dimensions. */
#ifndef GC_DISPATCH_H
#define GC_DISPATCH_H

#include "../base/expr.h"
#include "../db/bundle.h"
#include "dev.h"
#include "tmap.h"

typedef struct gc_rt gc_rt_t;

typedef struct gc_rt_kernel {
  gc_dispatch_t d;    /* the entry */
  gc_kernel_t *k;     /* loaded */
  gc_env_t consts;    /* d.consts parsed */
  /* launch geometry for the last problem launched (expressions are parsed
   * once per shape, not on every launch of a decode step) */
  gc_problem_t geom_for;
  int64_t grid[3], block[3], shmem;
  gc_tmaps_t tmaps;   /* d.tmaps planned for geom_for (n = 0: none) */
  int geom_valid;
} gc_rt_kernel_t;

/* Open bundle_path for dev. Refuses a bundle with no code for dev, naming
 * the gcore-gen --target that would build it. Kernels whose entry says
 * @pdl overlap the kernel before them where the device can
 * (gc_dev_kernel_pdl). */
int gc_rt_open(gc_dev_t *dev, const char *bundle_path, gc_rt_t **out, gc_err_t *e);
/* on = 0: launch every kernel serialised after the one before it (a
 * comparison for benchmarks); 1 (the default) lets @pdl kernels overlap. */
void gc_rt_set_pdl(gc_rt_t *rt, int on);
void gc_rt_close(gc_rt_t *rt);
const char *gc_rt_target(const gc_rt_t *rt);
gc_bundle_t *gc_rt_bundle(gc_rt_t *rt);

/* The kernel for p (loaded on first use; the pointer stays valid until
 * gc_rt_close). */
int gc_rt_find(gc_rt_t *rt, const gc_problem_t *p, const gc_rt_kernel_t **out,
               gc_err_t *e);
/* Launch k for p with args (core/ops.h: each op's list, gc_op_args). A
 * kernel that declares tensor maps gets them after args, encoded for the
 * buffer addresses in args (runtime/tmap.h); one that declares @prefetch
 * gets an empty L2 window after those (gc_rt_launch_window). */
int gc_rt_launch(gc_rt_t *rt, const gc_rt_kernel_t *k, const gc_problem_t *p,
                 void **args, gc_err_t *e);
/* gc_rt_launch with an L2 window: [pf, pf + n), bytes the caller's next
 * kernels read (n a multiple of 16, pf 16-byte aligned; 0, 0: none),
 * which a kernel whose entry says @prefetch may ask L2 for and must not
 * otherwise read or write; other kernels are launched as gc_rt_launch
 * launches them. A bad window is GC_EINVAL. */
int gc_rt_launch_window(gc_rt_t *rt, const gc_rt_kernel_t *k, const gc_problem_t *p,
                        void **args, gc_dptr_t pf, int64_t n, gc_err_t *e);

#endif
