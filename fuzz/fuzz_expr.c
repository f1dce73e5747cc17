/* fuzz_expr.c — the expression language (base/expr.h) that templates and
 * bundles carry: the input's first line as constants ("A=1,B=2", as a
 * bundle stores them), the rest as an expression, evaluated as one, as a
 * launch grid (three parts), as up to eight parts, and as tensor-map
 * declarations (core/tmapspec.h). */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../core/tmapspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fz_cstr(data, size);
  char *nl = strchr(text, '\n');
  const char *x = nl ? nl + 1 : text;
  if (nl) *nl = 0;
  gc_err_t e;
  gc_env_t env = {0};
  gc_env_set(&env, "M", 16, NULL);
  gc_env_set(&env, "N", 64, NULL);
  gc_env_set(&env, "K", 64, NULL);
  if (nl) (void)gc_env_parse(&env, text, &e);
  int64_t v, v3[3], vn[GC_EXPR_PARTS];
  int n;
  gc_tmap_spec_t maps[GC_TMAPS_MAX];
  fz_report("expression", gc_expr_eval(x, &env, &v, &e), &e);
  (void)gc_expr_eval3(x, &env, v3, &e);
  (void)gc_expr_evaln(x, &env, vn, GC_EXPR_PARTS, &n, &e);
  (void)gc_tmap_spec_check(x, &env, &e);
  fz_report("tensor maps", gc_tmap_specs_eval(x, &env, maps, &n, &e), &e);
  free(text);
  return 0;
}
