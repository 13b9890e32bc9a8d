"""Order along a dim: ``flip``, ``cumsum``, ``cumprod``, ``sort``, ``argsort``, ``topk`` (functions and Tensor methods).

Sorted values are ``gather(x, dim, argsort(x))``: the gradient is the gather's, so only the index computation
(the ``argsort`` primitive, no gradient) is new.  ``cumsum`` and ``cumprod`` are primitives with a native scan kernel.
"""
from __future__ import annotations

import collections

from ..ir.ops import OPS as O
from .dispatch import bind
from .functions import _axes, _axis, gather
from .grad_names import named
from .tensor import Tensor
from .torch_kwargs import torch_kwargs

sort_result = collections.namedtuple("sort", ["values", "indices"])
topk_result = collections.namedtuple("topk", ["values", "indices"])
sort_result.__doc__ = "``(values, indices)`` of ``sort``, like torch.return_types.sort."
topk_result.__doc__ = "``(values, indices)`` of ``topk``, like torch.return_types.topk."


def _dims_arg(dims):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        return tuple(dims[0])
    return tuple(dims)


def flip(input, *dims, **torch_kw):
    """Reverse the order of elements along ``dims`` (a copy, as in torch): ``flip(x, (0, 1))``, ``x.flip(0)``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(flip, 'flip', (input, *dims), {}, torch_kw)
    dims = _dims_arg(dims)
    axes = _axes("flip", input, dims) if dims else ()
    if input.ndim == 0 or not axes:
        return named(input.clone(), "FlipBackward0")
    return named(bind(O["flip"], input, axes=axes).clone(), "FlipBackward0")


def fliplr(input, **torch_kw):
    """Flip a tensor of at least 2 dims left-right (dim 1)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(fliplr, 'fliplr', (input,), {}, torch_kw)
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, 1)


def flipud(input, **torch_kw):
    """Flip a tensor of at least 1 dim up-down (dim 0)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(flipud, 'flipud', (input,), {}, torch_kw)
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, 0)


def cumsum(input, dim, *, dtype=None, **torch_kw):
    """Cumulative sum along ``dim``; integer and bool inputs give int64 (torch's rule)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cumsum, 'cumsum', (input, dim), {"dtype": dtype}, torch_kw)
    if dtype is not None:
        input = input.to(dtype)
    ax = _axis("cumsum", input, dim)
    return bind(O["cumsum"], input, axis=ax, reverse=False)


def cumprod(input, dim, *, dtype=None, **torch_kw):
    """Cumulative product along ``dim``; differentiable (exactly, also where ``input`` has zeros)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cumprod, 'cumprod', (input, dim), {"dtype": dtype}, torch_kw)
    if dtype is not None:
        input = input.to(dtype)
    ax = _axis("cumprod", input, dim)
    return bind(O["cumprod"], input, axis=ax)


def argsort(input, dim=-1, descending=False, stable=False, **torch_kw):
    """Indices that sort ``input`` along ``dim`` (always stable here; NaN sorts as the largest value)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(argsort, 'argsort', (input, dim, descending, stable), {}, torch_kw)
    ax = _axis("argsort", input, dim)
    return bind(O["argsort"], input, axis=ax, descending=bool(descending), stable=True)


def sort(input, dim=-1, descending=False, stable=False, **torch_kw):
    """``(values, indices)`` sorted along ``dim``; stable (equal elements keep their order); differentiable."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(sort, 'sort', (input, dim, descending, stable), {}, torch_kw)
    if input.ndim == 0:
        return sort_result(named(input.clone(), "SortBackward0"), Tensor._make(_zero_index()))
    ax = _axis("sort", input, dim)
    idx = argsort(input, ax, descending)
    return sort_result(named(gather(input, ax, idx), "SortBackward0"), idx)


def topk(input, k, dim=-1, largest=True, sorted=True, **torch_kw):
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, in sorted order."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(topk, 'topk', (input, k, dim, largest, sorted), {}, torch_kw)
    k = int(k)
    if input.ndim == 0:
        if k != 1:
            raise RuntimeError("selected index k out of range")
        return topk_result(named(input.clone(), "TopkBackward0"), Tensor._make(_zero_index()))
    ax = _axis("topk", input, dim)
    if not 0 <= k <= input.shape[ax]:
        raise RuntimeError(f"selected index k out of range (k={k}, dim {ax} of size {input.shape[ax]})")
    idx = argsort(input, ax, descending=largest)
    idx = idx[(slice(None),) * ax + (slice(0, k),)]
    return topk_result(named(gather(input, ax, idx), "TopkBackward0"), idx)


def msort(input, **torch_kw):
    """``sort(input, dim=0).values``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(msort, 'msort', (input,), {}, torch_kw)
    return sort(input, 0).values


def _zero_index():
    import numpy as np
    return np.zeros((), np.int64)


METHODS = ["flip", "fliplr", "flipud", "cumsum", "cumprod", "argsort", "sort", "topk", "msort"]
__all__ = METHODS
