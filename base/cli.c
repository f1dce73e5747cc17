/* cli.c — the tools' shared edges (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

/* The scan in progress: its argv, the options with a value it has seen,
 * and the word of a repeated one for the message. */
static struct {
  char **argv;
  int seen[128], n;
  char repeated[80];
} scan;

/* The option word of the value getopt just returned: "--db" of "--db=x"
 * or of "--db x", "-o" of "-ox" or "-o x". */
static void option_word(char **argv, int c, char *out, size_t n) {
  const char *word = optind >= 2 && optarg == argv[optind - 1] ? argv[optind - 2]
                     : optind >= 1                              ? argv[optind - 1]
                                                                : "";
  if (!strncmp(word, "--", 2))
    snprintf(out, n, "%.*s", (int)strcspn(word, "="), word);
  else
    snprintf(out, n, "-%c", c > 32 && c < 127 ? c : '?');
}

int gc_cli_getopt(int argc, char **argv, const char *optstring, const struct option *longopts) {
  char quiet[64];
  snprintf(quiet, sizeof quiet, ":%s", optstring);
  opterr = 0;
  if (scan.argv != argv) scan.argv = argv, scan.n = 0;
  int c = getopt_long(argc, argv, quiet, longopts, NULL);
  if (c == -1) scan.argv = NULL, scan.n = 0;
  if (c == -1 || c == '?' || c == ':' || !optarg) return c;
  for (int i = 0; i < scan.n; i++)
    if (scan.seen[i] == c) {
      option_word(argv, c, scan.repeated, sizeof scan.repeated);
      return GC_CLI_REPEATED;
    }
  if (scan.n < (int)GC_ARRAY_LEN(scan.seen)) scan.seen[scan.n++] = c;
  return c;
}

int gc_cli_bad_option(const char *tool, int c, char **argv) {
  char opt[80];
  if (c == GC_CLI_REPEATED) {
    fprintf(stderr, "%s: option '%s' given twice (it takes one value)\n", tool, scan.repeated);
    return 2;
  }
  /* getopt leaves the word it stopped at before optind */
  const char *word = optind > 0 ? argv[optind - 1] : "";
  if (!strncmp(word, "--", 2))
    snprintf(opt, sizeof opt, "%.*s", (int)strcspn(word, "="), word);
  else
    snprintf(opt, sizeof opt, "-%c", optopt > 32 && optopt < 127 ? optopt : '?');
  if (c == ':')
    fprintf(stderr, "%s: option '%s' needs a value (see %s --help)\n", tool, opt, tool);
  else
    fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", tool, opt, tool);
  return 2;
}

int gc_cli_version(const char *tool) {
  printf("%s %s\n", tool, GC_VERSION);
  return gc_cli_exit(tool, 0);
}

int gc_cli_devices(const char *s, int *ord, int max) {
  int n = 0;
  for (const char *p = s;; p++) {
    char *end;
    if (*p < '0' || *p > '9' || n == max) return -1;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || v > 1024) return -1;
    for (int i = 0; i < n; i++)
      if (ord[i] == v) return -1;
    ord[n++] = (int)v;
    if (!*end) return n;
    if (*end != ',') return -1;
    p = end;
  }
}

int gc_cli_exit(const char *tool, int rc) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    if (rc == 0) fprintf(stderr, "%s: writing standard output failed: %s\n", tool, strerror(errno ? errno : EIO));
    return rc ? rc : 1;
  }
  return rc;
}
