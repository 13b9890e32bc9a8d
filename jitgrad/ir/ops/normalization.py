"""Fused transformer primitives with decompositions: ``gelu`` (and its vjp, ``gelu_backward``) and ``layer_norm``
(the normalisation; the affine weight and bias stay ordinary ops; and its vjp, ``layer_norm_backward``).

Eager CPU mode runs each as one NumPy expression with one backward node (layer_norm was seven eager ops forward);
a trace or a device binds the decomposition (``OpDef.decompose``), the composition ``nn.functional`` used to
spell out, so compiled graphs keep fusing the small primitives.  The vjps are written with jitgrad ops, so they
differentiate again (second order and beyond) in every mode.
"""
from __future__ import annotations

import math

import numpy as np

from .opdef import SYMMETRIC, Aval, OpDef, OpError, broadcast_shapes, fit_to, fmt_shape, register, result_dtype

# (NumPy's module has a __getattr__: its functions bound once)
_add_reduce, _true_divide, _multiply, _add, _subtract, _sqrt = (np.add.reduce, np.true_divide, np.multiply, np.add,
                                                                np.subtract, np.sqrt)
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
        from .numpy_erf import gelu_float32     # vectorised blocks; SciPy's float32 erf is scalar code
        return gelu_float32(x)
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
    return (c.bind("gelu_backward", g, x),)


def _gelu_scalar(m, x, approximate="none"):
    # used only where gelu is not decomposed (the traced path expands _gelu_decompose)
    half, one = m.lit(0.5), m.lit(1.0)
    if approximate == "tanh":
        inner = m.lit(_TANH_K) * (x + m.lit(_TANH_C) * x * x * x)
        return half * x * (one + m.tanh(inner))
    return half * x * (one + m.erf(x * m.lit(_SQRT_HALF)))


register(OpDef("gelu", "elementwise", _gelu_rule, _gelu_impl, _gelu_vjp, scalar=_gelu_scalar, saves_in=(0,), jvp=SYMMETRIC,
               grad_name="GeluBackward0", decompose=_gelu_decompose,
               doc="gelu(x; approximate): x * Phi(x), or the tanh approximation"))


# ---- gelu_backward: exact GELU's vjp, g * (Phi(x) + x phi(x)) ---------------------------------------------

def _gelu_bwd_rule(avals, params):
    g, x = avals
    if not g.dtype.is_floating_point or not x.dtype.is_floating_point:
        raise OpError(f"gelu_backward: expected a float gradient and input, got "
                      f"{g.dtype.name}{fmt_shape(g.shape)} and {x.dtype.name}{fmt_shape(x.shape)}")
    return [Aval(broadcast_shapes("gelu_backward", [g.shape, x.shape]), result_dtype(avals))]


def _gelu_bwd_decompose(b, g, x):
    # d/dx x Phi(x) = Phi(x) + x phi(x)
    cdf = 0.5 * (1.0 + b("erf", x * _SQRT_HALF))
    pdf = b("exp", x * x * -0.5) * _INV_SQRT_2PI
    return g * (cdf + x * pdf)


def _gelu_bwd_impl(g, x):
    if g.dtype == x.dtype == np.float32 and g.shape == x.shape:
        from .numpy_erf import gelu_backward_float32    # the decomposition's order, in cache-sized blocks
        return gelu_backward_float32(g, x)
    from scipy.special import erf
    cdf = 0.5 * (1.0 + erf(x * x.dtype.type(_SQRT_HALF)))
    return g * (cdf + x * (np.exp(x * x * -0.5) * x.dtype.type(_INV_SQRT_2PI)))


def _gelu_bwd_vjp(c, h):
    # z = g d(x), d = Phi + x phi:  dz/dg . h = h d(x);  dz/dx . h = h g d'(x), d' = phi (2 - x^2)
    g, x = c.inputs
    dg = dx = None
    if c.needs_grad[0]:
        dg = c.bind("gelu_backward", h, x)
        if dg.shape != c.shapes[0]:
            dg = dg.sum_to_size(c.shapes[0])
    if c.needs_grad[1]:
        # torch's gelu_double_backward, term by term: its own derivatives (third order) then agree at inf and nan
        x2 = x * x
        pdf = _INV_SQRT_2PI * c.bind("exp", -0.5 * x2)
        dx = h * g * (2.0 * pdf - x2 * pdf)
        if dx.shape != c.shapes[1]:
            dx = dx.sum_to_size(c.shapes[1])
    return dg, dx


def _gelu_bwd_jvp(c, tg, tx):
    # z = g d(x):  dz = tg d(x) + tx g d'(x), d' = phi (2 - x^2)
    g, x = c.inputs
    total = c.bind("gelu_backward", tg, x) if tg is not None else None
    if tx is not None:
        x2 = x * x
        pdf = _INV_SQRT_2PI * c.bind("exp", -0.5 * x2)
        d = tx * g * (2.0 * pdf - x2 * pdf)
        total = d if total is None else total + d
    return (fit_to(total, c.outputs[0]),)


# no scalar body: a trace or a device binds the decomposition, so codegen never meets the op
register(OpDef("gelu_backward", "elementwise", _gelu_bwd_rule, _gelu_bwd_impl, _gelu_bwd_vjp, saves_in=(0, 1), jvp=_gelu_bwd_jvp,
               grad_name="GeluBackwardBackward0", decompose=_gelu_bwd_decompose,
               doc="exact GELU's vjp in eager mode, g * (Phi(x) + x phi(x)): one op in cache-sized blocks instead "
                   "of eleven"))


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


_LN_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _ln_constants(x, params):
    """``(axes, count, eps, 1)`` of a layer_norm signature over ``x`` (an aval), the three constants 0-d arrays of
    its dtype, or None where the per-signature impls do not apply (float16; an empty or 2**24-element norm)."""
    dtype = np.dtype(x.dtype.np)
    axes = _ln_axes(len(x.shape), params["naxes"])
    n = 1
    for a in axes:
        n *= x.shape[a]
    if dtype not in _LN_DTYPES or not 0 < n < 2 ** 24:
        return None
    return (axes,) + tuple(np.array(v, dtype) for v in (n, params["eps"], 1.0))


def _ln_signature(avals, params):
    """``eager_impl``: ``_ln_impl``'s arithmetic for float32 and float64 with each ``ndarray.mean`` spelled as the
    ufunc calls under it (NumPy's ``_methods._mean``: ``add.reduce``, then a true division by the count, computed in
    float64 and rounded to the dtype), four Python frames fewer per call; the count a 0-d array of the dtype (exact
    below 2**24, where a float64 quotient rounded to float32 is the float32 quotient: the same bits), the axes and
    the constants made once per signature (a ufunc converts a Python number on every call).  None (``_ln_impl``)
    for float16, whose mean accumulates in float32."""
    consts = _ln_constants(avals[0], params)
    if consts is None:
        return None
    axes, count, eps_d, one = consts

    def same_bits(x, naxes, eps):
        mean = _add_reduce(x, axes, None, None, True)
        _true_divide(mean, count, out=mean)
        d = x - mean
        var = _add_reduce(_multiply(d, d), axes, None, None, True)
        _true_divide(var, count, out=var)
        _add(var, eps_d, out=var)
        _sqrt(var, out=var)
        _true_divide(one, var, out=var)
        return _multiply(d, var, out=d)
    return same_bits


def _ln_stats(x, naxes, eps):
    """(x - mean, 1 / sqrt(var + eps)) with jitgrad ops: the biased variance, as torch."""
    axes = _ln_axes(x.ndim, naxes)
    d = x - x.mean(axes, keepdim=True)
    return d, ((d * d).mean(axes, keepdim=True) + eps).rsqrt()


def _ln_decompose(b, x, naxes, eps):
    d, rstd = _ln_stats(x, naxes, eps)
    return d * rstd


def _ln_vjp(c, g):
    # y = (x - mean) * rstd:  dx = rstd * (g - mean(g) - y * mean(g * y)) over the normalised dims, one fused op
    # (its decomposition binds exactly that) when g is laid out as y
    x, y = c.inputs[0], c.outputs[0]
    naxes, eps = c.params["naxes"], c.params["eps"]
    if g.shape == y.shape and g.dtype == y.dtype == x.dtype:
        return (c.bind("layer_norm_backward", g, x, y, naxes=naxes, eps=eps),)
    return (_ln_bwd_decompose(c.bind, g, x, y, naxes, eps),)


register(OpDef("layer_norm", "reduce", _ln_rule, _ln_impl, _ln_vjp, saves_in=(0,), saves_out=(0,), jvp=SYMMETRIC,
               grad_name="NativeLayerNormBackward0", decompose=_ln_decompose, eager_impl=_ln_signature,
               doc="layer_norm(x; naxes, eps): (x - mean) / sqrt(var + eps) over the last naxes dims"))


# ---- layer_norm_backward: layer_norm's vjp from the gradient g, the input x and the output y -----------------
# z = rstd * w,  w = g - mean(g) - y * mean(g * y),  rstd = 1 / sqrt(mean(d^2) + eps),  d = x - mean(x), means
# over the last naxes dims.  x enters through rstd alone (recomputed: a row's statistics cost one more read of x,
# and layer_norm keeps one output); y is an input of its own, so the rules below treat it as independent of x.

def _ln_bwd_rule(avals, params):
    g, x, y = avals
    k = params["naxes"]
    if not g.shape == x.shape == y.shape or not g.dtype is x.dtype is y.dtype or not x.dtype.is_floating_point:
        raise OpError(f"layer_norm_backward: expected a float gradient, input and output of one shape and dtype, "
                      f"got {g.dtype.name}{fmt_shape(g.shape)}, {x.dtype.name}{fmt_shape(x.shape)} and "
                      f"{y.dtype.name}{fmt_shape(y.shape)}")
    if not 1 <= k <= x.ndim:
        raise OpError(f"layer_norm_backward: cannot normalise the last {k} dims of a tensor of shape "
                      f"{fmt_shape(x.shape)}")
    return [Aval(x.shape, x.dtype)]




def _ln_bwd_impl(g, x, y, naxes, eps):
    # the decomposition's ops in its order (a mean is a sum, then a division by the count, as Tensor.mean binds
    # them), so eager results have the bits of the rule's ops run one by one
    axes = _ln_axes(x.ndim, naxes)
    n = 1
    for a in axes:
        n *= x.shape[a]

    def mean(a):
        s = _add_reduce(a, axis=axes, keepdims=True)
        return s / n if n else s + math.nan
    d = x - mean(x)
    rstd = 1.0 / np.sqrt(mean(d * d) + eps)
    return rstd * ((g - mean(g)) - y * mean(g * y))


def _ln_bwd_signature(avals, params):
    """``eager_impl``: ``_ln_bwd_impl``'s ops with the count, epsilon and 1 as 0-d arrays of the dtype made once per
    signature (the same values: a count below 2**24 is exact in float32; a ufunc converts a Python number on every
    call), the reductions' arguments positional.  None for other dtypes and sizes."""
    consts = _ln_constants(avals[1], params)
    if consts is None:
        return None
    axes, count, eps_d, one = consts

    def same_bits(g, x, y, naxes, eps):
        m = _add_reduce(x, axes, None, None, True)
        d = x - _true_divide(m, count, out=m)
        v = _add_reduce(_multiply(d, d), axes, None, None, True)
        _true_divide(v, count, out=v)
        _add(v, eps_d, out=v)
        rstd = _true_divide(one, _sqrt(v, out=v), out=v)
        mg = _add_reduce(g, axes, None, None, True)
        w = g - _true_divide(mg, count, out=mg)
        mgy = _add_reduce(_multiply(g, y), axes, None, None, True)
        _true_divide(mgy, count, out=mgy)
        _subtract(w, _multiply(y, mgy), out=w)
        return _multiply(rstd, w, out=w)
    return same_bits


def _ln_bwd_decompose(b, g, x, y, naxes, eps):
    axes = _ln_axes(x.ndim, naxes)
    _, rstd = _ln_stats(x, naxes, eps)
    return rstd * (g - g.mean(axes, keepdim=True) - y * (g * y).mean(axes, keepdim=True))


def _ln_bwd_vjp(c, h):
    # linear and self-adjoint in g:  dz/dg . h = layer_norm_backward(h, x, y);
    # dz/dy . h = -rstd (h mean(g y) + g mean(h y));  dz/dx . h = -rstd^3 d mean(h w)  (through rstd alone)
    g, x, y = c.inputs
    naxes, eps = c.params["naxes"], c.params["eps"]
    axes = _ln_axes(x.ndim, naxes)
    dg = c.bind("layer_norm_backward", h, x, y, naxes=naxes, eps=eps) if c.needs_grad[0] else None
    dx = dy = None
    if c.needs_grad[1] or c.needs_grad[2]:
        d, rstd = _ln_stats(x, naxes, eps)
        mgy = (g * y).mean(axes, keepdim=True)
        if c.needs_grad[1]:
            w = g - g.mean(axes, keepdim=True) - y * mgy
            dx = -(rstd * rstd * rstd) * d * (h * w).mean(axes, keepdim=True)
        if c.needs_grad[2]:
            dy = -(rstd * (h * mgy + g * (h * y).mean(axes, keepdim=True)))
    return dg, dx, dy


def _ln_bwd_jvp(c, tg, tx, ty):
    # dz = layer_norm_backward(tg, x, y) - rstd^3 w mean(d tx) - rstd (ty mean(g y) + y mean(g ty))
    g, x, y = c.inputs
    naxes, eps = c.params["naxes"], c.params["eps"]
    axes = _ln_axes(x.ndim, naxes)
    total = c.bind("layer_norm_backward", tg, x, y, naxes=naxes, eps=eps) if tg is not None else None
    if tx is not None or ty is not None:
        d, rstd = _ln_stats(x, naxes, eps)
        mgy = (g * y).mean(axes, keepdim=True)
        parts = []
        if tx is not None:
            w = g - g.mean(axes, keepdim=True) - y * mgy
            parts.append(-(rstd * rstd * rstd) * w * (d * tx).mean(axes, keepdim=True))
        if ty is not None:
            parts.append(-(rstd * (ty * mgy + y * (g * ty).mean(axes, keepdim=True))))
        for p in parts:
            total = p if total is None else total + p
    return (total,)


# no scalar body: a trace or a device binds the decomposition, so compiled graphs keep today's ops
register(OpDef("layer_norm_backward", "reduce", _ln_bwd_rule, _ln_bwd_impl, _ln_bwd_vjp, saves_in=(0, 1, 2),
               jvp=_ln_bwd_jvp, grad_name="NativeLayerNormBackwardBackward0", decompose=_ln_bwd_decompose,
               eager_impl=_ln_bwd_signature,
               doc="layer_norm's vjp in eager mode, rstd * (g - mean(g) - y * mean(g * y)) with rstd from x: one op "
                   "instead of seventeen"))
