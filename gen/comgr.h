/* comgr.h — AMD's code object manager (libamd_comgr, dlopen'd at run time,
 * so gcore builds and runs without it): the in-process `comgr` compile
 * driver (HIP source → bitcode → relocatable → executable code object for
 * the ISAs the installed comgr lists) and the reader of code-object
 * metadata (amdhsa.kernels: registers, LDS, scratch, spills, wavefront
 * size, kernel arguments) for code objects from either AMD driver. */
#ifndef GC_COMGR_H
#define GC_COMGR_H

#include "../base/base.h"

#define GC_AMD_MAX_ARGS 32

/* One kernel argument as the metadata lays it out (.args[i]). */
typedef struct gc_amd_arg {
  int64_t offset, size;   /* bytes into the kernarg segment */
  char kind[32];          /* .value_kind: global_buffer, by_value, hidden_... */
} gc_amd_arg_t;

/* One kernel's entry of amdhsa.kernels; -1 where the metadata lacks a key
 * (.agpr_count exists only for gfx90a/gfx942). */
typedef struct gc_amd_kernel {
  char name[128];         /* .name */
  char symbol[136];       /* .symbol ("NAME.kd") */
  int64_t vgprs, agprs, sgprs;       /* .vgpr_count .agpr_count .sgpr_count */
  int64_t lds, scratch;              /* .group_segment_fixed_size, .private_segment_fixed_size */
  int64_t vgpr_spills, sgpr_spills;  /* .vgpr_spill_count .sgpr_spill_count */
  int64_t wave;                      /* .wavefront_size */
  int64_t kernarg_size;              /* .kernarg_segment_size */
  int64_t max_flat_wg;               /* .max_flat_workgroup_size */
  int nargs;
  gc_amd_arg_t args[GC_AMD_MAX_ARGS];
} gc_amd_kernel_t;

/* 1 when libamd_comgr loads (version gets "comgr 2.4"), else 0 with e set
 * (GC_EUNSUPPORTED: what was tried and how to install it). */
int gc_comgr_available(char *version, size_t n, gc_err_t *e);

/* 1 when the installed comgr lists the ISA of arch ("gfx90a", features
 * ignored), 0 when it does not or comgr is missing. */
int gc_comgr_has_isa(const char *arch);

/* The ISAs comgr lists, comma-separated, into out ("" when missing). */
void gc_comgr_isa_list(char *out, size_t n);

/* Compile HIP source src (header-free: -nogpuinc, no device libraries)
 * for arch ("gfx90a:xnack-") as code object version cov (4 or 5), -O3.
 * On success *obj is a gc_malloc'd ELF of *size bytes (caller frees). log
 * (may be NULL) gets comgr's log. Errors: GC_EUNSUPPORTED (comgr missing
 * or ISA not listed), GC_ECOMPILE (with the first error lines). */
int gc_comgr_compile(const char *src, const char *arch, int cov, void **obj, size_t *size,
                     char *log, size_t log_n, gc_err_t *e);

/* Read the metadata of kernel name (NULL: the first kernel) from code
 * object obj (n bytes, from any driver). Errors: GC_EUNSUPPORTED (comgr
 * missing), GC_ECORRUPT (not a code object / no metadata), GC_ENOTFOUND
 * (no such kernel). */
int gc_comgr_kernel_meta(const void *obj, size_t n, const char *name, gc_amd_kernel_t *k,
                         gc_err_t *e);

/* Every kernel of obj: fills up to max entries, *count gets how many. */
int gc_comgr_kernels(const void *obj, size_t n, gc_amd_kernel_t *ks, int max, int *count,
                     gc_err_t *e);

#endif
