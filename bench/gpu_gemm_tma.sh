#!/bin/sh
# gpu_gemm_tma.sh — the three operand copy paths of the wgmma GEMMs side by
# side, as run 5 of bench/RESULTS.md compared them (session 3, commit
# ea80830, when the register epilogue was the only one): cp.async
# (TMA=0), the tensor copy engine (TMA=1) and 2-block clusters multicasting
# B (TMA=1,CLUSTER=2), all with EPI=0; f16 and bf16, gemm and gate/up.
# bench/gpu_gemm_variants.sh does the work (smoke runs through gcore-run
# --op, then bench/gpu_gemm.py).
#
# usage (repo root, bin/ built): sh bench/gpu_gemm_tma.sh   (writes to $OUT or .)
VARIANTS="TMA=0,EPI=0 TMA=1,EPI=0 TMA=1,CLUSTER=2,EPI=0" DTYPES=f16,bf16 SWIGLU=1 \
  exec sh "$(dirname "$0")/gpu_gemm_variants.sh"
