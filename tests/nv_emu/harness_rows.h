/* harness_rows.h — main() for the row-wise ops' templates on the NVIDIA
 * emulation (prelude_emu.h): bias (add.cu built for GC_OP_BIAS: X[M,N] of
 * TA, b[N] of TB, Z[M,N] of TC) and qk_norm (qk_norm.cu: QKV[M,(H+2G)·D]
 * of TC in place, qn[D] and kn[D] of TB, eps 1e-5), and rope with either
 * folded in (bias_rope_kv: rope_kv.cu, qk_norm_rope_kv: qk_norm.cu; QKV of
 * TA, Qout [M,H·D] and the caches Kc, Vc [POS0+M, G·D] of TC, inv_freq
 * [D/2] of double, the position POS0, w0 (b, or qn) and w1 (kn) of TB).
 * Reads the inputs from
 * DIR (x.bin, b.bin, z.bin or qkv.bin, qn.bin, kn.bin: exactly their
 * sizes, each a heap buffer of that size, so ASan sees a read past it),
 * runs every block of the problem and writes Z (or QKV after the call) to
 * DIR/out.bin; the test (tests/test_nv_emulator.py) checks every element
 * with the case table's numpy references (tests/cases.py).
 *
 *   emu GRID BLOCK DIR M N          (bias)
 *   emu GRID BLOCK DIR M H G D      (qk_norm)
 *   emu GRID BLOCK DIR M H G D LAYOUT POS0   (bias_rope_kv, qk_norm_rope_kv: qkv.bin,
 *        w0.bin, w1.bin (qk_norm_rope_kv), inv.bin in; qout.bin, kc.bin, vc.bin in
 *        and out, written after the call to out_q.bin, out_k.bin, out_v.bin)
 *
 * Prints "misuse E inputs_changed I" and exits 1 when the emulation saw a
 * misuse or an input (X, b; qn, kn; QKV, inv_freq, the position) was
 * written. */
#define EMU_OWN_CALL 1
#include "run_block.h"

#include <tuple>
#ifndef GC_OP_QK_NORM
#define GC_OP_QK_NORM 0 /* add.cu, rope_kv.cu: not built for it */
#endif
#ifndef GC_OP_BIAS_ROPE_KV
#define GC_OP_BIAS_ROPE_KV 0
#endif
#ifndef GC_OP_QK_NORM_ROPE_KV
#define GC_OP_QK_NORM_ROPE_KV 0
#endif

#if GC_OP_BIAS_ROPE_KV || GC_OP_QK_NORM_ROPE_KV
/* The rope ops: every block, then the three outputs and the counts. */
static int rows_rope(int64_t grid, int block, const char *dir, char **argv) {
  const int64_t M = atoll(argv[4]), H = atoll(argv[5]), G = atoll(argv[6]), D = atoll(argv[7]);
  const int64_t layout = atoll(argv[8]), S = atoll(argv[9]) + M, W = (H + 2 * G) * D;
  std::vector<unsigned char> qkv = emu_read(dir, "qkv.bin", (size_t)(M * W) * sizeof(TA));
  std::vector<unsigned char> w0 = emu_read(dir, "w0.bin", (size_t)(GC_OP_BIAS_ROPE_KV ? W : D) * sizeof(TB));
  std::vector<unsigned char> w1 = GC_OP_QK_NORM_ROPE_KV ? emu_read(dir, "w1.bin", (size_t)D * sizeof(TB))
                                                        : std::vector<unsigned char>(1);
  std::vector<unsigned char> inv = emu_read(dir, "inv.bin", (size_t)(D / 2) * sizeof(double));
  std::vector<unsigned char> q = emu_read(dir, "qout.bin", (size_t)(M * H * D) * sizeof(TC));
  std::vector<unsigned char> kc = emu_read(dir, "kc.bin", (size_t)(S * G * D) * sizeof(TC));
  std::vector<unsigned char> vc = emu_read(dir, "vc.bin", (size_t)(S * G * D) * sizeof(TC));
  std::vector<int32_t> pos(1, (int32_t)(S - M));
  const auto in0 = std::make_tuple(qkv, w0, w1, inv, pos);
  gridDim.x = (unsigned)grid;
  for (int64_t bi = 0; bi < grid; bi++)
    emu_block_launch(bi, block, 0, 32, [&] {
      KERNEL((const TA *)qkv.data(), (TC *)q.data(), (TC *)kc.data(), (TC *)vc.data(), (const double *)inv.data(),
             pos.data(), (const TB *)w0.data(),
#if GC_OP_QK_NORM_ROPE_KV
             (const TB *)w1.data(),
#endif
             M, H, G, D, layout
#if GC_OP_QK_NORM_ROPE_KV
             , 1e-5f
#endif
      );
    });
  if (emu_write(dir, "out_q.bin", q) || emu_write(dir, "out_k.bin", kc)) return 2;
  return emu_finish(dir, "out_v.bin", vc, "misuse", in0 != std::make_tuple(qkv, w0, w1, inv, pos));
}
#endif

int main(int argc, char **argv) {
#if GC_OP_BIAS_ROPE_KV || GC_OP_QK_NORM_ROPE_KV
  if (argc != 10)
    return fprintf(stderr, "usage: emu GRID BLOCK DIR M H G D LAYOUT POS0\n"), 2;
  return rows_rope(atoll(argv[1]), atoi(argv[2]), argv[3], argv);
#else
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
#endif
}
