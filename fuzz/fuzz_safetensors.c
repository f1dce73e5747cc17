/* fuzz_safetensors.c — a Hugging Face model directory built from one
 * input: config.json, then (after each FZ_SEP line) model.safetensors,
 * model.safetensors.index.json and a second shard, model-2.safetensors;
 * absent parts are absent files. Read as gcore-run and gcore-tune --model
 * read a model directory (fz_model_use). */
#include "fuzz.h"

static const char *const fz_files[4] = {"config.json", "model.safetensors",
                                        "model.safetensors.index.json", "model-2.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *part[4];
  size_t len[4];
  int n = fz_split(data, size, part, len, 4);
  char path[FZ_PATH];
  for (int i = 0; i < 4; i++) {
    if (i < n)
      fz_write(fz_files[i], part[i], len[i], path);
    else
      fz_remove(fz_files[i]);
  }
  fz_model_use(fz_dir());
  return 0;
}
