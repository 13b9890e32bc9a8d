"""Order along a dim: ``flip``, ``cumsum``, ``cumprod``, ``sort``, ``argsort``, ``topk`` (functions and Tensor methods).

Sorted values are ``gather(x, dim, argsort(x))``: the gradient is the gather's, so only the index computation
(the ``argsort`` primitive, no gradient) is new.  ``cumsum`` and ``cumprod`` are primitives with a native scan kernel.
"""
from __future__ import annotations

import collections

from ...declarations import published
from ...ir.ops import OPS as O
from ...runtime.dispatch import bind
from ..elementary import _axes, _axis, gather
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

sort_result = collections.namedtuple("sort", ["values", "indices"])
topk_result = collections.namedtuple("topk", ["values", "indices"])
sort_result.__doc__ = "``(values, indices)`` of ``sort``, like torch.return_types.sort."
topk_result.__doc__ = "``(values, indices)`` of ``topk``, like torch.return_types.topk."


def _dims_arg(dims):
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        return tuple(dims[0])
    return tuple(dims)


@published("jitgrad", "Tensor")
def flip(input, *dims, **torch_kw):
    """Reverse the order of elements along ``dims`` (a copy, as in torch): ``flip(x, (0, 1))``, ``x.flip(0)``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(flip, 'flip', (input, *dims), {}, torch_kw)
    dims = _dims_arg(dims)
    axes = _axes("flip", input, dims) if dims else ()
    if input.ndim == 0 or not axes:
        return named(input.clone(), "FlipBackward0")
    return named(bind(O["flip"], input, axes=axes).clone(), "FlipBackward0")


@published("jitgrad", "Tensor")
def fliplr(input, **torch_kw):
    """Flip a tensor of at least 2 dims left-right (dim 1)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(fliplr, 'fliplr', (input,), {}, torch_kw)
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, 1)


@published("jitgrad", "Tensor")
def flipud(input, **torch_kw):
    """Flip a tensor of at least 1 dim up-down (dim 0)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(flipud, 'flipud', (input,), {}, torch_kw)
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, 0)


@published("jitgrad", "Tensor")
def cumsum(input, dim, *, dtype=None, **torch_kw):
    """Cumulative sum along ``dim``; integer and bool inputs give int64 (torch's rule)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cumsum, 'cumsum', (input, dim), {"dtype": dtype}, torch_kw)
    if dtype is not None:
        input = input.to(dtype)
    ax = _axis("cumsum", input, dim)
    return bind(O["cumsum"], input, axis=ax, reverse=False)


@published("jitgrad", "Tensor")
def cumprod(input, dim, *, dtype=None, **torch_kw):
    """Cumulative product along ``dim``; differentiable (exactly, also where ``input`` has zeros)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cumprod, 'cumprod', (input, dim), {"dtype": dtype}, torch_kw)
    if dtype is not None:
        input = input.to(dtype)
    ax = _axis("cumprod", input, dim)
    return bind(O["cumprod"], input, axis=ax)


@published("jitgrad", "Tensor")
def argsort(input, dim=-1, descending=False, stable=False, **torch_kw):
    """Indices that sort ``input`` along ``dim`` (always stable here; NaN sorts as the largest value)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(argsort, 'argsort', (input, dim, descending, stable), {}, torch_kw)
    ax = _axis("argsort", input, dim)
    return bind(O["argsort"], input, axis=ax, descending=bool(descending), stable=True)


@published("jitgrad", "Tensor")
def sort(input, dim=-1, descending=False, stable=False, **torch_kw):
    """``(values, indices)`` sorted along ``dim``; stable (equal elements keep their order); differentiable."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(sort, 'sort', (input, dim, descending, stable), {}, torch_kw)
    if input.ndim == 0:
        return sort_result(named(input.clone(), "SortBackward0"), Tensor._make(_zero_index()))
    ax = _axis("sort", input, dim)
    idx = argsort(input, ax, descending)
    return sort_result(named(gather(input, ax, idx), "SortBackward0"), idx)


median_result = collections.namedtuple("median", ["values", "indices"])
median_result.__doc__ = "``(values, indices)`` of ``median(x, dim)``, like torch.return_types.median."


def _lower_median_value(flat, skip_nan):
    """The lower median of a 1-d NumPy array (NaN when it holds one, unless ``skip_nan``)."""
    import numpy as np
    if skip_nan:
        flat = flat[~np.isnan(flat)]
    elif np.isnan(flat).any():
        return np.nan
    if flat.size == 0:
        return np.nan
    return np.sort(flat, kind="stable")[(flat.size - 1) // 2]


def _evenly_at(input, m):
    """``m`` (a number) as a 0-d result whose gradient goes evenly to the elements equal to it (all NaNs when
    ``m`` is NaN), as torch's median/max/min backward without a dim."""
    import math
    mask = (input != input) if math.isnan(m) else (input == m)
    count = float(mask._data.sum())
    # the elements equal to m, summed and divided by their count, are m; each gets 1/count of the gradient
    return input.where(mask, 0.0).sum() / max(count, 1.0)


@published("jitgrad", "Tensor")
def median(input, dim=None, keepdim=False, **torch_kw):
    """The lower median of all elements (a 0-d tensor; NaN if any is NaN), or ``(values, indices)`` along
    ``dim``.  Without a dim the gradient is shared evenly by the elements equal to the median (torch's rule)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(median, 'median', (input, dim, keepdim), {}, torch_kw)
    return _median("median", input, dim, keepdim, skip_nan=False)


@published("jitgrad", "Tensor")
def nanmedian(input, dim=None, keepdim=False, **torch_kw):
    """``median`` ignoring NaNs (NaN only when every element is NaN)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(nanmedian, 'nanmedian', (input, dim, keepdim), {}, torch_kw)
    return _median("nanmedian", input, dim, keepdim, skip_nan=True)


def _median(name, input, dim, keepdim, skip_nan):
    import numpy as np
    from ...runtime.traced import is_traced, traced_read
    if is_traced(input):
        traced_read(input, f"{name}()")         # data-dependent selection: not traceable yet
    if dim is None:
        m = _lower_median_value(np.asarray(input._host(), dtype=np.float64).ravel(), skip_nan)
        r = _evenly_at(input, m) if input.is_floating_point() else Tensor._make(np.asarray(m, input._data.dtype))
        return named(r, "MedianBackward0" if name == "median" else "NanmedianBackward0")
    if skip_nan:
        from ..torch_kwargs import UnsupportedError
        raise UnsupportedError("jitgrad does not support nanmedian(dim=...) yet")
    ax = _axis(name, input, dim)
    n = input.shape[ax]
    if n == 0:
        raise IndexError(f"{name}(): Expected reduction dim {ax} to have non-zero size.")
    idx = argsort(input, ax)                    # NaN sorts last, as NumPy: a row with NaN gives NaN below
    k = (n - 1) // 2
    pick = idx.narrow(ax, k, 1)
    host = input._host()
    nan_rows = np.isnan(host).any(axis=ax, keepdims=True) if input.is_floating_point() else None
    if nan_rows is not None and nan_rows.any():  # torch: the median of a row holding NaN is (the first) NaN
        first_nan = np.argmax(np.isnan(host), axis=ax)
        pick_np = np.where(nan_rows, np.expand_dims(first_nan, ax), pick._data)
        pick = Tensor._make(pick_np.astype(np.int64))
    values = gather(input, ax, pick)
    if not keepdim:
        values, pick = values.squeeze(ax), pick.squeeze(ax)
    return median_result(named(values, "MedianBackward1"), pick)


@published("jitgrad", "Tensor")
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


@published("jitgrad", "Tensor")
def msort(input, **torch_kw):
    """``sort(input, dim=0).values``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(msort, 'msort', (input,), {}, torch_kw)
    return sort(input, 0).values


def _zero_index():
    import numpy as np
    return np.zeros((), np.int64)


__all__ = ["flip", "fliplr", "flipud", "cumsum", "cumprod", "argsort", "sort", "topk", "msort", "median", "nanmedian"]
