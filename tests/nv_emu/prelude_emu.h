/* prelude_emu.h — runs NVIDIA templates of the mma.sync families
 * (gemv_qmma, gemv_mma, attention_mma, gemm_mma, gemm_q_mma), of wgmma
 * (attention_wgmma) and the SIMT GEMVs (gemv_gpu, gemv_q_gpu, gemv_bulk)
 * on the host,
 * unchanged,
 * as a SIMT emulation: one thread per thread of a block (fibers taking
 * turns on one host thread, tests/amd_emu/emu_fiber.h), blocks one
 * after another (tests/amd_emu/run_block.h), dynamic shared memory a heap
 * buffer of exactly @shmem bytes (ASan sees any access past it), barriers
 * (bar.sync 0, named barriers, __syncwarp) as real rendezvous, and the
 * warp-collective operations (mma.sync, shuffles) as a warp-wide
 * rendezvous where one lane evaluates the instruction for all.
 *
 * It replaces prelude_cuda.h's device surface: the CUDA types and
 * intrinsics the templates name (uint2/uint4, __half, __half2,
 * __nv_bfloat16, __byte_perm, __ldg, atomicAdd on shared floats) and the
 * prelude's gc_* calls, PTX included:
 * - gc_mma16816<BF> from the PTX ISA's fragment layout of
 *   mma.m16n8k16 (.f16/.bf16, fp32 accumulators), written in the
 *   direction "matrix element -> (lane, register, half)", deliberately not
 *   from the prelude's comment, which states it the other way; ldmatrix
 *   (.x4, .trans) from the same document;
 * - wgmma m64nNk16 (gc_wgmma_ss / _rs) from the PTX ISA's descriptor
 *   format, its canonical swizzled layouts and accumulator layout, as one
 *   warpgroup-wide rendezvous (below);
 * - gc_mul2 / gc_fma2 (mul.rn / fma.rn on f16x2, bf16x2): each half
 *   computed exactly in double and rounded once;
 * - cp.async (16 bytes, zero filled past n) as a synchronous copy: its
 *   groups are complete at once, which is one of the orders the hardware
 *   may take;
 * - mbarriers (arrivals, transaction bytes, phases and their parity, as
 *   the PTX ISA describes them) in a table beside the barrier's 8 bytes;
 * - bulk copies (gc_bulk_load: 16-byte aligned, a multiple of 16 bytes)
 *   and tensor-map copies (gc_tma_load3) through a host gc_tmap_t that the
 *   harness fills as runtime/cuda.c encodes a block format's map (3-D over
 *   32-bit words: [rows][blocks][words], boxes of whole blocks, zero fill
 *   past the matrix, the box's bytes counted all the same);
 * - griddepcontrol as no-ops; an L2 prefetch as a one-byte read (its address
 *   must lie in a buffer).
 * Shared memory is named by 32-bit addresses (gc_smem_addr): the dynamic
 * buffer's offsets, and the __shared__ arrays of the kernel body (function
 * statics in section emu_shared: blocks run one after another) above
 * EMU_STATIC.
 *
 * What it cannot show: the memory model (the async proxy, the order of
 * copies against loads), timing, and whether PTX's documented layouts are
 * the hardware's. The block formats, the epilogue and the GEMVs' shared
 * pieces are the real prelude's (quant.h, epilogue.h, gemv.h: blocks of
 * prelude_common.h the test extracts). */
#ifndef GC_NV_EMU_PRELUDE_H
#define GC_NV_EMU_PRELUDE_H

#include <map>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <unistd.h>
#include "emu_fiber.h" /* tests/amd_emu: the block's threads as fibers */

#define GC_CUDA 1
#define GC_F32 0
#define GC_F16 1
#define GC_BF16 2

#define GC_DEVICE static inline
#define GC_KERNEL extern "C"
#define GC_KERNEL_BOUNDS(n) extern "C"
#define GC_KERNEL_OCC(n, b) extern "C"
#include "emu_shared.h" /* GC_SHARED (tests/amd_emu) */
#define GC_RESTRICT
#define GC_ALIGN(n) alignas(n)
#define __grid_constant__
#define GC_CAT_(a, b) a##b
#define GC_CAT(a, b) GC_CAT_(a, b)
#define GC_STR_(x) #x
#define GC_STR(x) GC_STR_(x)
#define GC_UNROLL(n)
#define GC_WARP 32

/* ---- CUDA's types and intrinsics, as far as the templates use them ----- */

struct alignas(8) uint2 { uint32_t x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(8) float2 { float x, y; };
typedef _Float16 __half;
struct alignas(4) __half2 { _Float16 x, y; };
struct __nv_bfloat16 { uint16_t bits; };

GC_DEVICE float __uint_as_float(uint32_t u) { return __builtin_bit_cast(float, u); }
GC_DEVICE uint32_t __float_as_uint(float f) { return __builtin_bit_cast(uint32_t, f); }
/* prmt.b32 (default mode): byte i of the result is byte (s >> 4i) & 7 of
 * the 8 bytes {y, x} (x's bytes 0-3), its sign replicated when bit 3 of
 * that nibble is set. */
GC_DEVICE uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t v = (uint64_t)y << 32 | x;
  uint32_t d = 0;
  for (int i = 0; i < 4; i++) {
    const unsigned n = s >> (4 * i) & 15u, b = (unsigned)(v >> (8 * (n & 7)) & 255u);
    d |= (n & 8 ? (b & 128 ? 255u : 0u) : b) << (8 * i);
  }
  return d;
}
template <class T> GC_DEVICE T __ldg(const T *p) { return *p; }
GC_DEVICE uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
GC_DEVICE __half2 __float2half2_rn(float f) { return {(_Float16)f, (_Float16)f}; }
GC_DEVICE __half2 __hsub2(__half2 a, __half2 b) {
  return {(_Float16)((double)a.x - (double)b.x), (_Float16)((double)a.y - (double)b.y)};
}
GC_DEVICE float atomicAdd(float *p, float v) { /* (one thread runs at a time) */
  const float old = *p;
  *p = old + v;
  return old;
}

/* ---- the emulated machine --------------------------------------------- */

struct emu_wave {
  emu_fbar sync; /* the warp's rendezvous */
  float a[32][8], b[32][4], acc[32][4], out[32][4];
  uint32_t xch[32];
};
struct emu_mbar {
  unsigned count = 0, pending = 0, phase = 0; /* phase: completed phases */
  long long tx = 0;
};
struct emu_block {
  emu_fbar bar; /* bar.sync 0: every thread of the block */
  int nthreads;
  unsigned char *lds;
  emu_wave *waves;
  int wave_size;
  emu_fbar named[16]; /* bar.sync id, n */
  std::map<unsigned, emu_mbar> mbar; /* the mbarriers */
  /* warpgroup g's wgmma (threads 128g .. 128g+127): its rendezvous and
     each thread's operands as deposited */
  emu_fbar wgbar[8];
  float *wgd[8][128];
  uint32_t wga[8][128][4];
  uint64_t wgdesc[8][128][2];
};
static int64_t emu_bid;
static emu_block *emu_blk;
static int emu_errors; /* misuse the emulation saw (a barrier used before init, ...) */

GC_DEVICE int gc_tid(void) { return emu_cur; }
GC_DEVICE int64_t gc_bid(void) { return emu_bid; }
GC_DEVICE int gc_lane(void) { return emu_cur % 32; }
GC_DEVICE emu_wave *emu_my_wave(void) { return &emu_blk->waves[emu_cur / 32]; }
GC_DEVICE void gc_barrier(void) { emu_fbar_wait(&emu_blk->bar, emu_blk->nthreads); }
GC_DEVICE void gc_syncwarp(void) { emu_fbar_wait(&emu_my_wave()->sync, 32); }
/* CUDA's own names where a template uses them (gemv_bulk): the whole
 * warp's __syncwarp (a partial mask is not modelled: a misuse), and the
 * grid's size, which the harness sets before the blocks run */
GC_DEVICE void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
  gc_syncwarp();
}
struct emu_dim3 {
  unsigned x, y, z;
};
static emu_dim3 gridDim = {1, 1, 1};
GC_DEVICE void gc_named_sync(int id, int n) { emu_fbar_wait(&emu_blk->named[id & 15], n); }
GC_DEVICE void gc_named_arrive(int id, int n) { emu_fbar_arrive(&emu_blk->named[id & 15], n); }
/* At the block's end no named barrier may hold arrivals that no sync met
 * (bar.arrive's count left pending): a misuse. */
static void emu_named_end(emu_block *b) {
  for (int i = 0; i < 16; i++)
    if (b->named[i].count) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
}
#define EMU_BLOCK_END emu_named_end
#include "emu_split.h" /* tests/amd_emu: GC_GLOBAL, the fence, the ticket's atomic, L2-only loads and stores */
GC_DEVICE void gc_pdl_wait(void) {}
GC_DEVICE void gc_pdl_launch(void) {}
/* A hint, but its address must lie in a buffer: one byte read there, so
 * ASan sees a prefetch past the end (the emulator's buffers are exact). */
/* The harness's record of what was asked of L2 (harness_gemv.h: the
 * window's coverage), or NULL. */
static void (*emu_on_prefetch)(const void *p, unsigned bytes);
GC_DEVICE void gc_prefetch_l2(const void *p) {
  (void)*(const volatile char *)p;
  if (emu_on_prefetch) emu_on_prefetch(p, 1);
}

/* Shared memory: the dynamic buffer at addresses 0.., the kernel's
 * __shared__ arrays (section emu_shared) at EMU_STATIC + their offset. */
#define EMU_STATIC 0x80000000u
GC_DEVICE unsigned char *gc_dyn_shared(void) { return emu_blk->lds; }
GC_DEVICE unsigned gc_smem_addr(const void *p) {
  const unsigned char *c = (const unsigned char *)p;
  if (c >= __start_emu_shared && c < __stop_emu_shared) return EMU_STATIC + (unsigned)(c - __start_emu_shared);
  return (unsigned)(c - emu_blk->lds);
}
GC_DEVICE unsigned char *emu_smem(unsigned a) {
  return a >= EMU_STATIC ? __start_emu_shared + (a - EMU_STATIC) : emu_blk->lds + a;
}
GC_DEVICE unsigned char *gc_smem_align128(unsigned char *p) {
  return p + ((128 - (gc_smem_addr(p) & 127)) & 127);
}

/* cp.async: n of the 16 bytes read, the rest zero; complete at once. */
GC_DEVICE void gc_cp_async16(unsigned s, const void *g, int n) {
  unsigned char *d = emu_smem(s);
  memcpy(d, g, (size_t)n);
  memset(d + n, 0, (size_t)(16 - n));
}
/* The same with an L2 policy (none here). */
GC_DEVICE void gc_cp_async16_hint(unsigned s, const void *g, int n, uint64_t pol) {
  (void)pol;
  gc_cp_async16(s, g, n);
}
/* ld.global.nc with an L2 policy: 16 aligned bytes (none here). */
GC_DEVICE uint4 gc_ldg16_hint(const void *p, uint64_t pol) {
  (void)pol;
  if ((uintptr_t)p % 16) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
  return *(const uint4 *)p;
}
/* cp.async.mbarrier.arrive.noinc: the thread's copies (already complete
 * here) arrive on b, counted among its expected arrivals */
GC_DEVICE void gc_cp_async_mbar_arrive(unsigned b);
GC_DEVICE void gc_cp_async_commit(void) {}
template <int N> GC_DEVICE void gc_cp_async_wait(void) {}

/* mbarriers (PTX ISA, "mbarrier"): a phase completes once its pending
 * arrivals are 0 and its transaction count is 0; then the next phase
 * expects `count` arrivals again. try_wait.parity(P) succeeds once the
 * phase of parity P has completed, i.e. while the current phase's parity
 * is not P. */
GC_DEVICE void emu_mbar_step(emu_mbar &m) {
  if (m.pending == 0 && m.tx == 0) {
    m.phase++, m.pending = m.count;
  }
}
GC_DEVICE emu_mbar &emu_mbar_at(unsigned b) {
  auto it = emu_blk->mbar.find(b);
  if (it == emu_blk->mbar.end()) {
    __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED); /* used before init */
    return emu_blk->mbar[b];
  }
  return it->second;
}
GC_DEVICE void gc_mbar_init(unsigned b, unsigned count) {
  emu_mbar &m = emu_blk->mbar[b];
  m.count = m.pending = count, m.phase = 0, m.tx = 0;
}
GC_DEVICE void gc_mbar_arrive(unsigned b) {
  emu_mbar &m = emu_mbar_at(b);
  if (m.pending == 0) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED); /* one arrival too many */
  m.pending--;
  emu_mbar_step(m);
}
GC_DEVICE void gc_mbar_expect_tx(unsigned b, unsigned bytes) {
  emu_mbar &m = emu_mbar_at(b);
  m.tx += bytes;
  m.pending--;
  emu_mbar_step(m);
}
GC_DEVICE void emu_mbar_complete_tx(unsigned b, unsigned bytes) {
  emu_mbar &m = emu_mbar_at(b);
  m.tx -= bytes;
  emu_mbar_step(m);
}
/* try_wait.parity in a loop; a phase that never comes (a stage count or
 * parity gone wrong) would hang the GPU: every thread then waits, and
 * emu_fiber.h ends the run (exit status 3) saying so. */
GC_DEVICE void gc_mbar_wait(unsigned b, unsigned par) {
  emu_wait_until([&] { return (emu_mbar_at(b).phase & 1u) != (par & 1u); }, "an mbarrier wait");
}
GC_DEVICE void gc_ring_init(unsigned full, unsigned empty, int ns, unsigned consumers) {
  if (gc_tid() == 0)
    for (int s = 0; s < ns; s++) {
      gc_mbar_init(full + 8 * s, 1);
      gc_mbar_init(empty + 8 * s, consumers);
    }
  gc_barrier();
}

/* cp.async.bulk of bytes from global g to shared s, complete on barrier
 * b: the PTX ISA asks 16-byte alignment of both addresses and a size a
 * multiple of 16 (a misuse otherwise). */
GC_DEVICE void gc_bulk_load(unsigned s, const void *g, unsigned bytes, unsigned b) {
  if (s % 16 || (uintptr_t)g % 16 || bytes % 16) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
  memcpy(emu_smem(s), g, bytes);
  emu_mbar_complete_tx(b, bytes);
}

/* The same with an L2 policy (none here). */
GC_DEVICE void gc_bulk_load_hint(unsigned s, const void *g, unsigned bytes, unsigned b, uint64_t pol) {
  (void)pol;
  gc_bulk_load(s, g, bytes, b);
}
GC_DEVICE uint64_t gc_l2_evict_first() { return 0; }
/* cp.async.bulk.prefetch.L2: the same alignment and size rules; every
 * byte touched, so that ASan sees a window asked for past its buffer. */
GC_DEVICE void gc_bulk_prefetch_l2(const void *g, unsigned bytes) {
  if ((uintptr_t)g % 16 || bytes % 16 || !bytes) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
  for (unsigned i = 0; i < bytes; i++) (void)((const volatile unsigned char *)g)[i];
  if (emu_on_prefetch) emu_on_prefetch(g, bytes);
}

GC_DEVICE void gc_cp_async_mbar_arrive(unsigned b) { gc_mbar_arrive(b); }

/* A tensor map as the harness encodes it (runtime/cuda.c's 3-D map of a
 * block format): dims {words, blocks, rows}, byte strides of a block and
 * of a row, box {words, blocks, rows}. */
struct alignas(64) gc_tmap_t {
  const unsigned char *base;
  long long dims[3], stride[2];
  int box[3];
};
/* The box at (x, y, z) into shared s, [box z][box y][box x] 32-bit words,
 * zero past the map; its bytes complete on barrier b. */
GC_DEVICE void gc_tma_load3(unsigned s, const gc_tmap_t *map, int x, int y, int z, unsigned b) {
  uint32_t *d = (uint32_t *)emu_smem(s);
  for (int k = 0; k < map->box[2]; k++)
    for (int j = 0; j < map->box[1]; j++)
      for (int i = 0; i < map->box[0]; i++) {
        const long long X = x + i, Y = y + j, Z = z + k;
        uint32_t v = 0;
        if (X < map->dims[0] && Y < map->dims[1] && Z < map->dims[2])
          memcpy(&v, map->base + Z * map->stride[1] + Y * map->stride[0] + 4 * X, 4);
        *d++ = v;
      }
  emu_mbar_complete_tx(b, (unsigned)(4 * map->box[0] * map->box[1] * map->box[2]));
}
/* The same with an L2 policy (none here). */
GC_DEVICE void gc_tma_load3_hint(unsigned s, const gc_tmap_t *map, int x, int y, int z, unsigned b, uint64_t pol) {
  (void)pol;
  gc_tma_load3(s, map, x, y, z, b);
}

/* ---- warp-collective operations ------------------------------------------ */

/* Every lane of the warp has deposited its operands; lane 0 evaluates fn
 * for all; every lane then takes its result (and all have before the next
 * operation deposits). */
template <class F> GC_DEVICE void emu_warp_op(F fn) {
  emu_wave *w = emu_my_wave();
  emu_fbar_wait(&w->sync, 32);
  if (gc_lane() == 0) fn(w);
  emu_fbar_wait(&w->sync, 32);
}
GC_DEVICE uint32_t emu_shfl_bits(uint32_t v, int src) {
  emu_wave *w = emu_my_wave();
  w->xch[gc_lane()] = v;
  emu_warp_op([](emu_wave *) {});
  const uint32_t r = w->xch[src & 31];
  emu_fbar_wait(&w->sync, 32); /* read before the next shuffle writes */
  return r;
}
GC_DEVICE float gc_shfl(float v, int src) { return __uint_as_float(emu_shfl_bits(__float_as_uint(v), src)); }
GC_DEVICE int gc_shfl(int v, int src) { return (int)emu_shfl_bits((uint32_t)v, src); }
GC_DEVICE float gc_shfl_xor(float v, int mask) { return gc_shfl(v, gc_lane() ^ mask); }
GC_DEVICE int gc_shfl_xor(int v, int mask) { return gc_shfl(v, gc_lane() ^ mask); }
GC_DEVICE float gc_group_sum(float v, int w) {
  for (int m = w >> 1; m > 0; m >>= 1) v += gc_shfl_xor(v, m);
  return v;
}
GC_DEVICE float gc_warp_sum(float v) { return gc_group_sum(v, GC_WARP); }
GC_DEVICE float gc_group_max(float v, int w) {
  for (int m = w >> 1; m > 0; m >>= 1) v = fmaxf(v, gc_shfl_xor(v, m));
  return v;
}

GC_DEVICE float emu_bf16(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
GC_DEVICE uint16_t emu_to_bf16(double v) { /* nearest even, once, from the exact double */
  const float f = (float)v;
  uint32_t u = __float_as_uint(f);
  if ((double)f != v && (u & 0xffffu) == 0x8000u) { /* a tie in float may not be one in double */
    const double lo = emu_bf16((uint16_t)(u >> 16)), hi = emu_bf16((uint16_t)((u >> 16) + 1));
    return (uint16_t)((u >> 16) + (fabs(v - hi) < fabs(v - lo) ? 1 : 0));
  }
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* Half h (0, 1) of a 32-bit word of 16-bit elements, by dtype. */
GC_DEVICE double emu_half(int bf, uint32_t w, int h) {
  const uint16_t b = (uint16_t)(w >> (16 * h));
  return bf ? (double)emu_bf16(b) : (double)__builtin_bit_cast(_Float16, b);
}
GC_DEVICE uint32_t emu_pack(int bf, double lo, double hi) {
  if (bf) return (uint32_t)emu_to_bf16(lo) | (uint32_t)emu_to_bf16(hi) << 16;
  return (uint32_t)__builtin_bit_cast(uint16_t, (_Float16)lo) | (uint32_t)__builtin_bit_cast(uint16_t, (_Float16)hi) << 16;
}

/* mma.m16n8k16 .row.col, fp32 accumulators (PTX ISA, "Matrix Fragments
 * for mma.m16n8k16 with floating point type"), element -> place, with
 * g = lane / 4, t = lane % 4 of the fragment's lane:
 *   A[i][k] (16×16): lane 4·(i % 8) + (k % 8) / 2, register (i / 8) + 2·(k / 8), half k % 2
 *   B[k][j] (16×8):  lane 4·j + (k % 8) / 2, register k / 8, half k % 2
 *   D[i][j] (16×8):  lane 4·(i % 8) + j / 2, register 2·(i / 8) + j % 2
 * Products are exact; each D element is its C plus the sum of its 16
 * products in double, rounded once to fp32 (the hardware's order and
 * rounding are finer than any template's tolerance relies on). */
template <int BF> GC_DEVICE void emu_mma_eval(emu_wave *w) {
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 8; j++) {
      double sum = 0;
      for (int k = 0; k < 16; k++) {
        const int la = 4 * (i % 8) + (k % 8) / 2, ra = i / 8 + 2 * (k / 8);
        const int lb = 4 * j + (k % 8) / 2, rb = k / 8;
        sum += emu_half(BF, __float_as_uint(w->a[la][ra]), k % 2) *
               emu_half(BF, __float_as_uint(w->b[lb][rb]), k % 2);
      }
      const int ld = 4 * (i % 8) + j / 2, rd = 2 * (i / 8) + j % 2;
      w->out[ld][rd] = (float)((double)w->acc[ld][rd] + sum);
    }
}
template <int BF>
GC_DEVICE void gc_mma16816(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                           uint32_t b1) {
  emu_wave *w = emu_my_wave();
  const int l = gc_lane();
  const uint32_t a[4] = {a0, a1, a2, a3};
  for (int r = 0; r < 4; r++) w->a[l][r] = __uint_as_float(a[r]), w->acc[l][r] = c[r];
  w->b[l][0] = __uint_as_float(b0), w->b[l][1] = __uint_as_float(b1);
  emu_warp_op([](emu_wave *w) { emu_mma_eval<BF>(w); });
  for (int r = 0; r < 4; r++) c[r] = w->out[l][r];
  emu_fbar_wait(&w->sync, 32); /* out is read before the next op */
}

/* ldmatrix.x4 (PTX ISA, "ldmatrix"): lanes 8i .. 8i+7 give the addresses
 * of rows 0 .. 7 of matrix i (8x8 of 16-bit elements); lane l receives,
 * of each matrix i, elements (row l / 4, columns 2(l % 4), +1) as r[i]
 * (low half first), or with .trans elements (rows 2(l % 4), +1; column
 * l / 4). */
GC_DEVICE void emu_ldmatrix(uint32_t r[4], unsigned a, bool trans) {
  emu_wave *w = emu_my_wave();
  const int l = gc_lane();
  w->xch[l] = a;
  emu_warp_op([](emu_wave *) {});
  for (int i = 0; i < 4; i++) {
    uint16_t h[2];
    for (int e = 0; e < 2; e++) {
      const int row = trans ? 2 * (l % 4) + e : l / 4, col = trans ? l / 4 : 2 * (l % 4) + e;
      memcpy(&h[e], emu_smem(w->xch[8 * i + row]) + 2 * col, 2);
    }
    r[i] = (uint32_t)h[0] | (uint32_t)h[1] << 16;
  }
  emu_fbar_wait(&w->sync, 32); /* the addresses are read before the next op writes */
}
GC_DEVICE void gc_ldmatrix_x4(uint32_t r[4], unsigned a) { emu_ldmatrix(r, a, false); }
GC_DEVICE void gc_ldmatrix_x4_trans(uint32_t r[4], unsigned a) { emu_ldmatrix(r, a, true); }

/* wgmma.mma_async.sync.aligned.m64nNk16.f32 (PTX ISA, "Asynchronous
 * Warpgroup Level Matrix Multiply-Accumulate"), evaluated at issue by one
 * thread of the warpgroup once all 128 have deposited their operands
 * (the fence, commit and wait have nothing left to order). D[m][n] +=
 * Σ_k A[m][k]·B[k][n] over k < 16, in double, rounded once to fp32.
 *
 * Shared-memory operands through their descriptors (PTX ISA, "Matrix
 * Descriptor"): start address >> 4 in bits 0-13, the leading-dimension
 * byte offset (LBO) >> 4 in bits 16-29, the stride-dimension one (SBO)
 * >> 4 in bits 32-45, the base offset in bits 49-51 (0: the canonical
 * layouts; other values are not modelled: a misuse), the swizzle mode in
 * bits 62-63 (1: 128 B, 2: 64 B, 3: 32 B; 0, the interleaved layout, is
 * not modelled: a misuse). With W the swizzle's bytes, a swizzle atom is 8
 * rows of W bytes; 16-bit element e of an operand is at logical byte
 *   K-major (A, and B without transpose), row r (of M or N), column k:
 *     start + (r / 8)·SBO + (r % 8)·W + 2k          (LBO unused)
 *   MN-major (B transposed), row k, column n (of N):
 *     start + (n / (W/2))·LBO + (k / 8)·SBO + (k % 8)·W + 2·(n % (W/2))
 * and the swizzle XORs the 16-byte chunk bits (4 ..) of that address with
 * the row-in-atom bits (7 ..): 3 of them for 128 B, 2 for 64, 1 for 32.
 * The accumulators: thread 32w + l of the warpgroup holds, in register
 * i, D[16w + l/4 + 8·((i % 4)/2)][8·(i/4) + 2·(l % 4) + i % 2] — written
 * here element -> place. A from registers (the _rs form): warp w's rows
 * 16w .. 16w+15 as mma.sync m16n8k16's A fragment (emu_mma_eval's). */
GC_DEVICE unsigned emu_desc_elem(uint64_t desc, int mn_major, int row, int col) {
  const unsigned start = (unsigned)(desc & 0x3FFF) << 4, lbo = (unsigned)(desc >> 16 & 0x3FFF) << 4,
                 sbo = (unsigned)(desc >> 32 & 0x3FFF) << 4, mode = (unsigned)(desc >> 62);
  if ((desc >> 49 & 7) || mode == 0) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
  const unsigned W = mode == 1 ? 128 : mode == 2 ? 64 : 32, bits = mode == 1 ? 7 : mode == 2 ? 3 : 1;
  unsigned a;
  if (!mn_major) /* row r, column k */
    a = start + (unsigned)(row / 8) * sbo + (unsigned)(row % 8) * W + 2u * (unsigned)col;
  else /* row k, column n */
    a = start + (unsigned)(col / (int)(W / 2)) * lbo + (unsigned)(row / 8) * sbo + (unsigned)(row % 8) * W +
        2u * (unsigned)(col % (int)(W / 2));
  return a ^ ((a >> 7 & bits) << 4);
}
GC_DEVICE double emu_smem_half(int bf, unsigned a) {
  uint16_t h;
  memcpy(&h, emu_smem(a), 2);
  return emu_half(bf, h, 0);
}
template <int N, int BF, int RS> GC_DEVICE void emu_wgmma(float *d, const uint32_t *a, uint64_t adesc, uint64_t bdesc) {
  const int g = gc_tid() / 128, t = gc_tid() % 128;
  emu_block *B = emu_blk;
  B->wgd[g][t] = d;
  for (int r = 0; r < 4; r++) B->wga[g][t][r] = RS ? a[r] : 0;
  B->wgdesc[g][t][0] = adesc, B->wgdesc[g][t][1] = bdesc;
  emu_fbar_wait(&B->wgbar[g], 128);
  if (t == 0) {
    for (int x = 1; x < 128; x++) /* the descriptors are the warpgroup's, not a thread's */
      if (B->wgdesc[g][x][0] != adesc || B->wgdesc[g][x][1] != bdesc) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
    for (int m = 0; m < 64; m++)
      for (int n = 0; n < N; n++) {
        double sum = 0;
        for (int k = 0; k < 16; k++) {
          double av;
          if (RS) {
            const int i = m % 16, la = 32 * (m / 16) + 4 * (i % 8) + (k % 8) / 2, ra = i / 8 + 2 * (k / 8);
            av = emu_half(BF, B->wga[g][la][ra], k % 2);
          } else {
            av = emu_smem_half(BF, emu_desc_elem(adesc, 0, m, k));
          }
          const double bv = RS ? emu_smem_half(BF, emu_desc_elem(bdesc, 1, k, n))
                               : emu_smem_half(BF, emu_desc_elem(bdesc, 0, n, k));
          sum += av * bv;
        }
        const int l = 4 * (m % 8) + (n % 8) / 2, i = 4 * (n / 8) + 2 * (m % 16 / 8) + n % 2;
        float *dd = B->wgd[g][32 * (m / 16) + l];
        dd[i] = (float)((double)dd[i] + sum);
      }
  }
  emu_fbar_wait(&B->wgbar[g], 128);
}
template <int N, int BF> GC_DEVICE void gc_wgmma_ss(float *d, uint64_t a, uint64_t b) {
  emu_wgmma<N, BF, 0>(d, NULL, a, b);
}
template <int N, int BF> GC_DEVICE void gc_wgmma_rs(float *d, const uint32_t a[4], uint64_t b) {
  emu_wgmma<N, BF, 1>(d, a, 0, b);
}
GC_DEVICE void gc_wgmma_fence(void) {}
GC_DEVICE void gc_wgmma_commit(void) {}
template <int N> GC_DEVICE void gc_wgmma_wait(void) {}
GC_DEVICE void gc_reg_touch(float &x) { (void)x; }
/* the prelude's encoding (start, LBO, SBO = 8 rows of sw bytes, mode) */
GC_DEVICE uint64_t gc_wgmma_desc(unsigned s, unsigned lbo, unsigned sw) {
  return (uint64_t)((s & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(8 * sw >> 4) << 32) |
         ((uint64_t)(sw == 128 ? 1 : 2) << 62);
}

/* mul.rn / fma.rn on pairs of f16 (bf16): each half exact in double, rounded once. */
template <int BF> GC_DEVICE uint32_t gc_fma2(uint32_t a, uint32_t b, uint32_t c) {
  return emu_pack(BF, emu_half(BF, a, 0) * emu_half(BF, b, 0) + emu_half(BF, c, 0),
                  emu_half(BF, a, 1) * emu_half(BF, b, 1) + emu_half(BF, c, 1));
}
template <int BF> GC_DEVICE uint32_t gc_mul2(uint32_t a, uint32_t b) {
  return emu_pack(BF, emu_half(BF, a, 0) * emu_half(BF, b, 0), emu_half(BF, a, 1) * emu_half(BF, b, 1));
}
GC_DEVICE uint32_t gc_dup2(uint32_t x, int h) { return h ? (x >> 16) * 0x00010001u : (x & 0xffffu) * 0x00010001u; }

/* ---- math and storage (as prelude_cuda.h) ------------------------------- */

#define GC_INF INFINITY
GC_DEVICE float gc_fma(float a, float b, float c) { return fmaf(a, b, c); }
GC_DEVICE float gc_max(float a, float b) { return fmaxf(a, b); }
GC_DEVICE float gc_exp(float x) { return expf(x); }
GC_DEVICE float gc_exp2(float x) { return exp2f(x); }
GC_DEVICE float gc_rsqrt(float x) { return 1.0f / sqrtf(x); }
GC_DEVICE float gc_sqrt(float x) { return sqrtf(x); }
GC_DEVICE void gc_sincos_f64(double x, double *s, double *c) { *s = sin(x), *c = cos(x); }
GC_DEVICE int64_t gc_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
GC_DEVICE int64_t gc_min64(int64_t a, int64_t b) { return a < b ? a : b; }
GC_DEVICE int64_t gc_max64(int64_t a, int64_t b) { return a > b ? a : b; }
GC_DEVICE uint32_t gc_f2u(float f) { return __float_as_uint(f); }
GC_DEVICE float gc_u2f(uint32_t u) { return __uint_as_float(u); }

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

GC_DEVICE float gc_ld(const float *p, int64_t i) { return p[i]; }
GC_DEVICE float gc_ld(const __half *p, int64_t i) { return (float)p[i]; }
GC_DEVICE float gc_ld(const __nv_bfloat16 *p, int64_t i) { return emu_bf16(p[i].bits); }
GC_DEVICE void gc_st(float *p, int64_t i, float v) { p[i] = v; }
GC_DEVICE void gc_st(__half *p, int64_t i, float v) { p[i] = (_Float16)v; }
GC_DEVICE void gc_st(__nv_bfloat16 *p, int64_t i, float v) { p[i].bits = emu_to_bf16(v); }
/* n elements widened / narrowed one by one (the prelude's 16-byte
 * vector forms round each element the same way) */
/* raw aligned chunks of 4, 8 and 16 bytes (gemv_q_gpu's staged copies) */
struct alignas(16) gc_raw16 {
  uint32_t w[4];
};
struct alignas(8) gc_raw8 {
  uint32_t w[2];
};
struct gc_raw4 {
  uint32_t w[1];
};
template <int BYTES> struct gc_raw_t;
template <> struct gc_raw_t<4> { typedef gc_raw4 T; };
template <> struct gc_raw_t<8> { typedef gc_raw8 T; };
template <> struct gc_raw_t<16> { typedef gc_raw16 T; };
#define LOADV_A(n, p, i, o) gc_ldv<n>((const TA *)(p) + (i), (o))
#define LOADV_B(n, p, i, o) gc_ldv<n>((const TB *)(p) + (i), (o))
#define LOADV_C(n, p, i, o) gc_ldv<n>((const TC *)(p) + (i), (o))
/* the alignment prelude_cuda.h's vector forms need: their access size
 * (N elements' bytes, at most 16); a misaligned one faults on the GPU */
template <int N, class T> GC_DEVICE void emu_vec_aligned(const T *p) {
  constexpr size_t BYTES = N * sizeof(T), A = BYTES < 16 ? BYTES : 16;
  if (BYTES > sizeof(T) && (uintptr_t)p % A) __atomic_add_fetch(&emu_errors, 1, __ATOMIC_RELAXED);
}
template <int N, class T> GC_DEVICE void gc_ldv(const T *p, float *out) {
  emu_vec_aligned<N>(p);
  for (int i = 0; i < N; i++) out[i] = gc_ld(p, i);
}
template <int N, class T> GC_DEVICE void gc_stv(T *p, const float *x) {
  emu_vec_aligned<N>(p);
  for (int i = 0; i < N; i++) gc_st(p, i, x[i]);
}
#define LOAD_A(p, i) gc_ld((const TA *)(p), (i))
#define LOAD_B(p, i) gc_ld((const TB *)(p), (i))
#define LOAD_C(p, i) gc_ld((const TC *)(p), (i))
#define STORE_C(p, i, v) gc_st((TC *)(p), (i), (v))
#define STOREV_C(n, p, i, x) gc_stv<n>((TC *)(p) + (i), (x))
#define STORE_GEMM(p, i, v) STORE_C(p, i, GC_OP_GEMM_ADD ? (v) + LOAD_C(p, i) : (v))

GC_DEVICE void gc_unpack2(__half, uint32_t w, float *o) { o[0] = (float)emu_half(0, w, 0), o[1] = (float)emu_half(0, w, 1); }
GC_DEVICE void gc_unpack2(__nv_bfloat16, uint32_t w, float *o) {
  o[0] = (float)emu_half(1, w, 0), o[1] = (float)emu_half(1, w, 1);
}
GC_DEVICE uint32_t gc_pack2(__half, float a, float b) { return emu_pack(0, a, b); }
GC_DEVICE uint32_t gc_pack2(__nv_bfloat16, float a, float b) { return emu_pack(1, a, b); }

/* The GPU preludes' shared blocks (prelude_common.h, extracted by the
 * test): the epilogue, the block formats on the vendor's two primitives,
 * and the GEMVs' prefetch and RoPE pieces. */
#include "epilogue.h"
GC_DEVICE float gc_h2f_bits(uint32_t h) { return (float)__builtin_bit_cast(_Float16, (uint16_t)h); }
GC_DEVICE float gc_ubyte_f(uint32_t w, int i) { return (float)((w >> (8 * i)) & 255u); }
GC_DEVICE float gc_ubyte_less_f(uint32_t w, int i, float b) { return gc_ubyte_f(w, i) - b; }
#include "quant.h"
#include "gemv.h"
#include "split.h"

#endif
