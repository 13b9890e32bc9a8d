"""Activation functions of ``jitgrad.nn.functional``, compositions of primitives:

- ``sigmoid``, ``tanh``, ``softmax``, ``log_softmax`` and ``gelu`` (one fused op in eager mode);
- the pointwise activations with torch's ``inplace=`` argument: relu, relu6, leaky_relu, threshold, hardtanh,
  elu, celu, selu, silu, mish, hardsigmoid, hardswish, rrelu (and the ``relu_``-style in-place names);
  ``inplace=True`` writes the result into the input through ``InPlaceOps._apply_inplace`` (version bump, leaf
  checks, view rebasing), as torch's in-place kernels do;
- the smooth activations in log space, ``softplus`` (with torch's ``beta`` and linear ``threshold``) and
  ``logsigmoid`` (exp, log1p, where): the branch a ``where`` does not select gets a harmless input, so no
  overflow leaks a NaN into the gradient;
- the activations without ``inplace=``: the shrinkages (``hardshrink``, ``softshrink``, ``tanhshrink``),
  ``softsign``, the gated ``glu``, ``softmin`` and the learnable-slope ``prelu``, with torch's gradients at the
  kinks (0 on ``[-lambd, lambd]``).

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.softplus(jg.tensor([0.0, 30.0]))
tensor([ 0.6931, 30.0000])
>>> F.softshrink(jg.tensor([-1.0, 0.2, 2.0]))
tensor([-0.5000,  0.0000,  1.5000])
"""
from __future__ import annotations

from ...declarations import published
from ...ir.ops import OPS as O
from ...library import elementary as F
from ...library.dim_args import torch_dim
from ...runtime.dispatch import bind
from ...runtime.grad_names import named
from ...library.torch_kwargs import torch_kwargs


sigmoid = F.sigmoid


tanh = F.tanh


def softmax(input, dim=None, dtype=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softmax, 'softmax', (input, dim, dtype), {}, torch_kw)
    return F.softmax(input, -1 if dim is None else dim, dtype)


def log_softmax(input, dim=None, dtype=None, **torch_kw):
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(log_softmax, 'log_softmax', (input, dim, dtype), {}, torch_kw)
    return F.log_softmax(input, -1 if dim is None else dim, dtype)


def gelu(input, approximate="none", **torch_kw):
    """GELU: ``x * Phi(x)``; ``approximate='tanh'`` uses the tanh formula.  One fused op in eager mode; traced
    or on a device, its decomposition (``ir/ops/normalization.py``)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(gelu, 'gelu', (input, approximate), {}, torch_kw)
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")     # torch's type and text
    return bind(O["gelu"], input, approximate=approximate)


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
    """``value`` where ``x <= threshold``, else ``x`` (a NaN passes, with its gradient, as in torch)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(threshold, 'threshold', (input, threshold, value, inplace), {}, torch_kw)
    return _maybe_inplace(input, inplace, lambda x: bind(O["threshold"], x, threshold, value))


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


@published("jitgrad")      # torch.celu_, the same function
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


@published("jitgrad")      # torch.selu_, the same function
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
    from ...runtime.grad_mode import no_grad
    from ...library.creation.sampling import rand
    with no_grad():
        slope = rand(tuple(input.shape), dtype=input.dtype, device=input.device) * (upper - lower) + lower
    return _maybe_inplace(input, inplace, lambda x: F.where(x > 0, x, x * slope))


@published("jitgrad")      # torch.rrelu_, the same function
def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False, **torch_kw):
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(rrelu_, 'rrelu_', (input, lower, upper, training), {}, torch_kw)
    return rrelu(input, lower, upper, training, inplace=True)


def softplus(input, beta=1.0, threshold=20.0, **torch_kw):
    """``log(1 + exp(beta * x)) / beta``; ``x`` itself where ``beta * x > threshold`` (torch's linear regime).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.softplus(jg.tensor([1.0]), beta=2.0)
    tensor([1.0635])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softplus, "softplus", (input, beta, threshold), {}, torch_kw)
    z = input * beta if beta != 1 else input
    linear = z > threshold
    safe = F.where(linear, 0.0, z)      # exp of the unselected branch must not overflow: its grad would be NaN
    soft = F.log1p(F.exp(safe))
    return named(F.where(linear, input, soft / beta if beta != 1 else soft), "SoftplusBackward0")


def logsigmoid(input, **torch_kw):
    """``log(sigmoid(x))``, computed as ``min(x, 0) - log1p(exp(-|x|))`` (no overflow on either tail).

    >>> import jitgrad as jg
    >>> import jitgrad.nn.functional as F
    >>> F.logsigmoid(jg.tensor([0.0, -100.0]))
    tensor([  -0.6931, -100.0000])
    """
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(logsigmoid, "logsigmoid", (input,), {}, torch_kw)
    neg = input < 0
    # |x| through where, not abs: at x = 0 this branch's slope (-1 for -|x|) gives torch's derivative 1/2 there
    mag = F.where(neg, -input, input)
    return named(F.where(neg, input, 0.0) - F.log1p(F.exp(-mag)), "LogSigmoidBackward0")


@published("jitgrad", "Tensor")      # torch.hardshrink and x.hardshrink(lambd), as torch
def hardshrink(input, lambd=0.5, **torch_kw):
    """``x`` where ``|x| > lambd``, else 0."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(hardshrink, 'hardshrink', (input, lambd), {}, torch_kw)
    return F.where((input > lambd) | (input < -lambd), input, 0.0)


def softshrink(input, lambd=0.5, **torch_kw):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softshrink, 'softshrink', (input, lambd), {}, torch_kw)
    if lambd < 0:
        kind = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16"}.get(
            input.dtype.name, input.dtype.name)
        hi = "3.40282e+38" if kind == "Float" else ("1.79769e+308" if kind == "Double" else "65504")
        raise RuntimeError(f"lambda must be in range [0, {hi}] for input dtype {kind}, but found {lambd:g}")
    return F.where(input > lambd, input - lambd, F.where(input < -lambd, input + lambd, 0.0))


def tanhshrink(input, **torch_kw):
    """``x - tanh(x)``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(tanhshrink, 'tanhshrink', (input,), {}, torch_kw)
    return input - F.tanh(input)


def softsign(input, **torch_kw):
    """``x / (1 + |x|)``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softsign, 'softsign', (input,), {}, torch_kw)
    return input / (F.abs(input) + 1)


def glu(input, dim=-1, **torch_kw):
    """Gated linear unit: ``a * sigmoid(b)`` where ``a`` and ``b`` are the two halves of ``input`` along ``dim``."""
    if torch_kw:       # out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(glu, 'glu', (input, dim), {}, torch_kw)
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = torch_dim(input, dim)
    n = input.shape[d]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    a, b = input.narrow(d, 0, n // 2), input.narrow(d, n // 2, n // 2)
    return a * F.sigmoid(b)


def legacy_softmax_dim(name, ndim, stacklevel=3):
    """torch's implicit ``dim`` of softmax/softmin/log_softmax when ``dim=None``: 0 for 0-, 1- and 3-D input, else 1
    (with torch's deprecation warning)."""
    import warnings
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as "
                  "an argument.", stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmin(input, dim=None, _stacklevel=3, dtype=None, **torch_kw):
    """``softmax(-x)`` along ``dim``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(softmin, 'softmin', (input, dim, _stacklevel, dtype), {}, torch_kw)
    if dim is None:
        dim = legacy_softmax_dim("softmin", input.ndim, _stacklevel)
    if dtype is not None:
        input = input.to(dtype)
    return F.softmax(-input, dim)


@published("jitgrad", "Tensor")      # torch.prelu and x.prelu(weight), as torch
def prelu(input, weight, **torch_kw):
    """``x`` where ``x > 0``, else ``weight * x``; ``weight`` holds one slope or one per channel (dim 1)."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(prelu, 'prelu', (input, weight), {}, torch_kw)
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.ndim}")
    if input.dtype is not weight.dtype:
        names = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16"}
        raise RuntimeError(f"prelu: Type promoting not supported. Got {names.get(input.dtype.name, input.dtype.name)}"
                           f" and {names.get(weight.dtype.name, weight.dtype.name)}")
    channels = input.shape[1] if input.ndim >= 2 else 1
    n = weight.numel()
    if n != 1 and n != channels:
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = {n} "
                           f"and channel size = {channels}.")
    w = weight.reshape((n,) + (1,) * (input.ndim - 2)) if n > 1 else weight.reshape(())
    return F.where(input > 0, input, input * w)


__all__ = ["sigmoid", "tanh", "softmax", "log_softmax", "gelu", "relu", "relu_", "threshold", "threshold_",
           "hardtanh", "hardtanh_", "relu6", "leaky_relu", "leaky_relu_", "elu", "elu_", "silu", "celu", "celu_",
           "selu", "selu_", "hardsigmoid", "hardswish", "mish", "rrelu", "rrelu_", "softplus", "logsigmoid",
           "hardshrink", "softshrink", "tanhshrink", "softsign", "glu", "softmin", "prelu"]
