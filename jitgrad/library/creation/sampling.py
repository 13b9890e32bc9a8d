"""The random functions: rand, randn, randint, randperm, normal, bernoulli, multinomial (and their in-place and
``*_like`` forms) and the in-place samplers exponential_, geometric_, log_normal_, cauchy_ (transforms of a uniform
or normal draw), each honouring ``generator=``.

Every draw is one primitive bound on the generator's state tensors (``Generator._draw``), so the same code runs
eagerly (NumPy Philox) and inside ``@jitgrad.compile`` (Philox in the generated loops); everything else is a
composition of ordinary ops: randint scales a float64 uniform, bernoulli compares a uniform with the
probabilities, normal scales a standard normal.  Draws carry no gradient, as in torch.
"""
from __future__ import annotations

import numpy as np

from ...declarations import published
from ...ir import dtypes as dt
from ...ir.ops import OPS as O
from ...runtime.dispatch import bind
from ...runtime.generator import generator_of
from ...runtime.grad_mode import no_grad
from ...runtime.devices import check_device, on_device
from ...runtime.tensor import Tensor
from ...tracer import STATE as _TR
from ..torch_kwargs import torch_kwargs


def _size(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(int(s) for s in size)


def _float_dtype(dtype, kernel):
    """The dtype of a float draw; torch's error for an integer one (``kernel`` names torch's kernel)."""
    d = dt.as_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT
    if not d.is_floating_point:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{dt.torch_scalar_name(d)}\'')
    return d


def _finish(t: Tensor, requires_grad, device=None) -> Tensor:
    # a draw not made on ``device`` (randint's composition) is placed there; a traced draw is a value of the
    # compiled function's graph, which runs where its arguments are
    if device is not None and _TR.active is None and t.device != check_device(device):
        t = on_device(t, device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _state_on(t: Tensor, device) -> Tensor:
    """Generator state tensor ``t`` (seed or offset, on the CPU) as an operand of a draw on ``device``: an eager
    draw for a CUDA device runs there (Philox in the kernel, the same bits as on the CPU) on uploaded copies of
    the two scalars; a traced draw stays in the graph, which runs on the compiled function's device."""
    if device is None or _TR.active is not None or type(t._data) is not np.ndarray:
        return t
    d = check_device(device)
    return t if d.type == "cpu" else t.to(d)


def _uniform(shape, dtype, generator, device=None) -> Tensor:
    return generator_of(generator)._draw(lambda seed, offset: bind(
        O["rand_uniform"], _state_on(seed, device), _state_on(offset, device), shape=tuple(shape), dtype=dtype))


def _normal(shape, dtype, generator, device=None) -> Tensor:
    return generator_of(generator)._draw(lambda seed, offset: bind(
        O["rand_normal"], _state_on(seed, device), _state_on(offset, device), shape=tuple(shape), dtype=dtype))


def _concrete(t: Tensor) -> bool:
    return type(t._data) is np.ndarray


@published("jitgrad")
def rand(*size, generator=None, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    """Uniform numbers in [0, 1) (never 1.0), float32 by default."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(rand, 'rand', (*size,), {"generator": generator, "dtype": dtype, "device": device, "requires_grad": requires_grad}, torch_kw)
    check_device(device)
    return _finish(_uniform(_size(size), _float_dtype(dtype, "check_uniform_bounds"), generator, device), requires_grad,
                   device)


@published("jitgrad")
def randn(*size, generator=None, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    """Standard normal numbers (Box-Muller), float32 by default."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(randn, 'randn', (*size,), {"generator": generator, "dtype": dtype, "device": device, "requires_grad": requires_grad}, torch_kw)
    check_device(device)
    return _finish(_normal(_size(size), _float_dtype(dtype, "normal_kernel_cpu"), generator, device), requires_grad,
                   device)


@published("jitgrad")
def rand_like(input, dtype=None, device=None, requires_grad=False, generator=None, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(rand_like, 'rand_like', (input, dtype, device, requires_grad, generator), {}, torch_kw)
    return rand(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad, generator=generator,
                device=device if device is not None else input.device)


@published("jitgrad")
def randn_like(input, dtype=None, device=None, requires_grad=False, generator=None, **torch_kw) -> Tensor:
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(randn_like, 'randn_like', (input, dtype, device, requires_grad, generator), {}, torch_kw)
    return randn(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad, generator=generator,
                 device=device if device is not None else input.device)


def _scaled_ints(shape, low, high, dtype, generator) -> Tensor:
    """Integers uniform in [low, high): floor(u * (high - low)) + low with a 53-bit uniform u (bias below
    (high - low) / 2**53)."""
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    with no_grad():
        u = _uniform(shape, dt.float64, generator)
        return ((u * float(high - low)).to(dt.int64) + int(low)).to(dtype)


@published("jitgrad")
def randint(low=0, high=None, size=None, *, generator=None, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    """Integers uniform in [low, high); ``randint(high, size)`` or ``randint(low, high, size)``, int64 by
    default."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(randint, 'randint', (low, high, size), {"generator": generator, "dtype": dtype, "device": device, "requires_grad": requires_grad}, torch_kw)
    check_device(device)
    if size is None and isinstance(high, (tuple, list)):   # randint(high, size), as torch
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint() missing required argument 'size'")
    d = dt.as_dtype(dtype) if dtype is not None else dt.int64
    return _finish(_scaled_ints(_size((size,)), int(low), int(high), d, generator), requires_grad, device)


@published("jitgrad")
def randint_like(input, low=0, high=None, *, dtype=None, generator=None) -> Tensor:
    if high is None:
        low, high = 0, low
    return _scaled_ints(input.shape, int(low), int(high), dtype or input.dtype, generator)


@published("jitgrad")
def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False, **torch_kw) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64 by default)."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(randperm, 'randperm', (n,), {"generator": generator, "dtype": dtype, "device": device, "requires_grad": requires_grad}, torch_kw)
    check_device(device)
    d = dt.as_dtype(dtype) if dtype is not None else dt.int64
    return _finish(generator_of(generator)._draw(
        lambda seed, offset: bind(O["randperm"], _state_on(seed, device), _state_on(offset, device), n=int(n),
                                  dtype=d)), requires_grad, device)


@published("jitgrad")
def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Normal numbers with the given ``mean`` and ``std`` (tensors broadcast together, or floats with
    ``size``).  As in torch, the result carries no gradient to ``mean``/``std``."""
    check_device(device)
    tm, ts = isinstance(mean, Tensor), isinstance(std, Tensor)
    if not ts and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    if ts and _concrete(std) and std.numel() and (std._data < 0).any():
        raise RuntimeError("normal expects all elements of std >= 0.0")
    with no_grad():
        if not tm and not ts:
            if size is None:
                raise TypeError("normal() received an invalid combination of arguments: floats mean and std "
                                "need a size")
            z = _normal(_size((size,)), _float_dtype(dtype, "normal_kernel_cpu"), generator, device)
            return _finish(z * float(std) + float(mean), requires_grad, device)
        parts = [x.detach() if isinstance(x, Tensor) else x for x in (mean, std)]
        ref = parts[0] if tm else parts[1]
        shape = np.broadcast_shapes(*[p.shape for p in parts if isinstance(p, Tensor)])
        d = ref.dtype if ref.is_floating_point() else dt.DEFAULT_FLOAT
        if tm and ts:
            d = dt.result_type([(1, mean.dtype), (1, std.dtype)]) if mean.is_floating_point() else d
        z = _normal(shape, d, generator, ref.device)     # drawn on mean's (or std's) device
        return _finish(z * parts[1] + parts[0], requires_grad)


@published("jitgrad")
def bernoulli(input, p=None, *, generator=None) -> Tensor:
    """Draws 0/1 with probability ``input`` (or the float ``p``) per element, in ``input``'s dtype."""
    probs = input if p is None else p
    if isinstance(probs, Tensor):
        if _concrete(probs) and probs.numel() and not ((probs._data >= 0) & (probs._data <= 1)).all():
            raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.")
    elif not 0 <= probs <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={probs}")
    d = input.dtype
    ud = dt.float64 if d is dt.float64 or (isinstance(probs, Tensor) and probs.dtype is dt.float64) else dt.float32
    with no_grad():
        u = _uniform(input.shape, ud, generator, input.device)
        pr = probs.detach() if isinstance(probs, Tensor) else probs
        return (u < pr).to(d)


@published("jitgrad")
def multinomial(input, num_samples, replacement=False, *, generator=None) -> Tensor:
    """Indices drawn from the categories of each row of ``input`` (non-negative weights, 1-D or 2-D): with
    replacement by inverse CDF, without by torch's exponential race."""
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial(): argument 'input' must be Tensor, not {type(input).__name__}")
    with no_grad():
        x = input.detach()
        return generator_of(generator)._draw(lambda seed, offset: bind(
            O["multinomial"], x, seed, offset, num_samples=int(num_samples), replacement=bool(replacement)))


# ---- in-place forms (Tensor methods) ---------------------------------------------------------------------------
@published("Tensor")
def uniform_(self, from_=0.0, to=1.0, *, generator=None, **kw):
    """Fill with numbers uniform in [from, to)."""
    from_ = kw.pop("from", from_)
    if from_ > to:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
    d = self.dtype if self.is_floating_point() else dt.DEFAULT_FLOAT
    with no_grad():
        src = _uniform(self.shape, d, generator, self.device) * float(to - from_) + float(from_)
    return self.copy_(src)


@published("Tensor")
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    """Fill with normal numbers of the given mean and std."""
    if std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    d = self.dtype if self.is_floating_point() else dt.DEFAULT_FLOAT
    with no_grad():
        src = _normal(self.shape, d, generator, self.device) * float(std) + float(mean)
    return self.copy_(src)


@published("Tensor")
def bernoulli_(self, p=0.5, *, generator=None):
    """Fill with 0/1 drawn with probability ``p`` (a float or a tensor broadcast to self)."""
    with no_grad():
        src = bernoulli(self.detach(), p if isinstance(p, Tensor) else float(p), generator=generator)
    return self.copy_(src)


@published("Tensor")
def random_(self, from_=None, to=None, *, generator=None, **kw):
    """Fill with integers uniform in [from, to); ``random_(to)`` is [0, to); with neither, [0, 2**24] for
    float32 and [0, 2**53] for float64 (the integers the dtype holds exactly, as torch) and [0, 2**63) or
    [0, 2**31) for int64 / int32."""
    from_ = kw.pop("from", from_)
    if from_ is not None and to is None:
        from_, to = 0, from_
    if to is None:
        d = self.dtype
        to = {dt.float32: (1 << 24) + 1, dt.float64: (1 << 53) + 1, dt.int64: 1 << 63}.get(d, 1 << 31)
    with no_grad():
        src = _scaled_ints(self.shape, int(from_ or 0), int(to), self.dtype, generator)
    return self.copy_(src)


def _fmt(v):
    return "%g" % v         # torch prints -1 for -1.0, and 0.5, nan, inf


def _uniform_like(self, generator, kernel_msg):
    """A uniform draw in [0, 1) shaped like ``self`` (float64 for float64 self), or torch's dtype error."""
    if not self.is_floating_point():
        raise RuntimeError(kernel_msg)
    return _uniform(self.shape, dt.float64 if self.dtype is dt.float64 else dt.float32, generator, self.device)


@published("Tensor")
def exponential_(self, lambd=1.0, *, generator=None):
    """Fill with exponential numbers of rate ``lambd``: ``-log1p(-u) / lambd`` for a uniform ``u``."""
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_fmt(lambd)}")
    with no_grad():
        u = _uniform_like(self, generator, "Exponential distribution is a continuous probability distribution. "
                          f"dtype must be a floating point but you specified {dt.torch_scalar_name(self.dtype)}")
        src = (-u).log1p() * (-1.0 / float(lambd))
    return self.copy_(src)


@published("Tensor")
def geometric_(self, p, *, generator=None):
    """Fill with geometric numbers (trials up to the first success, so >= 1) of success probability ``p``:
    ``floor(log1p(-u) / log1p(-p)) + 1`` (ceil but where the ratio is a whole number); integer tensors too."""
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_fmt(p)}")
    with no_grad():
        u = _uniform(self.shape, dt.float64, generator, self.device)
        k = ((-u).log1p() / float(np.log1p(-p))).to(dt.int64) + 1
    return self.copy_(k.to(self.dtype))


@published("Tensor")
def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill with ``exp(N(mean, std))`` numbers."""
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_fmt(std)}")
    if not self.is_floating_point():
        raise NotImplementedError(f'"log_normal_cpu" not implemented for \'{dt.torch_scalar_name(self.dtype)}\'')
    with no_grad():
        src = (_normal(self.shape, self.dtype, generator, self.device) * float(std) + float(mean)).exp()
    return self.copy_(src)


@published("Tensor")
def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill with Cauchy numbers: ``median + sigma * tan(pi * (u - 1/2))``."""
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_fmt(sigma)}")
    with no_grad():
        u = _uniform_like(self, generator, "Cauchy distribution is a continuous probability distribution. dtype "
                          f"must be a floating point but you specified {dt.torch_cpp_name(self.dtype)}")
        src = ((u - 0.5) * float(np.pi)).tan() * float(sigma) + float(median)
    return self.copy_(src)


@published("Tensor", name="bernoulli")
def _tensor_bernoulli(self, p=None, *, generator=None):
    return bernoulli(self, p, generator=generator)


@published("Tensor", name="multinomial")
def _tensor_multinomial(self, num_samples, replacement=False, *, generator=None):
    return multinomial(self, num_samples, replacement, generator=generator)


__all__ = ["rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "normal",
           "bernoulli", "multinomial"]
