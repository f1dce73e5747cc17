/* fuzz_tokenizer_json.c — a tokenizer directory built from one input:
 * tokenizer.json, then (after each FZ_SEP line) tokenizer_config.json and
 * generation_config.json; absent parts are absent files. Loaded as
 * gcore-run --tokenizer DIR loads it and used (fz_tok_use). */
#include "fuzz.h"
#include "../models/tokenizer.h"

static const char *const fz_files[3] = {"tokenizer.json", "tokenizer_config.json",
                                        "generation_config.json"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *part[3];
  size_t len[3];
  int n = fz_split(data, size, part, len, 3);
  char path[FZ_PATH];
  for (int i = 0; i < 3; i++) {
    if (i < n)
      fz_write(fz_files[i], part[i], len[i], path);
    else
      fz_remove(fz_files[i]);
  }
  gc_err_t e;
  gc_tok_t *t;
  if (fz_report("tokenizer", gc_tok_load(fz_dir(), &t, &e), &e) == GC_OK) {
    fz_tok_use(t);
    gc_tok_free(t);
  }
  return 0;
}
