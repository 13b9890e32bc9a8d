"""Before fusion planning: run elementwise work in the split shape of the reshape that borders it.

A value over ``(..., n, ...)`` that is reshaped to ``(..., a, b, ...)`` (``a * b = n``) and summed over one of the
new axes, or a broadcast over ``(..., a, b, ...)`` reshaped back to ``(..., n, ...)`` and read elementwise, cuts
the fusion planner's loops at the reshape: loops run over one shape, so the sum reads a stored array, and the
broadcast is written out in full for the loops that read it (B11's pair features ``g.reshape(B, A, A-1, K).sum(2)``
and their cotangent: two loops and two pair-sized arrays written and read per sum, per step).  This pass moves
the whole connected run of elementwise eqns over ``(..., n, ...)`` (and the sums over its other axes) into the
split shape: their inputs are reshaped (views: splitting an axis needs no copy), their outputs reshaped back where
something outside the run reads them.  The sum then joins the loop that computes its input, and the broadcast is
index arithmetic in the loops that read it.  The values are the same: only the shapes the loops run over change.
"""
from __future__ import annotations

from ..graph import Graph, Lit, Var
from ..ops import OPS, Aval
from ..symbolic import has_symbols


def _split_of(coarse, fine):
    """``(k, a, b)`` when ``fine`` is ``coarse`` with axis k split into (a, b), both above 1; else None."""
    if len(fine) != len(coarse) + 1 or has_symbols(tuple(coarse)) or has_symbols(tuple(fine)):
        return None
    for k in range(len(coarse)):
        if tuple(coarse[:k]) == tuple(fine[:k]) and tuple(coarse[k + 1:]) == tuple(fine[k + 2:]):
            a, b = fine[k], fine[k + 1]
            return (k, a, b) if a > 1 and b > 1 and a * b == coarse[k] else None
    return None


def _elementwise(e) -> bool:
    return ((e.op.family == "elementwise" and e.op.scalar is not None) or e.op.name == "broadcast_to") \
        and len(e.outs) == 1 and e.check is None


def _fine_shape(shape, rank, split):
    """The split shape of an operand of ``shape`` broadcast against a coarse shape of ``rank``; None when it does
    not reach the split axis (it broadcasts against the split shape unchanged)."""
    k, a, b = split
    pos = k - (rank - len(shape))
    if pos < 0:
        return None
    d = shape[pos]
    if d == 1:
        return tuple(shape[:pos]) + (1, 1) + tuple(shape[pos + 1:])
    return tuple(shape[:pos]) + (a, b) + tuple(shape[pos + 1:])


def lift_split_reshapes(g: Graph) -> Graph:
    """``g`` with each elementwise run bordered by an axis-splitting reshape moved into the split shape (see the
    module docstring); ``g`` itself when there is none."""
    defs = {o: e for e in g.eqns for o in e.outs}
    users = {}
    for e in g.eqns:
        for v in e.ins:
            if isinstance(v, Var):
                users.setdefault(v, []).append(e)
    # seeds: a split read by a sum, a merge of a broadcast; (coarse shape, split) -> the coarse Vars of the run
    runs = {}
    fine_of = {}
    for e in g.eqns:
        if e.op.name != "reshape" or not isinstance(e.ins[0], Var):
            continue
        x, y = e.ins[0], e.outs[0]
        split = _split_of(x.aval.shape, y.aval.shape)
        if split is not None and any(u.op.name == "sum" for u in users.get(y, ())):
            runs.setdefault((tuple(x.aval.shape), split), set()).add(x)
            continue
        split = _split_of(y.aval.shape, x.aval.shape)
        d = defs.get(x)
        if split is not None and d is not None and d.op.name == "broadcast_to":
            runs.setdefault((tuple(y.aval.shape), split), set()).add(y)
            fine_of[y] = x
    if not runs:
        return g
    lifted = {}         # id(eqn) -> split
    for (coarse, split), seeds in runs.items():
        todo = list(seeds)
        seen = set()
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            near = [defs[v]] if v in defs else []
            near += users.get(v, [])
            for e in near:
                if id(e) in lifted:
                    continue
                if _elementwise(e) and tuple(e.outs[0].aval.shape) == coarse \
                        and all(isinstance(x, Var) or x.aval.ndim == 0 for x in e.ins):
                    lifted[id(e)] = split
                    todo.append(e.outs[0])
                    todo += [x for x in e.ins if isinstance(x, Var) and tuple(x.aval.shape) == coarse]
                elif e.op.name == "sum" and e.ins[0] is v and tuple(v.aval.shape) == coarse \
                        and split[0] not in e.params["axes"] and e.check is None:
                    lifted[id(e)] = split
    if not lifted:
        return g
    reshape = OPS["reshape"]
    out_set = {v for v in g.outputs if isinstance(v, Var)}
    eqns = []
    subst = {}          # a split seed's output -> the same value computed in the split shape

    def as_reshape(like, x, shape, out=None):
        out = out if out is not None else Var(Aval(tuple(shape), x.aval.dtype))
        eqns.append(like.replace(op=reshape, ins=[x], outs=[out], params={"shape": tuple(shape)},
                                 needs=(like.diff,), check=None))
        return out

    for e in g.eqns:
        split = lifted.get(id(e))
        if any(isinstance(x, Var) and x in subst for x in e.ins):
            e = e.replace(ins=[subst.get(x, x) if isinstance(x, Var) else x for x in e.ins])
        if split is None:
            if e.op.name == "reshape" and e.ins[0] in fine_of and e.outs[0] not in out_set \
                    and tuple(e.outs[0].aval.shape) == tuple(fine_of[e.ins[0]].aval.shape):
                # a split seed whose input now exists in the split shape: its readers read that instead
                subst[e.outs[0]] = fine_of[e.ins[0]]
                continue
            eqns.append(e)
            continue
        rank = len(e.outs[0].aval.shape)
        ins = []
        for x in e.ins:
            if isinstance(x, Lit) or not isinstance(x, Var):
                ins.append(x)
            elif x in fine_of:
                ins.append(fine_of[x])
            else:
                shape = _fine_shape(x.aval.shape, rank, split)
                if shape is None:
                    ins.append(x)
                else:
                    fine_of[x] = as_reshape(e, x, shape)
                    ins.append(fine_of[x])
        out = e.outs[0]
        params = dict(e.params)
        k = split[0]
        if e.op.name == "sum":
            params["axes"] = tuple(a if a < k else a + 1 for a in e.params["axes"])
            keep = params["keepdims"]
            shape = tuple(1 if (i in params["axes"] and keep) else d
                          for i, d in enumerate(ins[0].aval.shape) if keep or i not in params["axes"])
        else:
            shape = _fine_shape(out.aval.shape, rank, split)
            if e.op.name == "broadcast_to":
                params["shape"] = shape
        new = Var(Aval(shape, out.aval.dtype))
        eqns.append(e.replace(ins=ins, outs=[new], params=params))
        if e.op.name != "sum":
            fine_of[out] = new
        if e.op.name == "sum" or out in out_set or any(id(u) not in lifted for u in users.get(out, ())):
            as_reshape(e, new, out.aval.shape, out)
    # drop the reshapes nothing reads any more (merge seeds, values reshaped back for a split seed only)
    read = set(out_set)
    keep = []
    for e in reversed(eqns):
        if e.op.name == "reshape" and e.outs[0] not in read:
            continue
        read.update(x for x in e.ins if isinstance(x, Var))
        keep.append(e)
    return Graph(g.inputs, keep[::-1], g.outputs)


__all__ = ["lift_split_reshapes"]
