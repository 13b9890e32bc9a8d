"""Pooling: ``F.max_pool1d/2d/3d`` (``return_indices``, ``ceil_mode``, ``dilation``), ``F.avg_pool1d/2d/3d``
(``count_include_pad``, ``ceil_mode``, ``divisor_override``), ``F.adaptive_avg_pool1d/2d/3d``, with torch
2.13's arguments, output sizes and errors (the modules are in ``nn/modules/pooling.py``).

- Max pooling binds ``max_pool_indices`` (``ir/ops/pooling.py``: torch's indices, the first maximum of each window
  winning) and gathers the values with them, so the gradient goes to the winners only (a scatter-add) and
  differentiates again.
- Average pooling is ``conv`` (``ir/ops/conv.py``) of each channel with a kernel of ones, divided by torch's
  divisor (a constant of the geometry); ``ceil_mode``'s overhang is extra zero padding on the high side.
- Adaptive average pooling is ``A_h @ x @ A_w^T`` with constant averaging matrices (row ``i`` averages input
  ``floor(i n / o)`` to ``ceil((i + 1) n / o)``), one matmul per spatial dim.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.max_pool2d(jg.arange(16.).reshape(1, 1, 4, 4), 2).tolist()
[[[[5.0, 7.0], [13.0, 15.0]]]]
"""
from __future__ import annotations

import operator

import numpy as np

from ...ir.ops import OPS as O
from ...library.creation import factories
from ...runtime.dispatch import bind
from ...runtime.grad_names import named
from ...library.torch_kwargs import torch_kwargs
from ...declarations import published


def _ints(fname, what, value, nd, omitted_ok=False):
    if hasattr(value, "__index__"):
        return (operator.index(value),) * nd
    vals = tuple(operator.index(v) for v in value)
    if len(vals) == 1:
        return vals * nd
    if len(vals) != nd:
        if nd == 1:
            raise RuntimeError(f"{fname}: {what} must be a single int, or a tuple of one int")
        either = "either be omitted, a single int, or" if omitted_ok else "either be a single int, or"
        if nd == 3 and fname.startswith("avg"):
            either = "be omitted, a single int, or" if omitted_ok else "be a single int, or"
        raise RuntimeError(f"{fname}: {what} must {either} a tuple of {('two', 'three')[nd - 2]} ints")
    return vals


def _geometry(x, kernel_size, stride, padding, dilation, ceil_mode, nd, fname, max_pool):
    """(kernel, stride, dilation, output size, (lo, hi) pads with ceil_mode's overhang, pads) after torch's checks."""
    k = _ints(fname, "kernel_size", kernel_size, nd)
    s = k if stride is None or (not hasattr(stride, "__index__") and len(stride) == 0) \
        else _ints(fname, "stride", stride, nd, True)
    p = _ints(fname, "padding", padding, nd)
    d = _ints(fname, "dilation", dilation, nd)
    if any(v == 0 for v in s):
        raise RuntimeError("stride should not be zero")
    if any(v <= 0 for v in k):
        raise RuntimeError(f"kernel size should be greater than zero, but got kH: {k[0]} kW: {k[-1]}")
    if any(v <= 0 for v in d):
        raise RuntimeError(f"dilation should be greater than zero, but got dilationH: {d[0]} dilationW: {d[-1]}")
    for kk, pp, dd in zip(k, p, d):
        if pp > ((kk - 1) * dd + 1) // 2:
            if nd == 1 and max_pool:
                raise RuntimeError(f"max_pool1d() padding should be at most half of kernel size, but got padding={pp} "
                                   f"and kernel_size={kk}")
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={pp}, "
                               f"kernel_size={kk} and dilation={dd}")
    if any(pp > kk // 2 for kk, pp in zip(k, p)):
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got padW = {p[-1]}, "
                           f"padH = {p[0]}, kW = {k[-1]}, kH = {k[0]}")
    size = tuple(x.shape[2:])
    out, pads = [], []
    for n, kk, ss, pp, dd in zip(size, k, s, p, d):
        o = (n + 2 * pp - dd * (kk - 1) - 1 + (ss - 1 if ceil_mode else 0)) // ss + 1
        if ceil_mode and (o - 1) * ss >= n + pp:       # the last window must start inside the input or its left pad
            o -= 1
        out.append(o)
        pads.append((pp, pp + max(0, (o - 1) * ss + dd * (kk - 1) + 1 - (n + 2 * pp))))
    if nd == 3 and not max_pool and any(n + 2 * pp < kk for n, kk, pp in zip(size, k, p)):
        raise RuntimeError(f"input image (T: {size[0]} H: {size[1]} W: {size[2]}) smaller than kernel size (kT: "
                           f"{k[0]} kH: {k[1]} kW: {k[2]})")
    if any(o < 1 for o in out):
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, x.shape[1:]))}). Calculated output size: "
                           f"({'x'.join(map(str, (x.shape[1],) + tuple(out)))}). Output size is too small")
    return k, s, d, tuple(out), tuple(pads), p


def _batched(input, nd, fname):
    if input.ndim == nd + 1:
        return input.unsqueeze(0), True
    if input.ndim != nd + 2:
        if nd == 1:
            raise RuntimeError(f"{fname}: Expected 2D or 3D (batch mode) tensor with optional 0 dim batch size for "
                               f"input, but got:{list(input.shape)}")
        raise RuntimeError(f"non-empty {nd + 1}D or {nd + 2}D (batch mode) tensor expected for input")
    return input, False


def _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd, fname):
    x, unbatched = _batched(input, nd, fname)
    k, s, d, out, pads, _ = _geometry(x, kernel_size, stride, padding, dilation, ceil_mode, nd, fname, True)
    idx = bind(O["max_pool_indices"], x, kernel=k, stride=s, padding=pads, dilation=d)
    n, c = x.shape[:2]
    vals = x.reshape(n, c, -1).gather(2, idx.reshape(n, c, -1)).reshape(idx.shape)
    vals = named(vals, f"MaxPool{nd}DWithIndicesBackward0")
    if unbatched:
        vals, idx = vals.squeeze(0), idx.squeeze(0)
    return (vals, idx) if return_indices else vals


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False,
               **torch_kw):
    """The maximum of each window of ``input (N, C, L)`` or ``(C, L)``; ``stride`` defaults to ``kernel_size``.
    ``return_indices=True`` also returns each maximum's position along ``L``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.max_pool1d(jg.tensor([[1., 3., 2., 2.]]), 2, return_indices=True)
    (tensor([[3., 2.]]), tensor([[1, 2]]))
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(max_pool1d, "max_pool1d", (input, kernel_size, stride, padding, dilation, ceil_mode,
                                                       return_indices), {}, torch_kw)
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1, "max_pool1d")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False,
               **torch_kw):
    """The maximum of each ``kernel_size`` window of ``input (N, C, H, W)`` or ``(C, H, W)`` (``stride`` defaults to
    ``kernel_size``; padding is ``-inf``); ``return_indices=True`` also returns each maximum's flat position in
    its ``H x W`` plane (torch's, for ``max_unpool2d``).  Ties: the first maximum in the window gets the gradient.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.max_pool2d(jg.zeros(2, 3, 7, 7), 2, ceil_mode=True).shape
    jitgrad.Size([2, 3, 4, 4])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(max_pool2d, "max_pool2d", (input, kernel_size, stride, padding, dilation, ceil_mode,
                                                       return_indices), {}, torch_kw)
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2, "max_pool2d")


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False,
               **torch_kw):
    """The maximum of each ``kernel_size`` window of ``input (N, C, D, H, W)`` or ``(C, D, H, W)``; the indices
    (``return_indices=True``) are flat positions in each ``D x H x W`` volume.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.max_pool3d(jg.zeros(2, 3, 5, 6, 7), 2).shape
    jitgrad.Size([2, 3, 2, 3, 3])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(max_pool3d, "max_pool3d", (input, kernel_size, stride, padding, dilation, ceil_mode,
                                                       return_indices), {}, torch_kw)
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 3, "max_pool3d")


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``max_pool1d(..., return_indices=True)``: (values, indices)."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``max_pool2d(..., return_indices=True)``: (values, indices)."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=False):
    """``max_pool3d(..., return_indices=True)``: (values, indices)."""
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _divisor(size, k, s, p, out, count_include_pad):
    """torch's per-output divisor: the window clipped to the padded input (count_include_pad) or to the input."""
    total = np.ones((), np.float64)
    for n, kk, ss, pp, o in zip(size, k, s, p, out):
        start = np.arange(o) * ss - pp
        end = np.minimum(start + kk, n + pp)
        cnt = end - start if count_include_pad else np.minimum(end, n) - np.maximum(start, 0)
        total = np.multiply.outer(total, cnt)
    return total


def _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, nd, fname):
    x, unbatched = _batched(input, nd, fname)
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    k, s, d, out, pads, p = _geometry(x, kernel_size, stride, padding, 1, ceil_mode, nd, fname, False)
    n, c = x.shape[:2]
    ones = factories.ones((1, 1) + k, dtype=x.dtype, device=x.device)
    # each channel as a sample of one channel: one conv with a kernel of ones gives the window sums
    sums = bind(O["conv"], x.reshape((n * c, 1) + tuple(x.shape[2:])), ones, stride=s, padding=pads,
                dilation=(1,) * nd, groups=1)
    sums = sums.reshape((n, c) + out)
    if divisor_override is not None:
        y = sums / divisor_override
    else:
        div = _divisor(x.shape[2:], k, s, p, out, count_include_pad)
        flat = div.reshape(-1)
        y = sums / (float(flat[0]) if flat.size and (flat == flat[0]).all()
                    else factories.tensor(div, dtype=x.dtype, device=x.device))
    y = named(y, f"AvgPool{nd}DBackward0")
    return y.squeeze(0) if unbatched else y


@published("jitgrad")      # torch.avg_pool1d, the same function
def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, **torch_kw):
    """The mean of each window of ``input (N, C, L)`` or ``(C, L)``; ``stride`` defaults to ``kernel_size``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.avg_pool1d(jg.tensor([[1., 3., 2., 4.]]), 2).tolist()
    [[2.0, 3.0]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(avg_pool1d, "avg_pool1d", (input, kernel_size, stride, padding, ceil_mode,
                                                       count_include_pad), {}, torch_kw)
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, **torch_kw):
    """The mean of each ``kernel_size`` window of ``input (N, C, H, W)`` or ``(C, H, W)``: zero padding counted
    in the divisor unless ``count_include_pad=False``; ``divisor_override`` replaces the divisor.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.avg_pool2d(jg.ones(1, 1, 3, 3), 2, padding=1, count_include_pad=False).tolist()
    [[[[1.0, 1.0], [1.0, 1.0]]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(avg_pool2d, "avg_pool2d", (input, kernel_size, stride, padding, ceil_mode,
                                                       count_include_pad, divisor_override), {}, torch_kw)
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2,
                     "avg_pool2d")


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, **torch_kw):
    """The mean of each ``kernel_size`` window of ``input (N, C, D, H, W)`` or ``(C, D, H, W)`` (see
    ``avg_pool2d`` for ``count_include_pad`` and ``divisor_override``).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.avg_pool3d(jg.ones(1, 1, 2, 2, 2), 2).tolist()
    [[[[[1.0]]]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(avg_pool3d, "avg_pool3d", (input, kernel_size, stride, padding, ceil_mode,
                                                       count_include_pad, divisor_override), {}, torch_kw)
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3,
                     "avg_pool3d")


def _averaging_matrix(n, o, dtype, device):
    """``(o, n)``: row ``i`` averages the inputs ``floor(i n / o)`` to ``ceil((i + 1) n / o)`` (exclusive)."""
    a = np.zeros((o, n))
    for i in range(o):      # one row per output: o is a pooled size, not pixels times batch
        lo, hi = (i * n) // o, -((-(i + 1) * n) // o)
        a[i, lo:hi] = 1.0 / (hi - lo)
    return factories.tensor(a, dtype=dtype, device=device)


def adaptive_sizes(input, output_size, nd, fname, colon=""):
    """torch's checks of an adaptive pooling's input and ``output_size`` (``None`` keeps a dim): the sizes."""
    if input.ndim not in (nd + 1, nd + 2) or any(n == 0 for n in input.shape[1:]):
        if nd == 1 and colon:
            raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional tensor for argument #1 "
                               f"'self' (while checking arguments for {fname})")
        raise RuntimeError(f"{fname}(): Expected {nd + 1}D or {nd + 2}D tensor, but got{colon} {list(input.shape)}")
    if hasattr(output_size, "__index__") or output_size is None:
        sizes = (output_size,) * nd
    else:
        sizes = tuple(output_size)
        if len(sizes) != nd:
            raise RuntimeError(f"{fname}: output_size must be {nd}")
    return tuple(n if o is None else operator.index(o) for o, n in zip(sizes, input.shape[-nd:]))


def _adaptive_avg_pool(input, output_size, nd, fname):
    sizes = adaptive_sizes(input, output_size, nd, fname)
    y = input
    for i in range(nd):         # average dim -nd + i: (..., n, rest) -> (..., o, rest), one matmul
        d = input.ndim - nd + i
        pre, rest = tuple(y.shape[:d]), tuple(y.shape[d + 1:])
        a = _averaging_matrix(input.shape[d], sizes[i], input.dtype, input.device)
        if rest:
            y = (a @ y.reshape(pre + (input.shape[d], -1))).reshape(pre + (sizes[i],) + rest)
        else:
            y = y @ a.mT
    return named(y, f"AdaptiveAvgPool{nd}DBackward0")


@published("jitgrad")      # torch.adaptive_avg_pool1d, the same function
def adaptive_avg_pool1d(input, output_size, **torch_kw):
    """Average pooling of ``(N, C, L)`` or ``(C, L)`` to ``output_size`` positions, the windows chosen for it.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.adaptive_avg_pool1d(jg.tensor([[1., 2., 3., 4., 5.]]), 2).tolist()
    [[2.0, 4.0]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(adaptive_avg_pool1d, "adaptive_avg_pool1d", (input, output_size), {}, torch_kw)
    return _adaptive_avg_pool(input, output_size, 1, "adaptive_avg_pool1d")


def adaptive_avg_pool2d(input, output_size, **torch_kw):
    """Average pooling of ``(N, C, H, W)`` or ``(C, H, W)`` to ``output_size`` (an int, a pair, ``None`` keeps that
    dim), the windows chosen for it; ``adaptive_avg_pool2d(x, 1)`` is global average pooling.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.adaptive_avg_pool2d(jg.ones(2, 3, 7, 5), (2, None)).shape
    jitgrad.Size([2, 3, 2, 5])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(adaptive_avg_pool2d, "adaptive_avg_pool2d", (input, output_size), {}, torch_kw)
    return _adaptive_avg_pool(input, output_size, 2, "adaptive_avg_pool2d")


def adaptive_avg_pool3d(input, output_size, **torch_kw):
    """Average pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` to ``output_size`` (an int, a triple, ``None``
    keeps that dim), the windows chosen for it.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.adaptive_avg_pool3d(jg.ones(2, 3, 7, 5, 4), (2, None, 1)).shape
    jitgrad.Size([2, 3, 2, 5, 1])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(adaptive_avg_pool3d, "adaptive_avg_pool3d", (input, output_size), {}, torch_kw)
    return _adaptive_avg_pool(input, output_size, 3, "adaptive_avg_pool3d")


__all__ = ["max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices", "max_pool2d_with_indices",
           "max_pool3d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d", "adaptive_avg_pool3d"]
