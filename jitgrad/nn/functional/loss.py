"""The losses of ``jitgrad.nn.functional`` on classes, logits, values and probabilities, with torch's reductions
(and the deprecated ``size_average``/``reduce``):

- ``nll_loss`` and ``cross_entropy`` (class indices or class probabilities, ``label_smoothing``), ``mse_loss``,
  ``l1_loss``;
- on logits and log-probabilities: ``binary_cross_entropy_with_logits`` (``weight``, ``pos_weight``) and
  ``kl_div`` (``reduction='batchmean'``, ``log_target``);
- on values and probabilities: ``smooth_l1_loss`` (``beta``), ``huber_loss`` (``delta``, ``weight``),
  ``binary_cross_entropy`` (torch's clamp of each log at -100), ``gaussian_nll_loss``, ``poisson_nll_loss`` and
  ``multilabel_soft_margin_loss``.

Compositions of primitives (``nll_loss`` one fused primitive in eager CPU mode), so they differentiate to any
order and compile.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.binary_cross_entropy_with_logits(jg.tensor([0.0]), jg.tensor([1.0]))
tensor(0.6931)
>>> F.smooth_l1_loss(jg.tensor([0.0, 3.0]), jg.tensor([0.5, 0.0]), reduction="none")
tensor([0.1250, 2.5000])
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from ...ir import dtypes as dt
from ...ir.ops import OPS as O
from ...ir.ops.fused import nll_composition
from ...library import elementary as F
from ...runtime.bind_route import ROUTE as _ROUTE
from ...runtime.dispatch import bind
from ...runtime.flat_bind import flat_entry
from ...library.creation.factories import full_like
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ...library.torch_kwargs import torch_kwargs
from ...tracer import STATE as _TR
from .. import loss_reduction
from .activation import logsigmoid


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(mse_loss, 'mse_loss', (input, target, size_average, reduce, reduction), {}, torch_kw)
    if input.shape != target.shape:
        import warnings
        warnings.warn(f"Using a target size ({list(target.shape)}) that is different to the input size "
                      f"({list(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                      "Please ensure they have the same size.", stacklevel=2)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    d = input - target
    return named(loss_reduction.reduce_loss(d * d, reduction), "MseLossBackward0")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(l1_loss, 'l1_loss', (input, target, size_average, reduce, reduction), {}, torch_kw)
    warn_size(input, target)      # torch warns when the target broadcasts, as for mse_loss
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    return named(loss_reduction.reduce_loss(F.abs(input - target), reduction), "L1LossBackward0")


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
             **torch_kw):
    """Negative log likelihood of class indices ``target`` under log-probabilities ``input`` (N, C, ...)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(nll_loss, 'nll_loss', (input, target, weight, size_average, ignore_index, reduce,
                                                   reduction), {}, torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    return named(_nll_loss(input, target, weight, ignore_index, reduction), "NllLossBackward0")


_FROM_NP = dt._FROM_NP
_INDEX_DTYPES = (dt.int64, dt.int32)
# (NumPy's module has a __getattr__: CPython specialises no ``np.X`` read, so a loss's are bound once)
_ndarray, _max_reduce = np.ndarray, np.maximum.reduce


def _nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    unbatched = input._data.ndim == 1
    if unbatched:
        input, target = input.unsqueeze(0), target.reshape(1)
    if _FROM_NP[target._data.dtype] not in _INDEX_DTYPES:       # (payloads read: no property frames, once per loss)
        raise RuntimeError(f"nll_loss: expected target of dtype int64 (class indices), got {target.dtype.name}")
    shape = tuple(input._data.shape)     # (a device array's may be no tuple)
    if tuple(target._data.shape) != shape[:1] + shape[2:]:
        raise RuntimeError(f"nll_loss: expected target of shape {list(shape[:1] + shape[2:])} for input "
                           f"of shape {list(shape)}, got {list(target.shape)}")
    C = shape[1]
    fused = weight is None and input._data.ndim == 2
    # bounds are checked on concrete targets (inside @compile the value is not known while tracing; a CUDA
    # target is read back for it, or the gather would read out of bounds); ignored entries may lie outside [0, C).
    # The fused primitive's eager CPU impl checks them itself, in the pass that finds its common case.
    t = target._data
    if not (fused and type(t) is _ndarray and type(input._data) is _ndarray and _TR.active is None):
        if type(t) is not _ndarray and _TR.active is None:
            t = target.cpu()._data
        # every target in [0, C): the largest seen unsigned is below C (a negative one is huge), one reduction
        if type(t) is _ndarray and t.size and not _max_reduce(t.view(_UNSIGNED[t.dtype.itemsize]), axis=None) < C:
            safe = np.where(t != ignore_index, t, 0)
            lo, hi = int(safe.min()), int(safe.max())
            if lo < 0 or hi >= C:
                raise IndexError(f"Target {hi if hi >= C else lo} is out of bounds.")      # torch's text
    if reduction not in loss_reduction.REDUCTIONS:       # (loss_reduction.check's test inline: a frame fewer per loss)
        loss_reduction.check(reduction)
    if fused:
        # one fused primitive in eager CPU mode; traced or on a device its decomposition (ir/ops/fused.py)
        loss = _NLL(input, target, {"ignore_index": int(ignore_index), "reduction": reduction}) if _ROUTE.plain \
            else bind(O["nll_loss"], input, target, ignore_index=int(ignore_index), reduction=reduction)
    else:
        loss = nll_composition(input, target, weight, int(ignore_index), reduction)
    return loss.reshape(()) if unbatched and reduction == "none" else loss


_UNSIGNED = {8: np.uint64, 4: np.uint32}
# the fused primitives' flat entry points (runtime/flat_bind.py)
_NLL = flat_entry(O["nll_loss"], 2)
_LOG_SOFTMAX = flat_entry(O["log_softmax"], 1)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0, **torch_kw):
    """Cross entropy between logits ``input`` (N, C, ...) or (C,) and class indices or class probabilities."""
    if type(input) is Tensor and type(target) is Tensor and weight is None and not label_smoothing and not torch_kw \
            and size_average is None and reduce is None and _ROUTE.plain and _TR.active is None:
        # the common loss (float logits (N, C), class indices (N,), on the CPU) straight to its two fused primitives'
        # flat entry points, with _cross_entropy's and _nll_loss's checks: two frames fewer per loss
        d, t = input._data, target._data
        if type(d) is _ndarray and type(t) is _ndarray and d.ndim == 2 and d.size and d.dtype.kind == "f" \
                and t.shape == d.shape[:1] and _FROM_NP[t.dtype] in _INDEX_DTYPES \
                and reduction in loss_reduction.REDUCTIONS:
            r = _NLL(_LOG_SOFTMAX(input, {"axis": 1}), target,
                     {"ignore_index": int(ignore_index), "reduction": reduction})
            gf = r.grad_fn
            if gf is not None:
                gf.torch_name = "NllLossBackward0"
            return r
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(cross_entropy, 'cross_entropy', (input, target, weight, size_average, ignore_index, reduce, reduction, label_smoothing), {}, torch_kw)
    if size_average is not None or reduce is not None:
        reduction = loss_reduction.legacy_reduction(size_average, reduce)
    # (target.is_floating_point(); a plain Tensor told without a C call)
    probs = (type(target) is Tensor or isinstance(target, Tensor)) and target._data.dtype.kind == "f"
    r = _cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing, probs)
    # class probabilities as the target: torch's result is not an NLL node either
    if not probs:
        gf = getattr(r, "grad_fn", None)    # (grad_names.named, inline)
        if gf is not None:
            gf.torch_name = "NllLossBackward0"
    return r


def _cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing, probs):
    d = input._data
    cdim = 0 if d.ndim == 1 else 1
    if type(input) is Tensor and type(d) is np.ndarray and d.ndim and d.size and d.dtype.kind == "f":
        # F.log_softmax's eager path, inline (its dim known valid, its payload a float array; the node is named by
        # the op): four frames fewer per loss
        logp = _LOG_SOFTMAX(input, {"axis": cdim}) if _ROUTE.plain else bind(O["log_softmax"], input, axis=cdim)
    else:
        logp = F.log_softmax(input, cdim)
    if probs:
        if target.shape != input.shape:
            raise RuntimeError(f"cross_entropy: probability target shape {list(target.shape)} must match input "
                               f"shape {list(input.shape)}")
        C = input.shape[cdim]
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / C
        term = logp * target
        if weight is not None:
            term = term * weight.reshape((C,) + (1,) * (input.ndim - cdim - 1))
        loss = -term.sum(cdim)
        if reduction == "mean":
            return loss.sum() / (loss.numel() / 1 if input.ndim > 1 else 1)
        return loss_reduction.reduce_loss(loss, reduction)
    nll = _nll_loss(logp, target, weight, ignore_index, reduction)     # (named by cross_entropy)
    if not label_smoothing:
        return nll
    nll = named(nll, "NllLossBackward0")
    C = input.shape[cdim]
    lp = logp if input.ndim > 1 else logp.unsqueeze(0)
    t = target if input.ndim > 1 else target.reshape(1)
    valid = (t != ignore_index).to(input.dtype)
    wsum = lp if weight is None else lp * weight.reshape((C,) + (1,) * (lp.ndim - 2))
    smooth = -wsum.sum(1) * valid
    if reduction == "mean":
        denom = valid.sum() if weight is None else (weight[t.where(t != ignore_index, 0)] * valid).sum()
        smooth = smooth.sum() / denom
    elif reduction == "sum":
        smooth = smooth.sum()
    elif input.ndim == 1:
        smooth = smooth.reshape(())
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / C)


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
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    loss_reduction.check(reduction)
    d = input - target
    a = F.abs(d)
    loss = a if beta == 0 else F.where(a < beta, d * d * (0.5 / beta), a - 0.5 * beta)
    return named(loss_reduction.reduce_loss(loss, reduction), "SmoothL1LossBackward0")


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
        loss_reduction.check(reduction)
    elif reduction not in ("none", "mean", "sum"):
        raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")
    d = input - target
    a = F.abs(d)
    loss = F.where(a < delta, d * d * 0.5, (a - 0.5 * delta) * delta)
    if weight is not None:
        loss = loss * weight
    return loss_reduction.reduce_loss(loss, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                         **torch_kw):
    """``-weight * (t * log(x) + (1 - t) * log(1 - x))`` for probabilities ``x`` in [0, 1], each log clamped at
    -100 as torch does (a saturated ``x`` of exactly 0 or 1 gives a finite loss)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(binary_cross_entropy, 'binary_cross_entropy',
                            (input, target, weight, size_average, reduce, reduction), {}, torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({_size(target)}) that is different to the input size "
                         f"({_size(input)}) is deprecated. Please ensure they have the same size.")
    loss_reduction.check(reduction)
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
    return named(loss_reduction.reduce_loss(loss, reduction), "BinaryCrossEntropyBackward0")


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
    return loss_reduction.reduce_loss(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean", **torch_kw):
    """Poisson negative log likelihood: ``exp(input) - target * input`` (``log_input``), else
    ``input - target * log(input + eps)``; ``full`` adds Stirling's term where ``target > 1``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(poisson_nll_loss, 'poisson_nll_loss',
                            (input, target, log_input, full, size_average, eps, reduce, reduction), {}, torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    loss_reduction.check(reduction)
    if log_input:
        loss = F.exp(input) - target * input
    else:
        loss = input - target * F.log(input + eps)
    if full:
        big = target > 1
        t = F.where(big, target, 2.0)       # the masked entries take a harmless value (log(0) would be -inf)
        stirling = t * F.log(t) - t + 0.5 * F.log(t * (2 * math.pi))
        loss = loss + F.where(big, stirling, 0.0)
    return loss_reduction.reduce_loss(loss, reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                **torch_kw):
    """Multi-label one-versus-all logistic loss: ``-(t * logsigmoid(x) + (1 - t) * logsigmoid(-x))`` averaged over
    the classes (the last dim), ``weight`` per class."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(multilabel_soft_margin_loss, 'multilabel_soft_margin_loss',
                            (input, target, weight, size_average, reduce, reduction), {}, torch_kw)
    reduction = loss_reduction.resolve(size_average, reduce, reduction)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    cdim = input.ndim - 1
    loss = loss.sum(cdim) / input.shape[cdim]
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    return loss_reduction.reduce_loss(loss, reduction)


__all__ = ["mse_loss", "l1_loss", "nll_loss", "cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
           "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "gaussian_nll_loss", "poisson_nll_loss",
           "multilabel_soft_margin_loss"]
