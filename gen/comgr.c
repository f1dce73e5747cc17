/* comgr.c — libamd_comgr, dlopen'd on first use and kept for the process.
 * The types below mirror amd_comgr.h (ABI version 2: every handle is a
 * struct of one uint64_t, every call returns a status int), so gcore needs
 * neither the header nor the library to build.
 *
 * Compiling is four actions on data sets: COMPILE_SOURCE_TO_BC (language
 * HIP, options -O3 -std=c++17 -nogpuinc: comgr 5.2 defaults to -O0 and
 * C++14), LINK_BC_TO_BC,
 * CODEGEN_BC_TO_RELOCATABLE, LINK_RELOCATABLE_TO_EXECUTABLE. Metadata is
 * read with amd_comgr_get_data_metadata on an EXECUTABLE data object and
 * map lookups under "amdhsa.kernels" (code object v4 and v5 keys are the
 * same for what gcore reads: LLVM AMDGPUUsage, "Code Object V3 Metadata"). */
#include "comgr.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the library, loaded once ---------------------------------------- */

typedef struct { uint64_t handle; } cg_data_t, cg_set_t, cg_info_t, cg_node_t;
typedef int cg_status;

enum { CG_OK = 0 };
enum { CG_SOURCE = 1, CG_LOG = 5, CG_BC = 6, CG_RELOC = 7, CG_EXEC = 8 };
enum { CG_HIP = 4 };
enum { CG_TO_BC = 2, CG_LINK_BC = 4, CG_CODEGEN = 6, CG_LINK_EXEC = 9 };
enum { CG_MD_NULL = 0, CG_MD_STRING = 1, CG_MD_MAP = 2, CG_MD_LIST = 3 };

typedef struct cg_api {
  void *lib;
  size_t major, minor;
  void (*get_version)(size_t *, size_t *);
  cg_status (*status_string)(cg_status, const char **);
  cg_status (*get_isa_count)(size_t *);
  cg_status (*get_isa_name)(size_t, const char **);
  cg_status (*create_data)(int, cg_data_t *);
  cg_status (*release_data)(cg_data_t);
  cg_status (*set_data)(cg_data_t, size_t, const char *);
  cg_status (*set_data_name)(cg_data_t, const char *);
  cg_status (*get_data)(cg_data_t, size_t *, char *);
  cg_status (*get_data_metadata)(cg_data_t, cg_node_t *);
  cg_status (*destroy_metadata)(cg_node_t);
  cg_status (*create_data_set)(cg_set_t *);
  cg_status (*destroy_data_set)(cg_set_t);
  cg_status (*data_set_add)(cg_set_t, cg_data_t);
  cg_status (*action_data_count)(cg_set_t, int, size_t *);
  cg_status (*action_data_get_data)(cg_set_t, int, size_t, cg_data_t *);
  cg_status (*create_action_info)(cg_info_t *);
  cg_status (*destroy_action_info)(cg_info_t);
  cg_status (*info_set_isa_name)(cg_info_t, const char *);
  cg_status (*info_set_language)(cg_info_t, int);
  cg_status (*info_set_option_list)(cg_info_t, const char **, size_t);
  cg_status (*info_set_logging)(cg_info_t, _Bool);
  cg_status (*do_action)(int, cg_info_t, cg_set_t, cg_set_t);
  cg_status (*get_metadata_kind)(cg_node_t, int *);
  cg_status (*get_metadata_string)(cg_node_t, size_t *, char *);
  cg_status (*get_metadata_list_size)(cg_node_t, size_t *);
  cg_status (*index_list_metadata)(cg_node_t, size_t, cg_node_t *);
  cg_status (*metadata_lookup)(cg_node_t, const char *, cg_node_t *);
} cg_api_t;

static pthread_mutex_t cg_mu = PTHREAD_MUTEX_INITIALIZER;
static int cg_tried;
static cg_api_t cg;
static gc_err_t cg_err;

#define CG_SYM(f)                                                               \
  do {                                                                          \
    *(void **)&cg.f = dlsym(cg.lib, "amd_comgr_" #f);                           \
    if (!cg.f) {                                                                \
      gc_err_set(&cg_err, GC_EUNSUPPORTED, "libamd_comgr has no amd_comgr_" #f); \
      goto fail;                                                                \
    }                                                                           \
  } while (0)

/* $GCORE_COMGR names the library (and nothing else is tried); otherwise
 * the library path, then ROCm's. */
static void cg_load_locked(void) {
  static const char *const names[] = {"libamd_comgr.so", "libamd_comgr.so.3",
                                      "libamd_comgr.so.2", "/opt/rocm/lib/libamd_comgr.so"};
  const char *env = getenv("GCORE_COMGR");
  char why[400] = "";
  for (size_t i = 0; i < GC_ARRAY_LEN(names) && !cg.lib; i++) {
    const char *name = env && *env ? env : names[i];
    if (!(cg.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) && !why[0])
      snprintf(why, sizeof why, "%s", dlerror());
    if (env && *env) break;
  }
  if (!cg.lib) {
    gc_err_set(&cg_err, GC_EUNSUPPORTED,
               "AMD comgr not found: tried %s (install libamd-comgr2: make deps) (dlopen: %s)",
               env && *env ? "$GCORE_COMGR" : "libamd_comgr.so, .so.3, .so.2 and /opt/rocm/lib",
               why);
    return;
  }
  CG_SYM(get_version); CG_SYM(status_string); CG_SYM(get_isa_count); CG_SYM(get_isa_name);
  CG_SYM(create_data); CG_SYM(release_data); CG_SYM(set_data); CG_SYM(set_data_name);
  CG_SYM(get_data); CG_SYM(get_data_metadata); CG_SYM(destroy_metadata);
  CG_SYM(create_data_set); CG_SYM(destroy_data_set); CG_SYM(data_set_add);
  CG_SYM(action_data_count); CG_SYM(action_data_get_data); CG_SYM(create_action_info);
  CG_SYM(destroy_action_info); CG_SYM(do_action);
  *(void **)&cg.info_set_isa_name = dlsym(cg.lib, "amd_comgr_action_info_set_isa_name");
  *(void **)&cg.info_set_language = dlsym(cg.lib, "amd_comgr_action_info_set_language");
  *(void **)&cg.info_set_option_list = dlsym(cg.lib, "amd_comgr_action_info_set_option_list");
  *(void **)&cg.info_set_logging = dlsym(cg.lib, "amd_comgr_action_info_set_logging");
  if (!cg.info_set_isa_name || !cg.info_set_language || !cg.info_set_option_list ||
      !cg.info_set_logging) {
    gc_err_set(&cg_err, GC_EUNSUPPORTED, "libamd_comgr is too old (no action_info option lists)");
    goto fail;
  }
  CG_SYM(get_metadata_kind); CG_SYM(get_metadata_string); CG_SYM(get_metadata_list_size);
  CG_SYM(index_list_metadata); CG_SYM(metadata_lookup);
  cg.get_version(&cg.major, &cg.minor);
  return;
fail:
  dlclose(cg.lib);
  cg.lib = NULL;
}

static int cg_load(gc_err_t *e) {
  pthread_mutex_lock(&cg_mu);
  if (!cg_tried) {
    cg_load_locked();
    cg_tried = 1;
  }
  pthread_mutex_unlock(&cg_mu);
  if (cg.lib) return GC_OK;
  return gc_err_set(e, cg_err.code, "%s", cg_err.msg);
}

int gc_comgr_available(char *version, size_t n, gc_err_t *e) {
  if (cg_load(e)) return 0;
  if (version && n) snprintf(version, n, "comgr %zu.%zu", cg.major, cg.minor);
  return 1;
}

/* ---- ISAs --------------------------------------------------------------- */

#define ISA_PREFIX "amdgcn-amd-amdhsa--"

void gc_comgr_isa_list(char *out, size_t n) {
  size_t count = 0, len = 0;
  out[0] = 0;
  if (cg_load(NULL) || cg.get_isa_count(&count) != CG_OK) return;
  for (size_t i = 0; i < count && len + 1 < n; i++) {
    const char *name = NULL;
    if (cg.get_isa_name(i, &name) != CG_OK || !name) continue;
    if (!strncmp(name, ISA_PREFIX, strlen(ISA_PREFIX))) name += strlen(ISA_PREFIX);
    len += (size_t)snprintf(out + len, n - len, "%s%s", len ? "," : "", name);
  }
}

int gc_comgr_has_isa(const char *arch) {
  size_t count = 0, plen = strlen(ISA_PREFIX), alen = strcspn(arch, ":");
  if (cg_load(NULL) || cg.get_isa_count(&count) != CG_OK) return 0;
  for (size_t i = 0; i < count; i++) {
    const char *name = NULL;
    if (cg.get_isa_name(i, &name) != CG_OK || !name || strncmp(name, ISA_PREFIX, plen)) continue;
    name += plen;
    if (strlen(name) >= alen && !strncmp(name, arch, alen) && (!name[alen] || name[alen] == ':'))
      return 1;
  }
  return 0;
}

/* ---- compiling ---------------------------------------------------------- */

/* Append the LOG data objects of set to log. */
static void cg_logs(cg_set_t set, char *log, size_t log_n) {
  size_t count = 0;
  if (!log || !log_n || cg.action_data_count(set, CG_LOG, &count) != CG_OK) return;
  for (size_t i = 0; i < count; i++) {
    cg_data_t d;
    size_t size = 0, used = strlen(log);
    if (cg.action_data_get_data(set, CG_LOG, i, &d) != CG_OK) continue;
    if (cg.get_data(d, &size, NULL) == CG_OK && size && used + 1 < log_n) {
      char *text = gc_malloc(size + 1, NULL);
      if (text && cg.get_data(d, &size, text) == CG_OK) {
        text[size] = 0;
        snprintf(log + used, log_n - used, "%s", text);
      }
      free(text);
    }
    cg.release_data(d);
  }
}

/* The first lines of log that mention an error, joined by " | ". */
static void cg_first_errors(const char *log, char *out, size_t n) {
  out[0] = 0;
  int lines = 0;
  for (const char *p = log; *p && lines < 3;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (memmem(p, len, "error", 5)) {
      size_t used = strlen(out);
      snprintf(out + used, n - used, "%s%.*s", used ? " | " : "", (int)len, p);
      lines++;
    }
    p += len + (nl != NULL);
  }
}

/* Run one action from in to a fresh *out set. */
static int cg_step(int action, cg_info_t info, cg_set_t in, cg_set_t *out, const char *what,
                   char *log, size_t log_n, gc_err_t *e) {
  if (cg.create_data_set(out) != CG_OK) return gc_err_set(e, GC_ENOMEM, "comgr: no data set");
  cg_status s = cg.do_action(action, info, in, *out);
  cg_logs(*out, log, log_n);
  if (s == CG_OK) return GC_OK;
  char first[600];
  cg_first_errors(log ? log : "", first, sizeof first);
  const char *str = NULL;
  cg.status_string(s, &str);
  return gc_err_set(e, GC_ECOMPILE, "comgr: %s failed: %s", what,
                    first[0] ? first : str ? str : "error");
}

static int cg_opts(cg_info_t info, const char *isa, const char **opts, size_t n) {
  return cg.info_set_isa_name(info, isa) || cg.info_set_language(info, CG_HIP) ||
         cg.info_set_logging(info, 1) || cg.info_set_option_list(info, opts, n);
}

/* The executable's bytes out of set. */
static int cg_take_exec(cg_set_t set, void **obj, size_t *size, gc_err_t *e) {
  cg_data_t d;
  size_t n = 0;
  if (cg.action_data_get_data(set, CG_EXEC, 0, &d) != CG_OK)
    return gc_err_set(e, GC_ECOMPILE, "comgr produced no code object");
  int rc = GC_OK;
  char *buf = NULL;
  if (cg.get_data(d, &n, NULL) != CG_OK || !n)
    rc = gc_err_set(e, GC_ECOMPILE, "comgr produced an empty code object");
  else if (!(buf = gc_malloc(n, e)))
    rc = GC_ENOMEM;
  else if (cg.get_data(d, &n, buf) != CG_OK)
    rc = gc_err_set(e, GC_ECOMPILE, "comgr: reading the code object failed");
  cg.release_data(d);
  if (rc) free(buf);
  else *obj = buf, *size = n;
  return rc;
}

int gc_comgr_compile(const char *src, const char *arch, int cov, void **obj, size_t *size,
                     char *log, size_t log_n, gc_err_t *e) {
  *obj = NULL;
  *size = 0;
  if (log && log_n) log[0] = 0;
  if (cg_load(e)) return e->code;
  if (!gc_comgr_has_isa(arch)) {
    char isas[1024];
    gc_comgr_isa_list(isas, sizeof isas);
    return gc_err_set(e, GC_EUNSUPPORTED, "comgr %zu.%zu cannot build %s (it lists: %s); use "
                      "--compiler clang", cg.major, cg.minor, arch, isas);
  }
  char isa[128], covopt[40];
  snprintf(isa, sizeof isa, ISA_PREFIX "%s", arch);
  snprintf(covopt, sizeof covopt, "-mcode-object-version=%d", cov);
  const char *bc_opts[] = {"-O3", "-std=c++17", "-nogpuinc", covopt};
  const char *cg_opts_v[] = {"-O3", covopt};
  cg_set_t sets[5] = {{0}};
  cg_data_t d = {0};
  cg_info_t info = {0};
  int rc = GC_OK;
  if (cg.create_data_set(&sets[0]) || cg.create_data(CG_SOURCE, &d) ||
      cg.set_data(d, strlen(src), src) || cg.set_data_name(d, "gcore_variant.hip") ||
      cg.data_set_add(sets[0], d) || cg.create_action_info(&info))
    rc = gc_err_set(e, GC_ENOMEM, "comgr: cannot set up the compile");
  if (!rc && cg_opts(info, isa, bc_opts, GC_ARRAY_LEN(bc_opts)))
    rc = gc_err_set(e, GC_EINVAL, "comgr: rejected ISA %s or its options", isa);
  if (!rc) rc = cg_step(CG_TO_BC, info, sets[0], &sets[1], "source to bitcode", log, log_n, e);
  if (!rc) rc = cg_step(CG_LINK_BC, info, sets[1], &sets[2], "linking bitcode", log, log_n, e);
  if (!rc && cg.info_set_option_list(info, cg_opts_v, GC_ARRAY_LEN(cg_opts_v)))
    rc = gc_err_set(e, GC_EINVAL, "comgr: rejected codegen options");
  if (!rc) rc = cg_step(CG_CODEGEN, info, sets[2], &sets[3], "code generation", log, log_n, e);
  if (!rc) rc = cg_step(CG_LINK_EXEC, info, sets[3], &sets[4], "linking", log, log_n, e);
  if (!rc) rc = cg_take_exec(sets[4], obj, size, e);
  if (d.handle) cg.release_data(d);
  if (info.handle) cg.destroy_action_info(info);
  for (int i = 0; i < 5; i++)
    if (sets[i].handle) cg.destroy_data_set(sets[i]);
  return rc;
}

/* ---- metadata ----------------------------------------------------------- */

/* The string value of key in map node; 0 when present. */
static int md_string(cg_node_t map, const char *key, char *out, size_t n) {
  cg_node_t v;
  int kind = -1;
  size_t size = 0;
  out[0] = 0;
  if (cg.metadata_lookup(map, key, &v) != CG_OK) return -1;
  int rc = -1;
  if (cg.get_metadata_kind(v, &kind) == CG_OK && kind == CG_MD_STRING &&
      cg.get_metadata_string(v, &size, NULL) == CG_OK && size > 0 && size <= n &&
      cg.get_metadata_string(v, &size, out) == CG_OK) {
    out[size - 1] = 0;
    rc = 0;
  }
  cg.destroy_metadata(v);
  return rc;
}

/* The integer value of key in map node, or -1 when absent. */
static int64_t md_int(cg_node_t map, const char *key) {
  char s[40], *end;
  if (md_string(map, key, s, sizeof s)) return -1;
  long long v = strtoll(s, &end, 0);
  return end != s ? v : -1;
}

static void md_args(cg_node_t kmap, gc_amd_kernel_t *k) {
  cg_node_t list;
  size_t n = 0;
  k->nargs = 0;
  if (cg.metadata_lookup(kmap, ".args", &list) != CG_OK) return;
  if (cg.get_metadata_list_size(list, &n) == CG_OK)
    for (size_t i = 0; i < n && k->nargs < GC_AMD_MAX_ARGS; i++) {
      cg_node_t a;
      if (cg.index_list_metadata(list, i, &a) != CG_OK) continue;
      gc_amd_arg_t *x = &k->args[k->nargs++];
      x->offset = md_int(a, ".offset");
      x->size = md_int(a, ".size");
      if (md_string(a, ".value_kind", x->kind, sizeof x->kind)) snprintf(x->kind, sizeof x->kind, "?");
      cg.destroy_metadata(a);
    }
  cg.destroy_metadata(list);
}

static void md_kernel(cg_node_t kmap, gc_amd_kernel_t *k) {
  memset(k, 0, sizeof *k);
  md_string(kmap, ".name", k->name, sizeof k->name);
  md_string(kmap, ".symbol", k->symbol, sizeof k->symbol);
  k->vgprs = md_int(kmap, ".vgpr_count");
  k->agprs = md_int(kmap, ".agpr_count");
  k->sgprs = md_int(kmap, ".sgpr_count");
  k->lds = md_int(kmap, ".group_segment_fixed_size");
  k->scratch = md_int(kmap, ".private_segment_fixed_size");
  k->vgpr_spills = md_int(kmap, ".vgpr_spill_count");
  k->sgpr_spills = md_int(kmap, ".sgpr_spill_count");
  k->wave = md_int(kmap, ".wavefront_size");
  k->kernarg_size = md_int(kmap, ".kernarg_segment_size");
  k->max_flat_wg = md_int(kmap, ".max_flat_workgroup_size");
  md_args(kmap, k);
}

int gc_comgr_kernels(const void *obj, size_t n, gc_amd_kernel_t *ks, int max, int *count,
                     gc_err_t *e) {
  *count = 0;
  if (cg_load(e)) return e->code;
  if (!obj || n < 64 || memcmp(obj, "\177ELF", 4))
    return gc_err_set(e, GC_ECORRUPT, "not an AMDGPU code object (no ELF header)");
  cg_data_t d;
  cg_node_t root = {0}, list = {0};
  size_t nk = 0;
  int rc = GC_OK;
  if (cg.create_data(CG_EXEC, &d) != CG_OK) return gc_err_set(e, GC_ENOMEM, "comgr: no data");
  if (cg.set_data(d, n, obj) != CG_OK || cg.get_data_metadata(d, &root) != CG_OK)
    rc = gc_err_set(e, GC_ECORRUPT, "code object has no readable AMDGPU metadata");
  else if (cg.metadata_lookup(root, "amdhsa.kernels", &list) != CG_OK ||
           cg.get_metadata_list_size(list, &nk) != CG_OK)
    rc = gc_err_set(e, GC_ECORRUPT, "code object metadata has no amdhsa.kernels");
  for (size_t i = 0; !rc && i < nk && *count < max; i++) {
    cg_node_t km;
    if (cg.index_list_metadata(list, i, &km) != CG_OK) continue;
    md_kernel(km, &ks[(*count)++]);
    cg.destroy_metadata(km);
  }
  if (list.handle) cg.destroy_metadata(list);
  if (root.handle) cg.destroy_metadata(root);
  cg.release_data(d);
  return rc;
}

int gc_comgr_kernel_meta(const void *obj, size_t n, const char *name, gc_amd_kernel_t *k,
                         gc_err_t *e) {
  enum { MAXK = 16 };
  gc_amd_kernel_t *ks = gc_calloc(MAXK, sizeof *ks, e);
  int count = 0;
  if (!ks) return GC_ENOMEM;
  int rc = gc_comgr_kernels(obj, n, ks, MAXK, &count, e);
  int found = -1;
  for (int i = 0; !rc && i < count && found < 0; i++)
    if (!name || !strcmp(ks[i].name, name)) found = i;
  if (!rc && found < 0)
    rc = gc_err_set(e, GC_ENOTFOUND, "code object has no kernel '%s'", name ? name : "(any)");
  if (!rc) *k = ks[found];
  free(ks);
  return rc;
}
