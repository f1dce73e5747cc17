"""Tensor parallelism on GPUs (issue 17): gcore-run --tp N with one rank per
GPU and the collectives over NCCL (RCCL on AMD), against --tp 1 on one GPU
and the fp64 reference. Needs a machine of at least two GPUs and the NCCL
library (libnccl.so.2: the system's, or the one PyTorch's wheels ship,
which is found here and put on LD_LIBRARY_PATH); skipped with the reason
otherwise.

fp32 models: TP=N differs from TP=1 only in the order of the sums (NCCL's
ring or tree order over the ranks), so greedy ids are equal on tie-free
models and logits agree to TOL (relative to the row's largest)."""
import ctypes
import glob
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from conftest import SHARED, assert_clean_error  # noqa: E402
import llama_ref as R  # noqa: E402
from test_llama import GREEDY, PROMPT, parse_json, read_logits, tiefree_model  # noqa: E402
from test_tp import LONG, TP_CONFIG  # noqa: E402

BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "sm_80,sm_90")
TOL = 1e-4   # fp32 on GPUs, TP=N vs TP=1 and vs fp64 (tests/test_llama.py's TOL)
N = 24       # greedy steps compared

pytestmark = pytest.mark.skipif(BACKEND not in ("cuda", "hip"),
                                reason="GPU suite: run with make test-gpu or make test-gpu-amd")


def gpu_count():
    tool = ["nvidia-smi", "-L"] if BACKEND == "cuda" else ["rocm-smi", "--showid"]
    try:
        out = subprocess.run(tool, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU") for line in out.splitlines())


def nccl_env():
    """What the tools' environment needs for libnccl.so.2 (librccl.so.1) to
    load: nothing, or LD_LIBRARY_PATH with the directory of the copy
    PyTorch's wheels carry; None if neither has it."""
    lib = "libnccl.so.2" if BACKEND == "cuda" else "librccl.so.1"
    env = {}
    dirs = [""] + sorted(glob.glob(os.path.join(sys.prefix, "lib", "python3*", "*-packages", "nvidia", "nccl", "lib")) +
                         glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib") +
                         glob.glob("/usr/lib/python3/dist-packages/nvidia/nccl/lib"))
    for d in dirs:
        try:
            ctypes.CDLL(os.path.join(d, lib) if d else lib)
        except OSError:
            continue
        if d:
            env["LD_LIBRARY_PATH"] = d + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")
        return env
    return None


@pytest.fixture(scope="module")
def gpus():
    n = gpu_count()
    if n < 2:
        pytest.skip(f"tensor parallelism on GPUs needs two or more GPUs; this machine has {n}")
    env = nccl_env()
    if env is None:
        pytest.skip("the NCCL/RCCL library is not installed (nor PyTorch's copy)")
    return n, env


def run(gc, model, bundle, tp, tokens, env, *flags, n=N):
    lf = os.path.join(gc.dir, f"logits-{tp}-{len(tokens)}-{len(flags)}.f32")
    r = gc("gcore-run", "-m", model, "-b", bundle, "--backend", BACKEND, "--tp", tp,
           "--tokens", ",".join(map(str, tokens)), "-n", n, *GREEDY, "--json", "--logits", lf, *flags, env=env)
    assert r.rc == 0, r
    js = parse_json(r)
    ids = js["tokens"]
    rows = len(tokens) + len(ids) - 1
    return ids, read_logits(lf, rows, os.path.getsize(lf) // 4 // rows), js


def bundle(gc, model, tp):
    out = os.path.join(gc.dir, f"tp{tp}.gcb")
    r = gc("gcore-gen", "--model", model, "--target", TARGETS, "--tp", tp, "--prefill", "none", "-o", out)
    assert r.rc == 0, r
    return out


def rel_err(a, b):
    return float((np.max(np.abs(a - b), axis=1) / np.max(np.abs(b), axis=1)).max())


def check_tp(gc, model, env, tps, prompts, ref_ids=None):
    one = bundle(gc, model, 1)
    for tokens in prompts:
        ids1, lg1, _ = run(gc, model, one, 1, tokens, env)
        if ref_ids is not None and tokens is prompts[0]:
            assert ids1 == ref_ids[:len(ids1)], "TP=1 on the GPU differs from the fp64 reference"
        for tp in tps:
            b = bundle(gc, model, tp)
            for flags in ([], ["--no-graph"]):
                ids, lg, js = run(gc, model, b, tp, tokens, env, *flags)
                what = f"--tp {tp} {' '.join(flags) or '(graph)'}, prompt of {len(tokens)}"
                assert ids == ids1, f"{what}: {ids} vs TP=1 {ids1}"
                assert rel_err(lg, lg1) <= TOL, f"{what}: logits off by {rel_err(lg, lg1):.3g}"
                if not flags:  # the decode step with its all-reduces is one graph replay
                    assert js.get("graph_replays", 0) >= n_graph_steps(ids), f"{what}: {js}"
                print(f"{what}: ids equal, logits within {rel_err(lg, lg1):.2g}; {js.get('graph_replays')} replays")


def n_graph_steps(ids):
    return max(len(ids) - 2, 1)


def test_tiny_tp2_on_two_gpus_equals_tp1(gc, gpus):
    n, env = gpus
    ref = tiefree_model(os.path.join(gc.dir, "model"), prompt=PROMPT, n=N, **TP_CONFIG)
    check_tp(gc, ref.path, env, [t for t in (2, 4) if t <= n], (PROMPT, LONG), ref.ids)


def test_stories260k_tp2_on_two_gpus(gc, gpus):
    _, env = gpus
    path = os.path.join(SHARED, "stories260K.bin")
    if not os.path.exists(path):
        pytest.skip(f"shared test data absent: {path}")
    w, cfg = R.load_llama2c(path)
    check_tp(gc, path, env, (2,), ([1], LONG), R.greedy(w, cfg, [1], N))


def test_tp_devices_and_errors(gc, gpus):
    """--devices picks the ranks' GPUs (1,0: rank 0 on GPU 1); a rank on a
    GPU that is not there is one line naming it."""
    n, env = gpus
    ref = tiefree_model(os.path.join(gc.dir, "model"), prompt=PROMPT, n=8, **TP_CONFIG)
    b = bundle(gc, ref.path, 2)
    ids, _, _ = run(gc, ref.path, b, 2, PROMPT, env, n=8)
    r = gc("gcore-run", "-m", ref.path, "-b", b, "--backend", BACKEND, "--devices", "1,0",
           "--tokens", ",".join(map(str, PROMPT)), "-n", 8, *GREEDY, "--json", env=env)
    assert r.rc == 0 and parse_json(r)["tokens"] == ids, r
    r = gc("gcore-run", "-m", ref.path, "-b", b, "--backend", BACKEND, "--tp", 2, "--device", n - 1,
           "--tokens", "1", "-n", 2, env=env)
    assert_clean_error(r, "gcore-run", "rank 1")
