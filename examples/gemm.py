"""gemm.py — gcore from Python, as a user calls it: numpy arrays on the CPU
backend (their memory is passed as it is), then, with --cuda, the same GEMM
as a torch custom op on a CUDA tensor (PyTorch's current stream) and a
model's nn.Linear layers swapped for gcore-backed ones.

    PYTHONPATH=python python3 examples/gemm.py [--db tune.db] [--cuda]
"""
import argparse

import numpy as np

import gcore


def on_cpu(db):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 256), dtype=np.float32)
    b = rng.standard_normal((96, 256), dtype=np.float32)
    with gcore.Context("cpu", db=db) as ctx:
        c = ctx.gemm(a, b)                                   # C = A·Bᵀ
        w = rng.standard_normal((2 * 96, 256), dtype=np.float32)
        s = ctx.gemm(a, w, epilogue=gcore.EPI_SWIGLU)         # silu(A·Gᵀ) ⊙ (A·Uᵀ)
        a64 = a.astype(np.float64)
        ref = a64 @ b.T.astype(np.float64)
        g, u = a64 @ w[:96].T.astype(np.float64), a64 @ w[96:].T.astype(np.float64)
        sref = g / (1 + np.exp(-g)) * u
        print(f"gcore {gcore.version()} on {ctx.target}")
        print(f"gemm: max |error| {np.abs(c - ref).max() / np.abs(ref).max():.2g} of max |C|")
        print(f"gemm + SwiGLU: max |error| {np.abs(s - sref).max() / np.abs(sref).max():.2g} of max |C|")
        print("counters:", ctx.stats())


def on_cuda():
    import torch
    import gcore.pytorch as gp
    x = torch.randn(16, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(1024, 4096, device="cuda", dtype=torch.float16)
    y = torch.ops.gcore.gemm(x, w)
    ref = x.double() @ w.double().t()
    print(f"torch.ops.gcore.gemm: max |error| {((y.double() - ref).abs().max() / ref.abs().max()):.2g} of max |C|")
    model = torch.nn.Sequential(torch.nn.Linear(4096, 1024, bias=False),
                                torch.nn.Linear(1024, 4096)).cuda().half()
    with torch.no_grad():
        want = model(x)
        swapped = gp.swap_linear(model)
        got = model(x)
        n = len(swapped.names)
        swapped.restore()
    print(f"{n} nn.Linear swapped: max |difference| {((got - want).abs().max() / want.abs().max()):.2g} of max |y|")
    print("counters:", gp.stats())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", help="tuning database (default: gcore's)")
    ap.add_argument("--cuda", action="store_true", help="also through torch on a CUDA GPU")
    args = ap.parse_args()
    on_cpu(args.db)
    if args.cuda:
        on_cuda()
