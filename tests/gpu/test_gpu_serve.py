"""gcore-serve on the GPU: 16 requests at once over 8 slots (batched decode
steps of 1 to 8 rows through rope_kv_batch and attention_batch, prefills
in their slots between them) against gcore-run's single-sequence runs of
the same prompts on the same GPU, for fp16 and bf16 models with odd
dimensions (5 query heads over 1 KV head, head_dim 96).

The batched kernels add in another order than the single-sequence ones,
so 16-bit rounding may pick another token where two are nearly tied: each
stream must equal gcore-run's tokens up to its end or up to a position
where gcore-run's top two logits are less than MARGIN apart (relative to
the row's largest: ten units in the last place of the model's dtype, whose
roundings of every layer's activations are what the orders change); the
test says how many tokens that covered."""
import json
import os
import random
import sqlite3
import sys
import threading

import numpy as np
import pytest

import tinymodel as TM

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_serve import Server, sse, stream_text  # noqa: E402

BACKEND = os.environ.get("GCORE_TEST_BACKEND", "cpu")
TARGETS = os.environ.get("GCORE_TEST_TARGETS", "sm_80,sm_90")
pytestmark = pytest.mark.skipif(BACKEND not in ("cuda", "hip"),
                                reason="GPU suite: run with make test-gpu or make test-gpu-amd")

ODD = dict(dim=320, hidden_dim=864, n_layers=2, n_heads=5, n_kv_heads=1, head_dim=96, vocab=777, max_seq=1024)
MARGIN = {"f16": 10 * 2.0 ** -10, "bf16": 10 * 2.0 ** -7}
N = 24


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_concurrent_requests_match_gcore_run(gc, dtype):
    model = str(gc.dir / "model")
    TM.write_model(model, seed=5, dtype=dtype, **ODD)
    r = gc("gcore-gen", "--model", model, "--target", TARGETS, "-o", "b.gcb")
    assert r.rc == 0, r
    rng = random.Random(3)
    prompts = [[rng.randrange(3, ODD["vocab"]) for _ in range(n)] for n in
               (1, 2, 3, 7, 8, 9, 16, 31, 64, 100, 127, 128, 129, 200, 300, 511)]
    (gc.dir / "p.txt").write_text("".join(",".join(map(str, p)) + "\n" for p in prompts))
    r = gc("gcore-run", "-m", model, "-b", "b.gcb", "--backend", BACKEND, "--tokens-file", "p.txt", "-n", N,
           "--temp", "0", "--ignore-eos", "--ctx", 1024, "--logits", "l.f32", timeout=900)
    assert r.rc == 0, r
    ref = [[int(x) for x in line.split()] for line in r.out.splitlines()]
    logits = np.fromfile(gc.dir / "l.f32", dtype=np.float32).reshape(-1, ODD["vocab"])
    rows, at = [], 0  # the row that picked token k of prompt i: its last prompt row, then its decode rows
    for p in prompts:
        rows.append(at + len(p) - 1)
        at += len(p) + N - 1
    assert at == logits.shape[0]

    srv = Server(model, str(gc.dir / "b.gcb"), "--backend", BACKEND, "--parallel", 8, "--ctx", 1024)
    got = [None] * len(prompts)

    def one(i):
        body = {"model": "model", "prompt": prompts[i], "max_tokens": N, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True, "stream": i % 2 == 0}
        status, _, text = srv.post("/v1/completions", body, timeout=600)
        assert status == 200, text
        got[i] = stream_text(sse(text), False)[1] if body["stream"] else json.loads(text)["choices"][0]["token_ids"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rc, err = srv.stop()
    assert rc == 0, err
    covered = 0
    for i, (g, want) in enumerate(zip(got, ref)):
        assert g is not None and len(g) == N, (i, g)
        k = next((k for k in range(N) if g[k] != want[k]), N)
        covered += k
        if k < N:
            row = np.sort(logits[rows[i] + k])
            gap = (row[-1] - row[-2]) / np.max(np.abs(row))
            assert gap < MARGIN[dtype], f"prompt {i} ({len(prompts[i])} tokens): token {k} is {g[k]}, gcore-run's " \
                                 f"{want[k]}, whose top two logits are {gap:.4f} apart"
    print(f"{dtype}: {covered} of {len(prompts) * N} tokens equal to gcore-run's before any near tie")


def ref_log_softmax(w, cfg, ids):
    """The fp64 reference's log-softmax of ids' logits (row k: the
    distribution of ids[k + 1]) and each row's tolerance: test_gpu_gguf's
    2^-7 of the row's largest logit, twice for the log-sum-exp."""
    import llama_ref as R
    lg = R.forward(w, cfg, ids)
    m = lg.max(axis=1, keepdims=True)
    return lg - (m + np.log(np.exp(lg - m).sum(axis=1, keepdims=True))), 2 * 2.0 ** -7 * np.abs(lg).max(axis=1)


def test_logprobs_and_echo_on_the_gpu(gc):
    """/v1/completions with "echo": true and "logprobs": 5 on the GPU, an
    fp16 model of odd dimensions, prompts crossing prefill chunks of 64
    (every row's logits copied back) beside one of a single token, and a
    chat with top_logprobs: every log-probability within the logits'
    tolerance (test_gpu_gguf's 2^-7 of the row's largest, twice for the
    log-sum-exp) of the fp64 reference's log-softmax (llama_ref.py), each
    top list the reference's largest values."""
    import llama_ref as R
    model = str(gc.dir / "model")
    TM.write_model(model, seed=9, dtype="f16", **ODD)
    TM.write_tokenizer(model, ODD["vocab"])
    r = gc("gcore-gen", "--model", model, "--target", TARGETS, "-o", "b.gcb")
    assert r.rc == 0, r
    w, cfg = R.load(model)
    reference = lambda ids: ref_log_softmax(w, cfg, ids)  # noqa: E731

    srv = Server(model, str(gc.dir / "b.gcb"), "--backend", BACKEND, "--parallel", 4, "--ctx", 1024,
                 "--prefill-chunk", 64)
    rng = random.Random(5)
    checked = 0
    for n in (1, 63, 150):
        prompt = [rng.randrange(3, 600) for _ in range(n)]
        status, _, text = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0,
                                                       "ignore_eos": True, "return_token_ids": True,
                                                       "logprobs": 5, "echo": True}, timeout=600)
        assert status == 200, text
        c = json.loads(text)["choices"][0]
        ids = prompt + c["token_ids"]
        lp, tol = reference(ids)
        L = c["logprobs"]
        assert len(L["token_logprobs"]) == len(ids) and L["token_logprobs"][0] is None
        for k in range(1, len(ids)):
            assert abs(L["token_logprobs"][k] - lp[k - 1, ids[k]]) <= tol[k - 1], (n, k)
            top = sorted(L["top_logprobs"][k].values(), reverse=True)[:5]
            want = np.sort(lp[k - 1])[::-1][:5]
            assert np.all(np.abs(np.asarray(top) - want) <= tol[k - 1]), (n, k, top, want.tolist())
            checked += 1
    body = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 5, "temperature": 0.8,
            "seed": 3, "ignore_eos": True, "return_token_ids": True, "logprobs": True, "top_logprobs": 4}
    status, _, text = srv.post("/v1/chat/completions", body, timeout=600)
    assert status == 200, text
    c = json.loads(text)["choices"][0]
    ids = c["prompt_token_ids"] + c["token_ids"]
    lp, tol = reference(ids)
    for j, x in enumerate(c["logprobs"]["content"]):
        k = len(c["prompt_token_ids"]) + j
        assert abs(x["logprob"] - lp[k - 1, ids[k]]) <= tol[k - 1], (j, x["logprob"])
        want = np.sort(lp[k - 1])[::-1][:4]
        assert np.all(np.abs(np.asarray([y["logprob"] for y in x["top_logprobs"]]) - want) <= tol[k - 1])
        checked += 1
    rc, err = srv.stop()
    assert rc == 0, err
    print(f"{checked} log-probabilities within tolerance of the fp64 reference")


def test_prompt_cache_and_shared_prefixes_on_the_gpu(gc):
    """The prompt cache and the device copy of a prompt's keys and values
    on the GPU (fp16, odd dimensions, --prefill-chunk 16): three choices of
    a 100-token prompt prefill it once (9 passes, 198 tokens copied, -v's
    line), a conversation's next turn starts from its slot (cached_tokens),
    and a prompt sharing 40 tokens with a slot that it would overwrite more
    of takes an empty slot and copies them; every log-probability within
    the fp64 reference's tolerance (as the test above) and every greedy
    token within it of the row's largest."""
    import re
    import llama_ref as R
    model = str(gc.dir / "model")
    TM.write_model(model, seed=9, dtype="f16", **ODD)
    TM.write_tokenizer(model, ODD["vocab"])  # logprobs name tokens by their text
    r = gc("gcore-gen", "--model", model, "--target", TARGETS, "-o", "b.gcb")
    assert r.rc == 0, r
    w, cfg = R.load(model)
    rng = random.Random(8)
    system = [rng.randrange(3, 600) for _ in range(40)]
    p1 = system + [rng.randrange(3, 600) for _ in range(60)]
    body = {"max_tokens": 4, "temperature": 0, "ignore_eos": True, "return_token_ids": True, "logprobs": 1}

    def post(prompt, **kw):
        status, _, text = srv.post("/v1/completions", dict(body, prompt=prompt, **kw), timeout=600)
        assert status == 200, text
        return json.loads(text)

    def check(prompt, c):
        lp, tol = ref_log_softmax(w, cfg, prompt + c["token_ids"])
        for j, (i, x) in enumerate(zip(c["token_ids"], c["logprobs"]["token_logprobs"])):
            k = len(prompt) + j - 1
            assert abs(x - lp[k, i]) <= tol[k] and lp[k, i] >= lp[k].max() - tol[k], (j, x, lp[k, i], lp[k].max())

    srv = Server(model, str(gc.dir / "b.gcb"), "--backend", BACKEND, "--parallel", 4, "--ctx", 1024,
                 "--prefill-chunk", 16, "-v")
    try:
        a = post(p1, n=3)
        for c in a["choices"]:
            check(p1, c)
        p2 = p1 + a["choices"][0]["token_ids"] + [11, 12]
        b = post(p2)
        check(p2, b["choices"][0])
        assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == len(p1) + 3
        p3 = system + [7, 8, 9]
        c = post(p3)
        check(p3, c["choices"][0])
        assert c["usage"]["prompt_tokens_details"]["cached_tokens"] == len(system)
    finally:
        rc, err = srv.stop()
    assert rc == 0, err
    lines = [tuple(map(int, x)) for x in
             re.findall(r"POST '/v1/completions' 200: (\d+) prompt tokens \((\d+) passes, (\d+) cached\)", err)]
    assert lines[0] == (100, 9, 198), err


def test_structured_outputs_on_the_gpu(gc):
    """JSON Schemas (OpenAI's response_format json_schema, vLLM's
    guided_json; a pattern, a format, multipleOf and uniqueItems among its
    keywords) on the GPU, eight requests at once, greedy and sampled,
    over batched decode steps: every reply that ends is one object Debian's
    python3-jsonschema accepts, ended by an end token; one cut by
    max_tokens begins one JSON object (tests/jsonref.py)."""
    jsonschema = pytest.importorskip("jsonschema", reason="python3-jsonschema is absent on this machine")
    from jsonref import is_object, is_prefix
    from test_serve import raw_id, token_texts
    model = str(gc.dir / "model")
    TM.write_model(model, seed=11, dtype="f16", **ODD)
    TM.write_tokenizer(model, ODD["vocab"])
    r = gc("gcore-gen", "--model", model, "--target", TARGETS, "--batch", 8, "-o", "b.gcb")
    assert r.rc == 0, r
    _, raw = token_texts(model)
    schema = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"},
                                               "days": {"type": "integer"},
                                               "n": {"anyOf": [{"type": "null"}, {"type": "array",
                                                                                  "items": {"enum": ["a", "b"]}}]},
                                               "code": {"type": "string", "pattern": "^[A-Z]{2}\\d$"},
                                               "day": {"type": "string", "format": "date"},
                                               "step": {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 50},
                                               "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "uniqueItems": True}},
              "required": ["unit", "ok", "n", "code", "step"], "additionalProperties": False}
    check = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).is_valid
    srv = Server(model, str(gc.dir / "b.gcb"), "--backend", BACKEND, "--parallel", 8, "--ctx", 1024)
    got = [None] * 8

    def one(i):
        body = {"messages": [{"role": "user", "content": f"case {i}"}], "max_tokens": 240, "seed": i,
                "temperature": 0 if i % 2 == 0 else 0.9, "return_token_ids": True,
                "logit_bias": {str(raw_id(raw, b)): 3 for b in (b'"', b"}", b"]")}}  # ends come sooner
        if i % 2:
            body["guided_json"] = schema
        else:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
        got[i] = srv.post("/v1/chat/completions", body, timeout=600)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ended = 0
    for i, (status, _, text) in enumerate(got):
        assert status == 200, text
        c = json.loads(text)["choices"][0]
        ids = c["token_ids"]
        reply = b"".join(raw[t] for t in ids[:-1 if c["finish_reason"] == "stop" else None])
        if c["finish_reason"] == "stop":
            assert is_object(reply) and check(json.loads(reply)), (i, reply)
            ended += 1
        else:
            assert is_prefix(reply), (i, reply)
    rc, err = srv.stop()
    assert rc == 0, err
    assert ended >= 3, ended  # the stop path exercised (5 of 8 on the CPU backend)
    print(f"{ended} of 8 replies complete and valid under the schema")


def test_l2_window_changes_no_served_value(gc):
    """gcore-serve --l2-window MB (the decode step's O projection asks L2
    for the first MB of gate/up: a hint) serves bit-identical tokens and
    log-probabilities with windows 0 and 1 MB and the default, on an fp16
    model of odd dimensions; one slot, so that every decode step is of one
    row, whose O projection is gemv_bulk's on sm_90 (a @prefetch kernel)."""
    model = str(gc.dir / "model")
    TM.write_model(model, seed=12, dtype="f16", **ODD)
    TM.write_tokenizer(model, ODD["vocab"])  # logprobs name tokens by their text
    r = gc("gcore-gen", "--model", model, "--target", TARGETS, "-o", "b.gcb")
    assert r.rc == 0, r
    if "sm_90" in TARGETS:  # O's kernel (gemm_add at one row) takes the window there
        with sqlite3.connect(gc.dir / "b.gcb") as c:
            assert c.execute("SELECT count(*) FROM dispatch WHERE op = 'gemm_add' AND m_lo <= 1 AND prefetch = 1 "
                             "AND target LIKE 'sm_90%'").fetchone()[0] > 0
    prompts = [[5 + (7 * i) % 700 for i in range(n)] for n in (9, 130)]
    runs = []
    for flags in ([], ["--l2-window", 0], ["--l2-window", 1]):
        srv = Server(model, str(gc.dir / "b.gcb"), "--backend", BACKEND, "--parallel", 1, "--ctx", 1024, *flags)
        got = []
        for p in prompts:
            status, _, text = srv.post("/v1/completions", {"prompt": p, "max_tokens": 12, "temperature": 0,
                                                           "ignore_eos": True, "return_token_ids": True,
                                                           "logprobs": 3, "cache_prompt": False}, timeout=600)
            assert status == 200, text
            c = json.loads(text)["choices"][0]
            got.append((c["token_ids"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]))
        rc, err = srv.stop()
        assert rc == 0, err
        runs.append((flags, got))
    for flags, got in runs[1:]:
        assert got == runs[0][1], f"gcore-serve {flags} served other values than the default window"
