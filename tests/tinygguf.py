"""tinygguf.py — writes and reads GGUF files (llama.cpp's format, versions 2
and 3, little-endian) with numpy only, and writes tiny Llama models in them
from tinymodel's random Hugging Face weights, as llama.cpp's
convert_hf_to_gguf.py lays them out:

  * names token_embd, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output,
    ffn_norm, ffn_gate, ffn_down, ffn_up}, output_norm, output (absent when
    tied); dims innermost first (a matrix [out, in] is written {in, out});
  * attn_q and attn_k rows permuted from Hugging Face's rotate-halves order
    into llama.cpp's adjacent pairs (its `permute`, with n_head_kv for K);
  * llama3 RoPE scaling as the F32 tensor rope_freqs.weight of per-frequency
    factors (computed as convert_hf_to_gguf does, from float32 frequencies);
  * 1-D tensors in F32, matrices in the requested type (ggufq.py), or
    llama.cpp's Q4_K_M mix (Q4_K, with output and some layers' attn_v and
    ffn_down in Q6_K: more_bits);
  * a small SentencePiece-style vocabulary (tokenizer.ggml.*) so that text
    prompts work.

File layout: magic "GGUF", u32 version, u64 tensor count, u64 key/value
count, the key/values, the tensor infos (name, u32 n_dims, u64 dims, u32
type, u64 offset into the data section), padding to general.alignment
(default 32), the data section with each tensor at an aligned offset.
write_gguf returns where each field lies, so that tests can break files.

    python3 tests/tinygguf.py OUT.gguf [--type Q4_K] [--tied] [--llama3-rope] ...
"""
from __future__ import annotations

import argparse
import math
import struct
import sys
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggufq as Q  # noqa: E402
import tinymodel as TM  # noqa: E402

# GGUF metadata value types
VT = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7, "str": 8, "arr": 9,
      "u64": 10, "i64": 11, "f64": 12}
_PACK = {"u8": "<B", "i8": "<b", "u16": "<H", "i16": "<h", "u32": "<I", "i32": "<i", "f32": "<f", "bool": "<?",
         "u64": "<Q", "i64": "<q", "f64": "<d"}
_UNPACK = {v: _PACK[k] for k, v in VT.items() if k in _PACK}


def _str(s) -> bytes:
    b = s.encode() if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _value(typ: str, v) -> bytes:
    if typ == "str":
        return _str(v)
    if typ.startswith("arr:"):
        et = typ[4:]
        out = struct.pack("<IQ", VT[et], len(v))
        if et == "str":
            return out + b"".join(_str(x) for x in v)
        return out + b"".join(struct.pack(_PACK[et], x) for x in v)
    return struct.pack(_PACK[typ], v)


def write_gguf(path: str, kvs: Sequence[Tuple[str, str, object]],
               tensors: Sequence[Tuple[str, int, Sequence[int], bytes]],
               version: int = 3, alignment: Optional[int] = None) -> dict:
    """kvs: (key, type, value) with type "u32", "f32", "str", "bool", ...
    or "arr:ELEM" (e.g. "arr:str", "arr:f32", "arr:i32"). tensors: (name,
    ggml type id, dims innermost first, raw bytes), written in this order.
    alignment: written as general.alignment (u32) when given.
    Returns {"data_start": int, "infos": {name: {"ndim", "dims", "type",
    "offset"}: byte positions of those fields}, "offsets": {name: offset}}."""
    align = alignment or 32
    kvs = list(kvs)
    if alignment is not None:
        kvs.append(("general.alignment", "u32", alignment))
    head = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for k, t, v in kvs:
        head += _str(k) + struct.pack("<I", VT["arr"] if t.startswith("arr:") else VT[t]) + _value(t, v)
    infos, offsets, off = {}, {}, 0
    for name, typ, dims, raw in tensors:
        pos = {}
        head += _str(name)
        pos["ndim"] = len(head)
        head += struct.pack("<I", len(dims))
        pos["dims"] = len(head)
        head += b"".join(struct.pack("<Q", d) for d in dims)
        pos["type"] = len(head)
        head += struct.pack("<I", typ)
        pos["offset"] = len(head)
        head += struct.pack("<Q", off)
        infos[name], offsets[name] = pos, off
        off += len(raw) + (-len(raw) % align)
    head += b"\0" * (-len(head) % align)
    data_start = len(head)
    with open(path, "wb") as f:
        f.write(head)
        for _, _, _, raw in tensors:
            f.write(raw + b"\0" * (-len(raw) % align))
    return {"data_start": data_start, "infos": infos, "offsets": offsets}


def patch(path: str, pos: int, fmt: str, *values) -> None:
    """Overwrite the struct-packed values at byte pos of a file."""
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(struct.pack(fmt, *values))


# ----------------------------------------------------------------- reading

def read_gguf(path: str):
    """(kvs {key: value}, tensors {name: (type name, dims, raw bytes)}) with
    the format's checks an honest reader needs (not gcore's: a reference)."""
    raw = open(path, "rb").read()
    mv = memoryview(raw)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, raw, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def take_str():
        nonlocal pos
        n = take("<Q")
        s = bytes(mv[pos:pos + n])
        pos += n
        return s.decode("utf-8", "replace")

    def take_val(t):
        if t == VT["str"]:
            return take_str()
        if t == VT["arr"]:
            et, n = take("<I"), take("<Q")
            return [take_val(et) for _ in range(n)]
        return take(_UNPACK[t])

    assert raw[:4] == b"GGUF", f"{path}: not GGUF"
    pos = 4
    version, nt, nkv = take("<I"), take("<Q"), take("<Q")
    assert version in (2, 3), f"{path}: version {version}"
    kvs = {}
    for _ in range(nkv):
        k = take_str()
        kvs[k] = take_val(take("<I"))
    align = kvs.get("general.alignment", 32)
    infos = []
    for _ in range(nt):
        name = take_str()
        nd = take("<I")
        dims = [take("<Q") for _ in range(nd)]
        infos.append((name, take("<I"), dims, take("<Q")))
    start = pos + (-pos % align)
    names = {v[0]: k for k, v in Q.ALL_TYPES.items()}
    tensors = {}
    for name, typ, dims, off in infos:
        tn = names[typ]
        n = Q.nbytes(tn, int(np.prod(dims)))
        assert start + off + n <= len(raw), f"{path}: {name} past the end"
        tensors[name] = (tn, dims, raw[start + off:start + off + n])
    return kvs, tensors


# --------------------------------------------------------- tiny llama models

LAYER_NAMES = [("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
               ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
               ("post_attention_layernorm", "ffn_norm"), ("mlp.gate_proj", "ffn_gate"),
               ("mlp.down_proj", "ffn_down"), ("mlp.up_proj", "ffn_up"),
               ("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_norm", "attn_k_norm")]


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: each head's rows from
    [first halves | second halves] to adjacent pairs."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")          # model.layers.N.<a>.<b>.weight (or .bias)
    sub = ".".join(parts[3:-1])
    return f"blk.{parts[2]}.{dict(LAYER_NAMES)[sub]}.{parts[-1]}"


def llama3_rope_factors(cfg: dict) -> np.ndarray:
    """rope_freqs.weight as convert_hf_to_gguf computes it for llama3 scaling."""
    rs = cfg["rope_scaling"]
    base = cfg.get("rope_theta", 10000.0)
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    freqs = freqs.astype(np.float32)
    factor, lo, hi = rs.get("factor", 8.0), rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    lo_wl, hi_wl = old / lo, old / hi
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / float(f)
        if wavelen < hi_wl:
            out.append(1.0)
        elif wavelen > lo_wl:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


MIXED = "Q4_K_M"   # llama.cpp's Q4_K_M mix: Q4_K, with output and some layers' attn_v and ffn_down in Q6_K


def more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers,
    and every third one between, get the larger type in a _M mix."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def tensor_type(gname: str, qtype: str, n_layers: int = 1, cols: int = 256) -> str:
    """The type of GGUF tensor gname (rows of cols elements) in a file of
    qtype (MIXED: as llama.cpp quantizes Q4_K_M: output.weight Q6_K;
    blk.N.attn_v and blk.N.ffn_down Q6_K where more_bits(N), else Q4_K;
    every other matrix Q4_K; and where rows are not whole 256-element
    blocks, its fallbacks: Q5_0 for Q4_K, Q8_0 for Q6_K), so that such a
    file's layers differ in type as downloaded ones do."""
    if gname.endswith("norm.weight") or gname.endswith(".bias"):  # 1-D: F32, as llama.cpp writes them
        return "F32"
    if qtype == MIXED:
        t = "Q4_K"
        parts = gname.split(".")
        if gname == "output.weight":
            t = "Q6_K"
        elif parts[0] == "blk" and parts[2] in ("attn_v", "ffn_down"):
            t = "Q6_K" if more_bits(int(parts[1]), n_layers) else "Q4_K"
        return t if cols % 256 == 0 else {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}[t]
    return qtype


def vocab(n: int) -> Tuple[List[str], List[float], List[int]]:
    """A SentencePiece-style vocabulary of n tokens: <unk> <s> </s>, the 256
    byte tokens <0xXX>, then pieces (single letters, a few merges), scored so
    that longer pieces merge first."""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    toks += [f"<0x{b:02X}>" for b in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    pieces = ["\u2581", "\u2581t", "th", "he", "\u2581th", "\u2581the", "in", "er", "an", "on", "\u2581a", "at",
              "\u2581c", "\u2581ca", "\u2581cat"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
             [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [".", ",", "!", "?"]
    for i, p in enumerate(pieces[:max(0, n - len(toks))]):
        toks.append(p)
        scores.append(-float(i) if len(p) == 1 else -1000.0 + 100.0 * len(p) - i)
        types.append(1)
    return toks, scores, types


def write_llama(path: str, hf_cfg: dict, weights: Dict[str, np.ndarray], qtype: str = "F32",
                version: int = 3, alignment: Optional[int] = None, with_vocab: bool = True,
                extra_kvs: Sequence = (), drop_keys: Sequence[str] = (), extra_tensors: Sequence = (),
                exact_norms: bool = True) -> dict:
    """A tiny Llama GGUF from HF-named fp32 weights and a tinymodel config.
    qtype: a ggufq type name, or MIXED. exact_norms: norms first rounded to
    the matrices' float type (as a model converted from fp16/bf16 weights
    has them), so that gcore's conversion of F32 norms to it is exact.
    extra_kvs: (key, type, value) replacing a key of the same name or added;
    drop_keys: keys left out; extra_tensors: (name, ggml type id, dims, raw)
    added at the end (to break files).
    Returns the write_gguf layout plus "types": {gguf name: type name}."""
    c = hf_cfg
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or c["hidden_size"] // nh
    arch = c["model_type"] if c["model_type"] in ("qwen2", "qwen3") else "llama"  # keys under its name; Q, K as HF's
    a = arch + "."
    kvs = [("general.architecture", "str", arch), ("general.name", "str", "tiny"),
           (a + "context_length", "u32", c["max_position_embeddings"]),
           (a + "embedding_length", "u32", c["hidden_size"]),
           (a + "feed_forward_length", "u32", c["intermediate_size"]),
           (a + "block_count", "u32", c["num_hidden_layers"]),
           (a + "attention.head_count", "u32", nh), (a + "attention.head_count_kv", "u32", nkv),
           (a + "rope.freq_base", "f32", c["rope_theta"]),
           (a + "attention.layer_norm_rms_epsilon", "f32", c["rms_norm_eps"]),
           (a + "rope.dimension_count", "u32", hd), ("general.file_type", "u32", 1)]
    if c.get("head_dim"):
        kvs += [(a + "attention.key_length", "u32", hd), (a + "attention.value_length", "u32", hd)]
    if with_vocab:
        toks, scores, types = vocab(c["vocab_size"])
        kvs += [("tokenizer.ggml.model", "str", "llama"), ("tokenizer.ggml.tokens", "arr:str", toks),
                ("tokenizer.ggml.scores", "arr:f32", scores), ("tokenizer.ggml.token_type", "arr:i32", types),
                ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2),
                ("tokenizer.ggml.unknown_token_id", "u32", 0), ("tokenizer.ggml.add_bos_token", "bool", True)]
    extra = {k: (k, t, v) for k, t, v in extra_kvs}
    kvs = [extra.pop(k, (k, t, v)) for k, t, v in kvs if k not in drop_keys] + list(extra.values())
    tensors, types = [], {}
    rope = c.get("rope_scaling")
    if rope and rope.get("rope_type") == "linear":  # as convert_hf_to_gguf writes it
        kvs += [(a + "rope.scaling.type", "str", "linear"), (a + "rope.scaling.factor", "f32", rope["factor"])]
    if rope and rope.get("rope_type") == "llama3":
        tensors.append(("rope_freqs.weight", 0, [hd // 2], llama3_rope_factors(c).astype("<f4").tobytes()))
        types["rope_freqs.weight"] = "F32"
    # the float type gcore runs the matrices in where it converts the norms to it:
    # F16 for the formats it makes F16 at load
    mat_float = qtype if qtype in ("F16", "BF16") else "F16" if qtype in Q.FOREIGN_TYPES else None
    for hf, arr in weights.items():
        g = gguf_name(hf)
        v = np.asarray(arr, dtype=np.float32)
        if g.endswith("attn_q.weight") and arch == "llama":
            v = permute(v, nh)
        elif g.endswith("attn_k.weight") and arch == "llama":
            v = permute(v, nkv)
        t = tensor_type(g, qtype, c["num_hidden_layers"], v.shape[-1])
        if v.ndim == 1 and exact_norms and mat_float:  # norms and biases
            v = Q.roundtrip(mat_float, v)
        tensors.append((g, Q.ALL_TYPES[t][0], list(reversed(v.shape)), Q.quantize(t, v)))
        types[g] = t
    tensors += list(extra_tensors)
    layout = write_gguf(path, kvs, tensors, version=version, alignment=alignment)
    layout["types"] = types
    return layout


def write_model(path: str, qtype: str = "F32", seed: int = 0, embed_scale: float = 1.0, **config_kw):
    """tinymodel's random weights for make_config(**config_kw), as GGUF.
    Returns (HF config dict, HF-named fp32 weights, layout)."""
    cfg = TM.make_config(**config_kw)
    w = TM.random_weights(cfg, seed)
    w["model.embed_tokens.weight"] = (w["model.embed_tokens.weight"] * embed_scale).astype(np.float32)
    return cfg, w, write_llama(path, cfg, w, qtype=qtype)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="write a random tiny Llama as GGUF")
    ap.add_argument("out")
    ap.add_argument("--type", default="F32", help="F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K Q4_K_M, or one gcore makes "
                    "F16 at load: Q4_1 Q5_0 Q5_1 Q2_K Q3_K IQ4_NL IQ4_XS")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--hidden-dim", type=int, default=512)
    ap.add_argument("--n-layers", type=int, default=2)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--n-kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=320)
    ap.add_argument("--max-seq", type=int, default=256)
    ap.add_argument("--llama3-rope", action="store_true")
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    write_model(a.out, qtype=a.type, seed=a.seed, dim=a.dim, hidden_dim=a.hidden_dim, n_layers=a.n_layers,
                n_heads=a.n_heads, n_kv_heads=a.n_kv_heads, vocab=a.vocab, max_seq=a.max_seq, tied=a.tied,
                rope_scaling="llama3" if a.llama3_rope else None)
    print(f"wrote {a.out}: {a.type}")


if __name__ == "__main__":
    main()
