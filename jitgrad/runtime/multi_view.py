"""One backward node for all the views a multi-output view function returns (unbind, split, chunk), as torch has
one ``UnbindBackward0`` with an output per piece.

The pieces are made one view op each (each its own node); ``join`` then gives them one node with an output per
piece, whose vjp puts the pieces' gradients back together (the library passes how: stack for unbind, cat for split).
So one backward through any piece runs that node once, and a hook registered on a sibling piece is called with
None (torch's semantics), instead of each piece running alone.
"""
from __future__ import annotations

import numpy as np

from .dispatch import OpNode
from .view_inplace import BY_POSITIONS


class _JoinedViewsOp:
    """Stands in for an OpDef on the joined node: its vjp is ``combine(grads, axis)`` of the pieces' gradients (zeros
    where a piece got none, made by the engine from ``out_meta``).  One per (name, combine), as an OpDef is one per
    primitive: the node's ``params`` hold the axis, so an eager backward replays its rule on arrays per signature
    (``pullback_plans``) as any op's."""

    saves_in = saves_out = nondiff_inputs = ()
    saved_for = None
    pullback = None         # (no pullback of its own: its rule is replayed, pullback_plans.py)
    view = False

    def __init__(self, name, combine):
        self.name = name
        self.grad_name = name + "Backward0"
        self.combine = combine

    def vjp(self, ctx, *grads):
        return (self.combine(list(grads), ctx.params["axis"]),)


_JOINED: dict = {}      # (name, combine) -> its _JoinedViewsOp


def join(outs, input, name, combine, axis):
    """Give the pieces ``outs`` of ``input`` one node named ``<name>Backward0`` (output k: piece k), whose vjp is
    ``combine(grads, axis)``.  Only eager
    CPU pieces that each recorded a node of ``input`` are joined (traced and device views keep one node each)."""
    if not outs:
        return
    first = outs[0].grad_fn
    if first is None:
        return
    for t in outs:
        if t is input or t.grad_fn is None or type(t._data) is not np.ndarray:
            return
    edge = first.next_functions[0]
    op = _JOINED.get((name, combine))
    if op is None:
        op = _JOINED[name, combine] = _JoinedViewsOp(name, combine)
    node = OpNode(op, {"axis": axis}, (edge,), (True,))
    node.inputs = (None,)
    node.outputs = ()
    node.versions = node.out_versions = None
    node.shapes = (tuple(input._data.shape),)
    node.dtypes = (input.dtype,)
    node.out_meta = tuple((t._data.shape, t.dtype) for t in outs)
    node._loc = first._loc
    node.stack = first.stack
    if first.stack is not None:
        node.anomaly_parent = first.anomaly_parent
    if outs[0]._base is not None:       # the pieces are views: a later write into the base refreshes each one
        node.view_args, node.view_base_fn = BY_POSITIONS, outs[0]._base.grad_fn
    for k, t in enumerate(outs):
        t.grad_fn = node
        t._out_nr = k


__all__ = ["join"]

