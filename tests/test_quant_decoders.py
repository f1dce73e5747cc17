"""The GPU preludes' block-format decoders on the host.

Every GPU template that reads B in a block format (gemv_qmma, gemm_q_mma,
the AMD ones) gets its levels and scales from the gc-quant block of
templates/gpu/prelude_common.h: GCQ_LOAD(block, unit, part) and
GCQ_DECODE. The AMD emulator (test_amd_emulator.py) runs them inside the
AMD templates, which read the GGUF layouts only; NVIDIA's device layouts
(Q8_0R, Q4_0R, Q4_KR, Q6_KR) are otherwise decoded only on a GPU. Here
the block itself is compiled for the host (tests/amd_emu/harness_dec.h)
and every part of every unit of random blocks is decoded, for every
format and layout, and each element's value as the kernels form it
(level · d0 or d1 − mn in fp32) must equal tests/ggufq.py's dequantization
bit for bit: ggml's dequantization rounds once, as the decoders' does.

Blocks are random bytes with random finite scales (zero, subnormal and
negative among them), so every level and packed-scale bit pattern occurs;
the device layouts are made from them by ggufq.to_device, the layout as
base/quant.h describes it, independently of base/quant.c.
"""
import os
import re
import subprocess

import numpy as np
import pytest

import ggufq
from test_amd_emulator import CXX, CXXFLAGS, EMU, common_block, emu_blocks
from test_amd_templates import GPU

pytestmark = pytest.mark.skipif(not CXX, reason="clang++-19 not installed (host build of the decoders)")

FORMATS = ["Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0R", "Q4_0R", "Q4_KR", "Q6_KR"]
# where a GGUF block keeps its half scales (d; the K-quants with a min: d, dmin)
HALVES = {"Q8_0": (0,), "Q4_0": (0,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def random_blocks(base, nblk, rng):
    """nblk blocks of GGUF format base: random bytes, finite random halves."""
    _, qk, size = ggufq.TYPES[base]
    b = rng.integers(0, 256, size=(nblk, size), dtype=np.uint8)
    for off in HALVES[base]:
        v = rng.uniform(-2, 2, nblk) * np.exp2(rng.integers(-20, 6, nblk))
        v[::7] = 0.0
        v[3::11] = 6e-8  # f16 subnormal
        b[:, off:off + 2] = ggufq.f16(v).view(np.uint8).reshape(nblk, 2)
    return b.tobytes()


def format_code(fmt):
    """The prelude's dtype code of block format fmt (#define GC_Q4_KR 12)."""
    text = open(os.path.join(GPU, "prelude_common.h")).read()
    m = re.search(rf"^#define GC_{fmt} (\d+)\b", text, re.M)
    assert m, f"prelude_common.h defines no GC_{fmt}"
    return int(m.group(1))


def build(tmp, fmt, quant_text=None):
    """The decoders of fmt for the host (quant_text: the gc-quant block to
    use instead of the prelude's)."""
    emu_blocks(tmp)
    (tmp / "quant.h").write_text(quant_text) if quant_text else common_block("gc-quant", tmp / "quant.h")
    code = format_code(fmt)
    src = (f'#define EMU_QUANT 1\n#include "prelude_emu.h"\n#define GC_TA 1\n#define GC_TB {code}\n'
           f'#define GC_TC 1\n#include "harness_dec.h"\n')
    (tmp / "dec.cpp").write_text(src)
    exe = tmp / "dec"
    r = subprocess.run([CXX, *CXXFLAGS, f"-I{EMU}", f"-I{tmp}", "-o", str(exe),
                        str(tmp / "dec.cpp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


@pytest.mark.parametrize("fmt", FORMATS)
def test_decoders_give_ggml_values(tmp_path, fmt):
    rng = np.random.default_rng(FORMATS.index(fmt) + 1)
    base = ggufq.DEVICE_TYPES[fmt][0] if fmt in ggufq.DEVICE_TYPES else fmt
    nblk = 48 if ggufq.TYPES[base][1] == 256 else 48 * 8  # 48 blocks of 256 elements either way
    raw = random_blocks(base, nblk, rng)
    if fmt in ggufq.DEVICE_TYPES:
        raw = ggufq.to_device(fmt, raw)
    n = nblk * ggufq.TYPES[base][1]
    blocks = n // (256 if fmt in ggufq.DEVICE_TYPES else ggufq.TYPES[base][1])
    (tmp_path / "b.bin").write_bytes(raw)
    exe = build(tmp_path, fmt)
    r = subprocess.run([str(exe), str(blocks), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = np.fromfile(tmp_path / "out.bin", dtype="<f4")
    want = ggufq.dequantize(fmt, raw, n)
    assert got.shape == want.shape
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, (f"{bad.size} of {n} elements differ; first: element {bad[0]} "
                           f"(block {bad[0] // 256}, unit {bad[0] % 256 // 32}): {got[bad[0]]!r} != {want[bad[0]]!r}")


def test_a_wrong_decoder_is_caught(tmp_path):
    """A planted fault (Q4_KR's scale and min of a unit swapped) fails the
    same comparison: the test can fail."""
    text = common_block("gc-quant", tmp_path / "quant.h")
    old = "gcq_scale_min_k4(r[1], r[2], r[3], u, sc, m);"
    assert old in text, "gcq_decode_q4_k no longer calls gcq_scale_min_k4 as this test plants its fault"
    rng = np.random.default_rng(99)
    raw = ggufq.to_device("Q4_KR", random_blocks("Q4_K", 16, rng))
    (tmp_path / "b.bin").write_bytes(raw)
    exe = build(tmp_path, "Q4_KR", text.replace(old, "gcq_scale_min_k4(r[1], r[2], r[3], u, m, sc);"))
    r = subprocess.run([str(exe), "16", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = np.fromfile(tmp_path / "out.bin", dtype="<f4")
    assert not np.array_equal(got, ggufq.dequantize("Q4_KR", raw, 16 * 256))


def test_scales_by_whole_words_are_ggml_scales(tmp_path):
    """gcq_scales_k4 (gemv_qmma's KQ: the sixteen 6-bit scales and mins of
    a Q4_K/Q5_K block as bytes of whole words) gives ggml's
    get_scale_min_k4 for every unit of 4096 random 12-byte scale arrays,
    bit for bit (tests/ggufq.py's _scale_min_k4)."""
    rng = np.random.default_rng(7)
    scales = rng.integers(0, 256, size=(4096, 12), dtype=np.uint8)
    scales[0], scales[1] = 0, 255
    (tmp_path / "s.bin").write_bytes(scales.tobytes())
    common_block("gc-quant", tmp_path / "quant.h")
    emu_blocks(tmp_path)
    (tmp_path / "s.cpp").write_text(r'''#define EMU_QUANT 1
#include "prelude_emu.h"
#define GC_TA 1
#define GC_TB 7
#define GC_TC 1
#include <vector>
int main(int argc, char **argv) {
  FILE *f = fopen(argv[1], "rb"), *o = fopen(argv[2], "wb");
  uint32_t q[3];
  while (f && o && fread(q, 4, 3, f) == 3)
    for (int u = 0; u < 8; u++) {
      uint32_t sc, m;
      gcq_scales_k4(q[0], q[1], q[2], u, sc, m);
      const uint8_t b[2] = {(uint8_t)(sc >> (8 * (u & 3))), (uint8_t)(m >> (8 * (u & 3)))};
      fwrite(b, 1, 2, o);
    }
  return f && o && !fclose(o) ? 0 : 2;
}
''')
    exe = tmp_path / "s"
    r = subprocess.run([CXX, *CXXFLAGS, f"-I{EMU}", f"-I{tmp_path}", "-o", str(exe), str(tmp_path / "s.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([str(exe), str(tmp_path / "s.bin"), str(tmp_path / "o.bin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    got = np.fromfile(tmp_path / "o.bin", dtype=np.uint8).reshape(4096, 8, 2)
    sc, mn = ggufq._scale_min_k4(scales)
    assert np.array_equal(got[:, :, 0], sc) and np.array_equal(got[:, :, 1], mn)
