"""Algebraic simplification: identities (x*1, x+0, x-0, x/1, --x), no-op reshape/broadcast/permute/cast,
reshape chains, and constant folding of eqns whose inputs are all literals."""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Lit, Var

_FOLD_MAX = 1 << 16   # fold constants up to this many elements; bigger ones stay computed


def _is_const(v, value, defs=None) -> bool:
    """v is a literal (or a broadcast of one) equal to ``value`` everywhere."""
    if not isinstance(v, Lit):
        d = defs.get(v) if defs is not None else None
        if d is None or d.op.name != "broadcast_to":
            return False
        v = d.ins[0]
        if not isinstance(v, Lit):
            return False
    a = np.asarray(v.value)
    return a.size > 0 and bool(np.all(a == value))


def _same_type(a, b) -> bool:
    return a.aval.shape == b.aval.shape and a.aval.dtype is b.aval.dtype


def _identity_of(e, defs):
    """The input an eqn's output equals, if any (types must agree exactly)."""
    name, ins, out = e.op.name, e.ins, e.outs[0]
    cand = None
    if name == "mul":
        cand = ins[0] if _is_const(ins[1], 1, defs) else ins[1] if _is_const(ins[0], 1, defs) else None
    elif name == "add":
        cand = ins[0] if _is_const(ins[1], 0, defs) else ins[1] if _is_const(ins[0], 0, defs) else None
    elif name in ("sub", "div"):
        cand = ins[0] if _is_const(ins[1], 0 if name == "sub" else 1, defs) else None
    elif name in ("reshape", "broadcast_to", "cast", "copy"):
        cand = ins[0] if name != "copy" else None
    elif name == "permute":
        cand = ins[0] if tuple(e.params["perm"]) == tuple(range(len(e.params["perm"]))) else None
    elif name == "sum" and not e.params["axes"]:
        cand = ins[0]
    elif name == "neg":
        d = defs.get(ins[0])
        if d is not None and d.op.name == "neg":
            cand = d.ins[0]
    if cand is not None and isinstance(cand, Var) and _same_type(cand, out):
        return cand
    return None


def simplify(g: Graph) -> Graph:
    subst = {}
    defs = {}
    eqns = []
    for e in g.eqns:
        ins = [subst.get(v, v) if isinstance(v, Var) else v for v in e.ins]
        e = e.replace(ins=ins)
        out = e.outs[0]
        same = _identity_of(e, defs)
        if same is not None:
            subst[out] = same
            continue
        if e.op.name == "reshape":
            d = defs.get(ins[0])
            if d is not None and d.op.name == "reshape" and d.diff == e.diff:
                e = e.replace(ins=[d.ins[0]], needs=(d.needs[0] and e.needs[0],))
        if all(isinstance(v, Lit) for v in ins) and len(e.outs) == 1 and out.size <= _FOLD_MAX:
            val = e.op.impl(*[v.value for v in ins], **e.params)
            subst[out] = Lit(np.asarray(val).astype(out.aval.dtype.np), out.aval)
            continue
        defs[out] = e
        eqns.append(e)
    outs = [subst.get(v, v) if isinstance(v, Var) else v for v in g.outputs]
    return Graph(g.inputs, eqns, outs)
