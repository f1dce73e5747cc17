"""Every op of the case table, through gcore-gen (template defaults) and
gcore-run --dump, against numpy in fp64; then a sample of each template's
parameter space (each value of each parameter at least once) the same way."""
import os
import re
import numpy as np
import pytest

from cases import CASES, SUB, ULP
from conftest import ROOT
import npref

EPS_F32 = 2.0 ** -24


def problem_args(op, shape):
    if op == "rmsnorm":
        m, n = shape
        return ["--m", m, "--n", n]
    m, n, k = shape
    return ["--m", m, "--n", n, "--k", k]


def numpy_check(op, dt, shape, dump_dir):
    d = npref.read_dump(dump_dir)
    tc = npref.split_dtypes(dt)[2]
    if op == "gemm":
        m, n, k = shape
        ref, absref = npref.gemm(d["A"][1], d["B"][1], m, n, k)
        tol = ULP[tc] * np.abs(ref) + k * EPS_F32 * absref + SUB[tc]
        got = d["C"][1].reshape(m, n)
    elif op == "gemm_swiglu":
        m, n, k = shape
        w = d["W"][1].reshape(2 * n, k)
        g, ag = npref.gemm(d["A"][1], w[:n].ravel(), m, n, k)
        u, au = npref.gemm(d["A"][1], w[n:].ravel(), m, n, k)
        sg = npref.silu(g)
        ref = sg * u
        gam = k * EPS_F32 + 2.0 ** -21
        tol = ULP[tc] * np.abs(ref) + 1.1 * np.abs(u) * gam * (ag + np.abs(g)) + np.abs(sg) * gam * au + SUB[tc]
        got = d["C"][1].reshape(m, n)
    else:
        m, n = shape
        x = d["X"][1].reshape(m, n)
        inv = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(1e-5).astype(np.float64))
        ref = x * inv * d["W"][1][None, :]
        tol = (ULP[tc] + (n + 8) * EPS_F32) * np.abs(ref) + SUB[tc]
        got = d["Y"][1].reshape(m, n)
    npref.check(got, ref, tol)


def workload_line(op, dt, shape):
    if op == "rmsnorm":
        return f"{op} {dt} m={shape[0]} n={shape[1]}\n"
    return f"{op} {dt} m={shape[0]} n={shape[1]} k={shape[2]}\n"


GROUPS = sorted({(op, dt) for op, cases in CASES.items() for dt, _ in cases})


@pytest.mark.parametrize("op,dt", GROUPS, ids=[f"{o}-{d}" for o, d in GROUPS])
def test_case_table_defaults(gc, op, dt):
    shapes = [s for d, s in CASES[op] if d == dt]
    wl = gc.dir / "w.txt"
    wl.write_text("".join(workload_line(op, dt, s) for s in shapes))
    r = gc("gcore-gen", "--workload", wl, "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    for s in shapes:
        dump = gc.dir / ("dump_" + "x".join(map(str, s)))
        r = gc("gcore-run", "-b", "b.gcb", "--op", op, "--dtype", dt, *problem_args(op, s),
               "--dump", dump, "--min-time", "0.001")
        assert r.rc == 0, r
        assert "[default]" in r.out
        numpy_check(op, dt, s, dump)


def template_spaces():
    """(template, op, {param: (values, default)}) parsed from the sources."""
    out = []
    tdir = os.path.join(ROOT, "templates", "cpu")
    for f in sorted(os.listdir(tdir)):
        if not f.endswith(".c"):
            continue
        head = open(os.path.join(tdir, f)).read().split("*/", 1)[0]
        name = re.search(r"@template\s+(\S+)", head).group(1)
        op = re.search(r"@op\s+(\S+)", head).group(1)
        params = {}
        for m in re.finditer(r"@param\s+(\w+)\s+([-\d\s]+?)\s+default\s+(-?\d+)", head):
            params[m.group(1)] = ([int(v) for v in m.group(2).split()], int(m.group(3)))
        out.append((name, op, params))
    return out


SAMPLE_SHAPE = {"gemm": (3, 100, 37), "gemm_swiglu": (5, 40, 70), "rmsnorm": (3, 300)}


@pytest.mark.parametrize("tpl,op,params", template_spaces(), ids=[t[0] for t in template_spaces()])
@pytest.mark.parametrize("dt", ["f32", "f16", "f32:bf16:f32"])
def test_parameter_space_sample(gc, tpl, op, params, dt):
    shape = SAMPLE_SHAPE[op]
    tried = 0
    for p, (values, default) in params.items():
        for v in values:
            if v == default:
                continue
            force = f"{tpl}:{p}={v}"
            r = gc("gcore-gen", "--op", op, "--dtype", dt, *problem_args(op, shape), "--force",
                   force, "-o", "b.gcb", "-q")
            if r.rc != 0 and "constraint fails" in r.err:
                continue  # not a point of the space on this target
            assert r.rc == 0, r
            dump = gc.dir / f"d_{p}_{v}"
            r = gc("gcore-run", "-b", "b.gcb", "--op", op, "--dtype", dt, *problem_args(op, shape),
                   "--dump", dump, "--min-time", "0.001")
            assert r.rc == 0, r
            assert f"{p}={v}" in r.out, r
            numpy_check(op, dt, shape, dump)
            tried += 1
    assert tried >= 1 or all(len(v[0]) == 1 for v in params.values())
