"""Rearranging channels: ``F.pixel_shuffle`` (channels into space), ``F.pixel_unshuffle`` (space into
channels) and ``F.channel_shuffle``.  Each is a reshape, a permute and a reshape, so it differentiates and compiles.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.pixel_shuffle(jg.ones(1, 8, 2, 3), 2).shape
jitgrad.Size([1, 2, 4, 6])
"""
from __future__ import annotations

from ...library.torch_kwargs import torch_kwargs
from ...declarations import published


@published("jitgrad")      # torch.pixel_shuffle, the same function
def pixel_shuffle(input, upscale_factor, **torch_kw):
    """``(*, C * r**2, H, W)`` to ``(*, C, H * r, W * r)`` with ``r = upscale_factor``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(pixel_shuffle, 'pixel_shuffle', (input, upscale_factor), {}, torch_kw)
    r = upscale_factor
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    b = len(batch)
    x = input.reshape(*batch, c // (r * r), r, r, h, w)
    x = x.permute(*range(b), b, b + 3, b + 1, b + 4, b + 2)
    return x.reshape(*batch, c // (r * r), h * r, w * r)


@published("jitgrad")      # torch.pixel_unshuffle, the same function
def pixel_unshuffle(input, downscale_factor, **torch_kw):
    """``(*, C, H * r, W * r)`` to ``(*, C * r**2, H, W)`` with ``r = downscale_factor`` (the inverse of
    ``pixel_shuffle``)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(pixel_unshuffle, 'pixel_unshuffle', (input, downscale_factor), {}, torch_kw)
    r = downscale_factor
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    if h % r:
        raise RuntimeError(f"pixel_unshuffle expects height to be divisible by downscale_factor, but "
                           f"input.size(-2)={h} is not divisible by {r}")
    if w % r:
        raise RuntimeError(f"pixel_unshuffle expects width to be divisible by downscale_factor, but "
                           f"input.size(-1)={w} is not divisible by {r}")
    b = len(batch)
    x = input.reshape(*batch, c, h // r, r, w // r, r)
    x = x.permute(*range(b), b, b + 2, b + 4, b + 1, b + 3)
    return x.reshape(*batch, c * r * r, h // r, w // r)


@published("jitgrad")      # torch.channel_shuffle, the same function
def channel_shuffle(input, groups, **torch_kw):
    """Interleave the channels of ``(N, C, *)``: view them as ``(groups, C / groups)`` and transpose."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(channel_shuffle, 'channel_shuffle', (input, groups), {}, torch_kw)
    if input.ndim <= 2:
        raise RuntimeError(f"channel_shuffle expects input with > 2 dims, but got input with sizes "
                           f"{list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of groups:{groups}")
    n, c, *rest = input.shape
    if c % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups.")
    return input.reshape(n, groups, c // groups, *rest).transpose(1, 2).reshape(input.shape)


__all__ = ["pixel_shuffle", "pixel_unshuffle", "channel_shuffle"]
