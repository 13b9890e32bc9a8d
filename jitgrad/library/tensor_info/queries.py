"""Questions a tensor answers about itself and torch's no-op resolutions for real tensors: ``is_signed``,
``is_cpu``, ``get_device`` (-1 on the CPU), ``itemsize``, ``nbytes``, ``is_nonzero`` (torch's errors for zero or
several elements), ``is_same_size``, ``is_neg`` / ``resolve_neg`` and ``is_conj`` / ``resolve_conj`` (jitgrad has no
negative or conjugate bits: False, and the tensor itself).

>>> import jitgrad as jg
>>> x = jg.zeros(2, 3)
>>> x.nbytes, x.itemsize, x.get_device(), x.is_cpu, x.is_signed()
(24, 4, -1, True, True)
"""
from __future__ import annotations

from ...declarations import published
from ...runtime.tensor import Tensor

_UNSIGNED = ("bool", "uint8")


def _need_tensor(name, x, what="input", pos=1):
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}(): argument '{what}' (position {pos}) must be Tensor, not {type(x).__name__}")


@published("jitgrad", "Tensor")
def is_signed(input):
    """Whether the dtype holds negative values (False for bool and uint8, as torch)."""
    _need_tensor("is_signed", input)
    return input.dtype.name not in _UNSIGNED


@published("jitgrad", "Tensor")
def get_device(input):
    """The device's index: -1 for a CPU tensor (torch.get_device), the CUDA ordinal otherwise."""
    _need_tensor("get_device", input)
    d = input.device
    return -1 if d.type == "cpu" else (d.index or 0)


@published("jitgrad", "Tensor")
def is_nonzero(input):
    """``bool(input)`` for a one-element tensor; torch's RuntimeError for an empty or longer one."""
    _need_tensor("is_nonzero", input)
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item() != 0)


@published("jitgrad", "Tensor")
def is_same_size(input, other):
    """Whether the two tensors have the same shape."""
    _need_tensor("is_same_size", input)
    _need_tensor("is_same_size", other, "other", 2)
    return tuple(input.shape) == tuple(other.shape)


@published("jitgrad", "Tensor")
def is_neg(input):
    """False: jitgrad has no lazily negated tensors (torch's negative bit is for complex views)."""
    _need_tensor("is_neg", input)
    return False


@published("jitgrad", "Tensor")
def resolve_neg(input):
    """The tensor itself (no negative bit to resolve)."""
    _need_tensor("resolve_neg", input)
    return input


@published("jitgrad", "Tensor")
def is_conj(input):
    """False: jitgrad's tensors are real."""
    _need_tensor("is_conj", input)
    return False


@published("jitgrad", "Tensor")
def resolve_conj(input):
    """The tensor itself (real tensors have no conjugate bit)."""
    _need_tensor("resolve_conj", input)
    return input


@published("Tensor.property", name="is_cpu")
def _is_cpu(self):
    """Whether the tensor is on the CPU."""
    return self.device.type == "cpu"


@published("Tensor.property", name="itemsize")
def _itemsize(self):
    """Bytes per element (``element_size()``)."""
    return self.element_size()


@published("Tensor.property", name="nbytes")
def _nbytes(self):
    """Bytes of the elements: ``numel() * itemsize``."""
    return self.numel() * self.element_size()


__all__ = ["is_signed", "get_device", "is_nonzero", "is_same_size", "is_neg", "resolve_neg", "is_conj",
           "resolve_conj"]
