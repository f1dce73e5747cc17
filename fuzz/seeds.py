"""seeds.py — writes the fuzz targets' seed corpora (fuzz/corpus/<target>/):
small valid inputs gcore makes or reads, generated here rather than copied
from third-party files. Needs the built tools (bin/) for the bundle and the
tuning database; everything else is written directly.

    python3 fuzz/seeds.py            # from the repository root, after make

Multi-file inputs (a model directory, a tokenizer directory) are the files
joined by SEP, the separator fuzz/fuzz.h names (FZ_SEP).
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import tinymodel  # noqa: E402

SEP = b"\n#--gcore-fuzz-next-file--#\n"
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
BIN = os.environ.get("GCORE_BIN", os.path.join(ROOT, "bin"))
SPACE = "\u2581"


def put(target: str, name: str, data: bytes) -> None:
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ------------------------------------------------------------ models

TINY = dict(dim=8, hidden_dim=16, n_layers=1, n_heads=2, n_kv_heads=1, vocab=16, max_seq=16)


def hf_dir(tmp: str, dtype: str, **kw) -> str:
    d = tempfile.mkdtemp(dir=tmp)
    cfg = tinymodel.make_config(dtype=dtype, **{**TINY, **kw})
    tinymodel.write_hf(d, cfg, tinymodel.random_weights(cfg), dtype=dtype)
    return d


def safetensors_seeds(tmp: str) -> None:
    d = hf_dir(tmp, "f32", tied=True)
    put("safetensors", "f32_tied", read(f"{d}/config.json") + SEP + read(f"{d}/model.safetensors"))
    d = hf_dir(tmp, "f16", rope_scaling="llama3", head_dim=4)
    put("safetensors", "f16_llama3", read(f"{d}/config.json") + SEP + read(f"{d}/model.safetensors"))
    for arch in ("qwen2", "qwen3"):  # model_type qwen2: q/k/v biases; qwen3: q/k norms
        d = hf_dir(tmp, "bf16", arch=arch)
        put("safetensors", "bf16_" + arch, read(f"{d}/config.json") + SEP + read(f"{d}/model.safetensors"))
    # two shards: the index maps each tensor to model.safetensors or model-2.safetensors
    d = hf_dir(tmp, "bf16")
    hdr, data = tinymodel.read_safetensors_raw(f"{d}/model.safetensors")
    names = [n for n in hdr if n != "__metadata__"]
    half = len(names) // 2
    shards = []
    for part in (names[:half], names[half:]):
        p = os.path.join(tmp, "shard")
        tinymodel.write_safetensors(p, [(n, hdr[n]["dtype"], hdr[n]["shape"],
                                         data[hdr[n]["data_offsets"][0]:hdr[n]["data_offsets"][1]])
                                        for n in part])
        shards.append(read(p))
    index = {"metadata": {"total_size": len(data)},
             "weight_map": {n: "model.safetensors" if i < half else "model-2.safetensors"
                            for i, n in enumerate(names)}}
    put("safetensors", "bf16_sharded", SEP.join([read(f"{d}/config.json"), shards[0],
                                                 json.dumps(index).encode(), shards[1]]))


def llama2c_seeds(tmp: str) -> None:
    p = os.path.join(tmp, "m.bin")
    tinymodel.write_llama2c(p, dim=8, hidden_dim=16, n_layers=1, n_heads=2, n_kv_heads=1, vocab=16,
                            seq_len=8, tied=True)
    put("llama2c", "tied", read(p))
    tinymodel.write_llama2c(p, dim=8, hidden_dim=8, n_layers=2, n_heads=2, n_kv_heads=2, vocab=8,
                            seq_len=4, tied=False)
    put("llama2c", "untied", read(p))


# ------------------------------------------------------------ tokenizers

def gguf(kvs, version: int = 3) -> bytes:
    """A GGUF file holding only metadata. kvs: [(key, type, value)], type
    one of the GGUF value types by name (u8 i8 u16 i16 u32 i32 f32 bool
    string u64 i64 f64), or ('array', elem) for an array of elem."""
    codes = dict(u8=0, i8=1, u16=2, i16=3, u32=4, i32=5, f32=6, bool=7, string=8, array=9,
                 u64=10, i64=11, f64=12)
    fmt = dict(u8="B", i8="b", u16="H", i16="h", u32="I", i32="i", f32="f", bool="?", u64="Q",
               i64="q", f64="d")

    def s(x) -> bytes:
        b = x.encode() if isinstance(x, str) else x
        return struct.pack("<Q", len(b)) + b

    def value(ty, v) -> bytes:
        if isinstance(ty, tuple):
            return struct.pack("<IQ", codes[ty[1]] if isinstance(ty[1], str) else 9, len(v)) + \
                b"".join(value(ty[1], x) for x in v)
        return s(v) if ty == "string" else struct.pack("<" + fmt[ty], v)

    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs))
    for key, ty, v in kvs:
        out += s(key) + struct.pack("<I", 9 if isinstance(ty, tuple) else codes[ty]) + value(ty, v)
    return out


def spm_vocab():
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
        [SPACE, "a", "b", "H", "e", "l", "o", SPACE + "a", "ab", "ll", "He", "Hell", SPACE + "H", "[", "]"]
    types = [2, 3, 3] + [6] * 256 + [1] * 15
    scores = [0.0] * 259 + [-float(i) for i in range(15)]
    return toks, types, scores


def byte_level(bs: bytes) -> str:
    """GPT-2's byte-to-unicode spelling of bs."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return "".join(table[b] for b in bs)


CONTROL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|eot_id|>"]


def gguf_vocab_seeds() -> None:
    toks, types, scores = spm_vocab()
    spm = [("general.architecture", "string", "llama"), ("tokenizer.ggml.model", "string", "llama"),
           ("tokenizer.ggml.tokens", ("array", "string"), toks),
           ("tokenizer.ggml.scores", ("array", "f32"), scores),
           ("tokenizer.ggml.token_type", ("array", "i32"), types),
           ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2),
           ("tokenizer.ggml.unknown_token_id", "u32", 0), ("tokenizer.ggml.add_bos_token", "bool", True),
           ("tokenizer.chat_template", "string", "{{ '[INST] ' + message['content'] + ' [/INST]' }}")]
    put("gguf_vocab", "spm_v3", gguf(spm))
    # version 2, and keys of every other value type (the reader steps over them)
    extra = [("llama.block_count", "u16", 2), ("llama.context_length", "u64", 64),
             ("llama.rope.freq_base", "f64", 10000.0), ("x.i8", "i8", -1), ("x.i16", "i16", -2),
             ("x.i64", "i64", -3), ("x.u8", "u8", 7), ("x.nested", ("array", ("array", "u8")), [[1, 2], [3]])]
    put("gguf_vocab", "spm_v2_types", gguf(spm[:6] + extra, version=2))
    words = [b"he", b"ll", b"hell", b"o", b" w", b"or", b"ld"]
    btoks = [byte_level(bytes([b])) for b in range(256)] + [byte_level(w) for w in words] + CONTROL
    btypes = [1] * (256 + len(words)) + [3] * len(CONTROL)
    merges = ["h e", "l l", "he ll", byte_level(b" ") + " w", "o r", "l d"]
    bl = [("general.architecture", "string", "llama"), ("tokenizer.ggml.model", "string", "gpt2"),
          ("tokenizer.ggml.pre", "string", "llama-bpe"),
          ("tokenizer.ggml.tokens", ("array", "string"), btoks),
          ("tokenizer.ggml.token_type", ("array", "i32"), btypes),
          ("tokenizer.ggml.merges", ("array", "string"), merges),
          ("tokenizer.ggml.bos_token_id", "u32", btoks.index("<|begin_of_text|>")),
          ("tokenizer.ggml.eos_token_id", "u32", btoks.index("<|end_of_text|>")),
          ("tokenizer.ggml.eot_token_id", "u32", btoks.index("<|eot_id|>")),
          ("tokenizer.chat_template", "string", "<|start_header_id|>{{ role }}<|end_header_id|>")]
    put("gguf_vocab", "bytelevel_v3", gguf(bl))
    gpt2 = [kv for kv in bl if kv[0] != "tokenizer.ggml.pre"]
    put("gguf_vocab", "gpt2_default_pre", gguf(gpt2))
    # chat templates read from the vocabulary's template (tests/chat_ref.py),
    # their markers as control tokens and <think> as a user-defined one:
    # DeepSeek R1's, Mistral v0.3's ([INST] by id) and Large 2411's
    # ([SYSTEM_PROMPT] blocks), Qwen2.5's (ChatML with its own system
    # message), Qwen3-Thinking's (a generation prompt that opens <think>)
    import chat_ref
    for name, kind in (("deepseek_r1", "deepseek_r1"), ("mistral_v3", "mistral_v3"), ("mistral_v7", "mistral_v7"),
                       ("chatml_qwen2_5", "qwen2_5"), ("qwen3_thinking", "qwen3_thinking"), ("llama3_2", "llama3_2")):
        ctl, user = chat_ref.CONTROLS[kind], chat_ref.USER_TOKENS.get(kind, [])
        kvs = [(k, t, btoks + ctl + user if k == "tokenizer.ggml.tokens" else btypes + [3] * len(ctl) + [4] * len(user)
                if k == "tokenizer.ggml.token_type" else v) for k, t, v in gpt2 if k != "tokenizer.chat_template"]
        put("gguf_vocab", name, gguf(kvs + [("tokenizer.chat_template", "string", chat_ref.TEMPLATES[kind])]))


def tokenizer_json_seeds() -> None:
    vocab = {byte_level(bytes([b])): b for b in range(256)}
    vocab.update({"he": 256, "ll": 257, "hell": 258, byte_level(b" ") + "w": 259})
    added = [{"id": 260 + i, "content": c, "special": True} for i, c in enumerate(CONTROL)]
    added.append({"id": 265, "content": " <x>", "special": False, "lstrip": True, "rstrip": True})
    bl = {"version": "1.0", "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                                     "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
               "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
          "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|begin_of_text|>"}},
                                                                      {"Sequence": {"id": "A"}}]},
          "decoder": {"type": "ByteLevel"},
          "model": {"type": "BPE", "vocab": vocab, "merges": ["h e", "l l", "he ll", byte_level(b" ") + " w"],
                    "byte_fallback": False, "ignore_merges": True}}
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}, "add_bos_token": True,
           "chat_template": "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"}
    gen = {"bos_token_id": 260, "eos_token_id": [261, 264]}
    put("tokenizer_json", "bytelevel_llama3", SEP.join(json.dumps(x).encode() for x in (bl, cfg, gen)))
    gpt2 = dict(bl, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "use_regex": True},
                post_processor=None)
    put("tokenizer_json", "bytelevel_gpt2", json.dumps(gpt2).encode())
    toks, _, _ = spm_vocab()
    spm = {"version": "1.0",
           "added_tokens": [{"id": i, "content": c, "special": True} for i, c in enumerate(toks[:3])],
           "normalizer": {"type": "Sequence", "normalizers": [
               {"type": "Prepend", "prepend": SPACE},
               {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]},
           "pre_tokenizer": None, "decoder": None,
           "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(toks)}, "unk_token": "<unk>",
                     "byte_fallback": True, "fuse_unk": True,
                     "merges": [[SPACE, "a"], ["a", "b"], ["l", "l"], ["H", "e"], ["He", "ll"], [SPACE, "H"]]}}
    cfg2 = {"bos_token": "<s>", "eos_token": "</s>",
            "chat_template": [{"name": "default", "template": "[INST] {{ m }} [/INST]"}]}
    put("tokenizer_json", "spm_llama2", SEP.join(json.dumps(x).encode() for x in (spm, cfg2)))
    meta = dict(spm, normalizer=None,
                pre_tokenizer={"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first",
                               "split": False})
    put("tokenizer_json", "spm_metaspace", json.dumps(meta).encode())


# ------------------------------------------------------------ databases

def tool(*args, cwd) -> None:
    subprocess.run([os.path.join(BIN, args[0]), *args[1:]], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, GCORE_CACHE=os.path.join(cwd, "cache")))


def compact(path: str, **updates) -> bytes:
    """The database at path in one file with 512-byte pages (small seeds
    that a fuzzer mutates page by page); updates: {sql: params}."""
    c = sqlite3.connect(path)
    for sql, params in updates.items():
        c.execute(sql, params)
    c.commit()
    c.close()
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.execute("PRAGMA journal_mode=DELETE")
    c.execute("PRAGMA page_size=512")
    c.execute("VACUUM")
    c.close()
    return read(path)


def bundle_seeds(tmp: str) -> None:
    tool("gcore-gen", "--target", "cpu:x86-64-v3", "--op", "rmsnorm", "--m", "1,4", "--n", "32",
         "-o", "a.gcb", "-q", cwd=tmp)
    put("bundle", "cpu_rmsnorm", compact(os.path.join(tmp, "a.gcb")))
    # an sm_90a GEMM entry with tensor maps, programmatic launch and an L2 window (the
    # code object is the CPU one: the runtime's reader never looks inside)
    tool("gcore-gen", "--target", "cpu:x86-64-v3", "--op", "gemm", "--m", "128", "--n", "64",
         "--k", "64", "--dtype", "f16", "-o", "b.gcb", "-q", cwd=tmp)
    put("bundle", "sm90a_tmaps", compact(os.path.join(tmp, "b.gcb"), **{
        "UPDATE dispatch SET target='sm_90a', pdl=1, prefetch=1, shmem='BM*BK*2', consts=consts || ',BM=128,BK=64', "
        "tmaps=?": ("A M K BM BK 128\nB N K 64 BK 128 if BM > 64",),
        "UPDATE code_objects SET target='sm_90a'": ()}))
    shutil.copy(os.path.join(tmp, "a.gcb"), os.path.join(tmp, "c.gcb"))
    put("bundle", "format1", compact(os.path.join(tmp, "c.gcb"), **{
        "UPDATE meta SET value='1' WHERE key='format_version'": ()}))


def tunedb_seeds(tmp: str) -> None:
    tool("gcore-tune", "--target", "cpu:x86-64-v3", "--template", "gemv_cpu", "--op", "gemm", "--m", "4",
         "--n", "32", "--k", "32", "--db", "t.db", "--budget", "2", "--min-time", "0.01", "--no-progress",
         cwd=tmp)
    # the device and compiler rows fuzz_tunedb.c upserts, so that its
    # queries meet the measurements
    put("tunedb", "gemv_tuned", compact(os.path.join(tmp, "t.db"), **{
        "UPDATE devices SET backend='cpu', arch='x86-64-v3', name='fuzz cpu', driver='fuzz', "
        "compute_units=2, mem_bytes=1073741824": (),
        "UPDATE compilers SET driver='cc', version='fuzz', flags='-O3'": ()}))
    # a step check of the winner, refused, and an older one that kept it
    shutil.copy(os.path.join(tmp, "t.db"), os.path.join(tmp, "s.db"))
    put("tunedb", "step_checked", compact(os.path.join(tmp, "s.db"), **{
        "UPDATE devices SET backend='cpu', arch='x86-64-v3', name='fuzz cpu', driver='fuzz', "
        "compute_units=2, mem_bytes=1073741824": (),
        "INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, rows, created) "
        "SELECT measurement_id, target, 'm', 10.0, 11.0, 0, 2, '2026-12-06 10:00:00.250' FROM winners": (),
        "INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, created) "
        "SELECT measurement_id, target, 'm', 10.0, 9.0, 1, '2026-12-05 10:00:00' FROM winners": ()}))
    # schema version 1: opening it read-write runs the later migrations
    old = os.path.join(tmp, "old.db")
    c = sqlite3.connect(old)
    c.executescript(read(os.path.join(ROOT, "db", "migrations", "001_init.sql")).decode())
    c.execute("PRAGMA user_version = 1")
    c.execute("PRAGMA application_id = %d" % 0x67636462)
    c.close()
    put("tunedb", "schema_v1", compact(old))


# ------------------------------------------------------------ text formats

def workload_seeds() -> None:
    for name in ("demo.txt", "llama3_8b_decode_m1.txt"):
        put("workload", name[:-4], read(os.path.join(ROOT, "tuner", "workloads", name)))
    put("workload", "every_op", b"# one of each op\r\n"
        b"gemm f16 m=1,16 n=64 k=32\ngemm_add f32:f16:f32 m=2 n=8 k=8  # trailing\n"
        b"gemm_swiglu bf16 m=4 n=16 k=16\nrmsnorm_gemm f32 m=1 n=8 k=8\n"
        b"rmsnorm_gemm_swiglu f16 m=1 n=8 k=8\nrmsnorm f32 m=3 n=5\nadd f16 m=1 n=7\n"
        b"embed f32 m=2 n=8 k=100\nrope_kv f16 m=4 h=8 g=2 d=64\n\tattention bf16 m=1 h=4 g=4 d=32\n"
        b"argmax f32 m=1 n=32000\n")


def declaration(path: str, body_lines: int = 6) -> bytes:
    """A template's declaration comment and the first lines of its code."""
    text = read(path).decode()
    end = text.index("*/") + 2
    rest = text[end:].split("\n")[:body_lines + 1]
    return (text[:end] + "\n".join(rest) + "\n").encode()


def template_seeds() -> None:
    for rel in ("cpu/rmsnorm.c", "cpu/gemv.c", "cpu/attention.c", "gpu/add.cu", "gpu/gemm_wgmma.cu",
                "gpu/gemm_mfma.cu"):
        put("template", rel.replace("/", "_").split(".")[0], declaration(os.path.join(ROOT, "templates", rel)))


def expr_seeds() -> None:
    for i, text in enumerate([
            "MR=6,NR=32\ncdiv(M, MR) cdiv(N, NR) 1",
            "\nmin(max(M, N), K) % 7 == 3 && !(N < 0) || M >= 2 && N <= 4 && K != 1 && M > 0",
            "BM=128,BK=64,TMA=1\nA M K BM BK 2*BK if TMA\nB N K BM/2 BK 128",
            "X=-5\n(((1 + 2) * 3) - 4) / 2; -X; 6 - M",
            "\n9223372036854775807 + 1",
            "A=1\ncdiv(M, A - 1) 1 1 1 1 1 1 1 1"]):
        put("expr", f"e{i}", text.encode())


def gguf_model_seeds(tmp: str) -> None:
    """Tiny GGUF models (tests/tinygguf.py): F16 with llama3 rope factors,
    BF16, Q4_0 untied, Q8_0 tied, a Qwen2 (qwen2 keys, q/k/v biases) in
    Q8_0, tied, a Qwen3 (q/k norms, heads wider than dim / heads) in F16,
    and the formats gcore makes F16 at load;
    a few KiB each. A model all in a K-quant
    would need rows of 256 everywhere, a seed over the fuzzer's input limit
    (fuzz/run.sh: 64 KiB), so each K-quant seed (q4_k, q5_k, q6_k) is a model
    of width 32 with an FFN of 256: ffn_down, the matrix with rows of 256, in
    that format and the others in Q8_0 (as llama.cpp's mixes fall back where
    a row is not whole blocks); about 35 KiB each."""
    import ggufq
    import tinygguf
    tiny = dict(dim=32, hidden_dim=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab=16, max_seq=16)
    for name, qtype, kw in (("f16_rope", "F16", {"rope_scaling": "llama3"}), ("q4_0", "Q4_0", {}),
                            ("q8_0_tied", "Q8_0", {"tied": True}), ("bf16", "BF16", {}),
                            ("qwen2_q8_0", "Q8_0", {"arch": "qwen2", "tied": True}),
                            ("qwen3_f16", "F16", {"arch": "qwen3", "head_dim": 32})):
        path = os.path.join(tmp, name + ".gguf")
        tinygguf.write_model(path, qtype=qtype, **tiny, **kw)
        put("gguf_model", name, read(path))
    cfg = tinymodel.make_config(**{**tiny, "hidden_dim": 256})
    # K-quants, and the 256-element formats gcore makes F16 at load, as ffn_down
    for qtype in ("Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "IQ4_XS"):
        w = tinymodel.random_weights(cfg)
        down = w.pop("model.layers.0.mlp.down_proj.weight").astype("float32")
        path = os.path.join(tmp, qtype + ".gguf")
        tinygguf.write_llama(path, cfg, w, qtype="Q8_0", extra_tensors=[
            ("blk.0.ffn_down.weight", ggufq.ALL_TYPES[qtype][0], list(reversed(down.shape)),
             ggufq.quantize(qtype, down))])
        put("gguf_model", qtype.lower(), read(path))
    # the 32-element formats gcore makes F16 at load, as the whole model
    for qtype in ("Q4_1", "Q5_0", "Q5_1", "IQ4_NL"):
        path = os.path.join(tmp, qtype + ".gguf")
        tinygguf.write_model(path, qtype=qtype, **tiny)
        put("gguf_model", qtype.lower(), read(path))


def api_seeds() -> None:
    """gcore-serve request bodies (fuzz_api.c: the first byte picks the
    vocabulary, 0 Qwen2.5's, 1 Qwen3-Thinking's, 2 Llama 3.2's, 3 Mistral
    v0.3's; 0x80 set
    for /v1/completions): a chat with tools, an earlier reply's calls and
    the tools' results; a reply text with tool calls; a completion."""
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Météo",
                                               "parameters": {"type": "object", "properties": {
                                                   "city": {"type": "string"}, "w": {"examples": [0.1, 1e-05, 1e16]}},
                                                   "required": ["city"]}}}]
    call = {"id": "call00001", "type": "function", "function": {"name": "get_weather",
                                                                "arguments": '{"city": "Paris"}'}}
    chat = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "weather?"},
                         {"role": "assistant", "content": None, "reasoning_content": "plan", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "call00001", "content": "sunny"}],
            "tools": tools, "tool_choice": "auto", "max_tokens": 4, "stream": True}
    for i in (0, 1, 2, 3):
        put("api", f"chat_tools_{i}", bytes([i]) + json.dumps(chat).encode())
    reply = ('Let me see.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>\n'
             '<tool_call>{"oops": 1}</tool_call> <tool_call>\n{"name": "now"')
    put("api", "reply", bytes([0]) + reply.encode())
    put("api", "completion", bytes([0x80]) + json.dumps({"prompt": "hi", "tools": [], "max_tokens": 2}).encode())
    # a call forced (tool_choice "required", a named function) and JSON mode
    for i, choice in ((0, "required"), (2, {"type": "function", "function": {"name": "get_weather"}}),
                      (3, "required")):
        put("api", f"chat_forced_{i}", bytes([i]) + json.dumps(dict(chat, tool_choice=choice)).encode())
    put("api", "json_mode", bytes([0x80]) + json.dumps({"prompt": "hi", "max_tokens": 2,
                                                        "response_format": {"type": "json_object"}}).encode())
    schema = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}, "b": {"type": ["integer", "null"]}},
              "required": ["a"], "additionalProperties": False}
    put("api", "json_schema", bytes([0]) + json.dumps(dict(chat, tools=[], tool_choice="none", response_format={
        "type": "json_schema", "json_schema": {"name": "s", "schema": schema}})).encode())
    put("api", "guided_json", bytes([0x80]) + json.dumps({"prompt": "hi", "max_tokens": 2,
                                                          "guided_json": json.dumps(schema)}).encode())
    put("api", "guided_choice", bytes([0x80]) + json.dumps({"prompt": "hi", "max_tokens": 2,
                                                            "guided_choice": ["yes", "no", "n\u00e9"]}).encode())


def jsonmode_seeds() -> None:
    """A reply, then pieces: JSON fragments, blanks, whole and cut UTF-8,
    escapes, a call's texts (fuzz_jsonmode.c: every fifth a control token)."""
    pieces = [b" ", b"{", b"\"", b"\":", b"<ctl>", b" \"", b"1", b"\\u00", b"\xc3\xa9", b"<eot>",
              b"\xe4\xb8", b"\xad", b"true", b"  \n", b"}", b"[1,", b"\"}", b"<tool_call>\n{",
              b"\tnull", b"]"]
    replies = [b' {"a": ["x\\u00e9\xc3\xa9", 1.5e-3, true, null, {}]}',
               b'C<tool_call>\n{"name": "get_weather", "arguments": {"c": "P"}}\n</tool_call>',
               b'{\n\t"k"\r\n:\n[ 0 , -1e5 ,"\\/"]}',
               b'M [{"name": "get", "arguments": {}}, {"name": "get_weather", "arguments": {"c": [1]}}]',
               b'S<tool_call>\n{"name": "get_weather", "arguments": {"days": 3, "city": "Z\xc3\xbcrich", "n": null}}'
               b'\n</tool_call>\n<tool_call>\n{"name": "get", "arguments": {"x": [1]}}\n</tool_call>',
               b'Kyes!', b'K"q" \xc3\xa9', b'R12', b'Rno!', b'Rab\xc3\xa9"\\\n\xe4\xb8\xadx',
               b'P{"d": "2024-12", "e": "\\u00e9\\\\\\""}']
    for i, r in enumerate(replies):
        put("jsonmode", f"j{i}", SEP.join([r] + pieces[i:] + pieces[:i]))


def jsonschema_seeds() -> None:
    """A schema, a reply it allows, then pieces (fuzz_jsonschema.c: every
    fifth a control token): pydantic's shapes ($defs, Optional, enums, a
    dict, recursion), OpenAI's strict example, type lists, scalar enums
    and string lengths."""
    pet = {"type": "object", "properties": {"kind": {"enum": ["cat", "dog", "caf\u00e9"]},
                                            "age": {"type": "integer"}}, "required": ["kind"]}
    schemas = [
        ({"$defs": {"Pet": pet}, "type": "object", "properties": {
            "name": {"type": "string"}, "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}},
            "scores": {"type": "object", "additionalProperties": {"type": "integer"}}},
          "required": ["name"], "additionalProperties": False},
         b'{"name": "A\u00e9", "pets": [{"kind": "caf\xc3\xa9", "age": 3}], "nick": null, "scores": {"x": -1}}'),
        ({"type": "object", "properties": {"steps": {"type": "array", "items": {"type": "object", "properties": {
            "explanation": {"type": "string"}, "output": {"type": "string"}}, "required": ["explanation", "output"],
            "additionalProperties": False}}, "final_answer": {"type": "string"}},
          "required": ["steps", "final_answer"], "additionalProperties": False},
         b'{"steps": [{"explanation": "e", "output": "o"}], "final_answer": "42"}'),
        ({"type": "object", "properties": {"v": {"type": ["integer", "null"]}, "kids": {"type": "array",
                                                                                        "items": {"$ref": "#"}}},
          "required": ["v"]}, b'{"v": 1, "kids": [{"v": null, "kids": []}]}'),
        ({"type": "object", "properties": {"x": {"const": "X"}}, "additionalProperties": True},
         b'{"y": [1, {"z": true}], "x": "X"}'),
        ({"type": "object", "properties": {"n": {"enum": [1, 10, -2.5, None, "a b"]}, "c": {"const": False},
                                           "s": {"type": "string", "minLength": 1, "maxLength": 3},
                                           "r": {"type": "integer", "minimum": -5, "exclusiveMaximum": 300}}},
         b'{"n": 10, "c": false, "s": "\xc3\xa9\\n", "r": -5}'),
        ({"type": "object", "properties": {"d": {"type": "string", "pattern": "^\\d{4}-\\d{2}$"},
                                           "w": {"type": ["string", "null"], "pattern": "[a-z\u00e9]", "maxLength": 4}}},
         b'{"d": "2024-12", "w": "\\u00e9\xc3\xa9x"}'),
        ({"type": "object", "properties": {"day": {"type": "string", "format": "date"},
                                           "p": {"type": "number", "multipleOf": 0.25, "maximum": 10},
                                           "n": {"type": "integer", "multipleOf": 3, "nullable": True},
                                           "set": {"type": "array", "items": {"enum": ["a", "b", None]},
                                                   "uniqueItems": True}}},
         b'{"day": "2024-02-29", "p": 2.75, "n": null, "set": ["b", null]}'),
    ]
    pieces = [b" ", b"{", b"\"", b"\":", b"<ctl>", b" \"", b"1", b"name", b"\xc3\xa9", b"<eot>", b"kind",
              b"ca", b"true", b"null", b"}", b"[{", b"\"}", b"-2.5", b"\tnull", b"]"]
    for i, (sch, reply) in enumerate(schemas):
        put("jsonschema", f"s{i}", SEP.join([json.dumps(sch).encode(), reply] + pieces[i:] + pieces[:i]))


def regex_seeds() -> None:
    """A reading byte (fuzz_regex.c: bit 0 full, bits 1-3 minLength, 4-7
    maxLength, 15 none), a pattern, then strings: the shapes people write."""
    cases = [(0xF0, r"^\d{4}-(0[1-9]|1[0-2])-\d{2}$", ["2024-12-06", "2024-13-01", "x"]),
             (0xF1, r"(yes|no)[.!]?", ["yes!", "no", "maybe"]), (0x52, r"^[a-z]+$", ["abc", "abcdefgh", "A"]),
             (0xF0, r"[^@\s]+@[^@\s]+\.[a-z]{2,}", ["a@b.com", "@b"]), (0xF1, "[\u00e0-\u00ff\u20ac\n\"]+.",
                                                                        ["\u00e9\u20ac\n\"x", "\U0001F600"]),
             (0xF0, r"(?:ab)*?c|^$|\x41\0", ["", "ababc", "A\0"])]
    for i, (b, pat, strs) in enumerate(cases):
        put("regex", f"r{i}", SEP.join([bytes([b]) + pat.encode()] + [x.encode() for x in strs]))


def main() -> None:
    if os.path.isdir(CORPUS):
        shutil.rmtree(CORPUS)
    with tempfile.TemporaryDirectory() as tmp:
        safetensors_seeds(tmp)
        llama2c_seeds(tmp)
        gguf_vocab_seeds()
        tokenizer_json_seeds()
        bundle_seeds(tmp)
        tunedb_seeds(tmp)
        gguf_model_seeds(tmp)
    workload_seeds()
    template_seeds()
    expr_seeds()
    api_seeds()
    jsonmode_seeds()
    jsonschema_seeds()
    regex_seeds()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
