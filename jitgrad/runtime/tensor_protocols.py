"""Tensor's Python and NumPy protocols (a mixin of ``Tensor``, tensor.py): its value read out as a NumPy array
(``numpy()``, ``__array__``), a Python number or list (``item``, ``tolist``, ``bool``/``float``/``int``/
``__index__``), ``len`` and iteration, ``repr``, DLPack, pickling and ``copy.deepcopy``.

Reading a value needs a concrete one: inside ``@jitgrad.compile`` each of these raises the traced-value error
(traced.py) naming what was read; a tensor that requires grad refuses ``numpy()`` while grad mode is on (torch).
"""
from __future__ import annotations

import numpy as np

from ..declarations import published
from . import grad_mode
from .devices import backend_of_payload, copy_payload
from .traced import is_traced as _is_traced, traced_read as _traced_read

_GM = grad_mode.STATE


@published("Tensor.methods")
class TensorProtocols:
    """What Python and NumPy call on a Tensor to read its value (see the module docstring)."""

    __slots__ = ()

    def _check_readable(self, what):
        if _is_traced(self):
            _traced_read(self, what)
        if self.requires_grad and _GM.grad_enabled:      # torch allows it under no_grad
            raise RuntimeError(f"Can't call {what} on Tensor that requires grad. Use tensor.detach().{what} instead.")

    def _check_on_cpu(self):
        if backend_of_payload(self._data) is not None:
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if not force:
            self._check_readable("numpy()")
        self._check_on_cpu()
        return self._data

    def __array__(self, dtype=None, copy=None):
        self._check_readable("numpy()")
        self._check_on_cpu()
        a = self._data
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self):
        if _is_traced(self):
            _traced_read(self, "item()")
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        return self._host().reshape(()).item()

    def tolist(self):
        if _is_traced(self):
            _traced_read(self, "tolist()")
        return self._host().tolist()

    def __bool__(self):
        if _is_traced(self):
            _traced_read(self, "bool()")
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._host().reshape(()))

    def _one_item(self, what):
        """``item()`` for ``float()`` / ``int()``: refused in a trace, and for more than one element (torch)."""
        if _is_traced(self):
            _traced_read(self, what)
        if self._data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.item()

    def __float__(self):
        return float(self._one_item("float()"))

    def __int__(self):
        return int(self._one_item("int()"))

    def __index__(self):
        if _is_traced(self):
            _traced_read(self, "__index__()")
        if self._data.dtype.kind not in "iu" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __dlpack__(self, *args, **kwargs):
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __deepcopy__(self, memo):
        from .tensor import Tensor
        t = Tensor._make(copy_payload(self._data), self._requires_grad if self.grad_fn is None else False)
        if self._grad is not None:
            t._grad = Tensor._make(copy_payload(self._grad._data))
        memo[id(self)] = t
        return t


__all__ = ["TensorProtocols"]
