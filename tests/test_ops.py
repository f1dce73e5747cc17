"""Every op of the case table, through gcore-gen (template defaults) and
gcore-run --dump, against numpy in fp64; then a sample of each template's
parameter space (each value of each parameter at least once) the same way.

The backend comes from GCORE_TEST_BACKEND (default cpu): `make test-gpu`
runs this same table with cuda, bundles built for GCORE_TEST_TARGETS."""
import os
import re
import numpy as np
import pytest

from cases import CASES, SUB, ULP
from conftest import ROOT
import npref

EPS_F32 = 2.0 ** -24
BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "cpu")
RUN = ["--backend", BACKEND]
GEN = ["--target", TARGETS]


DIMS = {"rmsnorm": "mn", "add": "mn", "embed": "mnk", "gemm": "mnk", "gemm_add": "mnk", "gemm_swiglu": "mnk",
        "rmsnorm_gemm": "mnk", "rmsnorm_gemm_swiglu": "mnk",
        "rope_kv": "mhgd", "attention": "mhgd", "argmax": "mn"}


def problem_args(op, shape):
    out = []
    for letter, v in zip(DIMS[op], shape):
        out += ["--" + letter, v]
    return out


def rope_ref(x, pos, inv, d):
    """Rotate the halves-layout pairs (x[j], x[j+d/2]) of each head row of x
    [rows, d] by pos * inv[j]."""
    th = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(th), np.sin(th)
    a, b = x[:, : d // 2], x[:, d // 2:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=1), np.abs(a) + np.abs(b)


def check_rope(d, dt, shape):
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


def check_attention(d, dt, shape):
    m, h, g, dd = shape
    tc = npref.split_dtypes(dt)[2]
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
            tol[t, hh] = 4 * (L + dd) * EPS_F32 * (p @ np.abs(v[:L, kv]))
    tol += ULP[tc] * np.abs(ref) + SUB[tc]
    npref.check(d["O"][1].reshape(m, h, dd), ref, tol)


def numpy_check(op, dt, shape, dump_dir):
    d = npref.read_dump(dump_dir)
    tc = npref.split_dtypes(dt)[2]
    if op == "gemm":
        m, n, k = shape
        ref, absref = npref.gemm(d["A"][1], d["B"][1], m, n, k)
        tol = ULP[tc] * np.abs(ref) + k * EPS_F32 * absref + SUB[tc]
        got = d["C"][1].reshape(m, n)
    elif op == "gemm_add":  # C += A·Bᵀ in place
        m, n, k = shape
        ab, absref = npref.gemm(d["A"][1], d["B"][1], m, n, k)
        c0 = d["C.init"][1].reshape(m, n)
        ref = c0 + ab
        tol = ULP[tc] * np.abs(ref) + k * EPS_F32 * absref + 2 * EPS_F32 * np.abs(c0) + SUB[tc]
        got = d["C"][1].reshape(m, n)
    elif op in ("rmsnorm_gemm", "rmsnorm_gemm_swiglu"):
        m, n, k = shape
        x = d["A"][1].reshape(m, k)
        inv = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(1e-5).astype(np.float64))
        xn = (x * inv * d["norm"][1][None, :]).ravel()
        gam = (2 * k + 8) * EPS_F32  # the GEMM's sum plus the fp32 norm's error on every product
        if op == "rmsnorm_gemm":
            ref, absref = npref.gemm(xn, d["B"][1], m, n, k)
            tol = ULP[tc] * np.abs(ref) + gam * absref + SUB[tc]
        else:
            w = d["W"][1].reshape(2 * n, k)
            g, ag = npref.gemm(xn, w[:n].ravel(), m, n, k)
            u, au = npref.gemm(xn, w[n:].ravel(), m, n, k)
            sg = npref.silu(g)
            ref = sg * u
            gam += 2.0 ** -21
            tol = ULP[tc] * np.abs(ref) + 1.1 * np.abs(u) * gam * (ag + np.abs(g)) + np.abs(sg) * gam * au + SUB[tc]
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
    elif op == "add":
        x, y = d["X"][1], d["Y"][1]
        ref = x + y
        npref.check(d["Z"][1], ref, ULP[tc] * np.abs(ref) + EPS_F32 * (np.abs(x) + np.abs(y)) + SUB[tc])
        return
    elif op == "embed":
        m, n, k = shape
        tok = d["tokens"][1].astype(np.int64)
        assert tok.min() >= 0 and tok.max() < k
        ref = d["table"][1].reshape(k, n)[tok]
        npref.check(d["Z"][1].reshape(m, n), ref, 0.5 * ULP[tc] * np.abs(ref) + SUB[tc])
        return
    elif op == "argmax":
        m, n = shape
        x = d["X"][1].reshape(m, n)
        got = d["idx"][1].astype(np.int64)
        assert got.tolist() == np.argmax(x, axis=1).tolist(), "argmax: wrong index (ties go to the lowest)"
        return
    elif op == "rope_kv":
        return check_rope(d, dt, shape)
    elif op == "attention":
        return check_attention(d, dt, shape)
    else:
        m, n = shape
        x = d["X"][1].reshape(m, n)
        inv = 1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + np.float32(1e-5).astype(np.float64))
        ref = x * inv * d["W"][1][None, :]
        tol = (ULP[tc] + (n + 8) * EPS_F32) * np.abs(ref) + SUB[tc]
        got = d["Y"][1].reshape(m, n)
    npref.check(got, ref, tol)


def workload_line(op, dt, shape):
    dims = " ".join(f"{l}={v}" for l, v in zip(DIMS[op], shape))
    return f"{op} {dt} {dims}\n"


GROUPS = sorted({(op, dt) for op, cases in CASES.items() for dt, _ in cases})


@pytest.mark.parametrize("op,dt", GROUPS, ids=[f"{o}-{d}" for o, d in GROUPS])
def test_case_table_defaults(gc, op, dt):
    shapes = [s for d, s in CASES[op] if d == dt]
    wl = gc.dir / "w.txt"
    wl.write_text("".join(workload_line(op, dt, s) for s in shapes))
    r = gc("gcore-gen", *GEN, "--workload", wl, "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    for s in shapes:
        dump = gc.dir / ("dump_" + "x".join(map(str, s)))
        r = gc("gcore-run", *RUN, "-b", "b.gcb", "--op", op, "--dtype", dt, *problem_args(op, s),
               "--dump", dump, "--min-time", "0.001")
        assert r.rc == 0, r
        assert "[default]" in r.out
        numpy_check(op, dt, s, dump)


def template_spaces(backend=BACKEND):
    """(template, op, {param: (values, default)}) parsed from the sources of
    the templates that generate code for backend."""
    out = []
    folder, ext, kinds = ("cpu", ".c", ("cpu",)) if backend == "cpu" else ("gpu", ".cu", ("gpu", backend))
    tdir = os.path.join(ROOT, "templates", folder)
    for f in sorted(os.listdir(tdir)):
        if not f.endswith(ext):
            continue
        head = open(os.path.join(tdir, f)).read().split("*/", 1)[0]
        if re.search(r"@backend\s+(\S+)", head).group(1) not in kinds:
            continue
        name = re.search(r"@template\s+(\S+)", head).group(1)
        op = re.search(r"@op\s+(\S+)", head).group(1)
        params = {}
        for m in re.finditer(r"@param\s+(\w+)\s+([-\d\s]+?)\s+default\s+(-?\d+)", head):
            params[m.group(1)] = ([int(v) for v in m.group(2).split()], int(m.group(3)))
        applies = " ".join(re.findall(r"@applies\s+([^\n]+)", head))
        dtypes = re.search(r"@dtypes\s+([^\n]+)", head).group(1).split(" -- ")[0].split()
        backend = re.search(r"@backend\s+(\S+)", head).group(1)
        out.append((name, op, dict(params=params, decode=("M ==" in applies or "M <=" in applies),
                                   dtypes=dtypes, matrix=backend in ("cuda", "hip"))))
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
                "add": (3, 300), "embed": (5, 72, 40), "rope_kv": (3, 8, 2, 16),
                "attention": (3, 8, 2, 16), "argmax": (3, 1000)}


@pytest.mark.parametrize("tpl,op,params", template_spaces(), ids=[t[0] for t in template_spaces()])
@pytest.mark.parametrize("dt", ["f32", "f16", "f32:bf16:f32"])
def test_parameter_space_sample(gc, tpl, op, params, dt):
    info, params = params, params["params"]
    if dt == "f32:bf16:f32" and op in ("add", "rope_kv", "attention", "argmax"):
        dt = "bf16"  # these ops take one dtype
    if dt not in info["dtypes"] and dt.split(":")[0] not in info["dtypes"]:
        dt = info["dtypes"][0] if dt == "f32" else info["dtypes"][-1]  # e.g. mma: f16/bf16 only
    shape = SAMPLE_SHAPE[op]
    if info["matrix"]:
        shape = (48, 128, 256)  # matrix-core templates: whole mma tiles in N and K
    if info["decode"]:
        shape = (1,) + tuple(shape[1:])  # decode-only templates serve M = 1
    tried = 0
    for p, (values, default) in params.items():
        for v in values:
            if v == default:
                continue
            force = f"{tpl}:{p}={v}"
            r = gc("gcore-gen", *GEN, "--op", op, "--dtype", dt, *problem_args(op, shape), "--force",
                   force, "-o", "b.gcb", "-q")
            if r.rc != 0 and "constraint fails" in r.err and "VEC" in params and p != "VEC":
                # the declared default vector width is AVX-512's: on a host
                # without it, take the same point at the widest VEC it has
                for vec in sorted(params["VEC"][0], reverse=True):
                    r = gc("gcore-gen", *GEN, "--op", op, "--dtype", dt, *problem_args(op, shape),
                           "--force", f"{force},VEC={vec}", "-o", "b.gcb", "-q")
                    if r.rc == 0 or "constraint fails" not in r.err:
                        break
            if r.rc != 0 and "constraint fails" in r.err:
                continue  # not a point of the space on this target
            assert r.rc == 0, r
            if not serves(gc.dir / "b.gcb", tpl, shape[0], f"{p}={v}"):
                continue  # this point's template does not serve the problem (@applies)
            dump = gc.dir / f"d_{p}_{v}"
            r = gc("gcore-run", *RUN, "-b", "b.gcb", "--op", op, "--dtype", dt, *problem_args(op, shape),
                   "--dump", dump, "--min-time", "0.001")
            assert r.rc == 0, r
            assert f"{p}={v}" in r.out, r
            numpy_check(op, dt, shape, dump)
            tried += 1
    assert tried >= 1 or all(len(v[0]) == 1 for v in params.values())
