"""Reductions over ``axes`` (a sorted tuple of non-negative ints) with ``keepdims``."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from .opdef import LINEAR, REDUCTION, SYMMETRIC, Aval, OpDef, OpError, normalize_axes, register


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
    # torch.amax: (grad / count) * mask, mask = x == out (a NaN result: nan everywhere).  ``evenly`` (max() and
    # min() of a whole tensor): torch's evenly_distribute_backward, where a NaN result's mask is the NaN elements
    # and the rest get an exact 0
    x, out = c.inputs[0], _keep(c, c.outputs[0])
    mask = x == out
    if c.params.get("evenly"):
        mask = mask | ((x != x) & (out != out))
        return ((_keep(c, g) / mask.sum(c.params["axes"], keepdim=True)).where(mask, 0.0),)
    return ((_keep(c, g) / mask.sum(c.params["axes"], keepdim=True)) * mask,)


register(OpDef("sum", "reduce", _rule("sum", "acc"), _sum_impl, _sum_vjp, jvp=LINEAR,
               scalar=lambda m, acc, x: acc + x))
register(OpDef("amax", "reduce", _rule("amax"),
               lambda x, axes, keepdims, evenly=False: np.maximum.reduce(x, axis=axes, keepdims=keepdims),
               _amax_vjp, saves_in=(0,), saves_out=(0,), scalar=lambda m, acc, x: m.max(acc, x), jvp=REDUCTION))
register(OpDef("amin", "reduce", _rule("amin"),
               lambda x, axes, keepdims, evenly=False: np.minimum.reduce(x, axis=axes, keepdims=keepdims),
               _amax_vjp, saves_in=(0,), saves_out=(0,), scalar=lambda m, acc, x: m.min(acc, x), jvp=REDUCTION))


def _prod_vjp(c, g):
    # torch's prod_backward: when the *whole* input has no zero, grad * (result / input) (so an inf element gets
    # nan, inf / inf; torch does that, we match it); when some element anywhere is 0, the product of the others
    # computed without division (exact: finite second order at one zero, 0 at two or more).  The choice is a
    # data-dependent branch in torch; here both branches are computed and one is selected, each on inputs made
    # harmless where it is not selected (a where() alone would let its NaN derivatives leak into the second order).
    x, out, g = c.inputs[0], _keep(c, c.outputs[0]), _keep(c, g)
    if x.ndim == 0:
        return (g,)
    any_zero = (x == 0).sum() > 0
    by_division = g * (out / x.where(~any_zero, 1.0))
    exact = g * c.bind("prod_others", x.where(any_zero, 1.0), axes=c.params["axes"])
    return (exact.where(any_zero, by_division),)


register(OpDef("prod", "reduce", _rule("prod", "acc"), lambda x, axes, keepdims: np.prod(x, axis=axes, keepdims=keepdims),
               _prod_vjp, saves_in=(0,), saves_out=(0,), scalar=lambda m, acc, x: acc * x, jvp=REDUCTION))


def _prod_others_impl(x, axes):
    """For each element, the product of the *other* elements over `axes` (exact with zeros)."""
    moved = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    if x.size == 0:
        return np.empty(x.shape, x.dtype)       # (reshape's -1 is ambiguous with a zero-length batch dim)
    flat = moved.reshape(moved.shape[:moved.ndim - len(axes)] + (-1,))
    n = flat.shape[-1]
    ones = np.ones(flat.shape[:-1] + (1,), dtype=x.dtype)
    left = np.concatenate([ones, np.cumprod(flat, axis=-1)[..., :n - 1]], axis=-1) if n else flat
    right = np.concatenate([np.cumprod(flat[..., ::-1], axis=-1)[..., :n - 1][..., ::-1], ones], axis=-1) if n else flat
    res = (left * right).reshape(moved.shape)
    return np.moveaxis(res, tuple(range(x.ndim - len(axes), x.ndim)), axes)


def _prod_others_vjp(c, h):
    # d/dx_k sum_i h_i prod_{j!=i} x_j = sum_{i!=k} h_i prod_{j!=i,k} x_j, without division (exact at zeros):
    # row k of the matrix X[k, j] = (x_j if j != k else 1) has prod_others(X[k])_i = prod_{j!=i,k} x_j for i != k
    x, axes = c.inputs[0], c.params["axes"]
    shape = c.shapes[0]
    keep = [i for i in range(len(shape)) if i not in axes]
    perm = keep + list(axes)
    inv = [perm.index(i) for i in range(len(shape))]
    batch = tuple(shape[i] for i in keep)
    n = 1
    for a in axes:
        n *= shape[a]
    if n <= 1:
        return (h.new_zeros(shape),)
    xf = x.permute(*perm).reshape(batch + (n,))
    hf = h.permute(*perm).reshape(batch + (n,))
    off = ~np.eye(n, dtype=bool)
    rows = xf.unsqueeze(-2).expand(batch + (n, n)).where(off, 1.0)
    others2 = c.bind("prod_others", rows, axes=(len(batch) + 1,))
    t = (hf.unsqueeze(-2) * others2).where(off, 0.0).sum(-1)
    return (t.reshape(tuple(shape[i] for i in perm)).permute(*inv),)


register(OpDef("prod_others", "reduce", lambda av, p: [Aval(av[0].shape, av[0].dtype)], _prod_others_impl,
               _prod_others_vjp, saves_in=(0,), grad_name="ProdBackward0", jvp=SYMMETRIC))


def _norm_vjp(c, g):
    # torch's norm_backward for p=2: grad * (self / norm).masked_fill_(norm == 0, 0): the subgradient 0 at a zero
    # vector, and (as torch) a NaN second order there, from the 0/0 under the mask
    x, n = c.inputs[0], _keep(c, c.outputs[0])
    return (_keep(c, g) * (x / n).where(n != 0, 0.0),)


def _norm2_impl(x, axes, keepdims):
    # the ufunc's reduce, not np.sum: the same sum without its Python wrapper (four frames a call)
    return np.sqrt(_add_reduce(x * x, axis=axes, keepdims=keepdims))


register(OpDef("norm2", "reduce", _rule("norm", "float"), _norm2_impl,
               _norm_vjp, saves_in=(0,), saves_out=(0,), grad_name="NormBackward1", jvp=REDUCTION))


def _normp_impl(x, axes, keepdims, p):
    return np.sum(np.abs(x) ** p, axis=axes, keepdims=keepdims) ** (1.0 / p)


def _normp_vjp(c, g):
    # torch's norm_backward for a finite p other than 0 and 2, term for term: its masks put the subgradient 0 at
    # zero elements (p < 1) and at zero vectors, where the composition sum(|x| ** p) ** (1 / p) gives 0 * inf
    x, n, g, p = c.inputs[0], _keep(c, c.outputs[0]), _keep(c, g), c.params["p"]
    if p == 1:
        return (x.sign() * g,)
    if p < 1:
        scaled = x.sign() * (x.abs() ** (p - 1)).where(x != 0, 0.0)
        return (scaled * g * n ** (1 - p),)
    scaled = x.sign() * x.abs() ** (p - 1) if p < 2 else x * x.abs() ** (p - 2)
    return (scaled * (g / n ** (p - 1)).where(n != 0, 0.0),)


register(OpDef("normp", "reduce", _rule("norm", "float"), _normp_impl, _normp_vjp, saves_in=(0,), saves_out=(0,),
               grad_name="LinalgVectorNormBackward0", jvp=REDUCTION))


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
