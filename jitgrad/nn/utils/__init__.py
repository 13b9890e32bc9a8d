"""``jitgrad.nn.utils``: gradient clipping."""
from .clip_grad import clip_grad_norm_, clip_grad_value_  # noqa: F401

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
