/* prelude_emu.h — runs the AMD matrix-core templates (gemm_mfma,
 * gemm_wmma, and with B in a block format gemm_q_mfma, gemm_q_wmma; for
 * gemm, gemm_add and gemm_swiglu; gemv_mfma and gemv_qmfma also for
 * rmsnorm_gemm and rmsnorm_gemm_swiglu; attention_mfma and attention_wmma
 * for attention) on the host, unchanged,
 * as a SIMT emulation: one thread per work-item of a block (fibers taking
 * turns on one host thread, emu_fiber.h), blocks one after
 * another, LDS a heap buffer of exactly @shmem bytes (ASan sees any access
 * past it), barriers as rendezvous of the fibers, and the matrix instructions and
 * wave shuffles as a wave-wide rendezvous where one lane evaluates the
 * instruction for all (a shuffle: every lane deposits, then reads).
 *
 * The instruction model below is written from the ISA documents (AMD
 * matrix instruction calculator for CDNA2/CDNA3 MFMA; RDNA3 ISA / GPUOpen
 * "WMMA on RDNA 3"), in the direction "matrix element -> (lane, item)",
 * deliberately not by reusing the prelude's GC_MFMA_* / GC_WMMA_* macros
 * (which state the same layouts in the direction the kernels use, "lane
 * -> matrix element"). A template whose index math does not match the
 * hardware's layout therefore computes a wrong product here. It replaces
 * only prelude_hip.h's device surface; the layout macros themselves come
 * from the real prelude (layouts.h, extracted by the test), and so do the
 * block formats of B for the quantized templates (quant.h, EMU_QUANT). */
#ifndef GC_EMU_PRELUDE_H
#define GC_EMU_PRELUDE_H

#include <math.h>
#include <type_traits>
#include "emu_fiber.h" /* the block's threads as fibers */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GC_F32 0
#define GC_F16 1
#define GC_BF16 2

#include "layouts.h" /* the >>> gc-matrix-layouts block of prelude_hip.h */

#define GC_DEVICE static inline
#define GC_KERNEL_BOUNDS(n) extern "C"
#define GC_KERNEL_OCC(n, b) extern "C"
#define GC_WARP WARP /* the wave size the test builds for */
#define GC_UNROLL(n)
#define GC_CAT_(a, b) a##b
#define GC_CAT(a, b) GC_CAT_(a, b)

typedef _Float16 gc_half4_t __attribute__((ext_vector_type(4)));
typedef short gc_short4_t __attribute__((ext_vector_type(4)));
typedef _Float16 gc_half16_t __attribute__((ext_vector_type(16)));
typedef short gc_short16_t __attribute__((ext_vector_type(16)));
typedef float gc_float4_t __attribute__((ext_vector_type(4)));
typedef float gc_float8_t __attribute__((ext_vector_type(8)));
typedef float gc_float16_t __attribute__((ext_vector_type(16)));

typedef float gc_f32_t;
typedef _Float16 gc_f16_t;
struct gc_bf16_t { uint16_t bits; };
#define GC_DTNAME_0 f32
#define GC_DTNAME_1 f16
#define GC_DTNAME_2 bf16
#define GC_DTNAME(code) GC_CAT(GC_DTNAME_, code)
#define GC_STORAGE(code) GC_CAT(GC_CAT(gc_, GC_DTNAME(code)), _t)
#define TA GC_STORAGE(GC_TA)
#define TB GC_STORAGE(GC_TB)
#define TC GC_STORAGE(GC_TC)

struct alignas(16) gc_raw16 { uint32_t w[4]; };
struct alignas(8) gc_raw8 { uint32_t w[2]; };

/* ---- the emulated machine ---------------------------------------------- */

struct emu_wave {
  emu_fbar bar;
  float in_a[64][16], in_b[64][16], acc[64][16], out[64][16];
  int xch[64]; /* shuffles (raw 32 bits) */
};
struct emu_block {
  emu_fbar bar;
  int nthreads;
  unsigned char *lds;
  emu_wave *waves;
  int wave_size;
};
static int64_t emu_bid;
static emu_block *emu_blk;
static int emu_errors; /* replication violations (WMMA) */

GC_DEVICE int gc_tid(void) { return emu_cur; }
GC_DEVICE int64_t gc_bid(void) { return emu_bid; }
GC_DEVICE int gc_lane(void) { return emu_cur % emu_blk->wave_size; }
GC_DEVICE void gc_barrier(void) { emu_fbar_wait(&emu_blk->bar, emu_blk->nthreads); }
/* A rendezvous of the calling thread's wave (all its lanes must call it). */
GC_DEVICE void emu_wave_sync(emu_wave *w) { emu_fbar_wait(&w->bar, emu_blk->wave_size, "a wave's rendezvous"); }
GC_DEVICE void gc_syncwarp(void) { emu_wave_sync(&emu_blk->waves[emu_cur / emu_blk->wave_size]); }
GC_DEVICE unsigned char *gc_dyn_shared(void) { return emu_blk->lds; }

GC_DEVICE void gc_pdl_wait(void) {}
GC_DEVICE void gc_pdl_launch(void) {}
/* An L2 prefetch is a hint, but its address must lie in a buffer: one
 * byte read there, so ASan sees one past the end. */
GC_DEVICE void gc_prefetch_l2(const void *p) { (void)*(const volatile char *)p; }

GC_DEVICE int64_t gc_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
GC_DEVICE int64_t gc_min64(int64_t a, int64_t b) { return a < b ? a : b; }
GC_DEVICE float gc_exp(float x) { return expf(x); }
GC_DEVICE float gc_exp2(float x) { return exp2f(x); }
GC_DEVICE float gc_max(float a, float b) { return fmaxf(a, b); }
GC_DEVICE float gc_fma(float a, float b, float c) { return fmaf(a, b, c); }
GC_DEVICE float gc_rsqrt(float x) { return 1.0f / sqrtf(x); }
#define GC_INF INFINITY
GC_DEVICE uint32_t gc_f2u(float f) { return __builtin_bit_cast(uint32_t, f); }
GC_DEVICE float gc_u2f(uint32_t u) { return __builtin_bit_cast(float, u); }

/* v_perm_b32 (CDNA3 ISA, VOP3 V_PERM_B32): byte i of the result is
 * selected by byte i of sel from the 8 bytes {hi, lo}, lo's bytes being
 * 0-3 and hi's 4-7; selectors 8-11 give the sign of bytes 1, 3, 5, 7
 * replicated, 12 gives 0x00, 13 and above 0xff. (The name is the clang
 * builtin's, which a template may call; it is no builtin on the host.) */
GC_DEVICE uint32_t __builtin_amdgcn_perm(uint32_t hi, uint32_t lo, uint32_t sel) {
  const uint64_t v = (uint64_t)hi << 32 | lo;
  uint32_t d = 0;
  for (int i = 0; i < 4; i++) {
    const unsigned s = sel >> (8 * i) & 255u;
    const unsigned b = s < 8 ? (unsigned)(v >> (8 * s) & 255u)
                       : s < 12 ? ((v >> (8 * (2 * (s - 8) + 1) + 7) & 1u) ? 255u : 0u)
                       : s == 12 ? 0u : 255u;
    d |= b << (8 * i);
  }
  return d;
}

/* v from lane src of the wave (ds_bpermute: src taken modulo the wave;
 * 32 bits moved as they are); every lane of the wave must call it. */
GC_DEVICE int gc_shfl(int v, int src) {
  emu_wave *w = &emu_blk->waves[emu_cur / emu_blk->wave_size];
  w->xch[gc_lane()] = v;
  emu_wave_sync(w);
  int r = w->xch[src & (emu_blk->wave_size - 1)];
  emu_wave_sync(w); /* read before the next shuffle writes */
  return r;
}
GC_DEVICE float gc_shfl(float v, int src) {
  return __builtin_bit_cast(float, gc_shfl(__builtin_bit_cast(int, v), src));
}
GC_DEVICE int gc_shfl_xor(int v, int mask) { return gc_shfl(v, gc_lane() ^ mask); }

/* v_readfirstlane_b32: the value of the wave's first active lane (all
 * lanes are active where the templates call it: lane 0's); every lane of
 * the wave must call it. (The clang builtin's name; no builtin on the host.) */
GC_DEVICE int __builtin_amdgcn_readfirstlane(int v) {
  emu_wave *w = &emu_blk->waves[emu_cur / emu_blk->wave_size];
  w->xch[gc_lane()] = v;
  emu_wave_sync(w);
  const int r = w->xch[0];
  emu_wave_sync(w);
  return r;
}
GC_DEVICE float gc_shfl_xor(float v, int mask) { return gc_shfl(v, gc_lane() ^ mask); }

GC_DEVICE float emu_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
GC_DEVICE uint16_t emu_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
GC_DEVICE void gc_st(float *p, int64_t i, float v) { p[i] = v; }
GC_DEVICE void gc_st(_Float16 *p, int64_t i, float v) { p[i] = (_Float16)v; }
GC_DEVICE void gc_st(gc_bf16_t *p, int64_t i, float v) { p[i].bits = emu_to_bf16(v); }
GC_DEVICE float gc_ld(const float *p, int64_t i) { return p[i]; }
GC_DEVICE float gc_ld(const _Float16 *p, int64_t i) { return (float)p[i]; }
GC_DEVICE float gc_ld(const gc_bf16_t *p, int64_t i) { return emu_bf16(p[i].bits); }
#define LOAD_C(p, i) gc_ld((const TC *)(p), (i))
#define STORE_C(p, i, v) gc_st((TC *)(p), (i), (v))
#define STORE_GEMM(p, i, v) STORE_C(p, i, GC_OP_GEMM_ADD ? (v) + LOAD_C(p, i) : (v))

/* Two elements packed in one 32-bit word (element 0 in the low half). */
GC_DEVICE void gc_unpack2(_Float16, uint32_t w, float *o) {
  o[0] = (float)__builtin_bit_cast(_Float16, (uint16_t)(w & 0xffffu));
  o[1] = (float)__builtin_bit_cast(_Float16, (uint16_t)(w >> 16));
}
GC_DEVICE void gc_unpack2(gc_bf16_t, uint32_t w, float *o) {
  o[0] = emu_bf16((uint16_t)(w & 0xffffu)), o[1] = emu_bf16((uint16_t)(w >> 16));
}
GC_DEVICE uint32_t gc_pack2(_Float16, float a, float b) {
  return (uint32_t)__builtin_bit_cast(uint16_t, (_Float16)a) |
         (uint32_t)__builtin_bit_cast(uint16_t, (_Float16)b) << 16;
}
GC_DEVICE uint32_t gc_pack2(gc_bf16_t, float a, float b) {
  return (uint32_t)emu_to_bf16(a) | (uint32_t)emu_to_bf16(b) << 16;
}

#include "emu_split.h" /* GC_GLOBAL, the fence, the ticket's atomic, L2-only loads and stores */

/* The GPU preludes' >>> gc-epilogue block (from prelude_common.h:
 * epilogue.h, extracted by the test): the SwiGLU every family stores;
 * prelude_hip.h's >>> gc-kv-lds block (kvlds.h): the MFMA attentions' K/V
 * tiles in LDS; prelude_common.h's >>> gc-split block (split.h): the
 * decode attentions' merge of partial softmaxes. */
#include "epilogue.h"
#include "kvlds.h"
#include "split.h"

#ifdef EMU_QUANT
/* The block formats: the vendor's two primitives (host versions), then the
 * GPU preludes' >>> gc-quant block itself (from prelude_common.h: quant.h,
 * extracted by the test), which the quantized templates read B through. */
GC_DEVICE float gc_h2f_bits(uint32_t h) { return (float)__builtin_bit_cast(_Float16, (uint16_t)h); }
GC_DEVICE float gc_ubyte_f(uint32_t w, int i) { return (float)((w >> (8 * i)) & 255u); }
GC_DEVICE float gc_ubyte_less_f(uint32_t w, int i, float b) { return gc_ubyte_f(w, i) - b; }
#include "quant.h"
#endif

/* A 16-bit operand word as a float, by dtype. */
GC_DEVICE float emu_word(int dt, short w) {
  if (dt == GC_BF16) return emu_bf16((uint16_t)w);
  return (float)__builtin_bit_cast(_Float16, w);
}

/* Every lane of the wave deposits its operands; lane 0 evaluates the
 * instruction with fn; every lane takes its result back. */
template <class F> GC_DEVICE void emu_wave_op(F fn) {
  emu_wave *w = &emu_blk->waves[emu_cur / emu_blk->wave_size];
  emu_wave_sync(w);
  if (gc_lane() == 0) fn(w);
  emu_wave_sync(w);
}

/* MFMA S×S×K, one block (ISA model). A[i][k] is item k % KPL of lane
 * i + S·(k / KPL); B[k][j] is item k % KPL of lane j + S·(k / KPL);
 * D[i][j] is register (i % 4) + 4·(i / 8) of lane j + 32·((i / 4) % 2)
 * for S = 32, register i % 4 of lane j + 16·(i / 4) for S = 16. */
template <int S, int KPL> GC_DEVICE void emu_mfma_eval(emu_wave *w) {
  const int K = 64 * KPL / S;
  for (int i = 0; i < S; i++)
    for (int j = 0; j < S; j++) {
      float sum = 0;
      for (int k = 0; k < K; k++)
        sum += w->in_a[i + S * (k / KPL)][k % KPL] * w->in_b[j + S * (k / KPL)][k % KPL];
      int lane = S == 32 ? j + 32 * ((i / 4) % 2) : j + 16 * (i / 4);
      int reg = S == 32 ? (i % 4) + 4 * (i / 8) : i % 4;
      w->out[lane][reg] = w->acc[lane][reg] + sum;
    }
}

template <int DT, int S> struct gc_mfma {
  typedef typename std::conditional<S == 32, gc_float16_t, gc_float4_t>::type acc_t;
  static constexpr int NACC = S == 32 ? 16 : 4;
  template <class OP> GC_DEVICE static acc_t run(OP a, OP b, acc_t c) {
    const int l = gc_lane();
    emu_wave *w = &emu_blk->waves[emu_cur / emu_blk->wave_size];
    constexpr int KPL = DT == GC_F32 ? 1 : 4;
    for (int v = 0; v < KPL; v++) {
      if constexpr (DT == GC_F32) {
        w->in_a[l][v] = (float)a, w->in_b[l][v] = (float)b;
      } else {
        w->in_a[l][v] = emu_word(DT, ((gc_short4_t)a)[v]);
        w->in_b[l][v] = emu_word(DT, ((gc_short4_t)b)[v]);
      }
    }
    for (int r = 0; r < NACC; r++) w->acc[l][r] = c[r];
    emu_wave_op([](emu_wave *w) { emu_mfma_eval<S, KPL>(w); });
    acc_t d;
    for (int r = 0; r < NACC; r++) d[r] = w->out[l][r];
    emu_wave_sync(w); /* out is read before the next op */
    return d;
  }
};

/* WMMA 16×16×16, wave32 (ISA model). A[i][k] is item k of lane i and of
 * lane i + 16 (the two must agree); B[k][j] is item k of lanes j and
 * j + 16; D[i][j] is register i / 2 of lane j + 16·(i % 2). */
GC_DEVICE void emu_wmma_eval(emu_wave *w) {
  for (int l = 0; l < 16; l++)
    for (int k = 0; k < 16; k++)
      if (w->in_a[l][k] != w->in_a[l + 16][k] || w->in_b[l][k] != w->in_b[l + 16][k])
        __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      float sum = 0;
      for (int k = 0; k < 16; k++) sum += w->in_a[i][k] * w->in_b[j][k];
      w->out[j + 16 * (i % 2)][i / 2] = w->acc[j + 16 * (i % 2)][i / 2] + sum;
    }
}

template <int DT> GC_DEVICE gc_float8_t gc_wmma(gc_short16_t a, gc_short16_t b, gc_float8_t c) {
  const int l = gc_lane();
  emu_wave *w = &emu_blk->waves[emu_cur / emu_blk->wave_size];
  for (int v = 0; v < 16; v++) w->in_a[l][v] = emu_word(DT, a[v]), w->in_b[l][v] = emu_word(DT, b[v]);
  for (int r = 0; r < 8; r++) w->acc[l][r] = c[r];
  emu_wave_op([](emu_wave *w) { emu_wmma_eval(w); });
  gc_float8_t d;
  for (int r = 0; r < 8; r++) d[r] = w->out[l][r];
  emu_wave_sync(w);
  return d;
}

#endif
