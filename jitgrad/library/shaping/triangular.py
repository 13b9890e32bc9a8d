"""Triangles and diagonals: ``tril``, ``triu`` (and their in-place forms) and ``diagonal``, as torch has them.

Each is a composition of primitives over a constant index pattern (a boolean triangle built with NumPy, or the
row/column indices of a diagonal), so it runs eagerly, traces into a compiled graph (the pattern is a literal),
runs on a device, and differentiates to any order through ``where`` and indexing; the result carries torch's
grad_fn name.  ``diagonal`` is a primitive of its own (``ir/ops/diagonal.py``): a view, as in torch.
"""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir.ops import OPS as O
from ..dim_args import diagonal_dims
from ...runtime.dispatch import bind
from ..elementary import where
from ...runtime.grad_names import named
from ...runtime.symbolic_values import arange as symbolic_arange, symbolic_size
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs

_TRIANGLES: dict = {}     # (rows, cols, diagonal, lower) -> read-only boolean mask


def _triangle(m: int, n: int, k: int, lower: bool) -> Tensor:
    if symbolic_size((m, n)):       # a trace's symbolic sizes: the pattern is computed, not a constant
        d = symbolic_arange(n).reshape(1, n) - symbolic_arange(m).reshape(m, 1)
        return d <= k if lower else d >= k
    key = (m, n, k, lower)
    t = _TRIANGLES.get(key)
    if t is None:
        mask = np.tri(m, n, k, dtype=bool) if lower else ~np.tri(m, n, k - 1, dtype=bool)
        mask.flags.writeable = False
        if len(_TRIANGLES) > 256:
            _TRIANGLES.clear()
        t = _TRIANGLES[key] = Tensor._make(mask)
    return t


def _keep(name, input, diagonal, lower):
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    mask = input._same_device(_triangle(input.shape[-2], input.shape[-1], int(diagonal), lower))
    zero = False if input.dtype.name == "bool" else 0
    r = where(mask, input, zero)
    if r.dtype is not input.dtype:
        r = r.to(input.dtype)
    return named(r, "TrilBackward0" if lower else "TriuBackward0")


@published("jitgrad", "Tensor")
def tril(input, diagonal=0, **torch_kw):
    """The lower triangle of the last two dims (elements at column - row <= ``diagonal``), the rest 0."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(tril, "tril", (input, diagonal), {}, torch_kw)
    return _keep("tril", input, diagonal, True)


@published("jitgrad", "Tensor")
def triu(input, diagonal=0, **torch_kw):
    """The upper triangle of the last two dims (elements at column - row >= ``diagonal``), the rest 0."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(triu, "triu", (input, diagonal), {}, torch_kw)
    return _keep("triu", input, diagonal, False)


@published("Tensor", name="tril_")
def _tril_(self, diagonal=0):
    """In place: ``self.copy_(tril(self, diagonal))``."""
    return self.copy_(tril(self, diagonal))


@published("Tensor", name="triu_")
def _triu_(self, diagonal=0):
    """In place: ``self.copy_(triu(self, diagonal))``."""
    return self.copy_(triu(self, diagonal))


@published("jitgrad", "Tensor")
def diagonal(input, offset=0, dim1=0, dim2=1, **torch_kw):
    """The elements ``input[..., i, i + offset]`` of the plane (``dim1``, ``dim2``), as a new last dim."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(diagonal, "diagonal", (input, offset, dim1, dim2), {}, torch_kw)
    nd = input.ndim
    if nd < 2:
        raise RuntimeError(f"diagonal(): input must have at least 2 dimensions, but got {nd}")
    a, b = diagonal_dims(dim1, dim2, nd)
    return bind(O["diagonal"], input, offset=int(offset), dim1=a, dim2=b)


@published("jitgrad", "Tensor")
def trace(input, **torch_kw):
    """The sum of the main diagonal of a 2-d tensor (any shape: the shorter side's length of entries)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(trace, "trace", (input,), {}, torch_kw)
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return named(diagonal(input).sum(), "TraceBackward0")


def _triangle_indices(name, row, col, offset, dtype, device, lower):
    from ...ir import dtypes as dt
    from ..creation.factories import tensor
    dtype = dt.int64 if dtype is None else dt.as_dtype(dtype)
    if dtype not in (dt.int64, dt.int32):
        raise NotImplementedError(f"\"{name}\" not implemented for '{dt.torch_scalar_name(dtype)}'")
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    r, c = np.nonzero(_triangle(row, col, offset, lower)._data)
    return tensor(np.stack([r, c]).astype(dtype.np), device=device)


@published("jitgrad")
def tril_indices(row, col, offset=0, *, dtype=None, device=None, **torch_kw):
    """The (row, column) indices of the lower triangle of a ``row`` x ``col`` matrix (the diagonal ``offset``
    and below), as a 2 x N int64 tensor in row-major order.

    >>> import jitgrad as jg
    >>> jg.tril_indices(3, 3)
    tensor([[0, 1, 1, 2, 2, 2],
            [0, 0, 1, 0, 1, 2]])
    """
    if torch_kw:       # layout=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(tril_indices, "tril_indices", (row, col, offset), {"dtype": dtype, "device": device},
                            torch_kw)
    return _triangle_indices("tril_indices", row, col, offset, dtype, device, lower=True)


@published("jitgrad")
def triu_indices(row, col, offset=0, *, dtype=None, device=None, **torch_kw):
    """The (row, column) indices of the upper triangle of a ``row`` x ``col`` matrix (the diagonal ``offset``
    and above), as a 2 x N int64 tensor in row-major order.

    >>> import jitgrad as jg
    >>> jg.triu_indices(2, 3, 1)
    tensor([[0, 0, 1],
            [1, 2, 2]])
    """
    if torch_kw:       # layout=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(triu_indices, "triu_indices", (row, col, offset), {"dtype": dtype, "device": device},
                            torch_kw)
    return _triangle_indices("triu_indices", row, col, offset, dtype, device, lower=False)


__all__ = ["tril", "triu", "diagonal", "trace"]
