"""gcore-serve with real clients on the loopback address: curl, the official
OpenAI JavaScript client (npm `openai`) and Python's http.client, streaming
and not; a bounded load test (16 clients x 20 requests); malformed JSON,
wrong types, oversize bodies, prompts over the context, a full queue and
clients that disconnect. Every answer is checked: greedy tokens equal
gcore-run's for the same prompt (from the same bundle), seeded sampling
equals gcore-run's with the same settings, and the server never crashes (it
still answers at the end and exits cleanly on SIGTERM, sanitizers silent)."""
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import BIN, SANITIZER_MARKS, run_tool  # noqa: E402
import llama_ref as R  # noqa: E402
from jsonref import is_object, is_prefix  # noqa: E402
import tinymodel as TM  # noqa: E402

VOCAB = 512
CTX = 256
JS = os.path.join(HERE, "js")
MODEL = "tiny"  # the id the server gives the model (the directory's name)


class Server:
    """gcore-serve on a free loopback port (--port 0; the port is read from
    its 'listening on' line), its stderr collected."""

    def __init__(self, model, bundle, *args, env=None):
        e = dict(os.environ)
        e.update(env or {})
        self.p = subprocess.Popen([os.path.join(BIN, "gcore-serve"), "-m", model, *(("-b", bundle) if bundle else ()),
                                   "--port", "0", *map(str, args)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=e)
        self.lines = []
        deadline = time.time() + 120
        while True:
            line = self.p.stderr.readline()
            if not line:
                raise AssertionError(f"gcore-serve exited before listening: {''.join(self.lines)}")
            self.lines.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
            assert time.time() < deadline, "gcore-serve did not start"
        self.drain = threading.Thread(target=lambda: self.lines.extend(iter(self.p.stderr.readline, "")),
                                      daemon=True)
        self.drain.start()

    def url(self, path=""):
        return f"http://127.0.0.1:{self.port}{path}"

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers, body text) of one request on a new connection."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
        r = c.getresponse()
        out = (r.status, dict(r.getheaders()), r.read().decode("utf-8", "replace"))
        c.close()
        return out

    def post(self, path, body, **kw):
        status, headers, text = self.request("POST", path, body, **kw)
        return status, headers, text

    def health(self):
        return json.loads(self.request("GET", "/health")[2])

    def stop(self):
        """SIGTERM; the exit code and everything it wrote on stderr."""
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=60)
        self.drain.join(timeout=10)
        return rc, "".join(self.lines)


def check_clean_exit(srv):
    assert srv.p.poll() is None, "gcore-serve died:\n" + "".join(srv.lines)
    rc, err = srv.stop()
    assert rc == 0, err
    for mark in SANITIZER_MARKS:
        assert mark not in err, err


def plain_usage(u):
    """usage without prompt_tokens_details, checked: the cached prompt
    tokens, fewer than the prompt's."""
    u = dict(u)
    cached = u.pop("prompt_tokens_details")["cached_tokens"]
    assert 0 <= cached < max(u["prompt_tokens"], 1), u
    return u


def sse(text):
    """The data payloads of a server-sent event stream, JSON decoded (but
    the final [DONE])."""
    events = [block[len("data: "):] for block in text.split("\n\n") if block.startswith("data: ")]
    assert events and events[-1] == "[DONE]", text[-500:]
    return [json.loads(e) for e in events[:-1]]


def stream_text(events, chat):
    text, ids, finish = "", [], None
    for ev in events:
        assert "error" not in ev, ev
        for c in ev["choices"]:
            text += (c["delta"].get("content") or "") if chat else c["text"]
            ids += c.get("token_ids", [])
            finish = c["finish_reason"] or finish
    return text, ids, finish


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, cache_dir):
    """A tiny Llama-3-style model with the project's byte-level tokenizer,
    its CPU bundle (gcore-gen --model: the batched decode kernels included)."""
    d = tmp_path_factory.mktemp("serve")
    model = str(d / MODEL)
    TM.write_model(model, seed=3, dtype="f16", dim=64, hidden_dim=160, n_layers=2, n_heads=4,
                   n_kv_heads=2, vocab=VOCAB, max_seq=CTX)
    TM.write_tokenizer(model, VOCAB)
    bundle = str(d / "tiny.gcb")
    r = run_tool("gcore-gen", "--model", model, "--target", "cpu", "--prefill", 16, "-o", bundle,
                 env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    return d, model, bundle


@pytest.fixture(scope="module")
def srv(tiny):
    d, model, bundle = tiny
    s = Server(model, bundle, "--parallel", 4, "--max-body", 65536)
    yield s
    if s.p.poll() is None:
        s.stop()


def gcore_run(tiny, *args, stdin=None):
    d, model, bundle = tiny
    r = run_tool("gcore-run", "-m", model, "-b", bundle, "--json", *args, cwd=str(d), input=stdin)
    assert r.rc == 0, r
    return [json.loads(line) for line in r.out.splitlines() if line.strip()]


def reference_ids(tiny, prompts, n):
    """gcore-run's greedy ids (EOS ignored) of each prompt (lists of ids),
    n tokens each, from one process (--tokens-file)."""
    d = tiny[0]
    path = d / f"prompts_{random.getrandbits(32)}.txt"
    path.write_text("".join(",".join(map(str, p)) + "\n" for p in prompts))
    out = gcore_run(tiny, "--tokens-file", path, "-n", n, "--temp", 0, "--ignore-eos")
    assert len(out) == len(prompts)
    return [o["tokens"] for o in out]


# ---------------------------------------------------------------- basics

def test_health_and_models(srv):
    h = srv.health()
    assert h == {"status": "ok", "slots": 4, "active": 0, "queued": 0}
    status, _, body = srv.request("GET", "/v1/models")
    assert status == 200
    m = json.loads(body)
    assert m["object"] == "list" and [x["id"] for x in m["data"]] == [MODEL]
    assert m["data"][0]["max_model_len"] == CTX
    status, _, body = srv.request("GET", f"/v1/models/{MODEL}")
    assert status == 200 and json.loads(body)["id"] == MODEL
    status, _, body = srv.request("GET", "/v1/models/gpt-4")
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"


def metrics(s):
    """GET /metrics parsed: {name with labels: value}, each sample line
    preceded by its family's HELP and TYPE lines."""
    status, headers, text = s.request("GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4"), (status, headers)
    out, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line and not line.startswith("# HELP "):
            name, value = line.rsplit(" ", 1)
            family = re.sub(r"_(bucket|sum|count)$", "", name.split("{")[0])  # a histogram's samples
            assert name.split("{")[0] in typed or family in typed, line
            out[name] = float(value)
    return out


HISTS = ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds")


def histogram(m, name):
    """A histogram's (buckets [(le, cumulative count)], sum, count), taken
    out of m; its buckets are cumulative and end at +Inf, which is the count."""
    pre = f"gcore:{name}"
    buckets = sorted((float(k.split('le="')[1].rstrip('"}')), m.pop(k)) for k in list(m)
                     if k.startswith(pre + "_bucket{"))
    total, count = m.pop(pre + "_sum"), m.pop(pre + "_count")
    assert buckets and buckets[-1][0] == float("inf") and buckets[-1][1] == count, buckets
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
    return buckets, total, count


def test_metrics(tiny):
    """/metrics counts what the answers' usage says: the prompt tokens (a
    prompt once, however many choices), those a slot's cache held, the
    tokens generated, the completions and chats by status class (a 400
    too; /health and /metrics not), and shows the slots and the requests
    running and waiting. Its latency histograms (vLLM's three) count each
    choice's first token, every later token's gap, each answer that
    succeeded; their sums lie within the time the client waited."""
    d, model, bundle = tiny
    s = Server(model, bundle, "--parallel", 2)
    try:
        zero = {"gcore:prompt_tokens_total": 0, "gcore:prompt_tokens_cached_total": 0,
                "gcore:generation_tokens_total": 0, **{f'gcore:requests_total{{status="{c}xx"}}': 0 for c in range(2, 6)},
                "gcore:requests_running": 0, "gcore:requests_waiting": 0, "gcore:slots": 2}
        m = metrics(s)
        assert all(histogram(m, h)[2] == 0 for h in HISTS) and m == zero
        usage, waited = [], 0.0
        for path, body in [("/v1/completions", {"prompt": "The capital of", "max_tokens": 5, "temperature": 0}),
                           ("/v1/completions", {"prompt": "The capital of", "max_tokens": 3, "n": 2}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                     "max_tokens": 4})]:
            t0 = time.time()
            status, _, text = s.post(path, body)
            waited += time.time() - t0
            assert status == 200, text
            usage.append(json.loads(text)["usage"])
        status, _, _ = s.post("/v1/completions", {"prompt": "x", "max_tokens": -1})
        assert status == 400
        s.health()
        want = dict(zero)
        want.update({"gcore:prompt_tokens_total": sum(u["prompt_tokens"] for u in usage),
                     "gcore:prompt_tokens_cached_total": sum((u.get("prompt_tokens_details") or {}).get(
                         "cached_tokens", 0) for u in usage),
                     "gcore:generation_tokens_total": sum(u["completion_tokens"] for u in usage),
                     'gcore:requests_total{status="2xx"}': 3, 'gcore:requests_total{status="4xx"}': 1})
        deadline = time.time() + 30  # a request counts when its answer is sent: after the client read it
        while (m := metrics(s)) and {k: v for k, v in m.items() if "_seconds" not in k} != want \
                and time.time() < deadline:
            time.sleep(0.05)
        h = {name: histogram(m, name) for name in HISTS}
        assert m == want, (m, want, usage)
        choices, gaps = 4, sum(u["completion_tokens"] for u in usage) - 4  # every choice generated a token
        assert [h[n][2] for n in HISTS] == [choices, gaps, 3], h
        assert all(0 < h[n][1] <= waited * h[n][2] for n in HISTS), (h, waited)
        assert usage[1]["prompt_tokens"] == usage[0]["prompt_tokens"] and want["gcore:generation_tokens_total"] > 0
    finally:
        check_clean_exit(s)


def test_completion_matches_gcore_run(srv, tiny):
    """A text prompt, greedy: the ids and text gcore-run -p gives, the
    prompt tokenized the same way (BOS first)."""
    prompt = "The capital of France is"
    ref = gcore_run(tiny, "-p", prompt, "-n", 12, "--temp", 0, "--ignore-eos")[0]
    status, _, body = srv.post("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 12,
                                                   "temperature": 0, "ignore_eos": True,
                                                   "return_token_ids": True})
    assert status == 200, body
    r = json.loads(body)
    c = r["choices"][0]
    assert r["object"] == "text_completion" and r["model"] == MODEL and r["id"].startswith("cmpl-")
    assert c["token_ids"] == ref["tokens"] and c["text"] == ref["text"]
    assert c["finish_reason"] == "length"
    assert plain_usage(r["usage"]) == {"prompt_tokens": ref["prompt_tokens"], "completion_tokens": 12,
                                       "total_tokens": ref["prompt_tokens"] + 12}


def test_token_prompt_and_default_max_tokens(srv, tiny):
    """A prompt of ids runs as given (no BOS); max_tokens defaults to 16."""
    prompt = [5, 77, 300, 12, 9]
    ref = reference_ids(tiny, [prompt], 16)[0]
    status, _, body = srv.post("/v1/completions", {"model": MODEL, "prompt": prompt, "temperature": 0,
                                                   "ignore_eos": True, "return_token_ids": True})
    assert status == 200, body
    c = json.loads(body)["choices"][0]
    assert c["prompt_token_ids"] == prompt and c["token_ids"] == ref


def test_completion_stream_with_curl(srv, tiny):
    """curl -N with stream: true: server-sent events whose pieces add up to
    the non-streamed text and ids; then data: [DONE]."""
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    _, _, whole = srv.post("/v1/completions", body)
    whole = json.loads(whole)["choices"][0]
    p = subprocess.run(["curl", "-sN", "--fail-with-body", "-H", "Content-Type: application/json",
                        "-D", "-", "-d", json.dumps(dict(body, stream=True)), srv.url("/v1/completions")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p
    head, _, rest = p.stdout.partition("\n\n")  # (text mode: \r\n read as \n)
    assert "text/event-stream" in head and "chunked" in head.lower(), head
    events = sse(rest)
    text, ids, finish = stream_text(events, chat=False)
    assert (text, ids, finish) == (whole["text"], whole["token_ids"], "length")
    assert all(e["object"] == "text_completion" for e in events)


def test_chat_matches_gcore_run_chat(srv, tiny):
    """A chat (system + user) through the model's chat template: the prompt
    ids and the reply gcore-run --chat gives, streamed and not."""
    ref = gcore_run(tiny, "--chat", "--system", "Be brief.", "-n", 10, "--temp", 0, "--ignore-eos",
                    stdin="What is a bundle?\n")[0]
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a bundle?"}]
    body = {"model": MODEL, "messages": msgs, "max_tokens": 10, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    status, _, text = srv.post("/v1/chat/completions", body)
    assert status == 200, text
    r = json.loads(text)
    c = r["choices"][0]
    assert r["object"] == "chat.completion" and c["message"]["role"] == "assistant"
    assert c["prompt_token_ids"] == ref["prompt_ids"] and c["token_ids"] == ref["tokens"]
    assert c["message"]["content"] == ref["text"]
    status, _, text = srv.post("/v1/chat/completions", dict(body, stream=True))
    events = sse(text)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert stream_text(events, chat=True) == (ref["text"], ref["tokens"], "length")
    # content as text parts: the same prompt
    parts = [msgs[0], {"role": "user", "content": [{"type": "text", "text": "What is "},
                                                   {"type": "text", "text": "a bundle?"}]}]
    status, _, text = srv.post("/v1/chat/completions", dict(body, messages=parts))
    assert json.loads(text)["choices"][0]["prompt_token_ids"] == ref["prompt_ids"]
    # a conversation: the first turn, the reply closed by the end token, the next turn
    turns = msgs + [{"role": "assistant", "content": "A file."}, {"role": "user", "content": "And?"}]
    status, _, text = srv.post("/v1/chat/completions", dict(body, messages=turns))
    assert status == 200, text
    ids = json.loads(text)["choices"][0]["prompt_token_ids"]
    assert ids[:len(ref["prompt_ids"])] == ref["prompt_ids"] and VOCAB - 3 in ids[len(ref["prompt_ids"]):]


def test_user_messages_in_a_row(srv):
    """Two user messages in a row are two user messages, each closed by
    <|eot_id|>, then one assistant header, as Llama 3's template renders
    them (not an assistant header after each)."""
    def ids(msgs):
        status, _, text = srv.post("/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": 1,
                                                             "return_token_ids": True})
        assert status == 200, text
        return json.loads(text)["choices"][0]["prompt_token_ids"]
    a, c = ids([{"role": "user", "content": "a"}]), ids([{"role": "user", "content": "c"}])
    eot = VOCAB - 3
    last = len(a) - 1 - a[::-1].index(eot)  # a: BOS, user a, eot, then the assistant header
    got = ids([{"role": "user", "content": "a"}, {"role": "user", "content": "c"}])
    assert got == a[:last + 1] + c[1:], (got, a, c)
    # two assistant messages in a row: the second gets its own assistant header
    ua, ux, uc = ({"role": "user", "content": "a"}, {"role": "assistant", "content": "x"},
                  {"role": "user", "content": "c"})
    one, two = ids([ua, ux, uc]), ids([ua, ux, ux, uc])
    k = one.index(eot, len(a)) + 1  # one: a, then "x" and eot, then the user turn c
    assert two == one[:k] + a[last + 1:] + one[len(a):k] + one[k:], (two, one)


def test_ignore_eos_goes_past_the_end_of_turn(srv):
    """ignore_eos (vLLM's) ignores the chat template's end of turn too:
    a sampled reply that ends at <|eot_id|> goes on, the same tokens first
    (same seed), to max_tokens, finish_reason "length"."""
    eot, n = VOCAB - 3, 200
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me more."}], "max_tokens": n,
            "temperature": 1.0, "return_token_ids": True}
    for seed in range(1, 40):
        c = json.loads(srv.post("/v1/chat/completions", dict(body, seed=seed))[2])["choices"][0]
        if c["finish_reason"] == "stop" and c["token_ids"] and c["token_ids"][-1] == eot:
            break
    else:
        pytest.skip("no sampled reply of 40 ended at the end of turn within 200 tokens")
    d = json.loads(srv.post("/v1/chat/completions", dict(body, seed=seed, ignore_eos=True))[2])["choices"][0]
    assert d["finish_reason"] == "length" and len(d["token_ids"]) == n, d
    assert d["token_ids"][:len(c["token_ids"])] == c["token_ids"]


def test_chat_stops_at_end_of_turn(srv, tiny):
    """Without ignore_eos a chat reply ends at the template's end token
    (<|eot_id|>) or at max_tokens: finish_reason says which."""
    status, _, text = srv.post("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                                                        "max_tokens": 30, "temperature": 0, "return_token_ids": True})
    c = json.loads(text)["choices"][0]
    eot = VOCAB - 3  # tinymodel's <|eot_id|>
    assert c["finish_reason"] == ("stop" if c["token_ids"][-1] in (eot, VOCAB - 1) else "length")


def test_openai_js_client(srv, tiny):
    """The official OpenAI JavaScript client: chat and completions, streamed
    and not, the model list, and an API error it understands."""
    if not shutil.which("node") or not os.path.isdir(os.path.join(JS, "node_modules", "openai")):
        pytest.skip("the npm openai package is not installed (make deps-test)")
    spec = {"chat": [{"role": "user", "content": "Tell me a story."}], "prompt": "Hello, world", "max_tokens": 9}
    p = subprocess.run(["node", os.path.join(JS, "serve_client.js"), srv.url("/v1"), MODEL, json.dumps(spec)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    chat_ref = gcore_run(tiny, "--chat", "-n", 9, "--temp", 0, stdin="Tell me a story.\n")[0]
    cmpl_ref = gcore_run(tiny, "-p", "Hello, world", "-n", 9, "--temp", 0)[0]
    for key, ref in (("chat", chat_ref), ("chat_stream", chat_ref), ("completion", cmpl_ref),
                     ("completion_stream", cmpl_ref)):
        assert out[key]["ids"] == ref["tokens"], (key, out[key], ref)
        assert out[key]["text"] == ref["text"], (key, out[key], ref)
        assert out[key]["finish"] in ("stop", "length")
    assert out["chat_stream"]["roles"] == ["assistant"]
    assert out["chat_stream"]["usage"]["completion_tokens"] == len(chat_ref["tokens"])
    assert out["models"] == [MODEL]
    assert out["error"]["status"] == 404 and out["error"]["code"] == "model_not_found"


def test_openai_js_client_structured_outputs(tmp_path, cache_dir):
    """Structured outputs as the OpenAI JavaScript client sends them from a
    zod schema (zodResponseFormat: a pattern, the formats date, date-time,
    uuid, email and ipv4, multipleOf, bounds, maxLength, OpenAPI's
    nullable) and as it reads them back (chat.completions.parse: zod
    itself validates every reply): greedy and sampled, each reply parses."""
    if not shutil.which("node") or not os.path.isdir(os.path.join(JS, "node_modules", "zod")):
        pytest.skip("the npm zod package is not installed (make deps-test)")
    model = str(tmp_path / MODEL)  # the serve fixture's model with room for an object of a dozen fields
    TM.write_model(model, seed=3, dtype="f16", dim=64, hidden_dim=160, n_layers=2, n_heads=4, n_kv_heads=2,
                   vocab=VOCAB, max_seq=1024)
    TM.write_tokenizer(model, VOCAB)
    bundle = str(tmp_path / "tiny.gcb")
    r = run_tool("gcore-gen", "--model", model, "--target", "cpu", "--prefill", 16, "-o", bundle,
                 env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    srv = Server(model, bundle, "--parallel", 2)
    try:
        p = subprocess.run(["node", os.path.join(JS, "serve_zod.js"), srv.url("/v1"), MODEL, "6"],
                           capture_output=True, text=True, timeout=600)
    finally:
        srv.stop()
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    props = out["schema"]["properties"]
    assert props["day"]["format"] == "date" and "pattern" in props["code"] and props["open"].get("nullable"), props
    for r in out["replies"]:
        assert "error" not in r and r["finish"] == "stop", r
        assert r["parsed"] == json.loads(r["content"]) and set(r["parsed"]) == set(props), r


def test_seeded_sampling_matches_gcore_run(srv, tiny):
    """temperature, top_p and seed: the tokens gcore-run samples with the
    same settings (no top-k, no min-p), the same on every request."""
    prompt = [1, 50, 100, 150]
    path = tiny[0] / "sampled.txt"
    path.write_text("1,50,100,150\n")
    ref = gcore_run(tiny, "--tokens-file", path, "-n", 16, "--temp", 0.9, "--top-p", 0.8, "--top-k", 0,
                    "--min-p", 0, "--seed", 1234, "--ignore-eos")[0]["tokens"]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 16, "temperature": 0.9, "top_p": 0.8,
            "seed": 1234, "ignore_eos": True, "return_token_ids": True}
    got = [json.loads(srv.post("/v1/completions", body)[2])["choices"][0]["token_ids"] for _ in range(2)]
    assert got == [ref, ref]
    other = json.loads(srv.post("/v1/completions", dict(body, seed=99))[2])["choices"][0]["token_ids"]
    assert other != ref


def test_stop_strings(srv, tiny):
    """A stop string ends the completion before it (finish_reason stop),
    streamed or not; text that only begins a stop string is held back."""
    body = {"model": MODEL, "prompt": "It was a dark and stormy night", "max_tokens": 24, "temperature": 0,
            "ignore_eos": True}
    full = json.loads(srv.post("/v1/completions", body)[2])["choices"][0]["text"]
    at = [i for i in range(2, len(full) - 1) if not set(full[i:i + 2]) & {"\x00", "\ufffd"}]
    assert at, full  # two characters after the start that can be a stop string
    stop = full[at[0]:at[0] + 2]
    want = full[:full.index(stop)]
    r = json.loads(srv.post("/v1/completions", dict(body, stop=[stop, "\x7fnever"]))[2])["choices"][0]
    assert (r["text"], r["finish_reason"]) == (want, "stop")
    text, _, finish = stream_text(sse(srv.post("/v1/completions", dict(body, stop=stop, stream=True))[2]), False)
    assert (text, finish) == (want, "stop")


# ---------------------------------------------------------------- request fields

# ---------------------------------------------------------------- logprobs

def token_texts(model):
    """Each id's text as logprobs name it, from tokenizer.json (written
    here, not by gcore): its bytes when they are whole UTF-8, else OpenAI's
    "bytes:\\xNN" spelling; and its bytes."""
    with open(os.path.join(model, "tokenizer.json")) as f:
        tj = json.load(f)
    back = {ch: b for b, ch in TM.byte_chars().items()}
    raw = {i: bytes(back[ch] for ch in t) for t, i in tj["model"]["vocab"].items()}
    raw.update({a["id"]: a["content"].encode() for a in tj["added_tokens"]})

    def text(b):
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return "bytes:" + "".join("\\x%02x" % x for x in b)
    return {i: text(b) for i, b in raw.items()}, raw


def ref_logprobs(model, ids):
    """The fp64 reference's log-softmax for ids (row k: the distribution of
    ids[k + 1]) and each row's tolerance: the logits' (test_llama's 1e-4 of
    the row's largest), twice, as the log-sum-exp adds its own."""
    w, cfg = R.load(model)
    lg = R.forward(w, cfg, ids)
    m = lg.max(axis=1, keepdims=True)
    lp = lg - (m + np.log(np.exp(lg - m).sum(axis=1, keepdims=True)))
    return lp, 2e-4 * np.abs(lg).max(axis=1) + 1e-5


def assert_model_answer(model, prompt, c):
    """Choice c's greedy tokens after prompt are the model's: each token's
    log-probability (completion logprobs) within the fp64 reference's
    tolerance, and within it of its row's largest."""
    lp, tol = ref_logprobs(model, prompt + c["token_ids"])
    for j, (i, x) in enumerate(zip(c["token_ids"], c["logprobs"]["token_logprobs"])):
        row, t = lp[len(prompt) + j - 1], tol[len(prompt) + j - 1]
        assert abs(x - row[i]) <= t and row[i] >= row.max() - t, (j, x, row[i], row.max())


def assert_top(got, ref_row, tol, what):
    """got: the reported top log-probabilities, most likely first; they are
    the reference's top len(got) values (each within tol), in order."""
    want = np.sort(ref_row)[::-1][:len(got)]
    assert np.all(np.diff(got) <= 0), (what, got)
    assert np.all(np.abs(np.asarray(got) - want) <= tol), (what, got, want.tolist())


def test_completion_logprobs_and_echo_match_the_reference(srv, tiny):
    """/v1/completions with "logprobs": 5 and "echo": true, greedy, a prompt
    of 40 ids (three prefill chunks of 16): the text is the prompt's then
    the completion's; every token's log-probability is the fp64
    reference's log-softmax (the prompt's first: null), its top 5 are the
    reference's 5 largest, named by their text with the chosen token's
    added; text_offset counts characters of that text. The same request
    without echo gives the completion's part; streamed, the same lists in
    chunks (the prompt's first); without logprobs the same tokens (the
    device's argmax then)."""
    model = tiny[1]
    texts, raw = token_texts(model)
    prompt = [(37 * i + 11) % 500 for i in range(40)]
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 7, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, "logprobs": 5, "echo": True}
    c = completion(srv, body)
    gen = c["token_ids"]
    assert gen == completion(srv, dict(body, logprobs=None, echo=False))["token_ids"]
    ids = prompt + gen
    lp, tol = ref_logprobs(model, ids)
    L = c["logprobs"]
    assert L["tokens"] == [texts[i] for i in ids]
    assert L["token_logprobs"][0] is None and L["top_logprobs"][0] is None
    for k in range(1, len(ids)):
        want = lp[k - 1, ids[k]]
        assert abs(L["token_logprobs"][k] - want) <= tol[k - 1], (k, L["token_logprobs"][k], want)
        top = L["top_logprobs"][k]
        best = [v for t, v in top.items() if t != texts[ids[k]] or ids[k] in np.argsort(-lp[k - 1])[:5]]
        assert_top(sorted(best, reverse=True)[:5], lp[k - 1], tol[k - 1], k)
        assert abs(top[texts[ids[k]]] - want) <= tol[k - 1]
        assert len(top) in (5, 6)
    assert [int(np.argmax(lp[k - 1])) for k in range(len(prompt), len(ids))] == gen  # greedy: the argmax
    text = c["text"]
    special = {a["id"] for a in json.load(open(os.path.join(model, "tokenizer.json")))["added_tokens"]}
    echo = b"".join(raw[i] for i in prompt if i not in special).decode("utf-8", "replace")
    assert text.startswith(echo)
    # text_offset: characters (code points) of the tokens before, control tokens counting none
    chars = [0 if i in special else sum((b & 0xC0) != 0x80 for b in raw[i]) for i in ids]
    assert L["text_offset"] == np.concatenate([[0], np.cumsum(chars)[:-1]]).tolist()
    plain = completion(srv, dict(body, echo=False))
    P = plain["logprobs"]
    assert plain["text"] == text[len(echo):] and P["tokens"] == L["tokens"][len(prompt):]
    # the first token's row: the last of a prefill that wrote every row's, or
    # of one that wrote only it (another LM-head kernel: fp32 rounding apart)
    assert P["token_logprobs"] == pytest.approx(L["token_logprobs"][len(prompt):], abs=1e-5)
    for x, y in zip(P["top_logprobs"], L["top_logprobs"][len(prompt):]):
        assert x == pytest.approx(y, abs=1e-5)
    status, _, s = srv.post("/v1/completions", dict(body, stream=True))
    events = sse(s)
    merged = {k: [] for k in L}
    for ev in events:
        lps = ev["choices"][0]["logprobs"]
        for k in merged:
            merged[k] += lps[k] if lps else []
    assert events[0]["choices"][0]["text"] == echo and len(events[0]["choices"][0]["logprobs"]["tokens"]) == 40
    assert merged == L, "the stream's logprobs differ from the answer's"
    assert stream_text(events, False)[0] == text


def test_chat_logprobs_and_sampling(srv, tiny):
    """A chat with "logprobs": true and "top_logprobs": 3, sampled (seed):
    the same tokens as without logprobs; each token's log-probability is the
    reference's for the model's distribution (before temperature and top-p,
    vLLM's default), with its bytes; its top 3 the reference's 3 largest;
    streamed, the same list (bit for bit: no prompt cache, whose last
    prompt token runs alone, in other kernels)."""
    model = tiny[1]
    texts, raw = token_texts(model)
    msgs = [{"role": "user", "content": "The capital of France is"}]
    body = {"model": MODEL, "messages": msgs, "max_tokens": 8, "temperature": 0.9, "top_p": 0.9, "seed": 7,
            "ignore_eos": True, "return_token_ids": True, "logprobs": True, "top_logprobs": 3,
            "cache_prompt": False}
    c = completion(srv, body, "/v1/chat/completions")
    plain = completion(srv, dict(body, logprobs=False, top_logprobs=None), "/v1/chat/completions")
    assert c["token_ids"] == plain["token_ids"] and plain["logprobs"] is None
    ids = c["prompt_token_ids"] + c["token_ids"]
    lp, tol = ref_logprobs(model, ids)
    n = len(c["prompt_token_ids"])
    content = c["logprobs"]["content"]
    assert len(content) == len(c["token_ids"])
    for j, (x, i) in enumerate(zip(content, c["token_ids"])):
        k = n + j
        assert x["token"] == texts[i] and bytes(x["bytes"]) == raw[i]
        assert abs(x["logprob"] - lp[k - 1, i]) <= tol[k - 1], (j, x["logprob"], lp[k - 1, i])
        assert len(x["top_logprobs"]) == 3
        assert_top([y["logprob"] for y in x["top_logprobs"]], lp[k - 1], tol[k - 1], j)
        for y in x["top_logprobs"]:
            assert texts[raw_id(raw, bytes(y["bytes"]))] == y["token"]
    status, _, s = srv.post("/v1/chat/completions", dict(body, stream=True))
    events = sse(s)
    streamed = [x for ev in events for x in ((ev["choices"][0]["logprobs"] or {}).get("content") or [])]
    assert streamed == content


def test_prompt_cache(tiny):
    """A prompt that begins as a free slot's last request did (its prompt
    and the tokens it fed back: a chat's next turn) starts after that part:
    usage.prompt_tokens_details.cached_tokens counts it, and the answer is
    still the model's (each token's log-probability within the fp64
    reference's tolerance, the greedy token its largest). Of two free slots
    the one the prompt continues serves; a prompt that continues neither
    takes the empty one rather than overwrite the other's conversation.
    cache_prompt false, echo with logprobs and --no-prompt-cache run the
    whole prompt."""
    d, model, bundle = tiny
    base = {"model": MODEL, "max_tokens": 6, "temperature": 0, "ignore_eos": True, "return_token_ids": True,
            "logprobs": 2}

    def post(s, prompt, **kw):
        status, _, text = s.post("/v1/completions", dict(base, prompt=prompt, **kw))
        assert status == 200, text
        r = json.loads(text)
        return r["choices"][0], r["usage"]["prompt_tokens_details"]["cached_tokens"]

    p1, p2 = [5, 77, 300, 12, 9, 40, 41, 42], [200, 201, 202, 203]
    s = Server(model, bundle, "--parallel", 2)
    try:
        a, cached = post(s, p1)
        assert cached == 0
        b, cached = post(s, p2)  # the empty slot, not p1's
        assert cached == 0
        p3 = p1 + a["token_ids"] + [7, 8]
        c, cached = post(s, p3)
        assert cached == len(p1) + 5, cached  # a's prompt and the 5 tokens it fed back (not its last)
        assert_model_answer(model, p3, c)
        _, cached = post(s, p2 + [9])  # b's slot, though c's holds more
        assert cached == len(p2), cached
        _, cached = post(s, p3, cache_prompt=False)
        assert cached == 0
        _, cached = post(s, p3, echo=True)  # echo with logprobs: every prompt row's logits
        assert cached == 0
        _, cached = post(s, p3)  # ... and the slot it ran in still serves
        assert cached == len(p3) - 1, cached
    finally:
        assert s.stop()[0] == 0
    s = Server(model, bundle, "--parallel", 1, "--no-prompt-cache")
    try:
        for _ in range(2):
            assert post(s, p1)[1] == 0
    finally:
        assert s.stop()[0] == 0


def test_prompt_shared_between_slots(tiny):
    """The other choices of a prompt (n) start from the first's keys and
    values, copied on the device from its slot: with --prefill-chunk 16 a
    100-token prompt takes 7 passes for the first choice and one each for
    the other two (9, where each alone would take 21; -v's line counts
    them, and the 99 cached tokens of each). A request whose prompt begins
    as a free slot's cache (a shared system prompt of 40 tokens) but would
    overwrite more than it keeps there takes the empty slot, and that part
    is copied into it. Every answer is the model's: each token's
    log-probability within the fp64 reference's tolerance, the greedy one
    its largest."""
    d, model, bundle = tiny
    rng = random.Random(11)
    system = [rng.randrange(VOCAB - 8) for _ in range(40)]
    p1, p2 = system + [rng.randrange(VOCAB - 8) for _ in range(60)], system + [7, 8, 9]
    body = {"model": MODEL, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "return_token_ids": True,
            "logprobs": 1}

    s = Server(model, bundle, "--parallel", 4, "--prefill-chunk", 16, "-v")
    try:
        status, _, text = s.post("/v1/completions", dict(body, prompt=p1, n=3))
        assert status == 200, text
        r = json.loads(text)
        for c in r["choices"]:
            assert_model_answer(model, p1, c)
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # the first choice's, as usage counts
        status, _, text = s.post("/v1/completions", dict(body, prompt=p2))
        assert status == 200, text
        r = json.loads(text)
        assert_model_answer(model, p2, r["choices"][0])
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == len(system)
    finally:
        check_clean_exit(s)
    lines = re.findall(r"POST '/v1/completions' 200: (\d+) prompt tokens \((\d+) passes, (\d+) cached\)",
                       "".join(s.lines))
    assert [tuple(map(int, x)) for x in lines] == [(100, 9, 2 * 99), (43, 1, 40)], "".join(s.lines)


def test_choices_and_batched_prompts(srv, tiny):
    """n choices of each of several prompts (a batch: strings and ids), as
    OpenAI and vLLM answer them: choice p·n + j of prompt p, sampled with
    the request's seed plus j, has the tokens a request of that prompt
    alone with that seed gets; usage counts each prompt once and every
    choice's tokens; streamed, the same tokens under each chunk's index;
    with logprobs and echo, each choice's lists are its own request's."""
    prompts = ["The capital of France is", [5, 77, 300, 12, 9], "Once upon a time"]
    base = {"model": MODEL, "max_tokens": 8, "temperature": 0.9, "seed": 42, "ignore_eos": True,
            "return_token_ids": True}
    want, ptoks = [], []
    for p in prompts:
        for j in range(2):
            c = completion(srv, dict(base, prompt=p, seed=42 + j))
            want.append(c["token_ids"])
        ptoks.append(len(c["prompt_token_ids"]))
    assert want[0] != want[1], "two seeds that sample the same: pick another seed"
    status, _, text = srv.post("/v1/completions", dict(base, prompt=prompts, n=2))
    assert status == 200, text
    r = json.loads(text)
    assert [c["index"] for c in r["choices"]] == list(range(6))
    assert [c["token_ids"] for c in r["choices"]] == want
    assert plain_usage(r["usage"]) == {"prompt_tokens": sum(ptoks), "completion_tokens": 48,
                                       "total_tokens": sum(ptoks) + 48}
    status, _, text = srv.post("/v1/completions", dict(base, prompt=prompts, n=2, stream=True,
                                                       stream_options={"include_usage": True}))
    events = sse(text)
    got = [[] for _ in range(6)]
    finished = set()
    for ev in events[:-1]:
        (ch,) = ev["choices"]
        got[ch["index"]] += ch.get("token_ids", [])
        if ch["finish_reason"]:
            finished.add(ch["index"])
    assert got == want and finished == set(range(6))
    assert plain_usage(events[-1]["usage"]) == plain_usage(r["usage"]) and events[-1]["choices"] == []
    # greedy: every choice the same, gcore-run's
    ref = reference_ids(tiny, [[5, 77, 300, 12, 9]], 6)[0]
    c3 = json.loads(srv.post("/v1/completions", dict(base, prompt=[5, 77, 300, 12, 9], n=3, temperature=0,
                                                     max_tokens=6))[2])["choices"]
    assert [c["token_ids"] for c in c3] == [ref] * 3
    # logprobs and echo per choice
    lp = dict(base, prompt=prompts[:2], n=2, logprobs=2, echo=True)
    both = json.loads(srv.post("/v1/completions", lp)[2])["choices"]
    for i, c in enumerate(both):
        alone = completion(srv, dict(lp, prompt=prompts[i // 2], n=1, seed=42 + i % 2))
        assert c["text"] == alone["text"] and c["token_ids"] == alone["token_ids"]
        assert c["logprobs"]["tokens"] == alone["logprobs"]["tokens"]
        assert c["logprobs"]["token_logprobs"] == pytest.approx(alone["logprobs"]["token_logprobs"], abs=1e-5)


def test_chat_choices(srv):
    """A chat's n choices: choice j is the chat alone with the seed plus j,
    streamed or not."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 6,
            "temperature": 1.0, "seed": 9, "ignore_eos": True, "return_token_ids": True}
    want = [completion(srv, dict(body, seed=9 + j), "/v1/chat/completions")["token_ids"] for j in range(3)]
    r = json.loads(srv.post("/v1/chat/completions", dict(body, n=3))[2])
    assert [c["token_ids"] for c in r["choices"]] == want and [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert r["usage"]["completion_tokens"] == 18
    events = sse(srv.post("/v1/chat/completions", dict(body, n=3, stream=True))[2])
    got, roles = [[], [], []], [0, 0, 0]
    for ev in events:
        (ch,) = ev["choices"]
        got[ch["index"]] += ch.get("token_ids", [])
        roles[ch["index"]] += ch["delta"].get("role") == "assistant"
    assert got == want and roles == [1, 1, 1]


def test_choices_of_a_client_that_leaves_are_cancelled(slow):
    """A stream of 2 choices whose client resets the connection: both
    slots are freed at once."""
    body = json.dumps({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 250, "stream": True, "n": 2,
                       "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", slow.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    wait_for(lambda: slow.health()["active"] == 2, "both choices to start")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    wait_for(lambda: slow.health()["active"] == 0, "both choices to be cancelled", timeout=2)
    status, _, text = slow.post("/v1/completions", {"model": MODEL, "prompt": [7, 8], "max_tokens": 2, "n": 3})
    assert status == 400 and "more than the queue holds" in text, text
    # all or none: with both slots busy and one of the 2 places in the queue
    # taken, 2 choices get 503 (and none of them waits)
    busy = [open_stream(slow) for _ in range(2)]
    wait_for(lambda: slow.health()["active"] == 2, "two streams to run")
    waiting = socket.create_connection(("127.0.0.1", slow.port), timeout=30)
    one = json.dumps({"model": MODEL, "prompt": [1], "max_tokens": 2}).encode()
    waiting.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(one) + one)
    wait_for(lambda: slow.health()["queued"] == 1, "a request to wait")
    status, _, text = slow.post("/v1/completions", {"model": MODEL, "prompt": [7, 8], "max_tokens": 2, "n": 2})
    assert status == 503 and slow.health()["queued"] == 1, text
    for s in busy + [waiting]:
        s.close()
    wait_for(lambda: slow.health()["active"] == 0 and slow.health()["queued"] == 0, "the streams to be cancelled")


def test_lm_eval_loglikelihood_requests(srv, tiny):
    """The request lm-evaluation-harness's local-completions model sends to
    score continuations (a batch of token-id prompts, "echo": true,
    "logprobs": 1, "max_tokens": 1, temperature 0), read the way it reads
    it (token_logprobs[ctxlen:-1] summed; is_greedy: each continuation
    token's logprob the largest of its top_logprobs): the sums are the fp64
    reference's, and a continuation made of the model's own greedy tokens
    is greedy while another is not."""
    model = tiny[1]
    ctx = [7, 300, 41, 99, 5]
    greedy = reference_ids(tiny, [ctx], 3)[0]
    other = [(t + 1) % 500 for t in greedy]
    conts = [greedy, other]
    body = {"model": MODEL, "prompt": [ctx + c for c in conts], "temperature": 0, "max_tokens": 1,
            "logprobs": 1, "seed": 1234, "echo": True}
    status, _, text = srv.post("/v1/completions", body)
    assert status == 200, text
    choices = json.loads(text)["choices"]
    assert len(choices) == 2
    for cont, ch in zip(conts, choices):
        lp = ch["logprobs"]["token_logprobs"][len(ctx):-1]
        tops = ch["logprobs"]["top_logprobs"][len(ctx):-1]
        ref, tol = ref_logprobs(model, ctx + cont)
        want = sum(ref[len(ctx) - 1 + k, cont[k]] for k in range(len(cont)))
        assert abs(sum(lp) - want) <= sum(tol), (sum(lp), want)
        is_greedy = all(t == max(top.values()) for t, top in zip(lp, tops))
        assert is_greedy == (cont == greedy), (cont, lp, tops)


def raw_id(raw, b):
    return next(i for i, x in raw.items() if x == b)


def test_logprobs_of_min_tokens_are_the_models(srv, tiny):
    """min_tokens keeps end tokens out of the draw, not out of the
    distribution: each token's logprob is the model's, and sampling with
    logprobs gives the tokens it gives without."""
    model = tiny[1]
    body = {"model": MODEL, "prompt": [3, 4, 5], "max_tokens": 6, "min_tokens": 6, "temperature": 1.0,
            "seed": 11, "return_token_ids": True, "logprobs": 2}
    c = completion(srv, body)
    assert c["token_ids"] == completion(srv, dict(body, logprobs=None))["token_ids"]
    ids = [3, 4, 5] + c["token_ids"]
    lp, tol = ref_logprobs(model, ids)
    for j, v in enumerate(c["logprobs"]["token_logprobs"]):
        assert abs(v - lp[2 + j, ids[3 + j]]) <= tol[2 + j]


def test_logprobs_errors(srv):
    assert_errors(srv, "/v1/completions", [
        (b'{"prompt": "x", "logprobs": 21}', 400, "logprobs", "from 0 to 20"),
        (b'{"prompt": "x", "logprobs": -1}', 400, "logprobs", "from 0 to 20"),
        (b'{"prompt": "x", "logprobs": true}', 400, "logprobs", "an integer"),
        (b'{"prompt": "x", "logprobs": 1.5}', 400, "logprobs", "an integer"),
        (b'{"prompt": "x", "top_logprobs": 2}', 400, "top_logprobs", "chat completions"),
        (b'{"prompt": "x", "echo": 1}', 400, "echo", "a boolean"),
    ])
    chat = b'{"messages": [{"role": "user", "content": "hi"}], %s}'
    assert_errors(srv, "/v1/chat/completions", [
        (chat % b'"top_logprobs": 2', 400, "top_logprobs", "needs \"logprobs\": true"),
        (chat % b'"logprobs": false, "top_logprobs": 2', 400, "top_logprobs", "needs"),
        (chat % b'"logprobs": true, "top_logprobs": 21', 400, "top_logprobs", "from 0 to 20"),
        (chat % b'"logprobs": 3', 400, "logprobs", "a boolean"),
        (chat % b'"echo": true', 400, "echo", "/v1/completions"),
        (chat % b'"echo": "no"', 400, "echo", "a boolean"),
    ])
    ok = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "echo": False,
          "logprobs": False}
    assert completion(srv, ok, "/v1/chat/completions")["logprobs"] is None  # vLLM's chat echo, off


def completion(srv, body, path="/v1/completions"):
    """The first choice of a request that must succeed."""
    status, _, text = srv.post(path, body)
    assert status == 200, (body, text)
    return json.loads(text)["choices"][0]


def assert_errors(srv, path, cases):
    """Each (body, status, param, needle): that status, OpenAI's error shape,
    the field named, needle in the message; the server keeps serving."""
    for body, status, param, needle in cases:
        got, headers, text = srv.post(path, body)
        assert got == status, (body[:80], got, text)
        assert headers["Content-Type"] == "application/json"
        err = json.loads(text)["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
        assert err["type"] == "invalid_request_error" and err["param"] == param, (body[:80], err)
        assert needle in err["message"], (body[:80], err)
    assert srv.health()["status"] == "ok"


def test_repetition_penalty_matches_gcore_run(srv, tiny):
    """repetition_penalty (vLLM's) and repeat_penalty (llama.cpp's) are
    gcore-run --repeat-penalty: greedy or seeded, the same tokens; both
    given must agree; repeat_last_n 0 turns it off (llama.cpp's)."""
    prompt = [1, 50, 100, 150, 50, 100]
    path = tiny[0] / "penalty.txt"
    path.write_text(",".join(map(str, prompt)) + "\n")
    base = {"model": MODEL, "prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    plain = completion(srv, base)["token_ids"]
    for temp, seed in ((0, 0), (0.8, 77)):
        ref = gcore_run(tiny, "--tokens-file", path, "-n", 24, "--temp", temp, "--top-k", 0, "--top-p", 1,
                        "--min-p", 0, "--seed", seed, "--repeat-penalty", 1.8, "--ignore-eos")[0]["tokens"]
        if temp == 0:
            assert ref != plain, "the penalty changes nothing on this prompt: the test proves nothing"
        for key in ("repetition_penalty", "repeat_penalty"):
            got = completion(srv, dict(base, temperature=temp, seed=seed, **{key: 1.8}))["token_ids"]
            assert got == ref, (key, temp)
    both = completion(srv, dict(base, repetition_penalty=1.8, repeat_penalty=1.8))["token_ids"]
    assert both == gcore_run(tiny, "--tokens-file", path, "-n", 24, "--temp", 0, "--repeat-penalty", 1.8,
                             "--ignore-eos")[0]["tokens"]
    assert completion(srv, dict(base, repeat_penalty=1.8, repeat_last_n=0))["token_ids"] == plain
    assert completion(srv, dict(base, repetition_penalty=1.0))["token_ids"] == plain
    # the window: vLLM's whole sequence for repetition_penalty alone, llama.cpp's 64 for repeat_penalty
    long = [1] + list(range(20, 180)) + [7] * 60  # 64 back: mostly 7s; the whole: 160 more ids
    path.write_text(",".join(map(str, long)) + "\n")
    runs = {n: gcore_run(tiny, "--tokens-file", path, "-n", 8, "--temp", 0, "--repeat-penalty", 1.8,
                         "--repeat-last-n", n, "--ignore-eos")[0]["tokens"] for n in (-1, 64)}
    assert runs[-1] != runs[64], "the window changes nothing on this prompt: the test proves nothing"
    base = dict(base, prompt=long, max_tokens=8)
    assert completion(srv, dict(base, repetition_penalty=1.8))["token_ids"] == runs[-1]
    assert completion(srv, dict(base, repeat_penalty=1.8))["token_ids"] == runs[64]
    assert completion(srv, dict(base, repetition_penalty=1.8, repeat_last_n=64))["token_ids"] == runs[64]
    assert_errors(srv, "/v1/completions", [
        (b'{"prompt": "x", "repetition_penalty": 1.2, "repeat_penalty": 1.3}', 400, "repeat_penalty",
         "both given and different"),
        (b'{"prompt": "x", "repetition_penalty": 0}', 400, "repetition_penalty", "from 0.01 to 100"),
        (b'{"prompt": "x", "repeat_penalty": "high"}', 400, "repeat_penalty", "must be a number"),
        (b'{"prompt": "x", "repeat_last_n": -2}', 400, "repeat_last_n", "from -1 to"),
    ])


def test_stop_token_ids(srv):
    """stop_token_ids (vLLM's): the completion ends at the first of them,
    finish_reason "stop"; its id is the last of token_ids, its text is not
    in the text (vLLM's default); ignore_eos does not ignore them; streamed
    the same."""
    base = {"model": MODEL, "prompt": "Once upon a time there was", "max_tokens": 24, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    full = completion(srv, base)["token_ids"]
    i = next(i for i in range(3, len(full)) if full[i] not in full[:i])  # a first occurrence, not at the start
    want_text = completion(srv, dict(base, max_tokens=i))["text"]  # the text of full[:i]
    c = completion(srv, dict(base, stop_token_ids=[VOCAB - 7, full[i]]))
    assert (c["token_ids"], c["text"], c["finish_reason"]) == (full[:i + 1], want_text, "stop"), (i, full)
    text, ids, finish = stream_text(sse(srv.post("/v1/completions", dict(base, stop_token_ids=[full[i]],
                                                                          stream=True))[2]), chat=False)
    assert (text, ids, finish) == (want_text, full[:i + 1], "stop")
    assert_errors(srv, "/v1/completions", [
        (b'{"prompt": "x", "stop_token_ids": [99999]}', 400, "stop_token_ids", "outside the vocabulary"),
        (b'{"prompt": "x", "stop_token_ids": 5}', 400, "stop_token_ids", "an array of token ids"),
        (b'{"prompt": "x", "stop_token_ids": ["a"]}', 400, "stop_token_ids", "an array of token ids"),
    ])


def eot_seed(srv, body, tries=40):
    """A seed whose sampled reply to body ends at <|eot_id|>, and that reply; or skip."""
    for seed in range(1, tries):
        c = completion(srv, dict(body, seed=seed), path="/v1/chat/completions")
        if c["finish_reason"] == "stop" and c["token_ids"] and c["token_ids"][-1] == VOCAB - 3:
            return seed, c
    pytest.skip(f"no sampled reply of {tries} ended at the end of turn")


def test_min_tokens(srv):
    """min_tokens (vLLM's): no end-of-sequence or end-of-turn token, no
    stop token and no stop string ends the completion before that many
    tokens (greedy: the same tokens up to where an end was taken away);
    min_tokens over max_tokens is refused."""
    base = {"model": MODEL, "prompt": "Once upon a time there was", "max_tokens": 24, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True}
    full = completion(srv, base)
    ids = full["token_ids"]
    i = next(i for i in range(3, len(ids)) if ids[i] not in ids[:i])
    c = completion(srv, dict(base, stop_token_ids=[ids[i]], min_tokens=i + 3))
    assert c["token_ids"][:i] == ids[:i] and ids[i] not in c["token_ids"][:i + 3], (i, ids, c)
    # a stop string inside the first min_tokens tokens does not count (on a
    # prompt whose greedy reply has no end token, which min_tokens would
    # keep out, ignore_eos or not, as vLLM's does)
    for prompt in ("It was a dark and stormy night", "Hello, world", "The capital of France is", "Tell me"):
        full = completion(srv, dict(base, prompt=prompt))
        text = full["text"]
        at = [i for i in range(len(text) - 1) if not set(text[i:i + 2]) & {"\x00", "\ufffd"}]
        if at and not {VOCAB - 3, VOCAB - 1} & set(full["token_ids"]):
            break
    else:
        pytest.skip("no greedy reply without an end token and with a stop string")
    stop = text[at[0]:at[0] + 2]
    assert completion(srv, dict(base, prompt=prompt, stop=stop))["finish_reason"] == "stop"
    c = completion(srv, dict(base, prompt=prompt, stop=stop, min_tokens=24))
    assert (c["text"], c["token_ids"], c["finish_reason"]) == (text, full["token_ids"], "length")
    # the end of turn of a sampled chat reply
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me more."}], "max_tokens": 200,
            "temperature": 1.0, "return_token_ids": True}
    seed, ended = eot_seed(srv, chat)
    n = len(ended["token_ids"])
    m = min(n + 5, chat["max_tokens"])
    c = completion(srv, dict(chat, seed=seed, min_tokens=m), path="/v1/chat/completions")
    assert not {VOCAB - 3, VOCAB - 1} & set(c["token_ids"][:m]) and len(c["token_ids"]) >= m, c
    assert_errors(srv, "/v1/completions", [
        (b'{"prompt": "x", "min_tokens": 20, "max_tokens": 10}', 400, "min_tokens", "more than max_tokens"),
        (b'{"prompt": "x", "min_tokens": -1}', 400, "min_tokens", "from 0"),
    ])


REFUSED = [
    (b'{"prompt": "x", "%s": %s}' % (k.encode(), v.encode()), 400, k, "not supported")
    for k, v in (("guided_grammar", '"root ::= x"'), ("grammar", '"root ::= x"'),
                 ("typical_p", "0.5"), ("mirostat", "2"),
                 ("top_a", "0.1"), ("tfs_z", "0.9"), ("dry_multiplier", "0.8"), ("xtc_probability", "0.5"),
                 ("include_stop_str_in_output", "true"), ("skip_special_tokens", "false"),
                 ("bad_words", '["a"]'),
                 ("n_predict", "5"), ("prompt_logprobs", "1"), ("use_beam_search", "true"),
                 ("tool_choice", '"auto"'),
                 ("tools", '[{"type": "function", "function": {"name": "f"}}]'))
]


def test_refused_and_ignored_fields(srv):
    """Fields that would change the answer and are not implemented are
    refused by name; at the value that turns them off they are accepted;
    fields with no effect on the answer (user, metadata, ...) are ignored."""
    assert_errors(srv, "/v1/completions", REFUSED)
    base = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}
    ref = completion(srv, base)["token_ids"]
    off = {"typical_p": 1, "mirostat": 0, "top_a": 0, "tfs_z": 1.0, "dry_multiplier": 0, "xtc_probability": 0,
           "include_stop_str_in_output": False, "skip_special_tokens": True, "logit_bias": {}, "n": 1,
           "best_of": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "logprobs": False, "echo": False,
           "tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "guided_json": None,
           "bad_words": [], "user": "u1", "metadata": {"a": "b"}, "store": False, "parallel_tool_calls": True,
           "service_tier": "auto", "cache_prompt": True, "mirostat_tau": 5.0, "some_unknown_field": 3}
    assert completion(srv, dict(base, **off))["token_ids"] == ref


def special_ids(model):
    """The control tokens of the tests' tokenizer (tokenizer.json's added ones)."""
    with open(os.path.join(model, "tokenizer.json")) as f:
        return {a["id"] for a in json.load(f)["added_tokens"]}


def test_json_mode(srv, tiny):
    """response_format {"type": "json_object"} (JSON mode), chats greedy and
    sampled: a reply that ends ("stop") is one JSON object, ended by an end
    token right after it; one cut by max_tokens begins one (tests/jsonref.py,
    Python's json: not gcore's recognizer); every token kept the reply the
    beginning of one; greedy, every token the model ranked above the one
    drawn (its top 20 log-probabilities, the model's own) would not have. A
    streamed reply is the same; /v1/completions serves it too; a schema, an
    unknown type, or ignore_eos with it are refused."""
    model = tiny[1]
    texts, raw = token_texts(model)
    special = special_ids(model)
    seen = {"stop": 0, "length": 0}
    for k in range(24):
        greedy = k % 2 == 0
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"Answer in JSON, case {k}"}],
                "max_tokens": 40, "response_format": {"type": "json_object"}, "return_token_ids": True,
                "logprobs": True, "top_logprobs": 20, "temperature": 0 if greedy else 1.0, "seed": k}
        c = completion(srv, body, "/v1/chat/completions")
        ids, content, finish = c["token_ids"], c["logprobs"]["content"], c["finish_reason"]
        seen[finish] += 1
        reply = b"".join(raw[i] for i in ids if i not in special)
        assert c["message"]["content"] == reply.decode("utf-8", "replace") or finish == "length", (k, c)
        if finish == "stop":
            assert ids[-1] in special and all(i not in special for i in ids[:-1]), (k, ids)
            assert is_object(reply) and isinstance(json.loads(c["message"]["content"]), dict), (k, reply)
        else:
            assert finish == "length" and len(ids) == 40 and is_prefix(reply), (k, reply)
        so_far = b""
        for j, (i, x) in enumerate(zip(ids, content)):
            if i in special:
                break
            assert is_prefix(so_far + raw[i]) and not is_object(so_far), (k, j, so_far, raw[i])
            if greedy:
                for y in x["top_logprobs"]:
                    yid = raw_id(raw, bytes(y["bytes"]))
                    if y["logprob"] > x["logprob"] + 1e-6:
                        assert yid in special or not raw[yid] or not is_prefix(so_far + raw[yid]), (k, j, yid)
            so_far += raw[i]
    assert seen["stop"] >= 2 and seen["length"] >= 2, seen  # both ends of a reply exercised

    body = {"model": MODEL, "messages": [{"role": "user", "content": "JSON please"}], "max_tokens": 30,
            "response_format": {"type": "json_object"}, "temperature": 0.8, "seed": 5, "return_token_ids": True}
    c = completion(srv, body, "/v1/chat/completions")
    status, _, s = srv.post("/v1/chat/completions", dict(body, stream=True))
    assert status == 200 and stream_text(sse(s), True)[0] == c["message"]["content"]
    c = completion(srv, {"model": MODEL, "prompt": "x", "max_tokens": 30, "temperature": 0,
                         "response_format": {"type": "json_object"}, "return_token_ids": True})
    assert is_prefix(b"".join(raw[i] for i in c["token_ids"] if i not in special)), c
    assert_errors(srv, "/v1/chat/completions", [
        (b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", '
         b'"json_schema": {"name": "a", "schema": {"type": "object", "properties": {"a": {"type": "string", '
         b'"pattern": "(?=a)"}}}}}}', 400, "response_format",
         "schema.properties.a: pattern: at byte 0: lookahead is not supported"),
        (b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}', 400,
         "response_format", "\"json_object\""),
        (b'{"messages": [{"role": "user", "content": "x"}], "response_format": "json"}', 400,
         "response_format", "string \"type\""),
        (b'{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}, '
         b'"ignore_eos": true}', 400, "ignore_eos", "JSON mode"),
    ])


WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}, "level": {"enum": [1, 2, None]},
    "alerts": {"type": "array", "items": {"type": "string"}}, "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "station": {"type": "string", "pattern": "^[A-Z]{3}-\\d$"}},
    "required": ["unit", "days"], "additionalProperties": False}


def test_json_schema_mode(srv, tiny):
    """A JSON Schema as OpenAI's response_format json_schema, vLLM's
    guided_json and llama.cpp's json_schema, greedy and sampled, chat and
    completion: a reply that ends ("stop") is one object that Debian's
    python3-jsonschema (not gcore) accepts, ended by an end token right
    after it; one cut by max_tokens begins one JSON object; the same reply
    streamed; ignore_eos, two schemas at once, a schema that is not an
    object, and schemas outside the subset are refused by name."""
    jsonschema = pytest.importorskip("jsonschema", reason="python3-jsonschema is absent: run 'make deps-test'")
    model = tiny[1]
    texts, raw = token_texts(model)
    special = special_ids(model)
    check = jsonschema.Draft202012Validator(WEATHER).is_valid
    seen = {"stop": 0, "length": 0}
    for k in range(18):
        greedy, how = k % 2 == 0, k % 3
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"Weather as JSON, case {k}"}],
                "max_tokens": 80, "return_token_ids": True, "temperature": 0 if greedy else 1.0, "seed": k,
                "logit_bias": {str(raw_id(raw, b'"')): 4, str(raw_id(raw, b"}")): 4}}  # close strings and objects
        if how == 0:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER}}
        elif how == 1:
            body["guided_json"] = WEATHER
        else:
            body["json_schema"] = json.dumps(WEATHER)
        c = completion(srv, body, "/v1/chat/completions")
        ids, finish = c["token_ids"], c["finish_reason"]
        seen[finish] += 1
        reply = b"".join(raw[i] for i in ids if i not in special)
        if finish == "stop":
            assert ids[-1] in special and all(i not in special for i in ids[:-1]), (k, ids)
            assert is_object(reply) and check(json.loads(reply)), (k, reply)
        else:
            assert finish == "length" and len(ids) == 80 and is_prefix(reply), (k, reply)
    assert seen["stop"] >= 3, seen

    body = {"model": MODEL, "messages": [{"role": "user", "content": "JSON please"}], "max_tokens": 60,
            "guided_json": WEATHER, "temperature": 0.8, "seed": 5, "return_token_ids": True}
    c = completion(srv, body, "/v1/chat/completions")
    status, _, s = srv.post("/v1/chat/completions", dict(body, stream=True))
    assert status == 200 and stream_text(sse(s), True)[0] == c["message"]["content"]
    c = completion(srv, {"model": MODEL, "prompt": "x", "max_tokens": 60, "temperature": 0, "json_schema": WEATHER,
                         "return_token_ids": True, "logit_bias": {str(raw_id(raw, b'"')): 4}})
    reply = b"".join(raw[i] for i in c["token_ids"] if i not in special)
    assert (c["finish_reason"] == "stop" and check(json.loads(reply))) or is_prefix(reply), c
    msg = b'{"messages": [{"role": "user", "content": "x"}], '
    assert_errors(srv, "/v1/chat/completions", [
        (msg + b'"guided_json": {"type": "object"}, "ignore_eos": true}', 400, "ignore_eos", "JSON mode"),
        (msg + b'"guided_json": {"type": "object"}, "json_schema": {"type": "object"}}', 400, "guided_json",
         "give one of"),
        (msg + b'"guided_json": [1]}', 400, "guided_json", "a JSON Schema"),
        (msg + b'"guided_json": "{\\"type\\": \\"array\\"}"}', 400, "guided_json", "root must allow an object"),
        (msg + b'"json_schema": {"type": "object", "properties": {"n": {"type": "array", "uniqueItems": true}}}}', 400,
         "json_schema", "schema.properties.n: uniqueItems is supported where"),
        (msg + b'"response_format": {"type": "json_schema", "json_schema": {"name": "a"}}}', 400, "response_format",
         "\"schema\""),
        (msg + b'"guided_json": "{"}', 400, "guided_json", "not one JSON value"),
    ])


def test_guided_choice(srv, tiny):
    """vLLM's guided_choice: every reply, greedy and sampled, chat and
    completion, streamed or not, is one of the choices whole (quotes,
    blanks and UTF-8 in them as they are), ended by an end token; where a
    choice is the beginning of a longer one the reply may end there or go
    on (the end tokens banned: the longer one); bad lists and ignore_eos
    are refused."""
    model = tiny[1]
    texts, raw = token_texts(model)
    special = special_ids(model)
    choices = ["positive", "negative", "neutral", 'it "depends" \\ é']
    for k in range(12):
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"Sentiment of case {k}?"}],
                "max_tokens": 60, "guided_choice": choices, "temperature": 0 if k % 2 == 0 else 1.0, "seed": k,
                "return_token_ids": True}
        c = completion(srv, body, "/v1/chat/completions")
        ids = c["token_ids"]
        assert c["finish_reason"] == "stop" and ids[-1] in special, (k, c)
        reply = b"".join(raw[i] for i in ids[:-1]).decode("utf-8")
        assert reply in choices and c["message"]["content"] == reply, (k, reply)
        if k == 1:
            status, _, text = srv.post("/v1/chat/completions", dict(body, stream=True))
            assert status == 200 and stream_text(sse(text), True)[0] == reply
    body = {"model": MODEL, "prompt": "x", "max_tokens": 60, "temperature": 0, "guided_choice": ["a b", "a"]}
    assert completion(srv, body)["text"] in ("a b", "a")
    c = completion(srv, dict(body, logit_bias={str(i): -100 for i in special}))
    assert c["text"] == "a b" and c["finish_reason"] == "stop", c
    msg = b'{"messages": [{"role": "user", "content": "x"}], '
    assert_errors(srv, "/v1/chat/completions", [
        (msg + b'"guided_choice": []}', 400, "guided_choice", "an array of 1 to 64 strings"),
        (msg + b'"guided_choice": ["a", 1]}', 400, "guided_choice", "guided_choice[1] is not a string"),
        (msg + b'"guided_choice": ["a", "a"]}', 400, "guided_choice", "repeats"),
        (msg + b'"guided_choice": [""]}', 400, "guided_choice", "guided_choice[0]"),
        (msg + b'"guided_choice": ["a"], "ignore_eos": true}', 400, "ignore_eos", "guided_choice"),
        (msg + b'"guided_choice": ["a"], "guided_json": {}}', 400, "guided_json", "give one of"),
    ])


def test_guided_regex(srv, tiny):
    """vLLM's guided_regex: every reply, greedy and sampled, chat and
    completion, streamed or not, is one whole match of the pattern (Python's
    re.fullmatch, with ECMA's \\d), raw text (quotes, newlines and UTF-8 as
    they are), ended by an end token where nothing more may follow or the
    model ends it (each pattern here is finite and fits max_tokens, so
    every reply ends); n choices each match; bad patterns and ignore_eos
    are refused with the byte and the reason."""
    model = tiny[1]
    texts, raw = token_texts(model)
    special = special_ids(model)
    pats = [r"(yes|no|maybe)!?", r"[0-9]{3}-[0-9]{4}", r'[a-z ]{2,12}"?\n(é|ß){1,3}', r"\w{1,8}@\w{1,5}\.(com|org)"]
    for k in range(16):
        pat = pats[k % len(pats)]
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"Answer {k}"}], "max_tokens": 40,
                "guided_regex": pat, "temperature": 0 if k % 2 == 0 else 1.0, "seed": k, "return_token_ids": True}
        c = completion(srv, body, "/v1/chat/completions")
        ids = c["token_ids"]
        reply = b"".join(raw[i] for i in ids if i not in special).decode("utf-8", "replace")
        assert c["finish_reason"] == "stop" and ids[-1] in special, (k, c)  # every match fits max_tokens
        assert re.fullmatch(pat, reply) and c["message"]["content"] == reply, (k, pat, reply)
        if k == 1:
            status, _, text = srv.post("/v1/chat/completions", dict(body, stream=True))
            assert status == 200 and stream_text(sse(text), True)[0] == reply
    status, _, text = srv.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 30, "n": 3,
                                                   "guided_regex": "a|b|c", "temperature": 1.0, "seed": 5})
    c = json.loads(text)["choices"]
    assert status == 200 and len(c) == 3, text
    assert all(x["text"] in ("a", "b", "c") and x["finish_reason"] == "stop" for x in c), c
    msg = b'{"messages": [{"role": "user", "content": "x"}], '
    assert_errors(srv, "/v1/chat/completions", [
        (msg + b'"guided_regex": 5}', 400, "guided_regex", "a string"),
        (msg + b'"guided_regex": "(a"}', 400, "guided_regex", "guided_regex: at byte 2: a group ( is not closed"),
        (msg + b'"guided_regex": "a(?=b)"}', 400, "guided_regex", "at byte 1: lookahead is not supported"),
        (msg + b'"guided_regex": "a$b"}', 400, "guided_regex", "no string matches"),
        (msg + b'"guided_regex": "a", "ignore_eos": true}', 400, "ignore_eos", "guided_regex ends the reply"),
        (msg + b'"guided_regex": "a", "guided_choice": ["a"]}', 400, "guided_choice", "give one of"),
    ])
    # vLLM's newer spelling: structured_outputs {regex | choice | json | json_object}
    for so, check in [({"regex": "[0-9]{2}"}, lambda t: re.fullmatch("[0-9]{2}", t)),
                      ({"choice": ["up", "down"], "disable_fallback": True}, lambda t: t in ("up", "down")),
                      ({"json": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
                                 "additionalProperties": False}}, lambda t: list(json.loads(t)) == ["a"]),
                      ({"json_object": True, "regex": None}, lambda t: isinstance(json.loads(t), dict))]:
        c = completion(srv, {"model": MODEL, "prompt": "x", "max_tokens": 40, "temperature": 0,
                             "structured_outputs": so})
        assert c["finish_reason"] == "stop" and check(c["text"]), (so, c)
    assert_errors(srv, "/v1/chat/completions", [
        (msg + b'"structured_outputs": {"grammar": "root ::= x"}}', 400, "structured_outputs", "not supported"),
        (msg + b'"structured_outputs": {"regex": "a", "choice": ["a"]}}', 400, "structured_outputs", "give one of"),
        (msg + b'"structured_outputs": {}}', 400, "structured_outputs", "give one of"),
        (msg + b'"structured_outputs": {"regx": "a"}}', 400, "structured_outputs", "structured_outputs.regx"),
        (msg + b'"structured_outputs": {"regex": "(a"}}', 400, "structured_outputs", "at byte 2"),
        (msg + b'"structured_outputs": {"regex": "a"}, "guided_regex": "a"}', 400, "structured_outputs", "give one of"),
        (msg + b'"structured_outputs": 3}', 400, "structured_outputs", "an object"),
    ])


def test_gcore_run_json_schema(tiny):
    """gcore-run -j SCHEMA (llama.cpp's flag) and --json-schema-file: each
    reply, greedy and sampled, from -p, --tokens and --chat, is an object
    python3-jsonschema accepts, ended by an end id right after it, or (cut
    by -n) the beginning of one; '{}' any object; a schema outside the
    subset, --ignore-eos with it, or both spellings: one clear line, exit 1."""
    jsonschema = pytest.importorskip("jsonschema", reason="python3-jsonschema is absent: run 'make deps-test'")
    d, model, bundle = tiny
    texts, raw = token_texts(model)
    special = special_ids(model)
    schema = {"type": "object", "properties": {"unit": {"enum": ["celsius", "fahrenheit"]}, "ok": {"type": "boolean"},
                                               "n": {"anyOf": [{"type": "null"}, {"type": "array", "items": {
                                                   "enum": ["a", "b"]}}]}},
              "required": ["unit", "ok", "n"], "additionalProperties": False}  # no free strings or numbers: short
    check = jsonschema.Draft202012Validator(schema).is_valid
    path = d / "schema.json"
    path.write_text(json.dumps(schema))
    done = 0
    for k, args in enumerate([["-j", json.dumps(schema), "-p", "Weather:"], ["--json-schema-file", path, "-p", "W"],
                              ["-j", json.dumps(schema), "--tokens", "5,6,7", "--temp", 1.0, "--seed", 3],
                              ["-j", json.dumps(schema), "-p", "x", "--temp", 0.7, "--seed", 9]]):
        out = gcore_run(tiny, *args, "-n", 150, *([] if "--temp" in args else ["--temp", 0]))[0]
        ids = out["tokens"]
        reply = b"".join(raw[i] for i in ids if i not in special)
        if len(ids) < 150:
            assert ids[-1] in special and all(i not in special for i in ids[:-1]), (k, ids)
            assert is_object(reply) and check(json.loads(reply)), (k, reply)
            done += 1
        else:
            assert is_prefix(reply), (k, reply)
    assert done >= 3, done
    out = gcore_run(tiny, "--chat", "-j", "{}", "-n", 60, "--temp", 0, stdin="hi\nmore\n")
    for turn in out:
        reply = b"".join(raw[i] for i in turn["tokens"] if i not in special)
        assert is_object(reply) or is_prefix(reply), turn
    for args, msg in ((["-j", '{"type": "object", "properties": {"a": {"if": {}}}}'],
                       "--json-schema: schema.properties.a: if is not supported"),
                      (["-j", "{}", "--ignore-eos"], "without --ignore-eos"),
                      (["-j", "{}", "--json-schema-file", path], "not both"),
                      (["--json-schema-file", d / "nope.json"], "nope.json")):
        r = run_tool("gcore-run", "-m", model, "-b", bundle, "-p", "x", *args, cwd=str(d))
        assert r.rc == 1 and msg in r.err and len(r.err.strip().splitlines()) == 1, (args, r)


def test_gcore_run_regex(tiny):
    """gcore-run --regex R: each reply, greedy and sampled, from -p,
    --tokens and --chat, is one whole match of R (Python's re.fullmatch),
    ended by an end id (each pattern here is finite and fits -n); a
    pattern outside the subset, --ignore-eos with it, or beside -j: one
    clear line, exit 1."""
    d, model, bundle = tiny
    texts, raw = token_texts(model)
    special = special_ids(model)
    pats = [r"(yes|no)!?", r"[0-9]{2}:[0-5][0-9]", r'"[a-z]{1,6}"\n']
    for k, args in enumerate([["-p", "Weather:"], ["--tokens", "5,6,7", "--temp", 1.0, "--seed", 3],
                              ["-p", "x", "--temp", 0.7, "--seed", 9]]):
        for pat in pats:
            out = gcore_run(tiny, "--regex", pat, *args, "-n", 40, *([] if "--temp" in args else ["--temp", 0]))[0]
            ids = out["tokens"]
            reply = b"".join(raw[i] for i in ids if i not in special).decode()
            assert ids[-1] in special and all(i not in special for i in ids[:-1]), (k, pat, ids)
            assert re.fullmatch(pat, reply), (k, pat, reply)
    out = gcore_run(tiny, "--chat", "--regex", "(a|b)c", "-n", 20, "--temp", 0, stdin="hi\nmore\n")
    assert len(out) == 2 and all(b"".join(raw[i] for i in t["tokens"] if i not in special) in (b"ac", b"bc")
                                 for t in out), out
    for args, msg in ((["--regex", "a(?=b)"], "--regex: at byte 1: lookahead is not supported"),
                      (["--regex", "a", "--ignore-eos"], "without --ignore-eos"),
                      (["--regex", "a", "-j", "{}"], "not both")):
        r = run_tool("gcore-run", "-m", model, "-b", bundle, "-p", "x", *args, cwd=str(d))
        assert r.rc == 1 and msg in r.err and len(r.err.strip().splitlines()) == 1, (args, r)


def test_logit_bias_and_openai_penalties(srv, tiny):
    """vLLM's allowed_token_ids (sampled: only those ids; greedy: the fp64
    reference's best of them), OpenAI's logit_bias and presence and
    frequency penalties, checked
    against the model's own log-probabilities (which they leave as they
    are): +100 on an id makes every greedy token that id; -100 on the
    greedy first token makes it the model's second most likely; -100 on 40
    ids keeps them out of 64 sampled tokens; with presence_penalty 1.5 and
    frequency_penalty 0.75 (-1 and -0.5, -1 and 0.4, where ids come back) each
    greedy token is the best of the top 20 after subtracting presence +
    count·frequency for the ids the reply already holds. Out-of-range
    values and keys are refused."""
    texts, raw = token_texts(tiny[1])
    msgs = [{"role": "user", "content": "Tell me a story"}]
    base = {"model": MODEL, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    c = completion(srv, dict(base, prompt=[5, 6, 7], logit_bias={"77": 100}))
    assert c["token_ids"] == [77] * 8, c
    chat = dict(base, messages=msgs, logprobs=True, top_logprobs=5)
    plain = completion(srv, chat, "/v1/chat/completions")
    first = plain["token_ids"][0]
    second = raw_id(raw, bytes(plain["logprobs"]["content"][0]["top_logprobs"][1]["bytes"]))
    c = completion(srv, dict(chat, logit_bias={str(first): -100}), "/v1/chat/completions")
    tops = [x["logprobs"]["content"][0]["top_logprobs"] for x in (c, plain)]
    assert c["token_ids"][0] == second, (first, second, c["token_ids"])
    assert [y["token"] for y in tops[0]] == [y["token"] for y in tops[1]] and \
        all(abs(a["logprob"] - b["logprob"]) <= 1e-4 for a, b in zip(*tops)), tops  # the model's, unbiased
    banned = list(range(100, 140))
    c = completion(srv, dict(base, prompt=[5, 6, 7], max_tokens=64, temperature=1.0, seed=3,
                             logit_bias={str(i): -100 for i in banned}))
    assert len(c["token_ids"]) == 64 and not set(c["token_ids"]) & set(banned), c["token_ids"]
    for pres, freq in ((1.5, 0.75), (-1.0, -0.5), (-1.0, 0.4)):  # the others let ids come back: counts grow
        c = completion(srv, dict(chat, max_tokens=48, top_logprobs=20, presence_penalty=pres,
                                 frequency_penalty=freq), "/v1/chat/completions")
        ids, content = c["token_ids"], c["logprobs"]["content"]

        def score(j, i, lp):  # the model's log-probability less the penalty at step j
            n = ids[:j].count(i)
            return lp - (pres + n * freq if n else 0)
        for j, (i, x) in enumerate(zip(ids, content)):
            mine = score(j, i, x["logprob"])
            for y in x["top_logprobs"]:
                assert score(j, raw_id(raw, bytes(y["bytes"])), y["logprob"]) <= mine + 1e-4, (pres, j, i, y)
        most = max(ids.count(i) for i in ids)
        assert most == 1 if pres > 0 else most >= 3, (pres, freq, ids)  # spread, or ids over and over
    allowed = [10, 20, 30, 77]
    c = completion(srv, dict(base, prompt=[5, 6, 7], max_tokens=32, temperature=1.0, seed=4,
                             allowed_token_ids=allowed))
    assert len(c["token_ids"]) == 32 and set(c["token_ids"]) <= set(allowed), c["token_ids"]
    c = completion(srv, dict(base, prompt=[5, 6, 7], max_tokens=6, allowed_token_ids=allowed))
    lp, tol = ref_logprobs(tiny[1], [5, 6, 7] + c["token_ids"])
    for j, t in enumerate(c["token_ids"]):  # greedy: the model's best of the allowed ids
        row = lp[2 + j]
        assert t in allowed and row[t] >= max(row[a] for a in allowed) - tol[2 + j], (j, t, c["token_ids"])
    assert_errors(srv, "/v1/completions", [
        (b'{"prompt": "x", "allowed_token_ids": []}', 400, "allowed_token_ids", "non-empty array"),
        (b'{"prompt": "x", "allowed_token_ids": 5}', 400, "allowed_token_ids", "non-empty array"),
        (b'{"prompt": "x", "allowed_token_ids": [1, "2"]}', 400, "allowed_token_ids", "[1] is not a token id"),
        (b'{"prompt": "x", "allowed_token_ids": [512]}', 400, "allowed_token_ids", "(0 to 511)"),
        (b'{"prompt": "x", "logit_bias": {"abc": 1}}', 400, "logit_bias", "not a token id"),
        (b'{"prompt": "x", "logit_bias": {"512": 1}}', 400, "logit_bias", "not a token id (0 to 511)"),
        (b'{"prompt": "x", "logit_bias": {"-1": 1}}', 400, "logit_bias", "not a token id"),
        (b'{"prompt": "x", "logit_bias": {"5": 101}}', 400, "logit_bias", "from -100 to 100"),
        (b'{"prompt": "x", "logit_bias": {"5": "1"}}', 400, "logit_bias", "from -100 to 100"),
        (b'{"prompt": "x", "logit_bias": [1]}', 400, "logit_bias", "an object"),
        (b'{"prompt": "x", "presence_penalty": 2.5}', 400, "presence_penalty", "from -2 to 2"),
        (b'{"prompt": "x", "frequency_penalty": -3}', 400, "frequency_penalty", "from -2 to 2"),
    ])


def test_seed_minus_one_and_null_are_random(srv):
    """"seed": -1 is llama.cpp's random seed and "seed": null is no seed:
    two such requests sample differently; a given seed repeats."""
    body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 24, "temperature": 1.0, "ignore_eos": True,
            "return_token_ids": True}
    for seed in (-1, None):
        a, b = (completion(srv, dict(body, seed=seed))["token_ids"] for _ in range(2))
        assert a != b, seed
    a, b = (completion(srv, dict(body, seed=-2))["token_ids"] for _ in range(2))
    assert a == b
    assert_errors(srv, "/v1/completions", [
        (b'{"prompt": "x", "seed": 99999999999999999999}', 400, "seed", "99999999999999999999"),
    ])


def test_top_k_minus_one_and_zero_are_off(srv):
    """"top_k": -1 (vLLM's off) and 0 keep every token: seeded, the same
    tokens as no top_k; 1 is greedy; below -1 is refused."""
    body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 24, "temperature": 1.0, "seed": 5,
            "ignore_eos": True, "return_token_ids": True}
    ref = completion(srv, body)["token_ids"]
    assert [completion(srv, dict(body, top_k=k))["token_ids"] for k in (-1, 0)] == [ref, ref]
    greedy = completion(srv, dict(body, temperature=0))["token_ids"]
    assert completion(srv, dict(body, top_k=1))["token_ids"] == greedy != ref
    assert_errors(srv, "/v1/completions", [(b'{"prompt": "x", "top_k": -2}', 400, "top_k", "from -1 to")])


def test_cors(srv):
    """Browsers: OPTIONS on an API route is a preflight (204, the methods,
    the requested headers echoed, else Content-Type and Authorization);
    every answer, errors and streams included, allows any origin. A
    trailing slash routes as without."""
    status, h, text = srv.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,authorization,x-stainless-os"})
    assert status == 204 and text == "", (status, h, text)
    assert h["Access-Control-Allow-Origin"] == "*"
    assert "POST" in h["Access-Control-Allow-Methods"]
    assert h["Access-Control-Allow-Headers"] == "content-type,authorization,x-stainless-os"
    for path, method in (("/v1/completions", "POST"), ("/v1/models", "GET"), (f"/v1/models/{MODEL}", "GET"),
                         ("/health", "GET"), ("/v1/chat/completions/", "POST")):
        status, h, _ = srv.request("OPTIONS", path, headers={"Origin": "http://x"})
        assert status == 204 and h["Access-Control-Allow-Origin"] == "*", (path, status, h)
        assert method in h["Access-Control-Allow-Methods"], (path, h)
        assert {"content-type", "authorization"} <= {x.strip().lower() for x in
                                                     h["Access-Control-Allow-Headers"].split(",")}, h
    assert srv.request("OPTIONS", "/nowhere")[0] == 404
    ok = {"model": MODEL, "prompt": [1, 2], "max_tokens": 2}
    answers = [srv.post("/v1/completions", ok), srv.post("/v1/completions", dict(ok, stream=True)),
               srv.post("/v1/completions", b"{"), srv.post("/v1/completions", "x" * 70000),
               srv.request("GET", "/v1/models"), srv.request("GET", "/health"), srv.request("GET", "/nowhere"),
               srv.request("GET", "/v1/completions")]
    assert [a[0] for a in answers] == [200, 200, 400, 413, 200, 200, 404, 405]
    for status, h, text in answers:
        assert h.get("Access-Control-Allow-Origin") == "*", (status, h)
    # a trailing slash
    assert srv.post("/v1/chat/completions/", {"model": MODEL, "max_tokens": 2,
                                              "messages": [{"role": "user", "content": "Hi"}]})[0] == 200
    assert srv.post("/v1/completions/", ok)[0] == 200
    assert srv.request("GET", "/v1/models/")[0] == 200
    assert json.loads(srv.request("GET", f"/v1/models/{MODEL}/")[2])["id"] == MODEL


def test_request_body_checks(srv):
    """A body that is JSON but not an object, a max_tokens or seed beyond 64
    bits (quoted as given, not clamped), stream_options without streaming,
    a user or system message without content: each a 400 naming it. An
    assistant message may leave its content out."""
    assert_errors(srv, "/v1/completions", [
        (b"null", 400, None, "the request body must be a JSON object"),
        (b"3", 400, None, "the request body must be a JSON object"),
        (b"true", 400, None, "the request body must be a JSON object"),
        (b"[]", 400, None, "the request body must be a JSON object"),
        (b'{"prompt": "x", "max_tokens": 99999999999999999999999}', 400, "max_tokens", "99999999999999999999999"),
        (b'{"prompt": "x", "max_tokens": -99999999999999999999999}', 400, "max_tokens", "-99999999999999999999999"),
        (b'{"prompt": "x", "max_tokens": 1e400}', 400, "max_tokens", "must be an integer"),
        (b'{"prompt": "x", "temperature": 1e400}', 400, "temperature", "1e400"),
        (b'{"prompt": "x", "stream_options": {"include_usage": true}}', 400, "stream_options", '"stream": true'),
        (b'{"prompt": "x", "stream": false, "stream_options": {}}', 400, "stream_options", '"stream": true'),
        # max_completion_tokens wins, and max_tokens beside it is checked too
        (b'{"prompt": "x", "max_completion_tokens": 2, "max_tokens": 0}', 400, "max_tokens", "from 1 to"),
        # a name written with escapes: a limit json-c gave is refused, not taken as the limit
        (b'{"prompt": "x", "se\\u0065d": 99999999999999999999999}', 400, "seed", "from -"),
    ])
    assert_errors(srv, "/v1/chat/completions", [
        (b'{"messages": [{"role": "user"}]}', 400, "messages", "no 'content'"),
        (b'{"messages": [{"role": "user", "content": null}]}', 400, "messages", "no 'content'"),
        (b'{"messages": [{"role": "system"}, {"role": "user", "content": "a"}]}', 400, "messages", "no 'content'"),
    ])
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant"}, {"role": "user", "content": "b"}]
    completion(srv, {"model": MODEL, "messages": msgs, "max_tokens": 2}, path="/v1/chat/completions")
    # ignore_eos: a sampled end of the sequence after one token would end it there
    status, _, text = srv.post("/v1/completions", {"model": MODEL, "prompt": [1], "max_tokens": 2, "stream": True,
                                                   "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert status == 200 and sse(text)[-1]["usage"]["completion_tokens"] == 2, text


# ---------------------------------------------------------------- load

def test_load_16_clients_20_requests(srv, tiny):
    """16 clients x 20 requests at once on 4 slots: every one answered, each
    equal to gcore-run's greedy tokens for its prompt (token prompts of 1
    to 40 ids, 1 to 12 tokens, half of them streamed)."""
    rng = random.Random(7)
    jobs = []
    for i in range(16 * 20):
        prompt = [rng.randrange(VOCAB - 8) for _ in range(rng.randint(1, 40))]
        jobs.append((prompt, rng.randint(1, 12), i % 2 == 1))
    uniq = sorted({tuple(p) for p, _, _ in jobs})
    refs = dict(zip(uniq, reference_ids(tiny, [list(p) for p in uniq], 12)))

    def one(job):
        prompt, n, stream = job
        body = {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                "return_token_ids": True, "stream": stream}
        status, _, text = srv.post("/v1/completions", body, timeout=300)
        assert status == 200, text
        if stream:
            return stream_text(sse(text), chat=False)[1]
        return json.loads(text)["choices"][0]["token_ids"]

    t0 = time.time()
    with ThreadPoolExecutor(16) as ex:
        got = list(ex.map(one, jobs))
    elapsed = time.time() - t0
    bad = [(p, n, g, refs[tuple(p)][:n]) for (p, n, _), g in zip(jobs, got) if g != refs[tuple(p)][:n]]
    assert not bad, f"{len(bad)} of {len(jobs)} differ from gcore-run, e.g. {bad[0]}"
    assert srv.health() == {"status": "ok", "slots": 4, "active": 0, "queued": 0}
    print(f"{len(jobs)} requests in {elapsed:.1f} s")


def test_json_mode_beside_plain_clients(srv, tiny):
    """8 clients at once on 4 slots, every other one in JSON mode: the JSON
    replies are the ones each gets alone (greedy: the same tokens), each
    the beginning of an object; the plain replies are gcore-run's greedy
    tokens, untouched by the constrained rows beside them in a step."""
    _, raw = token_texts(tiny[1])
    special = special_ids(tiny[1])
    prompts = [[5 + i, 9, 17 + 3 * i] for i in range(8)]
    refs = reference_ids(tiny, prompts, 16)

    def one(i, alone=False):
        body = {"model": MODEL, "prompt": prompts[i], "max_tokens": 16, "temperature": 0, "return_token_ids": True,
                **({"response_format": {"type": "json_object"}} if i % 2 else {"ignore_eos": True})}
        status, _, text = srv.post("/v1/completions", body, timeout=300)
        assert status == 200, text
        return json.loads(text)["choices"][0]["token_ids"]
    alone = {i: one(i) for i in range(1, 8, 2)}
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(one, range(8)))
    for i, ids in enumerate(got):
        if i % 2:
            assert ids == alone[i] and is_prefix(b"".join(raw[t] for t in ids if t not in special)), (i, ids)
        else:
            assert ids == refs[i][:16], (i, ids, refs[i])


def test_prompts_in_chunks(tiny):
    """--prefill-chunk 16: prompts of up to 200 tokens are prefilled 16
    tokens at a time between the decode steps of the others (6 requests on
    3 slots); every answer is still gcore-run's, which takes each prompt in
    one pass, and -v's line of each request counts ceil(n / 16) passes (the
    default, 512 capped at --ctx 256, takes each prompt in one)."""
    d, model, bundle = tiny
    rng = random.Random(5)
    sizes = (200, 17, 16, 15, 64, 1)
    prompts = [[rng.randrange(VOCAB - 8) for _ in range(n)] for n in sizes]
    refs = reference_ids(tiny, prompts, 12)
    body = lambda p: {"model": MODEL, "prompt": p, "max_tokens": 12, "temperature": 0, "ignore_eos": True,
                      "return_token_ids": True}
    for chunk in (16, None):
        s = Server(model, bundle, "--parallel", 3, "-v", *(("--prefill-chunk", chunk) if chunk else ()))
        try:
            with ThreadPoolExecutor(6) as ex:
                got = list(ex.map(lambda p: json.loads(s.post("/v1/completions", body(p))[2]), prompts))
            assert [g["choices"][0]["token_ids"] for g in got] == refs
            assert [len(g["choices"][0]["prompt_token_ids"]) for g in got] == list(sizes)
        finally:
            check_clean_exit(s)
        passes = sorted(tuple(map(int, m)) for m in
                        re.findall(r"POST '/v1/completions' 200: (\d+) prompt tokens \((\d+) passes, 0 cached\)",
                                   "".join(s.lines)))
        assert passes == sorted((n, -(-n // (chunk or CTX))) for n in sizes), "".join(s.lines)


def completions_at_once(s, model, prompts, n):
    """The greedy ids (EOS ignored, n each) of every prompt, all posted at once."""
    body = lambda p: {"model": model, "prompt": p, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                      "return_token_ids": True}
    with ThreadPoolExecutor(len(prompts)) as ex:
        return list(ex.map(lambda p: json.loads(s.post("/v1/completions", body(p))[2])["choices"][0]["token_ids"],
                           prompts))


def test_fixed_batch(tiny):
    """--fixed-batch: every decode step runs --parallel rows, the missing
    ones copies of a real row (computed, dropped). Alone or 6 at once on 4
    slots, every answer is gcore-run's."""
    d, model, bundle = tiny
    s = Server(model, bundle, "--parallel", 4, "--fixed-batch")
    try:
        rng = random.Random(11)
        prompts = [[rng.randrange(VOCAB - 8) for _ in range(rng.randint(1, 30))] for _ in range(6)]
        refs = reference_ids(tiny, prompts, 10)
        assert completions_at_once(s, MODEL, prompts[:1], 10) == refs[:1]  # alone
        assert completions_at_once(s, MODEL, prompts, 10) == refs
    finally:
        check_clean_exit(s)


def test_qwen2_batched_decode(tmp_path, cache_dir):
    """Qwen2 (q/k/v biases): --fixed-batch makes every decode step a
    batched one of 4 rows, each at its own position and slot, the bias added
    to every row; 4 prompts at once answer as gcore-run answers each alone."""
    model = str(tmp_path / MODEL)
    TM.write_model(model, seed=3, dtype="f16", dim=64, hidden_dim=160, n_layers=2, n_heads=4, n_kv_heads=2,
                   vocab=VOCAB, max_seq=CTX, arch="qwen2")
    TM.write_tokenizer(model, VOCAB)
    bundle = str(tmp_path / "qwen2.gcb")
    r = run_tool("gcore-gen", "--model", model, "--target", "cpu", "--prefill", 16, "-o", bundle,
                 env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    s = Server(model, bundle, "--parallel", 4, "--fixed-batch")
    try:
        rng = random.Random(5)
        prompts = [[rng.randrange(VOCAB - 8) for _ in range(rng.randint(1, 30))] for _ in range(4)]
        assert completions_at_once(s, MODEL, prompts, 8) == reference_ids((tmp_path, model, bundle), prompts, 8)
    finally:
        check_clean_exit(s)


# ---------------------------------------------------------------- bad input

BAD = [
    (b"{", 400, None, "not valid JSON"),
    (b'{"model": "tiny", "prompt": "x",}', 400, None, "not valid JSON"),
    (b'{"prompt": "x"} trailing', 400, None, "not valid JSON"),
    (b"[1, 2]", 400, None, "must be a JSON object"),
    (b'"just a string"', 400, None, "must be a JSON object"),
    (b"\xff\xfe\x00garbage", 400, None, "not valid JSON"),
    (b'{"prompt": "caf\xe9"}', 400, None, "not valid JSON"),  # not UTF-8: it would be echoed
    (b"[" * 5000 + b"]" * 5000, 400, None, "not valid JSON"),
    (b"", 400, None, "not valid JSON"),
    (b'{"prompt": 5}', 400, "prompt", "must be a string, an array of token ids or an array of those"),
    (b'{"prompt": ["a", 5]}', 400, "prompt", "must be a string, an array of token ids or an array of those"),
    (b'{"prompt": ["a", []]}', 400, "prompt", "prompt 1 of 2: a prompt is empty"),
    (b'{"prompt": ["a", [1, 2], [3, 99999]]}', 400, "prompt", "prompt 2 of 3: token id 99999 is outside"),
    (b'{"prompt": [[1], [2, "a"]]}', 400, "prompt", "must be a string, an array of token ids"),
    (b'{"prompt": [1, "a"]}', 400, "prompt", "must be a string, an array of token ids"),
    (b'{"prompt": [' + b'"a", ' * 128 + b'"a"]}', 400, "prompt", "at most 128 prompts"),
    (b'{"prompt": [1, 99999]}', 400, "prompt", "outside the vocabulary"),
    (b'{"prompt": [-1]}', 400, "prompt", "outside the vocabulary"),
    (b'{"prompt": []}', 400, "prompt", "empty"),
    (b'{"prompt": "x", "temperature": "hot"}', 400, "temperature", "must be a number"),
    (b'{"prompt": "x", "temperature": 7}', 400, "temperature", "from 0 to 2"),
    (b'{"prompt": "x", "top_p": 0}', 400, "top_p", "above 0"),
    (b'{"prompt": "x", "max_tokens": 2.5}', 400, "max_tokens", "must be an integer"),
    (b'{"prompt": "x", "max_tokens": 0}', 400, "max_tokens", "from 1"),
    (b'{"prompt": "x", "max_tokens": 100000}', 400, "max_tokens", "maximum context length"),
    (b'{"prompt": ["x", "y"], "max_tokens": 100000}', 400, "max_tokens", "prompt 0 of 2: This model's maximum"),
    (b'{"prompt": "x", "stream": "yes"}', 400, "stream", "must be a boolean"),
    (b'{"prompt": "x", "seed": "1"}', 400, "seed", "must be an integer"),
    (b'{"prompt": "x", "stop": 3}', 400, "stop", "a string or an array of strings"),
    (b'{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}', 400, "stop", "at most 4"),
    (b'{"prompt": "x", "stop": [""]}', 400, "stop", "1 to 256 bytes"),
    (b'{"prompt": "x", "n": 0}', 400, "n", "from 1 to 128"),
    (b'{"prompt": "x", "n": 129}', 400, "n", "from 1 to 128"),
    (b'{"prompt": ["x", "y"], "n": 65}', 400, "n", "2 prompts of 65 choices: at most 128"),
    (b'{"prompt": "x", "n": 65}', 400, "n", "more than the queue holds (--max-queue 64)"),
    (b'{"prompt": "x", "n": 2, "best_of": 3}', 400, "best_of", "must equal n"),
    (b'{"prompt": "x", "n": 1.5}', 400, "n", "must be an integer"),
    (b'{"prompt": "x", "n_probs": 5}', 400, "n_probs", "not supported"),
    (b'{"prompt": "x", "presence_penalty": "1"}', 400, "presence_penalty", "must be a number"),
    (b'{"prompt": "x", "logit_bias": {"5": null}}', 400, "logit_bias", "from -100 to 100"),
    (b'{"prompt": "x", "model": 7}', 400, "model", "must be a string"),
    (b'{"prompt": "x", "model": "gpt-4"}', 404, "model", "does not exist"),
    (b'{"prompt": "x", "stream_options": 1}', 400, "stream_options", "must be an object"),
    (b'{}', 400, "prompt", "required"),
]
BAD_CHAT = [
    (b'{"messages": "hi"}', 400, "messages", "must be an array"),
    (b'{"messages": []}', 400, "messages", "empty"),
    (b'{"messages": [5]}', 400, "messages", "array of objects"),
    (b'{"messages": [{"content": "hi"}]}', 400, "messages", "no 'role'"),
    (b'{"messages": [{"role": "wizard", "content": "hi"}]}', 400, "messages", "is not one of"),
    (b'{"messages": [{"role": "user", "content": 5}]}', 400, "messages", "must be"),
    (b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 400, "messages", "only text"),
    (b'{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}', 400,
     "messages", "last message"),
    (b'{"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]}', 400,
     "messages", "must come first"),
    (b'{"messages": [{"role": "user", "content": "a\\u0000b"}]}', 400, "messages", "NUL"),
    (b'{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]}', 400, "tools",
     "has no tool calls"),
    (b'{"messages": [{"role": "user", "content": "a"}], "tool_choice": "required"}', 400, "tool_choice",
     "needs tools"),
    (b'{"prompt": "x"}', 400, "messages", "required"),
]


@pytest.mark.parametrize("path,cases", [("/v1/completions", BAD), ("/v1/chat/completions", BAD_CHAT)])
def test_malformed_and_wrong_types(srv, path, cases):
    """Each bad body: its status, OpenAI's error shape, the field named; the
    server keeps serving."""
    assert_errors(srv, path, cases)


def test_routes_and_methods(srv):
    for method, path, status in (("GET", "/", 404), ("GET", "/v1/completion", 404), ("POST", "/health", 405),
                                 ("GET", "/v1/completions", 405), ("DELETE", "/v1/models", 405),
                                 ("PUT", "/v1/chat/completions", 405), ("GET", "/v1/models/../x", 404),
                                 ("GET", "/tokenize", 405), ("GET", "/detokenize", 405)):
        got, headers, text = srv.request(method, path, b"{}" if method != "GET" else None)
        assert got == status, (method, path, text)
        assert "error" in json.loads(text)
        if status == 405:
            assert headers["Allow"] == ("POST, OPTIONS" if "okenize" in path or "completions" in path
                                        else "GET, HEAD, OPTIONS")


def test_tokenize_and_detokenize(srv, tiny):
    """POST /tokenize: llama.cpp's "content" (no BOS unless add_special),
    vLLM's "prompt" (BOS unless add_special_tokens false), or "messages"
    (the chat completion's prompt ids); the ids are gcore-run's. POST
    /detokenize gives the text back. Bad bodies: 400 naming the field."""
    d, model, _ = tiny
    text = "What is a bundle? <|eot_id|>"
    r = run_tool("gcore-run", "--tokenizer", model, "--tokenize", input=text)
    assert r.rc == 0, r
    plain = [int(x) for x in r.out.split()]  # special tokens matched, no BOS
    r = run_tool("gcore-run", "--tokenizer", model, "--tokenize", "--bos", input=text)
    assert r.rc == 0 and len(r.out.split()) == len(plain) + 1, r
    bos = [int(r.out.split()[0])]

    def tokens(body):
        status, _, out = srv.post("/tokenize", body)
        assert status == 200, (body, out)
        got = json.loads(out)
        assert got["count"] == len(got["tokens"]) and got["max_model_len"] == CTX, got
        return got["tokens"]
    assert tokens({"content": text}) == plain
    assert tokens({"content": text, "add_special": True}) == bos + plain
    assert tokens({"model": MODEL, "prompt": text}) == bos + plain
    assert tokens({"prompt": text, "add_special_tokens": False}) == plain
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a bundle?"}]
    status, _, out = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1, "return_token_ids": True})
    assert tokens({"messages": msgs}) == json.loads(out)["choices"][0]["prompt_token_ids"]
    status, _, out = srv.post("/detokenize", {"tokens": plain})
    assert status == 200 and json.loads(out) == {"content": text, "prompt": text}, out
    assert_errors(srv, "/tokenize", [
        (b'{}', 400, None, "one of 'content', 'prompt' or 'messages'"),
        (b'{"content": "a", "prompt": "b"}', 400, None, "one of"),
        (b'{"content": 5}', 400, "content", "must be a string"),
        (b'{"prompt": "a", "add_special_tokens": 1}', 400, "add_special_tokens", "must be a boolean"),
        (b'{"content": "a", "with_pieces": true}', 400, "with_pieces", "not implemented"),
        (b'{"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": false}', 400,
         "add_generation_prompt", "only"),
        (b'{"messages": [{"role": "assistant", "content": "a"}]}', 400, "messages", "before any user message"),
        (b'[1]', 400, None, "must be a JSON object"),
        (b'{"content": "a"', 400, None, "not valid JSON"),
    ])
    assert_errors(srv, "/detokenize", [
        (b'{}', 400, "tokens", "an array of token ids"),
        (b'{"tokens": [1, -1]}', 400, "tokens", "tokens[1]"),
        (b'{"tokens": [1, %d]}' % VOCAB, 400, "tokens", "tokens[1]"),
        (b'{"tokens": [1.5]}', 400, "tokens", "tokens[0]"),
    ])


def test_oversize_bodies(srv):
    """Over --max-body: 413 with the error shape, whether the size is
    announced (Content-Length) or not (chunked); then the next request works."""
    big = json.dumps({"model": MODEL, "prompt": "x" * 70000})
    status, _, text = srv.post("/v1/completions", big)
    assert status == 413 and "over 65536 bytes" in json.loads(text)["error"]["message"]
    p = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-H", "Transfer-Encoding: chunked",
                        "-H", "Content-Type: application/json", "--data-binary", "@-", srv.url("/v1/completions")],
                       input=big, capture_output=True, text=True, timeout=60)
    body, _, code = p.stdout.rpartition("\n")
    assert code == "413", p
    assert json.loads(body)["error"]["type"] == "invalid_request_error"
    status, _, _ = srv.post("/v1/completions", {"model": MODEL, "prompt": "ok", "max_tokens": 2})
    assert status == 200


def test_prompt_over_the_context(srv):
    """A prompt of the whole context or more: 400 context_length_exceeded."""
    for prompt in ([1] * CTX, [2] * (CTX + 50)):
        status, _, text = srv.post("/v1/completions", {"model": MODEL, "prompt": prompt})
        err = json.loads(text)["error"]
        assert status == 400 and err["code"] == "context_length_exceeded", text
    status, _, text = srv.post("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "y" * 600}]})
    assert status == 400 and json.loads(text)["error"]["code"] == "context_length_exceeded"
    # the longest prompt that fits, and max_tokens up to the context
    status, _, text = srv.post("/v1/completions", {"model": MODEL, "prompt": [3] * (CTX - 4), "max_tokens": 4,
                                                   "temperature": 0, "ignore_eos": True})
    assert status == 200 and json.loads(text)["usage"]["total_tokens"] == CTX


# ---------------------------------------------------------------- slots, queue, disconnects

@pytest.fixture(scope="module")
def slow(tiny):
    """A server whose steps take 20 ms (GCORE_SERVE_STEP_DELAY_MS): two slots,
    two places in the queue, so requests run and wait long enough to be seen."""
    d, model, bundle = tiny
    s = Server(model, bundle, "--parallel", 2, "--max-queue", 2, env={"GCORE_SERVE_STEP_DELAY_MS": "20"})
    yield s
    if s.p.poll() is None:
        s.stop()


def wait_for(cond, what, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def open_stream(srv, n=250):
    """A streaming request on a raw socket, its first event read."""
    body = json.dumps({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": n, "stream": True,
                       "temperature": 0, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b"data: " not in got:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200"), got
    return s


def test_a_waiting_stream_is_kept_alive(tiny):
    """A stream that waits in the queue for more than 15 s sends SSE
    comments (": keep-alive") meanwhile, so that nothing between it and its
    client (the server's own 120 s idle timeout, a proxy's) closes it; its
    events are then the usual ones, [DONE] last."""
    d, model, bundle = tiny
    s = Server(model, bundle, "--parallel", 1, env={"GCORE_SERVE_STEP_DELAY_MS": "100"})
    try:
        busy = threading.Thread(target=s.post, args=("/v1/completions", {
            "model": MODEL, "prompt": [4], "max_tokens": 165, "temperature": 0, "ignore_eos": True}))
        busy.start()  # holds the one slot for about 16.5 s
        wait_for(lambda: s.health()["active"] == 1, "the slot taken")
        status, _, text = s.post("/v1/completions", {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2,
                                                      "stream": True, "temperature": 0, "ignore_eos": True,
                                                      "return_token_ids": True},
                                 timeout=60)
        busy.join()
        assert status == 200 and text.startswith(": keep-alive\n\n"), text[:200]
        events = sse(text)
        _, ids, finish = stream_text(events, chat=False)
        assert len(ids) == 2 and finish == "length", events
    finally:
        check_clean_exit(s)


def test_full_queue_gets_503_and_slots_free_at_once(slow):
    """Two streams fill the two slots, two more wait, a fifth gets 503 with
    Retry-After; a client that disconnects frees its slot at once, and a
    waiting request takes it."""
    streams = [open_stream(slow) for _ in range(2)]
    wait_for(lambda: slow.health()["active"] == 2, "two active requests")
    waiting = [threading.Thread(target=slow.post, args=("/v1/completions", {"model": MODEL, "prompt": [4], "max_tokens": 3}))
               for _ in range(2)]
    for t in waiting:
        t.start()
    wait_for(lambda: slow.health()["queued"] == 2, "two queued requests")
    status, headers, text = slow.post("/v1/completions", {"model": MODEL, "prompt": [5], "max_tokens": 3})
    assert status == 503 and headers.get("Retry-After") == "1", text
    assert json.loads(text)["error"]["code"] == "overloaded"
    t0 = time.time()
    for s in streams:
        s.close()  # both generate 250 tokens at 20 ms a step: only a cancel ends them this soon
    for t in waiting:
        t.join(timeout=30)
    wait_for(lambda: slow.health() == {"status": "ok", "slots": 2, "active": 0, "queued": 0}, "free slots")
    assert time.time() - t0 < 3, "closed streams kept their slots"


def test_disconnects(slow):
    """Clients that leave at every stage: before sending the body, mid-body,
    while waiting for a non-streamed answer, mid-stream. The server cancels
    what they asked for, frees the slots, and answers the next request."""
    body = json.dumps({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 250, "ignore_eos": True}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    for cut in (head[:20], head, head + body[:10]):  # mid-headers, before the body, mid-body
        s = socket.create_connection(("127.0.0.1", slow.port))
        s.sendall(cut)
        s.close()
    s = socket.create_connection(("127.0.0.1", slow.port))  # the whole request, then gone
    s.sendall(head + body)
    wait_for(lambda: slow.health()["active"] == 1, "the abandoned request to start")
    s.close()
    wait_for(lambda: slow.health()["active"] == 0, "the abandoned request to be cancelled", timeout=2)
    s = socket.create_connection(("127.0.0.1", slow.port))  # the whole request, a byte more, then gone
    s.sendall(head + body)
    wait_for(lambda: slow.health()["active"] == 1, "the request left with a byte unread to start")
    s.sendall(b"G")
    time.sleep(0.05)
    s.close()
    wait_for(lambda: slow.health()["active"] == 0, "the request left with a byte unread to be cancelled", timeout=2)
    s = open_stream(slow)  # mid-stream, with a reset
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    wait_for(lambda: slow.health()["active"] == 0, "the reset stream to be cancelled", timeout=2)
    # all 4 tokens, whatever they are (sampled at OpenAI's default temperature 1, the end token
    # came up now and then: 3 tokens, once in a CI run of session 21)
    status, _, text = slow.post("/v1/completions", {"model": MODEL, "prompt": [7, 8], "max_tokens": 4,
                                                    "ignore_eos": True})
    assert status == 200 and json.loads(text)["usage"]["completion_tokens"] == 4


def test_queued_clients_that_leave_free_their_places(slow):
    """Clients that leave while their requests wait for a slot: out of the
    queue at once (/health's queued drops, their places take new requests),
    never run."""
    streams = [open_stream(slow) for _ in range(2)]
    wait_for(lambda: slow.health()["active"] == 2, "two active requests")
    body = json.dumps({"model": MODEL, "prompt": [4], "max_tokens": 3}).encode()
    waiting = []
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", slow.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        waiting.append(s)
    wait_for(lambda: slow.health()["queued"] == 2, "two queued requests")
    for s in waiting:
        s.close()
    wait_for(lambda: slow.health()["queued"] == 0, "the queue to empty while both slots are busy", timeout=2)
    assert slow.health()["active"] == 2
    # the queue has its two places again: two more wait, neither gets 503
    done = []
    threads = [threading.Thread(target=lambda: done.append(slow.post("/v1/completions", json.loads(body))[0]))
               for _ in range(2)]
    for t in threads:
        t.start()
    wait_for(lambda: slow.health()["queued"] == 2, "two new queued requests")
    for s in streams:
        s.close()
    for t in threads:
        t.join(timeout=30)
    assert done == [200, 200]
    wait_for(lambda: slow.health() == {"status": "ok", "slots": 2, "active": 0, "queued": 0}, "free slots")


def test_name_tokenizer_graphs_and_built_bundle(tiny, tmp_path, cache_dir):
    """A model directory without a tokenizer: prompts must be ids, chats are
    refused; --tokenizer from elsewhere gives text prompts and the chat
    template back. Without -b the bundle is built from --db into --cache (as
    gcore-run's, whose answers it gives); --model-name names the model;
    decode steps replay graphs unless --no-graph (the closing line counts
    them)."""
    d, model, bundle = tiny
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in os.listdir(model):
        if not f.startswith("tokenizer"):
            shutil.copy(os.path.join(model, f), bare / f)
    env = {"GCORE_CACHE": cache_dir}
    flags = ("--db", tmp_path / "none.db", "--cache", cache_dir)
    ref = run_tool("gcore-run", "-m", bare, "--tokenizer", model, *flags, "--json", "-p", "Hello there", "-n", 8,
                   "--temp", 0, "--ignore-eos", env=env)
    assert ref.rc == 0, ref
    ref = json.loads(ref.out.splitlines()[0])
    for graphs in (True, False):
        s = Server(str(bare), None, *flags, "--parallel", 2, "--model-name", "llama-x", "--tokenizer", model,
                   *(() if graphs else ("--no-graph",)), env=env)
        try:
            assert any("bundle" in l and "0 of " in l and "problems tuned (no tuning database at" in l
                       for l in s.lines), s.lines
            status, _, text = s.request("GET", "/v1/models")
            assert [m["id"] for m in json.loads(text)["data"]] == ["llama-x"]
            body = {"model": "llama-x", "prompt": "Hello there", "max_tokens": 8, "temperature": 0,
                    "ignore_eos": True, "return_token_ids": True}
            status, _, text = s.post("/v1/completions", body)
            assert status == 200, text
            c = json.loads(text)["choices"][0]
            assert c["token_ids"] == ref["tokens"] and c["text"] == ref["text"]
            status, _, text = s.post("/v1/completions", dict(body, model=MODEL))
            assert status == 404 and json.loads(text)["error"]["code"] == "model_not_found"
            # greedy and past EOS: two tokens, so one decode step (sampled, a
            # first token that ends the reply left the count at 7)
            status, _, text = s.post("/v1/chat/completions", {"model": "llama-x", "max_tokens": 2,
                                                              "temperature": 0, "ignore_eos": True,
                                                              "messages": [{"role": "user", "content": "Hi"}]})
            assert status == 200, text
        finally:
            check_clean_exit(s)
        steps = re.search(r"(\d+) decode steps, [^;]*; (\d+) graph replays", "".join(s.lines))
        assert steps and int(steps.group(1)) >= 8, s.lines
        assert (int(steps.group(2)) > 0) == graphs, s.lines
    s = Server(str(bare), bundle)
    try:
        status, _, text = s.post("/v1/completions", {"prompt": "Hello", "max_tokens": 2})
        assert status == 400 and "no tokenizer" in json.loads(text)["error"]["message"], text
        status, _, text = s.post("/v1/completions", {"prompt": [5, 6], "max_tokens": 2})
        assert status == 200, text
        status, _, text = s.post("/v1/completions", {"prompt": [5, 6], "max_tokens": 2,
                                                     "response_format": {"type": "json_object"}})
        assert status == 400 and "no tokenizer" in json.loads(text)["error"]["message"], text
        status, _, text = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
        assert status == 400 and json.loads(text)["error"]["param"] == "messages", text
        for path, body in (("/tokenize", {"content": "Hi"}), ("/detokenize", {"tokens": [5]})):
            status, _, text = s.post(path, body)
            assert status == 400 and "no tokenizer" in json.loads(text)["error"]["message"], text
    finally:
        check_clean_exit(s)


def test_servers_exit_cleanly(srv, slow):
    """After everything above, both servers still answer, then stop on
    SIGTERM with exit code 0 and nothing from the sanitizers."""
    for s in (srv, slow):
        assert s.health()["status"] == "ok"
        check_clean_exit(s)


def test_shutdown_answers_what_waits_and_runs(tiny):
    """SIGTERM with a stream and a plain request in the two slots and one
    request queued: the plain and the queued one get 503 in OpenAI's error
    shape, the stream an error event; the server exits 0 and says how many
    decode steps it ran."""
    d, model, bundle = tiny
    s = Server(model, bundle, "--parallel", 2, env={"GCORE_SERVE_STEP_DELAY_MS": "20"})
    body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 250, "ignore_eos": True}
    got, first = {}, threading.Event()
    def ask(key, b):
        got[key] = s.post("/v1/completions", b)
    def ask_stream(b):  # reads the events as they come; first: one has come
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        c.request("POST", "/v1/completions", body=json.dumps(b), headers={"Content-Type": "application/json"})
        r, text = c.getresponse(), b""
        while chunk := r.read1(65536):
            text += chunk
            if b"data:" in text:
                first.set()
        got["stream"] = (r.status, dict(r.getheaders()), text.decode("utf-8", "replace"))
        c.close()
    stream = threading.Thread(target=ask_stream, args=(dict(body, stream=True),))
    stream.start()
    wait_for(lambda: s.health()["active"] == 1, "the stream to start")
    assert first.wait(timeout=120), "no event of the stream"  # a loaded machine may be slow to the first
    plain = threading.Thread(target=ask, args=("plain", body))
    plain.start()
    wait_for(lambda: s.health()["active"] == 2, "the plain request to start")
    queued = threading.Thread(target=ask, args=("queued", body))
    queued.start()
    wait_for(lambda: s.health()["queued"] == 1, "a queued request")
    rc, err = s.stop()
    for t in (stream, plain, queued):
        t.join(timeout=30)
    assert rc == 0, err
    for key in ("plain", "queued"):
        status, headers, text = got[key]
        assert status == 503, (key, got[key])
        assert json.loads(text)["error"]["message"] == "the server is shutting down", (key, text)
    status, _, text = got["stream"]
    assert status == 200
    events = sse(text)
    assert "shutting down" in events[-1]["error"]["message"], events[-1]
    assert all("error" not in e for e in events[:-1]) and len(events) > 1
    assert re.search(r"\d+ decode steps, [^;]*; \d+ graph replays", err), err
    for mark in SANITIZER_MARKS:
        assert mark not in err, err


def test_startup_errors(tiny, tmp_path):
    """Bad flags and files: one line, exit code 1 or 2, nothing served."""
    d, model, bundle = tiny
    for flag, value in (("--parallel", 17), ("--parallel", 0), ("--prefill-chunk", 0), ("--prefill-chunk", "x"),
                        ("--max-queue", 0), ("--max-body", -1), ("--ctx", 1), ("--port", 70000)):
        r = run_tool("gcore-serve", "-m", model, "-b", bundle, flag, value)
        assert r.rc == 2 and flag in r.err, (flag, value, r)
    r = run_tool("gcore-serve", "-m", str(tmp_path / "nothing"), "-b", bundle, "--port", 0)
    assert r.rc == 1 and r.err.startswith("gcore-serve: ") and len(r.err.strip().splitlines()) == 1, r
    r = run_tool("gcore-serve", "-m", model, "-b", bundle, "--host", "no.such.host.invalid", "--port", 0)
    assert r.rc == 1 and "--host" in r.err, r
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        r = run_tool("gcore-serve", "-m", model, "-b", bundle, "--port", busy.getsockname()[1])
        assert r.rc == 1 and "cannot listen" in r.err and len(r.err.strip().splitlines()) == 1, r


def test_api_key(tiny, tmp_path):
    """--api-key KEY (and --api-key-file): every route but /health needs
    "Authorization: Bearer KEY" or "X-Api-Key: KEY"; a missing, wrong or
    longer key gets 401 in OpenAI's shape with WWW-Authenticate, and the
    request is not run; CORS preflights pass (a browser sends them without
    the key). Bad keys and files are refused at start."""
    d, model, bundle = tiny
    key = "sk-test-" + "x" * 40
    (tmp_path / "key").write_text(key + "\n")
    for how in (("--api-key", key), ("--api-key-file", tmp_path / "key")):
        s = Server(model, bundle, *how)
        try:
            body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2}
            for hdrs in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + key + "x"},
                         {"Authorization": "Bearer " + key[:-1]}, {"Authorization": key}, {"X-Api-Key": "nope"}):
                status, headers, text = s.request("POST", "/v1/completions", body,
                                                  dict(hdrs, **{"Content-Type": "application/json"}))
                assert status == 401 and headers.get("WWW-Authenticate") == "Bearer", (hdrs, status, text)
                assert json.loads(text)["error"]["code"] == "invalid_api_key"
            for path in ("/v1/models", "/tokenize", "/metrics"):
                assert s.request("POST" if path == "/tokenize" else "GET", path, {"prompt": "x"})[0] == 401
            status, _, text = s.request("GET", "/metrics", None, {"Authorization": "Bearer " + key})
            assert status == 200 and "\ngcore:slots " in text, (status, text)
            assert s.health()["active"] == 0 and s.request("OPTIONS", "/v1/completions")[0] == 204
            for hdrs in ({"Authorization": "Bearer " + key}, {"authorization": "bearer " + key}, {"X-Api-Key": key}):
                status, _, text = s.request("POST", "/v1/completions", body,
                                            dict(hdrs, **{"Content-Type": "application/json"}))
                assert status == 200 and json.loads(text)["usage"]["completion_tokens"] == 2, (hdrs, text)
        finally:
            check_clean_exit(s)
    for args, needle in ((("--api-key", ""), "1 to 512"), (("--api-key", "a b"), "no space"),
                         (("--api-key", "k" * 513), "1 to 512"), (("--api-key-file", tmp_path / "none"), "--api-key-file"),
                         (("--api-key", "a", "--api-key-file", tmp_path / "key"), "both given")):
        r = run_tool("gcore-serve", "-m", model, "-b", bundle, "--port", 0, *args)
        assert r.rc == 1 and needle in r.err and len(r.err.strip().splitlines()) == 1, (args, r)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_starting_stops_the_server(tiny, tmp_path, sig):
    """SIGINT/SIGTERM before the server listens (here: -m a FIFO nobody
    writes, so opening the model blocks) end it at once, in one line,
    rather than once loading is done (or never)."""
    fifo = str(tmp_path / "model.fifo")
    os.mkfifo(fifo)
    p = subprocess.Popen([os.path.join(BIN, "gcore-serve"), "-m", fifo, "-b", tiny[2], "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("gcore-serve ignored the signal while starting")
    name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    assert p.returncode == 1 and err.strip() == f"gcore-serve: {name} while starting: stopping", err


# ------------------------------------------------------- block formats

@pytest.fixture(scope="module")
def mixed(tmp_path_factory, cache_dir):
    """A Q4_K_M-like GGUF file (tests/tinygguf.py: Q6_K attn_v beside Q4_K
    attn_q and attn_k, so that models/recipe.h splits each layer's QKV) with
    its own vocabulary, and its CPU bundle."""
    import tinygguf as G
    d = tmp_path_factory.mktemp("mixed")
    model = str(d / "mix.gguf")
    G.write_model(model, qtype=G.MIXED, seed=5, dim=256, hidden_dim=512, n_layers=2, n_heads=4, n_kv_heads=2,
                  vocab=320, max_seq=CTX)
    bundle = str(d / "mix.gcb")
    r = run_tool("gcore-gen", "--model", model, "--target", "cpu", "--prefill", 16, "-o", bundle,
                 env={"GCORE_CACHE": cache_dir})
    assert r.rc == 0, r
    return d, model, bundle


def test_batched_steps_of_a_split_qkv(mixed):
    """Batched decode steps of the split QKV (Q|K and V projected apart,
    their rows joined by concat: a row of its own sequence each): three
    requests at once on three slots give gcore-run's greedy ids."""
    d, model, bundle = mixed
    s = Server(model, bundle, "--parallel", 3)
    try:
        rng = random.Random(5)
        prompts = [[rng.randrange(3, 300) for _ in range(rng.randint(1, 20))] for _ in range(3)]
        refs = reference_ids(mixed, prompts, 12)
        name = json.loads(s.request("GET", "/v1/models")[2])["data"][0]["id"]
        assert completions_at_once(s, name, prompts, 12) == refs
    finally:
        check_clean_exit(s)


def test_echo_and_offsets_of_a_sentencepiece_vocabulary(mixed):
    """A SentencePiece vocabulary (tinygguf's) adds a space before each word
    that the decoder drops at the start of a text only: the completion
    continues the prompt's text, echoed or not (its first word keeps its
    space, as llama.cpp's and vLLM's do: prompt + text reads as one text);
    the tokens' texts spell the choice's text and text_offset counts into
    it. The
    reference decodes the pieces here (▁ a space, <0xXX> a byte, control
    tokens nothing, the first space dropped)."""
    import tinygguf as G
    d, model, bundle = mixed
    toks = G.vocab(320)[0]

    def spm_text(ids):
        b = b"".join(bytes([int(toks[i][3:5], 16)]) if toks[i].startswith("<0x") else
                     toks[i].replace("\u2581", " ").encode() for i in ids if i > 2)
        t = b.decode("utf-8", "replace")
        return t[1:] if t.startswith(" ") else t

    s = Server(model, bundle, "--parallel", 2)
    try:
        prompt = "the cat"
        body = {"prompt": prompt, "max_tokens": 8, "temperature": 1.0, "ignore_eos": True, "logprobs": 1,
                "echo": True, "return_token_ids": True}
        # a seed whose first token begins a word (8 of the 320 ids do)
        seed = next((k for k in range(400) if toks[completion(s, dict(body, seed=k, max_tokens=1))["token_ids"][0]]
                     .startswith("\u2581")), None)
        assert seed is not None, "no seed of 400 begins the completion with a word"
        body["seed"] = seed
        c = completion(s, body)
        ids, n = c["prompt_token_ids"] + c["token_ids"], len(c["prompt_token_ids"])
        assert ids[0] == 1 and spm_text(ids[:n]) == prompt
        assert c["text"] == spm_text(ids), (c["text"], spm_text(ids))  # " word" after the prompt
        assert c["text"][len(prompt)] == " "
        L = c["logprobs"]
        texts = ["" if i <= 2 else t for i, t in zip(ids, L["tokens"])]  # control tokens spell nothing
        assert "".join(texts[:n + 1]) == c["text"][:len("".join(texts[:n + 1]))] == prompt + texts[n]
        assert L["text_offset"][:n + 1] == [len("".join(texts[:k])) for k in range(n + 1)]
        plain = completion(s, dict(body, echo=False))
        assert plain["token_ids"] == c["token_ids"]
        assert plain["text"] == c["text"][len(prompt):] and plain["text"][0] == " "  # the prompt's continuation
        first = plain["logprobs"]["tokens"][0]
        assert first == texts[n] and plain["text"].startswith(first)
        assert plain["logprobs"]["text_offset"][:2] == [0, len(first)]
        only = completion(s, dict(body, max_tokens=0))  # echo alone: the prompt's logprobs
        assert only["text"] == prompt and only["token_ids"] == [] and only["finish_reason"] == "length"
        assert only["logprobs"]["token_logprobs"] == pytest.approx(L["token_logprobs"][:n])
        events = sse(s.post("/v1/completions", dict(body, max_tokens=0, stream=True))[2])
        assert events[0]["choices"][0]["text"] == prompt and events[-1]["choices"][0]["finish_reason"] == "length"
        status, _, text = s.post("/v1/completions", dict(body, echo=False, max_tokens=0))
        assert status == 400 and "from 1" in text, text
    finally:
        check_clean_exit(s)
