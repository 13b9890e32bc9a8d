"""``jitgrad.Generator`` and the default generator: torch's seeding API over a Philox4x32-10 counter state.

A generator's state is two 0-dim int64 tensors, ``seed`` (the 64-bit Philox key, its bits stored as int64)
and ``offset`` (how many draws it has made).  A draw reads both and advances the offset by one, with ordinary
tensor ops; so inside ``@jitgrad.compile`` the two tensors are captured like any other outside state: graph
inputs read at every call, and the offset's update is a write-back.  A compiled function therefore draws new
numbers at every call, the same numbers again after the same ``manual_seed``, and the numbers eager mode would
draw from the same state (see ``ir/philox.py`` for the scheme).
"""
from __future__ import annotations

import secrets

import numpy as np

from ..declarations import published
from ..ir import dtypes as dt
from ..tracer import STATE as _TR
from .devices import check_device
from .tensor import Tensor

DEFAULT_SEED = 67280421310721       # torch's default_rng_seed_val: a fresh process starts from it, as in torch
_U64 = 1 << 64
STATE_BYTES = 16                    # seed and offset, little-endian uint64 each


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        if isinstance(seed, Tensor) and seed.numel() == 1 and not seed.is_floating_point():
            seed = seed.item()
        else:
            raise TypeError(f"manual_seed expected an int as seed, but got {type(seed).__name__}")
    seed = int(seed)
    if not -(1 << 63) <= seed < _U64:
        raise ValueError("Overflow when unpacking long long")    # torch's words (seeds are 64-bit)
    return seed % _U64


def _as_i64(u: int) -> int:
    return u - _U64 if u >= 1 << 63 else u


class Generator:
    """A random number generator (torch.Generator): ``manual_seed``, ``seed``, ``initial_seed``,
    ``get_state``/``set_state``.  Pass it as ``generator=`` to a random function to draw from it instead of
    the default generator.

    >>> import jitgrad as jg
    >>> g = jg.Generator().manual_seed(42)
    >>> a = jg.rand(3, generator=g)
    >>> _ = g.manual_seed(42)
    >>> bool((jg.rand(3, generator=g) == a).all())
    True
    """

    def __init__(self, device="cpu"):
        self.device = check_device(device)
        self._seed = Tensor._make(np.array(_as_i64(DEFAULT_SEED), np.int64))
        self._offset = Tensor._make(np.array(0, np.int64))

    def manual_seed(self, seed) -> "Generator":
        """Seed the generator (any int in [-2**63, 2**64)); negative seeds wrap as in torch.  Resets the draw
        counter.  Returns the generator."""
        s = _as_i64(_check_seed(seed))
        # fill_ writes in place: a compiled function that captured these tensors keeps reading them
        self._seed.fill_(s)
        self._offset.fill_(0)
        return self

    def seed(self) -> int:
        """Seed from the operating system's entropy; returns the new seed."""
        s = secrets.randbits(64)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        """The seed last set (a non-negative int below 2**64)."""
        return int(_read(self._seed, "initial_seed")) % _U64

    def get_state(self) -> Tensor:
        """The state as a uint8 tensor of 16 bytes: the seed, then the draw offset (little-endian uint64s)."""
        a = np.array([_read(self._seed, "get_state"), _read(self._offset, "get_state")], dtype="<i8")
        return Tensor._make(a.view(np.uint8).copy())

    def set_state(self, new_state) -> "Generator":
        """Restore a state returned by ``get_state``.  Returns the generator."""
        if not isinstance(new_state, Tensor) or new_state.dtype is not dt.uint8:
            raise TypeError("RNG state must be a torch.ByteTensor (a jitgrad.uint8 tensor)")
        if new_state.numel() != STATE_BYTES:
            raise RuntimeError(f"Expected a Philox4x32 generator state of size {STATE_BYTES} but found the input "
                               f"RNG state size to be {new_state.numel()}")
        seed, offset = np.ascontiguousarray(new_state._data).reshape(-1).view("<i8")
        self._seed.fill_(int(seed))
        self._offset.fill_(int(offset))
        return self

    def _draw(self, make):
        """``make(seed, offset)`` binds one draw's op on the state tensors; then the offset advances (in place:
        eagerly a write, while tracing a write-back of the compiled function)."""
        if _TR.active is not None:
            # traced: advance first and draw at offset - 1, so the draw's eqn sits next to the ops that use
            # its numbers and fuses into their loop (the offset update is a scalar step of its own)
            self._offset.add_(1)
            return make(self._seed, self._offset - 1)
        out = make(self._seed, self._offset)
        self._offset.add_(1)
        return out

    def __repr__(self):
        return f"<jitgrad.Generator object at {hex(id(self))}>"


def _read(t: Tensor, what):
    d = t._data
    if type(d) is not np.ndarray or (_TR.active is not None and _TR.active.on_capture is not None):
        # traced, the value would be baked into the graph and go stale after the next manual_seed
        from ..tracer import TraceError
        raise TraceError(f"Generator.{what}() reads the generator's state, which is not known while a "
                         "@jitgrad.compile function is traced; call it outside the compiled function")
    return int(d)


default_generator = Generator()


# NumPy's generator behind gradgradcheck's random grad_outputs (autograd/gradcheck.py), reseeded by manual_seed
CHECK_RNG = [np.random.default_rng(0)]


def generator_of(generator) -> Generator:
    """The generator a draw uses: ``generator`` or the default one; a clear error for anything else."""
    if generator is None:
        return default_generator
    if not isinstance(generator, Generator):
        raise TypeError(f"generator must be a jitgrad.Generator, not {type(generator).__name__}")
    return generator


@published("jitgrad")
def manual_seed(seed) -> Generator:
    """Seed the default generator (torch.manual_seed); returns it."""
    s = _check_seed(seed)
    CHECK_RNG[0] = np.random.default_rng(s)    # gradgradcheck's random grad_outputs follow the seed too
    return default_generator.manual_seed(seed)


@published("jitgrad")
def seed() -> int:
    """Seed the default generator from the operating system's entropy; returns the seed."""
    s = secrets.randbits(64)
    manual_seed(s)
    return s


def initial_seed() -> int:
    """The default generator's seed."""
    return default_generator.initial_seed()


def get_rng_state() -> Tensor:
    """The default generator's state (a uint8 tensor)."""
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    """Restore the default generator's state from ``get_rng_state()``."""
    default_generator.set_state(new_state)


__all__ = ["Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state",
           "set_rng_state", "generator_of", "DEFAULT_SEED"]
