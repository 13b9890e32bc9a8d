"""Batching independent loops: fusion groups of one scalar body that do not depend on each other become one
``LoopBatch`` step, which the CPU target runs as one launch parallel over (member, chunk).

An optimiser's update is one small loop per parameter (AdamW over B9's 50 parameters: 35 loops of a few
thousand to 65K elements, each below the worker pool's threshold, so each ran serially, one launch after
another); clipping's per-parameter sums of squares are the same story.  Batched, their work adds up: one launch
that takes the pool when the sum reaches the threshold, or one serial launch instead of dozens.

Which groups: plain ``Group``s (not row kernels) of concrete size up to ``BATCH_MAX_ELEMENTS`` (bigger loops
take the pool by themselves), elementwise or closed by a full reduction, with no loads or stores by an index,
no anomaly checks, no draws (their body takes the element's index) and no integer arithmetic (an integer
division's zero check raises from inside the loop).  Groups batch when their ``signature`` (eqns, wiring,
dtypes, literals, which inputs broadcast) is equal; the code generator still splits a batch by kernel identity.

Where: a batch stands where its first member stood; later members move up to it.  That is legal when a member
reads nothing computed at or after the batch's first member (the graph is SSA: reading is the only dependence,
and a member's own outputs count, so no member reads another's; state updates computed in place are the
layout's decision, taken in the new order, and so is which updates run after a step that may raise).  A group
that cannot move up starts the next batch of its signature.  ``JITGRAD_GROUP_LOOPS=0`` turns it off.

Chains fused side by side: the fusion pass joins consecutive eqns of one shape into a loop whether or not they
depend on each other, so an optimiser's per-parameter 0-d work (Adam's ``step + 1``, ``1 - beta1 ** step``,
``sqrt(1 - beta2 ** step)``, ``lr / ...``: one chain per parameter, each reading its own step count) came as a few
straight-line kernels holding every parameter's chain (nanoGPT's step: 4 kernels of 2,600 LLVM IR lines, each
``pow`` expanded again per parameter).  Before batching, such a run of loops is split into its independent chains
when two or more of them have one body (``_split_chains``): they then batch as any other members, into one kernel
whose IR does not grow with the number of parameters; the chains computed alone are joined again afterwards.
"""
from __future__ import annotations

import numpy as np

from ..graph import Lit, Var
from .fuse import MAX_GROUP_EQNS
from ..plan import Group, LoopBatch, Plan, batching
from ..symbolic import known_equal

BATCH_MAX_ELEMENTS = 1 << 20        # from here a loop takes the pool by itself (codegen's loops.PARALLEL_MIN)
NO_BATCH_OPS = ("rand_uniform", "rand_normal")


def _candidate(s) -> bool:
    if type(s) is not Group or s.gathers or s.scatters or not all(type(d) is int for d in s.shape):
        return False
    n = int(np.prod(s.shape, dtype=np.int64))
    return 0 < n <= BATCH_MAX_ELEMENTS and _plain(s)


def _plain(s) -> bool:
    r = s.reduce
    if r is not None and (r.op.name != "sum" or len(r.params["axes"]) != len(s.shape)):
        return False        # only a full sum: a member is then one piece, summed in the order it always was
    for e in s.all_eqns:
        if e.check is not None or e.op.name in NO_BATCH_OPS:
            return False
        d = e.outs[0].aval.dtype
        if not (d.is_floating_point or d.name == "bool"):
            return False
    return True


def _lit_key(v: Lit):
    x = v.value
    if isinstance(x, np.ndarray):
        return ("array", x.shape, str(x.dtype), x.tobytes())
    return ("lit", repr(x), type(x).__name__, v.aval.dtype.name, v.aval.weak)


def signature(g: Group):
    """What makes two groups' loops the same up to sizes and addresses: their eqns, how they are wired, dtypes,
    literals, the reduction, and which inputs are whole, scalars, or broadcast along which of the loop's dims
    (not the rank: the layout merges contiguous dims, so parameters of any rank share one loop)."""
    rank = len(g.shape)
    where = {}
    for k, v in enumerate(g.inputs):
        if isinstance(v, Var):
            shp = tuple(v.aval.shape)
            if shp == tuple(g.shape):
                how = "full"
            elif int(np.prod(shp, dtype=np.int64)) == 1:
                how = "scalar"
            else:       # broadcast along some dims: which ones, counted from the innermost
                how = tuple(d == 1 for d in (1,) * (rank - len(shp)) + shp)
            where[v] = ("in", k, v.aval.dtype.name, how)
    parts = [g.reduce is not None]
    for n, e in enumerate(g.all_eqns):
        ins = []
        for v in e.ins:
            if isinstance(v, Lit):
                ins.append(_lit_key(v))
            else:
                ins.append(where.get(v, ("?",)))
        for j, o in enumerate(e.outs):
            where[o] = ("t", n, j)
        params = dict(e.params)
        if e is g.reduce:       # a full sum (``_plain``): its axes are every dim, whatever the rank
            params["axes"] = "all"
        parts.append((e.op.name, repr(sorted(params.items(), key=lambda kv: kv[0])),
                      tuple(o.aval.dtype.name for o in e.outs), tuple(ins)))
    parts.append(tuple(where.get(o, ("?",)) for o in g.outputs))
    return tuple(parts)


def batch_loops(plan: Plan) -> Plan:
    """``plan`` with its batchable groups (see the module docstring) gathered into ``LoopBatch`` steps."""
    steps = _split_chains(plan.graph, plan.steps)
    made_at = {}        # id(Var) -> the step that computes it
    open_ = {}          # signature -> its batch's member step indices (the first is where the batch stands)
    batches = []
    for n, s in enumerate(steps):
        if _candidate(s):
            sig = signature(s)
            # the last step this one reads from: it may move up to the batch's first member when that is later
            dep = max((made_at.get(id(v), -1) for v in s.reads if isinstance(v, Var)), default=-1)
            cur = open_.get(sig)
            if cur is not None and dep < cur[0]:
                cur.append(n)
            else:
                open_[sig] = [n]
                batches.append(open_[sig])
        for e in (s.all_eqns if isinstance(s, Group) else (s,)):   # every value a step makes (a scatter's too)
            for v in e.outs:
                made_at[id(v)] = n
    batches = [m for m in batches if len(m) >= 2]
    if not batches:
        return plan if steps is plan.steps else Plan(plan.graph, _join_neighbours(plan.graph, steps))
    at_start = {m[0]: m for m in batches}
    moved = {n for m in batches for n in m}
    out = []
    for n, s in enumerate(steps):
        if n in at_start:
            out.append(LoopBatch([steps[k] for k in at_start[n]]))
        elif n not in moved:
            out.append(s)
    return Plan(plan.graph, _join_neighbours(plan.graph, out))


def _split_chains(graph, steps) -> list:
    """``steps`` with each run of consecutive plain loops over one concrete shape (and profiler scope) split into
    its independent chains, one group each, when two or more chains have one ``signature`` (the module docstring);
    ``steps`` itself when no run has such chains.  A chain is the eqns connected by the values they compute
    inside the run; it stores what the caller or a later step reads.  The chains of a run read nothing another
    computes, so any order of them computes what the run did, each chain's eqns in their order."""
    readers = None
    out, changed, n = [], False, 0
    fresh = 1 + max((s.index for s in steps if isinstance(s, Group)), default=0)
    while n < len(steps):
        s = steps[n]
        run = [s]
        splittable = _plain_loop(s) and _candidate(s)
        while splittable and n + len(run) < len(steps):
            t = steps[n + len(run)]
            if not (_plain_loop(t) and _candidate(t) and tuple(t.shape) == tuple(s.shape)
                    and t.eqns[0].scope == s.eqns[0].scope):
                break
            run.append(t)
        n += len(run)
        if splittable and readers is None:
            readers = _readers(graph, steps)
        chains = _chains(run, readers) if splittable else None
        if chains is None:
            out += run
            continue
        for g in chains:
            g.index, fresh = fresh, fresh + 1
            out.append(g)
        changed = True
    return out if changed else steps


def _chains(run, readers):
    """The independent chains of the eqns of loops ``run`` as groups, ordered by their first eqn, when two or
    more have one body; else None."""
    eqns = [e for g in run for e in g.eqns]
    if len({id(e) for e in eqns}) != len(eqns):
        return None         # a value recomputed by two of the loops: left as planned
    root = list(range(len(eqns)))

    def find(i):
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i
    made = {}
    for i, e in enumerate(eqns):
        for v in e.ins:
            j = made.get(id(v))
            if j is not None:
                root[find(j)] = find(i)
        for o in e.outs:
            made[id(o)] = i
    chains = {}
    for i, e in enumerate(eqns):
        chains.setdefault(find(i), []).append(e)
    if len(chains) < 2 or any(len(c) > MAX_GROUP_EQNS for c in chains.values()):
        return None
    # an array two chains read would be read by two loops, where the fused loop reads it once (a 0-d value costs
    # nothing to read again): a run whose chains share one stays fused
    owner = {}
    for k, c in chains.items():
        for e in c:
            for v in e.ins:
                if isinstance(v, Var) and id(v) not in made and v.aval.shape != ():
                    if owner.setdefault(id(v), k) != k:
                        return None
    inside = {id(g) for g in run}
    groups = [_group_of(run[0].shape, c, inside, readers) for c in chains.values()]
    sigs = [signature(g) for g in groups]
    return groups if len(set(sigs)) < len(sigs) else None


def _readers(graph, steps) -> dict:
    """id(Var) -> the steps that read it; the graph's outputs are read by None."""
    readers = {}
    for s in steps:
        for v in (s.reads if isinstance(s, (Group, LoopBatch)) else s.ins):
            if isinstance(v, Var):
                readers.setdefault(id(v), []).append(s)
    for v in graph.outputs:
        if isinstance(v, Var):
            readers.setdefault(id(v), []).append(None)
    return readers


def _group_of(shape, eqns, run, readers, stored=None) -> Group:
    """``eqns`` as one loop over ``shape``: its inputs in order of first use; its outputs the values (of
    ``stored`` ids, when given) read by a step not in ``run`` (ids) or by the caller."""
    g = Group(shape)
    g.eqns = list(eqns)
    made = set()
    for e in eqns:
        for v in e.ins:
            if id(v) not in made and all(v is not x for x in g.inputs):
                g.inputs.append(v)
        made.update(id(o) for o in e.outs)
    g.outputs = [o for e in eqns for o in e.outs if (stored is None or id(o) in stored)
                 and any(r is None or id(r) not in run for r in readers.get(id(o), ()))]
    return g


def _plain_loop(s) -> bool:
    return type(s) is Group and s.reduce is None and not s.gathers and not s.scatters and bool(s.eqns)


def _join_neighbours(graph, steps) -> list:
    """Elementwise groups over one shape that batching left side by side, joined into one loop (up to
    ``MAX_GROUP_EQNS`` eqns): the reductions that cut them apart moved into a batch.  Clipping's running total
    of per-gradient sums of squares was one 0-d launch per gradient (B9: 50); the joined loop computes the same
    eqns in the same order (the same bits) and stores only what a later step or the caller reads.  Shapes are
    compared without a guard (``known_equal``): a join must not tie a trace to sizes differing by value."""
    readers = _readers(graph, steps)
    res = []
    run = []            # the groups being joined (res[-1] their join, once there are two)
    for s in steps:
        prev = run[-1] if run else None
        if prev is not None and _plain_loop(s) and known_equal(s.shape, prev.shape) is True and s.eqns[0].scope == prev.eqns[0].scope \
                and len(res[-1].eqns) + len(s.eqns) <= MAX_GROUP_EQNS:
            run.append(s)
            res[-1] = _joined(run, readers)
            continue
        run = [s] if _plain_loop(s) else []
        res.append(s)
    return res


def _joined(run, readers) -> Group:
    g = _group_of(run[0].shape, [e for m in run for e in m.eqns], {id(m) for m in run}, readers,
                  {id(o) for m in run for o in m.outputs})
    g.index = run[0].index
    return g


__all__ = ["batch_loops", "signature", "batching", "BATCH_MAX_ELEMENTS"]
