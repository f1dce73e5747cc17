"""The tests' own judge of JSON mode, independent of models/jsonmode.c:
whether bytes are one JSON object (Python's strict json module), and
whether they are the beginning of one, found by brute force: some short
completion (a filler for the state the text stops in, then the closers
its open brackets need) makes an object Python parses. Also the limits
the recognizer adds to the grammar (models/jsonmode.h)."""
import codecs
import json

LIMIT_DEPTH, LIMIT_WS = 32, 24  # GC_JSON_DEPTH, GC_JSON_WS

# what may stand between a text and its closers: a value, the rest of a
# literal, an escape or number, a string's end, a key's rest
_FILLS = ["", "0", "\"", "n\"", "0\"", "00\"", "000\"", "0000\"", "\"\":0", "{}", "rue", "ue", "e", "alse",
          "lse", "se", "ull", "ll", "l"]
_FILLS = _FILLS + [f + ":0" for f in _FILLS] + [f + "\":0" for f in ["", "n", "0", "00", "000", "0000"]]


def is_object(b):
    """One JSON object and nothing around it but leading whitespace; no NaN
    or Infinity; valid UTF-8."""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if s != s.rstrip(" \t\n\r") or s.lstrip(" \t\n\r") != s.lstrip(" \t\n\r").lstrip():
        return False

    def bad(c):
        raise ValueError(c)
    try:
        v = json.loads(s, parse_constant=bad)
    except ValueError:
        return False
    return isinstance(v, dict)


def _closers(s):
    """The brackets s leaves open, closed innermost first; None inside a string."""
    stack, in_str, esc = [], False, False
    for c in s:
        if in_str:
            in_str = esc or c != "\""
            esc = not esc and c == "\\"
        elif c == "\"":
            in_str = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]" and stack:
            stack.pop()
    return None if in_str else "".join(reversed(stack))


def within_limits(b):
    """No more whitespace in a row outside strings, nor nesting, than the
    recognizer allows."""
    depth = ws = 0
    in_str = esc = False
    for c in b.decode("utf-8", "replace"):
        if in_str:
            in_str = esc or c != "\""
            esc = not esc and c == "\\"
            continue
        ws = ws + 1 if c in " \t\n\r" else 0
        if ws > LIMIT_WS:
            return False
        depth += c in "{[" and 1 or -(c in "}]")
        if depth > LIMIT_DEPTH:
            return False
        in_str = c == "\""
    return True


def is_prefix(b):
    """b begins some JSON object (within the limits). A character cut short
    at the end is completed first (each way its lead byte allows)."""
    if not within_limits(b):
        return False
    try:
        d = codecs.getincrementaldecoder("utf-8")()
        d.decode(b, final=False)
    except UnicodeDecodeError:
        return False
    tails = [b""]
    if d.getstate()[0]:
        tails = [bytes(t) for k in (1, 2, 3) for t in
                 ([x] * k for x in (0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF))]
    for t in tails:
        try:
            s = (b + t).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not s.strip():
            return True
        for f in _FILLS:
            q = s + f
            c = _closers(q)
            if c is not None and is_object((q + c).encode()):
                return True
    return False
