"""Tensor's Python operators (``x + y``, ``x @ w``, ``-x``, ``x < y``, ...): each one ``bind`` of a primitive.

The methods of ``TensorOperators`` are ``Tensor``'s (published by ``publisher.py``), so an operator costs one
Python frame above ``bind``.  (``&``, ``|``, ``^``, ``~`` and the shifts are library/pointwise/integer.py's.)
"""
from __future__ import annotations

from ..declarations import published
from ..ir.ops import OPS as O
from .dispatch import bind as _bind


@published("Tensor.methods")
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
