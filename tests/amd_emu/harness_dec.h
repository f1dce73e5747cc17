/* harness_dec.h — main() that runs the GPU preludes' block-format decoders
 * (the gc-quant block: GCQ_LOAD, GCQ_DECODE) of format GC_TB on the host,
 * built against prelude_emu.h with EMU_QUANT: reads NB blocks from
 * DIR/b.bin (a heap buffer of exactly their bytes: ASan sees a read past
 * it) and writes every element's value as the kernels form it — the level
 * of its lo or hi byte times d0 (hi: d1 where the format's halves have
 * their own scale) minus mn, in fp32 — to DIR/out.bin, block after block
 * in element order. Part t of unit u holds elements 32u + 4t .. 32u + 4t + 3
 * (lo) and 32u + 16 + 4t .. (hi) (prelude_common.h). The test
 * (tests/test_quant_decoders.py) compares them with tests/ggufq.py's
 * dequantization, which knows nothing of the decoders.
 *
 *   dec NB DIR */
#include <vector>

int main(int argc, char **argv) {
  if (argc != 3) return fprintf(stderr, "usage: dec NB DIR\n"), 2;
  const int64_t nb = atoll(argv[1]);
  const size_t bytes = (size_t)(nb * GC_QBYTES);
  char path[4096];
  snprintf(path, sizeof path, "%s/b.bin", argv[2]);
  uint8_t *B = (uint8_t *)malloc(bytes);
  FILE *f = fopen(path, "rb");
  if (!B || !f || fread(B, 1, bytes, f) != bytes || fgetc(f) != EOF) return fprintf(stderr, "%s: not %zu bytes\n", path, bytes), 2;
  fclose(f);
  std::vector<float> out((size_t)(nb * GC_QK));
  for (int64_t b = 0; b < nb; b++)
    for (int u = 0; u < GC_QUNITS; u++)
      for (int t = 0; t < 4; t++) {
        uint32_t r[GCQ_RAW], lo, hi;
        float d0, d1, mn;
        GCQ_LOAD(B + b * GC_QBYTES, u, t, r);
        GCQ_DECODE(r, u, t, lo, hi, d0, d1, mn);
        float *y = out.data() + b * GC_QK + 32 * u + 4 * t;
        for (int i = 0; i < 4; i++) {
          y[i] = GCQ_LEVEL(lo, i) * d0 - mn;
          y[16 + i] = GCQ_LEVEL(hi, i) * (GC_QSPLIT ? d1 : d0) - mn;
        }
      }
  free(B);
  snprintf(path, sizeof path, "%s/out.bin", argv[2]);
  f = fopen(path, "wb");
  if (!f || fwrite(out.data(), sizeof(float), out.size(), f) != out.size() || fclose(f))
    return fprintf(stderr, "%s: cannot write\n", path), 2;
  return 0;
}
