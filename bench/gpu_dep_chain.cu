/* gpu_dep_chain.cu — what a whole-vector dependency between two decode
 * phases costs when the data itself says it is ready, against the grid
 * carrying it (issue 16's 1B: five such dependencies a layer at about 2.3
 * us each, bench/RESULTS.md sessions 37–48), measured before anyone builds
 * it.
 *
 * Every vector between phases is stored as 8-byte entries {value (fp32
 * bits), epoch}: one 8-byte store, one 8-byte load (NCCL's LL protocol;
 * an aligned 8-byte access is one transaction, so a reader that sees the
 * epoch sees the value with it). The epoch is unique per run and per
 * vector, so a stale entry never passes. Two ways of waiting for the input:
 *   grid   PDL-chained launches, griddepcontrol.wait (the primary grid has
 *          exited and its memory is visible), then the entries read once
 *          (a wrong epoch there counts as WRONG);
 *   ll     the same launches without the wait: each thread polls its
 *          entries until every epoch is this run's (optionally sleeping
 *          NS ns between polls).
 * Both read and write the same bytes; only the wait differs.
 *
 * Phases (256 threads a block, G blocks, every one a launch in one graph):
 *   tiny   n inputs -> n outputs: each block reads all n (the rms), writes
 *          its share of x / rms(x): the dependency alone;
 *   gemv   rmsnorm of the K inputs into shared memory (fp32), then warp
 *          rows y_r = W[r] . x over fp16 weights (first batch of each
 *          warp's first row in registers before the wait, as gcore's
 *          gemv_gpu);
 *   gu     the same with rows j and N + j a warp and h_j = silu(g) * u
 *          written (gate/up with SwiGLU in its epilogue);
 *   attn   blocks 0..63 each wait for their d/64 entries of the QKV output,
 *          spin T us on %globaltimer (a decode attention is a chain of
 *          latencies, session 32) and pass the entries through.
 * The 1B and 8B decode steps: per layer QKV, attention, O, gate/up, down,
 * then the LM head, over the real fp16 weight shapes (random, far larger
 * than L2). Checks after the timed runs: every entry of every vector
 * carries the last run's epoch, and rows 0, N/2, N-1 of every phase equal
 * fp64 on the host from the GPU's own input vector (relative 1e-3 of the
 * sum of |terms|). A shape that skips work prints WRONG.
 *
 *   nvcc -O3 -arch=sm_90a -o build/gpu_dep_chain bench/gpu_dep_chain.cu && build/gpu_dep_chain [1b|8b|tiny]
 *
 * Prints us a step (median of 20 graph replays) and the fraction of the
 * bound (the weights' bytes at the device-to-device copy bandwidth of the
 * same run, as bench/gpu_llama.py); tiny prints us a dependency. */
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

#define THREADS 256
#define WARPS (THREADS / 32)
#define CH 8          /* 16-byte weight chunks a lane keeps in flight */
#define MAXK 8192     /* the widest input a phase normalises into shared memory */
#define EPOCHS 4096   /* vectors a run (epoch = run * EPOCHS + vector + 1) */

enum { TINY, GEMV, GU, ATTN };
/* A phase: reads vector `in` (nin entries), writes vector in + 1 (nout
 * entries); GEMV/GU: weights at woff, [N][K] (GU: [2N][K], gate then up). */
struct Phase { int kind, nin, nout; long long woff; int in, attn_us; };
#define MAXP 512
__constant__ Phase c_ph[MAXP];
__constant__ long long c_voff[MAXP + 1]; /* vector v's first entry */
__device__ unsigned g_run;               /* bumped by the embedding kernel, read by every phase */

__host__ __device__ static inline float wval(long long i) {
  uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull;
  z ^= z >> 29; z *= 0xBF58476D1CE4E5B9ull; z ^= z >> 32;
  return (float)(z & 0xFFFF) / 32768.0f - 1.0f;
}

__global__ void k_fill(__half *w, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    w[i] = __float2half(wval(i));
}

__device__ static inline uint2 ld_entry(const uint2 *p) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p) : "memory");
  return v;
}
__device__ static inline void st_entry(uint2 *p, float v, unsigned e) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(p), "r"(__float_as_uint(v)), "r"(e) : "memory");
}
__device__ static inline uint4 ldg_stream(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ static inline unsigned cur_run() { return *(volatile unsigned *)&g_run; }

/* Entries [k0, k1) of vector v with stride THREADS from threadIdx.x into
 * f[], 8 loads in flight; ll: poll each until its epoch is e (sleeping ns
 * between polls); else read once and count wrong epochs into *bad. */
__device__ static void read_entries(const uint2 *v, int k1, unsigned e, int ll, int ns, float *f, int *bad) {
  for (int k0 = threadIdx.x; k0 < k1; k0 += THREADS * 8) {
    uint2 a[8];
#pragma unroll
    for (int j = 0; j < 8; j++) { const int k = k0 + j * THREADS; a[j] = k < k1 ? ld_entry(v + k) : make_uint2(0, e); }
#pragma unroll
    for (int j = 0; j < 8; j++) {
      const int k = k0 + j * THREADS;
      if (ll) while (a[j].y != e) { if (ns) __nanosleep(ns); a[j] = ld_entry(v + k); }
      else if (a[j].y != e) *bad = 1;
      if (k < k1) f[k] = __uint_as_float(a[j].x);
    }
  }
}

__device__ static float block_sum(float s, float *red) {
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  float t = 0;
  for (int w = 0; w < WARPS; w++) t += red[w];
  __syncthreads();
  return t;
}

__device__ static float dot_row(const uint4 *row, int kc, const float *x, const uint4 *first) {
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
      if (c < kc) {
        const __half2 *wh = (const __half2 *)&v[j];
        const float4 x0 = *(const float4 *)(x + 8 * c), x1 = *(const float4 *)(x + 8 * c + 4);
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const float2 a = __half22float2(wh[i]);
          s += a.x * xv[2 * i] + a.y * xv[2 * i + 1];
        }
      }
    }
  }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

/* The embedding: a new run, vector 0 = fixed values with its epoch. */
__global__ void k_embed(uint2 *vec, int n) {
  __shared__ unsigned r;
  if (threadIdx.x == 0) r = atomicAdd(&g_run, 1u) + 1;
  __syncthreads();
  for (int k = threadIdx.x; k < n; k += blockDim.x) st_entry(vec + k, wval(-1 - (long long)k), r * EPOCHS + 1);
}

/* Phase i; ll/ns as read_entries; bad: set where a grid wait saw a stale entry. */
__global__ void __launch_bounds__(THREADS) k_phase(int i, const __half *W, uint2 *vec, int ll, int ns, int *bad) {
  __shared__ __align__(16) float f[MAXK]; /* the input, then x / rms(x) */
  __shared__ float red[WARPS];
  const Phase p = c_ph[i];
  const int warp = threadIdx.x / 32, gw = blockIdx.x * WARPS + warp, nw = gridDim.x * WARPS;
  const int rows = p.kind == GU ? 2 : 1, kc = p.nin / 8;
  uint4 first[CH];
  if (p.kind == GEMV || p.kind == GU) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < CH; j++)
      first[j] = gw < p.nout && j * 32 + lane < kc
                     ? ldg_stream((const uint4 *)(W + p.woff + (long long)gw * p.nin) + j * 32 + lane)
                     : make_uint4(0, 0, 0, 0);
  }
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (!ll) asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned run = cur_run(), ein = run * EPOCHS + p.in + 1, eout = ein + 1;
  const uint2 *in = vec + c_voff[p.in];
  uint2 *out = vec + c_voff[p.in + 1];
  int mybad = 0;
  if (p.kind == ATTN) { /* 64 blocks, nout / 64 entries each */
    const int per = p.nout / 64;
    if (blockIdx.x >= 64) return;
    const int k = blockIdx.x * per + threadIdx.x;
    float v = 0;
    if (threadIdx.x < per) {
      uint2 a = ld_entry(in + k);
      if (ll) while (a.y != ein) { if (ns) __nanosleep(ns); a = ld_entry(in + k); }
      else if (a.y != ein) mybad = 1;
      v = __uint_as_float(a.x);
    }
    if (threadIdx.x == 0) {
      uint64_t t0, t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
      do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < (uint64_t)p.attn_us * 1000);
    }
    __syncthreads();
    if (threadIdx.x < per) st_entry(out + k, v, eout);
    if (mybad) atomicOr(bad, 1);
    return;
  }
  read_entries(in, p.nin, ein, ll, ns, f, &mybad);
  __syncthreads();
  float ss = 0;
  for (int k = threadIdx.x; k < p.nin; k += THREADS) ss += f[k] * f[k];
  const float inv = rsqrtf(block_sum(ss, red) / p.nin + 1e-6f);
  for (int k = threadIdx.x; k < p.nin; k += THREADS) f[k] *= inv;
  __syncthreads();
  if (p.kind == TINY) {
    const int j0 = (int)((long long)p.nout * blockIdx.x / gridDim.x), j1 = (int)((long long)p.nout * (blockIdx.x + 1) / gridDim.x);
    for (int j = j0 + threadIdx.x; j < j1; j += THREADS) st_entry(out + j, f[j], eout);
  } else {
    for (int r = gw; r < p.nout; r += nw) {
      const uint4 *row = (const uint4 *)(W + p.woff + (long long)r * p.nin);
      const float g = dot_row(row, kc, f, r == gw ? first : nullptr);
      float y = g;
      if (rows == 2) {
        const float u = dot_row(row + (long long)p.nout * kc, kc, f, nullptr);
        y = g / (1.0f + __expf(-g)) * u;
      }
      if ((threadIdx.x & 31) == 0) st_entry(out + r, y, eout);
    }
  }
  if (mybad) atomicOr(bad, 1);
}

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
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  return t[t.size() / 2];
}

/* The step: the embedding, then every phase a launch at grid blocks,
 * chained with PDL in one graph. us a step, median of 20 replays. */
static float run_step(size_t np, int grid, int n0, const __half *W, uint2 *vec, int ll, int ns, int *bad, cudaStream_t s) {
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  k_embed<<<1, 256, 0, s>>>(vec, n0);
  for (size_t i = 0; i < np; i++) {
    cudaLaunchConfig_t c = {}; c.gridDim = grid; c.blockDim = THREADS; c.stream = s;
    cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1; c.attrs = a; c.numAttrs = i > 0;
    CK(cudaLaunchKernelEx(&c, k_phase, (int)i, W, vec, ll, ns, bad));
  }
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  const float t = time_graph(ge, s);
  CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
  return t;
}

/* Host check of the last run (see the header): WRONG lines, the count. */
static int check(const std::vector<Phase> &ph, const std::vector<long long> &voff, const uint2 *dvec, const int *dbad) {
  unsigned run; CK(cudaMemcpyFromSymbol(&run, g_run, 4));
  std::vector<uint2> v(voff.back());
  CK(cudaMemcpy(v.data(), dvec, v.size() * 8, cudaMemcpyDeviceToHost));
  int hbad; CK(cudaMemcpy(&hbad, dbad, 4, cudaMemcpyDeviceToHost));
  int bad = hbad ? 1 : 0;
  if (hbad) printf("  WRONG: a grid wait saw an entry of another run\n");
  for (size_t i = 0; i + 1 < voff.size(); i++)
    for (long long k = voff[i]; k < voff[i + 1]; k++)
      if (v[k].y != run * EPOCHS + (unsigned)i + 1) { if (bad++ < 3) printf("  WRONG: vector %zu entry %lld not written\n", i, k - voff[i]); break; }
  auto val = [&](int vi, long long k) { float f; memcpy(&f, &v[voff[vi] + k].x, 4); return (double)f; };
  for (size_t pi = 0; pi < ph.size(); pi++) {
    const Phase &p = ph[pi];
    const int rows[3] = {0, p.nout / 2, p.nout - 1};
    if (p.kind == ATTN) {
      for (int r : rows) if (val(p.in + 1, r) != val(p.in, r)) { if (bad++ < 3) printf("  WRONG: attention %zu entry %d\n", pi, r); }
      continue;
    }
    double ss = 0;
    for (int k = 0; k < p.nin; k++) ss += val(p.in, k) * val(p.in, k);
    const double inv = 1 / sqrt(ss / p.nin + 1e-6);
    for (int r : rows) {
      double ref, mag;
      if (p.kind == TINY) { ref = val(p.in, r) * inv; mag = fabs(ref) + 1e-3; }
      else {
        double g = 0, u = 0; mag = 0;
        for (int k = 0; k < p.nin; k++) {
          const double x = val(p.in, k) * inv;
          const double wg = __half2float(__float2half(wval(p.woff + (long long)r * p.nin + k)));
          g += wg * x; mag += fabs(wg * x);
          if (p.kind == GU) u += __half2float(__float2half(wval(p.woff + (long long)(p.nout + r) * p.nin + k))) * x;
        }
        ref = p.kind == GU ? g / (1 + exp(-g)) * u : g;
        if (p.kind == GU) mag *= fabs(u) + 1;
      }
      if (!(fabs(val(p.in + 1, r) - ref) <= 1e-3 * mag + 1e-3)) {
        if (bad++ < 3) printf("  WRONG: phase %zu (kind %d) row %d: %g, expected %g\n", pi, p.kind, r, val(p.in + 1, r), ref);
      }
    }
  }
  return bad;
}

struct Shape { const char *name; int layers, d, qkv, ff, vocab; };

int main(int argc, char **argv) {
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  int occ; CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_phase, THREADS, 0));
  printf("%s, %d SMs, %d blocks of %d threads per SM resident\n", prop.name, sms, occ, THREADS);
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
  int *bad; CK(cudaMalloc(&bad, 4));
  const char *only = argc > 1 ? argv[1] : nullptr;
  const int sleeps[] = {0, 0, 64}; /* grid, ll, ll with 64 ns between polls */

  if (!only || !strcmp(only, "tiny")) { /* the dependency alone: 64 phases of n -> n */
    for (int n : {2048, 8192})
      for (int bps = 1; bps <= 2; bps++) {
        std::vector<Phase> ph; std::vector<long long> voff{0};
        for (int i = 0; i < 64; i++) { ph.push_back({TINY, n, n, 0, i, 0}); voff.push_back(voff.back() + n); }
        voff.push_back(voff.back() + n);
        uint2 *vec; CK(cudaMalloc(&vec, voff.back() * 8)); CK(cudaMemset(vec, 0, voff.back() * 8));
        CK(cudaMemcpyToSymbol(c_ph, ph.data(), ph.size() * sizeof(Phase)));
        CK(cudaMemcpyToSymbol(c_voff, voff.data(), voff.size() * 8));
        printf("tiny n=%d, %d block(s) an SM:", n, bps);
        for (int m = 0; m < 3; m++) {
          CK(cudaMemset(bad, 0, 4));
          const float t64 = run_step(64, sms * bps, n, nullptr, vec, m > 0, sleeps[m], bad, s);
          const int b = check(ph, voff, vec, bad);
          const float t1 = run_step(1, sms * bps, n, nullptr, vec, m > 0, sleeps[m], bad, s);
          printf("  %s%s %.2f us a dependency%s", m ? "ll" : "grid", m == 2 ? "+sleep64" : "", (t64 - t1) / 63, b ? " WRONG" : "");
        }
        printf("\n");
        CK(cudaFree(vec));
      }
  }

  const Shape shapes[] = {{"1b", 16, 2048, 3072, 8192, 128256}, {"8b", 32, 4096, 6144, 14336, 128256}};
  for (const Shape &sh : shapes) {
    if (only && strcmp(only, sh.name)) continue;
    if (sh.ff > MAXK || sh.qkv > MAXK) { /* a phase normalises its whole input in shared memory (48 KiB static) */
      fprintf(stderr, "%s: an input of %d exceeds MAXK %d (not measured)\n", sh.name, sh.ff > sh.qkv ? sh.ff : sh.qkv, MAXK);
      continue;
    }
    for (int att : {0, 7}) {
      std::vector<Phase> ph; std::vector<long long> voff{0};
      long long off = 0; int v = 0;
      auto add = [&](int kind, int nin, int nout, long long nw) {
        ph.push_back({kind, nin, nout, off, v, att}); voff.push_back(voff.back() + nin); off += nw; v++;
      };
      for (int l = 0; l < sh.layers; l++) {
        add(GEMV, sh.d, sh.qkv, (long long)sh.qkv * sh.d);
        if (att) add(ATTN, sh.qkv, sh.d, 0);
        else { /* no attention: O reads the first d of QKV's output, as a GEMV over d */ }
        add(GEMV, att ? sh.d : sh.qkv, sh.d, (long long)sh.d * (att ? sh.d : sh.qkv));
        add(GU, sh.d, sh.ff, 2LL * sh.ff * sh.d);
        add(GEMV, sh.ff, sh.d, (long long)sh.d * sh.ff);
      }
      add(GEMV, sh.d, sh.vocab, (long long)sh.vocab * sh.d);
      voff.push_back(voff.back() + sh.vocab);
      const long long nw = off;
      __half *W; uint2 *vec;
      CK(cudaMalloc(&W, nw * 2)); CK(cudaMalloc(&vec, voff.back() * 8)); CK(cudaMemset(vec, 0, voff.back() * 8));
      k_fill<<<4 * sms, 256>>>(W, nw);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpyToSymbol(c_ph, ph.data(), ph.size() * sizeof(Phase)));
      CK(cudaMemcpyToSymbol(c_voff, voff.data(), voff.size() * 8));
      /* the weights streamed: the O GEMV over qkv columns without the attention is more bytes than the real O;
         the bound counts what this step streams */
      const double bound_us = 2.0 * nw / (copy_gbs * 1e9) * 1e6;
      printf("\n%s, attention %d us: %.2f GB of weights, %zu phases; bound %.1f us a step\n", sh.name, att, nw * 2 / 1e9,
             ph.size(), bound_us);
      for (int bps = 1; bps <= std::min(occ, 2); bps++) {
        printf("  %d block(s) an SM:", bps);
        for (int round = 0; round < 2; round++)
          for (int m = 0; m < 3; m++) {
            CK(cudaMemset(bad, 0, 4));
            const float t = run_step(ph.size(), sms * bps, sh.d, W, vec, m > 0, sleeps[m], bad, s);
            const int b = round == 0 ? check(ph, voff, vec, bad) : 0;
            printf("  %s%s %.1f us (%.1f%%)%s", m ? "ll" : "grid", m == 2 ? "+sleep64" : "", t, 100 * bound_us / t, b ? " WRONG" : "");
          }
        printf("\n");
      }
      CK(cudaFree(W)); CK(cudaFree(vec));
    }
  }
  return 0;
}
