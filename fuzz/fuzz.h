/* fuzz.h — what the libFuzzer targets share: one scratch folder per
 * process for the readers that take a path, writing an input (or a part
 * of it) there, and splitting an input into parts at a separator. fuzz/ is
 * a layer above everything, like tests/; nothing here is in the library. */
#ifndef GC_FUZZ_H
#define GC_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

/* libFuzzer's entry points: one input (every target), and once before
 * the first (targets that set up what every input shares). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FZ_PATH 512

/* Separator of a multi-file input (a line of its own): config.json, then
 * model.safetensors, and so on; each target says which part is which. */
#define FZ_SEP "\n#--gcore-fuzz-next-file--#\n"

/* This process's scratch folder: $FUZZ_TMPDIR, else /dev/shm (memory:
 * SQLite's syncs cost nothing there), else /tmp; made on first use as
 * gcore-fuzz-XXXXXX inside it and removed with its files at exit. Aborts
 * when none can be made: a harness with nowhere to write cannot run. */
const char *fz_dir(void);

/* Write p[n] to fz_dir()/name, replacing it, and put the path in out.
 * Aborts on a write error (a full disk is not a finding in the reader). */
void fz_write(const char *name, const void *p, size_t n, char out[FZ_PATH]);

/* Remove fz_dir()/name if it exists (and SQLite's -wal, -shm, -journal
 * beside it). */
void fz_remove(const char *name);

/* Split data[n] at each FZ_SEP into at most max parts (the last keeps any
 * further separators): part[i] and len[i]. Returns the number of parts
 * (>= 1). Can't fail. */
int fz_split(const uint8_t *data, size_t n, const uint8_t **part, size_t *len, int max);

/* A NUL-terminated heap copy of data[n], cut at its first NUL. Aborts on
 * out-of-memory. */
char *fz_cstr(const uint8_t *data, size_t n);

struct gc_tok;
/* What gcore-run does with a loaded tokenizer, on a fixed text with ASCII,
 * numbers, whitespace, CJK, emoji, invalid UTF-8 and special-token text:
 * encode (with and without special tokens and BOS), decode, stream every
 * id of the vocabulary (up to a bound), and build a chat turn. Aborts
 * (a finding) when an id is outside the vocabulary or decoded text is not
 * valid UTF-8: both are promises of models/tokenizer.h. */
void fz_tok_use(struct gc_tok *t);

/* What gcore-run and gcore-tune --model do with a model path: open its
 * weights (reading every byte of every tensor) and derive the problems
 * of its forward pass for every backend. */
void fz_model_use(const char *path);

/* With FUZZ_VERBOSE set in the environment, print "what: ok" or "what:
 * the error message" on stderr: how a seed is checked to get past the
 * reader's checks (`FUZZ_VERBOSE=1 build/fuzz/fuzz_x SEED`). Returns rc. */
int fz_report(const char *what, int rc, const gc_err_t *e);

/* Fold n bytes into a sum the compiler cannot drop: reading every byte a
 * reader hands out lets ASan see a pointer past what it owns. */
void fz_touch(const void *p, size_t n);

#endif
