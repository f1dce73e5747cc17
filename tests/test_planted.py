"""Planted harmful variants never win a sweep (issue 15): next to copies of
the built-in templates (--templates DIR) sits one planted GEMM per harmful
kind, each a correct kernel built to beat the built-ins plus one harmful act
after it. A control planted without the harm is measured ok beside them
and usually wins (each of the others is its kernel, so would compete for
the win had its harm gone unseen); each harmful one is recorded with a
status that is not ok and a reason naming what it did, and none wins.

The table runs twice on the CPU: with page protection (inputs read-only,
inaccessible pages around outputs: a stray write faults and the worker
says where), and with GCORE_CPU_PROTECT=0, where only the guard patterns
and the input comparison catch it, as on a GPU. tests/gpu/test_gpu_planted.py
is the same table on the GPU. QHARMS is its like for a quantized GEMM (B in
Q4_K blocks, checked against the reference on the dequantized weights):
copies of gemv_q_cpu that misread a block's scale or write where they
should not, none of which wins or reaches a bundle."""
import os
import re
import shutil
import sqlite3

import pytest

from conftest import ROOT

# kind: (the harm, C, after C is computed correctly; expected status;
#        words of the reason, protected CPU; words of the reason, guards only)
HARMS = {
    "ok": ("", "ok", "", ""),
    "far_past": ("C[M * N + 16384] = 1.0f;  /* 64 KiB past the end of C */",
                 "verify-failed", "wrote past the end of C (at end + 65536)",
                 "wrote past the end of C (changed byte at end + 65536)"),
    "one_past": ("C[M * N] = 1.0f;", "verify-failed", "wrote past the end of C",
                 "wrote past the end of C (changed byte at end + 0)"),
    "before_c": ("C[-(1 << 18)] = 1.0f;  /* 1 MiB before C */", "verify-failed",
                 "wrote before the start of C (at start - 1048576)",
                 "wrote before the start of C (changed byte at start - 1048576)"),
    "into_a": ("A[5] += 1.0f;", "verify-failed", "wrote into input A (element 5: row 0, col 5)",
               "wrote into input A (element 5: row 0, col 5)"),
    "into_b": ("B[N * K - 1] = 0.5f;", "verify-failed", "wrote into input B (element",
               "wrote into input B (element"),
    "later_into_a": ("if (launches > 1) A[0] += 1.0f;  /* only after the verification's two */",
                     "verify-failed", "wrote into input A (element 0: row 0, col 0), fault at 0x",
                     "after the timed launches: wrote into input A (element 0"),
    "wrong": ("C[0] += 1.0f;", "verify-failed", "C element 0 (row 0, col 0)",
              "C element 0 (row 0, col 0)"),
    "first_only": ("if (launches > 1) C[0] += 1.0f;", "verify-failed",
                   "after the timed launches: C element 0", "after the timed launches: C element 0"),
    # right on its first launch only (state it does not reset): the
    # verification checks its second launch
    "second_wrong": ("if (launches == 1) C[0] += 1.0f;", "verify-failed",
                     "C element 0 (row 0, col 0)", "C element 0 (row 0, col 0)"),
    # reads C before it computes (see BEFORE): NaN there is taken as "not
    # done yet", anything else as done, so with NaN poison alone it passed
    # both checks and timed a launch that does nothing
    "reads_c_first": ("", "verify-failed", "C element 0 (row 0, col 0)", "C element 0 (row 0, col 0)"),
    "segv": ("*(volatile int *)16 = 1;", "launch-failed", "Segmentation fault at 0x10",
             "Segmentation fault at 0x10"),
    "hang": ("for (volatile int spin = 0;; spin++) {}", "timed-out", "no result within",
             "no result within"),
    "abort": ("abort();", "launch-failed", "worker died: Aborted", "worker died: Aborted"),
    "exit0": ("exit(0);", "launch-failed", "worker exited with status 0",
              "worker exited with status 0"),
}

# Code of a kind that runs before C is computed.
BEFORE = {"reads_c_first": "if (C[0] == C[0]) return;  /* C[0] is not NaN: taken as computed */"}

# A correct f32 GEMM for small K, N (multiples of 8), faster than gemm_cpu
# there: one task, eight dot products at a time, reduced with hadds.
TEMPLATE = r"""/* planted for tests/test_planted.py: {kind}
 *
 * @template planted_{kind}
 * @op       gemm
 * @backend  cpu
 * @dtypes   f32
 * @kernel   planted_{kind}
 * @param    HARM 1 default 1 -- unused: a template has at least one parameter
 * @constraint VBYTES >= 32 -- AVX2
 * @applies  K % 8 == 0 && N % 8 == 0 -- whole vectors
 * @grid     1
 * @block    1
 * @priority 0
 */
#include <stdlib.h>

static int launches; /* this code object's launches so far */

static inline __m256 planted_sum8(const __m256 a[8]) {{
  __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}}

GC_EXPORT void planted_{kind}(void **args, int64_t task) {{
  (void)task;
  float *A = GC_ARG(args, 0, float *), *B = GC_ARG(args, 1, float *), *C = GC_ARG(args, 2, float *);
  int64_t M = GC_ARG(args, 3, int64_t), N = GC_ARG(args, 4, int64_t), K = GC_ARG(args, 5, int64_t);
  {before}
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j += 8) {{
      __m256 acc[8];
      for (int t = 0; t < 8; t++) acc[t] = _mm256_setzero_ps();
      for (int64_t k = 0; k < K; k += 8) {{
        __m256 a = _mm256_loadu_ps(A + i * K + k);
        for (int t = 0; t < 8; t++)
          acc[t] = _mm256_fmadd_ps(a, _mm256_loadu_ps(B + (j + t) * K + k), acc[t]);
      }}
      _mm256_storeu_ps(C + i * N + j, planted_sum8(acc));
    }}
  {harm}
  launches++;
}}
"""


# The same table for the GPU (tests/gpu/test_gpu_planted.py runs it there);
# a GPU kernel is not stopped at the write, so the reasons are the guards'.
# kind: (the harm, done by thread 0 after C is computed; expected status;
#        words of the reason, or None where the driver's words vary)
GPU_HARMS = {
    "ok": ("", "ok", ""),
    "far_past": ("C[M * N + 16384] = 1.0f; /* 64 KiB past the end of C */", "verify-failed",
                 "wrote past the end of C (changed byte at end + 65536)"),
    "one_past": ("C[M * N] = 1.0f;", "verify-failed",
                 "wrote past the end of C (changed byte at end + 0)"),
    "before_c": ("C[-(1 << 18)] = 1.0f; /* 1 MiB before C */", "verify-failed",
                 "wrote before the start of C (changed byte at start - 1048576)"),
    "into_a": ("Aw[5] += 1.0f;", "verify-failed", "wrote into input A (element 5: row 0, col 5)"),
    "into_b": ("Bw[N * K - 1] = 0.5f;", "verify-failed", "wrote into input B (element"),
    "later_into_a": ("if (launches > 1) Aw[0] += 1.0f; /* only after the verification's two */",
                     "verify-failed", "after the timed launches: wrote into input A (element 0"),
    "wrong": ("C[0] += 1.0f;", "verify-failed", "C element 0 (row 0, col 0)"),
    "first_only": ("if (launches > 1) C[0] += 1.0f;", "verify-failed",
                   "after the timed launches: C element 0"),
    "second_wrong": ("if (launches == 1) C[0] += 1.0f;", "verify-failed", "C element 0 (row 0, col 0)"),
    "reads_c_first": ("", "verify-failed", "C element 0 (row 0, col 0)"),
    "segv": ("*(volatile int *)16 = 1; /* an illegal address */", "launch-failed", None),
    "hang": ("for (volatile int spin = 0;; spin = spin + 1) {}", "timed-out", "no result within"),
    "abort": ("gc_planted_trap();", "launch-failed", None),
}

# a thread that finds its element of C not NaN takes it as computed
GPU_BEFORE = {"reads_c_first": "if (e < M * N && C[e] == C[e]) return; /* not NaN: taken as computed */"}

# A correct f32 GEMM for small problems: a thread per element of C.
GPU_TEMPLATE = r"""/* planted for tests/gpu/test_gpu_planted.py: {kind}
 *
 * @template planted_{kind}
 * @op       gemm
 * @backend  gpu
 * @dtypes   f32
 * @kernel   planted_{kind}
 * @param    HARM 1 default 1 -- unused: a template has at least one parameter
 * @grid     cdiv(M * N, 128) 1 1
 * @block    128 1 1
 * @priority 0
 */
#if AMD
#define gc_planted_trap() __builtin_trap()
#else
#define gc_planted_trap() __trap()
#endif

GC_GLOBAL int planted_launches_{kind}; /* launches so far: thread 0 counts them */

GC_KERNEL void planted_{kind}(const TA *A, const TB *B, TC *C, int64_t M, int64_t N, int64_t K) {{
  int64_t e = gc_bid() * 128 + gc_tid();
  {before}
  if (e < M * N) {{
    int64_t i = e / N, j = e % N;
    float s = 0;
    for (int64_t k = 0; k < K; k++) s += A[i * K + k] * B[j * K + k];
    C[e] = s;
  }}
  if (e == 0) {{ /* the thread that wrote C[0] */
    int launches = planted_launches_{kind}++;
    float *Aw = (float *)A, *Bw = (float *)B;
    (void)launches, (void)Aw, (void)Bw;
    {harm}
  }}
}}
"""



NVRTC = [p for p in ("/usr/local/cuda/lib64", os.environ.get("CUDA_HOME", "") + "/lib64")
         if p and os.path.isdir(p) and any(f.startswith("libnvrtc.so") for f in os.listdir(p))]


def plant(tmp, folder, ext, template, harms):
    """Copies of the built-in templates plus one planted template per harm."""
    d = tmp / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    for kind, (harm, *_) in harms.items():
        before = (GPU_BEFORE if template is GPU_TEMPLATE else BEFORE).get(kind, "")
        (d / folder / f"planted_{kind}.{ext}").write_text(template.format(kind=kind, harm=harm, before=before))
    return d


def results(db):
    """{template: (status, detail, median_us)} and the winner's template."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT v.template, m.status, m.detail, m.median_us FROM measurements m "
                         "JOIN variants v ON v.id = m.variant_id WHERE m.status != 'rejected'").fetchall()
        win = c.execute("SELECT v.template FROM winners w JOIN measurements m ON m.id = "
                        "w.measurement_id JOIN variants v ON v.id = m.variant_id").fetchall()
    by = {}
    for t, status, detail, us in rows:
        if t.startswith("planted_"):
            by[t] = (status, detail or "", us)
        elif status == "ok":
            by.setdefault("builtin", []).append(us)
    return by, [t for (t,) in win]


def tune_planted(gc, tpl, mode, problem, budget, min_time):
    """gcore-tune over the templates in tpl (the planted ones and the
    built-ins) for problem, its CPU kernels page-protected (mode
    "protected") or guarded by canaries only ("guards-only"); returns
    (the run, {template: (status, detail, median_us)}, the winner's
    template). Under ASan: plain signals, and no leak check in a worker that
    a kernel ends with exit(0) (LeakSanitizer cannot stop its threads there)."""
    env = {"ASAN_OPTIONS": "handle_segv=0:handle_abort=0:detect_leaks=0"}
    if mode == "guards-only":
        env["GCORE_CPU_PROTECT"] = "0"
    r = gc("gcore-tune", "--templates", tpl, *problem, "--db", "t.db", "--timeout", "3", "--min-time",
           min_time, "--budget", budget, "--no-progress", env=env)
    assert r.rc == 0, r
    return (r, *results(gc.dir / "t.db"))


@pytest.mark.parametrize("mode,m", [("protected", 8), ("guards-only", 5)])
def test_planted_variants_never_win(gc, mode, m):
    """C's end is at a page boundary when protected (512 bytes, a multiple
    of the 64-byte alignment: tests/c/test_base.c covers the slack of an
    end between). m > 4: gemv_cpu, faster than the control at m <= 4, does
    not apply."""
    tpl = plant(gc.dir, "cpu", "c", TEMPLATE, HARMS)
    r, by, winner = tune_planted(gc, tpl, mode, ["--op", "gemm", "--m", m, "--n", "16", "--k", "32",
                                                 "--dtype", "f32"], len(HARMS) + 4, "0.05")
    reason = 2 if mode == "protected" else 3
    for kind, spec in HARMS.items():
        status, detail, _ = by.get("planted_" + kind, (None, "", None))
        assert status == spec[1], (kind, status, detail, r)
        assert spec[reason] in detail, (kind, detail)
        if kind == "second_wrong":  # caught by the verification, not after the timing
            assert "after the timed launches" not in detail, detail
        if mode == "protected" and status == "verify-failed" and "fault at" in detail:
            phase = "the timed launches" if kind == "later_into_a" else "the verification launch"
            assert detail.endswith("in " + phase), (kind, detail)
    assert by.get("builtin"), r
    # the winner is the control or a built-in, never a harmful one. (The
    # control, the kernel of each harmful one, usually wins, but at these
    # sizes it and the built-ins take about 0.3 us each: which is faster is
    # a timing, which no test asserts; tests/gpu/test_gpu_planted.py the same.)
    assert by["planted_ok"][0] == "ok", by["planted_ok"]
    assert winner and (winner[0] == "planted_ok" or not winner[0].startswith("planted_")), (winner, by)


# @prefetch (an L2 window after the op's arguments, templates/README.md):
# kind: (the kernel's use of its window, after C; expected status; words of
# the reason). The control checks the window it was given, so that it
# verifies only where the tuner passes what the README says (a window of
# its own, 1 MB, none of the op's buffers) and the runtime, given none,
# passes (NULL, 0).
WINDOW_USE = r"""const char *pf = GC_ARG(args, 6, const char *);
  int64_t pf_n = GC_ARG(args, 7, int64_t);
  int mine = pf != (const char *)A && pf != (const char *)B && pf != (const char *)C;
  if (args[8] || !(pf_n == 0 ? pf == 0 : mine && pf_n == 1 << 20)) C[0] += 1.0f;
  """
WINDOW_HARMS = {
    "window_ok": ("", "ok", ""),
    "into_window": ("if (pf_n) ((float *)pf)[3] = 2.0f;", "verify-failed", "wrote into its L2 window (byte 12 of 1048576)"),
    "later_into_window": ("if (pf_n && launches > 1) ((char *)pf)[pf_n - 1] = 0;  /* after the verification's two */",
                          "verify-failed",
                          "after the timed launches: wrote into its L2 window (byte 1048575"),
    "reads_window": ("if (pf_n) C[1] = ((const float *)pf)[1];", "verify-failed", "C element 1 (row 0, col 1)"),
}


def test_a_kernel_that_writes_into_its_l2_window_never_wins(gc):
    """The tuner launches a @prefetch kernel with a window of its own, every
    byte 0xFF, and checks it after the verification and after the timed
    launches: a kernel that writes there fails, so does one that reads it as
    data (a NaN in C); their twin that only checks the window it was given
    is measured ok. The bundle gcore-gen then builds records the entry's
    @prefetch (dispatch.prefetch), and gcore-run's launch through the
    dispatch table passes the empty window the twin accepts."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    for kind, (harm, *_) in WINDOW_HARMS.items():
        src = TEMPLATE.format(kind=kind, before="", harm=WINDOW_USE + harm)
        (d / "cpu" / f"planted_{kind}.c").write_text(src.replace(" * @priority 0\n", " * @priority 0\n * @prefetch\n"))
    problem = ["--op", "gemm", "--m", "8", "--n", "16", "--k", "32", "--dtype", "f32"]
    r, by, winner = tune_planted(gc, d, "guards-only", problem, len(WINDOW_HARMS) + 4, "0.05")
    for kind, (_, status, words) in WINDOW_HARMS.items():
        got = by.get("planted_" + kind, (None, "", None))
        assert got[0] == status and words in got[1], (kind, got, r)
    assert winner and winner[0] != "planted_into_window", (winner, by)
    r = gc("gcore-gen", "--templates", d, *problem, "--target", "cpu", "--force", "planted_window_ok", "-o", "b.gcb")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        assert set(c.execute("SELECT template, prefetch FROM dispatch")) == {("planted_window_ok", 1)}
    r = gc("gcore-run", "-b", "b.gcb", *problem)
    assert r.rc == 0 and "verified" in r.out, r


@pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")
def test_gpu_planted_templates_compile(gc, target="sm_90"):
    """The GPU table's templates build offline, so that `make test-gpu`
    measures them rather than failing to compile them."""
    tpl = plant(gc.dir, "gpu", "cu", GPU_TEMPLATE, GPU_HARMS)
    for kind in GPU_HARMS:
        r = gc("gcore-gen", "--templates", tpl, "--target", target, "--op", "gemm", "--m", "8",
               "--n", "16", "--k", "32", "--dtype", "f32", "--force", "planted_" + kind,
               "-o", "b.gcb", "-q")
        assert r.rc == 0, (kind, r)


# Planted quantized GEMVs: copies of gemv_q_cpu (templates/cpu/gemv_q.c),
# each cut to one point that beats the built-ins at a small decode step
# (one task of all N outputs on one thread, no pool wake-up: about 2 us
# where the built-ins take 6), then harmed; so each harmful one would win
# had its harm gone unseen (the table with every harm emptied: one did).
# kind: (code after B's blocks of a step are dequantized; the harm, after C
# is computed; expected status; words of the reason, protected CPU; words
# of the reason, guards only)
QHARMS = {
    "ok": ("", "", "ok", "", ""),
    # B's row 0, last block: its scale d read with the half's exponent one
    # too high (twice the value), its quants and any min as they are
    "scale": ("if (j == 0 && kb == K / GC_QK - 1) {\n"
              "      uint8_t bad[GC_QBYTES];\n"
              "      for (int i = 0; i < GC_QBYTES; i++) bad[i] = b[0][kb * GC_QBYTES + i];\n"
              "      bad[GC_TB == GC_Q6_K ? 209 : 1] += 4; /* d's exponent + 1 */\n"
              "      GC_QDEQUANT(bad, y[0]);\n"
              "    }", "", "verify-failed", "C element 0 (row 0, col 0): got ", "C element 0 (row 0, col 0): got "),
    "one_past": ("", "C[M * N] = 1.0f;", "verify-failed", "wrote past the end of C (at end + 0)",
                 "wrote past the end of C (changed byte at end + 0)"),
    "into_a": ("", "((TA *)A)[5] += 1.0f;", "verify-failed", "wrote into input A (element 5: row 0, col 5)",
               "wrote into input A (element 5: row 0, col 5)"),
    # the scale of B's row 1, block 0 (element K: row 1, col 0) made infinite
    # (the same each launch: a toggled bit would be back after the second)
    "into_b": ("", "((uint8_t *)B)[K / GC_QK * GC_QBYTES + 1] = 0x7C;", "verify-failed",
               "wrote into input B (element 256: row 1, col 0)", "wrote into input B (element 256: row 1, col 0)"),
    "later_into_b": ("", "if (launches > 1) ((uint8_t *)B)[1] = 0x7C;  /* only after the verification's two */",
                     "verify-failed", "wrote into input B (element 0: row 0, col 0), fault at 0x",
                     "after the timed launches: wrote into input B (element 0: row 0, col 0)"),
}


def planted_gemv_q(d, kind, after_dequant, harm):
    """templates/cpu/gemv_q.c as planted_q_<kind> in d/cpu/: one candidate
    (NB=64: one task at N <= 64, THREADS=1), @priority 0 (never a default),
    after_dequant run where a step's blocks of B are dequantized and harm at
    the end of the kernel; it counts its launches."""
    src = open(os.path.join(ROOT, "templates", "cpu", "gemv_q.c")).read()
    src = re.sub(r"\bgemv_q_cpu\b", f"planted_q_{kind}", src)
    src = re.sub(r"@param NB [\d ]+ default \d+", "@param NB 64 default 64", src)
    src = re.sub(r"@param THREADS [\d ]+ default \d+", "@param THREADS 1 default 1", src)
    src = re.sub(r"@param (\w+) [\d ]+ default (\d+)", r"@param \1 \2 default \2", src)
    src = re.sub(r"@priority \d+", "@priority 0", src)
    dequant = "      GC_QDEQUANT(b[r] + kb * GC_QBYTES, y[r]);\n"
    assert dequant in src
    src = src.replace(dequant, dequant + f"    {after_dequant}\n")
    head, tail = src.rsplit("}", 1)  # the kernel is the file's last function
    head = head.replace("#define GQ_R", "static int launches; /* this code object's launches so far */\n"
                        "#define GQ_R", 1)
    (d / "cpu" / f"planted_q_{kind}.c").write_text(head + f"  {harm}\n  launches++;\n}}" + tail)


@pytest.mark.parametrize("mode,m", [("protected", 1), ("guards-only", 3)])
def test_planted_quantized_variants_never_win(gc, mode, m):
    """The tuner verifies a quantized GEMM (B in Q4_K blocks) against the
    fp64 reference on the dequantized weights: copies of gemv_q_cpu that
    misread one block's scale, write past C, or write into A or into the
    weights (in the verification's launches or only after them) are each
    recorded verify-failed with a reason naming it, beside their unharmed
    twin measured ok; none wins, and the bundle gcore-gen builds from the
    database dispatches to none of them. m = 3: rows of A in one register
    block of MR = 4, the M > 1 path of a decode step."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    for kind, (after_dequant, harm, *_) in QHARMS.items():
        planted_gemv_q(d, kind, after_dequant, harm)
    problem = ["--op", "gemm", "--m", m, "--n", "64", "--k", "256", "--dtype", "f32:q4_k:f32"]
    # the defaults of every template: the planted ones, gemv_q_cpu and gemm_q_cpu
    r, by, winner = tune_planted(gc, d, mode, problem, len(QHARMS) + 2, "0.02")
    reason = 3 if mode == "protected" else 4
    for kind, spec in QHARMS.items():
        status, detail, _ = by.get("planted_q_" + kind, (None, "", None))
        assert status == spec[2], (kind, status, detail, r)
        assert spec[reason] in detail, (kind, detail)
    assert by["planted_q_ok"][0] == "ok" and by.get("builtin"), (by, r)
    assert winner and (winner[0] == "planted_q_ok" or not winner[0].startswith("planted_")), (winner, by)
    r = gc("gcore-gen", "--templates", d, *problem, "--target", "cpu", "--db", "t.db", "-o", "b.gcb")
    assert r.rc == 0 and "1 tuned" in r.out, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        rows = c.execute("SELECT template, m_lo, m_hi, source FROM dispatch").fetchall()
    assert (winner[0], m, m) in {(t, lo, hi) for t, lo, hi, source in rows if source.startswith("tuned")}, rows
    assert {t for t, *_ in rows} <= {"planted_q_ok", "gemv_q_cpu", "gemm_q_cpu"}, rows


def test_a_kernel_that_keeps_what_it_finds_in_the_cache_is_caught(gc):
    """rope_kv writes the KV cache's row at the position, an in/out
    buffer whose rows to be written start as NaN. A copy of rope_kv_cpu
    planted to put back what it found in one element of that row unless
    it was NaN (a kernel taking a written row as done) passed with NaN
    there alone; the checked launch finds finite noise there instead, so
    it fails, naming the cache element."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    src = (d / "cpu" / "rope_kv.c").read_text()
    src = src.replace("@template rope_kv_cpu", "@template planted_rope_keep").replace(
        "@kernel rope_kv_cpu", "@kernel planted_rope_keep").replace(
        "@op rope_kv rope_kv_batch", "@op rope_kv").replace(
        "GC_EXPORT void rope_kv_cpu(", "GC_EXPORT void planted_rope_keep(")
    head, tail = src.rsplit("}", 1)  # the kernel is the file's last function
    head = head.replace("  int64_t nsb = gc_cdiv(H + G, HEADS); /* slot blocks */",
                        "  const TC v0 = Vc[pos0 * G * D]; /* value head 0's first element at the position */\n"
                        "  int64_t nsb = gc_cdiv(H + G, HEADS); /* slot blocks */", 1)
    (d / "cpu" / "planted_rope_keep.c").write_text(
        head + "  if (v0 == v0) Vc[pos0 * G * D] = v0; /* not NaN: kept as found */\n}" + tail)
    # one task (TOK, HEADS at least M, H + G): no other task writes that element
    r = gc("gcore-tune", "--templates", d, "--template", "planted_rope_keep", "--op", "rope_kv", "--m", "1",
           "--h", "4", "--g", "2", "--d", "16", "--dtype", "f32", "--db", "r.db", "--budget", "1",
           "--no-progress")
    assert r.rc == 0, r
    by, winner = results(gc.dir / "r.db")
    status, detail, _ = by["planted_rope_keep"]
    assert status == "verify-failed" and re.match(r"Vc element \d+ \(row \d+, col 0\): got ", detail), detail
    assert not winner, winner


# A decode attention right at long contexts only: the line that bounds the
# keys, and the same line leaving out key 0 where a row has fewer than 256
# keys (right at positions 1023, 2047 and 4095, wrong at 5), in the CPU
# kernel and in the SIMT GPU one (attention_decode.cu's ad_slice: the first
# slice's, whose keys then start at 1 and end one past the slice).
SHORT_HARMS = {
    "cpu": ("attention.c", "attention_cpu", "for (int64_t j0 = 0; j0 < kend; j0 += KB)",
            "for (int64_t j0 = kend < 256; j0 < kend; j0 += KB)"),
    "gpu": ("attention_decode.cu", "attention_decode",
            "a.j0 = gc_min64(a.L, sp * cs);", "a.j0 = gc_min64(a.L, sp * cs + (a.L < 256 && sp == 0));"),
}


def planted_attention(d, folder, name, harmed, priority=0, harms=SHORT_HARMS, bucket_priority=None):
    """A copy of folder's decode attention of harms (SHORT_HARMS) named
    `name`, its space cut to its defaults (one candidate; the @defaults
    lines, which name other values, dropped), harmed or not, at this
    @priority (0: never a default; above the built-ins': the default); with
    bucket_priority, that one for a decode's short-context bucket (K > 0)."""
    f, old, line, harm = harms[folder]
    src = open(os.path.join(ROOT, "templates", folder, f)).read()
    src = re.sub(r"\b%s\b" % old, name, src)
    src = re.sub(r"\n \* @priority \d+ if [^\n]*", "", src)
    src = re.sub(r"@priority \d+", f"@priority {priority}" + (
        f"\n * @priority {bucket_priority} if K > 0" if bucket_priority is not None else ""), src)
    src = re.sub(r"@param (\w+) [\d ]+ default (\d+)", r"@param \1 \2 default \2", src)
    src = re.sub(r"\n \* @defaults [^\n]*", "", src)
    assert line in src
    (d / folder / f"{name}.{f.split('.')[1]}").write_text(src.replace(line, harm) if harmed else src)


def plant_attention(tmp, folder):
    """Copies of the built-in templates plus planted_att_ok and planted_att_short."""
    d = tmp / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    planted_attention(d, folder, "planted_att_ok", False)
    planted_attention(d, folder, "planted_att_short", True)
    return d


def assert_short_caught(db):
    """planted_att_short verify-failed at position 5, its twin ok, and not
    the winner."""
    by, winner = results(db)
    status, detail, _ = by["planted_att_short"]
    assert status == "verify-failed" and detail.startswith("at position 5: O element"), (status, detail)
    assert by["planted_att_ok"][0] == "ok", by["planted_att_ok"]
    assert winner and winner[0] != "planted_att_short", (winner, by)


def test_a_decode_attention_wrong_at_short_contexts_never_wins(gc):
    """The tuner verifies (and times) a decode attention at positions 1023,
    5, 2047 and 4095 (core/ops.c: gc_op_tune_points), not at 1023 alone: a
    planted copy of the CPU kernel that leaves out the first key where a
    row has fewer than 256 (right at 1023, 2047 and 4095, so a tuner that looked
    there only would let it win) is recorded verify-failed at position 5;
    its unharmed twin is measured ok, over all four."""
    d = plant_attention(gc.dir, "cpu")
    r = gc("gcore-tune", "--templates", d, "--op", "attention", "--m", "1", "--h", "5", "--g", "5",
           "--d", "96", "--dtype", "f32", "--db", "t.db", "--min-time", "0.02", "--budget", "6",
           "--no-progress")
    assert r.rc == 0, r
    assert_short_caught(gc.dir / "t.db")


@pytest.mark.skipif(not NVRTC, reason="NVRTC not installed (CUDA toolkit not found)")
def test_gpu_planted_attention_compiles(gc, target="sm_90"):
    """tests/gpu/test_gpu_planted.py's decode attentions build offline."""
    d = plant_attention(gc.dir, "gpu")
    for name in ("planted_att_ok", "planted_att_short"):
        r = gc("gcore-gen", "--templates", d, "--target", target, "--op", "attention", "--m", "1",
               "--h", "32", "--g", "8", "--d", "128", "--dtype", "f16", "--force", name, "-o", "b.gcb", "-q")
        assert r.rc == 0, (name, r)


# The CPU kernel right where a row has at most 1024 keys (the decode's
# short-context bucket, GC_LLAMA_ATTN_SHORT) and leaving out key 0 above.
LONG_HARMS = {"cpu": ("attention.c", "attention_cpu", "for (int64_t j0 = 0; j0 < kend; j0 += KB)",
                      "for (int64_t j0 = kend > 1024; j0 < kend; j0 += KB)")}


def test_a_bucket_kernel_is_judged_at_its_bucket_positions(gc):
    """A decode attention of a context bucket (k = 1024: at most 1024 keys)
    is verified and timed at the positions inside it (1023, 5, 127), one for
    any length (k = 0) at 1023, 5, 2047 and 4095: the planted kernel wrong
    above 1024 keys is ok for the bucket and verify-failed at position 2047
    for any length."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    planted_attention(d, "cpu", "planted_att_ok", False, harms=LONG_HARMS)
    planted_attention(d, "cpu", "planted_att_long", True, harms=LONG_HARMS)
    for k, db in (("1024", "short.db"), ("0", "any.db")):
        r = gc("gcore-tune", "--templates", d, "--op", "attention", "--m", "1", "--k", k, "--h", "4", "--g", "2",
               "--d", "32", "--dtype", "f32", "--db", db, "--min-time", "0.02", "--budget", "4", "--no-progress")
        assert r.rc == 0, r
    by, _ = results(gc.dir / "short.db")
    assert by["planted_att_long"][0] == "ok" and by["planted_att_ok"][0] == "ok", by
    by, winner = results(gc.dir / "any.db")
    status, detail, _ = by["planted_att_long"]
    assert status == "verify-failed" and detail.startswith("at position 2047: O element"), (status, detail)
    assert by["planted_att_ok"][0] == "ok" and winner[0] != "planted_att_long", (by, winner)


def test_a_bucket_kernel_runs_inside_its_bucket_only(gc):
    """A decode step at a position past the short-context bucket runs the
    attention for any length: with the planted kernel wrong above 1024 keys
    as the bundle's bucket kernel (its @priority for K > 0 above the
    built-in's), a 1000-token prompt and 40 decode steps (positions up to
    1039) give the built-in bundle's logits bit for bit, and its profile
    names both kernels; forced everywhere instead, the same kernel changes
    every row of 1025 keys and more and none before (so the test can
    fail)."""
    import numpy as np
    import tinymodel as TM
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    planted_attention(d, "cpu", "planted_att_long", True, harms=LONG_HARMS, bucket_priority=9)
    m = str(gc.dir / "m.bin")
    TM.write_llama2c(m, dim=32, hidden_dim=64, n_heads=4, n_kv_heads=2, vocab=96, seq_len=1100, seed=3)
    prompt = ",".join(str(1 + (i * 37) % 95) for i in range(1000))
    logits = {}
    for name, extra in (("builtin", []), ("bucket", ["--templates", d]),
                        ("forced", ["--templates", d, "--force", "planted_att_long"])):
        b = str(gc.dir / f"{name}.gcb")
        r = gc("gcore-gen", "--model", m, "--target", "cpu", "-o", b, "-q", *extra)
        assert r.rc == 0, r
        out = str(gc.dir / f"{name}.f32")
        r = gc("gcore-run", "-m", m, "-b", b, "--backend", "cpu", "--tokens", prompt, "-n", "40", "--temp", "0",
               "--ignore-eos", "--logits", out, *(["--profile"] if name == "bucket" else []))
        assert r.rc == 0, r
        logits[name] = np.fromfile(out, dtype=np.float32).reshape(-1, 96)
        if name == "bucket":
            decode = r.err[r.err.index("decode:"):]
            assert "attention f32:f32:f32 m=1 k=1024 h=4 g=2 d=8" in decode and "planted_att_long" in decode, decode
            assert "attention f32:f32:f32 m=1 h=4 g=2 d=8" in decode and "attention_cpu" in decode, decode
    assert logits["builtin"].shape == (1039, 96)
    assert np.array_equal(logits["bucket"], logits["builtin"])
    same = (logits["forced"] == logits["builtin"]).all(axis=1)  # row i: position i, i + 1 keys
    assert same[:1024].all() and not same[1024:].any(), np.nonzero(~same)
