"""Fusion planning: group runs of elementwise eqns over one iteration space into loop kernels.

A group is a maximal run of consecutive elementwise eqns (in the graph's order) whose outputs share one
shape, the iteration space; inputs of smaller shapes are broadcast by index arithmetic, not materialised.
A reduction (sum/amax/amin) whose input has the group's shape joins the group: the producers are inlined
into the reduction loop, and later eqns over the same space that do not read the reduction's result join the
same loop too.  So a backward that only needs elementwise values of its forward runs in the forward's pass
(B2's loss and both gradients: one read of x, w, b and one write of each gradient), and those values are
recomputed in registers instead of stored and reloaded.  Everything else (matmul -> BLAS, shape ops, indexing) is a step of its own.
A value computed inside a group is written to memory only if something outside the group reads it, and not
even then when the reader is a later group over the same space that recomputes it more cheaply than it could
load it (``ir/plan.op_cost``: the store-or-recompute choice by cost).
The plan's types are ``ir/plan.py``'s.  A later pass, ``row_chains.py``, merges runs of these groups that form a
row-wise chain into one kernel (``passes.fusion_plan`` runs both).
"""
from __future__ import annotations

from ..graph import Graph, Var
from ..plan import REDUCTIONS, Group, Plan, op_cost
from ..symbolic import same_shape
from .schedule import schedule

# at most this many eqns in one loop: LLVM's time on one function grows faster than its size (a 200-eqn loop with
# 100 inlined tanh took 7 s to build, a 1,000-op chain 86 s), while chunks of a long chain repeat: the same
# kernel text, compiled once.  Each cut costs one store and one load of the value crossing it.
MAX_GROUP_EQNS = 48


def _fusable(e) -> bool:
    # broadcast_to is elementwise too: the loop reads its input through broadcast indexing
    return (e.op.family == "elementwise" and e.op.scalar is not None or e.op.name == "broadcast_to") \
        and len(e.outs) == 1


def _parallel_reduction(e, rank) -> bool:
    """Whether the loop of reduction ``e`` can run in parallel (loops.gen_group: a full sum, or a reduction that
    keeps the outer axis): only then may later eqns join its loop, which would otherwise lose their threads."""
    axes = set(e.params["axes"])
    return (len(axes) == rank and e.op.name == "sum") or 0 not in axes


# Store or recompute.  When a later group reads a value an earlier group computed over the same iteration
# space (the groups were cut by a reduction the later one reads: LayerNorm's x - mean before its variance, a
# softmax's shifted logits), the value can be stored and loaded (a write and a read: 2 x its item size in
# bytes per element) or recomputed in the later group from what the earlier one read, priced with the plan's
# cost model (``ir/plan.op_cost``).  Recompute when the chain plus the extra inputs the later group must read
# cost less than the store and load they save.
NO_RECOMPUTE = ("rand_uniform", "rand_normal")   # draws: their scalar body takes the element index; kept single
# A value compared for equality with its own max/min (amax/amin's backward: ``mask = x == amax(x)`` and the count
# of ties) must be the bits the reduction saw.  A recomputation in another loop may round differently (the
# kernels' fast-math flags let LLVM contract ``a * b + c`` into an FMA in one loop and not in another, where
# ``a * b`` has a second use), and a row whose recomputed values miss its maximum gets a tie count of 0 (NaN
# gradients).  Such a value is stored where it is computed, never recomputed (``exact_value``)
EXTREMA, EQUALITY = ("amax", "amin"), ("eq", "ne")


def exact_value(readers) -> bool:
    """Whether a value read by eqns ``readers`` must not be recomputed: a max/min of it and an equality test."""
    names = {e.op.name for e in readers}
    return bool(names & set(EXTREMA)) and bool(names & set(EQUALITY))


def _recompute_cheap_values(groups, eqns, users, outs, where):
    """Add to the groups the eqns that recompute values they read from an earlier group over the same space,
    when that is cheaper than storing the value once and loading it in each of them (see ``op_cost``); the earlier
    group then stores it only if something else reads it.  Linear in the graph: one producer map, and each
    chain lies inside one group of at most MAX_GROUP_EQNS eqns."""
    producer = {}
    for i, e in enumerate(eqns):
        for o in e.outs:
            producer[o] = i
    members = {id(g): _members(g) for g in groups}
    reads = {id(g): {v for i in members[id(g)] for v in eqns[i].ins if isinstance(v, Var)} for g in groups}
    decided = {}
    extra = {}          # id(group) -> eqn indices it recomputes
    for g2 in groups:
        for i2 in sorted(members[id(g2)]):
            for v in eqns[i2].ins:
                if isinstance(v, Var) and v not in decided and producer.get(v) not in members[id(g2)]:
                    decided[v] = chain = _cheap_chain(v, eqns, producer, where, users, outs, members, reads)
                    if chain:
                        for g in chain[1]:
                            extra.setdefault(id(g), set()).update(chain[0])
    for g in groups:
        add = extra.get(id(g), set()) - members[id(g)]
        if add and len(g.eqns) + len(add) <= MAX_GROUP_EQNS:
            # the recomputed eqns go first, in the graph's order: they read only what the earlier group read
            g.eqns = [(i, eqns[i]) for i in sorted(add)] + g.eqns


def _members(g) -> set:
    """The eqn indices a group runs (its elementwise eqns and its reduction)."""
    return {i for i, _ in g.eqns} | ({g.reduce[0]} if g.reduce else set())


def _scope(g):
    return (g.eqns[0][1] if g.eqns else g.reduce[1]).scope


def _cheap_chain(v, eqns, producer, where, users, outs, members, reads):
    """``(eqn indices, reader groups)`` when recomputing ``v`` in every later group that reads it costs less
    than storing it once and loading it in each; None otherwise (then the group that computes it stores it)."""
    p = producer.get(v)
    g1 = where.get(p) if p is not None else None
    if not isinstance(g1, Group) or (g1.reduce and g1.reduce[0] == p) or v in outs:
        return None
    if exact_value([eqns[u] for u in users.get(v, ())]):
        return None         # compared with its own max/min: every reader must see the bits the reduction saw
    g1_members = {i for i, _ in g1.eqns}
    readers = []
    for u in users.get(v, ()):
        if u in members[id(g1)]:
            continue
        gu = where.get(u)
        if not isinstance(gu, Group) or gu.shape != g1.shape or _scope(gu) != _scope(g1):
            return None             # read by a step that is not a loop over the same space: stored anyway
        if gu not in readers:
            readers.append(gu)
    if not readers:
        return None
    size = v.aval.dtype.np.itemsize
    store = size * (1 + len(readers))
    chain, todo, cost, inputs = set(), [p], 0.0, set()
    while todo:
        i = todo.pop()
        if i in chain:
            continue
        e = eqns[i]
        if e.op.name in NO_RECOMPUTE or i not in g1_members:
            return None
        chain.add(i)
        cost += op_cost(e)
        if cost * len(readers) >= store:
            return None
        for x in e.ins:
            if isinstance(x, Var):
                q = producer.get(x)
                if q is not None and q in g1_members:
                    todo.append(q)
                elif same_shape(x.aval.shape, g1.shape):
                    inputs.add(x)
    total = sum(cost + sum(x.aval.dtype.np.itemsize for x in inputs if x not in reads[id(g)]) for g in readers)
    return (sorted(chain), readers) if total < store else None


def plan(graph: Graph) -> Plan:
    """The fusion plan of ``graph``: its eqns as loop groups and single steps (see the module docstring)."""
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

    groups = [s for s in steps if isinstance(s, Group)]
    _recompute_cheap_values(groups, eqns, users, outs, where)

    # inputs and materialised outputs of each group.  A value is stored by the group that owns its eqn when
    # the graph returns it or some reader runs in a group that does not compute it itself (recomputed values
    # are computed again by the groups that read them, see _recompute_cheap_values)
    member_sets = {id(g): _members(g) for g in groups}
    holders = {}        # eqn index -> the groups that run it
    for g in groups:
        for i in member_sets[id(g)]:
            holders.setdefault(i, []).append(g)
    for n, g in enumerate(groups):
        g.index = n
        members = [i for i, _ in g.eqns] + ([g.reduce[0]] if g.reduce else [])
        mset = member_sets[id(g)]
        defined = set()
        for i in members:
            e = eqns[i]
            for v in e.ins:
                if isinstance(v, Var) and v in defined:
                    continue
                if v not in g.inputs:
                    g.inputs.append(v)
            if where.get(i) is not g:       # a recomputed copy: its owner stores the value if anyone needs it
                for o in e.outs:
                    defined.add(o)
                continue
            for o in e.outs:
                defined.add(o)
                # stored unless every group that runs a reader (some readers are recomputed copies in several
                # groups, or steps that are not loops) computes the value itself
                if i == (g.reduce[0] if g.reduce else -1) or o in outs or any(
                        not holders.get(u) or any(i not in member_sets[id(h)] for h in holders[u])
                        for u in users.get(o, set()) - mset):
                    g.outputs.append(o)
        g.eqns = [e for _, e in g.eqns]
        if g.reduce is not None:
            g.reduce = g.reduce[1]
    return Plan(graph, steps)


__all__ = ["plan", "exact_value", "MAX_GROUP_EQNS", "NO_RECOMPUTE"]
