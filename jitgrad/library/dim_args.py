"""Argument helpers the public functions share: a tensor argument, ``dim=`` normalisation with torch's
IndexError, and torch's node name on a fresh result."""
from __future__ import annotations

from ..ir.ops import OpError, normalize_axes, normalize_axis
from ..runtime.tensor import Tensor


def tensor_arg(x, like=None):
    """``x`` as a Tensor (a Python float takes ``like``'s floating dtype)."""
    if isinstance(x, Tensor):
        return x
    from .creation.factories import tensor
    return tensor(x, dtype=like.dtype if like is not None and isinstance(x, float) and like.is_floating_point() else None)


def dims_arg(name, x, dim):
    """``dim`` (an int, a sequence or None) as normalized axes of ``x``; torch's IndexError when out of range."""
    if name != "squeeze" and isinstance(dim, (tuple, list)) and len(dim) == 0:
        dim = None      # torch: a reduction over dim=() / [] reduces every dim (squeeze(dim=()) squeezes none)
    nd = x._data.ndim if type(x) is Tensor else x.ndim     # (the payload's: no property frame for a plain tensor)
    try:
        axes = normalize_axes(name, dim, nd)
    except OpError as e:
        raise IndexError(str(e)) from None
    return axes if nd else ()    # a 0-d tensor takes dim 0 / -1 (torch), and has no axis to reduce


def dim_arg(name, x, dim):
    """``dim`` as a normalized axis of ``x``; torch's IndexError when out of range."""
    try:
        return normalize_axis(name, dim, x._data.ndim if type(x) is Tensor else x.ndim)
    except OpError as e:
        raise IndexError(str(e)) from None


def wrap_dim(dim, nd) -> int:
    """``dim`` as an axis of ``nd`` dims with torch's own IndexError text (no function name; 0 dims take -1 and 0,
    as torch's ``maybe_wrap_dim``)."""
    lo, hi = (-nd, nd - 1) if nd else (-1, 0)
    if not lo <= dim <= hi:
        raise IndexError(f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim + nd if dim < 0 else dim


def torch_dim(x, dim) -> int:
    """``dim`` as an axis of ``x`` (:func:`wrap_dim` of ``x.ndim``)."""
    return wrap_dim(dim, x.ndim)


def diagonal_dims(dim1, dim2, nd):
    """The two distinct axes of a diagonal's plane among ``nd`` dims (``diagonal``, ``diag_embed``), with torch's
    errors."""
    a, b = wrap_dim(dim1, nd), wrap_dim(dim2, nd)
    if a == b:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return a, b


def fresh_result(result, input, name):
    """Name ``result``'s node as torch does (see grad_names.py), if this call made one (``reshape`` to the same
    shape returns its input)."""
    if result is not input:
        gf = getattr(result, "grad_fn", None)       # (grad_names.named, inline: once per reduction)
        if gf is not None:
            gf.torch_name = name
    return result


__all__ = ["tensor_arg", "dims_arg", "dim_arg", "torch_dim", "fresh_result"]
