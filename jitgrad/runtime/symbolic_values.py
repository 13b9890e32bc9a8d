"""Values a trace makes whose size is symbolic (``ir/symbolic.py``): a filled tensor or an ``arange`` of a
symbolic length cannot be a NumPy constant of the graph, so they are ops on a 0-d constant (a broadcast, and a
cumulative sum for ``arange``), sized by the call's values once the graph is instantiated.  ``nonzero`` of a
traced tensor has a data-dependent length (``ir/unbacked.py``): a new symbol, bounded by the tensor's size."""
from __future__ import annotations

import weakref

import numpy as np

from ..ir.graph import Var
from ..ir.ops import OPS as O
from ..ir.symbolic import has_symbols, unbacked_symbol
from ..ir.unbacked import user_site
from ..tracer import STATE as _TR
from .dispatch import bind
from .traced import traced_payload
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


def bounded_nonzero_here() -> bool:
    """Whether ``nonzero(t)`` is traced with a data-dependent size: inside a @jitgrad.compile trace (not a
    transform's trace, which runs its function once per example or reads no values: those refuse as before)."""
    tr = _TR.active
    return tr is not None and tr.on_capture is not None and tr.on_var is None


def nonzero(t) -> Tensor:
    """``nonzero(t)`` in a compiled function's trace: ``(u, t.ndim)`` int64 coordinates, ``u`` a data-dependent
    size (at most ``t.numel()``) whose value is the count of nonzero elements (``ir/passes/bounded_sizes.py``)."""
    tr = _TR.active
    key = mask_key({o: e for e in tr.eqns for o in e.outs}, traced_payload(t, tr))
    r = tr.nonzeros.get(key)
    r = r() if r is not None else None      # (weakly: a tensor the trace keeps would count as leaked state)
    if r is None:       # (a mask used twice, h[m] and target[m], gives one size: their shapes agree)
        n = (t != 0).sum()
        if n.dtype.name != "int64":
            n = n.long()
        origin = f"the nonzero count of a {t.dtype.name}{list(t.shape)} tensor at {user_site()}"
        r = bind(O["nonzero_bounded"], t, n, size=unbacked_symbol(t.numel(), origin))
        tr.nonzeros[key] = weakref.ref(r)
    return r


_DRAWS = frozenset(("rand_uniform", "rand_normal", "multinomial", "randperm"))


def mask_key(defs, v, depth=6):
    """What identifies mask ``v`` (``defs``: the trace's eqn defining each Var): the same ops on the same inputs
    give the same key, so ``y[x > 0] = x[x > 0] * 2`` computes one mask twice and gets one data-dependent size (as
    CSE would merge them); a graph input, a value deeper than ``depth`` ops, or a random draw is its own key."""
    if type(v) is not Var or depth == 0:
        return v if type(v) is Var else ("lit", _lit_key(v))
    e = defs.get(v)
    if e is None or e.op.name in _DRAWS or len(e.outs) != 1:
        return v
    return (e.op.name, repr(sorted(e.params.items())), tuple(mask_key(defs, x, depth - 1) for x in e.ins))


def _lit_key(lit):
    a = lit.value
    if isinstance(a, np.ndarray):
        return (a.dtype.str, a.shape, a.tobytes()) if a.size <= 64 else id(a)
    return (type(a).__name__, repr(a))


__all__ = ["arange", "bounded_nonzero_here", "filled", "mask_key", "nonzero", "symbolic_size"]
