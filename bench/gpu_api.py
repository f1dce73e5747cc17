#!/usr/bin/env python3
"""gpu_api.py — gcore as a library from PyTorch (python/gcore), against
PyTorch itself in the same process on one NVIDIA GPU:

  1. a transformers LlamaForCausalLM shaped like Llama-3-8B (random fp16
     weights, made on the GPU), stock and with its nn.Linear layers swapped
     for gcore-backed ones (gcore.pytorch.swap_linear): prefill of 512
     tokens and greedy decode (a 128-token prompt, --new tokens), eager with
     the dynamic cache, and with --static also the static cache that
     transformers compiles;
  2. torch.ops.gcore.gemm (the custom op) and gcore.pytorch.mm (the same
     code without the dispatcher, what a swapped nn.Linear runs in eager
     code) against torch.matmul on the 8B GEMM shapes (the swapped model's
     own, and the fused QKV and gate|up ones of gcore-run), each timed as a
     Python loop of calls (the connector's and ctypes' overhead included)
     by CUDA events, and as wall time per call.

Kernels come from --db (built on demand from its winners) after, with
--budget N, tuning the model's GEMM shapes at M = 1 and 512 into it with
gcore-tune (N candidates each); --budget 0 and no --db: template defaults.
gcore's counters (tuned / default calls, fallbacks to torch) are printed
with every result.

usage: bench/gpu_api.py [--budget 8] [--db PATH] [--target sm_90a] [--new 128]
                        [--static] [--ms 1,16,128,512,4096] [--skip-model] [--skip-gemm] [--out DIR]
Needs: make (bin/, lib/libgcore.so), torch + transformers, NVRTC, a GPU."""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("GCORE_LIB", os.path.join(ROOT, "lib", "libgcore.so.1"))
sys.path.insert(0, os.path.join(ROOT, "python"))

D, F, L, H, G, V = 4096, 14336, 32, 32, 8, 128256  # Llama-3-8B
HD = D // H
PROMPT, PREFILL = 128, 512
# (name, n, k) of the swapped model's GEMMs (C = A·Wᵀ, W [n,k])
MODEL_GEMMS = [("q/o", D, D), ("k/v", G * HD, D), ("gate/up", F, D), ("down", D, F), ("lm_head", V, D)]
FUSED_GEMMS = [("qkv (fused)", (H + 2 * G) * HD, D), ("gate|up (fused)", 2 * F, D)]
GEMM_MS = [1, 16, 128, 512, 4096]


def tune(db, target, budget, cache):
    """gcore-tune the model's GEMM shapes at M = 1 and 512 into db."""
    env = dict(os.environ, GCORE_CACHE=cache)
    t0 = time.time()
    for k in sorted({k for _, _, k in MODEL_GEMMS}):
        ns = ",".join(str(n) for _, n, kk in MODEL_GEMMS if kk == k)
        r = subprocess.run([os.path.join(ROOT, "bin", "gcore-tune"), "--op", "gemm", "--m", "1,512", "--n", ns,
                            "--k", str(k), "--dtype", "f16", "--target", target, "--db", db, "--budget",
                            str(budget), "--no-progress"], env=env, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"gcore-tune failed: {r.stderr.strip()}")
    print(f"tuned the model's GEMMs (budget {budget}) in {time.time() - t0:.0f} s into {db}")


def make_model(torch):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=D, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H,
                      num_key_value_heads=G, vocab_size=V, max_position_embeddings=4096,
                      rope_theta=500000.0, tie_word_embeddings=False)
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    with torch.device("cuda"):
        m = LlamaForCausalLM(cfg).eval()
    torch.set_default_dtype(prev)
    return m


def time_model(torch, model, new, static):
    """prefill tok/s (forward of PREFILL tokens) and decode tok/s (generate
    `new` tokens after a PROMPT-token prompt, less the prompt's forward)."""
    ids = torch.randint(0, 1000, (1, PROMPT), device="cuda")
    pre = torch.randint(0, 1000, (1, PREFILL), device="cuda")
    gen = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    if static:
        gen["cache_implementation"] = "static"
    out = {}
    with torch.no_grad():
        model(pre)  # first launches, kernel builds, cuBLAS heuristics: not timed
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            model(pre)
        torch.cuda.synchronize()
        out["prefill_tok_s"] = PREFILL * 5 / (time.perf_counter() - t0)
        model.generate(ids, **gen)  # warm-up (and compilation with the static cache)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(ids, **gen)
        torch.cuda.synchronize()
        t_all = time.perf_counter() - t0
        model(ids)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(ids)
        torch.cuda.synchronize()
        t_p = time.perf_counter() - t0
    out["decode_tok_s"] = new / max(t_all - t_p, 1e-9)
    return out


def bench_model(torch, gp, new, static):
    model = make_model(torch)
    print(f"model: Llama-3-8B shape, random fp16 weights, {sum(p.numel() for p in model.parameters()) / 1e9:.2f}"
          f" B parameters; decode {new} tokens after {PROMPT}, prefill {PREFILL}")
    for label, st in [("eager, dynamic cache", False)] + ([("static cache (compiled)", True)] if static else []):
        stock = time_model(torch, model, new, st)
        gp.reset_fallbacks()
        swapped = gp.swap_linear(model)
        try:
            ours = time_model(torch, model, new, st)
        except Exception as ex:  # report, and go on with the rest
            ours = None
            print(f"[{label}] swapped model failed: {type(ex).__name__}: {ex}")
        finally:
            swapped.restore()
        if ours:
            for what in ("prefill_tok_s", "decode_tok_s"):
                print(f"[{label}] {what[:-6]:8s} stock {stock[what]:9.1f} tok/s   gcore-swapped "
                      f"{ours[what]:9.1f} tok/s   ratio {ours[what] / stock[what]:.2f}")
        print(f"[{label}] gcore counters: {gp.stats()}")
    del model
    torch.cuda.empty_cache()


def time_calls(torch, fn, iters):
    """(GPU µs per call by events over a loop of calls, wall µs per call)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / iters * 1e6
    return a.elapsed_time(b) / iters * 1e3, wall


def bench_gemm(torch, gp, ms):
    """Per shape: µs per call of torch.ops.gcore.gemm (the custom op, through
    the dispatcher), of gcore.pytorch.mm (the same code called directly,
    what a swapped nn.Linear runs in eager code) and of torch.matmul; GPU
    time by events over a loop of calls (a loop whose calls cost more on
    the CPU than their kernels on the GPU measures the CPU), wall time per
    call of the same loop."""
    print(f"{'gemm':16s} {'M':>5s} {'N':>6s} {'K':>6s} | {'op us':>7s} {'mm us':>7s} {'torch us':>8s} | "
          f"{'mm TF/s':>7s} {'torch TF/s':>10s} | {'torch/op':>8s} {'torch/mm':>8s} | wall us op, mm, torch")
    for name, n, k in MODEL_GEMMS + FUSED_GEMMS:
        w = torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02
        for m in ms:
            a = torch.randn(m, k, device="cuda", dtype=torch.float16)
            flop = 2.0 * m * n * k
            iters = max(10, min(200, int(2e12 / flop)))
            o_us, o_wall = time_calls(torch, lambda: torch.ops.gcore.gemm(a, w), iters)
            g_us, g_wall = time_calls(torch, lambda: gp.mm(a, w), iters)
            t_us, t_wall = time_calls(torch, lambda: torch.matmul(a, w.t()), iters)
            print(f"{name:16s} {m:5d} {n:6d} {k:6d} | {o_us:7.1f} {g_us:7.1f} {t_us:8.1f} | "
                  f"{flop / g_us / 1e6:7.1f} {flop / t_us / 1e6:10.1f} | {t_us / o_us:8.2f} {t_us / g_us:8.2f} | "
                  f"{o_wall:6.1f} {g_wall:6.1f} {t_wall:6.1f}")
            del a
        del w
    print(f"gemm counters: {gp.stats()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=8, help="gcore-tune candidates per problem (0: no tuning)")
    ap.add_argument("--db", help="tuning database (default: OUT/api.db, tuned here with --budget)")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--new", type=int, default=128, help="decode tokens")
    ap.add_argument("--static", action="store_true", help="also time the static cache (compiled) path")
    ap.add_argument("--ms", default=",".join(map(str, GEMM_MS)), help="rows of the GEMM table")
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--skip-gemm", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-api"))
    a = ap.parse_args()
    import torch
    import gcore
    import gcore.pytorch as gp
    os.makedirs(a.out, exist_ok=True)
    cache = os.environ.setdefault("GCORE_CACHE", os.path.join(a.out, "cache"))
    db = a.db or os.path.join(a.out, "api.db")
    if a.budget:
        tune(db, a.target, a.budget, cache)
    gp.configure(db=db, target=a.target)
    print(f"device: {torch.cuda.get_device_name()}; gcore {gcore.version()} ({gcore.library_path()}), "
          f"torch {torch.__version__}; kernels from {db} for {a.target}")
    if not a.skip_gemm:
        bench_gemm(torch, gp, [int(x) for x in a.ms.split(",")])
    if not a.skip_model:
        bench_model(torch, gp, a.new, a.static)


if __name__ == "__main__":
    main()
