"""Embedding lookups: ``F.embedding``, ``F.one_hot`` and ``F.embedding_bag``.

``embedding_bag`` is the sum, mean or max of bags of embedding rows, without materialising the per-bag
sequences, with torch 2.13's arguments, checks and error texts.

A composition: the rows ``weight[input]`` (their gradient an index-add into the weight), each entry's bag number
computed from ``offsets`` with a comparison (``#{offsets <= i} - 1``, so it traces with symbolic offsets), then
an ``index_add`` per bag (``sum``; ``mean`` divides by the bag's count, an empty bag giving zeros) or a
``scatter_reduce`` ``amax`` (``max``; the gradient goes to the maximum).  Entries equal to ``padding_idx`` (and,
with ``include_last_offset``, entries past the last offset) go to no bag.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> w = jg.arange(6.).reshape(3, 2)
>>> F.embedding_bag(jg.tensor([0, 1, 2, 2]), w, jg.tensor([0, 3]), mode="sum").tolist()
[[6.0, 9.0], [4.0, 5.0]]
"""
from __future__ import annotations

import numpy as np

from ...ir import dtypes as dt
from ...library import elementary as F
from ...library.creation import factories
from ...library.creation.factories import arange, eye
from ...runtime.checked_index import CLASS, IN_BAG, IN_SELF
from ...runtime.grad_names import named
from ...library.shaping.views import getitem_checked
from ...runtime.tensor import Tensor
from ...library.torch_kwargs import torch_kwargs


def embedding(input, weight, padding_idx=None, **torch_kw):
    """Rows of ``weight`` picked by the integer tensor ``input``; the ``padding_idx`` row gets no gradient."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(embedding, 'embedding', (input, weight, padding_idx), {}, torch_kw)
    if input.dtype.name not in ("int64", "int32"):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {input.dtype.name} instead (while checking arguments for embedding)")
    out = getitem_checked(weight, (input,), IN_SELF)     # torch refuses negative indices (Python would wrap)
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += weight.shape[0]
        pad = (input == padding_idx).unsqueeze(-1)
        out = F.where(pad, out.detach(), out)
    return out


def one_hot(tensor, num_classes=-1, **torch_kw):
    """``[..., num_classes]`` int64 tensor with a 1 at each value of ``tensor`` (an int64 tensor of class
    indices); ``num_classes=-1`` takes the largest value plus one (which reads the values: not inside
    ``@jitgrad.compile``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(one_hot, 'one_hot', (tensor, num_classes), {}, torch_kw)
    if not isinstance(tensor, Tensor) or tensor.dtype is not dt.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    concrete = type(tensor._data) is np.ndarray
    if num_classes == -1:
        if tensor.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(tensor.max().item()) + 1
    elif num_classes < -1:
        raise RuntimeError("num_classes should be positive")
    if concrete and tensor.numel():
        if tensor._data.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if tensor._data.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    if concrete:
        classes = arange(int(num_classes), dtype=dt.int64)
        return (tensor.unsqueeze(-1) == classes).to(dt.int64)
    # traced: rows of the identity, range-checked, so compiled code raises torch's errors too
    return getitem_checked(eye(int(num_classes), dtype=dt.int64), (tensor,), CLASS)


_TYPE = {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor", "int64": "torch.LongTensor",
         "int32": "torch.IntTensor", "bool": "torch.BoolTensor"}


def _concrete(t):
    return isinstance(t, Tensor) and type(t._data) is np.ndarray


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None, **torch_kw):
    """Per bag, the ``mode`` (``'sum'``, ``'mean'``, ``'max'``) of the rows of ``weight`` at ``input``: a 2-D
    ``input`` is one bag per row; a 1-D one is cut into bags at ``offsets`` (their starts; with
    ``include_last_offset`` the last offset ends the last bag).  ``per_sample_weights`` scales each row
    (``'sum'`` only); entries equal to ``padding_idx`` are left out.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.embedding_bag(jg.tensor([[0, 2], [1, 1]]), jg.eye(3)).tolist()
    [[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(embedding_bag, "embedding_bag", (input, weight, offsets, max_norm, norm_type,
                                                             scale_grad_by_freq, mode, sparse, per_sample_weights,
                                                             include_last_offset, padding_idx), {}, torch_kw)
    if weight.dtype is dt.int64 and input.is_floating_point():     # torch's legacy argument order
        input, weight = weight, input
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("jitgrad.nn.functional.embedding_bag: max_norm, scale_grad_by_freq and sparse are "
                                  "not supported")
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights (torch.Size({list(per_sample_weights.shape)})) is not "
                         f"None, then it must have the same shape as the input (torch.Size({list(input.shape)}))")
    if weight.ndim != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if input.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {_TYPE.get(input.dtype.name, input.dtype.name)} instead (while "
                           f"checking arguments for embedding_bag)")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             f"fixed length sequences. However, found offsets of type {type(offsets)}")
        B, L = input.shape
        offsets = factories.arange(0, B * L, max(L, 1), dtype=input.dtype, device=input.device)[:B]
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
                                  f"GitHub.")
    if offsets.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"Expected tensor for argument #2 'offsets' to have one of the following scalar types: "
                           f"Long, Int; but got {_TYPE.get(offsets.dtype.name, offsets.dtype.name)} instead (while "
                           f"checking arguments for embedding_bag)")
    V = weight.shape[0]
    if _concrete(input) and input.numel():
        bad = np.nonzero((input._data < 0) | (input._data >= V))[0]
        if bad.size:        # torch's two texts: float32 sum/mean bags name the position (compiled: the other)
            k, v = int(bad[0]), int(input._data[bad[0]])
            raise RuntimeError(f"Index {k} of input takes value {v} which is not in the valid range [0, {V})"
                               if mode != "max" and weight.dtype is dt.float32 else IN_BAG[2].format(value=v))
    if _concrete(offsets) and offsets.numel() and int(offsets._data[0]) != 0:
        kind = "torch.LongTensor" if offsets.dtype is dt.int64 else "torch.IntTensor"
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {int(offsets._data[0])}\n[ {kind}{{}} ]")
    if padding_idx is not None:
        if not -V <= padding_idx < V:
            raise AssertionError("padding_idx must be within weight")
        padding_idx = padding_idx + V if padding_idx < 0 else padding_idx
    starts = offsets.to(dt.int64)
    n = input.shape[0]
    pos = factories.arange(n, dtype=dt.int64, device=input.device)
    valid = None
    if include_last_offset:
        starts, end = starts[:-1], starts[-1:]
        valid = pos < end
    B = starts.shape[0]
    bag = (pos.unsqueeze(1) >= starts.unsqueeze(0)).to(dt.int64).sum(1) - 1
    if padding_idx is not None:
        keep = input != padding_idx
        valid = keep if valid is None else valid & keep
    # entries in no bag (padding, past the last offset) go to an extra bag B, dropped at the end
    if valid is not None:
        bag = bag.where(valid, B)
    rows = getitem_checked(weight, (input.reshape(-1).to(dt.int64),), IN_BAG)     # torch's range check and text
    D = weight.shape[1]
    if mode == "max":
        out = factories.zeros(B + 1, D, dtype=weight.dtype, device=weight.device)
        out = out.scatter_reduce(0, bag.unsqueeze(1).expand(n, D), rows, "amax", include_self=False)
        return named(out[:B], "EmbeddingBagBackward0")
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    out = factories.zeros(B + 1, D, dtype=rows.dtype, device=weight.device).index_add(0, bag, rows)[:B]
    if mode == "mean":
        ones = factories.ones(n, dtype=weight.dtype, device=weight.device)
        count = factories.zeros(B + 1, dtype=weight.dtype, device=weight.device).index_add(0, bag, ones)[:B]
        out = out / count.clamp(min=1).unsqueeze(1)
    return named(out, "EmbeddingBagBackward0")


__all__ = ["embedding", "one_hot", "embedding_bag"]
