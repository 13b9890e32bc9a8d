"""Parameter plumbing shared by the distributions (torch.distributions.utils): broadcasting numbers and tensors
together, probabilities <-> logits, a cached property for derived parameters, and the draws every sampler is
built from (uniform and standard normal numbers from jitgrad's default generator, so the same code runs
eagerly and inside ``@jitgrad.compile``)."""
from __future__ import annotations

from functools import update_wrapper
from numbers import Number

import numpy as np

from ..ir import dtypes as dt
from ..runtime.tensor import Tensor
from ..library.creation import sampling as _sampling
import jitgrad as _jg


def is_concrete(t) -> bool:
    """True when ``t`` holds values now (eager), False for a traced (symbolic) tensor inside ``@compile``."""
    return not isinstance(t, Tensor) or type(t._data) is np.ndarray


def broadcast_all(*values):
    """Numbers and tensors broadcast to one shape; numbers become tensors of the first tensor's dtype (the
    default float dtype when there is none)."""
    if not all(isinstance(v, (Tensor, Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, torch.Tensor or objects "
                         "implementing __torch_function__.")
    if not all(isinstance(v, Tensor) for v in values):
        ref = next((v for v in values if isinstance(v, Tensor)), None)
        d = ref.dtype if ref is not None else dt.DEFAULT_FLOAT
        values = [v if isinstance(v, Tensor) else _jg.tensor(v, dtype=d) for v in values]
    return _jg.broadcast_tensors(*values)


def as_size(shape) -> "_jg.Size":
    if isinstance(shape, int):
        shape = (shape,)
    return _jg.Size(tuple(int(s) for s in shape))


def eps_of(t) -> float:
    return float(np.finfo(dt.as_dtype(t.dtype).np).eps)


def tiny_of(t) -> float:
    return float(np.finfo(dt.as_dtype(t.dtype).np).tiny)


def clamp_probs(probs):
    """Probabilities clamped into [eps, 1 - eps] of their dtype."""
    eps = eps_of(probs)
    return probs.clamp(min=eps, max=1 - eps)


def logits_to_probs(logits, is_binary=False):
    """sigmoid(logits) for a binary distribution, softmax over the last dim otherwise."""
    if is_binary:
        return _jg.sigmoid(logits)
    return _jg.softmax(logits, dim=-1)


def probs_to_logits(probs, is_binary=False):
    """The logits of probabilities (log-odds for a binary distribution, log-probabilities otherwise)."""
    ps_clamped = clamp_probs(probs)
    if is_binary:
        return _jg.log(ps_clamped) - _jg.log1p(-ps_clamped)
    return _jg.log(ps_clamped)


class lazy_property:
    """A property computed on first access and then stored on the instance (so ``probs`` of a distribution
    built from ``logits`` is derived once, and only when asked for)."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        update_wrapper(self, wrapped)

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with _jg.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def sum_rightmost(value, dim: int):
    """Sum out the ``dim`` rightmost dimensions of ``value``."""
    if dim == 0:
        return value
    return value.reshape(value.shape[:value.dim() - dim] + (-1,)).sum(-1)


def standard_normal(shape, like) -> Tensor:
    """Standard normal draws of ``shape`` in ``like``'s dtype, without gradient."""
    with _jg.no_grad():
        return _sampling._normal(tuple(shape), like.dtype, None)


def standard_uniform(shape, like) -> Tensor:
    """Uniform draws in [0, 1) of ``shape`` in ``like``'s dtype, without gradient."""
    with _jg.no_grad():
        return _sampling._uniform(tuple(shape), like.dtype, None)


def open_uniform(shape, like) -> Tensor:
    """Uniform draws in (0, 1): [0, 1) draws clamped away from 0 by the dtype's tiny."""
    return standard_uniform(shape, like).clamp(min=tiny_of(like))
