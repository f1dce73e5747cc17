#!/bin/bash
# argmax_step.sh — what moving the position on inside the decode step
# (argmax_step) buys a greedy decode, against the same bundle without
# argmax_step, where the runtime falls back to argmax and a host write of
# the position before each replay (what a bundle built before the op
# does). The bench's random-weight 1B, untuned, `gcore-run --temp 0
# --ignore-eos -n 256 --warmup 8` after P prompt tokens, alternated.
#
# Run on a GPU from the tree's bin/: `bash bench/argmax_step.sh [shape]`
# (shape: 1b, the default, or 8b).
set -e
S=${1:-1b}
W=${W:-/tmp/argmax_step}; mkdir -p $W; export GCORE_CACHE=$W/cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
M=$W/m_$S
[ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['$S'])"
bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 -o $W/new_$S.gcb -q
cp $W/new_$S.gcb $W/old_$S.gcb
python3 -c "import sqlite3; c = sqlite3.connect('$W/old_$S.gcb'); print('argmax_step rows removed:', c.execute(\"DELETE FROM dispatch WHERE op = 'argmax_step'\").rowcount); c.commit()"
run() { # bundle, prompt tokens
  bin/gcore-run -m $M -b $W/$1_$S.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 1024 \
    --tokens $(seq -s, 1 $2) -n 256 --warmup 8 2>$W/err | python3 -c "
import json, sys, hashlib; d = json.load(sys.stdin)
print('$S $1 P=$2: %.1f tok/s, tokens md5 %s' % (d['decode_tok_per_s'], hashlib.md5(str(d['tokens']).encode()).hexdigest()[:8]))" || tail -2 $W/err
}
for P in 128 700; do
  for rep in 1 2 3; do run old $P; run new $P; done
done
date -u
