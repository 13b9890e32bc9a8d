"""A vjp rule traced for ``pullback_plans``: on stand-ins of a node's arrays, or on symbolic sizes, and two traces
compared step by step.

``record`` traces a rule (``tracer.Trace`` with ``fused``: a fused op stays one op, as eager dispatch runs it) on
stand-ins of the arrays (``trace_compare`` compares two traces): a rule the plan cannot hold declines (None): one that reads a value (the tracer refuses:
``TracedValueError``), meets a tensor from outside its context, warns, or fails in any other way while traced.  Only
the tracing thread's warnings count (``_WARNED``), and another thread's warning is handled as if no trace ran.
``COUNTS["traces"]`` counts the rules traced (tests check that later steps trace none).

A rule traced once on symbolic sizes serves every shape of its signature's *form*: the same ranks, dtypes and params,
each size of at least 2 a symbol (sizes equal in the call one symbol, as torch's duck sizing; 0 and 1 kept, as
torch specialises them), a param's int that equals one of the sizes (a reshape's target, an expand's) that symbol.
Decisions the rule takes on a size are guards (``ir/symbolic.py``): a call whose sizes break one is traced again.
A trace instantiated at a call's sizes is the rule's concrete trace at them (the same eqns, params and literals, the
sizes put in), so the plan built from it is the plan a trace on those shapes would give: the same NumPy calls.
"""
from __future__ import annotations

import threading
import warnings

import numpy as np

from ...ir import dtypes as dt
from ...ir import symbolic
from ...ir.graph import Lit, Var
from ...ir.ops import OPS, Aval
from ...ir.ops.opdef import RuleCtx
from ...ir.symbolic import ShapeEnv, SymFloat, SymInt, concretize, evaluate, has_symbols, is_symbolic
from ...tracer.trace import Trace
from .. import grad_mode
from ..dispatch import _bind
from ..tensor import Tensor

_FROM_NP = dt._FROM_NP
_GM = grad_mode.STATE
COUNTS = {"traces": 0}


class _Mark:
    """A param's int that is the signature's k-th size, in a form's key (a plain int there would be a value)."""

    __slots__ = ("k",)

    def __init__(self, k):
        self.k = k

    def __repr__(self):
        return f"<size {self.k}>"


_MARKS: list = []


def _mark(k):
    while len(_MARKS) <= k:
        _MARKS.append(_Mark(len(_MARKS)))
    return _MARKS[k]


def form(shapes, arrays, params, nums=None):
    """The form of a signature: (key, sizes).  ``sizes``: its distinct sizes of at least 2 in order of first
    appearance (in ``shapes``, then the arrays' shapes, then the saved ints ``nums`` of at least 2: a mean's count,
    then params); ``key``: the shapes with the k-th size as ``-1 - k``, the arrays' shapes alike, ``params`` (a
    dict, or None) with each int equal to one of the sizes as that size's mark, and per saved number its size's
    mark, or None (a float, a bool, an int below 2: traced on its value)."""
    index = {}
    out = []
    done = {}       # a shape met before in this signature -> its form (a saved input's shape is the node's)
    for group in (shapes, [a.shape for a in arrays]):       # (plain loops: a new shape's cost, on the hot path)
        forms = []
        for s in group:
            if s is None:
                forms.append(None)
                continue
            f = done.get(s)
            if f is None:
                f = []
                for n in s:
                    if n >= 2:
                        k = index.get(n)
                        if k is None:
                            k = index[n] = len(index)
                        n = -1 - k
                    f.append(n)
                f = done[s] = tuple(f)
            forms.append(f)
        out.append(tuple(forms))
    marks = None
    if nums is not None:
        marks = []
        for t in nums:
            if type(t) is int and t >= 2:
                k = index.get(t)
                if k is None:
                    k = index[t] = len(index)
                marks.append(_mark(k))
            else:
                marks.append(None)
        marks = tuple(marks)
    ps = tuple((k, v if k in _AXES else _put(v, index, _mark)) for k, v in params.items()) if params else None
    return (out[0], out[1], ps, marks), list(index)


# params whose ints are axes, never sizes: kept by value (an axis 2 beside a size 2 would split a form in two)
_AXES = frozenset(("axis", "axes", "perm", "naxes", "dim", "dims", "keepdims"))


def _put(x, index, make):
    """``x`` (a param: ints, tuples, lists, dicts) with each int that is a size replaced by ``make(its index)``."""
    t = type(x)
    if t is int:
        k = index.get(x) if x >= 2 else None
        return x if k is None else make(k)
    if t is tuple:
        return tuple(_put(v, index, make) for v in x)
    if t is list:
        return [_put(v, index, make) for v in x]
    if t is dict:
        return {k: _put(v, index, make) for k, v in x.items()}
    return x


def symbols(key, sizes, params, nums):
    """For a trace of form ``key`` at ``sizes``: (its ShapeEnv, the symbolic node shapes, the arrays' symbolic
    shapes, the symbolic ``params``, the saved numbers ``nums`` with each that is a size its symbol, or None where
    none is), the k-th size the symbol ``s{k}``."""
    env = ShapeEnv()
    syms = [env.symbol(n, ("size", k)) for k, n in enumerate(sizes)]

    def shape(s):
        return tuple(syms[-1 - n] if n < 0 else n for n in s)

    node_shapes = tuple(None if s is None else shape(s) for s in key[0])
    index = {n: k for k, n in enumerate(sizes)}
    if params:
        params = {k: v if k in _AXES else _put(v, index, syms.__getitem__) for k, v in params.items()}
    numbers = None
    if key[3] is not None and any(m is not None for m in key[3]):
        numbers = [t if m is None else syms[m.k] for t, m in zip(nums, key[3])]
    return env, node_shapes, [shape(s) for s in key[1]], params, numbers


def values_of(sizes):
    """The symbols' values for ``ShapeEnv.holds`` and ``instance``."""
    return {f"s{k}": n for k, n in enumerate(sizes)}


class Template:
    """A rule traced on symbolic sizes, laid out for ``instance``: its ``env`` (the guards), its values (the
    stand-ins, then the eqns' outputs: per value its aval where it has no symbol, else the form of its shape), its
    eqns (op, inputs: a value's index or a literal, outputs' indices, params and whether they hold symbols), the
    constants of one value it made of symbolic shapes, its results, the stand-ins' slots, the ids of the constants
    it made (kept alive in ``keep``), and the symbols of the saved numbers it was traced on (or None)."""

    __slots__ = ("env", "specs", "eqns", "fills", "res", "slots", "created", "keep", "numbers", "layouts", "checks")

    def __init__(self, env, recorded, numbers):
        tr, res, slot_of = recorded
        self.env, self.created, self.keep, self.numbers = env, tr.created, tr.keep, numbers
        # the guards a size of the form could break (``holds``): the others hold at every size of it
        # (None: one is on a float, which ShapeEnv.holds evaluates)
        self.checks = None if any(p[:1] == ("float",) for p, _, _ in env.guards) else [
            (p, symbolic.COMPARISONS[op], expected) for p, op, expected in env.guards
            if not _implied(p, op, expected, env.hints)]
        self.layouts = {}       # (inputs, results) -> pullback_plans' layout of its plan (made on first use)
        index = {}
        specs = self.specs = []

        def at(v):
            i = index.get(v)
            if i is None:
                i = index[v] = len(specs)
                a = v.aval
                specs.append((a, shape_spec(a.shape)))
            return i
        self.slots = [(at(v), i) for v, i in slot_of.items()]
        folded = _filled_constants(tr.eqns)
        self.fills, self.eqns = [], []
        for e in tr.eqns:
            fold = folded.get(e.outs[0]) if e.outs else None
            if fold is _DROPPED:
                continue
            if fold is not None:
                self.fills.append((at(e.outs[0]), fold))
                continue
            ins = [at(v) if type(v) is Var else (v, is_symbolic(v.value) or has_symbols(v.aval.shape)) for v in e.ins]
            self.eqns.append((e.op, ins, [at(v) for v in e.outs], e.params, has_symbols(e.params)))
        self.res = [(0, at(r._data)) if type(r) is Tensor and type(r._data) is Var else (1, r) for r in res] \
            if type(res) in (tuple, list) else None


    def holds(self, values) -> bool:
        """Whether the trace serves the sizes ``values``: every guard a size of the form could break holds."""
        if self.checks is None:
            return self.env.holds(values)
        for p, cmp, expected in self.checks:
            if cmp(evaluate(p, values), 0) != expected:
                return False
        return True


def _implied(p, op, expected, names) -> bool:
    """Whether guard ``(p op 0) == expected`` holds at every size of its trace's form, whose symbols (``names``)
    are each at least 2 (sizes 0 and 1 are no symbols) and two symbols never equal (equal sizes are one symbol):
    a polynomial whose terms all grow with every symbol (all non-constant coefficients of one sign) has that sign
    everywhere if it has it where every symbol is 2; ``s_i - s_j`` is never 0."""
    if type(p) is not tuple or not p or p[0] == "float":
        return False
    signs = set()
    least = 0
    for m, c in p:
        for a in m:
            if a not in names:
                return False        # (a floordiv or mod atom, or another symbol: not decided here)
        if m:
            signs.add(c > 0)
        least += c * 2 ** len(m)
    if signs == {True} and least > 0:
        sign = 1
    elif signs == {False} and least < 0:
        sign = -1
    elif len(p) == 2 and sorted(c for _, c in p) == [-1, 1] and all(len(m) == 1 for m, _ in p) and op in ("==", "!="):
        sign = 1                    # (nonzero: the only question == and != ask)
    else:
        return False
    return symbolic.COMPARISONS[op](sign, 0) == expected


def _dim(d):
    """A dim of a symbolic shape for ``instance``: (0, an int), (1, a symbol's name: its value), (2, a polynomial)."""
    if type(d) is not SymInt:
        return 0, d
    p = d.poly
    if len(p) == 1 and p[0][1] == 1 and len(p[0][0]) == 1 and p[0][0][0].startswith("s"):
        return 1, p[0][0][0]
    return 2, p


class _Eqn:
    """An eqn of an Instance: what ``pullback_plans._build`` and ``same_steps`` read of one."""

    __slots__ = ("op", "ins", "outs", "params")

    def __init__(self, op, ins, outs, params):
        self.op, self.ins, self.outs, self.params = op, ins, outs, params


class Instance:
    """A Template at one call's sizes: what ``pullback_plans._build`` and ``same_steps`` read of a Trace."""

    __slots__ = ("eqns", "created", "keep")

    def __init__(self, eqns, created, keep):
        self.eqns, self.created, self.keep = eqns, created, keep


def instance(t: Template, values, numbers):
    """``t`` at the sizes ``values``, its saved numbers' symbols replaced by ``numbers`` (that trace's own): a
    recorded trace as ``record`` gives it, (trace, results, stand-in slots).  A constant the rule made of a
    symbolic shape (``new_zeros``: a 0-d constant broadcast and copied) is the array it makes of a plain shape
    (``values`` None: the trace on the symbols, such a constant a ``Fill``)."""
    if values is None:
        return _symbolic(t)
    swap = {id(s): n for s, n in zip(t.numbers, numbers)} if t.numbers else None
    vs = []
    for a, spec in t.specs:
        if spec is not None:
            a = Aval(shape_at(spec, values), a.dtype, a.weak)
        vs.append(Var(a))
    for i, value in t.fills:
        a = vs[i].aval
        vs[i] = Lit(np.full(a.shape, value, a.dtype.np), Aval(a.shape, a.dtype))
    eqns = []
    for op, ins, outs, params, sym in t.eqns:
        args = []
        for v in ins:
            if type(v) is int:
                v = vs[v]
            elif v[1]:
                v = v[0]
                val = v.value
                if swap is not None and id(val) in swap:
                    val = swap[id(val)]
                elif type(val) is SymFloat or type(val) is SymInt:
                    try:
                        val = concretize(val, values)
                    except KeyError:        # a number computed from a saved number's symbol: kept (no plan takes it)
                        pass
                a = v.aval
                v = Lit(val, Aval(concretize(a.shape, values), a.dtype, a.weak) if has_symbols(a.shape) else a)
            else:
                v = v[0]
            args.append(v)
        eqns.append(_Eqn(op, args, [vs[i] for i in outs], concretize(params, values) if sym else params))
    created, keep = t.created, t.keep
    res = None
    if t.res is not None:
        res = []
        for kind, r in t.res:
            if kind == 0:
                v = vs[r]
                if type(v) is Lit:          # (a constant the rule returns)
                    r = Tensor._make(v.value)
                    created, keep = created | {id(r)}, keep + [r]
                else:
                    r = Tensor._make(v)
            res.append(r)
    return Instance(eqns, created, keep), res, {vs[i]: k for i, k in t.slots}


def _symbolic(t: Template):
    vs = [Var(a) for a, _ in t.specs]
    for i, value in t.fills:
        a = vs[i].aval
        vs[i] = Lit(Fill(a.shape, value, a.dtype.np), Aval(a.shape, a.dtype))
    eqns = [_Eqn(op, [vs[v] if type(v) is int else v[0] for v in ins], [vs[i] for i in outs], params)
            for op, ins, outs, params, _ in t.eqns]
    created, keep, res = t.created, t.keep, None
    if t.res is not None:
        res = []
        for kind, r in t.res:
            if kind == 0:
                v = vs[r]
                r = Tensor._make(v.value if type(v) is Lit else v)
                if type(v) is Lit:          # (a constant the rule returns)
                    created, keep = created | {id(r)}, keep + [r]
            res.append(r)
    return Instance(eqns, created, keep), res, {vs[i]: k for i, k in t.slots}


class Fill:
    """A constant of one value that a rule made of a symbolic shape, in its trace on the symbols."""

    __slots__ = ("shape", "value", "dtype")

    def __init__(self, shape, value, dtype):
        self.shape, self.value, self.dtype = shape, value, dtype


def concrete(x, values):
    """A constant or params of a trace on symbolic sizes at the sizes ``values``."""
    t = type(x)
    if t is Fill:
        return np.full(concretize(x.shape, values), x.value, x.dtype)
    if t is SymInt or t is SymFloat or (t is not np.ndarray and has_symbols(x)):
        return concretize(x, values)
    return x


def is_sized(x) -> bool:
    """Whether a constant of a trace on symbolic sizes takes the sizes (``concrete`` makes it anew per size)."""
    t = type(x)
    return t is Fill or t is SymInt or t is SymFloat or (t is not np.ndarray and has_symbols(x))


def shape_spec(shape):
    """A symbolic shape for ``shape_at`` (its dims as ``_dim`` gives them), None for a plain one."""
    return tuple(_dim(d) for d in shape) if has_symbols(shape) else None


def shape_at(spec, values) -> tuple:
    """The shape ``spec`` stands for at the sizes ``values``."""
    shape = []
    for k, d in spec:
        shape.append(d if k == 0 else values[d] if k == 1 else evaluate(d, values))
    return tuple(shape)


_DROPPED = object()


def _filled_constants(eqns):
    """The constants of one value a trace made of symbolic shapes (``runtime/symbolic_values.filled``: ``copy`` of
    ``broadcast_to`` of a 0-d constant): the copy's output -> the value, the broadcast's -> _DROPPED."""
    out = {}
    uses = {}
    for e in eqns:
        for v in e.ins:
            if type(v) is Var:
                uses[v] = uses.get(v, 0) + 1
    by_out = {}
    for e in eqns:
        name = e.op.name
        if name == "broadcast_to" and type(e.ins[0]) is Lit and type(e.ins[0].value) is np.ndarray \
                and e.ins[0].value.ndim == 0 and has_symbols(e.outs[0].aval.shape):
            by_out[e.outs[0]] = e.ins[0].value
        elif name == "copy" and len(e.ins) == 1 and e.ins[0] in by_out and uses.get(e.ins[0]) == 1 \
                and e.outs[0].aval.dtype.np == by_out[e.ins[0]].dtype:
            out[e.ins[0]] = _DROPPED
            out[e.outs[0]] = by_out[e.ins[0]]
    return out


class _Outside(Exception):
    """The rule met a concrete tensor that is not one of its context's values: its value would be baked in."""


def _outside(t):
    raise _Outside()


def _stand_in(d):
    return Tensor._make(Var(Aval(tuple(d.shape), _FROM_NP[d.dtype])))


def _ctx_bind(opname, *args, **params):
    return _bind(OPS[opname], args, params)


def record(node, vals, ngrads, numbers, sized=None):
    """``node``'s rule traced on stand-ins of ``vals`` (the arrays ``pullback_plans.pullback`` collected, in its
    order) and on ``numbers`` in place of its saved numbers (None: the numbers themselves): (trace, results, stand-in
    slots), or None where the rule cannot be traced (it failed, or warned in this thread).  ``sized``: (a ShapeEnv, the node's
    shapes, the arrays' shapes, the params), symbolic: the rule is traced on them, its decisions on sizes guards in
    that ShapeEnv."""
    COUNTS["traces"] += 1
    op = node.op
    if sized is None:
        env, shapes, params = None, node.shapes, node.params
        syms = [_stand_in(d) for d in vals]
    else:
        env, shapes, arrays, params = sized
        syms = [Tensor._make(Var(Aval(s, _FROM_NP[d.dtype]))) for d, s in zip(vals, arrays)]
    slot_of = {t._data: i for i, t in enumerate(syms)}
    k = ngrads
    j = 0
    inputs = []
    for t in node.inputs:
        if isinstance(t, Tensor):
            t = syms[k]
            k += 1
        elif numbers is not None and t is not None:
            t = numbers[j]
            j += 1
        inputs.append(t)
    outputs = []
    for t in node.outputs:
        if t is not None:
            t = syms[k]
            k += 1
        outputs.append(t)
    c = RuleCtx()
    c.op, c.inputs, c.outputs, c.shapes, c.dtypes = op, tuple(inputs), tuple(outputs), shapes, node.dtypes
    c.params, c.needs_grad, c.bind, c.transposer = params, node.needs_grad, _ctx_bind, None
    tr = Trace()
    tr.fused = True
    tr.on_capture = _outside
    prev = _GM.grad_enabled
    _GM.grad_enabled = False
    watch = _WATCH
    was = watch.on, watch.warned
    watch.on, watch.warned = True, False
    active = symbolic.ACTIVE
    prev_env, active.env = active.env, env
    try:
        _watch_warnings()
        with tr:
            res = op.vjp(c, *syms[:ngrads])
        if watch.warned:
            return None         # (the rule runs, and warns, at every call)
        return tr, res, slot_of
    except Exception:
        tr.abort()
        return None
    finally:
        active.env = prev_env
        watch.on, watch.warned = was
        _GM.grad_enabled = prev


class _Watch(threading.local):
    def __init__(self):
        self.on = False         # this thread traces a rule
        self.warned = False     # ... and a warning was given in this thread meanwhile


_WATCH = _Watch()


class _TracingThread:
    """The ``module`` pattern of the warnings filter ``_WARNED``: matches in a thread that traces a rule (and notes
    that the rule warned there), in no other."""

    __slots__ = ()

    def match(self, module):
        w = _WATCH
        if w.on:
            w.warned = True
            return True
        return False


# First among the process's warnings filters while a rule is traced: a warning the tracing thread gives is noted and
# not shown (the rule then runs, and warns, at every call); one from another thread passes it by to the filters the
# user set.  (warnings.catch_warnings would swap the process's filters and showwarning for the trace's length: it
# took, or swallowed, other threads' warnings, and an overlapping window in another thread, Numba's compiles in the
# eager kernel build thread, could restore them after the trace.)  A warning the registry has already shown under
# the user's filters is not seen: the rule would not show it again either.
_WARNED = ("ignore", None, Warning, _TracingThread(), 0)


def _watch_warnings():
    filters = warnings.filters
    if not filters or filters[0] is not _WARNED:
        try:
            filters.remove(_WARNED)
        except ValueError:
            pass
        filters.insert(0, _WARNED)
