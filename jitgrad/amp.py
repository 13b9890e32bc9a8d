"""``torch.amp``: ``autocast`` and ``GradScaler`` where torch accepts them on a CPU machine.

jitgrad computes in float32/float64 only, so an autocast that would lower precision raises an
``UnsupportedError``; one that torch itself disables (``enabled=False``, a CUDA autocast without a GPU, a CPU
autocast to float32) is accepted as torch accepts it, with torch's warning.  ``GradScaler`` is the real thing
(scale the loss, unscale the gradients, skip steps with inf/nan gradients, grow and back off the scale), so a
script that enables it on the CPU trains as under torch; ``GradScaler("cuda")`` without a GPU disables itself
with torch's warning.
"""
from __future__ import annotations

import math
import warnings

from .runtime.grad_mode import no_grad
from .runtime.tensor import Tensor
from .library.torch_surface import UnsupportedError

_DEVICES = ("cpu", "cuda")
_ACTIVE: list = []      # the enabled autocast regions (none can be: jitgrad never lowers precision)


def _cuda_available() -> bool:
    from .cuda.device import is_available
    return is_available()


class autocast:
    """Mixed-precision region (``with torch.amp.autocast(device_type, dtype=None, enabled=True)``).

    Accepted where it changes nothing: ``enabled=False``; ``device_type="cuda"`` without a GPU (torch warns and
    disables); a CPU autocast to float32 (torch warns and disables).  An autocast to float16/bfloat16 raises
    ``UnsupportedError``.  Also a decorator."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        if not self._enabled:
            return
        if device_type not in _DEVICES:
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        if device_type == "cuda" and not _cuda_available():
            warnings.warn("CUDA is not available or torch_xla is imported. Disabling autocast.", stacklevel=2)
            self._enabled = False
            return
        name = getattr(dtype, "name", None)
        if device_type == "cpu" and name in ("float32", "float64"):
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling autocast.\nCPU "
                          "Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.", stacklevel=2)
            self._enabled = False
            return
        what = name or ("bfloat16" if device_type == "cpu" else "float16")
        raise UnsupportedError(f"jitgrad does not support autocast to {what} yet (it computes in float32 and "
                               f"float64 only); use enabled=False, or leave the autocast out")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def run(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return run


def is_autocast_available(device_type: str) -> bool:
    """Whether torch has autocast for this device type (jitgrad accepts only disabled regions)."""
    return device_type in _DEVICES


class GradScaler:
    """Loss scaling for low-precision gradients (torch.amp.GradScaler), with torch's state and API.

    ``scale(loss)`` multiplies by the scale; ``step(opt)`` unscales the gradients (unless ``unscale_`` did),
    skips the step when any is inf/nan; ``update()`` backs the scale off after a skipped step and grows it
    after ``growth_interval`` good ones.  Disabled, every method passes through (``scale`` returns its input)."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled and device == "cuda" and not _cuda_available():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          stacklevel=2)
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_opt: dict = {}      # id(optimizer) -> {"stage": "unscaled" | "stepped", "found_inf": bool}

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def get_growth_interval(self):
        return self._growth_interval

    def scale(self, outputs):
        """``outputs`` (a tensor, or an iterable of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        return type(outputs)(self.scale(o) for o in outputs)

    def unscale_(self, optimizer):
        """Divide ``optimizer``'s gradients by the scale, in place, and note whether any is inf/nan."""
        if not self._enabled:
            return
        st = self._per_opt.setdefault(id(optimizer), {"stage": None, "found_inf": False})
        if st["stage"] == "unscaled":
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if st["stage"] == "stepped":
            raise RuntimeError("unscale_() is being called after step().")
        inv = 1.0 / self._scale
        found = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    p.grad.mul_(inv)
                    if not bool(p.grad.isfinite().all()):
                        found = True
        st["stage"], st["found_inf"] = "unscaled", found

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` on unscaled gradients, skipped when any is inf/nan; returns its result."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        st = self._per_opt.get(id(optimizer))
        if st is not None and st["stage"] == "stepped":
            raise RuntimeError("step() has already been called since the last update().")
        if st is None or st["stage"] is None:
            self.unscale_(optimizer)
            st = self._per_opt[id(optimizer)]
        out = None if st["found_inf"] else optimizer.step(*args, **kwargs)
        st["stage"] = "stepped"
        return out

    def update(self, new_scale=None):
        """Back off the scale after an inf/nan, grow it after ``growth_interval`` clean steps (or set it)."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
        else:
            if not self._per_opt:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(st["found_inf"] for st in self._per_opt.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
            if not math.isfinite(self._scale):
                self._scale = 3.4028234663852886e38
        self._per_opt = {}

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


__all__ = ["autocast", "GradScaler", "is_autocast_available"]
