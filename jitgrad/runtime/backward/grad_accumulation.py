"""How a gradient lands in a tensor's ``.grad``: AccumulateGrad's write into a leaf (``accumulate``) and
``retain_grad()``'s into a non-leaf (``retain``).

A first gradient is the incoming buffer itself when nothing else holds it (torch steals it too), else a fresh
buffer laid out as torch lays out a leaf's ``.grad`` (never aliasing a tensor the user holds); later ones add into
it in place, or out of place where the old ``.grad`` is part of a graph (``create_graph``) or the write happens
inside ``@jitgrad.compile`` (recorded, written back after the call).  The engine (engine.py) calls these when a
backward reaches an AccumulateGrad node or a node whose outputs retain their gradient.
"""
from __future__ import annotations

import sys

import numpy as np

from .. import grad_mode
from ..conversions import contiguous_format, dense_like
from ..node import CopyBackwards
from ..tensor import Tensor
from ...tracer import STATE as _TR


def accumulate(t: Tensor, g: Tensor, create_graph: bool):
    """AccumulateGrad: add ``g`` into ``t.grad`` (a fresh buffer, never aliasing a user's tensor)."""
    gd = g._data
    if t._grad is None and not create_graph and _TR.active is None and type(gd) is np.ndarray \
            and gd.dtype == t._data.dtype:
        ld = t._data        # the common first write: in the leaf's layout (torch)
        if _getrefcount(g) <= _ENGINE_REFS and gd.base is None and _getrefcount(gd) <= 3 and g._base is None \
                and gd.flags.writeable and gd.flags.c_contiguous and ld.flags.c_contiguous and gd.shape == ld.shape:
            # nothing but the engine holds this gradient or its buffer (no other tensor, view or hook): .grad takes
            # the buffer over, as torch's AccumulateGrad steals an unshared gradient instead of copying it
            t._grad = Tensor._make(gd)
            return
        t._grad = Tensor._make(gd.copy() if ld.flags.c_contiguous else grad_buffer(gd, ld))
        return
    if g.dtype is not t.dtype:
        g = g.to(t.dtype)
    old = t._grad
    tr = _TR.active
    if tr is not None and tr.on_grad_write is not None:
        tr.on_grad_write(t)     # inside @compile: functional update, written back after the call
    if create_graph:
        if old is None and tr is None and type(g._data) is np.ndarray and g.requires_grad:
            # torch obeys the leaf's layout: new_empty_strided(...).copy_(g), so .grad's grad_fn is CopyBackwards;
            # a leaf with gaps or overlaps (not dense) gets a row-major clone instead (CloneBackward0)
            out = dense_like(t._data)
            if out is None:
                t._grad = g.clone(memory_format=contiguous_format)
                return
            dst = Tensor._make(out)
            dst._data[...] = g._data
            dst._vc[0] += 1             # (the copy's write)
            dst.grad_fn = CopyBackwards(dst, g)
            t._grad = dst
            return
        t._grad = g if old is None else old + g
        return
    if tr is None and old is not None and not old.requires_grad and old.shape == g.shape \
            and type(old._data) is type(g._data) and type(g._data) is not np.ndarray:
        with grad_mode.no_grad():       # a device .grad accumulates in place too (torch): references see it
            old.add_(g.detach())
        return
    if tr is not None or type(g._data) is not np.ndarray:
        with grad_mode.no_grad():
            t._grad = g.detach() if old is None else old + g
        return
    if g.requires_grad:
        g = g.detach()
    if old is None:
        t._grad = Tensor._make(grad_buffer(g._data, t._data))
    elif old.requires_grad:
        with grad_mode.no_grad():
            t._grad = old + g
    else:
        np.add(old._data, g._data, out=old._data, casting="unsafe")
        old._vc[0] += 1


def accumulate_array(t: Tensor, gd: np.ndarray) -> None:
    """``accumulate(t, Tensor(gd), False)`` for a gradient array of a first-order backward (the engine carries
    arrays between pullbacks): the first write takes the array over when nothing else holds it, later ones add in
    place; anything else as ``accumulate``."""
    ld = t._data
    if _TR.active is None and gd.dtype == ld.dtype:
        old = t._grad
        if old is None:
            if _getrefcount(gd) <= _ENGINE_ARRAY_REFS and gd.base is None and gd.flags.writeable \
                    and gd.flags.c_contiguous and ld.flags.c_contiguous and gd.shape == ld.shape:
                t._grad = Tensor._make(gd)      # (as ``accumulate``: torch steals an unshared gradient)
                return
            t._grad = Tensor._make(gd.copy() if ld.flags.c_contiguous else grad_buffer(gd, ld))
            return
        if type(old._data) is np.ndarray and not old.requires_grad:
            np.add(old._data, gd, out=old._data, casting="unsafe")
            old._vc[0] += 1
            return
    accumulate(t, Tensor._make(gd), False)


# the references to a gradient that ``accumulate`` sees when only the engine holds it: the engine's local, the
# parameter, getrefcount's argument (engine.run drops its other references before it calls accumulate)
_ENGINE_REFS = 3
# the references to a gradient array that ``accumulate_array`` sees when only the engine holds it: the engine's
# local, the parameter, getrefcount's argument
_ENGINE_ARRAY_REFS = 3
_getrefcount = sys.getrefcount


def grad_buffer(g: np.ndarray, leaf: np.ndarray) -> np.ndarray:
    """A copy of ``g`` laid out as torch lays out a leaf's new ``.grad``: with the leaf's strides when the leaf is
    dense and non-overlapping (a channels-last leaf gets a channels-last grad), else row-major."""
    if type(leaf) is not np.ndarray or leaf.ndim < 2 or leaf.flags.c_contiguous:
        return np.array(g, order="C", copy=True)
    out = dense_like(leaf)
    if out is None:                     # gaps or overlaps: torch falls back to row-major
        out = np.empty(leaf.shape, leaf.dtype)
    out[...] = g
    return out


def fresh_copy(g: Tensor) -> Tensor:
    """A detached copy of g (traced values are immutable: no copy needed)."""
    if type(g._data) is not np.ndarray:
        return g.detach()
    return Tensor._make(np.array(g._data, copy=True))


def retain(node, grads, create_graph):
    """retain_grad(): the tensors that retain their gradient get it (a fresh buffer unless create_graph)."""
    for nr, ref in node.retain_grad_refs.items():
        t = ref()
        if t is not None and grads[nr] is not None:
            g = grads[nr]
            if t._grad is None:
                t._grad = g if create_graph else fresh_copy(g)
            else:
                t._grad = t._grad + (g if create_graph else g.detach())


__all__ = ["accumulate", "accumulate_array", "retain", "grad_buffer", "fresh_copy"]
