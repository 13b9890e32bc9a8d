"""``atan2(input, other)``: the angle of the point (other, input), element-wise with broadcasting.

Computed eagerly with NumPy (inside ``@jg.compile`` it raises the traced-value error) as an autograd Function
whose backward is made of jitgrad ops, so it differentiates to any order:
d/d input = other / (input^2 + other^2), d/d other = -input / (input^2 + other^2), and 0 where both are 0
(torch's convention: the gradient at the origin is zero, not NaN).
"""
from __future__ import annotations

import numpy as np

from .tensor import Tensor
from .traced import is_traced, traced_read
from .torch_kwargs import torch_kwargs


def _as_tensor(x, like):
    if isinstance(x, Tensor):
        return x
    from .factories import tensor
    return tensor(x, dtype=like.dtype)


def _make_fn():
    from .function import Function

    class Atan2(Function):
        @staticmethod
        def forward(ctx, y, x):
            for t in (y, x):
                if is_traced(t):
                    traced_read(t, "atan2()")
            ctx.save_for_backward(y, x)
            ya, xa = y.numpy(force=True), x.numpy(force=True)
            dt = np.result_type(ya.dtype, xa.dtype, np.float32)
            return Tensor._make(np.arctan2(ya.astype(dt), xa.astype(dt)))

        @staticmethod
        def backward(ctx, g):
            from .functions import where
            y, x = ctx.saved_tensors
            denom = y * y + x * x
            zero = denom == 0
            recip = where(zero, denom * 0, 1 / where(zero, denom + 1, denom))
            gy = g * x * recip
            gx = g * (-y) * recip
            return (gy.sum_to_size(y.shape) if gy.shape != y.shape else gy,
                    gx.sum_to_size(x.shape) if gx.shape != x.shape else gx)
    return Atan2


_Atan2 = _make_fn()


def atan2(input, other, **torch_kw):
    """The angle of (other, input) in radians, in (-pi, pi] (element-wise, broadcast)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(atan2, "atan2", (input, other), {}, torch_kw)
    if not isinstance(input, Tensor):
        input = _as_tensor(input, other)
    other = _as_tensor(other, input)
    out = _Atan2.apply(input, other)
    if out.grad_fn is not None:
        out.grad_fn.torch_name = "Atan2Backward0"
    return out


arctan2 = atan2

METHODS = ["atan2", "arctan2"]
__all__ = METHODS
