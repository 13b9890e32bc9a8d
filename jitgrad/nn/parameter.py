"""``jitgrad.nn.Parameter``: a tensor that a Module registers as a parameter when assigned as an attribute; and
``_empty``, the uninitialised payload a module's ``reset_parameters`` fills.
"""
from __future__ import annotations

import numpy as np

from ..ir import dtypes as dt
from ..library.creation import factories
from ..runtime.tensor import Tensor


class Parameter(Tensor, dispatch_as_tensor=True):
    """A leaf tensor that requires grad by default and that :class:`~jitgrad.nn.Module` registers when it is
    assigned as an attribute.  Like ``torch.nn.Parameter(data=None, requires_grad=True)``, it shares ``data``'s
    storage.

    >>> import jitgrad as jg
    >>> p = jg.nn.Parameter(jg.zeros(2))
    >>> p.requires_grad, p.is_leaf
    (True, True)
    """

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = Tensor._make(np.empty((0,), np.float32))
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter(): data must be a Tensor, not {type(data).__name__}")
        src = Tensor._make(data._data)
        p = Tensor.__new__(cls)
        for name in Tensor.__slots__[:-1]:          # all slots but __weakref__ (and those left unset)
            if hasattr(src, name):
                object.__setattr__(p, name, getattr(src, name))
        p._vc = data._vc        # shares storage and its version counter, like torch
        p._requires_grad = bool(requires_grad)
        return p

    def __init__(self, data=None, requires_grad=True):
        pass    # everything happens in __new__ (Tensor.__init__ takes other arguments)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        p = Parameter(Tensor._make(self._data.copy()), self._requires_grad)
        if self._grad is not None:
            p._grad = Tensor._make(self._grad._data.copy())
        memo[id(self)] = p
        return p

    def __reduce__(self):
        return (Parameter, (Tensor._make(self._data.copy()), self._requires_grad))


def _empty(*shape, device=None, dtype=None):
    """An uninitialised parameter payload on ``device`` (the module's reset_parameters fills it)."""
    return factories.empty(*shape, dtype=dtype if dtype is not None else dt.DEFAULT_FLOAT, device=device)


__all__ = ["Parameter"]
