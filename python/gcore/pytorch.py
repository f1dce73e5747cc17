"""gcore in PyTorch: custom ops for the GEMM family that run gcore's tuned
kernels on torch tensors, on PyTorch's current stream, and a helper that
swaps a model's nn.Linear layers for gcore-backed ones.

    import gcore.pytorch as gp
    gp.configure(db="tune.db")          # or bundle="model.gcb"; default: gcore's default db
    y = torch.ops.gcore.gemm(x, w)      # x [m,k], w [n,k] (nn.Linear's weight): x·wᵀ
    swapped = gp.swap_linear(model)     # every nn.Linear, weights shared, not copied
    ...
    gp.stats()                          # gcore's counters and the fallbacks to torch
    swapped.restore()

The ops are torch.library custom ops (torch.compile and CUDA graphs see one
opaque call; each has a fake implementation for shapes). A call gcore cannot
serve (a dtype or device it has no kernel for, a shape no template serves,
a default kernel that failed verification, no compiler to build one) is
computed by torch instead and counted in stats()["fallback"], by reason:
never a wrong result. Tensors need not be contiguous or aligned: they are
copied where gcore needs it. A first call of a shape may build and verify
a kernel (seconds, once; cached on disk): warm up before capturing graphs.

Backends: CUDA tensors use the "cuda" backend ("hip" on a ROCm build of
torch), CPU tensors the "cpu" one; one context per device, opened on first
use with what configure() says."""
import threading

import torch

from . import (BF16, CODES, EPI_ADD, EPI_NONE, EPI_SWIGLU, F16, F32, UNSERVED, Context, GcoreError,
               library)

__all__ = ["configure", "context", "stats", "reset_fallbacks", "mm", "swap_linear", "GcoreLinear"]

_DT = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}
_lock = threading.Lock()
_config = {"bundle": None, "db": None, "target": None}
_contexts = {}
_fallback = {}
_devs = {}  # (device type, index) → (the context's handle, index, on cuda): the call path's cache
_lib = library()
# PyTorch's current stream of a device as a raw handle: the private call
# Triton and Inductor use (a fraction of current_stream()'s cost), else that
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
    (lambda i: torch.cuda.current_stream(i).cuda_stream)


def configure(bundle=None, db=None, target=None):
    """Where the ops' kernels come from: a bundle file, or a tuning database
    (None: gcore's default database) and a target (None: the device's own).
    Closes contexts opened before, so call it before the ops run."""
    with _lock:
        _config.update(bundle=bundle, db=db, target=target)
        _devs.clear()
        for c in _contexts.values():
            c.close()
        _contexts.clear()


def _backend(device):
    if device.type == "cpu":
        return "cpu", 0
    if device.type == "cuda":
        return ("hip" if getattr(torch.version, "hip", None) else "cuda"), \
            (device.index if device.index is not None else torch.cuda.current_device())
    return None, None


def context(device):
    """The gcore Context of a torch device (opened on first use), or None
    for a device type gcore does not run on."""
    backend, index = _backend(torch.device(device))
    if backend is None:
        return None
    with _lock:
        c = _contexts.get((backend, index))
        if c is None:
            cfg = _config
            c = Context(backend, index, bundle=cfg["bundle"]) if cfg["bundle"] else \
                Context(backend, index, db=cfg["db"], target=cfg["target"])
            _contexts[(backend, index)] = c
        return c


def stats():
    """{"gcore": {device: the context's counters}, "fallback": {reason:
    calls computed by torch}}."""
    with _lock:
        ctxs = dict(_contexts)
        fb = dict(_fallback)
    return {"gcore": {f"{b}:{i}": c.stats() for (b, i), c in ctxs.items()}, "fallback": fb}


def reset_fallbacks():
    with _lock:
        _fallback.clear()


def _count(reason):
    with _lock:
        _fallback[reason] = _fallback.get(reason, 0) + 1


def _ready(t):
    """t as gcore takes it: contiguous and 64-byte aligned (a copy where not)."""
    if not t.is_contiguous():
        t = t.contiguous()
    return t if t.data_ptr() % 64 == 0 else t.clone()


def _dev(device):
    """(handle, index, cuda) of device's context, or None where gcore does
    not run; no lock once the context is open."""
    key = (device.type, device.index)
    d = _devs.get(key)
    if d is None:
        backend, index = _backend(device)
        if backend is None:
            return None
        c = context(device)
        d = _devs[key] = (c._handle(), index, device.type == "cuda")
    return d


def _served(rc):
    """After a call: True when it ran; False (counted) when gcore has no
    kernel that serves it; a GcoreError for a real error."""
    if not rc:
        return True
    name = CODES.get(rc, "")
    if name not in UNSERVED:
        raise GcoreError(rc, _lib.gcore_errmsg().decode(errors="replace"))
    _count(name)
    return False


def _usable(*ts):
    """Whether gcore can take these tensors (else the reason is counted)."""
    dev = ts[0].device
    for t in ts:
        if t.device != dev:
            _count("device")
            return False
        if t.dtype not in _DT:
            _count("dtype")
            return False
        if not t.numel():
            _count("empty")
            return False
    return True


# ---- the references torch computes when gcore does not ------------------------

def _mm(a, b):
    return torch.matmul(a, b.to(a.dtype).t())


def _swiglu(a, w):
    n = w.shape[0] // 2
    return torch.nn.functional.silu(_mm(a, w[:n])) * _mm(a, w[n:])


def _rmsnorm(a, norm, eps):
    x = a.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm.float()).to(a.dtype)


# ---- the ops -----------------------------------------------------------------

def _gemm_into(epi, a, b, c):
    """gcore's kernel of epilogue epi for c from a and b: True, or False
    (counted) where torch must compute it."""
    if not _usable(a, b, c):
        return False
    d = _dev(a.device)
    if d is None:
        _count("device")
        return False
    a, b = _ready(a), _ready(b)
    m, k = a.shape
    return _served(_lib.gcore_gemm(d[0], epi, _DT[a.dtype], _DT[b.dtype], _DT[c.dtype], m, c.shape[1], k,
                                   a.data_ptr(), b.data_ptr(), c.data_ptr(),
                                   _raw_stream(d[1]) if d[2] else None))


def mm(a, b):
    """a [m,k] · b[n,k]ᵀ → [m,n] of a's dtype, called directly (what
    torch.ops.gcore.gemm runs, without the dispatcher's cost: eager code)."""
    c = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
    return c if _gemm_into(EPI_NONE, a, b, c) else _mm(a, b)


@torch.library.custom_op("gcore::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [m,k] · b[n,k]ᵀ → [m,n] of a's dtype (nn.Linear without bias)."""
    return mm(a, b)


@gemm.register_fake
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[0]))


@torch.library.custom_op("gcore::gemm_add", mutates_args=("c",))
def gemm_add(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> None:
    """c += a · bᵀ in place (a residual added in the GEMM's epilogue)."""
    cc = _ready(c)
    if _gemm_into(EPI_ADD, a, b, cc):
        if cc.data_ptr() != c.data_ptr():
            c.copy_(cc)
    else:
        c.add_(_mm(a, b).to(c.dtype))


@gemm_add.register_fake
def _(a, b, c):
    return None


@torch.library.custom_op("gcore::gemm_swiglu", mutates_args=())
def gemm_swiglu(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """silu(a·gᵀ) ⊙ (a·uᵀ) with w = [g; u] ([2n,k]) → [m,n]."""
    c = a.new_empty((a.shape[0], w.shape[0] // 2))
    if not _gemm_into(EPI_SWIGLU, a, w, c):
        c.copy_(_swiglu(a, w))
    return c


@gemm_swiglu.register_fake
def _(a, w):
    return a.new_empty((a.shape[0], w.shape[0] // 2))


def _norm_gemm_into(epi, a, norm, b, eps, c):
    if not _usable(a, norm, b, c):
        return False
    d = _dev(a.device)
    if d is None:
        _count("device")
        return False
    a, norm, b = _ready(a), _ready(norm), _ready(b)
    m, k = a.shape
    return _served(_lib.gcore_rmsnorm_gemm(d[0], epi, _DT[a.dtype], _DT[b.dtype], _DT[c.dtype], m, c.shape[1],
                                           k, a.data_ptr(), norm.data_ptr(), eps, b.data_ptr(),
                                           c.data_ptr(), _raw_stream(d[1]) if d[2] else None))


@torch.library.custom_op("gcore::rmsnorm_gemm", mutates_args=())
def rmsnorm_gemm(a: torch.Tensor, norm: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """rmsnorm(a; norm, eps) · bᵀ → [m,n], the norm in the GEMM's pass."""
    c = a.new_empty((a.shape[0], b.shape[0]))
    if norm.dtype != b.dtype or not _norm_gemm_into(EPI_NONE, a, norm, b, eps, c):
        c.copy_(_mm(_rmsnorm(a, norm, eps), b))
    return c


@rmsnorm_gemm.register_fake
def _(a, norm, b, eps):
    return a.new_empty((a.shape[0], b.shape[0]))


@torch.library.custom_op("gcore::rmsnorm_gemm_swiglu", mutates_args=())
def rmsnorm_gemm_swiglu(a: torch.Tensor, norm: torch.Tensor, w: torch.Tensor,
                        eps: float) -> torch.Tensor:
    """gemm_swiglu of rmsnorm(a; norm, eps) → [m,n]."""
    c = a.new_empty((a.shape[0], w.shape[0] // 2))
    if norm.dtype != w.dtype or not _norm_gemm_into(EPI_SWIGLU, a, norm, w, eps, c):
        c.copy_(_swiglu(_rmsnorm(a, norm, eps), w))
    return c


@rmsnorm_gemm_swiglu.register_fake
def _(a, norm, w, eps):
    return a.new_empty((a.shape[0], w.shape[0] // 2))


# ---- nn.Linear ------------------------------------------------------------------

class GcoreLinear(torch.nn.Module):
    """An nn.Linear computed by gcore::gemm; it shares the original's weight
    and bias (nothing is copied) and keeps the original for restore."""

    def __init__(self, linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        object.__setattr__(self, "_original", linear)  # not a submodule: no second copy in state_dict

    def forward(self, x):
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            _count("autograd")  # the ops have no backward: a graph to train through stays torch's
            return torch.nn.functional.linear(x, self.weight, self.bias)
        x2 = x.reshape(-1, self.in_features)
        # eager: the op's code called directly; traced (torch.compile): the op
        y = torch.ops.gcore.gemm(x2, self.weight) if torch.compiler.is_compiling() else mm(x2, self.weight)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}, gcore"


class Swapped:
    """What swap_linear did: .names (the swapped modules), .restore()."""

    def __init__(self, model, names):
        self.model, self.names = model, names

    def restore(self):
        for name in self.names:
            parent, _, attr = name.rpartition(".")
            owner = self.model.get_submodule(parent) if parent else self.model
            owner._modules[attr] = getattr(owner, attr)._original
        self.names = []


def swap_linear(model, include=None):
    """Replace every nn.Linear of model (for which include(name, module) is
    true, when given) by a GcoreLinear sharing its parameters. Returns a
    Swapped whose restore() puts the originals back."""
    names = [n for n, mod in model.named_modules()
             if type(mod) is torch.nn.Linear and (include is None or include(n, mod))]
    for name in names:
        parent, _, attr = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        owner._modules[attr] = GcoreLinear(getattr(owner, attr))
    return Swapped(model, names)
