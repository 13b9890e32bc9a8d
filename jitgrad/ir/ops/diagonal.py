"""``diagonal(x; offset, dim1, dim2)``: the elements ``x[..., i, i + offset]`` of a plane as a new last dim, a
*view* as in torch (writes through it reach ``x``; it shares ``x``'s version counter).

Eager CPU mode returns a strided NumPy view.  A trace or a device binds the decomposition (a permute and an
integer-index gather of a constant pattern), so compiled graphs need no new view kind.  The vjp places the
gradient on the diagonal of zeros with jitgrad ops (a gather and a ``where``), so it differentiates again.
"""
from __future__ import annotations

import numpy as np

from .opdef import LINEAR, Aval, OpDef, register


def _plan(shape, offset, dim1, dim2):
    """(the other dims, m, n, count, first row, first column) of the diagonal of the plane (dim1, dim2)."""
    rest = [i for i in range(len(shape)) if i not in (dim1, dim2)]
    m, n = shape[dim1], shape[dim2]
    count = max(0, min(m, n - offset) if offset >= 0 else min(m + offset, n))
    return rest, m, n, count, max(0, -offset), max(0, offset)


def _rule(avals, params):
    (x,) = avals
    rest, _, _, count, _, _ = _plan(x.shape, params["offset"], params["dim1"], params["dim2"])
    return [Aval(tuple(x.shape[i] for i in rest) + (count,), x.dtype)]


def _impl(x, offset, dim1, dim2):
    rest, m, n, count, r0, c0 = _plan(x.shape, offset, dim1, dim2)
    start = [slice(None)] * x.ndim
    if count:
        start[dim1], start[dim2] = slice(r0, None), slice(c0, None)
    first = x[tuple(start)]             # begins at the diagonal's first element
    shape = tuple(x.shape[i] for i in rest) + (count,)
    strides = tuple(x.strides[i] for i in rest) + (x.strides[dim1] + x.strides[dim2],)
    return np.lib.stride_tricks.as_strided(first, shape, strides, writeable=bool(x.flags.writeable))


def _positions(m, n, offset, count, r0, c0):
    """Per (row, col) of the plane: whether it is on the diagonal, and which diagonal element it would be."""
    rows = np.arange(m)[:, None]
    cols = np.arange(n)[None, :]
    on = np.broadcast_to((cols - rows) == offset, (m, n))
    k = np.broadcast_to(rows - r0 if offset >= 0 else cols - c0, (m, n))
    return np.ascontiguousarray(on), np.clip(k, 0, max(count - 1, 0)).astype(np.int64)


def _const(like, a):
    """A constant index or mask tensor on ``like``'s device."""
    t = type(like)._make(a)
    return t if str(like.device) == "cpu" else t.to(like.device)


def _vjp(c, g):
    shape = c.shapes[0]
    offset, dim1, dim2 = c.params["offset"], c.params["dim1"], c.params["dim2"]
    rest, m, n, count, r0, c0 = _plan(shape, offset, dim1, dim2)
    if count == 0:
        return (g.new_zeros(shape),)
    on, k = _positions(m, n, offset, count, r0, c0)
    spread = g[(Ellipsis, _const(g, k))]                  # (..., m, n): g's element k at every (row, col)
    plane = c.bind("where", _const(g, on), spread, 0.0)   # zero off the diagonal
    order = rest + [dim1, dim2]
    return (plane.permute(*[order.index(i) for i in range(len(shape))]),)


def _decompose(b, x, offset, dim1, dim2):
    rest, m, n, count, r0, c0 = _plan(x.shape, offset, dim1, dim2)
    rows = np.arange(count, dtype=np.int64)
    moved = x.permute(*rest, dim1, dim2)
    return moved[(Ellipsis, _const(x, rows + r0), _const(x, rows + c0))]


register(OpDef("diagonal", "index", _rule, _impl, _vjp, view=True, grad_name="DiagonalBackward0", jvp=LINEAR,
               decompose=_decompose, doc="diagonal(x; offset, dim1, dim2): x[..., i, i + offset] as a view"))
