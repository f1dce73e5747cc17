"""The AMD matrix-core templates, run unchanged on a host SIMT emulation
(tests/amd_emu): a thread per work-item (fibers on one host thread,
tests/amd_emu/emu_fiber.h), LDS of exactly @shmem bytes under ASan, real barriers, and each MFMA/WMMA evaluated from a model
of the instruction written from the ISA documents (element -> lane and
register), independent of the prelude's GC_MFMA_*/GC_WMMA_* layout macros
(lane -> element) that the templates use.

What a pass proves: for every dtype, both MFMA families and WMMA, single
and double LDS stages, gemm, gemm_add and gemm_swiglu, and shapes with
edges in M, N and K, the template's
whole index math (global -> LDS staging, fragment reads, accumulator
mapping, epilogue, bounds) agrees with the documented operand layouts,
and so does gemv_mfma's (fragments straight from global memory with the
k-permutation, split-K through LDS, wave shuffles) for all five of its
ops, rmsnorm_gemm and rmsnorm_gemm_swiglu against rows normalised in fp64;
every C element is written exactly within the matrix, LDS stays inside
@shmem, and WMMA operands are replicated across the half-waves; the
quantized templates (gemm_q_mfma, gemm_q_wmma, and gemv_qmfma for its five
ops at M = 1 .. 16) for every block format and f16/bf16 activations against
fp64 on B dequantized independently (tests/ggufq.py); gemv_gpu (the SIMT
GEMV of every GPU backend, AMD's one-row gemm_add) at 64 and 32 lanes for
all five of its ops. The
attention templates (attention_mfma on both MFMA families, attention_wmma)
compute every element of O within the op's tolerance of fp64 (causal mask,
GQA, online softmax, P rounded once) for shapes with edges in M, D and the
keys, write nothing outside O (guard regions) and no row past M. What it
cannot prove: that the documented layouts are the hardware's (the model
and the macros both come from AMD's documents), the builtins' codegen,
memory-model or timing behaviour on a real GPU. The mutation tests show
that a wrong layout macro is caught, and for attention a wrong mask bound
or a missing rescale by the running max too."""
import os
import platform
import re
import shutil
import subprocess

import pytest

from conftest import ROOT
from test_amd_templates import GPU, dtype_codes, evaluate, parse
from tplhead import op_names

CXX = shutil.which("clang++-19")
pytestmark = [pytest.mark.skipif(not CXX, reason="clang++-19 not installed (host emulation)"),
              pytest.mark.skipif(platform.machine() != "x86_64",
                                 reason="the emulation's fiber switch (tests/amd_emu/emu_fiber.h) is x86-64 code")]
EMU = os.path.join(ROOT, "tests", "amd_emu")
# How every emulation program is built: ASan (every load and store of an
# emulated thread, LDS and the device buffers, checked) and UBSan, fatal.
# Not ASan's use-after-return check: it gives each fiber a fake stack of
# its own (mmap'd per block of 128+ threads), which was 60% of a run's
# time, and a kernel's device functions return no pointers to locals.
# Linked by lld (clang's own, lld-19 in make deps), not ld.bfd: the same
# program; the link of ASan's runtime and the debug info takes 0.3 s, not
# 0.45 s (about a tenth of a build's CPU time). Line tables only, not full
# debug info: a sanitizer's report still names file and line, and a build
# takes about 15% less (session 62, the dev VM).
CXXFLAGS = ["-std=c++17", "-O1", "-gline-tables-only", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined", "-fsanitize-address-use-after-return=never", "-fuse-ld=lld"]
# The C++ and C headers the emulation's sources include (tests/amd_emu,
# tests/nv_emu), precompiled once a run (compile_emu's -include-pch): each
# build then skips parsing them, about 0.2 s of its 1.5. Only system
# headers, which mean the same whatever the source defines before them.
EMU_SYS_HEADERS = ("map", "math.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "sys/mman.h", "tuple",
                   "type_traits", "unistd.h", "vector")


def sys_pch(args):
    """The precompiled EMU_SYS_HEADERS for a build with args (less its -I
    folders, which they do not read), in the run's emulation cache; None
    without a cache or where clang cannot build it (the build then parses
    the headers, as without it)."""
    import hashlib
    cache = os.environ.get("GCORE_TEST_EMU_CACHE")
    flags = [str(a) for a in args if not str(a).startswith("-I")]
    if not cache or not CXX:
        return None
    h = hashlib.sha256("\0".join([CXX, *flags, *EMU_SYS_HEADERS]).encode()).hexdigest()[:24]
    pch, hdr = (os.path.join(cache, f"sys-{h}{x}") for x in (".pch", ".h"))
    if not os.path.exists(pch):
        part = f"{pch}.{os.getpid()}"
        if not os.path.exists(hdr):  # written once: clang checks that a PCH's header is unchanged
            with open(part, "w") as f:
                f.write("".join(f"#include <{x}>\n" for x in EMU_SYS_HEADERS))
            try:
                os.link(part, hdr)
            except FileExistsError:
                pass
            os.unlink(part)
        r = subprocess.run([CXX, *[a for a in flags if a != "-fuse-ld=lld"], "-x", "c++-header", "-o", part, hdr],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        os.replace(part, pch)  # whole, for the other workers
    return pch


def compile_emu(args, src, exe):
    """CXX *args -o exe src, where args' -I folders hold the headers src
    reads (tests/amd_emu, tests/nv_emu, the test's own folder). A program
    this run has built already (the same compiler, flags, source and every
    header in those folders: a mutation test's unmutated variant, built by
    the test of that variant too) is linked from the run's emulation cache
    (conftest: GCORE_TEST_EMU_CACHE, shared by the xdist workers) rather
    than compiled again. Returns the compiler's CompletedProcess (or one
    with returncode 0 for a program from the cache)."""
    import hashlib
    h = hashlib.sha256(CXX.encode() + b"\0" + open(src, "rb").read())
    for a in map(str, args):  # an -I folder by its headers, in order (not its name)
        h.update(b"\0" + (a.encode() if not a.startswith("-I") else b"-I"))
        if a.startswith("-I"):
            for f in sorted(os.listdir(a[2:])):
                if f.endswith(".h"):
                    h.update(f.encode() + b"\0" + open(os.path.join(a[2:], f), "rb").read() + b"\0")
    cache = os.environ.get("GCORE_TEST_EMU_CACHE")
    hit = os.path.join(cache, h.hexdigest()) if cache else None
    if os.path.exists(exe):  # a second build in one folder (a mutant): a new file, never the cache's
        os.unlink(exe)
    if hit and os.path.exists(hit):
        os.link(hit, exe)
        return subprocess.CompletedProcess([CXX], 0, "", "")
    pch = sys_pch(args)
    r = subprocess.run([CXX, *args, *(["-include-pch", pch] if pch else []), "-o", str(exe), str(src)],
                       capture_output=True, text=True)
    if hit and r.returncode == 0:
        part = f"{hit}.{os.getpid()}"
        os.link(exe, part)
        os.replace(part, hit)
    return r


# emu_fiber.h on its own: 64 threads pass values around a ring through
# rendezvous, from stacks deep enough to need more than a page; a thread
# that skips the rendezvous (SKIP >= 0) leaves the others waiting forever,
# which must end the run as a hang (exit 3) at once, not stall it.
FIBER_PROG = r"""
#include <string.h>
#include "emu_fiber.h"
static emu_fbar bar, bar2;
static int val[64];
static int deep(int t, int d) {
  volatile char pad[512];
  memset((char *)pad, t, sizeof pad);
  return d ? deep(t, d - 1) + pad[d % 512] : pad[7];
}
int main() {
  static int out[64];
  emu_fibers_run(64, [](void *) {
    const int t = emu_cur;
    val[t] = t * 10 + deep(t, 8) - 9 * t;
    if (t != SKIP) emu_fbar_wait(&bar, 64);
    out[t] = val[(t + 1) % 64];
    emu_fbar_wait(&bar2, 64);
  }, nullptr);
  for (int t = 0; t < 64; t++)
    if (out[t] != (t + 1) % 64 * 10) return 1;
  puts("ok");
  return 0;
}
"""


@pytest.mark.parametrize("skip", [-1, 5])
def test_the_fibers_meet_and_a_missing_thread_is_a_hang(tmp_path, skip):
    (tmp_path / "f.cpp").write_text(FIBER_PROG.replace("SKIP", str(skip)))
    exe = tmp_path / "f"
    r = subprocess.run([CXX, *CXXFLAGS, f"-I{EMU}", "-o", str(exe), str(tmp_path / "f.cpp")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    if skip < 0:
        assert r.returncode == 0 and r.stdout == "ok\n", (r.returncode, r.stdout, r.stderr[-3000:])
    else:
        assert r.returncode == 3 and "a barrier never completed (a hang on the GPU)" in r.stderr, (r.returncode, r.stderr)


# (template, wave size, (op, parameters[, dtype]) sets): a set runs for each
# dtype of the template, or for the one it names; shapes below have edges
# in M, N, K.
# The GEMMs' sets are a covering too (CI time): each set in one dtype, every
# dtype in some set, each MFMA size (MI) and stage count in more than one.
CASES = [
    ("gemm_mfma.cu", 64, [("gemm", dict(MI=32, BM=64, BN=32, BK=16, WM=32, WN=32, STAGES=2, RASTER=4), "f16"),
                          ("gemm_add", dict(MI=16, BM=32, BN=64, BK=32, WM=16, WN=32, STAGES=1, RASTER=1), "bf16"),
                          ("gemm_swiglu", dict(MI=16, BM=32, BN=32, BK=16, WM=16, WN=16, STAGES=2, RASTER=1), "f32"),
                          ("gemm_swiglu", dict(MI=32, BM=32, BN=32, BK=32, WM=32, WN=32, STAGES=1, RASTER=4), "bf16"),
                          ("gemm", dict(MI=32, BM=64, BN=32, BK=16, WM=32, WN=32, STAGES=2, RASTER=4), "f32")]),
    ("gemm_wmma.cu", 32, [("gemm", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=2, RASTER=4), "f16"),
                          ("gemm_add", dict(BM=32, BN=64, BK=16, WM=32, WN=16, STAGES=1, RASTER=1), "bf16"),
                          ("gemm_swiglu", dict(BM=32, BN=32, BK=16, WM=16, WN=16, STAGES=2, RASTER=1), "bf16"),
                          ("gemm_swiglu", dict(BM=64, BN=32, BK=32, WM=32, WN=16, STAGES=1, RASTER=4), "f16")]),
    # a covering of op x dtype (each op once, the norm's 2- and 3-way splits
    # both), split-K through LDS and not (KS = 1), 1-4 tiles and chunks
    ("gemv_mfma.cu", 64, [("gemm", dict(WARPS=4, KS=2, RT=2, UNR=1, OCC=1), "f16"),
                          ("gemm_add", dict(WARPS=2, KS=1, RT=1, UNR=4, OCC=2), "bf16"),
                          ("gemm_swiglu", dict(WARPS=4, KS=4, RT=1, UNR=2, OCC=2), "f16"),
                          ("rmsnorm_gemm", dict(WARPS=4, KS=2, RT=1, UNR=2, OCC=2), "bf16"),
                          ("rmsnorm_gemm", dict(WARPS=2, KS=1, RT=4, UNR=1, OCC=1), "f16"),
                          ("rmsnorm_gemm_swiglu", dict(WARPS=2, KS=2, RT=2, UNR=1, OCC=2), "bf16")]),
    # gemv_gpu, the SIMT GEMV that every AMD target runs for the decode's
    # one-row gemm_add (O, down) and the fallback of the dense ops: its
    # wave-wide sums and its one-output-per-thread epilogue at the AMD wave
    # sizes (the NV emulator runs it at 32 lanes), one warp a row group and
    # split-K, every op
    ("gemv.cu", 64, [("gemm_add", dict(WARPS=4, KS=1, ROWS=4, UNR=2, MMAX=4, OCC=2), "f16"),
                     ("gemm_add", dict(WARPS=8, KS=2, ROWS=2, UNR=2, MMAX=4, OCC=2), "bf16"),
                     ("rmsnorm_gemm", dict(WARPS=4, KS=4, ROWS=2, UNR=1, MMAX=4, OCC=1), "f16"),
                     ("gemm_swiglu", dict(WARPS=4, KS=1, ROWS=1, UNR=2, MMAX=4, OCC=2), "bf16"),
                     ("rmsnorm_gemm_swiglu", dict(WARPS=2, KS=2, ROWS=2, UNR=1, MMAX=4, OCC=2), "f32"),
                     ("gemm", dict(WARPS=2, KS=1, ROWS=8, UNR=1, MMAX=4, OCC=2), "f32")]),
    ("gemv.cu", 32, [("gemm_add", dict(WARPS=4, KS=1, ROWS=4, UNR=2, MMAX=4, OCC=2), "f16"),
                     ("gemm_add", dict(WARPS=8, KS=4, ROWS=1, UNR=4, MMAX=4, OCC=2), "bf16")]),
]
SHAPES = [(70, 50, 40), (64, 96, 64), (33, 17, 8)]
# gemv_mfma serves 2 <= M <= 16: the fewest and the most rows and one
# between; N not a multiple of its 16-row tiles (and one that is); K % 8 ==
# 0, not a multiple of its 32-element chunks, from one chunk to several
# steps of every slice
SHAPES_OF = {"gemv_mfma.cu": [(3, 50, 40), (16, 37, 264), (9, 96, 8), (2, 17, 136)],
             # gemv_gpu: M <= MMAX (4 here); K a multiple of its 16-byte
             # chunks and not (one element a chunk), N no multiple of a block's rows
             "gemv.cu": [(1, 50, 40), (3, 37, 264), (4, 17, 520), (2, 9, 37)]}


def layouts(path, name="gc-matrix-layouts"):
    """prelude_hip.h's block NAME (gc-matrix-layouts: the MFMA/WMMA operand
    layouts; gc-kv-lds: the MFMA attentions' K/V tiles) into path; its text."""
    text = open(os.path.join(GPU, "prelude_hip.h")).read()
    block = re.search(rf"/\* >>> {name}.*?<<< {name} \*/", text, re.S)
    assert block, f"prelude_hip.h has no {name} block"
    path.write_text(block.group(0) + "\n")
    return block.group(0)


def common_block(name, path):
    """The GPU preludes' block NAME (gc-quant: the block formats of B;
    gc-epilogue: the SwiGLU; both in prelude_common.h) into path; its text."""
    text = open(os.path.join(GPU, "prelude_common.h")).read()
    block = re.search(rf"/\* >>> {name}.*?<<< {name} \*/", text, re.S)
    assert block, f"prelude_common.h has no {name} block"
    path.write_text(block.group(0) + "\n")
    return block.group(0)


def emu_blocks(tmp, layout_text=None):
    """The preludes' blocks tests/amd_emu/prelude_emu.h includes, into tmp:
    layouts.h (gc-matrix-layouts, or layout_text), epilogue.h, kvlds.h,
    split.h; the gc-quant block (quant.h) is the caller's, where used."""
    (tmp / "layouts.h").write_text(layout_text) if layout_text else layouts(tmp / "layouts.h")
    common_block("gc-epilogue", tmp / "epilogue.h")
    layouts(tmp / "kvlds.h", "gc-kv-lds")
    common_block("gc-split", tmp / "split.h")


def build(tmp, tpl_file, wave, dtype, op, params, layout_text=None, quant_text=None, tpl_text=None):
    """Compile the template for the emulation. dtype: "T", or "A:B:C" with B
    a block format (then harness_q.h, and the prelude's gc-quant block); op
    attention: harness_att.h (the attention ABI)."""
    tpl = parse(os.path.join(GPU, tpl_file))
    emu_blocks(tmp, layout_text)
    quant, att = ":" in dtype, op in ("attention", "attention_batch")
    (code_a, size), (code_b, size_b), (code_c, _) = dtype_codes(dtype)
    env = {"WARP": wave, "SMEM": 65536, "SMS": 304, "MAXT": 1024, "SA": size, "SB": size_b,
           "SC": size, "AMD": 1, "MFMA": int(wave == 64), "WMMA": int(wave == 32),
           "VGPRS": 512 if wave == 64 else 256} | op_names(op) | params
    assert op in tpl["ops"], (tpl_file, op)
    assert all(evaluate(c, env) for c in tpl["constraints"]), (tpl_file, op, params)
    defs = "".join(f"#define {k} {v}\n" for k, v in env.items())
    defs += "".join(f"#define GC_T{x} {c}\n" for x, c in zip("ABC", (code_a, code_b, code_c)))
    defs += f"#define GC_MFMA {env['MFMA']}\n#define GC_WMMA {env['WMMA']}\n"
    defs += "".join(f"#define GC_OP_{o.upper()} {int(o == op)}\n" for o in tpl["ops"])
    if quant:
        (tmp / "quant.h").write_text(quant_text) if quant_text else common_block("gc-quant", tmp / "quant.h")
    gemv = tpl_file == "gemv.cu"  # the SIMT GEMV: the prelude's gc-gemv block too
    if gemv:
        common_block("gc-gemv", tmp / "gemv.h")
    harness = "harness_q.h" if quant else "harness_att.h" if att else "harness.h"
    src = (("#define EMU_QUANT 1\n" if quant else "") + ("#define EMU_ATTENTION 1\n" if att else "") +

           '#include "prelude_emu.h"\n' + defs +
           ('#include "gemv_simt.h"\n' if gemv else "") +
           f'#line 1 "{tpl_file}"\n' + (tpl_text or open(os.path.join(GPU, tpl_file)).read()) +
           f"\n#define KERNEL {tpl['kernel']}\n#define EMU_SWIGLU {int(env['PAIR'] == 2)}\n" +
           f"#define EMU_NORM {env['NORM']}\n" + f'#include "{harness}"\n')
    (tmp / "emu.cpp").write_text(src)
    exe = tmp / "emu"
    r = compile_emu([*CXXFLAGS, "-pthread", f"-I{EMU}", f"-I{tmp}"], tmp / "emu.cpp", exe)
    assert r.returncode == 0, r.stderr[-4000:]
    return tpl, env, exe


def run(tpl, env, exe, m, n, k, *extra):
    e = env | {"M": m, "N": n, "K": k}
    first = lambda s: re.split(r"\s+(?=\d+\s+\d+\s*$)", s.strip())[0]  # "<expr> 1 1"
    grid = evaluate(first(tpl["grid"]), e)
    block = evaluate(first(tpl["block"]), e)
    shmem = evaluate(tpl["shmem"], e)
    return subprocess.run([str(exe), str(m), str(n), str(k), str(grid), str(block), str(shmem),
                           *map(str, extra)], capture_output=True, text=True, timeout=600)


def grid_block(tpl_file):
    head = open(os.path.join(GPU, tpl_file)).read().split("*/", 1)[0]
    return (re.search(r"@grid\s+([^\n]+)", head).group(1).split(" -- ")[0],
            re.search(r"@block\s+([^\n]+)", head).group(1).split(" -- ")[0])


IDS = [(f, w, dt, i) for f, w, ps in CASES for dt in parse(os.path.join(GPU, f))["dtypes"]
       for i in range(len(ps)) if dt in ps[i][2:] or len(ps[i]) == 2]


def case(tpl_file, wave, which):
    """(op, parameters) of set `which` of tpl_file's CASES entry at wave."""
    return next(ps for f, w, ps in CASES if f == tpl_file and w == wave)[which][:2]


@pytest.mark.parametrize("tpl_file,wave,dtype,which", IDS,
                         ids=[f"{f[:-3]}-{case(f, w, i)[0]}-{dt}-{i}" + ("-w32" if f == "gemv.cu" and w == 32 else "")
                              for f, w, dt, i in IDS])
def test_template_on_emulated_matrix_cores(tmp_path, tpl_file, wave, dtype, which):
    op, params = case(tpl_file, wave, which)
    tpl, env, exe = build(tmp_path, tpl_file, wave, dtype, op, params)
    tpl["grid"], tpl["block"] = grid_block(tpl_file)
    for m, n, k in SHAPES_OF.get(tpl_file, SHAPES):
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
    # gemv_mfma: its k groups (which 8 elements a lane loads), rows and
    # accumulator rows come from the same macros
    ("gemv 16x16 operand k groups collide (K per instruction taken as 8)",
     "#define GC_MFMA_AB_K(S, KPL, l, v) ((l) / (S) * (KPL) + (v))",
     "#define GC_MFMA_AB_K(S, KPL, l, v) ((l) / (S) / 2 * (KPL) + (v))", "gemv_mfma.cu", 64, "f16", 0),
    ("gemv operand rows shifted by one lane",
     "#define GC_MFMA_AB_ROW(S, l) ((l) % (S))", "#define GC_MFMA_AB_ROW(S, l) (((l) + 1) % (S))",
     "gemv_mfma.cu", 64, "bf16", 3),
    ("gemv 16x16 accumulator rows transposed (register-major)",
     ": 4 * ((l) / 16) + (r))", ": 4 * (r) + (l) / 16)", "gemv_mfma.cu", 64, "f16", 2),
]
MUT_SHAPE = {"gemv_mfma.cu": (16, 50, 72)}  # inside its @applies (M <= 16)


@pytest.mark.parametrize("what,old,new,tpl_file,wave,dtype,which", MUTATIONS,
                         ids=[m[0].split(" (")[0].replace(" ", "_") for m in MUTATIONS])
def test_wrong_layout_is_caught(tmp_path, what, old, new, tpl_file, wave, dtype, which):
    text = layouts(tmp_path / "layouts.h")
    assert old in text, old
    op, params = case(tpl_file, wave, which)
    tpl, env, exe = build(tmp_path, tpl_file, wave, dtype, op, params, text.replace(old, new))
    tpl["grid"], tpl["block"] = grid_block(tpl_file)
    r = run(tpl, env, exe, *MUT_SHAPE.get(tpl_file, (64, 64, 32)))
    assert r.returncode == 1 and "bad 0 unwritten 0 replication 0" not in r.stdout, \
        f"{what}: not detected\n{r.stdout}"


# gemv_gpu at 64 and 32 lanes: a plausible slip in its epilogue or its
# sums, each caught (M = 3 rows, N = 37, K = 264 unless said)
GEMV_MUTATIONS = [
    ("gemm_add's residual read ahead from row 0", "LOAD_C(C, sm * N + sn)", "LOAD_C(C, sn)", 64, "f16", 0),
    ("gemm_add's residual read ahead but not added", "GC_OP_GEMM_ADD ? (x) + cold : (x)", "(x)", 64, "bf16", 1),
    ("the wave's sum over half the wave", "acc[m][r] = gc_warp_sum(acc[m][r]);",
     "acc[m][r] = gc_group_sum(acc[m][r], GC_WARP / 2);", 64, "f16", 2),
    ("one K slice's partial sums dropped", "for (int k = 0; k < KS; k++) {\n      s += red[",
     "for (int k = 1; k < KS; k++) {\n      s += red[", 32, "bf16", 1),
]


@pytest.mark.parametrize("what,old,new,wave,dtype,which", GEMV_MUTATIONS, ids=[m[0] for m in GEMV_MUTATIONS])
def test_wrong_simt_gemv_is_caught(tmp_path, what, old, new, wave, dtype, which):
    text = open(os.path.join(GPU, "gemv.cu")).read()
    assert text.count(old) == 1, f"gemv.cu no longer has one: {old}"
    op, params = case("gemv.cu", wave, which)
    tpl, env, exe = build(tmp_path, "gemv.cu", wave, dtype, op, params, tpl_text=text.replace(old, new))
    tpl["grid"], tpl["block"] = grid_block("gemv.cu")
    r = run(tpl, env, exe, 3, 37, 264)
    assert r.returncode == 1 and "bad 0 unwritten 0 replication 0" not in r.stdout, \
        f"{what}: not detected\n{r.stdout}{r.stderr[-2000:]}"


# ---- B in a block format: gemm_q_mfma, gemm_q_wmma, gemv_qmfma ----------
# Each template, every block format, f16 and bf16 activations, each op
# (gemm_q_*: both MFMA families, one and two stages among them; BK of one,
# two and four units); shapes with edges in M and N (no multiple of any
# tile), K whole super-blocks.
# B is random floats quantized by tests/ggufq.py; the reference is fp64 on B
# dequantized by ggufq (independent of the prelude's gc-quant block), every
# element of C checked, C poisoned (NaN) but for gemm_add.
QCASES = [
    ("gemm_q_mfma.cu", 64, [("gemm", dict(MI=32, BM=64, BN=32, BK=64, WM=32, WN=32, STAGES=2, RASTER=4)),
                            ("gemm_add", dict(MI=16, BM=32, BN=64, BK=32, WM=16, WN=32, STAGES=1, RASTER=1)),
                            ("gemm_swiglu", dict(MI=16, BM=32, BN=32, BK=128, WM=16, WN=16, STAGES=2,
                                                 RASTER=1))]),
    ("gemm_q_wmma.cu", 32, [("gemm", dict(BM=32, BN=32, BK=64, WM=16, WN=16, STAGES=2, RASTER=4)),
                            ("gemm_add", dict(BM=32, BN=64, BK=32, WM=32, WN=16, STAGES=1, RASTER=1)),
                            ("gemm_swiglu", dict(BM=32, BN=32, BK=64, WM=16, WN=16, STAGES=2,
                                                 RASTER=1))]),
    # the five ops (the covering below gives set i the formats 2i and
    # 2i + 1 mod 5: only set 0 meets no 256-element format, so it takes
    # steps of 4 units); split-K through LDS (KS 2, 4) and not; one and two
    # tiles a wave; steps of 4, 8 and 16 units (a 256-element format's
    # steps one or two blocks)
    ("gemv_qmfma.cu", 64, [("gemm", dict(WARPS=4, KS=2, RT=2, UNR=4, OCC=1)),
                           ("gemm_add", dict(WARPS=2, KS=1, RT=1, UNR=16, OCC=1)),
                           ("rmsnorm_gemm", dict(WARPS=4, KS=4, RT=1, UNR=8, OCC=2)),
                           ("gemm_swiglu", dict(WARPS=2, KS=2, RT=2, UNR=8, OCC=1)),
                           ("rmsnorm_gemm_swiglu", dict(WARPS=4, KS=2, RT=1, UNR=8, OCC=1)),
                           # sets 5 and 6 meet formats 0, 1 (32-element: the
                           # smallest step, 2 units, over the widest split,
                           # 16 waves, KS 8) and 2, 3 (Q4_K, Q5_K: the pair in
                           # two tiles a wave, no split)
                           ("gemm_add", dict(WARPS=16, KS=8, RT=1, UNR=2, OCC=1)),
                           ("rmsnorm_gemm_swiglu", dict(WARPS=2, KS=1, RT=2, UNR=8, OCC=1))]),
]
QSHAPES = [(70, 50, 256), (33, 17, 768)]
# gemv_qmfma serves 1 <= M <= 16: one row, two, the most, odd ones
# between; N no multiple of its 16-row tiles (and N = 1, below one tile);
# K 256 to 2304: for the 32-element formats K = 864 is 27 units (a partial
# last step; rows that end inside a 16-byte chunk), the K-quants take K
# rounded down to whole super-blocks. Half of them for each activation
# dtype (CI time): the covering below gives each op and each format one
# f16 and one bf16 case, so each meets every shape.
QSHAPES_OF = {"gemv_qmfma.cu": {"f16": [(1, 37, 768), (5, 33, 864), (13, 50, 2304)],
                                "bf16": [(3, 50, 256), (16, 17, 768), (2, 1, 1632)]}}


def qshapes(tpl_file, dtype):
    s = QSHAPES_OF.get(tpl_file, QSHAPES)
    return s[dtype.split(":")[0]] if isinstance(s, dict) else s
QFORMATS = ["q8_0", "q4_0", "q4_k", "q5_k", "q6_k"]
TOL_U = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}


def _qdata(fmt, dt, op, m, n, k, seed):
    """A, B (blocks), C's initial contents and the norm weight (rmsnorm_*) as
    bytes; A (normalised and times the norm weight for rmsnorm_*), B's
    values and the mins of B's units (K-quants; bounds of the fp32 terms)
    as float64."""
    import numpy as np
    import ggufq
    rng = np.random.default_rng(seed)
    rows = op_names(op)["PAIR"] * n
    as16 = lambda x: (x.astype("<f2"), x.astype("<f2").astype(np.float64)) if dt == "f16" else \
        (ggufq.bf16_bits(x), ggufq.bf16_to_f32(ggufq.bf16_bits(x)).astype(np.float64))
    a_bits, a_val = as16(rng.uniform(-1, 1, (m, k)).astype(np.float32))
    b_raw = ggufq.quantize(fmt.upper(), rng.uniform(-1, 1, (rows, k)).astype(np.float32))
    b_val = ggufq.dequantize(fmt.upper(), b_raw, rows * k).reshape(rows, k).astype(np.float64)
    mins = np.zeros((rows, k))
    if fmt in ("q4_k", "q5_k"):
        blk = np.frombuffer(b_raw, np.uint8).reshape(-1, ggufq.TYPES[fmt.upper()][2])
        _, mm = ggufq._scale_min_k4(blk[:, 4:16])
        dmin = ggufq.h2f(np.ascontiguousarray(blk[:, 2:4]).view("<u2")).reshape(-1).astype(np.float64)
        mins = np.repeat(np.abs(dmin[:, None] * mm), 32, axis=1).reshape(rows, k)
    c0 = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    if op != "gemm_add":
        c_bits = np.full((m, n), 0x7E00 if dt == "f16" else 0x7FC0, "<u2")  # NaN: unwritten shows
    else:
        c_bits = c0.astype("<f2").view("<u2") if dt == "f16" else ggufq.bf16_bits(c0)
    c_val = (c_bits.view("<f2").astype(np.float64) if dt == "f16"
             else ggufq.bf16_to_f32(c_bits).astype(np.float64))
    w_bits, w_val = as16(rng.uniform(0.5, 1.5, k).astype(np.float32))
    if op_names(op)["NORM"]:  # rows / sqrt(mean(x²) + eps) · w, in fp64
        a_val = a_val / np.sqrt((a_val ** 2).mean(axis=1, keepdims=True) + 1e-5) * w_val
    return a_bits.tobytes(), b_raw, c_bits.tobytes(), w_bits.tobytes(), a_val, b_val, mins, c_val


def _qcheck(out, dt, op, a, b, mins, c0, n, k):
    """Every element of C against the fp64 reference: (unwritten, bad, messages)."""
    import numpy as np
    import ggufq
    bits = np.frombuffer(out, "<u2").reshape(c0.shape)
    got = bits.view("<f2").astype(np.float64) if dt == "f16" else ggufq.bf16_to_f32(bits).astype(np.float64)
    # fp32 terms of a unit: d·Σa·q and mn·Σa, each bounded by |a|·(|y| + |mn|)
    mag = np.abs(a) @ (np.abs(b) + mins).T
    g, magg = a @ b[:n].T, mag[:, :n]
    if op_names(op)["PAIR"] == 2:
        up, magu = a @ b[n:].T, mag[:, n:]
        ref = g / (1 + np.exp(-g)) * up
        tol = TOL_U[dt] * np.abs(ref) + k * 2.0 ** -22 * (magg + magu) * (1 + np.abs(g)) * (1 + np.abs(up))
    else:
        ref = g + (c0 if op == "gemm_add" else 0)
        tol = TOL_U[dt] * np.abs(ref) + k * 2.0 ** -22 * (magg + (1 if op == "gemm_add" else 0))
    tol += 1e-6
    unwritten = np.isnan(got)
    bad = ~unwritten & ~(np.abs(got - ref) <= tol)
    msgs = [f"C[{i}][{j}] = {got[i, j]}, expected {ref[i, j]}" for i, j in np.argwhere(bad)[:5]]
    return int(unwritten.sum()), int(bad.sum()), msgs


def _qids():
    """Per template, a covering of block format x activation dtype x op
    rather than their product: every format, every dtype and every op (its
    epilogue) at least once, case j taking format j and combination j of
    (dtype, op), cycling (the dequantization depends on the format, the A
    path on the dtype, the epilogue on the op)."""
    out = []
    for f, w, ps in QCASES:
        combos = [(a, i) for i in range(len(ps)) for a in ("f16", "bf16")]
        for j in range(max(len(QFORMATS), len(combos))):
            (a, i), q = combos[j % len(combos)], QFORMATS[j % len(QFORMATS)]
            out.append((f, w, f"{a}:{q}:{a}", i))
    return out


QIDS = _qids()


def qcase(tpl_file, which):
    return next(ps for f, _, ps in QCASES if f == tpl_file)[which]


def run_q(tmp, tpl_file, wave, dtype, which, shapes, seed=0, **texts):
    """Build and run one quantized case (which: a set of QCASES, or (op,
    parameters)): [(shape, unwritten, bad, messages)]."""
    import ggufq
    op, params = qcase(tpl_file, which) if isinstance(which, int) else which
    seed += which if isinstance(which, int) else 0
    fmt, dt = dtype.split(":")[1], dtype.split(":")[0]
    tpl, env, exe = build(tmp, tpl_file, wave, dtype, op, params, **texts)
    tpl["grid"], tpl["block"] = grid_block(tpl_file)
    out = []
    for s, (m, n, k) in enumerate(shapes):
        k -= k % ggufq.TYPES[fmt.upper()][1]  # whole blocks
        ab, bb, cb, wb, a, b, mins, c0 = _qdata(fmt, dt, op, m, n, k, seed=1000 * s + seed)
        (tmp / "a.bin").write_bytes(ab), (tmp / "b.bin").write_bytes(bb), (tmp / "c.bin").write_bytes(cb)
        (tmp / "w.bin").write_bytes(wb)
        r = run(tpl, env, exe, m, n, k, tmp)
        assert r.returncode == 0, f"{tpl_file} {op} {dtype} {params} M={m} N={n} K={k}:\n{r.stdout}{r.stderr[-3000:]}"
        assert "replication 0 inputs_changed 0" in r.stdout, r.stdout
        out.append(((m, n, k),) + _qcheck((tmp / "out.bin").read_bytes(), dt, op, a, b, mins, c0, n, k))
    return op, params, out


@pytest.mark.parametrize("tpl_file,wave,dtype,which", QIDS,
                         ids=[f"{f[:-3]}-{qcase(f, i)[0]}-{dt.replace(':', '_')}" for f, _, dt, i in QIDS])
def test_quantized_template_on_emulated_matrix_cores(tmp_path, tpl_file, wave, dtype, which):
    op, params, results = run_q(tmp_path, tpl_file, wave, dtype, which, qshapes(tpl_file, dtype))
    for shape, unwritten, bad, msgs in results:
        assert unwritten == 0 and bad == 0, \
            f"{tpl_file} {op} {dtype} {params} (M, N, K) = {shape}: {unwritten} unwritten, {bad} bad\n" + \
            "\n".join(msgs)


# gemv_qmfma, the untuned default of its rows: at the op's @defaults (8
# waves, split-K over 4, one tile, steps of 8 units; the pair ops 4 waves)
# every op with every block format and every dtype, in ten cases (a Latin
# square: op i meets format i in f16 and format i+2 in bf16, so each format
# meets two ops and each op two formats; the dequantization is the op's
# prologue, the epilogue the format's end: they do not interact beyond
# that, and the full product cost 4.5 minutes of CI), each on two of the
# shapes below, so that every dtype meets all six: M = 1, 3, 5, 7, 13, 16 (odd rows
# zeroed in the MFMA's A operand, never stored); N no multiple of the
# block's 32 (pair: 16) rows of B, N = 1 below one tile; K from one step to
# several per slice, slices with no unit, a partial odd last step (K-quants:
# K rounded down to whole super-blocks). The check is _qcheck's: C poisoned
# (NaN) but for gemm_add, every element against fp64 on B dequantized by
# ggufq, |C - ref| <= u·|ref| + K·2^-22·Σ|a|(|b| + |mn|) (+ |C0| for
# gemm_add; the pair's through silu) + 1e-6, u = 2^-10 (f16), 2^-7 (bf16);
# the inputs unchanged, C's buffer exact under ASan, LDS exactly @shmem.
GEMV_QSHAPES = [(1, 37, 864), (3, 50, 2304), (5, 17, 1632), (13, 33, 768), (16, 65, 256), (7, 1, 1088)]
GEMV_QOPS = parse(os.path.join(GPU, "gemv_qmfma.cu"))["ops"]
GEMV_QIDS = [(op, QFORMATS[(i + 2 * b) % len(QFORMATS)], dt) for i, op in enumerate(GEMV_QOPS)
             for b, dt in enumerate(("f16", "bf16"))]


@pytest.mark.parametrize("op,fmt,dt", GEMV_QIDS, ids=[f"{op}-{dt}_{fmt}" for op, fmt, dt in GEMV_QIDS])
def test_gemv_qmfma_every_op_format_dtype_at_defaults(tmp_path, op, fmt, dt):
    params = parse(os.path.join(GPU, "gemv_qmfma.cu"))["defaults"][op]
    first = GEMV_QIDS.index((op, fmt, dt))
    shapes = [GEMV_QSHAPES[(first + i) % len(GEMV_QSHAPES)] for i in range(2)]
    _, _, results = run_q(tmp_path, "gemv_qmfma.cu", 64, f"{dt}:{fmt}:{dt}", (op, params), shapes,
                          seed=GEMV_QIDS.index((op, fmt, dt)))
    for shape, unwritten, bad, msgs in results:
        assert unwritten == 0 and bad == 0, \
            f"gemv_qmfma {op} {dt}:{fmt} {params} (M, N, K) = {shape}: {unwritten} unwritten, {bad} bad\n" + \
            "\n".join(msgs)


# Each mutation breaks the dequantization (in the prelude's gc-quant block,
# which the emulation compiles, or in the template's use of the levels and
# scales); the check above must catch it. The last field: the templates it
# applies to.
GEMM_Q = ("gemm_q_mfma.cu", "gemm_q_wmma.cu")
QMUTATIONS = [
    ("Q4_0 high nibbles shifted by 3", "quant", "hi = (r[1] >> 4) & 0x0F0F0F0Fu;",
     "hi = (r[1] >> 3) & 0x0F0F0F0Fu;", "q4_0", GEMM_Q, 0),
    ("Q8_0 levels unbiased twice", "quant", "lo = r[1] ^ 0x80808080u;", "lo = r[1];", "q8_0", GEMM_Q, 0),
    ("Q5_K fifth bit of the wrong unit", "quant", "lo |= ((r[6] >> u) & 0x01010101u) << 4;",
     "lo |= ((r[6] >> (u ^ 1)) & 0x01010101u) << 4;", "q5_k", GEMM_Q, 0),
    ("Q6_K second half scaled by the first half's d", "tpl", "(GC_QSPLIT ? d1 : d0)", "d0", "q6_k", GEMM_Q, 0),
    ("K-quant mins not subtracted", "tpl", "-= mn * sum[i]", "-= 0.0f * sum[i]", "q4_k", GEMM_Q, 0),
    ("levels of a pair swapped", "tpl", "GCQ_LEVEL(w, 0), GCQ_LEVEL(w, 1)", "GCQ_LEVEL(w, 1), GCQ_LEVEL(w, 0)",
     "q8_0", GEMM_Q, 0),
    # gemv_qmfma: MFMA 0 fed the unit's last four levels of the lane's part
    # against A's first four (the k slots of the two operands disagree);
    # Q6_K's second half scaled by the first half's scale; the K-quants'
    # min·Σa left out
    ("gemv k slots of the levels not those of A", "tpl", "l0 = qf_levels(lo), l1 = qf_levels(hi)",
     "l0 = qf_levels(hi), l1 = qf_levels(lo)", "q8_0", ("gemv_qmfma.cu",), 0),
    ("gemv Q6_K second half scaled by the first half's d", "tpl", "(GC_QSPLIT ? d1 : d0)", "d0", "q6_k",
     ("gemv_qmfma.cu",), 1),
    ("gemv K-quant mins not subtracted", "tpl", "acc[p][t] -= mn * sa;", "acc[p][t] -= 0.0f * sa;", "q5_k",
     ("gemv_qmfma.cu",), 1),
]
QMUT_IDS = [(m, f, w) for m in QMUTATIONS for f, w, _ in QCASES if f in m[5]]


@pytest.mark.parametrize("mutation,tpl_file,wave", QMUT_IDS,
                         ids=[f"{f[:-3]}-{m[0].replace(' ', '_')}" for m, f, _ in QMUT_IDS])
def test_wrong_dequantization_is_caught(tmp_path, mutation, tpl_file, wave):
    what, where, old, new, fmt, _, which = mutation
    texts = {}
    if where == "quant":
        text = common_block("gc-quant", tmp_path / "quant.h")
        assert old in text, old
        texts["quant_text"] = text.replace(old, new)
    else:
        text = open(os.path.join(GPU, tpl_file)).read()
        assert old in text, old
        texts["tpl_text"] = text.replace(old, new)
    _, _, results = run_q(tmp_path, tpl_file, wave, f"f16:{fmt}:f16", which, qshapes(tpl_file, "f16")[:1],
                          **texts)
    assert any(bad for _, _, bad, _ in results), f"{what}: not detected"


# ---- attention: attention_mfma, attention_wmma ----------------------------
# Flash attention on the matrix cores (prefill, M > 1): both MFMA families,
# one and two LDS stages, one and several heads per block, DMAX 64 and 128;
# each set in both dtypes. Shapes: GQA 5:1 (and 4:1, 2:1 for HPB > 1), M
# not a multiple of any row tile (3, 9, 17, 33, 70), pos0 > 0 (and 0), keys
# spanning several tiles, head dims 32 to 128 (80 and 48: a partial 32-column
# block of O), softmax scales from the usual 1/sqrt(D) to sharp ones. Q, K
# and V are random in [-1, 1) rounded to the dtype; O is poisoned (NaN)
# and lies between guard regions (harness_att.h); every element is checked
# against fp64 with the op's rule (core/ops.c ref_attention, cases.py
# check_attention).
ACASES = [
    ("attention_mfma.cu", 64, [dict(MI=32, WARPS=2, HPB=1, KB=32, STAGES=2, DMAX=128),
                               dict(MI=16, WARPS=4, HPB=1, KB=64, STAGES=1, DMAX=128),
                               dict(MI=32, WARPS=1, HPB=2, KB=64, STAGES=2, DMAX=64)]),
    ("attention_wmma.cu", 32, [dict(WARPS=4, HPB=1, KB=32, STAGES=2, DMAX=128),
                               dict(WARPS=2, HPB=4, KB=64, STAGES=1, DMAX=64)]),
]
# (M, H, G, D, pos0, scale; None: 1/sqrt(D))
ASHAPES = [(3, 5, 1, 64, 37, None), (17, 5, 1, 96, 50, None), (70, 5, 1, 128, 21, 0.35),
           (9, 5, 1, 80, 13, 1.0), (70, 8, 2, 64, 0, None), (33, 4, 2, 48, 100, 1.0), (17, 8, 1, 32, 45, 0.5)]


def att_shapes(tpl, params):
    """The shapes of ASHAPES inside tpl's @applies at params."""
    out = []
    for m, h, g, d, p0, sc in ASHAPES:
        env = params | {"M": m, "N": 0, "K": 0, "H": h, "G": g, "D": d}
        if all(evaluate(a, env) for a in tpl["applies"]):
            out.append((m, h, g, d, p0, sc))
    return out


def _adata(dt, m, h, g, d, p0, seed, kv_rows=None):
    """Q, K, V as bytes and as float64 (their dtype's values), O poisoned;
    the caches' rows: p0 + m, or kv_rows (a batch's slots)."""
    import numpy as np
    import ggufq
    rng = np.random.default_rng(seed)
    out = []
    kv = kv_rows or p0 + m
    for shape in ((m, h, d), (kv, g, d), (kv, g, d)):
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        bits = x.astype("<f2").view("<u2") if dt == "f16" else ggufq.bf16_bits(x).reshape(shape)
        val = bits.view("<f2").astype(np.float64) if dt == "f16" else ggufq.bf16_to_f32(bits).astype(np.float64)
        out.append((bits.tobytes(), val))
    poison = np.full((m, h, d), 0x7E00 if dt == "f16" else 0x7FC0, "<u2").tobytes()
    return out, poison


def _acheck(out, dt, q, k, v, p0, scale, p_rounded=True, rows=None):
    """Every element of O against fp64 with the op's tolerance:
    (unwritten, bad, messages). p_rounded False: without the op's allowance
    for P rounded to the dtype in P·V (a kernel that keeps P's bits). rows
    (attention_batch): per row of Q its (keys L, first cache row), where
    row t takes cache rows first .. first+L-1; else p0 + t + 1 keys from 0."""
    import numpy as np
    import ggufq
    from cases import EPS_F32, SUB, ULP
    m, h, d = q.shape
    g = k.shape[1]
    bits = np.frombuffer(out, "<u2").reshape(m, h, d)
    got = bits.view("<f2").astype(np.float64) if dt == "f16" else ggufq.bf16_to_f32(bits).astype(np.float64)
    ref, tol = np.zeros((m, h, d)), np.zeros((m, h, d))
    for t in range(m):
        L, b = rows[t] if rows else (p0 + t + 1, 0)
        for hh in range(h):
            kv = hh // (h // g)
            kk, vv = k[b:b + L, kv], v[b:b + L, kv]
            s = np.float64(np.float32(scale)) * (kk @ q[t, hh])
            p = np.exp(s - s.max())
            p /= p.sum()
            ref[t, hh] = p @ vv
            tol[t, hh] = (4 * (L + d) * EPS_F32 + (ULP[dt] if p_rounded else 0)) * (p @ np.abs(vv))
    tol += ULP[dt] * np.abs(ref) + SUB[dt]
    unwritten = np.isnan(got)
    bad = ~unwritten & ~(np.abs(got - ref) <= tol)
    msgs = [f"O[{i}][{j}][{c}] = {got[i, j, c]}, expected {ref[i, j, c]} (tol {tol[i, j, c]:.3g})"
            for i, j, c in np.argwhere(bad)[:5]]
    return int(unwritten.sum()), int(bad.sum()), msgs


# Batched decode steps (attention_batch): row t of Q at position pos[t] of
# cache slot slot[t], S rows a slot; (M, H, G, D, S, positions, slots,
# scale): the 8B's 4 heads a kv head of 128 with a row at its first key and
# the slots out of order, 5 heads of 96 with a row at its slot's last row,
# a 16-head group over four slots.
BATCH_SHAPES = [(3, 8, 2, 128, 140, (130, 0, 77), (2, 0, 3), None),
                (2, 5, 1, 96, 64, (63, 20), (1, 0), None),
                (4, 16, 1, 64, 24, (5, 23, 0, 17), (3, 1, 0, 2), 0.5)]


def run_batch(tmp, exe, env, launch_of, dt, shapes, p_rounded=True):
    """Run a batched decode attention built with harness_att.h (BATCH 1) on
    BATCH_SHAPES-like shapes: [(shape, rc, unwritten, bad, messages, log)].
    launch_of(e): (grid, block, shmem) of the problem e."""
    import numpy as np
    out = []
    for i, (m, h, g, d, S, pos, slot, sc) in enumerate(shapes):
        scale = sc if sc is not None else 1 / d ** 0.5
        nslots = max(slot) + 1
        ((qb, q), (kb, k), (vb, v)), poison = _adata(dt, m, h, g, d, 0, seed=100 * i + d, kv_rows=nslots * S)
        for name, b in (("q.bin", qb), ("k.bin", kb), ("v.bin", vb), ("o.bin", poison),
                        ("pos.bin", np.array(list(pos) + list(slot), "<i4").tobytes())):
            (tmp / name).write_bytes(b)
        grid, block, shmem = launch_of(env | {"M": m, "N": 0, "K": 0, "H": h, "G": g, "D": d})
        r = subprocess.run([str(exe), str(m), str(h), str(g), str(d), str(S), repr(float(scale)), str(grid),
                            str(block), str(shmem), str(tmp), str(nslots)], capture_output=True, text=True,
                           timeout=600)
        rows = [(p + 1, sl * S) for p, sl in zip(pos, slot)]
        res = _acheck((tmp / "out.bin").read_bytes(), dt, q, k, v, 0, scale, p_rounded, rows=rows) \
            if r.returncode in (0, 1) else (-1, -1, [])
        out.append(((m, h, g, d, pos, slot), r.returncode, *res, r.stdout + r.stderr[-3000:]))
    return out


def run_att(tmp, tpl_file, wave, dtype, params, shapes, p_rounded=True, **texts):
    """Build and run one attention case: [(shape, rc, unwritten, bad, messages, output)]
    (p_rounded: _acheck's)."""
    tpl, env, exe = build(tmp, tpl_file, wave, dtype, "attention", params, **texts)
    tpl["grid"], tpl["block"] = grid_block(tpl_file)
    first = lambda s: re.split(r"\s+(?=\d+\s+\d+\s*$)", s.strip())[0]  # "<expr> 1 1"
    out = []
    for i, (m, h, g, d, p0, sc) in enumerate(shapes):
        scale = sc if sc is not None else 1 / d ** 0.5
        ((qb, q), (kb, k), (vb, v)), poison = _adata(dtype, m, h, g, d, p0, seed=100 * i + d)
        for name, b in (("q.bin", qb), ("k.bin", kb), ("v.bin", vb), ("o.bin", poison)):
            (tmp / name).write_bytes(b)
        e = env | {"M": m, "N": 0, "K": 0, "H": h, "G": g, "D": d}
        grid, block = evaluate(first(tpl["grid"]), e), evaluate(first(tpl["block"]), e)
        r = subprocess.run([str(exe), str(m), str(h), str(g), str(d), str(p0), repr(float(scale)), str(grid),
                            str(block), str(evaluate(tpl["shmem"], e)), str(tmp)],
                           capture_output=True, text=True, timeout=600)
        res = _acheck((tmp / "out.bin").read_bytes(), dtype, q, k, v, p0, scale, p_rounded) \
            if r.returncode in (0, 1) else (-1, -1, [])
        out.append(((m, h, g, d, p0), r.returncode, *res, r.stdout + r.stderr[-3000:]))
    return out


# Each set in the dtypes that keep every (instruction shape, dtype) pair
# covered at the least cost: MFMA 32x32 sets 0 and 2 one dtype each, the
# 16x16 set both; WMMA's large set in f16, its small one in both (every
# bf16 and f16 instruction of both families still runs; the full product
# cost 40 s more of CI).
ADTYPES = {("attention_mfma.cu", 0): ("f16",), ("attention_mfma.cu", 2): ("bf16",),
           ("attention_wmma.cu", 0): ("f16",)}
AIDS = [(f, w, dt, i) for f, w, ps in ACASES for i in range(len(ps)) for dt in ADTYPES.get((f, i), ("f16", "bf16"))]


@pytest.mark.parametrize("tpl_file,wave,dtype,which", AIDS,
                         ids=[f"{f[:-3]}-{dt}-{i}" for f, _, dt, i in AIDS])
def test_attention_on_emulated_matrix_cores(tmp_path, tpl_file, wave, dtype, which):
    params = next(ps for f, _, ps in ACASES if f == tpl_file)[which]
    tpl = parse(os.path.join(GPU, tpl_file))
    assert tpl["ops"] == ["attention"] and dtype in tpl["dtypes"]
    shapes = att_shapes(tpl, params)
    assert len(shapes) >= 2, (tpl_file, params, shapes)
    for shape, rc, unwritten, bad, msgs, log in run_att(tmp_path, tpl_file, wave, dtype, params, shapes):
        what = f"{tpl_file} {dtype} {params} (M, H, G, D, pos0) = {shape}"
        assert rc == 0 and "guard 0 replication 0" in log, f"{what}:\n{log}"
        assert unwritten == 0 and bad == 0, f"{what}: {unwritten} unwritten, {bad} bad\n" + "\n".join(msgs)


def test_attention_cases_cover_the_space():
    """Each attention template's sets cover its MFMA families, stage counts,
    HPB 1 and > 1, and the 5:1 GQA shapes at head dims 64, 96 and 128."""
    for f, _, ps in ACASES:
        tpl = parse(os.path.join(GPU, f))
        env = {"WARP": 64 if "mfma" in f else 32, "SMEM": 65536, "MAXT": 1024, "MFMA": int("mfma" in f),
               "WMMA": int("wmma" in f), "VGPRS": 512 if "mfma" in f else 256, "SA": 2, "SB": 2, "SC": 2,
               "AMD": 1} | op_names("attention")
        for p in ps:
            assert set(p) == set(tpl["params"]), (f, p)
            assert all(evaluate(c, env | p) for c in tpl["constraints"]), (f, p)
        assert {p["STAGES"] for p in ps} == {1, 2} and {p["HPB"] > 1 for p in ps} == {False, True}
        assert any({(5, 1, d) for d in (64, 96, 128)} <= {s[1:4] for s in att_shapes(tpl, p)} for p in ps), f
        if "MI" in tpl["params"]:
            assert {p["MI"] for p in ps} == {16, 32}


# Decode attention (M = 1, split over the keys) on AMD matrix cores:
# attention_decode_mfma (CDNA) and attention_decode_wmma (RDNA3), the
# counterparts of attention_decode_mma (tests/test_nv_emulator.py runs that
# one and attention_decode on the same shapes): the 8B's 4 heads a kv head
# of 128 300 positions in, 5 heads of 96, one key, a 16-head group, D = 48
# and 32; both MFMA families, one and two stages, the WMMA kernel's next
# tile in flight during the math and not, splits from 1 (a wave takes
# several tiles) to more than the keys (empty slices). bf16 is checked
# without the op's allowance for P rounded once (it takes P as two parts);
# f16 with it.
DEC_SHAPES = [(1, 8, 2, 128, 300, None), (1, 5, 1, 96, 77, None), (1, 16, 1, 64, 0, 0.5),
              (1, 8, 2, 48, 130, 1.0), (1, 12, 4, 32, 2, None)]
MF, WM = ("attention_decode_mfma.cu", 64), ("attention_decode_wmma.cu", 32)
DCASES = [(*MF, "f16", dict(MI=16, WARPS=4, KB=64, STAGES=1, SPLIT=4, DMAX=128)),
          (*MF, "bf16", dict(MI=32, WARPS=2, KB=64, STAGES=1, SPLIT=4, DMAX=128)),
          (*MF, "bf16", dict(MI=16, WARPS=2, KB=32, STAGES=2, SPLIT=1, DMAX=64)),
          (*WM, "f16", dict(WARPS=2, KB=32, STAGES=1, PF=0, SPLIT=4, DMAX=128)),
          (*WM, "bf16", dict(WARPS=1, KB=16, STAGES=2, PF=0, SPLIT=1, DMAX=128)),
          (*WM, "bf16", dict(WARPS=4, KB=64, STAGES=1, PF=1, SPLIT=16, DMAX=64))]
DIDS = [f"{f[:-3]}-{dt}-" + "-".join(f"{k}{v}" for k, v in p.items()) for f, _, dt, p in DCASES]


def dec_shapes(tpl_file, params, shapes=DEC_SHAPES, op="attention"):
    """The shapes (M, H, G, D, ...) of shapes inside tpl_file's @applies for op at params."""
    tpl = parse(os.path.join(GPU, tpl_file))
    return [s for s in shapes if all(evaluate(a, params | op_names(op) | {"M": s[0], "N": 0, "K": 0, "H": s[1],
                                                                          "G": s[2], "D": s[3]})
                                     for a in tpl["applies"])]


@pytest.mark.parametrize("tpl_file,wave,dtype,params", DCASES, ids=DIDS)
def test_decode_attention_on_emulated_matrix_cores(tmp_path, tpl_file, wave, dtype, params):
    shapes = dec_shapes(tpl_file, params)
    assert len(shapes) >= 3, (params, shapes)
    for shape, rc, unwritten, bad, msgs, log in run_att(tmp_path, tpl_file, wave, dtype, params,
                                                        shapes, p_rounded=dtype != "bf16"):
        what = f"{tpl_file} {dtype} {params} (M, H, G, D, pos0) = {shape}"
        assert rc == 0 and "guard 0 replication 0" in log, f"{what}:\n{log}"
        assert unwritten == 0 and bad == 0, f"{what}: {unwritten} unwritten, {bad} bad\n" + "\n".join(msgs)


# The batched decode step (attention_batch: each row at its own position
# and cache slot; the workspace and tickets per row): a split and none,
# both MFMA families, and WMMA.
BCASES = [(*MF, "f16", dict(MI=16, WARPS=2, KB=32, STAGES=2, SPLIT=4, DMAX=128)),
          (*MF, "bf16", dict(MI=32, WARPS=2, KB=64, STAGES=1, SPLIT=1, DMAX=128)),
          (*WM, "f16", dict(WARPS=2, KB=32, STAGES=2, PF=0, SPLIT=4, DMAX=128))]


@pytest.mark.parametrize("tpl_file,wave,dtype,params", BCASES,
                         ids=[f"{f[:-3]}-{dt}-" + "-".join(f"{k}{v}" for k, v in p.items()) for f, _, dt, p in BCASES])
def test_batched_decode_attention_on_emulated_matrix_cores(tmp_path, tpl_file, wave, dtype, params):
    tpl, env, exe = build(tmp_path, tpl_file, wave, dtype, "attention_batch", params)
    grid, block = grid_block(tpl_file)
    first = lambda x: re.split(r"\s+(?=\d+\s+\d+\s*$)", x.strip())[0]  # "<expr> 1 1"
    launch_of = lambda e: (evaluate(first(grid), e), evaluate(first(block), e), evaluate(tpl["shmem"], e))
    shapes = dec_shapes(tpl_file, params, BATCH_SHAPES, "attention_batch")
    assert len(shapes) == 3
    for shape, rc, unwritten, bad, msgs, log in run_batch(tmp_path, exe, env, launch_of, dtype, shapes,
                                                          p_rounded=dtype != "bf16"):
        what = f"{tpl_file} attention_batch {dtype} {params} (M, H, G, D, pos, slot) = {shape}"
        assert rc == 0 and "guard 0 replication 0" in log, f"{what}:\n{log}"
        assert unwritten == 0 and bad == 0, f"{what}: {unwritten} unwritten, {bad} bad\n" + "\n".join(msgs)


# plausible mistakes in the AMD decode attentions, each caught on the
# 8B-like shape with 5 tiles a slice over 2 waves
DEC_MUTATIONS = [
    ("a key past the slice's end taken", "key < j1 ?", "key <= j1 ?", MF, "f16"),
    ("a row's lanes' maxima not exchanged", "mx = gc_max(mx, gc_shfl_xor(mx, x));", "mx = gc_max(mx, mx);", MF, "f16"),
    ("bf16's P in one part", "#define ADF_PP (GC_TB == GC_BF16 ? 2 : 1)", "#define ADF_PP 1", MF, "bf16"),
    ("wmma: a key past the slice's end taken", "key < j1 ?", "key <= j1 ?", WM, "f16"),
    ("wmma: the lane pair's maxima not exchanged", "mx = gc_max(mx, gc_shfl_xor(mx, 16));", "mx = gc_max(mx, mx);",
     WM, "f16"),
    ("wmma: bf16's P in one part", "#define ADW_PP (GC_TB == GC_BF16 ? 2 : 1)", "#define ADW_PP 1", WM, "bf16"),
]
DEC_MUTANT = {MF: dict(MI=16, WARPS=2, KB=32, STAGES=2, SPLIT=2, DMAX=128),
              WM: dict(WARPS=2, KB=32, STAGES=1, PF=0, SPLIT=2, DMAX=128)}


@pytest.mark.parametrize("what,old,new,tw,dtype", DEC_MUTATIONS, ids=[m[0].replace(" ", "_") for m in DEC_MUTATIONS])
def test_wrong_decode_attention_is_caught(tmp_path, what, old, new, tw, dtype):
    text = open(os.path.join(GPU, tw[0])).read()
    assert text.count(old) == 1, old
    (_, rc, unwritten, bad, _, log), = run_att(tmp_path, *tw, dtype, DEC_MUTANT[tw], DEC_SHAPES[:1],
                                               p_rounded=dtype != "bf16", tpl_text=text.replace(old, new))
    assert rc != 0 or unwritten or bad, f"{what}: not detected\n{log}"


# Each mutation is a plausible mistake in the kernel (its text, or the
# layout macros it reads); the check above must catch it.
AMUTATIONS = [
    ("mask one key past the diagonal", "tpl", "key <= lim ?", "key <= lim + 1 ?", "attention_mfma.cu", 64, 0),
    ("O not rescaled by the running max", "tpl", "o[n] *= corr;", ";", "attention_mfma.cu", 64, 1),
    ("row sum not rescaled by the running max", "tpl", "l *= corr;", ";", "attention_mfma.cu", 64, 0),
    ("32x32 accumulator rows interleaved wrongly", "layout", "8 * ((r) / 4) + 4 * ((l) / 32) + (r) % 4",
     "4 * ((r) / 4) + 16 * ((l) / 32) + (r) % 4", "attention_mfma.cu", 64, 0),
    ("16x16 operand k groups collide", "layout", "#define GC_MFMA_AB_K(S, KPL, l, v) ((l) / (S) * (KPL) + (v))",
     "#define GC_MFMA_AB_K(S, KPL, l, v) ((l) / (S) / 2 * (KPL) + (v))", "attention_mfma.cu", 64, 1),
    ("WMMA mask one key past the diagonal", "tpl", "key <= lim ?", "key <= lim + 1 ?", "attention_wmma.cu", 32, 0),
    ("WMMA O not rescaled by the running max", "tpl", "o[n] *= corr;", ";", "attention_wmma.cu", 32, 1),
    ("WMMA accumulator rows as lane halves", "layout", "#define GC_WMMA_D_ROW(l, r) (2 * (r) + (l) / 16)",
     "#define GC_WMMA_D_ROW(l, r) ((r) + 8 * ((l) / 16))", "attention_wmma.cu", 32, 0),
]


@pytest.mark.parametrize("what,where,old,new,tpl_file,wave,which", AMUTATIONS,
                         ids=[m[0].replace(" ", "_") for m in AMUTATIONS])
def test_wrong_attention_is_caught(tmp_path, what, where, old, new, tpl_file, wave, which):
    params = next(ps for f, _, ps in ACASES if f == tpl_file)[which]
    if where == "layout":
        text = layouts(tmp_path / "layouts.h")
        texts = {"layout_text": text.replace(old, new)}
    else:
        text = open(os.path.join(GPU, tpl_file)).read()
        texts = {"tpl_text": text.replace(old, new)}
    assert text.count(old) == 1, old
    # the shape with the most keys (the running max moves in later tiles)
    shapes = sorted(att_shapes(parse(os.path.join(GPU, tpl_file)), params), key=lambda s: -(s[0] + s[4]))[:1]
    assert shapes and shapes[0][0] > 1, params
    (_, rc, unwritten, bad, _, log), = run_att(tmp_path, tpl_file, wave, "f16", params, shapes, **texts)
    assert rc != 0 or unwritten or bad, f"{what}: not detected\n{log}"
