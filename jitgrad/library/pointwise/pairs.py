"""torch's two-argument pointwise math beyond arithmetic: ``hypot``, ``fmod``, ``copysign``, ``heaviside``,
``xlogy``, ``float_power``, ``logaddexp2``, ``fmax``/``fmin``, ``ldexp``, ``frexp``, ``logical_xor``, and the
fused ``addcmul``/``addcdiv`` (functions and Tensor methods, in-place ``_`` variants where torch has them).

``hypot``, ``fmod``, ``copysign`` and ``xlogy`` are primitives (``ir/ops/pointwise_math.py``: ``xlogy(0, y)`` is 0
even where ``log y`` is -inf, with torch's gradients there); the rest are compositions whose gradients match
torch's at the special points (``fmax`` gives a tie's gradient to ``input``).

>>> import jitgrad as jg
>>> jg.hypot(jg.tensor([3.0, 5.0]), jg.tensor([4.0, 12.0]))
tensor([ 5., 13.])
"""
from __future__ import annotations

import math
from collections import namedtuple

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS
from .. import elementary as F
from ...runtime.dispatch import bind
from ..creation.factories import full_like, ones_like
from ...runtime.grad_names import named
from .composites import logaddexp
from .rounding import floor
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from .inplace import inplace_form


def _tensor(name, arg, what, pos):
    if not isinstance(arg, Tensor):
        raise TypeError(f"{name}(): argument '{what}' (position {pos}) must be Tensor, not {type(arg).__name__}")


def _not_impl(kernel, d):
    raise NotImplementedError(f"\"{kernel}\" not implemented for '{dt.torch_scalar_name(d)}'")


def _promoted(*xs):
    from ...runtime.dispatch import _avals
    from ...ir.ops.opdef import result_dtype
    return result_dtype(_avals(OPS["add"], xs))


@published("jitgrad", "Tensor", inplace=inplace_form)
def hypot(input, other, **torch_kw):
    """``sqrt(input**2 + other**2)`` without overflow or underflow (torch.hypot; float tensors only)."""
    if torch_kw:
        return torch_kwargs(hypot, "hypot", (input, other), {}, torch_kw)
    _tensor("hypot", input, "input", 1)
    _tensor("hypot", other, "other", 2)
    d = _promoted(input, other)
    if not d.is_floating_point:
        _not_impl("hypot_cpu", d)
    return bind(OPS["hypot"], input, other)


@published("jitgrad", "Tensor", inplace=inplace_form)
def fmod(input, other, **torch_kw):
    """C's remainder ``input - trunc(input / other) * other``: the result has the sign of ``input`` (compare
    :func:`jitgrad.remainder`); an integer zero divisor raises ZeroDivisionError, as torch."""
    if torch_kw:
        return torch_kwargs(fmod, "fmod", (input, other), {}, torch_kw)
    _tensor("fmod", input, "input", 1)
    return bind(OPS["fmod"], input, other)


@published("jitgrad", "Tensor", inplace=inplace_form)
def copysign(input, other, **torch_kw):
    """``|input|`` with the sign (bit) of ``other``; the result is floating point (torch.copysign)."""
    if torch_kw:
        return torch_kwargs(copysign, "copysign", (input, other), {}, torch_kw)
    _tensor("copysign", input, "input", 1)
    if isinstance(other, bool):
        other = float(other)
    return named(bind(OPS["copysign"], input, other), "CopysignBackward0" if isinstance(other, Tensor)
                 else "CopysignBackward1")


@published("jitgrad", "Tensor", inplace=inplace_form)
def heaviside(input, values, **torch_kw):
    """The Heaviside step: 0 where ``input < 0``, ``values`` where ``input == 0``, 1 where ``input > 0``
    (torch.heaviside: one dtype for both; it has no derivative, backward through it raises)."""
    if torch_kw:
        return torch_kwargs(heaviside, "heaviside", (input, values), {}, torch_kw)
    _tensor("heaviside", input, "input", 1)
    _tensor("heaviside", values, "values", 2)
    if input.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    if input.requires_grad or values.requires_grad:
        # zeros that still hang on input's graph, so the result records a node (whose backward raises)
        low = F.where(ones_like(input, dtype=dt.bool_), 0.0, input)
        r = F.where(input == 0, values, F.where(input > 0, 1.0, low))
        r = bind(OPS["delayed_error"], r, msg="derivative for aten::heaviside is not implemented")
    else:
        r = F.where(input == 0, values, (input > 0).to(input.dtype))
    return r


def _scalar_pair(name, input, other):
    """torch's Tensor/Number overloads: one of the two may be a Python number (not both)."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError(f"{name}() received an invalid combination of arguments - got "
                        f"({type(input).__name__}, {type(other).__name__})")


@published("jitgrad", "Tensor", inplace=inplace_form)
def xlogy(input, other, **torch_kw):
    """``input * log(other)``, and 0 where ``input == 0`` (unless ``other`` is NaN), as torch.xlogy: the gradient
    there is 0 for ``input`` even where ``log(other)`` is -inf.

    >>> import jitgrad as jg
    >>> jg.xlogy(jg.tensor([0.0, 2.0]), jg.tensor([0.0, 1.0]))
    tensor([0., 0.])
    """
    if torch_kw:
        return torch_kwargs(xlogy, "xlogy", (input, other), {}, torch_kw)
    _scalar_pair("xlogy", input, other)
    return named(_xlog(input, other, False), "XlogyBackward0" if isinstance(input, Tensor) and
                 isinstance(other, Tensor) else "XlogyBackward1" if isinstance(other, Tensor) else "XlogyBackward2")


def _xlog(x, y, plus1):
    """The xlogy primitive (ir/ops/pointwise_math.py) on two tensors: a Python number beside a tensor becomes a
    tensor of the result's floating dtype (shared with xlog1py)."""
    d = _promoted(x, y)
    d = d if d.is_floating_point else dt.DEFAULT_FLOAT
    x = x if isinstance(x, Tensor) else full_like(y, x, dtype=d)
    y = y if isinstance(y, Tensor) else full_like(x, y, dtype=d)
    return bind(OPS["xlogy"], x, y, plus1=plus1)


@published("jitgrad", "Tensor", inplace=inplace_form)
def float_power(input, exponent, **torch_kw):
    """``input ** exponent`` computed in float64 (torch.float_power: the result is float64 for any dtype)."""
    if torch_kw:
        return torch_kwargs(float_power, "float_power", (input, exponent), {}, torch_kw)
    _scalar_pair("float_power", input, exponent)
    a = input.to(dt.float64) if isinstance(input, Tensor) else float(input)
    b = exponent.to(dt.float64) if isinstance(exponent, Tensor) else float(exponent)
    return a ** b


@published("jitgrad", "Tensor")
def logaddexp2(input, other, **torch_kw):
    """``log2(2**input + 2**other)`` without overflow (torch.logaddexp2; float tensors)."""
    if torch_kw:
        return torch_kwargs(logaddexp2, "logaddexp2", (input, other), {}, torch_kw)
    _tensor("logaddexp2", input, "input", 1)
    _tensor("logaddexp2", other, "other", 2)
    for t in (input, other):
        if not t.is_floating_point():
            _not_impl("logaddexp2_cpu", t.dtype)
    ln2 = math.log(2.0)
    return named(logaddexp(input * ln2, other * ln2) * (1.0 / ln2), "Logaddexp2Backward0")


def _fmaxmin(name, cmp):
    def f(input, other, **torch_kw):
        if torch_kw:
            return torch_kwargs(f, name, (input, other), {}, torch_kw)
        _tensor(name, input, "input", 1)
        _tensor(name, other, "other", 2)
        # torch: the gradient goes to input where input wins, ties included, or other is NaN; to other elsewhere
        first = cmp(input, other) | F.isnan(other)
        d = _promoted(input, other)
        return named(F.where(first, input.to(d), other.to(d)), name.title() + "Backward0")
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name[1:]}imum that ignores NaN (torch.{name}): NaN only where both are NaN; a tie's "
                 "gradient goes to ``input``.")
    return f


fmax = published("jitgrad", "Tensor")(_fmaxmin("fmax", lambda a, b: a >= b))
fmin = published("jitgrad", "Tensor")(_fmaxmin("fmin", lambda a, b: a <= b))


@published("jitgrad", "Tensor", inplace=inplace_form)
def ldexp(input, other, **torch_kw):
    """``input * 2 ** other`` (torch.ldexp; the result is floating point)."""
    if torch_kw:
        return torch_kwargs(ldexp, "ldexp", (input, other), {}, torch_kw)
    _tensor("ldexp", input, "input", 1)
    _tensor("ldexp", other, "other", 2)
    return named(input * (2.0 ** other), "LdexpBackward0")       # torch: input * pow(2.0, other)


def _scale(x, e):
    """``x * 2 ** -e`` in two exact steps: a subnormal's ``2 ** -e`` alone overflows."""
    h = floor(e * 0.5)
    return x * 2.0 ** -h * 2.0 ** (h - e)


frexp_result = namedtuple("frexp", ["mantissa", "exponent"])


@published("jitgrad", "Tensor")
def frexp(input, **torch_kw):
    """Mantissa in ``[0.5, 1)`` (in magnitude) and int32 exponent with ``input = mantissa * 2 ** exponent``;
    0, inf and NaN keep exponent 0 (torch.frexp; floating-point tensors only; the mantissa's gradient is
    ``grad / 2 ** exponent``)."""
    if torch_kw:
        return torch_kwargs(frexp, "frexp", (input,), {}, torch_kw)
    _tensor("frexp", input, "input", 1)
    if not input.is_floating_point():
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    x = input.detach()
    special = (x == 0) | ~F.isfinite(x)
    mag = F.where(special, 1.0, F.abs(x))
    e = floor(F.log2(mag)) + 1.0
    # log2 may land an ulp off at powers of two: step the exponent so |mantissa| is in [0.5, 1)
    m = _scale(mag, e)
    e = F.where(m >= 1.0, e + 1.0, F.where(m < 0.5, e - 1.0, e))
    e = F.where(special, 0.0, e)
    mant = named(_scale(input, e), "FrexpBackward0")
    return frexp_result(mant, e.to(dt.int32))


@published("jitgrad", "Tensor", inplace=inplace_form)
def logical_xor(input, other, **torch_kw):
    """Elementwise exclusive or of the truth values (nonzero is True), as a bool tensor."""
    if torch_kw:
        return torch_kwargs(logical_xor, "logical_xor", (input, other), {}, torch_kw)
    _tensor("logical_xor", input, "input", 1)
    _tensor("logical_xor", other, "other", 2)
    return (input != 0) != (other != 0)


@published("jitgrad", "Tensor", inplace=inplace_form)
def addcmul(input, tensor1, tensor2, *, value=1, **torch_kw):
    """``input + value * tensor1 * tensor2`` (torch.addcmul)."""
    if torch_kw:
        return torch_kwargs(addcmul, "addcmul", (input, tensor1, tensor2), {"value": value}, torch_kw)
    for i, (t, w) in enumerate(((input, "input"), (tensor1, "tensor1"), (tensor2, "tensor2"))):
        _tensor("addcmul", t, w, i + 1)
    if isinstance(value, float) and not _promoted(input, tensor1, tensor2).is_floating_point:
        value = int(value)      # torch casts the scalar to the integer result type
    return named(input + value * tensor1 * tensor2, "AddcmulBackward0")


_ADDCDIV_INT = ("Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform "
                "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as "
                "(input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input "
                "+ value * tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter "
                "implementation: (input + value * tensor1 / tensor2), for all dtypes.")


@published("jitgrad", "Tensor", inplace=inplace_form)
def addcdiv(input, tensor1, tensor2, *, value=1, **torch_kw):
    """``input + value * tensor1 / tensor2`` (torch.addcdiv; integer ``tensor1``/``tensor2`` are refused)."""
    if torch_kw:
        return torch_kwargs(addcdiv, "addcdiv", (input, tensor1, tensor2), {"value": value}, torch_kw)
    for i, (t, w) in enumerate(((input, "input"), (tensor1, "tensor1"), (tensor2, "tensor2"))):
        _tensor("addcdiv", t, w, i + 1)
    if not tensor1.is_floating_point() and not tensor2.is_floating_point():
        raise RuntimeError(_ADDCDIV_INT)
    return named(input + value * (tensor1 / tensor2), "AddcdivBackward0")


__all__ = ["hypot", "fmod", "copysign", "heaviside", "xlogy", "float_power", "logaddexp2", "fmax", "fmin", "ldexp",
           "frexp", "logical_xor", "addcmul", "addcdiv"]
