/* test_amd.c — the AMD compile path without an AMD GPU: target strings and
 * their constants, the occupancy formula and static pruning on figures
 * chosen by hand, and (where libamd_comgr is installed) comgr compiling a
 * kernel for gfx90a and its metadata reader, including bad input. Parts
 * that need comgr print why and skip when it is missing. */
#include <stdlib.h>
#include <string.h>

#include "../../gen/comgr.h"
#include "../../db/tunedb.h"
#include "../../gen/resources.h"
#include "../../gen/target.h"

#include <sqlite3.h>
#include <unistd.h>

#include "check.h"

static int64_t konst(const gc_target_t *t, const char *name) {
  int64_t v = -999;
  gc_env_get(&t->consts, name, &v);
  return v;
}

static void test_targets(void) {
  gc_target_t t;
  gc_err_t e = {0};
  CHECK(gc_target_parse("gfx942", &t, &e) == GC_OK && !strcmp(t.backend, "hip"));
  CHECK(konst(&t, "WARP") == 64 && konst(&t, "SMEM") == 65536 && konst(&t, "NCU") == 304 &&
        konst(&t, "VGPRS") == 512 && konst(&t, "GFX") == 942 && konst(&t, "AMD") == 1 &&
        konst(&t, "MFMA") == 1 && konst(&t, "WMMA") == 0 && t.code_object == 5);
  CHECK(gc_target_parse("gfx1100", &t, &e) == GC_OK && konst(&t, "WARP") == 32 &&
        konst(&t, "WMMA") == 1 && konst(&t, "VGPRS") == 256 && konst(&t, "NCU") == 96);
  CHECK(gc_target_parse("gfx90a", &t, &e) == GC_OK && konst(&t, "GFX") == 910 &&
        konst(&t, "NCU") == 110);
  /* features are put in LLVM's order */
  CHECK(gc_target_parse("gfx942:xnack-:sramecc+", &t, &e) == GC_OK &&
        !strcmp(t.name, "gfx942:sramecc+:xnack-") && !strcmp(t.arch, t.name));
  static const char *const bad[] = {"gfx", "gfx941", "gfx942:", "gfx942:xnack", "gfx942:xnack*",
                                    "gfx942:xnack+:xnack-", "gfx1100:sramecc+", "gfx942:foo+",
                                    "gfx90a:sramecc+:"};
  for (size_t i = 0; i < GC_ARRAY_LEN(bad); i++) {
    gc_err_t be = {0};
    int rc = gc_target_parse(bad[i], &t, &be);
    CHECK(rc != GC_OK && be.msg[0] && !strchr(be.msg, '\n'));
  }
  CHECK(gc_target_parse("gfx942", &t, &e) == GC_OK && gc_target_set_code_object(&t, 4, &e) == 0 &&
        t.code_object == 4);
  CHECK(gc_target_set_code_object(&t, 3, &e) == GC_EINVAL);
  CHECK(gc_target_parse("sm_90", &t, &e) == GC_OK && konst(&t, "AMD") == 0 &&
        gc_target_set_code_object(&t, 4, &e) == GC_EINVAL);
}

static gc_resources_t res(int64_t vgprs, int64_t agprs, int64_t lds) {
  gc_resources_t r = GC_RESOURCES_UNKNOWN;
  r.regs = vgprs;
  r.agprs = agprs;
  r.shared_bytes = lds;
  r.spills = 0;
  r.scratch_bytes = 0;
  return r;
}

static void test_occupancy(void) {
  const gc_amd_isa_t *cdna = gc_target_amd_isa("gfx942:xnack-"), *rdna = gc_target_amd_isa("gfx1100");
  CHECK(cdna && rdna && !gc_target_amd_isa("gfx908"));
  if (!cdna || !rdna) return;
  gc_resources_t r = res(64, 0, 0);
  CHECK(gc_res_amd_occupancy(cdna, &r, 256, 0) == 8);           /* 512 / 64 */
  r = res(128, 0, 0);
  CHECK(gc_res_amd_occupancy(cdna, &r, 256, 0) == 4);
  r = res(130, 0, 0);                                             /* granule 8: 136 */
  CHECK(gc_res_amd_occupancy(cdna, &r, 256, 0) == 3);
  r = res(256, 128, 0); /* .vgpr_count 256 = align(126,4) + 128 AGPRs already: 512 / 256 */
  CHECK(gc_res_amd_occupancy(cdna, &r, 256, 0) == 2);
  r = res(108, 32, 0);   /* 108 with its 32 AGPRs (clang-19's gemm_mfma, gfx942): granule 8, 112 */
  CHECK(gc_res_amd_occupancy(cdna, &r, 256, 0) == 4);
  r = res(64, 0, 32768);                                          /* 2 workgroups of 4 waves */
  CHECK(gc_res_amd_occupancy(cdna, &r, 256, 32768) == 2);
  r = res(66, 0, 40000);                                          /* one wave on one SIMD */
  CHECK(gc_res_amd_occupancy(cdna, &r, 64, 40000) == 1);
  r = res(256, 0, 0);                                             /* 16 waves need 4 per SIMD */
  CHECK(gc_res_amd_occupancy(cdna, &r, 1024, 0) == 0);
  r = res(96, -1, 0);                                             /* 1536 / 96 */
  CHECK(gc_res_amd_occupancy(rdna, &r, 256, 0) == 16);
  r = res(200, -1, 0);                                            /* granule 24: 216 */
  CHECK(gc_res_amd_occupancy(rdna, &r, 256, 0) == 7);
  r = res(-1, -1, 0);
  CHECK(gc_res_amd_occupancy(cdna, &r, 256, 0) == -1);
}

/* A template of one parameter THREADS with @shmem SHM, to check pruning. */
static void test_pruning(void) {
  static gc_template_t tpl;
  memset(&tpl, 0, sizeof tpl);
  snprintf(tpl.name, sizeof tpl.name, "probe");
  snprintf(tpl.backend, sizeof tpl.backend, "gpu");
  snprintf(tpl.grid, sizeof tpl.grid, "1");
  snprintf(tpl.block, sizeof tpl.block, "THREADS");
  snprintf(tpl.shmem, sizeof tpl.shmem, "SHM");
  tpl.nparams = 2;
  snprintf(tpl.params[0].name, sizeof tpl.params[0].name, "THREADS");
  snprintf(tpl.params[1].name, sizeof tpl.params[1].name, "SHM");
  gc_variant_t v;
  memset(&v, 0, sizeof v);
  v.tpl = &tpl;
  v.values[0] = 256;
  gc_problem_t p;
  memset(&p, 0, sizeof p);
  p.m = p.n = p.k = 1;
  gc_target_t amd, nv;
  gc_err_t e = {0};
  char why[300];
  int ok;
  CHECK(!gc_target_parse("gfx90a", &amd, &e) && !gc_target_parse("sm_80", &nv, &e));
  gc_resources_t r = res(64, 0, 1024);
  CHECK(gc_res_check(&v, &amd, &p, &r, &ok, why, sizeof why, &e) == 0 && ok && r.occupancy == 8);
  v.values[1] = 65536; /* 1 KiB static + 64 KiB dynamic */
  CHECK(gc_res_check(&v, &amd, &p, &r, &ok, why, sizeof why, &e) == 0 && !ok &&
        strstr(why, "resources: LDS"));
  v.values[1] = 0;
  r = res(520, 256, 0); /* over the 512 of the unified file */
  CHECK(gc_res_check(&v, &amd, &p, &r, &ok, why, sizeof why, &e) == 0 && !ok &&
        strstr(why, "VGPR+AGPR"));
  r = res(512, 256, 0); /* the AGPRs are inside .vgpr_count: it fits, one wave a SIMD */
  CHECK(gc_res_check(&v, &amd, &p, &r, &ok, why, sizeof why, &e) == 0 && ok && r.occupancy == 1);
  r = res(64, 0, 0);
  r.scratch_bytes = 16;
  CHECK(gc_res_check(&v, &amd, &p, &r, &ok, why, sizeof why, &e) == 0 && !ok &&
        strstr(why, "spills"));
  r = GC_RESOURCES_UNKNOWN; /* nothing known: nothing rejected */
  CHECK(gc_res_check(&v, &amd, &p, &r, &ok, why, sizeof why, &e) == 0 && ok);
  r = res(64, -1, 0);
  r.spills = 8;
  CHECK(gc_res_check(&v, &nv, &p, &r, &ok, why, sizeof why, &e) == 0 && !ok &&
        strstr(why, "spills"));
  r = res(64, -1, 200000);
  CHECK(gc_res_check(&v, &nv, &p, &r, &ok, why, sizeof why, &e) == 0 && !ok &&
        strstr(why, "shared memory"));
}

static const char *const KSRC =
    "#define __global__ __attribute__((global))\n"
    "extern \"C\" __global__ void axpy(float *y, const float *x, float a, long n) {\n"
    "  long i = __builtin_amdgcn_workgroup_id_x() * 256 + __builtin_amdgcn_workitem_id_x();\n"
    "  if (i < n) y[i] += a * x[i];\n"
    "}\n";

static void test_comgr(void) {
  gc_err_t e = {0};
  if (!gc_comgr_available(NULL, 0, &e)) {
    printf("skip comgr: %s\n", e.msg);
    return;
  }
  if (!gc_comgr_has_isa("gfx90a")) {
    printf("skip comgr compile: this comgr does not list gfx90a\n");
    return;
  }
  CHECK(!gc_comgr_has_isa("gfx9999"));
  void *obj = NULL;
  size_t n = 0;
  char log[4096];
  CHECK(gc_comgr_compile(KSRC, "gfx90a", 5, &obj, &n, log, sizeof log, &e) == GC_OK && n > 64);
  gc_amd_kernel_t k;
  CHECK(obj && gc_comgr_kernel_meta(obj, n, "axpy", &k, &e) == GC_OK);
  if (obj && !e.code) {
    CHECK(!strcmp(k.name, "axpy") && k.wave == 64 && k.vgprs > 0 && k.sgprs > 0 &&
          k.scratch == 0 && k.vgpr_spills == 0 && k.nargs == 4);
    CHECK(k.args[0].offset == 0 && k.args[0].size == 8 &&
          !strcmp(k.args[0].kind, "global_buffer") && k.args[2].offset == 16 &&
          k.args[2].size == 4 && !strcmp(k.args[2].kind, "by_value") && k.args[3].offset == 24);
  }
  gc_err_t me = {0};
  CHECK(obj && gc_comgr_kernel_meta(obj, n, "nope", &k, &me) == GC_ENOTFOUND);
  /* truncated or garbage code objects are errors, not crashes */
  for (size_t cut = 0; obj && cut < n; cut += n / 7 + 1) {
    gc_amd_kernel_t ks[4];
    int count;
    gc_comgr_kernels(obj, cut, ks, 4, &count, NULL);
    CHECK(count >= 0 && count <= 4);
  }
  char junk[256];
  memset(junk, 0x41, sizeof junk);
  memcpy(junk, "\177ELF", 4);
  int count;
  gc_amd_kernel_t ks[2];
  CHECK(gc_comgr_kernels(junk, sizeof junk, ks, 2, &count, &me) != GC_OK);
  free(obj);
  /* compile errors come back as one line */
  obj = NULL;
  gc_err_t ce = {0};
  CHECK(gc_comgr_compile("extern \"C\" __attribute__((global)) void f() { undeclared(); }",
                         "gfx90a", 5, &obj, &n, log, sizeof log, &ce) == GC_ECOMPILE &&
        strstr(ce.msg, "undeclared") && !obj);
  CHECK(gc_comgr_compile(KSRC, "gfx1100", 5, &obj, &n, NULL, 0, &ce) == GC_EUNSUPPORTED ||
        gc_comgr_has_isa("gfx1100"));
  free(obj);
}

/* AMD figures survive a round trip through tune.db (migration 004). */
static void test_tunedb(void) {
  char path[] = "/tmp/gcore_test_amd_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  close(fd);
  unlink(path);
  gc_db_t *db = NULL;
  gc_err_t e = {0};
  int64_t cid = 0, vid = 0;
  gc_db_variant_t v = {"vid1", "gemm_mfma", "h", "BM=64", "f16:f16:f16", "gfx942", 0};
  CHECK(gc_db_open(path, 1, &db, &e) == GC_OK && gc_db_schema_version(db) >= 4);
  CHECK(db && !gc_db_compiler_id(db, "clang", "clang 19", "-O3", &cid, &e));
  v.compiler_id = cid;
  CHECK(db && !gc_db_variant_id(db, &v, &vid, &e));
  gc_resources_t r = {4096, 128, 0, 16384, 0, 64, 40, 64, 3};
  CHECK(db && !gc_db_set_resources(db, vid, &r, &e));
  gc_db_close(db);
  sqlite3 *sq = NULL;
  sqlite3_stmt *st = NULL;
  CHECK(sqlite3_open(path, &sq) == SQLITE_OK &&
        sqlite3_prepare_v2(sq, "SELECT regs, agprs, sgprs, wave, occupancy, shared_bytes FROM "
                           "variants WHERE vid='vid1'", -1, &st, NULL) == SQLITE_OK);
  CHECK(st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int64(st, 0) == 128 &&
        sqlite3_column_int64(st, 1) == 64 && sqlite3_column_int64(st, 2) == 40 &&
        sqlite3_column_int64(st, 3) == 64 && sqlite3_column_int64(st, 4) == 3 &&
        sqlite3_column_int64(st, 5) == 16384);
  sqlite3_finalize(st);
  sqlite3_close(sq);
  char side[64];
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
  unlink(path);
}

int main(void) {
  test_tunedb();
  test_targets();
  test_occupancy();
  test_pruning();
  test_comgr();
  return check_report();
}
