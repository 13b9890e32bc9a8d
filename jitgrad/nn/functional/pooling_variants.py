"""The rest of torch's pooling family: ``F.adaptive_max_pool1d/2d/3d`` (``return_indices``), ``F.max_unpool1d/2d/3d``
and ``F.lp_pool1d/2d/3d``, with torch 2.13's arguments and errors.  All compositions:

- Adaptive max pooling reads each output's window (input ``floor(i n / o)`` to ``ceil((i + 1) n / o)`` per dim)
  through a constant table of flat input positions, ``(prod(out), max window)``, the short windows padded with
  their own last position (a repeat never changes the maximum nor which position comes first).  The argmax of
  the gathered windows (on the detached input) picks torch's index (the first maximum in row-major order); the
  values are a ``gather`` at those indices, so the gradient goes to the winners and differentiates again.
- Max unpooling writes the values at their indices into zeros (an ``index_put``, the last write winning as in
  torch's kernel); its gradient is the gather at the indices, as torch's.
- Power-average pooling is torch's formula: ``(sign(s) relu(|s|) * prod(kernel)) ** (1 / p)`` for ``s`` the
  average pool of ``x ** p``.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.adaptive_max_pool1d(jg.tensor([[1., 5., 2., 0., 3.]]), 2).tolist()
[[5.0, 3.0]]
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import dtypes as dt
from ...library.creation import factories
from ...runtime.grad_names import named
from ...library.torch_kwargs import torch_kwargs
from . import activation as _act
from .pooling import adaptive_sizes, avg_pool1d, avg_pool2d, avg_pool3d


_NAMES = ("one", "two", "three")


# ---- adaptive max pooling ---------------------------------------------------------------------------------

def _window_table(size, out):
    """``(prod(out), prod(kmax))`` int64: the flat input positions of each output's window (row-major), short
    windows repeating their last position."""
    per_dim = []
    for n, o in zip(size, out):
        start = (np.arange(o) * n) // o
        end = -((-(np.arange(o) + 1) * n) // o)
        kmax = int((end - start).max()) if o else 1
        per_dim.append(np.minimum(start[:, None] + np.arange(kmax)[None, :], end[:, None] - 1))
    flat = np.zeros((1, 1), np.int64)
    for n, t in zip(size, per_dim):     # combine dims: outputs and offsets both row-major
        o, k = t.shape
        flat = (flat[:, None, :, None] * n + t[None, :, None, :]).reshape(flat.shape[0] * o, flat.shape[1] * k)
    return flat


def _adaptive_max_pool(input, output_size, return_indices, nd, fname):
    sizes = adaptive_sizes(input, output_size, nd, fname, colon=":")
    if any(o < 0 for o in sizes):
        raise RuntimeError(f"{fname}(): Expected output_size to be non-negative, got {list(sizes)}")
    x = input.unsqueeze(0) if input.ndim == nd + 1 else input
    n, c = x.shape[:2]
    table = _window_table(tuple(x.shape[2:]), sizes)
    P, K = table.shape
    flat = x.reshape(n, c, -1)
    tab = factories.tensor(table, dtype=dt.int64, device=x.device)
    windows = flat.detach().index_select(2, tab.reshape(-1)).reshape(n, c, P, K)
    pick = windows.argmax(-1, keepdim=True)                     # the first maximum of each window
    idx = tab.expand(n, c, P, K).gather(3, pick).reshape((n, c) + sizes)
    vals = named(flat.gather(2, idx.reshape(n, c, P)).reshape((n, c) + sizes), f"AdaptiveMaxPool{nd}DBackward0")
    if input.ndim == nd + 1:
        vals, idx = vals.squeeze(0), idx.squeeze(0)
    return (vals, idx) if return_indices else vals


def adaptive_max_pool1d(input, output_size, return_indices=False, **torch_kw):
    """Max pooling of ``(N, C, L)`` or ``(C, L)`` to ``output_size`` positions, the windows chosen for it;
    ``return_indices=True`` also returns each maximum's position along ``L``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.adaptive_max_pool1d(jg.tensor([[1., 5., 2., 0.]]), 2, return_indices=True)
    (tensor([[5., 2.]]), tensor([[1, 2]]))
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(adaptive_max_pool1d, "adaptive_max_pool1d", (input, output_size, return_indices), {},
                            torch_kw)
    return _adaptive_max_pool(input, output_size, return_indices, 1, "adaptive_max_pool1d")


def adaptive_max_pool2d(input, output_size, return_indices=False, **torch_kw):
    """Max pooling of ``(N, C, H, W)`` or ``(C, H, W)`` to ``output_size`` (an int, a pair, ``None`` keeps that
    dim); the indices are flat positions in each ``H x W`` plane.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.adaptive_max_pool2d(jg.zeros(2, 3, 7, 5), (2, None)).shape
    jitgrad.Size([2, 3, 2, 5])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(adaptive_max_pool2d, "adaptive_max_pool2d", (input, output_size, return_indices), {},
                            torch_kw)
    return _adaptive_max_pool(input, output_size, return_indices, 2, "adaptive_max_pool2d")


def adaptive_max_pool3d(input, output_size, return_indices=False, **torch_kw):
    """Max pooling of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` to ``output_size``; the indices are flat positions
    in each ``D x H x W`` volume.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.adaptive_max_pool3d(jg.zeros(1, 2, 5, 6, 7), 2).shape
    jitgrad.Size([1, 2, 2, 2, 2])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(adaptive_max_pool3d, "adaptive_max_pool3d", (input, output_size, return_indices), {},
                            torch_kw)
    return _adaptive_max_pool(input, output_size, return_indices, 3, "adaptive_max_pool3d")


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False):
    """``adaptive_max_pool1d(..., return_indices=True)``: (values, indices)."""
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False):
    """``adaptive_max_pool2d(..., return_indices=True)``: (values, indices)."""
    return adaptive_max_pool2d(input, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False):
    """``adaptive_max_pool3d(..., return_indices=True)``: (values, indices)."""
    return adaptive_max_pool3d(input, output_size, True)


# ---- max unpooling ----------------------------------------------------------------------------------------

def _tuple(v, nd):
    return tuple(int(i) for i in v) if isinstance(v, (tuple, list)) else (int(v),) * nd


def _unpool_size(input, kernel_size, stride, padding, output_size, nd):
    """torch's ``_unpool_output_size``."""
    k, s, p = _tuple(kernel_size, nd), _tuple(stride, nd), _tuple(padding, nd)
    default = [(input.shape[input.ndim - nd + d] - 1) * s[d] + k[d] - 2 * p[d] for d in range(nd)]
    if output_size is None:
        return tuple(default)
    size = list(output_size)
    if len(size) == nd + 2:
        size = size[2:]
    if len(size) != nd:
        raise ValueError(f"output_size should be a sequence containing {nd} or {nd + 2} elements, but it has a "
                         f"length of '{len(size)}'")
    for d in range(nd):
        lo, hi = default[d] - s[d], default[d] + s[d]
        if not lo < size[d] < hi:
            raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between {lo} and {hi})')
    return tuple(int(v) for v in size)


def _max_unpool(input, indices, kernel_size, stride, padding, output_size, nd, fname):
    if indices.dtype is not dt.int64:
        raise RuntimeError(f"elements in indices should be type int64 but got: {indices.dtype.name.capitalize()}")
    if tuple(indices.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected shape of indices to be same as that of the input tensor ({list(input.shape)}) "
                           f"but got indices tensor with shape: {list(indices.shape)}")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{fname}: Expected input to be {nd + 1}D or {nd + 2}D, but got {list(input.shape)}"
                           if nd != 2 else f"Input to max_unpooling2d should be a 3d or 4d Tensor, but got a tensor "
                           f"with {input.ndim} dimensions.")
    size = _unpool_size(input, kernel_size, kernel_size if stride is None else stride, padding, output_size, nd)
    x, ix = (input.unsqueeze(0), indices.unsqueeze(0)) if input.ndim == nd + 1 else (input, indices)
    n, c = x.shape[:2]
    P = math.prod(size)
    if type(ix._data) is np.ndarray and ix.numel():
        bad = ix._data[(ix._data < 0) | (ix._data >= P)]
        if bad.size:
            shown = size + (1,) if nd == 1 else size      # torch's 1-d unpooling runs as 2-d
            raise RuntimeError(f"Found an invalid max index: {int(bad.reshape(-1)[0])} (output volumes are of size "
                               f"{'x'.join(map(str, shown))})")
    base = factories.arange(n * c, dtype=dt.int64, device=x.device).reshape(n, c, 1) * P
    key = (ix.reshape(n, c, -1) + base).reshape(-1)
    out = factories.zeros(n * c * P, dtype=x.dtype, device=x.device)
    out = out.index_put((key,), x.reshape(-1))
    out = named(out.reshape((n, c) + size), "MaxUnpool{}DBackward0".format(nd))
    return out.squeeze(0) if input.ndim == nd + 1 else out


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None, **torch_kw):
    """The inverse of ``max_pool1d``: ``input``'s values written at ``indices`` (``max_pool1d``'s
    ``return_indices``) into zeros of length ``(L - 1) stride - 2 padding + kernel_size`` (or ``output_size``).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.max_unpool1d(jg.tensor([[[5., 3.]]]), jg.tensor([[[1, 2]]]), 2).tolist()
    [[[0.0, 5.0, 3.0, 0.0]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(max_unpool1d, "max_unpool1d", (input, indices, kernel_size, stride, padding, output_size),
                            {}, torch_kw)
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 1, "max_unpool1d")


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None, **torch_kw):
    """The inverse of ``max_pool2d``: ``input``'s values written at ``indices`` into zeros of the pooled-from size
    (or ``output_size``); the rest stays zero.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> x = jg.arange(16.).reshape(1, 1, 4, 4)
    >>> F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2).sum().item()
    40.0
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(max_unpool2d, "max_unpool2d", (input, indices, kernel_size, stride, padding, output_size),
                            {}, torch_kw)
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 2, "max_unpool2d")


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None, **torch_kw):
    """The inverse of ``max_pool3d``: ``input``'s values written at ``indices`` into zeros of the pooled-from size.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.max_unpool3d(jg.ones(1, 1, 2, 2, 2), jg.zeros(1, 1, 2, 2, 2, dtype=jg.int64), 2).shape
    jitgrad.Size([1, 1, 4, 4, 4])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(max_unpool3d, "max_unpool3d", (input, indices, kernel_size, stride, padding, output_size),
                            {}, torch_kw)
    return _max_unpool(input, indices, kernel_size, stride, padding, output_size, 3, "max_unpool3d")


# ---- power-average pooling --------------------------------------------------------------------------------

def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, nd):
    k = _tuple(kernel_size, nd)
    avg = (avg_pool1d, avg_pool2d, avg_pool3d)[nd - 1]
    out = avg(input.pow(norm_type), kernel_size, stride, 0, ceil_mode)
    return (out.sign() * _act.relu(out.abs())).mul(math.prod(k)).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False, **torch_kw):
    """Power-average pooling of ``(N, C, L)``: ``(sum of x ** p over each window) ** (1 / p)``.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.lp_pool1d(jg.tensor([[3., 4., 1., 1.]]), 2, 2).tolist()
    [[5.0, 1.4142135381698608]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(lp_pool1d, "lp_pool1d", (input, norm_type, kernel_size, stride, ceil_mode), {}, torch_kw)
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False, **torch_kw):
    """Power-average pooling of ``(N, C, H, W)``: the ``p``-norm of each window (torch's formula, see the module
    docstring).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.lp_pool2d(jg.ones(1, 1, 4, 4), 1, 2).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(lp_pool2d, "lp_pool2d", (input, norm_type, kernel_size, stride, ceil_mode), {}, torch_kw)
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False, **torch_kw):
    """Power-average pooling of ``(N, C, D, H, W)``: the ``p``-norm of each window.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.lp_pool3d(jg.ones(1, 1, 2, 2, 2), 1, 2).tolist()
    [[[[[8.0]]]]]
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(lp_pool3d, "lp_pool3d", (input, norm_type, kernel_size, stride, ceil_mode), {}, torch_kw)
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


__all__ = ["adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d", "adaptive_max_pool1d_with_indices",
           "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d_with_indices", "max_unpool1d", "max_unpool2d",
           "max_unpool3d", "lp_pool1d", "lp_pool2d", "lp_pool3d"]
