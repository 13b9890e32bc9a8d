"""Activation modules: ``ReLU``, ``GELU``, ``Tanh``, ``Sigmoid``, ``Softmax``, ``SiLU``, ``Softplus``,
``LogSigmoid``."""
from __future__ import annotations

from ..library import elementary as F
from . import functional
from .module import Module


class ReLU(Module):
    """``max(x, 0)``; ``inplace=True`` writes into the input."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        if self.inplace:
            return input.clamp_(min=0)
        return F.relu(input)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return functional.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    """Elementwise ``tanh``."""

    def forward(self, input):
        return F.tanh(input)


class Sigmoid(Module):
    """Elementwise logistic sigmoid."""

    def forward(self, input):
        return F.sigmoid(input)


class Softmax(Module):
    """Softmax along ``dim`` (torch's legacy choice of dim when None: 0 for 0-, 1- and 3-D input, else 1)."""

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        dim = self.dim
        if dim is None:
            import warnings
            warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include "
                          "dim=X as an argument.", stacklevel=2)
            dim = 0 if input.ndim in (0, 1, 3) else 1
        return F.softmax(input, dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class SiLU(Module):
    """``x * sigmoid(x)`` (swish); ``inplace=True`` writes into the input."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return functional.silu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return functional.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class LogSigmoid(Module):
    """Elementwise ``log(sigmoid(x))``."""

    def forward(self, input):
        return functional.logsigmoid(input)


__all__ = ["ReLU", "GELU", "Tanh", "Sigmoid", "Softmax", "SiLU", "Softplus", "LogSigmoid"]
