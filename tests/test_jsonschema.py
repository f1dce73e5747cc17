"""JSON mode under a JSON Schema (models/jsonschema.c, the recognizer of
models/jsonmode.c) against an independent validator, Debian's
python3-jsonschema (Draft 2020-12):
- sound: every document the recognizer accepts whole and complete is one
  strict JSON object (tests/jsonref.py) that the validator accepts (a key
  of an open object written twice: whichever value a reader keeps), with
  no listed property written twice: the random walks over the bytes it allows, and
  one-byte mutations of valid documents;
- no dead ends: a walk never reaches a point where no byte may come and
  the document is not complete (tests/c/test_jsonmode.c's `walk`);
- complete enough: documents made from each schema here in Python (its own
  generator, not gcore's), written as json.dumps writes them, are
  accepted whole;
- schemas outside the subset are refused with their path.
The C unit test does the named cases and the token mask under a schema."""
import json
import math
import os
import random
import re
import subprocess

import pytest

from jsonref import is_object, within_limits
from test_c_units import CDIR

jsonschema = pytest.importorskip("jsonschema", reason="python3-jsonschema is absent: run 'make deps-test'")

PET = {"type": "object", "properties": {"kind": {"enum": ["cat", "dog", "café"]}, "age": {"type": "integer"}},
       "required": ["kind"], "additionalProperties": False, "title": "Pet"}
NODE = {"type": "object", "properties": {"v": {"type": "number"},
                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        "required": ["v"]}
SCHEMAS = {
    # pydantic's shapes: $defs, Optional, enums, a dict, an open object, recursion, any
    "person": {"$defs": {"Pet": PET, "Node": NODE}, "title": "Person", "type": "object", "properties": {
        "name": {"type": "string", "description": "d"},
        "nick": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "age": {"type": "integer"}, "height": {"type": "number"}, "ok": {"type": "boolean"},
        "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}},
        "best": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}]},
        "scores": {"type": "object", "additionalProperties": {"type": "integer"}},
        "extra": {"type": "object", "properties": {"x": {"const": "X"}}, "additionalProperties": True},
        "tree": {"$ref": "#/$defs/Node"}, "any": {}},
        "required": ["name", "age"], "additionalProperties": False},
    # OpenAI's structured-outputs example (strict: every field required, no others)
    "steps": {"type": "object", "properties": {
        "steps": {"type": "array", "items": {"type": "object", "properties": {
            "explanation": {"type": "string"}, "output": {"type": "string"}},
            "required": ["explanation", "output"], "additionalProperties": False}},
        "final_answer": {"type": "string"}}, "required": ["steps", "final_answer"], "additionalProperties": False},
    "types": {"type": "object", "properties": {"v": {"type": ["integer", "null", "string"]},
                                               "w": {"type": ["number", "boolean"]}}, "required": ["v", "w"]},
    "enums": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue", "", "gr"]},
                                               "c2": {"const": "only"}, "colour": {"type": "string"}},
              "required": ["color"]},
    "dict": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
    "tree": {"type": "object", "properties": {"name": {"type": "string"},
                                              "children": {"type": "array", "items": {"$ref": "#"}}},
             "required": ["name"]},
    "draft7": {"definitions": {"A": {"type": "object", "properties": {"x": {"type": "integer"}},
                                     "required": ["x"]}},
               "type": "object", "properties": {"a": {"allOf": [{"$ref": "#/definitions/A"}], "description": "d"},
                                                "b": {"oneOf": [{"type": "array"}, {"type": "boolean"}]}},
               "required": ["a"]},
    "wide": {"type": "object", "properties": {f"p{i}": {"type": ["integer", "string"]} for i in range(64)},
             "required": [f"p{i}" for i in range(0, 64, 3)], "additionalProperties": False},
    "untyped": {"properties": {"a": {"type": "integer"}, "b": {"items": {"enum": ["x"]}}}},
    "counts": {"type": "object", "properties": {
        "pair": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        "some": {"type": "array", "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 1},
                 "minItems": 1, "maxItems": 3},
        "none": {"type": "array", "maxItems": 0}}, "required": ["pair", "some"]},
    # enums and consts of every scalar (pydantic's Literal, Optional[Literal]), strings' lengths
    "scalars": {"type": "object", "properties": {
        "n": {"enum": [1, 10, -2.5, 1000.0, 0]},
        "m": {"enum": ["a\"b", "x/y", "é", True, None, 7, "", "a b\t"]},
        "i": {"type": "integer", "enum": [1.5, 2, "q", 30]},
        "lit": {"anyOf": [{"enum": [1, 2], "type": "integer"}, {"type": "null"}]},
        "c": {"const": False}, "z": {"const": None},
        "s": {"type": "string", "minLength": 2, "maxLength": 3},
        "t": {"type": ["string", "null"], "maxLength": 1},
        "u": {"minLength": 1},
        "e": {"type": "array", "items": {"type": "string", "maxLength": 0}},
        "r": {"type": "integer", "minimum": 1, "maximum": 5}, "p": {"type": ["integer", "null"], "exclusiveMinimum": 0},
        "q": {"type": "integer", "minimum": -2.5, "exclusiveMaximum": 120.0}, "k": {"type": "integer", "maximum": -10},
        "big": {"type": "integer", "minimum": 10**17, "maximum": 10**18 - 1},
        "conf": {"type": "number", "minimum": 0, "maximum": 1}, "temp": {"exclusiveMinimum": -2.5, "exclusiveMaximum": 1e3},
        "neg": {"type": ["number", "null"], "maximum": -0.001}, "pin": {"type": "number", "minimum": 0.1, "maximum": 0.1},
        "tiny": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.001}},
        "required": ["n", "s", "r", "conf"]},
    # pydantic's tuples (prefixItems; items false: no more)
    "tuples": {"type": "object", "properties": {
        "pt": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2},
        "open": {"type": "array", "prefixItems": [{"type": "boolean"}, {"enum": [1, "x"]}], "items": {"type": "null"}},
        "closed": {"type": "array", "prefixItems": [{"type": "array", "prefixItems": [{"const": 0}], "items": False},
                                                    {"type": "number"}], "items": False, "minItems": 1},
        "deep": {"type": "array", "prefixItems": [{"type": "integer"}, {"$ref": "#"}], "minItems": 1}},
        "required": ["pt"]},
    # pydantic's discriminated unions: objects told apart by a tag (written first)
    "union": {"$defs": {
        "Cat": {"type": "object", "properties": {"pet_type": {"const": "cat", "type": "string"},
                                                 "meows": {"type": "integer", "minimum": 0}},
                "required": ["pet_type", "meows"], "additionalProperties": False},
        "Dog": {"type": "object", "properties": {"barks": {"type": "number"}, "pet_type": {"enum": ["dog", "puppy"]},
                                                 "friend": {"$ref": "#/$defs/Pet"}},
                "required": ["pet_type"]},
        "Pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "discriminator": {"propertyName": "pet_type"}}},
        "type": "object", "properties": {
            "pet": {"$ref": "#/$defs/Pet"},
            "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}},
            "maybe": {"anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}, {"type": "null"}, {"type": "string"}]}},
        "required": ["pet"], "additionalProperties": False},
    # patterns (ECMA-262, a match anywhere unless anchored), beside lengths, in arrays, untyped
    "patterns": {"type": "object", "properties": {
        "date": {"type": "string", "pattern": r"^\d{4}-(0[1-9]|1[0-2])-\d{2}$"},
        "word": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 6},
        "digit": {"type": "string", "pattern": r"\d"},
        "code": {"type": ["string", "null"], "pattern": "^[A-Z]{3}$"},
        "tags": {"type": "array", "items": {"type": "string", "pattern": r"^#\w+$"}, "maxItems": 3},
        "esc": {"type": "string", "pattern": '^a\n"b\\\\/?$'},
        "uni": {"type": "string", "pattern": "^[\u00e0-\u00ff\u20ac]{1,3}$"},
        "loose": {"pattern": "^x"}},
        "required": ["date", "word"], "additionalProperties": False},
    # multipleOf on integers (an integral one, a fractional one: multiples of 3) and on numbers
    "multiples": {"type": "object", "properties": {
        "five": {"type": "integer", "multipleOf": 5}, "three": {"type": "integer", "multipleOf": 3, "minimum": -10,
                                                                "maximum": 10},
        "half3": {"type": "integer", "multipleOf": 1.5}, "cents": {"type": "number", "multipleOf": 0.01, "minimum": 0,
                                                                   "maximum": 100},
        "quarter": {"type": "number", "multipleOf": 0.25}, "big": {"type": ["number", "null"], "multipleOf": 2.5,
                                                                   "exclusiveMaximum": 10}},
        "required": ["five", "cents"], "additionalProperties": False},
    # uniqueItems: pydantic's sets of an Enum or a Literal (each value at most once), and of at most one item
    "sets": {"$defs": {"Color": {"enum": ["red", "green", "blue"], "type": "string", "title": "Color"}},
             "type": "object", "properties": {
                 "colors": {"type": "array", "items": {"$ref": "#/$defs/Color"}, "uniqueItems": True},
                 "flags": {"type": "array", "items": {"enum": [True, False, None, "x"]}, "uniqueItems": True,
                           "minItems": 1},
                 "some": {"type": "array", "items": {"enum": ["a", "b", "c", "d"]}, "uniqueItems": True, "maxItems": 2},
                 "one": {"type": "array", "uniqueItems": True, "maxItems": 1}},
             "required": ["colors", "flags"], "additionalProperties": False},
    # propertyNames: a dict's keys under a pattern and lengths (pydantic's dict of constrained strings)
    "keys": {"type": "object", "properties": {
        "d": {"type": "object", "properties": {"id": {"type": "integer"}},
              "additionalProperties": {"type": "boolean"},
              "propertyNames": {"pattern": "^[a-z_]+$", "minLength": 2, "maxLength": 6}},
        "e": {"type": "object", "additionalProperties": {"type": "integer"},
              "propertyNames": {"type": "string", "pattern": "^x", "maxLength": 3}}},
        "additionalProperties": False},
    # formats OpenAI's structured outputs enforce (checked by the validator's format checker)
    "formats": {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"},
        "t": {"type": ["string", "null"], "format": "time"}, "id": {"type": "string", "format": "uuid"},
        "ip": {"type": "string", "format": "ipv4"}, "mail": {"type": "string", "format": "email"},
        "other": {"type": "string", "format": "colour"}, "maybe": {"type": "string", "format": "date", "nullable": True},
        "n": {"type": "integer", "nullable": False}},
        "required": ["day", "id"], "additionalProperties": False},
}
# strings in each pattern's language, for the generator (the validator checks them too)
EXAMPLES = {r"^\d{4}-(0[1-9]|1[0-2])-\d{2}$": ["2024-12-06", "0000-01-99"], "^[a-z]+$": ["ab", "abcdef", "zz"],
            r"\d": ["7", "a1", "x 2 y", "é9\n"], "^[A-Z]{3}$": ["ABC", "ZZZ"], r"^#\w+$": ["#a", "#A_9"],
            '^a\n"b\\\\/?$': ['a\n"b\\', 'a\n"b\\/'], "^[\u00e0-\u00ff\u20ac]{1,3}$": ["é", "ÿ€à"],
            "^x": ["x", "xyz", "x\n"]}
FORMAT_EXAMPLES = {"date": ["2024-02-29", "1999-12-31", "0001-01-01"], "time": ["23:59:59Z", "00:00:00.123456789+05:30"],
                   "date-time": ["2024-12-06T01:02:03Z", "2000-02-29T12:00:00.5-08:00"],
                   "uuid": ["123e4567-e89b-12d3-a456-426614174000", "FFFFFFFF-0000-4AAA-8BBB-0123456789ab"],
                   "ipv4": ["0.0.0.0", "255.255.255.255", "192.168.1.20"], "email": ["jane.doe+x@mail.example.org", "a@b.co"]}
CHARS = ["a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x00", "é", "€", "😀", "}", "]", ",", ":"]


def run(mode, records, *args):
    data = b"".join(b"%d\n" % len(r) + r for r in records)
    p = subprocess.run([os.path.join(CDIR, "test_jsonmode"), mode, *map(str, args)], input=data,
                       capture_output=True, timeout=300)
    return p


def judge(schema, docs):
    """The recognizer's verdicts: [(bytes accepted, complete at the end)]."""
    p = run("schema", [json.dumps(schema).encode()] + docs)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    assert lines[0] == "ok", lines[0]
    return [tuple(map(int, line.split())) for line in lines[1:]]


def walks(schema, seed, n):
    p = run("walk", [json.dumps(schema).encode()], seed, n)
    assert p.returncode == 0, p.stderr.decode(errors="replace")  # a dead end names itself here
    out, rest = [], p.stdout
    while rest:
        head, rest = rest.split(b"\n", 1)
        k = int(head)
        out.append(rest[:k])
        rest = rest[k + 1:]
    assert len(out) == n
    return out


def first_wins(pairs):
    out = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out


def rfc3339(x, date=True):
    """RFC 3339's date-time (date: else its full-time), checked in Python:
    the shape by a regular expression, the values by datetime (the days of
    each month, leap years); this Debian's jsonschema lacks both checkers."""
    import datetime
    t = r"\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)"
    if not isinstance(x, str) or not re.fullmatch((r"\d{4}-\d\d-\d\d[Tt]" if date else "") + t, x, re.A):
        return not isinstance(x, str)
    try:
        datetime.datetime.fromisoformat((x if date else "2000-01-01T" + x).upper().replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


def multiple_of(validator, m, instance, schema):
    """multipleOf exactly, on the decimals as written (python3-jsonschema's
    divides doubles: 0.07 / 0.01 is not 7 there)."""
    from decimal import Decimal
    if validator.is_type(instance, "number") and Decimal(repr(instance)) % Decimal(repr(m)) != 0:
        yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {m!r}")


def type_or_null(validator, types, instance, schema):
    """type, with OpenAPI 3.0's nullable (which OpenAI's zod helper writes)."""
    if not (instance is None and schema.get("nullable") is True):
        yield from jsonschema.Draft202012Validator.VALIDATORS["type"](validator, types, instance, schema)


Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"multipleOf": multiple_of,
                                                                           "type": type_or_null})
FORMATS = jsonschema.FormatChecker()  # python3-jsonschema's, with RFC 3339's date-time and time
FORMATS.checks("date-time")(rfc3339)
FORMATS.checks("time")(lambda x: rfc3339(x, False))


def valid(schema, b):
    """A strict JSON object that the validator accepts however a reader
    takes a key written twice (an open object's: the recognizer checks
    every value, and a listed property is never written twice): the last
    value (Python's json) or the first."""
    if not is_object(b):
        return False
    text = b.decode("utf-8")
    check = Validator(schema, format_checker=FORMATS).is_valid
    return check(json.loads(text)) and check(json.loads(text, object_pairs_hook=first_wins))


def listed_once(schema, b):
    """No listed property of the root object written twice."""
    seen = [k for k, _ in json.loads(b.decode("utf-8"), object_pairs_hook=lambda p: p)]
    return all(seen.count(k) < 2 for k in schema.get("properties", {}))


def resolve(root, s):
    while "$ref" in s:
        ref = s["$ref"]
        s = root if ref == "#" else root[ref.split("/")[1]][ref.split("/")[2]]
    return s


def rand_str(rng):
    return "".join(rng.choice(CHARS) for _ in range(rng.randrange(6)))


def rand_any(rng, depth):
    k = rng.randrange(7 if depth < 3 else 4)
    return ([None, True, 3, -2.5e-3][rng.randrange(4)] if k == 0 else rng.randrange(-99, 99) if k == 1 else
            rand_str(rng) if k in (2, 3) else [rand_any(rng, depth + 1) for _ in range(rng.randrange(3))]
            if k == 4 else {rand_str(rng): rand_any(rng, depth + 1) for _ in range(rng.randrange(3))})


def of_type(v, t):
    """Whether value v has type t (a name or a list), integers being
    numbers without a fraction as Python holds them."""
    ok = {"integer": lambda: isinstance(v, int) and not isinstance(v, bool),
          "number": lambda: isinstance(v, (int, float)) and not isinstance(v, bool),
          "string": lambda: isinstance(v, str), "boolean": lambda: isinstance(v, bool), "null": lambda: v is None}
    return any(ok[x]() for x in (t if isinstance(t, list) else [t]))


def int_range(s):
    """The least and greatest integer s's bounds allow (None: unbounded)."""
    import math
    lo = [math.ceil(s["minimum"])] if "minimum" in s else []
    lo += [math.floor(s["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in s else []
    hi = [math.floor(s["maximum"])] if "maximum" in s else []
    hi += [math.ceil(s["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in s else []
    return max(lo) if lo else None, min(hi) if hi else None


def gen(root, s, rng, depth=0):
    """A random instance of schema s (within root), by this test's reading
    of JSON Schema: what gcore should accept (the root: an object)."""
    s = resolve(root, s)
    if depth == 0:
        s = dict(s, type="object")
    if "allOf" in s:
        return gen(root, s["allOf"][0], rng, depth)
    if "anyOf" in s or "oneOf" in s:
        branches = s.get("anyOf") or s["oneOf"]
        b = rng.choice(branches)
        v = gen(root, b, rng, depth)
        objs = [resolve(root, x) for x in branches if resolve(root, x).get("type") == "object"]
        if len(objs) > 1 and isinstance(v, dict):  # a tagged union: the tag written first
            tag = next(k for k in objs[0]["required"] if all(k in o["required"] for o in objs))
            v = {tag: v[tag], **{k: x for k, x in v.items() if k != tag}}
        return v
    if "const" in s:
        return s["const"]
    if "enum" in s:  # those of the schema's type (gcore leaves the others out)
        return rng.choice([v for v in s["enum"] if "type" not in s or of_type(v, s["type"])])
    types = s.get("type", ["object", "array", "string", "integer", "number", "boolean", "null"])
    t = rng.choice(types if isinstance(types, list) else [types])
    if depth > 4 and t in ("object", "array") and not s.get("required"):
        t = "array" if t == "array" else t
    if t == "object":
        props, out = s.get("properties", {}), {}
        for k, sub in props.items():
            if k in s.get("required", []) or rng.random() < 0.5:
                out[k] = gen(root, sub, rng, depth + 1)
        addl = s.get("additionalProperties", not props)
        if addl is not False and depth < 4:
            for _ in range(rng.randrange(3)):
                k = ("x" + "".join(rng.choice("yzq_") for _ in range(rng.randint(1, 2))) if "propertyNames" in s
                     else "".join(rng.choice("xyzq") for _ in range(rng.randrange(1, 5))) if props else rand_str(rng))
                if k not in props:
                    out[k] = rand_any(rng, depth + 1) if addl is True else gen(root, addl, rng, depth + 1)
        items = list(out.items())
        rng.shuffle(items)
        return dict(items)
    if t == "array":
        pre = s.get("prefixItems", [])
        lo, hi = s.get("minItems", 0), s.get("maxItems", 2 if depth < 4 else 0)
        if s.get("items") is False:
            hi = min(hi if "maxItems" in s else len(pre), len(pre))
        items = resolve(root, s["items"]) if isinstance(s.get("items"), dict) else {}
        if s.get("uniqueItems") and "enum" in items:  # each value at most once
            return rng.sample(items["enum"], rng.randint(lo, min(max(lo, hi), len(items["enum"]))))
        return [gen(root, pre[i] if i < len(pre) else s.get("items", {}), rng, depth + 1)
                for i in range(rng.randint(lo, max(lo, hi)))]
    if s.get("nullable") is True and rng.random() < 0.3:
        return None
    if t == "string" and s.get("format") in FORMAT_EXAMPLES and "pattern" not in s:
        return rng.choice(FORMAT_EXAMPLES[s["format"]])
    if t == "string" and "pattern" in s:
        return rng.choice([x for x in EXAMPLES[s["pattern"]] if s.get("minLength", 0) <= len(x) <= s.get("maxLength", 99)])
    if t == "string":  # (with a length bound: the BMP's characters only, as gcore writes them)
        lo = s.get("minLength", 0)
        chars = [c for c in CHARS if ord(c) < 0x10000] if "minLength" in s or "maxLength" in s else CHARS
        return "".join(rng.choice(chars) for _ in range(rng.randint(lo, min(s.get("maxLength", lo + 5), lo + 5))))
    if t in ("integer", "number") and "multipleOf" in s:  # k multiples, within the bounds
        from decimal import Decimal
        m = Decimal(repr(s["multipleOf"]))
        lo, hi = s.get("minimum", -1000), s.get("maximum", s.get("exclusiveMaximum", 1000) - float(m))
        ks = [k for k in range(int(Decimal(repr(lo)) / m) - 1, int(Decimal(repr(hi)) / m) + 2)
              if lo <= k * m <= hi and (t == "number" or (k * m) % 1 == 0)]
        v = rng.choice(ks) * m
        return int(v) if t == "integer" or v % 1 == 0 and rng.random() < 0.5 else float(v)
    if t == "integer":
        lo, hi = int_range(s)
        if lo is None and hi is None:
            return rng.choice([0, -1, 7, 10**15, -10**18])
        lo = hi - 1000 if lo is None else lo
        hi = lo + 1000 if hi is None else hi
        return rng.choice([lo, hi, rng.randint(lo, hi)])
    if t == "number":
        if not any(k in s for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
            return rng.choice([0, 1.5, -2.25e-7, 3.0e21, 1e300, -0.0, 12])
        lo = s.get("minimum", s.get("exclusiveMinimum", -1e6))  # bounded: at most 15 digits, no exponent
        hi = s.get("maximum", s.get("exclusiveMaximum", 1e6))
        ok = [x for x in (lo, hi, (lo + hi) / 2, float(f"{lo + (hi - lo) * rng.random():.9g}"))
              if s.get("minimum", -math.inf) <= x <= s.get("maximum", math.inf) and "e" not in repr(x)
              and s.get("exclusiveMinimum", -math.inf) < x < s.get("exclusiveMaximum", math.inf)
              and sum(ch.isdigit() for ch in repr(x)) <= 15]
        return rng.choice(ok)
    if t == "boolean":
        return rng.random() < 0.5
    return None


def dumps(v, rng):
    text = json.dumps(v, ensure_ascii=False, indent=rng.choice([None, None, 1, "\t"]),
                      separators=rng.choice([None, (",", ":")]))
    return text.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_walks_are_valid_and_never_stuck(name):
    schema = SCHEMAS[name]
    docs = walks(schema, 7, 40)
    for d in docs:
        assert valid(schema, d) and listed_once(schema, d), d
    assert all(v == (len(d), 1) for d, v in zip(docs, judge(schema, docs)))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_instances_are_accepted(name):
    schema, rng = SCHEMAS[name], random.Random(name)
    docs = [dumps(gen(schema, schema, rng), rng) for _ in range(150)]
    docs = [d for d in docs if within_limits(d)]
    assert len(docs) > 120
    for d, (ok, done) in zip(docs, judge(schema, docs)):
        assert valid(schema, d), d  # the generator's own check
        assert (ok, done) == (len(d), 1), (d, ok, done)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_what_it_accepts_is_valid(name):
    """One-byte mutations of valid documents: whatever the recognizer
    accepts whole and complete, the validator accepts."""
    schema, rng = SCHEMAS[name], random.Random(name + "m")
    base = walks(schema, 11, 20) + [dumps(gen(schema, schema, rng), rng) for _ in range(60)]
    muts = []
    for d in base:
        for _ in range(20):
            i = rng.randrange(len(d))
            b = bytes([rng.choice([rng.randrange(256), *b"{}[]:,\"\\ 0-.eE+tfn1a"])])
            kind = rng.randrange(3)
            muts.append(d[:i] + b + d[i + 1:] if kind == 0 else d[:i] + b + d[i:] if kind == 1 else d[:i] + d[i + 1:])
    kept = 0
    for m, (ok, done) in zip(muts, judge(schema, muts)):
        if ok == len(m) and done:
            kept += 1
            assert valid(schema, m) and listed_once(schema, m), m
    assert kept > 20, kept  # mutations that stay valid are judged too


def test_formats_agree_with_the_format_checker():
    """Each enforced format, judged string by string against
    python3-jsonschema's format checker: what the recognizer accepts the
    checker accepts (edges: 29 February, days of months, leap centuries,
    octets, hyphens, offsets), and the canonical forms of valid values
    (Python's own: isoformat, uuid4, dotted quads) are accepted."""
    import datetime
    import uuid
    fc = FORMATS
    rng = random.Random(5)
    d0 = datetime.date(1, 1, 1)
    dates = [d0 + datetime.timedelta(days=rng.randrange(3652058)) for _ in range(300)]
    dates += [datetime.date(y, 2, 28) for y in (1900, 2000, 2024, 2100, 400, 4)]
    good = {"date": [d.isoformat() for d in dates] + [f"{y:04d}-02-29" for y in (2000, 2024, 400, 4, 1600)],
            "time": [f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}" +
                     rng.choice(["", ".5", ".123456789"]) + rng.choice(["Z", "+01:00", "-23:59"]) for _ in range(200)],
            "uuid": [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(100)] + [str(uuid.uuid1()).upper()],
            "ipv4": [".".join(str(rng.randrange(256)) for _ in range(4)) for _ in range(200)],
            "email": ["a@b.co", "x.y+z@mail.example.org", "u_1-2@d-1.io"]}
    good["date-time"] = [d + "T" + t for d, t in zip(good["date"], good["time"])]
    bad = {"date": ["2023-02-29", "1900-02-29", "2024-04-31", "2024-13-01", "2024-00-10", "0000-01-01", "2024-1-01",
                    "2024-01-32", "24-01-01", "2024-01-01 "],
           "time": ["24:00:00Z", "12:60:00Z", "12:00:60Z", "12:00:00", "12:00:00+24:00", "1:00:00Z", "12:00:00.Z"],
           "uuid": ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000",
                    "123e4567-e89b-02d3-a456-426614174000", "123e4567-e89b-12d3-c456-426614174000"],
           "ipv4": ["256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1..2.3"], "email": ["a", "a@b", "@b.co", "a@.co", "a@b.c", "a%b@c.co", "a@-b.co", "a@b-.co", ".a@b.co"],
           "date-time": ["2024-02-30T00:00:00Z", "2024-01-01t00:00:00Z", "2024-01-01T00:00:00"]}
    for f in good:
        schema = {"type": "object", "properties": {"v": {"type": "string", "format": f}}}
        muts = []
        for x in good[f][:60]:
            for _ in range(4):
                i = rng.randrange(len(x))
                muts.append(x[:i] + rng.choice("0123456789-:.TZ+a9") + x[i + 1:])
        cands = good[f] + bad[f] + muts
        docs = [json.dumps({"v": x}).encode() for x in cands]
        for x, d, (ok, done) in zip(cands, docs, judge(schema, docs)):
            accepted = ok == len(d) and done
            if accepted:
                assert fc.conforms(x, f), (f, x)  # sound
            if x in good[f]:
                assert accepted, (f, x)  # the canonical forms
            if x in bad[f]:
                assert not accepted, (f, x)


REFUSED = [
    ({"type": "object", "properties": {"d": {"anyOf": [{"type": "string"}], "format": "date"}}},
     "schema.properties.d: a format gcore writes (date, time, date-time, uuid, ipv4, email) beside $ref"),
    ({"type": "object", "properties": {"s": {"type": "string", "format": "date", "pattern": "^2"}}},
     "schema.properties.s: pattern beside a format gcore writes"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 1e-16}}},
     "schema.properties.a: multipleOf has at most 15 significant digits"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 0}}}, "multipleOf is a number above 0"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2, "minimum": 1, "maximum": 1}}},
     "no integer of at most 18 digits lies between the minimum and the maximum (and is a multiple of multipleOf)"),
    ({"type": "object", "properties": {"a": {"type": "number", "multipleOf": 3, "minimum": 1, "maximum": 2}}},
     "no number of at most 15 digits lies between"),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^[^\\0-\\uD7FF\\uE000-\\uFFFF]$",
                                             "maxLength": 1}}}, "no string of the lengths"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 2, "enum": [2]}}},
     "multipleOf beside enum or const are not supported"),
    ({"type": "object", "properties": {"a": {"type": "number", "maximum": 0.1 + 0.2}}}, "15 significant digits"),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "(?=a)"}}},
     "schema.properties.s: pattern: at byte 0: lookahead is not supported"),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^ab$", "maxLength": 1}}},
     "no string of the lengths minLength and maxLength allow matches the pattern"),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "a", "enum": ["a"]}}},
     "pattern beside enum or const is not supported"),
    ({"type": "object", "properties": {"s": {"type": "array", "uniqueItems": True}}},
     "schema.properties.s: uniqueItems is supported where the items are one of an enum"),
    ({"type": "object", "properties": {"s": {"type": "array", "uniqueItems": True, "items": {"enum": [1, 2]}}}},
     "uniqueItems is supported where"),
    ({"type": "object", "properties": {"s": {"type": "array", "uniqueItems": True, "minItems": 3,
                                             "items": {"enum": ["a", "b"]}}}}, "minItems is above the enum's values"),
    ({"type": "object", "properties": {"s": {"if": {"type": "string"}}}}, "schema.properties.s: if is not supported"),
    ({"type": "object", "properties": {"ID": {}}, "propertyNames": {"pattern": "^[a-z]+$"}},
     "schema.propertyNames: the property ID does not match propertyNames"),
    ({"type": "object", "propertyNames": {"enum": ["a"]}}, "propertyNames is supported with pattern, minLength"),
    ({"type": "array", "items": {}}, "the root must allow an object"),
    ({"type": "object", "properties": {"a": {"anyOf": [{"type": "object"}, {"$ref": "#/$defs/B"}]}},
      "$defs": {"B": {"type": "object"}}}, "needs a tag"),
    ({"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}}, "must differ in type"),
    ({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}, "levels of nesting"),
]


def test_schemas_outside_the_subset_are_refused_with_their_path():
    for schema, msg in REFUSED:
        p = run("schema", [json.dumps(schema).encode()])
        assert p.returncode == 0 and p.stdout.decode().startswith("error ") and msg in p.stdout.decode(), \
            (schema, p.stdout)
