#!/bin/bash
# step_gap.sh — what the stream operations between two decode steps' graph
# replays cost (issue 16's 1B): gc_llama_greedy writes the next position
# (cuStreamWriteValue32) before each replay and posts the argmax's id to
# the host (a 4-byte copy to page-locked memory and an event) after it;
# both sit in the stream between the graphs. bench/step_gap.patch makes
# GCORE_EXP_GAP=1 leave the position write out (every step at the first
# position: the same work, as the attention's keys barely cost), 2 the
# post (the host takes no id, emits 0 and queues the next step at once,
# then waits for the stream at the end), 3 both; 4 keeps the post's event
# but not its copy (the host takes a stale id), 5 that and no position write. The tokens are then
# meaningless: only the time is used.
#
# Run: `git apply bench/step_gap.patch && make all` (the patch is against
# 56bc783, before argmax_step; a machine with
# sqlite3.h), then on the GPU `bash bench/step_gap.sh`.
set -e
W=${W:-/tmp/step_gap}; mkdir -p $W; export GCORE_CACHE=$W/cache
grep -q GCORE_EXP_GAP bin/gcore-run || { echo "step_gap.sh: apply bench/step_gap.patch and build first" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
M=$W/m_1b
[ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['1b'])"
[ -f $W/b.gcb ] || bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 -o $W/b.gcb -q
toks=$(seq -s, 1 128)
for rep in 1 2 3; do
  for g in 0 1 2 3 4 5; do
    GCORE_EXP_GAP=$g bin/gcore-run -m $M -b $W/b.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 1024 \
      --tokens $toks -n 256 --warmup 8 2>$W/err | python3 -c "import json, sys; print('GCORE_EXP_GAP=$g', round(json.load(sys.stdin)['decode_tok_per_s'], 1))" || tail -2 $W/err
  done
done
date -u
