/* host.c — facts about the machine gcore runs on: x86-64 ISA level, CPU
 * name, core count and memory size. */
#include <string.h>
#include <unistd.h>

#include "base.h"

int gc_host_cpu_level(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return 4;
  if (__builtin_cpu_supports("x86-64-v3")) return 3;
  if (__builtin_cpu_supports("x86-64-v2")) return 2;
  return 1;
}

void gc_host_cpu_name(char *out, size_t n) {
  snprintf(out, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    char *c = strchr(line, ':');
    if (!c) continue;
    c += 1 + strspn(c + 1, " \t");
    c[strcspn(c, "\n")] = 0;
    snprintf(out, n, "%s", c);
    break;
  }
  fclose(f);
}

int gc_host_ncpu(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int64_t gc_host_mem_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}
