"""The bilinear layer: ``F.bilinear`` and ``nn.Bilinear`` (``y = x1^T A x2 + b`` per output feature), a matmul
and a reduction, so it differentiates and compiles.

>>> import jitgrad as jg
>>> jg.nn.Bilinear(3, 4, 5)(jg.ones(2, 3), jg.ones(2, 4)).shape
jitgrad.Size([2, 5])
"""
from __future__ import annotations

import math

from ..library.torch_kwargs import torch_kwargs
from . import init
from .layers import _empty
from .module import Module
from .parameter import Parameter


def bilinear(input1, input2, weight, bias=None, **torch_kw):
    """``y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(bilinear, 'bilinear', (input1, input2, weight, bias), {}, torch_kw)
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for i in range(input1.ndim - 1):
        if input1.shape[i] != input2.shape[i]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: got {input1.shape[i]} "
                               f"and {input2.shape[i]}")
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but expected "
                           f"{weight.shape[1] if weight.ndim > 1 else weight.shape}")
    if input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but expected "
                           f"{weight.shape[2]}")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != weight.shape[0]):
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.shape[0]} but expected "
                           f"{weight.shape[0]}")
    o, i, j = weight.shape
    batch = tuple(input1.shape[:-1])
    x1 = input1.reshape(-1, i)
    x2 = input2.reshape(-1, j)
    # (N, i) @ (i, o * j) -> (N, o, j), then contracted with x2 over j
    t = (x1 @ weight.permute(1, 0, 2).reshape(i, o * j)).reshape(-1, o, j)
    y = (t * x2.unsqueeze(1)).sum(2)
    if bias is not None:
        y = y + bias
    return y.reshape(*batch, o)


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


__all__ = ["bilinear", "Bilinear"]
