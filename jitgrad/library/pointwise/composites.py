"""Pointwise functions torch has as kernels, composed here from primitives: ``lerp``, ``logaddexp``,
``nan_to_num`` and ``isclose`` (functions and Tensor methods).  The compositions differentiate to any order and
fuse in compiled code like any elementwise chain; results carry torch's grad_fn names.

>>> import jitgrad as jg
>>> jg.lerp(jg.tensor([0.0, 10.0]), jg.tensor([10.0, 20.0]), 0.25)
tensor([ 2.5000, 12.5000])
"""
from __future__ import annotations

import math

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from .. import elementary as F
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _need_tensor(name, arg, what, pos):
    if not isinstance(arg, Tensor):
        raise TypeError(f"{name}(): argument '{what}' (position {pos}) must be Tensor, not {type(arg).__name__}")


@published("jitgrad", "Tensor")
def lerp(input, end, weight, **torch_kw):
    """``input + weight * (end - input)``: linear interpolation, with ``weight`` a number or a tensor
    (broadcast); ``input``, ``end`` and a tensor ``weight`` share one dtype, as torch requires.

    >>> import jitgrad as jg
    >>> jg.tensor([1.0, 2.0]).lerp(jg.tensor([3.0, 6.0]), jg.tensor([0.5, 0.25]))
    tensor([2., 3.])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(lerp, "lerp", (input, end, weight), {}, torch_kw)
    if not isinstance(end, Tensor):
        kinds = ", ".join(type(a).__name__ if not isinstance(a, Tensor) else "Tensor" for a in (input, end, weight))
        raise TypeError(f"lerp() received an invalid combination of arguments - got ({kinds}), but expected one "
                        "of:\n * (Tensor input, Tensor end, Tensor weight, *, Tensor out = None)\n"
                        " * (Tensor input, Tensor end, Number weight, *, Tensor out = None)\n")
    for arg, what in ((end, "end"), (weight, "weight")):
        if isinstance(arg, Tensor) and arg.dtype is not input.dtype:
            raise RuntimeError(f"expected dtype {dt.torch_cpp_name(input.dtype)} for `{what}` but got dtype "
                               f"{dt.torch_cpp_name(arg.dtype)}")
    r = input + weight * (end - input)
    return named(r, "LerpBackward1" if isinstance(weight, Tensor) else "LerpBackward0")


@published("jitgrad", "Tensor")
def logaddexp(input, other, **torch_kw):
    """``log(exp(input) + exp(other))`` without overflow: ``max + log1p(exp(-|input - other|))``.

    >>> import jitgrad as jg
    >>> jg.logaddexp(jg.tensor([0.0, 1.0]), jg.tensor([0.0, 1.0]))
    tensor([0.6931, 1.6931])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(logaddexp, "logaddexp", (input, other), {}, torch_kw)
    _need_tensor("logaddexp", input, "input", 1)
    _need_tensor("logaddexp", other, "other", 2)
    for t in (input, other):
        if not t.is_floating_point():
            raise NotImplementedError(f"\"logaddexp_cpu\" not implemented for '{dt.torch_scalar_name(t.dtype)}'")
    first = input >= other
    # equal infinities give themselves (their difference would be NaN): that branch sees a difference of 0
    same_inf = F.isinf(input) & (input == other)
    gap = F.where(same_inf, 0.0, F.where(first, input - other, other - input))
    top = F.where(first, input, other)
    return named(top + F.log1p(F.exp(-gap)), "LogaddexpBackward0")


@published("jitgrad", "Tensor")
def nan_to_num(input, nan=0.0, posinf=None, neginf=None, **torch_kw):
    """``input`` with NaN replaced by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (by default the dtype's
    largest and smallest finite values); integer tensors are returned as a copy.

    >>> import jitgrad as jg
    >>> jg.nan_to_num(jg.tensor([float("nan"), 1.0, float("-inf")]), neginf=-1.0)
    tensor([ 0.,  1., -1.])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(nan_to_num, "nan_to_num", (input, nan, posinf, neginf), {}, torch_kw)
    if not input.is_floating_point():
        return input.clone()
    big = float(np.finfo(input.dtype.np).max)
    posinf = big if posinf is None else posinf
    neginf = -big if neginf is None else neginf
    r = F.where(F.isnan(input), nan, F.where(input == math.inf, posinf, F.where(input == -math.inf, neginf, input)))
    return named(r, "NanToNumBackward0")


@published("jitgrad", "Tensor")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False, **torch_kw):
    """Elementwise ``|input - other| <= atol + rtol * |other|`` (equal infinities are close; NaNs only with
    ``equal_nan``), as a bool tensor.

    >>> import jitgrad as jg
    >>> jg.isclose(jg.tensor([1.0, 1.1]), jg.tensor([1.0, 1.0]))
    tensor([ True, False])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(isclose, "isclose", (input, other, rtol, atol, equal_nan), {}, torch_kw)
    _need_tensor("isclose", other, "other", 2)
    if input.dtype is not other.dtype:
        raise RuntimeError(f"{dt.torch_scalar_name(input.dtype)} did not match {dt.torch_scalar_name(other.dtype)}")
    if rtol < 0:
        raise RuntimeError(f"rtol must be greater than or equal to zero, but got {rtol}")
    if atol < 0:
        raise RuntimeError(f"atol must be greater than or equal to zero, but got {atol}")
    close = input == other
    if equal_nan and input.is_floating_point():
        close = close | (F.isnan(input) & F.isnan(other))
    if (atol == 0 and rtol == 0) or input.dtype is dt.bool_:
        return close
    a, b = (input, other) if input.is_floating_point() else (input.to(dt.DEFAULT_FLOAT), other.to(dt.DEFAULT_FLOAT))
    err = F.abs(a - b)
    return close | (F.isfinite(err) & (err <= atol + F.abs(b * rtol)))


@published("Tensor", name="lerp_")
def _lerp_(self, end, weight):
    """In place: ``x.lerp_(end, weight)`` writes ``lerp(x, end, weight)`` into ``x``."""
    return self._apply_inplace(lerp, end, weight)


@published("Tensor", name="nan_to_num_")
def _nan_to_num_(self, nan=0.0, posinf=None, neginf=None):
    """In place: ``x.nan_to_num_()`` writes ``nan_to_num(x, ...)`` into ``x``."""
    return self._apply_inplace(nan_to_num, nan, posinf, neginf)


__all__ = ["lerp", "logaddexp", "nan_to_num", "isclose"]
