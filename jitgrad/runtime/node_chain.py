"""One node for a chain of two recorded ops, where torch has one node for the pair: ``F.linear``'s matmul and bias
add are torch's single ``AddmmBackward0`` with edges (bias, input, weight.t()).

The values are computed by the ordinary binds (so traced and compiled code see the same primitives); only the eager
graph is rewired: the joined node runs the outer op's vjp, then the inner op's on the outer's cotangent for it, and
checks both ops' saved values as they would.  Hooks on the joined node see torch's edges and torch's order.
"""
from __future__ import annotations

import numpy as np

from . import forward_state, grad_mode
from .dispatch import OpNode
from .tensor import Tensor

_GM = grad_mode.STATE
_FWD = forward_state.STATE


class _ChainOp:
    """Stands in for an OpDef on a joined node: outer(inner(...), ...)'s vjp, its edges in ``order``."""

    saves_in = saves_out = nondiff_inputs = ()
    saved_for = None
    eager_vjp = None
    view = False

    def __init__(self, name, outer, inner, k, order):
        self.name = name
        self.grad_name = name
        self.outer, self.inner, self.k, self.order = outer, inner, k, order

    def vjp(self, ctx, g):
        outer = _run(self.outer, g)
        gk = outer[self.k]
        inner = _run(self.inner, gk) if gk is not None else (None,) * len(self.inner.next_functions)
        both = [c for i, c in enumerate(outer) if i != self.k] + list(inner)
        return tuple(both[i] for i in self.order)


def _run(node, g):
    """``node``'s vjp on cotangent ``g``, as the engine runs it (the arrays' pullback in plain first order)."""
    node.check_saved()
    ev = node.op.eager_vjp
    if ev is not None and not _GM.grad_enabled and _FWD.active is None and type(g._data) is np.ndarray:
        arrays = ev(node.needs_grad, node.shapes, [None if t is None else t._data for t in node.inputs], g._data)
        if arrays is not None:
            return tuple(None if a is None else Tensor._make(a) for a in arrays)
    return tuple(node.apply([g]))


class ChainNode(OpNode):
    """The joined node; releasing it releases the two it runs."""

    __slots__ = ()

    def release(self):
        super().release()
        self.op.outer.release()
        self.op.inner.release()


def join(out, name, k, order):
    """Give ``out`` (recorded by an op whose input ``k`` was recorded by another op) one node named ``name`` for
    the two, its edges the outer op's others then the inner op's, permuted by ``order``.  Only eager CPU values
    whose two nodes are plain op nodes with one output are joined; anything else keeps its two nodes."""
    outer = out.grad_fn
    if type(outer) is not OpNode or type(out._data) is not np.ndarray or len(outer.out_meta) != 1:
        return out
    inner = outer.next_functions[k][0]
    if type(inner) is not OpNode or len(inner.out_meta) != 1 or outer._hooks or outer._pre_hooks \
            or inner._hooks or inner._pre_hooks or inner.tensor_hooks or inner.retain_grad_refs:
        return out
    edges = [e for i, e in enumerate(outer.next_functions) if i != k] + list(inner.next_functions)
    needs = [n for i, n in enumerate(outer.needs_grad) if i != k] + list(inner.needs_grad)
    shapes = [s for i, s in enumerate(outer.shapes) if i != k] + list(inner.shapes)
    dtypes = [d for i, d in enumerate(outer.dtypes) if i != k] + list(inner.dtypes)
    node = ChainNode(_ChainOp(name, outer, inner, k, order), {}, tuple(edges[i] for i in order),
                     tuple(needs[i] for i in order))
    node.shapes = tuple(shapes[i] for i in order)
    node.dtypes = tuple(dtypes[i] for i in order)
    node.inputs = (None,) * len(order)
    node.outputs = ()
    node.versions = node.out_versions = None
    node.out_meta = outer.out_meta
    node._loc = outer._loc
    node.stack = outer.stack
    if outer.stack is not None:
        node.anomaly_parent = outer.anomaly_parent
    out.grad_fn = node
    out._out_nr = 0
    return out


__all__ = ["join", "ChainNode"]
