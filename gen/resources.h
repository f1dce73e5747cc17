/* resources.h — static pruning of compiled GPU variants, before anything
 * is timed: the resource figures a compile driver reported (registers,
 * LDS/shared memory, scratch, spills) against the target's limits, and
 * the theoretical occupancy they allow.
 *
 * AMD (gfx90a, gfx942, gfx1100), per SIMD, for a workgroup of T threads
 * (W = ceil(T / wave) waves) using L bytes of LDS (static + dynamic):
 *   regs      = the code object's .vgpr_count (CDNA: the unified file's
 *               align(arch VGPRs, 4) + AGPRs already; RDNA: VGPRs)
 *   by_vgpr   = floor(vgpr_file / align(max(regs, 1), granule))
 *   by_lds    = L > 0 ? ceil(floor(lds_per_cu / L) · W / simds) : max_waves
 *   occupancy = min(max_waves, by_vgpr, by_lds), and 0 when one workgroup
 *               does not fit (ceil(W / simds) > min(max_waves, by_vgpr))
 * with the constants of gc_amd_isa_t (target.c): gfx90a/gfx942 file 512,
 * granule 8, 8 waves, 4 SIMDs; gfx1100 (wave32) file 1536, granule 24, 16
 * waves, 2 SIMDs per CU; 64 KiB LDS. This follows LLVM's AMDGPUBaseInfo
 * (getNumWavesPerEUWithNumVGPRs); SGPRs and the workgroup-slot limit are
 * left out: they bind only for kernels that other limits already rule out.
 *
 * A variant is rejected (tune.db status 'rejected', detail "resources: ...")
 * when on AMD its LDS exceeds the target's SMEM, its VGPR+AGPR exceed
 * VGPRS, it spills or uses scratch, or its occupancy is 0; on NVIDIA when
 * its static + dynamic shared memory exceeds SMEM or ptxas reports spills.
 * Unknown figures (-1) never reject. */
#ifndef GC_RESOURCES_H
#define GC_RESOURCES_H

#include "../core/resources.h"
#include "template.h"

/* Theoretical waves per SIMD of an AMD kernel with resources r, a
 * workgroup of threads threads and lds bytes of LDS in all, on isa; -1
 * when r lacks the VGPR count. */
int64_t gc_res_amd_occupancy(const gc_amd_isa_t *isa, const gc_resources_t *r,
                             int64_t threads, int64_t lds);

/* Check compiled variant v (resources r) for problem p on tg: fills
 * r->occupancy (AMD), sets *ok = 0 and writes why (one line, "resources:
 * ...") when it must be rejected. Errors only from evaluating the
 * template's @block/@shmem. */
int gc_res_check(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p,
                 gc_resources_t *r, int *ok, char *why, size_t why_n, gc_err_t *e);

#endif
