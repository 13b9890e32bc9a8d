"""The pooling modules, with torch 2.13's arguments, reprs and errors: ``MaxPool1d/2d/3d``, ``AvgPool1d/2d/3d``,
``AdaptiveAvgPool1d/2d/3d``, ``AdaptiveMaxPool1d/2d/3d``, ``MaxUnpool1d/2d/3d``, ``LPPool1d/2d/3d`` (over the
functions of ``nn/functional/pooling.py`` and ``pooling_variants.py``).
"""
from __future__ import annotations

from ..functional.pooling import max_pool1d, max_pool2d, max_pool3d, avg_pool1d, avg_pool2d, avg_pool3d, \
    adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d
from ..functional.pooling_variants import adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d, _tuple, \
    max_unpool1d, max_unpool2d, max_unpool3d, lp_pool1d, lp_pool2d, lp_pool3d
from .module import Module


# ---- modules ----------------------------------------------------------------------------------------------

class _MaxPoolNd(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                              self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPoolNd):
    """``F.max_pool1d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.MaxPool1d(3, stride=2)
    MaxPool1d(kernel_size=3, stride=2, padding=0, dilation=1, ceil_mode=False)
    """
    _fn = staticmethod(max_pool1d)


class MaxPool2d(_MaxPoolNd):
    """``F.max_pool2d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.MaxPool2d(2)(jg.zeros(4, 8, 6, 6)).shape
    jitgrad.Size([4, 8, 3, 3])
    """
    _fn = staticmethod(max_pool2d)


class MaxPool3d(_MaxPoolNd):
    """``F.max_pool3d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.MaxPool3d(2)(jg.zeros(1, 2, 4, 4, 4)).shape
    jitgrad.Size([1, 2, 2, 2, 2])
    """
    _fn = staticmethod(max_pool3d)


class AvgPool1d(Module):
    """``F.avg_pool1d`` as a module (its sizes kept as 1-tuples, as torch's).

    >>> import jitgrad as jg
    >>> jg.nn.AvgPool1d(2)
    AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__()
        one = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,)     # noqa: E731
        self.kernel_size = one(kernel_size)
        self.stride = one(stride if stride is not None else kernel_size)
        self.padding = one(padding)
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, input):
        return avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(Module):
    """``F.avg_pool2d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.AvgPool2d(3, stride=2, padding=1)(jg.zeros(1, 2, 8, 8)).shape
    jitgrad.Size([1, 2, 4, 4])
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        return avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                          self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool3d(AvgPool2d):
    """``F.avg_pool3d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.AvgPool3d(2, stride=1)(jg.zeros(1, 2, 3, 3, 3)).shape
    jitgrad.Size([1, 2, 2, 2, 2])
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override=None):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)

    def forward(self, input):
        return avg_pool3d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                          self.divisor_override)


class _AdaptiveAvgPoolNd(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptiveAvgPoolNd):
    """``F.adaptive_avg_pool1d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.AdaptiveAvgPool1d(4)(jg.zeros(2, 3, 10)).shape
    jitgrad.Size([2, 3, 4])
    """

    def forward(self, input):
        return adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptiveAvgPoolNd):
    """``F.adaptive_avg_pool2d`` as a module; ``AdaptiveAvgPool2d(1)`` is global average pooling.

    >>> import jitgrad as jg
    >>> jg.nn.AdaptiveAvgPool2d((1, 1))(jg.zeros(2, 3, 7, 7)).shape
    jitgrad.Size([2, 3, 1, 1])
    """

    def forward(self, input):
        return adaptive_avg_pool2d(input, self.output_size)


class AdaptiveAvgPool3d(_AdaptiveAvgPoolNd):
    """``F.adaptive_avg_pool3d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.AdaptiveAvgPool3d(1)(jg.zeros(2, 3, 4, 5, 6)).shape
    jitgrad.Size([2, 3, 1, 1, 1])
    """

    def forward(self, input):
        return adaptive_avg_pool3d(input, self.output_size)


# ---- modules ----------------------------------------------------------------------------------------------

class _AdaptiveMaxPoolNd(Module):
    _fn = None

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input):
        return type(self)._fn(input, self.output_size, self.return_indices)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(_AdaptiveMaxPoolNd):
    """``F.adaptive_max_pool1d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.AdaptiveMaxPool1d(3)(jg.zeros(2, 4, 10)).shape
    jitgrad.Size([2, 4, 3])
    """
    _fn = staticmethod(adaptive_max_pool1d)


class AdaptiveMaxPool2d(_AdaptiveMaxPoolNd):
    """``F.adaptive_max_pool2d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.AdaptiveMaxPool2d((2, 3))(jg.zeros(2, 4, 7, 7)).shape
    jitgrad.Size([2, 4, 2, 3])
    """
    _fn = staticmethod(adaptive_max_pool2d)


class AdaptiveMaxPool3d(_AdaptiveMaxPoolNd):
    """``F.adaptive_max_pool3d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.AdaptiveMaxPool3d(1)(jg.zeros(2, 4, 3, 5, 7)).shape
    jitgrad.Size([2, 4, 1, 1, 1])
    """
    _fn = staticmethod(adaptive_max_pool3d)


class _MaxUnpoolNd(Module):
    _nd = 2
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        nd = self._nd
        self.kernel_size = _tuple(kernel_size, nd)
        self.stride = _tuple(stride if stride is not None else kernel_size, nd)
        self.padding = _tuple(padding, nd)

    def forward(self, input, indices, output_size=None):
        return type(self)._fn(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """``F.max_unpool1d`` as a module: ``forward(input, indices, output_size=None)``.

    >>> import jitgrad as jg
    >>> jg.nn.MaxUnpool1d(2)
    MaxUnpool1d(kernel_size=(2,), stride=(2,), padding=(0,))
    """
    _nd = 1
    _fn = staticmethod(max_unpool1d)


class MaxUnpool2d(_MaxUnpoolNd):
    """``F.max_unpool2d`` as a module: ``forward(input, indices, output_size=None)``.

    >>> import jitgrad as jg
    >>> jg.nn.MaxUnpool2d(2)
    MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))
    """
    _nd = 2
    _fn = staticmethod(max_unpool2d)


class MaxUnpool3d(_MaxUnpoolNd):
    """``F.max_unpool3d`` as a module: ``forward(input, indices, output_size=None)``.

    >>> import jitgrad as jg
    >>> jg.nn.MaxUnpool3d(2, stride=1)
    MaxUnpool3d(kernel_size=(2, 2, 2), stride=(1, 1, 1), padding=(0, 0, 0))
    """
    _nd = 3
    _fn = staticmethod(max_unpool3d)


class _LPPoolNd(Module):
    _fn = None

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self):
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """``F.lp_pool1d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.LPPool1d(2, 3)
    LPPool1d(norm_type=2, kernel_size=3, stride=None, ceil_mode=False)
    """
    _fn = staticmethod(lp_pool1d)


class LPPool2d(_LPPoolNd):
    """``F.lp_pool2d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.LPPool2d(2, 2)(jg.ones(1, 3, 4, 4)).shape
    jitgrad.Size([1, 3, 2, 2])
    """
    _fn = staticmethod(lp_pool2d)


class LPPool3d(_LPPoolNd):
    """``F.lp_pool3d`` as a module.

    >>> import jitgrad as jg
    >>> jg.nn.LPPool3d(2, 2)(jg.ones(1, 3, 4, 4, 4)).shape
    jitgrad.Size([1, 3, 2, 2, 2])
    """
    _fn = staticmethod(lp_pool3d)


__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
           "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
           "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "LPPool1d", "LPPool2d", "LPPool3d"]
