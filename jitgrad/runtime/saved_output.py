"""What a node keeps of the outputs it saves, as torch's SavedVariable keeps them: a tensor on the output's buffer
and version counter without its grad_fn, so no output -> node -> output cycle keeps a graph alive past ``del``;
backward unpacks it with the node as its grad_fn when the graph it builds must reach that node (create_graph).
Imports nothing of the engine but the forward-mode state (node.py, saved_access.py and function.py read it)."""
from __future__ import annotations

from .forward_state import STATE as _FWD


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


def vjp_through_outputs(node, grads):
    """Run ``node``'s vjp rule with its saved outputs unpacked (grad_fn = node), so the graph a vjp builds under
    create_graph reaches this node through them.  Only the vjp sees them: the node keeps its history-free saved
    outputs, so no cycle outlives the call."""
    saved = node.outputs
    node.outputs = tuple(None if s is None else unpack_output(s, node, i) for i, s in enumerate(saved))
    try:
        return node.op.vjp(node, *grads)
    finally:
        node.outputs = saved
