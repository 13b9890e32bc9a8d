"""``jitgrad.autograd.forward_ad``: torch's forward-mode AD API on jitgrad's dual levels (``runtime/dual.py``).

>>> import jitgrad as jg
>>> import jitgrad.autograd.forward_ad as fwAD
>>> x, v = jg.tensor([1.0, 2.0]), jg.tensor([1.0, 0.0])
>>> with fwAD.dual_level():
...     y = fwAD.make_dual(x, v) ** 2
...     fwAD.unpack_dual(y).tangent
tensor([2., 0.])
"""
from __future__ import annotations

from typing import NamedTuple, Optional

from ..runtime.dual import DUALS, same_layout, zeros_with_layout
from ..runtime.tensor import Tensor

__all__ = ["UnpackedDualTensor", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual", "dual_level"]

_LEVELS: list = []      # the levels opened through this API (func.jvp opens its own, which nest inside)
_current_level = -1     # torch's: the index of the level open through this API, -1 when none


def enter_dual_level() -> int:
    """Open a new forward AD level (``dual_level`` is the context manager form); returns its index."""
    if _LEVELS:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    global _current_level
    lv = DUALS.enter()
    _LEVELS.append(lv)
    _current_level = lv.index
    return lv.index


def exit_dual_level(*, level: Optional[int] = None) -> None:
    """Close the forward AD level ``level`` (the current one by default); its tangents are dropped."""
    if not _LEVELS or (level is not None and level != _LEVELS[-1].index):
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that was created. This is "
                           "not supported.")
    global _current_level
    DUALS.exit(_LEVELS.pop())
    _current_level = _LEVELS[-1].index if _LEVELS else -1


def _level(level):
    if not _LEVELS:
        return None
    if level is None:
        return _LEVELS[-1]
    for lv in _LEVELS:
        if lv.index == level:
            return lv
    return None


def make_dual(tensor: Tensor, tangent: Tensor, *, level: Optional[int] = None) -> Tensor:
    """A view of ``tensor`` that carries ``tangent`` (same size) at the forward AD level: ops on it compute the
    Jacobian-vector product alongside the value."""
    lv = _level(level)
    if lv is None:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, make sure to "
                           "enter_dual_level() first.")
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"Expected primal to be floating point or complex, but got: {tensor.dtype}")
    if not (tangent.is_floating_point() or tangent.is_complex()):
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {tangent.dtype}")
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError("Trying to set a forward gradient that has a different size than that of the original "
                           f"Tensor, this is not supported. Tensor is of size {list(tensor.shape)} while the given "
                           f"forward gradient is of size {list(tangent.shape)}.")
    if lv.get(tangent) is not None:
        raise RuntimeError(f"Setting a forward grad that itself has a forward gradient at the same level {lv.index} "
                           "is not supported.")
    with DUALS.hidden():
        # (an inference tensor has no view tracking, as torch's: the dual is an alias of its memory)
        dual = tensor.view_as(tensor) if not tensor._inference else tensor.detach()
        if tangent.dtype is not tensor.dtype:
            tangent = tangent.to(tensor.dtype)
        if not same_layout(tangent, tensor):
            # torch gives the dual a copy of the tangent laid out as the primal (its views, as_strided included,
            # then read the tangent where they read the primal); writes into it leave the given tangent alone
            fresh = zeros_with_layout(tensor)
            if fresh is not None:
                tangent = fresh.copy_(tangent)
    lv.set(dual, tangent)
    return dual


class UnpackedDualTensor(NamedTuple):
    """What ``unpack_dual`` returns: the primal (a view of the dual tensor without its tangent) and the tangent
    (None when it has none)."""
    primal: Tensor
    tangent: Optional[Tensor]


def unpack_dual(tensor: Tensor, *, level: Optional[int] = None) -> UnpackedDualTensor:
    """``(primal, tangent)`` of ``tensor`` at the forward AD level; outside any level, ``(tensor, None)``."""
    lv = _level(level)
    if lv is None:
        return UnpackedDualTensor(tensor, None)
    tangent = lv.get(tensor)
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    with DUALS.hidden():
        primal = tensor.view_as(tensor)
    return UnpackedDualTensor(primal, tangent)


class dual_level:
    """Context manager of a forward AD level: dual tensors made inside carry tangents until it exits.

    >>> import jitgrad as jg
    >>> import jitgrad.autograd.forward_ad as fwAD
    >>> with fwAD.dual_level():
    ...     d = fwAD.make_dual(jg.tensor([0.0]), jg.tensor([1.0]))
    ...     fwAD.unpack_dual(d.sin()).tangent
    tensor([1.])
    """

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False
