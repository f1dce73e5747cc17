"""The README is true: its examples run as printed, and every tool's --help
and the README's flag tables name the same flags, the same ops (from the op
table) and the same targets.

The examples run from a directory laid out like the repository after
`make demo`: bin/ (the tools under test), tuner/workloads/, and
build/demo/model and build/demo/tune.db, made here the way tuner/demo.sh
makes them (a smaller model, for time). Examples for GPU targets need their
compilers (NVRTC, clang-19) and skip with the reason where one is absent;
nothing here needs a GPU. A ```sh server block starts a server (its first
line) in the background and runs the rest against it."""
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from conftest import BIN, ROOT  # noqa: E402
import tinymodel as TM  # noqa: E402

TOOLS = ["gcore-tune", "gcore-gen", "gcore-run", "gcore-compile", "gcore-serve", "gcore-bench"]
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def section(text, tool):
    """The README's section for tool: from its '## tool' heading to the next."""
    m = re.search(rf"^## {tool}\b.*?(?=^## )", text, re.S | re.M)
    assert m, f"README has no '## {tool}' section"
    return m.group(0)


def examples(text):
    """The command lines of the README's ```sh blocks, in order, but the
    quick start's make commands."""
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("make "):
                lines.append(line)
    return lines


def server_blocks(text):
    """The README's ```sh server blocks: a server's start command (it runs
    until a signal), then command lines that talk to it."""
    return [[line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
            for block in re.findall(r"```sh server\n(.*?)```", text, re.S)]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_server_block(lines, repo, env, tmp_path):
    """Start lines[0] in the background on a free port (in place of 8080, so
    that a test never takes a port someone else uses), wait until it says
    it listens, run the other lines (each must succeed and print no API
    error), then stop it with SIGTERM: it must exit 0."""
    import signal
    import time
    port = str(free_port())
    lines = [line.replace("8080", port) for line in lines]
    log = tmp_path / "server.log"
    with open(log, "w") as err:
        p = subprocess.Popen(shlex.split(lines[0]), cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.time() + 300
        while "listening on" not in log.read_text():
            assert p.poll() is None, f"README server failed: {lines[0]}\n{log.read_text()}"
            assert time.time() < deadline, f"README server did not start: {log.read_text()}"
            time.sleep(0.1)
        for line in lines[1:]:
            r = subprocess.run(line, shell=True, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0 and r.stdout and '"error"' not in r.stdout, \
                f"README example failed: {line}\n{r.stdout}\n{r.stderr}"
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
    assert rc == 0, f"README server exited with {rc}: {log.read_text()}"


def help_text(tool):
    p = subprocess.run([os.path.join(BIN, tool), "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("tool", TOOLS)
def test_help_and_readme_name_the_same_flags(tool):
    """Every flag --help lists is in the tool's README section, and every
    flag the section's table documents is in --help (and both are real:
    the tool does not call them unknown)."""
    h = set(FLAG.findall(help_text(tool)))
    sec = section(readme(), tool)
    table = set()
    for row in re.findall(r"^\| (`-.*?) \|", sec, re.M):
        table |= set(FLAG.findall(row))
    missing = sorted(h - set(FLAG.findall(sec)))
    assert not missing, f"{tool} --help has flags its README section lacks: {missing}"
    extra = sorted(table - h)
    assert not extra, f"the README documents {tool} flags its --help lacks: {extra}"
    for flag in sorted(h):
        p = subprocess.run([os.path.join(BIN, tool), flag], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=60)
        assert "unknown option" not in p.stderr, f"{tool} {flag}: {p.stderr}"


def test_ops_and_targets_agree():
    """The ops --help prints come from the op table; the README's --op row
    names each of them, and both name every target."""
    h = help_text("gcore-tune")
    ops = re.findall(r"^  ([a-z_]+) ", h.split("\nops:\n")[1], re.M)
    assert {"gemm", "attention", "rmsnorm_gemm_swiglu"} <= set(ops)
    sec = section(readme(), "gcore-tune")
    op_row = re.search(r"^\| `--op OP` \|(.*)$", sec, re.M).group(1)
    assert not [o for o in ops if f"`{o}`" not in op_row], (ops, op_row)
    targets = h.split("\ntargets: ")[1].split("(")[0]
    for t in [x.strip() for x in targets.split(",") if x.strip()]:
        assert f"`{t}`" in sec, f"target {t} of --help is not in the README"
    assert "`hip`" in section(readme(), "gcore-run")


def have_nvrtc():
    return any(os.path.exists(os.path.join(d, "libnvrtc.so")) or
               any(f.startswith("libnvrtc.so") for f in os.listdir(d)) if os.path.isdir(d) else False
               for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
                         "/usr/lib/x86_64-linux-gnu"))


def runnable(line):
    """None when the line can run here, else why not."""
    if re.search(r"\bsm_\d", line) and not have_nvrtc():
        return "needs NVRTC (the CUDA toolkit)"
    if re.search(r"\bgfx\d", line) and not shutil.which("clang-19"):
        return "needs clang-19"
    if "--backend cuda" in line or "--backend hip" in line:
        return "needs a GPU"
    return None


def test_readme_examples_run_as_printed(tmp_path, cache_dir):
    repo = tmp_path / "repo"
    (repo / "build" / "demo").mkdir(parents=True)
    os.symlink(BIN, repo / "bin")
    for d in ("lib", "include", "python", "examples"):  # the library's examples
        os.symlink(os.path.join(ROOT, d), repo / d)
    shutil.copytree(os.path.join(ROOT, "tuner", "workloads"), repo / "tuner" / "workloads")
    model = repo / "build" / "demo" / "model"
    TM.write_model(str(model), seed=1, dtype="f16", dim=64, hidden_dim=160, n_layers=2, n_heads=4,
                   n_kv_heads=2, vocab=2048, max_seq=64, rope_scaling="llama3")
    TM.write_tokenizer(str(model), 2048)
    # python3 in an example is the interpreter running the tests (it has numpy)
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = dict(os.environ, GCORE_CACHE=cache_dir, GCORE_DB=str(tmp_path / "default-tune.db"), PATH=path)
    r = subprocess.run(["bin/gcore-tune", "--model", "build/demo/model", "--prefill", "32",
                        "--db", "build/demo/tune.db", "--budget", "1", "--no-progress"],
                       cwd=repo, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = examples(readme())
    assert len(lines) >= 12, lines
    skipped = []
    for line in lines:
        why = runnable(line)
        if why:
            skipped.append(f"{line}: {why}")
            continue
        p = subprocess.run(line, shell=True, cwd=repo, env=env, capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 0, f"README example failed: {line}\n{p.stdout}\n{p.stderr}"
    blocks = server_blocks(readme())
    assert blocks, "README has no ```sh server block"
    for block in blocks:
        run_server_block(block, repo, env, tmp_path)
    for s in skipped:
        print("skipped:", s)
