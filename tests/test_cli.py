"""The tools' shared edges (base/cli.c): an option that takes a value may be
given once on every tool; a second one is one line and exit code 2,
whatever spelling each occurrence has (--db X, --db=X, -oX, -o X)."""
import pytest

from conftest import run_tool

TOOLS = ["gcore-tune", "gcore-gen", "gcore-run", "gcore-compile", "gcore-bench"]

REPEATS = [
    ("gcore-tune", ["--db", "a.db", "--db", "b.db"], "--db"),
    ("gcore-tune", ["--target=cpu", "--op", "gemm", "--target", "cpu"], "--target"),
    ("gcore-tune", ["--report", "a.html", "--report=b.html"], "--report"),
    ("gcore-tune", ["--shard", "1/2", "--shard", "2/2"], "--shard"),
    ("gcore-gen", ["-o", "a.gcb", "--output", "b.gcb"], "--output"),
    ("gcore-gen", ["-oa.gcb", "-o", "b.gcb"], "-o"),
    ("gcore-gen", ["--target", "cpu", "--target", "sm_90"], "--target"),
    ("gcore-run", ["-m", "a", "--model=b"], "--model"),
    ("gcore-run", ["--db", "a.db", "-b", "x.gcb", "--db", "b.db"], "--db"),
    ("gcore-compile", ["--target", "sm_90", "--target", "sm_80"], "--target"),
    ("gcore-compile", ["-o", "a", "-o", "b"], "-o"),
    ("gcore-bench", ["-m", "a", "-m", "b"], "-m"),
    ("gcore-bench", ["-p", "128", "--n-prompt", "512"], "--n-prompt"),
    ("gcore-bench", ["-o", "md", "--output=csv"], "--output"),
]


@pytest.mark.parametrize("tool,args,word", REPEATS)
def test_an_option_with_a_value_given_twice_is_an_error(tool, args, word, tmp_path):
    r = run_tool(tool, *args, cwd=tmp_path)
    assert r.rc == 2, r
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert lines == [f"{tool}: option '{word}' given twice (it takes one value)"], r
    assert not list(tmp_path.iterdir()), "nothing may be written before the flags are read"


@pytest.mark.parametrize("tool", TOOLS)
def test_options_without_a_value_may_repeat(tool):
    r = run_tool(tool, "--help", "--help")
    assert r.rc == 0 and "usage" in r.out, r
