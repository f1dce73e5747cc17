#!/bin/bash
# qkv_tail.sh — what the decode attention in the QKV kernel's tail costs
# (issue 16's lever "the attention of a kv head in the QKV kernel's tail,
# started by that head's last block"), measured before it is built as an op.
#
# bench/qkv_tail.patch (against 0f68cde) gives gemv_bulk a parameter ATT for
# rmsnorm_gemm_rope_kv: 1 = after its GEMV, each block takes a ticket per kv
# head it wrote (an atomic add of its pairs on a per-head counter), and the
# block that completes a head runs that head's attention on its consumer
# warps (SIMT, one block a head) into Qout + H*D; 2 = the tickets only;
# 3 = a fence and a barrier only; 4 = only the L2 requests for the older
# cache rows that 1 and 2 make before their wait. The patch's llama.c reads
# GCORE_EXP_QKVATT: set, a decode step in the short bucket skips its
# attention launch and the O projection reads Qout + H*D.
#
# Run: on a machine with sqlite3.h, `git apply bench/qkv_tail.patch && make
# all`; then on the GPU (with that bin/ and lib/): `bash bench/qkv_tail.sh`.
# SHAPES (default 1b), PROMPTS (default 128), VARIANTS (default all).
set -e
W=${W:-/tmp/qkv_tail}; mkdir -p $W; export GCORE_CACHE=$W/cache
grep -q "@param ATT" templates/gpu/gemv_bulk.cu || { echo "qkv_tail.sh: apply bench/qkv_tail.patch and build first" >&2; exit 2; }
anchor=" \* @defaults rmsnorm_gemm_rope_kv RS=4 KC=2048"
for a in 1 2 3 4; do
  rm -rf $W/t$a; cp -r templates $W/t$a
  sed -i "/$anchor/a\\ * @defaults rmsnorm_gemm_rope_kv ATT=$a" $W/t$a/gpu/gemv_bulk.cu
done
for sh in ${SHAPES:-1b}; do
  M=$W/m_$sh
  [ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['$sh'])"
  bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 -o $W/b_${sh}_0.gcb -q
  for a in 1 2 3 4; do
    bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 --templates $W/t$a -o $W/b_${sh}_$a.gcb -q
  done
  for P in ${PROMPTS:-128}; do
    T=$(seq -s, 1 $P)
    for v in ${VARIANTS:-0 1 1+skip 2 3 4}; do
      env=""; [ "${v#*+}" = skip ] && env="GCORE_EXP_QKVATT=1"
      env $env bin/gcore-run -m $M -b $W/b_${sh}_${v%+*}.gcb --backend cuda --temp 0 --ignore-eos --json \
        --ctx 1100 --tokens $T -n 128 --warmup 8 > $W/o.json
      python3 -c "import json, hashlib; d = json.load(open('$W/o.json')); print('$sh after $P tokens, ATT=$v: %.1f tok/s, tokens md5 %s' % (d['decode_tok_per_s'], hashlib.md5(str(d['tokens']).encode()).hexdigest()[:8]))"
    done
  done
done
