"""Runs the C unit tests (tests/c/test_*.c, built by make into GCORE_CTESTS);
each prints 'N passed, M failed' and exits non-zero on failure."""
import glob
import os
import subprocess

import pytest

from conftest import ROOT

CDIR = os.environ.get("GCORE_CTESTS", os.path.join(ROOT, "build", "rel", "tests"))
NAMES = sorted(os.path.basename(p)[:-2] for p in glob.glob(os.path.join(ROOT, "tests", "c", "test_*.c")))


@pytest.mark.parametrize("name", NAMES)
def test_c_unit(name):
    exe = os.path.join(CDIR, name)
    assert os.path.exists(exe), f"{exe} not built (run the tests through 'make test')"
    p = subprocess.run([exe], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert " 0 failed" in p.stdout.strip().splitlines()[-1], p.stdout
