"""Vjp rules replayed on arrays: the pullbacks of an eager first-order backward.

An op's ``vjp`` rule is written with tensor methods and ``ctx.bind`` (``ir/ops/opdef.py``); run on eager tensors it
binds each primitive through ``dispatch._bind`` (a signature lookup, the impl, a Tensor).  In a first-order backward
with nothing to record (no create_graph, trace, profiler, anomaly mode, dual level or saved-tensor hooks) only the
arrays matter, so the engine asks ``pullback`` instead:

- per signature (the op, its params, which inputs need a gradient, the shapes and dtypes of the cotangents and of the
  saved values, the types of saved Python numbers), the rule's trace (``rule_traces.record``) is made into a
  straight-line plan: each eqn resolved to the eager signature entry ``_bind`` would use (``dispatch._rule_entry``:
  the same impl, eager kernel and result cast), constants the rule made kept as they are, steps no result needs
  dropped;
- later calls replay the plan on the arrays: one loop over its steps calling each impl, casting as ``_bind`` casts.
  So the gradients are the rule's bits, and the rule is written once.

A new shape is a new signature, but not a new trace: the rule is traced once per *form* of the signature's shapes
(its sizes as symbols, ``rule_traces``), and that trace, its guards holding, instantiated at the new shape's sizes
gives the trace the shape itself would (a form's first symbolic trace is checked against it: the same steps, or
the form is traced per shape).  A rule that decides on a size gets a trace per outcome (its guards), at most
``NUMBER_VALUES_MAX`` per form; later ones are traced per shape.

Saved Python numbers (``x * beta``: a KL weight on a schedule, an annealed temperature) change between steps, so a
plan must not hold their values.  A saved float is traced as a symbolic scalar (an unbacked ``SymFloat``: Python that
reads it, ``if beta == 0`` or ``float(beta)``, raises) and is an input of the plan, so one plan serves every value.
The rule is traced a second time on the number itself, and the two traces must be the same steps with the number
where the symbol is (a rule that tells numbers from tensors by type, div's Python-number numerator, takes another
branch on a symbol).  A rule that reads its numbers, or saves ints or bools, is planned per value instead, for at most
``NUMBER_VALUES_MAX`` values of one signature; later values run the rule on tensors.  An op's params (clamp's bounds)
are keyed by value too, and bounded alike (a param that is one of the sizes, a reshape's target, by its form).

A rule the plan cannot hold falls back to the rule itself, for that signature: one whose trace declines
(``rule_traces.record``), or binds a multi-output op (a rule that needs a value computed from its inputs leaves it
to an op: nll_loss's ``nll_grad_weights``).
"""
from __future__ import annotations

import struct
from operator import itemgetter, methodcaller

import numpy as np

from ...ir.graph import Lit, Var
from ...ir.ops import Aval
from ...ir.ops.opdef import OpDef
from ...ir.symbolic import SymFloat, concretize, has_symbols
from ..dispatch import _rule_entry
from ..op_errors import op_error
from ..tensor import Tensor
from . import rule_traces
from .rule_traces import COUNTS, record as _record, same_steps  # noqa: F401 - (COUNTS: the tests' count, read here)

_NO_PLAN = object()
_UNSIZED = object()     # a form whose rule traces otherwise on symbolic sizes: traced per shape
_DECLINED = object()    # a form whose rule declines its saved numbers as symbols: planned per value
_BY_VALUE = object()    # a form whose rule declines its saved ints as sizes: traced on their values
NUMBER_VALUES_MAX = 32      # values of the saved numbers planned per signature, where a plan must hold them


class _Plans(dict):
    """Signature -> its plan, _NO_PLAN (the rule runs) or, where saved numbers are planned per value, a _Values;
    ``param_values``: a signature's form less its params -> the params' forms that have plans (at most
    NUMBER_VALUES_MAX: clamp's bounds on a schedule would trace without end); ``sized``: (a signature's form, how its
    numbers are traced) -> the rule's traces on symbolic sizes (rule_traces.Template), _UNSIZED or _DECLINED;
    ``checked``: the forms whose first symbolic trace was checked against a trace on the shapes; all cleared with
    the plans."""

    def __init__(self):
        super().__init__()
        self.param_values = {}
        self.sized = {}
        self.checked = set()

    def clear(self):
        super().clear()
        self.param_values.clear()
        self.sized.clear()
        self.checked.clear()


_PLANS = _Plans()
_ERRORS = (ValueError, TypeError, IndexError, FloatingPointError, OverflowError)
_FILL_MIN = 4096        # elements from which a constant of one value is made per call, not kept
_bits = struct.Struct("<d").pack


class Plan:
    """A rule traced for one signature: ``steps`` (impl, call kind, argument slots, params, result dtype, result
    slot) run on a list of values: the inputs (cotangents, then saved inputs, then saved outputs, then the saved
    numbers where ``numbers``), then ``pad`` (the constants, a slot per step from ``first`` on, and a None); ``pick``
    takes the inputs' cotangents from it (a tuple, or the one value where ``single``); ``fresh``: the results that are
    (views of) constants, copied per call so that no caller holds the plan's buffer; ``where``: each step's op and
    input avals, for an error's message."""

    __slots__ = ("steps", "pad", "first", "pick", "single", "fresh", "where", "numbers")

    def __init__(self, steps, pad, first, results, fresh, where, numbers=False):
        self.steps = steps
        self.pad = pad
        self.first = first
        self.pick = itemgetter(*results)
        self.single = len(results) == 1
        self.fresh = fresh
        self.where = where
        self.numbers = numbers


class _Values(dict):
    """The plans of a signature whose rule must see its saved numbers' values: value key -> Plan or _NO_PLAN, at
    most NUMBER_VALUES_MAX of them."""

    __slots__ = ()


def pullback(node, gs):
    """The cotangent arrays of ``node``'s inputs for its outputs' cotangent arrays ``gs`` (a list the call may
    extend), computed by its rule's plan (or a joined node's own ``pullback``); None where the rule must run on
    tensors (the caller then runs it).  The hot path of every eager backward: kept to one frame."""
    op = node.op
    if type(op) is not OpDef:       # a joined node's stand-in (node_chain: AddmmBackward0, multi_view: SplitBackward0)
        own = op.pullback
        if own is not None:
            return own(node, gs)
    if node._x is not None and node.packed is not None:
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
    nums = None         # the saved Python numbers: their types are the signature's, their values the plan's inputs
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
                key += (tt,)
                if nums is None:
                    nums = [t]
                else:
                    nums.append(t)
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
        plan = _first_plan(node, vals, ngrads, nums)
        if plan is None:
            return None         # (params over their bound)
        _PLANS[key] = plan
    if type(plan) is not Plan:
        if plan is _NO_PLAN:
            return None
        # planned per value (_value_key, inlined for one number: mean's count, a constant scale)
        if len(nums) == 1:
            t = nums[0]
            vk = _bits(t) if type(t) is float else t
        else:
            vk = _value_key(nums)
        table = plan
        plan = table.get(vk)
        if plan is None:
            plan = _value_plan(table, vk, node, vals, ngrads, nums)
        if plan is _NO_PLAN:
            return None
    elif plan.numbers:
        vals += nums
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


# view ops whose impl is ``lambda x, p: x.METHOD(p)`` (ir/ops/shape.py): op name -> (METHOD, the parameter)
_METHOD_STEPS = {"reshape": ("reshape", "shape"), "permute": ("transpose", "perm")}


def _step_error(plan, vals, e):
    """The error of the step that raised ``e`` (the first with no result), as its bind would raise it."""
    for step, (op, avals) in zip(plan.steps, plan.where):
        if vals[step[5]] is None and op is not None:
            return op_error(op, avals, e)
    return e


def _one_value(value):
    """Whether ``value`` is a big C-contiguous array of one value, bit for bit (as ``np.full`` makes it)."""
    return type(value) is np.ndarray and value.size >= _FILL_MIN and value.flags.c_contiguous \
        and _filled(value)().tobytes() == value.tobytes()


def _filled(value):
    shape, fill, dtype = value.shape, value.flat[0], value.dtype
    return lambda: np.full(shape, fill, dtype)



def _first_plan(node, vals, ngrads, nums):
    """The plan of a new signature (None where its params are over their bound): the rule traced on its numbers'
    values; where they are all floats and the rule does not read them, the plan that takes them as inputs (the rule
    traced again on symbols, which must give the same steps); else a _Values holding the plan of these values."""
    form = _form(node, vals, nums)
    if form is None:
        return None
    vk = None if nums is None else _value_key(nums)
    floats = nums is not None and all(type(t) is float for t in nums)
    concrete = _traced(node, vals, ngrads, None, form, vk, True, not floats)
    plan = _concrete_plan(concrete, node, vals)
    if nums is None:
        return plan
    table = _Values()
    table[vk] = plan
    if plan is _NO_PLAN or any(type(t) is not float for t in nums):
        return table
    # unbacked symbols: Python that decides on one or reads it raises (ir/unbacked.py); a NaN hint, so that code
    # which takes a symbol's hint for a value makes steps that differ from the concrete trace's
    syms = [SymFloat(("int", (((f"u_saved{i}",), 1),)), float("nan")) for i in range(len(nums))]
    symbolic = _traced(node, vals, ngrads, syms, form, _SYMBOLS)
    if symbolic is None or not same_steps(concrete, symbolic, nums, syms):
        return table
    number_slot = {id(s): len(vals) + i for i, s in enumerate(syms)}
    plan = _plan(*symbolic, len(vals) + len(nums), len(node.next_functions), number_slot)
    return table if plan is _NO_PLAN else plan


_SYMBOLS = object()         # (the saved numbers traced as symbols, in a sized trace's key)


def _form(node, vals, nums, ints=True):
    """(the signature's form, rule_traces.form's key and sizes, the saved numbers) for ``_traced`` (``ints``: its
    saved ints of at least 2 sizes of the form); None where the form's params are new and it has had
    NUMBER_VALUES_MAX params' forms (params keyed by value: clamp's bounds, a slope; a reshape's target is a form of
    the sizes, one for every shape)."""
    key, sizes = rule_traces.form(node.shapes, vals, node.params, nums if ints else None)
    base = (node.op, node.needs_grad, node.dtypes, tuple(d.dtype for d in vals),
            None if nums is None else tuple(type(t) for t in nums), key[0], key[1], key[3])
    if key[2] is not None:
        seen = _PLANS.param_values.get(base)
        if seen is None:
            seen = _PLANS.param_values[base] = set()
        if key[2] not in seen:
            if len(seen) >= NUMBER_VALUES_MAX:
                return None
            seen.add(key[2])
    return base + (key[2],), key, sizes, nums


_UNTRACED = object()        # (``_traced`` with ``trace=False``: a trace would be needed)


def _traced(node, vals, ngrads, numbers, form, mode, trace=True, want_plan=False):
    """``node``'s rule traced for ``vals`` as ``_record`` traces it, through a trace of the rule on symbolic sizes
    where one serves the signature's form (``mode``: the saved numbers' value key, or _SYMBOLS) and its guards hold
    at these sizes: that trace's instance at them, no trace (else ``_new_template``).  Saved ints of at least 2 are
    sizes of the form (a mean's count), the mode keeps the other numbers' values.  ``trace=False``: _UNTRACED where
    it would trace.  ``want_plan``: where a trace of the form serves, its Plan at these sizes (no instance)."""
    sig, key, sizes, nums = form
    if not sizes:
        return _record(node, vals, ngrads, numbers) if trace else _UNTRACED
    by_value = mode
    if mode is not _SYMBOLS and key[3] is not None:
        mode = tuple(None if m is not None else _value_key((t,)) for t, m in zip(nums, key[3]))
    skey = (sig, mode)
    templates = _PLANS.sized.get(skey)
    if templates is _DECLINED:
        return None
    if templates is _BY_VALUE:
        form = _form(node, vals, nums, False)
        return None if form is None else _traced(node, vals, ngrads, numbers, form, by_value, trace, want_plan)
    values = rule_traces.values_of(sizes)
    if templates is not None and templates is not _UNSIZED:
        for t in templates:
            if t.env.holds(values):
                if want_plan and numbers is None:
                    plan = _template_plan(t, values, len(vals), len(node.next_functions))
                    if plan is not _NO_PLAN:
                        return plan
                return rule_traces.instance(t, values, numbers)
    if not trace:
        return _UNTRACED
    if templates is _UNSIZED or (templates is not None and len(templates) >= NUMBER_VALUES_MAX):
        return _record(node, vals, ngrads, numbers)
    got = _new_template(node, vals, ngrads, numbers, form, skey, values)
    if got is not _BY_VALUE:
        return got
    form = _form(node, vals, nums, False)
    return None if form is None else _traced(node, vals, ngrads, numbers, form, by_value, True, want_plan)


def _template_plan(t, values, ninputs, nresults):
    """The Plan of template ``t`` at the sizes ``values``: its layout (made once) finished at them."""
    layout = t.layouts.get((ninputs, nresults))
    if layout is None:
        try:
            layout = _layout(*rule_traces.instance(t, None, None), ninputs, nresults, None, True)
        except Exception:
            layout = _NO_PLAN
        t.layouts[(ninputs, nresults)] = layout
    if layout is _NO_PLAN:
        return _NO_PLAN
    try:
        return _finish(layout, ninputs, False, values)
    except Exception:
        return _NO_PLAN


def _new_template(node, vals, ngrads, numbers, form, skey, values):
    """The rule traced on the form's symbols at ``values``: its instance there, kept for the form's later shapes
    (the form's first is checked against the trace on the shapes themselves: the same steps, or the form is traced
    per shape, _UNSIZED); the trace on the shapes where it declines.  _BY_VALUE: the form's saved ints must be
    traced by value (a rule that tells a number from a size by its type, pow's exponent)."""
    sig, key, sizes, nums = form
    sized = _PLANS.sized
    templates = sized.get(skey)
    env, shapes, arrays, params, sym_nums = rule_traces.symbols(key, sizes, node.params, nums)
    symbolic = _record(node, vals, ngrads, sym_nums if numbers is None else numbers, (env, shapes, arrays, params))
    failed = symbolic is None or type(symbolic[1]) not in (tuple, list)
    if failed:
        if numbers is not None:     # (_SYMBOLS: the rule reads its numbers, each value gets a plan of its own)
            if templates is None:
                sized[skey] = _DECLINED
            return None
        t = concrete = None
    else:
        t = rule_traces.Template(env, symbolic, numbers)
        concrete = rule_traces.instance(t, values, numbers)
        if sig not in _PLANS.checked:
            here, concrete = concrete, _record(node, vals, ngrads, numbers)
            nres = len(node.next_functions)
            if concrete is None or type(concrete[1]) not in (tuple, list) or not same_steps(concrete, here, (), ()) \
                    or numbers is None and not rule_traces.same_plan(_plan(*concrete, len(vals), nres),
                                                                     _template_plan(t, values, len(vals), nres)):
                t = None
            else:
                _PLANS.checked.add(sig)
    if t is not None:
        if templates is None:
            templates = sized[skey] = []
        templates.append(t)
        return concrete
    if templates is None:
        if sym_nums is not None:
            sized[skey] = _BY_VALUE
            return _BY_VALUE
        sized[skey] = _UNSIZED
    return _record(node, vals, ngrads, numbers) if failed else concrete


def _value_key(nums):
    """The key of saved numbers' values in a _Values: a float by its bits (-0.0 is not 0.0, and a NaN is found
    again); one number's is its own, several numbers' a tuple."""
    if len(nums) == 1:
        t = nums[0]
        return _bits(t) if type(t) is float else t
    return tuple(_bits(t) if type(t) is float else t for t in nums)


def _value_plan(table, vk, node, vals, ngrads, nums):
    """The plan of the values ``vk`` not in ``table`` yet; _NO_PLAN where the rule runs: it declines, or the
    signature has had NUMBER_VALUES_MAX values traced (a number that changes every step would trace without end)
    and no trace of its form serves these values (a mean's count: a size of the form), or _VALUES_MAX plans."""
    form = _form(node, vals, nums) if len(table) < _VALUES_MAX else None
    if form is None:
        return _NO_PLAN
    recorded = _traced(node, vals, ngrads, None, form, vk, len(table) < NUMBER_VALUES_MAX, True)
    if recorded is _UNTRACED:
        return _NO_PLAN
    plan = table[vk] = _concrete_plan(recorded, node, vals)
    return plan


_VALUES_MAX = 1024          # plans of one signature's values, where traces of its form serve them


def _concrete_plan(recorded, node, vals):
    """The plan of a rule traced on its numbers' values (``_record``'s result, or the Plan a trace of its form
    gave), or _NO_PLAN where it declined."""
    if recorded is None:
        return _NO_PLAN
    if type(recorded) is Plan:
        return recorded
    return _plan(*recorded, len(vals), len(node.next_functions))


def _plan(tr, res, slot_of, ninputs, nresults, number_slot=None):
    """The Plan of trace ``tr`` whose results are ``res`` (``slot_of``: the stand-ins' Vars and their slots;
    ``number_slot``: id of each saved number's symbol -> its slot among the inputs), or _NO_PLAN."""
    try:
        return _build(tr, res, slot_of, ninputs, nresults, number_slot)
    except Exception:
        return _NO_PLAN


def _build(tr, res, slot_of, ninputs, nresults, number_slot):
    layout = _layout(tr, res, slot_of, ninputs, nresults, number_slot)
    return layout if layout is _NO_PLAN else _finish(layout, ninputs, bool(number_slot))


def _layout(tr, res, slot_of, ninputs, nresults, number_slot, sized=False):
    """What of a Plan does not depend on the sizes: (the constants, per step (eqn, its arguments' slots, its
    slot), the results' slots, the first step's slot, the None's); ``sized``: ``tr`` is a rule's trace on symbolic
    sizes, its literals computed from them constants that ``_finish`` puts the sizes in."""
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
        elif type(r) is Tensor and (type(r._data) is np.ndarray or sized and type(r._data) is rule_traces.Fill) \
                and id(r) in tr.created:
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
                        return _NO_PLAN     # (a number computed from a saved one)
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
    return consts, steps, results, first, n


def _no_spec(shape):
    return None


def _finish(layout, ninputs, numbers, values=None):
    """The Plan of ``layout`` (at the sizes ``values``, where it was laid out from a trace on symbolic sizes)."""
    consts, ref, results, first, nothing = layout
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
            where.append((None, None))
            consts[j] = None
            from_const.discard(ninputs + j)
    for op, ins, params, sym, args, n in ref:
        avals = []
        for lit, a, spec in ins:
            if spec is None:
                avals.append(a if lit else Aval(a[0], a[1]))
            else:
                shape = rule_traces.shape_at(spec, values)
                avals.append(Aval(shape, a.dtype, a.weak) if lit else Aval(shape, a[1]))
        if sym:
            params = concretize(params, values)
        entry = _rule_entry(op, None, params, avals)
        impl = entry[6]
        method = _METHOD_STEPS.get(op.name)
        if method is not None and impl is op.impl and len(args) == 1:
            # a view step calls the array's method, its parameter bound once (the impl is a Python lambda)
            impl, kind, a = methodcaller(method[0], params[method[1]]), 1, args[0]
        elif len(args) == 1:
            kind, a = (11 if params else 1), args[0]
        elif len(args) == 2 and not params:
            kind, a = 2, tuple(args)
        else:
            kind, a = 0, tuple(args)
        steps.append((impl, kind, a, params, entry[2], n))
        where.append((op, entry[1]))
        if op.view and args[0] in from_const:
            from_const.add(n)
    fresh = tuple(j for j, r in enumerate(results) if r != nothing and r in from_const)
    return Plan(tuple(steps), consts + [None] * (nothing - first + 1), first, results, fresh, tuple(where), numbers)
