"""GGUF models and --quantize through the three tools, checked against the
independent fp64 numpy reference (llama_ref.py) computing on the weights as
stored: a GGUF file's tensors dequantized by ggufq.py (Q and K in llama.cpp's
adjacent-pairs order), or a Hugging Face / llama2.c model's matrices
quantized and dequantized by ggufq.py (llama.cpp's reference quantizers,
which gcore's C quantizers match byte for byte: test_gguf_quant.py).

Quantized weights stay in their block formats and run through the quantized
kernels (gemv_q_cpu, gemm_q_cpu, embed_q_cpu), which dequantize exactly as
base/quant.h says, so the tolerances are test_llama.py's: logits within 1e-4
relative per row, greedy ids identical, on models chosen (by seed) so that no
greedy step has its top two logits within 1e-3.

The model is Llama-3 shaped (GQA: 4 query heads, 2 kv heads of 64) with
rows of 256 and 512 elements, whole blocks of every format."""
import json
import os
import re
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import assert_clean_error, run_tool  # noqa: E402
import chat_ref as C  # noqa: E402
import ggufq as Q  # noqa: E402
import llama_ref as R  # noqa: E402
import tinygguf as G  # noqa: E402
import tinymodel as TM  # noqa: E402
from test_llama import (GREEDY, N_DECODE, PROMPT, TIE_MARGIN, TOL, assert_logits_close,  # noqa: E402
                        assert_same_ids, generate, reference, rel_rows, top2_margin, without_extras)

CFG = dict(dim=256, hidden_dim=512, n_layers=2, n_heads=4, n_kv_heads=2, vocab=320, max_seq=128)
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", G.MIXED] + sorted(Q.FOREIGN_TYPES)
# the bundle a model's CPU recipe needs: dense models share one per float
# dtype (F32 for F32 files); a quantized model's problems name its formats
RECIPE_DTYPE = {"F16": "F16", "BF16": "BF16", "F32": "F32", **{t: "F16" for t in Q.FOREIGN_TYPES}}


def recipe_key(qtype):
    return RECIPE_DTYPE.get(qtype, qtype)


def tiefree(path, write, prompt=PROMPT, n=N_DECODE, min_distinct=8):
    """write(path, seed) for seeds 0, 1, ... until the reference on the file
    has no greedy step within TIE_MARGIN and at least min_distinct ids."""
    for seed in range(50):
        write(path, seed)
        ref = reference(path, prompt, n)
        if np.min(top2_margin(ref.logits[len(prompt) - 1:])) >= TIE_MARGIN and len(set(ref.ids)) >= min_distinct:
            ref.seed = seed
            return ref
    raise AssertionError(f"no tie-free seed for {path}")


def gguf_writer(qtype, **kw):
    cfg = dict(CFG, **kw)
    scale = cfg.pop("embed_scale", 1.0)
    return lambda path, seed: G.write_model(path, qtype=qtype, seed=seed, embed_scale=scale, **cfg)


class Bundles:
    """One CPU bundle per recipe dtype, built from the first model that needs it
    (decode steps and passes of up to 8 tokens: the prompts here are 7)."""

    def __init__(self, d, cache_dir):
        self.d, self.env, self.made = d, {"GCORE_CACHE": cache_dir}, {}

    def get(self, model, key, *flags):
        if key not in self.made:
            path = os.path.join(self.d, f"{key}.gcb")
            r = run_tool("gcore-gen", "--model", model, "--target", "cpu", "--prefill", 8, *flags, "-o", path,
                         cwd=self.d, env=self.env)
            assert r.rc == 0, r
            self.made[key] = path
        return self.made[key]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, cache_dir):
    return Bundles(str(tmp_path_factory.mktemp("bundles")), cache_dir)


def check_run(gc, ref, bundle, *flags, what=""):
    ids, logits, _ = generate(gc, ref.path, bundle, PROMPT, N_DECODE, *GREEDY, *flags, vocab=ref.cfg.vocab_size)
    T = len(PROMPT)
    assert_logits_close(logits[:T], ref.logits[:T], TOL, f"{what} prefill")
    assert_same_ids(ids, ref.ids, f"{what} (seed {ref.seed}) greedy")
    assert_logits_close(logits, ref.logits, TOL, f"{what} prefill + decode")


# ------------------------------------------------------------ GGUF files

@pytest.mark.parametrize("qtype", TYPES)
def test_gguf_matches_reference(gc, bundles, qtype):
    """Every tensor type (and llama.cpp's Q4_K_M-like mix of Q4_K and Q6_K),
    untied: prefill logits of a 7-token prompt and 32 greedy steps match
    the reference on the stored weights."""
    ref = tiefree(str(gc.dir / f"m_{qtype}.gguf"), gguf_writer(qtype))
    bundle = bundles.get(ref.path, recipe_key(qtype))
    check_run(gc, ref, bundle, what=f"GGUF {qtype}")


@pytest.mark.parametrize("qtype", ["F16", "Q8_0", "Q4_K"])
def test_gguf_tied_matches_reference(gc, bundles, qtype):
    """No output.weight: the classifier is token_embd.weight."""
    ref = tiefree(str(gc.dir / "tied.gguf"), gguf_writer(qtype, tied=True, embed_scale=0.05))
    _, ts = G.read_gguf(ref.path)
    assert "output.weight" not in ts and ref.cfg.tied
    check_run(gc, ref, bundles.get(ref.path, recipe_key(qtype)), what=f"GGUF {qtype} tied")


QWEN_TENSOR = {"qwen2": "blk.1.attn_k.bias", "qwen3": "blk.1.attn_k_norm.weight"}


@pytest.mark.parametrize("arch,qtype", [("qwen2", "F32"), ("qwen2", "F16"), ("qwen2", "Q8_0"), ("qwen2", G.MIXED),
                                        ("qwen3", "F32"), ("qwen3", "BF16"), ("qwen3", "Q4_K")])
def test_qwen_gguf_matches_reference(gc, bundles, arch, qtype):
    """Architectures qwen2 (Qwen2 and 2.5's GGUF files: the llama layer with
    F32 biases on q, k and v, some large, as trained ones are) and qwen3
    (Qwen3's: each query and key head RMS-normalised before RoPE), Q and K
    rows not permuted (NEOX: RoPE rotates halves), every key under the
    architecture's name. The 7-token prefill (the fused norm), 32 greedy
    decode steps (the bias or norm between the QKV GEMV and rope) and a
    20-token prefill (the unfused GEMMs) match the reference; the same
    weights without their biases or norms do not, so they are applied."""
    ref = tiefree(str(gc.dir / f"{arch}_{qtype}.gguf"), gguf_writer(qtype, arch=arch))
    kv, ts = G.read_gguf(ref.path)
    assert kv["general.architecture"] == arch and QWEN_TENSOR[arch] in ts and ref.cfg.rope_layout == "halves"
    bundle = bundles.get(ref.path, f"{arch}-" + recipe_key(qtype))
    check_run(gc, ref, bundle, what=f"{arch} GGUF {qtype}")
    assert np.max(rel_rows(R.forward(without_extras(ref.w), ref.cfg, PROMPT), ref.logits[:len(PROMPT)])) > 1e-2
    long = [(11 * i + 5) % ref.cfg.vocab_size for i in range(20)]
    _, lp, _ = generate(gc, ref.path, bundle, long, 1, *GREEDY, vocab=ref.cfg.vocab_size)
    assert_logits_close(lp, R.forward(ref.w, ref.cfg, long), TOL, f"{arch} GGUF {qtype} 20-token prefill")


def test_qwen_gguf_without_its_tensors_is_refused(gc, tmp_path):
    """A qwen2 file lacking a bias, or a qwen3 file lacking a norm, names
    the tensor; a llama file holding biases names the first one it would
    ignore."""
    cfg = TM.make_config(**CFG, arch="qwen2")
    w = TM.random_weights(cfg)
    path = str(tmp_path / "nob.gguf")
    G.write_llama(path, cfg, {k: v for k, v in w.items() if k != "model.layers.1.self_attn.v_proj.bias"})
    assert_clean_error(run_tool("gcore-run", "-m", path, "--tokens", "1", "-n", "1", cwd=str(tmp_path)), "gcore-run",
                       "blk.1.attn_v.bias: tensor missing")
    llama = dict(cfg, model_type="llama", architectures=["LlamaForCausalLM"])
    G.write_llama(path, llama, w)
    assert_clean_error(run_tool("gcore-run", "-m", path, "--tokens", "1", "-n", "1", cwd=str(tmp_path)), "gcore-run",
                       "tensor 'blk.0.attn_q.bias' is not part of a llama model")
    cfg = TM.make_config(**CFG, arch="qwen3")
    w = TM.random_weights(cfg)
    G.write_llama(path, cfg, {k: v for k, v in w.items() if k != "model.layers.0.self_attn.k_norm.weight"})
    assert_clean_error(run_tool("gcore-run", "-m", path, "--tokens", "1", "-n", "1", cwd=str(tmp_path)), "gcore-run",
                       "blk.0.attn_k_norm.weight: tensor missing")


def test_gguf_llama3_rope_scaling(gc, bundles):
    """llama3 scaling as llama.cpp writes it (rope_freqs.weight, per-frequency
    factors): gcore matches the reference with those factors, and the factors
    reproduce Hugging Face's llama3 rescaling (the scaling matters here)."""
    ref = tiefree(str(gc.dir / "rope.gguf"), gguf_writer("F32", rope_scaling="llama3", rope_theta=500000.0))
    _, ts = G.read_gguf(ref.path)
    assert "rope_freqs.weight" in ts and ref.cfg.rope_factors is not None
    tokens = PROMPT + ref.ids[:-1]
    hf_cfg = R.Config(**{**ref.cfg.__dict__, "rope_factors": None, "rope_scaling": dict(TM.LLAMA3_SCALING)})
    hf_like = R.forward(ref.w, hf_cfg, tokens)
    assert np.max(rel_rows(hf_like, ref.logits)) < 1e-5     # the factors are llama3's scaling
    plain = R.forward(ref.w, R.Config(**{**ref.cfg.__dict__, "rope_factors": None}), tokens)
    assert np.max(rel_rows(plain, ref.logits)) > 1e-2      # and it changes the logits
    check_run(gc, ref, bundles.get(ref.path, "F32"), what="GGUF llama3 rope")


def test_gguf_linear_rope_scaling(gc, bundles):
    """Linear scaling as convert_hf_to_gguf writes it (rope.scaling.type
    linear, rope.scaling.factor): positions divided by the factor; gcore
    matches the reference, and the scaling matters here."""
    rs = {"rope_type": "linear", "factor": 4.0}
    ref = tiefree(str(gc.dir / "linear.gguf"), gguf_writer("F32", rope_scaling=rs))
    assert ref.cfg.rope_scaling == rs, ref.cfg
    plain = R.forward(ref.w, R.Config(**{**ref.cfg.__dict__, "rope_scaling": None}), PROMPT + ref.ids[:-1])
    assert np.max(rel_rows(plain, ref.logits)) > 1e-2
    check_run(gc, ref, bundles.get(ref.path, "F32"), what="GGUF linear rope")


def test_gguf_equals_hf_model(gc, bundles):
    """The same fp32 weights as a Hugging Face directory (rotate-halves Q/K)
    and as GGUF (llama.cpp's permuted pairs): the reference and gcore give
    the same ids, and gcore's logits agree within the tolerance."""
    ref = tiefree(str(gc.dir / "m.gguf"), gguf_writer("F32"))
    hf = str(gc.dir / "hf")
    TM.write_model(hf, seed=ref.seed, **CFG)
    w, cfg = R.load_hf(hf)
    assert np.max(rel_rows(R.forward(w, cfg, PROMPT), ref.logits[:len(PROMPT)])) < 1e-10
    bundle = bundles.get(ref.path, "F32")
    ids_g, lg, _ = generate(gc, ref.path, bundle, PROMPT, 16, *GREEDY, vocab=cfg.vocab_size)
    ids_h, lh, _ = generate(gc, hf, bundle, PROMPT, 16, *GREEDY, vocab=cfg.vocab_size)
    assert ids_g == ids_h == ref.ids[:16]
    assert_logits_close(lg, lh, TOL, "GGUF vs HF")


@pytest.mark.parametrize("version,alignment", [(2, None), (3, 1), (3, 64)])
def test_gguf_version_and_alignment(gc, bundles, version, alignment):
    """GGUF version 2, and general.alignment 1 (F32 data at odd offsets: gcore
    copies it) and 64."""
    def write(path, seed):
        cfg = TM.make_config(**CFG)
        G.write_llama(path, cfg, TM.random_weights(cfg, seed), qtype="F32", version=version, alignment=alignment)
    ref = tiefree(str(gc.dir / "v.gguf"), write)
    kv, _ = G.read_gguf(ref.path)
    assert kv.get("general.alignment") == alignment
    check_run(gc, ref, bundles.get(ref.path, "F32"), what=f"GGUF v{version} alignment {alignment}")


def test_gguf_text_prompt_uses_the_files_vocabulary(gc, bundles):
    """-p with a GGUF model needs no --tokenizer: the vocabulary in the file
    tokenizes it (the ids --tokenize gives for the same text, BOS first), and
    the run equals one fed those ids."""
    path = str(gc.dir / "v.gguf")
    G.write_model(path, qtype="Q8_0", seed=1, **CFG)
    bundle = bundles.get(path, "Q8_0")
    text = "the cat sat."          # at most 8 tokens: the bundle's longest pass
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", "--bos", input=text)
    assert r.rc == 0, r
    ids = [int(t) for t in r.out.split()]
    assert ids[0] == 1 and 3 < len(ids) <= 8 and max(ids) < CFG["vocab"], ids
    r = gc("gcore-run", "-m", path, "-b", bundle, "-p", text, "-n", 8, *GREEDY, "--json")
    assert r.rc == 0, r
    info = json_of(r)
    assert info["prompt_tokens"] == len(ids) and isinstance(info.get("text"), str), info
    by_ids, _, _ = generate(gc, path, bundle, ids, 8, *GREEDY)
    assert info["tokens"] == by_ids
    # the text continues the prompt's, as llama.cpp's and vLLM's do: a first
    # word keeps its space, so prompt + text decodes as the whole sequence
    whole = [i for i in ids[1:] + info["tokens"] if i > 2]  # no control tokens (0-2)
    r = gc("gcore-run", "--tokenizer", path, "--detokenize", input=" ".join(map(str, whole)))
    assert r.rc == 0 and r.out.startswith(text), r
    assert info["text"] == r.out[len(text):], (info["text"], r.out)
    # a text that must begin with a space (a regex asks for it): the first
    # token "▁c" prints it (before, the run printed "cat.": not the regex's text)
    r = gc("gcore-run", "-m", path, "-b", bundle, "-p", "the", "--regex", r" cat\.", "-n", 8, "--temp", "0",
           "--json")
    assert r.rc == 0 and json_of(r)["text"] == " cat.", r


def json_of(r):
    import json
    return json.loads(r.out)


def test_gguf_tune_and_gen(gc, bundles):
    """gcore-tune --model FILE.gguf tunes a quantized model's decode step (its
    Q4_K problems); gcore-gen --db then uses the winners and the tuned bundle
    runs the model as the reference does."""
    ref = tiefree(str(gc.dir / "q.gguf"), gguf_writer("Q4_K"), n=8, min_distinct=4)
    shape = ["--prefill", 8, "--batch", 1]
    r = gc("gcore-tune", "--model", ref.path, *shape, "--budget", 1, "--db", "t.db", "--min-time", "0.02",
           "--no-progress", timeout=600)
    assert r.rc == 0, r
    out = str(gc.dir / "tuned.gcb")
    r = gc("gcore-gen", "--model", ref.path, *shape, "--target", "cpu", "--db", "t.db", "-o", out)
    assert r.rc == 0, r
    m = re.search(r"(\d+) tuned", r.out)
    assert m and int(m.group(1)) > 0, r
    ids, logits, _ = generate(gc, ref.path, out, PROMPT, 8, *GREEDY, vocab=ref.cfg.vocab_size)
    assert_same_ids(ids, ref.ids, "tuned bundle")
    assert_logits_close(logits, ref.logits, TOL, "tuned bundle")


# ------------------------------------------------------------- --quantize

def quantized(w, qtype):
    """The reference's weights with the seven matrices of every layer stored
    as qtype (what gcore's --quantize does: embedding, classifier and norms
    keep their precision)."""
    out = dict(w)
    out["layers"] = [{k: (Q.roundtrip(qtype, v.astype(np.float32)).astype(np.float64) if v.ndim == 2 else v)
                      for k, v in L.items()} for L in w["layers"]]
    return out


def quantized_reference(path, qtype, prompt=PROMPT, n=N_DECODE):
    w, cfg = R.load(path)
    wq = quantized(w, qtype)
    ids = R.greedy(wq, cfg, prompt, n)
    ref = R.forward(wq, cfg, list(prompt) + ids[:-1])
    from test_llama import Ref
    return Ref(path, wq, cfg, ids, ref)


def tiefree_quantized(path, qtype, n=N_DECODE, min_distinct=8):
    """A Hugging Face fp16 model written to path for seeds 0, 1, ... until the
    reference on its matrices stored as qtype has no greedy step within
    TIE_MARGIN and at least min_distinct ids; that reference."""
    for seed in range(50):
        TM.write_model(path, seed=seed, dtype="f16", **CFG)
        ref = quantized_reference(path, qtype.upper(), n=n)
        if np.min(top2_margin(ref.logits[len(PROMPT) - 1:])) >= TIE_MARGIN and len(set(ref.ids)) >= min_distinct:
            ref.seed = seed
            return ref
    raise AssertionError(f"no tie-free seed for {path} as {qtype}")


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_k"])
def test_quantize_hf_matches_reference(gc, bundles, qtype):
    """--quantize on a Hugging Face fp16 model: gcore-gen and gcore-run with the
    flag; the reference quantizes with numpy's llama.cpp quantizers."""
    path = str(gc.dir / "hf")
    ref = tiefree_quantized(path, qtype)
    bundle = bundles.get(path, "hf-" + qtype, "--quantize", qtype)
    check_run(gc, ref, bundle, "--quantize", qtype, what=f"HF f16 --quantize {qtype}")
    # the quantization is not a no-op at this tolerance
    plain = R.forward(*R.load(path), PROMPT)
    assert np.max(rel_rows(plain, ref.logits[:len(PROMPT)])) > 10 * TOL


def test_quantize_tune_and_gen(gc):
    """gcore-tune --model DIR --quantize q4_k tunes the decode step that
    gcore-run --quantize q4_k runs: the problems of the layers' matrices name
    q4_k, and each was measured ok (verified against the fp64 reference on
    the dequantized blocks); gcore-gen --quantize q4_k --db builds its
    bundle from the winners alone, and that bundle runs the model (prompt
    and decode through decode steps: no prefill pass was tuned) as the
    reference on the quantized weights does."""
    import sqlite3
    path = str(gc.dir / "hf")
    ref = tiefree_quantized(path, "q4_k", n=8, min_distinct=4)
    shape = ["--quantize", "q4_k", "--prefill", "none", "--batch", 1]
    r = gc("gcore-tune", "--model", path, *shape, "--budget", 1, "--db", "t.db", "--min-time", "0.02",
           "--no-progress", timeout=600)
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        rows = c.execute("SELECT p.op, p.m, p.n, p.k, m.status, m.detail FROM measurements m "
                         "JOIN problems p ON p.id = m.problem_id WHERE p.tb = 'q4_k'").fetchall()
        won = c.execute("SELECT count(*) FROM winners w JOIN problems p ON p.id = w.problem_id "
                        "WHERE p.tb = 'q4_k'").fetchone()[0]
    D, F, hd = CFG["dim"], CFG["hidden_dim"], CFG["dim"] // CFG["n_heads"]
    qkv = (CFG["n_heads"] + 2 * CFG["n_kv_heads"]) * hd
    want = {("rmsnorm_gemm", qkv, D), ("gemm_add", D, D), ("rmsnorm_gemm_swiglu", F, D), ("gemm_add", D, F)}
    assert {(op, n, k) for op, m, n, k, *_ in rows} == want and {m for _, m, *_ in rows} == {1}, rows
    assert all(status == "ok" for *_, status, _ in rows) and won == len(want), (rows, won)
    out = str(gc.dir / "tuned.gcb")
    r = gc("gcore-gen", "--model", path, *shape, "--target", "cpu", "--db", "t.db", "-o", out)
    assert r.rc == 0, r
    m = re.search(r"(\d+) problems for cpu: (\d+) tuned, 0 defaults", r.out)
    assert m and m.group(1) == m.group(2), r
    ids, logits, _ = generate(gc, path, out, PROMPT, 8, *GREEDY, "--quantize", "q4_k", vocab=ref.cfg.vocab_size)
    assert_same_ids(ids, ref.ids, f"tuned --quantize q4_k bundle (seed {ref.seed})")
    assert_logits_close(logits, ref.logits, TOL, "tuned --quantize q4_k bundle")


def test_quantize_llama2c_matches_reference(gc, bundles):
    """--quantize q8_0 on a llama2.c checkpoint (rows of 32 and 64)."""
    path = str(gc.dir / "tiny.bin")
    for seed in range(50):
        TM.write_llama2c(path, dim=32, hidden_dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=128, seq_len=64,
                         tied=False, seed=seed)
        ref = quantized_reference(path, "Q8_0")
        if np.min(top2_margin(ref.logits[len(PROMPT) - 1:])) >= TIE_MARGIN and len(set(ref.ids)) >= 8:
            break
    ref.seed = seed
    bundle = bundles.get(path, "l2c", "--quantize", "q8_0")
    check_run(gc, ref, bundle, "--quantize", "q8_0", what="llama2.c --quantize q8_0")


@pytest.mark.parametrize("kind", ["gguf", "hf --quantize"])
def test_gguf_and_quantize_without_a_bundle(gc, kind):
    """gcore-run without -b builds the bundle for this device from the tuning
    database (none here: the templates' defaults) for the model as it runs:
    a Q4_0 GGUF file, or a Hugging Face model with --quantize q4_0."""
    if kind == "gguf":
        ref = tiefree(str(gc.dir / "q.gguf"), gguf_writer("Q4_0"), n=8, min_distinct=4)
        flags = []
    else:
        path = str(gc.dir / "hf")
        for seed in range(50):
            TM.write_model(path, seed=seed, dtype="bf16", **CFG)
            ref = quantized_reference(path, "Q4_0", n=8)
            if np.min(top2_margin(ref.logits[len(PROMPT) - 1:])) >= TIE_MARGIN and len(set(ref.ids)) >= 4:
                break
        flags = ["--quantize", "q4_0"]
    r = gc("gcore-run", "-m", ref.path, *flags, "--db", str(gc.dir / "none.db"), "--tokens",
           ",".join(map(str, PROMPT)), "-n", 8, *GREEDY, "--json")
    assert r.rc == 0, r
    assert "bundle" in r.err, r
    assert json_of(r)["tokens"] == ref.ids


@pytest.mark.parametrize("qtype", [G.MIXED])  # Q4_K and Q6_K matrices beside a dense stacked step
def test_dense_plan_matches_reference(gc, cache_dir, qtype):
    """The dense prefill plan (models/recipe.h): with --dequant-rows 16,
    prompts of 16 tokens and more dequantize each block-format layer matrix
    into the scratch (embed of all its rows) and run the dense GEMM on it;
    15 tokens still read the blocks. Both sides of the threshold match the
    reference (prefill logits of every row, then greedy decode), and the
    bundle records the plan and holds both plans' problems."""
    import sqlite3
    prompt = [(7 * i + 3) % CFG["vocab"] for i in range(24)]
    ref = tiefree(str(gc.dir / f"dense_{qtype}.gguf"), gguf_writer(qtype), prompt=prompt, n=8)
    bundle = str(gc.dir / f"dense_{qtype}.gcb")
    r = run_tool("gcore-gen", "--model", ref.path, "--target", "cpu", "--prefill", "8,24", "--dequant-rows", 16,
                 "-o", bundle, cwd=str(gc.dir), env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    with sqlite3.connect(bundle) as c:
        meta = dict(c.execute("SELECT key, value FROM meta").fetchall())
        embeds = {(n, k) for n, k in c.execute("SELECT n, k FROM dispatch WHERE op = 'embed' AND tb != 'f32'")}
        dense = {(op, n) for op, n in c.execute("SELECT op, n FROM dispatch WHERE tb = 'f32' AND op LIKE 'gemm%'")}
    assert meta["llama.deq_rows.cpu"] == "16" and meta["llama.deq_rows.gpu"] == "0", meta
    D, F, V = CFG["dim"], CFG["hidden_dim"], CFG["vocab"]
    # the gathers (n = K, k = rows): w2 [D, F], w13 [2F, D] (and wo, wqkv [., D] where not mixed)
    assert (F, D) in embeds and (D, 2 * F) in embeds, embeds
    assert ("gemm_swiglu", F) in dense and ("gemm_add", D) in dense, dense
    for T in (15, 16, 24):
        ids, logits, _ = generate(gc, ref.path, bundle, prompt[:T], 8, *GREEDY, vocab=ref.cfg.vocab_size)
        want = ref.logits[:T] if T == len(prompt) else R.forward(ref.w, ref.cfg, prompt[:T])
        assert_logits_close(logits[:T], want, TOL, f"{qtype} prefill of {T} (dense plan: {T >= 16})")
        if T == len(prompt):
            assert_same_ids(ids, ref.ids, f"{qtype} greedy after a dense-plan prefill")


def test_q4_k_m_fallbacks_for_odd_rows(gc, cache_dir):
    """A Q4_K_M file of a model whose rows are not whole 256-element blocks
    (dim 160, five heads of 32), as llama.cpp writes it: the matrices whose
    rows are 160 long fall back to Q5_0 (for Q4_K) and Q8_0 (for Q6_K);
    ffn_down (rows of 512) keeps Q4_K/Q6_K. gcore makes the Q5_0 tensors F16
    at load and says so in one line; its logits match the reference."""
    path = str(gc.dir / "odd_q4km.gguf")
    ref = tiefree(path, gguf_writer(G.MIXED, dim=160, n_heads=5, n_kv_heads=5))
    _, ts = G.read_gguf(path)
    types = {n: t for n, (t, _, _) in ts.items() if not n.endswith("norm.weight")}
    assert set(types.values()) == {"Q5_0", "Q8_0", "Q4_K", "Q6_K"}, types
    assert types["blk.0.ffn_down.weight"] == "Q4_K" and types["blk.1.ffn_down.weight"] == "Q6_K", types
    assert types["output.weight"] == "Q8_0" and types["blk.0.attn_q.weight"] == "Q5_0", types
    bundle = str(gc.dir / "odd_q4km.gcb")
    r = run_tool("gcore-gen", "--model", path, "--target", "cpu", "--prefill", 8, "-o", bundle, cwd=str(gc.dir),
                 env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    n_q5 = sum(t == "Q5_0" for t in types.values())
    r = gc("gcore-run", "-m", path, "-b", bundle, "--backend", "cpu", "--tokens", "1,5,9", "-n", 2, "--temp", 0)
    assert r.rc == 0, r
    assert f"gcore-run: {path}: {n_q5} tensors in Q5_0 (formats gcore has no kernels for) made F16 at load" in r.err, r
    check_run(gc, ref, bundle, what="Q4_K_M with Q5_0/Q8_0 fallbacks")


def test_quantized_weights_stay_quantized(gc, bundles):
    """The bundle of a Q4_K_M file (tinygguf.MIXED, llama.cpp's mix: of the
    two layers, layer 0's attn_v and ffn_down are Q4_K and layer 1's Q6_K;
    attn_output and gate/up Q4_K, the LM head Q6_K) computes on the blocks,
    layer by layer in each layer's types: the embedding gather reads the
    Q4_K table, every matrix step names a block type, all through the
    quantized templates. Layer 0's QKV, all Q4_K, is one stacked Q4_K
    projection; layer 1's, whose parts differ (Q6_K attn_v beside Q4_K
    attn_q/attn_k), is split (models/recipe.h): Q|K on its Q4_K rows and V
    on its Q6_K rows, their outputs joined by concat where a pass has rows
    of its own. No step reads a dense copy of a matrix."""
    import sqlite3
    path = str(gc.dir / "mix.gguf")
    _, _, layout = G.write_model(path, qtype=G.MIXED, seed=0, **CFG)
    types = layout["types"]
    assert (types["blk.0.attn_v.weight"], types["blk.1.attn_v.weight"]) == ("Q4_K", "Q6_K"), types
    assert (types["blk.0.ffn_down.weight"], types["blk.1.ffn_down.weight"]) == ("Q4_K", "Q6_K"), types
    with sqlite3.connect(bundles.get(path, G.MIXED)) as c:
        # the CPU recipe's problems (gcore-gen's workload has the GPUs' f16 ones too)
        rows = set(c.execute("SELECT op, tb, n, template FROM dispatch WHERE ta = 'f32'").fetchall())
    D, F, V = CFG["dim"], CFG["hidden_dim"], CFG["vocab"]
    by = {}
    for op, tb, n, tpl in rows:
        by.setdefault((op, n), set()).add((tb, tpl))
    assert {tb for tb, _ in by[("embed", D)]} == {"q4_k"}
    assert {tb for tb, _ in by[("gemm_add", D)]} == {"q4_k", "q6_k"}      # attn_output; ffn_down by layer
    assert {tb for tb, _ in by[("rmsnorm_gemm_swiglu", F)]} == {"q4_k"}
    assert {tb for tb, _ in by[("rmsnorm_gemm", V)]} == {"q6_k"}          # the LM head
    hd = D // CFG["n_heads"]
    qk, v = (CFG["n_heads"] + CFG["n_kv_heads"]) * hd, CFG["n_kv_heads"] * hd
    assert {tb for tb, _ in by[("rmsnorm_gemm", qk + v)]} == {"q4_k"}    # layer 0: one Q4_K stack
    assert {tb for tb, _ in by[("rmsnorm_gemm", qk)]} == {"q4_k"}        # layer 1: attn_q|attn_k
    assert {tb for tb, _ in by[("rmsnorm_gemm", v)]} == {"q6_k"}         # layer 1: attn_v
    assert {tb for tb, _ in by[("concat", qk + v)]} == {"f32"}            # the rows joined (t > 1)
    matrix = {"gemm", "gemm_add", "rmsnorm_gemm", "gemm_swiglu", "rmsnorm_gemm_swiglu", "embed"}
    dense = {(op, n, tb) for (op, n), v in by.items() if op in matrix for tb, _ in v if not tb.startswith("q")}
    assert not dense, dense
    quant_tpls = {tpl for key, v in by.items() for tb, tpl in v if tb.startswith("q")}
    assert quant_tpls <= {"gemv_q_cpu", "gemm_q_cpu", "embed_q_cpu"}, quant_tpls


EOG = ["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"]


@pytest.mark.parametrize("emit,keys", [
    ("<|eot_id|>", {}),                                                 # no eot key: by its name
    ("<|eom_id|>", {"tokenizer.ggml.eom_token_id": "<|eom_id|>"}),
    ("<|eom_id|>", {}),
    ("<|end_of_text|>", {"tokenizer.ggml.eos_token_id": "<|eot_id|>"}),  # Llama 3.1 Instruct's eos
    ("a", {}),                                                           # no end: runs to -n
])
def test_gguf_end_of_generation_tokens(gc, bundles, emit, keys):
    """A model whose greedy token is always emit stops after it where emit
    ends a generation as llama.cpp's set says (eos, eot and eom by key, and
    those names in the vocabulary), with a text prompt and with --tokens
    (the model's own stop ids, no tokenizer), and runs to -n otherwise."""
    cfg = TM.make_config(**CFG)
    w = TM.random_weights(cfg, 0)
    toks, _, types = G.vocab(cfg["vocab_size"])
    for i, name in enumerate(EOG):
        toks[len(toks) - 3 + i], types[len(toks) - 3 + i] = name, 3
    tok = toks.index(emit)
    for k in w:  # layers add nothing, every embedding is e0, only row tok of the head reads it
        if "o_proj" in k or "down_proj" in k:
            w[k][:] = 0
    w["model.embed_tokens.weight"][:] = 0
    w["model.embed_tokens.weight"][:, 0] = 1
    w["model.norm.weight"][:] = 1
    w["lm_head.weight"][:] = 0
    w["lm_head.weight"][tok, 0] = 1
    path = str(gc.dir / "eog.gguf")
    G.write_llama(path, cfg, w, extra_kvs=[("tokenizer.ggml.tokens", "arr:str", toks),
                                           ("tokenizer.ggml.token_type", "arr:i32", types)] +
                  [(k, "u32", toks.index(v)) for k, v in keys.items()])
    bundle = bundles.get(path, "F32")
    for prompt in (["-p", "the cat"], ["--tokens", "1,5,9"]):
        r = gc("gcore-run", "-m", path, "-b", bundle, *prompt, "-n", 6, "--temp", "0", "--json")
        assert r.rc == 0, r
        assert json_of(r)["tokens"] == [tok] * (1 if emit in EOG else 6), (prompt, r)


def ids_of(gc, path, text):
    """gcore's ids of text, control tokens matched (llama.cpp's tokenizing of
    a rendered chat template: text between control tokens tokenized apart)."""
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", input=text)
    assert r.rc == 0, r
    return [int(x) for x in r.out.split()]


def chat_gguf(gc, kind, v3=False, user=()):
    """A tiny GGUF model whose chat_template is the real template of kind
    (chat_ref), its control tokens in the vocabulary (v3: [INST] and [/INST]
    as control tokens, as Mistral v3 has them; user: more user-defined
    tokens). Qwen's: a context of LONG_CTX (its own system message is about 100
    of this vocabulary's tokens)."""
    cfg = TM.make_config(**dict(CFG, max_seq=LONG_CTX.get(kind, CFG["max_seq"])))
    toks, _, types = G.vocab(cfg["vocab_size"])
    controls = ["[INST]", "[/INST]"] if v3 else C.CONTROLS[kind]
    added = controls + C.USER_TOKENS.get(kind, []) + list(user)  # control tokens, then user-defined ones
    if added:
        toks[-len(added):], types[-len(added):] = added, [3] * len(controls) + [4] * (len(added) - len(controls))
    path = str(gc.dir / f"{kind}{'-v3' if v3 else ''}.gguf")
    G.write_llama(path, cfg, TM.random_weights(cfg, 0), extra_kvs=[
        ("tokenizer.ggml.tokens", "arr:str", toks), ("tokenizer.ggml.token_type", "arr:i32", types),
        ("tokenizer.chat_template", "str", C.ALL[kind])])
    return path, toks


LONG_CTX = {"qwen2_5": 2048, "qwen2_5_math": 2048, "qwen3": 2048, "qwen3_thinking": 2048, "llama3_1": 2048,
            "llama3_2": 2048, "mistral_v3": 2048, "mistral_tekken": 2048}  # the tests' tools are about 900-1300 of this vocabulary's tokens


def chat_bundle(bundles, path, kind):
    """The CPU bundle of chat_gguf's model of kind (one per context)."""
    return bundles.get(path, f"F32-ctx{LONG_CTX[kind]}" if kind in LONG_CTX else "F32")


def rendered_ids(gc, path, kind, messages, **kwargs):
    """The reference: the template rendered by Jinja (kwargs: what else it
    reads) and tokenized as llama.cpp does, BOS first where the template
    does not write it (the tokenizer adds it to a prompt)."""
    extra = [] if "bos_token" in C.ALL[kind] else [1]
    return extra + ids_of(gc, path, C.render(C.ALL[kind], messages, **kwargs))


SYSTEM_LAST = ("mistral_v3", "mistral_tekken")
NO_SYSTEM = ("mistral",)  # refused: v0.1 has none
INST = ("llama2", "mistral", "mistral_v1", "mistral_v3", "mistral_tekken")  # user and assistant in turn, or the template raises
END_TEXT = {"llama3": "<|eot_id|>", "llama3_1": "<|eot_id|>", "llama3_2": "<|eot_id|>", "chatml": "<|im_end|>", "qwen2_5": "<|im_end|>", "qwen3": "<|im_end|>",
            "qwen3_thinking": "<|im_end|>", "deepseek": "<｜end▁of▁sentence｜>",
            "deepseek_r1": "<｜end▁of▁sentence｜>", "deepseek_v3": "<｜end▁of▁sentence｜>"}


@pytest.mark.parametrize("kind", sorted(C.TEMPLATES))
def test_gguf_chat_templates_as_jinja_renders_them(gc, bundles, kind):
    """--chat through each chat template a GGUF file names (Llama 2,
    Mistral, Llama 3, ChatML, Zephyr, DeepSeek with and without R1's
    <think> opened, detected from the template's markers):
    the first turn's ids are the template rendered by Jinja (as Hugging
    Face's apply_chat_template) and tokenized as llama.cpp tokenizes it; the
    second turn's are what the rendered conversation adds after the reply's
    end. The user's text keeps a leading space where the template keeps it.
    Mistral has no system role."""
    path, toks = chat_gguf(gc, kind)
    bundle = chat_bundle(bundles, path, kind)
    system = [] if kind in NO_SYSTEM else [{"role": "system", "content": "be brief"}]
    args = [] if kind in NO_SYSTEM else ["--system", "be brief"]
    r = gc("gcore-run", "-m", path, "-b", bundle, "--chat", *args, "-n", 3, *GREEDY, "--json",
           input=" hi cat\nthe end\n")
    assert r.rc == 0, r
    (p1, g1), (p2, _) = [(t["prompt_ids"], t["tokens"]) for t in map(json.loads, r.out.splitlines())]
    first = system + [{"role": "user", "content": " hi cat"}]
    assert p1 == rendered_ids(gc, path, kind, first), (p1, C.render(C.TEMPLATES[kind], first))
    # Mistral v3's and Tekken's put the system message with the last user
    # message; gcore-run --chat keeps it with the first, where its cache has it
    hist = first[1:] if kind in SYSTEM_LAST else first
    whole = C.render(C.TEMPLATES[kind], hist + [{"role": "assistant", "content": "QQQ"},
                                                {"role": "user", "content": "the end"}])
    end_text = END_TEXT.get(kind, "</s>")
    after = whole[whole.index(end_text, whole.index("QQQ")) + len(end_text):]
    end = toks.index(end_text)
    closed = [g1[-1]] if g1[-1] in (end, 2) else [g1[-1], end]
    assert p2 == closed + ids_of(gc, path, after), (p2, after)
    if kind in NO_SYSTEM:
        r = gc("gcore-run", "-m", path, "-b", bundle, "--chat", "--system", "be brief", "-n", 2, *GREEDY, input="hi\n")
        assert_clean_error(r, "gcore-run", "the Mistral chat template has no system role")


@pytest.mark.parametrize("kind", ["qwen2_5", "qwen2_5_math"])
def test_gguf_chatml_default_system_message(gc, bundles, kind):
    """Qwen2.5's templates write a system message of their own where a
    conversation has none: gcore-run --chat without --system and the
    server's chat endpoint without a system message put it first, its text
    as Jinja reads the template's literal (the Math model's has an escaped
    backslash), as the rendered template has it; a given system message
    replaces it."""
    from test_serve import Server
    path, _ = chat_gguf(gc, kind)
    bundle = chat_bundle(bundles, path, kind)
    r = gc("gcore-run", "-m", path, "-b", bundle, "--chat", "-n", 2, *GREEDY, "--json", input="hi cat\n")
    assert r.rc == 0, r
    u = [{"role": "user", "content": "hi cat"}]
    want = rendered_ids(gc, path, kind, u)
    assert json.loads(r.out.splitlines()[0])["prompt_ids"] == want, C.render(C.ALL[kind], u)
    assert C.render(C.ALL[kind], u).startswith("<|im_start|>system\n" + ("Please" if "math" in kind else "You are Qwen"))
    srv = Server(path, bundle, "--parallel", 1)
    try:
        for msgs in (u, [{"role": "system", "content": "be brief"}] + u):
            status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1,
                                                                "return_token_ids": True})
            assert status == 200, text
            assert json.loads(text)["choices"][0]["prompt_token_ids"] == rendered_ids(gc, path, kind, msgs), msgs
    finally:
        assert srv.stop()[0] == 0


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_thinking", "qwen2_5"])
def test_gguf_enable_thinking_false(gc, bundles, kind):
    """enable_thinking false: Qwen3's hybrid template writes an empty
    <think></think> block after every generation prompt (gcore-run --chat
    --no-think, its second turn too; the server's chat_template_kwargs), as
    Jinja renders it with the argument; templates that do not read it
    (Qwen3-Thinking-2507's, Qwen2.5's) render as without it. The server
    refuses other template arguments and a non-boolean, and --no-think
    without --chat is an error."""
    from test_serve import Server
    path, toks = chat_gguf(gc, kind)
    bundle = chat_bundle(bundles, path, kind)
    u = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi cat"}]
    want = rendered_ids(gc, path, kind, u, enable_thinking=False)
    assert (want != rendered_ids(gc, path, kind, u)) == (kind == "qwen3"), kind
    r = gc("gcore-run", "-m", path, "-b", bundle, "--chat", "--system", "be brief", "--no-think", "-n", 2, *GREEDY,
           "--json", input="hi cat\nthe end\n")
    assert r.rc == 0, r
    (p1, g1), (p2, _) = [(t["prompt_ids"], t["tokens"]) for t in map(json.loads, r.out.splitlines())]
    assert p1 == want, C.render(C.ALL[kind], u, enable_thinking=False)
    # the second turn: what the conversation adds after the first reply's end
    whole = C.render(C.ALL[kind], u + [{"role": "assistant", "content": "QQQ"},
                                       {"role": "user", "content": "the end"}], enable_thinking=False)
    after = whole[whole.index("<|im_end|>", whole.index("QQQ")) + len("<|im_end|>"):]
    end = toks.index("<|im_end|>")
    closed = [g1[-1]] if g1[-1] in (end, 2) else [g1[-1], end]
    assert p2 == closed + ids_of(gc, path, after), (p2, after)
    srv = Server(path, bundle, "--parallel", 1)
    try:
        status, _, text = srv.post("/v1/chat/completions", {"messages": u, "max_tokens": 1, "return_token_ids": True,
                                                             "chat_template_kwargs": {"enable_thinking": False}})
        assert status == 200, text
        assert json.loads(text)["choices"][0]["prompt_token_ids"] == want
        for kw, msg in (({"enable_thinking": "no"}, "must be"), ({"tools": []}, "'tools' is not read"), ([], "an object")):
            status, _, text = srv.post("/v1/chat/completions", {"messages": u, "max_tokens": 1,
                                                                 "chat_template_kwargs": kw})
            assert status == 400 and msg in json.loads(text)["error"]["message"], text
    finally:
        assert srv.stop()[0] == 0
    r = gc("gcore-run", "-m", path, "-b", bundle, "--no-think", "-p", "hi", "-n", 1)
    assert_clean_error(r, "gcore-run", "--no-think goes with --chat")


@pytest.mark.parametrize("kind", ["llama3_1", "llama3_2", "qwen2_5"])
def test_gguf_date_string(gc, bundles, kind):
    """chat_template_kwargs' date_string (an apply_chat_template argument):
    Llama 3.1's and 3.2's header says that date instead of today's or the
    template's own, as Jinja renders it with the argument (a pinned prompt
    does not change from day to day); a template that does not read it
    (Qwen2.5's) is unchanged; a date that is not a string is a 400."""
    from test_serve import Server
    path, _ = chat_gguf(gc, kind)
    srv = Server(path, chat_bundle(bundles, path, kind), "--parallel", 1)
    u = [{"role": "user", "content": "hi"}]
    try:
        want = rendered_ids(gc, path, kind, u, date_string="01 Jan 2030")
        assert (want != rendered_ids(gc, path, kind, u)) == kind.startswith("llama"), kind
        for route in ("/v1/chat/completions", "/tokenize"):
            status, _, text = srv.post(route, {"messages": u, "max_tokens": 1, "return_token_ids": True,
                                               "chat_template_kwargs": {"date_string": "01 Jan 2030"}})
            assert status == 200, text
            body = json.loads(text)
            assert (body["tokens"] if route == "/tokenize" else body["choices"][0]["prompt_token_ids"]) == want
        status, _, text = srv.post("/v1/chat/completions", {"messages": u, "chat_template_kwargs": {"date_string": 1}})
        assert status == 400 and "date_string" in json.loads(text)["error"]["message"], text
    finally:
        assert srv.stop()[0] == 0


def test_gguf_mistral_v3_control_tokens(gc, bundles):
    """Mistral v0.1's template over a vocabulary with [INST] and [/INST] as
    control tokens: them by id, the text between them (the template's
    spaces around the user's text included) tokenized as one piece, as
    llama.cpp tokenizes the rendered template."""
    path, toks = chat_gguf(gc, "mistral", v3=True)
    r = gc("gcore-run", "-m", path, "-b", bundles.get(path, "F32"), "--chat", "-n", 3, *GREEDY, "--json",
           input="  hi cat\nthe end\n")
    assert r.rc == 0, r
    (p1, g1), (p2, _) = [(t["prompt_ids"], t["tokens"]) for t in map(json.loads, r.out.splitlines())]
    inst, end = toks.index("[INST]"), toks.index("[/INST]")
    u = [{"role": "user", "content": "  hi cat"}]
    assert p1 == rendered_ids(gc, path, "mistral", u) == [1, inst] + ids_of(gc, path, "   hi cat ") + [end], p1
    assert p2 == [g1[-1], 2, inst] + ids_of(gc, path, " the end ") + [end], p2


@pytest.mark.parametrize("kind", sorted(C.TEMPLATES))
def test_gguf_chat_templates_through_the_server(gc, bundles, kind):
    """gcore-serve's chat endpoint: the prompt ids of a conversation are the
    Jinja rendering of the model's template, tokenized as llama.cpp does,
    the assistant's earlier replies included (in the [INST] templates one
    piece with the [/INST] before them); user messages in a row and
    assistant messages in a row in the templates that give every message a
    header (Llama 3, ChatML, Zephyr), and 400 for them from the [INST]
    ones, as their templates raise. Mistral v3's and Tekken's put the system
    message with the last user message. DeepSeek's cut an earlier reply's
    reasoning (what its last </think> ends)."""
    from test_serve import Server
    path, _ = chat_gguf(gc, kind)
    srv = Server(path, chat_bundle(bundles, path, kind), "--parallel", 1)
    try:
        system = [] if kind in NO_SYSTEM else [{"role": "system", "content": " be brief "}]
        u, a = [{"role": "user", "content": " hi cat "}], [{"role": "assistant", "content": " A file. "}]
        u2 = [{"role": "user", "content": "the end"}]
        wide = [{"role": "user", "content": "\u3000\u00a0hi\u2009cat\x1f\u00a0"}]  # Python's strip() takes these
        convs = [system + u, system + u + a + u2, u + a + u2 + a + u, wide]
        if kind in ("llama3", "llama3_1", "llama3_2", "chatml", "zephyr", "deepseek", "deepseek_r1", "deepseek_v3", "qwen2_5", "qwen3",
                    "qwen3_thinking"):
            convs += [u + u2, u + a + a + u2]
        if kind.startswith(("deepseek", "qwen3")):  # reasoning cut; <think> (a user-defined token) in a message
            r = [{"role": "assistant", "content": "<think>\nso</think>\n\n</think> A file."}]
            convs += [system + u + r + [{"role": "user", "content": "why <think> now"}]]
        for msgs in convs:
            status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1,
                                                                "return_token_ids": True})
            assert status == 200, (msgs, text)
            got = json.loads(text)["choices"][0]["prompt_token_ids"]
            assert got == rendered_ids(gc, path, kind, msgs), (msgs, C.render(C.TEMPLATES[kind], msgs))
        if kind in INST:
            for msgs in (u + u2, u + a + a + u2):
                with pytest.raises(Exception):
                    C.render(C.TEMPLATES[kind], msgs)
                status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
                assert status == 400 and "in a row" in text, text
    finally:
        assert srv.stop()[0] == 0


def chain_gguf(gc, kind, chain, name, user=(), ctx=CFG["max_seq"]):
    """chat_gguf's model for kind whose greedy next token after chain[i]
    is chain[i + 1] (and after the last, chain[0]): the layers add
    nothing, token chain[i]'s embedding is unit vector i, and the head's
    row chain[i + 1] reads it. user: chat_gguf's; ctx: its context."""
    cfg = TM.make_config(**dict(CFG, max_seq=ctx))
    path, toks = chat_gguf(gc, kind, user=user)
    ids = [t if isinstance(t, int) else toks.index(t) for t in chain]
    assert len(set(ids)) == len(ids), chain
    w = TM.random_weights(cfg, 0)
    for k in w:
        if "o_proj" in k or "down_proj" in k:
            w[k][:] = 0
    w["model.embed_tokens.weight"][:] = 0
    w["model.norm.weight"][:] = 1
    w["lm_head.weight"][:] = 0
    for i, t in enumerate(ids):
        w["model.embed_tokens.weight"][t, i] = 1
        w["lm_head.weight"][ids[(i + 1) % len(ids)], i] = 1
    out = str(gc.dir / name)
    types = [3 if t in C.CONTROLS[kind] else 4 if t in C.USER_TOKENS.get(kind, []) + list(user) else ty
             for t, ty in zip(toks, G.vocab(cfg["vocab_size"])[2])]
    G.write_llama(out, cfg, w, extra_kvs=[("tokenizer.ggml.tokens", "arr:str", toks),
                                          ("tokenizer.ggml.token_type", "arr:i32", types),
                                          ("tokenizer.chat_template", "str", C.TEMPLATES[kind])])
    return out


# tools as a client offers them: floats Python writes in each of its forms,
# non-ASCII and control characters, an empty parameter list
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Météo \"now\"\tin\u0001 a city 🌦",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Zürich", None, True, False]},
        "days": {"type": "integer", "minimum": 1, "maximum": 2 ** 62, "multipleOf": 1.0},
        "w": {"type": "number", "examples": [0.1, 1e-05, 1e16, 123.456, -0.0, 5e-324, 1.7976931348623157e308, 2.5e-07,
                                             1e-4, 100.0, 1e15, 12345678901234567890.0]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "now", "parameters": {}}}]
# (ids of 9 characters: Mistral's templates raise for others)
CALL1 = {"id": "call00001", "type": "function", "function": {"name": "get_weather",
                                                             "arguments": {"city": "Zürich", "days": 2, "w": 0.1}}}
CALL2 = {"id": "call00002", "type": "function", "function": {"name": "now", "arguments": {}}}


def as_client(msgs):
    """msgs as a client sends them: each call's arguments as JSON text (the
    reference renders them parsed, as vLLM and llama.cpp pass them to the
    template)."""
    out = []
    for m in msgs:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [dict(c, function=dict(c["function"], arguments=json.dumps(c["function"]["arguments"])))
                               for c in m["tool_calls"]]
        out.append(m)
    return out


@pytest.mark.parametrize("kind", ["qwen2_5", "qwen3", "qwen3_thinking", "llama3_1", "llama3_2", "mistral_v3",
                                  "mistral_tekken"])
def test_gguf_tools_in_the_prompt(gc, bundles, kind):
    """Tools through Qwen's, Llama 3.1's and Mistral's templates: the
    request's tools (each as Hugging Face's tojson writes it: keys in order,
    floats as Python's repr, non-ASCII as it is; Llama's with indent 4;
    Mistral's its own way) in the system message (Qwen's), the first user
    message (Llama's, whose system message starts "Environment: ipython")
    or an [AVAILABLE_TOOLS] block before the last (Mistral's), an
    assistant's earlier calls (with and without text; Qwen3's reasoning
    kept after the last query, from the text's <think> block or
    reasoning_content) and the tools' results (a user turn of
    <tool_response> blocks; Llama's ipython role, the result as a JSON
    string; Mistral's [TOOL_RESULTS]): the prompt ids are the Jinja
    rendering tokenized as llama.cpp does, through the chat endpoint and
    /tokenize. tool_choice "none" leaves the tools out; "required", a named
    function, malformed tools or arguments, two calls in a Llama reply and
    a Mistral call id not of 9 characters (their templates raise), and
    tools for a template without them are 400."""
    from test_serve import Server
    path, _ = chat_gguf(gc, kind)
    srv = Server(path, chat_bundle(bundles, path, kind), "--parallel", 1)
    sys_, u = {"role": "system", "content": " be brief "}, {"role": "user", "content": " weather? "}
    llama = kind.startswith("llama")
    a2 = {"role": "assistant", "content": None, "tool_calls": [CALL1] if llama else [CALL1, CALL2]}
    r1, r2 = {"role": "tool", "tool_call_id": "call00001", "content": "{\"t\": 21}"}, \
        {"role": "tool", "tool_call_id": "call00002", "content": "noon"}
    convs = [[sys_, u], [u], [sys_, u, a2, r1, r2],
             [u, {"role": "assistant", "content": "Let me see.", "tool_calls": [CALL1]}, r1,
              {"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "thanks"}],
             [u, {"role": "assistant", "content": "<think>\nplan\n</think>\n\nLet me see.", "tool_calls": [CALL1]}, r1],
             [u, {"role": "assistant", "content": "", "reasoning_content": "\nplan b\n", "tool_calls": [CALL2]}, r2],
             [u, {"role": "user", "content": "<tool_response>\nx\n</tool_response>"}]]
    mistral = kind.startswith("mistral")
    if mistral:  # user and assistant in turn
        convs = convs[:-1]
    try:
        for tools in (TOOLS, None):
            for msgs in convs:
                kw = {"tools": tools} if tools else {}
                want = rendered_ids(gc, path, kind, msgs, **kw)
                for route in ("/v1/chat/completions", "/tokenize"):
                    status, _, text = srv.post(route, dict({"messages": as_client(msgs), "max_tokens": 1,
                                                            "return_token_ids": True}, **kw))
                    assert status == 200, (msgs, text)
                    body = json.loads(text)
                    got = body["tokens"] if route == "/tokenize" else body["choices"][0]["prompt_token_ids"]
                    assert got == want, (route, msgs, C.render(C.ALL[kind], msgs, **kw))
        status, _, text = srv.post("/v1/chat/completions", {"messages": [u], "tools": TOOLS, "tool_choice": "none",
                                                            "max_tokens": 1, "return_token_ids": True})
        assert status == 200 and json.loads(text)["choices"][0]["prompt_token_ids"] == rendered_ids(gc, path, kind, [u])
        bad_call = [u, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}, r1]
        for body, msg in (({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among the tools"),
                          ({"tool_choice": "required", "response_format": {"type": "json_object"}},
                           "not with response_format"),
                          ({"tool_choice": "required", "ignore_eos": True}, "not with ignore_eos"),
                          ({"tool_choice": "required", "tools": []}, "needs tools"),
                          ({"tool_choice": 3}, "'tool_choice' must be"),
                          ({"tools": [{"type": "function", "function": {"description": "x"}}]}, "tools[0] must be"),
                          ({"tools": [{"type": "code"}]}, "tools[0] must be"), ({"tools": {}}, "'tools' must be"),
                          ({"messages": bad_call}, "the arguments are not JSON"),
                          ({"messages": [u, {"role": "assistant", "tool_calls": [{"id": 1}]}, r1]}, "tool_calls[0]"),
                          ({"messages": [r1]}, "a tool message before any user message"),
                          *([({"messages": [u, dict(a2, tool_calls=[CALL1, CALL2]), r1]}, "single tool-calls")]
                            if llama else []),
                          *([({"messages": [u, dict(a2, tool_calls=[dict(CALL1, id="c1")]), r1]}, "length 9"),
                             ({"messages": [u, a2, dict(r1, tool_call_id="c1")]}, "length 9")] if mistral else []),
                          ({"functions": [{"name": "f"}]}, "give 'tools'")):
            status, _, text = srv.post("/v1/chat/completions", dict({"messages": [u], "tools": TOOLS, "max_tokens": 1},
                                                                    **body))
            assert status == 400 and msg in json.loads(text)["error"]["message"], (body, text)
    finally:
        assert srv.stop()[0] == 0
    path, _ = chat_gguf(gc, "llama3")
    srv = Server(path, chat_bundle(bundles, path, "llama3"), "--parallel", 1)
    try:
        status, _, text = srv.post("/v1/chat/completions", {"messages": [u], "tools": TOOLS, "max_tokens": 1})
        assert status == 400 and "has no tool calls" in text, text
        status, _, text = srv.post("/v1/chat/completions", {"messages": [u, a2, r1], "max_tokens": 1})
        assert status == 400 and "has no tool calls" in text, text
        status, _, text = srv.post("/v1/chat/completions", {"messages": [u], "tools": TOOLS, "tool_choice": "none",
                                                            "max_tokens": 1})
        assert status == 200, text
    finally:
        assert srv.stop()[0] == 0


def test_gguf_tool_calls_in_the_reply(gc, bundles):
    """A Qwen2.5 model that writes text, then two <tool_call> blocks (the
    second one token), then <|im_end|>: with tools offered, the message's
    content is the text and its tool_calls the two calls (ids, "type":
    "function", the arguments as JSON text), finish_reason "tool_calls",
    whole and streamed alike (the stream's calls arrive as each block
    closes; text that may still become "<tool_call>" is held back); a block
    that holds no call stays text; cut by max_tokens inside a block, the
    block is read as far as it came (vLLM's hermes parser reads an unclosed
    block too): a call where its JSON is whole, finish_reason "length" (the
    reply was cut, whatever calls it holds); without tools (or with
    tool_choice "none") it is all content."""
    from test_serve import Server, sse
    nl, call1 = "<0x0A>", '\n{"name": "get_weather", "arguments": {"city": "Zürich", "w": 1e-05}}\n'
    block2 = '\n \n<tool_call>\n{"name": "now"}\n</tool_call>\n'
    junk = '<tool_call>{"oops": 1}</tool_call>'
    user = ["Let me see.", call1, block2, junk, "<to", "ol_c", "all>"]  # the first <tool_call> in three tokens
    chain = [nl, "Let me see.", "<to", "ol_c", "all>", call1, "</tool_call>", block2, "<|im_end|>"]
    path = chain_gguf(gc, "qwen2_5", chain, "qwen-tools.gguf", user=user, ctx=2048)
    bundle = bundles.get(path, "F32-ctx2048")
    text1 = "Let me see.<tool_call>" + call1 + "</tool_call>" + block2
    calls = [("get_weather", '{"city": "Zürich", "w": 1e-05}'), ("now", "{}")]
    msgs = [{"role": "user", "content": "weather?"}]
    srv = Server(path, bundle, "--parallel", 1)
    try:
        for extra, n, content, want_calls in (({"tools": TOOLS}, 16, "Let me see.", calls),
                                              ({"tools": TOOLS}, 5, "Let me see.", calls[:1]),
                                              ({"tools": TOOLS}, 4, "Let me see.<tool_call>", []),
                                              ({"tools": TOOLS}, 3, "Let me see.<tool_c", []),
                                              ({}, 16, text1, []),
                                              ({"tools": TOOLS, "tool_choice": "none"}, 16, text1, [])):
            req = dict({"messages": msgs, "max_tokens": n, "temperature": 0}, **extra)
            status, _, text = srv.post("/v1/chat/completions", req)
            assert status == 200, text
            ch = json.loads(text)["choices"][0]
            m = ch["message"]
            got = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls", [])]
            assert (m["content"], got) == (content, want_calls), (extra, n, m)
            assert ch["finish_reason"] == ("length" if n < 16 else "tool_calls" if want_calls else "stop"), ch
            for i, c in enumerate(m.get("tool_calls", [])):
                assert c["index"] == i and c["type"] == "function" and re.fullmatch(r"call_[0-9a-f]{16}", c["id"]), c
            status, _, text = srv.post("/v1/chat/completions", dict(req, stream=True))
            assert status == 200, text
            events = sse(text)
            deltas = [c["delta"] for ev in events for c in ev["choices"]]
            got_c = "".join(d.get("content") or "" for d in deltas)
            got_calls = [(t["function"]["name"], t["function"]["arguments"]) for d in deltas
                         for t in d.get("tool_calls", [])]
            assert (got_c, got_calls) == (content, want_calls), (extra, n, deltas)
            assert [t["index"] for d in deltas for t in d.get("tool_calls", [])] == list(range(len(want_calls)))
            assert not any("<tool" in (d.get("content") or "") for d in deltas) or not want_calls, deltas
            assert events[-1]["choices"][0]["finish_reason"] == ch["finish_reason"], events[-1]
    finally:
        assert srv.stop()[0] == 0
    path = chain_gguf(gc, "qwen2_5", [nl, junk, "<|im_end|>"], "qwen-junk.gguf", user=user, ctx=2048)
    srv = Server(path, bundles.get(path, "F32-ctx2048"), "--parallel", 1)
    try:
        status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "temperature": 0})
        ch = json.loads(text)["choices"][0]
        assert (ch["message"]["content"], ch["message"].get("tool_calls"), ch["finish_reason"]) == (junk, None, "stop")
    finally:
        assert srv.stop()[0] == 0


def check_reply_calls(bundles, path, content, calls):
    """gcore-serve over chain model path, asked with tools: the reply's
    content and (name, arguments) calls, whole and streamed, and its
    finish_reason."""
    from test_serve import Server, sse
    srv = Server(path, bundles.get(path, "F32-ctx2048"), "--parallel", 1)
    try:
        req = {"messages": [{"role": "user", "content": "weather?"}], "tools": TOOLS, "temperature": 0,
               "max_tokens": 8}
        status, _, text = srv.post("/v1/chat/completions", req)
        assert status == 200, text
        ch = json.loads(text)["choices"][0]
        got = [(c["function"]["name"], c["function"]["arguments"]) for c in ch["message"].get("tool_calls", [])]
        assert (ch["message"]["content"], got) == (content, calls), ch
        assert ch["finish_reason"] == ("tool_calls" if calls else "stop"), ch
        status, _, text = srv.post("/v1/chat/completions", dict(req, stream=True))
        deltas = [c["delta"] for ev in sse(text) for c in ev["choices"]]
        assert "".join(d.get("content") or "" for d in deltas) == (content or ""), deltas
        assert [(t["function"]["name"], t["function"]["arguments"]) for d in deltas
                for t in d.get("tool_calls", [])] == calls, deltas
    finally:
        assert srv.stop()[0] == 0


def test_gguf_llama3_tool_calls_in_the_reply(gc, bundles):
    """A Llama 3.2 model whose reply (after the prompt's last "\n") is one
    user-defined token, then <|eot_id|>: with tools offered, a reply that
    starts (after blanks) with "{" is its calls, JSON objects {"name",
    "parameters"} (or "arguments"), ";" between them allowed, as vLLM's
    llama3_json parser reads them; one that is no such JSON, or that starts
    otherwise, is content; whole and streamed alike (a reply that starts
    with "{" waits for its end)."""
    cases = [('{"name": "get_weather", "parameters": {"city": "Zürich", "w": 1e16}}', None,
              [("get_weather", '{"city": "Zürich", "w": 1e+16}')]),
             (' {"name": "now", "arguments": {}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}', None,
              [("now", "{}"), ("get_weather", '{"city": "Oslo"}')]),
             ('{"name": "now", "parameters": {}} trailing', '{"name": "now", "parameters": {}} trailing', []),
             ('{"city": "Oslo"}', '{"city": "Oslo"}', []),
             ('It is {"name": "now"}', 'It is {"name": "now"}', [])]
    for i, (out, content, calls) in enumerate(cases):
        path = chain_gguf(gc, "llama3_2", ["<0x0A>", out, "<|eot_id|>"], f"llama-tools{i}.gguf", user=[out], ctx=2048)
        check_reply_calls(bundles, path, content, calls)


def test_gguf_mistral_tool_calls_in_the_reply(gc, bundles):
    """A Mistral v0.3 model whose reply (after the prompt's [/INST]) is
    [TOOL_CALLS] (a control token: no text), then one user-defined token,
    then </s>: with tools offered, a reply that starts with [TOOL_CALLS] is
    its calls, a JSON array of {"name", "arguments"} as vLLM's mistral
    parser reads it, or content where it is not; a reply without it is
    content, however it starts; whole and streamed alike."""
    cases = [(True, ' [{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "abcdefghi"}, {"name": "now", '
                    '"arguments": {}}]', None, [("get_weather", '{"city": "Oslo"}'), ("now", "{}")]),
             (True, ' [{"city": "Oslo"}]', '[{"city": "Oslo"}]', []),
             (False, '[{"name": "now", "arguments": {}}]', '[{"name": "now", "arguments": {}}]', [])]
    for i, (calls_token, out, content, calls) in enumerate(cases):
        chain = ["[/INST]"] + (["[TOOL_CALLS]"] if calls_token else []) + [out, "</s>"]
        path = chain_gguf(gc, "mistral_v3", chain, f"mistral-tools{i}.gguf", user=[out], ctx=2048)
        check_reply_calls(bundles, path, content, calls)


# how each template's calls begin in the reply's text (Mistral's after its [TOOL_CALLS] control token)
CALL_TEXT = {"qwen2_5": '<tool_call>\n{"name": "', "llama3_2": '{"name": "', "mistral_v3": '[{"name": "'}


@pytest.mark.parametrize("kind", sorted(CALL_TEXT))
def test_gguf_forced_tool_calls(gc, bundles, kind):
    """tool_choice "required" and a named function (the reply constrained
    to calls as the template spells them: models/jsonmode.c) over a
    random-weight model of each tools template, greedy and sampled: each
    reply is calls its parser reads back (finish_reason "tool_calls", names
    among the tools, the named one where one is named, arguments JSON
    objects; one call where a function is named, one or more under
    "required" where the template writes several), or, cut by max_tokens
    (finish_reason "length"), the calls so far and text that begins one;
    streamed the same. With the reply's end token
    favoured (logit_bias +100) the reply ends after its first call, where
    it may; banned, "required" goes on to a second call where the template
    writes several (Qwen's blocks; Mistral's array, unless the model closes
    it; streamed, the same calls) and stops after one with
    parallel_tool_calls false (and always for Llama 3.1's single JSON
    call). A model left to "auto" calls nothing here."""
    from test_serve import Server, sse
    path, toks = chat_gguf(gc, kind)
    end = toks.index({"qwen2_5": "<|im_end|>", "llama3_2": "<|eot_id|>", "mistral_v3": "</s>"}[kind])
    several = kind != "llama3_2"
    srv = Server(path, chat_bundle(bundles, path, kind), "--parallel", 2)
    names = [t["function"]["name"] for t in TOOLS]
    msgs = [{"role": "user", "content": "weather?"}]
    seen = {"tool_calls": 0, "length": 0}
    try:
        status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "tools": TOOLS, "max_tokens": 24,
                                                            "temperature": 0})
        assert status == 200 and not json.loads(text)["choices"][0]["message"].get("tool_calls"), text
        for k in range(16):
            named = names[k // 2 % len(names)]
            choice = "required" if k % 2 else {"type": "function", "function": {"name": named}}
            req = {"messages": msgs, "tools": TOOLS, "tool_choice": choice, "max_tokens": 160,
                   "temperature": 0 if k < 2 else 1.0, "seed": k}
            status, _, text = srv.post("/v1/chat/completions", req)
            assert status == 200, text
            ch = json.loads(text)["choices"][0]
            m, finish = ch["message"], ch["finish_reason"]
            cut = json.loads(text)["usage"]["completion_tokens"] == req["max_tokens"]
            seen[finish] += 1
            calls = m.get("tool_calls") or []
            assert (finish == "length" and cut) or (finish == "tool_calls" and calls), (k, finish, m)
            assert len(calls) <= 1 or (several and k % 2), (k, m)
            for call in calls:
                assert call["function"]["name"] in (names if k % 2 else [named]), (k, call)
                assert isinstance(json.loads(call["function"]["arguments"]), dict), call
            rest = (m["content"] or "").lstrip()
            if calls:  # nothing after them, or, cut inside a further call, its beginning
                assert not rest or (finish == "length" and (CALL_TEXT[kind].startswith(rest)
                                                            or rest.startswith(CALL_TEXT[kind]))), m
            else:  # cut inside the first call
                assert rest.startswith(CALL_TEXT[kind]), (k, m)
                rest = rest[len(CALL_TEXT[kind]):]
                assert any(rest.startswith(n) or n.startswith(rest) for n in (names if k % 2 else [named])), (k, m)
            if k in (1, 6):
                status, _, text = srv.post("/v1/chat/completions", dict(req, stream=True))
                deltas = [c["delta"] for ev in sse(text) for c in ev["choices"]]
                got = [(t["function"]["name"], t["function"]["arguments"]) for d in deltas
                       for t in d.get("tool_calls", [])]
                assert got == [(c["function"]["name"], c["function"]["arguments"])
                               for c in m.get("tool_calls") or []], (k, deltas)
        assert seen["tool_calls"] >= 2, seen
        ended = 0
        for k in range(6):  # the end token favoured: the reply ends where it may, after its first call
            req = {"messages": msgs, "tools": TOOLS, "tool_choice": "required", "max_tokens": 250, "temperature": 1.0,
                   "seed": 50 + k, "logit_bias": {str(end): 100}}
            status, _, text = srv.post("/v1/chat/completions", req)
            assert status == 200, text
            ch = json.loads(text)["choices"][0]
            if ch["message"].get("tool_calls"):  # (else the model's arguments ran past max_tokens)
                assert len(ch["message"]["tool_calls"]) == 1 and ch["finish_reason"] == "tool_calls", text
                assert json.loads(text)["usage"]["completion_tokens"] < 250 and not ch["message"]["content"], text
                ended += 1
        assert ended, kind
        counts = {True: [], False: []}
        for k in range(12):
            for par in (True, False):
                req = {"messages": msgs, "tools": TOOLS, "tool_choice": "required", "max_tokens": 250,
                       "temperature": 1.0, "seed": 100 + k, "logit_bias": {str(end): -100}, "parallel_tool_calls": par}
                status, _, text = srv.post("/v1/chat/completions", req)
                assert status == 200, text
                ch = json.loads(text)["choices"][0]
                calls = ch["message"].get("tool_calls") or []
                for call in calls:
                    assert call["function"]["name"] in names and isinstance(json.loads(call["function"]["arguments"]),
                                                                            dict), call
                if ch["finish_reason"] == "tool_calls" or len(calls) > 1:
                    counts[par].append(len(calls))
                if par and len(calls) > 1 and "streamed" not in counts:  # several calls, streamed: the same calls
                    status, _, text = srv.post("/v1/chat/completions", dict(req, stream=True))
                    got = [(t["function"]["name"], t["function"]["arguments"]) for ev in sse(text)
                           for c in ev["choices"] for t in c["delta"].get("tool_calls", [])]
                    assert got == [(c["function"]["name"], c["function"]["arguments"]) for c in calls], (got, calls)
                    counts["streamed"] = True
        assert counts[False] and set(counts[False]) == {1}, counts
        assert counts[True] and (max(counts[True]) >= 2) == several == ("streamed" in counts), counts
        status, _, text = srv.post("/v1/chat/completions", dict(req, parallel_tool_calls="no"))
        assert status == 400 and "parallel_tool_calls" in text, text
    finally:
        assert srv.stop()[0] == 0


STRICT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "strict": True, "parameters": {
        "type": "object", "properties": {"city": {"enum": ["Paris", "Zürich"]}, "days": {"type": "integer"},
                                         "unit": {"anyOf": [{"enum": ["c", "f"]}, {"type": "null"}]}},
        "required": ["city", "days", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {},
                                                                    "additionalProperties": False}}}]


@pytest.mark.parametrize("kind", ["qwen2_5", "llama3_2"])
def test_gguf_forced_calls_follow_their_schemas(gc, bundles, kind):
    """A forced call's arguments follow its tool's parameters (a JSON
    Schema in jsonmode.h's subset), judged by Debian's python3-jsonschema:
    "required" and a named function, greedy and sampled, over Qwen's and
    Llama 3.2's call shapes. Parameters outside the subset are refused with
    their path where the tool is strict (OpenAI's "strict": true), and
    leave the arguments any object where it is not."""
    jsonschema = pytest.importorskip("jsonschema", reason="python3-jsonschema is absent: run 'make deps-test'")
    from test_serve import Server
    path, toks = chat_gguf(gc, kind)
    srv = Server(path, chat_bundle(bundles, path, kind), "--parallel", 2)
    params = {t["function"]["name"]: t["function"]["parameters"] for t in STRICT_TOOLS}
    msgs = [{"role": "user", "content": "weather?"}]
    checked = 0
    try:
        for k in range(12):
            choice = "required" if k % 3 == 0 else {"type": "function", "function": {"name": "get_weather"}}
            bias = {str(toks.index(f"<0x{ord(c):02X}>")): 3 for c in '",}'}  # strings and numbers end sooner
            req = {"messages": msgs, "tools": STRICT_TOOLS, "tool_choice": choice, "max_tokens": 250,
                   "temperature": 0 if k < 2 else 1.0, "seed": k, "logit_bias": bias}
            status, _, text = srv.post("/v1/chat/completions", req)
            assert status == 200, text
            ch = json.loads(text)["choices"][0]
            for call in ch["message"].get("tool_calls") or []:
                args = json.loads(call["function"]["arguments"])
                assert jsonschema.Draft202012Validator(params[call["function"]["name"]]).is_valid(args), (k, call)
                checked += 1
        assert checked >= 3, checked
        loose = json.loads(json.dumps(STRICT_TOOLS))
        loose[0]["function"]["parameters"]["properties"]["days"]["if"] = {"minimum": 3}
        status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "tools": loose, "tool_choice": "required",
                                                            "max_tokens": 8})
        assert status == 400 and "tools[0].function.parameters (strict): schema.properties.days: if is not" \
            in text, text
        del loose[0]["function"]["strict"]
        status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "tools": loose, "tool_choice": "required",
                                                            "max_tokens": 8})
        assert status == 200, text
    finally:
        assert srv.stop()[0] == 0


@pytest.mark.parametrize("kind", ["deepseek_r1", "qwen3_thinking"])
def test_gguf_reasoning_content(gc, bundles, kind):
    """gcore-serve with DeepSeek R1's or Qwen3-Thinking's template: a reply's
    <think> block (the template opened it) is reasoning_content and what follows </think> and
    its blanks is content, whole and streamed (</think> spelled in eight
    tokens, so the stream must hold "</thi" back until it knows); cut
    before </think>, all of it is reasoning; --reasoning-format none puts
    it all in content. The model writes "ab</think>\n" over and over after
    the prompt's last token, the "\n" after <think>."""
    from test_serve import Server, sse
    nl = "<0x0A>"
    chain = [nl, "a", "b", "<0x3C>", "<0x2F>", "t", "h", "i", "n", "k", "<0x3E>"]
    path = chain_gguf(gc, kind, chain, f"{kind}-chain.gguf")
    bundle = bundles.get(path, "F32")
    msgs = [{"role": "user", "content": "hi"}]
    for flag, n, reason, content in (("deepseek", 16, "ab", "ab</t"), ("deepseek", 4, "ab</", ""),
                                     ("none", 16, None, "ab</think>\nab</t")):
        srv = Server(path, bundle, "--parallel", 1, "--reasoning-format", flag)
        try:
            status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": n, "temperature": 0})
            assert status == 200, text
            m = json.loads(text)["choices"][0]["message"]
            assert (m.get("reasoning_content"), m["content"]) == (reason, content), (flag, n, m)
            status, _, text = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": n, "temperature": 0,
                                                                "stream": True})
            assert status == 200, text
            deltas = [c["delta"] for ev in sse(text) for c in ev["choices"]]
            got_r = "".join(d.get("reasoning_content", "") for d in deltas)
            got_c = "".join(d.get("content") or "" for d in deltas)
            assert (got_r, got_c) == (reason or "", content), (flag, n, deltas)
            if n == 16:  # "</thi" held back, never sent as reasoning
                assert not any("<" in d.get("reasoning_content", "") for d in deltas), deltas
        finally:
            assert srv.stop()[0] == 0
    if kind == "deepseek_r1":
        r = gc("gcore-serve", "-m", path, "-b", bundle, "--reasoning-format", "think")
        assert_clean_error(r, "gcore-serve", "--reasoning-format: expected deepseek or none")


def test_gguf_missing_special_ids_are_llama_cpps_defaults(gc, bundles):
    """A SentencePiece GGUF without bos/eos/unknown token ids: llama.cpp's
    defaults 1, 2 and 0, for the tokenizer and the model alike: a text
    prompt starts with 1 and (add_eos_token) ends with 2, and 2 ends a
    generation."""
    cfg = TM.make_config(**CFG)
    path = str(gc.dir / "noids.gguf")
    G.write_llama(path, cfg, TM.random_weights(cfg, 0), extra_kvs=[("tokenizer.ggml.add_eos_token", "bool", True)],
                  drop_keys=["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                             "tokenizer.ggml.unknown_token_id"])
    r = gc("gcore-run", "-m", path, "-b", bundles.get(path, "F32"), "-p", "the cat", "-n", 1, *GREEDY, "--json")
    assert r.rc == 0, r
    n = len(ids_of(gc, path, "the cat"))
    assert json_of(r)["prompt_tokens"] == n + 2, r  # BOS and EOS
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", "--bos", input="the cat")
    assert r.rc == 0 and r.out.split()[0] == "1", r


def test_gguf_add_eos_token(gc, bundles):
    """tokenizer.ggml.add_eos_token true: a text prompt ends with EOS, as
    llama.cpp tokenizes it with its special tokens; false or absent: not."""
    cfg = TM.make_config(**CFG)
    w = TM.random_weights(cfg, 0)
    runs = {}
    for flag in (None, False, True):
        path = str(gc.dir / f"eos{flag}.gguf")
        G.write_llama(path, cfg, w, extra_kvs=[] if flag is None else [("tokenizer.ggml.add_eos_token", "bool", flag)])
        r = gc("gcore-run", "-m", path, "-b", bundles.get(path, "F32"), "-p", "the cat", "-n", 2, *GREEDY, "--json")
        assert r.rc == 0, r
        runs[flag] = json_of(r)
    n = len(ids_of(gc, str(gc.dir / "eosNone.gguf"), "the cat"))
    assert runs[None]["prompt_tokens"] == runs[False]["prompt_tokens"] == n + 1  # BOS
    assert runs[True]["prompt_tokens"] == n + 2                                   # BOS, text, EOS
