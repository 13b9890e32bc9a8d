"""Common-subexpression elimination: an eqn identical to an earlier one (same op, inputs, params) reuses it.

In a graph that may be transposed, eqns recorded with and without grad (``diff``, ``needs``) stay apart: a value
computed under ``no_grad`` (the optimiser's, a double backward's reuse of a forward value) stops gradients that
the same value recorded with grad would pass.  A graph that is never transposed (a compiled step whose outputs
need no grad: forward, backward and update in one) merges them too: a second-order step recomputes the forward's
values in its nograd backward otherwise (``1 - tanh^2`` once per backward)."""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Lit


def _exact(v):
    """``v`` as a key that equals another only for the same value of the same kind: Python's ``True == 1`` and
    ``0.0 == -0.0`` would merge ``x[True]`` with ``x[1]`` (an index spec) or ``x * -0.0`` with ``x * 0.0``."""
    t = type(v)
    if t is bool:
        return ("bool", v)
    if t is float:
        return ("float", v.hex())
    if t is tuple:
        return tuple(_exact(a) for a in v)
    return v


def _key_of(v):
    if isinstance(v, Lit):
        val = v.value
        if isinstance(val, np.ndarray):
            return ("arr", id(val))
        return ("lit", type(val).__name__, _exact(val), v.aval.dtype.name, v.aval.weak)
    return ("var", id(v))


def _params_key(p):
    try:
        k = tuple(sorted((n, _exact(v)) for n, v in p.items()))
        hash(k)
        return k
    except TypeError:
        return None


def cse(g: Graph, transposable: bool = True) -> Graph:
    """``g`` with repeated eqns computed once; ``transposable=False``: ``g`` is never transposed, so eqns that
    differ only in their grad flags count as the same (the first one's flags are kept)."""
    subst = {}
    seen = {}
    eqns = []
    for e in g.eqns:
        ins = [subst.get(v, v) if not isinstance(v, Lit) else v for v in e.ins]
        pk = _params_key(e.params)
        key = None if pk is None else (e.op, tuple(_key_of(v) for v in ins), pk) + \
            ((e.diff, e.needs) if transposable else ())
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
