"""``torch.utils``: ``data`` (datasets, samplers, DataLoader) and ``checkpoint`` (activation
checkpointing)."""
from . import data  # noqa: F401
from . import checkpoint  # noqa: F401

__all__ = ["data", "checkpoint"]
