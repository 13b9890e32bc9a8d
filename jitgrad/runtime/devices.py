"""Devices other than the CPU, as a table that eager runtime consults and a backend fills.

Eager runtime never imports code generation (DESIGN.md), so the CUDA target is a *backend* registered here by
``jitgrad.cuda`` (which sits above runtime, beside ``jit``): it says how to move arrays to and from its device,
and how to run one primitive there (``bind``).  A tensor is on a device by its payload: a NumPy array is on the
CPU, any other registered array type is on that backend's device.  Nothing here imports Numba; a CPU-only
install never loads CUDA modules.
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Var
from .tensor import CPU, Device, Tensor

BACKENDS: dict = {}      # device type ("cuda") -> backend object (see register)
_BY_TYPE: dict = {}      # payload type -> backend (or None: host), filled as payloads are seen
_UNSEEN = object()


def register(device_type: str, backend):
    """Register ``backend`` for ``device_type``.  A backend provides ``is_available()``, ``owns(payload)``,
    ``device_of(payload) -> Device``, ``to_device(ndarray, device) -> payload``, ``to_host(payload) -> ndarray``,
    ``bind(op, args, params) -> Tensor`` (one primitive on device tensors), ``copy(payload)``, ``write(dst, src)``
    (copy into an existing payload), ``after_write(tensor)`` (an in-place write happened), ``synchronize()``."""
    BACKENDS[device_type] = backend


def backend_of_payload(d):
    """The backend owning payload ``d`` (None for NumPy arrays and traced values)."""
    t = type(d)
    if t is np.ndarray or t is Var:
        return None
    b = _BY_TYPE.get(t, _UNSEEN)
    if b is _UNSEEN:
        b = None
        for cand in BACKENDS.values():
            if cand.owns(d):
                b = cand
                break
        _BY_TYPE[t] = b         # None too: a NumPy scalar payload is on the CPU
    return b


def backend(device_type: str, required=True):
    """The backend for ``device_type`` ("cuda"); raises torch's error when it is absent or has no device."""
    b = BACKENDS.get(device_type)
    if b is None or not b.is_available():
        if not required:
            return None
        if device_type == "cuda":
            raise RuntimeError("jitgrad: no CUDA device is available: the CUDA target needs numba-cuda (pip install "
                               "'jitgrad[cuda]') and a GPU, or Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
        raise RuntimeError(f"jitgrad: no backend for device type {device_type!r}")
    return b


def device_of(d):
    """The Device a payload lives on."""
    b = backend_of_payload(d)
    if b is None:
        return CPU
    return b.device_of(d)


def check_device(device):
    """The Device named by ``device`` (None: the CPU); raises when its backend is absent or has no device."""
    if device is None:
        return CPU
    d = device if isinstance(device, Device) else Device(device)
    if d.type != "cpu":
        backend(d.type)
    return d


def on_device(t: "Tensor", device) -> "Tensor":
    """A factory's result placed on ``device`` (None or the CPU: ``t`` itself), keeping ``requires_grad`` a
    leaf flag, as torch's ``device=`` does."""
    if device is None:
        return t
    d = check_device(device)
    if d.type == "cpu":
        return t
    rg = t._requires_grad
    out = Tensor._make(backend(d.type).to_device(t._data, d))
    out._requires_grad = rg
    return out


def copy_payload(d):
    """A copy of payload ``d`` on its own device."""
    b = backend_of_payload(d)
    return d.copy() if b is None else b.copy(d)


def to_host(d) -> np.ndarray:
    """A NumPy copy (or the array itself) of payload ``d``."""
    b = backend_of_payload(d)
    return d if b is None else b.to_host(d)


__all__ = ["register", "backend", "backend_of_payload", "device_of", "to_host", "BACKENDS", "check_device",
           "on_device"]
