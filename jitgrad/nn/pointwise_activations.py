"""Pointwise activations of ``jitgrad.nn.functional`` with torch's ``inplace=`` argument: relu, relu6, leaky_relu,
threshold, hardtanh, elu, celu, selu, silu, mish, hardsigmoid, hardswish, rrelu (and the ``relu_``-style in-place
names).  Each is a composition of primitives;
``inplace=True`` writes the result into the input through ``InPlaceOps._apply_inplace`` (version bump, leaf
checks, view rebasing), as torch's in-place kernels do."""
from __future__ import annotations

from ..library import elementary as F
from ..library.torch_kwargs import torch_kwargs


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


def celu(input, alpha=1.0, inplace=False, **torch_kw):
    """``x`` where ``x > 0``, else ``alpha * (exp(x / alpha) - 1)``."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(celu, 'celu', (input, alpha, inplace), {}, torch_kw)
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")      # torch's type and text
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x, F.expm1(x * (1.0 / alpha)) * alpha))


def celu_(input, alpha=1.0, **torch_kw):
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(celu_, 'celu_', (input, alpha), {}, torch_kw)
    return celu(input, alpha, inplace=True)


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False, **torch_kw):
    """``scale * elu(x, alpha)`` with the self-normalising constants (alpha ~ 1.6733, scale ~ 1.0507)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(selu, 'selu', (input, inplace), {}, torch_kw)
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x * SELU_SCALE,
                                                            F.expm1(x) * (SELU_ALPHA * SELU_SCALE)))


def selu_(input, **torch_kw):
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(selu_, 'selu_', (input,), {}, torch_kw)
    return selu(input, inplace=True)


def hardsigmoid(input, inplace=False, **torch_kw):
    """``relu6(x + 3) / 6``; torch's gradient (1/6 strictly inside (-3, 3), 0 elsewhere, bounds included)."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(hardsigmoid, 'hardsigmoid', (input, inplace), {}, torch_kw)

    def f(x):
        inside = (x > -3.0) & (x < 3.0)
        return F.where(inside, x * (1.0 / 6.0) + 0.5, F.where(x <= -3.0, 0.0, 1.0).to(x.dtype))
    return _maybe_inplace(input, inplace, f)


def hardswish(input, inplace=False, **torch_kw):
    """``x * relu6(x + 3) / 6``; torch's gradient: 0 up to -3, ``x / 3 + 1/2`` on (-3, 3), 1 from 3 on."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(hardswish, 'hardswish', (input, inplace), {}, torch_kw)

    def f(x):
        mid = x * (x + 3.0) * (1.0 / 6.0)
        return F.where(x <= -3.0, x * 0.0, F.where(x < 3.0, mid, x))
    return _maybe_inplace(input, inplace, f)


def mish(input, inplace=False, **torch_kw):
    """``x * tanh(softplus(x))``."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(mish, 'mish', (input, inplace), {}, torch_kw)
    from .smooth_activations import softplus
    return _maybe_inplace(input, inplace, lambda x: x * F.tanh(softplus(x)))


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False, **torch_kw):
    """Randomised leaky ReLU: in training, each non-positive element gets a slope drawn from U(lower, upper)
    (the same slope scales its gradient); in eval, the mean slope ``(lower + upper) / 2``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(rrelu, 'rrelu', (input, lower, upper, training, inplace), {}, torch_kw)
    if lower > upper:
        raise RuntimeError("Lower bound should be less than or equal to the upper bound")
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    from ..runtime.grad_mode import no_grad
    from ..library.creation.sampling import rand
    with no_grad():
        slope = rand(tuple(input.shape), dtype=input.dtype, device=input.device) * (upper - lower) + lower
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x, x * slope))


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, **torch_kw):
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(rrelu_, 'rrelu_', (input, lower, upper, training), {}, torch_kw)
    return rrelu(input, lower, upper, training, inplace=True)


__all__ = ["relu", "relu_", "threshold", "threshold_", "hardtanh", "hardtanh_", "relu6", "leaky_relu", "leaky_relu_",
           "elu", "elu_", "silu", "celu", "celu_", "selu", "selu_", "hardsigmoid", "hardswish", "mish", "rrelu",
           "rrelu_"]
