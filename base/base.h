/* base.h — the bottom layer every folder may use: errors as values,
 * checked allocation, content hashing and small string helpers.
 * Nothing here knows about kernels, devices or files of any format. */
#ifndef GC_BASE_H
#define GC_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>

/* Error codes. Every fallible function returns one of these (GC_OK = 0)
 * and fills a gc_err_t with a one-line message a user can act on. */
enum {
  GC_OK = 0,
  GC_EINVAL,       /* bad argument or flag */
  GC_ENOMEM,       /* allocation failed (host or device) */
  GC_EIO,          /* file could not be read or written */
  GC_ECORRUPT,     /* file read from outside is malformed or truncated */
  GC_ENOTFOUND,    /* named thing (op, kernel, tensor, entry) does not exist */
  GC_EUNSUPPORTED, /* well-formed but not something gcore supports */
  GC_EDEVICE,      /* no device / driver error */
  GC_ECOMPILE,     /* compiler failed */
  GC_ELAUNCH,      /* kernel launch failed */
  GC_EVERIFY,      /* result disagrees with the reference */
};

#define GC_ERR_MSG 1024
typedef struct gc_err {
  int code;
  char msg[GC_ERR_MSG];
} gc_err_t;

/* Set *e (may be NULL) and return code. The message is one line: newlines,
 * tabs and carriage returns become spaces and any other control character
 * (C0, DEL, C1) a '?', whatever the arguments held. Values read from a
 * file or the command line go in through gc_quote, which shows them. */
int gc_err_set(gc_err_t *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix the existing message of e with "fmt: ". Returns e->code. */
int gc_err_prefix(gc_err_t *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *gc_err_name(int code);

/* Quote n bytes of s (n = GC_QSTR: up to its NUL) for a message: between
 * single quotes, with \n \r \t \\ \' escaped, every other control
 * character and every byte that is not part of valid UTF-8 written \xNN
 * (printable UTF-8 is kept), and a value longer than out_n allows cut
 * with "…" before the closing quote. s may be NULL ('(null)' without
 * quotes). Returns out, NUL-terminated; out_n must be at least 8.
 * GC_QUOTE_BUF is a size that keeps a message short. */
char *gc_quote(const char *s, size_t n, char *out, size_t out_n);
#define GC_QSTR ((size_t)-1)
#define GC_QUOTE_BUF 100
/* gc_quote of the NUL-terminated s into a buffer of the enclosing block:
 * for use in a message's argument list. */
#define GC_QUOTED(s) gc_quote((s), GC_QSTR, (char[GC_QUOTE_BUF]){0}, GC_QUOTE_BUF)

/* Allocation through one wrapper so that out-of-memory is reported in one
 * way. Return NULL and set e (GC_ENOMEM) on failure. A test hook can make
 * the n-th allocation fail (gc_fault_alloc_after) to exercise error paths. */
void *gc_malloc(size_t n, gc_err_t *e);
void *gc_calloc(size_t count, size_t size, gc_err_t *e);
void *gc_realloc(void *p, size_t n, gc_err_t *e);
char *gc_strdup(const char *s, gc_err_t *e);
void gc_fault_alloc_after(long n); /* -1 disables */

/* printf into a fresh heap string; NULL on failure. */
char *gc_aprintf(gc_err_t *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Growable byte buffer. */
typedef struct gc_buf {
  char *data;
  size_t len, cap;
} gc_buf_t;
int gc_buf_append(gc_buf_t *b, const void *p, size_t n, gc_err_t *e);
int gc_buf_printf(gc_buf_t *b, gc_err_t *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gc_buf_free(gc_buf_t *b);

/* 128-bit content hash (XXH3) as 32 lowercase hex digits + NUL. */
#define GC_HASH_HEX 33
void gc_hash_hex(const void *data, size_t n, char out[GC_HASH_HEX]);

/* Read a whole file into memory (NUL-terminated for convenience).
 * Refuses files larger than max_bytes. */
int gc_read_file(const char *path, size_t max_bytes, char **out, size_t *n,
                 gc_err_t *e);
/* Write atomically: to path.tmp.PID then rename (gc_rename_output).
 * Refuses a path that is not a regular file (gc_check_output). */
int gc_write_file(const char *path, const void *p, size_t n, gc_err_t *e);
/* Whether gcore may write path: nothing is there, or what is there is a
 * regular file (kind 'f') or a directory (kind 'd'). A device node, a
 * FIFO, a socket or the other of file/directory is refused (GC_EINVAL,
 * "PATH: a character device, not a regular file"), so that an output flag
 * never replaces /dev/null or blocks on a FIFO. Symbolic links are
 * followed. */
int gc_check_output(const char *path, char kind, gc_err_t *e);
/* rename(tmp, path), but only over a regular file or nothing (checked just
 * before); on refusal or failure tmp is removed. */
int gc_rename_output(const char *tmp, const char *path, gc_err_t *e);
/* mkdir -p */
int gc_mkdirs(const char *path, gc_err_t *e);

/* Monotonic wall clock in seconds. */
double gc_now(void);

/* Parse a decimal int64 with full-string and range checking. */
int gc_parse_i64(const char *s, int64_t *out);

/* Host facts. Level: 4 for x86-64-v4 (AVX-512), 3 (AVX2+FMA+F16C), 2, 1. */
int gc_host_cpu_level(void);
void gc_host_cpu_name(char *out, size_t n);
int gc_host_ncpu(void);
int64_t gc_host_mem_bytes(void);

/* The largest code object gcore reads back (a compiled variant, a bundle
 * blob): far above any real kernel, a bound on what an untrusted file
 * can make it allocate. */
#define GC_CODE_OBJECT_MAX ((size_t)256 << 20)

#define GC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
