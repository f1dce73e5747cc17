/* harness_q.h — main() for a template whose B is in a block format (the
 * prelude's gc-quant block), built against prelude_emu.h with EMU_QUANT:
 * reads A (TA elements), B (blocks, bytes) and C's initial contents (TC
 * elements) from DIR, runs KERNEL on the host SIMT emulation for one
 * problem and writes C to DIR/out.bin. The test (tests/test_amd_emulator.py)
 * made the inputs and checks every element of the output against an fp64
 * reference on B dequantized by tests/ggufq.py; it poisons C (NaN) for
 * gemm and gemm_swiglu, so an element left unwritten shows.
 *
 *   emu M N K GRID BLOCK SHMEM DIR
 *
 * Prints "replication R" and exits 1 when a WMMA operand was not
 * replicated across half-waves. */
#include "run_block.h"

static std::vector<unsigned char> emu_read(const char *dir, const char *name, size_t want) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  std::vector<unsigned char> v(want);
  FILE *f = fopen(path, "rb");
  if (!f || fread(v.data(), 1, want, f) != want || fgetc(f) != EOF) {
    fprintf(stderr, "%s: not %zu bytes\n", path, want);
    exit(2);
  }
  fclose(f);
  return v;
}

int main(int argc, char **argv) {
  if (argc != 8) return fprintf(stderr, "usage: emu M N K GRID BLOCK SHMEM DIR\n"), 2;
  int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]), grid = atoll(argv[4]);
  int block = atoi(argv[5]);
  size_t shmem = (size_t)atoll(argv[6]);
  const char *dir = argv[7];
  const int64_t rows_b = GC_OP_GEMM_SWIGLU ? 2 * N : N;
  std::vector<unsigned char> A = emu_read(dir, "a.bin", (size_t)(M * K) * sizeof(TA));
  std::vector<unsigned char> B = emu_read(dir, "b.bin", (size_t)(rows_b * (K / GC_QK) * GC_QBYTES));
  std::vector<unsigned char> C = emu_read(dir, "c.bin", (size_t)(M * N) * sizeof(TC));
  for (int64_t b = 0; b < grid; b++)
    emu_block_run(b, block, shmem, WARP, (const TA *)A.data(), (const TB *)B.data(), (TC *)C.data(), M, N, K);
  char path[4096];
  snprintf(path, sizeof path, "%s/out.bin", dir);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(C.data(), 1, C.size(), f) != C.size() || fclose(f))
    return fprintf(stderr, "%s: cannot write\n", path), 2;
  printf("replication %d\n", emu_errors);
  return emu_errors ? 1 : 0;
}
