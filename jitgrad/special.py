"""``jitgrad.special``: torch.special's functions that jitgrad has (``import jitgrad.special`` or ``jg.special``).

Most are the same functions as at the top level under torch.special's names (``expit`` is sigmoid, ``gammaln``
is lgamma, ``psi`` is digamma, ``multigammaln`` is mvlgamma); ``xlog1py``, ``ndtr``, ``log_ndtr`` and ``entr``
live only here, as in torch.

>>> import jitgrad as jg
>>> jg.special.ndtr(jg.tensor([0.0]))
tensor([0.5000])
"""
from __future__ import annotations

import math

from .ir import dtypes as _dt
from .library import elementary as _F
from .library.pointwise.pairs import _xlog, xlogy
from .library.pointwise.rounding import erfc, exp2, logit, sinc
from .library.pointwise.rounding import round as _round
from .library.pointwise.special import digamma, erfinv, mvlgamma, polygamma
from .library.pointwise.special import igamma as gammainc, igammac as gammaincc
from .library.pointwise.special import lgamma as gammaln
from .library.pointwise.trig import bessel_i as _bessel_i, i0
from .runtime.grad_names import named as _named
from .runtime.tensor import Tensor as _Tensor
from .library.torch_kwargs import torch_kwargs as _torch_kwargs

erf = _F.erf
expm1 = _F.expm1
log1p = _F.log1p
psi = digamma


def _need_tensor(name, x):
    if not isinstance(x, _Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(x).__name__}")


def expit(input, **torch_kw):
    """The logistic sigmoid ``1 / (1 + exp(-input))`` (torch.special.expit)."""
    if torch_kw:
        return _torch_kwargs(expit, "expit", (input,), {}, torch_kw)
    return _F.sigmoid(input)


def round(input, *, decimals=0, **torch_kw):
    """Round half to even, to ``decimals`` places (torch.special.round is torch.round)."""
    if torch_kw:
        return _torch_kwargs(round, "round", (input,), {"decimals": decimals}, torch_kw)
    return _round(input, decimals=decimals)


def multigammaln(input, p, **torch_kw):
    """The multivariate log-gamma function of dimension ``p`` (torch.mvlgamma)."""
    if torch_kw:
        return _torch_kwargs(multigammaln, "multigammaln", (input, p), {}, torch_kw)
    return mvlgamma(input, p)


def xlog1py(input, other, **torch_kw):
    """``input * log1p(other)``, and 0 where ``input == 0`` (unless ``other`` is NaN), with xlogy's gradients."""
    if torch_kw:
        return _torch_kwargs(xlog1py, "xlog1py", (input, other), {}, torch_kw)
    if not isinstance(input, _Tensor) and not isinstance(other, _Tensor):
        raise TypeError(f"xlog1py() received an invalid combination of arguments - got "
                        f"({type(input).__name__}, {type(other).__name__})")
    name = ("SpecialXlog1PyBackward0" if isinstance(input, _Tensor) and isinstance(other, _Tensor) else
            "SpecialXlog1PyBackward1" if isinstance(other, _Tensor) else "SpecialXlog1PyBackward2")
    return _named(_xlog(input, other, True), name)


def ndtr(input, **torch_kw):
    """The standard normal CDF ``(1 + erf(x / sqrt 2)) / 2``, as ``erfc(-x / sqrt 2) / 2`` (accurate in the left
    tail)."""
    if torch_kw:
        return _torch_kwargs(ndtr, "ndtr", (input,), {}, torch_kw)
    _need_tensor("ndtr", input)
    return _named(erfc(input * -math.sqrt(0.5)) * 0.5, "SpecialNdtrBackward0")


def log_ndtr(input, **torch_kw):
    """``log(ndtr(x))`` without underflow: ``log1p(-ndtr(-x))`` on the right, ``log(erfc(-x/sqrt2)/2)`` on the
    left, and the asymptotic series ``-x^2/2 - log(-x sqrt(2 pi)) + log(1 - 1/x^2 + 3/x^4 - ...)`` in the far left
    tail (below -20 in float64, -10 in float32), where erfc underflows."""
    if torch_kw:
        return _torch_kwargs(log_ndtr, "log_ndtr", (input,), {}, torch_kw)
    _need_tensor("log_ndtr", input)
    x = input if input.is_floating_point() else input.to(_dt.DEFAULT_FLOAT)
    cut = -20.0 if x.dtype is _dt.float64 else -10.0
    far = x < cut
    # each branch sees only its own range (a masked branch's -inf would make a 0 * inf in the gradient)
    left = (x < -1.0) & ~far
    xl = _F.where(left, x, -2.0)
    xr = _F.where(left | far, 0.0, x)
    mid = _F.where(left, _F.log(erfc(xl * -math.sqrt(0.5)) * 0.5), _F.log1p(erfc(xr * math.sqrt(0.5)) * -0.5))
    xf = _F.where(far, x, cut)
    r2 = (xf * xf).reciprocal()
    series = None       # 1 - 1/x^2 + 3/x^4 - 15/x^6 + ... (double factorials), to the 8th term
    for k in range(8, -1, -1):
        c = (-1.0) ** k * math.prod(range(1, 2 * k, 2))
        series = c if series is None else series * r2 + c
    tail = xf * xf * -0.5 - _F.log(-xf) - 0.5 * math.log(2 * math.pi) + _F.log(series)
    return _named(_F.where(far, tail, mid), "SpecialLogNdtrBackward0")


def entr(input, **torch_kw):
    """The elementwise entropy ``-x log x`` (0 at 0, -inf for negative x).  The gradient at ``x <= 0`` is 0 here
    (torch: inf at 0, nan below)."""
    if torch_kw:
        return _torch_kwargs(entr, "entr", (input,), {}, torch_kw)
    _need_tensor("entr", input)
    x = input if input.is_floating_point() else input.to(_dt.DEFAULT_FLOAT)
    pos = x > 0
    xs = _F.where(pos, x, 1.0)
    return _named(_F.where(pos, -xs * _F.log(xs), _F.where(x == 0, 0.0, _F.where(_F.isnan(x), x, -math.inf))),
                  "SpecialEntrBackward0")


def softmax(input, dim, *, dtype=None):
    """``exp(x) / sum(exp(x), dim)`` (torch.special.softmax)."""
    return _F.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim, *, dtype=None):
    """``x - logsumexp(x, dim)`` (torch.special.log_softmax)."""
    return _F.log_softmax(input, dim, dtype=dtype)


def i0e(input, **torch_kw):
    """The exponentially scaled modified Bessel function of order 0, ``exp(-|x|) i0(x)`` (torch.special.i0e);
    finite where ``i0`` overflows."""
    if torch_kw:
        return _torch_kwargs(i0e, "i0e", (input,), {}, torch_kw)
    return _named(_bessel_i(input, 0, True, "special_i0e"), "SpecialI0EBackward0")


def i1(input, **torch_kw):
    """The modified Bessel function of the first kind of order 1 (torch.special.i1; gradient ``i0 - i1 / x``,
    0.5 at 0)."""
    if torch_kw:
        return _torch_kwargs(i1, "i1", (input,), {}, torch_kw)
    return _named(_bessel_i(input, 1, False, "special_i1"), "SpecialI1Backward0")


def i1e(input, **torch_kw):
    """The exponentially scaled modified Bessel function of order 1, ``exp(-|x|) i1(x)`` (torch.special.i1e)."""
    if torch_kw:
        return _torch_kwargs(i1e, "i1e", (input,), {}, torch_kw)
    return _named(_bessel_i(input, 1, True, "special_i1e"), "SpecialI1EBackward0")


def logsumexp(input, dim, keepdim=False, **torch_kw):
    """``log(sum(exp(x), dim))`` computed stably (torch.special.logsumexp)."""
    if torch_kw:
        return _torch_kwargs(logsumexp, "logsumexp", (input, dim, keepdim), {}, torch_kw)
    return _F.logsumexp(input, dim, keepdim)


__all__ = ["digamma", "entr", "erf", "erfc", "erfinv", "exp2", "expit", "expm1", "gammainc", "gammaincc", "gammaln", "i0", "i0e", "i1", "i1e",
           "log1p", "log_ndtr",
           "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "polygamma", "psi", "round", "sinc",
           "softmax", "xlog1py", "xlogy"]
