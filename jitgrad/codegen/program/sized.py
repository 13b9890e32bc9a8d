"""A CPU program lowered once for every size: a ``CompiledGraph`` whose plan has symbolic sizes, bound per call's
sizes without running a pass, a layout or an entry build again.

``jit/symbolic_entries.py`` runs the passes, the fusion plan and the layout of a symbolic trace once, with its
``SymInt`` sizes in the shapes (``ir/symbolic.py``): the program's table, its BLAS size parameters, workspace
offsets, fresh outputs' shapes and input offsets hold polynomials over the size symbols, and every decision the
lowering made on sizes (a slot reused, a view's strides) is a guard of its own ``ShapeEnv``; a loop that may
take the worker pool is built parallel-capable and decides per call (``workpool.py``).  Kernels and the C entry
depend on structure only.  ``SizedProgram.bind(sizes)`` then makes the tables of one tuple of sizes:

- the size plan (``SizePlan``): every distinct polynomial of the tables and of the guards (the trace's and the
  lowering's), evaluated, checked and copied into their slots by one native call (``size_fill.py``) into one
  buffer per binding, copied from a template holding the tables' constant entries;
- one workspace per program (``Workspace``), grown to the largest size bound so far (by at least a quarter, so
  slowly growing sizes reallocate rarely) and shared by every binding: calls of one compiled function never
  overlap (they hold the trace lock), and a growth repoints every live binding's workspace slots;
- the C entry's caller (``entry.caller``) over the binding's tables and its fresh outputs' shapes.

A binding is made only where every guard holds (``bind`` answers None otherwise); the caller then lowers again or
builds a concrete program.
"""
from __future__ import annotations

import weakref

import numpy as np

from ...ir.size_plan import SizePlan, float_function, fold_float
from ...ir.symbolic import COMPARISONS, SymInt
from . import entry
from .cpu import ALLOCATIONS, CompiledGraph
from .size_fill import FillLayout, fill_program, float_guard_nodes, size_fill


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
    docstring).  ``names``: the size symbols, in the order ``bind`` takes their values; ``guards``: the
    lowering's ``ShapeEnv.guards``, and ``trace_guards`` the trace's (one native call checks both)."""

    def __init__(self, cg: CompiledGraph, guards, names, trace_guards=()):
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
        # each integer guard ``(v op 0) == want`` allows some signs of v: a 3-bit mask (bit 0: v < 0, 1: v == 0,
        # 2: v > 0) the fill checks; guards on floats (the planner's cost comparisons) are folded where they do
        # not depend on the sizes (ratios of sizes that divide exactly), the rest are closures over the values
        int_guards, float_guards, self._float_guards = [], [], []
        for g, op, want in list(trace_guards) + list(guards):
            cmp = COMPARISONS[op]
            mask = sum(1 << b for b, v in enumerate((-1, 0, 1)) if cmp(v, 0) == want)
            if type(g) is tuple and g[:1] == ("float",):
                e = fold_float(g[1])
                if e[0] == "const":
                    if cmp(e[1], 0) != want:
                        int_guards.append((ref(0), 0))         # (never holds)
                    continue
                nodes = float_guard_nodes(e, ref)
                if nodes is not None:
                    float_guards.append((nodes, mask))
                else:       # (an operator the fill does not evaluate)
                    self._float_guards.append((float_function(e, ref), cmp, want))
            else:
                int_guards.append((ref(g), mask))
        table = [(i, ref(v)) for i, v in enumerate(p.table) if type(v) is SymInt]
        sym_params = [(off, ref(v)) for off, v in p.sym_params]
        offsets = [(slot, ref(off)) for slot, _, off in p.dynamic]
        ws_slots = [(slot, ref(root.offset), ref(off)) for slot, root, off in p.ws_slots]
        read, self._fresh = [ref(p.ws_size)], []
        for r in p.fresh:
            self._fresh.append((len(read), len(read) + len(r.shape), np.dtype(r.dtype.np)))
            read += [ref(d) for d in r.shape]
        self._read = np.array(read, np.intp)
        self.plan = SizePlan(polys)
        self.names = tuple(names)
        n_table = max(len(p.table), 1)
        L = self.layout = FillLayout(n_table, len(polys), len(ws_slots), len(self.names), len(p.params))
        # the template every binding's buffer is copied from: A's constant entries, OFF zero, the parameters
        template = np.zeros(L.words, np.int64)
        for i, v in enumerate(p.table):
            if type(v) is not SymInt:
                template[i] = int(v)
        for slot, arr, off in p.lit_slots:          # (the literals are the program's own arrays)
            template[slot] = arr.ctypes.data + off
        for slot in p.ierr_slots:
            template[slot] = cg._ierr.ctypes.data
        template.view(np.uint8)[8 * L.params:8 * L.params + len(p.params)] = np.frombuffer(bytes(p.params),
                                                                                            np.uint8)
        template[L.ctx + 1], template[L.ctx + 3] = cg.F.ctypes.data, cg._ierr.ctypes.data
        self._template = template
        self._ws_slots = np.array([slot for slot, _, _ in ws_slots], np.intp)
        self._program = fill_program(self.plan, self.names, int_guards, L, table, sym_params,
                                     list(p.param_slots), offsets, ws_slots, float_guards)
        self._program_address = self._program.ctypes.data
        self._fill = size_fill()
        self._entry_fn = entry.entry_function(cg.entry_address)
        self.workspace = Workspace()

    def values(self, sizes):
        """The plan's values at ``sizes`` (in ``names`` order) as a list when every guard holds there, else None
        (the fill's own evaluation: what ``bind`` writes the tables from)."""
        buf = self._template.copy()
        return self._filled(buf, buf.ctypes.data, sizes)

    def _filled(self, buf, address, sizes):
        L = self.layout
        buf[L.sizes:L.params] = sizes
        if self._fill(self._program_address, address, self.workspace.base) != 1:
            return None
        V = buf[L.values:L.ws]
        if self._float_guards:                  # (guards with an operator the fill does not evaluate)
            Vl = V.tolist()
            for fn, cmp, want in self._float_guards:
                if cmp(fn(Vl), 0) != want:
                    return None
        return V

    def bind(self, sizes):
        """``run(*arrays) -> outputs`` for ``sizes`` (ints, in ``names`` order), or None when a guard (the
        trace's or the lowering's) fails there."""
        buf = self._template.copy()
        address = buf.ctypes.data
        V = self._filled(buf, address, sizes)
        if V is None:
            return None
        cg, L = self.cg, self.layout
        A = buf[:L.n_table]
        b = _Binding(A, self._ws_slots, buf[L.ws:L.ctx])
        ws = self.workspace
        ws.bindings.add(b)
        read = V[self._read].tolist()           # the workspace's size, then every fresh output's dims
        ws.ensure(read[0])                      # (a growth repoints every binding, this one too)
        fresh = [(tuple(read[a:z]), dtype) for a, z, dtype in self._fresh]
        run = entry.caller(cg.entry_address, self.program, len(cg.checks), A, cg.F, buf[L.off:L.values],
                           _decline, cg._ierr, cg.step_error, cg.call_lock, fresh=fresh, fn=self._entry_fn,
                           ctx=address + 8 * L.ctx)
        run._binding = (b, buf, ws)
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
