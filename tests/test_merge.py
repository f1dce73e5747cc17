"""Tuning shared across machines: gcore-tune --merge combines databases by
their keys (device, compiler, problem, variant), drops duplicates, re-picks
the winners and changes nothing when run twice; --shard I/N tunes one slice
of a workload, and the slices merged hold what one machine's sweep holds."""
import os
import shutil
import sqlite3

import pytest

from conftest import ROOT, assert_clean_error

# Four small problems; random search walks a fixed order, so a budget
# picks the same candidates on every run.
WORKLOAD = """\
rmsnorm f32 m=1,4 n=256
gemm    f32 m=1,8 n=32 k=64
"""
SWEEP = ["--budget", "3", "--strategy", "random", "--min-time", "0.02", "--no-progress"]


def rows(db):
    """(device, compiler, problem key, vid, status) of every measurement."""
    with sqlite3.connect(db) as c:
        return sorted(c.execute(
            "SELECT d.name || '/' || d.driver, c.driver || ' ' || c.version, p.key, v.vid, m.status "
            "FROM measurements m JOIN devices d ON d.id = m.device_id JOIN problems p ON "
            "p.id = m.problem_id JOIN variants v ON v.id = m.variant_id JOIN compilers c ON "
            "c.id = v.compiler_id").fetchall())


def winners(db):
    """{(device name, problem key, target): (vid, median)}"""
    with sqlite3.connect(db) as c:
        return {(d, k, t): (v, us) for d, k, t, v, us in c.execute(
            "SELECT d.name, p.key, w.target, v.vid, m.median_us FROM winners w JOIN devices d ON "
            "d.id = w.device_id JOIN problems p ON p.id = w.problem_id JOIN measurements m ON "
            "m.id = w.measurement_id JOIN variants v ON v.id = m.variant_id")}


def median(db, key, vid):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT m.median_us FROM measurements m JOIN problems p ON p.id = "
                         "m.problem_id JOIN variants v ON v.id = m.variant_id WHERE p.key = ? AND "
                         "v.vid = ?", (key, vid)).fetchone()[0]


def dump(db):
    """Every row of every table, ids and timestamps included."""
    with sqlite3.connect(db) as c:
        tables = [t for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                          "ORDER BY name")]
        return {t: sorted(map(repr, c.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}


def sweeps(d, cache_dir, workload, extra):
    """One unsharded sweep and the two halves of the same sweep, each in a
    database of its own (the compile cache is shared: the slices only
    measure)."""
    from conftest import run_tool
    (d / "w.txt").write_text(workload)
    env = {"GCORE_CACHE": cache_dir, "GCORE_DB": str(d / "default.db")}
    outs = {}
    for name, shard in (("whole", []), ("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"])):
        r = run_tool("gcore-tune", "--workload", "w.txt", "--db", f"{name}.db", *SWEEP, *extra,
                     *shard, cwd=d, env=env)
        assert r.rc == 0, r
        outs[name] = r.out
    return d, outs


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, cache_dir):
    """The built-in templates on four problems."""
    return sweeps(tmp_path_factory.mktemp("merge"), cache_dir, WORKLOAD, [])


@pytest.fixture(scope="module")
def pinned(tmp_path_factory, cache_dir):
    """A template whose candidates are a factor of two apart in time
    (tests/data/ladder_gemm.c): winners that timing noise cannot flip."""
    d = tmp_path_factory.mktemp("pinned")
    shutil.copytree(os.path.join(ROOT, "templates"), d / "tpl")
    shutil.copy(os.path.join(ROOT, "tests", "data", "ladder_gemm.c"), d / "tpl" / "cpu")
    return sweeps(d, cache_dir, "gemm f32 m=1,2,3,4 n=64 k=256\n",
                  ["--templates", str(d / "tpl"), "--template", "ladder_gemm"])


def test_shards_are_disjoint_slices(tuned):
    d, outs = tuned
    assert "shard 1/2: 2 of the 4 problems" in outs["s1"], outs["s1"]
    assert "shard 2/2: 2 of the 4 problems" in outs["s2"], outs["s2"]
    k1 = {k for _, _, k, _, _ in rows(d / "s1.db")}
    k2 = {k for _, _, k, _, _ in rows(d / "s2.db")}
    assert len(k1) == 2 and len(k2) == 2 and not k1 & k2


def test_merged_shards_equal_one_sweep(tuned, gc):
    """The same candidates with the same verdicts, exactly; each winner the
    one its shard picked from the same measurements (the one sweep's may
    differ where two candidates are within the CPU's timing noise: see the
    pinned test for winners across runs)."""
    d, _ = tuned
    r = gc("gcore-tune", "--merge", d / "s1.db", d / "s2.db", "--db", "m.db")
    assert r.rc == 0, r
    assert "4 winners re-picked over the union, 0 changed" in r.out, r
    m = gc.dir / "m.db"
    assert rows(m) == rows(d / "whole.db")
    wm = winners(m)
    assert wm.keys() == winners(d / "whole.db").keys() and len(wm) == 4
    for key, (vid, _) in wm.items():
        shard = winners(d / "s1.db").get(key) or winners(d / "s2.db").get(key)
        assert shard[0] == vid, key


def test_merged_shards_pick_the_one_sweeps_winners(pinned, gc):
    d, _ = pinned
    r = gc("gcore-tune", "--merge", d / "s1.db", d / "s2.db", "--db", "m.db")
    assert r.rc == 0, r
    assert rows(gc.dir / "m.db") == rows(d / "whole.db")
    got = {k: v for k, (v, _) in winners(gc.dir / "m.db").items()}
    want = {k: v for k, (v, _) in winners(d / "whole.db").items()}
    assert len(got) == 4 and got == want


def test_merging_twice_changes_nothing(tuned, gc):
    d, _ = tuned
    args = ["gcore-tune", "--merge", d / "s1.db", d / "s2.db", "--db", "m.db"]
    assert gc(*args).rc == 0
    before = dump(gc.dir / "m.db")
    r = gc(*args)
    assert r.rc == 0 and "0 new measurements" in r.out and "0 changed" in r.out, r
    assert dump(gc.dir / "m.db") == before
    # and a merged database merged into another: the same rows again
    r = gc("gcore-tune", "--merge", "m.db", d / "s1.db", "--db", "m2.db")
    assert r.rc == 0, r
    assert rows(gc.dir / "m2.db") == rows(gc.dir / "m.db")
    assert winners(gc.dir / "m2.db") == winners(gc.dir / "m.db")


def test_rows_stay_keyed_by_device_driver_and_compiler(tuned, gc):
    """Another machine (here: a copy whose device reports another driver,
    and one whose compiler is another version) keeps its own rows and its
    own winners; duplicates of one machine are dropped."""
    d, _ = tuned
    shutil.copy(d / "whole.db", gc.dir / "other.db")
    with sqlite3.connect(gc.dir / "other.db") as c:
        c.execute("UPDATE devices SET driver = driver || ' (other machine)'")
    shutil.copy(d / "whole.db", gc.dir / "cc.db")
    with sqlite3.connect(gc.dir / "cc.db") as c:
        c.execute("UPDATE compilers SET version = 'cc 99'")
        c.execute("UPDATE variants SET vid = vid || '-cc99'")
    r = gc("gcore-tune", "--merge", d / "whole.db", "other.db", d / "whole.db", "cc.db", "--db", "m.db")
    assert r.rc == 0, r
    n = len(rows(d / "whole.db"))
    got = rows(gc.dir / "m.db")
    assert len(got) == 3 * n, r
    assert len({dev for dev, _, _, _, _ in got}) == 2
    assert len({comp for _, comp, _, _, _ in got}) == 2
    with sqlite3.connect(gc.dir / "m.db") as c:
        assert c.execute("SELECT count(*) FROM devices").fetchone()[0] == 2
        assert c.execute("SELECT count(*) FROM compilers").fetchone()[0] == 2
        # one winner per device and problem: both compilers' variants compete
        assert c.execute("SELECT count(*) FROM winners").fetchone()[0] == 8
    assert f"{n} measurements, 0 new here ({n} already here)" in r.out, r


def test_winners_are_re_picked_over_the_union(tuned, gc):
    """A faster verified variant from another database takes the winner's
    place; one slower than the winner does not."""
    d, _ = tuned
    shutil.copy(d / "whole.db", gc.dir / "b.db")
    key = "rmsnorm f32:f32:f32 m=4 n=256"
    with sqlite3.connect(gc.dir / "b.db") as c:
        pid, dev, vid, us = c.execute(
            "SELECT p.id, w.device_id, v.id, m.median_us FROM winners w JOIN problems p ON "
            "p.id = w.problem_id JOIN measurements m ON m.id = w.measurement_id JOIN variants v "
            "ON v.id = m.variant_id WHERE p.key = ?", (key,)).fetchone()
        for tag, factor in (("fast", 0.5), ("slow", 2.0)):
            c.execute("INSERT INTO variants(vid, template, template_hash, params, dtypes, target, "
                      "compiler_id) SELECT vid || ?, template, template_hash, params || ?, dtypes, "
                      "target, compiler_id FROM variants WHERE id = ?", (tag, ",X=" + tag, vid))
            new = c.execute("SELECT id FROM variants WHERE vid LIKE ?", ("%" + tag,)).fetchone()[0]
            c.execute("INSERT INTO measurements(device_id, problem_id, variant_id, status, median_us, "
                      "min_us, max_us, spread, iters, tflops, gbps, max_err) VALUES(?, ?, ?, 'ok', ?, "
                      "?, ?, 0.01, 5, 0, 0, 0)", (dev, pid, new, us * factor, us * factor, us * factor))
    r = gc("gcore-tune", "--merge", d / "whole.db", "b.db", "--db", "m.db")
    assert r.rc == 0, r
    assert "4 winners re-picked over the union, 1 changed" in r.out, r
    w = winners(gc.dir / "m.db")
    assert [v for (dev, k, t), (v, _) in w.items() if k == key][0].endswith("fast")
    assert rows(gc.dir / "m.db") == sorted(rows(gc.dir / "b.db"))


def checks(db):
    """[(problem key, vid, model, default µs, winner µs, kept, created, rows)]
    of every step check, by time then id."""
    with sqlite3.connect(db) as c:
        return c.execute("SELECT p.key, v.vid, s.model, s.default_us, s.winner_us, s.kept, s.created, s.rows "
                         "FROM step_checks s JOIN measurements m ON m.id = s.measurement_id JOIN "
                         "problems p ON p.id = m.problem_id JOIN variants v ON v.id = m.variant_id "
                         "ORDER BY s.created, s.id").fetchall()


def test_step_checks_travel_with_their_measurements(tuned, gc):
    """gcore-tune --model's verdicts on winners (step_checks) are copied
    with the measurement they name, each once however often it is merged;
    the verdict is the latest recorded, whatever order the files are merged
    in: the report of the result shows it."""
    d, _ = tuned
    key = "rmsnorm f32:f32:f32 m=4 n=256"
    for name, at, kept, rows in (("new.db", "2026-12-02 10:00:00", 0, 8), ("old.db", "2026-12-01 10:00:00", 1, None)):
        shutil.copy(d / "whole.db", gc.dir / name)
        with sqlite3.connect(gc.dir / name) as c:
            c.execute("DELETE FROM measurements WHERE id NOT IN (SELECT measurement_id FROM winners UNION "
                      "SELECT runner_up_id FROM winners WHERE runner_up_id IS NOT NULL) AND id % 2 = ?", (kept,))  # the files' measurement ids differ
            mid, target = c.execute("SELECT w.measurement_id, w.target FROM winners w JOIN problems p ON "
                                    "p.id = w.problem_id WHERE p.key = ?", (key,)).fetchone()
            c.execute("INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, "
                      "created, rows) VALUES (?, ?, 'm', 10.0, ?, ?, ?, ?)", (mid, target, 11.0 - kept, kept, at, rows))
    r = gc("gcore-tune", "--merge", "new.db", "old.db", "new.db", "--db", "m.db", "--report", "m.html")
    assert r.rc == 0, r
    assert r.out.count("1 step checks") == 2 and "0 step checks" in r.out, r.out
    got = checks(gc.dir / "m.db")
    assert got == checks(gc.dir / "old.db") + checks(gc.dir / "new.db") and len(got) == 2, got
    assert all(k == key for k, *_ in got)
    before = dump(gc.dir / "m.db")
    assert gc("gcore-tune", "--merge", "old.db", "new.db", "--db", "m.db").rc == 0
    assert dump(gc.dir / "m.db") == before
    page = (gc.dir / "m.html").read_text()
    assert "refused: 11.0 µs a step, +10.0% against the default's 10.0 (the step of a batch of 8)" in page, page
    assert "kept: 10.0 µs" not in page


def test_bad_sources_are_refused(tuned, gc):
    d, _ = tuned
    (gc.dir / "junk.db").write_bytes(b"not a database at all" * 100)
    r = gc("gcore-tune", "--merge", "junk.db", "--db", "m.db")
    assert_clean_error(r, "gcore-tune", "junk.db")
    r = gc("gcore-tune", "--merge", "missing.db", "--db", "m.db")
    assert_clean_error(r, "gcore-tune", "'missing.db': no such tuning database")
    shutil.copy(d / "s1.db", gc.dir / "new.db")
    with sqlite3.connect(gc.dir / "new.db") as c:
        c.execute("PRAGMA user_version = 99")
    r = gc("gcore-tune", "--merge", "new.db", "--db", "m.db")
    assert_clean_error(r, "gcore-tune", "schema version 99 is newer than this gcore knows")
    assert "migrate" not in r.err  # a newer file cannot be migrated back
    (gc.dir / "empty.db").write_bytes(b"")
    r = gc("gcore-tune", "--merge", "empty.db", "--db", "m.db")
    assert_clean_error(r, "gcore-tune", "empty.db: an empty file, not a tuning database")
    shutil.copy(d / "s1.db", gc.dir / "self.db")
    r = gc("gcore-tune", "--merge", "self.db", "--db", "self.db")
    assert_clean_error(r, "gcore-tune", "is the database merged into")
    # all or nothing: a bad source after a good one leaves no half merge
    r = gc("gcore-tune", "--merge", d / "s1.db", "junk.db", "--db", "m.db")
    assert r.rc != 0
    assert rows(gc.dir / "m.db") == []
    r = gc("gcore-tune", "--merge")
    assert_clean_error(r, "gcore-tune", "name the databases")
    r = gc("gcore-tune", "--merge", "a.db", "--op", "gemm", "--m", "1", "--n", "8", "--k", "8")
    assert_clean_error(r, "gcore-tune", "--merge takes databases")


@pytest.mark.parametrize("bad", ["0/2", "3/2", "1/0", "x/2", "1", "1/2/3", "-1/2"])
def test_bad_shard_is_refused(gc, bad):
    r = gc("gcore-tune", "--op", "rmsnorm", "--m", "1", "--n", "64", "--shard", bad)
    assert_clean_error(r, "gcore-tune", "--shard")
    assert not os.path.exists(gc.dir / "default-tune.db")
