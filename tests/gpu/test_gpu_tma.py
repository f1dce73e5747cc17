"""The tensor-copy-engine (TMA) variants of the wgmma GEMMs on an sm_90a GPU,
through gcore's own launch paths: gcore-run --op (the bundle dispatch,
tensor maps encoded by runtime/cuda.c from the bundle's @tensormap lines)
on ragged shapes, every element checked against numpy in fp64 as the op
case table is; and gcore-tune (the worker's verification and timing).
Run with GCORE_TEST_BACKEND=cuda GCORE_TEST_TARGETS=sm_90a (an H100/H200)."""
import os
import sqlite3

import pytest

from test_ops import numpy_check, problem_args

BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "cpu").split(",")
pytestmark = pytest.mark.skipif(BACKEND != "cuda" or "sm_90a" not in TARGETS,
                                reason="needs GCORE_TEST_BACKEND=cuda and sm_90a in GCORE_TEST_TARGETS")

# M not a multiple of the tile (nor of a cluster pair's two tiles), N not a
# multiple of BN, K not a multiple of BK: the copy engine's zero fill at work.
SHAPES = [(300, 520, 264), (129, 256, 64), (2048, 264, 1000), (257, 4096, 4104)]
# EPI=1 (the default) stores C through shared memory with the copy engine;
# EPI=0 from registers; TMA=0 with EPI=1 takes only the C map.
VARIANTS = ["TMA=1", "TMA=1,CLUSTER=2", "TMA=1,CLUSTER=2,PERSIST=0", "TMA=1,CLUSTER=2,BK=32,STAGES=8",
            "TMA=1,BM=256,BN=128", "TMA=1,EPI=0", "TMA=1,EPI=0,CLUSTER=2", "TMA=0,EPI=1",
            "TMA=1,BM=256,BN=128,PERSIST=0", "TMA=1,BM=64,BN=128,STAGES=8", "TMA=1,BM=64,BN=128,CLUSTER=2,EPI=0",
            "TMA=0,BM=64,BN=128,PERSIST=0"]


@pytest.mark.parametrize("op,tpl", [("gemm", "gemm_wgmma"), ("gemm_add", "gemm_wgmma"),
                                    ("gemm_swiglu", "gemm_wgmma")])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_tma_variants_verify(gc, op, tpl, variant, dt):
    for s in SHAPES:
        forced_case(gc, op, f"{tpl}:{variant}", dt, s, tmaps=True)


def forced_case(gc, op, force, dt, s, tmaps=False):
    """A bundle of the forced variant for shape s: its entry for M uses the
    variant (tmaps: and carries tensor-map declarations); gcore-run
    verifies it and numpy checks every element of the dump."""
    r = gc("gcore-gen", "--target", "sm_90a", "--op", op, "--dtype", dt, *problem_args(op, s),
           "--force", force, "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        rows = c.execute("SELECT params, tmaps FROM dispatch WHERE m_lo = ?", (s[0],)).fetchall()
    first = force.split(":", 1)[1].split(",")[0]
    assert rows and all(first in p and (t or not tmaps) for p, t in rows), rows
    dump = gc.dir / ("d_" + "x".join(map(str, s)))
    r = gc("gcore-run", "--backend", "cuda", "-b", "b.gcb", "--op", op, "--dtype", dt,
           *problem_args(op, s), "--dump", dump, "--min-time", "0.001")
    assert r.rc == 0 and "verified" in r.out, r
    numpy_check(op, dt, s, dump)


def test_tuner_measures_tma(gc):
    """gemm_wgmma's defaults (TMA=1) and their neighbours: the worker must
    verify and time every TMA variant that fits (maps built in the worker);
    the only other outcome allowed is a rejection before launch (STAGES=5
    does not fit in shared memory)."""
    r = gc("gcore-tune", "--target", "sm_90a", "--op", "gemm", "--dtype", "f16", "--m", "300",
           "--n", "520", "--k", "264", "--template", "gemm_wgmma", "--db", "t.db", "--budget", "24",
           "--no-progress")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        rows = c.execute("SELECT v.params, m.status FROM measurements m JOIN variants v "
                         "ON v.id = m.variant_id").fetchall()
    tma = [(p, s) for p, s in rows if "TMA=1" in p]
    assert any(s == "ok" for _, s in tma) and all(s in ("ok", "rejected") for _, s in tma), rows


# Split-K (SK != 1): ragged M, N and K, slices of unequal length (K = 1000
# is 16 stages of 64: SK = 3 cuts 6, 6, 4), clusters, the cp.async producer
# with register stores, SK = 0's own choice; every variant's workspace fits
# these shapes. With PERSIST the slices share out the sum (a block per
# unit); PERSIST=0 takes the last slice's sum, as does a grid of more units
# than SMs (the last test).
SPLIT_SHAPES = [(200, 520, 1000), (129, 1000, 1032), (128, 1024, 4096)]
SPLIT_VARIANTS = [("SK=2", "f16"), ("SK=3,BN=128", "bf16"), ("SK=4,CLUSTER=2", "f16"),
                  ("SK=4,TMA=0,EPI=0,PERSIST=0", "bf16"), ("SK=0,BN=128", "bf16"),
                  ("SK=8,BN=128,RASTER=1", "f16"), ("SK=3,BN=64,EPI=0", "f16"),
                  ("SK=3,BM=64,BN=128", "bf16"), ("SK=0,BM=64,BN=128,CLUSTER=2", "f16")]


@pytest.mark.parametrize("op", ["gemm", "gemm_add", "gemm_swiglu"])
@pytest.mark.parametrize("variant,dt", SPLIT_VARIANTS)
def test_split_k_verify(gc, op, variant, dt):
    for s in SPLIT_SHAPES:
        forced_case(gc, op, f"gemm_wgmma:{variant}", dt, s)


# BM = 64 (one consumer warpgroup of 256 threads, or with CWN = 2 two side by
# side along N) and CWN = 2 at BM = 128: the M = 128 GEMMs' tiles. The
# third field: whether gemm_swiglu has the variant (a consumer's columns
# must be whole 64-column blocks for EPI = 1, and CWN = 2 needs PAIR = 1).
TILE_VARIANTS = [("BM=64,BN=64,STAGES=12", "f16", False), ("BM=64,BN=64,STAGES=12,CLUSTER=2", "bf16", False),
                 ("BM=64,BN=64,SK=2,EPI=0", "f16", True), ("BM=64,BN=64,PERSIST=0", "bf16", False),
                 ("BM=64,BN=128,CWN=2,STAGES=8", "f16", False),
                 ("BM=64,BN=128,CWN=2,SK=3", "bf16", False), ("BM=128,BN=256,CWN=2", "f16", False),
                 ("BM=64,BN=128,CWN=2,EPI=0,CLUSTER=2", "bf16", False),
                 ("BM=64,BN=128,CWN=2,TMA=0,EPI=0,PERSIST=0", "f16", False)]


@pytest.mark.parametrize("op", ["gemm", "gemm_add", "gemm_swiglu"])
@pytest.mark.parametrize("variant,dt,swiglu", TILE_VARIANTS)
def test_tiles_for_few_rows(gc, op, variant, dt, swiglu):
    """The tiles for GEMMs of few rows verify on the ragged and split
    shapes (a split only where K has the stages), or, where gemm_swiglu has
    no such variant, gcore-gen refuses it by a constraint."""
    if op == "gemm_swiglu" and not swiglu:
        r = gc("gcore-gen", "--target", "sm_90a", "--op", op, "--dtype", dt,
               *problem_args(op, SPLIT_SHAPES[0]), "--force", f"gemm_wgmma:{variant}", "-o", "b.gcb")
        assert r.rc != 0 and "constraint fails" in r.err and ("EPI == 0" in r.err or "CWN == 1" in r.err), r
        return
    for s in SPLIT_SHAPES if "SK=" in variant else SHAPES + SPLIT_SHAPES:
        forced_case(gc, op, f"gemm_wgmma:{variant}", dt, s, tmaps="TMA=0" not in variant)


@pytest.mark.parametrize("op", ["gemm", "gemm_add"])
@pytest.mark.parametrize("variant,dt", [("BN=192", "f16"), ("BN=192,SK=3,CLUSTER=2", "bf16"),
                                        ("BN=192,SK=2,EPI=0,TMA=0", "f16")])
def test_tiles_of_192_columns(gc, op, variant, dt):
    """m64n192 wgmmas: three 64-column blocks of C a tile (gemm_swiglu's
    96 columns are not whole blocks: refused)."""
    for s in SPLIT_SHAPES:
        forced_case(gc, op, f"gemm_wgmma:{variant}", dt, s)
    r = gc("gcore-gen", "--target", "sm_90a", "--op", "gemm_swiglu", "--dtype", dt,
           *problem_args("gemm_swiglu", SPLIT_SHAPES[0]), "--force", f"gemm_wgmma:{variant}", "-o", "b.gcb")
    assert r.rc != 0 and "constraint fails" in r.err, r


@pytest.mark.parametrize("op", ["gemm", "gemm_add", "gemm_swiglu"])
def test_split_k_more_units_than_sms(gc, op):
    """96 tiles of 128x64 (gemm_swiglu: 192 of 128x32) in two slices: more
    units than an H100's or H200's 132 SMs, so the slices do not wait for
    each other and the last sums them."""
    forced_case(gc, op, "gemm_wgmma:SK=2,BN=64,EPI=0", "f16", (384, 2048, 1000))


def test_split_k_left_unready_is_caught(gc):
    """A split-K kernel that does not reset its count is right on its
    first launch only (its slices' count never again names a last one);
    the verification checks a second launch, so it is refused and never
    wins a sweep. PERSIST=0: the last slice's sum (with PERSIST=1 a stale
    count lets the waiting slices read the previous launch's partials,
    which the verification's same inputs make right: not caught this
    way)."""
    import shutil
    tdir = gc.dir / "tpl"
    shutil.copytree(os.path.join(os.path.dirname(__file__), "..", "..", "templates"), tdir)
    src = (tdir / "gpu" / "gemm_wgmma.cu").read_text()
    old = "wg_cnt[at] = 0u, wg_done[at] = 0u;"
    assert src.count(old) == 1
    (tdir / "gpu" / "gemm_wgmma.cu").write_text(src.replace(old, "wg_done[at] = 0u;"))
    s = (128, 1024, 4096)
    for templates, ok in ((None, True), (tdir, False)):
        r = gc("gcore-gen", *(["--templates", templates] if templates else []), "--target", "sm_90a",
               "--op", "gemm", "--dtype", "f16", *problem_args("gemm", s), "--force",
               "gemm_wgmma:SK=4,PERSIST=0", "-o", "b.gcb", "-q")
        assert r.rc == 0, r
        r = gc("gcore-run", "--backend", "cuda", "-b", "b.gcb", "--op", "gemm", "--dtype", "f16",
               *problem_args("gemm", s), "--min-time", "0.001")
        assert (r.rc == 0) == ok and ("verified" in r.out) == ok, r
        if not ok:
            assert "is wrong" in r.err, r
