"""gcore-run's model mode on bad input: broken or inconsistent model files,
unsupported configs, bad prompts, a bundle that lacks the model's ops. Each
gives one line `gcore-run: ...` on stderr naming the culprit (file, tensor,
flag or value) and a non-zero exit, never a crash (the harness fails any run
that trips a sanitizer or dumps core)."""
import json
import os
import re
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import assert_clean_error, run_tool  # noqa: E402
import tinymodel as TM  # noqa: E402

CONFIG = dict(dim=48, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, vocab=160)
SEED = 5
PROMPT = "1,17,5,42,99,3,64"
L2C = dict(dim=32, hidden_dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=128, seq_len=64, tied=True)
OPS = ("embed", "rmsnorm", "gemm", "gemm_swiglu", "rope_kv", "attention", "add")


class Good:
    pass


@pytest.fixture(scope="module")
def good(tmp_path_factory, cache_dir):
    """A valid tiny HF model and a llama2.c file, each with its bundle, and a
    control run showing that both work: the errors below come from what each
    test breaks."""
    d = tmp_path_factory.mktemp("good")
    env = {"GCORE_CACHE": cache_dir}
    g = Good()
    g.model, g.l2c = str(d / "model"), str(d / "tiny.bin")
    TM.write_model(g.model, seed=SEED, **CONFIG)
    TM.write_llama2c(g.l2c, seed=SEED, **L2C)
    g.bundle, g.l2c_bundle = str(d / "model.gcb"), str(d / "l2c.gcb")
    for model, bundle in ((g.model, g.bundle), (g.l2c, g.l2c_bundle)):
        # (an explicit --prefill: these tests are about errors, not gcore-gen's defaults)
        r = run_tool("gcore-gen", "--model", model, "--target", "cpu", "--prefill", 8, "-o", bundle,
                     cwd=str(d), env=env)
        assert r.rc == 0, r
        r = run_tool("gcore-run", "-m", model, "-b", bundle, "--tokens", PROMPT, "-n", 2, "--temp", "0",
                     "--ignore-eos", cwd=str(d), env=env)
        assert r.rc == 0, r
    return g


@pytest.fixture
def model(gc, good):
    """A private copy of the good HF model, to break."""
    d = gc.dir / "m"
    shutil.copytree(good.model, d)
    return str(d)


def run_model(gc, model, bundle, *args, tokens=PROMPT):
    extra = ["--tokens", tokens] if tokens is not None else []
    return gc("gcore-run", "-m", model, "-b", bundle, *extra, "-n", 4, "--temp", "0", *args)


def error_line(r):
    assert_clean_error(r, "gcore-run")
    return [line for line in r.err.splitlines() if line.strip()][0]


def st(model):
    return os.path.join(model, "model.safetensors")


def edit_config(model, **changes):
    path = os.path.join(model, "config.json")
    cfg = json.load(open(path))
    cfg.update(changes)
    json.dump(cfg, open(path, "w"), indent=2)


# ------------------------------------------------------ broken safetensors

def test_truncated_safetensors(gc, good, model):
    TM.truncate(st(model), 100)
    assert_clean_error(run_model(gc, model, good.bundle), "gcore-run", "model.safetensors")


def test_truncated_safetensors_refused_by_gen(gc, model):
    TM.truncate(st(model), 100)
    r = gc("gcore-gen", "--model", model, "--target", "cpu", "-o", "x.gcb")
    assert_clean_error(r, "gcore-gen", "model.safetensors")
    assert not os.path.exists(gc.dir / "x.gcb")


@pytest.mark.parametrize("name,delta", [
    ("model.layers.0.mlp.gate_proj.weight", -4),   # size disagrees with dtype x shape
    ("model.layers.1.self_attn.k_proj.weight", 8),  # runs into the next tensor
    ("lm_head.weight", 4),                          # last tensor: past the end of the file
])
def test_lying_data_offsets(gc, good, model, name, delta):
    TM.lie_offsets(model, name, delta)
    assert_clean_error(run_model(gc, model, good.bundle), "gcore-run", name)


def test_header_length_past_eof(gc, good, model):
    TM.header_length_past_eof(st(model))
    assert_clean_error(run_model(gc, model, good.bundle), "gcore-run", "model.safetensors")


def test_missing_tensor(gc, good, model):
    name = "model.layers.1.mlp.down_proj.weight"
    TM.remove_tensor(model, name)
    assert_clean_error(run_model(gc, model, good.bundle), "gcore-run", name)


def test_missing_shard(gc, good):
    d = str(gc.dir / "sharded")
    TM.write_model(d, seed=SEED, shards=2, **CONFIG)
    assert run_model(gc, d, good.bundle).rc == 0
    gone = TM.remove_shard(d, 1)
    assert_clean_error(run_model(gc, d, good.bundle), "gcore-run", os.path.basename(gone))


def test_wrong_shape(gc, good, model):
    name = "model.layers.0.mlp.gate_proj.weight"     # [96, 48] stored as [48, 96]
    TM.wrong_shape(model, name)
    assert_clean_error(run_model(gc, model, good.bundle), "gcore-run", name)


@pytest.mark.parametrize("name,dtype,how", [
    ("model.norm.weight", "I32", "relabel"),                        # F32 bytes called I32
    ("model.layers.0.self_attn.q_proj.weight", "F64", "retype"),    # a well-formed F64 tensor
    ("model.embed_tokens.weight", "I8", "retype"),                  # a well-formed int8 tensor
])
def test_wrong_dtype(gc, good, model, name, dtype, how):
    (TM.wrong_dtype if how == "relabel" else TM.retype)(model, name, dtype)
    assert_clean_error(run_model(gc, model, good.bundle), "gcore-run", name, dtype)


# ------------------------------------------------------------------ config

@pytest.mark.parametrize("field,value,culprit", [
    ("num_attention_heads", 8, r"k_proj|v_proj"),             # head_dim 12 -> 6: k/v shapes disagree
    ("intermediate_size", 80, r"gate_proj|up_proj|down_proj"),
])
def test_config_inconsistent_with_weights(gc, good, model, field, value, culprit):
    edit_config(model, **{field: value})
    line = error_line(run_model(gc, model, good.bundle))
    assert re.search(culprit, line), line


def test_unsupported_rope_scaling(gc, good, model):
    edit_config(model, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    assert_clean_error(run_model(gc, model, good.bundle), "gcore-run", "yarn")


# ----------------------------------------------------------------- prompts

def test_prompt_longer_than_ctx(gc, good):
    assert_clean_error(run_model(gc, good.model, good.bundle, "--ctx", 4), "gcore-run", "--ctx")


@pytest.mark.parametrize("bad", [CONFIG["vocab"], 70001])
def test_token_id_outside_vocab(gc, good, bad):
    r = run_model(gc, good.model, good.bundle, tokens=f"1,17,{bad},5")
    assert_clean_error(r, "gcore-run", str(bad))


@pytest.mark.parametrize("tokens,needle", [("1,x,3", "'x' is not a token id"),
                                           ("1,,3", "an empty id before comma 2"),
                                           (",1", "an empty id before comma 1"),
                                           ("1, ,3", "an empty id before comma 2"),
                                           ("1,3,", "an empty id after the last comma")])
def test_malformed_tokens(gc, good, tokens, needle):
    """Ids are separated by commas, blanks or both; a comma with no id
    before it (or after the last) is a typo, refused rather than skipped."""
    assert_clean_error(run_model(gc, good.model, good.bundle, tokens=tokens), "gcore-run", "--tokens", needle)


def test_tokens_separated_by_commas_and_blanks(gc, good):
    """"1, 17 ,5" and "1 17 5" are the same prompt as "1,17,5"."""
    outs = [run_model(gc, good.model, good.bundle, tokens=t) for t in ("1,17,5", "1, 17 ,5", " 1 17 5 ")]
    assert all(r.rc == 0 for r in outs), outs
    assert outs[0].out == outs[1].out == outs[2].out, outs


@pytest.mark.parametrize("lines", ["1,x\n", "1,50\n1,x\n", "1,2\n\n1,-1\n"])
def test_malformed_tokens_file(gc, good, lines):
    """A bad id on any line of --tokens-file: one line naming the file and
    line (the prompts read before it are freed once), never a crash."""
    path = gc.dir / "prompts.txt"
    path.write_text(lines)
    r = gc("gcore-run", "-m", good.model, "-b", good.bundle, "--tokens-file", path, "-n", 2, "--temp", 0)
    n = len([l for l in lines.splitlines()])
    assert_clean_error(r, "gcore-run", f"prompts.txt:{n}:", "is not a token id")


def test_top_p_zero_refused_with_the_flags(gc, good):
    """--top-p 0 (sampling from nothing) is refused with the other flags
    (exit code 2), before any model or bundle is opened."""
    r = run_model(gc, good.model, "no-such-bundle.gcb", "--top-p", 0)
    assert r.rc == 2 and r.err.strip() == "gcore-run: --top-p: expected 0 < P <= 1", r


def test_db_that_is_not_a_file(gc, good, tmp_path):
    """--db naming a FIFO (or any non-file) is refused, as gcore-tune refuses
    it, rather than read as 'no tuning database'."""
    fifo = str(tmp_path / "db.fifo")
    os.mkfifo(fifo)
    r = gc("gcore-run", "-m", good.model, "--db", fifo, "--tokens", PROMPT, "-n", 2, "--temp", 0)
    assert_clean_error(r, "gcore-run", "db.fifo", "a FIFO, not a regular file")


def test_a_file_that_is_no_model(gc, good, tmp_path):
    """Text (no GGUF magic, no sensible llama2.c header): the error says
    what the file was tried as, not only what its first bytes would mean."""
    path = tmp_path / "notes.txt"
    path.write_text("these are notes, not a model; " * 4)
    r = gc("gcore-run", "-m", path, "-b", good.bundle, "--tokens", PROMPT, "-n", 2)
    assert_clean_error(r, "gcore-run", "notes.txt: neither a GGUF file", "nor a llama2.c checkpoint")


def test_text_prompt_refused(gc, good):
    r = run_model(gc, good.model, good.bundle, "-p", "Once upon a time", tokens=None)
    assert_clean_error(r, "gcore-run", "--tokens")


# ------------------------------------------------------------------ bundle

def test_bundle_without_the_models_ops(gc, good):
    r = gc("gcore-gen", "--op", "gemm", "--m", "1", "--n", "24", "--k", "24", "-o", "gemm.gcb")
    assert r.rc == 0, r
    line = error_line(run_model(gc, good.model, gc.dir / "gemm.gcb"))
    assert "has no kernel for" in line, line
    m = re.search(r"has no kernel for '(\w+)", line)
    assert m and m.group(1) in OPS, line


# ------------------------------------------------------------- llama2.c

@pytest.mark.parametrize("drop", [6, 4096, "header"])
def test_truncated_llama2c(gc, good, drop):
    path = str(gc.dir / "tiny.bin")
    shutil.copy(good.l2c, path)
    TM.truncate(path, os.path.getsize(path) - 20 if drop == "header" else drop)
    assert_clean_error(run_model(gc, path, good.l2c_bundle), "gcore-run", "tiny.bin")


def test_missing_model_path(gc, good):
    assert_clean_error(run_model(gc, str(gc.dir / "nowhere"), good.bundle), "gcore-run", "nowhere")


# ------------------------------------------------- config against weights

def test_config_with_fewer_layers_than_the_weights(gc, good, model):
    edit_config(model, num_hidden_layers=1)
    line = error_line(run_model(gc, model, good.bundle))
    assert "num_hidden_layers 1, but the weights have layer 1" in line, line
    assert "first unexpected tensor 'model.layers.1.input_layernorm.weight'" in line, line
    assert_clean_error(gc("gcore-gen", "--model", model, "--prefill", 8, "-o", "x.gcb"), "gcore-gen",
                       "num_hidden_layers 1")


def test_config_with_more_layers_than_the_weights(gc, good, model):
    edit_config(model, num_hidden_layers=3)
    line = error_line(run_model(gc, model, good.bundle))
    assert "num_hidden_layers 3, but the weights have no layer 2" in line, line
    assert "model.layers.2.input_layernorm.weight" in line, line


def add_tensor(model, name, like="model.norm.weight"):
    """A copy of tensor `like` under another name, appended to the data."""
    def edit(h, d):
        b, e = h[like]["data_offsets"]
        h[name] = {"dtype": h[like]["dtype"], "shape": h[like]["shape"],
                   "data_offsets": [len(d), len(d) + e - b]}
        return h, d + d[b:e]
    TM._rewrite(st(model), edit)


def test_tensor_the_config_does_not_describe(gc, good, model):
    add_tensor(model, "model.layers.0.self_attn.q_proj.bias")
    line = error_line(run_model(gc, model, good.bundle))
    assert "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'" in line, line


def test_rotary_inv_freq_is_ignored(gc, good, model):
    add_tensor(model, "model.layers.0.self_attn.rotary_emb.inv_freq")
    r = run_model(gc, model, good.bundle)
    assert r.rc == 0, r


def test_tied_config_with_a_different_lm_head(gc, good, model):
    edit_config(model, tie_word_embeddings=True)
    line = error_line(run_model(gc, model, good.bundle))
    assert "tie_word_embeddings true" in line and "lm_head.weight" in line, line


def test_tied_config_with_a_copy_of_the_embedding(gc, good, model):
    """Some exports save lm_head.weight beside tied embeddings: a copy agrees."""
    def edit(h, d):
        eb, ee = h["model.embed_tokens.weight"]["data_offsets"]
        lb, le = h["lm_head.weight"]["data_offsets"]
        return h, d[:lb] + d[eb:ee] + d[le:]
    TM._rewrite(st(model), edit)
    edit_config(model, tie_word_embeddings=True)
    r = run_model(gc, model, good.bundle)
    assert r.rc == 0, r


def test_untied_config_without_lm_head(gc, good, model):
    TM.remove_tensor(model, "lm_head.weight")
    line = error_line(run_model(gc, model, good.bundle))
    assert "lm_head.weight" in line and "tie_word_embeddings false" in line, line


def test_logits_to_a_device_is_refused(gc, good):
    for target in ("/dev/full", "/dev/null"):
        line = error_line(run_model(gc, good.model, good.bundle, "--logits", target))
        assert f"{target}: a character device, not a regular file" in line, line
