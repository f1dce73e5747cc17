/* compile.c — choosing a compile driver per target, and the ninja batch
 * that runs it (cc directly; nvrtc, comgr and clang through gcore-compile).
 * The cache layout: <cache>/src/<vid>.c, <cache>/obj/<vid>.so, a log per
 * failed compile at <cache>/obj/<vid>.log, and the cc driver's precompiled
 * headers, <cache>/pch/<hash>.h and .h.gch (cpu_pch). Processes share a
 * cache (several gcore-tune, gcore-gen, the test suite's workers) by claims: under
 * a flock on <cache>/lock, held only to claim, a process writes
 * obj/<vid>.<ext>.claim (its pid and start time) for each missing code
 * object nobody alive has claimed, compiles those through the batch's own
 * build-<pid>-<n>.ninja, and waits for the ones others claimed; so compiles
 * run side by side and none runs twice. A batch whose code objects are all
 * there takes no lock (a code object appears whole, by a rename). */
#include "compile.h"

#include <limits.h>

#include "comgr.h"
#include "nvrtc.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run argv-less shell command and capture the first line of its stdout. */
static int first_line(const char *cmd, char *out, size_t n) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  out[0] = 0;
  if (!fgets(out, (int)n, p)) out[0] = 0;
  char drain[256];
  while (fgets(drain, sizeof drain, p)) {
  }
  int st = pclose(p);
  out[strcspn(out, "\r\n")] = 0;
  return (WIFEXITED(st) && WEXITSTATUS(st) == 0 && out[0]) ? 0 : -1;
}

static int safe_word(const char *s) {
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || strchr("/._-+", *s))) return 0;
  return 1;
}

/* A gcore tool: beside the running executable (the tools), else in ../bin
 * from the shared library that holds this code (a program using
 * libgcore.so: PREFIX/lib → PREFIX/bin, and lib/ → bin/ in the tree). */
static int tool_path(const char *name, char *out, size_t n, gc_err_t *e) {
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return gc_err_set(e, GC_EIO, "cannot find the gcore executable's folder");
  self[len] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  if (snprintf(out, n, "%s/%s", self, name) >= (int)n)
    return gc_err_set(e, GC_EINVAL, "path too long");
  if (access(out, X_OK) == 0) return GC_OK;
  Dl_info dl;
  char lib[PATH_MAX], beside[PATH_MAX + 16];
  if (dladdr((void *)tool_path, &dl) && dl.dli_fname && realpath(dl.dli_fname, lib) &&
      (slash = strrchr(lib, '/'))) {
    *slash = 0;
    if (snprintf(beside, sizeof beside, "%s/../bin/%s", lib, name) < (int)sizeof beside &&
        access(beside, X_OK) == 0 && snprintf(out, n, "%s", beside) < (int)n)
      return GC_OK;
  }
  return gc_err_set(e, GC_ECOMPILE, "%s not found (it is built with gcore: make)", out);
}

static int nvrtc_compiler(const gc_target_t *tg, gc_compiler_t *c, gc_err_t *e) {
  strcpy(c->driver, "nvrtc");
  strcpy(c->ext, ".cubin");
  snprintf(c->target, sizeof c->target, "%s", tg->arch);
  if (!gc_nvrtc_available(c->version, sizeof c->version, e))
    return gc_err_prefix(e, "target %s needs NVRTC (the CUDA toolkit)", tg->name);
  if (tool_path("gcore-compile", c->path, sizeof c->path, e)) return e->code;
  snprintf(c->flags, sizeof c->flags, "--gpu-architecture=%s --std=c++17 -default-device",
           tg->arch);
  snprintf(c->tool_args, sizeof c->tool_args, "--target %s", tg->arch);
  snprintf(c->id, sizeof c->id, "%s|%s|%s", c->driver, c->version, c->flags);
  return GC_OK;
}

int gc_clang_find(char *path, size_t path_n, char *version, size_t version_n, gc_err_t *e) {
  const char *env = getenv("GCORE_CLANG");
  const char *cands[] = {env && *env ? env : NULL, "clang-19", "/opt/rocm/llvm/bin/clang"};
  for (size_t i = 0; i < GC_ARRAY_LEN(cands); i++) {
    char cmd[1200];
    if (!cands[i]) continue;
    if (!safe_word(cands[i]))
      return gc_err_set(e, GC_EINVAL, "GCORE_CLANG='%s': give a plain compiler path", cands[i]);
    snprintf(cmd, sizeof cmd, "command -v '%s' 2>/dev/null", cands[i]);
    if (first_line(cmd, path, path_n)) {
      if (i == 0) return gc_err_set(e, GC_ECOMPILE, "GCORE_CLANG='%s' is not an executable", env);
      continue;
    }
    snprintf(cmd, sizeof cmd, "timeout -k 5 60 '%s' --version 2>/dev/null", path);
    if (!first_line(cmd, version, version_n)) return GC_OK;
  }
  return gc_err_set(e, GC_ECOMPILE, "no clang for AMD targets: set $GCORE_CLANG, or install "
                    "clang-19 and lld-19 (make deps), or ROCm (/opt/rocm/llvm/bin/clang)");
}

/* The AMD driver options shared by comgr and clang edges. */
static int amd_common(const gc_target_t *tg, gc_compiler_t *c, gc_err_t *e) {
  strcpy(c->ext, ".hsaco");
  snprintf(c->target, sizeof c->target, "%s", tg->arch);
  return tool_path("gcore-compile", c->path, sizeof c->path, e);
}

static int comgr_compiler(const gc_target_t *tg, gc_compiler_t *c, gc_err_t *e) {
  strcpy(c->driver, "comgr");
  if (!gc_comgr_available(c->version, sizeof c->version, e))
    return gc_err_prefix(e, "--compiler comgr for %s", tg->name);
  if (!gc_comgr_has_isa(tg->arch)) {
    char isas[600];
    gc_comgr_isa_list(isas, sizeof isas);
    return gc_err_set(e, GC_EUNSUPPORTED, "%s cannot build %s (it lists %s): use --compiler clang",
                      c->version, tg->name, isas);
  }
  if (amd_common(tg, c, e)) return e->code;
  snprintf(c->flags, sizeof c->flags, "isa=amdgcn-amd-amdhsa--%s -x hip -O3 -std=c++17 -nogpuinc "
           "-mcode-object-version=%d", tg->arch, tg->code_object);
  snprintf(c->tool_args, sizeof c->tool_args, "--driver comgr --target %s --code-object %d",
           tg->arch, tg->code_object);
  snprintf(c->id, sizeof c->id, "%s|%s|%s", c->driver, c->version, c->flags);
  return GC_OK;
}

static int clang_compiler(const gc_target_t *tg, gc_compiler_t *c, gc_err_t *e) {
  char clang[1024];
  strcpy(c->driver, "clang");
  if (gc_clang_find(clang, sizeof clang, c->version, sizeof c->version, e) ||
      amd_common(tg, c, e))
    return e->code;
  snprintf(c->flags, sizeof c->flags, "-x hip --offload-arch=%s --offload-device-only "
           "--no-gpu-bundle-output -nogpuinc -nogpulib -O3 -std=c++17 -mcode-object-version=%d",
           tg->arch, tg->code_object);
  snprintf(c->tool_args, sizeof c->tool_args, "--driver clang --clang %s --target %s "
           "--code-object %d", clang, tg->arch, tg->code_object);
  snprintf(c->id, sizeof c->id, "%s|%s|%s", c->driver, c->version, c->flags);
  return GC_OK;
}

/* comgr where it lists the ISA, clang otherwise; force picks one. */
static int amd_compiler(const gc_target_t *tg, const char *force, gc_compiler_t *c,
                        gc_err_t *e) {
  if (force && strcmp(force, "comgr") && strcmp(force, "clang"))
    return gc_err_set(e, GC_EINVAL, "compiler '%s' cannot build %s (use comgr or clang)", force,
                      tg->name);
  if (force) return !strcmp(force, "comgr") ? comgr_compiler(tg, c, e) : clang_compiler(tg, c, e);
  if (gc_comgr_has_isa(tg->arch)) return comgr_compiler(tg, c, e);
  return clang_compiler(tg, c, e);
}

int gc_compiler_serves(const char *driver, const char *backend) {
  if (!strcmp(driver, "cc")) return !strcmp(backend, "cpu");
  if (!strcmp(driver, "nvrtc")) return !strcmp(backend, "cuda");
  if (!strcmp(driver, "comgr") || !strcmp(driver, "clang")) return !strcmp(backend, "hip");
  return 0;
}

int gc_compiler_for(const gc_target_t *tg, const char *force, gc_compiler_t *c,
                    gc_err_t *e) {
  memset(c, 0, sizeof *c);
  c->timeout_s = GC_COMPILE_TIMEOUT;
  if (!strcmp(tg->backend, "cuda")) {
    if (force && strcmp(force, "nvrtc"))
      return gc_err_set(e, GC_EINVAL, "compiler '%s' cannot build %s (use nvrtc)", force, tg->name);
    return nvrtc_compiler(tg, c, e);
  }
  if (!strcmp(tg->backend, "hip")) return amd_compiler(tg, force, c, e);
  if (strcmp(tg->backend, "cpu"))
    return gc_err_set(e, GC_EUNSUPPORTED, "no compile driver for target %s", tg->name);
  strcpy(c->ext, ".so");
  snprintf(c->target, sizeof c->target, "%s", tg->arch);
  if (force && strcmp(force, "cc"))
    return gc_err_set(e, GC_EINVAL, "compiler '%s' cannot build %s (use cc)", force,
                      tg->name);
  const char *cc = getenv("CC");
  if (!cc || !*cc) cc = "cc";
  if (!safe_word(cc))
    return gc_err_set(e, GC_EINVAL, "CC='%s': give a plain compiler path", cc);
  strcpy(c->driver, "cc");
  snprintf(c->path, sizeof c->path, "%s", cc);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "timeout -k 5 60 %s --version 2>/dev/null", cc); /* a compiler that stalls */
  if (first_line(cmd, c->version, sizeof c->version))
    return gc_err_set(e, GC_ECOMPILE,
                      "C compiler '%s' not found or not working (install gcc: make deps)", cc);
  snprintf(c->flags, sizeof c->flags,
           "-std=gnu11 -O3 -march=%s -fPIC -shared -fvisibility=hidden -fno-math-errno",
           tg->arch);
  snprintf(c->id, sizeof c->id, "%s|%s|%s", c->driver, c->version, c->flags);
  return GC_OK;
}

void gc_cache_default(char *buf, size_t n) {
  const char *g = getenv("GCORE_CACHE"), *x = getenv("XDG_CACHE_HOME"),
             *h = getenv("HOME");
  if (g && *g)
    snprintf(buf, n, "%s", g);
  else if (x && *x)
    snprintf(buf, n, "%s/gcore", x);
  else
    snprintf(buf, n, "%s/.cache/gcore", h && *h ? h : "/tmp");
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && st.st_size > 0;
}

/* This process's start time (clock ticks after boot: /proc/PID/stat's
 * 22nd field), which with the pid names a process once; 0 unknown. */
static unsigned long long start_time(long pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command may hold spaces and parentheses */
  unsigned long long t = 0;
  for (int field = 2; p && *p; p++) /* field 2 ends at the last ')' */
    if (*p == ' ' && ++field == 22) {
      t = strtoull(p + 1, NULL, 10);
      break;
    }
  return t;
}

/* 1 when obj's claim names a live process other than this one (the
 * same pid with the same start time); 0 when there is none, or it is
 * stale (its process ended, or the pid now names another). */
static int claimed_by_other(const char *obj) {
  char path[1100];
  long pid = 0;
  unsigned long long t = 0;
  snprintf(path, sizeof path, "%s.claim", obj);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int got = fscanf(f, "%ld %llu", &pid, &t);
  fclose(f);
  return got == 2 && pid > 0 && pid != (long)getpid() && t && start_time(pid) == t;
}

static int write_claim(const char *obj, gc_err_t *e) {
  char path[1100], line[64];
  snprintf(path, sizeof path, "%s.claim", obj);
  int len = snprintf(line, sizeof line, "%ld %llu\n", (long)getpid(), start_time(getpid()));
  return gc_write_file(path, line, (size_t)len, e);
}

static void drop_claim(const char *obj) {
  char path[1100];
  snprintf(path, sizeof path, "%s.claim", obj);
  remove(path);
}

/* Write the source unless an identical file (same vid) is already there. */
static int write_source(const char *cache, const gc_compiler_t *c, gc_compile_job_t *j,
                        gc_err_t *e) {
  char path[1100];
  snprintf(path, sizeof path, "%s/src/%s%s", cache, j->vid, !strcmp(c->ext, ".so") ? ".c" : ".cu");
  if (exists(path)) return GC_OK;
  return gc_write_file(path, j->source, j->source_len, e);
}

/* ---- the cc driver's precompiled header -------------------------------
 * A CPU source opens with the prelude's system headers (templates/cpu/
 * prelude.h: <immintrin.h> under -march=native is about half of a small
 * template's compile). GCC builds them once per compiler, flags and list
 * into <cache>/pch/<hash>.h.gch, and every compile is given -include
 * <hash>.h: GCC then reads the .gch instead of parsing the headers, or the
 * text where the .gch is missing or unusable (it checks the compiler and
 * the flags, and ignores a PCH that fails them), and either way writes the
 * same code object byte for byte (tests/test_trust.py). Not with clang,
 * which fails a compile whose PCH's headers have changed since. */

/* Skip blanks and comments from p; the first other character. */
static const char *skip_blank(const char *p, const char *end) {
  while (p < end) {
    if (isspace((unsigned char)*p)) p++;
    else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
      const char *q = p + 2;
      while (q + 1 < end && !(q[0] == '*' && q[1] == '/')) q++;
      if (q + 1 >= end) return end; /* unterminated: nothing after it counts */
      p = q + 2;
    } else if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
      while (p < end && *p != '\n') p++;
    } else break;
  }
  return p;
}

/* 1 when the line at p (to '\n' or end) is `dir NAME`, NAME into w[wn];
 * else 0. */
static int directive_name(const char *p, const char *end, const char *dir, char *w, size_t wn) {
  size_t dl = strlen(dir), k = 0;
  if ((size_t)(end - p) <= dl || strncmp(p, dir, dl) || (p[dl] != ' ' && p[dl] != '\t')) return 0;
  for (p += dl; p < end && (*p == ' ' || *p == '\t'); p++) {
  }
  for (; p < end && (isalnum((unsigned char)*p) || *p == '_') && k + 1 < wn; p++) w[k++] = *p;
  w[k] = 0;
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  return k > 0 && (p == end || *p == '\n');
}

/* Append to b the `#include <...>` lines src[0, n) opens with, past
 * comments and gcore's own include guards (#ifndef GC_X / #define GC_X:
 * names no system header reads, so the headers mean the same before
 * them); stops at the first other line. Returns the number of lines. */
static int lead_includes(const char *src, size_t n, gc_buf_t *b, gc_err_t *e) {
  const char *p = src, *end = src + n;
  int lines = 0;
  for (;;) {
    p = skip_blank(p, end);
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    char a[128], d[128];
    if (end - p > 10 && !strncmp(p, "#include <", 10)) {
      const char *gt = memchr(p, '>', (size_t)(eol - p));
      if (!gt || skip_blank(gt + 1, eol) != eol) break; /* something after it on the line */
      if (gc_buf_append(b, p, (size_t)(gt + 1 - p), e) || gc_buf_append(b, "\n", 1, e)) return -1;
      lines++;
      p = eol;
    } else if (directive_name(p, eol, "#ifndef", a, sizeof a) && !strncmp(a, "GC_", 3) && eol < end) {
      const char *q = skip_blank(eol + 1, end), *qe = memchr(q, '\n', (size_t)(end - q));
      if (!qe) qe = end;
      if (!directive_name(q, qe, "#define", d, sizeof d) || strcmp(a, d)) break;
      p = qe;
    } else break;
  }
  return lines;
}

/* The precompiled header job j's compile can use: key (GC_HASH_HEX) names
 * <cache>/pch/<key>.h, written here when missing. Returns 1 with key set,
 * 0 when none applies (not GCC, or the source opens with no system
 * header), or -1 on an error. */
static int cpu_pch(const gc_compiler_t *c, const char *cache, const gc_compile_job_t *j,
                   char key[GC_HASH_HEX], gc_err_t *e) {
  if (strcmp(c->driver, "cc") || strstr(c->version, "clang")) return 0;
  gc_buf_t b = {0};
  int lines = lead_includes(j->source, j->source_len, &b, e);
  if (lines <= 0) {
    gc_buf_free(&b);
    return lines;
  }
  gc_buf_t k = {0};
  int rc = gc_buf_printf(&k, e, "%s\n%.*s", c->id, (int)b.len, b.data);
  if (!rc) gc_hash_hex(k.data, k.len, key);
  gc_buf_free(&k);
  char dir[1100], path[1100];
  snprintf(dir, sizeof dir, "%s/pch", cache);
  snprintf(path, sizeof path, "%s/%s.h", dir, key);
  if (!rc && !exists(path)) rc = gc_mkdirs(dir, e) ? e->code : gc_write_file(path, b.data, b.len, e);
  gc_buf_free(&b);
  return rc ? -1 : 1;
}

/* Under the cache lock: job i's header (cpu_pch) into pch[i], and its
 * role[i] in this batch's build of the .gch: 'b' the job whose edge builds
 * it (missing, and claimed now), 'w' a later job that waits for that edge,
 * 0 none (there already, or another live process claimed it: the
 * compiles read the text until it lands). */
static int claim_pch(const gc_compiler_t *c, const char *cache, const gc_compile_job_t *jobs,
                     const char *state, int i, char (*pch)[GC_HASH_HEX], char *role,
                     gc_err_t *e) {
  int got = cpu_pch(c, cache, &jobs[i], pch[i], e);
  if (got <= 0) {
    pch[i][0] = 0;
    return got < 0 ? e->code : GC_OK;
  }
  for (int h = 0; h < i; h++)
    if (state[h] == 'm' && !strcmp(pch[h], pch[i])) {
      role[i] = role[h] ? 'w' : 0;
      return GC_OK;
    }
  char gch[1100];
  snprintf(gch, sizeof gch, "%s/pch/%s.h.gch", cache, pch[i]);
  if (exists(gch) || claimed_by_other(gch)) return GC_OK;
  role[i] = 'b';
  return write_claim(gch, e);
}

static void drop_pch_claim(const char *cache, const char *key) {
  char gch[1100];
  snprintf(gch, sizeof gch, "%s/pch/%s.h.gch", cache, key);
  drop_claim(gch);
}

/* The line a timed-out compile's log ends with (read_log looks for it). */
#define TIMED_OUT_MARK "gcore: compile timed out"

/* Write <cache>/build-<tag>.ninja: an edge for each job whose state is
 * `which` (ninja's own log in .ninja-<tag>, this batch's alone). */
static int write_ninja(const gc_compiler_t *c, const char *cache, const char *tag,
                       gc_compile_job_t *jobs, const char *state, int n, char which,
                       char (*pch)[GC_HASH_HEX], const char *role, gc_err_t *e) {
  gc_buf_t b = {0};
  int tool = strcmp(c->driver, "cc") != 0;
  /* timeout(1) ends the compile's whole process group: TERM at the limit,
   * KILL 10 s later. The compiler writes $out.<shell pid>.part (and
   * gcore-compile its resources, ....part.res), renamed to $out (its .res
   * first) when it succeeds: a code object in the cache is always whole,
   * and has its figures, for a process that looks without the lock
   * (gc_compile_batch). A failed compile leaves neither, and a timed-out
   * one says so in its log (exit 124; 137 after the KILL). */
#define PART "$out.$$$$.part" /* $$$$: the shell's pid, one a compile */
#define AFTER                                                                             \
  "s=$$?; [ $$s = 0 ] && { [ ! -e " PART ".res ] || mv -f " PART ".res $out.res; } && " \
  "mv -f " PART " $out && exec rm -f $out.log; rm -f " PART " " PART ".res; "           \
  "[ $$s = 124 -o $$s = 137 ] && echo '" TIMED_OUT_MARK "' >> $out.log; exit $$s"
  int rc = gc_buf_printf(&b, e,
                         "# written by gcore: one edge per variant; outputs are "
                         "content-addressed by variant id\n"
                         "builddir = .ninja-%s\n"
                         "cc = %s\ncflags = %s\ntargs = %s\n"
                         "run = timeout -k 10 %g\n"
                         "rule cc\n"
                         "  command = $run $cc $cflags $pch -o " PART " $in > $out.log 2>&1; " AFTER "\n"
                         "  description = CC $out\n"
                         "rule pch\n" /* never fails the batch: without it GCC reads the text */
                         "  command = $run $cc $cflags -x c-header -o " PART " $in > /dev/null 2>&1 "
                         "&& mv -f " PART " $out; rm -f " PART "; exit 0\n"
                         "  description = PCH $out\n"
                         "rule tool\n"
                         "  command = $run $cc $targs --kernel $kernel -o " PART " $in > $out.log "
                         "2>&1; " AFTER "\n"
                         "  description = %s $out\n",
                         tag, c->path, c->flags, c->tool_args, c->timeout_s, c->driver);
  for (int i = 0; !rc && i < n; i++) {
    if (state[i] != which) continue;
    if (tool) {
      rc = gc_buf_printf(&b, e, "build obj/%s%s: tool src/%s.cu\n  kernel = %s\n", jobs[i].vid,
                         c->ext, jobs[i].vid, jobs[i].kernel ? jobs[i].kernel : "none");
      continue;
    }
    const char *k = pch[i];
    if (role[i] == 'b') rc = gc_buf_printf(&b, e, "build pch/%s.h.gch: pch pch/%s.h\n", k, k);
    if (!rc)
      rc = gc_buf_printf(&b, e, "build obj/%s.so: cc src/%s.c%s%s%s\n", jobs[i].vid, jobs[i].vid,
                         role[i] ? " || pch/" : "", role[i] ? k : "", role[i] ? ".h.gch" : "");
    if (!rc && *k) rc = gc_buf_printf(&b, e, "  pch = -include pch/%s.h\n", k);
  }
  if (!rc) {
    char path[1100];
    snprintf(path, sizeof path, "%s/build-%s.ninja", cache, tag);
    rc = gc_write_file(path, b.data, b.len, e);
  }
  gc_buf_free(&b);
  return rc;
}

/* Keep the compiler's error lines (or its first line) as the job's log;
 * a compile that ran out of time says only that. */
static void read_log(const gc_compiler_t *c, gc_compile_job_t *j) {
  char path[1100], line[512], first[512] = "";
  snprintf(path, sizeof path, "%s.log", j->obj);
  snprintf(j->log, sizeof j->log, "compiler produced no code object");
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t len = 0;
  j->log[0] = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (!strcmp(line, TIMED_OUT_MARK)) {
      snprintf(j->log, sizeof j->log, "timed out after %g s", c->timeout_s);
      fclose(f);
      return;
    }
    if (!first[0]) snprintf(first, sizeof first, "%s", line);
    if (strstr(line, "error") && len + 1 < sizeof j->log)
      len += (size_t)snprintf(j->log + len, sizeof j->log - len, "%s%s",
                              len ? " | " : "", line);
  }
  fclose(f);
  if (!len) snprintf(j->log, sizeof j->log, "%s", first[0] ? first : "compile failed");
}

/* OUT.res written by gcore-compile: "code_bytes regs spills shared_bytes
 * scratch_bytes [agprs sgprs wave]" (older sidecars have the first five). */
static void read_resources(gc_compile_job_t *j) {
  char path[1100];
  long long v[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  snprintf(path, sizeof path, "%s.res", j->obj);
  FILE *f = fopen(path, "r");
  if (!f) return;
  int got = fscanf(f, "%lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
  if (got >= 5)
    j->res = (gc_resources_t){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], -1};
  fclose(f);
}

/* Run build-<tag>.ninja, then remove it, its output and ninja's log. */
static int run_ninja(const char *cache, const char *tag, int parallel, gc_err_t *e) {
  char cmd[3500], jflag[32] = "";
  if (parallel > 0) snprintf(jflag, sizeof jflag, "-j %d", parallel);
  snprintf(cmd, sizeof cmd,
           "cd '%s' && { ninja -f build-%s.ninja -k 0 %s > ninja-%s.out 2>&1; s=$?; "
           "rm -rf build-%s.ninja ninja-%s.out .ninja-%s; exit $s; }",
           cache, tag, jflag, tag, tag, tag, tag);
  int st = system(cmd);
  if (st == -1 || !WIFEXITED(st))
    return gc_err_set(e, GC_ECOMPILE, "could not run ninja");
  if (WEXITSTATUS(st) == 127)
    return gc_err_set(e, GC_ECOMPILE, "ninja not found (install ninja-build: make deps)");
  return GC_OK; /* individual failures are read per job */
}

/* The results of jobs[0, n) whose code objects are in the cache (or not:
 * a failed compile, its log read). */
static void results(const gc_compiler_t *c, gc_compile_job_t *jobs, int n) {
  for (int i = 0; i < n; i++) {
    gc_compile_job_t *j = &jobs[i];
    struct stat st;
    j->ok = stat(j->obj, &st) == 0 && st.st_size > 0;
    j->res = GC_RESOURCES_UNKNOWN;
    j->res.code_bytes = j->ok ? st.st_size : -1;
    if (!j->ok) read_log(c, j);
    else read_resources(j);
  }
}

int gc_compile_batch(const gc_compiler_t *c, const gc_target_t *tg,
                     const char *cache, gc_compile_job_t *jobs, int n,
                     int parallel, gc_err_t *e) {
  (void)tg;
  char dir[1100];
  if (strchr(cache, '\''))
    return gc_err_set(e, GC_EINVAL, "cache path may not contain quotes: %s", cache);
  if (gc_check_output(cache, 'd', e)) return gc_err_prefix(e, "compile cache");
  snprintf(dir, sizeof dir, "%s/src", cache);
  if (gc_mkdirs(dir, e)) return e->code;
  snprintf(dir, sizeof dir, "%s/obj", cache);
  if (gc_mkdirs(dir, e)) return e->code;
  /* every code object there already: no lock (a cached one is whole, with
   * its figures: write_ninja's rename) */
  int todo = 0;
  for (int i = 0; i < n; i++) {
    gc_compile_job_t *j = &jobs[i];
    snprintf(j->obj, sizeof j->obj, "%s/obj/%s%s", cache, j->vid, c->ext);
    j->cached = exists(j->obj);
    todo += !j->cached;
  }
  if (!todo) {
    results(c, jobs, n);
    return GC_OK;
  }
  snprintf(dir, sizeof dir, "%s/lock", cache);
  int lock = open(dir, O_CREAT | O_RDWR, 0666);
  if (lock < 0) return gc_err_set(e, GC_EIO, "%s: %s", dir, strerror(errno));
  /* state[i]: 'd' done (there, or compiled here), 'm' claimed in this
   * round, 't' another process's claim, 'w' to look at again */
  char *state = gc_malloc((size_t)n, e);
  if (!state) {
    close(lock);
    return e->code;
  }
  memset(state, 'w', (size_t)n);
  /* pch[i]: the precompiled header job i's compile includes ("" none);
   * pch_role[i]: its part in this batch's build of it (claim_pch) */
  char(*pch)[GC_HASH_HEX] = gc_malloc((size_t)n * sizeof *pch, e);
  char *pch_role = gc_malloc((size_t)n, e);
  if (!pch || !pch_role) {
    free(pch), free(pch_role), free(state);
    close(lock);
    return e->code;
  }
  memset(pch, 0, (size_t)n * sizeof *pch);
  memset(pch_role, 0, (size_t)n);
  /* the batch's build files: the pid, and a count for batches that threads
   * of one process run at once (a claim is the process's: its threads may
   * compile a variant twice, each into its own .part, never clobbering) */
  static unsigned batches;
  char tag[48];
  snprintf(tag, sizeof tag, "%ld-%u", (long)getpid(),
           __atomic_fetch_add(&batches, 1, __ATOMIC_RELAXED));
  int rc = GC_OK;
  for (int others = 1; !rc && others;) {
    int mine = 0;
    others = 0;
    flock(lock, LOCK_EX);
    for (int i = 0; !rc && i < n; i++) {
      gc_compile_job_t *j = &jobs[i];
      if (state[i] == 'd') continue;
      if (exists(j->obj)) state[i] = 'd';
      else if (claimed_by_other(j->obj)) state[i] = 't', others++;
      else if (!(rc = write_claim(j->obj, e))) { /* dropped below, even if the source is not */
        state[i] = 'm', mine++;
        rc = write_source(cache, c, j, e);
      }
    }
    for (int i = 0; !rc && i < n; i++)
      if (state[i] == 'm') rc = claim_pch(c, cache, jobs, state, i, pch, pch_role, e);
    if (!rc && mine) rc = write_ninja(c, cache, tag, jobs, state, n, 'm', pch, pch_role, e);
    flock(lock, LOCK_UN);
    if (!rc && mine) rc = run_ninja(cache, tag, parallel, e);
    for (int i = 0; i < n; i++) {
      if (state[i] == 'm' && pch_role[i] == 'b') drop_pch_claim(cache, pch[i]);
      if (state[i] == 'm') drop_claim(jobs[i].obj), state[i] = 'd';
    }
    /* the others' compiles: until each code object is there or its claim
     * is gone (a failed or ended compile: claimed again, as a miss) */
    for (int i = 0; !rc && i < n; i++)
      if (state[i] == 't') {
        while (!exists(jobs[i].obj) && claimed_by_other(jobs[i].obj)) usleep(20000);
        state[i] = 'w';
      }
  }
  free(pch), free(pch_role), free(state);
  close(lock);
  if (!rc) results(c, jobs, n);
  return rc;
}
