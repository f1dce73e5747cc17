"""Every op of the case table, through gcore-gen (template defaults) and
gcore-run --dump, against numpy in fp64; then a sample of each template's
parameter space (each value of each parameter at least once) the same way.

The case table runs on every backend of GCORE_TEST_BACKENDS in one
invocation (default cpu; `make test-gpu` runs cpu and cuda, with bundles
built for GCORE_TEST_TARGETS, which then include cpu), as ggml's
test-backend-ops does; the parameter-space sample runs on GCORE_TEST_BACKEND
(the GPU's, under make test-gpu)."""
import os
import numpy as np
import pytest

from cases import CASES, CHECK, DEVICE_LAYOUTS, dims, numpy_check, op_table, problem_args, run_variants
from conftest import ROOT
import npref
from tplhead import op_names, sampled_ops
from tplhead import parse as parse_head

EPS_F32 = 2.0 ** -24
BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "cpu")
RUN = ["--backend", BACKEND]
GEN = ["--target", TARGETS]
# the parameter-space sample forces templates of GCORE_TEST_BACKEND only
SAMPLE_GEN = ["--target", ",".join(x for x in TARGETS.split(",")
                                   if x.startswith("cpu") == (BACKEND == "cpu")) or TARGETS]


def workload_line(op, dt, shape):
    ds = " ".join(f"{l}={v}" for l, v in zip(dims(op), shape))
    return f"{op} {dt} {ds}\n"


GROUPS = sorted({(op, dt) for op, cases in CASES.items() for dt, _ in cases})
BACKENDS = os.environ.get("GCORE_TEST_BACKENDS", BACKEND).split(",")


def test_every_op_has_cases():
    """Each op of the C op table has cases and a numpy check here, and the
    table has no op they do not know: adding an op fails here until it has."""
    assert set(op_table()) == set(CASES) == set(CHECK)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op,dt", GROUPS, ids=[f"{o}-{d}" for o, d in GROUPS])
def test_case_table_defaults(gc, op, dt, backend):
    if backend != "cuda" and dt.split(":")[1:2] and dt.split(":")[1] in DEVICE_LAYOUTS:
        pytest.skip(f"{dt}: gcore's device layouts are read on NVIDIA GPUs only (models/recipe.h)")
    shapes = [s for d, s in CASES[op] if d == dt]
    wl = gc.dir / "w.txt"
    wl.write_text("".join(workload_line(op, dt, s) for s in shapes))
    r = gc("gcore-gen", *GEN, "--workload", wl, "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    for s in shapes:
        for i, extra in enumerate(run_variants(op)):
            dump = gc.dir / ("dump_" + "x".join(map(str, s)) + f"_{i}")
            r = gc("gcore-run", "--backend", backend, "-b", "b.gcb", "--op", op, "--dtype", dt,
                   *problem_args(op, s), *extra, "--dump", dump, "--min-time", "0.001")
            assert r.rc == 0, r
            assert "[default]" in r.out
            numpy_check(op, dt, s, dump)


def template_spaces(backend=BACKEND):
    """(template, op, {param: (values, op's default)}) parsed from the
    sources of the templates that generate code for backend: the ops of
    each that tplhead.sampled_ops names (the first, the first gate/up op,
    the first RoPE/KV op, the first batched decode step). A decode-only
    template's ops (@applies M == 1) are sampled at M = 1, but for its
    batched step; a few-rows one (@applies M > 1 && M <= ..., or M >= 1 &&
    M <= ...) at M = 5 (at 13 for a move of NT, its tiles of rows of A)."""
    out = []
    folder, ext, kinds = ("cpu", ".c", ("cpu",)) if backend == "cpu" else ("gpu", ".cu", ("gpu", backend))
    tdir = os.path.join(ROOT, "templates", folder)
    for f in sorted(os.listdir(tdir)):
        if not f.endswith(ext):
            continue
        t = parse_head(os.path.join(tdir, f))
        if t["backend"] not in kinds:
            continue
        applies = " ".join(t["applies"])
        for op in sampled_ops(t["ops"]):
            params = {k: (v, t["defaults"][op][k]) for k, (v, _) in t["params"].items()}
            rows = ("M > 1" in applies or "M >= 1" in applies) and "M <=" in applies
            decode = ("M ==" in applies or "M <=" in applies) and not op_names(op)["BATCH"] and not rows
            out.append((t["name"], op, dict(params=params, decode=decode, rows=rows,
                                            dtypes=t["dtypes"], matrix=t["backend"] in ("cuda", "hip"))))
    return out


def serves(bundle, tpl, m, param):
    """Does the bundle's exact entry for m use template tpl with param
    ("P=V")? (--force falls back to the default where the forced variant
    does not serve a problem.)"""
    import sqlite3
    with sqlite3.connect(bundle) as c:
        rows = c.execute("SELECT template, params FROM dispatch WHERE m_lo = ? AND m_hi = ?",
                         (m, m)).fetchall()
    return bool(rows) and all(t == tpl and param in ps.split(",") for t, ps in rows)


SAMPLE_SHAPE = {"gemm": (3, 100, 37), "gemm_swiglu": (5, 40, 70), "rmsnorm": (3, 300),
                "add": (3, 300), "concat": (3, 100, 37), "embed": (5, 72, 40), "rope_kv": (3, 8, 2, 16),
                "attention": (3, 8, 2, 16), "argmax": (3, 1000), "argmax_step": (3, 1000), "rope_kv_batch": (3, 8, 2, 16),
                "attention_batch": (3, 8, 2, 16), "rmsnorm_gemm_rope_kv": (3, 10 * 16, 37, 6, 2, 16),
                "qk_norm": (3, 8, 2, 16), "bias_rope_kv": (3, 8, 2, 16), "qk_norm_rope_kv": (3, 8, 2, 16)}
QSAMPLE_SHAPE = {"gemm": (3, 100, 512), "gemm_swiglu": (5, 40, 256), "embed": (5, 256, 40),
                 "rmsnorm_gemm_rope_kv": (1, 6 * 64, 512, 4, 1, 64)}


SPACES = template_spaces()


@pytest.mark.parametrize("tpl,op,params", SPACES,
                         ids=[t[0] if i == 0 or SPACES[i - 1][0] != t[0] else f"{t[0]}-{t[1]}"
                              for i, t in enumerate(SPACES)])
@pytest.mark.parametrize("dt", ["f32", "f16", "f32:bf16:f32"])
def test_parameter_space_sample(gc, tpl, op, params, dt):
    info, params, request_dt = params, params["params"], dt
    if dt == "f32:bf16:f32" and op in ("add", "concat", "rope_kv", "attention", "argmax", "argmax_step", "rope_kv_batch",
                                       "attention_batch"):
        dt = "bf16"  # these ops take one dtype
    quant = any(":q" in d for d in info["dtypes"])
    if quant:  # B in a block format: one format per sampled dtype, rows of whole blocks
        want = {"f32": ["f32:q8_0:f32", "f16:q8_0r:f16", "f16:q8_0:f16"], "f16": ["f16:q4_k:f16"],
                "f32:bf16:f32": ["bf16:q4_0:bf16", "f16:q4_0:f16", "f16:q6_k:f16"]}[dt]
        dt = next((d for d in want if d in info["dtypes"]), info["dtypes"][0])
    elif dt not in info["dtypes"] and dt.split(":")[0] not in info["dtypes"]:
        dt = info["dtypes"][0] if dt == "f32" else info["dtypes"][-1]  # e.g. mma: f16/bf16 only
    shape = QSAMPLE_SHAPE[op] if quant else SAMPLE_SHAPE[op]
    if info["matrix"]:  # matrix-core templates: whole mma tiles in N and K; attention: D of whole
        shape = {"attention": (70, 8, 1, params["DMAX"][1] if tpl == "attention_wgmma" else 64),
                 "attention_batch": (3, 8, 1, 64)}.get(
            op, (48, 128, 256))  # 16s, 8 heads a kv head (any HPB); attention_wgmma serves D == DMAX only
        if op == "rmsnorm_gemm_rope_kv":  # N is heads: four query heads and a kv head of 64
            shape = (48, 6 * 64, 256, 4, 1, 64)
    if info["decode"]:
        shape = (1,) + tuple(shape[1:])  # decode-only templates serve M = 1
    if info["rows"]:  # a few rows of A; N past a 16-row tile, K past a 32-element chunk (B in a
        shape = (5, 130, 512) if quant else (5, 130, 264)  # block format: K whole 256-element blocks)
        if op == "rmsnorm_gemm_rope_kv":  # N is heads
            shape = (5,) + (QSAMPLE_SHAPE if quant else SAMPLE_SHAPE)[op][1:]
    # The moves one parameter away from the defaults, shared out over the
    # three dtypes and the template's sampled ops: part k of the 3·ops
    # parts starts at the k-th share of the list and stops after a share
    # of them have run (at least one), so every move runs for some dtype and
    # op, and every (dtype, op) runs some moves, at 1/(3·ops) of the cost
    # (ops with other @defaults list other moves of those parameters).
    moves = [(p, v) for p, (values, default) in params.items() for v in values if v != default]
    ops = [o for t, o, _ in SPACES if t == tpl]
    parts = 3 * len(ops)
    k = ops.index(op) * 3 + ["f32", "f16", "f32:bf16:f32"].index(request_dt)
    moves = moves[k * len(moves) // parts:] + moves[:k * len(moves) // parts]
    budget = max(1, -(-len(moves) // parts))
    tried = 0
    base = shape
    for p, v in moves:
        if tried >= budget:
            break
        shape = (13,) + base[1:] if info["rows"] and p == "NT" else base
        if op == "attention" and p == "DMAX":
            shape = base[:3] + (v,)  # the head size the move serves
        force = f"{tpl}:{p}={v}"
        r = gc("gcore-gen", *SAMPLE_GEN, "--op", op, "--dtype", dt, *problem_args(op, shape), "--force",
               force, "-o", "b.gcb", "-q")
        # A move the constraints refuse at the default of a size it trades
        # against is taken at the largest such size that admits it: the
        # vector width (the declared default is AVX-512's, on a host without
        # it), attention_mma's key tile (RW = 2 needs the registers of KB = 32),
        # attention_wgmma's warpgroups (KB = 128 needs the registers of one)
        for shrink in ("VEC", "KB", "CW"):
            if not (r.rc != 0 and "constraint fails" in r.err and shrink in params and p != shrink):
                continue
            for x in sorted(params[shrink][0], reverse=True):
                force = f"{tpl}:{p}={v},{shrink}={x}"
                r = gc("gcore-gen", *SAMPLE_GEN, "--op", op, "--dtype", dt, *problem_args(op, shape),
                       "--force", force, "-o", "b.gcb", "-q")
                if r.rc == 0 or "constraint fails" not in r.err:
                    break
        if r.rc != 0 and "constraint fails" in r.err:
            continue  # not a point of the space on this target
        assert r.rc == 0, r
        if not serves(gc.dir / "b.gcb", tpl, shape[0], f"{p}={v}"):
            continue  # this point's template does not serve the problem (@applies)
        dump = gc.dir / f"d_{p}_{v}"
        # attention 300 positions in: more key tiles than any ring has stages
        deep = ["--pos", "300"] if op == "attention" and shape[0] > 1 else []
        r = gc("gcore-run", *RUN, "-b", "b.gcb", "--op", op, "--dtype", dt, *problem_args(op, shape),
               *deep, "--dump", dump, "--min-time", "0.001")
        assert r.rc == 0, r
        assert f"{p}={v}" in r.out, r
        numpy_check(op, dt, shape, dump)
        tried += 1
    assert tried >= 1 or all(len(v[0]) == 1 for v in params.values())


# A wrong RoPE/KV epilogue is caught: each mutation of gemv_cpu's (the pair's
# partner row, the cache row written) fails gcore-run's fp64 check.
ROPE_MUTATIONS = {
    "wrong_pair": ("return u / half * ro->D + e;", "return u / half * ro->D + (e ^ 1);"),
    "wrong_cache_row": ("ro->Kc + (p * G + hd - H) * D", "ro->Kc + ((p - 1) * G + hd - H) * D"),
    "value_not_copied": ("STORE_C(v, ib, b);", "STORE_C(v, ib, a);"),
}


@pytest.mark.parametrize("mutation", sorted(ROPE_MUTATIONS))
def test_wrong_rope_epilogue_is_caught(gc, mutation):
    import shutil
    old, new = ROPE_MUTATIONS[mutation]
    tdir = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), tdir)
    src = (tdir / "cpu" / "gemv.c").read_text()
    assert src.count(old) == 1, old
    (tdir / "cpu" / "gemv.c").write_text(src.replace(old, new))
    shape = ["--m", 1, "--n", 6 * 16, "--k", 40, "--h", 2, "--g", 2, "--d", 16]
    for layout in (0, 1):
        r = gc("gcore-gen", "--templates", tdir, "--target", "cpu", "--op", "rmsnorm_gemm_rope_kv",
               "--dtype", "f32", *shape, "-o", "m.gcb", "-q")
        assert r.rc == 0, r
        r = gc("gcore-run", "-b", "m.gcb", "--op", "rmsnorm_gemm_rope_kv", "--dtype", "f32", *shape,
               "--layout", layout, "--min-time", "0.001")
        assert r.rc != 0 and "gemv_cpu" in r.err and "is wrong" in r.err, r
