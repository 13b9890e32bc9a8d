"""Pointwise activations of ``jitgrad.nn.functional`` with torch's ``inplace=`` argument: relu, relu6, leaky_relu,
threshold, hardtanh, elu, silu (and the ``relu_``-style in-place names).  Each is a composition of primitives;
``inplace=True`` writes the result into the input through ``InPlaceOps._apply_inplace`` (version bump, leaf
checks, view rebasing), as torch's in-place kernels do."""
from __future__ import annotations

from ..runtime import functions as F
from ..runtime.torch_kwargs import torch_kwargs


def _maybe_inplace(input, inplace, fn):
    return input._apply_inplace(fn) if inplace else fn(input)


def relu(input, inplace=False, **torch_kw):
    """``max(x, 0)``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(relu, 'relu', (input, inplace), {}, torch_kw)
    return input._apply_inplace(F.relu) if inplace else F.relu(input)     # (the common call: one frame)


def relu_(input, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(relu_, 'relu_', (input,), {}, torch_kw)
    return relu(input, inplace=True)


def threshold(input, threshold, value, inplace=False, **torch_kw):
    """``x`` where ``x > threshold``, else ``value``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(threshold, 'threshold', (input, threshold, value, inplace), {}, torch_kw)
    return _maybe_inplace(input, inplace, lambda x: F.where(x > threshold, x, value))


def threshold_(input, threshold_value, value, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(threshold_, 'threshold_', (input, threshold_value, value), {}, torch_kw)
    return threshold(input, threshold_value, value, inplace=True)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False, **torch_kw):
    """``clamp(x, min_val, max_val)``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(hardtanh, 'hardtanh', (input, min_val, max_val, inplace), {}, torch_kw)
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    # torch's gradient is 0 at the bounds themselves (clamp's is 1 there): the clamped value enters detached
    return _maybe_inplace(input, inplace, lambda x: F.where((x > min_val) & (x < max_val), x,
                                                            F.clamp(x, min_val, max_val).detach()))


def hardtanh_(input, min_val=-1.0, max_val=1.0, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(hardtanh_, 'hardtanh_', (input, min_val, max_val), {}, torch_kw)
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace=False, **torch_kw):
    """``min(max(x, 0), 6)``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(relu6, 'relu6', (input, inplace), {}, torch_kw)
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False, **torch_kw):
    """``x`` where ``x > 0``, else ``negative_slope * x``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(leaky_relu, 'leaky_relu', (input, negative_slope, inplace), {}, torch_kw)
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x, x * negative_slope))


def leaky_relu_(input, negative_slope=0.01, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(leaky_relu_, 'leaky_relu_', (input, negative_slope), {}, torch_kw)
    return leaky_relu(input, negative_slope, inplace=True)


def elu(input, alpha=1.0, inplace=False, **torch_kw):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(elu, 'elu', (input, alpha, inplace), {}, torch_kw)
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x, F.expm1(x) * alpha))


def elu_(input, alpha=1.0, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(elu_, 'elu_', (input, alpha), {}, torch_kw)
    return elu(input, alpha, inplace=True)


def silu(input, inplace=False, **torch_kw):
    """``x * sigmoid(x)``."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(silu, 'silu', (input, inplace), {}, torch_kw)
    return _maybe_inplace(input, inplace, lambda x: x * F.sigmoid(x))


__all__ = ["relu", "relu_", "threshold", "threshold_", "hardtanh", "hardtanh_", "relu6", "leaky_relu", "leaky_relu_",
           "elu", "elu_", "silu"]
