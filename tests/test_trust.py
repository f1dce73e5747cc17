"""Trust under hostile conditions (issue 15): many tuners on one database,
databases in read-only places, outputs that are not regular files, compiles
that never end, and error messages that echo bytes read from outside."""
import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import BIN, ROOT, assert_clean_error  # noqa: E402
import tinymodel as TM  # noqa: E402

CONSTRAINT = "rejected' AND detail LIKE 'constraint failed%"


def spawn(tool, *args, cwd, env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.Popen([os.path.join(BIN, tool), *map(str, args)], cwd=cwd, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def measured_now(out):
    """{problem key: candidates this process measured} from its summary lines."""
    got = {}
    for line in out.splitlines():
        if " measured now, " in line:
            key, rest = line.split(": ", 1)
            got[key] = int(rest.split(" measured now")[0])
    return got


# ---- one database, many tuners ---------------------------------------------

TUNERS = [  # (op args, budget): four on one problem, others on their own or shared ones
    (["--op", "rmsnorm", "--m", "1", "--n", "64"], 4),
    (["--op", "rmsnorm", "--m", "1", "--n", "64"], 4),
    (["--op", "rmsnorm", "--m", "1", "--n", "64"], 4),
    (["--op", "rmsnorm", "--m", "1", "--n", "64"], 4),
    (["--op", "rmsnorm", "--m", "2,3", "--n", "64"], 3),
    (["--op", "add", "--m", "1", "--n", "256"], 3),
    (["--op", "add", "--m", "1", "--n", "256"], 3),
    (["--op", "add", "--m", "4", "--n", "128"], 2),
]


def test_eight_tuners_on_a_new_database(gc):
    """All start at once on a database that does not exist: every one exits
    0, every candidate any of them measured is in the database once, no
    variant is measured twice for one (device, problem), and no claim is
    left behind."""
    env = {"GCORE_CACHE": os.path.join(gc.dir, "cache")}
    # the compile cache warmed once, so that the eight race on the database
    assert gc("gcore-gen", "--op", "rmsnorm", "--m", "1", "--n", "64",
              "-o", "w.gcb", "-q", env=env).rc == 0
    procs = [spawn("gcore-tune", *args, "--db", "t.db", "--budget", budget, "--min-time", "0.01",
                   "--no-progress", cwd=gc.dir, env=env) for args, budget in TUNERS]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and not err.strip(), f"rc={p.returncode}\n{out}\n{err}"
    now = {}
    for out, _ in outs:
        for key, n in measured_now(out).items():
            now[key] = now.get(key, 0) + n
    assert len(now) == 5, now
    with sqlite3.connect(gc.dir / "t.db") as c:
        rows = dict(c.execute(
            "SELECT p.key, count(*) FROM measurements m JOIN problems p ON p.id = m.problem_id "
            f"WHERE NOT (m.status = '{CONSTRAINT}') GROUP BY p.key").fetchall())
        # each candidate measured by exactly one process, and recorded
        assert rows == now, (rows, now)
        # each process keeps to its budget as it sees the problem (the others'
        # claims it meets count toward it)
        budgets = {}
        for args, budget in TUNERS:
            for m in args[3].split(","):
                key = f"{args[1]} f32:f32:f32 m={m} n={args[5]}"
                budgets[key] = budgets.get(key, 0) + budget
        for key, n in rows.items():
            assert 1 <= n <= budgets[key], (key, n)
        assert c.execute("SELECT count(*) FROM winners").fetchone()[0] == 5
        assert c.execute("SELECT count(*) FROM claims").fetchone()[0] == 0
        assert c.execute("PRAGMA user_version").fetchone()[0] == len(
            [f for f in os.listdir(os.path.join(ROOT, "db", "migrations")) if f.endswith(".sql")])
    # every process's summary names the winner (it waited for the others' claims)
    for out, _ in outs:
        assert "no winner" not in out, out


BUILDS = [  # gcore-gen op args: overlapping variants, so that processes meet on them
    ["--op", "rmsnorm", "--m", "1", "--n", "64"], ["--op", "rmsnorm", "--m", "1,2", "--n", "64"],
    ["--op", "add", "--m", "1", "--n", "256"], ["--op", "add", "--m", "1,4", "--n", "256"],
    ["--op", "rmsnorm", "--m", "1", "--n", "64"], ["--op", "add", "--m", "4", "--n", "256"],
    ["--op", "gemm", "--m", "1", "--n", "64", "--k", "64"], ["--op", "gemm", "--m", "1,2", "--n", "64", "--k", "64"],
]


def test_eight_builds_on_one_cold_compile_cache(gc):
    """Eight gcore-gen processes start at once on an empty compile cache
    (the test suite's workers share one, as users' tools do): every one
    exits 0; a variant two bundles hold is the same code object in both,
    whole (the cache's file, an ELF object); no partial file (a compile writes OUT.part and renames it) is left. A
    process that finds every object there takes no lock."""
    cache = gc.dir / "cache"
    env = {"GCORE_CACHE": str(cache)}
    procs = [spawn("gcore-gen", *args, "-o", f"b{i}.gcb", "-q", cwd=gc.dir, env=env) for i, args in enumerate(BUILDS)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0 and not err.strip(), f"rc={p.returncode}\n{out}\n{err}"
    seen = {}
    for i in range(len(BUILDS)):
        with sqlite3.connect(gc.dir / f"b{i}.gcb") as c:
            for vid, blob in c.execute("SELECT vid, blob FROM code_objects"):
                assert blob[:4] == b"\x7fELF", (i, vid)
                assert seen.setdefault(vid, blob) == blob, f"two code objects for {vid}"
    for vid, blob in seen.items():
        assert (cache / "obj" / f"{vid}.so").read_bytes() == blob
    assert len(seen) >= 4 and not [f for d in ("obj", "pch") for f in os.listdir(cache / d)
                                   if ".part" in f or ".claim" in f]
    # all cached now: a ninth build takes no lock (one held elsewhere does not stop it)
    import fcntl
    with open(cache / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        r = subprocess.run([os.path.join(BIN, "gcore-gen"), *BUILDS[1], "-o", "again.gcb", "-q"], cwd=gc.dir,
                           env=dict(os.environ, **env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def proc_start(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def owner():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return socket.gethostname() + "/" + f.read().strip()


def test_claims_of_live_and_ended_processes(gc):
    """A candidate claimed by a live process is left to it (and waited for);
    a claim of a process that has ended is retaken and measured."""
    args = ["gcore-tune", "--op", "rmsnorm", "--m", "1", "--n", "64", "--db", "t.db",
            "--min-time", "0.01", "--no-progress", "--budget"]
    assert gc(*args, "2").rc == 0
    db = gc.dir / "t.db"
    with sqlite3.connect(db) as c:
        (mid, dev, prob, var), = c.execute(
            "SELECT id, device_id, problem_id, variant_id FROM measurements WHERE status='ok' "
            "ORDER BY id DESC LIMIT 1").fetchall()
        c.execute("DELETE FROM winners")
        c.execute("DELETE FROM measurements WHERE id=?", (mid,))
    # a live claimant: this sleep, for three seconds
    sleeper = subprocess.Popen(["sleep", "3"])
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO claims(device_id, problem_id, variant_id, owner, pid, pstart) "
                  "VALUES (?,?,?,?,?,?)", (dev, prob, var, owner(), sleeper.pid,
                                           proc_start(sleeper.pid)))
    t0 = time.time()
    r = gc(*args, "2")
    assert r.rc == 0, r
    assert "0 measured now, 2 reused" in r.out, r
    assert time.time() - t0 > 2.0  # it waited for the claim until its owner ended
    sleeper.wait()
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM measurements WHERE variant_id=?", (var,)).fetchone()[0] == 0
    # now the claim's owner has ended: the candidate is retaken
    r = gc(*args, "2")
    assert r.rc == 0 and "1 measured now, 1 reused" in r.out, r
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT status FROM measurements WHERE variant_id=?", (var,)).fetchall() == [("ok",)]
        assert c.execute("SELECT count(*) FROM claims").fetchone()[0] == 0


def test_gen_reads_a_database_in_a_read_only_directory(gc):
    """gcore-gen only reads the database: a WAL database in a directory it
    may not write (no -shm can be made there) is read all the same."""
    r = gc("gcore-tune", "--op", "rmsnorm", "--m", "1", "--n", "64", "--db", "t.db", "--budget", "1",
           "--min-time", "0.01", "--no-progress")
    assert r.rc == 0, r
    top = tempfile.mkdtemp(prefix="gcore-ro-")
    try:
        os.chmod(top, 0o755)
        ro, cache = os.path.join(top, "ro"), os.path.join(top, "cache")
        os.mkdir(ro)
        os.mkdir(cache)
        os.chmod(cache, 0o777)
        with sqlite3.connect(gc.dir / "t.db") as c:
            assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        with open(gc.dir / "t.db", "rb") as f, open(os.path.join(ro, "t.db"), "wb") as g:
            g.write(f.read())
        os.chmod(os.path.join(ro, "t.db"), 0o444)
        os.chmod(ro, 0o555)
        cmd = [os.path.join(BIN, "gcore-gen"), "--db", os.path.join(ro, "t.db"), "--op", "rmsnorm",
               "--m", "1", "--n", "64", "-o", os.path.join(cache, "b.gcb")]
        if os.geteuid() == 0:  # root writes anywhere: run it as nobody
            cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
        env = dict(os.environ, GCORE_CACHE=cache, HOME=top)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=top, timeout=300)
        assert p.returncode == 0 and "1 tuned" in p.stdout, p
        assert sorted(os.listdir(ro)) == ["t.db"]
        # a -wal with changes not yet checkpointed is not skipped silently
        os.chmod(ro, 0o755)
        with sqlite3.connect(gc.dir / "t.db") as c:
            c.execute("PRAGMA wal_autocheckpoint = 0")
            c.execute("UPDATE measurements SET detail = 'pending' WHERE id = 1")
            c.commit()
            with open(gc.dir / "t.db-wal", "rb") as f, open(os.path.join(ro, "t.db-wal"), "wb") as g:
                g.write(f.read())
        os.chmod(ro, 0o555)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=top, timeout=300)
        lines = p.stderr.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and "t.db-wal holds changes" in lines[0], p
    finally:
        for d, _, files in os.walk(top):
            os.chmod(d, 0o755)
        subprocess.run(["rm", "-rf", top])


# ---- outputs that are not regular files ---------------------------------------

RMS = ["--op", "rmsnorm", "--m", "1", "--n", "64"]


@pytest.fixture
def fifo(gc):
    path = gc.dir / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("target, kind", [("/dev/full", "a character device"),
                                          ("/dev/null", "a character device"),
                                          ("FIFO", "a FIFO")])
def test_gen_output_must_be_a_regular_file(gc, fifo, target, kind):
    target = str(fifo) if target == "FIFO" else target
    before = os.stat(target)
    r = gc("gcore-gen", *RMS, "-o", target, timeout=60)
    assert_clean_error(r, "gcore-gen", target, kind, "not a regular file")
    after = os.stat(target)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode)
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert not [f for f in os.listdir(os.path.dirname(target)) if ".tmp." in f]


def test_gen_output_may_not_be_a_directory(gc):
    (gc.dir / "d").mkdir()
    assert_clean_error(gc("gcore-gen", *RMS, "-o", "d"), "gcore-gen", "a directory, not a regular file")


@pytest.fixture
def bundle(gc):
    assert gc("gcore-gen", *RMS, "-o", "b.gcb", "-q").rc == 0
    return "b.gcb"


def test_run_outputs_must_be_regular(gc, fifo, bundle):
    for target in ("/dev/null", str(fifo)):
        r = gc("gcore-run", "-b", bundle, *RMS, "--dump", target, "--min-time", "0.01", timeout=60)
        assert_clean_error(r, "gcore-run", target, "not a directory")
    # a FIFO planted where a dump file goes is refused, not opened
    (gc.dir / "dump").mkdir()
    os.mkfifo(gc.dir / "dump" / "meta.txt")
    r = gc("gcore-run", "-b", bundle, *RMS, "--dump", "dump", "--min-time", "0.01", timeout=60)
    assert_clean_error(r, "gcore-run", "meta.txt", "a FIFO, not a regular file")


def test_db_and_cache_must_be_a_file_and_a_directory(gc, fifo):
    for tool, out in (("gcore-tune", ["--budget", "1", "--no-progress"]), ("gcore-gen", ["-o", "x.gcb"])):
        for target in ("/dev/null", str(fifo)):
            r = gc(tool, *RMS, "--db", target, *out, timeout=60)
            assert_clean_error(r, tool, target, "not a regular file")
        r = gc(tool, *RMS, "--cache", "/dev/null", *out, timeout=60)
        assert_clean_error(r, tool, "/dev/null", "not a directory")
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)


# ---- compiles that never end ------------------------------------------------

GEMM = ["--op", "gemm", "--m", "8", "--n", "16", "--k", "32", "--dtype", "f32"]
TMO = 8  # seconds: a healthy compile of tiny_gemm takes ~1-3 s on a loaded 2-core machine


def stalling_templates(gc, priority):
    """tiny_gemm whose UNR=4 variants include a FIFO nobody writes: the
    compiler blocks opening it, for ever."""
    d = gc.dir / "tpl"
    if not d.exists():
        shutil.copytree(os.path.join(ROOT, "templates"), d)
    fifo = gc.dir / "never.h"
    if not fifo.exists():
        os.mkfifo(fifo)
    src = open(os.path.join(ROOT, "tests", "data", "tiny_gemm.c")).read()
    src = src.replace("@priority 0", f"@priority {priority}")
    src = src.replace("default 1 -- k-loop unroll", "default 4 -- k-loop unroll")
    src += f'\n#if UNR == 4\n#include "{fifo}"\n#endif\n'
    (d / "cpu" / "tiny_gemm.c").write_text(src)
    return d


def test_a_stalled_compile_is_recorded_and_the_sweep_goes_on(gc):
    tpl = stalling_templates(gc, 0)
    t0 = time.time()
    r = gc("gcore-tune", "--templates", tpl, "--template", "tiny_gemm", *GEMM, "--db", "t.db",
           "--compile-timeout", TMO, "--min-time", "0.01", "--no-progress", timeout=300)
    assert r.rc == 0, r
    assert time.time() - t0 < 10 * TMO
    with sqlite3.connect(gc.dir / "t.db") as c:
        got = dict(c.execute("SELECT v.params, m.status || ': ' || coalesce(m.detail, '') FROM "
                             "measurements m JOIN variants v ON v.id = m.variant_id").fetchall())
    assert got == {"ROWS=1,UNR=4": f"compile-failed: timed out after {TMO} s",
                   "ROWS=2,UNR=4": f"compile-failed: timed out after {TMO} s",
                   "ROWS=1,UNR=1": "ok: ", "ROWS=2,UNR=1": "ok: "}, got
    assert "winner tiny_gemm ROWS=" in r.out and "UNR=1" in r.out, r


def test_gen_fails_within_the_compile_timeout(gc):
    tpl = stalling_templates(gc, 100)
    t0 = time.time()
    r = gc("gcore-gen", "--templates", tpl, *GEMM, "-o", "b.gcb", "--compile-timeout", TMO,
           timeout=300)
    assert time.time() - t0 < 5 * TMO
    assert_clean_error(r, "gcore-gen", "tiny_gemm ROWS=1,UNR=4", "failed to compile",
                       f"timed out after {TMO} s")
    assert not os.path.exists(gc.dir / "b.gcb")


# ---- one compile cache, several processes ----------------------------------

def gated_templates(gc):
    """tiny_gemm whose UNR=4 variants include gate.h, a FIFO: their compile
    waits until the test writes it. Returns (templates, gate)."""
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    gate = gc.dir / "gate.h"
    os.mkfifo(gate)
    src = open(os.path.join(ROOT, "tests", "data", "tiny_gemm.c")).read()
    (d / "cpu" / "tiny_gemm.c").write_text(src + f'\n#if UNR == 4\n#include "{gate}"\n#endif\n')
    return d, gate


def children(pid):
    """The pids whose parent is pid (Linux /proc)."""
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                if p.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    return out


def test_processes_on_one_cache_compile_side_by_side_and_never_twice(gc):
    """A's compile of a variant holds nobody else up (another process
    compiles another variant meanwhile, where one lock over the whole
    compile serialized them); B, which needs A's variant, waits for it
    without compiling it (no child process while A's is open; after A, a
    second compile would read '#error' from the gate, now a file); both
    bundles are the same; the cache keeps no claim or build file after."""
    tpl, gate = gated_templates(gc)
    cache = gc.dir / "cache"
    env = {"GCORE_CACHE": str(cache)}
    slow = ["gcore-gen", "--templates", tpl, *GEMM, "--force", "tiny_gemm:ROWS=1,UNR=4", "-q"]
    a = spawn(*slow, "-o", "a.gcb", cwd=gc.dir, env=env)
    b = None
    try:
        deadline = time.time() + 60
        while not list((cache / "obj").glob("*.claim")) if (cache / "obj").exists() else True:
            assert a.poll() is None and time.time() < deadline, a.communicate()
            time.sleep(0.05)
        b = spawn(*slow, "-o", "b.gcb", cwd=gc.dir, env=env)
        r = gc("gcore-gen", "--templates", tpl, *GEMM, "--force", "tiny_gemm:ROWS=1,UNR=1", "-q",
               "-o", "c.gcb", env=env, timeout=120)
        assert r.rc == 0, r
        assert a.poll() is None, "A finished before its gate opened"
        for _ in range(40):  # 2 s: B is waiting, not compiling
            assert b.poll() is None and not children(b.pid), "B compiles A's variant"
            time.sleep(0.05)
        with open(gate, "w") as f:
            f.write("/* the gate */\n")
        os.remove(gate)
        gate.write_text("#error compiled twice\n")
        for p, name in ((a, "A"), (b, "B")):
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, (name, out, err)
    finally:
        for p in (a, b):
            if p and p.poll() is None:
                p.kill()
                p.wait()
    with sqlite3.connect(gc.dir / "a.gcb") as c1, sqlite3.connect(gc.dir / "b.gcb") as c2:
        q = "SELECT template, params, blob FROM code_objects ORDER BY id"
        assert c1.execute(q).fetchall() == c2.execute(q).fetchall()
    assert sorted(x.name for x in cache.iterdir()) == ["lock", "obj", "pch", "src"]
    assert not [x for x in (cache / "obj").iterdir() if not x.name.endswith((".so", ".so.res"))]
    assert not [x for x in (cache / "pch").iterdir() if not x.name.endswith((".h", ".h.gch"))]


def test_eight_processes_compile_each_variant_once(gc, tmp_path):
    """Eight gcore-gen start at once on a new cache, their variants
    overlapping (two dtypes, two sets of rows): every one exits 0, each
    variant's compiler ran once (CC is a wrapper that logs each compile),
    into its own .part beside the code object, each bundle holds the same
    code objects as a process alone would make, and nothing but the code
    objects is left."""
    log, cc = tmp_path / "compiles.log", tmp_path / "cc"
    cc.write_text(f'#!/bin/sh\n[ "$1" = --version ] || echo "$*" >> {log}\nexec cc "$@"\n')
    cc.chmod(0o755)
    env = {"GCORE_CACHE": str(tmp_path / "cache"), "CC": str(cc)}
    work = [("f32" if i % 2 else "f16", "1,8" if i % 4 < 2 else "8,64") for i in range(8)]
    procs = [spawn("gcore-gen", "--op", "gemm", "--m", m, "--n", "16", "--k", "32", "--dtype", dt,
                   "-o", f"b{i}.gcb", "-q", cwd=tmp_path, env=env) for i, (dt, m) in enumerate(work)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, (out, err)
    outs = [line.split(" -o ")[1].split()[0] for line in log.read_text().splitlines()]
    pchs = [o for o in outs if o.startswith("pch/")]  # the precompiled header: once too
    outs = [o for o in outs if not o.startswith("pch/")]
    assert len(pchs) == 1 and pchs[0].endswith(".part"), pchs
    assert (tmp_path / "cache" / pchs[0].rsplit(".", 2)[0]).stat().st_size > 0, pchs
    vids = [o.split("/")[1].split(".")[0] for o in outs]
    assert all(o.startswith("obj/") and o.endswith(".part") for o in outs), outs
    assert len(vids) == len(set(vids)) >= 3, sorted(vids)  # each compiled once
    assert sorted(x.name for x in (tmp_path / "cache" / "obj").iterdir()) == sorted(v + ".so" for v in vids)
    alone = gc("gcore-gen", "--op", "gemm", "--m", "1,8", "--n", "16", "--k", "32", "--dtype", "f16",
               "-o", "alone.gcb", "-q", env={"GCORE_CACHE": str(tmp_path / "c2")})
    assert alone.rc == 0, alone
    q = "SELECT template, params, dtypes, blob FROM code_objects ORDER BY template, params, dtypes"
    with sqlite3.connect(tmp_path / "alone.gcb") as a, sqlite3.connect(tmp_path / "b0.gcb") as b:
        assert a.execute(q).fetchall() == b.execute(q).fetchall()


def test_the_precompiled_header_changes_no_code_object(gc, tmp_path):
    """The cc driver's precompiled header (gen/compile.c: cpu_pch): the
    system headers the CPU prelude opens with, built once into
    <cache>/pch/<hash>.h.gch and given to every compile as -include
    <hash>.h. The code objects are the same bytes as from compiles that
    never see it (a CC that drops -include), and as where the .gch is one
    GCC cannot use (it reads the text then)."""
    log, cc, bare = tmp_path / "compiles.log", tmp_path / "cc", tmp_path / "bare-cc"
    cc.write_text(f'#!/bin/sh\n[ "$1" = --version ] || echo "$*" >> {log}\nexec cc "$@"\n')
    bare.write_text('#!/bin/sh\nfor a; do shift; [ -n "$skip" ] && { skip=; continue; }; '
                    '[ "$a" = -include ] && { skip=1; continue; }; set -- "$@" "$a"; done; exec cc "$@"\n')
    cc.chmod(0o755), bare.chmod(0o755)
    args = ["gcore-gen", "--op", "gemm", "--m", "1,8", "--n", "16", "--k", "32", "--dtype", "f16", "-q"]
    assert gc(*args, "-o", "a.gcb", env={"GCORE_CACHE": str(tmp_path / "c1"), "CC": str(cc)}).rc == 0
    (h,) = (tmp_path / "c1" / "pch").glob("*.h")
    assert h.read_text() == "".join(f"#include <{x}>\n" for x in ("stdint.h", "math.h", "string.h", "immintrin.h"))
    assert h.with_suffix(".h.gch").stat().st_size > 0
    compiles = [l for l in log.read_text().splitlines() if " -o obj/" in l]
    assert compiles and all(f"-include pch/{h.name}" in l for l in compiles), compiles
    assert gc(*args, "-o", "b.gcb", env={"GCORE_CACHE": str(tmp_path / "c2"), "CC": str(bare)}).rc == 0
    (tmp_path / "c3" / "pch").mkdir(parents=True)
    (tmp_path / "c3" / "pch" / h.name).write_text(h.read_text())
    (tmp_path / "c3" / "pch" / (h.name + ".gch")).write_text("not a precompiled header\n")
    assert gc(*args, "-o", "c.gcb", env={"GCORE_CACHE": str(tmp_path / "c3"), "CC": str(cc)}).rc == 0
    q = "SELECT vid, blob FROM code_objects ORDER BY vid"
    with sqlite3.connect(tmp_path / "a.gcb") as a, sqlite3.connect(tmp_path / "b.gcb") as b, \
            sqlite3.connect(tmp_path / "c.gcb") as c:
        got = a.execute(q).fetchall()
        assert len(got) >= 2 and got == b.execute(q).fetchall() == c.execute(q).fetchall()


def test_a_stale_claim_is_compiled_over(gc, tmp_path):
    """A claim whose process has ended, or whose pid now names another
    process (another start time), holds nobody: gcore-gen compiles the
    variant and drops the claim (a live claim would make it wait)."""
    tpl = tmp_path / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), tpl)
    shutil.copy(os.path.join(ROOT, "tests", "data", "tiny_gemm.c"), tpl / "cpu" / "tiny_gemm.c")
    args = ["gcore-gen", "--templates", tpl, *GEMM, "--force", "tiny_gemm:ROWS=1,UNR=1", "-q"]
    assert gc(*args, "-o", "a.gcb", env={"GCORE_CACHE": str(tmp_path / "c0")}).rc == 0
    (obj,) = [x.name for x in (tmp_path / "c0" / "obj").glob("*.so")]
    ended = subprocess.Popen(["true"])
    ended.wait()
    with open("/proc/self/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: this process's start
    for n, claim in enumerate([f"{ended.pid} {started}", f"{os.getpid()} {started + 1}"]):
        cache = tmp_path / f"c{n + 1}"
        (cache / "obj").mkdir(parents=True)
        (cache / "obj" / (obj + ".claim")).write_text(claim + "\n")
        r = gc(*args, "-o", f"b{n}.gcb", env={"GCORE_CACHE": str(cache)}, timeout=120)
        assert r.rc == 0, r
        assert (cache / "obj" / obj).exists() and not (cache / "obj" / (obj + ".claim")).exists()


def test_compile_timeout_flag_is_checked(gc):
    for tool, out in (("gcore-tune", []), ("gcore-gen", ["-o", "x.gcb"])):
        for bad in ("0", "-1", "x", "1e9"):
            assert_clean_error(gc(tool, *GEMM, "--compile-timeout", bad, *out), tool,
                               "--compile-timeout")


# ---- errors that stay one line -----------------------------------------------

EVIL = "ev\nil\x01\x1b[31m"      # a newline, a control byte and a terminal escape
SHOWN = "'ev\\nil\\x01\\x1b[31m'"  # how a message shows it


def one_line(r, tool, *needles):
    assert_clean_error(r, tool, *needles)
    assert "\x1b" not in r.err and "\x01" not in r.err


def tiny_model(path):
    TM.write_model(str(path), seed=1, dim=32, hidden_dim=64, n_layers=1, n_heads=4, n_kv_heads=2,
                   vocab=64)


def test_config_value_is_quoted(gc):
    tiny_model(gc.dir / "m")
    cfg_path = gc.dir / "m" / "config.json"
    cfg = json.load(open(cfg_path))
    cfg["model_type"] = EVIL
    json.dump(cfg, open(cfg_path, "w"))
    for tool, out in (("gcore-gen", ["-o", "x.gcb"]), ("gcore-tune", ["--db", "t.db"])):
        one_line(gc(tool, "--model", gc.dir / "m", *out), tool, "model_type " + SHOWN)


def test_tensor_name_is_quoted(gc):
    tiny_model(gc.dir / "m")

    def edit(h, d):
        h[EVIL] = {"dtype": "Q9\n", "shape": [1], "data_offsets": [0, 4]}
        return h, d
    TM._rewrite(str(gc.dir / "m" / "model.safetensors"), edit)
    one_line(gc("gcore-gen", "--model", gc.dir / "m", "-o", "x.gcb"), "gcore-gen",
             "tensor " + SHOWN, "dtype 'Q9\\n'")


@pytest.mark.parametrize("line, shown", [
    (b"gemm\x01\x1b[2J f32 m=1 n=2 k=3\n", "unknown op 'gemm\\x01\\x1b[2J'"),
    (b"gemm f32 m=1 n=\x0b2\xff k=3\n", "--n: '\\x0b2\\xff' is not an integer"),
    (b"gemm f32 m=1 \x1b=2 k=3\n", "'\\x1b=2': expected m="),
])
def test_workload_line_is_quoted(gc, line, shown):
    (gc.dir / "w.txt").write_bytes(b"# a workload\n" + line)
    for tool, out in (("gcore-gen", ["-o", "x.gcb"]), ("gcore-tune", ["--db", "t.db"])):
        one_line(gc(tool, "--workload", "w.txt", *out), tool, "w.txt:2: " + shown)


def test_template_line_is_quoted(gc):
    d = gc.dir / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), d)
    src = open(d / "cpu" / "add.c", encoding="utf-8").read()
    src = src.replace("/*", "/*\n * @frob\x01nicate\x1b[0m 1", 1)
    (d / "cpu" / "add.c").write_text(src, encoding="utf-8")
    one_line(gc("gcore-gen", "--templates", d, *RMS, "-o", "x.gcb"), "gcore-gen",
             "unknown declaration '@frob\\x01nicate\\x1b[0m'")


def test_command_line_values_are_quoted(gc):
    one_line(gc("gcore-tune", "--op", "gem\nm", "--m", "1"), "gcore-tune", "unknown op 'gem\\nm'")
    one_line(gc("gcore-gen", *RMS, "--target", "sm_9\x1b", "-o", "x.gcb"), "gcore-gen",
             "target 'sm_9\\x1b'")
    one_line(gc("gcore-run", "-b", "nope.gcb", "--tokens", "1,\x012"), "gcore-run")
    one_line(gc("gcore-gen", *RMS, "-o", "x.gcb", "extra\narg"), "gcore-gen",
             "unexpected argument 'extra\\narg'")


def test_tokenizer_value_is_quoted(gc):
    tok = {"model": {"type": "Uni\ngram\x07", "vocab": {}}, "added_tokens": []}
    (gc.dir / "tokenizer.json").write_text(json.dumps(tok))
    one_line(gc("gcore-run", "--tokenizer", "tokenizer.json", "--tokenize", input="hi"), "gcore-run",
             "'Uni\\ngram\\x07'")
