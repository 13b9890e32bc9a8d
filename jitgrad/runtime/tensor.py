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

_GM = grad_mode.STATE
_FROM_NP = dt._FROM_NP
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
    if device is None:
        return CPU
    d = device if isinstance(device, Device) else Device(device)
    if d.type == "cuda":
        raise RuntimeError("jitgrad: no CUDA device is available to eager tensors in this build; eager tensors live "
                           "on the CPU (the CUDA target belongs to @jg.compile(device='cuda'))")
    return d


def _bind(op, *args, **params):
    return _dispatch_bind(op, *args, **params)


class Tensor:
    """A multi-dimensional array with autograd, like ``torch.Tensor``.

    >>> import jitgrad as jg
    >>> x = jg.tensor([1., 2.], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([2., 4.])
    """

    __slots__ = ("_data", "_requires_grad", "grad_fn", "_grad", "_vc", "_base", "_hooks", "_retains_grad", "_acc",
                 "_out_nr", "_inference", "__weakref__")
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
        tr = _TR.active
        if tr is not None:   # made while tracing: a constant of the graph, not an input
            tr.created.add(id(t))
            tr.keep.append(t)
        return t

    def __init__(self, data=None, *, dtype=None, requires_grad=False):
        from .factories import as_array
        self.__dict_init(as_array(data if data is not None else [], dtype), requires_grad)

    def __dict_init(self, arr, requires_grad):
        src = Tensor._make(arr)
        for s in Tensor.__slots__[:-1]:
            object.__setattr__(self, s, getattr(src, s))
        self.requires_grad = requires_grad

    # --- metadata --------------------------------------------------------------------------------
    @property
    def dtype(self) -> dt.DType:
        return _FROM_NP[self._data.dtype]

    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def device(self) -> Device:
        return CPU

    @property
    def is_cuda(self) -> bool:
        return False

    def size(self, dim=None):
        if dim is None:
            return self._data.shape
        return self._data.shape[dim]

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return self._data.size

    nelement = numel

    def element_size(self) -> int:
        return self._data.itemsize

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    def is_contiguous(self) -> bool:
        return self._data.flags.c_contiguous

    def is_inference(self) -> bool:
        return self._inference

    @property
    def _version(self) -> int:
        return self._vc[0]

    # --- autograd attributes ---------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad or self.grad_fn is not None

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
            if value.shape != self.shape:
                raise RuntimeError(f"assigned grad has data of a different size: grad shape {list(value.shape)}, "
                                   f"tensor shape {list(self.shape)}")
            if value.dtype is not self.dtype:
                raise RuntimeError(f"assigned grad has data of a different type: grad {value.dtype.name}, tensor "
                                   f"{self.dtype.name}")
        self._grad = value

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
        from .engine import backward
        backward((self,), None if gradient is None else (gradient,), retain_graph, create_graph, inputs=inputs)

    def detach(self) -> "Tensor":
        """A new tensor sharing storage (and version counter) that never requires grad."""
        t = Tensor._make(self._data)
        t._vc = self._vc    # shared: in-place changes through either one are seen by the saved-tensor checks
        return t            # not an autograd view (torch: in-place on ``x.detach()`` is allowed)

    def detach_(self) -> "Tensor":
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.grad_fn = None
        self._requires_grad = False
        return self

    @property
    def data(self) -> "Tensor":
        t = Tensor._make(self._data)   # own version counter, not a view: ``p.data.add_()`` is allowed
        return t

    @data.setter
    def data(self, value):
        self._data = value._data

    # --- conversion ------------------------------------------------------------------------------
    def _check_readable(self, what):
        if _is_traced(self):
            _traced_read(self, what)
        if self.requires_grad:
            raise RuntimeError(f"Can't call {what} on Tensor that requires grad. Use tensor.detach().{what} instead.")

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if not force:
            self._check_readable("numpy()")
        return self._data

    def __array__(self, dtype=None, copy=None):
        self._check_readable("numpy()")
        a = self._data
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self):
        if _is_traced(self):
            _traced_read(self, "item()")
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        return self._data.reshape(()).item()

    def tolist(self):
        if _is_traced(self):
            _traced_read(self, "tolist()")
        return self._data.tolist()

    def __bool__(self):
        if _is_traced(self):
            _traced_read(self, "bool()")
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._data.reshape(()))

    def __float__(self):
        if _is_traced(self):
            _traced_read(self, "float()")
        if self._data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return float(self.item())

    def __int__(self):
        if _is_traced(self):
            _traced_read(self, "int()")
        if self._data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return int(self.item())

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

    def __hash__(self):
        return id(self)

    def __repr__(self):
        if type(self._data) is not np.ndarray:
            gf = f", grad_fn=<{self.grad_fn.name()}>" if self.grad_fn is not None else ""
            return f"tensor(<traced {self._data.aval}>{gf})"
        from .printing import tensor_repr
        return tensor_repr(self)

    def __dlpack__(self, *args, **kwargs):
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __reduce__(self):
        from .factories import tensor
        return (tensor, (self._data.copy(),), None)

    def __deepcopy__(self, memo):
        t = Tensor._make(self._data.copy(), self._requires_grad if self.grad_fn is None else False)
        if self._grad is not None:
            t._grad = Tensor._make(self._grad._data.copy())
        memo[id(self)] = t
        return t

    def to(self, *args, dtype=None, device=None, copy=False, **kw):
        """``to(dtype)``, ``to(device)``, ``to(other_tensor)``: a differentiable cast (or self if nothing changes)."""
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif isinstance(a, (str, Device)) and str(a).split(":")[0] in ("cpu", "cuda"):
                device = a
            else:
                dtype = a
        if device is not None:
            check_device(device)
        if dtype is None:
            return self
        dtype = dt.as_dtype(dtype)
        if dtype is self.dtype and not copy:
            return self
        return _bind(O["cast"], self, dtype=dtype)

    def type(self, dtype=None):
        if dtype is None:
            return f"jitgrad.{self.dtype.name}"
        return self.to(dtype)

    def float(self):
        return self.to(dt.float32)

    def double(self):
        return self.to(dt.float64)

    def long(self):
        return self.to(dt.int64)

    def int(self):
        return self.to(dt.int32)

    def bool(self):
        return self.to(dt.bool_)

    def cpu(self):
        return self

    def cuda(self, device=None):
        check_device("cuda")

    def clone(self) -> "Tensor":
        return _bind(O["copy"], self)

    def contiguous(self) -> "Tensor":
        return self if self._data.flags.c_contiguous else self.clone()

    def new_zeros(self, shape, dtype=None) -> "Tensor":
        return Tensor._make(np.zeros(tuple(shape), (dtype or self.dtype).np))

    def new_ones(self, shape, dtype=None) -> "Tensor":
        return Tensor._make(np.ones(tuple(shape), (dtype or self.dtype).np))

    def new_full(self, shape, value, dtype=None) -> "Tensor":
        return Tensor._make(np.full(tuple(shape), value, (dtype or self.dtype).np))

    def new_tensor(self, data, dtype=None) -> "Tensor":
        from .factories import tensor
        return tensor(data, dtype=dtype or self.dtype)

    # --- operators -------------------------------------------------------------------------------
    def __add__(self, o):
        return _bind(O["add"], self, o)

    def __radd__(self, o):
        return _bind(O["add"], o, self)

    def __sub__(self, o):
        return _bind(O["sub"], self, o)

    def __rsub__(self, o):
        return _bind(O["sub"], o, self)

    def __mul__(self, o):
        return _bind(O["mul"], self, o)

    def __rmul__(self, o):
        return _bind(O["mul"], o, self)

    def __truediv__(self, o):
        return _bind(O["div"], self, o)

    def __rtruediv__(self, o):
        return _bind(O["div"], o, self)

    def __floordiv__(self, o):
        return _bind(O["floordiv"], self, o)

    def __rfloordiv__(self, o):
        return _bind(O["floordiv"], o, self)

    def __mod__(self, o):
        return _bind(O["mod"], self, o)

    def __rmod__(self, o):
        return _bind(O["mod"], o, self)

    def __pow__(self, o):
        return _bind(O["pow"], self, o)

    def __rpow__(self, o):
        return _bind(O["pow"], o, self)

    def __matmul__(self, o):
        return _bind(O["matmul"], self, o)

    def __rmatmul__(self, o):
        return _bind(O["matmul"], o, self)

    def __neg__(self):
        return _bind(O["neg"], self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _bind(O["abs"], self)

    def __invert__(self):
        if self._data.dtype.kind != "b":
            raise RuntimeError(f"bitwise_not: only bool tensors are supported, got {self.dtype.name}")
        return _bind(O["logical_not"], self)

    def __and__(self, o):
        return _bind(O["logical_and"], self, o)

    __rand__ = __and__

    def __or__(self, o):
        return _bind(O["logical_or"], self, o)

    __ror__ = __or__

    def __lt__(self, o):
        return _bind(O["lt"], self, o)

    def __le__(self, o):
        return _bind(O["le"], self, o)

    def __gt__(self, o):
        return _bind(O["gt"], self, o)

    def __ge__(self, o):
        return _bind(O["ge"], self, o)

    def __eq__(self, o):
        return _bind(O["eq"], self, o)

    def __ne__(self, o):
        return _bind(O["ne"], self, o)

    # --- in-place ops ----------------------------------------------------------------------------
    def _check_inplace(self):
        if _GM.grad_enabled and self.grad_fn is None and self._requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        b = self._base
        if b is not None and _GM.grad_enabled and b.requires_grad:
            if b.grad_fn is None:
                raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                                   "operation.")
        if self._inference and not _GM.inference:
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not allowed. You can "
                               "make a clone to get a normal tensor before doing inplace update.")
        if not self._data.flags.writeable:
            raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                               "single memory location. Please clone() the tensor before performing the operation.")

    def _apply_inplace(self, fn, *others):
        """Run ``fn(self_value, *others)`` out of place, write the result into self's buffer, bump the version,
        and rebase self's history onto the new node when it is recorded."""
        self._check_inplace()
        recording = _GM.grad_enabled and (self.requires_grad or any(
            isinstance(o, Tensor) and o.requires_grad for o in others))
        if recording:
            if self._base is not None and self._base.requires_grad:
                raise RuntimeError("jitgrad: in-place modification of a view of a tensor that requires grad is not "
                                   "supported; use index assignment on the base tensor (y[idx] = v) or an "
                                   "out-of-place op")
            # the new node may save its input 0: give it a snapshot that the write below cannot touch
            # (traced values are immutable: the snapshot is the value itself)
            tr = _TR.active
            src = Tensor._make(_traced_payload(self, tr) if tr is not None else self._data.copy(),
                               self._requires_grad)
            src.grad_fn, src._out_nr, src._acc = self.grad_fn, self._out_nr, self._accumulator() if self._requires_grad else None
            r = fn(src, *others)
        else:
            with grad_mode.no_grad():
                r = fn(self, *others)
        if r.shape != self.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(r.shape)}")
        if r.dtype is not self.dtype and not np.can_cast(r._data.dtype, self._data.dtype, "same_kind"):
            raise RuntimeError(f"result type {_TORCH_NAME[r.dtype.name]} can't be cast to the desired output type "
                               f"{_TORCH_NAME[self.dtype.name]}")
        tr = _TR.active
        if tr is not None or type(self._data) is not np.ndarray:
            _traced_write(self, r, tr)
        else:
            np.copyto(self._data, r._data, casting="unsafe")
        self._vc[0] += 1
        if recording:
            if r.dtype is not self.dtype:
                r = r.to(self.dtype)
            self.grad_fn = r.grad_fn
            self._out_nr = r._out_nr
            self._requires_grad = False
        return self

    def add_(self, other, *, alpha=1):
        return self._apply_inplace(lambda s, o: s + (o if alpha == 1 else o * alpha), other)

    def sub_(self, other, *, alpha=1):
        return self._apply_inplace(lambda s, o: s - (o if alpha == 1 else o * alpha), other)

    def mul_(self, other):
        return self._apply_inplace(lambda s, o: s * o, other)

    def div_(self, other):
        return self._apply_inplace(lambda s, o: s / o, other)

    def pow_(self, other):
        return self._apply_inplace(lambda s, o: s ** o, other)

    def clamp_(self, min=None, max=None):
        return self._apply_inplace(lambda s: s.clamp(min, max))

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        if isinstance(value, Tensor) and value.ndim != 0:
            raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} "
                               "dimensions.")
        return self._fill(value)

    def _fill(self, value):
        """Write ``value`` (a scalar or a tensor broadcastable to self) into self: fill_ and copy_."""
        if not (_GM.grad_enabled and (self.requires_grad or isinstance(value, Tensor) and value.requires_grad)) \
                and _TR.active is None:
            self._check_inplace()
            self._data[...] = value._data if isinstance(value, Tensor) else value
            self._vc[0] += 1
            return self
        return self._apply_inplace(lambda s, v: _bind(O["index_put"], s, v, spec=(Ellipsis,), accumulate=False), value)

    def copy_(self, src):
        if not isinstance(src, Tensor):
            src = Tensor._make(np.asarray(src))
        try:
            np.broadcast_to(src._data, self.shape)
        except ValueError:
            raise RuntimeError(f"copy_: the source of shape {list(src.shape)} cannot be broadcast to the "
                               f"destination of shape {list(self.shape)}") from None
        return self._fill(src)

    def __iadd__(self, o):
        return self.add_(o)

    def __isub__(self, o):
        return self.sub_(o)

    def __imul__(self, o):
        return self.mul_(o)

    def __itruediv__(self, o):
        return self.div_(o)

    # --- indexing --------------------------------------------------------------------------------
    def __getitem__(self, key):
        spec, idx = _parse_index(key, self)
        return _bind(O["getitem"], self, *idx, spec=spec)

    def __setitem__(self, key, value):
        spec, idx = _parse_index(key, self)
        if _TR.active is not None or _GM.grad_enabled and (
                self.requires_grad or isinstance(value, Tensor) and value.requires_grad):
            self._apply_inplace(lambda s, v: _bind(O["index_put"], s, v, *idx, spec=spec, accumulate=False), value)
            return
        self._check_inplace()
        from ..ir.ops.index import np_index
        v = value._data if isinstance(value, Tensor) else value
        ix = np_index(spec, [i._data for i in idx])
        try:
            self._data[ix] = v
        except (ValueError, IndexError) as e:
            from .dispatch import _with_loc
            if isinstance(e, ValueError) and np.shape(v) != ():
                try:
                    region = list(self._data[ix].shape)
                except IndexError:
                    region = None
                if region is not None:    # torch's words, not NumPy's "could not broadcast input array"
                    e = RuntimeError(f"shape mismatch: value tensor of shape {list(np.shape(v))} cannot be "
                                     f"broadcast to indexing result of shape {region}")
            raise type(e)(_with_loc(f"index_put: {e} (tensor {self.dtype.name}{list(self.shape)})")) from None
        self._vc[0] += 1

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
        r = _bind(O["sum"], self, axes=tuple(axes), keepdims=True) if axes else self
        return r.reshape(shape) if r.shape != shape else r

    def where(self, condition, other) -> "Tensor":
        """``where(condition, self, other)``."""
        return _bind(O["where"], condition, self, other)


def _is_traced(t) -> bool:
    """Whether reading ``t``'s value in Python would bake a trace-time value into a compiled graph: a traced value,
    or (inside a @jitgrad.compile trace) a tensor from outside the function, which is read afresh at each call."""
    if type(t._data) is not np.ndarray:
        return True
    tr = _TR.active
    return tr is not None and tr.on_capture is not None and id(t) not in tr.created


def _traced_read(t, what):
    from ..tracer import TracedValueError
    from .source import user_loc
    loc = user_loc(3)
    where = f"{loc.file}:{loc.line} ({loc.text})" if loc is not None else "an unknown line"
    d = t._data
    kind = (f"a traced tensor ({d.aval})" if type(d) is not np.ndarray else
            f"a tensor from outside the function ({_FROM_NP[d.dtype].short}[{','.join(map(str, d.shape))}]: a "
            "closure or global, read afresh at every call)")
    raise TracedValueError(
        f"{what} reads the value of {kind} inside a @jitgrad.compile function, at {where}. "
        "A compiled function is traced once and replayed, so Python cannot branch on or convert tensor values. "
        "Fix: use tensor ops instead (jitgrad.where(cond, a, b) for an `if`, keep results as tensors and convert "
        "outside the compiled function), or pass fullgraph=False to run this signature eagerly.")


def _traced_mask(t):
    from ..tracer import TracedValueError
    from .source import user_loc
    loc = user_loc(3)
    where = f"{loc.file}:{loc.line} ({loc.text})" if loc is not None else "an unknown line"
    d = t._data
    what = d.aval if type(d) is not np.ndarray else f"{_FROM_NP[d.dtype].short}[{','.join(map(str, d.shape))}] from outside"
    raise TracedValueError(
        f"indexing with a traced boolean mask ({what}) inside a @jitgrad.compile function, at {where}: the "
        "result's shape depends on the data, which a compiled function cannot trace. Fix: use "
        "jitgrad.where(mask, x, 0) or multiply by the mask instead, or pass fullgraph=False to run eagerly.")


def _traced_payload(t, tr):
    """The Var a tensor stands for in the active trace (capturing it as a graph input if needed)."""
    d = t._data
    if type(d) is np.ndarray and tr is not None and tr.on_capture is not None and id(t) not in tr.created:
        tr.on_capture(t)
        d = t._data
    return d


def _traced_write(t, r, tr):
    """In-place write inside a trace: the tensor's payload becomes the new traced value (functionalised;
    the compiled call writes it back into the real buffer afterwards)."""
    if r.dtype is not t.dtype:
        with grad_mode.no_grad():
            r = r.to(t.dtype)
    if tr is not None:
        _traced_payload(t, tr)
        if tr.on_mutate is not None:
            tr.on_mutate(t)
    t._data = r._data


_TORCH_NAME = {"float32": "Float", "float64": "Double", "int64": "Long", "int32": "Int", "bool": "Bool"}


def _parse_index(key, t):
    """Python index -> (hashable spec, list of int64 index tensors).  Bool masks become integer indices."""
    if type(key) is not tuple:
        key = (key,)
    spec = []
    idx = []
    for k in key:
        if isinstance(k, Tensor) or isinstance(k, (list, np.ndarray)):
            a = k._data if isinstance(k, Tensor) else np.asarray(k)
            if a.dtype == np.bool_:
                if isinstance(k, Tensor) and _is_traced(k):
                    _traced_mask(k)
                for comp in np.nonzero(a):
                    spec.append(("tensor", len(idx)))
                    idx.append(Tensor._make(comp.astype(np.int64)))
                continue
            if a.dtype.kind not in "iu":
                raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {a.dtype}")
            spec.append(("tensor", len(idx)))
            idx.append(k if isinstance(k, Tensor) else Tensor._make(a.astype(np.int64)))
        elif isinstance(k, slice):
            if k.step is not None and int(k.step) <= 0:
                raise ValueError("step must be greater than zero")
            spec.append(("slice", _opt_int(k.start), _opt_int(k.stop), _opt_int(k.step)))
        elif k is None or k is Ellipsis or isinstance(k, bool):
            spec.append(k)
        elif isinstance(k, (int, np.integer)):
            spec.append(int(k))
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors are valid "
                             f"indices (got {type(k).__name__})")
    return tuple(spec), idx


def _opt_int(v):
    return None if v is None else int(v.__index__())


from .dispatch import bind as _dispatch_bind  # noqa: E402
