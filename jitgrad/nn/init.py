"""``jitgrad.nn.init``: in-place initialisers with torch's fan computation and gains.

Every random draw goes through :func:`_uniform` / :func:`_normal` (one place, so a ``generator=`` reaches the
random source unchanged)."""
from __future__ import annotations

import math
import warnings

from ..runtime import grad_mode
from ..library.creation import factories


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



def _norm_cdf(x):
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fill with values from N(mean, std**2) truncated to [a, b], by rejection as torch 2.13 does: redraws from
    the normal while more than 30% of its mass lies in [a, b], else uniform proposals on [a, b] accepted with
    probability pdf / pdf(mode).  Every value lies in [a, b]; warns (as torch) when ``mean`` is more than two
    ``std`` outside the interval."""
    if (mean < a - 2 * std) or (mean > b + 2 * std):
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)
    from ..library.elementary import where
    with grad_mode.no_grad():
        p = _norm_cdf((b - mean) / std) - _norm_cdf((a - mean) / std)
        if p > 0.3:
            lo = factories.tensor(a, dtype=tensor.dtype).item()
            hi = factories.tensor(b, dtype=tensor.dtype).item()
            result = _normal(tensor, mean, std, generator)
            while True:
                mask = (result < lo) | (result > hi)
                if not bool(mask.any()):
                    break
                result = where(mask, _normal(tensor, mean, std, generator), result)
        else:
            mode = max(a, min(mean, b))
            log_peak = -0.5 * ((mode - mean) / std) ** 2

            def log_ratio(c):
                return ((c - mean) / std) ** 2 * -0.5 - log_peak

            result = _uniform(tensor, a, b, generator)
            pending = _uniform(tensor, 0.0, 1.0, generator).log() > log_ratio(result)
            while bool(pending.any()):
                cand = _uniform(tensor, a, b, generator)
                result = where(pending, cand, result)
                pending = where(pending, _uniform(tensor, 0.0, 1.0, generator).log() > log_ratio(cand), pending)
        return _fill(tensor, result)


def orthogonal_(tensor, gain=1, generator=None):
    """Fill with a (semi-)orthogonal matrix, the Q of a QR of a normal draw with its signs fixed by R's
    diagonal (Mezzadri's rule), times ``gain``; a tensor of more than two dims is treated as (size(0), rest)."""
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    from ..library.linalg.solve import qr
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    kw = {} if generator is None else {"generator": generator}
    with grad_mode.no_grad():
        flat = factories.randn(rows, cols, dtype=tensor.dtype, device=tensor.device, **kw)
        if rows < cols:
            flat = flat.t()
        q, r = qr(flat)
        q = q * r.diagonal().sign()
        if rows < cols:
            q = q.t()
        tensor.copy_(q.reshape(tensor.shape))
        tensor.mul_(gain)
    return tensor


def dirac_(tensor, groups=1):
    """Fill a 3-, 4- or 5-dim (convolution weight) tensor with the Dirac delta: each of the ``groups`` keeps its
    first min(out/groups, in) input channels unchanged (a one at the kernel's centre), zeros elsewhere."""
    dims = tensor.dim()
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    per = sizes[0] // groups
    import numpy as np
    a = np.zeros(sizes)
    centre = tuple(s // 2 for s in sizes[2:])
    for g in range(groups):
        for d in range(min(per, sizes[1])):
            a[(g * per + d, d) + centre] = 1
    return _fill(tensor, factories.tensor(a, dtype=tensor.dtype, device=tensor.device))


def eye_(tensor):
    """Fill a 2-dim tensor with the identity (ones on the main diagonal)."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, factories.eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device))


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """Fill a 2-dim tensor from N(0, std**2), then zero ``ceil(sparsity * rows)`` random rows of every column
    (the rows drawn by ``randperm`` from the default generator, as torch does)."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    num_zeros = int(math.ceil(sparsity * rows))
    with grad_mode.no_grad():
        tensor.copy_(_normal(tensor, 0.0, std, generator))
        for col in range(cols):
            zero_rows = factories.randperm(rows)[:num_zeros]
            tensor[zero_rows, col] = 0
    return tensor


def _make_deprecate(meth):
    new_name = meth.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warnings.warn(f"`nn.init.{old_name}` is now deprecated in favor of `nn.init.{new_name}`.", FutureWarning,
                      stacklevel=2)
        return meth(*args, **kwargs)

    deprecated_init.__doc__ = f"""{old_name}(...): deprecated alias of :func:`{new_name}` (warns FutureWarning)."""
    deprecated_init.__name__ = old_name
    return deprecated_init


uniform = _make_deprecate(uniform_)
normal = _make_deprecate(normal_)
constant = _make_deprecate(constant_)
eye = _make_deprecate(eye_)
dirac = _make_deprecate(dirac_)
xavier_uniform = _make_deprecate(xavier_uniform_)
xavier_normal = _make_deprecate(xavier_normal_)
kaiming_uniform = _make_deprecate(kaiming_uniform_)
kaiming_normal = _make_deprecate(kaiming_normal_)
orthogonal = _make_deprecate(orthogonal_)
sparse = _make_deprecate(sparse_)


__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
           "trunc_normal_", "orthogonal_", "dirac_", "eye_", "sparse_", "uniform", "normal", "constant", "eye",
           "dirac", "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal", "sparse"]
