"""Fused transformer primitives with decompositions: ``gelu`` and ``layer_norm`` (the normalisation; the affine
weight and bias stay ordinary ops).

Eager CPU mode runs each as one NumPy expression with one backward node (layer_norm was seven eager ops forward);
a trace or a device binds the decomposition (``OpDef.decompose``), the composition ``nn.functional`` used to
spell out, so compiled graphs keep fusing the small primitives.  The vjps are written with jitgrad ops, so they
differentiate again (second order and beyond) in every mode.
"""
from __future__ import annotations

import math

import numpy as np

from .opdef import Aval, OpDef, OpError, fmt_shape, register

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TANH_K = math.sqrt(2.0 / math.pi)
_TANH_C = 0.044715


def _float_same(name):
    def rule(avals, params):
        (x,) = avals
        if not x.dtype.is_floating_point:
            raise OpError(f"{name}: expected a floating point tensor, got {x.dtype.name}{fmt_shape(x.shape)}")
        return [Aval(x.shape, x.dtype)]
    return rule


# ---- gelu ------------------------------------------------------------------------------------------------

def _check_approximate(approximate):
    if approximate not in ("none", "tanh"):
        raise OpError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def _gelu_rule(avals, params):
    _check_approximate(params.get("approximate", "none"))
    return _float_same("gelu")(avals, params)


def _gelu_impl(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(x.dtype.type(_TANH_K) * (x + x.dtype.type(_TANH_C) * x * x * x)))
    if x.dtype == np.float32:
        from .numpy_erf import erf_float32 as erf      # vectorised; SciPy's float32 erf is scalar code
    else:
        from scipy.special import erf       # imported on first use: keeps `import jitgrad` fast
    return 0.5 * x * (1.0 + erf(x * x.dtype.type(_SQRT_HALF)))


def _gelu_decompose(b, x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + b("tanh", _TANH_K * (x + _TANH_C * x * x * x)))
    return 0.5 * x * (1.0 + b("erf", x * _SQRT_HALF))


def _gelu_vjp(c, g):
    x = c.inputs[0]
    if c.params.get("approximate", "none") == "tanh":
        t = c.bind("tanh", _TANH_K * (x + _TANH_C * x * x * x))
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * (_TANH_K * (1.0 + 3.0 * _TANH_C * x * x))
        return (g * d,)
    # d/dx x Phi(x) = Phi(x) + x phi(x)
    cdf = 0.5 * (1.0 + c.bind("erf", x * _SQRT_HALF))
    pdf = c.bind("exp", x * x * -0.5) * _INV_SQRT_2PI
    return (g * (cdf + x * pdf),)


def _gelu_scalar(m, x, approximate="none"):
    # used only where gelu is not decomposed (the traced path expands _gelu_decompose)
    half, one = m.lit(0.5), m.lit(1.0)
    if approximate == "tanh":
        inner = f"{m.lit(_TANH_K)} * ({x} + {m.lit(_TANH_C)} * {x} * {x} * {x})"
        return f"({half} * {x} * ({one} + {m.tanh(inner)}))"
    return f"({half} * {x} * ({one} + {m.erf(f'{x} * {m.lit(_SQRT_HALF)}')}))"


register(OpDef("gelu", "elementwise", _gelu_rule, _gelu_impl, _gelu_vjp, scalar=_gelu_scalar, saves_in=(0,),
               grad_name="GeluBackward0", decompose=_gelu_decompose,
               doc="gelu(x; approximate): x * Phi(x), or the tanh approximation"))


# ---- layer_norm ------------------------------------------------------------------------------------------

def _ln_rule(avals, params):
    (x,) = avals
    k = params["naxes"]
    if not x.dtype.is_floating_point:
        raise OpError(f"layer_norm: expected a floating point tensor, got {x.dtype.name}{fmt_shape(x.shape)}")
    if not 1 <= k <= x.ndim:
        raise OpError(f"layer_norm: cannot normalise the last {k} dims of a tensor of shape {fmt_shape(x.shape)}")
    return [Aval(x.shape, x.dtype)]


def _ln_axes(ndim, k):
    return tuple(range(ndim - k, ndim))


def _ln_impl(x, naxes, eps):
    axes = _ln_axes(x.ndim, naxes)
    d = x - x.mean(axis=axes, keepdims=True)
    var = (d * d).mean(axis=axes, keepdims=True)
    return d * (1.0 / np.sqrt(var + x.dtype.type(eps)))


def _ln_stats(x, naxes, eps):
    """(x - mean, 1 / sqrt(var + eps)) with jitgrad ops: the biased variance, as torch."""
    axes = _ln_axes(x.ndim, naxes)
    d = x - x.mean(axes, keepdim=True)
    return d, ((d * d).mean(axes, keepdim=True) + eps).rsqrt()


def _ln_decompose(b, x, naxes, eps):
    d, rstd = _ln_stats(x, naxes, eps)
    return d * rstd


def _ln_vjp(c, g):
    # y = (x - mean) * rstd:  dx = rstd * (g - mean(g) - y * mean(g * y)) over the normalised dims
    x, y = c.inputs[0], c.outputs[0]
    naxes = c.params["naxes"]
    axes = _ln_axes(x.ndim, naxes)
    _, rstd = _ln_stats(x, naxes, c.params["eps"])
    return (rstd * (g - g.mean(axes, keepdim=True) - y * (g * y).mean(axes, keepdim=True)),)


register(OpDef("layer_norm", "reduce", _ln_rule, _ln_impl, _ln_vjp, saves_in=(0,), saves_out=(0,),
               grad_name="NativeLayerNormBackward0", decompose=_ln_decompose,
               doc="layer_norm(x; naxes, eps): (x - mean) / sqrt(var + eps) over the last naxes dims"))
