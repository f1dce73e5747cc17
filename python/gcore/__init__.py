"""gcore from Python: the C API of libgcore.so (include/gcore.h) through
ctypes, with no compile step.

    import gcore
    with gcore.Context("cpu", db="tune.db") as ctx:   # or bundle="model.gcb"
        c = ctx.gemm(a, b)                              # numpy: C = A·Bᵀ on the CPU
        print(ctx.stats())

Context's numpy methods run on the CPU backend, where device memory is host
memory: the arrays' own memory is passed (copied only where an array is not
C-contiguous or not 64-byte aligned). The *_ptr methods take raw addresses
(device pointers on a GPU) and a stream, for connectors: gcore.pytorch
registers torch custom ops on them and swaps nn.Linear layers for
gcore-backed ones. Neither numpy nor torch is imported before it is used.

The library is found at $GCORE_LIB, else as lib/libgcore.so.1 or
libgcore.so.1 in a folder above this package (the source tree; an install's
PREFIX/lib), else by the system's loader."""
import ctypes
import os
import threading

__all__ = ["Context", "GcoreError", "version", "library_path", "F32", "F16", "BF16",
           "EPI_NONE", "EPI_ADD", "EPI_SWIGLU", "STATS", "aligned_empty"]

ABI = 1
F32, F16, BF16 = 0, 1, 2
EPI_NONE, EPI_ADD, EPI_SWIGLU = 0, 1, 2
# gcore_stats' counters, in index order (GCORE_STAT_*)
STATS = ("calls", "tuned", "untuned", "errors", "builds", "verified", "verify_failed")
CODES = {1: "EINVAL", 2: "ENOMEM", 3: "EIO", 4: "ECORRUPT", 5: "ENOTFOUND", 6: "EUNSUPPORTED",
         7: "EDEVICE", 8: "ECOMPILE", 9: "ELAUNCH", 10: "EVERIFY"}
# codes that say "gcore has no (correct) kernel for this": a connector may
# compute the result another way; any other code is a real error
UNSERVED = ("EUNSUPPORTED", "ENOTFOUND", "ECOMPILE", "EVERIFY")
ALIGN = 64
NUMPY = {F32: "float32", F16: "float16", BF16: "uint16"}  # bf16 travels as its bits


class GcoreError(RuntimeError):
    """A gcore call failed: .code (int), .name ("EUNSUPPORTED", ...) and the
    library's one-line message."""

    def __init__(self, code, msg):
        self.code, self.name = code, CODES.get(code, f"E{code}")
        super().__init__(f"{self.name}: {msg}")


_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def _candidates():
    env = os.environ.get("GCORE_LIB")
    if env:
        yield env
        return
    d = os.path.dirname(os.path.abspath(__file__))
    while True:
        for rel in (("lib", "libgcore.so.1"), ("libgcore.so.1",)):
            p = os.path.join(d, *rel)
            if os.path.exists(p):
                yield p
        up = os.path.dirname(d)
        if up == d:
            break
        d = up
    yield "libgcore.so.1"  # the system's loader (LD_LIBRARY_PATH, ldconfig)


def _declare(lib):
    c, i64, vp, f32 = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    sig = {
        "gcore_version": (ctypes.c_char_p, []),
        "gcore_version_number": (c, []),
        "gcore_abi_version": (c, []),
        "gcore_errmsg": (ctypes.c_char_p, []),
        "gcore_errname": (ctypes.c_char_p, [c]),
        "gcore_open": (c, [ctypes.c_char_p, c, ctypes.c_char_p, ctypes.POINTER(vp)]),
        "gcore_open_db": (c, [ctypes.c_char_p, c, ctypes.c_char_p, ctypes.c_char_p,
                              ctypes.POINTER(vp)]),
        "gcore_close": (None, [vp]),
        "gcore_target": (ctypes.c_char_p, [vp]),
        "gcore_stats": (c, [vp, ctypes.POINTER(i64), c]),
        "gcore_gemm": (c, [vp, c, c, c, c, i64, i64, i64, vp, vp, vp, vp]),
        "gcore_rmsnorm_gemm": (c, [vp, c, c, c, c, i64, i64, i64, vp, vp, f32, vp, vp, vp]),
        "gcore_rmsnorm": (c, [vp, c, c, c, i64, i64, vp, vp, f32, vp, vp]),
        "gcore_attention": (c, [vp, c, c, c, i64, i64, i64, i64, vp, vp, vp, vp, f32, vp, vp]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def library():
    """The loaded libgcore (ctypes.CDLL), loaded on first use."""
    global _lib, _lib_path
    with _lib_lock:
        if _lib is None:
            tried = []
            for p in _candidates():
                try:
                    lib = ctypes.CDLL(p)
                except OSError as ex:
                    tried.append(f"{p}: {ex}")
                    continue
                _declare(lib)
                if lib.gcore_abi_version() != ABI:
                    raise ImportError(f"{p} has ABI {lib.gcore_abi_version()}, this package "
                                      f"needs {ABI}")
                _lib, _lib_path = lib, p
                break
            else:
                raise ImportError("libgcore.so.1 not found (build it with make, or set "
                                  "GCORE_LIB): " + "; ".join(tried))
    return _lib


def library_path():
    library()
    return _lib_path


def version():
    return library().gcore_version().decode()


def _check(rc):
    if rc:
        raise GcoreError(rc, library().gcore_errmsg().decode(errors="replace"))


def _enc(s):
    return None if s is None else os.fsencode(s)


# ---- numpy ------------------------------------------------------------------

def _np_dtype_code(dt):
    import numpy as np
    dt = np.dtype(dt)
    if dt == np.float32:
        return F32
    if dt == np.float16:
        return F16
    raise TypeError(f"gcore takes float32 and float16 arrays (bf16 as uint16 with "
                    f"dtypes=...), not {dt}")


def _code(x, override):
    import numpy as np
    if override is not None:
        want = np.dtype(NUMPY[override])
        if x.dtype != want:
            raise TypeError(f"dtype code {override} needs {np.dtype(want)} arrays, not {x.dtype}")
        return override
    return _np_dtype_code(x.dtype)


def aligned_empty(shape, dtype):
    """An uninitialised C-contiguous numpy array whose data is 64-byte
    aligned (what gcore's kernels may assume)."""
    import numpy as np
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + n].view(dtype).reshape(shape)


def _aligned(x):
    """x itself where gcore can use its memory, else an aligned copy."""
    if x.flags.c_contiguous and x.ctypes.data % ALIGN == 0:
        return x
    y = aligned_empty(x.shape, x.dtype)
    y[...] = x
    return y


def _shape(x, want, what):
    if tuple(x.shape) != tuple(want):
        raise ValueError(f"{what} has shape {tuple(x.shape)}, want {tuple(want)}")


class _Out:
    """An output array: the caller's (used in place when aligned and
    contiguous, else computed in an aligned copy and written back; read
    first where the op reads it) or a fresh one."""

    def __init__(self, out, shape, dtype, read):
        import numpy as np
        self.user = out
        if out is None:
            self.buf = aligned_empty(shape, dtype)
            return
        _shape(out, shape, "out")
        if out.dtype != np.dtype(dtype):
            raise TypeError(f"out has dtype {out.dtype}, want {np.dtype(dtype)}")
        if out.flags.c_contiguous and out.ctypes.data % ALIGN == 0:
            self.buf = out
        else:
            self.buf = aligned_empty(shape, dtype)
            if read:
                self.buf[...] = out

    def done(self):
        if self.user is not None and self.buf is not self.user:
            self.user[...] = self.buf
        return self.buf if self.user is None else self.user


# ---- contexts ---------------------------------------------------------------

class Context:
    """A gcore context: one device and where its kernels come from.

    Context(backend="cpu", device=0, bundle=PATH) runs a bundle's kernels
    (template defaults, built on demand and verified, for shapes it lacks);
    Context(backend, device, db=PATH, target=None) builds kernels on demand
    from a tuning database (db=None: gcore's default database). One context
    may be used from many threads; calls release the GIL."""

    def __init__(self, backend="cpu", device=0, bundle=None, db=None, target=None):
        lib = library()
        h = ctypes.c_void_p()
        if bundle is not None:
            if db is not None or target is not None:
                raise ValueError("a bundle context takes no db or target (the bundle has both)")
            rc = lib.gcore_open(_enc(backend), device, _enc(bundle), ctypes.byref(h))
        else:
            rc = lib.gcore_open_db(_enc(backend), device, _enc(db), _enc(target), ctypes.byref(h))
        _check(rc)
        self._h, self._lib, self.backend, self.device = h, lib, backend, device

    def close(self):
        if getattr(self, "_h", None):
            self._lib.gcore_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _handle(self):
        if not self._h:
            raise ValueError("the context is closed")
        return self._h

    @property
    def target(self):
        return self._lib.gcore_target(self._handle()).decode()

    def stats(self):
        """{"calls", "tuned", "untuned", "errors", "builds", "verified",
        "verify_failed"}: counts since the context was opened."""
        v = (ctypes.c_int64 * len(STATS))()
        n = self._lib.gcore_stats(self._handle(), v, len(STATS))
        return {STATS[i]: v[i] for i in range(n)}

    # ---- raw pointers (device memory on GPUs), enqueued on `stream` ----------

    def gemm_ptr(self, epilogue, ta, tb, tc, m, n, k, a, b, c, stream=None):
        _check(self._lib.gcore_gemm(self._handle(), epilogue, ta, tb, tc, m, n, k, a, b, c,
                                    stream))

    def rmsnorm_gemm_ptr(self, epilogue, ta, tb, tc, m, n, k, a, norm, eps, b, c, stream=None):
        _check(self._lib.gcore_rmsnorm_gemm(self._handle(), epilogue, ta, tb, tc, m, n, k, a,
                                            norm, eps, b, c, stream))

    def rmsnorm_ptr(self, ta, tb, tc, m, n, x, w, eps, y, stream=None):
        _check(self._lib.gcore_rmsnorm(self._handle(), ta, tb, tc, m, n, x, w, eps, y, stream))

    def attention_ptr(self, ta, tb, tc, m, h, g, d, q, kc, vc, pos, scale, o, stream=None):
        _check(self._lib.gcore_attention(self._handle(), ta, tb, tc, m, h, g, d, q, kc, vc, pos,
                                         scale, o, stream))

    # ---- numpy arrays (the CPU backend) --------------------------------------

    def _host(self):
        if self.backend != "cpu":
            raise ValueError(f"numpy arrays are host memory: use a cpu context, not {self.backend} "
                             "(or the *_ptr methods with device pointers)")

    def gemm(self, a, b, out=None, epilogue=EPI_NONE, dtypes=(None, None, None)):
        """C = A·Bᵀ (EPI_NONE), C += A·Bᵀ (EPI_ADD: out is read and written),
        C = silu(A·Gᵀ)⊙(A·Uᵀ) with B = [G; U] (EPI_SWIGLU). A is [m,k], B
        [n,k] ([2n,k]); returns C [m,n] (out, where given), of A's dtype
        unless dtypes or out say otherwise."""
        self._host()
        m, k = a.shape
        n = b.shape[0] // (2 if epilogue == EPI_SWIGLU else 1)
        _shape(b, (n * (2 if epilogue == EPI_SWIGLU else 1), k), "b")
        ta, tb = _code(a, dtypes[0]), _code(b, dtypes[1])
        if out is not None:
            tc = _code(out, dtypes[2])
        else:
            tc = dtypes[2] if dtypes[2] is not None else ta
        if epilogue == EPI_ADD and out is None:
            raise ValueError("EPI_ADD adds into out: give it")
        o = _Out(out, (m, n), NUMPY[tc], read=epilogue == EPI_ADD)
        a, b = _aligned(a), _aligned(b)
        self.gemm_ptr(epilogue, ta, tb, tc, m, n, k, a.ctypes.data, b.ctypes.data, o.buf.ctypes.data)
        return o.done()

    def rmsnorm_gemm(self, a, norm, b, eps=1e-5, out=None, swiglu=False):
        """gemm of rmsnorm(A) = A / sqrt(mean(A²) + eps) ⊙ norm[k]; with
        swiglu, B is [2n,k] as in gemm's EPI_SWIGLU. Same dtypes throughout."""
        self._host()
        m, k = a.shape
        n = b.shape[0] // (2 if swiglu else 1)
        _shape(b, (n * (2 if swiglu else 1), k), "b")
        _shape(norm, (k,), "norm")
        t = _code(a, None)
        if norm.dtype != b.dtype:
            raise TypeError(f"norm has dtype {norm.dtype}, want b's {b.dtype}")
        o = _Out(out, (m, n), a.dtype, read=False)
        a, b, norm = _aligned(a), _aligned(b), _aligned(norm)
        self.rmsnorm_gemm_ptr(EPI_SWIGLU if swiglu else EPI_NONE, t, _code(b, None), t, m, n, k,
                              a.ctypes.data, norm.ctypes.data, eps, b.ctypes.data, o.buf.ctypes.data)
        return o.done()

    def rmsnorm(self, x, w, eps=1e-5, out=None):
        """Y = X / sqrt(mean(X²) + eps) ⊙ W, row by row."""
        self._host()
        m, n = x.shape
        _shape(w, (n,), "w")
        t = _code(x, None)
        o = _Out(out, (m, n), x.dtype, read=False)
        x, w = _aligned(x), _aligned(w)
        self.rmsnorm_ptr(t, _code(w, None), t, m, n, x.ctypes.data, w.ctypes.data, eps,
                         o.buf.ctypes.data)
        return o.done()

    def attention(self, q, kc, vc, pos0, heads, kv_heads, scale=None, out=None):
        """Causal attention of q [m, heads·d] over the caches kc, vc
        [S, kv_heads·d] (S >= pos0 + m): row i sits at position pos0 + i."""
        import numpy as np
        self._host()
        m = q.shape[0]
        d = q.shape[1] // heads
        _shape(q, (m, heads * d), "q")
        if kc.shape != vc.shape or kc.ndim != 2 or kc.shape[1] != kv_heads * d or \
                kc.shape[0] < pos0 + m:
            raise ValueError(f"kc, vc have shapes {kc.shape}, {vc.shape}; want [S >= {pos0 + m}, "
                             f"{kv_heads * d}]")
        t = _code(q, None)
        pos = aligned_empty((1,), np.int32)
        pos[0] = pos0
        o = _Out(out, (m, heads * d), q.dtype, read=False)
        q, kc, vc = _aligned(q), _aligned(kc), _aligned(vc)
        self.attention_ptr(t, _code(kc, None), t, m, heads, kv_heads, d, q.ctypes.data,
                           kc.ctypes.data, vc.ctypes.data, pos.ctypes.data,
                           scale if scale is not None else 1.0 / np.sqrt(d), o.buf.ctypes.data)
        return o.done()
