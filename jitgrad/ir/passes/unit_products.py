"""Before fusion planning: matrix products with a dimension of one as loops.

A product ``x @ y`` whose contraction has one term (``x`` of shape ``(..., m, 1)``) is an outer product: the
broadcast multiply ``x * y``, as eager's ``matmul`` computes it.  One whose result has one column (``y`` of shape
``(..., k, 1)``) is a sum over the last axis of ``x * y.mT``; one with one row (``x`` of shape ``(..., 1, k)``) a sum
over the rows of ``x.mT * y``.  As GEMMs they were launches of their own, on the calling thread (B11's last layer,
``64 -> 1``, and its gradients: five small-kernel calls a step, each under the pool's threshold, so each one cut the
step's pool rounds); as loops they fuse with the elementwise work around them (the tanh before, its derivative
after), and a sum over rows is a column sum with fixed chunks (``loops.chunked_rows``), the same at every thread
count.  The outer product's values are the GEMM's (one product per element); the sums add the same terms in the
loop's order, not the small kernel's (compiled products keep no bit agreement with eager's GEMM or GEMV).
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph, Lit, Var
from ..ops import OPS, Aval

_FLOATS = ("float32", "float64")


def _one(d) -> bool:
    return type(d) is int and d == 1


def _big(d) -> bool:
    return type(d) is not int or d > 1


def unit_products(g: Graph) -> Graph:
    """``g`` with each floating matrix product of a unit contraction, a single result column or a single result
    row (both operands at least 2-D) computed by elementwise multiplies and sums; ``g`` itself when there is none.
    An operand that is a literal of ones (the cotangent of a sum) is no multiply: the other one broadcast, or
    summed."""
    defs = {o: e for e in g.eqns for o in e.outs}
    if not any(_kind(e) for e in g.eqns):
        return g
    eqns = []

    def emit(like, op, ins, aval, params, needs, final):
        out = like.outs[0] if final else Var(aval)
        eqns.append(like.replace(op=OPS[op], ins=ins, outs=[out], params=params, needs=needs,
                                 check=like.check if final else None))
        return out

    def transposing(v):
        """The input of the permute that made matrix ``v`` as its transpose, else None."""
        d = defs.get(v)
        n = v.aval.ndim
        if d is not None and d.op.name == "permute" and isinstance(d.ins[0], Var) \
                and tuple(d.params["perm"]) == tuple(range(n - 2)) + (n - 1, n - 2):
            return d.ins[0]
        return None

    def swapped(like, v, need):
        """``v.mT``: the input of a transposing permute that made ``v``, else a new permute eqn."""
        u = transposing(v)
        if u is not None:
            return u
        n = v.aval.ndim
        shape = tuple(v.aval.shape[:-2]) + (v.aval.shape[-1], v.aval.shape[-2])
        return emit(like, "permute", [v], Aval(shape, v.aval.dtype), {"perm": tuple(range(n - 2)) + (n - 1, n - 2)},
                    (need,), False)

    def summed(like, v, axis, need):
        emit(like, "sum", [v], like.outs[0].aval, {"axes": (axis,), "keepdims": True}, (need,), True)

    for e in g.eqns:
        kind = _kind(e)
        if kind is None:
            eqns.append(e)
            continue
        x, y = e.ins
        out = e.outs[0]
        nx, ny = e.needs
        ones_x, ones_y = isinstance(x, Lit), isinstance(y, Lit)
        if kind == "outer":         # (..., m, 1) @ (..., 1, n): x * y
            if ones_x or ones_y:
                v, need = (y, ny) if ones_x else (x, nx)
                emit(e, "broadcast_to", [v], out.aval, {"shape": tuple(out.aval.shape)}, (need,), True)
            else:
                emit(e, "mul", [x, y], out.aval, {}, (nx, ny), True)
            continue
        if kind == "row" and ones_x:        # ones(1, k) @ y: y's column sums
            summed(e, y, y.aval.ndim - 2, ny)
            continue
        u = transposing(x) if kind == "column" and x.aval.ndim == 2 and y.aval.ndim == 2 else None
        if u is not None:           # u.T @ y, y a column: the column sums of u * y, as a row, reshaped
            prod = emit(e, "mul", [u, y], u.aval, {}, (nx, ny), False)
            row = emit(e, "sum", [prod], Aval((1, u.aval.shape[1]), out.aval.dtype), {"axes": (0,), "keepdims": True},
                       (nx or ny,), False)
            emit(e, "reshape", [row], out.aval, {"shape": tuple(out.aval.shape)}, (nx or ny,), True)
            continue
        if kind == "column":        # (..., m, k) @ (..., k, 1): sum_k x * y.mT, kept as (..., m, 1)
            a, b = x, swapped(e, y, ny)
        else:                       # (..., 1, k) @ (..., k, n): sum over the rows of x.mT * y, kept as (..., 1, n)
            a, b = swapped(e, x, nx), y
        shape = _broadcast(a.aval.shape, b.aval.shape)
        prod = emit(e, "mul", [a, b], Aval(shape, out.aval.dtype), {}, (nx, ny), False)
        summed(e, prod, len(shape) - 1 if kind == "column" else len(shape) - 2, nx or ny)
    return Graph(g.inputs, eqns, g.outputs)


def _ones(v) -> bool:
    return isinstance(v, Lit) and v.aval.ndim >= 2 and bool(np.all(np.asarray(v.value) == 1))


def _kind(e):
    """"outer", "column", "row" for a matrix product this pass rewrites, else None: operands at least 2-D, Vars or
    (one of them, where its product is a broadcast or a sum of the other) literals of ones."""
    if e.op.name != "matmul" or len(e.ins) != 2:
        return None
    x, y = e.ins
    if x.aval.ndim < 2 or y.aval.ndim < 2 or x.aval.dtype.name not in _FLOATS:
        return None
    m, k, n = x.aval.shape[-2], x.aval.shape[-1], y.aval.shape[-1]
    kind = "outer" if _one(k) else "column" if _one(n) and _big(k) else "row" if _one(m) and _big(k) else None
    if kind is None or (isinstance(x, Var) and isinstance(y, Var)):
        return kind
    out = tuple(e.outs[0].aval.shape)
    if kind == "outer" and (_ones(x) and isinstance(y, Var) or _ones(y) and isinstance(x, Var)):
        # the other operand alone must reach the product's shape by broadcasting
        v = y if isinstance(y, Var) else x
        return kind if len(v.aval.shape) <= len(out) else None
    if kind == "row" and _ones(x) and isinstance(y, Var) and tuple(y.aval.shape[:-2]) == out[:-2]:
        return kind
    return None


def _broadcast(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    return tuple(q if _one(p) else p for p, q in zip(a, b))    # (a symbolic size meets its equal or a 1)


__all__ = ["unit_products"]
