#!/bin/sh
# demo.sh — the whole pipeline on this machine's CPU: tune a small workload
# (a capped sample of each template's space), build a bundle from the
# winners, and run one of its kernels. Run by `make demo`.
set -eu
cd "$(dirname "$0")/.."
out=build/demo
mkdir -p "$out"
export GCORE_CACHE="$PWD/$out/cache"
budget=${DEMO_BUDGET:-10}
echo "== gcore-tune: $budget candidates per problem, verified against fp64, timed =="
bin/gcore-tune --workload tuner/workloads/demo.txt --db "$out/tune.db" --budget "$budget"
echo
echo "== gcore-gen: bundle from the winners =="
bin/gcore-gen --db "$out/tune.db" --workload tuner/workloads/demo.txt -o "$out/demo.gcb"
echo
echo "== gcore-run: one kernel from the bundle =="
bin/gcore-run -b "$out/demo.gcb" --op gemm --m 128 --n 512 --k 512
echo
echo "Rerun 'make demo' to tune $budget more candidates per problem (nothing is measured twice);"
echo "the database is $out/tune.db, the bundle $out/demo.gcb."
