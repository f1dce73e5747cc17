/* gemm_wgmma.cu — Hopper (sm_90a) tensor-core GEMM: warpgroup wgmma.mma_async
 * from 128-byte-swizzled shared memory, a producer warpgroup feeding a
 * multi-stage mbarrier pipeline; f16 or bf16 in and out, fp32 accumulation:
 * C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add: C += A·Bᵀ), or the gate/up pair
 * with the SwiGLU epilogue, C = silu(A·Wgᵀ) ⊙ (A·Wuᵀ) with W[2N,K] = gate
 * rows 0..N-1, up rows N..2N-1 (gemm_swiglu).
 *
 * @template gemm_wgmma
 * @op gemm gemm_add gemm_swiglu
 * @backend cuda
 * @dtypes f16 bf16
 * @kernel gemm_wgmma
 * @param BM 64 128 256 default 128 -- block tile rows (two consumer warpgroups, BM/2 rows each; 64: one consumer warpgroup, 256 threads, unless CWN = 2)
 * @param BN 64 128 192 256 default 256 -- rows of B per tile, the wgmma's n: BN columns of C (gemm_swiglu: BN/2 gate and BN/2 up rows of W, BN/2 columns of C)
 * @param CWN 1 2 default 1 -- consumer warpgroups side by side along N: 2 gives each all BM rows and BN/2 columns of the tile (the wgmma's n = BN/2; BM = 64: two consumers rather than one)
 * @param SK 0 1 2 3 4 8 default 0 -- split-K: a tile's K is cut into SK slices, each a unit of work of its own; the slices' fp32 partials (module workspace) are summed in slice order and finished by the slices that know all have stored (see Split-K below); 0: as many slices as the SMs hold (at most 8 and one per stage of K, within the workspace: 1 where the tiles alone fill the GPU)
 * @param BK 32 64 default 64 -- K depth of a stage: 64 (128-byte rows, 128-byte swizzle) or 32 (64-byte rows, 64-byte swizzle: twice the stages in the same bytes)
 * @param STAGES 2 3 4 5 6 8 12 default 4 -- shared-memory pipeline stages of BK K-columns each
 * @param RASTER 1 4 8 16 default 8 -- block rows walked together (L2 reuse of B tiles)
 * @param INFL 0 1 default 1 -- wgmma groups a consumer leaves in flight when it moves to the next stage (0: each stage is released as soon as its own wgmmas finish)
 * @param PERSIST 0 1 default 1 -- 1: at most one block per SM (SMS: the device's count at launch), each walking tiles; the producer fills the next tile's stages during the epilogue
 * @param TMA 0 1 default 1 -- 1: operands by the tensor copy engine (cp.async.bulk.tensor on host-made tensor maps, one producer thread); 0: 16-byte cp.async by the producer warpgroup
 * @param CLUSTER 1 2 default 1 -- blocks per cluster (TMA only): 2 pairs the blocks of vertically adjacent tiles, each loading half of their common B tile (gemm_swiglu: the gate or the up half) and multicasting it to both
 * @param EPI 0 1 default 1 -- epilogue: 0 stores fragments from registers to C; 1 stages 64x64 subtiles in shared memory (two buffers per consumer warpgroup) and stores them with the copy engine while the next tile's wgmmas run (gemm_add: C's subtile is loaded the same way first)
 * @defaults gemm gemm_add BM=64 BN=128 CWN=2 STAGES=8 if M <= 128 -- few rows (short prompts, batched decode): 2 x N/128 tiles of 64 rows, two consumers side by side, 8 stages; on an H200 (bench/RESULTS.md, session 28) at M = 128, 0.86 (O), 0.84 (QKV), 0.96 (down) and 0.87 (14336 x 4096) of torch against 0.71-0.91 at the default
 * @constraint SM == 90 && ARCH_A == 1 -- wgmma exists only on sm_90a
 * @constraint WARP == 32 && MAXT >= 128 * (2 + (BM > 64 || CWN > 1)) -- a producer and the consumer warpgroups
 * @constraint max(1, BM / 128) * BN / 2 <= 128 -- fp32 accumulators per consumer thread
 * @constraint (BN / PAIR / CWN) % 64 == 0 || BN / PAIR / CWN < 64 -- the epilogue's column blocks: whole 64-column blocks of C a consumer, or one of fewer
 * @constraint CWN == 1 || (PAIR == 1 && BM <= 128 && BN % 128 == 0) -- gemm_swiglu's consumers need both halves of the tile's W; at BM = 256 the accumulators would not fit; the wgmma's n (BN/2) is one the prelude has (64, 128)
 * @constraint STAGES * (BM + BN) * BK * 2 + 1024 + EPI * 16384 * (1 + (BM > 64 || CWN > 1)) <= SMEM -- the pipeline and the epilogue buffers (two per consumer warpgroup) fit in shared memory
 * @constraint TMA == 1 || CLUSTER == 1 -- multicast is a copy-engine operation
 * @constraint EPI == 0 || (SC == 2 && BN / PAIR / CWN >= 64) -- a subtile is 64 columns of C (BN/PAIR/CWN a consumer), 128-byte rows
 * @shmem STAGES * (BM + BN) * BK * 2 + 1024 + EPI * 16384 * (1 + (BM > 64 || CWN > 1))
 * @applies K % 8 == 0 && M > 1 -- rows of A and B are whole 16-byte chunks (cp.async); M = 1 is the GEMV's
 * @applies EPI == 0 || N % 8 == 0 -- EPI = 1: rows of C are whole 16-byte chunks (the copy engine's map)
 * @applies SK <= 1 || (SK <= cdiv(K, BK) && cdiv(M, BM * CLUSTER) * CLUSTER * cdiv(N, BN / PAIR) * SK * BM * BN <= 4194304) -- split-K: every slice has a stage of K, and the partials fit the 16 MiB workspace (SK = 0 chooses within both)
 * @grid CLUSTER * min(cdiv(M, BM * CLUSTER) * cdiv(N, BN / PAIR) * (SK + (SK == 0) * 8), PERSIST * (SMS / CLUSTER) + (1 - PERSIST) * cdiv(M, BM * CLUSTER) * cdiv(N, BN / PAIR) * (SK + (SK == 0) * 8)) 1 1
 * @tensormap A M K BM BK 2*BK if TMA -- A tiles [BM][BK], 128-byte (64-byte) swizzle, zero past M and K
 * @tensormap B N K BN/CLUSTER BK 2*BK if TMA && PAIR == 1 -- B tiles [BN][BK], or the half of one each block of a pair loads
 * @tensormap W 2*N K BN/2 BK 2*BK if TMA && PAIR == 2 -- gemm_swiglu: the gate or the up half [BN/2][BK] of a tile of W
 * @tensormap C M N 64 64 128 if EPI -- C subtiles [64][64] staged in shared memory, 128-byte swizzle, clipped at M and N
 * @block 128 * (2 + (BM > 64 || CWN > 1)) 1 1
 * @priority 5
 *
 * TMA = 0 (cp.async): the producer warpgroup writes the swizzled layout
 * itself with 16-byte cp.async (zero-filling rows past M/N and chunks
 * past K) and signals completion on the stage's mbarrier with
 * cp.async.mbarrier.arrive.noinc. (The non-tensor cp.async.bulk copies
 * contiguous bytes and cannot produce the 128-byte swizzle, whose 16-byte
 * chunks of one 128-byte row are permuted; the tensor copy needs a map.)
 *
 * TMA = 1 (the runtime builds the two tensor maps the @tensormap lines
 * declare and passes them after the op's arguments, runtime/tmap.h): one
 * producer thread issues, per stage, a cp.async.bulk.tensor of the A box
 * and of the B box onto the stage's full barrier, after arming it with the
 * stage's byte count (mbarrier.arrive.expect_tx); the copy engine writes
 * the same swizzled layout and zero-fills past M, N and K. CLUSTER = 2
 * adds a 2x1 cluster: the pair computes the tiles (2i, j) and (2i+1, j)
 * (a super-tile of 2·BM rows), and block r of the pair loads B rows
 * r·BN/2 .. of their common B tile with .multicast::cluster into both
 * blocks' shared memory, so each B tile leaves L2 once per pair. Each
 * block's full barrier then counts its own A bytes, its own B half and
 * its peer's; its empty barrier counts the releases of both blocks'
 * consumers (one arrival per consumer warp on each block of the pair,
 * mbarrier.arrive through mapa), so neither producer
 * overwrites a stage the other block still reads. A cluster barrier
 * after the barrier set-up and before exit keeps a block from leaving
 * while its peer may still write into its shared memory or barriers.
 *
 * Block b computes the BM×BN tile of C at (bm, bn), b walked in groups of
 * RASTER block rows (as gemm_mma). 384 threads: warpgroup 0 is the
 * producer, warpgroups 1 and 2 the consumers, each owning BM/2 rows × BN
 * columns of the tile as (BM/2)/64 m64nBNk16 wgmma accumulators in
 * registers (BN/2 floats per thread each). CWN = 2 puts the two consumers
 * side by side along N instead: each owns all BM rows and BN/2 columns
 * (B rows c·BN/2 .., the wgmma's n = BN/2). BM = 64: one consumer
 * warpgroup (256 threads), or two with CWN = 2. The GEMMs of up to 128
 * rows (short prompts, batched steps) default to BM = 64, BN = 128,
 * CWN = 2, 8 stages: 2 x N/128 tiles, each over K (or SK = 0's few
 * slices of it) behind a deep pipeline; 64 x 64 tiles, cuBLAS's choice
 * there, lose here (bench/RESULTS.md, session 28).
 *
 * Shared memory: STAGES stages, each an A tile [BM][BK] and a B tile
 * [BN][BK], 1024-byte aligned. BK = 64: 128-byte rows, 16-byte chunk c of
 * row r at r·128 + ((c ^ (r mod 8))·16), the 128-byte swizzle (8-row
 * groups 1024 bytes apart); BK = 32: 64-byte rows, chunk c at
 * r·64 + ((c ^ ((r / 2) mod 4))·16), the 64-byte swizzle (groups 512
 * bytes apart) — the layouts the wgmma descriptors name (K-major). Moving
 * a descriptor's start by 32 bytes selects the next k16 slice.
 *
 * Pipeline: full[s] (128 producer arrivals, each when that thread's
 * copies landed; TMA: one arrival and the stage's bytes) and empty[s]
 * (256 consumer arrivals; TMA: one per consumer warp of each block of the
 * cluster) mbarriers per stage.
 * Consumers wait full[s], issue the stage's (BK/16)·(BM/128) wgmmas, commit,
 * wait until at most this stage's group is in flight, and release the
 * previous stage (INFL = 1; INFL = 0 waits for its own group and releases
 * it at once). With PERSIST, a block walks tiles b, b+P, ...: the producer
 * runs on into the next tile while the consumers store. EPI = 0: the
 * epilogue writes fragments straight to C (pairs of columns as one 32-bit
 * store), guarded against M and N. EPI = 1: each consumer warpgroup
 * writes 64x64 subtiles into one of its two shared-memory buffers
 * (conflict-free, in the C map's 128-byte swizzle) and one thread hands
 * each to the copy engine (cp.async.bulk.tensor, clipped at M and N);
 * the warpgroup goes on to the next subtile and then the next tile's
 * wgmmas while the stores drain, waiting only before it reuses a buffer
 * whose store has not yet read it. gemm_add first loads C's subtile into
 * the buffer the same way, adds in fp32 and rounds once. Registers: setmaxnreg gives the producer 40
 * and the consumers 232, but ptxas compiles the whole kernel within the
 * entry cap (65536 / 384 = 168), which is what bounds a consumer's tile.
 *
 * Measured (bench/RESULTS.md, H100 SXM, 2026-11-22): 0.69-0.83 of cuBLAS
 * on the Llama-3-8B prefill shapes at the defaults; 128x128 tiles are
 * 20% slower (more operand bytes per FLOP), BK = 32 with twice the stages
 * 10% slower, PERSIST, INFL and RASTER within noise (all with TMA = 0).
 * cuBLAS uses the same 128x256x64 4-stage tile with TMA multicast over
 * 2x1 clusters: TMA = 1, CLUSTER = 2 here. Measured in one run (H100,
 * 2026-11-22, bench/gpu_gemm_tma.sh): TMA = 1 at 0.84-1.05 of cuBLAS
 * (f16 and bf16), faster than TMA = 0 on every shape, hence the default;
 * CLUSTER = 2 verified but ran at 0.38-0.47: its cross-block stage
 * releases were .release.cluster arrivals, each a cluster-scope fence
 * that waited for the thread's outstanding global stores; with the
 * default semantics it runs at the speed of CLUSTER = 1 (session 4).
 * A K sweep at M = N = 4096 (bench/gpu_gemm_ncu.sh) put a fixed cost of
 * about 8 us on every tile (cuBLAS: under 1): 0.67 of cuBLAS at K = 1024,
 * 1.05 at K = 16384; skipping the stores took 4096^3 from 0.89 to 0.99.
 * The staged epilogue (EPI = 1, the default) brought the nine 8B shapes
 * to 0.93-1.13 of cuBLAS (from 0.82-1.09 with EPI = 0 in the same run).
 *
 * Split-K (SK != 1), for GEMMs with too few tiles to fill the GPU (the
 * M = 128 GEMMs of short prompts and batched decode: 32 tiles of 128x128
 * for N = 4096 on 132 SMs): the work is sk·tiles units, sk = SK or, for
 * SK = 0, gridDim / tiles (the @grid: 8 per tile, PERSIST: within the
 * SMs) within 1 .. min(8, stages of K, what the workspace holds; blocks
 * past the units have nothing to do), unit u the K stages
 * [s·kc, min(kt, (s+1)·kc)) of tile u / sk, s = u % sk, kc =
 * cdiv(kt, sk), walked as the tiles are without it (the slices of a tile
 * are neighbours, so they run in the same wave). Each consumer warpgroup
 * writes its fp32 accumulators to its slot of the module workspace (per
 * block tile, slice and warpgroup; each thread's fragments as float4
 * chunks, coalesced), fences, and counts itself in at the counter of its
 * (block tile, warpgroup). The tile's 64-column blocks are then summed
 * (each from the sk slots in slice order, so the result does not depend on
 * which slice finished first) and finished by the slices that know every
 * slice has stored: the last to count in, and, where every unit has a
 * block of its own (PERSIST, units <= blocks: all may be resident at
 * once), the others once they see the count complete, waiting at most
 * WG_WAIT_NS. Each claims its share (block b by slice b mod sk, a flag per
 * block), and the last to count in then claims whatever is left, so the
 * sum costs each slice about one tile's worth of loads when all wait, and
 * a GPU that does not hold them all at once (shared under MPS) costs the
 * wait, never a hang. gemm_add adds C once, in the epilogue. The last
 * slice to leave resets the counters and flags; as with
 * attention_decode's split, two launches of one code object must not run
 * concurrently (the runtime serialises them on its one stream).
 *
 * gemm_swiglu (PAIR = 2): a B tile is made of two halves, gate rows
 * n0 .. n0+BN/2-1 and up rows N+n0 .. N+n0+BN/2-1 of W. One m64nBN wgmma
 * then yields gate columns 0 .. BN/2-1 and up columns BN/2 .. BN-1 of the
 * tile side by side, and the thread holding gate column j also holds up
 * column j (fragment columns repeat every 8): the epilogue writes
 * g / (1 + e^-g) · u computed in fp32 and rounded once (e^-g overflowing
 * to inf gives silu = -0). TMA = 1: one map over all of W [2N, K] with
 * boxes of BN/2 rows; the gate half of a tile is the box at row n0, the
 * up half the box at row N + n0. Where n0 + BN/2 passes N (ragged N), the
 * gate box reads up rows (zeros only past 2N) and the up box zeros: both
 * feed only columns j >= N, which the epilogue does not store, so no value
 * of C depends on them. CLUSTER = 2: block r of the pair loads half r
 * (gate, up) and multicasts it to both blocks. EPI = 1 stages the
 * SwiGLU'd 64x64 subtiles of C (a tile has BN/2 columns of C, so
 * BN >= 128). Measured (H100, 2026-11-22): TMA = 1 at 1.13-1.31 of torch
 * (matmul + silu·mul), TMA = 0 at 0.92-1.05, CLUSTER = 2 at 0.54-0.58
 * (before its stage releases lost their cluster-scope fence); TMA = 1 is
 * the default. Session 4, one run: EPI = 0 at 1.17-1.30, EPI = 1 at
 * 1.13-1.26, EPI = 1 with CLUSTER = 2 at 1.17-1.34 (within the spread of
 * runs; the tuner picks).
 */

#define WG_CW (BM == 64 && CWN == 1 ? 1 : 2) /* consumer warpgroups */
#define WG_CM (WG_CW / CWN)            /* ... along M (CWN along N) */
#define WG_T (128 * (WG_CW + 1))
#define WG_MT (BM / (64 * WG_CM))      /* m64 tiles per consumer warpgroup */
#define WG_CN (BN / CWN)               /* rows of B per consumer warpgroup: the wgmma's n */
/* registers per thread after setmaxnreg: producer, consumers (within the
 * 64K register file; ptxas compiles all of the kernel within the entry
 * cap of 65536 / 384 = 168, so a tile needing more per consumer thread
 * does not assemble: four warpgroups (cap 128) cannot hold a m64n256
 * accumulator) */
#define WG_PREG 40
#define WG_CREG 232
#define WG_ACC (WG_CN / 2)             /* floats per m64 tile per thread */
#define WG_NC (BN / PAIR)              /* columns of C per tile */
#define WG_NCW (WG_CN / PAIR)          /* ... per consumer warpgroup */
/* consumer warpgroup c's first row of the tile, first row of the B tile,
 * first column of C (the consumers lie along M or, CWN = 2, along N) */
#define WG_CROW(c) (CWN == 1 ? (c) * (BM / WG_CW) : 0)
#define WG_CBROW(c) (CWN == 1 ? 0 : (c) * WG_CN)
#define WG_CCOL(c) (CWN == 1 ? 0 : (c) * WG_NCW)
#define WG_RB (BK * 2)                 /* bytes per tile row */
#define WG_CH (BK / 8)                 /* 16-byte chunks per row */
#define WG_RP (128 / WG_CH)            /* rows per producer pass */
#define WG_ABYTES (BM * WG_RB)
#define WG_SBYTES ((BM + BN) * WG_RB)  /* bytes per stage */
/* the swizzle term of row r: 16-byte chunk c lies at chunk c ^ WG_SWZ(r) */
#define WG_SWZ(r) (BK == 64 ? ((r) & 7) : (((r) >> 1) & 3))
/* 64-column blocks of C per m64 tile of a consumer (one where it has
 * fewer), fragment column groups (8 columns) per block, and blocks per
 * consumer warpgroup and tile (at most 2·4): the units of the epilogue */
#define WG_NB (WG_NCW >= 64 ? WG_NCW / 64 : 1)
#define WG_BJ (WG_NCW >= 64 ? 8 : WG_NCW / 8)
#define WG_BLK (WG_MT * WG_NB)

/* split-K's state, the module's between launches (all of it back to zero
 * when a launch ends): the workspace of the slices' partials, BM·BN floats
 * per block tile and slice (the @applies bound: 4M floats, 16 MiB); per
 * block tile and consumer warpgroup (at most 4M / (2·128·64) block tiles)
 * the slices that stored (wg_cnt), those that have left (wg_done), and a
 * claim flag per column block (wg_claimed); and how long a slice waits for
 * the others before it leaves their sum to the last. */
#define WG_WSF 4194304
#define WG_TILES_MAX (WG_WSF / (2 * (BM < 128 ? BM : 128) * 64))
#define WG_SPLIT (SK != 1) /* the split-K code is there (the slice count sk may still be 1) */
#define WG_WAIT_NS 100000
GC_GLOBAL __align__(16) float wg_ws[WG_SPLIT ? WG_WSF : 4];
GC_GLOBAL unsigned wg_cnt[WG_SPLIT ? WG_TILES_MAX * WG_CW : 1];
GC_GLOBAL unsigned wg_done[WG_SPLIT ? WG_TILES_MAX * WG_CW : 1];
GC_GLOBAL unsigned wg_claimed[WG_SPLIT ? WG_TILES_MAX * WG_CW * WG_BLK : 1];
/* The descriptor of a K-major tile at s: rows of WG_RB bytes, swizzled as wide. */
GC_DEVICE uint64_t wg_desc(unsigned s) { return gc_wgmma_desc(s, 16, WG_RB); }

/* Arrivals a stage's empty barrier waits for: per consumer thread
 * (cp.async path), or per consumer warp of each block of the cluster. */
#define WG_EMPTY_COUNT (TMA ? CLUSTER * WG_CW * 4 : 128 * WG_CW)

/* A consumer thread is done reading the stage of empty barrier b. */
GC_DEVICE void wg_release(unsigned b) {
#if TMA
  __syncwarp(); /* the warp's wgmmas on the stage are complete */
  if ((gc_tid() & 31) == 0) {
#if CLUSTER > 1
    GC_UNROLL(CLUSTER)
    for (unsigned r = 0; r < CLUSTER; r++)
      gc_mbar_arrive_remote(b, r);
#else
    gc_mbar_arrive(b);
#endif
  }
#else
  gc_mbar_arrive(b);
#endif
}

/* Producer thread p (0..127) copies chunk column p % WG_CH of rows
 * p / WG_CH + i·WG_RP of an R-row tile: X points at its first row's chunk for
 * this stage, rows i >= nv of it (past the matrix) and all rows when !kok
 * (chunk past K) are zero-filled (Xb, the matrix, is then the address not
 * read). s is the tile's shared address plus this thread's offset in a
 * row group, the same for all its rows since the swizzle term is. */
template <int R>
GC_DEVICE void wg_load(unsigned s, const TA *X, int64_t K, int nv, bool kok, const TA *Xb) {
  GC_UNROLL(4)
  for (int i = 0; i < R / WG_RP; i++) {
    bool ok = kok && i < nv;
    gc_cp_async16(s + i * WG_RP * WG_RB, ok ? X : Xb, ok ? 16 : 0);
    X += WG_RP * K;
  }
}

/* Rows of an R-row tile at row r0 (of nr) that producer row rr,
 * rr + WG_RP, ... finds inside the matrix. */
GC_DEVICE int wg_rows(int64_t r0, int64_t nr, int rr, int R) {
  return (int)gc_max64(0, gc_min64(R / WG_RP, gc_cdiv(nr - r0 - rr, WG_RP)));
}

/* ---- the epilogue: the value of accumulator k of an m64 tile's fragments
 * (another epilogue is one more #elif here) ---- */
#if PAIR == 2
/* silu(gate)·up in fp32; the up column of gate column group j is j + BN/16
 * (CWN = 1: a consumer holds all of the tile's W rows). */
#define WG_OUT(acc, k) gc_silu_mul((acc)[k], (acc)[(k) + 4 * (WG_CN / 16)])
#else
#define WG_OUT(acc, k) (acc)[k]
#endif

/* C[m][n], C[m][n+1] := x, y (each only inside the matrix). */
GC_DEVICE void wg_store2(TC *C, int64_t M, int64_t N, int64_t m, int64_t n, float x, float y) {
  if (m >= M || n >= N)
    return;
  TC *p = C + m * N + n;
  if (N % 2 == 0) { /* n is even: an aligned pair */
    float v[2] = {x, y};
    if (GC_OP_GEMM_ADD) { /* C += A·Bᵀ: each element read once, by the thread that writes it */
      float c0[2];
      gc_ldv<2>(p, c0);
      v[0] += c0[0], v[1] += c0[1];
    }
    gc_stv<2>(p, v);
  } else {
    STORE_GEMM(p, 0, x);
    if (n + 1 < N)
      STORE_GEMM(p, 1, y);
  }
}

/* ---- the staged epilogue (EPI = 1) ----
 * Consumer warpgroup c owns buffers 2c and 2c+1 of 64x64 C elements
 * (8 KB, 128-byte rows, the 128-byte swizzle of the C map), used in turn
 * by its subtiles (e = 0, 1, ... over all of its tiles): its thread 0
 * waits until the copy engine has read buffer e % 2's previous subtile
 * (gemm_add: then loads C's subtile into it, on epilogue barrier
 * 2c + e % 2), the warpgroup writes its fragments there, fences them to
 * the async proxy, and thread 0 issues the store of the subtile to C. */
#define WG_EBYTES 8192

/* Subtile (i, q) of warpgroup c's accumulators (m64 tile i, columns
 * 64q .. 64q+63 of the block's tile at rows m, columns n of C) through
 * buffer e % 2; thread t (warp w, lane) writes its fragments: column group
 * j = 8q + jj of rows w·16 + lane/4 (+8) is 16-byte chunk jj of those rows,
 * at chunk jj ^ (row mod 8) — eight rows a warp store, each in another
 * four banks, so the stores are conflict-free. */
GC_DEVICE void wg_epi_subtile(const float *acc, int q, const gc_tmap_t *tmC, unsigned ebuf,
                              unsigned ebar, int c, int t, int64_t e, int64_t m, int64_t n) {
  const unsigned buf = ebuf + (unsigned)(2 * c + (e & 1)) * WG_EBYTES;
  const unsigned bar = ebar + 8u * (unsigned)(2 * c + (e & 1));
  if (t == 0) {
    gc_bulk_wait_read<1>(); /* the store two subtiles back has read buf */
    if (GC_OP_GEMM_ADD) {
      gc_mbar_expect_tx(bar, WG_EBYTES);
      gc_tma_load(buf, tmC, (int)n, (int)m, bar);
    }
  }
  gc_named_sync(1 + c, 128);
  if (GC_OP_GEMM_ADD) /* C's subtile has landed (each buffer's barrier completes every other e) */
    gc_mbar_wait(bar, (unsigned)((e >> 1) & 1));
  const int w = t >> 5, lane = t & 31;
  GC_UNROLL(2)
  for (int h = 0; h < 2; h++) {
    const int r = w * 16 + (lane >> 2) + 8 * h;
    GC_UNROLL(8)
    for (int jj = 0; jj < 8; jj++) {
      const unsigned a = buf + (unsigned)(r * 128 + ((jj ^ (r & 7)) << 4) + (lane & 3) * 4);
      float x = WG_OUT(acc, 4 * (8 * q + jj) + 2 * h), y = WG_OUT(acc, 4 * (8 * q + jj) + 2 * h + 1);
      if (GC_OP_GEMM_ADD) { /* C += A·Bᵀ, summed in fp32 and rounded once */
        uint32_t old;
        float c0[2];
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(old) : "r"(a) : "memory");
        gc_unpack2(TC(), old, c0);
        x += c0[0], y += c0[1];
      }
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(gc_pack2(TC(), x, y)) : "memory");
    }
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* visible to the copy engine */
  gc_named_sync(1 + c, 128);
  if (t == 0) {
    gc_tma_store(tmC, (int)n, (int)m, buf);
    gc_bulk_commit();
  }
}

/* Tile t of the grouped raster: RASTER rows of (CLUSTER·BM)-row super-
 * tiles at a time, column by column (consecutive tiles share B tiles in
 * L2); block `rank` of the cluster takes its BM rows of the super-tile. */
GC_DEVICE void wg_tile(int64_t t, int64_t nbm, int64_t nbn, int rank, int64_t *m0, int64_t *n0) {
  const int64_t gsz = (int64_t)RASTER * nbn, first = t / gsz * RASTER;
  const int64_t rows = gc_min64(nbm - first, RASTER);
  *m0 = (first + t % gsz % rows) * (BM * CLUSTER) + rank * BM;
  *n0 = t % gsz / rows * WG_NC;
}

/* Unit u of the walk (split-K): tile u / sk (wg_tile) and its K stages
 * [*k0, *k1) of kt_n, slice u % sk; sk = 1: the whole K. */
GC_DEVICE int64_t wg_unit(int64_t u, int sk, int64_t kt_n, int64_t *k0, int64_t *k1) {
  const int64_t kc = gc_cdiv(kt_n, sk), s = u % sk;
  *k0 = gc_min64(kt_n, s * kc);
  *k1 = gc_min64(kt_n, *k0 + kc);
  return u / sk;
}

/* ---- split-K: the partials' hand-off ----
 * Workspace slot (block tile bt, slice s, warpgroup c): thread t's
 * fragments as float4 chunks, chunk x (x = i·WG_ACC/4 + j/4 for acc[i][j])
 * at float 512·x + 4·t, so a warpgroup's loads and stores of a chunk are
 * coalesced. */
GC_DEVICE float4 *wg_slot(int64_t bt, int sk, int s, int c, int t) {
  return reinterpret_cast<float4 *>(wg_ws + ((bt * sk + s) * WG_CW + c) * (BM * BN / WG_CW)) + t;
}

/* Store this warpgroup's accumulators to its slot, fence, and count the
 * slice in: returns the number of slices stored before it (thread 0's;
 * the others' 0). */
GC_DEVICE unsigned wg_split_put(float (*acc)[WG_ACC], int64_t bt, int sk, int s, int c, int t) {
  float4 *ws = wg_slot(bt, sk, s, c, t);
  GC_UNROLL(WG_MT)
  for (int i = 0; i < WG_MT; i++)
    GC_UNROLL(WG_ACC / 4)
    for (int j = 0; j < WG_ACC / 4; j++)
      __stcg(ws + (i * (WG_ACC / 4) + j) * 128,
             make_float4(acc[i][4 * j], acc[i][4 * j + 1], acc[i][4 * j + 2], acc[i][4 * j + 3]));
  gc_fence_device();
  gc_named_sync(1 + c, 128);
  return t == 0 ? gc_atomic_add(&wg_cnt[bt * WG_CW + c], 1u) : 0u;
}

/* acc[i]'s chunks x0 .. x0+NX-1 (and, where up is set, their gemm_swiglu
 * up chunks x + BN/16) := the sums of the sk slots' chunks in slice order;
 * all chunks' loads of one slice in flight together (the sum is
 * latency-bound). */
template <int NX>
GC_DEVICE void wg_split_sum(float *acc, int i, int x0, bool up, int64_t bt, int sk, int c, int t) {
  const int nu = up ? 2 : 1;
  GC_UNROLL(NX)
  for (int x = 0; x < NX; x++)
    GC_UNROLL(2)
    for (int h = 0; h < nu; h++)
      GC_UNROLL(4)
      for (int r = 0; r < 4; r++)
        acc[4 * (x0 + x + h * (WG_CN / 16)) + r] = 0.0f;
  for (int k = 0; k < sk; k++) {
    const float4 *p = wg_slot(bt, sk, k, c, t) + (i * (WG_ACC / 4) + x0) * 128;
    GC_UNROLL(NX)
    for (int x = 0; x < NX; x++)
      GC_UNROLL(2)
      for (int h = 0; h < nu; h++) {
        const float4 v = __ldcg(p + (x + h * (WG_CN / 16)) * 128);
        float *a = acc + 4 * (x0 + x + h * (WG_CN / 16));
        a[0] += v.x, a[1] += v.y, a[2] += v.z, a[3] += v.w;
      }
  }
}

/* The epilogue of column block q of m64 tile i of the warpgroup's rows of
 * the tile at (m0, n0): EPI = 1 the 64x64 subtile through shared memory
 * (e: the warpgroup's subtiles so far), EPI = 0 its fragments from
 * registers (rows w·16 + lane/4 (+8), columns 8·j + 2·(lane%4)). */
GC_DEVICE void wg_epi_block(const float *acc, int i, int q, TC *C, int64_t M, int64_t N,
                            const gc_tmap_t *tmC, unsigned ebuf, unsigned ebar, int c, int t,
                            int64_t *e, int64_t m0, int64_t n0) {
  const int64_t mt = m0 + WG_CROW(c) + i * 64; /* the m64 tile's first row */
  n0 += WG_CCOL(c);                             /* the consumer's first column */
  if (EPI) {
    wg_epi_subtile(acc, q, tmC, ebuf, ebar, c, t, (*e)++, mt, n0 + q * 64);
    return;
  }
  const int w = t >> 5, lane = t & 31;
  const int64_t m = mt + w * 16 + (lane >> 2);
  GC_UNROLL(WG_BJ)
  for (int jj = 0; jj < WG_BJ; jj++) {
    const int j = q * WG_BJ + jj;
    const int64_t n = n0 + j * 8 + 2 * (lane & 3);
    wg_store2(C, M, N, m, n, WG_OUT(acc, 4 * j), WG_OUT(acc, 4 * j + 1));
    wg_store2(C, M, N, m + 8, n, WG_OUT(acc, 4 * j + 2), WG_OUT(acc, 4 * j + 3));
  }
}

/* Claim for warpgroup c the column blocks of want (bit b: block b) that no
 * slice has yet, one thread a block, all at once: the mask of those it got
 * (every thread's the same; mask: a shared word of the warpgroup's). */
GC_DEVICE unsigned wg_claim(int64_t at, unsigned want, int c, int t, unsigned *mask) {
  gc_named_sync(1 + c, 128); /* every thread has read the word before */
  if (t == 0)
    mask[c] = 0u;
  gc_named_sync(1 + c, 128);
  if (t < WG_BLK && (want >> t & 1u) && atomicExch(&wg_claimed[at * WG_BLK + t], 1u) == 0u)
    atomicOr(&mask[c], 1u << t);
  gc_named_sync(1 + c, 128);
  return mask[c];
}

/* Sum (slice order) and finish the column blocks of got: block
 * b = i·WG_NB + q is m64 tile i's columns 64q .. 64q+63. */
GC_DEVICE void wg_split_finish(float (*acc)[WG_ACC], unsigned got, int64_t bt, int sk, TC *C,
                               int64_t M, int64_t N, const gc_tmap_t *tmC, unsigned ebuf,
                               unsigned ebar, int c, int t, int64_t *e, int64_t m0, int64_t n0) {
  GC_UNROLL(WG_MT)
  for (int i = 0; i < WG_MT; i++)
    GC_UNROLL(WG_NB)
    for (int q = 0; q < WG_NB; q++)
      if (got >> (i * WG_NB + q) & 1u) {
        wg_split_sum<WG_BJ>(acc[i], i, q * WG_BJ, PAIR == 2, bt, sk, c, t);
        wg_epi_block(acc[i], i, q, C, M, N, tmC, ebuf, ebar, c, t, e, m0, n0);
      }
}

/* Split-K's hand-off of warpgroup c (thread t) of block tile bt, slice s
 * of sk: store the partial; the tile's column blocks then go to the slices
 * that know every slice has stored: the last to store, and, where wait is
 * set (every unit has a block of its own, so all may be resident at once),
 * the others once they see the count complete within WG_WAIT_NS. Each
 * claims its share (block b: slice b mod sk) and the last to store then
 * whatever no slice has claimed, so a GPU that does not hold them all at
 * once (shared under MPS) costs the wait, never a hang. The last slice to
 * leave zeroes the tile's state. word: a shared word of the warpgroup's. */
GC_DEVICE void wg_split_handoff(float (*acc)[WG_ACC], int64_t bt, int sk, int s, bool wait, TC *C,
                                int64_t M, int64_t N, const gc_tmap_t *tmC, unsigned ebuf,
                                unsigned ebar, int c, int t, int64_t *e, int64_t m0, int64_t n0,
                                unsigned *word) {
  const int64_t at = bt * WG_CW + c;
  const unsigned before = wg_split_put(acc, bt, sk, s, c, t);
  if (t == 0) {
    const unsigned lastin = before == (unsigned)sk - 1;
    unsigned go = lastin;
    if (!go && wait) {
      const uint64_t end = gc_globaltimer() + WG_WAIT_NS;
      while (!(go = gc_ld_acquire(&wg_cnt[at]) >= (unsigned)sk) && gc_globaltimer() < end)
        __nanosleep(64);
    }
    word[c] = go | lastin << 1;
  }
  gc_named_sync(1 + c, 128);
  const unsigned st = word[c];
  if (st & 1) {
    gc_fence_device();
    unsigned own = 0u;
    for (int b = s; b < WG_BLK; b += sk)
      own |= 1u << b;
    wg_split_finish(acc, wg_claim(at, own, c, t, word), bt, sk, C, M, N, tmC, ebuf, ebar, c, t, e, m0,
                    n0);
    if (st & 2)
      wg_split_finish(acc, wg_claim(at, ((1u << WG_BLK) - 1u) & ~own, c, t, word), bt, sk, C, M, N,
                      tmC, ebuf, ebar, c, t, e, m0, n0);
  }
  gc_named_sync(1 + c, 128); /* the warpgroup is done with the slots */
  if (t == 0 && gc_atomic_add(&wg_done[at], 1u) == (unsigned)sk - 1) { /* every slice has left */
    wg_cnt[at] = 0u, wg_done[at] = 0u;
    for (int b = 0; b < WG_BLK; b++)
      wg_claimed[at * WG_BLK + b] = 0u; /* ready for the next launch */
  }
}

/* A consumer warpgroup (c = 0 or 1, thread t of it): for each unit, the
 * wgmmas of its stages into fp32 accumulators, then the epilogue (split-K:
 * the hand-off of the partials; word[c] a shared word of the warpgroup's). */
GC_DEVICE void wg_consumer(unsigned full, unsigned empty, unsigned s0, int c, int t, int rank,
                           int64_t t0, int64_t tstep, int64_t nbm, int64_t nbn, int64_t kt_n,
                           TC *C, int64_t M, int64_t N, const gc_tmap_t *tmC, unsigned ebuf,
                           unsigned ebar, int sk, unsigned *word) {
  if (WG_CW > 1) /* (one consumer warpgroup: the entry cap, 255, is already more) */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(WG_CREG) : "memory");
  const int64_t units = nbm * nbn * sk;
  float acc[WG_MT][WG_ACC];
  int64_t it = 0, e = 0; /* stages consumed, epilogue subtiles written */
  for (int64_t u = t0; u < units; u += tstep) {
    int64_t m0, n0, k0, k1;
    const int64_t tile = wg_unit(u, sk, kt_n, &k0, &k1);
    wg_tile(tile, nbm, nbn, rank, &m0, &n0);
    GC_UNROLL(WG_MT)
    for (int i = 0; i < WG_MT; i++)
      GC_UNROLL(WG_ACC)
      for (int j = 0; j < WG_ACC; j++)
        acc[i][j] = 0.0f;

    for (int64_t kt = k0; kt < k1; kt++, it++) {
      const int s = (int)(it % STAGES);
      gc_mbar_wait(full + 8 * s, (unsigned)((it / STAGES) & 1));
      if (!TMA) /* cp.async wrote through the generic proxy; wgmma reads through the async one */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      const unsigned sa = s0 + s * WG_SBYTES;
      const uint64_t db = wg_desc(sa + WG_ABYTES + WG_CBROW(c) * WG_RB);
      GC_UNROLL(WG_MT)
      for (int i = 0; i < WG_MT; i++)
        GC_UNROLL(WG_ACC)
        for (int j = 0; j < WG_ACC; j++)
          gc_reg_touch(acc[i][j]);
      gc_wgmma_fence();
      GC_UNROLL(BK / 16)
      for (int kk = 0; kk < BK / 16; kk++)
        GC_UNROLL(WG_MT)
        for (int i = 0; i < WG_MT; i++)
          gc_wgmma_ss<WG_CN, GC_TA == GC_BF16>(acc[i], wg_desc(sa + (WG_CROW(c) + i * 64) * WG_RB) + 2 * kk, db + 2 * kk);
      gc_wgmma_commit();
      GC_UNROLL(WG_MT)
      for (int i = 0; i < WG_MT; i++)
        GC_UNROLL(WG_ACC)
        for (int j = 0; j < WG_ACC; j++)
          gc_reg_touch(acc[i][j]);
      if (INFL) {
        gc_wgmma_wait<1>();
        if (kt > k0) /* the previous stage's wgmmas are done */
          wg_release(empty + 8 * (int)((it - 1) % STAGES));
      } else { /* this stage's are: release it now (the other warpgroup's
                  wgmmas keep the tensor cores busy meanwhile) */
        gc_wgmma_wait<0>();
        wg_release(empty + 8 * s);
      }
    }
    gc_wgmma_wait<0>();
    if (INFL && k1 > k0)
      wg_release(empty + 8 * (int)((it - 1) % STAGES));
    GC_UNROLL(WG_MT)
    for (int i = 0; i < WG_MT; i++)
      GC_UNROLL(WG_ACC)
      for (int j = 0; j < WG_ACC; j++)
        gc_reg_touch(acc[i][j]);
    if (WG_SPLIT && sk > 1) {
      wg_split_handoff(acc, tile * CLUSTER + rank, sk, (int)(u % sk), PERSIST && units <= tstep, C, M,
                       N, tmC, ebuf, ebar, c, t, &e, m0, n0, word);
      continue;
    }

    /* the producer meanwhile fills the stages of the next tile */
    GC_UNROLL(WG_MT)
    for (int i = 0; i < WG_MT; i++)
      GC_UNROLL(WG_NB)
      for (int q = 0; q < WG_NB; q++)
        wg_epi_block(acc[i], i, q, C, M, N, tmC, ebuf, ebar, c, t, &e, m0, n0);
  }
  if (EPI && t == 0) /* the stores complete before the block's shared memory goes */
    gc_bulk_wait_all();
}

/* The producer of the TMA path, one thread: for each stage of each of the
 * block's tiles, arm the full barrier with the stage's bytes and issue
 * the A box and the B box (gemm_swiglu: the gate and the up box of W;
 * CLUSTER = 2: this block's half of B, or of gate and up, to both blocks
 * of the pair). */
GC_DEVICE void wg_tma_producer(const gc_tmap_t *tmA, const gc_tmap_t *tmB, int64_t N,
                               unsigned full, unsigned empty, unsigned s0, int rank, int64_t t0,
                               int64_t tstep, int64_t nbm, int64_t nbn, int64_t kt_n, int sk) {
  int64_t it = 0;
  for (int64_t u = t0; u < nbm * nbn * sk; u += tstep) {
    int64_t m0, n0, k0, k1;
    wg_tile(wg_unit(u, sk, kt_n, &k0, &k1), nbm, nbn, rank, &m0, &n0);
    for (int64_t kt = k0; kt < k1; kt++, it++) {
      const int s = (int)(it % STAGES);
      if (it >= STAGES) { /* both blocks' consumers released the stage */
        gc_mbar_wait(empty + 8 * s, (unsigned)((it / STAGES - 1) & 1));
      }
      const unsigned sa = s0 + s * WG_SBYTES, f = full + 8 * s;
      const int x = (int)(kt * BK);
      gc_mbar_expect_tx(f, WG_SBYTES);
      gc_tma_load(sa, tmA, x, (int)m0, f);
#if CLUSTER > 1
      gc_tma_load_mc(sa + WG_ABYTES + rank * (BN / CLUSTER) * WG_RB, tmB, x,
                (int)(PAIR == 2 ? rank * N + n0 : n0 + rank * (BN / CLUSTER)), f,
                (uint16_t)((1u << CLUSTER) - 1));
#else
      gc_tma_load(sa + WG_ABYTES, tmB, x, (int)n0, f);
      if (PAIR == 2)
        gc_tma_load(sa + WG_ABYTES + (BN / 2) * WG_RB, tmB, x, (int)(N + n0), f);
#endif
    }
  }
}

/* The cp.async producer (TMA = 0): the warpgroup's 128 threads, each
 * copying its chunk column of rows, signalling when its copies land. */
GC_DEVICE void wg_cp_producer(const TA *A, const TB *B, int64_t M, int64_t N, int64_t K,
                              unsigned full, unsigned empty, unsigned s0, int tid, int64_t t0,
                              int64_t tstep, int64_t nbm, int64_t nbn, int64_t kt_n, int sk) {
  const int c8 = (tid % WG_CH) * 8, rr = tid / WG_CH;
  const unsigned off = (unsigned)(rr * WG_RB + (((tid % WG_CH) ^ WG_SWZ(rr)) << 4));
  int64_t it = 0;
  for (int64_t u = t0; u < nbm * nbn * sk; u += tstep) {
    int64_t m0, n0, k0, k1;
    wg_tile(wg_unit(u, sk, kt_n, &k0, &k1), nbm, nbn, 0, &m0, &n0);
    const TA *pa = A + (m0 + rr) * K + c8, *pb = (const TA *)B + (n0 + rr) * K + c8,
             *pb_up = pb + N * K; /* gemm_swiglu: the up rows */
    const int na = wg_rows(m0, M, rr, BM), nb = wg_rows(n0, N, rr, WG_NC);
    for (int64_t kt = k0; kt < k1; kt++, it++) {
      const int s = (int)(it % STAGES);
      if (it >= STAGES)
        gc_mbar_wait(empty + 8 * s, (unsigned)((it / STAGES - 1) & 1));
      const unsigned sa = s0 + s * WG_SBYTES + off;
      const bool kok = kt * BK + c8 < K;
      wg_load<BM>(sa, pa + kt * BK, K, na, kok, A);
      wg_load<WG_NC>(sa + WG_ABYTES, pb + kt * BK, K, nb, kok, (const TA *)B);
      if (PAIR == 2)
        wg_load<WG_NC>(sa + WG_ABYTES + WG_NC * WG_RB, pb_up + kt * BK, K, nb, kok, (const TA *)B);
      gc_cp_async_mbar_arrive(full + 8 * s);
    }
  }
}

/* the maps the @tensormap lines declare, after the op's arguments */
#if TMA
#define WG_TMAP_AB , const __grid_constant__ gc_tmap_t tmA, const __grid_constant__ gc_tmap_t tmB
#else
#define WG_TMAP_AB
#endif
#if EPI
#define WG_TMAP_C , const __grid_constant__ gc_tmap_t tmC
#define WG_TMC &tmC
#else
#define WG_TMAP_C
#define WG_TMC NULL
#endif
#if CLUSTER > 1
#define WG_CLUSTER_DIMS __cluster_dims__(CLUSTER, 1, 1)
#else
#define WG_CLUSTER_DIMS
#endif

/* epilogue barriers: gemm_add's loads of C (gemm's go unused; gemm_swiglu has none) */
#define WG_EBARS (PAIR == 2 ? 0 : 4)

/* B: [N,K]; gemm_swiglu: W [2N,K], gate rows then up rows (tmB: its map). */
GC_KERNEL_BOUNDS(WG_T) WG_CLUSTER_DIMS
void gemm_wgmma(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K WG_TMAP_AB
                WG_TMAP_C) {
  GC_SHARED uint64_t bars[2 * STAGES + WG_EBARS]; /* full[0..S-1], empty[0..S-1], epilogue */
  GC_SHARED unsigned word[WG_CW];                 /* split-K: a word of each consumer warpgroup's */
  /* tiles of CLUSTER·BM rows: a cluster's blocks share one (and its B) */
  const int64_t nbm = gc_cdiv(M, BM * CLUSTER), nbn = gc_cdiv(N, WG_NC), tiles = nbm * nbn;
  if (tiles <= 0)
    return;
  /* slices per tile: SK, or SK = 0's choice from the grid (the slices the
   * SMs hold), the stages of K and the workspace */
  const int64_t kt_n = gc_cdiv(K, BK);
  const int sk = SK ? SK
                    : (int)gc_max64(1, gc_min64(gc_min64((int64_t)(gridDim.x / CLUSTER) / tiles, 8),
                                                gc_min64(kt_n, WG_WSF / (tiles * CLUSTER * BM * BN))));
  if (sk > 1 && tiles * CLUSTER > WG_TILES_MAX)
    return; /* (the @applies bound and SK = 0's choice keep split-K within its workspace) */
  /* PERSIST: clusters 0 .. P-1 walk units (tiles; split-K: slices of
   * tiles) c, c+P, ...; P is at most the SM count (over CLUSTER), read on
   * the device; clusters past it (a GPU with fewer SMs than the launch
   * assumed) have nothing to do. Both blocks of a cluster take the same
   * branch. */
  int64_t t0 = gc_bid() / CLUSTER, tstep = gridDim.x / CLUSTER; /* PERSIST = 0: one tile each */
  if (PERSIST) {
    unsigned nsm;
    asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
    tstep = gc_min64(tstep, (int64_t)(nsm / CLUSTER));
    if (t0 >= tstep)
      return;
  }

  const int tid = gc_tid(), wg = tid >> 7, rank = CLUSTER > 1 ? (int)gc_cluster_rank() : 0;
  const unsigned s0 = (gc_smem_addr(gc_dyn_shared()) + 1023u) & ~1023u;
  const unsigned full = gc_smem_addr(bars), empty = full + 8 * STAGES, ebar = empty + 8 * STAGES;
  const unsigned ebuf = s0 + STAGES * WG_SBYTES; /* EPI: 4 buffers of WG_EBYTES, 1024-aligned */
  if (tid == 0) {
    for (int s = 0; s < STAGES; s++) {
      gc_mbar_init(full + 8 * s, TMA ? 1 : 128);
      gc_mbar_init(empty + 8 * s, WG_EMPTY_COUNT);
    }
    for (int b = 0; b < WG_EBARS; b++)
      gc_mbar_init(ebar + 8 * b, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (CLUSTER > 1) /* the peer's barriers are initialised before anyone arrives on them */
    gc_cluster_sync();
  else
    gc_barrier();

  if (wg == 0) { /* producer: it counts stages over all of this block's tiles */
    if (WG_CW > 1)
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(WG_PREG) : "memory");
#if TMA
    if (tid == 0)
      wg_tma_producer(&tmA, &tmB, N, full, empty, s0, rank, t0, tstep, nbm, nbn, kt_n, sk);
#else
    wg_cp_producer(A, B, M, N, K, full, empty, s0, tid, t0, tstep, nbm, nbn, kt_n, sk);
#endif
  } else {
    wg_consumer(full, empty, s0, wg - 1, tid & 127, rank, t0, tstep, nbm, nbn, kt_n, C, M, N,
                WG_TMC, ebuf, ebar, sk, word);
  }
  if (CLUSTER > 1) /* no block leaves while its peer may still write to it */
    gc_cluster_sync();
}
