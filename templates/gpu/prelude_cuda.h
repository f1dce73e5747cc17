/* prelude_cuda.h — the text gen/ puts first in every generated NVIDIA kernel
 * source (NVRTC, sm_80 / sm_90 / sm_90a). prelude_hip.h gives the same names
 * for AMD, so a `@backend gpu` template is one source for both vendors.
 *
 * It owns: fixed-width integer types (NVRTC has no <stdint.h>), kernel and
 * helper qualifiers, thread/block ids, barriers, warp shuffles and
 * reductions, shared memory, device-scope atomics for cross-block handoff,
 * the storage type of each dtype with scalar and vector (up to 16 bytes per
 * access) loads widening to fp32 and stores narrowing from fp32 (round to
 * nearest even), and fast math (gc_exp, gc_exp2, gc_rsqrt, gc_fma, sincos in
 * double).
 *
 * Order of the generated source: this prelude, then the #defines of the
 * target constants (WARP SMEM SMS MAXT), dtype sizes (SA SB SC), dtype codes
 * (GC_TA GC_TB GC_TC) and parameters, then the template. So nothing here may
 * use those names at prelude time: TA, TB, TC, LOAD_A, ... only name them in
 * their bodies and expand at their use in the template.
 *
 * Only cuda_fp16.h and cuda_bf16.h are included (NVRTC finds them with
 * -I<cuda>/include). The same text compiles under nvcc for offline checks,
 * where the system's <stdint.h> types are already declared. */
#ifndef GC_CUDA_PRELUDE_H
#define GC_CUDA_PRELUDE_H

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifdef __CUDACC_RTC__
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h> /* offline nvcc checks only; NVRTC never sees this */
#endif

#define GC_CUDA 1
#define GC_F32 0
#define GC_F16 1
#define GC_BF16 2

/* ------------------------------------------------------------------ */
/* Qualifiers, ids, barriers                                           */
/* ------------------------------------------------------------------ */

/* GC_KERNEL void f(...) is an entry point; GC_KERNEL_BOUNDS(n) also
 * promises at most n threads per block, so the compiler may use up to
 * 65536/n registers per thread. (The explicit minimum of 1 block per SM
 * matters: with __launch_bounds__(n) alone, ptxas 13.0 was seen capping
 * a 256-thread kernel at 32 registers and spilling.) */
#define GC_KERNEL extern "C" __global__
#define GC_KERNEL_BOUNDS(n) extern "C" __global__ __launch_bounds__(n, 1)
/* ... and asks for b such blocks resident per SM: registers are capped at
 * 65536/(n·b) per thread (an occupancy target for latency-bound kernels). */
#define GC_KERNEL_OCC(n, b) extern "C" __global__ __launch_bounds__(n, b)
#define GC_DEVICE __device__ __forceinline__ /* inline, so unused helpers draw no warning */
#define GC_SHARED __shared__
#define GC_GLOBAL __device__ /* a module-scope device variable */
#define GC_RESTRICT __restrict__
#define GC_ALIGN(n) __align__(n)

#define GC_CAT_(a, b) a##b
#define GC_CAT(a, b) GC_CAT_(a, b)
#define GC_STR_(x) #x
#define GC_STR(x) GC_STR_(x)
/* Unroll the next loop n times; n may be a macro (a parameter). */
#define GC_UNROLL(n) _Pragma(GC_STR(unroll n))

#define GC_WARP 32

GC_DEVICE int gc_tid(void) { return (int)threadIdx.x; }
GC_DEVICE int gc_tid_y(void) { return (int)threadIdx.y; }
GC_DEVICE int gc_tid_z(void) { return (int)threadIdx.z; }
GC_DEVICE int64_t gc_bid(void) { return (int64_t)blockIdx.x; }
GC_DEVICE int64_t gc_bid_y(void) { return (int64_t)blockIdx.y; }
GC_DEVICE int64_t gc_bid_z(void) { return (int64_t)blockIdx.z; }
/* Lane of the calling thread within its warp. */
GC_DEVICE int gc_lane(void) {
  unsigned l;
  asm("mov.u32 %0, %%laneid;" : "=r"(l));
  return (int)l;
}

/* All threads of the block arrive; shared-memory writes before are seen
 * by reads after. */
GC_DEVICE void gc_barrier(void) { __syncthreads(); }
/* The same for the threads of one warp (all lanes must call it). */
GC_DEVICE void gc_syncwarp(void) { __syncwarp(); }

/* Programmatic dependent launch (a @pdl template's kernel, sm_90+).
 * gc_pdl_wait: block until the kernels this launch depends on have
 * completed and their writes are visible; before it, a kernel may read
 * only what no earlier kernel of the stream writes (weights). gc_pdl_launch:
 * the next kernel of the stream may start launching (it still waits for
 * this one to complete before it touches this one's output). Both are
 * no-ops below sm_90 and in launches that did not ask for the overlap. */
GC_DEVICE void gc_pdl_wait(void) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
GC_DEVICE void gc_pdl_launch(void) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
/* Start bringing the 128-byte line at p into L2 (a hint; no value). */
GC_DEVICE void gc_prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

/* ------------------------------------------------------------------ */
/* Shared-memory barriers and the copy engines (NVIDIA only: templates */
/* of @backend cuda; mbarriers and cp.async from sm_80, bulk copies,   */
/* tensor maps and clusters from sm_90). Barriers and shared buffers   */
/* are named by their shared-memory addresses (gc_smem_addr).          */
/* ------------------------------------------------------------------ */

/* A CUtensorMap as the runtime passes it (128 bytes, 64-byte aligned;
 * @tensormap, runtime/tmap.h). */
struct __align__(64) gc_tmap_t { uint64_t w[16]; };

GC_DEVICE unsigned gc_smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* Barrier b expects `count` arrivals a phase. */
GC_DEVICE void gc_mbar_init(unsigned b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(count) : "memory");
}
GC_DEVICE void gc_mbar_arrive(unsigned b) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(b)
               : "memory");
}
/* One arrival on b, and `bytes` more that copies must land this phase. */
GC_DEVICE void gc_mbar_expect_tx(unsigned b, unsigned bytes) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
               ::"r"(b), "r"(bytes) : "memory");
}
/* Block until the phase of parity par of barrier b has completed. */
GC_DEVICE void gc_mbar_wait(unsigned b, unsigned par) {
  unsigned ok;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(b), "r"(par)
                 : "memory");
  } while (!ok);
}
/* Arrive on barrier b (a shared::cta address) of block `cta` of the
 * cluster, with the default (.release.cta) semantics. (.release.cluster
 * makes every arrival a cluster-scope fence that waits for all of the
 * thread's outstanding global stores: gemm_wgmma ran 2.1x slower with it,
 * bench/RESULTS.md.) */
GC_DEVICE void gc_mbar_arrive_remote(unsigned b, unsigned cta) {
  asm volatile("{\n .reg .b32 ra;\n mapa.shared::cluster.u32 ra, %0, %1;\n"
               " mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n"
               ::"r"(b), "r"(cta) : "memory");
}

/* 16 bytes from g to shared s, n of them read (the rest zero filled). */
GC_DEVICE void gc_cp_async16(unsigned s, const void *g, int n) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(n)
               : "memory");
}
/* Arrive on b once every cp.async this thread issued so far has landed. */
GC_DEVICE void gc_cp_async_mbar_arrive(unsigned b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(b) : "memory");
}

/* bytes (a multiple of 16) from global g to shared s, completing on b. */
GC_DEVICE void gc_bulk_load(unsigned s, const void *g, unsigned bytes, unsigned b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(s), "l"(g), "r"(bytes), "r"(b) : "memory");
}
/* The box of map at (column x, row y) to shared address s; completes on b. */
GC_DEVICE void gc_tma_load(unsigned s, const gc_tmap_t *map, int x, int y, unsigned b) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(s), "l"((uint64_t)map), "r"(x), "r"(y), "r"(b) : "memory");
}
/* The same into shared address s of every block of the cluster in mask,
 * completing on barrier b of each. */
GC_DEVICE void gc_tma_load_mc(unsigned s, const gc_tmap_t *map, int x, int y, unsigned b,
                              uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n"
               ::"r"(s), "l"((uint64_t)map), "r"(x), "r"(y), "r"(b), "h"(mask) : "memory");
}
/* The box of map at (column x, row y) from shared address s (clipped at
 * the map's edges); a bulk group of this thread's. */
GC_DEVICE void gc_tma_store(const gc_tmap_t *map, int x, int y, unsigned s) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               ::"l"((uint64_t)map), "r"(x), "r"(y), "r"(s) : "memory");
}
/* Bulk stores: commit this thread's issued ones as a group; wait until
 * at most N groups still read shared memory (or, _all, until all ran). */
GC_DEVICE void gc_bulk_commit(void) { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> GC_DEVICE void gc_bulk_wait_read(void) {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
GC_DEVICE void gc_bulk_wait_all(void) { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

/* The threads of named barrier id (1..15; 0 is gc_barrier's) meet:
 * n threads, a multiple of 32, take part. */
GC_DEVICE void gc_named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* Warpgroup MMA (sm_90a) ordering: a fence before the first wgmma that
 * reads registers written since, a commit of the wgmmas issued so far as
 * a group, a wait until at most N groups are in flight, and a no-op that
 * keeps the compiler from moving an accumulator access across them. */
GC_DEVICE void gc_wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
GC_DEVICE void gc_wgmma_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> GC_DEVICE void gc_wgmma_wait(void) {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
GC_DEVICE void gc_reg_touch(float &x) { asm volatile("" : "+f"(x)::"memory"); }

GC_DEVICE unsigned gc_cluster_rank(void) {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/* Every thread of every block of the cluster arrives, then waits (the
 * .aligned forms: the warp reconverges first). */
GC_DEVICE void gc_cluster_sync(void) {
  __syncwarp();
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* Dynamic shared memory (@shmem bytes), 16-byte aligned at least. */
extern __shared__ __align__(16) unsigned char gc_dyn_smem_[];
GC_DEVICE unsigned char *gc_dyn_shared(void) { return gc_dyn_smem_; }

/* ------------------------------------------------------------------ */
/* Warp shuffles and reductions (full warp, all lanes active)          */
/* ------------------------------------------------------------------ */

GC_DEVICE float gc_shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
GC_DEVICE int gc_shfl_xor(int v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
/* v of lane src (all lanes read). */
GC_DEVICE float gc_shfl(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
GC_DEVICE int gc_shfl(int v, int src) { return __shfl_sync(0xffffffffu, v, src); }

/* Sum / max over aligned groups of w lanes (w a power of two <= GC_WARP);
 * every lane of a group gets the group's result. */
GC_DEVICE float gc_group_sum(float v, int w) {
  for (int m = w >> 1; m > 0; m >>= 1)
    v += gc_shfl_xor(v, m);
  return v;
}
GC_DEVICE float gc_group_max(float v, int w) {
  for (int m = w >> 1; m > 0; m >>= 1)
    v = fmaxf(v, gc_shfl_xor(v, m));
  return v;
}
GC_DEVICE float gc_warp_sum(float v) { return gc_group_sum(v, GC_WARP); }
GC_DEVICE float gc_warp_max(float v) { return gc_group_max(v, GC_WARP); }

/* ------------------------------------------------------------------ */
/* Device-scope handoff between blocks of one launch                   */
/* ------------------------------------------------------------------ */

/* Orders this thread's earlier global writes before its later ones, as
 * seen by every thread of the device. */
GC_DEVICE void gc_fence_device(void) { __threadfence(); }
/* *p += v atomically at device scope; returns the old value. */
GC_DEVICE unsigned gc_atomic_add(unsigned *p, unsigned v) { return atomicAdd(p, v); }
/* Loads/stores that bypass the (non-coherent) L1, for data another block
 * wrote in this launch. */
GC_DEVICE float gc_ld_cg(const float *p) { return __ldcg(p); }
GC_DEVICE void gc_st_cg(float *p, float v) { __stcg(p, v); }

/* ------------------------------------------------------------------ */
/* Math                                                                */
/* ------------------------------------------------------------------ */

/* +infinity as a float expression. */
#define GC_INF __int_as_float(0x7f800000)

GC_DEVICE float gc_fma(float a, float b, float c) { return fmaf(a, b, c); }
GC_DEVICE float gc_max(float a, float b) { return fmaxf(a, b); }
GC_DEVICE float gc_min(float a, float b) { return fminf(a, b); }
/* 2^x, about 2 ulp; results below 2^-126 flush to 0; exp2(-inf) = 0. */
GC_DEVICE float gc_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
/* e^x as 2^(x·log2 e): a few ulp near 0, relative error growing like
 * |x|·2^-24 for large |x| (the rounding of the product). */
GC_DEVICE float gc_exp(float x) { return gc_exp2(x * 1.4426950408889634f); }
/* 1/sqrt(x), about 2 ulp. */
GC_DEVICE float gc_rsqrt(float x) { return rsqrtf(x); }
GC_DEVICE float gc_sqrt(float x) { return sqrtf(x); }
/* sin x and cos x in double, to about 1 ulp. */
GC_DEVICE void gc_sincos_f64(double x, double *s, double *c) { sincos(x, s, c); }

GC_DEVICE int64_t gc_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
GC_DEVICE int64_t gc_min64(int64_t a, int64_t b) { return a < b ? a : b; }
GC_DEVICE int64_t gc_max64(int64_t a, int64_t b) { return a > b ? a : b; }
GC_DEVICE uint32_t gc_f2u(float f) { return __float_as_uint(f); }
GC_DEVICE float gc_u2f(uint32_t u) { return __uint_as_float(u); }

/* ------------------------------------------------------------------ */
/* Element types                                                       */
/* ------------------------------------------------------------------ */

typedef float gc_f32_t;
typedef __half gc_f16_t;
typedef __nv_bfloat16 gc_bf16_t;

#define GC_DTNAME_0 f32
#define GC_DTNAME_1 f16
#define GC_DTNAME_2 bf16
#define GC_DTNAME(code) GC_CAT(GC_DTNAME_, code)
#define GC_STORAGE(code) GC_CAT(GC_CAT(gc_, GC_DTNAME(code)), _t)

#define TA GC_STORAGE(GC_TA)
#define TB GC_STORAGE(GC_TB)
#define TC GC_STORAGE(GC_TC)

/* Scalar: widen exactly, narrow with round to nearest even (NaN stays
 * NaN, overflow gives inf). Overloaded on the storage type. */
GC_DEVICE float gc_ld(const float *p, int64_t i) { return p[i]; }
GC_DEVICE float gc_ld(const __half *p, int64_t i) { return __half2float(p[i]); }
GC_DEVICE float gc_ld(const __nv_bfloat16 *p, int64_t i) {
  return __uint_as_float((uint32_t)__bfloat16_as_ushort(p[i]) << 16);
}
GC_DEVICE void gc_st(float *p, int64_t i, float v) { p[i] = v; }
GC_DEVICE void gc_st(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }
GC_DEVICE void gc_st(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

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
GC_DEVICE void gc_unpack2(__half, uint32_t w, float *o) {
  __half2 h = *reinterpret_cast<__half2 *>(&w);
  float2 f = __half22float2(h);
  o[0] = f.x, o[1] = f.y;
}
GC_DEVICE void gc_unpack2(__nv_bfloat16, uint32_t w, float *o) {
  o[0] = __uint_as_float(w << 16), o[1] = __uint_as_float(w & 0xffff0000u);
}
GC_DEVICE uint32_t gc_pack2(__half, float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t *>(&h);
}
GC_DEVICE uint32_t gc_pack2(__nv_bfloat16, float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t *>(&h);
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
    constexpr int CH = BYTES < 16 ? BYTES : 16; /* bytes per access */
    typedef typename gc_raw_t<CH>::T R;
#pragma unroll
    for (int c = 0; c < BYTES / CH; c++) {
      R r = reinterpret_cast<const R *>(p)[c];
#pragma unroll
      for (int w = 0; w < CH / 4; w++) {
        if constexpr (sizeof(T) == 4)
          o[c * (CH / 4) + w] = __uint_as_float(r.w[w]);
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
          r.w[w] = __float_as_uint(x[c * (CH / 4) + w]);
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
/* Block formats: the vendor's two primitives, then the shared block   */
/* ------------------------------------------------------------------ */
/* The half with bits h, exactly, as a float. */
GC_DEVICE float gc_h2f_bits(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)h)); }
/* Byte i of w as a float: 2^23 + byte built by a byte permute, minus 2^23. */
GC_DEVICE float gc_ubyte_f(uint32_t w, int i) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)i)) - 8388608.0f;
}

/* ================================================================== */
/* >>> gc-quant: ggml's block formats, for B (the weights)             */
/* ================================================================== */
/* The same text in prelude_cuda.h and prelude_hip.h (tests/
 * test_gpu_compile.py checks it), after each vendor's gc_h2f_bits and
 * gc_ubyte_f. base/quant.h describes each format once (bytes, order of
 * elements, dequantization); the functions below follow it, and the op
 * case table pins them (tests/test_ops.py, against tests/ggufq.py).
 *
 * Kernels see a block of QK elements (32 or 256, GC_QK) as QK/32 units of
 * 32 consecutive elements, and a unit as four parts t = 0..3 of 8
 * elements: 4t..4t+3 and 16+4t..16+4t+3 (the k's an mma fragment's lane
 * t holds; a SIMT lane may take any part). For part t of unit u,
 * GCQ_UNIT(b, u, t, lo, hi, d0, d1, mn) (or GCQ_LOAD, then GCQ_DECODE)
 * gives the elements' levels plus GC_QBIAS as bytes (lo: the first four,
 * hi: the last four) and the unit's scales: element l of the unit is
 *     y = fl(d · q) − mn   with d = d0 for l < 16, d1 for l >= 16,
 * q = byte − GC_QBIAS a small integer; d·q is exact in fp32 (a half times
 * integers of at most 13 bits in all) and mn is 0 but for Q4_K/Q5_K
 * (GC_QMIN), so y is the value base/quant.h gives. Reads are 16-bit (or
 * 32-bit where the format keeps fields 4-byte aligned: Q4_K, Q5_K), so a
 * block may sit at any even address, global or shared. */
#define GC_Q8_0 5
#define GC_Q4_0 6
#define GC_Q4_K 7
#define GC_Q5_K 8
#define GC_Q6_K 9
#define GC_DTNAME_5 q8_0
#define GC_DTNAME_6 q4_0
#define GC_DTNAME_7 q4_k
#define GC_DTNAME_8 q5_k
#define GC_DTNAME_9 q6_k
typedef uint8_t gc_q8_0_t; /* a block format's storage: bytes */
typedef uint8_t gc_q4_0_t;
typedef uint8_t gc_q4_k_t;
typedef uint8_t gc_q5_k_t;
typedef uint8_t gc_q6_k_t;
#define GC_QK_5 32
#define GC_QK_6 32
#define GC_QK_7 256
#define GC_QK_8 256
#define GC_QK_9 256
#define GC_QBYTES_5 34
#define GC_QBYTES_6 18
#define GC_QBYTES_7 144
#define GC_QBYTES_8 176
#define GC_QBYTES_9 210
#define GC_QBIAS_5 128
#define GC_QBIAS_6 8
#define GC_QBIAS_7 0
#define GC_QBIAS_8 0
#define GC_QBIAS_9 32
#define GC_QMIN_5 0
#define GC_QMIN_6 0
#define GC_QMIN_7 1
#define GC_QMIN_8 1
#define GC_QMIN_9 0
#define GC_QK GC_CAT(GC_QK_, GC_TB)         /* elements per block of B */
#define GC_QBYTES GC_CAT(GC_QBYTES_, GC_TB) /* bytes per block of B */
#define GC_QBIAS GC_CAT(GC_QBIAS_, GC_TB)   /* level + GC_QBIAS = a byte of lo, hi */
#define GC_QMIN GC_CAT(GC_QMIN_, GC_TB)     /* 1: units have a min (mn) */
#define GC_QUNITS (GC_QK / 32)              /* units of 32 elements per block */
/* The norm weight of rmsnorm_gemm*: B's dtype, or A's when B is a block
 * format (core/ops.h, role 'N'). */
#define GC_QNORM_DT GC_CAT(GC_QNORMOF_, GC_TB)
#define GC_QNORMOF_0 0
#define GC_QNORMOF_1 1
#define GC_QNORMOF_2 2
#define GC_QNORMOF_5 GC_TA
#define GC_QNORMOF_6 GC_TA
#define GC_QNORMOF_7 GC_TA
#define GC_QNORMOF_8 GC_TA
#define GC_QNORMOF_9 GC_TA
#define TN GC_STORAGE(GC_QNORM_DT)
#define LOAD_N(p, i) gc_ld((const TN *)(p), (i))
#define LOADV_N(n, p, i, o) gc_ldv<n>((const TN *)(p) + (i), (o))

GC_DEVICE uint32_t gcq_ld16(const uint8_t *p) { return *(const uint16_t *)p; }
/* 4 bytes at an even address / at a multiple of 4 */
GC_DEVICE uint32_t gcq_ld32u(const uint8_t *p) { return gcq_ld16(p) | gcq_ld16(p + 2) << 16; }
GC_DEVICE uint32_t gcq_ld32(const uint8_t *p) { return *(const uint32_t *)p; }
/* byte i (0..11, a run-time value) of the 12 bytes in q0, q1, q2 (by
 * value: selects of registers, never an indexed array in scratch) */
GC_DEVICE uint32_t gcq_byte12(uint32_t q0, uint32_t q1, uint32_t q2, int i) {
  const uint32_t w = i < 4 ? q0 : i < 8 ? q1 : q2;
  return (w >> (8 * (i & 3))) & 255u;
}

/* Each format: gcq_load_F(b, u, t, r) reads the words part t of unit u of
 * block b needs into r[0..GCQ_RAW-1] (loads only, so a kernel can issue
 * them long before it needs the values); gcq_decode_F(r, u, t, lo, hi,
 * d0, d1, mn) turns them into the biased level bytes and the scales
 * (arithmetic only). */
#define GCQ_RAW 8

/* Q8_0: half d; int8 qs[32]. Bytes: qs + 128. */
GC_DEVICE void gcq_load_q8_0(const uint8_t *b, int u, int t, uint32_t *r) {
  (void)u;
  r[0] = gcq_ld16(b);
  r[1] = gcq_ld32u(b + 2 + 4 * t);
  r[2] = gcq_ld32u(b + 18 + 4 * t);
}
GC_DEVICE void gcq_decode_q8_0(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)u, (void)t;
  lo = r[1] ^ 0x80808080u;
  hi = r[2] ^ 0x80808080u;
  d0 = d1 = gc_h2f_bits(r[0]);
  mn = 0.0f;
}
/* Q4_0: half d; uint8 qs[16]: element j < 16 the low nibble of qs[j],
 * j + 16 its high nibble. Bytes: the nibbles (level + 8). */
GC_DEVICE void gcq_load_q4_0(const uint8_t *b, int u, int t, uint32_t *r) {
  (void)u;
  r[0] = gcq_ld16(b);
  r[1] = gcq_ld32u(b + 2 + 4 * t);
}
GC_DEVICE void gcq_decode_q4_0(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)u, (void)t;
  lo = r[1] & 0x0F0F0F0Fu;
  hi = (r[1] >> 4) & 0x0F0F0F0Fu;
  d0 = d1 = gc_h2f_bits(r[0]);
  mn = 0.0f;
}
/* Q4_K: half d, dmin; scales[12]; qs[128]: unit u (sub-block u) is the
 * low (u even) or high nibbles of qs[32·(u/2) ..]; its 6-bit scale and
 * min packed in scales[] (ggml's get_scale_min_k4). */
GC_DEVICE void gcq_scale_min_k4(uint32_t q0, uint32_t q1, uint32_t q2, int s, int &sc, int &m) {
  if (s < 4) {
    sc = (int)(gcq_byte12(q0, q1, q2, s) & 63);
    m = (int)(gcq_byte12(q0, q1, q2, s + 4) & 63);
  } else {
    sc = (int)((gcq_byte12(q0, q1, q2, s + 4) & 0xF) | ((gcq_byte12(q0, q1, q2, s - 4) >> 6) << 4));
    m = (int)((gcq_byte12(q0, q1, q2, s + 4) >> 4) | ((gcq_byte12(q0, q1, q2, s) >> 6) << 4));
  }
}
GC_DEVICE void gcq_load_q4_k(const uint8_t *b, int u, int t, uint32_t *r) {
  const uint8_t *qs = b + 16 + 32 * (u >> 1);
  r[0] = gcq_ld32(b); /* d, dmin */
  r[1] = gcq_ld32(b + 4), r[2] = gcq_ld32(b + 8), r[3] = gcq_ld32(b + 12); /* scales */
  r[4] = gcq_ld32(qs + 4 * t);
  r[5] = gcq_ld32(qs + 16 + 4 * t);
}
GC_DEVICE void gcq_decode_q4_k(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)t;
  const int sh = 4 * (u & 1);
  int sc, m;
  lo = (r[4] >> sh) & 0x0F0F0F0Fu;
  hi = (r[5] >> sh) & 0x0F0F0F0Fu;
  gcq_scale_min_k4(r[1], r[2], r[3], u, sc, m);
  d0 = d1 = gc_h2f_bits(r[0] & 0xffffu) * (float)sc;
  mn = gc_h2f_bits(r[0] >> 16) * (float)m;
}
/* Q5_K: as Q4_K (qs at 48) with a fifth bit, bit u of qh[l] (qh at 16). */
GC_DEVICE void gcq_load_q5_k(const uint8_t *b, int u, int t, uint32_t *r) {
  const uint8_t *qs = b + 48 + 32 * (u >> 1), *qh = b + 16;
  r[0] = gcq_ld32(b);
  r[1] = gcq_ld32(b + 4), r[2] = gcq_ld32(b + 8), r[3] = gcq_ld32(b + 12);
  r[4] = gcq_ld32(qs + 4 * t);
  r[5] = gcq_ld32(qs + 16 + 4 * t);
  r[6] = gcq_ld32(qh + 4 * t);
  r[7] = gcq_ld32(qh + 16 + 4 * t);
}
GC_DEVICE void gcq_decode_q5_k(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  gcq_decode_q4_k(r, u, t, lo, hi, d0, d1, mn);
  lo |= ((r[6] >> u) & 0x01010101u) << 4;
  hi |= ((r[7] >> u) & 0x01010101u) << 4;
}
/* Q6_K: ql[128]; qh[64]; int8 scales[16]; half d. Unit u: half n = u/4,
 * j = u%4: the low (j < 2) or high nibble of ql[64n + 32·(j%2) + l], bits
 * 2j, 2j+1 of qh[32n + l] above it, minus 32; scales 8n + 2j (l < 16) and
 * 8n + 2j + 1. */
GC_DEVICE void gcq_load_q6_k(const uint8_t *b, int u, int t, uint32_t *r) {
  const int n = u >> 2, j = u & 3;
  const uint8_t *ql = b + 64 * n + 32 * (j & 1), *qh = b + 128 + 32 * n;
  r[0] = gcq_ld32u(ql + 4 * t);
  r[1] = gcq_ld32u(ql + 16 + 4 * t);
  r[2] = gcq_ld32u(qh + 4 * t);
  r[3] = gcq_ld32u(qh + 16 + 4 * t);
  r[4] = gcq_ld16(b + 192 + 8 * n + 2 * j); /* the two int8 scales */
  r[5] = gcq_ld16(b + 208);                 /* d */
}
GC_DEVICE void gcq_decode_q6_k(const uint32_t *r, int u, int t, uint32_t &lo, uint32_t &hi, float &d0,
                               float &d1, float &mn) {
  (void)t;
  const int j = u & 3, sh = 4 * (j >> 1);
  lo = ((r[0] >> sh) & 0x0F0F0F0Fu) | (((r[2] >> (2 * j)) & 0x03030303u) << 4);
  hi = ((r[1] >> sh) & 0x0F0F0F0Fu) | (((r[3] >> (2 * j)) & 0x03030303u) << 4);
  const float d = gc_h2f_bits(r[5]);
  d0 = d * (float)(int)(int8_t)(r[4] & 255u);
  d1 = d * (float)(int)(int8_t)(r[4] >> 8);
  mn = 0.0f;
}
#define GCQ_LOAD(b, u, t, r) GC_CAT(gcq_load_, GC_DTNAME(GC_TB))(b, u, t, r)
#define GCQ_DECODE(r, u, t, lo, hi, d0, d1, mn) \
  GC_CAT(gcq_decode_, GC_DTNAME(GC_TB))(r, u, t, lo, hi, d0, d1, mn)
/* Both at once: the part's level bytes and the unit's scales. */
#define GCQ_UNIT(b, u, t, lo, hi, d0, d1, mn)  \
  do {                                         \
    uint32_t r_[GCQ_RAW];                      \
    GCQ_LOAD(b, u, t, r_);                     \
    GCQ_DECODE(r_, u, t, lo, hi, d0, d1, mn);  \
  } while (0)
/* The level of byte i of w (GCQ_DECODE's lo or hi), as a float. */
#define GCQ_LEVEL(w, i) (gc_ubyte_f(w, i) - (float)GC_QBIAS)

/* The GEMM family's epilogues, chosen by the op (gen defines GC_OP_<op>;
 * PAIR and NORM where gen derives them from the op table): PAIR rows of B
 * per column of C (2: silu(gate)·up), NORM where A's rows are normalised. */
GC_DEVICE float gc_silu_mul(float g, float u) { return g / (1.0f + gc_exp(-g)) * u; }
/* <<< gc-quant */

#endif /* GC_CUDA_PRELUDE_H */
