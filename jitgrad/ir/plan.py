"""The fusion plan: what the planning passes produce and the code generators consume.

A :class:`Plan` is a graph as a sequence of steps, each a :class:`Group` (a fused loop kernel: elementwise eqns
over one iteration space, optionally closed by a reduction), a :class:`RowGroup` (a row-wise chain as one
kernel: several sweeps of each row), a :class:`LoopBatch` (independent groups of one body as one launch: an
optimiser's per-parameter updates) or a single ``Eqn`` (matmul, shape ops, indexing...).  ``ir/passes/fuse.py``
and ``ir/passes/row_chains.py`` build plans; ``codegen/`` lowers them and runs no pass; ``ir/display.py`` shows
them.  This module is vocabulary: it imports only ``graph.py``.

Also here, because both the planner and the code generators price work in it: the cost model, bytes of memory
traffic per element (``OP_BYTES``, ``op_cost``).
"""
from __future__ import annotations

import os

from .graph import Graph, cell_label

REDUCTIONS = ("sum", "amax", "amin")

# Costs per element, in bytes of memory traffic on this kind of machine (AVX-512, 2 cores; measured 2026-11-24:
# B2's fused loop costs 0.53 ns/element on one thread for 2 transcendentals and ~10 plain ops, a 20-byte/element
# copy 0.37 ns): a plain arithmetic op ~0.25 byte, a division or square root ~2, a transcendental ~8.  The planner
# weighs stores against recomputation with it (fuse.py, row_chains.py); the CPU target decides whether a loop's
# work pays for waking the worker threads (codegen/program/layout.py).  sin, cos and tan: ~12 exps each, by the
# instructions of their vectorised loops (Payne-Hanek's reduction in 64-bit lanes; AVX-512, a float32 loop of one
# op: exp 1.9 an element, tanh 2.1, cos 23.3, sin 24.8; AVX2: 4.4, 5.4, 67.8, 70.2; 2026-11-30)
OP_BYTES = {"exp": 8.0, "expm1": 8.0, "log": 8.0, "log1p": 8.0, "tanh": 8.0, "sigmoid": 8.0, "erf": 8.0,
            "sin": 96.0, "cos": 96.0, "tan": 96.0, "pow": 16.0, "div": 2.0, "sqrt": 2.0, "rsqrt": 2.0,
            "getitem": 4.0}         # a gather run as a load (its index loaded, checked, then the element)
PLAIN_OP_BYTES = 0.25


def op_cost(e) -> float:
    """The arithmetic cost of eqn ``e`` per element, in the cost model's unit (bytes of memory traffic)."""
    return OP_BYTES.get(e.op.name, PLAIN_OP_BYTES)


class Group:
    """A fused loop kernel: ``eqns`` over iteration ``shape``, reading ``inputs`` and writing ``outputs``."""

    def __init__(self, shape):
        self.shape = shape
        self.eqns = []
        self.reduce = None        # the closing reduction eqn, if any
        self.inputs = []          # Vars/Lits read from outside at the loop's own index (order of first use)
        self.outputs = []         # Vars written to memory
        # gathers run as loads: ``getitem(x, idx)`` eqns among ``eqns`` whose x and idx the loop reads through
        # the index (not in ``inputs``); scatters close the loop as stores: ``index_put(base, v, idx;
        # accumulate)`` eqns, ``v`` a value of the loop, added into their output (base copied first)
        self.gathers = []
        self.scatters = []
        self.index = 0

    @property
    def all_eqns(self):
        return self.eqns + ([self.reduce] if self.reduce is not None else []) + list(self.scatters)

    @property
    def reads(self) -> list:
        """Every value the step reads: ``inputs``, then the gathers' and scatters' operands (liveness)."""
        extra = [v for e in self.gathers for v in e.ins] + [v for e in self.scatters for v in e.ins]
        return list(self.inputs) + [v for v in extra if v not in self.inputs]

    @property
    def name(self) -> str:
        return f"fused_{self.index}[{','.join(e.op.name for e in self.all_eqns)}]"

    def arith_cost(self) -> float:
        """The arithmetic of one element of the loop, in the cost model's unit (``op_cost``)."""
        return sum(op_cost(e) for e in self.eqns)

    def lines(self) -> str:
        """``train.py:4-6``: the user's lines the group covers, by file name (stable: generated code and its
        cache key may contain it)."""
        locs = [e.loc for e in self.all_eqns if e.loc is not None]
        if not locs:
            return ""
        files = {lo.file for lo in locs}
        lo, hi = min(x.line for x in locs), max(x.line for x in locs)
        f = os.path.basename(next(iter(files))) if len(files) == 1 else "*"
        return f"{f}:{lo}" + (f"-{hi}" if hi != lo else "")

    def where(self) -> str:
        """``lines()`` for people: in a notebook, each cell named as IPython names it (``Cell In[3], lines 4-6``;
        the number changes when a cell is re-run, so it stays out of generated code)."""
        locs = [e.loc for e in self.all_eqns if e.loc is not None]
        files = {lo.file for lo in locs}
        cells = {f: cell_label(f) for f in files}
        if not any(cells.values()):
            return self.lines()
        parts = []
        for f in sorted(files, key=lambda f: (min(x.line for x in locs if x.file == f), f)):
            lo = min(x.line for x in locs if x.file == f)
            hi = max(x.line for x in locs if x.file == f)
            name = cells[f] or os.path.basename(f)
            parts.append(f"{name}, line {lo}" if hi == lo else f"{name}, lines {lo}-{hi}")
        return "; ".join(parts)


class RowOutput:
    """A row value the layout places as a group's reduction result (zero strides along the row axis); a
    ``RowGroup``'s ``reduce``.  It carries the fields of an eqn the layout reads."""
    __slots__ = ("op", "outs", "params", "scope", "loc")

    def __init__(self, var, axis, like):
        self.outs = [var]
        self.params = {"axes": (axis,), "keepdims": True}
        self.op, self.scope, self.loc = like.op, like.scope, like.loc


class RowPass:
    """One sweep of a row: ``eqns`` computed per element (in order), ``reductions`` accumulated, ``loads``:
    stored values read back instead of recomputed, ``stores``: full-shape values written in this pass."""
    __slots__ = ("eqns", "reductions", "loads", "stores")

    def __init__(self):
        self.eqns, self.reductions, self.loads, self.stores = [], [], [], []


class RowGroup(Group):
    """A row-wise chain as one kernel (``ir/passes/row_chains.py``).  ``eqns``: every member eqn (elementwise and
    reductions) in order; ``passes``: the sweeps of one row; ``row_eqns[p]``: row-shaped eqns computed before
    pass ``p`` (``row_eqns[len(passes)]``: after the last); ``row_outputs``: the row values it writes;
    ``columns``: sums over the rows (over every axis but the last), accumulated into their outputs;
    ``reduce``: the row output the layout treats as the group's reduction (a ``RowOutput``); ``cost``: the
    arithmetic per element of its passes, recomputations included."""

    def __init__(self, shape, members, inputs, outputs, passes, row_eqns, designated, like, columns, cost=0.0):
        super().__init__(shape)
        self.eqns = list(members)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.passes = passes
        self.row_eqns = row_eqns
        self.row_shape = tuple(shape[:-1]) + (1,)
        self.row_outputs = [v for v in outputs if v.aval.shape == self.row_shape]
        self.columns = list(columns)        # accumulated row by row into their outputs (the kernel is then serial)
        self.reduce = RowOutput(designated, len(shape) - 1, like)
        self.cost = cost

    @property
    def all_eqns(self):
        return list(self.eqns)

    @property
    def name(self) -> str:
        return f"fused_{self.index}[{','.join(e.op.name for e in self.eqns)}] by rows"


def batching() -> bool:
    """Whether independent loops of one body run as one launch (``LoopBatch`` plans; the CPU target's batched
    write-backs): ``JITGRAD_GROUP_LOOPS``, default on, read per plan so a test can compare both."""
    return os.environ.get("JITGRAD_GROUP_LOOPS", "1") != "0"


class LoopBatch:
    """Independent fusion groups of one scalar body run as one step (``ir/passes/loop_batches.py``): no member
    reads what another writes, so the code generator may run their elements in any order, all of them in one
    launch parallel over (member, chunk).  The step stands where its last member stood."""

    def __init__(self, members):
        self.members = list(members)
        self.index = self.members[0].index

    @property
    def reads(self) -> list:
        """Every value a member reads (liveness: all are read at this step)."""
        out, seen = [], set()
        for g in self.members:
            for v in g.reads:
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        return out

    @property
    def all_eqns(self):
        return [e for g in self.members for e in g.all_eqns]

    @property
    def name(self) -> str:
        return f"batch of {len(self.members)} loops: {self.members[0].name}"

    def where(self) -> str:
        return self.members[0].where()


class Plan:
    """The graph as a sequence of steps: Groups (RowGroups among them), LoopBatches of Groups and single eqns."""

    def __init__(self, graph: Graph, steps):
        self.graph = graph
        self.steps = steps
        self.triangles = {}     # a matmul's result -> the half of it needed (passes/causal.py)

    @property
    def groups(self):
        """Every fusion group, a batch's members included."""
        out = []
        for s in self.steps:
            if isinstance(s, Group):
                out.append(s)
            elif isinstance(s, LoopBatch):
                out += s.members
        return out

    def __str__(self):
        out = []
        for s in self.steps:
            if isinstance(s, LoopBatch):
                out.append(f"  batch of {len(s.members)} loops:")
                out += [f"    {g.name}  over {list(g.shape)}  # {g.where()}" for g in s.members]
            elif isinstance(s, Group):
                out.append(f"  {s.name}  over {list(s.shape)}  # {s.where()}")
            else:
                out.append(f"  {s.op.name}  # {s.loc.short() if s.loc else ''}")
        return "plan {\n" + "\n".join(out) + "\n}"


__all__ = ["Plan", "Group", "RowGroup", "LoopBatch", "batching", "RowPass", "RowOutput", "REDUCTIONS", "OP_BYTES", "PLAIN_OP_BYTES",
           "op_cost"]
