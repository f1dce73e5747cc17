/* llama_config.c — parses Hugging Face config.json (json-c) and llama2.c
 * headers into gc_llama_config_t. Defaults follow transformers'
 * LlamaConfig where a field is absent; any declared feature gcore does not
 * implement is refused by name rather than silently ignored. */
#include "llama_config.h"

#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CFG_MAX_BYTES (4u * 1024u * 1024u)

/* ------------------------------------------------------- JSON accessors */

/* The value of key, or NULL when absent or JSON null. */
static struct json_object *cfg_get(struct json_object *o, const char *key) {
  struct json_object *v = NULL;
  if (!o || !json_object_object_get_ex(o, key, &v)) return NULL;
  if (json_object_is_type(v, json_type_null)) return NULL;
  return v;
}

static const char *cfg_type_name(struct json_object *v) {
  return json_type_to_name(json_object_get_type(v));
}

/* Integer field; absent/null gives def when !required. */
static int cfg_int(struct json_object *o, const char *key, int required, int def,
                   int *out, const char *what, gc_err_t *e) {
  struct json_object *v = cfg_get(o, key);
  if (!v) {
    if (required) return gc_err_set(e, GC_ECORRUPT, "%s: missing required field '%s'", what, key);
    *out = def;
    return GC_OK;
  }
  if (!json_object_is_type(v, json_type_int))
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' must be an integer, got %s", what, key, cfg_type_name(v));
  int64_t x = json_object_get_int64(v);
  if (x < INT_MIN || x > INT_MAX)
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' = %lld is out of range", what, key, (long long)x);
  *out = (int)x;
  return GC_OK;
}

/* Number field (integer or real); absent/null gives def when !required. */
static int cfg_num(struct json_object *o, const char *key, int required, double def,
                   double *out, const char *what, gc_err_t *e) {
  struct json_object *v = cfg_get(o, key);
  if (!v) {
    if (required) return gc_err_set(e, GC_ECORRUPT, "%s: missing required field '%s'", what, key);
    *out = def;
    return GC_OK;
  }
  if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' must be a number, got %s", what, key, cfg_type_name(v));
  *out = json_object_get_double(v);
  if (!isfinite(*out)) return gc_err_set(e, GC_ECORRUPT, "%s: '%s' is not finite", what, key);
  return GC_OK;
}

static int cfg_bool(struct json_object *o, const char *key, int def, int *out,
                    const char *what, gc_err_t *e) {
  struct json_object *v = cfg_get(o, key);
  if (!v) {
    *out = def;
    return GC_OK;
  }
  if (!json_object_is_type(v, json_type_boolean))
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' must be true or false, got %s", what, key, cfg_type_name(v));
  *out = json_object_get_boolean(v) ? 1 : 0;
  return GC_OK;
}

/* String field or NULL when absent/null; wrong type is an error. */
static int cfg_str(struct json_object *o, const char *key, const char **out,
                   const char *what, gc_err_t *e) {
  struct json_object *v = cfg_get(o, key);
  *out = NULL;
  if (!v) return GC_OK;
  if (!json_object_is_type(v, json_type_string))
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' must be a string, got %s", what, key, cfg_type_name(v));
  *out = json_object_get_string(v);
  return GC_OK;
}

/* ------------------------------------------------------------ features */

/* "WHAT: unsupported config: " + fmt_detail, whose one %s is val, read
 * from the file and so quoted (gc_quote). */
static int cfg_unsupported(gc_err_t *e, const char *what, const char *fmt_detail, const char *val) {
  char detail[256], q[GC_QUOTE_BUF];
  snprintf(detail, sizeof detail, fmt_detail, gc_quote(val, GC_QSTR, q, sizeof q));
  return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: %s", what, detail);
}

/* The Hugging Face model types gcore runs: llama; qwen2 (the llama layer
 * with biases on q_proj, k_proj and v_proj) and qwen3 (with each query and
 * key head RMS-normalised before RoPE), whose sliding_window means nothing
 * unless use_sliding_window is true (refused). */
static const struct { const char *type, *arch; int qkv_bias, qk_norm, sw_flag; } cfg_kinds[] = {
    {"llama", "LlamaForCausalLM", 0, 0, 0},
    {"qwen2", "Qwen2ForCausalLM", 1, 0, 1},
    {"qwen3", "Qwen3ForCausalLM", 0, 1, 1},
};

/* model_type one of cfg_kinds (*kind its index), architectures only its
 * class. */
static int cfg_model_kind(struct json_object *o, int *kind, const char *what, gc_err_t *e) {
  const char *mt;
  int rc = cfg_str(o, "model_type", &mt, what, e);
  if (rc) return rc;
  if (!mt)
    return gc_err_set(e, GC_ECORRUPT, "%s: missing 'model_type' (expected \"llama\", \"qwen2\" or \"qwen3\")", what);
  *kind = -1;
  for (int i = 0; i < (int)GC_ARRAY_LEN(cfg_kinds); i++)
    if (!strcmp(mt, cfg_kinds[i].type)) *kind = i;
  if (*kind < 0) return cfg_unsupported(e, what, "model_type %s (gcore supports llama, qwen2 and qwen3)", mt);
  const char *cls = cfg_kinds[*kind].arch;
  struct json_object *ar = cfg_get(o, "architectures");
  if (!ar) return GC_OK;
  if (!json_object_is_type(ar, json_type_array))
    return gc_err_set(e, GC_ECORRUPT, "%s: 'architectures' must be a list, got %s", what, cfg_type_name(ar));
  for (size_t i = 0; i < json_object_array_length(ar); i++) {
    struct json_object *a = json_object_array_get_idx(ar, i);
    if (!a || !json_object_is_type(a, json_type_string))
      return gc_err_set(e, GC_ECORRUPT, "%s: architectures[%zu] is not a string", what, i);
    if (strcmp(json_object_get_string(a), cls) != 0) {
      char fmt[96];
      snprintf(fmt, sizeof fmt, "architectures %%s (gcore supports %s for model_type %s)", cls, mt);
      return cfg_unsupported(e, what, fmt, json_object_get_string(a));
    }
  }
  return GC_OK;
}

/* Flags and options of the HF Llama family that change the math. Qwen's
 * sliding_window and max_window_layers mean nothing unless
 * use_sliding_window is true (refused). */
static int cfg_refuse_features(struct json_object *o, int kind, const char *what, gc_err_t *e) {
  const char *act;
  int rc = cfg_str(o, "hidden_act", &act, what, e);
  if (rc) return rc;
  if (act && strcmp(act, "silu") != 0)
    return cfg_unsupported(e, what, "hidden_act %s (gcore supports silu)", act);
  static const char *const bias_flags[] = {"attention_bias", "mlp_bias", "use_sliding_window"};
  for (size_t i = 0; i < GC_ARRAY_LEN(bias_flags); i++) {
    int b = 0;
    rc = cfg_bool(o, bias_flags[i], 0, &b, what, e);
    if (rc) return rc;
    if (b) return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: %s true", what, bias_flags[i]);
  }
  int tp = 1;
  rc = cfg_int(o, "pretraining_tp", 0, 1, &tp, what, e);
  if (rc) return rc;
  if (tp > 1) return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: pretraining_tp %d (gcore supports 1)", what, tp);
  if (!cfg_kinds[kind].sw_flag && cfg_get(o, "sliding_window"))
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: sliding_window (gcore attends "
                      "to the whole context)", what);
  if (cfg_get(o, "quantization_config"))
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: quantization_config "
                      "(quantized checkpoints)", what);
  double prf = 1.0;
  rc = cfg_num(o, "partial_rotary_factor", 0, 1.0, &prf, what, e);
  if (rc) return rc;
  if (prf != 1.0)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: partial_rotary_factor %g (gcore supports 1)", what, prf);
  return GC_OK;
}

/* rope_scaling (transformers 4.x) or rope_parameters (5.x). */
static int cfg_rope(struct json_object *o, gc_llama_config_t *c, const char *what, gc_err_t *e) {
  const char *sec = "rope_scaling";
  struct json_object *rs = cfg_get(o, "rope_scaling");
  struct json_object *rp = cfg_get(o, "rope_parameters");
  if (rp && !json_object_is_type(rp, json_type_object))
    return gc_err_set(e, GC_ECORRUPT, "%s: 'rope_parameters' must be an object, got %s", what, cfg_type_name(rp));
  int rc = cfg_num(o, "rope_theta", 0, 10000.0, &c->rope_theta, what, e);
  if (rc) return rc;
  if (!cfg_get(o, "rope_theta") && rp) {
    rc = cfg_num(rp, "rope_theta", 0, 10000.0, &c->rope_theta, what, e);
    if (rc) return rc;
  }
  if (!rs && rp) {
    rs = rp;
    sec = "rope_parameters";
  }
  c->rope_scaling = GC_ROPE_SCALING_NONE;
  if (!rs) return GC_OK;
  if (!json_object_is_type(rs, json_type_object))
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' must be an object or null, got %s", what, sec, cfg_type_name(rs));
  const char *key = "rope_type", *type;
  char q[GC_QUOTE_BUF];
  rc = cfg_str(rs, key, &type, what, e);
  if (rc) return rc;
  if (!type) {
    key = "type";
    rc = cfg_str(rs, key, &type, what, e);
    if (rc) return rc;
  }
  if (!type || strcmp(type, "default") == 0) return GC_OK;
  char w[512];
  if (strcmp(type, "linear") == 0) { /* positions divided by the factor */
    c->rope_scaling = GC_ROPE_SCALING_LINEAR;
    snprintf(w, sizeof w, "%s: %s (linear)", what, sec);
    return cfg_num(rs, "factor", 1, 0, &c->rope_factor, w, e);
  }
  if (strcmp(type, "llama3") != 0)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: %s.%s %s (gcore supports llama3 and linear)",
                      what, sec, key, gc_quote(type, GC_QSTR, q, sizeof q));
  c->rope_scaling = GC_ROPE_SCALING_LLAMA3;
  snprintf(w, sizeof w, "%s: %s (llama3)", what, sec);
  if ((rc = cfg_num(rs, "factor", 1, 0, &c->rope_factor, w, e)) ||
      (rc = cfg_num(rs, "low_freq_factor", 1, 0, &c->rope_low_freq_factor, w, e)) ||
      (rc = cfg_num(rs, "high_freq_factor", 1, 0, &c->rope_high_freq_factor, w, e)))
    return rc;
  return cfg_int(rs, "original_max_position_embeddings", 1, 0, &c->rope_original_max_seq, w, e);
}

static int cfg_token_ids(struct json_object *o, gc_llama_config_t *c, const char *what, gc_err_t *e) {
  struct json_object *v = NULL;
  /* Absent: LlamaConfig's defaults (1, 2). Explicit null: none. */
  if (!json_object_object_get_ex(o, "bos_token_id", &v)) {
    c->bos_id = 1;
  } else if (json_object_is_type(v, json_type_null)) {
    c->bos_id = -1;
  } else {
    int rc = cfg_int(o, "bos_token_id", 1, 0, &c->bos_id, what, e);
    if (rc) return rc;
  }
  c->n_eos = 0;
  if (!json_object_object_get_ex(o, "eos_token_id", &v)) {
    c->eos_ids[c->n_eos++] = 2;
    return GC_OK;
  }
  if (json_object_is_type(v, json_type_null)) return GC_OK;
  if (json_object_is_type(v, json_type_int)) return cfg_int(o, "eos_token_id", 1, 0, &c->eos_ids[c->n_eos++], what, e);
  if (!json_object_is_type(v, json_type_array))
    return gc_err_set(e, GC_ECORRUPT, "%s: 'eos_token_id' must be an integer or a list, got %s", what, cfg_type_name(v));
  size_t n = json_object_array_length(v);
  if (n > GC_LLAMA_MAX_EOS)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: %zu eos_token_id values (at most %d)", what, n, GC_LLAMA_MAX_EOS);
  for (size_t i = 0; i < n; i++) {
    struct json_object *x = json_object_array_get_idx(v, i);
    if (!x || !json_object_is_type(x, json_type_int) || json_object_get_int64(x) < 0 ||
        json_object_get_int64(x) > INT_MAX)
      return gc_err_set(e, GC_ECORRUPT, "%s: eos_token_id[%zu] is not a token id", what, i);
    c->eos_ids[c->n_eos++] = (int)json_object_get_int64(x);
  }
  return GC_OK;
}

static int cfg_dtype(struct json_object *o, gc_llama_config_t *c, const char *what, gc_err_t *e) {
  const char *key = "torch_dtype", *s;
  char q[GC_QUOTE_BUF];
  int rc = cfg_str(o, key, &s, what, e);
  if (rc) return rc;
  if (!s) {
    key = "dtype";
    if ((rc = cfg_str(o, key, &s, what, e))) return rc;
  }
  c->dtype = GC_ST_F32;
  if (!s || strcmp(s, "float32") == 0) return GC_OK;
  if (strcmp(s, "float16") == 0) c->dtype = GC_ST_F16;
  else if (strcmp(s, "bfloat16") == 0) c->dtype = GC_ST_BF16;
  else
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: %s %s (gcore supports float32, float16, bfloat16)",
                      what, key, gc_quote(s, GC_QSTR, q, sizeof q));
  return GC_OK;
}

static int cfg_dims(struct json_object *o, gc_llama_config_t *c, const char *what, gc_err_t *e) {
  int rc;
  if ((rc = cfg_int(o, "hidden_size", 1, 0, &c->dim, what, e)) ||
      (rc = cfg_int(o, "intermediate_size", 1, 0, &c->hidden_dim, what, e)) ||
      (rc = cfg_int(o, "num_hidden_layers", 1, 0, &c->n_layers, what, e)) ||
      (rc = cfg_int(o, "num_attention_heads", 1, 0, &c->n_heads, what, e)) ||
      (rc = cfg_int(o, "num_key_value_heads", 0, c->n_heads, &c->n_kv_heads, what, e)) ||
      (rc = cfg_int(o, "vocab_size", 1, 0, &c->vocab_size, what, e)) ||
      (rc = cfg_int(o, "max_position_embeddings", 0, 2048, &c->max_seq, what, e)) ||
      (rc = cfg_num(o, "rms_norm_eps", 0, 1e-6, &c->rms_norm_eps, what, e)) ||
      (rc = cfg_bool(o, "tie_word_embeddings", 0, &c->tie_word_embeddings, what, e)))
    return rc;
  if (c->n_heads <= 0)
    return gc_err_set(e, GC_ECORRUPT, "%s: num_attention_heads %d must be positive", what, c->n_heads);
  if (cfg_get(o, "head_dim")) return cfg_int(o, "head_dim", 1, 0, &c->head_dim, what, e);
  if (c->dim % c->n_heads != 0)
    return gc_err_set(e, GC_ECORRUPT, "%s: hidden_size %d is not divisible by num_attention_heads %d (and no head_dim given)",
                      what, c->dim, c->n_heads);
  c->head_dim = c->dim / c->n_heads;
  return GC_OK;
}

/* ----------------------------------------------------------------- API */

int gc_llama_config_parse_hf(const char *text, size_t n, const char *what,
                             gc_llama_config_t *c, gc_err_t *e) {
  memset(c, 0, sizeof *c);
  if (!what) what = "config.json";
  if (n > CFG_MAX_BYTES) return gc_err_set(e, GC_ECORRUPT, "%s: %zu bytes is too large for a config", what, n);
  if (memchr(text, '\0', n)) return gc_err_set(e, GC_ECORRUPT, "%s: contains a NUL byte; not JSON", what);
  struct json_tokener *tok = json_tokener_new_ex(32);
  if (!tok) return gc_err_set(e, GC_ENOMEM, "out of memory (JSON tokenizer)");
  struct json_object *o = json_tokener_parse_ex(tok, text, (int)n);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  json_tokener_free(tok);
  if (!o || jerr != json_tokener_success || !json_object_is_type(o, json_type_object)) {
    if (o) json_object_put(o);
    return gc_err_set(e, GC_ECORRUPT, "%s: not a JSON object%s%s", what, jerr != json_tokener_success ? ": " : "",
                      jerr == json_tokener_success ? ""
                      : jerr == json_tokener_continue ? "unexpected end"
                                                      : json_tokener_error_desc(jerr));
  }
  int rc, kind = 0;
  if (!(rc = cfg_model_kind(o, &kind, what, e)) && !(rc = cfg_refuse_features(o, kind, what, e)) &&
      !(rc = cfg_dims(o, c, what, e)) && !(rc = cfg_rope(o, c, what, e)) && !(rc = cfg_token_ids(o, c, what, e)))
    rc = cfg_dtype(o, c, what, e);
  json_object_put(o);
  if (rc) return rc;
  c->rope_layout = GC_ROPE_HALVES;
  c->qkv_bias = cfg_kinds[kind].qkv_bias;
  c->qk_norm = cfg_kinds[kind].qk_norm;
  c->weight_dtype = c->dtype;
  if (gc_llama_config_check(c, e) != GC_OK) { /* from a file: corrupt */
    if (e) {
      e->code = GC_ECORRUPT;
      gc_err_prefix(e, "%s", what);
    }
    return GC_ECORRUPT;
  }
  return GC_OK;
}

int gc_llama_config_load_hf(const char *dir, gc_llama_config_t *c, gc_err_t *e) {
  memset(c, 0, sizeof *c);
  size_t dl = strlen(dir);
  char *path = gc_aprintf(e, "%s%sconfig.json", dir, dl && dir[dl - 1] == '/' ? "" : "/");
  if (!path) return GC_ENOMEM;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    int rc = gc_err_set(e, GC_ENOTFOUND, "%s: not found (a Hugging Face model directory has a config.json)", path);
    free(path);
    return rc;
  }
  char *text = NULL;
  size_t n = 0;
  int rc = gc_read_file(path, CFG_MAX_BYTES, &text, &n, e);
  if (!rc) rc = gc_llama_config_parse_hf(text, n, path, c, e);
  free(text);
  free(path);
  return rc;
}

int gc_llama_config_from_llama2c(const int32_t hdr[7], gc_llama_config_t *c, gc_err_t *e) {
  memset(c, 0, sizeof *c);
  static const char *const names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (int i = 0; i < 7; i++)
    if (hdr[i] == 0 || (hdr[i] < 0 && i != 5) || hdr[i] == INT32_MIN)
      return gc_err_set(e, GC_ECORRUPT, "llama2.c header: %s = %d is not a positive size", names[i], (int)hdr[i]);
  c->dim = hdr[0];
  c->hidden_dim = hdr[1];
  c->n_layers = hdr[2];
  c->n_heads = hdr[3];
  c->n_kv_heads = hdr[4];
  c->vocab_size = hdr[5] < 0 ? -hdr[5] : hdr[5];
  c->tie_word_embeddings = hdr[5] > 0;
  c->max_seq = hdr[6];
  if (c->dim % c->n_heads != 0)
    return gc_err_set(e, GC_ECORRUPT, "llama2.c header: dim %d is not divisible by n_heads %d", c->dim, c->n_heads);
  c->head_dim = c->dim / c->n_heads;
  c->rms_norm_eps = 1e-5;
  c->rope_theta = 10000.0;
  c->rope_scaling = GC_ROPE_SCALING_NONE;
  c->rope_layout = GC_ROPE_PAIRS;
  c->bos_id = 1;
  c->n_eos = 1;
  c->eos_ids[0] = 2;
  c->dtype = GC_ST_F32;
  c->weight_dtype = GC_ST_F32;
  if (gc_llama_config_check(c, e) != GC_OK) {
    if (e) {
      e->code = GC_ECORRUPT;
      gc_err_prefix(e, "llama2.c header");
    }
    return GC_ECORRUPT;
  }
  return GC_OK;
}

static int cfg_bound(gc_err_t *e, const char *name, int v, int max) {
  if (v <= 0 || v > max) return gc_err_set(e, GC_EINVAL, "%s = %d is outside 1..%d", name, v, max);
  return GC_OK;
}

int gc_llama_config_check(const gc_llama_config_t *c, gc_err_t *e) {
  int rc;
  if ((rc = cfg_bound(e, "hidden_size", c->dim, GC_LLAMA_MAX_DIM)) ||
      (rc = cfg_bound(e, "intermediate_size", c->hidden_dim, GC_LLAMA_MAX_HIDDEN)) ||
      (rc = cfg_bound(e, "num_hidden_layers", c->n_layers, GC_LLAMA_MAX_LAYERS)) ||
      (rc = cfg_bound(e, "num_attention_heads", c->n_heads, GC_LLAMA_MAX_HEADS)) ||
      (rc = cfg_bound(e, "num_key_value_heads", c->n_kv_heads, GC_LLAMA_MAX_HEADS)) ||
      (rc = cfg_bound(e, "head_dim", c->head_dim, GC_LLAMA_MAX_HEAD_DIM)) ||
      (rc = cfg_bound(e, "vocab_size", c->vocab_size, GC_LLAMA_MAX_VOCAB)) ||
      (rc = cfg_bound(e, "max_position_embeddings", c->max_seq, GC_LLAMA_MAX_SEQ)))
    return rc;
  if (c->n_heads % c->n_kv_heads != 0)
    return gc_err_set(e, GC_EINVAL, "num_attention_heads %d is not a multiple of num_key_value_heads %d",
                      c->n_heads, c->n_kv_heads);
  if (c->head_dim % 2 != 0) return gc_err_set(e, GC_EINVAL, "head_dim %d must be even for RoPE", c->head_dim);
  if ((int64_t)c->n_heads * c->head_dim > GC_LLAMA_MAX_HIDDEN)
    return gc_err_set(e, GC_EINVAL, "num_attention_heads * head_dim = %lld is too large",
                      (long long)c->n_heads * c->head_dim);
  if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
    return gc_err_set(e, GC_EINVAL, "rms_norm_eps %g must be in (0, 1)", c->rms_norm_eps);
  if (!(c->rope_theta > 0 && isfinite(c->rope_theta)))
    return gc_err_set(e, GC_EINVAL, "rope_theta %g must be positive", c->rope_theta);
  if (c->rope_scaling == GC_ROPE_SCALING_LLAMA3) {
    if (!(c->rope_factor > 0 && isfinite(c->rope_factor)))
      return gc_err_set(e, GC_EINVAL, "rope_scaling.factor %g must be positive", c->rope_factor);
    if (!(c->rope_low_freq_factor > 0 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
          isfinite(c->rope_high_freq_factor)))
      return gc_err_set(e, GC_EINVAL, "rope_scaling needs 0 < low_freq_factor < high_freq_factor (got %g, %g)",
                        c->rope_low_freq_factor, c->rope_high_freq_factor);
    if (c->rope_original_max_seq <= 0)
      return gc_err_set(e, GC_EINVAL, "rope_scaling.original_max_position_embeddings %d must be positive",
                        c->rope_original_max_seq);
  } else if (c->rope_scaling == GC_ROPE_SCALING_LINEAR) {
    if (!(c->rope_factor > 0 && isfinite(c->rope_factor)))
      return gc_err_set(e, GC_EINVAL, "linear rope scaling factor %g must be positive", c->rope_factor);
  } else if (c->rope_scaling == GC_ROPE_SCALING_FACTORS) {
    if (c->n_rope_factors != c->head_dim / 2)
      return gc_err_set(e, GC_EINVAL, "%d rope frequency factors for head_dim %d (expected %d)", c->n_rope_factors,
                        c->head_dim, c->head_dim / 2);
    for (int i = 0; i < c->n_rope_factors; i++)
      if (!(c->rope_factors[i] > 0 && isfinite(c->rope_factors[i])))
        return gc_err_set(e, GC_EINVAL, "rope frequency factor %d is %g, not a positive number", i,
                          (double)c->rope_factors[i]);
  } else if (c->rope_scaling != GC_ROPE_SCALING_NONE) {
    return gc_err_set(e, GC_EINVAL, "unknown rope scaling %d", (int)c->rope_scaling);
  }
  if (c->rope_layout != GC_ROPE_HALVES && c->rope_layout != GC_ROPE_PAIRS)
    return gc_err_set(e, GC_EINVAL, "unknown rope layout %d", (int)c->rope_layout);
  if (c->bos_id < -1 || c->bos_id >= c->vocab_size)
    return gc_err_set(e, GC_EINVAL, "bos_token_id %d is outside the vocabulary (%d)", c->bos_id, c->vocab_size);
  if (c->n_eos < 0 || c->n_eos > GC_LLAMA_MAX_EOS) return gc_err_set(e, GC_EINVAL, "n_eos %d out of range", c->n_eos);
  for (int i = 0; i < c->n_eos; i++)
    if (c->eos_ids[i] < 0 || c->eos_ids[i] >= c->vocab_size)
      return gc_err_set(e, GC_EINVAL, "eos_token_id %d is outside the vocabulary (%d)", c->eos_ids[i], c->vocab_size);
  return GC_OK;
}

void gc_llama_config_describe(const gc_llama_config_t *c, char *buf, size_t n) {
  if (!n) return;
  char rs[128] = "";
  if (c->rope_scaling == GC_ROPE_SCALING_LLAMA3)
    snprintf(rs, sizeof rs, " llama3(factor %g, low %g, high %g, orig %d)", c->rope_factor,
             c->rope_low_freq_factor, c->rope_high_freq_factor, c->rope_original_max_seq);
  else if (c->rope_scaling == GC_ROPE_SCALING_LINEAR)
    snprintf(rs, sizeof rs, " linear(factor %g)", c->rope_factor);
  else if (c->rope_scaling == GC_ROPE_SCALING_FACTORS)
    snprintf(rs, sizeof rs, " factors(%g .. %g)", (double)c->rope_factors[0],
             (double)c->rope_factors[c->n_rope_factors - 1]);
  snprintf(buf, n,
           "llama: dim %d, ffn %d, layers %d, heads %d (kv %d, head_dim %d), vocab %d, max_seq %d, "
           "eps %g, rope theta %g%s %s, %s classifier, %s%s%s",
           c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size, c->max_seq,
           c->rms_norm_eps, c->rope_theta, rs, c->rope_layout == GC_ROPE_PAIRS ? "pairs" : "halves",
           c->tie_word_embeddings ? "tied" : "separate", gc_st_dtype_name(c->weight_dtype),
           c->qkv_bias ? ", q/k/v biases" : "", c->qk_norm ? ", q/k norms" : "");
}

/* ----------------------------------------------------------------- GGUF */

/* An integer key in [lo, hi]; absent gives def, or an error when required. */
static int gg_int(const gc_gguf_t *g, const char *key, int required, int def, int lo, int hi, int *out,
                  gc_err_t *e) {
  int64_t v;
  int rc = gc_gguf_get_int(g, key, &v, e);
  if (rc == GC_ENOTFOUND && !required) {
    *out = def;
    return GC_OK;
  }
  if (rc == GC_ENOTFOUND)
    return gc_err_set(e, GC_ECORRUPT, "%s: no '%s' (gcore needs it)", gc_gguf_path(g), key);
  if (rc) return rc;
  if (v < lo || v > hi)
    return gc_err_set(e, GC_ECORRUPT, "%s: '%s' = %lld is outside %d..%d", gc_gguf_path(g), key, (long long)v, lo, hi);
  *out = (int)v;
  return GC_OK;
}

/* gg_int for a key llama.cpp reads as a number or as one per layer
 * (head_count, head_count_kv, feed_forward_length): an array of n_layers
 * integers is taken when every layer has the same value; different values
 * a layer are refused (gcore's layers are one shape). */
static int gg_int_layers(const gc_gguf_t *g, const char *key, int required, int def, int lo, int hi, int n_layers,
                         int *out, gc_err_t *e) {
  const gc_gguf_kv_t *kv = gc_gguf_find(g, key);
  if (!kv || kv->type != GC_GGUF_ARRAY) return gg_int(g, key, required, def, lo, hi, out, e);
  int32_t *v = NULL;
  uint64_t n = 0;
  int rc = gc_gguf_get_i32s(g, key, &v, &n, e);
  if (rc) return rc;
  if (n != (uint64_t)n_layers)
    rc = gc_err_set(e, GC_ECORRUPT, "%s: '%s' has %llu entries for %d layers", gc_gguf_path(g), key,
                    (unsigned long long)n, n_layers);
  for (uint64_t i = 1; !rc && i < n; i++)
    if (v[i] != v[0])
      rc = gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: '%s' differs between layers (%d in layer 0, %d in "
                      "layer %llu); gcore runs layers of one shape", gc_gguf_path(g), key, v[0], v[i],
                      (unsigned long long)i);
  if (!rc && (v[0] < lo || v[0] > hi))
    rc = gc_err_set(e, GC_ECORRUPT, "%s: '%s' = %d is outside %d..%d", gc_gguf_path(g), key, v[0], lo, hi);
  if (!rc) *out = v[0];
  free(v);
  return rc;
}

static int gg_num(const gc_gguf_t *g, const char *key, int required, double def, double *out, gc_err_t *e) {
  int rc = gc_gguf_get_num(g, key, out, e);
  if (rc == GC_ENOTFOUND && !required) {
    *out = def;
    return GC_OK;
  }
  if (rc == GC_ENOTFOUND)
    return gc_err_set(e, GC_ECORRUPT, "%s: no '%s' (gcore needs it)", gc_gguf_path(g), key);
  if (!rc && !isfinite(*out)) return gc_err_set(e, GC_ECORRUPT, "%s: '%s' is not finite", gc_gguf_path(g), key);
  return rc;
}

static int gg_str_is(gc_gguf_str_t s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.p, lit, s.n); }

/* The GGUF architectures gcore runs: llama; qwen2 (llama.cpp's
 * LLM_ARCH_QWEN2: the llama layer with biases on q, k and v) and qwen3
 * (with per-head norms of q and k), both with Q and K not permuted, so
 * RoPE rotates halves as NEOX does. Every model key is written under the
 * architecture's name ("qwen2.block_count"). */
static const struct { const char *name; int qkv_bias, qk_norm; gc_rope_layout_t layout; } gg_archs[] = {
    {"llama", 0, 0, GC_ROPE_PAIRS},
    {"qwen2", 1, 0, GC_ROPE_HALVES},
    {"qwen3", 0, 1, GC_ROPE_HALVES},
};

#define GG_KEY 96

/* "ARCH.suffix" into buf[GG_KEY]. */
static const char *gg_key(char *buf, const char *arch, const char *suffix) {
  snprintf(buf, GG_KEY, "%s.%s", arch, suffix);
  return buf;
}

/* general.architecture must be one of gg_archs (*arch its index); what
 * llama.cpp's models may declare that gcore does not run is refused by
 * name, as is one part of a model split by llama-gguf-split (split.count
 * parts, each with its share of the tensors). */
static int gg_refuse(const gc_gguf_t *g, int *arch, gc_err_t *e) {
  const char *p = gc_gguf_path(g);
  gc_gguf_str_t s;
  char k[GG_KEY];
  int parts, part, rc;
  if ((rc = gg_int(g, "split.count", 0, 1, 0, INT_MAX, &parts, e)) ||
      (rc = gg_int(g, "split.no", 0, 0, 0, INT_MAX, &part, e)))
    return rc;
  if (parts > 1)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: part %d of a model split into %d files; gcore reads a model from one "
                      "file: merge the parts with llama.cpp's `llama-gguf-split --merge FIRST-PART OUT.gguf`", p,
                      part + 1, parts);
  int n;
  rc = gc_gguf_get_str(g, "general.architecture", &s, e);
  if (rc == GC_ENOTFOUND) return gc_err_set(e, GC_ECORRUPT, "%s: no 'general.architecture'", p);
  if (rc) return rc;
  *arch = -1;
  for (int i = 0; i < (int)GC_ARRAY_LEN(gg_archs); i++)
    if (gg_str_is(s, gg_archs[i].name)) *arch = i;
  if (*arch < 0)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported model: general.architecture %s (gcore runs llama, "
                      "qwen2 and qwen3)", p, gc_quote(s.p, (size_t)s.n, (char[GC_QUOTE_BUF]){0}, GC_QUOTE_BUF));
  if ((rc = gg_int(g, gg_key(k, gg_archs[*arch].name, "expert_count"), 0, 0, 0, INT_MAX, &n, e))) return rc;
  if (n > 0)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported model: %s %d (mixture of experts)", p, k, n);
  return GC_OK;
}

/* llama.cpp's RoPE scaling keys: rope.scaling.type none or linear (with
 * rope.scaling.factor), a factor with no type (linear to llama.cpp; 0 and
 * 1: none), or the older rope.scale_linear (the same factor). Linear
 * scaling on top of rope_freqs.weight factors is refused. */
static int gg_rope(const gc_gguf_t *g, const char *a, gc_llama_config_t *c, gc_err_t *e) {
  const char *p = gc_gguf_path(g);
  gc_gguf_str_t s;
  char k[GG_KEY];
  int rc = gc_gguf_get_str(g, gg_key(k, a, "rope.scaling.type"), &s, e), typed = !rc;
  if (rc && rc != GC_ENOTFOUND) return rc;
  if (typed && !gg_str_is(s, "none") && !gg_str_is(s, "linear"))
    return gc_err_set(e, GC_EUNSUPPORTED,
                      "%s: unsupported config: %s.rope.scaling.type %s (gcore supports none, linear, and llama3 "
                      "scaling as rope_freqs.weight)", p, a, gc_quote(s.p, (size_t)s.n, (char[GC_QUOTE_BUF]){0},
                                                                   GC_QUOTE_BUF));
  double lin, factor;
  if ((rc = gg_num(g, gg_key(k, a, "rope.scale_linear"), 0, 1.0, &lin, e)) ||
      (rc = gg_num(g, gg_key(k, a, "rope.scaling.factor"), 0, lin, &factor, e)))
    return rc;
  int linear = (!typed || gg_str_is(s, "linear")) && factor != 1.0 && factor != 0.0; /* 0: none, as llama.cpp */
  if (!linear) return GC_OK;
  if (c->rope_scaling == GC_ROPE_SCALING_FACTORS)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: linear rope scaling and rope_freqs.weight together",
                      p);
  c->rope_scaling = GC_ROPE_SCALING_LINEAR;
  c->rope_factor = factor;
  return GC_OK;
}

static int gg_dims(const gc_gguf_t *g, const char *a, gc_llama_config_t *c, gc_err_t *e) {
  const char *p = gc_gguf_path(g);
  char k[GG_KEY];
  int rc, kl, vl, rot;
  if ((rc = gg_int(g, gg_key(k, a, "embedding_length"), 1, 0, 1, GC_LLAMA_MAX_DIM, &c->dim, e)) ||
      (rc = gg_int(g, gg_key(k, a, "block_count"), 1, 0, 1, GC_LLAMA_MAX_LAYERS, &c->n_layers, e)) ||
      (rc = gg_int_layers(g, gg_key(k, a, "feed_forward_length"), 1, 0, 1, GC_LLAMA_MAX_HIDDEN, c->n_layers,
                          &c->hidden_dim, e)) ||
      (rc = gg_int_layers(g, gg_key(k, a, "attention.head_count"), 1, 0, 1, GC_LLAMA_MAX_HEADS, c->n_layers,
                          &c->n_heads, e)) ||
      (rc = gg_int_layers(g, gg_key(k, a, "attention.head_count_kv"), 0, c->n_heads, 1, GC_LLAMA_MAX_HEADS,
                          c->n_layers, &c->n_kv_heads, e)) ||
      (rc = gg_int(g, gg_key(k, a, "context_length"), 1, 0, 1, GC_LLAMA_MAX_SEQ, &c->max_seq, e)) ||
      (rc = gg_num(g, gg_key(k, a, "attention.layer_norm_rms_epsilon"), 1, 0, &c->rms_norm_eps, e)) ||
      (rc = gg_num(g, gg_key(k, a, "rope.freq_base"), 0, 10000.0, &c->rope_theta, e)))
    return rc;
  if (c->dim % c->n_heads && !gc_gguf_find(g, gg_key(k, a, "attention.key_length")))
    return gc_err_set(e, GC_ECORRUPT, "%s: embedding_length %d is not divisible by head_count %d (and no key_length)",
                      p, c->dim, c->n_heads);
  if ((rc = gg_int(g, gg_key(k, a, "attention.key_length"), 0, c->dim / c->n_heads, 1, GC_LLAMA_MAX_HEAD_DIM, &kl,
                   e)) ||
      (rc = gg_int(g, gg_key(k, a, "attention.value_length"), 0, kl, 1, GC_LLAMA_MAX_HEAD_DIM, &vl, e)) ||
      (rc = gg_int(g, gg_key(k, a, "rope.dimension_count"), 0, kl, 0, GC_LLAMA_MAX_HEAD_DIM, &rot, e)))
    return rc;
  c->head_dim = kl;
  if (vl != kl)
    return gc_err_set(e, GC_EUNSUPPORTED, "%s: unsupported config: attention.value_length %d differs from key_length %d",
                      p, vl, kl);
  if (rot != kl)
    return gc_err_set(e, GC_EUNSUPPORTED,
                      "%s: unsupported config: %s.rope.dimension_count %d rotates part of head_dim %d (gcore "
                      "rotates whole heads)", p, a, rot, kl);
  return GC_OK;
}

/* vocab_size, tied classifier and llama3 factors from the tensor table. */
static int gg_tensors(const gc_gguf_t *g, const char *a, gc_llama_config_t *c, gc_err_t *e) {
  const char *p = gc_gguf_path(g);
  char k[GG_KEY];
  const gc_gguf_tensor_t *t = gc_gguf_tensor(g, "token_embd.weight");
  int v;
  if (!t) return gc_err_set(e, GC_ENOTFOUND, "token_embd.weight: tensor missing from %s", p);
  if (t->ndim != 2 || t->ne[1] < 1 || t->ne[1] > GC_LLAMA_MAX_VOCAB)
    return gc_err_set(e, GC_ECORRUPT, "token_embd.weight: %d dimensions {%lld, %lld} in %s; expected {dim, vocab}",
                      t->ndim, (long long)t->ne[0], (long long)t->ne[1], p);
  c->vocab_size = (int)t->ne[1];
  int rc = gg_int(g, gg_key(k, a, "vocab_size"), 0, c->vocab_size, 1, GC_LLAMA_MAX_VOCAB, &v, e);
  if (rc) return rc;
  if (v != c->vocab_size)
    return gc_err_set(e, GC_ECORRUPT, "%s: %s %d but token_embd.weight has %d rows", p, k, v, c->vocab_size);
  c->tie_word_embeddings = gc_gguf_tensor(g, "output.weight") == NULL;
  c->dtype = t->type == 1 ? GC_ST_F16 : t->type == 30 ? GC_ST_BF16 : GC_ST_F32;
  if (!(t = gc_gguf_tensor(g, "rope_freqs.weight"))) return GC_OK;
  if (t->type != 0 || t->ndim != 1 || t->ne[0] != c->head_dim / 2)
    return gc_err_set(e, GC_ECORRUPT, "rope_freqs.weight: %s {%lld} in %s; expected F32 {%d} (head_dim / 2)",
                      t->type_name, (long long)t->ne[0], p, c->head_dim / 2);
  c->rope_scaling = GC_ROPE_SCALING_FACTORS;
  c->n_rope_factors = c->head_dim / 2;
  memcpy(c->rope_factors, t->data, (size_t)c->n_rope_factors * sizeof(float)); /* may be unaligned */
  return GC_OK;
}

/* A special token id (tokenizer.ggml.<which>_token_id): absent, def; one
 * outside the vocabulary is replaced by def as llama.cpp replaces it ("bad
 * special token ... using default id"), and c->note says so. */
static int gg_special(const gc_gguf_t *g, const char *which, int def, gc_llama_config_t *c, int *out, gc_err_t *e) {
  char key[64];
  snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", which);
  int64_t v;
  int rc = gc_gguf_get_int(g, key, &v, e);
  *out = def;
  if (rc == GC_ENOTFOUND) return GC_OK;
  if (rc) return rc;
  if (v >= 0 && v < c->vocab_size) {
    *out = (int)v;
  } else {
    size_t n = strlen(c->note);
    snprintf(c->note + n, sizeof c->note - n, "%s%s %lld is outside the vocabulary (%d tokens): %d used, as llama.cpp "
             "does", n ? "; " : "", key, (long long)v, c->vocab_size, def);
  }
  return GC_OK;
}

int gc_llama_config_from_gguf(const gc_gguf_t *g, gc_llama_config_t *c, gc_err_t *e) {
  memset(c, 0, sizeof *c);
  int rc, arch = 0;
  if ((rc = gg_refuse(g, &arch, e))) return rc;
  const char *a = gg_archs[arch].name;
  if ((rc = gg_dims(g, a, c, e)) || (rc = gg_tensors(g, a, c, e)) || (rc = gg_rope(g, a, c, e))) return rc;
  /* absent ids: llama.cpp's defaults for the tokenizer model, else 1 and 2 */
  int64_t db = gc_gguf_default_special(g, "bos"), de = gc_gguf_default_special(g, "eos");
  if ((rc = gg_special(g, "bos", db >= 0 && db < c->vocab_size ? (int)db : 1, c, &c->bos_id, e)) ||
      (rc = gg_special(g, "eos", de >= 0 && de < c->vocab_size ? (int)de : 2, c, &c->eos_ids[0], e)) ||
      (rc = gg_special(g, "eot", c->eos_ids[0], c, &c->eos_ids[1], e)))
    return rc;
  c->n_eos = c->eos_ids[1] != c->eos_ids[0] ? 2 : 1; /* end of turn (Llama 3 instruct) stops too */
  int32_t eog[GC_LLAMA_MAX_EOS]; /* and every other end of generation the file names */
  for (int i = 0, n = gc_gguf_eog_ids(g, c->vocab_size, eog, GC_LLAMA_MAX_EOS); i < n; i++) {
    int seen = 0;
    for (int k = 0; k < c->n_eos; k++) seen |= c->eos_ids[k] == eog[i];
    if (!seen && c->n_eos < GC_LLAMA_MAX_EOS) c->eos_ids[c->n_eos++] = eog[i];
  }
  c->rope_layout = gg_archs[arch].layout;
  c->qkv_bias = gg_archs[arch].qkv_bias;
  c->qk_norm = gg_archs[arch].qk_norm;
  c->weight_dtype = c->dtype;
  if (gc_llama_config_check(c, e) != GC_OK) {
    if (e) {
      e->code = GC_ECORRUPT;
      gc_err_prefix(e, "%s", gc_gguf_path(g));
    }
    return GC_ECORRUPT;
  }
  return GC_OK;
}
