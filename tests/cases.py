"""The case table: for every op, the shapes and dtypes its kernels are
checked at, and beside them the independent fp64 numpy reference with the
tolerance each element must meet. It drives the op tests on every backend
(tests/test_ops.py) and the kernel benchmarks (bench/op_cases.py). Odd sizes
on purpose: M=1, 3, 17; K not a multiple of any tile.

B in a block format (QDTYPES: f32:q4_k:f32, f16:q4_0:f16, ...) for the GEMM
ops and embed: K (embed: N) whole blocks; the numpy side dequantizes B with
tests/ggufq.py, independently of gcore's base/quant.c.

The ops themselves (their dimensions, buffers and arguments) come from the
C op table through `gcore-tune --list-ops`, not from a copy here; a test
checks that every op there has cases here."""
import json
import os
import subprocess

import numpy as np

import npref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("GCORE_BIN", os.path.join(ROOT, "bin"))
_TABLE = None


def op_table():
    """The C op table, by op name (gcore-tune --list-ops)."""
    global _TABLE
    if _TABLE is None:
        out = subprocess.run([os.path.join(BIN, "gcore-tune"), "--list-ops"], capture_output=True,
                             text=True, check=True).stdout
        _TABLE = {o["name"]: o for o in json.loads(out)}
    return _TABLE


def dims(op):
    """The letters of op's problem dimensions, in key order ("mnk")."""
    return op_table()[op]["dims"]


def problem_args(op, shape):
    """--m 3 --n 100 --k 37 for shape (3, 100, 37) of op."""
    out = []
    for letter, v in zip(dims(op), shape):
        out += ["--" + letter, v]
    return out

DTYPES = ["f32", "f16", "bf16", "f32:f16:f32", "f32:bf16:f32"]

GEMM_SHAPES = [  # (m, n, k)
    (1, 64, 64), (1, 100, 37), (3, 33, 7), (17, 130, 129), (64, 64, 1),
    (5, 1, 300), (128, 96, 256), (33, 1000, 65),
]
# M = 6 and 8 with K % 8 == 0: the tensor-core GEMVs of batched decode
# steps (gemv_mma: N past a 16-row tile, a last K chunk cut short); the
# fused norm serves passes of up to 8 rows (GC_LLAMA_FUSE_MAX)
# a batched decode step's GEMM: 6 rows of A, K % 8 == 0 (gemv_mma's domain
# on NVIDIA, the default for 2 .. 16 rows there)
FEW_ROWS = [(6, 72, 200)]
NORM_GEMM_SHAPES = [(1, 64, 64), (1, 100, 37), (3, 33, 7), (6, 37, 200), (5, 1, 300), (8, 130, 129),
                    (8, 130, 264)]
RMSNORM_SHAPES = [(1, 64), (3, 100), (17, 4096), (64, 7), (2, 1)]

ADD_SHAPES = [(1, 64), (3, 100), (17, 4096), (2, 1)]
# (m, n): Qwen2.5-0.5B's and 7B's QKV rows (1152, 4608), rows not whole
# vectors (a vector of X crosses a row end: 100, 36, 7), one column; the
# mixed dtypes (f32 activations, 16-bit weights: the CPU's recipe) on two
BIAS_SHAPES = [(1, 1152), (3, 100), (33, 36), (5, 7), (2, 1)]
BIAS_MIXED = [(3, 100), (17, 4608)]
# (m, h, g, d): Qwen3-8B's decode row (32 query heads, 8 key heads of 128),
# GQA 5:1 of 96, a prefill of 17 rows, odd and short heads (one vector of 6)
QK_NORM_SHAPES = [(1, 32, 8, 128), (3, 5, 1, 96), (17, 4, 2, 64), (2, 3, 3, 6)]
EMBED_SHAPES = [(1, 64, 512), (7, 100, 33), (17, 256, 1000)]        # (m, n, k = vocab)
# (m, h, g, d): decode rows, MHA, GQA, 5 heads of 96 (GQA 5:1) over two 64-key tiles
HEAD_SHAPES = [(1, 8, 4, 8), (1, 4, 1, 64), (3, 4, 4, 16), (5, 6, 1, 64), (17, 8, 2, 32), (70, 5, 1, 96)]
SAME = ["f32", "f16", "bf16"]
# prefill past one block of query rows and one tile of keys: the 8B
# shape's heads of 128 (GQA 4:1) over 130 tokens, heads of 64 (MHA) over
# 100 (attention at gcore-run's pos0 of 3 and, RUN_VARIANTS, at 300: more
# key tiles than a ring has stages, a diagonal off the tiles' edges)
PREFILL_HEAD_SHAPES = [(130, 8, 2, 128), (100, 4, 4, 64)]
# rmsnorm_gemm_rope_kv: (m, n = (h + 2g)·d, k, h, g, d), at the positions and
# RoPE layouts of ROPE_POS (gcore-run --pos, --layout): 5 heads of 96 (GQA
# 5:1), MHA, odd K, M = 3; position 0 and near the end of a long cache
QKV_ROPE_SHAPES = [(1, 7 * 96, 100, 5, 1, 96), (1, 12 * 16, 64, 4, 4, 16), (3, 8 * 8, 37, 4, 2, 8),
                   (1, 6 * 64, 7, 4, 1, 64)]
ROPE_POS = [(0, 0), (4093, 1), (3, 1)]  # (pos, layout)
PRE_ROPE_SHAPES = [(1, 12, 2, 128), (3, 5, 1, 96), (2, 4, 4, 16), (17, 8, 2, 32)]

# B (the weights) in a block format: A and C f32 (the CPU's recipe) or f16
# (the GPUs'); rows of B whole blocks (K a multiple of 32 or 256), odd N,
# M = 1, 3, 17, 128 and a single column.
QFORMATS = ["q8_0", "q4_0", "q4_k", "q5_k", "q6_k"]
QDTYPES = [f"{a}:{q}:{a}" for q in QFORMATS for a in ("f32", "f16")]
# gcore's device layouts of Q8_0, Q4_0, Q4_K and Q6_K (base/quant.h), which only
# the NVIDIA recipe uses and only its templates (and the GPU SIMT ones) read
DEVICE_LAYOUTS = ("q8_0r", "q4_0r", "q4_kr", "q6_kr")
if os.environ.get("GCORE_TEST_BACKEND", "cpu") == "cuda":
    QDTYPES += [f"f16:{q}:f16" for q in DEVICE_LAYOUTS]


def qblock(dt):
    return 32 if npref.split_dtypes(dt)[1] in ("q8_0", "q4_0") else 256


def qlong(b):
    """A long K: several steps of a GEMV's K slices (gemv_q_gpu's staged
    copies, double-buffered), rows of B at 2 mod 16 bytes (Q4_0, Q8_0 and
    Q6_K), a last step cut short."""
    return 201 * 32 if b == 32 else 25 * 256


def qgemm_shapes(dt):
    b = qblock(dt)
    return [(1, 100, 3 * b), (3, 33, b), (17, 130, 2 * b), (128, 96, 2 * b), (5, 1, b), (1, 64, 8 * b),
            (3, 37, qlong(b))]


def qnorm_shapes(dt):  # the fused norm: decode steps and small batches (M <= 8)
    b = qblock(dt)
    return [(1, 100, 3 * b), (3, 33, b), (8, 130, 2 * b), (1, 37, qlong(b))]


def qembed_shapes(dt):  # (m, n = dim, k = vocab): rows of the table whole blocks
    b = qblock(dt)
    return [(1, b, 40), (7, 2 * b, 33), (17, 3 * b, 100)]


CASES = {
    "gemm": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES + FEW_ROWS],
    "gemm_add": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES[:1] + GEMM_SHAPES[2:4] + GEMM_SHAPES[6:] + FEW_ROWS],
    "gemm_swiglu": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES[:6] + FEW_ROWS],
    # the fused norm serves decode steps and small batches (M <= 8): the GEMVs' domain
    "rmsnorm_gemm": [(dt, s) for dt in DTYPES for s in NORM_GEMM_SHAPES],
    "rmsnorm_gemm_swiglu": [(dt, s) for dt in DTYPES for s in NORM_GEMM_SHAPES[:4]],
    "rmsnorm": [(dt, s) for dt in DTYPES for s in RMSNORM_SHAPES],
    "add": [(dt, s) for dt in SAME for s in ADD_SHAPES],
    # a projection's bias on every row (Qwen2's QKV): activations plus weights of any dtype
    "bias": [(dt, s) for dt in SAME for s in BIAS_SHAPES] + [(dt, s) for dt in DTYPES if dt not in SAME
                                                               for s in BIAS_MIXED],
    # Qwen3's per-head norms of q and k, in place
    "qk_norm": [(dt, s) for dt in SAME for s in QK_NORM_SHAPES] + [(dt, QK_NORM_SHAPES[1]) for dt in DTYPES
                                                                  if dt not in SAME],
    # a split QKV's parts joined: the 8B shape's Q|K and V, odd widths, one column of Y
    "concat": [(dt, s) for dt in SAME for s in [(1, 6144, 5120), (3, 100, 37), (17, 40, 39), (2, 9, 1)]],
    "embed": [(dt, s) for dt in DTYPES for s in EMBED_SHAPES],
    "rope_kv": [(dt, s) for dt in SAME for s in HEAD_SHAPES + PREFILL_HEAD_SHAPES],
    # rope_kv with the step before it folded in (a single sequence's passes of
    # Qwen2 and Qwen3): Qwen2.5-1.5B's decode row (12 heads, 2 kv heads of
    # 128), GQA 5:1 of 96, MHA, a prefill of 17 rows
    "bias_rope_kv": [(dt, s) for dt in SAME for s in PRE_ROPE_SHAPES] + [(dt, PRE_ROPE_SHAPES[1]) for dt in DTYPES
                                                                        if dt not in SAME],
    "qk_norm_rope_kv": [(dt, s) for dt in SAME for s in PRE_ROPE_SHAPES] + [(dt, PRE_ROPE_SHAPES[1])
                                                                           for dt in DTYPES if dt not in SAME],
    # the decode step's QKV projection with rope_kv in the GEMV's epilogue
    "rmsnorm_gemm_rope_kv": [(dt, s) for dt in DTYPES for s in QKV_ROPE_SHAPES],
    # the same with Qwen2's biases added in the epilogue (dense weights)
    "rmsnorm_gemm_bias_rope_kv": [(dt, s) for dt in DTYPES for s in QKV_ROPE_SHAPES[:3]],
    "attention": [(dt, s) for dt in SAME for s in HEAD_SHAPES + PREFILL_HEAD_SHAPES],
    # batched decode: each row at its own position in its own cache slot
    "rope_kv_batch": [(dt, s) for dt in SAME for s in HEAD_SHAPES],
    "attention_batch": [(dt, s) for dt in SAME for s in HEAD_SHAPES[:-1] + [(16, 8, 2, 64)]],
    "argmax": [(dt, s) for dt in SAME for s in [(1, 1000), (3, 128256), (2, 7), (20, 5000)]],
    # a greedy decode step's argmax, which moves the position on: one row
    # (Llama 3's vocabulary, an odd one), and rows past one
    "argmax_step": [(dt, s) for dt in SAME for s in [(1, 128256), (1, 777), (3, 5000)]],
}
for _dt in QDTYPES:
    for _op in ("gemm", "gemm_add", "gemm_swiglu"):
        CASES[_op] += [(_dt, s) for s in qgemm_shapes(_dt)]
    for _op in ("rmsnorm_gemm", "rmsnorm_gemm_swiglu"):
        CASES[_op] += [(_dt, s) for s in qnorm_shapes(_dt)]
    CASES["embed"] += [(_dt, s) for s in qembed_shapes(_dt)]
# the quantized decode step's QKV projection with RoPE in gemv_qmma's
# epilogue (NVIDIA's recipe, the device layouts: through the ring by
# default on sm_90 where a block's rows are whole runs of a head's pairs,
# else the nearest variant): 5 heads of 96 (GQA 5:1), MHA of 16, head_dim
# 128, M = 3. (The GGUF layouts' QKV runs rope_kv apart; gemv_qmma's
# RoPE on them: tests/gpu/test_gpu_gemv.py.)
if os.environ.get("GCORE_TEST_BACKEND", "cpu") == "cuda":
    for _q in DEVICE_LAYOUTS:
        _b = qblock(f"f16:{_q}:f16")
        CASES["rmsnorm_gemm_rope_kv"] += [(f"f16:{_q}:f16", s) for s in
                                          [(1, 7 * 96, 2 * _b, 5, 1, 96), (1, 12 * 16, _b, 4, 4, 16),
                                           (3, 6 * 64, _b, 4, 1, 64), (1, 6 * 128, 2 * _b, 4, 1, 128)]]

# Tolerances for the numpy comparison (independent of the C verifier):
# |got - ref| <= ulp(C dtype) * |ref| + k * 2^-24 * sum|a*b| (+ small terms).
ULP = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}
# Spacing of each dtype's subnormals: the absolute error floor of rounding.
SUB = {"f32": 2.0 ** -149, "f16": 2.0 ** -24, "bf16": 2.0 ** -133}

EPS_F32 = 2.0 ** -24

# ---- the references, each with its tolerance -------------------------------
# d is a gcore-run --dump directory read by npref.read_dump; dt the dtypes
# ("f16" or "A:B:C"); shape the case's dimensions.

def check_gemm(d, dt, shape):
    tc = npref.split_dtypes(dt)[2]
    m, n, k = shape
    ref, absref = npref.gemm(d["A"][1], d["B"][1], m, n, k)
    tol = ULP[tc] * np.abs(ref) + k * EPS_F32 * absref + SUB[tc]
    npref.check(d["C"][1].reshape(m, n), ref, tol)


def check_gemm_add(d, dt, shape):
    """C += A·Bᵀ in place: C's initial values plus one more rounding."""
    tc = npref.split_dtypes(dt)[2]
    m, n, k = shape
    ab, absref = npref.gemm(d["A"][1], d["B"][1], m, n, k)
    c0 = d["C.init"][1].reshape(m, n)
    ref = c0 + ab
    tol = ULP[tc] * np.abs(ref) + k * EPS_F32 * absref + 2 * EPS_F32 * np.abs(c0) + SUB[tc]
    npref.check(d["C"][1].reshape(m, n), ref, tol)


def swiglu_tol(tc, g, ag, u, au, gam):
    """silu(g)·u with g and u each off by gam·(their Σ|a·b|): |d silu/dg| <= 1.1,
    |silu(g)| <= |g|; exp adds a few ulps of fp32 (2^-21)."""
    sg = npref.silu(g)
    gam = gam + 2.0 ** -21
    return sg * u, ULP[tc] * np.abs(sg * u) + 1.1 * np.abs(u) * gam * (ag + np.abs(g)) + \
        np.abs(sg) * gam * au + SUB[tc]


def check_gemm_swiglu(d, dt, shape):
    tc = npref.split_dtypes(dt)[2]
    m, n, k = shape
    w = d["W"][1].reshape(2 * n, k)
    g, ag = npref.gemm(d["A"][1], w[:n].ravel(), m, n, k)
    u, au = npref.gemm(d["A"][1], w[n:].ravel(), m, n, k)
    ref, tol = swiglu_tol(tc, g, ag, u, au, k * EPS_F32)
    npref.check(d["C"][1].reshape(m, n), ref, tol)


def normed_rows(d, m, k):
    x = d["A"][1].reshape(m, k)
    inv = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(1e-5).astype(np.float64))
    return (x * inv * d["norm"][1][None, :]).ravel()


def check_rmsnorm_gemm(d, dt, shape):
    """The GEMM's sum plus the fp32 norm's error on every product."""
    tc = npref.split_dtypes(dt)[2]
    m, n, k = shape
    ref, absref = npref.gemm(normed_rows(d, m, k), d["B"][1], m, n, k)
    tol = ULP[tc] * np.abs(ref) + (2 * k + 8) * EPS_F32 * absref + SUB[tc]
    npref.check(d["C"][1].reshape(m, n), ref, tol)


def check_rmsnorm_gemm_swiglu(d, dt, shape):
    tc = npref.split_dtypes(dt)[2]
    m, n, k = shape
    xn, w = normed_rows(d, m, k), d["W"][1].reshape(2 * n, k)
    g, ag = npref.gemm(xn, w[:n].ravel(), m, n, k)
    u, au = npref.gemm(xn, w[n:].ravel(), m, n, k)
    ref, tol = swiglu_tol(tc, g, ag, u, au, (2 * k + 8) * EPS_F32)
    npref.check(d["C"][1].reshape(m, n), ref, tol)


def check_rmsnorm(d, dt, shape):
    """The fp32 sum of squares (N + 8 ulps of fp32) and the output's rounding."""
    tc = npref.split_dtypes(dt)[2]
    m, n = shape
    x = d["X"][1].reshape(m, n)
    inv = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(1e-5).astype(np.float64))
    ref = x * inv * d["W"][1][None, :]
    npref.check(d["Y"][1].reshape(m, n), ref, (ULP[tc] + (n + 8) * EPS_F32) * np.abs(ref) + SUB[tc])


def check_add(d, dt, shape):
    tc = npref.split_dtypes(dt)[2]
    x, y = d["X"][1], d["Y"][1]
    ref = x + y
    npref.check(d["Z"][1], ref, ULP[tc] * np.abs(ref) + EPS_F32 * (np.abs(x) + np.abs(y)) + SUB[tc])


def check_bias(d, dt, shape):
    """X plus b on every row: one fp32 sum rounded into Z's dtype."""
    tc = npref.split_dtypes(dt)[2]
    m, n = shape
    x, b = d["X"][1].reshape(m, n), d["b"][1].reshape(1, n)
    ref = x + b
    npref.check(d["Z"][1].reshape(m, n), ref, ULP[tc] * np.abs(ref) + EPS_F32 * (np.abs(x) + np.abs(b)) + SUB[tc])


def check_qk_norm(d, dt, shape):
    """Each query and key head normalised as rmsnorm normalises a row (the
    fp32 sum of squares: D + 8 ulps of fp32, and the output's rounding) by
    qn or kn; the value heads unchanged, bit for bit."""
    m, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
    x = d["QKV.init"][1].reshape(m, h + 2 * g, dd)
    got = d["QKV"][1].reshape(m, h + 2 * g, dd)
    qk = x[:, :h + g]
    inv = 1.0 / np.sqrt((qk * qk).mean(axis=2, keepdims=True) + np.float32(1e-5).astype(np.float64))
    w = np.concatenate([np.repeat(d["qn"][1][None, :], h, 0), np.repeat(d["kn"][1][None, :], g, 0)])
    ref = qk * inv * w[None]
    npref.check(got[:, :h + g].reshape(-1), ref.reshape(-1),
                ((ULP[tc] + (dd + 8) * EPS_F32) * np.abs(ref) + SUB[tc]).reshape(-1))
    assert np.array_equal(got[:, h + g:], x[:, h + g:]), "qk_norm: a value head changed"


def check_concat(d, dt, shape):
    """A copy of X's and Y's rows side by side: exact but for the rounding into Z's dtype."""
    tc = npref.split_dtypes(dt)[2]
    m, n, k = shape
    ref = np.concatenate([d["X"][1].reshape(m, k), d["Y"][1].reshape(m, n - k)], axis=1).reshape(-1)
    npref.check(d["Z"][1].reshape(-1), ref, 0.5 * ULP[tc] * np.abs(ref) + SUB[tc])


def check_embed(d, dt, shape):
    """A row copy: exact but for the rounding into the output dtype."""
    tc = npref.split_dtypes(dt)[2]
    m, n, k = shape
    tok = d["tokens"][1].astype(np.int64)
    assert tok.min() >= 0 and tok.max() < k
    ref = d["table"][1].reshape(k, n)[tok]
    npref.check(d["Z"][1].reshape(m, n), ref, 0.5 * ULP[tc] * np.abs(ref) + SUB[tc])


def check_argmax(d, dt, shape):
    """Exact: the lowest index of each row's maximum."""
    m, n = shape
    x = d["X"][1].reshape(m, n)
    got = d["idx"][1].astype(np.int64)
    assert got.tolist() == np.argmax(x, axis=1).tolist(), "argmax: wrong index (ties go to the lowest)"

def check_argmax_step(d, dt, shape):
    """Exact: argmax's indices; the last row's in box0 or box1 as the
    position was even or odd, the other box as it was; the position moved
    on by the rows."""
    check_argmax(d, dt, shape)
    p0 = int(d["pos.init"][1][0])
    assert p0 == int(d["scalars"]["pos0"]), "the case starts at its own position"
    assert int(d["pos"][1][0]) == p0 + shape[0], f"pos: {int(d['pos'][1][0])}, not {p0} + {shape[0]} rows"
    last = int(d["idx"][1][-1])
    for b in (0, 1):
        got, was = int(d[f"box{b}"][1][0]), int(d[f"box{b}.init"][1][0])
        want = last if b == p0 % 2 else was
        assert got == want, f"box{b}: {got}, not {want} (position {p0}, last index {last})"

def rope_ref(x, pos, inv, d):
    """Rotate the halves-layout pairs (x[j], x[j+d/2]) of each head row of x
    [rows, d] by pos * inv[j]."""
    th = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(th), np.sin(th)
    a, b = x[:, : d // 2], x[:, d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=1), np.abs(a) + np.abs(b)


def check_rope_kv(d, dt, shape):
    m, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
    pos0 = int(d["scalars"]["pos0"])
    assert int(d["pos"][1][0]) == pos0, "the kernel reads its position from the pos buffer"
    assert int(d["scalars"]["layout"]) == 0
    inv = 10000.0 ** (-2.0 * np.arange(dd // 2) / dd)
    qkv = d["QKV"][1].reshape(m, h + 2 * g, dd)
    pos = np.arange(m) + pos0
    q, aq = rope_ref(qkv[:, :h].reshape(m * h, dd), np.repeat(pos, h), inv, dd)
    k, ak = rope_ref(qkv[:, h:h + g].reshape(m * g, dd), np.repeat(pos, g), inv, dd)
    slack = lambda a: np.concatenate([a, a], axis=1) * 4 * EPS_F32
    npref.check(d["Qout"][1].reshape(m * h, dd), q, ULP[tc] * np.abs(q) + slack(aq) + SUB[tc])
    for name, new, tol in (("Kc", k, ULP[tc] * np.abs(k) + slack(ak) + SUB[tc]),
                           ("Vc", qkv[:, h + g:].reshape(m * g, dd), None)):
        got = d[name][1].reshape(pos0 + m, g * dd)
        init = d[name + ".init"][1].reshape(pos0 + m, g * dd)
        assert np.array_equal(got[:pos0], init[:pos0]), f"{name}: rows before pos0 changed"
        new = new.reshape(m, g * dd)
        npref.check(got[pos0:], new, (0.5 * ULP[tc] * np.abs(new) + SUB[tc]) if tol is None
                    else tol.reshape(m, g * dd))


def check_rope_of(d, tc, qkv, err, m, h, g, dd):
    """rope_kv of the QKV rows qkv [m, (h+2g)·dd] in fp64 that the op computes
    before it rotates (each value off by err, which includes its rounding
    into C's dtype): each rotated value off by its pair's err (through |cos|,
    |sin| <= 1) plus rope_kv's; value heads by err; cache rows before pos0
    untouched. At the dump's position and RoPE layout."""
    pos0, layout = int(d["scalars"]["pos0"]), int(d["scalars"]["layout"])
    assert int(d["pos"][1][0]) == pos0, "the kernel reads its position from the pos buffer"
    inv = 10000.0 ** (-2.0 * np.arange(dd // 2) / dd)
    if layout == 1:  # adjacent pairs: to halves and back
        perm = np.concatenate([np.arange(0, dd, 2), np.arange(1, dd, 2)])
    else:
        perm = np.arange(dd)
    heads = lambda a: a.reshape(m, h + 2 * g, dd)[:, :, perm]
    x, e = heads(qkv), heads(err)
    pos = np.arange(m) + pos0
    back = np.argsort(perm)

    def rotated(sl, nh):
        r, ar = rope_ref(x[:, sl].reshape(m * nh, dd), np.repeat(pos, nh), inv, dd)
        th = np.repeat(pos, nh)[:, None] * inv[None, :]
        c, s = np.abs(np.cos(th)), np.abs(np.sin(th))
        ea, eb = e[:, sl].reshape(m * nh, dd)[:, : dd // 2], e[:, sl].reshape(m * nh, dd)[:, dd // 2:]
        prop = np.concatenate([c * ea + s * eb, s * ea + c * eb], axis=1)
        tol = ULP[tc] * np.abs(r) + np.concatenate([ar, ar], axis=1) * 4 * EPS_F32 + prop + SUB[tc]
        return r[:, back], tol[:, back]

    q, qt = rotated(slice(0, h), h)
    npref.check(d["Qout"][1].reshape(m * h, dd), q, qt)
    kk, kt = rotated(slice(h, h + g), g)
    v, vt = x[:, h + g:][:, :, back].reshape(m * g, dd), e[:, h + g:][:, :, back].reshape(m * g, dd)
    for name, new, tol in (("Kc", kk, kt), ("Vc", v, vt)):
        got = d[name][1].reshape(pos0 + m, g * dd)
        init = d[name + ".init"][1].reshape(pos0 + m, g * dd)
        assert np.array_equal(got[:pos0], init[:pos0]), f"{name}: rows before pos0 changed"
        npref.check(got[pos0:], new.reshape(m, g * dd), tol.reshape(m, g * dd))


def check_rmsnorm_gemm_rope_kv(d, dt, shape):
    """rope_kv of rmsnorm_gemm's C in C's dtype, each value off by the GEMM
    rule's error (check_rmsnorm_gemm's)."""
    m, n, k, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
    qkv, absref = npref.gemm(normed_rows(d, m, k), d["B"][1], m, n, k)
    err = ULP[tc] * np.abs(qkv) + (2 * k + 8) * EPS_F32 * absref + SUB[tc]
    check_rope_of(d, tc, qkv, err, m, h, g, dd)


def check_rmsnorm_gemm_bias_rope_kv(d, dt, shape):
    """check_rmsnorm_gemm_rope_kv's with b[N] added to every row of C first:
    the fp32 sum's rounding on top of the GEMM rule's error."""
    m, n, k, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
    qkv, absref = npref.gemm(normed_rows(d, m, k), d["B"][1], m, n, k)
    b = d["b"][1].reshape(1, n)
    err = ULP[tc] * np.abs(qkv + b) + (2 * k + 8) * EPS_F32 * absref + EPS_F32 * (np.abs(qkv) + np.abs(b)) + SUB[tc]
    check_rope_of(d, tc, (qkv.reshape(m, n) + b).ravel(), err.ravel(), m, h, g, dd)


def check_bias_rope_kv(d, dt, shape):
    """rope_kv of QKV plus b on every row, each value off by bias's rule
    (one fp32 sum rounded into C's dtype, check_bias's), value heads too."""
    m, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
    x, b = d["QKV"][1].reshape(m, -1), d["b"][1].reshape(1, -1)
    qkv = x + b
    err = ULP[tc] * np.abs(qkv) + EPS_F32 * (np.abs(x) + np.abs(b)) + SUB[tc]
    check_rope_of(d, tc, qkv, err, m, h, g, dd)


def check_qk_norm_rope_kv(d, dt, shape):
    """rope_kv of QKV after qk_norm of its query and key heads, each normed
    value off by check_qk_norm's rule (the fp32 sum of squares, the rounding
    into C's dtype); the value heads copied bit for bit (err 0)."""
    m, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
    x = d["QKV"][1].reshape(m, h + 2 * g, dd).copy()
    qk = x[:, :h + g]
    inv = 1.0 / np.sqrt((qk * qk).mean(axis=2, keepdims=True) + np.float32(1e-5).astype(np.float64))
    w = np.concatenate([np.repeat(d["qn"][1][None, :], h, 0), np.repeat(d["kn"][1][None, :], g, 0)])
    x[:, :h + g] = qk * inv * w[None]
    err = np.zeros_like(x)
    err[:, :h + g] = (ULP[tc] + (dd + 8) * EPS_F32) * np.abs(x[:, :h + g]) + SUB[tc]
    check_rope_of(d, tc, x.reshape(m, -1), err.reshape(m, -1), m, h, g, dd)


def check_attention(d, dt, shape):
    m, h, g, dd = shape
    _, tb, tc = npref.split_dtypes(dt)
    pos0, scale = int(d["scalars"]["pos0"]), d["scalars"]["scale"]
    assert int(d["pos"][1][0]) == pos0, "the kernel reads its position from the pos buffer"
    s_len = pos0 + m
    q = d["Q"][1].reshape(m, h, dd)
    k = d["Kc"][1].reshape(s_len, g, dd)
    v = d["Vc"][1].reshape(s_len, g, dd)
    ref = np.zeros((m, h, dd))
    tol = np.zeros((m, h, dd))
    for t in range(m):
        L = pos0 + t + 1
        for hh in range(h):
            kv = hh // (h // g)
            sc = np.float32(scale).astype(np.float64) * (k[:L, kv] @ q[t, hh])
            p = np.exp(sc - sc.max())
            p /= p.sum()
            ref[t, hh] = p @ v[:L, kv]
            # fp32 scores and sums; P rounded once to the cache's dtype for P·V
            tol[t, hh] = (4 * (L + dd) * EPS_F32 + ULP[tb]) * (p @ np.abs(v[:L, kv]))
    tol += ULP[tc] * np.abs(ref) + SUB[tc]
    npref.check(d["O"][1].reshape(m, h, dd), ref, tol)



def batch_rows(d, m):
    """The rows of a batch op: (positions, slots, rows per slot S = pos0 + M),
    read from the pos buffer the kernel reads; slots are distinct."""
    pos0 = int(d["scalars"]["pos0"])
    pv = d["pos"][1].astype(np.int64).reshape(2, m)
    s_rows = pos0 + m
    assert len(set(pv[1].tolist())) == m and pv[1].min() >= 0 and pv[1].max() < m
    assert pv[0].min() >= 0 and pv[0].max() < s_rows
    return pv[0], pv[1], s_rows


def check_rope_kv_batch(d, dt, shape):
    """rope_kv per row at its own position; k and v land in row pos of its
    slot, every other cache row is untouched."""
    m, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
    pos, slot, s_rows = batch_rows(d, m)
    inv = 10000.0 ** (-2.0 * np.arange(dd // 2) / dd)
    qkv = d["QKV"][1].reshape(m, h + 2 * g, dd)
    q, aq = rope_ref(qkv[:, :h].reshape(m * h, dd), np.repeat(pos, h), inv, dd)
    k, ak = rope_ref(qkv[:, h:h + g].reshape(m * g, dd), np.repeat(pos, g), inv, dd)
    slack = lambda a: np.concatenate([a, a], axis=1) * 4 * EPS_F32
    npref.check(d["Qout"][1].reshape(m * h, dd), q, ULP[tc] * np.abs(q) + slack(aq) + SUB[tc])
    written = slot * s_rows + pos
    for name, new, tol in (("Kc", k, ULP[tc] * np.abs(k) + slack(ak) + SUB[tc]),
                           ("Vc", qkv[:, h + g:].reshape(m * g, dd), None)):
        got = d[name][1].reshape(m * s_rows, g * dd)
        init = d[name + ".init"][1].reshape(m * s_rows, g * dd)
        keep = np.ones(m * s_rows, bool)
        keep[written] = False
        assert np.array_equal(got[keep], init[keep]), f"{name}: a row no batch row writes changed"
        new = new.reshape(m, g * dd)
        npref.check(got[written], new, (0.5 * ULP[tc] * np.abs(new) + SUB[tc]) if tol is None
                    else tol.reshape(m, g * dd))


def check_attention_batch(d, dt, shape):
    """Row t: softmax over keys 0..pos[t] of its own slot."""
    m, h, g, dd = shape
    _, tb, tc = npref.split_dtypes(dt)
    scale = d["scalars"]["scale"]
    pos, slot, s_rows = batch_rows(d, m)
    q = d["Q"][1].reshape(m, h, dd)
    k = d["Kc"][1].reshape(m, s_rows, g, dd)
    v = d["Vc"][1].reshape(m, s_rows, g, dd)
    ref = np.zeros((m, h, dd))
    tol = np.zeros((m, h, dd))
    for t in range(m):
        L = int(pos[t]) + 1
        for hh in range(h):
            kv = hh // (h // g)
            kk, vv = k[slot[t], :L, kv], v[slot[t], :L, kv]
            sc = np.float32(scale).astype(np.float64) * (kk @ q[t, hh])
            p = np.exp(sc - sc.max())
            p /= p.sum()
            ref[t, hh] = p @ vv
            # fp32 scores and sums; P rounded once to the cache's dtype for
            # P·V (the op's rule, as check_attention's)
            tol[t, hh] = (4 * (L + dd) * EPS_F32 + ULP[tb]) * (p @ np.abs(vv))
    tol += ULP[tc] * np.abs(ref) + SUB[tc]
    npref.check(d["O"][1].reshape(m, h, dd), ref, tol)


CHECK = {"gemm": check_gemm, "gemm_add": check_gemm_add, "gemm_swiglu": check_gemm_swiglu,
         "rmsnorm_gemm": check_rmsnorm_gemm, "rmsnorm_gemm_swiglu": check_rmsnorm_gemm_swiglu,
         "rmsnorm": check_rmsnorm, "add": check_add, "bias": check_bias, "qk_norm": check_qk_norm, "concat": check_concat, "embed": check_embed, "rope_kv": check_rope_kv,
         "attention": check_attention, "argmax": check_argmax, "argmax_step": check_argmax_step, "rope_kv_batch": check_rope_kv_batch,
         "attention_batch": check_attention_batch, "rmsnorm_gemm_rope_kv": check_rmsnorm_gemm_rope_kv,
         "bias_rope_kv": check_bias_rope_kv, "qk_norm_rope_kv": check_qk_norm_rope_kv,
         "rmsnorm_gemm_bias_rope_kv": check_rmsnorm_gemm_bias_rope_kv}

# gcore-run flags of a case beyond its shape: where an op has more than one
# position or RoPE layout to check, each runs with each (ROPE_POS; attention:
# at pos0 3, then 300, then 3071: a long decode position, where a split's
# slices are full)
RUN_VARIANTS = {"rmsnorm_gemm_rope_kv": [["--pos", p, "--layout", l] for p, l in ROPE_POS],
                "rmsnorm_gemm_bias_rope_kv": [["--pos", p, "--layout", l] for p, l in ROPE_POS[:2]],
                "bias_rope_kv": [["--pos", p, "--layout", l] for p, l in ROPE_POS[:2]],
                "qk_norm_rope_kv": [["--pos", p, "--layout", l] for p, l in ROPE_POS[:2]],
                "attention": [[], ["--pos", "300"], ["--pos", "3071"]],
                "argmax_step": [[], ["--pos", "300"], ["--pos", "301"]]}


def run_variants(op):
    return RUN_VARIANTS.get(op, [[]])


def numpy_check(op, dt, shape, dump_dir):
    """The case table's check of op on a gcore-run --dump directory."""
    CHECK[op](npref.read_dump(dump_dir), dt, shape)
