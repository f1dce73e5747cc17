"""gcore-tune --report: one self-contained HTML page with inline SVG plots,
every string from the (untrusted) database escaped; rendered in headless
Chromium (skipped, saying why, where Chromium is not installed)."""
import html.parser
import math
import os
import re
import shutil
import sqlite3
import struct
import subprocess

import pytest

from conftest import ROOT, assert_clean_error, run_tool

PROBS = ["--op", "rmsnorm", "--m", "1,4", "--n", "256"]
FAST = ["--min-time", "0.02", "--no-progress"]

# What the page may contain: no script, no external resource, no event handler.
TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "span", "table",
        "tr", "th", "td", "a", "b", "br", "div", "figure", "figcaption", "svg", "rect", "line",
        "text", "tspan", "circle", "path", "polyline"}


class Page(html.parser.HTMLParser):
    """The tags, attributes and text of a page, as a browser's parser sees them."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, cache_dir):
    """A database with verified candidates of two problems, and a GEMM whose
    planted template fails in three ways (tests/data/wrong_gemm.c)."""
    d = tmp_path_factory.mktemp("report")
    env = {"GCORE_CACHE": cache_dir, "GCORE_DB": str(d / "default.db")}
    tpl = d / "tpl"
    shutil.copytree(os.path.join(ROOT, "templates"), tpl)
    shutil.copy(os.path.join(ROOT, "tests", "data", "wrong_gemm.c"), tpl / "cpu")
    r = run_tool("gcore-tune", *PROBS, "--db", "t.db", "--budget", "4", *FAST, cwd=d, env=env)
    assert r.rc == 0, r
    r = run_tool("gcore-tune", "--templates", tpl, "--template", "wrong_gemm", "--op", "gemm",
                 "--m", "4", "--n", "16", "--k", "32", "--db", "t.db", "--timeout", "3", *FAST,
                 cwd=d, env=dict(env, ASAN_OPTIONS="handle_segv=0"))
    assert r.rc == 0, r
    return d


def report(gc, db, out="r.html", *extra):
    r = gc("gcore-tune", "--report", out, "--db", db, *extra)
    assert r.rc == 0, r
    m = re.search(r"report: .* \((\d+) problems, (\d+) measurements, (\d+) devices, (\d+) plots\)", r.out)
    assert m, r
    with open(gc.dir / out, encoding="utf-8", errors="strict") as f:  # valid UTF-8, whatever the db held
        return f.read(), [int(x) for x in m.groups()]


def test_report_plots_every_problem(tuned, gc):
    text, (nprob, nmeas, ndev, nplots) = report(gc, tuned / "t.db")
    with sqlite3.connect(tuned / "t.db") as c:
        assert nmeas == c.execute("SELECT count(*) FROM measurements").fetchone()[0]
        keys = [k for (k,) in c.execute("SELECT key FROM problems")]
        wins = c.execute("SELECT v.template, v.params FROM winners w JOIN measurements m ON "
                         "m.id = w.measurement_id JOIN variants v ON v.id = m.variant_id").fetchall()
    assert nprob == 3 and ndev == 1 and len(keys) == 3
    page = Page(text)
    # one candidate plot per problem, and parameter plots
    assert page.tags.count("svg") >= nplots > 3
    assert text.count('<figure id="p') == 3
    for k in keys:
        assert k in text
    # the winners' table names each winner; the gemm has none
    for tname, params in wins:
        assert f"{tname} {params}" in text
    assert "no verified variant" in text
    # the winner and the template default are marked; failures are counted by status
    assert text.count("<title>winner</title>") == len(wins) == 2
    assert text.count("<title>template default</title>") == 2
    for status in ("verify-failed 1", "launch-failed 1", "timed-out 1"):
        assert status in text, status
    # the geometric mean of the table's speed-ups (the default's own win counted as 1)
    ups = [float(row["speed-up over the default"].split("×")[0]) for row in summary_rows(text).values()
           if "×" in row["speed-up over the default"]]
    assert len(ups) == 2, summary_rows(text)
    won = sum(1 for row in summary_rows(text).values() if "(the default won)" in row["speed-up over the default"])
    m = re.search(r"the template defaults: <b>([\d.]+)×</b> over the (\d+) problems whose default "
                  r"was measured and verified \((\d+) of them won by the default\)", text)
    assert m and [int(m.group(2)), int(m.group(3))] == [2, won], text
    assert float(m.group(1)) == pytest.approx(math.exp(sum(map(math.log, ups)) / 2), abs=0.011)
    # self-contained: no script, nothing fetched, and the page says so to the browser
    assert set(page.tags) <= TAGS, set(page.tags) - TAGS
    assert "default-src 'none'" in text
    for tag, k, v in page.attrs:
        assert not k.startswith("on"), (tag, k)
        if k in ("href", "src", "xlink:href"):
            assert re.fullmatch(r"#p\d+", v or ""), (tag, k, v)
    assert not [u for u in re.findall(r"https?://[^\s\"'<>]+", text) if u != "http://www.w3.org/2000/svg"]


class Tables(html.parser.HTMLParser):
    """The text of every cell of the page's tables of class "summary", a
    list of rows (the header row included) per table."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.tables, self.cell, self.depth = [], None, 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "table" and ("class", "summary") in attrs:
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell).strip())
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def summary_rows(text):
    """{problem key: {column header: cell text}} of the winners' tables."""
    out = {}
    for table in Tables(text).tables:
        head = table[0]
        for row in table[1:]:
            out[row[0]] = dict(zip(head, row))
    return out


@pytest.fixture(scope="module")
def gemm(tmp_path_factory, cache_dir):
    """One GEMM tuned over several candidates, and what gcore-tune said of
    its winner: its params, time and speed-up over the template default."""
    d = tmp_path_factory.mktemp("gemm")
    env = {"GCORE_CACHE": cache_dir, "GCORE_DB": str(d / "default.db")}
    r = run_tool("gcore-tune", "--op", "gemm", "--m", "4", "--n", "64", "--k", "64", "--db", "g.db",
                 "--budget", "8", *FAST, cwd=d, env=env)
    assert r.rc == 0, r
    m = re.search(r"winner (\S+) (\S+): [\d.]+ us, [\d.]+ GFLOP/s, ([\d.]+)x the default", r.out)
    assert m, r
    return d, m.group(1), m.group(2), float(m.group(3))


def winner_row(db):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT p.key, m.median_us, m.tflops, m.gbps FROM winners w JOIN problems p "
                         "ON p.id = w.problem_id JOIN measurements m ON m.id = w.measurement_id").fetchone()


def test_summary_table_states_the_winners_figures(gemm, gc):
    """Each column of the winners' table against the database and against
    what gcore-tune printed when it picked the winner (its own computation
    of the template default's time)."""
    d, tname, params, speedup = gemm
    key, us, tflops, gbps = winner_row(d / "g.db")
    text, _ = report(gc, d / "g.db")
    row = summary_rows(text)[key]
    assert row["winner"] == f"{tname} {params}"
    assert float(row["time µs"]) == pytest.approx(us, rel=0.01, abs=0.006)
    assert float(row["TFLOP/s"]) == pytest.approx(tflops, rel=0.01)
    assert float(row["GB/s"]) == pytest.approx(gbps, rel=0.01)
    if f"{speedup:.2f}" == "1.00":
        assert row["speed-up over the default"].startswith("1.00×"), row
    else:
        assert row["speed-up over the default"] == f"{speedup:.2f}×", row
    assert row["of the device bound"] == "—"  # no published figures for a CPU
    with sqlite3.connect(d / "g.db") as c:
        n = c.execute("SELECT count(*) FROM measurements").fetchone()[0]
        ok = c.execute("SELECT count(*) FROM measurements WHERE status = 'ok'").fetchone()[0]
    assert row["verified / measured"] == f"{ok} / {n}"


def test_summary_table_gives_the_fraction_of_a_known_devices_bound(gemm, gc):
    """On a device whose peaks gcore knows (an H100 SXM: 3350 GB/s, 67
    TFLOP/s in fp32), the bound is the longer of the problem's FLOPs at the
    peak rate and its bytes at the peak bandwidth; both are what the
    winner's recorded TFLOP/s and GB/s times its time say."""
    d, *_ = gemm
    key, us, tflops, gbps = winner_row(d / "g.db")
    flops, nbytes = tflops * 1e12 * us * 1e-6, gbps * 1e9 * us * 1e-6
    bound_us = 1e6 * max(flops / 67e12, nbytes / 3350e9)
    # a CPU's time is far from an H100's bound: the winner's made 37% of it
    # (the shorter of the two times would give another figure)
    assert 1e6 * min(flops / 67e12, nbytes / 3350e9) < 0.5 * bound_us
    shutil.copy(d / "g.db", gc.dir / "h100.db")
    with sqlite3.connect(gc.dir / "h100.db") as c:
        c.execute("UPDATE devices SET name = 'NVIDIA H100 80GB HBM3'")
        c.execute("UPDATE measurements SET median_us = ? WHERE id = (SELECT measurement_id FROM "
                  "winners)", (bound_us / 0.37,))
    text, _ = report(gc, "h100.db")
    row = summary_rows(text)[key]
    assert row["of the device bound"] == "37%", (row, bound_us)
    assert "3350 GB/s, 989 TFLOP/s 16-bit, 67.0 TFLOP/s 32-bit" in text
    assert '<line class="bound"' in text  # the bound drawn in the candidates' plot


def test_summary_table_shows_the_winners_step_check(gemm, gc):
    """gcore-tune --model's verdict on a winner (step_checks: the decode
    step timed with it against the template default in its place): none,
    kept, or refused (the latest one counts)."""
    d, *_ = gemm
    key, *_ = winner_row(d / "g.db")
    text, _ = report(gc, d / "g.db")
    assert summary_rows(text)[key]["in the decode step"] == "—"
    shutil.copy(d / "g.db", gc.dir / "s.db")
    for i, (w_us, kept, rows, want) in enumerate((
            (99.5, 1, 0, "kept: 99.5 µs a step, -0.5% against the default's 100.0 (the single sequence's step)"),
            (102.0, 0, 2, "refused: 102.0 µs a step, +2.0% against the default's 100.0 (the step of a batch of 2); "
                          "bundles build the default"),
            (98.0, 1, None, "kept: 98.0 µs a step, -2.0% against the default's 100.0 (the decode step)"))):
        with sqlite3.connect(gc.dir / "s.db") as c:  # rows None: a verdict recorded before schema 007
            c.execute("INSERT INTO step_checks(measurement_id, target, model, default_us, winner_us, kept, rows, "
                      "created) SELECT measurement_id, target, 'model', 100.0, ?, ?, ?, ? FROM winners",
                      (w_us, kept, rows, f"2026-12-0{i + 1} 00:00:00"))
        text, _ = report(gc, "s.db", f"s{i}.html")
        assert summary_rows(text)[key]["in the decode step"] == want


def test_a_plot_per_parameter_with_two_or_more_values(gemm, gc):
    """Every (template, parameter) with two or more values among the
    verified candidates has its plot, with every such candidate in it, and
    no other parameter has one."""
    d, *_ = gemm
    with sqlite3.connect(d / "g.db") as c:
        ok = c.execute("SELECT v.template, v.params FROM measurements m JOIN variants v ON "
                       "v.id = m.variant_id WHERE m.status = 'ok'").fetchall()
    values, counts = {}, {}
    for tname, params in ok:
        for kv in params.split(","):
            name, value = kv.split("=", 1)
            values.setdefault((tname, name), set()).add(value)
            counts[(tname, name)] = counts.get((tname, name), 0) + 1
    want = {k: counts[k] for k, v in values.items() if len(v) >= 2}
    assert want, values  # the sweep varied some parameter
    text, _ = report(gc, d / "g.db")
    got = {}
    for fig in re.findall(r'<figure class="param">(.*?)</figure>', text, re.S):
        title = re.search(r'<text class="ptitle"[^>]*>(.*?) · (.*?)</text>', fig)
        n = re.search(r"\((\d+) candidates\)</text>", fig)
        got[(title.group(1), title.group(2))] = int(n.group(1))
        assert fig.count('<circle class="ppt"') == int(n.group(1))
    assert got == want


def test_report_escapes_what_the_database_holds(tuned, gc):
    """Device names, parameters, problem keys and failure details are
    untrusted text: markup in them stays text, invalid UTF-8 and control
    bytes become U+FFFD."""
    shutil.copy(tuned / "t.db", gc.dir / "evil.db")
    with sqlite3.connect(gc.dir / "evil.db") as c:
        c.execute("UPDATE devices SET name = '<script>alert(1)</script> \"q\" & ''s'''")
        c.execute("UPDATE variants SET params = params || ',Z=<img src=x onerror=alert(2)>', "
                  "template = template || '</text><script>alert(3)</script>' "
                  "WHERE id = (SELECT min(id) FROM variants)")
        c.execute("UPDATE problems SET key = key || ' <svg onload=alert(4)>' WHERE id = "
                  "(SELECT min(id) FROM problems)")
        c.execute("UPDATE measurements SET detail = CAST(X'3c2f7469746c653e3c7363726970743e' || "
                  "X'0107ff1b5b33316dc0af' AS TEXT) WHERE status != 'ok'")
    text, _ = report(gc, "evil.db")
    page = Page(text)
    assert set(page.tags) <= TAGS, set(page.tags) - TAGS
    assert not [a for a in page.attrs if a[1].startswith("on")]
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &quot;q&quot; &amp; &#39;s&#39;" in text
    assert "Z=&lt;img src=x onerror=alert(2)&gt;" in text
    assert "&lt;svg onload=alert(4)&gt;" in text
    assert "&lt;/title&gt;&lt;script&gt;\ufffd\ufffd\ufffd\ufffd[31m\ufffd\ufffd" in text
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)
    joined = "".join(page.text)
    assert "<script>alert(1)</script>" in joined  # shown as text, as written


def test_report_after_tuning_merging_and_of_an_empty_database(gc):
    r = gc("gcore-tune", "--op", "rmsnorm", "--m", "1", "--n", "64", "--db", "t.db", "--budget", "1",
           "--report", "r.html", *FAST)
    assert r.rc == 0 and "report: r.html (1 problems" in r.out, r
    r = gc("gcore-tune", "--merge", "t.db", "--db", "m.db", "--report", "m.html")
    assert r.rc == 0 and "merged into m.db" in r.out and "report: m.html (1 problems" in r.out, r
    shutil.copy(gc.dir / "t.db", gc.dir / "none.db")
    with sqlite3.connect(gc.dir / "none.db") as c:
        for t in ("winners", "claims", "measurements", "variants", "problems", "compilers", "devices"):
            c.execute(f"DELETE FROM {t}")
    text, counts = report(gc, "none.db", "n.html")
    assert counts == [0, 0, 0, 0] and "holds no measurements" in text


def test_report_errors(gc, tuned):
    r = gc("gcore-tune", "--report", "r.html", "--db", "missing.db")
    assert_clean_error(r, "gcore-tune", "missing.db")
    assert not os.path.exists(gc.dir / "missing.db") and not os.path.exists(gc.dir / "r.html")
    os.mkdir(gc.dir / "adir")
    r = gc("gcore-tune", "--report", "adir", "--db", tuned / "t.db")
    assert_clean_error(r, "gcore-tune", "adir")
    r = gc("gcore-tune", "--report", "/dev/null", "--db", tuned / "t.db")
    assert_clean_error(r, "gcore-tune", "/dev/null")


def chromium():
    exe = os.environ.get("GCORE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; `make deps` installs it)")
    return exe


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    return struct.unpack(">II", head[16:24])


def test_report_renders_in_chromium(tuned, gc):
    """The page as Chromium builds it (its DOM after load, no network, a
    fresh profile) holds every plot, and a screenshot is drawn (the script
    `make report-demo` runs)."""
    exe = chromium()
    text, (_, _, _, nplots) = report(gc, tuned / "t.db")
    page = gc.dir / "r.html"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    p = subprocess.run([exe, *flags, f"--user-data-dir={gc.dir / 'profile'}", "--dump-dom",
                        f"file://{page}"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    dom = Page(p.stdout)
    assert dom.tags.count("svg") == Page(text).tags.count("svg") >= nplots
    assert dom.tags.count("circle") == Page(text).tags.count("circle") > 0
    assert "gcore tuning report" in p.stdout
    p = subprocess.run(["sh", os.path.join(ROOT, "tuner", "screenshot.sh"), str(page),
                        str(gc.dir / "shot.png"), "1200", "1600"],
                       capture_output=True, text=True, timeout=200, env=dict(os.environ, GCORE_CHROMIUM=exe))
    assert p.returncode == 0, p.stderr
    assert png_size(gc.dir / "shot.png") == (1200, 1600)
    assert os.path.getsize(gc.dir / "shot.png") > 30000  # drawn, not a blank page
