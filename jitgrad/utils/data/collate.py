"""``default_collate``: a list of samples -> one batch (tensors stacked on a new first dim, numbers to tensors,
containers collated field by field), as torch's."""
from __future__ import annotations

import collections.abc

import numpy as np

from ...runtime.tensor import Tensor


def _stack(items):
    from ...library.elementary import stack
    return stack(items, 0)


def default_collate(batch):
    """Collate a list of samples into a batch, recursively through tuples, lists, dicts and named tuples."""
    from ...library.creation.factories import tensor
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _stack(batch)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "OSU":
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                            f"found {elem.dtype}")
        return _stack([tensor(b) for b in batch])
    if isinstance(elem, np.generic):
        return tensor(np.array(batch))
    if isinstance(elem, bool):
        return tensor(batch)
    if isinstance(elem, float):
        return tensor(batch, dtype=__import__("jitgrad").float64)
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        out = {k: default_collate([d[k] for d in batch]) for k in elem}
        try:
            return out if type(elem) is dict else type(elem)(out)
        except TypeError:       # a mapping type that cannot be built from a dict
            return out
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        n = len(elem)
        if any(len(b) != n for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        cols = [default_collate(list(s)) for s in zip(*batch)]
        return tuple(cols) if isinstance(elem, tuple) else cols
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(elem)}")


def default_convert(data):
    """What a DataLoader without batching returns: NumPy arrays become tensors, containers are walked."""
    from ...library.creation.factories import tensor
    if isinstance(data, np.ndarray) and data.dtype.kind not in "OSU":
        return tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(default_convert(d) for d in data)
    return data
