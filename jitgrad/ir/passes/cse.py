"""Common-subexpression elimination: an eqn identical to an earlier one (same op, inputs, params) reuses it."""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Lit


def _key_of(v):
    if isinstance(v, Lit):
        val = v.value
        if isinstance(val, np.ndarray):
            return ("arr", id(val))
        return ("lit", type(val).__name__, val, v.aval.dtype.name, v.aval.weak)
    return ("var", id(v))


def _params_key(p):
    try:
        k = tuple(sorted(p.items()))
        hash(k)
        return k
    except TypeError:
        return None


def cse(g: Graph) -> Graph:
    subst = {}
    seen = {}
    eqns = []
    for e in g.eqns:
        ins = [subst.get(v, v) if not isinstance(v, Lit) else v for v in e.ins]
        pk = _params_key(e.params)
        key = None if pk is None else (e.op, tuple(_key_of(v) for v in ins), pk, e.diff, e.needs)
        if key is not None and key in seen:
            for o, prev in zip(e.outs, seen[key].outs):
                subst[o] = prev
            continue
        ne = e.replace(ins=ins)
        if key is not None:
            seen[key] = ne
        eqns.append(ne)
    outs = [subst.get(v, v) if not isinstance(v, Lit) else v for v in g.outputs]
    return Graph(g.inputs, eqns, outs)
