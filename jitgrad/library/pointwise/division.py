"""``div``/``divide`` with torch's ``rounding_mode`` (None, ``'trunc'``, ``'floor'``), as functions, Tensor methods
and in place (``div_``, ``divide_``).

dtypes as torch: ``rounding_mode=None`` is true division (integers give the default float dtype); with ``'trunc'``
or ``'floor'`` the result has the promoted dtype of the inputs, so integers stay integers.  Gradients: true
division as the ``div`` primitive; with a rounding mode both gradients are zero (torch's DivBackward2).
Compositions of primitives: floats round with ``trunc`` (``trunc(a / b)``, torch's kernel) or floor division
(the ``floordiv`` primitive, Python's ``//`` rounding), the zero gradient coming from ``floor``/``trunc``;
integer truncation corrects floor division by one where the remainder is non-zero and the signs differ.

>>> import jitgrad as jg
>>> jg.div(jg.tensor([7, -7]), 2, rounding_mode='trunc'), jg.tensor([7, -7]).div(2, rounding_mode='floor')
(tensor([ 3, -3]), tensor([ 3, -4]))
"""
from __future__ import annotations

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS
from ...runtime.dispatch import bind
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

_MODES = (None, "trunc", "floor")


def _negative(x):
    return bind(OPS["lt"], x, 0) if isinstance(x, Tensor) else x < 0


def _rounded(input, other, mode):
    ins = [(x.ndim, x.dtype) for x in (input, other) if isinstance(x, Tensor)]
    scalars = [x for x in (input, other) if not isinstance(x, Tensor)]
    d = dt.result_type(ins, scalars)
    if d is dt.bool_:
        raise NotImplementedError(f"\"div_{mode}_cpu\" not implemented for 'Bool'")
    if d.is_floating_point:
        q = bind(OPS["div"], input, other)
        if mode == "trunc":
            return named(bind(OPS["trunc"], q), "DivBackward2")
        # floor: the floordiv primitive's value (Python's rounding of the exact quotient, as torch's kernel); the
        # graph (zero gradients) goes through floor(a / b), chosen wherever the two agree, so the value is exact
        ad = input.detach() if isinstance(input, Tensor) else input
        od = other.detach() if isinstance(other, Tensor) else other
        exact = bind(OPS["floordiv"], ad, od)
        fl = bind(OPS["floor"], q)
        return named(bind(OPS["where"], bind(OPS["eq"], fl, exact), fl, exact), "DivBackward2")
    q = bind(OPS["floordiv"], input, other)
    if mode == "floor":
        return q
    r = bind(OPS["mod"], input, other)
    fix = bind(OPS["logical_and"], bind(OPS["ne"], r, 0), bind(OPS["ne"], _negative(input), _negative(other)))
    return bind(OPS["add"], q, fix).to(d)


@published("jitgrad", "Tensor")
def div(input, other, *, rounding_mode=None, **torch_kw):
    """``input / other`` elementwise; ``rounding_mode``: None (true division), ``'trunc'`` (towards zero) or
    ``'floor'`` (towards minus infinity).  With a rounding mode integer inputs give integers and the gradient is
    zero, as torch."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(div, "div", (input, other), {"rounding_mode": rounding_mode}, torch_kw)
    if rounding_mode not in _MODES:
        raise RuntimeError("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                           f"'{rounding_mode}'")
    if not isinstance(input, Tensor):
        if not isinstance(other, Tensor):
            raise TypeError(f"div(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if rounding_mode is None:
        return bind(OPS["div"], input, other)
    return _rounded(input, other, rounding_mode)


@published("jitgrad", "Tensor")
def divide(input, other, *, rounding_mode=None, **torch_kw):
    """Alias of :func:`div`."""
    if torch_kw:
        return torch_kwargs(divide, "divide", (input, other), {"rounding_mode": rounding_mode}, torch_kw)
    return div(input, other, rounding_mode=rounding_mode)


@published("Tensor")
def div_(self, other, *, rounding_mode=None):
    """In place: ``x.div_(other, rounding_mode=None)`` writes ``div(x, other, rounding_mode=...)`` into ``x``."""
    return self._apply_inplace(lambda s, *o: div(s, o[0] if o else other, rounding_mode=rounding_mode),
                               *([other] if isinstance(other, Tensor) else []))


@published("Tensor")
def divide_(self, other, *, rounding_mode=None):
    """Alias of ``Tensor.div_``."""
    return div_(self, other, rounding_mode=rounding_mode)
