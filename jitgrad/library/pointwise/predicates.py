"""``signbit``: a boolean result that is never differentiated (the sign bit of each element: negative numbers,
-0.0 and NaNs with the sign bit).  It runs eagerly on NumPy (inside ``@jg.compile`` it raises the usual
traced-value error)."""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...runtime.tensor import Tensor
from ...runtime.traced import is_traced, traced_read
from ..torch_kwargs import torch_kwargs


@published("jitgrad", "Tensor")
def signbit(input, **torch_kw):
    """True where the sign bit is set (negative numbers, -0.0, NaNs with the sign bit)."""
    if torch_kw:
        return torch_kwargs(signbit, "signbit", (input,), {}, torch_kw)
    if is_traced(input):
        traced_read(input, "signbit()")
    return Tensor._make(np.signbit(np.asarray(input.numpy(force=True))))


__all__ = ["signbit"]
