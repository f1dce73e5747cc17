#!/bin/bash
# attn_oproj.sh — what the O projection in the decode attention's cluster
# tail would win (issue 16's 1B: "fewer whole-vector dependencies a layer",
# the attention → O boundary), measured before it is built as an op.
#
# bench/attn_oproj.patch (against 44468ad) gives attention_decode_mma
# (CL=1, the short bucket's cluster merge) a parameter OF: every block of a
# kv head's cluster merges all of the head group's outputs (not a share),
# then multiplies them by its slice of an O weight — R = H·D/SPLIT rows of
# the group's per·D columns, copied into shared memory with bulk copies
# issued before the block's wait — and stores the fp32 partial products
# p[g][n] (the deterministic form: a later kernel would add the G partials
# to the residual in a fixed order; not modelled here). The weights are a
# stand-in of Wo's bytes (the layer's K and V cache rows, 8 MB at --ctx
# 4096, read nowhere else in the step), so the tokens are meaningless: only
# the time is used. OFL=1 reads the slice as one contiguous run (a device
# layout of Wo) instead of 512-byte rows; OFX=1 skips the products, 2 the
# weight copies, 3 both; gemv_bulk's OFP=1 makes the QKV kernel's producer
# ask L2 for the stand-in after its stream. The patch's llama.c reads
# GCORE_EXP_NO_O: set, a decode step skips its O projection launch.
# Only the 1B's shape (32 heads over 8 of 64, SPLIT 8) takes the tail.
#
# Run: on a machine with sqlite3.h, `git apply bench/attn_oproj.patch &&
# make all`; then on an sm_90 GPU (with that bin/ and lib/): `bash
# bench/attn_oproj.sh`. Needs ncu on PATH for the kernel-alone rows.
set -e
W=${W:-/tmp/attn_oproj}; mkdir -p $W; export GCORE_CACHE=$W/cache
grep -q "@param OF " templates/gpu/attention_decode_mma.cu || { echo "attn_oproj.sh: apply bench/attn_oproj.patch and build first" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
M=$W/m_1b
[ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['1b'])"
anchor=" \* @defaults attention_batch WARPS=4 SPLIT=4"
bundle() { # name, attention_decode_mma's line, gemv_bulk's line (or "")
  rm -rf $W/t; cp -r templates $W/t
  [ -z "$2" ] || sed -i "/$anchor/i\\ * @defaults attention $2 if K > 0 \&\& SM >= 90" $W/t/gpu/attention_decode_mma.cu
  [ -z "$3" ] || sed -i "/ \* @defaults rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv RS=4 KC=2048/a\\ * @defaults rmsnorm_gemm_rope_kv $3" $W/t/gpu/gemv_bulk.cu
  bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 --templates $W/t -o $W/$1.gcb -q
}
bundle base "" ""
bundle of "OF=1" ""
bundle ofl "OF=1 OFL=1" ""
bundle ofp "OF=1" "OFP=1"
for x in 1 2 3; do bundle ofx$x "OF=1 OFX=$x" ""; done
toks=$(python3 -c "print(','.join(str(i % 1000 + 1) for i in range(128)))")
run() { # bundle, env
  env $2 bin/gcore-run -m $M -b $W/$1.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 4096 --tokens $toks -n 256 --warmup 8 2>$W/err |
    python3 -c "import json, sys; print('$1 ${2#X=0}', round(json.load(sys.stdin)['decode_tok_per_s'], 1))" || tail -2 $W/err
}
echo "decode tok/s after 128 tokens (GCORE_EXP_NO_O=1: no O launch)"
for rep in 1 2; do
  run base X=0; run base GCORE_EXP_NO_O=1
  for b in of ofl ofp ofx1 ofx2 ofx3; do run $b GCORE_EXP_NO_O=1; done
done
if command -v ncu >/dev/null; then
  echo "the attention kernel alone (ncu, one launch of a decode step, no graph), us"
  for b in base of ofl ofp ofx1 ofx2 ofx3; do
    printf '%s ' $b
    ncu --kernel-name regex:attention_decode_mma --launch-skip 40 --launch-count 1 --section SpeedOfLight \
      bin/gcore-run -m $M -b $W/$b.gcb --backend cuda --temp 0 --ignore-eos --ctx 4096 --tokens $toks -n 4 --no-graph 2>&1 |
      awk '/Duration/ {print $3}'
  done
fi
date -u
