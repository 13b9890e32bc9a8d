"""``F.conv1d/2d/3d``, ``F.conv_transpose1d/2d/3d``, ``F.unfold`` and ``F.fold``: torch's
argument handling, checks and error texts over the convolution primitives of ``ir/ops/conv.py``.

``conv`` and ``conv_transpose`` bind one primitive each (the bias is a broadcast add that fuses); ``unfold`` is
a grouped ``conv`` with a one-hot kernel (one output channel per kernel offset), and ``fold`` the matching
``conv_transpose``, so every function here differentiates to any order and compiles.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.conv2d(jg.ones(1, 1, 3, 3), jg.ones(1, 1, 2, 2)).tolist()
[[[[4.0, 4.0], [4.0, 4.0]]]]
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ...ir.ops import OPS as O
from ...ir.ops.conv import out_size
from ...library.creation import factories
from ...runtime.dispatch import bind
from ...runtime.grad_names import named
from ...library.torch_kwargs import torch_kwargs
from ...declarations import published


_TENSOR_TYPE = {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor", "float16": "torch.HalfTensor",
                "bfloat16": "torch.BFloat16Tensor", "int64": "torch.LongTensor", "int32": "torch.IntTensor",
                "int16": "torch.ShortTensor", "int8": "torch.CharTensor", "uint8": "torch.ByteTensor"}


_SCALAR_TYPE = {"float32": "float", "float64": "double", "float16": "c10::Half", "int64": "long int", "int32": "int"}


def expand_arg(name, value, nd):
    """``value`` (an int, or a sequence of 1 or ``nd`` ints) as a tuple of ``nd`` ints, with torch's error."""
    if isinstance(value, bool) or not hasattr(value, "__index__") and not isinstance(value, (tuple, list)):
        raise TypeError(f"{name} must be an int or a tuple of ints, got {type(value).__name__}")
    vals = [operator.index(value)] if hasattr(value, "__index__") else [operator.index(v) for v in value]
    if len(vals) == 1:
        vals = vals * nd
    if len(vals) != nd:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {nd} values to match the "
                           f"convolution dimensions, but got {name}={vals}")
    return tuple(vals)


def same_padding(k, dilation):
    """torch's ``padding='same'``: ``dilation (k - 1)`` in all, the odd one on the high side."""
    return tuple((d * (kk - 1) // 2, d * (kk - 1) - d * (kk - 1) // 2) for kk, d in zip(k, dilation))


def _batched(input, nd, fname):
    if input.ndim == nd + 1:
        return input.unsqueeze(0), True
    if input.ndim != nd + 2:
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {fname}, but got input "
                           f"of size: {list(input.shape)}")
    return input, False


def _check_common(input, weight, bias, stride, dilation, groups, transposed):
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"Input type ({_TENSOR_TYPE.get(input.dtype.name, input.dtype.name)}) and weight type "
                           f"({_TENSOR_TYPE.get(weight.dtype.name, weight.dtype.name)}) should be the same or input "
                           f"should be a MKLDNN tensor and weight is a dense tensor")
    if any(s < 1 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d < 1 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if groups < 1:
        raise RuntimeError("non-positive groups is not supported")
    if weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{list(weight.shape)}] instead")
    cin = weight.shape[0] if transposed else weight.shape[1] * groups
    if input.shape[1] != cin:
        tr = "transposed=1, " if transposed else f"groups={groups}, "
        raise RuntimeError(f"Given {tr}weight of size {list(weight.shape)}, expected input{list(input.shape)} to "
                           f"have {cin} channels, but got {input.shape[1]} channels instead")
    cout = weight.shape[1] * groups if transposed else weight.shape[0]
    if bias is not None:
        if bias.ndim != 1 or bias.shape[0] != cout:
            tr = "transposed=1, " if transposed else ""
            raise RuntimeError(f"Given {tr}weight of size {list(weight.shape)}, expected bias to be 1-dimensional "
                               f"with {cout} elements, but got bias of size {list(bias.shape)} instead")
        if bias.dtype is not input.dtype:
            raise RuntimeError(f"Input type ({_SCALAR_TYPE.get(input.dtype.name, input.dtype.name)}) and bias type "
                               f"({_SCALAR_TYPE.get(bias.dtype.name, bias.dtype.name)}) should be the same")


def _add_bias(out, bias, nd):
    return out if bias is None else out + bias.reshape((-1,) + (1,) * nd)


def _prologue(input, weight, stride, dilation, nd, fname):
    """What a convolution and a transposed one check and expand first: the input batched (and whether it was), the
    weight's rank (torch words its refusal as a stride mismatch), stride and dilation as ``nd``-tuples."""
    x, unbatched = _batched(input, nd, fname)
    if weight.ndim != nd + 2:
        raise RuntimeError(f"expected stride to be a single integer value or a list of {weight.ndim - 2} values to "
                           f"match the convolution dimensions, but got stride={list(expand_arg('stride', stride, nd))}")
    return x, unbatched, expand_arg("stride", stride, nd), expand_arg("dilation", dilation, nd)


def _conv(input, weight, bias, stride, padding, dilation, groups, nd, fname):
    x, unbatched, stride, dilation = _prologue(input, weight, stride, dilation, nd, fname)
    k = tuple(weight.shape[2:])
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            pads = same_padding(k, dilation)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        p = expand_arg("padding", padding, nd)
        if any(v < 0 for v in p):
            raise RuntimeError("negative padding is not supported")
        pads = tuple((v, v) for v in p)
    _check_common(x, weight, bias, stride, dilation, groups, False)
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], pads))
    dk = tuple(d * (kk - 1) + 1 for kk, d in zip(k, dilation))
    if any(a < b for a, b in zip(padded, dk)):
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel "
                           f"size: ({' x '.join(map(str, dk))}). Kernel size can't be greater than actual input size")
    out = bind(O["conv"], x, weight, stride=stride, padding=pads, dilation=dilation, groups=int(groups))
    out = named(_add_bias(out, bias, nd), "ConvolutionBackward0")
    return out.squeeze(0) if unbatched else out


@published("jitgrad")      # torch.conv1d, the same function
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, **torch_kw):
    """1-D cross-correlation of ``input (N, C_in, L)`` (or unbatched ``(C_in, L)``) with ``weight (C_out,
    C_in / groups, k)``, plus ``bias (C_out,)``; ``padding`` an int, a 1-tuple, ``'valid'`` or ``'same'``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.conv1d(jg.tensor([[[1., 2., 3., 4.]]]), jg.tensor([[[1., -1.]]])).tolist()
    [[[-1.0, -1.0, -1.0]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(conv1d, "conv1d", (input, weight, bias, stride, padding, dilation, groups), {}, torch_kw)
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


@published("jitgrad")      # torch.conv2d, the same function
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, **torch_kw):
    """2-D cross-correlation of ``input (N, C_in, H, W)`` (or unbatched ``(C_in, H, W)``) with ``weight (C_out,
    C_in / groups, kH, kW)``, plus ``bias (C_out,)``; ``stride``, ``padding`` (or ``'valid'``/``'same'``) and
    ``dilation`` an int or a pair; ``groups = C_in`` is a depthwise convolution.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.conv2d(jg.ones(1, 2, 4, 4), jg.ones(2, 1, 3, 3), padding="same", groups=2).shape
    jitgrad.Size([1, 2, 4, 4])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(conv2d, "conv2d", (input, weight, bias, stride, padding, dilation, groups), {}, torch_kw)
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


@published("jitgrad")      # torch.conv3d, the same function
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, **torch_kw):
    """3-D cross-correlation of ``input (N, C_in, D, H, W)`` (or unbatched ``(C_in, D, H, W)``) with ``weight
    (C_out, C_in / groups, kD, kH, kW)``, plus ``bias (C_out,)``; ``stride``, ``padding`` (or ``'valid'``/
    ``'same'``) and ``dilation`` an int or a triple.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.conv3d(jg.ones(1, 2, 4, 4, 4), jg.ones(3, 2, 3, 3, 3), padding=1).shape
    jitgrad.Size([1, 3, 4, 4, 4])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(conv3d, "conv3d", (input, weight, bias, stride, padding, dilation, groups), {}, torch_kw)
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def transposed_size(size, k, stride, padding, output_padding, dilation):
    """The spatial size of a transposed convolution: ``(n - 1) stride - 2 padding + dilation (k - 1) +
    output_padding + 1`` per dim."""
    return tuple((n - 1) * s - 2 * p + d * (kk - 1) + op + 1
                 for n, kk, s, p, op, d in zip(size, k, stride, padding, output_padding, dilation))


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, nd, fname):
    x, unbatched, stride, dilation = _prologue(input, weight, stride, dilation, nd, fname)
    pad = expand_arg("padding", padding, nd)
    opad = expand_arg("output_padding", output_padding, nd)
    if any(v < 0 for v in pad):
        raise RuntimeError("negative padding is not supported")
    if any(v < 0 for v in opad):
        raise RuntimeError("negative output_padding is not supported")
    _check_common(x, weight, bias, stride, dilation, groups, True)
    if any(op >= s and op >= d for op, s, d in zip(opad, stride, dilation)):
        # conv_transpose1d is reported through its 2-d form, as torch does
        o2, s2, d2 = ((0,) + opad, (1,) + stride, (1,) + dilation) if nd == 1 else (opad, stride, dilation)
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got "
                           f"output_padding_height: {o2[0]} output_padding_width: {o2[1]} stride_height: {s2[0]} "
                           f"stride_width: {s2[1]} dilation_height: {d2[0]} dilation_width: {d2[1]}")
    k = tuple(weight.shape[2:])
    size = transposed_size(x.shape[2:], k, stride, pad, opad, dilation)
    if any(n < 1 for n in size):
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, x.shape[2:]))}). Calculated output "
                           f"size per channel: ({' x '.join(map(str, size))}). Output size is too small")
    pads = tuple((p, p) for p in pad)
    # with output_padding >= stride (allowed below the dilation) the conv over `size` has more outputs than x:
    # the adjoint then reads zeros there
    extra = [o - n for o, n in zip(out_size(size, k, stride, pads, dilation), x.shape[2:])]
    if any(extra):
        from .padding import pad as _pad
        x = _pad(x, tuple(v for e in reversed(extra) for v in (0, e)))
    out = bind(O["conv_transpose"], x, weight, stride=stride, padding=pads, dilation=dilation, groups=int(groups),
               size=size)
    out = named(_add_bias(out, bias, nd), "ConvolutionBackward0")
    return out.squeeze(0) if unbatched else out


@published("jitgrad")      # torch.conv_transpose1d, the same function
def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     **torch_kw):
    """The transposed 1-D convolution (the gradient of ``conv1d`` with respect to its input) of ``input (N, C_in,
    L)`` with ``weight (C_in, C_out / groups, k)``, plus ``bias (C_out,)``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.conv_transpose1d(jg.tensor([[[1., 2.]]]), jg.tensor([[[1., 1.]]]), stride=2).tolist()
    [[[1.0, 1.0, 2.0, 2.0]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(conv_transpose1d, "conv_transpose1d", (input, weight, bias, stride, padding,
                                                                   output_padding, groups, dilation), {}, torch_kw)
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 1,
                           "conv_transpose1d")


@published("jitgrad")      # torch.conv_transpose2d, the same function
def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     **torch_kw):
    """The transposed 2-D convolution (the gradient of ``conv2d`` with respect to its input) of ``input (N, C_in,
    H, W)`` with ``weight (C_in, C_out / groups, kH, kW)``, plus ``bias (C_out,)``: an upsampling layer.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.conv_transpose2d(jg.ones(1, 3, 4, 4), jg.ones(3, 2, 2, 2), stride=2).shape
    jitgrad.Size([1, 2, 8, 8])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(conv_transpose2d, "conv_transpose2d", (input, weight, bias, stride, padding,
                                                                   output_padding, groups, dilation), {}, torch_kw)
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 2,
                           "conv_transpose2d")


@published("jitgrad")      # torch.conv_transpose3d, the same function
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     **torch_kw):
    """The transposed 3-D convolution (the gradient of ``conv3d`` with respect to its input) of ``input (N, C_in,
    D, H, W)`` with ``weight (C_in, C_out / groups, kD, kH, kW)``, plus ``bias (C_out,)``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.conv_transpose3d(jg.ones(1, 3, 2, 2, 2), jg.ones(3, 2, 2, 2, 2), stride=2).shape
    jitgrad.Size([1, 2, 4, 4, 4])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(conv_transpose3d, "conv_transpose3d", (input, weight, bias, stride, padding,
                                                                   output_padding, groups, dilation), {}, torch_kw)
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 3,
                           "conv_transpose3d")


# ---- unfold / fold: im2col and col2im as a grouped conv with a one-hot kernel --------------------------------

def _one_hot_kernel(C, k, dtype, device):
    """``(C * prod(k), 1, *k)``: output channel ``c * prod(k) + j`` picks kernel offset ``j`` of channel ``c``."""
    K = math.prod(k)
    eye = np.tile(np.eye(K).reshape((K, 1) + tuple(k)), (C, 1) + (1,) * len(k))
    return factories.tensor(eye, dtype=dtype, device=device)


def _fold_args(kernel_size, dilation, padding, stride):
    return (expand_arg("kernel_size", kernel_size, 2), expand_arg("dilation", dilation, 2),
            expand_arg("padding", padding, 2), expand_arg("stride", stride, 2))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1, **torch_kw):
    """Sliding local blocks of ``input (N, C, H, W)`` (or ``(C, H, W)``) as columns: ``(N, C * kH * kW, L)``,
    ``L`` the number of block positions (im2col).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.unfold(jg.arange(9.).reshape(1, 1, 3, 3), 2).tolist()
    [[[0.0, 1.0, 3.0, 4.0], [1.0, 2.0, 4.0, 5.0], [3.0, 4.0, 6.0, 7.0], [4.0, 5.0, 7.0, 8.0]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(unfold, "unfold", (input, kernel_size, dilation, padding, stride), {}, torch_kw)
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    x = input.unsqueeze(0) if input.ndim == 3 else input
    k, d, p, s = _fold_args(kernel_size, dilation, padding, stride)
    C = x.shape[1]
    cols = _conv(x, _one_hot_kernel(C, k, x.dtype, x.device), None, s, p, d, C, 2, "unfold")
    cols = named(cols.reshape(cols.shape[0], cols.shape[1], -1), "Im2ColBackward0")
    return cols.squeeze(0) if input.ndim == 3 else cols


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1, **torch_kw):
    """Sums columns ``(N, C * kH * kW, L)`` (or ``(C * kH * kW, L)``) back into an image ``(N, C, *output_size)``,
    overlapping blocks added (col2im; the adjoint of ``unfold``).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.fold(jg.ones(1, 4, 4), (3, 3), 2).tolist()
    [[[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(fold, "fold", (input, output_size, kernel_size, dilation, padding, stride), {}, torch_kw)
    if input.ndim not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported "
                                  f"(got {input.ndim}D)")
    x = input.unsqueeze(0) if input.ndim == 2 else input
    size = expand_arg("output_size", output_size, 2)
    k, d, p, s = _fold_args(kernel_size, dilation, padding, stride)
    K = math.prod(k)
    if x.shape[1] % K:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={x.shape[1]} and kernel_size={k}.")
    blocks = out_size(size, k, s, tuple((v, v) for v in p), d)
    if x.shape[2] != math.prod(blocks):
        raise RuntimeError(f"Given output_size={size}, kernel_size={k}, dilation={d}, padding={p}, stride={s}, "
                           f"expected size of input's dimension 2 to match the calculated number of sliding blocks "
                           f"{blocks[0]} * {blocks[1]} = {math.prod(blocks)}, but got input.size(2)={x.shape[2]}.")
    C = x.shape[1] // K
    out = bind(O["conv_transpose"], x.reshape(x.shape[:2] + blocks), _one_hot_kernel(C, k, x.dtype, x.device),
               stride=s, padding=tuple((v, v) for v in p), dilation=d, groups=C, size=size)
    out = named(out, "Col2ImBackward0")
    return out.squeeze(0) if input.ndim == 2 else out


__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "unfold", "fold"]
