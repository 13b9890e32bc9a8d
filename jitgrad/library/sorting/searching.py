"""torch's lookups into a set of values: ``searchsorted``, ``bucketize`` and ``isin``.

Each binds one primitive of ``ir/ops/sort.py`` (``searchsorted``, ``isin``): integer or bool results that never
require grad (torch's too), computed by NumPy, and run in compiled code as a Python step of the graph (the output
shape does not depend on the data, so they trace).
"""
from __future__ import annotations

from ...declarations import published
from ...ir.ops import OPS
from ...runtime.dispatch import bind
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _as_tensor(x, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    from ..creation.factories import tensor
    if like is not None and isinstance(x, (int, float)) and not isinstance(x, bool):
        # a Python number beside a tensor takes the tensor's dtype where it fits (torch's scalar overloads)
        return tensor(x, dtype=like.dtype if (like.is_floating_point() or isinstance(x, int)) else None)
    return tensor(x)


@published("jitgrad")
def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None, **torch_kw):
    """For each value of ``input``, the index in the last dim of ``sorted_sequence`` where inserting it keeps
    that dim sorted (torch.searchsorted).  ``right=True`` / ``side="right"``: after elements equal to it.
    ``sorter``: indices that sort ``sorted_sequence`` along its last dim (it need not be sorted then).
    ``sorted_sequence`` is 1-D, or has the leading dims of ``input``."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(searchsorted, "searchsorted", (sorted_sequence, input),
                            {"out_int32": out_int32, "right": right, "side": side, "sorter": sorter}, torch_kw)
    if not isinstance(sorted_sequence, Tensor):
        raise TypeError(f"searchsorted(): argument 'sorted_sequence' (position 1) must be Tensor, not "
                        f"{type(sorted_sequence).__name__}")
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    scalar = not isinstance(input, Tensor)
    values = _as_tensor(input, sorted_sequence)
    if scalar and sorted_sequence.ndim != 1:
        raise RuntimeError(f"searchsorted(): input value can be a scalar only when boundaries tensor dimension is "
                           f"1, but we got boundaries tensor dim({sorted_sequence.ndim}) and input value's dim(0) "
                           "numel(1)")
    if sorter is not None:
        if not isinstance(sorter, Tensor) or sorter.dtype.name != "int64":
            raise RuntimeError("torch.searchsorted(): sorter must be a tensor of long dtype")
        if tuple(sorter.shape) != tuple(sorted_sequence.shape):
            raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same size, but got "
                               f"boundary tensor {list(sorted_sequence.shape)}and got sorter tensor "
                               f"{list(sorter.shape)}")
        sorted_sequence = sorted_sequence.gather(-1, sorter)
    return bind(OPS["searchsorted"], sorted_sequence, values, right=bool(right),
                out_int32=bool(out_int32))


@published("jitgrad")
def bucketize(input, boundaries, *, out_int32=False, right=False, **torch_kw):
    """The bucket of each value of ``input`` among the 1-D ascending ``boundaries`` (torch.bucketize):
    ``i`` with ``boundaries[i-1] < x <= boundaries[i]``, or ``boundaries[i-1] <= x < boundaries[i]`` with
    ``right=True``."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(bucketize, "bucketize", (input, boundaries),
                            {"out_int32": out_int32, "right": right}, torch_kw)
    if not isinstance(boundaries, Tensor) or boundaries.ndim != 1:
        raise RuntimeError(f"bucketize: boundaries tensor must be 1 dimension, but got dim("
                           f"{getattr(boundaries, 'ndim', 0)})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


@published("jitgrad")
def isin(elements, test_elements, *, assume_unique=False, invert=False, **torch_kw):
    """Whether each element of ``elements`` occurs in ``test_elements`` (bool, ``elements``' shape; torch.isin).
    Either may be a Python number; ``invert=True`` gives the opposite."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(isin, "isin", (elements, test_elements),
                            {"assume_unique": assume_unique, "invert": invert}, torch_kw)
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin(): at least one of 'elements' and 'test_elements' must be a Tensor")
    el = _as_tensor(elements, test_elements if isinstance(test_elements, Tensor) else None)
    test = _as_tensor(test_elements, el)
    return bind(OPS["isin"], el, test, invert=bool(invert))


__all__ = ["searchsorted", "bucketize", "isin"]
