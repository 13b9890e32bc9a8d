"""Index tensors checked as torch's index-taking ops check them.

Python's indexing (``x[idx]``) wraps a negative index; torch's embedding, embedding_bag, index_select, gather,
scatter, index_add, index_copy, one_hot and nll_loss refuse it, and each op raises its own error for an index out
of range (take and put wrap negatives, with their own error past the ends).  Eagerly the check runs on the
index's values before the op.  Traced (and on a device) the index is bound range-checked instead
(``ir/ops/index.py``'s ``oob`` param: negatives shifted by ``-size``, torch's message), so the interpreter and
the compiled kernels' bounds checks raise the same error, with no state written back.  (A range-checked
``getitem`` is ``shaping.getitem_checked``.)
"""
from __future__ import annotations

import numpy as np

from ..ir.ops.index import oob_error

# torch's errors: (exception, shifted (negatives refused), template over value/dim/size, template for negatives)
IN_SELF = ("IndexError", True, "index out of range in self", None)                  # embedding, index_select
IN_DIM = ("RuntimeError", True, "index {value} is out of bounds for dimension {dim} with size {size}", None)
IN_BAG = ("RuntimeError", True,
          "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be {value}", None)
IN_COPY = ("IndexError", True, "index_copy_(): index {value} is out of bounds for dimension {dim} with size {size}",
           None)
CLASS = ("RuntimeError", True, "Class values must be smaller than num_classes.", "Class values must be non-negative.")
TARGET = ("IndexError", True, "Target {value} is out of bounds.", None)             # nll_loss, cross_entropy
FLAT = ("IndexError", False, "out of range: tried to access index {value} on a tensor of {size} elements.", None)


def checked_index(index, size: int, axis: int, oob):
    """-> (the index to bind, the ``oob`` param or None).  A concrete index is checked now (torch's error for a
    value out of range) and bound as it is; a traced or device one comes back to be bound with ``oob`` (its
    negative values shifted by ``-size`` where ``oob`` refuses them)."""
    d = index._data
    if type(d) is np.ndarray:
        lo = 0 if oob[1] else -size
        if d.size and (d.min() < lo or d.max() >= size):
            v = int(d[(d < lo) | (d >= size)].flat[0])
            raise oob_error(oob, v - size if v < 0 and oob[1] else v, axis, size)
        return index, None
    if not oob[1]:
        return index, oob
    return (index - size).where(index < 0, index), oob


def grid_checked(input, key, ax: int, oob):
    """-> (key, ``oob`` param or None): the gather/scatter index grid ``key`` (``shaping.index_grid``) with its
    entry ``ax`` checked against ``input``'s dim ``ax``."""
    k, o = checked_index(key[ax], input.shape[ax], ax, oob)
    return (list(key[:ax]) + [k] + list(key[ax + 1:])), o


__all__ = ["IN_SELF", "IN_DIM", "IN_BAG", "IN_COPY", "CLASS", "TARGET", "FLAT", "checked_index", "grid_checked"]
