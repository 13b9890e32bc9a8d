"""Masked and scattered writes, one-sided clamps, addmm: ``masked_fill``, ``scatter_add``, ``clamp_min``,
``clamp_max``, ``addmm`` (functions and Tensor methods), each a composition of primitives with torch's grad_fn
name.  ``scatter_add`` is an accumulating ``index_put`` with one index tensor per dim, which compiles to the
native scatter kernel (and its gradient to the native gather)."""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir.dtypes import torch_cpp_name
from ...ir.ops import OPS as O
from ...runtime.dispatch import bind
from ..elementary import _axis, clamp, where
from ...runtime.grad_names import named
from ..shaping.views import index_grid
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from ...runtime.checked_index import IN_DIM, grid_checked
from ..shaping.views import index_grid


@published("jitgrad", "Tensor")
def masked_fill(input, mask, value, **torch_kw):
    """``value`` where ``mask`` (bool) is True, else ``input``, the three broadcast together as torch does (a mask
    with more dims gives its shape); keeps ``input``'s dtype."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(masked_fill, 'masked_fill', (input, mask, value), {}, torch_kw)
    if not isinstance(mask, Tensor) or mask.dtype.name != "bool":
        got = torch_cpp_name(mask.dtype) if isinstance(mask, Tensor) else type(mask).__name__
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {got}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    if isinstance(value, float) and not input.is_floating_point():
        value = int(value)      # torch casts the fill value to the tensor's dtype
    r = where(mask, value, input)       # input, mask and value broadcast together (a larger mask: its shape)
    if r.dtype is not input.dtype:
        r = r.to(input.dtype)
    return named(r, "MaskedFillBackward0")


@published("Tensor", name="masked_fill_")
def _masked_fill_(self, mask, value):
    """In place: ``self.copy_(masked_fill(self, mask, value))``; the result must keep ``self``'s shape."""
    r = masked_fill(self, mask, value)
    if r.shape != self.shape:
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(r.shape)}")
    return self.copy_(r)


def _scatter_key(input, dim, index):
    ax = _axis("scatter_add", input, dim)
    return ax, index_grid(index, ax)


def oversized_index_dim(input, ax, index, src):
    """torch's scatter shape rule: raises unless ``index``, ``input`` and ``src`` have one number of dimensions;
    returns the first dimension where ``index`` is larger than ``src`` (or, apart from ``ax``, than ``input``),
    or None (each caller raises its own torch text for it)."""
    if not (index.ndim == input.ndim == src.ndim):
        raise RuntimeError(f"Index tensor must have the same number of dimensions as self tensor (index "
                           f"{list(index.shape)}, self {list(input.shape)}, src {list(src.shape)})")
    for i in range(index.ndim):
        if index.shape[i] > src.shape[i] or (i != ax and index.shape[i] > input.shape[i]):
            return i
    return None


@published("jitgrad", "Tensor")
def scatter_add(input, dim, index, src, **torch_kw):
    """``out = input.clone(); out[index[i][j]][j] += src[i][j]`` (dim=0), as torch.scatter_add."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(scatter_add, 'scatter_add', (input, dim, index, src), {}, torch_kw)
    ax = _axis("scatter_add", input, dim)
    if index.dtype.name != "int64":
        raise RuntimeError(f"scatter_add(): Expected dtype int64 for index, got {index.dtype.name}")
    i = oversized_index_dim(input, ax, index, src)
    if i is not None:
        raise RuntimeError(f"Size does not match at dimension {i} expected index {list(index.shape)} to be "
                           f"smaller than self {list(input.shape)} apart from dimension {ax} and to be "
                           f"smaller size than src {list(src.shape)}")
    if index.numel() and type(index._data) is np.ndarray and (
            index._data.min() < 0 or index._data.max() >= input.shape[ax]):
        bad = int(index._data.max() if index._data.max() >= input.shape[ax] else index._data.min())
        raise RuntimeError(f"index {bad} is out of bounds for dimension {ax} with size {input.shape[ax]}")
    if src.shape != index.shape:
        src = src[tuple(slice(0, n) for n in index.shape)]
    if index.numel() == 0:
        return named(input.clone(), "ScatterAddBackward0")
    _, key = _scatter_key(input, ax, index)
    key, oob = grid_checked(input, key, ax, IN_DIM)        # (traced: torch refuses negative indices)
    spec = tuple(("tensor", k) for k in range(len(key)))
    if oob is not None:
        return named(bind(O["index_put"], input, src, *key, spec=spec, accumulate=True, oob=oob),
                     "ScatterAddBackward0")
    return named(bind(O["index_put"], input, src, *key, spec=spec, accumulate=True), "ScatterAddBackward0")


@published("Tensor", name="scatter_add_")
def _scatter_add_(self, dim, index, src):
    """In place: ``self.copy_(scatter_add(self, dim, index, src))``."""
    return self.copy_(scatter_add(self, dim, index, src))


@published("jitgrad", "Tensor")
def clamp_min(input, min, **torch_kw):
    """``max(input, min)`` elementwise (``clamp(input, min=min)``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(clamp_min, 'clamp_min', (input, min), {}, torch_kw)
    return named(clamp(input, min=min), "ClampMinBackward0")


@published("jitgrad", "Tensor")
def clamp_max(input, max, **torch_kw):
    """``min(input, max)`` elementwise (``clamp(input, max=max)``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(clamp_max, 'clamp_max', (input, max), {}, torch_kw)
    return named(clamp(input, max=max), "ClampMaxBackward0")


@published("jitgrad", "Tensor")
def addmm(input, mat1, mat2, *, beta=1, alpha=1, **torch_kw):
    """``beta * input + alpha * (mat1 @ mat2)`` for 2-d ``mat1``, ``mat2`` (``nn.Linear``'s op)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(addmm, 'addmm', (input, mat1, mat2), {"beta": beta, "alpha": alpha}, torch_kw)
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"addmm: mat1 must be a matrix, got {mat1.ndim}-D tensor" if mat1.ndim != 2 else
                           f"addmm: mat2 must be a matrix, got {mat2.ndim}-D tensor")
    prod = mat1 @ mat2
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return named(prod * 1, "AddmmBackward0")
    return named((input if beta == 1 else input * beta) + prod, "AddmmBackward0")


@published("jitgrad", "Tensor")
def masked_select(input, mask, **torch_kw):
    """The elements of ``input`` where the bool ``mask`` is True (the two broadcast), as a 1-d tensor in row-major
    order; differentiable.  Its length depends on the mask's values, so inside ``@jg.compile`` it is a tensor
    of data-dependent length (a size bounded by the mask's, ``ir/unbacked.py``).

    >>> import jitgrad as jg
    >>> x = jg.tensor([[1., -2.], [3., -4.]])
    >>> jg.masked_select(x, x > 0)
    tensor([1., 3.])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(masked_select, "masked_select", (input, mask), {}, torch_kw)
    from ...ir import dtypes as dt
    from ..linalg.products import _broadcast_shape
    if mask.dtype is not dt.bool_:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    shape = _broadcast_shape(mask.shape, input.shape)     # torch names the mask "tensor a"
    return named(input.expand(shape)[mask.expand(shape)], "MaskedSelectBackward0")


__all__ = ["masked_fill", "scatter_add", "clamp_min", "clamp_max", "addmm", "masked_select"]
