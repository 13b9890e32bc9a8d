"""``F.embedding_bag`` and ``nn.EmbeddingBag``: the sum, mean or max of bags of embedding rows, without
materialising the per-bag sequences, with torch 2.13's arguments, checks and error texts.

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

from ..ir import dtypes as dt
from ..library.creation import factories
from ..runtime.grad_names import named
from ..runtime.tensor import Tensor
from ..library.torch_kwargs import torch_kwargs
from . import init
from .layers import _empty
from .module import Module
from .parameter import Parameter

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
    if _concrete(offsets) and offsets.numel() and int(offsets._data[0]) != 0:
        kind = "torch.LongTensor" if offsets.dtype is dt.int64 else "torch.IntTensor"
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
                           f"position 0. However, got {int(offsets._data[0])}\n[ {kind}{{}} ]")
    if _concrete(input) and input.numel():
        bad = np.nonzero((input._data < 0) | (input._data >= V))[0]
        if bad.size:
            raise RuntimeError(f"Index {int(bad[0])} of input takes value {int(input._data[bad[0]])} which is not in "
                               f"the valid range [0, {V})")
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
    rows = weight.index_select(0, input.reshape(-1).to(dt.int64))
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


class EmbeddingBag(Module):
    """Sums, averages or takes the maximum of bags of embeddings (``F.embedding_bag`` over a ``weight
    (num_embeddings, embedding_dim)`` initialised N(0, 1), the ``padding_idx`` row zero);
    ``forward(input, offsets=None, per_sample_weights=None)``.

    >>> import jitgrad as jg
    >>> bag = jg.nn.EmbeddingBag(10, 3, mode="sum")
    >>> bag(jg.tensor([1, 2, 4, 5, 4, 3]), jg.tensor([0, 4])).shape
    jitgrad.Size([2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, _weight=None,
                 include_last_offset: bool = False, padding_idx=None, device=None, dtype=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("jitgrad.nn.EmbeddingBag: max_norm, scale_grad_by_freq and sparse are not "
                                      "supported")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        if padding_idx is not None:
            if padding_idx > 0:
                assert padding_idx < self.num_embeddings, "padding_idx must be within num_embeddings"
            elif padding_idx < 0:
                assert padding_idx >= -self.num_embeddings, "padding_idx must be within num_embeddings"
                padding_idx = self.num_embeddings + padding_idx
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(_empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
            self.reset_parameters()
        else:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight)
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            from ..runtime import grad_mode
            with grad_mode.no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input, offsets=None, per_sample_weights=None):
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                             self.mode, self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        s += f", mode='{self.mode}'"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                        mode="mean", sparse=False, include_last_offset=False, padding_idx=None):
        """An EmbeddingBag whose weight is ``embeddings`` (2-D), frozen unless ``freeze=False``."""
        if embeddings.dim() != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings, include_last_offset,
                  padding_idx)
        bag.weight.requires_grad = not freeze
        return bag


__all__ = ["embedding_bag", "EmbeddingBag"]
