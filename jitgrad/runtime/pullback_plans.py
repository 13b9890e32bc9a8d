"""Vjp rules replayed on arrays: the pullbacks of an eager first-order backward.

An op's ``vjp`` rule is written with tensor methods and ``ctx.bind`` (``ir/ops/opdef.py``); run on eager tensors it
binds each primitive through ``dispatch._bind`` (a signature lookup, the impl, a Tensor).  In a first-order backward
with nothing to record (no create_graph, trace, profiler, anomaly mode, dual level or saved-tensor hooks) only the
arrays matter, so the engine asks ``pullback`` instead:

- per signature (the op, its params, which inputs need a gradient, the shapes and dtypes of the cotangents and of the
  saved values, the values of saved Python numbers), the rule is traced once on symbolic stand-ins
  (``tracer.Trace`` with ``fused``: a fused op stays one op, as eager dispatch runs it) into a straight-line plan:
  each eqn resolved to the eager signature entry ``_bind`` would use (``dispatch._rule_entry``: the same impl,
  eager kernel and result cast), constants the rule made kept as they are, steps no result needs dropped;
- later calls replay the plan on the arrays: one loop over its steps calling each impl, casting as ``_bind`` casts.
  So the gradients are the rule's bits, and the rule is written once.

A rule the plan cannot hold falls back to the rule itself, for that signature: one that reads a value (the tracer
refuses: ``TracedValueError``), meets a tensor from outside its context, warns, binds a multi-output op or fails in
any other way while traced (a rule that needs a value computed from its inputs leaves it to an op: nll_loss's
``nll_grad_weights``).  ``COUNTS["traces"]`` counts the plans traced (tests check that later steps trace none).
"""
from __future__ import annotations

import warnings
from operator import itemgetter
from math import copysign as _copysign

import numpy as np

from ..ir import dtypes as dt
from ..ir.graph import Lit, Var
from ..ir.ops import OPS, Aval
from ..ir.ops.opdef import OpDef, RuleCtx
from ..tracer.trace import Trace
from . import grad_mode
from .dispatch import _bind, _rule_entry
from .op_errors import op_error
from .tensor import Tensor

_FROM_NP = dt._FROM_NP
_GM = grad_mode.STATE
_NO_PLAN = object()
# signature -> its plan, or _NO_PLAN (the rule runs)
_PLANS: dict = {}
COUNTS = {"traces": 0}
_ERRORS = (ValueError, TypeError, IndexError, FloatingPointError, OverflowError)
_FILL_MIN = 4096        # elements from which a constant of one value is made per call, not kept


class Plan:
    """A rule traced for one signature: ``steps`` (impl, call kind, argument slots, params, result dtype, result
    slot) run on a list of values: the inputs (cotangents, then saved inputs, then saved outputs), then ``pad`` (the
    constants, a slot per step from ``first`` on, and a None); ``pick`` takes the inputs' cotangents from it (a
    tuple, or the one value where ``single``); ``fresh``: the results that are (views of) constants, copied per call
    so that no caller holds the plan's buffer; ``where``: each step's op and input avals, for an error's message."""

    __slots__ = ("steps", "pad", "first", "pick", "single", "fresh", "where")

    def __init__(self, steps, pad, first, results, fresh, where):
        self.steps = steps
        self.pad = pad
        self.first = first
        self.pick = itemgetter(*results)
        self.single = len(results) == 1
        self.fresh = fresh
        self.where = where


def pullback(node, gs):
    """The cotangent arrays of ``node``'s inputs for its outputs' cotangent arrays ``gs`` (a list the call may
    extend), computed by its rule's plan (or a joined node's own ``pullback``); None where the rule must run on
    tensors (the caller then runs it).  The hot path of every eager backward: kept to one frame."""
    op = node.op
    if type(op) is not OpDef:       # a joined node's stand-in (node_chain: AddmmBackward0, multi_view: SplitBackward0)
        own = op.pullback
        if own is not None:
            return own(node, gs)
    if node.packed is not None:
        return None
    g = gs[0]
    if type(g) is not np.ndarray:
        return None
    key = (op, node.needs_grad, node.shapes, node.dtypes, g.shape, g.dtype)
    ngrads = len(gs)
    if ngrads > 1:
        for d in gs[1:]:
            if type(d) is not np.ndarray:
                return None
            key += (d.shape, d.dtype)
    vals = gs
    if op.saves_in:
        for t in node.inputs:
            if t is None:
                continue
            tt = type(t)
            if tt is Tensor or isinstance(t, Tensor):
                d = t._data
                if type(d) is not np.ndarray:
                    return None
                vals += (d,)
            elif tt is float or tt is int or tt is bool:
                # a Python number: the rule's Python may read it (and -0.0 == 0.0)
                key += (tt, t, _copysign(1.0, t)) if not t else (tt, t)
            else:
                return None
    if op.saves_out:
        for t in node.outputs:
            if t is not None:
                d = t._data
                if type(d) is not np.ndarray:
                    return None
                vals += (d,)
    params = node.params
    if params:
        key += (tuple(params.items()),)
    try:
        plan = _PLANS.get(key)
    except TypeError:           # unhashable params
        return None
    if plan is None:
        if len(_PLANS) > 20000:
            _PLANS.clear()
        plan = _PLANS[key] = _trace(node, vals, ngrads)
    if plan is _NO_PLAN:
        return None
    # the plan on the arrays: the constants, then a slot per step
    vals += plan.pad
    try:
        for impl, kind, a, params, want, k in plan.steps:
            if kind == 1:
                out = impl(vals[a])
            elif kind == 2:
                out = impl(vals[a[0]], vals[a[1]])
            elif kind == 11:
                out = impl(vals[a], **params)
            elif kind == 3:
                out = impl()
            else:
                out = impl(*[vals[i] for i in a], **params)
            if type(out) is not np.ndarray:
                out = np.asarray(out, dtype=want)
            else:
                od = out.dtype
                if od is not want and od != want:
                    out = out.astype(want)
            vals[k] = out
    except _ERRORS as e:
        raise _step_error(plan, vals, e) from None
    out = plan.pick(vals)
    if plan.single:
        out = (out,)
    if plan.fresh:
        out = list(out)
        for i in plan.fresh:
            out[i] = out[i].copy()
    return out


def _step_error(plan, vals, e):
    """The error of the step that raised ``e`` (the first with no result), as its bind would raise it."""
    for step, (op, avals) in zip(plan.steps, plan.where):
        if vals[step[5]] is None and op is not None:
            return op_error(op, avals, e)
    return e


class _Outside(Exception):
    """The rule met a concrete tensor that is not one of its context's values: its value would be baked in."""


def _outside(t):
    raise _Outside()


def _one_value(value):
    """Whether ``value`` is a big C-contiguous array of one value, bit for bit (as ``np.full`` makes it)."""
    return type(value) is np.ndarray and value.size >= _FILL_MIN and value.flags.c_contiguous \
        and _filled(value)().tobytes() == value.tobytes()


def _filled(value):
    shape, fill, dtype = value.shape, value.flat[0], value.dtype
    return lambda: np.full(shape, fill, dtype)


def _stand_in(d):
    return Tensor._make(Var(Aval(tuple(d.shape), _FROM_NP[d.dtype])))


def _ctx_bind(opname, *args, **params):
    return _bind(OPS[opname], args, params)


def _trace(node, vals, ngrads):
    """``node``'s rule traced on stand-ins of ``vals`` (the arrays ``pullback`` collected, in its order) into a
    Plan, or _NO_PLAN."""
    COUNTS["traces"] += 1
    op = node.op
    syms = [_stand_in(d) for d in vals]
    slot_of = {t._data: i for i, t in enumerate(syms)}
    k = ngrads
    inputs = []
    for t in node.inputs:
        if isinstance(t, Tensor):
            t = syms[k]
            k += 1
        inputs.append(t)
    outputs = []
    for t in node.outputs:
        if t is not None:
            t = syms[k]
            k += 1
        outputs.append(t)
    c = RuleCtx()
    c.op, c.inputs, c.outputs, c.shapes, c.dtypes = op, tuple(inputs), tuple(outputs), node.shapes, node.dtypes
    c.params, c.needs_grad, c.bind, c.transposer = node.params, node.needs_grad, _ctx_bind, None
    tr = Trace()
    tr.fused = True
    tr.on_capture = _outside
    prev = _GM.grad_enabled
    _GM.grad_enabled = False
    try:
        with warnings.catch_warnings(record=True) as warned, tr:
            warnings.simplefilter("always")
            res = op.vjp(c, *syms[:ngrads])
        if warned:
            return _NO_PLAN         # (the rule runs, and warns, at every call)
        return _plan(tr, res, slot_of, len(vals), len(node.next_functions))
    except Exception:
        tr.abort()
        return _NO_PLAN
    finally:
        _GM.grad_enabled = prev


def _plan(tr, res, slot_of, ninputs, nresults):
    """The Plan of trace ``tr`` whose results are ``res`` (``slot_of``: the stand-ins' Vars and their slots)."""
    if type(res) not in (tuple, list) or len(res) != nresults:
        return _NO_PLAN
    consts = []
    const_of = {}               # id(Lit value) -> its constant's number (a constant tensor used twice is one)

    def const(value):
        n = const_of.get(id(value))
        if n is None:
            n = const_of[id(value)] = len(consts)
            consts.append(value)
        return ("c", n)

    # results: a stand-in's Var, an eqn's output Var, or a constant tensor the rule made
    want = []
    for r in res:
        if r is None:
            want.append(None)
        elif type(r) is Tensor and type(r._data) is Var:
            want.append(r._data)
        elif type(r) is Tensor and type(r._data) is np.ndarray and id(r) in tr.created:
            want.append(const(r._data))
        else:
            return _NO_PLAN
    # the steps the results need, backwards from them
    made = {}
    for i, e in enumerate(tr.eqns):
        if len(e.outs) != 1:
            return _NO_PLAN
        made[e.outs[0]] = i
    live = set()
    stack = [v for v in want if type(v) is Var]
    while stack:
        v = stack.pop()
        i = made.get(v)
        if i is None:
            if v not in slot_of:
                return _NO_PLAN     # a Var of no eqn here and no stand-in
            continue
        if i in live:
            continue
        live.add(i)
        stack.extend(a for a in tr.eqns[i].ins if type(a) is Var)
    slot = dict(slot_of)
    ref = []                    # per step: (eqn, its arguments: a Var, or ("c", constant number))
    for i, e in enumerate(tr.eqns):
        if i in live:
            ref.append((e, [a if type(a) is Var else const(a.value) for a in e.ins]))
            slot[e.outs[0]] = None      # (numbered below, once the constants are)

    def resolve(a):
        return ninputs + a[1] if type(a) is tuple else a

    steps, where = [], []
    n = ninputs + len(consts)
    from_const = set(range(ninputs, n))     # slots that are a constant or a view of one
    for j, value in enumerate(consts):
        if _one_value(value):
            # a big constant of one value (getitem's zeros of an embedding's shape): made per call, as the rule
            # makes it, not held by the plan for the life of the process
            steps.append((_filled(value), 3, (), None, value.dtype, ninputs + j))
            where.append((None, None))
            consts[j] = None
            from_const.discard(ninputs + j)
    for e, args in ref:
        args = [resolve(a) if type(a) is tuple else slot[a] for a in args]
        avals = [a.aval if type(a) is Lit else Aval(tuple(a.aval.shape), a.aval.dtype) for a in e.ins]
        entry = _rule_entry(e.op, None, e.params, avals)
        params = e.params
        if len(args) == 1:
            kind, a = (11 if params else 1), args[0]
        elif len(args) == 2 and not params:
            kind, a = 2, tuple(args)
        else:
            kind, a = 0, tuple(args)
        steps.append((entry[6], kind, a, params, entry[2], n))
        where.append((e.op, entry[1]))
        if e.op.view and args[0] in from_const:
            from_const.add(n)
        slot[e.outs[0]] = n
        n += 1
    nothing = n                 # (a None after the steps' slots: an input with no cotangent)
    results, fresh = [], []
    for j, v in enumerate(want):
        if v is None:
            results.append(nothing)
            continue
        r = resolve(v) if type(v) is tuple else slot[v]
        results.append(r)
        if r in from_const:
            fresh.append(j)
    first = ninputs + len(consts)
    return Plan(tuple(steps), consts + [None] * (n - first + 1), first, results, tuple(fresh), tuple(where))
