"""Gamma-family and inverse-error functions (``lgamma``, ``digamma``, ``polygamma``, ``mvlgamma``, ``igamma`` /
``igammac``, ``erfinv``), and the NaN-ignoring reductions and log-space scan ``nansum``, ``nanmean``,
``logcumsumexp`` (functions and Tensor methods, in-place ``_`` variants where torch has them).

``lgamma``, ``polygamma`` (``digamma`` is ``n = 0``), ``igamma`` (``igammac`` is its upper form) and ``erfinv`` are
primitives (``ir/ops/special.py``: SciPy in eager mode; compiled code runs compositions, igamma SciPy as a host
step); the rest are compositions.

>>> import jitgrad as jg
>>> jg.digamma(jg.tensor([1.0]))
tensor([-0.5772])
"""
from __future__ import annotations

import math

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS
from .. import elementary as F
from ..dim_args import dim_arg
from ...runtime.dispatch import bind
from ..creation.factories import full
from ...runtime.grad_names import named
from .composites import logaddexp
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from ...runtime.traced import is_traced
from .inplace import inplace_form


def _need_tensor(name, x, what="input", pos=1):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{what}' (position {pos}) must be Tensor, not {type(x).__name__}")


def _float(x):
    return x if x.is_floating_point() else x.to(dt.DEFAULT_FLOAT)


@published("jitgrad", "Tensor", inplace=inplace_form)
def lgamma(input, **torch_kw):
    """``log|Gamma(input)|`` (+inf at 0, -1, -2, ...); its gradient is :func:`digamma`."""
    if torch_kw:
        return torch_kwargs(lgamma, "lgamma", (input,), {}, torch_kw)
    _need_tensor("lgamma", input)
    return bind(OPS["lgamma"], input)


@published("jitgrad", "Tensor", inplace=inplace_form)
def digamma(input, **torch_kw):
    """``d/dx log Gamma(x)`` (torch.digamma: -inf at +0, nan at the negative integers); its gradient is
    ``polygamma(1, x)``."""
    if torch_kw:
        return torch_kwargs(digamma, "digamma", (input,), {}, torch_kw)
    _need_tensor("digamma", input)
    return named(bind(OPS["polygamma"], _float(input), n=0), "DigammaBackward0")


@published("jitgrad")
def polygamma(n, input, **torch_kw):
    """The ``n``-th derivative of :func:`digamma` (``n = 0`` is digamma itself); differentiable (its gradient is
    ``polygamma(n + 1, x)``).  Compiled code evaluates it by recurrence and an asymptotic series: exact to a few
    ulp for ``x > -10``; further left, use eager mode."""
    if torch_kw:
        return torch_kwargs(polygamma, "polygamma", (n, input), {}, torch_kw)
    _need_tensor("polygamma", input, "input", 2)
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return named(bind(OPS["polygamma"], _float(input), n=n), "PolygammaBackward0")


@published("Tensor", name="polygamma")
def _polygamma_method(self, n):
    """``x.polygamma(n)``: torch's Tensor method takes ``n`` after the tensor."""
    return polygamma(n, self)


@published("jitgrad", "Tensor", inplace=inplace_form)
def mvlgamma(input, p, **torch_kw):
    """The multivariate log-gamma of dimension ``p``: ``sum_i lgamma(x - i/2) + p(p-1)/4 log(pi)``; every element
    must exceed ``(p - 1) / 2`` (torch.mvlgamma, torch.special.multigammaln)."""
    if torch_kw:
        return torch_kwargs(mvlgamma, "mvlgamma", (input, p), {}, torch_kw)
    _need_tensor("mvlgamma", input)
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    if not input.is_floating_point():
        raise RuntimeError("mvlgamma is not implemented for Long")
    if not is_traced(input) and not bool((input > (p - 1) / 2).all()):      # a trace cannot read values
        raise RuntimeError("All elements must be greater than (p-1)/2")
    r = lgamma(input)
    for i in range(1, p):
        r = r + lgamma(input - i / 2)
    return named(r + p * (p - 1) / 4 * math.log(math.pi), "MvlgammaBackward0")


@published("jitgrad", "Tensor", inplace=inplace_form)
def erfinv(input, **torch_kw):
    """The inverse error function on ``(-1, 1)`` (+-inf at +-1, nan beyond); gradient
    ``sqrt(pi) / 2 * exp(erfinv(x) ** 2)``."""
    if torch_kw:
        return torch_kwargs(erfinv, "erfinv", (input,), {}, torch_kw)
    _need_tensor("erfinv", input)
    return bind(OPS["erfinv"], input)


@published("jitgrad", "Tensor", inplace=inplace_form)
def igamma(input, other, **torch_kw):
    """The regularized lower incomplete gamma function ``P(input, other)``, elementwise with broadcasting
    (torch.igamma, torch.special.gammainc).  Differentiable in ``other`` only: backward to ``input`` raises
    NotImplementedError, and so does forward mode, as torch's."""
    if torch_kw:
        return torch_kwargs(igamma, "igamma", (input, other), {}, torch_kw)
    _need_tensor("igamma", input)
    _need_tensor("igamma", other, "other", 2)
    return bind(OPS["igamma"], input, other)


@published("jitgrad", "Tensor", inplace=inplace_form)
def igammac(input, other, **torch_kw):
    """The regularized upper incomplete gamma function ``Q(input, other) = 1 - P(input, other)`` (torch.igammac,
    torch.special.gammaincc); derivatives as :func:`igamma`'s."""
    if torch_kw:
        return torch_kwargs(igammac, "igammac", (input, other), {}, torch_kw)
    _need_tensor("igammac", input)
    _need_tensor("igammac", other, "other", 2)
    return named(bind(OPS["igamma"], input, other, upper=True), "IgammacBackward0")


@published("jitgrad", "Tensor")
def nansum(input, dim=None, keepdim=False, *, dtype=None, **torch_kw):
    """:func:`jitgrad.sum` treating NaN as 0 (its gradient there is 0)."""
    if torch_kw:
        return torch_kwargs(nansum, "nansum", (input, dim, keepdim), {"dtype": dtype}, torch_kw)
    _need_tensor("nansum", input)
    x = F.where(F.isnan(input), 0.0, input) if input.is_floating_point() else input
    return named(F.sum(x, dim, keepdim, dtype=dtype), "NansumBackward0")


@published("jitgrad", "Tensor")
def nanmean(input, dim=None, keepdim=False, *, dtype=None, **torch_kw):
    """The mean over the non-NaN elements (NaN where there are none); floating-point tensors only."""
    if torch_kw:
        return torch_kwargs(nanmean, "nanmean", (input, dim, keepdim), {"dtype": dtype}, torch_kw)
    _need_tensor("nanmean", input)
    if dtype is not None:
        input = input.to(dtype)
    if not input.is_floating_point():
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype but got "
                           f"{dt.torch_scalar_name(input.dtype)}")
    keep = ~F.isnan(input)
    count = F.sum(keep.to(input.dtype), dim, keepdim)
    return F.sum(F.where(keep, input, 0.0), dim, keepdim) / count


@published("jitgrad", "Tensor")
def logcumsumexp(input, dim, **torch_kw):
    """``log(cumsum(exp(input), dim))`` without overflow or underflow: a log-space prefix scan with
    :func:`jitgrad.logaddexp` (log2(n) rounds), so elements far below the running maximum keep their value."""
    if torch_kw:
        return torch_kwargs(logcumsumexp, "logcumsumexp", (input, dim), {}, torch_kw)
    _need_tensor("logcumsumexp", input)
    if not input.is_floating_point():
        raise NotImplementedError(f"\"logcumsumexp_out_cpu\" not implemented for '{dt.torch_scalar_name(input.dtype)}'")
    if input.ndim == 0:
        return named(input * 1.0, "LogcumsumexpBackward0")
    ax = dim_arg("logcumsumexp", input, dim)
    n = input.shape[ax]
    y, k = input, 1
    while k < n:
        pad_shape = list(y.shape)
        pad_shape[ax] = k
        pad = full(tuple(pad_shape), -math.inf, dtype=y.dtype, device=y.device)
        y = logaddexp(y, F.cat([pad, y.narrow(ax, 0, n - k)], ax))
        k *= 2
    return named(y if y is not input else input * 1.0, "LogcumsumexpBackward0")


@published("Tensor", name="polygamma_")
def _polygamma_(self, n):
    """In place: ``x.polygamma_(n)`` writes ``polygamma(n, x)`` into ``x``."""
    return self._apply_inplace(lambda x: polygamma(n, x))


__all__ = ["lgamma", "digamma", "mvlgamma", "erfinv", "igamma", "igammac", "nansum", "nanmean", "logcumsumexp",
           "polygamma"]
