#!/usr/bin/env python3
"""The case table in performance mode (as ggml's test-backend-ops -m perf):
every case of tests/cases.py, or those of the ops named, through one bundle
of template defaults (or a database's winners) on a backend, timed by
gcore-run --op after its own verification. Prints one row per case: op,
dtypes, shape, kernel, median time, GFLOP/s and GB/s.

  python3 bench/op_cases.py [--backend cpu] [--target cpu] [--db tune.db]
                            [--ops gemm,rmsnorm] [--min-time 0.2]

The times are the kernels' alone (gcore-run --op: repeated launches, cache
flushed between them on GPUs); a claim needs a peer measured in the same
run (bench/RESULTS.md says which scripts compare against peers)."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from cases import BIN, CASES, dims, problem_args  # noqa: E402

TIME = re.compile(r"time: median ([\d.]+) us .*?, ([\d.]+) GFLOP/s, ([\d.]+) GB/s")
KERNEL = re.compile(r"kernel (\S+ \S*)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--db", help="tuning database whose winners to time (default: template defaults)")
    ap.add_argument("--ops", help="comma-separated ops (default: all)")
    ap.add_argument("--min-time", default="0.2")
    a = ap.parse_args()
    ops = a.ops.split(",") if a.ops else sorted(CASES)
    with tempfile.TemporaryDirectory() as d:
        wl = os.path.join(d, "w.txt")
        with open(wl, "w") as f:
            for op in ops:
                for dt, shape in CASES[op]:
                    f.write(f"{op} {dt} " + " ".join(f"{l}={v}" for l, v in zip(dims(op), shape)) + "\n")
        bundle = os.path.join(d, "b.gcb")
        gen = [os.path.join(BIN, "gcore-gen"), "--target", a.target, "--workload", wl, "-o", bundle, "-q"]
        subprocess.run(gen + (["--db", a.db] if a.db else []), check=True)
        print(f"| op | dtypes | shape | kernel | median us | GFLOP/s | GB/s |\n|---|---|---|---|---|---|---|")
        for op in ops:
            for dt, shape in CASES[op]:
                r = subprocess.run([os.path.join(BIN, "gcore-run"), "--backend", a.backend, "-b", bundle,
                                    "--op", op, "--dtype", dt, *map(str, problem_args(op, shape)),
                                    "--min-time", a.min_time], capture_output=True, text=True)
                t, k = TIME.search(r.stdout), KERNEL.search(r.stdout)
                if r.returncode or not t:
                    print(f"| {op} | {dt} | {shape} | failed: {r.stderr.strip()[:80]} | | | |")
                    continue
                print(f"| {op} | {dt} | {'x'.join(map(str, shape))} | {k.group(1) if k else '?'} | "
                      f"{t.group(1)} | {t.group(2)} | {t.group(3)} |", flush=True)


if __name__ == "__main__":
    main()
