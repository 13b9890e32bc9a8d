"""torch's legacy typed constructors and type names: ``torch.FloatTensor(2, 3)`` (uninitialised, by size),
``torch.LongTensor([1, 2])`` (from data), ``isinstance(t, torch.DoubleTensor)``; and ``torch.is_inference``."""
from __future__ import annotations

import warnings

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...runtime import defaults
from ...runtime.tensor import Tensor


class _TypedTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype

    def __call__(cls, *args, device=None):
        """``T(*sizes)`` -> an uninitialised tensor of that size; ``T(sequence or tensor)`` -> a copy as ``dtype``."""
        from .factories import empty, tensor
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            data = args[0]
            if isinstance(data, Tensor):
                return data.to(cls.dtype).clone() if data.dtype is cls.dtype else data.to(cls.dtype)
            return tensor(data, dtype=cls.dtype, device=device)
        if not all(isinstance(a, (int, np.integer)) for a in args):
            raise TypeError(f"{cls.__name__}(): expected a sequence of sizes or a single sequence of data, got "
                            f"{tuple(type(a).__name__ for a in args)}")
        return empty(*args, dtype=cls.dtype, device=device)


def _typed(name, dtype):
    return _TypedTensorMeta(name, (), {"dtype": dtype, "__doc__": f"torch.{name}: a {dtype.name} tensor "
                                                                   "(constructor and isinstance check)."})


FloatTensor = published("jitgrad")(_typed("FloatTensor", dt.float32))
DoubleTensor = published("jitgrad")(_typed("DoubleTensor", dt.float64))
LongTensor = published("jitgrad")(_typed("LongTensor", dt.int64))
IntTensor = published("jitgrad")(_typed("IntTensor", dt.int32))
BoolTensor = published("jitgrad")(_typed("BoolTensor", dt.bool_))
ByteTensor = published("jitgrad")(_typed("ByteTensor", dt.uint8))


@published("jitgrad")
def is_inference(input) -> bool:
    """Whether ``input`` is an inference tensor (made under ``inference_mode``)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"is_inference(): argument 'input' must be Tensor, not {type(input).__name__}")
    return input.is_inference()


__all__ = ["FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor", "ByteTensor", "is_inference"]


# ---- Tensor.new: the legacy constructor method ---------------------------------------------------------------

@published("Tensor", name="new")
def tensor_new(self, *args, dtype=None, device=None, requires_grad=False):
    """``t.new(*sizes)`` / ``t.new(size)`` -> an uninitialised tensor of that size with ``t``'s dtype;
    ``t.new(sequence)`` -> a tensor of that data as ``t``'s dtype; ``t.new()`` -> an empty tensor."""
    from .factories import empty, tensor
    from ...runtime.size import Size
    dtype = self.dtype if dtype is None else dtype
    if len(args) == 1 and isinstance(args[0], (tuple, list, Size)) and \
            (isinstance(args[0], Size) or not all(isinstance(a, (int, np.integer)) for a in args[0])
             or len(args[0]) == 0):
        if isinstance(args[0], Size) or len(args[0]) == 0:
            out = empty(*args[0], dtype=dtype) if isinstance(args[0], Size) else tensor([], dtype=dtype)
        else:
            out = tensor(args[0], dtype=dtype)
    elif len(args) == 1 and isinstance(args[0], Tensor):
        raise TypeError("new(): to copy a tensor use t.clone() or t.new_tensor(data)")
    elif len(args) == 1 and isinstance(args[0], (tuple, list)):
        out = tensor(args[0], dtype=dtype)      # a list of ints is data, as in torch
    else:
        if not all(isinstance(a, (int, np.integer)) for a in args):
            raise TypeError(f"new(): expected sizes (ints), a torch.Size or a sequence of data, got "
                            f"{tuple(type(a).__name__ for a in args)}")
        out = empty(*args, dtype=dtype) if args else tensor([], dtype=dtype)
    if requires_grad:
        out.requires_grad_(True)
    return out



# ---- torch.set_default_tensor_type ---------------------------------------------------------------------------

@published("jitgrad")
def set_default_tensor_type(t, /) -> None:
    """Deprecated in torch: ``set_default_tensor_type(torch.DoubleTensor)`` or ``('torch.DoubleTensor')`` sets the
    default dtype to that type's dtype (CPU types only)."""
    warnings.warn("torch.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
                  "torch.set_default_dtype() and torch.set_default_device() as alternatives.", UserWarning,
                  stacklevel=2)
    if isinstance(t, str):
        name = t[len("torch."):] if t.startswith("torch.") else None
        cls = globals().get(name) if name else None
        if cls is None or not isinstance(getattr(cls, "dtype", None), dt.DType):
            raise TypeError(f"invalid type: '{t}'")
        t = cls
    d = getattr(t, "dtype", None)
    if not isinstance(d, dt.DType) or not d.is_floating_point:
        raise TypeError(defaults._ONLY_FLOAT)
    defaults.set_default_dtype(d)


# ---- torch.set_warn_always -----------------------------------------------------------------------------------

_WARN_ALWAYS = [False]


@published("jitgrad")
def set_warn_always(b: bool) -> None:
    """torch's switch that makes warn-once warnings warn every time.  jitgrad's warnings go through Python's
    ``warnings`` module (its filters decide repetition); the flag is kept for ``is_warn_always_enabled``."""
    _WARN_ALWAYS[0] = bool(b)


@published("jitgrad")
def is_warn_always_enabled() -> bool:
    """The flag of :func:`set_warn_always`."""
    return _WARN_ALWAYS[0]


__all__ += ["set_warn_always", "is_warn_always_enabled"]
