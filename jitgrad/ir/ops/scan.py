"""Scans along one axis: ``cumsum(x; axis, reverse)`` and ``cumprod(x; axis)``.

``reverse=True`` sums from the end (``out[i] = sum(x[i:])``): it is cumsum's own transpose, so the vjp of a
cumsum is a cumsum the other way and every order of derivative stays a cumsum.  Integer and bool inputs sum in
int64, as torch does.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .opdef import BY_TRANSPOSE, LINEAR, Aval, OpDef, OpError, register


def _scan_rule(name):
    def rule(avals, params):
        (x,) = avals
        axis = params["axis"]
        if not 0 <= axis < max(x.ndim, 1):
            raise OpError(f"{name}: dim {axis} out of range for a tensor of shape {list(x.shape)}")
        return [Aval(x.shape, x.dtype if x.dtype.is_floating_point else dt.int64)]
    return rule


def _cumsum_impl(x, axis, reverse):
    if x.ndim == 0:
        return x.astype(x.dtype if x.dtype.kind == "f" else np.int64)
    acc = x.dtype if x.dtype.kind == "f" else np.int64
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=acc), axis)
    return np.cumsum(x, axis=axis, dtype=acc)


def _cumsum_vjp(c, g):
    return (c.bind("cumsum", g, axis=c.params["axis"], reverse=not c.params["reverse"]),)


register(OpDef("cumsum", "scan", _scan_rule("cumsum"), _cumsum_impl, _cumsum_vjp, grad_name="CumsumBackward0", jvp=LINEAR,
               doc="Inclusive prefix sum along ``axis`` (from the end with ``reverse``)."))


def _cumprod_impl(x, axis):
    acc = x.dtype if x.dtype.kind == "f" else np.int64
    return x.astype(acc) if x.ndim == 0 else np.cumprod(x, axis=axis, dtype=acc)


def _cumprod_vjp(c, g):
    """d/dx_k = sum_{i>=k} g_i prod_{j<=i, j!=k} x_j, exact with zeros (as torch): before a row's first zero z it
    is rcumsum(g * out) / x; at z, rcumsum(g * cumprod(y)) with y = x except y_z = 1; after z, x_z times the same
    formula taken at y (zero in value, but its derivative in x_z is that formula: so the second derivative is
    right too, as torch's O(n^2) double-backward formula is).  A dim of size 1 passes g through, as torch."""
    shape = c.shapes[0]
    axis = c.params["axis"]
    if not shape or shape[axis] == 1:
        return (g,)
    x, out = c.inputs[0], c.outputs[0]

    def rcumsum(t):
        return c.bind("cumsum", t, axis=axis, reverse=True)

    def grad(x, out, g, outer):
        zeros_so_far = c.bind("cumsum", x == 0, axis=axis, reverse=False)
        before = zeros_so_far == 0
        first = (x == 0).logical_and(zeros_so_far == 1)
        g_before = (rcumsum(g * out) / x.where(before, 1.0)).where(before, 0.0)
        y = x.where(first.logical_not(), 1.0)
        out_y = c.bind("cumprod", y, axis=axis)
        total = g_before + rcumsum(g * out_y).where(first, 0.0)
        if outer:
            x_z = c.bind("sum", x.where(first, 0.0), axes=(axis,), keepdims=True)
            after = (zeros_so_far >= 1).logical_and(first.logical_not())
            total = total + (x_z * grad(y, out_y, g, False)).where(after, 0.0)
        return total
    return (grad(x, out, g, True),)


register(OpDef("cumprod", "scan", _scan_rule("cumprod"), _cumprod_impl, _cumprod_vjp, saves_in=(0,), saves_out=(0,),
               grad_name="CumprodBackward0", jvp=BY_TRANSPOSE, doc="Inclusive prefix product along ``axis``."))
