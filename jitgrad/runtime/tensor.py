"""Tensor's core: a payload (a NumPy array, a device buffer, or a Var while tracing) plus autograd metadata, and
Device.  Nothing here runs an op: the methods that do (operators, in-place ops, casts and transfers, ``backward``,
hooks, ``detach``) are declared in the modules that implement them (tensor_methods.py, operators.py, mutation.py,
tensor_protocols.py; the library's functions) and published onto Tensor by publisher.py, so this module imports
no other part of the engine but the grad modes, the tracer's state, sizes and strides.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..ir import dtypes as dt
from . import grad_mode
from ..tracer import STATE as _TR
from ..tracer.trace import DEPARTED as _DEPARTED
from .view_rule import contiguous_strides, element_strides
from .size import Size

_GM = grad_mode.STATE
_FROM_NP = dt._FROM_NP
_new_tuple = tuple.__new__


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
# Tensor's subclasses that eager dispatch treats as Tensor itself (``Tensor.__init_subclass__``)
AS_TENSOR: set = set()


class Tensor:
    """A multi-dimensional array with autograd, like ``torch.Tensor``.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1., 2.], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
    """

    __slots__ = ("_data", "_requires_grad", "grad_fn", "_grad", "_vc", "_base", "_hooks", "_retains_grad", "_acc",
                 "_out_nr", "_inference", "_view_origin", "_view_version", "__weakref__")
    __array_priority__ = 1000  # NumPy scalars/arrays on the left defer to our operators

    def __init_subclass__(cls, dispatch_as_tensor: bool = False, **kw):
        """``class P(Tensor, dispatch_as_tensor=True)``: eager dispatch takes P's instances by its fast paths, as it
        takes Tensor's own (for a subclass that changes nothing an op reads or records: nn.Parameter)."""
        super().__init_subclass__(**kw)
        if dispatch_as_tensor:
            AS_TENSOR.add(cls)

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
        t._view_origin = None   # set, so reading it never falls through to __getattr__ (torch_surface's refusal)
        if _DEPARTED:       # (the thread-local states are read only where some thread's depart: tracer/trace.py)
            t._inference = _GM.inference_on
            tr = _TR.active
            if tr is not None:   # made while tracing: a constant of the graph, not an input
                tr.created.add(id(t))
                tr.keep.append(t)
        else:
            t._inference = False
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

    def is_inference(self) -> bool:
        return self._inference

    @property
    def _version(self) -> int:
        if self._inference:
            raise RuntimeError("Inference tensors do not track version counter.")
        return self._vc[0]

    # --- autograd attributes ---------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

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
        if _DEPARTED:
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

    def __hash__(self):     # (its ``==`` is elementwise, operators.py: a tensor hashes by identity)
        return id(self)

    # --- casts -----------------------------------------------------------------------------------
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

    def stride(self, dim=None):
        """Element strides per dim (torch's ``stride()``; a view's strides are its base's)."""
        d = self._data
        st = element_strides(d) if type(d) is np.ndarray else contiguous_strides(self.shape)
        return st if dim is None else st[dim]

