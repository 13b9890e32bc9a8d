"""``Identity``, ``Linear`` and ``Bilinear`` (``y = x1^T A x2 + b`` per output feature), with torch's parameters,
initialisation and reprs.

>>> import jitgrad as jg
>>> jg.nn.Bilinear(3, 4, 5)(jg.ones(2, 3), jg.ones(2, 4)).shape
jitgrad.Size([2, 5])
"""
from __future__ import annotations

import math

from .. import init
from ..functional import linear_forms as FL
from ..functional.linear_forms import bilinear
from .module import Module
from ..parameter import Parameter, _empty


class Identity(Module):
    """Returns its input; takes and ignores any arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` of shape ``(out_features, in_features)``, initialised like
    torch: kaiming_uniform_(a=sqrt(5)) for the weight, U(-1/sqrt(in), 1/sqrt(in)) for the bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        return FL.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """``MultiheadAttention.out_proj``: a Linear under torch's class name (its repr and type name match)."""


class Bilinear(Module):
    """``y = x1^T A x2 + b`` with ``weight`` ``(out_features, in1_features, in2_features)`` and ``bias``
    ``(out_features,)``, both U(-1/sqrt(in1_features), 1/sqrt(in1_features)) as torch."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(_empty(out_features, in1_features, in2_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features={self.in1_features})")
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


__all__ = ["Identity", "Linear", "Bilinear"]
