"""Algebraic simplification: identities (x*1, x+0, x-0, x/1, x**1, --x), no-op reshape/broadcast/permute/cast,
reshape and permute chains, scatter-adds of a whole value into zeros as reshapes, transposed matrix products
(``(A B)^T`` as ``B^T A^T``), and constant folding of eqns whose inputs are all literals."""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Lit, Var
from ..ops import OPS, Aval
from ..symbolic import has_symbols

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
    elif name == "pow":          # x ** 1: the derivative of x ** 2 (2 * x ** 1)
        cand = ins[0] if _is_const(ins[1], 1, defs) else None
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


def _whole(spec) -> bool:
    """An index spec that selects every element (``x[..., None]``, ``x[:, :]``): no ints, ranges or tensors."""
    return all(s is Ellipsis or s is None or (type(s) is tuple and s == ("slice", None, None, None)) for s in spec)


def _put_as_reshape(e, defs):
    """``index_put(zeros, v; whole spec, accumulate)`` -> ``reshape(v)``: the transpose of ``x[..., None]`` (an
    unsqueeze by index) is a reshape of its cotangent, not a zero buffer and a scatter-add into it."""
    base, v = e.ins[0], e.ins[1]
    out = e.outs[0]
    if not (e.params.get("accumulate") and len(e.ins) == 2 and e.params.get("oob") is None
            and _whole(e.params["spec"]) and isinstance(v, Var) and v.aval.size == out.aval.size
            and v.aval.dtype is out.aval.dtype and _is_const(base, 0, defs)):
        return e
    return e.replace(op=OPS["reshape"], ins=[v], params={"shape": tuple(out.aval.shape)}, needs=(e.needs[1],))


def simplify(g: Graph) -> Graph:
    subst = {}
    defs = {}
    eqns = []
    for e in g.eqns:
        ins = [subst.get(v, v) if isinstance(v, Var) else v for v in e.ins]
        e = e.replace(ins=ins)
        out = e.outs[0]
        if e.op.name == "index_put":
            e = _put_as_reshape(e, defs)
        same = _identity_of(e, defs)
        if same is not None:
            subst[out] = same
            continue
        if e.op.name == "reshape":
            d = defs.get(ins[0])
            if d is not None and d.op.name == "reshape" and d.diff == e.diff:
                e = e.replace(ins=[d.ins[0]], needs=(d.needs[0] and e.needs[0],))
        if e.op.name == "permute":
            d = defs.get(ins[0])
            if d is not None and d.op.name == "permute" and d.diff == e.diff:
                # (x.T).T, the transpose pass's view of a saved W.T: one permute, or none
                inner = d.params["perm"]
                perm = tuple(inner[p] for p in e.params["perm"])
                if perm == tuple(range(len(perm))) and isinstance(d.ins[0], Var) and _same_type(d.ins[0], out):
                    subst[out] = d.ins[0]
                    continue
                e = e.replace(ins=[d.ins[0]], params={"perm": perm}, needs=(d.needs[0] and e.needs[0],))
        if all(isinstance(v, Lit) for v in ins) and len(e.outs) == 1 and not has_symbols(out.aval.shape) \
                and out.size <= _FOLD_MAX:      # (a symbolic shape is folded per call by no one: it stays an op)
            val = e.op.impl(*[v.value for v in ins], **e.params)
            subst[out] = Lit(np.asarray(val).astype(out.aval.dtype.np), out.aval)
            continue
        defs[out] = e
        eqns.append(e)
    outs = [subst.get(v, v) if isinstance(v, Var) else v for v in g.outputs]
    return _fold_index_put_adds(_transposed_products(Graph(g.inputs, eqns, outs)))


def _use_counts(g: Graph) -> dict:
    """Reads of each Var by the eqns; a graph output counts as two (it always has a reader outside)."""
    uses = {}
    for e in g.eqns:
        for v in e.ins:
            if isinstance(v, Var):
                uses[v] = uses.get(v, 0) + 1
    for v in g.outputs:
        if isinstance(v, Var):
            uses[v] = uses.get(v, 0) + 2
    return uses


_SWAP = (1, 0)


def _transposed_products(g: Graph) -> Graph:
    """``permute(matmul(A, B), (1, 0))`` -> ``matmul(B.T, A.T)`` for matrices, when nothing else reads the product,
    and the same through sums of such products (``(A B + C D)^T``: the tangent of a weight's gradient in forward over
    reverse): the transposes are views BLAS reads by flag, where the transposed product was a view that a consumer
    read with swapped strides, or that a graph output (a weight's gradient ``(x.T g).T`` in a compiled ``nn.Linear``
    backward) copied into a fresh array.  ``A.T`` of ``A = X.T`` is ``X`` itself."""
    defs = {}
    uses = None
    eqns, dropped = [], set()

    def swappable(v, diff):
        """Whether ``v.T`` can be computed as transposed products in place of ``v``: a matrix product, or a sum
        of such, read only where it is transposed."""
        d = defs.get(v) if isinstance(v, Var) else None
        if d is None or d.diff != diff or len(d.outs) != 1 or uses.get(v) != 1 or v.aval.ndim != 2:
            return False
        if d.op.name == "matmul":
            return all(isinstance(u, Var) and u.aval.ndim == 2 for u in d.ins)
        return d.op.name in ("add", "sub") and all(isinstance(u, Var) and _same_type(u, v) and swappable(u, diff)
                                                   for u in d.ins)

    def transposed(v, perm_eqn, need):
        """``v.T``'s Var: a view of a transposed view's base, else a new permute eqn."""
        vd = defs.get(v)
        if vd is not None and vd.op.name == "permute" and tuple(vd.params["perm"]) == _SWAP \
                and vd.diff == perm_eqn.diff and vd.needs[0] == need and isinstance(vd.ins[0], Var):
            return vd.ins[0]
        t = Var(Aval(tuple(reversed(v.aval.shape)), v.aval.dtype))
        emit(perm_eqn.replace(ins=[v], outs=[t], needs=(need,), check=None))
        return t

    def emit(e):
        for o in e.outs:
            defs[o] = e
        eqns.append(e)

    def rewrite(v, out, perm_eqn):
        """Emit ``out = v.T`` from v's operands; v's own eqn is dropped."""
        d = defs[v]
        dropped.add(id(d))
        check = perm_eqn.check if out is perm_eqn.outs[0] and perm_eqn.check is not None else d.check
        if d.op.name == "matmul":
            a, b = d.ins
            bt, at = transposed(b, perm_eqn, d.needs[1]), transposed(a, perm_eqn, d.needs[0])
            emit(d.replace(ins=[bt, at], outs=[out], needs=(d.needs[1], d.needs[0]), check=check))
            return
        ins = []
        for u in d.ins:
            t = Var(Aval(tuple(reversed(u.aval.shape)), u.aval.dtype))
            rewrite(u, t, perm_eqn)
            ins.append(t)
        emit(d.replace(ins=ins, outs=[out], check=check))

    for e in g.eqns:
        if e.op.name == "permute" and tuple(e.params["perm"]) == _SWAP and isinstance(e.ins[0], Var) \
                and defs.get(e.ins[0]) is not None and defs[e.ins[0]].op.name in ("matmul", "add", "sub"):
            if uses is None:
                uses = _use_counts(g)
            if swappable(e.ins[0], e.diff):
                rewrite(e.ins[0], e.outs[0], e)
                continue
        emit(e)
    if not dropped:
        return g
    return Graph(g.inputs, [e for e in eqns if id(e) not in dropped], g.outputs)


def _fold_index_put_adds(g: Graph) -> Graph:
    """``x + index_put(zeros, v; accumulate)`` -> ``index_put(x, v; accumulate)`` when the index_put's result has
    no other use: the gradient of ``q, k, v = x.split(C, dim=2)`` (three index_puts into zeros, then two adds of
    full-size buffers) becomes one buffer that each gradient is added into.  The same values: x + 0 is x outside
    the region (up to the sign of a zero), and x + (0 + v) = x + v inside it."""
    uses = _use_counts(g)
    defs, eqns, dropped = {}, [], set()
    for e in g.eqns:
        if e.op.name == "add" and not e.diff and len(e.ins) == 2:
            for i in (1, 0):
                y, x = e.ins[i], e.ins[1 - i]
                d = defs.get(y) if isinstance(y, Var) else None
                if d is not None and d.op.name == "index_put" and d.params.get("accumulate") and not d.diff \
                        and uses.get(y) == 1 and isinstance(x, Var) and _same_type(x, e.outs[0]) \
                        and _same_type(y, e.outs[0]) and _is_const(d.ins[0], 0, defs):
                    dropped.add(id(d))
                    e = d.replace(ins=[x] + list(d.ins[1:]), outs=e.outs, loc=e.loc)
                    break
        for o in e.outs:
            defs[o] = e
        eqns.append(e)
    if not dropped:
        return g
    return Graph(g.inputs, [e for e in eqns if id(e) not in dropped], g.outputs)
