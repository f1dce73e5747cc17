/* defaults.h — the heuristic that chooses the kernel for a problem nobody
 * has tuned on an AMD target (any target whose constants include a CU
 * count NCU > 0; NVIDIA targets have none and keep the
 * template's declared defaults unchanged).
 *
 * The template has been chosen already (highest @priority among those
 * that serve the target, support the problem and apply to it), and v holds
 * its declared defaults (the template author's choice for a large problem
 * on a large GPU) or, where those do not apply, the nearest point that does. The heuristic looks at v and every point that differs
 * from it in one or two parameters, keeps the points that satisfy every
 * @constraint and @applies and whose dynamic LDS (@shmem) fits SMEM, and
 * takes the best by, in order:
 *   1. workgroup size a multiple of the wavefront (WARP: 64 on gfx90a and
 *      gfx942, 32 on gfx1100) — no partly empty waves;
 *   2. fill = min(workgroups, NCU) / NCU, workgroups being the product of
 *      @grid for the problem — enough workgroups to give every CU one
 *      (NCU: 304 on gfx942, 110 on gfx90a, 96 on gfx1100); a problem that
 *      fills the GPU at the defaults keeps them;
 *   3. fewest parameters changed from the declared defaults;
 *   4. enumeration order (the earlier parameter changed first).
 * So a small decode-time GEMM gets smaller tiles or more split, a large
 * prefill GEMM keeps the author's tile. The chosen entry is marked a
 * default in the bundle (dispatch.is_default = 1) like any untuned one. */
#ifndef GC_DEFAULTS_H
#define GC_DEFAULTS_H

#include "template.h"

/* Move v (valid on tg, applying to p) to the heuristic's choice. Leaves v
 * unchanged on targets without NCU. Errors only from out of memory. */
int gc_default_fit(const gc_target_t *tg, const gc_problem_t *p, gc_variant_t *v,
                   gc_err_t *e);

#endif
