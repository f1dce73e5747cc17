"""The AMD matrix-core templates (@backend hip: gemm_mfma, gemm_wmma, and with B
in a block format gemm_q_mfma, gemm_q_wmma; gemv_mfma for batched decode
steps, gemv_qmfma for decode steps with B in a block format; attention_mfma,
attention_wmma for prefill attention; attention_decode_mfma and
attention_decode_wmma for decode attention, single and batched) compile offline
with clang-19 for their targets, for every op they serve (gemm,
gemm_add, gemm_swiglu; the GEMVs' rmsnorm_* too; attention) and every dtype: at the op's defaults, and for the
first op and the gate/up pair (PAIR = 2) at a sample of the space. Each code object
must contain the target's matrix instructions (v_mfma on gfx90a/gfx942
with the ISA's own spelling, v_wmma on gfx1100), spill nothing (no
scratch, no VGPR/SGPR spills in the code-object metadata), use no static
LDS (all of it is the @shmem dynamic buffer, which must fit in 64 KiB) and
run at the wavefront size the template assumes. Skipped, saying why,
without clang-19 and the LLVM tools.

The source is assembled the way gen/ does it (prelude, target constants,
dtype sizes and codes, parameters, #line, template), so this test does
not need the AMD compile drivers of gen/."""
import os
import random
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from tplhead import evaluate, op_names
from tplhead import parse as parse_head

CLANG = shutil.which("clang-19")
OBJDUMP = shutil.which("llvm-objdump-19")
READELF = shutil.which("llvm-readelf-19")
pytestmark = pytest.mark.skipif(not (CLANG and OBJDUMP and READELF),
                                reason="clang-19 / llvm-objdump-19 / llvm-readelf-19 not installed")

GPU = os.path.join(ROOT, "templates", "gpu")
DT = {"f32": (0, 4), "f16": (1, 2), "bf16": (2, 2)}
# B in a block format (prelude gc-quant's GC_Q*): code, bytes per block
QDT = {"q8_0": (5, 34), "q4_0": (6, 18), "q4_k": (7, 144), "q5_k": (8, 176), "q6_k": (9, 210)}
TARGETS = {"gfx90a": 64, "gfx942": 64, "gfx1100": 32}  # wavefront size
# gen's target constants for them (gen/target.c)
CONSTS = {"gfx90a": dict(GFX=910, NCU=110, VGPRS=512, MFMA=1, WMMA=0),
          "gfx942": dict(GFX=942, NCU=304, VGPRS=512, MFMA=1, WMMA=0),
          "gfx1100": dict(GFX=1100, NCU=96, VGPRS=256, MFMA=0, WMMA=1)}
LDS = 65536
# The instruction each (target, dtype) must show, as the disassembler spells it.
ISA = {("gfx90a", "f16"): "v_mfma_f32_(32x32x8|16x16x16)f16",
       ("gfx90a", "bf16"): "v_mfma_f32_(32x32x8|16x16x16)bf16_1k",
       ("gfx90a", "f32"): "v_mfma_f32_(32x32x2|16x16x4)f32",
       ("gfx942", "f16"): "v_mfma_f32_(32x32x8|16x16x16)_f16",
       ("gfx942", "bf16"): "v_mfma_f32_(32x32x8|16x16x16)_bf16",
       ("gfx942", "f32"): "v_mfma_f32_(32x32x2|16x16x4)_f32",
       ("gfx1100", "f16"): "v_wmma_f32_16x16x16_f16",
       ("gfx1100", "bf16"): "v_wmma_f32_16x16x16_bf16"}


def parse(path):
    return parse_head(path) | {"file": os.path.basename(path)}


def hip_templates():
    return [parse(os.path.join(GPU, f)) for f in sorted(os.listdir(GPU))
            if f.endswith(".cu") and parse(os.path.join(GPU, f))["backend"] == "hip"]


def dtype_codes(dtype):
    """(code, size) of A, B and C for "T" or "A:B:C" (a block format's size:
    its block's bytes, as gen's SB)."""
    parts = dtype.split(":") if ":" in dtype else [dtype] * 3
    return [DT[p] if p in DT else QDT[p] for p in parts]


def env_for(tpl, op, target, dtype, params):
    (ca, sa), (cb, sb), (cc, sc) = dtype_codes(dtype)
    return {"WARP": TARGETS[target], "SMEM": LDS, "SMS": 304, "MAXT": 1024, "AMD": 1,
            "SA": sa, "SB": sb, "SC": sc} | CONSTS[target] | op_names(op) | params, (ca, cb, cc)


def prelude():
    """prelude_hip.h with prelude_common.h spliced in where it includes it,
    as gen/template.c does."""
    common = open(os.path.join(GPU, "prelude_common.h")).read()
    text = open(os.path.join(GPU, "prelude_hip.h")).read()
    line = '#include "prelude_common.h"\n'
    assert text.count(line) == 1
    return text.replace(line, common)


def source(tpl, op, env, code):
    defs = "".join(f"#define {k} {v}\n" for k, v in env.items())
    defs += "".join(f"#define GC_T{x} {c}\n" for x, c in zip("ABC", code))
    defs += "".join(f"#define GC_OP_{o.upper()} {int(o == op)}\n" for o in tpl["ops"])
    return f'{prelude()}\n{defs}#line 1 "{tpl["file"]}"\n' + open(os.path.join(GPU, tpl["file"])).read()


def variants(tpl, op, target, dtype, n=4):
    """The op's defaults and up to n-1 random points inside the constraints."""
    names = list(tpl["params"])
    rng = random.Random(f"{tpl['name']}-{op}-{target}-{dtype}")
    out, tries = [dict(tpl["defaults"][op])], 0
    while len(out) < n and tries < 400:
        tries += 1
        p = {k: rng.choice(tpl["params"][k][0]) for k in names}
        env, _ = env_for(tpl, op, target, dtype, p)
        if p not in out and all(evaluate(c, env) for c in tpl["constraints"]):
            out.append(p)
    return out


def compile_one(tmp, tpl, op, target, dtype, params):
    env, code = env_for(tpl, op, target, dtype, params)
    src, obj = tmp / "k.hip", tmp / "k.o"
    src.write_text(source(tpl, op, env, code))
    r = subprocess.run([CLANG, "-x", "hip", f"--offload-arch={target}", "--offload-device-only",
                        "--no-gpu-bundle-output", "-nogpuinc", "-nogpulib", "-O3", "-o", str(obj),
                        str(src)], capture_output=True, text=True)
    assert r.returncode == 0, f"{tpl['name']} {op} {target} {dtype} {params}:\n{r.stderr[-3000:]}"
    dis = subprocess.run([OBJDUMP, "-d", str(obj)], capture_output=True, text=True).stdout
    notes = subprocess.run([READELF, "--notes", str(obj)], capture_output=True, text=True).stdout
    meta = {k: int(v) for k, v in re.findall(r"\.(\w+):\s+(\d+)\s*$", notes, re.M)}
    return env, dis, meta


def _cases():
    """Per template and target its ISA allows, a covering of dtype x op
    rather than their product: case j takes dtype j and op j, cycling, so
    every dtype (A's path, B's format) and every op (the epilogue) is
    compiled and disassembled at least once; and every dtype of A with a
    NORM op if there are any (the norm splits x·w into as many operands as
    A's dtype needs: the last such op, the gate/up one, holds the most)."""
    out = []
    for t in hip_templates():
        for tg in TARGETS:
            if not evaluate(next(c for c in t["constraints"] if "WARP" in c), {"WARP": TARGETS[tg]} | CONSTS[tg]):
                continue
            n = max(len(t["dtypes"]), len(t["ops"]))
            cases = [(t, t["ops"][j % len(t["ops"])], tg, t["dtypes"][j % len(t["dtypes"])]) for j in range(n)]
            norm = [o for o in t["ops"] if op_names(o)["NORM"]]
            for dt in t["dtypes"] if norm else []:
                if not any(d.split(":")[0] == dt.split(":")[0] and op_names(o)["NORM"] for _, o, _, d in cases):
                    cases.append((t, norm[-1], tg, dt))
            out += cases
    return out


CASES = _cases()


def sampled(tpl, op):
    """Is op's space sampled (the first op, and the first gate/up one), or
    only its defaults compiled (the others: the same code but the store)?"""
    pair = [o for o in tpl["ops"] if op_names(o)["PAIR"] == 2]
    return op == tpl["ops"][0] or (pair and op == pair[0])


def test_hip_templates_found():
    names = {t["name"]: t["ops"] for t in hip_templates()}
    want = ["gemm", "gemm_add", "gemm_swiglu"]
    for name in ("gemm_mfma", "gemm_wmma", "gemm_q_mfma", "gemm_q_wmma"):
        assert names.get(name) == want, names
    for name in ("attention_mfma", "attention_wmma"):
        assert names.get(name) == ["attention"], names
    for name in ("attention_decode_mfma", "attention_decode_wmma"):
        assert names.get(name) == ["attention", "attention_batch"], names
    # every (target, A's dtype) the templates claim has a case
    got = {(tg, dt.split(":")[0]) for _, _, tg, dt in CASES}
    assert got == set(ISA), sorted(got)
    # and every block format of B, on both matrix-core families
    for tg in TARGETS:
        assert {dt.split(":")[1] for _, _, g, dt in CASES if g == tg and ":" in dt} == set(QDT), tg


@pytest.mark.parametrize("tpl,op,target,dtype", CASES,
                         ids=[f"{t['name']}-{op}-{tg}-{dt}" for t, op, tg, dt in CASES])
def test_matrix_template_compiles(tmp_path, tpl, op, target, dtype):
    for params in variants(tpl, op, target, dtype, 3 if sampled(tpl, op) else 1):
        env, dis, meta = compile_one(tmp_path, tpl, op, target, dtype, params)
        what = f"{tpl['name']} {op} {target} {dtype} {params}"
        assert re.search(ISA[(target, dtype.split(":")[0])], dis), f"{what}: no matrix instruction"
        if target == "gfx1100":
            assert "v_mfma" not in dis
        else:
            assert "v_wmma" not in dis
        assert "scratch_" not in dis, f"{what}: scratch instructions"
        assert meta["private_segment_fixed_size"] == 0, f"{what}: scratch {meta}"
        assert meta["vgpr_spill_count"] == 0 and meta["sgpr_spill_count"] == 0, f"{what}: {meta}"
        assert meta["group_segment_fixed_size"] == 0, f"{what}: static LDS"
        assert evaluate(tpl["shmem"], env) <= LDS
        assert meta["wavefront_size"] == TARGETS[target]
        assert meta["vgpr_count"] <= 512


BUNDLE_ISA = {"gfx942": "v_mfma", "gfx90a": "v_mfma", "gfx1100": "v_wmma"}


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("op", ["gemm", "gemm_swiglu"])
def test_bundle_gemms_use_matrix_cores(gc, tmp_path, op, dtype):
    """Through gen's own pipeline (gcore-gen, the clang driver): a bundle's
    GEMM kernels for M > 1 are the matrix-core templates, whose code has the
    target's matrix instructions (gfx1100 only for 16-bit: RDNA3 WMMA has no
    fp32 inputs, so there fp32 GEMMs are the SIMT ones)."""
    import sqlite3
    targets = [t for t in BUNDLE_ISA if not (t == "gfx1100" and dtype == "f32")]
    r = gc("gcore-gen", "--target", ",".join(targets), "--compiler", "clang", "--op", op,
           "--dtype", dtype, "--m", "2,64,300", "--n", "96", "--k", "72", "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        rows = c.execute("SELECT DISTINCT o.id, o.target, o.template, o.blob FROM code_objects o "
                         "JOIN dispatch d ON d.code_id = o.id WHERE d.m_hi > 1 AND "
                         "o.template NOT LIKE 'gemv%'").fetchall()
    assert {t for _, t, _, _ in rows} == set(targets), rows
    for oid, target, tpl, blob in rows:
        assert tpl.endswith("mfma" if BUNDLE_ISA[target] == "v_mfma" else "wmma"), (target, tpl)
        (tmp_path / f"{oid}.co").write_bytes(blob)
        dis = subprocess.run([OBJDUMP, "-d", str(tmp_path / f"{oid}.co")], capture_output=True,
                             text=True).stdout
        assert BUNDLE_ISA[target] in dis, f"{target} {tpl}: no {BUNDLE_ISA[target]}"
