/* nvrtc.c — the NVRTC compile driver. libnvrtc is dlopen'd on first use
 * and kept for the process, so one gcore binary builds with or without
 * CUDA installed. Resource usage comes from the ptxas lines that -Xptxas=-v
 * writes into the program log, cross-checked against the cubin's own
 * EIATTR_REGCOUNT record, which is read with a bounds-checked ELF64 walk. */
#include "nvrtc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the library, loaded once ---------------------------------------- */

/* nvrtcResult is a C enum (int); nvrtcProgram an opaque pointer. */
typedef int nvrtc_result;
typedef void *nvrtc_program;

typedef struct nvrtc_api {
  void *lib;
  int major, minor;
  const char *(*GetErrorString)(nvrtc_result);
  nvrtc_result (*Version)(int *, int *);
  nvrtc_result (*CreateProgram)(nvrtc_program *, const char *, const char *, int,
                                const char *const *, const char *const *);
  nvrtc_result (*DestroyProgram)(nvrtc_program *);
  nvrtc_result (*CompileProgram)(nvrtc_program, int, const char *const *);
  nvrtc_result (*GetCUBINSize)(nvrtc_program, size_t *);
  nvrtc_result (*GetCUBIN)(nvrtc_program, char *);
  nvrtc_result (*GetProgramLogSize)(nvrtc_program, size_t *);
  nvrtc_result (*GetProgramLog)(nvrtc_program, char *);
} nvrtc_api_t;

enum { NVRTC_SUCCESS = 0, NVRTC_ERROR_INVALID_OPTION = 5, NVRTC_ERROR_COMPILATION = 6 };

static pthread_mutex_t nv_mu = PTHREAD_MUTEX_INITIALIZER;
static int nv_tried;          /* under nv_mu; the outcome below never changes after */
static nvrtc_api_t nv;
static int nv_no_cache;       /* this NVRTC takes --no-cache */
static gc_err_t nv_err;       /* why loading failed, when it did */

/* Where a CUDA toolkit may be, in order of preference; NULL entries unset. */
static void cuda_roots(const char *roots[3]) {
  roots[0] = getenv("CUDA_HOME");
  roots[1] = getenv("CUDA_PATH");
  roots[2] = "/usr/local/cuda";
}

/* The library path first, then each toolkit's lib64. */
static void *nv_dlopen_any(char *first_err, size_t n) {
  static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};
  const char *roots[3];
  cuda_roots(roots);
  first_err[0] = 0;
  for (int d = -1; d < 3; d++) {
    if (d >= 0 && (!roots[d] || !*roots[d])) continue;
    for (size_t i = 0; i < GC_ARRAY_LEN(names); i++) {
      char path[1024];
      if (d < 0) snprintf(path, sizeof path, "%s", names[i]);
      else snprintf(path, sizeof path, "%s/lib64/%s", roots[d], names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
      if (!first_err[0]) snprintf(first_err, n, "%s", dlerror());
    }
  }
  return NULL;
}

/* NVRTC 13 keeps cubins in the driver's compute cache where a driver is
 * installed, and a hit skips ptxas, and with it the -Xptxas=-v figures the
 * tuner records. gcore caches its own code objects, so NVRTC's is turned
 * off where the option exists (older NVRTCs reject it). */
static int nv_takes_no_cache(void) {
  nvrtc_program p = NULL;
  if (nv.CreateProgram(&p, "", "probe", 0, NULL, NULL) != NVRTC_SUCCESS) return 0;
  const char *opt = "--no-cache";
  nvrtc_result r = nv.CompileProgram(p, 1, &opt);
  nv.DestroyProgram(&p);
  return r == NVRTC_SUCCESS;
}

#define NV_SYM(f)                                                            \
  do {                                                                       \
    *(void **)&nv.f = dlsym(nv.lib, "nvrtc" #f);                             \
    if (!nv.f) {                                                             \
      gc_err_set(&nv_err, GC_EUNSUPPORTED, "libnvrtc has no nvrtc" #f);      \
      goto fail;                                                             \
    }                                                                        \
  } while (0)

static void nv_load_locked(void) {
  char why[512];
  nv.lib = nv_dlopen_any(why, sizeof why);
  if (!nv.lib) {
    gc_err_set(&nv_err, GC_EUNSUPPORTED,
               "NVRTC not found: tried libnvrtc.so, .so.13, .so.12 on the library path and "
               "in lib64 of $CUDA_HOME, $CUDA_PATH and /usr/local/cuda (dlopen: %s)",
               why);
    return;
  }
  NV_SYM(GetErrorString);
  NV_SYM(Version);
  NV_SYM(CreateProgram);
  NV_SYM(DestroyProgram);
  NV_SYM(CompileProgram);
  NV_SYM(GetCUBINSize);
  NV_SYM(GetCUBIN);
  NV_SYM(GetProgramLogSize);
  NV_SYM(GetProgramLog);
  if (nv.Version(&nv.major, &nv.minor) != NVRTC_SUCCESS) {
    gc_err_set(&nv_err, GC_EUNSUPPORTED, "nvrtcVersion failed");
    goto fail;
  }
  nv_no_cache = nv_takes_no_cache();
  return;
fail:
  dlclose(nv.lib);
  nv.lib = NULL;
}

/* GC_OK with nv usable, or the (remembered) reason it is not. */
static int nv_load(gc_err_t *e) {
  pthread_mutex_lock(&nv_mu);
  if (!nv_tried) {
    nv_load_locked();
    nv_tried = 1;
  }
  pthread_mutex_unlock(&nv_mu);
  if (nv.lib) return GC_OK;
  return gc_err_set(e, nv_err.code, "%s", nv_err.msg);
}

int gc_nvrtc_available(char *version, size_t n, gc_err_t *e) {
  if (nv_load(e)) return 0;
  if (version && n) snprintf(version, n, "nvrtc %d.%d", nv.major, nv.minor);
  return 1;
}

/* ---- the ptxas log --------------------------------------------------- */

typedef struct ptx_res {
  int64_t regs, spills, smem, stack;
} ptx_res_t;

/* The integer written just before suffix in line, or -1. */
static int64_t num_before(const char *line, const char *suffix) {
  const char *s = strstr(line, suffix);
  if (!s) return -1;
  const char *d = s;
  while (d > line && d[-1] >= '0' && d[-1] <= '9') d--;
  if (d == s || s - d > 18) return -1;
  int64_t v = 0;
  for (; d < s; d++) v = v * 10 + (*d - '0');
  return v;
}

static void res_max(ptx_res_t *into, const ptx_res_t *r) {
  if (r->regs > into->regs) into->regs = r->regs;
  if (r->spills > into->spills) into->spills = r->spills;
  if (r->smem > into->smem) into->smem = r->smem;
  if (r->stack > into->stack) into->stack = r->stack;
}

/* Read one log line into the figures of function cur. ptxas writes, per
 * function: "Compiling entry function 'f' for 'sm_90'", "Function
 * properties for f", "N bytes stack frame, N bytes spill stores, N bytes
 * spill loads", "Used N registers, used N barriers[, N bytes smem]..."
 * (smem is left out when it is zero). */
static void ptx_line(const char *line, char *cur, size_t cur_n, ptx_res_t *r) {
  const char *p;
  if ((p = strstr(line, "Compiling entry function '"))) {
    p += strlen("Compiling entry function '");
    const char *q = strchr(p, '\'');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    snprintf(cur, cur_n, "%.*s", (int)len, p);
    *r = (ptx_res_t){-1, -1, -1, -1};
  } else if ((p = strstr(line, "Function properties for "))) {
    p += strlen("Function properties for ");
    if (strcmp(cur, p)) *r = (ptx_res_t){-1, -1, -1, -1};
    snprintf(cur, cur_n, "%s", p);
  } else if (strstr(line, "bytes stack frame")) {
    int64_t st = num_before(line, " bytes spill stores");
    int64_t ld = num_before(line, " bytes spill loads");
    r->stack = num_before(line, " bytes stack frame");
    r->spills = st >= 0 && ld >= 0 ? st + ld : -1;
  } else if (strstr(line, "Used ") && strstr(line, " registers")) {
    r->regs = num_before(line, " registers");
    int64_t sm = num_before(line, " bytes smem");
    r->smem = sm >= 0 ? sm : 0;
  }
}

/* Fill res for kernel name from the log: its own lines when the log has
 * them, else (name NULL or not found) the largest figures over all. */
static void ptx_parse(const char *log, const char *name, gc_resources_t *res) {
  ptx_res_t cur_r = {-1, -1, -1, -1}, all = {-1, -1, -1, -1}, mine = {-1, -1, -1, -1};
  char cur[256] = "", line[1024];
  int found = 0;
  for (const char *p = log; *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
    ptx_line(line, cur, sizeof cur, &cur_r);
    res_max(&all, &cur_r);
    if (name && !strcmp(cur, name)) {
      res_max(&mine, &cur_r);
      found = 1;
    }
    p += len + (nl != NULL);
  }
  const ptx_res_t *r = found ? &mine : &all;
  res->regs = r->regs;
  res->spills = r->spills;
  res->shared_bytes = r->smem;
  res->scratch_bytes = r->stack;
}

/* The first lines of log that mention an error (else its first lines),
 * joined by " | ", into out. */
static void first_errors(const char *log, char *out, size_t n) {
  out[0] = 0;
  for (int pass = 0; pass < 2 && !out[0]; pass++) {
    int lines = 0;
    for (const char *p = log; *p && lines < 3;) {
      const char *nl = strchr(p, '\n');
      size_t len = nl ? (size_t)(nl - p) : strlen(p);
      int want = len > 0 && (pass == 1 || memmem(p, len, "error", 5));
      if (want) {
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s%.*s", used ? " | " : "", (int)len, p);
        lines++;
      }
      p += len + (nl != NULL);
    }
  }
}

/* ---- compiling ------------------------------------------------------- */

/* sm_<2 or 3 digits>, optionally 'a' (arch-specific) or 'f' (family). */
static int check_arch(const char *arch, gc_err_t *e) {
  if (!arch) return gc_err_set(e, GC_EINVAL, "no NVIDIA target given");
  if (!strncmp(arch, "compute_", 8))
    return gc_err_set(e, GC_EINVAL,
                      "target %s yields PTX, not a cubin: use sm_%s", arch, arch + 8);
  size_t d = 0;
  if (!strncmp(arch, "sm_", 3))
    while (arch[3 + d] >= '0' && arch[3 + d] <= '9') d++;
  const char *tail = arch + 3 + d;
  if (strncmp(arch, "sm_", 3) || d < 2 || d > 3 ||
      (*tail && ((*tail != 'a' && *tail != 'f') || tail[1])))
    return gc_err_set(e, GC_EINVAL, "unknown NVIDIA target '%s' (expected sm_XX, e.g. sm_90)",
                      arch);
  return GC_OK;
}

/* NVRTC's options: gcore's fixed ones, then the caller's. v is gc_malloc'd
 * and points into the struct or at the caller's strings. */
typedef struct nv_opts {
  char arch[64], inc[1100];
  const char **v;
  int n;
} nv_opts_t;

/* The first of $CUDA_HOME, $CUDA_PATH, /usr/local/cuda whose include/
 * holds cuda_fp16.h, as "-I<dir>/include" in out; 0 when none does. */
static int cuda_include(char *out, size_t n) {
  const char *roots[3];
  cuda_roots(roots);
  for (size_t i = 0; i < GC_ARRAY_LEN(roots); i++) {
    char probe[1100];
    if (!roots[i] || !*roots[i]) continue;
    snprintf(probe, sizeof probe, "%s/include/cuda_fp16.h", roots[i]);
    if (access(probe, R_OK) == 0) {
      snprintf(out, n, "-I%s/include", roots[i]);
      return 1;
    }
  }
  return 0;
}

static int build_opts(nv_opts_t *o, const char *arch, const char *const *extra, int n_extra,
                      int *have_inc, gc_err_t *e) {
  snprintf(o->arch, sizeof o->arch, "--gpu-architecture=%s", arch);
  *have_inc = cuda_include(o->inc, sizeof o->inc);
  if (n_extra < 0 || (n_extra > 0 && !extra))
    return gc_err_set(e, GC_EINVAL, "bad extra NVRTC options");
  if (!(o->v = gc_calloc((size_t)n_extra + 6, sizeof *o->v, e))) return GC_ENOMEM;
  o->n = 0;
  o->v[o->n++] = o->arch;
  if (*have_inc) o->v[o->n++] = o->inc;
  o->v[o->n++] = "--std=c++17";
  o->v[o->n++] = "-default-device";
  o->v[o->n++] = "-Xptxas=-v";
  if (nv_no_cache) o->v[o->n++] = "--no-cache";
  for (int i = 0; i < n_extra; i++) o->v[o->n++] = extra[i];
  return GC_OK;
}

/* Copy the program log into log (may be NULL) and return it (gc_malloc'd,
 * "" when there is none, NULL only when out of memory). */
static char *fetch_log(nvrtc_program prog, char *log, size_t log_n, gc_err_t *e) {
  size_t n = 0;
  if (nv.GetProgramLogSize(prog, &n) != NVRTC_SUCCESS) n = 0;
  char *s = gc_malloc(n + 1, e);
  if (!s) return NULL;
  s[0] = 0;
  if (n && nv.GetProgramLog(prog, s) != NVRTC_SUCCESS) s[0] = 0;
  s[n] = 0;
  if (log && log_n) snprintf(log, log_n, "%s", s);
  return s;
}

static int compile_failed(nvrtc_result r, const char *text, const char *what,
                          const char *arch, int have_inc, gc_err_t *e) {
  char first[700];
  first_errors(text, first, sizeof first);
  if (!first[0]) snprintf(first, sizeof first, "%s", nv.GetErrorString(r));
  const char *hint = !have_inc && strstr(text, "open source file")
                         ? " (no CUDA headers found in $CUDA_HOME, $CUDA_PATH or /usr/local/cuda)"
                         : "";
  return gc_err_set(e, r == NVRTC_ERROR_INVALID_OPTION ? GC_EINVAL : GC_ECOMPILE,
                    "nvrtc: compiling %s for %s: %s%s", what, arch, first, hint);
}

int gc_nvrtc_compile(const char *src, const char *name, const char *arch,
                     const char *const *extra_opts, int n_extra, void **cubin,
                     size_t *size, gc_resources_t *res, char *log, size_t log_n,
                     gc_err_t *e) {
  *cubin = NULL;
  *size = 0;
  if (log && log_n) log[0] = 0;
  if (res) *res = GC_RESOURCES_UNKNOWN;
  if (!src) return gc_err_set(e, GC_EINVAL, "no source to compile");
  int have_inc, rc = check_arch(arch, e);
  if (!rc) rc = nv_load(e);
  nv_opts_t o;
  if (!rc) rc = build_opts(&o, arch, extra_opts, n_extra, &have_inc, e);
  if (rc) return rc;
  const char *what = name ? name : "kernel";
  nvrtc_program prog = NULL;
  nvrtc_result r = nv.CreateProgram(&prog, src, what, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    free(o.v);
    return gc_err_set(e, GC_ECOMPILE, "nvrtcCreateProgram: %s", nv.GetErrorString(r));
  }
  r = nv.CompileProgram(prog, o.n, o.v);
  free(o.v);
  char *text = fetch_log(prog, log, log_n, e);
  if (!text) rc = GC_ENOMEM;
  else if (r != NVRTC_SUCCESS) rc = compile_failed(r, text, what, arch, have_inc, e);
  size_t n = 0;
  if (!rc && (nv.GetCUBINSize(prog, &n) != NVRTC_SUCCESS || n == 0))
    rc = gc_err_set(e, GC_ECOMPILE, "nvrtc: compiling %s for %s produced no cubin", what, arch);
  char *bin = NULL;
  if (!rc && !(bin = gc_malloc(n, e))) rc = GC_ENOMEM;
  if (!rc && nv.GetCUBIN(prog, bin) != NVRTC_SUCCESS)
    rc = gc_err_set(e, GC_ECOMPILE, "nvrtcGetCUBIN failed for %s", what);
  nv.DestroyProgram(&prog);
  if (!rc && res) {
    ptx_parse(text, name, res);
    res->code_bytes = (int64_t)n;
    int regs;
    if (res->regs < 0 && name && !gc_cubin_regcount(bin, n, name, &regs)) res->regs = regs;
  }
  free(text);
  if (rc) {
    free(bin);
    return rc;
  }
  *cubin = bin;
  *size = n;
  return GC_OK;
}

/* ---- reading the cubin ----------------------------------------------- */

/* An ELF64 little-endian image; every read below goes through span(). */
typedef struct elf {
  const uint8_t *p;
  size_t n;
  uint64_t shoff;
  unsigned shnum, shentsize, shstrndx;
} elf_t;

typedef struct elf_sec {
  uint32_t name, type, link;
  uint64_t off, size, entsize;
} elf_sec_t;

enum { SHT_SYMTAB_ = 2, SHT_NOBITS_ = 8, EIATTR_REGCOUNT = 0x2f, EIFMT_SVAL = 4 };

static uint64_t rd(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* 1 when [off, off + len) lies inside the image. */
static int span(const elf_t *f, uint64_t off, uint64_t len) {
  return off <= f->n && len <= f->n - off;
}

static int elf_open(elf_t *f, const void *p, size_t n) {
  f->p = p;
  f->n = n;
  if (!p || n < 64 || memcmp(p, "\177ELF", 4) || f->p[4] != 2 || f->p[5] != 1)
    return GC_ECORRUPT;
  f->shoff = rd(f->p + 0x28, 8);
  f->shentsize = (unsigned)rd(f->p + 0x3a, 2);
  f->shnum = (unsigned)rd(f->p + 0x3c, 2);
  f->shstrndx = (unsigned)rd(f->p + 0x3e, 2);
  if (f->shentsize < 64 || f->shnum == 0 || f->shstrndx >= f->shnum ||
      !span(f, f->shoff, (uint64_t)f->shnum * f->shentsize))
    return GC_ECORRUPT;
  return GC_OK;
}

/* Section i's header; GC_ECORRUPT when its contents lie outside. */
static int elf_sec(const elf_t *f, unsigned i, elf_sec_t *s) {
  if (i >= f->shnum) return GC_ECORRUPT;
  const uint8_t *h = f->p + f->shoff + (uint64_t)i * f->shentsize;
  s->name = (uint32_t)rd(h, 4);
  s->type = (uint32_t)rd(h + 4, 4);
  s->off = rd(h + 24, 8);
  s->size = rd(h + 32, 8);
  s->link = (uint32_t)rd(h + 40, 4);
  s->entsize = rd(h + 56, 8);
  if (s->type != SHT_NOBITS_ && !span(f, s->off, s->size)) return GC_ECORRUPT;
  return GC_OK;
}

/* The NUL-terminated string at off in string section strsec, or NULL. */
static const char *elf_str(const elf_t *f, unsigned strsec, uint64_t off) {
  elf_sec_t s;
  if (elf_sec(f, strsec, &s) || s.type == SHT_NOBITS_ || off >= s.size) return NULL;
  const char *str = (const char *)f->p + s.off + off;
  return memchr(str, 0, s.size - off) ? str : NULL;
}

/* Index of the symbol called name in the first symbol table, or -1. */
static int64_t elf_symbol(const elf_t *f, const char *name, int *corrupt) {
  for (unsigned i = 0; i < f->shnum; i++) {
    elf_sec_t s;
    if (elf_sec(f, i, &s)) return *corrupt = 1, -1;
    if (s.type != SHT_SYMTAB_) continue;
    if (s.entsize < 24) return *corrupt = 1, -1;
    for (uint64_t k = 0; k < s.size / s.entsize; k++) {
      const uint8_t *sym = f->p + s.off + k * s.entsize;
      const char *sn = elf_str(f, s.link, rd(sym, 4));
      if (sn && !strcmp(sn, name)) return (int64_t)k;
    }
    return -1;
  }
  return -1;
}

/* Walk one .nv.info section for REGCOUNT of symbol sym. Attributes are
 * (format byte, attribute byte, then a 2-byte value, or for EIFMT_SVAL a
 * 2-byte size and that many bytes). */
static int nvinfo_regcount(const elf_t *f, const elf_sec_t *s, uint64_t sym, int *regs) {
  const uint8_t *p = f->p + s->off;
  for (uint64_t off = 0; off < s->size;) {
    if (s->size - off < 4) return GC_ECORRUPT;
    unsigned fmt = p[off], attr = p[off + 1];
    uint64_t len = 4;
    if (fmt == EIFMT_SVAL) {
      len += rd(p + off + 2, 2);
      if (len > s->size - off) return GC_ECORRUPT;
      if (attr == EIATTR_REGCOUNT && len >= 12 && rd(p + off + 4, 4) == sym) {
        uint64_t v = rd(p + off + 8, 4);
        if (v > 65535) return GC_ECORRUPT;
        *regs = (int)v;
        return GC_OK;
      }
    } else if (fmt < 1 || fmt > 3) {
      return GC_ECORRUPT;
    }
    off += len;
  }
  return GC_ENOTFOUND;
}

int gc_cubin_regcount(const void *cubin, size_t n, const char *kernel, int *regs) {
  elf_t f;
  if (!kernel || !regs) return GC_EINVAL;
  if (elf_open(&f, cubin, n)) return GC_ECORRUPT;
  int corrupt = 0;
  int64_t sym = elf_symbol(&f, kernel, &corrupt);
  if (corrupt) return GC_ECORRUPT;
  if (sym < 0) return GC_ENOTFOUND;
  int rc = GC_ENOTFOUND;
  for (unsigned i = 0; i < f.shnum && rc == GC_ENOTFOUND; i++) {
    elf_sec_t s;
    if (elf_sec(&f, i, &s)) return GC_ECORRUPT;
    const char *sn = elf_str(&f, f.shstrndx, s.name);
    if (!sn || s.type == SHT_NOBITS_ ||
        (strcmp(sn, ".nv.info") && (strncmp(sn, ".nv.info.", 9) || strcmp(sn + 9, kernel))))
      continue;
    rc = nvinfo_regcount(&f, &s, (uint64_t)sym, regs);
  }
  return rc;
}
