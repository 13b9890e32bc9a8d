"""torch's in-place storage operations on a Tensor: ``resize_``, ``resize_as_`` and ``set_``.

They change what a tensor holds rather than computing a value, so they are not differentiable: torch refuses
them on a tensor that requires grad while grad mode is on (``set_`` is used under ``no_grad``).  Each bumps the
version counter (``resize_`` only when the shape changes).  ``set_`` gives a leaf a new autograd identity: the
graph recorded before still points at the old gradient accumulator, so ``grad(out, x)`` reports ``x`` as unused
while the old ``GradientEdge`` still works (as torch).
"""
from __future__ import annotations

import numpy as np

from . import grad_mode
from .size import Size
from .tensor import Tensor

_GM = grad_mode.STATE


def _shape_of(sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, Size)):
        return tuple(int(s) for s in sizes[0])
    return tuple(int(s) for s in sizes)


def resize_(self, *sizes, memory_format=None):
    """Give the tensor the shape ``sizes``, keeping its leading elements in flat order; new elements are
    uninitialised.  A no-op (no version bump) when the shape is unchanged."""
    shape = _shape_of(sizes)
    if any(s < 0 for s in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(shape)}")
    if _GM.grad_enabled and self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    self._check_inplace()
    if shape == tuple(self.shape):
        return self
    flat = np.ascontiguousarray(self._data).reshape(-1)
    n = int(np.prod(shape)) if shape else 1
    new = np.empty(n, dtype=flat.dtype)
    k = min(n, flat.size)
    new[:k] = flat[:k]
    self._data = new.reshape(shape)
    self._base = None
    self._vc[0] += 1
    return self


def resize_as_(self, other, memory_format=None):
    """``resize_(other.shape)``."""
    return resize_(self, tuple(other.shape))


def set_(self, source=None):
    """Make the tensor hold ``source``'s data (sharing its memory; an empty float tensor when None)."""
    self._check_inplace()      # a leaf that requires grad, with grad mode on: torch's in-place error
    if source is None:
        data = np.empty((0,), dtype=self._data.dtype)
    elif isinstance(source, Tensor):
        data = source._data
    else:
        raise TypeError(f"set_(): expected a Tensor source, got {type(source).__name__}")
    self._data = data
    self._base = None
    self._vc[0] += 1
    self._acc = None            # a new gradient accumulator: the old graph edge is not this tensor any more
    return self


Tensor.resize_ = resize_
Tensor.resize_as_ = resize_as_
Tensor.set_ = set_

__all__ = ["resize_", "resize_as_", "set_"]
