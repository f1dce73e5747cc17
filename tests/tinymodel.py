"""tinymodel.py — writes random tiny Llama models in Hugging Face layout
(config.json + model.safetensors, or shards + model.safetensors.index.json)
with numpy only, and deliberately broken variants for tests.

The safetensors format is written by hand: 8-byte little-endian header
length, a JSON header {name: {dtype, shape, data_offsets}} padded with spaces
to 8 bytes, then the data. F16 is numpy's round-to-nearest-even; BF16 keeps
the upper halves of the fp32 bits, rounded to nearest even.

    python3 tests/tinymodel.py OUTDIR [--dim 64 --n-layers 2 --dtype bf16 --tied ...]
"""
from __future__ import annotations

import argparse
import json
import os
import struct
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


# ---------------------------------------------------------- conversions

def bf16_bits(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bit patterns (uint16), round to nearest, ties to even."""
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    out = rounded.astype(np.uint16)
    out[nan] = 0x7FC0
    return out


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode(x: np.ndarray, dtype: str) -> Tuple[bytes, np.ndarray]:
    """Stored bytes of x in dtype ("F32", "F16", "BF16") and the values they
    hold, as fp64 (what an exact reader must get back)."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "F32":
        return x.astype("<f4").tobytes(), x.astype(np.float64)
    if dtype == "F16":
        h = x.astype("<f2")
        return h.tobytes(), h.astype(np.float64)
    if dtype == "BF16":
        bits = bf16_bits(x)
        return bits.astype("<u2").tobytes(), bf16_to_f32(bits).astype(np.float64)
    raise ValueError(f"unknown dtype {dtype}")


# ------------------------------------------------------------- writing

def write_safetensors(path: str, tensors: Sequence[Tuple[str, str, Sequence[int], bytes]],
                      metadata: Optional[dict] = None, offsets: Optional[Dict[str, Tuple[int, int]]] = None,
                      align: int = 8) -> None:
    """tensors: (name, dtype string, shape, raw bytes), stored in this order.
    offsets overrides the data_offsets written for some names (to lie)."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    pos = 0
    for name, dt, shape, raw in tensors:
        b, e = pos, pos + len(raw)
        if offsets and name in offsets:
            b, e = offsets[name]
        header[name] = {"dtype": dt, "shape": [int(s) for s in shape], "data_offsets": [b, e]}
        pos += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    if align > 1:
        h += b" " * (-(8 + len(h)) % align)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, raw in tensors:
            f.write(raw)


def read_safetensors_raw(path: str) -> Tuple[dict, bytes]:
    """(header dict, data region bytes) with no checks: for breaking files."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def tensor_shapes(cfg: dict) -> List[Tuple[str, Tuple[int, ...]]]:
    """HF tensor names and shapes of a Llama config, in file order."""
    D, H, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or D // cfg["num_attention_heads"]
    Q, KV = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (V, D))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (D,)), (p + "self_attn.q_proj.weight", (Q, D)),
                (p + "self_attn.k_proj.weight", (KV, D)), (p + "self_attn.v_proj.weight", (KV, D)),
                (p + "self_attn.o_proj.weight", (D, Q)), (p + "post_attention_layernorm.weight", (D,)),
                (p + "mlp.gate_proj.weight", (H, D)), (p + "mlp.down_proj.weight", (D, H)),
                (p + "mlp.up_proj.weight", (H, D))]
        if cfg["model_type"] == "qwen2":  # q/k/v biases, after the weights as Qwen2's checkpoints list them
            out[-5:-5] = [(p + "self_attn.q_proj.bias", (Q,)), (p + "self_attn.k_proj.bias", (KV,)),
                          (p + "self_attn.v_proj.bias", (KV,))]
        if cfg["model_type"] == "qwen3":  # each query and key head's norm
            out[-5:-5] = [(p + "self_attn.q_norm.weight", (hd,)), (p + "self_attn.k_norm.weight", (hd,))]
    out.append(("model.norm.weight", (D,)))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", (V, D)))
    return out


def make_config(dim: int = 64, hidden_dim: int = 172, n_layers: int = 2, n_heads: int = 8,
                n_kv_heads: int = 4, head_dim: Optional[int] = None, vocab: int = 128, max_seq: int = 256,
                tied: bool = False, rope_scaling=None, rope_theta: float = 10000.0, eps: float = 1e-5,
                dtype: str = "f32", arch: str = "llama") -> dict:
    """A config.json dict. rope_scaling: None, "llama3" (LLAMA3_SCALING) or a dict.
    arch "qwen2": Qwen2's model type (q/k/v biases) with the sliding-window
    keys its checkpoints carry, off; "qwen3": Qwen3's (per-head q/k norms)."""
    if rope_scaling == "llama3":
        rope_scaling = dict(LLAMA3_SCALING)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": dim, "intermediate_size": hidden_dim, "num_hidden_layers": n_layers,
        "num_attention_heads": n_heads, "num_key_value_heads": n_kv_heads, "vocab_size": vocab,
        "max_position_embeddings": max_seq, "rms_norm_eps": eps, "rope_theta": rope_theta,
        "rope_scaling": rope_scaling, "tie_word_embeddings": tied, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype],
    }
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    if arch == "qwen2":
        for k in ("attention_bias", "mlp_bias"):
            del cfg[k]
        cfg.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                   sliding_window=max_seq, max_window_layers=n_layers)
    if arch == "qwen3":
        del cfg["mlp_bias"]
        cfg.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", use_sliding_window=False,
                   sliding_window=None, max_window_layers=n_layers,
                   head_dim=head_dim or dim // n_heads)
    return cfg


def random_weights(cfg: dict, seed: int = 0) -> Dict[str, np.ndarray]:
    """fp32 tensors by HF name: N(0,1) embeddings, 1/sqrt(fan_in) matrices,
    norms near 1, so that logits are neither flat nor saturated."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in tensor_shapes(cfg):
        if name.endswith(".bias"):  # Qwen2's: some large, as trained ones are
            out[name] = (0.5 * rng.standard_normal(shape)).astype(np.float32)
        elif len(shape) == 1:
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif "embed_tokens" in name:
            out[name] = rng.standard_normal(shape).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
    return out


def write_hf(outdir: str, cfg: dict, weights: Dict[str, np.ndarray], dtype: str = "f32",
             shards: int = 1) -> Dict[str, np.ndarray]:
    """Write config.json and the weights (fp32 arrays by HF name) as dtype,
    in `shards` files. Returns the fp64 values actually stored, by name."""
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    st = DTYPES[dtype]
    entries, stored = [], {}
    for name in weights:
        raw, val = encode(weights[name], st)
        entries.append((name, st, weights[name].shape, raw))
        stored[name] = val
    for fn in os.listdir(outdir):
        if fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
            os.remove(os.path.join(outdir, fn))
    if shards <= 1:
        write_safetensors(os.path.join(outdir, "model.safetensors"), entries)
        return stored
    per = -(-len(entries) // shards)
    weight_map = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = entries[s * per:(s + 1) * per]
        write_safetensors(os.path.join(outdir, fn), part)
        weight_map.update({name: fn for name, _, _, _ in part})
    total = sum(len(e[3]) for e in entries)
    with open(os.path.join(outdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return stored


def write_model(outdir: str, seed: int = 0, dtype: str = "f32", shards: int = 1,
                **config_kw) -> Tuple[dict, Dict[str, np.ndarray]]:
    """Random tiny model in outdir. config_kw: see make_config (dim, hidden_dim,
    n_layers, n_heads, n_kv_heads, head_dim, vocab, max_seq, tied,
    rope_scaling, rope_theta, eps). Returns (config dict, stored fp64 values)."""
    cfg = make_config(dtype=dtype, **config_kw)
    return cfg, write_hf(outdir, cfg, random_weights(cfg, seed), dtype=dtype, shards=shards)


# ------------------------------------------------------ broken variants

def _rewrite(path: str, edit) -> None:
    """Load path's header and data, let edit(header, data) -> (header, data)
    change them, and write the file back verbatim (no re-validation)."""
    header, data = read_safetensors_raw(path)
    header, data = edit(header, data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def shard_of(outdir: str, name: str) -> str:
    idx = os.path.join(outdir, "model.safetensors.index.json")
    if os.path.exists(idx):
        return os.path.join(outdir, json.load(open(idx))["weight_map"][name])
    return os.path.join(outdir, "model.safetensors")


def truncate(path: str, drop: int) -> None:
    """Cut the last `drop` bytes of a file."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(max(0, size - drop))


def lie_offsets(outdir: str, name: str, end_delta: int) -> None:
    """Move the end offset of tensor `name` by end_delta bytes."""
    def edit(h, d):
        h[name]["data_offsets"][1] += end_delta
        return h, d
    _rewrite(shard_of(outdir, name), edit)


def header_length_past_eof(path: str) -> None:
    raw = bytearray(open(path, "rb").read())
    raw[:8] = struct.pack("<Q", len(raw) + 16)
    open(path, "wb").write(bytes(raw))


def remove_tensor(outdir: str, name: str) -> None:
    """Drop tensor `name` from the header of its file (the index keeps it)."""
    def edit(h, d):
        del h[name]
        return h, d
    _rewrite(shard_of(outdir, name), edit)


def wrong_shape(outdir: str, name: str) -> None:
    """Reverse the dims of tensor `name` (same byte size, wrong shape)."""
    def edit(h, d):
        h[name]["shape"] = list(reversed(h[name]["shape"]))
        return h, d
    _rewrite(shard_of(outdir, name), edit)


def wrong_dtype(outdir: str, name: str, dtype: str = "I16") -> None:
    """Relabel tensor `name` with another dtype of the same element size
    (I16 for F16/BF16 data, I32 for F32) or any string given."""
    def edit(h, d):
        h[name]["dtype"] = dtype
        return h, d
    _rewrite(shard_of(outdir, name), edit)


def remove_shard(outdir: str, index: int = 1) -> str:
    """Delete the index-th shard file of a sharded model; returns its path."""
    wm = json.load(open(os.path.join(outdir, "model.safetensors.index.json")))["weight_map"]
    path = os.path.join(outdir, sorted(set(wm.values()))[index])
    os.remove(path)
    return path


_NP_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "I8": "i1", "U8": "u1"}


def _decode_values(raw: bytes, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return bf16_to_f32(np.frombuffer(raw, dtype="<u2")).astype(np.float64)
    return np.frombuffer(raw, dtype=_NP_DTYPES[dtype]).astype(np.float64)


def retype(outdir: str, name: str, dtype: str) -> None:
    """Store tensor `name` as another dtype (e.g. F64, I8, I32) with data of
    the right size for it: a well-formed file whose tensor gcore must refuse
    for its dtype. Integer dtypes get the values rounded (and clipped)."""
    path = shard_of(outdir, name)
    header, data = read_safetensors_raw(path)
    meta = header.pop("__metadata__", None)
    tensors = []
    for n, ent in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, e = ent["data_offsets"]
        raw, dt = data[b:e], ent["dtype"]
        if n == name:
            vals = _decode_values(raw, dt)
            npdt = np.dtype(_NP_DTYPES[dtype])
            if npdt.kind in "iu":
                info = np.iinfo(npdt)
                vals = np.clip(np.round(vals * 16), info.min, info.max)
            raw, dt = vals.astype(npdt).tobytes(), dtype
        tensors.append((n, dt, ent["shape"], raw))
    write_safetensors(path, tensors, metadata=meta)


def write_llama2c(path: str, dim: int = 32, hidden_dim: int = 64, n_layers: int = 2, n_heads: int = 4,
                  n_kv_heads: int = 2, vocab: int = 96, seq_len: int = 128, tied: bool = True,
                  seed: int = 0) -> None:
    """A random tiny checkpoint in the legacy llama2.c format (layout in
    shared/data/README.md; a negative vocab_size in the header means an
    untied classifier follows). The legacy freq_cis tables hold the usual
    cos/sin values (readers skip them)."""
    rng = np.random.default_rng(seed)
    hd = dim // n_heads
    L, D, H, Q, KV = n_layers, dim, hidden_dim, n_heads * hd, n_kv_heads * hd

    def mat(*shape):
        return rng.standard_normal(shape) / np.sqrt(shape[-1])

    def norm(*shape):
        return 1.0 + 0.1 * rng.standard_normal(shape)

    inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2) / hd))
    ang = np.arange(seq_len)[:, None] * inv[None, :]
    parts = [rng.standard_normal((vocab, D)), norm(L, D), mat(L, Q, D), mat(L, KV, D), mat(L, KV, D),
             mat(L, D, Q), norm(L, D), mat(L, H, D), mat(L, D, H), mat(L, H, D), norm(D),
             np.cos(ang), np.sin(ang)]
    if not tied:
        parts.append(mat(vocab, D))
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden_dim, n_layers, n_heads, n_kv_heads,
                            vocab if tied else -vocab, seq_len))
        for a in parts:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


# ------------------------------------------------------------------ CLI

# ---------------------------------------------------- a tokenizer of our own

SAMPLE_TEXT = ("Once upon a time, there was a little girl named Lily. She liked to play in the park "
               "with her friends. One day, she saw a big red ball under a tree. She ran to the ball "
               "and picked it up. The sun was warm and the sky was blue, and everyone was happy. ")


def byte_chars():
    """GPT-2's map of the 256 bytes to printable characters (ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def write_tokenizer(outdir: str, vocab: int, n_merges: int = 400) -> Tuple[int, int]:
    """A byte-level BPE tokenizer.json for a model of `vocab` ids: the 256
    bytes, merges learned greedily from SAMPLE_TEXT (at most n_merges), the
    ids left over as reserved special tokens, Llama 3's chat headers and
    <|eot_id|>, and BOS/EOS as the last two ids (tokenizer_config.json and
    the model's config.json name them).
    Returns (bos, eos). Made by the project, so tests and the demo need no
    third-party vocabulary."""
    assert vocab >= 260, "a byte-level vocabulary needs 256 byte ids and the special ones"
    bc = byte_chars()
    tokens = [bc[b] for b in range(256)]
    words = [[bc[b] for b in (" " + w).encode()] for w in SAMPLE_TEXT.split()]
    merges = []
    while len(merges) < n_merges and len(tokens) < vocab - 2:
        pairs = {}
        for w in words:
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + 1
        if not pairs:
            break
        (a, b), n = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if n < 2:
            break
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    bos, eos = vocab - 2, vocab - 1
    added = [{"id": i, "content": f"<|reserved_{i}|>", "special": True, "single_word": False,
              "lstrip": False, "rstrip": False, "normalized": False} for i in range(len(tokens), bos - 3)]
    for i, name in ((bos - 3, "<|start_header_id|>"), (bos - 2, "<|end_header_id|>"), (bos - 1, "<|eot_id|>"),
                    (bos, "<|begin_of_text|>"), (eos, "<|end_of_text|>")):
        added.append({"id": i, "content": name, "special": True, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False})
    tok = {
        "version": "1.0", "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    with open(os.path.join(outdir, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                   "add_bos_token": True}, f)
    path = os.path.join(outdir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["bos_token_id"], cfg["eos_token_id"] = bos, eos
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return bos, eos


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="write a random tiny Llama in Hugging Face layout")
    ap.add_argument("outdir")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden-dim", type=int, default=172)
    ap.add_argument("--n-layers", type=int, default=2)
    ap.add_argument("--n-heads", type=int, default=8)
    ap.add_argument("--n-kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--max-seq", type=int, default=256)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--llama3-rope", action="store_true", help="add llama3 rope_scaling")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", action="store_true",
                    help="also write a byte-level BPE tokenizer.json (vocab >= 260)")
    a = ap.parse_args(argv)
    cfg, _ = write_model(a.outdir, seed=a.seed, dtype=a.dtype, shards=a.shards, dim=a.dim,
                         hidden_dim=a.hidden_dim, n_layers=a.n_layers, n_heads=a.n_heads,
                         n_kv_heads=a.n_kv_heads, head_dim=a.head_dim, vocab=a.vocab, max_seq=a.max_seq,
                         tied=a.tied, rope_scaling="llama3" if a.llama3_rope else None,
                         rope_theta=a.rope_theta)
    if a.tokenizer:
        write_tokenizer(a.outdir, a.vocab)
    print(f"wrote {a.outdir}: {len(tensor_shapes(cfg))} tensors, {a.dtype}, {a.shards} file(s)"
          + (", tokenizer.json" if a.tokenizer else ""))


if __name__ == "__main__":
    main()
