"""The edges of the torch surface: what tutorial code written for torch meets first.

- a name torch has and jitgrad lacks raises ``UnsupportedError`` ("jitgrad does not support torch.fft yet"),
  never a bare AttributeError.  ``UnsupportedError`` is a NotImplementedError and an AttributeError, so
  ``hasattr(jg, "fft")`` is still honestly False;
- ``format(t, spec)`` on 0-d tensors (``f"{loss:.4f}"``, ``f"{loss}"``), torch's TypeError for other tensors.

The rest of the surface lives in the functions themselves: each public function ends its signature with
``**torch_kw`` (``keepdims=``, ``out=``, and "not supported yet" for other torch keywords; torch_kwargs.py) and
names its result's node as torch does (``MeanBackward0``; grad_names.py), so ``jg.sum`` is the function itself.

``install`` runs once, at the end of ``jitgrad/__init__``: it adds the functions of the extra modules (ordering,
counting, masking, slicing, scatter_reduce, strided) to the ``jitgrad`` namespace and as Tensor methods, the
in-place math methods, and the ``__getattr__`` hooks.
"""
from __future__ import annotations

import numpy as np

from ..runtime.tensor import Tensor
from .torch_kwargs import REDUCTIONS, UnsupportedError, write_out  # noqa: F401 (re-exported)
from .torch_names import NN_FUNCTIONAL, TENSOR_METHODS, TORCH_FUNCTIONS


def unsupported_attribute(owner: str, name: str, known) -> AttributeError:
    if name in known:
        torch_owner = {"jitgrad": "torch", "Tensor": "torch.Tensor"}.get(owner, owner.replace("jitgrad", "torch"))
        return UnsupportedError(f"jitgrad does not support {torch_owner}.{name} yet")
    return AttributeError(f"module '{owner}' has no attribute '{name}'" if owner != "Tensor" else
                          f"'Tensor' object has no attribute '{name}'")


def _tensor_getattr(self, name):
    # only reached when normal lookup fails: a name torch's Tensor has and ours lacks, or a typo
    raise unsupported_attribute("Tensor", name, TENSOR_METHODS)


def _tensor_format(self, spec):
    """``f"{t:.4f}"`` and ``f"{t}"``: a 0-d tensor formats its number (as torch); others accept only the empty
    spec.  (A traced 0-d value keeps its str: reading its number would end the trace.)"""
    if self.ndim == 0 and type(self._data) is np.ndarray:
        return format(self.item(), spec)    # f"{loss}" prints the number, as torch
    if spec:
        raise TypeError("unsupported format string passed to Tensor.__format__")
    return str(self)


# ---- install ---------------------------------------------------------------------------------------

def install(jg: dict):
    """Wire the surface into the ``jitgrad`` namespace ``jg`` (its ``globals()``), Tensor and nn.functional."""
    from .reductions import counting
    from . import elementary as functions
    from .pointwise import inplace as inplace_math, predicates
    from .indexing import masking, scatter_reduce
    from .sorting import ordering
    from .shaping import slicing
    from ..runtime import strided
    from ..nn import functional as nnF

    # 1. the functions of the extra modules: in functions' namespace and jitgrad's, and as Tensor methods
    for mod in (ordering, counting, masking, slicing, predicates, scatter_reduce, strided):
        for n in mod.METHODS:
            fn = getattr(mod, n)
            setattr(functions, n, fn)
            jg[n] = fn
            if n not in slicing.FUNCTION_ONLY and n not in Tensor.__dict__:
                setattr(Tensor, n, fn)
    for n, f in {**masking.INPLACE, **scatter_reduce.INPLACE}.items():
        setattr(Tensor, n, f)
    inplace_math.install(Tensor)

    # 2. names torch has and jitgrad lacks
    Tensor.__getattr__ = _tensor_getattr
    Tensor.__format__ = _tensor_format
    jg["__getattr__"] = lambda name: _raise(unsupported_attribute("jitgrad", name, TORCH_FUNCTIONS))
    vars(nnF)["__getattr__"] = lambda name: _raise(
        unsupported_attribute("jitgrad.nn.functional", name, NN_FUNCTIONAL))
    jg["UnsupportedError"] = UnsupportedError


def _raise(e):
    raise e


__all__ = ["UnsupportedError", "install", "REDUCTIONS", "write_out"]
