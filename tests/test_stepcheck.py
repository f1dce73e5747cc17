"""gcore-tune --model's step check (tuner/stepcheck.c): each winner of a
decode step that differs from its template default is timed, against the
defaults, in the step that launches it (the single sequence's, or
--batch's batched step of its rows), and where the step is slower with it,
tune.db's step_checks says so and gcore-gen builds the default in its place
(gen/bundle_build.c). On the CPU the check runs when asked (--step-check);
its verdicts there are the host's noise, so these tests check what is
recorded and what gcore-gen does with a verdict, not which one it is, but
for one verdict a planted slow default decides."""
import os
import re
import shutil
import sqlite3

import tinymodel as TM
from conftest import ROOT

TINY = dict(dim=64, hidden_dim=160, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, vocab=300, max_seq=256)


def dispatch(bundle):
    """{(op, n, k): (template, params)} of a bundle's exact entries."""
    with sqlite3.connect(bundle) as c:
        return {(op, n, k): (t, p) for op, n, k, t, p in
                c.execute("SELECT op, n, k, template, params FROM dispatch WHERE m_lo = 1 AND m_hi = 1")}


def test_the_step_check_records_its_verdicts_and_gen_builds_the_default_for_a_refused_winner(gc):
    model = str(gc.dir / "m")
    TM.write_model(model, seed=3, dtype="f32", **TINY)
    r = gc("gcore-tune", "--model", model, "--target", "cpu", "--budget", "3", "--prefill", "16", "--db", "t.db",
           "--min-time", "0.02", "--no-progress", "--step-check", timeout=600)
    assert r.rc == 0, r
    lines = re.findall(r"^  (\S+ \S+ m=1 .*?), (one sequence|in a batch of 1): (\S+) (\S+): ([\d.]+) us a step "
                       r"against ([\d.]+) with the default \((\S+) (\S+)\): (kept|slower in the step)", r.out, re.M)
    steps = [0 if step == "one sequence" else 1 for _, step, *_ in lines]  # the rows of the step timed
    lines = [(key, *rest) for key, _, *rest in lines]
    head = re.search(r"^step check: (\d+) winners of the decode steps differ from their defaults; (\d+) of them timed",
                     r.out, re.M)
    assert head and int(head.group(2)) == len(lines) > 0, r.out
    assert re.search(rf"^step check: \d+ of {len(lines)} winners timed kept, \d+ refused, \d+ not timed", r.out,
                     re.M), r.out
    with sqlite3.connect(gc.dir / "t.db") as c:
        rows = c.execute("SELECT s.measurement_id, p.op, p.n, p.k, v.template, v.params, s.default_us, s.winner_us, "
                         "s.kept, s.model, s.rows FROM step_checks s JOIN measurements m ON m.id = s.measurement_id "
                         "JOIN problems p ON p.id = m.problem_id JOIN variants v ON v.id = m.variant_id "
                         "ORDER BY s.id").fetchall()
        winners = {r[0] for r in c.execute("SELECT measurement_id FROM winners")}
        target = c.execute("SELECT DISTINCT target FROM step_checks").fetchall()
    assert len(rows) == len(lines) and len(target) == 1, (rows, lines, target)
    target = target[0][0]  # this host's: cpu:x86-64-v4, -v3, ...
    for row, line, step in zip(rows, lines, steps):
        mid, op, n, k, tpl, params, d_us, w_us, kept, m, nrows = row
        assert mid in winners and m == model and (tpl, params) == line[1:3] and nrows == step, (row, line)
        assert (round(w_us, 2), round(d_us, 2)) == (float(line[3]), float(line[4])), (row, line)
        assert kept == (line[7] == "kept"), (row, line)
        assert (tpl, params) != line[5:7], "a winner equal to its default was timed"

    # the verdicts, set: the first winner checked refused (in a batch of 3), the others kept
    with sqlite3.connect(gc.dir / "t.db") as c:
        for i, row in enumerate(rows):
            c.execute("INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, rows, "
                      "created) VALUES (?, ?, ?, 1.0, ?, ?, ?, datetime('now', '+1 minute'))",
                      (row[0], target, model, 2.0 if i == 0 else 1.0, 0 if i == 0 else 1, 3 if i == 0 else 0))
    gen = ["gcore-gen", "--model", model, "--target", "cpu", "--prefill", "16"]
    r = gc(*gen, "-o", "defaults.gcb")
    assert r.rc == 0, r
    r = gc(*gen, "--db", "t.db", "-o", "tuned.gcb")
    assert r.rc == 0 and "some winners slowed the decode step" in r.out, r
    d, t = dispatch(gc.dir / "defaults.gcb"), dispatch(gc.dir / "tuned.gcb")
    refused = tuple(rows[0][1:4])
    assert t[refused] == d[refused] != tuple(rows[0][4:6]), (t[refused], d[refused], rows[0])
    with sqlite3.connect(gc.dir / "tuned.gcb") as c:  # the entry's provenance names the step that refused it
        why = c.execute("SELECT source FROM dispatch WHERE op = ? AND n = ? AND k = ? AND m_lo = 1 AND m_hi = 1",
                        refused).fetchone()[0]
    assert why == (f"default: the winner (measurement {rows[0][0]}) made the step of a batch of 3 slower, "
                   "2.00 us against 1.00 (gcore-tune's step check)"), why
    for row in rows[1:]:
        if tuple(row[1:4]) != refused:
            assert t[tuple(row[1:4])] == tuple(row[4:6]), row
    with sqlite3.connect(gc.dir / "tuned.gcb") as c:
        prov = dict(c.execute("SELECT key, value FROM meta"))
    assert any("1 slower in the step" in v for v in prov.values()), prov

    # a later check that keeps it: the winner again
    with sqlite3.connect(gc.dir / "t.db") as c:
        c.execute("INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, created) "
                  "VALUES (?, ?, ?, 1.0, 1.0, 1, datetime('now', '+2 minutes'))", (rows[0][0], target, model))
    r = gc(*gen, "--db", "t.db", "-o", "again.gcb")
    assert r.rc == 0 and "slowed the decode step" not in r.out, r
    assert dispatch(gc.dir / "again.gcb")[refused] == tuple(rows[0][4:6])


SLOW_TICKS = 8_000_000  # about 2-4 ms of the time-stamp counter at 2-4 GHz


def test_each_timing_runs_its_own_bundle(gc):
    """The one verdict of the step check that the host's noise cannot
    decide: a copy of the built-in templates whose argmax_cpu has one
    parameter more, SLOW, whose default (1) spins SLOW_TICKS of the
    time-stamp counter a launch before the argmax and whose other point (0)
    does not; its other parameters have one value each. A sweep of two
    candidates a problem measures both and picks SLOW=0; the single
    sequence's step launches argmax_step once a step, so the step check
    must time the winner's step at least 1 ms faster than the defaults'
    and keep it. A check that ran
    the defaults' bundle for the winner (or the winner's for the defaults)
    would see the same time twice."""
    tpl = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), tpl)
    src = (tpl / "cpu" / "argmax.c").read_text()
    for old, new in (
            ("@param    ROWS 1 2 4 8 default 1", "@param    ROWS 1 default 1"),
            ("@param    LANES 1 4 8 default 8", "@param    LANES 8 default 8"),
            ("@param    THREADS 0 1 2 4 8 16 32 64 default 0", "@param    THREADS 1 default 1\n"
             " * @param    SLOW 1 0 default 1 -- planted by tests/test_stepcheck.py: 1 spins first"),
            ("  for (int64_t r = task * ROWS;", f"  for (unsigned long long t0 = __builtin_ia32_rdtsc(); SLOW &&\n"
             f"       __builtin_ia32_rdtsc() - t0 < {SLOW_TICKS}ull;)\n    ;\n  for (int64_t r = task * ROWS;")):
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    (tpl / "cpu" / "argmax.c").write_text(src)
    model = str(gc.dir / "m")
    TM.write_model(model, seed=6, dtype="f32", **TINY)
    r = gc("gcore-tune", "--model", model, "--target", "cpu", "--templates", tpl, "--budget", "2",
           "--prefill", "none", "--db", "t.db", "--min-time", "0.02", "--no-progress",
           "--step-check", timeout=600)
    assert r.rc == 0, r
    got = re.findall(r"^  argmax_step f32:f32:f32 m=1 n=300, one sequence: argmax_cpu (\S+): ([\d.]+) us a step "
                     r"against ([\d.]+) with the default \(argmax_cpu (\S+)\): (kept|slower)", r.out, re.M)
    assert len(got) == 1, r.out
    params, w_us, d_us, dflt, verdict = got[0]
    assert "SLOW=0" in params.split(",") and "SLOW=1" in dflt.split(","), got
    assert float(w_us) + 1000 < float(d_us) and verdict == "kept", got


def test_step_check_flags_go_with_model(gc):
    for flag in ("--step-check", "--no-step-check"):
        r = gc("gcore-tune", "--op", "gemm", "--m", "8", "--n", "16", "--k", "32", flag)
        assert r.rc != 0 and "go with --model" in r.err and len(r.err.strip().splitlines()) == 1, r


def test_step_check_is_refused_where_a_run_tunes_part_of_a_model(gc):
    model = str(gc.dir / "m")
    TM.write_model(model, seed=4, dtype="f32", **TINY)
    for extra in (["--tp", "2"], ["--shard", "1/2"], ["--devices", "0,1"]):
        r = gc("gcore-tune", "--model", model, "--step-check", *extra)
        assert r.rc != 0 and "--step-check times one whole model on one device" in r.err, (extra, r)
        assert len(r.err.strip().splitlines()) == 1 and not (gc.dir / "default-tune.db").exists(), r


def test_a_context_too_short_to_time_steps_in_is_said_and_skipped(gc):
    model = str(gc.dir / "m")
    TM.write_model(model, seed=4, dtype="f32", **(TINY | dict(max_seq=32)))
    r = gc("gcore-tune", "--model", model, "--target", "cpu", "--budget", "1", "--prefill", "none", "--db", "t.db",
           "--min-time", "0.01", "--no-progress", "--step-check", timeout=600)
    assert r.rc == 0 and "context of 32 positions is too short to time decode steps in; skipped" in r.out, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        assert c.execute("SELECT count(*) FROM step_checks").fetchone()[0] == 0


def test_each_winner_is_timed_in_the_step_that_launches_it(gc):
    """gcore-run's single-sequence step and gcore-serve's batched steps
    (--batch 1,4) run different kernels: a winner is timed in the step that
    launches its problem (argmax and the plain QKV projection only in the
    batched step of one row, where argmax_step and the RoPE-fused QKV take
    their places in the single sequence's), and one no step here launches (a
    prefill's problem; the general decode attention in a context shorter
    than its bucket) is named and not timed. A winner of the batch of 4 also
    serves 2 and 3 rows (gcore-gen's range entry under 4): it is timed in the
    batch of 2 as well. Each chosen winner is made the fastest measurement of
    its problem, so that the re-run picks it."""
    model = str(gc.dir / "m")
    TM.write_model(model, seed=5, dtype="f32", **TINY)
    tune = ["gcore-tune", "--model", model, "--target", "cpu", "--budget", "4", "--prefill", "none", "--batch", "1,4",
            "--db", "t.db", "--min-time", "0.01", "--no-progress"]
    r = gc(*tune, "--no-step-check", timeout=600)
    assert r.rc == 0, r
    r = gc("gcore-gen", "--model", model, "--target", "cpu", "--prefill", "none", "--batch", "1,4", "-o", "d.gcb")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "d.gcb") as c:
        defaults = {(op, m, n, k): (t, p) for op, m, n, k, t, p in c.execute(
            "SELECT op, m_lo, n, k, template, params FROM dispatch WHERE m_lo = m_hi")}
    want = {"argmax f32:f32:f32 m=1 n=300": "in a batch of 1",
            "rmsnorm_gemm f32:f32:f32 m=1 n=128 k=64": "in a batch of 1",
            "attention_batch f32:f32:f32 m=4 h=4 g=2 d=16": "in a batch of 4",
            "gemm_add f32:f32:f32 m=4 n=64 k=160": "in a batch of 4",
            "attention f32:f32:f32 m=1 k=1024 h=4 g=2 d=16": "one sequence",
            "rmsnorm_gemm_rope_kv f32:f32:f32 m=1 n=128 k=64 h=4 g=2 d=16": "one sequence",
            "attention f32:f32:f32 m=1 h=4 g=2 d=16": None,  # the general attention: past 1024 positions of 256
            "attention f32:f32:f32 m=4 h=4 g=2 d=16": None,  # a prefill's
            "rope_kv f32:f32:f32 m=4 h=4 g=2 d=16": None}
    with sqlite3.connect(gc.dir / "t.db") as c:
        for key in want:
            rows = c.execute("SELECT m.id, p.op, p.m, p.n, p.k, v.template, v.params FROM measurements m JOIN problems p "
                             "ON p.id = m.problem_id JOIN variants v ON v.id = m.variant_id WHERE p.key = ? AND "
                             "m.status = 'ok'", (key,)).fetchall()
            other = [mid for mid, op, m, n, k, t, p in rows if defaults[(op, m, n, k)] != (t, p)]
            assert other, (key, rows)
            c.execute("UPDATE measurements SET median_us = 1e-6 WHERE id = ?", (other[0],))
    r = gc(*tune, "--step-check", timeout=600)
    assert r.rc == 0, r
    timed = dict(re.findall(r"^  (.*?), (one sequence|in a batch of \d+): \S+ \S+: [\d.]+ us a step", r.out, re.M))
    untimed = re.findall(r"^  (.*?): \S+ \S+: not timed: no decode step here launches it", r.out, re.M)
    below = dict(re.findall(r"^  (.*?), in a batch of 4: .*?; in a batch of (\d+) \(the fewest rows it serves\): "
                            r"[\d.]+ us a step against [\d.]+: (?:kept|slower)", r.out, re.M))
    for key, step in want.items():
        if step:
            assert timed.get(key) == step, (key, r.out)
        else:
            assert key in untimed and key not in timed, (key, r.out)
        if step == "in a batch of 4":  # its entry serves 2 and 3 rows too (gcore-gen's range under 4)
            assert below.get(key) == "2", (key, r.out)
    with sqlite3.connect(gc.dir / "t.db") as c:
        checked = {k for (k,) in c.execute("SELECT p.key FROM step_checks s JOIN measurements m ON m.id = "
                                            "s.measurement_id JOIN problems p ON p.id = m.problem_id")}
    assert checked == set(timed), (checked, timed)
    # a winner timed below M too: one verdict, resting on its step of M rows or (refused there) of L rows
    with sqlite3.connect(gc.dir / "t.db") as c:
        lines = re.findall(
            r"^  (.*?), in a batch of 4: \S+ \S+: ([\d.]+) us a step against ([\d.]+) with the default \(.*?\); in a "
            r"batch of 2 \(the fewest rows it serves\): ([\d.]+) us a step against ([\d.]+): (kept|slower)", r.out, re.M)
        assert len(lines) == len(below) >= 2, (lines, below)
        for key, w, d, lw, ld, verdict in lines:
            got = c.execute("SELECT round(s.winner_us, 2), round(s.default_us, 2), s.kept, s.rows FROM step_checks s "
                            "JOIN measurements m ON m.id = s.measurement_id JOIN problems p ON p.id = m.problem_id "
                            "WHERE p.key = ?", (key,)).fetchall()
            assert len(got) == 1 and got[0][2] == (verdict == "kept"), (key, got, verdict)
            us_rows = (got[0][0], got[0][1], got[0][3])  # the step's two times and its rows
            assert us_rows in ((float(w), float(d), 4), (float(lw), float(ld), 2)), (key, got)
            if verdict == "kept":
                assert us_rows == (float(w), float(d), 4), (key, got)
    head = re.search(r"^step check: (\d+) winners of the decode steps differ from their defaults; (\d+) of them timed",
                     r.out, re.M)
    assert head and int(head.group(1)) == len(timed) + len(untimed) and int(head.group(2)) == len(timed), r.out
    assert re.search(rf"^step check: .* against the defaults, {len(below)} also in the batch of the fewest rows",
                     r.out, re.M), r.out
