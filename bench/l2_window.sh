#!/bin/bash
# l2_window.sh — the decode step's L2 window (gcore-run --l2-window MB):
# the O projection's kernel (gemv_bulk, @prefetch) asks L2 for the first
# MB of the FFN's gate/up weights while the attention and O leave the
# DRAM time over. The bench's random-weight model of shape S (1b, the
# default, or 8b), untuned, `gcore-run --temp 0 --ignore-eos -n 256
# --warmup 8` after P prompt tokens, the window sizes alternated; every
# run's tokens are compared with the first's (the window changes no value).
#
# Run on an sm_90 GPU from the tree's bin/: `bash bench/l2_window.sh [shape]`
# (MBS: the window sizes, default "0 8 16 20 24 32"; PS: prompt lengths).
# EVF=0 also builds the bundle with the GEMVs' copies under no L2 policy
# (the cache hint taken out of gc_bulk_load_hint, gc_tma_load3_hint,
# gc_cp_async16_hint and gc_ldg16_hint in
# a copy of the templates, --templates: the copies as they were before
# session 52) and alternates it, window 0 and 32 MB, with the tree's.
# Q=q4_k_m (or q4_0, q5_k_m, q8_0): the shape as a GGUF file of that mix
# (bench/gpu_llama.py's), whose decode GEMVs are gemv_qmma's.
set -e
S=${1:-1b}
W=${W:-/tmp/l2_window}; mkdir -p $W; export GCORE_CACHE=$W/cache
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
. bench/bench_model.sh; bench_model $S "$Q" $W
bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 -o $W/$S.gcb -q
if [ "$EVF" = 0 ]; then
  rm -rf $W/t; cp -r templates $W/t
  sed -i -e 's/\.L2::cache_hint"/"/' -e 's/\[%3\], %4;/[%3];/' -e 's/\[%5\], %6;/[%5];/' \
    -e 's/\.L2::cache_hint \[%0\], \[%1\], 16, %2, %3;/ [%0], [%1], 16, %2;/' \
    -e 's/\.L2::cache_hint\.v4\.u32 {%0, %1, %2, %3}, \[%4\], %5;/.v4.u32 {%0, %1, %2, %3}, [%4];/' $W/t/gpu/prelude_cuda.h
  grep -q "cache_hint" $W/t/gpu/prelude_cuda.h && { echo "l2_window.sh: a cache hint left" >&2; exit 2; }
  bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 --templates $W/t -o $W/${S}_noevf.gcb -q
fi
B=$S
run() { # window MB, prompt tokens (bundle $B)
  bin/gcore-run -m $M -b $W/$B.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 1024 --l2-window $1 \
    --tokens $(seq -s, 1 $2) -n 256 --warmup 8 > $W/o.json 2>$W/err || { tail -2 $W/err; return; }
  [ -f $W/ref$2.json ] || cp $W/o.json $W/ref$2.json
  python3 -c "
import json; d = json.load(open('$W/o.json')); t = d['tokens']; r = json.load(open('$W/ref$2.json'))['tokens']
print('$B --l2-window $1 P=$2: %.1f tok/s, tokens %s' % (d['decode_tok_per_s'], 'as the first run' if t == r else 'DIFFER'))"
}
rm -f $W/ref*.json
echo "decode tok/s, 256 tokens after P prompt tokens"
for P in ${PS:-128 700}; do
  for rep in 1 2; do
    for mb in ${MBS:-0 8 16 20 24 32}; do run $mb $P; done
    [ "$EVF" != 0 ] || { B=${S}_noevf; run 0 $P; run 32 $P; B=$S; }
  done
done
date -u
