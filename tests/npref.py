"""numpy fp64 references for the ops and readers for gcore-run --dump."""
import os
import numpy as np

import ggufq

# gcore's names of ggml's block formats (B of the GEMM ops and embed)
QTYPES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k": "Q4_K", "q5_k": "Q5_K", "q6_k": "Q6_K",
          "q8_0r": "Q8_0R", "q4_0r": "Q4_0R", "q4_kr": "Q4_KR",
          "q6_kr": "Q6_KR"}


def bf16_to_f64(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def load(path, dtype, count):
    """count elements of dtype from path as float64; a block format is
    dequantized by ggufq (written from ggml's description, independently of
    gcore's base/quant.c)."""
    raw = np.fromfile(path, dtype=np.uint8)
    if dtype in QTYPES:
        assert raw.size == ggufq.nbytes(QTYPES[dtype], count), f"{path}: {raw.size} bytes for {count} {dtype}"
        return ggufq.dequantize(QTYPES[dtype], raw, count).astype(np.float64)
    size = {"f32": 4, "i32": 4, "f64": 8}.get(dtype, 2)
    assert raw.size == count * size, f"{path}: {raw.size} bytes, want {count * size}"
    if dtype == "f32":
        return raw.view(np.float32).astype(np.float64)
    if dtype == "i32":
        return raw.view(np.int32).astype(np.int64)
    if dtype == "f64":
        return raw.view(np.float64)
    if dtype == "f16":
        return raw.view(np.float16).astype(np.float64)
    return bf16_to_f64(raw.view(np.uint16))


def read_dump(d):
    """{name: (dtype, array)} from a gcore-run --dump directory; in/out
    buffers also as name + '.init' (their contents before the launch), and
    the op's scalars under 'scalars'."""
    out = {}
    with open(os.path.join(d, "meta.txt")) as f:
        lines = f.read().splitlines()
    out["scalars"] = {k: float(v) for k, v in (kv.split("=") for kv in lines[1].split()[1:])}
    for line in lines[2:]:
        name, dt, count, kind = line.split()
        out[name] = (dt, load(os.path.join(d, name + ".bin"), dt, int(count)))
        if kind == "inout":
            out[name + ".init"] = (dt, load(os.path.join(d, name + ".init.bin"), dt, int(count)))
    return out


def split_dtypes(s):
    p = s.split(":")
    return p * 3 if len(p) == 1 else p


def gemm(a, b, m, n, k):
    A, B = a.reshape(m, k), b.reshape(n, k)
    return A @ B.T, np.abs(A) @ np.abs(B).T


def silu(x):
    return x / (1.0 + np.exp(-x))


def check(got, ref, tol):
    assert np.all(np.isfinite(got)), "non-finite output"
    err = np.abs(got - ref)
    bad = np.argwhere(err > tol)
    assert bad.size == 0, (f"{bad.shape[0]} of {got.size} elements out of tolerance; first at "
                           f"{bad[0]}: got {got.flat[bad[0][0]]}, want {ref.flat[bad[0][0]]}")
