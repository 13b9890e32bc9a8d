"""One node for a chain of two recorded ops where torch has one: ``F.linear``'s matmul and bias add are torch's
single ``AddmmBackward0``, with edges (bias, input, weight.t()).

The values are computed by the ordinary binds (so traced and compiled code see the same primitives); only the eager
graph is rewired: the joined node is a plain op node whose vjp runs the add's, then the matmul's on the add's
cotangent for it, checking both ops' saved values as they would (in plain first order on arrays, as the engine runs
the two nodes).  Hooks on the joined node see torch's edges, in torch's order.
"""
from __future__ import annotations

import numpy as np

from .dispatch import OpNode
from .backward import pullback_plans
from .tensor import Tensor

_new = object.__new__


class _AddmmOp:
    """Stands in for an OpDef on the joined node of ``add(matmul(x, wt), bias)``: edges (bias, x, wt)."""

    saves_in = (1, 2)       # (so a released node refuses a second backward: its ops' saved values are gone)
    saves_out = nondiff_inputs = ()
    saved_for = None
    view = False
    name = "addmm"
    grad_name = "AddmmBackward0"

    def __init__(self, add, mm):
        self.add, self.mm = add, mm

    def pullback(self, node, gs):
        """The pullback on arrays (the engine's plain first order): the add's rule, then the matmul's on the add's
        cotangent for it, each replayed as the engine replays a node's (``pullback_plans.pullback``); None for the
        rules."""
        add, mm = self.add, self.mm
        g = gs[0]
        if type(g) is not np.ndarray:
            return None
        add.check_saved()
        mm.check_saved()
        grads = pullback_plans.pullback(add, [g])
        if grads is None or grads[0] is None:
            return None
        g_mm, gb = grads
        grads = pullback_plans.pullback(mm, [g_mm])
        if grads is None:
            return None
        return gb, grads[0], grads[1]

    def vjp(self, ctx, g):
        add, mm = self.add, self.mm
        g_mm, g_bias = add.apply([g])
        g_x, g_wt = mm.apply([g_mm]) if g_mm is not None else (None, None)
        return g_bias, g_x, g_wt


def join_addmm(out: Tensor) -> Tensor:
    """Give ``out = matmul(x, wt) + bias`` (eager, both ops recorded) one ``AddmmBackward0`` node with edges
    (bias, x, wt); anything else keeps its two nodes."""
    add = out.grad_fn
    if type(add) is not OpNode or type(out._data) is not np.ndarray:
        return out
    mm = add.next_functions[0][0]
    if type(mm) is not OpNode or mm.op.name != "matmul" or mm._x is not None and (
            mm._hooks or mm._pre_hooks or mm.tensor_hooks or mm.retain_grad_refs):
        return out
    node = _new(OpNode)     # (built slot by slot, as dispatch._record builds an op's node)
    node.op = _AddmmOp(add, mm)
    node.params = {}
    node.next_functions = (add.next_functions[1],) + mm.next_functions
    node.needs_grad = (add.needs_grad[1],) + mm.needs_grad
    node.seq = add.seq
    node._freed = False
    node._x = None
    node.view_args = node.view_base_fn = node.torch_name = node.plans = None
    node.shapes = (add.shapes[1],) + mm.shapes
    node.dtypes = (add.dtypes[1],) + mm.dtypes
    node.inputs = (None, None, None)
    node.outputs = (None,)
    node.versions = node.out_versions = None
    node.out_meta = add.out_meta
    node._loc = add._loc
    if add._x is not None and add.stack is not None:     # (anomaly mode)
        node.stack = add.stack
        node.anomaly_parent = add.anomaly_parent
    out.grad_fn = node
    return out


__all__ = ["join_addmm"]
