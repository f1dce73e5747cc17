#!/usr/bin/env python3
"""gpu_tune.py — the cost of tuning a whole model on one GPU (issue 7): the
complete `gcore-tune --model` workload of the Llama-3-8B shape (decode
passes of M = 1..16 rows, prefill 128..4096 tokens), timed from a fresh
database, then the same command again, which must reuse everything.

usage: bench/gpu_tune.py [--shape 8b] [--budget 16] [--batch 1,...,16]
                         [--prefill 128,...,4096] [--arch sm_90a] [--out DIR]
Needs: bin/ built, numpy, an NVIDIA GPU. Prints per-run wall time, problem
and candidate counts, and writes the database to OUT/tune.db."""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gpu_llama as GL  # noqa: E402

SUMMARY = re.compile(r"^(\S+ \S+ .*?): (\d+) measured now, (\d+) reused; (\d+) ok, (\d+) rejected, "
                     r"(\d+) compile-failed, (\d+) verify-failed, (\d+) launch-failed, (\d+) timed-out$")


def tune(cmd, env, log):
    """Run gcore-tune with its output streamed to log (progress survives a kill)."""
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, env=env)
    wall = time.time() - t0
    out = open(log).read()
    if p.returncode:
        raise SystemExit(f"gcore-tune failed ({p.returncode}): {out.strip()[-2000:]}")
    rows = [SUMMARY.match(line) for line in out.splitlines()]
    rows = [r for r in rows if r]
    tot = lambda i: sum(int(r.group(i)) for r in rows)  # noqa: E731
    return {"wall_s": wall, "problems": len(rows), "measured": tot(2), "reused": tot(3), "ok": tot(4),
            "rejected": tot(5), "failed": tot(6) + tot(7) + tot(8) + tot(9)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8b", choices=sorted(GL.SHAPES))
    ap.add_argument("--budget", default="16", help="gcore-tune --budget: candidates per problem")
    ap.add_argument("--batch", default=",".join(str(i) for i in range(1, 17)),
                    help="decode pass sizes (gcore-tune --batch)")
    ap.add_argument("--prefill", default="128,256,512,1024,2048,4096")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-tune"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    d = os.path.join(a.out, "llama-" + a.shape)
    t0 = time.time()
    GL.write_model(d, GL.SHAPES[a.shape])
    print(f"model {d}: written in {time.time() - t0:.0f} s", flush=True)
    db = os.path.join(a.out, "tune.db")
    if os.path.exists(db):
        os.remove(db)
    env = dict(os.environ, GCORE_CACHE=os.path.join(a.out, "cache"))
    cmd = [os.path.join(ROOT, "bin", "gcore-tune"), "--model", d, "--target", a.arch, "--batch", a.batch,
           "--prefill", a.prefill, "--budget", a.budget, "--db", db, "--no-progress"]
    print("command:", " ".join(cmd[1:]).replace(ROOT + "/", ""), flush=True)
    first = tune(cmd, env, os.path.join(a.out, "tune-1.log"))
    print(f"first run: {first['wall_s']:.0f} s; {first}", flush=True)
    again = tune(cmd, env, os.path.join(a.out, "tune-2.log"))
    print(f"rerun: {again['wall_s']:.1f} s; {again}", flush=True)
    ok = again["measured"] == 0 and again["problems"] == first["problems"]
    print("target (< 15 min, rerun reuses everything): "
          + ("met" if first["wall_s"] < 900 and ok else "not met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
