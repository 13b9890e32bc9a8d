"""What a node keeps of the outputs it saves, as torch's SavedVariable keeps them: a tensor on the output's buffer
and version counter without its grad_fn, so no output -> node -> output cycle keeps a graph alive past ``del``;
backward unpacks it with the node as its grad_fn when the graph it builds must reach that node (create_graph).
Imports only Tensor's core and the forward-mode state (node.py, saved_access.py and function.py read it); a
custom Function's saved outputs are kept the same way (``save_outputs_without_history``)."""
from __future__ import annotations

import weakref

from .forward_state import STATE as _FWD
from .tensor import Tensor


def without_history(t):
    """What a node keeps of an output it saves (torch's SavedVariable): a tensor on ``t``'s buffer and version
    counter without t's grad_fn, so no output -> node -> output cycle keeps the graph alive past ``del``.
    (dispatch._record builds the same inline: it is on the eager hot path.)"""
    s = object.__new__(type(t))
    s._data = t._data
    s._vc = t._vc
    s._requires_grad = s._retains_grad = s._inference = False
    s.grad_fn = s._grad = s._base = s._hooks = s._acc = s._view_origin = None
    s._out_nr = 0
    return s


def unpack_output(s, node, nr):
    """A saved output ``s`` (kept without its history, see dispatch._record) as torch's SavedVariable unpacks it:
    a new tensor on its buffer and version counter whose grad_fn is ``node``, the node that saved it."""
    u = without_history(s)
    u.grad_fn = node
    u._out_nr = nr
    if _FWD.active is not None:     # a dual level is open: the unpacked value keeps the saved one's tangents
        _FWD.active.carry(s, u)
    return u


def vjp_through_outputs(node, grads, ctx=None):
    """Run ``node``'s vjp rule with its saved outputs unpacked (grad_fn = node), so the graph a vjp builds under
    create_graph reaches this node through them.  Only the vjp sees them: the node keeps its history-free saved
    outputs, so no cycle outlives the call.  ``ctx``: a copy of the node the rule runs on instead (the backward
    engine's, when it needs fewer of the inputs' gradients); it gets the unpacked outputs."""
    saved = node.outputs
    unpacked = tuple(None if s is None else unpack_output(s, node, i) for i, s in enumerate(saved))
    if ctx is not None and ctx is not node:
        ctx.outputs = unpacked
        return node.op.vjp(ctx, *grads)
    node.outputs = unpacked
    try:
        return node.op.vjp(node, *grads)
    finally:
        node.outputs = saved


def save_outputs_without_history(ctx, node, outs):
    """Saved tensors that are outputs of the Function are kept without their history (``without_history``),
    as torch's SavedVariable keeps outputs, so output -> node -> ctx -> output is no reference cycle: the graph
    dies at ``del``, not at the next garbage collection.  ``saved_tensors`` unpacks them with it."""
    recorded = {id(o) for o in outs if isinstance(o, Tensor) and o.grad_fn is not None}
    saved = list(ctx._saved)
    info = {}
    for i, t in enumerate(saved):
        if t is None or id(t) not in recorded:
            continue
        gf = t.grad_fn
        info[i] = (t._out_nr, None if gf is node else weakref.ref(gf))
        saved[i] = without_history(t)
    if info:
        ctx._saved = tuple(saved)
        ctx._saved_outputs = info
