"""The gradients a backward starts from (``backward``'s ``grad_tensors``, ``grad``'s ``grad_outputs``): checked
against their outputs as torch checks them, cast to the outputs' dtypes, ones where a scalar output is given none."""
from __future__ import annotations

import numpy as np

from ..graph_hooks import GradientEdge
from ..node import zeros_for
from ..tensor import Tensor


def make_root_grads(outputs, grad_outputs, create_graph):
    """The gradient each of ``outputs`` starts with: ``grad_outputs``' entry checked (shape, kind) and cast to its
    dtype, or ones for a scalar output given None."""
    grads = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if type(out) is GradientEdge:       # backward(edge): the gradient flowing into that edge (torch)
            meta = out.node.out_meta[out.output_nr] if getattr(out.node, "out_meta", None) else None
            if g is None:
                if meta is None or int(np.prod(meta[0])) != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                g = zeros_for(meta) + 1
            grads.append(g)
            continue
        if g is None:
            if out._data.size != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs (output {i} has shape "
                                   f"{list(out.shape)}); pass gradient= / grad_outputs= of that shape")
            d = out._data
            g = out._same_device(Tensor._make(np.array(1, d.dtype) if d.ndim == 0 else np.ones(d.shape, d.dtype)))
        else:
            if not isinstance(g, Tensor):
                g = Tensor._make(np.asarray(g, dtype=out._data.dtype))
            if g.shape != out.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and "
                                   f"output[{i}] has a shape of {out.shape}.")     # Size: torch's text
            if g.is_floating_point() != out.is_floating_point():
                raise RuntimeError(f"For complex Tensors, both grad_output and output are required to have the same "
                                   f"dtype. Mismatch in dtype: grad_output[{i}] has a dtype of {g.dtype.name} and "
                                   f"output[{i}] has a dtype of {out.dtype.name}.")
            if not create_graph and g.requires_grad:
                g = g.detach()
            if g.dtype is not out.dtype and g.is_floating_point():
                g = g.to(out.dtype)     # torch casts a gradient to the dtype of the tensor it is for
        grads.append(g)
    return grads


def check_outputs(outputs):
    """Raise unless every output is a GradientEdge or a Tensor that requires grad."""
    for i, t in enumerate(outputs):
        if type(t) is GradientEdge:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"element {i} of tensors is not a Tensor (got {type(t).__name__})")
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
