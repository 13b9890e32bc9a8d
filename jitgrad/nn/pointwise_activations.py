"""Pointwise activations of ``jitgrad.nn.functional`` with torch's ``inplace=`` argument: relu, relu6, leaky_relu,
threshold, hardtanh, elu, silu (and the ``relu_``-style in-place names).  Each is a composition of primitives;
``inplace=True`` writes the result into the input through ``InPlaceOps._apply_inplace`` (version bump, leaf
checks, view rebasing), as torch's in-place kernels do."""
from __future__ import annotations

from ..runtime import functions as F


def _maybe_inplace(input, inplace, fn):
    return input._apply_inplace(fn) if inplace else fn(input)


def relu(input, inplace=False):
    """``max(x, 0)``."""
    return _maybe_inplace(input, inplace, F.relu)


def relu_(input):
    return relu(input, inplace=True)


def threshold(input, threshold, value, inplace=False):
    """``x`` where ``x > threshold``, else ``value``."""
    return _maybe_inplace(input, inplace, lambda x: F.where(x > threshold, x, value))


def threshold_(input, threshold_value, value):
    return threshold(input, threshold_value, value, inplace=True)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """``clamp(x, min_val, max_val)``."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    # torch's gradient is 0 at the bounds themselves (clamp's is 1 there): the clamped value enters detached
    return _maybe_inplace(input, inplace, lambda x: F.where((x > min_val) & (x < max_val), x,
                                                            F.clamp(x, min_val, max_val).detach()))


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace=False):
    """``min(max(x, 0), 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` where ``x > 0``, else ``negative_slope * x``."""
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x, x * negative_slope))


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, inplace=True)


def elu(input, alpha=1.0, inplace=False):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x, F.expm1(x) * alpha))


def elu_(input, alpha=1.0):
    return elu(input, alpha, inplace=True)


def silu(input, inplace=False):
    """``x * sigmoid(x)``."""
    return _maybe_inplace(input, inplace, lambda x: x * F.sigmoid(x))


__all__ = ["relu", "relu_", "threshold", "threshold_", "hardtanh", "hardtanh_", "relu6", "leaky_relu", "leaky_relu_",
           "elu", "elu_", "silu"]
