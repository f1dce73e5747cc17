#!/usr/bin/env python3
"""serve_bench.py — gcore-serve under concurrent streaming clients: N
clients at once against one client at a time, on a model of Llama-3-8B's
shape (fp16, random weights, written here) or a smaller one.

For each of N different prompts (random ids, --prompt tokens each) it first
runs the request alone (one client, the server otherwise idle), then all N
at once, each streaming --tokens greedy tokens (ignore_eos, so every stream
has that length). It reports:
  - tokens/s of one client (the mean of the N single runs, first token to
    last) and the aggregate tokens/s of N clients (all tokens over the
    wall time from the first request to the last token), and their ratio;
  - whether each stream of the N-client run equals its single-client run
    token for token (and where the first that does not differs).
Target on an H200 (issue 18): 8B fp16, 8 clients >= 5x one client, every
stream equal.

Equality needs a row's result not to depend on the rows beside it. By
default a decode step has as many rows as requests are generating (1 .. N
over a run), and the bundle may serve each row count with another kernel
(another summation order: 16-bit rounding can then pick another token at a
near tie); with --fixed-batch every step has --parallel rows, so one
client's steps are the same problems as N clients', at the cost of the
lone client's speed. The report says which was run.

usage: bench/serve_bench.py [--shape 8b] [--clients 8] [--tokens 256] [--prompt 128]
                            [--backend cuda] [--arch sm_90a] [--budget N | --db PATH] [--out DIR]
                            [--fixed-batch] [--logprobs N] [--chat-turns K] [--score N]
Needs bin/ built (gcore-serve, gcore-tune, gcore-gen) and numpy. With
--budget N it first tunes the model's prefill of --prompt tokens and its
batched decode steps of 1 .. --clients rows (gcore-tune --batch 1,...,N);
--db uses the winners of an earlier run instead. --shape tiny runs on the
CPU in seconds (a smoke test of the script). The model gets the project's
byte-level tokenizer (tests/tinymodel.py), so the server streams text as
it would for a real model, and --logprobs can name tokens."""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from gpu_llama import SHAPES, write_model  # noqa: E402

SHAPES = dict(SHAPES, tiny=dict(dim=64, hidden_dim=160, n_layers=2, n_heads=4, n_kv_heads=2, vocab=512,
                                max_seq=1024, rope_theta=10000.0, rope_scaling=None, tied=False))


def tool(name, *args, env):
    r = subprocess.run([os.path.join(ROOT, "bin", name), *map(str, args)], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"{name} failed: {r.stderr.strip()}")
    return r


class Server:
    def __init__(self, args, env, log):
        self.log = open(log, "w")
        self.p = subprocess.Popen([os.path.join(ROOT, "bin", "gcore-serve"), *map(str, args)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        for line in self.p.stderr:  # the bundle may be built first: minutes on a GPU target
            self.log.write(line)
            self.log.flush()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        else:
            raise SystemExit(f"gcore-serve did not start; see {log}")
        threading.Thread(target=lambda: [self.log.write(x) for x in self.p.stderr], daemon=True).start()

    def stop(self):
        self.p.terminate()
        return self.p.wait(timeout=120)


LOGPROBS = None  # --logprobs: each request's "logprobs" (its tokens' log-probabilities, N alternatives)


def stream(port, model, prompt, n, out, start=None, cache=False):
    """One streaming completion: out gets its ids and the times of the
    request, its first and its last token. cache: the server's prompt
    cache may serve it (off elsewhere: the runs repeat their prompts)."""
    if start:
        start.wait()
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0,
                       "ignore_eos": True, "stream": True, "return_token_ids": True, "cache_prompt": cache,
                       **({"logprobs": LOGPROBS} if LOGPROBS is not None else {})})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:300]}")
    ids, first, last = [], None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if "error" in ev:
            raise SystemExit(f"stream error: {ev['error']}")
        got = ev["choices"][0].get("token_ids", [])
        if got:
            now = time.perf_counter()
            first = first or now
            last = now
            ids += got
    c.close()
    out.update(ids=ids, t0=t0, first=first, last=last)


def run_concurrent(port, model, prompts, n):
    outs = [dict() for _ in prompts]
    start = threading.Barrier(len(prompts))
    ts = [threading.Thread(target=stream, args=(port, model, p, n, o, start)) for p, o in zip(prompts, outs)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return outs


def chat_turns(port, model, turns, new, reply, vocab, cache):
    """One client's conversation of `turns` requests: each prompt is the
    last one, its reply and `new` more tokens (random ids, the same for
    both runs); the time to each turn's first token."""
    rng, prompt, ttft = random.Random(2), [], []
    for _ in range(turns):
        prompt = prompt + [rng.randrange(1, vocab) for _ in range(new)]
        o = {}
        stream(port, model, prompt, reply, o, cache=cache)
        ttft.append(o["first"] - o["t0"])
        prompt = prompt + o["ids"]
    return ttft


def score(port, model, prompt, logprobs):
    """One request that scores prompt (echo, max_tokens 0, logprobs: every
    prompt token's log-probability, as lm-evaluation-harness asks) or, with
    logprobs None, that prefills it for one greedy token; its seconds."""
    body = {"model": model, "prompt": prompt, "temperature": 0, "cache_prompt": False}
    body.update({"echo": True, "max_tokens": 0, "logprobs": logprobs} if logprobs is not None else {"max_tokens": 1})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read()
    t = time.perf_counter() - t0
    c.close()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {text[:300]}")
    if logprobs is not None and len(json.loads(text)["choices"][0]["logprobs"]["token_logprobs"]) != len(prompt):
        raise SystemExit("score: not one log-probability a prompt token")
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="8b", choices=sorted(SHAPES))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=0, help="gcore-serve --parallel (default: --clients)")
    ap.add_argument("--tokens", type=int, default=256, help="tokens each stream generates")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens of each request")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--arch", default="sm_90a", help="the target gcore-tune tunes for (with --budget)")
    ap.add_argument("--budget", default=None, help="tune first: gcore-tune candidates per problem")
    ap.add_argument("--db", default=None, help="the tuning database (default: OUT/tune.db)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--fixed-batch", action="store_true",
                    help="gcore-serve --fixed-batch: every decode step runs --parallel rows")
    ap.add_argument("--logprobs", type=int, default=None,
                    help="every request asks for its tokens' log-probabilities and N alternatives "
                         "(sampled on the host from copied logits, not by the device's argmax)")
    ap.add_argument("--chat-turns", type=int, default=0,
                    help="instead: one client's conversation of this many turns (--prompt new tokens and a "
                         "--tokens reply each), the time to each turn's first token with the prompt cache and "
                         "without, in one server run")
    ap.add_argument("--score", type=int, default=None, metavar="N",
                    help="instead: one client scoring --prompt-token prompts (echo, max_tokens 0, logprobs N: "
                         "lm-evaluation-harness's loglikelihood request) against prefilling them for one token")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-serve"))
    a = ap.parse_args()
    global LOGPROBS
    LOGPROBS = a.logprobs
    if a.shape == "tiny" and a.backend == "cuda":
        a.backend = "cpu"
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, GCORE_CACHE=os.path.join(a.out, "cache"))
    d = os.path.join(a.out, f"llama-{a.shape}")
    write_model(d, SHAPES[a.shape])
    if not os.path.exists(os.path.join(d, "tokenizer.json")):  # logprobs name tokens by their text
        import tinymodel as TM
        TM.write_tokenizer(d, SHAPES[a.shape]["vocab"])
    db = a.db or os.path.join(a.out, "tune.db")
    n = a.clients
    if a.budget:
        t0 = time.time()
        tool("gcore-tune", "--model", d, "--target", "cpu" if a.backend == "cpu" else a.arch,
             "--prefill", a.prompt, "--batch", ",".join(str(i) for i in range(1, n + 1)), "--db", db,
             "--budget", a.budget, "--no-progress", env=env)
        print(f"tuned in {time.time() - t0:.0f} s")
    srv = Server(["-m", d, "--backend", a.backend, "--port", 0, "--parallel", a.parallel or n, "--ctx", a.ctx,
                  "--db", db, "--model-name", "bench", *(["--fixed-batch"] if a.fixed_batch else [])],
                 env, os.path.join(a.out, "serve.log"))
    try:
        rng = random.Random(1)
        vocab = SHAPES[a.shape]["vocab"]
        if a.score is not None:
            prompts = [[rng.randrange(1, vocab) for _ in range(a.prompt)] for _ in range(4)]
            score(srv.port, "bench", prompts[0], a.score), score(srv.port, "bench", prompts[0], None)  # warm-up
            scored = min(score(srv.port, "bench", p, a.score) for p in prompts)
            plain = min(score(srv.port, "bench", p, None) for p in prompts)
            res = {"shape": a.shape, "backend": a.backend, "prompt": a.prompt, "logprobs": a.score,
                   "score_s": round(scored, 4), "prefill_s": round(plain, 4),
                   "scored_tok_s": round(a.prompt / scored, 1), "prefill_tok_s": round(a.prompt / plain, 1)}
            with open(os.path.join(a.out, f"serve-{a.shape}-score{a.prompt}.json"), "w") as f:
                json.dump(res, f, indent=1)
            print(json.dumps(res))
            print(f"{a.shape} on {a.backend}: a {a.prompt}-token prompt scored (logprobs {a.score}) in "
                  f"{scored * 1e3:.1f} ms, prefilled for one token in {plain * 1e3:.1f} ms (best of 4)")
            return
        if a.chat_turns:
            run_concurrent(srv.port, "bench", [[rng.randrange(1, vocab) for _ in range(a.prompt)]], 8)  # warm-up
            # with the cache first: a run without it reads no slot's cache, but
            # leaves its prompts in the slots, where the other would find them
            with_cache = chat_turns(srv.port, "bench", a.chat_turns, a.prompt, a.tokens, vocab, True)
            without = chat_turns(srv.port, "bench", a.chat_turns, a.prompt, a.tokens, vocab, False)
            res = {"shape": a.shape, "backend": a.backend, "turns": a.chat_turns, "new_tokens": a.prompt,
                   "reply_tokens": a.tokens, "ttft_s_without_cache": [round(x, 4) for x in without],
                   "ttft_s_with_cache": [round(x, 4) for x in with_cache],
                   "last_turn_speedup": round(without[-1] / with_cache[-1], 2)}
            with open(os.path.join(a.out, f"serve-{a.shape}-turns{a.chat_turns}.json"), "w") as f:
                json.dump(res, f, indent=1)
            print(json.dumps(res))
            print(f"{a.shape} on {a.backend}: turn {a.chat_turns} ({len(without) * (a.prompt + a.tokens) - a.tokens} "
                  f"prompt tokens): first token after {without[-1] * 1e3:.1f} ms without the prompt cache, "
                  f"{with_cache[-1] * 1e3:.1f} ms with it")
            return
        prompts = [[rng.randrange(1, vocab) for _ in range(a.prompt)] for _ in range(n)]
        # warm-up: every kernel's first launch, and the graphs of steps of 1 .. n rows
        run_concurrent(srv.port, "bench", prompts, 8)
        singles = []
        for p in prompts:
            o = {}
            stream(srv.port, "bench", p, a.tokens, o)
            singles.append(o)
        many = run_concurrent(srv.port, "bench", prompts, a.tokens)
    finally:
        rc = srv.stop()
    one = [(len(o["ids"]) - 1) / (o["last"] - o["first"]) for o in singles]
    one_tps = sum(one) / len(one)
    total = sum(len(o["ids"]) for o in many)
    wall = max(o["last"] for o in many) - min(o["t0"] for o in many)
    many_tps = total / wall
    # where the N-client wall time goes: the first tokens (admission and
    # the N prefills) and the steps after them
    ttft = [o["first"] - o["t0"] for o in many]
    steady = (total - n) / max(1e-9, max(o["last"] for o in many) - max(o["first"] for o in many))
    equal, diffs = 0, []
    for i, (s, m) in enumerate(zip(singles, many)):
        if s["ids"] == m["ids"]:
            equal += 1
        else:
            at = next((k for k, (x, y) in enumerate(zip(s["ids"], m["ids"])) if x != y), min(len(s["ids"]), len(m["ids"])))
            diffs.append({"stream": i, "first_difference_at": at})
    res = {"shape": a.shape, "backend": a.backend, "clients": n, "prompt": a.prompt, "tokens": a.tokens,
           "fixed_batch": a.fixed_batch, "logprobs": a.logprobs,
           "one_client_tok_s": round(one_tps, 2), "one_client_ttft_s": round(sum(o["first"] - o["t0"] for o in singles) / n, 4),
           "n_clients_tok_s": round(many_tps, 2), "ratio": round(many_tps / one_tps, 3),
           "n_clients_ttft_s": [round(x, 4) for x in ttft],
           "n_clients_after_last_first_token_tok_s": round(steady, 2),
           "streams_equal": f"{equal}/{n}", "differences": diffs, "server_exit": rc}
    with open(os.path.join(a.out, f"serve-{a.shape}-{n}{'' if a.logprobs is None else f'-logprobs{a.logprobs}'}.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))
    print(f"{a.shape} on {a.backend}: 1 client {one_tps:.1f} tok/s; {n} clients {many_tps:.1f} tok/s "
          f"({many_tps / one_tps:.2f}x); streams equal to their single-client runs: {equal}/{n}")


if __name__ == "__main__":
    main()
