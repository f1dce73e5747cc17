"""gpu_cluster_probe.py — how many 2-block clusters of the TMA gemm_wgmma kernel the driver can keep
resident (cuOccupancyMaxActiveClusters), and the kernel's time at several
persistent-grid caps (gcore-run --op, fp64-verified)."""
import ctypes, os, sqlite3, subprocess, sys, re
cu = ctypes.CDLL("libcuda.so.1")
cu.cuInit(0)
dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), 0)
ctx = ctypes.c_void_p(); cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cu.cuCtxSetCurrent(ctx)
b = "/tmp/pc.gcb"
subprocess.run(["bin/gcore-gen", "--target", "sm_90a", "--op", "gemm", "--dtype", "f16", "--m", "4096", "--n", "4096",
                "--k", "4096", "--force", "gemm_wgmma:TMA=1,CLUSTER=2", "-o", b, "-q"], check=True)
blob, sym = sqlite3.connect(b).execute("SELECT o.blob, d.symbol FROM dispatch d JOIN code_objects o "
                                           "ON o.id=d.code_id WHERE d.m_lo<=4096 AND 4096<=d.m_hi").fetchone()
mod = ctypes.c_void_p(); buf = ctypes.create_string_buffer(bytes(blob), len(blob))
print("load", cu.cuModuleLoadData(ctypes.byref(mod), buf))
fn = ctypes.c_void_p(); print("fn", cu.cuModuleGetFunction(ctypes.byref(fn), mod, sym.encode()))
sh = 4 * (128 + 256) * 64 * 2 + 1024  # the @shmem of the defaults: STAGES=4, BM=128, BN=256, BK=64
print("attr", cu.cuFuncSetAttribute(fn, 8, sh))
class Cfg(ctypes.Structure):
    _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint), ("bx", ctypes.c_uint),
                ("by", ctypes.c_uint), ("bz", ctypes.c_uint), ("sh", ctypes.c_uint), ("st", ctypes.c_void_p),
                ("attrs", ctypes.c_void_p), ("na", ctypes.c_uint)]
n = ctypes.c_int(-1)
r = cu.cuOccupancyMaxActiveClusters(ctypes.byref(n), fn, ctypes.byref(Cfg(132, 1, 1, 384, 1, 1, sh, None, None, 0)))
print("cuOccupancyMaxActiveClusters rc", r, "clusters", n.value)
src = open("templates/gpu/gemm_wgmma.cu").read()
for cap in (132, 128, 120, 112):
    d = f"/tmp/tpl{cap}"
    subprocess.run(["rm", "-rf", d]); subprocess.run(["cp", "-r", "templates", d])
    open(f"{d}/gpu/gemm_wgmma.cu", "w").write(src.replace("PERSIST * (132 / CLUSTER)", f"PERSIST * ({cap} / CLUSTER)"))
    for v in ("TMA=1,CLUSTER=2", "TMA=1,CLUSTER=1"):
        subprocess.run(["bin/gcore-gen", "--templates", d, "--target", "sm_90a", "--op", "gemm", "--dtype", "f16",
                        "--m", "4096", "--n", "4096", "--k", "4096", "--force", "gemm_wgmma:" + v, "-o", b, "-q"], check=True)
        o = subprocess.run(["bin/gcore-run", "-b", b, "--backend", "cuda", "--op", "gemm", "--dtype", "f16", "--m", "4096",
                            "--n", "4096", "--k", "4096", "--min-time", "0.1"], capture_output=True, text=True, timeout=60)
        print(cap, v, o.returncode, " ".join(l for l in (o.stdout + o.stderr).splitlines() if re.search("time|verif|err|TFLOP", l, re.I))[:300])
