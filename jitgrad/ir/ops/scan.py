"""Scans along one axis: ``cumsum(x; axis, reverse)``.

``reverse=True`` sums from the end (``out[i] = sum(x[i:])``): it is cumsum's own transpose, so the vjp of a
cumsum is a cumsum the other way and every order of derivative stays a cumsum.  Integer and bool inputs sum in
int64, as torch does.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .opdef import Aval, OpDef, OpError, register


def _cumsum_rule(avals, params):
    (x,) = avals
    axis = params["axis"]
    if not 0 <= axis < max(x.ndim, 1):
        raise OpError(f"cumsum: dim {axis} out of range for a tensor of shape {list(x.shape)}")
    return [Aval(x.shape, x.dtype if x.dtype.is_floating_point else dt.int64)]


def _cumsum_impl(x, axis, reverse):
    if x.ndim == 0:
        return x.astype(x.dtype if x.dtype.kind == "f" else np.int64)
    acc = x.dtype if x.dtype.kind == "f" else np.int64
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=acc), axis)
    return np.cumsum(x, axis=axis, dtype=acc)


def _cumsum_vjp(c, g):
    return (c.bind("cumsum", g, axis=c.params["axis"], reverse=not c.params["reverse"]),)


register(OpDef("cumsum", "scan", _cumsum_rule, _cumsum_impl, _cumsum_vjp, grad_name="CumsumBackward0",
               doc="Inclusive prefix sum along ``axis`` (from the end with ``reverse``)."))
