/* nvrtc.h — the NVRTC compile driver: CUDA C++ source to a cubin for one
 * sm_XX target, in process, with libnvrtc dlopen'd at run time (nothing is
 * linked against CUDA), plus the resource usage ptxas reports and a reader
 * for the register count recorded in the cubin itself. */
#ifndef GC_NVRTC_H
#define GC_NVRTC_H

#include "../base/base.h"
#include "../core/resources.h"

/* 1 when libnvrtc can be loaded; version gets "nvrtc 13.0". 0 with e set
 * (GC_EUNSUPPORTED, naming every place tried) when it cannot. Safe to call
 * from several threads; the library stays loaded for the process. */
int gc_nvrtc_available(char *version, size_t n, gc_err_t *e);

/* Compile src for arch ("sm_90", "sm_90a", "sm_80"). name is the kernel
 * whose resources are reported (also the program's name in diagnostics);
 * it may be NULL, and then the largest figures over all kernels are kept.
 * extra_opts (n_extra of them, may be NULL) are appended to gcore's own
 * options: --gpu-architecture=<arch> -I<cuda>/include --std=c++17
 * -default-device -Xptxas=-v, and --no-cache where this NVRTC has it (NVRTC
 * 13 otherwise reuses cubins from the driver's cache and ptxas, with its
 * resource report, does not run).
 * On success *cubin is a gc_malloc'd ELF of *size bytes (caller frees) and
 * res (may be NULL) is filled: code_bytes, regs, spills (stores + loads),
 * shared_bytes (static shared memory), scratch_bytes (stack frame); -1
 * where the log says nothing. log (log_n bytes, may be NULL) always gets
 * the program log, truncated to fit. Errors: GC_EINVAL for a target that
 * yields no cubin (compute_XX), a malformed one, or an option NVRTC
 * rejects; GC_EUNSUPPORTED when NVRTC is missing; GC_ECOMPILE with the
 * first error lines when the source does not compile. */
int gc_nvrtc_compile(const char *src, const char *name, const char *arch,
                     const char *const *extra_opts, int n_extra, void **cubin,
                     size_t *size, gc_resources_t *res, char *log, size_t log_n,
                     gc_err_t *e);

/* The register count of kernel as the cubin records it (EIATTR_REGCOUNT in
 * .nv.info or .nv.info.<kernel>). The cubin is treated as untrusted: every
 * offset is bounds-checked. Returns GC_OK, GC_ECORRUPT for a malformed ELF,
 * or GC_ENOTFOUND when the kernel or its attribute is absent. */
int gc_cubin_regcount(const void *cubin, size_t n, const char *kernel, int *regs);

#endif
