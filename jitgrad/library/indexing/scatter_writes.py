"""Writing values into a copy of a tensor: ``scatter`` / ``scatter_`` (a ``src`` tensor or a scalar ``value``,
torch's deprecated ``reduce="add" | "multiply"``), and the ``*_scatter`` functions that write ``src`` where a view
would read (``select_scatter``, ``slice_scatter``, ``diagonal_scatter``, ``as_strided_scatter``).

All bind the ``index_put`` primitive (``ir/ops/index.py``, non-accumulating), so the gradients are its own and
torch's: the gradient to ``input`` is the incoming one with the written positions zeroed, the gradient to ``src``
the incoming one read at those positions (a gather).  The ``*_scatter`` functions find the positions by applying
the view to the flat positions of ``input`` (a constant), so any view they name reads back exactly ``src``.
``scatter`` with ``reduce=`` reuses ``scatter_add`` and the ``scatter_reduce`` primitive and, as torch, has no
derivative (backward raises torch's RuntimeError).

>>> import jitgrad as jg
>>> jg.zeros(2, 3).scatter(1, jg.tensor([[2], [0]]), 1.0)
tensor([[0., 0., 1.],
        [1., 0., 0.]])
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from ...declarations import published
from ...ir.ops import OPS as O
from ..dim_args import torch_dim
from ...runtime.dispatch import bind
from ..elementary import _axis
from ...runtime.grad_names import named
from ..creation.legacy_types import is_warn_always_enabled
from .masking import oversized_index_dim, scatter_add
from .scatter_reduce import _reduce
from ..shaping.views import index_grid
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from ...runtime.checked_index import IN_DIM, grid_checked
from ..shaping.views import index_grid

_REDUCE_DEPRECATED = ("The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in a "
                      "future PyTorch release. Use torch.scatter_reduce instead for more reduction options.")


_WARNED = [False]


def _check_scatter(input, ax, index, src):
    if not isinstance(index, Tensor) or index.dtype.name not in ("int64", "int32"):
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if isinstance(src, Tensor) and src.dtype is not input.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
    if index.ndim != input.ndim or (isinstance(src, Tensor) and src.ndim != input.ndim):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if isinstance(src, Tensor) and oversized_index_dim(input, ax, index, src) is not None:
        raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self {list(input.shape)} "
                           f"apart from dimension {ax} and to be no larger size than src {list(src.shape)}")
    if not isinstance(src, Tensor):
        for i in range(index.ndim):
            if i != ax and index.shape[i] > input.shape[i]:
                raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than self "
                                   f"{list(input.shape)} apart from dimension {ax}")
    d, size = index._data, input.shape[ax] if input.ndim else 1
    if index.numel() and type(d) is np.ndarray and (d.min() < 0 or d.max() >= size):
        out = (d < 0) | (d >= size)
        bad = int(d.reshape(-1)[np.argmax(out.reshape(-1))])      # the first, in torch's order
        raise RuntimeError(f"index {bad} is out of bounds for dimension {ax} with size {size}")


@published("jitgrad", "Tensor")
def scatter(input, dim, index, src=None, value=None, *, reduce=None, _inplace=False, **torch_kw):
    """``out = input.clone(); out[index[i][j]][j] = src[i][j]`` (dim=0; ``src`` a tensor cut to ``index``'s
    shape, or a number ``value`` written everywhere ``index`` points), as torch.scatter.  ``reduce="add"`` or
    ``"multiply"`` combines instead of writing (deprecated in torch for a tensor ``src``, with its warning; no
    gradient).  Where ``index`` repeats a position, the last write wins (torch's CPU order)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(scatter, "scatter", (input, dim, index, src), {"value": value, "reduce": reduce},
                            torch_kw)
    if src is None:
        src = value
    if not isinstance(src, (Tensor, numbers.Number)) or isinstance(src, complex):
        raise TypeError(f"scatter() received an invalid combination of arguments - got (Tensor, int, Tensor, "
                        f"{type(src).__name__})")
    if reduce is not None and isinstance(src, Tensor) and (not _WARNED[0] or is_warn_always_enabled()):
        _WARNED[0] = True       # torch's TORCH_WARN_ONCE: once a process (unless set_warn_always(True))
        warnings.warn(_REDUCE_DEPRECATED, UserWarning, stacklevel=5 if _inplace else 2)
    if not isinstance(input, Tensor):
        raise TypeError(f"scatter(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    ax = torch_dim(input, dim)
    _check_scatter(input, ax, index, src)
    if reduce is not None and reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")
    if input.ndim == 0:
        return scatter(input.reshape(1), 0, index.reshape(1), src.reshape(1) if isinstance(src, Tensor) else src,
                       reduce=reduce, _inplace=True).reshape(())
    if index.dtype.name != "int64":
        index = index.long()
    if isinstance(src, Tensor):
        name = "ScatterBackward0"
        if tuple(src.shape) != tuple(index.shape):
            src = src[tuple(slice(0, n) for n in index.shape)]
    else:
        name = "ScatterBackward1"
        src = input.new_full(tuple(index.shape), src)
    if index.numel() == 0:
        return input.clone()
    if reduce is None:
        key, oob = grid_checked(input, index_grid(index, ax), ax, IN_DIM)     # torch refuses negative indices
        spec = tuple(("tensor", k) for k in range(len(key)))
        if oob is not None:
            return named(bind(O["index_put"], input, src, *key, spec=spec, accumulate=False, oob=oob), name)
        return named(bind(O["index_put"], input, src, *key, spec=spec, accumulate=False), name)
    r = scatter_add(input, ax, index, src) if reduce == "add" else _reduce(input, ax, index, src, "prod", True)
    if r.requires_grad:
        r = bind(O["delayed_error"], r, msg="derivative for aten::scatter is not implemented")
    return r


@published("Tensor", name="scatter_")
def _scatter_(self, dim, index, src=None, value=None, *, reduce=None):
    """In place: writes ``scatter(self, dim, index, src, reduce=reduce)`` into ``self`` and returns it."""
    if src is None:
        src = value
    if isinstance(src, Tensor):
        return self._apply_inplace(lambda s, v: scatter(s, dim, index, v, reduce=reduce, _inplace=True), src)
    return self._apply_inplace(lambda s: scatter(s, dim, index, src, reduce=reduce, _inplace=True))


# ---- the *_scatter functions: src written where a view of input reads ------------------------------------
def _write_view(input, src, view, np_view, name, grad_name):
    """``input`` with ``src`` written where ``view(input)`` reads: ``view`` applied to ``input`` checks the
    arguments (torch's errors); ``np_view``, the same view in NumPy, applied to ``input``'s flat positions finds
    where to write."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if not isinstance(src, Tensor):
        raise TypeError(f"{name}(): argument 'src' (position 2) must be Tensor, not {type(src).__name__}")
    shape = tuple(view(input).shape)
    if tuple(src.shape) != shape:
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(shape)}")
    flat_pos = np.ascontiguousarray(np_view(np.arange(input.numel(), dtype=np.int64).reshape(tuple(input.shape))))
    flat_pos = flat_pos.reshape(-1)
    if src.dtype is not input.dtype:
        src = src.to(input.dtype)
    if flat_pos.size == 0:
        return named(input.clone(), grad_name)
    key = input._same_device(Tensor._make(flat_pos))
    r = bind(O["index_put"], input.reshape(-1), src.reshape(-1), key, spec=(("tensor", 0),), accumulate=False)
    return named(r.reshape(tuple(input.shape)), grad_name)


@published("jitgrad", "Tensor")
def select_scatter(input, src, dim, index, **torch_kw):
    """``input`` with ``src`` written at ``input.select(dim, index)`` (differentiable in both)."""
    if torch_kw:
        return torch_kwargs(select_scatter, "select_scatter", (input, src, dim, index), {}, torch_kw)
    return _write_view(input, src, lambda t: t.select(dim, index),
                       lambda a: np.take(a, index, _axis("select_scatter", input, dim)), "select_scatter",
                       "SelectScatterBackward0")


@published("jitgrad", "Tensor")
def slice_scatter(input, src, dim=0, start=None, end=None, step=1, **torch_kw):
    """``input`` with ``src`` written at ``input[start:end:step]`` along ``dim``."""
    if torch_kw:
        return torch_kwargs(slice_scatter, "slice_scatter", (input, src, dim, start, end, step), {}, torch_kw)

    def view(t):
        ax = _axis("slice_scatter", input, dim)
        return t[(slice(None),) * ax + (slice(start, end, step),)]
    return _write_view(input, src, view, view, "slice_scatter", "SliceScatterBackward0")


@published("jitgrad", "Tensor")
def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1, **torch_kw):
    """``input`` with ``src`` written on ``input.diagonal(offset, dim1, dim2)``."""
    if torch_kw:
        return torch_kwargs(diagonal_scatter, "diagonal_scatter", (input, src, offset, dim1, dim2), {}, torch_kw)
    return _write_view(input, src, lambda t: t.diagonal(offset, dim1, dim2),
                       lambda a: np.diagonal(a, offset, _axis("diagonal_scatter", input, dim1),
                                             _axis("diagonal_scatter", input, dim2)),
                       "diagonal_scatter", "DiagonalScatterBackward0")


@published("jitgrad", "Tensor")
def as_strided_scatter(input, src, size, stride, storage_offset=None, **torch_kw):
    """``input`` with ``src`` written where ``input.as_strided(size, stride, storage_offset)`` reads (positions
    in ``input``'s contiguous layout)."""
    if torch_kw:
        return torch_kwargs(as_strided_scatter, "as_strided_scatter", (input, src, size, stride, storage_offset),
                            {}, torch_kw)

    size, stride, off = tuple(int(n) for n in size), tuple(int(n) for n in stride), int(storage_offset or 0)
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    idx = np.full(size, off, dtype=np.int64)
    for k, (n, st) in enumerate(zip(size, stride)):
        idx = idx + np.arange(n, dtype=np.int64).reshape([-1 if i == k else 1 for i in range(len(size))]) * st
    need = int(idx.max()) + 1 if idx.size else 0
    if need > input.numel():
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {off}, and "
                           f"itemsize {input.element_size()} requiring a storage size of {need * input.element_size()} "
                           f"are out of bounds for storage of size {input.numel() * input.element_size()}")
    return _write_view(input, src, lambda t: idx, lambda a: idx, "as_strided_scatter", "AsStridedScatterBackward0")


__all__ = ["scatter", "select_scatter", "slice_scatter", "diagonal_scatter", "as_strided_scatter"]
