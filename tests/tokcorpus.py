"""tokcorpus.py — the strings the tokenizer tests and the benchmark encode:
ASCII, runs of whitespace, numbers of every length, code, emoji, CJK,
Arabic, combining marks and text with special tokens. Kept clear of the few
characters on which JavaScript's \\s and PCRE2's differ (U+FEFF, U+0085)."""

ASCII = [
    "", "Hello world", " Hello world", "Hello World!", "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "----======= '''''```````\"\"\"\"......!!!!!!?????? ~~~###$$$%%%^^^&&&***",
    "https://example.com/path?query=1&b=2#frag", "user@example.org", "CamelCaseIdentifier snake_case_name",
    "A", "a", "!", "  ", "(", "\n =", "' era", "3.14159", "1,000,000", "-42", "x=123456789;",
]

WHITESPACE = ([" " * k for k in range(1, 11)] + ["\t" * k for k in range(1, 5)] + ["\n" * k for k in range(1, 6)] +
              ["\r\n", "\r\n\r\n", "a  \t\n b", "line1\n\n\nline2   \n", "  leading", "trailing   ",
               " \t \t\t \t\n  \n   \n    \n     \n", "word \n  word\t\tword", "a\u00a0b", "\t\tindent\n\t\t\tmore",
               "    Hello\n    Hello", "x \n\n y"])

NUMBERS = ["".join(str((i * 7 + 3) % 10) for i in range(n)) for n in range(1, 21)] + \
          ["3" * n for n in range(1, 21)] + ["v" + "1" * n + "x" for n in (1, 4, 7, 13)] + \
          ["3.3 3..3 3...3", "1314151 一二三 ١٢٣ ٤٥٦", "2024-11-22T06:35:00Z", "0x7fffffff 0b1011 1e-5"]

CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "<div class=\"x\"><p>Hi &amp; bye</p></div>",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "x = [i for i in range(10) if i % 2 == 0]\nprint(x)",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))",
]

UNICODE = [
    "🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "🦙🦙🦙 llamas", "👨\u200d👩\u200d👧\u200d👦 family", "🇺🇸🇫🇷 flags", "😀😃😄😁",
    "你好，世界！", "日本語のテキストです。カタカナ", "한국어 텍스트입니다", "我想在apple工作1314151天～",
    "مرحبا بالعالم", "السلام عليكم ورحمة الله", "עברית טקסט",
    "e\u0301 caf\u00e9 cafe\u0301", "Cửa Việt", "a\u0300\u0301\u0302\u0303", "Z\u0334\u0359\u0313a\u0335l\u0337g\u0336o\u0338",
    "नमस्ते दुनिया", "สวัสดีครับ", "Привет, мир! Съешь же ещё этих мягких французских булок",
    "Führer ied 4 ½ months", "ឃើញអ្វីដែលខ្ញុំ", "Ÿ ÿ Ω ≈ ∑ ∫ √ ∞ → ⇒", "ａｂｃ　全角　スペース",
]

SPECIAL = {
    "llama3": ["<|begin_of_text|>Hello<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
               "a<|reserved_special_token_5|>b", "<|begin_of_text|><|begin_of_text|> x", "text <|end_of_text|> more",
               "<|eot_id|>\n\n<|start_header_id|>assistant<|end_header_id|>\n\n"],
    "llama2": ["<s>Hello</s>", "a<s>b", "<s> [INST] hi [/INST]", "x </s> <s> y", "<unk>"],
}


def corpus(which):
    return ASCII + WHITESPACE + NUMBERS + CODE + UNICODE + SPECIAL[which]


def mixed_text(nbytes):
    """A deterministic text of about nbytes bytes drawn from the corpus."""
    parts = ASCII[1:] + WHITESPACE + NUMBERS + CODE + UNICODE
    out, size, i = [], 0, 0
    while size < nbytes:
        s = parts[(i * 7919) % len(parts)] + (" " if i % 3 else "\n")
        out.append(s)
        size += len(s.encode())
        i += 1
    return "".join(out)


def random_words(nbytes, seed=1):
    """About nbytes of made-up words (Latin, accented, CJK, Cyrillic letters):
    few repeats, so a word cache rarely helps."""
    import random
    r = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzéüñ你好мир"
    out, size = [], 0
    while size < nbytes:
        w = "".join(r.choice(letters) for _ in range(r.randint(1, 12))) + r.choice([" ", " ", " ", "\n", ", ", ". "])
        out.append(w)
        size += len(w.encode())
    return "".join(out)
