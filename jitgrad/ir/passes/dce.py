"""Dead-code elimination: drop eqns none of whose outputs reach a graph output."""
from __future__ import annotations

from ..graph import Graph, Var


def dce(g: Graph) -> Graph:
    live = {v for v in g.outputs if isinstance(v, Var)}
    keep = []
    for e in reversed(g.eqns):
        if any(o in live for o in e.outs):
            keep.append(e)
            live.update(v for v in e.ins if isinstance(v, Var))
    keep.reverse()
    return Graph(g.inputs, keep, g.outputs)
