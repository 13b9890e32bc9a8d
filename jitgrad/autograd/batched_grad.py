"""``torch.autograd.grad``: the engine's ``grad`` (runtime/backward/engine.py), and ``is_grads_batched=True``, where the
first dim of every grad_output is a batch of cotangents.

torch runs the backward pass once under vmap; jitgrad has no vmap, so it runs one backward pass per batch entry
(keeping the graph between them) and stacks each input's gradients along a new first dim.  The results are the
same (a stack is differentiable, so ``create_graph=True`` works); the cost is one pass per entry.
"""
from __future__ import annotations

import numpy as np

from ..library.elementary import stack
from ..runtime.backward import engine
from ..runtime.tensor import Tensor


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Return the sum of gradients of ``outputs`` w.r.t. ``inputs`` (nothing is accumulated into ``.grad``); with
    ``is_grads_batched``, the first dim of each grad_output is a batch and the gradients are stacked.

    >>> import jitgrad as jg
    >>> x = jg.tensor(3., requires_grad=True)
    >>> g, = jg.autograd.grad(x ** 3, x, create_graph=True)
    >>> g2, = jg.autograd.grad(g, x)
    >>> float(g), float(g2)
    (27.0, 18.0)
    """
    if is_grads_batched:        # one backward pass per batch entry, stacked
        return batched_grad(engine.grad, engine._as_tuple(outputs), engine._as_tuple(inputs),
                            engine._as_tuple(grad_outputs), retain_graph, create_graph,
                            allow_unused if allow_unused is not None else materialize_grads, materialize_grads)
    return engine.grad(outputs, inputs, grad_outputs, retain_graph, create_graph, only_inputs, allow_unused,
                       materialize_grads)


def batched_grad(grad_fn, outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                 materialize_grads):
    """``grad_fn`` (engine.grad) once per entry of the grad_outputs' first dim; each input's results stacked.
    ``outputs``, ``inputs`` and ``grad_outputs`` are tuples."""
    if any(g is None for g in grad_outputs):
        raise RuntimeError("grad: is_grads_batched=True needs a grad_output for every output (the first dim of "
                           "each is the batch)")
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        out_shape, g_shape = engine._calculate_shape(out, g, True)
        if g.ndim == 0 or tuple(g_shape) != tuple(out_shape):
            raise RuntimeError(f"If `is_grads_batched=True`, we interpret the first dimension of each grad_output as "
                               f"the batch dimension. The sizes of the remaining dimensions are expected to match the "
                               f"shape of corresponding output, but a mismatch was detected: grad_output[{i}] has a "
                               f"shape of {g_shape} and output[{i}] has a shape of {out_shape}. If you only want some "
                               f"tensors in `grad_output` to be considered batched, consider using vmap.")
    sizes = {g.shape[0] for g in grad_outputs}
    if len(sizes) != 1:
        raise RuntimeError(f"grad: is_grads_batched=True needs the same batch size (first dim) in every grad_output, "
                           f"got {sorted(sizes)}")
    (n,) = sizes
    if n == 0:
        raise RuntimeError("grad: is_grads_batched=True with a batch of size 0")
    keep = create_graph if retain_graph is None else retain_graph
    # torch's engine casts each cotangent to its output's dtype (an integer batch for a float output is fine)
    grad_outputs = tuple(g if g.dtype is o.dtype or not isinstance(o, Tensor) else g.to(o.dtype)
                         for g, o in zip(grad_outputs, outputs))
    per_entry = []
    for b in range(n):
        per_entry.append(grad_fn(outputs, inputs, tuple(g[b] for g in grad_outputs),
                                 retain_graph=True if b < n - 1 else keep, create_graph=create_graph,
                                 allow_unused=True, materialize_grads=False))
    result = []
    for i, t in enumerate(inputs):
        gs = [entry[i] for entry in per_entry]
        if all(g is None for g in gs):
            if not allow_unused and not materialize_grads:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not have been used in the "
                                   "graph. Set allow_unused=True if this is the desired behavior.")
            if not materialize_grads:
                result.append(None)
                continue
        shape = tuple(t.shape)
        dtype = t._data.dtype
        gs = [g if g is not None else Tensor._make(np.zeros(shape, dtype)) for g in gs]
        result.append(stack(gs, 0))
    return tuple(result)


__all__ = ["grad", "batched_grad"]
