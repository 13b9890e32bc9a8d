"""Counting and truth reductions: ``all``, ``any``, ``histc``, ``histogram``, ``bincount``.

``all``/``any`` are sums of a comparison (so they compile as fused reductions).  ``histc`` is a primitive with no
gradient that runs as a Python step in compiled code; ``histogram`` adds torch's ``bin_edges``.  ``bincount``'s
length depends on the data, so it is eager-only (inside ``@jg.compile`` it raises the usual traced-value error).
"""
from __future__ import annotations

import collections

import numpy as np

from ...declarations import published
from ...ir.ops import OPS as O
from ..dim_args import torch_dim
from ...runtime.dispatch import bind
from ..elementary import amax, amin, sum
from ...runtime.tensor import Tensor
from ...runtime.traced import is_traced, traced_read
from ..torch_kwargs import torch_kwargs

histogram_result = collections.namedtuple("histogram", ["hist", "bin_edges"])
histogram_result.__doc__ = "``(hist, bin_edges)`` of ``histogram``, like torch.return_types.histogram."


@published("jitgrad", "Tensor")
def all(input, dim=None, keepdim=False, **torch_kw):
    """True where every element (over ``dim``, an int or tuple; default all) is nonzero."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(all, 'all', (input, dim, keepdim), {}, torch_kw)
    return sum(input == 0, dim, keepdim) == 0


@published("jitgrad", "Tensor")
def any(input, dim=None, keepdim=False, **torch_kw):
    """True where some element (over ``dim``, an int or tuple; default all) is nonzero."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(any, 'any', (input, dim, keepdim), {}, torch_kw)
    return sum(input != 0, dim, keepdim) > 0


@published("jitgrad", "Tensor")
def histc(input, bins=100, min=0, max=0, **torch_kw):
    """Counts of ``input``'s elements in ``bins`` equal bins over [min, max] (the data's range when both are 0,
    widened by 1 each side when the data is constant); elements outside and NaN are ignored."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(histc, 'histc', (input, bins, min, max), {}, torch_kw)
    return bind(O["histc"], input, bins=int(bins), lo=float(min), hi=float(max), pad=1.0, search=False)


@published("jitgrad", "Tensor")
def histogram(input, bins=100, *, range=None, weight=None, density=False, **torch_kw):
    """``(hist, bin_edges)``: ``bins`` equal bins over ``range`` (default the data's min and max) or the given
    edges (a 1-d tensor); ``weight`` sums weights instead of counting; ``density`` normalises to a density."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(histogram, 'histogram', (input, bins), {"range": range, "weight": weight, "density": density}, torch_kw)
    if isinstance(bins, Tensor):
        return _histogram_edges(input, bins, weight, density)
    bins = int(bins)
    lo, hi = (0.0, 0.0) if range is None else (float(range[0]), float(range[1]))
    ws = () if weight is None else (weight,)
    hist = bind(O["histc"], input, *ws, bins=bins, lo=lo, hi=hi, pad=0.5, search=True)
    steps = Tensor._make(np.arange(bins + 1, dtype=input.dtype.np) / input.dtype.np.type(bins))
    if range is not None and lo != hi:
        edges = Tensor._make((lo + (hi - lo) * steps._data).astype(input.dtype.np))
    else:       # the data's range (torch: min - 0.5, max + 0.5 when the data is constant)
        x = input.detach()
        fin = x.where(x.isfinite(), 0.0)
        lo_t, hi_t = amin(fin), amax(fin)
        same = (lo_t == hi_t).to(input.dtype) * 0.5
        lo_t, hi_t = lo_t - same, hi_t + same
        edges = lo_t + (hi_t - lo_t) * steps
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return histogram_result(hist, edges)


def _histogram_edges(input, edges, weight, density):
    for t in (input, edges) + (() if weight is None else (weight,)):
        if is_traced(t):
            traced_read(t, "histogram() with tensor bins")
    if edges.ndim != 1 or edges.numel() < 2:
        raise RuntimeError(f"histogram(): bins tensor should have one dimension and at least 2 elements, but got "
                           f"shape {list(edges.shape)}")
    w = None if weight is None else weight._data.reshape(-1)
    h, e = np.histogram(input._data.reshape(-1), bins=edges._data, weights=w, density=bool(density))
    return histogram_result(Tensor._make(h.astype(input.dtype.np)), Tensor._make(edges._data.copy()))


@published("jitgrad", "Tensor")
def bincount(input, weights=None, minlength=0, **torch_kw):
    """Counts of each value in a 1-d tensor of non-negative integers (or the summed ``weights``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(bincount, 'bincount', (input, weights, minlength), {}, torch_kw)
    for t in (input,) + (() if weights is None else (weights,)):
        if is_traced(t):
            traced_read(t, "bincount() (its length depends on the data)")
    a = input._data
    if a.ndim != 1 or a.dtype.kind not in "iu" or (a.size and a.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and weights.shape != input.shape:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    w = None if weights is None else weights._data
    out = np.bincount(a, weights=w, minlength=int(minlength))
    if weights is None:
        return Tensor._make(out.astype(np.int64))
    want = weights.dtype.np if weights.is_floating_point() else np.float64
    return Tensor._make(out.astype(want))


@published("jitgrad", "Tensor")
def count_nonzero(input, dim=None):
    """The number of nonzero elements of ``input``, over all dims or over ``dim`` (an int or a sequence of dims),
    as int64.

    >>> import jitgrad as jg
    >>> jg.count_nonzero(jg.tensor([[0, 1], [2, 3]]), dim=0)
    tensor([1, 2])
    """
    if dim is not None:
        axes = [torch_dim(input, d) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))]
        for i, a in enumerate(axes):
            if a in axes[:i]:
                raise RuntimeError(f"dim {a} appears multiple times in the list of dims")
        dim = tuple(axes) if input.ndim else None
    return sum(input != 0, dim)


__all__ = ["all", "any", "histc", "histogram", "bincount", "count_nonzero"]
