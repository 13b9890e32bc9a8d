"""The dropout modules ``Dropout``, ``Dropout1d/2d/3d``, ``AlphaDropout`` and ``FeatureAlphaDropout`` over
``F.dropout*`` (``nn/functional/dropouts.py``).
"""
from __future__ import annotations

from ...runtime.tensor import Tensor
from ..functional.dropouts import _check_p, dropout, dropout1d, dropout2d, dropout3d, alpha_dropout, \
    feature_alpha_dropout
from .module import Module


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


class Dropout1d(Dropout):
    """``F.dropout1d`` as a module: whole channels of ``(N, C, L)`` zeroed in training.

    >>> import jitgrad as jg
    >>> jg.nn.Dropout1d(0.2)
    Dropout1d(p=0.2, inplace=False)
    """

    def forward(self, input: Tensor) -> Tensor:
        return dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    """``F.dropout2d`` as a module: whole channels of ``(N, C, H, W)`` zeroed in training.

    >>> import jitgrad as jg
    >>> jg.nn.Dropout2d()
    Dropout2d(p=0.5, inplace=False)
    """

    def forward(self, input: Tensor) -> Tensor:
        return dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(Dropout):
    """``F.dropout3d`` as a module: whole channels of ``(N, C, D, H, W)`` zeroed in training.

    >>> import jitgrad as jg
    >>> jg.nn.Dropout3d()
    Dropout3d(p=0.5, inplace=False)
    """

    def forward(self, input: Tensor) -> Tensor:
        return dropout3d(input, self.p, self.training, self.inplace)


class AlphaDropout(Dropout):
    """``F.alpha_dropout`` as a module (active in training mode).

    >>> import jitgrad as jg
    >>> jg.nn.AlphaDropout(0.2)
    AlphaDropout(p=0.2, inplace=False)
    """

    def forward(self, input: Tensor) -> Tensor:
        return alpha_dropout(input, self.p, self.training, self.inplace)


class FeatureAlphaDropout(Dropout):
    """``F.feature_alpha_dropout`` as a module (active in training mode).

    >>> import jitgrad as jg
    >>> jg.nn.FeatureAlphaDropout(0.2)
    FeatureAlphaDropout(p=0.2, inplace=False)
    """

    def forward(self, input: Tensor) -> Tensor:
        return feature_alpha_dropout(input, self.p, self.training, self.inplace)


__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]
