"""``Module.register_full_backward_hook`` / ``register_full_backward_pre_hook``: torch's module backward hooks.

As torch does, the call's tensor inputs and outputs pass through an identity autograd Function.  The pre-hook
on the outputs' identity node sees the gradients of the outputs (``grad_output``, replaceable by the pre-hooks);
the hook on the inputs' identity node sees the gradients of the inputs (``grad_input``) once everything inside
the module has run, and each full backward hook may replace them.  When no input requires grad the hooks run
at the outputs with ``grad_input`` all None.
"""
from __future__ import annotations

import warnings

from ...runtime import grad_mode
from ...runtime.function import Function
from ...runtime.tensor import Tensor


class BackwardHookFunction(Function):
    """Identity on tensors: gives the module's inputs and outputs a node to hook (torch's name)."""

    @staticmethod
    def forward(ctx, *tensors):
        return tensors if len(tensors) != 1 else tensors[0]

    @staticmethod
    def backward(ctx, *grads):
        return grads if len(grads) != 1 else grads[0]


def _wrap(values):
    """(new values, positions wrapped, node) with the tensors that require grad passed through the identity."""
    pos = [i for i, a in enumerate(values) if isinstance(a, Tensor) and a.requires_grad]
    if not pos:
        return list(values), pos, None
    out = BackwardHookFunction.apply(*[values[i] for i in pos])
    out = out if isinstance(out, tuple) else (out,)
    new = list(values)
    for i, t in zip(pos, out):
        new[i] = t
    return new, pos, out[0].grad_fn


def call_with_backward_hooks(module, args, kwargs, forward):
    """``forward(*args, **kwargs)`` with the module's full backward (pre-)hooks attached to its graph."""
    if not grad_mode.STATE.grad_enabled:
        return forward(*args, **kwargs)
    state = {"grad_output": None}
    n_in = len(args)
    args, in_pos, in_node = _wrap(args)

    def run_hooks(grad_input):
        for hook in list(module._backward_hooks.values()):
            r = hook(module, grad_input, state["grad_output"])
            if r is not None:
                r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
                if len(r) != len(grad_input):
                    raise RuntimeError(f"Backward hook returned an invalid number of grad_input, got {len(r)}, but "
                                       f"expected {len(grad_input)}")
                grad_input = r
        return grad_input

    if in_node is not None:
        def on_inputs(grad_inputs, grad_outputs):
            if state["grad_output"] is None:
                # the gradient reached the module's inputs without passing through its outputs (e.g. a double
                # backward through the saved inputs): torch does not call the hooks then
                return None
            gi = [None] * n_in
            for k, i in enumerate(in_pos):
                gi[i] = grad_outputs[k]
            gi = run_hooks(tuple(gi))
            state["grad_output"] = None     # used once: a later backward must pass through the outputs again
            return tuple(gi[i] for i in in_pos)
        in_node.register_hook(on_inputs)

    out = forward(*args, **kwargs)
    single = not isinstance(out, tuple)
    outs, out_pos, out_node = _wrap((out,) if single else out)
    if out_node is None:
        return out

    def on_outputs(grad_outputs):
        go = [None] * len(outs)
        for k, i in enumerate(out_pos):
            go[i] = grad_outputs[k]
        go = tuple(go)
        for hook in list(module._backward_pre_hooks.values()):
            r = hook(module, go)
            if r is not None:
                go = tuple(r) if isinstance(r, (tuple, list)) else (r,)
        state["grad_output"] = go
        if in_node is None and module._backward_hooks:
            warnings.warn("Full backward hook is firing when gradients are computed with respect to module outputs "
                          "since no inputs require gradients. See https://docs.pytorch.org/docs/main/generated/"
                          "torch.nn.Module.html#torch.nn.Module.register_full_backward_hook for more details.",
                          UserWarning, stacklevel=2)
            run_hooks((None,) * n_in)
        return tuple(go[i] for i in out_pos)
    out_node.register_prehook(on_outputs)
    return outs[0] if single else tuple(outs)
