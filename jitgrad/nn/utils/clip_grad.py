"""``clip_grad_norm_`` and ``clip_grad_value_``: tensor ops only, so they compile inside a training step."""
from __future__ import annotations

import math

import numpy as np

from ...ir.ops import OPS
from ...optim.multi_tensor import eager_ready
from ...library import elementary as F
from ...runtime import grad_mode
from ...runtime.tensor import Tensor


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _eager_plain(grads):
    """Eager CPU gradients of one float dtype, no trace or profiler: the loops below may skip dispatch."""
    if not eager_ready():
        return False
    d0 = grads[0]._data
    if type(d0) is not np.ndarray or d0.dtype.kind != "f":
        return False
    return all(type(g._data) is np.ndarray and g._data.dtype == d0.dtype for g in grads)


def _sum_of_squares_eager(grads):
    """The norm as the tensor-op loop computes it (``(g * g).sum()`` per gradient, added in order, sqrt), each
    step by the ops' own NumPy impls and result dtypes: bit-identical, with no dispatch per gradient."""
    mul, add, red = OPS["mul"].impl, OPS["add"].impl, OPS["sum"].impl
    total = None
    for g in grads:
        d = g._data
        sq = np.asarray(red(mul(d, d), axes=tuple(range(d.ndim)), keepdims=False), dtype=d.dtype)
        total = sq if total is None else np.asarray(add(total, sq), dtype=d.dtype)
    return Tensor._make(total).sqrt()


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale the gradients in place so that their joint ``norm_type`` norm is at most ``max_norm``; returns the
    total norm (before clipping) as a 0-d tensor.  The scale is ``min(max_norm / (norm + 1e-6), 1)``, applied
    as a tensor (no data-dependent branch), as torch does."""
    grads = _grads(parameters)
    max_norm, norm_type = float(max_norm), float(norm_type)
    if not grads:
        from ...library.creation.factories import tensor
        return tensor(0.0)
    plain = _eager_plain(grads)
    with grad_mode.no_grad():
        if norm_type == math.inf:
            norms = [g.abs().amax() for g in grads]
            total = norms[0] if len(norms) == 1 else F.stack(norms).amax()
        elif norm_type == 2.0 and plain:
            total = _sum_of_squares_eager(grads)
        elif norm_type == 2.0:
            # one sum of squares per gradient and a chain of scalar adds: a compiled step reads each gradient
            # once (a fused reduction), with no per-tensor norm op and no stack of the partial results
            total = None
            for g in grads:
                sq = (g * g).sum()
                total = sq if total is None else total + sq.to(total.dtype)
            total = total.sqrt()
        else:
            norms = [F.norm(g.reshape(-1), norm_type) for g in grads]
            total = F.norm(F.stack(norms), norm_type)
        # a Python branch on the value: inside a compiled step this raises the traced-value error
        if error_if_nonfinite and bool(F.logical_not(F.isfinite(total))):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is "
                               "non-finite, so it cannot be clipped. To disable this error and scale the gradients "
                               "by the non-finite norm anyway, set `error_if_nonfinite=False`")
        clip_coef = max_norm / (total + 1e-6)
        clip_coef = F.clamp(clip_coef, max=1.0)
        if plain:
            coef = clip_coef.to(grads[0].dtype)._data
            for g in grads:         # g.mul_(coef) without a dispatch per gradient: the same float ops
                g._check_inplace()
                np.multiply(g._data, coef, out=g._data)
                g._vc[0] += 1
            return total
        for g in grads:
            g.mul_(clip_coef.to(g.dtype))
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp the gradients in place to ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    with grad_mode.no_grad():
        for g in _grads(parameters):
            g.clamp_(-clip_value, clip_value)



def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type`` norm of the tensors viewed as one vector (the norm of their norms), as a 0-d tensor;
    ``error_if_nonfinite`` raises torch's RuntimeError for a NaN or infinite result."""
    from ...library.linalg.norms import vector_norm
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        from ...library.creation.factories import tensor
        return tensor(0.0)
    norms = [vector_norm(t, norm_type) for t in tensors]
    total = vector_norm(F.stack([n.to(norms[0].dtype) for n in norms]), norm_type)
    if error_if_nonfinite and bool(F.logical_not(F.isfinite(total))):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None) -> None:
    """Scale the gradients in place by ``min(max_norm / (total_norm + 1e-6), 1)``, with a norm computed before
    (:func:`get_total_norm`)."""
    grads = _grads(parameters)
    if not grads:
        return
    with grad_mode.no_grad():
        coef = F.clamp(float(max_norm) / (total_norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Deprecated alias of :func:`clip_grad_norm_` (warns FutureWarning, as torch)."""
    import warnings
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of `torch.nn.utils.clip_grad_norm_`.",
                  FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_", "clip_grad_norm"]
