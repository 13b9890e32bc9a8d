"""The reference interpreter: runs a Graph with the OpDefs' NumPy impls.  It is ``backend="interpret"`` and
the oracle every other backend is tested against."""
from __future__ import annotations

import numpy as np

from .graph import Graph, Lit


def run_eqn(e, vals):
    out = e.op.impl(*vals, **e.params)
    want = e.outs[0].aval.dtype.np
    if type(out) is not np.ndarray:
        out = np.asarray(out, dtype=want)
    elif out.dtype != want:
        out = out.astype(want)
    return out


def interpret(graph: Graph, args) -> list:
    """Evaluate ``graph`` on NumPy arrays ``args``; returns the output arrays."""
    if len(args) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env = {}
    for v, a in zip(graph.inputs, args):
        env[v] = a
    for e in graph.eqns:
        vals = [env[v] if type(v) is not Lit else v.value for v in e.ins]
        env[e.outs[0]] = run_eqn(e, vals)
    return [env[v] if type(v) is not Lit else np.asarray(v.value, v.aval.dtype.np) for v in graph.outputs]
