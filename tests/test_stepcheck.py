"""gcore-tune --model's step check (tuner/stepcheck.c): each winner of the
decode step that differs from its template default is timed in the model's
decode step against the defaults, and where the step is slower with it,
tune.db's step_checks says so and gcore-gen builds the default in its place
(gen/bundle_build.c). On the CPU the check runs when asked (--step-check);
its verdicts there are the host's noise, so this test checks what is
recorded and what gcore-gen does with a verdict, not which one it is."""
import re
import sqlite3

import tinymodel as TM

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
    lines = re.findall(r"^  (\S+ \S+ m=1 .*?): (\S+) (\S+): ([\d.]+) us a step against ([\d.]+) with the default "
                       r"\((\S+) (\S+)\): (kept|slower in the step)", r.out, re.M)
    head = re.search(r"^step check: (\d+) winners of the decode step differ", r.out, re.M)
    assert head and int(head.group(1)) == len(lines) > 0, r.out
    assert re.search(rf"^step check: \d+ of {len(lines)} winners kept, \d+ refused", r.out, re.M), r.out
    with sqlite3.connect(gc.dir / "t.db") as c:
        rows = c.execute("SELECT s.measurement_id, p.op, p.n, p.k, v.template, v.params, s.default_us, s.winner_us, "
                         "s.kept, s.model FROM step_checks s JOIN measurements m ON m.id = s.measurement_id "
                         "JOIN problems p ON p.id = m.problem_id JOIN variants v ON v.id = m.variant_id "
                         "ORDER BY s.id").fetchall()
        winners = {r[0] for r in c.execute("SELECT measurement_id FROM winners")}
        target = c.execute("SELECT DISTINCT target FROM step_checks").fetchall()
    assert len(rows) == len(lines) and len(target) == 1, (rows, lines, target)
    target = target[0][0]  # this host's: cpu:x86-64-v4, -v3, ...
    for row, line in zip(rows, lines):
        mid, op, n, k, tpl, params, d_us, w_us, kept, m = row
        assert mid in winners and m == model and (tpl, params) == line[1:3], (row, line)
        assert (round(w_us, 2), round(d_us, 2)) == (float(line[3]), float(line[4])), (row, line)
        assert kept == (line[7] == "kept"), (row, line)
        assert (tpl, params) != line[5:7], "a winner equal to its default was timed"

    # the verdicts, set: the first winner checked refused, the others kept
    with sqlite3.connect(gc.dir / "t.db") as c:
        for i, row in enumerate(rows):
            c.execute("INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept) "
                      "VALUES (?, ?, ?, 1.0, ?, ?)", (row[0], target, model, 2.0 if i == 0 else 1.0,
                                                      0 if i == 0 else 1))
    gen = ["gcore-gen", "--model", model, "--target", "cpu", "--prefill", "16"]
    r = gc(*gen, "-o", "defaults.gcb")
    assert r.rc == 0, r
    r = gc(*gen, "--db", "t.db", "-o", "tuned.gcb")
    assert r.rc == 0 and "some winners slowed the decode step" in r.out, r
    d, t = dispatch(gc.dir / "defaults.gcb"), dispatch(gc.dir / "tuned.gcb")
    refused = tuple(rows[0][1:4])
    assert t[refused] == d[refused] != tuple(rows[0][4:6]), (t[refused], d[refused], rows[0])
    for row in rows[1:]:
        if tuple(row[1:4]) != refused:
            assert t[tuple(row[1:4])] == tuple(row[4:6]), row
    with sqlite3.connect(gc.dir / "tuned.gcb") as c:
        prov = dict(c.execute("SELECT key, value FROM meta"))
    assert any("1 slower in the step" in v for v in prov.values()), prov

    # a later check that keeps it: the winner again
    with sqlite3.connect(gc.dir / "t.db") as c:
        c.execute("INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept) "
                  "VALUES (?, ?, ?, 1.0, 1.0, 1)", (rows[0][0], target, model))
    r = gc(*gen, "--db", "t.db", "-o", "again.gcb")
    assert r.rc == 0 and "slowed the decode step" not in r.out, r
    assert dispatch(gc.dir / "again.gcb")[refused] == tuple(rows[0][4:6])


def test_step_check_flags_go_with_model(gc):
    for flag in ("--step-check", "--no-step-check"):
        r = gc("gcore-tune", "--op", "gemm", "--m", "8", "--n", "16", "--k", "32", flag)
        assert r.rc != 0 and "go with --model" in r.err and len(r.err.strip().splitlines()) == 1, r


def test_a_context_too_short_to_time_steps_in_is_said_and_skipped(gc):
    model = str(gc.dir / "m")
    TM.write_model(model, seed=4, dtype="f32", **(TINY | dict(max_seq=32)))
    r = gc("gcore-tune", "--model", model, "--target", "cpu", "--budget", "1", "--prefill", "none", "--db", "t.db",
           "--min-time", "0.01", "--no-progress", "--step-check", timeout=600)
    assert r.rc == 0 and "context of 32 positions is too short to time decode steps in; skipped" in r.out, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        assert c.execute("SELECT count(*) FROM step_checks").fetchone()[0] == 0
