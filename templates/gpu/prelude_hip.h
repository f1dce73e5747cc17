/* prelude_hip.h — the text gen/ puts first in every generated AMD kernel
 * source (clang-19 or comgr, gfx90a / gfx942 / gfx1100). prelude_cuda.h
 * gives the same names for NVIDIA, so a `@backend gpu` template is one
 * source for both vendors.
 *
 * Header-free: only clang builtins (__builtin_amdgcn_*, __hip_atomic_*),
 * so it compiles with -nogpuinc -nogpulib, without ROCm headers or device
 * libraries. It owns: fixed-width integer types, kernel and helper
 * qualifiers, thread/block ids, barriers, wave shuffles (ds_bpermute) and
 * reductions, shared memory (LDS), device-scope atomics, the storage type
 * of each dtype (_Float16; bf16 as raw bits) with scalar and vector loads
 * widening to fp32 and stores narrowing from fp32 (round to nearest even),
 * math (gc_exp, gc_exp2, gc_rsqrt, gc_fma, and sincos in double, done
 * here because there is no libm on the device), and for the matrix-core
 * templates the MFMA/WMMA operand layouts (the gc-matrix-layouts block,
 * plain C that tests compile on the host) and builtin wrappers.
 *
 * Order of the generated source: this prelude, then the #defines of the
 * target constants (WARP SMEM SMS MAXT), dtype sizes, dtype codes and
 * parameters, then the template; macros that depend on them expand at
 * their use in the template. GC_WARP is the compiler's wavefront size
 * (64 on CDNA gfx90a/gfx942, 32 on RDNA gfx1100), which gen's WARP must
 * match. */
#ifndef GC_HIP_PRELUDE_H
#define GC_HIP_PRELUDE_H

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;

#define GC_HIP 1
#define GC_F32 0
#define GC_F16 1
#define GC_BF16 2

/* ------------------------------------------------------------------ */
/* Qualifiers, ids, barriers                                           */
/* ------------------------------------------------------------------ */

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))

#define GC_KERNEL extern "C" __global__
#define GC_KERNEL_BOUNDS(n) \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, n)))
/* ... and asks for b such blocks resident per CU (4 SIMDs): at least
 * b·ceil(n/GC_WARP)/4 waves per SIMD, which caps VGPRs accordingly. */
#define GC_KERNEL_OCC(n, b)                                              \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(1, n), \
                                       amdgpu_waves_per_eu(((b) * (((n) + GC_WARP - 1) / GC_WARP) + 3) / 4)))
#define GC_DEVICE static __device__ inline __attribute__((always_inline))
#define GC_SHARED __shared__
#define GC_GLOBAL __device__ /* a module-scope device variable */
#define GC_RESTRICT __restrict__
#define GC_ALIGN(n) __attribute__((aligned(n)))

#define GC_CAT_(a, b) a##b
#define GC_CAT(a, b) GC_CAT_(a, b)
#define GC_STR_(x) #x
#define GC_STR(x) GC_STR_(x)
/* Unroll the next loop n times; n may be a macro (a parameter). */
#define GC_UNROLL(n) _Pragma(GC_STR(unroll n))

#ifdef __AMDGCN_WAVEFRONT_SIZE
#define GC_WARP __AMDGCN_WAVEFRONT_SIZE
#else
#define GC_WARP WARP /* gen's target constant */
#endif

GC_DEVICE int gc_tid(void) { return (int)__builtin_amdgcn_workitem_id_x(); }
GC_DEVICE int gc_tid_y(void) { return (int)__builtin_amdgcn_workitem_id_y(); }
GC_DEVICE int gc_tid_z(void) { return (int)__builtin_amdgcn_workitem_id_z(); }
GC_DEVICE int64_t gc_bid(void) { return (int64_t)__builtin_amdgcn_workgroup_id_x(); }
GC_DEVICE int64_t gc_bid_y(void) { return (int64_t)__builtin_amdgcn_workgroup_id_y(); }
GC_DEVICE int64_t gc_bid_z(void) { return (int64_t)__builtin_amdgcn_workgroup_id_z(); }
/* Lane of the calling thread within its wavefront. */
GC_DEVICE int gc_lane(void) {
  unsigned lo = __builtin_amdgcn_mbcnt_lo(~0u, 0u);
  return GC_WARP == 64 ? (int)__builtin_amdgcn_mbcnt_hi(~0u, lo) : (int)lo;
}

/* All threads of the block arrive; LDS writes before are seen by reads
 * after (what __syncthreads is in HIP). */
GC_DEVICE void gc_barrier(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
/* The same for the lanes of one wavefront (all lanes must call it). */
GC_DEVICE void gc_syncwarp(void) {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}

/* Programmatic dependent launch is NVIDIA's (prelude_cuda.h): HIP
 * launches on one stream never overlap, so a @pdl kernel's wait and
 * launch points are no-ops here, and so is the L2 prefetch hint. */
GC_DEVICE void gc_pdl_wait(void) {}
GC_DEVICE void gc_pdl_launch(void) {}
GC_DEVICE void gc_prefetch_l2(const void *) {}
GC_DEVICE void gc_bulk_prefetch_l2(const void *, unsigned) {} /* no AMD template declares @prefetch */

/* Dynamic shared memory (@shmem bytes), 16-byte aligned at least. */
extern __shared__ GC_ALIGN(16) unsigned char gc_dyn_smem_[];
GC_DEVICE unsigned char *gc_dyn_shared(void) { return gc_dyn_smem_; }

/* ------------------------------------------------------------------ */
/* Wave shuffles and reductions (whole wave, all lanes active)         */
/* ------------------------------------------------------------------ */

GC_DEVICE int gc_shfl(int v, int src) {
  return __builtin_amdgcn_ds_bpermute(src << 2, v);
}
GC_DEVICE float gc_shfl(float v, int src) {
  return __builtin_bit_cast(float, gc_shfl(__builtin_bit_cast(int, v), src));
}
GC_DEVICE int gc_shfl_xor(int v, int mask) { return gc_shfl(v, gc_lane() ^ mask); }
GC_DEVICE float gc_shfl_xor(float v, int mask) { return gc_shfl(v, gc_lane() ^ mask); }

/* Sum / max over aligned groups of w lanes (w a power of two <= GC_WARP);
 * every lane of a group gets the group's result. */
GC_DEVICE float gc_group_sum(float v, int w) {
  for (int m = w >> 1; m > 0; m >>= 1)
    v += gc_shfl_xor(v, m);
  return v;
}
GC_DEVICE float gc_group_max(float v, int w) {
  for (int m = w >> 1; m > 0; m >>= 1)
    v = __builtin_fmaxf(v, gc_shfl_xor(v, m));
  return v;
}
GC_DEVICE float gc_warp_sum(float v) { return gc_group_sum(v, GC_WARP); }
GC_DEVICE float gc_warp_max(float v) { return gc_group_max(v, GC_WARP); }

/* ------------------------------------------------------------------ */
/* Device-scope handoff between blocks of one launch                   */
/* ------------------------------------------------------------------ */

GC_DEVICE void gc_fence_device(void) { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
GC_DEVICE unsigned gc_atomic_add(unsigned *p, unsigned v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
}
GC_DEVICE float gc_ld_cg(const float *p) {
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
GC_DEVICE void gc_st_cg(float *p, float v) {
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}

/* ------------------------------------------------------------------ */
/* Math                                                                */
/* ------------------------------------------------------------------ */

/* +infinity as a float expression. */
#define GC_INF __builtin_huge_valf()

GC_DEVICE float gc_fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
GC_DEVICE float gc_max(float a, float b) { return __builtin_fmaxf(a, b); }
GC_DEVICE float gc_min(float a, float b) { return __builtin_fminf(a, b); }
/* 2^x (v_exp_f32, about 1 ulp); exp2(-inf) = 0. clang before 17 (comgr
 * 5.2 is LLVM 15) has no __builtin_amdgcn_exp2f; there llvm.exp2.f32
 * itself selects v_exp_f32. */
#if __has_builtin(__builtin_amdgcn_exp2f)
GC_DEVICE float gc_exp2(float x) { return __builtin_amdgcn_exp2f(x); }
#else
GC_DEVICE float gc_exp2(float x) { return __builtin_exp2f(x); }
#endif
/* e^x as 2^(x·log2 e), as on NVIDIA. */
GC_DEVICE float gc_exp(float x) { return gc_exp2(x * 1.4426950408889634f); }
GC_DEVICE float gc_rsqrt(float x) { return __builtin_amdgcn_rsqf(x); }
GC_DEVICE float gc_sqrt(float x) { return __builtin_sqrtf(x); }

/* sin x and cos x in double, about 1 ulp for |x| < 2^20·π/2 (larger x lose
 * accuracy gradually). x = k·π/2 + r with π/2 in three parts (33, 33 and
 * 53 bits, so k·part is exact), |r| <= π/4; then the Taylor series of sin r
 * to r^17 and cos r to r^18 (first term dropped < 2^-60). */
GC_DEVICE void gc_sincos_f64(double x, double *s, double *c) {
  const double P1 = 0x1.921fb544p+0, P2 = 0x1.0b4611a6p-34, P3 = 0x1.3198a2e037073p-69;
  double kf = __builtin_rint(x * 0x1.45f306dc9c883p-1);
  double r = ((x - kf * P1) - kf * P2) - kf * P3;
  double r2 = r * r, ts = 1, tc = 1;
  for (int n = 17; n >= 3; n -= 2)
    ts = 1 - r2 * (1.0 / (double)(n * (n - 1))) * ts;
  for (int n = 18; n >= 2; n -= 2)
    tc = 1 - r2 * (1.0 / (double)(n * (n - 1))) * tc;
  double sr = r * ts, cr = tc;
  switch ((long long)kf & 3) {
  case 0: *s = sr, *c = cr; break;
  case 1: *s = cr, *c = -sr; break;
  case 2: *s = -sr, *c = -cr; break;
  default: *s = -cr, *c = sr; break;
  }
}

GC_DEVICE int64_t gc_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
GC_DEVICE int64_t gc_min64(int64_t a, int64_t b) { return a < b ? a : b; }
GC_DEVICE int64_t gc_max64(int64_t a, int64_t b) { return a > b ? a : b; }
GC_DEVICE uint32_t gc_f2u(float f) { return __builtin_bit_cast(uint32_t, f); }
GC_DEVICE float gc_u2f(uint32_t u) { return __builtin_bit_cast(float, u); }

/* ------------------------------------------------------------------ */
/* Element types                                                       */
/* ------------------------------------------------------------------ */

typedef float gc_f32_t;
typedef _Float16 gc_f16_t;
struct gc_bf16_t { uint16_t bits; }; /* upper half of a binary32 */

#define GC_DTNAME_0 f32
#define GC_DTNAME_1 f16
#define GC_DTNAME_2 bf16
#define GC_DTNAME(code) GC_CAT(GC_DTNAME_, code)
#define GC_STORAGE(code) GC_CAT(GC_CAT(gc_, GC_DTNAME(code)), _t)

#define TA GC_STORAGE(GC_TA)
#define TB GC_STORAGE(GC_TB)
#define TC GC_STORAGE(GC_TC)

/* fp32 -> bf16 bits, round to nearest even; NaN -> quiet NaN. */
GC_DEVICE uint16_t gc_f32_to_bf16(float f) {
  uint32_t u = gc_f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
GC_DEVICE uint16_t gc_f32_to_f16(float f) {
  return __builtin_bit_cast(uint16_t, (_Float16)f);
}

GC_DEVICE float gc_ld(const float *p, int64_t i) { return p[i]; }
GC_DEVICE float gc_ld(const _Float16 *p, int64_t i) { return (float)p[i]; }
GC_DEVICE float gc_ld(const gc_bf16_t *p, int64_t i) {
  return gc_u2f((uint32_t)p[i].bits << 16);
}
GC_DEVICE void gc_st(float *p, int64_t i, float v) { p[i] = v; }
GC_DEVICE void gc_st(_Float16 *p, int64_t i, float v) { p[i] = (_Float16)v; }
GC_DEVICE void gc_st(gc_bf16_t *p, int64_t i, float v) { p[i].bits = gc_f32_to_bf16(v); }

/* float x = LOAD_A(p, i): element i of an A/B/C array, widened to fp32.
 * STORE_C(p, i, x): narrow x to C's dtype and store it as element i. */
#define LOAD_A(p, i) gc_ld((const TA *)(p), (i))
#define LOAD_B(p, i) gc_ld((const TB *)(p), (i))
#define LOAD_C(p, i) gc_ld((const TC *)(p), (i))
#define STORE_C(p, i, v) gc_st((TC *)(p), (i), (v))
/* The GEMM family's store: C = v, or C += v when the variant is built for
 * gemm_add (gen defines GC_OP_<op> 1 for the op it builds and 0 for the
 * template's other ops; the macro expands in the template, after them). */
#define STORE_GEMM(p, i, v) STORE_C(p, i, GC_OP_GEMM_ADD ? (v) + LOAD_C(p, i) : (v))

/* Two elements packed in one 32-bit word <-> two floats. */
GC_DEVICE void gc_unpack2(_Float16, uint32_t w, float *o) {
  o[0] = (float)__builtin_bit_cast(_Float16, (uint16_t)(w & 0xffffu));
  o[1] = (float)__builtin_bit_cast(_Float16, (uint16_t)(w >> 16));
}
GC_DEVICE void gc_unpack2(gc_bf16_t, uint32_t w, float *o) {
  o[0] = gc_u2f(w << 16), o[1] = gc_u2f(w & 0xffff0000u);
}
GC_DEVICE uint32_t gc_pack2(_Float16, float a, float b) {
  return (uint32_t)gc_f32_to_f16(a) | (uint32_t)gc_f32_to_f16(b) << 16;
}
GC_DEVICE uint32_t gc_pack2(gc_bf16_t, float a, float b) {
  return (uint32_t)gc_f32_to_bf16(a) | (uint32_t)gc_f32_to_bf16(b) << 16;
}

/* Raw aligned chunks of 4, 8 and 16 bytes. */
struct GC_ALIGN(16) gc_raw16 { uint32_t w[4]; };
struct GC_ALIGN(8) gc_raw8 { uint32_t w[2]; };
struct gc_raw4 { uint32_t w[1]; };
template <int BYTES> struct gc_raw_t;
template <> struct gc_raw_t<4> { typedef gc_raw4 T; };
template <> struct gc_raw_t<8> { typedef gc_raw8 T; };
template <> struct gc_raw_t<16> { typedef gc_raw16 T; };

/* o[0..N-1] := fp32 of p[0..N-1]. N·sizeof(T) is 2 or a multiple of 4,
 * and p is aligned to min(16, N·sizeof(T)) bytes: one load per 16 bytes. */
template <int N, class T> GC_DEVICE void gc_ldv(const T *p, float *o) {
  constexpr int BYTES = N * (int)sizeof(T);
  if constexpr (BYTES == 2) {
    o[0] = gc_ld(p, 0);
  } else {
    constexpr int CH = BYTES < 16 ? BYTES : 16;
    typedef typename gc_raw_t<CH>::T R;
#pragma unroll
    for (int c = 0; c < BYTES / CH; c++) {
      R r = reinterpret_cast<const R *>(p)[c];
#pragma unroll
      for (int w = 0; w < CH / 4; w++) {
        if constexpr (sizeof(T) == 4)
          o[c * (CH / 4) + w] = gc_u2f(r.w[w]);
        else
          gc_unpack2(T(), r.w[w], o + c * (CH / 2) + 2 * w);
      }
    }
  }
}

/* p[0..N-1] := x[0..N-1] narrowed (same size/alignment rules as gc_ldv). */
template <int N, class T> GC_DEVICE void gc_stv(T *p, const float *x) {
  constexpr int BYTES = N * (int)sizeof(T);
  if constexpr (BYTES == 2) {
    gc_st(p, 0, x[0]);
  } else {
    constexpr int CH = BYTES < 16 ? BYTES : 16;
    typedef typename gc_raw_t<CH>::T R;
#pragma unroll
    for (int c = 0; c < BYTES / CH; c++) {
      R r;
#pragma unroll
      for (int w = 0; w < CH / 4; w++) {
        if constexpr (sizeof(T) == 4)
          r.w[w] = gc_f2u(x[c * (CH / 4) + w]);
        else
          r.w[w] = gc_pack2(T(), x[c * (CH / 2) + 2 * w], x[c * (CH / 2) + 2 * w + 1]);
      }
      reinterpret_cast<R *>(p)[c] = r;
    }
  }
}

/* Vector forms of LOAD_A ... STORE_C: n elements from element i on, i and
 * the array's base aligned as gc_ldv requires. */
#define LOADV_A(n, p, i, o) gc_ldv<n>((const TA *)(p) + (i), (o))
#define LOADV_B(n, p, i, o) gc_ldv<n>((const TB *)(p) + (i), (o))
#define LOADV_C(n, p, i, o) gc_ldv<n>((const TC *)(p) + (i), (o))
#define STOREV_C(n, p, i, x) gc_stv<n>((TC *)(p) + (i), (x))

/* ------------------------------------------------------------------ */
/* Matrix cores: MFMA (CDNA: gfx90a, gfx942) and WMMA (RDNA3: gfx1100) */
/* ------------------------------------------------------------------ */

/* GC_MFMA / GC_WMMA: 1 where the compiled-for ISA has the instruction
 * family the matrix templates use (bf16 MFMA as the _1k forms, which
 * gfx90a and gfx94x have; gfx908 lacks them and is not a gcore target). */
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define GC_MFMA 1
#else
#define GC_MFMA 0
#endif
#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__)
#define GC_WMMA 1
#else
#define GC_WMMA 0
#endif

/* >>> gc-matrix-layouts: plain C integer macros (tests/test_amd_emulator.py
 * compiles this block on the host into its emulation of the matrix cores,
 * a model of the instructions from the ISA documents; keep it self-contained).
 *
 * MFMA, one block (v_mfma_f32_SxSxK*: D[S,S] = A[S,K]·B[K,S] + C), S = 32
 * or 16. KPL is the K elements a lane holds per operand: 4 for f16/bf16
 * (a 64-bit register pair), 1 for f32; K = 64·KPL/S (32x32x8, 16x16x16,
 * 32x32x2, 16x16x4). Lane l, element v (0..KPL-1) of A holds
 * A[l % S][(l / S)·KPL + v]; of B holds B[(l / S)·KPL + v][l % S]: A is
 * read row-wise and B column-wise, so with B given as [N,K] both are
 * K-contiguous rows. D: lane l, accumulator register r holds
 *   S = 32 (16 registers): D[8·(r/4) + 4·(l/32) + r%4][l % 32]
 *   S = 16 (4 registers):  D[4·(l/16) + r][l % 16]
 * (AMD matrix instruction calculator, CDNA2/CDNA3 ISA "matrix fused
 * multiply-add" operand layouts.) */
#define GC_MFMA_K(S, KPL) (64 * (KPL) / (S))
#define GC_MFMA_AB_ROW(S, l) ((l) % (S))                  /* A row / B column */
#define GC_MFMA_AB_K(S, KPL, l, v) ((l) / (S) * (KPL) + (v)) /* its k */
#define GC_MFMA_NACC(S) ((S) * (S) / 64)                  /* accumulators a lane */
#define GC_MFMA_D_ROW(S, l, r) \
  ((S) == 32 ? 8 * ((r) / 4) + 4 * ((l) / 32) + (r) % 4 : 4 * ((l) / 16) + (r))
#define GC_MFMA_D_COL(S, l) ((l) % (S))

/* WMMA, wave32 (v_wmma_f32_16x16x16_{f16,bf16}: D[16,16] = A·B + C).
 * Lane l holds A row l % 16, all 16 k (element v = k), and B column
 * l % 16, all 16 k; lanes 16-31 must hold the same A and B as lanes
 * 0-15 (the operands are replicated across the half-waves). D: lane l,
 * register r (0..7) holds D[2·r + l/16][l % 16]. (RDNA3 ISA, WMMA;
 * AMD GPUOpen "WMMA on RDNA 3".) */
#define GC_WMMA_AB_ROW(l) ((l) % 16)
#define GC_WMMA_AB_K(v) (v)
#define GC_WMMA_D_ROW(l, r) (2 * (r) + (l) / 16)
#define GC_WMMA_D_COL(l) ((l) % 16)
/* <<< gc-matrix-layouts */

typedef _Float16 gc_half4_t __attribute__((ext_vector_type(4)));
typedef short gc_short4_t __attribute__((ext_vector_type(4)));
typedef _Float16 gc_half16_t __attribute__((ext_vector_type(16)));
typedef short gc_short16_t __attribute__((ext_vector_type(16)));
typedef float gc_float4_t __attribute__((ext_vector_type(4)));
typedef float gc_float8_t __attribute__((ext_vector_type(8)));
typedef float gc_float16_t __attribute__((ext_vector_type(16)));

#if GC_MFMA
/* acc += A·B for one S×S×K block; a and b are a lane's KPL elements as
 * raw 16-bit words (f16/bf16: 4 of them) or one float (f32). Overloads by
 * dtype code and S, so a template calls one name. */
template <int DT, int S> struct gc_mfma;
template <> struct gc_mfma<GC_F16, 32> {
  typedef gc_float16_t acc_t;
  GC_DEVICE static acc_t run(gc_short4_t a, gc_short4_t b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_32x32x8f16(__builtin_bit_cast(gc_half4_t, a),
                                                __builtin_bit_cast(gc_half4_t, b), c, 0, 0, 0);
  }
};
template <> struct gc_mfma<GC_F16, 16> {
  typedef gc_float4_t acc_t;
  GC_DEVICE static acc_t run(gc_short4_t a, gc_short4_t b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(gc_half4_t, a),
                                                 __builtin_bit_cast(gc_half4_t, b), c, 0, 0, 0);
  }
};
template <> struct gc_mfma<GC_BF16, 32> {
  typedef gc_float16_t acc_t;
  GC_DEVICE static acc_t run(gc_short4_t a, gc_short4_t b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
  }
};
template <> struct gc_mfma<GC_BF16, 16> {
  typedef gc_float4_t acc_t;
  GC_DEVICE static acc_t run(gc_short4_t a, gc_short4_t b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
  }
};
template <> struct gc_mfma<GC_F32, 32> {
  typedef gc_float16_t acc_t;
  GC_DEVICE static acc_t run(float a, float b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_32x32x2f32(a, b, c, 0, 0, 0);
  }
};
template <> struct gc_mfma<GC_F32, 16> {
  typedef gc_float4_t acc_t;
  GC_DEVICE static acc_t run(float a, float b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_16x16x4f32(a, b, c, 0, 0, 0);
  }
};
#endif

#if GC_WMMA
/* acc += A·B for one 16×16×16 block (wave32); a, b: a lane's 16 k. */
template <int DT> GC_DEVICE gc_float8_t gc_wmma(gc_short16_t a, gc_short16_t b, gc_float8_t c) {
  if constexpr (DT == GC_BF16)
    return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c);
  else
    return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(gc_half16_t, a),
                                                      __builtin_bit_cast(gc_half16_t, b), c);
}
#endif


/* >>> gc-kv-lds: the AMD attentions' K and Vᵀ tiles in LDS
 * (attention_mfma, attention_wmma, attention_decode_mfma; the AMD emulator
 * splices this block in). A tile is KB keys of K and V (row stride ld
 * elements), read as units of 4 keys × 8 columns with 16-byte loads into a
 * thread's registers (fetch: zeros from key kend and from column D on),
 * then written to a stage of LDS (put): K as rows, element (key, d) at
 * s[key·SK + d]; V transposed, element (d, key) at s[KB·SK + d·SV + key],
 * each column of a unit's 4×8 block one 8-byte write, so that 4
 * consecutive keys of one column (an A fragment of Vᵀ) are one 8-byte
 * read. Rows are padded by PAD elements, SK = DMAX + PAD and SV = KB + PAD,
 * so that the lanes reading one k column hit distinct banks (MFMA: 4, so
 * odd K rows are only 8-byte aligned and are written as 8-byte halves;
 * WMMA: 8, one 16-byte write). NT threads share a tile's NU units, PER
 * each; units from column DR on are neither loaded nor written (DR: D
 * rounded up to the instruction's block; the products skip those
 * columns). */
#define GC_KV_SK(DMAX, PAD) ((DMAX) + (PAD))     /* K's row stride in LDS, elements */
#define GC_KV_SV(KB, PAD) ((KB) + (PAD))         /* Vᵀ's */
#define GC_KV_SSZ(KB, DMAX, PAD) ((KB) * GC_KV_SK(DMAX, PAD) + (DMAX) * GC_KV_SV(KB, PAD)) /* elements a stage */
#define GC_KV_NU(KB, DMAX) ((KB) / 4 * ((DMAX) / 8)) /* units of a tile */
#define GC_KV_PER(KB, DMAX, NT) ((GC_KV_NU(KB, DMAX) + (NT) - 1) / (NT)) /* ... a thread */
/* Is unit i of this thread one of the tile's, left of column DR? (c: its
 * 16-byte column chunk, kg: its group of 4 keys) */
template <int KB, int DMAX, int NT> GC_DEVICE bool gc_kv_unit(int i, int DR, int *c, int *kg) {
  const int u = gc_tid() + i * NT;
  *c = u % (DMAX / 8), *kg = u / (DMAX / 8);
  return (GC_KV_NU(KB, DMAX) % NT == 0 || u < GC_KV_NU(KB, DMAX)) && 8 * *c < DR;
}
/* Keys j0 .. j0+KB-1 of Kc and Vc into this thread's units kr, vr. */
template <int KB, int DMAX, int NT, class T>
GC_DEVICE void gc_kv_fetch(gc_raw16 (*kr)[4], gc_raw16 (*vr)[4], const T *Kc, const T *Vc, int j0, int kend,
                           int64_t ld, int D) {
  GC_UNROLL(GC_KV_PER(KB, DMAX, NT))
  for (int i = 0; i < GC_KV_PER(KB, DMAX, NT); i++) {
    int c, kg;
    const bool in = gc_kv_unit<KB, DMAX, NT>(i, D, &c, &kg);
    GC_UNROLL(4)
    for (int e = 0; e < 4; e++) {
      const int key = j0 + 4 * kg + e;
      kr[i][e] = vr[i][e] = gc_raw16{{0, 0, 0, 0}};
      if (in && key < kend) {
        kr[i][e] = *reinterpret_cast<const gc_raw16 *>(Kc + (int64_t)key * ld + 8 * c);
        vr[i][e] = *reinterpret_cast<const gc_raw16 *>(Vc + (int64_t)key * ld + 8 * c);
      }
    }
  }
}
/* This thread's units (those left of column DR) into the stage at s. */
template <int KB, int DMAX, int NT, int PAD, class T>
GC_DEVICE void gc_kv_put(T *s, const gc_raw16 (*kr)[4], const gc_raw16 (*vr)[4], int DR) {
  T *vt = s + KB * GC_KV_SK(DMAX, PAD);
  GC_UNROLL(GC_KV_PER(KB, DMAX, NT))
  for (int i = 0; i < GC_KV_PER(KB, DMAX, NT); i++) {
    int c, kg;
    if (!gc_kv_unit<KB, DMAX, NT>(i, DR, &c, &kg))
      continue;
    GC_UNROLL(4)
    for (int e = 0; e < 4; e++) {
      T *row = s + (4 * kg + e) * GC_KV_SK(DMAX, PAD) + 8 * c;
      if (PAD % 8 == 0) {
        *reinterpret_cast<gc_raw16 *>(row) = kr[i][e];
      } else {
        gc_raw8 *d = reinterpret_cast<gc_raw8 *>(row);
        d[0] = gc_raw8{{kr[i][e].w[0], kr[i][e].w[1]}};
        d[1] = gc_raw8{{kr[i][e].w[2], kr[i][e].w[3]}};
      }
    }
    GC_UNROLL(8)
    for (int x = 0; x < 8; x++) {
      uint32_t h[4];
      GC_UNROLL(4)
      for (int e = 0; e < 4; e++)
        h[e] = (vr[i][e].w[x / 2] >> (16 * (x % 2))) & 0xffffu;
      *reinterpret_cast<gc_raw8 *>(vt + (8 * c + x) * GC_KV_SV(KB, PAD) + 4 * kg) =
          gc_raw8{{h[0] | h[1] << 16, h[2] | h[3] << 16}};
    }
  }
}
/* A lane's 4 elements at row `row`, k offset k0 + GC_MFMA_AB_K of a tile
 * in LDS of row stride ld (an MFMA A fragment, S = MI). */
template <int MI, class T> GC_DEVICE gc_short4_t gc_kv_frag(const T *s, int ld, int row, int k0, int lane) {
  return *reinterpret_cast<const gc_short4_t *>(s + (row + GC_MFMA_AB_ROW(MI, lane)) * ld + k0 +
                                                GC_MFMA_AB_K(MI, 4, lane, 0));
}
/* A lane's 16 elements at row `row` + GC_WMMA_AB_ROW, k from k0 +
 * GC_WMMA_AB_K(0), of a tile in LDS of row stride ld (a WMMA A operand:
 * lanes l and l ^ 16 read the same, the replication WMMA requires). */
template <class T> GC_DEVICE gc_short16_t gc_kv_frag16(const T *s, int ld, int row, int k0, int lane) {
  const gc_raw16 *p =
      reinterpret_cast<const gc_raw16 *>(s + (row + GC_WMMA_AB_ROW(lane)) * ld + k0 + GC_WMMA_AB_K(0));
  struct { gc_raw16 lo, hi; } v = {p[0], p[1]};
  return __builtin_bit_cast(gc_short16_t, v);
}
/* Pᵀ's WMMA B operand for one 16-key block from a lane's 8 probabilities
 * p[r] (keys GC_WMMA_D_ROW(lane, r) of its query row, an accumulator's
 * rows): each rounded to T, swapped with lane l ^ 16's (which holds the
 * row's other 8 keys) and interleaved so that both lanes hold all 16 keys
 * in k order (key 2r + e is this lane's register r where D_ROW(l, r) =
 * 2r + e, else the other lane's). */
template <class T> GC_DEVICE gc_short16_t gc_wmma_pt(const float p[8]) {
  uint32_t own[4], other[4]; /* this lane's 8 probabilities as 16-bit pairs, the other lane's */
  GC_UNROLL(4)
  for (int i = 0; i < 4; i++) {
    own[i] = gc_pack2(T(), p[2 * i], p[2 * i + 1]);
    other[i] = (uint32_t)gc_shfl_xor((int)own[i], 16);
  }
  const int lane = gc_lane();
  uint32_t b[8]; /* keys 2r, 2r+1 */
  GC_UNROLL(8)
  for (int r = 0; r < 8; r++) {
    const uint32_t mine = (own[r / 2] >> (16 * (r % 2))) & 0xffffu,
                   theirs = (other[r / 2] >> (16 * (r % 2))) & 0xffffu;
    const uint32_t lo = GC_WMMA_D_ROW(lane, r) == 2 * r ? mine : theirs,
                   hi = GC_WMMA_D_ROW(lane, r) == 2 * r + 1 ? mine : theirs;
    b[r] = lo | hi << 16;
  }
  return __builtin_bit_cast(gc_short16_t, b);
}
/* <<< gc-kv-lds */

/* ------------------------------------------------------------------ */
/* Block formats: the vendor's two primitives, then the shared block   */
/* ------------------------------------------------------------------ */
/* The half with bits h, exactly, as a float. */
GC_DEVICE float gc_h2f_bits(uint32_t h) { return (float)__builtin_bit_cast(_Float16, (uint16_t)h); }
/* Byte i of w as a float (v_cvt_f32_ubyteN). */
GC_DEVICE float gc_ubyte_f(uint32_t w, int i) { return (float)((w >> (8 * i)) & 255u); }
GC_DEVICE float gc_ubyte_less_f(uint32_t w, int i, float b) { return gc_ubyte_f(w, i) - b; }

/* The block formats and the epilogue helper, the same text for both
 * vendors (gen/ splices the file in here). */
#include "prelude_common.h"

#endif /* GC_HIP_PRELUDE_H */
