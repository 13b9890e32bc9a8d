"""The functional forms of the layers (``linear``, ``embedding``, ``layer_norm``, ``batch_norm``), re-exported by
``jitgrad.nn.functional``; compositions of primitives, so they trace and compile."""
from __future__ import annotations

from ..library import elementary as F
from ..ir.ops import OPS as O
from ..runtime import grad_mode
from ..library.torch_kwargs import torch_kwargs
from ..runtime.grad_names import named
from ..runtime.dispatch import bind


def linear(input, weight, bias=None, **torch_kw):
    """``input @ weight.T + bias`` with torch's ``(out_features, in_features)`` weight layout."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(linear, 'linear', (input, weight, bias), {}, torch_kw)
    if input.shape[-1] != weight.shape[-1]:
        raise RuntimeError(f"linear: mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, input.shape))} "
                           f"and {'x'.join(map(str, weight.shape[::-1]))})")
    out = F.matmul(input, weight.T)
    out = out if bias is None else out + bias
    if input.ndim == 2:     # torch's one node for the 2-d case
        named(out, "AddmmBackward0" if bias is not None else "MmBackward0")
    return out


def embedding(input, weight, padding_idx=None, **torch_kw):
    """Rows of ``weight`` picked by the integer tensor ``input``; the ``padding_idx`` row gets no gradient."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(embedding, 'embedding', (input, weight, padding_idx), {}, torch_kw)
    if input.dtype.name not in ("int64", "int32"):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {input.dtype.name} instead (while checking arguments for embedding)")
    out = weight[input]
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += weight.shape[0]
        pad = (input == padding_idx).unsqueeze(-1)
        out = F.where(pad, out.detach(), out)
    return out


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, **torch_kw):
    """Normalise over the trailing ``normalized_shape`` dimensions (biased variance), then scale and shift."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(layer_norm, 'layer_norm', (input, normalized_shape, weight, bias, eps), {}, torch_kw)
    normalized_shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}")
    # one fused op in eager mode; traced or on a device its decomposition (ir/ops/normalization.py)
    out = bind(O["layer_norm"], input, naxes=k, eps=float(eps))
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def update_running_stats(running_mean, running_var, mean, var, count, momentum):
    """Batch and instance norm's running statistics, updated in place with no graph:
    ``running = momentum * batch + (1 - momentum) * running``, the batch variance ``var`` (biased, over ``count``
    values) made unbiased.  Either running tensor may be None."""
    with grad_mode.no_grad():
        if running_mean is not None:
            running_mean.copy_(momentum * mean + (1 - momentum) * running_mean)
        if running_var is not None:
            running_var.copy_(momentum * (var * (count / (count - 1))) + (1 - momentum) * running_var)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5, **torch_kw):
    """Batch normalisation over dim 0 (and 2 for ``(N, C, L)`` input).  In training the batch statistics
    normalise and, when given, the running statistics are updated in place (``momentum`` a float or a 0-d
    tensor): ``running = momentum * batch + (1 - momentum) * running``, with the unbiased batch variance."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(batch_norm, 'batch_norm', (input, running_mean, running_var, weight, bias, training, momentum, eps), {}, torch_kw)
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected at least 2D input (got {input.ndim}D input)")
    C = input.shape[1]
    dims = (0,) + tuple(range(2, input.ndim))
    shape = (1, C) + (1,) * (input.ndim - 2)
    if training:
        n = input.numel() // C
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"{list(input.shape)}")
        mean = input.mean(dims, keepdim=True)
        d = input - mean
        var = (d * d).mean(dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            update_running_stats(running_mean, running_var, mean.detach().reshape(C), var.detach().reshape(C), n,
                                 momentum)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("batch_norm: running_mean and running_var must be given when training=False")
        mean = running_mean.reshape(shape)
        var = running_var.reshape(shape)
        d = input - mean
    out = d * F.rsqrt(var + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


__all__ = ["linear", "embedding", "layer_norm", "batch_norm"]
