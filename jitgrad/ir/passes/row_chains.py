"""Row-wise chains: reductions over the innermost axis and the elementwise eqns that use them, as one kernel.

A softmax, a log_softmax, a LayerNorm and their backward passes are, after decomposition, chains like
``m = amax(x, -1); e = exp(x - m); s = sum(e, -1); y = e / s``: a reduction over the last axis whose result is
broadcast back along that axis, possibly several in sequence.  The plain planner (``fuse.py``) cuts such a
chain at every reduction it reads, so each link is a loop of its own, one sweep over the whole tensor each (a
softmax forward and backward: four loops, nine sweeps of main memory).  Here consecutive plan groups over one
iteration space ``S = (..., n)`` and its row space ``R = (..., 1)`` merge into a ``RowGroup``: one kernel whose
outer loop runs over rows and whose inner *passes* each sweep one row.  Pass ``p`` accumulates the reductions
whose inputs need the results of ``p`` earlier reductions; row-shaped eqns (``rsqrt(var + eps)``) run once per
row between passes, in registers.  A row of a few thousand elements stays in L1/L2 between passes, so the chain
reads each input and writes each output once from main memory.

The merge is structural (any graph whose groups have this shape), and decided by the plan's cost model
(``ir/plan.op_cost``):
each pass recomputes the elementwise values it needs from the group's inputs (re-read from cache), except a
value the group stores anyway (something outside reads it), which later passes load back (from cache) rather
than recompute.  A chain merges when its arithmetic, recomputations included, plus one read of each input and
one write of each output cost less than the separate loops' arithmetic and memory traffic.

Stores: a value the graph returns is written in the last pass (it may be a state written in place, whose old
value earlier passes still read); others where they are first computed.  Row values read outside (LayerNorm's
mean and rstd, read by its backward) are written once per row after the last pass.
"""
from __future__ import annotations

import math

from ..graph import Var
from ..plan import PLAIN_OP_BYTES, REDUCTIONS, Group, Plan, RowGroup, RowPass, op_cost
from ..symbolic import known_equal
from .fuse import MAX_GROUP_EQNS, NO_RECOMPUTE, exact_value

# a column sum joins a row chain only below this many elements: its kernel then runs serially (rows would race
# on the sum), and a larger one keeps its threads (codegen.loops.PARALLEL_MIN, the size that starts them)
COLUMN_MAX = 1 << 20

# eqns in one row kernel's text, summed over its passes (each pass repeats the chain it needs): the compile-time
# bound, as MAX_GROUP_EQNS is for a plain loop
ROW_MAX_EQNS = 2 * MAX_GROUP_EQNS


def _row_reduction(e, S) -> bool:
    R = tuple(S[:-1]) + (1,)
    return (e.op.name in REDUCTIONS and tuple(e.params["axes"]) == (len(S) - 1,)
            and e.ins[0].aval.shape == S and e.outs[0].aval.shape == R
            and e.outs[0].aval.dtype.is_floating_point and e.ins[0].aval.dtype.is_floating_point)


def _col_reduction(e, S) -> bool:
    """A sum over every axis but the innermost (a LayerNorm backward's weight and bias gradients), accumulated
    into its output row by row: only in a serial kernel (see COLUMN_MAX)."""
    return (e.op.name == "sum" and len(S) >= 2 and tuple(e.params["axes"]) == tuple(range(len(S) - 1))
            and e.ins[0].aval.shape == S and e.outs[0].aval.size == S[-1] and math.prod(S) < COLUMN_MAX
            and e.outs[0].aval.dtype.is_floating_point and e.ins[0].aval.dtype.is_floating_point)


def _chain_reduction(e, S) -> bool:
    return _row_reduction(e, S) or _col_reduction(e, S)


def _can_start(s) -> bool:
    if type(s) is not Group or s.gathers or s.scatters:     # loops that load or store by an index stay plain
        return False
    S = s.shape
    return (len(S) >= 1 and S[-1] > 1 and all(d > 0 for d in S)
            and (s.reduce is None or _chain_reduction(s.reduce, S)))


def _can_join(s, S, scope) -> bool:
    if type(s) is not Group or s.gathers or s.scatters or s.all_eqns[0].scope != scope:
        return False
    if s.shape == S:
        return s.reduce is None or _chain_reduction(s.reduce, S)
    return s.shape == tuple(S[:-1]) + (1,) and s.reduce is None


def _eqn_ok(e) -> bool:
    d = e.outs[0].aval.dtype
    return e.check is None and e.op.name not in NO_RECOMPUTE and len(e.outs) == 1 and (
        d.is_floating_point or d.name == "bool")


def _schedule(members, S, stored, graph_outs):
    """``(passes, row_eqns, arithmetic cost per element, values stored to save recomputing them)`` of
    ``members`` over ``S`` writing ``stored``, or None when they do not form a row chain (an eqn of another
    shape, no reduction read back along the row).  A value later passes would recompute is stored where it is
    first computed (and read back from cache) when the recomputations cost more than its store (a write and
    the read its cache line costs, 2 x its item size: a softmax's exponentials, needed by two later passes).
    A value compared with its own max/min (``fuse.exact_value``: amax's backward) is always stored where it is
    computed: a later pass's recomputation may round differently from the one the reduction saw."""
    readers = {}
    for e in members:
        for v in e.ins:
            if isinstance(v, Var):
                readers.setdefault(v, []).append(e)
    made = {e.outs[0] for e in members}
    exact = [v for v, rs in readers.items() if v in made and exact_value(rs)]
    extra = [v for v in exact if v not in stored and v not in graph_outs]
    while True:
        res = _passes(members, S, list(stored) + extra, graph_outs, exact)
        if res is None:
            return None
        passes, row_eqns, cost, saving = res
        worth = [(s - 2 * v.aval.dtype.np.itemsize, v) for v, s in saving.items()
                 if s > 2 * v.aval.dtype.np.itemsize and v not in graph_outs]
        if not worth:
            return passes, row_eqns, cost, extra
        extra.append(max(worth, key=lambda t: t[0])[1])


def _passes(members, S, stored, graph_outs, exact=()):
    R = tuple(S[:-1]) + (1,)
    prod, phase, avail, kind = {}, {}, {}, {}
    for e in members:
        o = e.outs[0]
        prod[o] = e
        if e.op.name in REDUCTIONS:
            if e.check is not None:
                return None
            p = avail.get(e.ins[0], 0)
            if _row_reduction(e, S):
                kind[e], phase[e], avail[o] = "red", p, p + 1
            elif _col_reduction(e, S):
                kind[e], phase[e], avail[o] = "col", p, 1 << 30     # complete after the last row only
            else:
                return None
        elif o.aval.shape in (S, R) and _eqn_ok(e):
            p = max([avail.get(v, 0) for v in e.ins if isinstance(v, Var)], default=0)
            kind[e], phase[e], avail[o] = ("full" if o.aval.shape == S else "row"), p, p
        else:
            return None
    if any(avail.get(v, 0) >= 1 << 30 for e in members for v in e.ins):
        return None         # a member reads a column sum, which no row has whole
    last = max([phase[e] for e in members if kind[e] != "row"], default=0)
    if last == 0 and sum(kind[e] == "red" for e in members) < 2:
        return None         # no pass reads a reduction back, and no sibling reductions share a sweep: nothing to
                            # gain over the plain loops
    if any(v in graph_outs and phase[prod[v]] < last for v in exact):
        return None         # returned values are written in the last pass, recomputed: not the bits a max saw
    store_at = {v: (last if v in graph_outs else phase[prod[v]]) for v in stored
                if v in prod and kind[prod[v]] == "full"}
    order = {e: k for k, e in enumerate(members)}
    passes = [RowPass() for _ in range(last + 1)]
    cost, saving = 0.0, {}
    for p, ps in enumerate(passes):
        ps.reductions = [e for e in members if kind[e] in ("red", "col") and phase[e] == p]
        ps.stores = [v for v, q in store_at.items() if q == p]
        need, loads, todo = set(), set(), [e.ins[0] for e in ps.reductions] + list(ps.stores)
        while todo:
            v = todo.pop()
            e = prod.get(v)
            if e is None or kind[e] != "full" or e in need:
                continue        # an input, a row value (a register by now), or done
            if v in store_at and store_at[v] < p:
                loads.add(v)        # written by an earlier pass: in cache
                continue
            need.add(e)
            todo += [x for x in e.ins if isinstance(x, Var)]
        ps.eqns = sorted(need, key=order.get)
        ps.loads = sorted(loads, key=lambda v: order[prod[v]])
        cost += sum(op_cost(e) for e in ps.eqns) + PLAIN_OP_BYTES * len(ps.reductions)
        # values computed in an earlier pass that this one recomputes and uses (the frontier), with the cost of
        # the chain that recomputes each
        uses = [x for e in ps.eqns if phase[e] == p for x in e.ins] + [e.ins[0] for e in ps.reductions] + ps.stores
        for v in dict.fromkeys(x for x in uses if isinstance(x, Var)):     # first-use order: ties in ``saving``
            e = prod.get(v)
            if e is not None and e in need and phase[e] < p:
                chain, todo = {}, [e]        # (a dict: the sum below in a defined order)
                while todo:
                    c = todo.pop()
                    if c in chain:
                        continue
                    chain[c] = None
                    todo += [prod[x] for x in c.ins if isinstance(x, Var) and prod.get(x) in need]
                saving[v] = saving.get(v, 0.0) + sum(op_cost(c) for c in chain)
    row_eqns = [[] for _ in range(last + 2)]
    for e in members:
        if kind[e] == "row":
            row_eqns[min(phase[e], last + 1)].append(e)
    if sum(len(ps.eqns) + len(ps.reductions) for ps in passes) + sum(map(len, row_eqns)) > ROW_MAX_EQNS:
        return None
    return passes, row_eqns, cost, saving


def _traffic(vals, size) -> float:
    """Bytes per element of an iteration space of ``size`` elements to read or write ``vals`` once each."""
    return sum(v.aval.dtype.np.itemsize * v.aval.size / size for v in vals
               if isinstance(v, Var) or hasattr(v.value, "shape"))


def _split_cost(parts, size) -> float:
    """The plain plan's cost per element of ``S``: each loop's arithmetic and its reads and writes."""
    cost = 0.0
    for g in parts:
        arith = math.prod(g.shape) / size * sum(op_cost(e) for e in g.all_eqns)
        cost += arith + _traffic(g.inputs, size) + _traffic(g.outputs, size)
    return cost


def _topological(members):
    """``members`` with every eqn after the members that produce its inputs, otherwise in their order: one part
    may read a value that a later part recomputes (a copy of an eqn outside the run, fuse._recompute_cheap_values)."""
    prod = {o: e for e in members for o in e.outs}
    out, done = [], set()

    def visit(e):
        if id(e) in done:
            return
        done.add(id(e))
        for v in e.ins:
            p = prod.get(v) if isinstance(v, Var) else None
            if p is not None:
                visit(p)
        out.append(e)
    for e in members:
        visit(e)
    return out


def _row_group(parts, graph_outs, read_outside):
    S = parts[0].shape
    members, seen = [], set()
    for g in parts:
        for e in g.all_eqns:
            if id(e) not in seen:
                seen.add(id(e))
                members.append(e)
    members = _topological(members)
    produced = {o for e in members for o in e.outs}
    inputs, seen_in = [], set()
    for e in members:
        for v in e.ins:
            if v not in produced and id(v) not in seen_in:
                seen_in.add(id(v))
                inputs.append(v)
    outputs = []
    for g in parts:
        for v in g.outputs:
            if v in produced and v not in outputs and (v in graph_outs or read_outside(v)):
                outputs.append(v)
    g = _make(S, members, inputs, outputs, graph_outs)
    if g is None:
        return None
    size = math.prod(S)
    if g.cost + _traffic(inputs, size) + _traffic(g.outputs, size) >= _split_cost(parts, size):
        return None
    return g


def _make(S, members, inputs, outputs, graph_outs):
    """The RowGroup of ``members`` writing ``outputs``, or None (not a row chain)."""
    sched = _schedule(members, S, outputs, graph_outs)
    if sched is None:
        return None
    passes, row_eqns, arith, extra = sched
    outputs = list(outputs) + extra
    R = tuple(S[:-1]) + (1,)
    rows = [v for v in outputs if v.aval.shape == R]
    if not rows:        # the layout needs one row output to keep the row axis: the last reduction's (one per row)
        last = [e for e in members if _row_reduction(e, S)][-1]
        rows = [last.outs[0]]
        outputs = outputs + [last.outs[0]]
    like = next(e for e in members if e.op.name in REDUCTIONS)
    columns = [e for e in members if e.op.name in REDUCTIONS and _col_reduction(e, S)]
    return RowGroup(S, members, inputs, outputs, passes, row_eqns, rows[0], like, columns, arith)


def _drop_unread_outputs(steps, graph_outs):
    """After merging, a value some group stored for a part that now recomputes it is read by nobody: it is not
    stored (plain groups keep their reduction's output, which the layout places; row groups are rescheduled)."""
    read = {v for s in steps for v in (s.reads if isinstance(s, Group) else s.ins) if isinstance(v, Var)}
    for k, s in enumerate(steps):
        if not isinstance(s, Group):
            continue
        red = s.reduce.outs[0] if s.reduce is not None else None
        keep = [v for v in s.outputs if v in graph_outs or v in read or v is red]
        if len(keep) == len(s.outputs):
            continue
        if isinstance(s, RowGroup):
            g = _make(s.shape, s.eqns, s.inputs, keep, graph_outs)
            if g is not None:
                g.index = s.index
                steps[k] = g
        else:
            s.outputs = keep


def _passed_view(s, run_outs) -> bool:
    """Whether step ``s`` is a reshape that a row chain may pass over (B11's force loops are two row reductions
    over the pair Gaussians with reshapes of the first's result between them): a view of the run's values (or
    of such a view).
    The run stops at a group that reads a passed reshape (it runs after the merged group)."""
    return not isinstance(s, Group) and s.op.name == "reshape" and all(v in run_outs for v in s.ins
                                                                          if isinstance(v, Var))


def _hoisted(s, S, run_outs, graph_outs) -> bool:
    """Whether step ``s`` is a small loop a row chain may pass over by moving it before the merged group: a plain
    group over a proper suffix of ``S``'s dims (leading 1s aside) that reads none of the run's values and returns
    nothing (a softmax backward's ``logical_not`` of its causal mask, made between the row sums and their use).
    The sizes are compared by their form (``known_equal``), never by value: a comparison of symbolic sizes would
    guard a program lowered for every size on this choice."""
    if type(s) is not Group or s.gathers or s.scatters:
        return False
    shape = tuple(s.shape)
    while shape and type(shape[0]) is int and shape[0] == 1:
        shape = shape[1:]
    return (0 < len(shape) < len(S) and known_equal(shape, tuple(S[len(S) - len(shape):])) is True
            and not any(v in run_outs for v in s.reads) and not any(v in graph_outs for v in s.outputs))


def merge_row_chains(plan: Plan) -> Plan:
    """``plan`` with each run of consecutive groups that forms a row-wise chain, and costs less as one, replaced
    by a ``RowGroup``; the longest such run from each start.  The groups are numbered afresh."""
    graph, steps = plan.graph, plan.steps
    graph_outs = {v for v in graph.outputs if isinstance(v, Var)}
    readers = {}            # Var -> positions of the steps that read it
    for k, s in enumerate(steps):
        for v in (s.reads if isinstance(s, Group) else s.ins):
            if isinstance(v, Var):
                readers.setdefault(v, set()).add(k)
    out, k = [], 0
    while k < len(steps):
        s = steps[k]
        run = [k] if _can_start(s) else []      # positions of the run's groups
        hoist = set()           # positions of the steps a merged run starts after (``_hoisted``)
        if run:
            scope, n_eqns = s.all_eqns[0].scope, len(s.all_eqns)
            n, passed = k + 1, set()
            while n < len(steps):
                if _passed_view(steps[n], passed | {v for i in run for v in steps[i].outputs}):
                    passed.update(steps[n].outs)
                    n += 1
                    continue
                if _hoisted(steps[n], s.shape, passed | {v for i in run for v in steps[i].outputs}, graph_outs):
                    hoist.add(n)
                    n += 1
                    continue
                if not _can_join(steps[n], s.shape, scope) or any(v in passed for v in steps[n].reads):
                    break
                n_eqns += len(steps[n].all_eqns)
                if n_eqns > ROW_MAX_EQNS:
                    break
                run.append(n)
                n += 1
        merged = None
        for j in range(len(run), 1, -1):
            span = set(run[:j])
            merged = _row_group([steps[i] for i in run[:j]], graph_outs,
                                lambda v: any(r not in span for r in readers.get(v, ())))
            if merged is not None:
                # the small loops it passed over that read none of its values run before it (its groups may read
                # theirs); the reshapes it passed over after it: they read its values, and none of its groups
                # reads theirs (``_passed_view``)
                out += [steps[i] for i in range(k, run[j - 1] + 1) if i in hoist]
                out.append(merged)
                out += [steps[i] for i in range(k, run[j - 1] + 1) if i not in span and i not in hoist]
                k = run[j - 1] + 1
                break
        if merged is None:
            out.append(s)
            k += 1
    if len(out) < len(steps):
        _drop_unread_outputs(out, graph_outs)
    for n, g in enumerate(s for s in out if isinstance(s, Group)):
        g.index = n
    return Plan(graph, out)


__all__ = ["merge_row_chains", "ROW_MAX_EQNS", "COLUMN_MAX"]
