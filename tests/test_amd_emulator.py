"""The AMD matrix-core templates, run unchanged on a host SIMT emulation
(tests/amd_emu): one host thread per work-item, LDS of exactly @shmem
bytes under ASan, real barriers, and each MFMA/WMMA evaluated from a model
of the instruction written from the ISA documents (element -> lane and
register), independent of the prelude's GC_MFMA_*/GC_WMMA_* layout macros
(lane -> element) that the templates use.

What a pass proves: for every dtype, both MFMA families and WMMA, single
and double LDS stages, gemm, gemm_add and gemm_swiglu, and shapes with
edges in M, N and K, the template's
whole index math (global -> LDS staging, fragment reads, accumulator
mapping, epilogue, bounds) agrees with the documented operand layouts,
every C element is written exactly within the matrix, LDS stays inside
@shmem, and WMMA operands are replicated across the half-waves. What it
cannot prove: that the documented layouts are the hardware's (the model
and the macros both come from AMD's documents), the builtins' codegen,
memory-model or timing behaviour on a real GPU. The mutation test shows
that a wrong layout macro is caught."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from test_amd_templates import GPU, evaluate, parse
from tplhead import op_names

CXX = shutil.which("clang++-19")
pytestmark = pytest.mark.skipif(not CXX, reason="clang++-19 not installed (host emulation)")
EMU = os.path.join(ROOT, "tests", "amd_emu")
DT = {"f32": (0, 4), "f16": (1, 2), "bf16": (2, 2)}

# (template, wave size, (op, parameters) sets); shapes below have edges in M, N, K.
CASES = [
    ("gemm_mfma.cu", 64, [("gemm", dict(MI=32, BM=64, BN=32, BK=16, WM=32, WN=32, STAGES=2, RASTER=4)),
                          ("gemm_add", dict(MI=16, BM=32, BN=64, BK=32, WM=16, WN=32, STAGES=1, RASTER=1)),
                          ("gemm_swiglu", dict(MI=16, BM=32, BN=32, BK=16, WM=16, WN=16, STAGES=2, RASTER=1)),
                          ("gemm_swiglu", dict(MI=32, BM=32, BN=32, BK=32, WM=32, WN=32, STAGES=1, RASTER=4))]),
    ("gemm_wmma.cu", 32, [("gemm", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=2, RASTER=4)),
                          ("gemm_add", dict(BM=32, BN=64, BK=16, WM=32, WN=16, STAGES=1, RASTER=1)),
                          ("gemm_swiglu", dict(BM=32, BN=32, BK=16, WM=16, WN=16, STAGES=2, RASTER=1)),
                          ("gemm_swiglu", dict(BM=64, BN=32, BK=32, WM=32, WN=16, STAGES=1, RASTER=4))]),
]
SHAPES = [(70, 50, 40), (64, 96, 64), (33, 17, 8)]


def layouts(path):
    text = open(os.path.join(GPU, "prelude_hip.h")).read()
    block = re.search(r"/\* >>> gc-matrix-layouts.*?<<< gc-matrix-layouts \*/", text, re.S)
    assert block, "prelude_hip.h has no gc-matrix-layouts block"
    path.write_text(block.group(0) + "\n")
    return block.group(0)


def build(tmp, tpl_file, wave, dtype, op, params, layout_text=None):
    tpl = parse(os.path.join(GPU, tpl_file))
    (tmp / "layouts.h").write_text(layout_text) if layout_text else layouts(tmp / "layouts.h")
    code, size = DT[dtype]
    env = {"WARP": wave, "SMEM": 65536, "SMS": 304, "MAXT": 1024, "SA": size, "SB": size,
           "SC": size, "AMD": 1, "MFMA": int(wave == 64), "WMMA": int(wave == 32),
           "VGPRS": 512 if wave == 64 else 256} | op_names(op) | params
    assert op in tpl["ops"], (tpl_file, op)
    assert all(evaluate(c, env) for c in tpl["constraints"]), (tpl_file, op, params)
    defs = "".join(f"#define {k} {v}\n" for k, v in env.items())
    defs += "".join(f"#define GC_T{x} {code}\n" for x in "ABC")
    defs += f"#define GC_MFMA {env['MFMA']}\n#define GC_WMMA {env['WMMA']}\n"
    defs += "".join(f"#define GC_OP_{o.upper()} {int(o == op)}\n" for o in tpl["ops"])
    src = ('#include "prelude_emu.h"\n' + defs + f'#line 1 "{tpl_file}"\n' +
           open(os.path.join(GPU, tpl_file)).read() +
           f"\n#define KERNEL {tpl['kernel']}\n#define EMU_SWIGLU {int(op == 'gemm_swiglu')}\n"
           '#include "harness.h"\n')
    (tmp / "emu.cpp").write_text(src)
    exe = tmp / "emu"
    r = subprocess.run([CXX, "-std=c++17", "-O1", "-g", "-fsanitize=address,undefined",
                        "-fno-sanitize-recover=undefined", "-pthread", f"-I{EMU}", f"-I{tmp}",
                        "-o", str(exe), str(tmp / "emu.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return tpl, env, exe


def run(tpl, env, exe, m, n, k):
    e = env | {"M": m, "N": n, "K": k}
    first = lambda s: re.split(r"\s+(?=\d+\s+\d+\s*$)", s.strip())[0]  # "<expr> 1 1"
    grid = evaluate(first(tpl["grid"]), e)
    block = evaluate(first(tpl["block"]), e)
    shmem = evaluate(tpl["shmem"], e)
    return subprocess.run([str(exe), str(m), str(n), str(k), str(grid), str(block), str(shmem)],
                          capture_output=True, text=True, timeout=300)


def grid_block(tpl_file):
    head = open(os.path.join(GPU, tpl_file)).read().split("*/", 1)[0]
    return (re.search(r"@grid\s+([^\n]+)", head).group(1).split(" -- ")[0],
            re.search(r"@block\s+([^\n]+)", head).group(1).split(" -- ")[0])


IDS = [(f, w, dt, i) for f, w, ps in CASES for dt in parse(os.path.join(GPU, f))["dtypes"]
       for i in range(len(ps))]


def case(tpl_file, which):
    return next(ps for f, _, ps in CASES if f == tpl_file)[which]


@pytest.mark.parametrize("tpl_file,wave,dtype,which", IDS,
                         ids=[f"{f[:-3]}-{case(f, i)[0]}-{dt}-{i}" for f, _, dt, i in IDS])
def test_template_on_emulated_matrix_cores(tmp_path, tpl_file, wave, dtype, which):
    op, params = case(tpl_file, which)
    tpl, env, exe = build(tmp_path, tpl_file, wave, dtype, op, params)
    tpl["grid"], tpl["block"] = grid_block(tpl_file)
    for m, n, k in SHAPES:
        r = run(tpl, env, exe, m, n, k)
        assert r.returncode == 0, f"{tpl_file} {op} {dtype} {params} M={m} N={n} K={k}:\n{r.stdout}{r.stderr[-3000:]}"
        assert "bad 0 unwritten 0 replication 0" in r.stdout, r.stdout


# Each mutation is a plausible layout mistake; the emulation must catch it.
# (A k-order mistake made the same way for A and B is not one: the sum over
# k does not depend on the order, and such a variant is in fact correct.)
MUTATIONS = [
    ("32x32 accumulator rows interleaved wrongly",
     "8 * ((r) / 4) + 4 * ((l) / 32) + (r) % 4", "4 * ((r) / 4) + 16 * ((l) / 32) + (r) % 4",
     "gemm_mfma.cu", 64, "f16", 0),
    ("16x16 operand k groups collide (K per instruction taken as 8)",
     "#define GC_MFMA_AB_K(S, KPL, l, v) ((l) / (S) * (KPL) + (v))",
     "#define GC_MFMA_AB_K(S, KPL, l, v) ((l) / (S) / 2 * (KPL) + (v))", "gemm_mfma.cu", 64, "f16", 1),
    ("operand rows shifted by one lane",
     "#define GC_MFMA_AB_ROW(S, l) ((l) % (S))", "#define GC_MFMA_AB_ROW(S, l) (((l) + 1) % (S))",
     "gemm_mfma.cu", 64, "bf16", 2),
    ("WMMA accumulator rows as lane halves",
     "#define GC_WMMA_D_ROW(l, r) (2 * (r) + (l) / 16)",
     "#define GC_WMMA_D_ROW(l, r) ((r) + 8 * ((l) / 16))", "gemm_wmma.cu", 32, "f16", 0),
    ("WMMA operands not replicated (upper half-wave reads other rows)",
     "#define GC_WMMA_AB_ROW(l) ((l) % 16)", "#define GC_WMMA_AB_ROW(l) ((l) < 16 ? (l) : 31 - (l))",
     "gemm_wmma.cu", 32, "f16", 0),
]


@pytest.mark.parametrize("what,old,new,tpl_file,wave,dtype,which", MUTATIONS,
                         ids=[m[0].split(" (")[0].replace(" ", "_") for m in MUTATIONS])
def test_wrong_layout_is_caught(tmp_path, what, old, new, tpl_file, wave, dtype, which):
    text = layouts(tmp_path / "layouts.h")
    assert old in text, old
    op, params = case(tpl_file, which)
    tpl, env, exe = build(tmp_path, tpl_file, wave, dtype, op, params, text.replace(old, new))
    tpl["grid"], tpl["block"] = grid_block(tpl_file)
    r = run(tpl, env, exe, 64, 64, 32)
    assert r.returncode == 1 and "bad 0 unwritten 0 replication 0" not in r.stdout, \
        f"{what}: not detected\n{r.stdout}"
