#!/usr/bin/env python3
"""gpu_tp.py — tensor parallelism on the GPUs of one host (issue 17):
gcore-run --tp N (one rank per GPU, collectives over NCCL) against --tp 1,
in one run, on a random-weight fp16 model of Llama-3-8B's shape (written
here, bench/gpu_llama.py's writer): decode (batch 1, a 128-token prompt,
256 new tokens) and prefill of 512 tokens, with the decode bound of N GPUs
(the weight bytes a step reads on each rank over the copy bandwidth of one
GPU measured in the same run) and, from a --profile run, the share of the
decode step and of the prefill spent in collectives.

Each TP degree gets its own tuning (gcore-tune --model --tp N: the shard
shapes, decode problems only at --budget, prefill from the defaults) and
bundle. Greedy ids of every TP degree are compared with TP=1's (random
weights have near-ties, so a difference late in fp16 is reported, not a
failure; tests/gpu/test_gpu_tp.py pins equality on tie-free fp32 models).

usage: bench/gpu_tp.py [--shape 8b] [--tp 2] [--budget 4] [--out DIR] [--no-graph]
Needs bin/ built, torch (for the copy bandwidth) and libnccl.so.2 (the
system's or PyTorch's copy, found and put on LD_LIBRARY_PATH)."""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from gpu_llama import PREFILL, PROMPT, NEW, SHAPES, copy_bandwidth, weight_bytes_per_token, write_model  # noqa: E402


def nccl_dir():
    for d in sorted(glob.glob(os.path.join(sys.prefix, "lib", "python3*", "*-packages", "nvidia", "nccl", "lib")) +
                    glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib")):
        if os.path.exists(os.path.join(d, "libnccl.so.2")):
            return d
    return None


def tool(name, *args, env):
    r = subprocess.run([os.path.join(ROOT, "bin", name), *map(str, args)], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"{name} failed: {r.stderr.strip()}")
    return r


def collective_share(profile, phase):
    """Share of the kernel time of phase ("decode" or "prefill") in rows of
    kernel "collective" of a gcore-run --profile table (count, total ms,
    ..., kernel last)."""
    total = coll = 0.0
    cur = None
    for line in profile.splitlines():
        if re.match(r"(decode|prefill):", line):
            cur = line.split(":")[0]
            continue
        f = line.split()
        if cur == phase and len(f) > 3 and f[0].isdigit():
            total += float(f[1])
            coll += float(f[1]) * (f[-1] == "collective")
    return coll / total if total else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--tp", default="2", help="TP degrees besides 1, comma-separated")
    ap.add_argument("--budget", default="4", help="gcore-tune candidates per decode problem (0: defaults)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-gpu"))
    ap.add_argument("--no-graph", action="store_true", help="decode kernel by kernel (no graph replay)")
    a = ap.parse_args()
    import torch
    env = dict(os.environ, GCORE_CACHE=os.path.join(a.out, "cache"))
    nd = nccl_dir()
    if nd:
        env["LD_LIBRARY_PATH"] = nd + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    bw = copy_bandwidth(torch)
    print(f"device: {torch.cuda.device_count()} x {torch.cuda.get_device_name()}, copy bandwidth {bw / 1e9:.0f} GB/s "
          f"(read+write, one GPU); NCCL from {nd or 'the system'}")
    d = os.path.join(a.out, f"llama-{a.shape}")
    write_model(d, SHAPES[a.shape])
    toks = ",".join(str(i) for i in range(1, PROMPT + 1))
    ptoks = ",".join(str(i % 1000 + 1) for i in range(PREFILL))
    res = {}
    for tp in [1] + [int(t) for t in a.tp.split(",") if t]:
        db, b = os.path.join(a.out, f"tp{tp}.db"), os.path.join(a.out, f"llama-{a.shape}-tp{tp}.gcb")
        t0 = time.time()
        if a.budget != "0":
            tool("gcore-tune", "--model", d, "--tp", tp, "--target", a.arch, "--prefill", "none", "--batch", 1,
                 "--budget", a.budget, "--db", db, "--no-progress", env=env)
        tool("gcore-gen", "--model", d, "--tp", tp, "--target", a.arch, "--prefill", f"{PROMPT},{PREFILL}",
             *(["--db", db] if a.budget != "0" else []), "-o", b, env=env)
        t_prep = time.time() - t0
        run = ["gcore-run", "-m", d, "-b", b, "--backend", "cuda", "--tp", tp, "--temp", "0", "--ignore-eos",
               "--json", "--ctx", 1024, *(["--no-graph"] if a.no_graph else [])]
        dec = json.loads(tool(*run, "--tokens", toks, "-n", NEW, "--warmup", 8, env=env).stdout)
        pre = json.loads(tool(*run, "--tokens", ptoks, "-n", 1, env=env).stdout)
        pdec = tool(*run, "--tokens", toks, "-n", 32, "--profile", env=env).stderr
        ppre = tool(*run, "--tokens", ptoks, "-n", 1, "--profile", env=env).stderr
        bound = tp * bw / weight_bytes_per_token(SHAPES[a.shape])
        res[tp] = dict(decode=dec["decode_tok_per_s"], prefill=pre["prompt_tok_per_s"], ids=dec["tokens"],
                       replays=dec.get("graph_replays"))
        same = next((i for i, (x, y) in enumerate(zip(dec["tokens"], res[1]["ids"])) if x != y), None)
        print(f"[tp {tp}] prepared in {t_prep:.0f} s; decode {dec['decode_tok_per_s']:.1f} tok/s "
              f"({dec['decode_tok_per_s'] / res[1]['decode']:.2f}x TP=1; {dec['decode_tok_per_s'] / bound:.0%} of the "
              f"{tp}-GPU bound {bound:.0f} tok/s; {dec.get('graph_replays')} graph replays); prefill {PREFILL}: "
              f"{pre['prompt_tok_per_s']:.0f} tok/s ({pre['prompt_tok_per_s'] / res[1]['prefill']:.2f}x); collectives: "
              f"{collective_share(pdec, 'decode'):.0%} of profiled decode, {collective_share(ppre, 'prefill'):.0%} of prefill; greedy ids "
              f"{'equal to TP=1' if same is None else f'differ from TP=1 from step {same}'}")
        with open(os.path.join(a.out, f"tp{tp}.profile.txt"), "w") as f:
            f.write(pdec + "\n" + ppre)


if __name__ == "__main__":
    main()
