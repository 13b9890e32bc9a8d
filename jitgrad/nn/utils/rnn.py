"""``jitgrad.nn.utils.rnn``: padded and packed variable-length sequences for the recurrent modules
(``pad_sequence``, ``PackedSequence``, ``pack_padded_sequence``, ``pad_packed_sequence``, ``pack_sequence``,
``unpack_sequence``, ``unpad_sequence``, ``invert_permutation``).

``batch_sizes`` is concrete CPU data (it decides the loop structure), so a sequence packed inside
``@jitgrad.compile`` from lengths given as a list or a concrete tensor unrolls like a padded one."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ...ir import dtypes as dt
from ...library.creation import factories
from ...library.shaping.views import cat, stack
from ...runtime.tensor import Tensor
from ..functional.padding import pad


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


# --- packed sequences ---------------------------------------------------------------------------------------
class PackedSequence(namedtuple("PackedSequence_", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """A batch of variable-length sequences without padding, as torch's: ``data`` holds the time steps one
    after another (step t's ``batch_sizes[t]`` rows: the sequences, longest first, still running at t);
    ``batch_sizes`` is an int64 CPU tensor; ``sorted_indices`` maps the sorted order back to the caller's batch
    (None when the input was already sorted), ``unsorted_indices`` is its inverse.  Build one with
    :func:`pack_padded_sequence` or :func:`pack_sequence`; the recurrent modules accept it."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is not None:
            if batch_sizes.device.type != "cpu":
                raise ValueError("batch_sizes should always be on CPU. Instances of PackedSequence should never be "
                                 "created manually. They should be instantiated by functions like pack_sequence and "
                                 "pack_padded_sequences in nn.utils.rnn. "
                                 "https://pytorch.org/docs/stable/nn.html#torch.nn.utils.rnn.pack_sequence")
        else:
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """``data.to(...)``; the indices follow ``data`` to its device, ``batch_sizes`` stays on the CPU."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self

        def move(t):
            return None if t is None else t.to(data.device)
        return type(self)(data, self.batch_sizes, move(self.sorted_indices), move(self.unsorted_indices))

    def cpu(self, *args, **kwargs):
        return self.to("cpu")

    def cuda(self, *args, **kwargs):
        return self.to("cuda")

    def double(self):
        return self.to(dtype=dt.float64)

    def float(self):
        return self.to(dtype=dt.float32)

    def half(self):
        return self.to(dtype=dt.float16)

    def long(self):
        return self.to(dtype=dt.int64)

    def int(self):
        return self.to(dtype=dt.int32)

    def short(self):
        return self.to(dtype=dt.int16)

    def char(self):
        return self.to(dtype=dt.int8)

    def byte(self):
        return self.to(dtype=dt.uint8)

    @property
    def is_cuda(self) -> bool:
        return self.data.device.type == "cuda"

    def is_pinned(self) -> bool:
        return False


def invert_permutation(permutation):
    """The inverse of a permutation of 0..n-1 (None for None)."""
    if permutation is None:
        return None
    return permutation.argsort()


def _sizes(batch_sizes):
    """``batch_sizes`` as Python ints (it is always concrete, CPU data)."""
    return [int(b) for b in np.asarray(batch_sizes._data).reshape(-1)]


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch (T, B, *) ((B, T, *) with ``batch_first``) of sequences with the given ``lengths``
    (a list or a 1-D int64 CPU tensor) into a :class:`PackedSequence`.  With ``enforce_sorted`` the lengths must
    be decreasing; otherwise the batch is sorted here and the permutation kept.  Differentiable in ``input``."""
    if isinstance(lengths, Tensor):
        if lengths.dim() != 1:
            raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got {lengths.dim()}D cpu "
                               "Long tensor")
        lens = np.asarray(lengths._data).astype(np.int64).reshape(-1)
    else:
        lens = np.asarray(list(lengths), dtype=np.int64).reshape(-1)
    batch_dim = 0 if batch_first else 1
    if enforce_sorted:
        if np.any(lens[1:] > lens[:-1]):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You "
                               "can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                               "sidestep this requirement if you do not need ONNX exportability.")
        sorted_indices = None
    else:
        order = np.argsort(-lens, kind="stable")
        lens = lens[order]
        sorted_indices = factories.tensor(order, dtype=dt.int64, device=input.device)
        input = input.index_select(batch_dim, sorted_indices)
    if len(lens) != input.shape[batch_dim]:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {len(lens)} "
                           f"(batch_size={input.shape[batch_dim]})")
    if len(lens) == 0 or lens.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                           "is <= 0")
    if batch_first:
        input = input.transpose(0, 1)
    steps = int(lens[0])
    if steps > input.shape[0]:
        raise RuntimeError(f"Expected the longest length ({steps}) to be at most the padded length "
                           f"({input.shape[0]})")
    sizes = [int((lens > t).sum()) for t in range(steps)]
    data = cat([input[t, :b] for t, b in enumerate(sizes)], 0)
    unsorted_indices = None if sorted_indices is None else factories.tensor(
        np.argsort(order), dtype=dt.int64, device=input.device)     # computed here: concrete under a trace too
    return PackedSequence(data, factories.tensor(sizes, dtype=dt.int64), sorted_indices, unsorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Undo :func:`pack_padded_sequence`: the padded batch (T, B, *) ((B, T, *) with ``batch_first``; T is
    ``total_length`` if given) in the caller's original batch order, and the lengths (int64 tensor)."""
    sizes = _sizes(sequence.batch_sizes)
    steps = len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest sequence in input, but "
                             f"got total_length={total_length} and max sequence length being {steps}")
    else:
        total_length = steps
    batch = sizes[0]
    data = sequence.data
    rows, offset = [], 0
    for b in sizes:
        step = data[offset:offset + b]
        offset += b
        if b < batch:
            step = pad(step, (0, 0) * (data.dim() - 1) + (0, batch - b), value=padding_value)
        rows.append(step)
    padded = stack(rows, 0)
    if total_length > steps:
        padded = pad(padded, (0, 0) * (padded.dim() - 1) + (0, total_length - steps), value=padding_value)
    lens = np.array([sum(1 for b in sizes if b > i) for i in range(batch)], dtype=np.int64)
    if batch_first:
        padded = padded.transpose(0, 1)
    lengths = factories.tensor(lens, dtype=dt.int64)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(0 if batch_first else 1, sequence.unsorted_indices)
        lengths = lengths.index_select(0, sequence.unsorted_indices.to(lengths.device))
    return padded, lengths


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of tensors of shapes (L_i, *) (decreasing L_i unless ``enforce_sorted=False``)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of (L_i, *) tensors a :class:`PackedSequence` holds, in the original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return [x[:int(n)] for x, n in zip(padded, lengths.tolist())]


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of (L_i, *) tensors of a padded batch, cut at ``lengths``."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    lens = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    return [padded_sequences[i][:int(n)] for i, n in enumerate(lens)]


__all__ = ["PackedSequence", "invert_permutation", "pack_padded_sequence", "pad_packed_sequence", "pack_sequence",
           "unpack_sequence", "pad_sequence", "unpad_sequence"]
