"""A CPU program lowered once for every size: a ``CompiledGraph`` whose plan has symbolic sizes, bound per call's
sizes without running a pass, a layout or an entry build again.

``jit/symbolic_entries.py`` runs the passes, the fusion plan and the layout of a symbolic trace once, with its
``SymInt`` sizes in the shapes (``ir/symbolic.py``): the program's table, its BLAS size parameters, workspace
offsets, fresh outputs' shapes and input offsets hold polynomials over the size symbols, and every decision the
lowering made on sizes (a loop on the worker pool, a slot reused, a view's strides) is a guard of its own
``ShapeEnv``.  Kernels and the C entry depend on structure only, so they are the ones a static trace of the same
sizes would build.  ``SizedProgram.bind(values)`` then makes the tables of one tuple of sizes:

- the size plan (``SizePlan``): every distinct polynomial of the tables and the guards' polynomials, evaluated
  once per tuple (atoms and monomials shared), then copied into their slots;
- one workspace per program (``Workspace``), grown to the largest size bound so far (by at least a quarter, so
  slowly growing sizes reallocate rarely) and shared by every binding: calls of one compiled function never
  overlap (they hold the trace lock), and a growth repoints every live binding's workspace slots;
- the C entry's caller (``entry.caller``) over the binding's tables and its fresh outputs' shapes.

A binding is valid only where the lowering's guards hold (``SizedProgram.holds``); the caller builds a
concrete program otherwise.
"""
from __future__ import annotations

import operator
import weakref

import numpy as np

from ...ir.symbolic import SymInt, _ATOMS, _CMP, _constant_of
from . import entry
from .cpu import ALLOCATIONS, CompiledGraph


class SizePlan:
    """Polynomials over size symbols evaluated together: each atom (a symbol, or a ``//`` / ``%`` of
    polynomials) and each monomial once per call of ``__call__(values) -> list of ints``."""

    def __init__(self, polys):
        self.polys = list(polys)
        atoms, order = {}, []

        def need(name):
            if name in atoms:
                return
            spec = _ATOMS.get(name)
            if spec is not None:
                for p in spec[1:]:
                    for m, _ in p:
                        for a in m:
                            need(a)
            atoms[name] = len(order)
            order.append(name)
        for p in self.polys:
            for m, _ in p:
                for a in m:
                    need(a)
        self.atoms = order
        self._index = atoms

    def __call__(self, values: dict) -> list:
        val = {}
        for name in self.atoms:
            v = values.get(name)
            if v is None:
                op, x, y = _ATOMS[name]
                x, y = _poly(x, val), _poly(y, val)
                v = x // y if op == "floordiv" else x % y
            val[name] = v
        return [_poly(p, val) for p in self.polys]


def _poly(p, val) -> int:
    total = 0
    for m, c in p:
        for a in m:
            c *= val[a]
        total += c
    return total


class Workspace:
    """The one workspace of a ``SizedProgram``'s bindings: grown, never shrunk."""

    def __init__(self):
        self.array = None
        self.base = 0
        self.bindings = weakref.WeakSet()

    def ensure(self, nbytes: int):
        """At least ``nbytes`` (64-aligned base); True when it was reallocated (bindings must be repointed)."""
        have = 0 if self.array is None else self.array.nbytes - 64
        if nbytes <= have:
            return False
        size = max(nbytes, have + have // 4, 64)
        self.array = np.empty(size + 64, np.uint8)
        ALLOCATIONS["workspaces"] += 1
        base = self.array.ctypes.data
        self.base = base + (-base) % 64
        for b in list(self.bindings):
            b.repoint(self.base)
        return True


class _Binding:
    """One tuple of sizes' tables (kept alive by its run function): its workspace slots and their byte offsets."""
    __slots__ = ("A", "slots", "offsets", "__weakref__")

    def __init__(self, A, slots, offsets):
        self.A, self.slots, self.offsets = A, slots, offsets

    def repoint(self, base):
        self.A[self.slots] = base + self.offsets


class SizedProgram:
    """``cg`` (a ``CompiledGraph`` of a symbolic plan, its code ready) bound per tuple of sizes (see the module
    docstring); ``guards``: the lowering's ``ShapeEnv.guards``."""

    def __init__(self, cg: CompiledGraph, guards):
        self.cg = cg
        p = self.program = cg.program
        polys, index = [], {}

        def ref(x):
            """Index of ``x``'s polynomial (``x``: a SymInt, an int, or a polynomial) in the plan's values."""
            poly = x if type(x) is tuple else x.poly if type(x) is SymInt else ((((), int(x)),) if int(x) else ())
            k = index.get(poly)
            if k is None:
                k = index[poly] = len(polys)
                polys.append(poly)
            return k
        # guards: by comparison, checked as arrays; guards on floats (the planner's cost comparisons) folded where
        # they do not depend on the sizes (ratios of sizes that divide exactly), the rest as closures
        by_op, self._float_guards = {}, []
        for g, op, want in guards:
            if type(g) is tuple and g[:1] == ("float",):
                e = _fold(g[1])
                if e[0] != "const":
                    self._float_guards.append((_closure(e, ref), _CMP[op], want))
            else:
                refs, wants = by_op.setdefault(op, ([], []))
                refs.append(ref(g))
                wants.append(want)
        self._guards = [(_CMP[op], np.array(r, np.intp), np.array(w, bool)) for op, (r, w) in by_op.items()]
        base = np.array([0 if type(v) is SymInt else int(v) for v in p.table] or [0], np.int64)
        sym = [(i, ref(v)) for i, v in enumerate(p.table) if type(v) is SymInt]
        self._t_slots, self._t_refs = _columns(sym, 2)
        for slot, arr, off in p.lit_slots:          # (the literals are the program's own arrays)
            base[slot] = arr.ctypes.data + off
        for slot in p.ierr_slots:
            base[slot] = cg._ierr.ctypes.data
        self._base = base
        self._param_slots, self._param_offs = _columns(p.param_slots, 2)
        self._params = np.frombuffer(bytes(p.params) or b"\0", np.uint8).copy()
        self._sym_params = [(off, ref(v)) for off, v in p.sym_params]
        self._w_slots, self._w_roots, self._w_offs = _columns(
            [(slot, ref(root.offset), ref(off)) for slot, root, off in p.ws_slots], 3)
        self._ws_size = ref(p.ws_size)
        self._o_slots, self._o_refs = _columns([(slot, ref(off)) for slot, _, off in p.dynamic], 2)
        self._fresh = [([ref(d) for d in r.shape], np.dtype(r.dtype.np)) for r in p.fresh]
        self.plan = SizePlan(polys)
        self.workspace = Workspace()

    def holds(self, values: dict):
        """The plan's values at ``values`` (an int64 array) when every guard of the lowering holds there, else
        None."""
        vals = self.plan(values)
        V = np.array(vals, np.int64)
        for cmp, refs, wants in self._guards:
            if not (cmp(V[refs], 0) == wants).all():
                return None
        for fn, cmp, want in self._float_guards:
            if cmp(fn(vals), 0) != want:
                return None
        return V

    def bind(self, V):
        """``run(*arrays) -> outputs`` for the sizes whose plan values are ``V`` (``holds``' answer)."""
        cg, p = self.cg, self.program
        A = self._base.copy()
        A[self._t_slots] = V[self._t_refs]
        params = self._params.copy()
        for off, k in self._sym_params:
            params[off:off + 4] = np.frombuffer(np.int32(V[k]).tobytes(), np.uint8)
        A[self._param_slots] = params.ctypes.data + self._param_offs
        OFF = np.zeros_like(A)
        OFF[self._o_slots] = V[self._o_refs]
        b = _Binding(A, self._w_slots, V[self._w_roots] + V[self._w_offs])
        ws = self.workspace
        ws.bindings.add(b)
        if not ws.ensure(int(V[self._ws_size])):
            b.repoint(ws.base)
        fresh = [(tuple(int(V[d]) for d in shape), dtype) for shape, dtype in self._fresh]
        run = entry.caller(cg.entry_address, p, len(cg.checks), A, cg.F, OFF, _decline, cg._ierr, cg.step_error,
                           cg.call_lock, fresh=fresh)
        run._binding = (b, params, ws)
        return run


def _columns(rows, n):
    """``n`` index arrays, one per column of ``rows``."""
    if not rows:
        return tuple(np.zeros(0, np.intp) for _ in range(n))
    return tuple(np.array(c, np.intp) for c in zip(*rows))


_FOPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow}


def _fold(e):
    """A SymFloat expression with every part that does not depend on the sizes computed (``("const", x)``)."""
    k = e[0]
    if k == "const":
        return e
    if k == "int":
        c = _constant_of(e[1])
        return e if c is None else ("const", float(c))
    a, b = _fold(e[1]), _fold(e[2])
    if a[0] == "const" and b[0] == "const":
        try:
            return ("const", _FOPS[k](a[1], b[1]))
        except (ZeroDivisionError, OverflowError):
            return (k, a, b)
    if k == "/" and a[0] == "int" and b[0] == "int" and len(a[1]) == 1 and len(b[1]) == 1 \
            and a[1][0][0] == b[1][0][0]:
        # c * m / (d * m): both exact integers (below 2**53), so their correctly rounded quotient is c / d's
        return ("const", a[1][0][1] / b[1][0][1])
    return (k, a, b)


def _closure(e, ref):
    """``fn(plan values) -> float`` computing expression ``e`` (folded), its polynomials read from the plan."""
    k = e[0]
    if k == "const":
        c = e[1]
        return lambda v: c
    if k == "int":
        i = ref(e[1])
        return lambda v: float(v[i])
    fa, fb, op = _closure(e[1], ref), _closure(e[2], ref), _FOPS[k]
    return lambda v: op(fa(v), fb(v))


def _decline(*arrays):
    """Inputs the entry cannot take (not C-contiguous): the caller serves the call another way."""
    return None


def lowered_symbols(cg: CompiledGraph) -> bool:
    """Whether ``cg``'s program holds symbolic sizes (so it must be bound per call's sizes, never run as is)."""
    p = cg.program
    return any(type(v) is SymInt for v in p.table) or type(p.ws_size) is SymInt or bool(p.sym_params) \
        or any(type(d) is SymInt for r in p.fresh for d in r.shape)


__all__ = ["SizedProgram", "SizePlan", "Workspace", "lowered_symbols"]
