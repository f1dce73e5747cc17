"""The fuzz targets' seeds (fuzz/corpus/) stay what they claim to be: one
folder per target in the Makefile's list, each with a harness, and the
tokenizer seeds still load and encode in gcore-run (a seed the reader
refuses would leave its fuzzer stuck at the first check)."""
import os
import re

import pytest

from conftest import ROOT

SEP = b"\n#--gcore-fuzz-next-file--#\n"


def targets():
    mk = open(os.path.join(ROOT, "Makefile")).read()
    return re.search(r"^FUZZ_TARGETS := (.*)$", mk, re.M).group(1).split()


def seeds(target):
    d = os.path.join(ROOT, "fuzz", "corpus", target)
    return [os.path.join(d, f) for f in sorted(os.listdir(d))]


def test_every_target_has_a_harness_and_seeds():
    assert "safetensors" in targets() and "tunedb" in targets()
    for t in targets():
        assert os.path.isfile(os.path.join(ROOT, "fuzz", f"fuzz_{t}.c")), t
        assert seeds(t), t
    header = open(os.path.join(ROOT, "fuzz", "fuzz.h")).read()
    assert '#define FZ_SEP "\\n#--gcore-fuzz-next-file--#\\n"' in header


@pytest.mark.parametrize("seed", seeds("gguf_vocab") + seeds("tokenizer_json"), ids=os.path.basename)
def test_tokenizer_seeds_load(gc, seed):
    data = open(seed, "rb").read()
    if data.startswith(b"GGUF"):
        path = gc.dir / "v.gguf"
        path.write_bytes(data)
    else:
        path = gc.dir / "tok"
        path.mkdir()
        names = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]
        for name, part in zip(names, data.split(SEP)):
            (path / name).write_bytes(part)
    r = gc("gcore-run", "--tokenizer", path, "--tokenize", input="Hello world")
    assert r.rc == 0 and r.out.split(), r


@pytest.mark.parametrize("target", targets())
def test_harness_compiles(target):
    """Each harness still compiles against today's headers (CI builds them
    with clang and libFuzzer only after the suite; a renamed header or type
    would fail there, last). Checked here with the suite's compiler."""
    import shutil
    import subprocess
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc):
        pytest.skip(f"no C compiler '{cc}' on PATH")
    src = os.path.join(ROOT, "fuzz", f"fuzz_{target}.c")
    r = subprocess.run([cc, "-std=c11", "-D_GNU_SOURCE", "-fsyntax-only", "-Wall", "-Wextra",
                        "-Werror", "-Wno-format-truncation", src],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
