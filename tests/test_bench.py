"""gcore-bench: llama-bench's table (model, size, params, backend, test,
tokens/s mean ± sd) for pp (one prefill of N tokens) and tg (N decode
steps), as markdown, CSV or JSON, through the bundle gcore-run would use."""
import csv
import io
import json
import os
import re
import statistics

import pytest

from conftest import assert_clean_error
import tinymodel as TM

MD_HEAD = ["model", "size", "params", "backend", "test", "t/s"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench") / "model"
    TM.write_model(str(d), seed=1, dtype="f16", dim=64, hidden_dim=160, n_layers=2, n_heads=4,
                   n_kv_heads=2, vocab=2048, max_seq=64, rope_scaling="llama3")
    return d


def n_params(d):
    """Elements of every tensor of the model (config.json: untied)."""
    c = json.load(open(d / "config.json"))
    dim, hid, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    hd = dim // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    layer = dim * dim * 2 + 2 * kv * dim + 3 * dim * hid + 2 * dim
    return V * dim * (1 if c.get("tie_word_embeddings") else 2) + L * layer + dim


def md_rows(out):
    lines = [l for l in out.splitlines() if l.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head == MD_HEAD, lines[0]
    assert set(lines[1]) <= set("|-: ") and lines[1].count("|") == 7, lines[1]
    return [[c.strip() for c in l.strip("|").split("|")] for l in lines[2:]]


def test_markdown_table_in_llama_bench_shape(gc, model):
    r = gc("gcore-bench", "-m", model, "-p", "8,16", "-n", "4,8", "-r", "3")
    assert r.rc == 0, r
    rows = md_rows(r.out)
    assert [row[4] for row in rows] == ["pp8", "pp16", "tg4", "tg8"], r.out
    for row in rows:
        assert re.fullmatch(r"llama \d+K F16", row[0]), row
        assert row[1].endswith(" MiB") and row[2] == f"{n_params(model) / 1e3:.2f} K", row
        assert row[3] == "cpu"
        mean, sd = map(float, row[5].split(" ± "))
        assert mean > 0 and sd >= 0, row
    # the bundle is the one gcore-run builds: the line says so (built, or
    # reused where another test of the session's shared cache built it
    # first), and gcore-run then reuses the same file
    m = re.search(r"gcore-bench: (?:built|reusing) bundle (\S+) for cpu", r.err)
    assert m, r.err
    r2 = gc("gcore-run", "-m", model, "--tokens", "1,2,3", "-n", "2", "--temp", "0")
    assert r2.rc == 0 and f"reusing bundle {m.group(1)} " in r2.err, r2


def test_json_and_csv(gc, model):
    r = gc("gcore-bench", "-m", model, "-p", "16", "-n", "0", "-r", "4", "-o", "json")
    assert r.rc == 0, r
    (t,) = json.loads(r.out)
    assert t["n_prompt"] == 16 and t["n_gen"] == 0 and t["repetitions"] == 4
    assert t["model_n_params"] == n_params(model) and t["backend"] == "cpu"
    assert t["model_size"] == 2 * n_params(model)  # fp16 weights
    assert len(t["samples_ts"]) == len(t["samples_ns"]) == 4
    assert t["avg_ts"] == pytest.approx(statistics.mean(t["samples_ts"]), rel=1e-5)
    assert t["stddev_ts"] == pytest.approx(statistics.stdev(t["samples_ts"]), rel=1e-4, abs=1e-6)
    for ns, ts in zip(t["samples_ns"], t["samples_ts"]):
        assert ts == pytest.approx(16 / (ns * 1e-9), rel=1e-3)
    r = gc("gcore-bench", "-m", model, "-p", "0", "-n", "4,8", "-r", "2", "-o", "csv")
    assert r.rc == 0, r
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert [(x["n_prompt"], x["n_gen"]) for x in rows] == [("0", "4"), ("0", "8")]
    assert all(float(x["avg_ts"]) > 0 and x["model_filename"] == str(model) for x in rows)


def test_parallel_sequences_and_profile(gc, model):
    """--parallel B runs each tg test as batched steps of B rows (B slots),
    counting all B*N tokens; --profile prints each test's kernel table,
    the batched one through the batched problems."""
    r = gc("gcore-bench", "-m", model, "-p", "8", "-n", "4,6", "--parallel", "1,3", "-r", "2", "--profile")
    assert r.rc == 0, r
    assert [row[4] for row in md_rows(r.out)] == ["pp8", "tg4", "tg4 x3", "tg6", "tg6 x3"], r.out
    for name in ["pp8", "tg4", "tg4 x3", "tg6", "tg6 x3"]:
        assert f"gcore-bench: profile of {name} (2 timed runs):" in r.err, r.err
    batched = r.err.split("profile of tg4 x3")[1].split("profile of tg6")[0]
    # 2 timed runs x 4 steps x 2 layers
    assert re.search(r"\n\s+16 .*attention_batch \S+ m=3 ", batched), batched
    r = gc("gcore-bench", "-m", model, "-p", "0", "-n", "5", "--parallel", "4", "-r", "2", "-o", "json")
    assert r.rc == 0, r
    (t,) = json.loads(r.out)
    assert (t["n_gen"], t["n_parallel"]) == (5, 4)
    for ns, ts in zip(t["samples_ns"], t["samples_ts"]):
        assert ts == pytest.approx(4 * 5 / (ns * 1e-9), rel=1e-3)


def test_uses_the_bundle_it_is_given_and_the_tuning_database(gc, model):
    r = gc("gcore-gen", "--model", model, "-o", "m.gcb")
    assert r.rc == 0, r
    r = gc("gcore-bench", "-m", model, "-b", "m.gcb", "-p", "8", "-n", "4", "-r", "1", "--no-warmup")
    assert r.rc == 0 and len(md_rows(r.out)) == 2 and "bundle" not in r.err, r
    r = gc("gcore-tune", "--model", model, "--prefill", "8", "--db", "t.db", "--budget", "1",
           "--min-time", "0.02", "--no-progress")
    assert r.rc == 0, r
    r = gc("gcore-bench", "-m", model, "--db", "t.db", "-p", "8", "-n", "4", "-r", "1")
    assert r.rc == 0 and re.search(r"bundle \S+ for cpu\S*: [1-9]\d* of \d+ problems tuned in t.db", r.err), r


@pytest.mark.parametrize("args,needle", [
    (["-p", "128"], "a test of 128 tokens needs 128 positions; the model has 64"),
    (["-r", "0"], "-r: expected repetitions"),
    (["-o", "xml"], "-o: expected md, csv or json"),
    (["-p", "8,x"], "-p: expected a comma list"),
    (["-n", "8,"], "-n: expected a comma list"),
    (["-p", "0", "-n", "0"], "nothing to run"),
    (["--parallel", "0"], "--parallel: expected a comma list of sequence counts, 1 to 16"),
    (["--parallel", "17"], "--parallel: expected a comma list of sequence counts, 1 to 16"),
    (["-b", "x.gcb", "--db", "t.db"], "--db and --cache build the bundle"),
    (["-b", "missing.gcb", "-p", "8", "-n", "0"], "missing.gcb"),
    (["--backend", "nosuch", "-p", "8", "-n", "0"], "nosuch"),
])
def test_errors_are_one_line(gc, model, args, needle):
    r = gc("gcore-bench", "-m", model, *args)
    assert_clean_error(r, "gcore-bench", needle)


def test_needs_a_model(gc):
    assert_clean_error(gc("gcore-bench", "-p", "8"), "gcore-bench", "-m MODEL")
    assert_clean_error(gc("gcore-bench", "-m", "nowhere"), "gcore-bench", "nowhere")


def profiles(err):
    """{test name: its --profile section} of gcore-bench's stderr."""
    parts = re.split(r"gcore-bench: profile of (.+) \(\d+ timed runs\):\n", err)
    return dict(zip(parts[1::2], parts[2::2]))


def test_leave_out_runs_each_tg_test_again_without_the_op(gc, model):
    """--leave-out: after the tests, every tg test again per op with the
    decode steps' launches of that op left out ("tg4 -attention"); the
    profile of such a row lists no kernel of that op, and the op is back
    in the next row (a batched step's attention is attention_batch, which
    leaving out attention does not touch)."""
    r = gc("gcore-bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "--parallel", "1,2",
           "--leave-out", "attention,attention_batch", "--profile")
    assert r.rc == 0, r
    names = [row[4] for row in md_rows(r.out)]
    assert names == ["tg4", "tg4 x2", "tg4 -attention", "tg4 x2 -attention", "tg4 -attention_batch",
                     "tg4 x2 -attention_batch"], r.out
    prof = profiles(r.err)
    assert sorted(prof) == sorted(names), r.err
    single, batched = re.compile(r" attention f\w+:"), re.compile(r" attention_batch f\w+:")
    for name, text in prof.items():
        has = {"attention": bool(single.search(text)), "attention_batch": bool(batched.search(text))}
        want = "attention_batch" if " x2" in name else "attention"
        assert has[want] == (not name.endswith(" -" + want)), (name, text)
        assert not has["attention_batch" if want == "attention" else "attention"], (name, text)
        assert "gemm_add" in text, (name, text)  # the rest of the step still runs


def test_leave_out_in_csv_and_json(gc, model):
    r = gc("gcore-bench", "-m", model, "-p", "4", "-n", "4", "-r", "1", "--leave-out", "argmax", "-o", "csv")
    assert r.rc == 0, r
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert [(x["n_prompt"], x["n_gen"], x["left_out"]) for x in rows] == [("4", "0", ""), ("0", "4", ""),
                                                                         ("0", "4", "argmax")], r.out
    r = gc("gcore-bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "--leave-out", "gemm_add", "-o", "json")
    assert r.rc == 0, r
    tests = json.loads(r.out)
    assert ["left_out" in t for t in tests] == [False, True] and tests[1]["left_out"] == "gemm_add", r.out


@pytest.mark.parametrize("args,needle", [
    (["--leave-out", "attention,bogus"], "--leave-out: unknown op 'bogus' (known: gemm, "),
    (["-n", "0", "--leave-out", "attention"], "--leave-out leaves ops out of tg tests: give -n"),
    (["--leave-out", "attention,"], "--leave-out: expected a comma list of op names"),
])
def test_leave_out_errors_before_any_test(gc, model, args, needle):
    r = gc("gcore-bench", "-m", model, "-p", "4", "-r", "1", *args)
    assert_clean_error(r, "gcore-bench", needle)
    assert r.out == "", r.out
