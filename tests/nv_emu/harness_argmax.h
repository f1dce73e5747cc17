/* harness_argmax.h — main() for argmax.cu (argmax, argmax_step) on the
 * NVIDIA emulation (prelude_emu.h): X[M,N] of TA from DIR/x.bin (exactly
 * its size, a heap buffer of that size, so ASan sees a read past it);
 * argmax_step's pos[1] = P0 and its boxes box0, box1 (each -5 before).
 * The grid runs twice, every block one after another, each launch on
 * freshly poisoned outputs (idx -7, boxes -5, pos P0), so that the split's
 * ticket counter must be left ready for the next launch. Each launch's
 * int32 results go to DIR/out1.bin and DIR/out2.bin: idx[M], then
 * (argmax_step) pos, box0, box1; the test checks every one with numpy.
 *
 *   emu GRID BLOCK DIR M N P0
 *
 * Prints "misuse E inputs_changed I" and exits 1 when the emulation saw a
 * misuse or X was written. */
#define EMU_OWN_CALL 1
#include "run_block.h"

/* One launch of every block; its int32 results as bytes (above). */
static std::vector<unsigned char> argmax_launch(int64_t grid, int block, const std::vector<unsigned char> &x,
                                                int64_t M, int64_t N, int32_t p0) {
  std::vector<int32_t> out((size_t)M, -7), pos(1, p0), box0(1, -5), box1(1, -5);
  gridDim.x = (unsigned)grid;
  for (int64_t bi = 0; bi < grid; bi++)
    emu_block_launch(bi, block, 0, 32, [&] {
#if GC_OP_ARGMAX_STEP
      KERNEL((const TA *)x.data(), out.data(), pos.data(), box0.data(), box1.data(), M, N);
#else
      KERNEL((const TA *)x.data(), out.data(), M, N);
#endif
    });
  if (GC_OP_ARGMAX_STEP)
    out.insert(out.end(), {pos[0], box0[0], box1[0]});
  std::vector<unsigned char> bytes(out.size() * sizeof(int32_t));
  memcpy(bytes.data(), out.data(), bytes.size());
  return bytes;
}

int main(int argc, char **argv) {
  if (argc != 7)
    return fprintf(stderr, "usage: emu GRID BLOCK DIR M N P0\n"), 2;
  const int64_t grid = atoll(argv[1]), M = atoll(argv[4]), N = atoll(argv[5]);
  const int block = atoi(argv[2]);
  const int32_t p0 = atoi(argv[6]);
  const char *dir = argv[3];
  const std::vector<unsigned char> x = emu_read(dir, "x.bin", (size_t)(M * N) * sizeof(TA)), x0 = x;
  if (emu_write(dir, "out1.bin", argmax_launch(grid, block, x, M, N, p0)))
    return 2;
  return emu_finish(dir, "out2.bin", argmax_launch(grid, block, x, M, N, p0), "misuse", x != x0);
}
