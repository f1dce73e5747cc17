/* fuzz_gguf_model.c — the input as a GGUF model file, read as gcore-run and
 * gcore-tune --model read one (fz_model_use: the config from the metadata,
 * every tensor checked and read, the tuning workload derived). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[FZ_PATH];
  fz_write("model.gguf", data, size, path);
  fz_model_use(path);
  return 0;
}
