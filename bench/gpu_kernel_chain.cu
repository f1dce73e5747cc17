/* gpu_kernel_chain.cu — what one kernel boundary of a decode step costs on
 * this GPU, apart from any work: a chain of 400 launches of a kernel that
 * does nothing but griddepcontrol's wait and launch (with PDL, the
 * programmatic stream serialization gcore's decode graph uses, and
 * without), captured in one CUDA graph and replayed; per launch, at one
 * block and at one block per SM with gemv_bulk's 288 threads and 0 or 128
 * KB of shared memory (so that two launches' blocks cannot share an SM),
 * with the dependent global load and store of one value added; then the
 * host's round trip of a decode step (an 8-byte upload, the replay, a
 * 4-byte download and a sync) against replays back to back.
 *
 *   nvcc -O2 -arch=sm_90a -o build/gpu_kernel_chain bench/gpu_kernel_chain.cu && build/gpu_kernel_chain
 *
 * bench/RESULTS.md, session 32: 0.5-0.8 us a boundary on an H200. */
#include <cstdio>
#include <ctime>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void k_chain(int *x, int i, int early, int rt) {
  if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (rt && threadIdx.x == 0) { /* a dependent global round trip per block */
    int v = ((volatile int *)x)[i];
    if (blockIdx.x == 0) x[i + 1] = v + 1;
  }
}

/* A graph of n kernels replayed back to back, against each replay after an
 * 8-byte upload and followed by a 4-byte download and a sync (a decode
 * step's host round trip): us a replay, both. */
static void host_gap(int n) {
  int *x, *h; CK(cudaMalloc(&x, (n + 2) * sizeof(int))); CK(cudaMallocHost(&h, 64));
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < n; i++) {
    cudaLaunchConfig_t c = {}; c.gridDim = 132; c.blockDim = 288; c.dynamicSmemBytes = 0; c.stream = s;
    cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1; c.attrs = a; c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, k_chain, x, i, 0, 0));
  }
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  const int R = 50;
  double t0 = 0; cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0, s);
  for (int r = 0; r < R; r++) CK(cudaGraphLaunch(ge, s));
  cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
  float ms; cudaEventElapsedTime(&ms, e0, e1);
  struct timespec a0, a1; clock_gettime(CLOCK_MONOTONIC, &a0);
  for (int r = 0; r < R; r++) {
    CK(cudaMemcpy(x + n, h, 8, cudaMemcpyHostToDevice));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaMemcpyAsync(h + 4, x, 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
  }
  clock_gettime(CLOCK_MONOTONIC, &a1);
  double sync_us = ((a1.tv_sec - a0.tv_sec) * 1e9 + (a1.tv_nsec - a0.tv_nsec)) / 1e3 / R;
  (void)t0;
  printf("graph of %d kernels: %.1f us a replay back to back, %.1f us with the upload, download and sync\n", n,
         ms * 1000 / R, sync_us);
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g); cudaStreamDestroy(s); cudaFree(x); cudaFreeHost(h);
}

static float run(int blocks, int threads, int smem, int pdl, int early, int rt, int n) {
  int *x; CK(cudaMalloc(&x, (n + 2) * sizeof(int))); CK(cudaMemset(x, 0, (n + 2) * sizeof(int)));
  CK(cudaFuncSetAttribute(k_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < n; i++) {
    cudaLaunchConfig_t c = {}; c.gridDim = blocks; c.blockDim = threads; c.dynamicSmemBytes = smem; c.stream = s;
    cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = a; c.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&c, k_chain, x, i, early, rt));
  }
  CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
  for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, s));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  float best = 1e9;
  for (int r = 0; r < 10; r++) {
    cudaEventRecord(e0, s); CK(cudaGraphLaunch(ge, s)); cudaEventRecord(e1, s); CK(cudaEventSynchronize(e1));
    float ms; cudaEventElapsedTime(&ms, e0, e1); if (ms < best) best = ms;
  }
  int last; CK(cudaMemcpy(&last, x + n, sizeof last, cudaMemcpyDeviceToHost));
  if (rt && last != n) printf("  (chain value %d, expected %d)\n", last, n);
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g); cudaStreamDestroy(s); cudaFree(x);
  return best * 1000.0f / n;
}

int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int n = 400;
  struct { const char *what; int blocks, threads, smem, pdl, early, rt; } cs[] = {
      {"1 block, no PDL", 1, 32, 0, 0, 0, 0},
      {"1 block, PDL", 1, 32, 0, 1, 0, 0},
      {"SMS blocks x288, 0 KB, no PDL", sms, 288, 0, 0, 0, 0},
      {"SMS blocks x288, 0 KB, PDL", sms, 288, 0, 1, 0, 0},
      {"SMS blocks x288, 0 KB, PDL early", sms, 288, 0, 1, 1, 0},
      {"SMS blocks x288, 128 KB, no PDL", sms, 288, 128 * 1024, 0, 0, 0},
      {"SMS blocks x288, 128 KB, PDL", sms, 288, 128 * 1024, 1, 0, 0},
      {"SMS blocks x288, 128 KB, PDL early", sms, 288, 128 * 1024, 1, 1, 0},
      {"SMS blocks x288, 128 KB, PDL, round trip", sms, 288, 128 * 1024, 1, 0, 1},
      {"SMS blocks x288, 0 KB, PDL, round trip", sms, 288, 0, 1, 0, 1},
      {"512 blocks x128, 4 KB, PDL", 512, 128, 4096, 1, 0, 0},
      {"1 block, PDL, round trip", 1, 32, 0, 1, 0, 1},
  };
  printf("SMs %d; chain of %d kernels in one graph, best of 10 replays: us a kernel\n", sms, n);
  for (auto &c : cs) printf("%-45s %.2f\n", c.what, run(c.blocks, c.threads, c.smem, c.pdl, c.early, c.rt, n));
  host_gap(150);
  host_gap(400);
  return 0;
}
