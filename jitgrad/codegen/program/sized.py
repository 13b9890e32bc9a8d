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

from ...ir.size_plan import SizePlan, float_function, fold_float
from ...ir.symbolic import COMPARISONS, SymInt
from . import entry
from .cpu import ALLOCATIONS, CompiledGraph


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
                e = fold_float(g[1])
                if e[0] != "const":
                    self._float_guards.append((float_function(e, ref), COMPARISONS[op], want))
            else:
                refs, wants = by_op.setdefault(op, ([], []))
                refs.append(ref(g))
                wants.append(want)
        # each guard ``(v op 0) == want`` allows some signs of v: a 3-bit mask (bit 0: v < 0, 1: v == 0, 2: v > 0),
        # so every integer guard is checked by one lookup of the values' signs
        g_refs, g_masks = [], []
        for op, (r, w) in by_op.items():
            cmp = COMPARISONS[op]
            for k, want in zip(r, w):
                g_refs.append(k)
                g_masks.append(sum(1 << b for b, v in enumerate((-1, 0, 1)) if cmp(v, 0) == want))
        self._g_refs, self._g_masks = np.array(g_refs, np.intp), np.array(g_masks, np.int64)
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
        self._sp_refs = np.array([ref(v) for _, v in p.sym_params], np.intp)
        self._sp_bytes = (np.array([off for off, _ in p.sym_params], np.intp).reshape(-1, 1) + np.arange(4)).astype(
            np.intp)
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
        V = vals = self.plan(values)
        if len(self._g_refs) and not ((self._g_masks >> (np.sign(V[self._g_refs]) + 1)) & 1).all():
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
        if len(self._sp_refs):      # each symbolic int32 parameter's four bytes (native order) at its offset
            params[self._sp_bytes] = V[self._sp_refs].astype(np.int32).view(np.uint8).reshape(-1, 4)
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


def _decline(*arrays):
    """Inputs the entry cannot take (not C-contiguous): the caller serves the call another way."""
    return None


__all__ = ["SizedProgram", "Workspace"]
