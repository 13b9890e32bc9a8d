"""Rearranging elements along a dim: ``repeat_interleave``, ``roll``, ``diff``, ``meshgrid`` and ``unflatten``, as
torch has them.

Each is a composition of primitives (expand + reshape, index_select with a constant index, narrow + cat, sub), so
it runs eagerly, traces into a compiled graph and differentiates to any order; results carry torch's grad_fn names.

>>> import jitgrad as jg
>>> jg.tensor([1, 2, 3]).repeat_interleave(2)
tensor([1, 1, 2, 2, 3, 3])
>>> jg.roll(jg.arange(5), 2)
tensor([3, 4, 0, 1, 2])
"""
from __future__ import annotations

import operator
import warnings

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ..dim_args import torch_dim
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from ...runtime.traced import is_traced, traced_read


# ---- repeat_interleave -------------------------------------------------------------------------------------------

def _index_of_repeats(repeats: Tensor, output_size):
    """The index ``[0]*r0 + [1]*r1 + ...`` that ``repeat_interleave`` gathers with, as an int64 Tensor."""
    from ..creation.factories import arange, tensor
    if repeats.ndim != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (dt.int64, dt.int32):
        raise NotImplementedError(f'"repeat_interleave_cpu" not implemented for '
                                  f"'{dt.torch_scalar_name(repeats.dtype)}'")
    if is_traced(repeats):
        if output_size is None:
            # the output's length is the repeats' sum: a trace cannot know it without output_size=
            traced_read(repeats, "repeat_interleave() without output_size=")
        # traced repeats with a known total: output position p takes input row searchsorted(cumsum, p, right)
        from ..sorting.searching import searchsorted
        ends = repeats.to(dt.int64).cumsum(0)
        return searchsorted(ends, arange(int(output_size), dtype=dt.int64), right=True)
    r = repeats.cpu()._data.astype(np.int64, copy=False)
    if r.size and r.min() < 0:
        raise RuntimeError("repeats can not be negative")
    if output_size is not None and int(output_size) != int(r.sum()):
        raise RuntimeError("allocated size does not match required size")
    return tensor(np.repeat(np.arange(r.size, dtype=np.int64), r), device=repeats.device)


@published("jitgrad", "Tensor")
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None, **torch_kw):
    """Repeat each element of ``input`` ``repeats`` times along ``dim`` (the flattened input when ``dim`` is None).

    ``repeats`` is an int or a 0-d/1-d integer tensor (one count per slice of ``dim``, or one for all).  With only a
    tensor, ``repeat_interleave(repeats)`` gives ``[0]*r0 + [1]*r1 + ...``.  Inside ``@jitgrad.compile`` a traced
    tensor of repeats needs ``output_size=`` (the total), as the result's length depends on its values.

    >>> import jitgrad as jg
    >>> jg.repeat_interleave(jg.tensor([[1, 2], [3, 4]]), jg.tensor([1, 2]), dim=0)
    tensor([[1, 2],
            [3, 4],
            [3, 4]])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(repeat_interleave, "repeat_interleave", (input, repeats, dim),
                            {"output_size": output_size}, torch_kw)
    if repeats is None:      # torch.repeat_interleave(repeats): the indices themselves
        if input.ndim > 1:
            raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
        return _index_of_repeats(input.reshape(-1), output_size)
    if dim is None:
        input, ax = input.reshape(-1), 0
    else:
        ax = torch_dim(input, dim)
    if isinstance(repeats, Tensor) and repeats.ndim == 0 or isinstance(repeats, Tensor) and repeats.shape == (1,):
        if repeats.dtype not in (dt.int64, dt.int32):
            raise NotImplementedError(f'"repeat_interleave_cpu" not implemented for '
                                      f"'{dt.torch_scalar_name(repeats.dtype)}'")
        if not is_traced(repeats):
            repeats = int(repeats.cpu()._data.reshape(()))     # a constant: no node reads it
            if repeats < 0:
                raise RuntimeError("repeats can not be negative")
        else:
            repeats = repeats.reshape(1).expand(input.shape[ax] if input.ndim else 1)
    if isinstance(repeats, Tensor):
        if repeats.ndim > 1:
            raise RuntimeError("repeats must be 0-dim or 1-dim tensor")
        n = input.shape[ax] if input.ndim else 1
        if repeats.shape[0] != n:
            raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                               f"{repeats.shape[0]} and input.size({ax}) = {n}")
        index = _index_of_repeats(repeats, output_size)
        return named(input.index_select(ax, index) if input.ndim else input.reshape(1)[index],
                     "IndexSelectBackward0")
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)):
        raise TypeError(f"repeat_interleave() received an invalid combination of arguments - got "
                        f"({type(repeats).__name__}), but expected one of:\n"
                        " * (Tensor repeats, int dim = None, *, int output_size = None)\n"
                        " * (int repeats, int dim = None, *, int output_size = None)\n")
    repeats = operator.index(repeats)
    if repeats < 0:
        raise RuntimeError("Repeats must be non-negative")
    if input.ndim == 0:
        input = input.reshape(1)
    shape = input.shape
    if output_size is not None and int(output_size) != shape[ax] * repeats:
        raise RuntimeError("allocated size does not match required size")
    # a new axis after ``ax``, broadcast to ``repeats``, merged back: each slice appears ``repeats`` times in a row
    wide = input.unsqueeze(ax + 1).expand(shape[:ax + 1] + (repeats,) + shape[ax + 1:])
    return named(wide.reshape(shape[:ax] + (shape[ax] * repeats,) + shape[ax + 1:]), "ViewBackward0")


# ---- roll --------------------------------------------------------------------------------------------------------

def _ints(x):
    return tuple(operator.index(v) for v in x) if isinstance(x, (tuple, list)) else (operator.index(x),)


@published("jitgrad", "Tensor")
def roll(input, shifts, dims=None, **torch_kw):
    """Rotate ``input`` by ``shifts`` along ``dims``: elements pushed off the end come back at the start.  With
    ``dims=None`` the flattened tensor is rolled and its shape restored.  Several dims take one shift each.

    >>> import jitgrad as jg
    >>> jg.roll(jg.tensor([[1, 2, 3], [4, 5, 6]]), 1, 1)
    tensor([[3, 1, 2],
            [6, 4, 5]])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(roll, "roll", (input, shifts, dims), {}, torch_kw)
    shifts = _ints(shifts)
    dims = () if dims is None else _ints(dims)
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
        return named(_roll_one(input.reshape(-1), shifts[0], 0).reshape(input.shape), "RollBackward0")
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    out = input
    for s, d in zip(shifts, dims):
        out = _roll_one(out, s, torch_dim(input, d))
    return named(out if out is not input else input.clone(), "RollBackward0")


def _roll_one(x, shift, ax):
    n = x.shape[ax] if x.ndim else 1
    s = shift % n if n else 0
    if s == 0:
        return x
    from .views import cat
    return cat([x.narrow(ax, n - s, s), x.narrow(ax, 0, n - s)], ax)


# ---- diff --------------------------------------------------------------------------------------------------------

@published("jitgrad", "Tensor")
def diff(input, n=1, dim=-1, prepend=None, append=None, **torch_kw):
    """The ``n``-th forward difference along ``dim``: ``out[i] = input[i + 1] - input[i]``, applied ``n`` times
    (``!=`` for bool tensors).  ``prepend`` / ``append`` are concatenated to ``input`` along ``dim`` first.

    >>> import jitgrad as jg
    >>> jg.diff(jg.tensor([1, 4, 9, 16]))
    tensor([3, 5, 7])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(diff, "diff", (input, n, dim, prepend, append), {}, torch_kw)
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    n = operator.index(n)
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    ax = torch_dim(input, dim)
    parts = []
    for extra in (prepend, append):
        if extra is not None and not isinstance(extra, Tensor):
            from ..creation.factories import tensor
            extra = tensor(extra, dtype=input.dtype).expand(input.shape[:ax] + (1,) + input.shape[ax + 1:])
        if extra is not None and extra.ndim != input.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
        parts.append(extra)
    if parts[0] is not None or parts[1] is not None:
        from .views import cat
        input = cat([t for t in (parts[0], input, parts[1]) if t is not None], ax)
    out = input
    for _ in range(n):
        m = out.shape[ax]
        if m == 0:
            break
        hi, lo = out.narrow(ax, 1, m - 1), out.narrow(ax, 0, m - 1)
        out = hi != lo if out.dtype is dt.bool_ else hi - lo
    return out


# ---- meshgrid ----------------------------------------------------------------------------------------------------

@published("jitgrad")
def meshgrid(*tensors, indexing=None, **torch_kw):
    """Coordinate grids of 0-d/1-d tensors: output ``k`` has input ``k`` laid along dim ``k`` and broadcast over
    the others (``indexing='ij'``, the default), or the first two dims swapped (``indexing='xy'``, Cartesian).

    >>> import jitgrad as jg
    >>> gx, gy = jg.meshgrid(jg.tensor([1, 2]), jg.tensor([3, 4, 5]), indexing="ij")
    >>> gx.shape, gy.shape
    (jitgrad.Size([2, 3]), jitgrad.Size([2, 3]))
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(meshgrid, "meshgrid", tensors, {"indexing": indexing}, torch_kw)
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.",
                      UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t}")
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    swap = indexing == "xy" and len(tensors) >= 2
    order = [1, 0] + list(range(2, len(tensors))) if swap else list(range(len(tensors)))
    grid = tuple(tensors[k].numel() for k in order)      # dim j of the grid belongs to input order[j]
    outs = []
    for k, t in enumerate(tensors):
        j = order.index(k)
        line = t.reshape((1,) * j + (-1,) + (1,) * (len(grid) - j - 1))
        outs.append(line.expand(grid))
    return tuple(outs)


# ---- unflatten ---------------------------------------------------------------------------------------------------

@published("jitgrad", "Tensor")
def unflatten(input, dim, sizes, **torch_kw):
    """Split dim ``dim`` of ``input`` into ``sizes`` (one of them may be -1: inferred), a view (``nn.Unflatten``'s
    op; the inverse of ``flatten``).

    >>> import jitgrad as jg
    >>> jg.arange(6).unflatten(0, (2, -1)).shape
    jitgrad.Size([2, 3])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(unflatten, "unflatten", (input, dim, sizes), {}, torch_kw)
    ax = torch_dim(input, dim)
    sizes = tuple(operator.index(n) for n in sizes)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    n = input.shape[ax] if input.ndim else 1
    known = 1
    for m in sizes:
        known *= m if m != -1 else 1
    if sizes.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    fits = n % known == 0 if -1 in sizes and known else known == n
    if not fits:
        raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} ({n}) "
                           f"in the input tensor")
    return input.view(input.shape[:ax] + sizes + input.shape[ax + 1:])


__all__ = ["repeat_interleave", "roll", "diff", "unflatten", "meshgrid"]
