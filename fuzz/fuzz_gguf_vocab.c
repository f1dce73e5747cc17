/* fuzz_gguf_vocab.c — the input as a .gguf vocabulary: loaded as
 * gcore-run --tokenizer FILE.gguf loads it and used (fz_tok_use); then the
 * metadata reader itself (models/gguf.h): the keys the vocabulary loader
 * and a model loader ask for, each through every typed getter. Inputs without the GGUF magic are left out: gc_tok_load reads
 * them as tokenizer.json, which fuzz_tokenizer_json covers. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "../models/gguf.h"
#include "../models/tokenizer.h"

/* Keys the vocabulary loader and a model loader ask for. */
static const char *const fz_keys[] = {
    "general.architecture", "general.name", "tokenizer.ggml.model", "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.chat_template",
    "llama.block_count", "llama.context_length", "llama.embedding_length",
    "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"};

/* key of g through every getter: the one of its type succeeds, the others
 * must refuse it cleanly. */
static void fz_gguf_key(const gc_gguf_t *g, const char *key) {
  gc_err_t e;
  gc_gguf_str_t s, *ss = NULL;
  int64_t v;
  float *f = NULL;
  int32_t *iv = NULL;
  uint64_t n = 0;
  if (gc_gguf_get_str(g, key, &s, &e) == GC_OK) fz_touch(s.p, (size_t)s.n);
  (void)gc_gguf_get_int(g, key, &v, &e);
  if (gc_gguf_get_strs(g, key, &ss, &n, &e) == GC_OK)
    for (uint64_t j = 0; j < n; j++) fz_touch(ss[j].p, (size_t)ss[j].n);
  if (gc_gguf_get_f32s(g, key, &f, &n, &e) == GC_OK) fz_touch(f, (size_t)n * sizeof *f);
  if (gc_gguf_get_i32s(g, key, &iv, &n, &e) == GC_OK) fz_touch(iv, (size_t)n * sizeof *iv);
  free(ss);
  free(f);
  free(iv);
}

static void fz_gguf_getters(const char *path) {
  gc_err_t e;
  gc_gguf_t *g;
  if (gc_gguf_open(path, &g, &e) != GC_OK) return;
  for (size_t i = 0; i < GC_ARRAY_LEN(fz_keys); i++)
    if (gc_gguf_find(g, fz_keys[i])) fz_gguf_key(g, fz_keys[i]);
  gc_gguf_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4 || memcmp(data, "GGUF", 4)) return -1;
  char path[FZ_PATH];
  fz_write("vocab.gguf", data, size, path);
  gc_err_t e;
  gc_tok_t *t;
  if (fz_report("tokenizer", gc_tok_load(path, &t, &e), &e) == GC_OK) {
    fz_tok_use(t);
    gc_tok_free(t);
  }
  fz_gguf_getters(path);
  return 0;
}
