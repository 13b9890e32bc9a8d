"""Losses on logits and log-probabilities: ``F.binary_cross_entropy_with_logits`` (``weight``, ``pos_weight``)
and ``F.kl_div`` (``reduction='batchmean'``, ``log_target``).  Compositions of primitives (``logsigmoid``, exp,
log, where), so they differentiate to any order and compile.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.binary_cross_entropy_with_logits(jg.tensor([0.0]), jg.tensor([1.0]))
tensor(0.6931)
"""
from __future__ import annotations

import warnings

from ..library import elementary as F
from ..runtime.grad_names import named
from ..library.torch_kwargs import torch_kwargs
from . import loss_reduction
from .smooth_activations import logsigmoid


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None, **torch_kw):
    """Binary cross entropy of ``sigmoid(input)`` against ``target`` in [0, 1], computed from the logits
    (``(1 - t) * x - log_sigmoid(x)``, stable on both tails).  ``weight`` scales each element's loss (broadcast),
    ``pos_weight`` the positive term (one per class, the last dim).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.binary_cross_entropy_with_logits(jg.tensor([2.0, -1.0]), jg.tensor([1.0, 0.0]), reduction="sum")
    tensor(0.4402)
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(binary_cross_entropy_with_logits, "binary_cross_entropy_with_logits",
                            (input, target, weight, size_average, reduce, reduction, pos_weight), {}, torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({_size(target)}) must be the same as input size ({_size(input)})")
    loss_reduction.check(reduction)
    log_p = logsigmoid(input)
    if pos_weight is None:
        loss = (1 - target) * input - log_p
    else:
        # -(pw * t * log(sig(x)) + (1 - t) * log(1 - sig(x))), with log(1 - sig(x)) = log_sig(x) - x
        loss = (1 - target) * input - ((pos_weight - 1) * target + 1) * log_p
    if weight is not None:
        loss = loss * weight
    return named(loss_reduction.reduce_loss(loss, reduction), "BinaryCrossEntropyWithLogitsBackward0")


def _size(t):
    return f"torch.Size([{', '.join(map(str, t.shape))}])"


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False, **torch_kw):
    """Kullback-Leibler divergence ``target * (log(target) - input)`` summed as ``reduction`` says, with ``input``
    log-probabilities and ``target`` probabilities (or log-probabilities with ``log_target=True``).
    ``'batchmean'`` divides the sum by the batch size (the KL divergence per sample); torch's ``'mean'`` divides by
    the number of elements, and warns.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.kl_div(jg.tensor([[0.5, 0.5]]).log(), jg.tensor([[0.5, 0.5]]), reduction="batchmean")
    tensor(0.)
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(kl_div, "kl_div", (input, target, size_average, reduce, reduction, log_target), {},
                            torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      stacklevel=2)
    loss_reduction.check(reduction, ("mean", "sum", "none", "batchmean"))
    if log_target:
        loss = F.exp(target) * (target - input)
    else:
        # xlogy(t, t): 0 where t == 0 (its log is taken of 1 there, so the unselected branch stays finite)
        zero = target == 0
        loss = F.where(zero, 0.0, target * F.log(F.where(zero, 1.0, target))) - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / input.shape[0] if input.ndim else total
    return loss_reduction.reduce_loss(loss, reduction)


__all__ = ["binary_cross_entropy_with_logits", "kl_div"]
