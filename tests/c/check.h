/* check.h — the checks the C unit tests (tests/c/test_*.c) share, and the
 * report they print.
 *
 *   CHECK(cond)                  a check; a failure prints
 *                                "FAIL file:line: cond"
 *   CHECK(cond, "fmt", args...)  the same, the message in place of cond
 *   CHECK_MSG(e, want)           e.msg (a gc_err_t) is want, exactly
 *   CHECK_MSG_HAS(e, sub)        e.msg contains sub (GC_TEST_VERBOSE=1 prints
 *                                every message the two check)
 *   check_case("name", fn)       runs fn as one named case (below)
 *   return check_report();       the last line, "N passed, M failed", and
 *                                main's exit status (1 on any failure)
 *
 * tests/test_c_units.py reads that last line (it must say " 0 failed") and
 * a first line "skip: why" (check_skip, printf-like) where a unit's data is absent.
 *
 * Outside a case each check counts once. Inside check_case a failure names
 * the case, "FAIL name (file:line): ...", and the case counts once, failed
 * when any of its checks failed. A unit that defines CHECK_CONTEXT (an
 * expression giving a string or NULL) before including this adds it to
 * every failed CHECK(cond) line, in parentheses (test_api: the API's last
 * message). */
#ifndef GC_TESTS_CHECK_H
#define GC_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CHECK_CONTEXT
#define CHECK_CONTEXT ((const char *)NULL)
#endif

static int passed, failed;         /* checks, and cases run by check_case */
static const char *check_case_now; /* the case running, or NULL */
static int check_case_failed;

/* Counts a check; on failure prints "FAIL <where>: " and returns 1: the
 * caller prints the rest of the line. */
static inline int check_fail_(int ok, const char *file, int line) {
  if (ok) {
    if (!check_case_now) passed++;
    return 0;
  }
  if (check_case_now) {
    check_case_failed = 1;
    printf("FAIL %s (%s:%d): ", check_case_now, file, line);
  } else {
    failed++;
    printf("FAIL %s:%d: ", file, line);
  }
  return 1;
}

static inline void check_text_(const char *cond, const char *context) {
  if (context) printf("%s (%s)\n", cond, context);
  else printf("%s\n", cond);
}

#define CHECK_1_(cond)                                                         \
  do {                                                                         \
    if (check_fail_((cond) ? 1 : 0, __FILE__, __LINE__)) check_text_(#cond, CHECK_CONTEXT); \
  } while (0)
#define CHECK_F_(cond, ...)                                                    \
  do {                                                                         \
    if (check_fail_((cond) ? 1 : 0, __FILE__, __LINE__)) {                     \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)
/* CHECK(cond) or CHECK(cond, fmt, ...): the count of arguments picks one. */
#define CHECK_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, \
                    name, ...)                                                 \
  name
#define CHECK(...)                                                             \
  CHECK_PICK_(__VA_ARGS__, CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, \
              CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, CHECK_F_, \
              CHECK_F_, CHECK_1_, _)(__VA_ARGS__)

/* With GC_TEST_VERBOSE set, the message checks print each message they
 * check, passed or not: "  <case>: <message>". */
static inline void check_show_(const char *msg) {
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("GC_TEST_VERBOSE") != NULL;
  if (verbose) printf("  %s: %s\n", check_case_now ? check_case_now : "-", msg);
}

/* The message, exactly. */
#define CHECK_MSG(e, want)                                                     \
  do {                                                                         \
    check_show_((e).msg);                                                      \
    if (check_fail_(!strcmp((e).msg, (want)), __FILE__, __LINE__))             \
      printf("message\n  got:  %s\n  want: %s\n", (e).msg, (want));            \
  } while (0)
/* A part of the message. */
#define CHECK_MSG_HAS(e, sub)                                                  \
  do {                                                                         \
    check_show_((e).msg);                                                      \
    CHECK(strstr((e).msg, (sub)) != NULL, "message \"%s\" lacks \"%s\"", (e).msg, (sub)); \
  } while (0)

/* Runs fn as one case named name. */
static inline void check_case(const char *name, void (*fn)(void)) {
  check_case_now = name;
  check_case_failed = 0;
  fn();
  check_case_now = NULL;
  if (check_case_failed) failed++;
  else passed++;
}

/* The unit's data is absent: its whole report, a skip saying why. */
__attribute__((format(printf, 1, 2))) static inline int check_skip(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("skip: ");
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n0 passed, 0 failed\n");
  return 0;
}

static inline int check_report(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

#endif
