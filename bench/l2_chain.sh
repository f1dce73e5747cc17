#!/bin/bash
# l2_chain.sh — issue 16: L2 windows on the decode step's other GEMVs,
# now that their copies carry evict_first (session 53), measured before
# they are built. bench/l2_chain.patch (on 5a4cce7) reads three windows
# from the environment, in MB: GCORE_EXP_L2Q, QKV's launch asks L2 for
# the O projection's weights; GCORE_EXP_L2F, gate/up's for down's;
# GCORE_EXP_L2D, down's for the next layer's QKV weights. O's window
# (--l2-window, 32 MB) stays as built. The bench's random-weight model of
# shape S (1b default, 8b), untuned, `gcore-run --temp 0 --ignore-eos -n
# 256 --warmup 8` after 128 prompt tokens; each plan's tokens compared
# with the first run's.
#
# Run: `git apply bench/l2_chain.patch && make all` here; then on an sm_90
# GPU with that bin/ and lib/: `bash bench/l2_chain.sh [shape]` (PLANS:
# space-separated Q,F,D triples in MB).
set -e
S=${1:-1b}
W=${W:-/tmp/l2_window}; mkdir -p $W; export GCORE_CACHE=$W/cache
grep -q GCORE_EXP_L2D bin/gcore-run lib/*.so 2>/dev/null || { echo "l2_chain.sh: apply bench/l2_chain.patch and build first" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
M=$W/m_$S
[ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['$S'])"
[ -f $W/$S.gcb ] || bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 -o $W/$S.gcb -q
run() { # Q,F,D
  IFS=, read -r q f d <<< "$1"
  GCORE_EXP_L2Q=$q GCORE_EXP_L2F=$f GCORE_EXP_L2D=$d bin/gcore-run -m $M -b $W/$S.gcb --backend cuda --temp 0 \
    --ignore-eos --json --ctx 1024 --tokens $(seq -s, 1 128) -n 256 --warmup 8 > $W/o.json 2>$W/err || { tail -2 $W/err; return; }
  [ -f $W/chain_ref.json ] || cp $W/o.json $W/chain_ref.json
  python3 -c "
import json; d = json.load(open('$W/o.json')); t = d['tokens']; r = json.load(open('$W/chain_ref.json'))['tokens']
print('$S Q,F,D = $1 MB: %.1f tok/s, tokens %s' % (d['decode_tok_per_s'], 'as the first run' if t == r else 'DIFFER'))"
}
rm -f $W/chain_ref.json
echo "decode tok/s, 256 tokens after 128 prompt tokens (O's window: 32 MB)"
for rep in 1 2; do
  for p in ${PLANS:-0,0,0 0,0,6 0,0,12 8,0,0 4,0,0 0,8,0 0,16,0 8,0,12 4,0,6}; do run $p; done
done
date -u
