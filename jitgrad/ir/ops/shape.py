"""Shape primitives: reshape, permute, broadcast_to, cat.  Views share storage with their input."""
from __future__ import annotations

import math

import numpy as np

from ..symbolic import has_symbols
from .opdef import LINEAR, Aval, OpDef, OpError, broadcast_shapes, fmt_shape, register, result_dtype


def _reshape_rule(avals, params):
    (x,) = avals
    shape = params["shape"]
    if math.prod(shape) != math.prod(x.shape):
        raise OpError(f"reshape: shape '{fmt_shape(shape)}' is invalid for input of size {math.prod(x.shape)} "
                      f"(input shape {fmt_shape(x.shape)})")
    return [Aval(tuple(shape), x.dtype)]


register(OpDef("reshape", "shape", _reshape_rule, lambda x, shape: x.reshape(shape),
               lambda c, g: (g.reshape(c.shapes[0]),), view=True, grad_name="ViewBackward0", jvp=LINEAR))


def _permute_rule(avals, params):
    (x,) = avals
    perm = params["perm"]
    if sorted(perm) != list(range(x.ndim)):
        raise OpError(f"permute: dims {tuple(perm)} are not a permutation of the {x.ndim} dims of a tensor "
                      f"of shape {fmt_shape(x.shape)}")
    return [Aval(tuple(x.shape[p] for p in perm), x.dtype)]


def _permute_vjp(c, g):
    perm = c.params["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return (g.permute(*inv),)


register(OpDef("permute", "shape", _permute_rule, lambda x, perm: x.transpose(perm), _permute_vjp,
               view=True, jvp=LINEAR))


def _bcast_rule(avals, params):
    (x,) = avals
    shape = tuple(params["shape"])
    if len(shape) < x.ndim or broadcast_shapes("expand", [x.shape, shape]) != shape:
        raise OpError(f"expand: the expanded size of the tensor must match the existing size at each "
                      f"non-singleton dimension (target {fmt_shape(shape)}, tensor {fmt_shape(x.shape)})")
    return [Aval(shape, x.dtype)]


def _bcast_impl(x, shape):
    lead = len(shape) - x.ndim
    if lead >= 0 and x.flags.c_contiguous and x.size and 0 not in shape:
        # the view built directly (np.broadcast_to's Python layers and nditer cost ~4x more on small arrays, and
        # every sum's vjp broadcasts): a repeated dim gets stride 0; x's buffer is contiguous, so it can back it
        xs, xst = x.shape, x.strides
        strides = []
        repeat = False
        for i, m in enumerate(shape):
            n = xs[i - lead] if i >= lead else 1
            if n == m:
                strides.append(xst[i - lead] if i >= lead else 0)
            elif n == 1:
                strides.append(0)
                repeat = True
            else:
                return np.broadcast_to(x, shape)        # (not broadcastable: NumPy's error)
        r = np.ndarray(shape, x.dtype, x, 0, tuple(strides))
        if repeat and r.flags.writeable:
            r.flags.writeable = False       # an element repeats: read-only, as NumPy's broadcasts
        return r
    r = np.broadcast_to(x, shape)
    if x.flags.writeable and (r.size == 0 or all(n <= 1 or st for n, st in zip(r.shape, r.strides))):
        # no element repeats (``x.expand(1, *x.shape)``): writeable as in torch; NumPy marks every broadcast read-only
        r = np.lib.stride_tricks.as_strided(x, r.shape, r.strides)
    return r


def _bcast_for_signature(avals, params):
    """The eager impl of one broadcast that repeats elements (every sum's vjp makes one): ``_bcast_impl``'s view of
    a C-ordered input with its strides worked out once (a size-1 dimension's own stride, which no element's
    address uses, is NumPy's for a fresh array); other inputs take ``_bcast_impl``."""
    (x,) = avals
    shape = tuple(params["shape"])
    if has_symbols(x.shape) or has_symbols(shape) or 0 in shape or 0 in x.shape:
        return None
    lead = len(shape) - len(x.shape)
    if lead < 0:
        return None
    own = np.empty(x.shape, np.dtype(x.dtype.np)).strides if x.shape else ()
    strides = []
    for i, m in enumerate(shape):
        n = x.shape[i - lead] if i >= lead else 1
        if n == m:
            strides.append(own[i - lead] if i >= lead else 0)
        elif n == 1:
            strides.append(0)
        else:
            return None
    if not [m for m, st in zip(shape, strides) if st == 0 and m > 1]:
        return None         # (nothing repeats: a writeable view, as _bcast_impl makes it)
    strides, dtype = tuple(strides), np.dtype(x.dtype.np)

    def broadcast_view(x, shape):
        if not x.flags.c_contiguous:
            return _bcast_impl(x, shape)
        r = np.ndarray(shape, dtype, x, 0, strides)
        r.flags.writeable = False       # an element repeats: read-only, as NumPy's broadcasts
        return r
    return broadcast_view


register(OpDef("broadcast_to", "shape", _bcast_rule, _bcast_impl,
               lambda c, g: (g.sum_to_size(c.shapes[0]),), view=True, grad_name="ExpandBackward0", jvp=LINEAR,
               eager_impl=_bcast_for_signature))


def _cat_rule(avals, params):
    axis = params["axis"]
    if not avals:
        raise OpError("cat: expected a non-empty list of Tensors")
    nd = avals[0].ndim
    ref = avals[0].shape
    total = 0
    for a in avals:
        if a.ndim != nd:
            raise OpError(f"cat: tensors must have same number of dimensions: got {nd} and {a.ndim}")
        for i in range(nd):
            if i != axis and a.shape[i] != ref[i]:
                raise OpError(f"cat: sizes of tensors must match except in dimension {axis}; got shapes "
                              f"{', '.join(fmt_shape(b.shape) for b in avals)}")
        total += a.shape[axis]
    shape = ref[:axis] + (total,) + ref[axis + 1:]
    return [Aval(shape, result_dtype([Aval(x.shape, x.dtype) for x in avals]))]


def _cat_impl(*xs, axis):
    d = np.result_type(*xs)
    return np.concatenate([x.astype(d, copy=False) for x in xs], axis=axis)


def _cat_vjp(c, g):
    axis, out, start = c.params["axis"], [], 0
    for i, s in enumerate(c.shapes):
        n = s[axis]
        if c.needs_grad[i]:
            gi = g[(slice(None),) * axis + (slice(start, start + n),)]
            out.append(gi.to(c.dtypes[i]) if gi.dtype is not c.dtypes[i] else gi)
        else:
            out.append(None)
        start += n
    return tuple(out)


register(OpDef("cat", "shape", _cat_rule, _cat_impl, _cat_vjp, jvp=LINEAR))


def _flip_rule(avals, params):
    (x,) = avals
    for a in params["axes"]:
        if not 0 <= a < max(x.ndim, 1):
            raise OpError(f"flip: dim {a} out of range for a tensor of shape {fmt_shape(x.shape)}")
    return [Aval(x.shape, x.dtype)]


# a reversed view (negative strides); the public ``flip`` copies it, as torch's flip returns new memory
register(OpDef("flip", "shape", _flip_rule, lambda x, axes: np.flip(x, axes) if x.ndim else x,
               lambda c, g: (c.bind("flip", g, axes=c.params["axes"]),), view=True, grad_name="FlipBackward0", jvp=LINEAR))
