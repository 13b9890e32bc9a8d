"""A CPU program lowered once for every size: a ``CompiledGraph`` whose plan has symbolic sizes, bound per call's
sizes without running a pass, a layout or an entry build again.

``jit/symbolic_entries.py`` runs the passes, the fusion plan and the layout of a symbolic trace once, with its
``SymInt`` sizes in the shapes (``ir/symbolic.py``): the program's table, its BLAS size parameters, workspace
offsets, fresh outputs' shapes and input offsets hold polynomials over the size symbols, and every decision the
lowering made on sizes (a slot reused, a view's strides) is a guard of its own ``ShapeEnv``; a loop that may
take the worker pool is built parallel-capable and decides per call (``workpool.py``).  Kernels and the C entry
depend on structure only.  ``SizedProgram.bind(sizes)`` then makes the tables of one tuple of sizes:

- the size plan (``SizePlan``): every distinct polynomial of the tables and of the guards (the trace's and the
  lowering's), evaluated, checked and copied into their slots by one native call (``size_fill.py``), which starts
  the binding's buffer as a copy of the lowering's template (the tables' constant entries) and leaves the values
  Python needs (the workspace's size, the dims of fresh outputs whose shapes have symbols) side by side;
- the buffers are rows of a chunk (``_Chunks``: one allocation per 32 bindings, their addresses known without
  asking NumPy), so a binding allocates no array;
- one workspace per program (``Workspace``), grown to the largest size bound so far (by at least a quarter, so
  slowly growing sizes reallocate rarely) and shared by every binding: calls of one compiled function never
  overlap (they hold the trace lock), and a growth repoints the workspace slots of every chunk's rows at once;
- the C entry's caller, made by a maker of callers built once per program (``entry.callers``) from the binding's
  context address and its fresh outputs' shapes (those without symbols made once).

Nothing of it walks an expression or builds a table in Python: a binding is a few dozen bytecodes, counted by
``tests/test_sized_programs.py``.

A binding is made only where every guard holds (``bind`` answers None otherwise); the caller then lowers again or
builds a concrete program.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ...ir.size_plan import SizePlan, float_function, fold_float
from ...ir.symbolic import COMPARISONS, SymInt
from . import entry
from .cpu import ALLOCATIONS, CompiledGraph
from .output_pool import MIN_BYTES, take_by_capacity
from .size_fill import FillLayout, fill_program, float_guard_nodes, size_fill

CHUNK_ROWS = 32     # binding buffers per allocation


class Workspace:
    """The one workspace of a ``SizedProgram``'s bindings: grown, never shrunk.  ``capacity``: the bytes it has
    (a binding compares before calling ``ensure``)."""

    def __init__(self, chunks):
        self.array = None
        self.base = 0
        self.capacity = 0
        self.chunks = chunks        # (_Chunks: every binding's workspace slots, repointed at a growth)

    def ensure(self, nbytes: int):
        """At least ``nbytes`` (64-aligned base); True when it was reallocated (bindings are repointed)."""
        have = self.capacity
        if nbytes <= have:
            return False
        size = max(nbytes, have + have // 4, 64)
        self.array = np.empty(size + 64, np.uint8)
        ALLOCATIONS["workspaces"] += 1
        base = self.array.ctypes.data
        self.base = base + (-base) % 64
        self.capacity = size
        self.chunks.repoint(self.base)
        return True


class _Chunks:
    """The bindings' buffers: rows of ``CHUNK_ROWS`` at a time (a bound caller keeps its chunk alive).  The next
    free row is at ``base + next * row_bytes``; ``next`` moves on after a fill that held there, and at
    ``CHUNK_ROWS`` a ``new_chunk()`` comes."""

    def __init__(self, layout: FillLayout, ws_slots):
        self.words, self.ws_at, self.n_ws = layout.words, layout.ws, len(ws_slots)
        self.ws_slots = np.asarray(ws_slots, np.intp)
        self.live = []      # weak references to every chunk a binding may still call with
        self.chunk, self.base, self.next = None, 0, CHUNK_ROWS
        self.row_bytes = 8 * self.words

    def new_chunk(self):
        """A fresh chunk, not cleared: the fill writes a row whole (the template first) before any call reads it."""
        self.chunk = np.empty((CHUNK_ROWS, self.words), np.int64)
        self.base, self.next = self.chunk.ctypes.data, 0
        self.live = [r for r in self.live if r() is not None] + [weakref.ref(self.chunk)]

    def repoint(self, ws_base: int):
        """Every row's workspace slots at ``ws_base`` plus the row's byte offsets (rows of bindings dropped or not
        made yet get meaningless values, which wrap silently: they are never called, and a fill rewrites them)."""
        if not self.n_ws:
            return
        for r in self.live:
            rows = r()
            if rows is not None:
                rows[:, self.ws_slots] = ws_base + rows[:, self.ws_at:self.ws_at + self.n_ws]


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
        # fresh outputs: a shape without symbols is made once; one with symbols is read back from the fill
        reads, specs, self._sym_fresh = [ref(p.ws_size)], [], []
        for k, r in enumerate(p.fresh):
            dtype = np.dtype(r.dtype.np)
            if any(type(d) is SymInt for d in r.shape):
                self._sym_fresh.append((k, len(reads), len(reads) + len(r.shape), dtype))
                reads += [ref(d) for d in r.shape]
                specs.append(None)
            else:
                specs.append((tuple(int(d) for d in r.shape), dtype))
        self._specs = specs
        self._pooled = [s is not None and math.prod(s[0]) * s[1].itemsize >= MIN_BYTES for s in specs]
        self.plan = SizePlan(polys)
        self.names = tuple(names)
        n_table = max(len(p.table), 1)
        L = self.layout = FillLayout(n_table, len(polys), len(ws_slots), len(self.names), len(p.params),
                                     len(reads))
        fp = self._fp = fill_program(self.plan, self.names, int_guards, L, table, sym_params, list(p.param_slots),
                                     offsets, ws_slots, float_guards, reads)
        # the template every binding's buffer starts as: A's constant entries, OFF zero, the parameters
        template = fp.template
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
        template[L.ctx + 4] = cg.S.ctypes.data
        self._fill = size_fill()
        self._chunks = _Chunks(L, [slot for slot, _, _ in ws_slots])
        self.workspace = Workspace(self._chunks)
        self._callers = entry.callers(self.program, len(cg.checks), _decline, cg._ierr, cg.step_error,
                                      cg.call_lock, entry.entry_function(cg.entry_address), take_by_capacity,
                                      (cg.F, cg._ierr, cg.S))

    def _floats_hold(self) -> bool:
        """After a fill: whether the guards with an operator the fill does not evaluate hold."""
        Vl = self._fp.values.tolist()
        for fn, cmp, want in self._float_guards:
            if cmp(fn(Vl), 0) != want:
                return False
        return True

    def values(self, sizes):
        """The plan's values at ``sizes`` (in ``names`` order) as an array when every guard holds there, else None
        (the fill's own evaluation: what ``bind`` writes the tables from)."""
        buf = np.zeros(self.layout.words, np.int64)
        self._fp.sizes[:] = sizes
        if self._fill(self._fp.address, buf.ctypes.data, self.workspace.base) != 1:
            return None
        return self._fp.values.copy() if not self._float_guards or self._floats_hold() else None

    def bind(self, sizes):
        """``run(*arrays) -> outputs`` for ``sizes`` (ints, in ``names`` order), or None when a guard (the
        trace's or the lowering's) fails there."""
        ch = self._chunks
        if ch.next == CHUNK_ROWS:
            ch.new_chunk()
        address = ch.base + ch.next * ch.row_bytes
        self._fp.sizes[:] = sizes
        if self._fill(self._fp.address, address, self.workspace.base) != 1:
            return None                         # (the row stays free)
        if self._float_guards and not self._floats_hold():
            return None
        ch.next += 1
        read = self._fp.read.tolist()           # the workspace's size, then the dims of fresh outputs with symbols
        ws = self.workspace
        if read[0] > ws.capacity:
            ws.ensure(read[0])                  # (a growth repoints every binding, this one too)
        specs, pooled = self._specs, self._pooled
        if self._sym_fresh:
            specs, pooled = specs.copy(), pooled.copy()
            for k, a, z, dtype in self._sym_fresh:
                shape = tuple(read[a:z])
                specs[k] = (shape, dtype)
                pooled[k] = math.prod(shape) * dtype.itemsize >= MIN_BYTES
        return self._callers(address + 8 * self.layout.ctx, specs, pooled, ch.chunk)


def _decline(*arrays):
    """Inputs the entry cannot take (not C-contiguous): the caller serves the call another way."""
    return None


__all__ = ["SizedProgram", "Workspace"]
