"""``jitgrad.Size``: the type of ``t.shape`` and ``t.size()``, a tuple of ints that prints as torch's
``torch.Size([2, 3])`` does (``jitgrad.Size([2, 3])``) and has ``numel()``.

Indexing, slicing and ``+`` are tuple's own C methods (a slice is a plain tuple, where torch gives a Size): the
library reads shapes on every op, and a Python-level ``__getitem__`` would cost a frame each time."""
from __future__ import annotations

import math


class Size(tuple):
    """A tensor's shape: a tuple of ints (compares equal to plain tuples)."""

    __slots__ = ()

    def __new__(cls, sizes=()):
        return tuple.__new__(cls, (int(s) for s in sizes))

    def __repr__(self):
        return f"jitgrad.Size({list(self)})"

    __str__ = __repr__

    def numel(self) -> int:
        """The number of elements of a tensor of this shape."""
        return math.prod(self)

    def __reduce__(self):
        return (Size, (tuple(self),))


__all__ = ["Size"]
