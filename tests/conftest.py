"""Test harness: finds the built tools, gives every test a scratch directory,
and shares one compile cache per session so a variant compiles once."""
import os
import subprocess
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("GCORE_BIN", os.path.join(ROOT, "bin"))
SHARED = os.environ.get("GCORE_SHARED_DATA", os.path.join(os.path.dirname(ROOT), "shared", "data"))
SANITIZER_MARKS = ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation fault",
                   "Traceback", "core dumped")


class Result:
    def __init__(self, p):
        self.rc, self.out, self.err = p.returncode, p.stdout, p.stderr

    def __repr__(self):
        return f"rc={self.rc}\nstdout:\n{self.out}\nstderr:\n{self.err}"


def run_tool(tool, *args, cwd=None, env=None, timeout=600, input=None):
    """input: text for stdin (else stdin is empty)."""
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([os.path.join(BIN, tool), *map(str, args)], cwd=cwd, env=e,
                       capture_output=True, text=True, timeout=timeout,
                       input=input if input is not None else "")
    r = Result(p)
    for mark in SANITIZER_MARKS:
        assert mark not in r.err, f"{tool} crashed or sanitizer fired:\n{r}"
    return r


def assert_clean_error(r, tool, *needles):
    """A bad input: non-zero exit, one line on stderr naming the tool, no crash."""
    assert r.rc not in (0,) and r.rc > 0, r
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one error line:\n{r}"
    assert lines[0].startswith(tool + ": "), r
    for n in needles:
        assert n in lines[0], f"'{n}' not in: {lines[0]}"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "reference_only: checks only the tests' own reference (llama_ref.py, tinymodel.py, ggufq.py), "
        "never gcore; the docstring names the test of gcore's code that stands for the same feature "
        "(deselect with -m 'not reference_only')")


def pytest_collection_modifyitems(config, items):
    """A reference_only test names, in its docstring, the test of gcore's
    code that stands for the same feature."""
    bare = sorted({it.nodeid.split("[")[0] for it in items if it.get_closest_marker("reference_only")
                   and "gcore" not in (getattr(it, "function", None).__doc__ or "")})
    if bare:
        raise pytest.UsageError("reference_only tests without a gcore test named in their docstring: " +
                                ", ".join(bare))
    # The modules of the longest tests first (measured on 2 cores: 30 s to 3
    # min each), each module's tests together and in their order (module
    # fixtures are made once), so that on the xdist workers none of those
    # tests starts last and leaves the other worker idle at the end; the
    # order does not matter otherwise (every test has its own directory and
    # port).
    items.sort(key=lambda it: not it.nodeid.startswith(LONG_FIRST))


LONG_FIRST = ("tests/test_readme.py::", "tests/test_amd_compile.py::", "tests/test_trust.py::",
              "tests/test_c_units.py::", "tests/test_gguf.py::")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One compile cache for the whole run: on pytest-xdist's workers, the
    directory above each worker's base (shared by the workers of this run
    only), so a variant two workers need compiles once: gcore's claims on
    the cache (gen/compile.c) let them compile side by side, never the same
    variant twice."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return str(tmp_path_factory.mktemp("cache"))
    d = tmp_path_factory.getbasetemp().parent / "shared-cache"
    d.mkdir(exist_ok=True)
    return str(d)


@pytest.fixture(scope="session", autouse=True)
def emu_cache(tmp_path_factory):
    """The run's cache of host emulation programs (test_amd_emulator's
    compile_emu, through GCORE_TEST_EMU_CACHE): beside the compile cache,
    shared by the xdist workers of this run only."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        d = tmp_path_factory.mktemp("emu-cache")
    else:
        d = tmp_path_factory.getbasetemp().parent / "shared-emu-cache"
        d.mkdir(exist_ok=True)
    os.environ["GCORE_TEST_EMU_CACHE"] = str(d)
    return str(d)


@pytest.fixture
def gc(tmp_path, cache_dir):
    """Runs a gcore tool in tmp_path with the session cache."""
    def run(tool, *args, **kw):
        # the default tuning database (gcore-tune's --db, gcore-run's
        # bundle without -b) stays inside the test's directory
        env = {"GCORE_CACHE": cache_dir, "GCORE_DB": str(tmp_path / "default-tune.db")}
        env.update(kw.pop("env", {}) or {})
        return run_tool(tool, *args, cwd=kw.pop("cwd", tmp_path), env=env, **kw)
    run.dir = tmp_path
    return run
