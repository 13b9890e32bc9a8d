"""``torch.cuda``'s seed functions and ``Tensor.pin_memory``, with torch's behaviour on a machine without a GPU.

jitgrad draws every random number, on the host and on a device, from the generators of ``runtime/generator.py``
(``jg.manual_seed`` seeds them all), so the CUDA seed functions have nothing of their own to seed: like torch's
(which seed lazily and do nothing without a GPU), they accept their arguments and return.
"""
from __future__ import annotations

from ..declarations import published


def manual_seed(seed) -> None:
    """Seed the current GPU's generator: nothing separate in jitgrad (``jg.manual_seed`` seeds every draw)."""
    int(seed)


def manual_seed_all(seed) -> None:
    """Seed every GPU's generator: nothing separate in jitgrad (``jg.manual_seed`` seeds every draw)."""
    int(seed)


def seed() -> None:
    """Seed the current GPU's generator with a random number (nothing separate in jitgrad)."""


def seed_all() -> None:
    """Seed every GPU's generator with a random number (nothing separate in jitgrad)."""


def initial_seed() -> int:
    """The seed of the default generator (jitgrad's GPU draws use it)."""
    from ..runtime.generator import initial_seed as _initial_seed
    return _initial_seed()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether bfloat16 runs on the GPU: jitgrad has no bfloat16 dtype, so False."""
    return False


@published("Tensor", name="pin_memory")
def _pin_memory(self, device=None):
    """Page-locked host memory for fast transfers: torch raises without an accelerator, and so do we; with a GPU
    the tensor is returned as is (device transfers copy through NumPy buffers either way)."""
    from .device import is_available
    if not is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    return self


@published("Tensor", name="is_pinned")
def _is_pinned(self, device=None) -> bool:
    """False: jitgrad's host tensors are ordinary NumPy memory."""
    return False


__all__ = ["manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "is_bf16_supported"]
