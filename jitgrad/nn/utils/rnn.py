"""``jitgrad.nn.utils.rnn``: ``pad_sequence``, which stacks variable-length sequences into one padded tensor
for the recurrent modules.  Packed sequences (``pack_padded_sequence``) are not provided."""
from __future__ import annotations

from ...runtime.shaping import stack
from ..padding import pad


def pad_sequence(sequences, batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"):
    """Stacks tensors of shape (L_i, *) into (L_max, B, *) (``batch_first``: (B, L_max, *)), padding each with
    ``padding_value`` on ``padding_side`` ("right" or "left"), as torch's ``pad_sequence``.

    >>> import jitgrad as jg
    >>> from jitgrad.nn.utils.rnn import pad_sequence
    >>> pad_sequence([jg.ones(2), jg.ones(3)], batch_first=True).tolist()
    [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    """
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    sequences = list(sequences)
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        n = longest - s.shape[0]
        if n:
            # F.pad's widths run from the last dim backwards; only dim 0 grows
            widths = (0, 0) * (s.dim() - 1) + ((0, n) if padding_side == "right" else (n, 0))
            s = pad(s, widths, value=padding_value)
        padded.append(s)
    return stack(padded, 0 if batch_first else 1)
