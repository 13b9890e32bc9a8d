"""What old ``Variable`` code still reaches: ``t.volatile`` (removed in torch: always False, with torch's
warnings) and ``torch.autograd.torch`` (torch's autograd module imports torch, so old code reached the factories
through it).
"""
from __future__ import annotations

import sys
import warnings

from .tensor import Tensor


def _get_volatile(self) -> bool:
    warnings.warn("volatile was removed (Variable.volatile is always False)", UserWarning, stacklevel=2)
    return False


def _set_volatile(self, value):
    warnings.warn("volatile was removed and now has no effect. Use `with torch.no_grad():` instead.", UserWarning,
                  stacklevel=2)


def install(jg: dict):
    """``Tensor.volatile``, and ``jitgrad.autograd.torch`` as the ``jitgrad`` module."""
    Tensor.volatile = property(_get_volatile, _set_volatile, doc="Removed in torch: always False (warns).")
    jg["autograd"].torch = sys.modules[jg["__name__"]]


__all__ = ["install"]
