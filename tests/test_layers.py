"""The folder is the layer: every #include of the C sources points down the
table below (or stays in its folder), and gcore-gen, which builds bundles
offline, links no device backend."""
import os
import re
import subprocess

import pytest

from conftest import BIN, ROOT

# Lowest first; a folder may include its own files and those of any folder
# of a lower rank. templates/ is the kernels' own world (preludes only).
# api/ (libgcore.so's C API) builds on gen and runtime and is used by no
# folder of the tree; include/ holds only its public header, which includes
# nothing of gcore (test_public_header_stands_alone).
RANK = {"base": 0, "core": 1, "db": 2, "gen": 3, "runtime": 3, "models": 4, "api": 4, "tuner": 5, "serve": 5,
        "tools": 6}


def sources():
    for folder in RANK:
        d = os.path.join(ROOT, folder)
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                yield folder, os.path.join(d, name)


def test_every_include_points_down():
    bad = []
    for folder, path in sources():
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                target = os.path.normpath(os.path.join(folder, m.group(1))).split(os.sep)[0]
                if target == folder or target not in RANK:
                    continue
                if RANK[target] >= RANK[folder]:
                    bad.append(f"{os.path.relpath(path, ROOT)}:{lineno} includes {m.group(1)} "
                               f"({folder} may not use {target})")
    assert not bad, "\n".join(bad)


def test_gcore_gen_links_no_device_backend():
    """gcore-gen builds bundles for GPUs it never touches: no symbol of the
    device layer, a backend or the bundle runtime is in it."""
    exe = os.path.join(BIN, "gcore-gen")
    if not os.path.exists(exe):
        pytest.skip("gcore-gen not built")
    syms = subprocess.run(["nm", exe], capture_output=True, text=True, check=True).stdout
    defined = re.findall(r"^[0-9a-f]+ [TtDdBbRr] (\w+)$", syms, re.M)
    device = [s for s in defined if re.match(r"gc_(dev|cuda|hip|cpu|rt|llama_create|prof)_?", s)]
    assert not device, f"gcore-gen links device code: {device[:10]}"
    assert "gc_gen_bundle" in defined


def test_public_header_stands_alone():
    """include/gcore.h includes only the C library, and only api/ includes it
    in the tree (examples and tests use it as a user would)."""
    with open(os.path.join(ROOT, "include", "gcore.h")) as f:
        incs = re.findall(r'^\s*#\s*include\s+(.+)$', f.read(), re.M)
    assert incs == ["<stdint.h>"], incs
    users = [os.path.relpath(p, ROOT) for folder, p in sources()
             if folder != "api" and "gcore.h" in open(p).read()]
    assert not users, f"only api/ may include gcore.h: {users}"
