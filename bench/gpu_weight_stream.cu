/* gpu_weight_stream.cu — what the decode step's kernel boundaries cost the
 * weight stream, and what one persistent kernel would win back (issue 16's
 * lever "fewer, longer-lived kernels"), measured before anyone builds it.
 *
 * A Llama decode step's GEMVs (per layer QKV, O, gate/up, down; then the
 * LM head) run over the model's real weight shapes (fp16, random, far
 * larger than L2), with two GEMV engines:
 *   registers   warps stream rows with 16-byte loads, CH a lane in flight
 *               (gcore's gemv_gpu design);
 *   ring        a shared-memory ring filled by the bulk copy engine, one
 *               producer thread, RRS consumer warps (gcore's gemv_bulk);
 * each shaped as
 *   kernels     one launch per GEMV, chained in a CUDA graph with PDL: the
 *               next launch is released first thing, and before its wait a
 *               launch loads (registers) or streams (ring) weights only;
 *   persistent  one launch for the whole step, the same phases separated
 *               by a grid barrier (counters in global memory); before the
 *               barrier the registers engine loads its next row, the ring's
 *               producer streams on into the next phases;
 *   one stream  all the step's bytes as one GEMV (no boundary at all).
 * With attention T, a latency-bound phase of T us on 64 blocks (a spin on
 * %globaltimer: a decode attention reads almost nothing and waits on its
 * chain of loads, bench/RESULTS.md session 32) follows each QKV, as its own
 * launch or as the persistent kernel's work; the registers engine's
 * kernels also try the other blocks of that launch asking L2 for the next
 * 8, 16 or 32 MB of weights during it. Then 65 phases of almost no work
 * (a row of 256 columns a warp) give the cost of a dependency alone, and
 * block 0's phase starts (and, persistent, every block's phase ends) give
 * a timeline of one layer. Each GEMV's outputs are checked on the host
 * (rows 0, N/2 and N-1 of every phase in fp64, relative 1e-3): a shape
 * that skips work prints WRONG.
 *
 *   nvcc -O3 -arch=sm_90a -o build/gpu_weight_stream bench/gpu_weight_stream.cu && build/gpu_weight_stream [1b|8b] [ffn]
 *
 * With ffn, only this: the registers engine's kernels with the FFN as
 * gate/up then down (two launches, a whole-vector dependency between),
 * against one fused launch a layer (ffn_block: each block's share of the
 * hidden units through gate/up, SwiGLU and its slice of a transposed down,
 * summed into the output by fp32 vector atomics), and the fused launch
 * asking for its first down weights before its gate/up work; the fused
 * phases' outputs are checked in fp64 over every hidden unit.
 *
 * Prints us a step and the fraction of the bound (the weights' bytes at
 * the device-to-device copy bandwidth measured in the same run, as
 * bench/gpu_llama.py's bound). bench/RESULTS.md, session 37. */
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

#define THREADS 256
#define WARPS (THREADS / 32)
#define CH 8 /* 16-byte chunks a lane keeps in flight per batch of a row */

/* A phase of the step: a GEMV y[yoff ..] = W[off ..][N, K] · x, or (attn
 * > 0) a latency phase of attn us whose launch may ask L2 for the next pf
 * bytes of weights. */
struct Phase { long long off; int N, K; int attn; long long yoff; long long pf; int ffn; long long zoff; int zn; };
#define MAXP 512
__constant__ Phase c_ph[MAXP];
__constant__ int c_np;      /* the phases of the step (block 0 stamps the end of the last) */
__constant__ int c_l1;      /* the second layer's first phase (every block stamps its ends there) */
__constant__ int c_fastbar; /* 1: k_ring's barrier on 8 counters, release adds and acquire loads */
#define TB 264
__device__ unsigned long long g_t0[MAXP + 1]; /* block 0's time at each phase's start (after its wait), and at the end */
__device__ unsigned long long g_t1[8][TB];    /* persistent: each block's time at its end of the second layer's phases */
__device__ static inline unsigned long long now_ns() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

/* The value of weight element i and of x's element k (both on host and
 * device): a hash in [-1, 1). */
__host__ __device__ static inline float wval(long long i) {
  uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull;
  z ^= z >> 29; z *= 0xBF58476D1CE4E5B9ull; z ^= z >> 32;
  return (float)(z & 0xFFFF) / 32768.0f - 1.0f;
}
__host__ __device__ static inline float xval(int k) { return wval(-1 - (long long)k); }

__global__ void k_fill(__half *w, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    w[i] = __float2half(wval(i));
}

__device__ static inline uint4 ldg_stream(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ static inline float dot8(uint4 w, const __half *x) {
  const __half2 *wh = (const __half2 *)&w;
  const __half2 *xh = (const __half2 *)x;
  float s = 0;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float2 a = __half22float2(wh[i]), b = __half22float2(xh[i]);
    s += a.x * b.x + a.y * b.y;
  }
  return s;
}

/* One phase's rows for warp gw of nw: row r's K/8 chunks, CH per lane at a
 * time; `first` holds the lane's first batch of its first row, loaded
 * before the caller's wait. */
__device__ static void gemv_rows(const Phase &p, const __half *W, const __half *x, float *y, int gw, int nw,
                                 uint4 *first) {
  const int lane = threadIdx.x & 31, kc = p.K / 8;
  for (int r = gw; r < p.N; r += nw) {
    const uint4 *row = (const uint4 *)(W + p.off + (long long)r * p.K);
    float s = 0;
    for (int c0 = 0; c0 < kc; c0 += 32 * CH) {
      uint4 v[CH];
      if (r == gw && c0 == 0) {
#pragma unroll
        for (int j = 0; j < CH; j++) v[j] = first[j];
      } else {
#pragma unroll
        for (int j = 0; j < CH; j++) {
          const int c = c0 + j * 32 + lane;
          v[j] = c < kc ? ldg_stream(row + c) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int j = 0; j < CH; j++) {
        const int c = c0 + j * 32 + lane;
        if (c < kc) s += dot8(v[j], x + 8 * c);
      }
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[p.yoff + r] = s;
  }
}

__device__ static void load_first(const Phase &p, const __half *W, int gw, uint4 *first) {
  const int lane = threadIdx.x & 31, kc = p.K / 8;
#pragma unroll
  for (int j = 0; j < CH; j++) {
    const int c = j * 32 + lane;
    first[j] = (gw < p.N && c < kc) ? ldg_stream((const uint4 *)(W + p.off + (long long)gw * p.K) + c)
                                    : make_uint4(0, 0, 0, 0);
  }
}

__device__ static void spin_us(int us) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < (uint64_t)us * 1000);
}

/* Block b of nb asks L2 for its share of the n bytes at p, in bulk
 * prefetches of up to 16 KB, one a lane (the copy engine; no registers). */
__device__ static void prefetch_share(const void *p, long long n, int b, int nb) {
  const long long per = (n / nb + 15) / 16 * 16, o0 = b * per, o1 = o0 + per < n ? o0 + per : n;
  for (long long o = o0 + (threadIdx.x & 31) * 16384; o < o1; o += 32 * 16384) {
    const unsigned sz = (unsigned)(o1 - o < 16384 ? o1 - o : 16384) / 16 * 16;
    if (sz)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"((const char *)p + o), "r"(sz) : "memory");
  }
}

/* Lanes' dot of one row (kc 16-byte chunks) with x, CH chunks a lane at a
 * time; first (if given) is the lane's first batch, loaded earlier. The
 * sum on every lane. */
__device__ static float row_dot(const uint4 *row, int kc, const __half *x, const uint4 *first) {
  const int lane = threadIdx.x & 31;
  float s = 0;
  for (int c0 = 0; c0 < kc; c0 += 32 * CH) {
    uint4 v[CH];
#pragma unroll
    for (int j = 0; j < CH; j++) {
      const int c = c0 + j * 32 + lane;
      v[j] = (first && c0 == 0) ? first[j] : c < kc ? ldg_stream(row + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < CH; j++) {
      const int c = c0 + j * 32 + lane;
      if (c < kc) s += dot8(v[j], x + 8 * c);
    }
  }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

/* The fused FFN phase (p.ffn): p.N hidden units of p.K = d inputs; weights
 * at p.off: gate [N][K], up [N][K], then down stored transposed [N][K]
 * (hidden unit j's row: its d outputs' weights). Block b of nb takes the
 * hidden units [j0, j1), computes h = silu(gate·x) * (up·x) for them, then
 * adds h_j * downT[j] over its units into y[p.yoff ..][K] with fp32 vector
 * atomics (y zeroed by an earlier phase): no dependency between the
 * gate/up and the down GEMV, whose sum is split over the blocks. */
#define MAXU 128
__device__ static void ffn_block(const Phase &p, const __half *W, const __half *x, float *y) {
  __shared__ float gu[2 * MAXU];
  const int nb = gridDim.x, b = blockIdx.x, warp = threadIdx.x / 32, kc = p.K / 8;
  const int j0 = (int)((long long)p.N * b / nb), j1 = (int)((long long)p.N * (b + 1) / nb), nu = j1 - j0;
  auto rowp = [&](int r) {
    return (const uint4 *)(W + p.off + (r < nu ? (long long)(j0 + r) * p.K : (long long)(p.N + j0 + r - nu) * p.K));
  };
  uint4 first[CH];
  const int lane = threadIdx.x & 31;
  if (warp < 2 * nu) {
#pragma unroll
    for (int j = 0; j < CH; j++) first[j] = j * 32 + lane < kc ? ldg_stream(rowp(warp) + j * 32 + lane) : make_uint4(0, 0, 0, 0);
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const uint4 *dt = (const uint4 *)(W + p.off + 2LL * p.N * p.K + (long long)j0 * p.K);
  uint4 pre[CH]; /* p.ffn 2: the thread's first batch of down weights, asked for before the gate/up work */
  if (p.ffn == 2) {
#pragma unroll
    for (int j = 0; j < CH; j++) pre[j] = j < nu && threadIdx.x < kc ? ldg_stream(dt + (long long)j * kc + threadIdx.x) : make_uint4(0, 0, 0, 0);
  }
  for (int r = warp; r < 2 * nu; r += WARPS) {
    const float s = row_dot(rowp(r), kc, x, r == warp ? first : nullptr);
    if (lane == 0) gu[r] = s;
  }
  __syncthreads();
  if (threadIdx.x < nu) {
    const float g = gu[threadIdx.x];
    gu[threadIdx.x] = g / (1.0f + __expf(-g)) * gu[nu + threadIdx.x];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < kc; c += THREADS) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int u0 = 0; u0 < nu; u0 += CH) {
      uint4 v[CH];
#pragma unroll
      for (int j = 0; j < CH; j++)
        v[j] = p.ffn == 2 && u0 == 0 && c == threadIdx.x ? pre[j]
             : u0 + j < nu ? ldg_stream(dt + (long long)(u0 + j) * kc + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int j = 0; j < CH; j++) {
        if (u0 + j >= nu) break;
        const float h = gu[u0 + j];
        const __half2 *wh = (const __half2 *)&v[j];
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float2 w2 = __half22float2(wh[e]);
          acc[2 * e] += h * w2.x; acc[2 * e + 1] += h * w2.y;
        }
      }
    }
    float *o = y + p.yoff + 8 * c;
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(o), "f"(acc[0]), "f"(acc[1]), "f"(acc[2]), "f"(acc[3]) : "memory");
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(o + 4), "f"(acc[4]), "f"(acc[5]), "f"(acc[6]), "f"(acc[7]) : "memory");
  }
}

/* kernels: phase i as its own launch. */
__global__ void __launch_bounds__(THREADS) k_phase(int i, const __half *W, const __half *x, float *y) {
  const Phase p = c_ph[i];
  const int gw = blockIdx.x * WARPS + threadIdx.x / 32, nw = gridDim.x * WARPS;
  if (p.ffn) { ffn_block(p, W, x, y); return; }
  uint4 first[CH];
  if (!p.attn) load_first(p, W, gw, first);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int e = blockIdx.x * THREADS + threadIdx.x; e < p.zn; e += gridDim.x * THREADS) y[p.zoff + e] = 0; /* a later phase's sum */
  if (p.attn) {
    if (blockIdx.x < 64 && threadIdx.x == 0)
      spin_us(p.attn);
    else if (blockIdx.x >= 64 && p.pf > 0 && threadIdx.x < 32) /* the other SMs: the next weights into L2 */
      prefetch_share(W + c_ph[i + 1].off, p.pf, blockIdx.x - 64, gridDim.x - 64);
    return;
  }
  gemv_rows(p, W, x, y, gw, nw, first);
}

/* persistent: every phase, a grid barrier between (bar zeroed before the
 * launch; all blocks resident: the grid is the occupancy). */
__global__ void __launch_bounds__(THREADS) k_step(int np, const __half *W, const __half *x, float *y,
                                                   unsigned *bar) {
  const int gw = blockIdx.x * WARPS + threadIdx.x / 32, nw = gridDim.x * WARPS;
  uint4 first[CH];
  int loaded = -1;
  for (int i = 0; i < np; i++) {
    const Phase p = c_ph[i];
    if (p.attn) {
      if (blockIdx.x < 64 && threadIdx.x == 0) spin_us(p.attn);
    } else {
      if (loaded != i) load_first(p, W, gw, first);
      gemv_rows(p, W, x, y, gw, nw, first);
    }
    if (i + 1 < np) {
      int nx = i + 1; /* the next GEMV phase: its first loads go out before the barrier */
      if (c_ph[nx].attn && nx + 1 < np) nx++;
      if (!c_ph[nx].attn && loaded != nx) { load_first(c_ph[nx], W, gw, first); loaded = nx; }
      __syncthreads();
      if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(bar, 1u);
        const unsigned target = (unsigned)(i + 1) * gridDim.x;
        while (*(volatile unsigned *)bar < target) {}
        __threadfence();
      }
      __syncthreads();
    }
  }
}

struct Shape { const char *name; int layers, d, qkv, ff, vocab; };

static float time_graph(cudaGraphExec_t ge, cudaStream_t s) {
  for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  std::vector<float> t;
  for (int r = 0; r < 20; r++) {
    cudaEventRecord(e0, s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1); t.push_back(ms * 1000);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/* The step as np launches of k_phase (registers engine) at grid blocks,
 * chained with PDL in one graph: us a step (median of 20); y is zeroed
 * first, so the caller's check sees this run's outputs. */
static float chain_step(size_t np, int grid, const __half *W, const __half *x, float *y, long long ny,
                        cudaStream_t s) {
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (size_t i = 0; i < np; i++) {
    cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = THREADS; c.stream = s;
    cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1; c.attrs = a; c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, k_phase, (int)i, W, x, y));
  }
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaMemset(y, 0, ny * 4));
  const float t = time_graph(ge, s);
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return t;
}

static int check(const std::vector<Phase> &ph, const float *dy) {
  int bad = 0;
  int nffn = 0, lastffn = -1;
  for (size_t i = 0; i < ph.size(); i++) if (ph[i].ffn) lastffn = (int)i;
  for (size_t pi = 0; pi < ph.size(); pi++) {
    const Phase &p = ph[pi];
    if (p.attn) continue;
    if (p.ffn) { /* the first and the last: h in fp64 over every hidden unit, then rows of down */
      if (nffn++ && (int)pi != lastffn) continue;
      std::vector<double> h(p.N);
      for (int j = 0; j < p.N; j++) {
        double g = 0, u = 0;
        for (int k = 0; k < p.K; k++) {
          const double xv = __half2float(__float2half(xval(k)));
          g += __half2float(__float2half(wval(p.off + (long long)j * p.K + k))) * xv;
          u += __half2float(__float2half(wval(p.off + (long long)(p.N + j) * p.K + k))) * xv;
        }
        h[j] = g / (1 + exp(-g)) * u;
      }
      const int rows[3] = {0, p.K / 2, p.K - 1};
      for (int r : rows) {
        double ref = 0, mag = 0;
        for (int j = 0; j < p.N; j++) {
          const double t = h[j] * __half2float(__float2half(wval(p.off + 2LL * p.N * p.K + (long long)j * p.K + r)));
          ref += t; mag += fabs(t);
        }
        float got; CK(cudaMemcpy(&got, dy + p.yoff + r, 4, cudaMemcpyDeviceToHost));
        if (!(fabs(got - ref) <= 1e-3 * mag + 1e-3)) {
          if (bad++ < 3) printf("  WRONG: fused FFN N=%d K=%d row %d: %g, expected %g\n", p.N, p.K, r, got, ref);
        }
      }
      continue;
    }
    const int rows[3] = {0, p.N / 2, p.N - 1};
    for (int r : rows) {
      double ref = 0, mag = 0;
      for (int k = 0; k < p.K; k++) {
        const double w = __half2float(__float2half(wval(p.off + (long long)r * p.K + k)));
        const double xv = __half2float(__float2half(xval(k)));
        ref += w * xv; mag += fabs(w * xv);
      }
      float got; CK(cudaMemcpy(&got, dy + p.yoff + r, 4, cudaMemcpyDeviceToHost));
      if (!(fabs(got - ref) <= 1e-3 * mag + 1e-3)) {
        if (bad++ < 3) printf("  WRONG: phase N=%d K=%d row %d: %g, expected %g\n", p.N, p.K, r, got, ref);
      }
    }
  }
  return bad;
}

/* The same GEMVs through a shared-memory ring filled by the bulk copy
 * engine (gcore's gemv_bulk design): warp RRS's lane 0 streams every row
 * segment of phases p0 .. p1-1 (RRS rows x RKC columns a stage) and never
 * waits for an activation; consumer warp w takes row w of each stage. One
 * phase per launch (p1 = p0 + 1; PDL: the consumers wait, the producer
 * does not), or every phase in one launch with a grid barrier before each
 * phase's consumers start: then the producer fills the ring with the next
 * phase's rows while the consumers wait (up to STAGES * 32 KB a block). */
#define RRS 8
#define RKC 2048
__device__ static inline void mb_init(unsigned b, unsigned n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(n) : "memory"); }
__device__ static inline void mb_arrive(unsigned b) { asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(b) : "memory"); }
__device__ static inline void mb_expect(unsigned b, unsigned n) { asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(b), "r"(n) : "memory"); }
__device__ static inline void mb_wait(unsigned b, unsigned par) {
  unsigned ok;
  do asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                  : "=r"(ok) : "r"(b), "r"(par) : "memory");
  while (!ok);
}
__device__ static inline void bulk(unsigned d, const void *g, unsigned n, unsigned b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(d), "l"(g), "r"(n), "r"(b) : "memory");
}

template <int STAGES>
__global__ void __launch_bounds__((RRS + 1) * 32, 1)
k_ring(int p0, int p1, const __half *W, const __half *x, float *y, unsigned *bar) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
  const unsigned ring = (unsigned)__cvta_generic_to_shared(sm), SB = RRS * RKC * 2;
  const unsigned fb = (unsigned)__cvta_generic_to_shared(full), eb = (unsigned)__cvta_generic_to_shared(empty);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) { mb_init(fb + 8 * s, 1); mb_init(eb + 8 * s, RRS); }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == RRS) { /* the producer */
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (lane) return;
    long long it = 0;
    for (int p = p0; p < p1; p++) {
      const Phase ph = c_ph[p];
      if (ph.attn) continue;
      const int ng = (ph.N + RRS - 1) / RRS, nk = (ph.K + RKC - 1) / RKC;
      for (int g = blockIdx.x; g < ng; g += gridDim.x)
        for (int kc = 0; kc < nk; kc++, it++) {
          const int s = (int)(it % STAGES);
          if (it >= STAGES) mb_wait(eb + 8 * s, (unsigned)((it / STAGES - 1) & 1));
          const int units = min(RRS, ph.N - g * RRS);
          const unsigned cb = (unsigned)min(RKC, ph.K - kc * RKC) * 2;
          mb_expect(fb + 8 * s, units * cb);
          for (int w = 0; w < units; w++)
            bulk(ring + s * SB + w * RKC * 2, W + ph.off + (long long)(g * RRS + w) * ph.K + kc * RKC, cb, fb + 8 * s);
        }
    }
    return;
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  long long it = 0;
  for (int p = p0; p < p1; p++) {
    const Phase ph = c_ph[p];
    if (p > p0) { /* every block is through phase p-1 */
      if (threadIdx.x == 0) {
        const unsigned target = (unsigned)(p - p0) * gridDim.x;
        if (c_fastbar) { /* 8 counters (128 bytes apart) read at once, with acquire */
          unsigned sum;
          do {
            sum = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) {
              unsigned v;
              asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar + 32 * j) : "memory");
              sum += v;
            }
          } while (sum < target);
        } else {
          while (*(volatile unsigned *)bar < target) {}
          __threadfence();
        }
      }
      asm volatile("bar.sync 1, %0;" ::"r"(RRS * 32) : "memory");
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) g_t0[p] = now_ns();
    if (ph.attn) {
      if (blockIdx.x < 64 && threadIdx.x == 0) spin_us(ph.attn);
    } else {
      const int ng = (ph.N + RRS - 1) / RRS, nk = (ph.K + RKC - 1) / RKC;
      for (int g = blockIdx.x; g < ng; g += gridDim.x) {
        float acc = 0;
        const int r = g * RRS + warp;
        for (int kc = 0; kc < nk; kc++, it++) {
          const int s = (int)(it % STAGES);
          mb_wait(fb + 8 * s, (unsigned)((it / STAGES) & 1));
          if (r < ph.N) {
            const int nc = min(RKC, ph.K - kc * RKC) / 8;
            const uint4 *seg = (const uint4 *)(sm + s * SB + warp * RKC * 2);
            for (int c = lane; c < nc; c += 32) acc += dot8(seg[c], x + kc * RKC + 8 * c);
          }
          __syncwarp();
          if (lane == 0) mb_arrive(eb + 8 * s);
        }
        for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lane == 0 && r < ph.N) y[ph.yoff + r] = acc;
      }
    }
    if (p + 1 == (int)c_np && blockIdx.x == 0) { /* the last phase: block 0's end (its warps met) */
      asm volatile("bar.sync 1, %0;" ::"r"(RRS * 32) : "memory");
      if (threadIdx.x == 0) g_t0[p + 1] = now_ns();
    }
    if (p + 1 < p1) { /* this block is through phase p */
      asm volatile("bar.sync 1, %0;" ::"r"(RRS * 32) : "memory");
      if (p >= c_l1 && p < c_l1 + 8 && threadIdx.x == 0 && blockIdx.x < TB) g_t1[p - c_l1][blockIdx.x] = now_ns();
      if (threadIdx.x == 0) {
        if (c_fastbar) /* a release add, no value returned, on the block's counter of 8 */
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar + 32 * (blockIdx.x % 8)) : "memory");
        else {
          __threadfence();
          atomicAdd(bar, 1u);
        }
      }
    }
  }
}

/* The step through k_ring<ST> at bps blocks an SM: one launch a phase with
 * PDL (persistent 0) or one launch (1); us a step (median of 20), and
 * whether the outputs check. */
template <int ST>
static float ring_step(const std::vector<Phase> &ph, int sms, int bps, int persistent, const __half *W, const __half *x,
                       float *y, long long ny, unsigned *bar, cudaStream_t s, int *bad) {
  const int smem = ST * RRS * RKC * 2;
  CK(cudaFuncSetAttribute(k_ring<ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaLaunchConfig_t c = {}; c.gridDim = sms * bps; c.blockDim = (RRS + 1) * 32; c.dynamicSmemBytes = smem; c.stream = s;
  cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a[0].val.programmaticStreamSerializationAllowed = 1; c.attrs = a; c.numAttrs = 1;
  if (persistent) {
    CK(cudaMemsetAsync(bar, 0, 8 * 32 * 4, s));
    c.numAttrs = 0;
    CK(cudaLaunchKernelEx(&c, k_ring<ST>, 0, (int)ph.size(), W, x, y, bar));
  } else {
    for (size_t i = 0; i < ph.size(); i++) CK(cudaLaunchKernelEx(&c, k_ring<ST>, (int)i, (int)i + 1, W, x, y, bar));
  }
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaMemset(y, 0, ny * 4));
  const float t = time_graph(ge, s);
  *bad = check(ph, y);
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return t;
}

/* Block 0's phase starts of the last replay: us per phase kind (the
 * phases repeat with period `per` after the first; the last is the LM
 * head), averaged over the layers. */
static void timeline(const std::vector<Phase> &ph, int per, const char *what, double gbs, int blocks) {
  std::vector<unsigned long long> t(ph.size() + 1);
  CK(cudaMemcpyFromSymbol(t.data(), g_t0, t.size() * 8));
  printf("  %s, us a phase (block 0's starts; bytes at %.0f GB/s in brackets):", what, gbs);
  const int layers = (int)(ph.size() - 1) / per;
  for (int k = 0; k < per; k++) {
    double sum = 0, by = 0;
    for (int l = 0; l < layers; l++) {
      const int i = l * per + k;
      sum += (t[i + 1] - t[i]) / 1e3;
      by += 2.0 * ph[i].N * ph[i].K / (gbs * 1e3);
    }
    printf(" %.2f [%.2f]", sum / layers, by / layers);
  }
  const size_t i = ph.size() - 1;
  printf("; LM head %.1f [%.1f]\n", (t[i + 1] - t[i]) / 1e3, 2.0 * ph[i].N * ph[i].K / (gbs * 1e3));
  if (!blocks) return;
  std::vector<unsigned long long> e(8 * TB);
  CK(cudaMemcpyFromSymbol(e.data(), g_t1, e.size() * 8));
  printf("    the second layer's phases, each block's end after block 0's start, us min / median / max:");
  for (int k = 0; k < per; k++) {
    std::vector<double> d;
    for (int b = 0; b < 132 && b < TB; b++) d.push_back(((long long)(e[k * TB + b] - t[per + k])) / 1e3);
    std::sort(d.begin(), d.end());
    printf(" %.1f/%.1f/%.1f", d[0], d[d.size() / 2], d.back());
  }
  printf("\n");
}

int main(int argc, char **argv) {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  int occ; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_step, THREADS, 0));
  const Shape shapes[] = {{"1b", 16, 2048, 3072, 8192, 128256}, {"8b", 32, 4096, 6144, 14336, 128256}};
  const int attns[] = {0, 7};
  const int pfs[] = {8, 16, 32}; /* MB asked of L2 during the attention (kernels only) */
  printf("%s, %d SMs, %d blocks of %d threads per SM resident\n", prop.name, sms, occ, THREADS);

  /* copy bandwidth (read + write), as bench/gpu_llama.py measures it */
  const size_t cb = 2ull << 30;
  void *ca, *cbuf; CK(cudaMalloc(&ca, cb)); CK(cudaMalloc(&cbuf, cb));
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float best = 1e30f;
  for (int r = 0; r < 10; r++) {
    cudaEventRecord(e0, s); CK(cudaMemcpyAsync(cbuf, ca, cb, cudaMemcpyDeviceToDevice, s)); cudaEventRecord(e1, s);
    CK(cudaEventSynchronize(e1)); float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best) best = ms;
  }
  const double copy_gbs = 2.0 * cb / (best * 1e-3) / 1e9;
  printf("copy bandwidth %.0f GB/s (read + write)\n", copy_gbs);
  CK(cudaFree(ca)); CK(cudaFree(cbuf));

  for (const Shape &sh : shapes) {
    if (argc > 1 && strcmp(argv[1], sh.name)) continue;
    std::vector<Phase> base; long long off = 0, yoff = 0;
    auto add = [&](int N, int K) { base.push_back({off, N, K, 0, yoff, 0}); off += (long long)N * K; yoff += N; };
    for (int l = 0; l < sh.layers; l++) { add(sh.qkv, sh.d); add(sh.d, sh.d); add(2 * sh.ff, sh.d); add(sh.d, sh.ff); }
    add(sh.vocab, sh.d);
    const long long nw = off, ny = yoff;
    __half *W; float *y; __half *x; unsigned *bar;
    CK(cudaMalloc(&W, nw * 2)); CK(cudaMalloc(&y, ny * 4)); CK(cudaMalloc(&x, 32768 * 2)); CK(cudaMalloc(&bar, 8 * 32 * 4));
    k_fill<<<4 * sms, 256>>>(W, nw);
    std::vector<__half> hx(32768); for (int k = 0; k < 32768; k++) hx[k] = __float2half(xval(k));
    CK(cudaMemcpy(x, hx.data(), 32768 * 2, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    const double bound_us = 2.0 * nw / (copy_gbs * 1e9) * 1e6; /* the weights' bytes at the copy bandwidth, as bench/gpu_llama.py's bound */
    printf("\n%s: %.2f GB of weights, %zu GEMVs; bound %.1f us a step at copy bandwidth\n", sh.name, nw * 2 / 1e9,
           base.size(), bound_us);
    if (argc > 2 && !strcmp(argv[2], "ffn")) { /* the fused FFN against gate/up then down, as PDL-chained kernels */
      for (int att : attns) {
        std::vector<Phase> ph, fu;
        for (size_t i = 0; i < base.size(); i++) {
          ph.push_back(base[i]);
          if (i % 4 == 2) { /* gate/up (N = 2 ff) then down: one phase over the same bytes, down transposed */
            Phase f = base[i]; f.N = sh.ff; f.ffn = 1; f.yoff = base[i + 1].yoff;
            fu.back().zoff = f.yoff; fu.back().zn = sh.d; /* O zeroes the sum */
            fu.push_back(f);
          } else if (i % 4 != 3) fu.push_back(base[i]);
          if (att && i % 4 == 0 && i + 1 < base.size()) {
            ph.push_back({0, 0, 0, att, 0, 0});
            fu.push_back({0, 0, 0, att, 0, 0});
          }
        }
        for (int bps = 1; bps <= occ && sh.ff / (sms * bps) < MAXU; bps *= 2) {
          CK(cudaMemcpyToSymbol(c_ph, ph.data(), ph.size() * sizeof(Phase)));
          const float tk = chain_step(ph.size(), sms * bps, W, x, y, ny, s);
          const int bk = check(ph, y);
          CK(cudaMemcpyToSymbol(c_ph, fu.data(), fu.size() * sizeof(Phase)));
          const float tf = chain_step(fu.size(), sms * bps, W, x, y, ny, s);
          const int bf = check(fu, y);
          for (Phase &e : fu) if (e.ffn) e.ffn = 2;
          CK(cudaMemcpyToSymbol(c_ph, fu.data(), fu.size() * sizeof(Phase)));
          const float t2 = chain_step(fu.size(), sms * bps, W, x, y, ny, s);
          const int b2 = check(fu, y);
          for (Phase &e : fu) if (e.ffn) e.ffn = 1;
          printf("attention %d us, %d block(s) an SM, registers kernels: gate/up then down %.1f us (%.1f%%)%s; "
                 "fused FFN %.1f us (%.1f%%)%s; fused, down's first loads early %.1f us (%.1f%%)%s\n", att, bps, tk,
                 100 * bound_us / tk, bk ? " WRONG" : "", tf, 100 * bound_us / tf, bf ? " WRONG" : "", t2,
                 100 * bound_us / t2, b2 ? " WRONG" : "");
        }
      }
      CK(cudaFree(W)); CK(cudaFree(y)); CK(cudaFree(x)); CK(cudaFree(bar));
      continue;
    }
    for (int att : attns) {
      std::vector<Phase> ph;
      for (size_t i = 0; i < base.size(); i++) {
        ph.push_back(base[i]);
        if (att && i % 4 == 0 && i + 1 < base.size()) ph.push_back({0, 0, 0, att, 0, 0}); /* after each QKV */
      }
      if (ph.size() > MAXP) { printf("too many phases\n"); return 1; }
      CK(cudaMemcpyToSymbol(c_ph, ph.data(), ph.size() * sizeof(Phase)));
      for (int bps = 1; bps <= occ; bps *= 2) {
        const int grid = sms * bps;
        /* kernels */
        cudaGraph_t g; cudaGraphExec_t ge;
        const float tk = chain_step(ph.size(), grid, W, x, y, ny, s);
        const int bk = check(ph, y);
        /* persistent */
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        CK(cudaMemsetAsync(bar, 0, 4, s));
        k_step<<<grid, THREADS, 0, s>>>((int)ph.size(), W, x, y, bar);
        CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaMemset(y, 0, ny * 4));
        const float tp = time_graph(ge, s);
        const int bp = check(ph, y);
        cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
        printf("attention %d us, %d block(s) an SM: kernels %.1f us (%.1f%% of bound)%s, persistent %.1f us (%.1f%%)%s\n",
               att, bps, tk, 100 * bound_us / tk, bk ? " WRONG" : "", tp, 100 * bound_us / tp, bp ? " WRONG" : "");
        for (int pfm : pfs) {
          if (!att) break;
          std::vector<Phase> q = ph;
          for (Phase &e : q) if (e.attn) e.pf = (long long)pfm << 20;
          CK(cudaMemcpyToSymbol(c_ph, q.data(), q.size() * sizeof(Phase)));
          const float tq = chain_step(q.size(), grid, W, x, y, ny, s);
          printf("  and %d MB of the next weights asked of L2 during it: kernels %.1f us (%.1f%%)%s\n", pfm, tq,
                 100 * bound_us / tq, check(q, y) ? " WRONG" : "");
        }
        CK(cudaMemcpyToSymbol(c_ph, ph.data(), ph.size() * sizeof(Phase)));
      }
    }
    for (int att : attns) { /* the bulk-copy ring, kernels and persistent */
      std::vector<Phase> ph;
      for (size_t i = 0; i < base.size(); i++) {
        ph.push_back(base[i]);
        if (att && i % 4 == 0 && i + 1 < base.size()) ph.push_back({0, 0, 0, att, 0, 0});
      }
      CK(cudaMemcpyToSymbol(c_ph, ph.data(), ph.size() * sizeof(Phase)));
      const int np = (int)ph.size(), per = att ? 5 : 4;
      CK(cudaMemcpyToSymbol(c_np, &np, sizeof np));
      CK(cudaMemcpyToSymbol(c_l1, &per, sizeof per));
      const double gbs = copy_gbs;
      int b0;
      ring_step<6>(ph, sms, 1, 1, W, x, y, ny, bar, s, &b0);
      timeline(ph, per, "persistent 192 KB", gbs, 1);
      ring_step<3>(ph, sms, 2, 0, W, x, y, ny, bar, s, &b0);
      timeline(ph, per, "kernels 96 KB x 2", gbs, 0);
      for (int fb = 1; fb >= 0; fb--) { /* the barrier on 8 counters, then back to one */
        CK(cudaMemcpyToSymbol(c_fastbar, &fb, sizeof fb));
        if (!fb) break;
        ring_step<6>(ph, sms, 1, 1, W, x, y, ny, bar, s, &b0);
        timeline(ph, per, "persistent 192 KB, 8-counter barrier", gbs, 1);
        int e1, e2;
        const float f6 = ring_step<6>(ph, sms, 1, 1, W, x, y, ny, bar, s, &e1);
        const float f3 = ring_step<3>(ph, sms, 2, 1, W, x, y, ny, bar, s, &e2);
        printf("ring, attention %d us, persistent with the 8-counter barrier: 192 KB x 1 %.1f us (%.1f%%)%s, 96 KB x 2 %.1f us (%.1f%%)%s\n",
               att, f6, 100 * bound_us / f6, e1 ? " WRONG" : "", f3, 100 * bound_us / f3, e2 ? " WRONG" : "");
      }
      int b1, b2, b3, b4;
      const float k6 = ring_step<6>(ph, sms, 1, 0, W, x, y, ny, bar, s, &b1);
      const float p6 = ring_step<6>(ph, sms, 1, 1, W, x, y, ny, bar, s, &b2);
      const float k3 = ring_step<3>(ph, sms, 2, 0, W, x, y, ny, bar, s, &b3);
      const float p3 = ring_step<3>(ph, sms, 2, 1, W, x, y, ny, bar, s, &b4);
      printf("ring, attention %d us: 192 KB x 1 an SM: kernels %.1f us (%.1f%%)%s, persistent %.1f us (%.1f%%)%s; "
             "96 KB x 2: kernels %.1f (%.1f%%)%s, persistent %.1f (%.1f%%)%s\n",
             att, k6, 100 * bound_us / k6, b1 ? " WRONG" : "", p6, 100 * bound_us / p6, b2 ? " WRONG" : "", k3,
             100 * bound_us / k3, b3 ? " WRONG" : "", p3, 100 * bound_us / p3, b4 ? " WRONG" : "");
    }
    { /* the ring over every byte as one phase (K = d), and 64 barriers with almost nothing between */
      std::vector<Phase> one = {{0, (int)(nw / sh.d), sh.d, 0, 0, 0}}, tiny;
      float *y1; CK(cudaMalloc(&y1, (nw / sh.d) * 4));
      CK(cudaMemcpyToSymbol(c_ph, one.data(), sizeof(Phase)));
      int b1, b2, b3;
      const float r6 = ring_step<6>(one, sms, 1, 0, W, x, y1, nw / sh.d, bar, s, &b1);
      const float r3 = ring_step<3>(one, sms, 2, 0, W, x, y1, nw / sh.d, bar, s, &b2);
      for (int i = 0; i < 65; i++) tiny.push_back({(long long)i * sms * 2 * RRS * 256, sms * 2 * RRS, 256, 0, (long long)i * sms * 2 * RRS, 0});
      CK(cudaMemcpyToSymbol(c_ph, tiny.data(), tiny.size() * sizeof(Phase)));
      const float tk = ring_step<3>(tiny, sms, 2, 0, W, x, y1, 65 * sms * 2 * RRS, bar, s, &b3);
      int b4; const float tp = ring_step<3>(tiny, sms, 2, 1, W, x, y1, 65 * sms * 2 * RRS, bar, s, &b4);
      int fb = 1, b5; CK(cudaMemcpyToSymbol(c_fastbar, &fb, sizeof fb));
      const float tf = ring_step<3>(tiny, sms, 2, 1, W, x, y1, 65 * sms * 2 * RRS, bar, s, &b5);
      fb = 0; CK(cudaMemcpyToSymbol(c_fastbar, &fb, sizeof fb));
      printf("65 tiny phases, persistent with the 8-counter barrier: %.2f us a phase%s\n", tf / 65, b5 ? " WRONG" : "");
      printf("ring, one stream: 192 KB x 1 an SM %.1f us (%.1f%%)%s, 96 KB x 2 %.1f us (%.1f%%)%s; 65 phases of one row a warp: "
             "%.2f us a phase as kernels%s, %.2f us persistent%s\n",
             r6, 100 * bound_us / r6, b1 ? " WRONG" : "", r3, 100 * bound_us / r3, b2 ? " WRONG" : "", tk / 65,
             b3 ? " WRONG" : "", tp / 65, b4 ? " WRONG" : "");
      CK(cudaFree(y1));
    }
    /* one stream: every byte as one GEMV of K = d (the LM head's shape), one launch */
    std::vector<Phase> one = {{0, (int)(nw / sh.d), sh.d, 0, 0, 0}};
    CK(cudaMemcpyToSymbol(c_ph, one.data(), sizeof(Phase)));
    float *y1; CK(cudaMalloc(&y1, (nw / sh.d) * 4));
    for (int bps = 1; bps <= occ; bps *= 2) {
      cudaGraph_t g; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      k_phase<<<sms * bps, THREADS, 0, s>>>(0, W, x, y1);
      CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
      const float t1 = time_graph(ge, s);
      printf("one stream, %d block(s) an SM: %.1f us (%.1f%% of bound)%s\n", bps, t1, 100 * bound_us / t1,
             check(one, y1) ? " WRONG" : "");
      cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    }
    CK(cudaFree(y1)); CK(cudaFree(W)); CK(cudaFree(y)); CK(cudaFree(x)); CK(cudaFree(bar));
  }
  return 0;
}
