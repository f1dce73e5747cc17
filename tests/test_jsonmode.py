"""JSON mode's recognizer (models/jsonmode.c) against Python's json module:
random documents (every nesting, number, string, escape and character
class, written with random whitespace) are accepted whole and complete
exactly at their end; one-byte mutations of them are judged as Python's
strict parser judges them, and are never refused before the byte that
changed (everything before it is the beginning of a valid document). The
C unit test (tests/c/test_jsonmode.c) does the table of named cases."""
import json
import os
import random
import subprocess

import pytest

from jsonref import is_object as strict_object, is_prefix, within_limits
from test_c_units import CDIR

CHARS = ["a", "Z", " ", "\"", "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f",
         "é", "€", "😀", "\u2028", "\ud7ff", "\ue000", "\U0010ffff"]


def rand_value(rng, depth):
    k = rng.randrange(9 if depth < 6 else 6)
    if k == 0:
        return rng.choice([True, False, None])
    if k == 1:
        return rng.randrange(-10**12, 10**12)
    if k == 2:
        return rng.choice([0.0, -0.0, 1.5, -2.25e-7, 3.0e21, 1e300, 0.1])
    if k in (3, 4, 5):
        return "".join(rng.choice(CHARS) for _ in range(rng.randrange(8)))
    if k in (6, 7):
        return {"".join(rng.choice(CHARS) for _ in range(rng.randrange(4))): rand_value(rng, depth + 1)
                for _ in range(rng.randrange(4))}
    return [rand_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def rand_doc(rng):
    """A random object as bytes: compact, indented, or spaced, ASCII-escaped
    or raw UTF-8, numbers sometimes rewritten with an exponent sign."""
    v = {f"k{i}": rand_value(rng, 1) for i in range(rng.randrange(5))}
    style = rng.randrange(3)
    text = json.dumps(v, ensure_ascii=rng.random() < 0.5,
                      indent=None if style == 0 else rng.choice([1, 2, "\t"]),
                      separators=(",", ":") if style == 2 else None)
    if rng.random() < 0.3:
        text = " \n" * rng.randrange(3) + text
    return text.encode("utf-8", "surrogatepass")


def judge(docs):
    """[(bytes accepted, bytes when done or -1)] of each document."""
    data = b"".join(b"%d\n" % len(d) + d for d in docs)
    p = subprocess.run([os.path.join(CDIR, "test_jsonmode"), "check"], input=data, capture_output=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = [tuple(map(int, line.split())) for line in p.stdout.decode().splitlines()]
    assert len(out) == len(docs)
    return out


def test_random_documents_are_accepted_and_complete_at_their_end():
    rng = random.Random(1)
    docs = [d for d in (rand_doc(rng) for _ in range(3000)) if within_limits(d)]
    assert len(docs) > 2500
    for d, (ok, done) in zip(docs, judge(docs)):
        assert strict_object(d), d
        assert (ok, done) == (len(d), len(d)), d


def test_mutations_are_judged_as_python_judges_them():
    rng = random.Random(2)
    base = [d for d in (rand_doc(rng) for _ in range(800)) if within_limits(d) and len(d) > 2]
    muts, firsts = [], []
    for d in base:
        for _ in range(8):
            i = rng.randrange(len(d))
            kind = rng.randrange(3)
            b = bytes([rng.choice([rng.randrange(256), *b"{}[]:,\"\\ 0-.eE+tfn"])])
            m = d[:i] + b + d[i + 1:] if kind == 0 else d[:i] + b + d[i:] if kind == 1 else d[:i] + d[i + 1:]
            if m != d and within_limits(m):
                muts.append(m)
                firsts.append(i)
    assert len(muts) > 5000
    agree = {True: 0, False: 0}
    for m, i, (ok, done) in zip(muts, firsts, judge(muts)):
        valid = strict_object(m)
        assert valid == (ok == len(m) and done == len(m)), (m, ok, done)
        assert ok >= i, (m, i, ok)  # m[:i] begins a valid document: never refused in it
        agree[valid] += 1
    assert agree[True] > 200 and agree[False] > 2000, agree  # both verdicts well represented


def test_refused_exactly_where_a_prefix_stops_being_one():
    """Where the recognizer refuses a byte, the text before it begins an
    object and the text with it begins none (the brute-force judge of
    tests/jsonref.py); where it accepts everything, the text begins one."""
    rng = random.Random(3)
    base = [d for d in (rand_doc(rng) for _ in range(300)) if within_limits(d) and len(d) > 2]
    muts = []
    for d in base:
        for _ in range(4):
            i = rng.randrange(len(d))
            b = bytes([rng.choice([rng.randrange(256), *b"{}[]:,\"\\ 0-.eE+tfn"])])
            muts.append(d[:i] + b + d[i + 1:])
    refused = 0
    for m, (ok, done) in zip(muts, judge(muts)):
        assert is_prefix(m[:ok]), (m, ok)
        if ok < len(m):
            refused += 1
            assert not is_prefix(m[:ok + 1]), (m, ok)
    assert refused > 300, refused


@pytest.mark.parametrize("which", ["llama3", "llama2"])
def test_mask_on_a_real_vocabulary(which):
    """The token mask's shortcuts (pieces that stay text inside a string;
    groups by first byte and by first byte after blanks) on Llama 3's
    byte-level and Llama 2's byte-fallback vocabularies: at every byte of
    a document and of a tool call the mask equals gc_json_allows id by id,
    and that equals the recognizer fed each piece
    (tests/c/test_jsonmode.c's check_vocab)."""
    from test_tokenizer import NPM
    if not os.path.exists(NPM[which]):
        pytest.skip(f"{NPM[which]} is absent: run 'make deps'")
    p = subprocess.run([os.path.join(CDIR, "test_jsonmode"), "vocab", NPM[which]], capture_output=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().split()[0] == "133", p.stdout
