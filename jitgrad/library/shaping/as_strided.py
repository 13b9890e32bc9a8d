"""``as_strided`` and ``as_strided_``: a tensor read through explicit sizes, strides and storage offset.

jitgrad's storage is a root tensor's contiguous buffer (a view's ``_base``).  ``as_strided`` returns a view of
that storage and records the read as an index into the *input* (``AsStridedBackward0``), so overlapping
positions add their gradients and ``autograd.grad(out, input)`` reaches the input even when it is itself a view;
positions of the storage the input does not cover carry their values but no gradient (as torch, whose backward
keeps only the input's own geometry).  ``as_strided_`` gives the tensor itself the new geometry
(``AsStridedBackward1``); a root restrided that way keeps its old buffer as its storage (runtime/strided.py).
"""
from __future__ import annotations

import operator

import numpy as np

from ...declarations import published
from ...ir.dtypes import UnsupportedError
from ...runtime.view_inplace import BY_POSITIONS
from ...runtime.grad_mode import STATE
from ...runtime.grad_names import named
from ...runtime.dual import same_layout, zeros_with_layout
from ...runtime.forward_state import STATE as _FWD
from ...runtime.strided import restrided_storage, set_storage, storage_buffer
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _storage(t):
    """``(storage tensor, flat storage buffer)`` of eager CPU tensor ``t``, or an UnsupportedError."""
    root = t._base if t._base is not None else t
    flat = storage_buffer(t)
    if flat is None or flat is root._data:      # the root's own payload is the storage
        if flat is None or type(t._data) is not np.ndarray or not flat.flags.c_contiguous:
            raise UnsupportedError("jitgrad does not support as_strided() on traced, device or non-contiguous "
                                   "tensors yet")
        return root, flat.reshape(-1)
    if type(t._data) is not np.ndarray:
        raise UnsupportedError("jitgrad does not support as_strided() on traced or device tensors yet")
    return root, flat


def _positions(size, stride, offset):
    """The storage position of every element of a (size, stride, offset) geometry, shaped ``size``."""
    pos = np.full(size, offset, dtype=np.int64)
    for k, (n, st) in enumerate(zip(size, stride)):
        shp = [1] * len(size)
        shp[k] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(shp)
    return pos


def _offset_of(t, flat):
    d = t._data
    if not d.size:
        return 0
    return (d.__array_interface__["data"][0] - flat.__array_interface__["data"][0]) // d.itemsize


def _geometry(name, t, flat, size, stride, storage_offset):
    size = tuple(operator.index(n) for n in size)
    stride = tuple(operator.index(n) for n in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"{name}: mismatch in length of strides and shape")
    if any(n < 0 for n in size):
        raise RuntimeError(f"{name}: Trying to create tensor with negative dimension: {list(size)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"{name}: Negative strides are not supported at the moment, got strides: {list(stride)}")
    off = _offset_of(t, flat) if storage_offset is None else operator.index(storage_offset)
    pos = _positions(size, stride, off)
    isz = flat.itemsize
    if off < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {off}")
    # a geometry with no elements reads nothing, so any offset fits any storage (torch's computeStorageNbytes
    # is 0 for it: pytorch#80507)
    need = int(pos.max()) + 1 if pos.size else 0
    if need > flat.size:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {off}, and "
                           f"itemsize {isz} requiring a storage size of {need * isz} are out of bounds for storage "
                           f"of size {flat.size * isz}")
    return size, stride, off, pos


@published("jitgrad", "Tensor")
def as_strided(input, size, stride, storage_offset=None, **torch_kw):
    """The elements of ``input``'s storage at ``storage_offset + sum(i_k * stride[k])``, shaped ``size``: a view of
    the storage (eager CPU tensors), differentiable (``AsStridedBackward0``: an index into ``input``, so
    overlapping positions add their gradients)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(as_strided, 'as_strided', (input, size, stride, storage_offset), {}, torch_kw)
    root, flat = _storage(input)
    size, stride, off, pos = _geometry("as_strided", input, flat, size, stride, storage_offset)
    r = _as_strided(input, root, flat, size, stride, off, pos)
    if _FWD.active is not None:     # forward AD: the tangent read with the same geometry (torch's formula)
        _FWD.active.follow_view(input, r, lambda t: as_strided(_laid_out_as(t, input), size, stride, off))
    return r


def _laid_out_as(tangent, t):
    """``tangent``, or a copy of it laid out as ``t`` (torch's layout rule for tangents), so that a geometry over
    ``t``'s storage reads ``tangent``'s element for each of ``t``'s (zero where ``t`` does not reach)."""
    if same_layout(tangent, t):
        return tangent
    fresh = zeros_with_layout(t)
    if fresh is None:
        raise UnsupportedError("jitgrad does not support as_strided() of a dual tensor whose elements overlap in "
                               "memory and whose tangent is laid out otherwise")
    return fresh.copy_(tangent)


def _as_strided(input, root, flat, size, stride, off, pos):
    # the result shares the storage (as torch's view); overlapping positions make it read-only, as NumPy's
    view = np.lib.stride_tricks.as_strided(flat[off:], size, tuple(st * flat.itemsize for st in stride),
                                           writeable=np.unique(pos).size == pos.size)
    if not (input.requires_grad and STATE.grad_enabled):       # nothing to record: the view is all there is
        r = Tensor._make(view)
        r._base, r._vc = root, root._vc
        return r
    # each storage position -> the input element there (-1: outside the input); an expanded input's repeated
    # positions map to one of its elements
    ipos = _positions(input.shape, input.stride(), _offset_of(input, flat)).reshape(-1)
    owner = np.full(flat.size, -1, dtype=np.int64)
    owner[ipos] = np.arange(ipos.size, dtype=np.int64)
    elem = owner[pos]
    src = input.reshape(-1)
    hits = np.bincount(ipos, minlength=flat.size)
    if (hits > 1).any():
        # an overlapping input (expanded): its copies of a position share the gradient evenly, as torch's
        # backward does; read each position as the mean of its copies (their values are equal)
        from ..indexing.masking import scatter_add
        per_pos = scatter_add(src.new_zeros((flat.size,)), 0, Tensor._make(ipos), src)
        src = per_pos / Tensor._make(np.maximum(hits, 1).astype(flat.dtype))
        elem = np.where(hits[pos] > 0, pos, -1)
    if (elem >= 0).all():
        r = src[Tensor._make(elem)]
    else:       # positions outside the input: their values, read from the storage without history
        inside = Tensor._make(elem >= 0)
        outside = Tensor._make(flat[pos].copy())
        r = (src[Tensor._make(np.maximum(elem, 0))] if src.numel() else outside).where(inside, outside)
    r._data = view
    r._base, r._vc = root, root._vc
    if r.grad_fn is None:
        return r
    # an in-place write into the storage's tensor later gives it a new history: this view follows it (torch's
    # regenerated AsStridedBackward0), by the storage positions it shows (dispatch.refresh_view)
    r.grad_fn.view_args, r.grad_fn.view_base_fn = BY_POSITIONS, root.grad_fn
    return named(r, "AsStridedBackward0")


@published("jitgrad", "Tensor")
def as_strided_(self, size, stride, storage_offset=None):
    """In place: this tensor takes the geometry ``(size, stride, storage_offset)`` over its storage and returns
    itself; its history continues through ``AsStridedBackward1``."""
    if type(self._data) is not np.ndarray:
        raise UnsupportedError("jitgrad does not support Tensor.as_strided_() inside @jg.compile or on a device yet")
    self._check_view_inplace()
    root, flat = _storage(self)
    r = as_strided(self, size, stride, storage_offset)
    if root is self and restrided_storage(self) is None:     # the buffer stays its storage under the new geometry
        set_storage(self, flat)
    self._data = r._data
    self._vc[0] += 1
    if _FWD.active is not None:     # its tangent takes the new geometry too
        _FWD.active.carry(r, self)
    if STATE.grad_enabled and r.grad_fn is not None:
        node = r.grad_fn
        node.view_args = None           # its input is this tensor's old value, which this tensor no longer shows
        node.torch_name = "AsStridedBackward1"
        self.grad_fn, self._out_nr = node, r._out_nr
    return self


__all__ = ["as_strided", "as_strided_"]
