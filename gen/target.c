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

int gc_target_parse(const char *s, gc_target_t *t, gc_err_t *e) {
  memset(t, 0, sizeof *t);
  if (!strcmp(s, "cpu")) return cpu_target(gc_target_host_cpu_level(), t, e);
  if (!strncmp(s, "cpu:", 4)) return cpu_target(s + 4, t, e);
  return gc_err_set(e, GC_EINVAL,
                    "unknown target '%s' (this build supports: cpu, cpu:x86-64-v3, "
                    "cpu:x86-64-v4)",
                    s);
}
