"""Regular expressions (models/regex.c: JSON Schema's pattern, vLLM's
guided_regex) against an independent matcher, Python's re: every string
the compiled automaton accepts is a match and every match is accepted,
for hand-written patterns (the shapes people write: dates, phone numbers,
identifiers, e-mail-like, alternations, anchors in the middle) and for
random patterns over a small alphabet, in both readings (search: a match
anywhere, as JSON Schema's; full: the whole string) and with character
counts (minLength/maxLength beside a pattern). Python's re differs from
ECMA-262's in a few classes (\\d, \\w and \\s are Unicode there, '.' stops
only at \\n, '$' also before a final newline): `ecma()` writes each ECMA
pattern as a Python one with ECMA's meaning. Patterns outside the subset
are refused with the byte and the reason."""
import os
import random
import re
import subprocess

import pytest

from test_c_units import CDIR

# The class escapes as gcore reads them (models/regex.c: add_class_escape):
# what ECMA's, Python's and Rust's readings all agree on. S_ALL: the spaces
# all of them share; S_ANY: every space any of them knows.
S_ALL = "\t\n\x0b\x0c\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
S_ANY = S_ALL + "\x1c-\x1f\x85\ufeff"
ESC = {"d": "0-9", "w": "A-Za-z0-9_", "s": S_ALL}  # read as they are
ESC_NEG = {"d": "\\d", "w": "A-Za-z0-9_\x80-\U0010ffff", "s": S_ANY}  # inside a negated class (Python's \d: Nd)
ESC_UPPER = {"D": "[^\\d]", "W": "[\x00-/:-@\\[-^`{-\x7f]", "S": "[^" + S_ANY + "]"}


def ecma(p):
    """Pattern p (this subset, its class escapes as gcore reads them) as a
    Python pattern of the same language."""
    out, i, cls, neg = [], 0, False, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            e = p[i + 1]
            if e in "dws":
                out.append((ESC_NEG if neg else ESC)[e] if cls else "[" + ESC[e] + "]")
            elif e in "DWS":
                if cls:
                    raise ValueError("an upper-case class escape inside a class: not needed here")
                out.append(ESC_UPPER[e])
            else:
                out.append(p[i:i + 2])
            i += 2
            continue
        if cls:
            cls = c != "]"
            out.append(c)
        elif c == "[":
            cls, neg = True, p[i + 1:i + 2] == "^"
            out.append(c)
            if neg:
                out.append("^")
                i += 1
        elif c == ".":
            out.append("[^\n\r\u2028\u2029]")
        elif c == "$":
            out.append(r"(?!(?s:.))")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def run(pat, strings, mode=0, lo=-1, hi=-1):
    """(compile verdict line, [accepted]) from tests/c/test_jsonmode's regex mode."""
    recs = [pat.encode()] + [s.encode() for s in strings]
    data = b"".join(b"%d\n" % len(r) + r for r in recs)
    p = subprocess.run([os.path.join(CDIR, "test_jsonmode"), "regex", str(mode), str(lo), str(hi)], input=data,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    return lines[0], [line == "1" for line in lines[1:]]


def reference(pat, s, mode, lo=-1, hi=-1):
    """Python's verdict; with a length bound, only strings of the BMP's
    characters (whose lengths count alike in code points and UTF-16 units)."""
    py = re.compile(ecma(pat))
    m = py.fullmatch(s) if mode else py.search(s)
    bmp = (lo < 0 and hi < 0) or all(ord(c) < 0x10000 for c in s)
    return bool(m) and bmp and (lo < 0 or len(s) >= lo) and (hi < 0 or len(s) <= hi)


def strings_for(pat, rng, n):
    """Random strings over the pattern's own characters and a few others,
    and every string of length <= 3 over a small alphabet drawn from it."""
    alpha = sorted(set(c for c in pat if c.isprintable() and c not in "\\[]()|*+?{}^$") |
                   set("a0 _-.\n\u00e9\u2028\U0001F600\u0663"))  # (U+0663: an Arabic-Indic three)
    small = alpha[:5]
    out = {""}
    for a in small:
        out.add(a)
        for b in small:
            out.add(a + b)
            for c in small:
                out.add(a + b + c)
    while len(out) < n:
        out.add("".join(rng.choice(alpha) for _ in range(rng.randrange(0, 14))))
    return sorted(out)


# patterns as JSON Schemas, pydantic and vLLM's users write them
PATTERNS = [
    r"^\d{4}-\d{2}-\d{2}$", r"^\+?[0-9]{1,3}[- ]?\(?[0-9]{3}\)?[- ]?[0-9]{3}-?[0-9]{4}$",
    r"^[a-zA-Z_][a-zA-Z0-9_]*$", r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", r"^(yes|no|maybe)$", r"ab|^c|d$",
    r"^(?:[01]\d|2[0-3]):[0-5]\d$", r"colou?r", r"^\w+(\.\w+)*$", r"^[A-Z]{3}$", r"x*", r"^$", r"a{2,3}b{0,1}c?",
    r"^[\u00e0-\u00ff]+$", r"^\S+$", r"^.+$", r"[.]", r"\.", r"^(a|ab)(c|bcd)(d*)$", r"^[-+]?\d*\.?\d+$",
    r"^\x41\u00e9\/\-\$$", r"^(a*)*b$", r"^[a-c-]$", r"^[\d\s]+$", r"^\D\W\S$", r"(?:ab)+?c", r"a{3}?", r"^]}$",
    r"^\0?x$", r"^[\b]$",
]


@pytest.mark.parametrize("mode", [0, 1], ids=["search", "full"])
def test_patterns_agree_with_python_re(mode):
    rng = random.Random(7 + mode)
    for pat in PATTERNS:
        strs = strings_for(pat, rng, 300)
        head, got = run(pat, strs, mode)
        assert head.startswith("ok"), (pat, head)
        for s, g in zip(strs, got):
            assert g == reference(pat, s, mode), (pat, s, g)


def test_lengths_beside_a_pattern():
    rng = random.Random(3)
    for pat, lo, hi in [(r"^[a-z]+$", 3, 5), (r"a", 2, -1), (r"^\d*$", -1, 4), (r"^(ab)*$", 1, 7), (r"x|yy", 0, 2),
                        (r"^.*$", 10, 10), (r"b", 0, 0 + 1)]:
        strs = strings_for(pat, rng, 400)
        head, got = run(pat, strs, 0, lo, hi)
        assert head.startswith("ok"), (pat, head)
        for s, g in zip(strs, got):
            assert g == reference(pat, s, 0, lo, hi), (pat, lo, hi, s, g)


def rand_pattern(rng, depth=0):
    """A random pattern over a, b, c: literals, classes, '.', groups,
    alternation, quantifiers, anchors."""
    parts = []
    for _ in range(rng.randrange(1, 4)):
        r = rng.random()
        if r < 0.35:
            atom = rng.choice("abc")
        elif r < 0.5:
            atom = "[" + rng.choice(["", "^"]) + rng.choice(["a", "ab", "a-c", "bc", "b-c", "\\d"]) + "]"
        elif r < 0.58:
            atom = "."
        elif r < 0.78 and depth < 3:
            atom = "(" + rng.choice(["", "?:"]) + rand_pattern(rng, depth + 1) + ")"
        elif r < 0.84:
            parts.append(rng.choice("^$"))
            continue
        else:
            atom = rng.choice(["\\w", "\\D", "b"])
        q = rng.random()
        if q < 0.15:
            atom += "*"
        elif q < 0.25:
            atom += "+"
        elif q < 0.35:
            atom += "?"
        elif q < 0.45:
            m = rng.randrange(0, 3)
            atom += rng.choice(["{%d}" % m, "{%d,}" % m, "{%d,%d}" % (m, m + rng.randrange(0, 3))])
        parts.append(atom)
    p = "".join(parts)
    if rng.random() < 0.3:
        p += "|" + rand_pattern(rng, depth + 1)
    return p


def test_random_patterns_agree_with_python_re():
    rng = random.Random(11)
    alpha = "abc1 \n"
    strs = sorted({"".join(rng.choice(alpha) for _ in range(rng.randrange(0, 9))) for _ in range(600)})
    for k in range(160):
        pat, mode = rand_pattern(rng), k % 2
        head, got = run(pat, strs, mode)
        if not head.startswith("ok"):  # nothing matches: Python agrees
            assert head == "error no string matches the pattern", (pat, head)
            assert not any(reference(pat, s, mode) for s in strs), pat
            continue
        for s, g in zip(strs, got):
            assert g == reference(pat, s, mode), (pat, mode, s, g)


def test_class_escapes_every_reader_agrees_on():
    """\\d is [0-9], and \\D (or [^\\d]) no script's digit, since Python and
    Rust (pydantic) call U+0663 a digit; \\S no space any of them knows;
    \\W only ASCII's non-word characters (é is a word character there)."""
    for pat, strs, want in [(r"^\d$", ["3", "\u0663"], [True, False]), (r"^\D$", ["a", "\u0663", "3"], [True, False, False]),
                            (r"^[^\d]$", ["a", "\u0663"], [True, False]), (r"^\S$", ["a", "\x1c", "\ufeff", "\x85"],
                                                                            [True, False, False, False]),
                            (r"^\s$", [" ", "\ufeff"], [True, False]), (r"^\W$", ["-", "\u00e9"], [True, False])]:
        head, got = run(pat, strs, 1)
        assert head.startswith("ok") and got == want, (pat, got)


def test_escaped_nul_and_control_characters():
    """An escaped NUL (a byte the C parser once took for a class escape:
    fuzz_regex) is the character itself, as ECMA reads it."""
    head, got = run("^a\\\x00b\\\x01$", ["a\x00b\x01", "ab\x01", "a\x00b"], 1)
    assert head.startswith("ok") and got == [True, False, False], (head, got)


@pytest.mark.parametrize("pat,where,why", [
    ("(a", 2, "a group ( is not closed"), ("a)", 1, "a ')' without its '('"), ("*a", 0, "nothing to repeat"),
    ("a**", 2, "nothing to repeat"), ("^*", 1, "nothing to repeat"), ("a{,3}", 1, "quantifier"),
    ("a{2", 1, "quantifier"), ("{", 0, "must be escaped"), ("a{3,2}", 1, "m below n"), ("a{1001}", 1, "above 1000"),
    ("(?=a)", 0, "lookahead"), ("(?<!a)b", 0, "lookbehind"), ("(?<n>a)", 0, "named groups"), ("(?i)a", 0, "flags"),
    (r"(a)\1", 4, "backreferences"), (r"\bx", 1, "word boundaries"), (r"\p{L}", 1, "escape \\p"),
    (r"\cA", 1, "escape \\c"), (r"\x4", 1, "two hex digits"), (r"\ud800", 1, "surrogate"), ("[]", 1, "empty class"),
    ("[^]", 2, "empty class"), ("[a", 2, "not closed"), ("[z-a]", 4, "out of order"), (r"[\d-z]", 3, "class escape"),
    ("[[:alpha:]]", 1, "'['"), ("a\\", 2, "ends in"),
])
def test_refusals_name_the_byte_and_the_reason(pat, where, why):
    head, _ = run(pat, [])
    assert head.startswith("error at byte %d: " % where) and why in head, (pat, head)


def test_long_and_adversarial_patterns_are_refused_not_crashed():
    """Found on review: a long pattern recursed once a character (a stack
    overflow at 100,000); a pattern of many classes sorted its boundaries
    in quadratic time before the budget counted. Each is refused now, in
    a loop and by qsort; the budget counts every closure's states."""
    for pat, why in [("a" * 100000, "longer than 65536 bytes"), ("a" * 60000, "too large"),
                     ("a|" * 30000 + "a", "too large"), ("(" * 70 + "a" + ")" * 70, "nest too deeply"),
                     ("".join("[\\u%04x]" % (0x4000 - 2 * k) for k in range(9000)), "longer than 65536 bytes"),
                     ("[" + "".join("\\u%04x" % (0x6000 - 2 * k) for k in range(9000)) + "]", "ranges"),
                     ("(?:(?:(?:[\\u0100-\\u0178]?)?)?.){98}", "")]:
        head, _ = run(pat, [])
        assert why in head and (head.startswith("error") or not why), (pat[:40], head)
    # only surrogates (never a character) or, with a length bound, characters past the BMP: nothing matches
    head, _ = run("^[^\\0-\\uD7FF\\uE000-\\uFFFF]$", [], 0, -1, 1)
    assert head == "error no string of the lengths minLength and maxLength allow matches the pattern", head
    head, got = run("^[^\\0-\\uD7FF\\uE000-\\uFFFF]$", ["\U0001F600", "a"])
    assert head.startswith("ok") and got == [True, False], (head, got)


def test_limits_refuse_in_bounded_time():
    for pat, why in [("(a|b)*a" + "(a|b)" * 20, "too large"), ("a{1000}{1000}", "nothing to repeat"),
                     ("((a{1000}){1000})", "too large"), ("^[a-z]{0,1000}[0-9]{0,1000}[a-z]{0,1000}$", "too large"),
                     ("".join("[\\u%04x]" % (0x100 + 2 * k) for k in range(300)), "ranges")]:
        head, _ = run(pat, [])
        assert head.startswith("error") and why in head, (pat, head)
    head, _ = run("^a*$", [], 0, 0, 100000)
    assert "too many states" in head, head
    head, _ = run("^ab$", [], 0, 3, -1)
    assert head == "error no string of the lengths minLength and maxLength allow matches the pattern", head
