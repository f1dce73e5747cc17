/* test_trust.c — unit tests of the base helpers that keep gcore's messages
 * and outputs safe: gc_quote (values from outside shown on one line),
 * gc_err_set's own clean-up, and gc_check_output / gc_rename_output. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../base/base.h"

#include "check.h"

static const char *q(const char *s, size_t n, size_t out_n) {
  static char out[512];
  return gc_quote(s, n, out, out_n);
}

static void test_quote(void) {
  CHECK(!strcmp(q("abc", GC_QSTR, 64), "'abc'"));
  CHECK(!strcmp(q("a\nb\r\tc\\d'e", GC_QSTR, 64), "'a\\nb\\r\\tc\\\\d\\'e'"));
  CHECK(!strcmp(q("\x01\x1b[2J\x7f", GC_QSTR, 64), "'\\x01\\x1b[2J\\x7f'"));
  CHECK(!strcmp(q("a\0b", 3, 64), "'a\\x00b'"));
  CHECK(!strcmp(q(NULL, 0, 64), "(null)"));
  /* printable UTF-8 kept; invalid bytes, overlongs, surrogates and C1 escaped */
  CHECK(!strcmp(q("\xe2\x96\x81x\xc3\xa9", GC_QSTR, 64), "'\xe2\x96\x81x\xc3\xa9'"));
  CHECK(!strcmp(q("\xff\xc0\x80\xed\xa0\x80", GC_QSTR, 64),
                "'\\xff\\xc0\\x80\\xed\\xa0\\x80'"));
  CHECK(!strcmp(q("\xc2\x9b" "1m", GC_QSTR, 64), "'\\xc2\\x9b1m'"));
  CHECK(!strcmp(q("\xe2\x96", GC_QSTR, 64), "'\\xe2\\x96'")); /* cut sequence */
  /* long values are cut with an ellipsis and stay within out_n */
  char big[300];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  for (size_t n = 8; n < 40; n++) {
    const char *r = q(big, GC_QSTR, n);
    CHECK(strlen(r) < n && r[0] == '\'' && r[strlen(r) - 1] == '\'' &&
          strstr(r, "\xe2\x80\xa6'"));
  }
  CHECK(!strcmp(q("abcdef", GC_QSTR, 9), "'abcdef'"));
  CHECK(!strcmp(q("abcdefg", GC_QSTR, 9), "'abc\xe2\x80\xa6'"));
  const char *r = q("\n\n\n\n\n\n\n\n", GC_QSTR, 12);
  CHECK(!strcmp(r, "'\\n\\n\\n\xe2\x80\xa6'"));
}

static void test_err_one_line(void) {
  gc_err_t e;
  gc_err_set(&e, GC_EINVAL, "x%sy", "\na\r\tb\x01\x1b\x7f\xc2\x85z");
  CHECK(!strcmp(e.msg, "x a  b???\?\?zy"));
  CHECK(!strchr(e.msg, '\n'));
  gc_err_prefix(&e, "p\n%s", "q");
  CHECK(!strncmp(e.msg, "p q: x a", 8));
}

static void test_outputs(void) {
  gc_err_t e;
  char dir[] = "/tmp/gc_trust_XXXXXX", path[200], tmp[220];
  CHECK(mkdtemp(dir) != NULL);
  CHECK(gc_check_output("/dev/null", 'f', &e) == GC_EINVAL &&
        strstr(e.msg, "/dev/null: a character device, not a regular file"));
  CHECK(gc_check_output(dir, 'f', &e) == GC_EINVAL && strstr(e.msg, "a directory, not a regular file"));
  CHECK(gc_check_output(dir, 'd', &e) == GC_OK);
  snprintf(path, sizeof path, "%s/fifo", dir);
  CHECK(mkfifo(path, 0600) == 0);
  CHECK(gc_check_output(path, 'f', &e) == GC_EINVAL && strstr(e.msg, "a FIFO"));
  CHECK(gc_check_output(path, 'd', &e) == GC_EINVAL && strstr(e.msg, "a FIFO, not a directory"));
  CHECK(gc_write_file(path, "x", 1, &e) == GC_EINVAL);
  /* a temporary file is never renamed over the FIFO */
  snprintf(tmp, sizeof tmp, "%s/t", dir);
  CHECK(gc_write_file(tmp, "x", 1, &e) == GC_OK);
  CHECK(gc_rename_output(tmp, path, &e) == GC_EINVAL && access(tmp, F_OK) != 0);
  struct stat st;
  CHECK(stat(path, &st) == 0 && S_ISFIFO(st.st_mode));
  /* over a regular file or nothing it is renamed */
  snprintf(path, sizeof path, "%s/f", dir);
  CHECK(gc_write_file(path, "abc", 3, &e) == GC_OK && gc_write_file(path, "de", 2, &e) == GC_OK);
  CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 2);
  /* a FIFO planted at the temporary name fails at once instead of blocking */
  char planted[240];
  snprintf(planted, sizeof planted, "%s.tmp.%d", path, (int)getpid());
  CHECK(mkfifo(planted, 0600) == 0);
  CHECK(gc_write_file(path, "x", 1, &e) == GC_EIO);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  test_quote();
  test_err_one_line();
  test_outputs();
  return check_report();
}
