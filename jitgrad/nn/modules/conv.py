"""The convolution modules ``Conv1d/2d/3d``, ``ConvTranspose1d/2d/3d`` as torch has them: parameters ``weight`` and ``bias``, torch's attributes
(``kernel_size``, ``stride``, ``padding``, ``dilation``, ``output_padding``, ``groups``, ``padding_mode``,
``_reversed_padding_repeated_twice``), initialisation, checks and reprs.

``padding_mode`` other than ``'zeros'`` pads with ``F.pad`` first, then convolves without padding.

>>> import jitgrad as jg
>>> conv = jg.nn.Conv2d(3, 8, 3, padding=1)
>>> conv(jg.zeros(2, 3, 16, 16)).shape
jitgrad.Size([2, 8, 16, 16])
"""
from __future__ import annotations

import math

from .. import init
from ..functional import conv as C
from ..functional.padding import pad as _pad
from .module import Module
from ..parameter import Parameter, _empty


_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """What the convolution modules share (torch's ``_ConvNd``)."""

    _nd = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, transposed, output_padding,
                 groups, bias, padding_mode, device=None, dtype=None):
        super().__init__()
        nd = self._nd
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in C.expand_arg("stride", stride, nd)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {{'replicate', 'reflect', 'circular', 'zeros'}}, but got "
                             f"padding_mode={padding_mode!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = C.expand_arg("kernel_size", kernel_size, nd)
        self.stride = C.expand_arg("stride", stride, nd)
        self.padding = padding if isinstance(padding, str) else C.expand_arg("padding", padding, nd)
        self.dilation = C.expand_arg("dilation", dilation, nd)
        self.transposed = transposed
        self.output_padding = C.expand_arg("output_padding", output_padding, nd)
        self.groups, self.padding_mode = groups, padding_mode
        if isinstance(self.padding, str):
            pairs = ((0, 0),) * nd if padding == "valid" else C.same_padding(self.kernel_size, self.dilation)
        else:
            pairs = tuple((p, p) for p in self.padding)
        # F.pad's order: the last dim first, (lo, hi) each (torch's: a list for a padding string, else a tuple)
        rev = [v for lo_hi in reversed(pairs) for v in lo_hi]
        self._reversed_padding_repeated_twice = rev if isinstance(self.padding, str) else tuple(rev)
        shape = ((in_channels, out_channels // groups) if transposed else (out_channels, in_channels // groups)) \
            + self.kernel_size
        self.weight = Parameter(_empty(*shape, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(_empty(out_channels, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as the bias
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * len(self.padding):
            s += f", padding={self.padding}"
        if self.dilation != (1,) * len(self.dilation):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * len(self.output_padding):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, False, 0, groups, bias,
                         padding_mode, device, dtype)

    def _conv_forward(self, input, weight, bias):
        f = (C.conv1d, C.conv2d, C.conv3d)[self._nd - 1]
        if self.padding_mode != "zeros":
            return f(_pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode), weight, bias,
                     self.stride, 0, self.dilation, self.groups)
        return f(input, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, input):
        return self._conv_forward(input, self.weight, self.bias)


class Conv1d(_Conv):
    """1-D convolution over ``(N, C_in, L)`` (or ``(C_in, L)``) input; ``weight (out_channels, in_channels /
    groups, kernel_size)``.

    >>> import jitgrad as jg
    >>> jg.nn.Conv1d(4, 6, 3, padding="same")
    Conv1d(4, 6, kernel_size=(3,), stride=(1,), padding=same)
    """
    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)


class Conv2d(_Conv):
    """2-D convolution over ``(N, C_in, H, W)`` (or ``(C_in, H, W)``) input; ``weight (out_channels, in_channels /
    groups, kH, kW)``.

    >>> import jitgrad as jg
    >>> jg.nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False)
    Conv2d(3, 16, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)
    """
    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)


class Conv3d(_Conv):
    """3-D convolution over ``(N, C_in, D, H, W)`` (or ``(C_in, D, H, W)``) input; ``weight (out_channels,
    in_channels / groups, kD, kH, kW)``.

    >>> import jitgrad as jg
    >>> jg.nn.Conv3d(2, 4, 3, padding=1, padding_mode="replicate")(jg.zeros(1, 2, 4, 5, 6)).shape
    jitgrad.Size([1, 4, 4, 5, 6])
    """
    _nd = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)


class _ConvTransposeNd(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, True, output_padding,
                         groups, bias, padding_mode, device, dtype)

    def _output_padding(self, input, output_size):
        """``output_padding``, or the one that gives ``output_size`` (its last ``nd`` entries)."""
        if output_size is None:
            return self.output_padding
        nd = self._nd
        size = list(output_size)[-nd:]
        if len(size) != nd:
            raise ValueError(f"ConvTranspose{nd}D: for {input.ndim}D input, output_size must have {nd} or "
                             f"{nd + 2} elements (got {len(output_size)})")
        lo = C.transposed_size(input.shape[-nd:], self.kernel_size, self.stride, self.padding, (0,) * nd,
                               self.dilation)
        hi = tuple(n + s - 1 for n, s in zip(lo, self.stride))
        if any(not a <= int(v) <= b for v, a, b in zip(size, lo, hi)):
            raise ValueError(f"requested an output size of {tuple(size)}, but valid sizes range from {list(lo)} to "
                             f"{list(hi)} (for an input of jitgrad.Size({list(input.shape[-nd:])}))")
        return tuple(int(v) - a for v, a in zip(size, lo))

    def forward(self, input, output_size=None):
        f = (C.conv_transpose1d, C.conv_transpose2d, C.conv_transpose3d)[self._nd - 1]
        return f(input, self.weight, self.bias, self.stride, self.padding, self._output_padding(input, output_size),
                 self.groups, self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    """Transposed 1-D convolution (the input gradient of ``Conv1d`` as a layer); ``weight (in_channels,
    out_channels / groups, kernel_size)``.

    >>> import jitgrad as jg
    >>> jg.nn.ConvTranspose1d(4, 2, 3, stride=2)(jg.zeros(1, 4, 5)).shape
    jitgrad.Size([1, 2, 11])
    """
    _nd = 1

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                         dilation, padding_mode, device, dtype)


class ConvTranspose2d(_ConvTransposeNd):
    """Transposed 2-D convolution (upsampling; the input gradient of ``Conv2d`` as a layer); ``weight
    (in_channels, out_channels / groups, kH, kW)``; ``forward(input, output_size=None)``.

    >>> import jitgrad as jg
    >>> jg.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)(jg.zeros(1, 4, 5, 5)).shape
    jitgrad.Size([1, 2, 10, 10])
    """
    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                         dilation, padding_mode, device, dtype)


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-D convolution (volumetric upsampling; the input gradient of ``Conv3d`` as a layer); ``weight
    (in_channels, out_channels / groups, kD, kH, kW)``; ``forward(input, output_size=None)``.

    >>> import jitgrad as jg
    >>> jg.nn.ConvTranspose3d(4, 2, 2, stride=2)(jg.zeros(1, 4, 3, 3, 3)).shape
    jitgrad.Size([1, 2, 6, 6, 6])
    """
    _nd = 3

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                         dilation, padding_mode, device, dtype)


__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
