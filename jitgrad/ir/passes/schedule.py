"""The order the fusion planner walks a graph's eqns in (``fuse.plan``): the trace's order, with two moves
that let more elementwise work share one loop.  The graph is functional, so any order that keeps each eqn after
its inputs' producers computes the same values.

- **Scalars first.** A 0-d elementwise eqn that reads only graph inputs, literals and other such scalars (an
  optimiser's step counter, bias corrections, ``lr * weight_decay``) moves to the front.  Left in place it cuts
  a per-parameter update in two: AdamW's ``1 - beta2 ** step`` between the moment updates and the parameter
  update gave two passes over every parameter.
- **Index arithmetic first.** Integer and boolean elementwise eqns over inputs and literals whose values only
  become index operands (the range checks' shift of negative indices, ``where(i < 0, i - n, i)``) move to the
  front too, so a scatter-add can close the loop that computes its value (``fuse.scatter_store``) instead of
  finding that loop cut by its index's arithmetic.
- **Elementwise eqns sink to their first user** when every user is an elementwise eqn over the same shape and
  scope: ``clip_grad_norm_``'s ``g.mul_(coef)`` for all parameters, traced before the optimiser, lands just
  before that parameter's AdamW update and runs in its loop.
- **A sine joins the cosine of the same value** (and the other way round): the later moves to the earlier's
  place, so one loop computes both and the kernels' shared range reduction (Payne-Hanek, scalar code) runs once
  (B11's cutoff: its cosine in the forward, the sine of its derivative in the backward, were two loops over the
  pairs, each reducing every argument).
"""
from __future__ import annotations

from ..graph import Graph, Var


SINCOS = ("sin", "cos")


def _elementwise(e) -> bool:
    return (e.op.family == "elementwise" and e.op.scalar is not None or e.op.name == "broadcast_to") \
        and len(e.outs) == 1


def _index_operand(e, v) -> bool:
    """Whether ``e`` reads ``v`` only as an index tensor (getitem's, index_put's)."""
    if e.op.name in ("getitem", "index_put"):
        return all(x is not v for x in e.ins[:1 if e.op.name == "getitem" else 2])
    return False


def schedule(graph: Graph) -> list:
    """The eqns of ``graph`` in planning order (see the module docstring)."""
    eqns = graph.eqns
    n = len(eqns)
    producer = {}
    for i, e in enumerate(eqns):
        for o in e.outs:
            producer[o] = i
    # scalars first: 0-d elementwise eqns over inputs, literals and earlier such scalars
    early = set()
    for i, e in enumerate(eqns):
        if _elementwise(e) and e.outs[0].aval.ndim == 0 and all(
                not isinstance(v, Var) or v not in producer or producer[v] in early for v in e.ins):
            early.add(i)
    users = [[] for _ in range(n)]
    for i, e in enumerate(eqns):
        for v in e.ins:
            if isinstance(v, Var) and v in producer:
                users[producer[v]].append(i)
    # index arithmetic: non-float elementwise values read only as index operands (or by such eqns)
    feeds = set()
    for i in range(n - 1, -1, -1):
        e = eqns[i]
        if _elementwise(e) and not e.outs[0].aval.dtype.is_floating_point and users[i] and all(
                u in feeds or _index_operand(eqns[u], e.outs[0]) for u in users[i]):
            feeds.add(i)
    for i in sorted(feeds):
        if all(not isinstance(v, Var) or v not in producer or producer[v] in early for v in eqns[i].ins):
            early.add(i)
    pos = list(range(n))
    for i in range(n - 1, -1, -1):
        e = eqns[i]
        if i in early or not _elementwise(e) or not users[i] or e.outs[0].aval.ndim == 0:
            continue
        shape = e.outs[0].aval.shape
        us = users[i]
        if all(_elementwise(eqns[u]) and u not in early and eqns[u].outs[0].aval.shape == shape
               and eqns[u].scope == e.scope for u in us):
            pos[i] = min(pos[u] for u in us)
    # sine and cosine of one value: the later joins the earlier (never sunk away from it), so one loop computes
    # both and their shared range reduction runs once (B11's cutoff: cos in the forward, sin in its backward)
    first = {}
    for i, e in enumerate(eqns):
        if e.op.name in SINCOS and isinstance(e.ins[0], Var) and i not in early:
            j = first.setdefault((e.ins[0], e.scope), i)
            if j != i and eqns[j].op.name != e.op.name and eqns[j].outs[0].aval.shape == e.outs[0].aval.shape:
                pos[i] = pos[j]
    order = sorted(range(n), key=lambda i: (-1 if i in early else pos[i], i))
    return [eqns[i] for i in order]


__all__ = ["schedule"]
