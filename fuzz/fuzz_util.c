/* fuzz_util.c — what the fuzz targets share (fuzz.h): the scratch folder,
 * file writing and input splitting, and the use the tools make of a loaded
 * tokenizer or model. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../models/chat.h"
#include "../models/llama.h"
#include "../models/tokenizer.h"
#include "../models/weights.h"

static char fz_root[FZ_PATH];

/* Remove every file in the scratch folder, then the folder (atexit). */
static void fz_cleanup(void) {
  DIR *d = opendir(fz_root);
  if (!d) return;
  struct dirent *ent;
  char p[FZ_PATH + 256];
  while ((ent = readdir(d)))
    if (strcmp(ent->d_name, ".") && strcmp(ent->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", fz_root, ent->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(fz_root);
}

static int fz_try_dir(const char *parent) {
  if (!parent || !*parent || access(parent, W_OK) != 0) return 0;
  snprintf(fz_root, sizeof fz_root, "%s/gcore-fuzz-XXXXXX", parent);
  return mkdtemp(fz_root) != NULL;
}

const char *fz_dir(void) {
  if (fz_root[0]) return fz_root;
  if (!fz_try_dir(getenv("FUZZ_TMPDIR")) && !fz_try_dir("/dev/shm") && !fz_try_dir("/tmp")) {
    fprintf(stderr, "fuzz: cannot make a scratch folder\n");
    abort();
  }
  atexit(fz_cleanup);
  return fz_root;
}

void fz_write(const char *name, const void *p, size_t n, char out[FZ_PATH]) {
  snprintf(out, FZ_PATH, "%s/%s", fz_dir(), name);
  FILE *f = fopen(out, "wb");
  if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) {
    fprintf(stderr, "fuzz: cannot write %s\n", out);
    abort();
  }
}

void fz_remove(const char *name) {
  static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
  char p[FZ_PATH + 16];
  for (size_t i = 0; i < GC_ARRAY_LEN(sfx); i++) {
    snprintf(p, sizeof p, "%s/%s%s", fz_dir(), name, sfx[i]);
    unlink(p);
  }
}

int fz_split(const uint8_t *data, size_t n, const uint8_t **part, size_t *len, int max) {
  const size_t sl = strlen(FZ_SEP);
  int k = 0;
  while (k < max - 1) {
    const uint8_t *s = n >= sl ? memmem(data, n, FZ_SEP, sl) : NULL;
    if (!s) break;
    part[k] = data;
    len[k++] = (size_t)(s - data);
    n -= (size_t)(s - data) + sl;
    data = s + sl;
  }
  part[k] = data;
  len[k++] = n;
  return k;
}

char *fz_cstr(const uint8_t *data, size_t n) {
  const uint8_t *z = memchr(data, 0, n);
  if (z) n = (size_t)(z - data);
  char *s = malloc(n + 1);
  if (!s) abort();
  memcpy(s, data, n);
  s[n] = 0;
  return s;
}

int fz_report(const char *what, int rc, const gc_err_t *e) {
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") != NULL;
  if (verbose) fprintf(stderr, "%s: %s\n", what, rc ? e->msg : "ok");
  return rc;
}

void fz_touch(const void *p, size_t n) {
  static volatile unsigned sink;
  const unsigned char *b = p;
  unsigned s = 0;
  for (size_t i = 0; i < n; i++) s += b[i];
  sink += s;
}

/* ---- tokenizers ------------------------------------------------------------ */

static const char fz_text[] =
    "Hello, world! <s>[INST] hi [/INST]</s><|begin_of_text|><|eot_id|>  \t\n\n 42 12345 "
    "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82 \xd9\x85\xd8\xb1 "
    "a\xcc\x81 \xff\xfe\xc3( \xe2\x96\x81x <0x41> 's 'LL";

/* 1 when s[n] is valid UTF-8 (no surrogates, no overlong forms). */
static int fz_utf8_ok(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!k || i + k > n || (k == 2 && c < 0xc2) || (k == 4 && c > 0xf4)) return 0;
    for (size_t j = 1; j < k; j++)
      if ((s[i + j] & 0xc0) != 0x80) return 0;
    if (k == 3 && ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] >= 0xa0))) return 0;
    if (k == 4 && ((c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] >= 0x90))) return 0;
    i += k;
  }
  return 1;
}

static void fz_check_text(const gc_buf_t *b) {
  if (b->len && !fz_utf8_ok((const unsigned char *)b->data, b->len)) {
    fprintf(stderr, "fuzz: the decoder wrote invalid UTF-8\n");
    abort();
  }
}

static void fz_check_ids(const gc_tok_t *t, const gc_tok_ids_t *ids) {
  for (size_t i = 0; i < ids->n; i++)
    if (ids->v[i] < 0 || ids->v[i] >= gc_tok_vocab_size(t)) {
      fprintf(stderr, "fuzz: encode gave id %d outside the vocabulary of %d\n", ids->v[i],
              gc_tok_vocab_size(t));
      abort();
    }
}

/* Encode the text with flags, check the ids, decode them again. */
static void fz_tok_round(gc_tok_t *t, int flags) {
  gc_err_t e;
  gc_tok_ids_t ids = {0};
  gc_buf_t out = {0};
  if (fz_report("encode", gc_tok_encode(t, fz_text, sizeof fz_text - 1, flags, &ids, &e), &e) == GC_OK) {
    fz_check_ids(t, &ids);
    if (gc_tok_decode(t, ids.v, ids.n, GC_TOK_SKIP_SPECIAL, &out, &e) == GC_OK) fz_check_text(&out);
  }
  gc_tok_ids_free(&ids);
  gc_buf_free(&out);
}

/* Every id (up to 4096) through one stream, as generation prints them. */
static void fz_tok_stream_all(const gc_tok_t *t) {
  gc_err_t e;
  gc_buf_t out = {0};
  gc_tok_stream_t s;
  gc_tok_stream_init(&s, t, 0);
  int n = gc_tok_vocab_size(t) < 4096 ? gc_tok_vocab_size(t) : 4096, rc = GC_OK;
  for (int32_t id = 0; !rc && id < n; id++) {
    rc = gc_tok_stream_put(&s, id, &out, &e);
    (void)gc_tok_is_eos(t, id);
    (void)gc_tok_is_special(t, id);
  }
  if (!rc && gc_tok_stream_flush(&s, &out, &e) == GC_OK) fz_check_text(&out);
  gc_buf_free(&out);
}

static void fz_tok_chat(gc_tok_t *t) {
  gc_err_t e;
  gc_chat_kind_t k;
  gc_tok_ids_t ids = {0};
  gc_chat_t c;
  if (fz_report("chat template", gc_chat_detect(t, &k, &e), &e) != GC_OK) return;
  gc_chat_init(&c, t, k); /* a conversation without a system message: the template's own, if any */
  if (gc_chat_user(&c, NULL, "hi", &ids, &e) == GC_OK && gc_chat_assistant(&c, NULL, &ids, &e) == GC_OK &&
      gc_chat_flush(&c, &ids, &e) == GC_OK)
    fz_check_ids(t, &ids);
  gc_chat_free(&c);
  ids.n = 0;
  gc_chat_init(&c, t, k);
  c.think_off = 1; /* enable_thinking false: the closed block where the template writes one */
  if (fz_report("chat turn", gc_chat_user(&c, k == GC_CHAT_MISTRAL && !c.sys_block ? NULL : "Answer briefly.",
                                          " Hi <|eot_id|> there ", &ids, &e), &e) == GC_OK &&
      gc_chat_assistant(&c, " A reply. ", &ids, &e) == GC_OK && gc_chat_user(&c, NULL, "again", &ids, &e) == GC_OK &&
      gc_chat_assistant(&c, NULL, &ids, &e) == GC_OK && gc_chat_flush(&c, &ids, &e) == GC_OK)
    fz_check_ids(t, &ids);
  if (gc_chat_assistant(&c, "more", &ids, &e) == GC_OK && gc_chat_flush(&c, &ids, &e) == GC_OK) fz_check_ids(t, &ids);
  (void)gc_chat_end_token(t, k);
  gc_chat_free(&c);
  /* tools offered, a reply's call (and its reasoning) and the tool's result, where the template has tools */
  static const char *const tools[] = {"{\"type\": \"function\", \"function\": {\"name\": \"f\"}}"};
  static const gc_chat_call_t call = {"f", "{\"x\": 1}", "call00001"};
  ids.n = 0;
  gc_chat_init(&c, t, k);
  c.tools = tools, c.ntools = 1;
  if (gc_chat_user(&c, "sys", "weather?", &ids, &e) == GC_OK &&
      gc_chat_reply(&c, "<think>\nso</think>ok", NULL, 1, &call, c.tools_kind ? 1 : 0, &ids, &e) == GC_OK &&
      (!c.tools_kind || gc_chat_tool_result(&c, "sunny \"1\"", "call00001", &ids, &e) == GC_OK) &&
      gc_chat_assistant(&c, NULL, &ids, &e) == GC_OK && gc_chat_flush(&c, &ids, &e) == GC_OK)
    fz_check_ids(t, &ids);
  gc_chat_free(&c);
  gc_tok_ids_free(&ids);
}

void fz_tok_use(gc_tok_t *t) {
  const char *note = gc_tok_note(t);
  if (note && (!*note || strchr(note, '\n'))) {
    fprintf(stderr, "fuzz: the tokenizer's note is empty or not one line\n");
    abort();
  }
  fz_tok_round(t, GC_TOK_SPECIAL | (gc_tok_add_bos(t) && gc_tok_bos(t) >= 0 ? GC_TOK_BOS : 0));
  fz_tok_round(t, 0);
  fz_tok_stream_all(t);
  fz_tok_chat(t);
  (void)gc_tok_find(t, "<s>", 3);
  (void)gc_tok_kind(t);
  const char *tpl = gc_tok_chat_template(t);
  if (tpl) fz_touch(tpl, strlen(tpl));
}

/* ---- models ---------------------------------------------------------------- */

void fz_model_use(const char *path) {
  gc_err_t e;
  gc_llama_weights_t *w;
  if (fz_report("weights", gc_weights_open(path, &w, &e), &e) == GC_OK) {
    for (size_t i = 0; i < gc_weights_count(w); i++) {
      const gc_weight_t *t = gc_weights_at(w, i);
      fz_touch(t->data, t->nbytes);
    }
    (void)gc_weights_bytes(w);
    char buf[512];
    gc_llama_config_describe(&w->cfg, buf, sizeof buf);
    double *inv = malloc((size_t)w->cfg.head_dim / 2 * sizeof *inv + 1);
    if (inv) gc_llama_inv_freq(&w->cfg, inv);
    free(inv);
    gc_weights_close(w);
  }
  gc_problems_t l = {0};
  gc_needs_t needs = {0};
  if (fz_report("workload", gc_llama_workload(path, NULL, NULL, NULL, 1, NULL, &l, &needs, NULL, &e), &e) == GC_OK)
    for (int i = 0; i < l.n; i++) {
      char key[GC_PROBLEM_KEY];
      gc_problem_key(&l.v[i], key);
    }
  gc_problems_free(&l);
  gc_needs_free(&needs);
}
