"""Bad input: each gives one clear line on stderr and a non-zero exit, never
a crash (the harness fails any run that trips a sanitizer)."""
import ctypes
import os
import shutil
import subprocess
import sqlite3

import pytest

from conftest import BIN, ROOT, assert_clean_error

GEMM = ["--op", "gemm", "--m", "4", "--n", "32", "--k", "32"]


@pytest.fixture
def bundle(gc):
    assert gc("gcore-gen", *GEMM, "-o", "good.gcb", "-q").rc == 0
    return gc.dir / "good.gcb"


@pytest.fixture
def tunedb(gc):
    r = gc("gcore-tune", "--template", "gemv_cpu", *GEMM, "--db", "good.db", "--budget", "1",
           "--no-progress")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "good.db") as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return gc.dir / "good.db"


@pytest.mark.parametrize("tool", ["gcore-tune", "gcore-gen"])
def test_unknown_op_and_dtype(gc, tool):
    extra = ["-o", "x.gcb"] if tool == "gcore-gen" else ["--db", "t.db"]
    assert_clean_error(gc(tool, "--op", "conv", "--m", "1", *extra), tool, "unknown op 'conv'")
    assert_clean_error(gc(tool, *GEMM, "--dtype", "f8", *extra), tool, "unknown dtype 'f8'")
    assert_clean_error(gc(tool, "--op", "gemm", "--m", "0", "--n", "1", "--k", "1", *extra), tool,
                       "out of range")
    assert_clean_error(gc(tool, "--op", "rmsnorm", "--m", "1", "--n", "4", "--k", "3", *extra),
                       tool, "no k dimension")


def test_unknown_op_at_run(gc, bundle):
    assert_clean_error(gc("gcore-run", "-b", bundle, "--op", "conv", "--m", "1"), "gcore-run",
                       "unknown op")


def test_bad_flags(gc):
    assert_clean_error(gc("gcore-tune", *GEMM, "--budget", "x"), "gcore-tune", "--budget")
    assert_clean_error(gc("gcore-tune", *GEMM, "--target", "tpu_1"), "gcore-tune", "unknown target")
    assert_clean_error(gc("gcore-tune", *GEMM, "--target", "sm_75"), "gcore-tune", "sm_80 or newer")
    assert_clean_error(gc("gcore-gen", *GEMM, "--target", "gfx999", "-o", "x.gcb"), "gcore-gen",
                       "unknown AMD target 'gfx999'")
    assert_clean_error(gc("gcore-gen", *GEMM), "gcore-gen", "-o BUNDLE")
    assert_clean_error(gc("gcore-run", "--op", "gemm"), "gcore-run", "give -b BUNDLE")
    for n in ("-2", "x", "1048577"):
        assert_clean_error(gc("gcore-run", "--repeat-last-n", n), "gcore-run", "--repeat-last-n")
    for n in ("-1", "x", "4097"):
        assert_clean_error(gc("gcore-run", "--l2-window", n), "gcore-run", "--l2-window: expected 0..4096 MB")
        assert_clean_error(gc("gcore-serve", "--l2-window", n), "gcore-serve", "--l2-window: expected 0..4096 MB")


TOOLS = ["gcore-tune", "gcore-gen", "gcore-run", "gcore-compile"]


@pytest.mark.parametrize("tool", TOOLS)
def test_unknown_option_is_one_line(gc, tool):
    """An unknown option or a missing value is one line pointing at --help,
    not the whole usage text; exit code 2."""
    r = gc(tool, "--no-such-flag")
    assert_clean_error(r, tool, "unknown option '--no-such-flag'", f"{tool} --help")
    assert r.rc == 2 and r.out == ""
    flag = "--model" if tool == "gcore-run" else "--target"
    r = gc(tool, flag)
    assert_clean_error(r, tool, f"'{flag}' needs a value", f"{tool} --help")


@pytest.mark.parametrize("tool", TOOLS)
def test_version_and_failed_stdout(gc, tool):
    r = gc(tool, "--version")
    assert r.rc == 0 and r.out.split() == [tool, r.out.split()[1]] and r.out.split()[1][0].isdigit(), r
    # a write to stdout that fails is an error, not a silent success
    with open("/dev/full", "w") as full:
        p = subprocess.run([os.path.join(BIN, tool), "--help"], stdout=full, stderr=subprocess.PIPE,
                           text=True)
    assert p.returncode == 1 and "writing standard output failed" in p.stderr, p.stderr


def bad_template(gc, name, text):
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    (d / "cpu" / name).write_text(text)
    return d


HEAD = ("/*\n * @template bad\n * @op gemm\n * @backend cpu\n * @dtypes f32\n * @kernel k\n"
        " * @grid M\n{extra} */\nvoid k(void **a, long t) {{ (void)a; (void)t; }}\n")


@pytest.mark.parametrize("extra,needle", [
    (" * @param X 1 2 default 3\n", "default of X is not among its values"),
    (" * @param X 1 2\n", "has no 'default D'"),
    (" * @param X 1 2 default 1\n * @constraint X < Y\n", "unknown name 'Y'"),
    (" * @frobnicate 1\n", "unknown declaration '@frobnicate'"),
    (" * @param X 1 1 default 1\n", "listed twice"),
    (" * @constraint (X\n * @param X 1 default 1\n", "expected ')'"),
    (" * @param TC 1 2 default 1\n", "parameter name 'TC' is reserved"),
    (" * @param M 1 2 default 1\n", "parameter name 'M' is reserved"),
    (" * @tensormap A M K 8 8 0\n", "@tensormap needs @backend cuda"),
    (" * @param PAIR 1 2 default 1\n", "parameter name 'PAIR' is reserved"),
    (" * @param BATCH 1 2 default 1\n", "parameter name 'BATCH' is reserved"),
    (" * @param X 1 2 default 1\n * @defaults gemm X=3\n", "bad.c:9: @defaults: the value of X is not"),
    (" * @defaults gemm X=1\n * @param X 1 2 default 1\n", "bad.c:8: @defaults: no @param X above"),
    (" * @param X 1 2 default 1\n * @defaults gemm_swiglu X=2\n", "'gemm_swiglu' is not an op of"),
    (" * @param X 1 2 default 1\n * @defaults gemm\n", "@defaults needs ops and P=V"),
    (" * @param X 1 2 default 1\n * @defaults X=2\n", "name the ops before 'X='"),
    (" * @param X 1 2 default 1\n * @defaults gemm X=2 gemm\n", "op 'gemm' after an assignment"),
    (" * @param X 1 2 default 1\n * @defaults gemm X=2\n * @defaults gemm X=1\n",
     "X is given twice for one op"),
    (" * @param X 1 2 default 1\n * @defaults gemm X=2 if\n", "@defaults: nothing after 'if'"),
    (" * @param X 1 2 default 1\n * @defaults gemm X=2 if SM >= Y\n", "unknown name 'Y'"),
    (" * @param X 1 2 default 1\n * @defaults gemm X=2 X=1 if SM >= 90\n", "X is given twice in one line"),
    (" * @param X 1 2 default 1\n * @defaults gemm X=3 if SM >= 90\n", "@defaults: the value of X is not"),
    (" * @priority 3 if\n", "@priority: nothing after 'if'"),
    (" * @priority 3 if K > Y\n", "@priority ... if: expression 'K > Y': unknown name 'Y'"),
    (" * @priority x if K > 0\n", "bad @priority 'x'"),
    (" * @priority 1 if K > 0\n" * 5, "more than 4 conditional @priority lines"),
])
def test_malformed_template(gc, extra, needle):
    d = bad_template(gc, "bad.c", HEAD.format(extra=extra))
    for tool, out in (("gcore-tune", ["--db", "t.db"]), ("gcore-gen", ["-o", "x.gcb"])):
        r = gc(tool, "--templates", d, *GEMM, *out)
        assert_clean_error(r, tool, "bad.c", needle)


def test_template_missing_kernel_decl(gc):
    d = bad_template(gc, "bad.c", "/*\n * @template bad\n * @op gemm\n */\n")
    assert_clean_error(gc("gcore-gen", "--templates", d, *GEMM, "-o", "x.gcb"), "gcore-gen",
                       "missing @backend")


def test_gpu_prelude_without_its_common_part(gc):
    """A templates folder whose GPU prelude includes prelude_common.h (gen
    splices it in) but lacks the file is refused by name."""
    d = gc.dir / "tpl"
    (d / "cpu").mkdir(parents=True)
    (d / "gpu").mkdir()
    shutil.copy(os.path.join(ROOT, "templates", "cpu", "prelude.h"), d / "cpu")
    (d / "cpu" / "ok.c").write_text(HEAD.format(extra=""))
    shutil.copy(os.path.join(ROOT, "templates", "gpu", "prelude_cuda.h"), d / "gpu")
    r = gc("gcore-gen", "--templates", d, *GEMM, "--dtype", "f32", "-o", "x.gcb")
    assert_clean_error(r, "gcore-gen", "gpu/prelude_cuda.h includes gpu/prelude_common.h, which is missing")
    shutil.copy(os.path.join(ROOT, "templates", "gpu", "prelude_common.h"), d / "gpu")
    r = gc("gcore-gen", "--templates", d, *GEMM, "--dtype", "f32", "-o", "x.gcb", "-q")
    assert r.rc == 0, r


def test_constraints_no_variant_satisfies(gc):
    d = gc.dir / "tpl"
    (d / "cpu").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "templates", "cpu", "prelude.h"), d / "cpu")
    (d / "cpu" / "never.c").write_text(HEAD.format(
        extra=" * @param X 1 2 default 1\n * @constraint X > 5 -- never\n"))
    r = gc("gcore-tune", "--templates", d, *GEMM, "--dtype", "f32", "--db", "t.db")
    assert_clean_error(r, "gcore-tune", "none of the 2 variants satisfies")
    r = gc("gcore-gen", "--templates", d, *GEMM, "--dtype", "f32", "-o", "x.gcb")
    assert_clean_error(r, "gcore-gen", "no variant satisfies its constraints")


def test_database_missing_corrupt_truncated(gc, tunedb):
    assert_clean_error(gc("gcore-gen", "--db", "nope.db", *GEMM, "-o", "x.gcb"), "gcore-gen",
                       "nope.db")
    (gc.dir / "garbage.db").write_bytes(os.urandom(8192))
    for tool, out in (("gcore-gen", ["-o", "x.gcb"]), ("gcore-tune", [])):
        assert_clean_error(gc(tool, "--db", "garbage.db", *GEMM, *out), tool, "garbage.db")
    data = tunedb.read_bytes()
    (gc.dir / "trunc.db").write_bytes(data[: len(data) // 2])
    assert_clean_error(gc("gcore-gen", "--db", "trunc.db", *GEMM, "-o", "x.gcb"), "gcore-gen",
                       "trunc.db")


def test_bundle_missing_corrupt_truncated_wrong_kind(gc, bundle, tunedb):
    run = ["gcore-run", *GEMM, "-b"]
    assert_clean_error(gc(*run, "missing.gcb"), "gcore-run", "missing.gcb")
    data = bundle.read_bytes()
    (gc.dir / "trunc.gcb").write_bytes(data[: len(data) // 3])
    assert_clean_error(gc(*run, "trunc.gcb"), "gcore-run", "trunc.gcb")
    corrupt = bytearray(data)
    for i in range(200, len(corrupt), 97):
        corrupt[i] ^= 0x5A
    (gc.dir / "corrupt.gcb").write_bytes(bytes(corrupt))
    assert_clean_error(gc(*run, "corrupt.gcb"), "gcore-run", "corrupt.gcb")
    (gc.dir / "empty.gcb").write_bytes(b"")
    assert_clean_error(gc(*run, "empty.gcb"), "gcore-run", "not a gcore bundle")
    assert_clean_error(gc(*run, tunedb), "gcore-run", "not a gcore bundle")


def test_bundle_lacks_problem(gc, bundle):
    r = gc("gcore-run", "-b", bundle, "--op", "gemm", "--m", "4", "--n", "64", "--k", "32")
    assert_clean_error(r, "gcore-run", "has no kernel for 'gemm f32:f32:f32 m=4 n=64 k=32'")


def test_bundle_for_another_target(gc, bundle):
    with sqlite3.connect(bundle) as c:
        c.execute("UPDATE code_objects SET target='sm_90'")
        c.execute("UPDATE dispatch SET target='sm_90'")
    r = gc("gcore-run", "-b", bundle, *GEMM)
    assert_clean_error(r, "gcore-run", "has no code for this device", "it has: sm_90",
                       "gcore-gen --target cpu:x86-64")


def test_bundle_field_longer_than_read(gc, bundle):
    """A dispatch entry's expression longer than the reader's field is
    refused by name: cut at the field's end it would still parse (its first
    255 bytes are the grid 1 1 1) and launch another geometry."""
    with sqlite3.connect(bundle) as c:
        c.execute("UPDATE dispatch SET grid = '1 1 1' || printf('%300s', '') || '+ 7'")
    r = gc("gcore-run", "-b", bundle, *GEMM)
    assert_clean_error(r, "gcore-run", "good.gcb: dispatch entry", "its grid is longer than 255 bytes")


def test_winner_field_longer_than_read(gc, tunedb):
    """A winner whose parameter list is longer than gcore reads is refused
    (cut short it would name another variant), and a problem whose op name
    does not fit is not one of this gcore's."""
    with sqlite3.connect(tunedb) as c:
        c.execute("UPDATE variants SET params = params || printf(',%600s', 'X=1')")
    r = gc("gcore-gen", "--db", tunedb, *GEMM, "-o", "x.gcb")
    assert_clean_error(r, "gcore-gen", "good.db: the winner for 'gemm f32:f32:f32 m=4 n=32 k=32'",
                       "has a field longer than gcore reads")
    assert not os.path.exists(gc.dir / "x.gcb")


def test_tampered_code_object(gc, bundle):
    with sqlite3.connect(bundle) as c:
        c.execute("UPDATE code_objects SET blob = zeroblob(length(blob))")
    assert_clean_error(gc("gcore-run", "-b", bundle, *GEMM), "gcore-run", "hash check")


def _has_cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_has_cuda_driver(), reason="this machine has an NVIDIA driver")
def test_run_op_without_the_device(gc, bundle):
    """--op on a backend that cannot open: the reason, not a crash."""
    r = gc("gcore-run", "-b", bundle, "--backend", "cuda", *GEMM)
    assert_clean_error(r, "gcore-run", "no NVIDIA driver")
