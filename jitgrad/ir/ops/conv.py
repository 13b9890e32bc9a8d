"""Convolution as three primitives that are each other's derivatives, for any number of spatial dims.

- ``conv(x, w; stride, padding, dilation, groups)``: ``x (N, C, *S)``, ``w (O, C / groups, *K)`` ->
  ``(N, O, *S_out)``, ``S_out = (S + lo + hi - dilation (K - 1) - 1) // stride + 1``; ``padding`` is one
  ``(lo, hi)`` pair per spatial dim (zeros; unequal pairs give torch's ``padding='same'`` for even kernels).
- ``conv_transpose(g, w; ..., size)``: the adjoint of ``x -> conv(x, w)`` for an ``x`` of spatial size ``size``:
  ``(N, O, *S_out)`` -> ``(N, C, *size)`` (``nn.ConvTranspose2d`` is this op; ``size`` carries its
  ``output_padding``).
- ``conv_weight(x, g; ..., ksize)``: the adjoint of ``w -> conv(x, w)`` for a ``w`` of kernel size ``ksize``:
  ``(N, O, *S_out)`` -> ``(O, C / groups, *ksize)``.

All three are bilinear, and each one's vjp is the other two (with ``<a, b>`` the sum of products):
``<ct, conv(x, w)> = <x, conv_transpose(ct, w)> = <w, conv_weight(x, ct)>``, so differentiating any of them
binds only these three, to any order (gradgradcheck, compiled double backward).

The NumPy kernels are im2col: the zero-padded input read through ``as_strided`` as ``(N, C, *K, *S_out)``
windows, copied once into ``(N, groups, C / groups * prod(K), prod(S_out))`` columns, then one batched matmul
(BLAS per batch entry) against the weight as ``(groups, O / groups, C / groups * prod(K))``.  ``conv_transpose``
multiplies the other way and adds the columns back with one strided slice per kernel offset (col2im: a loop
over ``prod(K)``, never over pixels or the batch).  Compiled, each is a host step (this impl) in the graph.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .opdef import BILINEAR, Aval, OpDef, OpError, fmt_shape, register


def out_size(size, k, stride, padding, dilation):
    """The spatial size of ``conv`` over an input of spatial size ``size`` (may be < 1: the caller checks)."""
    return tuple((n + lo + hi - d * (kk - 1) - 1) // s + 1
                 for n, kk, s, (lo, hi), d in zip(size, k, stride, padding, dilation))


# ---- shape rules -------------------------------------------------------------------------------------------

def _int_tuple(name, what, v, nd, least):
    if type(v) is not tuple or len(v) != nd or any(type(i) is not int or i < least for i in v):
        kind = "positive" if least == 1 else "non-negative"
        raise OpError(f"{name}: {what} must be a tuple of {nd} {kind} ints, got {v!r}")


def _checked(name, a, b, what_a, what_b, params):
    """The checks the three rules share (operands, stride/dilation/padding/groups); returns (spatial dims, groups)."""
    _check_pair(name, a, b, what_a, what_b)
    nd = a.ndim - 2
    _check_params(name, nd, params)
    return nd, params["groups"]


def _check_params(name, nd, params):
    for p in ("stride", "dilation"):
        _int_tuple(name, p, params[p], nd, 1)
    pad = params["padding"]
    if type(pad) is not tuple or len(pad) != nd or any(
            type(p) is not tuple or len(p) != 2 or any(type(i) is not int or i < 0 for i in p) for p in pad):
        raise OpError(f"{name}: padding must be a tuple of {nd} (lo, hi) pairs of non-negative ints, got {pad!r}")
    g = params["groups"]
    if type(g) is not int or g < 1:
        raise OpError(f"{name}: groups must be a positive int, got {g!r}")


def _check_pair(name, a, b, what_a, what_b):
    if a.ndim < 3 or a.ndim != b.ndim:
        raise OpError(f"{name}: {what_a} {a.dtype.name}{fmt_shape(a.shape)} and {what_b} "
                      f"{b.dtype.name}{fmt_shape(b.shape)} must have the same rank, at least 3")
    if a.dtype is not b.dtype:
        raise OpError(f"{name}: {what_a} and {what_b} must have one dtype, got {a.dtype.name} and {b.dtype.name}")
    if a.dtype.name == "bool":
        raise OpError(f"{name}: not implemented for bool")


def _check_geometry(name, size, k, out, params):
    want = out_size(size, k, params["stride"], params["padding"], params["dilation"])
    if want != tuple(out):
        raise OpError(f"{name}: input size {fmt_shape(size)}, kernel {fmt_shape(k)}, stride {params['stride']}, "
                      f"padding {params['padding']} and dilation {params['dilation']} give output size "
                      f"{fmt_shape(want)}, not {fmt_shape(out)}")


def _conv_rule(avals, params):
    x, w = avals
    nd, G = _checked("conv", x, w, "input", "weight", params)
    if w.shape[0] % G or x.shape[1] != w.shape[1] * G:
        raise OpError(f"conv: groups={G}, weight {fmt_shape(w.shape)} and input {fmt_shape(x.shape)}: expected "
                      f"{w.shape[1] * G} input channels and out channels divisible by {G}")
    out = out_size(x.shape[2:], w.shape[2:], params["stride"], params["padding"], params["dilation"])
    if any(o < 1 for o in out):
        raise OpError(f"conv: the dilated kernel {fmt_shape(w.shape[2:])} is larger than the padded input "
                      f"{fmt_shape(x.shape[2:])} (padding {params['padding']}, dilation {params['dilation']})")
    return [Aval((x.shape[0], w.shape[0]) + out, x.dtype)]


def _conv_transpose_rule(avals, params):
    g, w = avals
    nd, G = _checked("conv_transpose", g, w, "input", "weight", params)
    size = params["size"]
    _int_tuple("conv_transpose", "size", size, nd, 0)
    if w.shape[0] % G or g.shape[1] != w.shape[0]:
        raise OpError(f"conv_transpose: groups={G}, weight {fmt_shape(w.shape)} and input {fmt_shape(g.shape)}: "
                      f"expected {w.shape[0]} input channels, divisible by {G}")
    _check_geometry("conv_transpose", size, w.shape[2:], g.shape[2:], params)
    return [Aval((g.shape[0], w.shape[1] * G) + size, g.dtype)]


def _conv_weight_rule(avals, params):
    x, g = avals
    nd, G = _checked("conv_weight", x, g, "input", "output gradient", params)
    ksize = params["ksize"]
    _int_tuple("conv_weight", "ksize", ksize, nd, 1)
    if x.shape[1] % G or g.shape[1] % G or x.shape[0] != g.shape[0]:
        raise OpError(f"conv_weight: groups={G}, input {fmt_shape(x.shape)} and output gradient "
                      f"{fmt_shape(g.shape)}: expected one batch size and channels divisible by {G}")
    _check_geometry("conv_weight", x.shape[2:], ksize, g.shape[2:], params)
    return [Aval((g.shape[1], x.shape[1] // G) + ksize, x.dtype)]


# ---- the NumPy kernels ------------------------------------------------------------------------------------

def _padded(x, padding):
    if not any(lo or hi for lo, hi in padding):
        return x
    xp = np.zeros(x.shape[:2] + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], padding)), x.dtype)
    xp[(slice(None), slice(None)) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(x.shape[2:], padding))] = x
    return xp


def _columns(x, k, out, stride, padding, dilation, groups):
    """im2col: ``(N, groups, C / groups * prod(k), prod(out))``, the windows of the padded ``x`` in one copy."""
    xp = _padded(x, padding)
    st = xp.strides
    nd = len(k)
    view = as_strided(xp, xp.shape[:2] + tuple(k) + tuple(out),
                      st[:2] + tuple(st[2 + i] * dilation[i] for i in range(nd))
                      + tuple(st[2 + i] * stride[i] for i in range(nd)), writeable=False)
    N, C = x.shape[:2]
    return view.reshape(N, groups, C // groups * math.prod(k), math.prod(out))


def _conv(x, w, *, stride, padding, dilation, groups):
    N, O = x.shape[0], w.shape[0]
    out = out_size(x.shape[2:], w.shape[2:], stride, padding, dilation)
    cols = _columns(x, w.shape[2:], out, stride, padding, dilation, groups)
    wm = w.reshape(groups, O // groups, cols.shape[2])      # (sizes spelled out: -1 fails on empty arrays)
    return np.matmul(wm, cols).reshape((N, O) + out)        # (N, groups, O / groups, P): already (N, O, *out)


def _conv_transpose(g, w, *, stride, padding, dilation, groups, size):
    N, O = g.shape[:2]
    out, k = g.shape[2:], w.shape[2:]
    C = w.shape[1] * groups
    wm = w.reshape(groups, O // groups, w.shape[1] * math.prod(k))
    cols = np.matmul(np.swapaxes(wm, -1, -2), g.reshape(N, groups, O // groups, math.prod(out)))
    cols = cols.reshape((N, C) + tuple(k) + tuple(out))
    xp = np.zeros((N, C) + tuple(n + lo + hi for n, (lo, hi) in zip(size, padding)), g.dtype)
    for offs in np.ndindex(*k):     # col2im: each kernel offset's columns land on one strided slice
        at = tuple(slice(o * d, o * d + s * (n - 1) + 1, s) for o, d, s, n in zip(offs, dilation, stride, out))
        xp[(slice(None), slice(None)) + at] += cols[(slice(None), slice(None)) + offs]
    return np.ascontiguousarray(xp[(slice(None), slice(None))
                                   + tuple(slice(lo, lo + n) for n, (lo, _) in zip(size, padding))])


def _conv_weight(x, g, *, stride, padding, dilation, groups, ksize):
    N, O = g.shape[:2]
    cols = _columns(x, ksize, g.shape[2:], stride, padding, dilation, groups)
    gm = g.reshape(N, groups, O // groups, math.prod(g.shape[2:]))
    dw = np.matmul(gm, np.swapaxes(cols, -1, -2))           # (N, groups, O / groups, C / groups * prod(k))
    return dw.sum(axis=0).reshape((O, x.shape[1] // groups) + tuple(ksize))


# ---- derivatives: each op's vjp binds the other two ------------------------------------------------------

def _geom(p):
    return {k: p[k] for k in ("stride", "padding", "dilation", "groups")}


def _conv_vjp(c, ct):
    x, w = c.inputs
    p = _geom(c.params)
    dx = c.bind("conv_transpose", ct, w, size=tuple(c.shapes[0][2:]), **p) if c.needs_grad[0] else None
    dw = c.bind("conv_weight", x, ct, ksize=tuple(c.shapes[1][2:]), **p) if c.needs_grad[1] else None
    return dx, dw


def _conv_transpose_vjp(c, ct):
    g, w = c.inputs
    p = _geom(c.params)
    dg = c.bind("conv", ct, w, **p) if c.needs_grad[0] else None
    dw = c.bind("conv_weight", ct, g, ksize=tuple(c.shapes[1][2:]), **p) if c.needs_grad[1] else None
    return dg, dw


def _conv_weight_vjp(c, ct):
    x, g = c.inputs
    p = _geom(c.params)
    dx = c.bind("conv_transpose", g, ct, size=tuple(c.shapes[0][2:]), **p) if c.needs_grad[0] else None
    dg = c.bind("conv", x, ct, **p) if c.needs_grad[1] else None
    return dx, dg


_BOTH = {0: (1,), 1: (0,)}      # the gradient of either input reads the other one only
register(OpDef("conv", "linalg", _conv_rule, _conv, _conv_vjp, saves_in=(0, 1), saved_for=_BOTH, jvp=BILINEAR,
               grad_name="ConvolutionBackward0",
               doc="conv(x, w; stride, padding, dilation, groups): cross-correlation of x (N, C, *S) with w "
                   "(O, C / groups, *K), zero padding given as one (lo, hi) pair per spatial dim"))
register(OpDef("conv_transpose", "linalg", _conv_transpose_rule, _conv_transpose, _conv_transpose_vjp,
               saves_in=(0, 1), saved_for=_BOTH, jvp=BILINEAR, grad_name="ConvolutionBackward0",
               doc="conv_transpose(g, w; stride, padding, dilation, groups, size): the adjoint of x -> conv(x, w) "
                   "for x of spatial size `size` (conv's input gradient; nn.ConvTranspose2d)"))
register(OpDef("conv_weight", "linalg", _conv_weight_rule, _conv_weight, _conv_weight_vjp,
               saves_in=(0, 1), saved_for=_BOTH, jvp=BILINEAR, grad_name="ConvolutionBackwardBackward0",
               doc="conv_weight(x, g; stride, padding, dilation, groups, ksize): the adjoint of w -> conv(x, w) "
                   "for w of kernel size `ksize` (conv's weight gradient)"))

__all__ = ["out_size"]
