"""``torch.autograd.graph``'s edge and hook helpers: ``GradientEdge``, ``get_gradient_edge``,
``register_multi_grad_hook``, and the engine state they read (which nodes the running backward executes)."""
from __future__ import annotations

import collections
import threading

from .dispatch import refresh_view
from .node import RemovableHandle


class GradientEdge(collections.namedtuple("GradientEdge", ["node", "output_nr"])):
    """An edge of the backward graph: output ``output_nr`` of ``node``.  ``autograd.grad`` accepts one in
    ``inputs`` to get the gradient flowing into that edge."""

    __slots__ = ()


def root_edge(t):
    """Where a backward pass starts for ``t`` (a Tensor or a GradientEdge): ``(node, output_nr)``."""
    if type(t) is GradientEdge:
        return t.node, t.output_nr
    if t._base is not None:
        refresh_view(t)         # a view whose base was modified in place since: its current history
    if t.grad_fn is not None:
        return t.grad_fn, t._out_nr
    return t._accumulator(), 0


def get_gradient_edge(tensor) -> GradientEdge:
    """The edge whose gradient is ``tensor``'s gradient (its grad_fn and output number, or a leaf's
    AccumulateGrad node)."""
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does not require "
                           "gradients")
    if tensor.grad_fn is not None:
        return GradientEdge(tensor.grad_fn, tensor._out_nr)
    return GradientEdge(tensor._accumulator(), 0)


class _Running(threading.local):
    def __init__(self):
        self.nodes = None       # the nodes the innermost running backward may execute (engine.run sets it)


RUNNING = _Running()


class _MultiHandle:
    """Removes every hook of a register_multi_grad_hook call."""

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Call ``fn`` once per backward over ``tensors``: with mode "all", ``fn(grads)`` after the gradients of all
    of them that the backward reaches are computed (None for the others); with mode "any", ``fn(grad)`` with
    the first one computed."""
    if mode not in ("all", "any"):
        raise ValueError(f"Expects mode to be one of ('all', 'any') but got {mode}")
    tensors = tuple(tensors)
    state = {"run": None, "grads": None, "count": 0, "expected": 0}

    def start(nodes):
        state["run"] = nodes        # the running backward's node set (held, so its identity is not reused)
        state["grads"] = [None] * len(tensors)
        state["count"] = 0
        nodes = RUNNING.nodes
        if nodes is None:
            state["expected"] = len(tensors)
        else:
            state["expected"] = sum(1 for t in tensors if t.requires_grad and root_edge(t)[0] in nodes)

    def make(i):
        def hook(grad):
            nodes = RUNNING.nodes
            if state["run"] is not nodes or nodes is None:
                start(nodes)
            if mode == "any":
                if state["count"] == 0:
                    state["count"] = 1
                    fn(grad)
                return None
            state["grads"][i] = grad
            state["count"] += 1
            if state["count"] == state["expected"]:
                grads, state["grads"] = state["grads"], None
                state["run"] = None
                fn(tuple(grads))
            return None
        return hook

    handles = [t.register_hook(make(i)) for i, t in enumerate(tensors) if t.requires_grad]
    return _MultiHandle(handles)


__all__ = ["GradientEdge", "get_gradient_edge", "register_multi_grad_hook", "RemovableHandle"]
