"""Inverse trigonometric and hyperbolic functions (``asin``, ``acos``, ``atan``, ``sinh``, ``cosh``, ``asinh``,
``acosh``, ``atanh`` and numpy's ``arc*`` aliases) and the modified Bessel function ``i0`` (functions and Tensor
methods, in-place ``_`` variants as torch).  ``jitgrad.special`` adds ``i0e``, ``i1`` and ``i1e``.

Each is a primitive (``ir/ops/trig_bessel.py``): integer and bool inputs compute in float32, gradients are torch's
(``asin' = rsqrt(1 - x^2)``: inf at +-1, nan beyond), so second order works.

>>> import jitgrad as jg
>>> jg.asin(jg.tensor([0.5, 1.0]))
tensor([0.5236, 1.5708])
>>> jg.i0(jg.tensor([0.0, 1.0]))
tensor([1.0000, 1.2661])
"""
from __future__ import annotations

from ...declarations import published
from ...ir.ops import OPS
from ...runtime.dispatch import bind
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

_DOCS = {
    "asin": "The arcsine of each element (nan outside [-1, 1]; gradient ``1 / sqrt(1 - x^2)``).",
    "acos": "The arccosine of each element (nan outside [-1, 1]; gradient ``-1 / sqrt(1 - x^2)``).",
    "atan": "The arctangent of each element (gradient ``1 / (1 + x^2)``).",
    "sinh": "The hyperbolic sine of each element (gradient ``cosh``).",
    "cosh": "The hyperbolic cosine of each element (gradient ``sinh``).",
    "asinh": "The inverse hyperbolic sine of each element (gradient ``1 / sqrt(x^2 + 1)``).",
    "acosh": "The inverse hyperbolic cosine of each element (nan below 1; gradient ``1 / sqrt(x^2 - 1)``).",
    "atanh": "The inverse hyperbolic tangent of each element (+-inf at +-1, nan beyond; gradient "
             "``1 / (1 - x^2)``).",
}


def _need_tensor(name, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")


def _unary(name):
    op = OPS[name]

    def f(input, **torch_kw):
        if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
            return torch_kwargs(f, name, (input,), {}, torch_kw)
        _need_tensor(name, input)
        return bind(op, input)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = _DOCS[name]
    return f


_NO_INPLACE_DERIVATIVE = ("asinh", "acosh", "atanh")       # torch's derivatives.yaml has none for these


def _inplace(fn):
    name = fn.__name__

    def run(x):
        r = fn(x)
        if name in _NO_INPLACE_DERIVATIVE and r.requires_grad:
            r = named(bind(OPS["delayed_error"], r, msg=f"the derivative for 'inplace version of {name}' is not "
                                                        f"implemented.", not_implemented=True),
                      name.capitalize() + "Backward1")
        return r

    def f(self):
        return self._apply_inplace(run)
    f.__name__ = f.__qualname__ = fn.__name__ + "_"
    f.__doc__ = f"In place: ``x.{fn.__name__}_()`` writes ``{fn.__name__}(x)`` into ``x``."
    return f


asin = published("jitgrad", "Tensor", inplace=_inplace)(_unary("asin"))
acos = published("jitgrad", "Tensor", inplace=_inplace)(_unary("acos"))
atan = published("jitgrad", "Tensor", inplace=_inplace)(_unary("atan"))
sinh = published("jitgrad", "Tensor", inplace=_inplace)(_unary("sinh"))
cosh = published("jitgrad", "Tensor", inplace=_inplace)(_unary("cosh"))
asinh = published("jitgrad", "Tensor", inplace=_inplace)(_unary("asinh"))
acosh = published("jitgrad", "Tensor", inplace=_inplace)(_unary("acosh"))
atanh = published("jitgrad", "Tensor", inplace=_inplace)(_unary("atanh"))
arcsin = published("jitgrad", "Tensor", name="arcsin", inplace=_inplace)(asin)
arccos = published("jitgrad", "Tensor", name="arccos", inplace=_inplace)(acos)
arctan = published("jitgrad", "Tensor", name="arctan", inplace=_inplace)(atan)
arcsinh = published("jitgrad", "Tensor", name="arcsinh", inplace=_inplace)(asinh)
arccosh = published("jitgrad", "Tensor", name="arccosh", inplace=_inplace)(acosh)
arctanh = published("jitgrad", "Tensor", name="arctanh", inplace=_inplace)(atanh)
# (torch.asin_(x), torch.arcsin_(x) ... are functions too: in-place forms go where torch has them)


def bessel_i(input, n, scaled, name):
    """The modified Bessel function of the first kind of order ``n`` (0 or 1), times ``exp(-|x|)`` when
    ``scaled`` (the primitive behind ``i0`` and ``jitgrad.special``'s ``i0e``, ``i1``, ``i1e``)."""
    _need_tensor(name, input)
    return bind(OPS["bessel_i"], input, n=n, scaled=scaled)


@published("jitgrad", "Tensor", inplace=_inplace)
def i0(input, **torch_kw):
    """The modified Bessel function of the first kind of order 0, elementwise (torch.i0, Cephes' Chebyshev
    expansion; its gradient is ``jitgrad.special.i1``)."""
    if torch_kw:
        return torch_kwargs(i0, "i0", (input,), {}, torch_kw)
    return named(bessel_i(input, 0, False, "i0"), "I0Backward0")


__all__ = ["asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "arcsin", "arccos", "arctan",
           "arcsinh", "arccosh", "arctanh", "i0"]
