"""The edges of the torch surface: what tutorial code written for torch meets first.

- a name torch has and jitgrad lacks raises ``UnsupportedError`` ("jitgrad does not support torch.fft yet"),
  never a bare AttributeError.  ``UnsupportedError`` is a NotImplementedError and an AttributeError, so
  ``hasattr(jg, "fft")`` is still honestly False;
- ``format(t, spec)`` on 0-d tensors (``f"{loss:.4f}"``, ``f"{loss}"``), torch's TypeError for other tensors.

The rest of the surface lives in the functions themselves: each public function ends its signature with
``**torch_kw`` (``keepdims=``, ``out=``, and "not supported yet" for other torch keywords; torch_kwargs.py) and
names its result's node as torch does (``MeanBackward0``; grad_names.py), so ``jg.sum`` is the function itself.

``jitgrad.__getattr__`` and ``jitgrad.nn.functional.__getattr__`` (PEP 562) call :func:`unsupported_attribute`;
``Tensor.__format__`` and ``UnsupportedTensorAttribute`` (the attribute of each torch Tensor name jitgrad lacks) are
declared here and published with the rest of the surface.
"""
from __future__ import annotations

import numpy as np

from ..declarations import published
from .torch_kwargs import REDUCTIONS, UnsupportedError, write_out  # noqa: F401 (re-exported)
from .torch_names import TENSOR_METHODS


def unsupported_attribute(owner: str, name: str, known) -> AttributeError:
    if name in known:
        torch_owner = {"jitgrad": "torch", "Tensor": "torch.Tensor"}.get(owner, owner.replace("jitgrad", "torch"))
        return UnsupportedError(f"jitgrad does not support {torch_owner}.{name} yet")
    return AttributeError(f"module '{owner}' has no attribute '{name}'" if owner != "Tensor" else
                          f"'Tensor' object has no attribute '{name}'")


@published("Tensor.missing", name="UnsupportedTensorAttribute")
class UnsupportedTensorAttribute:
    """The class attribute the publisher gives each name of torch's Tensor that jitgrad lacks: reading it raises
    ``UnsupportedError`` ("jitgrad does not support torch.Tensor.stft yet"); ``hasattr`` is False.

    A descriptor per name rather than ``Tensor.__getattr__``: CPython's adaptive interpreter specialises no
    attribute read of a class that defines ``__getattr__``, and every eager op reads a dozen Tensor attributes.
    A name torch lacks too (a typo) gets Python's own AttributeError, with its "Did you mean" hint.
    """

    names = TENSOR_METHODS      # the names it stands in for, where nothing else is published
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, owner=None):
        raise unsupported_attribute("Tensor", self.name, TENSOR_METHODS)


@published("Tensor", name="__format__")
def _tensor_format(self, spec):
    """``f"{t:.4f}"`` and ``f"{t}"``: a 0-d tensor formats its number (as torch); others accept only the empty
    spec.  (A traced 0-d value keeps its str: reading its number would end the trace.)"""
    if self.ndim == 0 and type(self._data) is np.ndarray:
        return format(self.item(), spec)    # f"{loss}" prints the number, as torch
    if spec:
        raise TypeError("unsupported format string passed to Tensor.__format__")
    return str(self)


__all__ = ["UnsupportedError", "unsupported_attribute", "UnsupportedTensorAttribute", "REDUCTIONS", "write_out"]
