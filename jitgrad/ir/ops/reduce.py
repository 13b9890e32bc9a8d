"""Reductions over ``axes`` (a sorted tuple of non-negative ints) with ``keepdims``."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .opdef import Aval, OpDef, OpError, normalize_axes, register


def reduced_shape(shape, axes, keepdims):
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _rule(name, out="same"):
    def shape_dtype(avals, params):
        (x,) = avals
        axes = params["axes"]
        for a in axes:
            if not 0 <= a < max(x.ndim, 1):
                raise OpError(f"{name}: dim {a} out of range for a tensor of shape {list(x.shape)}")
        if name in ("amax", "amin") and any(x.shape[a] == 0 for a in axes if a < x.ndim):
            raise OpError(f"{name}(): Expected reduction dim to have non-zero size (input shape {list(x.shape)})")
        d = x.dtype
        if out == "int64":
            d = dt.int64
        elif out == "acc" and not d.is_floating_point:
            d = dt.int64
        elif out == "float" and not d.is_floating_point:
            raise OpError(f"{name}: expected a floating point tensor, got {d.name}")
        return [Aval(reduced_shape(x.shape, axes, params["keepdims"]), d)]
    return shape_dtype


def _keep(ctx, t):
    """A reduced tensor t reshaped to keep the reduced axes as size-1 dims."""
    if ctx.params["keepdims"]:
        return t
    return t.reshape(reduced_shape(ctx.shapes[0], ctx.params["axes"], True))


def _sum_impl(x, axes, keepdims):
    # the ufunc's reduce is np.sum without its Python wrapper (small-tensor cost); it widens ints and bools the same
    return _add_reduce(x, axis=axes, keepdims=keepdims)


_add_reduce = np.add.reduce


def _sum_vjp(c, g):
    if len(c.params["axes"]) == len(c.shapes[0]):     # a full reduction: the 0-d cotangent broadcasts as it is
        return (c.bind("broadcast_to", g, shape=c.shapes[0]) if c.shapes[0] != g.shape else g,)
    return (_keep(c, g).expand(c.shapes[0]),)


def _amax_vjp(c, g):
    x, out = c.inputs[0], _keep(c, c.outputs[0])
    mask = x == out
    return (_keep(c, g) * mask / mask.sum(c.params["axes"], keepdim=True),)


register(OpDef("sum", "reduce", _rule("sum", "acc"), _sum_impl, _sum_vjp,
               scalar=lambda acc, x: f"{acc} + {x}"))
register(OpDef("amax", "reduce", _rule("amax"), lambda x, axes, keepdims: np.maximum.reduce(x, axis=axes, keepdims=keepdims),
               _amax_vjp, saves_in=(0,), saves_out=(0,), scalar=lambda acc, x: f"max({acc}, {x})"))
register(OpDef("amin", "reduce", _rule("amin"), lambda x, axes, keepdims: np.minimum.reduce(x, axis=axes, keepdims=keepdims),
               _amax_vjp, saves_in=(0,), saves_out=(0,), scalar=lambda acc, x: f"min({acc}, {x})"))


def _prod_vjp(c, g):
    return (_keep(c, g) * c.bind("prod_others", c.inputs[0], axes=c.params["axes"]),)


register(OpDef("prod", "reduce", _rule("prod", "acc"), lambda x, axes, keepdims: np.prod(x, axis=axes, keepdims=keepdims),
               _prod_vjp, saves_in=(0,), scalar=lambda acc, x: f"{acc} * {x}"))


def _prod_others_impl(x, axes):
    """For each element, the product of the *other* elements over `axes` (exact with zeros)."""
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    flat = moved.reshape(moved.shape[:moved.ndim - len(axes)] + (-1,))
    n = flat.shape[-1]
    ones = np.ones(flat.shape[:-1] + (1,), dtype=x.dtype)
    left = np.concatenate([ones, np.cumprod(flat, axis=-1)[..., :n - 1]], axis=-1) if n else flat
    right = np.concatenate([np.cumprod(flat[..., ::-1], axis=-1)[..., :n - 1][..., ::-1], ones], axis=-1) if n else flat
    res = (left * right).reshape(moved.shape)
    return np.moveaxis(res, tuple(range(x.ndim - len(axes), x.ndim)), axes)


def _prod_others_vjp(c, h):
    # d/dx_k sum_i h_i prod_{j!=i} x_j = (sum_i h_i P_i - h_k P_k) / x_k  (second order assumes no zeros)
    x, p = c.inputs[0], c.outputs[0]
    hp = h * p
    return ((hp.sum(c.params["axes"], keepdim=True) - hp) / x,)


register(OpDef("prod_others", "reduce", lambda av, p: [Aval(av[0].shape, av[0].dtype)], _prod_others_impl,
               _prod_others_vjp, saves_in=(0,), saves_out=(0,), grad_name="ProdBackward0"))


def _norm_vjp(c, g):
    x, n = c.inputs[0], _keep(c, c.outputs[0])
    safe = n.where(n != 0, 1.0)  # the subgradient 0 at x == 0, as torch; keeps double backward finite
    return (_keep(c, g) * x / safe,)


register(OpDef("norm2", "reduce", _rule("norm", "float"),
               lambda x, axes, keepdims: np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdims)),
               _norm_vjp, saves_in=(0,), saves_out=(0,), grad_name="NormBackward1"))


def _arg_rule(name):
    def shape_dtype(avals, params):
        (x,) = avals
        axis, keep = params["axis"], params["keepdims"]
        if axis is None:
            if x.shape and 0 in x.shape:
                raise OpError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
            return [Aval((1,) * x.ndim if keep else (), dt.int64)]
        if x.shape and x.shape[axis] == 0:
            raise OpError(f"{name}(): Expected reduction dim {axis} to have non-zero size.")
        return [Aval(reduced_shape(x.shape, (axis,), keep), dt.int64)]
    return shape_dtype


register(OpDef("argmax", "reduce", _arg_rule("argmax"),
               lambda x, axis, keepdims: np.asarray(np.argmax(x, axis=axis, keepdims=keepdims)), None))
register(OpDef("argmin", "reduce", _arg_rule("argmin"),
               lambda x, axis, keepdims: np.asarray(np.argmin(x, axis=axis, keepdims=keepdims)), None))

__all__ = ["reduced_shape", "normalize_axes"]
