/* resources.c — limits and occupancy (the formulas are in resources.h). */
#include "resources.h"

#include <string.h>

static int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The VGPRs a wave holds are the code object's .vgpr_count (r->regs). On
 * CDNA (gfx90a, gfx942: one unified file, AGPRs after the VGPRs aligned
 * to 4) that count is already the total, align(arch VGPRs, 4) + AGPRs
 * (LLVM's NumVGPRsForWavesPerEU, what comgr 5.2 and clang-19 both write;
 * tests/test_amd_templates.py reads it off the disassembly): r->agprs is
 * the part of it that is AGPRs, not registers to add. */
int64_t gc_res_amd_occupancy(const gc_amd_isa_t *isa, const gc_resources_t *r,
                             int64_t threads, int64_t lds) {
  if (r->regs < 0) return -1;
  int64_t regs = r->regs, waves_wg = (threads + isa->wave - 1) / isa->wave;
  if (waves_wg < 1) waves_wg = 1;
  int64_t by_vgpr = isa->vgpr_file / align_up(regs > 0 ? regs : 1, isa->vgpr_granule);
  int64_t cap = min64(isa->max_waves, by_vgpr);
  if ((waves_wg + isa->simds - 1) / isa->simds > cap) return 0;
  if (lds > 0) {
    int64_t wgs = isa->lds / lds; /* resident workgroups per CU; their waves spread over the SIMDs */
    cap = min64(cap, (wgs * waves_wg + isa->simds - 1) / isa->simds);
  }
  return cap;
}

/* Threads per workgroup and dynamic shared bytes of v for p. */
static int launch_shape(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p,
                        int64_t *threads, int64_t *dyn, gc_err_t *e) {
  int64_t grid[3], block[3];
  gc_env_t env;
  if (gc_tpl_launch(v, tg, p, grid, block, e) || gc_tpl_env(v, tg, p, &env, e) ||
      gc_expr_eval(v->tpl->shmem[0] ? v->tpl->shmem : "0", &env, dyn, e))
    return gc_err_prefix(e, "template %s", v->tpl->name);
  *threads = block[0] * block[1] * block[2];
  return GC_OK;
}

static void amd_check(const gc_amd_isa_t *isa, const gc_target_t *tg, gc_resources_t *r,
                      int64_t threads, int64_t lds, int *ok, char *why, size_t n) {
  int64_t budget = 0, regs = r->regs;
  gc_env_get(&tg->consts, "VGPRS", &budget);
  r->occupancy = gc_res_amd_occupancy(isa, r, threads, lds);
  *ok = 0;
  if (r->shared_bytes >= 0 && lds > isa->lds)
    snprintf(why, n, "resources: LDS %lld bytes > %d on %s", (long long)lds, isa->lds, tg->name);
  else if (regs > budget)
    snprintf(why, n, "resources: %lld VGPR+AGPR > %lld on %s", (long long)regs,
             (long long)budget, tg->name);
  else if (r->spills > 0 || r->scratch_bytes > 0)
    snprintf(why, n, "resources: spills (%lld spilled registers, %lld bytes scratch)",
             (long long)(r->spills > 0 ? r->spills : 0), (long long)r->scratch_bytes);
  else if (r->occupancy == 0)
    snprintf(why, n, "resources: a workgroup of %lld threads does not fit a CU with %lld "
             "VGPRs per lane", (long long)threads, (long long)regs);
  else
    *ok = 1;
}

static void cuda_check(const gc_target_t *tg, const gc_resources_t *r, int64_t dyn, int *ok,
                       char *why, size_t n) {
  int64_t smem = 0, total = (r->shared_bytes > 0 ? r->shared_bytes : 0) + dyn;
  gc_env_get(&tg->consts, "SMEM", &smem);
  *ok = 0;
  if (smem > 0 && total > smem)
    snprintf(why, n, "resources: shared memory %lld bytes > %lld on %s", (long long)total,
             (long long)smem, tg->name);
  else if (r->spills > 0)
    snprintf(why, n, "resources: spills (%lld bytes of spill stores and loads)",
             (long long)r->spills);
  else
    *ok = 1;
}

int gc_res_check(const gc_variant_t *v, const gc_target_t *tg, const gc_problem_t *p,
                 gc_resources_t *r, int *ok, char *why, size_t why_n, gc_err_t *e) {
  *ok = 1;
  if (why_n) why[0] = 0;
  const gc_amd_isa_t *isa = !strcmp(tg->backend, "hip") ? gc_target_amd_isa(tg->arch) : NULL;
  if (!isa && strcmp(tg->backend, "cuda")) return GC_OK;
  int64_t threads, dyn;
  if (launch_shape(v, tg, p, &threads, &dyn, e)) return e->code;
  if (isa)
    amd_check(isa, tg, r, threads, (r->shared_bytes > 0 ? r->shared_bytes : 0) + dyn, ok, why,
              why_n);
  else
    cuda_check(tg, r, dyn, ok, why, why_n);
  return GC_OK;
}
