#!/usr/bin/env python3
"""search.py — how much of the exhaustive best a search strategy finds on a
budget. For each problem: one exhaustive sweep (every point of the space,
into its own tune.db), then `--strategy local` and `--strategy random` with
budgets of 16 and 32 candidates (fresh databases, the same compile cache).
The found-fraction of a run is the exhaustive best time over the time the
exhaustive sweep measured for the run's winner (so both times come from
one sweep and timing noise between runs does not enter); 1.0 = it found
the best.

usage: bench/search.py [--target cpu] [--min-time S] [--out DIR]
       [--problems 'gcore-tune problem flags;...']"""
import argparse
import os
import sqlite3
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ("--op rmsnorm --dtype f32 --m 4 --n 4096;"
           "--op rope_kv --dtype f32 --m 4 --h 32 --g 8 --d 128;"
           "--op embed --dtype f32 --m 16 --n 2048 --k 32000")


def tune(out, db, prob, target, min_time, *extra):
    args = [os.path.join(ROOT, "bin", "gcore-tune"), *prob.split(), "--target", target,
            "--db", os.path.join(out, db), "--min-time", str(min_time),
            "--cache", os.path.join(out, "cache"), "--no-progress", *extra]
    t0 = time.time()
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"gcore-tune failed: {r.stderr.strip()}")
    return time.time() - t0


def times(path):
    """{(template, params): median_us} of the verified measurements."""
    with sqlite3.connect(path) as c:
        return {(t, p): us for t, p, us in c.execute(
            "SELECT v.template, v.params, m.median_us FROM measurements m JOIN variants v "
            "ON v.id = m.variant_id WHERE m.status = 'ok'")}


def winner(path):
    with sqlite3.connect(path) as c:
        return c.execute("SELECT v.template, v.params FROM winners w JOIN measurements m "
                         "ON m.id = w.measurement_id JOIN variants v ON v.id = m.variant_id").fetchone()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--min-time", default=0.02, type=float)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-search"))
    ap.add_argument("--problems", default=DEFAULT)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print("| problem | space (verified) | exhaustive s | strategy | budget | found-fraction |")
    print("|---|---|---|---|---|---|")
    for i, prob in enumerate(a.problems.split(";")):
        ex = f"ex{i}.db"
        if os.path.exists(os.path.join(a.out, ex)):
            os.remove(os.path.join(a.out, ex))
        t_ex = tune(a.out, ex, prob, a.target, a.min_time, "--strategy", "random")
        ref = times(os.path.join(a.out, ex))
        best = min(ref.values())
        for strat in ("local", "random"):
            for budget in (16, 32):
                db = f"s{i}-{strat}-{budget}.db"
                if os.path.exists(os.path.join(a.out, db)):
                    os.remove(os.path.join(a.out, db))
                tune(a.out, db, prob, a.target, a.min_time, "--strategy", strat, "--budget", str(budget))
                w = winner(os.path.join(a.out, db))
                frac = best / ref[w] if w in ref else float("nan")
                print(f"| {prob} | {len(ref)} | {t_ex:.0f} | {strat} | {budget} | {frac:.2f} |", flush=True)


if __name__ == "__main__":
    main()
