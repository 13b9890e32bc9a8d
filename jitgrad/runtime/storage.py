"""Methods that replace a tensor's memory in place: ``set_``, ``resize_`` and ``resize_as_``; and
``empty_strided`` (a tensor with the strides asked for).

jitgrad has no storage objects: a tensor's memory is its NumPy payload.  ``x.set_(src)`` makes ``x`` share
``src``'s payload (its shape, strides and memory); ``x.resize_(shape)`` reinterprets the first elements of ``x``'s
memory in the new shape (sharing it when it is large enough, a larger zero-filled buffer with the old elements
in front when it is not).  Both bump the version counter as torch does (``resize_`` only when the shape changes).

As in torch, ``set_`` gives a leaf a fresh gradient accumulator: a graph built before it still accumulates into
``x.grad``, but ``autograd.grad(..., x)`` on that graph finds ``x`` unused.  A view that is ``set_`` or resized
no longer aliases its base here (torch keeps the ``_base`` link though the memory differs).  Both run on eager
CPU tensors only: inside ``@jg.compile`` or on a device they raise ``UnsupportedError``.
"""
from __future__ import annotations

import operator

import numpy as np

from ..declarations import published
from . import grad_mode
from .strided import forget_storage, set_storage, storage_buffer
from .tensor import Tensor
from ..ir.dtypes import UnsupportedError

_GM = grad_mode.STATE
_TYPE_NAME = {"float32": "float", "float64": "double", "float16": "half", "int64": "long", "int32": "int",
              "bool": "bool", "uint8": "unsigned char", "int8": "signed char", "int16": "short"}


def _eager_only(t: Tensor, what: str):
    if type(t._data) is not np.ndarray:
        raise UnsupportedError(f"jitgrad does not support Tensor.{what}() inside @jg.compile or on a device yet")


def _unlink_view(t: Tensor):
    """``t`` stops being an autograd view: its memory is no longer (only) its base's (nor the storage it took
    from ``detach()`` or ``as_strided_``)."""
    forget_storage(t)
    if t._base is not None:
        t._base = None
        t._vc = [t._vc[0]]
        t._view_origin = None


@published("Tensor")
def set_(self, source=None, storage_offset=None, size=None, stride=None):
    """Make this tensor share ``source``'s memory, shape and strides (``x.set_()``: an empty tensor); returns
    ``self``.  torch's storage overloads (``set_(storage, offset, size, stride)``) are not supported."""
    _eager_only(self, "set_")
    if source is None:
        new = np.empty((0,), self._data.dtype)
    elif isinstance(source, Tensor):
        if storage_offset is not None or size is not None or stride is not None:
            raise UnsupportedError("jitgrad does not support Tensor.set_(source, storage_offset, size, stride) yet "
                                   "(no storage objects): use set_(source) with a view of the source")
        _eager_only(source, "set_")
        if source.dtype is not self.dtype:
            raise RuntimeError(f"Could not set tensor of type {_TYPE_NAME.get(source.dtype.name, source.dtype.name)} "
                               f"to a tensor of type {_TYPE_NAME.get(self.dtype.name, self.dtype.name)}")
        new = source._data
    else:
        raise UnsupportedError(f"jitgrad does not support Tensor.set_() with a {type(source).__name__} source yet "
                               "(no storage objects): pass a Tensor")
    self._check_inplace()
    self._data = new
    self._vc[0] += 1
    _unlink_view(self)
    self._acc = None        # torch: a fresh gradient accumulator (see the module docstring)
    return self


def _sizes(name, sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    try:
        sizes = tuple(operator.index(s) for s in sizes)
    except TypeError:
        raise TypeError(f"{name}(): argument 'size' must be tuple of ints, but found element of type "
                        f"{type(next(s for s in sizes if not isinstance(s, int))).__name__}") from None
    if any(s < 0 for s in sizes):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(sizes)}: {list(sizes)}")
    return sizes


@published("Tensor")
def resize_(self, *sizes, memory_format=None):
    """Give this tensor the shape ``sizes`` in place, keeping its first elements (in memory order); new
    elements are zero here (uninitialised in torch).  Refused on tensors that require grad (except in inference
    mode), as torch."""
    shape = _sizes("resize_", sizes)
    _eager_only(self, "resize_")
    if self.requires_grad and not _GM.inference:
        raise RuntimeError("cannot resize variables that require grad")
    if memory_format is not None:
        from .conversions import layout_for
        layout_for(memory_format, len(shape), "resize_")
    d = self._data
    if tuple(d.shape) == shape:
        return self          # a no-op: no version bump (torch)
    self._check_inplace()
    n = int(np.prod(shape, dtype=np.int64))
    flat = d.ravel(order="K")       # memory order; a view of d when d is dense
    keep = None
    if flat.size >= n and np.shares_memory(flat, d):
        new = flat[:n].reshape(shape)
        # a shrink keeps the whole storage, as torch's (storage(), storage_offset and as_strided still reach it)
        keep = storage_buffer(self)
    else:
        new = np.zeros(shape, d.dtype)
        m = min(n, flat.size)
        new.reshape(-1)[:m] = flat[:m]
    if memory_format is not None:
        from .conversions import in_layout
        new = in_layout(new, memory_format)
    self._data = new
    self._vc[0] += 1
    _unlink_view(self)
    if keep is not None and keep.flags.c_contiguous and keep.size > n:
        set_storage(self, keep.reshape(-1))
    return self


def resize_as_(self, the_template, memory_format=None):
    """``self.resize_(the_template.shape)``."""
    if not isinstance(the_template, Tensor):
        raise TypeError(f"resize_as_(): argument 'the_template' (position 1) must be Tensor, not "
                        f"{type(the_template).__name__}")
    return resize_(self, tuple(the_template.shape), memory_format=memory_format)


@published("jitgrad")
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """An uninitialised tensor of shape ``size`` whose element ``i`` lives at ``sum(i[k] * stride[k])`` of a fresh
    buffer just large enough (torch.empty_strided); overlapping strides give a read-only tensor here."""
    from ..ir import dtypes as dt
    from .devices import check_device
    size, stride = tuple(operator.index(n) for n in size), tuple(operator.index(n) for n in stride)
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if any(n < 0 for n in size) or any(st < 0 for st in stride):
        raise RuntimeError(f"empty_strided: sizes and strides must be non-negative, got sizes {list(size)} and "
                           f"strides {list(stride)}")
    if check_device(device).type != "cpu":
        raise UnsupportedError("jitgrad does not support empty_strided() on a device yet")
    npd = (dt.as_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT).np
    need = 0 if 0 in size else 1 + sum((n - 1) * st for n, st in zip(size, stride))
    buf = np.empty(max(need, 1), npd)
    offsets = np.zeros(size, np.int64)      # each element's position in the buffer
    for k, (n, st) in enumerate(zip(size, stride)):
        offsets = offsets + (np.arange(n, dtype=np.int64) * st).reshape((1,) * k + (n,) + (1,) * (len(size) - k - 1))
    overlap = np.unique(offsets).size != offsets.size
    isz = buf.itemsize
    data = np.lib.stride_tricks.as_strided(buf, size, tuple(st * isz for st in stride), writeable=not overlap)
    t = Tensor._make(data)
    return t.requires_grad_(True) if requires_grad else t


__all__ = ["set_", "resize_", "resize_as_", "empty_strided"]
