/* llama_bundle.c — a model's bundle: given, or from the tuning database
 * (see llama_bundle.h). */
#include "llama_bundle.h"

#include <string.h>
#include <sys/stat.h>

#include "../gen/compile.h"
#include "../gen/target.h"
#include "recipe.h"

int gc_llama_bundle_open(gc_dev_t *dev, const gc_llama_bundle_opts_t *o, gc_rt_t **rt,
                         gc_llama_bundle_info_t *info, gc_err_t *e) {
  memset(info, 0, sizeof *info);
  if (o->bundle) {
    snprintf(info->path, sizeof info->path, "%s", o->bundle);
    return gc_rt_open(dev, o->bundle, rt, e);
  }
  const gc_dev_info_t *in = gc_dev_info(dev);
  gc_problems_t probs = {0};
  gc_needs_t needs = {0};
  gc_auto_result_t r;
  char cache[1024];
  struct stat st;
  info->automatic = 1;
  if (o->db) snprintf(info->db, sizeof info->db, "%s", o->db);
  else gc_db_default_path(info->db, sizeof info->db);
  if (o->cache) snprintf(cache, sizeof cache, "%s", o->cache);
  else gc_cache_default(cache, sizeof cache);
  /* the device's own target, arch-specific where it has one (sm_90a for
   * an sm_90 device: wgmma exists only there) */
  gc_target_t tg;
  snprintf(info->target, sizeof info->target, "%sa", in->target);
  if (!gc_dev_runs_target(dev, info->target) || gc_target_parse(info->target, &tg, NULL))
    snprintf(info->target, sizeof info->target, "%s", in->target);
  gc_llama_plan_t plan = {.db = info->db, .target = info->target, .force = -1};
  int rc = gc_llama_workload(o->model, o->quantize, NULL, NULL, o->tp > 1 ? o->tp : 1, in->backend, &probs, &needs,
                             &plan, e);
  if (!rc) rc = gc_gen_auto(info->db, info->target, cache, &probs, &needs, plan.meta, &r, e);
  gc_problems_free(&probs);
  gc_needs_free(&needs);
  if (rc)
    return gc_err_prefix(e, "no -b given, and the bundle for %s could not be built", info->target);
  snprintf(info->path, sizeof info->path, "%s", r.path);
  info->built = r.built;
  info->ntuned = r.ntuned;
  info->nproblems = r.nproblems;
  info->db_exists = stat(info->db, &st) == 0;
  return gc_rt_open(dev, r.path, rt, e);
}

void gc_llama_bundle_describe(const gc_llama_bundle_info_t *i, char *out, size_t n) {
  if (!i->automatic)
    snprintf(out, n, "%s", "");
  else if (i->db_exists)
    snprintf(out, n, "%s bundle %s for %s: %d of %d problems tuned in %s",
             i->built ? "built" : "reusing", i->path, i->target, i->ntuned, i->nproblems, i->db);
  else
    snprintf(out, n, "%s bundle %s for %s: template defaults (no tuning database at %s; "
             "gcore-tune --model fills it)", i->built ? "built" : "reusing", i->path, i->target,
             i->db);
}
