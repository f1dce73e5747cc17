"""NVIDIA's quantized decode GEMV (gemv_qmma: mma.sync, the block formats
decoded into fragments, split-K, the fused norm, the gate/up pair, the
tensor-map ring) run unchanged on a host SIMT emulation (tests/nv_emu): one
host thread per thread, dynamic shared memory of exactly @shmem bytes under
ASan, real barriers (bar.sync, named barriers, __syncwarp), mbarriers with
their phases and transaction bytes, tensor-map copies from a map encoded as
runtime/cuda.c encodes it, and mma.sync m16n8k16 evaluated from a model
of the PTX ISA's fragment layout written element -> lane, independent of
the templates' own index math (lane -> element).

What a pass proves without a GPU: for every load path (RL 0: the cp.async
pipeline; RL 1, 2: 16-byte register loads; RL 3: the producer warp's ring),
every block format in GGUF's and NVIDIA's device layouts, f16 and bf16
activations, each op and M from 1 to 16, the template's whole index math,
decode and epilogue compute every element of C within fp64's tolerance on B
dequantized independently (tests/ggufq.py), write nothing outside C and
leave the inputs unchanged. What it cannot prove: the memory model (the
async proxy's order against loads: session 14's ring race), timing, and
that PTX's documented layouts are the hardware's. The mutation tests show a
wrong fragment index, a wrong unit scale and a ring that releases a slot
one stage early are caught."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from test_amd_emulator import TOL_U, _qcheck, _qdata, common_block
from test_amd_templates import evaluate
from tplhead import op_names
from tplhead import parse as parse_head

CXX = shutil.which("clang++-19")
pytestmark = pytest.mark.skipif(not CXX, reason="clang++-19 not installed (host emulation)")
GPU = os.path.join(ROOT, "templates", "gpu")
NV = os.path.join(ROOT, "tests", "nv_emu")
AMD = os.path.join(ROOT, "tests", "amd_emu")
DT = {"f16": (1, 2), "bf16": (2, 2)}
# B's block formats: code and bytes per block (prelude_common.h's tables);
# the device layouts are NVIDIA's repacks of the GGUF format named beside
QDT = {"q8_0": (5, 34), "q4_0": (6, 18), "q4_k": (7, 144), "q5_k": (8, 176), "q6_k": (9, 210),
       "q8_0r": (10, 272), "q4_0r": (11, 144), "q4_kr": (12, 144), "q6_kr": (13, 224)}
DEVICE = {"q8_0r": "q8_0", "q4_0r": "q4_0", "q4_kr": "q4_k", "q6_kr": "q6_k"}
QMIN = ("q4_k", "q5_k", "q4_kr")  # a min beside each unit's scale (base/quant.c's table)
# gen's constants for sm_90a (gen/target.c)
TARGET = {"WARP": 32, "SMEM": 232448, "SMS": 132, "MAXT": 1024, "SM": 90, "ARCH_A": 1, "AMD": 0}


def build(tmp, dtype, op, params, tpl_text=None, quant_text=None):
    """gemv_qmma for the emulation, assembled as gen/ does (constants,
    dtype sizes and codes, the op's names, parameters, template)."""
    tpl = parse_head(os.path.join(GPU, "gemv_qmma.cu"))
    a, q, c = dtype.split(":")
    (ca, sa), (cb, sb), (cc, sc) = DT[a], QDT[q], DT[c]
    env = TARGET | {"SA": sa, "SB": sb, "SC": sc, "QR": int(q in DEVICE), "QMIN": int(q in QMIN)} | op_names(op) | \
        tpl["defaults"][op] | params
    assert op in tpl["ops"], op
    bad = [x for x in tpl["constraints"] if not evaluate(x, env)]
    assert not bad, (op, dtype, params, bad)
    defs = "".join(f"#define GC_T{x} {v}\n" for x, v in zip("ABC", (ca, cb, cc)))
    defs += "".join(f"#define {k} {v}\n" for k, v in env.items())
    defs += "".join(f"#define GC_OP_{o.upper()} {int(o == op)}\n" for o in tpl["ops"])
    common_block("gc-epilogue", tmp / "epilogue.h")
    (tmp / "quant.h").write_text(quant_text) if quant_text else common_block("gc-quant", tmp / "quant.h")
    common_block("gc-gemv", tmp / "gemv.h")
    src = ('#include "prelude_emu.h"\n' + defs + '#line 1 "gemv_qmma.cu"\n' +
           (tpl_text or open(os.path.join(GPU, "gemv_qmma.cu")).read()) +
           f'\n#define KERNEL {tpl["kernel"]}\n#include "harness_qmma.h"\n')
    (tmp / "emu.cpp").write_text(src)
    exe = tmp / "emu"
    r = subprocess.run([CXX, "-std=c++17", "-O1", "-g", "-fsanitize=address,undefined",
                        "-fno-sanitize-recover=undefined", "-Wno-unused", "-pthread", f"-I{NV}", f"-I{AMD}",
                        f"-I{tmp}", "-o", str(exe), str(tmp / "emu.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return tpl, env, exe


def launch(tpl, env, m, n, k):
    """grid, block and shared bytes of the problem (@grid, @block, @shmem)."""
    e = env | {"M": m, "N": n, "K": k}
    first = lambda s: re.split(r"\s+(?=\d+\s+\d+\s*$)", s.strip())[0]  # "<expr> 1 1"
    return evaluate(first(tpl["grid"]), e), evaluate(first(tpl["block"]), e), evaluate(tpl["shmem"], e)


def qdata(fmt, dt, op, m, n, k, seed):
    """_qdata's inputs, B repacked into NVIDIA's device layout where fmt is one."""
    import ggufq
    ab, bb, cb, wb, a, b, mins, c0 = _qdata(DEVICE.get(fmt, fmt), dt, op, m, n, k, seed)
    if fmt in DEVICE:
        bb = ggufq.to_device(fmt.upper(), bb)
    return ab, bb, cb, wb, a, b, mins, c0


def run_case(tmp, dtype, op, params, shapes, seed=0, **texts):
    """Build one variant and run it on shapes: [(shape, unwritten, bad, messages)]."""
    import ggufq
    tpl, env, exe = build(tmp, dtype, op, params, **texts)
    dt, fmt = dtype.split(":")[0], dtype.split(":")[1]
    out = []
    for s, (m, n, k) in enumerate(shapes):
        k -= k % ggufq.TYPES[DEVICE.get(fmt, fmt).upper()][1]  # whole blocks
        if params.get("RL", 1) == 3 or fmt in DEVICE:
            k -= k % 256  # the device layouts' blocks are 256 elements
        ab, bb, cb, wb, a, b, mins, c0 = qdata(fmt, dt, op, m, n, k, seed=1000 * s + seed)
        for name, data in (("a", ab), ("b", bb), ("c", cb), ("w", wb)):
            (tmp / f"{name}.bin").write_bytes(data)
        e = env | {"M": m, "N": n, "K": k}
        assert all(evaluate(x, e) for x in tpl["applies"]), f"{op} {params} does not serve M={m} N={n} K={k}"
        grid, block, shmem = launch(tpl, env, m, n, k)
        r = subprocess.run([str(exe), str(m), str(n), str(k), str(grid), str(block), str(shmem), str(tmp)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{op} {dtype} {params} M={m} N={n} K={k}:\n{r.stdout}{r.stderr[-3000:]}"
        assert "misuse 0 inputs_changed 0" in r.stdout, r.stdout
        out.append(((m, n, k),) + _qcheck((tmp / "out.bin").read_bytes(), dt, op, a, b, mins, c0, n, k))
    return out


def check(results, what):
    for shape, unwritten, bad, msgs in results:
        assert unwritten == 0 and bad == 0, f"{what} (M, N, K) = {shape}: {unwritten} unwritten, {bad} bad\n" + \
            "\n".join(msgs)


# (op, dtype, parameters, shapes): every load path, every format in each
# layout it has, both activation dtypes, every op, M from 1 to 16 (NT 2
# past 8 rows), split-K within the block (KS) and not, the ring's stages
# wrapping (more blocks of a row than NST·KS), N no multiple of the
# block's rows and N below one tile, K of one block and of many.
CASES = [
    ("gemm_add", "f16:q4_kr:f16", dict(RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 100, 2048), (3, 16, 256)]),
    ("rmsnorm_gemm_swiglu", "f16:q4_kr:f16", dict(RL=3, WARPS=4, KS=4, XS=1, NST=2), [(1, 40, 1536)]),
    ("rmsnorm_gemm", "bf16:q6_kr:bf16", dict(RL=3, WARPS=8, KS=4, RT=2, XS=1, NST=2), [(2, 70, 2048)]),
    ("gemm", "f16:q8_0r:f16", dict(RL=1, WARPS=4, KS=2, RT=2), [(1, 65, 768), (7, 33, 512)]),
    ("gemm_swiglu", "bf16:q4_0r:bf16", dict(RL=2, WARPS=4, KS=1), [(5, 17, 1024)]),
    ("rmsnorm_gemm", "f16:q4_k:f16", dict(RL=1, WARPS=4, KS=4, UNR=8, NST=2, NT=2), [(1, 50, 2304), (13, 9, 512)]),
    ("gemm_add", "bf16:q5_k:bf16", dict(RL=1, WARPS=4, KS=2, UNR=8, NST=3), [(4, 33, 1792)]),
    ("rmsnorm_gemm_swiglu", "f16:q6_k:f16", dict(RL=1, WARPS=4, KS=4, UNR=8, NST=2, NT=2), [(16, 20, 1024)]),
    ("gemm", "bf16:q8_0:bf16", dict(RL=1, WARPS=8, KS=8, UNR=4, NST=2), [(1, 37, 864), (8, 16, 96)]),
    ("rmsnorm_gemm", "f16:q4_0:f16", dict(RL=1, WARPS=4, KS=2, UNR=2, NST=4), [(3, 19, 1056)]),
    ("gemm_add", "f16:q6_kr:f16", dict(RL=0, WARPS=4, KS=2, UNR=8, NST=2), [(2, 24, 1024)]),
    ("rmsnorm_gemm_swiglu", "bf16:q8_0r:bf16", dict(RL=3, WARPS=4, KS=2, XS=1, NST=2, NT=2), [(9, 24, 1024)]),
    # KQ: the K-quants' scales by whole words; f16 folds them into the
    # levels (one accumulator a block), XS stages each unit's Σa
    ("rmsnorm_gemm_swiglu", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=4, KS=4, XS=1, NST=2), [(1, 40, 1536), (3, 17, 512)]),
    ("gemm_add", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 100, 2048)]),
    ("rmsnorm_gemm", "f16:q4_kr:f16", dict(KQ=1, RL=2, WARPS=4, KS=2, RT=2, XS=0, NT=2), [(11, 40, 1024)]),
    ("rmsnorm_gemm", "bf16:q4_kr:bf16", dict(KQ=1, RL=3, WARPS=4, KS=4, RT=2, XS=1, NST=2), [(2, 64, 2048)]),
    ("gemm_swiglu", "f16:q5_k:f16", dict(KQ=1, RL=1, WARPS=4, KS=2, UNR=8, NST=2), [(4, 19, 768)]),
    ("rmsnorm_gemm_swiglu", "bf16:q4_k:bf16", dict(KQ=1, RL=1, WARPS=4, KS=4, UNR=16, NST=2, XS=1), [(1, 33, 2048)]),
]


@pytest.mark.parametrize("op,dtype,params,shapes", CASES,
                         ids=[f"{op}-{dt.split(':')[0]}_{dt.split(':')[1]}-RL{p.get('RL', 1)}" + ("-KQ" if p.get("KQ") else "")
                              for op, dt, p, _ in CASES])
def test_gemv_qmma_on_the_emulated_gpu(tmp_path, op, dtype, params, shapes):
    check(run_case(tmp_path, dtype, op, params, shapes), f"gemv_qmma {op} {dtype} {params}")


# Each mutation is a plausible mistake in gemv_qmma (or the block formats
# it decodes); the emulation must catch it: (what, file, text, replacement,
# op, dtype, parameters, shapes).
MUTATIONS = [
    ("a tile's rows g and g+8 swapped with its k halves in the mma's A fragment", "gemv_qmma.cu",
     "gc_mma16816<QM_BF>(c, lv[0][0][0], lv[1][0][0], lv[0][0][1], lv[1][0][1],",
     "gc_mma16816<QM_BF>(c, lv[0][0][0], lv[0][0][1], lv[1][0][0], lv[1][0][1],",
     "gemm", "f16:q8_0r:f16", dict(RL=1, WARPS=4, KS=2), [(1, 32, 512)]),
    ("the ring's stage copied from one block too far", "gemv_qmma.cu",
     "gc_tma_load3(at + (unsigned)(p * QM_RB * KS * GC_QBYTES), tm, 0, (int)(s * KS),",
     "gc_tma_load3(at + (unsigned)(p * QM_RB * KS * GC_QBYTES), tm, 0, (int)(s * KS + 1),",
     "gemm_add", "f16:q4_0r:f16", dict(RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 64, 2048)]),
    ("KQ: the block's sums scaled by dmin and d swapped", "gemv_qmma.cu",
     "gc_fma(-gc_h2f_bits(dd >> 16), am[e], gc_fma(gc_h2f_bits(dd & 0xffffu), cb[e],",
     "gc_fma(-gc_h2f_bits(dd & 0xffffu), am[e], gc_fma(gc_h2f_bits(dd >> 16), cb[e],",
     "gemm_add", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 48, 1024)]),
    ("KQ: the levels folded with the next unit's scale", "gemv_qmma.cu",
     "__byte_perm(scw, 0x64u, 0x4040u + 0x0101u * (unsigned)(u & 3))",
     "__byte_perm(scw, 0x64u, 0x4040u + 0x0101u * (unsigned)((u + 1) & 3))",
     "rmsnorm_gemm", "f16:q4_kr:f16", dict(KQ=1, RL=2, WARPS=4, KS=2), [(1, 32, 512)]),
    ("KQ: a unit's staged Σa taken from the next row", "gemv_qmma.cu",
     "sa[j][0] = sa[j][2] = m < M ? xsa[i] : 0.0f;",
     "sa[j][0] = sa[j][2] = m + 1 < M ? xsa[i + 1] : 0.0f;",
     "rmsnorm_gemm_swiglu", "bf16:q4_kr:bf16", dict(KQ=1, RL=3, WARPS=4, KS=4, XS=1, NST=2), [(3, 16, 512)]),
    ("Q4_K's scale and min of a unit swapped", "quant.h",
     "gcq_scale_min_k4(r[1], r[2], r[3], u, sc, m);", "gcq_scale_min_k4(r[1], r[2], r[3], u, m, sc);",
     "rmsnorm_gemm", "bf16:q4_kr:bf16", dict(RL=2, WARPS=4, KS=2), [(2, 32, 512)]),
]


@pytest.mark.parametrize("what,where,old,new,op,dtype,params,shapes", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_a_wrong_gemv_qmma_is_caught(tmp_path, what, where, old, new, op, dtype, params, shapes):
    if where == "quant.h":
        text = common_block("gc-quant", tmp_path / "quant.h")
        assert old in text, f"{where} no longer has: {old}"
        texts = {"quant_text": text.replace(old, new)}
    else:
        text = open(os.path.join(GPU, where)).read()
        assert old in text, f"{where} no longer has: {old}"
        texts = {"tpl_text": text.replace(old, new)}
    check(run_case(tmp_path, dtype, op, params, shapes), f"unmutated {op} {dtype}")
    results = run_case(tmp_path, dtype, op, params, shapes, **texts)
    assert any(bad or unwritten for _, unwritten, bad, _ in results), f"not caught: {what}"
