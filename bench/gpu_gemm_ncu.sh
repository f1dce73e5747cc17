#!/bin/sh
# gpu_gemm_ncu.sh — where a GEMM's time goes, gcore's wgmma kernel against
# cuBLAS on one sm_90a GPU, in one call of the device tool:
#
# 1. A K sweep at fixed M and N (bench/gpu_gemm.py, torch.matmul as the
#    peer, same run): time = per-tile cost + K · per-K-step cost, so the
#    fixed cost of a tile (fill, epilogue, tail) separates from the main
#    loop's rate.
# 2. Nsight Compute sections (speed of light, pipes, memory, warp stalls,
#    launch) for one launch of gcore's kernel (the default, then each
#    variant in $VARIANTS) and of cuBLAS's, at M x N x K, clocks unlocked.
#
# usage (repo root, bin/ built): [M=4096 N=4096 K=4096] [VARIANTS="gemm_wgmma:TMA=1,CLUSTER=2"]
#        sh bench/gpu_gemm_ncu.sh        (writes ncu-*.txt to $OUT or .)
set -u
out=${OUT:-.}
M=${M:-4096} N=${N:-4096} K=${K:-4096}
VARIANTS=${VARIANTS:-}
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 bench/gpu_gemm.py --dtypes f16 --m "$M" --check "" \
  --nk "$N:1024,$N:2048,$N:4096,$N:8192,$N:16384" | grep -v "^|---"
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
   --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy"
i=0
for v in "" $VARIANTS; do
  f=""; [ -n "$v" ] && f="--force $v"
  ncu --clock-control none -k regex:gemm_wgmma --launch-skip 2 --launch-count 1 $S \
    python3 bench/gpu_gemm.py --dtypes f16 --m "$M" --nk "$N:$K" --check "" $f \
    > "$out/ncu-gcore-$i.txt" 2>&1
  echo "ncu gcore ${v:-default} rc=$?"; i=$((i + 1))
done
ncu --clock-control none -k "regex:nvjet|xmma|cutlass" --launch-skip 2 --launch-count 1 $S \
  python3 bench/gpu_gemm.py --dtypes f16 --m "$M" --nk "$N:$K" --check "" \
  > "$out/ncu-cublas.txt" 2>&1
echo "ncu cublas rc=$?"
