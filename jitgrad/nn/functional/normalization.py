"""Normalisation functions: ``F.layer_norm``, ``F.batch_norm`` (and the running statistics update it shares
with ``F.instance_norm``), ``F.instance_norm``, ``F.group_norm``, ``F.local_response_norm``, ``F.rms_norm`` and
``F.normalize``.  Compositions of primitives (means, rsqrt, shifted channel windows, the p-norm clamped away
from 0), so they differentiate to any order and compile.

Instance normalisation normalises each (sample, channel) plane over its spatial dims with its own mean and
biased variance; its running statistics are the batch average of the instance statistics (unbiased
variance), updated in place in training and used in eval, as torch does.

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.normalize(jg.tensor([[3.0, 4.0]]))
tensor([[0.6000, 0.8000]])
"""
from __future__ import annotations

import numpy as np

from ...ir.ops import OPS as O
from ...runtime import grad_mode
from ...library import elementary as F
from ...library.dim_args import torch_dim
from ...runtime.bind_route import ROUTE as _ROUTE
from ...runtime.dispatch import bind
from ...runtime.flat_bind import flat_entry
from ...library.torch_kwargs import torch_kwargs
from .padding import pad


_LAYER_NORM = O["layer_norm"]
_LAYER_NORM_FLAT = flat_entry(_LAYER_NORM, 1)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, **torch_kw):
    """Normalise over the trailing ``normalized_shape`` dimensions (biased variance), then scale and shift."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(layer_norm, 'layer_norm', (input, normalized_shape, weight, bias, eps), {}, torch_kw)
    normalized_shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
    k = len(normalized_shape)
    xs = tuple(input._data.shape)       # (the payload's, no property frames; a device array's may be no tuple)
    if tuple(xs[len(xs) - k:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, normalized_shape))}], but got input of size{list(input.shape)}")
    # one fused op in eager mode; traced or on a device its decomposition (ir/ops/normalization.py)
    out = _LAYER_NORM_FLAT(input, {"naxes": k, "eps": float(eps)}) if _ROUTE.plain else \
        bind(_LAYER_NORM, input, naxes=k, eps=float(eps))
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


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, **torch_kw):
    """Normalise ``(N, C, *)`` over each group of ``C / num_groups`` channels and the spatial dims (biased
    variance), then scale and shift per channel by ``weight`` and ``bias``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(group_norm, 'group_norm', (input, num_groups, weight, bias, eps), {}, torch_kw)
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    n, c = input.shape[:2]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(t.shape)} and input of shape {list(input.shape)}")
    x = input.reshape(n, num_groups, -1)
    mean = x.mean(2, keepdim=True)
    d = x - mean
    var = (d * d).mean(2, keepdim=True)
    out = (d * F.rsqrt(var + eps)).reshape(input.shape)
    shape = (c,) + (1,) * (input.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0, **torch_kw):
    """``x / (k + alpha * mean of x**2 over a window of size channels) ** beta`` (the window centred on each
    channel, zero-padded at the ends: ``size // 2`` before, ``(size - 1) // 2`` after)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(local_response_norm, 'local_response_norm', (input, size, alpha, beta, k), {}, torch_kw)
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality                          input (got {input.ndim} "
                         "dimensions)")
    if input.numel() == 0:
        return input
    c = input.shape[1]
    sq = input * input
    before, after = size // 2, (size - 1) // 2
    padded = pad(sq, (0, 0) * (input.ndim - 2) + (before, after))
    total = padded.narrow(1, 0, c)
    for i in range(1, size):
        total = total + padded.narrow(1, i, c)
    div = (total * (alpha / size) + k) ** beta
    return input / div


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5, **torch_kw):
    """Normalise each ``input[n, c]`` over its spatial dims (torch.nn.functional.instance_norm).  With
    ``use_input_stats=False`` the running statistics normalise instead (eval with tracked statistics)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(instance_norm, "instance_norm", (input, running_mean, running_var, weight, bias,
                                                              use_input_stats, momentum, eps), {}, torch_kw)
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input with a batch, a channel and at least one spatial dim "
                         f"(got {input.ndim}D input of shape {list(input.shape)})")
    n, c = input.shape[0], input.shape[1]
    dims = tuple(range(2, input.ndim))
    per_channel = (1, c) + (1,) * len(dims)
    if use_input_stats:
        spatial = input.numel() // max(n * c, 1)
        if spatial <= 1 and input.numel():
            raise ValueError(f"Expected more than 1 spatial element when training, got input size {list(input.shape)}")
        mean = input.mean(dims, keepdim=True)
        d = input - mean
        var = (d * d).mean(dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            # the batch average of the instance statistics
            update_running_stats(running_mean, running_var, mean.detach().reshape(n, c).mean(0),
                                 var.detach().reshape(n, c).mean(0), spatial, momentum)
        out = d / (var + eps).sqrt()
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        out = (input - running_mean.reshape(per_channel)) / (running_var.reshape(per_channel) + eps).sqrt()
    if weight is not None:
        out = out * weight.reshape(per_channel)
    if bias is not None:
        out = out + bias.reshape(per_channel)
    return out


def rms_norm(input, normalized_shape, weight=None, eps=None, **torch_kw):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last ``len(normalized_shape)`` dims; ``eps=None`` is the
    machine epsilon of ``input``'s dtype, as torch.

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.rms_norm(jg.tensor([[1.0, 1.0, -1.0, -1.0]]), (4,))
    tensor([[ 1.,  1., -1., -1.]])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(rms_norm, "rms_norm", (input, normalized_shape, weight, eps), {}, torch_kw)
    if not isinstance(normalized_shape, (tuple, list)):
        raise TypeError(f"rms_norm(): argument 'normalized_shape' (position 2) must be tuple of ints, not "
                        f"{type(normalized_shape).__name__}")
    shape = tuple(int(n) for n in normalized_shape)
    k = len(shape)
    if input.shape[input.ndim - k:] != shape or k > input.ndim:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    if weight is not None and tuple(weight.shape) != shape:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got weight of shape "
                           f"{list(weight.shape)} and normalized_shape = {list(shape)}")
    if eps is None:
        eps = float(np.finfo(input.dtype.np).eps) if input.is_floating_point() else 1.1920928955078125e-07
    dims = tuple(range(input.ndim - k, input.ndim))
    out = input * F.rsqrt((input * input).mean(dims, keepdim=True) + eps)
    return out * weight if weight is not None else out


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None, **torch_kw):
    """``input / max(||input||_p, eps)`` along ``dim`` (rows of unit norm by default).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.normalize(jg.tensor([[1.0, 1.0], [0.0, 2.0]]), p=1)
    tensor([[0.5000, 0.5000],
            [0.0000, 1.0000]])
    """
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(normalize, "normalize", (input, p, dim, eps, out), {}, torch_kw)
    d = torch_dim(input, dim)
    denom = F.norm(input, p, d, keepdim=True).clamp_min(eps).expand_as(input)
    r = input / denom
    if out is not None:
        from ...library.torch_kwargs import write_out
        return write_out("normalize", r, out, (input,))
    return r


__all__ = ["layer_norm", "batch_norm", "group_norm", "local_response_norm", "instance_norm", "rms_norm", "normalize"]
