"""Values a trace makes whose size is symbolic (``ir/symbolic.py``): a filled tensor or an ``arange`` of a
symbolic length cannot be a NumPy constant of the graph, so they are ops on a 0-d constant (a broadcast, and a
cumulative sum for ``arange``), sized by the call's values once the graph is instantiated."""
from __future__ import annotations

import numpy as np

from ..ir.ops import OPS as O
from ..ir.symbolic import has_symbols
from .dispatch import bind
from .tensor import Tensor


def symbolic_size(size) -> bool:
    """Whether ``size`` (a shape, or a length) holds a symbol: the caller makes its value with the functions here."""
    return has_symbols(size)


def filled(shape, value, np_dtype) -> Tensor:
    """A traced tensor of ``shape`` (symbolic) holding ``value``: a copy of a broadcast 0-d constant (a value of
    its own, as a factory's, so writes into it reach nothing else)."""
    c = Tensor._make(np.array(value, dtype=np_dtype))
    return bind(O["copy"], bind(O["broadcast_to"], c, shape=tuple(shape)))


def arange(n, np_dtype=np.int64) -> Tensor:
    """``arange(n)`` for a symbolic ``n``: the cumulative sum of ``n`` ones, less one."""
    ones = bind(O["broadcast_to"], Tensor._make(np.array(1, dtype=np_dtype)), shape=(n,))
    return bind(O["cumsum"], ones, axis=0, reverse=False) - 1


__all__ = ["arange", "filled", "symbolic_size"]
