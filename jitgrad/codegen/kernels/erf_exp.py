"""One exp for erf and its derivative: a kernel IR rewrite of ``erf(u)`` beside ``exp(-(u*u))``.

erf's vjp is ``exp(-u^2) 2/sqrt(pi)``, so a fused backward through erf (exact GELU's: B9's MLP) computes
``erf_f32(u)`` and ``exp_f32(-(u*u))`` an element, and erf's tail computes that same exp inside (``erf_f32``:
``1 - exp(-u^2) Q(u)`` beyond 0.92).  Both branches run on every vector lane, so that is two exps an element.
Here ``erf(u)`` becomes ``erf_exp(u, e)`` with ``e`` the kernel's own exp (mathlib's ``erf_exp_*``: the same bits
as erf), moved before the erf with the values it is built from when it came after.

Matched: in one statement list, an Assign whose value is the math call ``erf(U)``, and one of ``exp(E)`` at the
same precision, ``E`` being ``-(U * U)`` through variables assigned once in the kernel.  Hoisted values read no
memory (a load might see a store between).
"""
from __future__ import annotations

from . import kernel_ir as ki


def _assign_counts(stmts, counts):
    for s in stmts:
        if isinstance(s, ki.Assign):
            counts[s.var] = counts.get(s.var, 0) + 1
        elif isinstance(s, ki.For):
            counts[s.var] = counts.get(s.var, 0) + 2          # a loop variable is never a single value
            _assign_counts(s.body, counts)
        elif isinstance(s, ki.If):
            _assign_counts(s.then, counts)
            _assign_counts(s.orelse, counts)
        elif isinstance(s, ki.Claim):
            _assign_counts(s.body, counts)
    return counts


def _stable(u: ki.Val, once) -> bool:
    """Whether ``u`` has one value wherever it is read in a kernel pass: it reads no memory and no variable that is
    assigned more than once."""
    return all(w.op != "load" and (w.op != "var" or once(w.attr)) for w in ki.walk_values(u))


def _same(a: ki.Val, b: ki.Val) -> bool:
    return a is b or (a.op == b.op == "var" and a.attr is b.attr)


class _Block:
    """One statement list: its single-assigned variables' defining statements."""

    def __init__(self, stmts, once):
        self.stmts = stmts
        self.defs = {s.var: s for s in stmts if isinstance(s, ki.Assign) and once(s.var)}

    def resolve(self, v: ki.Val) -> ki.Val:
        while v.op == "var" and v.attr in self.defs:
            v = self.defs[v.attr].value
        return v

    def is_exp_of_minus_square(self, v: ki.Val, u: ki.Val, prec) -> bool:
        if v.op != "math" or v.attr[0] != "exp" or v.attr[1] != prec:
            return False
        neg = self.resolve(v.args[0])
        if neg.op != "neg":
            return False
        sq = self.resolve(neg.args[0])
        return sq.op == "bin" and sq.attr == "*" and _same(sq.args[0], u) and _same(sq.args[1], u)

    def needs(self, value: ki.Val, after: int, upto: int):
        """The statements at index > ``after`` of this list that ``value`` is built from (transitively), in list
        order; None when one of them (or ``value``) reads memory, or a variable that ``stmts[after:upto]`` assigns
        and that is not among them."""
        index = {id(s): i for i, s in enumerate(self.stmts)}
        assigned = _assign_counts(self.stmts[after:upto], {})
        found, stack = {}, [value]
        while stack:
            for w in ki.walk_values(stack.pop()):
                if w.op == "load":
                    return None
                if w.op != "var":
                    continue
                s = self.defs.get(w.attr)
                if s is not None and index[id(s)] > after:
                    if index[id(s)] >= upto:        # read before its assignment (a previous pass's value)
                        return None
                    if id(s) not in found:
                        found[id(s)] = s
                        stack.append(s.value)
                elif w.attr in assigned:
                    return None
        return sorted(found.values(), key=lambda s: index[id(s)])


def share_exp(kir: ki.KernelIR) -> int:
    """Rewrite ``kir`` in place (see the module docstring); returns how many erfs now take a kernel's exp."""
    if not _has_erf(kir.body):
        return 0            # (most kernels: no walk over their statements)
    counts = _assign_counts(kir.body, {})
    return _rewrite(kir.body, lambda v: counts.get(v) == 1)


def _is_erf(s) -> bool:
    return isinstance(s, ki.Assign) and s.value.op == "math" and s.value.attr[0] == "erf"


def _has_erf(stmts) -> bool:
    for s in stmts:
        if _is_erf(s) or (isinstance(s, (ki.For, ki.Claim)) and _has_erf(s.body)) \
                or (isinstance(s, ki.If) and (_has_erf(s.then) or _has_erf(s.orelse))):
            return True
    return False


def _rewrite(stmts, once) -> int:
    done = 0
    for s in stmts:
        if isinstance(s, ki.For):
            done += _rewrite(s.body, once)
        elif isinstance(s, ki.If):
            done += _rewrite(s.then, once) + _rewrite(s.orelse, once)
        elif isinstance(s, ki.Claim):
            done += _rewrite(s.body, once)
    erfs = [s for s in stmts if _is_erf(s)]
    b = _Block(stmts, once) if erfs else None
    for s in erfs:
        v = s.value
        u, prec = v.args[0], v.attr[1]
        if not _stable(u, once):
            continue
        at = stmts.index(s)
        for j, t in enumerate(stmts):
            if t is s or not isinstance(t, ki.Assign) or t.var not in b.defs \
                    or not b.is_exp_of_minus_square(t.value, u, prec):
                continue
            if j > at:
                moved = b.needs(t.value, at, j)
                if moved is None:
                    continue
                moved.append(t)
                for m in moved:
                    stmts.remove(m)
                stmts[at:at] = moved
            s.value = ki.math_call("erf_exp", prec, [u, ki.read(t.var)], v.t, v.attr[2])
            done += 1
            break
    return done


__all__ = ["share_exp"]
