"""The methods of Tensor that run ops or reach other parts of the engine: casts and transfers (``to``, ``cpu``,
``cuda``, ``clone``, ``contiguous``), the ``new_*`` factories, ``requires_grad`` / ``is_leaf`` (a view's history
follows its base's), hooks and ``retain``-style registration, ``backward``, ``detach`` and ``.data``,
``sum_to_size`` and ``where`` (the vjp rules rely on them).  ``TensorMethods``' methods are Tensor's, published by
publisher.py; runtime/tensor.py holds the core they work on.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..declarations import published
from ..ir import dtypes as dt
from ..ir.ops import OPS as O
from ..ir.symbolic import SymInt, same_shape
from ..tracer import STATE as _TR
from . import devices as _devices, dispatch as _dispatch, grad_mode
from .backward import engine as _engine
from .conversions import contiguous_in, is_in_layout, relayout
from .devices import check_device, on_device
from .forward_state import STATE as _FWD
from .dispatch import bind as _bind
from .node import AccumulateGrad, RemovableHandle, mark_detached_inplace
from .strided import share_storage, storage_buffer
from .symbolic_values import filled, symbolic_size
from .tensor import CPU, Device, Tensor
from .traced import traced_alias
from .transfers import transfer

_GM = grad_mode.STATE


def _with_storage_of(t, source):
    """``t`` (a root sharing ``source``'s payload: ``detach()``, ``.data``) with ``source``'s whole storage, as
    torch's (``storage_offset``, ``as_strided``), when that payload is not all of it."""
    d = source._data
    if source._base is not None or type(d) is np.ndarray and not d.flags.owndata:
        share_storage(t, source)
    return t


@published("Tensor.methods")
class TensorMethods:
    """Tensor's methods that run ops (see the module docstring)."""

    @property
    def device(self) -> Device:
        d = self._data
        if type(d) is np.ndarray:
            return CPU
        return _devices.device_of(d)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def _host(self) -> np.ndarray:
        """The value as a NumPy array (a copy from the device for a device tensor)."""
        d = self._data
        return d if type(d) is np.ndarray else _devices.to_host(d)

    def is_contiguous(self, memory_format=None) -> bool:
        d = self._data
        if memory_format is not None and type(d) is np.ndarray:
            return is_in_layout(d, memory_format)
        return d.flags.c_contiguous if type(d) is np.ndarray or _devices.backend_of_payload(d) is None \
            else True      # device payloads are always contiguous buffers

    @property
    def requires_grad(self) -> bool:
        if self._requires_grad or self.grad_fn is not None:
            return True
        b = self._base
        if b is not None and b.grad_fn is not None and self._view_origin is None:
            _dispatch.refresh_view(self)    # made before its base had a history: it takes the base's (torch)
            return self.grad_fn is not None
        return False

    @requires_grad.setter
    def requires_grad(self, flag):
        flag = bool(flag)
        if self.grad_fn is not None:
            if not flag:
                raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to use a "
                                   "computed variable in a subgraph that doesn't require differentiation use "
                                   "var_no_grad = var.detach().")
            return
        if flag and self._data.dtype.kind != "f":
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients (got {self.dtype.name})")
        if flag and self._inference and not _GM.inference:
            raise RuntimeError("Setting requires_grad=True on inference tensor outside InferenceMode is not allowed.")
        self._requires_grad = flag

    @property
    def is_leaf(self) -> bool:
        if self.grad_fn is None and self._base is not None:
            _dispatch.refresh_view(self)    # torch's is_leaf reads the view's regenerated grad_fn
        return self.grad_fn is None

    def _accumulator(self) -> AccumulateGrad:
        acc = self._acc
        if acc is None:
            acc = self._acc = AccumulateGrad(self)
        return acc

    def register_hook(self, hook) -> RemovableHandle:
        """Register ``hook(grad) -> Tensor or None``, called with this tensor's gradient; a returned tensor
        replaces the gradient.  Returns a handle whose ``remove()`` unregisters it.

        >>> import jitgrad as jg
        >>> v = jg.tensor([0., 0., 0.], requires_grad=True)
        >>> h = v.register_hook(lambda grad: grad * 2)
        >>> v.backward(jg.tensor([1., 2., 3.]))
        >>> v.grad
        tensor([2., 4., 6.])
        >>> h.remove()
        """
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._base is not None:
            _dispatch.refresh_view(self)    # a view whose base was written since: the hook goes on its new node
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = OrderedDict()
            store = self._hooks
        else:
            node = self.grad_fn
            if node.tensor_hooks is None:
                node.tensor_hooks = {}
            store = node.tensor_hooks.setdefault(self._out_nr, OrderedDict())
        h = RemovableHandle(store)
        store[h.id] = hook
        return h

    def register_post_accumulate_grad_hook(self, hook) -> RemovableHandle:
        """Register ``hook(tensor) -> None`` on a leaf, called after backward has accumulated into its ``.grad``
        (torch's ``Tensor.register_post_accumulate_grad_hook``; DistributedDataParallel starts its all-reduces
        from it).  Returns a handle whose ``remove()`` unregisters it."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        acc = self._accumulator()
        if acc.post_hooks is None:
            acc.post_hooks = OrderedDict()
        h = RemovableHandle(acc.post_hooks)
        acc.post_hooks[h.id] = hook
        return h

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate the gradient of this tensor w.r.t. graph leaves into their ``.grad``."""
        _engine.backward((self,), None if gradient is None else (gradient,), retain_graph, create_graph,
                         inputs=inputs)

    def detach(self) -> "Tensor":
        """A new tensor sharing storage (and version counter) that never requires grad."""
        t = Tensor._make(self._data)
        t._vc = self._vc    # shared: in-place changes through either one are seen by the saved-tensor checks
        # not an autograd view (torch: in-place on ``x.detach()`` is allowed)
        return _with_storage_of(traced_alias(t, self), self)

    def detach_(self) -> "Tensor":
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        if self.grad_fn is not None:        # a node that saved it must refuse it now (torch)
            mark_detached_inplace(self)
        self.grad_fn = None
        self._requires_grad = False
        if _FWD.active is not None:     # torch drops its forward-mode tangents too, at every level
            _FWD.active.forget(self)
        return self

    @property
    def data(self) -> "Tensor":
        # own version counter, not a view: ``p.data.add_()`` is allowed
        d = self._data
        t = Tensor._make(d)
        if _TR.active is not None:
            traced_alias(t, self)
        # (_with_storage_of, inline: read once per parameter per optimiser step in the notebooks' loops)
        if self._base is not None or type(d) is np.ndarray and not d.flags.owndata:
            share_storage(t, self)
        return t

    @data.setter
    def data(self, value):
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}")
        if _TR.active is not None:
            # inside a trace the payload is a graph value: rebinding it would be lost (a captured tensor) or left
            # behind as a dangling graph variable; the assignment is a recorded write of value into self instead
            if tuple(value.shape) != tuple(self.shape) or value.dtype is not self.dtype:
                raise dt.UnsupportedError(
                    f"jitgrad does not support assigning .data of another shape or dtype inside @jitgrad.compile "
                    f"(a {self.dtype.name}{list(self.shape)} tensor given {value.dtype.name}{list(value.shape)})")
            with grad_mode.no_grad():
                self.data.copy_(value)
            return
        self._data = value._data

    @data.deleter
    def data(self):
        raise RuntimeError("Deleting tensor data is not allowed. Delete tensor instead!")

    @requires_grad.deleter
    def requires_grad(self):
        raise RuntimeError("requires_grad must be a bool")     # torch's text for del

    def to(self, *args, dtype=None, device=None, copy=False, memory_format=None, **kw):
        """``to(dtype)``, ``to(device)``, ``to(other_tensor)``: a differentiable cast (or self if nothing changes)."""
        if memory_format is not None:       # torch.channels_last & co. (conversions.py)
            return contiguous_in(self.to(*args, dtype=dtype, device=device, copy=copy, **kw), memory_format)
        for a in args:
            if isinstance(a, Tensor):       # to(other): other's dtype and device
                dtype = a.dtype
                device = a.device
            elif isinstance(a, (str, Device)) and str(a).split(":")[0] in ("cpu", "cuda"):
                device = a
            else:
                dtype = a
        t = self
        if device is not None:
            t = transfer(self, check_device(device))
        if dtype is None:
            return t
        dtype = dt.as_dtype(dtype)
        if dtype is t.dtype and not copy:
            return t
        return _bind(O["cast"], t, dtype=dtype)

    def cpu(self):
        return transfer(self, CPU)

    def cuda(self, device=None):
        d = check_device("cuda" if device is None else device if not isinstance(device, int) else f"cuda:{device}")
        return transfer(self, d)

    def clone(self, *, memory_format=None) -> "Tensor":
        if memory_format is not None:       # torch.channels_last & co. (conversions.py)
            return relayout(_bind(O["copy"], self), memory_format)
        return _bind(O["copy"], self)

    def contiguous(self, memory_format=None) -> "Tensor":
        if memory_format is not None:       # torch.channels_last & co. (conversions.py)
            return contiguous_in(self, memory_format)
        if self.is_contiguous():
            return self
        r = self.clone()
        if type(r._data) is np.ndarray and not r._data.flags.c_contiguous:
            r._data = np.ascontiguousarray(r._data)    # clone keeps the strides (torch's preserve_format)
        return r

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False) -> "Tensor":
        """Zeros of ``size`` (ints or one sequence) with this tensor's dtype and device unless given."""
        return self._new_filled(np.zeros, size, dtype, device, requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_filled(np.ones, size, dtype, device, requires_grad, 1)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_filled(np.empty, size, dtype, device, requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_filled(lambda shp, d: np.full(shp, fill_value, d), (size,), dtype, device, requires_grad,
                                fill_value)

    def _new_filled(self, make, size, dtype, device, requires_grad, value=0):
        if len(size) == 1 and not isinstance(size[0], (int, np.integer, SymInt)):
            size = size[0]
        if symbolic_size(size):     # a trace's symbolic size: an op, not a constant
            t = filled(size, value, dt.as_dtype(dtype or self.dtype).np)
        else:
            t = Tensor._make(make(tuple(int(s) for s in size), dt.as_dtype(dtype or self.dtype).np))
        t = self._same_device(t) if device is None else on_device(t, device)
        return t.requires_grad_(True) if requires_grad else t

    def storage_offset(self) -> int:
        """The offset in elements of this tensor's first element in its storage (its root's buffer, which a root
        restrided by ``as_strided_`` keeps: strided.py)."""
        from .strided import storage_buffer     # (strided.py builds on Tensor)
        d, flat = self._data, storage_buffer(self)
        if flat is None or type(d) is not np.ndarray or not d.size:
            return 0
        return (d.__array_interface__["data"][0] - flat.__array_interface__["data"][0]) // d.itemsize

    def _same_device(self, t: "Tensor") -> "Tensor":
        """``t`` (made on the CPU) on this tensor's device."""
        d = self._data
        if type(d) is np.ndarray or _devices.backend_of_payload(d) is None:
            return t
        return on_device(t, self.device)

    def sum_to_size(self, *size) -> "Tensor":
        """Sum broadcast dimensions so the result has shape ``size`` (the adjoint of ``expand``)."""
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        own = self._data.shape      # (the payload's: no Size built per read on the backward hot path)
        if shape == own if type(self._data) is np.ndarray else same_shape(shape, own):     # (traced: ranks first)
            return self
        lead = len(own) - len(shape)
        if lead < 0:
            raise RuntimeError(f"size {list(shape)} is not expandable to size {list(own)}")
        axes = list(range(lead))
        for i, d in enumerate(shape):
            if d == 1 and own[lead + i] != 1:
                axes.append(lead + i)
            elif d != own[lead + i]:
                raise RuntimeError(f"size {list(shape)} is not expandable to size {list(own)}")
        if axes and axes[-1] < lead:     # only leading dims to drop: one reduction, no reshape
            return _bind(O["sum"], self, axes=tuple(axes), keepdims=False)
        r = _bind(O["sum"], self, axes=tuple(axes), keepdims=True) if axes else self
        return r.reshape(shape) if r._data.shape != shape else r

    def where(self, condition, other) -> "Tensor":
        """``where(condition, self, other)``."""
        return _bind(O["where"], condition, self, other)


__all__ = ["TensorMethods"]
