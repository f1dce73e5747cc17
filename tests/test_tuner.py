"""gcore-tune: records every candidate, resumes, keeps wrong / crashing /
hanging variants from winning, honours budgets, shows progress."""
import os
import time
import select
import re
import pty
import shutil
import sqlite3

from conftest import BIN, ROOT

PROB = ["--op", "gemm", "--m", "8", "--n", "16", "--k", "32", "--dtype", "f32"]


def planted_templates(tmp):
    d = tmp / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    shutil.copy(os.path.join(ROOT, "tests", "data", "wrong_gemm.c"), d / "cpu" / "wrong_gemm.c")
    return d


def statuses(db, template):
    with sqlite3.connect(db) as c:
        return dict(c.execute(
            "SELECT v.params, m.status FROM measurements m JOIN variants v ON v.id = m.variant_id "
            "WHERE v.template = ?", (template,)).fetchall())


def winner_template(db):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT v.template FROM winners w JOIN measurements m ON "
                         "m.id = w.measurement_id JOIN variants v ON v.id = m.variant_id").fetchall()


def test_wrong_crashing_hanging_variants_never_win(gc):
    tpl = planted_templates(gc.dir)
    # (under ASan, let the planted NULL dereference kill the worker as a plain SIGSEGV)
    r = gc("gcore-tune", "--templates", tpl, "--template", "wrong_gemm", *PROB, "--db", "t.db",
           "--timeout", "3", "--no-progress", env={"ASAN_OPTIONS": "handle_segv=0"})
    assert r.rc == 0, r
    assert "no verified variant" in r.out
    assert statuses(gc.dir / "t.db", "wrong_gemm") == {
        "BUG=1": "verify-failed", "BUG=2": "launch-failed", "BUG=3": "timed-out"}
    r = gc("gcore-tune", "--templates", tpl, "--template", "gemm_cpu", *PROB, "--db", "t.db",
           "--budget", "3", "--no-progress")
    assert r.rc == 0, r
    assert winner_template(gc.dir / "t.db") == [("gemm_cpu",)]
    # the bundle uses the verified winner even though wrong_gemm is the default
    r = gc("gcore-gen", "--templates", tpl, "--db", "t.db", *PROB, "-o", "b.gcb")
    assert r.rc == 0 and "1 tuned" in r.out, r
    r = gc("gcore-run", "-b", "b.gcb", *PROB)
    assert r.rc == 0 and "gemm_cpu" in r.out and "[tuned]" in r.out, r


def test_records_every_candidate_and_resumes(gc):
    args = ["gcore-tune", "--template", "gemv_cpu", *PROB[:2], "--m", "1", *PROB[4:], "--db",
            "t.db", "--budget", "4", "--no-progress"]
    r = gc(*args)
    assert r.rc == 0, r
    assert "4 measured now, 0 reused" in r.out, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        rows = c.execute("SELECT status, count(*) FROM measurements GROUP BY status").fetchall()
        n_ok = dict(rows).get("ok", 0)
        assert n_ok == 4, rows
        # timing statistics are complete for verified rows
        bad = c.execute("SELECT count(*) FROM measurements WHERE status='ok' AND (median_us IS NULL "
                        "OR min_us > median_us OR max_us < median_us OR iters < 5 OR max_err > 1)"
                        ).fetchone()[0]
        assert bad == 0
    r = gc(*args)  # the same budget again: everything reused, nothing measured
    assert r.rc == 0 and "0 measured now, 4 reused" in r.out, r
    r = gc(*args[:-2], "8", "--no-progress")  # a larger budget: the next 4 of the space
    assert r.rc == 0, r
    assert "4 measured now, 4 reused" in r.out, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        assert dict(c.execute("SELECT status, count(*) FROM measurements GROUP BY status")
                    .fetchall()).get("ok") == 8


def test_full_resume_measures_nothing(gc):
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    shutil.copy(os.path.join(ROOT, "tests", "data", "tiny_gemm.c"), d / "cpu" / "tiny_gemm.c")
    args = ["gcore-tune", "--templates", d, "--template", "tiny_gemm", *PROB, "--db", "t.db",
            "--min-time", "0.02", "--no-progress"]
    r = gc(*args)
    assert r.rc == 0 and "4 measured now, 0 reused" in r.out, r
    r2 = gc(*args)
    assert r2.rc == 0, r2
    assert "0 measured now, 4 reused" in r2.out, r2
    assert "winner tiny_gemm" in r2.out


def test_time_budget_stops_early(gc):
    r = gc("gcore-tune", "--template", "gemm_cpu", *PROB, "--db", "t.db", "--budget", "2s",
           "--min-time", "0.05", "--no-progress")
    assert r.rc == 0, r
    assert "time budget of 2 s reached" in r.out, r


def run_in_pty(args, env, cwd, timeout=300):
    """Run args with stdout and stderr on a pseudo-terminal (as a person at
    a terminal sees it); returns (exit code, everything written)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(cwd)
        os.execve(args[0], args, env)
    out, deadline = b"", time.time() + timeout
    while time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 1)
        if not r:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


PROGRESS = re.compile(r"\[(\d+)/(\d+)\] (defaults of )?(.+?) \| (-?\d+)/(-?\d+) \| best .*? \| ETA (-?\d+):(-?\d+)")


def test_progress_line_on_a_terminal(gc, cache_dir):
    """On a terminal the progress line is on by default: the problem among
    the run's, candidates done of those that will run (never fewer than
    done, never negative), an ETA that is never negative, and the last
    count of each problem equal to what its summary says was measured."""
    env = dict(os.environ, GCORE_CACHE=cache_dir)
    args = [os.path.join(BIN, "gcore-tune"), "--op", "rmsnorm", "--m", "1,3", "--n", "256",
            "--db", str(gc.dir / "t.db"), "--budget", "5"]
    rc, out = run_in_pty(args, env, gc.dir)
    assert rc == 0, out
    lines = PROGRESS.findall(out.replace("\r", "\n"))
    assert lines, out
    last = {}
    for i, n, _, key, done, total, mins, secs in lines:
        assert int(n) == 2 and 1 <= int(i) <= 2, lines
        assert 0 <= int(done) <= int(total) <= 5, lines
        assert int(mins) >= 0 and 0 <= int(secs) < 60, lines
        last[key] = (int(done), int(total))
    measured = dict(re.findall(r"(rmsnorm [^:]+:[^:]+:\S+ m=\d+ n=256): (\d+) measured now", out))
    assert len(measured) == 2, out
    for key, (done, total) in last.items():
        assert done == total == int(measured[key]), (key, done, total, out)
    # a rerun measures nothing: no candidate lines count up
    rc, out = run_in_pty(args, env, gc.dir)
    assert rc == 0 and out.count("0 measured now") == 2, out


def test_time_budget_is_shared(gc):
    """--budget Ns over several problems: each gets its templates' defaults
    measured before any gets more (the old behaviour spent it all on the
    first problem and left the others without a winner)."""
    r = gc("gcore-tune", "--op", "rmsnorm", "--m", "1,2,3,5,7", "--n", "128", "--db", "t.db",
           "--budget", "2s", "--no-progress")
    assert r.rc == 0, r
    assert r.out.count("winner rmsnorm_cpu") == 5 and "no winner" not in r.out, r


def test_compile_cache_is_content_addressed(gc, tmp_path):
    cache = tmp_path / "own_cache"
    args = ["gcore-gen", "--op", "rmsnorm", "--m", "4", "--n", "64", "-o", "b.gcb", "--cache", cache]
    assert gc(*args).rc == 0
    objs = sorted((cache / "obj").glob("*.so"))
    assert objs and sorted(x.name for x in cache.iterdir()) == ["lock", "obj", "pch", "src"]
    before = {o: o.stat().st_mtime_ns for o in objs}
    assert gc(*args).rc == 0
    assert {o: o.stat().st_mtime_ns for o in sorted((cache / "obj").glob("*.so"))} == before


def test_devices_share_one_database(gc):
    """--devices: one worker per device (here the CPU twice), the problems
    dealt out between them, every result in the one database."""
    r = gc("gcore-tune", "--op", "rmsnorm", "--m", "1,2,3,4", "--n", "256", "--db", "t.db",
           "--budget", "2", "--min-time", "0.02", "--devices", "0,0")
    assert r.rc == 0, r
    assert r.out.count("device: ") == 2, r
    with sqlite3.connect(gc.dir / "t.db") as c:
        assert c.execute("SELECT count(DISTINCT problem_id) FROM measurements WHERE status='ok'").fetchone()[0] == 4
        assert c.execute("SELECT count(*) FROM winners").fetchone()[0] == 4


def measured_in_order(db):
    """[(template, params, status)] of the candidates that ran, in order."""
    with sqlite3.connect(db) as c:
        return c.execute("SELECT v.template, v.params, m.status FROM measurements m JOIN variants v "
                         "ON v.id = m.variant_id WHERE m.status != 'rejected' ORDER BY m.id").fetchall()


def test_local_search_walks_neighbours_of_the_best(gc):
    """--strategy local: the defaults first, then only untried candidates one
    parameter away from a point already measured (the fastest first), never
    one twice; --strategy random samples the shuffled space instead."""
    prob = ["--op", "gemm", "--m", "1", "--n", "64", "--k", "64", "--dtype", "f32"]
    r = gc("gcore-tune", *prob, "--db", "l.db", "--budget", "12", "--strategy", "local", "--no-progress")
    assert r.rc == 0, r
    runs = measured_in_order(gc.dir / "l.db")
    assert len(runs) == 12 and len(set(runs)) == 12, runs
    defaults = {}
    for tpl, params, _ in runs[:2]:  # gemv_cpu and gemm_cpu serve m = 1
        defaults[tpl] = dict(kv.split("=") for kv in params.split(","))
    assert set(defaults) == {"gemv_cpu", "gemm_cpu"}, runs
    seen = [dict(kv.split("=") for kv in p.split(",")) for _, p, _ in runs[:2]]
    with sqlite3.connect(gc.dir / "l.db") as c:  # moves that broke a constraint (then repaired)
        rejected = [dict(kv.split("=") for kv in p.split(",")) for p, in
                    c.execute("SELECT v.params FROM measurements m JOIN variants v ON v.id = m.variant_id "
                              "WHERE m.status = 'rejected'")]
    apart = lambda p, q: len(p) == len(q) and sum(p[k] != q[k] for k in p)  # noqa: E731
    for tpl, params, _ in runs[2:]:
        p = dict(kv.split("=") for kv in params.split(","))
        assert any(apart(p, q) == 1 for q in seen) or \
            any(apart(p, q) == 2 and any(apart(x, q) == 1 and apart(x, p) == 1 for x in rejected) for q in seen), \
            f"{tpl} {params} is neither a neighbour of a point measured before it nor a rejected one's repair"
        seen.append(p)
    r = gc("gcore-tune", *prob, "--db", "r.db", "--budget", "12", "--strategy", "random", "--no-progress")
    assert r.rc == 0, r
    assert len(measured_in_order(gc.dir / "r.db")) == 12
    r = gc("gcore-tune", *prob, "--db", "x.db", "--strategy", "sideways")
    assert r.rc != 0 and "--strategy" in r.err


def test_a_move_that_breaks_a_constraint_is_repaired(gc):
    """A one-parameter move past a constraint (add_cpu with CHUNK * UNROLL
    <= 16384 added: CHUNK 8192 -> 16384 at UNROLL=2) is recorded as
    rejected, and the local search measures its repair, the nearest other
    parameter's value that makes it valid (UNROLL=1), right after it: the
    coupled move no point of the first round would otherwise reach. (The
    only template of the sweep is template 0, whose default once had the
    empty slot's key in the table of points tried, so the search never
    started from it and walked shuffled points instead.)"""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    add = d / "cpu" / "add.c"
    text = add.read_text()
    old = " * @constraint THREADS <= NCPU -- no more workers than cores\n"
    assert old in text
    add.write_text(text.replace(old, old + " * @constraint CHUNK * UNROLL <= 16384 -- (the test's coupling)\n"))
    r = gc("gcore-tune", "--templates", d, "--template", "add_cpu", "--op", "add", "--m", "4", "--n", "4096",
           "--dtype", "f32", "--db", "a.db", "--budget", "3", "--strategy", "local", "--min-time", "0.02",
           "--no-progress")
    assert r.rc == 0, r
    runs = [dict(kv.split("=") for kv in p.split(",")) for _, p, _ in measured_in_order(gc.dir / "a.db")]
    assert len(runs) == 3 and (runs[0]["CHUNK"], runs[0]["UNROLL"]) == ("8192", "2"), runs
    assert (runs[1]["CHUNK"], runs[1]["UNROLL"]) == ("4096", "2"), runs  # the plain move down
    assert (runs[2]["CHUNK"], runs[2]["UNROLL"]) == ("16384", "1"), runs  # up, repaired
    with sqlite3.connect(gc.dir / "a.db") as c:
        rej = [p for p, in c.execute("SELECT v.params FROM measurements m JOIN variants v ON v.id = m.variant_id "
                                     "WHERE m.status = 'rejected'")]
    assert any("CHUNK=16384" in p and "UNROLL=2" in p for p in rej), rej


def test_clearly_slower_candidates_stop_timing_early(gc):
    """A verified candidate whose first launches are over 1.25x the best so far
    stops after min_iters (5) launches; the winner is timed in full. (REP=8
    is not among the three finalists that are run again in full.)"""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    shutil.copy(os.path.join(ROOT, "tests", "data", "slow_gemm.c"), d / "cpu" / "slow_gemm.c")
    r = gc("gcore-tune", "--templates", d, "--template", "slow_gemm", *PROB, "--db", "a.db",
           "--min-time", "0.05", "--no-progress")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "a.db") as c:
        rows = dict(c.execute("SELECT v.params, m.iters FROM measurements m JOIN variants v "
                              "ON v.id = m.variant_id WHERE m.status = 'ok'").fetchall())
        med = dict(c.execute("SELECT v.params, m.median_us FROM measurements m JOIN variants v "
                             "ON v.id = m.variant_id WHERE m.status = 'ok'").fetchall())
    assert rows["REP=8"] == 5 and med["REP=8"] > 1.25 * med["REP=1"], (rows, med)
    assert rows["REP=1"] > 5, rows


def test_local_search_stays_within_each_problem(gc):
    """Several problems in one run: the neighbours walked for a problem come
    from its own templates, never from the points of the problem before."""
    wl = gc.dir / "w.txt"
    wl.write_text("rmsnorm f32 m=4 n=64\ngemm f32 m=1 n=64 k=64\n")
    r = gc("gcore-tune", "--workload", wl, "--db", "w.db", "--budget", "6", "--min-time", "0.02",
           "--no-progress")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "w.db") as c:
        rows = c.execute("SELECT p.op, v.template FROM measurements m JOIN variants v ON v.id = m.variant_id "
                         "JOIN problems p ON p.id = m.problem_id").fetchall()
    assert {op for op, _ in rows} == {"rmsnorm", "gemm"}, rows
    assert all(t.startswith("rmsnorm") == (op == "rmsnorm") for op, t in rows), rows


def test_points_outside_applies_are_never_measured(gc):
    """RMAX=4 does not apply to 8 rows: recorded as a constraint rejection,
    never launched (it would leave C unwritten), and not counted in a budget."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    shutil.copy(os.path.join(ROOT, "tests", "data", "capped_gemm.c"), d / "cpu" / "capped_gemm.c")
    r = gc("gcore-tune", "--templates", d, "--template", "capped_gemm", *PROB, "--db", "c.db",
           "--min-time", "0.02", "--no-progress")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "c.db") as c:
        rows = dict(c.execute("SELECT v.params, m.status || ' ' || coalesce(m.detail, '') FROM measurements m "
                              "JOIN variants v ON v.id = m.variant_id").fetchall())
    assert rows["RMAX=64,UNR=1"].startswith("ok") and rows["RMAX=64,UNR=2"].startswith("ok"), rows
    for p in ("RMAX=4,UNR=1", "RMAX=4,UNR=2"):
        assert rows[p].startswith("rejected constraint failed: does not apply"), rows
    assert "2 measured now" in r.out, r


def test_an_edited_template_is_tuned_again(gc):
    """Measurements of an older version of a template neither use up a budget
    nor win: after the template changes, a rerun with the same budget
    measures again, and the winner is of the new version even when an old
    measurement was faster (gcore-gen would call that winner stale)."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    t = d / "cpu" / "slow_gemm.c"
    shutil.copy(os.path.join(ROOT, "tests", "data", "slow_gemm.c"), t)
    args = ["gcore-tune", "--templates", d, "--template", "slow_gemm", *PROB, "--db", "e.db",
            "--budget", "1", "--min-time", "0.02", "--no-progress"]
    r = gc(*args)
    assert r.rc == 0 and "1 measured now, 0 reused" in r.out, r
    r = gc(*args)
    assert r.rc == 0 and "0 measured now, 1 reused" in r.out, r
    # the new version's default is the slow one
    t.write_text(t.read_text().replace("REP 1 2 3 8 default 1", "REP 1 2 3 8 default 8"))
    r = gc(*args)
    assert r.rc == 0 and "1 measured now, 0 reused" in r.out and "REP=8" in r.out, r
    r = gc("gcore-gen", "--templates", d, "--db", "e.db", *PROB, "-o", "e.gcb")
    assert r.rc == 0 and "1 tuned" in r.out and "stale" not in r.out + r.err, r


# A correct f32 GEMM (a task per row of C), and on task 0 something that
# depends on whether MARK existed when this load of the code object first
# ran: a file is the only state that outlives a load (the worker loads each
# candidate afresh for every run).
FINALIST = r"""/* for tests/test_tuner.py::test_finalists_are_run_again
 *
 * @template {name}
 * @op       gemm
 * @backend  cpu
 * @dtypes   f32
 * @kernel   {name}
 * @param    X 1 default 1 -- unused: a template has at least one parameter
 * @grid     M
 * @block    1
 * @priority {priority}
 */
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

static int again = -1; /* 1: MARK was there when this load first ran */

static void {name}_spin(double us) {{
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3 < us);
}}

GC_EXPORT void {name}(void **args, int64_t task) {{
  const float *A = GC_ARG(args, 0, const float *), *B = GC_ARG(args, 1, const float *);
  float *C = GC_ARG(args, 2, float *);
  int64_t N = GC_ARG(args, 4, int64_t), K = GC_ARG(args, 5, int64_t);
  for (int64_t j = 0; j < N; j++) {{
    float s = 0;
    for (int64_t k = 0; k < K; k++) s += A[task * K + k] * B[j * K + k];
    C[task * N + j] = s;
  }}
  if (task) return;
  if (again < 0) {{
    again = access("{mark}", F_OK) == 0;
    if (!again) close(open("{mark}", O_CREAT | O_WRONLY, 0600));
  }}
  {act}
}}
"""


def test_finalists_are_run_again(gc):
    """Before the winner is picked, the default and the two fastest others
    run again, verified again, one after another. busy (the default) ran
    slowly in the sweep, as a kernel does on a GPU another process is
    using, and fast since; steady is always half as slow as that; wrong is
    the fastest but wrong from its second load on. Without the second run
    steady or wrong would win; with it busy does, and wrong is recorded as
    failed, saying when."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    for f in ("gemm.c", "gemv.c", "gemm_q.c", "gemv_q.c"):  # the built-ins that would win
        (d / "cpu" / f).unlink()
    acts = {"busy": (9, "if (!again) busy_spin(400);"), "steady": (0, "steady_spin(200);"),
            "wrong": (0, "if (again) C[0] += 1.0f;")}
    for name, (prio, act) in acts.items():
        (d / "cpu" / f"{name}.c").write_text(FINALIST.format(name=name, priority=prio, act=act,
                                                             mark=gc.dir / f"{name}.mark"))
    r = gc("gcore-tune", "--templates", d, *PROB, "--db", "f.db", "--min-time", "0.05",
           "--no-progress")
    assert r.rc == 0, r
    with sqlite3.connect(gc.dir / "f.db") as c:
        rows = {t: (st, det or "", us) for t, st, det, us in c.execute(
            "SELECT v.template, m.status, m.detail, m.median_us FROM measurements m "
            "JOIN variants v ON v.id = m.variant_id")}
    assert rows["busy"][0] == "ok" and rows["steady"][0] == "ok", rows
    assert rows["busy"][2] < rows["steady"][2] / 2, rows  # its time from the second run
    assert rows["wrong"][0] == "verify-failed", rows
    assert rows["wrong"][1].startswith("when run again among the finalists: C element 0"), rows
    assert winner_template(gc.dir / "f.db") == [("busy",)], (rows, r)
    assert re.search(r"finalist busy X=1: \d+\.\d us in the sweep, \d+\.\d us when run again "
                     r"\(was the device busy\?\)", r.out), r
    assert "finalist wrong X=1: verify-failed when run again among the finalists" in r.out, r
    r = gc("gcore-gen", "--templates", d, "--db", "f.db", *PROB, "-o", "f.gcb")
    assert r.rc == 0 and "1 tuned" in r.out, r
