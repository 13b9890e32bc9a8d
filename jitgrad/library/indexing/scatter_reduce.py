"""Scattering reductions: ``scatter_reduce`` / ``scatter_reduce_`` and ``index_reduce`` / ``index_reduce_``
(functions and Tensor methods), as torch.

"prod", "amax" and "amin" bind the ``scatter_reduce`` primitive (``ir/ops/scatter.py``, which also holds the
gradient); "sum" and "mean" are compositions of ``scatter_add`` (an accumulating ``index_put``, which compiles to
the native scatter kernel), so their gradients follow.  ``index_reduce(dim, index, source)`` is ``scatter_reduce``
with the 1-d ``index`` repeated along every other dim of ``source``.  The in-place forms go through
``_apply_inplace`` (version bump, leaf and view checks, history rebased onto the op's node).
"""
from __future__ import annotations

import warnings

import numpy as np

from ...declarations import published
from ...ir.ops import OPS as O
from ...runtime.dispatch import bind
from ..elementary import _axis
from ...runtime.grad_names import named
from .masking import _scatter_key, oversized_index_dim, scatter_add
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

_ALIASES = {"max": "amax", "min": "amin"}       # torch accepts these spellings too


def _check_index(name, input, ax, index, src):
    """torch's checks on (self, dim, index, src), with its messages."""
    if not isinstance(index, Tensor) or index.dtype.name not in ("int64", "int32"):
        got = index.dtype.name if isinstance(index, Tensor) else type(index).__name__
        raise RuntimeError(f"scatter(): Expected dtype int32/int64 for index, got {got} ({name})")
    if not isinstance(src, Tensor):
        raise TypeError(f"{name}(): argument 'src' must be Tensor, not {type(src).__name__}")
    if src.dtype is not input.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype (self {input.dtype.name}, src "
                           f"{src.dtype.name})")
    if oversized_index_dim(input, ax, index, src) is not None:
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self {list(input.shape)} "
                           f"apart from dimension {ax} and to be no larger size than src {list(src.shape)}")
    d, size = index._data, input.shape[ax] if input.ndim else 1
    if index.numel() and type(d) is np.ndarray and (d.min() < 0 or d.max() >= size):
        bad = int(d.max() if d.max() >= size else d.min())
        raise RuntimeError(f"index {bad} is out of bounds for dimension {ax} with size {size}")


def _reduce(input, ax, index, src, reduce, include_self, api="scatter_reduce"):
    """The reduction itself, once the arguments are checked; ``index`` int64 and ``src`` cut to its shape."""
    if index.numel() == 0:
        return input.clone()
    if reduce in ("sum", "mean"):
        hits = scatter_add(input.new_zeros(tuple(input.shape)), ax, index, src.new_ones(tuple(index.shape)))
        # include_self=False: the targets start from 0 (a where, so an inf there does not become nan)
        base = input if include_self else input.where(hits == 0, 0)
        total = scatter_add(base, ax, index, src)
        if reduce == "sum":
            return total
        count = hits + 1 if include_self else hits.where(hits > 0, 1)
        return total / count if input.is_floating_point() else total // count     # torch floors integer means
    _, key = _scatter_key(input, ax, index)
    return bind(O["scatter_reduce"], input, src, *key, reduce=reduce, include_self=bool(include_self), api=api)


def _check_reduce(reduce):
    reduce = _ALIASES.get(reduce, reduce)
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    return reduce


def _scatter_reduce(input, dim, index, src, reduce, include_self):
    reduce = _check_reduce(reduce)
    ax = _axis("scatter_reduce", input, dim)
    _check_index("scatter_reduce", input, ax, index, src)
    if index.dtype.name != "int64":
        index = index.long()
    if src.shape != index.shape:
        src = src[tuple(slice(0, n) for n in index.shape)]
    if input.ndim == 0:             # a 0-d self, index and src: one position
        return _reduce(input.reshape(1), 0, index.reshape(1), src.reshape(1), reduce, include_self).reshape(())
    return _reduce(input, ax, index, src, reduce, include_self)


@published("jitgrad", "Tensor")
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True, **torch_kw):
    """Each element of ``src`` reduced into ``input`` at its ``index`` along ``dim`` (as torch.scatter_reduce):
    ``reduce`` is "sum", "prod", "mean", "amax" or "amin"; ``include_self=False`` leaves the targets' own values
    out (a target no element reaches keeps its value).  Differentiable in ``input`` and ``src`` (amax/amin split
    the gradient evenly among ties, as torch)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(scatter_reduce, 'scatter_reduce', (input, dim, index, src, reduce),
                            {"include_self": include_self}, torch_kw)
    return named(_scatter_reduce(input, dim, index, src, reduce, include_self), "ScatterReduceBackward0")


@published("Tensor", name="scatter_reduce_")
def _scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
    """In place: writes ``scatter_reduce(self, ...)`` into ``self`` and returns it."""
    return self._apply_inplace(lambda s, v: scatter_reduce(s, dim, index, v, reduce, include_self=include_self), src)


_BETA_WARNED = False


@published("jitgrad", "Tensor")
def index_reduce(input, dim, index, source, reduce, *, include_self=True, **torch_kw):
    """``source``'s slices along ``dim`` reduced into ``input`` at the positions the 1-d ``index`` names (as
    torch.index_reduce): ``reduce`` is "prod", "mean", "amax" or "amin"; ``include_self=False`` leaves the targets'
    own values out.  Differentiable in ``input`` and ``source``."""
    global _BETA_WARNED
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(index_reduce, 'index_reduce', (input, dim, index, source, reduce),
                            {"include_self": include_self}, torch_kw)
    if not _BETA_WARNED:        # torch warns once per process
        _BETA_WARNED = True
        warnings.warn("index_reduce() is in beta and the API may change at any time.", UserWarning, stacklevel=2)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    ax = _axis("index_reduce", input, dim)
    if not isinstance(index, Tensor) or index.dtype.name not in ("int64", "int32"):
        got = index.dtype.name if isinstance(index, Tensor) else type(index).__name__
        raise RuntimeError(f"index_reduce_(): Expected dtype int32/int64 for index but got: {got}")
    if index.ndim > 1:
        raise IndexError(f"index_reduce_(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
                         f"{index.dtype.name} and size: {list(index.shape)}")
    if source.dtype is not input.dtype:
        raise RuntimeError(f"index_reduce_(): self ({input.dtype.name}) and source ({source.dtype.name}) must have "
                           f"the same scalar type")
    n = index.numel()
    if input.ndim and source.ndim and n != source.shape[ax]:
        raise RuntimeError(f"index_reduce_(): Number of indices ({n}) should be equal to source.size(dim): "
                           f"({source.shape[ax]}), for dim: {ax}")
    if source.ndim != input.ndim or any(a != b for i, (a, b) in enumerate(zip(source.shape, input.shape)) if i != ax):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(input.shape)} source.shape = {list(source.shape)}")
    d = index._data
    if n and type(d) is np.ndarray and (d.min() < 0 or d.max() >= (input.shape[ax] if input.ndim else 1)):
        raise IndexError("index out of range in self")
    if input.ndim == 0:             # a 0-d self: one position, 0
        return named(_reduce(input.reshape(1), 0, index.long().reshape(1), source.reshape(1), reduce,
                             include_self, "index_reduce").reshape(()), "IndexReduceBackward0")
    shape = [1] * input.ndim
    shape[ax] = n
    idx = index.long().reshape(shape).expand(tuple(source.shape))
    return named(_reduce(input, ax, idx, source, reduce, include_self, "index_reduce"), "IndexReduceBackward0")


@published("Tensor", name="index_reduce_")
def _index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    """In place: writes ``index_reduce(self, ...)`` into ``self`` and returns it."""
    return self._apply_inplace(lambda s, v: index_reduce(s, dim, index, v, reduce, include_self=include_self),
                               source)


__all__ = ["scatter_reduce", "index_reduce"]
