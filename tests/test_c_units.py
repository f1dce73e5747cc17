"""Runs the C unit tests (tests/c/test_*.c, built by make into GCORE_CTESTS);
each prints 'N passed, M failed' and exits non-zero on failure."""
import glob
import os
import subprocess

import pytest

from conftest import ROOT, SHARED

CDIR = os.environ.get("GCORE_CTESTS", os.path.join(ROOT, "build", "rel", "tests"))
NAMES = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(ROOT, "tests", "c", "test_*.c")))


# Units whose cases all read the third-party data in ../shared/data, and
# units with an argument `shared` that runs the cases that do (the rest run
# without it): those skip, saying why, where the data is absent.
SHARED_ONLY = {"test_tokenizer"}
SHARED_ARG = {"test_models"}


def run_unit(name, *args):
    exe = os.path.join(CDIR, name)
    assert os.path.exists(exe), f"{exe} not built (run the tests through 'make test')"
    env = dict(os.environ, GCORE_SHARED_DATA=SHARED)
    p = subprocess.run([exe, *args], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    assert " 0 failed" in lines[-1], p.stdout
    if lines[0].startswith("skip: "):
        pytest.skip(lines[0][6:])


@pytest.mark.parametrize("name", [n for n in NAMES if n not in SHARED_ONLY])
def test_c_unit(name):
    run_unit(name)


@pytest.mark.parametrize("name", sorted(SHARED_ONLY | SHARED_ARG))
def test_c_unit_on_shared_data(name):
    run_unit(name, *(["shared"] if name in SHARED_ARG else []))
