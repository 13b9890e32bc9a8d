"""``ChannelShuffle``: ``F.channel_shuffle`` as a module."""
from __future__ import annotations

from ..functional.pixelshuffle import channel_shuffle
from .module import Module


class ChannelShuffle(Module):
    """``F.channel_shuffle`` as a module."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return channel_shuffle(input, self.groups)

    def extra_repr(self):
        return f"groups={self.groups}"


__all__ = ["ChannelShuffle"]
