"""Tensor parallelism (issue 17) on the CPU: the recipe's shard shapes
through the tools (gcore-gen/gcore-tune --tp N; the shapes themselves are
pinned in tests/c/test_models.c recipe_shard)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import assert_clean_error  # noqa: E402
import tinymodel as TM  # noqa: E402

# heads, KV heads, FFN rows and vocabulary all divisible by 2 and 4 (the
# vocabulary need not be: test_vocabulary_that_tp_does_not_divide)
TP_CONFIG = dict(dim=64, hidden_dim=160, n_layers=2, n_heads=8, n_kv_heads=4, vocab=256)


@pytest.fixture
def tiny(gc):
    path = os.path.join(gc.dir, "model")
    TM.write_model(path, seed=0, **TP_CONFIG)
    return path


def test_gen_builds_a_shard_bundle(gc, tiny):
    for tp in (2, 4):
        out = os.path.join(gc.dir, f"tp{tp}.gcb")
        r = gc("gcore-gen", "--model", tiny, "--tp", tp, "--prefill", "16", "-o", out)
        assert r.rc == 0 and os.path.exists(out), r


def test_tp_that_does_not_divide_is_one_line(gc, tiny):
    r = gc("gcore-gen", "--model", tiny, "--tp", 3, "-o", os.path.join(gc.dir, "x.gcb"))
    assert_clean_error(r, "gcore-gen", "--tp 3: 8 attention heads are not divisible by 3")
    r = gc("gcore-tune", "--model", tiny, "--tp", 8, "--db", os.path.join(gc.dir, "t.db"))
    assert_clean_error(r, "gcore-tune", "--tp 8: 4 KV heads are not divisible by 8")


def test_tp_goes_with_model(gc):
    r = gc("gcore-gen", "--op", "gemm", "--m", 1, "--n", 8, "--k", 8, "--tp", 2, "-o", os.path.join(gc.dir, "x.gcb"))
    assert_clean_error(r, "gcore-gen", "--tp and --dequant-rows go with --model")
    r = gc("gcore-gen", "--op", "gemm", "--m", 1, "--n", 8, "--k", 8, "--dequant-rows", 16, "-o",
           os.path.join(gc.dir, "x.gcb"))
    assert_clean_error(r, "gcore-gen", "--tp and --dequant-rows go with --model")
    r = gc("gcore-gen", "--model", "m", "--dequant-rows", "-1", "-o", os.path.join(gc.dir, "x.gcb"))
    assert r.rc == 2 and "--dequant-rows: expected a token count, 0 for never" in r.err, r
    r = gc("gcore-gen", "--model", "m", "--tp", "0", "-o", os.path.join(gc.dir, "x.gcb"))
    assert_clean_error(r, "gcore-gen", "--tp: expected 1..64 ranks")


# ------------------------------------------------- the forward over N ranks

from conftest import SHARED  # noqa: E402
import numpy as np  # noqa: E402
from test_llama import CONFIGS, GREEDY, PROMPT, parse_json, read_logits, tiefree_model  # noqa: E402

TOL_TP = 1e-5    # TP=N logits vs TP=1 (both fp32; only the order of the sums differs)
N_TP = 24        # greedy steps compared
LONG = [1 + (7 * i) % 200 for i in range(20)]   # a prompt over 8 tokens: the unfused passes


def run_tp(gc, model, bundle, tp, tokens, n=N_TP, env=None):
    """gcore-run --tp tp greedy with --logits: (ids, logits rows)."""
    lf = os.path.join(gc.dir, f"logits-tp{tp}-{len(tokens)}.f32")
    r = gc("gcore-run", "-m", model, "-b", bundle, "--tp", tp, "--tokens", ",".join(map(str, tokens)),
           "-n", n, *GREEDY, "--json", "--logits", lf, env=env)
    assert r.rc == 0, r
    ids = parse_json(r)["tokens"]
    vocab = os.path.getsize(lf) // 4 // (len(tokens) + len(ids) - 1)
    return ids, read_logits(lf, len(tokens) + len(ids) - 1, vocab)


def bundle_for(gc, model, tp):
    out = os.path.join(gc.dir, f"tp{tp}.gcb")
    r = gc("gcore-gen", "--model", model, "--tp", tp, "--prefill", "none", "-o", out)
    assert r.rc == 0, r
    return out


def assert_tp_equals_tp1(gc, model, tps, prompts=(PROMPT, LONG), ref_ids=None):
    """Greedy ids of TP=N equal TP=1's (and the reference's, when given) and
    the logits of every position agree to TOL_TP relative per row."""
    one = bundle_for(gc, model, 1)
    for tokens in prompts:
        ids1, lg1 = run_tp(gc, model, one, 1, tokens)
        if ref_ids is not None and tokens is PROMPT:
            assert ids1 == ref_ids[:len(ids1)], "TP=1 differs from the fp64 reference"
        for tp in tps:
            ids, lg = run_tp(gc, model, bundle_for(gc, model, tp), tp, tokens)
            assert ids == ids1, f"--tp {tp}, prompt of {len(tokens)}: {ids} vs TP=1 {ids1}"
            rel = np.max(np.abs(lg - lg1), axis=1) / np.max(np.abs(lg1), axis=1)
            assert rel.max() <= TOL_TP, f"--tp {tp}: logits row {int(rel.argmax())} off by {rel.max():.3g}"


def test_tiny_tp2_tp4_equal_tp1(gc):
    ref = tiefree_model(os.path.join(gc.dir, "model"), prompt=PROMPT, n=N_TP, **TP_CONFIG)
    assert_tp_equals_tp1(gc, ref.path, (2, 4), ref_ids=ref.ids)


@pytest.mark.parametrize("kind", ["llama3_gqa", "tied"])
def test_tiny_gqa_and_tied_tp2_equal_tp1(gc, kind):
    """Two KV heads (one per rank) and a classifier tied to the embedding
    (rank 0's vocabulary rows are the embedding's first rows)."""
    ref = tiefree_model(os.path.join(gc.dir, "model"), prompt=PROMPT, n=N_TP, **CONFIGS[kind])
    assert_tp_equals_tp1(gc, ref.path, (2,), prompts=(PROMPT,), ref_ids=ref.ids)


@pytest.mark.parametrize("kind,tps", [("untied", (2, 4)), ("tied", (2,))])
def test_vocabulary_that_tp_does_not_divide(gc, kind, tps):
    """777 tokens over 2 and 4 ranks: 389 and 195 LM-head rows a rank, the
    last share padded with zero rows that no output shows; the same greedy
    ids as TP=1 and the reference, logits of 777 a row equal to TP=1's
    (tied: the padded share is a copy of the embedding's last rows)."""
    cfg = dict(TP_CONFIG if kind == "untied" else CONFIGS["tied"], vocab=777)
    ref = tiefree_model(os.path.join(gc.dir, "model"), prompt=PROMPT, n=N_TP, **cfg)
    assert_tp_equals_tp1(gc, ref.path, tps, ref_ids=ref.ids)
    ids, lg = run_tp(gc, ref.path, bundle_for(gc, ref.path, tps[-1]), tps[-1], LONG, n=4)
    assert lg.shape[1] == 777, lg.shape


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qwen_tp2_equal_tp1(gc, arch):
    """Qwen2's q/k/v biases split with their heads' rows (each rank adds its
    slice of bq, bk and bv); Qwen3's q/k norms, one per head size, whole
    on every rank."""
    ref = tiefree_model(os.path.join(gc.dir, "model"), prompt=PROMPT, n=N_TP, **TP_CONFIG, arch=arch)
    assert_tp_equals_tp1(gc, ref.path, (2,), ref_ids=ref.ids)


def test_stories260k_tp2_tp4_equal_tp1(gc):
    path = os.path.join(SHARED, "stories260K.bin")
    if not os.path.exists(path):
        pytest.skip(f"shared test data absent: {path}")
    assert_tp_equals_tp1(gc, path, (2, 4), prompts=([1], LONG))


def test_run_tp_errors_are_one_line(gc, tiny):
    one = bundle_for(gc, tiny, 1)
    r = gc("gcore-run", "-m", tiny, "-b", one, "--tp", 3, "--tokens", "1", "-n", 2)
    assert_clean_error(r, "gcore-run", "--tp 3: 8 attention heads are not divisible by 3")
    r = gc("gcore-run", "-m", tiny, "-b", one, "--tp", 2, "--tokens", "1", "-n", 2)
    assert_clean_error(r, "gcore-run", "rank 0: ", "the bundle cannot run this model")
    # FFN rows of 160 quantize into Q8_0 blocks of 32; a rank's 80 columns of w2 would split one
    r = gc("gcore-run", "-m", tiny, "-b", one, "--tp", 2, "--quantize", "q8_0", "--tokens", "1", "-n", 2)
    assert_clean_error(r, "gcore-run", "gcore-run: --tp 2: ", "down_proj", "splits into 80 columns a rank, not "
                       "whole Q8_0 blocks of 32")
    r = gc("gcore-gen", "--model", tiny, "--tp", 2, "--quantize", "q8_0", "-o", os.path.join(gc.dir, "q.gcb"))
    assert_clean_error(r, "gcore-gen", "splits into 80 columns a rank, not whole Q8_0 blocks of 32")


def test_run_tp_builds_its_bundle(gc, tiny):
    """Without -b, the bundle built from the (absent) database serves the
    shard shapes."""
    r = gc("gcore-run", "-m", tiny, "--tp", 2, "--tokens", "1,2,3", "-n", 4, *GREEDY)
    assert r.rc == 0, r
    assert len(r.out.split()) == 4, r


# ------------------------------------------------------- failure is clean

@pytest.mark.parametrize("tp,rank,call", [(2, 1, 1), (2, 0, 3), (4, 3, 2), (4, 2, 40)])
def test_failing_rank_stops_every_rank(gc, tiny, tp, rank, call):
    """GC_COMM_FAIL (a test-only hook, runtime/comm.h) fails one rank's
    call-th collective: in the prefill, or (call 40) in a decode step. The
    other ranks, waiting in theirs, stop; one line names the rank and the
    cause; nothing hangs (the subprocess timeout would say so)."""
    b = bundle_for(gc, tiny, tp)
    r = gc("gcore-run", "-m", tiny, "-b", b, "--tp", tp, "--tokens", ",".join(map(str, PROMPT)), "-n", 16,
           *GREEDY, "--json", env={"GC_COMM_FAIL": f"{rank}:{call}"}, timeout=120)
    assert_clean_error(r, "gcore-run", f"gcore-run: rank {rank}: forced failure at collective {call} "
                       "(GC_COMM_FAIL, a test hook)")
    assert r.out == "", r


def test_profile_shows_the_collectives(gc, tiny):
    """--profile with --tp: rank 0's table has rows for the all-reduces (two
    a layer a step) and the logits' all-gather (one a step)."""
    b = bundle_for(gc, tiny, 2)
    r = gc("gcore-run", "-m", tiny, "-b", b, "--tp", 2, "--tokens", "3,4,5", "-n", 5, *GREEDY, "--profile")
    assert r.rc == 0, r
    decode = r.err[r.err.index("decode:"):]
    rows = {l.split()[6]: int(l.split()[0]) for l in decode.splitlines() if l.strip().endswith("collective")}
    assert rows == {"all_reduce": 2 * TP_CONFIG["n_layers"] * 4, "all_gather": 4}, r.err


def test_bf16_and_gguf_tp2_equal_tp1(gc):
    """Shards of bf16 weights (read exactly, summed in fp32) and of a GGUF
    file (llama.cpp's names, its interleaved RoPE rows inside each head)."""
    import tinygguf
    ref = tiefree_model(os.path.join(gc.dir, "bf16"), dtype="bf16", prompt=PROMPT, n=N_TP, **TP_CONFIG)
    assert_tp_equals_tp1(gc, ref.path, (2,), prompts=(PROMPT,), ref_ids=ref.ids)
    gguf = os.path.join(gc.dir, "model.gguf")
    tinygguf.write_model(gguf, qtype="F32", seed=0, **TP_CONFIG)
    assert_tp_equals_tp1(gc, gguf, (2, 4), prompts=(PROMPT,))


# heads, KV heads and FFN rows divisible by 2 and 4, each rank's columns of
# wo (64 / tp) and w2 (384 / tp) whole Q8_0 blocks of 32 at tp 2
Q_CONFIG = dict(dim=64, hidden_dim=384, n_layers=2, n_heads=8, n_kv_heads=4, vocab=256)
# the same for Q4_K_M's 256-element blocks (wo 512 / 2, w2 1024 / 2), and a
# vocabulary that 2 does not divide (the LM head's Q6_K rows padded)
QK_CONFIG = dict(dim=512, hidden_dim=1024, n_layers=2, n_heads=8, n_kv_heads=4, vocab=777)


def test_quantized_tp2_equals_tp1(gc):
    """--quantize q8_0 and a GGUF file of Q8_0 (llama.cpp's reference
    quantizer, rows of whole blocks in each rank's share): every rank
    holds its rows of wq|wk|wv, w1|w3 and the LM head and its block
    columns of wo and w2; greedy ids equal TP=1's, logits within TOL_TP
    (measured: 5.7e-7). Then a GGUF file in llama.cpp's Q4_K_M layout
    (Q4_K, Q6_K, per layer) of 777 tokens."""
    import tinygguf
    ref = tiefree_model(os.path.join(gc.dir, "model"), prompt=PROMPT, n=N_TP, **Q_CONFIG)
    one = os.path.join(gc.dir, "q1.gcb")
    two = os.path.join(gc.dir, "q2.gcb")
    for tp, out in ((1, one), (2, two)):
        r = gc("gcore-gen", "--model", ref.path, "--tp", tp, "--quantize", "q8_0", "--prefill", "none", "-o", out)
        assert r.rc == 0, r
    runs = {}
    for tp, b in ((1, one), (2, two)):
        lf = os.path.join(gc.dir, f"q-tp{tp}.f32")
        r = gc("gcore-run", "-m", ref.path, "-b", b, "--tp", tp, "--quantize", "q8_0", "--tokens",
               ",".join(map(str, LONG)), "-n", 8, *GREEDY, "--json", "--logits", lf)
        assert r.rc == 0, r
        ids = parse_json(r)["tokens"]
        runs[tp] = ids, read_logits(lf, len(LONG) + len(ids) - 1, Q_CONFIG["vocab"])
    (ids1, lg1), (ids2, lg2) = runs[1], runs[2]
    assert ids2 == ids1
    rel = np.max(np.abs(lg2 - lg1), axis=1) / np.max(np.abs(lg1), axis=1)
    assert rel.max() <= TOL_TP, f"logits row {int(rel.argmax())} off by {rel.max():.3g}"
    gguf = os.path.join(gc.dir, "q8.gguf")
    tinygguf.write_model(gguf, qtype="Q8_0", seed=0, **Q_CONFIG)
    ids1, lg1 = run_tp(gc, gguf, bundle_for(gc, gguf, 1), 1, PROMPT, n=8)
    ids2, lg2 = run_tp(gc, gguf, bundle_for(gc, gguf, 2), 2, PROMPT, n=8)
    assert ids2 == ids1
    rel = np.max(np.abs(lg2 - lg1), axis=1) / np.max(np.abs(lg1), axis=1)
    assert rel.max() <= TOL_TP, f"GGUF Q8_0: logits row {int(rel.argmax())} off by {rel.max():.3g}"
    gguf = os.path.join(gc.dir, "q4km.gguf")
    tinygguf.write_model(gguf, qtype=tinygguf.MIXED, seed=0, **QK_CONFIG)
    ids1, lg1 = run_tp(gc, gguf, bundle_for(gc, gguf, 1), 1, PROMPT, n=8)
    ids2, lg2 = run_tp(gc, gguf, bundle_for(gc, gguf, 2), 2, PROMPT, n=8)
    assert ids2 == ids1 and lg2.shape[1] == 777
    rel = np.max(np.abs(lg2 - lg1), axis=1) / np.max(np.abs(lg1), axis=1)
    assert rel.max() <= TOL_TP, f"GGUF Q4_K_M: logits row {int(rel.argmax())} off by {rel.max():.3g}"


# ------------------------------------------------------------ gcore-serve

def test_serve_tp2_answers_as_tp1(gc):
    """gcore-serve --tp 2 with 2 slots (batched decode steps of 1 and 2 rows
    on both ranks): 3 concurrent greedy requests get gcore-run --tp 1's
    tokens; the server exits cleanly."""
    import json
    from concurrent.futures import ThreadPoolExecutor
    from test_serve import Server, check_clean_exit
    cfg = dict(TP_CONFIG, vocab=512)
    model = os.path.join(gc.dir, "tiny")
    TM.write_model(model, seed=3, **cfg)
    TM.write_tokenizer(model, cfg["vocab"])
    prompts = [[5, 77, 300, 12, 9], [1, 2, 3], [400, 7, 7, 19, 250, 33, 8, 1, 64]]
    path = os.path.join(gc.dir, "prompts.txt")
    with open(path, "w") as f:
        f.write("".join(",".join(map(str, p)) + "\n" for p in prompts))
    r = gc("gcore-run", "-m", model, "-b", bundle_for(gc, model, 1), "--tokens-file", path, "-n", 10,
           *GREEDY, "--json")
    assert r.rc == 0, r
    want = [json.loads(line)["tokens"] for line in r.out.splitlines() if line.strip()]
    srv = Server(model, bundle_for(gc, model, 2), "--tp", 2, "--parallel", 2)
    try:
        def ask(p):
            status, _, body = srv.post("/v1/completions", {"model": "tiny", "prompt": p, "max_tokens": 10,
                                                           "temperature": 0, "ignore_eos": True,
                                                           "return_token_ids": True})
            assert status == 200, body
            return json.loads(body)["choices"][0]["token_ids"]
        with ThreadPoolExecutor(3) as ex:
            got = list(ex.map(ask, prompts))
        assert got == want
    finally:
        check_clean_exit(srv)


def test_devices_flag_errors_are_one_line(gc, tiny):
    """--devices (the ranks' GPU ordinals) is parsed before anything runs:
    repeated or malformed ordinals and a count that is not --tp's are one
    line each, in gcore-run and gcore-serve."""
    for tool in ("gcore-run", "gcore-serve"):
        for args, msg in ((["--devices", "0,0"], "--devices: expected different ordinals"),
                          (["--devices", "0,x"], "--devices: expected different ordinals"),
                          (["--devices", ""], "--devices: expected different ordinals"),
                          (["--devices", "0,1", "--tp", "3"], "--devices: expected as many ordinals as --tp ranks"),
                          (["--devices", "0,1", "--device", "2"], "--devices: expected no --device beside it")):
            r = gc(tool, "-m", tiny, *args)
            assert_clean_error(r, tool, msg)
