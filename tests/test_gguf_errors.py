"""GGUF files that are broken or describe what gcore does not run, and bad
--quantize requests: each gives one line `gcore-run: ...` (or gcore-gen,
gcore-tune) on stderr naming the culprit (file, tensor, key, value) and a
non-zero exit, never a crash (the harness fails any run that trips a
sanitizer or dumps core).

The model is opened before the bundle, so a run with a bundle path that
does not exist shows whether the model loaded: the control case below fails
on the bundle, every broken file fails on the model."""
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import assert_clean_error  # noqa: E402
import ggufq as Q  # noqa: E402
import tinygguf as G  # noqa: E402
import tinymodel as TM  # noqa: E402

CFG = dict(dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab=96, max_seq=64)
NO_BUNDLE = "no-such-bundle.gcb"


class Model:
    """A good tiny GGUF (F32, no vocabulary) and where its fields lie."""

    def __init__(self, path, **kw):
        self.cfg = TM.make_config(**CFG)
        self.w = TM.random_weights(self.cfg, 3)
        self.path = path
        self.layout = G.write_llama(path, self.cfg, self.w, with_vocab=False, **kw)

    def info(self, name, field):
        return self.layout["infos"][name][field]


@pytest.fixture
def model(tmp_path):
    return Model(str(tmp_path / "m.gguf"))


def run(gc, path, *args, tool="gcore-run"):
    if tool == "gcore-run":
        return gc("gcore-run", "-m", path, "-b", NO_BUNDLE, "--tokens", "1,2,3", "-n", 2, *args)
    if tool == "gcore-gen":
        return gc("gcore-gen", "--model", path, "--target", "cpu", "-o", "x.gcb", *args)
    return gc("gcore-tune", "--model", path, "--prefill", "none", "--budget", 1, "--db", "t.db", *args)


def test_gguf_control_loads(gc, model):
    """The good file loads: the error is about the missing bundle."""
    assert_clean_error(run(gc, model.path), "gcore-run", NO_BUNDLE)


# ------------------------------------------------------------- the layout

def test_gguf_truncated_data(gc, model):
    TM.truncate(model.path, 100)
    assert_clean_error(run(gc, model.path), "gcore-run", "output.weight", "past the end of the file")


@pytest.mark.parametrize("keep", [3, 20, 200])
def test_gguf_truncated_header(gc, model, keep):
    """Cut inside the header, the metadata or the tensor infos."""
    with open(model.path, "r+b") as f:
        f.truncate(keep)
    assert_clean_error(run(gc, model.path), "gcore-run", "m.gguf")


def test_gguf_offset_past_the_end(gc, model):
    name = "blk.0.attn_q.weight"
    G.patch(model.path, model.info(name, "offset"), "<Q", 1 << 40)
    assert_clean_error(run(gc, model.path), "gcore-run", name, "past the end")


def test_gguf_misaligned_offset(gc, model):
    name = "blk.1.ffn_up.weight"
    G.patch(model.path, model.info(name, "offset"), "<Q", model.layout["offsets"][name] + 4)
    assert_clean_error(run(gc, model.path), "gcore-run", name, "alignment")


def test_gguf_overlapping_tensors(gc, model):
    a, b = "blk.0.attn_q.weight", "blk.0.attn_k.weight"
    G.patch(model.path, model.info(b, "offset"), "<Q", model.layout["offsets"][a])
    assert_clean_error(run(gc, model.path), "gcore-run", a, b, "overlap")


def test_gguf_type_larger_than_its_data(gc, model):
    """An F32 tensor relabelled F64: twice the bytes, into the next tensor."""
    name = "blk.0.attn_v.weight"
    G.patch(model.path, model.info(name, "type"), "<I", Q.OTHER_TYPES["F64"][0])
    assert_clean_error(run(gc, model.path), "gcore-run", name, "overlap")


@pytest.mark.parametrize("where,value,needle", [
    (8, 1 << 40, "tensors do not fit"),           # tensor count
    (16, 1 << 40, "metadata keys do not fit"),    # key/value count
])
def test_gguf_huge_counts(gc, model, where, value, needle):
    G.patch(model.path, where, "<Q", value)
    assert_clean_error(run(gc, model.path), "gcore-run", "m.gguf", needle)


def test_gguf_huge_dims(gc, model):
    name = "blk.0.ffn_gate.weight"
    G.patch(model.path, model.info(name, "dims") + 8, "<Q", 1 << 62)
    assert_clean_error(run(gc, model.path), "gcore-run", name)


def test_gguf_too_many_dims(gc, model):
    name = "output_norm.weight"
    G.patch(model.path, model.info(name, "ndim"), "<I", 9)
    assert_clean_error(run(gc, model.path), "gcore-run", name, "dimensions")


def test_gguf_duplicate_name(gc, model):
    a, b = "blk.0.attn_q.weight", "blk.0.attn_k.weight"
    start = model.info(b, "ndim") - len(b)       # the name's bytes end where n_dims begins
    G.patch(model.path, start, f"{len(a)}s", a.encode())
    assert_clean_error(run(gc, model.path), "gcore-run", a, "twice")


# ------------------------------------------------------------ the types

def test_gguf_unknown_type(gc, model):
    name = "blk.1.attn_output.weight"
    G.patch(model.path, model.info(name, "type"), "<I", 99)
    assert_clean_error(run(gc, model.path), "gcore-run", name, "99")


def test_gguf_unsupported_type(gc, model):
    """Q8_1: a ggml type gcore does not read (its data fits in the F32 bytes)."""
    name = "blk.1.ffn_down.weight"
    G.patch(model.path, model.info(name, "type"), "<I", Q.OTHER_TYPES["Q8_1"][0])
    assert_clean_error(run(gc, model.path), "gcore-run", name, "Q8_1")


def test_gguf_format_made_f16_beyond_its_range(gc, tmp_path):
    """Q5_0 (a format gcore makes F16 at load) whose first block's scale is
    the largest half: its values, up to 65504 * 16, are beyond F16's range;
    the load refuses the tensor in one line rather than run with infinities."""
    m = Model(str(tmp_path / "q.gguf"), qtype="Q5_0")
    name = "blk.0.attn_q.weight"
    G.patch(m.path, m.layout["data_start"] + m.layout["offsets"][name], "<H", 0x7BFF)
    assert_clean_error(run(gc, m.path), "gcore-run", name, "beyond F16's range")


def test_gguf_rows_not_whole_blocks(gc, model):
    """Rows of 64 elements relabelled Q4_K (blocks of 256)."""
    name = "blk.0.ffn_up.weight"
    G.patch(model.path, model.info(name, "type"), "<I", Q.TYPES["Q4_K"][0])
    assert_clean_error(run(gc, model.path), "gcore-run", name, "Q4_K")


# ------------------------------------------------- what the model declares

def test_gguf_version_1(gc, model):
    G.patch(model.path, 4, "<I", 1)
    assert_clean_error(run(gc, model.path), "gcore-run", "version 1")


def test_gguf_big_endian(gc, model):
    G.patch(model.path, 4, ">I", 3)
    assert_clean_error(run(gc, model.path), "gcore-run", "big-endian")


def write(path, **kw):
    """The good model with write_llama's keywords (extra_kvs, drop_keys, ...)."""
    cfg = TM.make_config(**CFG)
    G.write_llama(path, cfg, TM.random_weights(cfg, 3), with_vocab=False, **kw)
    return path


@pytest.mark.parametrize("tool", ["gcore-run", "gcore-gen", "gcore-tune"])
def test_gguf_wrong_architecture(gc, tmp_path, tool):
    path = write(str(tmp_path / "q.gguf"), extra_kvs=[("general.architecture", "str", "phi3")])
    assert_clean_error(run(gc, path, tool=tool), tool, "general.architecture 'phi3'")


def test_gguf_missing_tensor(gc, tmp_path):
    cfg = TM.make_config(**CFG)
    w = TM.random_weights(cfg, 3)
    del w["model.layers.1.mlp.down_proj.weight"]
    path = str(tmp_path / "m.gguf")
    G.write_llama(path, cfg, w, with_vocab=False)
    assert_clean_error(run(gc, path), "gcore-run", "blk.1.ffn_down.weight", "missing")


def test_gguf_wrong_shape(gc, model):
    """attn_k of [32, 64] ({64, 32} in GGUF order) declared {32, 64}."""
    name = "blk.0.attn_k.weight"
    pos = model.info(name, "dims")
    G.patch(model.path, pos, "<QQ", 32, 64)
    assert_clean_error(run(gc, model.path), "gcore-run", name)


def test_gguf_unknown_tensor(gc, tmp_path):
    """A bias tensor changes the model: refused by name, not ignored."""
    path = write(str(tmp_path / "m.gguf"), extra_tensors=[("blk.0.attn_q.bias", 0, [64], b"\0" * 256)])
    assert_clean_error(run(gc, path), "gcore-run", "blk.0.attn_q.bias")


@pytest.mark.parametrize("key,typ,value,needle", [
    ("llama.rope.scaling.type", "str", "yarn", "yarn"),
    ("llama.rope.scaling.factor", "f32", -4.0, "linear rope scaling factor -4 must be positive"),
    ("llama.expert_count", "u32", 8, "expert"),
    ("llama.rope.dimension_count", "u32", 8, "dimension_count"),
    ("llama.attention.layer_norm_rms_epsilon", "str", "1e-5", "layer_norm_rms_epsilon"),
    ("llama.block_count", "u32", 0, "block_count"),
])
def test_gguf_unsupported_or_bad_config(gc, tmp_path, key, typ, value, needle):
    path = write(str(tmp_path / "m.gguf"), extra_kvs=[(key, typ, value)])
    assert_clean_error(run(gc, path), "gcore-run", needle)


@pytest.mark.parametrize("key,value,needle", [
    ("llama.attention.head_count_kv", [2, 4], "differs between layers (2 in layer 0, 4 in layer 1)"),
    ("llama.attention.head_count", [4, 4, 4], "has 3 entries for 2 layers"),
    ("llama.feed_forward_length", [128, 256], "differs between layers"),
])
def test_gguf_per_layer_arrays_refused(gc, tmp_path, key, value, needle):
    """llama.cpp reads these keys as a number or one per layer; gcore's
    layers are one shape, so different values are refused by name."""
    path = write(str(tmp_path / "m.gguf"), extra_kvs=[(key, "arr:i32", value)])
    assert_clean_error(run(gc, path), "gcore-run", key, needle)


def test_gguf_per_layer_arrays_of_one_value(gc, tmp_path):
    """The same keys as arrays of one value a layer: the model llama.cpp
    reads, the run of the scalar keys (same greedy ids)."""
    plain = write(str(tmp_path / "s.gguf"))
    arrays = write(str(tmp_path / "a.gguf"), extra_kvs=[
        ("llama.attention.head_count_kv", "arr:i32", [2, 2]), ("llama.attention.head_count", "arr:i32", [4, 4]),
        ("llama.feed_forward_length", "arr:u32", [128, 128])])
    out = []
    for path in (plain, arrays):
        r = gc("gcore-gen", "--model", path, "--target", "cpu", "-o", path + ".gcb")
        assert r.rc == 0, r
        r = gc("gcore-run", "-m", path, "-b", path + ".gcb", "--tokens", "1,2,3", "-n", 4, "--temp", "0",
               "--ignore-eos")
        assert r.rc == 0, r
        out.append(r.out)
    assert out[0] == out[1] and out[0].strip(), out


@pytest.mark.parametrize("tool", ["gcore-run", "gcore-gen", "gcore-tune"])
def test_gguf_split_part_refused(gc, tmp_path, tool):
    """One part of a model llama-gguf-split split (split.no of
    split.count): refused with the merge command, not as a missing tensor."""
    path = write(str(tmp_path / "m-00001-of-00002.gguf"), extra_kvs=[
        ("split.no", "u16", 0), ("split.count", "u16", 2), ("split.tensors.count", "i32", 21)])
    assert_clean_error(run(gc, path, tool=tool), tool, "part 1 of a model split into 2 files",
                       "llama-gguf-split --merge")


def test_gguf_special_ids_outside_the_vocabulary(gc, tmp_path):
    """BOS and EOS ids past the vocabulary (a converter's slip): llama.cpp
    warns and keeps its default ids (1 and 2 here); gcore-run says so in one
    line and runs as the file with those ids does, --tokens and -p alike."""
    cfg = TM.make_config(**dict(CFG, vocab=320))
    good, bad = str(tmp_path / "good.gguf"), str(tmp_path / "bad.gguf")
    G.write_llama(good, cfg, TM.random_weights(cfg, 3))  # its vocabulary's BOS 1, EOS 2
    G.write_llama(bad, cfg, TM.random_weights(cfg, 3), extra_kvs=[
        ("tokenizer.ggml.bos_token_id", "u32", 4294967295), ("tokenizer.ggml.eos_token_id", "u32", 100000)])
    r = gc("gcore-gen", "--model", good, "--target", "cpu", "-o", "g.gcb")
    assert r.rc == 0, r
    outs = []
    for path in (good, bad):
        r = gc("gcore-run", "-m", path, "-b", "g.gcb", "-p", "the cat", "-n", 6, "--temp", "0", "--json")
        assert r.rc == 0, r
        outs.append((json.loads(r.out)["tokens"], r.err))
    assert outs[0][0] == outs[1][0], outs
    assert "outside the vocabulary" not in outs[0][1], outs[0][1]
    for needle in ("tokenizer.ggml.bos_token_id 4294967295 is outside the vocabulary (320 tokens): 1 used",
                   "tokenizer.ggml.eos_token_id 100000 is outside the vocabulary (320 tokens): 2 used"):
        assert needle in outs[1][1], outs[1][1]
    r = gc("gcore-run", "--tokenizer", bad, "--tokenize", "--bos", input="the cat")
    assert r.rc == 0 and r.out.split()[0] == "1", r  # the tokenizer's BOS: the default too


def test_gguf_duplicate_key(gc, tmp_path):
    """A key written twice (its two values may differ): refused, as llama.cpp
    refuses it, by the model's reader and the vocabulary's alike."""
    path = str(tmp_path / "d.gguf")
    G.write_gguf(path, [("general.architecture", "str", "llama"), ("llama.block_count", "u32", 2),
                        ("llama.block_count", "u32", 3)], [])
    assert_clean_error(run(gc, path), "gcore-run", "metadata key 'llama.block_count' appears twice")
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", input="x")
    assert_clean_error(r, "gcore-run", "appears twice")


def test_gguf_alignment_not_a_power_of_two(gc, tmp_path):
    path = write(str(tmp_path / "m.gguf"), alignment=48)
    assert_clean_error(run(gc, path), "gcore-run", "general.alignment 48")


@pytest.mark.parametrize("key", ["llama.block_count", "general.architecture",
                                 "llama.attention.layer_norm_rms_epsilon"])
def test_gguf_missing_key(gc, tmp_path, key):
    path = write(str(tmp_path / "m.gguf"), drop_keys=[key])
    assert_clean_error(run(gc, path), "gcore-run", key)


# --------------------------------------------------------------- --quantize

@pytest.mark.parametrize("tool", ["gcore-run", "gcore-gen", "gcore-tune"])
def test_quantize_rows_not_whole_blocks(gc, tmp_path, tool):
    """q4_k needs rows of 256: a model of width 64 is refused, naming a matrix."""
    d = str(tmp_path / "hf")
    TM.write_model(d, seed=1, **CFG)
    assert_clean_error(run(gc, d, "--quantize", "q4_k", tool=tool), tool, "--quantize q4_k", "q_proj", "256")


def test_quantize_unknown_type(gc, tmp_path):
    d = str(tmp_path / "hf")
    TM.write_model(d, seed=1, **CFG)
    assert_clean_error(run(gc, d, "--quantize", "q5_k"), "gcore-run", "q5_k", "q8_0, q4_0, q4_k")


def test_quantize_already_quantized(gc, tmp_path):
    path = str(tmp_path / "m.gguf")
    cfg = TM.make_config(**CFG)
    G.write_llama(path, cfg, TM.random_weights(cfg, 3), qtype="Q8_0", with_vocab=False)
    assert_clean_error(run(gc, path, "--quantize", "q8_0"), "gcore-run", "already stored as Q8_0")


@pytest.mark.parametrize("tool,args", [("gcore-run", ["-b", "x.gcb", "--op", "gemm", "--m", 1, "--n", 8,
                                                      "--k", 8]),
                                       ("gcore-gen", ["-o", "x.gcb", "--op", "gemm", "--m", 1, "--n", 8,
                                                      "--k", 8]),
                                       ("gcore-tune", ["--op", "gemm", "--m", 1, "--n", 8, "--k", 8])])
def test_quantize_needs_a_model(gc, tool, args):
    r = gc(tool, *args, "--quantize", "q8_0")
    assert_clean_error(r, tool, "--quantize")
