"""GPU templates compile offline (no GPU needed, NVRTC from the CUDA
toolkit): every template at its defaults and at a random sample of its
space (three points on sm_90a, one on sm_80 and sm_90), for sm_80, sm_90 and sm_90a (templates whose constraints need the
arch-specific target, such as wgmma's ARCH_A == 1, are refused cleanly
elsewhere); and a gcore-gen --target sm_90 bundle builds for a model. Skipped, saying why, where NVRTC is not installed."""
import os
import random
import re
import shutil
import sqlite3

import pytest

from conftest import ROOT, SHARED
from tplhead import constraints, may_hold, op_names, sampled_ops, template_path
from cases import problem_args

NVRTC = [p for p in ("/usr/local/cuda/lib64", os.environ.get("CUDA_HOME", "") + "/lib64")
         if p and os.path.isdir(p) and any(f.startswith("libnvrtc.so") for f in os.listdir(p))]
needs_nvrtc = pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")

# m = 1 lies in every template's @applies (decode-only templates included)
# but those of the matrix-core ones that leave it to the GEMVs (M > 1):
# shape() gives them m = 8, inside the batched-decode GEMVs' 2..16 as well.
SHAPES = {"gemm": "--m 1 --n 96 --k 72", "gemm_swiglu": "--m 1 --n 96 --k 72",
          "rmsnorm": "--m 1 --n 300", "add": "--m 1 --n 300", "bias": "--m 3 --n 300", "qk_norm": "--m 2 --h 8 --g 2 --d 128", "concat": "--m 3 --n 300 --k 100",
          "embed": "--m 1 --n 64 --k 50",
          "rope_kv": "--m 1 --h 8 --g 2 --d 64", "attention": "--m 1 --h 8 --g 2 --d 64",
          "argmax": "--m 1 --n 1000", "argmax_step": "--m 1 --n 1000", "gemm_add": "--m 1 --n 96 --k 72",
          "rmsnorm_gemm": "--m 1 --n 96 --k 72", "rmsnorm_gemm_swiglu": "--m 1 --n 96 --k 72",
          "rope_kv_batch": "--m 1 --h 8 --g 2 --d 64", "attention_batch": "--m 1 --h 8 --g 2 --d 64",
          "rmsnorm_gemm_rope_kv": "--m 1 --n 672 --k 72 --h 5 --g 1 --d 96",
          "rmsnorm_gemm_bias_rope_kv": "--m 1 --n 672 --k 72 --h 5 --g 1 --d 96",
          "bias_rope_kv": "--m 1 --h 12 --g 2 --d 128", "qk_norm_rope_kv": "--m 1 --h 16 --g 8 --d 128"}


BLOCK_DTYPES = ("q8_0", "q4_0", "q4_k", "q5_k", "q6_k")


def applies_above_one(tpl):
    """Does template tpl (its @template name) leave M = 1 to others, its
    @applies saying M > 1?"""
    head = open(template_path(tpl)).read().split("*/", 1)[0]
    return any(re.search(r"(^|[(&|\s])M > 1\b", a) for a in re.findall(r"@applies\s+([^\n]+)", head))


def shape(op, dtype, tpl=None):
    """SHAPES[op], with K (N for embed, the table's row) a whole number of
    super-blocks of 256 when B is in a block format (a problem check), and
    m = 8 for a template tpl that does not serve m = 1."""
    s = SHAPES[op]
    if any(q in dtype.split(":") for q in BLOCK_DTYPES):
        s = s.replace("--k 72", "--k 256") if op != "embed" else s.replace("--n 64", "--n 256")
    if tpl and applies_above_one(tpl):
        s = s.replace("--m 1 ", "--m 8 ")
    return s


def forced_params(force):
    """{name: value} of the parameters a --force TEMPLATE:P=V,... names."""
    return {k: int(v) for k, v in (kv.split("=") for kv in force.split(":", 1)[1].split(","))} if ":" in force else {}


def gpu_templates(backends=("gpu", "cuda")):
    """(name, op, dtypes, params) of the GPU templates for these backends."""
    out = []
    d = os.path.join(ROOT, "templates", "gpu")
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not f.endswith(".cu"):
            continue
        head = open(os.path.join(d, f)).read().split("*/", 1)[0]
        params = {m.group(1): m.group(2).split() for m in
                  re.finditer(r"@param\s+(\w+)\s+([-\d\s]+?)\s+default", head)}
        if re.search(r"@backend\s+(\S+)", head).group(1) not in backends:
            continue
        dts = re.search(r"@dtypes\s+([^\n]+)", head).group(1).split(" -- ")[0].split()
        ops = re.search(r"@op\s+([^\n]+)", head).group(1).split()
        min_sm = re.search(r"@constraint\s+SM >= (\d+) --", head)  # the whole template: e.g. sm_90 instructions
        arch_a = (bool(re.search(r"@constraint[^\n]*ARCH_A == 1", head)), int(min_sm.group(1)) if min_sm else 0)
        # the ops tplhead.sampled_ops names (the first, the first gate/up
        # one, the first RoPE/KV one, the first batched step) at their
        # defaults and a sample; every further op at its defaults
        name = re.search(r"@template\s+(\S+)", head).group(1)
        out += [(name, op, dts, params if op in sampled_ops(ops) else {}, arch_a) for op in ops]
    return out


# (template, op) on each target; the ops tplhead.sampled_ops does not name
# (the same code but their epilogue) on sm_90a only: the target-specific
# code is compiled on every target by the named ones.
COMPILES = [(arch,) + t for t in gpu_templates() for arch in ("sm_80", "sm_90", "sm_90a")
            if t[3] or arch == "sm_90a"]


@needs_nvrtc
@pytest.mark.parametrize("arch,tpl,op,dts,params,arch_a", COMPILES,
                         ids=[f"{t[1]}-{t[2]}-{t[0]}" for t in COMPILES])
def test_template_compiles(gc, arch, tpl, op, dts, params, arch_a):
    """Every GPU template compiles at its defaults for each NVIDIA target it
    allows, and at two sampled points of its space on sm_90a (the code is
    the same text on every target: sampling one keeps CI time); on a
    target it excludes (arch-specific sm_90a, or below its least SM) it is
    refused and another serves (COMPILES: which ops on which targets)."""
    if (arch_a[0] and not arch.endswith("a")) or int(arch[3:5]) < arch_a[1]:
        r = gc("gcore-gen", "--target", arch, "--op", op, "--dtype", dts[0],
               *shape(op, dts[0]).split(), "--force", tpl, "-o", "b.gcb", "-q")
        assert r.rc != 0 and "constraint fails" in r.err, r
        # and the default for the op on this target is another template
        shp = shape(op, dts[0]).replace("--m 1 ", "--m 64 ") if arch_a[0] else shape(op, dts[0])  # M = 1: GEMVs'
        r = gc("gcore-gen", "--target", arch, "--op", op, "--dtype", dts[0],
               *shp.split(), "-o", "b.gcb", "-q")
        assert r.rc == 0, r
        with sqlite3.connect(gc.dir / "b.gcb") as c:
            assert tpl not in {t for (t,) in c.execute("SELECT template FROM code_objects")}
        return
    rng = random.Random(f"{tpl}-{op}-{arch}")
    forces = [tpl] + [tpl + ":" + ",".join(f"{k}={rng.choice(v)}" for k, v in params.items())
                      for _ in range(40 if params else 0)]  # a gate/up op's space is smaller
    # then, where those rarely meet the constraints (many parameters that
    # depend on each other), points nearer the defaults: each parameter
    # drawn or left at its default, half and half
    near = [[f"{k}={rng.choice(v)}" for k, v in params.items() if rng.random() < 0.5] for _ in range(40 if params else 0)]
    forces += [tpl + ":" + ",".join(p) for p in near if p]
    built, need = 0, (3 if arch == "sm_90a" and params else 1)  # the defaults (and 2 points on sm_90a)
    cons, known = constraints(tpl), dict(op_names(op), WARP=32, MAXT=1024)  # what every NVIDIA target sets
    for force in forces:
        if built >= need:
            break
        if not may_hold(cons, known | forced_params(force)):
            continue  # outside the space on its parameters alone: gcore-gen would refuse it
        r = gc("gcore-gen", "--target", arch, "--op", op, "--dtype", dts[0],
               *shape(op, dts[0], tpl).split(), "--force", force, "-o", "b.gcb", "-q")
        if force != tpl and r.rc != 0 and "constraint fails" in r.err:
            continue  # a random point outside the space
        assert r.rc == 0, r
        with sqlite3.connect(gc.dir / "b.gcb") as c:
            rows = c.execute("SELECT regs, spills, length(blob) FROM code_objects WHERE "
                             "template = ?", (tpl,)).fetchall()
        assert rows and all(b > 0 and regs is not None and regs > 0 for regs, _, b in rows), rows
        if force == tpl:
            assert all(sp == 0 for _, sp, _ in rows), f"{tpl} spills at its defaults: {rows}"
        built += 1
    assert built >= min(need, 2), f"{tpl}: no sampled point was in its space"


def stories_bundle(gc, targets, prefill):
    """gcore-gen --model stories260K for targets and prefill lengths (skipped
    where the shared data is absent): the bundle's path."""
    model = os.path.join(SHARED, "stories260K.bin")
    if not os.path.exists(model):
        pytest.skip(f"{model} is absent (set GCORE_SHARED_DATA)")
    r = gc("gcore-gen", "--model", model, "--target", targets, "--prefill", prefill, "-o", "m.gcb")
    assert r.rc == 0, r
    return gc.dir / "m.gcb"


@needs_nvrtc
def test_sm90_bundle_for_a_model(gc):
    with sqlite3.connect(stories_bundle(gc, "sm_90,cpu", "16,32")) as c:
        ops = {op for (op,) in c.execute("SELECT DISTINCT op FROM dispatch WHERE target='sm_90'")}
    # decode steps fold the norms into the GEMMs; 16 and 32 tokens do not;
    # every row count of gcore-serve's batched decode steps is served too
    assert ops == {"embed", "rmsnorm", "gemm", "rope_kv", "attention", "gemm_add", "gemm_swiglu", "argmax", "argmax_step",
                   "rmsnorm_gemm", "rmsnorm_gemm_swiglu", "rope_kv_batch", "attention_batch",
                   "rmsnorm_gemm_rope_kv"}


@needs_nvrtc
def test_pdl_declarations_reach_the_bundle(gc):
    """Templates that wait for their predecessor on the device (@pdl: the
    decode path's GEMVs, norms, rope, attention, argmax) are marked in the
    dispatch table, so the runtime may overlap their launches; the others
    (the prefill GEMMs here) are not."""
    with sqlite3.connect(stories_bundle(gc, "sm_90a", "64")) as c:
        rows = c.execute("SELECT template, pdl FROM dispatch").fetchall()
    pdl = {t for t, p in rows if p == 1}
    assert {"gemv_gpu", "attention_decode", "rope_kv_gpu",
            "argmax_gpu", "embed_gpu"} <= pdl, rows
    assert {t for t, p in rows if p == 0} and not {t for t, p in rows if p == 0} & pdl, rows


@needs_nvrtc
def test_tensormap_declarations_reach_the_bundle(gc):
    """gemm_wgmma's TMA variants carry their @tensormap lines into the
    dispatch table (the runtime builds the maps from them); the cp.async
    variant carries the same lines, switched off by their "if TMA"."""
    common = ["--target", "sm_90a", "--op", "gemm", "--dtype", "f16", "--m", "256", "--n", "512",
              "--k", "136", "-q"]
    r = gc("gcore-gen", *common, "--force", "gemm_wgmma:TMA=1,CLUSTER=2", "-o", "b.gcb")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        rows = c.execute("SELECT params, tmaps, grid FROM dispatch").fetchall()
    assert rows and all("TMA=1,CLUSTER=2" in p for p, _, _ in rows), rows
    assert {t for _, t, _ in rows} == {"A M K BM BK 2*BK if TMA\nB N K BN/CLUSTER BK 2*BK if TMA && "
                                       "PAIR == 1\nW 2*N K BN/2 BK 2*BK if TMA && PAIR == 2\n"
                                       "C M N 64 64 128 if EPI"}
    r = gc("gcore-gen", *common, "--force", "gemm_wgmma:TMA=0,CLUSTER=2", "-o", "c.gcb")
    assert r.rc != 0 and "constraint fails" in r.err and "TMA == 1 || CLUSTER == 1" in r.err, r


@needs_nvrtc
def test_short_decode_attention_merges_in_a_cluster(gc):
    """The decode attention's short-context bucket (k > 0) on sm_90a is
    attention_decode_mma merging its slices in a thread-block cluster
    (CL=2: the partials pushed, SPLIT=8, L2PF=2), for heads of 64 and of
    128 (where attention_decode serves it before sm_90); the long bucket
    keeps the ticket merge; sm_80 has no clusters: CL=1 is refused there.
    Nothing spills."""
    def served(target, *args):
        r = gc("gcore-gen", "--target", target, "--op", "attention", "--dtype", "f16", "--m", "1", "--h", "32",
               "--g", "8", *args, "-q", "-o", "b.gcb")
        assert r.rc == 0 and "spill" not in r.err, r
        with sqlite3.connect(gc.dir / "b.gcb") as c:
            return c.execute("SELECT template, params FROM code_objects").fetchall()
    for d in ("64", "128"):
        rows = served("sm_90a", "--d", d, "--k", "1024")
        assert rows == [("attention_decode_mma", rows[0][1])] and "SPLIT=8" in rows[0][1] and \
            rows[0][1].endswith(",L2PF=2,CL=2"), (d, rows)
        rows = [p for t, p in served("sm_90a", "--d", d) if t == "attention_decode_mma"]
        assert rows and all(p.endswith(",CL=0") for p in rows), (d, rows)
        rows = served("sm_80", "--d", d, "--k", "1024")
        assert rows and not any(p.endswith(",CL=1") or p.endswith(",CL=2") for t, p in rows), (d, rows)
    r = gc("gcore-gen", "--target", "sm_80", "--op", "attention", "--dtype", "f16", "--m", "1", "--h", "32", "--g",
           "8", "--d", "64", "--force", "attention_decode_mma:CL=1,SPLIT=8", "-q", "-o", "c.gcb")
    assert r.rc != 0 and "constraint fails" in r.err, r


@needs_nvrtc
def test_few_rows_take_tiles_of_64_rows(gc):
    """gemm_wgmma's conditional default (@defaults ... if M <= 128): a GEMM
    of 128 rows takes 64-row tiles with two consumers side by side, one of
    129 the two-consumer 128-row tile; gemm_swiglu (whose consumers need
    the whole W tile) keeps it; nothing spills."""
    want = {("gemm_add", 128): "BM=64,BN=128,CWN=2", ("gemm_add", 129): "BM=128,BN=256,CWN=1",
            ("gemm_swiglu", 128): "BM=128,BN=256,CWN=1"}
    for (op, m), params in want.items():
        r = gc("gcore-gen", "--target", "sm_90a", "--op", op, "--dtype", "bf16", "--m", str(m), "--n", "4096",
               "--k", "4096", "-q", "-o", "b.gcb")
        assert r.rc == 0 and "spill" not in r.err, r
        with sqlite3.connect(gc.dir / "b.gcb") as c:
            rows = c.execute("SELECT params FROM dispatch WHERE m_lo = ?", (m,)).fetchall()
            res = c.execute("SELECT spills FROM code_objects").fetchall()
        assert rows and all(p.startswith(params) for p, in rows), (op, m, rows)
        assert res and all(sp == 0 for sp, in res), res


@needs_nvrtc
def test_decode_gemvs_stream_through_the_bulk_ring(gc):
    """On sm_90 the untuned decode GEMVs are gemv_bulk's, each op at its
    measured defaults (bench/RESULTS.md, session 29): rows of 4096 or more
    in 8 KB copies (KC=4096, two stages), of 2048 to 4095 in 4 KB copies
    (three stages), shorter rows at the declared KC=1024; the gate/up pair
    in four stages of two rows a warp; the QKV's RoPE pairs four warps a
    block in 4 KB copies; none spills. The 8B and 1B shapes, f16 and bf16
    ((M, N, K[, H, G, D]) per op)."""
    want = [("rmsnorm_gemm", (1, 6144, 4096), "RS=8,KC=4096,STAGES=2"),
            ("gemm_add", (1, 2048, 8192), "RS=8,KC=4096,STAGES=2"),
            ("rmsnorm_gemm", (1, 3072, 2048), "RS=8,KC=2048,STAGES=3"),
            ("gemm_add", (1, 4096, 1024), "RS=8,KC=1024,STAGES=8"),
            ("rmsnorm_gemm_swiglu", (1, 14336, 4096), "RS=8,KC=1024,STAGES=4"),
            ("gemm_swiglu", (1, 8192, 2048), "RS=8,KC=1024,STAGES=4"),
            ("rmsnorm_gemm_rope_kv", (1, 6144, 4096, 32, 8, 128), "RS=4,KC=2048,STAGES=4"),
            ("rmsnorm_gemm_rope_kv", (1, 3072, 2048, 32, 8, 64), "RS=4,KC=2048,STAGES=4")]
    for op, shape, params in want:
        for dt in ("f16", "bf16"):
            r = gc("gcore-gen", "--target", "sm_90a", "--op", op, "--dtype", dt,
                   *problem_args(op, shape), "-q", "-o", "b.gcb")
            assert r.rc == 0 and "spill" not in r.err, r
            with sqlite3.connect(gc.dir / "b.gcb") as c:
                rows = c.execute("SELECT template, params FROM dispatch WHERE m_lo <= 1").fetchall()
                res = c.execute("SELECT spills FROM code_objects").fetchall()
            assert rows == [("gemv_bulk", params + ",BPS=1,EARLY=1")], (op, shape, dt, rows)
            assert res and all(sp == 0 for sp, in res), res


@needs_nvrtc
@pytest.mark.parametrize("op,tpl", [("gemm", "gemm_wgmma"), ("gemm_swiglu", "gemm_wgmma")])
def test_staged_epilogue_only_where_c_rows_fit_a_map(gc, op, tpl):
    """The copy-engine epilogue (EPI=1, the default) maps C, whose rows must
    be whole 16-byte chunks: at N = 512 the default serves, at N = 4100 the
    @applies line sends the problem to the nearest variant that stores from
    registers (EPI=0), which takes no C map."""
    for n, epi in ((512, "EPI=1"), (4100, "EPI=0")):
        r = gc("gcore-gen", "--target", "sm_90a", "--op", op, "--dtype", "f16", "--m", "256",
               "--n", str(n), "--k", "136", "-q", "-o", "b.gcb")
        assert r.rc == 0, r
        with sqlite3.connect(gc.dir / "b.gcb") as c:
            rows = c.execute("SELECT params, tmaps FROM dispatch WHERE template = ?", (tpl,)).fetchall()
        assert rows and all(epi in p for p, _ in rows), rows
        assert all(("C M N 64 64 128 if EPI" in t) for _, t in rows), rows


NVCC = next((p for p in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc") if p and os.path.exists(p)), None)
needs_nvcc = pytest.mark.skipif(not NVCC, reason="nvcc not installed (the CUDA toolkit's ptxas log is read)")

# A non-wgmma read of an accumulator between a wgmma and the wait that
# completes it: ptxas then serializes every wgmma of the kernel (C7514)
SERIALIZED = r'''#include <stdint.h>
extern "C" __global__ void k(float *o, uint64_t a, uint64_t b, int n) {
  float d[32];
  for (int i = 0; i < 32; i++) d[i] = 0.0f;
  for (int it = 0; it < n; it++) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {REGS}, %32, %33, 1, 1, 1, 0, 0;\n"
                 : OUTS : "l"(a), "l"(b));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    o[it] = d[it % 32];
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  for (int i = 0; i < 32; i++) o[i] += d[i];
}
'''.replace("REGS", ",".join(f"%{i}" for i in range(32))).replace(
    "OUTS", ", ".join(f'"+f"(d[{i}])' for i in range(32)))


def ptxas_log(src):
    """ptxas's verbose log of compiling CUDA source file src for sm_90a."""
    import subprocess
    r = subprocess.run([NVCC, "-arch=sm_90a", "-cubin", "-Xptxas", "-v", "-o", os.devnull, str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stderr + r.stdout


@pytest.fixture(scope="session")
def planted_is_named(tmp_path_factory):
    """The planted kernel SERIALIZED compiles with C7514 in ptxas's log: the
    log names a serialized wgmma (once a worker, for every case below)."""
    src = tmp_path_factory.mktemp("planted") / "planted.cu"
    src.write_text(SERIALIZED)
    assert "C7514" in ptxas_log(src)


@needs_nvcc
@pytest.mark.parametrize("force,op,dtype,dims", [
    ("gemm_wgmma", "gemm", "f16", "--m 512 --n 4096 --k 4096"),
    ("gemm_wgmma", "gemm_add", "bf16", "--m 128 --n 4096 --k 4096"),
    ("gemm_wgmma", "gemm_swiglu", "f16", "--m 512 --n 14336 --k 4096"),
    ("gemm_wgmma:BN=128,SK=4", "gemm_add", "f16", "--m 128 --n 4096 --k 4096"),
    ("attention_wgmma", "attention", "f16", "--m 512 --h 32 --g 8 --d 128"),
    ("attention_wgmma", "attention", "bf16", "--m 512 --h 32 --g 8 --d 64"),
    ("attention_wgmma:OVL=1", "attention", "f16", "--m 512 --h 32 --g 8 --d 128"),
    ("attention_wgmma:OVL=1", "attention", "bf16", "--m 512 --h 32 --g 8 --d 64"),
    ("attention_wgmma:PP=1", "attention", "f16", "--m 512 --h 32 --g 8 --d 128"),
    ("attention_wgmma:OVL=1,PP=1", "attention", "bf16", "--m 512 --h 32 --g 8 --d 64")])
def test_wgmma_stays_in_flight(gc, tmp_path, planted_is_named, force, op, dtype, dims):
    """The wgmma families, at their defaults and at attention_wgmma's overlap
    and turns,
    compile without ptxas serializing their warpgroup MMAs (C7514: a
    non-wgmma read of an accumulator inside a wgmma pipeline stage, which
    ptxas reports only as an info line and which the results cannot show):
    gcore-gen's generated source through nvcc's ptxas. The planted kernel
    SERIALIZED shows that the log names it (planted_is_named: the same
    nvcc and flags for every case, so checked once a worker)."""
    cache = tmp_path / "cache"
    r = gc("gcore-gen", "--target", "sm_90a", "--op", op, "--dtype", dtype, *dims.split(), "--force", force,
           "--cache", cache, "-o", "b.gcb", "-q")
    assert r.rc == 0, r
    srcs = sorted((cache / "src").glob("*.cu"))
    assert srcs, "gcore-gen compiled nothing"
    for s in srcs:
        log = ptxas_log(s)
        assert "C7514" not in log, f"{force} {op} {dtype}: wgmma serialized: {log}"
