"""Tensor factories: tensor, zeros, ones, full, empty, arange, linspace, logspace, eye, rand*, *_like, from_numpy, dlpack."""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.symbolic import SymInt
from ...runtime.devices import check_device, on_device
from ...runtime.symbolic_values import arange as symbolic_arange, filled, symbolic_size
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

# a NumPy generator for internal test inputs (gradgradcheck's random grad_outputs); reseeded by manual_seed.  The
# random functions (rand, randn, ...) draw from jitgrad.Generator objects instead (library/creation/sampling.py).


def _infer_dtype(data) -> dt.DType:
    """torch.tensor's inference: any float -> the default float dtype, else any int -> int64, else bool; tensors (arrays) in the
    list promote with each other and with the scalars like 0-dim tensors (``[tensor(1., float64), 2.]`` is float64)."""
    kinds = set()
    tensors = []

    def walk(x):
        if isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, Tensor):
            tensors.append(x.dtype)
        elif isinstance(x, np.ndarray):
            tensors.append(dt.from_numpy_dtype(x.dtype))
        elif isinstance(x, (bool, np.bool_)):
            kinds.add(0)
        elif isinstance(x, (int, np.integer)):
            kinds.add(1)
        elif isinstance(x, (float, np.floating)):
            kinds.add(2)
        else:
            raise TypeError(f"jitgrad.tensor: could not infer dtype of {type(x).__name__}")
    walk(data)
    if tensors:
        return dt.result_type([(0, d) for d in tensors], [{0: True, 1: 1, 2: 1.0}[k] for k in kinds])
    return {0: dt.bool_, 1: dt.int64, 2: dt.DEFAULT_FLOAT}[max(kinds)] if kinds else dt.DEFAULT_FLOAT


_FROM_NP = dt._FROM_NP
_ndarray, _np_array = np.ndarray, np.array      # (NumPy's module has a __getattr__: no specialised read of it)


def as_array(data, dtype=None) -> np.ndarray:
    d = dt.as_dtype(dtype) if dtype is not None else None
    if isinstance(data, Tensor):
        a = data._data
        return a.astype(d.np) if d is not None and a.dtype != d.np else a.copy()
    if isinstance(data, _ndarray):
        if d is None:
            d = _FROM_NP.get(data.dtype) or (
                dt.float64 if data.dtype.kind == "f" else dt.int64 if data.dtype.kind in "iu" else None)
            if d is None:
                raise TypeError(f"jitgrad.tensor: unsupported NumPy dtype {data.dtype}")
        return _np_array(data, dtype=d.np, copy=True)
    if isinstance(data, (list, tuple)):
        data = [x._data if isinstance(x, Tensor) else x for x in data] if any(isinstance(x, Tensor) for x in data) else data
    if d is None:
        d = _infer_dtype(data) if not isinstance(data, np.generic) else dt.as_dtype(data.dtype)
    try:
        a = np.array(data, dtype=d.np)
    except ValueError as e:
        raise ValueError(f"jitgrad.tensor: {e}") from None
    if a.dtype == object:
        raise TypeError("jitgrad.tensor: ragged nested sequences are not supported")
    return a


@published("jitgrad")
def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False, **torch_kw) -> Tensor:
    """Construct a tensor by copying ``data`` (nested lists, scalars, NumPy arrays).

    >>> import jitgrad as jg
    >>> jg.tensor([[0.1, 1.2], [2.2, 3.1]])
    tensor([[0.1000, 1.2000],
            [2.2000, 3.1000]])
    """
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(tensor, 'tensor', (data, dtype, device, requires_grad, pin_memory), {}, torch_kw)
    if device is not None:
        check_device(device)
    if isinstance(data, Tensor) and type(data._data) is not _ndarray:   # a traced value (inside @compile)
        from ...runtime.grad_mode import no_grad
        with no_grad():
            t = (data if dtype is None else data.to(dtype)).detach().clone()
    else:
        src = data._host() if isinstance(data, Tensor) else data
        t = Tensor._make(as_array(src, dtype))
        if device is not None:
            t = on_device(t, device)
    if requires_grad:
        t.requires_grad_(True)
    return t


@published("jitgrad")
def as_tensor(data, dtype=None, device=None, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(as_tensor, 'as_tensor', (data, dtype, device), {}, torch_kw)
    if isinstance(data, Tensor) and (dtype is None or data.dtype is dt.as_dtype(dtype)):
        return data
    if isinstance(data, np.ndarray) and (dtype is None or data.dtype == dt.as_dtype(dtype).np) and data.dtype in dt._FROM_NP:
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


@published("jitgrad")
def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``ndarray`` (writes to either are visible in both)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    dt.from_numpy_dtype(ndarray.dtype)
    return Tensor._make(ndarray)


@published("jitgrad")
def from_dlpack(ext) -> Tensor:
    """Zero-copy import of any object with ``__dlpack__`` (NumPy, PyTorch, JAX arrays, jitgrad tensors)."""
    if isinstance(ext, Tensor):
        return Tensor._make(ext._data)
    return from_numpy(np.from_dlpack(ext))


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(s if type(s) is SymInt else int(s) for s in size)     # (a trace's sizes stay symbolic)


def _filled(shape, value, dtype, requires_grad, device):
    """A factory's tensor: a NumPy constant, or in a trace with symbolic sizes an op (runtime/symbolic_values)."""
    if symbolic_size(shape):
        t = filled(shape, value, dtype.np)
        return t.requires_grad_(True) if requires_grad else t
    return _new(np.full(shape, value, dtype.np), requires_grad, device)


def _new(arr, requires_grad, device=None):
    t = on_device(Tensor._make(arr), device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _dt(dtype, default=None):
    """``dtype`` as a DType; None: ``default``, else the default float dtype (torch.get_default_dtype())."""
    if dtype is not None:
        return dt.as_dtype(dtype)
    return default if default is not None else dt.DEFAULT_FLOAT


@published("jitgrad")
def zeros(*size, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(zeros, 'zeros', (*size,), {"dtype": dtype, "device": device, "requires_grad": requires_grad}, torch_kw)
    check_device(device)
    shape = _size(size)
    if symbolic_size(shape):
        return _filled(shape, 0, _dt(dtype), requires_grad, device)
    return _new(np.zeros(shape, _dt(dtype).np), requires_grad, device)


@published("jitgrad")
def ones(*size, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(ones, 'ones', (*size,), {"dtype": dtype, "device": device, "requires_grad": requires_grad}, torch_kw)
    check_device(device)
    shape = _size(size)
    if symbolic_size(shape):
        return _filled(shape, 1, _dt(dtype), requires_grad, device)
    return _new(np.ones(shape, _dt(dtype).np), requires_grad, device)


@published("jitgrad")
def empty(*size, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(empty, 'empty', (*size,), {"dtype": dtype, "device": device, "requires_grad": requires_grad}, torch_kw)
    check_device(device)
    shape = _size(size)
    if symbolic_size(shape):
        return _filled(shape, 0, _dt(dtype), requires_grad, device)
    return _new(np.empty(shape, _dt(dtype).np), requires_grad, device)


@published("jitgrad")
def full(size, fill_value, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(full, 'full', (size, fill_value, dtype, device, requires_grad), {}, torch_kw)
    check_device(device)
    if dtype is None:
        dtype = dt.result_type([], [fill_value])
    shape = _size((size,))
    if symbolic_size(shape):
        return _filled(shape, fill_value, _dt(dtype), requires_grad, device)
    return _new(np.full(shape, fill_value, _dt(dtype).np), requires_grad, device)


@published("jitgrad")
def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(arange, 'arange', (start, end, step, dtype, device, requires_grad), {}, torch_kw)
    check_device(device)
    if end is None:
        start, end = 0, start
    if symbolic_size((start, end, step)) and all(type(x) in (int, SymInt) for x in (start, end, step)):
        # a symbolic length (``arange(T)`` in a trace): an op, sized per call
        if step <= 0:
            raise RuntimeError("upper bound and larger bound inconsistent with step sign")
        n = (end - start + step - 1) // step
        t = symbolic_arange(n if n > 0 else 0)
        t = t * step if step != 1 else t
        t = t + start if type(start) is SymInt or start != 0 else t
        t = t.to(_dt(dtype, dt.int64))
        return t.requires_grad_(True) if requires_grad else t
    if dtype is None:
        dtype = dt.result_type([], [start, end, step])
    return _new(np.arange(start, end, step).astype(_dt(dtype).np), requires_grad, device)


@published("jitgrad")
def linspace(start, end, steps, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(linspace, 'linspace', (start, end, steps, dtype, device, requires_grad), {}, torch_kw)
    check_device(device)
    return _new(np.linspace(start, end, int(steps)).astype(_dt(dtype).np), requires_grad, device)


@published("jitgrad")
def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    """``steps`` values ``base ** x`` for ``x`` evenly spaced from ``start`` to ``end`` (the default float dtype
    unless ``dtype`` is given)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(logspace, 'logspace', (start, end, steps, base, dtype, device, requires_grad), {}, torch_kw)
    check_device(device)
    return _new(np.logspace(start, end, int(steps), base=base).astype(_dt(dtype).np), requires_grad, device)


@published("jitgrad")
def eye(n, m=None, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(eye, 'eye', (n, m, dtype, device, requires_grad), {}, torch_kw)
    check_device(device)
    return _new(np.eye(n, m, dtype=_dt(dtype).np), requires_grad, device)


def _like(t, dtype):
    return t.shape, (dt.as_dtype(dtype) if dtype is not None else t.dtype)


def _like_device(t, device):
    """``*_like`` factories default to the input's device, as torch's do."""
    return device if device is not None else (None if t.device.type == "cpu" else t.device)


@published("jitgrad")
def zeros_like(input, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(zeros_like, 'zeros_like', (input, dtype, device, requires_grad), {}, torch_kw)
    shape, d = _like(input, dtype)
    device = _like_device(input, device)
    return _new(np.zeros(shape, d.np), requires_grad, device)


@published("jitgrad")
def ones_like(input, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(ones_like, 'ones_like', (input, dtype, device, requires_grad), {}, torch_kw)
    shape, d = _like(input, dtype)
    device = _like_device(input, device)
    return _new(np.ones(shape, d.np), requires_grad, device)


@published("jitgrad")
def empty_like(input, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(empty_like, 'empty_like', (input, dtype, device, requires_grad), {}, torch_kw)
    shape, d = _like(input, dtype)
    device = _like_device(input, device)
    return _new(np.empty(shape, d.np), requires_grad, device)


@published("jitgrad")
def full_like(input, fill_value, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(full_like, 'full_like', (input, fill_value, dtype, device, requires_grad), {}, torch_kw)
    shape, d = _like(input, dtype)
    device = _like_device(input, device)
    return _new(np.full(shape, fill_value, d.np), requires_grad, device)


# ---- Tensor's constructor and the methods that make tensors from data ----------------------------------------

@published("Tensor", name="__init__")
def _tensor_init(self, data=None, *, dtype=None, requires_grad=False):
    """``jitgrad.Tensor(data)``: like ``torch.Tensor(data)``, a copy in the default float dtype (prefer
    ``jitgrad.tensor``, which infers the dtype)."""
    src = Tensor._make(as_array(data if data is not None else [], dtype or dt.DEFAULT_FLOAT))
    for name in Tensor.__slots__[:-1]:          # all slots but __weakref__ (and those left unset)
        if hasattr(src, name):
            object.__setattr__(self, name, getattr(src, name))
    self.requires_grad = requires_grad


@published("Tensor")
def new_tensor(self, data, dtype=None) -> Tensor:
    """A new tensor copying ``data``, with this tensor's dtype unless ``dtype`` is given."""
    return tensor(data, dtype=dtype or self.dtype)


@published("Tensor", name="__reduce__")
def _tensor_reduce(self):
    """Pickling: the values, rebuilt by :func:`tensor`; a leaf keeps ``requires_grad`` across pickling (torch), a
    non-leaf comes back as a leaf without it."""
    dev = self.device
    return (tensor, (self._host().copy(), None, None if dev.type == "cpu" else str(dev),
                     self._requires_grad and self.grad_fn is None), None)


from .sampling import rand, randn, randint, randperm, rand_like, randn_like  # noqa: E402,F401  (re-exported)
from ...runtime.generator import manual_seed, seed  # noqa: E402,F401
