"""The block formats (base/quant.c) against the independent numpy ones
(tests/ggufq.py): dequantization of random blocks bit for bit, and the
reference quantizers (Q8_0, Q4_0, Q4_K: llama.cpp's quantize_row_*_ref)
byte for byte on rows of several distributions. The C side runs through
tests/c/test_quant's filter mode; its literal blocks are its own unit test."""
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import ROOT  # noqa: E402
import ggufq as Q  # noqa: E402

CDIR = os.environ.get("GCORE_CTESTS", os.path.join(ROOT, "build", "rel", "tests"))
EXE = os.path.join(CDIR, "test_quant")
HALVES = {"Q8_0": [0], "Q4_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
          # the formats gcore makes F16 at load
          "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q2_K": [80, 82], "Q3_K": [108], "IQ4_NL": [0], "IQ4_XS": [0]}


@pytest.fixture(scope="module")
def exe():
    if not os.path.exists(EXE):
        pytest.fail(f"{EXE} not built (run the tests through 'make test')")
    return EXE


def c_quantize(exe, tmp_path, name, x):
    src, dst = tmp_path / "in.f32", tmp_path / "out.bin"
    np.asarray(x, dtype="<f4").tofile(src)
    p = subprocess.run([exe, "quantize", name, str(src), str(dst)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return dst.read_bytes()


def c_dequantize(exe, tmp_path, name, raw, n):
    src, dst = tmp_path / "in.bin", tmp_path / "out.f32"
    src.write_bytes(raw)
    p = subprocess.run([exe, "dequantize", name, str(src), str(n), str(dst)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return np.fromfile(dst, dtype="<f4")


def random_blocks(rng, name, nb):
    """nb blocks of random bytes whose half fields hold finite values."""
    _, _, size = Q.ALL_TYPES[name]
    b = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    for off in HALVES[name]:
        h = rng.integers(0, 0x7C00, nb).astype(np.uint16) | (rng.integers(0, 2, nb).astype(np.uint16) << 15)
        b[:, off:off + 2] = h.astype("<u2").view(np.uint8).reshape(-1, 2)
    return b.tobytes()


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"] + sorted(Q.FOREIGN_TYPES))
def test_gguf_dequantize_matches_numpy(exe, tmp_path, name):
    """Random blocks (every level, packed-scale and high-bit pattern; halves
    of every finite value, both signs): gcore's floats equal numpy's bit for
    bit, for the formats it computes on and for those it makes F16 at load
    (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS: gc_quant_ggml_dequantize)."""
    tid, blk, _ = Q.ALL_TYPES[name]
    rng = np.random.default_rng(tid)
    nb = 400
    raw = random_blocks(rng, name, nb)
    got = c_dequantize(exe, tmp_path, name, raw, nb * blk)
    want = Q.dequantize(name, raw, nb * blk)
    assert got.shape == want.shape
    bad = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
    assert bad.size == 0, f"{name}: {bad.size} elements differ, first {bad[0]}: {got[bad[0]]!r} vs {want[bad[0]]!r}"


@pytest.mark.parametrize("name", ["Q8_0R", "Q4_0R", "Q4_KR", "Q6_KR"])
def test_device_layouts_match_numpy(exe, tmp_path, name):
    """gcore's device layouts (base/quant.h) against numpy's permutation,
    written from the same description: random blocks dequantize bit for bit
    as the GGUF blocks they were repacked from, and the quantizer writes the
    GGUF quantizer's bytes, repacked."""
    base = Q.DEVICE_TYPES[name][0]
    rng = np.random.default_rng(len(name))
    raw = Q.to_device(name, random_blocks(rng, base, 256 // Q.TYPES[base][1] * 50))
    n = 50 * 256
    got = c_dequantize(exe, tmp_path, name, raw, n)
    want = Q.dequantize(base, Q.from_device(name, raw), n)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    if base == "Q6_K":  # read, never written (as Q6_K itself)
        return
    x = rows("special", rng, 256 * 8)
    assert c_quantize(exe, tmp_path, name, x) == Q.quantize(name, x) == Q.to_device(name, Q.quantize(base, x))


def rows(kind, rng, n):
    """Test rows of n floats: Gaussian, tiny, heavy-tailed, all positive,
    and blocks that are zero, constant negative, constant positive, integers."""
    if kind == "normal":
        x = rng.standard_normal(n)
    elif kind == "tiny":
        x = rng.uniform(-1, 1, n) * 1e-3
    elif kind == "heavy":
        x = rng.standard_normal(n) ** 3
    elif kind == "positive":
        x = np.abs(rng.standard_normal(n)) + 0.5
    else:
        x = rng.standard_normal(n)
        x[:256], x[256:512], x[512:768] = 0, -0.25, 3.0
        x[768:1024] = rng.integers(-3, 3, 256)
    return x.astype(np.float32)


@pytest.mark.parametrize("kind", ["normal", "tiny", "heavy", "positive", "special"])
@pytest.mark.parametrize("name", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_K"])
def test_gguf_quantize_matches_numpy(exe, tmp_path, name, kind):
    """gcore's quantizers write numpy's bytes (llama.cpp's reference
    algorithms, every float operation rounded as written)."""
    x = rows(kind, np.random.default_rng(len(kind) * 7 + len(name)), 256 * 48)
    got, want = c_quantize(exe, tmp_path, name, x), Q.quantize(name, x)
    assert len(got) == len(want) == Q.nbytes(name, x.size)
    if got != want:
        a, b = np.frombuffer(got, np.uint8), np.frombuffer(want, np.uint8)
        i = int(np.nonzero(a != b)[0][0])
        blk = Q.TYPES[name][2]
        pytest.fail(f"{name} {kind}: bytes differ first at {i} (block {i // blk}): gcore {a[i]}, numpy {b[i]}")


@pytest.mark.parametrize("name,tol", [("Q8_0", 0.5 / 127), ("Q4_0", 1 / 8), ("Q4_K", 1 / 15),
                                      ("Q5_K", 1 / 31), ("Q6_K", 1 / 31)])
@pytest.mark.reference_only
def test_gguf_numpy_roundtrip_error(name, tol):
    """The numpy writers (used for the test models) stay within about half a
    quantization step of each block's largest magnitude. gcore's quantizers:
    test_gguf_quantize_matches_numpy (numpy's bytes exactly) and
    tests/c/test_quant.c's round trip."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 512)).astype(np.float32)
    y = Q.roundtrip(name, x)
    blk = Q.TYPES[name][1]
    xb, yb = x.reshape(-1, blk), y.reshape(-1, blk)
    err = np.max(np.abs(yb - xb), axis=1) / np.max(np.abs(xb), axis=1)
    assert np.max(err) <= tol * 1.1, np.max(err)
