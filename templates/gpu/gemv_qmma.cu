/* gemv_qmma.cu — NVIDIA tensor-core GEMV with B in a block format (the
 * quantized decode path: M = 1 .. 8·NT rows of A), A and C f16 or bf16,
 * B's rows blocks of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K (base/quant.h),
 * dequantized in registers straight into mma fragments, fp32
 * accumulation: C[M,N] = A[M,K] · B[N,K]ᵀ (gemm_add: C += A·Bᵀ), the
 * gate/up pair with the SwiGLU epilogue (gemm_swiglu: W[2N,K]) and both
 * with A's rows RMS-normalised on the way (rmsnorm_*), and the QKV
 * projection with rope_kv in its epilogue (rmsnorm_gemm_rope_kv).
 *
 * @template gemv_qmma
 * @op gemm gemm_add rmsnorm_gemm gemm_swiglu rmsnorm_gemm_swiglu rmsnorm_gemm_rope_kv
 * @backend cuda
 * @dtypes f16:q8_0:f16 f16:q4_0:f16 f16:q4_k:f16 f16:q5_k:f16 f16:q6_k:f16 bf16:q8_0:bf16 bf16:q4_0:bf16 bf16:q4_k:bf16 bf16:q5_k:bf16 bf16:q6_k:bf16 f16:q8_0r:f16 f16:q4_0r:f16 bf16:q8_0r:bf16 bf16:q4_0r:bf16 f16:q4_kr:f16 bf16:q4_kr:bf16 f16:q6_kr:f16 bf16:q6_kr:bf16
 * @kernel gemv_qmma
 * @param WARPS 4 8 16 default 16 -- warps per block
 * @param KS 1 2 4 8 16 default 8 -- warps that split one row tile's K range (block-level split-K)
 * @param RT 1 2 default 1 -- 16-row tiles of B per warp (gemm_swiglu: RT gate and RT up tiles)
 * @param UNR 2 4 8 16 default 8 -- units (32 elements) of each row a step copies (256-element blocks: UNR 8 or 16, whole blocks)
 * @param NST 2 3 4 default 2 -- steps in the warp's copy pipeline (NST - 1 in flight while one is decoded); RL 3: stages in the block's shared-memory ring
 * @param NT 1 2 default 1 -- 8-row tiles of A: rows up to 8·NT are served
 * @param OCC 1 2 4 default 1 -- blocks per SM the register budget is planned for (65536 / (OCC * threads) per thread; 1: no cap below 255)
 * @param XS 0 1 default 0 -- rmsnorm_*: A's normalised operands x·w (hi, lo) computed once per block into shared memory, in the lanes' fragment order, before the units (1), or by every warp per unit from global memory (0)
 * @param KQ 0 1 default 0 -- the K-quants (QMIN: a min beside each unit's scale): 0 decodes each unit's 6-bit scale and min on its own and scales a fresh accumulator by them; 1 takes the block's sixteen from its words once (gcq_scales_k4), with f16 A folds the integer scale into the levels (sc·q is exact in f16) so that one accumulator a block is scaled by d once, and with XS stages each unit's Σa with the operands instead of an mma of ones
 * @param PT 0 1 default 0 -- RL 3: 0 one row tile a block; 1 a grid of SMS·OCC blocks (the device's count at launch), each walking row tiles bid, bid + grid, ..., its ring streaming on from one tile into the next, XS staged once a block, and every SM taking its share of the rows to within a tile (a part-filled last round of resident blocks costs a whole one: bench/RESULTS.md, session 24)
 * @param RL 0 1 2 3 default 1 -- the device layouts (QR: Q8_0R, Q4_0R, Q4_KR, Q6_KR): 0 copies through the shared-memory pipeline, 1 loads a lane's part of each block straight into registers (16-byte loads), 2 also the next block's while one is decoded, 3 streams the block's rows through a shared-memory ring that a producer warp fills with tensor-map copies (sm_90); GGUF formats: 1, the pipeline (their parts are unaligned)
 * @defaults gemm_swiglu rmsnorm_gemm_swiglu WARPS=4 KS=4 -- the pair's rows take twice the copy pipeline (Q6_K: 245 KB at 16 warps); four warps a block measured best for every format (bench/RESULTS.md, session 11)
 * @defaults rmsnorm_gemm rmsnorm_gemm_rope_kv WARPS=4 KS=4 RT=2 -- QKV and the LM head: two tiles a warp share the fused norm's operands (best for every format but Q4_K's QKV, a tie)
 * @defaults gemm gemm_add gemm_swiglu RL=3 WARPS=8 if SM >= 90 && QR -- sm_90, device layouts: the tensor-map ring, 8 warps a block (down 0.51 -> 0.62 of copy bandwidth for Q4_0R, 0.62 -> 0.76 for Q8_0R; bench/RESULTS.md, session 14)
 * @defaults rmsnorm_gemm rmsnorm_gemm_swiglu rmsnorm_gemm_rope_kv RL=3 XS=1 if SM >= 90 && QR -- sm_90, device layouts: the ring and the staged operands (gate/up 0.41 -> 0.53 for Q4_0R, 0.53 -> 0.73 for Q8_0R; session 14); where XS=1 does not apply (M·K > 16384) gen's nearest usable point is XS=0
 * @defaults rmsnorm_gemm rmsnorm_gemm_swiglu rmsnorm_gemm_rope_kv WARPS=8 if SM >= 90 && QR && SB == 224 && M <= 8 -- and Q6_KR (224-byte blocks; more decoding per byte) at up to 8 rows of A (past them, NT=2, 8 warps spill) with 8 warps a block: LM head 0.62 -> 0.76 of copy bandwidth, QKV 0.38 -> 0.48, gate/up 0.54 -> 0.60 (Q4_0R, Q8_0R, Q4_KR lose 4-12% with 8; session 15)
 * @defaults rmsnorm_gemm WARPS=8 KS=8 RT=1 if SM >= 90 && QR && N <= 2048 && M <= 8 -- a small N (a split QKV's V: 1024 rows for 8B) in 16-row blocks, or it fills few SMs (Q6_KR V 1024×4096: 9.3 -> 4.6 us; session 21)
 * @defaults gemm gemm_add gemm_swiglu KQ=1 if SM >= 90 && QR && QMIN -- sm_90, Q4_KR: the block's scales once and one accumulator a block (down 20.6 -> 19.7 us; bench/RESULTS.md, session 20)
 * @defaults gemm gemm_add OCC=2 if SM >= 90 && QR && (QMIN || SB == 224) && M <= 8 -- and for Q4_KR and Q6_KR the register budget of two blocks an SM (Q4_KR, KQ=1: O 8.8 -> 6.6 us f16, 6.8 bf16, down 20.7 -> 15.8 f16, 20.5 -> 16.6 bf16; Q6_KR: O 8.9 -> 7.5, down 21.0 -> 16.9; Q4_0R and Q8_0R unchanged; past 8 rows, NT=2, it spills; session 20)
 * @defaults rmsnorm_gemm rmsnorm_gemm_swiglu rmsnorm_gemm_rope_kv KQ=1 if SM >= 90 && QR && QMIN && !ABF -- the same with the fused norm, f16 A, whose scales fold into the levels (QKV 13.4 -> 10.1 us, gate/up 46.1 -> 32.6, LM head 189 -> 123; bf16 gate/up 45.8 -> 49.0: not for bf16; session 20)
 * @defaults rmsnorm_gemm rmsnorm_gemm_swiglu OCC=4 if SM >= 90 && QR && QMIN && !ABF && N >= 14336 && M <= 8 -- Q4_KR's gate/up and LM head, f16 A, four blocks an SM (96 registers, no spill; the split-K sums share the dynamic shared memory): gate/up 32.0 -> 30.3 us, LM head 122.9 -> 119.4 (QKV, down, O lose; Q4_0R and bf16 spill; session 21)
 * @defaults rmsnorm_gemm WARPS=4 KS=1 NST=3 if SM >= 90 && QR && SB == 224 && !ABF && N >= 65536 && M <= 8 -- Q6_KR's LM head, f16 A: each warp all of K for its 32 rows, three stages (128256×4096: 145.9 -> 125.0 us, 0.89 of copy; gcore-tune on the H200, bench/RESULTS.md, session 22)
 * @constraint WARPS % KS == 0 -- warps form whole row groups
 * @constraint (WARPS + (RL == 3)) * WARP <= MAXT -- a legal block (RL 3: and its producer warp)
 * @constraint WARP == 32 -- NVIDIA warps
 * @constraint OCC * (WARPS + (RL == 3)) * WARP <= 2048 -- that many blocks can be resident
 * @constraint SB < 100 || UNR % 8 == 0 -- a step of a 256-element format is whole blocks (its scales lead the block)
 * @constraint QR == 1 || RL == 1 -- only the device layouts choose their loads
 * @constraint QR == 0 || RL == 0 || (UNR == 8 && (NST == 2 || RL == 3)) -- register loads have no copy pipeline: one value of its parameters (the ring of RL 3 takes NST stages of one block a warp)
 * @constraint XS == 0 || NORM -- only the fused norm's operand takes work to make
 * @constraint KQ == 0 || QMIN -- only the K-quants have a unit min to fold
 * @constraint XS == 0 || 65536 + 2048 * KQ + (RL == 3) * (NST * PAIR * WARPS * 16 * RT * SB + 128) + (QR == 0 || RL == 0) * WARPS * NST * PAIR * RT * 16 * (cdiv(UNR * SB / (1 + 7 * (SB > 100)), 16) + 1) * 16 <= SMEM -- the staged operands (at most 64 KB, @applies) fit beside the copies
 * @constraint RL < 3 || SM >= 90 -- tensor-map copies and transaction-counting mbarriers (sm_90)
 * @constraint PT == 0 || RL == 3 -- only the ring streams across tiles
 * @constraint PT == 0 || KS == 1 || WARPS * (4 * PAIR * RT * NT + NT) * 128 <= 32768 -- PT: the split-K sums in static shared memory, beside the ring (which streams the next tile's stages meanwhile)
 * @constraint RL < 3 || WARPS / KS * 16 * RT <= 256 -- a stage's rows are one box of the tensor map
 * @constraint RL < 3 || (NST * PAIR * WARPS * 16 * RT * SB + 128) * OCC <= SMEM -- the ring fits, OCC blocks per SM
 * @constraint (QR == 0 || RL == 0) * WARPS * NST * PAIR * RT * 16 * (cdiv(UNR * SB / (1 + 7 * (SB > 100)), 16) + 1) * 16 * OCC <= SMEM -- the copy pipelines fit in shared memory, OCC blocks per SM
 * @constraint KS == 1 || WARPS * (4 * PAIR * RT * NT + NT) * 128 <= SMEM -- the split-K partial sums fit in shared memory (over the units' operands and copies, @shmem)
 * @constraint 4 * PAIR * RT * NT * (1 + 2 * KQ) + 16 * PAIR * RT + 4 * NT * (1 + 2 * NORM) * 2 + 56 <= min(255, 65536 * 3 / (OCC * (WARPS + (RL == 3)) * 32 * 2)) -- estimated registers (accumulators, levels and scales, A's fragments and split, addresses; not RL's block parts) within 3/2 of the budget: it errs high (136 for a Q4_KR gate/up point that fits OCC=4's 102; session 21), and a spill is rejected once compiled (gen/resources.c)
 * @applies M >= 1 && M <= 8 * NT -- decode steps of up to 8·NT rows
 * @applies XS == 0 || M * K <= 16384 -- the staged operands, 4 bytes an element of A, in 64 KB (KQ: and Σa, 4 bytes a unit of a row, M·K/8 <= 2048)
 * @applies ROPE == 0 || RL < 3 || D * KS % (WARPS * 16 * RT) == 0 -- RL 3 with RoPE: a block's rows are whole runs of a head's pairs (two boxes of its rows a stage)
 * @grid min(cdiv(N, WARPS / KS * 16 * RT), PT * SMS * OCC + (1 - PT) * cdiv(N, WARPS / KS * 16 * RT)) 1 1
 * @block (WARPS + (RL == 3)) * WARP 1 1
 * @shmem max(XS * M * K * (32 + KQ) / 8 + (QR == 0 || RL == 0) * WARPS * NST * PAIR * RT * 256 * (cdiv(UNR * SB / (1 + 7 * (SB > 100)), 16) + 1) + (RL == 3) * (NST * PAIR * WARPS * 16 * RT * SB + 128), (KS > 1) * WARPS * (4 * PAIR * RT * NT + NT) * 128)
 * @priority 3
 * @tensormap B N K/256 WARPS/KS*16*RT/(1+ROPE) KS 0 if RL == 3 && PAIR == 1 -- RL 3: a stage of the block's rows, [QM_RB rows][KS blocks] (256-element blocks: the device layouts); with RoPE half of them, two boxes a stage
 * @tensormap W 2*N K/256 WARPS/KS*16*RT KS 0 if RL == 3 && PAIR == 2 -- the same of its gate rows, then of its up rows
 * @pdl -- waits for the kernel before it (gc_pdl_wait) before it reads or writes anything but its rows of B (gemm_swiglu: its gate and up rows of W)
 * @prefetch -- the L2 window (gemv_bulk's): RL 3's producer asks for the block's share once its first NST stages are issued, other load paths thread 0 before the wait
 *
 * gemv_mma's structure (swapped operands: the mma's 16-row A operand is a
 * tile of 16 rows of B, its 8 columns are rows of A; split-K over warps;
 * fragments straight from global memory) with gemm_q_mma's exact
 * dequantization on tensor cores, so that the per-element work of a
 * dequantizing GEMV (gemv_q_gpu: a level extracted, converted and
 * multiplied in fp32 for every row of A) becomes one byte permute and one
 * packed subtraction per two elements, shared by all rows of A.
 *
 * Units and lanes: K is cut into units of 32 elements (the prelude's
 * gc-quant units); step s of slice k covers units (s·KS + k)·UNR + u,
 * u < UNR. With g = lane / 4 and t = lane % 4, the lane takes part t of
 * each unit (elements 4t..4t+3 and 16+4t..16+4t+3: GCQ_LOAD/GCQ_DECODE)
 * of rows g and g + 8 of each tile, and the same elements of A's row
 * 8j + g (row tile j): mma 0 of a unit takes the first four, mma 1 the
 * last four, slots 2t, 2t+1 ↔ elements 0, 1 and 2t+8, 2t+9 ↔ elements 2,
 * 3 of the four, on both operands (gemv_mma's map), so every operand is
 * the lane's own words with no shuffles.
 *
 * Loads: a lane's part of a unit is a few bytes at 2-byte alignment (Q4_0
 * and Q8_0 blocks are 18 and 34 bytes), so loading the parts from global
 * memory (8 rows per warp load, 16-bit words) is bound by the load unit,
 * not by memory (measured on an H200: 0.15-0.23 of the copy bandwidth).
 * Instead each warp copies its rows' bytes of a step (UNR units: whole
 * blocks, one contiguous range a row) into its own slot of shared memory
 * with cp.async, 16 aligned bytes a lane, row after row, in a pipeline of
 * NST steps (NST - 1 in flight while one is decoded; the first ones are
 * issued before the wait for the kernel before: weights only), and the
 * lanes read their parts from there (GCQ_LOAD on a shared address, the
 * range at its offset mod 16 in the chunks, so every field keeps its
 * alignment).
 *
 * The device layouts (Q8_0R, Q4_0R, Q4_KR: base/quant.h) put a lane's
 * part of all eight units of a 256-element block in one aligned run (32
 * or 64 bytes) and the scales in 16 bytes after the levels, so with RL >
 * 0 each lane loads its rows' runs and scales with 16-byte loads straight
 * into registers (RL 2: the next block's while one is decoded; the first
 * block before the wait for the kernel before) and no copy pipeline runs.
 * Those loads leave each warp one block of bytes in flight, waited out
 * once a block (a 4096-column row is 16 blocks, shared by KS warps). With
 * RL 3 the bytes in flight cost no registers: a lane of an extra producer
 * warp streams stage s (blocks s·KS .. s·KS + KS - 1 of each of the block's
 * PAIR·QM_RB rows: one tensor-map copy of [QM_RB rows][KS blocks] per
 * pair, @tensormap) into slot s % NST of a shared ring (gemv_bulk's full /
 * empty mbarriers), NST stages ahead; warp (group, ks) loads its lanes'
 * parts of block ks of its rows from the slot with the same 16-byte
 * loads, decodes them and then releases the slot. (A bulk copy per row,
 * 2·16·RT a stage, ran at 0.58 of the copy bandwidth on down and left the
 * fused-norm ops waiting for their stages: the copies' issue bounded it.)
 *
 * Every load path reads B with an L2 evict_first policy (gemv_bulk's: a
 * decode step reads each weight once, and L2 should keep what is read
 * again): the ring's tensor-map copies, the pipeline's cp.async copies
 * (the GGUF formats without a device layout, Q5_K among them, on every
 * NVIDIA GPU) and RL 1-2's register loads (the device layouts before
 * sm_90).
 *
 * Exactness (gemm_q_mma's scheme): the A operand holds the integer levels
 * q (exact in f16 and bf16: |q| <= 128), a unit's mmas go into a fresh
 * accumulator, which is then scaled into the output's: acc += d·(q·a), and
 * for the formats with a min (Q4_K, Q5_K) acc −= mn·Σa with Σa from an mma
 * of ones against the same A fragment. The products a·q are exact and
 * summed in fp32, so the result is A·Bᵀ with B's exact values up to fp32
 * rounding (d·q is never rounded to 16 bits). Q6_K's halves have their own
 * scales (d0, d1): its two mmas go into two accumulators.
 *
 * KQ 1 (the K-quants, QMIN): a unit's scale is d times a 6-bit integer sc
 * and its min dmin times a 6-bit m, all packed in the block's 12 bytes,
 * which KQ 0 unpacks unit by unit. KQ 1 takes all sixteen as bytes of four
 * words (gcq_scales_k4: six operations a block, the same expressions for
 * every unit, so made once), and with f16 A puts sc into the levels
 * themselves: (1024 + q)·sc − 1024·sc in one packed fma is sc·q exactly
 * (at most 63·31 < 2^11), so one accumulator takes the block's 8 units and
 * is scaled by d once at the block's last unit, as is Σ m·Σa by dmin (the
 * products sc·q·a stay exact, the sums fp32: the same bound as KQ 0's).
 * With XS the staging also sums each unit's x·w (Σa, fp32, [K/32][M]
 * floats after the operands), so no mma of ones runs, and (f16) one mma a
 * block takes Σ m·Σa over its units: the mins as an A fragment with the
 * units as k (exact: m < 64), Σa/32 as hi + lo f16 B fragments (22 bits;
 * the exact 1/32 keeps a sum inside f16's range), instead of an fma per
 * unit and row. Without the staging (f16), the mma of ones becomes an mma
 * of the unit's mins (each row's m over all k) against A's operands, which
 * adds m·Σa to the block's min sums directly (for one tile a warp, the
 * same mmas, and no fma). Per unit pair the f16 scales are made once (the
 * fma's operands take a unit's half: .H0_H0, .H1_H1), and Q4_K's odd unit
 * (the high nibbles) is decoded where it lies, as 16·q, scaled by sc/16
 * (exact in f16), which saves the shift. Measured in SASS (sm_90a, gate/up
 * at the session-21 default): the block loop 980 -> 772 instructions with
 * the mins' mma and the paired scales, 765 with the unshifted nibbles
 * (down without the staging, bench/sass.py: 492 -> 433); gate/up 30.4 ->
 * 27.8 us, QKV 6144 11.5 -> 9.4, LM head 119.4 -> 106.8 (bench/RESULTS.md,
 * session 22). bf16 keeps the per-unit scaling (sc·q is not exact in
 * bf16). KQ itself, measured in SASS (sm_90a, 8B Q4_KR defaults): the
 * unit loop 1023 -> 918 instructions a block for gate/up, 551 -> 480 for
 * down; registers 171 -> 110 with XS (session 19).
 *
 * Levels to 16 bits: a biased level byte b (< 256) becomes the f16 1024 + b
 * with one byte permute (0x6400 | b), then 1024 + bias is subtracted in
 * f16x2 (exact: small integers). bf16 has 8 significant bits: 0x4300 | b
 * is 128 + b only for b < 128, which holds for every format but Q8_0
 * (bytes up to 255); Q8_0 in bf16 goes through fp32 (2^23 + b, exact) and
 * a packing conversion.
 *
 * rmsnorm_*: x·w (w the norm weight) is the sum of two values of A's
 * dtype, hi = fl(x·w) and lo = x·w − hi (exact: packed 16-bit FMAs, two
 * instructions per two elements, where gemv_mma splits an fp32 product),
 * each multiplied by the same levels into the unit's accumulator (Σa of
 * both parts for the min); the lane's sums of squares reduced over
 * the row's 4 lanes and the KS warps, the scale applied by the owner.
 * Every warp makes the operands of its units from A and w in global
 * memory; with XS 1 the block makes all of them once (M·K·4 bytes: the
 * parts a lane loads for unit u of row m are 32 bytes at ((u·M + m)·4 + t)
 * ·32, half 0's hi, lo then half 1's) and the rows' sums of squares,
 * after the wait for the kernel before, and the units load them with two
 * 16-byte shared loads (the operand took a third of a fused-norm unit's
 * instructions: bench/RESULTS.md, session 13).
 * Reduction and epilogue are gemv_mma's: with KS > 1 the slices' partial
 * sums meet in shared memory (gc_splitk_put, gc_splitk_add), the warp of
 * slice 0 stores; C is written
 * once, by one thread (gemm_add reads it once first; the pair stores
 * silu(gate)·up in fp32, rounded once). Rows of B past N are read as row
 * N-1 and not stored; rows of A past M load zeros. K is a whole number of
 * blocks (a problem check; the kernel returns otherwise).
 *
 * rmsnorm_gemm_rope_kv (ROPE = 1, gemv.cu's op): C's N = (H+2G)·D columns
 * are token m's query, key and value heads at position pos0 + m (pos0 read
 * on the device after the wait), and the epilogue does what rope_kv does
 * with them (the prelude's gc_rope_pair): query heads rotated into Qout
 * row m, key heads into Kc row pos0 + m, value heads copied into Vc row
 * pos0 + m; no other cache row is touched. The rows of B are taken in
 * RoPE pairs: rows g and g + 8 of the block's tile i read the two
 * elements of pair 8i + g of the block's (qm_row), so the lane that owns
 * them after the reductions holds both sums. With RL 3 the block's rows
 * are two runs a stage (layout 0: pairs j0 .. of one head, elements j and
 * j + D/2; layout 1: two halves of its rows), one box each.
 *
 * Launched overlapping the kernel before it (@pdl, CUDA sm_90+), a block
 * first asks L2 for its rows of B (weights: no kernel writes them), then
 * waits for that kernel.
 */

#ifndef PAIR
#define PAIR (GC_OP_GEMM_SWIGLU || GC_OP_RMSNORM_GEMM_SWIGLU ? 2 : 1)
#endif
#ifndef NORM
#define NORM (GC_OP_RMSNORM_GEMM || GC_OP_RMSNORM_GEMM_SWIGLU || GC_OP_RMSNORM_GEMM_ROPE_KV)
#endif
#ifndef ROPE
#define ROPE GC_OP_RMSNORM_GEMM_ROPE_KV
#endif
#define QM_RG (WARPS / KS)                 /* row groups per block */
#define QM_RB (QM_RG * 16 * RT)            /* outputs (rows of B) per block */
#define QM_NACC (4 * PAIR * RT * NT)       /* fp32 accumulators per lane */
#define QM_SPLIT (NORM ? 2 : 1) /* operands x·w is split into (hi, lo) */
#define QM_NR (PAIR * RT * 16)             /* rows of B per warp */
#define QM_PIPE (QR == 0 || RL == 0)       /* units come through the copy pipeline */
#define QM_RING (RL == 3)                  /* ... or through the block's tensor-map ring */
#define QM_STB (PAIR * QM_RB * KS * GC_QBYTES) /* RL 3: bytes of a stage, row i's KS blocks at i·KS·QBYTES */
#define QM_RUNV ((GC_QBYTES - 16) / 64)    /* device layouts: 16-byte loads of a lane's part run */
#define QM_WPU (QM_RUNV * 4 / 8)           /* ... and its words per unit (Q4_0R 1, Q8_0R 2) */
#define QM_KR (GC_QMIN && GC_QK == 256)     /* register loads of Q4_KR: a Q4_K block, 16 bytes of scales */
#define QM_6K (GC_TB == GC_Q6_KR)         /* ... of Q6_KR: ql 32 bytes, qh 16, then scales and d (32) */
#define QM_QL(i) (QM_6K ? (i) : 0)         /* Q6_KR's 16-byte loads: ql's 0, 1, qh's 2 (0 elsewhere: dead code in range) */
#define QM_SR (UNR / GC_QUNITS * GC_QBYTES) /* bytes of a row per step: whole blocks */
#define QM_SC ((QM_SR + 15) / 16 + 1)      /* 16-byte chunks covering them at any even address */
#define QM_CPL ((QM_NR * QM_SC + GC_WARP - 1) / GC_WARP) /* chunks per lane and step */
/* For the lane's rows of B, each once (unrolled): rows g and g + 8 (h) of
 * tile r of pair p. */
#define QM_EACH_ROW(p, r, h)                                                                       \
  GC_UNROLL(PAIR) for (int p = 0; p < PAIR; p++) GC_UNROLL(RT) for (int r = 0; r < RT; r++)         \
      GC_UNROLL(2) for (int h = 0; h < 2; h++)
typedef gc_rope_t<TC> qm_rope_t; /* rmsnorm_gemm_rope_kv's epilogue (zeros for the other ops) */
/* Under ROPE, output slot s (n0 + 16r + g + 8h of a warp) holds element
 * QM_ELEM(s) = h of RoPE pair QM_PAIR(s): a tile's rows g and g + 8 are
 * one pair, so the lane that owns them rotates them. */
#define QM_PAIR(s) ((s) / 16 * 8 + (s) % 8)
#define QM_ELEM(s) ((s) / 8 % 2)

/* The row of B that output slot s reads: s itself, or under ROPE element
 * QM_ELEM(s) of pair QM_PAIR(s) of a head. Clamped to N - 1. */
GC_DEVICE int64_t qm_row(const qm_rope_t &ro, int64_t s, int64_t N) {
  if (ROPE && ro.D >= 2) {
    const int64_t u = QM_PAIR(s), half = ro.D / 2;
    s = u / half * ro.D + gc_rope_elem(u % half, (int)QM_ELEM(s), ro.D, ro.layout);
  }
  return gc_min64(s, N - 1);
}

#define QM_BF (GC_TA == GC_BF16) /* A's 16-bit dtype for the prelude's mma and packed ops */
#define QM_KQ (KQ && GC_QMIN)      /* K-quant scales by whole words (KQ), ... */
#define QM_FOLD (QM_KQ && !QM_BF)  /* ... folded into f16 levels, one accumulator a block */
#define QM_SAX (QM_KQ && XS)       /* ... Σa of each unit staged with the operands */
#define QM_MMIN (QM_FOLD && QM_SAX) /* ... and the block's Σ m·Σa by one mma at its last unit */
#define QM_MUNIT (QM_FOLD && !QM_SAX) /* ... or each unit's m·Σa by an mma of its mins (the mma of ones' place) */
#define QM_N16 (QM_FOLD && (GC_TB == GC_Q4_K || GC_TB == GC_Q4_KR)) /* ... odd units' nibbles unshifted, 16·q */
#define QM_ONE (QM_BF ? 0x3F803F80u : 0x3C003C00u) /* (1, 1) in A's dtype */

/* Bytes 2h, 2h+1 of w (biased levels) as two levels in A's 16-bit dtype,
 * exactly (see the opening comment). */
GC_DEVICE uint32_t qm_levels2(uint32_t w, int h) {
  const uint32_t sel = h ? 0x4342u : 0x4140u; /* (byte 2h, fill, byte 2h+1, fill) */
#if GC_TA == GC_BF16
  if (GC_QBIAS >= 128) { /* Q8_0, Q8_0R: bytes up to 255 */
    const float a = __uint_as_float(__byte_perm(w, 0x4B000000u, h ? 0x7542u : 0x7540u)) - (8388608.0f + 128.0f);
    const float b = __uint_as_float(__byte_perm(w, 0x4B000000u, h ? 0x7543u : 0x7541u)) - (8388608.0f + 128.0f);
    return gc_pack2(TA(), a, b); /* exact: |level| <= 128 */
  }
  const uint32_t x = __byte_perm(w, 0x43u, sel);
  const uint32_t bias = 0x43004300u + (uint32_t)GC_QBIAS * 0x00010001u; /* (128 + bias) twice */
  return gc_fma2<1>(bias, 0xBF80BF80u, x); /* x − (128 + bias) */
#else
  uint32_t x = __byte_perm(w, 0x64u, sel), r;
  const __half2 bias = __float2half2_rn(1024.0f + (float)GC_QBIAS);
  __half2 v = __hsub2(*reinterpret_cast<__half2 *>(&x), bias);
  r = *reinterpret_cast<uint32_t *>(&v);
  return r;
#endif
}

/* 8 bytes (4 elements of A) at p, or zeros when !ok (p is then not read). */
GC_DEVICE uint2 qm_ld8(const void *p, bool ok) {
  uint2 z = {0u, 0u};
  return ok ? *(const uint2 *)p : z;
}

/* Packed 16-bit products of A's dtype: a·b rounded (hi: gc_mul2), and
 * a·b − hi with one rounding, which is exact (TwoProduct: the residual of rounding a
 * product of two 11- (8-) bit significands has at most 11 (8) bits), but
 * below the dtype's subnormal spacing (f16: 2^-24). */
GC_DEVICE uint32_t qm_residual2(uint32_t a, uint32_t b, uint32_t hi) {
  return gc_fma2<QM_BF>(a, b, hi ^ 0x80008000u);
}

/* The mma operands of A's 4 elements x (8 bytes): x itself, or under NORM
 * x·w (w: the norm weight's 4 elements) as the two parts hi + lo whose sum
 * is x·w exactly (gc_mul2, qm_residual2: packed, two instructions per two
 * elements); ss += Σ x² in fp32. op[s] holds part s as 2 registers (2
 * elements each). */
GC_DEVICE void qm_operand(uint2 x, uint2 w, float &ss, uint32_t op[QM_SPLIT][2]) {
  if (!NORM) {
    op[0][0] = x.x, op[0][1] = x.y;
    return;
  }
  const uint32_t xr[2] = {x.x, x.y}, wr[2] = {w.x, w.y};
  GC_UNROLL(2)
  for (int i = 0; i < 2; i++) {
    float xv[2];
    gc_unpack2(TA(), xr[i], xv);
    ss = gc_fma(xv[0], xv[0], ss);
    ss = gc_fma(xv[1], xv[1], ss);
    op[0][i] = gc_mul2<QM_BF>(xr[i], wr[i]);
    op[QM_SPLIT - 1][i] = qm_residual2(xr[i], wr[i], op[0][i]);
  }
}

/* Ask L2 for the n rows of B from row r (contiguous; rb bytes a row). */
GC_DEVICE void qm_prefetch(const TB *B, int64_t r, int64_t n, int64_t rb) {
  gc_prefetch_l2_range((const char *)B + r * rb, n * rb, WARPS * GC_WARP);
}

/* Copy the step of units u0 .. u0+UNR-1 (those below nu) of the warp's
 * QM_NR rows of B (tile rows n0 ..: gate rows, then up rows) into the
 * pipeline slot at shared address s (rows by qm_row): row i's 16-byte aligned chunks from
 * the one holding its first byte, QM_SC of them (those past the step's
 * last byte are zero filled, not read). One commit group per step, also
 * when there is nothing to copy, so that gc_cp_async_wait counts steps. */
GC_DEVICE void qm_fetch(unsigned s, const TB *B, const qm_rope_t &ro, int64_t N, int64_t n0, int64_t rb, int64_t u0,
                        int64_t nu, int lane, uint64_t once) {
  if (u0 < nu) {
    const int64_t lo = u0 / GC_QUNITS * GC_QBYTES, hi = gc_min64(u0 + UNR, nu) / GC_QUNITS * GC_QBYTES;
    GC_UNROLL(QM_CPL)
    for (int j = 0; j < QM_CPL; j++) {
      const int c = lane + j * GC_WARP, i = c / QM_SC, k = c % QM_SC;
      if (QM_NR * QM_SC % GC_WARP == 0 || c < QM_NR * QM_SC) {
        const int p = i / (16 * RT), rr = i % (16 * RT);
        const uint8_t *row = (const uint8_t *)B + ((int64_t)p * N + qm_row(ro, n0 + rr, N)) * rb;
        const uint8_t *first = row + lo - ((uint64_t)(row + lo) & 15);
        const int64_t nb = (row + hi) - (first + 16 * k); /* bytes of the range from this chunk on */
        gc_cp_async16_hint(s + (unsigned)c * 16, first + 16 * k, nb <= 0 ? 0 : nb >= 16 ? 16 : (int)nb, once);
      }
    }
  }
  gc_cp_async_commit();
}

/* KQ: a block's running sums of the lane's rows (QM_FOLD: Σ over its
 * units of (sc·q)·a and of m·Σa), scaled by d and dmin into acc at its
 * last unit. Unused otherwise. */
typedef struct qm_kq {
  float cb[PAIR][RT][NT][4], am[PAIR][RT][NT][4];
} qm_kq_t;

/* Σa of unit ug for the lane's columns (A's rows 8j + 2t and + 1; c[e]
 * takes column e & 1), (QM_SAX) from the staged sums or by an mma of ones
 * against A's operands x. */
GC_DEVICE void qm_unit_sums(const uint32_t x[NT][2][QM_SPLIT][2], const float *xsa, int64_t M, int64_t ug,
                            int t, float sa[NT][4]) {
  GC_UNROLL(NT)
  for (int j = 0; j < NT; j++) {
    if (QM_SAX) { /* 32-bit index: M·K/8 <= 2048 floats (@applies) */
      const int m = 8 * j + 2 * t, i = (int)ug * (int)M + m;
      sa[j][0] = sa[j][2] = m < M ? xsa[i] : 0.0f;
      sa[j][1] = sa[j][3] = m + 1 < M ? xsa[i + 1] : 0.0f;
      continue;
    }
    sa[j][0] = sa[j][1] = sa[j][2] = sa[j][3] = 0.0f;
    GC_UNROLL(QM_SPLIT)
    for (int s = 0; s < QM_SPLIT; s++) {
      gc_mma16816<QM_BF>(sa[j], QM_ONE, QM_ONE, QM_ONE, QM_ONE, x[j][0][s][0], x[j][0][s][1]);
      gc_mma16816<QM_BF>(sa[j], QM_ONE, QM_ONE, QM_ONE, QM_ONE, x[j][1][s][0], x[j][1][s][1]);
    }
  }
}

/* QM_MMIN, the block's last unit ug: Σa/32 of its units 2t and 2t + 1
 * for A's row 8j + g as mma B fragments: [j][0] the pair rounded to f16,
 * [j][1] what rounding left (hi + lo: 22 bits of each sum; the 1/32, exact,
 * keeps a sum of 32 elements inside f16's range as each element is). */
GC_DEVICE void qm_block_sums(const float *xsa, int64_t M, int64_t ug, int g, int t, uint32_t sab[NT][2]) {
  const int u0 = (int)(ug - (GC_QUNITS - 1)) + 2 * t; /* 32-bit: M·K/8 <= 2048 floats (@applies) */
  GC_UNROLL(NT)
  for (int j = 0; j < NT; j++) {
    const int m = 8 * j + g, i = u0 * (int)M + m;
    const float s0 = m < M ? xsa[i] * 0.03125f : 0.0f, s1 = m < M ? xsa[i + (int)M] * 0.03125f : 0.0f;
    float h[2];
    sab[j][0] = gc_pack2(TA(), s0, s1);
    gc_unpack2(TA(), sab[j][0], h);
    sab[j][1] = gc_pack2(TA(), s0 - h[0], s1 - h[1]);
  }
}

/* Two mins m of a row's block (its scale words raw[1..3]) as an f16 pair,
 * exactly (m < 64): of the half of unit s, the bytes that byte permute sel
 * puts beside 0x64 (1024 + m). QM_MMIN's A fragment row takes units 2t
 * and 2t + 1 as k; QM_MUNIT's unit u twice (constant over k, so the mma
 * against A's operands gives m·Σa). */
GC_DEVICE uint32_t qm_mins(const uint32_t raw[GCQ_RAW], int s, unsigned sel) {
  uint32_t scw, mw;
  gcq_scales_k4(raw[1], raw[2], raw[3], s, scw, mw);
  return gc_fma2<0>(__byte_perm(mw, 0x64u, sel), 0x3C003C00u, 0xE400E400u); /* − 1024 */
}

/* KQ: unit u's levels of one row (GCQ_DECODE's bytes lo, hi) and its
 * scales from the block's words (raw: GCQ_LOAD's). QM_FOLD: the levels
 * times the unit's integer scale sc, exact in f16 (sc·q <= 63·31), as
 * (1024 + q)·sc − 1024·sc in one fma, and its min m; else (bf16) the
 * levels and d·sc, dmin·m as the measured decoder gives them. */
GC_DEVICE void qm_kq_row(const uint32_t raw[GCQ_RAW], int u, uint32_t lo, uint32_t hi, uint32_t lv[2][2],
                         float &d0, float &mn) {
  uint32_t scw, mw;
  gcq_scales_k4(raw[1], raw[2], raw[3], u, scw, mw);
  const float m = gc_ubyte_f(mw, u & 3);
  if (QM_FOLD) {
    /* (sc, −1024·sc) of units u & ~1 and u | 1 at once (the same expressions
     * for both: made once a pair), then unit u's half of each, twice */
    const uint32_t s16 = __byte_perm(scw, 0x64u, 0x4040u + 0x0101u * (unsigned)(u & 2) + 0x0100u); /* 1024 + sc */
    /* QM_N16: the odd unit's levels are 1024 + 16·q, so its scale is sc/16 (exact) */
    const uint32_t scp = QM_N16 ? gc_fma2<0>(s16, 0x2C003C00u, 0xD400E400u) : gc_fma2<0>(s16, 0x3C003C00u, 0xE400E400u);
    const uint32_t negp = gc_mul2<0>(scp, 0xE400E400u);
    const uint32_t sc2 = gc_dup2(scp, u & 1), neg = gc_dup2(negp, u & 1);
    const uint32_t w[2] = {lo, hi};
    GC_UNROLL(2)
    for (int k = 0; k < 2; k++)
      GC_UNROLL(2)
      for (int h = 0; h < 2; h++)
        lv[k][h] = gc_fma2<0>(__byte_perm(w[k], 0x64u, h ? 0x4342u : 0x4140u), sc2, neg);
    mn = m; /* d0 is not used: the block's d and dmin scale its sums */
    return;
  }
  lv[0][0] = qm_levels2(lo, 0), lv[0][1] = qm_levels2(lo, 1);
  lv[1][0] = qm_levels2(hi, 0), lv[1][1] = qm_levels2(hi, 1);
  d0 = gc_h2f_bits(raw[0] & 0xffffu) * gc_ubyte_f(scw, u & 3);
  mn = gc_h2f_bits(raw[0] >> 16) * m;
}

/* acc += unit ug of the lane's rows of B, whose words (GCQ_LOAD's) are
 * raw[pair][tile][row g, g + 8], against A's rows; ss += the squares of
 * A's elements (NORM). QM_FOLD: into kq, flushed into acc at the block's
 * last unit. */
GC_DEVICE void qm_unit(const uint32_t raw[PAIR][RT][2][GCQ_RAW], const TA *A, const TN *Wn,
                       const unsigned char *xs, int64_t M, int64_t K, int64_t ug, int g, int t,
                       float acc[PAIR][RT][NT][4], float ss[NT], qm_kq_t &kq) {
  uint32_t x[NT][2][QM_SPLIT][2]; /* A's operands: [row tile][half][part][register] */
  if (XS) /* staged (the sums of squares too) */
    GC_UNROLL(NT)
    for (int j = 0; j < NT; j++) {
      const int64_t row = 8 * j + g;
      const uint4 z = {0u, 0u, 0u, 0u}, *v = (const uint4 *)(xs + ((ug * M + row) * 4 + t) * 32);
      GC_UNROLL(2)
      for (int h = 0; h < 2; h++) {
        const uint4 o = row < M ? v[h] : z;
        x[j][h][0][0] = o.x, x[j][h][0][1] = o.y, x[j][h][QM_SPLIT - 1][0] = o.z, x[j][h][QM_SPLIT - 1][1] = o.w;
      }
    }
  else {
    const int64_t k0 = ug * 32 + 4 * t; /* the lane's elements k0 .. k0+3, k0+16 .. k0+19 */
    const uint2 wn0 = qm_ld8(Wn + k0, NORM), wn1 = qm_ld8(Wn + k0 + 16, NORM);
    GC_UNROLL(NT)
    for (int j = 0; j < NT; j++) {
      const int64_t row = 8 * j + g;
      qm_operand(qm_ld8(A + row * K + k0, row < M), wn0, ss[j], x[j][0]);
      qm_operand(qm_ld8(A + row * K + k0 + 16, row < M), wn1, ss[j], x[j][1]);
    }
  }
  float sa[NT][4] = {}; /* Σa of the unit for the lane's columns (formats with a min) */
  if (GC_QMIN && !QM_MMIN && !QM_MUNIT)
    qm_unit_sums(x, (const float *)(xs + M * K * 4), M, ug, t, sa);
  const int u = GCQ_UNIT_IN_BLOCK(ug);
  uint32_t sab[NT][2]; /* QM_MMIN, at the block's last unit: its Σa as B fragments */
  if (QM_MMIN && u == GC_QUNITS - 1)
    qm_block_sums((const float *)(xs + M * K * 4), M, ug, g, t, sab);
  GC_UNROLL(PAIR)
  for (int p = 0; p < PAIR; p++)
    GC_UNROLL(RT)
    for (int r = 0; r < RT; r++) {
      uint32_t lv[2][2][2]; /* levels: [row g, g+8][half][register] */
      float d0[2], d1[2], mn[2];
      GC_UNROLL(2)
      for (int h = 0; h < 2; h++) {
        uint32_t lo, hi;
        GCQ_DECODE(raw[p][r][h], u, t, lo, hi, d0[h], d1[h], mn[h]);
        if (QM_N16 && (u & 1)) /* the high nibbles where they are: bytes 16·q (qm_kq_row scales by sc/16) */
          lo = raw[p][r][h][4] & 0xF0F0F0F0u, hi = raw[p][r][h][5] & 0xF0F0F0F0u;
        if (QM_KQ)
          qm_kq_row(raw[p][r][h], u, lo, hi, lv[h], d0[h], mn[h]);
        else
          lv[h][0][0] = qm_levels2(lo, 0), lv[h][0][1] = qm_levels2(lo, 1),
          lv[h][1][0] = qm_levels2(hi, 0), lv[h][1][1] = qm_levels2(hi, 1);
      }
      GC_UNROLL(NT)
      for (int j = 0; j < NT; j++) {
        if (QM_FOLD) { /* the block's sums; d and dmin at its last unit */
          float *cb = kq.cb[p][r][j], *am = kq.am[p][r][j];
          if (u == 0) /* a fresh block (zeros here, not after the flush: the first mma's C is then zero) */
            GC_UNROLL(4)
            for (int e = 0; e < 4; e++)
              cb[e] = am[e] = 0.0f;
          GC_UNROLL(QM_SPLIT)
          for (int s = 0; s < QM_SPLIT; s++) {
            gc_mma16816<0>(cb, lv[0][0][0], lv[1][0][0], lv[0][0][1], lv[1][0][1], x[j][0][s][0], x[j][0][s][1]);
            gc_mma16816<0>(cb, lv[0][1][0], lv[1][1][0], lv[0][1][1], lv[1][1][1], x[j][1][s][0], x[j][1][s][1]);
          }
          if (QM_MUNIT) { /* am += (m of rows g, g + 8) · Σa: the mins over k against the unit's operands */
            const unsigned sel = 0x4040u + 0x0101u * (unsigned)(u & 3); /* unit u's byte, twice */
            const uint32_t m0 = qm_mins(raw[p][r][0], u, sel), m1 = qm_mins(raw[p][r][1], u, sel);
            GC_UNROLL(QM_SPLIT)
            for (int s = 0; s < QM_SPLIT; s++) {
              gc_mma16816<0>(am, m0, m1, m0, m1, x[j][0][s][0], x[j][0][s][1]);
              gc_mma16816<0>(am, m0, m1, m0, m1, x[j][1][s][0], x[j][1][s][1]);
            }
          } else if (!QM_MMIN)
            GC_UNROLL(4)
            for (int e = 0; e < 4; e++)
              am[e] = gc_fma(mn[e >> 1], sa[j][e], am[e]);
          if (u == GC_QUNITS - 1) {
            if (QM_MMIN) { /* Σ over the units of m·Σa/32: units as k, hi at 2t.., lo at 2t + 8.. */
              const unsigned sel = (t & 1) ? 0x4342u : 0x4140u; /* units 2t, 2t + 1 of their half */
              const uint32_t m0 = qm_mins(raw[p][r][0], 2 * t, sel), m1 = qm_mins(raw[p][r][1], 2 * t, sel);
              GC_UNROLL(4)
              for (int e = 0; e < 4; e++)
                am[e] = 0.0f;
              gc_mma16816<0>(am, m0, m1, m0, m1, sab[j][0], sab[j][1]);
            }
            GC_UNROLL(4)
            for (int e = 0; e < 4; e++) {
              const uint32_t dd = raw[p][r][e >> 1][0]; /* the row's d (low half), dmin */
              const float v = gc_fma(gc_h2f_bits(dd & 0xffffu), cb[e], acc[p][r][j][e]);
              acc[p][r][j][e] = gc_fma(-gc_h2f_bits(dd >> 16) * (QM_MMIN ? 32.0f : 1.0f), am[e], v);
            }
          }
          continue;
        }
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        GC_UNROLL(QM_SPLIT)
        for (int s = 0; s < QM_SPLIT; s++) {
          gc_mma16816<QM_BF>(c, lv[0][0][0], lv[1][0][0], lv[0][0][1], lv[1][0][1], x[j][0][s][0], x[j][0][s][1]);
          gc_mma16816<QM_BF>(GC_QSPLIT ? c1 : c, lv[0][1][0], lv[1][1][0], lv[0][1][1], lv[1][1][1], x[j][1][s][0],
                 x[j][1][s][1]);
        }
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++) { /* c[e]: row g + 8·(e >> 1) of the tile */
          float v = gc_fma(d0[e >> 1], c[e], acc[p][r][j][e]);
          if (GC_QSPLIT)
            v = gc_fma(d1[e >> 1], c1[e], v);
          if (GC_QMIN)
            v = gc_fma(-mn[e >> 1], sa[j][e], v);
          acc[p][r][j][e] = v;
        }
      }
    }
}

/* Unit ug (byte ub of each row's copied range) from the pipeline slot st:
 * GCQ_LOAD's words of the lane's rows, then qm_unit. */
GC_DEVICE void qm_unit_smem(const unsigned char *st, const int off[PAIR][RT][2], const TA *A, const TN *Wn,
                            const unsigned char *xs, int64_t M, int64_t K, int64_t ug, int ub, int g, int t, float acc[PAIR][RT][NT][4],
                            float ss[NT], qm_kq_t &kq) {
  uint32_t raw[PAIR][RT][2][GCQ_RAW];
  QM_EACH_ROW(p, r, h)
    GCQ_LOAD(st + ((p * RT + r) * 16 + g + 8 * h) * QM_SC * 16 + off[p][r][h] + ub, GCQ_UNIT_IN_BLOCK(ug), t,
             raw[p][r][h]);
  qm_unit(raw, A, Wn, xs, M, K, ug, g, t, acc, ss, kq);
}

/* A device-layout block's part for one lane: its rows' runs and scales. */
typedef struct qm_blk {
  uint4 q[PAIR][RT][2][QM_RUNV > 0 ? QM_RUNV : 1]; /* [pair][tile][row g, g + 8][16-byte load] */
  uint4 d[PAIR][RT][2][1 + QM_6K];               /* the eight halves d (Q4_KR: d, dmin, scales; Q6_KR: scales, d) */
} qm_blk_t;

/* 16 bytes at p: global memory (read-only data, L2 policy once) or,
 * with G = 0, shared. */
template <bool G> GC_DEVICE uint4 qm_ld16(const uint8_t *p, uint64_t once) {
  return G ? gc_ldg16_hint(p, once) : *(const uint4 *)p;
}

/* Block bi of the lane's rows (br: the rows' first bytes; in global
 * memory, or with G = 0 in the ring), part t. */
template <bool G>
GC_DEVICE void qm_load_blk(qm_blk_t &b, const uint8_t *const br[PAIR][RT][2], int64_t bi, int t, uint64_t once) {
  QM_EACH_ROW(p, r, h) {
    const uint8_t *blk = br[p][r][h] + bi * GC_QBYTES;
    if (QM_6K) { /* ql's run at 32t, qh's at 128 + 16t, scales and d at 192 */
      b.q[p][r][h][0] = qm_ld16<G>(blk + 32 * t, once);
      b.q[p][r][h][QM_QL(1)] = qm_ld16<G>(blk + 32 * t + 16, once);
      b.q[p][r][h][QM_QL(2)] = qm_ld16<G>(blk + 128 + 16 * t, once);
      b.d[p][r][h][0] = qm_ld16<G>(blk + 192, once);
      b.d[p][r][h][QM_6K] = qm_ld16<G>(blk + 208, once);
      continue;
    }
    GC_UNROLL(QM_RUNV)
    for (int i = 0; i < QM_RUNV; i++)
      b.q[p][r][h][i] = qm_ld16<G>(blk + t * (GC_QBYTES - 16) / 4 + 16 * i, once);
    b.d[p][r][h][0] = qm_ld16<G>(blk + GC_QBYTES - 16, once);
  }
}

GC_DEVICE uint32_t qm_w4(uint4 v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

/* Unit u (0..7) of block bi from the lane's registers b: the words
 * GCQ_LOAD would read (Q8_0R, Q4_0R: the unit's half d, then the part's
 * QM_WPU words; Q4_KR: the 16 bytes of scales, then the two words of
 * sub-blocks 2c, 2c + 1), then qm_unit. */
GC_DEVICE void qm_unit_regs(const qm_blk_t &b, int u, int64_t bi, const TA *A, const TN *Wn,
                            const unsigned char *xs, int64_t M, int64_t K, int g, int t, float acc[PAIR][RT][NT][4], float ss[NT],
                            qm_kq_t &kq) {
  uint32_t raw[PAIR][RT][2][GCQ_RAW];
  QM_EACH_ROW(p, r, h) {
    if (QM_6K) { /* gcq_load_q6_kr's words: unit u = 4n + j, c = j % 2 */
      const int n = u >> 2, j = u & 3;
      raw[p][r][h][0] = qm_w4(b.q[p][r][h][QM_QL(n)], 2 * (j & 1));
      raw[p][r][h][1] = qm_w4(b.q[p][r][h][QM_QL(n)], 2 * (j & 1) + 1);
      raw[p][r][h][2] = qm_w4(b.q[p][r][h][QM_QL(2)], 2 * n);
      raw[p][r][h][3] = qm_w4(b.q[p][r][h][QM_QL(2)], 2 * n + 1);
      raw[p][r][h][4] = (qm_w4(b.d[p][r][h][0], 2 * n + (j >> 1)) >> (16 * (j & 1))) & 0xffffu;
      raw[p][r][h][5] = b.d[p][r][h][QM_6K].x & 0xffffu;
      continue;
    }
    if (QM_KR) {
      raw[p][r][h][0] = b.d[p][r][h][0].x, raw[p][r][h][1] = b.d[p][r][h][0].y;
      raw[p][r][h][2] = b.d[p][r][h][0].z, raw[p][r][h][3] = b.d[p][r][h][0].w;
      raw[p][r][h][4] = qm_w4(b.q[p][r][h][u >> 2], (u >> 1 << 1) & 3);
      raw[p][r][h][5] = qm_w4(b.q[p][r][h][u >> 2], ((u >> 1 << 1) + 1) & 3);
      continue;
    }
    raw[p][r][h][0] = (qm_w4(b.d[p][r][h][0], u >> 1) >> (16 * (u & 1))) & 0xffffu;
    GC_UNROLL(QM_WPU)
    for (int w = 0; w < QM_WPU; w++)
      raw[p][r][h][1 + w] = qm_w4(b.q[p][r][h][(u * QM_WPU + w) >> 2], (u * QM_WPU + w) & 3);
  }
  qm_unit(raw, A, Wn, xs, M, K, bi * GC_QUNITS + u, g, t, acc, ss, kq);
}

#if QM_RING
/* RL 3's producer (one lane), one row tile: its stage s (blocks s·KS ..
 * s·KS + KS - 1 of the QM_RB rows from row r0, and of the up rows from
 * N + r0), the ring's stage q = q0 + s (q0: the stages of the block's
 * tiles before, PT), into slot q % NST, one copy per pair, once every
 * consumer warp has released the slot's stage before. Rows and blocks past the map read as
 * zeros (rows past N are not stored; a gate box past N reads up rows) and
 * count as bytes all the same: every stage is QM_STB bytes. Under ROPE
 * the block's rows are two boxes of QM_RB / 2 (@applies: D % QM_RB == 0,
 * so they lie in one head): from rows x0 and x1 (qm_ring_row's order). */
GC_DEVICE void qm_produce(const gc_tmap_t *tm, const qm_rope_t &ro, int64_t N, int64_t r0, int64_t nblk,
                          int64_t q0, unsigned ring, unsigned full, unsigned empty, const char *pf, int64_t pf_n) {
  const uint64_t once = gc_l2_evict_first(); /* every weight byte is read once a step (gemv_bulk's policy) */
  int64_t x0 = r0, x1 = r0 + QM_RB / 2; /* ROPE, layout 1: the block's two halves */
  if (ROPE && !ro.layout) {          /* layout 0: elements j0 .. and j0 + D/2 .. of one head */
    const int64_t u = r0 / 2, half = ro.D / 2;
    x0 = u / half * ro.D + u % half, x1 = x0 + half;
  }
  for (int64_t s = 0; s * KS < nblk; s++) {
    const int64_t q = q0 + s;
    const int slot = (int)(q % NST);
    if (q >= NST)
      gc_mbar_wait(empty + 8 * slot, (unsigned)((q / NST - 1) & 1));
    gc_mbar_expect_tx(full + 8 * slot, (unsigned)QM_STB);
    const unsigned at = ring + (unsigned)(slot * QM_STB);
    if (ROPE) {
      gc_tma_load3_hint(at, tm, 0, (int)(s * KS), (int)x0, full + 8 * slot, once);
      gc_tma_load3_hint(at + (unsigned)(QM_RB / 2 * KS * GC_QBYTES), tm, 0, (int)(s * KS), (int)x1, full + 8 * slot,
                        once);
    } else {
      GC_UNROLL(PAIR)
      for (int p = 0; p < PAIR; p++)
        gc_tma_load3_hint(at + (unsigned)(p * QM_RB * KS * GC_QBYTES), tm, 0, (int)(s * KS), (int)(p * N + r0),
                          full + 8 * slot, once);
    }
    if (q + 1 == NST && pf_n > 0) /* the window once the ring's first stages are asked for */
      gc_prefetch_window(pf, pf_n, gridDim.x);
  }
}
/* Where slot i (0 .. QM_RB - 1) of the block's outputs is in a stage of
 * the ring: i, or under ROPE (element h of the block's pair v) row 2v + h
 * of the block's (layout 1) or row v of box h (layout 0). */
GC_DEVICE int qm_ring_row(const qm_rope_t &ro, int i) {
  if (!ROPE)
    return i;
  const int v = QM_PAIR(i), h = QM_ELEM(i);
  return ro.layout ? 2 * v + h : h * (QM_RB / 2) + v;
}
#define QM_TMAP , const __grid_constant__ gc_tmap_t tmB /* after the op's arguments */
#else
#define QM_TMAP
#endif

/* The block's threads (the consumer warps) meet: RL 3's producer warp is
 * not waited for. */
GC_DEVICE void qm_sync(void) {
#if QM_RING
  gc_named_sync(1, WARPS * GC_WARP);
#else
  gc_barrier();
#endif
}

/* XS 1: the operands of every unit of A's M rows into xs (qm_unit's
 * layout), with QM_SAX each unit's Σa after them (float [K/32][M]: the
 * unit's 8 parts are 8 neighbouring lanes, summed by shuffles; K is whole
 * 256-element blocks, so a warp's lanes take the loop's turns together),
 * and the rows' sums of squares into xss[0..M-1] (each warp's own first,
 * xss[8·NT·(1 + w) + m], then summed in warp order: the same bits every
 * run, where float atomics would add in the order the warps arrive, and
 * a greedy decode step near a tie would pick differently); the consumer
 * warps share the work, 4 elements (a lane's part of a unit's half) at a
 * time, QM_SU parts a thread issued together (their loads in flight at
 * once: this runs after the wait for the kernel before, so its latency is
 * the kernel's). Ends with the threads met. */
#define QM_SU 8
GC_DEVICE void qm_stage(unsigned char *xs, float *xss, const TA *A, const TN *Wn, int64_t M, int64_t K) {
  const int tid = gc_tid(), nt = WARPS * GC_WARP;
  for (int64_t m = 0; m < M; m++) {
    float ss = 0.0f;
    for (int64_t q0 = tid; q0 < K / 4; q0 += (int64_t)nt * QM_SU) {
      uint2 a[QM_SU], wv[QM_SU]; /* parts q0 + i·nt: elements 4q .. 4q+3 */
      GC_UNROLL(QM_SU)
      for (int i = 0; i < QM_SU; i++) {
        const int64_t q = q0 + (int64_t)i * nt;
        a[i] = qm_ld8(A + m * K + 4 * q, q < K / 4);
        wv[i] = qm_ld8(Wn + 4 * q, q < K / 4);
      }
      GC_UNROLL(QM_SU)
      for (int i = 0; i < QM_SU; i++) {
        const int64_t q = q0 + (int64_t)i * nt; /* unit q / 8, half q / 4 % 2, part q % 4 */
        if (q < K / 4) {
          uint32_t op[QM_SPLIT][2];
          qm_operand(a[i], wv[i], ss, op);
          const uint4 v = {op[0][0], op[0][1], op[QM_SPLIT - 1][0], op[QM_SPLIT - 1][1]};
          *(uint4 *)(xs + (((q / 8) * M + m) * 4 + q % 4) * 32 + (q / 4 % 2) * 16) = v;
        }
        if (QM_SAX) { /* Σ x·w over the part (products exact in fp32), then over the unit */
          float us = 0.0f, xv[4], wf[4];
          if (q < K / 4) {
            gc_unpack2(TA(), a[i].x, xv), gc_unpack2(TA(), a[i].y, xv + 2);
            gc_unpack2(TN(), wv[i].x, wf), gc_unpack2(TN(), wv[i].y, wf + 2);
            us = xv[0] * wf[0] + xv[1] * wf[1] + (xv[2] * wf[2] + xv[3] * wf[3]);
          }
          us = gc_group_sum(us, 8);
          if (q < K / 4 && q % 8 == 0)
            ((float *)(xs + M * K * 4))[q / 8 * M + m] = us;
        }
      }
    }
    ss = gc_warp_sum(ss);
    if (gc_lane() == 0)
      xss[8 * NT * (1 + tid / GC_WARP) + m] = ss;
  }
  qm_sync();
  if (tid < M) {
    float s = 0.0f;
    for (int w = 0; w < WARPS; w++)
      s += xss[8 * NT * (1 + w) + tid];
    xss[tid] = s;
  }
  qm_sync();
}

/* args: A, B, C, int64 M, N, K (gemm, gemm_add, gemm_swiglu: B is W);
 * A, B, C, norm[K], int64 M, N, K, float eps (rmsnorm_gemm,
 * rmsnorm_gemm_swiglu); A, B, Qout (C), norm, Kc, Vc, double inv_freq,
 * int32 pos[1], int64 M, N, K, H, G, D, layout, float eps
 * (rmsnorm_gemm_rope_kv); then RL 3's tensor map; then the L2 window
 * pf[pf_n] (@prefetch). */
GC_KERNEL_OCC((WARPS + QM_RING) * WARP, OCC)
void gemv_qmma(const TA *A, const TB *B, TC *C,
#if NORM
               const TN *Wn,
#endif
#if ROPE
               TC *Kc, TC *Vc, const double *inv_freq, const int32_t *pos,
#endif
               int64_t M, int64_t N, int64_t K
#if ROPE
               , int64_t H, int64_t G, int64_t D, int64_t layout
#endif
#if NORM
               , float eps
#endif
               QM_TMAP, const char *pf, int64_t pf_n) {
#if !NORM
  const TN *Wn = A; /* never read (NORM is 0): a pointer to offset, unlike null */
  const float eps = 0.0f;
#endif
#if ROPE
  qm_rope_t ro = {Kc, Vc, inv_freq, 0, H, G, D, layout, 0};
  const bool rope_ok = D >= 2 && D % 2 == 0 && N == (H + 2 * G) * D; /* else not the op's problem */
#else
  const qm_rope_t ro = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  const bool rope_ok = true;
#endif
#if QM_RING
  GC_SHARED uint64_t bars[2 * NST]; /* the ring's full[0..NST-1], empty[0..NST-1] */
#endif
  GC_SHARED float xss[XS ? 8 * NT * (1 + WARPS) : 1]; /* XS: the rows' sums of squares, then each warp's */
#if PT && KS > 1
  GC_SHARED float qm_red[WARPS * (QM_NACC + NT) * WARP]; /* PT: the split-K sums, beside the ring */
#define QM_RED qm_red
#else
#define QM_RED ((float *)gc_dyn_shared()) /* the split-K sums where the units' operands and copies were */
#endif
  unsigned char *const xs = gc_dyn_shared();                            /* XS: [M·K·4] staged operands */
  unsigned char *const dyn = gc_dyn_shared() + (XS ? M * K * 4 + QM_SAX * M * K / 8 : 0); /* the copies' shared memory */
  const int64_t r0 = gc_bid() * QM_RB, rb = K / GC_QK * GC_QBYTES; /* bytes per row of B */
  /* B's loads and copies (RL 3: the producer's own): every weight byte is read once a step */
  const uint64_t once = QM_RING ? 0 : gc_l2_evict_first();
  if (!QM_RING && r0 < N && K % GC_QK == 0 && rope_ok) {
    if (ROPE) /* its pairs' rows, row by row */
      for (int64_t i = 0; i < gc_min64(QM_RB, N - r0); i++)
        qm_prefetch(B, qm_row(ro, r0 + i, N), 1, rb);
    else
      qm_prefetch(B, r0, gc_min64(QM_RB, N - r0), rb);
    if (PAIR == 2)
      qm_prefetch(B, N + r0, gc_min64(QM_RB, N - r0), rb);
  }
  if (!QM_RING && gc_tid() == 0 && pf_n > 0) /* the window (RL 3: the producer's, after its first stages) */
    gc_prefetch_window(pf, pf_n, gridDim.x);
  if (NORM) /* the norm weight (every load path): read first thing after the wait */
    GC_PREFETCH_L2_ONCE(Wn, K * (int64_t)sizeof(TN), WARPS * GC_WARP);
  const int w = gc_tid() / GC_WARP, lane = gc_lane(), g = lane >> 2, t = lane & 3;
  const int grp = w / KS, ks = w % KS;
  int64_t n0 = r0 + (int64_t)grp * 16 * RT; /* the warp's first row of the block's (first) tile */
  const uint8_t *br[PAIR][RT][2]; /* rows g and g + 8 of each tile */
  QM_EACH_ROW(p, r, h)
    br[p][r][h] = (const uint8_t *)B + ((int64_t)p * N + qm_row(ro, n0 + 16 * r + g + 8 * h, N)) * rb;

  const bool ok = M >= 1 && M <= 8 * NT && N > 0 && K % GC_QK == 0 && rope_ok &&
                  (!ROPE || !QM_RING || ro.D % QM_RB == 0); /* RL 3: @applies */
  /* The block's row tiles (PT: bid, bid + grid, ...; else its one) and,
   * RL 3, the ring's stages a tile takes */
  const int64_t ntiles = gc_cdiv(N, QM_RB), spt = QM_RING ? gc_cdiv(K / GC_QK, KS) : 0;
/* Walk them: tile, its index it, and q0 the ring's stages the tiles before
 * took; the producer and the consumers walk them by this one rule. PT 0:
 * once, a trip count the compiler sees (the code is the loop's body). */
#define QM_EACH_TILE(it, tile, q0)                                                                \
  for (int64_t it = 0, tile = gc_bid(), q0 = 0; PT ? tile < ntiles : it < 1;                      \
       it++, tile += (int64_t)gridDim.x, q0 += spt)
#if QM_PIPE
  /* The warp's copy pipeline: NST steps of QM_NR rows of QM_SC chunks. */
  unsigned char *pipe = dyn + (size_t)w * NST * QM_NR * QM_SC * 16;
  const unsigned spipe = gc_smem_addr(pipe);
  const int64_t nu = K / 32, stride = (int64_t)KS * UNR;
  int64_t fetch = (int64_t)ks * UNR; /* the first unit of the next step to copy */
  GC_UNROLL(NST - 1)
  for (int s = 0; s < NST - 1; s++) { /* weights only: before the wait for the kernel before */
    if (ok)
      qm_fetch(spipe + s * QM_NR * QM_SC * 16, B, ro, N, n0, rb, fetch, nu, lane, once);
    fetch += stride;
  }
#elif QM_RING
  const int64_t nblk = K / GC_QK;
  unsigned char *ring = gc_smem_align128(dyn);
  const unsigned full = gc_smem_addr(bars), empty = full + 8 * NST;
  gc_ring_init(full, empty, NST, WARPS);
  if (w == WARPS) { /* the producer reads only B: no need to wait for the kernel before */
    if (ok && lane == 0) {
      int64_t stages = 0;
      QM_EACH_TILE(it, tile, q0) {
        qm_produce(&tmB, ro, N, tile * QM_RB, nblk, q0, gc_smem_addr(ring), full, empty, pf, pf_n);
        stages = q0 + spt;
      }
      if (stages < NST && pf_n > 0) /* fewer stages than the ring's: qm_produce never reached NST */
        gc_prefetch_window(pf, pf_n, gridDim.x);
    }
    return;
  }
  const uint8_t *sr[PAIR][RT][2]; /* rows g and g + 8 of each tile in slot 0, at the warp's block */
  QM_EACH_ROW(p, r, h)
    sr[p][r][h] = ring + ((p * QM_RB + qm_ring_row(ro, grp * 16 * RT + 16 * r + g + 8 * h)) * KS + ks) * GC_QBYTES;
#else
  const int64_t nblk = K / GC_QK;
  qm_blk_t cur; /* the lane's part of block bi of its rows; the first before the wait (weights only) */
  if (ok && ks < nblk)
    qm_load_blk<true>(cur, br, ks, t, once);
#endif
  gc_pdl_wait();
  gc_pdl_launch();
  if (!ok)
    return; /* outside @applies or the problem check */
#if ROPE
  ro.pos0 = *pos; /* on the device: a captured decode step replays at any position */
#endif
  if (XS)
    qm_stage(xs, xss, A, Wn, M, K);

  QM_EACH_TILE(it, tile, q0) {
    n0 = tile * QM_RB + (int64_t)grp * 16 * RT;
    float acc[PAIR][RT][NT][4], ss[NT];
    qm_kq_t kq; /* QM_FOLD's block sums */
    GC_UNROLL(NT)
    for (int j = 0; j < NT; j++) {
      ss[j] = 0.0f;
      GC_UNROLL(PAIR)
      for (int p = 0; p < PAIR; p++)
        GC_UNROLL(RT)
        for (int r = 0; r < RT; r++)
          GC_UNROLL(4)
          for (int e = 0; e < 4; e++)
            acc[p][r][j][e] = kq.cb[p][r][j][e] = kq.am[p][r][j][e] = 0.0f;
    }

#if QM_PIPE
    int slot = 0;
    for (int64_t c0 = (int64_t)ks * UNR; c0 < nu; c0 += stride) {
      gc_cp_async_wait<NST - 2>(); /* this lane's copies of step c0 have landed */
      gc_syncwarp();      /* ... and every lane's; the slot of the step before is free */
      qm_fetch(spipe + (slot + NST - 1) % NST * QM_NR * QM_SC * 16, B, ro, N, n0, rb, fetch, nu, lane, once);
      fetch += stride;
      const unsigned char *st = pipe + slot * QM_NR * QM_SC * 16;
      int off[PAIR][RT][2]; /* where the lane's rows' step ranges start in their first chunks */
      QM_EACH_ROW(p, r, h)
        off[p][r][h] = (int)((uint64_t)(br[p][r][h] + c0 / GC_QUNITS * GC_QBYTES) & 15);
      if (c0 + UNR <= nu) { /* a whole step: no branch between the units (their loads interleave) */
        GC_UNROLL(UNR)
        for (int u = 0; u < UNR; u++)
          qm_unit_smem(st, off, A, Wn, xs, M, K, c0 + u, (int)(u / GC_QUNITS * GC_QBYTES), g, t, acc, ss, kq);
      } else {
        for (int u = 0; c0 + u < nu; u++)
          qm_unit_smem(st, off, A, Wn, xs, M, K, c0 + u, (int)(u / GC_QUNITS * GC_QBYTES), g, t, acc, ss, kq);
      }
      slot = slot + 1 == NST ? 0 : slot + 1;
    }
    gc_cp_async_wait<0>();
#elif QM_RING
    for (int64_t s = 0; s * KS < nblk; s++) {
      const int64_t q = q0 + s; /* the ring's stage */
      const int slot = (int)(q % NST);
      const int64_t bi = s * KS + ks; /* the warp's block of its rows in stage s */
      qm_blk_t cur;
      gc_mbar_wait(full + 8 * slot, (unsigned)((q / NST) & 1));
      if (bi < nblk) {
        qm_load_blk<false>(cur, sr, (int64_t)slot * (QM_STB / GC_QBYTES), t, 0);
        GC_UNROLL(8)
        for (int u = 0; u < 8; u++)
          qm_unit_regs(cur, u, bi, A, Wn, xs, M, K, g, t, acc, ss, kq);
      }
      /* The slot is released only once the lanes have used what they read
       * of it: released straight after the loads, the copy refilling it
       * (async proxy) overtook loads still in flight now and then (wrong
       * outputs, seen on an H200), and the early release gained nothing. */
      gc_syncwarp();
      if (lane == 0)
        gc_mbar_arrive(empty + 8 * slot);
    }
#else
    for (int64_t bi = ks; bi < nblk; bi += KS) {
      qm_blk_t nxt;
      if (RL == 2 && bi + KS < nblk) /* in flight while this block is decoded */
        qm_load_blk<true>(nxt, br, bi + KS, t, once);
      GC_UNROLL(8)
      for (int u = 0; u < 8; u++)
        qm_unit_regs(cur, u, bi, A, Wn, xs, M, K, g, t, acc, ss, kq);
      if (RL == 2)
        cur = nxt;
      else if (bi + KS < nblk)
        qm_load_blk<true>(cur, br, bi + KS, t, once);
    }
#endif

    if (NORM) /* the row's sum over the warp's K slice: its 4 lanes */
      GC_UNROLL(NT)
      for (int j = 0; j < NT; j++) {
        ss[j] += gc_shfl_xor(ss[j], 1);
        ss[j] += gc_shfl_xor(ss[j], 2);
      }
    if (KS > 1) { /* the slices' partial sums, summed by the warp of slice 0, in the
                   * dynamic shared memory that the units are done with (XS's
                   * operands, the copies: @shmem's max) once every warp has left them */
      qm_sync();
      gc_splitk_put<QM_NACC, NT>(QM_RED, w, lane, &acc[0][0][0][0], ss);
      qm_sync();
      if (ks)
        continue; /* slice 0's warp stores; the others go on to the block's next tile */
      gc_splitk_add<QM_NACC, NT>(QM_RED, w, lane, KS, &acc[0][0][0][0], ss);
    }

    GC_UNROLL(NT)
    for (int j = 0; j < NT; j++) {
      float sc[2] = {1.0f, 1.0f}; /* of rows 8j + 2t and 8j + 2t + 1 of A */
      if (NORM) {
        GC_UNROLL(2)
        for (int i = 0; i < 2; i++) /* row 8j + r's sum is on lanes 4r .. 4r+3 */
          sc[i] = gc_rsqrt((XS ? xss[8 * j + 2 * t + i] : gc_shfl(ss[j], 4 * (2 * t + i))) / (float)K + eps);
      }
      GC_UNROLL(RT)
      for (int r = 0; r < RT; r++) {
        if (ROPE) { /* rows g, g + 8: pair u's two elements, for rows m of A */
          const int64_t u = (n0 + 16 * r) / 2 + g; /* QM_PAIR(n0 + 16r + g): n0 + 16r is whole tiles */
          GC_UNROLL(2)
          for (int e = 0; e < 2; e++) {
            const int64_t m = 8 * j + 2 * t + e;
            if (m < M && u < N / 2)
              gc_rope_pair(C, ro, m, u, acc[0][r][j][e] * sc[e], acc[0][r][j][2 + e] * sc[e]);
          }
          continue;
        }
        GC_UNROLL(4)
        for (int e = 0; e < 4; e++) {
          const int64_t m = 8 * j + 2 * t + (e & 1), n = n0 + 16 * r + g + 8 * (e >> 1);
          if (m < M && n < N) {
            const float v = acc[0][r][j][e] * sc[e & 1];
#if PAIR == 2
            STORE_C(C, m * N + n, gc_silu_mul(v, acc[PAIR - 1][r][j][e] * sc[e & 1]));
#else
            STORE_GEMM(C, m * N + n, v);
#endif
          }
        }
      }
    }
  }
}
