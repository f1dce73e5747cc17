/* resources.h — what a compiled variant uses of the device, as the compile
 * drivers read it from the code object and the tuning database and bundles
 * store it: one record shared by gen/, db/ and the tests. */
#ifndef GC_CORE_RESOURCES_H
#define GC_CORE_RESOURCES_H

#include <stdint.h>

/* Resource usage of a compiled variant; -1 where not reported. regs are
 * registers per thread (NVIDIA) or architected VGPRs per lane (AMD);
 * agprs, sgprs and wave are AMD's (accumulation VGPRs, scalar registers,
 * wavefront size); occupancy is theoretical waves per SIMD (AMD) at the
 * variant's block size, computed by gen (gen/resources.c). */
typedef struct gc_resources {
  int64_t code_bytes, regs, spills, shared_bytes, scratch_bytes;
  int64_t agprs, sgprs, wave, occupancy;
} gc_resources_t;

#define GC_RESOURCES_UNKNOWN ((gc_resources_t){-1, -1, -1, -1, -1, -1, -1, -1, -1})

#endif
