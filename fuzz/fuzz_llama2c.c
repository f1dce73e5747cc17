/* fuzz_llama2c.c — the input as a legacy llama2.c checkpoint, read as
 * gcore-run and gcore-tune --model read a model file (fz_model_use). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[FZ_PATH];
  fz_write("model.bin", data, size, path);
  fz_model_use(path);
  return 0;
}
