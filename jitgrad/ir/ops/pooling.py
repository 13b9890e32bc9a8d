"""``max_pool_indices``: where each max-pooling window's maximum is, as torch's ``return_indices`` has it.

``max_pool_indices(x; kernel, stride, padding, dilation)``: ``x (N, C, *S)`` -> int64 ``(N, C, *S_out)``, each
entry the row-major index into the input's spatial plane ``S`` (not the window) of its window's maximum.
``padding`` is one ``(lo, hi)`` pair per spatial dim; ``hi`` includes ``ceil_mode``'s overhang, so a window may
reach past the input, and those positions never win.  Ties follow torch's kernel: the first maximum in the
window (row-major), or the last NaN when the window holds NaNs; a window of only ``-inf`` picks its first
position inside the input.

The op is not differentiable (integer output).  ``F.max_pool2d`` gathers the values with these indices, so its
gradient is the gather's (a scatter-add into the winners) and differentiates again to any order.  The NumPy
kernel reads the padded input through ``as_strided`` windows and reduces them with ``max`` and ``argmax``:
no loop over pixels or samples.  Compiled, it is a host step.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .. import dtypes as dt
from .conv import out_size
from .opdef import Aval, OpDef, OpError, fmt_shape, register


def _rule(avals, params):
    x, = avals
    nd = x.ndim - 2
    if nd < 1:
        raise OpError(f"max_pool_indices: expected an input (N, C, *spatial), got {fmt_shape(x.shape)}")
    k, s, d, pad = params["kernel"], params["stride"], params["dilation"], params["padding"]
    for name, v in (("kernel", k), ("stride", s), ("dilation", d)):
        if type(v) is not tuple or len(v) != nd or any(type(i) is not int or i < 1 for i in v):
            raise OpError(f"max_pool_indices: {name} must be a tuple of {nd} positive ints, got {v!r}")
    if type(pad) is not tuple or len(pad) != nd or any(
            type(p) is not tuple or len(p) != 2 or any(type(i) is not int or i < 0 for i in p) for p in pad):
        raise OpError(f"max_pool_indices: padding must be a tuple of {nd} (lo, hi) pairs of non-negative ints, got "
                      f"{pad!r}")
    out = out_size(x.shape[2:], k, s, pad, d)
    if any(o < 1 for o in out):
        raise OpError(f"max_pool_indices: input {fmt_shape(x.shape)} gives output size {fmt_shape(out)}")
    return [Aval(x.shape[:2] + out, dt.int64)]


def _windows(a, k, out, stride, dilation):
    """The ``(..., *out, *k)`` windows of ``a`` over its last ``len(k)`` dims (a read-only view)."""
    nd = len(k)
    st = a.strides
    lead = a.ndim - nd
    return as_strided(a, a.shape[:lead] + tuple(out) + tuple(k),
                      st[:lead] + tuple(st[lead + i] * stride[i] for i in range(nd))
                      + tuple(st[lead + i] * dilation[i] for i in range(nd)), writeable=False)


def _max_pool_indices(x, *, kernel, stride, padding, dilation):
    nd = len(kernel)
    size = x.shape[2:]
    out = out_size(size, kernel, stride, padding, dilation)
    K = math.prod(kernel)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(size, padding))
    inside = tuple(slice(lo, lo + n) for n, (lo, _) in zip(size, padding))
    xp = np.full(x.shape[:2] + padded, low, x.dtype)
    xp[(slice(None), slice(None)) + inside] = x
    valid = np.zeros(padded, bool)
    valid[inside] = True
    win = _windows(xp, kernel, out, stride, dilation).reshape(x.shape[:2] + out + (K,))
    ok = _windows(valid, kernel, out, stride, dilation).reshape(out + (K,))
    m = win.max(axis=-1, keepdims=True)
    j = ((win == m) & ok).argmax(axis=-1)        # the first maximum inside the input
    if x.dtype.kind == "f":
        nan = np.isnan(m[..., 0])
        if nan.any():           # torch's kernel keeps taking NaNs: the last one wins
            last = K - 1 - (np.isnan(win) & ok)[..., ::-1].argmax(axis=-1)
            j = np.where(nan, last, j)
    # window offset j -> position in the input plane: start + offset * dilation - lo, per dim
    offs = np.unravel_index(j, kernel)
    flat = np.zeros(j.shape, np.int64)
    for i in range(nd):
        starts = (np.arange(out[i]) * stride[i] - padding[i][0]).reshape((-1,) + (1,) * (nd - 1 - i))
        flat = flat * size[i] + starts + offs[i] * dilation[i]
    return flat


register(OpDef("max_pool_indices", "index", _rule, _max_pool_indices, None,
               doc="max_pool_indices(x; kernel, stride, padding, dilation): int64 (N, C, *out), the index in the "
                   "input's spatial plane of each window's maximum (torch's return_indices; first max, last NaN)"))

__all__: list = []
