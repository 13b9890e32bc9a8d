"""Fusion planning: group runs of elementwise eqns over one iteration space into loop kernels.

A group is a maximal run of consecutive elementwise eqns (in the graph's order) whose outputs share one
shape, the iteration space; inputs of smaller shapes are broadcast by index arithmetic, not materialised.
A reduction (sum/amax/amin) whose input has the group's shape joins the group: the producers are inlined
into the reduction loop, and later eqns over the same space that do not read the reduction's result join the
same loop too.  So a backward that only needs elementwise values of its forward runs in the forward's pass
(B2's loss and both gradients: one read of x, w, b and one write of each gradient), and those values are
recomputed in registers instead of stored and reloaded.  Everything else (matmul -> BLAS, shape ops, indexing) is a step of its own.
A value computed inside a group is written to memory only if something outside the group reads it.
"""
from __future__ import annotations

from ..graph import Graph, Var, cell_label
from .schedule import schedule

REDUCTIONS = ("sum", "amax", "amin")

# at most this many eqns in one loop: LLVM's time on one function grows faster than its size (a 200-eqn loop with
# 100 inlined tanh took 7 s to build, a 1,000-op chain 86 s), while chunks of a long chain repeat: the same
# kernel text, compiled once.  Each cut costs one store and one load of the value crossing it.
MAX_GROUP_EQNS = 48


class Group:
    """A fused loop kernel: ``eqns`` over iteration ``shape``, reading ``inputs`` and writing ``outputs``."""

    def __init__(self, shape):
        self.shape = shape
        self.eqns = []
        self.reduce = None        # the closing reduction eqn, if any
        self.inputs = []          # Vars/Lits read from outside (order of first use)
        self.outputs = []         # Vars written to memory
        self.index = 0

    @property
    def all_eqns(self):
        return self.eqns + ([self.reduce] if self.reduce is not None else [])

    @property
    def name(self) -> str:
        return f"fused_{self.index}[{','.join(e.op.name for e in self.all_eqns)}]"

    def lines(self) -> str:
        """``train.py:4-6``: the user's lines the group covers, by file name (stable: generated code and its
        cache key may contain it)."""
        locs = [e.loc for e in self.all_eqns if e.loc is not None]
        if not locs:
            return ""
        import os
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
        import os
        parts = []
        for f in sorted(files, key=lambda f: min(x.line for x in locs if x.file == f)):
            lo = min(x.line for x in locs if x.file == f)
            hi = max(x.line for x in locs if x.file == f)
            name = cells[f] or os.path.basename(f)
            parts.append(f"{name}, line {lo}" if hi == lo else f"{name}, lines {lo}-{hi}")
        return "; ".join(parts)


class Plan:
    """The graph as a sequence of steps: Groups and single eqns."""

    def __init__(self, graph: Graph, steps):
        self.graph = graph
        self.steps = steps

    @property
    def groups(self):
        return [s for s in self.steps if isinstance(s, Group)]

    def __str__(self):
        out = []
        for s in self.steps:
            if isinstance(s, Group):
                out.append(f"  {s.name}  over {list(s.shape)}  # {s.where()}")
            else:
                out.append(f"  {s.op.name}  # {s.loc.short() if s.loc else ''}")
        return "plan {\n" + "\n".join(out) + "\n}"


def _fusable(e) -> bool:
    # broadcast_to is elementwise too: the loop reads its input through broadcast indexing
    return (e.op.family == "elementwise" and e.op.scalar is not None or e.op.name == "broadcast_to") \
        and len(e.outs) == 1


def _parallel_reduction(e, rank) -> bool:
    """Whether the loop of reduction ``e`` can run in parallel (loops.gen_group: a full sum, or a reduction that
    keeps the outer axis): only then may later eqns join its loop, which would otherwise lose their threads."""
    axes = set(e.params["axes"])
    return (len(axes) == rank and e.op.name == "sum") or 0 not in axes


def plan(graph: Graph) -> Plan:
    eqns = schedule(graph)      # the trace's order, scalars hoisted and elementwise eqns sunk to their users
    users = {}
    for i, e in enumerate(eqns):
        for v in e.ins:
            if isinstance(v, Var):
                users.setdefault(v, set()).add(i)
    outs = {v for v in graph.outputs if isinstance(v, Var)}
    steps = []
    cur = None
    where = {}   # eqn index -> group

    def close():
        nonlocal cur
        if cur is not None:
            steps.append(cur)
            cur = None

    for i, e in enumerate(eqns):
        if _fusable(e):
            shape = e.outs[0].aval.shape
            # record_function blocks are fusion barriers, so the profiler can time exactly the labelled work
            if cur is None or cur.shape != shape or cur.eqns[0][1].scope != e.scope or (
                    cur.reduce is not None and (any(v is cur.reduce[1].outs[0] for v in e.ins)
                                                or not _parallel_reduction(cur.reduce[1], len(shape)))) \
                    or len(cur.eqns) >= MAX_GROUP_EQNS:
                close()
                cur = Group(shape)
            cur.eqns.append((i, e))
            where[i] = cur
            continue
        if e.op.name in REDUCTIONS and cur is not None and e.ins[0].aval.shape == cur.shape \
                and cur.reduce is None and cur.eqns[0][1].scope == e.scope \
                and e.outs[0].aval.dtype.is_floating_point == e.ins[0].aval.dtype.is_floating_point:
            cur.reduce = (i, e)      # the group stays open: later eqns over the same space that do not read
            where[i] = cur           # the reduction's result join the loop (a backward after its forward)
            continue
        if e.op.name in REDUCTIONS and e.ins[0].aval.size > 0:
            g = Group(e.ins[0].aval.shape)     # a lone reduction is still a loop kernel
            g.reduce = (i, e)
            where[i] = g
            close()
            steps.append(g)
            continue
        close()
        steps.append(e)
    close()

    # inputs and materialised outputs of each group
    for n, g in enumerate([s for s in steps if isinstance(s, Group)]):
        g.index = n
        members = [i for i, _ in g.eqns] + ([g.reduce[0]] if g.reduce else [])
        mset = set(members)
        defined = set()
        for i in members:
            e = eqns[i]
            for v in e.ins:
                if isinstance(v, Var) and v in defined:
                    continue
                if v not in g.inputs:
                    g.inputs.append(v)
            for o in e.outs:
                defined.add(o)
                if i == (g.reduce[0] if g.reduce else -1) or o in outs or users.get(o, set()) - mset:
                    g.outputs.append(o)
        g.eqns = [e for _, e in g.eqns]
        if g.reduce is not None:
            g.reduce = g.reduce[1]
    return Plan(graph, steps)


__all__ = ["plan", "Plan", "Group", "REDUCTIONS"]
