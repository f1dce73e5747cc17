"""Tensor parallelism (issue 17) on the CPU: the recipe's shard shapes
through the tools (gcore-gen/gcore-tune --tp N; the shapes themselves are
pinned in tests/c/test_models.c recipe_shard)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import assert_clean_error  # noqa: E402
import tinymodel as TM  # noqa: E402

# heads, KV heads, FFN rows and vocabulary all divisible by 2 and 4
TP_CONFIG = dict(dim=64, hidden_dim=160, n_layers=2, n_heads=8, n_kv_heads=4, vocab=256)


@pytest.fixture
def tiny(gc):
    path = os.path.join(gc.dir, "model")
    TM.write_model(path, seed=0, **TP_CONFIG)
    return path


def test_gen_builds_a_shard_bundle(gc, tiny):
    for tp in (2, 4):
        out = os.path.join(gc.dir, f"tp{tp}.gcb")
        r = gc("gcore-gen", "--model", tiny, "--tp", tp, "--prefill", "16", "-o", out)
        assert r.rc == 0 and os.path.exists(out), r


def test_tp_that_does_not_divide_is_one_line(gc, tiny):
    r = gc("gcore-gen", "--model", tiny, "--tp", 3, "-o", os.path.join(gc.dir, "x.gcb"))
    assert_clean_error(r, "gcore-gen", "--tp 3: 8 attention heads are not divisible by 3")
    r = gc("gcore-tune", "--model", tiny, "--tp", 8, "--db", os.path.join(gc.dir, "t.db"))
    assert_clean_error(r, "gcore-tune", "--tp 8: 4 KV heads are not divisible by 8")


def test_tp_goes_with_model(gc):
    r = gc("gcore-gen", "--op", "gemm", "--m", 1, "--n", 8, "--k", 8, "--tp", 2, "-o", os.path.join(gc.dir, "x.gcb"))
    assert_clean_error(r, "gcore-gen", "--tp go with --model")
    r = gc("gcore-gen", "--model", "m", "--tp", "0", "-o", os.path.join(gc.dir, "x.gcb"))
    assert_clean_error(r, "gcore-gen", "--tp: expected 1..64 ranks")
