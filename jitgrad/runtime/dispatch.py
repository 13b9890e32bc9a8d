"""bind: the one dispatch every op goes through.

Concrete inputs run now (the OpDef's NumPy impl).  When grad mode is on and an input requires grad the
output gets a ``grad_fn`` Node holding the op, the values its vjp reads, and the user's SourceLoc.  The
tracer (``@jg.compile``) hooks in here too: a symbolic input routes the op to the active trace.
"""
from __future__ import annotations

import sys
from weakref import ref as _weakref

import numpy as np

from ..ir import dtypes as dt
from ..ir.ops import OPS as _OPS, Aval, OpError
from . import anomaly, forward_state, grad_mode, profiler_state
from .bind_route import ROUTE as _ROUTE
from .entry_source import record_label, record_source
from .generated_code import make
from .node import Node, _seq as _node_seq
from .op_errors import forward_nan, op_error, with_user_line
from .rule_entries import WEAK as _WEAK, avals_of as _avals, record_entry, rule_entry as _rule_entry, saved_inputs
from .source import _INTERNAL, _internal, user_loc, user_stack
from ..ir.graph import Lit, Var
from ..ir.symbolic import SymFloat, SymInt
from ..tracer import STATE as _TR
from ..tracer.trace import DEPARTED as _DEPARTED, wait_for_other_traces

_FROM_NP = dt._FROM_NP
# a trace also takes sizes as numbers (ir/symbolic.py): symbolic literals, replaced per call's sizes
_TRACED_WEAK = {**_WEAK, SymInt: _WEAK[int], SymFloat: _WEAK[float]}
_GM = grad_mode.STATE
_AN = anomaly.STATE
_PROF = profiler_state.STATE
_FWD = forward_state.STATE


class OpNode(Node):
    """The node of a bound op, and its vjp's ``ctx``: ``ctx.bind("mul", a, b)`` runs an op of the rule (node.py
    has the rest of the ctx surface: inputs, outputs, shapes, dtypes, params, needs_grad)."""

    __slots__ = ()

    def bind(self, opname, *args, **params):
        if _ROUTE.plain:
            return _bind(_OPS[opname], args, params)
        if _FWD.active is not None:     # a dual level is open: backward rules carry tangents (forward over reverse)
            return bind(_OPS[opname], *args, **params)
        if _PROF.active is not None:
            return _PROF.active.record_op(_OPS[opname], args, params, _bind)
        return _bind(_OPS[opname], args, params)


def bind(op, *args, **params):
    """Apply primitive ``op`` to tensors / Python scalars ``args``; returns a Tensor (or tuple if nout > 1)."""
    if _ROUTE.plain:
        return _bind(op, args, params)
    if _FWD.active is not None:     # a dual level is open: tangents go along (runtime/dual.py)
        return _FWD.active.bind(op, args, params)
    if _PROF.active is not None:
        return _PROF.active.record_op(op, args, params, _bind)
    return _bind(op, args, params)


# (op, input signature, params) -> (output avals, input avals): the rules are pure, so eager dispatch
# evaluates each rule once per signature
_RULES: dict = {}


def _bind(op, args, params):
    if _DEPARTED:       # some thread traces or runs in inference mode: read this thread's states (tracer/trace.py)
        tr = _TR.active
        if tr is not None:
            return _bind_traced(tr, op, args, params)
        inference = _GM.inference_on
    else:
        inference = False
    # the common signatures (one or two tensors, or a tensor and a Python scalar) build their cache key directly;
    # the key is the same tuple the general loop below builds
    n = len(args)
    a0 = args[0] if n else None
    t0 = type(a0)       # (Tensor or a subclass dispatched as one, nn.Parameter; device payloads: the general path)
    if (t0 is Tensor or t0 in _AS_TENSOR) and n <= 2 and type(a0._data) is _ndarray:
        d0 = a0._data
        # (a view made before its base had a history: refresh_view gives it the base's)
        need = a0._requires_grad or a0.grad_fn is not None or a0._base is not None and a0._base.grad_fn is not None
        if n == 1:
            arrays = (d0,)
            key = (op, d0.shape, d0.dtype)
        else:
            a1 = args[1]
            t1 = type(a1)
            if t1 is Tensor and type(a1._data) is _ndarray:
                d1 = a1._data
                arrays = (d0, d1)
                key = (op, d0.shape, d0.dtype, d1.shape, d1.dtype)
                if a1._requires_grad or a1.grad_fn is not None or a1._base is not None and a1._base.grad_fn is not None:
                    need = True
            elif t1 is float or t1 is int or t1 is bool:
                arrays = (d0, a1)
                key = (op, d0.shape, d0.dtype, t1)
            elif t1 in _AS_TENSOR and type(a1._data) is _ndarray:     # (as the first branch)
                d1 = a1._data
                arrays = (d0, d1)
                key = (op, d0.shape, d0.dtype, d1.shape, d1.dtype)
                if a1._requires_grad or a1.grad_fn is not None or a1._base is not None and a1._base.grad_fn is not None:
                    need = True
            else:
                arrays = None
        if params and arrays is not None:
            key += (tuple(params.items()),)
    elif n == 2 and type(args[1]) is Tensor and (type(a0) is float or type(a0) is int) \
            and type(args[1]._data) is _ndarray:     # 0.1 * t
        a1 = args[1]
        d1 = a1._data
        arrays = (a0, d1)
        key = (op, type(a0), d1.shape, d1.dtype)
        if params:
            key += (tuple(params.items()),)
        # (a view made before its base had a history, as above)
        need = a1._requires_grad or a1.grad_fn is not None or a1._base is not None and a1._base.grad_fn is not None
    else:
        arrays = None
    if arrays is None:
        r = _general_key(op, args, params)
        if type(r) is Tensor:
            return r
        arrays, key, need = r
    try:
        hit = _RULES.get(key)
    except TypeError:       # unhashable params: evaluate the rule uncached
        hit = None
        key = None
    if hit is None:
        hit = _rule_entry(op, args, params)
        if key is not None:
            if len(_RULES) > 50000:
                _RULES.clear()
            _RULES[key] = hit
    try:
        out = hit[6](*arrays, **params) if params else hit[6](*arrays)     # (no kwargs dict made per call)
    except (ValueError, TypeError, IndexError, FloatingPointError, OverflowError) as e:
        raise op_error(op, hit[1], e) from None
    if hit[10]:
        pass        # a ufunc whose loop gives an array of the output dtype (rule_entries.exact_ufunc)
    elif type(out) is not _ndarray:
        out = np.asarray(out, dtype=hit[2])
    else:
        od = out.dtype
        want = hit[2]
        if od is not want and od != want:     # (NumPy's built-in dtypes are singletons: identity is the fast test)
            out = out.astype(want)
    t = _new(Tensor)
    t._data = out
    t._requires_grad = False
    t.grad_fn = None
    t._grad = None
    t._hooks = None
    t._retains_grad = False
    t._acc = None
    t._out_nr = 0
    t._inference = inference
    t._view_origin = None
    # an empty result shares no memory, but a view op's is still a view (torch refuses in-place writes into an empty
    # view of a leaf that requires grad, and as_strided of it reads its base's storage)
    if op.view and (_may_share_memory(out, args[0]._data) or out.size == 0 and is_traced_view(op, params)):
        base = args[0]
        t._vc = base._vc
        t._base = base if base._base is None else base._base
        if base._inference:
            t._inference = True         # a view of an inference tensor is one (in any mode)
            if not inference:
                t._base = None          # ... and, made outside inference mode, not tracked as a view (torch)
        elif inference:
            t._inference = False        # a view of a normal tensor stays normal, marked as made in inference mode
            t._view_origin = INFERENCE_VIEW
            # ... and, as torch, it requires grad when its base does (a leaf: no history is recorded)
            t._requires_grad = base.requires_grad
            if t._requires_grad:
                t.__class__ = NoGradView        # its grad_fn checks the base's version (view_inplace.py)
                t._view_version = t._vc[0]
        elif not _GM.grad_enabled:
            t._view_origin = NO_GRAD_VIEW
            if t._base._requires_grad or t._base.grad_fn is not None:
                t.__class__ = NoGradView
                t._view_version = t._vc[0]
        else:
            bo = base._view_origin
            if bo is not None:
                o = inherited_origin(bo)
                if o is not None:
                    t._view_origin = o
                    if type(base) is NoGradView:
                        t.__class__ = NoGradView
                        t._view_version = t._vc[0]
    else:
        t._vc = [0]
        t._base = None
    # inference mode wins over enable_grad; integer and bool results are never differentiable (torch)
    if need and hit[3] and _GM.grad_enabled and not inference and not (t._inference and op.view):
        _record(op, params, args, hit, t)       # (a view of an inference tensor has no history: torch)
    if _AN.enabled and _AN.check_forward and out.dtype.kind == "f" and not np.isfinite(out).all():
        forward_nan(op, hit[1], t)
    return t


def _general_key(op, args, params):
    """The cache key of any other signature: (arrays, key, need), or the result of re-dispatching NumPy
    scalars and arrays as Python scalars and tensors."""
    arrays = []
    sig = [op]
    need = False
    for a in args:
        if type(a) is Tensor or isinstance(a, Tensor):
            d = a._data
            if type(d) is Var and _TR.active is None:
                # another thread's @jitgrad.compile trace has swapped this tensor's payload (a parameter it
                # captured): wait until that trace ends and restores it
                wait_for_other_traces()
                if type(a._data) is not Var:
                    return _bind(op, args, params)
            if type(d) is not np.ndarray and backend_of_payload(d) is not None:
                # a device tensor: its backend runs the op (runtime/devices.py)
                return _device_bind(op, args, params)
            arrays.append(d)
            sig.append(d.shape)
            sig.append(d.dtype)
            if a._requires_grad or a.grad_fn is not None or a._base is not None and a._base.grad_fn is not None:
                need = True
        else:
            ta = type(a)
            if ta not in _WEAK:
                if isinstance(a, np.generic):   # NumPy scalars act as Python scalars
                    return _bind(op, tuple(x.item() if isinstance(x, np.generic) else x for x in args), params)
                if ta is np.ndarray and a.dtype in _FROM_NP:   # NumPy arrays act as tensors, as in torch
                    return _bind(op, tuple(Tensor._make(x) if type(x) is np.ndarray else x for x in args), params)
                else:
                    raise TypeError(with_user_line(f"{op.name}: unsupported argument of type {ta.__name__}: {a!r}"))
            arrays.append(a)
            sig.append(ta)
    if params:
        sig.append(tuple(params.items()))
    return arrays, tuple(sig), need


_new = object.__new__
_ndarray = np.ndarray       # (NumPy's module has a __getattr__: CPython specialises no attribute read of it)
_next = next
_getframe = sys._getframe
_internal_get = _INTERNAL.get
# the C function under NumPy's __array_function__ dispatcher (its Python layer costs more than the check)
_may_share_memory = getattr(np.may_share_memory, "_implementation", np.may_share_memory)


# ``Node.view_args`` of a view whose op cannot be bound again on its base (as_strided): refreshed by positions


def refresh_view(a, force=False):
    """Give view ``a`` a current grad_fn when its base was modified in place (recorded) after ``a`` was made.

    The view shares the base's memory, so its value is now that of the modified base: as torch does, later uses
    of ``a`` must differentiate through the base's new history (uses made before keep the old node).
    """
    node = a.grad_fn
    if node is None:
        b = a._base
        if b is not None and b.grad_fn is not None:
            adopt_base_history(a)       # made before its base had a history, or in no_grad / inference mode
        return
    vargs = getattr(node, "view_args", None)
    if vargs is None or a._base.grad_fn is node.view_base_fn and not force:
        return
    prev = _GM.grad_enabled
    _GM.grad_enabled = True
    try:
        parent = vargs[0]() if vargs is not BY_POSITIONS else None
        if parent is None:
            # made by no view op (as_strided), or its parent view is gone: the base's elements it shows
            vargs = BY_POSITIONS
            r = read_by_positions(a)
        else:
            r = _bind(node.op, (parent, *vargs[1:]), node.params)    # refreshes a view parent first (a view of a view)
    finally:
        _GM.grad_enabled = prev
    new = r.grad_fn
    if new is not None:
        new.torch_name = "AsStridedBackward0"   # torch regenerates such a view with as_strided
        if vargs is BY_POSITIONS:       # (a gather, not a view op): the next write into the base refreshes it again
            new.view_args, new.view_base_fn = BY_POSITIONS, a._base.grad_fn
        # retain_grad follows ``a`` to its new node; hooks registered before stay on the old one (as in torch)
        if node.retain_grad_refs and a._out_nr in node.retain_grad_refs:
            if new.retain_grad_refs is None:
                new.retain_grad_refs = {}
            new.retain_grad_refs[0] = node.retain_grad_refs.pop(a._out_nr)
    a.grad_fn = new
    a._out_nr = 0


# _record(op, params, args, hit, t): give ``t`` a grad_fn Node (``hit``: the signature's entry from ``_rule_entry``),
# the hot path of every recorded op: its text is rendered by entry_source.py from the template the flat entries
# (flat_bind.py) are rendered from, so both paths build a node from one text
_record = make(record_source(), "_record", globals(), record_label())


def _edges(op, args):
    """(next_functions, needs_grad) of a node of ``op`` over ``args``, any signature; (None, None) when there is
    nothing to record."""
    nf = []
    needs = []
    nondiff = op.nondiff_inputs
    normal = False      # torch: inference tensors skip autograd, so an op on inference tensors only records
    i = -1              # nothing (with a normal one it does)
    for a in args:
        i += 1
        if type(a) is Tensor or isinstance(a, Tensor):
            if not a._inference:
                normal = True
            if not nondiff or i not in nondiff:
                if a._base is not None:
                    refresh_view(a)     # (an inference tensor has no history: nothing to refresh)
                gf = a.grad_fn
                if gf is not None:
                    nf.append((gf, a._out_nr))
                    needs.append(True)
                    continue
                if a._requires_grad:    # an inference leaf that requires grad gets its gradient too (torch), as
                    # long as the op does not save it (that raises in _record)
                    acc = a._acc
                    nf.append((acc if acc is not None else a._accumulator(), 0))
                    needs.append(True)
                    continue
                if type(a) is NoGradView:   # requires grad through its base, reaches nothing (torch: no edge)
                    nf.append(_NO_EDGE)
                    needs.append(True)
                    continue
        nf.append(_NO_EDGE)
        needs.append(False)
    if not normal or True not in needs:
        return None, None
    return tuple(nf), tuple(needs)


_NO_EDGE = (None, 0)
_NO_OUTPUT = (None,)
_NEEDS_ONE = (True,)


def _bind_by_name(name, *args, **params):
    """What a decomposition binds its primitives with (``OpDef.decompose``)."""
    return bind(_OPS[name], *args, **params)


def _bind_traced(tr, op, args, params):
    """The traced path: append an Eqn to the active trace; autograd recording is the same as eager.  A fused op
    with a decomposition (``OpDef.decompose``) is traced as that composition, so graphs hold only the primitives
    codegen knows."""
    if op.decompose is not None and not tr.fused:
        r = op.decompose(_bind_by_name, *args, **params)
        if op.view and isinstance(args[0], Tensor):
            note_view(tr, r, args[0], op, params)     # a write into it reaches args[0] (or is refused)
            note_layout(tr, op, params, args, r._data, True)    # the view's strides, not its composition's
        elif op.trace_vjp and r.grad_fn is not None:
            # the op's own rule, as eager records it (OpDef.trace_vjp); the composition's eqns keep theirs for
            # the transpose pass
            avals = [a._data.aval if type(a._data) is Var else Aval(a._data.shape, _FROM_NP[a._data.dtype])
                     for a in args]
            _record(op, params, args, record_entry([r._data.aval], avals, r._data.shape), r)
        return r
    ins = []
    need = False
    for a in args:
        if isinstance(a, Tensor):
            d = a._data
            if type(d) is not Var:
                if id(a) in tr.created or tr.on_capture is None:
                    # made inside the function (or plain tracing): a constant of the graph.  A device tensor made
                    # here is one too, its value kept on the host as every Lit is (the device code uploads it);
                    # capturing it as an input would leave the entry a weak reference to a tensor that dies
                    # with the trace
                    if type(d) is not np.ndarray:
                        d = to_host(d)
                    ins.append(Lit(d, Aval(tuple(d.shape), _FROM_NP[d.dtype])))
                else:
                    ins.append(tr.on_capture(a))
            elif tr.on_var is not None:    # a nested trace (jitgrad.func.vmap): a Var of an outer trace is an input
                ins.append(tr.on_var(a))
            else:
                ins.append(d)
            if a._requires_grad or a.grad_fn is not None:
                need = True
        elif isinstance(a, np.generic):
            ins.append(Lit(a.item(), _WEAK[type(a.item())]))
        elif type(a) is np.ndarray and a.dtype in _FROM_NP:
            return _bind_traced(tr, op, tuple(Tensor._make(x) if type(x) is np.ndarray else x for x in args), params)
        else:
            w = _TRACED_WEAK.get(type(a))
            if w is None:
                raise TypeError(with_user_line(f"{op.name}: unsupported argument of type {type(a).__name__}: {a!r}"))
            ins.append(Lit(a, w))
    scalar_out = False
    if tr.python_floats is not None:
        scalar_out = python_float_inputs(tr, op, ins)
    avals = [v.aval for v in ins]
    try:
        out_avals = op.shape_dtype(avals, params)
    except OpError as e:
        raise op_error(op, avals, e) from None
    diff = need and _GM.grad_enabled and op.vjp is not None
    needs = tuple(isinstance(a, Tensor) and a.requires_grad and i not in op.nondiff_inputs
                  for i, a in enumerate(args)) if diff else (False,) * len(args)
    outs = tr.add_eqn(op, ins, params, out_avals, user_loc(2), diff, needs)
    if tr.grad_off is not None and not _GM.grad_enabled and outs:
        tr.grad_off.add(outs[0])
    if scalar_out and out_avals[0].dtype.is_floating_point:     # (a comparison of such floats is a bool, not one)
        tr.python_floats.add(outs[0])
    t = Tensor.__new__(Tensor)
    t._data = outs[0]
    t._requires_grad = False
    t.grad_fn = None
    t._grad = None
    t._hooks = None
    t._retains_grad = False
    t._acc = None
    t._out_nr = 0
    t._inference = False
    t._view_origin = None
    t._vc = [0]
    t._base = None
    recorded = op.view and isinstance(args[0], Tensor) and is_traced_view(op, params, tr, args[0])
    if recorded:
        note_view(tr, t, args[0], op, params)
    note_layout(tr, op, params, args, outs[0], recorded)
    if tr.made is not None:
        tr.made.append(t)
    if diff:
        _record(op, params, args, record_entry(out_avals, avals, t._data.shape), t)
    return t


def _device_bind(op, args, params):
    """An op with a device tensor among its inputs: every tensor must be on that device (torch's rule, with
    its error), then the device's backend runs it (``jitgrad.cuda`` registers one).  A fused op with a
    decomposition runs as that composition (the device's kernels), not as one host step."""
    if op.decompose is not None:
        return op.decompose(_bind_by_name, *args, **params)
    dev, ref = next((backend_of_payload(a._data), a) for a in args
                    if isinstance(a, Tensor) and backend_of_payload(a._data) is not None)
    for k, a in enumerate(args):
        if isinstance(a, Tensor) and a.device != ref.device:
            if a.ndim == 0 and a.device.type == "cpu":      # a CPU scalar tensor goes along, as in torch
                args = args[:k] + (a.to(ref.device),) + args[k + 1:]
                continue
            raise RuntimeError(with_user_line(
                f"Expected all tensors to be on the same device, but found at least two devices, {ref.device} and "
                f"{a.device}! (when checking argument for argument {k} in method {op.name})"))
    return dev.bind(op, args, params)


from .tensor import AS_TENSOR as _AS_TENSOR, Tensor  # noqa: E402  (Tensor's methods call bind; bind builds Tensors)
from .devices import backend_of_payload, to_host  # noqa: E402
from .saved_hooks import STATE as _SH, pack_node  # noqa: E402
from .view_inplace import BY_POSITIONS, INFERENCE_VIEW, NO_GRAD_VIEW, NoGradView, adopt_base_history, \
    inherited_origin, read_by_positions  # noqa: E402
from .traced import is_traced_view, note_layout, note_view, python_float_inputs  # noqa: E402
