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

import numpy as np

from ...ir.ops.opdef import OpDef
from ...ir.symbolic import SymFloat
from ..op_errors import op_error
from ..tensor import Tensor
from . import rule_traces
from .plan_layout import NO_PLAN as _NO_PLAN, Plan, finish as _finish, layout as _layout, plan_of as _plan, \
    step_avals as _step_avals
from .rule_traces import COUNTS, record as _record  # noqa: F401 - (COUNTS: the tests' count, read here)
from .trace_compare import same_plan, same_steps

_UNSIZED = object()     # a form whose rule traces otherwise on symbolic sizes: traced per shape
_DECLINED = object()    # a form whose rule declines its saved numbers as symbols: planned per value
_BY_VALUE = object()    # a form whose rule declines its saved ints as sizes: traced on their values
NUMBER_VALUES_MAX = 32      # values of the saved numbers planned per signature, where a plan must hold them


class _Plans(dict):
    """Signature -> its plan, _NO_PLAN (the rule runs) or, where saved numbers are planned per value, a _Values;
    ``param_values``: a signature's form less its params -> the params' forms that have plans (at most
    NUMBER_VALUES_MAX: clamp's bounds on a schedule would trace without end); ``sized``: (a signature's form, how its
    numbers are traced) -> the rule's traces on symbolic sizes (rule_traces.Template), _UNSIZED or _DECLINED;
    ``checked``: the forms whose first symbolic trace was checked against a trace on the shapes; ``entries``: the
    forward signatures' own tables of their plans (``Node.plans``: by needs_grad and cotangent); all cleared with
    the plans."""

    def __init__(self):
        super().__init__()
        self.param_values = {}
        self.sized = {}
        self.checked = set()
        self.entries = []

    def clear(self):
        super().clear()
        for mine in self.entries:
            mine.clear()
        self.entries.clear()
        self.param_values.clear()
        self.sized.clear()
        self.checked.clear()


_PLANS = _Plans()
_ERRORS = (ValueError, TypeError, IndexError, FloatingPointError, OverflowError)
_bits = struct.Struct("<d").pack


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
    ngrads = len(gs)
    if ngrads > 1:
        for d in gs[1:]:
            if type(d) is not np.ndarray:
                return None
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
    # the forward signature's entry holds its plans (node.plans): the op, params, shapes, dtypes and the saved
    # numbers' types are the entry's, so only which inputs need a gradient and the cotangent's shape and dtype
    # are looked up (no key of the whole signature built and hashed per node)
    mine = node.plans
    if mine is not None and ngrads == 1:
        local = (node.needs_grad, g.shape, g.dtype)
        plan = mine.get(local)
        if plan is None:
            plan = _signature_plan(node, vals, ngrads, nums)
            if plan is None:
                return None
            if not mine:
                if len(_PLANS.entries) > 20000:
                    _PLANS.clear()
                _PLANS.entries.append(mine)
            mine[local] = plan
    else:
        plan = _signature_plan(node, vals, ngrads, nums)
        if plan is None:
            return None
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
            elif kind == 12:
                out = impl(vals[a[0]], vals[a[1]], **params)
            elif kind == 4:
                out = impl(vals[a[0]], vals[a[1]], vals[a[2]])
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


def _signature_plan(node, vals, ngrads, nums):
    """The plan (or _Values, or _NO_PLAN) of ``node``'s whole signature (the op, its params, which inputs need a
    gradient, the shapes and dtypes of the cotangents and saved values, the types of saved numbers), made where
    new; None where it cannot be had (unhashable params, params over their bound)."""
    gs = vals
    key = (node.op, node.needs_grad, node.shapes, node.dtypes)
    for d in gs[:ngrads]:
        key += (d.shape, d.dtype)
    if nums is not None:
        key += tuple(type(t) for t in nums)
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
    return plan


def _step_error(plan, vals, e):
    """The error of the step that raised ``e`` (the first with no result), as its bind would raise it."""
    for step, op in zip(plan.steps, plan.where):
        if vals[step[5]] is None and op is not None:
            return op_error(op, _step_avals(step, vals), e)
    return e


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
            if t.holds(values):
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
    """The Plan of template ``t`` at the sizes ``values``: its layout (made once) finished at them (one Plan for
    every size where nothing in it depends on them: ``Plan.sizeless``)."""
    shared = t.layouts.get((ninputs, nresults, None))
    if shared is not None:
        return shared
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
        plan = _finish(layout, ninputs, False, values)
    except Exception:
        return _NO_PLAN
    if plan.sizeless:
        t.layouts[(ninputs, nresults, None)] = plan
    return plan


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
                    or numbers is None and not same_plan(_plan(*concrete, len(vals), nres),
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
