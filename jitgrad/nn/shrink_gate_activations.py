"""Activations without torch's ``inplace=``: the shrinkages (``F.hardshrink``, ``F.softshrink``, ``F.tanhshrink``),
``F.softsign``, the gated ``F.glu``, ``F.softmin`` and the learnable-slope ``F.prelu``.  Compositions of primitives
(where, tanh, abs, sigmoid, softmax), with torch's gradients at the kinks (0 on ``[-lambd, lambd]``).

>>> import jitgrad as jg
>>> import jitgrad.nn.functional as F
>>> F.softshrink(jg.tensor([-1.0, 0.2, 2.0]))
tensor([-0.5000,  0.0000,  1.5000])
"""
from __future__ import annotations

from ..library import elementary as F
from ..library.dim_args import torch_dim
from ..library.torch_kwargs import torch_kwargs


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


__all__ = ["hardshrink", "softshrink", "tanhshrink", "softsign", "glu", "softmin", "prelu"]
