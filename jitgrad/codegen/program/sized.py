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

import weakref

import numpy as np

from ...ir.symbolic import SymInt, _ATOMS, _CMP, _feval
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
    """One tuple of sizes' tables (kept alive by its run function)."""
    __slots__ = ("A", "ws_slots", "__weakref__")

    def __init__(self, A, ws_slots):
        self.A, self.ws_slots = A, ws_slots

    def repoint(self, base):
        for slot, off in self.ws_slots:
            self.A[slot] = base + off


class SizedProgram:
    """``cg`` (a ``CompiledGraph`` of a symbolic plan, its code ready) bound per tuple of sizes (see the module
    docstring); ``guards``: the lowering's ``ShapeEnv.guards``."""

    def __init__(self, cg: CompiledGraph, guards):
        self.cg = cg
        p = self.program = cg.program
        self.guards = [(g, op, want) for g, op, want in guards if not (type(g) is tuple and g[:1] == ("float",))]
        self.float_guards = [(g[1], op, want) for g, op, want in guards if type(g) is tuple and g[:1] == ("float",)]
        polys, index = [], {}

        def ref(x):
            """Index of ``x``'s polynomial (a plain int: a constant one) in the plan's values."""
            poly = x.poly if type(x) is SymInt else ((((), int(x)),) if int(x) else ())
            k = index.get(poly)
            if k is None:
                k = index[poly] = len(polys)
                polys.append(poly)
            return k
        self._guard_refs = [(ref(SymInt(g, 0)), op, want) for g, op, want in self.guards]
        base = []
        self._table = []
        for i, v in enumerate(p.table):
            if type(v) is SymInt:
                self._table.append((i, ref(v)))
                base.append(0)
            else:
                base.append(int(v))
        self._base = np.array(base or [0], np.int64)
        self._params = [(off, ref(v)) for off, v in p.sym_params]
        self._ws = [(slot, ref(root.offset), ref(off)) for slot, root, off in p.ws_slots]
        self._ws_size = ref(p.ws_size)
        self._off = [(slot, ref(off)) for slot, _, off in p.dynamic]
        self._fresh = [([ref(d) for d in r.shape], np.dtype(r.dtype.np)) for r in p.fresh]
        self.plan = SizePlan(polys)
        self.workspace = Workspace()

    def holds(self, values: dict):
        """The plan's values at ``values`` when every guard of the lowering holds there, else None."""
        vals = self.plan(values)
        for k, op, want in self._guard_refs:
            if _CMP[op](vals[k], 0) != want:
                return None
        for expr, op, want in self.float_guards:
            if _CMP[op](_feval(expr, values), 0) != want:
                return None
        return vals

    def bind(self, vals):
        """``run(*arrays) -> outputs`` for the sizes whose plan values are ``vals`` (``holds``' answer)."""
        cg, p = self.cg, self.program
        at = vals.__getitem__
        A = self._base.copy()
        for slot, k in self._table:
            A[slot] = vals[k]
        params = np.frombuffer(bytes(p.params) or b"\0", np.uint8).copy()
        for off, k in self._params:
            params[off:off + 4] = np.frombuffer(np.int32(at(k)).tobytes(), np.uint8)
        for slot, arr, off in p.lit_slots:
            A[slot] = arr.ctypes.data + off
        for slot, off in p.param_slots:
            A[slot] = params.ctypes.data + off
        for slot in p.ierr_slots:
            A[slot] = cg._ierr.ctypes.data
        OFF = np.zeros_like(A)
        for slot, k in self._off:
            OFF[slot] = at(k)
        b = _Binding(A, [(slot, at(r) + at(o)) for slot, r, o in self._ws])
        ws = self.workspace
        ws.bindings.add(b)
        if not ws.ensure(at(self._ws_size)):
            b.repoint(ws.base)
        fresh = [(tuple(at(d) for d in shape), dtype) for shape, dtype in self._fresh]
        run = entry.caller(cg.entry_address, p, len(cg.checks), A, cg.F, OFF, _decline, cg._ierr, cg.step_error,
                           cg.call_lock, fresh=fresh)
        run._binding = (b, params, ws)
        return run


def _decline(*arrays):
    """Inputs the entry cannot take (not C-contiguous): the caller serves the call another way."""
    return None


def lowered_symbols(cg: CompiledGraph) -> bool:
    """Whether ``cg``'s program holds symbolic sizes (so it must be bound per call's sizes, never run as is)."""
    p = cg.program
    return any(type(v) is SymInt for v in p.table) or type(p.ws_size) is SymInt or bool(p.sym_params) \
        or any(type(d) is SymInt for r in p.fresh for d in r.shape)


__all__ = ["SizedProgram", "SizePlan", "Workspace", "lowered_symbols"]
