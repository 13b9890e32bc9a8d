"""``jitgrad.func``: torch.func's composable transforms.

``vmap`` traces the function once at per-example shapes and evaluates the trace with per-primitive batching
rules (``batching.py``), so vectorised code is made of ordinary jitgrad ops: differentiable, nestable and
compilable.  ``grad``, ``vjp`` and ``jacrev`` sit on jitgrad's reverse mode; ``jvp``, ``jacfwd`` and ``hessian``
(forward over reverse) on its forward mode (dual tensors and the OpDefs' jvp rules), ``linearize`` on the jvp pass
over a traced graph.  ``functional_call`` runs a module with substituted parameters.
"""
from __future__ import annotations

from .differentiate import grad, grad_and_value, jvp, linearize, vjp
from .jacobians import hessian, jacfwd, jacrev
from .vectorize import vmap


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``torch.func.functional_call``: ``module(*args, **kwargs)`` with its parameters and buffers replaced by the
    tensors in ``parameter_and_buffer_dicts`` (a dict, or a sequence of dicts whose keys must not repeat); the
    module is restored afterwards and gradients flow to the given tensors."""
    from ..nn.utils.stateless import _functional_call
    if isinstance(parameter_and_buffer_dicts, dict):
        merged = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, (list, tuple)):
        keys = [k for d in parameter_and_buffer_dicts for k in d]
        seen, repeated = set(), []
        for k in keys:
            if k in seen and k not in repeated:
                repeated.append(k)
            seen.add(k)
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
        merged = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
                         f"{type(parameter_and_buffer_dicts)}")
    return _functional_call(module, merged, args, kwargs, tie_weights=tie_weights, strict=strict)


__all__ = ["vmap", "grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian",
           "functional_call"]
