"""torch's two-tensor pointwise functions beyond arithmetic: ``atan2`` (alias ``arctan2``) and ``nextafter``.

Each is one elementwise primitive (``ir/ops/elementwise.py``: its NumPy impl, vjp and scalar body), so it fuses in
compiled code like ``add``.  torch takes tensors for both arguments here (a Python number is refused with torch's
TypeError); ``nextafter`` records a node whose backward raises torch's NotImplementedError, as torch does.
"""
from __future__ import annotations

from ...declarations import published
from ...ir.ops import OPS
from ...runtime.dispatch import bind
from ...runtime.tensor import Tensor
from ..torch_kwargs import torch_kwargs


def _check_tensors(name, input, other):
    for arg, what in ((input, "input"), (other, "other")):
        if not isinstance(arg, Tensor):
            raise TypeError(f"{name}(): argument '{what}' (position {1 if what == 'input' else 2}) must be Tensor, "
                            f"not {type(arg).__name__}")


def _inplace(fn):
    def f(self, other):
        if not isinstance(other, Tensor):
            _check_tensors(fn.__name__ + "_", self, other)
        return self._apply_inplace(fn, other)
    f.__name__ = fn.__name__ + "_"
    f.__doc__ = f"In place: ``x.{fn.__name__}_(other)`` writes ``{fn.__name__}(x, other)`` into ``x``."
    return f


@published("jitgrad", "Tensor", inplace=_inplace)
def atan2(input, other, **torch_kw):
    """The angle of the point (``other``, ``input``): ``arctan(input / other)`` in the right quadrant, elementwise
    with broadcasting (torch.atan2; the gradient at the origin is 0, as torch's)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(atan2, "atan2", (input, other), {}, torch_kw)
    _check_tensors("atan2", input, other)
    return bind(OPS["atan2"], input, other)


arctan2 = published("jitgrad", "Tensor", name="arctan2")(atan2)
published("Tensor", name="arctan2_")(_inplace(atan2))


@published("jitgrad", "Tensor", inplace=_inplace)
def nextafter(input, other, **torch_kw):
    """The next floating-point value after ``input`` towards ``other``, elementwise (torch.nextafter; no
    derivative: backward through it raises NotImplementedError, as torch)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(nextafter, "nextafter", (input, other), {}, torch_kw)
    _check_tensors("nextafter", input, other)
    return bind(OPS["nextafter"], input, other)


__all__ = ["atan2", "arctan2", "nextafter"]
