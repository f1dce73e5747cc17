#!/bin/bash
# decode_ab.sh — template folders against each other in the decode step:
# the bench's random-weight model (gpu_llama.py's write_model), a bundle
# per folder (`gcore-gen --model M --target sm_90a --prefill 128,512
# --batch 1 [--templates DIR]`, untuned), then `gcore-run --temp 0
# --ignore-eos --json -n 256 --warmup 8` after P prompt tokens, the
# bundles alternated ROUNDS times; tok/s and the md5 of the greedy ids
# (bundles whose kernels compute the same sums give the same ids).
#
# Run on a GPU from the tree's bin/:
#   bash bench/decode_ab.sh NAME=DIR [NAME=DIR ...]
# DIR: a templates root (cpu/, gpu/), or - for the built-in templates.
# Environment: S (shape, 1b), PS (prompt lengths, "128 700"), ROUNDS (3),
# W (work folder, /tmp/decode_ab), Q (q4_0, q4_k_m, q5_k_m or q8_0: the
# shape as a GGUF file of that mix, bench/gpu_llama.py's, whose decode
# GEMVs are gemv_qmma's; default: the fp16 model).
set -e
S=${S:-1b}; Q=${Q:-}; PS=${PS:-128 700}; ROUNDS=${ROUNDS:-3}
W=${W:-/tmp/decode_ab}; mkdir -p $W; export GCORE_CACHE=$W/cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
. bench/bench_model.sh; bench_model $S "$Q" $W
NAMES=()
for a in "$@"; do
  n=${a%%=*} d=${a#*=}
  t=(); [ "$d" = - ] || t=(--templates "$d")
  bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 "${t[@]}" -o $W/$n-$S.gcb -q
  NAMES+=($n)
done
run() { # bundle name, prompt tokens
  bin/gcore-run -m $M -b $W/$1-$S.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 1024 \
    --tokens $(seq -s, 1 $2) -n 256 --warmup 8 2>$W/err | python3 -c "
import json, sys, hashlib; d = json.load(sys.stdin)
print('$S %-10s P=%-4s %.1f tok/s, ids md5 %s' % ('$1', '$2', d['decode_tok_per_s'], hashlib.md5(str(d['tokens']).encode()).hexdigest()[:8]))" || tail -2 $W/err
}
for P in $PS; do
  for r in $(seq $ROUNDS); do
    for n in "${NAMES[@]}"; do run $n $P; done
  done
done
date -u
