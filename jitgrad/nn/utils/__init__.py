"""``jitgrad.nn.utils``: gradient clipping; ``rnn.pad_sequence``."""
from .clip_grad import clip_grad_norm_, clip_grad_value_  # noqa: F401
from . import rnn  # noqa: F401

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
