"""The padding modules ``ZeroPad1d/2d``, ``ConstantPad1d/2d/3d``, ``ReflectionPad1d/2d``, ``ReplicationPad1d/2d``
over ``F.pad``, as torch has them.
"""
from __future__ import annotations

from ..functional.padding import pad
from .module import Module


# ---- modules -----------------------------------------------------------------------------------------------------

class _PadNd(Module):
    """A fixed padding of the last ``_dims`` dims: an int pads every side by it, a tuple gives each side."""
    _dims = 1
    _mode = "constant"

    def __init__(self, padding, value=None):
        super().__init__()
        self.padding = (padding,) * (2 * self._dims) if isinstance(padding, int) else tuple(padding)
        if self._mode == "constant":
            self.value = value

    def forward(self, input):
        if self._mode == "constant":
            return pad(input, self.padding, "constant", self.value)
        return pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}" if self._mode == "constant" else f"{self.padding}"


class ConstantPad1d(_PadNd):
    """Pads the last dim with ``value``: ``ConstantPad1d((1, 2), 3.5)``."""
    _dims = 1

    def __init__(self, padding, value: float):
        super().__init__(padding, value)


class ConstantPad2d(ConstantPad1d):
    """Pads the last two dims with ``value``: ``padding = (left, right, top, bottom)`` or one int."""
    _dims = 2


class ConstantPad3d(ConstantPad1d):
    """Pads the last three dims with ``value``."""
    _dims = 3


class ZeroPad1d(ConstantPad1d):
    """Pads the last dim with zeros."""

    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad2d(ZeroPad1d):
    """Pads the last two dims with zeros: ``ZeroPad2d((left, right, top, bottom))`` or one int."""
    _dims = 2


class ReflectionPad1d(_PadNd):
    """Pads the last dim with its reflection (``F.pad(..., mode='reflect')``)."""
    _mode = "reflect"

    def __init__(self, padding):
        super().__init__(padding)


class ReflectionPad2d(ReflectionPad1d):
    """Pads the last two dims with their reflection."""
    _dims = 2


class ReplicationPad1d(_PadNd):
    """Pads the last dim by repeating its edge elements (``F.pad(..., mode='replicate')``)."""
    _mode = "replicate"

    def __init__(self, padding):
        super().__init__(padding)


class ReplicationPad2d(ReplicationPad1d):
    """Pads the last two dims by repeating their edge elements."""
    _dims = 2


__all__ = ["ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ReflectionPad1d",
           "ReflectionPad2d", "ReplicationPad1d", "ReplicationPad2d"]
