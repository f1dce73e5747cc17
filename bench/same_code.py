"""Does a change of the templates, their preludes or gen keep the machine
code? Compile the same variants with two builds of gcore-gen (each with its
embedded templates) and compare what comes out, section by section.

  same_code.py cases TEMPLATES OUT.json NAMES SAMPLES [DTYPES]
      the case list: for each template of TEMPLATES/gpu named in NAMES
      (comma-separated), each of its ops' targets among sm_80, sm_90a,
      gfx90a, gfx942, gfx1100: its first op and first gate/up op at the
      defaults for DTYPES of its dtypes (0: all) and at SAMPLES random
      points inside its constraints; every other op, and every template not
      in NAMES, at its defaults for its first dtype
  same_code.py run BIN CASES.json OUT [RENAME]
      compile each case with BIN/gcore-gen --force into OUT (one digest
      per case; a rerun skips the cases it has); RENAME, a JSON object,
      maps a template name of the list to the one BIN knows it by
  same_code.py cmp A B [RENAME]
      compare the digests (RENAME applied to A's text, for kernels and
      globals a merge renamed); prints each difference and the counts

A digest holds, for a case gen compiled, every ELF section of the forced
template's code objects but the symbol and string tables (bytes: .text,
.rodata with AMD's kernel descriptors, cubin's .nv.info and constant
banks ...), AMD's code-object metadata as llvm-readelf prints it, and the
resources gen read (registers, spills, shared, scratch, AGPRs, SGPRs,
wave, occupancy); for a case gen refused, its message. Not compared: the
symbol hash tables (an AMD code object has a __hip_cuid_<hash of the
source file's name> symbol, and the file is named by the variant id),
.dynamic (the string table's size) and the raw .note (its msgpack holds
the kernel's name: it is compared as text, after RENAME). Needs
llvm-readelf-19 and gen's compilers (NVRTC; comgr or clang-19). Written
for prelude_common.h and attention_decode's attention_batch
(templates/README.md); the GEMM epilogue merge was checked the same way
(bench/RESULTS.md)."""
import hashlib
import json
import os
import random
import re
import sqlite3
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
READELF = "llvm-readelf-19"

GPU_TARGETS = {"gpu": ["sm_80", "sm_90a", "gfx90a", "gfx942", "gfx1100"],
               "cuda": ["sm_80", "sm_90a"], "hip": ["gfx90a", "gfx942", "gfx1100"]}
SHAPES = {"attention": "--m 1 --h 8 --g 2 --d 64", "attention_batch": "--m 3 --h 8 --g 2 --d 64",
          "embed": "--m 2 --n 256 --k 50", "argmax": "--m 1 --n 1000", "argmax_step": "--m 1 --n 1000", "rmsnorm": "--m 2 --n 300",
          "add": "--m 2 --n 300", "rope_kv": "--m 1 --h 8 --g 2 --d 64"}


def shape(op, tpl):
    if tpl == "attention_prefill":
        return "--m 16 --h 8 --g 2 --d 64"
    if op in SHAPES:
        return SHAPES[op]
    m = 1 if ("gemv" in tpl or op.startswith("rmsnorm_gemm")) else 64
    return f"--m {m} --n 256 --k 256"


def pick(dts, n):
    """n of dts, spread out (every dtype when n is 0)."""
    return dts if not n or n >= len(dts) else [dts[i * len(dts) // n] for i in range(n)]


SIZES = {"f32": 4, "f16": 2, "bf16": 2, "q8_0": 34, "q4_0": 18, "q4_k": 144, "q5_k": 176, "q6_k": 210}


def valid(t, tg, dt, op, p):
    """Do t's constraints hold at p (True where one cannot be evaluated)?"""
    from tplhead import op_names
    parts = dt.split(":") if ":" in dt else [dt] * 3
    amd = tg.startswith("gfx")
    env = dict(WARP=32 if tg in ("gfx1100",) or not amd else 64, MAXT=1024, SMEM=65536 if amd else 232448,
               AMD=int(amd), SM=0 if amd else int(tg[3:5]), ARCH_A=int(tg.endswith("a")),
               MFMA=int(tg in ("gfx90a", "gfx942")), WMMA=int(tg == "gfx1100"), SMS=108,
               VGPRS=256 if tg == "gfx1100" else 512, SA=SIZES[parts[0]], SB=SIZES[parts[1]],
               SC=SIZES[parts[2]]) | op_names(op) | p
    for c in t["constraints"]:
        py = re.sub(r"(?<![=!<>])/(?!/)", "//", c).replace("&&", " and ").replace("||", " or ")
        py = re.sub(r"!(?!=)", " not ", py)
        try:
            if not eval(py, {"min": min, "max": max, "cdiv": lambda a, b: -(-a // b)}, env):
                return False
        except Exception:
            pass
    return True


def cases(tpl_dir, names, samples, wide_dtypes=0, seed="same-code"):
    from tplhead import parse
    out = []
    for f in sorted(os.listdir(os.path.join(tpl_dir, "gpu"))):
        if not f.endswith(".cu"):
            continue
        t = parse(os.path.join(tpl_dir, "gpu", f))
        rng = random.Random(f"{seed}-{t['name']}")
        full = t["name"] in names
        pair = [o for o in t["ops"] if o in ("gemm_swiglu", "rmsnorm_gemm_swiglu")][:1]
        for op in t["ops"]:
            wide = full and op in t["ops"][:1] + pair  # every dtype, and samples
            for tg in GPU_TARGETS[t["backend"]]:
                dts = t["dtypes"]
                for dt in (pick(dts, wide_dtypes) if wide else dts[:1]):
                    out.append(dict(target=tg, op=op, dtype=dt, shape=shape(op, t["name"]),
                                    template=t["name"], params=dict(t["defaults"][op])))
                for i in range(samples if wide else 0):  # sampled points, rotating through dtypes
                    dt = dts[(i * 7 + 3) % len(dts)]
                    for _ in range(200):  # a point inside the constraints, where they can be read
                        p = {k: rng.choice(v[0]) for k, v in t["params"].items()}
                        if valid(t, tg, dt, op, p):
                            break
                    out.append(dict(target=tg, op=op, dtype=dt,
                                    shape=shape(op, t["name"]), template=t["name"], params=p))
            if not full:
                break
    for c in out:  # an id of the case's content: a rerun keeps what it has
        c["id"] = hashlib.sha1(json.dumps(c, sort_keys=True).encode()).hexdigest()[:12]
    return list({c["id"]: c for c in out}.values())


def elf_sections(blob):
    """{name: bytes} of an ELF64 file's sections (no symbol/string tables)."""
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    strtab = heads[shstrndx]
    names = blob[strtab[4]:strtab[4] + strtab[5]]
    out = {}
    for h in heads:
        name = names[h[0]:names.index(b"\0", h[0])].decode()
        if h[1] in (2, 3, 11) or not name:  # SYMTAB, STRTAB, DYNSYM
            continue
        data = b"" if h[1] == 8 else blob[h[4]:h[4] + h[5]]  # NOBITS: its size only
        out[name] = f"type={h[1]} flags={h[2]} addr={h[3]} size={h[5]} align={h[8]} " + data.hex()
    return out


def digest(case, bindir, work, rename):
    tpl = rename.get(case["template"], case["template"])
    force = tpl + ":" + ",".join(f"{k}={v}" for k, v in case["params"].items())
    bundle = os.path.join(work, f"{case['id']}.gcb")
    cmd = [os.path.join(bindir, "gcore-gen"), "--target", case["target"], "--op", case["op"],
           "--dtype", case["dtype"], *case["shape"].split(), "--force", force,
           "--cache", os.path.join(work, "cache" + os.environ.get("WORKER", "")), "-o", bundle, "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        msg = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"rc {r.returncode}"
        return {"refused": norm(msg, rename)}
    with sqlite3.connect(bundle) as c:
        rows = c.execute("SELECT blob, params, regs, spills, shared_bytes, scratch_bytes, agprs, "
                         "sgprs, wave, occupancy FROM code_objects WHERE template = ? ORDER BY "
                         "params, id", (tpl,)).fetchall()
    os.unlink(bundle)
    assert rows, case
    out = []
    for blob, params, *res in rows:  # (argmax: a pass's second kernel is another variant)
        path = os.path.join(work, f"{case['id']}.o")
        open(path, "wb").write(blob)
        secs = {norm(k, rename): v for k, v in elf_sections(blob).items()}
        notes = subprocess.run([READELF, "--notes", path], capture_output=True, text=True).stdout
        notes = norm(notes.replace(path, "OBJ"), rename)
        out.append({"params": params, "resources": res, "sections": secs, "notes": notes})
    return {"objects": out}


def norm(text, rename):
    for a, b in rename.items():
        text = text.replace(a, b)
    return text


def strip_hash(d):
    """The digest without the case and the symbol hash tables (.hash,
    .gnu.hash: AMD code objects have a __hip_cuid_<hash of the source file
    name> symbol, and the file is named by the variant id)."""
    d = {k: v for k, v in d.items() if k != "case"}
    for o in d.get("objects", []):
        o["sections"] = {k: v for k, v in o["sections"].items()
                         if not v.startswith(("type=5 ", "type=1879048182 ", "type=6 ", "type=7 "))}
        # (.dynamic: the string table's size; .note: its msgpack, whose
        # strings are the renamed kernel's: both compared as notes text)
        o["notes"] = re.sub(r"0x[0-9a-f]+\tNT_AMDGPU_METADATA", "NT_AMDGPU_METADATA", o["notes"])
    return d


def main():
    if sys.argv[1] == "cases":
        names = sys.argv[4].split(",")
        json.dump(cases(sys.argv[2], names, int(sys.argv[5]), int(sys.argv[6]) if len(sys.argv) > 6 else 0),
                  open(sys.argv[3], "w"), indent=0)
        return
    if sys.argv[1] == "run":
        bindir, cs, out = sys.argv[2], json.load(open(sys.argv[3])), sys.argv[4]
        rename = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
        os.makedirs(out, exist_ok=True)
        for c in cs:
            if os.path.exists(os.path.join(out, f"{c['id']}.json")):
                continue
            d = digest(c, bindir, out, rename)
            json.dump({"case": c, **d}, open(os.path.join(out, f"{c['id']}.json"), "w"))
        return
    a, b = sys.argv[2], sys.argv[3]
    rename = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}  # applied to A's digests
    n = same = refused = diff = 0
    for f in sorted(os.listdir(a)):
        if not f.endswith(".json"):
            continue
        if not os.path.exists(os.path.join(b, f)):
            continue
        x = json.loads(norm(open(os.path.join(a, f)).read(), rename))
        y = json.load(open(os.path.join(b, f)))
        n += 1
        kx, ky = strip_hash(x), strip_hash(y)
        if kx == ky:
            if "refused" in kx:
                refused += 1
            else:
                same += 1
        else:
            diff += 1
            c = x["case"]
            what = [k for k in set(kx) | set(ky) if kx.get(k) != ky.get(k)]
            if "objects" in what and "objects" in kx and "objects" in ky:
                for ox, oy in zip(kx["objects"], ky["objects"]):
                    what += [k for k in ox if ox[k] != oy[k]]
                    what += [s for s in set(ox["sections"]) | set(oy["sections"])
                             if ox["sections"].get(s) != oy["sections"].get(s)]
            print("DIFF", c["id"], c["template"], c["op"], c["target"], c["dtype"], c["params"], what,
                  kx.get("refused"), ky.get("refused"))
    print(f"{n} cases: {same} identical, {refused} refused identically, {diff} different")


if __name__ == "__main__":
    main()
