"""Tensor's Python operators (``x + y``, ``x @ w``, ``-x``, ``x < y``, ...): each one ``bind`` of a primitive.

A mixin of ``Tensor`` (``tensor.py``); ``tensor.py`` sets ``_bind`` to ``dispatch.bind`` once dispatch can be
imported, so an operator costs one Python frame above ``bind``.
"""
from __future__ import annotations

from ..ir.ops import OPS as O

_bind = None        # dispatch.bind, set by tensor.py (dispatch imports tensor, so it cannot be imported here)


class TensorOperators:
    """The arithmetic, matmul, logical and comparison operators of ``Tensor``."""

    __slots__ = ()

    def __add__(self, o):
        return _bind(O["add"], self, o)

    def __radd__(self, o):
        return _bind(O["add"], o, self)

    def __sub__(self, o):
        return _bind(O["sub"], self, o)

    def __rsub__(self, o):
        return _bind(O["sub"], o, self)

    def __mul__(self, o):
        return _bind(O["mul"], self, o)

    def __rmul__(self, o):
        return _bind(O["mul"], o, self)

    def __truediv__(self, o):
        return _bind(O["div"], self, o)

    def __rtruediv__(self, o):
        return _bind(O["div"], o, self)

    def __floordiv__(self, o):
        return _bind(O["floordiv"], self, o)

    def __rfloordiv__(self, o):
        return _bind(O["floordiv"], o, self)

    def __mod__(self, o):
        return _bind(O["mod"], self, o)

    def __rmod__(self, o):
        return _bind(O["mod"], o, self)

    def __pow__(self, o):
        return _bind(O["pow"], self, o)

    def __rpow__(self, o):
        return _bind(O["pow"], o, self)

    def __matmul__(self, o):
        return _bind(O["matmul"], self, o)

    def __rmatmul__(self, o):
        return _bind(O["matmul"], o, self)

    def __neg__(self):
        return _bind(O["neg"], self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _bind(O["abs"], self)

    def __invert__(self):
        if self._data.dtype.kind != "b":
            raise RuntimeError(f"bitwise_not: only bool tensors are supported, got {self.dtype.name}")
        return _bind(O["logical_not"], self)

    def __and__(self, o):
        return _bind(O["logical_and"], self, o)

    __rand__ = __and__

    def __or__(self, o):
        return _bind(O["logical_or"], self, o)

    __ror__ = __or__

    def __lt__(self, o):
        return _bind(O["lt"], self, o)

    def __le__(self, o):
        return _bind(O["le"], self, o)

    def __gt__(self, o):
        return _bind(O["gt"], self, o)

    def __ge__(self, o):
        return _bind(O["ge"], self, o)

    def __eq__(self, o):
        return _bind(O["eq"], self, o)

    def __ne__(self, o):
        return _bind(O["ne"], self, o)


__all__ = ["TensorOperators"]
