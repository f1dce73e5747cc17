#!/bin/sh
# gpu_gemm_variants.sh — variants of the wgmma GEMM templates side by side
# against cuBLAS on one sm_90a GPU, in one call of the device tool
# (bench/RESULTS.md records what it printed):
#
# 1. Smoke: each variant alone (its own process and time-out, so a hung
#    barrier protocol costs only its own line) through gcore-run --op on
#    ragged shapes, verified element by element against the fp64 host
#    reference, for gemm, gemm_add and gemm_swiglu (gemm_wgmma serves
#    all three, the same parameters).
# 2. bench/gpu_gemm.py on the Llama-3-8B prefill shapes with the variants
#    as --force columns (its own ragged correctness checks first).
#
# usage (repo root, bin/ built):
#   [VARIANTS="EPI=0 EPI=1 EPI=1,CLUSTER=2"] [DTYPES=f16] [SWIGLU=1] sh bench/gpu_gemm_variants.sh
# (writes variants.md and variants.log to $OUT or .)
set -u
out=${OUT:-.}
VARIANTS=${VARIANTS:-"EPI=0 EPI=1 EPI=1,CLUSTER=2"}
DTYPES=${DTYPES:-f16}
SWIGLU=${SWIGLU:-1}
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ops="gemm gemm_add"; [ "$SWIGLU" = 1 ] && ops="$ops gemm_swiglu"
for v in $VARIANTS; do
  for op in $ops; do
    t=gemm_wgmma
    for s in "257 4096 4104" "1000 4096 1032" "130 72 72" "2048 264 1000" "1000 4100 1032"; do
      set -- $s
      r=$(bin/gcore-gen --target sm_90a --op $op --dtype f16 --m $1 --n $2 --k $3 \
            --force $t:$v -o /tmp/variant.gcb -q 2>&1 &&
          timeout 20 bin/gcore-run -b /tmp/variant.gcb --backend cuda --op $op --dtype f16 \
            --m $1 --n $2 --k $3 --min-time 0.02 2>&1)
      rc=$?
      echo "$t:$v $op $1x$2x$3 rc=$rc: $(echo "$r" | grep -v '^time' | tr '\n' ' ')"
    done
  done
done
F=""; S=""
for v in $VARIANTS; do F="$F --force gemm_wgmma:$v"; S="$S --swiglu-force gemm_wgmma:$v"; done
[ "$SWIGLU" = 1 ] && S="--swiglu $S" || S=""
timeout 400 python3 bench/gpu_gemm.py --dtypes "$DTYPES" $F $S --out "$out/variants.md" \
  > "$out/variants.log" 2>&1
echo "bench rc=$?"
grep -v "^|---" "$out/variants.md" | cut -d'|' -f2-5,7,8,10-12 | grep -v "check only"
grep -c FAIL "$out/variants.md"
tail -3 "$out/variants.log"
