#!/bin/bash
# l2_ahead.sh — issue 16's 1B: the weights of the next kernels asked of
# L2 while the DRAM would idle (the QKV projection, the decode attention
# and the O projection stream 21 MB of a layer's 121 MB in about a third
# of its time), measured before it is built.
#
# bench/l2_ahead.patch gives gemv_bulk two parameters: AHEAD, MB past the
# end of its B that its producers ask of L2 (cp.async.bulk.prefetch.L2,
# each block its share) once their first stages are issued, and EVF, an
# L2 evict_first policy on the ring's copies; and llama.c GCORE_EXP_ARENA=1,
# which lays every layer's wqkv, wo, w13, w2 out in one allocation in the
# step's order (64 MB of slack after the last), so that "past the end of
# B" is the next matrices of the step.
#
# Run: on a machine with sqlite3.h, at 04543a3, `git apply bench/l2_ahead.patch &&
# make all`; then on an sm_90 GPU (with that bin/ and lib/):
# `bash bench/l2_ahead.sh` (ROUND=1: AHEAD on QKV and O, EVF; ROUND=2:
# EVF everywhere and AHEAD around O's best; PS: the prompt lengths).
set -e
W=${W:-/tmp/l2_ahead}; mkdir -p $W; export GCORE_CACHE=$W/cache
grep -q "@param AHEAD " templates/gpu/gemv_bulk.cu || { echo "l2_ahead.sh: apply bench/l2_ahead.patch and build first" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true; date -u
S=${S:-1b}
M=$W/m_$S
[ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['$S'])"
anchor=" \* @constraint SM >= 90 -- cp.async.bulk"
bundle() { # name, @defaults lines for gemv_bulk separated by ';'
  rm -rf $W/t; cp -r templates $W/t
  IFS=';' read -ra L <<< "$2"
  for l in "${L[@]}"; do [ -z "$l" ] || sed -i "/$anchor/i\\ * @defaults $l" $W/t/gpu/gemv_bulk.cu; done
  bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 --templates $W/t -o $W/$1.gcb -q
}
QKV="rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv"; O="gemm_add"; OK="if K < 4096"
E="$QKV EVF=1;$O EVF=1;rmsnorm_gemm_swiglu EVF=1;gemm_swiglu EVF=1" # evict_first but on down (K >= 4096) and the LM head
EA="$E;$O EVF=1 if K >= 4096;gemm EVF=1;rmsnorm_gemm EVF=1"            # evict_first on every decode GEMV
bundle base ""
if [ "${ROUND:-1}" = 1 ]; then
  V="q16 q32 o16 o32 q16o24 e eq16o24"
  bundle q16 "$QKV AHEAD=16"
  bundle q32 "$QKV AHEAD=32"
  bundle o16 "$O AHEAD=16 $OK"
  bundle o32 "$O AHEAD=32 $OK"
  bundle q16o24 "$QKV AHEAD=16;$O AHEAD=24 $OK"
  bundle e "$E"
  bundle eq16o24 "$QKV AHEAD=16 EVF=1;$O AHEAD=24 EVF=1 $OK;rmsnorm_gemm_swiglu EVF=1;gemm_swiglu EVF=1"
else
  V="e ea eo8 eo12 eo16 eo20 eao16 eao16g8 eao16d8 eao16q4"
  bundle e "$E"
  bundle ea "$EA"
  for a in 8 12 16 20; do bundle eo$a "$E;$O AHEAD=$a $OK"; done
  bundle eao16 "$EA;$O AHEAD=16 $OK"
  bundle eao16g8 "$EA;$O AHEAD=16 $OK;rmsnorm_gemm_swiglu AHEAD=8;gemm_swiglu AHEAD=8"
  bundle eao16d8 "$EA;$O AHEAD=16 $OK;$O AHEAD=8 if K >= 4096"
  bundle eao16q4 "$EA;$O AHEAD=16 $OK;$QKV AHEAD=4"
fi
python3 - "$W" <<'PY'
import sqlite3, sys
for b in ['base', 'eao16d8']:
    c = sqlite3.connect('%s/%s.gcb' % (sys.argv[1], b))
    for r in c.execute("SELECT op, n, k, template, params FROM dispatch WHERE op IN ('rmsnorm_gemm_rope_kv','gemm_add','rmsnorm_gemm_swiglu', 'gemm') AND m_lo <= 1 AND m_hi >= 1"):
        print(' ', b, *r)
PY
run() { # bundle, environment, prompt tokens
  env $2 bin/gcore-run -m $M -b $W/$1.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 1024 \
    --tokens $(seq -s, 1 $3) -n 256 --warmup 8 > $W/o.json 2>$W/err || { tail -2 $W/err; return; }
  python3 -c "
import json, hashlib; d = json.load(open('$W/o.json')); t = d['tokens']
r = json.load(open('$W/ref$3.json'))['tokens'] if '$1 $2' != 'base X=0' else t
same = next((i for i, (a, b) in enumerate(zip(t, r)) if a != b), len(t))
print('$1 ${2#X=0} P=$3: %.1f tok/s, the first %d tokens as the tree\'s' % (d['decode_tok_per_s'], same))"
  [ "$1 $2" != "base X=0" ] || cp $W/o.json $W/ref$3.json
}
echo "decode tok/s, 256 tokens after P prompt tokens"
for P in ${PS:-128 700}; do
  for rep in 1 2; do
    run base X=0 $P; run base GCORE_EXP_ARENA=1 $P
    for b in $V; do run $b GCORE_EXP_ARENA=1 $P; done
  done
done
date -u
