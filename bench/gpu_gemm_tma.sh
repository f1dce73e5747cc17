#!/bin/sh
# gpu_gemm_tma.sh — the copy-engine (TMA) variants of the wgmma GEMMs
# against cuBLAS and against the cp.async path, on one sm_90a GPU, in one
# call of the device tool (bench/RESULTS.md records what it printed).
#
# 1. Smoke: each TMA variant alone (its own process and time-out, so a hung
#    barrier protocol costs only its own line) through gcore-run --op on
#    ragged shapes (verified against the fp64 reference on the host), f16.
# 2. bench/gpu_gemm.py on the Llama-3-8B prefill shapes with the cp.async
#    default and the TMA variants side by side, gemm and gate/up swiglu,
#    f16 and bf16 (correctness on ragged shapes first, as always).
#
# usage (repo root, bin/ built): sh bench/gpu_gemm_tma.sh   (writes to $OUT or .)
set -u
out=${OUT:-.}
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for v in TMA=1 TMA=1,CLUSTER=2; do
  for op in gemm gemm_swiglu; do
    t=gemm_wgmma; [ $op = gemm_swiglu ] && t=gemm_swiglu_wgmma
    for s in "257 4096 4104" "1000 4100 1032" "130 72 72"; do set -- $s
      r=$(bin/gcore-gen --target sm_90a --op $op --dtype f16 --m $1 --n $2 --k $3 \
            --force $t:$v -o /tmp/tma.gcb -q 2>&1 &&
          timeout 20 bin/gcore-run -b /tmp/tma.gcb --backend cuda --op $op --dtype f16 \
            --m $1 --n $2 --k $3 --min-time 0.02 2>&1)
      rc=$?
      echo "$t:$v $op $1x$2x$3 rc=$rc: $(echo "$r" | grep -v '^time' | tr '\n' ' ')"
    done
  done
done
F="--force gemm_wgmma --force gemm_wgmma:TMA=1 --force gemm_wgmma:TMA=1,CLUSTER=2"
S="--swiglu-force gemm_swiglu_wgmma --swiglu-force gemm_swiglu_wgmma:TMA=1 --swiglu-force gemm_swiglu_wgmma:TMA=1,CLUSTER=2"
timeout 300 python3 bench/gpu_gemm.py $F --swiglu $S --out "$out/tma.md" > "$out/tma.log" 2>&1
echo "bench rc=$?"
grep -v "^|---" "$out/tma.md" | cut -d'|' -f2-5,7,8,10-12 | grep -v "check only"
tail -3 "$out/tma.log"
