"""Tensor's Python operators (``x + y``, ``x @ w``, ``-x``, ``x < y``, ...): each one ``bind`` of a primitive.

The methods of ``TensorOperators`` are ``Tensor``'s (published by ``publisher.py``).  Each is flat: with no
profiler active it calls dispatch's ``_bind`` itself (the op a module constant, the arguments one tuple), so an
operator costs one Python frame above the dispatch.  ``_d._bind`` is read from the module at each call, so a spy
set on ``dispatch._bind`` sees operators too.  (``&``, ``|``, ``^``, ``~`` and the shifts are
library/pointwise/integer.py's.)
"""
from __future__ import annotations

from ..declarations import published
from ..ir.ops import OPS as O
from . import dispatch as _d
from .forward_state import STATE as _FWD
from .profiler_state import STATE as _PROF

_ABS = O["abs"]
_ADD = O["add"]
_DIV = O["div"]
_EQ = O["eq"]
_FLOORDIV = O["floordiv"]
_GE = O["ge"]
_GT = O["gt"]
_LE = O["le"]
_LT = O["lt"]
_MATMUL = O["matmul"]
_MOD = O["mod"]
_MUL = O["mul"]
_NE = O["ne"]
_NEG = O["neg"]
_POW = O["pow"]
_SUB = O["sub"]


@published("Tensor.methods")
class TensorOperators:
    """The arithmetic, matmul, logical and comparison operators of ``Tensor``."""

    __slots__ = ()

    def __add__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_ADD, (self, o), {})
        return _d.bind(_ADD, self, o)

    def __radd__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_ADD, (o, self), {})
        return _d.bind(_ADD, o, self)

    def __sub__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_SUB, (self, o), {})
        return _d.bind(_SUB, self, o)

    def __rsub__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_SUB, (o, self), {})
        return _d.bind(_SUB, o, self)

    def __mul__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_MUL, (self, o), {})
        return _d.bind(_MUL, self, o)

    def __rmul__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_MUL, (o, self), {})
        return _d.bind(_MUL, o, self)

    def __truediv__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_DIV, (self, o), {})
        return _d.bind(_DIV, self, o)

    def __rtruediv__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_DIV, (o, self), {})
        return _d.bind(_DIV, o, self)

    def __floordiv__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_FLOORDIV, (self, o), {})
        return _d.bind(_FLOORDIV, self, o)

    def __rfloordiv__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_FLOORDIV, (o, self), {})
        return _d.bind(_FLOORDIV, o, self)

    def __mod__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_MOD, (self, o), {})
        return _d.bind(_MOD, self, o)

    def __rmod__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_MOD, (o, self), {})
        return _d.bind(_MOD, o, self)

    def __pow__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_POW, (self, o), {})
        return _d.bind(_POW, self, o)

    def __rpow__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_POW, (o, self), {})
        return _d.bind(_POW, o, self)

    def __matmul__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_MATMUL, (self, o), {})
        return _d.bind(_MATMUL, self, o)

    def __rmatmul__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_MATMUL, (o, self), {})
        return _d.bind(_MATMUL, o, self)

    def __neg__(self):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_NEG, (self,), {})
        return _d.bind(_NEG, self)

    def __pos__(self):
        return self

    def __abs__(self):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_ABS, (self,), {})
        return _d.bind(_ABS, self)

    def __lt__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_LT, (self, o), {})
        return _d.bind(_LT, self, o)

    def __le__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_LE, (self, o), {})
        return _d.bind(_LE, self, o)

    def __gt__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_GT, (self, o), {})
        return _d.bind(_GT, self, o)

    def __ge__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_GE, (self, o), {})
        return _d.bind(_GE, self, o)

    def __eq__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_EQ, (self, o), {})
        return _d.bind(_EQ, self, o)

    def __ne__(self, o):
        if _PROF.active is None and _FWD.active is None:
            return _d._bind(_NE, (self, o), {})
        return _d.bind(_NE, self, o)


__all__ = ["TensorOperators"]
