"""Dropout: ``F.dropout`` and the ``nn.Dropout`` module.

The mask is one draw of the generator (``rand`` compared with ``p``), scaled by ``1 / (1 - p)`` and multiplied
into the input; autograd saves that scaled mask for the backward pass (the mul's vjp), so the gradient uses
exactly the mask of the forward pass, eagerly and inside ``@jitgrad.compile`` (where the draw is Philox in the
generated loop and the generator's offset is written back, so every call gets a new mask).
"""
from __future__ import annotations

from ..ir import dtypes as dt
from ..runtime.grad_mode import no_grad
from ..runtime.sampling import rand
from ..runtime.tensor import Tensor
from .module import Module
from ..runtime.torch_kwargs import torch_kwargs


def _check_p(p):
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, **torch_kw) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)`` (torch's
    ``F.dropout``).  With ``training=False`` (or ``p == 0``) the input is returned as is."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(dropout, 'dropout', (input, p, training, inplace), {}, torch_kw)
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:    # torch: no draw, all zeros (1 / (1 - p) would be inf)
        return input.mul_(0.0) if inplace else input * 0.0
    md = input.dtype if input.is_floating_point() else dt.DEFAULT_FLOAT
    with no_grad():
        mask = (rand(input.shape, dtype=md, device=input.device) >= p).to(md) * (1.0 / (1.0 - p))
    return input.mul_(mask) if inplace else input * mask


class Dropout(Module):
    """During training, zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``;
    in eval mode, the identity (torch.nn.Dropout).

    >>> import jitgrad as jg
    >>> m = jg.nn.Dropout(p=0.2)
    >>> m(jg.ones(4, 5)).shape
    jitgrad.Size([4, 5])
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        _check_p(p)
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


__all__ = ["dropout", "Dropout"]
