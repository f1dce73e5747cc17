/* harness_gemv.h — main() for the GEMV ABI's templates (gemv_qmma,
 * gemv_mma) on the NVIDIA emulation (prelude_emu.h): reads A (TA
 * elements), B (TB elements, or blocks of a block format, as bytes; the
 * gate/up pair's 2N rows under PAIR 2), C's initial contents (TC elements)
 * and under NORM the norm weight (K elements of TN, eps 1e-5) from DIR, runs
 * every block of one problem with the op's argument list (and with RL 3
 * the tensor map of B as runtime/cuda.c encodes a block format's:
 * @tensormap's rows, blocks and box, over 32-bit words) and writes C to
 * DIR/out.bin. Each input is a heap buffer of exactly its size (ASan sees
 * any read past it); the test (tests/test_nv_emulator.py) made the inputs
 * and checks every element of C against fp64 (B in a block format
 * dequantized by tests/ggufq.py).
 *
 *   emu M N K GRID BLOCK SHMEM DIR [H G D LAYOUT POS0]
 *
 * rmsnorm_gemm_rope_kv (ROPE): C is Qout [M, H·D] and the run also reads
 * the caches Kc, Vc ([POS0 + M + 2, G·D] of TC: rows past the problem's
 * show a write out of place), the doubles inv_freq[D/2] and writes the
 * caches back to DIR/kc.out, DIR/vc.out; the position is read from an
 * int32 on the "device", as a replayed graph reads it;
 * rmsnorm_gemm_bias_rope_kv reads b[N] (TB) from DIR/bias.bin too.
 *
 * EMU_WINDOW (a template that declares @prefetch): the kernel's L2 window
 * is a buffer of its own (EMU_WINDOW_BYTES, default 16·1001, a global:
 * ASan sees a prefetch past it), which must stay as it was and whose every
 * byte the grid must ask L2 for (else a misuse: the window is a hint, but
 * one the kernel takes in full).
 *
 * Prints "misuse E inputs_changed I" and exits 1 when the emulation saw a
 * misuse (an mbarrier used before its init, an arrival too many) or an
 * input (A, B, the norm weight, the window) was written. */
#define EMU_OWN_CALL 1
#include "run_block.h"
#ifndef GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV
#define GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV 0 /* gemv_qmma, gemv_mma: not built for it */
#endif
#if GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV
#define EMU_BIAS , (const TB *)bias.data()
#else
#define EMU_BIAS
#endif

#ifdef EMU_WINDOW
#ifndef EMU_WINDOW_BYTES
#define EMU_WINDOW_BYTES (16 * 1001)
#endif
alignas(16) static unsigned char emu_window[EMU_WINDOW_BYTES]; /* 16: ASan leaves globals aligned past 32 without redzones */
static unsigned char emu_window_asked[EMU_WINDOW_BYTES];       /* 1: asked of L2 (emu_on_prefetch) */
static void emu_window_mark(const void *p, unsigned bytes) {
  const unsigned char *c = (const unsigned char *)p;
  for (unsigned i = 0; i < bytes; i++)
    if (c + i >= emu_window && c + i < emu_window + sizeof emu_window)
      __atomic_store_n(&emu_window_asked[c + i - emu_window], 1, __ATOMIC_RELAXED);
}
#define EMU_PF , (const char *)emu_window, (int64_t)sizeof emu_window
#else
#define EMU_PF
#endif

int main(int argc, char **argv) {
  if (argc != 8 + 5 * ROPE) return fprintf(stderr, "usage: emu M N K GRID BLOCK SHMEM DIR [H G D LAYOUT POS0]\n"), 2;
  const int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]), grid = atoll(argv[4]);
  const int block = atoi(argv[5]);
  const size_t shmem = (size_t)atoll(argv[6]);
  const char *dir = argv[7];
  const int64_t rows_b = PAIR * N;
  std::vector<unsigned char> A = emu_read(dir, "a.bin", (size_t)(M * K) * sizeof(TA));
#if GC_TB >= GC_Q8_0 /* a block format */
  std::vector<unsigned char> B = emu_read(dir, "b.bin", (size_t)(rows_b * (K / GC_QK) * GC_QBYTES));
#else
  std::vector<unsigned char> B = emu_read(dir, "b.bin", (size_t)(rows_b * K) * sizeof(TB));
#endif
#if ROPE
  const int64_t H = atoll(argv[8]), G = atoll(argv[9]), D = atoll(argv[10]), layout = atoll(argv[11]);
  const int32_t pos0 = (int32_t)atoi(argv[12]);
  const size_t cache = (size_t)((pos0 + M + 2) * G * D) * sizeof(TC);
  std::vector<unsigned char> C = emu_read(dir, "c.bin", (size_t)(M * H * D) * sizeof(TC));
  std::vector<unsigned char> Kc = emu_read(dir, "kc.bin", cache), Vc = emu_read(dir, "vc.bin", cache);
  std::vector<unsigned char> inv = emu_read(dir, "inv.bin", (size_t)(D / 2) * sizeof(double));
  const std::vector<unsigned char> inv0 = inv;
  std::vector<int32_t> pos(1, pos0);
  std::vector<unsigned char> bias = GC_OP_RMSNORM_GEMM_BIAS_ROPE_KV ? emu_read(dir, "bias.bin", (size_t)N * sizeof(TB))
                                                                    : std::vector<unsigned char>(1);
  const std::vector<unsigned char> bias0 = bias;
#else
  std::vector<unsigned char> C = emu_read(dir, "c.bin", (size_t)(M * N) * sizeof(TC));
#endif
  std::vector<unsigned char> W = NORM ? emu_read(dir, "w.bin", (size_t)K * sizeof(TN)) : std::vector<unsigned char>(1);
  const std::vector<unsigned char> A0 = A, B0 = B, W0 = W;
#ifdef EMU_WINDOW
  for (size_t i = 0; i < sizeof emu_window; i++) emu_window[i] = (unsigned char)(i * 7 + 1);
  const std::vector<unsigned char> Pf0(emu_window, emu_window + sizeof emu_window);
  emu_on_prefetch = emu_window_mark;
#endif
  const TA *a = (const TA *)A.data();
  const TB *b = (const TB *)B.data();
  TC *c = (TC *)C.data();
  const TN *wn = (const TN *)W.data();
#if RL == 3
  gc_tmap_t map = {B.data(), {GC_QBYTES / 4, K / GC_QK, rows_b}, {GC_QBYTES, K / GC_QK * GC_QBYTES},
                   {GC_QBYTES / 4, KS, WARPS / KS * 16 * RT / (1 + ROPE)}};
#define EMU_MAP , map
#else
#define EMU_MAP
#endif
  gridDim.x = (unsigned)grid;
  for (int64_t bi = 0; bi < grid; bi++)
    emu_block_launch(bi, block, shmem, 32, [&] {
#if ROPE
      KERNEL(a, b, c, wn, (TC *)Kc.data(), (TC *)Vc.data(), (const double *)inv.data(), pos.data() EMU_BIAS, M, N,
             K, H, G, D, layout, 1e-5f EMU_MAP EMU_PF);
#elif NORM
      KERNEL(a, b, c, wn, M, N, K, 1e-5f EMU_MAP EMU_PF);
#else
      (void)wn;
      KERNEL(a, b, c, M, N, K EMU_MAP EMU_PF);
#endif
    });
  /* nothing but C is written (C's own buffer: ASan sees past its ends) */
  int inputs_changed = (A != A0) + (B != B0) + (W != W0);
#ifdef EMU_WINDOW
  inputs_changed += std::vector<unsigned char>(emu_window, emu_window + sizeof emu_window) != Pf0;
  size_t missed = 0;
  for (size_t i = 0; i < sizeof emu_window; i++) missed += !emu_window_asked[i];
  if (missed) fprintf(stderr, "window: %zu of %zu bytes never asked of L2\n", missed, sizeof emu_window);
  emu_errors += missed != 0;
#endif
#if ROPE
  inputs_changed += (inv != inv0) + (pos[0] != pos0) + (bias != bias0);
  if (emu_write(dir, "kc.out", Kc) || emu_write(dir, "vc.out", Vc)) return 2;
#endif
  return emu_finish(dir, "out.bin", C, "misuse", inputs_changed);
}
