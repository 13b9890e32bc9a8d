"""In-place ops and index assignment for Tensor (InPlaceOps' methods are Tensor's, published by publisher.py): the
version counter, PyTorch's in-place errors,
rebasing a non-leaf's history onto the in-place op's node, and the functionalised form inside a trace."""
from __future__ import annotations

import numpy as np

from ..declarations import published
from ..ir.dtypes import torch_scalar_name
from ..ir.ops import OPS as O, Aval
from ..ir.ops.index import IndexOpError, index_range_error, int_key_error
from ..ir.symbolic import SymInt
from ..tracer import STATE as _TR
from ..tracer.trace import DEPARTED as _DEPARTED
from . import forward_state, grad_mode, saved_mutation
from .grad_names import getitem_name
from .op_errors import op_error, with_user_line
from .view_inplace import INFERENCE_VIEW, INFERENCE_VIEW_MSG, NO_GRAD_VIEW, NO_GRAD_VIEW_MSG, custom_fn_view_msg, \
    view_of_view_msg
from .view_writes import inplace_on_view, traced_write
from .traced import is_traced, traced_mask, traced_payload
from .symbolic_values import bounded_nonzero_here, nonzero as symbolic_nonzero
from .devices import backend_of_payload, copy_payload, to_host
from . import dispatch as _dispatch
from .dispatch import bind as _bind
from .bind_route import ROUTE as _ROUTE
from .anomaly import STATE as _AN
from .tensor import Tensor

_GM = grad_mode.STATE
_FWD = forward_state.STATE
_GETITEM = O["getitem"]
_MUT = saved_mutation.STATE


def _multi_view_msg(origin):
    """torch's refusal to write into output ``origin[1]`` of ``origin[0]``, a function returning several views."""
    return (f"Output {origin[1]} of {origin[0]} is a view and is being modified inplace. This view is the output of a "
            "function that returns multiple views. Such functions do not allow the output views to be modified "
            "inplace. You should replace the inplace operation by an out-of-place one.")


@published("Tensor.methods")
class InPlaceOps:
    """Indexing (``x[idx]``, ``x[idx] = v``) and the in-place ops (``add_ sub_ mul_ div_ pow_ clamp_ zero_ fill_
    copy_``, ``+= -= *= /=``)."""

    __slots__ = ()

    # --- in-place ops ----------------------------------------------------------------------------
    def _check_inplace(self, whole=True):
        if _MUT.active is not None:     # allow_mutation_on_saved_tensors: keep the saved value first
            _MUT.active.before_write(self)
        b = self._base
        origin = self._view_origin if b is not None else None
        if b is not None and self.grad_fn is None and origin is None and b.grad_fn is not None:
            from .dispatch import refresh_view
            refresh_view(self)      # made before its base had a history: it takes the base's first (torch)
        if origin is not None and len(origin) == 3 and _GM.grad_enabled and self.requires_grad:
            raise RuntimeError(view_of_view_msg(self))      # a view of a view made in no_grad / inference mode
        if origin is INFERENCE_VIEW and _GM.grad_enabled and not _GM.inference and b.requires_grad:
            raise RuntimeError(INFERENCE_VIEW_MSG)
        if _GM.grad_enabled and self.grad_fn is None and self._requires_grad and b is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        if b is not None and _GM.grad_enabled and (b.requires_grad or self._requires_grad):
            if self.grad_fn is None and not self._requires_grad:
                raise RuntimeError(INFERENCE_VIEW_MSG if origin is INFERENCE_VIEW else NO_GRAD_VIEW_MSG)
            if b.grad_fn is None and b.requires_grad:
                raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                                   "operation.")
            if self.grad_fn is None and self._requires_grad:
                raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
            if origin is not None and len(origin) == 2:
                raise RuntimeError(_multi_view_msg(origin))
        if self._inference and not _GM.inference:
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not allowed.You can make "
                               "a clone to get a normal tensor before doing inplace update.See "
                               "https://github.com/pytorch/rfcs/pull/17 for more details.")   # torch's text
        if whole and type(self._data) is np.ndarray and not self._data.flags.writeable:
            self._data = writable(self._data)

    def _check_view_inplace(self):
        """The checks of an in-place view op (``transpose_``, ``as_strided_``): ``_check_inplace``'s, and torch's
        refusal of one that would be recorded on a view a custom Function returned."""
        self._check_inplace()
        origin = self._view_origin if self._base is not None else None
        if origin is not None and len(origin) == 4 and _GM.grad_enabled and self.requires_grad:
            raise RuntimeError(custom_fn_view_msg(origin))

    def _check_inplace_view(self):
        """The view checks of an in-place op, for a view a custom Function marked dirty (grad mode is off inside
        forward, so they are made here, as torch does when it rebases the view's history)."""
        b = self._base
        if b is None or not b.requires_grad:
            return
        origin = self._view_origin
        if origin is not None and len(origin) == 2:
            raise RuntimeError(_multi_view_msg(origin))
        if b.grad_fn is None:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")

    def _apply_inplace(self, fn, *others):
        """Run ``fn(self_value, *others)`` out of place, write the result into self's buffer, bump the version,
        and rebase self's history onto the new node when it is recorded."""
        self._check_inplace()
        recording = _GM.grad_enabled and (self.requires_grad or any(
            isinstance(o, Tensor) and o.requires_grad for o in others))
        if recording and self._base is not None:
            origin = self._view_origin
            if origin is not None and len(origin) == 4:     # a view a custom Function made (or an input returned)
                raise RuntimeError(custom_fn_view_msg(origin))
            if origin is NO_GRAD_VIEW:      # made in no_grad mode: the write would be recorded now (torch refuses)
                raise RuntimeError(NO_GRAD_VIEW_MSG)
            if origin is not None and len(origin) == 2:     # an output of a multi-view function (unbind, split)
                raise RuntimeError(_multi_view_msg(origin))
            if _TR.active is None and type(self._data) is np.ndarray and type(self._base._data) is np.ndarray:
                return inplace_on_view(self, fn, others, _snapshot, _check_result)
            if self._base.requires_grad:
                raise RuntimeError("jitgrad: in-place modification of a view of a tensor that requires grad is not "
                                   "supported inside @jg.compile or on a device; use index assignment on the base "
                                   "tensor (y[idx] = v) or an out-of-place op")
        if recording:
            # the new node may save its input 0: give it a snapshot that the write below cannot touch
            # (traced values are immutable: the snapshot is the value itself)
            tr = _TR.active
            src = self._make(traced_payload(self, tr) if tr is not None else copy_payload(self._data),
                               self._requires_grad)
            src.grad_fn, src._out_nr, src._acc = self.grad_fn, self._out_nr, self._accumulator() if self._requires_grad else None
            if _FWD.active is not None:
                _FWD.active.carry(self, src)    # the snapshot carries self's tangents
            r = fn(src, *others)
        else:       # nothing requires grad, or grad mode is off: the op records nothing either way
            r = fn(self, *others)
        rd, sd = r._data, self._data
        if rd.shape != sd.shape or rd.dtype != sd.dtype:
            _check_result(self, r)
        tr = _TR.active
        dev = backend_of_payload(sd) if tr is None else None
        if dev is not None:     # a device tensor: written into its own buffer, so aliases (detach, .data) see it
            if r.dtype is not self.dtype:
                with grad_mode.no_grad():
                    r = r.to(self.dtype)
            dev.write(self._data, r._data)
            dev.after_write(self)       # a view (a copy on the device) passes the write on to its base
        elif tr is not None or type(sd) is not np.ndarray:
            traced_write(self, r, tr)
        else:
            sd[...] = rd        # same shape; assignment casts like copyto(casting="unsafe"), without its wrapper
        self._vc[0] += 1
        if _FWD.active is not None:     # forward AD: self's tangent becomes the result's (runtime/dual.py)
            _FWD.active.after_inplace(self, r)
        if recording:
            if r.dtype is not self.dtype:
                r = r.to(self.dtype)
            if self._retains_grad:
                move_retain_grad(self, r.grad_fn, r._out_nr)
            self.grad_fn = r.grad_fn
            self._out_nr = r._out_nr
            self._requires_grad = False
        return self

    def add_(self, other, *, alpha=1):
        if alpha == 1 and _write_ufunc(self, _np_add, other):
            return self
        return self._apply_inplace(lambda s, o: s + (o if alpha == 1 else o * alpha), other)

    def sub_(self, other, *, alpha=1):
        if alpha == 1 and _write_ufunc(self, _np_subtract, other):
            return self
        return self._apply_inplace(lambda s, o: s - (o if alpha == 1 else o * alpha), other)

    def mul_(self, other):
        if _write_ufunc(self, _np_multiply, other):
            return self
        return self._apply_inplace(lambda s, o: s * o, other)

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
                and _TR.active is None and backend_of_payload(self._data) is None and _FWD.active is None:
            self._check_inplace()
            self._data[...] = value._data if isinstance(value, Tensor) else value
            self._vc[0] += 1
            return self
        return self._apply_inplace(lambda s, v: _bind(O["index_put"], s, v, spec=(Ellipsis,), accumulate=False), value)

    def copy_(self, src):
        if not isinstance(src, Tensor):
            src = self._make(np.asarray(src))
        try:
            np.broadcast_to(np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), src.shape, (0,) * src.ndim),
                            self.shape)     # shapes only: the source may live on a device
        except ValueError:
            raise RuntimeError(f"copy_: the source of shape {list(src.shape)} cannot be broadcast to the "
                               f"destination of shape {list(self.shape)}") from None
        return self._fill(src)

    # (the ufunc write tried here first: one frame fewer for an optimiser's ``p -= lr * g``)
    def __iadd__(self, o):
        return self if _write_ufunc(self, _np_add, o) else self.add_(o)

    def __isub__(self, o):
        return self if _write_ufunc(self, _np_subtract, o) else self.sub_(o)

    def __imul__(self, o):
        return self if _write_ufunc(self, _np_multiply, o) else self.mul_(o)

    def __itruediv__(self, o):
        return self.div_(o)

    # --- indexing --------------------------------------------------------------------------------
    def __getitem__(self, key):
        tk = type(key)
        if tk is slice or tk is int:    # one int or slice (x[2], x[2:5]): the spec without parsing
            if tk is int:
                spec, name = (key,), "SelectBackward0"
            else:
                a, b, st = key.start, key.stop, key.step
                if (a is None or type(a) is int) and (b is None or type(b) is int) \
                        and (st is None or type(st) is int and st > 0):
                    spec = (("slice", a, b, st),)
                    name = "AliasBackward0" if a is None and b is None and st is None else "SliceBackward0"
                else:
                    spec = None         # parse_index converts (or refuses) the bounds
            if spec is not None:
                r = _dispatch._bind(_GETITEM, (self,), {"spec": spec}) if _ROUTE.plain else _bind(_GETITEM, self, spec=spec)
                gf = r.grad_fn
                if gf is not None and r is not self and gf.op is _GETITEM:
                    gf.torch_name = name    # (getitem_name(spec), known here)
                return r
        split = ints_before_tensors(key)
        if split is not None:
            try:
                head = self[split[0]]
            except IndexError as e:
                raise split_int_error(self, key, e) from None
            return head[split[1]]
        spec, idx = parse_index(key, self)
        r = _dispatch._bind(_GETITEM, (self, *idx), {"spec": spec}) if _ROUTE.plain else \
            _bind(_GETITEM, self, *idx, spec=spec)
        gf = r.grad_fn
        if gf is not None and r is not self and gf.op is _GETITEM:
            gf.torch_name = getitem_name(spec)      # torch's node: SelectBackward0, SliceBackward0, ...
        return r

    def __setitem__(self, key, value):
        if _TR.active is not None and isinstance(key, Tensor) and key.dtype.name == "bool" and is_traced(key) \
                and tuple(key.shape) == tuple(self.shape) and (not isinstance(value, Tensor) or value.numel() == 1):
            # ``y[y > 0] = v`` with a traced mask: the masked elements are data-dependent but the result is not,
            # so it is where(mask, v, y) (an index by the mask would need the count: traced_mask's refusal)
            # (the value is cast to the tensor's dtype first, as index_put does)
            v = value.reshape(()).to(self.dtype) if isinstance(value, Tensor) else \
                self._make(np.asarray(value, dtype=self._data.dtype))
            self._apply_inplace(lambda s, v: _bind(O["where"], key, v, s), v)
            return
        split = ints_before_tensors(key)
        if split is not None:
            try:
                head = self[split[0]]
            except IndexError as e:
                raise split_int_error(self, key, e) from None
            head[split[1]] = value      # through the view, as torch writes it (select, then index_put_)
            if any(isinstance(k, (Tensor, np.ndarray)) for k in split[0]):
                self[split[0]] = head       # (selected by a 0-d index tensor, head is a copy: written back)
            return
        spec, idx = parse_index(key, self)
        if self._requires_grad and self.grad_fn is None and _GM.grad_enabled and not idx and any(
                type(k) is int or type(k) is tuple for k in spec):
            # torch writes through a view here (select/slice, then copy_): its message names the view
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        if _TR.active is not None or backend_of_payload(self._data) is not None or _FWD.active is not None or \
                _GM.grad_enabled and (self.requires_grad or isinstance(value, Tensor) and value.requires_grad):
            self._apply_inplace(lambda s, v: _bind(O["index_put"], s, v, *idx, spec=spec, accumulate=False), value)
            return
        self._check_inplace(whole=False)
        from ..ir.ops.index import np_index
        v = value._data if isinstance(value, Tensor) else value
        ix = np_index(spec, [i._data for i in idx])
        target = self._data
        if type(target) is np.ndarray and not target.flags.writeable:
            # a broadcast tensor: torch refuses only a write whose region repeats a location (x.expand(3)[0] = 1
            # is fine); an advanced index writes a copy, so the whole tensor must be writable then
            if idx:
                target = self._data = writable(target)
            else:
                view = (*ix, Ellipsis) if type(ix) is tuple else (ix, Ellipsis)     # an array even for ints
                target, ix = writable(target[view]), Ellipsis
        try:
            target[ix] = v
        except (ValueError, IndexError) as e:
            if isinstance(e, ValueError) and np.shape(v) != ():
                try:
                    region = list(self._data[ix].shape)
                except IndexError:
                    region = None
                if region is not None:    # torch's words, not NumPy's "could not broadcast input array"
                    e = RuntimeError(f"shape mismatch: value tensor of shape {list(np.shape(v))} cannot be "
                                     f"broadcast to indexing result of shape {region}")
            if isinstance(e, IndexError):     # torch's words and order, not NumPy's ("for axis 1")
                e = int_key_error(self.shape, spec) or index_range_error(self.shape, spec, [i._data for i in idx]) or e
            raise type(e)(with_user_line(f"index_put: {e} (tensor {self.dtype.name}{list(self.shape)})")) from None
        self._vc[0] += 1




class _Alias:
    """Holds the array interface of a writable alias and the array that owns the memory."""

    def __init__(self, iface, owner):
        self.__array_interface__ = iface
        self.owner = owner


def writable(a):
    """``a`` itself when writable, else a writable alias of the same memory when no element of ``a`` repeats a
    location and the memory is the user's to write (NumPy marks every broadcast read-only, also the
    one-element region of one: torch writes those); otherwise torch's refusal."""
    if a.flags.writeable:
        return a
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.flags.writeable and (a.size <= 1 or all(n <= 1 or st for n, st in zip(a.shape, a.strides))):
        iface = dict(a.__array_interface__)
        iface["data"] = (iface["data"][0], False)
        return np.asarray(_Alias(iface, root))
    raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                       "single memory location. Please clone() the tensor before performing the operation.")


def move_retain_grad(t, node, nr):
    """``t.retain_grad()`` follows ``t`` to its new history ``(node, nr)`` (torch moves the hook as well)."""
    old = t.grad_fn
    ref = old.retain_grad_refs.pop(t._out_nr, None) if old is not None and old.retain_grad_refs else None
    if ref is None or node is None:
        return
    if node.retain_grad_refs is None:
        node.retain_grad_refs = {}
    node.retain_grad_refs[nr] = ref


def _snapshot(t):
    """A copy of eager tensor ``t`` with its history: what an in-place op's node saves as its input."""
    src = t._make(copy_payload(t._data), t._requires_grad)
    src.grad_fn, src._out_nr, src._acc = t.grad_fn, t._out_nr, t._accumulator() if t._requires_grad else None
    return src


_INT_LIMIT = 1 << 63
# NumPy's floating-point error state: the ufunc writes only under the default one (warnings, no FloatingPointError
# raised after the buffer was written); the state's context variable is NumPy's own (None: never written this way)
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _NP_ERRSTATE
except ImportError:     # (another NumPy layout)
    _NP_ERRSTATE = None
_NP_DEFAULT_ERRSTATE = _NP_ERRSTATE.get() if _NP_ERRSTATE is not None and np.geterr() == {
    "divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"} else None


_ndarray, _np_add, _np_subtract, _np_multiply = np.ndarray, np.add, np.subtract, np.multiply   # (NumPy's module
# has a __getattr__: CPython specialises no attribute read of it)


def _write_ufunc(self, ufunc, o) -> bool:
    """``self op= o`` as one NumPy ufunc writing into self's own buffer (``out=``), when that is all the in-place op
    does: nothing records (grad mode off, or nothing requires grad), no trace, profiler, dual level, anomaly mode
    or mutation-on-saved context, self a floating NumPy array that is not a view, not an inference tensor, and
    ``o`` a Python number or a plain tensor of self's dtype and shape (or 0-d), under NumPy's default error state.
    The ufunc gives the bits that the out-of-place op and the copy back give.  False: nothing was done
    (``_apply_inplace`` does it all)."""
    if _DEPARTED and _TR.active is not None or not _ROUTE.plain or _AN.enabled \
            or _MUT.active is not None or self._base is not None or self._inference:
        return False
    sd = self._data
    if type(sd) is not _ndarray or sd.dtype.kind != "f" or not sd.flags.writeable:
        return False
    to = type(o)
    if to is Tensor:
        od = o._data
        if type(od) is not _ndarray or od.dtype != sd.dtype or od.shape != sd.shape and od.ndim != 0 \
                or o._base is not None:
            return False
        hist = o._requires_grad or o.grad_fn is not None
    elif to is float or to is int and -_INT_LIMIT < o < _INT_LIMIT:     # (a huge int: the op's own error)
        od = o
        hist = False
    else:
        return False
    if (hist or self._requires_grad or self.grad_fn is not None) and _GM.grad_enabled:
        return False    # recorded (or refused: a leaf that requires grad): _apply_inplace
    if _NP_ERRSTATE is None or _NP_ERRSTATE.get() is not _NP_DEFAULT_ERRSTATE:
        return False    # NumPy errors made to raise (np.errstate): the op raises with self unwritten
    ufunc(sd, od, out=sd)
    self._vc[0] += 1
    return True


def _check_result(t, r):
    """The out-of-place result ``r`` of an in-place op on ``t`` must have t's shape and cast to its dtype."""
    rd, sd = r._data, t._data
    if rd.shape != sd.shape:
        raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the broadcast shape {list(r.shape)}")
    if rd.dtype != sd.dtype and not np.can_cast(rd.dtype, sd.dtype, "same_kind"):
        raise RuntimeError(f"result type {torch_scalar_name(r.dtype)} can't be cast to the desired output type "
                           f"{torch_scalar_name(t.dtype)}")


_ADVANCED = (Tensor, list, range, np.ndarray)


def _advanced(k) -> bool:
    return isinstance(k, _ADVANCED)


def _int_key(k) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _int_like(k) -> bool:
    """An integer or a 0-d integer index tensor (or array): torch selects by both, in key order, before it indexes
    by the key's other tensors and bools."""
    if isinstance(k, (Tensor, np.ndarray)):
        return k.ndim == 0 and not str(k.dtype).endswith("bool")
    return _int_key(k)


def ints_before_tensors(key):
    """torch's order for an index mixing integers (or 0-d index tensors) with index tensors or bools (``x[1, :, idx]``,
    ``x[1, :, True]``): the integers select first (a view), then the tensors and bools index what is left.  NumPy
    counts an integer beside an index array (or a bool, an index over a new dim of size 1 or 0) as one more advanced
    index, which moves the result's dims to the front when a slice separates them (shape (2, 3) where torch gives
    (3, 2)).  Returns the two keys to apply in turn, or None when the key needs no split."""
    if type(key) is not tuple:
        return None
    for k in key:       # (_advanced inline: no frame per key element for a key of ints and slices)
        if isinstance(k, _ADVANCED) or type(k) is bool:
            break
    else:
        return None
    ints = [_int_like(k) for k in key]
    if not any(ints) or all(i or not _advanced(k) and type(k) is not bool for k, i in zip(key, ints)):
        return None
    first = []
    for k, i in zip(key, ints):     # a bool mask of n dims stands for n dims of x (x[mask2d, 1]: 1 selects along x's third)
        if i:
            first.append(k)
        elif _advanced(k):
            first += [slice(None)] * (_mask_ndim(k) or 1)
        elif type(k) is not bool:       # (a bool indexes no dim of x: it goes with the tensors)
            first.append(k)
    rest = tuple(k if _advanced(k) or k is Ellipsis or type(k) is bool else slice(None)
                 for k, i in zip(key, ints) if not i)
    return tuple(first), rest


def split_int_error(t, key, e: IndexError) -> IndexError:
    """torch's error for a key that ``ints_before_tensors`` split, whose first part (the integers and 0-d index
    tensors) raised ``e``: the first one out of range in key order, named by its position in ``key``, where a mask
    of n dims is one position and so is a bool (``x[m2d, 7]``: dimension 1), not by its position in the first part
    (a slice per dim of a mask, no bool).  ``e`` itself for any other error (too many indices)."""
    shape = t.shape
    widths = [0 if k is None or type(k) is bool else 1 if _int_like(k) else (_mask_ndim(k) or 1) if _advanced(k)
              else 1 for k in key]
    spread = len(shape) - sum(w for k, w in zip(key, widths) if k is not Ellipsis)      # the dims ... stands for
    dim = 0
    for pos, (k, w) in enumerate(zip(key, widths)):
        if k is Ellipsis:
            dim += spread
            continue
        v = _int_value(k) if dim < len(shape) and _int_like(k) else None
        if v is not None and not -shape[dim] <= v < shape[dim]:
            return op_error(_GETITEM, [Aval(tuple(shape), t.dtype)], IndexOpError(
                f"index {v} is out of bounds for dimension {pos} with size {shape[dim]}"))
        dim += w
    return e


def _int_value(k):
    """The value of an integer-like key element, None for a traced tensor (no value until the step runs)."""
    if isinstance(k, Tensor):
        return None if is_traced(k) else int(to_host(k._data))
    return int(k)


def _mask_ndim(k) -> int:
    """The dims of x that key element ``k`` (an index list, array or tensor) consumes when it is a bool mask of two or
    more dims, else 0."""
    if isinstance(k, (list, range)):
        return 0
    return k.ndim if k.ndim > 1 and str(k.dtype).endswith("bool") else 0


def parse_index(key, t):
    """Python index -> (hashable spec, list of int64 index tensors).  Bool masks become integer indices."""
    if type(key) is not tuple:
        key = (key,)
    spec = []
    idx = []
    for k in key:
        if isinstance(k, Tensor) or isinstance(k, (list, range, np.ndarray)):   # range: an index list
            a = k._data if isinstance(k, Tensor) else np.arange(k.start, k.stop, k.step, dtype=np.int64) \
                if isinstance(k, range) else np.asarray(k)
            if a.dtype == np.bool_:
                if isinstance(k, Tensor) and is_traced(k):
                    if not bounded_nonzero_here():
                        traced_mask(k)
                    # a mask in a compiled function: its nonzero coordinates, of data-dependent length
                    nz = symbolic_nonzero(k)
                    for c in range(k.ndim):
                        spec.append(("tensor", len(idx)))
                        idx.append(nz[:, c])
                    continue
                for comp in np.nonzero(a):
                    spec.append(("tensor", len(idx)))
                    idx.append(type(t)._make(comp.astype(np.int64)))
                continue
            if a.dtype.kind not in "iu":
                raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {a.dtype}")
            spec.append(("tensor", len(idx)))
            idx.append(k if isinstance(k, Tensor) else type(t)._make(a.astype(np.int64)))
        elif isinstance(k, slice):
            a, b, st = k.start, k.stop, k.step
            if st is not None and int(st) <= 0:
                raise ValueError("step must be greater than zero")
            # (plain ints and None as they are: _opt_int's frame only for other index types)
            spec.append(("slice", a if a is None or type(a) is int else _opt_int(a),
                         b if b is None or type(b) is int else _opt_int(b),
                         st if st is None or type(st) is int else _opt_int(st)))
        elif k is None or k is Ellipsis or isinstance(k, bool):
            spec.append(k)
        elif isinstance(k, (int, np.integer)):
            spec.append(int(k))
        elif type(k) is SymInt:         # a size of a trace (ir/symbolic.py): stays symbolic
            spec.append(k)
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or bool tensors are valid "
                             f"indices (got {type(k).__name__})")
    return tuple(spec), idx


def _opt_int(v):
    return None if v is None else v if type(v) is SymInt else int(v.__index__())
