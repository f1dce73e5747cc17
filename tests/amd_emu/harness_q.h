/* harness_q.h — main() for a template whose B is in a block format (the
 * prelude's gc-quant block), built against prelude_emu.h with EMU_QUANT:
 * reads A (TA elements), B (blocks, bytes; the gate/up pair's 2N rows
 * under EMU_SWIGLU), C's initial contents (TC elements) and under
 * EMU_NORM the norm weight (K elements of A's dtype, eps 1e-5) from DIR,
 * runs KERNEL on the host SIMT emulation for one problem and writes C to
 * DIR/out.bin. Each input is a heap buffer of exactly its size (ASan sees
 * any read past it). The test (tests/test_amd_emulator.py) made the
 * inputs and checks every element of the output against an fp64
 * reference on B dequantized by tests/ggufq.py; it poisons C (NaN) but
 * for gemm_add, so an element left unwritten shows.
 *
 *   emu M N K GRID BLOCK SHMEM DIR
 *
 * Prints "replication R inputs_changed I" and exits 1 when a WMMA operand
 * was not replicated across half-waves or an input (A, B, the norm weight)
 * was written. */
#ifndef EMU_SWIGLU
#define EMU_SWIGLU 0
#endif
#ifndef EMU_NORM
#define EMU_NORM 0
#endif
#define EMU_TN TN
#include "run_block.h"

int main(int argc, char **argv) {
  if (argc != 8) return fprintf(stderr, "usage: emu M N K GRID BLOCK SHMEM DIR\n"), 2;
  int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]), grid = atoll(argv[4]);
  int block = atoi(argv[5]);
  size_t shmem = (size_t)atoll(argv[6]);
  const char *dir = argv[7];
  const int64_t rows_b = EMU_SWIGLU ? 2 * N : N;
  std::vector<unsigned char> A = emu_read(dir, "a.bin", (size_t)(M * K) * sizeof(TA));
  std::vector<unsigned char> B = emu_read(dir, "b.bin", (size_t)(rows_b * (K / GC_QK) * GC_QBYTES));
  std::vector<unsigned char> C = emu_read(dir, "c.bin", (size_t)(M * N) * sizeof(TC));
  std::vector<unsigned char> W = EMU_NORM ? emu_read(dir, "w.bin", (size_t)K * sizeof(TN)) : std::vector<unsigned char>();
  const std::vector<unsigned char> A0 = A, B0 = B, W0 = W;
  for (int64_t b = 0; b < grid; b++)
    emu_block_run(b, block, shmem, WARP, (const TA *)A.data(), (const TB *)B.data(), (TC *)C.data(), M, N, K,
                  (const TN *)W.data(), 1e-5f);
  /* nothing but C is written (C's own buffer: ASan sees past its ends) */
  return emu_finish(dir, "out.bin", C, "replication", (A != A0) + (B != B0) + (W != W0));
}
