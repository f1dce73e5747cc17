"""A template's declaration block (templates/README.md) as the tests read
it: name, ops, dtypes, parameters with their values and their default per
op (@param's, or an @defaults line's), constraints and launch expressions;
and the names gen derives from the op (PAIR, NORM, ROPE, BATCH), as
gen/template.c's op_values table gives them (test_epilogue.py checks the two
agree), and which of a template's ops the tests sample."""
import functools
import os
import re

GPU = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates", "gpu")

# PAIR: rows of B per column of C (2: the gate/up pair of W[2N,K]); NORM: 1
# where A's rows are RMS-normalised on the way; ROPE: 1 where C's columns are
# heads the epilogue rotates and writes to the KV cache; BATCH: 1 for a
# batched decode step (each row at its own position and cache slot). Other
# ops: PAIR 1, NORM 0, ROPE 0, BATCH 0.
OP_NAMES = {"gemm_swiglu": {"PAIR": 2, "NORM": 0, "ROPE": 0, "BATCH": 0},
            "rmsnorm_gemm": {"PAIR": 1, "NORM": 1, "ROPE": 0, "BATCH": 0},
            "rmsnorm_gemm_swiglu": {"PAIR": 2, "NORM": 1, "ROPE": 0, "BATCH": 0},
            "rmsnorm_gemm_rope_kv": {"PAIR": 1, "NORM": 1, "ROPE": 1, "BATCH": 0},
            "rmsnorm_gemm_bias_rope_kv": {"PAIR": 1, "NORM": 1, "ROPE": 1, "BATCH": 0},
            "rope_kv_batch": {"PAIR": 1, "NORM": 0, "ROPE": 0, "BATCH": 1},
            "attention_batch": {"PAIR": 1, "NORM": 0, "ROPE": 0, "BATCH": 1}}


def op_names(op):
    """{"PAIR": ..., "NORM": ..., "ROPE": ..., "BATCH": ...} for op."""
    return OP_NAMES.get(op, {"PAIR": 1, "NORM": 0, "ROPE": 0, "BATCH": 0})


def sampled_ops(ops):
    """The ops of a template whose space the tests sample (the others only
    at their defaults: the same code but the store): the first, the first
    gate/up one (PAIR = 2: another epilogue and tile), the first RoPE/KV one
    (ROPE = 1: the pairs' epilogue), the first batched decode step
    (BATCH = 1: another grid, arguments and workspace) and the first op
    that folds a step into rope (bias_rope_kv, qk_norm_rope_kv: more
    buffers, another pass over a head)."""
    out = ops[:1]
    for name, v in (("PAIR", 2), ("ROPE", 1), ("BATCH", 1)):
        out += [o for o in ops if op_names(o)[name] == v and o not in out][:1]
    out += [o for o in ops if o in ("bias_rope_kv", "qk_norm_rope_kv") and o not in out][:1]
    return out


def evaluate(expr, env):
    """A template expression (C-like integers) in Python: / is C's truncation."""
    py = re.sub(r"(?<![=!<>])/(?!/)", "//", expr).replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"!(?!=)", " not ", py)
    return int(eval(py, {"min": min, "max": max, "cdiv": lambda a, b: -(-a // b)}, dict(env)))


@functools.lru_cache(maxsize=None)
def template_path(name):
    """The file of the GPU template called name (its @template line)."""
    for f in sorted(os.listdir(GPU)):
        path = os.path.join(GPU, f)
        if f.endswith(".cu") and re.search(rf"@template\s+{re.escape(name)}\s", open(path).read().split("*/", 1)[0]):
            return path
    raise AssertionError(f"no GPU template {name}")


def constraints(name):
    """The @constraint expressions of the GPU template called name."""
    return parse(template_path(name))["constraints"]


def may_hold(exprs, env):
    """False where one of the constraints exprs that names nothing but env's
    names fails there; True otherwise (the others are gcore-gen's to judge).
    It spares a test a gcore-gen run for a sampled point outside a space:
    such a point is refused either way."""
    for c in exprs:
        names = set(re.findall(r"\b[A-Za-z_]\w*\b", c)) - {"min", "max", "cdiv"}
        if names <= set(env):
            try:
                if not evaluate(c, env):
                    return False
            except (SyntaxError, ZeroDivisionError):
                pass  # an expression Python reads otherwise: gcore-gen's
    return True


def _decl(head, kw):
    """The bodies of every '@kw' line, without their ' -- doc'."""
    return [m.split(" -- ")[0].strip() for m in re.findall(rf"@{kw}\s+([^\n]+)", head)]


def parse(path):
    """The declarations of the template at path."""
    text = open(path).read()
    head = text.split("*/", 1)[0]
    params = {}
    for m in re.finditer(r"@param\s+(\w+)\s+([-\d\s]+?)\s+default\s+(-?\d+)", head):
        params[m.group(1)] = ([int(v) for v in m.group(2).split()], int(m.group(3)))
    ops = _decl(head, "op")[0].split()
    defaults = {op: {k: d for k, (_, d) in params.items()} for op in ops}
    for line in _decl(head, "defaults"):
        if " if " in line:  # a target's defaults (gen/template.h): not the declared ones
            continue
        words = line.split()
        for op in [w for w in words if "=" not in w]:
            defaults[op].update({k: int(v) for k, v in (w.split("=") for w in words if "=" in w)})
    one = lambda kw, dflt: (_decl(head, kw) or [dflt])[0]
    return {"file": path, "name": one("template", ""), "backend": one("backend", ""),
            "kernel": one("kernel", ""), "ops": ops, "dtypes": one("dtypes", "").split(),
            "params": params, "defaults": defaults, "constraints": _decl(head, "constraint"),
            "applies": _decl(head, "applies"), "grid": one("grid", "1"), "block": one("block", "1"),
            "shmem": one("shmem", "0")}
