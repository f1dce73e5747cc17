"""The AMD path, proven as far as it goes without an AMD GPU: every GPU
template that serves AMD (@backend gpu or hip) compiles at its defaults
for gfx90a, gfx942 and gfx1100 through each driver that supports the
target (comgr where the installed comgr lists the ISA -- Debian's 5.2
lists gfx90a, not gfx942/gfx1100 -- and clang-19 everywhere), and at a
sample of its space on its family's main target (the matrix-core
templates' samples, on every target: test_amd_templates.py);
the quantized GEMV and gather at every dtype they list, without spills;
model bundles for all AMD targets build (llama2.c, fp16, and a Q4_K_M
GGUF whose weights stay in their blocks), no kernel in them spills, and
the fp16 one's GEMM kernels use the matrix cores (v_mfma on gfx90a/gfx942,
v_wmma on gfx1100); comgr and clang agree on the kernel symbols and
argument layout of the same variant; code object v4 on request; clear
one-line errors.
Parts whose tool is missing skip, saying why."""
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess

import pytest

from conftest import ROOT, SHARED, assert_clean_error, run_tool
from test_gpu_compile import BLOCK_DTYPES, forced_params, gpu_templates, shape
from tplhead import constraints, may_hold, op_names, template_path

CLANG = os.environ.get("GCORE_CLANG") or shutil.which("clang-19") or (
    "/opt/rocm/llvm/bin/clang" if os.path.exists("/opt/rocm/llvm/bin/clang") else None)
OBJDUMP = shutil.which("llvm-objdump-19") or shutil.which("llvm-objdump")
needs_clang = pytest.mark.skipif(not CLANG, reason="no clang for AMD (install clang-19 lld-19: make deps)")
WAVE = {"gfx90a": 64, "gfx942": 64, "gfx1100": 32}


def comgr_isas():
    """ISAs the installed comgr lists (empty when comgr is missing): the AMD
    driver choice in gcore-gen follows the same list."""
    r = run_tool("gcore-compile", "--list-isas")
    return set(r.out.split()) if r.rc == 0 else set()


COMGR = comgr_isas()
DRIVERS = [("gfx90a", "clang"), ("gfx942", "clang"), ("gfx1100", "clang")] + \
          [(a, "comgr") for a in ("gfx90a", "gfx942", "gfx1100") if a in COMGR]


def amd_templates():
    """gpu_templates() that serve AMD: @backend gpu or hip."""
    served = []
    try:  # amd-rt's gpu_templates() lists cuda and gpu ones unless told otherwise
        listed = gpu_templates(backends=("gpu", "hip"))
    except TypeError:
        listed = gpu_templates()
    for name, op, dts, params, *_ in listed:
        backend = re.search(r"@backend\s+(\w+)", open(template_path(name)).read()).group(1)
        if backend in ("gpu", "hip"):
            served.append((name, op, dts, params))
            if backend == "hip":
                MATRIX.add(name)
    return served


# The matrix-core templates (@backend hip): test_amd_templates.py samples
# their spaces (3 points a target and dtype); here they compile at their
# defaults through gen's own pipeline on every driver.
MATRIX = set()
TEMPLATES = amd_templates()


def hip_gemm_templates():
    """The matrix-core GEMM templates (@backend hip, op gemm or gemm_swiglu)."""
    d = os.path.join(ROOT, "templates", "gpu")
    return [f for f in os.listdir(d) if f.endswith(".cu") and
            re.search(r"@backend\s+hip\b", open(os.path.join(d, f)).read()) and
            re.search(r"@op\s+gemm", open(os.path.join(d, f)).read())]


def other_family(r, tpl, arch):
    """Skip when a matrix-core template is for the other family (MFMA on
    gfx1100, WMMA on CDNA): its constraints name MFMA or WMMA and fail."""
    if r.rc != 0 and re.search(r"constraint fails: .*\b(MFMA|WMMA)\b", r.err):
        pytest.skip(f"{tpl} is for the other matrix-core family than {arch}")


def compile_cases():
    """(arch, driver, template row) to compile: a template's sampled ops
    (those with parameters to sample: tplhead.sampled_ops) on every driver;
    its further ops, the same code but the store, at their defaults on the
    main target of the template's family only (gfx1100 for WMMA, else
    gfx942), a covering that keeps CI time."""
    out = []
    for t in TEMPLATES:
        main = "gfx1100" if "wmma" in t[0] else "gfx942"
        out += [(a, d, *t) for a, d in DRIVERS if t[3] or (a, d) == (main, "clang")]
    return out


@needs_clang
@pytest.mark.parametrize("arch,driver,tpl,op,dts,params", compile_cases(),
                         ids=[f"{c[2]}-{c[3]}-{c[0]}-{c[1]}" for c in compile_cases()])
def test_template_compiles(gc, arch, driver, tpl, op, dts, params):
    rng = random.Random(f"{tpl}-{op}-{arch}")
    forces = [tpl] + [tpl + ":" + ",".join(f"{k}={rng.choice(v)}" for k, v in params.items())
                      for _ in range(40 if params else 0)]  # a gate/up op's space is smaller
    main = "gfx1100" if "wmma" in tpl else "gfx942"  # the family's main target
    # the defaults everywhere, and 2 sampled points on the main target with
    # clang (the matrix-core templates' points: test_amd_templates.py)
    built, need = 0, (3 if params and (arch, driver) == (main, "clang") and tpl not in MATRIX else 1)
    cons, known = constraints(tpl), dict(op_names(op), WARP=WAVE[arch], MAXT=1024)  # the target's, as gen/target.c
    for force in forces:
        if built >= need:
            break
        if not may_hold(cons, known | forced_params(force)):
            continue  # outside the space on its parameters alone: gcore-gen would refuse it
        r = gc("gcore-gen", "--target", arch, "--compiler", driver, "--op", op, "--dtype", dts[0],
               *shape(op, dts[0], tpl).split(), "--force", force, "-o", "b.gcb", "-q")
        if force != tpl and r.rc != 0 and "constraint fails" in r.err:
            continue  # a random point outside the space
        other_family(r, tpl, arch)
        assert r.rc == 0, r
        with sqlite3.connect(gc.dir / "b.gcb") as c:
            rows = c.execute("SELECT regs, spills, scratch_bytes, wave, length(blob), compiler "
                             "FROM code_objects WHERE template = ?", (tpl,)).fetchall()
        assert rows, r
        for regs, spills, scratch, wave, size, compiler in rows:
            assert compiler.startswith(driver + "|") and size > 0, rows
            if COMGR:  # metadata is read through comgr
                assert regs and regs > 0 and wave == WAVE[arch], rows
                if force == tpl:
                    assert spills == 0 and scratch == 0, f"{tpl} spills at its defaults on {arch}: {rows}"
        built += 1
    assert built >= min(need, 2), f"{tpl}: no sampled point was in its space"


# The quantized templates whose dtypes a model picks from (activations ×
# block format × output): test_template_compiles builds their first dtype
# only, test_quantized_templates_compile_at_every_dtype the others.
QUANT_OPS = {"gemv_q_gpu": "rmsnorm_gemm_swiglu", "embed_q_gpu": "embed"}
QUANT_DTYPES = {t[0]: t[2] for t in TEMPLATES if t[0] in QUANT_OPS}
AMD = ("gfx90a", "gfx942", "gfx1100")


def quant_covering(dts, arch):
    """The dtypes of dts (a template's @dtypes, A:B:C) that arch builds:
    every target those of a block-format model's GPU recipe (fp16
    activations, B one of the formats a GGUF file stores: models/recipe.h);
    the others (fp32 and bf16 activations, NVIDIA's device layouts) each on
    one target, in turn. A covering that keeps CI time: every dtype on some
    target, every activation dtype on each (the whole product is twice it)."""
    model = [d for d in dts if d.split(":")[0] == "f16" and d.split(":")[1] in BLOCK_DTYPES]
    return model + [d for d in dts if d not in model][AMD.index(arch)::len(AMD)]


def quant_workload(arch):
    """One problem for each (quantized template, dtype of its covering): the
    GEMV at its most live registers (the fused norm and the SwiGLU pair:
    rows of gate and up in flight together), the gather; K (N for embed)
    one 256-element super-block, as every format and device layout needs."""
    shapes = {"rmsnorm_gemm_swiglu": "m=1 n=96 k=256", "embed": "m=1 n=256 k=50"}
    return "".join(f"{QUANT_OPS[t]} {dt} {shapes[QUANT_OPS[t]]}\n"
                   for t, dts in QUANT_DTYPES.items() for dt in quant_covering(dts, arch))


@needs_clang
@pytest.mark.parametrize("arch", AMD)
def test_quantized_templates_compile_at_every_dtype(gc, arch):
    """gemv_q_gpu (the decode GEMV of gfx1100, which has no gemv_qmfma, and
    of the fused-norm steps on CDNA) and embed_q_gpu compile at their
    defaults for the dtypes they list, block formats and device layouts
    (quant_covering: a model's on each target, every other on one), through
    the driver a model's bundle uses (comgr where it lists the ISA, else
    clang), and no variant spills: one gcore-gen for them all."""
    assert set(QUANT_DTYPES) == set(QUANT_OPS), "a quantized template is no longer listed for AMD"
    want = set()
    for tpl, dts in QUANT_DTYPES.items():  # the covering's promise, for these @dtypes
        assert set().union(*(quant_covering(dts, a) for a in AMD)) == set(dts), (tpl, dts)
        assert {d.split(":")[0] for d in quant_covering(dts, arch)} == {d.split(":")[0] for d in dts}
        want |= {(tpl, dt) for dt in quant_covering(dts, arch)}
    (gc.dir / "q.txt").write_text(quant_workload(arch))
    r = gc("gcore-gen", "--target", arch, "--workload", "q.txt", "--force", "gemv_q_gpu",
           "-o", "q.gcb", "-q")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "q.gcb") as c:
        rows = c.execute("SELECT template, dtypes, params, regs, spills, scratch_bytes, wave, "
                         "length(blob), compiler FROM code_objects").fetchall()
    got = {(t, dt) for t, dt, *_ in rows}
    assert got == want, f"missing {sorted(want - got)}, unexpected {sorted(got - want)}"
    driver = "comgr" if arch in COMGR else "clang"
    for tpl, dt, params, regs, spills, scratch, wave, size, compiler in rows:
        assert compiler.startswith(driver + "|") and size > 0, (tpl, dt, compiler, size)
        if COMGR:  # metadata is read through comgr
            assert regs and regs > 0 and wave == WAVE[arch], (tpl, dt, regs, wave)
            assert spills == 0 and scratch == 0, \
                f"{tpl} {dt} spills at its defaults on {arch}: {params}, {regs} registers, " \
                f"{spills} spills, {scratch} scratch bytes"


@pytest.fixture(scope="module")
def model_bundle(tmp_path_factory, cache_dir):
    """One bundle, every AMD target plus the CPU (and sm_90 where NVRTC is)."""
    model = os.path.join(SHARED, "stories260K.bin")
    if not CLANG:
        pytest.skip("no clang for AMD (install clang-19 lld-19: make deps)")
    if not os.path.exists(model):
        pytest.skip(f"{model} is absent (set GCORE_SHARED_DATA)")
    from test_gpu_compile import NVRTC
    targets = "gfx942,gfx90a,gfx1100," + ("sm_90," if NVRTC else "") + "cpu"
    d = tmp_path_factory.mktemp("amdmodel")
    r = run_tool("gcore-gen", "--model", model, "--target", targets, "--prefill", "16", "-o",
                 "m.gcb", cwd=d, env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    assert "warning" not in r.err, r
    return d / "m.gcb", targets


@pytest.fixture(scope="module")
def f16_bundle(tmp_path_factory, cache_dir):
    """A Llama of matrix-core-friendly shapes in fp16 (tinymodel: dim 256,
    FFN 512, 4 heads of 64, 2 kv heads), for the AMD targets only."""
    if not CLANG:
        pytest.skip("no clang for AMD (install clang-19 lld-19: make deps)")
    import tinymodel
    d = tmp_path_factory.mktemp("amdf16")
    tinymodel.write_model(str(d / "model"), dtype="f16", dim=256, hidden_dim=512, n_layers=1,
                          n_heads=4, n_kv_heads=2, vocab=256)
    r = run_tool("gcore-gen", "--model", d / "model", "--target", "gfx942,gfx90a,gfx1100",
                 "--prefill", "16,64", "-o", "f16.gcb", cwd=d, env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    assert "warning" not in r.err, r
    return d / "f16.gcb"


@pytest.fixture(scope="module")
def quant_bundle(tmp_path_factory, cache_dir):
    """A GGUF Llama of the f16 model's shapes in the llama.cpp-like Q4_K_M
    mix (tinygguf.MIXED: Q4_K, with output and, in its one layer, attn_v
    and ffn_down in Q6_K), for the AMD targets only: the decode GEMVs
    (gemv_qmfma, gemv_q_gpu), the prefill GEMMs on the matrix cores
    (gemm_q_mfma, gemm_q_wmma) and the gather (embed_q_gpu) on its blocks.
    --dequant-rows 0: no dense plan, so that every matrix step reads its
    blocks (the dense plan's GEMMs are f16_bundle's, its gather is checked
    at every dtype above). Returns (bundle, {GGUF tensor: type})."""
    if not CLANG:
        pytest.skip("no clang for AMD (install clang-19 lld-19: make deps)")
    import tinygguf
    d = tmp_path_factory.mktemp("amdq")
    _, _, layout = tinygguf.write_model(str(d / "m.gguf"), qtype=tinygguf.MIXED, dim=256,
                                        hidden_dim=512, n_layers=1, n_heads=4, n_kv_heads=2,
                                        vocab=320)
    r = run_tool("gcore-gen", "--model", d / "m.gguf", "--target", "gfx942,gfx90a,gfx1100",
                 "--prefill", "16", "--dequant-rows", "0", "-o", "q.gcb", cwd=d,
                 env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    assert "warning" not in r.err, r
    return d / "q.gcb", layout["types"]


def test_model_bundle_has_every_target(model_bundle):
    path, targets = model_bundle
    with sqlite3.connect(path) as c:  # the ops the recipe uses, as on the CPU
        ops = {op for (op,) in c.execute("SELECT DISTINCT op FROM dispatch WHERE target LIKE 'cpu:%'")}
    assert {"embed", "rmsnorm", "gemm", "rope_kv", "attention", "gemm_swiglu", "argmax"} <= ops
    with sqlite3.connect(path) as c:
        for t in targets.split(","):  # "cpu" is stored as "cpu:<level>"
            got = {op for (op,) in c.execute("SELECT DISTINCT op FROM dispatch WHERE target = ? "
                                             "OR (? = 'cpu' AND target LIKE 'cpu:%')", (t, t))}
            assert got == ops, (t, got)


@pytest.mark.parametrize("which", ["stories260K", "f16", "q4_k_m"])
def test_no_kernel_spills(request, which):
    if not COMGR:
        pytest.skip("comgr not installed: AMD resource figures are not read")
    fixture = {"stories260K": "model_bundle", "f16": "f16_bundle", "q4_k_m": "quant_bundle"}[which]
    path = request.getfixturevalue(fixture)
    path = path if which == "f16" else path[0]
    with sqlite3.connect(path) as c:
        rows = c.execute("SELECT target, template, params, regs, spills, scratch_bytes, occupancy "
                         "FROM code_objects WHERE target LIKE 'gfx%'").fetchall()
    assert {r[0] for r in rows} == {"gfx942", "gfx90a", "gfx1100"}
    bad = [r for r in rows if r[3] is None or r[4] != 0 or r[5] != 0 or not r[6]]
    assert not bad, f"kernels that spill, use scratch or cannot run: {bad}"


MATRIX_OPS = ("gemm", "gemm_add", "gemm_swiglu", "rmsnorm_gemm", "rmsnorm_gemm_swiglu")


def test_quantized_model_keeps_its_blocks(quant_bundle):
    """On every AMD target the Q4_K_M model's matrix steps and gather are
    problems in the file's block formats (fp16 activations), served by code
    objects of those dtypes: no weight was made dense on the way."""
    path, types = quant_bundle
    blocks = {t.lower() for g, t in types.items() if not g.endswith("norm.weight")}
    assert blocks == {"q4_k", "q6_k"}, types
    want_embed = {types["token_embd.weight"].lower()}
    with sqlite3.connect(path) as c:
        for target in ("gfx942", "gfx90a", "gfx1100"):
            probs = set(c.execute("SELECT op, ta, tb, tc FROM dispatch WHERE target = ? AND op IN "
                                  f"({','.join('?' * len(MATRIX_OPS))}, 'embed')",
                                  (target, *MATRIX_OPS)).fetchall())
            assert {ta + tc for _, ta, _, tc in probs} == {"f16f16"}, (target, probs)
            assert {tb for op, _, tb, _ in probs if op != "embed"} == blocks, (target, probs)
            assert {tb for op, _, tb, _ in probs if op == "embed"} == want_embed, (target, probs)
            made = {dt for (dt,) in c.execute("SELECT DISTINCT dtypes FROM code_objects "
                                              "WHERE target = ?", (target,))}
            assert {f"f16:{b}:f16" for b in blocks} <= made, (target, made)


def disassemble(blob, tmp_path, name):
    p = tmp_path / name
    p.write_bytes(blob)
    return subprocess.run([OBJDUMP, "-d", str(p)], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not OBJDUMP, reason="llvm-objdump-19 not installed (make deps)")
def test_gemm_kernels_use_matrix_cores(f16_bundle, tmp_path):
    """Every GEMM kernel (gemm, gemm_add and gemm_swiglu entries, the M = 1 GEMVs aside)
    of the fp16 model's bundle runs on the matrix cores."""
    if not hip_gemm_templates():
        pytest.skip("no MFMA/WMMA GEMM templates (@backend hip, op gemm) yet: they land with the "
                    "amd-rt branch; until then AMD GEMMs are the SIMT ones")
    path = f16_bundle
    want = {"gfx942": "v_mfma", "gfx90a": "v_mfma", "gfx1100": "v_wmma"}
    with sqlite3.connect(path) as c:
        rows = c.execute("SELECT DISTINCT o.id, o.target, o.template, o.params, o.blob FROM "
                         "code_objects o JOIN dispatch d ON d.code_id = o.id WHERE o.target IN "
                         "('gfx942', 'gfx90a', 'gfx1100') AND d.op IN ('gemm', 'gemm_add', 'gemm_swiglu') "
                         "AND o.template NOT LIKE 'gemv%' AND d.ta = d.tb").fetchall()
    # (d.ta = d.tb: the GPU recipe's problems. gcore-gen --model builds the
    # CPU recipe's too, fp32 activations × fp16 weights, which no
    # matrix-core template serves: those are the SIMT GEMMs.)
    assert {r[1] for r in rows} == set(want), "every AMD target must have GEMM kernels"
    for oid, target, tpl, params, blob in rows:
        text = disassemble(blob, tmp_path, f"{oid}.hsaco")
        assert want[target] in text, f"{target} {tpl} {params}: no {want[target]} in the disassembly"


# a template's sampled ops (tplhead.sampled_ops: the others are the same
# code but the store, and their ABI the same arguments)
SAMPLED = [t for t in TEMPLATES if t[3]]


@pytest.mark.skipif("gfx90a" not in COMGR, reason="the installed comgr cannot build gfx90a")
@needs_clang
@pytest.mark.parametrize("tpl,op,dts,params", SAMPLED, ids=[f"{t[0]}-{t[1]}" for t in SAMPLED])
def test_comgr_and_clang_agree(gc, tpl, op, dts, params):
    described = {}
    for driver in ("comgr", "clang"):
        r = gc("gcore-gen", "--target", "gfx90a", "--compiler", driver, "--op", op, "--dtype",
               dts[0], *shape(op, dts[0], tpl).split(), "--force", tpl, "-o", f"{driver}.gcb", "-q")
        other_family(r, tpl, "gfx90a")
        assert r.rc == 0, r
        with sqlite3.connect(gc.dir / f"{driver}.gcb") as c:
            (blob,) = c.execute("SELECT blob FROM code_objects WHERE template = ?", (tpl,)).fetchone()
        (gc.dir / f"{driver}.hsaco").write_bytes(blob)
        d = gc("gcore-compile", "--describe", gc.dir / f"{driver}.hsaco")
        assert d.rc == 0, d
        described[driver] = json.loads(d.out)["kernels"]
    layout = {d: sorted((k["name"], k["symbol"], k["wavefront_size"],
                         tuple((a["offset"], a["size"], a["value_kind"]) for a in k["args"]
                               if not a["value_kind"].startswith("hidden_")))
                        for k in ks) for d, ks in described.items()}
    assert layout["comgr"] == layout["clang"], layout


def elf_abi_version(blob):
    assert blob[:4] == b"\x7fELF" and blob[7] == 64, "not an AMDGPU HSA code object"
    return blob[8]  # 2: code object v4, 3: v5


@needs_clang
def test_code_object_version(gc):
    vids = {}
    for cov, abi in (("5", 3), ("4", 2)):
        r = gc("gcore-gen", "--target", "gfx942:sramecc+:xnack-", "--code-object", cov, "--op",
               "add", "--m", "1", "--n", "300", "-o", f"v{cov}.gcb", "-q")
        assert r.rc == 0, r
        with sqlite3.connect(gc.dir / f"v{cov}.gcb") as c:
            vid, blob, comp = c.execute("SELECT vid, blob, compiler FROM code_objects").fetchone()
        assert elf_abi_version(blob) == abi and f"-mcode-object-version={cov}" in comp
        vids[cov] = vid
    assert vids["4"] != vids["5"], "the code object version must be part of the variant id"


@needs_clang
def test_bundle_without_code_for_the_device_names_the_command(gc):
    assert gc("gcore-gen", "--target", "gfx942", "--op", "add", "--m", "1", "--n", "300",
              "-o", "amd.gcb", "-q").rc == 0
    r = gc("gcore-run", "-b", "amd.gcb", "--op", "add", "--m", "1", "--n", "300")
    assert_clean_error(r, "gcore-run", "has no code for this device", "gcore-gen --target cpu")


ADD = ["--op", "add", "--m", "1", "--n", "300", "-o", "x.gcb"]


@pytest.mark.parametrize("args,env,needle", [
    (["--target", "gfx999"], {}, "unknown AMD target 'gfx999'"),
    (["--target", "gfx942:xnack"], {}, "bad feature 'xnack'"),
    (["--target", "gfx942:fast+"], {}, "bad feature 'fast+'"),
    (["--target", "gfx1100:xnack-"], {}, "no sramecc or xnack"),
    (["--target", "gfx942:xnack+:xnack-"], {}, "given twice"),
    (["--target", "gfx942", "--code-object", "3"], {}, "--code-object: expected 4 or 5"),
    (["--target", "cpu", "--code-object", "4"], {}, "applies to AMD targets"),
    (["--target", "cpu", "--compiler", "clang"], {}, "builds none of the targets"),
    (["--target", "gfx942", "--compiler", "nvrtc"], {}, "builds none of the targets"),
    (["--target", "gfx942"], {"GCORE_CLANG": "/nonexistent/clang"}, "is not an executable"),
    (["--target", "gfx90a", "--compiler", "comgr"], {"GCORE_COMGR": "/nonexistent/libamd_comgr.so"},
     "AMD comgr not found"),
])
def test_clear_errors(gc, args, env, needle):
    assert_clean_error(gc("gcore-gen", *args, *ADD, env=env), "gcore-gen", needle)


@pytest.mark.skipif("gfx942" in COMGR, reason="this comgr builds gfx942")
def test_forced_comgr_that_cannot_build_the_isa(gc):
    if not COMGR:
        pytest.skip("comgr not installed")
    assert_clean_error(gc("gcore-gen", "--target", "gfx942", "--compiler", "comgr", *ADD),
                       "gcore-gen", "cannot build gfx942", "--compiler clang")


@needs_clang
def test_missing_comgr_still_builds_with_a_warning(gc):
    r = gc("gcore-gen", "--target", "gfx90a", *ADD, env={"GCORE_COMGR": "/nonexistent/x.so"})
    assert r.rc == 0 and "comgr not found" in r.err and "not read or checked" in r.err, r


@pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="an AMD GPU is present: gcore-tune runs")
def test_tune_without_an_amd_gpu(gc):
    r = gc("gcore-tune", "--target", "gfx942", "--op", "add", "--m", "1", "--n", "300", "--db", "t.db")
    assert_clean_error(r, "gcore-tune", "needs an AMD GPU", "/dev/kfd", "gcore-gen --target gfx942")


def declared_defaults(tpl):
    text = open(template_path(tpl)).read().split("*/", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"@param\s+(\w+)\s+[-\d\s]+?\s+default\s+(-?\d+)", text)}


def picks(gc, target, *problem):
    assert gc("gcore-gen", "--target", target, *problem, "-o", "d.gcb", "-q").rc == 0
    with sqlite3.connect(gc.dir / "d.gcb") as c:
        return c.execute("SELECT template, params, is_default, source FROM dispatch WHERE "
                         "m_lo = m_hi").fetchall()


@needs_clang
def test_untuned_defaults_follow_the_architecture(gc):
    """The heuristic of gen/defaults.h: a problem that fills every CU keeps
    the template's declared defaults; a small one may move at most two
    parameters away from them, and is marked a default either way."""
    big = ["--op", "gemm", "--m", "4096", "--n", "4096", "--k", "4096", "--dtype", "f16"]
    for tpl, params, is_default, source in picks(gc, "gfx942", *big):
        want = declared_defaults(tpl)
        got = dict(kv.split("=") for kv in params.split(","))
        assert got == want and is_default == 1 and source.startswith("default"), (tpl, got, want)
    small = ["--op", "attention", "--m", "1", "--h", "8", "--g", "2", "--d", "64"]
    moved = {}
    for target in ("gfx942", "gfx90a", "gfx1100"):
        for tpl, params, is_default, _ in picks(gc, target, *small):
            want = declared_defaults(tpl)
            got = dict(kv.split("=") for kv in params.split(","))
            assert is_default == 1 and sum(got[k] != want[k] for k in want) <= 2, (target, got)
            moved[target] = got
    # 8 heads of one token cannot fill 304 CUs at the defaults: more split
    assert moved["gfx942"] != declared_defaults("attention_decode"), moved


def highest(dis, kind):
    """The highest register of kind ('v' arch VGPRs, 'a' AGPRs) the
    disassembly names, alone (v7) or as the top of a range (v[4:7]); -1 if none."""
    top = [int(x) for x in re.findall(rf"\b{kind}(\d+)\b", dis)]
    top += [int(hi) for hi in re.findall(rf"\b{kind}\[\d+:(\d+)\]", dis)]
    return max(top, default=-1)


@pytest.mark.skipif(not OBJDUMP, reason="llvm-objdump-19 not installed (make deps)")
@pytest.mark.parametrize("target,driver", [d for d in DRIVERS if d[0] != "gfx1100"],
                         ids=[f"{t}-{d}" for t, d in DRIVERS if t != "gfx1100"])
def test_vgpr_count_holds_the_agprs(gc, target, driver):
    """On CDNA (one unified register file) the code object's .vgpr_count,
    which gcore records as a kernel's registers, is already align(arch
    VGPRs, 4) + AGPRs: read off the disassembly of MFMA GEMMs whose
    accumulators live in AGPRs. So the occupancy and the register budget
    take it as it is (gen/resources.c); adding the AGPRs again rejected
    kernels that fit and halved the occupancy of some."""
    if driver == "clang" and not CLANG:
        pytest.skip("no clang for AMD (install clang-19 lld-19: make deps)")
    r = gc("gcore-gen", "--target", target, "--compiler", driver, "--op", "gemm", "--dtype", "f16",
           "--m", "2,512", "--n", "4096", "--k", "4096", "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        rows = c.execute("SELECT id, template, params, regs, agprs, occupancy, blob FROM code_objects "
                         "WHERE template = 'gemm_mfma'").fetchall()
    assert rows, "no gemm_mfma kernel in the bundle"
    with_agprs = 0
    for oid, tpl, params, regs, agprs, occupancy, blob in rows:
        dis = disassemble(blob, gc.dir, f"{oid}.hsaco")
        v, a = highest(dis, "v") + 1, highest(dis, "a") + 1
        assert agprs == a, (params, agprs, a)
        want = (v + 3) // 4 * 4 + a if a else v
        assert regs == want, f"{tpl} {params}: recorded {regs} registers, the code uses {v} VGPRs + {a} AGPRs"
        with_agprs += a > 0
        # gemm_mfma's @block and @shmem (f16: SA = 2, PAIR = 1); per SIMD of
        # the 4, a 512-register file in granules of 8, at most 8 waves
        p = {k: int(x) for k, x in (kv.split("=") for kv in params.split(","))}
        waves = p["BM"] // p["WM"] * (p["BN"] // p["WN"])
        lds = p["STAGES"] * (p["BM"] + p["BN"]) * (p["BK"] + 4) * 2
        by_lds = -(-(65536 // lds) * waves // 4)
        assert occupancy == min(8, 512 // ((regs + 7) // 8 * 8), by_lds), (params, regs, agprs, occupancy)
    assert with_agprs, "no kernel put its accumulators in AGPRs: the check proved nothing"
