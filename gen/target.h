/* target.h — what code is generated for: a backend and an architecture,
 * with the constants templates constrain against. "cpu" names the host's
 * best x86-64 level; "cpu:x86-64-v3" names one explicitly. GPU targets
 * (sm_XX, gfxNNN) join here with their backends. */
#ifndef GC_TARGET_H
#define GC_TARGET_H

#include "../base/expr.h"

typedef struct gc_target {
  char name[64];    /* canonical: "cpu:x86-64-v4" */
  char backend[8];  /* "cpu" */
  char arch[48];    /* "x86-64-v4" */
  gc_env_t consts;  /* VBYTES L1 L2 NCPU for cpu */
} gc_target_t;

/* Parse one target name. Unknown or unsupported names → GC_EINVAL naming
 * the targets this build supports. */
int gc_target_parse(const char *s, gc_target_t *t, gc_err_t *e);
/* The host CPU's x86-64 level name ("x86-64-v4", "-v3", "-v2" or "-v1"). */
const char *gc_target_host_cpu_level(void);
/* Level number of "x86-64-vN", 0 if not one. */
int gc_target_cpu_level(const char *arch);

#endif
