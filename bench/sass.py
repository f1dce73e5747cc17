#!/usr/bin/env python3
"""sass.py — the SASS of gcore's NVIDIA code objects on a machine without a
GPU or a disassembler: the instruction mix of a kernel, and of the loop that
holds its matrix instructions (its unrolled main loop), so that a template
change can be weighed in instructions before it is timed on a GPU.

    bench/sass.py [--loop] [--op OP] FILE...     FILE: a bundle (.gcb) or a cubin

For a bundle, every NVIDIA code object (or those whose dispatch entries
name OP) is disassembled, named by its template and parameters. Output: per
code object its registers (bundle), the instruction count and opcode
histogram; with --loop, the same for the loop: from the target of the
backward branch that follows the last HMMA/HGMMA to that branch.

The disassembler: nvdisasm from $NVDISASM, PATH or the CUDA toolkit, else
the one in Debian's nvidia-cuda-toolkit (11.8, non-free: the .deb is
fetched once into build/nvdisasm/, without installing it). CUDA 12 changed
a cubin's ELF header (e_flags' architecture field, the ABI version), which
an 11.x nvdisasm refuses; for it the header of a copy is rewritten to the
11.x encoding of the same architecture (sm_90 for sm_90a: the sm_90a-only
instructions are printed all the same). bench/RESULTS.md (session 19) has
what it measured."""
import argparse
import collections
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, "build", "nvdisasm")
DEB = "nvidia-cuda-toolkit"


def fetch_nvdisasm():
    """nvdisasm out of Debian's nvidia-cuda-toolkit .deb (non-free), into
    build/nvdisasm: apt-get download with a temporary sources entry."""
    exe = os.path.join(CACHE, "usr", "bin", "nvdisasm")
    if os.path.exists(exe):
        return exe
    os.makedirs(CACHE, exist_ok=True)
    tmp = tempfile.mkdtemp()
    lists, parts, cache = (os.path.join(tmp, d) for d in ("lists", "parts", "cache"))
    for d in (os.path.join(lists, "partial"), parts, os.path.join(cache, "archives", "partial")):
        os.makedirs(d)
    src = os.path.join(tmp, "nonfree.list")
    with open(src, "w") as f:
        f.write("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                "http://deb.debian.org/debian bookworm non-free\n")
    opts = [f"-oDir::Etc::SourceList={src}", f"-oDir::Etc::SourceParts={parts}", f"-oDir::State::Lists={lists}",
            f"-oDir::Cache={cache}", "-oAPT::Sandbox::User=root"]
    for cmd in (["apt-get", *opts, "update", "-qq"], ["apt-get", *opts, "download", DEB]):
        r = subprocess.run(cmd, cwd=CACHE, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"sass.py: apt-get {cmd[-1]} failed: {r.stderr.strip()[-300:]}")
    deb = next(f for f in os.listdir(CACHE) if f.startswith(DEB) and f.endswith(".deb"))
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", os.path.join(CACHE, deb)], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", CACHE, "./usr/bin/nvdisasm"], input=tar.stdout, check=True)
    os.remove(os.path.join(CACHE, deb))
    shutil.rmtree(tmp)
    return exe


def nvdisasm():
    for c in (os.environ.get("NVDISASM"), shutil.which("nvdisasm"), "/usr/local/cuda/bin/nvdisasm"):
        if c and os.path.exists(c):
            return c
    return fetch_nvdisasm()


def major(exe):
    m = re.search(r"release (\d+)", subprocess.run([exe, "--version"], capture_output=True, text=True).stdout)
    return int(m.group(1)) if m else 0


def old_header(blob):
    """A CUDA 12+ cubin's ELF header in the 11.x encoding: e_flags = sm |
    0x500 (unified texture mode, 64-bit addresses) | virtual sm << 16, ABI
    version 7; the architecture is bits 8-15 of the new e_flags."""
    b = bytearray(blob)
    (flags,) = struct.unpack_from("<I", b, 48)
    if b[8] >= 8:  # the new encoding
        sm = (flags >> 8) & 0xFF
        struct.pack_into("<I", b, 48, sm | 0x500 | sm << 16)
        b[8] = 7
    return bytes(b)


def disassemble(exe, blob):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(old_header(blob) if major(exe) < 12 else blob)
        f.flush()
        r = subprocess.run([exe, "-c", f.name], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"sass.py: nvdisasm: {r.stderr.strip()[-300:]}")
    return r.stdout


INSN = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)")


def parse(sass):
    """[(address, opcode, text)] of the instructions, and {label: address}."""
    out, labels, pending = [], {}, []
    for line in sass.splitlines():
        m = re.match(r"^(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = INSN.match(line)
        if m:
            a = int(m.group(1), 16)
            for lab in pending:
                labels[lab] = a
            pending = []
            out.append((a, m.group(2), line.strip()))
    return out, labels


def main_loop(insns, labels):
    """The loop around the matrix instructions: (first, last) indices, or None."""
    mma = [i for i, (_, op, _) in enumerate(insns) if op in ("HMMA", "HGMMA")]
    if not mma:
        return None
    for i in range(mma[-1], len(insns)):
        a, op, text = insns[i]
        t = re.search(r"`\((\.L_x_\d+)\)", text)
        if op == "BRA" and t and labels.get(t.group(1), a) <= insns[mma[0]][0]:
            start = next(j for j, x in enumerate(insns) if x[0] == labels[t.group(1)])
            return start, i
    return None


def report(name, regs, sass, loop):
    insns, labels = parse(sass)
    hist = collections.Counter(op for _, op, _ in insns)
    print(f"{name}: {len(insns)} instructions" + (f", {regs} registers" if regs is not None else ""))
    print("  " + " ".join(f"{k}:{v}" for k, v in hist.most_common()))
    if loop:
        r = main_loop(insns, labels)
        if r is None:
            print("  loop: none holds a matrix instruction")
        else:
            s, e = r
            h = collections.Counter(op for _, op, _ in insns[s:e + 1])
            print(f"  loop {insns[s][0]:#x}..{insns[e][0]:#x}: {e - s + 1} instructions")
            print("  " + " ".join(f"{k}:{v}" for k, v in h.most_common()))


def objects(path, op):
    """(name, registers, cubin) of a bundle's NVIDIA code objects (or of one cubin)."""
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(b"\x7fELF"):
        with open(path, "rb") as f:
            yield os.path.basename(path), None, f.read()
        return
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        q = ("SELECT DISTINCT o.id, o.target, o.template, o.params, o.dtypes, o.regs, o.blob FROM code_objects o "
             "JOIN dispatch d ON d.code_id = o.id WHERE o.target LIKE 'sm_%'" + (" AND d.op = ?" if op else ""))
        for _, target, tpl, params, dts, regs, blob in c.execute(q, (op,) if op else ()):
            yield f"{target} {tpl} {dts} {params}", regs, blob


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--loop", action="store_true", help="also the loop around the matrix instructions")
    ap.add_argument("--op", default=None, help="a bundle's code objects for this op only")
    ap.add_argument("--dump", default=None, help="write each SASS listing into this directory")
    a = ap.parse_args()
    exe = nvdisasm()
    for path in a.files:
        for i, (name, regs, blob) in enumerate(objects(path, a.op)):
            sass = disassemble(exe, blob)
            if a.dump:
                os.makedirs(a.dump, exist_ok=True)
                with open(os.path.join(a.dump, f"{os.path.basename(path)}.{i}.sass"), "w") as f:
                    f.write(f"// {name}\n{sass}")
            report(name, regs, sass, a.loop)


if __name__ == "__main__":
    main()
