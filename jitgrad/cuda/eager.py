"""Eager CUDA ops: each primitive on CUDA tensors runs as a one-op graph through the CUDA code generator.

The graph of one op is cached by the op, its parameters and its inputs' shapes, dtypes (and scalar literals), so
a training loop compiles each kernel once; kernels themselves are shared by structure (``codegen/gpu/cuda.py``).
Autograd records the op exactly as eager CPU mode does (``runtime/dispatch._record``): the vjp rules then run on
CUDA tensors and come back here, so gradients live on the device.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Eqn, Graph, Lit, Var
from ..ir.ops import Aval, OpError
from ..ir.passes import fusion_plan
from ..runtime import anomaly, grad_mode
from ..runtime.dispatch import _WEAK, _record, record_entry
from ..runtime.op_errors import forward_nan, op_error
from ..runtime.tensor import Tensor

_FROM_NP = dt._FROM_NP
_GM = grad_mode.STATE
_AN = anomaly.STATE
_GRAPHS: dict = {}       # (op, params, input signature) -> CudaGraph
# Views on CUDA are copies (a kernel's output is a fresh buffer).  So that an in-place write through a view still
# reaches its base, as in torch, each view remembers how it was made: id(view) -> (weakref, base, op, params)
_VIEWS: dict = {}
_CHILDREN: dict = {}     # id(base) -> {id(view)}: the live views made from it, refreshed when it is written


def _signature(op, args, params):
    sig = [op.name]
    for a in args:
        if isinstance(a, Tensor):
            sig.append((tuple(a._data.shape), a._data.dtype.str))
        else:
            sig.append(("lit", type(a), a))
    try:
        return tuple(sig) + (tuple(sorted(params.items(), key=lambda kv: kv[0])),), True
    except TypeError:
        return None, False


def _one_op_graph(op, args, params, avals, out_avals) -> Graph:
    ins, graph_in = [], []
    for a, av in zip(args, avals):
        if isinstance(a, Tensor):
            v = Var(av)
            ins.append(v)
            graph_in.append(v)
        else:
            ins.append(Lit(a, av))
    outs = [Var(av) for av in out_avals]
    return Graph(graph_in, [Eqn(op, ins, outs, dict(params))], outs)


def compiled_op(op, args, params, avals, out_avals):
    """The CudaGraph running ``op`` on inputs like ``args`` (cached by signature)."""
    from ..codegen.gpu.cuda import CudaGraph
    key, ok = _signature(op, args, params)
    cg = _GRAPHS.get(key) if ok else None
    if cg is None:
        # planned as compiled graphs are for CUDA (jit/graph_code.cuda_graph): no row-wise chains
        cg = CudaGraph(fusion_plan(_one_op_graph(op, args, params, avals, out_avals), rowwise=False, indexed=False,
                                   batched=False))
        if ok:
            if len(_GRAPHS) > 4096:
                _GRAPHS.clear()
            _GRAPHS[key] = cg
    return cg


def bind_cuda(op, args, params):
    """Run primitive ``op`` on CUDA tensors (and Python scalars) ``args``; autograd as in eager CPU mode."""
    if any(type(a) is np.ndarray for a in args):     # NumPy arrays act as constant tensors (as in eager CPU mode)
        from ..runtime.devices import backend
        b = backend("cuda")
        args = tuple(Tensor._make(b.to_device(a)) if type(a) is np.ndarray else a for a in args)
    avals, arrays, need = [], [], False
    for a in args:
        if isinstance(a, Tensor):
            d = a._data
            avals.append(Aval(tuple(d.shape), _FROM_NP[np.dtype(d.dtype)]))
            arrays.append(d)
            if a._requires_grad or a.grad_fn is not None:
                need = True
        else:
            if isinstance(a, np.generic):
                a = a.item()
            w = _WEAK.get(type(a))
            if w is None:
                raise TypeError(f"{op.name}: unsupported argument of type {type(a).__name__}: {a!r}")
            avals.append(w)
    args = tuple(a.item() if isinstance(a, np.generic) else a for a in args)
    try:
        out_avals = op.shape_dtype(avals, params)
    except OpError as e:
        raise op_error(op, avals, e) from None
    cg = compiled_op(op, args, params, avals, out_avals)
    out = cg.run(*arrays)[0]
    t = Tensor._make(out)
    if op.view and not (op.name == "getitem" and any(type(s) is tuple and s[0] == "tensor" for s in params["spec"])):
        _VIEWS[id(t)] = (weakref.ref(t, lambda _, k=id(t): _forget(k)), args[0], op, params)
        _CHILDREN.setdefault(id(args[0]), set()).add(id(t))
    t._inference = _GM.inference
    if need and _GM.grad_enabled and not _GM.inference and op.vjp is not None and out_avals[0].dtype.is_floating_point:
        _record(op, params, args, record_entry(out_avals, avals, out.shape), t)
    if _AN.enabled and _AN.check_forward and out_avals[0].dtype.is_floating_point \
            and not np.isfinite(out.copy_to_host()).all():
        forward_nan(op, avals, t)
    return t


def _forget(k):
    rec = _VIEWS.pop(k, None)
    if rec is not None:
        kids = _CHILDREN.get(id(rec[1]))
        if kids is not None:
            kids.discard(k)
            if not kids:
                _CHILDREN.pop(id(rec[1]), None)


def after_write(t):
    """``t`` was written in place: its base (if it is a view) and the views made from it get the new values."""
    write_through(t)
    refresh_views(t)


def refresh_views(t, skip=None):
    """Recompute the live views of ``t`` from its current value (and their views in turn)."""
    for k in list(_CHILDREN.get(id(t), ())):
        rec = _VIEWS.get(k)
        v = rec[0]() if rec is not None else None
        if v is None or v is skip or rec[1] is not t:
            continue
        with grad_mode.no_grad():
            from ..runtime.dispatch import bind
            new = bind(rec[2], t, **rec[3])
        v._data.copy_to_device(new._data)
        v._vc[0] += 1
        refresh_views(v)


def write_through(t):
    """After an in-place write into CUDA view ``t``: write its new value into the base it was made from (and
    on up a chain of views), so the base sees it as with a torch view."""
    rec = _VIEWS.get(id(t))
    if rec is None or rec[0]() is not t:
        return
    _, base, op, params = rec
    from ..runtime.view_writes import view_write_into_base
    if _GM.grad_enabled and base.requires_grad:
        raise RuntimeError("jitgrad: in-place modification of a view of a CUDA tensor that requires grad is not "
                           "supported; use index assignment on the base tensor (y[idx] = v) or an out-of-place op")
    new = view_write_into_base(base, t, op, params)
    base._data.copy_to_device(new._data)
    base._vc[0] += 1
    refresh_views(base, skip=t)     # the view's siblings
    write_through(base)


__all__ = ["bind_cuda", "compiled_op", "after_write", "write_through", "refresh_views"]
