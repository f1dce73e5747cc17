"""The epilogue is a template parameter (issue 19): gen's op-derived names
(PAIR, NORM, ROPE: in expressions, in the generated source and in a bundle's
constants) and per-op defaults (@defaults), through the tools; and each
GEMM/GEMV family one template that serves all its ops, with the op's own
defaults. (That the merged templates compile to the same code as the pairs
they replaced was checked when they were merged; test_ops, test_gpu_compile,
test_amd_templates and test_amd_emulator run every op of each.)"""
import os
import re
import sqlite3

import pytest

from conftest import ROOT
from test_gpu_compile import NVRTC
from tplhead import OP_NAMES, op_names, parse

OPS = {"gemm": ["--m", "3", "--n", "40", "--k", "24"], "gemm_add": ["--m", "3", "--n", "40", "--k", "24"],
       "gemm_swiglu": ["--m", "3", "--n", "40", "--k", "24"],
       "rmsnorm_gemm": ["--m", "1", "--n", "40", "--k", "24"],
       "rmsnorm_gemm_swiglu": ["--m", "1", "--n", "40", "--k", "24"], "rmsnorm": ["--m", "3", "--n", "40"],
       "rmsnorm_gemm_rope_kv": ["--m", "1", "--n", "40", "--k", "24", "--h", "3", "--g", "1", "--d", "8"],
       "rmsnorm_gemm_bias_rope_kv": ["--m", "1", "--n", "40", "--k", "24", "--h", "3", "--g", "1", "--d", "8"]}


def dispatch(bundle, *cols):
    with sqlite3.connect(bundle) as c:
        return c.execute(f"SELECT {', '.join(cols)} FROM dispatch WHERE m_lo = m_hi").fetchall()


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_derived_names(gc, op):
    """gen binds PAIR, NORM and ROPE from the op: in the bundle's constants (the
    runtime evaluates @grid and @tensormap with them) and as #defines in the
    source it compiles; the values are those of tplhead.OP_NAMES."""
    cache = gc.dir / "cache"
    r = gc("gcore-gen", "--op", op, *OPS[op], "--cache", cache, "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    want = op_names(op)
    for (consts,) in dispatch(gc.dir / "b.gcb", "consts"):
        got = dict(kv.split("=") for kv in consts.split(","))
        assert {k: int(got[k]) for k in want} == want, consts
    srcs = [open(cache / "src" / f).read() for f in os.listdir(cache / "src")]
    assert srcs
    for src in srcs:
        assert all(f"#define {k} {v}\n" in src for k, v in want.items()), src[:2000]


def test_op_names_table_is_gens():
    """tplhead.OP_NAMES (the tests' copy) is gen/template.c's op_values table."""
    text = open(os.path.join(ROOT, "gen", "template.c")).read()
    rows = dict(re.findall(r'\{"(\w+)", \{(\d+, \d+, \d+, \d+)\}\}', text))
    assert rows and {op: dict(zip(("PAIR", "NORM", "ROPE", "BATCH"), map(int, v.split(","))))
                     for op, v in rows.items()} == OP_NAMES


MERGED = {"cpu/gemm.c": ["gemm", "gemm_add", "rmsnorm_gemm", "gemm_swiglu", "rmsnorm_gemm_swiglu"],
          "cpu/gemv.c": ["gemm", "gemm_add", "rmsnorm_gemm", "rmsnorm_gemm_rope_kv", "rmsnorm_gemm_bias_rope_kv"],
          "gpu/gemv.cu": ["gemm", "gemm_add", "rmsnorm_gemm", "gemm_swiglu", "rmsnorm_gemm_swiglu",
                          "rmsnorm_gemm_rope_kv", "rmsnorm_gemm_bias_rope_kv"],
          "gpu/gemv_qmma.cu": ["gemm", "gemm_add", "rmsnorm_gemm", "gemm_swiglu", "rmsnorm_gemm_swiglu",
                               "rmsnorm_gemm_rope_kv"],
          "gpu/gemm_simt.cu": ["gemm", "gemm_add", "gemm_swiglu"],
          "gpu/gemm_mma.cu": ["gemm", "gemm_add", "gemm_swiglu"],
          "gpu/gemm_wgmma.cu": ["gemm", "gemm_add", "gemm_swiglu"],
          "gpu/gemm_mfma.cu": ["gemm", "gemm_add", "gemm_swiglu"],
          "gpu/gemm_wmma.cu": ["gemm", "gemm_add", "gemm_swiglu"]}


def test_one_template_per_family():
    """Each GEMM/GEMV family is one file serving all its ops; no template is
    a copy for the SwiGLU epilogue."""
    for f, ops in MERGED.items():
        assert parse(os.path.join(ROOT, "templates", f))["ops"] == ops, f
    for d in ("cpu", "gpu"):
        assert not [f for f in os.listdir(os.path.join(ROOT, "templates", d)) if "swiglu" in f]


def forced_params(gc, target, op, tpl, shape, dtype="f16"):
    r = gc("gcore-gen", "--target", target, "--op", op, "--dtype", dtype, *shape, "--force", tpl,
           "-o", "f.gcb", "-q")
    assert r.rc == 0, r
    rows = dispatch(gc.dir / "f.gcb", "template", "params")
    assert rows and {t for t, _ in rows} == {tpl.split(":")[0]}, rows
    return {p for _, p in rows}


def canonical(params):
    """"P=V,..." in declaration order, as gen writes a variant's parameters."""
    return ",".join(f"{k}={v}" for k, v in params.items())


@pytest.mark.parametrize("op", MERGED["cpu/gemm.c"])
def test_defaults_per_op_cpu(gc, op):
    """gemm_cpu's default for each op is @param's or its @defaults line's
    (the gate/up pair: NR=16, as gemm_swiglu_cpu's was; gemm: NR=32)."""
    t = parse(os.path.join(ROOT, "templates", "cpu", "gemm.c"))
    assert t["defaults"][op]["NR"] == (16 if op_names(op)["PAIR"] == 2 else 32)
    want = canonical(t["defaults"][op])
    got = forced_params(gc, "cpu:x86-64-v4", op, "gemm_cpu", OPS[op])
    assert got == {want}, (got, want)


@pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")
@pytest.mark.parametrize("tpl,op,shape", [("gemm_mma", "gemm_swiglu", ["--m", "64", "--n", "128", "--k", "64"]),
                                          ("gemv_gpu", "rmsnorm_gemm_swiglu", ["--m", "1", "--n", "128", "--k", "64"])])
def test_defaults_per_op_gpu(gc, tpl, op, shape):
    """The same for a GPU GEMM (BN=64 WM=32) and the decode GEMV (ROWS=1)."""
    f = {"gemm_mma": "gemm_mma.cu", "gemv_gpu": "gemv.cu"}[tpl]
    t = parse(os.path.join(ROOT, "templates", "gpu", f))
    assert t["defaults"][op] != t["defaults"]["gemm"]
    assert forced_params(gc, "sm_90", op, tpl, shape) == {canonical(t["defaults"][op])}


@pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")
@pytest.mark.parametrize("op,dt,target,n,moved", [
    ("rmsnorm_gemm", "f16:q4_0r:f16", "sm_90a", 4096, {"RL": 3, "XS": 1}),
    ("rmsnorm_gemm_swiglu", "bf16:q8_0r:bf16", "sm_90", 256, {"RL": 3, "XS": 1}),
    ("gemm_add", "f16:q8_0r:f16", "sm_90a", 256, {"RL": 3, "WARPS": 8}),
    ("rmsnorm_gemm", "f16:q6_kr:f16", "sm_90a", 4096, {"RL": 3, "XS": 1, "WARPS": 8}),  # the later line adds to it
    ("rmsnorm_gemm", "f16:q4_0r:f16", "sm_80", 256, {}),  # no ring before sm_90: the declared defaults
    ("rmsnorm_gemm", "f16:q4_k:f16", "sm_90a", 256, {}),  # a GGUF layout (QR = 0): the same
    ("rmsnorm_gemm_swiglu", "f16:q4_kr:f16", "sm_90a", 256, {"RL": 3, "XS": 1, "KQ": 1}),  # QMIN: the block's scales once
    ("rmsnorm_gemm_swiglu", "bf16:q4_kr:bf16", "sm_90a", 256, {"RL": 3, "XS": 1}),  # ... with f16 A only (ABF)
    ("gemm_add", "bf16:q4_kr:bf16", "sm_90a", 256, {"RL": 3, "WARPS": 8, "KQ": 1, "OCC": 2}),  # both dtypes, M <= 8
    ("gemm_add", "f16:q6_kr:f16", "sm_90a", 256, {"RL": 3, "WARPS": 8, "OCC": 2}),  # no min (QMIN = 0): no KQ
    ("gemm_add", "f16:q8_0r:f16", "sm_90a", 256, {"RL": 3, "WARPS": 8}),  # nor OCC=2 (measured no faster)
    # a small N (a split QKV's V) in 16-row blocks; rmsnorm_gemm only (not the gate/up pair)
    ("rmsnorm_gemm", "f16:q6_kr:f16", "sm_90a", 1024, {"RL": 3, "XS": 1, "WARPS": 8, "KS": 8, "RT": 1}),
    ("rmsnorm_gemm", "f16:q4_0r:f16", "sm_90a", 2048, {"RL": 3, "XS": 1, "WARPS": 8, "KS": 8, "RT": 1}),
    ("rmsnorm_gemm_swiglu", "f16:q4_0r:f16", "sm_90a", 1024, {"RL": 3, "XS": 1}),
    # Q4_KR's gate/up and LM head with f16 A: four blocks an SM from N = 14336
    ("rmsnorm_gemm_swiglu", "f16:q4_kr:f16", "sm_90a", 14336, {"RL": 3, "XS": 1, "KQ": 1, "OCC": 4}),
    ("rmsnorm_gemm", "f16:q4_kr:f16", "sm_90a", 14336, {"RL": 3, "XS": 1, "KQ": 1, "OCC": 4}),
    ("rmsnorm_gemm", "f16:q4_kr:f16", "sm_90a", 6144, {"RL": 3, "XS": 1, "KQ": 1}),  # the QKV: not
    ("rmsnorm_gemm_swiglu", "bf16:q4_kr:bf16", "sm_90a", 14336, {"RL": 3, "XS": 1}),  # bf16 spills at 4
    # Q6_KR's LM head with f16 A: all of K a warp, three stages
    ("rmsnorm_gemm", "f16:q6_kr:f16", "sm_90a", 128256, {"RL": 3, "XS": 1, "KS": 1, "NST": 3}),
    ("rmsnorm_gemm", "bf16:q6_kr:bf16", "sm_90a", 128256, {"RL": 3, "XS": 1, "WARPS": 8}),  # f16 only (measured)
])
def test_target_conditional_defaults(gc, op, dt, target, n, moved):
    """gemv_qmma's `@defaults ... if SM >= 90 && QR` lines: on sm_90 the
    device layouts' default is the tensor-map ring (and the staged operands
    with the fused norm), with the lines that follow by format, dtype and
    N; elsewhere the declared defaults stand."""
    t = parse(os.path.join(ROOT, "templates", "gpu", "gemv_qmma.cu"))
    want = dict(t["defaults"][op], **moved)
    assert forced_params(gc, target, op, "gemv_qmma", ["--m", "1", "--n", str(n), "--k", "512"], dt) == \
        {canonical(want)}


@pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")
@pytest.mark.parametrize("m,moved", [(1, {"HEADS": 1, "SPAN": 1}), (8, {"HEADS": 1, "SPAN": 1}), (9, {}),
                                     (128, {"THREADS": 256, "HEADS": 64})])
def test_rope_kv_defaults_by_rows(gc, m, moved):
    """rope_kv's NVIDIA default by the rows of the pass: a thread a pair up
    to 8 rows (decode), one block a token from 128 (prefill), the declared
    point between."""
    t = parse(os.path.join(ROOT, "templates", "gpu", "rope_kv.cu"))
    want = dict(t["defaults"]["rope_kv"], **moved)
    assert forced_params(gc, "sm_90a", "rope_kv", "rope_kv_gpu",
                         ["--m", str(m), "--h", "32", "--g", "8", "--d", "128"]) == {canonical(want)}


@pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")
def test_forced_point_falls_back_to_the_declared_defaults(gc):
    """--force names some parameters; the rest take the target's defaults,
    or the declared ones where the target's break a constraint beside the
    named ones: a 3-stage Q8_0R ring of the gate/up pair leaves no room for
    XS=1's staged operands, so XS is the declared 0, the rest as named."""
    t = parse(os.path.join(ROOT, "templates", "gpu", "gemv_qmma.cu"))
    named = {"RL": 3, "NST": 3, "RT": 2, "WARPS": 4, "KS": 2}
    want = dict(t["defaults"]["rmsnorm_gemm_swiglu"], **named)
    assert want["XS"] == 0
    got = forced_params(gc, "sm_90a", "rmsnorm_gemm_swiglu", "gemv_qmma:" + ",".join(f"{k}={v}" for k, v in named.items()),
                        ["--m", "1", "--n", "256", "--k", "4096"], "bf16:q8_0r:bf16")
    assert got == {canonical(want)}, got


@pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")
def test_target_default_past_its_applies_moves_to_the_nearest(gc):
    """Where the target's default does not apply (XS=1 holds 64 KB of staged
    operands: M·K <= 16384), the untuned pick is the nearest usable point
    (XS=0) with the rest of that default kept (RL=3)."""
    r = gc("gcore-gen", "--target", "sm_90a", "--op", "rmsnorm_gemm", "--dtype", "f16:q4_0r:f16",
           "--m", "1,8", "--n", "256", "--k", "4096", "-o", "f.gcb", "-q")
    assert r.rc == 0, r
    rows = {p for t, p in dispatch(gc.dir / "f.gcb", "template", "params") if t == "gemv_qmma"}
    assert any("XS=1" in p and "RL=3" in p for p in rows), rows  # m = 1
    assert any("XS=0" in p and "RL=3" in p for p in rows), rows  # m = 8: 8·4096 > 16384


def test_tuner_starts_from_the_ops_default(gc):
    """gcore-tune's first candidate (and its "x the default") is the op's
    default: for the gate/up pair gemm_cpu's NR=16, not gemm's NR=32."""
    r = gc("gcore-tune", "--template", "gemm_cpu", "--op", "gemm_swiglu", "--m", "4", "--n", "32",
           "--k", "32", "--db", "t.db", "--budget", "1", "--no-progress")
    assert r.rc == 0 and "1.00x the default" in r.out, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        params = [p for (p,) in c.execute("SELECT v.params FROM measurements m JOIN variants v "
                                          "ON v.id = m.variant_id")]
    assert len(params) == 1 and "NR=16" in params[0].split(","), params
