"""ggufq.py — ggml's weight storage formats in numpy, written from the format
description (ggml-common.h's block structs, ggml-quants.c's dequantize_row_*
and quantize_row_*_ref), independent of gcore's C code (base/quant.c).

    dequantize(name, raw, n)  -> float32 [n]   every format gcore reads
    quantize(name, x)         -> bytes         F32 F16 BF16, and
        Q8_0, Q4_0, Q4_K: llama.cpp's reference quantizers, operation by
              operation in float32 (every product and sum rounded on its
              own, sums in element order), so the bytes equal gcore's;
        Q5_K, Q6_K, and the formats gcore makes F16 at load (FOREIGN_TYPES:
              Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS): simple valid
              quantizers (not llama.cpp's search), for writing test files only.

Blocks are vectorised across the rows of a tensor; within a block the
loops run in the C code's order where float32 rounding depends on it.
"""
from __future__ import annotations

import numpy as np

F = np.float32

# name: (ggml type id, elements per block, bytes per block)
TYPES = {
    "F32": (0, 1, 4), "F16": (1, 1, 2), "BF16": (30, 1, 2),
    "Q8_0": (8, 32, 34), "Q4_0": (2, 32, 18),
    "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210),
}
# ggml types gcore reads but has no kernels for: made F16 at load
# (base/quant.h). dequantize reads them; quantize writes them with simple
# valid quantizers (not llama.cpp's), for test files only.
FOREIGN_TYPES = {"Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q2_K": (10, 256, 84),
                 "Q3_K": (11, 256, 110), "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136)}
# Other ggml type ids with their block sizes (for writing files gcore must refuse).
OTHER_TYPES = {"IQ2_XXS": (16, 256, 66), "Q8_1": (9, 32, 36), "I8": (24, 1, 1), "F64": (28, 1, 8)}
# every ggml type this file knows: name -> (type id, elements per block, bytes per block)
ALL_TYPES = {**TYPES, **FOREIGN_TYPES, **OTHER_TYPES}
IQ4NL_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int32)


# gcore's device layouts (base/quant.h; never in files): eight blocks of
# the base format, bytes permuted. name: (base format, elements, bytes)
DEVICE_TYPES = {"Q8_0R": ("Q8_0", 256, 272), "Q4_0R": ("Q4_0", 256, 144), "Q4_KR": ("Q4_K", 256, 144),
                "Q6_KR": ("Q6_K", 256, 224)}


def nbytes(name: str, n: int) -> int:
    if name in DEVICE_TYPES:
        _, blk, size = DEVICE_TYPES[name]
        assert n % blk == 0, f"{n} elements are not whole {name} blocks of {blk}"
        return n // blk * size
    _, blk, size = ALL_TYPES[name]
    assert n % blk == 0, f"{n} elements are not whole {name} blocks of {blk}"
    return n // blk * size


# ------------------------------------------------------------ floats

def f16(x) -> np.ndarray:
    return np.asarray(x, dtype=F).astype("<f2")


def h2f(u16: np.ndarray) -> np.ndarray:
    """half bit patterns -> float32 values."""
    return np.ascontiguousarray(u16, dtype="<u2").view("<f2").astype(F)


def bf16_bits(x) -> np.ndarray:
    """float32 -> bf16 bit patterns, round to nearest even."""
    b = np.ascontiguousarray(x, dtype=F).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype("<u2")


def bf16_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(F)


def _blocks(raw, name: str, n: int) -> np.ndarray:
    _, blk, size = ALL_TYPES[name]
    b = np.frombuffer(bytes(raw), dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.astype(np.uint8)
    assert n % blk == 0 and b.size == n // blk * size, f"{name}: {b.size} bytes for {n} elements"
    return b.reshape(n // blk, size)


def _half(b: np.ndarray, off: int) -> np.ndarray:
    """The half at byte off of each block, as float32 [nb, 1]."""
    return h2f(np.ascontiguousarray(b[:, off:off + 2]).view("<u2"))


# ---------------------------------------------------- dequantization

def _scale_min_k4(scales: np.ndarray):
    """6-bit scales and mins [nb, 8] of Q4_K/Q5_K's 12 packed bytes."""
    s = scales.astype(np.int32)
    sc = np.empty((s.shape[0], 8), np.int32)
    m = np.empty((s.shape[0], 8), np.int32)
    for j in range(4):
        sc[:, j] = s[:, j] & 63
        m[:, j] = s[:, j + 4] & 63
    for j in range(4, 8):
        sc[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
        m[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, m


def _dq_k(b: np.ndarray, qh_off, qs_off: int) -> np.ndarray:
    d, dmin = _half(b, 0), _half(b, 2)
    sc, m = _scale_min_k4(b[:, 4:16])
    qs = b[:, qs_off:qs_off + 128].astype(np.int32)
    qh = b[:, qh_off:qh_off + 32].astype(np.int32) if qh_off is not None else None
    y = np.empty((b.shape[0], 256), F)
    for c in range(4):
        q = qs[:, 32 * c:32 * c + 32]
        lo, hi = q & 15, q >> 4
        if qh is not None:
            lo = lo + 16 * ((qh >> (2 * c)) & 1)
            hi = hi + 16 * ((qh >> (2 * c + 1)) & 1)
        for k, lv in ((2 * c, lo), (2 * c + 1, hi)):
            dk = d[:, 0] * sc[:, k].astype(F)                 # exact
            mk = dmin[:, 0] * m[:, k].astype(F)               # exact
            y[:, 32 * k:32 * k + 32] = dk[:, None] * lv.astype(F) - mk[:, None]  # one rounding
    return y


def _dq_q6_k(b: np.ndarray) -> np.ndarray:
    ql, qh = b[:, 0:128].astype(np.int32), b[:, 128:192].astype(np.int32)
    sc = b[:, 192:208].view(np.int8).astype(F)
    d = _half(b, 208)[:, 0]
    y = np.empty((b.shape[0], 256), F)
    for e in range(256):            # element e: half n, quarter k, lane l
        n, r = divmod(e, 128)
        k, l = divmod(r, 32)
        lo = ql[:, 64 * n + l + (32 if k in (1, 3) else 0)]
        lo = (lo >> 4) if k >= 2 else (lo & 15)
        hi = (qh[:, 32 * n + l] >> (2 * k)) & 3
        q = (lo | (hi << 4)) - 32
        y[:, e] = (d * sc[:, e // 16]) * q.astype(F)
    return y


def _device_perm(name: str) -> np.ndarray:
    """perm[i]: the byte of eight base blocks (concatenated; Q4_KR: one)
    that byte i of a device block holds, as base/quant.h lays them out:
    part t (elements 4t..4t+3 and 16+4t..16+4t+3 of a 32-element unit) of
    the units side by side, then the scales."""
    if name == "Q6_KR":  # ql, qh by lane part t; scales and d kept; -1: the 14 zero bytes
        ql = [64 * n + 32 * c + 16 * h + 4 * t + i for t in range(4) for n in range(2) for c in range(2)
              for h in range(2) for i in range(4)]
        qh = [128 + 32 * n + 16 * h + 4 * t + i for t in range(4) for n in range(2) for h in range(2)
              for i in range(4)]
        perm = ql + qh + list(range(192, 210)) + [-1] * 14
        assert sorted(perm[:210]) == list(range(210)), "every byte of the block once"
        return np.array(perm)
    if name == "Q4_KR":  # qs at 16 in Q4_K; sub-blocks 2c, 2c+1 share qs[32c ..]
        perm = [16 + 32 * c + 16 * h + 4 * t + i for t in range(4) for c in range(4) for h in range(2)
                for i in range(4)] + list(range(16))
        assert sorted(perm) == list(range(144)), "every byte of the block once"
        return np.array(perm)
    q8 = name == "Q8_0R"
    nq, bb = (32, 34) if q8 else (16, 18)
    perm = []
    for t in range(4):
        for j in range(8):
            ks = [4 * t + i for i in range(4)] + ([16 + 4 * t + i for i in range(4)] if q8 else [])
            perm += [j * bb + 2 + k for k in ks]
    for j in range(8):
        perm += [j * bb, j * bb + 1]
    assert sorted(perm) == list(range(8 * bb)), "every byte of the eight blocks once"
    return np.array(perm)


def to_device(name: str, raw) -> bytes:
    """Blocks of DEVICE_TYPES[name]'s base format as name's blocks."""
    base, _, size = DEVICE_TYPES[name]
    b = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, 256 // TYPES[base][1] * TYPES[base][2])
    b = np.concatenate([b, np.zeros((b.shape[0], 1), dtype=np.uint8)], axis=1)  # column -1: a zero byte
    return np.ascontiguousarray(b[:, _device_perm(name)]).tobytes()


def from_device(name: str, raw) -> bytes:
    """name's blocks back as its base format's."""
    base, _, size = DEVICE_TYPES[name]
    b = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(-1, size)
    out = np.empty((b.shape[0], 256 // TYPES[base][1] * TYPES[base][2]), dtype=np.uint8)
    perm = _device_perm(name)
    out[:, perm[perm >= 0]] = b[:, perm >= 0]
    return out.tobytes()


def _fifth_bits(b: np.ndarray, off: int) -> np.ndarray:
    """Q5_0/Q5_1: bit i of the little-endian word at off, as int32 [nb, 32]."""
    h = np.ascontiguousarray(b[:, off:off + 4]).view("<u4").astype(np.int64)
    return ((h >> np.arange(32)) & 1).astype(np.int32)


def _nibbles(q: np.ndarray) -> np.ndarray:
    """[nb, 16] bytes -> [nb, 32] levels: low nibbles, then high ones."""
    q = q.astype(np.int32)
    return np.concatenate([q & 15, q >> 4], axis=1)


def _q3k_scales(sc: np.ndarray) -> np.ndarray:
    """Q3_K's 16 six-bit scales minus 32, from its 12 bytes [nb, 12], as
    ggml unpacks them: three little-endian words, masks and shifts."""
    a = np.ascontiguousarray(sc).view("<u4").astype(np.int64)   # [nb, 3]
    k1, k2 = 0x03030303, 0x0F0F0F0F
    w = [(a[:, 0] & k2) | (((a[:, 2] >> 0) & k1) << 4),
         (a[:, 1] & k2) | (((a[:, 2] >> 2) & k1) << 4),
         ((a[:, 0] >> 4) & k2) | (((a[:, 2] >> 4) & k1) << 4),
         ((a[:, 1] >> 4) & k2) | (((a[:, 2] >> 6) & k1) << 4)]
    out = np.stack(w, axis=1).astype("<u4").view(np.uint8)       # [nb, 16] bytes
    return out.astype(np.int32) - 32


def _dq_foreign(name: str, b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    if name in ("Q4_1", "Q5_0", "Q5_1"):
        d = _half(b, 0)
        qs = {"Q4_1": 4, "Q5_0": 6, "Q5_1": 8}[name]
        q = _nibbles(b[:, qs:qs + 16])
        if name != "Q4_1":
            q = q | (_fifth_bits(b, 2 if name == "Q5_0" else 4) << 4)
        if name == "Q5_0":
            return d * (q - 16).astype(F)
        return d * q.astype(F) + _half(b, 2)                       # one rounding
    if name == "IQ4_NL":
        return _half(b, 0) * IQ4NL_VALUES[_nibbles(b[:, 2:18])].astype(F)
    y = np.empty((nb, 256), F)
    if name == "IQ4_XS":
        d = _half(b, 0)[:, 0]
        sh = np.ascontiguousarray(b[:, 2:4]).view("<u2").astype(np.int32)[:, 0]
        for sb in range(8):
            ls = ((b[:, 4 + sb // 2].astype(np.int32) >> (4 * (sb % 2))) & 15) | (((sh >> (2 * sb)) & 3) << 4)
            dl = d * (ls - 32).astype(F)                            # exact
            y[:, 32 * sb:32 * sb + 32] = dl[:, None] * IQ4NL_VALUES[_nibbles(b[:, 8 + 16 * sb:24 + 16 * sb])].astype(F)
        return y
    if name == "Q2_K":
        sc = b[:, 0:16].astype(np.int32)
        qs = b[:, 16:80].astype(np.int32).reshape(nb, 2, 32)
        d, dmin = _half(b, 80)[:, 0], _half(b, 82)[:, 0]
        for half in range(2):
            for k in range(4):
                q = ((qs[:, half] >> (2 * k)) & 3).astype(F)           # [nb, 32]
                s = sc[:, 8 * half + 2 * k + np.arange(32) // 16]     # [nb, 32]
                dl = d[:, None] * (s & 15).astype(F)                  # exact
                ml = dmin[:, None] * (s >> 4).astype(F)               # exact
                y[:, 128 * half + 32 * k:128 * half + 32 * k + 32] = dl * q - ml
        return y
    if name == "Q3_K":
        hm = b[:, 0:32].astype(np.int32)
        qs = b[:, 32:96].astype(np.int32).reshape(nb, 2, 32)
        sc = _q3k_scales(b[:, 96:108])
        d = _half(b, 108)[:, 0]
        for half in range(2):
            for k in range(4):
                low = (qs[:, half] >> (2 * k)) & 3
                high = (hm >> (4 * half + k)) & 1
                q = (low - 4 * (1 - high)).astype(F)
                s = sc[:, 8 * half + 2 * k + np.arange(32) // 16].astype(F)
                y[:, 128 * half + 32 * k:128 * half + 32 * k + 32] = (d[:, None] * s) * q
        return y
    raise ValueError(name)


def dequantize(name: str, raw, n: int) -> np.ndarray:
    """n values of type name stored in raw (bytes or uint8 array): float32 [n]."""
    if name in DEVICE_TYPES:
        return dequantize(DEVICE_TYPES[name][0], from_device(name, raw), n)
    if name == "F32":
        return np.frombuffer(bytes(raw), dtype="<f4").astype(F)
    if name == "F16":
        return np.frombuffer(bytes(raw), dtype="<f2").astype(F)
    if name == "BF16":
        return bf16_to_f32(np.frombuffer(bytes(raw), dtype="<u2"))
    b = _blocks(raw, name, n)
    if name == "Q8_0":
        y = _half(b, 0) * b[:, 2:34].view(np.int8).astype(F)
    elif name == "Q4_0":
        q = b[:, 2:18].astype(np.int32)
        d = _half(b, 0)
        y = np.concatenate([d * ((q & 15) - 8).astype(F), d * ((q >> 4) - 8).astype(F)], axis=1)
    elif name == "Q4_K":
        y = _dq_k(b, None, 16)
    elif name == "Q5_K":
        y = _dq_k(b, 16, 48)
    elif name == "Q6_K":
        y = _dq_q6_k(b)
    elif name in FOREIGN_TYPES:
        y = _dq_foreign(name, b)
    else:
        raise ValueError(name)
    return y.reshape(-1).astype(F)


# ---------------------------------------- llama.cpp's reference quantizers

def _roundf(v: np.ndarray) -> np.ndarray:
    """C roundf: to nearest, halves away from zero."""
    t = np.trunc(v)
    return t + np.sign(v) * (np.abs(v - t) >= F(0.5))


def _nearest(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: to nearest, ties to even."""
    return np.rint(v).astype(np.int64)


def _q8_0(x: np.ndarray) -> np.ndarray:
    amax = np.max(np.abs(x), axis=1)
    d = (amax / F(127)).astype(F)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, F(1) / d, F(0)).astype(F)
    q = _roundf((x * idv[:, None]).astype(F)).astype(np.int8)
    out = np.empty((x.shape[0], 34), np.uint8)
    out[:, 0:2] = f16(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out


def _q4_0(x: np.ndarray) -> np.ndarray:
    i = np.argmax(np.abs(x), axis=1)                   # first of the largest magnitudes
    mx = np.where(np.max(np.abs(x), axis=1) > 0, x[np.arange(x.shape[0]), i], F(0)).astype(F)
    d = (mx / F(-8)).astype(F)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, F(1) / d, F(0)).astype(F)
    v = (x * idv[:, None]).astype(F) + F(8.5)
    q = np.minimum(15, np.trunc(v).astype(np.int64))
    out = np.empty((x.shape[0], 18), np.uint8)
    out[:, 0:2] = f16(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)
    return out


def _qkx2(x: np.ndarray, w: np.ndarray):
    """make_qkx2_quants(32, 15, x, w, rmin=-1, rdelta=0.1, nstep=20, use_mad=false)
    for every row of x [S, 32]: (levels [S, 32], scale [S], -min [S])."""
    S, N = x.shape
    nmax = F(15)
    mn, mx = x[:, 0].copy(), x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = sum_w * x[:, 0]
    for i in range(1, N):
        mn = np.where(x[:, i] < mn, x[:, i], mn)
        mx = np.where(x[:, i] > mx, x[:, i], mx)
        sum_w = sum_w + w[:, i]
        sum_x = sum_x + w[:, i] * x[:, i]
    mn = np.where(mn > 0, F(0), mn).astype(F)
    flat, mn0 = mx == mn, mn.copy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = nmax / (mx - mn)
        scale = F(1) / iscale
        L = np.zeros((S, N), np.int64)
        best = np.zeros(S, F)
        for i in range(N):
            l = np.clip(_nearest(iscale * (x[:, i] - mn)), 0, 15)
            L[:, i] = l
            diff = (scale * l.astype(F) + mn) - x[:, i]
            best = best + w[:, i] * (diff * diff)
        for step in range(21):
            iscale = ((F(-1) + F(0.1) * F(step)) + nmax) / (mx - mn)
            Laux = np.clip(_nearest(iscale[:, None] * (x - mn[:, None])), 0, 15)
            sum_l = np.zeros(S, F)
            sum_l2 = np.zeros(S, F)
            sum_xl = np.zeros(S, F)
            for i in range(N):
                wl = w[:, i] * Laux[:, i].astype(F)
                sum_l = sum_l + wl
                sum_l2 = sum_l2 + wl * Laux[:, i].astype(F)
                sum_xl = sum_xl + wl * x[:, i]
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            pos = this_min > 0
            this_min = np.where(pos, F(0), this_min).astype(F)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale).astype(F)
            mad = np.zeros(S, F)
            for i in range(N):
                diff = (this_scale * Laux[:, i].astype(F) + this_min) - x[:, i]
                mad = mad + w[:, i] * (diff * diff)
            better = (D > 0) & (mad < best)
            L = np.where(better[:, None], Laux, L)
            best = np.where(better, mad, best).astype(F)
            scale = np.where(better, this_scale, scale).astype(F)
            mn = np.where(better, this_min, mn).astype(F)
    L = np.where(flat[:, None], 0, L)
    scale = np.where(flat, F(0), scale).astype(F)
    return L, scale, (-np.where(flat, mn0, mn)).astype(F)


def _q4_k(x: np.ndarray) -> np.ndarray:
    nb = x.shape[0]
    sub = x.reshape(nb, 8, 32)
    s2 = np.zeros((nb, 8), F)
    for l in range(32):
        s2 = s2 + sub[:, :, l] * sub[:, :, l]
    av = np.sqrt(s2 / F(32)).astype(F)
    wts = (av[:, :, None] + np.abs(sub)).astype(F)
    L, sc, mins = _qkx2(sub.reshape(-1, 32), wts.reshape(-1, 32))
    L, sc, mins = L.reshape(nb, 8, 32), sc.reshape(nb, 8), mins.reshape(nb, 8)
    max_scale, max_min = np.zeros(nb, F), np.zeros(nb, F)
    for j in range(8):
        max_scale = np.where(sc[:, j] > max_scale, sc[:, j], max_scale)
        max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F(63) / max_scale, F(0)).astype(F)
        inv_min = np.where(max_min > 0, F(63) / max_min, F(0)).astype(F)
    ls = np.minimum(63, _nearest(inv_scale[:, None] * sc) & 0xFF)
    lm = np.minimum(63, _nearest(inv_min[:, None] * mins) & 0xFF)
    scales = np.zeros((nb, 12), np.int64)
    for j in range(4):
        scales[:, j] = ls[:, j]
        scales[:, j + 4] = lm[:, j]
    for j in range(4, 8):
        scales[:, j + 4] = (ls[:, j] & 0xF) | ((lm[:, j] & 0xF) << 4)
        scales[:, j - 4] |= (ls[:, j] >> 4) << 6
        scales[:, j] |= (lm[:, j] >> 4) << 6
    dh, mh = f16(max_scale / F(63)), f16(max_min / F(63))
    d, dmin = dh.astype(F), mh.astype(F)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j in range(8):
            dj = d * ls[:, j].astype(F)
            dm = dmin * lm[:, j].astype(F)
            l = np.clip(_nearest((sub[:, j, :] + dm[:, None]) / dj[:, None]), 0, 15)
            L[:, j, :] = np.where((dj != 0)[:, None], l, L[:, j, :])   # d == 0 keeps make_qkx2's levels
    Lf = L.reshape(nb, 256)
    qs = np.concatenate([Lf[:, 64 * c:64 * c + 32] | (Lf[:, 64 * c + 32:64 * c + 64] << 4) for c in range(4)], axis=1)
    out = np.empty((nb, 144), np.uint8)
    out[:, 0:2] = dh.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = mh.view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = scales.astype(np.uint8)
    out[:, 16:] = qs.astype(np.uint8)
    return out


# ------------------------------------------- simple Q5_K and Q6_K writers

def _q5_k(x: np.ndarray) -> np.ndarray:
    """Per sub-block of 32: min <= 0, scale (max - min) / 31; 6-bit scales and
    mins against the block's largest; levels recomputed from the stored ones."""
    nb = x.shape[0]
    sub = x.reshape(nb, 8, 32).astype(np.float64)
    mn = np.minimum(sub.min(axis=2), 0)
    sc = (sub.max(axis=2) - mn) / 31
    d = f16(sc.max(axis=1) / 63).astype(np.float64)
    dmin = f16(-mn.min(axis=1) / 63).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.clip(np.where(d[:, None] > 0, np.rint(sc / d[:, None]), 0), 0, 63).astype(np.int64)
        lm = np.clip(np.where(dmin[:, None] > 0, np.rint(-mn / dmin[:, None]), 0), 0, 63).astype(np.int64)
        step = d[:, None] * ls
        q = np.where(step[:, :, None] > 0,
                     np.rint((sub + (dmin[:, None] * lm)[:, :, None]) / step[:, :, None]), 0)
    q = np.clip(q, 0, 31).astype(np.int64).reshape(nb, 256)
    scales = np.zeros((nb, 12), np.int64)
    for j in range(4):
        scales[:, j], scales[:, j + 4] = ls[:, j], lm[:, j]
    for j in range(4, 8):
        scales[:, j + 4] = (ls[:, j] & 0xF) | ((lm[:, j] & 0xF) << 4)
        scales[:, j - 4] |= (ls[:, j] >> 4) << 6
        scales[:, j] |= (lm[:, j] >> 4) << 6
    qh = np.zeros((nb, 32), np.int64)
    qs = np.zeros((nb, 128), np.int64)
    for c in range(4):
        lo, hi = q[:, 64 * c:64 * c + 32], q[:, 64 * c + 32:64 * c + 64]
        qs[:, 32 * c:32 * c + 32] = (lo & 15) | ((hi & 15) << 4)
        qh |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1))
    out = np.empty((nb, 176), np.uint8)
    out[:, 0:2] = f16(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = f16(dmin).view(np.uint8).reshape(-1, 2)
    out[:, 4:16], out[:, 16:48], out[:, 48:] = scales, qh, qs
    return out


def _q6_k(x: np.ndarray) -> np.ndarray:
    """Per sub-block of 16: scale max|x| / 31 as an int8 multiple of the
    block's d; levels in [-32, 31]."""
    nb = x.shape[0]
    sub = x.reshape(nb, 16, 16).astype(np.float64)
    s = np.abs(sub).max(axis=2) / 31
    d = f16(s.max(axis=1) / 127).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.where(d[:, None] > 0, np.rint(s / d[:, None]), 0), -128, 127).astype(np.int64)
        step = d[:, None] * sc
        q = np.where(step[:, :, None] != 0, np.rint(sub / step[:, :, None]), 0)
    q = (np.clip(q, -32, 31).astype(np.int64) + 32).reshape(nb, 256)
    ql = np.zeros((nb, 128), np.int64)
    qh = np.zeros((nb, 64), np.int64)
    for n in range(2):
        for k in range(4):
            v = q[:, 128 * n + 32 * k:128 * n + 32 * k + 32]
            col = slice(64 * n + (32 if k in (1, 3) else 0), 64 * n + (32 if k in (1, 3) else 0) + 32)
            ql[:, col] |= (v & 15) << (4 if k >= 2 else 0)
            qh[:, 32 * n:32 * n + 32] |= (v >> 4) << (2 * k)
    out = np.empty((nb, 210), np.uint8)
    out[:, 0:128], out[:, 128:192] = ql, qh
    out[:, 192:208] = sc.astype(np.int8).view(np.uint8)
    out[:, 208:210] = f16(d).view(np.uint8).reshape(-1, 2)
    return out


def _put_half(out: np.ndarray, off: int, v) -> np.ndarray:
    """Store float32 v [nb] as halves at byte off of each block; returns
    the halves' values (what the blocks hold)."""
    h = f16(v)
    out[:, off:off + 2] = h.view(np.uint8).reshape(-1, 2)
    return h.astype(F)


def _nearest_level(x: np.ndarray, scale: np.ndarray, lo: int, hi: int) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale != 0, np.rint(x / scale), 0)
    return np.clip(q, lo, hi).astype(np.int32)


def _put_nibbles(out: np.ndarray, off: int, q: np.ndarray) -> None:
    """Levels [nb, 32] (low 4 bits) as 16 bytes: element j low, j+16 high."""
    out[:, off:off + 16] = ((q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)).astype(np.uint8)


def _quant_foreign(name: str, x: np.ndarray) -> np.ndarray:
    """Simple valid blocks of a FOREIGN_TYPES format for x [nb, block] (the
    values a block holds are its dequantization, not x; close to it)."""
    nb = x.shape[0]
    out = np.zeros((nb, FOREIGN_TYPES[name][2]), np.uint8)
    if name in ("Q4_1", "Q5_1"):
        top = 15 if name == "Q4_1" else 31
        lo, hi = x.min(axis=1), x.max(axis=1)
        d = _put_half(out, 0, (hi - lo) / top)
        m = _put_half(out, 2, lo)
        q = _nearest_level(x - m[:, None], d[:, None], 0, top)
        if name == "Q4_1":
            _put_nibbles(out, 4, q)
        else:
            out[:, 4:8] = ((q >> 4) << np.arange(32)).sum(axis=1).astype("<u4").view(np.uint8).reshape(nb, 4)
            _put_nibbles(out, 8, q)
        return out
    if name == "Q5_0":
        amax = x[np.arange(nb), np.abs(x).argmax(axis=1)]
        d = _put_half(out, 0, amax / -16)
        q = _nearest_level(x, d[:, None], -16, 15) + 16
        out[:, 2:6] = ((q >> 4) << np.arange(32)).sum(axis=1).astype("<u4").view(np.uint8).reshape(nb, 4)
        _put_nibbles(out, 6, q)
        return out
    if name == "IQ4_NL":
        d = _put_half(out, 0, np.abs(x).max(axis=1) / 127)
        q = np.abs(x[:, :, None] - d[:, None, None] * IQ4NL_VALUES[None, None, :]).argmin(axis=2)
        _put_nibbles(out, 2, q)
        return out
    if name == "IQ4_XS":
        sub = x.reshape(nb, 8, 32)
        a = np.abs(sub).max(axis=2) / 127                          # [nb, 8] wanted sub-block scales
        d = _put_half(out, 0, a.max(axis=1) / 31)
        ls = _nearest_level(a, d[:, None], 0, 31) + 32               # scale d·(ls − 32) >= 0
        out[:, 2:4] = ((ls >> 4) << (2 * np.arange(8))).sum(axis=1).astype("<u2").view(np.uint8).reshape(nb, 2)
        for sb in range(8):
            v = ls[:, sb] & 15
            out[:, 4 + sb // 2] |= (v << (4 * (sb % 2))).astype(np.uint8)
            dl = d * (ls[:, sb] - 32).astype(F)
            q = np.abs(sub[:, sb, :, None] - dl[:, None, None] * IQ4NL_VALUES[None, None, :]).argmin(axis=2)
            _put_nibbles(out, 8 + 16 * sb, q)
        return out
    g = x.reshape(nb, 16, 16)                                        # 16 groups of 16
    if name == "Q2_K":
        lo, hi = np.minimum(g.min(axis=2), 0), g.max(axis=2)
        a, m = (hi - lo) / 3, -lo                                    # y = a·q − m, q < 4
        d = _put_half(out, 80, a.max(axis=1) / 15)
        dmin = _put_half(out, 82, m.max(axis=1) / 15)
        sc = _nearest_level(a, d[:, None], 0, 15)
        mn = _nearest_level(m, dmin[:, None], 0, 15)
        out[:, 0:16] = (sc | (mn << 4)).astype(np.uint8)
        dl, ml = d[:, None] * sc.astype(F), dmin[:, None] * mn.astype(F)
        q = _nearest_level(g + ml[:, :, None], dl[:, :, None], 0, 3).reshape(nb, 256)
        for half in range(2):
            for k in range(4):
                out[:, 16 + 32 * half:48 + 32 * half] |= (q[:, 128 * half + 32 * k:128 * half + 32 * k + 32]
                                                          << (2 * k)).astype(np.uint8)
        return out
    if name == "Q3_K":
        a = np.abs(g).max(axis=2) / 4                                # y = d·s·q, q in -4 .. 3
        d = _put_half(out, 108, a.max(axis=1) / 31)
        s = _nearest_level(a, d[:, None], 0, 31)                     # stored as s + 32 (6 bits)
        u, packed = s + 32, np.zeros((nb, 12), np.int32)
        for i in range(16):                                          # base/quant.h's packing
            packed[:, i % 8] |= (u[:, i] & 15) << (4 * (i // 8))
            packed[:, 8 + i % 4] |= ((u[:, i] >> 4) & 3) << (2 * (i // 4))
        out[:, 96:108] = packed.astype(np.uint8)
        q = _nearest_level(g, (d[:, None] * s.astype(F))[:, :, None], -4, 3).reshape(nb, 256)
        for half in range(2):
            for k in range(4):
                qq = q[:, 128 * half + 32 * k:128 * half + 32 * k + 32]
                out[:, 32 + 32 * half:64 + 32 * half] |= (((qq + 4) & 3) << (2 * k)).astype(np.uint8)
                out[:, 0:32] |= ((qq >= 0).astype(np.int32) << (4 * half + k)).astype(np.uint8)
        return out
    raise ValueError(name)


def quantize(name: str, x) -> bytes:
    """x (any shape, rows of whole blocks) stored as type name."""
    x = np.ascontiguousarray(x, dtype=F).reshape(-1)
    if name == "F32":
        return x.astype("<f4").tobytes()
    if name == "F16":
        return f16(x).tobytes()
    if name == "BF16":
        return bf16_bits(x).tobytes()
    if name in DEVICE_TYPES:
        return to_device(name, quantize(DEVICE_TYPES[name][0], x))
    if name in FOREIGN_TYPES:
        blk = FOREIGN_TYPES[name][1]
        assert x.size % blk == 0, f"{x.size} values are not whole {name} blocks"
        return _quant_foreign(name, x.reshape(-1, blk)).tobytes()
    _, blk, _ = TYPES[name]
    assert x.size % blk == 0, f"{x.size} values are not whole {name} blocks"
    fn = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}[name]
    return fn(x.reshape(-1, blk)).tobytes()


def roundtrip(name: str, x) -> np.ndarray:
    """The values x becomes when stored as name (float32, x's shape)."""
    x = np.asarray(x, dtype=F)
    return dequantize(name, quantize(name, x), x.size).reshape(x.shape)
