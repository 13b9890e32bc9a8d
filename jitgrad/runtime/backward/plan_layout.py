"""A rule's trace laid out as a Plan (``pullback_plans``): the steps its results need, each resolved to the eager
signature entry ``dispatch._bind`` would use (the same impl, eager kernel and result cast), called the cheapest way
the pullback's loop knows; the constants it made kept (or, one value over a big array, made per call)."""
from __future__ import annotations

from functools import partial
from operator import attrgetter, itemgetter, methodcaller

import numpy as np

from ...ir.graph import Lit, Var
from ...ir import dtypes as dt
from ...ir.ops import Aval
from ...ir.ops.reduce import _add_reduce, _sum_impl
from ...ir.symbolic import SymFloat, concretize, has_symbols
from ..dispatch import _rule_entry
from ..rule_entries import WEAK, by_form, signature_impl
from ..tensor import Tensor
from . import rule_traces

_FROM_NP = dt._FROM_NP
NO_PLAN = object()      # a signature whose rule runs on tensors (pullback_plans._NO_PLAN)
_FILL_MIN = 4096        # elements from which a constant of one value is made per call, not kept


class Plan:
    """A rule traced for one signature: ``steps`` (impl, call kind (how ``pullback``'s loop calls the impl),
    argument slots, params, result dtype, result slot) run on a list of values: the inputs (cotangents, then saved
    inputs, then saved outputs, then the saved numbers where ``numbers``), then ``pad`` (the constants, a slot per
    step from ``first`` on, and a None); ``pick`` takes the inputs' cotangents from it (a tuple, or the one value
    where ``single``); ``fresh``: the results that are (views of) constants, copied per call so that no caller
    holds the plan's buffer; ``where``: each step's op (None for a made constant), for an error's message (its
    inputs' avals read off the arrays it was called on: ``step_avals``); ``sizeless``: nothing in it depends on
    the sizes it was finished at (no size in a param or constant, each impl its form's choice), so one Plan serves
    every size its template serves."""

    __slots__ = ("steps", "pad", "first", "pick", "single", "fresh", "where", "numbers", "sizeless")

    def __init__(self, steps, pad, first, results, fresh, where, numbers=False, sizeless=False):
        self.steps = steps
        self.pad = pad
        self.first = first
        self.pick = itemgetter(*results)
        self.single = len(results) == 1
        self.fresh = fresh
        self.where = where
        self.numbers = numbers
        self.sizeless = sizeless


# view ops whose impl is ``lambda x, p: x.METHOD(p)`` (ir/ops/shape.py): op name -> (METHOD, the parameter)
_METHOD_STEPS = {"reshape": ("reshape", "shape"), "permute": ("transpose", "perm")}
_PERMUTE = _METHOD_STEPS["permute"]
_TRANSPOSED = attrgetter("T")


def _one_value(value):
    """Whether ``value`` is a big C-contiguous array of one value, bit for bit (as ``np.full`` makes it)."""
    return type(value) is np.ndarray and value.size >= _FILL_MIN and value.flags.c_contiguous \
        and _filled(value)().tobytes() == value.tobytes()


def _filled(value):
    shape, fill, dtype = value.shape, value.flat[0], value.dtype
    return lambda: np.full(shape, fill, dtype)


def plan_of(tr, res, slot_of, ninputs, nresults, number_slot=None):
    """The Plan of trace ``tr`` whose results are ``res`` (``slot_of``: the stand-ins' Vars and their slots;
    ``number_slot``: id of each saved number's symbol -> its slot among the inputs), or NO_PLAN."""
    try:
        return _build(tr, res, slot_of, ninputs, nresults, number_slot)
    except Exception:
        return NO_PLAN


def _build(tr, res, slot_of, ninputs, nresults, number_slot):
    laid = layout(tr, res, slot_of, ninputs, nresults, number_slot)
    return laid if laid is NO_PLAN else finish(laid, ninputs, bool(number_slot))


def layout(tr, res, slot_of, ninputs, nresults, number_slot, sized=False):
    """What of a Plan does not depend on the sizes: (the constants, per step (eqn, its arguments' slots, its
    slot), the results' slots, the first step's slot, the None's); ``sized``: ``tr`` is a rule's trace on symbolic
    sizes, its literals computed from them constants that ``_finish`` puts the sizes in."""
    if type(res) not in (tuple, list) or len(res) != nresults:
        return NO_PLAN
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
        elif type(r) is Tensor and (type(r._data) is np.ndarray or sized and type(r._data) is rule_traces.Fill) \
                and id(r) in tr.created:
            want.append(const(r._data))
        else:
            return NO_PLAN
    # the steps the results need, backwards from them
    made = {}
    for i, e in enumerate(tr.eqns):
        if len(e.outs) != 1:
            return NO_PLAN
        made[e.outs[0]] = i
    live = set()
    stack = [v for v in want if type(v) is Var]
    while stack:
        v = stack.pop()
        i = made.get(v)
        if i is None:
            if v not in slot_of:
                return NO_PLAN     # a Var of no eqn here and no stand-in
            continue
        if i in live:
            continue
        live.add(i)
        stack.extend(a for a in tr.eqns[i].ins if type(a) is Var)
    slot = dict(slot_of)
    ref = []        # per step: (eqn, its arguments: a Var, ("c", constant number) or ("n", a saved number's slot))
    for i, e in enumerate(tr.eqns):
        if i in live:
            args = []
            for a in e.ins:
                if type(a) is Var:
                    args.append(a)
                elif type(a.value) is SymFloat and not sized:
                    k = number_slot.get(id(a.value)) if number_slot else None
                    if k is None:
                        return NO_PLAN     # (a number computed from a saved one)
                    args.append(("n", k))
                else:
                    args.append(const(a.value))
            ref.append((e, args))
    first = n = ninputs + len(consts)
    steps = []
    spec = rule_traces.shape_spec if sized else _no_spec
    for e, args in ref:
        ins = [(True, a.aval, spec(a.aval.shape)) if type(a) is Lit else
               (False, (tuple(a.aval.shape), a.aval.dtype), spec(a.aval.shape)) for a in e.ins]
        steps.append((e.op, ins, e.params, sized and has_symbols(e.params),
                      [(ninputs + a[1] if a[0] == "c" else a[1]) if type(a) is tuple else slot[a] for a in args], n))
        slot[e.outs[0]] = n
        n += 1
    results = [n if v is None else ninputs + v[1] if type(v) is tuple else slot[v] for v in want]
    # per step, once a finish has made its entry: (its NumPy callable where that is its form's choice
    # (rule_entries.by_form), else None; its result's dtype), so finishing at other sizes runs no shape rule and
    # asks by_form ops nothing (a sized layout is one template's: its guards hold wherever it is finished)
    return consts, steps, results, first, n, [None] * len(steps)


def _no_spec(shape):
    return None


def _avals(ins, values):
    """A step's input avals at the sizes ``values`` (``layout``'s ``ins``)."""
    avals = []
    for lit, a, spec in ins:
        if spec is None:
            avals.append(a if lit else Aval(a[0], a[1]))
        else:
            shape = rule_traces.shape_at(spec, values)
            avals.append(Aval(shape, a.dtype, a.weak) if lit else Aval(shape, a[1]))
    return avals


def step_avals(step, vals) -> list:
    """The input avals of a Plan's ``step`` called on the values ``vals``: for an error's message."""
    a = step[2]
    avals = []
    for i in ((a,) if type(a) is int else a):
        v = vals[i]
        if type(v) is np.ndarray:
            avals.append(Aval(v.shape, _FROM_NP[v.dtype]))
        else:
            avals.append(WEAK.get(type(v)) or Aval(np.shape(v), _FROM_NP[np.asarray(v).dtype]))
    return avals


def finish(layout, ninputs, numbers, values=None):
    """The Plan of ``layout`` (at the sizes ``values``, where it was laid out from a trace on symbolic sizes)."""
    consts, ref, results, first, nothing, chosen = layout
    if values is not None:
        consts = [rule_traces.concrete(c, values) for c in consts]
    else:
        consts = list(consts)
    steps, where = [], []
    from_const = set(range(ninputs, first))     # slots that are a constant or a view of one
    for j, value in enumerate(consts):
        if _one_value(value):
            # a big constant of one value (getitem's zeros of an embedding's shape): made per call, as the rule
            # makes it, not held by the plan for the life of the process
            steps.append((_filled(value), 3, (), None, value.dtype, ninputs + j))
            where.append(None)
            consts[j] = None
            from_const.discard(ninputs + j)
    for j, (op, ins, params, sym, args, n) in enumerate(ref):
        if sym:
            params = concretize(params, values)
        known = chosen[j]
        if known is None:
            # the signature's entry as eager dispatch makes it (its shape rule checked once per layout)
            avals = _avals(ins, values)
            entry = _rule_entry(op, None, params, avals)
            impl, want = entry[6], entry[2]
            chosen[j] = (signature_impl(op, avals, params) if by_form(op) else None, want)
        else:
            # later sizes: the result's dtype is the form's, and so is the impl where by_form; the rest chosen as
            # rule_entry chooses (signature_impl, then eager_kernel), at these sizes
            impl, want = known
            if impl is None or op.eager_kernel is not None:
                avals = _avals(ins, values)
                if impl is None:
                    impl = signature_impl(op, avals, params)
                if op.eager_kernel is not None:
                    impl = op.eager_kernel(avals, params, impl) or impl
        method = _METHOD_STEPS.get(op.name)
        if method is _PERMUTE and impl is op.impl and len(args) == 1 and tuple(params["perm"]) == (1, 0):
            impl, kind, a = _TRANSPOSED, 1, args[0]     # a matrix's transpose: its ``.T`` (no argument to parse)
        elif method is not None and impl is op.impl and len(args) == 1:
            # a view step calls the array's method, its parameter bound once (the impl is a Python lambda)
            impl, kind, a = methodcaller(method[0], params[method[1]]), 1, args[0]
        elif impl is _sum_impl and len(args) == 1:
            # a sum calls the ufunc's reduce itself, its axes bound once (_sum_impl's frame, less)
            impl, kind, a = partial(_add_reduce, axis=params["axes"], keepdims=params["keepdims"]), 1, args[0]
        elif len(args) == 1:
            kind, a = (11 if params else 1), args[0]
        elif len(args) == 2:
            kind, a = (12 if params else 2), tuple(args)
        elif len(args) == 3 and not params:
            kind, a = 4, tuple(args)
        else:
            kind, a = 0, tuple(args)
        steps.append((impl, kind, a, params, want, n))
        where.append(op)
        if op.view and args[0] in from_const:
            from_const.add(n)
    fresh = tuple(j for j, r in enumerate(results) if r != nothing and r in from_const)
    sizeless = values is not None and not any(sym for _, _, _, sym, _, _ in ref) and all(
        k is not None and k[0] is not None for k in chosen) and not any(
        op.eager_kernel is not None for op, *_ in ref) and all(not rule_traces.is_sized(c) for c in layout[0])
    return Plan(tuple(steps), consts + [None] * (nothing - first + 1), first, results, fresh, tuple(where), numbers,
                sizeless)


__all__ = ["NO_PLAN", "Plan", "finish", "layout", "plan_of", "step_avals"]
