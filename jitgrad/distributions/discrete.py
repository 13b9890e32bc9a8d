"""Discrete distributions: Bernoulli, Categorical, OneHotCategorical, Binomial, Multinomial, Poisson and
Geometric, each parameterised by ``probs`` or ``logits`` (exactly one) where torch's is.

Draws are compositions of jitgrad's random primitives: Bernoulli compares uniforms with ``probs``, Categorical
draws through ``jitgrad.multinomial``, Binomial sums Bernoulli trials (``total_count`` must be known when
drawing), Poisson inverts the CDF below rate 10 and runs Hoermann's PTRS rejection (a fixed number of rounds)
above it."""
from __future__ import annotations

import math
from numbers import Number

import numpy as np

import jitgrad as _jg
from ..ir import dtypes as dt
from . import constraints
from .continuous import expand_params
from .distribution import Distribution
from .parameters import (as_size, broadcast_all, is_concrete, lazy_property, logits_to_probs, open_uniform,
                         probs_to_logits, standard_uniform, tiny_of)

__all__ = ["Bernoulli", "Categorical", "OneHotCategorical", "Binomial", "Multinomial", "Poisson", "Geometric"]

_BCE = _jg.nn.functional.binary_cross_entropy_with_logits


def _one_of(probs, logits):
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


def _expand_probs_logits(self, cls, batch_shape, _instance, extra=()):
    new = expand_params(self, cls, batch_shape, ("probs", "logits") + tuple(extra), _instance)
    new._param = new.probs if "probs" in self.__dict__ else new.logits
    return new


class Bernoulli(Distribution):
    """The Bernoulli distribution: 1 with probability ``probs`` (or ``sigmoid(logits)``), else 0."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return _expand_probs_logits(self, Bernoulli, batch_shape, _instance)

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return _jg.where(self.probs == 0.5, math.nan, mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with _jg.no_grad():
            p = self.probs.detach().expand(shape)
            return (standard_uniform(shape, p) < p).to(p.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -_BCE(logits, value, reduction="none")

    def entropy(self):
        return _BCE(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand=True):
        values = _jg.arange(2, dtype=self._param.dtype)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values


class Categorical(Distribution):
    """A categorical distribution over ``0 .. K-1`` (K = ``probs.size(-1)``), from (unnormalised) ``probs``
    or ``logits``."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch_shape = self._param.size()[:-1] if self._param.dim() > 1 else ()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = _expand_probs_logits(self, Categorical, batch_shape, _instance)
        new._num_events = self._num_events
        new._event_shape = as_size(())
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        return self._param.size()

    @property
    def mean(self):
        return _jg.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(dim=-1)

    @property
    def variance(self):
        return _jg.full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    def sample(self, sample_shape=()):
        sample_shape = as_size(sample_shape)
        n = int(np.prod(sample_shape, dtype=np.int64))
        with _jg.no_grad():
            probs_2d = self.probs.detach().reshape(-1, self._num_events)
            samples_2d = _jg.multinomial(probs_2d, n, True).T
            return samples_2d.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = _jg.broadcast_tensors(value, self.logits)
        value = value[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = float(np.finfo(dt.as_dtype(self.logits.dtype).np).min)
        logits = _jg.clamp(self.logits, min=min_real)
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand=True):
        values = _jg.arange(self._num_events, dtype=_jg.int64)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values


class OneHotCategorical(Distribution):
    """A categorical distribution whose samples are one-hot vectors of size K."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._categorical = Categorical(probs, logits)
        batch_shape = self._categorical.batch_shape
        event_shape = self._categorical.param_shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(OneHotCategorical, _instance)
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self):
        return self._categorical._param

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        probs = self._categorical.probs
        return _jg.nn.functional.one_hot(probs.argmax(dim=-1), probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        return self._categorical.probs * (1 - self._categorical.probs)

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=()):
        probs = self._categorical.probs
        num_events = self._categorical._num_events
        indices = self._categorical.sample(sample_shape)
        return _jg.nn.functional.one_hot(indices, num_events).to(probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        indices = value.max(-1)[1]
        return self._categorical.log_prob(indices)

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand=True):
        n = self.event_shape[0]
        values = _jg.eye(n, dtype=self._param.dtype)
        values = values.view((n,) + (1,) * len(self.batch_shape) + (n,))
        if expand:
            values = values.expand((n,) + tuple(self.batch_shape) + (n,))
        return values


def _clamp_by_zero(x):
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


def _max_count(self, what):
    """The largest total_count and whether all are equal, read from the number or concrete tensor the
    distribution was made with (a number stays known inside @jitgrad.compile)."""
    hint = self._count_hint
    if isinstance(hint, Number):
        return int(hint), True
    t = hint if hint is not None and is_concrete(hint) else self.total_count
    if not is_concrete(t):
        raise NotImplementedError(f"Binomial.{what} needs a known total_count (inside @jitgrad.compile, pass it as "
                                  "a number or a tensor made outside the compiled function)")
    n = int(t.max()) if t.numel() else 0
    return n, bool((t == n).all())


class Binomial(Distribution):
    """The number of successes in ``total_count`` Bernoulli trials of probability ``probs`` (or
    ``sigmoid(logits)``)."""
    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        self._count_hint = total_count
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
            self.total_count = self.total_count.type_as(self.probs)
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
            self.total_count = self.total_count.type_as(self.logits)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = _expand_probs_logits(self, Binomial, batch_shape, _instance, ("total_count",))
        new._count_hint = self._count_hint
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.size()

    def sample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        n, _ = _max_count(self, "sample")
        with _jg.no_grad():
            p = self.probs.detach().expand(shape).unsqueeze(-1)
            trials = _jg.arange(n, dtype=p.dtype) < self.total_count.detach().expand(shape).unsqueeze(-1)
            u = standard_uniform(shape + (n,), p)
            return ((u < p) & trials).to(p.dtype).sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        log_factorial_n = _jg.lgamma(self.total_count + 1)
        log_factorial_k = _jg.lgamma(value + 1)
        log_factorial_nmk = _jg.lgamma(self.total_count - value + 1)
        normalize_term = (self.total_count * _clamp_by_zero(self.logits)
                          + self.total_count * _jg.log1p(_jg.exp(-_jg.abs(self.logits))) - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def entropy(self):
        total_count, homogeneous = _max_count(self, "entropy")
        if not homogeneous:
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(_jg.exp(log_prob) * log_prob).sum(0)

    def enumerate_support(self, expand=True):
        total_count, homogeneous = _max_count(self, "enumerate_support")
        if not homogeneous:
            raise NotImplementedError("Inhomogeneous total count not supported by `enumerate_support`.")
        values = _jg.arange(1 + total_count, dtype=self._param.dtype)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values


class Multinomial(Distribution):
    """Counts of ``total_count`` draws from a categorical distribution with ``probs`` (or ``logits``)."""
    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, Number):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        self._binomial = Binomial(total_count=total_count, probs=self.probs)
        batch_shape = self._categorical.batch_shape
        event_shape = self._categorical.param_shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Multinomial, _instance)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        new._binomial = Binomial(total_count=self.total_count, probs=new._categorical.probs,
                                 validate_args=False)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def param_shape(self):
        return self._categorical.param_shape

    def sample(self, sample_shape=()):
        sample_shape = as_size(sample_shape)
        samples = self._categorical.sample((self.total_count,) + tuple(sample_shape))
        counts = _jg.nn.functional.one_hot(samples, self._categorical._num_events).sum(0)
        return counts.to(self.probs.dtype)

    def entropy(self):
        n = _jg.tensor(self.total_count)
        cat_entropy = self._categorical.entropy()
        term1 = n * cat_entropy - _jg.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = _jg.exp(self._binomial.log_prob(support))
        weights = _jg.lgamma(support + 1)
        term2 = (binomial_probs * weights).sum([0, -1])
        return term1 + term2

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = _jg.lgamma(value.sum(-1) + 1)
        log_factorial_xs = _jg.lgamma(value + 1).sum(-1)
        logits = _jg.where((value == 0) & (logits == -math.inf), 0.0, logits)
        log_powers = (logits * value).sum(-1)
        return log_factorial_n - log_factorial_xs + log_powers


_POISSON_INVERSION_TERMS = 48      # P(X >= 48) < 1e-14 for rates below 10
_POISSON_ROUNDS = 12               # PTRS accepts above 87% per round for rates of at least 10


def _poisson_draw(rate):
    """Poisson(rate) draws of rate's shape (no gradient)."""
    with _jg.no_grad():
        shape = tuple(rate.shape)
        small_rate = rate.clamp(max=10.0)
        k = _jg.arange(_POISSON_INVERSION_TERMS, dtype=rate.dtype)
        r = small_rate.unsqueeze(-1)
        cdf = _jg.exp(_jg.xlogy(k, r) - r - _jg.lgamma(k + 1)).cumsum(-1)
        u = standard_uniform(shape, rate).unsqueeze(-1)
        small = (cdf <= u).to(rate.dtype).sum(-1)
        # PTRS (Hoermann 1993), as NumPy's random_poisson_ptrs, with a fixed number of rounds
        lam = rate.clamp(min=10.0)
        slam, loglam = lam.sqrt(), lam.log()
        b = 0.931 + 2.53 * slam
        a = -0.059 + 0.02483 * b
        invalpha = 1.1239 + 1.1328 / (b - 3.4)
        vr = 0.9277 - 3.6224 / (b - 2)
        U = standard_uniform((_POISSON_ROUNDS,) + shape, rate) - 0.5
        V = open_uniform((_POISSON_ROUNDS,) + shape, rate)
        us = (0.5 - U.abs()).clamp(min=tiny_of(rate))
        kk = ((2 * a / us + b) * U + lam + 0.43).floor()
        quick = (us >= 0.07) & (V <= vr)
        kpos = kk.clamp(min=0)
        slow = ((kk >= 0) & ~((us < 0.013) & (V > us))
                & (V.log() + invalpha.log() - (a / (us * us) + b).log() <= -lam + kpos * loglam - _jg.lgamma(kpos + 1)))
        accept = quick | slow
        first = _jg.argmax(accept.to(_jg.int32), dim=0, keepdim=True)
        large = _jg.gather(kk, 0, first).squeeze(0)
        large = _jg.where(accept.any(0), large, lam.floor())
        return _jg.where(rate < 10, small, large)


class Poisson(Distribution):
    """The Poisson distribution with ``rate`` (mean)."""
    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Poisson, batch_shape, ("rate",), _instance)

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        return _poisson_draw(self.rate.detach().expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        rate, value = broadcast_all(self.rate, value)
        return _jg.xlogy(value, rate) - rate - _jg.lgamma(value + 1)


class Geometric(Distribution):
    """The number of failures before the first success in Bernoulli trials of probability ``probs``."""
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        probs_or_logits = probs if probs is not None else logits
        batch_shape = () if isinstance(probs_or_logits, Number) else probs_or_logits.shape
        super().__init__(batch_shape, validate_args=validate_args)
        if self._validate_args and probs is not None and is_concrete(self.probs):
            value = self.probs
            valid = value > 0
            if not bool(valid.all()):
                raise ValueError(f"Expected parameter probs ({type(value).__name__} of shape "
                                 f"{tuple(value.shape)}) of distribution {repr(self)} to be positive but found "
                                 f"invalid values:\n{value.detach()[~valid]}")

    def expand(self, batch_shape, _instance=None):
        return expand_params(self, Geometric, batch_shape, ("probs", "logits"), _instance)

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        return _jg.zeros_like(self.probs)

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    def sample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        with _jg.no_grad():
            p = self.probs.detach()
            u = open_uniform(shape, p)
            return (u.log() / (-p).log1p()).floor()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        probs = _jg.where((probs == 1) & (value == 0), 0.0, probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        return _BCE(self.logits, self.probs, reduction="none") / self.probs
