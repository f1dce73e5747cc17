/* gemv_simt.h — what the SIMT GEMV (gemv.cu, @backend gpu) needs on the
 * AMD emulation beside prelude_emu.h, as prelude_hip.h gives it, then the
 * GPU preludes' >>> gc-gemv block (gemv.h, extracted by the test).
 * Included after the target's constants (GC_WARP is the build's WARP).
 * Its static LDS is GC_SHARED of emu_shared.h. */
#ifndef GC_EMU_GEMV_SIMT_H
#define GC_EMU_GEMV_SIMT_H
#include "emu_shared.h"
#define LOAD_A(p, i) gc_ld((const TA *)(p), (i))
#define LOAD_B(p, i) gc_ld((const TB *)(p), (i))
GC_DEVICE float gc_group_sum(float v, int w) {
  for (int m = w >> 1; m > 0; m >>= 1)
    v += gc_shfl_xor(v, m);
  return v;
}
GC_DEVICE float gc_warp_sum(float v) { return gc_group_sum(v, GC_WARP); }
template <int N, class T> GC_DEVICE void gc_ldv(const T *p, float *out) {
  for (int i = 0; i < N; i++) out[i] = gc_ld(p, i);
}
GC_DEVICE void gc_bulk_prefetch_l2(const void *, unsigned) {} /* no window on AMD */
GC_DEVICE void gc_sincos_f64(double x, double *s, double *c) { *s = sin(x), *c = cos(x); }
#include "gemv.h"
#endif
