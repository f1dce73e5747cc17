// graph_gap.cu — what a boundary between two CUDA graph replays costs the
// decode step: a chain of K kernels linked by programmatic dependent launch
// (as gcore's step: each kernel lets the next launch early, then waits for
// the one before), captured once as one graph of K kernels (one step) and
// once as one graph of 2K (two steps); the replays of each issued back to
// back, with an event recorded after each replay as gcore-run's greedy loop
// records its box's mark (one without timing; one with, as runtime/cuda.c
// creates its boxes' events; and none). The time per K kernels of the two,
// and the difference: the boundary's cost. Each kernel is SMS blocks that wait
// WORK_NS on the SM's clock (%globaltimer), so the kernels' own time is
// known and the rest is the chain's.
//
//   nvcc -O3 -arch=sm_90a -o build/graph_gap bench/graph_gap.cu
//   build/graph_gap [K=80] [WORK_NS=2000] [REPLAYS=400]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t r_ = (x);                                                                \
    if (r_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(r_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One step's kernel: let the next one launch, wait for the one before,
// then spin work_ns; block 0 counts the launches (a check that all ran).
__global__ void step_kernel(unsigned long long work_ns, unsigned *count) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < work_ns) {
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(count, 1u);
}

static void launch(cudaStream_t s, int sms, unsigned long long work_ns, unsigned *count) {
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.gridDim = dim3(sms);
  cfg.blockDim = dim3(128);
  cfg.stream = s;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, step_kernel, work_ns, count));
}

static cudaGraphExec_t capture(cudaStream_t s, int n, int sms, unsigned long long work_ns, unsigned *count) {
  cudaGraph_t g;
  cudaGraphExec_t x;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < n; i++) launch(s, sms, work_ns, count);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&x, g, 0));
  CK(cudaGraphDestroy(g));
  return x;
}

// Microseconds per replay of x, replays times back to back (an event after
// each when mark), after 20 untimed replays.
static double per_replay(cudaStream_t s, cudaGraphExec_t x, int replays, int mark, cudaEvent_t ev) {
  for (int i = 0; i < 20; i++) CK(cudaGraphLaunch(x, s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaStreamSynchronize(s));
  CK(cudaEventRecord(a, s));
  for (int i = 0; i < replays; i++) {
    CK(cudaGraphLaunch(x, s));
    if (mark) CK(cudaEventRecord(ev, s));
  }
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms * 1000.0 / replays;
}

int main(int argc, char **argv) {
  const int K = argc > 1 ? atoi(argv[1]) : 80;
  const unsigned long long work = argc > 2 ? strtoull(argv[2], 0, 10) : 2000;
  const int R = argc > 3 ? atoi(argv[3]) : 400;
  if (K < 1 || R < 2 || R % 2) return fprintf(stderr, "usage: graph_gap [K>0] [WORK_NS] [REPLAYS, even]\n"), 2;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned *count;
  CK(cudaMalloc(&count, sizeof(unsigned)));
  CK(cudaMemset(count, 0, sizeof(unsigned)));
  cudaEvent_t mark, timed; /* the marks: without timing, and as runtime/cuda.c makes its boxes' (default) */
  CK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
  CK(cudaEventCreate(&timed));
  cudaGraphExec_t one = capture(s, K, sms, work, count), two = capture(s, 2 * K, sms, work, count);
  printf("%s, %d SMs; K = %d kernels a step of %llu ns each, %d steps\n", p.name, sms, K, work, R);
  for (int round = 0; round < 3; round++) {
    const double a = per_replay(s, one, R, 1, mark), b = per_replay(s, two, R / 2, 1, mark) / 2;
    const double c = per_replay(s, one, R, 0, mark), d = per_replay(s, one, R, 1, timed);
    printf("round %d: a step a graph %.2f us (without the event %.2f, with a timing event %.2f), two steps a "
           "graph %.2f us a step: the boundary costs %.2f us a step (%.2f us a kernel in the chain)\n",
           round, a, c, d, b, a - b, (b - work / 1000.0 * K) / K);
  }
  unsigned got = 0;
  CK(cudaMemcpy(&got, count, sizeof got, cudaMemcpyDeviceToHost));
  const unsigned want = 3u * (unsigned)K * (100u + 4u * (unsigned)R); /* rounds x (20 + R, 40 + R, 20 + R, 20 + R) steps */
  printf("kernels run: %u (expected %u)%s\n", got, want, got == want ? "" : " MISMATCH");
  return got == want ? 0 : 1;
}
