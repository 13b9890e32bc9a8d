"""torch's slicing and tiling methods that compose from indexing and reshapes: ``narrow``, ``select``,
``split_with_sizes``, ``repeat``, ``tile``; and ``var_mean`` / ``std_mean``.

``narrow`` and ``select`` are basic indexing (views sharing the input's memory, with torch's ``SliceBackward0`` /
``SelectBackward0`` nodes); ``repeat`` is unsqueeze + expand + reshape, so no new primitive or vjp is needed.
"""
from __future__ import annotations

import operator

from ...declarations import published
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _dim(name, t, dim):
    nd = t.ndim
    lo, hi = (-nd, nd - 1) if nd else (-1, 0)
    if not lo <= dim <= hi:
        raise IndexError(f"{name}(): Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})")
    return dim + nd if dim < 0 else dim


@published("jitgrad", "Tensor")
def narrow(input, dim, start, length, **torch_kw):
    """``input`` along ``dim`` from ``start`` for ``length`` elements: a view (torch.narrow)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(narrow, 'narrow', (input, dim, start, length), {}, torch_kw)
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = _dim("narrow", input, dim)
    if isinstance(start, Tensor):
        if start.ndim != 0 or start.is_floating_point():
            raise RuntimeError("start must be an 0-dim integral Tensor.")
        start = int(start.item())
    start, length = operator.index(start), operator.index(length)
    size = input.shape[d]
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
    if start < 0:
        start += size
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return input[(slice(None),) * d + (slice(start, start + length),)]


@published("jitgrad", "Tensor")
def select(input, dim, index, **torch_kw):
    """The slice of ``input`` at ``index`` along ``dim``, with that dim removed: a view (torch.select)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(select, 'select', (input, dim, index), {}, torch_kw)
    if input.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = _dim("select", input, dim)
    index = operator.index(index)
    size = input.shape[d]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(input.shape)} at "
                         f"dimension {d}")
    return input[(slice(None),) * d + (index,)]


@published("jitgrad", "Tensor")
def split_with_sizes(input, split_sizes, dim=0, **torch_kw):
    """Pieces of ``input`` along ``dim`` with the given sizes (which must add up to the dim's size)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(split_with_sizes, 'split_with_sizes', (input, split_sizes, dim), {}, torch_kw)
    from ..elementary import split
    d = _dim("split_with_sizes", input, dim)
    sizes = [operator.index(s) for s in split_sizes]
    if any(s < 0 for s in sizes):
        raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                           f"split_sizes={sizes}")
    return split(input, sizes, d)


@published("jitgrad", "Tensor")
def repeat(input, *sizes, **torch_kw):
    """``input`` tiled ``sizes[i]`` times along each dim (torch.Tensor.repeat; leading new dims allowed)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(repeat, 'repeat', (input, *sizes), {}, torch_kw)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(operator.index(s) for s in sizes)
    if len(sizes) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    if any(s < 0 for s in sizes):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(sizes)}: {list(sizes)}")
    shape = (1,) * (len(sizes) - input.ndim) + tuple(input.shape)
    x = input.reshape(shape)
    # (s0, s1, ...) -> (1, s0, 1, s1, ...) expanded to (r0, s0, r1, s1, ...) -> (r0*s0, r1*s1, ...)
    inter = tuple(v for s in shape for v in (1, s))
    big = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
    r = x.reshape(inter).expand(*big).reshape(tuple(r * s for r, s in zip(sizes, shape)))
    return named(r, "RepeatBackward0") if r is not input else r


@published("jitgrad", "Tensor")
def tile(input, dims, **torch_kw):
    """torch.tile: ``repeat`` with ``dims`` padded by leading ones to ``input.ndim``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(tile, 'tile', (input, dims), {}, torch_kw)
    dims = tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


@published("jitgrad")
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None, **torch_kw):
    """``(var(input, dim), mean(input, dim))`` as torch.var_mean."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(var_mean, 'var_mean', (input, dim, unbiased, keepdim), {"correction": correction}, torch_kw)
    from ..elementary import mean, var
    from ...tracer import STATE as _TR
    if _TR.active is None and isinstance(input, Tensor) and input.requires_grad and input.is_floating_point():
        # eager: one node with two outputs, as torch (VarMeanBackward0: a pre-hook sees both gradients)
        c = correction if correction is not None else (0 if unbiased is False else 1)
        out = _var_mean_fn().apply(input, dim, c, keepdim)
        if out[0].grad_fn is not None:
            out[0].grad_fn.torch_name = "VarMeanBackward0"
        return out
    return var(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


_VAR_MEAN = []


def _var_mean_fn():
    """The autograd Function behind eager ``var_mean`` (made once; its backward is jitgrad ops, so it
    differentiates to any order): d var / dx = 2 (x - mean) / (N - correction), d mean / dx = 1 / N."""
    if _VAR_MEAN:
        return _VAR_MEAN[0]
    from ...runtime.function import Function
    from ..elementary import mean, var

    def dims_of(x, dim):
        if dim is None:
            return tuple(range(x.ndim))
        ds = (dim,) if isinstance(dim, int) else tuple(dim)
        return tuple(sorted(d % x.ndim if x.ndim else 0 for d in ds))

    class VarMean(Function):
        @staticmethod
        def forward(ctx, x, dim, c, keepdim):
            ctx.save_for_backward(x)
            ctx.dim, ctx.c, ctx.keepdim = dim, c, keepdim
            return var(x, dim, keepdim=keepdim, correction=c), mean(x, dim, keepdim)

        @staticmethod
        def backward(ctx, gvar, gmean):
            (x,) = ctx.saved_tensors
            ds = dims_of(x, ctx.dim)
            n = 1
            for d in ds:
                n *= x.shape[d]
            if not ctx.keepdim:
                for d in ds:
                    gvar = gvar.unsqueeze(d)
                    gmean = gmean.unsqueeze(d)
            centered = x - mean(x, ctx.dim, True)
            gx = gvar * centered * (2.0 / (n - ctx.c)) + gmean * (1.0 / n)
            return gx, None, None, None
    _VAR_MEAN.append(VarMean)
    return VarMean


@published("jitgrad")
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None, **torch_kw):
    """``(std(input, dim), mean(input, dim))`` as torch.std_mean."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(std_mean, 'std_mean', (input, dim, unbiased, keepdim), {"correction": correction}, torch_kw)
    from ..elementary import mean, std
    return std(input, dim, unbiased, keepdim, correction=correction), mean(input, dim, keepdim)


def _unsafe(pieces, name):
    """torch's ``unsafe_*`` splits: the pieces share ``input``'s memory but are not autograd views (each has its
    own version counter and no ``_base``), so in-place ops on them are allowed and do not rebase ``input``'s
    history; writing through one is only safe when nothing saved ``input`` for backward (torch's caveat)."""
    for t in pieces:
        if t._base is not None:
            t._base = None
            t._vc = [0]
            t._view_origin = None
        named(t, name)
    return pieces


@published("jitgrad", "Tensor")
def unsafe_split(input, split_size, dim=0, **torch_kw):
    """``split`` whose pieces are not tracked as views (torch.unsafe_split; see ``_unsafe``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(unsafe_split, 'unsafe_split', (input, split_size, dim), {}, torch_kw)
    from ..elementary import split
    if not isinstance(split_size, int):
        raise TypeError(f"unsafe_split(): argument 'split_size' must be int, not {type(split_size).__name__}")
    return _unsafe(split(input, split_size, dim), "UnsafeSplitBackward0")


@published("jitgrad", "Tensor")
def unsafe_split_with_sizes(input, split_sizes, dim=0, **torch_kw):
    """``split_with_sizes`` whose pieces are not tracked as views (torch.unsafe_split_with_sizes)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(unsafe_split_with_sizes, 'unsafe_split_with_sizes', (input, split_sizes, dim), {},
                            torch_kw)
    return _unsafe(split_with_sizes(input, split_sizes, dim), "UnsafeSplitWithSizesBackward0")


@published("jitgrad", "Tensor")
def unsafe_chunk(input, chunks, dim=0, **torch_kw):
    """``chunk`` whose pieces are not tracked as views (torch.unsafe_chunk)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(unsafe_chunk, 'unsafe_chunk', (input, chunks, dim), {}, torch_kw)
    from ..elementary import chunk
    return _unsafe(chunk(input, chunks, dim), "UnsafeSplitBackward0")


# torch has no Tensor.var_mean / std_mean methods

__all__ = ["narrow", "select", "split_with_sizes", "repeat", "tile", "var_mean", "std_mean", "unsafe_split",
           "unsafe_split_with_sizes", "unsafe_chunk"]
