"""Every prompt length runs: a bundle built by gcore-gen --model (with the
default prefill list, or --prefill none) serves every pass of 1 to the
context's tokens, and gcore-run without -b builds one that does.

The model has odd dimensions on purpose (5 query heads over 1 KV head,
head_dim 24, dim 40, FFN 72, vocabulary 777). Prompts are the prefixes of
one random sequence, so one fp64 forward of the whole sequence gives the
reference's first greedy token for every length; the second comes from a
forward of each prefix plus that token. The model's seed is chosen so that
no decision of the reference has its top two logits within TIE_MARGIN
(relative to the row's largest |logit|): none hinges on rounding.
"""
import os
import shutil
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import ROOT, assert_clean_error, run_tool  # noqa: E402
import llama_ref as R  # noqa: E402
import tinymodel as TM  # noqa: E402

LENGTHS = range(1, 301)
CTX = 320
TIE_MARGIN = 1e-4
ODD = dict(dim=40, hidden_dim=72, n_layers=2, n_heads=5, n_kv_heads=1, head_dim=24, vocab=777,
           max_seq=CTX)


def top2_margin(rows):
    s = np.sort(rows, axis=-1)
    return (s[..., -1] - s[..., -2]) / np.max(np.abs(rows), axis=-1)


def second_tokens(w, cfg, seq, first):
    """For every t of LENGTHS, the logits of first[t-1] fed after seq[:t]:
    the Decoder (llama_ref's cached path, a second implementation) feeds
    seq one token at a time and, at each length, that token in the next
    cache row, which the next token of seq then overwrites."""
    dec = R.Decoder(w, cfg, max_seq=max(LENGTHS) + 1)
    rows = []
    for t in LENGTHS:
        while dec.pos < t:
            dec.step(seq[dec.pos])
        rows.append(dec.step(first[t - 1]))
        dec.pos = t
    return np.array(rows)


_FOUND = {}  # dtype: the seed odd_model found, and its reference tokens


def odd_model(path, dtype):
    """The first seed whose reference has no near-tie at any decision of the
    test, its model written to path: (config, weights, sequence, first
    tokens, second tokens). The search runs once per dtype and process."""
    if dtype in _FOUND:
        seed, seq, first, second = _FOUND[dtype]
        TM.write_model(path, seed=seed, dtype=dtype, **ODD)
        w, cfg = R.load(path)
        return cfg, w, seq, first, second
    for seed in range(40):
        TM.write_model(path, seed=seed, dtype=dtype, **ODD)
        w, cfg = R.load(path)
        seq = np.random.default_rng(seed + 1000).integers(3, ODD["vocab"], max(LENGTHS)).tolist()
        first_logits = R.forward(w, cfg, seq)
        if np.min(top2_margin(first_logits)) < TIE_MARGIN:
            continue
        first = np.argmax(first_logits, axis=1).tolist()
        rows = second_tokens(w, cfg, seq, first)
        if np.min(top2_margin(rows)) < TIE_MARGIN:
            continue
        second = np.argmax(rows, axis=1).tolist()
        _FOUND[dtype] = (seed, seq, first, second)
        return cfg, w, seq, first, second
    raise AssertionError("no seed in 0..39 gives a tie-free odd model")


def run_lengths(run, args, seq, lengths=LENGTHS):
    """One gcore-run over the prompts seq[:t] for every t (--tokens-file: each
    from an empty cache), two greedy tokens each: {t: ids}."""
    path = os.path.join(run.dir, "prompts.txt")
    with open(path, "w") as f:
        f.writelines(",".join(map(str, seq[:t])) + "\n" for t in lengths)
    r = run("gcore-run", *args, "--tokens-file", path, "-n", "2", "--temp", "0", "--ignore-eos",
            "--ctx", str(CTX))
    assert r.rc == 0, r
    lines = r.out.splitlines()
    assert len(lines) == len(lengths), r
    return {t: [int(x) for x in line.split()] for t, line in zip(lengths, lines)}


@pytest.mark.parametrize("dtype,prefill", [("f32", None), ("f16", "none")])
def test_every_prompt_length(tmp_path, cache_dir, dtype, prefill):
    """Lengths 1..300 through one bundle: the first two greedy tokens of each
    equal the fp64 reference's. fp32 uses gcore-gen's default prefill list
    (128 and the context: exact entries, ranges between); fp16 --prefill
    none, so every prefill kernel comes from the ranges the recipe needs."""
    model = str(tmp_path / "model")
    cfg, w, seq, first, second = odd_model(model, dtype)
    env = {"GCORE_CACHE": cache_dir}
    run = lambda *a: run_tool(*a, cwd=str(tmp_path), env=env)  # noqa: E731
    run.dir = str(tmp_path)
    extra = ["--prefill", prefill] if prefill else []
    r = run("gcore-gen", "--model", model, *extra, "-o", "b.gcb")
    assert r.rc == 0, r
    got = run_lengths(run, ["-m", model, "-b", "b.gcb"], seq)
    bad = [(t, got[t], [first[t - 1], second[t - 1]]) for t in LENGTHS
           if got[t] != [first[t - 1], second[t - 1]]]
    assert not bad, f"{len(bad)} of {len(LENGTHS)} prompt lengths differ, first: {bad[:3]}"


def test_no_bundle_step(tmp_path, cache_dir):
    """gcore-run -m MODEL without -b: the bundle for this device is built
    from the default tuning database into the cache (one line on stderr
    says so), reused on the next run, and serves prompts the bundle's
    exact entries never named."""
    model = str(tmp_path / "model")
    cfg, w, seq, first, second = odd_model(model, "f32")
    env = {"GCORE_CACHE": str(tmp_path / "cache"), "GCORE_DB": str(tmp_path / "none.db")}
    for t, verb in ((37, "built"), (13, "reusing"), (300, "reusing")):
        r = run_tool("gcore-run", "-m", model, "--tokens", ",".join(map(str, seq[:t])), "-n", "2",
                     "--temp", "0", "--ignore-eos", cwd=str(tmp_path), env=env)
        assert r.rc == 0, r
        assert [int(x) for x in r.out.split()] == [first[t - 1], second[t - 1]], (t, r)
        lines = [l for l in r.err.splitlines() if l.startswith("gcore-run: ")]
        assert len(lines) == 1 and f"{verb} bundle" in lines[0] and "defaults" in lines[0], r
    assert len(list((tmp_path / "cache" / "bundles").glob("*.gcb"))) == 1


def test_tune_then_run_share_the_default_database(tmp_path, cache_dir):
    """gcore-tune --model writes the default database; gcore-run without -b
    then builds a new bundle from its winners (the key changed) and says
    how many problems are tuned."""
    model = str(tmp_path / "model")
    TM.write_model(model, seed=3, dtype="f32", **dict(ODD, max_seq=64))
    env = {"GCORE_CACHE": str(tmp_path / "cache"), "GCORE_DB": str(tmp_path / "tune.db")}
    r = run_tool("gcore-run", "-m", model, "--tokens", "1,2,3", "-n", "1", "--temp", "0",
                 cwd=str(tmp_path), env=env)
    assert r.rc == 0 and "template defaults" in r.err, r
    r = run_tool("gcore-tune", "--model", model, "--prefill", "none", "--budget", "1",
                 "--no-progress", cwd=str(tmp_path), env=env)
    assert r.rc == 0 and (tmp_path / "tune.db").exists(), r
    r = run_tool("gcore-run", "-m", model, "--tokens", "1,2,3", "-n", "1", "--temp", "0",
                 cwd=str(tmp_path), env=env)
    assert r.rc == 0, r
    line = [l for l in r.err.splitlines() if l.startswith("gcore-run: ")][0]
    assert "built bundle" in line and "problems tuned in" in line and not line.split(":")[2].strip().startswith("0 of"), r
    assert len(list((tmp_path / "cache" / "bundles").glob("*.gcb"))) == 2


def test_a_hole_is_refused_by_name(gc):
    """Without the CPU GEMM template, nothing serves a prefill of more than
    4 rows (gemv_cpu stops there): gcore-gen names the first hole and writes
    nothing, instead of a bundle that fails at a prompt's length."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    os.remove(d / "cpu" / "gemm.c")
    model = str(gc.dir / "model")
    TM.write_model(model, seed=0, dtype="f32", **dict(ODD, max_seq=64))
    r = gc("gcore-gen", "--templates", d, "--model", model, "--prefill", "none", "-o", "b.gcb")
    assert_clean_error(r, "gcore-gen", "no template serves", "m=5", "a prompt of that length")
    assert not (gc.dir / "b.gcb").exists()


def test_eighty_layers(tmp_path, cache_dir):
    """No hidden limit on depth: an 80-layer model (Llama-3-70B's count) runs
    and its greedy tokens equal the reference's."""
    model = str(tmp_path / "model")
    TM.write_model(model, seed=5, dtype="f32", dim=16, hidden_dim=32, n_layers=80, n_heads=2,
                   n_kv_heads=1, vocab=64, max_seq=32)
    w, cfg = R.load(model)
    want = R.greedy(w, cfg, [1, 5, 9], 6)
    env = {"GCORE_CACHE": cache_dir, "GCORE_DB": str(tmp_path / "none.db")}
    r = run_tool("gcore-run", "-m", model, "--tokens", "1,5,9", "-n", "6", "--temp", "0",
                 "--ignore-eos", cwd=str(tmp_path), env=env)
    assert r.rc == 0, r
    assert [int(x) for x in r.out.split()] == want, r
