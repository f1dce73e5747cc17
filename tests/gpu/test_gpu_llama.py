"""Llama through a GPU backend (GCORE_TEST_BACKEND: cuda, or hip on AMD,
where torch also names the GPU "cuda"). stories260K (fp32 weights, so fp32 on
the GPU too) must match the fp64 numpy reference exactly as on the CPU:
identical greedy ids for 200 steps, logits within 1e-4 relative. Tiny
random models in fp16 and bf16 (activations in that dtype on the GPU) are
compared with Hugging Face transformers running the same files on the same
GPU in the same dtype: prefill logits within a stated tolerance and 32
greedy steps identical."""
import os

import numpy as np
import pytest

import llama_ref as R
import test_llama as TL
from conftest import SHARED

BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "sm_80,sm_90")
pytestmark = pytest.mark.skipif(BACKEND not in ("cuda", "hip"),
                                reason="GPU suite: run with make test-gpu or make test-gpu-amd")

# Tolerance against transformers in the same dtype: both sides round
# activations to 16 bits at different points, so agreement is to a few
# ulps of the dtype on the logits' scale: 2^-7 (fp16) and 2^-4 (bf16) of
# the row's largest logit.
TOL_HF = {"f16": 2.0 ** -7, "bf16": 2.0 ** -4}
MARGIN = 0.01  # least top-2 gap (relative) at every greedy step: ~10x the 16-bit rounding of logits


def gen_bundle(gc, model):
    r = gc("gcore-gen", "--model", model, "--target", TARGETS, "--prefill", "7", "-o", "g.gcb")
    assert r.rc == 0, r
    return str(gc.dir / "g.gcb")


def stories(gc, prompt):
    """stories260K (skipped where the shared data is absent): its path,
    weights and config, the fp64 reference's 200 greedy ids after prompt,
    and a bundle for the GPU targets."""
    path = os.path.join(SHARED, "stories260K.bin")
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (set GCORE_SHARED_DATA)")
    w, cfg = R.load_llama2c(path)
    return path, w, cfg, R.greedy(w, cfg, prompt, 200), gen_bundle(gc, path)


def test_stories260k_on_gpu(gc):
    path, w, cfg, want, b = stories(gc, [1])
    ids, logits, _ = TL.generate(gc, path, b, [1], 200, "--backend", BACKEND, *TL.GREEDY,
                                 vocab=cfg.vocab_size)
    TL.assert_same_ids(ids, want, "stories260K on the GPU")
    ref = R.forward(w, cfg, [1] + want[:-1])
    TL.assert_logits_close(logits, ref, TL.TOL, "stories260K logits on the GPU")


def test_graph_replay_equals_launches(gc):
    """Decode steps replayed from one captured graph (the default) give the
    fp64 reference's 200 greedy ids, as kernel-by-kernel launches
    (--no-graph) do; both with the argmax on the device (no --logits) and
    with logits copied back (--logits, a second graph)."""
    path, w, cfg, want, b = stories(gc, [1, 300, 20])
    for flags in ([], ["--no-graph"]):
        ids, _, _ = TL.generate(gc, path, b, [1, 300, 20], 200, "--backend", "cuda", *TL.GREEDY, *flags)
        TL.assert_same_ids(ids, want, f"stories260K decode {flags or 'graph'}")
        ids, lg, _ = TL.generate(gc, path, b, [1, 300, 20], 200, "--backend", "cuda", *TL.GREEDY, *flags,
                                 vocab=cfg.vocab_size)
        TL.assert_same_ids(ids, want, f"stories260K decode with logits {flags or 'graph'}")
        TL.assert_logits_close(lg, R.forward(w, cfg, [1, 300, 20] + want[:-1]), TL.TOL, "graph logits")


def test_overlapped_launches_equal_serialised(gc):
    """The decode kernels declare @pdl: on sm_90+ each is launched to overlap
    the kernel before it and waits for it on the device (programmatic
    dependent launch). With the overlap (the default) and without it
    (--no-pdl) the graph gives the fp64 reference's 200 greedy ids and
    the very same logits, bit for bit."""
    path, w, cfg, want, b = stories(gc, [1, 300, 20])
    runs = [TL.generate(gc, path, b, [1, 300, 20], 200, "--backend", BACKEND, *TL.GREEDY, *flags,
                        vocab=cfg.vocab_size) for flags in ([], ["--no-pdl"])]
    for (ids, _, _), how in zip(runs, ("overlapped", "serialised")):
        TL.assert_same_ids(ids, want, f"stories260K decode, launches {how}")
    assert np.array_equal(runs[0][1], runs[1][1]), "logits differ with and without the overlap"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_l2_window_changes_no_value(gc, dtype):
    """The decode step's O projection asks L2 for the FFN's first bytes
    (--l2-window MB; on sm_90 gemv_bulk takes the window, @prefetch): a
    hint, so with none (0), the default (3/5 of the GPU's L2, all of this
    tiny model's gate/up) and 1 MB the greedy ids and every logit are the
    same bits (test_tiny_vs_transformers checks the default's against
    transformers)."""
    ref = chosen_model(str(gc.dir / "model"), dtype, **TL.CONFIGS["llama3_gqa"])
    b = gen_bundle(gc, ref.path)
    runs = [TL.generate(gc, ref.path, b, TL.PROMPT, TL.N_DECODE, "--backend", BACKEND, *TL.GREEDY, *flags,
                        vocab=ref.cfg.vocab_size) for flags in ([], ["--l2-window", "0"], ["--l2-window", "1"])]
    for (ids, logits, _), mb in zip(runs[1:], ("0", "1")):
        assert ids == runs[0][0] and np.array_equal(logits, runs[0][1]), f"--l2-window {mb} changed the decode"


def test_profile_on_gpu(gc):
    """--profile on the GPU: both phases, every row timed, ids unchanged."""
    path = os.path.join(SHARED, "stories260K.bin")
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (set GCORE_SHARED_DATA)")
    b = gen_bundle(gc, path)
    plain, _, _ = TL.generate(gc, path, b, [1, 300, 20], 20, "--backend", "cuda", *TL.GREEDY)
    r = gc("gcore-run", "-m", path, "-b", b, "--tokens", "1,300,20", "-n", 20, "--backend", "cuda",
           *TL.GREEDY, "--json", "--profile")
    assert r.rc == 0, r
    assert TL.parse_json(r)["tokens"] == plain
    ph = TL.parse_profile(r.err)
    assert ph["decode"][0] == 19 and ph["prefill"][0] == 1, r.err
    assert all(t > 0 for _, t, _, _, _ in ph["decode"][1] + ph["prefill"][1]), r.err


def hf_model(path, dtype):
    import torch
    from transformers import AutoModelForCausalLM  # LlamaForCausalLM, Qwen2ForCausalLM: the config's
    td = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    return AutoModelForCausalLM.from_pretrained(path, dtype=td).cuda().eval(), torch


def chosen_model(outdir, dtype, **cfg):
    """A tiny model whose greedy continuation has no near-ties (by the fp64
    reference), so 16-bit rounding cannot flip a step."""
    for seed in range(200):
        TL.write_tiny(outdir, seed, dtype=dtype, **cfg)
        ref = TL.reference(outdir)
        if np.min(TL.top2_margin(ref.logits[len(TL.PROMPT) - 1:])) >= MARGIN and len(set(ref.ids)) >= 6:
            return ref
    pytest.fail(f"no seed gives a model without near-ties for {cfg}")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("kind", ["llama2_mha", "llama3_gqa", "tied", "llama3_rope_scaling", "linear_rope_scaling",
                                  "qwen2", "qwen3"])
def test_tiny_vs_transformers(gc, kind, dtype):
    cfg = dict(TL.CONFIGS[kind])
    ref = chosen_model(str(gc.dir / "model"), dtype, **cfg)
    b = gen_bundle(gc, ref.path)
    vocab = ref.cfg.vocab_size
    ids, logits, _ = TL.generate(gc, ref.path, b, TL.PROMPT, TL.N_DECODE, "--backend", BACKEND,
                                 *TL.GREEDY, vocab=vocab)
    model, torch = hf_model(ref.path, dtype)
    with torch.no_grad():
        inp = torch.tensor([TL.PROMPT], device="cuda")
        hf_logits = model(inp).logits[0].float().cpu().numpy().astype(np.float64)
        out = model.generate(inp, max_new_tokens=TL.N_DECODE, do_sample=False, min_new_tokens=TL.N_DECODE,
                             eos_token_id=None, pad_token_id=0)
    hf_ids = out[0, len(TL.PROMPT):].tolist()
    TL.assert_logits_close(logits[:len(TL.PROMPT)], hf_logits, TOL_HF[dtype], f"{kind} {dtype} prefill")
    TL.assert_same_ids(ids, hf_ids, f"{kind} {dtype} greedy vs transformers")
