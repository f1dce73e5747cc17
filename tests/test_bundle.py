"""Bundles: the round trip tune → gen → run, shape buckets, targets,
provenance, and the tune.db schema migrations."""
import os
import sqlite3

import pytest

from conftest import ROOT, assert_clean_error

GEMM = ["--op", "gemm", "--n", "48", "--k", "40"]


def entries(path):
    with sqlite3.connect(path) as c:
        return c.execute("SELECT target, m_lo, m_hi, template, is_default, source FROM dispatch "
                         "ORDER BY target, m_lo, m_hi").fetchall()


def test_round_trip_with_buckets(gc):
    r = gc("gcore-tune", *GEMM, "--m", "1,16", "--db", "t.db", "--budget", "3", "--no-progress")
    assert r.rc == 0, r
    r = gc("gcore-gen", "--db", "t.db", *GEMM, "--m", "1,16", "-o", "b.gcb")
    assert r.rc == 0 and "2 tuned, 0 defaults" in r.out, r
    rows = entries(gc.dir / "b.gcb")
    spans = [(lo, hi) for _, lo, hi, _, _, _ in rows]
    assert (1, 1) in spans and (16, 16) in spans and (1, 2 ** 31 - 1) in spans
    tuned = [row for row in rows if row[1] == row[2]]
    assert all(not row[4] and row[5].startswith("tuned: t.db measurement") for row in tuned)
    for m, tag in ((1, "[tuned]"), (16, "[tuned]"), (7, ""), (200, "[default]")):
        r = gc("gcore-run", "-b", "b.gcb", *GEMM, "--m", m)
        assert r.rc == 0 and "verified" in r.out and tag in r.out, r


def test_defaults_without_db_are_marked(gc):
    r = gc("gcore-gen", "--op", "rmsnorm", "--m", "1,8", "--n", "64", "-o", "b.gcb")
    assert r.rc == 0 and "0 tuned, 2 defaults" in r.out, r
    assert all(row[4] == 1 and row[5].startswith("default") for row in entries(gc.dir / "b.gcb"))
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        meta = dict(c.execute("SELECT key, value FROM meta"))
    assert meta["format"] == "gcore-bundle" and meta["tool"].startswith("gcore-gen")
    assert "compiler:cpu:x86-64-v4" in meta or "compiler:cpu:x86-64-v3" in meta


def host_has_avx512():
    with open("/proc/cpuinfo") as f:
        return " avx512f" in f.read()


def test_multi_target_bundle_picks_the_best_runnable(gc):
    """Both x86-64 levels in one bundle: the run takes the highest this host
    runs (v4 where it has AVX-512, else v3)."""
    r = gc("gcore-gen", "--target", "cpu:x86-64-v3,cpu:x86-64-v4", *GEMM, "--m", "4", "-o", "b.gcb")
    assert r.rc == 0, r
    targets = {row[0] for row in entries(gc.dir / "b.gcb")}
    assert targets == {"cpu:x86-64-v3", "cpu:x86-64-v4"}
    r = gc("gcore-run", "-b", "b.gcb", *GEMM, "--m", "4")
    assert r.rc == 0, r
    host = "cpu:x86-64-v4" if host_has_avx512() else "cpu:x86-64-v3"
    assert f"on {host}" in r.out, r


def test_older_level_bundle_runs_here(gc):
    r = gc("gcore-gen", "--target", "cpu:x86-64-v3", *GEMM, "--m", "4", "-o", "b.gcb")
    assert r.rc == 0, r
    r = gc("gcore-run", "-b", "b.gcb", *GEMM, "--m", "4")
    assert r.rc == 0 and "on cpu:x86-64-v3" in r.out, r


def test_migration_from_version_1(gc):
    db = gc.dir / "old.db"
    sql = open(os.path.join(ROOT, "db", "migrations", "001_init.sql")).read()
    with sqlite3.connect(db) as c:
        c.executescript(sql)
        c.execute("PRAGMA user_version = 1")
        c.execute("PRAGMA application_id = %d" % 0x67636462)
        c.execute("INSERT INTO compilers(driver, version, flags) VALUES ('cc', 'old', '-O2')")
    r = gc("gcore-tune", "--op", "rmsnorm", "--m", "1", "--n", "32", "--db", db, "--budget", "1",
           "--no-progress")
    assert r.rc == 0, r
    with sqlite3.connect(db) as c:
        latest = len([f for f in os.listdir(os.path.join(ROOT, "db", "migrations")) if f.endswith(".sql")])
        assert c.execute("PRAGMA user_version").fetchone()[0] == latest
        names = {n for (n,) in c.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "measurements_by_problem" in names
        assert c.execute("SELECT count(*) FROM compilers WHERE version='old'").fetchone()[0] == 1


def test_newer_schema_is_refused(gc):
    db = gc.dir / "new.db"
    assert gc("gcore-tune", "--op", "rmsnorm", "--m", "1", "--n", "32", "--db", db, "--budget", "1",
              "--no-progress").rc == 0
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA user_version = 99")
    r = gc("gcore-tune", "--op", "rmsnorm", "--m", "1", "--n", "32", "--db", db)
    assert_clean_error(r, "gcore-tune", "schema version 99 is newer")


@pytest.mark.parametrize("version", [1, 2, 3])
def test_older_bundle_formats_still_read(gc, version):
    """Bundles of format 1 (before dispatch.tmaps), 2 (before dispatch.pdl)
    and 3 (before dispatch.prefetch) load: their kernels take no tensor
    maps, never overlap a predecessor and take no L2 window."""
    r = gc("gcore-gen", *GEMM, "--m", "4", "-o", "b.gcb")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        assert c.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()[0] == "4"
        assert {t for (t,) in c.execute("SELECT tmaps FROM dispatch")} == {""}
        c.execute("ALTER TABLE dispatch DROP COLUMN prefetch")
        if version <= 2:
            c.execute("ALTER TABLE dispatch DROP COLUMN pdl")
        if version == 1:
            c.execute("ALTER TABLE dispatch DROP COLUMN tmaps")
        c.execute("UPDATE meta SET value=? WHERE key='format_version'", (str(version),))
    r = gc("gcore-run", "-b", "b.gcb", *GEMM, "--m", "4")
    assert r.rc == 0 and "verified" in r.out, r


def test_newer_bundle_format_is_refused(gc):
    r = gc("gcore-gen", *GEMM, "--m", "4", "-o", "b.gcb")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "b.gcb") as c:
        c.execute("UPDATE meta SET value='5' WHERE key='format_version'")
    r = gc("gcore-run", "-b", "b.gcb", *GEMM, "--m", "4")
    assert_clean_error(r, "gcore-run", "bundle format 5, this gcore reads 4; rebuild it with gcore-gen")
