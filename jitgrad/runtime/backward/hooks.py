"""The user's code that a backward runs: hooks on nodes, tensors and leaves (``register_hook``,
``register_prehook``, ``register_post_accumulate_grad_hook``) and callbacks queued until the backward ends
(``queue_callback``).  The engine (engine.py) calls these where a node or a leaf has them."""
from __future__ import annotations

import threading

from ..tensor import Tensor


class Callbacks(threading.local):
    """Callbacks queued during a backward() call, run when it ends (torch's
    ``Variable._execution_engine.queue_callback``); DistributedDataParallel waits for its gradient buckets there."""

    def __init__(self):
        self.depth = 0
        self.queue = []


CALLBACKS = Callbacks()


def queue_callback(fn):
    """Run ``fn()`` when the backward() call now running finishes (its gradients are all accumulated)."""
    if CALLBACKS.depth == 0:
        raise RuntimeError("queue_callback: no backward() call is running (call it from a hook)")
    CALLBACKS.queue.append(fn)


def run_queued_callbacks():
    q = CALLBACKS.queue
    while q:                    # a callback may queue another
        q.pop(0)()


def run_pre_hooks(node, grads: tuple) -> tuple:
    """A node's pre hooks, in order, on its output gradients ``grads``; returns the gradients they leave."""
    for fn in list(node._pre_hooks.values()):
        r = fn(grads)
        if r is not None:
            grads = tuple(r)
    return grads


def run_post_accumulate_hooks(acc, var):
    """``register_post_accumulate_grad_hook``: each hook gets the leaf after its .grad was updated."""
    for fn in list(acc.post_hooks.values()):
        r = fn(var)
        if r is not None:       # torch's texts: a Tensor is "should return None", anything else a TypeError
            if not isinstance(r, Tensor):
                raise TypeError(f"expected Variable, but hook returned '{type(r).__name__}'")
            raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def run_tensor_hooks(hooks, g):
    for fn in list(hooks.values()):
        r = fn(g)
        if r is not None:
            if g is None:
                g = r
                continue
            if not isinstance(r, Tensor) or r.shape != g.shape:
                raise RuntimeError(f"hook '{getattr(fn, '__name__', fn)}' has changed the size of value: expected "
                                   f"{list(g.shape)}, got {list(getattr(r, 'shape', ()))}")
            if r.dtype is not g.dtype:      # torch's check: a hook may not change the gradient's type
                raise RuntimeError(f"hook '{getattr(fn, '__name__', fn)}' has changed the type of value (was "
                                   f"{g.type()} got {r.type()})")
            g = r
    return g


__all__ = ["Callbacks", "CALLBACKS", "queue_callback", "run_queued_callbacks", "run_pre_hooks",
           "run_post_accumulate_hooks", "run_tensor_hooks"]
