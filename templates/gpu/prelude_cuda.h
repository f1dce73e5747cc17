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
/* A producer/consumer ring's barriers, ns stages: full[s] at full + 8s (one
 * arrival, the producer's, with the bytes its copies bring), empty[s] at
 * empty + 8s (one arrival per consumer); thread 0 makes them, then the
 * block meets. */
GC_DEVICE void gc_ring_init(unsigned full, unsigned empty, int ns, unsigned consumers) {
  if (gc_tid() == 0) {
    for (int s = 0; s < ns; s++) {
      gc_mbar_init(full + 8 * s, 1);
      gc_mbar_init(empty + 8 * s, consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  gc_barrier();
}
/* p moved up to the next multiple of 128 bytes of shared memory (a bulk
 * copy's destination; @shmem leaves the 128 bytes for it). */
GC_DEVICE unsigned char *gc_smem_align128(unsigned char *p) {
  return p + ((128 - (gc_smem_addr(p) & 127)) & 127);
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
/* gc_cp_async16 with an L2 cache policy (gc_l2_evict_first). */
GC_DEVICE void gc_cp_async16_hint(unsigned s, const void *g, int n, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(s), "l"(g), "r"(n),
               "l"(pol) : "memory");
}
/* 16 bytes of read-only global data at p (16-byte aligned; __ldg's
 * rules) with an L2 cache policy (gc_l2_evict_first). */
GC_DEVICE uint4 gc_ldg16_hint(const void *p, uint64_t pol) {
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
  return v;
}
/* cp.async groups: commit the copies this thread issued since the last
 * commit as one group; wait until at most N of its groups are in flight. */
GC_DEVICE void gc_cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> GC_DEVICE void gc_cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
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
/* gc_bulk_load with an L2 cache policy (gc_l2_evict_first). */
GC_DEVICE void gc_bulk_load_hint(unsigned s, const void *g, unsigned bytes, unsigned b, uint64_t pol) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1], %2, [%3], %4;\n" ::"r"(s), "l"(g), "r"(bytes), "r"(b), "l"(pol) : "memory");
}
/* An L2 policy whose lines go first: for bytes read once (a decode
 * step's weights), so that they do not push out what is read again. */
GC_DEVICE uint64_t gc_l2_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
/* Ask L2 for bytes (a multiple of 16) at g (16-byte aligned); no wait,
 * no value: a hint. sm_90: one bulk prefetch; before it, one
 * prefetch.global.L2 a 128-byte line. */
GC_DEVICE void gc_bulk_prefetch_l2(const void *g, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(g), "r"(bytes) : "memory");
#else
  for (unsigned o = 0; o < bytes; o += 128)
    gc_prefetch_l2((const char *)g + o);
#endif
}
/* The box of map at (column x, row y) to shared address s; completes on b. */
GC_DEVICE void gc_tma_load(unsigned s, const gc_tmap_t *map, int x, int y, unsigned b) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(s), "l"((uint64_t)map), "r"(x), "r"(y), "r"(b) : "memory");
}
/* The box of 3-D map at (x, y, z) (x the fastest) to shared address s;
 * completes on b. */
GC_DEVICE void gc_tma_load3(unsigned s, const gc_tmap_t *map, int x, int y, int z, unsigned b) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];\n"
               ::"r"(s), "l"((uint64_t)map), "r"(x), "r"(y), "r"(z), "r"(b) : "memory");
}
/* gc_tma_load3 with an L2 cache policy (gc_l2_evict_first). */
GC_DEVICE void gc_tma_load3_hint(unsigned s, const gc_tmap_t *map, int x, int y, int z, unsigned b, uint64_t pol) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
               " [%0], [%1, {%2, %3, %4}], [%5], %6;\n"
               ::"r"(s), "l"((uint64_t)map), "r"(x), "r"(y), "r"(z), "r"(b), "l"(pol) : "memory");
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
/* The calling threads arrive at named barrier id and go on without
 * waiting; n counts, as for gc_named_sync, every thread that syncs or
 * arrives there. */
GC_DEVICE void gc_named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
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
/* The wgmma of 16-bit inputs, fp32 accumulators d, shape m64 nN k16:
 * gc_wgmma_ss<N, BF> with A and B from shared memory (descriptors a and
 * b, both K-major), gc_wgmma_rs<N, BF> with A from registers (a warp's 16
 * rows as mma.sync's A fragment) and B N-major. BF: 1 for bf16, 0 for f16;
 * the template passes GC_TA == GC_BF16 (the dtype codes are defined after
 * this prelude). d[0 .. N/2-1]: the accumulator operand lists. */
#define GC_WGMMA_OP(n, t) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32." t "." t " "

#define GC_WG_D32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define GC_WG_O32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define GC_WG_D64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define GC_WG_O64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define GC_WG_D96 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}"
#define GC_WG_O96 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define GC_WG_D128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
#define GC_WG_O128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
template <int N, int BF> GC_DEVICE void gc_wgmma_ss(float *d, uint64_t a, uint64_t b);
template <int N, int BF> GC_DEVICE void gc_wgmma_rs(float *d, const uint32_t a[4], uint64_t b);
/* The specialisations for n N of input type TY (BF its flag): the
 * accumulator list DL / OL, then the operands' numbers. */
#define GC_WGMMA_SS(N, BF, TY, DL, OL, A, B)                                                    \
  template <> GC_DEVICE void gc_wgmma_ss<N, BF>(float *d, uint64_t a, uint64_t b) {             \
    asm volatile(GC_WGMMA_OP(N, TY) DL ", %" #A ", %" #B ", 1, 1, 1, 0, 0;\n" : OL : "l"(a), "l"(b)); \
  }
#define GC_WGMMA_RS(N, BF, TY, DL, OL, A0, A1, A2, A3, B)                                         \
  template <> GC_DEVICE void gc_wgmma_rs<N, BF>(float *d, const uint32_t a[4], uint64_t b) {      \
    asm volatile(GC_WGMMA_OP(N, TY) DL ", {%" #A0 ",%" #A1 ",%" #A2 ",%" #A3 "}, %" #B ", 1, 1, 1, 1;\n" \
                 : OL : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));                     \
  }
GC_WGMMA_SS(64, 0, "f16", GC_WG_D32, GC_WG_O32, 32, 33)
GC_WGMMA_SS(64, 1, "bf16", GC_WG_D32, GC_WG_O32, 32, 33)
GC_WGMMA_SS(128, 0, "f16", GC_WG_D64, GC_WG_O64, 64, 65)
GC_WGMMA_SS(128, 1, "bf16", GC_WG_D64, GC_WG_O64, 64, 65)
GC_WGMMA_SS(192, 0, "f16", GC_WG_D96, GC_WG_O96, 96, 97)
GC_WGMMA_SS(192, 1, "bf16", GC_WG_D96, GC_WG_O96, 96, 97)
GC_WGMMA_SS(256, 0, "f16", GC_WG_D128, GC_WG_O128, 128, 129)
GC_WGMMA_SS(256, 1, "bf16", GC_WG_D128, GC_WG_O128, 128, 129)
GC_WGMMA_RS(64, 0, "f16", GC_WG_D32, GC_WG_O32, 32, 33, 34, 35, 36)
GC_WGMMA_RS(64, 1, "bf16", GC_WG_D32, GC_WG_O32, 32, 33, 34, 35, 36)
GC_WGMMA_RS(128, 0, "f16", GC_WG_D64, GC_WG_O64, 64, 65, 66, 67, 68)
GC_WGMMA_RS(128, 1, "bf16", GC_WG_D64, GC_WG_O64, 64, 65, 66, 67, 68)

/* Shared-memory matrix descriptor of a wgmma operand at s in sw-byte
 * rows swizzled sw bytes wide (sw 128: the 16-byte chunk c of row r at
 * r·128 + ((c ^ r % 8)·16); sw 64: r·64 + ((c ^ (r / 2) % 4)·16)), 8-row
 * groups 8·sw bytes apart, the pattern 8·sw-aligned: K-major (lbo unused:
 * 16) or, for an MN-major B, lbo the bytes between its column blocks of
 * sw bytes. */
GC_DEVICE uint64_t gc_wgmma_desc(unsigned s, unsigned lbo, unsigned sw) {
  return (uint64_t)((s & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(8 * sw >> 4) << 32) |
         ((uint64_t)(sw == 128 ? 1 : 2) << 62);
}

GC_DEVICE unsigned gc_cluster_rank(void) {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
/* The float at shared address p (a __shared__ variable's) of block rank
 * of the cluster (distributed shared memory; visible after a cluster
 * barrier that followed its store). */
GC_DEVICE float gc_ld_cluster(const float *p, unsigned rank) {
  unsigned a;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(gc_smem_addr(p)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(a) : "memory");
  return v;
}
/* v stored at the shared address of p (a __shared__ variable's) in block
 * rank of the cluster (visible to it after a cluster barrier that
 * followed the store; the block must have started: a barrier before). */
GC_DEVICE void gc_st_cluster(float *p, unsigned rank, float v) {
  unsigned a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(gc_smem_addr(p)), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(a), "f"(v) : "memory");
}
/* A cluster barrier in halves: every thread of every block arrives once
 * (gc_cluster_arrive: its earlier stores, remote ones too, visible to
 * those past their wait; _relaxed: nothing ordered, for "every block has
 * started"), then waits (gc_cluster_wait: acquire), before its next
 * arrival. */
GC_DEVICE void gc_cluster_arrive_relaxed(void) {
  __syncwarp();
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
GC_DEVICE void gc_cluster_arrive(void) {
  __syncwarp();
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
GC_DEVICE void gc_cluster_wait(void) { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
/* Every thread of every block of the cluster arrives, then waits (the
 * .aligned forms: the warp reconverges first). */
GC_DEVICE void gc_cluster_sync(void) {
  gc_cluster_arrive();
  gc_cluster_wait();
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
/* *p, read with acquire semantics at device scope (a count other blocks
 * raise after their fence): what they wrote before is seen after it. */
GC_DEVICE unsigned gc_ld_acquire(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/* The device's nanosecond clock (for bounded waits). */
GC_DEVICE uint64_t gc_globaltimer(void) {
  uint64_t v;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(v));
  return v;
}
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

/* ------------------------------------------------------------------ */
/* mma.sync (sm_80+) and packed 16-bit arithmetic                      */
/* ------------------------------------------------------------------ */
/* c += a·b, one warp's m16n8k16 MMA with fp32 accumulators: a the 16×16
 * row-major fragment (lane l = 4g + t: a0 row g, columns 2t, 2t+1; a1
 * row g+8; a2, a3 the same at columns 2t+8, 2t+9), b the 16×8 column
 * fragment (b0: rows 2t, 2t+1 of column g; b1 rows 2t+8, 2t+9), c the
 * 16×8 accumulator (c0, c1: row g, columns 2t, 2t+1; c2, c3: row g+8);
 * elements f16, or bf16 where BF. */
template <int BF>
GC_DEVICE void gc_mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                           uint32_t b1) {
  if (BF)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
/* Four 8x8 matrices of 16-bit elements from shared memory (ldmatrix
 * .x4): lane l gives the address of row l % 8 of matrix l / 8; r[i] gets
 * matrix i's (row l / 4, columns 2(l % 4), +1), or with _trans its (rows
 * 2(l % 4), +1 of column l / 4). Every lane of the warp calls it. */
GC_DEVICE void gc_ldmatrix_x4(uint32_t r[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
GC_DEVICE void gc_ldmatrix_x4_trans(uint32_t r[4], unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
/* Pairs of f16 (bf16 where BF) in 32-bit words: a·b rounded once
 * (bf16: a·b + (−0), the fma, since sm_80 has no bf16x2 multiply), and
 * a·b + c rounded once. Not volatile: equal operands give one result,
 * which the compiler may share. */
template <int BF> GC_DEVICE uint32_t gc_mul2(uint32_t a, uint32_t b) {
  uint32_t r;
  if (BF)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
  else
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
template <int BF> GC_DEVICE uint32_t gc_fma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  if (BF)
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  else
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
/* The pair (x's half h, the same): as movs of halves, which ptxas can
 * fold into an operand's .H0_H0 / .H1_H1 selection of the instruction
 * that uses it. */
GC_DEVICE uint32_t gc_dup2(uint32_t x, int h) {
  uint32_t r;
  if (h)
    asm("{\n.reg .b16 l, u;\nmov.b32 {l, u}, %1;\nmov.b32 %0, {u, u};\n}\n" : "=r"(r) : "r"(x));
  else
    asm("{\n.reg .b16 l, u;\nmov.b32 {l, u}, %1;\nmov.b32 %0, {l, l};\n}\n" : "=r"(r) : "r"(x));
  return r;
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
/* Byte i of w minus b (an integer below 2^23), exactly: one subtraction,
 * 2^23 + byte − (2^23 + b), every term an integer below 2^24. */
GC_DEVICE float gc_ubyte_less_f(uint32_t w, int i, float b) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)i)) - (8388608.0f + b);
}

/* The block formats and the epilogue helper, the same text for both
 * vendors (gen/ splices the file in here). */
#include "prelude_common.h"

#endif /* GC_CUDA_PRELUDE_H */
