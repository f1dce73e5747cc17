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
      gc_env_set(&t->consts, "NCPU", gc_host_ncpu(), e) ||
      gc_env_set(&t->consts, "SMS", gc_host_ncpu(), e))
    return e->code;
  return GC_OK;
}

/* NVIDIA: sm_XY[a]. Shared memory a block may opt into: 163 KiB on sm_80,
 * 227 KiB on sm_90 (sm_86/89: 99 KiB). SMS is the flagship's SM count
 * (A100 108, RTX A6000 84, L40S 142, H100 SXM/H200 132) for what is
 * decided offline; in launch geometry the runtime binds the device's own
 * (gc_env_set_sms). ARCH_A is 1 on an arch-specific target (sm_90a):
 * wgmma and setmaxnreg exist only there. */
static int cuda_target(const char *s, gc_target_t *t, gc_err_t *e) {
  int major = 0, minor = 0, n = 0;
  char suffix[4] = "";
  if (sscanf(s, "sm_%1d%1d%n", &major, &minor, &n) != 2 || (s[n] && strcmp(s + n, "a")))
    return gc_err_set(e, GC_EINVAL, "target %s: expected sm_XY or sm_XYa", GC_QUOTED(s));
  if (s[n]) strcpy(suffix, "a");
  if (major < 8 || (suffix[0] && major < 9))
    return gc_err_set(e, GC_EUNSUPPORTED, "target %s: gcore's CUDA templates need sm_80 or newer "
                      "(and an 'a' target only exists from sm_90)", s);
  snprintf(t->name, sizeof t->name, "%s", s);
  strcpy(t->backend, "cuda");
  snprintf(t->arch, sizeof t->arch, "%s", s);
  int64_t smem = major >= 9 ? 232448 : (major == 8 && minor == 0) ? 166912 : 101376;
  if (gc_env_set(&t->consts, "WARP", 32, e) || gc_env_set(&t->consts, "SMEM", smem, e) ||
      gc_env_set(&t->consts, "SMS", major >= 9 ? 132 : minor == 0 ? 108 : minor == 9 ? 142 : 84, e) ||
      gc_env_set(&t->consts, "MAXT", 1024, e) ||
      gc_env_set(&t->consts, "SM", major * 10 + minor, e) ||
      gc_env_set(&t->consts, "ARCH_A", suffix[0] == 'a', e) ||
      gc_env_set(&t->consts, "AMD", 0, e))
    return e->code;
  return GC_OK;
}

/* AMD: the ISAs gcore builds for, with the figures the occupancy formula
 * (gen/resources.c) and the default heuristic use. Sources: LLVM
 * AMDGPUUsage (processor table), AMDGPUBaseInfo.cpp (VGPR file, granule,
 * waves per EU), and AMD's CDNA2/CDNA3/RDNA3 ISA guides and product pages
 * (CU counts: MI250X GCD 110, MI300X 304, RX 7900 XTX 96). */
static const gc_amd_isa_t amd_isas[] = {
    /* arch     GFX   wave ncu  simd vgpr_file granule waves budget lds     mfma wmma */
    {"gfx90a",  910,  64,  110, 4,   512,      8,      8,    512,   65536,  1,   0},
    {"gfx942",  942,  64,  304, 4,   512,      8,      8,    512,   65536,  1,   0},
    {"gfx1100", 1100, 32,  96,  2,   1536,     24,     16,   256,   65536,  0,   1},
};

const gc_amd_isa_t *gc_target_amd_isa(const char *arch) {
  size_t n = strcspn(arch, ":");
  for (size_t i = 0; i < GC_ARRAY_LEN(amd_isas); i++)
    if (strlen(amd_isas[i].arch) == n && !strncmp(arch, amd_isas[i].arch, n)) return &amd_isas[i];
  return NULL;
}

/* Features after the processor: ":sramecc+", ":xnack-", each at most once,
 * in any order; written back in LLVM's canonical order (sramecc, xnack).
 * gfx1100 has neither. */
static int amd_features(const char *s, const char *arch, char *canon, size_t n, gc_err_t *e) {
  int sramecc = 0, xnack = 0; /* 0 = any, '+' or '-' */
  for (const char *p = strchr(s, ':'); p; p = strchr(p + 1, ':')) {
    size_t len = strcspn(p + 1, ":");
    char sign = len ? p[len] : 0;
    int *slot = NULL;
    if (len == 8 && !strncmp(p + 1, "sramecc", 7)) slot = &sramecc;
    else if (len == 6 && !strncmp(p + 1, "xnack", 5)) slot = &xnack;
    if (!slot || (sign != '+' && sign != '-'))
      return gc_err_set(e, GC_EINVAL, "target %s: bad feature %s (expected sramecc+, "
                        "sramecc-, xnack+ or xnack-)", GC_QUOTED(s),
                        gc_quote(p + 1, len, (char[GC_QUOTE_BUF]){0}, GC_QUOTE_BUF));
    if (*slot) return gc_err_set(e, GC_EINVAL, "target %s: feature %s given twice", GC_QUOTED(s),
                                 gc_quote(p + 1, len - 1, (char[GC_QUOTE_BUF]){0}, GC_QUOTE_BUF));
    *slot = sign;
  }
  if ((sramecc || xnack) && !strncmp(arch, "gfx11", 5))
    return gc_err_set(e, GC_EINVAL, "target %s: %s has no sramecc or xnack feature", s, arch);
  int w = snprintf(canon, n, "%s", arch);
  if (sramecc) w += snprintf(canon + w, n - (size_t)w, ":sramecc%c", sramecc);
  if (xnack) snprintf(canon + w, n - (size_t)w, ":xnack%c", xnack);
  return GC_OK;
}

static int amd_target(const char *s, gc_target_t *t, gc_err_t *e) {
  const gc_amd_isa_t *isa = gc_target_amd_isa(s);
  if (!isa)
    return gc_err_set(e, GC_EUNSUPPORTED, "unknown AMD target %s (gcore builds for gfx90a, "
                      "gfx942 and gfx1100)",
                      gc_quote(s, strcspn(s, ":"), (char[GC_QUOTE_BUF]){0}, GC_QUOTE_BUF));
  if (amd_features(s, isa->arch, t->name, sizeof t->name, e)) return e->code;
  strcpy(t->backend, "hip");
  snprintf(t->arch, sizeof t->arch, "%s", t->name);
  t->code_object = 5;
  if (gc_env_set(&t->consts, "WARP", isa->wave, e) ||
      gc_env_set(&t->consts, "SMEM", isa->lds, e) || gc_env_set(&t->consts, "SMS", isa->ncu, e) ||
      gc_env_set(&t->consts, "MAXT", 1024, e) || gc_env_set(&t->consts, "AMD", 1, e) ||
      gc_env_set(&t->consts, "GFX", isa->gfx, e) || gc_env_set(&t->consts, "NCU", isa->ncu, e) ||
      gc_env_set(&t->consts, "VGPRS", isa->vgpr_budget, e) ||
      gc_env_set(&t->consts, "MFMA", isa->mfma, e) || gc_env_set(&t->consts, "WMMA", isa->wmma, e))
    return e->code;
  return GC_OK;
}

int gc_target_set_code_object(gc_target_t *t, int version, gc_err_t *e) {
  if (strcmp(t->backend, "hip"))
    return gc_err_set(e, GC_EINVAL, "target %s: --code-object applies to AMD targets only", t->name);
  if (version != 4 && version != 5)
    return gc_err_set(e, GC_EINVAL, "code object version %d: expected 4 or 5", version);
  t->code_object = version;
  return GC_OK;
}

/* Every target name this build knows, for messages and --help. */
#define TARGET_NAMES "cpu, cpu:x86-64-v3, cpu:x86-64-v4, sm_80, sm_86, sm_89, sm_90, sm_90a, " \
                     "gfx90a, gfx942, gfx1100 (AMD with features: gfx942:sramecc+:xnack-)"

const char *gc_target_names(void) { return TARGET_NAMES; }

int gc_target_parse(const char *s, gc_target_t *t, gc_err_t *e) {
  memset(t, 0, sizeof *t);
  if (!strcmp(s, "cpu")) return cpu_target(gc_target_host_cpu_level(), t, e);
  if (!strncmp(s, "cpu:", 4)) return cpu_target(s + 4, t, e);
  if (!strncmp(s, "sm_", 3)) return cuda_target(s, t, e);
  if (!strncmp(s, "gfx", 3)) return amd_target(s, t, e);
  return gc_err_set(e, GC_EINVAL, "unknown target %s (this build supports: %s)", GC_QUOTED(s),
                    TARGET_NAMES);
}
