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
from ..ops.index import single_tensor_axis
from ..plan import REDUCTIONS, Group, Plan, op_cost
from ..symbolic import hint_of, same_shape
from .schedule import schedule

# at most this many eqns in one loop: LLVM's time on one function grows faster than its size (a 200-eqn loop with
# 100 inlined tanh took 7 s to build, a 1,000-op chain 86 s), while chunks of a long chain repeat: the same
# kernel text, compiled once.  Each cut costs one store and one load of the value crossing it.
MAX_GROUP_EQNS = 48


def _fusable(e) -> bool:
    # broadcast_to is elementwise too: the loop reads its input through broadcast indexing
    return (e.op.family == "elementwise" and e.op.scalar is not None or e.op.name == "broadcast_to") \
        and len(e.outs) == 1


def _indexed_axis(e, x, idx):
    """The axis of ``x[:, ..., idx]`` for an eqn that may load or store by it; None for other indexes and for
    whole rows by an index (``x[idx]`` of a matrix or more: an embedding's rows, moved by row kernels)."""
    if idx.aval.dtype.is_floating_point or idx.aval.dtype.name == "bool" or e.outs[0].aval.size == 0:
        return None
    k = single_tensor_axis(e.params["spec"], x.aval.ndim, 1)
    return None if k is None or (k == 0 and x.aval.ndim >= 2) else k


def gather_load(e) -> bool:
    """``x[:, ..., idx]`` (``single_tensor_axis``): a loop over the result reads it as a load of ``idx`` then of
    ``x`` at that index (bounds-checked), so the gathered array is never materialised."""
    return e.op.name == "getitem" and len(e.ins) == 2 and _indexed_axis(e, e.ins[0], e.ins[1]) is not None


def scatter_store(e) -> bool:
    """``out = base; out[:, ..., idx] += v`` with ``v`` of the indexed region's shape: a loop over ``v`` ends by
    adding each element into ``out`` at its index (a gather's transpose).  The loop splits between threads only
    where each part adds into rows of ``out`` no other part reaches (``codegen/program/loop_steps.py``), so the
    sums are the same at every thread count."""
    return e.op.name == "index_put" and e.params.get("accumulate") and len(e.ins) == 3 \
        and e.ins[1].aval.size > 0 and e.ins[1].aval.dtype is e.outs[0].aval.dtype \
        and e.outs[0].aval.dtype.name != "bool" and _indexed_axis(e, e.ins[0], e.ins[2]) is not None \
        and e.ins[1].aval.shape == _region(e.ins[0], e.ins[2], _indexed_axis(e, e.ins[0], e.ins[2]))


def _region(x, idx, k):
    """The shape of ``x[:, ..., idx]`` (``idx`` on axis ``k``): the loop's iteration space."""
    return tuple(x.aval.shape[:k]) + tuple(idx.aval.shape) + tuple(x.aval.shape[k + 1:])


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
# A stored value of at least this many bytes (a core's L2) is not in cache when it is written: the CPU reads each
# line before writing it (write-allocate), so its store costs twice its item size.  B9's GELU stored 1 + erf for
# its backward (2 MiB a layer): written, then read back; the backward now recomputes the erf (8) from the input it
# reads anyway (8.5 < 3 x 4 bytes)
WRITE_ALLOCATE_BYTES = 1 << 20


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

    def decide(v):
        decided[v] = chain = _cheap_chain(v, eqns, producer, where, users, outs, members, reads)
        if chain:
            for g in chain[1]:
                extra.setdefault(id(g), set()).update(chain[0])
                # what the recomputation reads, the reader now reads anyway (a later chain from it loads nothing)
                reads[id(g)].update(x for i in chain[0] for x in eqns[i].ins if isinstance(x, Var))

    for g2 in groups:
        for i2 in sorted(members[id(g2)]):
            for v in eqns[i2].ins:
                if isinstance(v, Var) and v not in decided and producer.get(v) not in members[id(g2)]:
                    decide(v)
    # once more for the values stored so far: a chain decided later may have brought in the inputs they need (B9's
    # GELU backward recomputes x = h + b for its pdf, so 1 + erf(x / sqrt 2) costs its arithmetic only)
    for v in [v for v, chain in decided.items() if not chain]:
        decide(v)
    for g in groups:
        add = extra.get(id(g), set()) - members[id(g)]
        if add and len(g.eqns) + len(add) <= MAX_GROUP_EQNS:
            # the recomputed eqns go first, in the graph's order: they read only what the earlier group read
            g.eqns = [(i, eqns[i]) for i in sorted(add)] + g.eqns


def _members(g) -> set:
    """The eqn indices a group runs (its elementwise eqns and gathers, its reduction, its scatters)."""
    return {i for i, _ in g.eqns} | ({g.reduce[0]} if g.reduce else set()) | {i for i, _ in g.scatters}


def _scope(g):
    return (g.eqns[0][1] if g.eqns else g.reduce[1] if g.reduce else g.scatters[0][1]).scope


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
        if not isinstance(gu, Group) or gu.shape != g1.shape or _scope(gu) != _scope(g1) \
                or any(eqns[u] is e for e in gu.gathers) or any(u == j for j, _ in gu.scatters):
            return None             # read by a step that is not a loop over the same space, or through an
                                    # index (a gather's, a scatter's operand): stored anyway
        if gu not in readers:
            readers.append(gu)
    if not readers:
        return None
    size = v.aval.dtype.np.itemsize
    store = size * ((2 if hint_of(v.aval.size) * size >= WRITE_ALLOCATE_BYTES else 1) + len(readers))
    chain, todo, cost, inputs = set(), [p], 0.0, set()
    while todo:
        i = todo.pop()
        if i in chain:
            continue
        e = eqns[i]
        if e.op.name in NO_RECOMPUTE or not _fusable(e) or (i not in g1_members and not _same_space(where.get(i), g1)) \
                or (i != p and exact_value([eqns[u] for u in users.get(e.outs[0], ())])):
            return None         # (a gather is loaded once, by the loop that owns it)
        chain.add(i)
        cost += op_cost(e)
        if cost * len(readers) >= store:
            return None
        for x in e.ins:
            if isinstance(x, Var):
                q = producer.get(x)
                # the chain goes on through values an earlier loop over the same space computed (B11's r - mu,
                # computed by the features' loop, read as 2 (r - mu) by the force's and the second-order loops):
                # recomputing them from the smaller arrays they broadcast costs less than a full-size load
                if q is not None and (q in g1_members or _cheap_input(q, eqns, where, g1)):
                    todo.append(q)
                elif same_shape(x.aval.shape, g1.shape):
                    inputs.add(x)
    total = sum(cost + sum(x.aval.dtype.np.itemsize for x in inputs if x not in reads[id(g)]) for g in readers)
    return (sorted(chain), readers) if total < store else None


def _same_space(g, g1) -> bool:
    return isinstance(g, Group) and g.shape == g1.shape and _scope(g) == _scope(g1)


def _cheap_input(q, eqns, where, g1) -> bool:
    """Whether eqn ``q`` (producing an input of a chain ``g1``'s readers would recompute) is an elementwise eqn of
    another loop over ``g1``'s space that reads only smaller arrays (broadcast along the space): the chain may go
    on through it, its recomputation loads nothing of the space's size."""
    g = where.get(q)
    e = eqns[q]
    return g is not g1 and _same_space(g, g1) and _fusable(e) and not (g.reduce and g.reduce[0] == q) \
        and all(not isinstance(x, Var) or not same_shape(x.aval.shape, g1.shape) for x in e.ins)


def plan(graph: Graph, indexed: bool = True) -> Plan:
    """The fusion plan of ``graph``: its eqns as loop groups and single steps (see the module docstring).
    ``indexed``: gathers and scatter-adds by one index tensor join the loops around them (``gather_load``,
    ``scatter_store``); a target that cannot emit them plans without (they stay steps of their own)."""
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

    def defined_in_cur(v):
        return cur is not None and where.get(producer.get(v)) is cur

    def reads_closing(e):
        # a value a scatter of the loop adds into is complete only after the loop
        return cur is not None and any(v is s.outs[0] for _, s in cur.scatters for v in e.ins)

    producer = {o: i for i, e in enumerate(eqns) for o in e.outs}
    for i, e in enumerate(eqns):
        gather = indexed and gather_load(e)
        if _fusable(e) or gather:
            shape = e.outs[0].aval.shape
            # record_function blocks are fusion barriers, so the profiler can time exactly the labelled work
            if cur is None or cur.shape != shape or _scope(cur) != e.scope or (
                    cur.reduce is not None and (any(v is cur.reduce[1].outs[0] for v in e.ins)
                                                or not _parallel_reduction(cur.reduce[1], len(shape)))) \
                    or len(cur.eqns) >= MAX_GROUP_EQNS or reads_closing(e) \
                    or (gather and any(defined_in_cur(v) for v in e.ins)):
                close()
                cur = Group(shape)
            cur.eqns.append((i, e))
            if gather:
                cur.gathers.append(e)
            where[i] = cur
            continue
        if indexed and scatter_store(e):
            # the store closing the loop over its values (the loop stays open, as after a reduction); its base
            # and index are read before the loop runs, so they must not be the loop's own
            if cur is None or cur.shape != e.ins[1].aval.shape or _scope(cur) != e.scope or reads_closing(e) \
                    or defined_in_cur(e.ins[0]) or defined_in_cur(e.ins[2]) or len(cur.eqns) >= MAX_GROUP_EQNS:
                close()
                cur = Group(e.ins[1].aval.shape)        # a loop of its own, over values computed elsewhere
            cur.scatters.append((i, e))
            where[i] = cur
            continue
        if e.op.name in REDUCTIONS and cur is not None and e.ins[0].aval.shape == cur.shape \
                and cur.reduce is None and _scope(cur) == e.scope and not reads_closing(e) \
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
            for v in (() if e in g.gathers else e.ins):   # a gather's operands are read through its index
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
        for _, e in g.scatters:     # the values added: the loop's own, or read at its position
            v = e.ins[1]
            if not (isinstance(v, Var) and v in defined) and v not in g.inputs:
                g.inputs.append(v)
        g.eqns = [e for _, e in g.eqns]
        g.scatters = [e for _, e in g.scatters]
        if g.reduce is not None:
            g.reduce = g.reduce[1]
    return Plan(graph, steps)


__all__ = ["plan", "exact_value", "gather_load", "scatter_store", "MAX_GROUP_EQNS", "NO_RECOMPUTE"]
