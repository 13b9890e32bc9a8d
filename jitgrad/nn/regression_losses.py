"""Losses on values and probabilities: ``F.smooth_l1_loss`` (``beta``), ``F.huber_loss`` (``delta``, ``weight``),
``F.binary_cross_entropy`` (torch's clamp of each log at -100), ``F.gaussian_nll_loss``, ``F.poisson_nll_loss``
and ``F.multilabel_soft_margin_loss``.  Compositions of primitives with torch's reductions (and the deprecated
``size_average``/``reduce``), so they differentiate to any order and compile.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.smooth_l1_loss(jg.tensor([0.0, 3.0]), jg.tensor([0.5, 0.0]), reduction="none")
tensor([0.1250, 2.5000])
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..library import elementary as F
from ..library.creation.factories import full_like
from ..runtime.grad_names import named
from ..library.torch_kwargs import torch_kwargs
from . import loss_reduction as R
from .smooth_activations import logsigmoid


def _size(t):
    return f"torch.Size([{', '.join(map(str, t.shape))}])"


def warn_size(input, target, stacklevel=3):
    """torch's warning when a pointwise loss broadcasts ``target`` against ``input`` of another shape."""
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(f"Using a target size ({_size(target)}) that is different to the input size ({_size(input)}). "
                      "This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", stacklevel=stacklevel)


def _concrete(t):
    d = getattr(t, "_data", None)
    return d if type(d) is np.ndarray else None


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0, **torch_kw):
    """``0.5 * d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 * beta`` (``d = input - target``); ``beta=0``
    is the L1 loss."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(smooth_l1_loss, 'smooth_l1_loss', (input, target, size_average, reduce, reduction, beta),
                            {}, torch_kw)
    warn_size(input, target)
    reduction = R.resolve(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    R.check(reduction)
    d = input - target
    a = F.abs(d)
    loss = a if beta == 0 else F.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta)
    return named(R.reduce_loss(loss, reduction), "SmoothL1LossBackward0")


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None, **torch_kw):
    """``0.5 * d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 * delta)``; ``weight`` (input's shape)
    scales each element's loss."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(huber_loss, 'huber_loss', (input, target, reduction, delta, weight), {}, torch_kw)
    warn_size(input, target)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    if weight is not None and tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    if weight is None:
        R.check(reduction)
    elif reduction not in ("none", "mean", "sum"):
        raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")
    d = input - target
    a = F.abs(d)
    loss = F.where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)
    if weight is not None:
        loss = loss * weight
    return R.reduce_loss(loss, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                         **torch_kw):
    """``-weight * (t * log(x) + (1 - t) * log(1 - x))`` for probabilities ``x`` in [0, 1], each log clamped at
    -100 as torch does (a saturated ``x`` of exactly 0 or 1 gives a finite loss)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(binary_cross_entropy, 'binary_cross_entropy',
                            (input, target, weight, size_average, reduce, reduction), {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({_size(target)}) that is different to the input size "
                         f"({_size(input)}) is deprecated. Please ensure they have the same size.")
    R.check(reduction)
    x = _concrete(input)
    if x is not None and x.size and not ((x >= 0).all() and (x <= 1).all()):
        raise RuntimeError("all elements of input should be between 0 and 1")

    def clamped_log(v):
        # log(v) clamped at -100; v = 0 takes log(1) in the branch not selected, so no inf/NaN reaches the gradient
        pos = v > 0
        return F.where(pos, F.log(F.where(pos, v, 1.0)).clamp_min(-100.0), -100.0)
    loss = -(target * clamped_log(input) + (1 - target) * clamped_log(1 - input))
    if weight is not None:
        loss = loss * weight
    return named(R.reduce_loss(loss, reduction), "BinaryCrossEntropyBackward0")


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean", **torch_kw):
    """``0.5 * (log(var) + (input - target)**2 / var)`` (+ ``0.5 * log(2 pi)`` with ``full``); ``var`` is a float,
    one per element, or one per sample (one dim short, or one dim of size 1); it is clamped at ``eps`` (the
    gradient passes the clamp, as torch's in-place clamp under no_grad)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(gaussian_nll_loss, 'gaussian_nll_loss', (input, target, var, full, eps, reduction), {},
                            torch_kw)
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = full_like(input, var)
    else:
        v = _concrete(var)
        if v is not None and (v < 0).any():
            raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif input.ndim == var.ndim and sum(y for x, y in zip(input.shape, var.shape) if x != y) == 1:
            pass
        else:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = var + (var.clamp_min(eps) - var).detach()
    d = input - target
    loss = (F.log(var) + d * d / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return R.reduce_loss(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean", **torch_kw):
    """Poisson negative log likelihood: ``exp(input) - target * input`` (``log_input``), else
    ``input - target * log(input + eps)``; ``full`` adds Stirling's term where ``target > 1``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(poisson_nll_loss, 'poisson_nll_loss',
                            (input, target, log_input, full, size_average, eps, reduce, reduction), {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    R.check(reduction)
    if log_input:
        loss = F.exp(input) - target * input
    else:
        loss = input - target * F.log(input + eps)
    if full:
        big = target > 1
        t = F.where(big, target, 2.0)       # the masked entries take a harmless value (log(0) would be -inf)
        stirling = t * F.log(t) - t + 0.5 * F.log(t * (2 * math.pi))
        loss = loss + F.where(big, stirling, 0.0)
    return R.reduce_loss(loss, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                **torch_kw):
    """Multi-label one-versus-all logistic loss: ``-(t * logsigmoid(x) + (1 - t) * logsigmoid(-x))`` averaged over
    the classes (the last dim), ``weight`` per class."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(multilabel_soft_margin_loss, 'multilabel_soft_margin_loss',
                            (input, target, weight, size_average, reduce, reduction), {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    cdim = input.ndim - 1
    loss = loss.sum(cdim) / input.shape[cdim]
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    return R.reduce_loss(loss, reduction)


FUNCTIONS = ["smooth_l1_loss", "huber_loss", "binary_cross_entropy", "gaussian_nll_loss", "poisson_nll_loss",
             "multilabel_soft_margin_loss"]
__all__ = FUNCTIONS + ["warn_size"]
