"""Tensor: a NumPy buffer plus autograd metadata.  Every op goes through ``bind``.

Math and shape methods that are compositions live in ``functions.py`` and are attached to Tensor there.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict

import numpy as np

from ..ir import dtypes as dt
from ..ir.ops import OPS
from . import grad_mode
from .node import AccumulateGrad, RemovableHandle
from ..tracer import STATE as _TR
from .mutation import InPlaceOps
from . import operators as _operators
from .operators import TensorOperators
from .tensor_protocols import TensorProtocols
from .traced import traced_alias
from .view_rule import contiguous_strides, element_strides
from .size import Size

_GM = grad_mode.STATE
_engine = None
_FROM_NP = dt._FROM_NP
_new_tuple = tuple.__new__
O = OPS


class Device:
    """A device: ``jitgrad.device("cpu")``.  Compares equal to its type string."""

    __slots__ = ("type", "index")

    def __init__(self, type="cpu", index=None):
        if isinstance(type, Device):
            type, index = type.type, type.index
        if ":" in str(type):
            type, index = str(type).split(":")
            index = int(index)
        if type not in ("cpu", "cuda"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {type}")
        self.type = type
        self.index = index

    def __repr__(self):
        return f"device(type='{self.type}'" + (f", index={self.index})" if self.index is not None else ")")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = Device(other)
        return isinstance(other, Device) and self.type == other.type and (self.index or 0) == (other.index or 0)

    def __hash__(self):
        return hash((self.type, self.index or 0))


CPU = Device("cpu")


def check_device(device):
    """The Device named by ``device`` (None: the CPU); raises when its backend is absent or has no device."""
    if device is None:
        return CPU
    d = device if isinstance(device, Device) else Device(device)
    if d.type != "cpu":
        _devices.backend(d.type)
    return d


def on_device(t: "Tensor", device) -> "Tensor":
    """A factory's result placed on ``device`` (None or the CPU: ``t`` itself), keeping ``requires_grad`` a
    leaf flag, as torch's ``device=`` does."""
    if device is None:
        return t
    d = check_device(device)
    if d.type == "cpu":
        return t
    rg = t._requires_grad
    out = Tensor._make(_devices.backend(d.type).to_device(t._data, d))
    out._requires_grad = rg
    return out


def _bind(op, *args, **params):
    return _dispatch_bind(op, *args, **params)


def _with_storage_of(t, source):
    """``t`` (a root sharing ``source``'s payload: ``detach()``, ``.data``) with ``source``'s whole storage, as
    torch's (``storage_offset``, ``as_strided``), when that payload is not all of it."""
    d = source._data
    if source._base is not None or type(d) is np.ndarray and not d.flags.owndata:
        from .strided import share_storage      # (strided.py builds on Tensor)
        share_storage(t, source)
    return t


class Tensor(InPlaceOps, TensorOperators, TensorProtocols):
    """A multi-dimensional array with autograd, like ``torch.Tensor``.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1., 2.], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
    """

    __slots__ = ("_data", "_requires_grad", "grad_fn", "_grad", "_vc", "_base", "_hooks", "_retains_grad", "_acc",
                 "_out_nr", "_inference", "_view_origin", "__weakref__")
    __array_priority__ = 1000  # NumPy scalars/arrays on the left defer to our operators

    # --- construction ----------------------------------------------------------------------------
    @staticmethod
    def _make(data: np.ndarray, requires_grad: bool = False) -> "Tensor":
        t = Tensor.__new__(Tensor)
        t._data = data
        t._requires_grad = requires_grad
        t.grad_fn = None
        t._grad = None
        t._vc = [0]
        t._base = None
        t._hooks = None
        t._retains_grad = False
        t._acc = None
        t._out_nr = 0
        t._inference = _GM.inference
        t._view_origin = None   # set, so reading it never falls through to __getattr__ (torch_surface's refusal)
        tr = _TR.active
        if tr is not None:   # made while tracing: a constant of the graph, not an input
            tr.created.add(id(t))
            tr.keep.append(t)
        return t

    # --- metadata --------------------------------------------------------------------------------
    @property
    def dtype(self) -> dt.DType:
        return _FROM_NP[self._data.dtype]

    @property
    def shape(self) -> Size:
        """The dims as a ``jitgrad.Size`` (a tuple; internal code reads ``_data.shape``)."""
        return _new_tuple(Size, self._data.shape)

    @property
    def ndim(self) -> int:
        return self._data.ndim

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

    def size(self, dim=None):
        if dim is None:
            return self.shape
        return self.shape[dim]

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return self._data.size

    nelement = numel

    def element_size(self) -> int:
        return np.dtype(self._data.dtype).itemsize

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    def is_contiguous(self, memory_format=None) -> bool:
        d = self._data
        if memory_format is not None and type(d) is np.ndarray:
            from .conversions import is_in_layout       # channels_last & co. (conversions.py)
            return is_in_layout(d, memory_format)
        return d.flags.c_contiguous if type(d) is np.ndarray or _devices.backend_of_payload(d) is None \
            else True      # device payloads are always contiguous buffers

    def is_inference(self) -> bool:
        return self._inference

    @property
    def _version(self) -> int:
        if self._inference:
            raise RuntimeError("Inference tensors do not track version counter.")
        return self._vc[0]

    # --- autograd attributes ---------------------------------------------------------------------
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

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        if self.grad_fn is None and self._base is not None:
            _dispatch.refresh_view(self)    # torch's is_leaf reads the view's regenerated grad_fn
        return self.grad_fn is None

    @property
    def grad(self):
        if self.grad_fn is not None and not self._retains_grad and self._grad is None:
            warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
                          "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
                          "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor.",
                          UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value):
        tr = _TR.active
        if tr is not None and tr.on_grad_write is not None:
            tr.on_grad_write(self)
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                                f"{type(value).__name__}")
            if value is self:
                raise RuntimeError("can't assign Variable as its own grad")
            if value.shape != self.shape:
                raise RuntimeError(f"assigned grad has data of a different size: grad shape {list(value.shape)}, "
                                   f"tensor shape {list(self.shape)}")
            if value.dtype is not self.dtype:
                g, mine = dt.torch_scalar_name(value.dtype).lower(), dt.torch_scalar_name(self.dtype).lower()
                raise RuntimeError(f"attempting to assign a gradient with dtype '{g}' to a tensor with grad_dtype "
                                   f"'{mine.capitalize()}'. The gradient must match the tensor's grad_dtype (defaults "
                                   "to the tensor's dtype). (torch's text; jitgrad has no grad_dtype attribute: "
                                   f"assigned grad {value.dtype.name}, tensor {self.dtype.name})")
        self._grad = value

    @grad.deleter
    def grad(self):
        """``del x.grad`` is ``x.grad = None`` (as torch)."""
        self.grad = None

    def data_ptr(self) -> int:
        """The address of the first element (views of one tensor differ by their offset, as in torch)."""
        d = self._data
        if type(d) is np.ndarray:
            return d.__array_interface__["data"][0] if d.size else 0
        self._check_readable("data_ptr()")      # a traced value has no address
        return id(d)        # a device buffer: an identity that aliases of the same buffer share

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    @property
    def output_nr(self) -> int:
        return self._out_nr

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

    def retain_grad(self):
        """Populate ``.grad`` for this non-leaf tensor during backward."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains_grad:
            return
        import weakref
        node = self.grad_fn
        if node.retain_grad_refs is None:
            node.retain_grad_refs = {}
        node.retain_grad_refs[self._out_nr] = weakref.ref(self)
        self._retains_grad = True

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate the gradient of this tensor w.r.t. graph leaves into their ``.grad``."""
        global _engine
        if _engine is None:     # the engine imports this module: import it on first use
            from . import engine as _engine
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
            from .node import mark_detached_inplace
            mark_detached_inplace(self)
        self.grad_fn = None
        self._requires_grad = False
        return self

    @property
    def data(self) -> "Tensor":
        # own version counter, not a view: ``p.data.add_()`` is allowed
        return _with_storage_of(traced_alias(Tensor._make(self._data), self), self)

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

    @property
    def _grad_fn(self):
        return self.grad_fn

    @_grad_fn.deleter
    def _grad_fn(self):
        raise RuntimeError("Deletion of _grad_fn not allowed. Detach tensor instead!")

    @property
    def _backward_hooks(self):
        """torch's dict of the hooks ``register_hook`` added (None when there are none); assignable."""
        if self.grad_fn is None:
            return self._hooks
        th = self.grad_fn.tensor_hooks
        return None if th is None else th.get(self._out_nr)

    @_backward_hooks.setter
    def _backward_hooks(self, hooks):
        if self.grad_fn is None:
            self._hooks = hooks
        else:
            if self.grad_fn.tensor_hooks is None:
                self.grad_fn.tensor_hooks = {}
            self.grad_fn.tensor_hooks[self._out_nr] = hooks

    @_backward_hooks.deleter
    def _backward_hooks(self):
        raise RuntimeError("Deletion of _backwards_hooks not allowed!")

    def _is_view(self) -> bool:
        """Whether this tensor is a view of another (``_base`` is that tensor)."""
        return self._base is not None

    def __hash__(self):     # (here: TensorOperators defines __eq__, which makes its __hash__ None)
        return id(self)

    # --- casts -----------------------------------------------------------------------------------
    def to(self, *args, dtype=None, device=None, copy=False, memory_format=None, **kw):
        """``to(dtype)``, ``to(device)``, ``to(other_tensor)``: a differentiable cast (or self if nothing changes)."""
        if memory_format is not None:       # torch.channels_last & co. (conversions.py)
            from .conversions import contiguous_in
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
            t = _devices.transfer(self, check_device(device))
        if dtype is None:
            return t
        dtype = dt.as_dtype(dtype)
        if dtype is t.dtype and not copy:
            return t
        return _bind(O["cast"], t, dtype=dtype)

    @property
    def volatile(self) -> bool:
        """Removed in torch 0.4: always False (warns, as torch)."""
        warnings.warn("volatile was removed (Variable.volatile is always False)", UserWarning, stacklevel=2)
        return False

    def float(self):
        return self.to(dt.float32)

    def double(self):
        return self.to(dt.float64)

    def half(self):
        return self.to(dt.float16)

    def long(self):
        return self.to(dt.int64)

    def int(self):
        return self.to(dt.int32)

    def bool(self):
        return self.to(dt.bool_)

    def cpu(self):
        return _devices.transfer(self, CPU)

    def cuda(self, device=None):
        d = check_device("cuda" if device is None else device if not isinstance(device, int) else f"cuda:{device}")
        return _devices.transfer(self, d)

    def clone(self, *, memory_format=None) -> "Tensor":
        if memory_format is not None:       # torch.channels_last & co. (conversions.py)
            from .conversions import relayout
            return relayout(_bind(O["copy"], self), memory_format)
        return _bind(O["copy"], self)

    def contiguous(self, memory_format=None) -> "Tensor":
        if memory_format is not None:       # torch.channels_last & co. (conversions.py)
            from .conversions import contiguous_in
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
        return self._new_filled(np.ones, size, dtype, device, requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_filled(np.empty, size, dtype, device, requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False) -> "Tensor":
        return self._new_filled(lambda shp, d: np.full(shp, fill_value, d), (size,), dtype, device, requires_grad)

    def _new_filled(self, make, size, dtype, device, requires_grad):
        if len(size) == 1 and not isinstance(size[0], (int, np.integer)):
            size = size[0]
        t = Tensor._make(make(tuple(int(s) for s in size), dt.as_dtype(dtype or self.dtype).np))
        t = self._same_device(t) if device is None else on_device(t, device)
        return t.requires_grad_(True) if requires_grad else t

    def stride(self, dim=None):
        """Element strides per dim (torch's ``stride()``; a view's strides are its base's)."""
        d = self._data
        st = element_strides(d) if type(d) is np.ndarray else contiguous_strides(self.shape)
        return st if dim is None else st[dim]

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

    # --- methods the vjp rules rely on -----------------------------------------------------------
    def sum_to_size(self, *size) -> "Tensor":
        """Sum broadcast dimensions so the result has shape ``size`` (the adjoint of ``expand``)."""
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
        if shape == self.shape:
            return self
        lead = self.ndim - len(shape)
        if lead < 0:
            raise RuntimeError(f"size {list(shape)} is not expandable to size {list(self.shape)}")
        axes = list(range(lead))
        for i, d in enumerate(shape):
            if d == 1 and self.shape[lead + i] != 1:
                axes.append(lead + i)
            elif d != self.shape[lead + i]:
                raise RuntimeError(f"size {list(shape)} is not expandable to size {list(self.shape)}")
        if axes and axes[-1] < lead:     # only leading dims to drop: one reduction, no reshape
            return _bind(O["sum"], self, axes=tuple(axes), keepdims=False)
        r = _bind(O["sum"], self, axes=tuple(axes), keepdims=True) if axes else self
        return r.reshape(shape) if r.shape != shape else r

    def where(self, condition, other) -> "Tensor":
        """``where(condition, self, other)``."""
        return _bind(O["where"], condition, self, other)


from .dispatch import bind as _dispatch_bind  # noqa: E402
_bind = _operators._bind = _dispatch_bind   # noqa: E305  (the methods call bind itself: one Python frame less per op)
from . import devices as _devices  # noqa: E402
from . import dispatch as _dispatch  # noqa: E402
