"""The bulk-copy GEMVs (gemv_bulk, and gemv_qmma with RL=3: sm_90) through gcore's own launch path:
gcore-run --op on shapes whose rows are not a whole number of stages (K
not a multiple of KC), whose N is not a whole number of row groups, and
with more row groups than blocks (each block walks several); every element
checked against the fp64 host reference and against numpy, as the op case
table is. Run with GCORE_TEST_BACKEND=cuda GCORE_TEST_TARGETS=sm_90a."""
import os

import pytest

from test_ops import numpy_check, problem_args

BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "cpu").split(",")
pytestmark = pytest.mark.skipif(BACKEND != "cuda" or not any(t.startswith("sm_9") for t in TARGETS),
                                reason="needs GCORE_TEST_BACKEND=cuda and an sm_90 target")

SHAPES = [(1, 4100, 4104), (1, 7, 24), (1, 300, 14336), (1, 5000, 1000)]
VARIANTS = ["RS=8", "RS=2,KC=256,STAGES=8,BPS=2", "RS=16,KC=512,STAGES=3", "RS=4,KC=2048,STAGES=2", "RS=4,KC=4096,STAGES=3"]


def forced_run(gc, op, dt, s, force, *extra, numpy=True):
    """op's problem s built with --force force (None: the target's
    defaults) for the sm_90 target and run through gcore-run (extra: its
    --pos, --layout), which verifies every element against the fp64 host
    reference; with numpy, the dump checked by numpy as the op case
    table's. gcore-run's result."""
    target = next(t for t in TARGETS if t.startswith("sm_9"))
    r = gc("gcore-gen", "--target", target, "--op", op, "--dtype", dt, *problem_args(op, s),
           *(["--force", force] if force else []), "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    dump = gc.dir / ("d_" + "x".join(map(str, s)))
    r = gc("gcore-run", "--backend", "cuda", "-b", "b.gcb", "--op", op, "--dtype", dt, *problem_args(op, s),
           *extra, *(["--dump", dump] if numpy else []), "--min-time", "0.001")
    assert r.rc == 0 and "verified" in r.out, (dt, s, r)
    if numpy:
        numpy_check(op, dt, s, dump)
    return r


@pytest.mark.parametrize("op", ["gemm", "gemm_add", "rmsnorm_gemm", "gemm_swiglu", "rmsnorm_gemm_swiglu"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_gemv_bulk_verifies(gc, op, variant, dt):
    for s in SHAPES:  # (the gate/up pair's "RS=8" takes its @defaults' STAGES=4: the ring fits)
        assert "gemv_bulk" in forced_run(gc, op, dt, s, f"gemv_bulk:{variant}").out


# gemv_bulk's RoPE epilogue (a unit is a RoPE pair, its two rows in one
# stage): the 8B's QKV, 5 heads of 96 (GQA 5:1; 336 pairs over 8-unit
# groups: the last group part-filled), heads of 64 whose K (2304) is not
# a whole number of stages, at position 0 and near the end of a cache,
# both layouts.
BULK_ROPE_SHAPES = [(1, 48 * 128, 4096, 32, 8, 128), (1, 7 * 96, 512, 5, 1, 96), (1, 6 * 64, 2304, 4, 1, 64)]


@pytest.mark.parametrize("variant", ["RS=4", "RS=8,KC=1024,STAGES=4", "RS=2,KC=256,STAGES=8,BPS=2", "RS=16,KC=512,STAGES=3"])
@pytest.mark.parametrize("pos,layout", [(0, 0), (4093, 1)])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_gemv_bulk_rope_verifies(gc, variant, pos, layout, dt):
    for s in BULK_ROPE_SHAPES:
        r = forced_run(gc, "rmsnorm_gemm_rope_kv", dt, s, f"gemv_bulk:{variant}", "--pos", pos, "--layout", layout)
        assert "gemv_bulk" in r.out, (dt, s, r)


# gemv_qmma's bulk-copy ring (RL=3, the device layouts): N not a whole
# number of row groups (the last group's rows past N copied as row N - 1
# and not stored), K whose last stage is short of KS blocks (2304: 9
# blocks) or has fewer blocks than warps (512), a ring deeper than the
# stages (NST 4 for one stage), rows of A up to 8·NT.
RING_SHAPES = [(1, 6144, 4096), (1, 77, 512), (8, 130, 2304)]
# (XS=0 named: on sm_90 the norm ops' default is XS=1; these cases are the
# ring's own, the staged operands' are below)
# PT=1: a grid of the device's SMs, each block walking row tiles (6144
# rows: 384 tiles of 16 over 132 blocks), the ring's three stages running
# on across them.
RING_VARIANTS = ["RL=3,XS=0", "RL=3,NST=4,KS=2,WARPS=4,XS=0", "RL=3,NST=3,RT=2,WARPS=4,KS=2,XS=0",
                 "RL=3,NT=2,WARPS=8,KS=4,XS=0", "RL=3,PT=1,NST=3,XS=0"]


@pytest.mark.parametrize("op", ["gemm", "gemm_add", "rmsnorm_gemm", "gemm_swiglu", "rmsnorm_gemm_swiglu"])
@pytest.mark.parametrize("variant", RING_VARIANTS)
@pytest.mark.parametrize("dt", ["f16:q4_0r:f16", "bf16:q8_0r:bf16", "f16:q4_kr:f16", "f16:q6_kr:f16"])
def test_gemv_qmma_ring_verifies(gc, op, variant, dt):
    for s in RING_SHAPES + ([(13, 4100, 1280)] if "NT=2" in variant else []):
        r = forced_run(gc, op, dt, s, f"gemv_qmma:{variant}")
        assert "gemv_qmma" in r.out and "RL=3" in r.out, r


# gemv_qmma with RoPE in its epilogue (rmsnorm_gemm_rope_kv): the 8B's
# QKV (32 heads, 8 KV heads of 128), 5 heads of 96 (GQA 5:1), 3 rows of
# A, at position 0 and near the end of a cache, both RoPE layouts; the
# ring (its two boxes a stage: a head's pair halves, or the block's
# halves), register loads and the copy pipeline (a GGUF layout).
ROPE_SHAPES = [(1, 48 * 128, 4096, 32, 8, 128), (1, 7 * 96, 512, 5, 1, 96), (3, 6 * 64, 2304, 4, 1, 64)]
ROPE_VARIANTS = [("RL=3,XS=1", ["f16:q4_0r:f16", "bf16:q8_0r:bf16", "f16:q6_kr:f16"]),
                 ("RL=3,XS=0,WARPS=8,KS=4,RT=1,NST=3", ["f16:q4_kr:f16", "f16:q4_0r:f16"]),
                 ("RL=2,XS=0", ["f16:q8_0r:f16"]), ("RL=1,XS=1", ["f16:q4_k:f16", "bf16:q6_k:bf16"]),
                 ("RL=3,XS=1,PT=1", ["f16:q8_0r:f16", "f16:q4_kr:f16"])]


@pytest.mark.parametrize("variant,dts", ROPE_VARIANTS)
@pytest.mark.parametrize("pos,layout", [(0, 0), (4093, 1), (7, 0)])
def test_gemv_qmma_rope_verifies(gc, variant, dts, pos, layout):
    for dt in dts:
        for s in ROPE_SHAPES:
            r = forced_run(gc, "rmsnorm_gemm_rope_kv", dt, s, f"gemv_qmma:{variant}", "--pos", pos, "--layout", layout)
            assert "gemv_qmma" in r.out, (dt, s, r)


# The RoPE epilogue's edges (a review's list): the ring at KS=1 (64 rows
# a block: one box is half a head of 128 or a whole head of 64), 16 warps
# (8 row groups), NT=2 at 9, 13 and 16 rows of A (the second tile's rows
# partly or wholly used), the copy pipeline of a device layout (RL=0, Q6_KR), and heads
# of 2 elements (N = 14: not a whole row tile; only the non-ring paths
# apply). (variant, dtypes, shapes (M, N, K, H, G, D)); each at position 0
# and 4093 in both layouts.
ROPE_EDGES = [("RL=3,XS=1,KS=1,WARPS=4,RT=1", ["f16:q4_0r:f16", "bf16:q6_kr:bf16"],
               [(1, 48 * 128, 4096, 32, 8, 128), (2, 6 * 64, 2304, 4, 1, 64)]),
              ("RL=3,XS=0,WARPS=16,KS=8,RT=1", ["f16:q8_0r:f16", "f16:q4_kr:f16"],
               [(1, 48 * 128, 4096, 32, 8, 128), (1, 7 * 96, 512, 5, 1, 96)]),
              ("RL=3,XS=0,NT=2,WARPS=8,KS=4", ["f16:q4_0r:f16", "bf16:q8_0r:bf16"],
               [(13, 6 * 64, 2304, 4, 1, 64), (9, 7 * 96, 512, 5, 1, 96)]),
              ("RL=0,XS=0", ["f16:q6_kr:f16", "f16:q4_0r:f16"],
               [(1, 7 * 96, 512, 5, 1, 96), (3, 6 * 64, 2304, 4, 1, 64)]),
              ("RL=1,XS=1", ["f16:q4_0r:f16", "f16:q6_k:f16"], [(1, 14, 256, 5, 1, 2), (4, 14, 512, 5, 1, 2)]),
              ("RL=2,XS=0,NT=2", ["f16:q4_kr:f16"], [(1, 14, 256, 5, 1, 2), (16, 7 * 96, 512, 5, 1, 96)])]


@pytest.mark.parametrize("variant,dts,shapes", ROPE_EDGES)
@pytest.mark.parametrize("pos,layout", [(0, 1), (4093, 0)])
def test_gemv_qmma_rope_edges_verify(gc, variant, dts, shapes, pos, layout):
    for dt in dts:
        for s in shapes:
            r = forced_run(gc, "rmsnorm_gemm_rope_kv", dt, s, f"gemv_qmma:{variant}", "--pos", pos, "--layout", layout)
            assert "gemv_qmma" in r.out, (dt, s, r)


# gemv_qmma's staged operands (XS=1, the fused norm): rows of A up to
# @applies' M·K <= 16384, K of a partial last step, every load path (the
# copy pipeline of the GGUF layouts, register loads, the ring); past
# the bound the bundle serves the problem with another variant.
STAGE_SHAPES = [(1, 6144, 4096), (1, 77, 512), (4, 100, 4096), (5, 130, 2304)]
STAGE_VARIANTS = [("XS=1,RL=1", ["f16:q4_0r:f16", "bf16:q8_0r:bf16", "f16:q4_kr:f16", "f16:q6_k:f16", "bf16:q4_k:bf16"]),
                  ("XS=1,RL=3", ["f16:q4_0r:f16", "f16:q4_kr:f16", "bf16:q8_0r:bf16", "bf16:q6_kr:bf16"]),
                  ("XS=1,KS=1,WARPS=8,NT=2,RL=1", ["f16:q8_0r:f16", "f16:q8_0:f16"])]


@pytest.mark.parametrize("op", ["rmsnorm_gemm", "rmsnorm_gemm_swiglu"])
@pytest.mark.parametrize("variant,dts", STAGE_VARIANTS)
def test_gemv_qmma_staged_operands_verify(gc, op, variant, dts):
    for dt in dts:
        for s in STAGE_SHAPES + [(8, 64, 4096)]:
            r = forced_run(gc, op, dt, s, f"gemv_qmma:{variant}")
            assert ("XS=1" in r.out) == (s[0] * s[2] <= 16384), (dt, s, r)  # staged where @applies


# The points gcore-run serves untuned at the 8B decode shapes (the sm_90
# @defaults lines: OCC=4 for Q4_KR's gate/up and LM head with f16 A,
# 16-row blocks for a split QKV's V, OCC=2 for down and O of the
# K-quants), at M = 1 and 8; gcore-run's fp64 host check only (numpy's
# would hold gigabytes of the LM head's fp64 weights).
DEFAULT_SHAPES = {"rmsnorm_gemm_swiglu": [(1, 14336, 4096), (8, 14336, 4096)],
                  "rmsnorm_gemm": [(1, 1024, 4096), (1, 128256, 4096), (8, 1024, 4096)],
                  "gemm_add": [(1, 4096, 14336), (1, 4096, 4096), (8, 4096, 4096)]}


@pytest.mark.parametrize("op", list(DEFAULT_SHAPES))
@pytest.mark.parametrize("dt", ["f16:q4_kr:f16", "bf16:q4_kr:bf16", "f16:q6_kr:f16", "f16:q4_0r:f16",
                                "bf16:q8_0r:bf16"])
def test_gemv_qmma_defaults_at_8b_shapes_verify(gc, op, dt):
    for s in DEFAULT_SHAPES[op]:
        r = forced_run(gc, op, dt, s, None, numpy=False)
        assert "gemv_qmma" in r.out, (s, r)
