"""Flat per-op entry points: the eager fast path of ops over one or two arguments (Tensor's operators, ``jg.relu``,
``x.tanh()``, ``x.sum()``, cross_entropy's log_softmax and nll_loss), one made per OpDef from its table row.

``flat_entry(op, arity)`` returns a function of the op's one or two arguments (and its params) that does in one
frame what ``dispatch._bind`` then ``dispatch._record`` do for the common call: every tensor a plain CPU tensor
(``Tensor`` or a subclass dispatched as one) that is no view and no inference tensor, the other argument at most a Python scalar, no
thread tracing or in inference mode, anomaly mode off and ``dispatch._bind`` not wrapped (tools that spy on it still
see every op).  It finds the signature's entry in dispatch's cache under dispatch's own key, calls the entry's impl
and builds the output and its node as ``_bind`` / ``_record`` would, every slot the same; the op's table row
(``nondiff_inputs``, ``saves_in``, ``saves_out``) is read once, when the entry point is made, not per call.  Any
other call (and a signature's first) goes through ``dispatch._bind``, so semantics are the general path's.  Callers
check ``bind_route.ROUTE.plain`` first (no profiler recording, no dual level open).

View ops are never served here (their outputs share memory and history with their base): ``flat_entry`` returns
None for them.
"""
from __future__ import annotations

import sys

import numpy as np

from . import anomaly, dispatch as _d, grad_mode
from .dispatch import _RULES, OpNode
from .node import _seq as _node_seq
from .op_errors import op_error
from .rule_entries import saved_inputs
from .saved_hooks import STATE as _SH, pack_node
from .source import _INTERNAL, _internal
from .tensor import AS_TENSOR as _AS_TENSOR, Tensor
from ..tracer.trace import DEPARTED as _DEPARTED

_GM = grad_mode.STATE
_AN = anomaly.STATE
_BIND = _d._bind        # the general path as defined: a spy set on dispatch._bind takes every call through it
_new = object.__new__
_ndarray = np.ndarray
_next = next
_getframe = sys._getframe
_internal_get = _INTERNAL.get
_NO_EDGE = (None, 0)
_NO_OUTPUT = (None,)
_ERRORS = (ValueError, TypeError, IndexError, FloatingPointError, OverflowError)   # (dispatch._bind's: op_error)
_ENTRIES: dict = {}     # (op, arity) -> its entry point


def flat_entry(op, arity: int):
    """The flat entry point of primitive ``op`` over ``arity`` (1 or 2) arguments, ``f(*args, params=None)``
    (``params``: the op's params as ``bind`` takes them, a dict the node keeps), or None for a view op (see the
    module's docstring)."""
    key = (op, arity)
    f = _ENTRIES.get(key)
    if f is None and not op.view:
        f = _ENTRIES[key] = (_unary if arity == 1 else _binary)(op)
    return f


def _unary(op):
    diff0 = not (op.nondiff_inputs and 0 in op.nondiff_inputs)
    saves_in = bool(op.saves_in)
    saves_out = bool(op.saves_out)

    def flat(a, params=None):
        ta = type(a)
        if _DEPARTED or _AN.enabled or _d._bind is not _BIND or not (ta is Tensor or ta in _AS_TENSOR):
            return _d._bind(op, (a,), params or {})
        da = a._data
        if type(da) is not _ndarray or a._base is not None or a._inference:
            return _d._bind(op, (a,), params or {})
        if params:
            try:
                hit = _RULES.get((op, da.shape, da.dtype, tuple(params.items())))
            except TypeError:   # (unhashable params: dispatch evaluates the rule uncached)
                hit = None
        else:
            hit = _RULES.get((op, da.shape, da.dtype))
        if hit is None:
            return _d._bind(op, (a,), params or {})
        try:
            out = hit[6](da, **params) if params else hit[6](da)
        except _ERRORS as e:
            raise op_error(op, hit[1], e) from None
        if not hit[10]:
            if type(out) is not _ndarray:
                out = np.asarray(out, dtype=hit[2])
            elif out.dtype is not hit[2] and out.dtype != hit[2]:
                out = out.astype(hit[2])
        t = _new(Tensor)
        t._data = out
        t._requires_grad = t._retains_grad = t._inference = False
        t.grad_fn = t._grad = t._hooks = t._acc = t._view_origin = t._base = None
        t._out_nr = 0
        t._vc = [0]
        if not (diff0 and hit[3] and _GM.grad_enabled):
            return t
        gf = a.grad_fn
        if gf is not None:
            e0 = (gf, a._out_nr)
        elif a._requires_grad:
            acc = a._acc
            e0 = (acc if acc is not None else a._accumulator(), 0)
        else:
            return t
        node = _new(OpNode)
        node.op = op
        node.params = params or {}
        node.next_functions = (e0,)
        node.needs_grad = _NEEDS_ONE
        node.seq = _next(_node_seq)
        node._freed = False
        node._x = node.view_args = node.view_base_fn = node.torch_name = None
        node.shapes = hit[4]
        node.dtypes = hit[5]
        node.plans = hit[11]
        node.out_meta = hit[7]
        if saves_in:
            saved = hit[9].get(_NEEDS_ONE)
            if saved is None:
                saved = hit[9][_NEEDS_ONE] = saved_inputs(op, 1, _NEEDS_ONE)
            if saved:
                node.inputs = (a,)
                node.versions = [(0, a._vc[0])]
            else:
                node.inputs = hit[8]
                node.versions = []
        else:
            node.inputs = hit[8]
            node.versions = None
        if saves_out:
            # kept without its history (saved_output.py; dispatch._record's form: no t -> node -> t cycle)
            so = _new(Tensor)
            so._data, so._vc = out, t._vc
            so._requires_grad = so._retains_grad = so._inference = False
            so.grad_fn = so._grad = so._base = so._hooks = so._acc = so._view_origin = None
            so._out_nr = 0
            node.outputs = (so,)
            node.out_versions = [(0, 0)]
        else:
            node.outputs = _NO_OUTPUT
            node.out_versions = None
        if _SH.stack:
            pack_node(node)
        # the user's line (dispatch._record's search, inline): the first frame outside the package above the caller
        try:
            f = _getframe(2)
        except ValueError:      # (called from a module's top level)
            f = _getframe(1)
        while f is not None:
            code = f.f_code
            r = _internal_get(code.co_filename)
            if r is None:
                r = _internal(code)
            if not r:
                node._loc = (code, f.f_lasti)
                break
            f = f.f_back
        else:
            node._loc = None
        t.grad_fn = node
        return t
    return _named(flat, op)


def _binary(op):
    nondiff = op.nondiff_inputs or ()
    diff0, diff1 = 0 not in nondiff, 1 not in nondiff
    saves_in = bool(op.saves_in)
    saves_out = bool(op.saves_out)

    def flat(a, b, params=None):
        if _DEPARTED or _AN.enabled or _d._bind is not _BIND:
            return _d._bind(op, (a, b), params or {})
        ta = type(a)
        tb = type(b)
        if ta is Tensor or ta in _AS_TENSOR:
            da = a._data
            if type(da) is not _ndarray or a._base is not None or a._inference:
                return _d._bind(op, (a, b), params or {})
            if tb is Tensor or tb in _AS_TENSOR:
                db = b._data
                if type(db) is not _ndarray or b._base is not None or b._inference:
                    return _d._bind(op, (a, b), params or {})
                key = (op, da.shape, da.dtype, db.shape, db.dtype)
                need = a._requires_grad or a.grad_fn is not None or b._requires_grad or b.grad_fn is not None
            elif tb is float or tb is int or tb is bool:
                db = b
                key = (op, da.shape, da.dtype, tb)
                need = a._requires_grad or a.grad_fn is not None
            else:
                return _d._bind(op, (a, b), params or {})
        elif (ta is float or ta is int) and tb is Tensor:      # 0.1 * t (dispatch._bind's key: Tensor itself)
            db = b._data
            if type(db) is not _ndarray or b._base is not None or b._inference:
                return _d._bind(op, (a, b), params or {})
            da = a
            key = (op, ta, db.shape, db.dtype)
            need = b._requires_grad or b.grad_fn is not None
        else:
            return _d._bind(op, (a, b), params or {})
        if params:
            try:
                hit = _RULES.get(key + (tuple(params.items()),))
            except TypeError:   # (unhashable params: dispatch evaluates the rule uncached)
                hit = None
        else:
            hit = _RULES.get(key)
        if hit is None:
            return _d._bind(op, (a, b), params or {})
        try:
            out = hit[6](da, db, **params) if params else hit[6](da, db)
        except _ERRORS as e:
            raise op_error(op, hit[1], e) from None
        if not hit[10]:
            if type(out) is not _ndarray:
                out = np.asarray(out, dtype=hit[2])
            elif out.dtype is not hit[2] and out.dtype != hit[2]:
                out = out.astype(hit[2])
        t = _new(Tensor)
        t._data = out
        t._requires_grad = t._retains_grad = t._inference = False
        t.grad_fn = t._grad = t._hooks = t._acc = t._view_origin = t._base = None
        t._out_nr = 0
        t._vc = [0]
        if not (need and hit[3] and _GM.grad_enabled):
            return t
        # the edges: a scalar (or an input the op does not differentiate) has none
        if diff0 and da is not a:
            gf = a.grad_fn
            if gf is not None:
                e0, n0 = (gf, a._out_nr), True
            elif a._requires_grad:
                acc = a._acc
                e0, n0 = (acc if acc is not None else a._accumulator(), 0), True
            else:
                e0, n0 = _NO_EDGE, False
        else:
            e0, n0 = _NO_EDGE, False
        if diff1 and db is not b:
            gf = b.grad_fn
            if gf is not None:
                e1, n1 = (gf, b._out_nr), True
            elif b._requires_grad:
                acc = b._acc
                e1, n1 = (acc if acc is not None else b._accumulator(), 0), True
            else:
                e1, n1 = _NO_EDGE, False
        elif n0:
            e1, n1 = _NO_EDGE, False
        else:
            return t
        node = _new(OpNode)
        node.op = op
        node.params = params or {}
        node.next_functions = (e0, e1)
        node.needs_grad = needs = (n0, n1)
        node.seq = _next(_node_seq)
        node._freed = False
        node._x = node.view_args = node.view_base_fn = node.torch_name = None
        node.shapes = hit[4]
        node.dtypes = hit[5]
        node.plans = hit[11]
        node.out_meta = hit[7]
        if saves_in:
            # the inputs to save for this pattern of needs (dispatch._record's rule)
            plans = hit[9]
            saved = plans.get(needs)
            if saved is None:
                saved = plans[needs] = saved_inputs(op, 2, needs)
            ins = [None, None]
            vers = []
            for i in saved:
                x = b if i else a
                ins[i] = x
                if type(x) is not int and type(x) is not float and type(x) is not bool:
                    vers.append((i, x._vc[0]))
            node.inputs = tuple(ins)
            node.versions = vers
        else:
            node.inputs = hit[8]
            node.versions = None
        if saves_out:
            # kept without its history (saved_output.py; dispatch._record's form: no t -> node -> t cycle)
            so = _new(Tensor)
            so._data, so._vc = out, t._vc
            so._requires_grad = so._retains_grad = so._inference = False
            so.grad_fn = so._grad = so._base = so._hooks = so._acc = so._view_origin = None
            so._out_nr = 0
            node.outputs = (so,)
            node.out_versions = [(0, 0)]
        else:
            node.outputs = _NO_OUTPUT
            node.out_versions = None
        if _SH.stack:
            pack_node(node)
        # the user's line (dispatch._record's search, inline): the first frame outside the package above the caller
        try:
            f = _getframe(2)
        except ValueError:      # (called from a module's top level)
            f = _getframe(1)
        while f is not None:
            code = f.f_code
            r = _internal_get(code.co_filename)
            if r is None:
                r = _internal(code)
            if not r:
                node._loc = (code, f.f_lasti)
                break
            f = f.f_back
        else:
            node._loc = None
        t.grad_fn = node
        return t
    return _named(flat, op)


def _named(flat, op):
    flat.__name__ = flat.__qualname__ = f"flat_{op.name}"
    flat.__doc__ = f"Primitive ``{op.name}``'s flat entry point (runtime/flat_bind.py)."
    return flat


_NEEDS_ONE = (True,)

__all__ = ["flat_entry"]
