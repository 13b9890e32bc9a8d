"""``F.ctc_loss`` (``nn.CTCLoss`` is its module): connectionist temporal classification, torch 2.13's arguments, reductions,
``zero_infinity`` and errors.

The forward (alpha) recursion in log space, written with jitgrad ops, so its gradient is the exact derivative
(the alpha-beta gradient, by reverse mode) and differentiates again; ``@jitgrad.compile`` unrolls it over the
``T`` time steps.  Per sample, the extended label ``l'`` is the target with a blank before, between and after its
symbols (``2 S + 1`` states); ``alpha_t(s) = logsumexp(alpha_{t-1}(s), alpha_{t-1}(s - 1), alpha_{t-1}(s - 2)) +
log_probs[t, l'_s]``, the ``s - 2`` term only where ``s`` is a symbol's state and ``l'_s`` differs from
``l'_{s-2}`` (torch's rule, also for a target that holds the blank); a sample's
steps stop at its input length, and its loss is ``-logsumexp`` of its last two states.  The ``logsumexp`` is
guarded so that states that cannot be reached (``-inf``) give zero gradient, never NaN.

One difference from torch: torch's gradient with respect to ``log_probs`` is the one through a ``log_softmax``
(it adds ``exp(log_probs)`` to the exact derivative), so the two agree exactly when ``log_probs`` comes from
``log_softmax``, as CTC's input should; on other input jitgrad returns the exact derivative.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> lp = jg.full((3, 1, 2), 0.5).log()
>>> round(F.ctc_loss(lp, jg.tensor([[1]]), [3], [1], reduction="sum").item(), 4)    # 6 of 8 paths: -log(6/8)
0.2877
"""
from __future__ import annotations

import numpy as np

from ...ir import dtypes as dt
from ...library.creation import factories
from ...library import elementary as F
from ...runtime.grad_names import named
from ...runtime.tensor import Tensor
from ...library.torch_kwargs import torch_kwargs
from .. import loss_reduction


_NEG = float("-inf")


def _lengths(v, device):
    if isinstance(v, Tensor):
        return v.to(dt.int64).reshape(-1)
    return factories.tensor(np.asarray(v, np.int64).reshape(-1), dtype=dt.int64, device=device)


def _logsumexp(*terms):
    """``log(sum(exp(terms)))`` elementwise; all ``-inf`` gives ``-inf`` with zero gradient (not NaN)."""
    m = terms[0].detach()
    for t in terms[1:]:
        m = F.maximum(m, t.detach())
    dead = m == _NEG
    m = m.where(~dead, 0.0)
    s = sum((t - m).exp() for t in terms)
    s = s.where(~dead, 1.0)
    return (s.log() + m).where(~dead, _NEG)


def _check(log_probs, targets, il, tl, blank, T, N, C):
    if not 0 <= blank < C:
        raise RuntimeError("blank must be in label range")
    if il.shape[0] != N:
        raise RuntimeError("input_lengths must be of size batch_size")
    if tl.shape[0] != N:
        raise RuntimeError("target_lengths must be of size batch_size")
    if type(il._data) is np.ndarray and N:
        if int(il._data.max()) > T:
            raise RuntimeError(f"Expected input_lengths to have value at most {T}, but got value "
                               f"{int(il._data.max())} (while checking arguments for ctc_loss_allocate_outputs)")
    if type(tl._data) is np.ndarray and N and targets.ndim == 2 and int(tl._data.max()) > targets.shape[1]:
        raise RuntimeError(f"Expected tensor to have size at least {int(tl._data.max())} at dimension 1, but got "
                           f"size {targets.shape[1]} for argument #2 'targets' (while checking arguments for "
                           f"ctc_loss_allocate_outputs)")


def _padded_targets(targets, tl, N):
    """``(N, S)`` targets from torch's padded ``(N, S)`` or concatenated 1-D form (``S`` the longest target)."""
    if targets.ndim == 2:
        return targets.to(dt.int64)
    total = targets.shape[0]
    S = int(tl._data.max()) if type(tl._data) is np.ndarray and N else total
    start = tl.cumsum(0) - tl
    pos = (start.unsqueeze(1) + factories.arange(max(S, 1), dtype=dt.int64, device=targets.device)).clamp(
        max=max(total - 1, 0))
    flat = targets.to(dt.int64)
    if total == 0:
        return factories.zeros(N, S, dtype=dt.int64, device=targets.device)
    return flat[pos][:, :S]


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False,
             **torch_kw):
    """The CTC loss of ``log_probs (T, N, C)`` (or unbatched ``(T, C)``; log-softmax outputs) against
    ``targets`` (padded ``(N, S)``, or all targets concatenated in 1-D), with per-sample ``input_lengths`` and
    ``target_lengths`` (tensors or sequences of ints); ``reduction='mean'`` divides each loss by its target
    length, then averages; ``zero_infinity`` replaces impossible alignments' infinite losses (and their
    gradients) by zeros.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> lp = jg.randn(6, 2, 4).log_softmax(2)
    >>> F.ctc_loss(lp, jg.tensor([[1, 2], [3, 3]]), [6, 5], [2, 2], reduction="none").shape
    jitgrad.Size([2])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(ctc_loss, "ctc_loss", (log_probs, targets, input_lengths, target_lengths, blank,
                                                   reduction, zero_infinity), {}, torch_kw)
    loss_reduction.check(reduction)
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if lp.ndim != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs of 2 or 3 dims (T, [N,] C), got {list(log_probs.shape)}")
    if unbatched and targets.ndim == 1:
        targets = targets.unsqueeze(0)
    T, N, C = lp.shape
    il, tl = _lengths(input_lengths, lp.device), _lengths(target_lengths, lp.device)
    _check(lp, targets, il, tl, blank, T, N, C)
    tgt = _padded_targets(targets, tl, N)
    S = tgt.shape[1]
    pos = factories.arange(S, dtype=dt.int64, device=lp.device)
    tgt = tgt.where(pos < tl.unsqueeze(1), blank)           # the padding past each length: never read as a class
    blanks = factories.full((N, S), blank, dtype=dt.int64, device=lp.device)
    ext = F.cat([F.stack([blanks, tgt], 2).reshape(N, 2 * S), blanks[:, :1]], 1)      # (N, 2S + 1)
    K = 2 * S + 1
    emit = lp.gather(2, ext.unsqueeze(0).expand(T, N, K))     # (T, N, K): log_probs of each state's label
    # torch's rule: a symbol state (odd s) may skip the blank before it unless it repeats the symbol before that
    odd = (factories.arange(K - 2, dtype=dt.int64, device=lp.device) % 2 == 1)
    skip = F.cat([factories.zeros(N, 2, dtype=dt.bool_, device=lp.device), odd & (ext[:, 2:] != ext[:, :-2])], 1)
    ninf1 = factories.full((N, 1), _NEG, dtype=lp.dtype, device=lp.device)
    ninf2 = factories.full((N, 2), _NEG, dtype=lp.dtype, device=lp.device)
    first = factories.arange(K, dtype=dt.int64, device=lp.device) < 2
    alpha = emit[0].where(first, _NEG) if T else factories.full((N, K), _NEG, dtype=lp.dtype, device=lp.device)
    for t in range(1, T):
        one = F.cat([ninf1, alpha[:, :-1]], 1)
        two = F.cat([ninf2, alpha[:, :-2]], 1).where(skip, _NEG)
        new = _logsumexp(alpha, one, two) + emit[t]
        alpha = new.where((il > t).unsqueeze(1), alpha)
    if T:
        alpha = alpha.where((il > 0).unsqueeze(1), _NEG)
    end = (2 * tl).unsqueeze(1)
    last = alpha.gather(1, end).squeeze(1)
    before = alpha.gather(1, (end - 1).clamp(min=0)).squeeze(1).where(tl > 0, _NEG)
    loss = -_logsumexp(last, before)
    if zero_infinity:
        loss = loss.where(~loss.isinf(), 0.0)
    if reduction == "mean":
        loss = (loss / tl.clamp(min=1).to(loss.dtype)).mean()
    elif reduction == "sum":
        loss = loss.sum()
    elif unbatched:
        loss = loss.reshape(())
    return named(loss, "CtcLossBackward0")


__all__ = ["ctc_loss"]
