"""test_models_units.py — checks the fp64 numpy reference (llama_ref.py) and
the tiny-model writer (tinymodel.py) themselves, before they are used to
judge gcore: the real stories260K checkpoint decodes deterministically, the
two forward paths (prefill, one token at a time) agree, both RoPE layouts
compute the same model, and what tinymodel writes reads back exactly.

Every test here is marked reference_only: none runs gcore. Each feature they
check has a test of gcore's own code that can fail, named in the test's
docstring ("gcore: ..."); in short:
  stories260K decoding         test_llama.py::test_stories260k_matches_reference
  prefill = token by token     test_llama.py::test_prefill_equals_token_by_token
  both RoPE layouts            test_llama.py::test_tiny_llama2c_matches_reference (pairs),
                               test_tiny_hf_matches_reference (halves)
  GQA, head_dim != dim/heads   test_llama.py::test_tiny_hf_matches_reference[llama3_gqa-*, head_dim-*]
  llama3 RoPE scaling          tests/c/test_models.c rope_inv_freq (gc_llama_inv_freq),
                               test_llama.py::test_tiny_hf_matches_reference[llama3_rope_scaling-*],
                               test_gguf.py::test_gguf_llama3_rope_scaling
  the RoPE rotation            test_ops.py's rope_kv cases
  bf16 rounding                tests/c/test_base.c test_half (gc_f32_to_bf16)
  safetensors reading          tests/c/test_models.c st_valid, st_sharded, weights_hf
  broken files refused         tests/c/test_models.c st_broken, weights_hf_broken; test_llama_errors.py

Run with Debian's python: /usr/bin/python3 -m pytest tests/test_models_units.py
"""
import copy
import dataclasses
import json
import math
import os
import struct
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import llama_ref as R  # noqa: E402
import tinymodel as TM  # noqa: E402

REPO = os.path.dirname(HERE)
from conftest import SHARED as DATA  # noqa: E402
STORIES = os.path.join(DATA, "stories260K.bin")

pytestmark = pytest.mark.reference_only

# The first greedy ids from BOS. Computed with this reference and, during its
# development, matched by a float32 scalar transcription of llama2.c's run.c
# forward pass; pinned so that any change to the reference is noticed.
STORIES_GREEDY_HEAD = [461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435, 299, 362, 409, 283, 264,
                       283, 452, 288, 13, 431, 431, 431, 431]


@pytest.fixture(scope="module")
def stories():
    if not os.path.exists(STORIES):
        pytest.skip(f"shared test data absent: {STORIES} (set GCORE_SHARED_DATA)")
    return R.load_llama2c(STORIES)


@pytest.fixture(scope="module")
def stories_greedy(stories):
    w, cfg = stories
    return R.greedy(w, cfg, [cfg.bos_id], 200)


# ------------------------------------------------------------ stories260K

def test_stories_config(stories):
    """gcore: tests/c/test_models.c stories_header (test_models shared)."""
    _, cfg = stories
    assert (cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size, cfg.max_seq) == \
        (64, 172, 5, 8, 4, 512, 512)
    assert cfg.tied and cfg.rope_layout == "pairs" and cfg.head_dim == 8 and cfg.eps == 1e-5


def test_stories_greedy_deterministic(stories, stories_greedy):
    """gcore: test_llama.py::test_stories260k_matches_reference (gcore-run's
    200 greedy ids are these)."""
    w, cfg = stories
    again = R.greedy(w, cfg, [1], 200)
    assert len(stories_greedy) == 200
    assert again == stories_greedy
    assert all(0 <= t < cfg.vocab_size for t in stories_greedy)
    assert stories_greedy[:len(STORIES_GREEDY_HEAD)] == STORIES_GREEDY_HEAD


def test_stories_incremental_matches_prefill(stories, stories_greedy):
    """gcore: test_llama.py::test_prefill_equals_token_by_token."""
    w, cfg = stories
    tokens = [1] + stories_greedy[:127]
    full = R.forward(w, cfg, tokens)
    dec = R.Decoder(w, cfg)
    steps = np.stack([dec.step(t) for t in tokens])
    np.testing.assert_allclose(steps, full, rtol=1e-9, atol=1e-9)


def test_stories_greedy_is_prefill_argmax(stories, stories_greedy):
    """gcore: test_llama.py::test_stories260k_matches_reference."""
    w, cfg = stories
    logits = R.forward(w, cfg, [1] + stories_greedy[:-1])
    assert np.argmax(logits, axis=1).tolist() == stories_greedy
    # no near-ties: the pinned ids do not hinge on rounding
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert np.min(top2[:, 1] - top2[:, 0]) > 1e-6


def pairs_to_halves(wq: np.ndarray, n_heads: int, hd: int) -> np.ndarray:
    """Reorder each head's rows from adjacent pairs (2i, 2i+1) to halves
    (i, i + hd/2): the permutation HF's conversion scripts apply."""
    order = np.concatenate([np.arange(0, hd, 2), np.arange(1, hd, 2)])
    return wq.reshape(n_heads, hd, -1)[:, order, :].reshape(n_heads * hd, -1)


def test_rope_layouts_agree(stories, tmp_path):
    """stories260K rewritten as a Hugging Face model (halves layout, rows of
    wq/wk permuted) gives the same logits through load_hf. gcore: each layout
    against this reference, test_llama.py::test_tiny_llama2c_matches_reference
    and test_stories260k_matches_reference (pairs), test_tiny_hf_matches_reference
    (halves)."""
    w, cfg = stories
    hf = TM.make_config(dim=cfg.dim, hidden_dim=cfg.hidden_dim, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                        n_kv_heads=cfg.n_kv_heads, vocab=cfg.vocab_size, max_seq=cfg.max_seq, tied=True,
                        eps=cfg.eps)
    t = {"model.embed_tokens.weight": w["tok_embeddings"], "model.norm.weight": w["norm"]}
    for i, L in enumerate(w["layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = L["attn_norm"]
        t[p + "self_attn.q_proj.weight"] = pairs_to_halves(L["wq"], cfg.n_heads, cfg.head_dim)
        t[p + "self_attn.k_proj.weight"] = pairs_to_halves(L["wk"], cfg.n_kv_heads, cfg.head_dim)
        t[p + "self_attn.v_proj.weight"] = L["wv"]
        t[p + "self_attn.o_proj.weight"] = L["wo"]
        t[p + "post_attention_layernorm.weight"] = L["ffn_norm"]
        t[p + "mlp.gate_proj.weight"], t[p + "mlp.down_proj.weight"] = L["w1"], L["w2"]
        t[p + "mlp.up_proj.weight"] = L["w3"]
    TM.write_hf(str(tmp_path), hf, {k: v.astype(np.float32) for k, v in t.items()}, dtype="f32", shards=2)
    w2, cfg2 = R.load_hf(str(tmp_path))
    assert cfg2.rope_layout == "halves" and cfg2.tied
    toks = [1, 461, 401, 300, 299, 13, 500, 2, 7]
    np.testing.assert_allclose(R.forward(w2, cfg2, toks), R.forward(w, cfg, toks), rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------- the math

def test_gqa_equals_repeated_kv_heads(tmp_path):
    """A GQA model equals the MHA model whose k/v heads are repeated: query
    head i reads kv head i // (n_heads / n_kv_heads). gcore:
    test_llama.py::test_tiny_hf_matches_reference[llama3_gqa-*]."""
    TM.write_model(str(tmp_path), seed=3, dim=32, hidden_dim=48, n_layers=2, n_heads=8, n_kv_heads=2, vocab=40)
    w, cfg = R.load_hf(str(tmp_path))
    m = copy.deepcopy(w)
    g = cfg.n_heads // cfg.n_kv_heads
    for L in m["layers"]:
        for k in ("wk", "wv"):
            L[k] = np.repeat(L[k].reshape(cfg.n_kv_heads, cfg.head_dim, -1), g, axis=0).reshape(-1, cfg.dim)
    mha = dataclasses.replace(cfg, n_kv_heads=cfg.n_heads)
    toks = [1, 5, 9, 33, 2, 17]
    np.testing.assert_allclose(R.forward(m, mha, toks), R.forward(w, cfg, toks), rtol=1e-12, atol=1e-12)


def test_head_dim_not_hidden_over_heads(tmp_path):
    """gcore: test_llama.py::test_tiny_hf_matches_reference[head_dim-*]."""
    TM.write_model(str(tmp_path), seed=4, dim=32, hidden_dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                   head_dim=12, vocab=50, rope_scaling="llama3")
    w, cfg = R.load_hf(str(tmp_path))
    assert cfg.head_dim == 12 and w["layers"][0]["wq"].shape == (48, 32) and w["layers"][0]["wo"].shape == (32, 48)
    toks = list(range(1, 40))
    full = R.forward(w, cfg, toks)
    dec = R.Decoder(w, cfg)
    np.testing.assert_allclose(np.stack([dec.step(t) for t in toks]), full, rtol=1e-9, atol=1e-9)
    assert np.all(np.isfinite(full))


def llama3_scalar(inv, factor, lo, hi, old):
    """transformers' _compute_llama3_parameters, one frequency at a time."""
    out = []
    for f in inv:
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
            out.append(f)
        elif wavelen > old / lo:
            out.append(f / factor)
        else:
            s = (old / wavelen - lo) / (hi - lo)
            out.append((1 - s) * f / factor + s * f)
    return np.array(out)


def test_llama3_inv_freq():
    """The reference's llama3 scaling (rope_inv_freq) against transformers'
    formula. gcore's own: tests/c/test_models.c rope_inv_freq
    (gc_llama_inv_freq, Llama 3.1 8B's numbers), and end to end
    test_llama.py::test_tiny_hf_matches_reference[llama3_rope_scaling-*] (the
    scaling moves the logits by over 1e-2 there) and
    test_gguf.py::test_gguf_llama3_rope_scaling."""
    rs = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    cfg = R.Config(dim=64, hidden_dim=8, n_layers=1, n_heads=4, n_kv_heads=4, head_dim=16, vocab_size=8,
                   max_seq=256, rope_scaling=rs)
    base = R.rope_inv_freq(dataclasses.replace(cfg, rope_scaling=None))
    got = R.rope_inv_freq(cfg)
    np.testing.assert_allclose(got, llama3_scalar(base, 8.0, 1.0, 4.0, 64.0), rtol=1e-15)
    wavelen = 2 * math.pi / base
    assert got[0] == base[0]                                   # high frequency: kept
    assert got[-1] == base[-1] / 8                             # low frequency: divided
    mid = (wavelen >= 16) & (wavelen <= 64)
    assert mid.any() and np.all((got[mid] < base[mid]) & (got[mid] > base[mid] / 8))
    # Llama 3.1 8B's numbers: head_dim 128, theta 5e5, factor 8, 1, 4, 8192
    c31 = dataclasses.replace(cfg, head_dim=128, rope_theta=500000.0,
                              rope_scaling=dict(rs, original_max_position_embeddings=8192))
    b31 = R.rope_inv_freq(dataclasses.replace(c31, rope_scaling=None))
    np.testing.assert_allclose(R.rope_inv_freq(c31), llama3_scalar(b31, 8.0, 1.0, 4.0, 8192.0), rtol=1e-15)
    # factor 1 changes nothing
    one = dataclasses.replace(cfg, rope_scaling=dict(rs, factor=1.0))
    np.testing.assert_allclose(R.rope_inv_freq(one), base, rtol=1e-15)


def test_rope_rotation_properties():
    """Both layouts rotate pairs: norms kept, position 0 is the identity,
    and q.k depends only on the distance between positions. gcore: the rope_kv
    cases of test_ops.py (the RoPE op against cases.rope_ref)."""
    rng = np.random.default_rng(0)
    for layout in ("halves", "pairs"):
        cfg = R.Config(dim=16, hidden_dim=8, n_layers=1, n_heads=2, n_kv_heads=2, head_dim=8, vocab_size=8,
                       max_seq=64, rope_layout=layout)
        inv = R.rope_inv_freq(cfg)
        x = rng.standard_normal((1, 2, 8))
        y = rng.standard_normal((1, 2, 8))

        def rot(v, p):
            a = np.array([[p]]) * inv[None, :]
            return R.rope(v, np.cos(a), np.sin(a), layout)

        np.testing.assert_allclose(rot(x, 0), x)
        np.testing.assert_allclose(np.linalg.norm(rot(x, 7)), np.linalg.norm(x))
        d1 = np.sum(rot(x, 10) * rot(y, 4))
        d2 = np.sum(rot(x, 26) * rot(y, 20))
        assert abs(d1 - d2) < 1e-12


# -------------------------------------------------------------- tinymodel

def test_bf16_round_to_nearest_even():
    """tinymodel's bf16 writer. gcore: tests/c/test_base.c test_half
    (gc_f32_to_bf16, ties to even), test_gguf_quant.py BF16 rows."""
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -7)          # bf16 spacing at 1.0
    vals = np.array([1.0, 1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2 ** -20, -2.5, 3.0e38, 0.0], np.float32)
    bits = TM.bf16_bits(vals)
    assert bits.tolist() == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x7F62, 0x0000]
    assert TM.bf16_bits(np.array([np.nan], np.float32))[0] == 0x7FC0
    assert TM.bf16_to_f32(np.array([0x3F80], np.uint16))[0] == one


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("tied,shards,head_dim,scaling", [
    (False, 1, None, None), (True, 1, None, "llama3"), (False, 3, 12, None), (True, 2, 12, "llama3")])
def test_tinymodel_roundtrip(tmp_path, dtype, tied, shards, head_dim, scaling):
    """What tinymodel writes, the reference reads back. gcore's reader of the
    same files: tests/c/test_models.c st_valid, st_sharded, weights_hf;
    test_llama.py::test_tiny_hf_matches_reference (each dtype) and
    test_sharded_equals_unsharded."""
    cfg_d, stored = TM.write_model(str(tmp_path), seed=7, dtype=dtype, shards=shards, dim=48, hidden_dim=80,
                                   n_layers=2, n_heads=4, n_kv_heads=2, head_dim=head_dim, vocab=64, tied=tied,
                                   rope_scaling=scaling)
    w, cfg = R.load_hf(str(tmp_path))
    assert cfg.tied == tied and cfg.head_dim == (head_dim or 12) and cfg.n_kv_heads == 2
    assert (cfg.rope_scaling is not None) == (scaling is not None)
    assert os.path.exists(tmp_path / ("model.safetensors.index.json" if shards > 1 else "model.safetensors"))
    np.testing.assert_array_equal(w["tok_embeddings"], stored["model.embed_tokens.weight"])
    np.testing.assert_array_equal(w["layers"][1]["w3"], stored["model.layers.1.mlp.up_proj.weight"])
    np.testing.assert_array_equal(w["norm"], stored["model.norm.weight"])
    if tied:
        assert w["classifier"] is w["tok_embeddings"] and "lm_head.weight" not in stored
    else:
        np.testing.assert_array_equal(w["classifier"], stored["lm_head.weight"])
    # the stored values are the fp32 weights rounded to dtype
    raw = TM.random_weights(cfg_d, seed=7)["model.layers.0.self_attn.q_proj.weight"].astype(np.float64)
    err = np.max(np.abs(w["layers"][0]["wq"] - raw) / np.maximum(np.abs(raw), 1e-3))
    assert err <= {"f32": 0.0, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}[dtype] * 1.01
    logits = R.forward(w, cfg, [1, 2, 3, 60, 5])
    assert logits.shape == (5, 64) and np.all(np.isfinite(logits))


def test_safetensors_layout_by_hand(tmp_path):
    """The writer's bytes follow the format: u64 header length, JSON header
    padded with spaces to 8 bytes, __metadata__, contiguous data. gcore's
    reader: tests/c/test_models.c st_valid."""
    p = str(tmp_path / "x.safetensors")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    raw, _ = TM.encode(a, "F16")
    TM.write_safetensors(p, [("a", "F16", a.shape, raw), ("b", "F32", (1,), np.float32(2).tobytes())])
    b = open(p, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    assert (8 + n) % 8 == 0 and b[8 + n - 1:8 + n] in (b" ", b"}")
    h = json.loads(b[8:8 + n])
    assert h["__metadata__"] == {"format": "pt"}
    assert h["a"] == {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}
    assert h["b"]["data_offsets"] == [12, 16] and len(b) == 8 + n + 16
    got = R.read_safetensors(p)
    np.testing.assert_array_equal(got["a"][1], a)
    assert got["b"][1].tolist() == [2.0]


BROKEN = {
    "truncated": lambda d: TM.truncate(os.path.join(d, "model.safetensors"), 5),
    "header_past_eof": lambda d: TM.header_length_past_eof(os.path.join(d, "model.safetensors")),
    "lying_offsets": lambda d: TM.lie_offsets(d, "model.layers.0.mlp.gate_proj.weight", -4),
    "missing_tensor": lambda d: TM.remove_tensor(d, "model.layers.1.self_attn.v_proj.weight"),
    "wrong_shape": lambda d: TM.wrong_shape(d, "model.layers.0.mlp.up_proj.weight"),
    "wrong_dtype": lambda d: TM.wrong_dtype(d, "model.norm.weight", "I32"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_variants_are_refused(tmp_path, kind):
    """gcore: test_llama_errors.py (each kind) and tests/c/test_models.c
    st_broken, weights_hf_broken."""
    d = str(tmp_path)
    TM.write_model(d, seed=1, dim=32, hidden_dim=48, n_layers=2, n_heads=4, n_kv_heads=2, vocab=40)
    R.load_hf(d)
    BROKEN[kind](d)
    with pytest.raises((ValueError, KeyError, json.JSONDecodeError, UnicodeDecodeError)):
        R.load_hf(d)


def test_missing_shard_is_refused(tmp_path):
    """gcore: test_llama_errors.py::test_missing_shard."""
    d = str(tmp_path)
    TM.write_model(d, seed=1, shards=2, dim=32, hidden_dim=48, n_layers=1, n_heads=4, n_kv_heads=2, vocab=40)
    R.load_hf(d)
    gone = TM.remove_shard(d, 1)
    assert not os.path.exists(gone)
    with pytest.raises(FileNotFoundError):
        R.load_hf(d)


def test_tinymodel_cli(tmp_path):
    """The writer's command line; gcore reads what it writes in
    tests/c/test_models.c config_hf (llama3 rope_scaling) and test_llama.py."""
    TM.main([str(tmp_path / "m"), "--dim", "32", "--hidden-dim", "40", "--n-layers", "1", "--n-heads", "4",
             "--n-kv-heads", "1", "--vocab", "30", "--dtype", "bf16", "--tied", "--llama3-rope"])
    w, cfg = R.load_hf(str(tmp_path / "m"))
    assert cfg.n_kv_heads == 1 and cfg.tied and cfg.rope_scaling["rope_type"] == "llama3"
