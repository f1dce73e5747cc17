/* harness_rows.h — main() for the row-wise ops' templates on the NVIDIA
 * emulation (prelude_emu.h): bias (add.cu built for GC_OP_BIAS: X[M,N] of
 * TA, b[N] of TB, Z[M,N] of TC) and qk_norm (qk_norm.cu: QKV[M,(H+2G)·D]
 * of TC in place, qn[D] and kn[D] of TB, eps 1e-5). Reads the inputs from
 * DIR (x.bin, b.bin, z.bin or qkv.bin, qn.bin, kn.bin: exactly their
 * sizes, each a heap buffer of that size, so ASan sees a read past it),
 * runs every block of the problem and writes Z (or QKV after the call) to
 * DIR/out.bin; the test (tests/test_nv_emulator.py) checks every element
 * with the case table's numpy references (tests/cases.py).
 *
 *   emu GRID BLOCK DIR M N          (bias)
 *   emu GRID BLOCK DIR M H G D      (qk_norm)
 *
 * Prints "misuse E inputs_changed I" and exits 1 when the emulation saw a
 * misuse or an input (X, b; qn, kn) was written. */
#define EMU_OWN_CALL 1
#include "run_block.h"
#ifndef GC_OP_QK_NORM
#define GC_OP_QK_NORM 0 /* add.cu: built for bias */
#endif

int main(int argc, char **argv) {
  if (argc != (GC_OP_QK_NORM ? 8 : 6))
    return fprintf(stderr, "usage: emu GRID BLOCK DIR M N | emu GRID BLOCK DIR M H G D\n"), 2;
  const int64_t grid = atoll(argv[1]), M = atoll(argv[4]);
  const int block = atoi(argv[2]);
  const char *dir = argv[3];
#if GC_OP_QK_NORM
  const int64_t H = atoll(argv[5]), G = atoll(argv[6]), D = atoll(argv[7]);
  std::vector<unsigned char> out = emu_read(dir, "qkv.bin", (size_t)(M * (H + 2 * G) * D) * sizeof(TC));
  std::vector<unsigned char> in1 = emu_read(dir, "qn.bin", (size_t)D * sizeof(TB));
  std::vector<unsigned char> in2 = emu_read(dir, "kn.bin", (size_t)D * sizeof(TB));
#else
  const int64_t N = atoll(argv[5]);
  std::vector<unsigned char> in1 = emu_read(dir, "x.bin", (size_t)(M * N) * sizeof(TA));
  std::vector<unsigned char> in2 = emu_read(dir, "b.bin", (size_t)N * sizeof(TB));
  std::vector<unsigned char> out = emu_read(dir, "z.bin", (size_t)(M * N) * sizeof(TC));
#endif
  const std::vector<unsigned char> in10 = in1, in20 = in2;
  gridDim.x = (unsigned)grid;
  for (int64_t bi = 0; bi < grid; bi++)
    emu_block_launch(bi, block, 0, 32, [&] {
#if GC_OP_QK_NORM
      KERNEL((TC *)out.data(), (const TB *)in1.data(), (const TB *)in2.data(), M, H, G, D, 1e-5f);
#else
      KERNEL((const TA *)in1.data(), (const TB *)in2.data(), (TC *)out.data(), M, N);
#endif
    });
  return emu_finish(dir, "out.bin", out, "misuse", (in1 != in10) + (in2 != in20));
}
