/* test_llama.c — a model on the CPU backend swapping bundles
 * (gc_llama_set_bundle, what gcore-tune's step check times with): a
 * bundle of the same kernels is taken and the model's outputs stay those
 * of a model made with it; a bundle with another dense plan (GC_EINVAL),
 * one lacking the model's kernels (by name) and a model of two ranks
 * (GC_EUNSUPPORTED) are refused, and after each refusal the model runs as
 * before, bit for bit, with the bundle it had (what a GPU bundle decides
 * besides, the device argmax and the short attention bucket, the CPU's
 * bundles leave off: restoring those is not seen here). The model is a llama2.c
 * file of random weights written here (64 wide, 2 layers, 4 heads over 2
 * KV heads, 96 tokens); its bundles are built into a fresh cache. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../gen/autobundle.h"
#include "../../models/llama.h"
#include "../../models/recipe.h"

#include "check.h"

enum { DIM = 64, HID = 128, LAYERS = 2, HEADS = 4, KV = 2, VOCAB = 96, SEQ = 64, CTX = 32, MAXT = 16 };

static char g_tmp[256];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

/* A tied llama2.c checkpoint of uniform weights in [-0.1, 0.1) from a
 * fixed LCG: the header, then every array in the file's order. */
static int write_model(const char *path) {
  const int hd = DIM / HEADS;
  const size_t n = (size_t)VOCAB * DIM + LAYERS * ((size_t)2 * DIM + 2 * DIM * DIM + 2 * DIM * KV * hd +
                                                   3 * (size_t)HID * DIM) +
                   DIM + (size_t)SEQ * hd;
  const int hdr[7] = {DIM, HID, LAYERS, HEADS, KV, VOCAB, SEQ};
  float *x = malloc(n * sizeof *x);
  FILE *f = fopen(path, "wb");
  uint64_t s = 0x9e3779b97f4a7c15u;
  for (size_t i = 0; x && i < n; i++) {
    s = s * 6364136223846793005u + 1442695040888963407u;
    x[i] = (float)((s >> 40) / 16777216.0 - 0.5) * 0.2f;
  }
  int ok = x && f && fwrite(hdr, sizeof hdr, 1, f) == 1 && fwrite(x, sizeof *x, n, f) == n;
  if (f) ok &= !fclose(f);
  free(x);
  return ok ? 0 : -1;
}

/* The CPU bundle of model (quantized to quantize, or not: NULL) for tp
 * ranks, its dense plan from row `force` on (-1: chosen, 0 on the CPU),
 * built from template defaults into <tmp>/cache; its path in out. */
static int build_bundle(const char *model, const char *quantize, int tp, int64_t force, char *out, size_t n) {
  gc_problems_t probs = {0};
  gc_needs_t needs = {0};
  gc_llama_plan_t plan = {.force = force};
  gc_auto_result_t r;
  gc_err_t e = {0};
  char cache[300], db[300];
  snprintf(cache, sizeof cache, "%s/cache", g_tmp);
  snprintf(db, sizeof db, "%s/none.db", g_tmp); /* absent: defaults only */
  int rc = gc_llama_workload(model, quantize, NULL, NULL, tp, "cpu", &probs, &needs, &plan, &e);
  if (!rc) rc = gc_gen_auto(db, "cpu", cache, &probs, &needs, plan.meta, &r, &e);
  gc_problems_free(&probs);
  gc_needs_free(&needs);
  if (rc) return printf("bundle of %s (%s, tp %d): %s\n", model, quantize ? quantize : "f32", tp, e.msg), rc;
  snprintf(out, n, "%s", r.path);
  return 0;
}

/* The model's logits after each of three passes: a prefill of 5 tokens
 * (last row), one decode step, then a prefill of 12 (the unfused path). */
typedef struct outs {
  float l[3][VOCAB];
} outs_t;

static int run_passes(gc_llama_t *m, outs_t *o, gc_err_t *e) {
  static const int32_t a[5] = {1, 17, 40, 3, 95}, b[1] = {58}, c[12] = {2, 9, 77, 31, 31, 64, 0, 12, 88, 45, 6, 20};
  gc_llama_reset(m);
  int rc = gc_llama_forward(m, a, 5, 0, o->l[0], e);
  if (!rc) rc = gc_llama_forward(m, b, 1, 0, o->l[1], e);
  if (!rc) rc = gc_llama_forward(m, c, 12, 0, o->l[2], e);
  return rc;
}

static char g_model[300], g_q8[GC_AUTO_PATH], g_q8_dense[GC_AUTO_PATH], g_f32[GC_AUTO_PATH], g_f32_tp2[GC_AUTO_PATH];

static void test_set_bundle(void) {
  gc_err_t e = {0};
  gc_dev_t *dev = NULL;
  gc_llama_weights_t *w = NULL;
  gc_rt_t *ref_rt = NULL, *rt = NULL, *same = NULL, *dense = NULL, *f32 = NULL;
  gc_llama_t *ref = NULL, *m = NULL;
  outs_t want, got;
  CHECK(gc_dev_open("cpu", 0, &dev, &e) == GC_OK, "%s", e.msg);
  CHECK(gc_weights_open(g_model, &w, &e) == GC_OK && gc_weights_quantize(w, "q8_0", &e) == GC_OK, "%s", e.msg);
  CHECK(gc_rt_open(dev, g_q8, &ref_rt, &e) == GC_OK && gc_rt_open(dev, g_q8, &rt, &e) == GC_OK &&
            gc_rt_open(dev, g_q8, &same, &e) == GC_OK && gc_rt_open(dev, g_q8_dense, &dense, &e) == GC_OK &&
            gc_rt_open(dev, g_f32, &f32, &e) == GC_OK,
        "%s", e.msg);
  CHECK(gc_llama_create(dev, ref_rt, w, CTX, MAXT, &ref, &e) == GC_OK, "%s", e.msg);
  CHECK(gc_llama_create(dev, rt, w, CTX, MAXT, &m, &e) == GC_OK, "%s", e.msg);
  if (!ref || !m) goto out;
  CHECK(run_passes(ref, &want, &e) == GC_OK, "%s", e.msg);
  memset(&got, 0xff, sizeof got);
  CHECK(run_passes(m, &got, &e) == GC_OK && !memcmp(&got, &want, sizeof got), "two models of one bundle differ");

  /* refused: another dense plan; a bundle for the unquantized model */
  CHECK(gc_llama_set_bundle(m, dense, &e) == GC_EINVAL, "%s", gc_err_name(e.code));
  CHECK_MSG(e, "the bundle's dense plan starts at 16 rows, the model's at 0");
  e = (gc_err_t){0};
  CHECK(gc_llama_set_bundle(m, f32, &e) != GC_OK && strstr(e.msg, "q8_0"), "refused by name: %s", e.msg);
  memset(&got, 0xff, sizeof got);
  CHECK(run_passes(m, &got, &e) == GC_OK && !memcmp(&got, &want, sizeof got), "a refusal changed the model");

  /* taken: the model no longer touches the bundle it had (closed here;
   * ASan sees a use) and computes as before */
  CHECK(gc_llama_set_bundle(m, same, &e) == GC_OK, "%s", e.msg);
  gc_rt_close(rt), rt = NULL;
  memset(&got, 0xff, sizeof got);
  CHECK(run_passes(m, &got, &e) == GC_OK && !memcmp(&got, &want, sizeof got), "the same kernels differ");
out:
  gc_llama_free(m);
  gc_llama_free(ref);
  gc_rt_close(ref_rt), gc_rt_close(rt), gc_rt_close(same), gc_rt_close(dense), gc_rt_close(f32);
  gc_weights_close(w);
  gc_dev_close(dev);
}

static void test_set_bundle_tp(void) {
  gc_err_t e = {0};
  gc_dev_t *devs[2] = {0};
  gc_rt_t *rts[2] = {0};
  gc_llama_weights_t *w = NULL;
  gc_llama_t *m = NULL;
  float l[VOCAB];
  const int32_t tok[3] = {5, 6, 7};
  for (int r = 0; r < 2; r++)
    CHECK(gc_dev_open("cpu", 0, &devs[r], &e) == GC_OK && gc_rt_open(devs[r], g_f32_tp2, &rts[r], &e) == GC_OK,
          "%s", e.msg);
  CHECK(gc_weights_open(g_model, &w, &e) == GC_OK, "%s", e.msg);
  CHECK(gc_llama_create_tp(devs, rts, w, CTX, MAXT, 0, 2, &m, &e) == GC_OK, "%s", e.msg);
  if (m) {
    CHECK(gc_llama_set_bundle(m, rts[0], &e) == GC_EUNSUPPORTED);
    CHECK_MSG(e, "a model of 2 ranks keeps its bundles");
    CHECK(gc_llama_forward(m, tok, 3, 0, l, &e) == GC_OK, "%s", e.msg);
  }
  gc_llama_free(m);
  for (int r = 0; r < 2; r++) gc_rt_close(rts[r]), gc_dev_close(devs[r]);
  gc_weights_close(w);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  snprintf(g_tmp, sizeof g_tmp, "%s/gc_test_llama.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_tmp)) {
    CHECK(0, "harness: mkdtemp %s", g_tmp);
    return check_report();
  }
  snprintf(g_model, sizeof g_model, "%s/random.bin", g_tmp);
  if (write_model(g_model) || build_bundle(g_model, "q8_0", 1, -1, g_q8, sizeof g_q8) ||
      build_bundle(g_model, "q8_0", 1, 16, g_q8_dense, sizeof g_q8_dense) ||
      build_bundle(g_model, NULL, 1, -1, g_f32, sizeof g_f32) ||
      build_bundle(g_model, NULL, 2, -1, g_f32_tp2, sizeof g_f32_tp2)) {
    CHECK(0, "harness: the model and its bundles (above)");
  } else {
    check_case("set_bundle", test_set_bundle);
    check_case("set_bundle_tp", test_set_bundle_tp);
  }
  nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return check_report();
}
