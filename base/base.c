/* base.c — errors as values, checked allocation with a fault-injection hook,
 * growable buffers, hashing (XXH3-128), whole-file I/O and small parsers. */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static const char *const err_names[] = {
    "ok", "invalid argument", "out of memory", "I/O error", "corrupt input",
    "not found", "unsupported", "device error", "compile error",
    "launch error", "verification failed",
};

const char *gc_err_name(int code) {
  if (code < 0 || code >= (int)GC_ARRAY_LEN(err_names)) return "unknown error";
  return err_names[code];
}

/* Messages are one line: newlines from compiler or driver output are
 * folded into spaces so that callers can print them as they are, and any
 * other control character (C0, DEL, or a C1 encoded in UTF-8, which some
 * terminals obey) that reached a message unquoted becomes '?'. */
static void one_line(char *s) {
  for (unsigned char *p = (unsigned char *)s; *p; p++)
    if (*p == '\n' || *p == '\r' || *p == '\t' || *p == '\v' || *p == '\f')
      *p = ' ';
    else if (*p < 0x20 || *p == 0x7f)
      *p = '?';
    else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
      p[0] = p[1] = '?';
}

/* Length of the valid UTF-8 sequence at s (of at most n bytes) encoding a
 * printable code point (not a C1 control), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  size_t len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
               : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  if (!len || len > n) return 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
      (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f) ||
      (s[0] == 0xc2 && s[1] <= 0x9f))
    return 0; /* overlong, surrogate, past U+10FFFF, or C1 */
  return len;
}

/* The text that shows the byte or UTF-8 sequence at p[i] (of n) in a
 * quoted value: into piece (at most 4 bytes), its length returned, and
 * the bytes it stands for in *used. */
static size_t quote_piece(const unsigned char *p, size_t n, size_t i, char piece[4],
                          size_t *used) {
  static const char hex[] = "0123456789abcdef";
  unsigned char c = p[i];
  const char *esc = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                    : c == '\\' ? "\\\\" : c == '\'' ? "\\'" : NULL;
  size_t u;
  *used = 1;
  if (esc) {
    memcpy(piece, esc, 2);
    return 2;
  }
  if (c >= 0x20 && c < 0x7f) {
    piece[0] = (char)c;
    return 1;
  }
  if ((u = utf8_len(p + i, n - i)) > 0) {
    memcpy(piece, p + i, u);
    return *used = u;
  }
  piece[0] = '\\', piece[1] = 'x', piece[2] = hex[c >> 4], piece[3] = hex[c & 15];
  return 4;
}

char *gc_quote(const char *s, size_t n, char *out, size_t out_n) {
  if (!s) {
    snprintf(out, out_n, "(null)");
    return out;
  }
  if (n == GC_QSTR) n = strlen(s);
  const unsigned char *p = (const unsigned char *)s;
  char piece[4];
  size_t used, need = 3; /* two quotes and the NUL */
  for (size_t i = 0; i < n && need <= out_n; i += used) need += quote_piece(p, n, i, piece, &used);
  int whole = need <= out_n;
  size_t o = 0;
  out[o++] = '\'';
  for (size_t i = 0; i < n; i += used) {
    size_t len = quote_piece(p, n, i, piece, &used);
    if (!whole && o + len + 5 > out_n) { /* leave room for "…'" and the NUL */
      memcpy(out + o, "\xe2\x80\xa6", 3);
      o += 3;
      break;
    }
    memcpy(out + o, piece, len);
    o += len;
  }
  out[o++] = '\'';
  out[o] = 0;
  return out;
}

int gc_err_set(gc_err_t *e, int code, const char *fmt, ...) {
  if (!e) return code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  one_line(e->msg);
  e->code = code;
  return code;
}

int gc_err_prefix(gc_err_t *e, const char *fmt, ...) {
  if (!e) return GC_EINVAL;
  char head[GC_ERR_MSG], old[GC_ERR_MSG];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  snprintf(e->msg, sizeof e->msg, "%s: %s", head, old);
  one_line(e->msg);
  return e->code;
}

/* ---- allocation ---------------------------------------------------- */

static long alloc_countdown = -1;

void gc_fault_alloc_after(long n) { alloc_countdown = n; }

static int fault_now(void) {
  if (alloc_countdown < 0) return 0;
  if (alloc_countdown == 0) return 1;
  alloc_countdown--;
  return 0;
}

void *gc_malloc(size_t n, gc_err_t *e) {
  void *p = fault_now() ? NULL : malloc(n ? n : 1);
  if (!p) gc_err_set(e, GC_ENOMEM, "out of memory allocating %zu bytes", n);
  return p;
}

void *gc_calloc(size_t count, size_t size, gc_err_t *e) {
  if (size && count > SIZE_MAX / size) {
    gc_err_set(e, GC_ENOMEM, "allocation of %zu x %zu bytes overflows", count,
               size);
    return NULL;
  }
  void *p = fault_now() ? NULL : calloc(count ? count : 1, size ? size : 1);
  if (!p)
    gc_err_set(e, GC_ENOMEM, "out of memory allocating %zu bytes",
               count * size);
  return p;
}

void *gc_realloc(void *q, size_t n, gc_err_t *e) {
  void *p = fault_now() ? NULL : realloc(q, n ? n : 1);
  if (!p) gc_err_set(e, GC_ENOMEM, "out of memory allocating %zu bytes", n);
  return p;
}

char *gc_strdup(const char *s, gc_err_t *e) {
  size_t n = strlen(s) + 1;
  char *p = gc_malloc(n, e);
  if (p) memcpy(p, s, n);
  return p;
}

char *gc_aprintf(gc_err_t *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    gc_err_set(e, GC_EINVAL, "bad format string");
    return NULL;
  }
  char *p = gc_malloc((size_t)n + 1, e);
  if (!p) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

/* ---- growable buffer ----------------------------------------------- */

static int buf_reserve(gc_buf_t *b, size_t extra, gc_err_t *e) {
  if (b->len + extra + 1 <= b->cap) return GC_OK;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = gc_realloc(b->data, cap, e);
  if (!p) return GC_ENOMEM;
  b->data = p;
  b->cap = cap;
  return GC_OK;
}

int gc_buf_append(gc_buf_t *b, const void *p, size_t n, gc_err_t *e) {
  if (buf_reserve(b, n, e)) return GC_ENOMEM;
  memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0;
  return GC_OK;
}

int gc_buf_printf(gc_buf_t *b, gc_err_t *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return gc_err_set(e, GC_EINVAL, "bad format string");
  if (buf_reserve(b, (size_t)n, e)) return GC_ENOMEM;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return GC_OK;
}

void gc_buf_free(gc_buf_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* ---- hashing ------------------------------------------------------- */

void gc_hash_hex(const void *data, size_t n, char out[GC_HASH_HEX]) {
  XXH128_hash_t h = XXH3_128bits(data, n);
  snprintf(out, GC_HASH_HEX, "%016llx%016llx", (unsigned long long)h.high64,
           (unsigned long long)h.low64);
}

/* ---- files --------------------------------------------------------- */

int gc_read_file(const char *path, size_t max_bytes, char **out, size_t *n,
                 gc_err_t *e) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return gc_err_set(e, GC_EIO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return gc_err_set(e, GC_EIO, "%s: not a regular file", path);
  }
  if ((unsigned long long)st.st_size > max_bytes) {
    fclose(f);
    return gc_err_set(e, GC_ECORRUPT, "%s: %lld bytes is over the %zu-byte limit",
                      path, (long long)st.st_size, max_bytes);
  }
  size_t size = (size_t)st.st_size;
  char *p = gc_malloc(size + 1, e);
  if (!p) {
    fclose(f);
    return GC_ENOMEM;
  }
  if (size && fread(p, 1, size, f) != size) {
    free(p);
    fclose(f);
    return gc_err_set(e, GC_EIO, "%s: short read", path);
  }
  fclose(f);
  p[size] = 0;
  *out = p;
  if (n) *n = size;
  return GC_OK;
}

static const char *file_kind(mode_t m) {
  return S_ISREG(m)    ? "a regular file"
         : S_ISDIR(m)  ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
                       : "not a file";
}

int gc_check_output(const char *path, char kind, gc_err_t *e) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT) return GC_OK;
    return gc_err_set(e, GC_EIO, "%s: %s", path, strerror(errno));
  }
  if (kind == 'd' ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) return GC_OK;
  return gc_err_set(e, GC_EINVAL, "%s: %s, not a %s", path, file_kind(st.st_mode),
                    kind == 'd' ? "directory" : "regular file");
}

int gc_rename_output(const char *tmp, const char *path, gc_err_t *e) {
  if (gc_check_output(path, 'f', e)) {
    remove(tmp);
    return e->code;
  }
  if (rename(tmp, path) != 0) {
    int err = errno;
    remove(tmp);
    return gc_err_set(e, GC_EIO, "%s: cannot write: %s", path, strerror(err));
  }
  return GC_OK;
}

int gc_write_file(const char *path, const void *p, size_t n, gc_err_t *e) {
  char tmp[PATH_MAX];
  if (gc_check_output(path, 'f', e)) return e->code;
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
    return gc_err_set(e, GC_EINVAL, "%s: path too long", path);
  /* a FIFO or link planted at the temporary name fails here, never blocks */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  struct stat st;
  if (fd < 0) return gc_err_set(e, GC_EIO, "%s: %s", tmp, strerror(errno));
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return gc_err_set(e, GC_EIO, "%s: not a regular file", tmp);
  }
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    remove(tmp);
    return gc_err_set(e, GC_EIO, "%s: %s", tmp, strerror(errno));
  }
  int ok = fwrite(p, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  if (!ok) {
    int err = errno;
    remove(tmp);
    return gc_err_set(e, GC_EIO, "%s: write failed: %s", path, strerror(err));
  }
  return gc_rename_output(tmp, path, e);
}

int gc_mkdirs(const char *path, gc_err_t *e) {
  char buf[PATH_MAX];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
    return gc_err_set(e, GC_EINVAL, "%s: path too long", path);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return gc_err_set(e, GC_EIO, "mkdir %s: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  return GC_OK;
}

double gc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int gc_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return GC_EINVAL;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return GC_EINVAL;
  *out = v;
  return GC_OK;
}
