"""gcore as a library (issue 20) on the CPU: libgcore.so exports the API of
include/gcore.h and nothing else; the Python package (python/gcore, ctypes)
runs every operation on numpy arrays against the case table's fp64
references (tests/cases.py); counters tell tuned from default kernels; a
bundle's kernels are used and its gaps built on demand; a wrong default
kernel is caught by verification and never used; one context serves many
threads; `make install PREFIX=...` installs what a user builds against
(the C example compiled with pkg-config and run, the Python package
imported from the prefix). tests/c/test_api.c is the same API from C."""
import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import cases
from conftest import BIN, ROOT

LIB = os.environ.get("GCORE_LIB", os.path.join(ROOT, "lib", "libgcore.so.1"))
if os.path.realpath(BIN) != os.path.realpath(os.path.join(ROOT, "bin")) and "GCORE_LIB" not in os.environ:
    pytest.skip("libgcore.so of this build (GCORE_BIN) is not in lib/: set GCORE_LIB",
                allow_module_level=True)
if not os.path.exists(LIB):
    pytest.skip(f"{LIB} not built (make)", allow_module_level=True)
os.environ["GCORE_LIB"] = LIB
sys.path.insert(0, os.path.join(ROOT, "python"))
import gcore  # noqa: E402

NP = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


@pytest.fixture
def env(tmp_path, cache_dir, monkeypatch):
    """The session's compile cache, and a default database of the test's own."""
    monkeypatch.setenv("GCORE_CACHE", cache_dir)
    monkeypatch.setenv("GCORE_DB", str(tmp_path / "default.db"))
    return tmp_path


# ---- the shared library -------------------------------------------------------

def header_functions():
    with open(os.path.join(ROOT, "include", "gcore.h")) as f:
        return set(re.findall(r"GCORE_API [^;]*?\b(gcore_\w+)\(", f.read(), re.S))


def test_library_exports_the_header_and_nothing_else():
    out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True,
                         check=True).stdout
    syms = {line.split()[-1].split("@")[0] for line in out.splitlines() if line.split()[1] != "A"}
    assert syms == header_functions(), (sorted(syms - header_functions()),
                                        sorted(header_functions() - syms))
    soname = subprocess.run(["objdump", "-p", LIB], capture_output=True, text=True).stdout
    assert re.search(r"SONAME\s+libgcore\.so\.1\b", soname), soname


def test_header_is_plain_c_and_cxx(tmp_path):
    """gcore.h compiles alone as strict C99 and as C++ (its extern "C")."""
    src = tmp_path / "h.c"
    src.write_text('#include <gcore.h>\nint main(void) { return gcore_abi_version() != GCORE_ABI_VERSION; }\n')
    inc = os.path.join(ROOT, "include")
    r = subprocess.run(["cc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                        "-I", inc, str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if shutil.which("g++"):
        r = subprocess.run(["g++", "-x", "c++", "-Wall", "-Werror", "-fsyntax-only", "-I", inc, str(src)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_versions_agree():
    with open(os.path.join(ROOT, "Makefile")) as f:
        mk = f.read()
    version = re.search(r"^VERSION\s*:=\s*(\S+)", mk, re.M).group(1)
    abi = re.search(r"^ABI\s*:=\s*(\S+)", mk, re.M).group(1)
    with open(os.path.join(ROOT, "include", "gcore.h")) as f:
        h = f.read()
    assert re.search(rf'#define GCORE_VERSION "{re.escape(version)}"', h)
    major, minor, patch = (int(x) for x in version.split("."))
    assert f"#define GCORE_VERSION_NUMBER {major * 1000000 + minor * 1000 + patch} " in h
    assert f"#define GCORE_ABI_VERSION {abi}\n" in h
    assert gcore.version() == version
    assert gcore.library().gcore_version_number() == major * 1000000 + minor * 1000 + patch


def test_import_needs_neither_numpy_nor_torch():
    r = subprocess.run([sys.executable, "-c", "import sys, gcore; gcore.library(); "
                        "print(gcore.version(), 'numpy' in sys.modules, 'torch' in sys.modules)"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[1:] == ["False", "False"], r.stdout


# ---- every operation against the fp64 reference ------------------------------------

def rand(rng, shape, dt, lo=-1.0, hi=1.0):
    """Uniform values, exact in dt (bf16 as its bits in uint16)."""
    x = rng.uniform(lo, hi, size=shape).astype(np.float32)
    if dt == "bf16":
        return (x.view(np.uint32) >> 16).astype(np.uint16)
    return x.astype(NP[dt])


def f64(x, dt):
    return cases.npref.bf16_to_f64(x).ravel() if dt == "bf16" else x.astype(np.float64).ravel()


def dcodes(dt):
    return tuple({"f32": gcore.F32, "f16": gcore.F16, "bf16": gcore.BF16}[t] for t in cases.npref.split_dtypes(dt))


GEMM_CASES = [(op, dt, s) for op in ("gemm", "gemm_add", "gemm_swiglu") for dt in ("f32", "f16", "bf16")
              for s in ((1, 64, 64), (3, 33, 7), (17, 130, 129))]


@pytest.mark.parametrize("op,dt,shape", GEMM_CASES, ids=[f"{o}-{d}-{s}" for o, d, s in GEMM_CASES])
def test_gemm_family(env, op, dt, shape):
    m, n, k = shape
    rng = np.random.default_rng(m * n * k)
    pair = 2 if op == "gemm_swiglu" else 1
    a, b = rand(rng, (m, k), dt), rand(rng, (pair * n, k), dt)
    epi = {"gemm": gcore.EPI_NONE, "gemm_add": gcore.EPI_ADD, "gemm_swiglu": gcore.EPI_SWIGLU}[op]
    with gcore.Context("cpu") as ctx:
        c0 = rand(rng, (m, n), dt) if op == "gemm_add" else None
        c = ctx.gemm(a, b, out=None if c0 is None else c0.copy(), epilogue=epi, dtypes=dcodes(dt))
        assert ctx.stats()["calls"] == 1 and ctx.stats()["errors"] == 0
    d = {"A": (dt, f64(a, dt)), ("W" if pair == 2 else "B"): (dt, f64(b, dt)), "C": (dt, f64(c, dt))}
    if c0 is not None:
        d["C.init"] = (dt, f64(c0, dt))
    cases.CHECK[op](d, dt, shape)


@pytest.mark.parametrize("swiglu", [False, True])
@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_rmsnorm_gemm(env, dt, swiglu):
    m, n, k = 3, 40, 100
    rng = np.random.default_rng(5)
    a, b = rand(rng, (m, k), dt), rand(rng, ((2 if swiglu else 1) * n, k), dt)
    norm = rand(rng, (k,), dt, 0.5, 1.5)
    with gcore.Context("cpu") as ctx:
        c = ctx.rmsnorm_gemm(a, norm, b, eps=1e-5, swiglu=swiglu)
    d = {"A": (dt, f64(a, dt)), ("W" if swiglu else "B"): (dt, f64(b, dt)), "norm": (dt, f64(norm, dt)),
         "C": (dt, f64(c, dt))}
    cases.CHECK["rmsnorm_gemm_swiglu" if swiglu else "rmsnorm_gemm"](d, dt, (m, n, k))


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_rmsnorm(env, dt):
    rng = np.random.default_rng(6)
    x, w = rand(rng, (5, 300), dt), rand(rng, (300,), dt, 0.5, 1.5)
    with gcore.Context("cpu") as ctx:
        y = ctx.rmsnorm(x, w)
    cases.CHECK["rmsnorm"]({"X": (dt, f64(x, dt)), "W": (dt, f64(w, dt)), "Y": (dt, f64(y, dt))}, dt, (5, 300))


@pytest.mark.parametrize("shape,pos0", [((1, 8, 2, 32), 40), ((6, 4, 4, 16), 3), ((5, 6, 1, 64), 0)])
@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_attention(env, dt, shape, pos0):
    m, h, g, d = shape
    rng = np.random.default_rng(7)
    s_len = pos0 + m + 3  # a cache longer than the rows attended to
    q, kc, vc = rand(rng, (m, h * d), dt), rand(rng, (s_len, g * d), dt), rand(rng, (s_len, g * d), dt)
    scale = float(np.float32(1 / np.sqrt(d)))
    with gcore.Context("cpu") as ctx:
        o = ctx.attention(q, kc, vc, pos0, h, g, scale=scale)
    used = (pos0 + m) * g * d
    ref = {"Q": (dt, f64(q, dt)), "Kc": (dt, f64(kc, dt)[:used]), "Vc": (dt, f64(vc, dt)[:used]),
           "O": (dt, f64(o, dt)), "pos": ("i32", np.array([pos0])),
           "scalars": {"pos0": pos0, "scale": scale}}
    cases.CHECK["attention"](ref, dt, shape)


def test_arrays_gcore_cannot_use_in_place(env):
    """Misaligned, strided and Fortran-order inputs and outputs are copied
    where needed; results land in the caller's out (also for C += A·Bᵀ)."""
    rng = np.random.default_rng(8)
    big = rng.uniform(-1, 1, size=(40, 200)).astype(np.float32)
    a = big[1:8, 3:67]                       # strided, unaligned
    b = np.asfortranarray(big[10:34, 5:69])  # Fortran order
    ref = a.astype(np.float64) @ b.T.astype(np.float64)
    raw = np.zeros(7 * 24 + 1, np.float32)
    out = raw[1:].reshape(7, 24)             # 4 bytes off alignment
    with gcore.Context("cpu") as ctx:
        got = ctx.gemm(a, b, out=out)
        assert got is out
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
        ctx.gemm(a, b, out=out, epilogue=gcore.EPI_ADD)
        np.testing.assert_allclose(out, 2 * ref, rtol=1e-5, atol=1e-5)
        assert ctx.stats()["calls"] == 2


def test_errors(env):
    with pytest.raises(gcore.GcoreError) as ex:
        gcore.Context("tpu")
    assert ex.value.name == "EINVAL" and "unknown backend 'tpu'" in str(ex.value)
    with pytest.raises(gcore.GcoreError) as ex:
        gcore.Context("cpu", bundle=str(env / "missing.gcb"))
    assert "missing.gcb" in str(ex.value)
    with pytest.raises(gcore.GcoreError) as ex:
        gcore.Context("cpu", target="sm_90")
    assert ex.value.name == "EINVAL" and "does not run on this device" in str(ex.value)
    a = np.zeros((2, 8), np.float32)
    with gcore.Context("cpu") as ctx:
        with pytest.raises(ValueError, match=r"b has shape \(4, 9\), want \(4, 8\)"):
            ctx.gemm(a, np.zeros((4, 9), np.float32))
        with pytest.raises(TypeError, match="float64"):
            ctx.gemm(a.astype(np.float64), np.zeros((4, 8)))
        with pytest.raises(gcore.GcoreError) as ex:  # the C API's own checks, through the raw call
            ctx.gemm_ptr(gcore.EPI_NONE, 0, 0, 0, 0, 4, 8, a.ctypes.data, a.ctypes.data, a.ctypes.data)
        assert ex.value.name == "EINVAL" and "m=0" in str(ex.value)
        with pytest.raises(gcore.GcoreError, match="no streams"):
            ctx.gemm_ptr(0, 0, 0, 0, 1, 4, 8, 64, 64, 64, stream=4096)
        assert ctx.stats()["errors"] == 2 and ctx.stats()["calls"] == 0
    with pytest.raises(ValueError, match="closed"):
        ctx.stats()


# ---- where kernels come from ---------------------------------------------------------

def gemm_ok(ctx, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (n, k)).astype(np.float32)
    c = ctx.gemm(a, b)
    ref = a.astype(np.float64) @ b.T.astype(np.float64)
    return np.all(np.abs(c - ref) <= 1e-5 * (1 + np.abs(ref)))


def test_tuned_and_default_kernels_are_counted(gc, env):
    """A problem gcore-tune measured runs its winner (tuned); its neighbours
    run verified defaults (untuned); both from one on-demand bundle."""
    r = gc("gcore-tune", "--op", "gemm", "--m", 4, "--n", 64, "--k", 96, "--dtype", "f32",
           "--db", "t.db", "--budget", 2, "--no-progress")
    assert r.rc == 0, r
    with gcore.Context("cpu", db=str(env / "t.db")) as ctx:
        assert gemm_ok(ctx, 4, 64, 96)
        assert ctx.stats()["tuned"] == 1 and ctx.stats()["untuned"] == 0
        assert gemm_ok(ctx, 100, 64, 96)
        s = ctx.stats()
        assert (s["calls"], s["tuned"], s["untuned"]) == (2, 1, 1), s
        assert s["verified"] >= 1 and s["verify_failed"] == 0


def test_bundle_then_on_demand(gc, env):
    """A bundle context runs the bundle's kernels; a shape the bundle lacks
    gets a default built on demand (counted), with the same results."""
    r = gc("gcore-gen", "--op", "gemm", "--m", 16, "--n", 64, "--k", 64, "--dtype", "f32",
           "--target", "cpu", "-o", "b.gcb")
    assert r.rc == 0, r
    with gcore.Context("cpu", bundle=str(env / "b.gcb")) as ctx:
        assert ctx.target.startswith("cpu:x86-64")
        assert gemm_ok(ctx, 16, 64, 64) and gemm_ok(ctx, 5, 64, 64)  # the exact entry, the catch-all
        assert ctx.stats()["builds"] == 0
        assert gemm_ok(ctx, 16, 48, 64)  # another n: not in the bundle
        s = ctx.stats()
        assert s["builds"] == 1 and s["calls"] == 3 and s["untuned"] == 3, s


def test_a_wrong_default_is_never_used(gc, env):
    """A bundle whose default GEMM is wrong (tests/data/wrong_gemm.c drops the
    last k term; the highest priority makes it the default): verification
    catches it before its first use, and the call is served by a default
    built on demand from the built-in templates: the right result, counted."""
    tdir = env / "templates"
    shutil.copytree(os.path.join(ROOT, "templates"), tdir)
    shutil.copy(os.path.join(ROOT, "tests", "data", "wrong_gemm.c"), tdir / "cpu")
    r = gc("gcore-gen", "--templates", str(tdir), "--op", "gemm", "--m", 8, "--n", 32, "--k", 40,
           "--dtype", "f32", "--target", "cpu", "-o", "w.gcb")
    assert r.rc == 0, r
    with gcore.Context("cpu", bundle=str(env / "w.gcb")) as ctx:
        assert gemm_ok(ctx, 8, 32, 40)
        s = ctx.stats()
        assert s["verify_failed"] == 1 and s["builds"] == 1 and s["calls"] == 1, s
        assert gemm_ok(ctx, 8, 32, 40, seed=1) and ctx.stats()["verify_failed"] == 1


def test_a_default_wrong_at_short_contexts_is_never_used(gc, env):
    """A bundle whose default decode attention is right at long contexts
    only (tests/test_planted.py's planted copy of the CPU kernel, which
    drops key 0 below 256 keys): verification before first use runs it at
    the tuner's four positions (gc_op_tune_points), catches it at position
    5, and a call at position 5 is served by a built-in default built on
    demand: the right result, the failure counted."""
    from test_planted import planted_attention
    tdir = env / "templates"
    shutil.copytree(os.path.join(ROOT, "templates"), tdir)
    planted_attention(tdir, "cpu", "planted_att_short", True, priority=9)
    r = gc("gcore-gen", "--templates", str(tdir), "--op", "attention", "--m", 1, "--h", 5, "--g", 5,
           "--d", 96, "--dtype", "f32", "--target", "cpu", "-o", str(env / "w.gcb"))
    assert r.rc == 0, r
    rng = np.random.default_rng(9)
    h, g, d, pos0 = 5, 5, 96, 5
    q, kc, vc = rand(rng, (1, h * d), "f32"), rand(rng, (pos0 + 4, g * d), "f32"), rand(rng, (pos0 + 4, g * d), "f32")
    with gcore.Context("cpu", bundle=str(env / "w.gcb")) as ctx:
        o = ctx.attention(q, kc, vc, pos0, h, g, scale=float(np.float32(1 / np.sqrt(d))))
        s = ctx.stats()
        assert s["verify_failed"] == 1 and s["builds"] == 1, s
    used = (pos0 + 1) * g * d
    ref = {"Q": ("f32", f64(q, "f32")), "Kc": ("f32", f64(kc, "f32")[:used]), "Vc": ("f32", f64(vc, "f32")[:used]),
           "O": ("f32", f64(o, "f32")), "pos": ("i32", np.array([pos0])),
           "scalars": {"pos0": pos0, "scale": float(np.float32(1 / np.sqrt(d)))}}
    cases.CHECK["attention"](ref, "f32", (1, h, g, d))


def test_one_context_many_threads(env):
    shapes = [(m, n, 48) for m in (1, 2, 5, 9) for n in (32, 40)]
    with gcore.Context("cpu") as ctx:
        with cf.ThreadPoolExecutor(4) as pool:
            oks = list(pool.map(lambda i: gemm_ok(ctx, *shapes[i % len(shapes)], seed=i), range(64)))
        assert all(oks)
        s = ctx.stats()
        assert s["calls"] == 64 and s["errors"] == 0, s


# ---- as a user builds and runs it --------------------------------------------------------

def test_python_example_runs(env):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gemm.py")], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert r.returncode == 0, r.stderr
    errors = [float(x) for x in re.findall(r"max \|error\| (\S+)", r.stdout)]
    assert len(errors) == 2 and max(errors) < 1e-5, r.stdout


def test_install_prefix_pkg_config_and_examples(env):
    """make install PREFIX=...; the C example built with pkg-config against
    the prefix and run; the Python package imported from the prefix finds
    the prefix's library; the tools (gcore-compile too) are in PREFIX/bin."""
    if not shutil.which("pkg-config"):
        pytest.skip("pkg-config not installed")
    prefix = env / "prefix"
    r = subprocess.run(["make", "-s", "-C", ROOT, "install", f"PREFIX={prefix}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for f in ("include/gcore.h", "lib/libgcore.so", "lib/libgcore.so.1", "lib/libgcore.a",
              "lib/pkgconfig/gcore.pc", "bin/gcore-compile", "bin/gcore-run",
              "lib/python3/dist-packages/gcore/__init__.py", "lib/python3/dist-packages/gcore/pytorch.py"):
        assert (prefix / f).exists(), f
    pc_env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "gcore"], capture_output=True, text=True,
                           env=pc_env, check=True).stdout.split()
    assert f"-I{prefix}/include" in flags and "-lgcore" in flags, flags
    exe = env / "gemm"
    r = subprocess.run(["cc", os.path.join(ROOT, "examples", "gemm.c"), *flags, "-lm", "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True,
                       env=dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib")))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "max |error|" in r.stdout and "2 calls" in r.stdout, r.stdout
    py = dict(os.environ, PYTHONPATH=str(prefix / "lib" / "python3" / "dist-packages"))
    py.pop("GCORE_LIB", None)
    r = subprocess.run([sys.executable, "-c", "import gcore; print(gcore.library_path())"],
                       capture_output=True, text=True, env=py, cwd=env)
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(prefix / "lib" / "libgcore.so.1")
