"""The elementary math and reduction functions (``jg.exp(x)`` and ``x.exp()``, each declared with ``@published``
where it is defined); the basic shape functions live in ``shaping/views.py`` and are re-exported here for the
modules that build on both.

Each is a primitive ``bind`` or a composition of primitives (var, std, logsumexp, softmax, gather, ...),
so compositions need no vjp rule of their own.
"""
from __future__ import annotations

import math

import numpy as np

from ..declarations import published
from .pointwise.inplace import inplace_form
from ..ir.dtypes import torch_scalar_name
from ..ir.ops import OPS as O
from ..runtime import dispatch as _dispatch
from ..runtime.dispatch import bind, _bind_by_name
from ..runtime.op_errors import op_error
from ..runtime.bind_route import ROUTE as _ROUTE
from ..runtime.flat_bind import flat_entry
from ..runtime.tensor import AS_TENSOR as _AS_TENSOR, Tensor
from .torch_kwargs import torch_kwargs
from ..runtime.grad_names import named
from .dim_args import dim_arg as _axis, dims_arg as _axes, fresh_result as _fresh, tensor_arg as _t  # noqa: F401
from .shaping.views import (  # noqa: F401  (re-exported: jg.reshape, x.view, ...; other modules import them from here)
    _gather, _infer, _multi_view, _shape_arg, _stack, _swap_last2, _transpose, broadcast_tensors, broadcast_to, cat,
    chunk, concat, concatenate, expand, expand_as, flatten, gather, index_select, permute, reshape, split, squeeze,
    stack, swapaxes, t, take_along_dim, transpose, unbind, unsqueeze, view)


# ---- elementwise ----------------------------------------------------------------------------------
def _unary(name):
    op = O[name]
    flat = flat_entry(op, 1)

    def f(input, **torch_kw):
        if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
            return torch_kwargs(f, name, (input,), {}, torch_kw)
        if (type(input) is Tensor or type(input) in _AS_TENSOR) and _ROUTE.plain:     # flat: straight to the dispatch
            return flat(input)
        return bind(op, _t(input))
    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}``; differentiable (see OpDef ``{name}``)."
    return f


exp = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("exp"))
log = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("log"))
log1p = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("log1p"))
expm1 = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("expm1"))
sqrt = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("sqrt"))
rsqrt = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("rsqrt"))
sin = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("sin"))
cos = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("cos"))
tan = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("tan"))
tanh = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("tanh"))
sigmoid = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("sigmoid"))
relu = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("relu"))
abs = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("abs"))
sign = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("sign"))
neg = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("neg"))
reciprocal = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("reciprocal"))
erf = published("jitgrad", "Tensor", inplace=inplace_form)(_unary("erf"))
isfinite = published("jitgrad", "Tensor")(_unary("isfinite"))
logical_not = published("jitgrad", "Tensor")(_unary("logical_not"))
negative = published("jitgrad", "Tensor", name="negative", inplace=inplace_form)(neg)


@published("jitgrad", "Tensor", inplace=inplace_form)
def log2(input, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(log2, 'log2', (input,), {}, torch_kw)
    return log(input) * (1.0 / math.log(2.0))


@published("jitgrad", "Tensor", inplace=inplace_form)
def log10(input, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(log10, 'log10', (input,), {}, torch_kw)
    return log(input) * (1.0 / math.log(10.0))


@published("jitgrad", "Tensor", inplace=inplace_form)
def square(input, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(square, 'square', (input,), {}, torch_kw)
    return input * input


@published("jitgrad", "Tensor")
def isnan(input, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(isnan, 'isnan', (input,), {}, torch_kw)
    return input != input


@published("jitgrad", "Tensor")
def isinf(input, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(isinf, 'isinf', (input,), {}, torch_kw)
    if not input.is_floating_point():
        return input != input       # integers and bools are never infinite (and abs() rejects bools)
    return (abs(input) == math.inf)


def _binary(name, opname):
    op = O[opname]
    flat = flat_entry(op, 2)

    def f(input, other, **torch_kw):
        if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
            return torch_kwargs(f, name, (input, other), {}, torch_kw)
        if not isinstance(input, Tensor) and not isinstance(other, Tensor):
            input = _t(input)
        if _ROUTE.plain:        # flat: straight to the dispatch
            return flat(input, other)
        return bind(op, input, other)
    f.__name__ = name
    return f


add_ = _binary("add", "add")
sub_ = _binary("sub", "sub")
mul = published("jitgrad", "Tensor")(_binary("mul", "mul"))
multiply = published("jitgrad", "Tensor", name="multiply")(mul)
div = _binary("div", "div")
divide = div
true_divide = published("jitgrad", "Tensor", name="true_divide")(div)
floor_divide = published("jitgrad", "Tensor")(_binary("floor_divide", "floordiv"))
remainder = published("jitgrad", "Tensor")(_binary("remainder", "mod"))
pow = published("jitgrad", "Tensor")(_binary("pow", "pow"))
maximum = published("jitgrad", "Tensor")(_binary("maximum", "maximum"))
minimum = published("jitgrad", "Tensor")(_binary("minimum", "minimum"))
eq = published("jitgrad", "Tensor")(_binary("eq", "eq"))
ne = published("jitgrad", "Tensor")(_binary("ne", "ne"))
lt = published("jitgrad", "Tensor")(_binary("lt", "lt"))
le = published("jitgrad", "Tensor")(_binary("le", "le"))
gt = published("jitgrad", "Tensor")(_binary("gt", "gt"))
ge = published("jitgrad", "Tensor")(_binary("ge", "ge"))
logical_and = published("jitgrad", "Tensor")(_binary("logical_and", "logical_and"))
logical_or = published("jitgrad", "Tensor")(_binary("logical_or", "logical_or"))
matmul = published("jitgrad", "Tensor")(_binary("matmul", "matmul"))


@published("jitgrad", "Tensor")
def add(input, other, *, alpha=1, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(add, 'add', (input, other), {"alpha": alpha}, torch_kw)
    return add_(input, other if alpha == 1 else other * alpha)


@published("jitgrad", "Tensor")
def sub(input, other, *, alpha=1, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(sub, 'sub', (input, other), {"alpha": alpha}, torch_kw)
    return sub_(input, other if alpha == 1 else other * alpha)


subtract = published("jitgrad", "Tensor", name="subtract")(sub)


@published("jitgrad")
def where(condition, input=None, other=None, **torch_kw):
    """``where(cond, x, y)``: x where cond else y (broadcasting).  ``where(cond)`` returns nonzero indices."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(where, 'where', (condition, input, other), {}, torch_kw)
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    if not isinstance(condition, Tensor):
        condition = _t(condition)
    return bind(O["where"], condition, input, other)


@published("jitgrad", "Tensor")
def clamp(input, min=None, max=None, **torch_kw):
    """Clamp into [min, max]; tensor bounds compose maximum/minimum, scalar bounds use the clamp primitive."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(clamp, 'clamp', (input, min, max), {}, torch_kw)
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        return _clamp_tensor_bounds(input, min, max)
    return bind(O["clamp"], input, min=min, max=max)


clip = published("jitgrad", "Tensor", name="clip")(clamp)


def _clamp_tensor_bounds(input, min, max):
    """min(max(x, lo), hi) with torch's clamp_backward_min_max: the gradient goes to x where lo <= x <= hi, to lo
    where x < lo < hi, to hi where x > hi or hi < lo, and nowhere at a tie x < lo == hi (not split in halves, as
    maximum/minimum do at ties)."""
    r = input
    if min is not None:
        r = maximum(r, min)
    if max is not None:
        r = minimum(r, max)
    r = r.detach()     # the value where no mask below holds (x < lo == hi, nan)
    if min is not None and max is not None:
        r = where((input > max) | (max < min), max, r)
        r = where((input < min) & (min < max), min, r)
        return where((input >= min) & (input <= max), input, r)
    if min is not None:
        return where(input >= min, input, where(input < min, min, r))
    return where(input <= max, input, where(input > max, max, r))


@published("jitgrad", "Tensor")
def nonzero(input, *, as_tuple=False, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(nonzero, 'nonzero', (input,), {"as_tuple": as_tuple}, torch_kw)
    from ..runtime.traced import is_traced as _is_traced
    if _is_traced(input):
        from ..runtime import symbolic_values
        if symbolic_values.bounded_nonzero_here():      # a data-dependent size (ir/unbacked.py)
            r = symbolic_values.nonzero(input)
            return tuple(r[:, k] for k in range(input.ndim)) if as_tuple else r
    if type(input._data) is not np.ndarray:     # its shape depends on the data: not traceable
        from ..runtime.traced import traced_read as _traced_read
        _traced_read(input, "nonzero()")
    idx = np.nonzero(input._data)
    if as_tuple:
        return tuple(Tensor._make(i.astype(np.int64)) for i in idx)
    return Tensor._make(np.stack(idx, axis=1).astype(np.int64) if idx else np.zeros((0, 0), np.int64))


# ---- reductions -----------------------------------------------------------------------------------
_SUM = O["sum"]
_SUM_FLAT = flat_entry(_SUM, 1)
_NORM2_FLAT = flat_entry(O["norm2"], 1)
_EVERY_AXIS = [tuple(range(n)) for n in range(64)]     # (dims_arg's axes for dim=None, made once)


def _red(opname, x, dim, keepdim):
    return bind(O[opname], x, axes=_axes(opname, x, dim), keepdims=bool(keepdim))


@published("jitgrad", "Tensor")
def sum(input, dim=None, keepdim=False, *, dtype=None, **torch_kw):
    if dim is None and dtype is None and (type(input) is Tensor or type(input) in _AS_TENSOR) and _ROUTE.plain \
            and not torch_kw:
        # flat: a sum of every element (``x.sum()``, a loss) straight to the dispatch, its node named as below
        nd = input._data.ndim
        r = _SUM_FLAT(input, {"axes": _EVERY_AXIS[nd] if nd < 64 else tuple(range(nd)), "keepdims": bool(keepdim)})
        gf = r.grad_fn
        if gf is not None:
            gf.torch_name = "SumBackward0"
        return r
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(sum, 'sum', (input, dim, keepdim), {"dtype": dtype}, torch_kw)
    if dtype is not None:
        input = input.to(dtype)
    return _fresh(_red("sum", input, dim, keepdim), input, "SumBackward0" if dim is None else "SumBackward1")


@published("jitgrad", "Tensor")
def mean(input, dim=None, keepdim=False, *, dtype=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(mean, 'mean', (input, dim, keepdim), {"dtype": dtype}, torch_kw)
    if dtype is not None:
        input = input.to(dtype)
    if not input.is_floating_point():
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {input.dtype.name}")
    axes = _axes("mean", input, dim)
    n = 1
    for a in axes:
        n *= input.shape[a]
    params = {"axes": axes, "keepdims": bool(keepdim)}     # (sum's flat entry: one frame, not bind's three)
    s = _SUM_FLAT(input, params) if _ROUTE.plain else bind(O["sum"], input, **params)
    # mean of nothing is nan; "+ nan" (not "* nan") keeps the derivative w.r.t. the incoming gradient finite
    # (it is a sum over no elements), as torch's expand-then-divide backward does
    return _fresh(s / n if n else s + math.nan, input, "MeanBackward0" if dim is None else "MeanBackward1")


@published("jitgrad", "Tensor")
def prod(input, dim=None, keepdim=False, *, dtype=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(prod, 'prod', (input, dim, keepdim), {"dtype": dtype}, torch_kw)
    if dtype is not None:
        input = input.to(dtype)
    return _fresh(_red("prod", input, dim, keepdim), input, "ProdBackward0" if dim is None else "ProdBackward1")


@published("jitgrad", "Tensor")
def amax(input, dim=(), keepdim=False, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(amax, 'amax', (input, dim, keepdim), {}, torch_kw)
    return _red("amax", input, None if dim == () else dim, keepdim)


@published("jitgrad", "Tensor")
def amin(input, dim=(), keepdim=False, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(amin, 'amin', (input, dim, keepdim), {}, torch_kw)
    return _red("amin", input, None if dim == () else dim, keepdim)


@published("jitgrad", "Tensor")
def argmax(input, dim=None, keepdim=False, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(argmax, 'argmax', (input, dim, keepdim), {}, torch_kw)
    ax = None if dim is None else _axis("argmax", input, dim)
    if input.ndim == 0:
        ax = None   # dim 0 / -1 of a 0-d tensor: its only element
    x = input if ax is not None else input.reshape(-1)
    r = bind(O["argmax"], x, axis=ax, keepdims=bool(keepdim) and ax is not None)
    return r.reshape((1,) * input.ndim) if keepdim and ax is None else r


@published("jitgrad", "Tensor")
def argmin(input, dim=None, keepdim=False, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(argmin, 'argmin', (input, dim, keepdim), {}, torch_kw)
    ax = None if dim is None else _axis("argmin", input, dim)
    if input.ndim == 0:
        ax = None   # dim 0 / -1 of a 0-d tensor: its only element
    x = input if ax is not None else input.reshape(-1)
    r = bind(O["argmin"], x, axis=ax, keepdims=bool(keepdim) and ax is not None)
    return r.reshape((1,) * input.ndim) if keepdim and ax is None else r


class _ValuesIndices(tuple):
    """``(values, indices)`` with named fields, like torch.return_types.max."""

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]


def _max_min_named(name, input, dim, keepdim, other):
    r = _max_min(name, input, dim, keepdim, other)
    base = "Max" if name == "max" else "Min"
    if isinstance(r, tuple):                # (values, indices) with a dim
        named(r[0], base + "Backward0")
    elif dim is None and other is None:
        named(r, base + "Backward1")
    return r


def _max_min(name, input, dim, keepdim, other):
    if isinstance(dim, Tensor) and other is None:
        other, dim = dim, None
    if other is not None:
        return (maximum if name == "max" else minimum)(input, other)
    if dim is None:     # torch's max()/min(): a NaN result sends the gradient to the NaN elements
        return bind(O["amax" if name == "max" else "amin"], input, axes=_axes(name, input, None), keepdims=False,
                    evenly=True)
    ax = _axis(name, input, dim)
    idx = (argmax if name == "max" else argmin)(input, ax, keepdim=True)
    values = gather(input, ax, idx)
    if not keepdim:
        values, idx = values.squeeze(ax), idx.squeeze(ax)
    return _ValuesIndices((values, idx))


@published("jitgrad", "Tensor")
def max(input, dim=None, keepdim=False, *, other=None, **torch_kw):
    """``max(x)`` (all elements), ``max(x, dim)`` -> (values, indices), or ``max(x, other)`` elementwise."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(max, 'max', (input, dim, keepdim), {"other": other}, torch_kw)
    return _max_min_named("max", input, dim, keepdim, other)


@published("jitgrad", "Tensor")
def min(input, dim=None, keepdim=False, *, other=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(min, 'min', (input, dim, keepdim), {"other": other}, torch_kw)
    return _max_min_named("min", input, dim, keepdim, other)


@published("jitgrad", "Tensor")
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None, **torch_kw):
    """Variance over ``dim`` with Bessel's ``correction`` (``unbiased=True`` means correction=1)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(var, 'var', (input, dim, unbiased, keepdim), {"correction": correction}, torch_kw)
    return _fresh(_var(input, dim, unbiased, keepdim, correction=correction), input, "VarBackward0")


def _var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    axes = _axes("var", input, dim)
    n = 1
    shape = input.shape
    for a in axes:
        n *= shape[a]
    mu = bind(O["sum"], input, axes=axes, keepdims=True) / (n if n else 1)
    d = input - mu
    ss = bind(O["sum"], d * d, axes=axes, keepdims=bool(keepdim))
    if n == 0:
        return ss + math.nan       # as mean(): nan, with a finite double backward
    return ss / builtins_max(n - correction, 0)


@published("jitgrad", "Tensor")
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None, **torch_kw):
    """sqrt(var), with torch's gradient 0 (not 0 * inf = nan) where the variance is 0 (a constant row): torch's
    std_backward masks grad / (2 std) where std == 0.  The sqrt runs on a variance made 1 there, so no NaN
    derivative hides under the mask (second order included)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(std, 'std', (input, dim, unbiased, keepdim), {"correction": correction}, torch_kw)
    v = var(input, dim, unbiased, keepdim, correction=correction)
    nonzero = v != 0        # (one op for ~(v == 0), NaN included)
    return _fresh(sqrt(v.where(nonzero, 1.0)).where(nonzero, 0.0), input, "StdBackward0")


@published("jitgrad", "Tensor")
def logsumexp(input, dim, keepdim=False, **torch_kw):
    """log(sum(exp(x))) computed stably (the max is subtracted first and detached)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(logsumexp, 'logsumexp', (input, dim, keepdim), {}, torch_kw)
    return _fresh(_logsumexp(input, dim, keepdim), input, "LogsumexpBackward0")


def _logsumexp(input, dim, keepdim=False):
    axes = _axes("logsumexp", input, dim)
    if not input.is_floating_point():
        input = input.float()
    m = bind(O["amax"], input, axes=axes, keepdims=True).detach() if input.numel() else input.new_zeros(
        tuple(1 if i in axes else s for i, s in enumerate(input.shape)))
    m = m.where(isfinite(m), 0.0)
    s = log(bind(O["sum"], exp(input - m), axes=axes, keepdims=True)) + m
    return s if keepdim else s.reshape(tuple(d for i, d in enumerate(s.shape) if i not in axes))


@published("jitgrad", "Tensor")
def norm(input, p="fro", dim=None, keepdim=False, dtype=None, **torch_kw):
    """Vector p-norm over ``dim`` (default all elements); p in {2, 'fro', inf, -inf, 1, any float}."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(norm, 'norm', (input, p, dim, keepdim, dtype), {}, torch_kw)
    return _fresh(_norm(input, p, dim, keepdim, dtype), input, "LinalgVectorNormBackward0")


def _norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    if p in ("fro", 2, 2.0, None):
        params = {"axes": _axes("norm", input, dim), "keepdims": bool(keepdim)}
        return _NORM2_FLAT(input, params) if _ROUTE.plain else bind(O["norm2"], input, **params)
    if p == math.inf:
        return amax(abs(input), dim if dim is not None else (), keepdim)
    if p == -math.inf:
        return amin(abs(input), dim if dim is not None else (), keepdim)
    if p == 0:
        return sum((input != 0).to(input.dtype), dim, keepdim)
    return bind(O["normp"], input, axes=_axes("norm", input, dim), keepdims=bool(keepdim), p=float(p))


@published("jitgrad", "Tensor")
def softmax(input, dim, dtype=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softmax, 'softmax', (input, dim, dtype), {}, torch_kw)
    return _fresh(_softmax(input, dim, dtype), input, "SoftmaxBackward0")


def _softmax(input, dim, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    ax = _axis("softmax", input, dim)
    if input.ndim == 0 or input.numel() == 0 or not input.is_floating_point():
        return O["softmax"].decompose(_bind_by_name, input, axis=ax)    # what the fused impl does not take
    return bind(O["softmax"], input, axis=ax)      # one fused op in eager mode; traced: its decomposition


@published("jitgrad", "Tensor")
def log_softmax(input, dim, dtype=None, **torch_kw):
    """``(x - m) - log(sum(exp(x - m)))`` with the max ``m`` detached: exact where ``x - logsumexp(x)`` would
    lose the digits of a large ``m`` (in float32, 1000.31 - 1001.31 keeps only 4 decimals)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(log_softmax, 'log_softmax', (input, dim, dtype), {}, torch_kw)
    return _fresh(_log_softmax(input, dim, dtype), input, "LogSoftmaxBackward0")


def _log_softmax(input, dim, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    ax = _axis("log_softmax", input, dim)
    if input._data.dtype.kind != "f":     # (the payload read, not three property frames: once per loss)
        input = input.float()
    d = input._data
    if d.size == 0:
        return input * 1.0
    if d.ndim == 0:
        return O["log_softmax"].decompose(_bind_by_name, input, axis=ax)
    return bind(O["log_softmax"], input, axis=ax)  # one fused op in eager mode; traced: its decomposition


@published("jitgrad", "Tensor")
def outer(input, vec2, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(outer, 'outer', (input, vec2), {}, torch_kw)
    return unsqueeze(input, 1) * unsqueeze(vec2, 0)


@published("jitgrad", "Tensor")
def dot(input, other, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(dot, 'dot', (input, other), {}, torch_kw)
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    if input.dtype is not other.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{torch_scalar_name(input.dtype)} and {torch_scalar_name(other.dtype)}")
    if input.shape[0] != other.shape[0]:
        n, m = input.shape[0], other.shape[0]
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to have the same number "
                           f"of elements, but got {n} and {m} elements respectively")
    return named(matmul(input, other), "DotBackward0")


@published("jitgrad", "Tensor")
def mm(input, mat2, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(mm, 'mm', (input, mat2), {}, torch_kw)
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {input.ndim}D and {mat2.ndim}D")
    return matmul(input, mat2)


@published("jitgrad", "Tensor")
def bmm(input, mat2, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(bmm, 'bmm', (input, mat2), {}, torch_kw)
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"bmm: expected 3D tensors, got {input.ndim}D and {mat2.ndim}D")
    return matmul(input, mat2)


def _read_values(what, *ts):
    from ..runtime.traced import is_traced as _is_traced, traced_read as _traced_read
    for t in ts:
        if _is_traced(t):
            _traced_read(t, what)


@published("jitgrad", "Tensor")
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(allclose, 'allclose', (input, other, rtol, atol, equal_nan), {}, torch_kw)
    _read_values("allclose()", input, other)
    return bool(np.allclose(input._data, other._data, rtol=rtol, atol=atol, equal_nan=equal_nan))


@published("jitgrad", "Tensor")
def equal(input, other, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(equal, 'equal', (input, other), {}, torch_kw)
    _read_values("equal()", input, other)
    return input.shape == other.shape and bool(np.array_equal(input._data, other._data))


import builtins as _b  # noqa: E402

builtins_max = _b.max     # max() below is ours


# ---- Tensor-only forms ---------------------------------------------------------------------------------
@published("Tensor", name="view_as")
def _view_as(self, other):
    return view(self, other.shape)


@published("Tensor", name="reshape_as")
def _reshape_as(self, other):
    return reshape(self, other.shape)


@published("Tensor.property", name="T")
def _T(self):
    """The tensor with its dims reversed (``x.T``; a matrix's transpose)."""
    n = self._data.ndim
    return _swap_last2(self) if n == 2 else permute(self, tuple(range(n))[::-1])


@published("Tensor.property", name="mT")
@published("Tensor.property", name="mH")
def _mT(self):
    """The batch of matrices transposed (``x.mT``: the last two dims swapped; ``x.mH`` is the same for real
    tensors)."""
    return _swap_last2(self) if self._data.ndim >= 2 else transpose(self, -2, -1)


__all__ = ["exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "relu", "abs",
           "sign", "neg", "negative", "reciprocal", "erf", "log2", "log10", "square", "isnan", "isinf", "isfinite",
           "logical_not", "logical_and", "logical_or", "add", "sub", "subtract", "mul", "multiply", "div", "divide",
           "true_divide", "floor_divide", "remainder", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
           "ge", "matmul", "clamp", "clip", "nonzero", "sum", "mean", "prod", "amax", "amin", "argmax", "argmin",
           "max", "min", "var", "std", "logsumexp", "norm", "softmax", "log_softmax", "reshape", "view", "flatten",
           "squeeze", "unsqueeze", "permute", "transpose", "swapaxes", "t", "expand", "broadcast_to", "expand_as",
           "split", "chunk", "unbind", "gather", "take_along_dim", "index_select", "outer", "dot", "mm", "bmm",
           "allclose", "equal", "where", "cat", "concat", "concatenate", "stack", "broadcast_tensors",
           "take_along_dim", "outer", "dot", "mm", "bmm", "multiply"]
del op_error
