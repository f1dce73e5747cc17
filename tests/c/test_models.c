/* test_models.c — unit tests of the model layer's file readers and the
 * sampler: the real stories260K checkpoint, safetensors files and HF model
 * directories written here into a temp dir (valid, broken and fuzzed),
 * config.json variants, allocation-failure injection, and the sampler's
 * selection rules. `test_models shared` runs the cases on the third-party
 * stories260K checkpoint instead: $GCORE_SHARED_DATA, else ../shared/data
 * relative to the working directory (the repo root). */
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../../base/quant.h"
#include "../../models/llama2c.h"
#include "../../models/llama_config.h"
#include "../../models/recipe.h"
#include "../../models/safetensors.h"
#include "../../models/sampler.h"
#include "../../models/weights.h"
#include "../../db/tunedb.h"

/* ------------------------------------------------------------- harness */

#include "check.h"

#define CHECK_RC(rc, want, e)                                                  \
  CHECK((rc) == (want), "got %s, want %s: %s", gc_err_name(rc), gc_err_name(want), \
        (e).msg)

static char g_tmp[256];
static const char *g_data = "../shared/data";

/* printf into one of 8 rotating static buffers (test paths). */
static const char *tp(const char *fmt, ...) {
  static char bufs[8][1024];
  static int k;
  char *b = bufs[k++ & 7];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof bufs[0], fmt, ap);
  va_end(ap);
  return b;
}

/* Files are unlinked before being rewritten: truncating an existing file
 * makes ext4 flush it on close (auto_da_alloc), which is slow. */
static void write_bytes(const char *path, const void *p, size_t n) {
  unlink(path);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    printf("FAIL harness: cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static unsigned char *read_bytes(const char *path, size_t *n) {
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)sz + 1);
  if (fread(p, 1, (size_t)sz, f) != (size_t)sz) sz = 0;
  fclose(f);
  *n = (size_t)sz;
  return p;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void mkdir_fresh(const char *path) {
  nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  gc_err_t e;
  if (gc_mkdirs(path, &e)) {
    printf("FAIL harness: %s\n", e.msg);
    exit(2);
  }
}

static uint64_t g_lcg = 0x12345678;
static uint32_t rnd(void) {
  g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_lcg >> 33);
}

/* --------------------------------------------------- safetensors writer */

typedef struct {
  const char *name;
  const char *dtype;
  int ndim;
  int64_t shape[4];
  const void *data;
  size_t nbytes;
  int lie;                 /* 1: write begin/end below instead of the truth */
  uint64_t begin, end;
} st_ent_t;

/* Write a safetensors file: header padded with spaces so that 8 + len is a
 * multiple of 8, plus `skew` extra spaces; data in entry order. */
static void write_st(const char *path, const st_ent_t *ents, int n, int skew) {
  static char hdr[1 << 16];
  size_t k = (size_t)snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"format\":\"pt\"}");
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const st_ent_t *t = &ents[i];
    k += (size_t)snprintf(hdr + k, sizeof hdr - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t->name, t->dtype);
    for (int d = 0; d < t->ndim; d++)
      k += (size_t)snprintf(hdr + k, sizeof hdr - k, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    uint64_t b = t->lie ? t->begin : off, en = t->lie ? t->end : off + t->nbytes;
    k += (size_t)snprintf(hdr + k, sizeof hdr - k, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)b,
                          (unsigned long long)en);
    off += t->nbytes;
  }
  hdr[k++] = '}';
  while ((8 + k) % 8) hdr[k++] = ' ';
  for (int i = 0; i < skew; i++) hdr[k++] = ' ';
  unlink(path);
  FILE *f = fopen(path, "wb");
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)k >> (8 * i));
  fwrite(len, 1, 8, f);
  fwrite(hdr, 1, k, f);
  for (int i = 0; i < n; i++)
    if (ents[i].nbytes) fwrite(ents[i].data, 1, ents[i].nbytes, f);
  fclose(f);
}

/* Exact for the multiples of 1/8 in [-8, 8] used here. */
static uint16_t f16_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  if ((b & 0x7fffffffu) == 0) return (uint16_t)(b >> 16);
  uint32_t sign = b >> 31, ex = ((b >> 23) & 0xff) - 127 + 15, man = (b >> 13) & 0x3ff;
  return (uint16_t)(sign << 15 | ex << 10 | man);
}
static uint16_t bf16_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  return (uint16_t)(b >> 16);
}

static float test_value(int tensor, int64_t i) { return (float)((i * 5 + tensor * 3) % 16 - 8) / 8.0f; }

/* Fill buf with n values of `dtype` ("F32", "F16", "BF16", "I8"). */
static size_t fill_values(void *buf, const char *dtype, int tensor, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float v = test_value(tensor, i);
    if (!strcmp(dtype, "F32")) ((float *)buf)[i] = v;
    else if (!strcmp(dtype, "F16")) ((uint16_t *)buf)[i] = f16_bits(v);
    else if (!strcmp(dtype, "BF16")) ((uint16_t *)buf)[i] = bf16_bits(v);
    else ((int8_t *)buf)[i] = (int8_t)(v * 8);
  }
  if (!strcmp(dtype, "F32")) return (size_t)n * 4;
  if (!strcmp(dtype, "I8")) return (size_t)n;
  return (size_t)n * 2;
}

/* ----------------------------------------------------- tiny HF writer */

typedef struct {
  const char *dtype;      /* "F32", "F16", "BF16" */
  int tied;
  int shards;             /* 1 or 2 */
  int skew;               /* extra header spaces: misaligns the data */
  const char *omit;       /* tensor left out */
  const char *transpose;  /* tensor written with its dims swapped */
  const char *int8;       /* tensor written as I8 */
  const char *widen;      /* tensor written with one more column */
  const char *config_extra; /* extra JSON members for config.json, or NULL */
} hf_opts_t;

enum { T_DIM = 16, T_HID = 32, T_LAYERS = 2, T_HEADS = 4, T_KV = 2, T_HD = 4, T_VOCAB = 24 };

static void write_hf_model(const char *dir_arg, const hf_opts_t *o) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", dir_arg);
  mkdir_fresh(dir);
  write_text(tp("%s/config.json", dir),
             tp("{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":%d,"
                "\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
                "\"num_key_value_heads\":%d,\"vocab_size\":%d,\"max_position_embeddings\":64,"
                "\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,\"tie_word_embeddings\":%s,"
                "\"hidden_act\":\"silu\",\"torch_dtype\":\"float32\"%s%s}",
                T_DIM, T_HID, T_LAYERS, T_HEADS, T_KV, T_VOCAB, o->tied ? "true" : "false",
                o->config_extra ? "," : "", o->config_extra ? o->config_extra : ""));
  static const char *lnames[9] = {"input_layernorm",          "self_attn.q_proj", "self_attn.k_proj",
                                  "self_attn.v_proj",         "self_attn.o_proj", "post_attention_layernorm",
                                  "mlp.gate_proj",            "mlp.down_proj",    "mlp.up_proj"};
  const int64_t lshape[9][2] = {{T_DIM, 0},        {T_HEADS * T_HD, T_DIM}, {T_KV * T_HD, T_DIM},
                                {T_KV * T_HD, T_DIM}, {T_DIM, T_HEADS * T_HD}, {T_DIM, 0},
                                {T_HID, T_DIM},     {T_DIM, T_HID},          {T_HID, T_DIM}};
  static char names[64][96];
  static unsigned char bufs[64][T_VOCAB * T_HID * 4 + 64];
  st_ent_t ents[64];
  int n = 0;
  for (int t = 0; t < 3 + 9 * T_LAYERS + 1; t++) {
    int64_t r, c;
    if (t == 0) snprintf(names[n], 96, "model.embed_tokens.weight"), r = T_VOCAB, c = T_DIM;
    else if (t == 1 + 9 * T_LAYERS) snprintf(names[n], 96, "model.norm.weight"), r = T_DIM, c = 0;
    else if (t == 2 + 9 * T_LAYERS) {
      if (o->tied) continue;
      snprintf(names[n], 96, "lm_head.weight"), r = T_VOCAB, c = T_DIM;
    } else if (t == 3 + 9 * T_LAYERS) {
      snprintf(names[n], 96, "model.rotary_emb.inv_freq"), r = T_HD / 2, c = 0; /* extra: ignored */
    } else {
      int l = (t - 1) / 9, k = (t - 1) % 9;
      snprintf(names[n], 96, "model.layers.%d.%s.weight", l, lnames[k]);
      r = lshape[k][0], c = lshape[k][1];
    }
    if (o->omit && !strcmp(o->omit, names[n])) continue;
    st_ent_t *en = &ents[n];
    memset(en, 0, sizeof *en);
    en->name = names[n];
    en->dtype = (o->int8 && !strcmp(o->int8, names[n])) ? "I8" : o->dtype;
    if (o->transpose && !strcmp(o->transpose, names[n])) {
      int64_t x = r;
      r = c, c = x;
    }
    if (o->widen && !strcmp(o->widen, names[n])) c++;
    en->ndim = c ? 2 : 1;
    en->shape[0] = r, en->shape[1] = c;
    en->nbytes = fill_values(bufs[n], en->dtype, t, r * (c ? c : 1));
    en->data = bufs[n];
    n++;
  }
  if (o->shards <= 1) {
    write_st(tp("%s/model.safetensors", dir), ents, n, o->skew);
    return;
  }
  int half = n / 2;
  write_st(tp("%s/model-00001-of-00002.safetensors", dir), ents, half, o->skew);
  write_st(tp("%s/model-00002-of-00002.safetensors", dir), ents + half, n - half, o->skew);
  static char idx[1 << 14];
  size_t k = (size_t)snprintf(idx, sizeof idx, "{\"metadata\":{\"total_size\":0},\"weight_map\":{");
  for (int i = 0; i < n; i++)
    k += (size_t)snprintf(idx + k, sizeof idx - k, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"", i ? "," : "",
                          ents[i].name, i < half ? 1 : 2);
  snprintf(idx + k, sizeof idx - k, "}}");
  write_text(tp("%s/model.safetensors.index.json", dir), idx);
}

/* ------------------------------------------------------ llama2.c tests */

static const char *stories_path(void) { return tp("%s/stories260K.bin", g_data); }

static void test_stories_header(void) {
  gc_err_t e = {0};
  gc_llama2c_t *m;
  int rc = gc_llama2c_open(stories_path(), &m, &e);
  CHECK_RC(rc, GC_OK, e);
  if (rc) return;
  const gc_llama_config_t *c = &m->cfg;
  CHECK(c->dim == 64 && c->hidden_dim == 172 && c->n_layers == 5 && c->n_heads == 8 && c->n_kv_heads == 4 &&
            c->vocab_size == 512 && c->max_seq == 512,
        "header %d %d %d %d %d %d %d", c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
        c->vocab_size, c->max_seq);
  CHECK(c->head_dim == 8 && c->tie_word_embeddings && c->rope_layout == GC_ROPE_PAIRS, "derived fields");
  CHECK(c->bos_id == 1 && c->rms_norm_eps == 1e-5 && c->rope_theta == 10000.0, "llama2.c conventions");
  CHECK(m->map_size == 1056540 && gc_llama2c_expected_size(c) == 1056540, "size %zu", m->map_size);
  CHECK((const char *)m->token_embedding == (const char *)m->map + 28, "embedding follows the header");
  CHECK(m->wcls == m->token_embedding, "tied classifier is the embedding");
  CHECK((const char *)m->rms_final + 64 * 4 + 512 * 8 * 4 == (const char *)m->map + m->map_size,
        "rms_final then freq_cis end the file");
  int finite = 1;
  for (int i = 0; i < 512 * 64; i++) finite &= isfinite(m->token_embedding[i]) != 0;
  CHECK(finite, "embedding values finite");
  gc_llama2c_close(m);
}

static void test_stories_weights(void) {
  gc_err_t e = {0};
  gc_llama_weights_t *w;
  int rc = gc_weights_open(stories_path(), &w, &e);
  CHECK_RC(rc, GC_OK, e);
  if (rc) return;
  CHECK(gc_weights_count(w) == 3 + 9 * 5, "count %zu", gc_weights_count(w));
  const gc_llama_layer_weights_t *l4 = &w->layers[4];
  CHECK(l4->wk.shape[0] == 32 && l4->wk.shape[1] == 64 && l4->w2.shape[0] == 64 && l4->w2.shape[1] == 172,
        "layer shapes");
  CHECK(!strcmp(l4->w3.name, "layers.4.feed_forward.w3.weight"), "name %s", l4->w3.name);
  CHECK(w->classifier.data == w->tok_embeddings.data, "tied");
  CHECK(w->cfg.rope_layout == GC_ROPE_PAIRS && w->cfg.weight_dtype == GC_ST_F32 && !w->mixed_dtypes, "layout/dtype");
  CHECK(gc_weights_bytes(w) == 1056540 - 28 - 512 * 8 * 4, "bytes %llu", (unsigned long long)gc_weights_bytes(w));
  /* layer slices tile their arrays */
  CHECK((const float *)l4->wq.data == w->l2c->wq + 4 * 64 * 64, "wq slice");
  CHECK((const float *)w->layers[1].w1.data == w->l2c->w1 + 172 * 64, "w1 slice");
  for (size_t i = 0; i < gc_weights_count(w); i++) {
    const gc_weight_t *t = gc_weights_at(w, i);
    CHECK(t && t->nbytes == (size_t)(t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1)) * 4, "tensor %zu bytes", i);
  }
  gc_weights_close(w);
}

static void test_llama2c_sizes(void) {
  size_t n;
  unsigned char *b = read_bytes(stories_path(), &n);
  CHECK(b && n == 1056540, "read stories");
  if (!b) return;
  gc_err_t e = {0};
  gc_llama2c_t *m = NULL;
  char p[512];
  snprintf(p, sizeof p, "%s/trunc.bin", g_tmp);
  write_bytes(p, b, n - 4);
  int rc = gc_llama2c_open(p, &m, &e);
  CHECK_RC(rc, GC_ECORRUPT, e);
  CHECK_MSG_HAS(e, "truncated");
  CHECK_MSG_HAS(e, "1056540");
  CHECK_MSG_HAS(e, "1056536");
  CHECK(m == NULL, "no handle on failure");
  unsigned char *big = malloc(n + 8);
  memcpy(big, b, n);
  memset(big + n, 0, 8);
  write_bytes(p, big, n + 8);
  rc = gc_llama2c_open(p, &m, &e);
  CHECK_RC(rc, GC_ECORRUPT, e);
  CHECK_MSG_HAS(e, "oversized");
  write_bytes(p, b, 10);
  rc = gc_llama2c_open(p, &m, &e);
  CHECK_RC(rc, GC_ECORRUPT, e);
  CHECK_MSG_HAS(e, "28-byte header");
  /* header fields: n_heads not dividing dim; kv not dividing heads; ak42 */
  int32_t hdr[7];
  memcpy(hdr, b, 28);
  int32_t bad[7];
  memcpy(bad, hdr, 28), bad[3] = 7;
  memcpy(big, bad, 28);
  write_bytes(p, big, n);
  CHECK_RC(gc_llama2c_open(p, &m, &e), GC_ECORRUPT, e);
  CHECK_MSG_HAS(e, "n_heads 7");
  memcpy(bad, hdr, 28), bad[4] = 3;
  memcpy(big, bad, 28);
  write_bytes(p, big, n);
  CHECK_RC(gc_llama2c_open(p, &m, &e), GC_ECORRUPT, e);
  CHECK_MSG_HAS(e, "num_key_value_heads 3");
  memcpy(bad, hdr, 28), bad[0] = 0x616b3432, bad[1] = 2;
  memcpy(big, bad, 28);
  write_bytes(p, big, n);
  CHECK_RC(gc_llama2c_open(p, &m, &e), GC_EUNSUPPORTED, e);
  CHECK_MSG_HAS(e, "version 2");
  memcpy(bad, hdr, 28), bad[6] = -1;
  memcpy(big, bad, 28);
  write_bytes(p, big, n);
  CHECK_RC(gc_llama2c_open(p, &m, &e), GC_ECORRUPT, e);
  CHECK_MSG_HAS(e, "seq_len");
  CHECK_RC(gc_llama2c_open(tp("%s/nonexistent.bin", g_tmp), &m, &e), GC_ENOTFOUND, e);
  free(big);
  free(b);
}

/* An untied llama2.c file whose i-th float is i: checks where each array
 * and layer slice lands. */
static void test_llama2c_untied_layout(void) {
  enum { D = 8, H = 12, L = 2, NH = 2, KV = 1, V = 10, S = 4, HD = D / NH };
  const int64_t floats = V * D + L * D + L * D * D + 2 * L * D * KV * HD + L * D * D + L * D + 3 * L * H * D + D +
                         S * HD + V * D;
  size_t bytes = 28 + (size_t)floats * 4;
  unsigned char *b = malloc(bytes);
  int32_t hdr[7] = {D, H, L, NH, KV, -V, S};
  memcpy(b, hdr, 28);
  for (int64_t i = 0; i < floats; i++) {
    float v = (float)i;
    memcpy(b + 28 + 4 * i, &v, 4);
  }
  char p[512];
  snprintf(p, sizeof p, "%s/untied.bin", g_tmp);
  write_bytes(p, b, bytes);
  gc_err_t e = {0};
  gc_llama_weights_t *w;
  int rc = gc_weights_open(p, &w, &e);
  CHECK_RC(rc, GC_OK, e);
  if (!rc) {
    int64_t off = 0;
    CHECK(((const float *)w->tok_embeddings.data)[0] == 0, "emb at 0");
    off += V * D;
    CHECK(((const float *)w->layers[1].attn_norm.data)[0] == off + D, "rms_att layer 1");
    off += L * D;
    CHECK(((const float *)w->layers[1].wq.data)[0] == off + D * D, "wq layer 1");
    off += L * D * D;
    CHECK(((const float *)w->layers[0].wk.data)[0] == off, "wk layer 0");
    off += L * KV * HD * D;
    CHECK(((const float *)w->layers[1].wv.data)[0] == off + KV * HD * D, "wv layer 1");
    off += L * KV * HD * D + L * D * D + L * D;
    CHECK(((const float *)w->layers[1].w1.data)[0] == off + H * D, "w1 layer 1");
    off += L * H * D;
    CHECK(((const float *)w->layers[0].w2.data)[0] == off, "w2 layer 0");
    off += 2 * L * H * D;
    CHECK(((const float *)w->norm.data)[0] == off, "rms_final");
    off += D + S * HD;
    CHECK(w->classifier.data != w->tok_embeddings.data && ((const float *)w->classifier.data)[0] == off,
          "wcls after freq_cis");
    CHECK(!w->cfg.tie_word_embeddings && !strcmp(w->classifier.name, "output.weight"), "untied");
    gc_weights_close(w);
  }
  free(b);
}

/* A Q4_0 model on each backend: NVIDIA GPUs read the device layout
 * (Q4_0R) wherever rows are whole 256-element blocks (the FFN's down
 * projection, rows of H = 320, stays Q4_0), the others the GGUF blocks;
 * gc_weights_as repacks exactly (same values). */
static void test_recipe_device_layouts(void) {
  enum { D = 256, H = 320, L = 1, NH = 4, KV = 2, V = 8, S = 4, HD = D / NH };
  const int64_t floats = V * D + L * D + L * D * D + 2 * L * D * KV * HD + L * D * D + L * D + 3 * L * H * D + D +
                         S * HD;
  size_t bytes = 28 + (size_t)floats * 4;
  unsigned char *b = malloc(bytes);
  int32_t hdr[7] = {D, H, L, NH, KV, V, S}; /* tied classifier */
  memcpy(b, hdr, 28);
  for (int64_t i = 0; i < floats; i++) {
    float v = (float)((i * 7919) % 201 - 100) / 64.0f;
    memcpy(b + 28 + 4 * i, &v, 4);
  }
  char p[512];
  snprintf(p, sizeof p, "%s/q40.bin", g_tmp);
  write_bytes(p, b, bytes);
  free(b);
  gc_err_t e = {0};
  gc_llama_weights_t *w, *conv = NULL;
  int rc = gc_weights_open(p, &w, &e);
  CHECK_RC(rc, GC_OK, e);
  if (rc) return;
  CHECK(gc_weights_quantize(w, "q4_0", &e) == GC_OK, "%s", e.msg);
  CHECK(gc_weights_quantize(w, "q4_0r", &e) == GC_EINVAL, "a device layout is never asked for");
  gc_llama_dtypes_t dt;
  CHECK(gc_llama_dtypes_for(w, "cuda", 1, &dt, &e) == GC_OK);
  CHECK(dt.layer[0].qkv == GC_DT_Q4_0R && dt.layer[0].wo == GC_DT_Q4_0R && dt.layer[0].w13 == GC_DT_Q4_0R &&
        dt.layer[0].w2 == GC_DT_Q4_0, "cuda: %d %d %d %d", dt.layer[0].qkv, dt.layer[0].wo, dt.layer[0].w13,
        dt.layer[0].w2);
  CHECK(dt.embed == GC_DT_F16 && dt.head == GC_DT_F16, "the llama2c table stays dense");
  size_t n = gc_weights_count(w);
  gc_st_dtype_t *to = malloc(n * sizeof *to);
  gc_llama_tensor_dtypes(w, &dt, to);
  CHECK(gc_weights_as(w, to, &conv, &e) == GC_OK && conv, "%s", e.msg);
  if (conv) {
    const gc_weight_t *a = &w->layers[0].w1, *r = &conv->layers[0].w1;
    CHECK(r->dtype == GC_ST_Q4_0R && r->nbytes == a->nbytes, "w1 repacked, same bytes");
    static float y0[H * D], y1[H * D];
    gc_quant_dequantize(GC_QT_Q4_0, a->data, y0, (int64_t)H * D);
    gc_quant_dequantize(GC_QT_Q4_0R, r->data, y1, (int64_t)H * D);
    CHECK(!memcmp(y0, y1, sizeof y0), "w1's values unchanged");
    CHECK(conv->layers[0].w2.dtype == GC_ST_Q4_0, "w2 as stored");
    gc_weights_close(conv);
  }
  free(to);
  /* over two ranks wo's share is 128 columns, no whole 256-element block:
     Q4_0 as stored, as rank 0's own share decides (gcore-gen --tp 2 asks
     for what the ranks run) */
  gc_llama_dtypes_t d2, r0;
  gc_llama_config_t sc;
  gc_llama_weights_t *ws = NULL;
  CHECK(gc_llama_dtypes_for(w, "cuda", 2, &d2, &e) == GC_OK);
  CHECK(d2.layer[0].wo == GC_DT_Q4_0 && d2.layer[0].qkv == GC_DT_Q4_0R && d2.layer[0].w13 == GC_DT_Q4_0R,
        "split 2: wo %d", d2.layer[0].wo);
  CHECK(gc_llama_shard(&w->cfg, 2, &sc, &e) == GC_OK && gc_weights_shard(w, &sc, 0, &ws, &e) == GC_OK, "%s", e.msg);
  if (ws) {
    CHECK(ws->layers[0].wo.shape[1] == 128 && ws->layers[0].w2.shape[1] == 160 && ws->layers[0].wo.dtype == GC_ST_Q4_0);
    CHECK(gc_llama_dtypes_for(ws, "cuda", 1, &r0, &e) == GC_OK && !memcmp(&r0.layer[0], &d2.layer[0], sizeof r0.layer[0]),
          "rank 0's share decides as the split model does");
    gc_weights_close(ws);
  }
  CHECK(gc_weights_check_split(w, 4, &e) == GC_EUNSUPPORTED, "H / 4 = 80 columns of w2: not whole Q4_0 blocks");
  CHECK(strstr(e.msg, "--tp 4: ") && strstr(e.msg, "splits into 80 columns a rank, not whole Q4_0 blocks of 32"),
        "%s", e.msg);
  for (int k = 0; k < 2; k++) {
    CHECK(gc_llama_dtypes_for(w, k ? "hip" : "cpu", 1, &dt, &e) == GC_OK);
    CHECK(dt.layer[0].qkv == GC_DT_Q4_0 && dt.layer[0].w13 == GC_DT_Q4_0, "%s: GGUF blocks", k ? "hip" : "cpu");
  }
  gc_weights_close(w);
  /* a bundle's problems are its targets' backends' recipes: the device
     layouts only where NVIDIA is one of them */
  const char *lists[4] = {"cpu,hip", "hip", "cuda", "cpu,cuda,hip"};
  for (int k = 0; k < 4; k++) {
    gc_problems_t probs = {0};
    CHECK(gc_llama_workload(p, "q4_0", "none", NULL, 1, lists[k], &probs, NULL, NULL, &e) == GC_OK, "%s", e.msg);
    int dev = 0, gguf = 0;
    for (int i = 0; i < probs.n; i++) {
      dev += probs.v[i].tb == GC_DT_Q4_0R;
      gguf += probs.v[i].tb == GC_DT_Q4_0;
    }
    CHECK(!dev == (k < 2) && gguf > 0, "%s: %d problems on Q4_0R, %d on Q4_0", lists[k], dev, gguf);
    gc_problems_free(&probs);
  }
}

/* --------------------------------------------------- safetensors tests */

static float g_f32[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.5f, 8.0f};
static uint16_t g_f16[4], g_bf16[3];

static void basic_ents(st_ent_t *ents) {
  for (int i = 0; i < 4; i++) g_f16[i] = f16_bits(g_f32[i]);
  for (int i = 0; i < 3; i++) g_bf16[i] = bf16_bits(g_f32[i]);
  memset(ents, 0, 3 * sizeof *ents);
  ents[0] = (st_ent_t){"a.f32", "F32", 2, {2, 3}, g_f32, sizeof g_f32, 0, 0, 0};
  ents[1] = (st_ent_t){"b.f16", "F16", 1, {4}, g_f16, sizeof g_f16, 0, 0, 0};
  ents[2] = (st_ent_t){"c.bf16", "BF16", 3, {1, 3, 1}, g_bf16, sizeof g_bf16, 0, 0, 0};
}

static void test_st_valid(void) {
  st_ent_t ents[4];
  basic_ents(ents);
  ents[3] = (st_ent_t){"d.empty", "F32", 2, {0, 5}, NULL, 0, 0, 0, 0};
  char p[512];
  snprintf(p, sizeof p, "%s/valid.safetensors", g_tmp);
  write_st(p, ents, 4, 0);
  gc_err_t e = {0};
  gc_st_t *st;
  int rc = gc_st_open(p, &st, &e);
  CHECK_RC(rc, GC_OK, e);
  if (rc) return;
  CHECK(gc_st_count(st) == 4, "count %zu (metadata ignored)", gc_st_count(st));
  CHECK(!strcmp(gc_st_at(st, 0)->name, "a.f32") && !strcmp(gc_st_at(st, 3)->name, "d.empty"), "sorted names");
  const gc_st_tensor_t *t;
  CHECK_RC(gc_st_get(st, "a.f32", &t, &e), GC_OK, e);
  CHECK(t->dtype == GC_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->nbytes == 24 &&
            !memcmp(t->data, g_f32, 24),
        "f32 tensor");
  CHECK_RC(gc_st_get(st, "b.f16", &t, &e), GC_OK, e);
  CHECK(t->dtype == GC_ST_F16 && t->ndim == 1 && t->shape[0] == 4 && t->nbytes == 8 && !memcmp(t->data, g_f16, 8),
        "f16 tensor");
  CHECK_RC(gc_st_get(st, "c.bf16", &t, &e), GC_OK, e);
  CHECK(t->dtype == GC_ST_BF16 && t->ndim == 3 && t->numel == 3 && !memcmp(t->data, g_bf16, 6), "bf16 tensor");
  uint32_t bits = (uint32_t)((const uint16_t *)t->data)[1] << 16;
  float x;
  memcpy(&x, &bits, 4);
  CHECK(x == -2.0f, "bf16 decodes to -2, got %g", x);
  CHECK_RC(gc_st_get(st, "missing", &t, &e), GC_ENOTFOUND, e);
  CHECK_MSG_HAS(e, "'missing'");
  CHECK(gc_st_find(st, "d.empty")->nbytes == 0, "empty tensor");
  gc_st_close(st);
  /* a directory holding model.safetensors opens the same */
  mkdir_fresh(tp("%s/dir1", g_tmp));
  write_st(tp("%s/dir1/model.safetensors", g_tmp), ents, 3, 0);
  rc = gc_st_open(tp("%s/dir1", g_tmp), &st, &e);
  CHECK_RC(rc, GC_OK, e);
  if (!rc) gc_st_close(st);
  mkdir_fresh(tp("%s/empty_dir", g_tmp));
  CHECK_RC(gc_st_open(tp("%s/empty_dir", g_tmp), &st, &e), GC_ENOTFOUND, e);
  CHECK_MSG_HAS(e, "model.safetensors.index.json");
}

/* Open path expecting failure `want` whose message contains `sub`. */
static void expect_st_fail(const char *path, int want, const char *sub) {
  gc_err_t e = {0};
  gc_st_t *st = (gc_st_t *)&e;
  int rc = gc_st_open(path, &st, &e);
  CHECK_RC(rc, want, e);
  CHECK_MSG_HAS(e, sub);
  CHECK(st == NULL, "handle left set on failure");
  if (!rc) gc_st_close(st);
}

static void test_st_broken(void) {
  st_ent_t ents[3];
  char p[512];
  snprintf(p, sizeof p, "%s/broken.safetensors", g_tmp);
  size_t n;
  /* truncated data */
  basic_ents(ents);
  write_st(p, ents, 3, 0);
  unsigned char *b = read_bytes(p, &n);
  write_bytes(p, b, n - 3);
  expect_st_fail(p, GC_ECORRUPT, "past the data region");
  /* header length past EOF */
  uint64_t big = n + 100;
  memcpy(b, &big, 8);
  write_bytes(p, b, n);
  expect_st_fail(p, GC_ECORRUPT, "runs past the end of the file");
  /* tiny file */
  write_bytes(p, "abc", 3);
  expect_st_fail(p, GC_ECORRUPT, "too short");
  free(b);
  /* offsets past the data */
  basic_ents(ents);
  ents[1].lie = 1, ents[1].begin = 24, ents[1].end = 4096 + 8;
  write_st(p, ents, 3, 0);
  expect_st_fail(p, GC_ECORRUPT, "run past the data region");
  /* offsets whose size disagrees with the shape */
  basic_ents(ents);
  ents[0].lie = 1, ents[0].begin = 0, ents[0].end = 20;
  write_st(p, ents, 3, 0);
  expect_st_fail(p, GC_ECORRUPT, "hold 20 bytes but F32 [2,3] needs 24");
  /* begin after end */
  basic_ents(ents);
  ents[0].lie = 1, ents[0].begin = 24, ents[0].end = 0;
  write_st(p, ents, 3, 0);
  expect_st_fail(p, GC_ECORRUPT, "begin after end");
  /* overlapping tensors */
  basic_ents(ents);
  ents[1].lie = 1, ents[1].begin = 16, ents[1].end = 24;
  write_st(p, ents, 3, 0);
  expect_st_fail(p, GC_ECORRUPT, "overlap");
  /* unknown dtype refused by name at open */
  basic_ents(ents);
  ents[2].dtype = "Q7";
  write_st(p, ents, 3, 0);
  expect_st_fail(p, GC_EUNSUPPORTED, "'Q7'");
  /* known but unsupported dtype: listed, refused on lookup */
  static int8_t i8[3] = {1, 2, 3};
  basic_ents(ents);
  ents[2] = (st_ent_t){"q.i8", "I8", 1, {3}, i8, 3, 0, 0, 0};
  write_st(p, ents, 3, 0);
  gc_err_t e = {0};
  gc_st_t *st;
  int rc = gc_st_open(p, &st, &e);
  CHECK_RC(rc, GC_OK, e);
  if (!rc) {
    const gc_st_tensor_t *t;
    CHECK(gc_st_find(st, "q.i8") && gc_st_find(st, "q.i8")->dtype == GC_ST_OTHER, "I8 listed");
    CHECK_RC(gc_st_get(st, "q.i8", &t, &e), GC_EUNSUPPORTED, e);
    CHECK_MSG_HAS(e, "I8");
    gc_st_close(st);
  }
  /* headers that are not a JSON object of entries */
  struct {
    const char *hdr, *sub;
    int code;
  } bad[] = {
      {"not json at all", "not valid JSON", GC_ECORRUPT},
      {"[1,2,3]", "not a JSON object", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} xx", "trailing bytes", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", "not valid JSON", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "shape[0]", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "shape[0]", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", "data_offsets", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", "data_offsets", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", "dtype", GC_ECORRUPT},
      {"{\"a\":5}", "not a JSON object", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", "dimensions", GC_EUNSUPPORTED},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", "overflow", GC_ECORRUPT},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", "data_offsets", GC_ECORRUPT},
  };
  for (size_t i = 0; i < GC_ARRAY_LEN(bad); i++) {
    unsigned char buf[512];
    size_t hl = strlen(bad[i].hdr);
    uint64_t hl64 = hl;
    memcpy(buf, &hl64, 8);
    memcpy(buf + 8, bad[i].hdr, hl);
    memset(buf + 8 + hl, 0, 4);
    write_bytes(p, buf, 8 + hl + 4);
    expect_st_fail(p, bad[i].code, bad[i].sub);
  }
}

static void test_st_sharded(void) {
  hf_opts_t o = {.dtype = "F32", .shards = 2};
  char dir[512];
  snprintf(dir, sizeof dir, "%s/sharded", g_tmp);
  write_hf_model(dir, &o);
  gc_err_t e = {0};
  gc_st_t *st;
  int rc = gc_st_open(dir, &st, &e);
  CHECK_RC(rc, GC_OK, e);
  if (!rc) {
    CHECK(gc_st_count(st) == 4 + 9 * T_LAYERS, "count %zu", gc_st_count(st));
    const gc_st_tensor_t *a = gc_st_find(st, "model.embed_tokens.weight"), *z = gc_st_find(st, "lm_head.weight");
    CHECK(a && z && strstr(a->file, "00001") && strstr(z->file, "00002"), "tensors from both shards");
    gc_st_close(st);
  }
  /* index naming a missing shard */
  unlink(tp("%s/model-00002-of-00002.safetensors", dir));
  expect_st_fail(dir, GC_ENOTFOUND, "model-00002-of-00002.safetensors");
  /* index mapping a tensor to a shard that lacks it */
  write_hf_model(dir, &o);
  size_t n;
  char *idx = (char *)read_bytes(tp("%s/model.safetensors.index.json", dir), &n);
  idx[n] = 0;
  char *at = strstr(idx, "\"model.norm.weight\":\"model-00002");
  CHECK(at != NULL, "index layout");
  if (at) {
    memcpy(strstr(at, "model-00002"), "model-00001", 11);
    write_text(tp("%s/model.safetensors.index.json", dir), idx);
    expect_st_fail(dir, GC_ECORRUPT, "'model.norm.weight' to 'model-00001-of-00002.safetensors'");
  }
  free(idx);
  write_text(tp("%s/model.safetensors.index.json", dir), "{\"weight_map\":{\"x\":\"../etc/passwd\"}}");
  expect_st_fail(dir, GC_ECORRUPT, "not a plain file name");
  write_text(tp("%s/model.safetensors.index.json", dir), "{\"metadata\":{}}");
  expect_st_fail(dir, GC_ECORRUPT, "weight_map");
  write_text(tp("%s/model.safetensors.index.json", dir), "{\"weight_map\":{}}");
  expect_st_fail(dir, GC_ECORRUPT, "empty");
  /* the same tensor in two shards */
  hf_opts_t o1 = {.dtype = "F32"};
  write_hf_model(dir, &o1);
  write_hf_model(tp("%s/sharded_b", g_tmp), &o1);
  rename(tp("%s/model.safetensors", dir), tp("%s/s1.safetensors", dir));
  rename(tp("%s/sharded_b/model.safetensors", g_tmp), tp("%s/s2.safetensors", dir));
  write_text(tp("%s/model.safetensors.index.json", dir),
             "{\"weight_map\":{\"model.norm.weight\":\"s1.safetensors\",\"lm_head.weight\":\"s2.safetensors\"}}");
  expect_st_fail(dir, GC_ECORRUPT, "appears twice");
}

/* Random byte flips in the header and every truncation of a valid file
 * must give an error or a valid handle whose tensors lie inside the file. */
static void test_st_fuzz(void) {
  st_ent_t ents[3];
  basic_ents(ents);
  char p[512];
  snprintf(p, sizeof p, "%s/fuzz.safetensors", g_tmp);
  write_st(p, ents, 3, 0);
  size_t n;
  unsigned char *orig = read_bytes(p, &n), *b = malloc(n);
  int opened = 0;
  for (int it = 0; it < 3000; it++) {
    memcpy(b, orig, n);
    int flips = 1 + (int)(rnd() % 4);
    for (int k = 0; k < flips; k++) {
      size_t at = rnd() % (it % 10 == 0 ? 8 : n);
      b[at] = rnd() % 3 == 0 ? (unsigned char)"{}[],:\"0-9 "[rnd() % 11] : (unsigned char)rnd();
    }
    write_bytes(p, b, n);
    gc_err_t e = {0};
    gc_st_t *st;
    if (gc_st_open(p, &st, &e) == GC_OK) {
      opened++;
      unsigned sum = 0;
      for (size_t i = 0; i < gc_st_count(st); i++) {
        const gc_st_tensor_t *t = gc_st_at(st, i);
        for (size_t j = 0; j < t->nbytes; j++) sum += ((const unsigned char *)t->data)[j];
      }
      (void)sum;
      gc_st_close(st);
    } else {
      CHECK(e.msg[0] != 0 && strchr(e.msg, '\n') == NULL, "one-line message");
    }
  }
  for (size_t len = 0; len < n; len++) {
    write_bytes(p, orig, len);
    gc_err_t e = {0};
    gc_st_t *st;
    int rc = gc_st_open(p, &st, &e);
    CHECK(rc != GC_OK, "truncated to %zu bytes accepted", len);
    if (!rc) gc_st_close(st);
  }
  CHECK(opened > 0, "some mutations still valid");
  free(orig);
  free(b);
}

/* -------------------------------------------------------- config tests */

static const char *CFG_BASE =
    "\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
    "\"intermediate_size\":172,\"num_hidden_layers\":2,\"num_attention_heads\":8,\"num_key_value_heads\":4,"
    "\"vocab_size\":512,\"max_position_embeddings\":256,\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,"
    "\"bos_token_id\":1,\"eos_token_id\":[2,3],\"torch_dtype\":\"bfloat16\"";

static int parse_cfg(const char *extra, gc_llama_config_t *c, gc_err_t *e) {
  const char *t = tp("{%s%s%s}", CFG_BASE, extra && *extra ? "," : "", extra ? extra : "");
  return gc_llama_config_parse_hf(t, strlen(t), "config.json", c, e);
}

static void test_config_hf(void) {
  gc_llama_config_t c;
  gc_err_t e = {0};
  int rc = parse_cfg("", &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.dim == 64 && c.hidden_dim == 172 && c.n_layers == 2 && c.n_heads == 8 && c.n_kv_heads == 4 &&
            c.head_dim == 8 && c.vocab_size == 512 && c.max_seq == 256,
        "dims");
  CHECK(c.rope_theta == 500000.0 && c.rms_norm_eps == 1e-5 && c.rope_scaling == GC_ROPE_SCALING_NONE &&
            c.rope_layout == GC_ROPE_HALVES && !c.tie_word_embeddings && c.dtype == GC_ST_BF16,
        "fields");
  CHECK(c.bos_id == 1 && c.n_eos == 2 && c.eos_ids[0] == 2 && c.eos_ids[1] == 3, "token ids");
  rc = parse_cfg("\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                 "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"tie_word_embeddings\":true",
                 &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.rope_scaling == GC_ROPE_SCALING_LLAMA3 && c.rope_factor == 8.0 && c.rope_low_freq_factor == 1.0 &&
            c.rope_high_freq_factor == 4.0 && c.rope_original_max_seq == 8192 && c.tie_word_embeddings,
        "llama3 scaling");
  rc = parse_cfg("\"rope_scaling\":{\"type\":\"default\"},\"head_dim\":16", &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.head_dim == 16 && c.rope_scaling == GC_ROPE_SCALING_NONE, "head_dim != hidden/heads");
  rc = parse_cfg("\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":1e4,\"factor\":32,"
                 "\"low_freq_factor\":1,\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}",
                 &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.rope_scaling == GC_ROPE_SCALING_LLAMA3 && c.rope_factor == 32 && c.rope_theta == 500000.0,
        "rope_parameters (top-level rope_theta wins)");
  const char *minimal = "{\"model_type\":\"llama\",\"hidden_size\":32,\"intermediate_size\":64,"
                        "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":100}";
  rc = gc_llama_config_parse_hf(minimal, strlen(minimal), "config.json", &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.n_kv_heads == 4 && c.max_seq == 2048 && c.rms_norm_eps == 1e-6 && c.rope_theta == 10000.0 &&
            c.bos_id == 1 && c.n_eos == 1 && c.eos_ids[0] == 2 && c.dtype == GC_ST_F32,
        "LlamaConfig defaults");
  const char *ids = "{\"model_type\":\"llama\",\"hidden_size\":32,\"intermediate_size\":64,"
                    "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":100,"
                    "\"bos_token_id\":null,\"eos_token_id\":7}";
  rc = gc_llama_config_parse_hf(ids, strlen(ids), "config.json", &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.bos_id == -1 && c.n_eos == 1 && c.eos_ids[0] == 7, "bos null, single eos");
  char desc[512];
  gc_llama_config_describe(&c, desc, sizeof desc);
  CHECK(strlen(desc) > 10 && !strstr(desc, "bias"), "describe");
  const char *qwen2 = "{\"model_type\":\"qwen2\",\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":56,"
                      "\"intermediate_size\":152,\"num_hidden_layers\":2,\"num_attention_heads\":7,"
                      "\"num_key_value_heads\":1,\"vocab_size\":777,\"use_sliding_window\":false,"
                      "\"sliding_window\":32768,\"max_window_layers\":21,\"rope_theta\":1000000.0}";
  rc = gc_llama_config_parse_hf(qwen2, strlen(qwen2), "config.json", &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.qkv_bias && c.rope_layout == GC_ROPE_HALVES && c.head_dim == 8 && c.rope_theta == 1e6,
        "qwen2: bias %d", c.qkv_bias);
  gc_llama_config_describe(&c, desc, sizeof desc);
  CHECK(strstr(desc, "q/k/v biases") != NULL, "describe: %s", desc);
  const char *qwen3 = "{\"model_type\":\"qwen3\",\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,"
                      "\"intermediate_size\":96,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                      "\"num_key_value_heads\":2,\"head_dim\":32,\"vocab_size\":100,\"attention_bias\":false,"
                      "\"use_sliding_window\":false,\"sliding_window\":null,\"max_window_layers\":28}";
  rc = gc_llama_config_parse_hf(qwen3, strlen(qwen3), "config.json", &c, &e);
  CHECK_RC(rc, GC_OK, e);
  CHECK(c.qk_norm && !c.qkv_bias && c.head_dim == 32 && c.rope_layout == GC_ROPE_HALVES, "qwen3: norm %d",
        c.qk_norm);
}

static void test_config_refused(void) {
  struct {
    const char *extra;
    int code;
    const char *sub;
  } cases[] = {
      {"\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0}", GC_EUNSUPPORTED,
       "unsupported config: rope_scaling.type 'yarn' (gcore supports llama3 and linear)"},
      {"\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-2.0}", GC_ECORRUPT, "linear rope scaling factor -2"},
      {"\"rope_scaling\":{\"rope_type\":\"linear\"}", GC_ECORRUPT, "factor"},
      {"\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2.0}", GC_EUNSUPPORTED, "'dynamic'"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\"}", GC_EUNSUPPORTED, "'longrope'"},
      {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}", GC_ECORRUPT, "low_freq_factor"},
      {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":4,\"high_freq_factor\":1,"
       "\"original_max_position_embeddings\":8192}",
       GC_ECORRUPT, "low_freq_factor < high_freq_factor"},
      {"\"rope_scaling\":\"llama3\"", GC_ECORRUPT, "must be an object"},
      {"\"attention_bias\":true", GC_EUNSUPPORTED, "attention_bias true"},
      {"\"mlp_bias\":true", GC_EUNSUPPORTED, "mlp_bias true"},
      {"\"hidden_act\":\"gelu\"", GC_EUNSUPPORTED, "hidden_act 'gelu'"},
      {"\"pretraining_tp\":2", GC_EUNSUPPORTED, "pretraining_tp 2"},
      {"\"sliding_window\":4096", GC_EUNSUPPORTED, "sliding_window"},
      {"\"architectures\":[\"Qwen2ForCausalLM\"]", GC_EUNSUPPORTED,
       "architectures 'Qwen2ForCausalLM' (gcore supports LlamaForCausalLM for model_type llama)"},
      {"\"quantization_config\":{\"quant_method\":\"gptq\"}", GC_EUNSUPPORTED, "quantization_config"},
      {"\"partial_rotary_factor\":0.5", GC_EUNSUPPORTED, "partial_rotary_factor"},
      {"\"torch_dtype\":\"float64\"", GC_EUNSUPPORTED, "torch_dtype 'float64'"},
      {"\"num_key_value_heads\":3", GC_ECORRUPT, "not a multiple of num_key_value_heads 3"},
      {"\"num_attention_heads\":7", GC_ECORRUPT, "not divisible by num_attention_heads 7"},
      {"\"num_attention_heads\":0", GC_ECORRUPT, "num_attention_heads"},
      {"\"hidden_size\":\"64\"", GC_ECORRUPT, "'hidden_size' must be an integer"},
      {"\"hidden_size\":-64", GC_ECORRUPT, "hidden_size"},
      {"\"vocab_size\":99999999999", GC_ECORRUPT, "vocab_size"},
      {"\"head_dim\":7", GC_ECORRUPT, "head_dim 7 must be even"},
      {"\"rms_norm_eps\":0", GC_ECORRUPT, "rms_norm_eps"},
      {"\"bos_token_id\":512", GC_ECORRUPT, "bos_token_id 512"},
      {"\"tie_word_embeddings\":1", GC_ECORRUPT, "true or false"},
  };
  for (size_t i = 0; i < GC_ARRAY_LEN(cases); i++) {
    gc_llama_config_t c;
    gc_err_t e = {0};
    int rc = parse_cfg(cases[i].extra, &c, &e);
    CHECK_RC(rc, cases[i].code, e);
    CHECK_MSG_HAS(e, cases[i].sub);
    CHECK_MSG_HAS(e, "config.json");
  }
  struct {
    const char *text;
    int code;
    const char *sub;
  } whole[] = {
      {"{\"model_type\":\"mistral\",\"hidden_size\":64}", GC_EUNSUPPORTED, "model_type 'mistral'"},
      {"{\"model_type\":\"qwen2\",\"use_sliding_window\":true}", GC_EUNSUPPORTED, "use_sliding_window true"},
      {"{\"model_type\":\"qwen2\",\"attention_bias\":true}", GC_EUNSUPPORTED, "attention_bias true"},
      {"{\"model_type\":\"llama\",\"architectures\":[\"LlamaForSequenceClassification\"]}", GC_EUNSUPPORTED,
       "LlamaForSequenceClassification"},
      {"{\"hidden_size\":64}", GC_ECORRUPT, "model_type"},
      {"{\"model_type\":\"llama\",\"hidden_size\":64}", GC_ECORRUPT, "intermediate_size"},
      {"not json", GC_ECORRUPT, "not a JSON object"},
      {"[1]", GC_ECORRUPT, "not a JSON object"},
      {"", GC_ECORRUPT, "not a JSON object"},
  };
  for (size_t i = 0; i < GC_ARRAY_LEN(whole); i++) {
    gc_llama_config_t c;
    gc_err_t e = {0};
    int rc = gc_llama_config_parse_hf(whole[i].text, strlen(whole[i].text), "config.json", &c, &e);
    CHECK_RC(rc, whole[i].code, e);
    CHECK_MSG_HAS(e, whole[i].sub);
  }
  gc_llama_config_t c;
  gc_err_t e = {0};
  CHECK_RC(gc_llama_config_load_hf(tp("%s/no_such_dir", g_tmp), &c, &e), GC_ENOTFOUND, e);
}

static void test_config_llama2c(void) {
  gc_llama_config_t c;
  gc_err_t e = {0};
  int32_t h[7] = {288, 768, 6, 6, 6, -32000, 256};
  CHECK_RC(gc_llama_config_from_llama2c(h, &c, &e), GC_OK, e);
  CHECK(c.vocab_size == 32000 && !c.tie_word_embeddings && c.head_dim == 48, "negative vocab = untied");
  int32_t bad[][7] = {{0, 768, 6, 6, 6, 32000, 256}, {288, 768, 6, 6, 4, 32000, 256},
                      {288, 768, 6, 0, 6, 32000, 256}, {288, 768, 6, 6, 6, INT32_MIN, 256},
                      {288, 768, 6, 6, 6, 32000, 0},   {288, 768, 6, 6, 6, 32000, 1 << 30}};
  for (size_t i = 0; i < GC_ARRAY_LEN(bad); i++) {
    int rc = gc_llama_config_from_llama2c(bad[i], &c, &e);
    CHECK_RC(rc, GC_ECORRUPT, e);
    CHECK_MSG_HAS(e, "llama2.c header");
  }
  /* random headers never crash and never imply a size that overflowed */
  for (int it = 0; it < 20000; it++) {
    int32_t r[7];
    for (int k = 0; k < 7; k++) r[k] = it % 2 ? (int32_t)rnd() : (int32_t)(rnd() % 300) - 10;
    if (gc_llama_config_from_llama2c(r, &c, NULL) == GC_OK) CHECK(gc_llama2c_expected_size(&c) > 28, "size");
  }
}

static void test_config_fuzz(void) {
  const char *good = tp("{%s,\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}}",
                        CFG_BASE);
  size_t n = strlen(good);
  char *b = malloc(n + 1);
  for (int it = 0; it < 5000; it++) {
    memcpy(b, good, n + 1);
    for (int k = 0; k < 3; k++) b[rnd() % n] = "{}[],:\"0123456789-.etrufalsn x"[rnd() % 30];
    gc_llama_config_t c;
    gc_err_t e = {0};
    size_t len = it % 7 == 0 ? rnd() % n : n;
    int rc = gc_llama_config_parse_hf(b, len, "fuzz.json", &c, &e);
    if (rc == GC_OK) CHECK(gc_llama_config_check(&c, &e) == GC_OK, "accepted config fails check: %s", e.msg);
    else CHECK(e.msg[0] && !strchr(e.msg, '\n'), "one-line message");
  }
  free(b);
}

/* ------------------------------------------------------- weights tests */

static void test_weights_hf(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/hf_ok", g_tmp);
  const char *dtypes[3] = {"F32", "F16", "BF16"};
  for (int d = 0; d < 3; d++) {
    for (int tied = 0; tied < 2; tied++) {
      hf_opts_t o = {.dtype = dtypes[d], .tied = tied, .shards = 1 + tied, .skew = d == 0 ? 2 : 1,
                     .config_extra = tied ? "\"head_dim\":8" : NULL};
      write_hf_model(dir, &o);
      gc_err_t e = {0};
      gc_llama_weights_t *w;
      int rc = gc_weights_open(dir, &w, &e);
      if (tied) { /* head_dim 8 != 16/4: every attention shape changes */
        CHECK_RC(rc, GC_ECORRUPT, e);
        CHECK_MSG_HAS(e, "model.layers.0.self_attn.q_proj.weight: shape [16,16] but the config implies [32,16]");
        o.config_extra = NULL;
        write_hf_model(dir, &o);
        rc = gc_weights_open(dir, &w, &e);
      }
      CHECK_RC(rc, GC_OK, e);
      if (rc) continue;
      CHECK(w->cfg.weight_dtype == d && !w->mixed_dtypes && w->cfg.rope_layout == GC_ROPE_HALVES, "dtype %s", dtypes[d]);
      CHECK(w->cfg.tie_word_embeddings == tied && (w->classifier.data == w->tok_embeddings.data) == tied, "tie");
      CHECK(w->layers[1].wk.shape[0] == T_KV * T_HD && w->layers[1].wk.shape[1] == T_DIM, "wk shape");
      CHECK(!strcmp(w->layers[1].w3.name, "model.layers.1.mlp.up_proj.weight"), "name");
      size_t es = gc_st_dtype_size(w->cfg.weight_dtype);
      for (size_t i = 0; i < gc_weights_count(w); i++) {
        const gc_weight_t *t = gc_weights_at(w, i);
        CHECK((uintptr_t)t->data % es == 0, "%s aligned (skew %d)", t->name, o.skew);
      }
      /* value of element 5 of layer 0's wq (tensor index 2 in the writer) */
      const gc_weight_t *q = &w->layers[0].wq;
      float want = test_value(2, 5);
      int same = d == 0 ? ((const float *)q->data)[5] == want
                 : d == 1 ? ((const uint16_t *)q->data)[5] == f16_bits(want)
                          : ((const uint16_t *)q->data)[5] == bf16_bits(want);
      CHECK(same, "wq[5] is not %g (%s)", want, dtypes[d]);
      gc_weights_close(w);
    }
  }
}

static void test_weights_hf_broken(void) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/hf_bad", g_tmp);
  struct {
    hf_opts_t o;
    int code;
    const char *sub;
  } cases[] = {
      {{.dtype = "F32", .transpose = "model.layers.1.mlp.up_proj.weight"}, GC_ECORRUPT,
       "model.layers.1.mlp.up_proj.weight: shape [16,32] but the config implies [32,16]"},
      {{.dtype = "F32", .transpose = "model.norm.weight"}, GC_ECORRUPT, "model.norm.weight: shape [0,16]"},
      {{.dtype = "F16", .widen = "model.layers.0.self_attn.o_proj.weight"}, GC_ECORRUPT,
       "model.layers.0.self_attn.o_proj.weight: shape [16,17] but the config implies [16,16]"},
      {{.dtype = "F16", .omit = "model.layers.1.self_attn.v_proj.weight"}, GC_ENOTFOUND,
       "model.layers.1.self_attn.v_proj.weight: tensor missing"},
      {{.dtype = "F32", .omit = "lm_head.weight"}, GC_ENOTFOUND, "lm_head.weight"},
      {{.dtype = "BF16", .int8 = "model.layers.0.mlp.down_proj.weight"}, GC_EUNSUPPORTED,
       "'model.layers.0.mlp.down_proj.weight' has dtype I8"},
      {{.dtype = "F32", .config_extra = "\"attention_bias\":true"}, GC_EUNSUPPORTED, "attention_bias"},
      {{.dtype = "F32", .config_extra = "\"vocab_size\":25"}, GC_ECORRUPT,
       "model.embed_tokens.weight: shape [24,16] but the config implies [25,16]"},
  };
  for (size_t i = 0; i < GC_ARRAY_LEN(cases); i++) {
    write_hf_model(dir, &cases[i].o);
    gc_err_t e = {0};
    gc_llama_weights_t *w = (gc_llama_weights_t *)&e;
    int rc = gc_weights_open(dir, &w, &e);
    CHECK_RC(rc, cases[i].code, e);
    CHECK_MSG_HAS(e, cases[i].sub);
    CHECK(w == NULL, "no view on failure");
    if (!rc) gc_weights_close(w);
  }
  gc_err_t e = {0};
  gc_llama_weights_t *w;
  CHECK_RC(gc_weights_open(tp("%s/none", g_tmp), &w, &e), GC_ENOTFOUND, e);
  mkdir_fresh(dir);
  CHECK_RC(gc_weights_open(dir, &w, &e), GC_ENOTFOUND, e);
  CHECK_MSG_HAS(e, "config.json");
}

/* Every allocation failing in turn must give GC_ENOMEM and leak nothing
 * (ASan's leak checker watches). */
static void test_alloc_faults(void) {
  hf_opts_t o = {.dtype = "F32", .shards = 2, .skew = 2};
  char dir[512];
  snprintf(dir, sizeof dir, "%s/hf_fault", g_tmp);
  write_hf_model(dir, &o);
  /* a llama2.c checkpoint of the test's own (test_llama2c_untied_layout) */
  const char *paths[2] = {dir, tp("%s/untied.bin", g_tmp)};
  for (int p = 0; p < 2; p++) {
    int done = 0;
    for (long k = 0; k < 2000 && !done; k++) {
      gc_err_t e = {0};
      gc_llama_weights_t *w = NULL;
      gc_fault_alloc_after(k);
      int rc = gc_weights_open(paths[p], &w, &e);
      gc_fault_alloc_after(-1);
      if (rc == GC_OK) {
        done = 1;
        gc_weights_close(w);
      } else {
        CHECK_RC(rc, GC_ENOMEM, e);
        CHECK(w == NULL, "view on failure");
      }
    }
    CHECK(done, "open never succeeded");
  }
  gc_sampler_params_t sp;
  gc_sampler_params_default(&sp);
  for (long k = 0; k < 10; k++) {
    gc_err_t e = {0};
    gc_sampler_t *s = NULL;
    gc_fault_alloc_after(k);
    int rc = gc_sampler_create(100, &sp, &s, &e);
    gc_fault_alloc_after(-1);
    CHECK(rc == GC_OK || rc == GC_ENOMEM, "sampler create %s", gc_err_name(rc));
    gc_sampler_free(s);
  }
}

/* ------------------------------------------------------- sampler tests */

static gc_sampler_t *mk_sampler(int vocab, float temp, int top_k, float top_p, float min_p, uint64_t seed) {
  gc_sampler_params_t p;
  gc_sampler_params_default(&p);
  p.temperature = temp, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p, p.seed = seed;
  gc_sampler_t *s = NULL;
  gc_err_t e = {0};
  CHECK(!gc_sampler_create(vocab, &p, &s, &e), "sampler create: %s", e.msg);
  return s;
}

static void test_rng_pcg32(void) {
  /* pcg32_srandom_r(&rng, 42, 54) from the PCG reference demo */
  gc_rng_t r = {0, (54u << 1) | 1u};
  gc_rng_u32(&r);
  r.state += 42;
  gc_rng_u32(&r);
  const uint32_t want[6] = {0xa15c02b7, 0x7b47f409, 0xba1d3330, 0x83d2f293, 0xbfa4784b, 0xcbed606e};
  for (int i = 0; i < 6; i++) {
    uint32_t got = gc_rng_u32(&r);
    CHECK(got == want[i], "pcg32 output %d: %08x != %08x", i, got, want[i]);
  }
  gc_rng_t a, b;
  gc_rng_seed(&a, 7);
  gc_rng_seed(&b, 7);
  int same = 1;
  for (int i = 0; i < 100; i++) same &= gc_rng_u32(&a) == gc_rng_u32(&b);
  CHECK(same, "same seed, same stream");
  /* gcore's seeding (fixed stream) and one sampled sequence, pinned: the
   * same seed must give the same tokens on every platform and build */
  gc_rng_seed(&a, 42);
  const uint32_t seeded[4] = {0x637fb995, 0x71178965, 0x1c8cd136, 0xc72ddb41};
  for (int i = 0; i < 4; i++) {
    uint32_t got = gc_rng_u32(&a);
    CHECK(got == seeded[i], "seed 42 output %d: %08x != %08x", i, got, seeded[i]);
  }
  gc_sampler_t *s = mk_sampler(8, 1.0f, 0, 1.0f, 0.0f, 42);
  float l[8] = {0, 1, 2, 3, 0.5f, 1.5f, 2.5f, -1};
  const int want_tok[16] = {3, 3, 2, 6, 6, 3, 3, 6, 3, 3, 5, 3, 1, 5, 3, 2};
  for (int i = 0; i < 16; i++) {
    int t;
    gc_err_t e = {0};
    gc_sampler_sample(s, l, &t, &e);
    CHECK(t == want_tok[i], "sampled token %d: %d != %d", i, t, want_tok[i]);
  }
  gc_sampler_free(s);
  double u = gc_rng_uniform(&a);
  CHECK(u >= 0 && u < 1, "uniform range");
}

static void test_sampler_greedy(void) {
  float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 1.9f};
  CHECK(gc_sampler_argmax(l, 6) == 1, "argmax ties to lowest id");
  float nan1[2] = {NAN, NAN};
  CHECK(gc_sampler_argmax(nan1, 2) == -1 && gc_sampler_argmax(l, 0) == -1, "argmax of nothing");
  gc_sampler_t *s = mk_sampler(6, 0.0f, 0, 1.0f, 0.0f, 0);
  gc_err_t e = {0};
  int tok;
  CHECK_RC(gc_sampler_sample(s, l, &tok, &e), GC_OK, e);
  CHECK(tok == 1, "greedy %d", tok);
  float neg[6] = {-INFINITY, -INFINITY, -INFINITY, NAN, -INFINITY, -INFINITY};
  CHECK_RC(gc_sampler_sample(s, neg, &tok, &e), GC_EINVAL, e);
  gc_sampler_free(s);
  /* top_k = 1 with temperature equals greedy on random rows */
  enum { V = 1000 };
  static float row[V];
  gc_sampler_t *k1 = mk_sampler(V, 1.3f, 1, 1.0f, 0.0f, 99);
  int agree = 1;
  for (int it = 0; it < 200; it++) {
    for (int i = 0; i < V; i++) row[i] = (float)(rnd() % 2000) / 100.0f - 10.0f; /* many ties */
    int g = gc_sampler_argmax(row, V), t;
    gc_sampler_sample(k1, row, &t, &e);
    agree &= g == t;
  }
  CHECK(agree, "top_k 1 == greedy");
  gc_sampler_free(k1);
  /* +inf dominates */
  gc_sampler_t *t1 = mk_sampler(3, 1.0f, 0, 1.0f, 0.0f, 1);
  float inf[3] = {1.0f, INFINITY, INFINITY};
  CHECK(gc_sampler_sample(t1, inf, &tok, &e) == GC_OK && tok == 1, "+inf");
  gc_sampler_free(t1);
}

/* gc_logprobs against log-softmax in long double over random rows with
 * ties, NaN and -inf; the top in order (ties to the lower id); the edges. */
static void test_logprobs(void) {
  enum { V = 777 };
  static float row[V];
  gc_logprob_t top[GC_LOGPROBS_MAX];
  int ok = 1, order = 1;
  for (int it = 0; it < 50; it++) {
    for (int i = 0; i < V; i++) row[i] = (float)(rnd() % 4000) / 100.0f - 20.0f; /* ties */
    row[rnd() % V] = NAN, row[rnd() % V] = -INFINITY;
    long double m = -INFINITY, z = 0;
    for (int i = 0; i < V; i++)
      if (!isnan(row[i]) && row[i] > m) m = row[i];
    for (int i = 0; i < V; i++)
      if (!isnan(row[i])) z += expl((long double)row[i] - m);
    int id = (int)(rnd() % V), ntop = it % (GC_LOGPROBS_MAX + 1);
    float lp;
    int got = gc_logprobs(row, V, id, ntop, &lp, top);
    long double want = isnan(row[id]) || row[id] == -INFINITY ? -INFINITY : row[id] - m - logl(z);
    ok &= got == ntop && (isinf(want) ? lp == -INFINITY : fabsl(lp - want) <= 1e-5L);
    /* the top: the ntop largest, in order, ties to the lower id */
    for (int k = 0; k < got; k++) {
      int better = 0;
      for (int i = 0; i < V; i++)
        better += !isnan(row[i]) && (row[i] > row[top[k].id] || (row[i] == row[top[k].id] && i < top[k].id));
      order &= better == k && fabsl(top[k].lp - (row[top[k].id] - m - logl(z))) <= 1e-5L;
    }
  }
  CHECK(ok, "logprobs match log-softmax");
  CHECK(order, "top ids in order, ties to the lower id");
  float few[4] = {NAN, 1.0f, -INFINITY, 1.0f}, lp;
  CHECK(gc_logprobs(few, 4, 3, 5, &lp, top) == 2 && top[0].id == 1 && top[1].id == 3 &&
        fabsf(lp - logf(0.5f)) < 1e-6f && fabsf(top[0].lp - logf(0.5f)) < 1e-6f, "fewer finite logits than asked");
  CHECK(gc_logprobs(few, 4, 2, 1, &lp, top) == 1 && lp == -INFINITY, "an id at -inf");
  CHECK(gc_logprobs(few, 4, 0, 0, &lp, top) == 0 && lp == -INFINITY, "a NaN id, no top");
  float none[2] = {NAN, -INFINITY};
  CHECK(gc_logprobs(none, 2, 0, 3, &lp, top) == 0 && lp == -INFINITY, "nothing finite");
  float inf[3] = {INFINITY, 5.0f, INFINITY};
  CHECK(gc_logprobs(inf, 3, 2, 3, &lp, top) == 3 && fabsf(lp - logf(0.5f)) < 1e-6f && top[1].id == 2 &&
        top[2].lp == -INFINITY, "+inf shares the probability");
}

static void test_sampler_determinism(void) {
  enum { V = 5000 };
  static float row[V];
  for (int i = 0; i < V; i++) row[i] = (float)((i * 7919) % 1000) / 250.0f;
  int seqs[3][64];
  uint64_t seeds[3] = {42, 42, 43};
  for (int r = 0; r < 3; r++) {
    gc_sampler_t *s = mk_sampler(V, 0.8f, 40, 0.95f, 0.05f, seeds[r]);
    for (int i = 0; i < 64; i++) {
      gc_err_t e = {0};
      gc_sampler_sample(s, row, &seqs[r][i], &e);
      gc_sampler_accept(s, seqs[r][i]);
    }
    gc_sampler_free(s);
  }
  CHECK(!memcmp(seqs[0], seqs[1], sizeof seqs[0]), "same seed, same tokens");
  CHECK(memcmp(seqs[0], seqs[2], sizeof seqs[0]) != 0, "another seed, other tokens");
  /* reset restarts the stream */
  gc_sampler_t *s = mk_sampler(V, 1.0f, 0, 1.0f, 0.0f, 5);
  int a[16], b[16];
  gc_err_t e = {0};
  for (int i = 0; i < 16; i++) gc_sampler_sample(s, row, &a[i], &e);
  gc_sampler_reset(s, 5);
  for (int i = 0; i < 16; i++) gc_sampler_sample(s, row, &b[i], &e);
  CHECK(!memcmp(a, b, sizeof a), "reset");
  gc_sampler_free(s);
}

/* Counts of each of the 5 tokens over many draws. */
static void draw_counts(gc_sampler_t *s, const float *l, int *cnt, int n) {
  memset(cnt, 0, 5 * sizeof *cnt);
  for (int i = 0; i < n; i++) {
    int t;
    gc_err_t e = {0};
    if (gc_sampler_sample(s, l, &t, &e) == GC_OK && t >= 0 && t < 5) cnt[t]++;
  }
}

static void test_sampler_sets(void) {
  /* p = 0.5, 0.3, 0.15, 0.05, 0 (id 4 is -inf), shuffled ids */
  float l[5];
  l[2] = logf(0.5f), l[0] = logf(0.3f), l[4] = logf(0.15f), l[1] = logf(0.05f), l[3] = -INFINITY;
  int c[5];
  gc_sampler_t *s;
  s = mk_sampler(5, 1.0f, 0, 1.0f, 0.0f, 1);
  draw_counts(s, l, c, 20000);
  CHECK(fabs(c[2] / 20000.0 - 0.5) < 0.02 && fabs(c[0] / 20000.0 - 0.3) < 0.02 &&
            fabs(c[4] / 20000.0 - 0.15) < 0.02 && fabs(c[1] / 20000.0 - 0.05) < 0.01 && c[3] == 0,
        "untruncated frequencies %d %d %d %d %d", c[0], c[1], c[2], c[3], c[4]);
  gc_sampler_free(s);
  s = mk_sampler(5, 1.0f, 0, 0.7f, 0.0f, 2);
  draw_counts(s, l, c, 4000);
  CHECK(c[2] > 0 && c[0] > 0 && c[4] == 0 && c[1] == 0, "top_p 0.7 keeps {2,0}: %d %d %d %d", c[2], c[0], c[4], c[1]);
  CHECK(fabs(c[2] / 4000.0 - 0.625) < 0.04, "renormalised within the nucleus");
  gc_sampler_free(s);
  s = mk_sampler(5, 1.0f, 0, 0.9f, 0.0f, 3);
  draw_counts(s, l, c, 4000);
  CHECK(c[2] > 0 && c[0] > 0 && c[4] > 0 && c[1] == 0, "top_p 0.9 keeps {2,0,4}");
  gc_sampler_free(s);
  s = mk_sampler(5, 1.0f, 0, 0.4f, 0.0f, 4);
  draw_counts(s, l, c, 1000);
  CHECK(c[2] == 1000, "top_p 0.4 keeps only the best");
  gc_sampler_free(s);
  s = mk_sampler(5, 1.0f, 0, 1.0f, 0.25f, 5);
  draw_counts(s, l, c, 4000);
  CHECK(c[2] > 0 && c[0] > 0 && c[4] > 0 && c[1] == 0, "min_p 0.25 keeps p >= 0.125: %d %d %d %d", c[2], c[0], c[4],
        c[1]);
  gc_sampler_free(s);
  s = mk_sampler(5, 1.0f, 0, 1.0f, 0.5f, 6);
  draw_counts(s, l, c, 4000);
  CHECK(c[2] > 0 && c[0] > 0 && c[4] == 0, "min_p 0.5 keeps p >= 0.25");
  gc_sampler_free(s);
  s = mk_sampler(5, 1.0f, 2, 1.0f, 0.0f, 7);
  draw_counts(s, l, c, 4000);
  CHECK(c[2] > 0 && c[0] > 0 && c[4] == 0 && c[1] == 0, "top_k 2");
  gc_sampler_free(s);
  /* top-k then top-p renormalises over the k: {2,0} -> 0.625, 0.375 */
  s = mk_sampler(5, 1.0f, 2, 0.6f, 0.0f, 8);
  draw_counts(s, l, c, 1000);
  CHECK(c[2] == 1000, "top_p after top_k uses the k's probabilities");
  gc_sampler_free(s);
  /* low temperature sharpens, high flattens */
  s = mk_sampler(5, 0.2f, 0, 1.0f, 0.0f, 9);
  draw_counts(s, l, c, 4000);
  CHECK(c[2] > 3600, "temperature 0.2 sharpens: %d", c[2]);
  gc_sampler_free(s);
  /* a large vocabulary exercises the top-p prefilter */
  enum { V = 50000 };
  static float big[V];
  for (int i = 0; i < V; i++) big[i] = -20.0f;
  big[777] = 5.0f, big[12345] = 5.0f - logf(2.0f), big[3] = 5.0f - logf(4.0f);
  s = mk_sampler(V, 1.0f, 0, 0.8f, 0.0f, 10);
  int hits[3] = {0, 0, 0}, other = 0;
  for (int i = 0; i < 2000; i++) {
    int t;
    gc_err_t e = {0};
    gc_sampler_sample(s, big, &t, &e);
    if (t == 777) hits[0]++;
    else if (t == 12345) hits[1]++;
    else if (t == 3) hits[2]++;
    else other++;
  }
  CHECK(hits[0] > 0 && hits[1] > 0 && hits[2] == 0 && other == 0, "prefiltered nucleus %d %d %d %d", hits[0], hits[1],
        hits[2], other);
  gc_sampler_free(s);
}

static void test_sampler_penalty(void) {
  gc_sampler_params_t p;
  gc_sampler_params_default(&p);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  gc_sampler_t *s;
  gc_err_t e = {0};
  CHECK_RC(gc_sampler_create(4, &p, &s, &e), GC_OK, e);
  int tok;
  float pos[4] = {2.0f, 1.5f, 0.0f, -3.0f};
  gc_sampler_accept(s, 0); /* 2.0 -> 1.0: token 1 wins */
  gc_sampler_sample(s, pos, &tok, &e);
  CHECK(tok == 1, "positive logit divided: %d", tok);
  gc_sampler_accept(s, 0); /* counted once: still 1.0 */
  gc_sampler_sample(s, pos, &tok, &e);
  CHECK(tok == 1, "distinct tokens penalised once: %d", tok);
  float neg[4] = {-1.0f, -1.5f, -9.0f, -9.0f};
  gc_sampler_reset(s, 0);
  gc_sampler_accept(s, 0); /* -1.0 -> -2.0: token 1 wins */
  gc_sampler_sample(s, neg, &tok, &e);
  CHECK(tok == 1, "negative logit multiplied: %d", tok);
  gc_sampler_accept(s, 2);
  gc_sampler_accept(s, 3); /* window of 2 forgets token 0 */
  gc_sampler_sample(s, neg, &tok, &e);
  CHECK(tok == 0, "window %d", tok);
  gc_sampler_accept(s, 99); /* outside the vocabulary: ignored */
  gc_sampler_accept(s, -1);
  CHECK(gc_sampler_sample(s, neg, &tok, &e) == GC_OK && tok == 0, "bad ids ignored");
  gc_sampler_free(s);
  /* parameter checks */
  struct {
    float t, tp, mp, pen;
    int last_n, vocab;
  } bad[] = {{-1, 1, 0, 1, 64, 10}, {NAN, 1, 0, 1, 64, 10}, {1, 0, 0, 1, 64, 10}, {1, 1.5f, 0, 1, 64, 10},
             {1, 1, -0.1f, 1, 64, 10}, {1, 1, 0, 0, 64, 10}, {1, 1, 0, 1, -1, 10}, {1, 1, 0, 1, 64, 0}};
  for (size_t i = 0; i < GC_ARRAY_LEN(bad); i++) {
    gc_sampler_params_default(&p);
    p.temperature = bad[i].t, p.top_p = bad[i].tp, p.min_p = bad[i].mp, p.repeat_penalty = bad[i].pen;
    p.repeat_last_n = bad[i].last_n;
    gc_sampler_t *x = NULL;
    CHECK_RC(gc_sampler_create(bad[i].vocab, &p, &x, &e), GC_EINVAL, e);
    CHECK(x == NULL, "no sampler");
  }
}

/* gcore's own RoPE frequencies (gc_llama_inv_freq, what the forward pass
 * rotates by), with Llama 3.1 8B's scaling (head_dim 128, theta 5e5,
 * factor 8, low 1, high 4, original 8192) as Hugging Face's
 * _compute_llama3_parameters gives it: wavelengths under 8192/4 kept, over
 * 8192 divided by 8, the band between interpolated. The numbers pinned were
 * computed with transformers' formula; tests/test_models_units.py's
 * test_llama3_inv_freq checks only the numpy reference's copy of it. */
static void test_rope_inv_freq(void) {
  gc_llama_config_t c = {0};
  c.head_dim = 128, c.rope_theta = 500000.0;
  double base[64], got[64];
  gc_llama_inv_freq(&c, base);
  CHECK(base[0] == 1.0 && fabs(base[32] / 0.001414213562373095 - 1) < 1e-12, "unscaled: %.17g %.17g", base[0],
        base[32]);
  c.rope_scaling = GC_ROPE_SCALING_LLAMA3;
  c.rope_factor = 8, c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_max_seq = 8192;
  gc_llama_inv_freq(&c, got);
  int kept = 0, divided = 0, between = 0;
  for (int j = 0; j < 64; j++) {
    double wavelen = 2 * M_PI / base[j];
    if (wavelen < 8192 / 4.0) kept += got[j] == base[j];
    else if (wavelen > 8192) divided += got[j] == base[j] / 8;
    else between += got[j] < base[j] && got[j] > base[j] / 8;
  }
  CHECK(kept == 29 && divided == 29 && between == 6, "kept %d, divided %d, between %d (want 29, 29, 6)", kept,
        divided, between);
  static const struct { int j; double want; } pinned[] = {
      {28, 0.0032114459947525913}, {29, 0.002166570763503359}, {32, 0.0005248461609929547},
      {34, 0.00017850781276799638}, {35, 9.556212353964683e-05}, {63, 3.068925988914511e-07}};
  for (size_t i = 0; i < GC_ARRAY_LEN(pinned); i++)
    CHECK(fabs(got[pinned[i].j] / pinned[i].want - 1) < 1e-12, "inv_freq[%d] %.17g, want %.17g", pinned[i].j,
          got[pinned[i].j], pinned[i].want);
  c.rope_factor = 1; /* factor 1 changes nothing */
  gc_llama_inv_freq(&c, got);
  int same = 0;
  for (int j = 0; j < 64; j++) same += fabs(got[j] - base[j]) <= 1e-15 * base[j];
  CHECK(same == 64, "factor 1: %d of 64 unchanged", same);
  /* GGUF's form: each frequency divided by its factor from rope_freqs.weight */
  c.rope_scaling = GC_ROPE_SCALING_FACTORS, c.n_rope_factors = 64;
  for (int j = 0; j < 64; j++) c.rope_factors[j] = (float)(1 + j % 3);
  gc_llama_inv_freq(&c, got);
  same = 0;
  for (int j = 0; j < 64; j++) same += got[j] == base[j] / (1 + j % 3);
  CHECK(same == 64, "factors: %d of 64 divided", same);
}

/* A winner for p on target sm_90a with the given median (its own variant). */
static void put_winner(gc_db_t *db, const gc_problem_t *p, double median_us) {
  static int serial;
  gc_err_t e = {0};
  char vid[32];
  int64_t dev = 0, cc = 0, pid = 0, var = 0;
  int found = 0;
  gc_db_device_t d = {"cuda", "sm_90", "test", "test", 1, 1};
  snprintf(vid, sizeof vid, "v%d", serial++);
  gc_db_variant_t v = {vid, "tpl", "h", "", "f16", "sm_90a", 0};
  CHECK(gc_db_device_id(db, &d, &dev, &e) == GC_OK && gc_db_compiler_id(db, "nvrtc", "13", "", &cc, &e) == GC_OK,
        "%s", e.msg);
  v.compiler_id = cc;
  CHECK(gc_db_problem_id(db, p, &pid, &e) == GC_OK && gc_db_variant_id(db, &v, &var, &e) == GC_OK, "%s", e.msg);
  gc_db_measurement_t m = {.device_id = dev, .problem_id = pid, .variant_id = var, .status = "ok",
                           .median_us = median_us, .min_us = median_us, .max_us = median_us, .iters = 1};
  CHECK(gc_db_record(db, &m, &e) == GC_OK, "%s", e.msg);
  CHECK(gc_db_pick_winner(db, dev, pid, "sm_90a", NULL, 0.0, &found, &e) == GC_OK && found, "%s", e.msg);
}

/* gc_db_retime (gcore-tune's finalists run again): a slower second run
 * leaves the time, a faster one replaces it, and a failure takes the
 * variant out of the finalists and of the winners gcore-gen reads. */
static void test_db_retime(void) {
  gc_err_t e = {0};
  gc_db_t *db = NULL;
  char path[512];
  snprintf(path, sizeof path, "%s/retime.db", g_tmp);
  CHECK(gc_db_open(path, 1, &db, &e) == GC_OK, "%s", e.msg);
  gc_problem_t p = {"gemm", GC_DT_F16, GC_DT_F16, GC_DT_F16, 1, 64, 64, 0, 0, 0};
  put_winner(db, &p, 10.0); /* device, compiler and problem 1 of a new database */
  gc_db_finalist_t f[3];
  int got = 0, found = 0;
  CHECK(gc_db_finalists(db, 1, 1, "sm_90a", 1, ",h,", NULL, f, 3, &got, &e) == GC_OK && got == 1 &&
            f[0].median_us == 10.0 && !strcmp(f[0].template_name, "tpl"),
        "one finalist of 10 us: %d, %s", got, e.msg);
  gc_db_measurement_t m = {.status = "ok", .median_us = 12, .min_us = 11, .max_us = 13, .iters = 9, .max_err = 0.5};
  CHECK(gc_db_retime(db, f[0].measurement_id, &m, &e) == GC_OK, "%s", e.msg);
  gc_db_finalists(db, 1, 1, "sm_90a", 1, ",h,", NULL, f, 3, &got, &e);
  CHECK(got == 1 && f[0].median_us == 10.0, "a slower second run keeps 10 us: %g", f[0].median_us);
  sqlite3 *sq = NULL; /* and the larger verification error */
  sqlite3_stmt *st = NULL;
  double err = -1;
  if (sqlite3_open(path, &sq) == SQLITE_OK &&
      sqlite3_prepare_v2(sq, "SELECT max_err FROM measurements", -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    err = sqlite3_column_double(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(sq);
  CHECK(err == 0.5, "the second run's larger error kept: %g", err);
  m.median_us = 4;
  CHECK(gc_db_retime(db, f[0].measurement_id, &m, &e) == GC_OK, "%s", e.msg);
  gc_db_finalists(db, 1, 1, "sm_90a", 1, ",h,", NULL, f, 3, &got, &e);
  CHECK(got == 1 && f[0].median_us == 4.0, "a faster second run gives 4 us: %g", f[0].median_us);
  gc_db_winner_t w;
  CHECK(gc_db_find_winner(db, "sm_90a", &p, &w, &found, &e) == GC_OK && found && w.median_us == 4.0,
        "the winner at 4 us: %d %g", found, w.median_us);
  m = (gc_db_measurement_t){.status = "verify-failed", .detail = "when run again: wrong", .max_err = 3};
  CHECK(gc_db_retime(db, f[0].measurement_id, &m, &e) == GC_OK, "%s", e.msg);
  gc_db_finalists(db, 1, 1, "sm_90a", 1, ",h,", NULL, f, 3, &got, &e);
  CHECK(got == 0, "a failed second run leaves no finalist: %d", got);
  CHECK(gc_db_find_winner(db, "sm_90a", &p, &w, &found, &e) == GC_OK && !found, "nor a winner");
  gc_db_close(db);
}

/* Winners for both prefill plans of a pass of t tokens: a quantized step
 * q_per_row·t µs, a gather g µs, a dense step t/5 µs. */
static void put_plans(gc_db_t *db, const gc_llama_config_t *c, gc_llama_dtypes_t *dt, int64_t t, double q_per_row,
                      double g) {
  for (int deq = 0; deq < 2; deq++) {
    gc_llama_steps_t s;
    dt->deq_rows = deq;
    gc_llama_steps(c, dt, t, 1, &s);
    for (int l = 0; l < c->n_layers; l++) {
      gc_llama_layer_steps(dt, l, &s);
      const gc_problem_t *ps[4] = {&s.qkv, &s.wo, &s.swiglu, &s.w2};
      for (int i = 0; i < 4; i++) {
        put_winner(db, ps[i], gc_dtype_is_block(ps[i]->tb) ? q_per_row * (double)t : (double)t / 5);
        if (s.dq[i].op[0]) put_winner(db, &s.dq[i], g);
      }
    }
  }
  dt->deq_rows = 0;
}

/* The recipe tests' model: 2 layers of D 64, F 128, 4 heads of 16 (2 KV
 * heads), vocabulary 256, max_seq positions; fp16 activations, weights,
 * embedding and head (the layers' dtypes are each test's). */
static void recipe_model(int max_seq, gc_llama_config_t *c, gc_llama_dtypes_t *dt) {
  *c = (gc_llama_config_t){0};
  c->dim = 64, c->hidden_dim = 128, c->n_layers = 2, c->n_heads = 4, c->n_kv_heads = 2, c->head_dim = 16;
  c->vocab_size = 256, c->max_seq = max_seq;
  *dt = (gc_llama_dtypes_t){0};
  dt->act = dt->weight = dt->embed = dt->head = GC_DT_F16;
}

/* The dense prefill plan (recipe.h): which steps it changes, and the
 * crossover gc_llama_deq_measure reads from winners' timings. */
static void test_recipe_dense_plan(void) {
  gc_llama_config_t c;
  gc_llama_dtypes_t dt;
  recipe_model(512, &c, &dt);
  dt.layer[0] = (gc_llama_layer_dtypes_t){GC_DT_Q4_0, GC_DT_Q4_0, GC_DT_Q4_0, GC_DT_Q4_0, GC_DT_Q4_0, 0};
  dt.layer[1] = (gc_llama_layer_dtypes_t){GC_DT_F16, GC_DT_Q4_0, GC_DT_Q4_0, GC_DT_Q4_0, GC_DT_F16, 0}; /* a dense stack */
  gc_llama_steps_t s;
  dt.deq_rows = 16;
  gc_llama_steps(&c, &dt, 15, 1, &s);
  CHECK(!s.deq && s.qkv.tb == GC_DT_Q4_0 && !s.dq[0].op[0], "15 tokens: the quantized plan");
  gc_llama_steps(&c, &dt, 16, 1, &s);
  CHECK(s.deq && s.qkv.tb == GC_DT_F16 && s.swiglu.tb == GC_DT_F16, "16 tokens: the dense plan");
  CHECK(!strcmp(s.dq[2].op, "embed") && s.dq[2].tb == GC_DT_Q4_0 && s.dq[2].m == 256 && s.dq[2].n == 64 &&
            s.dq[2].k == 256,
        "w13's gather: all 2F rows of D: m %lld n %lld k %lld", (long long)s.dq[2].m, (long long)s.dq[2].n,
        (long long)s.dq[2].k);
  CHECK(s.dq[3].m == 64 && s.dq[3].n == 128, "w2's gather: D rows of F");
  gc_llama_layer_steps(&dt, 1, &s);
  CHECK(!s.dq[0].op[0] && s.qkv.tb == GC_DT_F16 && s.dq[1].op[0], "a dense layer step has no gather");
  dt.deq_rows = 4;
  gc_llama_steps(&c, &dt, 8, 1, &s);
  CHECK(!s.deq, "fused passes (8 tokens) never take it");
  dt.deq_rows = 0;

  gc_err_t e = {0};
  int64_t rows = -1;
  int timed = -1;
  char path[512];
  snprintf(path, sizeof path, "%s/plan.db", g_tmp);
  CHECK(gc_llama_deq_measure(&c, &dt, path, "sm_90a", 77, &rows, &timed, &e) == GC_OK && rows == 77 && timed == 0,
        "no database: the default (%lld, %d)", (long long)rows, timed);
  gc_db_t *db;
  CHECK(gc_db_open(path, 1, &db, &e) == GC_OK, "%s", e.msg);
  /* a quantized step t µs, a gather 20: the dense plan loses at 16, wins
     at 64 and 256 */
  put_plans(db, &c, &dt, 16, 1.0, 20);
  put_plans(db, &c, &dt, 64, 1.0, 20);
  put_plans(db, &c, &dt, 256, 1.0, 20);
  gc_db_close(db);
  CHECK(gc_llama_deq_measure(&c, &dt, path, "sm_90a", 77, &rows, &timed, &e) == GC_OK, "%s", e.msg);
  CHECK(rows == 64 && timed == 3, "crossover at 64: got %lld of %d timed", (long long)rows, timed);
  CHECK(gc_llama_deq_measure(&c, &dt, path, "sm_80", 77, &rows, &timed, &e) == GC_OK && rows == 77 && timed == 0,
        "another target's timings do not count");
  /* quantized steps cheaper at the longest length: never */
  CHECK(gc_db_open(path, 1, &db, &e) == GC_OK, "%s", e.msg);
  put_plans(db, &c, &dt, 512, 0.01, 20);
  gc_db_close(db);
  CHECK(gc_llama_deq_measure(&c, &dt, path, "sm_90a", 77, &rows, &timed, &e) == GC_OK && rows == 0 && timed == 4,
        "the quantized plan wins at the longest: %lld", (long long)rows);
}

/* A layer whose wv has another block format than wq|wk (Q4_K_M's Q6_K
 * attn_v) splits its QKV step (recipe.h); one in one format stacks it. */
static void test_recipe_split_qkv(void) {
  gc_llama_config_t c;
  gc_llama_dtypes_t dt;
  recipe_model(64, &c, &dt);
  dt.layer[0] = (gc_llama_layer_dtypes_t){GC_DT_Q4_K, GC_DT_Q6_K, GC_DT_Q4_K, GC_DT_Q6_K, GC_DT_Q6_K, 1}; /* split */
  dt.layer[1] = (gc_llama_layer_dtypes_t){GC_DT_Q4_K, GC_DT_Q4_K, GC_DT_Q4_K, GC_DT_Q4_K, GC_DT_Q4_K, 0};
  const int64_t qk = (4 + 2) * 16, v = 2 * 16;
  gc_llama_steps_t s;
  gc_llama_steps(&c, &dt, 1, 1, &s); /* a decode step: V's row lands past Q|K's, no join */
  CHECK(!strcmp(s.qkv.op, "rmsnorm_gemm") && s.qkv.n == qk && s.qkv.tb == GC_DT_Q4_K && !s.qkv_rope,
        "decode: Q|K %s n %lld", s.qkv.op, (long long)s.qkv.n);
  CHECK(!strcmp(s.qkv_v.op, "rmsnorm_gemm") && s.qkv_v.n == v && s.qkv_v.k == 64 && s.qkv_v.tb == GC_DT_Q6_K &&
        !s.cat.op[0], "decode: V %s n %lld", s.qkv_v.op, (long long)s.qkv_v.n);
  gc_llama_layer_steps(&dt, 1, &s); /* one format: one stacked step again */
  CHECK(s.qkv.n == qk + v && !s.qkv_v.op[0] && !s.cat.op[0], "layer 1: n %lld", (long long)s.qkv.n);
  gc_llama_steps(&c, &dt, 5, 1, &s); /* a pass of 5 rows: joined */
  CHECK(s.qkv.n == qk && s.qkv_v.m == 5 && !strcmp(s.cat.op, "concat") && s.cat.m == 5 && s.cat.n == qk + v &&
        s.cat.k == qk && s.cat.ta == GC_DT_F16, "5 rows: %s m %lld n %lld k %lld", s.cat.op, (long long)s.cat.m,
        (long long)s.cat.n, (long long)s.cat.k);
  gc_llama_batch_steps(&c, &dt, 1, &s); /* a batched step of one row: rows of their own, joined */
  CHECK(!strcmp(s.cat.op, "concat") && s.cat.m == 1 && !s.qkv_rope, "batched: %s", s.cat.op);
  dt.deq_rows = 16;
  gc_llama_steps(&c, &dt, 16, 1, &s); /* the dense plan: both parts into the scratch, one dense step */
  CHECK(s.deq && s.qkv.n == qk + v && s.qkv.tb == GC_DT_F16 && !s.qkv_v.op[0] && !s.cat.op[0], "dense plan");
  CHECK(!strcmp(s.dq[0].op, "embed") && s.dq[0].tb == GC_DT_Q4_K && s.dq[0].m == qk && s.dq[0].n == 64 &&
            !strcmp(s.dq[4].op, "embed") && s.dq[4].tb == GC_DT_Q6_K && s.dq[4].m == v && s.dq[4].n == 64,
        "the gathers: %lld and %lld rows", (long long)s.dq[0].m, (long long)s.dq[4].m);
}

/* Qwen2's q/k/v biases (cfg.qkv_bias): a single sequence's passes fold
 * them into rope (bias_rope_kv, in act:weight dtypes; no bias step), and
 * the decode step's RoPE stays apart from the QKV GEMV (the GEMV's
 * epilogue does not add them); batched decode steps keep a bias step
 * before rope_kv_batch; no bias without. Qwen3's q/k norms (cfg.qk_norm)
 * the same way (qk_norm_rope_kv, a qk_norm step when batched). */
static void test_recipe_bias(void) {
  gc_llama_config_t c;
  gc_llama_dtypes_t dt;
  recipe_model(64, &c, &dt);
  dt.act = GC_DT_F32;
  gc_llama_steps_t s;
  gc_llama_steps(&c, &dt, 1, 1, &s);
  CHECK(!s.bias.op[0] && s.qkv_rope && !strcmp(s.qkv.op, "rmsnorm_gemm_rope_kv"), "llama decode: %s", s.qkv.op);
  c.qkv_bias = 1;
  for (int64_t t = 1; t <= 20; t += 19) { /* the decode step: the biases in the QKV GEMV's epilogue */
    gc_llama_steps(&c, &dt, t, 1, &s);
    CHECK(!s.bias.op[0] && !strcmp(s.rope.op, "bias_rope_kv") && s.rope.m == t && s.rope.h == 4 &&
              s.rope.g == 2 && s.rope.d == 16 && s.rope.ta == GC_DT_F32 && s.rope.tb == GC_DT_F16 &&
              s.rope.tc == GC_DT_F32 && s.qkv_rope == (t == 1) &&
              !strcmp(s.qkv.op, t == 1 ? "rmsnorm_gemm_bias_rope_kv" : "gemm") && s.qkv.h == (t == 1 ? 4 : 0),
          "qwen2, %lld tokens: bias %s, rope %s m %lld, qkv %s", (long long)t, s.bias.op, s.rope.op,
          (long long)s.rope.m, s.qkv.op);
  }
  dt.layer[0].qkv = GC_DT_Q8_0; /* a block format: the GEMV's epilogue has no bias, rope folds it */
  gc_llama_steps(&c, &dt, 1, 1, &s);
  CHECK(!s.qkv_rope && !strcmp(s.qkv.op, "rmsnorm_gemm") && !strcmp(s.rope.op, "bias_rope_kv"), "qwen2 q8_0: %s",
        s.qkv.op);
  dt.layer[0].qkv = dt.weight;
  gc_llama_batch_steps(&c, &dt, 3, &s);
  CHECK(!strcmp(s.bias.op, "bias") && s.bias.m == 3 && s.bias.n == (4 + 2 * 2) * 16 && s.bias.tb == GC_DT_F16 &&
            !strcmp(s.rope.op, "rope_kv_batch"),
        "batched: %s m %lld, rope %s", s.bias.op, (long long)s.bias.m, s.rope.op);
  gc_problems_t l = {0};
  gc_err_t e = {0};
  CHECK_RC(gc_llama_recipe(&c, &dt, 1, 1, &l, &e), GC_OK, e);
  int steps[4] = {0}; /* bias, rope_kv, bias_rope_kv, rmsnorm_gemm_bias_rope_kv */
  for (int i = 0; i < l.n; i++)
    steps[0] += !strcmp(l.v[i].op, "bias"), steps[1] += !strcmp(l.v[i].op, "rope_kv"),
        steps[2] += !strcmp(l.v[i].op, "bias_rope_kv"), steps[3] += !strcmp(l.v[i].op, "rmsnorm_gemm_bias_rope_kv");
  CHECK(!steps[0] && !steps[1] && !steps[2] && steps[3] >= 1,
        "the decode recipe lists bias %d, rope_kv %d, bias_rope_kv %d, rmsnorm_gemm_bias_rope_kv %d", steps[0],
        steps[1], steps[2], steps[3]);
  gc_problems_free(&l);
  c.qkv_bias = 0, c.qk_norm = 1; /* Qwen3: the heads' norms in their place, the same way */
  gc_llama_steps(&c, &dt, 1, 1, &s);
  CHECK(!s.bias.op[0] && !s.qk_norm.op[0] && !strcmp(s.rope.op, "qk_norm_rope_kv") && s.rope.m == 1 &&
            s.rope.h == 4 && s.rope.g == 2 && s.rope.d == 16 && s.rope.tb == GC_DT_F16 && !s.qkv_rope,
        "qwen3 decode: %s %s", s.qk_norm.op, s.rope.op);
  gc_llama_batch_steps(&c, &dt, 5, &s);
  CHECK(!strcmp(s.qk_norm.op, "qk_norm") && s.qk_norm.m == 5 && !strcmp(s.rope.op, "rope_kv_batch"),
        "qwen3 batched");
  c.qkv_bias = 1; /* both (no model has them): each a step of its own, in the forward's order */
  gc_llama_steps(&c, &dt, 1, 1, &s);
  CHECK(!strcmp(s.bias.op, "bias") && !strcmp(s.qk_norm.op, "qk_norm") && !strcmp(s.rope.op, "rope_kv") &&
            !s.qkv_rope,
        "both: %s %s %s", s.bias.op, s.qk_norm.op, s.rope.op);
}

/* gc_llama_shard: each rank's heads, KV heads and FFN rows, the LM head's
 * vocabulary rows (the last shares padded where tp does not divide them);
 * the embedding and argmax stay whole; one-line errors naming what tp
 * does not divide. */
static void test_recipe_shard(void) {
  gc_llama_config_t c = {0}, s;
  c.dim = 64, c.hidden_dim = 172, c.n_layers = 2, c.n_heads = 8, c.n_kv_heads = 4, c.head_dim = 8;
  c.vocab_size = 512, c.max_seq = 64;
  gc_err_t e = {0};
  CHECK(gc_llama_shard(&c, 2, &s, &e) == GC_OK, "%s", e.msg);
  CHECK(s.n_heads == 4 && s.n_kv_heads == 2 && s.hidden_dim == 86 && s.tp == 2 && s.dim == 64 &&
        s.vocab_size == 512 && s.head_dim == 8);
  gc_llama_dtypes_t dt = {0};
  dt.act = dt.weight = dt.embed = dt.head = GC_DT_F32;
  for (int l = 0; l < 2; l++) dt.layer[l] = (gc_llama_layer_dtypes_t){GC_DT_F32, GC_DT_F32, GC_DT_F32, GC_DT_F32, GC_DT_F32, 0};
  gc_llama_steps_t st;
  gc_llama_steps(&s, &dt, 16, 1, &st); /* unfused: a pass of 16 tokens */
  CHECK(st.qkv.n == (4 + 2 * 2) * 8 && st.qkv.k == 64, "qkv n %lld k %lld", (long long)st.qkv.n, (long long)st.qkv.k);
  CHECK(st.rope.h == 4 && st.rope.g == 2 && st.attn.h == 4 && st.attn.g == 2);
  CHECK(st.wo.n == 64 && st.wo.k == 32, "wo n %lld k %lld", (long long)st.wo.n, (long long)st.wo.k);
  CHECK(st.swiglu.n == 86 && st.swiglu.k == 64 && st.w2.n == 64 && st.w2.k == 86);
  CHECK(st.head.n == 256 && st.head.k == 64 && st.head.m == 1, "head n %lld", (long long)st.head.n);
  CHECK(st.embed.k == 512 && st.argmax.n == 512, "embed and argmax span the whole vocabulary");
  CHECK(gc_llama_shard(&c, 1, &s, &e) == GC_OK && s.n_heads == 8 && gc_llama_head_rows(&s) == 512);
  CHECK(gc_llama_shard(&c, 4, &s, &e) == GC_OK && s.hidden_dim == 43 && gc_llama_head_rows(&s) == 128);
  CHECK(gc_llama_shard(&s, 2, &s, &e) == GC_EINVAL);
  CHECK_MSG(e, "--tp 2: the config is already a shard of 4");
  CHECK(gc_llama_shard(&c, 3, &s, &e) == GC_EINVAL);
  CHECK_MSG(e, "--tp 3: 8 attention heads are not divisible by 3");
  CHECK(gc_llama_shard(&c, 8, &s, &e) == GC_EINVAL);
  CHECK_MSG(e, "--tp 8: 4 KV heads are not divisible by 8");
  c.hidden_dim = 170;
  CHECK(gc_llama_shard(&c, 4, &s, &e) == GC_EINVAL);
  CHECK_MSG(e, "--tp 4: 170 FFN rows (intermediate_size) are not divisible by 4");
  c.hidden_dim = 172, c.vocab_size = 511; /* a vocabulary tp does not divide: the last share padded */
  CHECK(gc_llama_shard(&c, 2, &s, &e) == GC_OK && gc_llama_head_rows(&s) == 256 && s.vocab_size == 511);
  gc_llama_steps(&s, &dt, 16, 1, &st);
  CHECK(st.head.n == 256 && st.embed.k == 511 && st.argmax.n == 511, "head n %lld", (long long)st.head.n);
  c.vocab_size = 5; /* four ranks of 2 rows: the third holds one of the vocabulary's, the fourth none */
  CHECK(gc_llama_shard(&c, 4, &s, &e) == GC_OK && gc_llama_head_rows(&s) == 2);
  CHECK(gc_llama_shard(&c, 0, &s, &e) == GC_EINVAL);
  CHECK_MSG(e, "--tp 0: expected 1 to 64 ranks");
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *d = getenv("GCORE_SHARED_DATA");
  if (d && *d) g_data = d;
  snprintf(g_tmp, sizeof g_tmp, "%s/gc_test_models.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_tmp)) {
    CHECK(0, "harness: mkdtemp %s", g_tmp);
    return check_report();
  }
  if (argc > 1 && !strcmp(argv[1], "shared")) { /* the cases on the third-party checkpoint */
    int rc;
    if (access(stories_path(), R_OK)) {
      rc = check_skip("%s is absent (set GCORE_SHARED_DATA)", stories_path());
    } else {
      check_case("stories_header", test_stories_header);
      check_case("stories_weights", test_stories_weights);
      check_case("llama2c_sizes", test_llama2c_sizes);
      rc = check_report();
    }
    nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
  }
  check_case("llama2c_untied_layout", test_llama2c_untied_layout);
  check_case("recipe_device_layouts", test_recipe_device_layouts);
  check_case("st_valid", test_st_valid);
  check_case("st_broken", test_st_broken);
  check_case("st_sharded", test_st_sharded);
  check_case("st_fuzz", test_st_fuzz);
  check_case("config_hf", test_config_hf);
  check_case("config_refused", test_config_refused);
  check_case("config_llama2c", test_config_llama2c);
  check_case("config_fuzz", test_config_fuzz);
  check_case("rope_inv_freq", test_rope_inv_freq);
  check_case("recipe_shard", test_recipe_shard);
  check_case("recipe_dense_plan", test_recipe_dense_plan);
  check_case("db_retime", test_db_retime);
  check_case("recipe_split_qkv", test_recipe_split_qkv);
  check_case("recipe_bias", test_recipe_bias);
  check_case("weights_hf", test_weights_hf);
  check_case("weights_hf_broken", test_weights_hf_broken);
  check_case("alloc_faults", test_alloc_faults);
  check_case("rng_pcg32", test_rng_pcg32);
  check_case("sampler_greedy", test_sampler_greedy);
  check_case("logprobs", test_logprobs);
  check_case("sampler_determinism", test_sampler_determinism);
  check_case("sampler_sets", test_sampler_sets);
  check_case("sampler_penalty", test_sampler_penalty);
  nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return check_report();
}
