"""Batching rules for ``getitem`` and ``index_put`` (``ir/ops/index.py``'s ``spec``: ints, None, Ellipsis,
``("slice", a, b, c)``, ``("tensor", k)``).

A batched operand gets a leading full slice; batched index tensors get a batch index (``arange(B)``) in front.
NumPy's rule for advanced indices decides where their dims land: together in place when the advanced entries
(tensors, and ints once a tensor is present) are adjacent, in front otherwise.  The cases handled here keep the
result as (batch, per-example result); the others return None and the interpreter loops over the batch.
"""
from __future__ import annotations

import numpy as np

from ..ir.ops import OPS
from ..runtime.dispatch import bind
from ..runtime.tensor import Tensor
from .batch_values import align, to_batched

_ALL = ("slice", None, None, None)


def _is_tensor(s):
    return type(s) is tuple and s[0] == "tensor"


def _advanced(spec):
    """Positions of the advanced entries, and whether they are adjacent (only meaningful with a tensor)."""
    if not any(_is_tensor(s) for s in spec):
        return [], True
    pos = [i for i, s in enumerate(spec) if _is_tensor(s) or (type(s) is int)]
    return pos, pos == list(range(pos[0], pos[-1] + 1))


def _block_rank(idx_avals):
    return len(np.broadcast_shapes(*[a.shape for a in idx_avals])) if idx_avals else 0


def _move(t, src, dst):
    perm = list(range(t.ndim))
    perm.insert(dst, perm.pop(src))
    return bind(OPS["permute"], t, perm=tuple(perm))


def _batched_index(spec, idx_vals, idx_avals, x_batched, B):
    """-> (spec, index tensors, moved) for a batched operand, or None when not handled; ``moved``: the
    advanced block went in front of the batch dim (its rank), else 0."""
    pos, adjacent = _advanced(spec)
    idx = [t for t, _ in idx_vals]
    if not any(b for _, b in idx_vals):
        if not x_batched:
            return None
        moved = _block_rank(idx_avals) if pos and not adjacent else 0
        return (_ALL,) + tuple(spec), idx, moved
    if not pos or not adjacent or pos[0] != 0:
        return None
    nb = _block_rank(idx_avals)
    idx = [bind(OPS["reshape"], t, shape=(B,) + (1,) * (nb - a.ndim) + tuple(a.shape)) if b else t
           for (t, b), a in zip(idx_vals, idx_avals)]
    if x_batched:
        ar = Tensor._make(np.arange(B, dtype=np.int64).reshape((B,) + (1,) * nb))
        spec = (("tensor", len(idx)),) + tuple(spec)
        idx.append(ar)
    return tuple(spec), idx, 0


def getitem(e, vals, B):
    (x, bx), *iv = vals
    r = _batched_index(e.params["spec"], iv, [v.aval for v in e.ins[1:]], bx, B)
    if r is None:
        return None
    spec, idx, moved = r
    out = bind(OPS["getitem"], x, *idx, spec=spec)
    if moved:
        out = _move(out, moved, 0)
    return [(out, True)]


def index_put(e, vals, B):
    (x, bx), (v, bv), *iv = vals
    spec = e.params["spec"]
    x = to_batched(x, bx, B, e.ins[0].aval.shape)
    r = _batched_index(spec, iv, [a.aval for a in e.ins[2:]], True, B)
    if r is None:
        return None
    new, idx, moved = r
    sub = OPS["getitem"].shape_dtype([e.ins[0].aval] + [a.aval for a in e.ins[2:]], {"spec": spec})[0].shape
    if moved:
        v = to_batched(v, bv, B, e.ins[1].aval.shape) if isinstance(v, Tensor) or bv else v
        if isinstance(v, Tensor):
            v = bind(OPS["broadcast_to"], align(v, B, v.ndim - 1, len(sub)), shape=(B,) + tuple(sub))
            v = _move(v, 0, moved)
    elif bv:
        v = align(v, B, len(e.ins[1].aval.shape), len(sub))
    out = bind(OPS["index_put"], x, v, *idx, spec=new, accumulate=e.params["accumulate"])
    return [(out, True)]
