"""gcore as a library on the GPU (issue 20), through the Python connector
(python/gcore, libgcore.so by ctypes): the torch custom ops against
torch.matmul and an fp64 reference, on PyTorch's current stream (a side
stream, and a CUDA graph that captures the launch and replays it on new
inputs), torch.compile over the ops, fallbacks to torch counted; and a
transformers LlamaForCausalLM whose nn.Linear layers are swapped for
gcore-backed ones giving the same greedy tokens as the stock model.

Needs torch (and transformers) with a GPU, libgcore.so built (make), NVRTC
for the kernels built on demand; run by `make test-gpu` with the python
that has torch (PYTHON=python3 where /usr/bin/python3 lacks it)."""
import os
import sys

import numpy as np
import pytest

import test_llama as TL
from conftest import ROOT

BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
pytestmark = pytest.mark.skipif(BACKEND not in ("cuda", "hip"),
                                reason="GPU suite: run with make test-gpu or make test-gpu-amd")
torch = pytest.importorskip("torch") if BACKEND in ("cuda", "hip") else None

os.environ.setdefault("GCORE_LIB", os.path.join(ROOT, "lib", "libgcore.so.1"))
sys.path.insert(0, os.path.join(ROOT, "python"))

ULP = {"f16": 2.0 ** -10, "bf16": 2.0 ** -7}
SUB = {"f16": 2.0 ** -24, "bf16": 2.0 ** -133}
TD = {}


@pytest.fixture(scope="module")
def gp(tmp_path_factory):
    """gcore.pytorch with kernels built on demand from template defaults (a
    database that does not exist), into a cache of this module's own."""
    import gcore.pytorch as gp
    d = tmp_path_factory.mktemp("api")
    os.environ["GCORE_CACHE"] = str(d / "cache")
    gp.configure(db=str(d / "none.db"))
    TD.update(f16=torch.float16, bf16=torch.bfloat16)
    yield gp
    gp.configure()


def fresh_counts(gp):
    gp.reset_fallbacks()
    return gp.stats()["gcore"].get("cuda:0" if BACKEND == "cuda" else "hip:0", {}).get("calls", 0)


def calls(gp):
    return gp.stats()["gcore"]["cuda:0" if BACKEND == "cuda" else "hip:0"]["calls"]


def check_close(got, ref, absref, k, dt, what):
    """|got - ref| <= ulp(dt)·|ref| + k·2⁻²⁴·Σ|a·b| + subnormal spacing, as the
    case table's GEMM tolerance; ref and absref in fp64."""
    got = got.double()
    tol = ULP[dt] * ref.abs() + k * 2.0 ** -24 * absref + SUB[dt]
    bad = (got - ref).abs() > tol
    assert torch.isfinite(got).all(), f"{what}: non-finite output"
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {got.numel()} elements out of tolerance, "
                           f"worst |err|/tol {float(((got - ref).abs() / tol).max()):.3g}")


def operands(m, n, k, dt, pair=1, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.rand(m, k, device="cuda", generator=g) * 2 - 1).to(TD[dt])
    b = (torch.rand(pair * n, k, device="cuda", generator=g) * 2 - 1).to(TD[dt])
    return a, b


SHAPES = [(1, 1024, 4096), (5, 96, 200), (64, 1024, 4096), (300, 4096, 1024), (1, 14336, 4096)]


@pytest.mark.parametrize("dt", ["f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_gemm_op_against_matmul(gp, dt, shape):
    m, n, k = shape
    before = fresh_counts(gp)
    a, b = operands(m, n, k, dt)
    y = torch.ops.gcore.gemm(a, b)
    ref, absref = a.double() @ b.double().t(), a.double().abs() @ b.double().abs().t()
    check_close(y, ref, absref, k, dt, f"gcore::gemm {dt} {shape} vs fp64")
    # and torch.matmul in the same dtype, which rounds as differently as allowed
    check_close(y, torch.matmul(a, b.t()).double(), 2 * absref, 2 * k, dt, "gcore::gemm vs torch.matmul")
    assert y.dtype == a.dtype and y.shape == (m, n)
    assert gp.stats()["fallback"] == {} and calls(gp) == before + 1


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_epilogues_and_fused_norms(gp, dt):
    m, n, k = 7, 256, 512
    fresh_counts(gp)
    a, b = operands(m, n, k, dt, seed=1)
    _, w = operands(m, n, k, dt, pair=2, seed=2)
    norm = (torch.rand(k, device="cuda") + 0.5).to(TD[dt])
    a64, b64, w64 = a.double(), b.double(), w.double()
    ab, absab = a64 @ b64.t(), a64.abs() @ b64.abs().t()

    c0 = operands(m, n, n, dt, seed=3)[0]
    c = c0.clone()
    torch.ops.gcore.gemm_add(a, b, c)
    check_close(c, c0.double() + ab, absab + c0.double().abs(), k + 2, dt, "gemm_add")

    silu = torch.nn.functional.silu
    g, u = a64 @ w64[:n].t(), a64 @ w64[n:].t()
    s = torch.ops.gcore.gemm_swiglu(a, w)
    slack = (a64.abs() @ w64[:n].abs().t()) * u.abs() * 1.1 + silu(g).abs() * (a64.abs() @ w64[n:].abs().t())
    check_close(s, silu(g) * u, slack, k + 8, dt, "gemm_swiglu")

    xn = a64 * torch.rsqrt(a64.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.double()
    r = torch.ops.gcore.rmsnorm_gemm(a, norm, b, 1e-5)
    check_close(r, xn @ b64.t(), xn.abs() @ b64.abs().t(), 2 * k + 8, dt, "rmsnorm_gemm")
    gn, un = xn @ w64[:n].t(), xn @ w64[n:].t()
    rs = torch.ops.gcore.rmsnorm_gemm_swiglu(a, norm, w, 1e-5)
    slack = (xn.abs() @ w64[:n].abs().t()) * un.abs() * 1.1 + silu(gn).abs() * (xn.abs() @ w64[n:].abs().t())
    check_close(rs, silu(gn) * un, slack, 2 * k + 8, dt, "rmsnorm_gemm_swiglu")
    assert gp.stats()["fallback"] == {}


def test_runs_on_the_current_stream(gp):
    """On a side stream the op reads what that stream wrote just before and
    its result is there for the next op of the stream; inside a CUDA graph
    capture its launch is captured (it went to the capturing stream) and a
    replay computes from new inputs."""
    a, b = operands(64, 512, 1024, "f16", seed=4)
    torch.ops.gcore.gemm(a, b)  # build and verify outside the capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(20):  # enqueued back to back: any race shows as a wrong sum
            x = a * (i + 1)
            y = torch.ops.gcore.gemm(x, b)
            z = y.float().sum()
    torch.cuda.current_stream().wait_stream(s)
    want = float(((a.double() * 20) @ b.double().t()).sum())
    assert abs(float(z) - want) <= 1e-2 * abs(want) + 1.0, (float(z), want)

    static_a = a.clone()
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.ops.gcore.gemm(static_a, b)  # warm-up on the capture's stream
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(g):
        out = torch.ops.gcore.gemm(static_a, b)
    static_a.copy_(a * -3)
    g.replay()
    torch.cuda.synchronize()
    ref = (a.double() * -3) @ b.double().t()
    check_close(out, ref, ((a.double() * 3).abs() @ b.double().abs().t()), 1024, "f16", "graph replay")


def test_compile(gp):
    """torch.compile traces the ops through their fake implementations."""
    a, b = operands(16, 256, 512, "bf16", seed=5)
    f = torch.compile(lambda x, w: torch.ops.gcore.gemm(x, w) * 2, fullgraph=True)
    y = f(a, b)
    ref = 2 * (a.double() @ b.double().t())
    check_close(y, ref, 2 * (a.double().abs() @ b.double().abs().t()), 512, "bf16", "compiled")


def test_fallbacks_are_counted_and_right(gp):
    fresh_counts(gp)
    a = torch.rand(3, 40, device="cuda", dtype=torch.float64)
    b = torch.rand(24, 40, device="cuda", dtype=torch.float64)
    y = torch.ops.gcore.gemm(a, b)  # no fp64 kernels: torch computes it
    assert torch.allclose(y, a @ b.t())
    e = torch.empty(0, 40, device="cuda", dtype=torch.float16)
    assert torch.ops.gcore.gemm(e, b.half()).shape == (0, 24)
    assert gp.stats()["fallback"] == {"dtype": 1, "empty": 1}
    a16, b16 = operands(4, 64, 128, "f16", seed=6)
    y = torch.ops.gcore.gemm(a16.t().contiguous().t(), b16[:, :])  # strided input: copied, not a fallback
    check_close(y, a16.double() @ b16.double().t(), a16.double().abs() @ b16.double().abs().t(), 128, "f16",
                "strided")
    assert gp.stats()["fallback"] == {"dtype": 1, "empty": 1}


# ---- a transformers Llama with its linear layers swapped --------------------------------

def tiny_model(outdir, dtype, cfg):
    """A tiny model whose greedy continuation has no near-ties by the fp64
    reference (as tests/gpu/test_gpu_llama.py picks them)."""
    for seed in range(200):
        TL.write_tiny(outdir, seed, dtype=dtype, **cfg)
        ref = TL.reference(outdir)
        if np.min(TL.top2_margin(ref.logits[len(TL.PROMPT) - 1:])) >= 0.01 and len(set(ref.ids)) >= 6:
            return ref
    pytest.fail(f"no seed gives a model without near-ties for {cfg}")


MODELS = {"llama3_gqa": TL.CONFIGS["llama3_gqa"], "tied": TL.CONFIGS["tied"],
          "wide": dict(dim=256, hidden_dim=704, n_layers=2, n_heads=4, n_kv_heads=2, vocab=512,
                       rope_theta=500000.0)}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_swapped_llama_same_greedy_tokens(gp, tmp_path, kind, dtype):
    from transformers import LlamaForCausalLM
    path = tiny_model(str(tmp_path / "model"), dtype, MODELS[kind]).path
    model = LlamaForCausalLM.from_pretrained(path, dtype=TD[dtype]).cuda().eval()
    inp = torch.tensor([TL.PROMPT], device="cuda")
    gen = dict(max_new_tokens=TL.N_DECODE, min_new_tokens=TL.N_DECODE, do_sample=False,
               eos_token_id=None, pad_token_id=0)
    before = fresh_counts(gp)
    with torch.no_grad():
        stock = model.generate(inp, **gen)[0, len(TL.PROMPT):].tolist()
        q = model.model.layers[0].self_attn.q_proj
        swapped = gp.swap_linear(model)
        n_linear = 7 * MODELS[kind]["n_layers"] + 1
        assert len(swapped.names) == n_linear, swapped.names
        assert model.model.layers[0].self_attn.q_proj.weight is q.weight  # shared, not copied
        ours = model.generate(inp, **gen)[0, len(TL.PROMPT):].tolist()
        swapped.restore()
        assert model.model.layers[0].self_attn.q_proj is q
    TL.assert_same_ids(ours, stock, f"{kind} {dtype}: swapped vs stock transformers")
    st = gp.stats()
    # every linear of the prefill and of each decode step ran on gcore
    assert calls(gp) - before >= n_linear * TL.N_DECODE, st
    assert st["fallback"] == {}, st
