/* test_base.c — unit tests of the bottom layers: the expression language,
 * half-precision conversions, problem keys, template parsing (tensor-map
 * declarations too, and what the runtime makes of them before a device
 * is involved), chain timing's rotation of copies and the verification's
 * guards (on the cpu device), and allocation-failure injection through the
 * loaders. */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../base/expr.h"
#include "../../core/problem.h"
#include "../../gen/template.h"
#include "../../runtime/check.h"
#include "../../core/ops.h"
#include "../../core/refdot.h"
#include "../../runtime/tmap.h"

#include "check.h"

static int64_t ev(const char *s, int *rc) {
  gc_env_t env = {0};
  gc_env_set(&env, "M", 17, NULL);
  gc_env_set(&env, "MC", 8, NULL);
  int64_t v = -999;
  gc_err_t e;
  *rc = gc_expr_eval(s, &env, &v, &e);
  return v;
}

static void test_expr(void) {
  int rc;
  CHECK(ev("1 + 2 * 3", &rc) == 7 && !rc);
  CHECK(ev("(1 + 2) * 3", &rc) == 9 && !rc);
  CHECK(ev("cdiv(M, MC)", &rc) == 3 && !rc);
  CHECK(ev("min(M, MC) + max(1, 2)", &rc) == 10 && !rc);
  CHECK(ev("M % MC == 1 && !(M < 3) || 0", &rc) == 1 && !rc);
  CHECK(ev("M <= 17", &rc) == 1 && ev("M >= 18", &rc) == 0);
  CHECK(ev("-M / 2", &rc) == -8);
  ev("1 / 0", &rc);
  CHECK(rc == GC_EINVAL);
  ev("9223372036854775807 + 1", &rc);
  CHECK(rc == GC_EINVAL);
  ev("Q + 1", &rc);
  CHECK(rc == GC_EINVAL);
  ev("(1 + 2", &rc);
  CHECK(rc == GC_EINVAL);
  ev("1 2", &rc);
  CHECK(rc == GC_EINVAL);
  char deep[400];
  memset(deep, '(', 200);
  deep[200] = '1';
  memset(deep + 201, ')', 198);
  deep[399] = 0;
  ev(deep, &rc);
  CHECK(rc == GC_EINVAL); /* nesting limit, not a stack overflow */

  gc_env_t env = {0};
  gc_err_t e;
  int64_t g[3];
  gc_env_set(&env, "M", 10, NULL);
  CHECK(!gc_expr_eval3("cdiv(M, 4) * 2  3", &env, g, &e) && g[0] == 6 && g[1] == 3 && g[2] == 1);
  CHECK(!gc_expr_eval3("M; M + 1; 2", &env, g, &e) && g[0] == 10 && g[1] == 11 && g[2] == 2);
  CHECK(!gc_expr_eval3("(M) (1)", &env, g, &e) && g[0] == 10 && g[1] == 1);
  CHECK(gc_expr_eval3("1 2 3 4", &env, g, &e) == GC_EINVAL);
  gc_env_t p = {0};
  CHECK(!gc_env_parse(&p, "A=1,B=-2", &e) && p.n == 2 && p.value[1] == -2);
  CHECK(gc_env_parse(&p, "A=,B=2", &e) == GC_EINVAL);
  CHECK(gc_env_parse(&p, "=3", &e) == GC_EINVAL);
}

static void test_half(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = gc_f16_to_f32((uint16_t)h);
    if (isnan(f)) continue;
    if (gc_f32_to_f16(f) != h) bad++;
  }
  CHECK(bad == 0);
  CHECK(gc_f32_to_f16(1.0f) == 0x3c00);
  CHECK(gc_f32_to_f16(65520.0f) == 0x7c00);            /* rounds to inf */
  CHECK(gc_f32_to_f16(65504.0f) == 0x7bff);
  CHECK(gc_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);     /* tie to even */
  CHECK(gc_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02); /* tie to even, up */
  CHECK(gc_f32_to_f16(0x1p-24f) == 0x0001);            /* smallest subnormal */
  CHECK(gc_f32_to_f16(0x1p-25f) == 0x0000);            /* tie to even (zero) */
  CHECK(isnan(gc_f16_to_f32(gc_f32_to_f16(NAN))));
  CHECK(gc_f32_to_bf16(1.0f) == 0x3f80);
  CHECK(gc_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);     /* tie to even */
  CHECK(gc_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(isnan(gc_bf16_to_f32(gc_f32_to_bf16(NAN))));
  CHECK(gc_bf16_to_f32(0x4049) == 3.140625f);
}

static void test_problem(void) {
  gc_problems_t l = {0};
  gc_err_t e;
  const char *d1[GC_NDIMS] = {"1,16", "64", "32"}, *d2[GC_NDIMS] = {"1", "1", "1"},
             *d3[GC_NDIMS] = {"1", "8", "2"}, *d4[GC_NDIMS] = {"2", 0, 0, "8", "3", "16"};
  CHECK(!gc_problems_expand(&l, "gemm", "f32:f16:f32", d1, &e) && l.n == 2);
  char key[GC_PROBLEM_KEY];
  gc_problem_key(&l.v[1], key);
  CHECK(!strcmp(key, "gemm f32:f16:f32 m=16 n=64 k=32"));
  CHECK(gc_problems_expand(&l, "gemm", "f16:f16", d2, &e) == GC_EINVAL);
  CHECK(gc_problems_expand(&l, "rmsnorm", "f32", d3, &e) == GC_EINVAL); /* no k */
  CHECK(gc_problems_expand(&l, "attention", "f32", d4, &e) == GC_EINVAL); /* 8 % 3 */
  d4[4] = "2";
  CHECK(!gc_problems_expand(&l, "attention", "f32", d4, &e) && l.n == 3);
  gc_problem_key(&l.v[2], key);
  CHECK(!strcmp(key, "attention f32:f32:f32 m=2 h=8 g=2 d=16"));
  /* k, optional for attention: a decode's context bucket (at most k keys) */
  const char *d5[GC_NDIMS] = {"1", 0, "0,1024,2048", "8", "2", "16"};
  CHECK(!gc_problems_expand(&l, "attention", "f32", d5, &e) && l.n == 6);
  gc_problem_key(&l.v[3], key);
  CHECK(!strcmp(key, "attention f32:f32:f32 m=1 h=8 g=2 d=16"));
  gc_problem_key(&l.v[4], key);
  CHECK(!strcmp(key, "attention f32:f32:f32 m=1 k=1024 h=8 g=2 d=16"));
  d5[0] = "2";
  CHECK(gc_problems_expand(&l, "attention", "f32", d5, &e) == GC_EINVAL && strstr(e.msg, "for a decode, m=1"));
  const char *d6[GC_NDIMS] = {"1", 0, "4", "8", "2", "16"};
  CHECK(gc_problems_expand(&l, "rope_kv", "f32", d6, &e) == GC_EINVAL && strstr(e.msg, "no k dimension"));
  /* its tune points: any length's (long ones), those inside the bucket and its last */
  static const int64_t want[3][4] = {{1023, 5, 2047, 4095}, {1023, 5, 127, -1}, {1023, 5, 127, 2047}};
  for (int i = 0; i < 3; i++) {
    gc_op_scalars_t sc[GC_OP_MAX_POINTS];
    int n = gc_op_tune_points(&l.v[3 + i], sc);
    CHECK(n == (want[i][3] < 0 ? 3 : 4));
    for (int j = 0; j < n; j++) CHECK(sc[j].pos0 == want[i][j]);
  }
  gc_problem_t small = l.v[4];
  small.k = 100;
  gc_op_scalars_t sc[GC_OP_MAX_POINTS];
  CHECK(gc_op_tune_points(&small, sc) == 2 && sc[0].pos0 == 99 && sc[1].pos0 == 5);
  gc_problems_free(&l);
}

static void test_template_parse(void) {
  const char *src =
      "/* t\n * @template t1\n * @op gemm\n * @backend cpu\n * @dtypes f32 f32:f16:f32\n"
      " * @kernel k\n * @param A 1 2 4 default 2 -- doc\n * @param B 8 16 default 16\n"
      " * @constraint A * B <= 32 -- fits\n * @applies M <= 8\n * @grid cdiv(M, A) 1\n"
      " * @block B\n * @priority 3\n * @priority 7 if M > 4 && A == 2\n */\nint x;\n";
  gc_template_t t;
  gc_err_t e;
  CHECK(!gc_tpl_parse("t.c", src, strlen(src), &t, &e));
  CHECK(t.nparams == 2 && t.params[0].nvalues == 3 && t.params[0].def == 2);
  CHECK(t.ndtypes == 2 && t.dtypes[1][1] == GC_DT_F16 && t.priority == 3);
  CHECK(gc_tpl_space_size(&t) == 6);
  gc_problem_t p = {"gemm", GC_DT_F32, GC_DT_F32, GC_DT_F32, 5, 3, 3, 0, 0, 0};
  gc_target_t tg;
  CHECK(!gc_target_parse("cpu:x86-64-v3", &tg, &e));
  { /* the conditional @priority: where its expression holds at the default variant */
    gc_variant_t dv;
    gc_tpl_default(&t, &tg, &p, &dv);
    CHECK(gc_tpl_priority(&t, &tg, &p, &dv) == 7);
    gc_problem_t p2 = p;
    p2.m = 4;
    gc_tpl_default(&t, &tg, &p2, &dv);
    CHECK(gc_tpl_priority(&t, &tg, &p2, &dv) == 3);
  }
  int ok = 0, valid = 0;
  gc_variant_t v;
  for (int64_t i = 0; i < 6; i++) {
    const char *why;
    gc_tpl_nth(&t, &p, i, &v);
    if (!gc_tpl_valid(&v, &tg, &ok, &why, &e) && ok) valid++;
  }
  CHECK(valid == 5); /* A*B <= 32: (1,8)(1,16)(2,8)(2,16)(4,8) */
  gc_tpl_default(&t, NULL, &p, &v);
  CHECK(!strcmp(v.params, "A=2,B=16"));
  int64_t grid[3], block[3];
  CHECK(!gc_tpl_launch(&v, &tg, &p, grid, block, &e) && grid[0] == 3 && block[0] == 16);
  CHECK(!gc_tpl_applies(&v, &tg, &p, &ok, &e) && ok);
  p.m = 9;
  CHECK(!gc_tpl_applies(&v, &tg, &p, &ok, &e) && !ok);
  CHECK(gc_tpl_set_params(&t, "A=3", &v, &e) == GC_EINVAL);
  CHECK(gc_tpl_set_params(&t, "C=1", &v, &e) == GC_EINVAL);
  CHECK(!gc_tpl_set_params(&t, "A=4,B=8", &v, &e) && !strcmp(v.params, "A=4,B=8"));
  char vid1[GC_HASH_HEX], vid2[GC_HASH_HEX];
  gc_tpl_vid(&v, &tg, "cc 12", vid1);
  gc_tpl_vid(&v, &tg, "cc 13", vid2);
  CHECK(strcmp(vid1, vid2) != 0); /* the compiler is part of the id */
  CHECK(!t.prefetch && !t.pdl);
  gc_tpl_free(&t);

  /* @prefetch (no value, an optional doc), and one with a value refused */
  static const char *decl[] = {" * @prefetch\n", " * @prefetch -- the next weights\n", " * @prefetch 4\n"};
  for (int i = 0; i < 3; i++) {
    char src2[1024];
    snprintf(src2, sizeof src2, "/* t\n * @template t2\n * @op gemm\n * @backend cpu\n * @dtypes f32\n"
             " * @kernel k\n * @param A 1 default 1\n * @grid 1\n * @block 1\n%s */\nint x;\n", decl[i]);
    int rc = gc_tpl_parse("t.c", src2, strlen(src2), &t, &e);
    if (i < 2)
      CHECK(!rc && t.prefetch && !t.pdl);
    else
      CHECK(rc == GC_EINVAL && strstr(e.msg, "t.c:10: @prefetch takes no value (got '4')"));
    gc_tpl_free(&t); /* after a failed parse too */
  }
}

/* An L2 window's arguments (@prefetch): after the others, NULL-ended;
 * a bad window refused with one line. */
static void test_window_args(void) {
  gc_err_t e;
  int64_t v[3] = {1, 2, 3};
  void *a[4] = {&v[0], &v[1], &v[2], NULL}, **out = NULL;
  gc_window_args_t w;
  gc_tmaps_t none = {0};
  CHECK(gc_tmaps_nargs(&none, a) == 3); /* no maps: up to the NULL */
  CHECK(!gc_window_args(a, 3, 4096, 160, &w, &out, &e) && out == w.args);
  CHECK(out[0] == &v[0] && out[2] == &v[2] && *(gc_dptr_t *)out[3] == 4096 && *(int64_t *)out[4] == 160 &&
        out[5] == NULL);
  CHECK(!gc_window_args(a, 3, 0, 0, &w, &out, &e) && *(gc_dptr_t *)out[3] == 0 && *(int64_t *)out[4] == 0);
  static const struct { gc_dptr_t pf; int64_t n; } bad[] = {{4096, 100}, {4100, 160}, {0, 16}, {4096, -16}};
  for (size_t i = 0; i < GC_ARRAY_LEN(bad); i++) {
    CHECK(gc_window_args(a, 3, bad[i].pf, bad[i].n, &w, &out, &e) == GC_EINVAL &&
          strstr(e.msg, "a multiple of 16 bytes at a 16-byte aligned address"));
    CHECK(gc_window_check(bad[i].pf, bad[i].n, &e) == GC_EINVAL);
  }
  CHECK(gc_window_args(a, GC_TMAPS_ARGS + 1, 0, 0, &w, &out, &e) == GC_EINVAL && strstr(e.msg, "too many"));
}

/* @tensormap: parsing, evaluation under a shape, the tie to the op's
 * buffers, and the clear errors of bad declarations. */
static void test_tensormap(void) {
  const char *src =
      "/* t\n * @template t2\n * @op gemm gemm_add\n * @backend cuda\n * @dtypes f16\n"
      " * @kernel k\n * @param BM 64 128 default 128\n * @param TMA 0 1 default 1\n"
      " * @grid cdiv(M, BM) 1\n * @block 128\n"
      " * @tensormap A M K BM 64 128 if TMA -- A tiles\n * @tensormap B N K BM/2 64 128\n */\n";
  gc_template_t t;
  gc_err_t e;
  CHECK(!gc_tpl_parse("t.cu", src, strlen(src), &t, &e));
  CHECK(t.ntmaps == 2 && !strcmp(t.tmaps[0], "A M K BM 64 128 if TMA"));
  char text[GC_TMAPS_MAX * GC_TMAP_LINE];
  gc_tpl_tmaps_text(&t, text, sizeof text);
  CHECK(!strcmp(text, "A M K BM 64 128 if TMA\nB N K BM/2 64 128"));
  gc_tpl_free(&t);

  gc_env_t env = {0};
  gc_env_parse(&env, "BM=128,TMA=1,M=300,N=256,K=200", NULL);
  gc_tmap_spec_t sp[GC_TMAPS_MAX];
  int n = 0;
  CHECK(!gc_tmap_specs_eval(text, &env, sp, &n, &e) && n == 2);
  CHECK(!strcmp(sp[0].buf, "A") && sp[0].rows == 300 && sp[0].cols == 200 && sp[0].box_rows == 128);
  CHECK(!strcmp(sp[1].buf, "B") && sp[1].box_rows == 64 && sp[1].swizzle == 128);
  gc_env_set(&env, "TMA", 0, NULL); /* the "if TMA" map drops out */
  CHECK(!gc_tmap_specs_eval(text, &env, sp, &n, &e) && n == 1 && !strcmp(sp[0].buf, "B"));
  gc_env_set(&env, "TMA", 1, NULL);

  /* tied to gemm's buffers: A is argument 0, B argument 1, six op arguments */
  gc_problem_t p = {"gemm", GC_DT_F16, GC_DT_F16, GC_DT_F16, 300, 256, 200, 0, 0, 0};
  gc_tmaps_t tm;
  CHECK(!gc_tmaps_plan(text, &env, &p, &tm, &e) && tm.n == 2 && tm.nargs == 6);
  CHECK(tm.arg[0] == 0 && tm.arg[1] == 1 && tm.dtype[1] == GC_DT_F16);
  void *args[6] = {0}, **out = NULL;
  CHECK(!gc_tmaps_plan("", &env, &p, &tm, &e) && tm.n == 0);
  CHECK(!gc_tmaps_args(NULL, &tm, args, &out, &e) && out == args); /* no maps: args as given */

  static const struct { const char *text, *needle; } bad[] = {
      {"Q M K 64 64 128", "op gemm has no buffer 'Q' (it has A B C)"},
      {"A M K 512 64 128", "each side must be 1..256"},
      {"A M K 64 64 96", "swizzle 96: must be 0, 32, 64 or 128"},
      {"A M K 64 128 128", "box rows of 256 bytes exceed the 128-byte swizzle"},
      {"A M 2*K 64 64 128", "more than the buffer's"},
      {"A M K 64 4 0", "box rows of 8 bytes; must be a multiple of 16"},
      {"A M K 64", "five expressions after the buffer, got 3"},
      {"A M K 64 64 128 1", "more than five expressions"},
      {"9 M K 64 64 128", "expected a buffer name first"},
      {"A M K 64 64 Z", "unknown name 'Z'"},
      {"A M K 64 64 128 if Z", "unknown name 'Z'"},
  };
  for (size_t i = 0; i < GC_ARRAY_LEN(bad); i++) {
    int rc = gc_tmaps_plan(bad[i].text, &env, &p, &tm, &e);
    CHECK(rc == GC_EINVAL && strstr(e.msg, bad[i].needle) && !strchr(e.msg, '\n'));
    if (!rc || !strstr(e.msg, bad[i].needle)) printf("  %s -> %s\n", bad[i].text, rc ? e.msg : "ok");
  }
  p.k = 204; /* rows of 408 bytes: no tensor map */
  gc_env_set(&env, "K", 204, NULL);
  CHECK(gc_tmaps_plan("A M K 64 64 128", &env, &p, &tm, &e) == GC_EINVAL &&
        strstr(e.msg, "rows of 408 bytes"));

  /* a block format's map counts blocks (gemv_qmma's RL=3): whole rows of
     16-byte blocks fit, unswizzled; the GGUF layouts' 18-byte blocks do not */
  gc_problem_t q = {"gemm", GC_DT_F16, GC_DT_Q4_0R, GC_DT_F16, 1, 77, 512, 0, 0, 0};
  gc_env_set(&env, "N", 77, NULL);
  gc_env_set(&env, "K", 512, NULL);
  CHECK(!gc_tmaps_plan("B N K/256 32 4 0", &env, &q, &tm, &e) && tm.n == 1 && tm.dtype[0] == GC_DT_Q4_0R);
  CHECK(gc_tmaps_plan("B N K/128 32 4 0", &env, &q, &tm, &e) == GC_EINVAL && strstr(e.msg, "more than the buffer's"));
  CHECK(gc_tmaps_plan("B N K/256 32 1 128", &env, &q, &tm, &e) == GC_EINVAL && strstr(e.msg, "no swizzle"));
  q.tb = GC_DT_Q4_0;
  CHECK(gc_tmaps_plan("B N K/32 32 4 0", &env, &q, &tm, &e) == GC_EINVAL &&
        strstr(e.msg, "blocks of 18 bytes") && !strchr(e.msg, '\n'));

  /* the cpu device has no tensor maps: a clear refusal, not a launch */
  gc_dev_t *d = NULL;
  p.k = 200;
  gc_env_set(&env, "K", 200, NULL);
  gc_dptr_t a = 4096, b = 8192, c = 0;
  void *av[6] = {&a, &b, &c, &p.m, &p.n, &p.k};
  if (!gc_dev_open("cpu", 0, &d, &e)) {
    CHECK(!gc_tmaps_plan("A M K 64 64 128", &env, &p, &tm, &e));
    CHECK(gc_tmaps_args(d, &tm, av, &out, &e) == GC_EUNSUPPORTED && strstr(e.msg, "no tensor maps"));
    a = 4100; /* not 16-byte aligned */
    CHECK(gc_tmaps_args(d, &tm, av, &out, &e) == GC_EINVAL && strstr(e.msg, "not 16-byte aligned"));
    gc_dev_close(d);
  }

  /* a @tensormap outside a cuda template, and a malformed one, fail at load */
  const char *cpu_src = "/* t\n * @template t3\n * @op gemm\n * @backend cpu\n * @dtypes f32\n"
                        " * @kernel k\n * @grid 1\n * @tensormap A M K 8 4 0\n */\n";
  CHECK(gc_tpl_parse("t.c", cpu_src, strlen(cpu_src), &t, &e) == GC_EINVAL &&
        strstr(e.msg, "@tensormap needs @backend cuda"));
  gc_tpl_free(&t);
  const char *bad_src = "/* t\n * @template t4\n * @op gemm\n * @backend cuda\n * @dtypes f16\n"
                        " * @kernel k\n * @grid 1\n * @tensormap A M K BQ 64 128\n */\n";
  CHECK(gc_tpl_parse("t.cu", bad_src, strlen(bad_src), &t, &e) == GC_EINVAL &&
        strstr(e.msg, "t.cu") && strstr(e.msg, "unknown name 'BQ'"));
  gc_tpl_free(&t);

  int64_t v[8];
  CHECK(!gc_expr_evaln("1 2 min(3, 4) 4+1", &env, v, 8, &n, &e) && n == 4 && v[3] == 5);
}

/* Every allocation in the loaders may fail: each must report GC_ENOMEM,
 * never crash or leak into a half-built state. */
static void test_alloc_faults(void) {
  int nomem = 0, ok_after = 0;
  for (long n = 0; n < 400; n++) {
    gc_templates_t set;
    gc_err_t e = {0};
    gc_fault_alloc_after(n);
    int rc = gc_tpl_load_all(NULL, &set, &e);
    gc_fault_alloc_after(-1);
    if (rc == GC_ENOMEM) nomem++;
    else if (rc == GC_OK) {
      ok_after++;
      gc_tpl_free_all(&set);
      break;
    } else {
      CHECK(0, "fault at allocation %ld gave %s: %s", n, gc_err_name(rc), e.msg);
      return;
    }
  }
  CHECK(nomem > 0 && ok_after == 1);
}

/* gc_ref_dots against a plain fp64 loop: odd shapes (tails of the 2×2
 * tiles and of the 4-lane k loop), one thread and several, and a problem
 * large enough to take the threaded path. */
static void refdot_case(int64_t m, int64_t n, int64_t k, int threads) {
  double *x = malloc(sizeof *x * m * k), *w = malloc(sizeof *w * n * k);
  double *d = malloc(sizeof *d * m * n), *a = malloc(sizeof *a * m * n);
  uint64_t s = 12345;
  for (int64_t i = 0; i < m * k; i++) x[i] = (double)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 23) - 1;
  for (int64_t i = 0; i < n * k; i++) w[i] = (double)((s = s * 6364136223846793005ull + 1) >> 40) / (1 << 23) - 1;
  gc_ref_dots(x, w, m, n, k, d, a, threads);
  double worst = 0;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double sd = 0, sa = 0;
      for (int64_t l = 0; l < k; l++) sd += x[i * k + l] * w[j * k + l], sa += fabs(x[i * k + l] * w[j * k + l]);
      double err = fmax(fabs(sd - d[i * n + j]), fabs(sa - a[i * n + j])) / (sa > 0 ? sa : 1);
      if (err > worst) worst = err;
    }
  CHECK(worst < 1e-13);
  free(x), free(w), free(d), free(a);
}

static void test_refdot(void) {
  refdot_case(1, 1, 1, 1);
  refdot_case(3, 5, 7, 1);
  refdot_case(37, 29, 19, 3);
  refdot_case(67, 131, 515, 0); /* 4.5M products: threads */
  refdot_case(67, 131, 515, 5);
}

/* gc_op_check over many chunks (threads): the first failing element is
 * named, the worst ratio is the largest of all, a clean buffer passes. */
static void test_check_chunks(void) {
  int64_t n = 5 * (1 << 20) + 7;
  float *out = malloc(sizeof *out * n);
  double *ref = malloc(sizeof *ref * n), *tol = malloc(sizeof *tol * n);
  for (int64_t i = 0; i < n; i++) out[i] = (float)(ref[i] = (double)(i % 1000)), tol[i] = 0.5;
  gc_opbuf_t b = {.name = "C", .dtype = GC_DT_F32, .count = n, .cols = 1000};
  char why[200] = "";
  double worst;
  CHECK(gc_op_check(&b, out, ref, tol, &worst, why, sizeof why) == 1 && worst == 0);
  out[4500000] += 4.0f; /* ratio 8, later */
  out[3000001] += 1.0f; /* ratio 2, first */
  out[n - 1] = NAN;
  CHECK(gc_op_check(&b, out, ref, tol, &worst, why, sizeof why) == 0);
  CHECK(strstr(why, "element 3000001 (row 3000, col 1)") != NULL);
  CHECK(isinf(worst));
  out[n - 1] = (float)ref[n - 1];
  CHECK(gc_op_check(&b, out, ref, tol, &worst, why, sizeof why) == 0 && worst == 8.0);
  free(out), free(ref), free(tol);
}

/* A launch that only records the B address it was given. */
typedef struct seen_b {
  int n;
  gc_dptr_t b[64];
} seen_b_t;
static int record_b(void *ctx, void **args, gc_err_t *e) {
  (void)e;
  seen_b_t *s = ctx;
  if (s->n < 64) s->b[s->n] = *(gc_dptr_t *)args[1];
  s->n++;
  return GC_OK;
}

/* gc_time_opts_t.chain: each sample is `chain` launches over copies of the
 * largest input (B of a GEMV), as many copies as make the flush bytes, in
 * turn, never the original buffer; the verified launch keeps the original. */
static void test_chain_timing(void) {
  gc_err_t e = {0};
  gc_dev_t *dev = NULL;
  gc_check_t *c = NULL;
  gc_problem_t p = {"gemm", GC_DT_F32, GC_DT_F32, GC_DT_F32, 1, 64, 32, 0, 0, 0};
  CHECK(!gc_dev_open("cpu", 0, &dev, &e) && !gc_check_setup(dev, &p, NULL, 1, &c, &e));
  if (!c) return;
  seen_b_t s = {0};
  gc_verify_t v;
  gc_timing_t t;
  gc_time_opts_t o = {.min_iters = 2, .max_iters = 2, .chain = 4,
                      .flush = 3 * 64 * 32 * sizeof(float)}; /* three copies of B */
  /* the verification: two launches on the original, nothing written */
  CHECK(!gc_check_verify(c, record_b, &s, &v, &e) && !v.ok && s.n == 2 && s.b[1] == s.b[0]);
  gc_dptr_t orig = s.b[0];
  CHECK(!gc_check_time(c, record_b, &s, &o, &t, &e) && t.iters == 2 && s.n == 2 + 8);
  int distinct = 0, ok = 1;
  for (int i = 2; i < s.n; i++) {
    ok &= s.b[i] != orig && s.b[i] == s.b[2 + (i - 2) % 3]; /* copies 0, 1, 2, 0, ... */
    int fresh = 1;
    for (int j = 2; j < i; j++) fresh &= s.b[j] != s.b[i];
    distinct += fresh;
  }
  CHECK(ok && distinct == 3);
  if (!(ok && distinct == 3))
    for (int i = 0; i < s.n; i++) printf("  launch %d: B at %llx\n", i, (unsigned long long)s.b[i]);
  gc_check_free(c);
  gc_dev_close(dev);
}

/* A launch that computes C = A·Bᵀ (f32) on the host, then does one harm. */
enum { HARM_NONE, HARM_ONE_PAST, HARM_FAR_PAST, HARM_BEFORE, HARM_INTO_A, HARM_INTO_B };
static int host_gemm(void *ctx, void **args, gc_err_t *e) {
  (void)e;
  int harm = *(int *)ctx;
  float *A = (float *)(uintptr_t)*(gc_dptr_t *)args[0], *B = (float *)(uintptr_t)*(gc_dptr_t *)args[1];
  float *C = (float *)(uintptr_t)*(gc_dptr_t *)args[2];
  int64_t M = *(int64_t *)args[3], N = *(int64_t *)args[4], K = *(int64_t *)args[5];
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0;
      for (int64_t k = 0; k < K; k++) s += (double)A[i * K + k] * B[j * K + k];
      C[i * N + j] = (float)s;
    }
  if (harm == HARM_ONE_PAST) C[M * N] = 1;
  if (harm == HARM_FAR_PAST) ((volatile char *)C)[M * N * 4 + 65536] = 1;
  if (harm == HARM_BEFORE) C[-(1 << 18)] = 1;
  if (harm == HARM_INTO_A) A[3] += 1;
  if (harm == HARM_INTO_B) B[N * K - 1] = 0.5f;
  return GC_OK;
}

/* A launch that only records the A and C addresses it was given. */
static int record_a_c(void *ctx, void **args, gc_err_t *e) {
  (void)e;
  seen_b_t *s = ctx;
  s->b[0] = *(gc_dptr_t *)args[0];
  s->b[1] = *(gc_dptr_t *)args[2];
  s->n = 2;
  return GC_OK;
}

/* Without page protection (as on a GPU: GCORE_CPU_PROTECT=0), each harm
 * is found after the launch by the guard patterns or the input comparison,
 * reported, and undone, so that a clean launch verifies right after. */
static void test_check_guard_patterns(void) {
  static const struct {
    int harm;
    const char *why;
  } cases[] = {
      {HARM_ONE_PAST, "wrote past the end of C (changed byte at end + 0)"},
      {HARM_FAR_PAST, "wrote past the end of C (changed byte at end + 65536)"},
      {HARM_BEFORE, "wrote before the start of C (changed byte at start - 1048576)"},
      {HARM_INTO_A, "wrote into input A (element 3: row 0, col 3)"},
      {HARM_INTO_B, "wrote into input B (element 1023: row 31, col 31)"},
  };
  gc_err_t e = {0};
  gc_dev_t *dev = NULL;
  gc_check_t *c = NULL;
  gc_problem_t p = {"gemm", GC_DT_F32, GC_DT_F32, GC_DT_F32, 3, 32, 32, 0, 0, 0}; /* C: 384 bytes */
  setenv("GCORE_CPU_PROTECT", "0", 1);
  CHECK(!gc_dev_open("cpu", 0, &dev, &e) && !gc_check_setup(dev, &p, NULL, 1, &c, &e));
  unsetenv("GCORE_CPU_PROTECT");
  if (!c) return;
  gc_verify_t v;
  int none = HARM_NONE;
  CHECK(!gc_check_verify(c, host_gemm, &none, &v, &e) && v.ok);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int h = cases[i].harm;
    CHECK(!gc_check_verify(c, host_gemm, &h, &v, &e) && !v.ok);
    CHECK(!strcmp(v.why, cases[i].why));
    if (strcmp(v.why, cases[i].why)) printf("  harm %d: %s\n", h, v.why);
    CHECK(!gc_check_verify(c, host_gemm, &none, &v, &e) && v.ok); /* put back */
  }
  gc_check_free(c);
  gc_dev_close(dev);
}

/* 1 when a child process that does harm h to c's buffers is stopped by a
 * fault before it ends normally. */
static int faults(gc_check_t *c, int h) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY); /* a sanitizer's report of the fault */
    if (null >= 0) dup2(null, 2);
    gc_verify_t v;
    gc_err_t e;
    gc_check_verify(c, host_gemm, &h, &v, &e);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* With page protection (the CPU's default) the harms fault in the launch,
 * and gc_check_locate names the place of a fault address. */
static void test_check_protection(void) {
  gc_err_t e = {0};
  gc_dev_t *dev = NULL;
  gc_check_t *c = NULL;
  gc_problem_t p = {"gemm", GC_DT_F32, GC_DT_F32, GC_DT_F32, 4, 32, 32, 0, 0, 0}; /* C: 512 bytes */
  CHECK(!gc_dev_open("cpu", 0, &dev, &e) && !gc_check_setup(dev, &p, NULL, 1, &c, &e));
  if (!c) return;
  gc_verify_t v;
  int none = HARM_NONE;
  CHECK(!gc_check_verify(c, host_gemm, &none, &v, &e) && v.ok);
  CHECK(!faults(c, HARM_NONE));
  for (int h = HARM_ONE_PAST; h <= HARM_INTO_B; h++) CHECK(faults(c, h));
  seen_b_t addr = {0}; /* A and C, as a launch sees them */
  CHECK(!gc_check_verify(c, record_a_c, &addr, &v, &e) && !v.ok && addr.n == 2);
  gc_dptr_t a = addr.b[0], cc = addr.b[1];
  char where[256];
  CHECK(gc_check_locate(c, cc + 512 + 65536, where, sizeof where) &&
        !strcmp(where, "past the end of C (at end + 65536)"));
  CHECK(gc_check_locate(c, cc - 8, where, sizeof where) &&
        !strcmp(where, "before the start of C (at start - 8)"));
  CHECK(gc_check_locate(c, a + 4 * 33, where, sizeof where) &&
        !strcmp(where, "into input A (element 33: row 1, col 1)"));
  CHECK(gc_check_locate(c, a + 4 * 128 + 4, where, sizeof where) &&
        !strcmp(where, "past the end of input A (at end + 4)"));
  CHECK(!gc_check_locate(c, 16, where, sizeof where) && !where[0]);
  gc_check_free(c);
  /* C of 3x5 floats (60 bytes) ends 4 bytes before the inaccessible page:
   * one element past it is found by the pattern of that slack */
  p.m = 3, p.n = 5;
  CHECK(!gc_check_setup(dev, &p, NULL, 1, &c, &e));
  int one_past = HARM_ONE_PAST;
  CHECK(c && !gc_check_verify(c, host_gemm, &one_past, &v, &e) && !v.ok &&
        !strcmp(v.why, "wrote past the end of C (changed byte at end + 0)"));
  CHECK(c && !gc_check_verify(c, host_gemm, &none, &v, &e) && v.ok);
  CHECK(c && faults(c, HARM_FAR_PAST));
  gc_check_free(c);
  gc_dev_close(dev);
}

/* gc_to_f32: every fp16 and bf16 value as the scalar conversion gives it
 * (F16C's path on a host that has it), converted in place from a staged
 * copy in the tail of the output as download_logits does, at lengths
 * that end mid-vector. */
static void test_to_f32(void) {
  enum { N = 65536 + 13 };
  static float out[N];
  for (int bf = 0; bf < 2; bf++)
    for (size_t n = N; n >= 5; n = n * 2 / 3) {
      uint16_t *stage = (uint16_t *)(void *)((char *)out + n * 2);
      for (size_t i = 0; i < n; i++) stage[i] = (uint16_t)(i * 40503u);
      gc_to_f32(stage, bf ? GC_DT_BF16 : GC_DT_F16, out, n);
      int bad = 0;
      for (size_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)(i * 40503u);
        float want = bf ? gc_bf16_to_f32(h) : gc_f16_to_f32(h);
        bad += isnan(want) ? !isnan(out[i]) : out[i] != want;
      }
      CHECK(bad == 0, "%s, %zu elements in place: %d differ", bf ? "bf16" : "f16", n, bad);
    }
}

int main(void) {
  test_to_f32();
  test_check_guard_patterns();
  test_check_protection();
  test_chain_timing();
  test_refdot();
  test_check_chunks();
  test_expr();
  test_half();
  test_problem();
  test_template_parse();
  test_tensormap();
  test_window_args();
  test_alloc_faults();
  return check_report();
}
