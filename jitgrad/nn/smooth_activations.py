"""Smooth activations in log space: ``F.softplus`` (with torch's ``beta`` and linear ``threshold``) and
``F.logsigmoid``, as compositions of primitives (exp, log1p, where), so they differentiate to any order and
compile.  The branch a ``where`` does not select gets a harmless input, so no overflow leaks a NaN into the
gradient.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.softplus(jg.tensor([0.0, 30.0]))
tensor([ 0.6931, 30.0000])
"""
from __future__ import annotations

from ..library import elementary as F
from ..runtime.grad_names import named
from ..library.torch_kwargs import torch_kwargs


def softplus(input, beta=1.0, threshold=20.0, **torch_kw):
    """``log(1 + exp(beta * x)) / beta``; ``x`` itself where ``beta * x > threshold`` (torch's linear regime).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.softplus(jg.tensor([1.0]), beta=2.0)
    tensor([1.0635])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softplus, "softplus", (input, beta, threshold), {}, torch_kw)
    z = input * beta if beta != 1 else input
    linear = z > threshold
    safe = F.where(linear, 0.0, z)      # exp of the unselected branch must not overflow: its grad would be NaN
    soft = F.log1p(F.exp(safe))
    return named(F.where(linear, input, soft / beta if beta != 1 else soft), "SoftplusBackward0")


def logsigmoid(input, **torch_kw):
    """``log(sigmoid(x))``, computed as ``min(x, 0) - log1p(exp(-|x|))`` (no overflow on either tail).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.logsigmoid(jg.tensor([0.0, -100.0]))
    tensor([  -0.6931, -100.0000])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(logsigmoid, "logsigmoid", (input,), {}, torch_kw)
    neg = input < 0
    # |x| through where, not abs: at x = 0 this branch's slope (-1 for -|x|) gives torch's derivative 1/2 there
    mag = F.where(neg, -input, input)
    return named(F.where(neg, input, 0.0) - F.log1p(F.exp(-mag)), "LogSigmoidBackward0")


__all__ = ["softplus", "logsigmoid"]
