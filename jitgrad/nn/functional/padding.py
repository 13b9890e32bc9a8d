"""``F.pad`` (modes constant, reflect, replicate, circular), as torch has it.

Padding is done one dim at a time, last dim first: negative amounts crop (``narrow``), then the border is built
from the cropped tensor and joined with ``cat``: a filled block (constant), the mirrored edge without the edge
element (reflect: ``narrow`` + ``flip``), the edge element broadcast (replicate: ``expand``) or the opposite end
(circular).  All are primitives with gradients, so padding differentiates to any order and compiles.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.pad(jg.tensor([[1., 2., 3.]]), (2, 1), mode="reflect")
tensor([[3., 2., 1., 2., 3., 2.]])
"""
from __future__ import annotations

import operator

from ...library.creation import factories
from ...runtime.grad_names import named
from ...library.shaping.views import cat
from ...library.torch_kwargs import torch_kwargs


_MODES = ("constant", "reflect", "replicate", "circular")


_NAMES = {"reflect": "ReflectionPad{}DBackward0", "replicate": "ReplicationPad{}DBackward0"}


def pad(input, pad, mode="constant", value=None, **torch_kw):
    """Pad ``input``'s last ``len(pad) // 2`` dims: ``pad = (left, right)`` for the last dim, then ``(top,
    bottom)`` for the one before, and so on.  ``mode`` is ``'constant'`` (filled with ``value``, default 0),
    ``'reflect'``, ``'replicate'`` or ``'circular'``; negative amounts crop.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.pad(jg.ones(1, 2), (1, 0), value=5.0)
    tensor([[5., 1., 1.]])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(globals()["pad"], "pad", (input, pad, mode, value), {}, torch_kw)
    for i, p in enumerate(pad):
        if isinstance(p, bool) or not hasattr(p, "__index__"):
            raise TypeError(f"pad(): argument 'pad' (position 2) must be tuple of ints, but found element of type "
                            f"{type(p).__name__} at pos {i}")
    amounts = [operator.index(p) for p in pad]
    if mode not in _MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if len(amounts) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    k = len(amounts) // 2
    if mode == "constant":
        if k > input.ndim:
            raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but "
                               f"got padding length {len(amounts)} and input of dimension {input.ndim}")
        fill = 0 if value is None else value
        if not input.is_floating_point() and isinstance(fill, float):
            fill = int(fill)        # torch casts the fill to the tensor's dtype (truncating)
        r = _pad(input, amounts, mode, fill)
        return named(r if r is not input else input.clone(), "ConstantPadNdBackward0")
    if value not in (None, 0):
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    if not 1 <= k <= 3 or input.ndim not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(amounts)} is not supported for {input.ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")
    if mode != "circular" and any(n == 0 for n in input.shape[input.ndim - k - 1:]):
        raise RuntimeError(f"Expected {k + 1}D or {k + 2}D (batch mode) tensor with possibly 0 batch size and other "
                           f"non-zero dimensions for input, but got: {list(input.shape)}")
    for j in range(k):
        left, right = amounts[2 * j], amounts[2 * j + 1]
        d = input.ndim - 1 - j
        n = input.shape[d]
        if mode == "reflect" and (left >= n or right >= n):
            raise RuntimeError(f"Argument #{4 + 2 * j}: Padding size should be less than the corresponding input "
                               f"dimension, but got: padding ({left}, {right}) at dimension {d} of input "
                               f"{list(input.shape)}")
        if mode == "circular" and (left > n or right > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
    r = _pad(input, amounts, mode, None)
    r = r if r is not input else input.clone()
    return named(r, _NAMES[mode].format(k)) if mode in _NAMES else r


def _pad(x, amounts, mode, fill):
    for j in range(len(amounts) // 2):
        left, right = amounts[2 * j], amounts[2 * j + 1]
        d = x.ndim - 1 - j
        n = x.shape[d]
        lo, hi = max(-left, 0), max(-right, 0)
        if lo or hi:        # negative amounts crop first; the border below is taken from what is left
            if n - lo - hi < 0:
                raise RuntimeError("narrow(): length must be non-negative.")
            x = x.narrow(d, lo, n - lo - hi)
            n = x.shape[d]
        left, right = max(left, 0), max(right, 0)
        if not (left or right):
            continue
        parts = [_border(x, d, n, left, mode, fill, True), x, _border(x, d, n, right, mode, fill, False)]
        x = cat([p for p in parts if p is not None], d)
    return x


def _border(x, d, n, width, mode, fill, before):
    if width == 0:
        return None
    if mode == "constant":
        shape = x.shape[:d] + (width,) + x.shape[d + 1:]
        return factories.full(shape, fill, dtype=x.dtype, device=x.device)
    if mode == "reflect":       # the elements next to the edge, mirrored (the edge itself is not repeated)
        return (x.narrow(d, 1, width) if before else x.narrow(d, n - 1 - width, width)).flip(d)
    if mode == "replicate":
        edge = x.narrow(d, 0 if before else n - 1, 1)
        return edge.expand(x.shape[:d] + (width,) + x.shape[d + 1:])
    return x.narrow(d, n - width, width) if before else x.narrow(d, 0, width)     # circular: the far end


__all__ = ["pad"]
