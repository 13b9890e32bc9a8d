"""The activation modules over ``pointwise_activations`` and ``shrink_gate_activations``: ``Threshold``,
``Hardtanh``, ``ReLU6``, ``ELU``, ``CELU``, ``SELU``, ``LeakyReLU``, ``PReLU`` (learnable slopes), ``RReLU``,
``Hardsigmoid``, ``Hardswish``, ``Mish``, ``Hardshrink``, ``Softshrink``, ``Tanhshrink``, ``Softsign``, ``GLU``,
``Softmin``, ``LogSoftmax``, ``Softmax2d``; torch's arguments, defaults and reprs.

>>> import jitgrad as jg
>>> jg.nn.LeakyReLU(0.1)(jg.tensor([-1.0, 2.0]))
tensor([-0.1000,  2.0000])
"""
from __future__ import annotations

import warnings

from ..library import elementary as F
from . import init as _init
from . import pointwise_activations as P
from . import shrink_gate_activations as S
from .layers import _empty
from .module import Module
from .parameter import Parameter


def _inplace_str(inplace):
    return ", inplace=True" if inplace else ""


class Threshold(Module):
    """``x`` where ``x > threshold``, else ``value``."""

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return P.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}{_inplace_str(self.inplace)}"


class Hardtanh(Module):
    """``clamp(x, min_val, max_val)`` (gradient 0 at the bounds, as torch); ``min_value``/``max_value`` are torch's
    deprecated spellings."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False, min_value=None,
                 max_value=None):
        super().__init__()
        if min_value is not None:
            warnings.warn("keyword argument `min_value` is deprecated and renamed to `min_val`", FutureWarning,
                          stacklevel=2)
            min_val = min_value
        if max_value is not None:
            warnings.warn("keyword argument `max_value` is deprecated and renamed to `max_val`", FutureWarning,
                          stacklevel=2)
            max_val = max_value
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace
        if self.max_val <= self.min_val:
            raise AssertionError(f"max_val ({self.max_val}) must be greater than min_val ({self.min_val})")

    def forward(self, input):
        return P.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_str(self.inplace)}"


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)``."""

    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ELU(Module):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return P.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace_str(self.inplace)}"


class CELU(ELU):
    """``x`` where ``x > 0``, else ``alpha * (exp(x / alpha) - 1)``."""

    def forward(self, input):
        return P.celu(input, self.alpha, self.inplace)


class _InplaceOnly(Module):
    _fn = None

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class SELU(_InplaceOnly):
    """``scale * elu(x, alpha)`` with the self-normalising constants."""
    _fn = staticmethod(P.selu)


class Mish(_InplaceOnly):
    """``x * tanh(softplus(x))``."""
    _fn = staticmethod(P.mish)


class Hardsigmoid(_InplaceOnly):
    """``relu6(x + 3) / 6``."""
    _fn = staticmethod(P.hardsigmoid)

    def extra_repr(self):       # torch prints no inplace here
        return ""


class Hardswish(_InplaceOnly):
    """``x * relu6(x + 3) / 6``."""
    _fn = staticmethod(P.hardswish)

    def extra_repr(self):       # torch prints no inplace here
        return ""


class LeakyReLU(Module):
    """``x`` where ``x > 0``, else ``negative_slope * x``."""

    def __init__(self, negative_slope: float = 1e-2, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input):
        return P.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}{_inplace_str(self.inplace)}"


class RReLU(Module):
    """Randomised leaky ReLU: slopes drawn from U(lower, upper) in training, their mean in eval."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return P.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self):
        return f"lower={self.lower}, upper={self.upper}{_inplace_str(self.inplace)}"


class PReLU(Module):
    """``x`` where ``x > 0``, else ``a * x`` with learnable ``weight`` ``a`` (``num_parameters`` slopes: 1, or one
    per channel, initialised to ``init``)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        self.num_parameters = num_parameters
        super().__init__()
        self.init = init
        self.weight = Parameter(_empty(num_parameters, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _init.constant_(self.weight, self.init)

    def forward(self, input):
        return S.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Hardshrink(Module):
    """``x`` where ``|x| > lambd``, else 0."""

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return S.hardshrink(input, self.lambd)

    def extra_repr(self):
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""

    def forward(self, input):
        return S.softshrink(input, self.lambd)


class Tanhshrink(Module):
    """``x - tanh(x)``."""

    def forward(self, input):
        return S.tanhshrink(input)


class Softsign(Module):
    """``x / (1 + |x|)``."""

    def forward(self, input):
        return S.softsign(input)


class GLU(Module):
    """``a * sigmoid(b)`` over the halves ``a``, ``b`` of the input along ``dim``."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return S.glu(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmin(Module):
    """``softmax(-x)`` along ``dim`` (torch's legacy dim when None)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return S.softmin(input, self.dim, _stacklevel=5)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``log(softmax(x))`` along ``dim`` (torch's legacy dim when None)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim if self.dim is not None else S.legacy_softmax_dim("log_softmax", input.ndim, 4)
        return F.log_softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax2d(Module):
    """Softmax over the channels (dim -3) of a ``(N, C, H, W)`` or ``(C, H, W)`` input."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)


__all__ = ["Threshold", "Hardtanh", "ReLU6", "ELU", "CELU", "SELU", "Mish", "Hardsigmoid", "Hardswish", "LeakyReLU",
           "RReLU", "PReLU", "Hardshrink", "Softshrink", "Tanhshrink", "Softsign", "GLU", "Softmin", "LogSoftmax",
           "Softmax2d"]
