/* target.c — target names and their template constants. */
#include "target.h"

#include <string.h>

const char *gc_target_host_cpu_level(void) {
  static const char *const names[] = {"x86-64", "x86-64", "x86-64-v2", "x86-64-v3",
                                      "x86-64-v4"};
  return names[gc_host_cpu_level()];
}

int gc_target_cpu_level(const char *arch) {
  if (!strcmp(arch, "x86-64")) return 1;
  if (!strncmp(arch, "x86-64-v", 8) && arch[8] >= '1' && arch[8] <= '4' && !arch[9])
    return arch[8] - '0';
  return 0;
}

static long cache_bytes(int level, long fallback) {
  char path[96];
  for (int i = 0; i < 8; i++) {
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *f = fopen(path, "r");
    if (!f) break;
    int lv = 0;
    if (fscanf(f, "%d", &lv) != 1) lv = 0;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    char type[32] = "";
    if ((f = fopen(path, "r"))) {
      if (!fgets(type, sizeof type, f)) type[0] = 0;
      fclose(f);
    }
    if (lv != level || !strncmp(type, "Instruction", 11)) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    long kb = 0;
    if ((f = fopen(path, "r"))) {
      if (fscanf(f, "%ldK", &kb) != 1) kb = 0;
      fclose(f);
    }
    if (kb > 0) return kb * 1024;
  }
  return fallback;
}

static int cpu_target(const char *level, gc_target_t *t, gc_err_t *e) {
  int lv = gc_target_cpu_level(level);
  if (lv < 3)
    return gc_err_set(e, GC_EUNSUPPORTED,
                      "target cpu:%s: gcore's CPU templates need x86-64-v3 (AVX2, "
                      "FMA, F16C) or x86-64-v4",
                      level);
  snprintf(t->name, sizeof t->name, "cpu:%s", level);
  strcpy(t->backend, "cpu");
  snprintf(t->arch, sizeof t->arch, "%s", level);
  if (gc_env_set(&t->consts, "VBYTES", lv >= 4 ? 64 : 32, e) ||
      gc_env_set(&t->consts, "L1", cache_bytes(1, 32 * 1024), e) ||
      gc_env_set(&t->consts, "L2", cache_bytes(2, 512 * 1024), e) ||
      gc_env_set(&t->consts, "NCPU", gc_host_ncpu(), e))
    return e->code;
  return GC_OK;
}

/* NVIDIA: sm_XY[a]. Shared memory a block may opt into: 163 KiB on sm_80,
 * 227 KiB on sm_90 (sm_86/89: 99 KiB). NSM is 0 offline: templates must
 * not depend on it for correctness. ARCH_A is 1 on an arch-specific
 * target (sm_90a): wgmma and setmaxnreg exist only there. */
static int cuda_target(const char *s, gc_target_t *t, gc_err_t *e) {
  int major = 0, minor = 0, n = 0;
  char suffix[4] = "";
  if (sscanf(s, "sm_%1d%1d%n", &major, &minor, &n) != 2 || (s[n] && strcmp(s + n, "a")))
    return gc_err_set(e, GC_EINVAL, "target '%s': expected sm_XY or sm_XYa", s);
  if (s[n]) strcpy(suffix, "a");
  if (major < 8 || (suffix[0] && major < 9))
    return gc_err_set(e, GC_EUNSUPPORTED, "target %s: gcore's CUDA templates need sm_80 or newer "
                      "(and an 'a' target only exists from sm_90)", s);
  snprintf(t->name, sizeof t->name, "%s", s);
  strcpy(t->backend, "cuda");
  snprintf(t->arch, sizeof t->arch, "%s", s);
  int64_t smem = major >= 9 ? 232448 : (major == 8 && minor == 0) ? 166912 : 101376;
  if (gc_env_set(&t->consts, "WARP", 32, e) || gc_env_set(&t->consts, "SMEM", smem, e) ||
      gc_env_set(&t->consts, "NSM", 0, e) || gc_env_set(&t->consts, "MAXT", 1024, e) ||
      gc_env_set(&t->consts, "SM", major * 10 + minor, e) ||
      gc_env_set(&t->consts, "ARCH_A", suffix[0] == 'a', e))
    return e->code;
  return GC_OK;
}

int gc_target_parse(const char *s, gc_target_t *t, gc_err_t *e) {
  memset(t, 0, sizeof *t);
  if (!strcmp(s, "cpu")) return cpu_target(gc_target_host_cpu_level(), t, e);
  if (!strncmp(s, "cpu:", 4)) return cpu_target(s + 4, t, e);
  if (!strncmp(s, "sm_", 3)) return cuda_target(s, t, e);
  if (!strncmp(s, "gfx", 3))
    return gc_err_set(e, GC_EUNSUPPORTED, "target %s: the AMD backend is not built yet", s);
  return gc_err_set(e, GC_EINVAL,
                    "unknown target '%s' (this build supports: cpu, cpu:x86-64-v3, "
                    "cpu:x86-64-v4, sm_80, sm_86, sm_89, sm_90, sm_90a)",
                    s);
}
