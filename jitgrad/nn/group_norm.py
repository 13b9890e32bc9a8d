"""Normalisation over groups of channels: ``F.group_norm`` / ``nn.GroupNorm`` and the cross-channel
``F.local_response_norm`` / ``nn.LocalResponseNorm``.  Compositions of primitives (means over a reshaped view,
rsqrt, shifted channel windows), so they differentiate to any order and compile.

>>> import jitgrad as jg
>>> jg.nn.GroupNorm(2, 4)(jg.ones(3, 4, 5)).shape
jitgrad.Size([3, 4, 5])
"""
from __future__ import annotations

from ..library import elementary as F
from ..library.torch_kwargs import torch_kwargs
from . import init
from .layers import _empty
from .padding import pad
from .module import Module
from .parameter import Parameter


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, **torch_kw):
    """Normalise ``(N, C, *)`` over each group of ``C / num_groups`` channels and the spatial dims (biased
    variance), then scale and shift per channel by ``weight`` and ``bias``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(group_norm, 'group_norm', (input, num_groups, weight, bias, eps), {}, torch_kw)
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    n, c = input.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(t.shape)} and input of shape {list(input.shape)}")
    x = input.reshape(n, num_groups, -1)
    mean = x.mean(2, keepdim=True)
    d = x - mean
    var = (d * d).mean(2, keepdim=True)
    out = (d * F.rsqrt(var + eps)).reshape(input.shape)
    shape = (c,) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0, **torch_kw):
    """``x / (k + alpha * mean of x**2 over a window of size channels) ** beta`` (the window centred on each
    channel, zero-padded at the ends: ``size // 2`` before, ``(size - 1) // 2`` after)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(local_response_norm, 'local_response_norm', (input, size, alpha, beta, k), {}, torch_kw)
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          input (got {input.ndim} "
                         "dimensions)")
    if input.numel() == 0:
        return input
    c = input.shape[1]
    sq = input * input
    before, after = size // 2, (size - 1) // 2
    padded = pad(sq, (0, 0) * (input.ndim - 2) + (before, after))
    total = padded.narrow(1, 0, c)
    for i in range(1, size):
        total = total + padded.narrow(1, i, c)
    div = (total * (alpha / size) + k) ** beta
    return input / div


class GroupNorm(Module):
    """``F.group_norm`` with a learnable per-channel ``weight`` (ones) and ``bias`` (zeros) when ``affine``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(_empty(num_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        if affine and bias:
            self.bias = Parameter(_empty(num_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class LocalResponseNorm(Module):
    """``F.local_response_norm`` as a module."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


FUNCTIONS = ["group_norm", "local_response_norm"]
MODULES = ["GroupNorm", "LocalResponseNorm"]
__all__ = FUNCTIONS + MODULES
