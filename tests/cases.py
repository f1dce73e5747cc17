"""One case table per op family: shapes x dtypes. Drives the correctness
tests on every backend (and the benchmarks). Odd sizes on purpose: M=1, 3,
17; K not a multiple of any tile."""

DTYPES = ["f32", "f16", "bf16", "f32:f16:f32", "f32:bf16:f32"]

GEMM_SHAPES = [  # (m, n, k)
    (1, 64, 64), (1, 100, 37), (3, 33, 7), (17, 130, 129), (64, 64, 1),
    (5, 1, 300), (128, 96, 256), (33, 1000, 65),
]
RMSNORM_SHAPES = [(1, 64), (3, 100), (17, 4096), (64, 7), (2, 1)]

CASES = {
    "gemm": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES],
    "gemm_swiglu": [(dt, s) for dt in DTYPES for s in GEMM_SHAPES[:6]],
    "rmsnorm": [(dt, s) for dt in DTYPES for s in RMSNORM_SHAPES],
}

# Tolerances for the numpy comparison (independent of the C verifier):
# |got - ref| <= ulp(C dtype) * |ref| + k * 2^-24 * sum|a*b| (+ small terms).
ULP = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}
# Spacing of each dtype's subnormals: the absolute error floor of rounding.
SUB = {"f32": 2.0 ** -149, "f16": 2.0 ** -24, "bf16": 2.0 ** -133}
