"""Shape functions torch has beyond the basics: ``movedim`` / ``moveaxis``, ``ravel``, ``rot90``, ``diag`` /
``diag_embed`` / ``diagflat``, ``tensor_split`` / ``hsplit`` / ``vsplit`` / ``dsplit``, ``hstack`` / ``vstack`` /
``dstack`` / ``column_stack`` / ``row_stack``, ``atleast_1d/2d/3d``, ``unfold`` (a strided view), ``clone`` and
``numel`` as functions, ``Tensor.ndimension`` and ``Tensor.byte``.

Each is a composition of existing primitives (permute, reshape, flip, getitem, index_put, cat), so it
differentiates, traces and compiles (CPU and CUDA) with no rule of its own; results name their node as torch does.
"""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS as O
from ..dim_args import diagonal_dims, dim_arg, torch_dim
from ...runtime.dispatch import bind
from ...runtime.grad_names import named
from .views import cat, permute, reshape
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _dims(d):
    return [int(d)] if isinstance(d, (int, np.integer)) else [int(i) for i in d]


@published("jitgrad", "Tensor")
def movedim(input, source, destination, **torch_kw):
    """``input`` with its dims ``source`` moved to the positions ``destination`` (ints or sequences of ints),
    the other dims keeping their order: a view (``PermuteBackward0``)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(movedim, "movedim", (input, source, destination), {}, torch_kw)
    src, dst = _dims(source), _dims(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims) should contain the "
                           f"same number of dims as destination ({dst} dims)")
    src = [torch_dim(input, d) for d in src]
    dst = [torch_dim(input, d) for d in dst]
    for name, ds, orig in (("source", src, _dims(source)), ("destination", dst, _dims(destination))):
        if len(set(ds)) != len(ds):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({orig})")
    nd = input.ndim
    perm = [-1] * nd
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(nd) if i not in src)
    perm = [p if p >= 0 else next(rest) for p in perm]
    return permute(input, perm) if nd else input


moveaxis = published("jitgrad", "Tensor", name="moveaxis")(movedim)


@published("jitgrad", "Tensor")
def ravel(input, **torch_kw):
    """``input`` flattened to 1-d (a view when the layout allows, as ``reshape(-1)``)."""
    if torch_kw:
        return torch_kwargs(ravel, "ravel", (input,), {}, torch_kw)
    return reshape(input, -1)


@published("jitgrad", "Tensor")
def rot90(input, k=1, dims=(0, 1), **torch_kw):
    """``input`` rotated by ``k`` quarter turns in the plane ``dims``, from the first dim towards the second."""
    if torch_kw:
        return torch_kwargs(rot90, "rot90", (input, k, dims), {}, torch_kw)
    dims = _dims(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    a, b = torch_dim(input, dims[0]), torch_dim(input, dims[1])
    if a == b:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} and dim1 = {dims[1]}")
    k = int(k) % 4
    if k == 1:
        r = input.flip(b).transpose(a, b)
    elif k == 2:
        r = input.flip((a, b))
    elif k == 3:
        r = input.flip(a).transpose(a, b)
    else:
        r = input.clone()
    return named(r, "Rot90Backward0")


@published("jitgrad", "Tensor")
def diag_embed(input, offset=0, dim1=-2, dim2=-1, **torch_kw):
    """A tensor whose planes (``dim1``, ``dim2``) hold ``input``'s last dim on their ``offset`` diagonal (zeros
    elsewhere); the other dims of ``input`` are the result's remaining dims."""
    if torch_kw:
        return torch_kwargs(diag_embed, "diag_embed", (input, offset, dim1, dim2), {}, torch_kw)
    nd = input.ndim + 1
    a, b = diagonal_dims(dim1, dim2, nd)
    x = input.reshape(1) if input.ndim == 0 else input
    n, off = x.shape[-1], int(offset)
    m = n + abs(off)
    z = x.new_zeros(tuple(x.shape[:-1]) + (m, m))
    rows = Tensor._make(np.arange(n, dtype=np.int64) + max(-off, 0))
    cols = Tensor._make(np.arange(n, dtype=np.int64) + max(off, 0))
    r = bind(O["index_put"], z, x, x._same_device(rows), x._same_device(cols),
             spec=(Ellipsis, ("tensor", 0), ("tensor", 1)), accumulate=False)
    # the two new dims are last: move them to (a, b); with a > b the plane is transposed
    r = movedim(r, (-2, -1), (a, b)) if a < b else movedim(r, (-1, -2), (b, a))
    return named(r, "DiagEmbedBackward0")


@published("jitgrad", "Tensor")
def diag(input, diagonal=0, **torch_kw):
    """1-d ``input``: the square matrix with it on the ``diagonal``-th diagonal; 2-d: that diagonal, as a copy."""
    if torch_kw:
        return torch_kwargs(diag, "diag", (input, diagonal), {}, torch_kw)
    if input.ndim == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.ndim != 2:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    return named(input.diagonal(diagonal) * 1 if input.is_floating_point() else input.diagonal(diagonal).clone(),
                 "DiagonalBackward0_copy")     # torch's name for diag's node


@published("jitgrad", "Tensor")
def diagflat(input, offset=0, **torch_kw):
    """The square matrix with ``input`` (flattened) on its ``offset``-th diagonal."""
    if torch_kw:
        return torch_kwargs(diagflat, "diagflat", (input, offset), {}, torch_kw)
    return diag_embed(input.reshape(-1), offset, 0, 1)


# ---- splitting ---------------------------------------------------------------------------------------------
@published("jitgrad", "Tensor")
def tensor_split(input, indices_or_sections, dim=0, **torch_kw):
    """Views of ``input`` along ``dim``: an int ``n`` gives ``n`` parts whose sizes differ by at most one (the
    first ones larger); a sequence of indices splits before each (Python slice rules)."""
    if torch_kw:
        return torch_kwargs(tensor_split, "tensor_split", (input, indices_or_sections, dim), {}, torch_kw)
    if input.ndim == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    ax = dim_arg("tensor_split", input, dim)
    n = input.shape[ax]
    ios = indices_or_sections
    if isinstance(ios, Tensor):
        if ios.dtype is not dt.int64 or ios.ndim > 1:
            raise RuntimeError("tensor_split expected tensor_indices_or_sections to have dtype of long, but got "
                               f"{ios.dtype.name}" if ios.dtype is not dt.int64 else
                               "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                               f"one-dimensional tensor, but got a tensor with {ios.ndim} dims")
        ios = int(ios.item()) if ios.ndim == 0 else [int(i) for i in ios.tolist()]
    if isinstance(ios, (int, np.integer)):
        k = int(ios)
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        q, r = divmod(n, k)
        bounds, start = [], 0
        for i in range(k):
            size = q + (1 if i < r else 0)
            bounds.append((start, start + size))
            start += size
    else:
        idx = [int(i) for i in ios]
        bounds = list(zip([0] + idx, idx + [None]))
    pre = (slice(None),) * ax
    return tuple(input[pre + (slice(a, b),)] for a, b in bounds)     # plain slices (SliceBackward0), as torch


def _nsplit(name, input, ios, ax, need):
    if input.ndim < need:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {need} dimension, but got a tensor with "
                           f"{input.ndim} dimensions!")
    if isinstance(ios, (int, np.integer)):
        if ios != 0 and input.shape[ax] % ios != 0 or ios == 0:
            raise RuntimeError(f"torch.{name} attempted to split along dimension {ax}, but the size of the dimension "
                               f"{input.shape[ax]} is not divisible by the split_size {ios}!")
    return tensor_split(input, ios, ax)


@published("jitgrad", "Tensor")
def hsplit(input, indices_or_sections, **torch_kw):
    """``tensor_split`` along dim 1 (dim 0 for a 1-d tensor); an int must divide that dim."""
    if torch_kw:
        return torch_kwargs(hsplit, "hsplit", (input, indices_or_sections), {}, torch_kw)
    return _nsplit("hsplit", input, indices_or_sections, 0 if input.ndim == 1 else 1, 1)


@published("jitgrad", "Tensor")
def vsplit(input, indices_or_sections, **torch_kw):
    """``tensor_split`` along dim 0 of a tensor with at least 2 dims; an int must divide that dim."""
    if torch_kw:
        return torch_kwargs(vsplit, "vsplit", (input, indices_or_sections), {}, torch_kw)
    return _nsplit("vsplit", input, indices_or_sections, 0, 2)


@published("jitgrad", "Tensor")
def dsplit(input, indices_or_sections, **torch_kw):
    """``tensor_split`` along dim 2 of a tensor with at least 3 dims; an int must divide that dim."""
    if torch_kw:
        return torch_kwargs(dsplit, "dsplit", (input, indices_or_sections), {}, torch_kw)
    return _nsplit("dsplit", input, indices_or_sections, 2, 3)


# ---- at least n dims, stacking -------------------------------------------------------------------------------
def _atleast(tensors, fn):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(fn(t) for t in tensors[0])
    if len(tensors) == 1:
        return fn(tensors[0])
    return tuple(fn(t) for t in tensors)


def _1d(t):
    return t.reshape(1) if t.ndim == 0 else t


def _2d(t):
    return t.reshape(1, 1) if t.ndim == 0 else t.unsqueeze(0) if t.ndim == 1 else t


def _3d(t):
    if t.ndim == 0:
        return t.reshape(1, 1, 1)
    if t.ndim == 1:
        return t.unsqueeze(0).unsqueeze(-1)
    return t.unsqueeze(-1) if t.ndim == 2 else t


@published("jitgrad")
def atleast_1d(*tensors):
    """Each tensor with at least 1 dim (a 0-d one becomes shape (1,)); one tensor in, one out, else a tuple."""
    return _atleast(tensors, _1d)


@published("jitgrad")
def atleast_2d(*tensors):
    """Each tensor with at least 2 dims (leading 1s added); one tensor in, one out, else a tuple."""
    return _atleast(tensors, _2d)


@published("jitgrad")
def atleast_3d(*tensors):
    """Each tensor with at least 3 dims (0-d: (1,1,1); (n,): (1,n,1); (m,n): (m,n,1)), as torch and NumPy."""
    return _atleast(tensors, _3d)


def _stack_of(name, tensors, prep, dim_of):
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}(): argument 'tensors' must be tuple of Tensors, not {type(tensors).__name__}")
    if len(tensors) == 0:
        raise RuntimeError(f"{name} expects a non-empty TensorList")
    ts = [prep(t) for t in tensors]
    return cat(ts, dim_of(ts))


@published("jitgrad")
def hstack(tensors, **torch_kw):
    """The tensors (at least 1-d) concatenated along dim 1, or dim 0 when they are 1-d."""
    if torch_kw:
        return torch_kwargs(hstack, "hstack", (tensors,), {}, torch_kw)
    return _stack_of("hstack", tensors, _1d, lambda ts: 0 if ts[0].ndim == 1 else 1)


@published("jitgrad")
def vstack(tensors, **torch_kw):
    """The tensors (at least 2-d) concatenated along dim 0."""
    if torch_kw:
        return torch_kwargs(vstack, "vstack", (tensors,), {}, torch_kw)
    return _stack_of("vstack", tensors, _2d, lambda ts: 0)


@published("jitgrad")
def row_stack(tensors, **torch_kw):
    """``vstack``."""
    if torch_kw:
        return torch_kwargs(row_stack, "row_stack", (tensors,), {}, torch_kw)
    return _stack_of("row_stack", tensors, _2d, lambda ts: 0)


@published("jitgrad")
def dstack(tensors, **torch_kw):
    """The tensors (at least 3-d) concatenated along dim 2."""
    if torch_kw:
        return torch_kwargs(dstack, "dstack", (tensors,), {}, torch_kw)
    return _stack_of("dstack", tensors, _3d, lambda ts: 2)


@published("jitgrad")
def column_stack(tensors, **torch_kw):
    """The tensors side by side as columns: 0-d and 1-d ones become (n, 1) columns, then ``hstack``."""
    if torch_kw:
        return torch_kwargs(column_stack, "column_stack", (tensors,), {}, torch_kw)
    return _stack_of("column_stack", tensors, lambda t: t.reshape(t.numel(), 1) if t.ndim <= 1 else t,
                     lambda ts: 1)


# ---- unfold: sliding windows as a view -----------------------------------------------------------------------
@published("Tensor")
def unfold(self, dimension, size, step):
    """All windows of ``size`` elements, ``step`` apart, along ``dimension``: that dim becomes the window count and
    a new last dim of length ``size`` holds each window.  Eagerly a strided view of ``self``'s storage (writes
    through it reach ``self``); traced, the same elements read with one index (``UnfoldBackward0``)."""
    ax = torch_dim(self, dimension)
    n = self.shape[ax] if self.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {ax} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    count = (n - size) // step + 1
    if self.ndim == 0:
        return named(self.reshape(1), "UnfoldBackward0")
    shape = tuple(self.shape[:ax]) + (count,) + tuple(self.shape[ax + 1:]) + (size,)
    if type(self._data) is np.ndarray:
        st = self.stride()
        strides = tuple(st[:ax]) + (st[ax] * step,) + tuple(st[ax + 1:]) + (st[ax],)
        return named(self.as_strided(shape, strides, self.storage_offset()), "UnfoldBackward0")
    # traced or on a device: one (count, size) index along ax gives pre + (count, size) + post; size goes last
    win = np.arange(count, dtype=np.int64)[:, None] * step + np.arange(size, dtype=np.int64)[None, :]
    r = self[(slice(None),) * ax + (self._same_device(Tensor._make(win)),)]
    r = movedim(r, ax + 1, self.ndim)
    return named(r, "UnfoldBackward0")


# ---- small Tensor surface ------------------------------------------------------------------------------------
@published("jitgrad")
def clone(input, *, memory_format=None, **torch_kw):
    """A copy of ``input`` that records ``CloneBackward0`` (``Tensor.clone`` as a function)."""
    if torch_kw:
        return torch_kwargs(clone, "clone", (input,), {"memory_format": memory_format}, torch_kw)
    return input.clone() if memory_format is None else input.clone(memory_format=memory_format)


@published("jitgrad")
def numel(input):
    """The number of elements of ``input``."""
    return input.numel()


@published("Tensor")
def ndimension(self):
    """The number of dims (``Tensor.dim()``)."""
    return self.ndim


@published("Tensor")
def byte(self, memory_format=None):
    """``self.to(jitgrad.uint8)``."""
    return self.to(dt.uint8)


__all__ = ["movedim", "moveaxis", "ravel", "rot90", "diag", "diag_embed", "diagflat", "tensor_split", "hsplit",
           "vsplit", "dsplit", "atleast_1d", "atleast_2d", "atleast_3d", "hstack", "vstack", "row_stack", "dstack",
           "column_stack", "clone", "numel"]
