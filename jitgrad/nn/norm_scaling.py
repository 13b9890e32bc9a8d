"""Scaling by a norm: ``F.rms_norm`` and ``nn.RMSNorm`` (torch 2.4+), ``F.normalize``.  Compositions of primitives
(mean of squares and rsqrt; the p-norm clamped away from 0), so they differentiate to any order and compile.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.normalize(jg.tensor([[3.0, 4.0]]))
tensor([[0.6000, 0.8000]])
"""
from __future__ import annotations

import numbers

import numpy as np

from ..library import elementary as F
from ..library.dim_args import torch_dim
from ..library.torch_kwargs import torch_kwargs
from . import init
from .layers import _empty
from .module import Module
from .parameter import Parameter


def rms_norm(input, normalized_shape, weight=None, eps=None, **torch_kw):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last ``len(normalized_shape)`` dims; ``eps=None`` is the
    machine epsilon of ``input``'s dtype, as torch.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.rms_norm(jg.tensor([[1.0, 1.0, -1.0, -1.0]]), (4,))
    tensor([[ 1.,  1., -1., -1.]])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(rms_norm, "rms_norm", (input, normalized_shape, weight, eps), {}, torch_kw)
    if not isinstance(normalized_shape, (tuple, list)):
        raise TypeError(f"rms_norm(): argument 'normalized_shape' (position 2) must be tuple of ints, not "
                        f"{type(normalized_shape).__name__}")
    shape = tuple(int(n) for n in normalized_shape)
    k = len(shape)
    if input.shape[input.ndim - k:] != shape or k > input.ndim:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    if weight is not None and tuple(weight.shape) != shape:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                           f"{list(weight.shape)} and normalized_shape = {list(shape)}")
    if eps is None:
        eps = float(np.finfo(input.dtype.np).eps) if input.is_floating_point() else 1.1920928955078125e-07
    dims = tuple(range(input.ndim - k, input.ndim))
    out = input * F.rsqrt((input * input).mean(dims, keepdim=True) + eps)
    return out * weight if weight is not None else out


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None, **torch_kw):
    """``input / max(||input||_p, eps)`` along ``dim`` (rows of unit norm by default).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.normalize(jg.tensor([[1.0, 1.0], [0.0, 2.0]]), p=1)
    tensor([[0.5000, 0.5000],
            [0.0000, 1.0000]])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(normalize, "normalize", (input, p, dim, eps, out), {}, torch_kw)
    d = torch_dim(input, dim)
    denom = F.norm(input, p, d, keepdim=True).clamp_min(eps).expand_as(input)
    r = input / denom
    if out is not None:
        from ..library.torch_kwargs import write_out
        return write_out("normalize", r, out, (input,))
    return r


class RMSNorm(Module):
    """Root-mean-square normalisation over the last dims ``normalized_shape`` (an int or a tuple), with a
    learnable ``weight`` (ones) when ``elementwise_affine``; ``eps=None`` is the input dtype's machine epsilon.

    >>> import jitgrad as jg
    >>> jg.nn.RMSNorm(4)(jg.ones(2, 4)).shape
    jitgrad.Size([2, 4])
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_empty(*self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        return rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


__all__ = ["rms_norm", "normalize", "RMSNorm"]
