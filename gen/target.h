/* target.h — what code is generated for: a backend and an architecture,
 * with the constants templates constrain against. "cpu" names the host's
 * best x86-64 level; "cpu:x86-64-v3" names one explicitly. GPU targets
 * are sm_XX[a] (backend "cuda") and gfx90a, gfx942, gfx1100 with optional
 * features ("gfx942:sramecc+:xnack-"; backend "hip").
 *
 * Template constants per target kind:
 *   all   SMS: multiprocessors (cores, SMs, CUs); the flagship part's figure
 *         offline, the device's own in launch geometry (the runtime and the
 *         tuner bind it at launch: gc_env_set_sms)
 *   cpu   VBYTES L1 L2 NCPU
 *   cuda  WARP (32) SMEM (opt-in shared bytes per block)
 *         MAXT (1024) SM (80, 90, ...) AMD (0)
 *   hip   WARP (64 CDNA, 32 RDNA) SMEM (LDS bytes per workgroup: 65536)
 *         MAXT (1024) AMD (1) GFX (910 for gfx90a, 942, 1100)
 *         NCU (compute units of the flagship part: 110 per MI250X GCD,
 *         304 MI300X, 96 RX 7900 XTX; for heuristics only, never for
 *         correctness) VGPRS (VGPR+AGPR a wave may hold: 512 on gfx90a and
 *         gfx942, whose AGPRs share the unified file; 256 on gfx1100)
 *         MFMA (1 on CDNA) WMMA (1 on gfx1100). */
#ifndef GC_TARGET_H
#define GC_TARGET_H

#include "../base/expr.h"

typedef struct gc_target {
  char name[64];    /* canonical: "cpu:x86-64-v4" */
  char backend[8];  /* "cpu" */
  char arch[48];    /* "x86-64-v4" */
  gc_env_t consts;  /* the template constants listed above */
  int code_object;  /* hip: AMDHSA code object version (5 default, or 4); else 0 */
} gc_target_t;

/* An AMD ISA gcore builds for, with the figures of its compute unit. */
typedef struct gc_amd_isa {
  const char *arch;   /* "gfx942" (no features) */
  int gfx;            /* GFX constant: 910 (gfx90a = 9.0.10), 942, 1100 */
  int wave;           /* wavefront size the kernels are compiled for */
  int ncu;            /* compute units of the flagship part */
  int simds;          /* SIMDs per CU */
  int vgpr_file;      /* VGPRs per SIMD lane (unified VGPR+AGPR on CDNA) */
  int vgpr_granule;   /* allocation granule of VGPRs */
  int max_waves;      /* waves per SIMD at most */
  int vgpr_budget;    /* VGPR+AGPR one wave may hold */
  int lds;            /* LDS bytes a workgroup may use (and per CU) */
  int mfma, wmma;     /* matrix-core instruction families */
} gc_amd_isa_t;

/* Parse one target name. Unknown or unsupported names → GC_EINVAL naming
 * the targets this build supports. */
int gc_target_parse(const char *s, gc_target_t *t, gc_err_t *e);
/* "cpu, cpu:x86-64-v3, ...": every target name this build knows. */
const char *gc_target_names(void);
/* The AMD ISA of an arch ("gfx942" or "gfx942:xnack-"), NULL if unknown. */
const gc_amd_isa_t *gc_target_amd_isa(const char *arch);
/* Ask for AMDHSA code object v4 or v5 (the default) on an AMD target; the
 * version reaches the compiler flags and so every variant id. */
int gc_target_set_code_object(gc_target_t *t, int version, gc_err_t *e);
/* The host CPU's x86-64 level name ("x86-64-v4", "-v3", "-v2" or "-v1"). */
const char *gc_target_host_cpu_level(void);
/* Level number of "x86-64-vN", 0 if not one. */
int gc_target_cpu_level(const char *arch);

#endif
