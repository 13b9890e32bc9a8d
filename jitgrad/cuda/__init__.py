"""``jitgrad.cuda``: the CUDA device, as ``torch.cuda``.

Importing this module costs nothing: Numba's CUDA target is imported on first use (``is_available()``, a tensor
moved to ``"cuda"``), so a CPU-only install never loads it.  The device is Numba's: a real GPU, or the CUDA
simulator when ``NUMBA_ENABLE_CUDASIM=1`` (which the test-suite uses).  This package registers the ``cuda``
backend into eager runtime's device table (``runtime/devices.py``): transfers, and each primitive on CUDA
tensors as a one-op graph through the CUDA code generator (``codegen/gpu/cuda.py``).
"""
from __future__ import annotations

import numpy as np

from ..runtime import devices as _devices
from .device import (_numba_cuda, current_device, device_count, empty_cache, is_available, is_simulator,  # noqa: F401
                     synchronize)


class _CudaBackend:
    """The ``cuda`` entry of eager runtime's device table."""

    type_module = "numba.cuda"

    @staticmethod
    def is_available():
        return is_available()

    @staticmethod
    def owns(payload) -> bool:
        return type(payload).__module__.startswith("numba.cuda")

    @staticmethod
    def device_of(payload):
        from ..runtime.tensor import Device
        return Device("cuda", 0)

    @staticmethod
    def to_device(array: np.ndarray, device=None):
        # not np.ascontiguousarray, which makes a 0-dim array 1-dim (a CPU scalar tensor would arrive as shape (1,))
        a = np.asarray(array)
        return _numba_cuda().to_device(a if a.flags.c_contiguous else a.copy(order="C"))

    @staticmethod
    def to_host(payload) -> np.ndarray:
        return payload.copy_to_host()

    @staticmethod
    def copy(payload):
        out = _numba_cuda().device_array(payload.shape, payload.dtype)
        out.copy_to_device(payload)
        return out

    @staticmethod
    def write(dst, src):
        """Copy device array ``src`` into ``dst`` (same shape and dtype), on the device."""
        dst.copy_to_device(src)

    @staticmethod
    def after_write(t):
        """``t`` was written in place: its base (if it is a view) and its views get the new values."""
        from .eager import after_write
        after_write(t)

    @staticmethod
    def bind(op, args, params):
        from .eager import bind_cuda
        return bind_cuda(op, args, params)

    @staticmethod
    def synchronize():
        synchronize()


_devices.register("cuda", _CudaBackend())


__all__ = ["is_available", "device_count", "current_device", "synchronize", "is_simulator", "empty_cache"]

from .seeding import manual_seed, manual_seed_all, seed, seed_all, initial_seed, is_bf16_supported  # noqa: E402
from . import amp  # noqa: E402,F401  (torch.cuda.amp.GradScaler / autocast)

__all__ += ["manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "is_bf16_supported"]
