"""Where a value lives, as the place assignment (``places.py``) and both targets' steps name it: a ``Root`` (a
buffer: an input, a literal, a workspace slot, a fresh output), a ``Place`` (element offset, shape, element strides
and dtype over a root), and the stride arithmetic on them (C-contiguous strides, broadcasting into an iteration
space, merging dimensions every operand walks as one).  Below ``places.py`` and ``input_reuse.py``, which both
compare a place with a contiguous one."""
from __future__ import annotations

import math

from ..ir.symbolic import SymInt, known_equal


class Place:
    """Where one value lives: ``root`` (a Root), element ``offset``, ``shape``, element ``strides``, ``dtype``."""
    __slots__ = ("root", "offset", "shape", "strides", "dtype")

    def __init__(self, root, offset, shape, strides, dtype):
        self.root, self.offset, self.shape, self.strides, self.dtype = root, offset, tuple(shape), tuple(strides), dtype

    def contiguous(self) -> bool:
        return self.strides == c_strides(self.shape) or math.prod(self.shape) <= 1

    def __repr__(self):
        return f"Place({self.root!r}+{self.offset}, {self.shape}, {self.strides}, {getattr(self.dtype, 'name', None)})"


class Root:
    """A buffer: ``kind`` in input | fresh | ws | lit; ``index`` (input/fresh number), ``array`` (lit),
    ``offset`` (ws byte offset), ``nbytes`` (ws: rounded up to the slot alignment)."""
    __slots__ = ("kind", "index", "array", "offset", "nbytes", "shape", "dtype")

    def __init__(self, kind, index=None, array=None, nbytes=0, shape=(), dtype=None):
        self.kind, self.index, self.array, self.nbytes = kind, index, array, nbytes
        self.shape, self.dtype, self.offset = tuple(shape), dtype, None

    def __repr__(self):
        at = self.offset if self.kind == "ws" else self.index
        return f"{self.kind}[{at}]"


def c_strides(shape):
    """Element strides of a C-contiguous array of ``shape``."""
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d if type(d) is SymInt else max(d, 1)      # (a symbolic size is never 0 or 1: guards)
    return tuple(reversed(st))


def bcast_strides(place: Place, it_shape):
    """Element strides of ``place`` broadcast into iteration space ``it_shape`` (0 where broadcast)."""
    lead = len(it_shape) - len(place.shape)
    out = [0] * lead
    for k, d in enumerate(place.shape):
        out.append(0 if d == 1 else place.strides[k])
    return out


def coalesce(shape, strides):
    """Drop size-1 dims and merge neighbours that every operand walks as one (``strides``: per operand), so
    that one kernel serves every rank and shape with the same access pattern (an SGD update of a matrix and of
    a vector is the same 1-D loop)."""
    if any(d == 0 for d in shape):
        return list(shape), [list(s) for s in strides]
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    shape = [shape[d] for d in keep]
    sts = [[s[d] for d in keep] for s in strides]
    i = len(shape) - 2
    while i >= 0:
        # (symbolic: only where equal for every size; a guard, T == 64 for a 64-wide buffer's slice, splits a lowering)
        if all(known_equal(st[i], st[i + 1] * shape[i + 1]) is True for st in sts):
            shape[i] *= shape[i + 1]
            del shape[i + 1]
            for st in sts:
                st[i] = st[i + 1]
                del st[i + 1]
        i -= 1
    return shape, sts


__all__ = ["Place", "Root", "c_strides", "bcast_strides", "coalesce"]
