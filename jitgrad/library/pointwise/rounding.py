"""torch's unary pointwise math beyond the basics: the rounding family (``floor``, ``ceil``, ``trunc``/``fix``,
``round`` with ``decimals=``, ``frac``), ``sgn``, ``positive``, ``absolute``, ``deg2rad``/``rad2deg``, ``exp2``,
``erfc``, ``logit``, ``sinc`` and the predicates ``isneginf``, ``isposinf``, ``isreal``, ``is_floating_point``,
``is_complex`` (functions and Tensor methods, with in-place ``_`` variants where torch has them).

The rounding ops and ``erfc`` are primitives (``ir/ops/pointwise_math.py``: zero gradients for rounding, as
torch); the rest are compositions, with torch's node names.

>>> import jitgrad as jg
>>> jg.round(jg.tensor([0.5, 1.5, 2.25]), decimals=1)
tensor([0.5000, 1.5000, 2.2000])
"""
from __future__ import annotations

import math

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS
from .. import elementary as F
from ...runtime.dispatch import bind
from ..creation.factories import ones_like, zeros_like
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from .inplace import inplace_form


def _need_tensor(name, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")


def _not_impl(kernel, x):
    raise NotImplementedError(f"\"{kernel}\" not implemented for '{dt.torch_scalar_name(x.dtype)}'")


def _rounding(name, kernel):
    op = OPS[name]

    def f(input, **torch_kw):
        if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
            return torch_kwargs(f, name, (input,), {}, torch_kw)
        _need_tensor(name, input)
        if input.dtype is dt.bool_:
            _not_impl(kernel, input)
        return bind(op, input)
    f.__name__ = name
    f.__doc__ = (f"Elementwise ``{name}`` (torch.{name}); integer tensors are returned as a copy; the gradient is "
                 "zero everywhere, as torch's.")
    return f


floor = published("jitgrad", "Tensor", inplace=inplace_form)(_rounding("floor", "floor_vml_cpu"))
ceil = published("jitgrad", "Tensor", inplace=inplace_form)(_rounding("ceil", "ceil_vml_cpu"))
trunc = published("jitgrad", "Tensor", inplace=inplace_form)(_rounding("trunc", "trunc_vml_cpu"))
_round0 = _rounding("round", "round_vml_cpu")


@published("jitgrad", "Tensor", inplace=inplace_form)
def fix(input, **torch_kw):
    """Alias of :func:`trunc` (torch.fix): rounds towards zero."""
    if torch_kw:
        return torch_kwargs(fix, "fix", (input,), {}, torch_kw)
    return trunc(input)


@published("jitgrad", "Tensor", inplace=inplace_form)
def round(input, *, decimals=0, **torch_kw):
    """Round half to even (torch.round); ``decimals`` rounds to that many decimal places (negative: to tens,
    hundreds, ...), as ``round(x * 10**d) / 10**d``.  Zero gradient.

    >>> import jitgrad as jg
    >>> jg.round(jg.tensor([0.5, 1.5, 2.5]))
    tensor([0., 2., 2.])
    """
    if torch_kw:
        return torch_kwargs(round, "round", (input,), {"decimals": decimals}, torch_kw)
    _need_tensor("round", input)
    if decimals == 0:
        return _round0(input)
    if not input.is_floating_point():
        _not_impl("round_cpu", input)
    # torch: nearbyint(x * 10^d) / 10^d, or for d < 0 nearbyint(x / 10^-d) * 10^-d
    if decimals > 0:
        p = 10.0 ** decimals
        r = bind(OPS["round"], input * p) / p
    else:
        p = 10.0 ** -decimals
        r = bind(OPS["round"], input / p) * p
    return named(r, "RoundBackward1")


@published("jitgrad", "Tensor", inplace=inplace_form)
def frac(input, **torch_kw):
    """``input - trunc(input)``: the fractional part, with the sign of ``input`` (torch.frac; gradient 1)."""
    if torch_kw:
        return torch_kwargs(frac, "frac", (input,), {}, torch_kw)
    _need_tensor("frac", input)
    if not input.is_floating_point():
        _not_impl("frac_cpu", input)
    return named(input - bind(OPS["trunc"], input), "FracBackward0")


@published("jitgrad", "Tensor", inplace=inplace_form)
def sgn(input, **torch_kw):
    """The sign of each element (torch.sgn: ``x / |x|`` for complex tensors; for real ones the same as
    :func:`jitgrad.sign`)."""
    if torch_kw:
        return torch_kwargs(sgn, "sgn", (input,), {}, torch_kw)
    _need_tensor("sgn", input)
    if not input.is_floating_point():
        return F.sign(input)
    # torch: (0 < x) - (x < 0) for real tensors: +0.0 at zeros and at NaN (sign keeps NaN and -0.0); zero gradient
    return named(F.where((input == 0) | F.isnan(input), 0.0, F.sign(input)), "SgnBackward0")


@published("jitgrad", "Tensor")
def positive(input):
    """``input`` itself (torch.positive, unary ``+``); bool tensors are refused as torch does."""
    _need_tensor("positive", input)
    if input.dtype is dt.bool_:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


@published("jitgrad", "Tensor", inplace=inplace_form)
def absolute(input, **torch_kw):
    """Alias of :func:`jitgrad.abs` (torch.absolute)."""
    if torch_kw:
        return torch_kwargs(absolute, "absolute", (input,), {}, torch_kw)
    _need_tensor("absolute", input)
    if input.dtype is dt.bool_:
        _not_impl("abs_cpu", input)
    return F.abs(input)


@published("jitgrad", "Tensor", inplace=inplace_form)
def deg2rad(input, **torch_kw):
    """Degrees to radians: ``input * pi / 180`` (integer tensors give float32)."""
    if torch_kw:
        return torch_kwargs(deg2rad, "deg2rad", (input,), {}, torch_kw)
    _need_tensor("deg2rad", input)
    if input.dtype is dt.bool_:
        input = input.to(dt.DEFAULT_FLOAT)
    return named(input * (math.pi / 180.0), "Deg2RadBackward0")


@published("jitgrad", "Tensor", inplace=inplace_form)
def rad2deg(input, **torch_kw):
    """Radians to degrees: ``input * 180 / pi`` (integer tensors give float32)."""
    if torch_kw:
        return torch_kwargs(rad2deg, "rad2deg", (input,), {}, torch_kw)
    _need_tensor("rad2deg", input)
    if input.dtype is dt.bool_:
        input = input.to(dt.DEFAULT_FLOAT)
    return named(input * (180.0 / math.pi), "Rad2DegBackward0")


@published("jitgrad", "Tensor", inplace=inplace_form)
def exp2(input, **torch_kw):
    """``2 ** input`` elementwise (integer tensors give the default float dtype)."""
    if torch_kw:
        return torch_kwargs(exp2, "exp2", (input,), {}, torch_kw)
    _need_tensor("exp2", input)
    return named(2.0 ** (input if input.dtype is not dt.bool_ else input.to(dt.DEFAULT_FLOAT)), "Exp2Backward0")


@published("jitgrad", "Tensor", inplace=inplace_form)
def erfc(input, **torch_kw):
    """The complementary error function ``1 - erf(input)``, accurate in the tail (a primitive)."""
    if torch_kw:
        return torch_kwargs(erfc, "erfc", (input,), {}, torch_kw)
    _need_tensor("erfc", input)
    return bind(OPS["erfc"], input)


@published("jitgrad", "Tensor", inplace=inplace_form)
def logit(input, eps=None, **torch_kw):
    """``log(p / (1 - p))``; with ``eps``, ``p`` is first clamped to ``[eps, 1 - eps]`` and the gradient is 0
    outside that range (torch.logit).

    >>> import jitgrad as jg
    >>> jg.logit(jg.tensor([0.5, 0.75]))
    tensor([0.0000, 1.0986])
    """
    if torch_kw:
        return torch_kwargs(logit, "logit", (input, eps), {}, torch_kw)
    _need_tensor("logit", input)
    x = input if input.is_floating_point() else input.to(dt.DEFAULT_FLOAT)
    if eps is not None:
        x = F.clamp(x, eps, 1.0 - eps)
    return named(F.log(x / (1.0 - x)), "LogitBackward0")


@published("jitgrad", "Tensor", inplace=inplace_form)
def sinc(input, **torch_kw):
    """The normalised sinc ``sin(pi x) / (pi x)``, 1 at 0 (gradient 0 there, as torch's)."""
    if torch_kw:
        return torch_kwargs(sinc, "sinc", (input,), {}, torch_kw)
    _need_tensor("sinc", input)
    x = input if input.is_floating_point() else input.to(dt.DEFAULT_FLOAT)
    zero = x == 0
    px = x * math.pi
    safe = F.where(zero, 1.0, px)
    return named(F.where(zero, 1.0, F.sin(px) / safe), "SincBackward0")


@published("jitgrad", "Tensor")
def isneginf(input, **torch_kw):
    """``input == -inf`` (False for integer tensors), as a bool tensor."""
    if torch_kw:
        return torch_kwargs(isneginf, "isneginf", (input,), {}, torch_kw)
    _need_tensor("isneginf", input)
    return input == -math.inf if input.is_floating_point() else zeros_like(input, dtype=dt.bool_)


@published("jitgrad", "Tensor")
def isposinf(input, **torch_kw):
    """``input == +inf`` (False for integer tensors), as a bool tensor."""
    if torch_kw:
        return torch_kwargs(isposinf, "isposinf", (input,), {}, torch_kw)
    _need_tensor("isposinf", input)
    return input == math.inf if input.is_floating_point() else zeros_like(input, dtype=dt.bool_)


@published("jitgrad", "Tensor")
def isreal(input):
    """True where an element has no imaginary part: everywhere, for jitgrad's real tensors."""
    _need_tensor("isreal", input)
    return ones_like(input, dtype=dt.bool_)


@published("jitgrad")
def is_floating_point(input):
    """Whether ``input``'s dtype is a floating-point type."""
    _need_tensor("is_floating_point", input)
    return input.dtype.is_floating_point


@published("jitgrad", "Tensor")
def is_complex(input):
    """Whether ``input``'s dtype is complex: always False (jitgrad has no complex dtypes)."""
    _need_tensor("is_complex", input)
    return False


__all__ = ["floor", "ceil", "trunc", "fix", "round", "frac", "sgn", "positive", "absolute", "deg2rad", "rad2deg",
           "exp2", "erfc", "logit", "sinc", "isneginf", "isposinf", "isreal", "is_complex", "is_floating_point"]
