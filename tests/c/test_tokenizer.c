/* test_tokenizer.c — unit tests of the tokenizer layer at the C API: the
 * streaming decoder fed one token at a time (never a broken UTF-8
 * sequence, the same text as a whole decode), Llama 2 chat turns,
 * out-of-memory at every allocation of a load and an encode, GGUF
 * files truncated and corrupted byte by byte, and GGUF pre-tokenizers'
 * note and BOS setting. Shared data:
 * $GCORE_SHARED_DATA, else ../shared/data relative to the repo root. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../models/chat.h"
#include "../../models/tokenizer.h"

#include "check.h"

static const char *g_data = "../shared/data";
static char g_spm[1024], g_gpt2[1024];

/* Strings whose code points split across tokens: emoji and CJK become
 * byte-fallback tokens in the Llama 2 vocabulary and partial bytes in
 * GPT-2's; then invalid bytes. */
static const char *const TEXTS[] = {
    "Hello world", " leading space", "🚀 (normal) 😶‍🌫️ ✅ 🦙🦙", "你好，世界！ 日本語", "مرحبا بالعالم",
    "e\xcc\x81 Cửa Việt Z̴͙̓a̵l̷g̶o̸", "👨‍👩‍👧‍👦 🇺🇸", "tabs\t\tand\n\nnewlines  ",
    ("a\xff" "b"), "\xf0\x9f\x98", "x\xe2\x82 y \xc3", "\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80"};

/* Length of the longest prefix of s [n] that is whole, valid UTF-8. */
static size_t valid_prefix(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!k || i + k > n) return i;
    for (size_t j = 1; j < k; j++)
      if ((s[i + j] & 0xc0) != 0x80) return i;
    if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] > 0x9f) || (c == 0xf0 && s[i + 1] < 0x90) ||
        (c == 0xf4 && s[i + 1] > 0x8f))
      return i;
    i += k;
  }
  return i;
}

static gc_tok_t *load(const char *path) {
  gc_err_t e = {0};
  gc_tok_t *t = NULL;
  int rc = gc_tok_load(path, &t, &e);
  CHECK(rc == GC_OK, "load %s: %s", path, e.msg);
  return t;
}

/* The bytes of b from `from` on (b->data is NULL while b is empty). */
static const unsigned char *tail(const gc_buf_t *b, size_t from) {
  return b->data ? (const unsigned char *)b->data + from : (const unsigned char *)"";
}

/* Every put appends whole UTF-8 only; the pieces make the whole decode. */
static void check_stream(gc_tok_t *t, const char *text) {
  gc_err_t e = {0};
  gc_tok_ids_t ids = {0};
  gc_buf_t whole = {0}, out = {0};
  CHECK(gc_tok_encode(t, text, strlen(text), 0, &ids, &e) == GC_OK, "encode: %s", e.msg);
  CHECK(gc_tok_decode(t, ids.v, ids.n, 0, &whole, &e) == GC_OK, "decode: %s", e.msg);
  gc_tok_stream_t s;
  gc_tok_stream_init(&s, t, 0);
  for (size_t i = 0; i < ids.n; i++) {
    size_t before = out.len;
    CHECK(gc_tok_stream_put(&s, ids.v[i], &out, &e) == GC_OK, "put: %s", e.msg);
    size_t n = out.len - before;
    CHECK(valid_prefix(tail(&out, before), n) == n, "token %zu of '%s' emitted broken UTF-8", i, text);
  }
  size_t before = out.len;
  CHECK(gc_tok_stream_flush(&s, &out, &e) == GC_OK, "flush");
  CHECK(valid_prefix(tail(&out, before), out.len - before) == out.len - before, "flush");
  CHECK(out.len == whole.len && !memcmp(out.data, whole.data, out.len), "stream differs from whole decode: '%s'",
        text);
  if (valid_prefix((const unsigned char *)text, strlen(text)) == strlen(text))
    CHECK(out.len == strlen(text) && !memcmp(out.data, text, out.len), "'%s' came back as '%.*s'", text,
          (int)out.len, out.data);
  gc_tok_ids_free(&ids);
  gc_buf_free(&whole);
  gc_buf_free(&out);
}

static void test_stream_one_token_at_a_time(void) {
  const char *paths[] = {g_spm, g_gpt2};
  for (size_t p = 0; p < 2; p++) {
    gc_tok_t *t = load(paths[p]);
    for (size_t i = 0; t && i < sizeof TEXTS / sizeof *TEXTS; i++) check_stream(t, TEXTS[i]);
    gc_tok_free(t);
  }
}

/* A code point split over byte-fallback tokens is held until complete;
 * an unfinished one is one U+FFFD at the flush. */
static void test_stream_holds_partial_code_points(void) {
  gc_tok_t *t = load(g_spm);
  if (!t) return;
  gc_err_t e = {0};
  gc_buf_t out = {0};
  gc_tok_stream_t s;
  gc_tok_stream_init(&s, t, 0);
  int32_t f0 = gc_tok_find(t, "<0xF0>", 6), x9f = gc_tok_find(t, "<0x9F>", 6), x98 = gc_tok_find(t, "<0x98>", 6),
          x80 = gc_tok_find(t, "<0x80>", 6);
  CHECK(f0 >= 0 && x9f >= 0 && x98 >= 0 && x80 >= 0, "byte tokens");
  gc_tok_stream_put(&s, f0, &out, &e);
  gc_tok_stream_put(&s, x9f, &out, &e);
  gc_tok_stream_put(&s, x98, &out, &e);
  CHECK(out.len == 0, "emitted %zu bytes of an unfinished code point", out.len);
  gc_tok_stream_put(&s, x80, &out, &e);
  CHECK(out.len == 4 && !memcmp(out.data, "\xf0\x9f\x98\x80", 4), "😀 after its 4th byte");
  gc_tok_stream_put(&s, f0, &out, &e);
  gc_tok_stream_put(&s, x9f, &out, &e);
  CHECK(gc_tok_stream_flush(&s, &out, &e) == GC_OK && out.len == 7 && !memcmp(out.data + 4, "\xef\xbf\xbd", 3),
        "unfinished code point flushed as U+FFFD");
  gc_tok_stream_init(&s, t, 0);
  out.len = 0;
  gc_tok_stream_put(&s, f0, &out, &e);
  gc_tok_stream_put(&s, gc_tok_find(t, "a", 1), &out, &e);
  CHECK(out.len == 4 && !memcmp(out.data, "\xef\xbf\xbd" "a", 4), "an interrupted sequence is U+FFFD, then the text");
  CHECK(gc_tok_stream_put(&s, gc_tok_vocab_size(t), &out, &e) == GC_EINVAL, "id past the vocabulary");
  gc_buf_free(&out);
  gc_tok_free(t);
}

static void test_chat_llama2(void) {
  gc_tok_t *t = load(g_spm);
  if (!t) return;
  gc_err_t e = {0};
  gc_chat_kind_t k = 0;
  CHECK(gc_chat_detect(t, &k, &e) == GC_OK && k == GC_CHAT_LLAMA2, "Llama 2 vocabulary: %s", e.msg);
  gc_tok_ids_t a = {0}, b = {0};
  gc_chat_t c;
  gc_chat_init(&c, t, k);
  /* the template's content.strip() of the system block and the text together; a
   * client's reply ' ' + text.strip() + ' ' in one piece with the turn, then </s> */
  const char *want1 = "[INST] <<SYS>>\n  Be brief. \n<</SYS>>\n\nHi there [/INST] A file. ";
  CHECK(gc_chat_user(&c, "  Be brief. ", "Hi there\n", &a, &e) == GC_OK, "turn: %s", e.msg);
  CHECK(gc_chat_user(&c, NULL, "again", &a, &e) == GC_EINVAL && strstr(e.msg, "two user messages"),
        "two users in a row: %s", e.msg);
  CHECK(gc_chat_assistant(&c, " A file.\n", &a, &e) == GC_OK, "reply: %s", e.msg);
  CHECK(gc_tok_encode(t, want1, strlen(want1), GC_TOK_BOS, &b, &e) == GC_OK && gc_tok_ids_push(&b, 2, &e) == GC_OK,
        "encode");
  CHECK(a.n == b.n && !memcmp(a.v, b.v, a.n * sizeof *a.v) && a.v[0] == 1, "first turn and its reply");
  CHECK(gc_chat_assistant(&c, "again", &a, &e) == GC_EINVAL && strstr(e.msg, "two assistant messages"),
        "two replies in a row: %s", e.msg);
  a.n = b.n = 0;
  CHECK(gc_chat_user(&c, "ignored", "<s>more", &a, &e) == GC_EINVAL, "a system prompt after the first message");
  CHECK(gc_chat_user(&c, NULL, "<s>more", &a, &e) == GC_OK && gc_chat_flush(&c, &a, &e) == GC_OK, "turn 2");
  CHECK(gc_tok_encode(t, "[INST] <s>more [/INST]", 22, GC_TOK_BOS, &b, &e) == GC_OK, "encode");
  CHECK(a.n == b.n && !memcmp(a.v, b.v, a.n * sizeof *a.v), "later turn: BOS again, user text not special");
  CHECK(gc_chat_end_token(t, k) == 2, "</s> closes a reply");
  gc_chat_free(&c);
  /* Mistral's template keeps the user's text as given, BOS once */
  a.n = b.n = 0;
  gc_chat_init(&c, t, GC_CHAT_MISTRAL);
  CHECK(gc_chat_user(&c, "sys", "x", &a, &e) == GC_EINVAL && strstr(e.msg, "no system role"), "Mistral system");
  CHECK(gc_chat_user(&c, NULL, " Hi\n", &a, &e) == GC_OK && gc_chat_flush(&c, &a, &e) == GC_OK, "Mistral: %s", e.msg);
  CHECK(gc_tok_encode(t, "[INST]  Hi\n [/INST]", 19, GC_TOK_BOS, &b, &e) == GC_OK, "encode");
  CHECK(a.n == b.n && !memcmp(a.v, b.v, a.n * sizeof *a.v), "Mistral: the user's text untrimmed");
  gc_chat_free(&c);
  gc_tok_ids_free(&a);
  gc_tok_ids_free(&b);
  gc_tok_free(t);
  t = load(g_gpt2);
  CHECK(t && gc_chat_detect(t, &k, &e) == GC_EUNSUPPORTED && strstr(e.msg, "no chat template"), "GPT-2: %s", e.msg);
  gc_tok_free(t);
}

/* Every allocation of a load, then of an encode, fails once in turn: a
 * clean GC_ENOMEM each time (and no leak, under ASan). */
static void test_alloc_faults(void) {
  gc_err_t e = {0};
  gc_tok_t *t = NULL;
  long n;
  int rc = GC_ENOMEM;
  for (n = 0; n < 100000 && rc; n += 1 + n / 16) {
    gc_fault_alloc_after(n);
    e = (gc_err_t){0};
    rc = gc_tok_load(g_gpt2, &t, &e);
    gc_fault_alloc_after(-1);
    CHECK(rc == GC_OK || (rc == GC_ENOMEM && t == NULL), "load with allocation %ld failing: %s %s", n,
          gc_err_name(rc), e.msg);
  }
  CHECK(rc == GC_OK, "load never succeeded");
  const char *text = "Hello 🦙 world, 1234567 and more text\n\n";
  for (n = 0; t && n < 1000; n++) {
    gc_tok_ids_t ids = {0};
    gc_fault_alloc_after(n);
    rc = gc_tok_encode(t, text, strlen(text), GC_TOK_SPECIAL, &ids, &e);
    gc_fault_alloc_after(-1);
    gc_tok_ids_free(&ids);
    CHECK(rc == GC_OK || rc == GC_ENOMEM, "encode with allocation %ld failing: %s", n, gc_err_name(rc));
    if (rc == GC_OK) break;
  }
  gc_tok_free(t);
}

/* The same for a tokenizer.json loader, on a small SentencePiece-style file. */
static void test_alloc_faults_json(void) {
  static const char json[] =
      "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
      " {\"id\": 1, \"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
      " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\u2581\"},"
      " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\u2581\"}]},"
      " \"pre_tokenizer\": null, \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\","
      " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, \"\u2581\": 3, \"a\": 4, \"b\": 5, \"\u2581a\": 6, \"<0xFF>\": 7},"
      " \"merges\": [\"\u2581 a\"]}}";
  char path[256];
  snprintf(path, sizeof path, "%s/gc_test_tok_%d.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(json, 1, sizeof json - 1, f) == sizeof json - 1, "write %s", path);
  if (f) fclose(f);
  gc_err_t e = {0};
  gc_tok_t *t = NULL;
  int rc = GC_ENOMEM;
  for (long n = 0; n < 10000 && rc; n++) {
    gc_fault_alloc_after(n);
    rc = gc_tok_load(path, &t, &e);
    gc_fault_alloc_after(-1);
    CHECK(rc == GC_OK || (rc == GC_ENOMEM && !t), "load with allocation %ld failing: %s", n, e.msg);
  }
  gc_tok_ids_t ids = {0};
  CHECK(t && gc_tok_encode(t, "a b\xff", 4, GC_TOK_SPECIAL | GC_TOK_BOS, &ids, &e) == GC_OK && ids.n == 5 &&
            ids.v[0] == 1 && ids.v[1] == 6 && ids.v[2] == 3 && ids.v[3] == 5 && ids.v[4] == 7,
        "'a b\\xff' -> <s> \u2581a \u2581 b <0xFF>");
  gc_tok_ids_free(&ids);
  gc_tok_free(t);
  unlink(path);
}

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *p = malloc(*n);
  if (p && fread(p, 1, *n, f) != *n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  return p;
}

/* A GGUF cut short anywhere, or with bytes flipped in its metadata: an
 * error or a tokenizer, never a crash or a read past the file. */
static void test_gguf_fuzz(void) {
  size_t n;
  char *orig = read_all(g_spm, &n), path[256];
  CHECK(orig != NULL, "read %s", g_spm);
  if (!orig) return;
  snprintf(path, sizeof path, "%s/gc_test_tok_%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  char *buf = malloc(n);
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 160; i++) {
    memcpy(buf, orig, n);
    size_t len = n;
    if (i < 40) {
      len = i < 20 ? (size_t)i * 7 : n * (size_t)(i - 19) / 21; /* header region, then spread over the file */
    } else {
      for (int k = 0; k < 4; k++) { /* flip bytes, mostly early where the counts and lengths are */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t at = (x >> 8) % (k < 2 ? 4096 : n);
        buf[at] = (char)(x & 0xff);
      }
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
      CHECK(0, "write %s", path);
      break;
    }
    fclose(f);
    gc_err_t e = {0};
    gc_tok_t *t = NULL;
    int rc = gc_tok_load(path, &t, &e);
    CHECK(rc == GC_OK || (e.msg[0] && !strchr(e.msg, '\n')), "case %d: rc %s without a one-line message", i,
          gc_err_name(rc));
    CHECK(i >= 40 || rc != GC_OK, "truncated to %zu bytes loaded", len);
    if (t) {
      gc_tok_ids_t ids = {0};
      gc_tok_encode(t, TEXTS[2], strlen(TEXTS[2]), GC_TOK_SPECIAL, &ids, &e);
      gc_tok_ids_free(&ids);
    }
    gc_tok_free(t);
  }
  unlink(path);
  free(buf);
  free(orig);
}

/* ---- GGUF pre-tokenizers: the note and llama.cpp's settings ---------------- */

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put_u64(FILE *f, uint64_t v) { fwrite(&v, 8, 1, f); }
static void put_str(FILE *f, const char *s, size_t n) {
  put_u64(f, n);
  fwrite(s, 1, n, f);
}

/* GPT-2's byte-to-unicode spelling of byte b, as UTF-8 into out [3]. */
static size_t byte_level(unsigned b, char *out) {
  unsigned cp = b, n = 0;
  int keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  for (unsigned c = 0; !keep && c < b; c++)
    n += !((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae);
  if (!keep) cp = 0x100 + n;
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  out[0] = (char)(0xc0 | cp >> 6);
  out[1] = (char)(0x80 | (cp & 0x3f));
  return 2;
}

/* A byte-level GGUF vocabulary at path: the 256 bytes and <s> (BOS), no
 * merges; tokenizer.ggml.pre = pre unless NULL; add_bos (0/1) written as
 * tokenizer.ggml.add_bos_token unless -1. */
static void write_bytelevel_gguf(const char *path, const char *pre, int add_bos) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL, "write %s", path);
  if (!f) return;
  fwrite("GGUF", 1, 4, f);
  put_u32(f, 3);
  put_u64(f, 0);
  put_u64(f, 4 + (pre != NULL) + (add_bos >= 0));
  put_str(f, "tokenizer.ggml.model", 20);
  put_u32(f, 8);
  put_str(f, "gpt2", 4);
  if (pre) {
    put_str(f, "tokenizer.ggml.pre", 18);
    put_u32(f, 8);
    put_str(f, pre, strlen(pre));
  }
  put_str(f, "tokenizer.ggml.tokens", 21);
  put_u32(f, 9);
  put_u32(f, 8);
  put_u64(f, 257);
  for (unsigned b = 0; b < 256; b++) {
    char u[2];
    put_str(f, u, byte_level(b, u));
  }
  put_str(f, "<s>", 3);
  put_str(f, "tokenizer.ggml.merges", 21);
  put_u32(f, 9);
  put_u32(f, 8);
  put_u64(f, 0);
  put_str(f, "tokenizer.ggml.bos_token_id", 27);
  put_u32(f, 4);
  put_u32(f, 256);
  if (add_bos >= 0) {
    put_str(f, "tokenizer.ggml.add_bos_token", 28);
    put_u32(f, 7);
    fputc(add_bos, f);
  }
  fclose(f);
}

/* tokenizer.ggml.pre missing or "default": llama.cpp's default split and
 * a one-line note naming the file; a known name: no note, and BOS added
 * where llama.cpp's type adds it (the file's add_bos_token over it); an
 * unknown name: one line naming what gcore knows. Loading a file with
 * no pre fails cleanly at every allocation. */
static void test_pre_note_and_add_bos(void) {
  static const struct {
    const char *pre;
    int add_bos, note;
  } cases[] = {{NULL, 0, 1},        {"default", 0, 1},  {"gpt-2", 0, 0},  {"llama-bpe", 1, 0},
               {"falcon3", 1, 0},   {"tekken", 1, 0},   {"chameleon", 1, 0}, {"qwen2", 0, 0},
               {"deepseek-r1-qwen", 0, 0}, {"smollm", 0, 0}, {"minicpm5", 0, 0}, {"glm4", 0, 0}};
  char path[256];
  snprintf(path, sizeof path, "%s/gc_test_pre_%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  gc_err_t e = {0};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_bytelevel_gguf(path, cases[i].pre, -1);
    gc_tok_t *t = load(path);
    if (!t) continue;
    const char *note = gc_tok_note(t), *pre = cases[i].pre ? cases[i].pre : "(none)";
    CHECK(gc_tok_add_bos(t) == cases[i].add_bos, "pre %s: add_bos %d", pre, gc_tok_add_bos(t));
    CHECK(!note == !cases[i].note, "pre %s: note %s", pre, note ? note : "NULL");
    if (note)
      CHECK(!strncmp(note, path, strlen(path)) && strstr(note, "llama.cpp's default pre-tokenizer") &&
                strstr(note, cases[i].pre ? "tokenizer.ggml.pre is 'default'" : "no tokenizer.ggml.pre") &&
                !strchr(note, '\n'),
            "note: %s", note);
    gc_tok_ids_t ids = {0};
    CHECK(gc_tok_encode(t, "ab 1234567!!", 12, 0, &ids, &e) == GC_OK, "encode: %s", e.msg);
    gc_tok_ids_free(&ids);
    gc_tok_free(t);
  }
  write_bytelevel_gguf(path, "tekken", 0);
  gc_tok_t *t = load(path);
  CHECK(t && !gc_tok_add_bos(t), "add_bos_token false over tekken's BOS");
  gc_tok_free(t);
  t = load(g_spm);
  CHECK(t && !gc_tok_note(t), "SentencePiece: no note");
  gc_tok_free(t);
  write_bytelevel_gguf(path, "kimi-k2", -1);
  t = NULL;
  int rc = gc_tok_load(path, &t, &e);
  CHECK(rc == GC_EUNSUPPORTED && !t && !strchr(e.msg, '\n') &&
            strstr(e.msg, "pre-tokenizer 'kimi-k2' is not supported") && strstr(e.msg, "gcore knows default llama3") &&
            strstr(e.msg, " tekken "),
        "unknown pre: %s %s", gc_err_name(rc), e.msg);
  write_bytelevel_gguf(path, NULL, -1);
  rc = GC_ENOMEM;
  for (long n = 0; n < 100000 && rc; n++) {
    gc_fault_alloc_after(n);
    rc = gc_tok_load(path, &t, &e);
    gc_fault_alloc_after(-1);
    CHECK(rc == GC_OK || (rc == GC_ENOMEM && !t), "load with allocation %ld failing: %s", n, e.msg);
  }
  CHECK(t && gc_tok_note(t), "loaded, with its note");
  gc_tok_free(t);
  unlink(path);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *d = getenv("GCORE_SHARED_DATA");
  if (d && *d) g_data = d;
  snprintf(g_spm, sizeof g_spm, "%s/vocab/ggml-vocab-llama-spm.gguf", g_data);
  snprintf(g_gpt2, sizeof g_gpt2, "%s/vocab/ggml-vocab-gpt-2.gguf", g_data);
  if (access(g_spm, R_OK) || access(g_gpt2, R_OK)) {
    return check_skip("%s/vocab is absent (set GCORE_SHARED_DATA)", g_data);
  }
  check_case("stream_one_token_at_a_time", test_stream_one_token_at_a_time);
  check_case("stream_holds_partial_code_points", test_stream_holds_partial_code_points);
  check_case("chat_llama2", test_chat_llama2);
  check_case("alloc_faults", test_alloc_faults);
  check_case("alloc_faults_json", test_alloc_faults_json);
  check_case("gguf_fuzz", test_gguf_fuzz);
  check_case("pre_note_and_add_bos", test_pre_note_and_add_bos);
  return check_report();
}
