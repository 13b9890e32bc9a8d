"""matmul with NumPy semantics (1-D promotion, batched broadcasting); BLAS in every backend."""
from __future__ import annotations

import numpy as np

from . import blas
from .opdef import BY_TRANSPOSE, Aval, OpDef, OpError, bilinear_adding, broadcast_shapes, fmt_shape, register
from . import eager_gemm, stacked_gemm
from ..symbolic import has_symbols


def _matmul_rule(avals, params):
    x, y = avals
    if x.ndim == 0 or y.ndim == 0:
        raise OpError(f"matmul: both arguments to matmul need to be at least 1D, but they are {x.ndim}D and {y.ndim}D")
    if x.dtype is not y.dtype:
        raise OpError(f"matmul: expected both operands to have the same dtype, but got {x.dtype.name} and "
                      f"{y.dtype.name} (shapes {fmt_shape(x.shape)} and {fmt_shape(y.shape)}); convert one with .to()")
    xs = (1,) + x.shape if x.ndim == 1 else x.shape
    ys = y.shape + (1,) if y.ndim == 1 else y.shape
    if xs[-1] != ys[-2]:
        raise OpError(f"matmul: mat1 and mat2 shapes cannot be multiplied ({fmt_shape(x.shape)} @ {fmt_shape(y.shape)}:"
                      f" {xs[-1]} != {ys[-2]})")
    batch = broadcast_shapes("matmul", [xs[:-2], ys[:-2]])
    shape = batch + (xs[-2], ys[-1])
    if x.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if y.ndim == 1:
        shape = shape[:-1]
    return [Aval(shape, x.dtype)]


def _mT(c, t):
    """The last two dims swapped: one permute bind (the ``.mT`` property's argument checks are not needed here)."""
    n = t.ndim
    return c.bind("permute", t, perm=tuple(range(n - 2)) + (n - 1, n - 2))


def _matmul_vjp(c, g):
    x, y = c.inputs
    xs, ys = c.shapes
    # promote 1-D operands to matrices so one pair of formulas covers every case
    x2 = x.reshape((1,) + xs) if len(xs) == 1 and x is not None else x   # None: not saved (not needed)
    y2 = y.reshape(ys + (1,)) if len(ys) == 1 and y is not None else y
    g2 = g
    if len(ys) == 1:    # first: for 1-D @ 1-D, g is 0-D and becomes [1, 1]
        g2 = g2.unsqueeze(-1)
    if len(xs) == 1:
        g2 = g2.unsqueeze(-2)
    gx = gy = None
    # the promoted shapes come from c.shapes: an operand whose partner needs no gradient is not saved (None)
    xs2 = (1,) + xs if len(xs) == 1 else xs
    ys2 = ys + (1,) if len(ys) == 1 else ys
    if c.needs_grad[0]:
        gx = g2 @ _mT(c, y2)
        gx = gx.sum_to_size(xs2).reshape(xs) if gx.shape != xs else gx
    if c.needs_grad[1] and len(ys2) == 2 and len(xs2) > 2:
        # a shared matrix (x @ W.T on [B, T, C]): the batch is more of the contraction, one GEMM with
        # K = B * T instead of a batched product and a sum over its batch
        k = xs2[-1]
        gy = _mT(c, x2.reshape((-1, k))) @ g2.reshape((-1, g2.shape[-1]))
    elif c.needs_grad[1]:
        gy = _mT(c, x2) @ g2
        gy = gy.sum_to_size(ys2).reshape(ys) if gy.shape != ys else gy
    return gx, gy


def _matmul_impl(x, y):
    # NumPy hands an operand with a zero stride (a broadcast view, e.g. the cotangent of a sum) to its own
    # loop instead of BLAS: 5-10x slower at (256, 256) @ (256, 1).  A contiguous copy costs far less.
    if x.ndim >= 2 and y.ndim >= 2 and x.shape[-1] == 1:
        return np.multiply(x, y)    # an outer product (inner dim 1): NumPy's matmul takes a slow path for it
    if 0 in x.strides and x.size > 1:
        x = np.ascontiguousarray(x)
    if 0 in y.strides and y.size > 1:
        y = np.ascontiguousarray(y)
    if x.ndim >= 3 and stacked_gemm.splits(x.shape, y.shape, x.dtype, y.dtype):
        return stacked_gemm.matmul(x, y)
    return blas.matmul(x, y)


def _numpy_matmul(x, y):
    """``_matmul_impl`` for a signature that ``blas.matmul`` hands to NumPy (below its GEMM threshold, or not a
    float GEMM), with no outer product: only the zero-stride copies are left to decide per call."""
    if 0 in x.strides and x.size > 1:
        x = np.ascontiguousarray(x)
    if 0 in y.strides and y.size > 1:
        y = np.ascontiguousarray(y)
    return np.matmul(x, y)


def _stack_matmul(x, y):
    """``_matmul_impl`` for a signature that is a stack of small products split between the eager threads
    (``stacked_gemm.matmul``, the bits of one ``np.matmul``)."""
    if 0 in x.strides and x.size > 1:
        x = np.ascontiguousarray(x)
    if 0 in y.strides and y.size > 1:
        y = np.ascontiguousarray(y)
    return stacked_gemm.matmul(x, y)


def _matmul_for_signature(avals, params):
    """The eager impl of one matmul signature: ``_numpy_matmul`` where ``_matmul_impl`` would reach ``np.matmul``
    (``_stack_matmul`` where it would split a stack of small products between the eager threads)."""
    x, y = avals
    if x.ndim < 2 or y.ndim < 2 or x.shape[-1] == 1:
        return None
    if x.ndim >= 3 and stacked_gemm.splits(x.shape, y.shape, x.dtype.np, y.dtype.np):
        return _stack_matmul
    macs = y.shape[-1]
    for n in x.shape:
        macs *= n
    if y.ndim == 2 and x.dtype.np in (np.float32, np.float64) and macs >= blas.EAGER_MIN_MACS:
        if x.ndim == 2 and x.dtype is y.dtype and not has_symbols(x.shape) and not has_symbols(y.shape):
            # one single-threaded GEMM of these shapes: its call worked out once (the same call, the same bits)
            return eager_gemm.gemm_for_signature(x.shape[0], x.shape[1], y.shape[1], x.dtype.np)
        return None     # blas.matmul's own GEMM
    if blas.small_gemm_is_dot(x.ndim, y.ndim, x.dtype.np, y.dtype.np):
        return blas.dot2d       # what blas.matmul runs for them (the vjp's products too): one C call
    return _numpy_matmul


def _matmul_add_into(out, args, params):
    """``out += x @ y`` by the GEMM (``blas.matmul_add_into``) for two eager matrices; False otherwise."""
    x, y = (getattr(a, "_data", None) for a in args)
    return type(x) is np.ndarray and type(y) is np.ndarray and blas.matmul_add_into(out, x, y)


register(OpDef("matmul", "linalg", _matmul_rule, _matmul_impl, _matmul_vjp, saves_in=(0, 1),
               saved_for={0: (1,), 1: (0,)}, grad_name="MmBackward0", jvp=bilinear_adding(_matmul_add_into),
               eager_impl=_matmul_for_signature))


# ---- eigh: the eigendecomposition of a symmetric matrix ----------------------------------------------------
# A primitive has one output, so eigh packs its two: out[..., 0, :] are the eigenvalues (ascending) and
# out[..., 1:, :] the eigenvectors as columns (U with A = U diag(L) U^T).  The public functions slice them apart;
# slicing is differentiable, so a cotangent for either part arrives here as one packed cotangent.

def _eigh_rule(avals, params):
    (a,) = avals
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise OpError(f"eigh: A must be batches of square matrices, but got a tensor of shape {fmt_shape(a.shape)}")
    if not a.dtype.is_floating_point:
        raise OpError(f"eigh: expected a floating point tensor as input, got {a.dtype.name}")
    n = a.shape[-1]
    return [Aval(a.shape[:-2] + (n + 1, n), a.dtype)]


def _eigh_impl(a, uplo="L"):
    w, v = np.linalg.eigh(a, UPLO=uplo)     # reads one triangle (``uplo``: "L" lower, "U" upper)
    return np.concatenate([w[..., None, :], v], axis=-2).astype(a.dtype, copy=False)


def _eigh_vjp(c, g):
    # torch's eigh backward for real symmetric input: gA = U (diag(gL) + F * (U^T gU)) U^T, F_ij = 1 / (L_j - L_i)
    # off the diagonal and 0 on it.  The reciprocal only sees nonzero gaps (1 elsewhere), so the second order has
    # no 0 * inf NaN on the diagonal; repeated eigenvalues have no eigenvector derivative (as in torch).
    p = c.outputs[0]
    lam, u = p[..., 0, :], p[..., 1:, :]
    g_lam, g_u = g[..., 0, :], g[..., 1:, :]
    ut = _mT(c, u)
    gap = lam.unsqueeze(-2) - lam.unsqueeze(-1)
    nonzero = gap != 0
    f = gap.where(nonzero, 1.0).reciprocal().where(nonzero, 0.0)
    inner = c.bind("matmul", ut, g_u) * f
    return (c.bind("matmul", c.bind("matmul", u, inner) + u * g_lam.unsqueeze(-2), ut),)


register(OpDef("eigh", "linalg", _eigh_rule, _eigh_impl, _eigh_vjp, saves_out=(0,), grad_name="LinalgEighBackward0", jvp=BY_TRANSPOSE,
               doc="Eigenvalues (row 0) and eigenvectors (rows 1..n, as columns) of symmetric matrices, packed."))
