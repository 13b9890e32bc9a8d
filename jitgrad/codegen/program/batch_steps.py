"""The CPU target's batch steps: a ``LoopBatch`` (independent fusion groups of one body, ``ir/passes/
loop_batches.py``) as one launch per kernel identity, parallel over (member, chunk) on the worker pool.

Each member is placed as its own group would be (an update computed in place only when no other member reads
that state; an SGD update still folds into its GEMM), its own kernel made to learn
its identity, and members of one identity run as one ``batch_loops.gen_batch`` kernel over their argument
blocks: one launch where there were as many as members.  A member whose kernel differs from every other one's
runs alone, as before.
"""
from __future__ import annotations

from ...ir import settings
from ...ir.graph import Var
from ...ir.plan import LoopBatch
from ...ir.symbolic import hint_of
from ..kernels.batch_loops import HEADER, gen_batch, plan_pieces
from ..kernels.loops import gen_group
from ..lowering import emits
from ..native import workpool
from .gemm_steps import fold_update_into_gemm
from .layout import Program, Step
from .loop_steps import emit_group, group_block, loop_facts

# units of work per pool thread a parallel batch is cut into (pieces of members packed to similar sizes): the
# pool hands each worker a contiguous run of units, so a few per thread even out members of unequal sizes
UNITS_PER_THREAD = 4


@emits("batch", target="cpu")
def loop_batch(prog: Program, lb: LoopBatch):
    """Every member placed, then one step per kernel identity (see the module docstring)."""
    places = prog.places
    inplace = places.inplace        # state output -> the input it updates, when it may be computed in place
    reads = [{v for v in g.reads if isinstance(v, Var)} for g in lb.members]
    laid = []
    for m, g in enumerate(lb.members):
        # the members run at one step, in any order: no update computed into a buffer another member reads
        others = set().union(*(r for j, r in enumerate(reads) if j != m))
        vetoed = {o: inplace[o] for o in g.outputs if o in inplace and prog.graph.inputs[inplace[o]] in others}
        for o in vetoed:
            del inplace[o]
        try:
            if fold_update_into_gemm(prog, g):
                continue
            laid.append((g, places.group(g)))
        finally:
            inplace.update(vetoed)
    by_key = {}
    for g, op in laid:
        classes, per_element, alias = loop_facts(g, op)
        k = gen_group(g, classes, False, prog.check_ids, len(op.shape), op.red_axes, alias)
        by_key.setdefault(k.key, []).append((g, op, k, classes, per_element, alias))
    for members in by_key.values():
        if len(members) == 1:
            emit_group(prog, members[0][0], members[0][1])
        else:
            _emit_batch(prog, members)


def _workers() -> int:
    w = workpool.threads() or workpool.default_threads()
    if settings.STATE.num_threads:
        w = min(w, settings.STATE.num_threads)
    return max(int(w), 1)


def _emit_batch(prog: Program, members):
    g0, op0, _, classes, _, alias = members[0]
    rank = len(op0.shape)
    whole = rank == 0 or g0.reduce is not None
    sizes = [int(hint_of(op.size)) for _, op, *_ in members]     # concrete: loop_batches batches no symbolic size
    elements = sum(sizes)
    per_element = max(m[4] for m in members)
    parallel, gate = prog.pool_choice(elements, per_element)
    k = gen_batch(g0, classes, rank, op0.red_axes, alias, parallel, gate, whole)
    rows = [int(hint_of(op.shape[0])) if rank else 1 for _, op, *_ in members]
    units, pieces = plan_pieces(list(zip(sizes, rows)), UNITS_PER_THREAD * _workers() if parallel else 1,
                                whole=whole)
    st = Step("kernel", k, label=f"batch of {len(members)}: {g0.name} {g0.lines()}".strip(),
              shapes=[list(p.shape) for p in op0.in_places], scope=g0.all_eqns[0].scope)
    st.work = elements * per_element
    if k.per_element is not None:
        st.gate = (elements, k.per_element)
    st.block = b0 = len(prog.table)
    prog.table += [len(units) - 1, elements] + units
    at = len(prog.table)
    for m, c, parts in pieces:
        prog.table += [m, c, parts]         # m: the member's block, once it is written (below)
    starts = []
    for g, op, km, *_ in members:
        starts.append(len(prog.table) - b0)
        group_block(prog, g, op, km)
    for q, (m, _, _) in enumerate(pieces):
        prog.table[at + 3 * q] = starts[m]
    assert at - b0 == HEADER + len(units)
    st.state_write = any(op.in_place for _, op, *_ in members)
    prog.add(st)


__all__ = ["loop_batch", "UNITS_PER_THREAD"]
