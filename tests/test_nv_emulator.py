"""NVIDIA's decode GEMVs on tensor cores (gemv_qmma: mma.sync, the block
formats decoded into fragments, split-K, the fused norm, the gate/up pair,
RoPE and the KV-cache write, the tensor-map ring; gemv_mma: batched decode
steps on fp16/bf16 weights), prefill attention on mma.sync
(attention_mma), the mma.sync prefill GEMMs (gemm_mma, gemm_q_mma), the
SIMT decode GEMVs (gemv_gpu with its RoPE epilogue, gemv_q_gpu, gemv_bulk
and its bulk-copy ring), Qwen's row-wise ops (add_gpu built for bias,
qk_norm_gpu), the greedy decode step's argmax (argmax_gpu: its 16-byte
loads, split tickets and the box it posts to) and sm_90a's prefill attention on wgmma
(attention_wgmma) run unchanged on a host SIMT emulation (tests/nv_emu): a
thread per thread (fibers on one host thread, tests/amd_emu/emu_fiber.h), dynamic shared memory of exactly @shmem bytes under
ASan, real barriers (bar.sync, named barriers, __syncwarp), mbarriers with
their phases and transaction bytes, tensor-map copies from a map encoded as
runtime/cuda.c encodes it, and mma.sync m16n8k16, ldmatrix and wgmma
m64nNk16 (its shared-memory descriptors and swizzled layouts, A from
registers too) evaluated from a model of the PTX ISA's fragment layouts
written element -> lane, independent of the templates' own index math
(lane -> element). gemm_wgmma (clusters, multicast tensor-map copies,
stream-K) is not emulated.

What a pass proves without a GPU: for every load path (RL 0: the cp.async
pipeline; RL 1, 2: 16-byte register loads; RL 3: the producer warp's ring),
every block format in GGUF's and NVIDIA's device layouts, f16 and bf16
activations, each op (the RoPE/KV one too: Qout and both caches, rows
outside the step unchanged) and M from 1 to 16, the template's whole index
math, decode and epilogue compute every element of C within fp64's
tolerance on B dequantized independently (tests/ggufq.py), write nothing
outside C and leave the inputs unchanged. What it cannot prove: the memory model (the
async proxy's order against loads: session 14's ring race), timing, and
that PTX's documented layouts are the hardware's. The mutation tests show
that plausible mistakes are caught: a wrong fragment register, a ring stage
one block off, a unit's scale and min swapped, KQ's d and dmin swapped, its
scale of the next unit, its staged Σa of the next row (and, where one mma
takes a block's mins, of the next unit; the mins of a unit pair swapped;
an odd Q4_K unit scaled by sc, not sc/16; without the staging, the mins
of a unit's two rows swapped), the ring's two head-half boxes swapped and
a RoPE pair's sums swapped."""
import os
import platform
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from test_amd_emulator import (ASHAPES, BATCH_SHAPES, CXXFLAGS, DEC_SHAPES, compile_emu, TOL_U, _acheck, _adata, _qcheck, _qdata,
                               common_block, run_batch)
from test_amd_templates import evaluate
from tplhead import op_names
from tplhead import parse as parse_head

CXX = shutil.which("clang++-19")
pytestmark = [pytest.mark.skipif(not CXX, reason="clang++-19 not installed (host emulation)"),
              pytest.mark.skipif(platform.machine() != "x86_64",
                                 reason="the emulation's fiber switch (tests/amd_emu/emu_fiber.h) is x86-64 code")]
GPU = os.path.join(ROOT, "templates", "gpu")
NV = os.path.join(ROOT, "tests", "nv_emu")
AMD = os.path.join(ROOT, "tests", "amd_emu")
DT = {"f32": (0, 4), "f16": (1, 2), "bf16": (2, 2)}
# B's block formats: code and bytes per block (prelude_common.h's tables);
# the device layouts are NVIDIA's repacks of the GGUF format named beside
QDT = {"q8_0": (5, 34), "q4_0": (6, 18), "q4_k": (7, 144), "q5_k": (8, 176), "q6_k": (9, 210),
       "q8_0r": (10, 272), "q4_0r": (11, 144), "q4_kr": (12, 144), "q6_kr": (13, 224)}
DEVICE = {"q8_0r": "q8_0", "q4_0r": "q4_0", "q4_kr": "q4_k", "q6_kr": "q6_k"}
QMIN = ("q4_k", "q5_k", "q4_kr")  # a min beside each unit's scale (base/quant.c's table)
# gen's constants for sm_90a (gen/target.c)
TARGET = {"WARP": 32, "SMEM": 232448, "SMS": 132, "MAXT": 1024, "SM": 90, "ARCH_A": 1, "AMD": 0}


def build(tmp, dtype, op, params, tpl_text=None, quant_text=None, tpl_file="gemv_qmma.cu", harness="harness_gemv.h",
          split_text=None, gemv_text=None, window_bytes=None):
    """A template of the GEMV ABI (gemv_qmma, gemv_mma) for the emulation,
    assembled as gen/ does (constants, dtype sizes and codes, the op's
    names, parameters, template). dtype: "T" or "A:B:C" (B a block format);
    split_text, gemv_text: the gc-split or gc-gemv block to use (a
    mutant), else the prelude's; window_bytes: the L2 window's size (a
    template that declares @prefetch; default harness_gemv.h's)."""
    tpl = parse_head(os.path.join(GPU, tpl_file))
    a, q, c = dtype.split(":") if ":" in dtype else [dtype] * 3
    (ca, sa), (cb, sb), (cc, sc) = DT[a], QDT.get(q, DT.get(q)), DT[c]
    env = TARGET | {"SA": sa, "SB": sb, "SC": sc, "QR": int(q in DEVICE), "QMIN": int(q in QMIN), "ABF": int(a == "bf16")} | op_names(op) | \
        tpl["defaults"][op] | params
    assert op in tpl["ops"], op
    bad = [x for x in tpl["constraints"] if not evaluate(x, env)]
    assert not bad, (op, dtype, params, bad)
    defs = "".join(f"#define GC_T{x} {v}\n" for x, v in zip("ABC", (ca, cb, cc)))
    defs += "".join(f"#define {k} {v}\n" for k, v in env.items())
    defs += "".join(f"#define GC_OP_{o.upper()} {int(o == op)}\n" for o in tpl["ops"])
    common_block("gc-epilogue", tmp / "epilogue.h")
    (tmp / "quant.h").write_text(quant_text) if quant_text else common_block("gc-quant", tmp / "quant.h")
    (tmp / "gemv.h").write_text(gemv_text) if gemv_text else common_block("gc-gemv", tmp / "gemv.h")
    (tmp / "split.h").write_text(split_text) if split_text else common_block("gc-split", tmp / "split.h")
    text = tpl_text or open(os.path.join(GPU, tpl_file)).read()
    window = "#define EMU_WINDOW 1\n" if re.search(r"^ \* @prefetch\b", text, re.M) else ""  # harness_gemv.h
    window += f"#define EMU_WINDOW_BYTES {window_bytes}\n" if window and window_bytes else ""
    src = (("#define EMU_ATTENTION 1\n" if op in ("attention", "attention_batch") else "") + window +
           '#include "prelude_emu.h"\n' + defs +
           f'#line 1 "{tpl_file}"\n' +
           text + f'\n#define KERNEL {tpl["kernel"]}\n#include "{harness}"\n')
    (tmp / "emu.cpp").write_text(src)
    exe = tmp / "emu"
    r = compile_emu([*CXXFLAGS, "-Wno-unused", "-pthread", f"-I{NV}", f"-I{AMD}", f"-I{tmp}"], tmp / "emu.cpp", exe)
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


def run_case(tmp, dtype, op, params, shapes, seed=0, tpl_file="gemv_qmma.cu", **texts):
    """Build one variant of a GEMV-ABI template and run it on shapes:
    [(shape, unwritten, bad, messages)]. dtype "A:B:C" (B a block format:
    qdata's inputs) or "T" (dense: ddata's)."""
    import ggufq
    tpl, env, exe = build(tmp, dtype, op, params, tpl_file=tpl_file, **texts)
    dt, fmt = dtype.split(":")[0], (dtype.split(":") + [None])[1]
    out = []
    for s, (m, n, k) in enumerate(shapes):
        if fmt:
            k -= k % ggufq.TYPES[DEVICE.get(fmt, fmt).upper()][1]  # whole blocks
            if params.get("RL", 1) == 3 or fmt in DEVICE:
                k -= k % 256  # the device layouts' blocks are 256 elements
        ab, bb, cb, wb, a, b, mins, c0 = (qdata(fmt, dt, op, m, n, k, seed=1000 * s + seed) if fmt
                                          else ddata(dt, op, m, n, k, seed=1000 * s + seed))
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
    # sm_90's default for Q6_KR's LM head: each warp all of K, three ring stages
    ("rmsnorm_gemm", "f16:q6_kr:f16", dict(RL=3, WARPS=4, KS=1, RT=2, NST=3, XS=1), [(1, 200, 1024), (8, 130, 512)]),
    ("rmsnorm_gemm_swiglu", "bf16:q8_0r:bf16", dict(RL=3, WARPS=4, KS=2, XS=1, NST=2, NT=2), [(9, 24, 1024)]),
    # KQ: the K-quants' scales by whole words; f16 folds them into the
    # levels (one accumulator a block), XS stages each unit's Σa
    ("rmsnorm_gemm_swiglu", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=4, KS=4, XS=1, NST=2), [(1, 40, 1536), (3, 17, 512)]),
    ("gemm_add", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 100, 2048)]),
    ("rmsnorm_gemm", "f16:q4_kr:f16", dict(KQ=1, RL=2, WARPS=4, KS=2, RT=2, XS=0, NT=2), [(11, 40, 1024)]),
    ("rmsnorm_gemm", "bf16:q4_kr:bf16", dict(KQ=1, RL=3, WARPS=4, KS=4, RT=2, XS=1, NST=2), [(2, 64, 2048)]),
    ("gemm_swiglu", "f16:q5_k:f16", dict(KQ=1, RL=1, WARPS=4, KS=2, UNR=8, NST=2), [(4, 19, 768)]),
    ("gemm_add", "f16:q4_k:f16", dict(KQ=1, RL=1, WARPS=4, KS=2, UNR=8, NST=2), [(1, 24, 768), (7, 9, 256)]),
    ("rmsnorm_gemm_swiglu", "bf16:q4_k:bf16", dict(KQ=1, RL=1, WARPS=4, KS=4, UNR=16, NST=2, XS=1), [(1, 33, 2048)]),
    # PT: a grid of SMS·OCC blocks (SMS set low) walking row tiles, the
    # ring's stages and phases running on from one tile into the next
    # (stages a tile not a multiple of NST), the split-K sums in static
    # shared memory and without split-K, XS staged once a block
    ("gemm_add", "f16:q8_0r:f16", dict(RL=3, PT=1, WARPS=8, KS=4, NST=3, XS=0, SMS=2), [(1, 100, 1536), (3, 16, 256)]),
    ("rmsnorm_gemm_swiglu", "f16:q4_kr:f16", dict(KQ=1, RL=3, PT=1, WARPS=4, KS=2, XS=1, NST=2, SMS=1), [(1, 72, 1024)]),
    ("rmsnorm_gemm", "bf16:q8_0r:bf16", dict(RL=3, PT=1, WARPS=4, KS=1, RT=2, XS=1, NST=3, OCC=2, SMS=1), [(2, 300, 768)]),
]


@pytest.mark.parametrize("op,dtype,params,shapes", CASES,
                         ids=[f"{op}-{dt.split(':')[0]}_{dt.split(':')[1]}-RL{p.get('RL', 1)}" + ("-KQ" if p.get("KQ") else "") +
                              ("-PT" if p.get("PT") else "") for op, dt, p, _ in CASES])
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
     "gc_tma_load3_hint(at + (unsigned)(p * QM_RB * KS * GC_QBYTES), tm, 0, (int)(s * KS),",
     "gc_tma_load3_hint(at + (unsigned)(p * QM_RB * KS * GC_QBYTES), tm, 0, (int)(s * KS + 1),",
     "gemm_add", "f16:q4_0r:f16", dict(RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 64, 2048)]),
    ("KQ: the block's sums scaled by dmin and d swapped", "gemv_qmma.cu",
     "const float v = gc_fma(gc_h2f_bits(dd & 0xffffu), cb[e], acc[p][r][j][e]);\n"
     "              acc[p][r][j][e] = gc_fma(-gc_h2f_bits(dd >> 16) * (QM_MMIN ? 32.0f : 1.0f), am[e], v);",
     "const float v = gc_fma(gc_h2f_bits(dd >> 16), cb[e], acc[p][r][j][e]);\n"
     "              acc[p][r][j][e] = gc_fma(-gc_h2f_bits(dd & 0xffffu) * (QM_MMIN ? 32.0f : 1.0f), am[e], v);",
     "gemm_add", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 48, 1024)]),
    ("KQ: the levels folded with the next unit's scale", "gemv_qmma.cu",
     "const uint32_t sc2 = gc_dup2(scp, u & 1), neg = gc_dup2(negp, u & 1);",
     "const uint32_t sc2 = gc_dup2(scp, (u + 1) & 1), neg = gc_dup2(negp, (u + 1) & 1);",
     "rmsnorm_gemm", "f16:q4_kr:f16", dict(KQ=1, RL=2, WARPS=4, KS=2), [(1, 32, 512)]),
    ("KQ: a unit's staged Σa taken from the next row", "gemv_qmma.cu",
     "sa[j][0] = sa[j][2] = m < M ? xsa[i] : 0.0f;",
     "sa[j][0] = sa[j][2] = m + 1 < M ? xsa[i + 1] : 0.0f;",
     "rmsnorm_gemm_swiglu", "bf16:q4_kr:bf16", dict(KQ=1, RL=3, WARPS=4, KS=4, XS=1, NST=2), [(3, 16, 512)]),
    ("KQ with XS, f16: the block's Σa of unit 2t + 1 taken from unit 2t", "gemv_qmma.cu",
     "s1 = m < M ? xsa[i + (int)M] * 0.03125f : 0.0f;", "s1 = m < M ? xsa[i] * 0.03125f : 0.0f;",
     "rmsnorm_gemm_swiglu", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=4, KS=4, XS=1, NST=2), [(1, 16, 512)]),
    ("KQ with XS, f16: the mins of units 2t, 2t + 1 swapped", "gemv_qmma.cu",
     "(t & 1) ? 0x4342u : 0x4140u; /* units 2t, 2t + 1 of their half */",
     "(t & 1) ? 0x4243u : 0x4041u; /* units 2t, 2t + 1 of their half */",
     "rmsnorm_gemm", "f16:q4_kr:f16", dict(KQ=1, RL=2, WARPS=4, KS=2, XS=1), [(2, 32, 512)]),
    ("KQ, f16 Q4_K: an odd unit's 16·q levels scaled by sc, not sc/16", "gemv_qmma.cu",
     "gc_fma2<0>(s16, 0x2C003C00u, 0xD400E400u)", "gc_fma2<0>(s16, 0x3C003C00u, 0xE400E400u)",
     "gemm_add", "f16:q4_kr:f16", dict(KQ=1, RL=1, WARPS=4, KS=2), [(1, 32, 512)]),
    ("KQ without staging, f16: the unit's mins of rows g and g + 8 swapped", "gemv_qmma.cu",
     "gc_mma16816<0>(am, m0, m1, m0, m1, x[j][0][s][0], x[j][0][s][1]);",
     "gc_mma16816<0>(am, m1, m0, m1, m0, x[j][0][s][0], x[j][0][s][1]);",
     "gemm_add", "f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=8, KS=4, NST=2, XS=0), [(1, 48, 1024)]),
    # PT (a wrong stage count across tiles hangs: the emulation ends such a
    # run, a wait that never completes, and that counts as caught)
    ("PT: a consumer's ring stage counted from its tile's start", "gemv_qmma.cu",
     "const int64_t q = q0 + s; /* the ring's stage */", "const int64_t q = s; /* the ring's stage */",
     "gemm_add", "f16:q8_0r:f16", dict(RL=3, PT=1, WARPS=8, KS=4, NST=3, XS=0, SMS=2), [(1, 100, 1536)]),
    ("PT: a tile's rows taken from the block's first tile", "gemv_qmma.cu",
     "    n0 = tile * QM_RB + (int64_t)grp * 16 * RT;\n", "    n0 = gc_bid() * QM_RB + (int64_t)grp * 16 * RT;\n",
     "gemm_add", "f16:q8_0r:f16", dict(RL=3, PT=1, WARPS=8, KS=4, NST=3, XS=0, SMS=2), [(1, 100, 1536)]),
    ("PT: the split-K sums where the ring streams the next tile", "gemv_qmma.cu",
     "#define QM_RED qm_red\n", "#define QM_RED ((float *)gc_dyn_shared())\n",
     "gemm_add", "f16:q8_0r:f16", dict(RL=3, PT=1, WARPS=8, KS=4, NST=3, XS=0, SMS=2), [(1, 100, 1536)]),
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
    try:
        results = run_case(tmp_path, dtype, op, params, shapes, **texts)
    except AssertionError as e:  # a run that the emulation ended: a hang on the GPU
        assert "an mbarrier wait never completed" in str(e), e
        return
    assert any(bad or unwritten for _, unwritten, bad, _ in results), f"not caught: {what}"


def as_f64(bits, dt):
    import numpy as np
    import ggufq
    b = np.frombuffer(bits, "<u2")
    return b.view("<f2").astype(np.float64) if dt == "f16" else ggufq.bf16_to_f32(b).astype(np.float64)


def run_rope(tmp, dtype, params, m, h, g, d, layout, pos0, seed=0, tpl_file="gemv_qmma.cu", bias=False, **texts):
    """rmsnorm_gemm_rope_kv, QKV of N = (H + 2G)·D rows of B: Qout, and the
    rows pos0 .. pos0 + M - 1 of the caches, against fp64 (the GEMM rule of
    _qcheck, then the rotation's propagation of it); every other cache row
    unchanged. dtype "A:B:C" (B a block format) or "T" (dense B). bias:
    rmsnorm_gemm_bias_rope_kv, b[N] added to QKV's rows (its fp32 sum's
    rounding added to the error). (unwritten, bad, messages)"""
    import numpy as np
    import ggufq
    op = "rmsnorm_gemm_bias_rope_kv" if bias else "rmsnorm_gemm_rope_kv"
    dt, fmt = dtype.split(":")[0], (dtype.split(":") + [None])[1]
    tpl, env, exe = build(tmp, dtype, op, params, tpl_file=tpl_file, **texts)
    n, k = (h + 2 * g) * d, 1024
    ab, bb, _, wb, a, b, mins, _ = (qdata(fmt, dt, op, m, n, k, seed=seed) if fmt
                                    else ddata(dt, op, m, n, k, seed=seed))
    rng = np.random.default_rng(seed + 1)
    rows = pos0 + m + 2
    cache = lambda: (rng.uniform(-1, 1, (rows, g * d)).astype("<f2").view("<u2") if dt == "f16"
                     else ggufq.bf16_bits(rng.uniform(-1, 1, (rows, g * d)).astype(np.float32)))
    kc0, vc0 = cache(), cache()
    inv = 10000.0 ** (-2.0 * np.arange(d // 2) / d)
    files = {"a": ab, "b": bb, "w": wb, "kc": kc0.tobytes(), "vc": vc0.tobytes(), "inv": inv.astype("<f8").tobytes(),
             "c": np.full(m * h * d, 0x7E00 if dt == "f16" else 0x7FC0, "<u2").tobytes()}
    bv = np.zeros(n)
    if bias:
        bb_ = (rng.uniform(-1, 1, n).astype("<f2").view("<u2") if dt == "f16"
               else ggufq.bf16_bits(rng.uniform(-1, 1, n).astype(np.float32)).reshape(-1))
        files["bias"], bv = bb_.tobytes(), as_f64(bb_.tobytes(), dt)
    for name, data in files.items():
        (tmp / f"{name}.bin").write_bytes(data)
    e = env | {"M": m, "N": n, "K": k, "H": h, "G": g, "D": d}
    assert all(evaluate(x, e) for x in tpl["applies"]), f"{params} does not serve the problem"
    grid, block, shmem = launch(tpl, e, m, n, k)
    r = subprocess.run([str(exe), str(m), str(n), str(k), str(grid), str(block), str(shmem), str(tmp),
                        str(h), str(g), str(d), str(layout), str(pos0)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{op} {dtype} {params}:\n{r.stdout}{r.stderr[-3000:]}"
    assert "misuse 0 inputs_changed 0" in r.stdout, r.stdout
    qkv = a @ b.T
    err = TOL_U[dt] * np.abs(qkv + bv) + k * 2.0 ** -22 * (np.abs(a) @ (np.abs(b) + mins).T) + 1e-6 + \
        2.0 ** -24 * (np.abs(qkv) + np.abs(bv))
    qkv = qkv + bv
    pa = np.arange(d // 2) * 2 if layout else np.arange(d // 2)      # pair j's elements
    pb = pa + 1 if layout else pa + d // 2
    x, ex = qkv.reshape(m, h + 2 * g, d), err.reshape(m, h + 2 * g, d)
    th = (pos0 + np.arange(m))[:, None, None] * inv[None, None, :]
    c, s = np.cos(th), np.sin(th)
    rot, tol = x.copy(), ex.copy()
    xa, xb, ea, eb = x[:, :h + g, pa], x[:, :h + g, pb], ex[:, :h + g, pa], ex[:, :h + g, pb]
    rot[:, :h + g, pa], rot[:, :h + g, pb] = xa * c - xb * s, xa * s + xb * c
    slack = 4 * 2.0 ** -24 * (np.abs(xa) + np.abs(xb))
    tol[:, :h + g, pa] = TOL_U[dt] * np.abs(rot[:, :h + g, pa]) + np.abs(c) * ea + np.abs(s) * eb + slack
    tol[:, :h + g, pb] = TOL_U[dt] * np.abs(rot[:, :h + g, pb]) + np.abs(s) * ea + np.abs(c) * eb + slack
    out = [(as_f64((tmp / "out.bin").read_bytes(), dt).reshape(m, h, d), rot[:, :h], tol[:, :h], "Qout")]
    unwritten, bad, msgs = 0, 0, []
    for name, init, part in (("kc", kc0, slice(h, h + g)), ("vc", vc0, slice(h + g, h + 2 * g))):
        got = as_f64((tmp / f"{name}.out").read_bytes(), dt).reshape(rows, g, d)
        before = as_f64(init.tobytes(), dt).reshape(rows, g, d)
        keep = np.r_[0:pos0, pos0 + m:rows]
        if not np.array_equal(got[keep], before[keep]):
            bad += 1
            msgs.append(f"{name}: a row outside pos0 .. pos0 + M - 1 changed")
        out.append((got[pos0:pos0 + m], rot[:, part], tol[:, part], name))
    for got, want, t, name in out:
        nan = np.isnan(got)
        wrong = ~nan & ~(np.abs(got - want) <= t)
        unwritten += int(nan.sum())
        bad += int(wrong.sum())
        msgs += [f"{name}{tuple(i)} = {got[tuple(i)]}, expected {want[tuple(i)]}" for i in np.argwhere(wrong)[:3]]
    return unwritten, bad, msgs


# rmsnorm_gemm_rope_kv (the decode step's QKV with RoPE and the KV-cache
# write in its epilogue): both RoPE layouts, GQA, heads of 128 and 64, the
# ring (its boxes: a block's rows are two halves of a head's pairs),
# register and pipeline paths, a position past the first rows of the cache
ROPE_CASES = [
    ("f16:q4_kr:f16", dict(RL=3, WARPS=4, KS=4, RT=2, XS=1, NST=2), 1, 4, 2, 128, 0, 37),
    ("f16:q4_kr:f16", dict(KQ=1, RL=3, WARPS=4, KS=4, RT=2, XS=1, NST=2), 1, 4, 2, 128, 1, 5),
    ("bf16:q6_kr:bf16", dict(RL=3, WARPS=8, KS=4, RT=1, XS=0, NST=2), 2, 6, 2, 64, 1, 0),
    ("f16:q8_0r:f16", dict(RL=1, WARPS=4, KS=2, RT=2), 3, 5, 1, 64, 0, 9),
    ("f16:q4_k:f16", dict(RL=1, WARPS=4, KS=4, UNR=8, NST=2, KQ=1), 1, 2, 1, 128, 1, 3),
    # PT: one block walks every row tile (a head's pairs per tile, both layouts)
    ("f16:q8_0r:f16", dict(RL=3, PT=1, WARPS=4, KS=4, RT=2, XS=1, NST=2, SMS=1), 1, 4, 2, 128, 0, 7),
    ("bf16:q4_kr:bf16", dict(KQ=1, RL=3, PT=1, WARPS=4, KS=2, RT=1, XS=1, NST=3, SMS=1), 2, 2, 1, 64, 1, 0),
]


@pytest.mark.parametrize("dtype,params,m,h,g,d,layout,pos0", ROPE_CASES,
                         ids=[f"{c[0].split(':')[1]}-RL{c[1].get('RL', 1)}-L{c[6]}" + ("-KQ" if c[1].get("KQ") else "") +
                              ("-PT" if c[1].get("PT") else "") for c in ROPE_CASES])
def test_gemv_qmma_rope_kv_on_the_emulated_gpu(tmp_path, dtype, params, m, h, g, d, layout, pos0):
    unwritten, bad, msgs = run_rope(tmp_path, dtype, params, m, h, g, d, layout, pos0)
    assert unwritten == 0 and bad == 0, f"{dtype} {params}: {unwritten} unwritten, {bad} bad\n" + "\n".join(msgs)


ROPE_MUTATIONS = [
    ("the ring's two boxes of a block's head halves swapped",
     "gc_tma_load3_hint(at, tm, 0, (int)(s * KS), (int)x0,", "gc_tma_load3_hint(at, tm, 0, (int)(s * KS), (int)x1,",
     ROPE_CASES[0]),
    ("a RoPE pair's two sums swapped in the epilogue",
     "gc_rope_pair(C, ro, m, u, acc[0][r][j][e] * sc[e], acc[0][r][j][2 + e] * sc[e]);",
     "gc_rope_pair(C, ro, m, u, acc[0][r][j][2 + e] * sc[e], acc[0][r][j][e] * sc[e]);",
     ROPE_CASES[3]),
]


@pytest.mark.parametrize("what,old,new,case", ROPE_MUTATIONS, ids=[m[0] for m in ROPE_MUTATIONS])
def test_a_wrong_rope_kv_is_caught(tmp_path, what, old, new, case):
    text = open(os.path.join(GPU, "gemv_qmma.cu")).read()
    assert old in text, f"gemv_qmma.cu no longer has: {old}"
    unwritten, bad, _ = run_rope(tmp_path, *case, tpl_text=text.replace(old, new))
    assert unwritten or bad, f"not caught: {what}"


def ddata(dt, op, m, n, k, seed):
    """_qdata's inputs with B dense in A's dtype (values and their bits)."""
    import numpy as np
    import ggufq
    rng = np.random.default_rng(seed)
    rows = op_names(op)["PAIR"] * n
    as16 = lambda x: (x.astype("<f2"), x.astype("<f2").astype(np.float64)) if dt == "f16" else \
        (ggufq.bf16_bits(x), ggufq.bf16_to_f32(ggufq.bf16_bits(x)).astype(np.float64))
    a_bits, a_val = as16(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b_bits, b_val = as16(rng.uniform(-1, 1, (rows, k)).astype(np.float32))
    w_bits, w_val = as16(rng.uniform(0.5, 1.5, k).astype(np.float32))
    c0 = as16(rng.uniform(-1, 1, (m, n)).astype(np.float32))
    c_bits = c0[0] if op == "gemm_add" else np.full((m, n), 0x7E00 if dt == "f16" else 0x7FC0, "<u2")
    if op_names(op)["NORM"]:
        a_val = a_val / np.sqrt((a_val ** 2).mean(axis=1, keepdims=True) + 1e-5) * w_val
    return a_bits.tobytes(), b_bits.tobytes(), c_bits.tobytes(), w_bits.tobytes(), a_val, b_val, \
        np.zeros_like(b_val), c0[1]


# gemv_mma (fp16/bf16 weights, batched decode steps of 2 .. 16 rows): every
# op, both dtypes (the norm's operand split in two parts for f16, three for
# bf16), split-K within the block and not, one and two tiles a warp, one to
# four chunks a step, N no multiple of the block's rows, K a multiple of 8
# but not of the 32-element chunks
MMA_CASES = [
    ("gemm", "f16", dict(WARPS=8, KS=4, RT=1, UNR=2, NT=1), [(2, 100, 776), (8, 16, 64)]),
    ("gemm_add", "bf16", dict(WARPS=4, KS=1, RT=2, UNR=1, NT=2), [(13, 70, 520)]),
    ("rmsnorm_gemm", "bf16", dict(WARPS=8, KS=8, RT=1, UNR=4, NT=1), [(3, 33, 1032)]),
    ("gemm_swiglu", "f16", dict(WARPS=4, KS=2, RT=1, UNR=2, NT=2), [(16, 40, 512)]),
    ("rmsnorm_gemm_swiglu", "f16", dict(WARPS=16, KS=4, RT=1, UNR=1, NT=1, OCC=1), [(5, 65, 1000)]),
]


@pytest.mark.parametrize("op,dt,params,shapes", MMA_CASES, ids=[f"{c[0]}-{c[1]}" for c in MMA_CASES])
def test_gemv_mma_on_the_emulated_gpu(tmp_path, op, dt, params, shapes):
    check(run_case(tmp_path, dt, op, params, shapes, tpl_file="gemv_mma.cu"), f"gemv_mma {op} {dt} {params}")


def test_a_wrong_gemv_mma_is_caught(tmp_path):
    """The k slots of one operand mapped differently from the other's (B's
    rows g and g+8 swapped with its two k halves) is caught; the same
    mapping on both operands would be a correct kernel (a dot product does
    not depend on the order of k)."""
    old = "gc_mma16816<GC_TA == GC_BF16>(acc[p][t][j], lo.x, hi.x, lo.y, hi.y, op[s][0], op[s][1]);"
    text = open(os.path.join(GPU, "gemv_mma.cu")).read()
    assert old in text, f"gemv_mma.cu no longer has: {old}"
    mutated = text.replace(old, old.replace("lo.x, hi.x, lo.y, hi.y", "lo.x, lo.y, hi.x, hi.y"))
    (_, unwritten, bad, _), = run_case(tmp_path, "f16", "gemm", dict(WARPS=4, KS=2, RT=1, UNR=1, NT=1),
                                       [(4, 32, 256)], tpl_file="gemv_mma.cu", tpl_text=mutated)
    assert bad or unwritten, "not caught: one operand's k slots mapped apart from the other's"


# attention_mma (prefill attention on mma.sync: sm_80 and up; on sm_90a the
# untuned choice where attention_wgmma does not apply, heads other than 64
# and 128): the AMD emulator's shapes (GQA 5:1 at head dims 48 to 128, M 3
# to 70, pos0 0 to 100) within @applies, one and two row tiles a warp
# (RW 2 reads Q by ldmatrix from shared memory), one to three stages, one
# and several heads a block, tiles of 32 to 128 keys; O between guard
# regions (harness_att.h), every element against fp64 with the op's tolerance
ATT_CASES = [
    ("f16", dict(WARPS=4, RW=1, HPB=1, KB=64, NST=2, DMAX=128)),
    ("bf16", dict(WARPS=2, RW=2, HPB=1, KB=32, NST=3, DMAX=128)),
    ("f16", dict(WARPS=4, RW=2, HPB=2, KB=64, NST=1, DMAX=64)),
]


# The PTX statements attention_wgmma writes out itself, none of which the
# emulation needs: its cp.async copies are complete at issue (wait_all),
# memory is one proxy (the fences), and registers are not modelled
# (setmaxnreg). Any other asm statement fails the build.
FENCES = re.compile(r'asm volatile\("(cp\.async\.wait_all|fence\.proxy\.async\.shared::cta|'
                    r'fence\.mbarrier_init\.release\.cluster|setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32 %0);\\n"'
                    r'[^;]*;')


def without_fences(text):
    out = FENCES.sub("(void)0;", text)
    assert "asm" not in out.replace("setmaxnreg.dec to", "").replace("setmaxnreg.inc to", ""), \
        "an asm statement the emulation does not model"
    return out


def run_attention(tmp, dt, params, tpl_text=None, most_keys=False, tpl_file="attention_mma.cu", shapes=ASHAPES,
                  p_rounded=True):
    """[(shape, rc, unwritten, bad, messages, log)] over shapes (ASHAPES)
    within @applies (most_keys: only the one with the most keys: the
    running max moves in later tiles; p_rounded: _acheck's)."""
    text = tpl_text or open(os.path.join(GPU, tpl_file)).read()
    if tpl_file == "attention_wgmma.cu":
        text = without_fences(text)
    tpl, env, exe = build(tmp, dt, "attention", params, tpl_text=text, tpl_file=tpl_file, harness="harness_att.h")
    out = []
    shapes = [(i, s) for i, s in enumerate(shapes)
              if all(evaluate(a, env | {"M": s[0], "N": 0, "K": 0, "H": s[1], "G": s[2], "D": s[3]})
                     for a in tpl["applies"])]
    if most_keys:
        shapes = sorted(shapes, key=lambda x: -(x[1][0] + x[1][4]))[:1]
    for i, (m, h, g, d, p0, sc) in shapes:
        e = env | {"M": m, "N": 0, "K": 0, "H": h, "G": g, "D": d}
        scale = sc if sc is not None else 1 / d ** 0.5
        ((qb, q), (kb, k), (vb, v)), poison = _adata(dt, m, h, g, d, p0, seed=100 * i + d)
        for name, b in (("q.bin", qb), ("k.bin", kb), ("v.bin", vb), ("o.bin", poison)):
            (tmp / name).write_bytes(b)
        grid, block, shmem = launch(tpl, e, m, 0, 0)
        (tmp / "out.bin").unlink(missing_ok=True)
        r = subprocess.run([str(exe), str(m), str(h), str(g), str(d), str(p0), repr(float(scale)), str(grid),
                            str(block), str(shmem), str(tmp)], capture_output=True, text=True, timeout=600)
        written = r.returncode in (0, 1) and (tmp / "out.bin").exists()  # not where ASan stopped it (exit 1)
        res = _acheck((tmp / "out.bin").read_bytes(), dt, q, k, v, p0, scale, p_rounded) if written \
            else (-1, -1, [])
        out.append(((m, h, g, d, p0), r.returncode, *res, r.stdout + r.stderr[-3000:]))
    return out


def check_attention(results, what, least, clean):
    """run_attention's results: at least `least` shapes, each exiting 0 with
    `clean` in its log and every element of O right."""
    assert len(results) >= least, f"{what}: too few shapes within @applies"
    for shape, rc, unwritten, bad, msgs, log in results:
        at = f"{what} (M, H, G, D, pos0) = {shape}"
        assert rc == 0 and clean in log, f"{at}:\n{log}"
        assert unwritten == 0 and bad == 0, f"{at}: {unwritten} unwritten, {bad} bad\n" + "\n".join(msgs)


def attention_caught(tmp_path, tpl_file, old, new, dt, params, **kw):
    """Whether run_attention on tpl_file with its one `old` replaced by `new`
    fails a shape (a non-zero exit, an unwritten or wrong element)."""
    text = open(os.path.join(GPU, tpl_file)).read()
    assert text.count(old) == 1, f"{tpl_file} no longer has one: {old}"
    results = run_attention(tmp_path, dt, params, tpl_text=text.replace(old, new), tpl_file=tpl_file, **kw)
    return any(rc != 0 or unwritten or bad for _, rc, unwritten, bad, _, _ in results)


@pytest.mark.parametrize("dt,params", ATT_CASES, ids=[f"{dt}-RW{p['RW']}-HPB{p['HPB']}-NST{p['NST']}"
                                                      for dt, p in ATT_CASES])
def test_attention_mma_on_the_emulated_gpu(tmp_path, dt, params):
    check_attention(run_attention(tmp_path, dt, params), f"attention_mma {dt} {params}", 3, "guard 0 replication 0")


# plausible attention_mma mistakes; each must be caught on the shape with
# the most keys
ATT_MUTATIONS = [
    ("mask one key past the diagonal", "key <= lim[u][x / 2] ?", "key <= lim[u][x / 2] + 1 ?", 0),
    ("O not rescaled by the running max", "oacc[u][n][x] *= corr[x / 2];", ";", 1),
    ("the row sum not rescaled by the running max", "l[u][x] *= corr[x];", ";", 0),
    ("V read by ldmatrix without .trans", "gc_ldmatrix_x4_trans(b, sv", "gc_ldmatrix_x4(b, sv", 2),
]


@pytest.mark.parametrize("what,old,new,which", ATT_MUTATIONS, ids=[m[0] for m in ATT_MUTATIONS])
def test_a_wrong_attention_mma_is_caught(tmp_path, what, old, new, which):
    assert attention_caught(tmp_path, "attention_mma.cu", old, new, *ATT_CASES[which], most_keys=True), \
        f"not caught: {what}"


# Decode attention (M = 1, split over the keys): attention_decode_mma (a kv
# head's query heads as the rows of one mma tile, each warp its own cp.async
# pipeline of key chunks) and the SIMT attention_decode, both merging their
# warps' and blocks' partials through the prelude's gc-split block. Shapes:
# test_amd_emulator.py's DEC_SHAPES (attention_decode_mfma's); splits from
# 1 (a warp streams several chunks) to more than the keys (empty slices).
# KMIN cuts a row in fewer slices than SPLIT where it is short (the 8B-like
# shape's 301 keys: 5 slices of 61 at KMIN 64, 10 of 31 at 32; 78 keys: 2
# and 3; one key: 1); 0 keeps SPLIT, empty slices and all.
DEC_CASES = [
    ("attention_decode_mma.cu", "f16", dict(WARPS=4, KW=16, NST=3, SPLIT=16, DMAX=128, KMIN=0)),
    ("attention_decode_mma.cu", "f16", dict(WARPS=8, KW=16, NST=2, SPLIT=16, DMAX=128, KMIN=64)),
    ("attention_decode_mma.cu", "bf16", dict(WARPS=2, KW=32, NST=2, SPLIT=4, DMAX=128, KMIN=32)),
    ("attention_decode_mma.cu", "f16", dict(WARPS=1, KW=64, NST=4, SPLIT=1, DMAX=64)),
    ("attention_decode_mma.cu", "f16", dict(WARPS=2, KW=16, NST=3, SPLIT=16, DMAX=128, L2PF=2)),
    ("attention_decode_mma.cu", "bf16", dict(WARPS=8, KW=16, NST=2, SPLIT=8, DMAX=128, KMIN=32, L2PF=2)),
    ("attention_decode.cu", "bf16", dict(WARPS=2, KL=16, HPB=2, SPLIT=8, U=2, DMAX=128, L2PF=1)),
    ("attention_decode.cu", "f16", dict(WARPS=4, KL=8, HPB=1, SPLIT=1, U=1, DMAX=128, L2PF=0)),
    ("attention_decode.cu", "bf16", dict(WARPS=2, KL=16, HPB=2, SPLIT=32, U=2, DMAX=128, L2PF=1, PRE=1)),
    ("attention_decode.cu", "f16", dict(WARPS=4, KL=8, HPB=1, SPLIT=1, U=1, DMAX=128, L2PF=0, PRE=1)),
]


@pytest.mark.parametrize("tpl_file,dt,params", DEC_CASES,
                         ids=[f"{f[:-3]}-{dt}-" + "-".join(f"{k}{v}" for k, v in p.items()) for f, dt, p in DEC_CASES])
def test_decode_attention_on_the_emulated_gpu(tmp_path, tpl_file, dt, params):
    # P's bits are kept: attention_decode's in fp32, attention_decode_mma's
    # bf16 as two parts (f16 rounds it once, as the op allows)
    exact_p = tpl_file == "attention_decode.cu" or dt == "bf16"
    check_attention(run_attention(tmp_path, dt, params, tpl_file=tpl_file, shapes=DEC_SHAPES, p_rounded=not exact_p),
                    f"{tpl_file} {dt} {params}", 3, "guard 0")


# plausible attention_decode_mma mistakes, each caught on the 8B-like shape
# with a split where each warp streams five chunks through three stages
DEC_MUTANT = ("f16", dict(WARPS=2, KW=16, NST=3, SPLIT=2, DMAX=128))
DEC_MUTATIONS = [
    ("a key past the slice's end taken", "k0 + 8 * n + 2 * qc + (x % 2) < j1 ?", "k0 + 8 * n + 2 * qc + (x % 2) <= j1 ?"),
    ("q's fragment registers in the wrong order", "gc_min64(qr + 8 * (x % 2), per - 1)", "gc_min64(qr + 8 * (x / 2), per - 1)"),
    ("a warp's chunks not interleaved", "c = w + (int64_t)p * WARPS;", "c = w + (int64_t)p;"),
    ("bf16's P in one part", "#define ADM_PP (GC_TA == GC_BF16 ? 2 : 1)", "#define ADM_PP 1"),
    ("tickets counted to SPLIT, not to the row's slices", "gc_split_last(&adm_cnt[row * G + g], ns,",
     "gc_split_last(&adm_cnt[row * G + g], SPLIT,"),
]


@pytest.mark.parametrize("what,old,new", DEC_MUTATIONS, ids=[m[0] for m in DEC_MUTATIONS])
def test_a_wrong_attention_decode_mma_is_caught(tmp_path, what, old, new):
    dt, params = ("bf16", DEC_MUTANT[1]) if "bf16" in what else DEC_MUTANT
    if "slices" in what:  # a split that KMIN cuts short: 5 slices of 16
        params = params | dict(SPLIT=16, KMIN=64)
    assert attention_caught(tmp_path, "attention_decode_mma.cu", old, new, dt, params,
                            shapes=DEC_SHAPES[:1], p_rounded=dt != "bf16"), f"not caught: {what}"


# L2PF's prefetch before the wait is a hint the results cannot show, but
# its rows must lie in the cache: one run to the slice's nominal end (past
# the last key for the last slice: 301 keys in slices of 151) reads past
# the emulator's exact buffers, which ASan reports.
PF_MUTATIONS = [
    ("attention_decode_mma.cu", DEC_MUTANT[1], "gc_min64(a.j1, a.L - 1)", "a.j0 + (a.L + SPLIT - 1) / SPLIT"),
    ("attention_decode.cu", dict(WARPS=2, KL=16, HPB=2, SPLIT=2, U=2, DMAX=128, L2PF=1),
     "D, at.j0, gc_min64(at.j1, at.L - 1), AD_T)", "D, at.j0, at.j0 + (at.L + SPLIT - 1) / SPLIT, AD_T)"),
    # PRE's loads before the wait: to the slice's nominal end, past the cache
    ("attention_decode.cu", dict(WARPS=2, KL=16, HPB=2, SPLIT=64, U=2, DMAX=128, L2PF=0, PRE=1),
     "gc_min64(at.j1, at.L - 1), kl, D", "at.j0 + (at.L + SPLIT - 1) / SPLIT, kl, D"),
]


def test_pre_without_the_newest_row_is_caught(tmp_path):
    """PRE loads a group's first keys before the wait but the newest row,
    which the kernel before writes: without its load after the wait (its key
    and value left zero) the results are wrong where the newest row falls in
    a group's first step (301 keys in slices of 10 at SPLIT 32: the last slice
    holds the newest alone)."""
    params = dict(WARPS=2, KL=16, HPB=2, SPLIT=32, U=2, DMAX=128, L2PF=1, PRE=1)
    old = "ad_fetch(kb + (at.L - 1) * ld, d0, D, vec_ok, kr[u][c]);"
    assert attention_caught(tmp_path, "attention_decode.cu", old, "(void)0;", "f16", params,
                            shapes=DEC_SHAPES[:1], p_rounded=False), "not caught"



# L2PF=2 copies a warp's first chunks but the newest row before the wait:
# that row read after it (301 keys in slices of 19 at SPLIT 16: the last
# slice's newest row in warp 0's first chunk), and the path where the
# positions moved between the two reads (the emulator never moves them:
# forced here) copying every row again over the early copies.
EARLY = dict(WARPS=2, KW=16, NST=3, SPLIT=16, DMAX=128, L2PF=2)
EARLY_OLD = "const bool early = L2PF == 2 && lpre == at.L && kpre == Kc;"


def test_early_copies_without_the_newest_row_are_caught(tmp_path):
    old = "adm_newest(stages, Kc, Vc, j0, j1, at.L - 1, ld, D, w, lane);"
    assert attention_caught(tmp_path, "attention_decode_mma.cu", old, "(void)0;", "f16", EARLY,
                            shapes=DEC_SHAPES[:1]), "not caught"


def test_early_copies_leave_no_row_of_another_slice_unset(tmp_path):
    """A short row (the shapes' 3 keys over 16 slices) puts the newest row
    inside an earlier slice's first chunk, past that slice's end: left out
    of the early copy there, it would stay whatever shared memory held (NaN
    here) and meet P·V's zero probability; it must be zero-filled like
    every row past the slice."""
    old = "if (k0 + r == jskip && jskip < j1)"
    assert attention_caught(tmp_path, "attention_decode_mma.cu", old, "if (k0 + r == jskip)", "f16",
                            EARLY, shapes=DEC_SHAPES), "not caught"


def test_early_copies_made_again_where_the_positions_moved(tmp_path):
    assert not attention_caught(tmp_path, "attention_decode_mma.cu", EARLY_OLD, "const bool early = false;", "f16",
                                EARLY, shapes=DEC_SHAPES), "the copies made again are wrong"


@pytest.mark.parametrize("tpl_file,params,old,new", PF_MUTATIONS, ids=[m[0][:-3] for m in PF_MUTATIONS])
def test_a_prefetch_past_the_cache_is_caught(tmp_path, tpl_file, params, old, new):
    assert not attention_caught(tmp_path, tpl_file, old, old, "f16", params, shapes=DEC_SHAPES[:1],
                                p_rounded=tpl_file != "attention_decode.cu"), "the unchanged template fails"
    assert attention_caught(tmp_path, tpl_file, old, new, "f16", params, shapes=DEC_SHAPES[:1],
                            p_rounded=tpl_file != "attention_decode.cu"), f"not caught: {tpl_file}"


# The batched decode step (attention_batch: row t of Q at its own position
# and cache slot, the workspace and tickets per row; test_amd_emulator.py's
# BATCH_SHAPES) on both decode attentions, with a split and without.
BATCH_CASES = [
    ("attention_decode_mma.cu", "f16", dict(WARPS=2, KW=16, NST=3, SPLIT=8, DMAX=128, KMIN=32)),
    ("attention_decode_mma.cu", "f16", dict(WARPS=2, KW=16, NST=3, SPLIT=8, DMAX=128, KMIN=0)),
    ("attention_decode_mma.cu", "bf16", dict(WARPS=4, KW=32, NST=2, SPLIT=1, DMAX=128)),
    ("attention_decode.cu", "f16", dict(WARPS=2, KL=16, HPB=4, SPLIT=4, U=2, DMAX=128, L2PF=1)),
    ("attention_decode.cu", "bf16", dict(WARPS=2, KL=16, HPB=2, SPLIT=8, U=2, DMAX=128, L2PF=1, PRE=1)),
]


def run_batched(tmp, tpl_file, dt, params, tpl_text=None, shapes=BATCH_SHAPES, split_text=None):
    """run_batch's results for tpl_file's attention_batch at params."""
    tpl, env, exe = build(tmp, dt, "attention_batch", params, tpl_text=tpl_text, tpl_file=tpl_file,
                          harness="harness_att.h", split_text=split_text)
    exact_p = tpl_file == "attention_decode.cu" or dt == "bf16"
    return run_batch(tmp, exe, env, lambda e: launch(tpl, e, e["M"], 0, 0), dt, shapes, p_rounded=not exact_p)


@pytest.mark.parametrize("tpl_file,dt,params", BATCH_CASES,
                         ids=[f"{f[:-3]}-{dt}-" + "-".join(f"{k}{v}" for k, v in p.items()) for f, dt, p in BATCH_CASES])
def test_batched_decode_attention_on_the_emulated_gpu(tmp_path, tpl_file, dt, params):
    check_attention(run_batched(tmp_path, tpl_file, dt, params), f"{tpl_file} attention_batch {dt} {params}", 3,
                    "guard 0")


def test_a_batch_row_in_the_wrong_slot_is_caught(tmp_path):
    """The matrix-core decode attentions' block decomposition (the prelude's
    gc_split_block) reading row t's keys from slot t, not slot[t]: caught
    on attention_decode_mma."""
    text = common_block("gc-split", tmp_path / "split.h")
    old = "Kc += (int64_t)pos[M + a.row] * S * G * D, Vc += (int64_t)pos[M + a.row] * S * G * D;"
    assert text.count(old) == 1
    results = run_batched(tmp_path, *BATCH_CASES[0][:3], shapes=BATCH_SHAPES[:1],
                          split_text=text.replace(old, "Kc += a.row * S * G * D, Vc += a.row * S * G * D;"))
    assert any(rc != 0 or unwritten or bad for _, rc, unwritten, bad, _, _ in results)


# The prefill GEMMs on mma.sync (sm_80 and up; on sm_90a where the wgmma
# families do not apply): gemm_mma (f16/bf16 weights: swizzled and padded
# shared layouts, 2 to 4 stages) and gemm_q_mma (B in a block format,
# dequantized into shared memory: GGUF and device layouts); every op, M, N
# and K with edges (no multiple of the tiles; K of gemm_mma a multiple of
# 8 only), small tiles so that a block is a few warps.
GEMM_CASES = [
    ("gemm_mma.cu", "gemm", "f16", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=2, SWZ=1, RASTER=4),
     [(70, 50, 200), (2, 33, 64)]),
    ("gemm_mma.cu", "gemm_add", "bf16", dict(BM=64, BN=32, BK=16, WM=32, WN=16, STAGES=3, SWZ=0, RASTER=1),
     [(33, 40, 136)]),
    ("gemm_mma.cu", "gemm_swiglu", "f16", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=4, SWZ=1, RASTER=8),
     [(40, 24, 96)]),
    ("gemm_q_mma.cu", "gemm", "f16:q4_kr:f16", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=2, RASTER=4),
     [(70, 50, 512)]),
    ("gemm_q_mma.cu", "gemm_add", "f16:q6_k:f16", dict(BM=64, BN=32, BK=64, WM=32, WN=16, STAGES=3, RASTER=1),
     [(17, 33, 512)]),
    ("gemm_q_mma.cu", "gemm_swiglu", "f16:q8_0:f16", dict(BM=32, BN=64, BK=32, WM=16, WN=32, STAGES=2, RASTER=8),
     [(33, 20, 96)]),
    ("gemm_q_mma.cu", "gemm", "f16:q4_0r:f16", dict(BM=32, BN=32, BK=64, WM=16, WN=16, STAGES=4, RASTER=4),
     [(9, 16, 256)]),
    ("gemm_q_mma.cu", "gemm_add", "f16:q5_k:f16", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=2, RASTER=1),
     [(20, 17, 256)]),
]


@pytest.mark.parametrize("tpl_file,op,dtype,params,shapes", GEMM_CASES,
                         ids=[f"{c[0][:-3]}-{c[1]}-{c[2].replace(':', '_')}" for c in GEMM_CASES])
def test_gemm_mma_families_on_the_emulated_gpu(tmp_path, tpl_file, op, dtype, params, shapes):
    check(run_case(tmp_path, dtype, op, params, shapes, tpl_file=tpl_file), f"{tpl_file} {op} {dtype} {params}")


GEMM_MUTATIONS = [
    ("gemm_mma's A fragments from rows 0-7 twice", "gemm_mma.cu",
     "gm_ldsm4(sa + gm_off(wm * WM + i * 16 + (lane & 15), kk * 2 + (lane >> 4)), a[i]);",
     "gm_ldsm4(sa + gm_off(wm * WM + i * 16 + (lane & 7), kk * 2 + (lane >> 4)), a[i]);", 0),
    ("gemm_q_mma's column n+1 scaled by column n's scale", "gemm_q_mma.cu",
     "  o[1] = gc_fma(e1.x, c0[1], o[1]);", "  o[1] = gc_fma(e0.x, c0[1], o[1]);", 3),
]


def caught(tmp_path, case, where, old, new, first_shape=False):
    """Whether case (tpl_file, op, dtype, params, shapes) with its template's
    one `old` replaced by `new` computes a wrong or unwritten element."""
    tpl_file, op, dtype, params, shapes = case
    assert where == tpl_file
    text = open(os.path.join(GPU, tpl_file)).read()
    assert text.count(old) == 1, f"{tpl_file} no longer has one: {old}"
    results = run_case(tmp_path, dtype, op, params, shapes[:1] if first_shape else shapes, tpl_file=tpl_file,
                       tpl_text=text.replace(old, new))
    return any(bad or unwritten for _, unwritten, bad, _ in results)


@pytest.mark.parametrize("what,where,old,new,which", GEMM_MUTATIONS, ids=[m[0] for m in GEMM_MUTATIONS])
def test_a_wrong_mma_gemm_is_caught(tmp_path, what, where, old, new, which):
    assert caught(tmp_path, GEMM_CASES[which], where, old, new, first_shape=True), f"not caught: {what}"


# The SIMT decode GEMVs, which hold no matrix instruction: gemv_gpu (fp16
# and bf16 weights: the 8B fp16 decode's QKV with RoPE, and the fallback
# of every dense op), gemv_q_gpu (the GGUF layouts on any GPU: one source
# with AMD) and gemv_bulk (sm_90, one row of A: B through a shared-memory
# ring that cp.async.bulk fills; SMS set low so that a block takes several
# row groups). Every op each serves, f16 and bf16, split-K within the block
# and not, one to four rows a warp, several bodies of MMAX (and M past
# MMAX for gemv_q_gpu: passes of MMAX rows), its staged copies and not,
# K not a multiple of the stage (gemv_bulk's last, shorter stage) nor of a
# warp's step, N no multiple of the block's rows; gemv_bulk's launch of
# the next kernel after its wait (EARLY=0) and before it (the default)
SIMT_CASES = [
    ("gemv.cu", "gemm", "f16", dict(WARPS=8, KS=2, ROWS=2, UNR=2, MMAX=1), [(1, 100, 776)]),
    ("gemv.cu", "gemm_add", "bf16", dict(WARPS=4, KS=4, ROWS=1, UNR=4, MMAX=4), [(3, 33, 1032), (1, 5, 64)]),
    ("gemv.cu", "rmsnorm_gemm", "f16", dict(WARPS=4, KS=4, ROWS=4, UNR=1, MMAX=8, OCC=1), [(8, 24, 520), (5, 7, 1000)]),
    ("gemv.cu", "gemm_swiglu", "bf16", dict(WARPS=2, KS=1, ROWS=2, UNR=2, MMAX=2), [(2, 17, 512)]),
    ("gemv.cu", "rmsnorm_gemm_swiglu", "f16", dict(WARPS=8, KS=2, ROWS=1, UNR=2, MMAX=8, OCC=1), [(5, 40, 1000)]),
    ("gemv_q.cu", "gemm", "f16:q4_0:f16", dict(WARPS=8, KS=2, ROWS=1, UNR=4, MMAX=1, STAGE=1), [(1, 50, 1024)]),
    ("gemv_q.cu", "gemm_add", "bf16:q6_k:bf16", dict(WARPS=4, KS=4, ROWS=2, UNR=2, MMAX=2, STAGE=0), [(5, 19, 768)]),
    ("gemv_q.cu", "rmsnorm_gemm", "f16:q4_k:f16", dict(WARPS=4, KS=2, ROWS=2, UNR=2, MMAX=4, STAGE=1), [(3, 33, 1024)]),
    ("gemv_q.cu", "gemm_swiglu", "f16:q8_0:f16", dict(WARPS=2, KS=1, ROWS=2, UNR=4, MMAX=1, STAGE=1), [(1, 17, 896)]),
    ("gemv_q.cu", "rmsnorm_gemm_swiglu", "bf16:q5_k:bf16", dict(WARPS=8, KS=8, ROWS=1, UNR=1, MMAX=8, STAGE=0), [(8, 9, 2048)]),
    ("gemv_bulk.cu", "gemm", "f16", dict(RS=8, KC=512, STAGES=2, BPS=1, SMS=3), [(1, 100, 1240)]),
    ("gemv_bulk.cu", "gemm_add", "bf16", dict(RS=2, KC=256, STAGES=4, BPS=2, SMS=1, EARLY=0), [(1, 7, 264)]),
    ("gemv_bulk.cu", "rmsnorm_gemm", "bf16", dict(RS=4, KC=256, STAGES=3, BPS=1, SMS=2), [(1, 37, 1000)]),
    ("gemv_bulk.cu", "gemm_swiglu", "f16", dict(RS=4, KC=256, STAGES=2, BPS=1, SMS=2), [(1, 19, 776)]),
    ("gemv_bulk.cu", "rmsnorm_gemm_swiglu", "bf16", dict(RS=8, KC=512, STAGES=3, BPS=2, SMS=1), [(1, 40, 1240)]),
    ("gemv.cu", "gemm_add", "f16", dict(WARPS=4, KS=1, ROWS=4, UNR=2, MMAX=4), [(3, 21, 264), (4, 16, 520)]),
]


@pytest.mark.parametrize("tpl_file,op,dtype,params,shapes", SIMT_CASES,
                         ids=[f"{c[0][:-3]}-{c[1]}-{c[2].replace(':', '_')}" for c in SIMT_CASES])
def test_simt_gemv_on_the_emulated_gpu(tmp_path, tpl_file, op, dtype, params, shapes):
    check(run_case(tmp_path, dtype, op, params, shapes, tpl_file=tpl_file), f"{tpl_file} {op} {dtype} {params}")


# The GEMVs' L2 window (@prefetch: gemv_bulk, gemv_qmma): the harness
# passes a window of its own (16·1001 bytes, not a multiple of the blocks'
# shares) that every case of theirs checks unchanged, asks for inside its
# bounds and asks for in full; in gc_prefetch_window (the gc-gemv block), a
# share not cut at the window's end asks past it (ASan's global redzone) and
# a share of a size no multiple of 16 is a misuse, each caught in both
# templates' rings.
WINDOW_MUTATIONS = [
    ("the last share not cut at the window's end", "hi = gc_min64(n, lo + chunk)", "hi = lo + chunk"),
    ("shares of a size no multiple of 16", "((n + nb - 1) / nb + 15) & ~(int64_t)15", "((n + nb - 1) / nb + 9)"),
]
WINDOW_CASES = [
    ("gemv_bulk.cu", "gemm", "f16", dict(RS=8, KC=512, STAGES=2, BPS=1, SMS=3), [(1, 100, 1240)]),
    ("gemv_qmma.cu", "gemm_add", "f16:q8_0r:f16", dict(RL=3, PT=1, WARPS=8, KS=4, NST=3, XS=0, SMS=2), [(1, 100, 1536)]),
]


@pytest.mark.parametrize("what,old,new", WINDOW_MUTATIONS, ids=[m[0] for m in WINDOW_MUTATIONS])
@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c[0][:-3] for c in WINDOW_CASES])
def test_a_window_out_of_bounds_is_caught(tmp_path, case, what, old, new):
    tpl_file, op, dtype, params, shapes = case
    text = re.search(r"/\* >>> gc-gemv.*?<<< gc-gemv \*/", open(os.path.join(GPU, "prelude_common.h")).read(),
                     re.S).group(0)
    assert text.count(old) == 1, f"the gc-gemv block no longer has one: {old}"
    with pytest.raises(AssertionError):  # the run's exit (ASan) or its misuse count
        run_case(tmp_path, dtype, op, params, shapes, tpl_file=tpl_file, gemv_text=text.replace(old, new) + "\n")


@pytest.mark.parametrize("mutant", [False, True], ids=["prelude", "floor of n over nb"])
def test_the_window_is_asked_in_full(tmp_path, mutant):
    """gemv_bulk's grid of 17 blocks asks a window of 288 bytes of L2 in
    full (shares of 32 bytes, the last cut at the end); shares rounded from
    the floor of n / nb (16 bytes each) would leave its last 16 unasked,
    which the harness counts as a misuse."""
    old = "((n + nb - 1) / nb + 15)"
    text = re.search(r"/\* >>> gc-gemv.*?<<< gc-gemv \*/", open(os.path.join(GPU, "prelude_common.h")).read(),
                     re.S).group(0)
    assert text.count(old) == 1, f"the gc-gemv block no longer has one: {old}"
    params = dict(RS=8, KC=512, STAGES=2, BPS=1, SMS=17)  # 17 blocks for N = 136
    run = lambda: run_case(tmp_path, "f16", "gemm", params, [(1, 136, 520)], tpl_file="gemv_bulk.cu",  # noqa: E731
                           gemv_text=text.replace(old, "(n / nb + 15)") + "\n" if mutant else None, window_bytes=288)
    if mutant:
        with pytest.raises(AssertionError, match="never asked of L2"):
            run()
    else:
        check(run(), "gemv_bulk, a window of 288 bytes over 17 blocks")


# gemv_gpu's RoPE epilogue (the fp16 decode's QKV): both layouts, GQA,
# heads of 128 and 64, split-K and not, several rows
SIMT_ROPE_CASES = [
    ("f16", dict(WARPS=8, KS=2, ROWS=2, UNR=2, MMAX=1), 1, 4, 2, 128, 0, 37),
    ("bf16", dict(WARPS=4, KS=1, ROWS=4, UNR=1, MMAX=4), 3, 5, 1, 64, 1, 9),
]


# gemv_bulk's RoPE epilogue: a unit is a pair (its two rows in one stage),
# both layouts, GQA, heads of 128 and 64, blocks taking several groups
SIMT_ROPE_CASES += [
    ("f16", dict(RS=8, KC=256, STAGES=3, BPS=1, SMS=3, tpl_file="gemv_bulk.cu"), 1, 4, 2, 128, 0, 37),
    ("bf16", dict(RS=2, KC=512, STAGES=2, BPS=2, SMS=2, tpl_file="gemv_bulk.cu"), 1, 5, 1, 64, 1, 9),
    # one block of 256 groups: the lanes' held pairs stored 32 groups at a time, 8 times
    ("f16", dict(RS=2, KC=512, STAGES=2, BPS=1, SMS=1, tpl_file="gemv_bulk.cu"), 1, 4, 2, 128, 1, 3),
]


# the same with Qwen2's biases in the epilogue (rmsnorm_gemm_bias_rope_kv):
# gemv_bulk's held pairs and gemv_gpu's split-K store
SIMT_ROPE_CASES += [
    ("f16", dict(RS=4, KC=512, STAGES=2, BPS=1, SMS=3, tpl_file="gemv_bulk.cu", bias=True), 1, 12, 2, 128, 0, 37),
    ("bf16", dict(WARPS=8, KS=2, ROWS=2, UNR=2, MMAX=1, bias=True), 1, 5, 1, 64, 1, 9),
]


@pytest.mark.parametrize("dtype,params,m,h,g,d,layout,pos0", SIMT_ROPE_CASES,
                         ids=[f"{c[1].get('tpl_file', 'gemv.cu')[:-3]}-{c[0]}-L{c[6]}" + ("-bias" if c[1].get("bias") else "")
                              for c in SIMT_ROPE_CASES])
def test_gemv_gpu_rope_kv_on_the_emulated_gpu(tmp_path, dtype, params, m, h, g, d, layout, pos0):
    params = dict(params)
    tpl_file, bias = params.pop("tpl_file", "gemv.cu"), params.pop("bias", False)
    unwritten, bad, msgs = run_rope(tmp_path, dtype, params, m, h, g, d, layout, pos0, tpl_file=tpl_file, bias=bias)
    assert unwritten == 0 and bad == 0, f"{dtype} {params}: {unwritten} unwritten, {bad} bad\n" + "\n".join(msgs)


# gemv_gpu's storing thread of a RoPE pair reads its frequency before the
# loop (the split-K path picks it from the block's threads, KS=1 from the
# warp's lanes): the next pair's frequency is caught in both
@pytest.mark.parametrize("case", [("f16", dict(WARPS=4, KS=2, ROWS=2, UNR=1, MMAX=1), 1, 2, 1, 64, 0, 5),
                                  ("bf16", dict(WARPS=4, KS=1, ROWS=4, UNR=1, MMAX=4), 3, 2, 1, 64, 1, 9)],
                         ids=["KS2", "KS1"])
def test_gemv_gpu_rope_frequency_of_the_wrong_pair_is_caught(tmp_path, case):
    old, new = "gc_rope_freq(ro, sn / 2)", "gc_rope_freq(ro, sn / 2 + 1)"
    text = open(os.path.join(GPU, "gemv.cu")).read()
    assert old in text, f"gemv.cu no longer has: {old}"
    unwritten, bad, _ = run_rope(tmp_path, *case, tpl_file="gemv.cu", tpl_text=text.replace(old, new))
    assert unwritten or bad, "not caught: the frequency of the next pair"


# gemv_bulk's RoPE units: the pair's frequency and its second row
@pytest.mark.parametrize("old,new", [("? gc_rope_freq(ro, u) :", "? gc_rope_freq(ro, u + 1) :"),
                                     ("gc_rope_elem(u % half, r, ro.D, ro.layout)",
                                      "gc_rope_elem(u % half, 0, ro.D, ro.layout)"),
                                     ("gi % 32 == 31", "gi % 64 == 63")],
                         ids=["frequency-of-the-next-pair", "one-row-twice", "held-pairs-overwritten"])
def test_gemv_bulk_rope_wrong_pair_is_caught(tmp_path, old, new):
    text = open(os.path.join(GPU, "gemv_bulk.cu")).read()
    assert text.count(old) == 1, f"gemv_bulk.cu no longer has one: {old}"
    unwritten, bad, _ = run_rope(tmp_path, "f16", dict(RS=2, KC=256, STAGES=2, BPS=1, SMS=1), 1, 2, 1, 64, 0, 5,
                                 tpl_file="gemv_bulk.cu", tpl_text=text.replace(old, new))
    assert unwritten or bad, f"not caught: {new}"


# the biases' columns: a RoPE pair's second element given its first's bias
@pytest.mark.parametrize("tpl_file,old,new,params", [
    ("gemv_bulk.cu", "gb_bias(ro, N, u, GB_NR - 1)", "gb_bias(ro, N, u, 0)",
     dict(RS=2, KC=256, STAGES=2, BPS=1, SMS=1)),
    ("gemv.cu", "gv_bias(ro, (n) + 1)", "gv_bias(ro, n)", dict(WARPS=4, KS=1, ROWS=4, UNR=1, MMAX=1))],
    ids=["gemv_bulk", "gemv_gpu"])
def test_a_wrong_rope_bias_is_caught(tmp_path, tpl_file, old, new, params):
    text = open(os.path.join(GPU, tpl_file)).read()
    assert text.count(old) == 1, f"{tpl_file} no longer has one: {old}"
    unwritten, bad, _ = run_rope(tmp_path, "f16", params, 1, 2, 1, 64, 0, 5, tpl_file=tpl_file, bias=True,
                                 tpl_text=text.replace(old, new))
    assert unwritten or bad, f"not caught: {new}"


SIMT_MUTATIONS = [
    ("gemv_gpu: one K slice's partial sums dropped", "gemv.cu",
     "for (int k = 0; k < KS; k++) {\n      s += red[", "for (int k = 1; k < KS; k++) {\n      s += red[", 0),
    ("gemv_q_gpu: a unit's second run of A read from its first", "gemv_q.cu",
     "LOADV_A(4, A, m * K + k1, a + 4);", "LOADV_A(4, A, m * K + k0, a + 4);", 7),
    ("gemv_bulk: A read without its stage's offset", "gemv_bulk.cu",
     "gc_ldv<8>(A + kc * KC + c, a);", "gc_ldv<8>(A + c, a);", 10),
    ("gemv_bulk: the up row's sum taken from the gate row", "gemv_bulk.cu",
     "gb_store(C, u, acc[0] * scale, acc[GB_NR - 1] * scale, cold)", "gb_store(C, u, acc[0] * scale, acc[0] * scale, cold)", 13),
    ("gemv_bulk: gemm_add's residual read ahead but not added", "gemv_bulk.cu",
     "GC_OP_GEMM_ADD ? x + cold : x", "x", 11),
    ("gemv_gpu: gemm_add's residual read ahead but not added (split-K)", "gemv.cu",
     "GC_OP_GEMM_ADD ? (x) + cold : (x)", "(x)", 1),
    ("gemv_gpu: gemm_add's residual read ahead from row 0 (one warp a row group)", "gemv.cu",
     "LOAD_C(C, sm * N + sn)", "LOAD_C(C, sn)", 15),
    ("gemv_gpu: gemm_add's residual read ahead from the next column (split-K)", "gemv.cu",
     "LOAD_C(C, sm * N + sn)", "LOAD_C(C, sm * N + (sn + 1) % N)", 1),
    ("gemv_bulk: the gate/up pair's up row one row off", "gemv_bulk.cu",
     "return PAIR == 2 ? r * N + u : u;", "return PAIR == 2 ? r * (N - 1) + u : u;", 14),
]


@pytest.mark.parametrize("what,where,old,new,case", SIMT_MUTATIONS, ids=[m[0] for m in SIMT_MUTATIONS])
def test_a_wrong_simt_gemv_is_caught(tmp_path, what, where, old, new, case):
    assert caught(tmp_path, SIMT_CASES[case], where, old, new), f"not caught: {what}"


# attention_wgmma (sm_90a's prefill attention: wgmma S = Q·Kᵀ from shared
# memory, O += P·V with P from registers and V N-major, a producer
# warpgroup or warp filling a ring of K/V tiles by cp.async onto
# mbarriers, 128-byte swizzled panels): heads of 64 and 128, GQA of 5:1
# and 4:1, one to four heads a block, one and two consumer warpgroups,
# tiles of 64 and 128 keys, two to four stages, the overlap of the next S
# with this P·V, the two warpgroups taking turns (PP: with and without the
# overlap, warpgroups with different counts of tiles, a second warpgroup
# with no rows), scales of 0 and below; O between guard regions, every
# element against fp64, and no named barrier left with an arrival that
# nothing met
WG_SHAPES = [(3, 5, 1, 64, 37, None), (70, 5, 1, 128, 21, 0.35), (70, 8, 2, 64, 0, None),
             (130, 8, 2, 128, 5, None), (17, 4, 1, 64, 200, 0.5), (20, 4, 1, 128, 3, -0.2),
             (9, 8, 2, 64, 9, 0.0)]
WG_CASES = [
    ("f16", dict(CW=2, HPB=1, KB=128, NST=3, PW=4, DMAX=128, OVL=0)),
    ("bf16", dict(CW=1, HPB=4, KB=64, NST=2, PW=1, DMAX=64, OVL=1)),
    ("f16", dict(CW=2, HPB=2, KB=64, NST=4, PW=4, DMAX=64, OVL=0)),
    ("bf16", dict(CW=1, HPB=1, KB=128, NST=2, PW=4, DMAX=128, OVL=1)),
    ("f16", dict(CW=2, HPB=1, KB=64, NST=2, PW=4, DMAX=128, OVL=1, PP=1)),
    ("bf16", dict(CW=2, HPB=2, KB=64, NST=3, PW=1, DMAX=64, OVL=0, PP=1)),
]


@pytest.mark.parametrize("dt,params", WG_CASES, ids=[f"{dt}-D{p['DMAX']}-CW{p['CW']}-HPB{p['HPB']}-KB{p['KB']}-OVL{p['OVL']}"
                                                     f"-PP{p.get('PP', 0)}" for dt, p in WG_CASES])
def test_attention_wgmma_on_the_emulated_gpu(tmp_path, dt, params):
    check_attention(run_attention(tmp_path, dt, params, tpl_file="attention_wgmma.cu", shapes=WG_SHAPES),
                    f"attention_wgmma {dt} {params}", 2, "guard 0")


WG_MUTATIONS = [
    ("a key past the diagonal unmasked", "if (8 * (i / 4) + 2 * qc + i % 2 > rel[x])",
     "if (8 * (i / 4) + 2 * qc + i % 2 > rel[x] + 1)", 0),
    ("a negative scale's sign lost", "scale < 0.0f ? 0x80008000u : 0u", "0u", 0),
    ("a scale of 0 taken as it is", "fabsf(scale) * 1.4426950408889634f, 1.17549435e-38f)",
     "fabsf(scale) * 1.4426950408889634f, 0.0f)", 1),
    ("O not rescaled by the running max", "    o[i] *= corr[i % 4 / 2];", "    ;", 2),
    ("V's 64-column panels half as far apart (its descriptor's LBO)",
     "gc_wgmma_desc(sv + t * 2048, AW_TBYTES, 128)", "gc_wgmma_desc(sv + t * 2048, AW_TBYTES / 2, 128)", 0),
    ("K's k steps 16 bytes apart, not 32", "gc_wgmma_desc(sk + k / 4 * AW_TBYTES + k % 4 * 32, 16, 128)",
     "gc_wgmma_desc(sk + k / 4 * AW_TBYTES + k % 4 * 16, 16, 128)", 3),
    ("the panels stored unswizzled", "(((c % 8) ^ (r % 8)) << 4)", "((c % 8) << 4)", 1),
    ("PP: warpgroup 1's last hand-over left pending", "    aw_turn(pp, c); /* warpgroup 1's last hand-over */",
     "    ;", 4),
    ("PP: no empty turns past a warpgroup's tiles (a hang)", "if (j < nturn) /* the turns", "if (0) /* the turns", 4),
    ("PP: turns while the second warpgroup has no rows (a hang)", "const int pp = PP && CW == 2 && nact_of(1) > 0;",
     "const int pp = PP && CW == 2;", 4),
]


@pytest.mark.parametrize("what,old,new,which", WG_MUTATIONS, ids=[m[0] for m in WG_MUTATIONS])
def test_a_wrong_attention_wgmma_is_caught(tmp_path, what, old, new, which):
    assert attention_caught(tmp_path, "attention_wgmma.cu", old, new, *WG_CASES[which], shapes=WG_SHAPES), \
        f"not caught: {what}"


# ---- Qwen's row-wise ops: bias (add.cu built for it) and qk_norm ---------------

def row_data(dt, op, shape, seed):
    """The inputs of op at shape as the harness's files (bits) and as the
    case table's dump dict (tests/cases.py: name -> (dtype, fp64 values));
    Z (bias) poisoned with NaN, so an element left unwritten fails."""
    import numpy as np
    import ggufq
    rng = np.random.default_rng(seed)

    def as16(lo, hi, n):
        x = rng.uniform(lo, hi, n).astype(np.float32)
        bits = x.astype("<f2").view("<u2") if dt == "f16" else ggufq.bf16_bits(x).reshape(-1)
        return bits, as_f64(bits.tobytes(), dt)

    if op == "bias":
        m, n = shape
        (xb, xv), (bb, bv) = as16(-1, 1, m * n), as16(-1, 1, n)
        poison = np.full(m * n, 0x7E00 if dt == "f16" else 0x7FC0, "<u2")
        return {"x.bin": xb, "b.bin": bb, "z.bin": poison}, {"X": (dt, xv), "b": (dt, bv)}, "Z"
    m, h, g, dd = shape
    (qb, qv), (nb, nv), (kb, kv) = as16(-1, 1, m * (h + 2 * g) * dd), as16(0.5, 1.5, dd), as16(0.5, 1.5, dd)
    return {"qkv.bin": qb, "qn.bin": nb, "kn.bin": kb}, {"QKV.init": (dt, qv), "qn": (dt, nv), "kn": (dt, kv)}, "QKV"


def run_rows(tmp, tpl_file, op, dt, params, shapes, tpl_text=None):
    """Build a variant of a row-wise template (harness_rows.h) and check it
    on every shape with the case table's check of op (raises on a wrong
    element; a misuse or a changed input fails the run)."""
    import cases
    tpl, env, exe = build(tmp, dt, op, params, tpl_text=tpl_text, tpl_file=tpl_file, harness="harness_rows.h")
    first = lambda s: re.split(r"\s+(?=\d+\s+\d+\s*$)", s.strip())[0]  # "<expr> 1 1"
    for s, shape in enumerate(shapes):
        files, d, name = row_data(dt, op, shape, seed=s)
        for fn, bits in files.items():
            (tmp / fn).write_bytes(bits.tobytes())
        e = env | dict(zip("MN" if op == "bias" else "MHGD", shape))
        grid, block = evaluate(first(tpl["grid"]), e), evaluate(first(tpl["block"]), e)
        r = subprocess.run([str(exe), str(grid), str(block), str(tmp), *map(str, shape)], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0 and "misuse 0 inputs_changed 0" in r.stdout, \
            f"{tpl_file} {op} {dt} {params} {shape}:\n{r.stdout}{r.stderr[-3000:]}"
        d[name] = (dt, as_f64((tmp / "out.bin").read_bytes(), dt))
        cases.CHECK[op](d, dt, shape)


# (template, op, dtype, parameters, shapes): bias in whole blocks with rows
# of whole vectors (1152, 36, 4608: a vector of b a load) and not (300, 37:
# b element by element, the column wrapping at the row's end), and in a
# partial last block only (5 x 7); qk_norm with 32 lanes a head of 128, 8
# lanes a head of 64 or 6, heads past the grid's last in a block
ROW_CASES = [
    ("add.cu", "bias", "f16", dict(THREADS=64, VEC=8, UNROLL=2), [(7, 300), (2, 1152), (5, 7)]),
    ("add.cu", "bias", "bf16", dict(THREADS=128, VEC=4, UNROLL=1), [(33, 37), (33, 36), (1, 4608)]),
    ("qk_norm.cu", "qk_norm", "f16", dict(THREADS=128, TPH=32), [(1, 32, 8, 128), (3, 5, 1, 96)]),
    ("qk_norm.cu", "qk_norm", "bf16", dict(THREADS=64, TPH=8), [(17, 4, 2, 64), (2, 3, 3, 6)]),
]


@pytest.mark.parametrize("tpl_file,op,dt,params,shapes", ROW_CASES,
                         ids=[f"{c[1]}-{c[2]}-" + "-".join(f"{k}{v}" for k, v in c[3].items()) for c in ROW_CASES])
def test_row_ops_on_the_emulated_gpu(tmp_path, tpl_file, op, dt, params, shapes):
    """Qwen2's bias (add.cu built for it) and Qwen3's qk_norm run unchanged
    on the emulated GPU: every element within the case table's tolerance
    (qk_norm's value heads bit for bit), the inputs unchanged, nothing read
    or written past a buffer (ASan)."""
    run_rows(tmp_path, tpl_file, op, dt, params, shapes)


# ---- rope with Qwen's step folded in: bias_rope_kv (rope_kv.cu), qk_norm_rope_kv (qk_norm.cu) ----

def rope_row_data(dt, op, shape, pos0, layout, seed):
    """The inputs of a folded rope op as the harness's files and as the
    case table's dump dict: Qout and the caches' rows from pos0 poisoned
    with NaN (an element left unwritten fails), the caches' rows before it
    random (they must stay as they were)."""
    import numpy as np
    import ggufq
    rng = np.random.default_rng(seed)
    m, h, g, dd = shape
    nan = np.uint16(0x7E00 if dt == "f16" else 0x7FC0)

    def as16(lo, hi, n):
        x = rng.uniform(lo, hi, n).astype(np.float32)
        bits = x.astype("<f2").view("<u2") if dt == "f16" else ggufq.bf16_bits(x).reshape(-1)
        return bits, as_f64(bits.tobytes(), dt)

    qb, qv = as16(-1, 1, m * (h + 2 * g) * dd)
    files, d = {"qkv.bin": qb}, {"QKV": (dt, qv), "scalars": {"pos0": pos0, "layout": layout},
                                 "pos": ("i32", np.array([pos0]))}
    if op == "bias_rope_kv":
        files["w0.bin"], b = as16(-1, 1, (h + 2 * g) * dd)
        d["b"] = (dt, b)
    else:
        (files["w0.bin"], qn), (files["w1.bin"], kn) = as16(0.5, 1.5, dd), as16(0.5, 1.5, dd)
        d["qn"], d["kn"] = (dt, qn), (dt, kn)
    files["inv.bin"] = 10000.0 ** (-2.0 * np.arange(dd // 2) / dd)
    files["qout.bin"] = np.full(m * h * dd, nan, "<u2")
    for name, fn in (("Kc", "kc.bin"), ("Vc", "vc.bin")):
        bits, _ = as16(-1, 1, (pos0 + m) * g * dd)
        bits[pos0 * g * dd:] = nan
        files[fn] = bits
        d[name + ".init"] = (dt, as_f64(bits.tobytes(), dt))
    return files, d


def run_rope_rows(tmp, tpl_file, op, dt, params, shapes, tpl_text=None):
    """Build a variant of a folded rope op (harness_rows.h) and check it on
    every shape at position 0 in the halves layout and at 37 in adjacent
    pairs with the case table's check of op (raises on a wrong element; a
    misuse or a changed input fails the run)."""
    import cases
    tpl, env, exe = build(tmp, dt, op, params, tpl_text=tpl_text, tpl_file=tpl_file, harness="harness_rows.h")
    first = lambda s: re.split(r"\s+(?=\d+\s+\d+\s*$)", s.strip())[0]  # "<expr> 1 1"
    for s, shape in enumerate(shapes):
        for pos0, layout in ((0, 0), (37, 1)):
            files, d = rope_row_data(dt, op, shape, pos0, layout, seed=s)
            for fn, arr in files.items():
                (tmp / fn).write_bytes(arr.tobytes())
            e = env | dict(zip("MHGD", shape))
            grid, block = evaluate(first(tpl["grid"]), e), evaluate(first(tpl["block"]), e)
            r = subprocess.run([str(exe), str(grid), str(block), str(tmp), *map(str, shape), str(layout), str(pos0)],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0 and "misuse 0 inputs_changed 0" in r.stdout, \
                f"{tpl_file} {op} {dt} {params} {shape}:\n{r.stdout}{r.stderr[-3000:]}"
            for name, fn in (("Qout", "out_q.bin"), ("Kc", "out_k.bin"), ("Vc", "out_v.bin")):
                d[name] = (dt, as_f64((tmp / fn).read_bytes(), dt))
            cases.CHECK[op](d, dt, shape)


# (template, op, dtype, parameters, shapes): rope_kv.cu's thread a pair
# (SPAN 1, decode) and its table of a block's tokens (SPAN 0, tokens and
# heads shared out); qk_norm.cu's 32 lanes a head of 128 and 8 lanes a head
# of 96 or 16, heads past the grid's last in a block
ROPE_ROW_CASES = [
    ("rope_kv.cu", "bias_rope_kv", "f16", dict(THREADS=64, SPAN=1, HEADS=1, TOK=1), [(1, 12, 2, 128)]),
    ("rope_kv.cu", "bias_rope_kv", "bf16", dict(THREADS=128, SPAN=0, HEADS=4, TOK=2), [(3, 5, 1, 96)]),
    ("qk_norm.cu", "qk_norm_rope_kv", "f16", dict(THREADS=128, TPH=32), [(1, 16, 8, 128)]),
    ("qk_norm.cu", "qk_norm_rope_kv", "bf16", dict(THREADS=64, TPH=8), [(3, 5, 1, 96), (2, 4, 4, 16)]),
]


@pytest.mark.parametrize("tpl_file,op,dt,params,shapes", ROPE_ROW_CASES,
                         ids=[f"{c[1]}-{c[2]}-" + "-".join(f"{k}{v}" for k, v in c[3].items())
                              for c in ROPE_ROW_CASES])
def test_folded_rope_on_the_emulated_gpu(tmp_path, tpl_file, op, dt, params, shapes):
    """Qwen2's bias and Qwen3's head norms folded into rope run unchanged on
    the emulated GPU: Qout and the cache rows at the position within the
    case table's tolerance (qk_norm_rope_kv's value heads bit for bit), the
    rows before it and the inputs unchanged, nothing read or written past a
    buffer (ASan)."""
    run_rope_rows(tmp_path, tpl_file, op, dt, params, shapes)


ROPE_ROW_MUTATIONS = [
    ("bias_rope_kv: a value head given its key head's bias", "rope_kv.cu",
     "c + G * D + ia),", "c + ia),", 0),
    ("qk_norm_rope_kv: a value head copied from its key head", "qk_norm.cu",
     "z[ia] = x[G * D + ia];", "z[ia] = x[ia];", 3),
    ("qk_norm_rope_kv: the sum of squares of a pair's first element only", "qk_norm.cu",
     "ss += a * a + b * b;", "ss += 2 * a * a;", 2),
]


@pytest.mark.parametrize("what,tpl_file,old,new,case", ROPE_ROW_MUTATIONS, ids=[m[0] for m in ROPE_ROW_MUTATIONS])
def test_a_wrong_folded_rope_is_caught(tmp_path, what, tpl_file, old, new, case):
    text = open(os.path.join(GPU, tpl_file)).read()
    assert text.count(old) == 1, old
    _, op, dt, params, shapes = ROPE_ROW_CASES[case]
    with pytest.raises(AssertionError, match="out of tolerance|non-finite|AddressSanitizer"):
        run_rope_rows(tmp_path, tpl_file, op, dt, params, shapes, tpl_text=text.replace(old, new))


# plausible mistakes the row checks must catch: (what, template, text, replacement, case)
ROW_MUTATIONS = [
    ("bias: b's column not wrapped at the row's end", "add.cu", "c = c + 1 == N ? 0 : c + 1;", "c = c + 1;", 0),
    ("qk_norm: key heads scaled by qn", "qk_norm.cu", "const TB *w = h < H ? qn : kn;", "const TB *w = qn;", 3),
]


@pytest.mark.parametrize("what,tpl_file,old,new,case", ROW_MUTATIONS, ids=[m[0] for m in ROW_MUTATIONS])
def test_a_wrong_row_op_is_caught(tmp_path, what, tpl_file, old, new, case):
    text = open(os.path.join(GPU, tpl_file)).read()
    assert old in text, old
    _, op, dt, params, shapes = ROW_CASES[case]
    with pytest.raises(AssertionError, match="out of tolerance|value head changed|non-finite|AddressSanitizer"):
        run_rows(tmp_path, tpl_file, op, dt, params, shapes, tpl_text=text.replace(old, new))


# ---- argmax.cu: argmax and argmax_step (the decode step's greedy id) ----

def argmax_rows(dt, m, n, seed):
    """X[m, n] in dtype dt ("f16", "bf16", "f32") as its bytes and as fp64:
    row kinds in turn — random with its maximum at two places in different
    slices (the lower index must win), NaN sprinkled (index 0 among them)
    with the maximum at the row's last element, all NaN (index 0), and all
    -inf but a NaN first (index 1)."""
    import numpy as np
    import ggufq
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    for r in range(m):
        kind = (r + seed) % 4 if m > 1 else seed % 2
        if kind == 0:
            i, j = sorted(rng.choice(n, 2, replace=False))
            x[r, i] = x[r, j] = 3.0
        elif kind == 1:
            x[r, rng.choice(n, max(1, n // 50), replace=False)] = np.nan
            x[r, 0], x[r, n - 1] = np.nan, 2.5
        elif kind == 2:
            x[r] = np.nan
        else:
            x[r], x[r, 0] = -np.inf, np.nan
    if dt == "f32":
        bits = x.astype("<f4")
        return bits, bits.astype(np.float64)
    bits = x.astype("<f2").view("<u2") if dt == "f16" else ggufq.bf16_bits(x).reshape(m, n)
    return bits, as_f64(bits.tobytes(), dt).reshape(m, n)


def argmax_want(v):
    """Each row's lowest index of its largest non-NaN value; 0 for a row of NaN."""
    import numpy as np
    out = []
    for row in v:
        ok = ~np.isnan(row)
        out.append(int(np.flatnonzero(ok & (row == row[ok].max()))[0]) if ok.any() else 0)
    return out


def run_argmax(tmp, op, dt, params, shapes, tpl_text=None):
    """Build argmax.cu for op and dtype with params (harness_argmax.h), run
    every shape at positions 300 and 301 (argmax_step's two boxes) and
    check both launches' every result (raises AssertionError)."""
    import numpy as np
    tpl, env, exe = build(tmp, dt, op, params, tpl_text=tpl_text, tpl_file="argmax.cu", harness="harness_argmax.h")
    for s, (m, n) in enumerate(shapes):
        bits, v = argmax_rows(dt, m, n, seed=s)
        (tmp / "x.bin").write_bytes(bits.tobytes())
        want = argmax_want(v)
        grid, block, _ = launch(tpl, env, m, n, 0)
        for p0 in (300, 301):
            r = subprocess.run([str(exe), str(grid), str(block), str(tmp), str(m), str(n), str(p0)],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0 and "misuse 0 inputs_changed 0" in r.stdout, \
                f"argmax.cu {op} {dt} {params} {(m, n)}:\n{r.stdout}{r.stderr[-3000:]}"
            for out in ("out1.bin", "out2.bin"):
                got = np.frombuffer((tmp / out).read_bytes(), "<i4").tolist()
                boxes = [-5, -5]
                boxes[p0 % 2] = want[-1]
                expect = want + ([p0 + m] + boxes if op == "argmax_step" else [])
                assert got == expect, f"argmax.cu {op} {dt} {params} {(m, n)} p0 {p0} {out}: got {got[:8]}, want {expect[:8]}"


# (op, dtype, parameters, shapes): the 1B's vocabulary in 16-byte loads
# over 64 slices; rows of every kind in whole chunks, slices past the row's
# end (16 over 2 chunks, 4104 over 31 of 32), f32's two loads a chunk; a
# row of 777 (not whole chunks: one element a load though VEC is 8); one
# block a row; plain argmax
ARGMAX_CASES = [
    ("argmax_step", "f16", dict(THREADS=256, UNROLL=4, SPLIT=64, VEC=8), [(1, 128256)]),
    ("argmax_step", "f16", dict(THREADS=64, UNROLL=2, SPLIT=16, VEC=8), [(4, 5000), (2, 16)]),
    ("argmax_step", "f32", dict(THREADS=64, UNROLL=1, SPLIT=32, VEC=8), [(2, 4104)]),
    ("argmax_step", "bf16", dict(THREADS=128, UNROLL=8, SPLIT=4, VEC=8), [(3, 777)]),
    ("argmax_step", "bf16", dict(THREADS=64, UNROLL=4, SPLIT=1, VEC=1), [(4, 1000)]),
    ("argmax", "f16", dict(THREADS=128, UNROLL=2, SPLIT=32, VEC=8), [(3, 5000)]),
]


@pytest.mark.parametrize("op,dt,params,shapes", ARGMAX_CASES,
                         ids=[f"{c[0]}-{c[1]}-" + "-".join(f"{k}{v}" for k, v in c[2].items()) for c in ARGMAX_CASES])
def test_argmax_on_the_emulated_gpu(tmp_path, op, dt, params, shapes):
    """argmax.cu runs unchanged on the emulated GPU: every row's lowest
    index of its maximum (ties, NaN, all-NaN and -inf rows), argmax_step's
    position moved on and its id in the box of the position's parity only,
    the same again in a second launch (the split's ticket counter left
    ready), X unchanged, no vector load misaligned, nothing read past X."""
    run_argmax(tmp_path, op, dt, params, shapes)


# plausible mistakes the argmax check must catch: (what, text, replacement, case)
ARGMAX_MUTATIONS = [
    ("a chunk's elements given its first index", "*at = (int)(i + e);", "*at = (int)i;", 1),
    ("slices not whole chunks (misaligned loads)", "gc_cdiv(gc_cdiv(N, SPLIT), step) * step", "gc_cdiv(N, SPLIT)", 1),
    ("the ticket counter not reset for the next launch", "am_cnt[row] = 0u;", ";", 1),
    ("the box of the other parity", "box[p0 % 2][0] = id;", "box[(p0 + 1) % 2][0] = id;", 4),
    ("a misaligned vector load, the results right", "LOADV_A(W, x, base + (int64_t)W * u * THREADS, v[u]);",
     "LOADV_A(W / 2, x, base + (int64_t)W * u * THREADS + W / 4, v[u]), "
     "LOADV_A(W, x, base + (int64_t)W * u * THREADS, v[u]);", 1),
]


@pytest.mark.parametrize("what,old,new,case", ARGMAX_MUTATIONS, ids=[m[0] for m in ARGMAX_MUTATIONS])
def test_a_wrong_argmax_is_caught(tmp_path, what, old, new, case):
    text = open(os.path.join(GPU, "argmax.cu")).read()
    assert text.count(old) == 1, old
    op, dt, params, shapes = ARGMAX_CASES[case]
    with pytest.raises(AssertionError, match="misuse [1-9]" if "misaligned vector" in what else ""):
        run_argmax(tmp_path, op, dt, params, shapes, tpl_text=text.replace(old, new))
