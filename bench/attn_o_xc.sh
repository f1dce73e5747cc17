#!/bin/bash
# attn_o_xc.sh — issue 16's 1B: the decode attention and the O projection
# in one launch, with O's weights over (nearly) every SM, measured before
# it is built as an op.
#
# Session 47 put O in the tail of the short bucket's cluster merge (one
# cluster a kv head, 64 SMs) and came out even; what it lacked was Wo
# spread over all SMs. bench/attn_o_xc.patch gives attention_decode_mma a
# parameter XO: the grid is XO clusters of G = 8 blocks, block rank g of
# a cluster the whole attention of kv head g (every key: no split), so
# that a cluster holds all H·D attention outputs; cluster c then owns rows
# c·R .. +R-1 of the residual (R = H·D/XO: 128 on the 1B at XO = 16),
# block g multiplies its kv head's 4·64 outputs by Wo's slice [R rows ×
# those 256 columns] (64 KB: bulk-copied into shared memory before its
# wait, XW = 1, or asked of L2 and read after the attention, XW = 0), and
# after a cluster barrier rank g sums rows g·R/8 .. of every rank's
# partials in rank order and adds them to x (deterministic). The O
# launch goes. The attention is computed XO times over (once a cluster):
# fine at short contexts, which is the bucket it would serve.
#
# The patch's llama.c: GCORE_EXP_XO=1 passes the attention a table of
# {Wo, x} a layer in place of its output and skips the O launch when the
# short bucket's kernel runs (a bundle built with XO must run with it set:
# without it, the kernel would read the att buffer as pointers);
# GCORE_EXP_NO_O=1 skips the O launch alone (wrong tokens: the bound of
# what removing the boundary gives).
#
# Run: on a machine with sqlite3.h, `git apply bench/attn_o_xc.patch &&
# make all`; then on an sm_90 GPU (with that bin/ and lib/): `bash
# bench/attn_o_xc.sh`.
set -e
W=${W:-/tmp/attn_o_xc}; mkdir -p $W; export GCORE_CACHE=$W/cache
grep -q "@param XO " templates/gpu/attention_decode_mma.cu || { echo "attn_o_xc.sh: apply bench/attn_o_xc.patch and build first" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
M=$W/m_1b
[ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['1b'])"
anchor=" \* @defaults attention_batch WARPS=4 SPLIT=4"
bundle() { # name, attention_decode_mma's line for the short bucket (or "")
  rm -rf $W/t; cp -r templates $W/t
  [ -z "$2" ] || sed -i "/$anchor/i\\ * @defaults attention $2 if K > 0 \&\& SM >= 90" $W/t/gpu/attention_decode_mma.cu
  bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 --templates $W/t -o $W/$1.gcb -q
}
bundle base ""
bundle xo16 "XO=16 XW=1 SPLIT=1 CL=0"
bundle xo16l2 "XO=16 XW=0 SPLIT=1 CL=0"
bundle xo8l2 "XO=8 XW=0 SPLIT=1 CL=0"
bundle xp1 "XO=16 XW=0 XP=1 SPLIT=1 CL=0"
bundle xp2 "XO=16 XW=0 XP=2 SPLIT=1 CL=0"
run() { # bundle, environment, prompt tokens
  env $2 bin/gcore-run -m $M -b $W/$1.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 1024 \
    --tokens $(seq -s, 1 $3) -n 256 --warmup 8 > $W/o.json 2>$W/err || { tail -2 $W/err; return; }
  python3 -c "
import json, hashlib; d = json.load(open('$W/o.json')); t = d['tokens']
r = json.load(open('$W/ref$3.json'))['tokens'] if '$1' != 'base' or '$2' != 'X=0' else t
same = next((i for i, (a, b) in enumerate(zip(t, r)) if a != b), len(t))
print('$1 ${2#X=0} P=$3: %.1f tok/s, tokens md5 %s, the first %d as the tree\'s' % (d['decode_tok_per_s'], hashlib.md5(str(t).encode()).hexdigest()[:8], same))"
  [ "$1 $2" != "base X=0" ] || cp $W/o.json $W/ref$3.json
}
echo "decode tok/s, 256 tokens after P prompt tokens"
for P in 128 700; do
  for rep in 1 2; do
    run base X=0 $P; run base GCORE_EXP_NO_O=1 $P
    for b in xo16 xo16l2 xo8l2 xp1 xp2; do run $b GCORE_EXP_XO=1 $P; done
  done
done
date -u
