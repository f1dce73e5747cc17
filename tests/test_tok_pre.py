"""GGUF byte-level pre-tokenizers as llama.cpp has them (tokenizer.ggml.pre):
for every name gcore knows, a vocabulary the test writes itself (byte-level
BPE trained on the corpus below, so that a word split in another place
gives other ids) tokenized by gcore-run --tokenize against an independent
reference: llama.cpp's split (each regex of its type in turn, over the
words the ones before it made, as its unicode_regex_split does) run by
Python's regex module (Debian's python3-regex), then byte-level BPE in
Python. A file with no tokenizer.ggml.pre gets llama.cpp's default split;
a name gcore does not know is refused with one line.

The reference models what llama.cpp does beyond the regex text: a regex
sees one word at a time (a lookahead sees the word's end as the text's);
every non-ASCII whitespace character (White_Space, llama.cpp's list) is
U+000B to the regex, so a class that lists one matches it only through
\\s; a word that is a token is that token where the type sets
ignore_merges. Invalid UTF-8 is where gcore departs from llama.cpp by
design (tokenizer.h: its bytes are kept and match no regex, llama.cpp
makes each U+FFFD): the reference models gcore's rule there."""
import os
import subprocess

import pytest

from conftest import ROOT, assert_clean_error
import tinygguf as G
import tokcorpus as C
from test_tokenizer import byte_level  # GPT-2's byte spelling, one definition

regex = pytest.importorskip("regex", reason="python3-regex is not installed (make deps installs it)")

# ---------------------------------------------------- llama.cpp's table
# The regexes of llama.cpp's pre-tokenizer types (src/llama-vocab.cpp,
# llm_tokenizer_bpe's constructor), and the names its loader maps to them
# (llama_vocab::impl::load), with the settings that change a text's ids.

CONTR = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
PORO = r" ?[^(\s|.,!?…。，、।۔،)]+"
CJK = r"[一-龥ࠀ-一가-퟿]+"
DS_LETTERS = "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚ" \
             "Ḁ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼ" \
             "ℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗ" \
             "Ａ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃"
TEKKEN_WORD = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|" \
              r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"


def gpt4o_word(letter):
    return (r"[^\r\n\p{L}\p{N}]?((?=[" + letter + r"])([^a-z]))*((?=[" + letter + r"])([^A-Z]))+" + CONTR + r"?|"
            r"[^\r\n\p{L}\p{N}]?((?=[" + letter + r"])([^a-z]))+((?=[" + letter + r"])([^A-Z]))*" + CONTR + r"?")


# type: (regexes, ignore_merges, add_bos)
TYPES = {
    "DEFAULT": ([r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"], 0, 0),
    "LLAMA3": ([LLAMA3], 1, 1),
    "DBRX": ([LLAMA3], 0, 0),
    "JAIS2": ([CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
               r"\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|"
               r"\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}"], 0, 0),
    "DEEPSEEK_LLM": (["[\r\n]", r"\s?[" + DS_LETTERS + r"]+", r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", CJK,
                      r"\p{N}+"], 0, 0),
    "DEEPSEEK_CODER": (["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"], 0, 0),
    "FALCON": ([r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"], 0, 0),
    "STARCODER": ([r"\p{N}", GPT2], 0, 0),
    "GPT2": ([GPT2], 0, 0),
    "QWEN2": ([QWEN2], 0, 0),
    "QWEN35": ([CONTR + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                r"\s+(?!\S)|\s+"], 0, 0),
    "PORO": ([PORO], 0, 0),
    "VIKING": ([PORO, r"\p{N}"], 0, 0),
    "TEKKEN": ([TEKKEN_WORD + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"], 1, 1),
    "CHAMELEON": ([r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                   r"[\p{P}!-/:-@\[-`{-~]", GPT2], 0, 1),
    "GPT4O": ([gpt4o_word(r"\p{L}") + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"], 0, 0),
    "GRANITE_EMB_MULTI": ([gpt4o_word(r"\p{L}\p{M}") + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|"
                           r"\s+(?!\S)|\s+"], 1, 0),
    "BAILINGMOE": ([r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                    r"[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"], 0, 0),
    "SEED_CODER": ([CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
                   0, 0),
    "UFAKZEKA": ([r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"], 0, 0),
    "LAGUNA": ([r"[^\n]+|[\n]+", QWEN2], 0, 0),
    "EXAONE_MOE": ([CONTR + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|"
                    r"\s*[\r\n]|\s+(?!\S)|\s+"], 0, 0),
    "MINICPM5": ([r"\p{N}{1,3}", CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                  r"\s+(?!\S)|\s+"], 1, 0),
}

NAMES = {
    "default": "DEFAULT",
    "llama3": "LLAMA3", "llama-v3": "LLAMA3", "llama-bpe": "LLAMA3", "falcon3": "LLAMA3", "falcon-h1": "LLAMA3",
    "pixtral": "LLAMA3", "midm-2.0": "LLAMA3", "lfm2": "LLAMA3", "jina-v5-nano": "LLAMA3",
    "minicpm5": "MINICPM5", "deepseek-llm": "DEEPSEEK_LLM", "deepseek-coder": "DEEPSEEK_CODER",
    "falcon": "FALCON", "mpt": "GPT2", "starcoder": "STARCODER",
    "gpt-2": "GPT2", "phi-2": "GPT2", "jina-es": "GPT2", "jina-de": "GPT2", "gigachat": "GPT2", "jina-v2-es": "GPT2",
    "jina-v2-de": "GPT2", "a.x-4.0": "GPT2", "mellum": "GPT2", "modern-bert": "GPT2",
    "jais-2": "JAIS2", "refact": "STARCODER", "command-r": "STARCODER",
    "qwen2": "QWEN2", "deepseek-r1-qwen": "QWEN2", "kormo": "QWEN2", "f2llmv2": "QWEN2", "qwen35": "QWEN35",
    "stablelm2": "QWEN2", "olmo": "GPT2", "dbrx": "DBRX", "smaug-bpe": "DBRX", "poro-chat": "PORO",
    "glm4": "DBRX", "chatglm-bpe": "DBRX", "viking": "VIKING", "jais": "GPT2", "tekken": "TEKKEN",
    "smollm": "STARCODER", "codeshell": "STARCODER", "bloom": "PORO", "gpt3-finnish": "PORO",
    "exaone": "STARCODER", "exaone4": "GPT2", "exaone-moe": "EXAONE_MOE", "chameleon": "CHAMELEON",
    "minerva-7b": "STARCODER", "megrez": "QWEN2",
    "gpt-4o": "GPT4O", "llama4": "GPT4O", "kanana2": "GPT4O", "talkie": "GPT4O",
    "granite-embed-multi-97m": "GRANITE_EMB_MULTI", "trillion": "GPT2", "granite-docling": "GPT2",
    "bailingmoe": "BAILINGMOE", "bailingmoe2": "BAILINGMOE", "llada-moe": "BAILINGMOE", "seed-coder": "SEED_CODER",
    "hunyuan": "QWEN2", "ufakzeka": "UFAKZEKA", "grok-2": "QWEN2", "laguna": "LAGUNA", "minimax-m2": "GPT4O",
    "solar-open": "QWEN2", "mellum2": "STARCODER",
}

# llama.cpp's unicode_set_whitespace (Unicode's White_Space)
WHITE_SPACE = set(range(0x09, 0x0E)) | set(range(0x2000, 0x200B)) | {
    0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000}

# ---------------------------------------------------------------- corpus

TRICKY = [
    "1234567", "12345678901234567890", "x=1234567.891;", "3,14 1 22 333 4444 55555", "١٢٣٤٥٦٧ ۱۲۳ ४५६७ Ⅻ ½ ²³",
    "'S 's 'Re 'VE 'll 'D 'm 'T it's I'M we'Ll they'RE", "don't DON'T Don'T", "'s's''s", "' s", "x's",
    "it'llama we'sun they'reason you'very I'mad 'tis",
    "CamelCaseHTTPServer getHTTPResponseCode iOS macOS ÉCOLE École éCOLE ǅungla ΣΊΣΥΦΟΣ",
    "Привет世界hello123мир", "日本語とEnglishと한국어", "אבגabcابت",
    "a\nb\r\nc\n\n\nd \n e\t\n\tf", "   a   b\t\t\tc  \n  ", "\r\r\n\n\r", "\n", "  \n", " ",
    "!!!???...,,,;;;:::---___", "$$$+++<<<===>>>^^^~~~|||```", "a+b=c; x<y>z ^_^ ~x|y `q`", "«quoted» „dt.“ ¿qué? ¡sí!",
    "—–‐…‰′″※", "(a)[b]{c}<d>", "@#%&*\\/", "C++ C# F#", "•◦‣⁃",
    "🦙🚀😀👍🏽👨\u200d👩\u200d👧 🇯🇵 ✅1️⃣", "e\u0301a\u0308o\u0327 नमस्ते ক্ষ", "ά \u1fd3 \u1f7d \u1fbe \u2126 \u212a \u212b ΐ ώ ι Ω K Å",
    "ﬁ ﬀ ＡＢＣａｂｃ１２３！？", "ｶﾀｶﾅ ㄅㄆ ꙮ",
    "　。　、「」！？：；～", "你好，世界。", "ab\u3000cd\u00a0ef\u2028gh\u2003ij\u0085kl\ufeffmn\u200bop",
    "<sentinel:12> IMGIMGABZ IMGIMGAAAAAZ <sentinel:x>", "x    y  z\t\nw", "line\n    indented\n\tmore",
    "ɐɑɒ ʔ ʕ ǀǁ ƻ", "Ꭰ ꭰ Ა ა Ⰰ ⰰ", "𐐀𐐨 𝐀𝐁𝐂 𞤀𞤢",
    " " * 600 + "x", "a" * 300, "A" * 250 + "b", "9" * 100, "\t" * 40 + "end", "-" * 80,
    "A" * 3000 + "b", "\u00e9" * 1500,  # past PCRE2's JIT stack in Tekken's and GPT-4o's regexes
]
INVALID = [b"a\xffb", b"\xff", b"abc\xe2\x82", b"x \xff!", b"12\xff345", b"\xc3( \xe4\xbd \xf0\x9f\x98 end",
           b"ok \xe4\xbd caf\xc3\xa9 \xfe\xfe", b"\xed\xa0\x80 surrogate 1234\xc0\xaf5678", b"  \xff  \xff\n"]


def corpus():
    texts = C.ASCII[1:] + C.WHITESPACE + C.NUMBERS + C.CODE + C.UNICODE + TRICKY
    return [t.encode() for t in texts]


# ------------------------------------------------------- the reference

def split_one(rx, word):
    """The words of one word under one regex: its matches and the gaps
    between them. The regex sees the word alone (its end is the text's),
    every non-ASCII White_Space character as U+000B, and each run of
    valid UTF-8 apart (an invalid byte, a lone surrogate here, matches
    nothing: gcore's rule)."""
    seen = "".join("\x0b" if ord(c) > 0x7f and ord(c) in WHITE_SPACE else c for c in word)
    cuts, i = [], 0
    while i < len(seen):  # runs of valid text
        j = i
        while j < len(seen) and not 0xdc80 <= ord(seen[j]) <= 0xdcff:
            j += 1
        for m in rx.finditer(seen[i:j]):
            assert m.end() > m.start(), (rx.pattern, word)  # none of these regexes matches empty
            cuts += [i + m.start(), i + m.end()]
        i = j + 1
    out, at = [], 0
    for c in cuts + [len(word)]:
        if c > at:
            out.append(word[at:c])
        at = max(at, c)
    return out


def pre_split(type_name, text):
    """llama.cpp's pre-tokenizer of type_name over text (bytes): the words, bytes."""
    words = [text.decode("utf-8", "surrogateescape")]
    for pattern in TYPES[type_name][0]:
        rx = regex.compile(pattern)
        words = [w for word in words for w in split_one(rx, word)]
    return [w.encode("utf-8", "surrogateescape") for w in words]


_BPE = {}


def bpe(word, ranks, vocab):
    """Byte-level BPE of one word: the adjacent pair of the lowest rank
    merges first, the leftmost of equals (llama.cpp's queue)."""
    key = (id(ranks), word)
    if key not in _BPE:
        _BPE[key] = bpe_uncached(word, ranks, vocab)
    return _BPE[key]


def bpe_uncached(word, ranks, vocab):
    syms = [bytes([b]) for b in word]
    while True:
        best = None
        for i in range(len(syms) - 1):
            r = ranks.get((syms[i], syms[i + 1]))
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return [vocab[s] for s in syms]
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


def reference_ids(type_name, text, ranks, vocab):
    _, ignore_merges, _ = TYPES[type_name]
    ids = []
    for w in pre_split(type_name, text):
        ids += [vocab[w]] if ignore_merges and w in vocab else bpe(w, ranks, vocab)
    return ids


# ------------------------------------------------------ the vocabulary

WHOLE_WORDS = [b" world", b"Hello", b"1234", b" the", b"'s", b"\n\n", b"CamelCase", b"   "]
# merges after the learned ones: punctuation and the newline after it (a
# word in some types, two in others)
EXTRA_MERGES = [(p.encode(), b"\n") for p in ":.!);{,"]
# texts made tokens by merges before the learned ones: a split inside them
# changes the ids (DEEPSEEK_LLM's U+3000 is matched only as \s)
FIRST_WORDS = ["\u3002\u3000"]


def chain(texts):
    """Merges that make each text one token (each character from its bytes,
    then the characters left to right), for the front of the list."""
    out = []
    for text in texts:
        chars = [c.encode() for c in text]
        for c in chars:
            out += [(c[:i], c[i:i + 1]) for i in range(1, len(c))]
        out += [(b"".join(chars[:i]), chars[i]) for i in range(1, len(chars))]
    return list(dict.fromkeys(out))


def train(texts, n_merges):
    """Byte-level BPE merges learned on texts taken whole (no split), so that
    tokens span what a pre-tokenizer splits: the most frequent adjacent
    pair first, ties to the pair first seen."""
    seqs = [[bytes([b]) for b in t] for t in texts]
    merges = []
    for _ in range(n_merges):
        count, first = {}, {}
        for s in seqs:
            for p in zip(s, s[1:]):
                count[p] = count.get(p, 0) + 1
                first.setdefault(p, len(first))
        if not count:
            break
        best = max(count, key=lambda p: (count[p], -first[p]))
        merges.append(best)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if (s[i], s[i + 1]) == best:
                    s[i:i + 2] = [s[i] + s[i + 1]]
                i += 1
    return merges


@pytest.fixture(scope="module")
def vocab_spec():
    """(tokens as bytes, merges, ranks, vocab) of the test's vocabulary:
    the 256 bytes, the merges' results, a few whole words no merge makes
    (ignore_merges tells), then <s> and </s>."""
    merges = chain(FIRST_WORDS)
    merges += [m for m in train(corpus(), 700) + EXTRA_MERGES if m not in merges]
    toks = [bytes([b]) for b in range(256)]
    for a, b in merges:
        if a + b not in toks:
            toks.append(a + b)
    toks += [w for w in WHOLE_WORDS if w not in toks]
    vocab = {t: i for i, t in enumerate(toks)}
    ranks = {m: r for r, m in enumerate(merges)}
    return toks, merges, ranks, vocab


def write_vocab(path, spec, pre, extra=()):
    """A GGUF byte-level vocabulary as convert_hf_to_gguf.py writes one;
    pre None: no tokenizer.ggml.pre."""
    toks, merges, _, _ = spec
    names = [byte_level(t) for t in toks] + ["<s>", "</s>"]
    types = [1] * len(toks) + [3, 3]
    kvs = [("tokenizer.ggml.model", "str", "gpt2")] + ([("tokenizer.ggml.pre", "str", pre)] if pre else []) + [
        ("tokenizer.ggml.tokens", "arr:str", names), ("tokenizer.ggml.token_type", "arr:i32", types),
        ("tokenizer.ggml.merges", "arr:str", [byte_level(a) + " " + byte_level(b) for a, b in merges]),
        ("tokenizer.ggml.bos_token_id", "u32", len(toks)), ("tokenizer.ggml.eos_token_id", "u32", len(toks) + 1)]
    G.write_gguf(str(path), kvs + list(extra), [])
    return str(path)


def gcore_ids(path, texts):
    """gcore-run --tokenize's ids of each text (bytes), one call."""
    exe = os.path.join(os.environ.get("GCORE_BIN", os.path.join(ROOT, "bin")), "gcore-run")
    p = subprocess.run([exe, "--tokenizer", path, "--tokenize", "--null"], input=b"\0".join(texts) + b"\0",
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    lines = p.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1, p.stdout
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def texts_for(type_name):
    """The corpus, and the invalid UTF-8 where the reference models it (its
    runs of valid text cannot tell $ at a run's end from $ at the word's)."""
    return corpus() + ([] if any("$" in p and "\\$" not in p for p in TYPES[type_name][0]) else INVALID)


_REF = {}


def reference(type_name, spec):
    if type_name not in _REF:
        _REF[type_name] = [reference_ids(type_name, t, spec[2], spec[3]) for t in texts_for(type_name)]
    return _REF[type_name]


# ------------------------------------------------------------------ tests

@pytest.mark.parametrize("name", sorted(NAMES))
def test_pre_tokenizer_matches_llama_cpp_reference(gc, vocab_spec, name):
    """Each name's vocabulary tokenizes the corpus (digit runs, contractions,
    CamelCase, scripts, whitespace, punctuation runs, emoji, invalid
    UTF-8) as the reference of its llama.cpp type does."""
    kind = NAMES[name]
    path = write_vocab(gc.dir / "v.gguf", vocab_spec, name)
    texts = texts_for(kind)
    got, want = gcore_ids(path, texts), reference(kind, vocab_spec)
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, "\n".join(f"{t!r}\n  words {pre_split(kind, t)}\n  got  {g}\n  want {w}"
                              for t, g, w in bad[:4]) + f"\n({len(bad)} of {len(texts)} differ; type {kind})"


def test_missing_pre_is_llama_cpp_default(gc, vocab_spec):
    """No tokenizer.ggml.pre (older conversions): llama.cpp's default split,
    four regexes in turn (punctuation runs, GPT-2's, digit runs, three
    ASCII digits), not GPT-2's regex alone; gcore-run says so on stderr in
    one line (the note itself: test_tokenizer.c, pre_note_and_add_bos), and
    says nothing for a file that names its pre-tokenizer."""
    path = write_vocab(gc.dir / "v.gguf", vocab_spec, None)
    for pre, said in ((None, True), ("default", True), ("gpt-2", False), ("llama-bpe", False)):
        p = write_vocab(gc.dir / f"n{pre}.gguf", vocab_spec, pre)
        r = gc("gcore-run", "--tokenizer", p, "--tokenize", input="x")
        assert r.rc == 0, r
        lines = r.err.splitlines()
        assert (len(lines) == 1 and lines[0].startswith("gcore-run: ") and "default pre-tokenizer" in lines[0]
                if said else r.err == ""), (pre, r.err)
    texts = texts_for("DEFAULT")
    assert gcore_ids(path, texts) == reference("DEFAULT", vocab_spec)
    gpt2 = [reference_ids("GPT2", t, vocab_spec[2], vocab_spec[3]) for t in texts]
    assert gpt2 != reference("DEFAULT", vocab_spec)
    assert pre_split("DEFAULT", b"x=1234567!!") == [b"x", b"=", b"123", b"456", b"7", b"!!"]


def test_missing_special_ids_are_llama_cpps_defaults(gc, vocab_spec):
    """A byte-level GGUF vocabulary without bos/eos token ids: llama.cpp's
    loader takes 11 for both (its defaults for "gpt2")."""
    path = str(gc.dir / "v.gguf")
    toks, merges, _, _ = vocab_spec
    names = [byte_level(t) for t in toks] + ["<s>", "</s>"]
    kvs = [("tokenizer.ggml.model", "str", "gpt2"), ("tokenizer.ggml.pre", "str", "llama-bpe"),
           ("tokenizer.ggml.tokens", "arr:str", names), ("tokenizer.ggml.token_type", "arr:i32",
                                                          [1] * len(toks) + [3, 3]),
           ("tokenizer.ggml.merges", "arr:str", [byte_level(a) + " " + byte_level(b) for a, b in merges])]
    G.write_gguf(path, kvs, [])
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", "--bos", input="x")
    assert r.rc == 0 and [int(x) for x in r.out.split()] == [11] + gcore_ids(path, [b"x"])[0], r


def test_unknown_pre_is_refused(gc, vocab_spec):
    for name in ["kimi-k2", "gemma4", "superbpe", "roberta-bpe", "Qwen2", "qwen2 ", "\xff"]:
        path = write_vocab(gc.dir / "v.gguf", vocab_spec, name)
        r = gc("gcore-run", "--tokenizer", path, "--tokenize", input="x")
        assert_clean_error(r, "gcore-run", "pre-tokenizer", "is not supported", "gcore knows", "llama-bpe",
                           "tekken", "qwen2", "smollm", "falcon3", "deepseek-r1-qwen")


def test_pre_of_another_type_is_refused(gc, vocab_spec):
    path = write_vocab(gc.dir / "v.gguf", vocab_spec, None, [("tokenizer.ggml.pre", "u32", 7)])
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "tokenizer.ggml.pre")


def test_add_sep_token_is_refused(gc, vocab_spec):
    path = write_vocab(gc.dir / "v.gguf", vocab_spec, "gpt-2", [("tokenizer.ggml.add_sep_token", "bool", True)])
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "tokenizer.ggml.add_sep_token")
    path = write_vocab(gc.dir / "v.gguf", vocab_spec, "gpt-2", [("tokenizer.ggml.add_sep_token", "bool", False)])
    assert gcore_ids(path, [b"x"]) == [[ord("x")]]


# Types whose splits are the same though their regexes are spelt apart.
SAME_SPLIT = {
    ("BAILINGMOE", "QWEN2"): "the same contractions; \\s*[\\r\\n] ends where \\s*[\\r\\n]+ does, at the last newline",
    ("MINICPM5", "LLAMA3"): "its digit triples first are the ones \\p{N}{1,3} takes (add_bos differs: a C unit test)",
}


@pytest.mark.reference_only
def test_corpus_tells_the_types_apart(vocab_spec):
    """The corpus and vocabulary give different ids under every two types
    whose splits or ignore_merges differ (all but SAME_SPLIT's pairs), so
    a name mapped to another type fails
    test_pre_tokenizer_matches_llama_cpp_reference (gcore's test)."""
    seen = {}
    for kind, (res, ignore, _) in TYPES.items():
        ids = [reference_ids(kind, t, vocab_spec[2], vocab_spec[3]) for t in corpus()]
        for other, (ores, oignore, oids) in seen.items():
            same = (ores, oignore) == (tuple(res), ignore) or (kind, other) in SAME_SPLIT
            assert same or oids != ids, f"{kind} and {other} give the same ids"
        seen[kind] = (tuple(res), ignore, ids)
    assert len({tuple(r) for r, _, _ in TYPES.values()}) == len(TYPES) - 1  # DBRX is LLAMA3 without the flags
