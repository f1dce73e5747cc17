/* harness_att.h — main() for an attention template (attention_mfma,
 * attention_wmma) built against prelude_emu.h with EMU_ATTENTION: reads Q
 * (TA elements, [M, H, D]), the key and value caches (TB, [pos0+M, G, D]
 * each) and O's initial contents (TC, [M, H, D]: the test poisons it with
 * NaN) from DIR, runs KERNEL on the host SIMT emulation for one problem
 * (pos0 in a one-element int32 buffer, as the op passes it) and writes O
 * to DIR/out.bin. The test (tests/test_amd_emulator.py) made the inputs
 * and checks every element of the output against an fp64 reference.
 *
 *   emu M H G D POS0 SCALE GRID BLOCK SHMEM DIR
 *
 * Built with BATCH 1 (attention_batch: each row of Q at its own position
 * and cache slot), POS0 is S, the rows of a slot, and a twelfth argument
 * SLOTS: the caches are [SLOTS, S, G, D] and DIR/pos.bin holds the int32
 * [2, M] the op passes (positions, then slots).
 *
 * O lies between two guard regions of 4096 elements each: prints
 * "guard G replication R" (G: guard elements changed, R: WMMA operands not
 * replicated across half-waves) and exits 1 when either is not 0. */
#include "run_block.h"

#ifndef BATCH
#define BATCH 0
#endif

int main(int argc, char **argv) {
  if (argc != 11 + BATCH) return fprintf(stderr, "usage: emu M H G D POS0|S SCALE GRID BLOCK SHMEM DIR [SLOTS]\n"), 2;
  int64_t M = atoll(argv[1]), H = atoll(argv[2]), G = atoll(argv[3]), D = atoll(argv[4]);
  int32_t pos0 = atoi(argv[5]);
  float scale = strtof(argv[6], NULL);
  int64_t grid = atoll(argv[7]);
  int block = atoi(argv[8]);
  size_t shmem = (size_t)atoll(argv[9]);
  const char *dir = argv[10];
  const int64_t S = BATCH ? pos0 : pos0 + M, slots = BATCH ? atoll(argv[11]) : 1, guard = 4096;
  std::vector<unsigned char> q = emu_read(dir, "q.bin", (size_t)(M * H * D) * sizeof(TA));
  std::vector<unsigned char> k = emu_read(dir, "k.bin", (size_t)(slots * S * G * D) * sizeof(TB));
  std::vector<unsigned char> v = emu_read(dir, "v.bin", (size_t)(slots * S * G * D) * sizeof(TB));
  std::vector<unsigned char> o0 = emu_read(dir, "o.bin", (size_t)(M * H * D) * sizeof(TC));
  std::vector<unsigned char> o((size_t)(M * H * D + 2 * guard) * sizeof(TC), 0x5a);
  memcpy(o.data() + guard * sizeof(TC), o0.data(), o0.size());
  std::vector<int32_t> pos(1, pos0);
  if (BATCH) { /* [2, M]: positions, then slots */
    std::vector<unsigned char> pb = emu_read(dir, "pos.bin", (size_t)(2 * M) * sizeof(int32_t));
    pos.resize((size_t)(2 * M));
    memcpy(pos.data(), pb.data(), pb.size());
  }
  const TA *Q = (const TA *)q.data();
  const TB *Kc = (const TB *)k.data(), *Vc = (const TB *)v.data();
  TC *O = (TC *)o.data() + guard;
  for (int64_t b = 0; b < grid; b++)
    emu_block_launch(b, block, shmem, WARP, [=, &pos] {
#if BATCH
      KERNEL(Q, Kc, Vc, O, pos.data(), M, H, G, D, S, scale);
#else
      KERNEL(Q, Kc, Vc, O, pos.data(), M, H, G, D, scale);
#endif
    });
  long changed = 0;
  for (size_t i = 0; i < o.size(); i++)
    if ((i < guard * sizeof(TC) || i >= guard * sizeof(TC) + o0.size()) && o[i] != 0x5a) changed++;
  char path[4096];
  snprintf(path, sizeof path, "%s/out.bin", dir);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(o.data() + guard * sizeof(TC), 1, o0.size(), f) != o0.size() || fclose(f))
    return fprintf(stderr, "%s: cannot write\n", path), 2;
  printf("guard %ld replication %d\n", changed, emu_errors);
  return changed || emu_errors ? 1 : 0;
}
