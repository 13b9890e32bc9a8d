"""Element-wise results that are never differentiated: ``isin``, ``signbit`` (booleans) and ``nextafter``
(floats whose derivative torch does not implement: backward through it raises NotImplementedError).

They run eagerly on NumPy (inside ``@jg.compile`` they raise the usual traced-value error): their values do not
depend smoothly on the input, so there is nothing for the compiled path to fuse.
"""
from __future__ import annotations

import numpy as np

from .tensor import Tensor
from .traced import is_traced, traced_read
from .torch_kwargs import torch_kwargs


def _host(t, what):
    if is_traced(t):
        traced_read(t, what)
    return np.asarray(t.numpy(force=True)) if isinstance(t, Tensor) else np.asarray(t)


def isin(elements, test_elements, *, assume_unique=False, invert=False, **torch_kw):
    """True where an element of ``elements`` is in ``test_elements`` (``invert``: where it is not)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(isin, "isin", (elements, test_elements),
                            {"assume_unique": assume_unique, "invert": invert}, torch_kw)
    a = _host(elements, "isin()")
    b = _host(test_elements, "isin()")
    return Tensor._make(np.isin(a, b, assume_unique=assume_unique, invert=invert))


def signbit(input, **torch_kw):
    """True where the sign bit is set (negative numbers, -0.0, NaNs with the sign bit)."""
    if torch_kw:
        return torch_kwargs(signbit, "signbit", (input,), {}, torch_kw)
    return Tensor._make(np.signbit(_host(input, "signbit()")))


def nextafter(input, other, **torch_kw):
    """The next float after ``input`` towards ``other`` (element-wise, broadcast).  Recorded with a node whose
    backward raises NotImplementedError, as torch (it has no derivative formula for nextafter)."""
    if torch_kw:
        return torch_kwargs(nextafter, "nextafter", (input, other), {}, torch_kw)
    return _Nextafter.apply(input, other) if isinstance(input, Tensor) and input.requires_grad or \
        isinstance(other, Tensor) and other.requires_grad else _nextafter_value(input, other)


def _nextafter_value(input, other):
    a = _host(input, "nextafter()")
    b = _host(other, "nextafter()")
    dt = np.result_type(a.dtype, b.dtype)
    return Tensor._make(np.nextafter(a.astype(dt), b.astype(dt)))


def _make_nextafter_fn():
    from .function import Function

    class Nextafter(Function):
        @staticmethod
        def forward(ctx, input, other):
            return _nextafter_value(input, other)

        @staticmethod
        def backward(ctx, grad):
            raise NotImplementedError("the derivative for 'nextafter' is not implemented.")
    return Nextafter


_Nextafter = _make_nextafter_fn()

METHODS = ["isin", "signbit", "nextafter"]
FUNCTION_ONLY = ("isin",)       # torch has no Tensor.isin
__all__ = METHODS
