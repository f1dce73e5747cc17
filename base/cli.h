/* cli.h — what every gcore tool does the same way at its edges: a bad
 * option is one line that points at --help, an option that takes a value
 * may be given once, --version prints one line, and a tool whose output
 * could not be written exits non-zero. */
#ifndef GC_CLI_H
#define GC_CLI_H

#include <getopt.h>

/* getopt_long over argv, quiet (no message of getopt's own): returns the
 * option, -1 at the end, '?' for an unknown option, ':' for a missing
 * argument (optstring gets a leading ':' here) and GC_CLI_REPEATED for
 * the second occurrence of an option that takes a value (a second --db
 * or -o: every such option of the tools holds one value, and silently
 * taking the last of two is how a script tunes into the wrong database).
 * Options without a value (--json, --progress) may repeat. A scan of argv
 * is from the first call to the call that returns -1 (or to a call with
 * another argv). */
int gc_cli_getopt(int argc, char **argv, const char *optstring, const struct option *longopts);
#define GC_CLI_REPEATED (-2)

/* After gc_cli_getopt returned '?', ':' or GC_CLI_REPEATED: print
 *   "TOOL: unknown option '--x' (see TOOL --help)",
 *   "TOOL: option '--x' needs a value (see TOOL --help)" or
 *   "TOOL: option '--x' given twice (it takes one value)"
 * on stderr and return 2, the exit code for a usage error. */
int gc_cli_bad_option(const char *tool, int c, char **argv);

/* A --devices list: "0,2,3" into ord[0..n), n returned: 1 to max
 * different ordinals from 0 to 1024, comma-separated; -1 if s is not one. */
int gc_cli_devices(const char *s, int *ord, int max);

/* Print "TOOL VERSION" on stdout; return gc_cli_exit(tool, 0). */
int gc_cli_version(const char *tool);

/* The exit code of a tool that would return rc: stdout is flushed, and a
 * write that failed (a full disk, a closed pipe, /dev/full) turns 0 into 1
 * with "TOOL: writing standard output failed" on stderr. */
int gc_cli_exit(const char *tool, int rc);

#endif
