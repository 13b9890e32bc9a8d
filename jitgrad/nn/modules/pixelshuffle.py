"""``PixelShuffle`` (channels into space) and ``PixelUnshuffle`` (space into channels)."""
from __future__ import annotations

from ..functional.pixelshuffle import pixel_shuffle, pixel_unshuffle
from .module import Module


class PixelShuffle(Module):
    """``F.pixel_shuffle`` as a module."""

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``F.pixel_unshuffle`` as a module."""

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"


__all__ = ["PixelShuffle", "PixelUnshuffle"]
