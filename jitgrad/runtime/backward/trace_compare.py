"""Two traces of a vjp rule, or two pullback plans, compared step by step (``pullback_plans``): a rule's trace on
symbols against its trace on values, a form's plan against the plan of the rule's trace at the same sizes."""
from __future__ import annotations

import struct
from functools import partial
from operator import methodcaller

import numpy as np

from ...ir.graph import Lit, Var
from ...ir.symbolic import SymFloat
from ..tensor import Tensor

_bits = struct.Struct("<d").pack


def same_steps(concrete, symbolic, nums, syms) -> bool:
    """Whether two traces of a rule (on the saved numbers ``nums`` and on the symbols ``syms``) are the same steps,
    each symbol where its number is: then the symbolic trace is the rule's for every value of the numbers.  (With
    no numbers: a rule's concrete trace and its symbolic sizes' instance at the same sizes, a value given to both
    the same object.)"""
    tc, rc, slot_c = concrete
    ts, rs, slot_s = symbolic
    if len(tc.eqns) != len(ts.eqns) or len(rc) != len(rs):
        return False
    by_slot = {i: v for v, i in slot_c.items()}
    var = {v: by_slot[i] for v, i in slot_s.items()}       # symbolic trace's Var -> the concrete trace's
    sym_at = {id(s): i for i, s in enumerate(syms)}
    for ec, es in zip(tc.eqns, ts.eqns):
        if ec.op is not es.op or len(ec.ins) != len(es.ins) or len(ec.outs) != len(es.outs):
            return False
        try:
            if ec.params != es.params:
                return False
        except Exception:           # (a symbol in a param decides, and raises; arrays compare elementwise)
            return False
        for a, b in zip(ec.ins, es.ins):
            if type(b) is Var:
                if var.get(b) is not a:
                    return False
            elif type(a) is not Lit or not a.aval == b.aval:
                return False
            elif a.value is b.value:
                continue
            elif type(b.value) is SymFloat:
                i = sym_at.get(id(b.value))
                if i is None or type(a.value) is not float or _bits(a.value) != _bits(nums[i]):
                    return False        # (a number computed from a symbol: the plan would need its expression)
            elif not same_value(a.value, b.value):
                return False
        var.update(zip(es.outs, ec.outs))
    for a, b in zip(rc, rs):
        if a is None or b is None:
            if a is not b:
                return False
        elif type(a) is not Tensor or type(b) is not Tensor:
            return False
        elif type(b._data) is Var:
            if var.get(b._data) is not a._data:
                return False
        elif not same_value(a._data, b._data):
            return False
    return True


def same_plan(p, q) -> bool:
    """Whether two plans make the same calls: the same steps (impls, arguments' slots, params, casts), constants
    (bit for bit) and results (the plan of a rule's trace on its shapes and that of its form's trace there)."""
    if not hasattr(p, "steps") or not hasattr(q, "steps"):      # (no plan: the rule runs)
        return p is q
    if len(p.steps) != len(q.steps) or len(p.pad) != len(q.pad) or (p.first, p.single, p.fresh, p.numbers) != \
            (q.first, q.single, q.fresh, q.numbers) or p.pick.__reduce__() != q.pick.__reduce__():
        return False
    for a, b in zip(p.pad, q.pad):
        if (a is None) != (b is None) or a is not None and not same_value(a, b):
            return False
    for (fa, *ra), (fb, *rb) in zip(p.steps, q.steps):
        try:
            if ra != rb:
                return False
        except Exception:       # (params holding arrays)
            return False
        if fa is not fb and not _same_call(fa, fb):
            return False
    return True


def _same_call(f, g, depth=0) -> bool:
    """Whether two impls of plan steps are the same call: a view's method with its parameter, a function with its
    arguments bound, or functions made per signature (an index's key, a constant's fill, an eager kernel's call
    with its NumPy fallback) of one code over equal values (functions among them compared alike)."""
    if type(f) is methodcaller and type(g) is methodcaller:
        return f.__reduce__() == g.__reduce__()
    if type(f) is partial and type(g) is partial:      # (a sum's reduce, its axes bound)
        return f.func is g.func and f.args == g.args and f.keywords == g.keywords
    code = getattr(f, "__code__", None)
    if code is None or code is not getattr(g, "__code__", None) or f.__closure__ is None or g.__closure__ is None:
        return False
    if f.__defaults__ is not g.__defaults__ and (f.__defaults__ is None or g.__defaults__ is None or not all(
            a is b or same_value(a, b) for a, b in zip(f.__defaults__, g.__defaults__))):
        return False
    for x, y in zip(f.__closure__, g.__closure__):
        a, b = x.cell_contents, y.cell_contents
        if a is b:
            continue
        if isinstance(a, (np.ndarray, np.generic)) and isinstance(b, (np.ndarray, np.generic)):
            if not same_value(np.asarray(a), np.asarray(b)):
                return False
        elif type(a) is type(b) is _FUNCTION and depth < 4:
            if not _same_call(a, b, depth + 1):
                return False
        elif not same_value(a, b):
            return False
    return True


_FUNCTION = type(_same_call)


def same_value(a, b) -> bool:
    """Whether two literals of traces are the same value, bit for bit."""
    if type(a) is not type(b):
        return False
    if type(a) is np.ndarray:
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if type(a) is float:
        return _bits(a) == _bits(b)
    try:
        return bool(a == b)
    except Exception:
        return False
