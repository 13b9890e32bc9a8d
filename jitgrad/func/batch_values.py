"""Values under ``vmap``'s batching interpreter: a tensor whose batch dim, when it has one, is in front.  The
helpers the batching rules share (``batching.py``, and the indexing rules of ``index_rules.py``)."""
from __future__ import annotations

import numpy as np

from ..ir.ops import OPS
from ..runtime.dispatch import bind
from ..runtime.tensor import Tensor


def bind_op(name, *args, **params):
    """Bind the primitive named ``name``."""
    return bind(OPS[name], *args, **params)


def outs(r) -> list:
    """A bound primitive's results as a list (one output, or a tuple of them)."""
    return list(r) if isinstance(r, tuple) else [r]


def to_batched(t, b, B, pe_shape):
    """``t`` with the batch dim in front (broadcast when unbatched)."""
    if b:
        return t
    if not isinstance(t, Tensor):
        t = Tensor._make(np.asarray(t, dtype=None))
    return bind_op("broadcast_to", t, shape=(B,) + tuple(pe_shape))


def align(t, B, pe_rank, want):
    """A batched tensor of per-example rank ``pe_rank`` with size-1 dims after the batch up to rank ``want``."""
    if pe_rank >= want:
        return t
    return bind_op("reshape", t, shape=(B,) + (1,) * (want - pe_rank) + tuple(t.shape[1:]))


__all__ = ["bind_op", "outs", "to_batched", "align"]
