#!/usr/bin/env python3
"""gpu_gemm.py — gcore's GEMM kernels against cuBLAS (torch.matmul) on one
NVIDIA GPU, in one run, on the same inputs: the Llama-3-8B prefill shapes
(M = 2048..8192; N, K in {4096, 14336}: C[M,N] = A[M,K]·B[N,K]ᵀ), fp16 and
bf16; optionally the gate/up SwiGLU GEMM against torch (two matmuls + silu·mul)
and the decode GEMVs (M = 1) against device-to-device copy bandwidth.

gcore's kernels come from a bundle built by bin/gcore-gen for the target
(the untuned template default, or --force VARIANT, several allowed); each
code object is loaded with the driver API (ctypes on libcuda) into torch's
context and launched on torch's stream with the bundle's grid, block and
shared-memory expressions, so both sides read the same device buffers.
Kernels that declare tensor maps (@tensormap, e.g. gemm_wgmma:TMA=1) get
them as the runtime builds them (runtime/tmap.c, runtime/cuda.c): the
bundle's dispatch.tmaps lines evaluated for the shape, each map encoded
with cuTensorMapEncodeTiled (2-D, zero fill, the declared box and swizzle)
for the buffer's address and appended to the arguments by value.

Correctness: each gcore result is compared with torch in fp32 (upcast
inputs): relative Frobenius error and the largest element error over
sum|a·b| of its row (fp16 products, fp32 sums: ~1e-3 or better), and every
element must be written (output poisoned with NaN first). Timing: CUDA
events around batches of launches after a warm-up, median per launch;
torch.matmul timed the same way, interleaved. GEMVs (microseconds each,
less than Python's launch cost) are the decode step's ops at M = 1 (with
their fused norm or residual add), timed as one CUDA graph of about 48
launches that cycle through copies of the weights, 200 MB or more in all,
so that no launch finds its weights in the 50 MB L2.

Weights in a block format: a --dtypes entry A:B:C with B one of q8_0, q4_0,
q4_k, q5_k, q6_k (f16:q4_0:f16) times gcore's dequantizing kernels on random
blocks (random bytes, scales set to modest values) against torch on the same
weights dequantized to f16 (cuBLAS, a dense peer); GEMV bytes are the
blocks' bytes, so "fraction of copy" is what the targets of issue 14 name:
    bench/gpu_gemm.py --dtypes f16:q4_0:f16,f16:q4_k:f16,f16:q6_k:f16,f16:q8_0:f16 --gemv --m 512

usage: bench/gpu_gemm.py [--dtypes f16,bf16] [--m 2048,4096,8192] [--nk 4096:4096,...]
                         [--force T:P=V,..]... [--swiglu] [--gemv] [--db DB] [--out FILE]
                         [--no-pdl] [--graph] [--gemv-templates DIR]... [--gemv-warm]
--gemv-warm times the GEMVs on one copy of the weights, L2-resident where
they fit (the 50 MB L2): the floor an L2 prefetch of the weights would give.
--graph times the GEMMs of both sides in CUDA graphs over copies of the
weights (short GEMMs: Python's launch cost would bound them otherwise).
@pdl kernels (the GEMVs) are launched as the runtime launches them on sm_90:
overlapping the kernel before them (programmatic dependent launch), so in a
timed graph each GEMV's start and weight prefetch overlap the previous
one's drain, as they overlap the attention kernel before them in a decode
step; --no-pdl times them serialised.
Needs: bin/ built, torch, an NVIDIA GPU (sm_90 for the wgmma kernels)."""
import argparse
import ctypes
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import ggufq  # noqa: E402

DT = {"f16": torch.float16, "bf16": torch.bfloat16}
# block formats: ggufq's name, elements and bytes per block, and the byte
# offsets of its fp16 scales with the value each gets (modest: the values
# stay within about [-1, 1] of random levels)
QF = {"q8_0": ("Q8_0", 32, 34, [(0, 2.0 ** -8)]), "q4_0": ("Q4_0", 32, 18, [(0, 2.0 ** -4)]),
      "q4_k": ("Q4_K", 256, 144, [(0, 2.0 ** -10), (2, 2.0 ** -7)]),
      "q5_k": ("Q5_K", 256, 176, [(0, 2.0 ** -11), (2, 2.0 ** -7)]),
      "q6_k": ("Q6_K", 256, 210, [(208, 2.0 ** -12)]),
      # gcore's device layouts (base/quant.h): the eight d after the levels;
      # Q6_KR's d where Q6_K's is
      "q8_0r": ("Q8_0R", 256, 272, [(256 + 2 * j, 2.0 ** -8) for j in range(8)]),
      "q4_0r": ("Q4_0R", 256, 144, [(128 + 2 * j, 2.0 ** -4) for j in range(8)]),
      "q4_kr": ("Q4_KR", 256, 144, [(128, 2.0 ** -10), (130, 2.0 ** -7)]),
      "q6_kr": ("Q6_KR", 256, 224, [(208, 2.0 ** -12)])}


def parts(dt):
    """(A/C dtype name, B's block format or None) of 'f16' or 'f16:q4_0:f16'."""
    p = dt.split(":")
    return p[0], (p[1] if len(p) == 3 and p[1] in QF else None)


def qblocks(fmt, rows, K, seed, deq=True):
    """rows×K weights in block format fmt: (uint8 tensor on the GPU, the
    same dequantized to f32 on the GPU by ggufq, independent of gcore; None
    without deq)."""
    name, blk, nb, scales = QF[fmt]
    assert K % blk == 0, f"K={K} is not whole {fmt} blocks"
    g = torch.Generator(device="cuda").manual_seed(seed)
    raw = torch.randint(0, 256, (rows, K // blk, nb), device="cuda", dtype=torch.uint8, generator=g)
    for off, v in scales:
        h = torch.tensor([v], dtype=torch.float16).view(torch.uint8)
        raw[:, :, off], raw[:, :, off + 1] = h[0].item(), h[1].item()
    if not deq:
        return raw.reshape(rows, -1), None
    y = ggufq.dequantize(name, raw.cpu().numpy().reshape(-1), rows * K).reshape(rows, K)
    return raw.reshape(rows, -1), torch.from_numpy(y).cuda()


def qbytes(dt, rows, K):
    _, q = parts(dt)
    return rows * K * 2 if q is None else rows * (K // QF[q][1]) * QF[q][2]

cu = ctypes.CDLL("libcuda.so.1")


def ck(r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cu.cuGetErrorString(r, ctypes.byref(s))
        raise RuntimeError(f"{what}: CUDA error {r} {s.value}")


def split3(x):
    """A @grid/@block line into its expressions: split at ';' and at
    whitespace between two operands (outside parentheses)."""
    out, cur, depth = [], "", 0
    i = 0
    while i < len(x):
        ch = x[i]
        if ch == ";" and depth == 0:
            out.append(cur)
            cur = ""
        elif ch.isspace() and depth == 0:
            j = i
            while j < len(x) and x[j].isspace():
                j += 1
            prev = cur.rstrip()[-1:] if cur.strip() else ""
            nxt = x[j:j + 1]
            if prev and (prev.isalnum() or prev in "_)") and (nxt.isalnum() or nxt in "_("):
                out.append(cur)
                cur = ""
            else:
                cur += " "
            i = j
            continue
        else:
            depth += ch == "("
            depth -= ch == ")"
            cur += ch
        i += 1
    out.append(cur)
    return [o.strip() for o in out if o.strip()]


# cuTensorMapEncodeTiled(map, dtype, rank, addr, dims, strides, box, elementStrides,
#                        interleave, swizzle, l2Promotion, oobFill)
TMAP_DTYPE = {torch.float16: 6, torch.bfloat16: 9, torch.float32: 7}
TMAP_SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
TMAP_ARG = {"A": 0, "B": 1, "W": 1, "C": 2}  # the op buffers, in argument order (core/ops.c)
if hasattr(cu, "cuTensorMapEncodeTiled"):
    cu.cuTensorMapEncodeTiled.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]


def encode_tmap(t, rows, cols, box_rows, box_cols, swizzle, qbytes=0):
    """The tensor map of tensor t (row-major [rows][cols]) as runtime/cuda.c
    makes it: a 64-byte-aligned 128-byte buffer, kept alive by the caller.
    qbytes: t's rows are blocks of that many bytes (a block format: a 3-D
    map of 32-bit words, [rows][cols][qbytes / 4], as runtime/cuda.c)."""
    es = qbytes or t.element_size()
    assert t.data_ptr() % 16 == 0 and cols * es % 16 == 0 and rows * cols * es <= t.numel() * t.element_size(), \
        "tensor map: buffer too small or misaligned"
    raw = ctypes.create_string_buffer(128 + 64)
    addr = (ctypes.addressof(raw) + 63) // 64 * 64
    if qbytes:
        dims, strides, box = (qbytes // 4, cols, rows), (qbytes, cols * qbytes), (qbytes // 4, box_cols, box_rows)
    else:
        dims, strides, box = (cols, rows), (cols * es,), (box_cols, box_rows)
    n = len(dims)
    ck(cu.cuTensorMapEncodeTiled(
        ctypes.c_void_p(addr), 3 if qbytes else TMAP_DTYPE[t.dtype], n, ctypes.c_void_p(t.data_ptr()),
        (ctypes.c_uint64 * n)(*dims), (ctypes.c_uint64 * (n - 1))(*strides),
        (ctypes.c_uint32 * n)(*box), (ctypes.c_uint32 * n)(*([1] * n)),
        0, TMAP_SWIZZLE[swizzle], 3, 0), "cuTensorMapEncodeTiled")
    return raw, addr


class LaunchAttr(ctypes.Structure):  # CUlaunchAttribute: id, pad, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shmem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttr)),
                ("nattrs", ctypes.c_uint)]


PDL = {"on": True}  # --no-pdl turns programmatic dependent launch off


class Kernel:
    """One dispatch entry of a bundle: its code object loaded, its launch
    geometry as expressions over M N K and the consts; pdl: the template
    waits for its predecessor itself (@pdl), so on sm_90 it is launched to
    overlap the kernel before it, as runtime/cuda.c does; prefetch: it
    takes an L2 window after its tensor maps (@prefetch), passed empty
    (NULL, 0), as gc_rt_launch does."""

    def __init__(self, row):
        blob, self.symbol, grid, block, consts, self.shmem_x, self.name, tmaps, self.pdl, self.prefetch = row
        self.env = {k: int(v) for k, v in (kv.split("=") for kv in consts.split(","))}
        self.grid_x, self.block_x = split3(grid), split3(block)
        self.tmaps = []  # (buffer, [rows, cols, box rows, box cols, swizzle], condition)
        for line in (tmaps or "").split("\n"):
            if line.strip():
                body, _, cond = line.partition(" if ")
                buf, _, rest = body.strip().partition(" ")
                self.tmaps.append((buf, split3(rest), cond.strip() or "1"))
        self.maps = {}
        self.qbytes = 0  # B's block bytes where it is a block format (kernel_for)
        self.mod = ctypes.c_void_p()
        self.blob = ctypes.create_string_buffer(bytes(blob), len(blob))
        ck(cu.cuModuleLoadData(ctypes.byref(self.mod), self.blob), "cuModuleLoadData")
        self.fn = ctypes.c_void_p()
        ck(cu.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, self.symbol.encode()),
           "cuModuleGetFunction")
        self.geo = {}

    def ev(self, x, M, N, K):
        # SMS is the device's SM count at launch, as the runtime binds it
        env = dict(self.env, M=M, N=N, K=K, H=0, G=0, D=0,
                   SMS=torch.cuda.get_device_properties(0).multi_processor_count)
        py = re.sub(r"(?<![/])/(?!/)", "//", x).replace("&&", " and ").replace("||", " or ")
        py = re.sub(r"!(?!=)", " not ", py)
        return int(eval(py, {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}, env))

    def launch(self, args, M, N, K, stream, eps=None):
        key = (M, N, K)
        if key not in self.geo:
            g = [self.ev(x, M, N, K) for x in self.grid_x] + [1, 1]
            b = [self.ev(x, M, N, K) for x in self.block_x] + [1, 1]
            sh = self.ev(self.shmem_x, M, N, K) if self.shmem_x not in ("", "0") else 0
            if sh > 0:  # granted from 48 KiB less the static shared memory: opt in to any amount
                ck(cu.cuFuncSetAttribute(self.fn, 8, sh), "cuFuncSetAttribute")
            self.geo[key] = (g[:3], b[:3], sh)
        g, b, sh = self.geo[key]
        ptrs = [ctypes.c_void_p(a.data_ptr()) for a in args] + [ctypes.c_int64(v) for v in (M, N, K)]
        if eps is not None:  # the fused-norm ops: (A, B, C, norm, M, N, K, eps)
            ptrs.append(ctypes.c_float(eps))
        vals = [ctypes.cast(ctypes.pointer(p), ctypes.c_void_p) for p in ptrs]
        for i, (buf, xs, cond) in enumerate(self.tmaps):  # then the tensor maps, by value
            if not self.ev(cond, M, N, K):
                continue
            t = args[TMAP_ARG[buf]]
            mkey = (i, t.data_ptr(), M, N, K)
            if mkey not in self.maps:
                self.maps[mkey] = encode_tmap(t, *[self.ev(x, M, N, K) for x in xs],
                                              qbytes=self.qbytes if buf in ("B", "W") else 0)
            vals.append(ctypes.c_void_p(self.maps[mkey][1]))
        if self.prefetch:  # the empty window: (const char *pf, int64_t pf_n) = (NULL, 0)
            self.window = (ctypes.c_void_p(0), ctypes.c_int64(0))
            vals += [ctypes.cast(ctypes.pointer(p), ctypes.c_void_p) for p in self.window]
        arr = (ctypes.c_void_p * len(vals))(*vals)
        if self.pdl and PDL["on"]:
            at = LaunchAttr(id=6)  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            at.value[0] = 1
            cfg = LaunchConfig((ctypes.c_uint * 3)(*g), (ctypes.c_uint * 3)(*b), sh,
                               ctypes.c_void_p(stream), ctypes.pointer(at), 1)
            ck(cu.cuLaunchKernelEx(ctypes.byref(cfg), self.fn, arr, None), "cuLaunchKernelEx")
            return
        ck(cu.cuLaunchKernel(self.fn, g[0], g[1], g[2], b[0], b[1], b[2], sh,
                             ctypes.c_void_p(stream), arr, None), "cuLaunchKernel")


def build_bundle(op, dt, ms, nks, target, force, out, db=None, templates=None):
    ns = sorted({n for n, _ in nks})
    ks = sorted({k for _, k in nks})
    cmd = [os.path.join(ROOT, "bin", "gcore-gen"), "--target", target, "--op", op, "--dtype", dt,
           "--m", ",".join(map(str, ms)), "--n", ",".join(map(str, ns)),
           "--k", ",".join(map(str, ks)), "-o", out, "-q"]
    if force:
        cmd += ["--force", force]
    if db:
        cmd += ["--db", db]
    if templates:  # another tree's templates (its DIR/gpu/), e.g. `git archive REV templates`
        cmd += ["--templates", templates]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr}")


def kernel_for(bundle, target, op, dt, M, N, K, cache):
    with sqlite3.connect(bundle) as c:
        cols = {r[1] for r in c.execute("PRAGMA table_info(dispatch)")}
        row = c.execute(
            "SELECT o.blob, d.symbol, d.grid, d.block, d.consts, d.shmem, "
            "d.template || ' ' || d.params, d.tmaps, d.pdl, " +
            ("d.prefetch" if "prefetch" in cols else "0") + " FROM dispatch d "
            "JOIN code_objects o ON o.id = d.code_id "
            "WHERE d.target=? AND d.op=? AND d.ta=? AND d.tb=? AND d.n=? AND d.k=? AND d.m_lo<=? AND ?<=d.m_hi "
            "ORDER BY d.m_hi - d.m_lo LIMIT 1",
            (target, op, parts(dt)[0], parts(dt)[1] or parts(dt)[0], N, K, M, M)).fetchone()
    if row is None:
        raise RuntimeError(f"no dispatch entry for {op} {dt} {M}x{N}x{K} in {bundle}")
    key = (bundle, row[6])
    if key not in cache:
        cache[key] = Kernel(row)
        q = parts(dt)[1]
        cache[key].qbytes = QF[q][2] if q in QF else 0
    return cache[key]


def timeit(fn, reps=7, batch=10):
    """Median over reps of (time of batch launches) / batch, in ms."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batch):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / batch)
    ts.sort()
    return ts[len(ts) // 2]


def timeit_graph(launch, n=50, reps=9):
    """Median ms per launch of n launches captured in one CUDA graph
    (launch(stream_handle) issues one), replayed reps times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            launch(torch.cuda.current_stream().cuda_stream)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        st = torch.cuda.current_stream().cuda_stream
        for _ in range(n):
            launch(st)
    return timeit(g.replay, reps=reps, batch=1) / n


def check(out, ref, absref):
    """(relative Frobenius error, max |out-ref| / absref row scale, all written)."""
    o = out.float()
    written = not torch.isnan(o).any().item()
    d = (o - ref)
    rel = (d.norm() / ref.norm()).item()
    worst = (d.abs() / absref).max().item()
    return rel, worst, written


def run_gemm(args, dt, M, N, K, kern, stream, swiglu=False):
    torch.manual_seed(M * 31 + N * 7 + K)
    ta, q = parts(dt)
    A = (torch.randn(M, K, device="cuda") * 0.5).to(DT[ta])
    C = torch.full((M, N), float("nan"), device="cuda", dtype=DT[ta])
    if q:  # gcore reads the blocks; torch multiplies their values in f16 (a dense peer)
        Bq, Bf = qblocks(q, 2 * N if swiglu else N, K, M + N + K)
        B = Bf.to(DT[ta])
    else:
        B = (torch.randn(2 * N if swiglu else N, K, device="cuda") * 0.5 / K ** 0.25).to(DT[ta])
        Bq, Bf = B, B.float()
    Af = A.float()
    if swiglu:
        g, u = Af @ Bf[:N].T, Af @ Bf[N:].T
        ref = torch.nn.functional.silu(g) * u
        absref = (Af.abs() @ Bf[:N].abs().T) * u.abs() + (Af.abs() @ Bf[N:].abs().T) * \
            torch.nn.functional.silu(g).abs() + 1e-6
    else:
        ref = Af @ Bf.T
        absref = Af.abs() @ Bf.abs().T + 1e-6
    kern.launch([A, Bq, C], M, N, K, stream)
    torch.cuda.synchronize()
    rel, worst, written = check(C, ref, absref)
    del Af, Bf, ref, absref
    if args.graph:  # short GEMMs: one graph of launches, each on its own copy of the weights
        n = max(2, min(16, -(-(200 << 20) // (Bq.numel() * Bq.element_size()))))
        Bqs = [Bq] + [Bq.clone() for _ in range(n - 1)]
        Bs = Bqs if Bq is B else [B] + [B.clone() for _ in range(n - 1)]
        T = torch.empty(M, 2 * N if swiglu else N, device="cuda", dtype=DT[ta])

        def cycled(fn, copies):
            turn = [0]

            def launch(st):
                fn(copies[turn[0] % len(copies)], st)
                turn[0] += 1
            return launch

        def peer(b, st):
            torch.matmul(A, b.T, out=T)
            if swiglu:
                torch.nn.functional.silu(T[:, :N]) * T[:, N:]
        tg = timeit_graph(cycled(lambda b, st: kern.launch([A, b, C], M, N, K, st), Bqs), n=4 * n)
        tt = timeit_graph(cycled(peer, Bs), n=4 * n)
        tmm = timeit_graph(cycled(lambda b, st: torch.matmul(A, b.T, out=T), Bs), n=4 * n)
        del Bqs, Bs
    elif swiglu:
        tg = timeit(lambda: kern.launch([A, Bq, C], M, N, K, stream))

        def peer():
            h = A @ B.T  # one matmul over the stacked weights, then the epilogue
            return torch.nn.functional.silu(h[:, :N]) * h[:, N:]
        T = A @ B.T
        tt = timeit(peer)
        tmm = timeit(lambda: torch.matmul(A, B.T, out=T))
    else:
        tg = timeit(lambda: kern.launch([A, Bq, C], M, N, K, stream))
        T = torch.empty(M, N, device="cuda", dtype=DT[ta])
        tt = tmm = timeit(lambda: torch.matmul(A, B.T, out=T))
    fl = 2.0 * M * N * K * (2 if swiglu else 1)
    return dict(rel=rel, worst=worst, written=written, t_g=tg, t_t=tt, t_mm=tmm,
                tf_g=fl / tg / 1e9, tf_t=fl / tt / 1e9, tf_mm=fl / tmm / 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--m", default="2048,4096,8192")
    ap.add_argument("--nk", default="4096:4096,14336:4096,4096:14336",
                    help="N:K pairs (8B: q/o 4096:4096, gate or up 14336:4096, down 4096:14336; \"\": none, with --check \"\" only --gemv runs)")
    ap.add_argument("--check", default="1000:4100:1032,130:72:72,2048:264:1000,257:4096:4104",
                    help="extra M:N:K shapes, correctness only (ragged edges)")
    ap.add_argument("--force", action="append", default=[], help="variant(s) to time (default: "
                    "the template default); repeatable")
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--swiglu", action="store_true", help="also the gate/up GEMM (N:K = 14336:4096)")
    ap.add_argument("--swiglu-force", action="append", default=[])
    ap.add_argument("--gemv", action="store_true", help="also M = 1 GEMVs vs copy bandwidth")
    ap.add_argument("--graph", action="store_true", help="time the GEMMs (both sides) as CUDA graphs of "
                    "launches, each on its own copy of the weights (200 MB or more in all): for short GEMMs "
                    "(M = 128), which Python's launches would bound, and with the weights cold as in a model")
    ap.add_argument("--db", default=None, help="tuning database: unforced rows use its winners")
    ap.add_argument("--out", default=None, help="also write the table here")
    ap.add_argument("--gemv-ops", default=None, help="with --gemv: these OP:N:K instead of the 8B recipe's, comma-separated")
    ap.add_argument("--gemv-force", action="append", default=[], metavar="T:P=V,..",
                    help="with --gemv: also time this variant of the ops its template serves "
                         "(repeatable; the --db winner or the default is timed first)")
    ap.add_argument("--gemv-templates", action="append", default=[], metavar="DIR",
                    help="with --gemv: also time each op's default built from the templates in DIR (DIR/gpu/: "
                         "another revision's, e.g. `git archive REV templates | tar -x -C /tmp/old` gives "
                         "/tmp/old/templates), to weigh a template change in one run (repeatable)")
    ap.add_argument("--gemv-warm", action="store_true", help="with --gemv: every launch reads the same "
                    "weights (L2-resident where they fit): what a GEMV whose weights were prefetched into L2 would take")
    ap.add_argument("--no-pdl", action="store_true", help="launch @pdl kernels serialised, not "
                    "overlapping the kernel before them (programmatic dependent launch)")
    a = ap.parse_args()
    PDL["on"] = not a.no_pdl

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    ctx = ctypes.c_void_p()
    ck(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    stream = torch.cuda.current_stream().cuda_stream
    dev = torch.cuda.get_device_name()
    ms = [int(x) for x in a.m.split(",")]
    nks = [tuple(int(v) for v in x.split(":")) for x in a.nk.split(",") if x]  # "": no GEMMs (--gemv only)
    checks = [tuple(int(v) for v in x.split(":")) for x in a.check.split(",") if x]
    lines = [f"device: {dev}, torch {torch.__version__}, target {a.target}", ""]
    tmp = tempfile.mkdtemp()
    cache = {}
    bad = 0

    def emit(s):
        print(s, flush=True)
        lines.append(s)

    for op, forces, shapes in (
            [("gemm", a.force or [None], [(m, n, k) for m in ms for n, k in nks])] +
            ([("gemm_swiglu", a.swiglu_force or [None], [(m, 14336, 4096) for m in ms])]
             if a.swiglu else [])):
        if not shapes and not checks:
            continue
        emit(f"| op | dtype | M | N | K | kernel | rel err | worst/|ab| | gcore TFLOP/s | "
             f"torch TFLOP/s | gcore / torch |")
        emit("|---|---|---|---|---|---|---|---|---|---|---|")
        for dt in a.dtypes.split(","):
            for fi, force in enumerate(forces):
                bundle = os.path.join(tmp, f"{op}-{dt}-{fi}.gcb")
                allm = sorted({s[0] for s in shapes + checks})
                allnk = sorted({(s[1], s[2]) for s in shapes + checks})
                build_bundle(op, dt, allm, allnk, a.target, force, bundle, None if force else a.db)
                for (M, N, K) in checks + shapes:
                    kern = kernel_for(bundle, a.target, op, dt, M, N, K, cache)
                    r = run_gemm(a, dt, M, N, K, kern, stream, swiglu=(op == "gemm_swiglu"))
                    tol = 1e-2 if dt == "bf16" else 2e-3
                    ok = r["written"] and r["rel"] < tol and r["worst"] < 0.05
                    bad += not ok
                    timed = (M, N, K) in shapes
                    emit(f"| {op} | {dt} | {M} | {N} | {K} | {kern.name} | {r['rel']:.2e} | "
                         f"{r['worst']:.2e}{'' if ok else ' FAIL'} | "
                         + (f"{r['tf_g']:.0f} | {r['tf_t']:.0f} | {r['tf_g'] / r['tf_t']:.3f} |"
                            if timed else "(check only) | | |"))
    if a.gemv:
        n = 1 << 28
        x = torch.empty(n, device="cuda", dtype=torch.float16)
        y = torch.empty_like(x)
        tc = timeit(lambda: y.copy_(x))
        bw = 2 * n * 2 / tc / 1e6
        emit("")
        emit(f"copy bandwidth (read + write, 512 MiB each way): {bw:.0f} GB/s")
        emit("")
        emit("Decode ops at M = 1 as the 8B recipe runs them. Every launch of a timed graph reads a")
        emit("different copy of the weights (copies of 200 MB or more in all: four times the L2),")
        emit("so the figures are DRAM-bound like a decode step's; bytes = every operand read or written."
             if not a.gemv_warm else "--gemv-warm: every launch reads the same weights (L2-resident where they fit).")
        emit("| op | dtype | N | K | kernel | rel err | µs | GB/s | fraction of copy |")
        emit("|---|---|---|---|---|---|---|---|---|")
        decode = [("rmsnorm_gemm", 6144, 4096), ("gemm_add", 4096, 4096), ("rmsnorm_gemm_swiglu", 14336, 4096),
                  ("gemm_add", 4096, 14336), ("rmsnorm_gemm", 128256, 4096)]
        if a.gemv_ops:  # any OP:N:K, the recipe's or not (the split QKV's V: rmsnorm_gemm:1024:4096)
            decode = [(o, int(n), int(k)) for o, n, k in (d.split(":") for d in a.gemv_ops.split(","))]
        serves = {"gemv_gpu": ("rmsnorm_gemm", "gemm_add", "rmsnorm_gemm_swiglu"),
                  "gemv_bulk": ("rmsnorm_gemm", "gemm_add", "rmsnorm_gemm_swiglu"),
                  "gemv_q_gpu": ("rmsnorm_gemm", "gemm_add", "rmsnorm_gemm_swiglu"),
                  "gemv_qmma": ("rmsnorm_gemm", "gemm_add", "rmsnorm_gemm_swiglu")}
        runs = [(dt, op, N, K, f, None) for dt in a.dtypes.split(",") for op, N, K in decode
                for f in [None] + [f for f in a.gemv_force if op in serves.get(f.split(":")[0], ())]]
        runs += [(dt, op, N, K, None, tdir) for tdir in a.gemv_templates for dt in a.dtypes.split(",")
                 for op, N, K in decode]
        for dt, op, N, K, force, tdir in runs:
            bundle = os.path.join(tmp, f"gemv-{op}-{dt}-{N}-{K}-{len(cache)}.gcb")
            try:
                build_bundle(op, dt, [1], [(N, K)], a.target, force, bundle, None if force or tdir else a.db,
                             templates=tdir)
            except RuntimeError as err:
                if force and "constraint fails" in str(err):
                    continue  # not a point of this op's space (gemv_gpu's gate/up pair: ROWS <= 4)
                raise
            kern = kernel_for(bundle, a.target, op, dt, 1, N, K, cache)
            rows = 2 * N if op.endswith("swiglu") else N
            torch.manual_seed(N + K)
            ta, q = parts(dt)
            A = torch.randn(1, K, device="cuda").to(DT[ta])
            norm = (torch.rand(K, device="cuda") + 0.5).to(DT[ta])
            wbytes = qbytes(dt, rows, K)
            copies = 1 if a.gemv_warm else max(2, -(-200_000_000 // wbytes))
            if q:  # random blocks; the first copy's values for the check
                Bs, B0 = [qblocks(q, rows, K, 1 + i, deq=False)[0] for i in range(1, copies)], qblocks(q, rows, K, 1)
                Bs.insert(0, B0[0])
                Bref = B0[1]
            else:
                Bs = [(torch.randn(rows, K, device="cuda") / K ** 0.5).to(DT[dt]) for _ in range(copies)]
                Bref = Bs[0].float()
            C0 = torch.randn(1, N, device="cuda").to(DT[ta])
            C = torch.full((1, N), float("nan"), device="cuda", dtype=DT[ta])
            if op == "gemm_add":
                C.copy_(C0)
            fused = op.startswith("rmsnorm")
            args = (lambda B: [A, B, C, norm]) if fused else (lambda B: [A, B, C])
            eps = 1e-5 if fused else None
            kern.launch(args(Bs[0]), 1, N, K, stream, eps)
            torch.cuda.synchronize()
            x = A.float()
            if fused:
                x = x * torch.rsqrt((x * x).mean() + 1e-5) * norm.float()
            h = x @ Bref.T
            ref = (torch.nn.functional.silu(h[:, :N]) * h[:, N:] if op.endswith("swiglu") else
                   h + C0.float() if op == "gemm_add" else h)
            rel = ((C.float() - ref).norm() / ref.norm()).item()
            bad += not (rel < (1e-2 if dt == "bf16" else 2e-3))
            turn = [0]

            def one(st):
                turn[0] += 1
                kern.launch(args(Bs[turn[0] % copies]), 1, N, K, st, eps)
            t = timeit_graph(one, n=copies * max(1, 48 // copies))
            nbytes = wbytes + (K + N + (N if op == "gemm_add" else 0) + (K if fused else 0)) * 2
            gbs = nbytes / t / 1e6
            name = kern.name + (f" ({tdir})" if tdir else "")
            emit(f"| {op} | {dt} | {N} | {K} | {name} | {rel:.1e} | {t * 1e3:.1f} | {gbs:.0f} | "
                 f"{gbs / bw:.3f} |")
            del Bs
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    if bad:
        print(f"{bad} correctness failures", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
