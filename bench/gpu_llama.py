#!/usr/bin/env python3
"""gpu_llama.py — gcore against Hugging Face transformers on one NVIDIA GPU,
in one run: random-weight fp16 models shaped like Llama-3.2-1B and
Llama-3-8B; decode (batch 1, a 128-token prompt, 256 new tokens) and prefill
(512 tokens). Prints tokens/s for both, the ratio, and the fraction of the
memory-bandwidth bound for decode (weight bytes read per token over the
device-to-device copy bandwidth measured in the same run).

Quantized weights (--quant q4_0,q4_k_m,q5_k_m,q8_0): GGUF files of the same shapes
written here with random blocks (random level bytes under fp16 scales chosen
so that weights stay about N(0, 0.02)-sized), laid out as llama.cpp's
quantizer lays those types out: q4_0 (matrices and token_embd Q4_0, output
Q6_K), q8_0 (everything Q8_0), q4_k_m (Q4_K, with attn_v and ffn_down in
Q6_K on llama.cpp's "more bits" layers and output in Q6_K), q5_k_m (the
same with Q5_K, which has no device layout: its GEMVs read the GGUF blocks
as stored); norms F32. For
each: decode tok/s (graph, 256 tokens after a 128-token prompt) against its
bound, the bytes of the weights as stored that a decode step reads (every
layer matrix, the LM head's matrix, the norms) over the copy bandwidth of the
same run, the ratio to gcore's own fp16 decode of the same shape (the fp16
model is run too), and prefill of 512 tokens. The dequantizing GEMVs'
fraction of copy bandwidth is bench/gpu_gemm.py's:
    bench/gpu_gemm.py --dtypes f16:q4_0:f16,f16:q4_k:f16,f16:q6_k:f16,f16:q8_0:f16 --gemv --m 512
transformers is not run for quantized files (it has no GGUF kernels; its
GGUF loader dequantizes); --no-hf skips it for fp16 too.

usage: bench/gpu_llama.py [--shapes 1b,8b,qwen2-1.5b,qwen3-1.7b] [--budget N] [--out DIR] [--quant q4_0,q4_k_m,q5_k_m,q8_0]
                          [--tune-decode N] [--no-hf] [--no-extra] [--profile] [--db PATH]
Needs: bin/ built, torch (+ transformers unless --no-hf), an NVIDIA GPU."""
import argparse
import json
import os
import struct
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import tinymodel as TM  # noqa: E402
import tinygguf as TG  # noqa: E402

SHAPES = {
    "1b": dict(dim=2048, hidden_dim=8192, n_layers=16, n_heads=32, n_kv_heads=8, vocab=128256,
               max_seq=4096, rope_theta=500000.0, rope_scaling="llama3", tied=True),
    "8b": dict(dim=4096, hidden_dim=14336, n_layers=32, n_heads=32, n_kv_heads=8, vocab=128256,
               max_seq=4096, rope_theta=500000.0, rope_scaling="llama3", tied=False),
    # Qwen's shapes: the q/k/v biases (Qwen2.5) or the per-head q/k norms (Qwen3) each add a step a layer
    "qwen2-1.5b": dict(dim=1536, hidden_dim=8960, n_layers=28, n_heads=12, n_kv_heads=2, vocab=151936,
                       max_seq=4096, rope_theta=1000000.0, eps=1e-6, tied=True, arch="qwen2"),
    "qwen3-1.7b": dict(dim=2048, hidden_dim=6144, n_layers=28, n_heads=16, n_kv_heads=8, vocab=151936,
                       max_seq=4096, rope_theta=1000000.0, eps=1e-6, tied=True, arch="qwen3"),
}
PROMPT, NEW, PREFILL = 128, 256, 512


def write_model(d, shape):
    """fp16 weights ~ N(0, 0.02) cut from one random pool (fast for billions
    of parameters), streamed to one safetensors file; norms are 1. Both
    engines read the same file."""
    if os.path.exists(os.path.join(d, "config.json")):
        return
    os.makedirs(d, exist_ok=True)
    hf = TM.make_config(dtype="f16", **shape)
    pool = (np.random.default_rng(0).standard_normal(1 << 26) * 0.02).astype(np.float16)
    shapes = TM.tensor_shapes(hf)
    header, off = {}, 0
    for name, shp in shapes:
        n = int(np.prod(shp)) * 2
        header[name] = {"dtype": "F16", "shape": list(shp), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(len(hj).to_bytes(8, "little") + hj)
        for k, (name, shp) in enumerate(shapes):
            n = int(np.prod(shp))
            if len(shp) == 1:
                f.write(np.ones(n, np.float16).tobytes())
                continue
            start = (k * 7919) % pool.size
            while n:
                take = min(n, pool.size - start)
                f.write(pool[start:start + take].tobytes())
                n -= take
                start = 0
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf, f)


# ---- quantized GGUF files ----------------------------------------------------

# ggml type id, elements and bytes per block, [(byte offset of an fp16 scale, its value)]:
# random levels under these scales give weights of about the fp16 model's size
QT = {"F32": (0, 1, 4, []), "Q8_0": (8, 32, 34, [(0, 2.0 ** -12)]), "Q4_0": (2, 32, 18, [(0, 2.0 ** -8)]),
      "Q4_K": (12, 256, 144, [(0, 2.0 ** -14), (2, 2.0 ** -11)]), "Q5_K": (13, 256, 176, [(0, 2.0 ** -15), (2, 2.0 ** -11)]),
      "Q6_K": (14, 256, 210, [(208, 2.0 ** -16)])}


def more_bits(i, n):
    """llama.cpp's use_more_bits(i_layer, n_layers): the layers whose attn_v
    and ffn_down Q4_K_M and Q5_K_M store in Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def gguf_type(name, mix, n_layers):
    """The type llama.cpp's quantizer gives tensor `name` for ftype mix."""
    if name.endswith("norm.weight") or name == "rope_freqs.weight":
        return "F32"
    if mix == "q8_0":
        return "Q8_0"
    if name == "output.weight":
        return "Q6_K"
    if mix == "q4_0":
        return "Q4_0"
    layer = int(name.split(".")[1]) if name.startswith("blk.") else -1
    if ("attn_v" in name or "ffn_down" in name) and more_bits(layer, n_layers):
        return "Q6_K"
    return "Q5_K" if mix == "q5_k_m" else "Q4_K"


def gguf_tensors(shape, mix):
    """(gguf name, type, dims innermost first) of the model, in file order."""
    hf = TM.make_config(dtype="f16", **shape)
    out = []
    for name, shp in TM.tensor_shapes(hf):
        g = TG.gguf_name(name)
        out.append((g, gguf_type(g, mix, shape["n_layers"]), list(reversed(shp))))
    if shape.get("rope_scaling") == "llama3":
        hd = shape["dim"] // shape["n_heads"]
        out.insert(0, ("rope_freqs.weight", "F32", [hd // 2]))
    return hf, out


def nbytes(t, dims):
    n = int(np.prod(dims))
    _, blk, size, _ = QT[t]
    return n // blk * size


def block_pool(t, mb=64):
    """About mb MiB of random blocks of type t with its scales set."""
    _, blk, size, scales = QT[t]
    nb = (mb << 20) // size
    pool = np.random.default_rng(blk + size).integers(0, 256, (nb, size), dtype=np.uint8)
    for off, v in scales:
        pool[:, off:off + 2] = np.frombuffer(np.float16(v).tobytes(), np.uint8)
    return pool.reshape(-1)


def write_gguf_model(path, shape, mix):
    """A GGUF file of the shape with random blocks in mix's types (see the
    header), streamed from pools of random blocks; norms 1, rope_freqs
    llama3's. Returns {gguf name: (type, dims)}."""
    hf, tensors = gguf_tensors(shape, mix)
    if os.path.exists(path):
        return {n: (t, d) for n, t, d in tensors}
    hd = shape["dim"] // shape["n_heads"]
    kvs = [("general.architecture", "str", "llama"), ("general.name", "str", f"bench-{mix}"),
           ("llama.context_length", "u32", shape["max_seq"]), ("llama.embedding_length", "u32", shape["dim"]),
           ("llama.feed_forward_length", "u32", shape["hidden_dim"]),
           ("llama.block_count", "u32", shape["n_layers"]), ("llama.attention.head_count", "u32", shape["n_heads"]),
           ("llama.attention.head_count_kv", "u32", shape["n_kv_heads"]),
           ("llama.rope.freq_base", "f32", shape["rope_theta"]),
           ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5), ("llama.rope.dimension_count", "u32", hd),
           ("llama.vocab_size", "u32", shape["vocab"]),
           ("general.file_type", "u32", {"q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17}[mix])]
    align = 32
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for k, t, v in kvs:
        head += TG._str(k) + struct.pack("<I", TG.VT[t]) + TG._value(t, v)
    off = 0
    for name, t, dims in tensors:
        head += TG._str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", QT[t][0], off)
        n = nbytes(t, dims)
        off += n + (-n % align)
    head += b"\0" * (-len(head) % align)
    pools = {}
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(head)
        for k, (name, t, dims) in enumerate(tensors):
            n = nbytes(t, dims)
            if t == "F32":
                data = (TG.llama3_rope_factors(hf) if name == "rope_freqs.weight"
                        else np.ones(int(np.prod(dims)), np.float32)).astype("<f4").tobytes()
                f.write(data)
            else:
                pool = pools.setdefault(t, block_pool(t))
                size = QT[t][2]
                start = (k * 7919 % (pool.size // size)) * size  # whole blocks, a different start per tensor
                left = n
                while left:
                    take = min(left, pool.size - start)
                    f.write(pool[start:start + take].tobytes())
                    left -= take
                    start = 0
            f.write(b"\0" * (-n % align))
    os.replace(tmp, path)
    return {n: (t, d) for n, t, d in tensors}


def quant_bytes_per_token(types, tied):
    """Bytes of the weights as stored that a decode step reads: every layer
    matrix, the LM head's matrix (token_embd when tied), the norms (F32 in the
    file, converted to f16 on the GPU: 2 bytes each); the gathered embedding
    row is left out."""
    total = 0
    for name, (t, dims) in types.items():
        if name.startswith("blk.") and not name.endswith("norm.weight"):
            total += nbytes(t, dims)
        elif name.endswith("norm.weight"):
            total += 2 * int(np.prod(dims))
    head = "token_embd.weight" if tied else "output.weight"
    return total + nbytes(*types[head])


def copy_bandwidth(torch):
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    n = 20
    for _ in range(n):
        y.copy_(x)
    torch.cuda.synchronize()
    return 2 * x.numel() * n / (time.perf_counter() - t0)  # read + write bytes / s


def hf_bench(torch, d):
    from transformers import AutoModelForCausalLM  # Llama's, Qwen2's or Qwen3's class, by config.json
    m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float16).cuda().eval()
    ids = torch.randint(0, 1000, (1, PROMPT), device="cuda")
    out = {}
    with torch.no_grad():
        gen = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, cache_implementation="static",
                   pad_token_id=0)
        # The static cache makes transformers compile the decode step; the
        # identical call first, so that compilation is not timed.
        m.generate(ids, **gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        m.generate(ids, **gen)
        torch.cuda.synchronize()
        t_all = time.perf_counter() - t0
        p = torch.randint(0, 1000, (1, PREFILL), device="cuda")
        m(p)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(3):
            m(p)
        torch.cuda.synchronize()
        t_pre = (time.perf_counter() - t0) / 3
        m(ids)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        m(ids)
        torch.cuda.synchronize()
        t_p128 = time.perf_counter() - t0
    out["decode_tok_s"] = NEW / max(t_all - t_p128, 1e-9)
    out["prefill_tok_s"] = PREFILL / t_pre
    del m
    torch.cuda.empty_cache()
    return out


def gcore(*args, env=None):
    r = subprocess.run([os.path.join(ROOT, "bin", args[0]), *map(str, args[1:])], capture_output=True,
                       text=True, env=env)
    if r.returncode:
        raise SystemExit(f"{args[0]} failed: {r.stderr.strip()}")
    return r


def leave_out_costs(d, b, ops, env):
    """gcore-bench --leave-out: tg NEW from an empty cache with the bundle
    b, then again per op of ops (comma-separated) without the decode
    steps' launches of it. {op or "": tok/s}."""
    r = gcore("gcore-bench", "-m", d, "-b", b, "--backend", "cuda", "-p", 0, "-n", NEW, "-r", 3,
              "--leave-out", ops, "-o", "json", env=env)
    return {t.get("left_out", ""): t["avg_ts"] for t in json.loads(r.stdout)}


def gcore_bench(d, out, budget, arch, tune_decode=None, use_db=None, extra=True, plans=False, long=0,
                decode_ctx=0, profile=False, leave_out=""):
    """d: a model (a Hugging Face directory or a GGUF file). extra: also the
    diagnostic runs (no graph, no PDL, --profile); profile without extra:
    the decode step's --profile table alone. plans (a quantized model):
    also the prefill of a bundle that keeps the quantized plan for every
    prompt (gcore-gen --dequant-rows 0), and both plans' prefill profiles.
    long: also the prefill of a prompt of that many tokens (its --profile
    table and the PREFILL-token one with the rest). decode_ctx: also the
    decode of NEW tokens after a prompt of that many. leave_out: also
    leave_out_costs (an op's cost in the decode step by difference)."""
    env = dict(os.environ, GCORE_CACHE=os.path.join(out, "cache"))
    db, b = os.path.join(out, "tune.db"), os.path.join(out, os.path.basename(d) + ".gcb")
    if use_db:  # winners of an earlier gcore-tune run (bench/gpu_tune.py)
        db = use_db
    t_tune = 0.0
    if budget or tune_decode:
        t0 = time.time()
        gcore("gcore-tune", "--model", d, "--target", arch,
              "--prefill", f"{PROMPT},{PREFILL}" if budget else "none", "--batch", "1",
              "--db", db, "--budget", budget or tune_decode, "--no-progress", env=env)
        t_tune = time.time() - t0
    gcore("gcore-gen", "--model", d, "--target", arch, "--prefill", f"{PROMPT},{PREFILL}",
          *(["--db", db] if budget or tune_decode or use_db else []), "-o", b, env=env)
    toks = ",".join(str(i) for i in range(1, PROMPT + 1))
    run = ["gcore-run", "-m", d, "-b", b, "--backend", "cuda", "--temp", "0", "--ignore-eos", "--json",
           "--ctx", "1024"]
    # --warmup: the first launch of each kernel, cold caches and the graph
    # capture are not timed (transformers is warmed up the same way).
    dec = json.loads(gcore(*run, "--tokens", toks, "-n", NEW, "--warmup", 8, env=env).stdout)
    ptoks = ",".join(str(i % 1000 + 1) for i in range(PREFILL))
    pre = json.loads(gcore(*run, "--tokens", ptoks, "-n", 1, "--warmup", 0, env=env).stdout)
    plan = {}
    if leave_out:
        plan["leave_out"] = leave_out_costs(d, b, leave_out, env)
    if decode_ctx:  # decode deep in the context: every step reads decode_ctx+ cached rows
        crun = [x if x != "1024" else str(decode_ctx + NEW + 8) for x in run]
        ctoks = ",".join(str(i % 1000 + 1) for i in range(decode_ctx))
        plan["decode_ctx_tok_s"] = json.loads(gcore(*crun, "--tokens", ctoks, "-n", NEW, "--warmup", 8,
                                                    env=env).stdout)["decode_tok_per_s"]
    if long:  # a long prompt, in a context that holds it
        lrun = [x if x != "1024" else str(long + 8) for x in run]
        ltoks = ",".join(str(i % 1000 + 1) for i in range(long))
        plan["prefill_long_tok_s"] = json.loads(gcore(*lrun, "--tokens", ltoks, "-n", 1, "--warmup", 0,
                                                      env=env).stdout)["prompt_tok_per_s"]
        plan["profile_long"] = "".join(gcore(*r, "--tokens", t, "-n", 1, "--warmup", 0, "--profile", env=env).stderr
                                       for r, t in ((run, ptoks), (lrun, ltoks)))
    if plans:  # the same bundle but for the plan, and the bundle's choice recorded
        import sqlite3
        with sqlite3.connect(b) as c:
            plan["deq_rows"] = dict(c.execute("SELECT key, value FROM meta").fetchall()).get("llama.deq_rows.gpu")
        b0 = b[:-4] + "-q.gcb"
        gcore("gcore-gen", "--model", d, "--target", arch, "--prefill", f"{PROMPT},{PREFILL}", "--dequant-rows", 0,
              *(["--db", db] if budget or tune_decode or use_db else []), "-o", b0, env=env)
        run0 = [x if x != b else b0 for x in run]
        plan["prefill_q_tok_s"] = json.loads(gcore(*run0, "--tokens", ptoks, "-n", 1, "--warmup", 0,
                                                   env=env).stdout)["prompt_tok_per_s"]
        plan["profile"] = "".join(gcore(*r, "--tokens", ptoks, "-n", 1, "--warmup", 0, "--profile", env=env).stderr
                                  for r in (run, run0))
    if not extra:  # profile: the decode step's table all the same (one run of 64 tokens)
        prof_dec = gcore(*run, "--tokens", toks, "-n", 64, "--warmup", 8, "--profile", env=env).stderr if profile else ""
        return {"tune_s": t_tune, "decode_tok_s": dec["decode_tok_per_s"], "decode_nograph_tok_s": float("nan"),
                "decode_nopdl_tok_s": float("nan"), "prefill_tok_s": pre["prompt_tok_per_s"],
                **plan, "profile": prof_dec + plan.get("profile", "") + plan.get("profile_long", "")}
    nog = json.loads(gcore(*run, "--tokens", toks, "-n", NEW, "--warmup", 8, "--no-graph", env=env).stdout)
    # the graph with every launch serialised (no programmatic dependent launch)
    nopdl = json.loads(gcore(*run, "--tokens", toks, "-n", NEW, "--warmup", 8, "--no-pdl",
                             env=env).stdout)
    prof_dec = gcore(*run, "--tokens", toks, "-n", 64, "--warmup", 8, "--profile", env=env).stderr
    prof_pre = gcore(*run, "--tokens", ptoks, "-n", 1, "--warmup", 0, "--profile", env=env).stderr
    with open(os.path.join(out, os.path.basename(d) + ".profile.txt"), "w") as f:
        f.write(prof_dec + "\n" + prof_pre)
    return {"tune_s": t_tune, "decode_tok_s": dec["decode_tok_per_s"], "decode_nograph_tok_s": nog["decode_tok_per_s"],
            "decode_nopdl_tok_s": nopdl["decode_tok_per_s"],
            "prefill_tok_s": pre["prompt_tok_per_s"], **plan,
            "profile": prof_dec + "\n" + prof_pre + "\n" + plan.get("profile", "") + plan.get("profile_long", "")}


def weight_bytes_per_token(shape):
    D, F, L, H, G, V = (shape[k] for k in ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab"))
    hd = D // H
    per_layer = D * (H + 2 * G) * hd + H * hd * D + 3 * D * F + 2 * D
    per_layer += {"qwen2": (H + 2 * G) * hd, "qwen3": 2 * hd}.get(shape.get("arch"), 0)  # biases, q/k norms
    return 2 * (L * per_layer + V * D + D)  # fp16; the LM head reads the (tied or not) classifier


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--budget", default="0", help="gcore-tune candidates per problem (0: defaults only)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-gpu"))
    ap.add_argument("--arch", default="sm_90a",
                    help="NVIDIA target (sm_90a: the wgmma GEMMs serve prefill; sm_90: mma.sync ones)")
    ap.add_argument("--profile", action="store_true", help="print gcore-run --profile tables (with --no-extra: "
                    "the decode step's, and a quantized model's prefill plans')")
    ap.add_argument("--db", default=None, help="build the bundles from this tuning database "
                    "(e.g. bench/gpu_tune.py's) instead of tuning here")
    ap.add_argument("--tune-decode", default=None, metavar="N",
                    help="tune the decode step's problems only (N candidates each) before building the bundle")
    ap.add_argument("--quant", default="", help="also GGUF files in these types (q4_0, q4_k_m, q5_k_m, q8_0), "
                    "comma-separated: decode against their bound, the ratio to gcore's fp16 decode, prefill")
    ap.add_argument("--no-hf", action="store_true", help="do not run transformers")
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="also the fp16 model's prefill of an N-token prompt (e.g. 4000), with its profile")
    ap.add_argument("--decode-ctx", type=int, default=0, metavar="N",
                    help="also the fp16 model's decode after an N-token prompt (N + 256 + 8 <= the context, e.g. 3830), against its bound "
                    "with the KV cache's bytes")
    ap.add_argument("--leave-out", default="", metavar="OPS",
                    help="also the fp16 model's decode (tg256 from an empty cache, gcore-bench) without the decode "
                    "steps' launches of each of these ops (comma-separated): each op's cost in the step, by difference")
    ap.add_argument("--no-extra", action="store_true",
                    help="skip the diagnostic runs (without the graph, --no-pdl, --profile)")
    ap.add_argument("--no-fp16", action="store_true",
                    help="the --quant files only: no fp16 model (nor its tuning), so no ratio to its decode; "
                    "needs --no-hf, and neither --long nor --decode-ctx (they run the fp16 model)")
    a = ap.parse_args()
    if a.quant and any(SHAPES[s].get("arch", "llama") != "llama" for s in a.shapes.split(",")):
        ap.error("--quant writes Llama GGUF files: only the 1b and 8b shapes")
    if a.no_fp16 and (not a.quant or not a.no_hf or a.long or a.decode_ctx):
        ap.error("--no-fp16 needs --quant and --no-hf, and takes neither --long nor --decode-ctx")
    import torch
    os.makedirs(a.out, exist_ok=True)
    bw = copy_bandwidth(torch)
    print(f"device: {torch.cuda.get_device_name()}, copy bandwidth {bw / 1e9:.0f} GB/s (read+write)")
    for s in a.shapes.split(","):
        d, g = os.path.join(a.out, f"llama-{s}"), None
        if not a.no_fp16:
            t0 = time.time()
            write_model(d, SHAPES[s])
            print(f"[{s}] model written in {time.time() - t0:.0f} s")
            g = gcore_bench(d, a.out, a.budget if a.budget != "0" else None, a.arch, a.tune_decode, a.db,
                            not a.no_extra, long=a.long, decode_ctx=a.decode_ctx, profile=a.profile,
                            leave_out=a.leave_out)
            if g["tune_s"]:
                print(f"[{s}] gcore-tune: {g['tune_s']:.0f} s")
        bound = bw / weight_bytes_per_token(SHAPES[s])
        for mix in [q for q in a.quant.split(",") if q]:
            path = os.path.join(a.out, f"llama-{s}-{mix}.gguf")
            t0 = time.time()
            types = write_gguf_model(path, SHAPES[s], mix)
            qb = quant_bytes_per_token(types, SHAPES[s]["tied"])
            print(f"[{s} {mix}] GGUF written in {time.time() - t0:.0f} s: {qb / 1e9:.2f} GB read per decode token")
            q = gcore_bench(path, a.out, a.budget if a.budget != "0" else None, a.arch, a.tune_decode, a.db,
                            not a.no_extra, plans=True, profile=a.profile)
            qbound = bw / qb
            if q["tune_s"]:
                print(f"[{s} {mix}] gcore-tune: {q['tune_s']:.0f} s")
            vs = (f"; {q['decode_tok_s'] / g['decode_tok_s']:.2f}x gcore fp16 ({g['decode_tok_s']:.1f} tok/s)"
                  if g else "")
            print(f"[{s} {mix}] decode  gcore {q['decode_tok_s']:8.1f} tok/s  bound {qbound:.0f} tok/s: "
                  f"{q['decode_tok_s'] / qbound:.1%} of it{vs}")
            if not a.no_extra:
                print(f"[{s} {mix}] decode without the graph: {q['decode_nograph_tok_s']:8.1f} tok/s; "
                      f"--no-pdl: {q['decode_nopdl_tok_s']:8.1f} tok/s")
            fp = f"fp16: {g['prefill_tok_s']:.0f}; " if g else ""
            print(f"[{s} {mix}] prefill gcore {q['prefill_tok_s']:8.0f} tok/s ({fp}"
                  f"the bundle's dense plan from {q['deq_rows']} tokens; quantized plan throughout: "
                  f"{q['prefill_q_tok_s']:.0f})")
            if a.profile:
                print(q["profile"])
        if a.long:
            print(f"[{s}] prefill of {a.long} tokens: gcore {g['prefill_long_tok_s']:8.0f} tok/s")
        if a.decode_ctx:
            sh = SHAPES[s]
            kv = 2 * sh["n_layers"] * sh["n_kv_heads"] * (sh["dim"] // sh["n_heads"]) * 2 * (a.decode_ctx + NEW / 2)
            cb = bw / (weight_bytes_per_token(sh) + kv)
            print(f"[{s}] decode after {a.decode_ctx} tokens: gcore {g['decode_ctx_tok_s']:8.1f} tok/s  bound "
                  f"{cb:.0f} tok/s (weights + {kv / 1e9:.2f} GB of KV cache per token): "
                  f"{g['decode_ctx_tok_s'] / cb:.1%}")
        if a.leave_out:
            lo, L = g["leave_out"], SHAPES[s]["n_layers"]
            print(f"[{s}] decode tg{NEW} from an empty cache (gcore-bench): {lo['']:.1f} tok/s = "
                  f"{lo[''] / bound:.1%} of the bound")
            for op in a.leave_out.split(","):
                us = (1 / lo[''] - 1 / lo[op]) * 1e6
                print(f"[{s}]   without {op:22s} {lo[op]:8.1f} tok/s ({lo[op] / bound:.1%}): "
                      f"{us:7.1f} us a step, {us / L:5.1f} us a layer")
        if a.no_fp16:
            continue
        if a.no_hf:
            print(f"[{s}] decode  gcore {g['decode_tok_s']:8.1f} tok/s  bound {bound:.0f} tok/s: "
                  f"{g['decode_tok_s'] / bound:.1%}; prefill {g['prefill_tok_s']:.0f} tok/s")
            if a.profile:
                print(g["profile"])
            continue
        h = hf_bench(torch, d)
        print(f"[{s}] decode  gcore {g['decode_tok_s']:8.1f} tok/s  HF {h['decode_tok_s']:8.1f} tok/s  "
              f"ratio {g['decode_tok_s'] / h['decode_tok_s']:.2f}  bound {bound:.0f} tok/s: gcore "
              f"{g['decode_tok_s'] / bound:.0%}, HF {h['decode_tok_s'] / bound:.0%}")
        if not a.no_extra:
            print(f"[{s}] decode without the graph (kernel by kernel): {g['decode_nograph_tok_s']:8.1f} tok/s")
            print(f"[{s}] decode in the graph without overlapped launches (--no-pdl): "
                  f"{g['decode_nopdl_tok_s']:8.1f} tok/s ({g['decode_nopdl_tok_s'] / bound:.0%} of the bound)")
        if a.profile:
            print(g["profile"])
        print(f"[{s}] prefill gcore {g['prefill_tok_s']:8.0f} tok/s  HF {h['prefill_tok_s']:8.0f} tok/s  "
              f"ratio {g['prefill_tok_s'] / h['prefill_tok_s']:.2f}")
    # The copy bandwidth moves 1-2% between runs (4192-4258 GB/s on one
    # H200 in one session): measured again at the end, so a ratio near a
    # target is read with its spread.
    bw_end = copy_bandwidth(torch)
    print(f"device: copy bandwidth at the end {bw_end / 1e9:.0f} GB/s (the bounds above used {bw / 1e9:.0f}: "
          f"against this one each ratio is {bw / bw_end - 1:+.1%} of itself)")


if __name__ == "__main__":
    main()
