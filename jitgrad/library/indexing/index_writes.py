"""Reads and writes by index: ``take``, ``put`` / ``put_``, ``index_add`` / ``index_add_`` (with ``alpha``),
``index_copy`` / ``index_copy_``, ``index_fill`` / ``index_fill_``, ``masked_scatter`` / ``masked_scatter_``,
``index_put`` / ``index_put_`` and ``fill_diagonal_``, with torch's checks and messages.

All are the ``getitem`` and ``index_put`` primitives (plus ``where`` and ``cumsum`` for ``masked_scatter``), so
their gradients are those primitives' rules (``index_add``'s gradient to ``source`` is the gather of the incoming
gradient at ``index``), and they trace and compile with no rule of their own.  The in-place forms go through
``_apply_inplace`` (version bump, leaf and view checks, history rebased onto the op's node).
"""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.dtypes import torch_scalar_name
from ...ir.ops import OPS as O
from ..dim_args import torch_dim
from ...runtime.dispatch import bind
from ..elementary import where
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs
from ...runtime.checked_index import FLAT, IN_COPY, IN_DIM, checked_index
from ..shaping.views import getitem_checked


def _concrete(t):
    return isinstance(t, Tensor) and type(t._data) is np.ndarray


def _put_at(x, key, value, accumulate, oob=None):
    """``x`` with ``value`` written (or added) at the advanced index ``key`` (a tuple of slices and one index
    tensor): the ``index_put`` primitive (``oob``: range-checked, see checked_index.py)."""
    spec = tuple(("tensor", 0) if isinstance(k, Tensor) else ("slice", k.start, k.stop, k.step) for k in key)
    idx = [k for k in key if isinstance(k, Tensor)]
    if oob is not None:
        return bind(O["index_put"], x, value, *idx, spec=spec, accumulate=bool(accumulate), oob=oob)
    return bind(O["index_put"], x, value, *idx, spec=spec, accumulate=bool(accumulate))


@published("jitgrad", "Tensor")
def take(input, index, **torch_kw):
    """The elements of ``input`` read as 1-d at ``index`` (a long tensor of any shape; negative counts from the
    end); the result has ``index``'s shape."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(take, "take", (input, index), {}, torch_kw)
    if index.dtype is not dt.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {torch_scalar_name(index.dtype)}")
    return named(getitem_checked(input.reshape(-1), (index,), FLAT), "TakeBackward0")


@published("jitgrad", "Tensor")
def put(input, index, source, accumulate=False, **torch_kw):
    """``input`` with ``source``'s elements written at the flat positions ``index`` (added with
    ``accumulate=True``); ``index`` and ``source`` have one number of elements."""
    if torch_kw:
        return torch_kwargs(put, "put", (input, index, source, accumulate), {}, torch_kw)
    if index.dtype is not dt.int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got {torch_scalar_name(index.dtype)}")
    if source.dtype is not input.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got self.dtype = "
                           f"{torch_scalar_name(input.dtype)} and source.dtype = {torch_scalar_name(source.dtype)}")
    if index.numel() != source.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    flat, oob = checked_index(index.reshape(-1), input.numel(), 0, FLAT)
    r = _put_at(input.reshape(-1), (flat,), source.reshape(-1), accumulate, oob)
    return named(r.reshape(tuple(input.shape)), "PutBackward0")


@published("Tensor", name="put_")
def _put_(self, index, source, accumulate=False):
    """In place: writes ``put(self, index, source, accumulate)`` into ``self``."""
    return self._apply_inplace(lambda s, v: put(s, index, v, accumulate), source)


# ---- along one dim: index_add, index_copy, index_fill ---------------------------------------------------------
def _index_arg(name, input, dim, index, long_only_msg=None):
    """``(axis, index as 1-d)`` with torch's checks on ``index``."""
    ax = torch_dim(input, dim)
    if not isinstance(index, Tensor) or index.dtype not in (dt.int64, dt.int32):
        got = torch_scalar_name(index.dtype) if isinstance(index, Tensor) else type(index).__name__
        if long_only_msg is not None:
            raise long_only_msg(got)
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index but got: {got}")
    if index.ndim > 1:
        raise IndexError(f"{name}(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
                         f"{torch_scalar_name(index.dtype)} and size: {list(index.shape)}")
    return ax, index.reshape(-1).long()


def _source_shape(name, input, ax, index, source, copy=False):
    n = index.numel()
    src_n = source.shape[ax] if source.ndim else 1
    if input.ndim and source.ndim and n != src_n:
        if copy:
            raise IndexError(f"{name}(): Number of indices ({n}) should be equal to source.size(dim) ({src_n})")
        raise RuntimeError(f"{name}(): Number of indices ({n}) should be equal to source.size(dim): ({src_n}), for "
                           f"dim: {ax}")
    if input.ndim and source.ndim and (source.ndim != input.ndim or any(
            a != b for i, (a, b) in enumerate(zip(source.shape, input.shape)) if i != ax)):
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(input.shape)} source.shape = {list(source.shape)}")


def _along(input, ax, index, value, accumulate, oob=None):
    if input.ndim == 0:
        return _put_at(input.reshape(1), (index,), value.reshape(-1) if isinstance(value, Tensor) else value,
                       accumulate, oob).reshape(())
    return _put_at(input, (slice(None),) * ax + (index,), value, accumulate, oob)


@published("jitgrad", "Tensor")
def index_add(input, dim, index, source, *, alpha=1, **torch_kw):
    """``input`` plus ``alpha * source``'s slices along ``dim`` added at the positions the 1-d ``index`` names
    (repeated positions add up).  Differentiable: ``source``'s gradient is the incoming one gathered at ``index``."""
    if torch_kw:
        return torch_kwargs(index_add, "index_add", (input, dim, index, source), {"alpha": alpha}, torch_kw)
    ax, idx = _index_arg("index_add_", input, dim, index)
    _source_shape("index_add_", input, ax, idx, source)
    if source.dtype is not input.dtype:
        raise RuntimeError(f"index_add_(): self ({torch_scalar_name(input.dtype)}) and source "
                           f"({torch_scalar_name(source.dtype)}) must have the same scalar type")
    # torch refuses a negative index (Python indexing wraps it): checked eagerly and in compiled code
    idx, oob = checked_index(idx, input.shape[ax] if input.ndim else 1, ax, IN_DIM)
    if alpha != 1:
        source = source * (alpha if input.is_floating_point() else int(alpha))
    return named(_along(input, ax, idx, source, True, oob), "IndexAddBackward0")


@published("Tensor", name="index_add_")
def _index_add_(self, dim, index, source, *, alpha=1):
    """In place: writes ``index_add(self, dim, index, source, alpha=alpha)`` into ``self``."""
    return self._apply_inplace(lambda s, v: index_add(s, dim, index, v, alpha=alpha), source)


def _long_only(name):
    def err(got):
        return RuntimeError(f"{name}(): Expected a long tensor for index, but got {got}")
    return err


@published("jitgrad", "Tensor")
def index_copy(input, dim, index, source, **torch_kw):
    """``input`` with ``source``'s slices along ``dim`` copied to the positions the 1-d long ``index`` names."""
    if torch_kw:
        return torch_kwargs(index_copy, "index_copy", (input, dim, index, source), {}, torch_kw)
    ax, idx = _index_arg("index_copy_", input, dim, index, _long_only("index_copy_"))
    if index.dtype is not dt.int64:
        raise _long_only("index_copy_")(torch_scalar_name(index.dtype))
    _source_shape("index_copy_", input, ax, idx, source, copy=True)
    if source.dtype is not input.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{torch_scalar_name(input.dtype)} and (source) {torch_scalar_name(source.dtype)}")
    idx, oob = checked_index(idx, input.shape[ax] if input.ndim else 1, ax, IN_COPY)
    return named(_along(input, ax, idx, source, False, oob), "IndexCopyBackward0")


@published("Tensor", name="index_copy_")
def _index_copy_(self, dim, index, source):
    """In place: writes ``index_copy(self, dim, index, source)`` into ``self``."""
    return self._apply_inplace(lambda s, v: index_copy(s, dim, index, v), source)


@published("jitgrad", "Tensor")
def index_fill(input, dim, index, value, **torch_kw):
    """``input`` with ``value`` (a number or a 0-d tensor) written at the positions the 1-d long ``index`` names
    along ``dim``."""
    if torch_kw:
        return torch_kwargs(index_fill, "index_fill", (input, dim, index, value), {}, torch_kw)
    ax = torch_dim(input, dim)
    if not isinstance(index, Tensor) or index.dtype is not dt.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")
    idx = index.reshape(-1)
    name = "IndexFillBackward0"
    if isinstance(value, Tensor):
        value = value.to(input.dtype) if value.dtype is not input.dtype else value
        name = "IndexFillBackward1"
    elif not input.is_floating_point() and input.dtype is not dt.bool_:
        value = int(value)
    # a mask along ax, then where: a repeated index fills once, so a tensor value's gradient counts each filled
    # element once (an index_put of the value would add it per repeat)
    n = input.shape[ax] if input.ndim else 1
    # (negatives wrap, as torch's index_fill; traced, an index out of range raises torch's text, naming ``ax``)
    idx, oob = checked_index(idx, n, ax, ("IndexError", False, "index {value} is out of bounds for dimension "
                                          f"{ax} with size {{size}}", None))
    hit = _put_at(idx._same_device(Tensor._make(np.zeros(n, np.bool_))), (idx,), True, False, oob)
    if input.ndim:
        hit = hit.reshape((n,) + (1,) * (input.ndim - ax - 1))
    else:
        hit = hit.reshape(())
    return named(where(hit, value, input), name)


@published("Tensor", name="index_fill_")
def _index_fill_(self, dim, index, value):
    """In place: writes ``index_fill(self, dim, index, value)`` into ``self``."""
    if isinstance(value, Tensor):
        return self._apply_inplace(lambda s, v: index_fill(s, dim, index, v), value)
    return self._apply_inplace(lambda s: index_fill(s, dim, index, value))


# ---- masked_scatter, index_put, fill_diagonal_ -----------------------------------------------------------------
@published("jitgrad", "Tensor")
def masked_scatter(input, mask, source, **torch_kw):
    """``input`` with the positions where ``mask`` (bool, broadcast to ``input``) is True filled, in row-major
    order, by ``source``'s first elements.  A composition with no data-dependent shape (each position reads
    ``source`` at the running count of the mask), so it also compiles; ``source``'s gradient is the incoming
    one at the masked positions, in order, zeros after."""
    if torch_kw:
        return torch_kwargs(masked_scatter, "masked_scatter", (input, mask, source), {}, torch_kw)
    if not isinstance(mask, Tensor) or mask.dtype is not dt.bool_:
        got = torch_scalar_name(mask.dtype) if isinstance(mask, Tensor) else type(mask).__name__
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype {got}")
    if source.dtype is not input.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{torch_scalar_name(input.dtype)} and {torch_scalar_name(source.dtype)}")
    from ..linalg.products import _broadcast_shape
    shape = _broadcast_shape(tuple(mask.shape), tuple(input.shape))
    m = mask.expand(shape) if tuple(mask.shape) != shape else mask
    x = input.expand(shape) if tuple(input.shape) != shape else input
    if _concrete(m) and int(m._data.sum()) > source.numel():
        raise RuntimeError("Number of elements of source < number of ones in mask")
    if source.numel() == 0:         # then the mask has no True (checked above when concrete)
        return named(x.clone(), "MaskedScatterBackward0")
    pos = (m.reshape(-1).long().cumsum(0) - 1).clamp(0, source.numel() - 1)
    vals = source.reshape(-1)[pos].reshape(shape)
    return named(where(m, vals, x), "MaskedScatterBackward0")


@published("Tensor", name="masked_scatter_")
def _masked_scatter_(self, mask, source):
    """In place: writes ``masked_scatter(self, mask, source)`` into ``self`` (the mask broadcasts to ``self``)."""
    return self._apply_inplace(lambda s, v: masked_scatter(s, mask, v), source)


def _index_put_key(input, indices):
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"index_put(): argument 'indices' must be tuple of Tensors, not {type(indices).__name__}")
    for k, i in enumerate(indices):
        if not isinstance(i, Tensor):
            raise TypeError(f"expected Tensor as element {k} in argument 1, but got {type(i).__name__}")
    return tuple(indices)


@published("jitgrad", "Tensor")
def index_put(input, indices, values, accumulate=False, **torch_kw):
    """``input`` with ``values`` written (added with ``accumulate=True``, repeats adding up) at
    ``input[indices]``, ``indices`` a tuple of long or bool tensors, as torch.index_put."""
    if torch_kw:
        return torch_kwargs(index_put, "index_put", (input, indices, values, accumulate), {}, torch_kw)
    key = _index_put_key(input, indices)
    if isinstance(values, Tensor) and values.dtype is not input.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{torch_scalar_name(input.dtype)} for the destination and {torch_scalar_name(values.dtype)} "
                           f"for the source.")
    from ...runtime.mutation import parse_index
    spec, idx = parse_index(key, input)
    return named(bind(O["index_put"], input, values, *idx, spec=spec, accumulate=bool(accumulate)),
                 "IndexPutBackward0")


def _index_put_(self, indices, values, accumulate=False):
    """In place: writes ``index_put(self, indices, values, accumulate)`` into ``self``."""
    return self._apply_inplace(lambda s, v: index_put(s, indices, v, accumulate), values)


def _diagonal_positions(shape, wrap):
    if len(shape) < 2:
        raise RuntimeError("dimensions must larger than 1")
    if len(shape) > 2 and len(set(shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    if len(shape) > 2:
        step = sum(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        return np.arange(shape[0], dtype=np.int64) * step
    r, c = shape
    end = r * c if wrap and r > c else min(r, c) * c
    return np.arange(0, end, c + 1, dtype=np.int64)


@published("Tensor", name="fill_diagonal_")
def _fill_diagonal_(self, fill_value, wrap=False):
    """In place: ``fill_value`` on the main diagonal of ``self`` (all dims equal for more than 2 dims); ``wrap``:
    a tall matrix's diagonal starts again every ``ncols + 1`` rows, as NumPy's fill_diagonal."""
    pos = _diagonal_positions(tuple(self.shape), wrap)
    if not self.is_floating_point() and self.dtype is not dt.bool_:
        fill_value = int(fill_value)
    shape = tuple(self.shape)
    return self._apply_inplace(lambda s: _put_at(s.reshape(-1), (s._same_device(Tensor._make(pos)),), fill_value,
                                                 False).reshape(shape))


index_put_ = published("jitgrad", "Tensor", name="index_put_")(_index_put_)


__all__ = ["take", "put", "index_add", "index_copy", "index_fill", "masked_scatter", "index_put", "index_put_"]
