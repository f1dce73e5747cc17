/* cli.c — the tools' shared edges (see cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

int gc_cli_getopt(int argc, char **argv, const char *optstring, const struct option *longopts) {
  char quiet[64];
  snprintf(quiet, sizeof quiet, ":%s", optstring);
  opterr = 0;
  return getopt_long(argc, argv, quiet, longopts, NULL);
}

int gc_cli_bad_option(const char *tool, int c, char **argv) {
  char opt[80];
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

int gc_cli_exit(const char *tool, int rc) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    if (rc == 0) fprintf(stderr, "%s: writing standard output failed: %s\n", tool, strerror(errno ? errno : EIO));
    return rc ? rc : 1;
  }
  return rc;
}
