"""llama_ref.py — an independent fp64 numpy reference of the Llama forward
pass, written from the math (not from gcore's code), used to check gcore's
logits and token ids.

It reads llama2.c checkpoints, Hugging Face directories (config.json +
safetensors, as written by tinymodel.py) and GGUF files (tinygguf.py's
reader, ggufq.py's dequantization) into one weights dict:

    {"tok_embeddings": [vocab, dim],
     "layers": [{"attn_norm": [dim], "wq": [n_heads*head_dim, dim],
                 "wk": [n_kv_heads*head_dim, dim], "wv": [n_kv_heads*head_dim, dim],
                 "wo": [dim, n_heads*head_dim], "ffn_norm": [dim],
                 "w1": [hidden_dim, dim], "w2": [dim, hidden_dim],
                 "w3": [hidden_dim, dim],
                 and, for Qwen2 (q/k/v biases), "bq": [n_heads*head_dim],
                 "bk", "bv": [n_kv_heads*head_dim]; for Qwen3 (each q and k
                 head RMS-normalised before RoPE) "q_norm", "k_norm": [head_dim]}, ...],
     "norm": [dim], "classifier": [vocab, dim]}

all float64, matrices used as y = W x. Two independent paths compute the
same function: forward() (whole causal prefill, real-valued rotations,
matrix attention) and Decoder.step() (one token at a time with a KV cache,
rotations as complex products); tests compare them.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np


# --------------------------------------------------------------- config

@dataclasses.dataclass
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    max_seq: int
    eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_layout: str = "halves"          # "halves" (HF) or "pairs" (llama2.c)
    rope_scaling: Optional[dict] = None  # None, llama3's {"factor", "low_freq_factor", "high_freq_factor",
                                         #  "original_max_position_embeddings"}, or {"rope_type": "linear", "factor"}
    tied: bool = False
    rope_factors: Optional[np.ndarray] = None  # GGUF rope_freqs.weight: inv_freq[i] / rope_factors[i]
    bos_id: int = 1
    eos_ids: Tuple[int, ...] = (2,)

    def check(self) -> None:
        assert self.n_heads % self.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads"
        assert self.head_dim % 2 == 0, "head_dim must be even"
        assert self.rope_layout in ("halves", "pairs")


# -------------------------------------------------------------- loaders

def load_llama2c(path: str) -> Tuple[dict, Config]:
    """Legacy llama2.c checkpoint: 7 int32 then fp32 arrays (README order)."""
    raw = open(path, "rb").read()
    if len(raw) < 28:
        raise ValueError(f"{path}: shorter than the 28-byte header")
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack("<7i", raw[:28])
    tied = vocab > 0
    vocab = abs(vocab)
    hd = dim // n_heads
    cfg = Config(dim=dim, hidden_dim=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv,
                 head_dim=hd, vocab_size=vocab, max_seq=seq, eps=1e-5, rope_theta=10000.0,
                 rope_layout="pairs", tied=tied, bos_id=1, eos_ids=(2,))
    cfg.check()
    f = np.frombuffer(raw, dtype="<f4", offset=28).astype(np.float64)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        if pos + n > f.size:
            raise ValueError(f"{path}: truncated")
        a = f[pos:pos + n].reshape(shape)
        pos += n
        return a

    L, D, H, Q, KV = n_layers, dim, hidden, n_heads * hd, n_kv * hd
    emb = take(vocab, D)
    rms_att = take(L, D)
    wq, wk, wv, wo = take(L, Q, D), take(L, KV, D), take(L, KV, D), take(L, D, Q)
    rms_ffn = take(L, D)
    w1, w2, w3 = take(L, H, D), take(L, D, H), take(L, H, D)
    rms_final = take(D)
    take(seq * hd // 2)  # freq_cis_real (unused)
    take(seq * hd // 2)  # freq_cis_imag (unused)
    wcls = emb if tied else take(vocab, D)
    if pos != f.size or (len(raw) - 28) % 4:
        raise ValueError(f"{path}: {len(raw)} bytes, header implies {28 + 4 * pos}")
    layers = [dict(attn_norm=rms_att[i], wq=wq[i], wk=wk[i], wv=wv[i], wo=wo[i], ffn_norm=rms_ffn[i],
                   w1=w1[i], w2=w2[i], w3=w3[i]) for i in range(L)]
    return dict(tok_embeddings=emb, layers=layers, norm=rms_final, classifier=wcls), cfg


_ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2)}


def to_float64(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Exact conversion of stored F32/F16/BF16 values to fp64."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def read_safetensors(path: str) -> Dict[str, Tuple[str, np.ndarray]]:
    """name -> (dtype, fp64 array) for every tensor; checks offsets and sizes."""
    raw = open(path, "rb").read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise ValueError(f"{path}: header length past the end")
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not an object")
    data = memoryview(raw)[8 + hlen:]
    out = {}
    for name, ent in header.items():
        if name == "__metadata__":
            continue
        dt = ent["dtype"]
        if dt not in _ST_DTYPES:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        npdt, size = _ST_DTYPES[dt]
        shape = [int(x) for x in ent["shape"]]
        b, e = (int(x) for x in ent["data_offsets"])
        n = int(np.prod(shape)) if shape else 1
        if not (0 <= b <= e <= len(data)) or e - b != n * size:
            raise ValueError(f"{path}: {name}: bad data_offsets [{b}, {e}] for {dt} {shape}")
        arr = np.frombuffer(data[b:e], dtype=npdt).reshape(shape)
        out[name] = (dt, to_float64(arr, dt))
    return out


def read_hf_tensors(d: str) -> Dict[str, Tuple[str, np.ndarray]]:
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        wm = json.load(open(idx))["weight_map"]
        out = {}
        for shard in sorted(set(wm.values())):
            out.update(read_safetensors(os.path.join(d, shard)))
        missing = [k for k in wm if k not in out]
        if missing:
            raise ValueError(f"{d}: index names tensors absent from their shards: {missing[:3]}")
        return out
    return read_safetensors(os.path.join(d, "model.safetensors"))


def config_from_hf(c: dict) -> Config:
    if c.get("model_type") not in ("llama", "qwen2", "qwen3"):
        raise ValueError(f"model_type {c.get('model_type')!r} is not llama, qwen2 or qwen3")
    n_heads = c["num_attention_heads"]
    hd = c.get("head_dim") or c["hidden_size"] // n_heads
    rs = c.get("rope_scaling")
    if rs is not None:
        kind = rs.get("rope_type", rs.get("type"))
        if kind == "default":
            rs = None
        elif kind not in ("llama3", "linear"):
            raise ValueError(f"rope_scaling {kind!r} is not supported by the reference")
    eos = c.get("eos_token_id", 2)
    eos = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
    cfg = Config(dim=c["hidden_size"], hidden_dim=c["intermediate_size"], n_layers=c["num_hidden_layers"],
                 n_heads=n_heads, n_kv_heads=c.get("num_key_value_heads") or n_heads, head_dim=hd,
                 vocab_size=c["vocab_size"], max_seq=c.get("max_position_embeddings", 2048),
                 eps=c.get("rms_norm_eps", 1e-6), rope_theta=c.get("rope_theta", 10000.0),
                 rope_layout="halves", rope_scaling=rs, tied=bool(c.get("tie_word_embeddings", False)),
                 bos_id=c.get("bos_token_id", 1), eos_ids=eos)
    cfg.check()
    return cfg


def load_hf(d: str) -> Tuple[dict, Config]:
    """A Hugging Face Llama directory (config.json + safetensors)."""
    hf = json.load(open(os.path.join(d, "config.json")))
    cfg, kind = config_from_hf(hf), hf.get("model_type")
    t = read_hf_tensors(d)
    D, H, Q, KV = cfg.dim, cfg.hidden_dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim

    def get(name, *shape):
        if name not in t:
            raise ValueError(f"{d}: missing tensor {name}")
        a = t[name][1]
        if tuple(a.shape) != shape:
            raise ValueError(f"{name}: shape {list(a.shape)} but the config implies {list(shape)}")
        return a

    layers = []
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        layers.append(dict(
            attn_norm=get(p + "input_layernorm.weight", D),
            wq=get(p + "self_attn.q_proj.weight", Q, D), wk=get(p + "self_attn.k_proj.weight", KV, D),
            wv=get(p + "self_attn.v_proj.weight", KV, D), wo=get(p + "self_attn.o_proj.weight", D, Q),
            ffn_norm=get(p + "post_attention_layernorm.weight", D),
            w1=get(p + "mlp.gate_proj.weight", H, D), w2=get(p + "mlp.down_proj.weight", D, H),
            w3=get(p + "mlp.up_proj.weight", H, D)))
        if kind == "qwen2":  # q_proj, k_proj and v_proj add a bias
            layers[-1].update(bq=get(p + "self_attn.q_proj.bias", Q), bk=get(p + "self_attn.k_proj.bias", KV),
                              bv=get(p + "self_attn.v_proj.bias", KV))
        if kind == "qwen3":  # each query and key head normalised
            layers[-1].update(q_norm=get(p + "self_attn.q_norm.weight", cfg.head_dim),
                              k_norm=get(p + "self_attn.k_norm.weight", cfg.head_dim))
    emb = get("model.embed_tokens.weight", cfg.vocab_size, D)
    cls = emb if cfg.tied else get("lm_head.weight", cfg.vocab_size, D)
    return dict(tok_embeddings=emb, layers=layers, norm=get("model.norm.weight", D), classifier=cls), cfg


def load_gguf(path: str) -> Tuple[dict, Config]:
    """A GGUF file of architecture llama, every tensor dequantized to fp64 as
    stored (Q and K rows in llama.cpp's adjacent-pairs order, so the RoPE
    layout is "pairs"); llama3 scaling as rope_freqs.weight factors. Or
    of architecture qwen2 or qwen3: keys under its name, Q and K rows as
    Hugging Face has them (NEOX rotation: "halves"); qwen2's q/k/v biases,
    qwen3's q/k norms."""
    import ggufq
    import tinygguf
    kv, ts = tinygguf.read_gguf(path)
    arch = kv.get("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3"):
        raise ValueError(f"{path}: architecture {arch!r}")
    p = arch + "."
    dim, nh = kv[p + "embedding_length"], kv[p + "attention.head_count"]
    nkv = kv.get(p + "attention.head_count_kv", nh)
    hd = kv.get(p + "attention.key_length", dim // nh)

    def get(name, *shape):
        """[rows, cols] (GGUF dims are innermost first)."""
        if name not in ts:
            raise ValueError(f"{path}: missing tensor {name}")
        tn, dims, raw = ts[name]
        if list(reversed(dims)) != list(shape):
            raise ValueError(f"{name}: dims {dims}, expected {list(reversed(shape))}")
        v = ggufq.dequantize(tn, raw, int(np.prod(dims)))
        if tn in ggufq.FOREIGN_TYPES:  # gcore has no kernels for these: it makes them F16 at load
            v = v.astype(np.float16)
        return v.astype(np.float64).reshape(shape)

    vocab = ts["token_embd.weight"][1][1]
    factors = get("rope_freqs.weight", hd // 2) if "rope_freqs.weight" in ts else None
    # llama.cpp's linear scaling: a type of linear, or a factor with no type (0 and 1: none)
    factor = float(kv.get(p + "rope.scaling.factor", kv.get(p + "rope.scale_linear", 1.0)))
    kind = kv.get(p + "rope.scaling.type", "linear" if factor not in (0.0, 1.0) else "none")
    linear = {"rope_type": "linear", "factor": factor} if kind == "linear" and factor not in (0.0, 1.0) else None
    tied = "output.weight" not in ts
    eos = kv.get("tokenizer.ggml.eos_token_id", 2)
    cfg = Config(dim=dim, hidden_dim=kv[p + "feed_forward_length"], n_layers=kv[p + "block_count"], n_heads=nh,
                 n_kv_heads=nkv, head_dim=hd, vocab_size=vocab, max_seq=kv[p + "context_length"],
                 eps=float(kv[p + "attention.layer_norm_rms_epsilon"]),
                 rope_theta=float(kv.get(p + "rope.freq_base", 10000.0)),
                 rope_layout="pairs" if arch == "llama" else "halves",
                 rope_factors=factors, rope_scaling=linear, tied=tied, bos_id=kv.get("tokenizer.ggml.bos_token_id", 1),
                 eos_ids=(eos,))
    cfg.check()
    D, H, Qd, KV = dim, cfg.hidden_dim, nh * hd, nkv * hd
    layers = []
    for i in range(cfg.n_layers):
        b = f"blk.{i}."
        layers.append(dict(
            attn_norm=get(b + "attn_norm.weight", D), wq=get(b + "attn_q.weight", Qd, D),
            wk=get(b + "attn_k.weight", KV, D), wv=get(b + "attn_v.weight", KV, D),
            wo=get(b + "attn_output.weight", D, Qd), ffn_norm=get(b + "ffn_norm.weight", D),
            w1=get(b + "ffn_gate.weight", H, D), w2=get(b + "ffn_down.weight", D, H),
            w3=get(b + "ffn_up.weight", H, D)))
        if arch == "qwen2":
            layers[-1].update(bq=get(b + "attn_q.bias", Qd), bk=get(b + "attn_k.bias", KV),
                              bv=get(b + "attn_v.bias", KV))
        if arch == "qwen3":
            layers[-1].update(q_norm=get(b + "attn_q_norm.weight", hd), k_norm=get(b + "attn_k_norm.weight", hd))
    emb = get("token_embd.weight", vocab, D)
    cls = emb if tied else get("output.weight", vocab, D)
    return dict(tok_embeddings=emb, layers=layers, norm=get("output_norm.weight", D), classifier=cls), cfg


def load(path: str) -> Tuple[dict, Config]:
    """A directory is Hugging Face, a file starting with "GGUF" is GGUF, any
    other file llama2.c."""
    if os.path.isdir(path):
        return load_hf(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    return load_gguf(path) if magic == b"GGUF" else load_llama2c(path)


# ----------------------------------------------------------------- math

def rope_inv_freq(cfg: Config) -> np.ndarray:
    """inv_freq[i] = theta^(-2i/head_dim), i < head_dim/2, then the Llama 3.1
    rescaling as transformers' _compute_llama3_parameters defines it:
    wavelengths shorter than original/high_freq_factor keep their frequency,
    longer than original/low_freq_factor are divided by factor, and those in
    between blend the two with a factor linear in original/wavelength."""
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    if cfg.rope_factors is not None:   # llama.cpp's freq_factors (GGUF rope_freqs.weight)
        return inv / np.asarray(cfg.rope_factors, dtype=np.float64)
    rs = cfg.rope_scaling
    if not rs:
        return inv
    factor = float(rs["factor"])
    if rs.get("rope_type", rs.get("type")) == "linear":  # positions divided by the factor
        return inv / factor
    lo, hi = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    old = float(rs["original_max_position_embeddings"])
    low_freq_wavelen, high_freq_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low_freq_wavelen, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(medium, smoothed, scaled)


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def head_norm(x: np.ndarray, w: Optional[np.ndarray], eps: float) -> np.ndarray:
    """Qwen3's q_norm / k_norm: every head (the last axis) RMS-normalised and
    scaled by w; x itself where the model has none (w None)."""
    return x if w is None else rmsnorm(x, w, eps)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str) -> np.ndarray:
    """Rotate x [T, heads, head_dim] by angles whose cos/sin are [T, head_dim/2]."""
    c, s = cos[:, None, :], sin[:, None, :]
    h = x.shape[-1] // 2
    if layout == "halves":
        a, b = x[..., :h], x[..., h:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def forward(w: dict, cfg: Config, tokens: Sequence[int]) -> np.ndarray:
    """Causal prefill of tokens (positions 0..T-1): logits [T, vocab]."""
    T = len(tokens)
    nh, nkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    x = w["tok_embeddings"][np.asarray(tokens, dtype=np.int64)]            # [T, dim]
    ang = np.arange(T, dtype=np.float64)[:, None] * rope_inv_freq(cfg)[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for L in w["layers"]:
        h = rmsnorm(x, L["attn_norm"], cfg.eps)
        q = head_norm((h @ L["wq"].T + L.get("bq", 0.0)).reshape(T, nh, hd), L.get("q_norm"), cfg.eps)
        k = head_norm((h @ L["wk"].T + L.get("bk", 0.0)).reshape(T, nkv, hd), L.get("k_norm"), cfg.eps)
        q, k = rope(q, cos, sin, cfg.rope_layout), rope(k, cos, sin, cfg.rope_layout)
        v = (h @ L["wv"].T + L.get("bv", 0.0)).reshape(T, nkv, hd)
        k = np.repeat(k, nh // nkv, axis=1)                                   # query head i reads kv head i // group
        v = np.repeat(v, nh // nkv, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + mask
        o = np.einsum("hts,shd->thd", softmax(att), v).reshape(T, nh * hd)
        x = x + o @ L["wo"].T
        h = rmsnorm(x, L["ffn_norm"], cfg.eps)
        x = x + (silu(h @ L["w1"].T) * (h @ L["w3"].T)) @ L["w2"].T
    return rmsnorm(x, w["norm"], cfg.eps) @ w["classifier"].T


class Decoder:
    """One token at a time with a KV cache: key_cache/value_cache are
    (layer, max_seq, n_kv_heads, head_dim). Rotations are complex products,
    attention a loop over heads: a second path to compare forward() with."""

    def __init__(self, w: dict, cfg: Config, max_seq: Optional[int] = None):
        self.w, self.cfg = w, cfg
        n = max_seq or cfg.max_seq
        shape = (cfg.n_layers, n, cfg.n_kv_heads, cfg.head_dim)
        self.key_cache, self.value_cache = np.zeros(shape), np.zeros(shape)
        self.inv_freq = rope_inv_freq(cfg)
        self.pos = 0

    def _rotate(self, x: np.ndarray, pos: int) -> np.ndarray:
        """x [heads, head_dim] rotated for position pos."""
        h = x.shape[-1] // 2
        turn = np.exp(1j * pos * self.inv_freq)
        if self.cfg.rope_layout == "halves":
            z = (x[:, :h] + 1j * x[:, h:]) * turn
            return np.concatenate([z.real, z.imag], axis=-1)
        z = (x[:, 0::2] + 1j * x[:, 1::2]) * turn
        return np.stack([z.real, z.imag], axis=-1).reshape(x.shape)

    def step(self, token: int) -> np.ndarray:
        """Feed token at the next position; logits [vocab]."""
        cfg, w, pos = self.cfg, self.w, self.pos
        if pos >= self.key_cache.shape[1]:
            raise ValueError("KV cache full")
        nh, nkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        group = nh // nkv
        x = w["tok_embeddings"][token].copy()
        for li, L in enumerate(w["layers"]):
            h = rmsnorm(x, L["attn_norm"], cfg.eps)
            q = self._rotate(head_norm((L["wq"] @ h + L.get("bq", 0.0)).reshape(nh, hd), L.get("q_norm"), cfg.eps),
                             pos)
            self.key_cache[li, pos] = self._rotate(
                head_norm((L["wk"] @ h + L.get("bk", 0.0)).reshape(nkv, hd), L.get("k_norm"), cfg.eps), pos)
            self.value_cache[li, pos] = (L["wv"] @ h + L.get("bv", 0.0)).reshape(nkv, hd)
            o = np.empty((nh, hd))
            for head in range(nh):
                keys = self.key_cache[li, :pos + 1, head // group]          # [pos+1, hd]
                scores = keys @ q[head] / math.sqrt(hd)
                p = np.exp(scores - scores.max())
                o[head] = (p / p.sum()) @ self.value_cache[li, :pos + 1, head // group]
            x = x + L["wo"] @ o.reshape(-1)
            h = rmsnorm(x, L["ffn_norm"], cfg.eps)
            x = x + L["w2"] @ (silu(L["w1"] @ h) * (L["w3"] @ h))
        self.pos += 1
        return w["classifier"] @ rmsnorm(x, w["norm"], cfg.eps)


def greedy(w: dict, cfg: Config, prompt: Sequence[int], n: int,
           stop_ids: Sequence[int] = ()) -> List[int]:
    """Feed prompt, then generate up to n tokens by argmax (ties to the lowest
    id, as np.argmax does); stops after a token in stop_ids. Returns the
    generated ids only."""
    if not prompt:
        raise ValueError("greedy needs a non-empty prompt (e.g. [BOS])")
    dec = Decoder(w, cfg, max_seq=len(prompt) + n)
    for t in prompt:
        logits = dec.step(int(t))
    out: List[int] = []
    for i in range(n):
        nxt = int(np.argmax(logits))
        out.append(nxt)
        if nxt in stop_ids or i == n - 1:
            break
        logits = dec.step(nxt)
    return out
