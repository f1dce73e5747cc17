/* run_block.h — one block of KERNEL on the host SIMT emulation: BLOCK
 * threads (fibers taking turns on one host thread, emu_fiber.h) run it with the block's LDS (exactly SHMEM bytes, filled with
 * EMU_LDS_FILL: NaN, under ASan; its static shared arrays too, emu_shared.h). Included after the template by harness.h,
 * harness_q.h and harness_att.h. emu_block_launch runs any call of the
 * kernel; emu_block_run calls KERNEL with the GEMM ABI, or with EMU_NORM
 * the rmsnorm_* ABI (A, B, C, norm[K], M, N, K, eps; norm is of type
 * EMU_TN: B's dtype, or A's where B is a block format); with EMU_ATTENTION
 * (the attention ABI) harness_att.h makes the call itself, and so does a
 * harness that defines EMU_OWN_CALL (tests/nv_emu). */
#ifndef EMU_NORM
#define EMU_NORM 0
#endif
#ifndef EMU_ATTENTION
#define EMU_ATTENTION 0
#endif
#ifndef EMU_OWN_CALL
#define EMU_OWN_CALL 0
#endif
#ifndef EMU_TN
#define EMU_TN TB
#endif
#include <vector>

/* Input file DIR/name, which must hold exactly want bytes (exit 2 else),
 * as a heap buffer of exactly that size (ASan sees any read past it). */
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

/* v to DIR/name: 0, or 2 (main's status) with a line on stderr. */
static int emu_write(const char *dir, const char *name, const std::vector<unsigned char> &v) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(v.data(), 1, v.size(), f) != v.size() || fclose(f))
    return fprintf(stderr, "%s: cannot write\n", path), 2;
  return 0;
}

/* The end of a harness: out to DIR/name, then "<errs> E inputs_changed I"
 * (errs: what the emulation counts, "misuse" on NVIDIA, "replication" on
 * AMD); returns main's exit status (1 on either count, 2 on a failed
 * write). */
static int emu_finish(const char *dir, const char *name, const std::vector<unsigned char> &out, const char *errs,
                      int inputs_changed) {
  if (emu_write(dir, name, out)) return 2;
  printf("%s %d inputs_changed %d\n", errs, emu_errors, inputs_changed);
  return emu_errors || inputs_changed ? 1 : 0;
}

/* The byte a block's LDS (dynamic shared memory) starts filled with: 0xff,
 * NaN in every float format, so that a value read before it is written
 * shows even where it is multiplied by 0 (a case may set its own). */
#ifndef EMU_LDS_FILL
#define EMU_LDS_FILL 0xff
#endif

#include "emu_shared.h" /* the static shared arrays, filled here too */

/* One block: BLOCK threads run body() with the block's LDS. */
template <class F> static void emu_block_launch(int64_t bid, int block, size_t shmem, int wave, F body) {
  emu_block blk;
  blk.wave_size = wave;
  blk.lds = (unsigned char *)aligned_alloc(16, shmem ? (shmem + 15) / 16 * 16 : 16);
  memset(blk.lds, EMU_LDS_FILL, shmem);
  memset(__start_emu_shared, EMU_LDS_FILL, (size_t)(__stop_emu_shared - __start_emu_shared));
  blk.nthreads = block;
  blk.waves = new emu_wave[(block + wave - 1) / wave];
  emu_bid = bid, emu_blk = &blk;
  emu_fibers_run(block, [](void *f) { (*(F *)f)(); }, &body);
#ifdef EMU_BLOCK_END
  EMU_BLOCK_END(&blk); /* the prelude's checks of what the block left behind */
#endif
  delete[] blk.waves;
  free(blk.lds);
}

#if !EMU_ATTENTION && !EMU_OWN_CALL
/* One block of a GEMM-ABI (or rmsnorm_*-ABI) kernel. */
static void emu_block_run(int64_t bid, int block, size_t shmem, int wave, const TA *A, const TB *B,
                          TC *C, int64_t M, int64_t N, int64_t K, const EMU_TN *Wn = nullptr,
                          float eps = 0.0f) {
  emu_block_launch(bid, block, shmem, wave, [=] {
#if EMU_NORM
    KERNEL(A, B, C, Wn, M, N, K, eps);
#else
    (void)Wn, (void)eps;
    KERNEL(A, B, C, M, N, K);
#endif
  });
}
#endif
