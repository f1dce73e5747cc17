/* harness.h — main() for a template built against prelude_emu.h: runs
 * KERNEL (the template's @kernel, with the op's argument ABI) on the host
 * SIMT emulation for one problem and checks C against an fp64 reference.
 *
 *   emu M N K GRID BLOCK SHMEM     (GRID, BLOCK, SHMEM: the template's
 *                                   @grid, @block, @shmem for M N K)
 *
 * Prints "max_err E bad B unwritten U replication R" and exits 1 when any
 * element is outside the tolerance, left unwritten (C is poisoned with
 * NaN first) or a WMMA operand was not replicated across half-waves.
 * EMU_SWIGLU selects the gate/up pair (W[2N,K], C = silu(A·Wgᵀ)⊙(A·Wuᵀ):
 * gemm_swiglu, rmsnorm_gemm_swiglu); GC_OP_GEMM_ADD the gemm_add op
 * (C += A·Bᵀ: C starts random, not NaN); EMU_NORM the rmsnorm_* ops (A's
 * rows RMS-normalised and times norm[K] first: the reference does it in
 * fp64; norm is random in [0.5, 1.5), eps 1e-5). */
#ifndef EMU_SWIGLU
#define EMU_SWIGLU 0
#endif
#ifndef EMU_NORM
#define EMU_NORM 0
#endif

static uint64_t emu_rng = 0x243f6a8885a308d3ull;
static float emu_rand(void) { /* in [-1, 1) */
  emu_rng ^= emu_rng << 13, emu_rng ^= emu_rng >> 7, emu_rng ^= emu_rng << 17;
  return (float)((emu_rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}
static float emu_get(const float *p, int64_t i) { return p[i]; }
static float emu_get(const _Float16 *p, int64_t i) { return (float)p[i]; }
static float emu_get(const gc_bf16_t *p, int64_t i) { return emu_bf16(p[i].bits); }

#include "run_block.h"

int main(int argc, char **argv) {
  if (argc != 7) return fprintf(stderr, "usage: emu M N K GRID BLOCK SHMEM\n"), 2;
  int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]), grid = atoll(argv[4]);
  int block = atoi(argv[5]);
  size_t shmem = (size_t)atoll(argv[6]);
  int64_t rows_b = EMU_SWIGLU ? 2 * N : N;
  std::vector<TA> A(M * K);
  std::vector<TB> B(rows_b * K);
  std::vector<TC> C(M * N);
  std::vector<TB> Wn(K);
  const float eps = 1e-5f;
  for (auto &x : A) gc_st(&x, 0, emu_rand());
  for (auto &x : B) gc_st(&x, 0, emu_rand());
  for (auto &x : Wn) gc_st(&x, 0, 1.0f + 0.5f * emu_rand());
  for (int64_t i = 0; i < M * N; i++) gc_st(C.data(), i, GC_OP_GEMM_ADD ? emu_rand() : NAN);
  std::vector<TC> C0(C);
  for (int64_t b = 0; b < grid; b++)
    emu_block_run(b, block, shmem, WARP, A.data(), B.data(), C.data(), M, N, K, Wn.data(), eps);
  const double u = GC_TC == GC_F32 ? 0x1p-23 : GC_TC == GC_F16 ? 0x1p-10 : 0x1p-7;
  double max_err = 0;
  long bad = 0, unwritten = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double g = 0, up = 0, mag = 0, s = 1; /* s: row m's 1/rms under EMU_NORM */
      if (EMU_NORM) {
        double ss = 0;
        for (int64_t k = 0; k < K; k++) ss += (double)emu_get(A.data(), m * K + k) * emu_get(A.data(), m * K + k);
        s = 1 / sqrt(ss / (double)K + (double)eps);
      }
      for (int64_t k = 0; k < K; k++) {
        double a = emu_get(A.data(), m * K + k);
        if (EMU_NORM) a *= s * emu_get(Wn.data(), k);
        g += a * emu_get(B.data(), n * K + k);
        mag += fabs(a * emu_get(B.data(), n * K + k));
        if (EMU_SWIGLU) up += a * emu_get(B.data(), (N + n) * K + k);
      }
      double ref = EMU_SWIGLU ? g / (1 + exp(-g)) * up : g;
      if (GC_OP_GEMM_ADD) ref += emu_get(C0.data(), m * N + n), mag += 1;
      double scale = EMU_SWIGLU ? (1 + fabs(g)) * (1 + fabs(up)) : 1;
      double got = emu_get(C.data(), m * N + n);
      if (isnan(got)) {
        unwritten++;
        continue;
      }
      double err = fabs(got - ref), tol = u * fabs(ref) + K * 0x1p-22 * mag * scale + 1e-6;
      if (err > max_err) max_err = err;
      if (err > tol && bad++ < 5)
        fprintf(stderr, "C[%lld][%lld] = %g, expected %g\n", (long long)m, (long long)n, got, ref);
    }
  printf("max_err %.3g bad %ld unwritten %ld replication %d\n", max_err, bad, unwritten, emu_errors);
  return bad || unwritten || emu_errors ? 1 : 0;
}
