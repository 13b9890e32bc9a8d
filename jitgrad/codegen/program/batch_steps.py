"""The CPU target's batch steps: a ``LoopBatch`` (independent fusion groups of one body, ``ir/passes/
loop_batches.py``) as one launch per kernel identity, parallel over (member, chunk) on the worker pool.

Each member is placed as its own group would be (an update computed in place only when no other member reads
that state; an SGD update still folds into its GEMM), its own kernel made to learn its identity, and members of
one identity run as one ``batch_loops.gen_batch`` kernel over their argument blocks (``layout.Program.
batch_step``): one launch where there were as many as members.  A member whose kernel differs from every other one's
runs alone, as before.
"""
from __future__ import annotations

from ...ir.graph import Var
from ...ir.plan import LoopBatch
from ...ir.symbolic import hint_of
from ..kernels.batch_loops import gen_batch, group_member
from ..kernels.loops import gen_group
from ..lowering import emits
from .gemm_steps import fold_into_gemm
from .layout import Program
from .loop_steps import emit_group, group_block, loop_facts


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
            if fold_into_gemm(prog, g):
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


def _emit_batch(prog: Program, members):
    """Members ``(group, operands, own kernel, classes, per_element, alias)`` of one kernel identity as one step."""
    g0, op0, _, classes, _, alias = members[0]
    rank = len(op0.shape)
    whole = rank == 0 or g0.reduce is not None
    sizes = [int(hint_of(op.size)) for _, op, *_ in members]     # concrete: loop_batches batches no symbolic size
    per_element = max(m[4] for m in members)
    parallel, gate = prog.pool_choice(sum(sizes), per_element)
    k = gen_batch(group_member(g0, classes, rank, op0.red_axes, alias), rank, classes, parallel, gate, whole,
                  f"batch {g0.name}")
    blocks = [(n, int(hint_of(op.shape[0])) if rank else 1, lambda g=g, op=op, km=km: group_block(prog, g, op, km))
              for n, (g, op, km, *_) in zip(sizes, members)]
    st = prog.batch_step(k, blocks, whole, per_element, f"batch of {len(members)}: {g0.name} {g0.lines()}".strip(),
                         [list(p.shape) for p in op0.in_places], g0.all_eqns[0].scope)
    st.state_write = any(op.in_place for _, op, *_ in members)


__all__ = ["loop_batch"]
