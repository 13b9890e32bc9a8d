"""Tensor's Python operators (``x + y``, ``x @ w``, ``-x``, ``x < y``, ...): each one ``bind`` of a primitive.

The operators are a table (method name -> primitive); :func:`flat_method` makes each method from its row.  A made
method is flat: when no interceptor is active (``bind_route.ROUTE.plain``: no profiler recording, no forward-AD
level) it calls the primitive's flat entry point (``flat_bind.flat_entry``: the signature's cached entry, the impl,
the output and its node in one frame), so an operator costs one Python frame above the dispatch; otherwise it goes
through ``bind``.  The entry point hands a call to ``dispatch._bind`` (read from the module) whenever that is
wrapped, so a spy set on ``dispatch._bind`` sees operators too.  (``&``, ``|``, ``^``, ``~`` and the shifts are library/pointwise/integer.py's.)
"""
from __future__ import annotations

from ..declarations import published
from ..ir.ops import OPS
from . import dispatch as _d
from .bind_route import ROUTE as _ROUTE
from .flat_bind import flat_entry


def flat_method(name: str, opname: str, arity: int, reflected: bool = False):
    """The Tensor method ``name`` that binds primitive ``opname`` to ``self`` (and ``other``, first when
    ``reflected``: ``2 - x`` is ``x.__rsub__(2)``)."""
    op = OPS[opname]
    flat = flat_entry(op, arity)
    if arity == 1:
        def method(self):
            if _ROUTE.plain:
                return flat(self)
            return _d.bind(op, self)
    elif reflected:
        def method(self, other):
            if _ROUTE.plain:
                return flat(other, self)
            return _d.bind(op, other, self)
    else:
        def method(self, other):
            if _ROUTE.plain:
                return flat(self, other)
            return _d.bind(op, self, other)
    method.__name__ = name
    method.__doc__ = f"``{name}``: primitive ``{opname}``" + (" with the operands swapped." if reflected else ".")
    return method


# method stem -> primitive: each arithmetic stem gives __stem__ and its reflected __rstem__
_ARITHMETIC = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "floordiv": "floordiv", "mod": "mod",
               "pow": "pow", "matmul": "matmul"}
_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
_UNARY = {"neg": "neg", "abs": "abs"}


def _operator_methods() -> dict:
    methods = {}
    for stem, opname in _ARITHMETIC.items():
        methods[f"__{stem}__"] = flat_method(f"__{stem}__", opname, 2)
        methods[f"__r{stem}__"] = flat_method(f"__r{stem}__", opname, 2, reflected=True)
    for stem in _COMPARISONS:
        methods[f"__{stem}__"] = flat_method(f"__{stem}__", stem, 2)
    for stem, opname in _UNARY.items():
        methods[f"__{stem}__"] = flat_method(f"__{stem}__", opname, 1)
    return methods


def _pos(self):
    """``+x`` is ``x`` itself, as in torch."""
    return self


def _operator_class():
    methods = {"__pos__": _pos, **_operator_methods()}
    for name, m in methods.items():
        m.__qualname__ = f"TensorOperators.{name}"
    return type("TensorOperators", (), {
        "__doc__": "The arithmetic, matmul, logical and comparison operators of ``Tensor``.",
        "__slots__": (), "__module__": __name__, **methods})


TensorOperators = published("Tensor.methods")(_operator_class())


__all__ = ["TensorOperators", "flat_method"]
