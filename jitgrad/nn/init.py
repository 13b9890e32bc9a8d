"""``jitgrad.nn.init``: in-place initialisers with torch's fan computation and gains.

Every random draw goes through :func:`_uniform` / :func:`_normal` (one place, so a ``generator=`` reaches the
random source unchanged)."""
from __future__ import annotations

import math
import warnings

from ..runtime import grad_mode
from ..runtime import factories


def _uniform(like, low, high, generator):
    """Values from U(low, high) of ``like``'s shape and dtype, drawn on its device (the fill is a copy there)."""
    kw = {} if generator is None else {"generator": generator}
    return low + (high - low) * factories.rand(*like.shape, dtype=like.dtype, device=like.device, **kw)


def _normal(like, mean, std, generator):
    """Values from N(mean, std**2) of ``like``'s shape and dtype, drawn on its device."""
    kw = {} if generator is None else {"generator": generator}
    return mean + std * factories.randn(*like.shape, dtype=like.dtype, device=like.device, **kw)


def _fill(tensor, values):
    with grad_mode.no_grad():
        tensor.copy_(values)
    return tensor


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (``'relu'``: sqrt(2), ``'tanh'``: 5/3, ``'leaky_relu'``:
    sqrt(2 / (1 + negative_slope**2)), ``'selu'``: 3/4, linear and sigmoid: 1)."""
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            negative_slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + negative_slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', 'fan_out']")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _empty(tensor):
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=3)
        return True
    return False


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with values drawn from U(a, b)."""
    return _fill(tensor, _uniform(tensor, a, b, generator))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with values drawn from N(mean, std**2)."""
    return _fill(tensor, _normal(tensor, mean, std, generator))


def constant_(tensor, val):
    """Fill with ``val``."""
    with grad_mode.no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    """Fill with ones."""
    return constant_(tensor, 1.0)


def zeros_(tensor):
    """Fill with zeros."""
    return constant_(tensor, 0.0)


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot normal: N(0, std**2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-bound, bound) with ``bound = gain * sqrt(3 / fan_mode)``."""
    if _empty(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std**2) with ``std = gain / sqrt(fan_mode)``."""
    if _empty(tensor):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_"]
