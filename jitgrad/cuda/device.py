"""The CUDA device as Numba sees it: whether there is one (a real GPU, or the simulator when
``NUMBA_ENABLE_CUDASIM=1``), and waiting on it.  Numba's CUDA target is imported on first use.  The package's
``__init__`` re-exports these as ``jitgrad.cuda.*``; ``seeding.py`` and ``jitgrad.amp`` ask them too.
"""
from __future__ import annotations

_STATE = {"available": None}


def _numba_cuda():
    from numba import cuda
    return cuda


def is_available() -> bool:
    """Whether CUDA tensors can be made: numba-cuda is installed and finds a GPU (or runs its simulator)."""
    if _STATE["available"] is None:
        try:
            cuda = _numba_cuda()
            _STATE["available"] = bool(cuda.is_available())
        except Exception:  # noqa: BLE001 - no numba-cuda, no driver, a broken toolkit: no CUDA device
            _STATE["available"] = False
    return _STATE["available"]


def is_simulator() -> bool:
    """Whether the device is Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    try:
        from numba import config
    except ImportError:
        return False
    return bool(config.ENABLE_CUDASIM)


def device_count() -> int:
    """The number of CUDA devices (jitgrad uses the first)."""
    return 1 if is_available() else 0


def current_device() -> int:
    return 0


def synchronize(device=None) -> None:
    """Wait for every kernel launched on the device to finish."""
    if is_available():
        _numba_cuda().synchronize()


def empty_cache() -> None:
    """Release cached, unused device memory: nothing to do without CUDA (as torch); with Numba's CUDA target,
    its deallocations pending in the current context are flushed."""
    if is_available():
        from numba import cuda
        cuda.current_context().deallocations.clear()


__all__ = ["is_available", "device_count", "current_device", "synchronize", "is_simulator", "empty_cache"]
