#!/bin/bash
# qkv_cluster.sh — the QKV projection and a kv head's decode attention in
# one thread-block cluster (issue 16's 1B: the QKV → attention boundary),
# measured before it is built as an op.
#
# bench/qkv_cluster.patch (against 99f8bef) gives gemv_bulk three
# parameters. ATT (rmsnorm_gemm_rope_kv): 1 = the grid is G clusters of 8
# blocks; cluster g streams kv head g's rows only (its query heads' RoPE
# pairs, its key's, its value's: 24 pairs a block on the 1B), stores them as
# the tree's kernel does, then, after a cluster barrier, runs that head's
# decode attention in its tail — attention_decode_mma's body with 4 warps
# (the consumers; the producer warp joins the barriers only), 8 slices (the
# cluster's ranks), the slices merged over distributed shared memory — into
# Qout + H*D; 2 = the same cluster layout without the tail; 3 = the same
# 64 blocks without clusters. NB caps a GEMV's grid (0: the SMs); AD is the
# tail's largest head dimension. The patch's llama.c reads GCORE_EXP_QKVATT:
# set, a decode step in the short bucket skips its attention launch and the
# O projection reads Qout + H*D.
#
# Run: on a machine with sqlite3.h, `git apply bench/qkv_cluster.patch &&
# make all`; then on the GPU (with that bin/ and lib/): `bash
# bench/qkv_cluster.sh`. PROMPTS (default 128 850).
set -e
W=${W:-/tmp/qkv_cluster}; mkdir -p $W; export GCORE_CACHE=$W/cache
grep -q "@param ATT" templates/gpu/gemv_bulk.cu || { echo "qkv_cluster.sh: apply bench/qkv_cluster.patch and build first" >&2; exit 2; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
A=" \* @defaults rmsnorm_gemm_rope_kv rmsnorm_gemm_bias_rope_kv RS=4 KC=2048"
fresh() { rm -rf $W/$1; cp -r templates $W/$1; }
fresh t0                                   # the tree's defaults
fresh tw                                   # the attention with 4 warps, as the tail's (the same sums: same tokens)
sed -i '/@defaults attention CL=1 SPLIT=8/a\ * @defaults attention WARPS=4 if K > 0 \&\& SM >= 90' $W/tw/gpu/attention_decode_mma.cu
for a in 1 2 3; do fresh a$a; sed -i "/$A/a\\ * @defaults rmsnorm_gemm_rope_kv ATT=$a" $W/a$a/gpu/gemv_bulk.cu; done
fresh o68                                  # O on 68 blocks, its rows all in a 128 KB ring
sed -i "/$A/a\\ * @defaults gemm_add NB=68 STAGES=4 if K >= 2048 \&\& K < 4096" $W/o68/gpu/gemv_bulk.cu
fresh a1o68                                # both: O's blocks on the SMs the clusters leave free
sed -i "/$A/a\\ * @defaults rmsnorm_gemm_rope_kv ATT=1\n * @defaults gemm_add NB=68 STAGES=4 if K >= 2048 \&\& K < 4096" $W/a1o68/gpu/gemv_bulk.cu
M=$W/m_1b
[ -d $M ] || python3 -c "import sys; sys.path.insert(0, 'bench'); import gpu_llama as G; G.write_model('$M', G.SHAPES['1b'])"
for t in t0 tw a1 a2 a3 o68 a1o68; do
  bin/gcore-gen --model $M --target sm_90a --prefill 128,512 --batch 1 --templates $W/$t -o $W/b_$t.gcb -q
done
run() { # bundle, environment, prompt tokens
  env $2 bin/gcore-run -m $M -b $W/b_$1.gcb --backend cuda --temp 0 --ignore-eos --json --ctx 1100 \
    --tokens $(seq -s, 1 $3) -n 256 --warmup 8 > $W/o.json
  python3 -c "import json, hashlib; d = json.load(open('$W/o.json')); print('$1 $2 P=$3: %.1f tok/s, tokens md5 %s' % (d['decode_tok_per_s'], hashlib.md5(str(d['tokens']).encode()).hexdigest()[:8]))"
}
for P in ${PROMPTS:-128 850}; do
  for rep in 1 2; do
    run t0 X=0 $P; run tw X=0 $P; run a1 X=0 $P; run a1 GCORE_EXP_QKVATT=1 $P; run a2 X=0 $P; run a3 X=0 $P
    run o68 X=0 $P; run a1o68 GCORE_EXP_QKVATT=1 $P
  done
done
