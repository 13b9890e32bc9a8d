"""``Unfold`` and ``Fold``: the sliding-block modules over ``F.unfold`` / ``F.fold``."""
from __future__ import annotations

from ..functional import conv as C
from .module import Module


class Unfold(Module):
    """``F.unfold`` as a module: sliding blocks of ``(N, C, H, W)`` as ``(N, C * kH * kW, L)`` columns.

    >>> import jitgrad as jg
    >>> jg.nn.Unfold(kernel_size=(2, 3))(jg.zeros(2, 5, 3, 4)).shape
    jitgrad.Size([2, 30, 4])
    """

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return C.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, "
                f"stride={self.stride}")


class Fold(Module):
    """``F.fold`` as a module: columns ``(N, C * kH * kW, L)`` summed back into ``(N, C, *output_size)``.

    >>> import jitgrad as jg
    >>> jg.nn.Fold(output_size=(4, 5), kernel_size=(2, 2))(jg.zeros(1, 12, 12)).shape
    jitgrad.Size([1, 3, 4, 5])
    """

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return C.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self):
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


__all__ = ["Unfold", "Fold"]
