"""``torch.cuda.amp``: the deprecated spellings of ``torch.amp.autocast("cuda")`` and ``GradScaler("cuda")``."""
from __future__ import annotations

from .. import amp as _amp


class autocast(_amp.autocast):
    """``torch.amp.autocast("cuda", ...)``."""

    def __init__(self, enabled=True, dtype=None, cache_enabled=True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """``torch.amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 enabled=True):
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)


__all__ = ["autocast", "GradScaler"]
