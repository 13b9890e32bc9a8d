"""Margin and embedding losses: ``F.margin_ranking_loss``, ``F.hinge_embedding_loss``, ``F.cosine_embedding_loss``,
``F.soft_margin_loss``, ``F.multi_margin_loss`` and ``F.triplet_margin_loss``, with torch's formulas, checks and
reductions (and the deprecated ``size_average``/``reduce``).  Compositions of primitives, so they differentiate
to any order and compile.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.margin_ranking_loss(jg.tensor([1.0, 2.0]), jg.tensor([2.0, 1.0]), jg.tensor([1.0, 1.0]))
tensor(0.5000)
"""
from __future__ import annotations

import numpy as np

from ...library import elementary as F
from ...library.creation.factories import arange
from ...library.torch_kwargs import torch_kwargs
from .. import loss_reduction as R
from .distance import pairwise_distance


def _size(t):
    return f"torch.Size([{', '.join(map(str, t.shape))}])"


def _concrete(t):
    d = getattr(t, "_data", None)
    return d if type(d) is np.ndarray else None


def margin_ranking_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean",
                        **torch_kw):
    """``max(0, -target * (input1 - input2) + margin)``, ``target`` in {1, -1}."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(margin_ranking_loss, 'margin_ranking_loss',
                            (input1, input2, target, margin, size_average, reduce, reduction), {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    if input1.ndim != input2.ndim or input1.ndim != target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {_size(input1)}, input2: {_size(input2)}, target: {_size(target)} ")
    R.check(reduction)
    return R.reduce_loss((-target * (input1 - input2) + margin).clamp_min(0), reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean", **torch_kw):
    """``input`` where ``target == 1``, ``max(0, margin - input)`` where ``target == -1``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(hinge_embedding_loss, 'hinge_embedding_loss',
                            (input, target, margin, size_average, reduce, reduction), {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    R.check(reduction)
    margin_clamp = (margin - input).clamp_min(0)
    loss = F.where(target != 1, margin_clamp, 0.0) + F.where(target != -1, input, 0.0)
    return R.reduce_loss(loss, reduction)


def cosine_embedding_loss(input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean",
                          **torch_kw):
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where ``target == -1`` (cosine
    along the last dim, each squared norm shifted by 1e-12 as torch)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cosine_embedding_loss, 'cosine_embedding_loss',
                            (input1, input2, target, margin, size_average, reduce, reduction), {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    td = target.ndim
    if td == 1 and (input1.ndim != 2 or input2.ndim != 2):
        raise RuntimeError(f"1D target tensor expects 2D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    if td == 0 and (input1.ndim != 1 or input2.ndim != 1):
        raise RuntimeError(f"0D target tensor expects 1D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    if td > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    R.check(reduction)
    eps = 1e-12
    prod = (input1 * input2).sum(td)
    m1 = (input1 * input1).sum(td) + eps
    m2 = (input2 * input2).sum(td) + eps
    cos = prod / F.sqrt(m1 * m2)
    loss = F.where(target == 1, 1 - cos, 0.0) + F.where(target == -1, (cos - margin).clamp_min(0), 0.0)
    return R.reduce_loss(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean", **torch_kw):
    """Two-class logistic loss ``log(1 + exp(-target * input))``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(soft_margin_loss, 'soft_margin_loss', (input, target, size_average, reduce, reduction),
                            {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    R.check(reduction)
    return R.reduce_loss(F.log1p(F.exp(-input * target)), reduction)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean", **torch_kw):
    """Multi-class hinge loss: ``sum_{j != y} max(0, margin - x[y] + x[j])**p / C`` per sample (``p`` 1 or 2),
    scaled by ``weight[y]``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(multi_margin_loss, 'multi_margin_loss',
                            (input, target, p, margin, weight, size_average, reduce, reduction), {}, torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    R.check(reduction)
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    unbatched = input.ndim <= 1
    x = input.reshape(1, -1) if unbatched else input
    if x.ndim != 2:
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    n, c = x.shape
    if target.numel() != n or target.ndim > 1:
        raise RuntimeError(f"multi_margin_loss: target tensor should be 1-D with size equal to the number of input "
                           f"samples (batch size). Expected target size [{n}], but got {list(target.shape)}. Input "
                           f"has shape {list(input.shape)}.")
    t = target.reshape(n)
    tv = _concrete(t)
    if tv is not None and tv.size and (tv.min() < 0 or tv.max() >= c):
        raise RuntimeError("target out of range")
    xy = x.gather(1, t.unsqueeze(1))
    z = x - xy + margin
    h = F.where(z > 0, z, 0.0)
    if p == 2:
        h = h * h
    other = t.unsqueeze(1) != arange(c, device=x.device).unsqueeze(0)
    h = F.where(other, h, 0.0)
    if weight is not None:
        h = h * weight.index_select(0, t).unsqueeze(1)
    loss = h.sum(1) / c
    if unbatched and reduction == "none":
        loss = loss.reshape(())
    return R.reduce_loss(loss, reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean", **torch_kw):
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` the pairwise p-norm distance; ``swap`` uses
    ``min(d(a, n), d(p, n))`` as the negative distance."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(triplet_margin_loss, 'triplet_margin_loss',
                            (anchor, positive, negative, margin, p, eps, swap, size_average, reduce, reduction), {},
                            torch_kw)
    reduction = R.resolve(size_average, reduce, reduction)
    R.check(reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = F.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return R.reduce_loss((margin + d_pos - d_neg).clamp_min(0), reduction)


__all__ = ["margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss", "soft_margin_loss",
           "multi_margin_loss", "triplet_margin_loss"]
