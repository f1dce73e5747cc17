#!/bin/sh
# cpu_gemm.sh — tune the fp32 GEMM at M=N=K=1024 on this CPU (all cores),
# build a bundle, and time its winner against OpenBLAS sgemm in one run.
# Usage: bench/cpu_gemm.sh [BUDGET]   (default 60 candidates)
set -eu
cd "$(dirname "$0")/.."
make -s all build/rel/bench/cpu_gemm
out=build/bench
mkdir -p "$out"
export GCORE_CACHE="$PWD/$out/cache"
n=${N:-1024}
bin/gcore-tune --op gemm --dtype f32 --m $n --n $n --k $n --db "$out/tune.db" --budget "${1:-60}" --no-progress
bin/gcore-gen --db "$out/tune.db" --op gemm --dtype f32 --m $n --n $n --k $n -o "$out/gemm.gcb" -q
OPENBLAS_NUM_THREADS=$(nproc) build/rel/bench/cpu_gemm "$out/gemm.gcb" $n $n $n
