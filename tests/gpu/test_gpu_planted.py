"""Planted harmful variants never win a sweep on the GPU (issue 15): the
table of tests/test_planted.py as GPU templates (.cu, @backend gpu) next to
copies of the built-in ones, tuned through gcore-tune on the device. A GPU
kernel cannot be stopped at the faulting write as a CPU one is: every
buffer lies between guards of more than 1 MiB filled with a pattern, and
every input is compared with its initial bytes after each verification
launch (runtime/check.c). Each planted variant is a correct kernel plus one
harmful act by thread 0 after it; a control without the harm shows what
the others would have scored. exit(0) has no GPU counterpart.

Run by `make test-gpu` (GCORE_TEST_BACKEND=cuda, an sm_9x target of
GCORE_TEST_TARGETS, else its first); `make test-gpu-amd` runs it through
hip."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_planted import GPU_HARMS, GPU_TEMPLATE, assert_short_caught, plant, plant_attention, results  # noqa: E402

BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "cpu").split(",")
pytestmark = pytest.mark.skipif(BACKEND not in ("cuda", "hip"),
                                reason="needs a GPU: GCORE_TEST_BACKEND=cuda (make test-gpu) or hip")


def test_gpu_planted_variants_never_win(gc):
    # the target the device runs: an sm_9x one on the H100/H200 of make test-gpu
    target = next((t for t in TARGETS if t.startswith("sm_9")), TARGETS[0])
    tpl = plant(gc.dir, "gpu", "cu", GPU_TEMPLATE, GPU_HARMS)
    r = gc("gcore-tune", "--target", target, "--templates", tpl, "--op", "gemm", "--m", "8",
           "--n", "16", "--k", "32", "--dtype", "f32", "--db", "t.db", "--timeout", "10",
           "--min-time", "0.05", "--budget", len(GPU_HARMS) + 10, "--no-progress")
    assert r.rc == 0, r
    by, winner = results(gc.dir / "t.db")
    for kind, (_, status, words) in GPU_HARMS.items():
        got, detail, _ = by.get("planted_" + kind, (None, "", None))
        assert got == status, (kind, got, detail, r)
        assert (words or "") in detail and (status == "ok" or detail), (kind, detail)
        if kind == "second_wrong":  # caught by the verification, not after the timing
            assert "after the timed launches" not in detail, detail
    assert by.get("builtin"), r
    # none of the harmful ones wins; the control may (launch-bound times
    # this small are close to the built-ins'), and is timed like them
    assert winner and (winner[0] == "planted_ok" or not winner[0].startswith("planted_")), winner
    print("winner", winner, "control", by["planted_ok"][2], "us, best built-in",
          min(by["builtin"]), "us")


def test_gpu_decode_attention_wrong_at_short_contexts_never_wins(gc):
    """tests/test_planted.py's decode attention right at long contexts only,
    as a copy of attention_decode.cu: verify-failed at position 5."""
    target = next((t for t in TARGETS if t.startswith("sm_9")), TARGETS[0])
    tpl = plant_attention(gc.dir, "gpu")
    r = gc("gcore-tune", "--target", target, "--templates", tpl, "--op", "attention", "--m", "1",
           "--h", "32", "--g", "8", "--d", "128", "--dtype", "f16", "--db", "t.db", "--timeout", "10",
           "--min-time", "0.05", "--budget", "8", "--no-progress")
    assert r.rc == 0, r
    assert_short_caught(gc.dir / "t.db")
