"""One case table per op family: shapes x dtypes. Drives the correctness
tests on every backend (and the benchmarks). Odd sizes on purpose: M=1, 3,
17; K not a multiple of any tile."""

DTYPES = ["f32", "f16", "bf16", "f32:f16:f32", "f32:bf16:f32"]

GEMM_SHAPES = [  # (m, n, k)
    (1, 64, 64), (1, 100, 37), (3, 33, 7), (17, 130, 129), (64, 64, 1),
    (5, 1, 300), (128, 96, 256), (33, 1000, 65),
]
RMSNORM_SHAPES = [(1, 64), (3, 100), (17, 4096), (64, 7), (2, 1)]

ADD_SHAPES = [(1, 64), (3, 100), (17, 4096), (2, 1)]
EMBED_SHAPES = [(1, 64, 512), (7, 100, 33), (17, 256, 1000)]        # (m, n, k = vocab)
HEAD_SHAPES = [(1, 8, 4, 8), (1, 4, 1, 64), (3, 4, 4, 16), (5, 6, 1, 64), (17, 8, 2, 32)]  # (m, h, g, d)
SAME = ["f32", "f16", "bf16"]

CASES = {
    "gemm": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES],
    "gemm_add": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES[:1] + GEMM_SHAPES[2:4] + GEMM_SHAPES[6:]],
    "gemm_swiglu": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES[:6]],
    "rmsnorm": [(dt, s) for dt in DTYPES for s in RMSNORM_SHAPES],
    "add": [(dt, s) for dt in SAME for s in ADD_SHAPES],
    "embed": [(dt, s) for dt in DTYPES for s in EMBED_SHAPES],
    "rope_kv": [(dt, s) for dt in SAME for s in HEAD_SHAPES],
    "attention": [(dt, s) for dt in SAME for s in HEAD_SHAPES],
    "argmax": [(dt, s) for dt in SAME for s in [(1, 1000), (3, 128256), (2, 7), (20, 5000)]],
}

# Tolerances for the numpy comparison (independent of the C verifier):
# |got - ref| <= ulp(C dtype) * |ref| + k * 2^-24 * sum|a*b| (+ small terms).
ULP = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}
# Spacing of each dtype's subnormals: the absolute error floor of rounding.
SUB = {"f32": 2.0 ** -149, "f16": 2.0 ** -24, "bf16": 2.0 ** -133}
